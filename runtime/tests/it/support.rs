//! Running the real `lite-node` binary with a controlled environment.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use lite_node::{
    compute::{self, LoadedPackage, executor::Task},
    config::{ComputeConfig, EnvSnapshot},
};
use lite_node_plugin_api::EpochContext;
pub use lite_node_testkit::node_env;
use lite_node_testkit::{GitFixture, RunningCollector, RunningNode, toolchain_env, workspace_root};
use tempfile::TempDir;

/// A `lite-node` invocation with its own data dir and a cleared environment.
pub struct Node {
    pub data: TempDir,
    pub cwd: TempDir,
    env: Vec<(String, String)>,
}

/// What a run printed and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn assert_ok(&self) -> &Self {
        assert_eq!(self.code, 0, "expected success\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }

    /// The value of the first `key: value` line on stdout.
    pub fn field(&self, key: &str) -> Option<String> {
        let prefix = format!("{key}: ");
        self.stdout.lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
    }
}

impl Node {
    /// Compute packages are built as [`lite_node_testkit::compute_build_env`] says.
    pub fn new() -> Self {
        let data = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let mut env = toolchain_env();
        env.push(("LITE_NODE_DATA_DIR".into(), data.path().display().to_string()));
        env.extend(lite_node_testkit::compute_build_env());
        Self { data, cwd, env }
    }

    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value.into()));
        self
    }

    /// Points the node at a pinned compute repository.
    /// Pins the package at `path` of `repo` at `commit`.
    pub fn compute_repo(self, repo: &GitFixture, commit: &str, path: &str) -> Self {
        self.env("SNAPSHOTTER_COMPUTE_REPO", repo.url())
            .env("SNAPSHOTTER_COMPUTE_REPO_BRANCH", repo.branch.clone())
            .env("SNAPSHOTTER_COMPUTE_REPO_COMMIT", commit)
            .env("SNAPSHOTTER_COMPUTE_REPO_PATH", path)
    }

    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.run_in(self.cwd.path(), args)
    }

    /// [`Node::run`] from another directory.
    pub fn run_in(&self, dir: &Path, args: &[&str]) -> Run {
        let out: Output = Command::new(env!("CARGO_BIN_EXE_lite-node"))
            .args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir)
            .output()
            .expect("lite-node runs");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// A package from `lite-node compute new` at `parent/name`, as an author
/// starts one: its directory and the commit `compute new` made.
pub fn compute_new(parent: &Path, name: &str) -> (PathBuf, String) {
    let package = parent.join(name);
    let out = Command::new(env!("CARGO_BIN_EXE_lite-node"))
        .args(["compute", "new"])
        .arg(&package)
        .env_clear()
        .envs(toolchain_env())
        .current_dir(parent)
        .output()
        .expect("lite-node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "compute new:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let commit = lite_node_testkit::git(&package, &["rev-parse", "HEAD"]);
    assert!(stdout.contains(&format!("(commit {commit})")), "compute new names its commit:\n{stdout}");
    (package, commit)
}

/// Replaces `from` (which must be there) with `to` in the file.
pub fn edit(file: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains(from), "{} has no `{from}`:\n{text}", file.display());
    std::fs::write(file, text.replace(from, to)).unwrap();
}

/// A repository holding a copy of this checkout's `computes/` at `computes/`,
/// without the plugin-api next to it, as a data market would publish it.
pub fn computes_repo() -> GitFixture {
    GitFixture::new(&[(&workspace_root().join("computes"), "computes")])
}

/// A repository holding the misbehaving fixture package at its root.
pub fn faulty_repo() -> GitFixture {
    GitFixture::new(&[(&lite_node_testkit::data("fixture-computes"), "")])
}

/// Entries under the package cache (none after a failed fetch or build).
pub fn cached_packages(data: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(data.join("compute").join("packages"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Builds (or reuses) and loads the fixture package with a fresh data dir.
pub fn load_faulty(data: &std::path::Path) -> LoadedPackage {
    load_repo(data, &faulty_repo())
}

/// Builds (or reuses) and loads the package of `repo` with a fresh data dir.
pub fn load_repo(data: &std::path::Path, repo: &GitFixture) -> LoadedPackage {
    let mut env = toolchain_env();
    env.extend(lite_node_testkit::compute_build_env());
    env.extend([
        ("LITE_NODE_DATA_DIR".to_owned(), data.display().to_string()),
        ("SNAPSHOTTER_COMPUTE_REPO".to_owned(), repo.url()),
        ("SNAPSHOTTER_COMPUTE_REPO_BRANCH".to_owned(), repo.branch.clone()),
        ("SNAPSHOTTER_COMPUTE_REPO_COMMIT".to_owned(), repo.commit.clone()),
    ]);
    let cfg = ComputeConfig::from_env(&EnvSnapshot::from_pairs(env)).unwrap();
    compute::load(&cfg).unwrap()
}

pub fn epoch(epoch_id: u64) -> EpochContext {
    task(epoch_id, "faulty").context()
}

/// Project `project_type` of slot 4 (of 10) for one epoch of block 100.
pub fn task(epoch_id: u64, project_type: &str) -> Task {
    Task {
        epoch_id,
        begin: 100,
        end: 100,
        day_id: 1,
        slot_id: 4,
        total_slots: 10,
        anchor_block: 0,
        namespace: "devnet-TEST-ETH".into(),
        project_type: project_type.into(),
        deadline: u64::MAX,
        sources: None,
    }
}

/// Starts `lite-node run` (this crate's binary) with `env` and data dir
/// `data`, and a `lite-node collector` for it to submit to.
/// Starts a collector for the node environment `env` and points `env` at it.
pub fn with_collector(env: &mut Vec<(String, String)>) -> RunningCollector {
    let collector = RunningCollector::start(Path::new(env!("CARGO_BIN_EXE_lite-node")), env);
    env.push(("LOCAL_COLLECTOR_HOST".into(), "127.0.0.1".into()));
    env.push(("LOCAL_COLLECTOR_PORT".into(), collector.port.to_string()));
    collector
}

pub fn start_node(env: &[(String, String)], data: &Path) -> RunningNode {
    let mut env = env.to_vec();
    let collector = with_collector(&mut env);
    let mut node = RunningNode::start(Path::new(env!("CARGO_BIN_EXE_lite-node")), &env, data);
    node.collector = Some(collector);
    node
}
