//! Computes: the package they come from (where it comes from, how it is
//! built, where the built libraries are cached, how they are loaded), the
//! host they run against, and the [`executor::Executor`] that runs them.
//!
//! A package is identified by its source (commit and workspace path, or the
//! content of the bundled workspace), the rustc that builds it, the plugin-api
//! it is built against, and the cargo profile. Built libraries live under
//! `<data dir>/compute/packages/<id>/`, written atomically (staging directory +
//! rename) under a file lock, so a restart with the same pin runs neither git
//! nor cargo and two nodes starting together build once.
//!
//! The id is the commit and workspace path, rustc's `-vV`, the plugin-api
//! version and a hash of its content, and the profile. An entry exists only
//! complete: it is assembled in `compute/staging/out` and renamed into
//! `compute/packages/` under `compute/build.lock`. Every library is opened by
//! its own path (`loader`) and never unloaded; every build gets its own
//! directory.

mod cargo_build;
pub mod dispatch;
pub mod executor;
pub mod host;
pub(crate) mod loader;
pub(crate) mod memo;
mod plugin_api_src;
mod progress;
mod projects;
pub mod queue;
pub(crate) mod repo;
pub mod scaffold;
pub mod selection;
pub mod snapshots;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use loader::{Listed, LoadedLibrary, LoadedPackage};
pub use plugin_api_src::PluginApiSource;
pub use projects::load_projects;

/// Fetches `pin` into a new directory under `dest` (which must not exist),
/// checks out its commit and verifies it: what `lite-node market pin`
/// checks before the market's manifest names a package or a projects file.
pub fn fetch_pin(pin: &lite_node_config::GitPin, dest: &Path, what: &str) -> Result<String, ComputeError> {
    Ok(repo::checkout(pin, dest, what)?)
}

use lite_node_config::{ComputeConfig, ComputeSource};

use crate::repo::RepoError;

/// Why the compute package could not be fetched, built or loaded.
#[derive(Debug, thiserror::Error)]
pub enum ComputeError {
    #[error(transparent)]
    Fetch(#[from] RepoError),
    #[error("compute package {package} failed to build:\n{tail}")]
    Build { package: String, tail: String },
    #[error("compute package {package} is not in the cache ({dir}); run `lite-node compute fetch` first")]
    NotCached { package: String, dir: String },
    #[error("{0}")]
    Load(String),
    /// The package was written for another plugin interface than this node
    /// provides: only another commit of it (or another node) can help.
    #[error("{}", interface_text(.package, .required, .provided, .wanted, .detail))]
    Interface { package: String, required: String, provided: String, wanted: String, detail: String },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}

/// What [`ComputeError::Interface`] says: the same version with other
/// layouts is an interface copy that was edited (a package keeps one in
/// `plugin-api/`); another version needs another commit or node.
fn interface_text(package: &str, required: &str, provided: &str, wanted: &str, detail: &str) -> String {
    if required == provided {
        return format!(
            "compute package {package} was built against a lite-node-plugin-api {provided} whose types are not this \
             node's{detail}\nthe interface crate was changed: restore the package's copy (`git checkout -- \
             plugin-api/` in it, or copy `plugin-api/` from a package `lite-node compute new` writes) and keep \
             your changes in your own crates; the interface is this node's to define"
        );
    }
    format!(
        "compute package {package} needs lite-node-plugin-api {required}, this node provides {provided}{detail}\n\
         a compute package is built against the interface of the node that runs it: pin a commit of the package \
         written for lite-node-plugin-api {provided} (its crates depend on `lite-node-plugin-api = \"{wanted}\"`), \
         or run the node version it was written for; fetching again cannot fix this"
    )
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ComputeError {
    let what = what.into();
    move |source| ComputeError::Io { what, source }
}

/// What a cached package records about itself (`package.json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    /// `git` or `bundled`.
    pub source: String,
    /// Repository URL with credentials removed, or the bundled directory.
    pub location: String,
    pub branch: Option<String>,
    /// The commit built; for a bundled workspace `local-<content hash>`.
    pub commit: String,
    pub path: String,
    pub rustc: String,
    pub plugin_api: String,
    pub profile: String,
    /// Library name → file name inside the package directory.
    pub libraries: Vec<ManifestLibrary>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ManifestLibrary {
    pub name: String,
    pub file: String,
}

/// A built package in the cache.
#[derive(Clone, Debug)]
pub struct Package {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// True when this call built it; false when it came from the cache.
    pub built_now: bool,
}

/// Whether a missing package may be fetched and built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    Allowed,
    CacheOnly,
}

/// Marks `package` as used now (`<package>/last-used`), so pruning on a host
/// whose nodes share the cache keeps it.
pub fn mark_used(package: &Package) -> std::io::Result<()> {
    let now = lite_node_core::time::now_secs();
    lite_node_core::atomic_file::write(&package.dir.join("last-used"), now.to_string().as_bytes())
}

/// Removes cached packages other than `keep` that no node has used for
/// `unused_for` (under the build lock, so never one being published; skipped
/// while another node builds). Returns the removed directories.
pub fn prune_unused(cache_dir: &Path, keep: &Path, unused_for: std::time::Duration) -> std::io::Result<Vec<PathBuf>> {
    let packages = cache_dir.join("packages");
    let Ok(entries) = fs::read_dir(&packages) else { return Ok(Vec::new()) };
    let lock = fs::File::create(cache_dir.join("build.lock"))?;
    if lock.try_lock().is_err() {
        return Ok(Vec::new());
    }
    let mut removed = Vec::new();
    for dir in entries.flatten().map(|e| e.path()).filter(|d| d.is_dir() && d != keep) {
        let used = fs::metadata(dir.join("last-used")).or_else(|_| fs::metadata(&dir)).and_then(|m| m.modified());
        if used.is_ok_and(|t| t.elapsed().is_ok_and(|age| age > unused_for)) {
            fs::remove_dir_all(&dir)
                .map_err(|e| std::io::Error::new(e.kind(), format!("removing {}: {e}", dir.display())))?;
            removed.push(dir);
        }
    }
    Ok(removed)
}

/// The configured package, fetched and built when it is not in the cache,
/// and loaded: the one way every verb gets its processors' library.
pub fn load(cfg: &ComputeConfig) -> Result<LoadedPackage, ComputeError> {
    LoadedPackage::load(ensure(cfg, Fetch::Allowed)?)
}

/// [`load`], opening only the libraries `projects` name (and one that
/// implements the slot assignment): what a node runs.
pub fn load_for(cfg: &ComputeConfig, projects: &lite_node_config::Projects) -> Result<LoadedPackage, ComputeError> {
    let modules: Vec<&str> = projects.projects.iter().map(|p| p.module.as_str()).collect();
    LoadedPackage::load_only(ensure(cfg, Fetch::Allowed)?, &modules)
}

/// The package's processor for each project, in order; the first that
/// cannot be made is named (a project that does not fit the package: bad
/// input for the caller).
pub fn processors(
    package: &LoadedPackage,
    projects: impl IntoIterator<Item = lite_node_config::Project>,
) -> Result<Vec<executor::ProjectProcessor>, String> {
    let mut processors = Vec::new();
    for project in projects {
        let processor = package.project_processor(&project)?;
        processors.push(executor::ProjectProcessor { project, processor: std::sync::Arc::new(processor) });
    }
    Ok(processors)
}

/// Returns the built package for `cfg`, building it first when allowed.
pub fn ensure(cfg: &ComputeConfig, fetch: Fetch) -> Result<Package, ComputeError> {
    let root = cfg.cache_dir.clone();
    let api = match &cfg.plugin_api_dir {
        Some(dir) => {
            PluginApiSource::from_dir(dir).map_err(io(format!("LITE_NODE_PLUGIN_API_DIR {}", dir.display())))?
        }
        None => {
            PluginApiSource::embedded(&interface_home(cfg)).map_err(io("writing the embedded plugin-api source"))?
        }
    };
    let rustc = rustc_version(cfg)?;
    let describe = describe(&cfg.source);
    let identity = match &cfg.source {
        // A pinned commit is its own identity; an unpinned one is known only
        // after asking the remote, so it is resolved under the lock below.
        ComputeSource::Git { pin, path } => pin.commit.clone().map(|c| (c, path.display().to_string())),
        ComputeSource::Bundled(dir) => {
            // A node run inside the package (an author's `./data`) must not
            // hash its own cache and builds into the package's identity.
            let own = [&cfg.data_dir, &cfg.cache_dir, &cfg.target_dir];
            if dir.join("Cargo.toml").is_file()
                && cargo_build::lock_dependencies(&cfg.cargo, dir).map_err(ComputeError::Load)?
            {
                tracing::info!(
                    "wrote {}: it pins the package's dependencies; commit it with the package",
                    dir.join("Cargo.lock").display()
                );
            }
            Some((bundled_id(dir, &own)?, String::new()))
        }
    };
    if let Some((commit, path)) = &identity {
        let dir = root.join("packages").join(package_dir_name(commit, path, &rustc, &api, &cfg.profile));
        if let Some(manifest) = read_manifest(&dir) {
            return Ok(Package { dir, manifest, built_now: false });
        }
        if fetch == Fetch::CacheOnly {
            return Err(ComputeError::NotCached { package: describe, dir: dir.display().to_string() });
        }
    } else if fetch == Fetch::CacheOnly {
        return Err(ComputeError::NotCached { package: describe, dir: root.join("packages").display().to_string() });
    }

    fs::create_dir_all(&root).map_err(io(format!("creating {}", root.display())))?;
    let lock = fs::File::create(root.join("build.lock")).map_err(io("creating the build lock"))?;
    if lock.try_lock().is_err() {
        tracing::info!("another node is building the compute package; waiting for it");
        lock.lock().map_err(io("waiting for the build lock"))?;
    }
    // Fixed staging paths (we hold the lock) keep cargo's incremental state
    // useful from one build to the next.
    let staging = root.join("staging");
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(io(format!("clearing {}", staging.display())))?;
    }
    fs::create_dir_all(&staging).map_err(io(format!("creating {}", staging.display())))?;
    let src = staging.join("src");
    let (commit, path, workspace, location, branch) = match &cfg.source {
        ComputeSource::Git { pin, path } => {
            let commit = repo::checkout(pin, &src, "compute package")?;
            let workspace = src.join(path);
            (
                commit,
                path.display().to_string(),
                workspace,
                lite_node_config::redact_url(&pin.url),
                Some(pin.branch.clone()),
            )
        }
        ComputeSource::Bundled(dir) => {
            let (commit, _) = identity.clone().expect("bundled identity computed above");
            (commit, String::new(), dir.clone(), dir.display().to_string(), None)
        }
    };
    let dir = root.join("packages").join(package_dir_name(&commit, &path, &rustc, &api, &cfg.profile));
    if let Some(manifest) = read_manifest(&dir) {
        // Built by another node while we waited for the lock.
        let _ = fs::remove_dir_all(&staging);
        return Ok(Package { dir, manifest, built_now: false });
    }
    let pinned = matches!(&cfg.source, ComputeSource::Git { pin, .. } if pin.commit.is_some());
    let described = if pinned { describe } else { format!("{describe} at {commit}") };
    let libraries = cargo_build::build(&workspace, cfg, &api, &described)?;

    // A build that cannot be loaded is not cached: the next start would only
    // fail the same way.
    for lib in &libraries {
        if let Err(e) = loader::check_library(&lib.name, &lib.file, &described) {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
    }
    let out = staging.join("out");
    fs::create_dir_all(&out).map_err(io(format!("creating {}", out.display())))?;
    let mut entries = Vec::new();
    for lib in &libraries {
        let file = lib.file.file_name().expect("artifact has a file name").to_string_lossy().into_owned();
        fs::copy(&lib.file, out.join(&file)).map_err(io(format!("copying {}", lib.file.display())))?;
        entries.push(ManifestLibrary { name: lib.name.clone(), file });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let manifest = Manifest {
        source: if branch.is_some() { "git" } else { "local" }.to_owned(),
        location,
        branch,
        commit,
        path,
        rustc,
        plugin_api: api.id(),
        profile: cfg.profile.clone(),
        libraries: entries,
    };
    let json = serde_json::to_vec_pretty(&manifest).expect("manifest serializes");
    fs::write(out.join("package.json"), json).map_err(io("writing package.json"))?;
    fs::create_dir_all(root.join("packages")).map_err(io("creating the package cache"))?;
    fs::rename(&out, &dir).map_err(io(format!("moving the built package to {}", dir.display())))?;
    let _ = fs::remove_dir_all(&staging);
    Ok(Package { dir, manifest, built_now: true })
}

/// Where the embedded interface is written for `cfg`'s builds: under the
/// target dir, one copy per package source location. Cargo names a
/// package's artifacts by its name, version and place in its workspace, not
/// by where the workspace is, and judges them fresh by file times; so two
/// packages at different places whose crates share names (two authors'
/// `compute new` packages, two caches' checkouts) must not meet in one
/// target dir, or one could load the other's library. Their interface
/// copies at different paths keep their crates apart, while builds of one
/// place (every node and test building the bundled package, an author's
/// edits) share what cargo built.
fn interface_home(cfg: &ComputeConfig) -> PathBuf {
    let source = match &cfg.source {
        ComputeSource::Git { path, .. } => cfg.cache_dir.join("staging").join("src").join(path),
        ComputeSource::Bundled(dir) => dir.clone(),
    };
    let key = hex::encode(Sha256::digest(source.as_os_str().as_encoded_bytes()));
    cfg.target_dir.join("interfaces").join(&key[..16])
}

fn describe(source: &ComputeSource) -> String {
    match source {
        ComputeSource::Git { pin, path } if path.as_os_str().is_empty() => pin.describe(),
        ComputeSource::Git { pin, path } => format!("{} path {}", pin.describe(), path.display()),
        ComputeSource::Bundled(dir) => format!("local {}", dir.display()),
    }
}

/// `rustc -vV`: the toolchain is part of the cache key, since plugins and
/// runtime must agree on it only through abi_stable, and a toolchain change
/// should rebuild rather than surprise.
fn rustc_version(cfg: &ComputeConfig) -> Result<String, ComputeError> {
    let out = Command::new(&cfg.rustc).arg("-vV").output().map_err(|e| ComputeError::Io {
        what: format!("running {} -vV (a Rust toolchain is needed to build compute packages)", cfg.rustc.display()),
        source: e,
    })?;
    if !out.status.success() {
        return Err(ComputeError::Load(format!(
            "{} -vV failed: {}",
            cfg.rustc.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The bundled workspace's identity: a hash of its files as git would
/// commit them — build output, hidden files and what its `.gitignore` rules
/// leave out are not part of it (a `data/` that a run inside the package
/// wrote must not make another package of it).
fn bundled_id(dir: &Path, own: &[&PathBuf]) -> Result<String, ComputeError> {
    let what = || format!("reading the bundled compute workspace {}", dir.display());
    if !dir.join("Cargo.toml").is_file() {
        return Err(ComputeError::Load(format!(
            "no compute package: SNAPSHOTTER_COMPUTE_REPO is not set and there is no bundled workspace at {} \
             (run from the lite-node checkout, or set SNAPSHOTTER_COMPUTE_REPO, _BRANCH and _COMMIT)",
            dir.display()
        )));
    }
    let root = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let skipped: Vec<PathBuf> = own
        .iter()
        .filter_map(|p| std::path::absolute(p).ok()?.strip_prefix(&root).ok().map(Path::to_path_buf))
        .filter(|rel| !rel.as_os_str().is_empty())
        .collect();
    let all = plugin_api_src::walk_kept(dir, &["target"], |_, _| true).map_err(io(what()))?;
    // Git's own answer (libgit2: the rules, and the index for what is
    // tracked although a rule matches it) only when a rule leaves anything
    // out: libgit2's start-up initializes OpenSSL, ~4 MiB a node would
    // keep resident for as long as it runs.
    let mut files = if ignore_rules_leave_out(&root, &all) {
        let ignored = GitIgnored::of(&root);
        plugin_api_src::walk_kept(dir, &["target"], |rel, is_dir| !ignored.ignores(rel, is_dir)).map_err(io(what()))?
    } else {
        all
    };
    files.retain(|rel| !skipped.iter().any(|s| rel.starts_with(s)));
    let mut contents = Vec::with_capacity(files.len());
    for rel in &files {
        contents.push(fs::read(dir.join(rel)).map_err(io(what()))?);
    }
    let hash = plugin_api_src::hash_files(files.iter().map(PathBuf::as_path).zip(contents.iter().map(Vec::as_slice)));
    Ok(format!("local-{}", &hash[..16]))
}

/// Whether git's ignore rules, as the `ignore` crate reads them (the
/// `.gitignore` files from the repository's root down, `.git/info/exclude`,
/// `core.excludesFile`), leave out any of `files` (relative to `dir`, as
/// [`plugin_api_src::walk_kept`] lists them). A walk that fails answers yes,
/// so git itself is asked.
fn ignore_rules_leave_out(dir: &Path, files: &[PathBuf]) -> bool {
    let walk = ignore::WalkBuilder::new(dir)
        .hidden(true)
        .parents(true)
        .ignore(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .require_git(true)
        .filter_entry(|e| e.depth() == 0 || e.file_name() != "target")
        .build();
    let mut kept = std::collections::HashSet::with_capacity(files.len());
    for entry in walk {
        let Ok(entry) = entry else { return true };
        if entry.file_type().is_some_and(|t| !t.is_dir())
            && let Ok(rel) = entry.path().strip_prefix(dir)
        {
            kept.insert(rel.to_path_buf());
        }
    }
    files.iter().any(|f| !kept.contains(f))
}

/// The ignore rules of the git repository a directory is in (none outside
/// one): what `git add` would leave out, unless it is tracked already.
struct GitIgnored {
    repo: Option<(git2::Repository, PathBuf)>,
    /// The index's paths, sorted (read once: few paths are ever asked).
    tracked: Vec<Vec<u8>>,
}

impl GitIgnored {
    fn of(dir: &Path) -> Self {
        // A repository whose index cannot be read ignores nothing: hashing
        // too much makes another package id, leaving a tracked file out
        // would make one package of two sources.
        let found = git2::Repository::discover(dir).ok().and_then(|repo| {
            let workdir = std::path::absolute(repo.workdir()?).ok()?;
            let below = dir.strip_prefix(&workdir).ok()?.to_path_buf();
            let mut tracked: Vec<Vec<u8>> = repo.index().ok()?.iter().map(|e| e.path).collect();
            tracked.sort_unstable();
            Some(((repo, below), tracked))
        });
        match found {
            Some((repo, tracked)) => Self { repo: Some(repo), tracked },
            None => Self { repo: None, tracked: Vec::new() },
        }
    }

    /// Whether `rel` (below the directory) is ignored and not tracked.
    fn ignores(&self, rel: &Path, is_dir: bool) -> bool {
        let Some((repo, below)) = &self.repo else { return false };
        let path = below.join(rel);
        // A trailing `/` lets a directory-only rule (`data/`) match.
        let asked = if is_dir { PathBuf::from(format!("{}/", path.display())) } else { path.clone() };
        if !repo.is_path_ignored(&asked).unwrap_or(false) {
            return false;
        }
        // Index paths use `/` whatever the platform.
        let key = path.to_string_lossy().replace('\\', "/");
        let key = if is_dir { format!("{key}/") } else { key };
        let at = self.tracked.partition_point(|p| p.as_slice() < key.as_bytes());
        let tracked = self
            .tracked
            .get(at)
            .is_some_and(|p| if is_dir { p.starts_with(key.as_bytes()) } else { p.as_slice() == key.as_bytes() });
        !tracked
    }
}

fn package_dir_name(commit: &str, path: &str, rustc: &str, api: &PluginApiSource, profile: &str) -> String {
    let mut h = Sha256::new();
    for part in [commit, path, rustc, &api.id(), profile] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    let key = hex::encode(h.finalize());
    let short = commit.get(..commit.len().min(if commit.starts_with("local-") { 22 } else { 12 })).unwrap_or(commit);
    format!("{short}-{}", &key[..16])
}

fn read_manifest(dir: &Path) -> Option<Manifest> {
    let bytes = fs::read(dir.join("package.json")).ok()?;
    let manifest: Manifest = serde_json::from_slice(&bytes).ok()?;
    manifest.libraries.iter().all(|l| dir.join(&l.file).is_file()).then_some(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edited_interface_copy_is_told_apart_from_another_version() {
        let edited = interface_text("p", "0.4.0", "0.4.0", "0.4", ": `Snapshot` incompatible type size");
        assert!(edited.contains("the interface crate was changed: restore the package's copy"), "{edited}");
        assert!(!edited.contains("pin a commit"), "{edited}");
        let other = interface_text("p", "0.5.0", "0.4.0", "0.4", "");
        assert!(
            other.contains("needs lite-node-plugin-api 0.5.0, this node provides 0.4.0")
                && other.contains("pin a commit")
        );
    }

    /// `git add` leaves out what `.gitignore` names, unless it is tracked:
    /// a file, a directory-only rule, and a tracked file under an ignored
    /// directory (which keeps only itself, not its directory's other files).
    #[test]
    fn ignored_means_ignored_and_untracked() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        fs::write(dir.path().join(".gitignore"), "*.log\ndata/\nbuilt/\n").unwrap();
        for f in ["a.log", "src.rs", "data/x", "built/kept", "built/other", "pkg/data/y"] {
            let path = dir.path().join(f);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, f).unwrap();
        }
        let mut index = repo.index().unwrap();
        index.add_path(Path::new("built/kept")).unwrap();
        index.write().unwrap();

        let at_root = GitIgnored::of(dir.path());
        let ignored = |g: &GitIgnored, rel: &str, is_dir| g.ignores(Path::new(rel), is_dir);
        assert!(ignored(&at_root, "a.log", false) && ignored(&at_root, "data", true));
        assert!(!ignored(&at_root, "src.rs", false) && !ignored(&at_root, "pkg", true));
        assert!(!ignored(&at_root, "built", true), "it holds a tracked file");
        assert!(!ignored(&at_root, "built/kept", false) && ignored(&at_root, "built/other", false));
        let below = GitIgnored::of(&dir.path().join("pkg"));
        assert!(ignored(&below, "data", true), "rules apply below the repository's root");
        let outside = tempfile::tempdir().unwrap();
        assert!(!ignored(&GitIgnored::of(outside.path()), "data", true), "no repository, no rules");

        // What decides whether git is asked at all: the rules alone, read
        // without libgit2, over the files the package's id would hash.
        let leave_out = |d: &Path| {
            let files = plugin_api_src::walk_kept(d, &["target"], |_, _| true).unwrap();
            ignore_rules_leave_out(d, &files)
        };
        assert!(leave_out(dir.path()), "a.log, data/ and built/ are matched");
        assert!(leave_out(&dir.path().join("pkg")), "the root's `data/` rule matches pkg/data");
        fs::create_dir_all(dir.path().join("clean/target")).unwrap();
        fs::write(dir.path().join("clean/lib.rs"), "").unwrap();
        fs::write(dir.path().join("clean/target/out"), "").unwrap();
        assert!(!leave_out(&dir.path().join("clean")), "nothing matched: git is not asked");
        fs::write(outside.path().join(".gitignore"), "*\n").unwrap();
        fs::write(outside.path().join("lib.rs"), "").unwrap();
        assert!(!leave_out(outside.path()), "no repository, no rules");
    }
}
