//! `lite-node collector`: the collector (`lite_node_collector`) on its
//! own runtime, until Ctrl-C or SIGTERM.

use std::{io::Write, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use lite_node_protocol::submission::Projects;

use lite_node_validator::gossip::Multiaddr;

use super::MarketArgs;
use crate::{
    collector::{Collector, SelectionCheck},
    compute,
    config::{ComputeConfig, EnvSnapshot, MarketProjects},
    exit::BadInput,
    retry::{Policy, retry},
    signals::shutdown_signals,
};

/// `lite-node collector`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (port 0: any free port; the chosen one is printed).
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub market: MarketArgs,
    /// Anchor block where EpochReleased lookups start.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub from_block: u64,
    /// The market's validators' window (their --window-blocks): a
    /// submission that comes after it is refused (`window_closed`) instead
    /// of answered for a vote no validator counts.
    #[arg(long, value_name = "N", default_value_t = lite_node_protocol::submission::WINDOW_BLOCKS,
          value_parser = super::validator::at_least_one_block)]
    pub window_blocks: u64,
    /// The market's validators' snapshot flags (give it theirs).
    #[command(flatten)]
    pub snapshot: super::SnapshotArgs,
    /// Publish every accepted submission on the validators' gossip network:
    /// where this collector's libp2p peer listens (e.g. /ip4/0.0.0.0/tcp/9100).
    #[arg(long, value_name = "MULTIADDR")]
    pub p2p_listen: Option<Multiaddr>,
    /// Gossip peers to dial first (validators), comma-separated, each ending
    /// in /p2p/<peer id>.
    #[arg(long, value_name = "MULTIADDR,…", value_delimiter = ',')]
    pub p2p_bootstrap: Vec<Multiaddr>,
    /// Where the collector keeps its gossip identity (p2p-identity.key).
    #[arg(long, value_name = "DIR", default_value = "collector-data")]
    pub data_dir: std::path::PathBuf,
    /// Serve `/health` here (200 while the anchor chain answers and, with
    /// --p2p-listen, a validator is connected; 503 with the reason when
    /// not): what a container's health check asks.
    #[arg(long, value_name = "ADDRESS")]
    pub status_listen: Option<SocketAddr>,
}

/// Connections still open this long after a stop do not hold the exit.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Runs the collector until Ctrl-C or SIGTERM.
pub fn run(a: Args, env: &EnvSnapshot) -> anyhow::Result<()> {
    let mut pools = a.market.pools()?;
    // Without --pools, a collector told the market's projects takes their
    // pools; either way its projects and package must be the market's.
    let package = if pools.is_empty() && !crate::config::ProjectsSource::configured(env) {
        None
    } else {
        let cfg = ComputeConfig::from_env(env)?;
        let market = MarketProjects::from_env(env)?;
        let projects = compute::load_projects(&market.source, &cfg.data_dir)?;
        // Refused before anything is built (the identity is the config's).
        cfg.market.check_projects(&projects.identity()).map_err(BadInput)?;
        // Only with the source chain named: its seed blocks are the
        // selection's (the anchor's own would select other slots).
        if pools.is_empty() && a.market.source_rpc.is_some() {
            pools = projects.pools();
        }
        if pools.is_empty() {
            None
        } else {
            let package = compute::load(&cfg)?;
            cfg.market.check_compute(&package.package.manifest.commit).map_err(BadInput)?;
            let projects = Projects::declared(
                market.namespace,
                projects.projects.into_iter().map(|p| (p.project_type, p.per_pool)),
            );
            Some((Arc::new(package), projects))
        }
    };
    if a.p2p_listen.is_none() && !a.p2p_bootstrap.is_empty() {
        return Err(
            BadInput("--p2p-bootstrap needs --p2p-listen (where this collector's gossip peer listens)".into()).into()
        );
    }
    if a.p2p_listen.is_some() {
        lite_node_validator::gossip::check(&a.p2p_bootstrap, &a.data_dir.join("p2p-identity.key"))
            .map_err(|e| BadInput(format!("--p2p-bootstrap or --data-dir: {e}")))?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("collector").build()?;
    runtime.block_on(async {
        let signals = shutdown_signals(false);
        tokio::pin!(signals);
        let chains = a.market.chains(env)?;
        let anchor = chains.anchor()?.clone();
        let selection = match package {
            Some((package, projects)) => {
                let check = SelectionCheck::new(chains.source.clone(), pools, package, projects).map_err(BadInput)?;
                Some(Arc::new(check))
            }
            None => None,
        };
        let listener =
            tokio::net::TcpListener::bind(a.listen).await.with_context(|| format!("listening on {}", a.listen))?;
        let status = match a.status_listen {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| BadInput(format!("--status-listen {addr}: cannot listen ({e})")))?,
            ),
            None => None,
        };
        // Lines that cannot be written (stdout on a full disk) are lost, not the collector.
        let say = |line: String| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}").and_then(|()| out.flush());
        };
        say(format!("collector listening on {}", listener.local_addr()?));
        say(match &selection {
            Some(s) => format!("selection check on: {} active pools", s.pools().len()),
            None => {
                "selection check off: give --pools or --pools-file (or --source-rpc with the market's projects, which \
                     list them) to check slot selection"
                    .to_owned()
            }
        });
        let chain_id = tokio::select! {
            _ = &mut signals => return Ok(()),
            id = retry(Policy::CHAIN, "reading the anchor chain id", || anchor.chain_id(), |_| true) => id?,
        };
        let mut collector = Collector::new(anchor.clone(), chain_id);
        (collector.selection, collector.announce, collector.from_block) = (selection, true, a.from_block);
        collector.window_blocks = a.window_blocks;
        collector.snapshot = a.snapshot.rule();
        if let Some(listen) = a.p2p_listen.clone() {
            use lite_node_validator::gossip;
            let peer = gossip::Gossip::publisher(gossip::Settings {
                listen,
                bootstrap: a.p2p_bootstrap.clone(),
                identity: a.data_dir.join("p2p-identity.key"),
                topic: gossip::SUBMISSIONS_TOPIC.into(),
            })
            .map_err(|e| BadInput(e.to_string()))?;
            for addr in peer.listening().await {
                say(format!("gossip: publishing accepted submissions from {addr}"));
            }
            collector.gossip = Some(peer);
        }
        let mut tasks = crate::supervisor::Supervisor::new();
        if let Some(status) = status {
            say(format!("health on http://{}/health", status.local_addr()?));
            let health = crate::collector::health::Health::new(chain_id);
            tasks.spawn_critical("health probe", health.clone().probe(anchor.clone(), collector.gossip.clone()));
            tasks.spawn_critical("status server", lite_node_core::status::serve(status, health));
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = crate::collector::serve(
            collector,
            listener,
            Box::pin(async {
                let _ = stopped.await;
            }),
        );
        tokio::pin!(server);
        tokio::select! {
            served = &mut server => served?,
            failed = tasks.failed() => return Err(failed.into()),
            _ = &mut signals => {
                let _ = stop.send(());
                if tokio::time::timeout(CLOSE_GRACE, &mut server).await.is_err() {
                    tracing::warn!("connections still open after {}s; exiting", CLOSE_GRACE.as_secs());
                }
            }
        }
        Ok(())
    })
}
