//! `lite-node run`: the node on its own multi-threaded runtime until Ctrl-C
//! or SIGTERM.

use std::time::Duration;

use crate::{config::EnvSnapshot, signals::shutdown_signals};

/// `lite-node run`'s arguments.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// First check the configuration offline, as `lite-node check --offline`
    /// does (its lines on stdout; exit 2 when a check fails), on the very
    /// configuration the node then runs with: an encrypted keystore is
    /// opened once (what the image's init.sh runs).
    #[arg(long)]
    pub check: bool,
}

/// Builds the async runtime and runs the node until a stop signal.
pub fn run(args: &Args, env: &EnvSnapshot) -> anyhow::Result<()> {
    if env.get("LITE_NODE_ROLE").map(str::trim) == Some("worker") {
        return worker(env);
    }
    let node = crate::config::NodeConfig::from_env(env);
    if args.check {
        let offline = super::check::Args { offline: true };
        super::check::check(&offline, env, &node, &mut std::io::stdout().lock())?;
    }
    let cfg = node?;
    if let Some(dir) = &cfg.compute.local_dir {
        let dir = dir.display();
        tracing::warn!(
            "LITE_NODE_COMPUTE_DIR={dir}: this node runs that directory's package as it is now, not a pinned \
             commit — for compute authors; an earning node pins SNAPSHOTTER_COMPUTE_REPO, _BRANCH and _COMMIT"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("lite-node").build()?;
    let result = runtime.block_on(async { crate::node::run(cfg, shutdown_signals(false)).await });
    // A compute that never returns must not keep the process alive: the
    // safety net's exit and a stop both have to end it (the stop's grace was
    // spent inside `node::run`).
    runtime.shutdown_timeout(Duration::from_millis(500));
    result
}

/// A full node's worker (`LITE_NODE_ROLE=worker`).
fn worker(env: &EnvSnapshot) -> anyhow::Result<()> {
    let cfg = crate::config::WorkerConfig::from_env(env)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("lite-node").build()?;
    let result = runtime.block_on(async { lite_node_node::full_node::worker::run(cfg, shutdown_signals(false)).await });
    runtime.shutdown_timeout(Duration::from_millis(500));
    result
}
