//! `lite-node validator`: the validator pipeline (`lite-node-validator`) on
//! real chains and a real Redis — every component in this process by
//! default, or the ones `--components` names (the seed's one component per
//! container). This file is the wiring: the validator crate's
//! [`Chain`](lite_node_validator::chain::Chain) on the node's anchor client
//! and the compute package's assignment rule, and the event monitor fed by
//! the node's epoch watcher.

use std::{io::Write, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use alloy::primitives::Address;
use anyhow::Context;
use lite_node_validator::{
    Market,
    aggregator::Aggregator,
    chain::{Chain, EpochFacts, Selection},
    dequeuer::{Dequeuer, DequeuerSettings},
    finalizer::Finalizer,
    gateway::Gateway,
    monitor::Monitor,
    tracker::Tracker,
};

use super::MarketOptions;
use crate::{
    chain::{Anchor, Release},
    compute::{
        self,
        selection::{Refusal, Refused, SelectionCheck},
    },
    config::{ComputeConfig, EnvSnapshot},
    data_dir::DataDirLock,
    epochs::{Follow, Watcher},
    exit::BadInput,
    retry::{Policy, retry},
    signals::shutdown_signals,
};

/// The validator's components.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Component {
    Gateway,
    Monitor,
    Dequeuer,
    Finalizer,
    Aggregator,
    Tracker,
    Api,
}

impl Component {
    pub const ALL: [Component; 7] =
        [Self::Gateway, Self::Monitor, Self::Dequeuer, Self::Finalizer, Self::Aggregator, Self::Tracker, Self::Api];
}

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

/// The validator's chain reads: the slot registry on the anchor, and the
/// compute package's assignment rule (as the devnet collector checks it).
struct NodeChain {
    anchor: Arc<Anchor>,
    selection: Arc<SelectionCheck>,
}

impl Chain for NodeChain {
    async fn signer(&self, slot_id: u64) -> Result<Address, String> {
        self.anchor.slot_owner(slot_id).await.map_err(|e| format!("anchor unavailable: {e}"))
    }

    async fn selection(&self, epoch: EpochFacts, slot_id: u64, project_id: &str) -> Result<Selection, String> {
        let release = Release { begin: epoch.begin, end: epoch.end, block_number: epoch.release_block };
        let assignment = self.selection.epoch(&self.anchor, epoch.epoch_id, release).await.map_err(|e| match e {
            Refused::Rejected(why) | Refused::Unavailable(why) => why,
        })?;
        Ok(match self.selection.check(&assignment, slot_id, project_id) {
            Ok(()) => Selection::Selected,
            Err(Refusal::NotSelected(why)) => Selection::NotSelected(why),
            Err(Refusal::WrongPool(why)) => Selection::WrongPool(why),
        })
    }
}

/// Runs the chosen components until Ctrl-C or SIGTERM.
pub fn validator(o: ValidatorOptions, env: &EnvSnapshot) -> anyhow::Result<()> {
    let components = if o.components.is_empty() { Component::ALL.to_vec() } else { o.components.clone() };
    let wants = |c: Component| components.contains(&c);
    let redis = redis::Client::open(o.redis_url.as_str())
        .map_err(|e| BadInput(format!("--redis-url {}: {e} (expected redis://HOST:PORT)", o.redis_url)))?;
    let scope = o.market.scope()?;
    if o.window_blocks == 0 {
        return Err(BadInput("--window-blocks must be at least 1".into()).into());
    }
    // The dequeuer is the one component that checks selection: it needs the
    // compute package and the pool list.
    let package = if wants(Component::Dequeuer) {
        let pools = o.market.pools()?;
        if pools.is_empty() {
            return Err(BadInput(
                "the dequeuer checks that each slot was selected for its pool: give --pools or --pools-file (the \
                 data market's active pools)"
                    .into(),
            )
            .into());
        }
        let cfg = ComputeConfig::from_env(env)?;
        Some((pools, Arc::new(compute::load(&cfg)?)))
    } else {
        None
    };
    let lock = if wants(Component::Monitor) {
        Some(DataDirLock::acquire_for(&o.data_dir, "--data-dir (one event monitor per directory)")?)
    } else {
        None
    };

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("validator").build()?;
    runtime.block_on(async move {
        let signals = shutdown_signals(false);
        tokio::pin!(signals);
        let chains = o.market.chains(env)?;
        let anchor = chains.anchor()?.clone();
        let chain_id = tokio::select! {
            _ = &mut signals => return Ok(()),
            id = retry(Policy::CHAIN, "reading the anchor chain id", || anchor.chain_id(), |_| true) => id?,
        };
        let mut market = Market::new(scope, chain_id, o.validator_id.clone());
        market.window_blocks = o.window_blocks;
        let market = Arc::new(market);
        let conn = lite_node_validator::connect_retrying(&redis, "validator").await;

        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let mut tasks = tokio::task::JoinSet::new();
        let mut announced = Vec::new();
        if wants(Component::Gateway) {
            let listener =
                tokio::net::TcpListener::bind(o.listen).await.with_context(|| format!("listening on {}", o.listen))?;
            announced.push(format!("gateway (gRPC) listening on {}", listener.local_addr()?));
            let gateway = Gateway::new(conn.clone(), market.keys.clone());
            let stop = stopped();
            tasks.spawn(async move {
                lite_node_validator::gateway::serve(gateway, listener, stop).await.context("the gateway stopped")
            });
        }
        if wants(Component::Api) {
            let listener = tokio::net::TcpListener::bind(o.api_listen)
                .await
                .with_context(|| format!("listening on {}", o.api_listen))?;
            announced.push(format!("monitor API listening on http://{}", listener.local_addr()?));
            let (m, c, stop) = (market.clone(), conn.clone(), stopped());
            tasks.spawn(async move {
                lite_node_validator::api::serve(m, c, listener, stop).await.context("the monitor API stopped")
            });
        }
        if let Some((pools, package)) = package {
            let selection = Arc::new(SelectionCheck::new(chains.source.clone(), pools, package).map_err(BadInput)?);
            announced.push(format!("dequeuer: {} workers, {} active pools", o.workers, selection.pools().len()));
            let chain = Arc::new(NodeChain { anchor: anchor.clone(), selection });
            let dequeuer = Dequeuer::new(market.clone(), chain, conn.clone());
            let settings = DequeuerSettings { workers: o.workers, ..DequeuerSettings::default() };
            let (client, stop) = (redis.clone(), stopped());
            tasks.spawn(async move {
                dequeuer.run(client, settings, stop).await;
                Ok(())
            });
        }
        if wants(Component::Finalizer) {
            let finalizer = Finalizer::new(market.clone(), conn.clone(), o.part_size);
            let (client, stop) = (redis.clone(), stopped());
            tasks.spawn(async move {
                finalizer.run(client, 2, stop).await;
                Ok(())
            });
        }
        if wants(Component::Aggregator) {
            let aggregator = Aggregator::new(market.clone(), conn.clone());
            let (client, stop) = (redis.clone(), stopped());
            tasks.spawn(async move {
                aggregator.run(client, stop).await;
                Ok(())
            });
        }
        if wants(Component::Tracker) {
            let tracker = Tracker::new(market.clone(), conn.clone());
            let stop = stopped();
            tasks.spawn(async move {
                tracker.run(stop).await;
                Ok(())
            });
        }
        if let Some(lock) = &lock {
            let settings = Follow { confirmations: 12, start_block: o.from_block };
            let _held = lock;
            let watcher = Watcher::open(anchor.clone(), &o.data_dir, settings)?;
            announced.push(format!(
                "event monitor: windows stay open {} anchor blocks after each release",
                market.window_blocks
            ));
            let monitor = Monitor::new(market.clone(), conn.clone());
            let (anchor, stop, every) = (anchor.clone(), stopped(), o.poll_interval);
            tasks.spawn(async move { follow(anchor, watcher, monitor, every, stop).await });
        }
        println!(
            "validator {} for data market {} on anchor chain {chain_id}; Redis {}",
            market.validator_id, market.scope.data_market, o.redis_url
        );
        for line in announced {
            println!("  {line}");
        }
        std::io::stdout().flush()?;

        let outcome = tokio::select! {
            _ = &mut signals => Ok(()),
            ended = tasks.join_next() => match ended {
                Some(Ok(Err(e))) => Err(e),
                Some(Err(e)) => Err(anyhow::anyhow!("a validator component panicked: {e}")),
                Some(Ok(Ok(()))) | None => Ok(()),
            },
        };
        let _ = stop_tx.send(true);
        if tokio::time::timeout(Duration::from_secs(5), async { while tasks.join_next().await.is_some() {} })
            .await
            .is_err()
        {
            tracing::warn!("components still busy 5 s after the stop; exiting");
        }
        drop(lock);
        outcome
    })
}

/// The event monitor's loop: each poll of the anchor opens the windows of
/// new releases, notes slot registrations, and closes the windows the head
/// has passed. Anchor and Redis errors are logged and retried on the next
/// poll; a release is marked handled only once its window is open.
async fn follow(
    anchor: Arc<Anchor>,
    mut watcher: Watcher,
    monitor: Monitor,
    every: Duration,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    tokio::pin!(stop);
    let mut registrations_from: Option<u64> = watcher.cursor().map(|c| c.scanned_to + 1);
    let mut failing = false;
    loop {
        let round = async {
            let poll = match watcher.poll().await {
                Ok(p) => p,
                // Another chain's cursor: the operator's to fix, not to retry.
                Err(crate::epochs::PollError::Foreign(why)) => return Err(Err(BadInput(why))),
                Err(e) => return Err(Ok(e.to_string())),
            };
            for epoch in &poll.epochs {
                monitor
                    .released(epoch.epoch_id, epoch.released_block, epoch.begin, epoch.end)
                    .await
                    .map_err(|e| Ok(format!("Redis: {e}")))?;
                watcher.epoch_handled(epoch).map_err(|e| Ok(format!("saving the epoch cursor: {e}")))?;
            }
            let from = registrations_from.unwrap_or(poll.scanned_to);
            if poll.scanned_to >= from {
                let slots = anchor.slot_registrations(from, poll.scanned_to).await.map_err(|e| Ok(e.to_string()))?;
                if !slots.is_empty() {
                    tracing::info!("slots registered: {slots:?}; dequeuers will read their signers afresh");
                    monitor.slot_registered().await.map_err(|e| Ok(format!("Redis: {e}")))?;
                }
                registrations_from = Some(poll.scanned_to + 1);
            }
            monitor.head(poll.head).await.map_err(|e| Ok(format!("Redis: {e}")))?;
            watcher.scan_complete(poll.scanned_to).map_err(|e| Ok(format!("saving the epoch cursor: {e}")))?;
            Ok::<_, Result<String, BadInput>>(())
        };
        match round.await {
            Ok(()) if failing => {
                tracing::info!("event monitor: following the anchor chain again");
                failing = false;
            }
            Ok(()) => {}
            Err(Err(fatal)) => return Err(fatal.into()),
            Err(Ok(e)) if !failing => {
                tracing::warn!("event monitor: {e}; retrying every {} ms", every.as_millis());
                failing = true;
            }
            Err(Ok(_)) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = &mut stop => {
                watcher.flush().ok();
                return Ok(());
            }
        }
    }
}
