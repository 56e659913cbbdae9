//! The validator as a service: which components run in this process, what
//! they are given, and [`run`], which starts them and stops them with the
//! shutdown it is handed. `lite-node validator` parses its flags into
//! [`Settings`] and a [`Wiring`] and calls [`start`], which connects the
//! [`Deps`] and runs; tests can build their own `Deps` and call [`run`].
//!
//! The chain reads the dequeuer makes are [`AnchorChain`]: the slot
//! registry on the anchor, and the data market's assignment rule from the
//! compute package (`lite_node_compute::selection`, the check the devnet
//! collector makes too).

use std::{io::Write, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use alloy::primitives::Address;
use anyhow::Context;
use lite_node_chain::Chains;
use lite_node_chain::{
    Anchor, Release,
    epochs::{Follow, Watcher},
};
use lite_node_compute::selection::{Refusal, Refused, SelectionCheck};
use lite_node_config::{ChainConfig, ComputeConfig, ProjectsSource};
use lite_node_core::{
    data_dir::DataDirLock,
    retry::{Policy, retry},
    signals::Shutdown,
};
use lite_node_protocol::submission::Projects;

use crate::{
    Market,
    aggregator::Aggregator,
    chain::{ChainReads, EpochFacts, Selection, SlotRegistry},
    dequeuer::{Dequeuer, DequeuerSettings},
    finalizer::Finalizer,
    gateway::{Admission, Gateway},
    monitor::Monitor,
    tracker::Tracker,
};

/// How long a validator that knows other validators may be out of their
/// mesh (a few gossipsub heartbeats) before its intake counts as broken.
const UNMESHED_GRACE: Duration = Duration::from_secs(10);

/// Declares [`Component`] with its names, so the list, the names and their
/// parsing cannot drift apart.
macro_rules! components {
    ($($(#[$doc:meta])* $name:ident = $label:literal,)*) => {
        /// A validator component; each may run in a process of its own
        /// (they only meet in Redis).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Component {
            $($(#[$doc])* $name,)*
        }

        impl Component {
            /// Every component, in the order they are started.
            pub const ALL: &[Component] = &[$(Component::$name,)*];

            /// The name `--components` takes.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Component::$name => $label,)*
                }
            }
        }

        impl std::str::FromStr for Component {
            type Err = String;
            fn from_str(name: &str) -> Result<Self, String> {
                match name {
                    $($label => Ok(Component::$name),)*
                    other => Err(format!(
                        "unknown component `{other}` (one of {})",
                        Component::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
                    )),
                }
            }
        }
    };
}

components! {
    /// The collector's gRPC service: each submission queued.
    Gateway = "gateway",
    /// Windows opened and closed from the anchor chain's releases and head.
    Monitor = "monitor",
    /// The checks, and one verdict per submission.
    Dequeuer = "dequeuer",
    /// Each closed epoch's consensus, in parts.
    Finalizer = "finalizer",
    /// The level-1 batch of each finalized epoch.
    Aggregator = "aggregator",
    /// Dashboards, participation, gaps and pruning.
    Tracker = "tracker",
    /// The read-only monitor API.
    Api = "api",
    /// The epoch's batch submitted and attested on the anchor chain (with a
    /// validator key; one process per validator).
    Onchain = "onchain",
}

/// How this process's components run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The components to run (every one when empty).
    pub components: Vec<Component>,
    pub validator_id: String,
    /// Where the gateway listens (gRPC) and the monitor API (HTTP).
    pub listen: SocketAddr,
    pub api_listen: SocketAddr,
    /// Where the event monitor's cursor is kept, and its first anchor block.
    pub data_dir: PathBuf,
    pub from_block: Option<u64>,
    pub poll_interval: Duration,
    /// Anchor blocks a window stays open after its release.
    pub window_blocks: u64,
    /// Dequeuer workers, and projects per finalizer part.
    pub workers: usize,
    pub part_size: usize,
    /// What the gateway takes in.
    pub admission: Admission,
    /// The gateway also takes submissions from the validators' gossip
    /// network (`None`: gRPC only).
    pub gossip: Option<GossipSettings>,
    /// The validator's account on the anchor chain (`None`: nothing is
    /// submitted or attested).
    pub onchain: Option<OnchainSettings>,
    /// How the finalized data is kept and served to consumers.
    pub data: DataSettings,
}

/// How the finalized data is kept and served (issue 54).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSettings {
    /// Where each range of [`DataSettings::archive_epochs`] kept epochs is
    /// written as a CAR once complete (`None`: no archives).
    pub archive_dir: Option<PathBuf>,
    pub archive_epochs: u64,
    /// Where each archive is uploaded once written, its local copy then
    /// removed (`None`: archives stay in [`DataSettings::archive_dir`]).
    pub archive_bucket: Option<std::sync::Arc<crate::bucket::Bucket>>,
    /// Days an epoch is kept once finalized (`None`: for good).
    pub retention_days: Option<u32>,
    /// Requests a second one client (IP address) may make of the data
    /// routes, sustained (twice that in a burst); `None`: no limit.
    pub rate_per_client: Option<std::num::NonZeroU32>,
}

impl Default for DataSettings {
    fn default() -> Self {
        Self {
            archive_dir: None,
            archive_epochs: ARCHIVE_EPOCHS,
            archive_bucket: None,
            retention_days: Some(RETENTION_DAYS),
            rate_per_client: std::num::NonZeroU32::new(DATA_RATE),
        }
    }
}

/// Epochs an archive file holds by default (a day of two-minute epochs).
pub const ARCHIVE_EPOCHS: u64 = 720;
/// Days a validator keeps a finalized epoch by default.
pub const RETENTION_DAYS: u32 = 30;
/// Data requests a second per client by default.
pub const DATA_RATE: u32 = 1_000;

/// How the validator acts on chain.
#[derive(Clone, Debug)]
pub struct OnchainSettings {
    /// Its registered validator key (never printed).
    pub key: lite_node_config::SecretKey,
    /// Anchor blocks a submitter's turn lasts.
    pub fallback_blocks: u64,
    /// `false`: roots only, no pair stored on chain ([`crate::onchain::Onchain::root_only`]).
    pub pairs_on_chain: bool,
}

/// Where the gateway's gossip peer listens and whom it dials first; its
/// identity is `p2p-identity.key` in the data dir.
#[derive(Clone, Debug)]
pub struct GossipSettings {
    pub listen: lite_node_gossip::Multiaddr,
    pub bootstrap: Vec<lite_node_gossip::Multiaddr>,
}

impl Settings {
    /// Whether `c` runs in this process.
    pub fn runs(&self, c: Component) -> bool {
        if c == Component::Onchain && self.onchain.is_none() {
            return false;
        }
        self.components.is_empty() || self.components.contains(&c)
    }

    /// Every setting in range; `Err` names the flag.
    pub fn check(&self) -> Result<(), lite_node_core::BadInput> {
        let bad = |what: &str| Err(lite_node_core::BadInput(what.to_owned()));
        if self.window_blocks == 0 {
            return bad("--window-blocks must be at least 1");
        }
        if self.workers == 0 {
            return bad("--workers must be at least 1: with none, no submission ever gets a verdict");
        }
        if self.part_size == 0 {
            return bad("--part-size must be at least 1 (projects per finalizer part)");
        }
        if self.admission.max_queue == 0 {
            return bad("--max-queue must be at least 1");
        }
        if self.components.contains(&Component::Onchain) && self.onchain.is_none() {
            return bad("--components onchain needs the validator's key in VALIDATOR_SIGNER_PRIVATE_KEY");
        }
        if self.onchain.as_ref().is_some_and(|o| o.fallback_blocks == 0) {
            return bad("--fallback-blocks must be at least 1");
        }
        if let Some(g) = &self.gossip {
            lite_node_gossip::check(&g.bootstrap, &self.data_dir.join("p2p-identity.key"))
                .map_err(|e| lite_node_core::BadInput(format!("--p2p-bootstrap or --data-dir: {e}")))?;
        }
        Ok(())
    }
}

/// What the components are given: Redis, the anchor chain, and (for the
/// dequeuer) the data market's selection check.
#[derive(Debug)]
pub struct Deps {
    pub redis: redis::Client,
    /// Shown in the start-up line (without credentials).
    pub redis_shown: String,
    pub anchor: Arc<Anchor>,
    /// Required when the dequeuer runs.
    pub selection: Option<Arc<SelectionCheck>>,
    /// The projects the data market defines, which the gateway checks before
    /// it stores a submission (the dequeuer checks them in any case).
    pub projects: Option<Projects>,
}

/// What a process is told to connect to, before anything is connected.
#[derive(Clone, Debug)]
pub struct Wiring {
    /// `--redis-url`.
    pub redis_url: String,
    /// The anchor chain and its contracts, and the source chain (the
    /// epochs' seed blocks).
    pub chains: ChainConfig,
    /// The data market's active pools (the dequeuer's selection check).
    pub pools: Vec<String>,
    /// The compute package with the market's assignment rule (the dequeuer's).
    pub compute: Option<ComputeConfig>,
    /// The data market's namespace and where its projects.json is (the
    /// dequeuer's and the gateway's project check).
    pub projects: Option<(String, ProjectsSource)>,
}

impl Deps {
    /// Connects what `wiring` names: a Redis client (connections come
    /// later, each component its own), the chains, and — with pools and a
    /// package — the selection check, the package fetched and built first
    /// if it is not in the cache.
    pub async fn connect(wiring: Wiring) -> anyhow::Result<Self> {
        let redis = redis::Client::open(wiring.redis_url.as_str()).map_err(|e| {
            let shown = lite_node_core::url::redact_url(&wiring.redis_url);
            lite_node_core::BadInput(format!("--redis-url {shown}: {e} (expected redis://HOST:PORT)"))
        })?;
        let chains = Chains::connect(&wiring.chains).map_err(lite_node_core::BadInput)?;
        // The contracts first: a wrong address is found before anything is built.
        let anchor = chains.anchor()?.clone();
        let missing =
            retry(Policy::CHAIN, "reading the contracts' code", || anchor.contracts_without_code(), |_| true).await?;
        if let Some((flag, address)) = missing.first() {
            anyhow::bail!(lite_node_core::BadInput(format!(
                "--{flag} {address}: no contract there on the anchor chain (wrong address, or wrong chain)"
            )));
        }
        let projects = match wiring.projects {
            Some((namespace, source)) => {
                let data_dir = wiring.compute.as_ref().map(|c| c.data_dir.clone()).unwrap_or_else(|| ".".into());
                let loaded =
                    tokio::task::spawn_blocking(move || lite_node_compute::load_projects(&source, &data_dir)).await??;
                Some(Projects::declared(
                    namespace,
                    loaded.projects.iter().map(|p| (p.project_type.clone(), p.per_pool)),
                ))
            }
            None => None,
        };
        let selection = match (wiring.pools.is_empty(), wiring.compute, &projects) {
            (false, Some(compute), Some(projects)) => {
                let package = tokio::task::spawn_blocking(move || lite_node_compute::load(&compute)).await??;
                let check =
                    SelectionCheck::new(chains.source.clone(), wiring.pools, Arc::new(package), projects.clone())
                        .map_err(lite_node_core::BadInput)?;
                Some(Arc::new(check))
            }
            _ => None,
        };
        // Its password, if it has one, never reaches a log line.
        let redis_shown = lite_node_core::url::redact_url(&wiring.redis_url);
        Ok(Self { redis, redis_shown, anchor, selection, projects })
    }
}

/// Connects what `wiring` names ([`Deps::connect`]) and [`run`]s.
pub fn start(
    settings: Settings,
    wiring: Wiring,
    shutdown: Shutdown,
) -> lite_node_core::BoxFuture<'static, anyhow::Result<()>> {
    let mut shutdown = shutdown;
    Box::pin(async move {
        settings.check()?;
        // Before anything is built: a second validator on the directory is
        // refused at once.
        let lock = lock(&settings)?;
        let deps = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            deps = Deps::connect(wiring) => deps?,
        };
        run_locked(settings, deps, lock, shutdown).await
    })
}

/// One event monitor (its cursor is there) and one on-chain worker (its
/// lease is named after it) per directory: the lock, when either runs in
/// this process.
fn lock(settings: &Settings) -> anyhow::Result<Option<DataDirLock>> {
    Ok(if settings.runs(Component::Monitor) || settings.runs(Component::Onchain) {
        Some(DataDirLock::acquire_for(
            &settings.data_dir,
            "--data-dir (one event monitor and one on-chain worker per directory)",
        )?)
    } else {
        None
    })
}

/// The validator's chain reads: the slot registry on the anchor, and the
/// compute package's assignment rule (as the devnet collector checks it).
#[derive(Debug)]
pub struct AnchorChain {
    pub anchor: Arc<Anchor>,
    pub selection: Arc<SelectionCheck>,
}

/// The slot registry on the anchor (the gossip intake's signer check).
impl SlotRegistry for Anchor {
    async fn signer(&self, slot_id: u64, block: u64) -> Result<Address, String> {
        self.slot_owner_at(slot_id, block).await.map_err(|e| format!("anchor unavailable: {e}"))
    }

    /// `getTotalNodeCount` as of `block` (slots register in order and only
    /// the last is removed, so a slot past it holds no signer), or the
    /// market's highest full node then, if past it (as the collector counts).
    async fn total_slots(&self, block: u64) -> Result<u64, String> {
        let total = self.total_slots_at(block).await.map_err(|e| format!("anchor unavailable: {e}"))?;
        let full = self.full_nodes_at(block).await.map_err(|e| format!("anchor unavailable: {e}"))?;
        Ok(full.last().copied().unwrap_or(0).max(total))
    }

    async fn enabled(&self, signer: Address, block: u64) -> Result<bool, String> {
        self.snapshotter_enabled_at(signer, block).await.map_err(|e| format!("anchor unavailable: {e}"))
    }
}

impl SlotRegistry for AnchorChain {
    async fn signer(&self, slot_id: u64, block: u64) -> Result<Address, String> {
        SlotRegistry::signer(&*self.anchor, slot_id, block).await
    }

    async fn total_slots(&self, block: u64) -> Result<u64, String> {
        SlotRegistry::total_slots(&*self.anchor, block).await
    }

    async fn enabled(&self, signer: Address, block: u64) -> Result<bool, String> {
        SlotRegistry::enabled(&*self.anchor, signer, block).await
    }
}

impl ChainReads for AnchorChain {
    async fn selection(&self, epoch: EpochFacts, slot_id: u64, project_id: &str) -> Result<Selection, String> {
        let release = Release { begin: epoch.begin, end: epoch.end, block_number: epoch.release_block };
        let assignment = self.selection.epoch(&self.anchor, epoch.epoch_id, release).await.map_err(|e| match e {
            Refused::Rejected(why) | Refused::Unavailable(why) => why,
        })?;
        Ok(match self.selection.check(&assignment, slot_id, project_id) {
            Ok(()) => Selection::Selected,
            Err(Refusal::NotSelected(why)) => Selection::NotSelected(why),
            Err(Refusal::WrongPool(why)) => Selection::WrongPool(why),
            Err(Refusal::UnknownProject(why)) => Selection::UnknownProject(why),
        })
    }
}

/// Runs the chosen components until `shutdown` resolves or one of them ends
/// with an error (which is returned). A component still busy 5 s after the
/// stop is left behind.
pub async fn run(settings: Settings, deps: Deps, shutdown: Shutdown) -> anyhow::Result<()> {
    settings.check()?;
    let lock = lock(&settings)?;
    run_locked(settings, deps, lock, shutdown).await
}

async fn run_locked(
    settings: Settings,
    deps: Deps,
    lock: Option<DataDirLock>,
    mut shutdown: Shutdown,
) -> anyhow::Result<()> {
    let selection = match (settings.runs(Component::Dequeuer), &deps.selection) {
        (true, None) => anyhow::bail!(lite_node_core::BadInput(
            "the dequeuer checks that each slot was selected for its pool: give --pools or --pools-file (the data \
             market's active pools)"
                .into()
        )),
        (true, Some(s)) => Some(s.clone()),
        (false, _) => None,
    };
    let anchor = deps.anchor.clone();
    let chain_id = tokio::select! {
        _ = &mut shutdown => return Ok(()),
        id = retry(Policy::CHAIN, "reading the anchor chain id", || anchor.chain_id(), |_| true) => id?,
    };

    let mut market = Market::new(
        lite_node_protocol::submission::Scope {
            protocol_state: anchor.protocol_state,
            data_market: anchor.data_market,
        },
        chain_id,
        settings.validator_id.clone(),
    );
    market.window_blocks = settings.window_blocks;
    let market = Arc::new(market);
    let redis = deps.redis.clone();
    let conn = tokio::select! {
        _ = &mut shutdown => return Ok(()),
        conn = crate::connect_retrying(&redis, "validator") => conn,
    };

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let mut tasks = tokio::task::JoinSet::new();
    let mut announced = Vec::new();
    // The gossip peer, for the monitor API's /metrics.
    let mut gossip_peer = None;
    if settings.runs(Component::Gateway) {
        let listen = settings.listen;
        let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("listening on {listen}"))?;
        announced.push(format!("gateway (gRPC) listening on {}", listener.local_addr()?));
        let mut gateway =
            Gateway::with_admission(conn.clone(), market.clone(), deps.projects.clone(), settings.admission);
        if let Some(g) = &settings.gossip {
            // Nothing is relayed that its slot's registered signer did not sign.
            gateway = gateway.with_signers(Arc::new(crate::signers::SignerBook::new(anchor.clone())));
            let (deliver, mut delivered) =
                tokio::sync::mpsc::channel::<lite_node_gossip::Delivery>(crate::gateway::HANDOVER);
            let judge = gateway.clone();
            let check: lite_node_gossip::Check = Arc::new(move |payload: &[u8]| judge.judge_gossip(payload));
            let peer = lite_node_gossip::Gossip::start(
                lite_node_gossip::Settings {
                    listen: g.listen.clone(),
                    bootstrap: g.bootstrap.clone(),
                    identity: settings.data_dir.join("p2p-identity.key"),
                    topic: lite_node_gossip::SUBMISSIONS_TOPIC.into(),
                },
                check,
                deliver,
            )
            .map_err(|e| lite_node_core::BadInput(e.to_string()))?;
            // What gRPC brings is published too: every validator judges it.
            gateway.relay_through(peer.clone());
            gossip_peer = Some(peer.clone());
            let addrs = peer.listening().await;
            announced.push(format!(
                "gossip: peer {} on {}",
                peer.peer_id(),
                addrs.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ));
            let (watched, conn_since, market_since, stop_since, chain) =
                (peer.clone(), conn.clone(), market.clone(), stopped(), anchor.clone());
            let (counted, seen) = (gateway.clone(), Arc::new(std::sync::atomic::AtomicU64::new(0)));
            let unmeshed = Arc::new(std::sync::Mutex::new(None::<tokio::time::Instant>));
            tasks.spawn(async move {
                // A break: no gossip peer connected (collectors publish to a
                // validator without joining its mesh); other validators known
                // but none in the mesh for longer than a few heartbeats (what
                // they relay — a collector's that cannot dial this validator —
                // no longer comes); or since the last look a message lost for
                // lack of room or a submission held back.
                let interrupted = move || {
                    let (p, counted, seen, unmeshed) =
                        (watched.clone(), counted.clone(), seen.clone(), unmeshed.clone());
                    async move {
                        use std::sync::atomic::Ordering::Relaxed;
                        let lost = lite_node_gossip::Stats::get(&p.stats().full) + counted.held_back();
                        if seen.swap(lost, Relaxed) != lost {
                            return Some(
                                "gossip submissions were dropped or held back (no room, or Redis away)".into(),
                            );
                        }
                        let peers = p.peers().await;
                        if peers.connected == 0 {
                            return Some("no gossip peer connected (or every one graylisted)".to_owned());
                        }
                        let mut since = unmeshed.lock().unwrap_or_else(|e| e.into_inner());
                        if peers.subscribed == 0 || peers.mesh > 0 {
                            *since = None;
                            return None;
                        }
                        let since = *since.get_or_insert_with(tokio::time::Instant::now);
                        (since.elapsed() > UNMESHED_GRACE).then(|| {
                            format!(
                                "{} other validator(s) connected, none in the gossip mesh for {} s: what they relay \
                                 does not come",
                                peers.subscribed,
                                UNMESHED_GRACE.as_secs()
                            )
                        })
                    }
                };
                let head = move || {
                    let c = chain.clone();
                    async move { c.head().await.ok() }
                };
                crate::onchain::keep_intake_since(conn_since, market_since, interrupted, head, stop_since).await;
                Ok(())
            });
            let (taker, mut stop) = (gateway.clone(), Box::pin(stopped()));
            tasks.spawn(async move {
                // The peer lives as long as this task holds it.
                let _peer = peer;
                tokio::select! {
                    _ = taker.take_gossip_from(&mut delivered) => Ok(()),
                    _ = &mut stop => Ok(()),
                }
            });
        }
        if settings.gossip.is_none() {
            // gRPC only: listening from the start.
            let (conn_since, market_since, stop_since, chain) =
                (conn.clone(), market.clone(), stopped(), anchor.clone());
            tasks.spawn(async move {
                let head = move || {
                    let c = chain.clone();
                    async move { c.head().await.ok() }
                };
                crate::onchain::keep_intake_since(conn_since, market_since, || async { None }, head, stop_since).await;
                Ok(())
            });
        }
        let stop = stopped();
        tasks.spawn(async move { crate::gateway::serve(gateway, listener, stop).await.context("the gateway stopped") });
    }
    if settings.runs(Component::Api) {
        let listen = settings.api_listen;
        let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("listening on {listen}"))?;
        announced.push(format!("monitor API listening on http://{}", listener.local_addr()?));
        // The finalized data this process serves, taken from Redis as each
        // epoch is finalized.
        let path = settings.data_dir.join(crate::store::FILE);
        let store = tokio::task::spawn_blocking(move || crate::store::Store::open(&path)).await??;
        let store = Arc::new(store);
        let (m, c, stop) = (market.clone(), redis.clone(), stopped());
        let data = crate::api::Data {
            store: store.clone(),
            rate_per_client: settings.data.rate_per_client,
            retention_days: settings.data.retention_days,
        };
        let api = crate::api::serve_with_store(m, c, listener, stop, gossip_peer, Some(data));
        tasks.spawn(async move { api.await.context("the monitor API stopped") });
        let (m, c, stop, data) = (market.clone(), conn.clone(), stopped(), settings.data.clone());
        tasks.spawn(async move {
            crate::store::archive(store, m, c, data, stop).await;
            Ok(())
        });
    }
    if let Some(selection) = selection {
        announced.push(format!("dequeuer: {} workers, {} active pools", settings.workers, selection.pools().len()));
        let chain = Arc::new(AnchorChain { anchor: anchor.clone(), selection });
        let dequeuer =
            Dequeuer::new(market.clone(), chain, conn.clone()).keeping_seed_records(settings.admission.metadata);
        let dequeuer_settings = DequeuerSettings { workers: settings.workers, ..DequeuerSettings::default() };
        let (client, stop) = (redis.clone(), stopped());
        tasks.spawn(async move {
            dequeuer.run(client, dequeuer_settings, stop).await;
            Ok(())
        });
    }
    if settings.runs(Component::Finalizer) {
        let finalizer = Finalizer::new(market.clone(), conn.clone(), settings.part_size);
        let (client, stop) = (redis.clone(), stopped());
        tasks.spawn(async move {
            finalizer.run(client, 2, stop).await;
            Ok(())
        });
    }
    if settings.runs(Component::Aggregator) {
        let aggregator = Aggregator::new(market.clone(), conn.clone());
        let (client, stop) = (redis.clone(), stopped());
        tasks.spawn(async move {
            aggregator.run(client, stop).await;
            Ok(())
        });
    }
    if settings.runs(Component::Tracker) {
        let tracker = Tracker::new(market.clone(), conn.clone());
        let stop = stopped();
        tasks.spawn(async move {
            tracker.run(stop).await;
            Ok(())
        });
    }
    if let (true, Some(o)) = (settings.runs(Component::Onchain), &settings.onchain) {
        let sender = lite_node_chain::TxSender::new(anchor.shared_rpc(), o.key.bytes(), chain_id)
            .map_err(|e| lite_node_core::BadInput(format!("VALIDATOR_SIGNER_PRIVATE_KEY: {e}")))?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let dir = std::path::absolute(&settings.data_dir).unwrap_or_else(|_| settings.data_dir.clone());
        let holder = format!("{}@{}:{}", sender.address(), host.trim(), dir.display());
        let mut onchain =
            crate::onchain::Onchain::new(market.clone(), conn.clone(), anchor.clone(), sender, o.fallback_blocks)
                .holding_as(holder);
        if !o.pairs_on_chain {
            onchain = onchain.root_only();
        }
        let registered = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            r = retry(Policy::CHAIN, "reading the data market's validators", || onchain.registered(), |_| true) => {
                r.map_err(|e| anyhow::anyhow!(e))?
            }
        };
        if !registered {
            anyhow::bail!(lite_node_core::BadInput(format!(
                "VALIDATOR_SIGNER_PRIVATE_KEY: its address {} is not a registered validator of data market {} \
                 (ProtocolState {}, getValidators): have the market's owner register it (updateAddresses with role \
                 0), or give this validator its registered key",
                onchain.address(),
                anchor.data_market,
                anchor.protocol_state
            )));
        }
        announced.push(format!(
            "on chain: submits and attests as {}; a submitter's turn lasts {} anchor blocks",
            onchain.address(),
            o.fallback_blocks
        ));
        let (stop, every) = (stopped(), settings.poll_interval);
        tasks.spawn(async move {
            onchain.run(every, stop).await;
            Ok(())
        });
    }
    if settings.runs(Component::Monitor) {
        let follow = Follow { confirmations: 12, start_block: settings.from_block };
        let watcher = Watcher::open(anchor.clone(), &settings.data_dir, follow)?;
        announced.push(format!(
            "event monitor: windows stay open {} anchor blocks after each release",
            market.window_blocks
        ));
        let monitor = Monitor::new(market.clone(), conn.clone());
        let (anchor, stop, every) = (anchor.clone(), stopped(), settings.poll_interval);
        tasks.spawn(async move { monitor.follow(anchor, watcher, every, stop).await });
    }
    // A banner that cannot be written (stdout on a full disk) is lost, not
    // the validator.
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "validator {} for data market {} on anchor chain {chain_id}; Redis {}",
            market.validator_id, market.scope.data_market, deps.redis_shown
        );
        for line in announced {
            let _ = writeln!(out, "  {line}");
        }
        let _ = out.flush();
    }

    let outcome = tokio::select! {
        _ = &mut shutdown => Ok(()),
        ended = tasks.join_next() => match ended {
            Some(Ok(Err(e))) => Err(e),
            Some(Err(e)) => Err(anyhow::anyhow!("a validator component panicked: {e}")),
            Some(Ok(Ok(()))) | None => Ok(()),
        },
    };
    let _ = stop_tx.send(true);
    if tokio::time::timeout(Duration::from_secs(5), async { while tasks.join_next().await.is_some() {} }).await.is_err()
    {
        tracing::warn!("components still busy 5 s after the stop; exiting");
    }
    drop(lock);
    outcome
}
