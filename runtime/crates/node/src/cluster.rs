//! A full node over machines: the coordinator's side, which hands a
//! project's data sources for an epoch to the workers through the cluster's
//! [`Board`] and gathers their snapshots into one result, and the worker's
//! side, which computes the items it is given (or, by peer index, takes) and
//! offers each result under its fencing token.
//!
//! Each project has its own board (`{name}:{project}`); an epoch's work is
//! the [`Work`] the coordinator opened it with. Item `i` is data source `i`
//! of that work, in the processor's own order.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use anyhow::Result;
use futures_util::StreamExt;
pub use lite_node_cluster::{Board, Boards, Completion, Joined, Member, assign};
use lite_node_compute::executor::{ComputeResult, Executor, LocalExecutor, OutcomeKind, Task};
use lite_node_config::ClusterAssign;
use lite_node_core::{
    retry::{Policy, retry},
    time::now_ms,
};
use lite_node_plugin_api::BlockDetail;
use serde::{Deserialize, Serialize};

/// Epochs the board keeps after they are gathered: a coordinator restarted
/// within them resumes from what the workers computed.
const KEEP_EPOCHS: u64 = 4;

/// How often the coordinator reads who holds what (and, by least backlog,
/// gives out what nobody live holds) while an epoch's items are out.
const ASSIGN_EVERY: Duration = Duration::from_millis(100);

/// How items find their worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Peer index: member k of n (members sorted by id) takes the items whose
    /// index ≡ k (mod n).
    PeerIndex,
    /// Least backlog: the coordinator gives each item to the worker with the
    /// fewest items outstanding.
    LeastBacklog,
}

/// A lease as the board records it.
pub fn lease_ms(lease: Duration) -> u64 {
    u64::try_from(lease.as_millis()).unwrap_or(u64::MAX)
}

impl Mode {
    /// As `LITE_NODE_CLUSTER_ASSIGN` spells it (and the board records it).
    pub fn name(self) -> &'static str {
        match self {
            Mode::PeerIndex => ClusterAssign::PeerIndex,
            Mode::LeastBacklog => ClusterAssign::LeastBacklog,
        }
        .name()
    }
}

impl From<ClusterAssign> for Mode {
    fn from(assign: ClusterAssign) -> Self {
        match assign {
            ClusterAssign::PeerIndex => Mode::PeerIndex,
            ClusterAssign::LeastBacklog => Mode::LeastBacklog,
        }
    }
}

/// An epoch's work on one project, as the coordinator opens it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    /// The project's task for the epoch (every share is made from it).
    pub task: Task,
    /// Its data sources, in the processor's order: item `i` is source `i`.
    pub sources: Vec<String>,
}

/// The coordinator's side.
pub struct Coordinator {
    pub boards: Boards,
    pub mode: Mode,
    /// The compute package (commit) and plugin interface it runs, stated on
    /// each board with every epoch it opens (a board that lost its data
    /// still refuses a member on another).
    pub package: String,
    pub api: String,
    /// An assignment not acknowledged within this is given again.
    pub lease: Duration,
    /// How often the board is looked at while items are outstanding.
    pub poll: Duration,
    /// How long an epoch's items may take before what is in is used.
    pub patience: Duration,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("cluster", &self.boards.name())
            .field("mode", &self.mode)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Coordinator {
    /// One project's result for the epoch: its data sources computed by the
    /// workers, each exactly once (a project that does not divide runs here,
    /// whole). Items still outstanding after [`Coordinator::patience`] are
    /// left out, named in the log.
    pub async fn gather(&self, local: &LocalExecutor, task: &Task, blocks: Arc<[BlockDetail]>) -> ComputeResult {
        let sources = match local.data_sources(task, &blocks).await {
            Ok(Some(sources)) => sources,
            Ok(None) => {
                let mut whole = local.execute(vec![task.clone()], blocks);
                return whole.next().await.unwrap_or_else(|| {
                    ComputeResult::without_compute(task, OutcomeKind::Failed("the executor gave no result".into()))
                });
            }
            Err(e) => return ComputeResult::without_compute(task, OutcomeKind::Failed(format!("data_sources: {e}"))),
        };
        let started_at_ms = now_ms();
        match self.collect(task, sources).await {
            Ok((sources, results)) => {
                let missing: Vec<&str> =
                    (0..sources.len()).filter(|i| !results.contains_key(i)).map(|i| sources[i].as_str()).collect();
                if !missing.is_empty() {
                    tracing::warn!(
                        "epoch {} {}: {} of {} data sources not computed within {}s, left out: {}",
                        task.epoch_id,
                        task.project_type,
                        missing.len(),
                        sources.len(),
                        self.patience.as_secs(),
                        missing.join(", ")
                    );
                }
                let snapshots: Vec<(String, String)> =
                    results.into_iter().map(|(i, json)| (sources[i].clone(), json)).collect();
                let kind = if snapshots.is_empty() {
                    OutcomeKind::Failed("no worker computed any data source".into())
                } else {
                    OutcomeKind::Computed
                };
                ComputeResult {
                    slot_id: task.slot_id,
                    project_type: task.project_type.clone(),
                    kind,
                    selected: Some(true),
                    snapshots,
                    started_at_ms,
                    finished_at_ms: now_ms(),
                    left_out: missing.iter().map(|s| s.to_string()).collect(),
                }
            }
            Err(e) => ComputeResult::without_compute(task, OutcomeKind::Failed(format!("the cluster's board: {e:#}"))),
        }
    }

    /// Opens the epoch (or finds it open: a coordinator restarted, which
    /// goes on with the work as it was opened), keeps items moving until all
    /// are in or patience runs out; the sources and the results.
    async fn collect(&self, task: &Task, mut sources: Vec<String>) -> Result<(Vec<String>, BTreeMap<usize, String>)> {
        let board = self.boards.of(&task.project_type);
        // Resumed, the work is the board's as stored (re-opened as it was).
        let mut work = serde_json::to_string(&Work { task: task.clone(), sources: sources.clone() })?;
        let give_up = tokio::time::Instant::now() + self.patience;
        // Redis may be restarting (its connection comes back on a later
        // command): opening is tried again by `Policy::REDIS` until
        // patience runs out; polling, at the next poll.
        let what = format!("epoch {} {}: opening it on the cluster's board", task.epoch_id, task.project_type);
        let opened =
            retry(Policy::REDIS.within(self.patience), what, || self.open(&board, task.epoch_id, &work), |_| true)
                .await?;
        if let Some(stored) = opened {
            // Resumed: the items are the stored work's (the one the
            // workers compute), whatever this process would list now.
            tracing::info!("epoch {} {}: resumed from the cluster's board", task.epoch_id, task.project_type);
            let stored_work: Work = serde_json::from_str(&stored)?;
            if stored_work.sources != sources {
                tracing::warn!(
                    "epoch {} {}: the board's work lists {} data sources, this process {}: going on with the \
                     board's",
                    task.epoch_id,
                    task.project_type,
                    stored_work.sources.len(),
                    sources.len()
                );
            }
            (sources, work) = (stored_work.sources, stored);
        }
        let mut failures = 0u32;
        let mut failed = |e: anyhow::Error| -> Result<()> {
            failures += 1;
            if tokio::time::Instant::now() >= give_up {
                return Err(e);
            }
            if failures == 1 || failures.is_power_of_two() {
                tracing::warn!(
                    "epoch {} {}: the cluster's board: {e:#}; trying again at the next poll",
                    task.epoch_id,
                    task.project_type
                );
            }
            Ok(())
        };
        let mut known: BTreeSet<String> = BTreeSet::new();
        // Whether results are all in is one cheap count per poll; who holds
        // what is read (and least backlog's assignments made) at most every
        // ASSIGN_EVERY.
        let mut assigned_at: Option<tokio::time::Instant> = None;
        loop {
            let step = async {
                match board.done(task.epoch_id).await? {
                    Some(done) if done >= sources.len() => return Ok(true),
                    Some(_) => {}
                    None => {
                        // Redis lost the epoch (restarted without its data):
                        // open it again, so the workers take it again.
                        tracing::warn!(
                            "epoch {} {}: the cluster's board no longer holds the epoch (Redis restarted without its \
                             data?); opening it again",
                            task.epoch_id,
                            task.project_type
                        );
                        self.open(&board, task.epoch_id, &work).await?;
                        return Ok(false);
                    }
                }
                // Peer index: the workers take their items; the count is all
                // the coordinator reads.
                if self.mode == Mode::LeastBacklog && assigned_at.is_none_or(|at| at.elapsed() >= ASSIGN_EVERY) {
                    assigned_at = Some(tokio::time::Instant::now());
                    let unfinished = board.unfinished(task.epoch_id, sources.len()).await?;
                    if unfinished.is_empty() {
                        return Ok(true);
                    }
                    self.assign_pending(&board, task.epoch_id, &unfinished, &mut known).await?;
                }
                anyhow::Ok(false)
            };
            match step.await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => failed(e)?,
            }
            if tokio::time::Instant::now() >= give_up {
                break;
            }
            tokio::time::sleep(self.poll).await;
        }
        // The results, read once all are in (or patience ran out), tried
        // again while Redis is restarting for as long as the epoch waited.
        let what = format!("epoch {} {}: reading the results", task.epoch_id, task.project_type);
        let read = || async {
            let results = board.results(task.epoch_id).await?;
            anyhow::Ok((results, board.computed_by(task.epoch_id).await?))
        };
        let (results, by) = retry(Policy::REDIS.within(self.patience), what, read, |_| true).await?;
        let by: Vec<String> = by.into_iter().map(|(w, n)| format!("{w} {n}")).collect();
        tracing::info!(
            "epoch {} {}: {} of {} data sources computed ({})",
            task.epoch_id,
            task.project_type,
            results.len(),
            sources.len(),
            by.join(", ")
        );
        let results = results.into_iter().filter(|(i, _)| *i < sources.len()).collect();
        Ok((sources, results))
    }

    /// States the package and opens the epoch with `work`; `None` when this
    /// opened it (what the board holds of epochs long past goes then, and
    /// least backlog's streams of workers gone since), or the work it was
    /// open with already.
    async fn open(&self, board: &Board, epoch_id: u64, work: &str) -> Result<Option<String>> {
        board.set_package(&self.package, &self.api, self.mode.name(), lease_ms(self.lease)).await?;
        if !board.open_epoch(epoch_id, work).await? {
            return Ok(Some(board.epoch_work(epoch_id).await?.unwrap_or_else(|| work.to_owned())));
        }
        let (announced, _) = board.epochs_after("0", Duration::ZERO).await?;
        for old in announced.into_iter().filter(|e| e + KEEP_EPOCHS <= epoch_id) {
            board.close_epoch(old).await?;
        }
        if self.mode == Mode::LeastBacklog {
            let live: Vec<String> = board.live_members().await?.into_iter().map(|m| m.id).collect();
            board.forget_streams(&live).await?;
        }
        Ok(None)
    }

    /// Least backlog: takes back what lapsed leases and gone workers hold,
    /// and gives every item no live worker holds to the least busy one.
    async fn assign_pending(
        &self,
        board: &Board,
        epoch_id: u64,
        unfinished: &BTreeMap<usize, Option<String>>,
        known: &mut BTreeSet<String>,
    ) -> Result<()> {
        let live: BTreeSet<String> = board.live_members().await?.into_iter().map(|m| m.id).collect();
        let mut pending: BTreeSet<usize> = BTreeSet::new();
        for gone in known.difference(&live) {
            pending
                .extend(board.take_over(gone).await?.into_iter().filter(|a| a.epoch_id == epoch_id).map(|a| a.index));
        }
        for worker in &live {
            let lapsed = board.reclaim(worker, self.lease).await?;
            pending.extend(lapsed.into_iter().filter(|a| a.epoch_id == epoch_id).map(|a| a.index));
        }
        *known = live.clone();
        let mut backlog: BTreeMap<String, usize> = live.iter().map(|w| (w.clone(), 0)).collect();
        for (&index, holder) in unfinished {
            match holder.as_ref().filter(|h| live.contains(*h)) {
                Some(h) if !pending.contains(&index) => *backlog.get_mut(h).expect("live") += 1,
                _ => {
                    pending.insert(index);
                }
            }
        }
        pending.retain(|i| unfinished.contains_key(i));
        let pending: Vec<usize> = pending.into_iter().collect();
        let mut to: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (index, worker) in assign::least_backlog(&pending, &mut backlog) {
            to.entry(worker).or_default().push(index);
        }
        for (worker, indices) in to {
            board.assign_many(epoch_id, &indices, &worker).await?;
        }
        Ok(())
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
            blocks(task.begin, task.end).await.map_err(anyhow::Error::msg)?.into()
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
