//! `./init.sh` as the container runs it (no arguments): required variables,
//! the pinned compute package, `lite-node check`, `lite-node run`, and the
//! back-off after a failed run.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use lite_node_testkit::{World, node_env, poll_until, workspace_root};

use crate::support::computes_repo;

fn init_sh() -> Command {
    let mut cmd = Command::new(workspace_root().join("init.sh"));
    cmd.env_clear();
    cmd
}

#[test]
fn with_an_empty_environment_every_missing_required_variable_is_named_and_the_exit_code_is_2() {
    let out = init_sh()
        .env("PATH", lite_node_testkit::host_var("PATH"))
        .env("HOME", lite_node_testkit::host_var("HOME"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for var in lite_node::config::REQUIRED {
        assert!(stderr.contains(var), "{var} is not named: {stderr}");
    }
    let named = stderr.lines().next().unwrap().rsplit(": ").next().unwrap().split(' ').count();
    assert_eq!(named, lite_node::config::REQUIRED.len(), "init.sh and the node agree on the list: {stderr}");
}

/// A node's variables for `slot` of a loaded world, with this build of lite-node.
fn operator_env(world: &World, slot: u64, data: &std::path::Path) -> Vec<(String, String)> {
    let mut env = node_env(&world.url(), &world.manifest, slot);
    env.push(("LITE_NODE_BIN".into(), env!("CARGO_BIN_EXE_lite-node").into()));
    env.push(("LITE_NODE_DATA_DIR".into(), data.display().to_string()));
    env
}

#[test]
fn an_unpinned_compute_repo_is_refused_with_the_way_to_allow_it() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let repo = computes_repo();
    let out = init_sh()
        .envs(operator_env(&world, 1, data.path()))
        .env("SNAPSHOTTER_COMPUTE_REPO", repo.url())
        .env("SNAPSHOTTER_COMPUTE_REPO_BRANCH", &repo.branch)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("SNAPSHOTTER_COMPUTE_REPO_COMMIT is not set"), "{stderr}");
    assert!(stderr.contains("SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED=true"), "says how to allow it: {stderr}");
    assert!(!data.path().join("compute/packages").exists(), "nothing was fetched");
}

#[test]
fn init_sh_runs_a_node_that_processes_epochs_and_backs_off_after_its_failure() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let mut env = operator_env(&world, 4, data.path());
    let collector = lite_node_testkit::RunningCollector::start(bin, &env);
    env.extend([
        ("LOCAL_COLLECTOR_HOST".to_owned(), "127.0.0.1".to_owned()),
        ("LOCAL_COLLECTOR_PORT".into(), collector.port.to_string()),
        // The node is stuck once epochs stop: it exits with code 3.
        ("LITE_NODE_SAFETY_CHECK_SECS".into(), "1".into()),
        ("LITE_NODE_STUCK_AFTER_SECS".into(), "3".into()),
        ("LITE_NODE_RESTART_BACKOFF_MIN_SECS".into(), "1".into()),
        ("LITE_NODE_RESTART_BACKOFF_MAX_SECS".into(), "1".into()),
    ]);
    let log = data.path().join("init.log");
    let mut child = init_sh()
        .envs(env)
        .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(data.path().join("init.err")).unwrap()))
        .spawn()
        .unwrap();
    let text = || {
        std::fs::read_to_string(&log).unwrap_or_default()
            + &std::fs::read_to_string(data.path().join("init.err")).unwrap_or_default()
    };
    poll_until("the node to watch", Duration::from_secs(120), || {
        text().contains("watching ProtocolState").then_some(())
    });
    assert!(text().contains("ok   environment"), "lite-node check ran first: {}", text());
    world.release_next_epoch();
    world.release_next_epoch();
    poll_until("two processed epochs", Duration::from_secs(60), || {
        let journal = std::fs::read_to_string(data.path().join("state/epochs.jsonl")).unwrap_or_default();
        (journal.lines().count() >= 2).then_some(())
    });
    let status = poll_until("init.sh to exit", Duration::from_secs(60), || child.try_wait().unwrap());
    let text = text();
    assert_eq!(status.code(), Some(3), "{text}");
    assert!(text.contains("lite-node exited with code 3; waiting 1s before exiting"), "{text}");
    assert_eq!(collector.verdicts().len(), 2, "{:?}", collector.verdicts());
}

#[test]
fn sigterm_stops_the_node_in_order_and_init_sh_exits_0_without_a_back_off() {
    let watching = Watching::start();
    let (mut child, text) = (watching.child, || std::fs::read_to_string(&watching.err).unwrap_or_default());
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let status = poll_until("init.sh to exit", Duration::from_secs(60), || child.try_wait().unwrap());
    assert_eq!(status.code(), Some(0), "{}", text());
    assert!(text().contains("SIGTERM received"), "the node got the signal: {}", text());
    assert!(!text().contains("before exiting"), "no back-off after an orderly stop: {}", text());
}

/// Trial finding (issue 43): a node killed by a signal init.sh did not send
/// (here kill -9; the out-of-memory killer alike) ends init.sh at once with
/// the node's code, so a restart policy acts: no back-off with nothing
/// listening while the container's start period keeps it "healthy".
#[test]
fn a_node_killed_by_a_signal_ends_init_sh_at_once() {
    let watching = Watching::start();
    let (mut child, text) = (watching.child, || std::fs::read_to_string(&watching.err).unwrap_or_default());
    let killed = Command::new("pkill").args(["-KILL", "-P", &child.id().to_string(), "lite-node"]).status().unwrap();
    assert!(killed.success(), "the node was running under init.sh");
    let status = poll_until("init.sh to exit", Duration::from_secs(30), || child.try_wait().unwrap());
    assert_eq!(status.code(), Some(137), "{}", text());
    assert!(text().contains("killed by signal 9"), "{}", text());
    assert!(!text().contains("before exiting"), "no back-off after a crash: {}", text());
}

/// `./init.sh` running slot 3's node against a world and a collector, with
/// a back-off of 600 s should it take one, once the node watches the chain.
struct Watching {
    child: std::process::Child,
    /// init.sh's stderr (the node's log with it).
    err: std::path::PathBuf,
    _world: World,
    _data: tempfile::TempDir,
    _collector: lite_node_testkit::RunningCollector,
}

impl Watching {
    fn start() -> Self {
        let world = World::load();
        let data = tempfile::tempdir().unwrap();
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
        let mut env = operator_env(&world, 3, data.path());
        let collector = lite_node_testkit::RunningCollector::start(bin, &env);
        env.extend([
            ("LOCAL_COLLECTOR_HOST".to_owned(), "127.0.0.1".to_owned()),
            ("LOCAL_COLLECTOR_PORT".into(), collector.port.to_string()),
            ("LITE_NODE_RESTART_BACKOFF_MIN_SECS".into(), "600".into()),
        ]);
        let err = data.path().join("init.err");
        let child = init_sh()
            .envs(env)
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
            .spawn()
            .unwrap();
        poll_until("the node to watch", Duration::from_secs(120), || {
            std::fs::read_to_string(&err).unwrap_or_default().contains("watching ProtocolState").then_some(())
        });
        Self { child, err, _world: world, _data: data, _collector: collector }
    }
}

/// Outside a container, `./init.sh` started where the operator's `.env`
/// is (the market's block with their key) reads it as the image reads its
/// environment: nothing is missing, `lite-node check` and `run` get the
/// file, and the node watches the market.
#[test]
fn outside_a_container_init_sh_reads_the_env_file_where_it_is_started() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let dotenv: String = operator_env(&world, 1, data.path()).iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(data.path().join(".env"), dotenv).unwrap();
    let err = data.path().join("init.err");
    let mut child = init_sh()
        .current_dir(data.path())
        .env("PATH", lite_node_testkit::host_var("PATH"))
        .env("HOME", lite_node_testkit::host_var("HOME"))
        .env("LITE_NODE_BIN", env!("CARGO_BIN_EXE_lite-node"))
        .envs(lite_node_testkit::compute_build_env())
        .stdout(Stdio::from(std::fs::File::create(data.path().join("init.log")).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
        .spawn()
        .unwrap();
    let text = || {
        std::fs::read_to_string(data.path().join("init.log")).unwrap_or_default()
            + &std::fs::read_to_string(&err).unwrap_or_default()
    };
    poll_until("the node to watch", Duration::from_secs(120), || {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("init.sh ended ({status}):\n{}", text());
        }
        text().contains("watching ProtocolState").then_some(())
    });
    assert!(text().contains("settings from"), "{}", text());
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let status = poll_until("init.sh to stop", Duration::from_secs(60), || child.try_wait().unwrap());
    assert_eq!(status.code(), Some(0), "{}", text());
}
