//! `lite-node run` with `LITE_NODE_ROLE=worker`: one worker of a full node
//! spread over machines. It loads the compute package and the projects as
//! a node does, joins the full node's cluster on Redis (refused by name when
//! it runs another package or interface than the coordinator, or another
//! live process holds its id), renews its membership every heartbeat, and
//! computes the data sources it is given (least backlog) or takes (peer
//! index), offering each result under its fencing token. No signer, no
//! collector: the coordinator submits.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::Result;
use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use lite_node_cluster::{Joined, Member, Refused};
use lite_node_core::retry::{Policy, retry};
use serde_json::json;

use crate::{
    chain::Chains,
    cluster::{Boards, Mode, Worker},
    compute::{
        self,
        host::{FinalizedReads, RpcEndpoint},
    },
    config::WorkerConfig,
    data_dir::DataDirLock,
    epochs::preload,
    executor::LocalExecutor,
    exit::BadInput,
    supervisor::Supervisor,
};

/// What `/status`, `/health` and `/metrics` of a worker read.
#[derive(Debug, Default)]
pub struct WorkerStatus {
    pub id: String,
    pub board: String,
    pub mode: String,
    pub package: String,
    pub api: String,
    /// Rounds that ended, items accepted, results refused by the fence.
    pub rounds: AtomicU64,
    pub accepted: AtomicU64,
    pub fenced: AtomicU64,
    /// Heartbeats that failed to reach Redis, in a row (0: the last held).
    pub heartbeat_failures: AtomicU64,
    /// The last problem, while it lasts.
    pub trouble: Mutex<Option<String>>,
    /// While shares fail: how many in a row, and why the last did (a
    /// worker whose computes keep failing is unhealthy, though its
    /// heartbeats hold). `None` once a round computed what it took.
    pub compute_trouble: Mutex<Option<(u64, String)>>,
}

impl WorkerStatus {
    fn health(&self) -> Result<String, String> {
        let failures = self.heartbeat_failures.load(Ordering::Relaxed);
        match self.trouble.lock().expect("not poisoned").clone() {
            Some(t) if failures > 0 => Err(format!("not a member: {failures} heartbeat(s) missed: {t}")),
            Some(t) => Err(t),
            None => match self.compute_trouble.lock().expect("not poisoned").clone() {
                Some((rounds, t)) => Err(format!("{rounds} round(s) in a row left items uncomputed: {t}")),
                None => Ok(format!("member {} of {}", self.id, self.board)),
            },
        }
    }

    fn document(&self) -> serde_json::Value {
        json!({
            "role": "worker",
            "workerId": self.id,
            "cluster": self.board,
            "assign": self.mode,
            "computePackage": self.package,
            "pluginApi": self.api,
            "rounds": self.rounds.load(Ordering::Relaxed),
            "accepted": self.accepted.load(Ordering::Relaxed),
            "fenced": self.fenced.load(Ordering::Relaxed),
            "heartbeatFailures": self.heartbeat_failures.load(Ordering::Relaxed),
            "healthy": self.health().is_ok(),
            "trouble": *self.trouble.lock().expect("not poisoned"),
            "version": env!("CARGO_PKG_VERSION"),
        })
    }

    fn metrics(&self) -> String {
        let mut out = String::new();
        for (name, help, value) in [
            ("lite_node_worker_rounds", "Rounds of work ended.", self.rounds.load(Ordering::Relaxed)),
            (
                "lite_node_worker_items_accepted",
                "Items whose result was accepted.",
                self.accepted.load(Ordering::Relaxed),
            ),
            (
                "lite_node_worker_items_fenced",
                "Results refused by the fence (the item had been given again).",
                self.fenced.load(Ordering::Relaxed),
            ),
        ] {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n{name}_total {value}\n"));
        }
        let missed = self.heartbeat_failures.load(Ordering::Relaxed);
        out.push_str(&format!(
            "# HELP lite_node_worker_heartbeats_missed Heartbeats missed in a row.\n# TYPE \
             lite_node_worker_heartbeats_missed gauge\nlite_node_worker_heartbeats_missed {missed}\n# EOF\n"
        ));
        out
    }
}

async fn health(State(s): State<Arc<WorkerStatus>>) -> impl IntoResponse {
    match s.health() {
        Ok(detail) => (StatusCode::OK, axum::Json(json!({"healthy": true, "detail": detail}))),
        Err(detail) => (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"healthy": false, "detail": detail}))),
    }
}

async fn status_json(State(s): State<Arc<WorkerStatus>>) -> impl IntoResponse {
    axum::Json(s.document())
}

async fn metrics(State(s): State<Arc<WorkerStatus>>) -> impl IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], s.metrics())
}

/// A member that has not renewed within this many heartbeats has lapsed.
const LAPSES_AFTER: u32 = 3;

/// Connects to the cluster's Redis, waiting (with a line per try) while it
/// does not answer.
pub(crate) async fn connect(url: &str) -> Result<redis::aio::ConnectionManager> {
    let client = redis::Client::open(url)
        .map_err(|e| BadInput(format!("LITE_NODE_CLUSTER_REDIS_URL: {}", crate::config::redact_url(&e.to_string()))))?;
    // Blocking stream reads wait up to a heartbeat (at most 500 ms):
    // answers get more than the client's default half second.
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_secs(5)))
        .set_connection_timeout(Some(Duration::from_secs(2)));
    let what = format!("connecting to the cluster's Redis ({})", crate::config::redact_url(url));
    let conn = retry(Policy::REDIS, what, || client.get_connection_manager_with_config(config.clone()), |_| true).await;
    Ok(conn?)
}

/// Runs the worker until `shutdown` completes.
pub fn run(
    cfg: WorkerConfig,
    shutdown: lite_node_core::signals::Shutdown,
) -> lite_node_core::LocalBoxFuture<'static, Result<()>> {
    Box::pin(run_worker(cfg, shutdown))
}

async fn run_worker(cfg: WorkerConfig, shutdown: lite_node_core::signals::Shutdown) -> Result<()> {
    tokio::pin!(shutdown);
    let run = &cfg.run;
    let _lock = DataDirLock::acquire(&run.compute.data_dir)?;
    let (projects, package) = crate::node::load_package(&run.projects, &run.compute).await?;
    let processors = compute::processors(&package, projects.projects).map_err(BadInput)?;
    let project_types: Vec<String> = processors.iter().map(|p| p.project.project_type.clone()).collect();
    let commit = package.package.manifest.commit.clone();
    tracing::info!("compute package {commit} loaded: {}", project_types.join(", "));

    let chains = Chains::connect(&run.chains()).map_err(|e| anyhow::anyhow!(e))?;
    let source = chains.source.clone();
    let anchor_rpc = chains.anchor.as_ref().map(|a| a.shared_rpc() as Arc<dyn RpcEndpoint>);
    let mut local = LocalExecutor::new(
        processors,
        run.watch.max_concurrent_computes,
        run.watch.compute_timeout,
        Some(source.clone() as Arc<dyn RpcEndpoint>),
        anchor_rpc,
    )
    .with_queue(run.watch.queue_capacity, 0);
    if let Some((_, protocol_state, data_market)) = &run.anchor {
        local = local.with_finalized(FinalizedReads {
            protocol_state: *protocol_state,
            data_market: *data_market,
            namespace: run.namespace.clone(),
        });
    }

    let c = &cfg.cluster;
    let mode = Mode::from(c.assign);
    let member = Member {
        id: c.worker_id.clone(),
        package: commit.clone(),
        api: lite_node_plugin_api::PLUGIN_API_VERSION.to_owned(),
        assign: mode.name().to_owned(),
        lease_ms: crate::cluster::lease_ms(c.lease),
        instance: format!("{}:{}", hostname(), std::process::id()),
    };
    let status = Arc::new(WorkerStatus {
        id: member.id.clone(),
        board: cfg.board.clone(),
        mode: format!("{:?}", c.assign),
        package: commit,
        api: member.api.clone(),
        ..Default::default()
    });
    let mut tasks = Supervisor::new();
    if let Some(addr) = cfg.status_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| BadInput(format!("STATUS_PORT: cannot listen on {addr}: {e}")))?;
        tracing::info!("status API on http://{} (/health, /status, /metrics)", listener.local_addr()?);
        let app = Router::new()
            .route("/health", get(health))
            .route("/status", get(status_json))
            .route("/metrics", get(metrics))
            .with_state(status.clone());
        tasks.spawn_critical("status API", async move { Ok(axum::serve(listener, app).await?) });
    }

    // Heartbeats on a connection of their own: a worker's blocking reads
    // never hold one back.
    let (beat, work) = tokio::select! {
        _ = &mut shutdown => return Ok(()),
        conns = async { anyhow::Ok((connect(&c.redis_url).await?, connect(&c.redis_url).await?)) } => conns?,
    };
    let beat = Boards::new(beat, cfg.board.clone());
    let ttl = c.heartbeat * LAPSES_AFTER;
    // Joins: refused at once for another package; waits for a lapsing
    // predecessor under the same id (this worker, restarted) to lapse.
    let give_up = tokio::time::Instant::now() + ttl * 2;
    let unstated = |board: &str| {
        format!(
            "no coordinator has stated its compute package on full node {board} yet: waiting (is the coordinator \
             running, with this worker's DATA_MARKET_CONTRACT, SLOT_ID and LITE_NODE_CLUSTER_REDIS_URL?)"
        )
    };
    'join: loop {
        for project in &project_types {
            match beat.of(project).heartbeat(&member, ttl).await {
                Ok(Joined::Matched) => {}
                Ok(Joined::Unstated) => {
                    tracing::warn!("{}", unstated(&cfg.board));
                    *status.trouble.lock().expect("not poisoned") = Some(unstated(&cfg.board));
                }
                Err(e) => match e.downcast_ref::<Refused>() {
                    Some(Refused::Taken(_)) if tokio::time::Instant::now() < give_up => {
                        tokio::time::sleep(c.heartbeat).await;
                        continue 'join;
                    }
                    Some(refused) => return Err(BadInput(refused.to_string()).into()),
                    None => return Err(e.context("joining the cluster")),
                },
            }
        }
        break;
    }
    tracing::info!(
        "worker {} joined full node {} ({:?}; heartbeat every {} ms, lapses after {} ms)",
        member.id,
        cfg.board,
        c.assign,
        c.heartbeat.as_millis(),
        ttl.as_millis()
    );
    let heartbeats = {
        let (member, status, projects, every) = (member.clone(), status.clone(), project_types.clone(), c.heartbeat);
        let board = cfg.board.clone();
        async move {
            loop {
                tokio::time::sleep(every).await;
                for project in &projects {
                    match beat.of(project).heartbeat(&member, ttl).await {
                        Ok(joined) => {
                            let mut trouble = status.trouble.lock().expect("not poisoned");
                            if status.heartbeat_failures.swap(0, Ordering::Relaxed) > 0 {
                                tracing::info!("the cluster's Redis answers again: member {} renewed", member.id);
                                *trouble = None;
                            }
                            match joined {
                                Joined::Unstated if trouble.is_none() => {
                                    tracing::warn!("{}", unstated(&board));
                                    *trouble = Some(unstated(&board));
                                }
                                Joined::Matched if trouble.is_some() => {
                                    tracing::info!("the coordinator of full node {board} has stated its package");
                                    *trouble = None;
                                }
                                _ => {}
                            }
                        }
                        Err(e) => match e.downcast_ref::<Refused>() {
                            Some(refused) => return anyhow::Error::from(BadInput(refused.to_string())),
                            None => {
                                let n = status.heartbeat_failures.fetch_add(1, Ordering::Relaxed) + 1;
                                if n == 1 || n.is_power_of_two() {
                                    tracing::warn!("heartbeat {n} in a row missed: {e:#}");
                                }
                                *status.trouble.lock().expect("not poisoned") = Some(format!("{e:#}"));
                                break;
                            }
                        },
                    }
                }
            }
        }
    };

    let mut worker = Worker::new(Boards::new(work, cfg.board.clone()), mode, member.clone(), project_types.clone());
    worker.lease = c.lease;
    let blocks = |begin, end| {
        let source = source.clone();
        async move { preload::block_details(&source, begin, end).await }
    };
    let wait = c.heartbeat.min(Duration::from_millis(500));
    let rounds = async {
        // After a round that failed, or left items uncomputed, the next
        // waits by `Policy::REDIS`; a good round starts the waits over.
        let mut pauses = Policy::REDIS.delays();
        loop {
            match worker.round(&local, wait, blocks).await {
                Ok(round) => {
                    status.rounds.fetch_add(1, Ordering::Relaxed);
                    status.accepted.fetch_add(round.accepted as u64, Ordering::Relaxed);
                    status.fenced.fetch_add(round.fenced as u64, Ordering::Relaxed);
                    if round.accepted > 0 || round.fenced > 0 {
                        tracing::info!("{} item(s) accepted, {} refused by the fence", round.accepted, round.fenced);
                    }
                    if round.unoffered > 0 {
                        let why = round
                            .failure
                            .clone()
                            .unwrap_or_else(|| format!("{} item(s) not computed", round.unoffered));
                        {
                            let mut trouble = status.compute_trouble.lock().expect("not poisoned");
                            let rounds = trouble.as_ref().map_or(0, |(n, _)| *n) + 1;
                            *trouble = Some((rounds, why));
                        }
                        // A share that failed is taken again, not at once.
                        let wait = pauses.next().unwrap_or(Policy::REDIS.max);
                        tracing::warn!(
                            "{} item(s) could not be computed; again in {} ms",
                            round.unoffered,
                            wait.as_millis()
                        );
                        tokio::time::sleep(wait).await;
                    } else {
                        pauses = Policy::REDIS.delays();
                        if round.accepted > 0 {
                            *status.compute_trouble.lock().expect("not poisoned") = None;
                        }
                    }
                }
                Err(e) => {
                    let wait = pauses.next().unwrap_or(Policy::REDIS.max);
                    tracing::warn!("a round of work: {e:#}; again in {} ms", wait.as_millis());
                    tokio::time::sleep(wait).await;
                }
            }
        }
    };
    let ended = tokio::select! {
        _ = &mut shutdown => None,
        failed = tasks.failed() => Some(anyhow::Error::from(failed)),
        refused = heartbeats => Some(refused),
        never = rounds => match never {},
    };
    // An orderly stop: its items go to the others at once (a membership
    // another process took over is left alone).
    for project in &project_types {
        if let Err(e) = worker.boards.of(project).leave(&member).await {
            tracing::warn!("leaving the cluster: {e:#}");
        }
    }
    if !local.drain(Duration::from_secs(5)).await {
        tracing::warn!("computes still running at the stop; exiting anyway");
    }
    match ended {
        Some(failed) => Err(failed),
        None => {
            tracing::info!("worker {} left the cluster", member.id);
            Ok(())
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_owned()).unwrap_or_else(|_| "host".into())
}
