//! Builds a compute package with cargo, against the runtime's plugin-api.
//!
//! Cargo runs with `--config
//! patch.crates-io.lite-node-plugin-api.path=<its own copy>`, so a package is
//! never built against another interface than the one this runtime loads. Progress goes to `progress`; a failure keeps the tail of
//! cargo's output.

use std::{
    collections::VecDeque,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use serde::Deserialize;

use super::{ComputeError, plugin_api_src::PluginApiSource};
use lite_node_config::ComputeConfig;

use crate::progress::Progress;

/// How many lines of the compiler's output an error report keeps.
const TAIL_LINES: usize = 25;

/// A library the build produced.
#[derive(Clone, Debug)]
pub struct BuiltLibrary {
    /// The library's crate name (`block_details`).
    pub name: String,
    pub file: PathBuf,
}

#[derive(Deserialize)]
struct Message {
    reason: String,
    #[serde(default)]
    target: Option<Target>,
    #[serde(default)]
    filenames: Vec<PathBuf>,
    #[serde(default)]
    success: Option<bool>,
}

#[derive(Deserialize)]
struct Target {
    name: String,
    kind: Vec<String>,
}

/// Runs `cargo build --lib --workspace` on the compute workspace at `workspace`
/// and returns its cdylibs. `describe` names the package in errors.
pub fn build(
    workspace: &Path,
    cfg: &ComputeConfig,
    api: &PluginApiSource,
    describe: &str,
) -> Result<Vec<BuiltLibrary>, ComputeError> {
    let manifest = workspace.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(ComputeError::Build {
            package: describe.to_owned(),
            tail: format!("no Cargo.toml at {} (check SNAPSHOTTER_COMPUTE_REPO_PATH)", workspace.display()),
        });
    }
    let patch = format!("patch.crates-io.lite-node-plugin-api.path={:?}", api.dir.display().to_string());
    // A processor's panic must unwind to the plugin boundary, where it
    // becomes an error value: a package whose profile aborts on panic
    // would take every slot of the node down with it. A profile set in
    // cargo's configuration overrides the package's own.
    let unwind = format!("profile.{}.panic=\"unwind\"", cargo_profile_name(&cfg.profile));
    let mut cmd = Command::new(&cfg.cargo);
    cmd.arg("build")
        .args(["--lib", "--workspace", "--message-format=json-render-diagnostics", "--profile", &cfg.profile])
        .arg("--config")
        .arg(&patch)
        .arg("--config")
        .arg(&unwind)
        .arg("--manifest-path")
        .arg(&manifest)
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", &cfg.target_dir)
        .env("CARGO_TERM_COLOR", "never")
        .env("CARGO_TERM_PROGRESS_WHEN", "never")
        // Inherited jobserver or target settings from a parent cargo (tests,
        // `cargo run`) would redirect or throttle this build.
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .env_remove("CARGO_MAKEFLAGS")
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| ComputeError::Build {
        package: describe.to_owned(),
        tail: format!("cannot run {}: {e} (install a Rust toolchain or set LITE_NODE_CARGO)", cfg.cargo.display()),
    })?;

    // stderr carries rendered diagnostics; keep its tail for the error report.
    let stderr = child.stderr.take().expect("stderr is piped");
    let tail_reader = std::thread::spawn(move || {
        let mut tail = VecDeque::with_capacity(TAIL_LINES);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let t = line.trim_start();
            if ["Compiling ", "Downloaded ", "Downloading ", "Blocking ", "Updating ", "Locking ", "Adding "]
                .iter()
                .any(|p| t.starts_with(p))
            {
                continue;
            }
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
        tail.into_iter().collect::<Vec<_>>().join("\n")
    });

    let mut progress = Progress::start(format!("building compute package {describe}"));
    let mut compiled = 0usize;
    let mut libraries = Vec::new();
    let mut finished_ok = None;
    let stdout = child.stdout.take().expect("stdout is piped");
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let Ok(msg) = serde_json::from_str::<Message>(&line) else {
            continue;
        };
        match msg.reason.as_str() {
            "compiler-artifact" => {
                compiled += 1;
                let Some(target) = msg.target else { continue };
                progress.update(|| format!("{compiled} crates compiled, last {}", target.name));
                if target.kind.iter().any(|k| k == "cdylib") {
                    let suffix = std::env::consts::DLL_SUFFIX;
                    if let Some(file) = msg.filenames.into_iter().find(|f| f.to_string_lossy().ends_with(suffix)) {
                        libraries.push(BuiltLibrary { name: target.name.replace('-', "_"), file });
                    }
                }
            }
            "build-finished" => finished_ok = msg.success,
            _ => {}
        }
    }
    let status = child.wait();
    let tail = tail_reader.join().unwrap_or_default();
    let ok = matches!(status, Ok(s) if s.success()) && finished_ok != Some(false);
    if !ok {
        progress.abandon();
        if let Some(required) = required_interface(&tail) {
            return Err(ComputeError::Interface {
                package: describe.to_owned(),
                required,
                provided: api.version.clone(),
                wanted: wanted_requirement(&api.version),
                detail: " (cargo could not resolve it)".into(),
            });
        }
        let mut tail = tail;
        if tail.contains("no matching package named `lite-node-plugin-api`")
            || tail.contains("lite-node-plugin-api") && tail.contains("was not used")
        {
            tail.push_str(&format!(
                "\nhint: compute crates must depend on `lite-node-plugin-api = \"{}\"` (registry style); \
                 the runtime builds them against its own copy of that version",
                api.version
            ));
        }
        return Err(ComputeError::Build { package: describe.to_owned(), tail });
    }
    let n = libraries.len();
    progress.finish(&format!("{compiled} crates compiled, {n} {}", if n == 1 { "library" } else { "libraries" }));
    if libraries.is_empty() {
        return Err(ComputeError::Build {
            package: describe.to_owned(),
            tail: "the build produced no cdylib: compute crates need `crate-type = [\"cdylib\", \"rlib\"]`".into(),
        });
    }
    Ok(libraries)
}

/// The plugin-api requirement cargo could not meet, from its error output
/// (`failed to select a version for the requirement
/// \`lite-node-plugin-api = "^0.2"\``).
fn required_interface(tail: &str) -> Option<String> {
    let at = tail.find("failed to select a version for the requirement `lite-node-plugin-api = \"")?;
    let rest = &tail[at..];
    let start = rest.find('"')? + 1;
    let end = start + rest[start..].find('"')?;
    Some(rest[start..end].to_owned())
}

/// What a crate should require to get `version`: `0.1` for `0.1.0`, `1` for
/// `1.2.0` (cargo's caret compatibility).
pub fn wanted_requirement(version: &str) -> String {
    let parts: Vec<&str> = version.split('.').collect();
    match parts.as_slice() {
        ["0", minor, ..] => format!("0.{minor}"),
        [major, ..] => (*major).to_owned(),
        _ => version.to_owned(),
    }
}

/// Writes `dir`'s `Cargo.lock` when it has none (offline first, from what
/// cargo has fetched before; else from the registry): a package's
/// dependencies are pinned before its identity is taken, or the lock its
/// first build writes would make it another package at the next command.
/// Whether a lock was written.
pub fn lock_dependencies(cargo: &Path, dir: &Path) -> Result<bool, String> {
    if dir.join("Cargo.lock").exists() {
        return Ok(false);
    }
    let mut last = String::new();
    for offline in [true, false] {
        let mut cmd = Command::new(cargo);
        cmd.arg("generate-lockfile").arg("--manifest-path").arg(dir.join("Cargo.toml")).current_dir(dir);
        if offline {
            cmd.arg("--offline");
        }
        cmd.env("CARGO_TERM_COLOR", "never").env_remove("CARGO_MAKEFLAGS");
        let out = cmd.output().map_err(|e| format!("running {} generate-lockfile: {e}", cargo.display()))?;
        if out.status.success() {
            return Ok(true);
        }
        last = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    }
    Err(format!("cargo generate-lockfile in {}: {last}", dir.display()))
}

/// The `[profile.*]` table `--profile name` builds with (`test` and `bench`
/// are `dev` and `release` for libraries).
fn cargo_profile_name(profile: &str) -> &str {
    match profile {
        "test" => "dev",
        "bench" => "release",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unmet_interface_requirement_is_read_from_cargo() {
        let tail = "error: failed to select a version for the requirement `lite-node-plugin-api = \"^0.2\"`\n\
                    candidate versions found which didn't match: 0.1.0";
        assert_eq!(required_interface(tail).as_deref(), Some("^0.2"));
        assert_eq!(required_interface("error: something else"), None);
        assert_eq!(wanted_requirement("0.1.0"), "0.1");
        assert_eq!(wanted_requirement("1.4.2"), "1");
    }
}
