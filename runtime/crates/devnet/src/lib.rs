//! `lite-node devnet`: the whole network on this machine, on real parts.
//!
//! Loads the saved world (Uniswap V3 pools and ProtocolState, built by
//! `devnet/build-world.sh`) into the npm-pinned anvil, registers one slot and
//! signer per node, starts the collector (in this process, with every check:
//! signer, deadline, selection), N `lite-node run` processes, and then, every
//! interval, a swap (activity) and an epoch release. It prints one row per
//! epoch, and can write everything needed to re-verify the run as JSON.

pub mod collector;
mod fault;
mod fullnode;
mod journals;
mod process;
mod proxy;
mod record;
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

use lite_node_chain::{Anchor, Chains};
use lite_node_compute::{self as compute, LoadedPackage};
use lite_node_config::ChainConfig;
use lite_node_config::{ComputeConfig, EnvSnapshot};
use lite_node_core::{
    BadInput,
    retry::{Policy, retry},
    signals::Shutdown,
};

use crate::collector::{DevnetCollector, EpochAssignment, Received, SelectionCheck};
pub use fault::{Fault, parse_fault};
use process::{AnvilProcess, Guarded, stop_all};
use world::{Driver, Manifest};

/// What `lite-node devnet` was asked to do.
#[derive(Clone, Debug)]
pub struct Options {
    /// The `devnet/` directory: world, npm-installed anvil, run directory.
    pub devnet_dir: PathBuf,
    /// The saved world to load (default `<devnet dir>/world`).
    pub world: Option<PathBuf>,
    pub nodes: u64,
    /// Slots per node (`SLOT_IDS`), registered to the node's one signer.
    pub slots_per_node: u64,
    /// `getTotalNodeCount` (default: every node's slots).
    pub total_slots: Option<u64>,
    /// Stop after this many epochs (default: until Ctrl-C).
    pub epochs: Option<u64>,
    /// Time between epoch releases.
    pub interval: Duration,
    /// The nodes' anchor poll interval.
    pub poll_interval: Duration,
    /// How long to wait for an epoch's submissions before moving on.
    pub epoch_timeout: Duration,
    pub json: Option<PathBuf>,
    /// Where the run's state goes (default `<devnet dir>/run`; emptied at start).
    pub run_dir: Option<PathBuf>,
    /// Alert drills: `(slot, drill)`; the selected computes of that slot's
    /// node (all its slots) fail.
    pub faults: Vec<Fault>,
    /// A Telegram Bot API for the nodes' alerts (placeholder token and chat).
    pub telegram_api_url: Option<String>,
    /// Validators behind the collector. The types hold any number; the
    /// check allows one until validators agree with each other (gossip).
    pub validators: u64,
    /// The nodes follow the anchor over a WebSocket (new heads) instead of
    /// polling it over HTTP.
    pub anchor_ws: bool,
    /// The projects the nodes run (default: `PROJECTS_CONFIG` or
    /// `SNAPSHOT_CONFIG_REPO` when set, else the BDS base snapshot). Every
    /// project's `pools` becomes the world's pools.
    pub projects: Option<PathBuf>,
    /// One full node beside the lite nodes, computed by this many workers
    /// (0: none).
    pub full_node_workers: u64,
    /// How the full node's items find their worker.
    pub assign: lite_node_config::ClusterAssign,
    /// Only the first N of the world's pools are active (default: all); more
    /// than the default world holds takes `<devnet dir>/world-1000`.
    pub pools: Option<usize>,
    /// The full node's workers reach the chain through a relay that holds
    /// every request this long (a remote RPC), when set.
    pub worker_rpc_delay: Option<Duration>,
}

/// `./devnet` when it is a devnet directory (or no other is found), else the
/// `devnet/` of the checkout this binary was built from — so an author can
/// run `lite-node devnet` from their own package's directory.
pub fn default_dir() -> PathBuf {
    let here = PathBuf::from("devnet");
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../devnet");
    if here.join("package.json").is_file() || !built_from.join("package.json").is_file() {
        here
    } else {
        built_from.canonicalize().unwrap_or(built_from)
    }
}

impl Options {
    /// Every slot of the devnet's nodes.
    fn our_slots(&self) -> u64 {
        self.nodes.saturating_mul(self.slots_per_node.max(1))
    }

    /// The node (numbered from 1) that works `slot`.
    fn node_of(&self, slot: u64) -> u64 {
        (slot - 1) / self.slots_per_node.max(1) + 1
    }

    /// The slots node `n` works.
    fn slots_of(&self, n: u64) -> std::ops::RangeInclusive<u64> {
        let k = self.slots_per_node.max(1);
        (n - 1) * k + 1..=n * k
    }

    /// Every drilled slot: all the slots of a drilled slot's node.
    fn drilled_slots(&self) -> Vec<(u64, lite_node_config::Drill)> {
        self.drills().flat_map(|(slot, drill)| self.slots_of(self.node_of(slot)).map(move |s| (s, drill))).collect()
    }

    /// The alert drills, `(slot, drill)`.
    fn drills(&self) -> impl Iterator<Item = (u64, lite_node_config::Drill)> + '_ {
        self.faults.iter().filter_map(|f| match *f {
            Fault::Drill(slot, drill) => Some((slot, drill)),
            _ => None,
        })
    }

    /// The alert drill a node working `slots` runs, if any.
    fn drill_of(&self, slots: &[u64]) -> Option<lite_node_config::Drill> {
        self.faults.iter().find_map(|f| f.drill_for(slots))
    }
}

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

/// The outcome of a devnet run.
#[derive(Debug)]
pub struct Summary {
    pub epochs: usize,
    pub accepted: usize,
    pub rejected: usize,
    /// Selected slots whose submission never arrived.
    pub missing: usize,
    /// Of those, the ones whose node ended the epoch with nothing sent
    /// (a compute that failed or did not report itself selected).
    pub ended_without_sending: usize,
    pub interrupted: bool,
    /// Release → acknowledgement, milliseconds, sorted.
    pub latencies_ms: Vec<f64>,
    /// Peak resident memory per node, KiB.
    pub peak_rss_kib: Vec<(u64, u64)>,
    /// Different submissions accepted for the same slot, epoch and project
    /// (beyond the first): double submissions.
    pub duplicates: usize,
    /// The same bytes sent again (a node whose restart left it without an
    /// answer): one submission each, answered alike — not duplicates.
    pub retransmissions: usize,
    /// Nodes the devnet restarted after they died.
    pub restarts: u32,
    /// With a validator: epochs it finalized; submissions the collector
    /// accepted that the validator rejected, and those it never judged (each
    /// a problem).
    pub finalized: Option<usize>,
    pub validator_disagrees: usize,
    pub validator_unjudged: usize,
    /// With validators: epochs the chain finalized.
    pub onchain_finalized: Option<usize>,
    /// Validators the devnet restarted after they died.
    pub validator_restarts: u32,
}

impl Summary {
    pub fn ok(&self) -> bool {
        self.rejected == 0
            && self.missing == 0
            && self.duplicates == 0
            && self.validator_disagrees == 0
            && self.validator_unjudged == 0
            && self.finalized.is_none_or(|f| f == self.epochs)
            && self.onchain_finalized.is_none_or(|f| f == self.epochs)
            && (self.epochs > 0 || self.interrupted)
    }
}

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
    manifest: Manifest,
    pools: Vec<String>,
    package: Arc<LoadedPackage>,
    anvil: AnvilProcess,
    /// Keeps the I/O runtime the driver and the anchor run on.
    _chains: Chains,
    driver: Driver,
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
    full_node: Option<fullnode::FullNode>,
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

impl Devnet {
    /// Checks the options, builds the package, writes projects.json, starts
    /// anvil with the world and registers every node's slots, then the
    /// validators, the collector and the nodes; returns once every node is
    /// watching the anchor (and has printed the table's header).
    async fn start(opts: Options, env: &EnvSnapshot, out: &mut dyn Write, shutdown: &mut Shutdown) -> Result<Self> {
        let started = Instant::now();
        let world_dir = world_dir(&opts);
        let anvil_bin = opts.devnet_dir.join(ANVIL_BIN);
        check_options(&opts, &world_dir, &anvil_bin)?;
        let mut manifest = Manifest::load(&world_dir)?;
        if let Some(n) = opts.pools {
            if n > manifest.pools.len() {
                bail!(BadInput(format!(
                    "--pools {n}: the world in {} has {} pools; build a bigger one with `devnet/build-world.sh \
                     --pools 1000 --out world-1000` (taken for --pools above 5 unless --world is given)",
                    world_dir.display(),
                    manifest.pools.len()
                )));
            }
            manifest.pools.truncate(n);
        }
        let total_slots = opts.total_slots.unwrap_or(opts.our_slots());

        // One devnet per run directory at a time; the run directory starts empty.
        let run_dir = std::path::absolute(opts.run_dir.clone().unwrap_or_else(|| opts.devnet_dir.join("run")))?;
        let lock_path = run_dir.with_extension("lock");
        if let Some(parent) = lock_path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let lock = std::fs::File::create(&lock_path).with_context(|| format!("creating {}", lock_path.display()))?;
        if lock.try_lock().is_err() {
            bail!(BadInput(format!(
                "another lite-node devnet is using {} (it holds {})",
                run_dir.display(),
                lock_path.display()
            )));
        }
        if run_dir.exists() {
            std::fs::remove_dir_all(&run_dir).with_context(|| format!("clearing {}", run_dir.display()))?;
        }
        std::fs::create_dir_all(&run_dir)?;

        // The compute package: built once here, shared by the collector and every node.
        let cache = std::path::absolute(opts.devnet_dir.join("cache"))?;
        let compute_env = env.for_devnet_compute(&run_dir.join("collector"), &cache);
        let compute_cfg = ComputeConfig::from_env(&compute_env)?;
        writeln!(out, "compute package: {}", describe_source(&compute_cfg))?;
        let package =
            tokio::task::spawn_blocking(move || -> Result<LoadedPackage> { Ok(compute::load(&compute_cfg)?) })
                .await??;
        let package = Arc::new(package);
        writeln!(out, "compute package {} ready", package.package.manifest.commit)?;

        // projects.json: the given projects (or the BDS base snapshot) over the
        // world's pools, checked against the package before anything starts.
        let pools: Vec<String> = manifest.pools.iter().map(|p| p.address.clone()).collect();
        let projects = run_dir.join("projects.json");
        let described = write_projects(&opts, env, &run_dir, &pools, &package, &projects)?;
        writeln!(out, "projects: {described}")?;
        let project_types: Vec<String> =
            lite_node_config::Projects::load(&projects)?.projects.into_iter().map(|p| p.project_type).collect();
        let project_count = project_types.len();
        let market_projects =
            lite_node_protocol::submission::Projects::new(NAMESPACE_VARS.map(|(_, v)| v).join("-"), project_types);

        // The chain.
        let anvil = AnvilProcess::start(&anvil_bin, &world_dir.join("state.json"), &run_dir, 4096)?;
        let url = anvil.url();
        let protocol_state = world::address(&manifest.protocol_state, "protocolState")?;
        let data_market = world::address(&manifest.data_market, "dataMarket")?;
        let parsed = lite_node_core::url::parse_rpc_url(&url).map_err(|e| anyhow!(e))?;
        let chains =
            Chains::connect(&ChainConfig::local(parsed, protocol_state, data_market, env)?).map_err(|e| anyhow!(e))?;
        let driver = Driver { rpc: chains.source.clone(), manifest: manifest.clone() };
        // Lost on --load-state: Uniswap's gas depends on timestamps moving.
        driver.call("anvil_setBlockTimestampInterval", json!([12])).await?;
        let anchor = chains.anchor()?.clone();

        // Nodes: the world's signer of each node's first slot where it has one, a
        // derived key beyond; every slot of a node registered to its signer.
        let mut slots = Vec::new();
        for n in 1..=opts.nodes {
            let first = *opts.slots_of(n).start();
            let from_world =
                manifest.slots.iter().find(|s| s.slot_id == first).and_then(|s| manifest.key_of(&s.signer));
            let key = from_world.map_or_else(|| derived_key(first), str::to_owned);
            let signer: PrivateKeySigner = key.parse().map_err(|e| anyhow!("slot {first}'s key: {e}"))?;
            for slot_id in opts.slots_of(n) {
                let registered = manifest
                    .slots
                    .iter()
                    .any(|s| s.slot_id == slot_id && s.signer.eq_ignore_ascii_case(&signer.address().to_string()));
                if !registered {
                    driver.register_slot(slot_id, signer.address()).await?;
                }
            }
            slots.push((n, signer.address(), key));
        }
        // The full node: a slot of its own past the lite nodes', registered
        // as a full node on ProtocolState.
        let full = if opts.full_node_workers > 0 {
            let slot_id = opts.our_slots() + 1;
            let key = derived_key(slot_id);
            let signer: PrivateKeySigner = key.parse().map_err(|e| anyhow!("the full node's key: {e}"))?;
            driver.register_slot(slot_id, signer.address()).await?;
            driver.set_full_node(slot_id).await?;
            Some((slot_id, signer.address(), key))
        } else {
            None
        };
        driver.set_total_node_count(total_slots).await?;
        let start_block = driver.head().await?;
        writeln!(
            out,
            "anvil on {url}: chain {}, ProtocolState {protocol_state}, {} pools, {} slots registered, getTotalNodeCount = {total_slots}",
            manifest.chain_id,
            manifest.pools.len(),
            opts.our_slots()
        )?;

        let exe = std::env::current_exe().context("locating the lite-node binary")?;
        // Only the toolchain and compute-package variables: an operator's
        // own alert channels, status port or drills must not reach devnet children.
        let child_env: Vec<(String, String)> = compute_env.toolchain_and_compute();
        // The validators check projects against the market's namespace and projects.json.
        let mut validator_env = child_env.clone();
        validator_env.extend(NAMESPACE_VARS.map(|(k, v)| (k.to_owned(), v.to_owned())));
        validator_env.push(("PROJECTS_CONFIG".to_owned(), projects.display().to_string()));

        // The validators, when asked: each its own Redis, process, gossip
        // identity and registered key, dialing the ones before it — through
        // the devnet's relays, so a drill can cut one off.
        let keys: Vec<String> = (1..=opts.validators).map(derived_validator_key).collect();
        if !keys.is_empty() {
            let addresses = keys
                .iter()
                .map(|k| k.parse::<PrivateKeySigner>().map(|s| s.address()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| anyhow!("a validator key: {e}"))?;
            driver.register_validators(&addresses).await?;
        }
        let mut validators: Vec<validator::DevnetValidator> = Vec::new();
        let mut switch = switch::Switch::default();
        for (i, key) in keys.iter().enumerate() {
            let mut bootstrap = Vec::new();
            for v in &validators {
                bootstrap.push(switch.link(i + 1, v.index, v.p2p_socket(), &v.peer_id).await?.parse()?);
            }
            let v = validator::DevnetValidator::start(
                &exe,
                &run_dir,
                i + 1,
                key,
                &bootstrap,
                &validator_env,
                &url,
                &manifest.protocol_state,
                &manifest.data_market,
                &pools,
                start_block,
                opts.poll_interval,
            )
            .await?;
            writeln!(
                out,
                "validator {} ({}) on {} (gRPC gateway), monitor API on {}, gossip {}; windows stay open {} anchor \
                 blocks after a release",
                v.index,
                v.address,
                v.gateway,
                v.api,
                v.p2p,
                validator::WINDOW_BLOCKS
            )?;
            validators.push(v);
        }

        // The collector, in this process.
        let selection = Arc::new(
            SelectionCheck::new(chains.source.clone(), pools.clone(), package.clone(), market_projects).map_err(
                |e| {
                    BadInput(format!(
                        "{e}: the devnet expects each epoch's slots by the market's rule and checks every submission \
                     with it; export it with `assignments: slot_selection::assignments` in export_compute_module! \
                     (as `lite-node compute new` writes it)"
                    ))
                },
            )?,
        );
        let received = Received::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let collector_port = listener.local_addr()?.port();
        let (stop_collector, collector_stopped) = tokio::sync::oneshot::channel::<()>();
        let mut collector = DevnetCollector::new(anchor.clone(), manifest.chain_id);
        (collector.received, collector.selection) = (received.clone(), Some(selection.clone()));
        collector.own = Some(
            slots
                .iter()
                .flat_map(|(n, signer, _)| opts.slots_of(*n).map(move |slot| (slot, *signer)))
                .chain(full.as_ref().map(|(slot, signer, _)| (*slot, *signer)))
                .collect(),
        );
        // `kill-node-mid-burst`: the collector holds back the answers to that
        // node's submissions of the epoch until the node is killed, so some
        // are certainly sent and unanswered when it dies.
        let mut burst_holds = BTreeMap::new();
        for fault in &opts.faults {
            if let Fault::KillNodeMidBurst { slot, epoch, power_loss } = *fault
                && let Some((n, _, _)) = slots.iter().find(|(n, _, _)| opts.slots_of(*n).any(|s| s == slot))
            {
                let (release, held) = tokio::sync::watch::channel(false);
                collector.holds.push(collector::Hold { slots: opts.slots_of(*n).collect(), epoch, release: held });
                burst_holds.insert((slot, epoch), (release, power_loss));
            }
        }
        // The collector publishes what it accepts on the validators' gossip
        // network; the nodes are started once every validator is in its mesh.
        if !validators.is_empty() {
            let mut bootstrap = Vec::new();
            for v in &validators {
                bootstrap.push(switch.link(0, v.index, v.p2p_socket(), &v.peer_id).await?.parse()?);
            }
            let gossip = lite_node_validator::gossip::Gossip::publisher(lite_node_validator::gossip::Settings {
                listen: "/ip4/127.0.0.1/tcp/0".parse()?,
                bootstrap,
                identity: run_dir.join("collector").join("p2p-identity.key"),
                topic: lite_node_validator::gossip::SUBMISSIONS_TOPIC.into(),
            })?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while gossip.mesh_peers().await < validators.len() {
                if tokio::time::Instant::now() > deadline {
                    bail!(
                        "the collector's gossip peer did not mesh with the {} validator(s) within 30 s; see their \
                         logs in {}",
                        validators.len(),
                        run_dir.display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // …and each validator's intake says it listens (so the first
            // epoch, released after this, is one it watched whole).
            for v in validators.iter_mut() {
                v.wait_listening(Duration::from_secs(30)).await?;
            }
            collector.gossip = Some(gossip);
        }
        let serving = tokio::spawn(collector::serve(
            collector,
            listener,
            Box::pin(async move {
                let _ = collector_stopped.await;
            }),
        ));
        writeln!(
            out,
            "collector on 127.0.0.1:{collector_port} (checks signer, deadline and selection{})",
            if validators.is_empty() { "" } else { "; publishes what it accepts to the validators over gossip" }
        )?;

        let rerun = write_compute_run_env(&run_dir, &url, &manifest, &projects, &child_env)?;
        writeln!(
            out,
            "re-run an epoch on this chain: lite-node --env-file {} compute run --epoch-id N",
            rerun.display()
        )?;

        // The nodes: what they share, then each its own signer, slots and dir.
        let mut base_env = child_env.clone();
        let shared = [
            ("SOURCE_RPC_URL", url.clone()),
            ("POWERLOOM_RPC_URL", if opts.anchor_ws { url.replacen("http://", "ws://", 1) } else { url.clone() }),
            ("PROTOCOL_STATE_CONTRACT", manifest.protocol_state.clone()),
            ("DATA_MARKET_CONTRACT", manifest.data_market.clone()),
            ("LOCAL_COLLECTOR_HOST", "127.0.0.1".into()),
            ("LOCAL_COLLECTOR_PORT", collector_port.to_string()),
            ("LITE_NODE_START_BLOCK", start_block.to_string()),
            ("LITE_NODE_POLL_INTERVAL_MS", opts.poll_interval.as_millis().to_string()),
            ("LITE_NODE_STOP_GRACE_SECS", NODE_STOP_GRACE.as_secs().to_string()),
            ("RUST_LOG", node_log_filter(env)),
        ];
        base_env.extend(shared.into_iter().map(|(k, v)| (k.to_owned(), v)));
        base_env.extend(NAMESPACE_VARS.map(|(k, v)| (k.to_owned(), v.to_owned())));
        let mut nodes = Vec::new();
        for (index, signer, key) in &slots {
            let own: Vec<u64> = opts.slots_of(*index).collect();
            let data_dir = run_dir.join(format!("node-{index}"));
            std::fs::create_dir_all(&data_dir)?;
            let mut node_env = base_env.clone();
            let vars = [
                ("SIGNER_ACCOUNT_ADDRESS", signer.to_string()),
                ("SIGNER_ACCOUNT_PRIVATE_KEY", key.clone()),
                if own.len() == 1 {
                    ("SLOT_ID", own[0].to_string())
                } else {
                    ("SLOT_IDS", lite_node_config::format_slot_ids(&own))
                },
                ("PROJECTS_CONFIG", projects.display().to_string()),
                ("LITE_NODE_DATA_DIR", data_dir.display().to_string()),
            ];
            node_env.extend(vars.into_iter().map(|(k, v)| (k.to_owned(), v)));
            if let Some(drill) = opts.drill_of(&own) {
                node_env.push(("LITE_NODE_DRILL".into(), drill.as_str().into()));
            }
            if let Some(url) = &opts.telegram_api_url {
                node_env.push(("TELEGRAM_API_URL".into(), url.clone()));
                node_env.push(("TELEGRAM_BOT_TOKEN".into(), PLACEHOLDER_BOT_TOKEN.into()));
                node_env.push(("TELEGRAM_CHAT_ID".into(), PLACEHOLDER_CHAT_ID.into()));
            }
            let log = run_dir.join(format!("node-{index}.log"));
            let process = Node::spawn(&exe, *index, &node_env, &log)?;
            nodes.push(Node {
                index: *index,
                slot_id: own[0],
                slots: own,
                signer: *signer,
                data_dir,
                process,
                peak_rss_kib: None,
                env: node_env,
                restarts: 0,
                full_node: false,
            });
        }
        let full_node = match full {
            None => None,
            Some((slot_id, signer, key)) => Some(
                start_full_node(
                    &opts,
                    &exe,
                    &run_dir,
                    &base_env,
                    &manifest,
                    &projects,
                    (slot_id, signer, key),
                    &mut nodes,
                )
                .await?,
            ),
        };
        if let Some(f) = &full_node {
            writeln!(
                out,
                "full node: slot {} (registered as a full node), its coordinator and {} workers ({}) on {}",
                f.slot_id,
                f.workers.len(),
                f.assign.name(),
                f.redis_url
            )?;
        }
        let outcomes = vec![BTreeMap::new(); validators.len()];
        let width = selected_width(opts.our_slots());
        let mut devnet = Devnet {
            opts,
            started,
            run_dir,
            _lock: lock,
            manifest,
            pools,
            package,
            anvil,
            _chains: chains,
            driver,
            anchor,
            selection,
            received,
            stop_collector,
            serving,
            validators,
            switch,
            outcomes,
            onchain: BTreeMap::new(),
            nodes,
            full_node,
            exe,
            width,
            project_count,
            released: Vec::new(),
            burst_holds,
            interrupted: false,
            failure: None,
        };
        if let Err(e) = wait_until_watching(&mut devnet.nodes, shutdown).await {
            // Whatever started stops (the children's guards do the rest).
            devnet.stop_quietly();
            return Err(e);
        }
        devnet.header(out)?;
        Ok(devnet)
    }

    /// What the devnet is and how it goes on, then the table's header.
    fn header(&self, out: &mut dyn Write) -> Result<()> {
        let opts = &self.opts;
        writeln!(
            out,
            "{} watching the anchor {} (logs in {}); first epoch in {:.1} s, then one every {:.1} s{}\n",
            if opts.slots_per_node > 1 {
                format!("{} nodes of {} slots each", self.nodes.len(), opts.slots_per_node)
            } else {
                format!("{} nodes", self.nodes.len())
            },
            if opts.anchor_ws {
                "over a WebSocket (new heads)".to_owned()
            } else {
                format!("by polling every {} ms", opts.poll_interval.as_millis())
            },
            self.run_dir.display(),
            opts.interval.as_secs_f64(),
            opts.interval.as_secs_f64(),
            if opts.epochs.is_none() { "; Ctrl-C stops" } else { "" }
        )?;
        let width = self.width;
        writeln!(
            out,
            "{:>5}  {:>6}  {:<width$}  {:>8}  {:>8}  {:>10}{}",
            "epoch",
            "block",
            "selected slots → pool",
            "accepted",
            "rejected",
            "latency",
            if self.validators.is_empty() { "" } else { "  finalized (projects, votes, root)" }
        )?;
        out.flush()?;
        Ok(())
    }

    /// The `k`-th epoch: a swap, its release, and the drills due after it. A
    /// stalled anvil is waited out (two minutes at most), not a reason to
    /// tear the network down.
    async fn release(&mut self, k: u64) -> Result<Released> {
        // Epoch ids count up by one from the first release.
        if let Some(next) = self.released.last().map(|e| e.assignment.epoch_id + 1) {
            self.drill(|fault, targets| fault.before_release(next, targets));
        }
        // Each validator not cut off listens again (one restarted, or joined
        // again, rejoins the mesh first), so the epoch is one it watches whole.
        for v in self.validators.iter_mut().filter(|v| !v.cut_off) {
            v.wait_listening(Duration::from_secs(30)).await?;
        }
        let drills = self.opts.drilled_slots();
        let (driver, anchor, selection, ours) = (&self.driver, &self.anchor, &self.selection, self.opts.our_slots());
        let release = retry(
            Policy::CHAIN,
            "the devnet's swap and release",
            || release_one(driver, anchor, selection, k, ours, &drills),
            |_| true,
        );
        let mut epoch = match tokio::time::timeout(STALL_LIMIT, release).await {
            Ok(result) => result?,
            Err(_) => bail!("anvil did not answer for {}s", STALL_LIMIT.as_secs()),
        };
        if let Some(f) = &self.full_node {
            epoch.full_expected = self.pools.len() * f.projects.len();
        }
        for v in self.validators.iter_mut().filter(|v| v.cut_off) {
            v.unwatched.insert(epoch.assignment.epoch_id);
        }
        let epoch_id = epoch.assignment.epoch_id;
        self.drill(|fault, targets| fault.after_release(epoch_id, targets));
        let items = self.pools.len();
        let coordinator = self.nodes.iter_mut().find(|n| n.full_node).and_then(|n| n.process.pid());
        if let Some(f) = &mut self.full_node {
            f.after_release(&self.opts.faults, epoch_id, &self.run_dir, items, coordinator);
        }
        Ok(epoch)
    }

    /// `act` for every `--fault`, on the devnet's parts.
    fn drill(&mut self, act: impl Fn(&Fault, &mut fault::Targets<'_>)) {
        let mut targets = fault::Targets {
            anvil: &mut self.anvil,
            nodes: &mut self.nodes,
            validators: &mut self.validators,
            switch: &mut self.switch,
        };
        for fault in &self.opts.faults {
            act(fault, &mut targets);
        }
    }

    /// Waits for `epoch`'s submissions (restarting a node that died, at most
    /// `--epoch-timeout-secs`), lets each validator finalize it, prints its
    /// row and keeps it. A stop lets the epoch in flight finish, briefly.
    async fn settle(&mut self, mut epoch: Released, out: &mut dyn Write, shutdown: &mut Shutdown) -> Result<()> {
        let mut deadline = tokio::time::Instant::now() + self.opts.epoch_timeout;
        let mut look_at = tokio::time::Instant::now() + JOURNAL_FIRST_LOOK;
        loop {
            if self.kill_mid_burst(&epoch) {
                // The anchor moves on before the node is back: a message it
                // signed again would carry another deadline and header — a
                // second submission, not the first sent again.
                if let Err(e) = self.driver.call("evm_mine", serde_json::json!([])).await {
                    tracing::warn!("drill: mining a block after the kill failed: {e:#}");
                }
            }
            let owed = epoch.expected.len() + epoch.full_expected;
            let arrived = count_arrived(&self.received, &epoch);
            if arrived >= owed {
                break;
            }
            // A slot whose node ended the epoch without sending is not
            // waited for: its journal says why.
            if tokio::time::Instant::now() >= look_at {
                self.look_at_journals(&mut epoch);
                look_at = tokio::time::Instant::now() + JOURNAL_LOOK_EVERY;
                if arrived + epoch.ended.len() >= owed {
                    break;
                }
            }
            // A node that died is started again on its data dir: it rejoins
            // where its cursor is, and its ledger keeps it from sending twice.
            // A worker a drill killed stays down until the epoch is settled:
            // the others are to finish its items.
            let workers = match &mut self.full_node {
                Some(f) if !f.held() => f.restart_dead_worker(&self.exe, &self.run_dir, MAX_RESTARTS),
                _ => Ok(()),
            };
            if let Err(e) = self.restart_dead_node().and(workers) {
                self.failure = Some(e);
                break;
            }
            if tokio::time::Instant::now() > deadline {
                break;
            }
            if self.interrupted {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            tokio::select! {
                _ = shutdown.as_mut() => {
                    // Let the epoch in flight finish (the nodes are still running), briefly.
                    self.interrupted = true;
                    deadline = deadline.min(tokio::time::Instant::now() + FINISH_GRACE);
                }
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        }
        if self.failure.is_none() {
            self.failure = self.burst_not_killed(&epoch);
        }
        if self.failure.is_some() {
            self.release_holds();
        }
        for n in &mut self.nodes {
            n.peak_rss_kib = n.process.peak_rss_kib().or(n.peak_rss_kib);
        }
        let e = epoch.assignment.epoch_id;
        let full_slot = self.full_node.as_ref().map(|f| f.slot_id);
        let mut line = row(&epoch, &self.received, self.width, full_slot);
        if let Some(f) = &mut self.full_node {
            let done = arrived(&self.received, &epoch)
                .iter()
                .filter(|s| {
                    s.verdict.is_ok() && s.submission.request.as_ref().is_some_and(|r| Some(r.slot_id) == full_slot)
                })
                .count();
            let by = match f.read_computed(e).await {
                Ok(by) => fullnode::describe(by),
                Err(err) => format!("unread: {err:#}"),
            };
            if let Err(e) = f.read_fenced().await {
                tracing::warn!("reading the full node's fence count: {e:#}");
            }
            line.push_str(&format!(
                "\n       full node: {done} of {} pools accepted; computed by {by}",
                epoch.full_expected
            ));
            if let Err(e) = f.restart_dead_worker(&self.exe, &self.run_dir, MAX_RESTARTS) {
                self.failure = Some(e);
            }
        }
        // What the collector accepted is what it published to the validators.
        let forwarded = arrived(&self.received, &epoch).iter().filter(|s| s.verdict.is_ok()).count();
        // Every validator judges what it was sent before the window closes
        // (mined once all have, or their patience ran out): a slow one is
        // not cut off by a fast one.
        for v in self.validators.iter_mut() {
            if let Err(err) = v.restart_if_dead(e, MAX_RESTARTS) {
                self.failure = Some(err);
                break;
            }
            // A validator that died or was cut off this epoch misses what was
            // gossiped meanwhile: it is not waited for.
            let missed = v.restarted_in == Some(e) || v.unwatched.contains(&e);
            let patience = if missed { Duration::from_secs(2) } else { Duration::from_secs(30) };
            if let Err(err) = v.wait_judged(e, forwarded, patience).await {
                self.failure = Some(err.context(format!("epoch {e} at validator {}", v.index)));
                break;
            }
        }
        for (v, outcomes) in self.validators.iter_mut().zip(&mut self.outcomes) {
            if self.failure.is_some() {
                break;
            }
            match v.settle(&self.driver, e, epoch.release_block, Duration::from_secs(30)).await {
                Ok(outcome) => {
                    if v.index == 1 {
                        line = with_finalized(line, &outcome);
                    }
                    outcomes.insert(e, outcome);
                }
                Err(err) => {
                    self.failure = Some(err.context(format!("epoch {e} at validator {}", v.index)));
                    break;
                }
            }
        }
        if !self.validators.is_empty() && self.failure.is_none() {
            match validator::settle_onchain(
                &self.driver,
                &self.anchor,
                &mut self.validators,
                e,
                epoch.release_block,
                Duration::from_secs(60),
            )
            .await
            {
                Ok((onchain, states)) => {
                    line = with_onchain(line, &onchain, self.validators.len());
                    for (outcomes, state) in self.outcomes.iter_mut().zip(states) {
                        if let Some(o) = outcomes.get_mut(&e) {
                            o.onchain = state;
                        }
                    }
                    self.onchain.insert(e, onchain);
                }
                Err(err) => self.failure = Some(err.context(format!("epoch {e} on chain"))),
            }
        }
        writeln!(out, "{line}")?;
        out.flush()?;
        self.released.push(epoch);
        Ok(())
    }

    /// `kill-node-mid-burst`: SIGKILLs the node once the collector has
    /// received any of its submissions of `epoch` (and holds their answers
    /// back), then lets the collector answer again; whether it killed now.
    fn kill_mid_burst(&mut self, epoch: &Released) -> bool {
        let epoch_id = epoch.assignment.epoch_id;
        let mut killed = false;
        for (&(slot, at), (release, power_loss)) in &self.burst_holds {
            if at != epoch_id || *release.borrow() {
                continue;
            }
            let Some(node) = self.nodes.iter_mut().find(|n| n.slots.contains(&slot)) else { continue };
            let expected = epoch.expected.keys().filter(|s| node.slots.contains(s)).count();
            let received = {
                let seen = self.received.lock().unwrap_or_else(|p| p.into_inner());
                let ours = |s: &&collector::Seen| {
                    s.submission
                        .request
                        .as_ref()
                        .is_some_and(|r| r.epoch_id == epoch_id && node.slots.contains(&r.slot_id))
                };
                seen.iter().filter(ours).count()
            };
            if received > 0 {
                tracing::info!(
                    "drill: SIGKILL to node {} mid-burst: {received} of its {expected} submissions of epoch {epoch_id} \
                     received, none answered",
                    node.index
                );
                node.process.kill();
                if *power_loss {
                    match lose_unsynced_lines(&node.data_dir, epoch_id) {
                        Ok(lost) => tracing::info!(
                            "drill: power loss: {lost} `sending` line(s) of epoch {epoch_id} the ledgers had not synced \
                             are gone"
                        ),
                        Err(e) => self.failure = Some(anyhow::anyhow!("drill: taking unsynced ledger lines off: {e}")),
                    }
                }
                release.send_replace(true);
                killed = true;
            }
        }
        killed
    }

    /// The collector answers every node again (a stop, a failure).
    fn release_holds(&self) {
        for (release, _) in self.burst_holds.values() {
            release.send_replace(true);
        }
    }

    /// A `kill-node-mid-burst` drill of `epoch` that never fired (its node
    /// sent nothing in the epoch): the run fails saying so.
    fn burst_not_killed(&self, epoch: &Released) -> Option<anyhow::Error> {
        let epoch_id = epoch.assignment.epoch_id;
        let (&(slot, _), _) =
            self.burst_holds.iter().find(|((_, at), (release, _))| *at == epoch_id && !*release.borrow())?;
        Some(anyhow::anyhow!(
            "--fault kill-node-mid-burst:{slot}@{epoch_id} never fired: the node holding slot {slot} sent nothing in \
             epoch {epoch_id} (none of its slots was selected?)"
        ))
    }

    /// Reads the journal of each expected slot with nothing arrived yet:
    /// one whose node has ended the epoch (a line for each project) sent
    /// nothing more, and `epoch.ended` says why.
    fn look_at_journals(&self, epoch: &mut Released) {
        let answered = arrived_slots(&self.received, epoch);
        let e = epoch.assignment.epoch_id;
        for slot in epoch.expected.keys() {
            if answered.contains(slot) || epoch.ended.contains_key(slot) {
                continue;
            }
            let Some(node) = self.nodes.iter().find(|n| !n.full_node && n.slots.contains(slot)) else { continue };
            let ended = journals::read(&journals::path(&node.data_dir, *slot, node.slots.len() > 1), e);
            if ended.len() >= self.project_count {
                let why = journals::describe(&ended);
                let why = if why.is_empty() { "its node ended the epoch with nothing sent".to_owned() } else { why };
                epoch.ended.insert(*slot, (why, node.index));
            }
        }
    }

    /// Starts again a node whose process ended; an error once one has been
    /// restarted [`MAX_RESTARTS`] times.
    fn restart_dead_node(&mut self) -> Result<()> {
        let dead = self.nodes.iter_mut().find_map(|n| {
            let status = n.process.exited()?;
            Some((n, status))
        });
        let Some((node, status)) = dead else { return Ok(()) };
        process::refuse_after(
            &format!("node {}", node.index),
            node.restarts,
            MAX_RESTARTS,
            &status.to_string(),
            &node.process,
        )?;
        tracing::warn!("node {} exited ({status}); restarting it", node.index);
        node.restarts += 1;
        let log = node.process.log.clone();
        node.process = Node::spawn(&self.exe, node.index, &node.env, &log)?;
        Ok(())
    }

    /// Stops the children without a summary (a start that failed; anvil
    /// stops when it is dropped).
    fn stop_quietly(&mut self) {
        self.release_holds();
        tokio::task::block_in_place(|| {
            let mut procs: Vec<&mut Guarded> = self.nodes.iter_mut().map(|n| &mut n.process).collect();
            stop_all(&mut procs, NODE_STOP_GRACE + STOP_MARGIN);
        });
        self.serving.abort();
        if let Some(f) = &mut self.full_node {
            tokio::task::block_in_place(|| f.stop(NODE_STOP_GRACE + STOP_MARGIN));
        }
        for v in &mut self.validators {
            tokio::task::block_in_place(|| stop_all(&mut [&mut v.process, &mut v.redis], Duration::from_secs(10)));
        }
    }

    /// Stops everything (nodes first, orderly; then the collector, the
    /// validators and anvil), prints the summary, writes the record, and
    /// returns the summary — or the failure that ended the run.
    async fn stop(mut self, out: &mut dyn Write) -> Result<Summary> {
        self.release_holds();
        for n in &mut self.nodes {
            n.peak_rss_kib = n.process.peak_rss_kib().or(n.peak_rss_kib);
        }
        tokio::task::block_in_place(|| {
            let mut procs: Vec<&mut Guarded> = self.nodes.iter_mut().map(|n| &mut n.process).collect();
            stop_all(&mut procs, NODE_STOP_GRACE + STOP_MARGIN);
        });
        if let Some(f) = &mut self.full_node {
            if let Err(e) = f.read_fenced().await {
                tracing::warn!("reading the full node's fence count: {e:#}");
            }
            tokio::task::block_in_place(|| f.stop(NODE_STOP_GRACE + STOP_MARGIN));
            f.read_gathered(&self.run_dir);
        }
        let _ = self.stop_collector.send(());
        // A client someone else left connected must not keep the devnet from ending.
        if tokio::time::timeout(Duration::from_secs(2), &mut self.serving).await.is_err() {
            tracing::info!("a client stayed connected to the collector; closing it");
            self.serving.abort();
        }
        for v in &mut self.validators {
            tokio::task::block_in_place(|| stop_all(&mut [&mut v.process, &mut v.redis], Duration::from_secs(10)));
        }
        tokio::task::block_in_place(|| self.anvil.stop());

        let (foreign, seen): (Vec<_>, Vec<_>) =
            self.received.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().partition(|s| s.foreign);
        if !foreign.is_empty() {
            writeln!(
                out,
                "{} submission(s) came from nodes this devnet did not start (another slot or signer); answered, \
                 not counted",
                foreign.len()
            )?;
        }
        let full_slot = self.full_node.as_ref().map(|f| f.slot_id);
        let mut summary = summarize(&self.released, &seen, &self.nodes, self.interrupted, full_slot);
        summary.restarts += self.full_node.as_ref().map_or(0, fullnode::FullNode::restarts);
        if let Some(f) = &self.full_node {
            writeln!(
                out,
                "full node: {} worker restart(s); {} late result(s) refused by the fence",
                f.restarts(),
                f.fenced
            )?;
        }
        // Each validator's finalizations and disagreements; the first's are
        // the table's and the record's.
        let empty = BTreeMap::new();
        let outcomes = self.outcomes.first().unwrap_or(&empty);
        if !self.validators.is_empty() {
            summary.finalized = Some(outcomes.values().filter(|o| o.batch.is_some()).count());
            summary.onchain_finalized = Some(self.onchain.values().filter(|o| o.finalized).count());
            summary.validator_restarts = self.validators.iter().map(|v| v.restarts).sum();
            let verdicts: Vec<Option<&str>> = seen
                .iter()
                .filter(|s| s.verdict.is_ok())
                .filter_map(|s| s.submission.request.as_ref())
                .map(|r| {
                    let key = (r.slot_id, r.project_id.clone(), r.snapshot_cid.clone());
                    outcomes.get(&r.epoch_id).and_then(|o| o.verdicts.get(&key)).map(String::as_str)
                })
                .collect();
            summary.validator_disagrees = verdicts.iter().filter(|v| v.is_some_and(|v| v != "accepted")).count();
            summary.validator_unjudged = verdicts.iter().filter(|v| v.is_none()).count();
        }
        writeln!(out, "\n{}", summary_text(&summary, self.started.elapsed()))?;
        if let Some(path) = &self.opts.json {
            let record = record::build(&record::Run {
                manifest: &self.manifest,
                pools: &self.pools,
                package: &self.package,
                released: &self.released,
                seen: &seen,
                nodes: &self.nodes,
                summary: &summary,
                outcomes,
                validators: &self.validators.iter().map(|v| (v.index, v.address.to_string())).collect::<Vec<_>>(),
                all_outcomes: &self.outcomes,
                onchain: &self.onchain,
                full_node: self.full_node.as_ref(),
            });
            let text = serde_json::to_vec_pretty(&record)?;
            lite_node_core::atomic_file::write(path, &text)?;
            writeln!(out, "record written to {}", path.display())?;
        }
        if let Some(e) = self.failure {
            return Err(e);
        }
        Ok(summary)
    }
}

fn check_options(opts: &Options, world: &Path, anvil: &Path) -> Result<()> {
    let mut problems = Vec::new();
    if opts.nodes == 0 {
        problems.push("--nodes must be at least 1".to_owned());
    }
    if opts.slots_per_node == 0 || opts.slots_per_node > lite_node_config::MAX_SLOTS as u64 {
        problems.push(format!("--slots-per-node must be between 1 and {}", lite_node_config::MAX_SLOTS));
    }
    if opts.validators > MAX_VALIDATORS {
        problems.push(format!("--validators {}: at most {MAX_VALIDATORS} on one machine", opts.validators));
    }
    if let Some(t) = opts.total_slots
        && t < opts.our_slots()
    {
        problems.push(if opts.slots_per_node > 1 {
            format!(
                "--total-slots {t} is below the {} slots of --nodes {} × --slots-per-node {}",
                opts.our_slots(),
                opts.nodes,
                opts.slots_per_node
            )
        } else {
            format!("--total-slots {t} is below --nodes {}: every node needs a slot", opts.nodes)
        });
    }
    if opts.total_slots.unwrap_or(opts.our_slots()) > u64::from(u32::MAX) {
        problems.push("--total-slots exceeds 2^32 - 1, the protocol's slot id range".into());
    }
    problems.extend(opts.faults.iter().filter_map(|f| f.check(opts)));
    if opts.full_node_workers > MAX_FULL_NODE_WORKERS {
        problems.push(format!(
            "--full-node-workers {}: at most {MAX_FULL_NODE_WORKERS} on one machine",
            opts.full_node_workers
        ));
    }
    if opts.pools == Some(0) {
        problems.push("--pools must be at least 1".into());
    }
    if opts.interval.is_zero() {
        problems.push("--interval-ms must be above 0".into());
    }
    if !world.join("manifest.json").is_file() || !world.join("state.json").is_file() {
        problems.push(format!(
            "no devnet world in {}: build it with `devnet/build-world.sh` (./init.sh devnet does)",
            world.display()
        ));
    }
    if !anvil.is_file() {
        problems.push(format!(
            "anvil is not installed at {}: run `npm ci` in {} (./init.sh devnet does)",
            anvil.display(),
            opts.devnet_dir.display()
        ));
    }
    if problems.is_empty() { Ok(()) } else { Err(lite_node_config::ConfigErrors { problems }.into()) }
}

/// Writes the nodes' projects.json: the projects given by `--projects`,
/// `PROJECTS_CONFIG` or `SNAPSHOT_CONFIG_REPO`, else the BDS base snapshot —
/// with the world's pools wherever a project lists `pools` — after checking
/// that the package runs every one of them. Returns how to describe them.
fn write_projects(
    opts: &Options,
    env: &EnvSnapshot,
    run_dir: &Path,
    pools: &[String],
    package: &LoadedPackage,
    to: &Path,
) -> Result<String> {
    let given = match &opts.projects {
        Some(path) => Some(lite_node_config::ProjectsSource::File(std::path::absolute(path)?)),
        None if lite_node_config::ProjectsSource::configured(env) => {
            Some(lite_node_config::ProjectsSource::from_env(env)?)
        }
        None => None,
    };
    let (projects, from) = match &given {
        Some(source) => {
            let from = match source {
                lite_node_config::ProjectsSource::File(path) => path.display().to_string(),
                lite_node_config::ProjectsSource::Git { pin, file } => {
                    format!("{} in {}", file.display(), lite_node_config::redact_url(&pin.url))
                }
            };
            (lite_node_compute::load_projects(source, &run_dir.join("projects-repo"))?.projects, from)
        }
        None => {
            let bds = json!({"config": [{
                "project_type": "baseSnapshot",
                "processor": {"module": "bds_uniswapv3", "class_name": "BaseSnapshotProcessor"},
                "preload_tasks": ["block_details"],
                "pools": [],
            }]});
            (
                lite_node_config::Projects::parse(&bds.to_string(), "the BDS projects")?.projects,
                "the BDS base snapshot".into(),
            )
        }
    };
    let mut entries = Vec::new();
    let mut pooled = Vec::new();
    for mut project in projects {
        if project.settings.contains_key("pools") {
            project.settings.insert("pools".into(), json!(pools));
            pooled.push(project.project_type.clone());
        }
        let fix = if given.is_some() {
            "give the package's own projects.json with --projects FILE or PROJECTS_CONFIG"
        } else {
            "the devnet runs the BDS base snapshot unless told otherwise: give the package's projects.json with \
             --projects FILE or PROJECTS_CONFIG"
        };
        package.project_processor(&project).map_err(|e| BadInput(format!("{e} ({from}); {fix}")))?;
        let mut entry = project.settings.clone();
        entry.insert("project_type".into(), json!(project.project_type));
        entry.insert("processor".into(), json!({"module": project.module, "class_name": project.class_name}));
        entry.insert("preload_tasks".into(), json!(project.preload_tasks));
        entries.push(serde_json::Value::Object(entry));
    }
    std::fs::write(to, serde_json::to_vec_pretty(&json!({ "config": entries }))?)?;
    let names: Vec<String> = entries.iter().filter_map(|e| e["project_type"].as_str().map(str::to_owned)).collect();
    let pooled = match pooled.len() {
        0 => String::new(),
        n if n == names.len() => format!(", over the world's {} pools", pools.len()),
        _ => format!(", {} over the world's {} pools", pooled.join(", "), pools.len()),
    };
    Ok(format!("{} from {from}{pooled}", names.join(", ")))
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

/// An env file for `lite-node compute run` against this devnet's chain, with
/// the same compute package and projects (readable by its owner only: it
/// holds the package's repository URL).
fn write_compute_run_env(
    run_dir: &Path,
    url: &str,
    manifest: &Manifest,
    projects: &Path,
    child_env: &[(String, String)],
) -> Result<PathBuf> {
    let mut vars: Vec<(String, String)> = vec![
        ("SOURCE_RPC_URL".into(), url.to_owned()),
        ("POWERLOOM_RPC_URL".into(), url.to_owned()),
        ("PROTOCOL_STATE_CONTRACT".into(), manifest.protocol_state.clone()),
        ("DATA_MARKET_CONTRACT".into(), manifest.data_market.clone()),
        ("PROJECTS_CONFIG".into(), projects.display().to_string()),
        ("LITE_NODE_DATA_DIR".into(), run_dir.join("compute-run").display().to_string()),
        // So that `compute run` can tell this devnet has stopped.
        (DEVNET_RUN_DIR_VAR.into(), run_dir.display().to_string()),
    ];
    vars.extend(NAMESPACE_VARS.map(|(k, v)| (k.to_owned(), v.to_owned())));
    // Everything that decides which package is built, and against what.
    let decides = |k: &str| {
        k.starts_with("LITE_NODE_COMPUTE_")
            || k.starts_with("SNAPSHOTTER_COMPUTE_")
            || ["LITE_NODE_PLUGIN_API_DIR", "LITE_NODE_CARGO", "RUSTC"].contains(&k)
    };
    vars.extend(child_env.iter().filter(|(k, _)| decides(k)).cloned());
    let mut text = String::from("# lite-node compute run against this devnet (written by lite-node devnet)\n");
    for (k, v) in &vars {
        if v.contains('\'') || v.contains('\n') {
            bail!(BadInput(format!("{k} holds a quote or a line break, which the devnet's env file cannot carry")));
        }
        text.push_str(&format!("{k}='{v}'\n"));
    }
    let path = run_dir.join("compute-run.env");
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&path)?;
        f.write_all(text.as_bytes())?;
    }
    Ok(path)
}

fn describe_source(cfg: &ComputeConfig) -> String {
    match &cfg.source {
        lite_node_config::ComputeSource::Bundled(dir) => format!("the directory {}, as it is now", dir.display()),
        lite_node_config::ComputeSource::Git { pin, .. } => {
            format!(
                "{} at {}",
                lite_node_config::redact_url(&pin.url),
                pin.commit.as_deref().unwrap_or("the branch tip")
            )
        }
    }
}

/// The nodes log to files at `info` at least (start-up is detected from
/// their logs); a more verbose `RUST_LOG` is passed on.
fn node_log_filter(env: &EnvSnapshot) -> String {
    lite_node_config::LogSettings::from_env(env).map_or_else(|_| "info".to_owned(), |log| log.for_child_logs())
}

/// Validator `index`'s key (1, 2, …), derived so a devnet's validators are
/// the same from run to run (public: anyone can derive it).
fn derived_validator_key(index: u64) -> String {
    let key = alloy::primitives::keccak256(format!("lite-node devnet validator {index}"));
    format!("0x{}", hex::encode(key))
}

/// A signer key for a slot the saved world did not register (public:
/// anyone can derive it, like anvil's own development keys).
fn derived_key(slot_id: u64) -> String {
    let key = alloy::primitives::keccak256(format!("lite-node devnet slot {slot_id}"));
    format!("0x{}", hex::encode(key))
}

async fn wait_until_watching(nodes: &mut [Node], shutdown: &mut Shutdown) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut ready = 0;
        for n in nodes.iter_mut() {
            if n.process.started(&format!("node {}", n.index), "watching ProtocolState")? {
                ready += 1;
            }
        }
        if ready == nodes.len() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("only {ready} of {} nodes were watching after 120 s; see their logs", nodes.len());
        }
        tokio::select! {
            _ = shutdown.as_mut() => bail!("interrupted while the nodes were starting"),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

/// A swap (so snapshots have something to show), then the release of an
/// epoch over the newest block.
async fn release_one(
    driver: &Driver,
    anchor: &Anchor,
    selection: &SelectionCheck,
    k: u64,
    nodes: u64,
    faults: &[(u64, lite_node_config::Drill)],
) -> Result<Released> {
    let pool = (k as usize) % driver.manifest.pools.len();
    driver.swap(pool, k.is_multiple_of(2), u128::from(1 + k % 9) * 10u128.pow(16)).await?;
    let head = driver.head().await?;
    let sent_at = SystemTime::now();
    let (epoch_id, release_block) = driver.release_epoch(head, head).await?;
    let release = lite_node_chain::Release { begin: head, end: head, block_number: release_block };
    let assignment = selection.epoch(anchor, epoch_id, release).await.map_err(|e| anyhow!("epoch {epoch_id}: {e}"))?;
    let ours = |s: &u64| *s <= nodes;
    let drilled = |s: &u64| faults.iter().any(|(f, _)| f == s);
    let expected =
        assignment.selected.iter().filter(|(s, _)| ours(s) && !drilled(s)).map(|(s, p)| (*s, p.clone())).collect();
    let drills = assignment.selected.keys().filter(|s| ours(s) && drilled(s)).copied().collect();
    Ok(Released { assignment, release_block, sent_at, expected, drills, full_expected: 0, ended: BTreeMap::new() })
}

/// What a power loss takes from a node's ledgers (`lose-power-mid-burst`):
/// the lines since their last sync — every `sending` line of `epoch_id`
/// with no answer after it (an answer is synced, and with it what came
/// before) — and, as the machine comes back on another boot, the boot id
/// its epoch's fix (`state/epoch-deadline.json`) was made in. How many
/// lines went.
fn lose_unsynced_lines(data_dir: &Path, epoch_id: u64) -> Result<usize> {
    let fix = data_dir.join("state/epoch-deadline.json");
    if let Ok(text) = std::fs::read_to_string(&fix) {
        let mut v: serde_json::Value = serde_json::from_str(&text).context("the epoch's fix")?;
        v["boot_id"] = "a boot before the devnet's power loss".into();
        std::fs::write(&fix, v.to_string())?;
    }
    let mut ledgers = vec![data_dir.join("state/submissions.jsonl")];
    if let Ok(slots) = std::fs::read_dir(data_dir.join("slots")) {
        ledgers.extend(slots.flatten().map(|s| s.path().join("state/submissions.jsonl")));
    }
    let mut lost = 0;
    for ledger in ledgers.into_iter().filter(|l| l.is_file()) {
        let text = std::fs::read_to_string(&ledger)?;
        let lines: Vec<serde_json::Value> =
            text.lines().map(serde_json::from_str).collect::<Result<_, _>>().context("a ledger line")?;
        let key = |l: &serde_json::Value| (l["epoch_id"].as_u64(), l["project_id"].as_str().map(str::to_owned));
        let answered: std::collections::BTreeSet<_> =
            lines.iter().filter(|l| l["verdict"] != "sending").map(key).collect();
        let unsynced = |l: &serde_json::Value| {
            l["epoch_id"].as_u64() == Some(epoch_id) && l["verdict"] == "sending" && !answered.contains(&key(l))
        };
        let kept: Vec<String> = lines.iter().filter(|l| !unsynced(l)).map(|l| format!("{l}\n")).collect();
        lost += lines.len() - kept.len();
        std::fs::write(&ledger, kept.concat())?;
    }
    Ok(lost)
}

/// How many submissions the collector has answered for `epoch` so far:
/// asked every few milliseconds while an epoch settles, so it counts under
/// the lock the collector records under, and copies nothing (copying a
/// thousand answers each time took a tenth of the devnet's CPU beside a
/// thousand-slot node, measured).
fn count_arrived(received: &Received, epoch: &Released) -> usize {
    let seen = received.lock().unwrap_or_else(|p| p.into_inner());
    seen.iter()
        .filter(|s| !s.foreign)
        .filter(|s| s.submission.request.as_ref().is_some_and(|r| r.epoch_id == epoch.assignment.epoch_id))
        .count()
}

/// The slots the collector has answered for `epoch` so far.
fn arrived_slots(received: &Received, epoch: &Released) -> std::collections::BTreeSet<u64> {
    let seen = received.lock().unwrap_or_else(|p| p.into_inner());
    seen.iter()
        .filter(|s| !s.foreign)
        .filter_map(|s| s.submission.request.as_ref())
        .filter(|r| r.epoch_id == epoch.assignment.epoch_id)
        .map(|r| r.slot_id)
        .collect()
}

/// What the collector has answered for `epoch` so far.
fn arrived(received: &Received, epoch: &Released) -> Vec<collector::Seen> {
    let seen = received.lock().unwrap_or_else(|p| p.into_inner());
    seen.iter()
        .filter(|s| !s.foreign)
        .filter(|s| s.submission.request.as_ref().is_some_and(|r| r.epoch_id == epoch.assignment.epoch_id))
        .cloned()
        .collect()
}

fn latency_ms(epoch: &Released, seen: &collector::Seen) -> f64 {
    seen.answered_at.duration_since(epoch.sent_at).unwrap_or_default().as_secs_f64() * 1000.0
}

fn short(address: &str) -> String {
    if address.len() > 12 {
        format!("{}…{}", &address[..6], &address[address.len() - 4..])
    } else {
        address.to_owned()
    }
}

/// Room for every node's "slot→pool" in the table (listed up to 6, counted beyond).
fn selected_width(nodes: u64) -> usize {
    if nodes > 6 { 22 } else { (nodes as usize * 16).max(22) }
}

fn row(epoch: &Released, received: &Received, width: usize, full_slot: Option<u64>) -> String {
    let seen = arrived(received, epoch);
    let accepted = seen.iter().filter(|s| s.verdict.is_ok()).count();
    let rejected = seen.len() - accepted;
    let missing = (epoch.expected.len() + epoch.full_expected).saturating_sub(accepted + rejected);
    let drills = if epoch.drills.len() > 6 {
        format!(" {} drilled", epoch.drills.len())
    } else {
        epoch.drills.iter().map(|s| format!(" {s}→drill")).collect::<String>()
    };
    let selected = if epoch.expected.is_empty() && epoch.drills.is_empty() {
        "none of ours".to_owned()
    } else if epoch.expected.len() > 6 || epoch.drills.len() > 6 {
        format!("{} of our slots", epoch.expected.len()) + &drills
    } else {
        epoch.expected.iter().map(|(s, p)| format!("{s}→{}", short(p))).collect::<Vec<_>>().join(" ") + &drills
    };
    let selected = selected.trim_start().to_owned();
    let slowest = seen
        .iter()
        .filter(|s| full_slot.is_none() || s.submission.request.as_ref().is_some_and(|r| Some(r.slot_id) != full_slot))
        .map(|s| latency_ms(epoch, s))
        .fold(None, |m: Option<f64>, l| Some(m.map_or(l, |m| m.max(l))));
    let latency = slowest.map_or("-".to_owned(), |l| format!("{l:.0} ms"));
    let mut line = format!(
        "{:>5}  {:>6}  {:<width$}  {:>8}  {:>8}  {:>10}",
        epoch.assignment.epoch_id, epoch.release_block, selected, accepted, rejected, latency
    );
    let ended = epoch.ended.len().min(missing);
    if missing > ended {
        line.push_str(&format!("  ({} not answered in time)", missing - ended));
    }
    // Slots that ended without a submission, by reason (the first few).
    let mut by_reason: BTreeMap<&str, (Vec<u64>, std::collections::BTreeSet<u64>)> = BTreeMap::new();
    for (slot, (why, node)) in &epoch.ended {
        let (slots, nodes) = by_reason.entry(why.as_str()).or_default();
        slots.push(*slot);
        nodes.insert(*node);
    }
    let mut reasons: Vec<_> = by_reason.into_iter().collect();
    reasons.sort_by_key(|(_, (slots, _))| std::cmp::Reverse(slots.len()));
    for (why, (slots, nodes)) in reasons.iter().take(MAX_REASONS) {
        let which = if slots.len() == 1 { "slot" } else { "slots" };
        let logs: Vec<String> = nodes.iter().map(|n| format!("run/node-{n}.log")).collect();
        let logs = match logs.as_slice() {
            [first, .., last] if logs.len() > 3 => format!("{first} … {last}"),
            few => few.join(", "),
        };
        line.push_str(&format!("\n       {which} {}: {why} ({logs})", lite_node_config::format_slot_ids(slots)));
    }
    if reasons.len() > MAX_REASONS {
        line.push_str(&format!("\n       … and {} other reasons (see the nodes' logs)", reasons.len() - MAX_REASONS));
    }
    for s in seen.iter().filter(|s| s.verdict.is_err()) {
        let slot = s.submission.request.as_ref().map_or(0, |r| r.slot_id);
        line.push_str(&format!("\n       rejected slot {slot}: {}", s.verdict.as_ref().unwrap_err()));
    }
    line
}

fn summarize(
    released: &[Released],
    seen: &[collector::Seen],
    nodes: &[Node],
    interrupted: bool,
    full_slot: Option<u64>,
) -> Summary {
    let mut accepted = 0;
    let mut rejected = 0;
    let mut missing = 0;
    let mut ended_without_sending = 0;
    let mut latencies_ms = Vec::new();
    for epoch in released {
        let of_epoch: Vec<&collector::Seen> = seen
            .iter()
            .filter(|s| s.submission.request.as_ref().is_some_and(|r| r.epoch_id == epoch.assignment.epoch_id))
            .collect();
        for s in &of_epoch {
            if s.verdict.is_ok() {
                accepted += 1;
                latencies_ms.push(latency_ms(epoch, s));
            } else {
                rejected += 1;
            }
        }
        if let Some(full) = full_slot {
            let done = of_epoch
                .iter()
                .filter(|s| s.verdict.is_ok() && s.submission.request.as_ref().is_some_and(|r| r.slot_id == full))
                .count();
            missing += epoch.full_expected.saturating_sub(done);
        }
        for slot in epoch.expected.keys() {
            let answered = of_epoch.iter().any(|s| s.submission.request.as_ref().is_some_and(|r| r.slot_id == *slot));
            if !answered {
                missing += 1;
                ended_without_sending += usize::from(epoch.ended.contains_key(slot));
            }
        }
    }
    latencies_ms.sort_by(f64::total_cmp);
    // The same slot, epoch and project accepted twice in different messages:
    // a double submission. (The same bytes again are one `Seen`, counted in
    // its `arrivals`.)
    let mut once = std::collections::BTreeSet::new();
    let duplicates = seen
        .iter()
        .filter(|s| s.verdict.is_ok())
        .filter_map(|s| s.submission.request.as_ref())
        .filter(|r| !once.insert((r.slot_id, r.epoch_id, r.project_id.clone())))
        .count();
    Summary {
        epochs: released.len(),
        accepted,
        rejected,
        missing,
        ended_without_sending,
        interrupted,
        latencies_ms,
        peak_rss_kib: nodes.iter().filter_map(|n| n.peak_rss_kib.map(|r| (n.slot_id, r))).collect(),
        duplicates,
        retransmissions: seen.iter().map(|s| s.arrivals.saturating_sub(1) as usize).sum(),
        restarts: nodes.iter().map(|n| n.restarts).sum(),
        finalized: None,
        validator_disagrees: 0,
        validator_unjudged: 0,
        onchain_finalized: None,
        validator_restarts: 0,
    }
}

/// The chain's part of a row: how many validators attested and where the
/// epoch was finalized, counted in anchor blocks after its window closed.
fn with_onchain(mut line: String, o: &validator::OnchainOutcome, validators: usize) -> String {
    match o.finalized_block {
        Some(b) if o.finalized => line.push_str(&format!(
            "  on chain +{} blk, {}/{validators} attested{}",
            b.saturating_sub(o.closes),
            o.attestations,
            if o.divergent.is_empty() { String::new() } else { format!(", {} divergent", o.divergent.len()) }
        )),
        _ => line.push_str(&format!("  NOT finalized on chain ({}/{validators} attested)", o.attestations)),
    }
    line
}

/// The row's finalized column: projects, total votes and the root's start,
/// and each submission the validator rejected, with its reason.
fn with_finalized(mut line: String, outcome: &validator::EpochOutcome) -> String {
    match &outcome.batch {
        Some(b) => {
            let projects = b["projects"].as_array().map_or(0, Vec::len);
            let votes: u64 = b["projects"].as_array().into_iter().flatten().filter_map(|p| p["votes"].as_u64()).sum();
            let root = b["root"].as_str().unwrap_or("");
            line.push_str(&format!("  {projects}p {votes}v {}…", &root[..root.len().min(10)]));
        }
        None => line.push_str("  not finalized in time"),
    }
    for ((slot, project, _), verdict) in outcome.verdicts.iter().filter(|(_, v)| *v != "accepted") {
        line.push_str(&format!("\n       validator rejected slot {slot} {project}: {verdict}"));
    }
    line
}

/// The value at quantile `q` of sorted `values` (nearest rank).
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

fn summary_text(s: &Summary, took: Duration) -> String {
    let ms = |q| quantile(&s.latencies_ms, q).map_or("-".to_owned(), |v| format!("{v:.0} ms"));
    let rss = s
        .peak_rss_kib
        .iter()
        .map(|(_, r)| *r)
        .max()
        .map_or("-".to_owned(), |r| format!("{:.1} MiB", r as f64 / 1024.0));
    let mut extra = match (s.duplicates, s.restarts) {
        (0, 0) => String::new(),
        (d, r) => format!(", {d} duplicate(s), {r} node restart(s)"),
    };
    if s.ended_without_sending > 0 {
        extra = format!(
            " ({} of them ended in their node with nothing sent: the table says why){extra}",
            s.ended_without_sending
        );
    }
    if s.retransmissions > 0 {
        extra.push_str(&format!(
            ", {} message(s) sent again unchanged (answered alike, not duplicates)",
            s.retransmissions
        ));
    }
    if let Some(f) = s.finalized {
        extra.push_str(&format!("; the validator finalized {f} of {} epochs", s.epochs));
        if s.validator_disagrees > 0 {
            extra.push_str(&format!("; it rejected {} submission(s) the collector accepted", s.validator_disagrees));
        }
        if s.validator_unjudged > 0 {
            extra.push_str(&format!(
                "; {} submission(s) the collector accepted were never judged by it",
                s.validator_unjudged
            ));
        }
    }
    if let Some(f) = s.onchain_finalized {
        extra.push_str(&format!("; the chain finalized {f} of {} epochs", s.epochs));
        if s.validator_restarts > 0 {
            extra.push_str(&format!(", {} validator restart(s)", s.validator_restarts));
        }
    }
    format!(
        "{} epochs in {:.0} s{}: {} accepted, {} rejected, {} missing{extra}\n\
         release → acknowledgement: median {}, p90 {}, p99 {}, max {}\n\
         peak RSS of a node: {rss}",
        s.epochs,
        took.as_secs_f64(),
        if s.interrupted { " (interrupted)" } else { "" },
        s.accepted,
        s.rejected,
        s.missing,
        ms(0.5),
        ms(0.9),
        ms(0.99),
        ms(1.0),
    )
}

/// The saved world to load: `--world`, else the default one, else (for
/// `--pools` above the default world's five) `<devnet dir>/world-1000`.
fn world_dir(opts: &Options) -> PathBuf {
    match (&opts.world, opts.pools) {
        (Some(world), _) => world.clone(),
        (None, Some(n)) if n > DEFAULT_WORLD_POOLS => opts.devnet_dir.join("world-1000"),
        (None, _) => opts.devnet_dir.join("world"),
    }
}

/// The pools of the default world (`devnet/build-world.sh`).
const DEFAULT_WORLD_POOLS: usize = 5;

/// Starts the full node: its projects (every pooled project as a full
/// node), its Redis, its coordinator (added to `nodes`) and its workers.
#[allow(clippy::too_many_arguments)]
async fn start_full_node(
    opts: &Options,
    exe: &Path,
    run_dir: &Path,
    base_env: &[(String, String)],
    manifest: &Manifest,
    projects: &Path,
    (slot_id, signer, key): (u64, Address, String),
    nodes: &mut Vec<Node>,
) -> Result<fullnode::FullNode> {
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(projects)?)?;
    let mut pooled = Vec::new();
    for p in doc["config"].as_array_mut().into_iter().flatten() {
        if p.get("pools").is_some() {
            p["full_node"] = json!(true);
            pooled.push(p["project_type"].as_str().unwrap_or_default().to_owned());
        }
    }
    if pooled.is_empty() {
        bail!(BadInput(
            "--full-node-workers: no project lists `pools`, so a full node has nothing to divide among workers".into()
        ));
    }
    let full_projects = run_dir.join("projects-full-node.json");
    std::fs::write(&full_projects, serde_json::to_vec_pretty(&doc)?)?;
    let (redis, redis_url) = fullnode::FullNode::start_redis(run_dir, None)?;
    let market: Address = world::address(&manifest.data_market, "dataMarket")?;
    let board = lite_node_config::cluster_name(&market, slot_id);
    let mut full = fullnode::FullNode::new(slot_id, opts.assign, redis, redis_url.clone(), pooled, board);
    let mut env = base_env.to_vec();
    let vars = [
        ("SLOT_ID", slot_id.to_string()),
        ("PROJECTS_CONFIG", full_projects.display().to_string()),
        ("LITE_NODE_CLUSTER_REDIS_URL", redis_url),
        ("LITE_NODE_CLUSTER_ASSIGN", opts.assign.name().to_owned()),
    ];
    env.extend(vars.into_iter().map(|(k, v)| (k.to_owned(), v)));

    let index = opts.nodes + 1;
    let data_dir = run_dir.join("full-node");
    std::fs::create_dir_all(&data_dir)?;
    let mut coordinator = env.clone();
    let vars = [
        ("LITE_NODE_ROLE", "coordinator".to_owned()),
        ("SIGNER_ACCOUNT_ADDRESS", signer.to_string()),
        ("SIGNER_ACCOUNT_PRIVATE_KEY", key),
        ("LITE_NODE_DATA_DIR", data_dir.display().to_string()),
    ];
    coordinator.extend(vars.into_iter().map(|(k, v)| (k.to_owned(), v)));
    let process = Node::spawn(exe, index, &coordinator, &run_dir.join("full-node.log"))?;
    nodes.push(Node {
        index,
        slot_id,
        slots: vec![slot_id],
        signer,
        data_dir,
        process,
        peak_rss_kib: None,
        env: coordinator,
        restarts: 0,
        full_node: true,
    });
    // The workers: no signer, no collector.
    let mut worker = env;
    worker.retain(|(k, _)| !k.starts_with("LOCAL_COLLECTOR_") && k != "LITE_NODE_START_BLOCK");
    worker.push(("LITE_NODE_ROLE".into(), "worker".into()));
    if let Some(delay) = opts.worker_rpc_delay {
        let anvil = base_env.iter().find(|(k, _)| k == "SOURCE_RPC_URL").map(|(_, v)| v.clone()).unwrap_or_default();
        let upstream = anvil.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let relayed = proxy::start(upstream, delay).await?;
        tracing::info!("the full node's workers reach the chain through {relayed}, {} ms later", delay.as_millis());
        worker.push(("SOURCE_RPC_URL".into(), relayed));
    }
    for k in 1..=opts.full_node_workers {
        full.spawn_worker(exe, run_dir, k, &worker)?;
    }
    full.wait_joined(Duration::from_secs(120)).await?;
    Ok(full)
}
