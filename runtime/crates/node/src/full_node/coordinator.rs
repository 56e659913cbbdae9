//! A full node's coordinator: opens each epoch's work on the projects'
//! boards, hands items out (least backlog) or lets workers take them (peer
//! index), and gathers their snapshots into one result per project.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use anyhow::Result;
use futures_util::StreamExt;
use lite_node_compute::executor::{ComputeResult, Executor, LocalExecutor, OutcomeKind, Task};
use lite_node_core::{
    retry::{Policy, retry},
    time::now_ms,
};
use lite_node_plugin_api::BlockDetail;

use super::*;

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
