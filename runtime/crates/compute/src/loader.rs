//! Loads a built package's libraries through abi_stable and builds processors.
//!
//! Each library is opened by its own path with `lib_header_from_path`, since
//! `RootModule::load_from_file` caches one module per interface type and would
//! hand back the first library for every other path.

use abi_stable::{
    library::{LibraryError, lib_header_from_path},
    std_types::{RStr, RString},
};
use lite_node_plugin_api::{AssignmentRequest, Assignments, ComputeModuleRef, PLUGIN_API_VERSION, ProcessorBox};

use super::{ComputeError, Package};

/// How many lines of abi_stable's layout report to show (it runs to hundreds).
const MISMATCH_LINES: usize = 12;

/// One loaded library and the processors it exports.
pub struct LoadedLibrary {
    pub name: String,
    /// The plugin-api version the library was built against.
    pub api_version: String,
    pub processors: Vec<Listed>,
    module: ComputeModuleRef,
}

/// A processor as its library lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub class_name: String,
    pub description: String,
    /// The preload tasks its project must list (`block_details`).
    pub needs: Vec<String>,
}

impl std::fmt::Debug for LoadedLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedLibrary")
            .field("name", &self.name)
            .field("api_version", &self.api_version)
            .field("processors", &self.processors)
            .finish_non_exhaustive()
    }
}

/// A package whose libraries are all loaded.
#[derive(Debug)]
pub struct LoadedPackage {
    pub package: Package,
    pub libraries: Vec<LoadedLibrary>,
}

impl LoadedPackage {
    /// Opens every library of `package`.
    pub fn load(package: Package) -> Result<Self, ComputeError> {
        let all: Vec<usize> = (0..package.manifest.libraries.len()).collect();
        let mut loaded = Self { package, libraries: Vec::new() };
        loaded.open(&all)?;
        Ok(loaded)
    }

    /// Opens the libraries `modules` name (projects.json's `module`s) and,
    /// when none of them implements the market's slot assignment, the
    /// package's others in order until one does: a node maps no library it
    /// does not run (each is a few hundred kilobytes of code, for as long
    /// as the node runs). A module the package lacks is not an error here:
    /// [`Self::library`] names it, and what the package has, when asked.
    pub fn load_only(package: Package, modules: &[&str]) -> Result<Self, ComputeError> {
        let wanted: Vec<String> = modules.iter().map(|m| m.replace('-', "_")).collect();
        let (named, rest): (Vec<usize>, Vec<usize>) =
            (0..package.manifest.libraries.len()).partition(|&i| wanted.contains(&package.manifest.libraries[i].name));
        let mut loaded = Self { package, libraries: Vec::new() };
        loaded.open(&named)?;
        for i in rest {
            if loaded.libraries.iter().any(LoadedLibrary::provides_assignments) {
                break;
            }
            loaded.open(&[i])?;
        }
        Ok(loaded)
    }

    fn open(&mut self, which: &[usize]) -> Result<(), ComputeError> {
        let package = &self.package;
        let libraries = &mut self.libraries;
        for lib in which.iter().map(|&i| &package.manifest.libraries[i]) {
            let path = package.dir.join(&lib.file);
            let header = lib_header_from_path(&path).map_err(|e| load_error(&lib.name, &path, e))?;
            let library_version = header.version_strings().version.to_string();
            let module = header
                .init_root_module::<ComputeModuleRef>()
                .map_err(|e| mismatch_error(&lib.name, &library_version, e))?;
            let processors = (module.processors())()
                .into_iter()
                .map(|p| Listed {
                    class_name: p.class_name.into_string(),
                    description: p.description.into_string(),
                    needs: p.needs.into_iter().map(RString::into_string).collect(),
                })
                .collect();
            let api_version = (module.api_version())().to_string();
            libraries.push(LoadedLibrary { name: lib.name.clone(), api_version, processors, module });
        }
        Ok(())
    }

    pub fn library(&self, module: &str) -> Result<&LoadedLibrary, ComputeError> {
        let module = module.replace('-', "_");
        self.libraries.iter().find(|l| l.name == module).ok_or_else(|| {
            if self.package.manifest.libraries.iter().any(|l| l.name == module) {
                return ComputeError::Load(format!(
                    "library `{module}` of the compute package {} was not opened: no project of projects.json names it",
                    self.package.manifest.commit
                ));
            }
            let names: Vec<_> = self.package.manifest.libraries.iter().map(|l| l.name.as_str()).collect();
            let m = &self.package.manifest;
            ComputeError::Load(format!(
                "library `{module}` is not in the compute package {} ({}); it has: {} — if `{module}` is in another \
                 package, point at it: LITE_NODE_COMPUTE_DIR=<its directory> (as it is now), or \
                 SNAPSHOTTER_COMPUTE_REPO, _BRANCH and _COMMIT (a commit of it)",
                m.commit,
                m.location,
                names.join(", ")
            ))
        })
    }

    /// Checks that `project` lists every preload task its processor needs
    /// (a processor reading block details that were never preloaded would
    /// fail every epoch): the error names the project and the fix.
    pub fn check_needs(&self, project: &lite_node_config::Project) -> Result<(), String> {
        let Ok(lib) = self.library(&project.module) else { return Ok(()) };
        let Some(listed) = lib.processors.iter().find(|p| p.class_name == project.class_name) else { return Ok(()) };
        let missing: Vec<&str> =
            listed.needs.iter().filter(|n| !project.preload_tasks.contains(n)).map(String::as_str).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut tasks: Vec<&str> = project.preload_tasks.iter().map(String::as_str).collect();
        tasks.extend(&missing);
        Err(format!(
            "project {}: processor {} needs the preload task(s) {}, which the project does not list; add \
             \"preload_tasks\": {} to it in projects.json",
            project.project_type,
            project.class_name,
            missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", "),
            serde_json::to_string(&tasks).expect("strings serialize")
        ))
    }

    /// The processor a project of projects.json names, built with its
    /// settings, once the project preloads what the processor needs; the
    /// error names the project.
    pub fn project_processor(&self, project: &lite_node_config::Project) -> Result<ProcessorBox, String> {
        self.check_needs(project)?;
        let settings = serde_json::Value::Object(project.settings.clone()).to_string();
        self.new_processor(&project.module, &project.class_name, &settings)
            .map_err(|e| format!("project {}: {e}", project.project_type))
    }

    /// Builds `class_name` from library `module` with the project's settings.
    pub fn new_processor(
        &self,
        module: &str,
        class_name: &str,
        settings_json: &str,
    ) -> Result<ProcessorBox, ComputeError> {
        let lib = self.library(module)?;
        (lib.module.new_processor())(RStr::from_str(class_name), RStr::from_str(settings_json))
            .into_result()
            .map_err(|e| ComputeError::Load(format!("library `{}`: {e}", lib.name)))
    }
}

impl LoadedLibrary {
    /// Whether this library implements the data market's slot assignment.
    pub fn provides_assignments(&self) -> bool {
        self.module.assignments().is_some()
    }

    /// The data market's slot assignment, as this library implements it.
    pub fn assignments(&self, request: &AssignmentRequest) -> Result<Assignments, String> {
        match self.module.assignments() {
            Some(rule) => rule(request).into_result().map_err(|e| e.into_string()),
            None => Err(format!("library `{}` does not implement slot assignments", self.name)),
        }
    }
}

fn load_error(name: &str, path: &std::path::Path, e: LibraryError) -> ComputeError {
    match e {
        LibraryError::GetSymbolError { .. } => ComputeError::Load(format!(
            "library `{name}` ({}) exports no compute module: does it call export_compute_module!?",
            path.display()
        )),
        LibraryError::InvalidAbiHeader(h) => ComputeError::Load(format!(
            "library `{name}` was built with abi_stable {}.{}, the runtime with another; rebuild it against lite-node-plugin-api {PLUGIN_API_VERSION}",
            h.abi_major, h.abi_minor
        )),
        other => ComputeError::Load(format!(
            "cannot open library `{name}` ({}): {}",
            path.display(),
            first_line(&other.to_string())
        )),
    }
}

/// Opens a freshly built library the way [`LoadedPackage::load`] will, so a
/// build the node could not load is refused before it is cached.
pub fn check_library(name: &str, path: &std::path::Path, package: &str) -> Result<(), ComputeError> {
    let header = lib_header_from_path(path).map_err(|e| load_error(name, path, e))?;
    let library_version = header.version_strings().version.to_string();
    match header.init_root_module::<ComputeModuleRef>() {
        Ok(_) => Ok(()),
        Err(e) => Err(match mismatch_error(name, &library_version, e) {
            ComputeError::Interface { required, provided, wanted, detail, .. } => {
                ComputeError::Interface { package: package.to_owned(), required, provided, wanted, detail }
            }
            other => other,
        }),
    }
}

fn mismatch_error(name: &str, library_version: &str, e: LibraryError) -> ComputeError {
    let detail = match &e {
        LibraryError::IncompatibleVersionNumber { expected_version, actual_version, .. } => {
            format!("interface versions differ (runtime {expected_version}, library {actual_version})")
        }
        LibraryError::AbiInstability(report) => {
            let text = report.to_string();
            tracing::debug!("full layout report for `{name}`:\n{text}");
            summarize_layout_report(&text)
        }
        other => first_line(&other.to_string()),
    };
    ComputeError::Interface {
        package: format!("library `{name}`"),
        required: library_version.to_owned(),
        provided: PLUGIN_API_VERSION.to_owned(),
        wanted: super::cargo_build::wanted_requirement(PLUGIN_API_VERSION),
        detail: format!(": {detail} (RUST_LOG=debug shows abi_stable's full report)"),
    }
}

/// Condenses abi_stable's layout report (hundreds of lines) to the type that
/// differs and how: "`BlockDetail` differs: incompatible type size (expected
/// 48, found 56)". Falls back to the report's last lines.
fn summarize_layout_report(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let found_at = lines.iter().rposition(|l| *l == "Layout of found type:");
    let type_name = found_at.and_then(|i| lines[i..].iter().find_map(|l| l.strip_prefix("type:")));
    let mut problems = Vec::new();
    let mut i = found_at.unwrap_or(0);
    while i < lines.len() {
        if let Some(what) = lines[i].strip_prefix("Error:") {
            let value = |label: &str, at: usize| {
                (lines.get(at) == Some(&label)).then(|| lines.get(at + 1).copied()).flatten().unwrap_or("?")
            };
            problems.push(format!("{what} (expected {}, found {})", value("Expected:", i + 1), value("Found:", i + 3)));
        }
        i += 1;
    }
    match (type_name, problems.is_empty()) {
        (Some(t), false) => format!("the interface layouts differ: `{t}` {}", problems.join("; ")),
        _ => {
            let tail = &lines[lines.len().saturating_sub(MISMATCH_LINES)..];
            format!("the interface layouts differ; last lines of the layout report:\n  {}", tail.join("\n  "))
        }
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_owned()
}
