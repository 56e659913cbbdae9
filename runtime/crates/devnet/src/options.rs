//! What `lite-node devnet` is asked to do ([`Options`]) and the checks made
//! of it before anything starts.

use super::*;

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
    /// Validators behind the collector (at most `MAX_VALIDATORS`), each with
    /// its own Redis, meeting over gossip.
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
    /// The market's other operators (`operators.rs`): each a slot of its own
    /// and a collector of its own on the validators' gossip topic (0: none).
    pub operators: u64,
    /// Peers attacking the validators' gossip for the whole run
    /// (`hostile.rs`; 0: none).
    pub hostile: u64,
    /// Whether the validators store each finalized epoch's pairs on chain;
    /// `false`: roots only, and the nodes read their previous snapshots'
    /// pairs from the validators' APIs (issue 54 item 7).
    pub pairs_on_chain: bool,
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
    pub(crate) fn our_slots(&self) -> u64 {
        self.nodes.saturating_mul(self.slots_per_node.max(1))
    }

    /// The operators' slots (`--operators`), after the full node's (empty without).
    pub(crate) fn operator_slots(&self) -> std::ops::RangeInclusive<u64> {
        let first = self.our_slots() + 1 + u64::from(self.full_node_workers > 0);
        first..=first + self.operators - 1
    }

    /// The slots of the flood attackers (`--hostile`: every fourth
    /// attacker, from the first), after the operators' (empty without).
    pub(crate) fn hostile_slots(&self) -> std::ops::RangeInclusive<u64> {
        let first = self.our_slots() + 1 + u64::from(self.full_node_workers > 0) + self.operators;
        first..=first + self.hostile.div_ceil(4) - 1
    }

    /// `getTotalNodeCount` unless `--total-slots` says otherwise: every
    /// node's slot, and with operators or attackers every slot up to the
    /// last registered (the full node's among them).
    pub(crate) fn default_total_slots(&self) -> u64 {
        if self.operators > 0 || self.hostile > 0 { *self.hostile_slots().end() } else { self.our_slots() }
    }

    /// The node (numbered from 1) that works `slot`.
    pub(crate) fn node_of(&self, slot: u64) -> u64 {
        (slot - 1) / self.slots_per_node.max(1) + 1
    }

    /// The slots node `n` works.
    pub(crate) fn slots_of(&self, n: u64) -> std::ops::RangeInclusive<u64> {
        let k = self.slots_per_node.max(1);
        (n - 1) * k + 1..=n * k
    }

    /// Every drilled slot: all the slots of a drilled slot's node.
    pub(crate) fn drilled_slots(&self) -> Vec<(u64, lite_node_config::Drill)> {
        self.drills().flat_map(|(slot, drill)| self.slots_of(self.node_of(slot)).map(move |s| (s, drill))).collect()
    }

    /// The alert drills, `(slot, drill)`.
    pub(crate) fn drills(&self) -> impl Iterator<Item = (u64, lite_node_config::Drill)> + '_ {
        self.faults.iter().filter_map(|f| match *f {
            Fault::Drill(slot, drill) => Some((slot, drill)),
            _ => None,
        })
    }

    /// The alert drill a node working `slots` runs, if any.
    pub(crate) fn drill_of(&self, slots: &[u64]) -> Option<lite_node_config::Drill> {
        self.faults.iter().find_map(|f| f.drill_for(slots))
    }
}

pub(crate) fn check_options(opts: &Options, world: &Path, anvil: &Path) -> Result<()> {
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
    if opts.operators > 0 {
        if opts.full_node_workers == 0 {
            problems.push(
                "--operators needs --full-node-workers: an operator's stand-in signs the full node's snapshot of its \
                 pool"
                    .into(),
            );
        }
        if opts.operators > MAX_OPERATORS {
            problems.push(format!("--operators {}: at most {MAX_OPERATORS} on one machine", opts.operators));
        }
    }
    if (opts.operators > 0 || opts.hostile > 0)
        && let Some(t) = opts.total_slots
        && t < opts.default_total_slots()
    {
        problems.push(format!(
            "--total-slots {t} is below the last slot of --operators and --hostile, {}: each needs a slot",
            opts.default_total_slots()
        ));
    }
    if opts.hostile > 0 && opts.validators == 0 {
        problems.push("--hostile needs --validators: the attackers go for the validators' gossip".into());
    }
    if opts.hostile > MAX_HOSTILE {
        problems.push(format!("--hostile {}: at most {MAX_HOSTILE} on one machine", opts.hostile));
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

/// The saved world to load: `--world`, else the default one, else (for
/// `--pools` above the default world's five) `<devnet dir>/world-1000`.
pub(crate) fn world_dir(opts: &Options) -> PathBuf {
    match (&opts.world, opts.pools) {
        (Some(world), _) => world.clone(),
        (None, Some(n)) if n > DEFAULT_WORLD_POOLS => opts.devnet_dir.join("world-1000"),
        (None, _) => opts.devnet_dir.join("world"),
    }
}

/// Attackers one devnet runs.
pub(crate) const MAX_HOSTILE: u64 = 100;

/// Operators one devnet runs (each a collector: the first few processes).
pub(crate) const MAX_OPERATORS: u64 = 1_000;

/// The pools of the default world (`devnet/build-world.sh`).
pub(crate) const DEFAULT_WORLD_POOLS: usize = 5;
