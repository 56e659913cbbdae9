//! `lite-node devnet`: the whole network on this machine, on real parts.
//!
//! Loads the saved world (Uniswap V3 pools and ProtocolState, built by
//! `devnet/build-world.sh`) into the npm-pinned anvil, registers one slot and
//! signer per node, starts the collector (in this process, with every check:
//! signer, deadline, selection), N `lite-node run` processes, and then, every
//! interval, a swap (activity) and an epoch release. It prints one row per
//! epoch, and can write everything needed to re-verify the run as JSON.

pub use lite_node_collector as collector;
mod epochs;
mod fault;
mod full_node;
mod hostile;
mod journals;
mod operators;
mod options;
mod process;
mod proxy;
mod record;
mod render;
mod start;
mod stop;
mod switch;
mod validator;
pub(crate) mod world;

use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use alloy::{primitives::Address, signers::local::PrivateKeySigner};
use anyhow::{Context, Result, anyhow, bail};
use serde_json::json;

use lite_node_chain::{Anchor, Chains, TxSender};
use lite_node_compute::{self as compute, LoadedPackage};
use lite_node_config::ChainConfig;
use lite_node_config::{ComputeConfig, EnvSnapshot};
use lite_node_core::{
    BadInput,
    retry::{Policy, retry},
    signals::Shutdown,
};

use crate::collector::{Collector, EpochAssignment, Received, SelectionCheck};
use epochs::{arrived, latency_ms};
pub use fault::{Fault, parse_fault};
pub use options::{Options, default_dir};
use options::{check_options, world_dir};
use process::{AnvilProcess, Guarded, stop_all};
pub use render::{Summary, quantile};
use render::{row, selected_width, summarize, summary_text, with_finalized, with_onchain};
use world::{Driver, Manifest};

/// Workers of the full node one machine runs at most.
const MAX_FULL_NODE_WORKERS: u64 = 16;

/// How often the devnet restarts one node that keeps dying before it gives up.
const MAX_RESTARTS: u32 = 3;

/// The stop grace the devnet gives its nodes (`LITE_NODE_STOP_GRACE_SECS`):
/// a node ends its epoch in flight within it, then exits.
const NODE_STOP_GRACE: Duration = Duration::from_secs(10);

/// How much longer than a node's own grace the devnet waits before it kills
/// the node: never at the very moment the node would have finished.
const STOP_MARGIN: Duration = Duration::from_secs(10);

/// Validators one devnet runs (each a process and a Redis on this machine).
const MAX_VALIDATORS: u64 = 16;

/// The devnet's placeholder bot token and chat, sent to `--telegram-api-url`.
pub const PLACEHOLDER_BOT_TOKEN: &str = "123456:devnet-placeholder-token";
pub const PLACEHOLDER_CHAT_ID: &str = "1";

/// One devnet node: its slots, signer and process, and how to start it again.
struct Node {
    /// Its number (from 1): `node-N.log`, `node-N/`.
    index: u64,
    /// Its first slot (its only one, unless --slots-per-node).
    slot_id: u64,
    slots: Vec<u64>,
    signer: Address,
    data_dir: PathBuf,
    process: Guarded,
    peak_rss_kib: Option<u64>,
    /// The child's whole environment.
    env: Vec<(String, String)>,
    restarts: u32,
    /// The full node's coordinator (its slot is registered as a full node).
    full_node: bool,
}

impl Node {
    fn spawn(exe: &Path, index: u64, env: &[(String, String)], log: &Path) -> Result<Guarded> {
        let mut cmd = Command::new(exe);
        cmd.arg("run").env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        Guarded::spawn(&format!("node {index}"), &mut cmd, log, false)
    }
}

/// One released epoch, as the devnet saw it.
struct Released {
    assignment: Arc<EpochAssignment>,
    release_block: u64,
    /// When the release transaction was sent (latency starts here).
    sent_at: SystemTime,
    /// Selected slots that belong to our nodes, with their pools.
    expected: BTreeMap<u64, String>,
    /// Selected slots of ours running an alert drill (their failure is expected).
    drills: Vec<u64>,
    /// Submissions the full node owes (every pool of every pooled project).
    full_expected: usize,
    /// Expected slots whose node ended the epoch with nothing sent, with
    /// why (their journal's lines: a compute that failed, or reported not
    /// selected) and the node's number: not waited for.
    ended: BTreeMap<u64, (String, u64)>,
}

/// When the devnet first reads the journals of slots whose submission has
/// not arrived (most epochs are answered before), and then how often.
const JOURNAL_FIRST_LOOK: Duration = Duration::from_millis(250);
const JOURNAL_LOOK_EVERY: Duration = Duration::from_millis(200);

/// Reasons a row names; the rest are counted.
const MAX_REASONS: usize = 4;

/// How long the devnet waits for a stalled anvil.
const STALL_LIMIT: Duration = Duration::from_secs(120);

/// After Ctrl-C, how long the epoch in flight may take to finish.
const FINISH_GRACE: Duration = Duration::from_secs(5);

const ANVIL_BIN: &str = "node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil";

/// Runs the devnet until `opts.epochs` epochs are done or `shutdown`
/// completes: [`Devnet::start`], then [`Devnet::release`] and
/// [`Devnet::settle`] each epoch, then [`Devnet::stop`].
pub fn run<'a>(
    opts: Options,
    env: EnvSnapshot,
    out: &'a mut dyn Write,
    shutdown: Shutdown,
) -> lite_node_core::LocalBoxFuture<'a, Result<Summary>> {
    Box::pin(run_devnet(opts, env, out, shutdown))
}

async fn run_devnet(opts: Options, env: EnvSnapshot, out: &mut dyn Write, mut shutdown: Shutdown) -> Result<Summary> {
    let mut devnet = Devnet::start(opts, &env, out, &mut shutdown).await?;
    let mut next_release = tokio::time::Instant::now() + devnet.opts.interval;
    let mut k: u64 = 0;
    while devnet.opts.epochs.is_none_or(|n| k < n) && !devnet.interrupted && devnet.failure.is_none() {
        tokio::select! {
            _ = &mut shutdown => { devnet.interrupted = true; break }
            _ = tokio::time::sleep_until(next_release) => {}
        }
        next_release = tokio::time::Instant::now() + devnet.opts.interval;
        let epoch = match devnet.release(k).await {
            Ok(epoch) => epoch,
            Err(e) => {
                devnet.failure = Some(e);
                break;
            }
        };
        k += 1;
        devnet.settle(epoch, out, &mut shutdown).await?;
    }
    devnet.stop(out).await
}

/// A running devnet: the chain, the collector, the validators and the nodes,
/// and what it has seen so far.
struct Devnet {
    opts: Options,
    started: Instant,
    run_dir: PathBuf,
    /// Held for the run: one devnet per run directory.
    _lock: std::fs::File,
    /// The market the devnet deployed (also `<run dir>/market.json`, which
    /// `lite-node market status --manifest` reads).
    market: lite_node_chain::market::Manifest,
    pools: Vec<String>,
    package: Arc<LoadedPackage>,
    source_anvil: AnvilProcess,
    anchor_anvil: AnvilProcess,
    /// Keep the I/O runtimes the driver, the releaser and the anchor run on.
    _chains: Chains,
    _io: lite_node_chain::IoRuntime,
    driver: Driver,
    /// Releases each source block as an epoch (`lite-node market release`'s component).
    releaser: lite_node_chain::releaser::Releaser,
    anchor: Arc<Anchor>,
    selection: Arc<SelectionCheck>,
    /// What the collector answered, and how to stop it.
    received: Received,
    stop_collector: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    /// Validators behind the collector, each with what it made of each epoch.
    validators: Vec<validator::DevnetValidator>,
    /// The relays every gossip connection runs through (`--fault cut-validator`).
    switch: switch::Switch,
    outcomes: Vec<BTreeMap<u64, validator::EpochOutcome>>,
    /// What the chain made of each epoch (with validators).
    onchain: BTreeMap<u64, validator::OnchainOutcome>,
    nodes: Vec<Node>,
    /// `--full-node-workers`: the full node's Redis and workers.
    full_node: Option<full_node::FullNode>,
    /// `--operators`: the market's other operators and their collectors.
    operators: Option<operators::Operators>,
    /// `--hostile`: the attackers, and the last epoch released as they see it.
    hostile: Option<hostile::Hostile>,
    released_tx: tokio::sync::watch::Sender<u64>,
    exe: PathBuf,
    /// The table's width for the selected slots.
    width: usize,
    /// How many projects each node runs: a slot's epoch has ended in its
    /// journal once that many lines of it are there.
    project_count: usize,
    released: Vec<Released>,
    /// `kill-node-mid-burst` drills, `(slot, epoch)` → the release of the
    /// collector's hold on that node's answers (sent once it is killed), and
    /// whether the kill is a power loss (`lose-power-mid-burst`).
    burst_holds: BTreeMap<(u64, u64), (tokio::sync::watch::Sender<bool>, bool)>,
    interrupted: bool,
    failure: Option<anyhow::Error>,
}

/// The devnet's project namespace (`devnet-UNISWAPV3-ETH`), as the nodes and
/// `compute run` are given it.
const NAMESPACE_VARS: [(&str, &str); 3] =
    [("POWERLOOM_CHAIN", "devnet"), ("NAMESPACE", "UNISWAPV3"), ("SOURCE_CHAIN", "ETH")];

/// Names, in the env file the devnet writes for `compute run`, the run
/// directory whose lock says whether that devnet still runs.
pub const DEVNET_RUN_DIR_VAR: &str = "LITE_NODE_DEVNET_RUN_DIR";

/// Whether the devnet of `run_dir` is running (it holds `<run dir>.lock`).
pub fn devnet_running(run_dir: &Path) -> bool {
    match std::fs::File::open(run_dir.with_extension("lock")) {
        Ok(lock) => lock.try_lock().is_err(),
        Err(_) => false,
    }
}
