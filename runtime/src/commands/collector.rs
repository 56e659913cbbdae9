//! `lite-node collector`: the collector (`lite_node_collector`) on its
//! own runtime, until Ctrl-C or SIGTERM.

use std::{io::Write, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use lite_node_protocol::submission::Projects;

use super::MarketOptions;
use crate::{
    collector::{Collector, SelectionCheck},
    compute,
    config::{ComputeConfig, EnvSnapshot, MarketProjects},
    exit::BadInput,
    retry::{Policy, retry},
    signals::shutdown_signals,
};

/// What `lite-node collector` is given.
#[derive(Clone, Debug)]
pub struct CollectorOptions {
    pub listen: SocketAddr,
    pub market: MarketOptions,
    pub from_block: u64,
    /// Publish accepted submissions on the gossip network from here.
    pub p2p_listen: Option<lite_node_validator::gossip::Multiaddr>,
    pub p2p_bootstrap: Vec<lite_node_validator::gossip::Multiaddr>,
    /// Where the gossip identity is kept.
    pub data_dir: std::path::PathBuf,
    /// Where `/health` is served (what a container's health check asks).
    pub status_listen: Option<SocketAddr>,
}

/// Connections still open this long after a stop do not hold the exit.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Runs the collector until Ctrl-C or SIGTERM.
pub fn collector(a: CollectorOptions, env: &EnvSnapshot) -> anyhow::Result<()> {
    let pools = a.market.pools()?;
    let package = if pools.is_empty() {
        None
    } else {
        let cfg = ComputeConfig::from_env(env)?;
        let market = MarketProjects::from_env(env)?;
        let projects = compute::load_projects(&market.source, &cfg.data_dir)?;
        let projects = Projects::new(market.namespace, projects.projects.into_iter().map(|p| p.project_type));
        Some((Arc::new(compute::load(&cfg)?), projects))
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
            None => "selection check off: give --pools or --pools-file to check slot selection".to_owned(),
        });
        let chain_id = tokio::select! {
            _ = &mut signals => return Ok(()),
            id = retry(Policy::CHAIN, "reading the anchor chain id", || anchor.chain_id(), |_| true) => id?,
        };
        if let Some(status) = status {
            say(format!("health on http://{}/health", status.local_addr()?));
            tokio::spawn(serve_health(status, anchor.clone(), chain_id));
        }
        let mut collector = Collector::new(anchor, chain_id);
        (collector.selection, collector.announce, collector.from_block) = (selection, true, a.from_block);
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

/// How often `/health` has the anchor chain read.
const HEALTH_PROBE: Duration = Duration::from_secs(10);

/// What `/health` answers: the anchor chain the collector judges by, as last read.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct Health {
    chain_id: u64,
    anchor_head: Option<u64>,
    /// Why the last read of the anchor chain failed (the collector cannot
    /// judge submissions meanwhile); `None` when it answered.
    error: Option<String>,
}

/// Serves `/health` on `listener`: 200 while the anchor chain answers the
/// collector (read every [`HEALTH_PROBE`]), 503 with the reason when it does not.
async fn serve_health(listener: tokio::net::TcpListener, anchor: Arc<lite_node_chain::Anchor>, chain_id: u64) {
    use axum::{extract::State, http::StatusCode, response::IntoResponse, routing::get};
    type Shared = Arc<std::sync::Mutex<Health>>;
    let state: Shared = Arc::new(std::sync::Mutex::new(Health { chain_id, ..Health::default() }));
    let probe = state.clone();
    tokio::spawn(async move {
        loop {
            let read = tokio::time::timeout(HEALTH_PROBE, anchor.head()).await;
            {
                let mut h = probe.lock().expect("not poisoned");
                match read {
                    Ok(Ok(head)) => (h.anchor_head, h.error) = (Some(head), None),
                    Ok(Err(e)) => h.error = Some(format!("the anchor chain: {e}")),
                    Err(_) => h.error = Some(format!("the anchor chain: no answer in {}s", HEALTH_PROBE.as_secs())),
                }
            }
            tokio::time::sleep(HEALTH_PROBE).await;
        }
    });
    async fn health(State(state): State<Shared>) -> impl IntoResponse {
        let h = state.lock().expect("not poisoned").clone();
        let code =
            if h.error.is_some() || h.anchor_head.is_none() { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
        (code, axum::Json(h))
    }
    let app = axum::Router::new().route("/health", get(health)).with_state(state);
    if let Err(e) = axum::serve(listener, app).await {
        eprintln!("the health server stopped: {e}");
    }
}

/// Prints the gossip peer id kept in `data_dir` (made there if missing).
pub fn peer_id(data_dir: &std::path::Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let identity = data_dir.join("p2p-identity.key");
    let key = lite_node_validator::gossip::load_or_create_identity(&identity)
        .map_err(|e| BadInput(format!("--data-dir {}: {e}", data_dir.display())))?;
    writeln!(out, "{}", key.public().to_peer_id())?;
    Ok(())
}
