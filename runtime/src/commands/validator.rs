//! `lite-node validator`: the validator pipeline (`lite-node-validator`) on
//! real chains and a real Redis — every component in this process by
//! default, or the ones `--components` names (the seed's one component per
//! container). The flags become the validator's `Settings` and `Deps`; the
//! validator runs itself (`lite_node_validator::service::run`).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use lite_node_validator::service::{self, Component, Deps, Settings};

use super::MarketOptions;
use crate::{
    compute::{self, selection::SelectionCheck},
    config::{ComputeConfig, EnvSnapshot},
    exit::BadInput,
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
}

/// Runs the chosen components until Ctrl-C or SIGTERM.
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
    };
    let redis = redis::Client::open(o.redis_url.as_str())
        .map_err(|e| BadInput(format!("--redis-url {}: {e} (expected redis://HOST:PORT)", o.redis_url)))?;
    // Only the dequeuer checks selection: it needs the package and the pools
    // (without them it refuses to start, naming the flags).
    let pools = if settings.runs(Component::Dequeuer) { o.market.pools()? } else { Vec::new() };
    let package = if pools.is_empty() { None } else { Some(Arc::new(compute::load(&ComputeConfig::from_env(env)?)?)) };
    let chains = o.market.chains(env)?;
    let selection = match package {
        Some(package) => Some(Arc::new(SelectionCheck::new(chains.source.clone(), pools, package).map_err(BadInput)?)),
        None => None,
    };
    let deps = Deps { redis, redis_shown: o.redis_url, anchor: chains.anchor()?.clone(), selection };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("validator").build()?;
    runtime.block_on(async move { service::run(settings, deps, shutdown_signals(false)).await })
}
