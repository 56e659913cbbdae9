//! `lite-node devnet`: the whole network on this machine (`crate::devnet`)
//! until its epochs are done or a stop signal.

use std::{path::PathBuf, time::Duration};

use crate::{config::EnvSnapshot, devnet::Options, signals::shutdown_signals};

/// `lite-node devnet`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Lite nodes to run, one signer each.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub nodes: u64,
    /// Slots each node works (SLOT_IDS), all registered to its signer.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub slots_per_node: u64,
    /// getTotalNodeCount (default: nodes × slots per node); above that, some epochs select none of ours.
    #[arg(long, value_name = "T")]
    pub total_slots: Option<u64>,
    /// Stop after N epochs (default: run until Ctrl-C).
    #[arg(long, value_name = "N")]
    pub epochs: Option<u64>,
    /// Milliseconds between epoch releases.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub interval_ms: u64,
    /// The nodes' anchor poll interval, milliseconds.
    #[arg(long, default_value_t = 50, value_name = "MS")]
    pub poll_ms: u64,
    /// Seconds to wait for an epoch's submissions before the next release.
    #[arg(long, default_value_t = 60, value_name = "S")]
    pub epoch_timeout_secs: u64,
    /// Write a machine-readable record of the run (domain, pools, epochs, every submission).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// The devnet directory (npm-installed anvil, the saved world, run
    /// state). Default: ./devnet, else the devnet/ of the checkout this
    /// binary was built from.
    #[arg(long, value_name = "DIR")]
    pub devnet_dir: Option<PathBuf>,
    /// Load this saved world instead of <devnet dir>/world.
    #[arg(long, value_name = "DIR")]
    pub world: Option<PathBuf>,
    /// Where the run's logs, node data and snapshots go (default <devnet dir>/run; emptied at start).
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// A drill (repeatable): compute-error:SLOT or empty-return:SLOT — that
    /// node's compute fails, or returns nothing, whenever it is selected;
    /// kill-node:SLOT@EPOCH — that node is SIGKILLed after the epoch's
    /// release and restarted by the devnet; kill-node-mid-burst:SLOT@EPOCH
    /// and lose-power-mid-burst:SLOT@EPOCH — killed with messages sent and
    /// unanswered (after a power loss, its unsynced ledger lines gone too);
    /// stall-anvil:SECS@EPOCH — anvil stops answering for SECS after the
    /// epoch's release (docs/devnet.md lists every drill).
    #[arg(long, value_name = "KIND:SLOT", value_parser = crate::devnet::parse_fault)]
    pub fault: Vec<crate::devnet::Fault>,
    /// Send the nodes' alerts to this Telegram Bot API (a placeholder bot token and chat id are supplied).
    #[arg(long, value_name = "URL")]
    pub telegram_api_url: Option<String>,
    /// Validators behind the collector (at most 16): each has its own Redis and
    /// `lite-node validator` process, finalizes every epoch, and the table
    /// and --json record show its batches.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub validators: u64,
    /// How the nodes follow the anchor chain: `http` polls every --poll-ms,
    /// `ws` subscribes to new heads over a WebSocket (anvil serves both).
    #[arg(long, value_enum, default_value = "http")]
    pub anchor: AnchorTransport,
    /// The projects the nodes run (default: PROJECTS_CONFIG or
    /// SNAPSHOT_CONFIG_REPO when set, else the BDS base snapshot); each
    /// project's `pools` is replaced by the world's pools. The compute
    /// package is the node's: SNAPSHOTTER_COMPUTE_REPO and friends.
    #[arg(long, value_name = "FILE")]
    pub projects: Option<PathBuf>,
    /// Run one full node beside the lite nodes, its pools computed by K
    /// workers (`lite-node run` with LITE_NODE_ROLE=worker) that share a
    /// redis-server with its coordinator; the table shows per epoch which
    /// worker computed how many pools.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub full_node_workers: u64,
    /// How the full node's pools find their worker: `peer-index` (member k
    /// of n takes the pools whose index ≡ k mod n) or `least-backlog` (the
    /// coordinator gives each to the least busy worker, under a lease).
    #[arg(long, value_enum, default_value = "peer-index")]
    pub assign: AssignMode,
    /// Only the first N pools of the world are active (above 5, the
    /// 1,000-pool world is taken: devnet/build-world.sh --pools 1000 --out world-1000).
    #[arg(long, value_name = "N")]
    pub pools: Option<usize>,
    /// The full node's workers reach the chain through a relay that holds
    /// every request MS milliseconds (a remote RPC's round trip).
    #[arg(long, value_name = "MS")]
    pub worker_rpc_delay_ms: Option<u64>,
    /// The market's other operators (at most 1,000; needs --full-node-workers):
    /// each a slot of its own and a collector of its own on the validators'
    /// gossip topic, the first 20 `lite-node collector` processes and the
    /// rest in this process. Each one's node is a stand-in that signs the
    /// full node's snapshot of its pool for its own slot.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub operators: u64,
    /// Peers attacking the validators' gossip for the whole run (at most
    /// 100; needs --validators), taking in turn: flood (a slot holder
    /// signing epochs not yet released), forge (registered slots signed by
    /// other keys), replay (accepted submissions again, before and after
    /// gossipsub's duplicate cache), sink (subscribes, then stops reading).
    /// Each validator's gossip outcome is printed at the end.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub hostile: u64,
    /// Whether the validators store each finalized epoch's pairs on chain
    /// (with --validators). `false`: roots only; the nodes read what was
    /// finalized before from the validators' APIs, proved against the root.
    #[arg(long, value_name = "true|false", num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub pairs_on_chain: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AssignMode {
    PeerIndex,
    LeastBacklog,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AnchorTransport {
    Http,
    Ws,
}

impl Args {
    fn options(self) -> Options {
        Options {
            devnet_dir: self.devnet_dir.unwrap_or_else(crate::devnet::default_dir),
            world: self.world,
            nodes: self.nodes,
            slots_per_node: self.slots_per_node,
            total_slots: self.total_slots,
            epochs: self.epochs,
            interval: Duration::from_millis(self.interval_ms),
            poll_interval: Duration::from_millis(self.poll_ms),
            epoch_timeout: Duration::from_secs(self.epoch_timeout_secs),
            json: self.json,
            run_dir: self.run_dir,
            faults: self.fault,
            telegram_api_url: self.telegram_api_url,
            validators: self.validators,
            anchor_ws: self.anchor == AnchorTransport::Ws,
            projects: self.projects,
            full_node_workers: self.full_node_workers,
            assign: match self.assign {
                AssignMode::PeerIndex => crate::config::ClusterAssign::PeerIndex,
                AssignMode::LeastBacklog => crate::config::ClusterAssign::LeastBacklog,
            },
            pools: self.pools,
            worker_rpc_delay: self.worker_rpc_delay_ms.map(Duration::from_millis),
            operators: self.operators,
            hostile: self.hostile,
            pairs_on_chain: self.pairs_on_chain,
        }
    }
}

/// Runs the devnet; fails when a selected slot's submission was rejected or
/// never answered.
pub fn run(args: Args, env: &EnvSnapshot) -> anyhow::Result<()> {
    let opts = args.options();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("devnet").build()?;
    let summary = runtime.block_on(async {
        // Registered before anything starts: a Ctrl-C during set-up still stops every child.
        let stop = shutdown_signals(true);
        crate::devnet::run(opts, env.clone(), &mut std::io::stdout(), stop).await
    })?;
    if summary.ok() {
        return Ok(());
    }
    let mut problems = Vec::new();
    for (n, what) in [
        (summary.rejected, "submission(s) rejected by the collector"),
        (summary.missing, "selected slot(s) never answered"),
        (summary.duplicates, "submission(s) accepted twice"),
        (summary.validator_disagrees, "submission(s) rejected by the validator"),
        (summary.validator_unjudged, "submission(s) the validator never judged"),
    ] {
        if n > 0 {
            problems.push(format!("{n} {what}"));
        }
    }
    if let Some(f) = summary.finalized.filter(|f| *f != summary.epochs) {
        problems.push(format!("{} epoch(s) not finalized by the validator", summary.epochs - f));
    }
    if let Some(f) = summary.onchain_finalized.filter(|f| *f != summary.epochs) {
        problems.push(format!("{} epoch(s) not finalized on chain", summary.epochs.saturating_sub(f)));
    }
    if let Some(read) = summary.read_back.as_ref().filter(|r| !r.failed.is_empty()) {
        problems.push(format!(
            "{} epoch(s) a consumer could not read back (the first: {})",
            read.failed.len(),
            read.failed[0]
        ));
    }
    if problems.is_empty() {
        problems.push("no epoch ran".to_owned());
    }
    anyhow::bail!("{}", problems.join(", "))
}
