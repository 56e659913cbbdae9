//! `lite-node validator`: the validator pipeline (`lite-node-validator`) on
//! real chains and a real Redis — every component in this process by
//! default, or the ones `--components` names (one component per container
//! is the same pipeline). The flags become the validator's `Settings` and `Deps`; the
//! validator runs itself (`lite_node_validator::service::run`).

use std::{net::SocketAddr, num::NonZeroU32, path::PathBuf, time::Duration};

use lite_node_validator::{
    gateway::Admission,
    gossip::Multiaddr,
    service::{self, Component, DataSettings, GossipSettings, OnchainSettings, Settings, Wiring},
};

use super::MarketArgs;
use crate::{
    config::{ComputeConfig, EnvSnapshot, MarketProjects},
    signals::shutdown_signals,
};

/// `lite-node validator`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Components to run in this process, comma-separated (default: all):
    /// gateway, monitor, dequeuer, finalizer, aggregator, tracker, api,
    /// onchain. Running them one per process (e.g. several dequeuers) is the
    /// same pipeline: they meet in Redis.
    #[arg(long, value_parser = |s: &str| s.parse::<Component>(), value_delimiter = ',', value_name = "C,…")]
    pub components: Vec<Component>,
    /// Redis the components share.
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    /// This validator's id (its batches' author, the sequencer id of its keys).
    #[arg(long, value_name = "ID", default_value = "validator-1")]
    pub validator_id: String,
    /// Where the gateway listens for submissions (gRPC).
    #[arg(long, default_value = "127.0.0.1:50052")]
    pub listen: SocketAddr,
    /// Where the monitor API listens (HTTP).
    #[arg(long, default_value = "127.0.0.1:9091")]
    pub api_listen: SocketAddr,
    #[command(flatten)]
    pub market: MarketArgs,
    /// Anchor block the event monitor starts at without a saved cursor
    /// (default: the head).
    #[arg(long, value_name = "N")]
    pub from_block: Option<u64>,
    /// Anchor blocks each epoch's submission window stays open after its
    /// release (130: every deadline a node may sign).
    #[arg(long, value_name = "N", default_value_t = lite_node_protocol::submission::WINDOW_BLOCKS,
          value_parser = at_least_one_block)]
    pub window_blocks: u64,
    /// Dequeuer workers in this process.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub workers: usize,
    /// Projects per finalization part.
    #[arg(long, value_name = "N", default_value_t = lite_node_validator::finalizer::PART_SIZE)]
    pub part_size: usize,
    /// The event monitor's cursor (locked: one monitor per directory).
    #[arg(long, value_name = "DIR", default_value = "validator-data")]
    pub data_dir: PathBuf,
    /// How often the event monitor polls the anchor chain.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub poll_ms: u64,
    /// Submissions waiting for the dequeuers past which the gateway answers
    /// RESOURCE_EXHAUSTED (nodes retry).
    #[arg(long, value_name = "N", default_value_t = Admission::default().max_queue)]
    pub max_queue: u64,
    /// Submissions a second the gateway takes from one peer (IP address),
    /// sustained, and in a burst.
    #[arg(long, value_name = "N", default_value_t = Admission::default().peer_rate)]
    pub peer_rate: NonZeroU32,
    #[arg(long, value_name = "N", default_value_t = Admission::default().peer_burst)]
    pub peer_burst: NonZeroU32,
    /// Calls one peer may have in flight at the gateway.
    #[arg(long, value_name = "N", default_value_t = Admission::default().peer_in_flight)]
    pub peer_in_flight: usize,
    /// Gossip submissions taken from one slot for one epoch; past it, the
    /// rest are unwanted (counted against the peer that relayed them).
    #[arg(long, value_name = "N", default_value_t = Admission::default().per_slot_epoch)]
    pub per_slot_epoch: u32,
    /// Take submissions from the validators' gossip network too: where this
    /// validator's libp2p peer listens (e.g. /ip4/0.0.0.0/tcp/9000; its
    /// identity is p2p-identity.key in --data-dir).
    #[arg(long, value_name = "MULTIADDR")]
    pub p2p_listen: Option<Multiaddr>,
    /// Gossip peers to dial first, comma-separated, each ending in
    /// /p2p/<peer id> (a collector's, other validators').
    #[arg(long, value_name = "MULTIADDR,…", value_delimiter = ',')]
    pub p2p_bootstrap: Vec<Multiaddr>,
    /// Also keep the per-submission keys some external tools read (the
    /// monitor API does not): `metrics:submissions:metadata:{entityId}` for
    /// 24 h (~550 B each), `processingSubmission:{id}` while held, and
    /// `processed:{sequencerId}:{submissionId}` for an hour once accepted.
    #[arg(long)]
    pub submission_metadata: bool,
    #[command(flatten)]
    pub snapshot: super::SnapshotArgs,
    /// Days each finalized epoch's data is kept (served to consumers) once
    /// finalized; 0 keeps it for good.
    #[arg(long, value_name = "DAYS", default_value_t = lite_node_validator::service::RETENTION_DAYS)]
    pub retention_days: u32,
    /// Requests a second one client (IP address) may make of the data routes
    /// (`/data`, `/ipfs`), twice that in a burst; past it, 429. 0: no limit.
    #[arg(long, value_name = "N", default_value_t = lite_node_validator::service::DATA_RATE)]
    pub data_rate: u32,
    /// Write each range of --archive-epochs finalized epochs to this
    /// directory as a CAR file (every snapshot, each epoch's tree and where
    /// the chain finalized it) once the range is complete: archives that
    /// outlive this validator (`lite-node archive restore`, `lite-node serve
    /// --archive`).
    #[arg(long, value_name = "DIR")]
    pub archive_dir: Option<PathBuf>,
    /// Also upload each archive to this S3-compatible bucket
    /// (s3://bucket[/prefix]; AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    /// AWS_REGION, AWS_ENDPOINT for a server other than AWS's), its local
    /// copy (in --archive-dir, default <data dir>/archive-staging) removed
    /// once the bucket holds it.
    #[arg(long, value_name = "URL")]
    pub archive_bucket: Option<String>,
    /// Epochs an archive file holds (set it to the market's epochs per day).
    #[arg(long, value_name = "N", default_value_t = lite_node_validator::service::ARCHIVE_EPOCHS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub archive_epochs: u64,
    /// Anchor blocks the chosen submitter of an epoch's batch has before the
    /// next validator in turn submits it (with VALIDATOR_SIGNER_PRIVATE_KEY).
    #[arg(long, value_name = "BLOCKS", default_value_t = lite_node_validator::onchain::FALLBACK_BLOCKS)]
    pub fallback_blocks: u64,
    /// Store each finalized epoch's (project, CID) pairs on chain after its
    /// root (the market's `pairsOnChain`): `false` finalizes roots only, an
    /// epoch costing the same gas at any size; its pairs are then read from
    /// the validators' APIs, proved against the root.
    #[arg(long, value_name = "true|false", num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub pairs_on_chain: bool,
}

/// `--window-blocks`: a whole number of anchor blocks, at least one.
pub(crate) fn at_least_one_block(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("a window must stay open at least 1 anchor block".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number of anchor blocks".into()),
    }
}

/// The variable that holds the validator's key for its transactions.
pub const VALIDATOR_KEY_VAR: &str = "VALIDATOR_SIGNER_PRIVATE_KEY";

/// Runs the chosen components until Ctrl-C or SIGTERM: the flags become
/// the validator's settings and wiring, and the validator runs itself.
pub fn run(o: Args, env: &EnvSnapshot) -> anyhow::Result<()> {
    let settings = Settings {
        components: o.components,
        validator_id: o.validator_id,
        listen: o.listen,
        api_listen: o.api_listen,
        data_dir: o.data_dir.clone(),
        from_block: o.from_block,
        poll_interval: Duration::from_millis(o.poll_ms.max(10)),
        window_blocks: o.window_blocks,
        workers: o.workers,
        part_size: o.part_size,
        admission: Admission {
            max_queue: o.max_queue,
            peer_rate: o.peer_rate,
            peer_burst: o.peer_burst,
            peer_in_flight: o.peer_in_flight,
            per_slot_epoch: o.per_slot_epoch,
            metadata: o.submission_metadata,
            snapshot: o.snapshot.rule(),
        },
        gossip: o.p2p_listen.map(|listen| GossipSettings { listen, bootstrap: o.p2p_bootstrap.clone() }),
        onchain: match env.get(VALIDATOR_KEY_VAR) {
            Some(value) => Some(OnchainSettings {
                key: lite_node_config::SecretKey::parse_hex(VALIDATOR_KEY_VAR, value).map_err(crate::exit::BadInput)?,
                fallback_blocks: o.fallback_blocks,
                pairs_on_chain: o.pairs_on_chain,
            }),
            None => None,
        },
        data: DataSettings {
            archive_dir: match (&o.archive_dir, &o.archive_bucket) {
                (None, Some(_)) => Some(o.data_dir.join("archive-staging")),
                (dir, _) => dir.clone(),
            },
            archive_bucket: match &o.archive_bucket {
                Some(url) => Some(std::sync::Arc::new(
                    lite_node_validator::bucket::Bucket::from_url(url, env.vars())
                        .map_err(|e| crate::exit::BadInput(format!("--archive-bucket {e}")))?,
                )),
                None => None,
            },
            archive_epochs: o.archive_epochs,
            retention_days: (o.retention_days > 0).then_some(o.retention_days),
            rate_per_client: std::num::NonZeroU32::new(o.data_rate),
        },
    };
    if settings.gossip.is_none() && !o.p2p_bootstrap.is_empty() {
        return Err(crate::exit::BadInput(
            "--p2p-bootstrap needs --p2p-listen (where this validator's gossip peer \
                                           listens, e.g. /ip4/0.0.0.0/tcp/9000)"
                .into(),
        )
        .into());
    }
    settings.check()?;
    // The compute package is cached under --data-dir unless
    // LITE_NODE_DATA_DIR says otherwise.
    let env = match env.get("LITE_NODE_DATA_DIR") {
        Some(_) => env.clone(),
        None => env.clone().with("LITE_NODE_DATA_DIR", settings.data_dir.display().to_string()),
    };
    // Only the dequeuer checks selection: it needs the pools, the package and
    // the market's projects (without them it refuses to start, naming what
    // is missing). The gateway checks projects too, when it knows them.
    let dequeuer = settings.runs(Component::Dequeuer);
    let mut pools = if dequeuer { o.market.pools()? } else { Vec::new() };
    let compute = if dequeuer { Some(ComputeConfig::from_env(&env)?) } else { None };
    let projects = if dequeuer || crate::config::ProjectsSource::configured(&env) {
        let market = MarketProjects::from_env(&env)?;
        // The projects (and the package's pin) must be the market's; without
        // --pools, the dequeuer takes the pools the projects list.
        if crate::config::ProjectsSource::configured(&env) {
            let data_dir = compute.as_ref().map_or_else(|| settings.data_dir.clone(), |c| c.data_dir.clone());
            let loaded = crate::compute::load_projects(&market.source, &data_dir)?;
            let commit = match compute.as_ref().map(|c| &c.source) {
                Some(crate::config::ComputeSource::Git { pin, .. }) => pin.commit.clone(),
                Some(crate::config::ComputeSource::Bundled(_)) => Some("the bundled package".to_owned()),
                None => None,
            };
            super::check_identity(&env, &loaded, commit.as_deref())?;
            // Only with the source chain named: its seed blocks are the
            // selection's (the anchor's own would select other slots).
            if dequeuer && pools.is_empty() && o.market.source_rpc.is_some() {
                pools = loaded.pools();
            }
        }
        Some((market.namespace, market.source))
    } else {
        None
    };
    let wiring = Wiring { redis_url: o.redis_url, chains: o.market.chain_config(&env)?, pools, compute, projects };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("validator").build()?;
    // The signals are registered inside the runtime (tokio's need it).
    runtime.block_on(async { service::start(settings, wiring, shutdown_signals(false)).await })
}
