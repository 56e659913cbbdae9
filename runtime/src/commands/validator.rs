//! `lite-node validator`: the validator pipeline (`lite-node-validator`) on
//! real chains and a real Redis — every component in this process by
//! default, or the ones `--components` names (the seed's one component per
//! container). The flags become the validator's `Settings` and `Deps`; the
//! validator runs itself (`lite_node_validator::service::run`).

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use lite_node_validator::{
    gateway::Admission,
    gossip::Multiaddr,
    service::{self, Component, GossipSettings, OnchainSettings, Settings, Wiring},
};

use super::MarketOptions;
use crate::{
    config::{ComputeConfig, EnvSnapshot, MarketProjects},
    signals::shutdown_signals,
};

/// What `lite-node validator` is given.
#[derive(Clone, Debug)]
pub struct ValidatorOptions {
    pub components: Vec<Component>,
    pub redis_url: String,
    pub validator_id: String,
    pub listen: SocketAddr,
    pub api_listen: SocketAddr,
    pub market: MarketOptions,
    pub from_block: Option<u64>,
    pub window_blocks: u64,
    pub workers: usize,
    pub part_size: usize,
    pub data_dir: PathBuf,
    pub poll_interval: Duration,
    pub admission: Admission,
    /// `--p2p-listen`: take submissions from the gossip network too.
    pub p2p_listen: Option<Multiaddr>,
    /// `--p2p-bootstrap`: peers to dial first.
    pub p2p_bootstrap: Vec<Multiaddr>,
    /// `--fallback-blocks`: a submitter's turn on chain.
    pub fallback_blocks: u64,
}

/// The variable that holds the validator's key for its transactions.
pub const VALIDATOR_KEY_VAR: &str = "VALIDATOR_SIGNER_PRIVATE_KEY";

/// Runs the chosen components until Ctrl-C or SIGTERM: the flags become
/// the validator's settings and wiring, and the validator runs itself.
pub fn validator(o: ValidatorOptions, env: &EnvSnapshot) -> anyhow::Result<()> {
    let settings = Settings {
        components: o.components,
        validator_id: o.validator_id,
        listen: o.listen,
        api_listen: o.api_listen,
        data_dir: o.data_dir,
        from_block: o.from_block,
        poll_interval: o.poll_interval,
        window_blocks: o.window_blocks,
        workers: o.workers,
        part_size: o.part_size,
        admission: o.admission,
        gossip: o.p2p_listen.map(|listen| GossipSettings { listen, bootstrap: o.p2p_bootstrap.clone() }),
        onchain: match env.get(VALIDATOR_KEY_VAR) {
            Some(value) => Some(OnchainSettings {
                key: lite_node_config::SecretKey::parse_hex(VALIDATOR_KEY_VAR, value).map_err(crate::exit::BadInput)?,
                fallback_blocks: o.fallback_blocks,
            }),
            None => None,
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
    let pools = if dequeuer { o.market.pools()? } else { Vec::new() };
    let projects = if dequeuer || crate::config::ProjectsSource::configured(&env) {
        let market = MarketProjects::from_env(&env)?;
        Some((market.namespace, market.source))
    } else {
        None
    };
    let wiring = Wiring {
        redis_url: o.redis_url,
        chains: o.market.chain_config(&env)?,
        pools,
        compute: if dequeuer { Some(ComputeConfig::from_env(&env)?) } else { None },
        projects,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("validator").build()?;
    // The signals are registered inside the runtime (tokio's need it).
    runtime.block_on(async { service::start(settings, wiring, shutdown_signals(false)).await })
}
