//! `lite-node run` with `LITE_NODE_ROLE=worker`: one worker of a full node
//! spread over machines. It loads the compute package and the projects as
//! a node does, joins the full node's cluster on Redis (refused by name when
//! it runs another package or interface than the coordinator, or another
//! live process holds its id), renews its membership every heartbeat, and
//! computes the data sources it is given (least backlog) or takes (peer
//! index), offering each result under its fencing token. No signer, no
//! collector: the coordinator submits.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::Result;
use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use futures_util::StreamExt;
use lite_node_board::{Joined, Member, Refused};
use lite_node_compute::executor::{Executor, OutcomeKind};
use lite_node_core::retry::{Policy, retry};
use lite_node_plugin_api::BlockDetail;
use serde_json::json;

use crate::{
    chain::Chains,
    compute::{
        self,
        host::{FinalizedReads, RpcEndpoint},
    },
    config::WorkerConfig,
    data_dir::DataDirLock,
    epochs::preload,
    executor::LocalExecutor,
    exit::BadInput,
    full_node::{Board, Boards, Completion, Mode, Work, assign},
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
    /// Stepped aside (its heartbeats held back) after its shares kept
    /// failing: the other members take its items ([`STEP_ASIDE_AFTER`]).
    pub aside: std::sync::atomic::AtomicBool,
    /// Times it stepped aside.
    pub stepped_aside: AtomicU64,
}

impl WorkerStatus {
    fn health(&self) -> Result<String, String> {
        let failures = self.heartbeat_failures.load(Ordering::Relaxed);
        match self.trouble.lock().expect("not poisoned").clone() {
            Some(t) if failures > 0 => Err(format!("not a member: {failures} heartbeat(s) missed: {t}")),
            Some(t) => Err(t),
            None => match self.compute_trouble.lock().expect("not poisoned").clone() {
                Some((rounds, t)) if self.aside.load(Ordering::Relaxed) => Err(format!(
                    "stepped aside (the other workers take its items) after {rounds} round(s) in a row left items \
                     uncomputed: {t}"
                )),
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
            "steppedAside": self.stepped_aside.load(Ordering::Relaxed),
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

/// Rounds in a row whose share could not be computed (a broken source RPC,
/// a compute that keeps failing) after which a worker steps aside: it
/// leaves the cluster, so the other members take its items, for
/// [`ASIDE_FOR`] (doubling each time it must again, up to
/// [`ASIDE_AT_MOST`]), then joins again. Alone, it stays and keeps trying.
const STEP_ASIDE_AFTER: u64 = 6;
const ASIDE_FOR: Duration = Duration::from_secs(30);
const ASIDE_AT_MOST: Duration = Duration::from_secs(600);

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
    .with_queue(run.watch.queue_capacity, 0)
    // Its chains out of reach fail its share (counted towards stepping
    // aside), not pause it while it holds its items.
    .failing_on_outages();
    if let Some((_, protocol_state, data_market)) = &run.anchor {
        local = local.with_finalized(FinalizedReads::new(
            *protocol_state,
            *data_market,
            run.namespace.clone(),
            run.pairs_from.as_deref(),
            &chains.io,
        ));
    }

    let c = &cfg.cluster;
    let mode = Mode::from(c.assign);
    let member = Member {
        id: c.worker_id.clone(),
        package: commit.clone(),
        api: lite_node_plugin_api::PLUGIN_API_VERSION.to_owned(),
        assign: mode.name().to_owned(),
        lease_ms: super::lease_ms(c.lease),
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
                if status.aside.load(Ordering::Relaxed) {
                    continue;
                }
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
        let mut aside_for = ASIDE_FOR;
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
                        let failing = status.compute_trouble.lock().expect("not poisoned").clone();
                        if let Some((rounds, why)) = failing.filter(|(n, _)| *n >= STEP_ASIDE_AFTER)
                            && worker.others_live().await
                        {
                            tracing::error!(
                                "worker {}: {rounds} rounds in a row could not compute its share ({why}); stepping \
                                 aside for {} s so the other workers take it",
                                member.id,
                                aside_for.as_secs()
                            );
                            status.aside.store(true, Ordering::Relaxed);
                            status.stepped_aside.fetch_add(1, Ordering::Relaxed);
                            for project in &project_types {
                                if let Err(e) = worker.boards.of(project).leave(&member).await {
                                    tracing::warn!("leaving the cluster: {e:#}");
                                }
                            }
                            tokio::time::sleep(aside_for).await;
                            aside_for = (aside_for * 2).min(ASIDE_AT_MOST);
                            // Its trouble stays until a round computes what it takes.
                            status.aside.store(false, Ordering::Relaxed);
                            tracing::info!("worker {}: joining the cluster again", member.id);
                            continue;
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
                            aside_for = ASIDE_FOR;
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

impl Worker {
    /// Whether another member's heartbeat holds on every board (who would
    /// take this one's items if it stepped aside); `false` when Redis cannot
    /// say.
    async fn others_live(&self) -> bool {
        for project in &self.projects {
            match self.boards.of(project).live_members().await {
                Ok(live) if live.iter().any(|m| m.id != self.member.id) => {}
                _ => return false,
            }
        }
        !self.projects.is_empty()
    }
}

/// The worker's side: one member of the cluster.
pub struct Worker {
    pub boards: Boards,
    pub mode: Mode,
    pub member: Member,
    /// Least backlog: the coordinator's lease; assignments being computed
    /// are renewed three times within it.
    pub lease: Duration,
    /// The projects it computes (each has a board).
    pub projects: Vec<String>,
    /// Peer index, per project: the last entry read of the epochs stream,
    /// and the epochs read that still have unfinished items.
    open: std::sync::Mutex<BTreeMap<String, Cursor>>,
}

/// Peer index, one project: the last entry read of the epochs stream, and
/// each open epoch as this worker knows it.
type Cursor = (String, BTreeMap<u64, Seen>);

/// Peer index: what a worker knows of an open epoch.
#[derive(Clone, Debug, Default)]
struct Seen {
    /// Its items (0 until its work is read).
    items: usize,
    /// The live members when this worker last took its share; while they
    /// stay the same and that share was all offered, there is nothing new
    /// to take (and the holders, O(items), are not read again).
    live: Vec<String>,
    settled: bool,
    /// The last read found items held by a lapsed member: read again until
    /// none are left (the living divide them by position, and each reads
    /// them at its own moment).
    orphans: bool,
}

/// What one round of a worker did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Round {
    pub accepted: usize,
    pub fenced: usize,
    /// Results for an epoch closed (or lost) meanwhile: dropped.
    pub closed: usize,
    /// Items it took but could not offer (a share that failed): the worker
    /// backs off before it takes them again.
    pub unoffered: usize,
    /// Why a share failed (the last one, when several did).
    pub failure: Option<String>,
}

impl Worker {
    pub fn new(boards: Boards, mode: Mode, member: Member, projects: Vec<String>) -> Self {
        Self { boards, mode, member, lease: Duration::from_secs(10), projects, open: Default::default() }
    }

    /// One round: the items this worker holds or takes now, computed in one
    /// share per epoch and offered under their tokens. `blocks` gives an
    /// epoch's block details (`begin`, `end`).
    pub async fn round<F, Fut>(&self, local: &LocalExecutor, wait: Duration, blocks: F) -> Result<Round>
    where
        F: Fn(u64, u64) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<BlockDetail>, String>>,
    {
        let mut round = Round::default();
        for project in &self.projects {
            let board = self.boards.of(project);
            // (epoch, index, token) this worker is to compute now.
            let mut items: Vec<(u64, usize, u64, Option<String>)> = Vec::new();
            match self.mode {
                Mode::LeastBacklog => {
                    for a in board.next_assignments(&self.member.id, wait).await? {
                        items.push((a.epoch_id, a.index, a.token, Some(a.entry)));
                    }
                }
                Mode::PeerIndex => {
                    let (after, mut open) = self
                        .open
                        .lock()
                        .expect("not poisoned")
                        .get(project)
                        .cloned()
                        .unwrap_or_else(|| ("0".into(), BTreeMap::new()));
                    // Waits for a new epoch only while none is open.
                    let wait = if open.is_empty() { wait } else { Duration::ZERO };
                    let (epochs, last) = board.epochs_after(&after, wait).await?;
                    // An epoch announced again was opened again (Redis lost
                    // it): whatever this worker knew of it is void.
                    for epoch_id in epochs {
                        open.insert(epoch_id, Seen::default());
                    }
                    let live: Vec<String> = board.live_members().await?.into_iter().map(|m| m.id).collect();
                    for (&epoch_id, seen) in open.iter_mut() {
                        // All in (a count, not the holders), or closed.
                        match board.done(epoch_id).await? {
                            None => {
                                seen.items = usize::MAX;
                                continue;
                            }
                            Some(done) if seen.items > 0 && done >= seen.items => {
                                seen.items = usize::MAX;
                                continue;
                            }
                            Some(_) => {}
                        }
                        if seen.settled && seen.live == live {
                            continue;
                        }
                        let Some(work) = board.epoch_work(epoch_id).await? else {
                            seen.items = usize::MAX;
                            continue;
                        };
                        let work: Work = serde_json::from_str(&work)?;
                        seen.items = work.sources.len();
                        let unfinished = board.unfinished(epoch_id, work.sources.len()).await?;
                        if unfinished.is_empty() {
                            seen.items = usize::MAX;
                            continue;
                        }
                        let mine = self.peer_index_items(&live, &unfinished);
                        let tokens = board.claim_many(epoch_id, &mine, &self.member.id, true).await?;
                        let before = items.len();
                        for (index, token) in mine.into_iter().zip(tokens) {
                            if let Some(token) = token {
                                items.push((epoch_id, index, token, None));
                            }
                        }
                        seen.orphans = unfinished.values().any(|h| h.as_ref().is_some_and(|h| !live.contains(h)));
                        // Settled once what it took is all offered (below):
                        // a round that fails before then takes it again.
                        (seen.live, seen.settled) = (live.clone(), items.len() == before && !seen.orphans);
                    }
                    // Epochs all in, or closed, are done with.
                    open.retain(|_, seen| seen.items != usize::MAX);
                    if items.is_empty() && !open.is_empty() {
                        // Open epochs, all held by live members: look again
                        // after a while (a member may lapse).
                        tokio::time::sleep(wait.min(Duration::from_millis(200))).await;
                    }
                    self.open.lock().expect("not poisoned").insert(project.clone(), (last, open));
                }
            }
            let mut by_epoch: BTreeMap<u64, Vec<(usize, u64, Option<String>)>> = BTreeMap::new();
            for (epoch_id, index, token, entry) in items {
                by_epoch.entry(epoch_id).or_default().push((index, token, entry));
            }
            // Least backlog: the lease on every entry read is renewed from
            // now until the round ends (a share longer than the lease, or one
            // waiting behind another epoch's, is not taken back).
            let leased: Vec<&str> = by_epoch.values().flatten().filter_map(|(_, _, e)| e.as_deref()).collect();
            let renewing = async {
                let every = (self.lease / 3).max(Duration::from_millis(100));
                loop {
                    if let Err(e) = board.renew(&self.member.id, &leased).await {
                        tracing::warn!("renewing the lease on {} item(s): {e:#}", leased.len());
                    }
                    tokio::time::sleep(every).await;
                }
            };
            let computing = async {
                let mut done = Vec::new();
                for (epoch_id, items) in &by_epoch {
                    done.push((*epoch_id, items.len(), self.compute(local, &board, *epoch_id, items, &blocks).await?));
                }
                anyhow::Ok(done)
            };
            let computed = if leased.is_empty() {
                computing.await?
            } else {
                tokio::select! {
                    computed = computing => computed?,
                    never = renewing => match never {},
                }
            };
            for (epoch_id, items, done) in computed {
                round.accepted += done.accepted;
                round.fenced += done.fenced;
                round.closed += done.closed;
                let offered = done.accepted + done.fenced + done.closed;
                round.unoffered += items.saturating_sub(offered);
                if done.failure.is_some() {
                    round.failure = done.failure;
                }
                // All of its share offered: nothing more to take until the
                // membership changes. Otherwise (a compute that failed) it
                // is taken again next round.
                // A result refused by the fence, or offered to an epoch no
                // longer open, is looked at again too: the item was given to
                // another (who has it), or Redis lost its token or the epoch
                // (nobody has it: it is taken again once the epoch reopens).
                if offered == items {
                    let mut open = self.open.lock().expect("not poisoned");
                    if let Some(seen) = open.get_mut(project).and_then(|(_, o)| o.get_mut(&epoch_id)) {
                        seen.settled = !seen.orphans && done.fenced == 0 && done.closed == 0;
                    }
                }
            }
        }
        Ok(round)
    }

    /// Peer index: this member's items among the unfinished — its own share
    /// of those nobody live holds, by index, and its share of those a lapsed
    /// member held, by their order.
    fn peer_index_items(&self, live: &[String], unfinished: &BTreeMap<usize, Option<String>>) -> Vec<usize> {
        let me = &self.member.id;
        let items = unfinished.keys().max().map_or(0, |m| m + 1);
        let mine: BTreeSet<usize> = assign::peer_index_share(live, me, items).unwrap_or_default().into_iter().collect();
        let mut out: Vec<usize> = unfinished
            .iter()
            // Its own share nobody holds, and whatever it holds itself (an
            // orphan it took, a share a failed round left held).
            .filter(|(i, holder)| match holder {
                Some(h) => h == me,
                None => mine.contains(i),
            })
            .map(|(i, _)| *i)
            .collect();
        let orphans: Vec<usize> = unfinished
            .iter()
            .filter(|(_, holder)| holder.as_ref().is_some_and(|h| h != me && !live.contains(h)))
            .map(|(i, _)| *i)
            .collect();
        if let Some(share) = assign::peer_index_share(live, me, orphans.len()) {
            out.extend(share.into_iter().map(|k| orphans[k]));
        }
        out
    }

    /// Computes one epoch's items in one share and offers each result.
    async fn compute<F, Fut>(
        &self,
        local: &LocalExecutor,
        board: &Board,
        epoch_id: u64,
        items: &[(usize, u64, Option<String>)],
        blocks: &F,
    ) -> Result<Round>
    where
        F: Fn(u64, u64) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<BlockDetail>, String>>,
    {
        let mut round = Round::default();
        let Some(work) = board.epoch_work(epoch_id).await? else {
            // The epoch was closed: nothing to do but let go.
            let entries: Vec<&str> = items.iter().filter_map(|(_, _, e)| e.as_deref()).collect();
            board.ack_many(&self.member.id, &entries).await?;
            return Ok(round);
        };
        let work: Work = serde_json::from_str(&work)?;
        let mut task = work.task.clone();
        task.sources = Some(items.iter().filter_map(|(i, _, _)| work.sources.get(*i).cloned()).collect());
        let details: Arc<[BlockDetail]> = if local.needs_block_details() {
            match blocks(task.begin, task.end).await {
                Ok(details) => details.into(),
                // The share cannot be computed (its source RPC): a failure
                // of this share, counted towards stepping aside, not an
                // error of the cluster's board.
                Err(why) => {
                    let why = format!("epoch {epoch_id}: a share of {} items failed: {why}", items.len());
                    tracing::warn!("{why}");
                    round.failure = Some(why);
                    return Ok(round);
                }
            }
        } else {
            Arc::from(Vec::new())
        };
        let result = local.execute(vec![task], details).next().await;
        let snapshots: BTreeMap<String, String> = match result {
            Some(r) if r.kind == OutcomeKind::Computed => {
                r.snapshots.into_iter().map(|(source, json)| (source.to_ascii_lowercase(), json)).collect()
            }
            Some(r) => {
                let why = match &r.kind {
                    OutcomeKind::Failed(e) | OutcomeKind::Missed(e) => e.clone(),
                    other => format!("{other:?}"),
                };
                tracing::warn!("epoch {epoch_id}: a share of {} items failed: {why}", items.len());
                round.failure = Some(format!("epoch {epoch_id}: a share of {} items failed: {why}", items.len()));
                return Ok(round);
            }
            None => return Ok(round),
        };
        // Every result in one script, each under its own token.
        let offered: Vec<(usize, u64, &str, Option<&str>)> = items
            .iter()
            .filter_map(|(index, token, entry)| {
                let json = work.sources.get(*index).and_then(|s| snapshots.get(&s.to_ascii_lowercase()))?;
                Some((*index, *token, json.as_str(), entry.as_deref()))
            })
            .collect();
        let results: Vec<(usize, u64, &str)> = offered.iter().map(|(i, t, json, _)| (*i, *t, *json)).collect();
        let answers = board.complete_many(epoch_id, &results).await?;
        let mut fenced: Vec<String> = Vec::new();
        for ((index, token, _, _), answer) in offered.iter().zip(&answers) {
            match answer {
                Completion::Accepted | Completion::AlreadyDone => round.accepted += 1,
                Completion::Fenced => {
                    round.fenced += 1;
                    fenced.push(format!("{index} (token {token})"));
                }
                Completion::Closed => round.closed += 1,
            }
        }
        if !fenced.is_empty() {
            tracing::warn!(
                "epoch {epoch_id}: {} result(s) refused by the fence (their tokens are no longer current: the items \
                 were given again while this worker had them): items {}{}",
                fenced.len(),
                fenced.iter().take(10).cloned().collect::<Vec<_>>().join(", "),
                if fenced.len() > 10 { ", …" } else { "" }
            );
        }
        let entries: Vec<&str> = offered.iter().filter_map(|(_, _, _, e)| *e).collect();
        board.ack_many(&self.member.id, &entries).await?;
        Ok(round)
    }
}
