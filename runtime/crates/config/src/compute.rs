//! Where the compute package comes from and how it is built: `ComputeConfig`,
//! its pinned repository (`GitPin`), and where projects.json is read.

use std::path::{Path, PathBuf};

use lite_node_core::url::redact_url;

use crate::{ConfigErrors, EnvSnapshot, env::absolute};

/// A repository pinned to a commit (or, when explicitly allowed, a branch tip).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitPin {
    pub url: String,
    pub branch: String,
    /// Full 40-hex commit id; `None` only when unpinned use was allowed.
    pub commit: Option<String>,
}

impl GitPin {
    /// `repo (branch b, commit c)` with any credentials in the URL hidden.
    pub fn describe(&self) -> String {
        format!(
            "{} (branch {}, commit {})",
            redact_url(&self.url),
            self.branch,
            self.commit.as_deref().unwrap_or("unpinned")
        )
    }
}

/// Where the compute package comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComputeSource {
    /// The `computes/` workspace of the checkout the node runs from.
    Bundled(PathBuf),
    /// A pinned repository; `path` is the workspace's directory inside it.
    Git { pin: GitPin, path: PathBuf },
}

/// How to obtain and build the compute package.
#[derive(Clone, Debug)]
pub struct ComputeConfig {
    pub source: ComputeSource,
    /// `LITE_NODE_DATA_DIR`, absolute.
    pub data_dir: PathBuf,
    /// Cargo profile for compute builds (`LITE_NODE_COMPUTE_PROFILE`, default release).
    pub profile: String,
    /// Cargo target dir for compute builds (`LITE_NODE_COMPUTE_TARGET_DIR`,
    /// default `<data dir>/compute/target`).
    pub target_dir: PathBuf,
    /// Where built packages are cached (`LITE_NODE_COMPUTE_CACHE_DIR`, default
    /// `<data dir>/compute`); nodes on one machine may share it.
    pub cache_dir: PathBuf,
    /// Build against this plugin-api source instead of the embedded one
    /// (`LITE_NODE_PLUGIN_API_DIR`; for interface development).
    pub plugin_api_dir: Option<PathBuf>,
    /// The cargo to run (`LITE_NODE_CARGO`, default `cargo` on PATH).
    pub cargo: PathBuf,
    /// The rustc whose version keys the cache (`RUSTC`, default `rustc`).
    pub rustc: PathBuf,
    /// `LITE_NODE_COMPUTE_DIR`: an author's package directory, built as it
    /// is now (the source is then that directory, not a pinned commit).
    pub local_dir: Option<PathBuf>,
    /// The market's identity (`MARKET_*`, as `market env` prints it): the
    /// projects and package loaded must be the market's.
    pub market: crate::MarketIdentity,
}

/// Where projects.json comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProjectsSource {
    File(PathBuf),
    /// `file` is relative to the repository root.
    Git {
        pin: GitPin,
        file: PathBuf,
    },
}

impl ComputeConfig {
    /// Checks the variables that say where the compute package comes from
    /// and how to build it.
    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let allow_unpinned = env.flag("SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED", &mut problems);
        let source = match env.get("SNAPSHOTTER_COMPUTE_REPO") {
            // An author's working tree, built as it is now (not pinned: for
            // `compute run` and the devnet, not for a node that earns).
            None => match env.get("LITE_NODE_COMPUTE_DIR") {
                Some(dir) => {
                    let dir = absolute(Path::new(dir));
                    if !dir.join("Cargo.toml").is_file() {
                        problems.push(format!(
                            "LITE_NODE_COMPUTE_DIR={}: no Cargo.toml there (the compute package's workspace root)",
                            dir.display()
                        ));
                    }
                    ComputeSource::Bundled(dir)
                }
                None => ComputeSource::Bundled(bundled_computes_dir()),
            },
            Some(_) if env.get("LITE_NODE_COMPUTE_DIR").is_some() => {
                problems.push(
                    "SNAPSHOTTER_COMPUTE_REPO and LITE_NODE_COMPUTE_DIR are both set: give the pinned repository \
                     or the local directory, not both"
                        .into(),
                );
                ComputeSource::Bundled(bundled_computes_dir())
            }
            Some(url) => {
                let pin = git_pin(env, "SNAPSHOTTER_COMPUTE_REPO", url, allow_unpinned, &mut problems);
                let path = PathBuf::from(env.get("SNAPSHOTTER_COMPUTE_REPO_PATH").unwrap_or(""));
                if path.is_absolute() || path.components().any(|c| c == std::path::Component::ParentDir) {
                    problems.push(
                        "SNAPSHOTTER_COMPUTE_REPO_PATH must be a relative path inside the repository (e.g. computes)"
                            .into(),
                    );
                }
                ComputeSource::Git { pin, path }
            }
        };
        let data_dir = absolute(Path::new(env.get("LITE_NODE_DATA_DIR").unwrap_or("./data")));
        let profile = env.get("LITE_NODE_COMPUTE_PROFILE").unwrap_or("release").to_owned();
        if !profile.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            problems.push(format!("LITE_NODE_COMPUTE_PROFILE={profile} is not a cargo profile name"));
        }
        let target_dir = env
            .get("LITE_NODE_COMPUTE_TARGET_DIR")
            .map(|p| absolute(Path::new(p)))
            .unwrap_or_else(|| data_dir.join("compute").join("target"));
        let cache_dir = env
            .get("LITE_NODE_COMPUTE_CACHE_DIR")
            .map(|p| absolute(Path::new(p)))
            .unwrap_or_else(|| data_dir.join("compute"));
        let plugin_api_dir = env.get("LITE_NODE_PLUGIN_API_DIR").map(|p| absolute(Path::new(p)));
        let local_dir = env.get("LITE_NODE_COMPUTE_DIR").map(|p| absolute(Path::new(p)));
        let market = crate::MarketIdentity::from_env(env).map_err(|e| problems.extend(e.problems)).unwrap_or_default();
        if problems.is_empty() {
            Ok(Self {
                source,
                data_dir,
                profile,
                target_dir,
                cache_dir,
                plugin_api_dir,
                cargo: env.cargo(),
                rustc: PathBuf::from(env.get("RUSTC").unwrap_or("rustc")),
                local_dir,
                market,
            })
        } else {
            Err(ConfigErrors { problems })
        }
    }
}

/// The checkout this binary was built from (`runtime/crates/config/../../..`).
pub(crate) const CHECKOUT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../..");

/// Whether `dir` is the `computes/` of the checkout this binary was built
/// from (the last fallback of [`bundled_computes_dir`]): a path baked in at
/// compile time, which a node should not run unawares.
pub fn is_build_tree(dir: &Path) -> bool {
    let built_from = Path::new(CHECKOUT).join("computes");
    let here = absolute(Path::new("computes"));
    built_from.canonicalize().unwrap_or(built_from) == dir && here != dir
}

/// The compute package when none is named: the one the current directory
/// is in (an author's, found by its workspace manifest, which patches in
/// `lite-node-plugin-api`), else the checkout's `computes/` here, else the
/// one next to the runtime's sources this binary was built from.
pub(crate) fn bundled_computes_dir() -> PathBuf {
    let here = absolute(Path::new("computes"));
    if here.join("Cargo.toml").is_file() {
        return here;
    }
    if let Some(package) = enclosing_package(&absolute(Path::new("."))) {
        return package;
    }
    let built_from = Path::new(CHECKOUT).join("computes");
    built_from.canonicalize().unwrap_or(built_from)
}

/// The compute package workspace `dir` is in: the nearest directory at or
/// above it whose Cargo.toml is a workspace that patches in
/// `lite-node-plugin-api` (a package's; the node's own workspace builds the
/// interface as a member instead, and its package is `computes/`).
pub fn enclosing_package(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find_map(|d| {
        let text = std::fs::read_to_string(d.join("Cargo.toml")).ok()?;
        if !text.contains("[workspace]") {
            return None;
        }
        let patched = text.split("[patch.crates-io]").nth(1).is_some_and(|p| p.contains("lite-node-plugin-api"));
        if patched {
            return Some(d.to_path_buf());
        }
        let checkout = d.join("computes").join("Cargo.toml");
        checkout.is_file().then(|| d.join("computes"))
    })
}

/// The projects a data market defines, as a collector or validator is told
/// them: its namespace (`{POWERLOOM_CHAIN}-{NAMESPACE}-{SOURCE_CHAIN}`, the
/// three variables every node of the market sets) and its projects.json.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarketProjects {
    pub namespace: String,
    pub source: ProjectsSource,
}

impl MarketProjects {
    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let missing: Vec<&str> =
            ["POWERLOOM_CHAIN", "NAMESPACE", "SOURCE_CHAIN"].into_iter().filter(|k| env.get(k).is_none()).collect();
        if !missing.is_empty() {
            problems.push(format!(
                "{} not set: the data market's project namespace (POWERLOOM_CHAIN-NAMESPACE-SOURCE_CHAIN, as its \
                 nodes set them) is what submissions' project ids are checked against",
                missing.join(", ")
            ));
        }
        let source = ProjectsSource::from_env(env).map_err(|e| problems.extend(e.problems)).ok();
        match source {
            Some(source) if problems.is_empty() => {
                let part = |k: &str| env.get(k).unwrap_or_default().to_owned();
                let namespace = format!("{}-{}-{}", part("POWERLOOM_CHAIN"), part("NAMESPACE"), part("SOURCE_CHAIN"));
                Ok(Self { namespace, source })
            }
            _ => Err(ConfigErrors { problems }),
        }
    }
}

impl ProjectsSource {
    /// Whether the environment names projects.json at all (`PROJECTS_CONFIG`
    /// or `SNAPSHOT_CONFIG_REPO`).
    pub fn configured(env: &EnvSnapshot) -> bool {
        env.get("PROJECTS_CONFIG").is_some() || env.get("SNAPSHOT_CONFIG_REPO").is_some()
    }

    /// `PROJECTS_CONFIG`, or the pinned `SNAPSHOT_CONFIG_REPO{,_BRANCH,_COMMIT}`.
    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let source = match env.get("SNAPSHOT_CONFIG_REPO") {
            None => ProjectsSource::File(absolute(Path::new(env.get("PROJECTS_CONFIG").unwrap_or("./projects.json")))),
            Some(url) => {
                let allow = env.flag("SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED", &mut problems);
                let pin = git_pin(env, "SNAPSHOT_CONFIG_REPO", url, allow, &mut problems);
                let file = PathBuf::from(env.get("PROJECTS_CONFIG").unwrap_or("projects.json"));
                if file.is_absolute() || file.components().any(|c| c == std::path::Component::ParentDir) {
                    problems.push(
                        "PROJECTS_CONFIG must be a relative path inside the repository when SNAPSHOT_CONFIG_REPO is set"
                            .into(),
                    );
                }
                ProjectsSource::Git { pin, file }
            }
        };
        if problems.is_empty() { Ok(source) } else { Err(ConfigErrors { problems }) }
    }
}

pub(crate) fn git_pin(
    env: &EnvSnapshot,
    prefix: &str,
    url: &str,
    allow_unpinned: bool,
    problems: &mut Vec<String>,
) -> GitPin {
    let branch_key = format!("{prefix}_BRANCH");
    let commit_key = format!("{prefix}_COMMIT");
    let branch = env.get(&branch_key).unwrap_or_default().to_owned();
    if branch.is_empty() {
        problems.push(format!("{branch_key} is required when {prefix} is set (the branch that holds the commit)"));
    }
    let commit = match env.get(&commit_key) {
        Some(c) if c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()) => Some(c.to_ascii_lowercase()),
        Some(c) => {
            problems.push(format!(
                "{commit_key}={c} is not a full commit id: give all 40 hex digits (git rev-parse <commit>)"
            ));
            None
        }
        None if allow_unpinned => None,
        None => {
            problems.push(format!(
                "{commit_key} is not set: the node runs only a pinned commit of {prefix}; set it to a 40-hex commit id, \
                 or set SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED=true to follow the tip of {branch_key}"
            ));
            None
        }
    };
    GitPin { url: url.to_owned(), branch, commit }
}
