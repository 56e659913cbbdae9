//! `lite-node devnet --full-node-workers K`: one full node beside the lite
//! nodes — a slot registered as a full node on ProtocolState (docs/protocol.md
//! §13), its coordinator (`lite-node run`, `LITE_NODE_ROLE=coordinator`,
//! started as one of the devnet's nodes), K workers (`LITE_NODE_ROLE=worker`)
//! and the `redis-server` they share. After each epoch the devnet reads from
//! that Redis which worker computed how many pools.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use lite_node_board::Boards;
use lite_node_config::ClusterAssign;

use crate::{
    Fault,
    process::{Guarded, refuse_after, stop_all},
};

/// One worker process.
pub(crate) struct WorkerProcess {
    pub id: String,
    pub process: Guarded,
    env: Vec<(String, String)>,
    pub restarts: u32,
    /// Killed by a drill: started again only once its epoch is settled.
    held: bool,
}

/// The full node's cluster: its Redis, its workers, and what they did.
pub(crate) struct FullNode {
    pub slot_id: u64,
    pub assign: ClusterAssign,
    pub redis: Guarded,
    pub redis_url: String,
    pub workers: Vec<WorkerProcess>,
    /// The projects whose data sources the workers compute (those with pools).
    pub projects: Vec<String>,
    boards: Option<Boards>,
    board_name: String,
    /// Per epoch: how many items each worker computed (all projects).
    pub computed: BTreeMap<u64, BTreeMap<String, usize>>,
    /// Results refused by the fence (read after every epoch and at the end
    /// of the run; a count Redis lost with its data is added, not undone).
    pub fenced: u64,
    /// The board's count at the last read.
    fenced_read: u64,
    /// Per epoch, from the coordinator's journal: how long gathering took
    /// (ms) and how many snapshots it gave.
    pub gathered: BTreeMap<u64, (u64, usize)>,
    redis_port: u16,
    /// Drills under way (a stopped worker waiting to be continued).
    drills: Vec<tokio::task::JoinHandle<()>>,
    /// `break-worker`: the switch of the relay in front of each such
    /// worker's source RPC, by worker number.
    pub breakers: BTreeMap<u64, std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl FullNode {
    /// Starts the cluster's Redis (append-only, as an operator would run it).
    pub fn start_redis(run_dir: &Path, port: Option<u16>) -> Result<(Guarded, String)> {
        let dir = run_dir.join("full-node-redis");
        std::fs::create_dir_all(&dir)?;
        let port = match port {
            Some(port) => port,
            None => std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port(),
        };
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "everysec"])
            .arg("--dir")
            .arg(&dir);
        let redis =
            Guarded::spawn("redis-server", &mut cmd, &run_dir.join("full-node-redis.log"), false).map_err(|e| {
                anyhow::anyhow!(
                    "cannot start redis-server ({e}): --full-node-workers needs it installed (./init.sh devnet \
                     installs the Debian package, or: apt-get install redis-server)"
                )
            })?;
        Ok((redis, format!("redis://127.0.0.1:{port}")))
    }

    pub fn new(
        slot_id: u64,
        assign: ClusterAssign,
        redis: Guarded,
        redis_url: String,
        projects: Vec<String>,
        board_name: String,
    ) -> Self {
        let redis_port = redis_url.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
        Self {
            slot_id,
            assign,
            redis,
            redis_url,
            fenced: 0,
            fenced_read: 0,
            gathered: BTreeMap::new(),
            redis_port,
            drills: Vec::new(),
            workers: Vec::new(),
            projects,
            boards: None,
            board_name,
            computed: BTreeMap::new(),
            breakers: BTreeMap::new(),
        }
    }

    /// Starts worker `w{k}` with `env` (its own data dir and id added).
    pub fn spawn_worker(&mut self, exe: &Path, run_dir: &Path, k: u64, env: &[(String, String)]) -> Result<()> {
        let id = format!("w{k}");
        let data_dir = run_dir.join(format!("worker-{k}"));
        std::fs::create_dir_all(&data_dir)?;
        let mut env = env.to_vec();
        env.push(("LITE_NODE_DATA_DIR".into(), data_dir.display().to_string()));
        env.push(("LITE_NODE_WORKER_ID".into(), id.clone()));
        let process = spawn(exe, &id, &env, &log_of(run_dir, &id))?;
        self.workers.push(WorkerProcess { id, process, env, restarts: 0, held: false });
        Ok(())
    }

    /// Waits until every worker has joined the cluster (its log says so).
    pub async fn wait_joined(&mut self, within: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let mut joined = 0;
            for w in &mut self.workers {
                if w.process.started(&format!("worker {}", w.id), "joined full node")? {
                    joined += 1;
                }
            }
            if joined == self.workers.len() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "only {joined} of {} workers joined within {}s; see their logs",
                    self.workers.len(),
                    within.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts again a worker whose process ended (at most `max` times each).
    pub fn restart_dead_worker(&mut self, exe: &Path, run_dir: &Path, max: u32) -> Result<()> {
        for w in &mut self.workers {
            let Some(status) = w.process.exited() else { continue };
            w.held = false;
            refuse_after(&format!("worker {}", w.id), w.restarts, max, &status.to_string(), &w.process)?;
            tracing::warn!("worker {} exited ({status}); restarting it", w.id);
            w.restarts += 1;
            w.process = spawn(exe, &w.id, &w.env, &log_of(run_dir, &w.id))?;
        }
        Ok(())
    }

    /// Acts on `epoch_id`'s full-node drills right after its release.
    pub fn after_release(
        &mut self,
        faults: &[Fault],
        epoch_id: u64,
        run_dir: &Path,
        items: usize,
        coordinator: Option<rustix::process::Pid>,
    ) {
        for fault in faults {
            match *fault {
                Fault::KillCoordinator { epoch } if epoch == epoch_id => {
                    let Some(pid) = coordinator else { continue };
                    let (url, name, projects) =
                        (self.redis_url.clone(), self.board_name.clone(), self.projects.clone());
                    self.drills.push(tokio::spawn(async move {
                        match epoch_open(&url, &name, &projects, epoch).await {
                            Ok(()) => {
                                tracing::info!("drill: SIGKILL to the coordinator mid-gather of epoch {epoch}");
                                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                            }
                            Err(e) => tracing::error!("drill kill-coordinator: {e:#}"),
                        }
                    }));
                }
                Fault::BreakWorker { worker, epoch } if epoch == epoch_id => {
                    if let Some(switch) = self.breakers.get(&worker) {
                        tracing::info!("drill: worker w{worker} loses its source RPC after epoch {epoch}'s release");
                        switch.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                Fault::KillWorker { worker, epoch } if epoch == epoch_id => {
                    if let Some(w) = self.workers.get_mut(worker as usize - 1) {
                        tracing::info!("drill: SIGKILL to worker {} after epoch {epoch}'s release", w.id);
                        w.process.kill();
                        w.held = true;
                    }
                }
                Fault::StopWorker { worker, epoch } if epoch == epoch_id => {
                    let Some(w) = self.workers.get_mut(worker as usize - 1) else { continue };
                    let Some(pid) = w.process.pid() else { continue };
                    let (url, name, projects, id) =
                        (self.redis_url.clone(), self.board_name.clone(), self.projects.clone(), w.id.clone());
                    self.drills.push(tokio::spawn(async move {
                        if let Err(e) = stop_while_others_finish(&url, &name, &projects, &id, pid, epoch, items).await {
                            tracing::error!("drill stop-worker: {e:#}");
                        }
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
                    }));
                }
                Fault::FlushClusterRedis { epoch } if epoch == epoch_id => {
                    let (url, name, projects) =
                        (self.redis_url.clone(), self.board_name.clone(), self.projects.clone());
                    self.drills.push(tokio::spawn(async move {
                        let flushed = async {
                            epoch_open(&url, &name, &projects, epoch).await?;
                            let client = redis::Client::open(url.as_str())?;
                            let mut conn = client.get_multiplexed_async_connection().await?;
                            redis::cmd("FLUSHALL").query_async::<()>(&mut conn).await?;
                            anyhow::Ok(())
                        };
                        match flushed.await {
                            Ok(()) => tracing::info!(
                                "drill: the full node's Redis lost everything mid-gather of epoch {epoch}"
                            ),
                            Err(e) => tracing::error!("drill flush-cluster-redis: {e:#}"),
                        }
                    }));
                }
                Fault::RestartClusterRedis { epoch } if epoch == epoch_id => {
                    tracing::info!("drill: the full node's Redis restarts after epoch {epoch}'s release");
                    stop_all(&mut [&mut self.redis], Duration::from_secs(10));
                    match Self::start_redis(run_dir, Some(self.redis_port)) {
                        Ok((redis, _)) => self.redis = redis,
                        Err(e) => tracing::error!("drill: the full node's Redis did not start again: {e:#}"),
                    }
                }
                _ => {}
            }
        }
    }

    /// Reads how long the coordinator took to gather each epoch (its
    /// journal, `full-node/state/epochs.jsonl`; the last line of an epoch).
    pub fn read_gathered(&mut self, run_dir: &Path) {
        let text = std::fs::read_to_string(run_dir.join("full-node/state/epochs.jsonl")).unwrap_or_default();
        for line in text.lines() {
            let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            let (Some(e), Some(start), Some(end)) =
                (entry["epoch_id"].as_u64(), entry["started_at_ms"].as_u64(), entry["finished_at_ms"].as_u64())
            else {
                continue;
            };
            let snapshots = entry["snapshots"].as_u64().unwrap_or(0) as usize;
            self.gathered.insert(e, (end.saturating_sub(start), snapshots));
        }
    }

    /// Whether a drill holds a worker back from a restart.
    pub fn held(&self) -> bool {
        self.workers.iter().any(|w| w.held)
    }

    /// Reads the results refused by the fence so far (every project).
    pub async fn read_fenced(&mut self) -> Result<u64> {
        self.connect().await?;
        let boards = self.boards.as_ref().expect("connected");
        let mut now = 0;
        for project in &self.projects {
            now += boards.of(project).stats().await?.get("fenced").copied().unwrap_or(0);
        }
        // Lower than last time: Redis lost the count (and started again).
        self.fenced += if now >= self.fenced_read { now - self.fenced_read } else { now };
        self.fenced_read = now;
        Ok(self.fenced)
    }

    async fn connect(&mut self) -> Result<()> {
        if self.boards.is_none() {
            let client = redis::Client::open(self.redis_url.as_str())?;
            let conn = tokio::time::timeout(Duration::from_secs(5), client.get_connection_manager())
                .await
                .context("connecting to the full node's Redis")??;
            self.boards = Some(Boards::new(conn, self.board_name.clone()));
        }
        Ok(())
    }

    /// Reads which worker computed how many of `epoch_id`'s items.
    pub async fn read_computed(&mut self, epoch_id: u64) -> Result<&BTreeMap<String, usize>> {
        self.connect().await?;
        let boards = self.boards.as_ref().expect("connected");
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for project in &self.projects {
            // Its connection comes back on the next command after a restart.
            let computed = match boards.of(project).computed_by(epoch_id).await {
                Ok(computed) => computed,
                Err(_) => boards.of(project).computed_by(epoch_id).await?,
            };
            for (worker, n) in computed {
                *by.entry(worker).or_default() += n;
            }
        }
        self.computed.insert(epoch_id, by);
        Ok(&self.computed[&epoch_id])
    }

    /// The workers first (orderly), then Redis.
    pub fn stop(&mut self, grace: Duration) {
        for drill in self.drills.drain(..) {
            drill.abort();
        }
        for w in &mut self.workers {
            if let Some(pid) = w.process.pid() {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
            }
        }
        let mut procs: Vec<&mut Guarded> = self.workers.iter_mut().map(|w| &mut w.process).collect();
        stop_all(&mut procs, grace);
        stop_all(&mut [&mut self.redis], Duration::from_secs(5));
    }

    pub fn restarts(&self) -> u32 {
        self.workers.iter().map(|w| w.restarts).sum()
    }
}

fn log_of(run_dir: &Path, id: &str) -> PathBuf {
    run_dir.join(format!("worker-{id}.log"))
}

fn spawn(exe: &Path, id: &str, env: &[(String, String)], log: &Path) -> Result<Guarded> {
    let mut cmd = Command::new(exe);
    cmd.arg("run").env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    Guarded::spawn(&format!("worker {id}"), &mut cmd, log, false)
}

/// `"w1 334, w2 333, w3 333"`.
pub(crate) fn describe(by: &BTreeMap<String, usize>) -> String {
    if by.is_empty() {
        return "none in".into();
    }
    by.iter().map(|(w, n)| format!("{w} {n}")).collect::<Vec<_>>().join(", ")
}

/// The stop-worker drill: waits until worker `id` holds items of `epoch_id`,
/// SIGSTOPs it, and returns (for the SIGCONT) once every item of the epoch
/// is in — computed by the others, its own results not yet offered.
async fn stop_while_others_finish(
    url: &str,
    name: &str,
    projects: &[String],
    id: &str,
    pid: rustix::process::Pid,
    epoch_id: u64,
    items: usize,
) -> Result<()> {
    let client = redis::Client::open(url)?;
    let boards = Boards::new(client.get_connection_manager().await?, name.to_owned());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    'holding: loop {
        for project in projects {
            let unfinished = boards.of(project).unfinished(epoch_id, items).await?;
            if unfinished.values().any(|h| h.as_deref() == Some(id)) {
                break 'holding;
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!("worker {id} held no item of epoch {epoch_id} within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    rustix::process::kill_process(pid, rustix::process::Signal::STOP)?;
    tracing::info!("drill: worker {id} stopped (SIGSTOP) while it holds items of epoch {epoch_id}");
    loop {
        let mut left = 0;
        for project in projects {
            left += boards.of(project).unfinished(epoch_id, items).await?.len();
        }
        if left == 0 {
            break;
        }
        if tokio::time::Instant::now() > deadline + Duration::from_secs(60) {
            bail!("epoch {epoch_id}'s items were not finished without worker {id} within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::info!("drill: worker {id} continued (SIGCONT): the others finished epoch {epoch_id}'s items");
    Ok(())
}

/// Waits until the coordinator has opened `epoch_id` on its board (one
/// minute at most): its workers are computing, the gather has begun.
async fn epoch_open(url: &str, name: &str, projects: &[String], epoch_id: u64) -> Result<()> {
    let client = redis::Client::open(url)?;
    let boards = Boards::new(client.get_connection_manager().await?, name.to_owned());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        for project in projects {
            if boards.of(project).epoch_work(epoch_id).await?.is_some() {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!("epoch {epoch_id} was not opened on the board within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
