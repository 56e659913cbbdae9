//! One epoch's work as the node does it, behind the main loop's [`Work`]:
//! past the submission window → missed; otherwise preload block details,
//! dispatch to every project's processor, submit what was computed — then
//! record it all (journal, books, status, alerts) before the cursor moves.
//!
//! **Many slots, one process** (`SLOT_IDS`): what slots share and what each
//! owns is fixed in [`EpochWork`]. Shared: the watcher and its cursor, the
//! block-details preload, the executor and its processors, the RPC
//! connections, the snapshot store, the status API and the alert channels.
//! Each slot is a [`Lane`]: its selection tracker, signer, ledger, journal
//! and books, under `<data>/slots/<id>/` (a node of one slot keeps them at
//! the data dir's top). Every slot's compute runs (a processor may depend on
//! its slot), but an epoch's chain reads pinned to a block are asked once for
//! all of them, and the books' notices of one epoch become one alert per
//! event naming every slot it touched.

use std::{collections::BTreeMap, path::PathBuf, sync::Arc};

use futures_util::StreamExt;
use lite_node_compute::executor::{ComputeResult, Executor, LocalExecutor, Task};
use lite_node_core::time::now_ms;
use lite_node_plugin_api::BlockDetail;

use super::epoch_loop::Work;
use crate::{
    alerts::{AlertKind, Alerter},
    books::{Books, Notice},
    chain::{Anchor, HttpRpc},
    compute::host::SelectionTracker,
    epochs::{Epoch, Poll, preload},
    journal::Journal,
    outcome::{Outcome, OutcomeKind},
    retry::{Policy, retry},
    snapshots::SnapshotStore,
    status::{NodeStatus, SlotLabel, SlotStatus, Trouble},
    submission::Submitter,
};

/// What the node needs to work and record epochs: what its slots share
/// (the chains, the processors, the snapshot store, the status) and one
/// [`Lane`] per slot.
#[derive(Debug)]
pub struct EpochWork {
    pub anchor: Arc<Anchor>,
    pub source: Arc<HttpRpc>,
    pub executor: LocalExecutor,
    pub lanes: Vec<Lane>,
    pub status: Arc<NodeStatus>,
    pub alerter: Arc<Alerter>,
    pub namespace: String,
    /// Anchor blocks after its release within which an epoch is still worked.
    pub submission_window: u64,
    /// A head that has not moved for this long is a stalled anchor.
    pub anchor_stall_after: std::time::Duration,
    /// What recording epochs keeps from one to the next ([`Recording`]):
    /// epochs are worked side by side, recorded one at a time, in order.
    pub recording: std::sync::Mutex<Recording>,
    /// The stored snapshots' bytes (pruned with the journal and the ledger).
    pub store: Arc<SnapshotStore>,
    /// The data dir: books and trackers are saved below it in batches.
    pub data_dir: PathBuf,
    /// Epochs kept on disk (`LITE_NODE_RETAIN_EPOCHS`).
    pub retain_epochs: u64,
    /// A full node's coordinator: each project that divides into data
    /// sources is computed by the cluster's workers.
    pub cluster: Option<Arc<crate::full_node::Coordinator>>,
}

/// What recording keeps between epochs.
#[derive(Debug, Default)]
pub struct Recording {
    /// The anchor head at the last polls, and since when it has been that.
    pub head_since: Option<(u64, tokio::time::Instant)>,
    /// The epoch at which the next pruning runs.
    pub prune_at: u64,
    /// Journal lines written of an epoch whose recording failed part-way,
    /// `(epoch, lines)`: its retry (after a full disk, say) appends the rest,
    /// not every line again. `None` once an epoch is recorded.
    pub journaled: Option<(u64, usize)>,
}

/// One slot's own part of the work: its selection tracker, its signed
/// submissions and their ledger, its journal and books. A node with one slot
/// keeps them in the data dir, one with several in `slots/<id>/` of it.
#[derive(Debug)]
pub struct Lane {
    pub slot_id: u64,
    pub tracker: Arc<SelectionTracker>,
    /// Shared with the epoch's submitting tasks.
    pub submitter: Arc<Submitter>,
    /// Written only while an epoch is recorded (one at a time).
    pub journal: std::sync::Mutex<Journal>,
    pub books_path: PathBuf,
    /// Where `/status`, `/metrics` and `/health` read this slot, and the
    /// one copy of its books.
    pub status: Arc<SlotStatus>,
}

/// An epoch's outcomes, per lane and then per project, and when the node saw
/// the epoch.
#[derive(Debug)]
pub struct Worked {
    pub outcomes: Vec<Vec<Outcome>>,
    pub seen_at_ms: u64,
}

impl Work for EpochWork {
    type Outcomes = Worked;

    /// Each project's snapshots are stored, signed and submitted as soon as
    /// that project's compute returns: a slow project (or slot) delays only
    /// itself. Computes run only through the executor; with several slots,
    /// it asks the epoch's pinned chain reads once for all of them.
    async fn work(&self, epoch: &Epoch, head: u64) -> anyhow::Result<Worked> {
        let seen_at_ms = now_ms();
        let tasks = match self.prepare(epoch, head).await {
            Ok(prepared) => prepared,
            Err(outcomes) => return Ok(Worked { outcomes, seen_at_ms }),
        };
        let (tasks, blocks) = tasks;
        // Where each result belongs: its lane, and its project's place there.
        let place: BTreeMap<(u64, String), (usize, usize)> = tasks
            .iter()
            .enumerate()
            .map(|(n, t)| ((t.slot_id, t.project_type.clone()), (n / self.projects(), n % self.projects())))
            .collect();
        let mut slots: Vec<Vec<Option<Outcome>>> = vec![vec![None; self.projects()]; self.lanes.len()];
        let unanswered = tasks.clone();
        // Each result's stages (store, sign, send, record) run as a task of
        // their own, so a thousand slots' submissions use every core; the
        // set aborts them if the epoch is abandoned.
        let mut results: futures_util::stream::BoxStream<'_, ComputeResult> = match &self.cluster {
            None => self.executor.execute(tasks, blocks),
            Some(cluster) => futures_util::stream::iter(tasks)
                .map(move |task| {
                    let blocks = blocks.clone();
                    async move {
                        let result = cluster.gather(&self.executor, &task, blocks).await;
                        if let (Some(selected), Some(lane)) = (result.selected, self.lanes.first()) {
                            lane.tracker.report(task.epoch_id, selected, task.slot_id);
                        }
                        result
                    }
                })
                .buffer_unordered(usize::MAX)
                .boxed(),
        };
        let mut stages = tokio::task::JoinSet::new();
        if let Some(lane) = self.lanes.first() {
            let (shared, anchor, epoch_id) = (lane.submitter.shared.clone(), self.anchor.clone(), epoch.epoch_id);
            let released = epoch.released_block;
            // The head, and (when the computes are quick, as a lite node's
            // are) the epoch's deadline and header on disk, while they run:
            // the first submission waits for neither, and the disk is quiet.
            // A full node's coordinator gathers for longer: its first
            // submission fixes them, so its window starts when it is ready.
            let early = self.cluster.is_none();
            stages.spawn(async move {
                let (head, header) = shared.latest(&anchor, released).await;
                if early {
                    shared.fix_epoch_early(epoch_id, head, &header).await;
                }
                Ok(None)
            });
        }
        let gathered = async {
            let mut computing = true;
            // The answers' ledger writes: the epoch ends once all have.
            let mut durable = futures_util::stream::FuturesUnordered::new();
            // Results beyond STAGES_IN_FLIGHT wait here as plain data.
            let mut waiting: std::collections::VecDeque<ComputeResult> = Default::default();
            loop {
                while stages.len() < STAGES_IN_FLIGHT
                    && let Some(result) = waiting.pop_front()
                {
                    let stage = stage(self.stage_of(result.slot_id), epoch.clone(), result);
                    stages.spawn(async move { stage.await.map(Some) });
                }
                tokio::select! {
                    result = results.next(), if computing => match result {
                        Some(result) => waiting.push_back(result),
                        None => computing = false,
                    },
                    done = stages.join_next(), if !stages.is_empty() => {
                        let staged = done.expect("not empty").map_err(|e| anyhow::anyhow!("a submission task: {e}"))??;
                        if let Some(Staged { key, outcome, durable: writes }) = staged {
                            durable.extend(writes);
                            if let Some(&(lane, project)) = place.get(&key) {
                                slots[lane][project] = Some(outcome);
                            }
                        }
                    }
                    Some(written) = durable.next(), if !durable.is_empty() => written?,
                    else => break,
                }
            }
            anyhow::Ok(())
        };
        tokio::select! {
            gathered = gathered => gathered?,
            never = self.expire_waiting() => match never {},
        }
        // Every task has an outcome, so the epoch's cursor can move.
        let outcomes = slots
            .into_iter()
            .enumerate()
            .map(|(lane, row)| {
                row.into_iter()
                    .enumerate()
                    .map(|(project, o)| {
                        o.unwrap_or_else(|| {
                            let task = &unanswered[lane * self.projects() + project];
                            let kind = OutcomeKind::Failed("the executor gave no result".into());
                            Outcome::computed(ComputeResult::without_compute(task, kind))
                        })
                    })
                    .collect()
            })
            .collect();
        Ok(Worked { outcomes, seen_at_ms })
    }

    fn record(&self, epoch: &Epoch, worked: &Worked) -> anyhow::Result<()> {
        let mut recording = self.recording.lock().unwrap_or_else(|p| p.into_inner());
        let several = self.lanes.len() > 1;
        let written = match recording.journaled {
            Some((epoch_id, lines)) if epoch_id == epoch.epoch_id => lines,
            _ => 0,
        };
        let mut line = 0;
        for (lane, outcomes) in self.lanes.iter().zip(&worked.outcomes) {
            let mut journal = lane.journal.lock().unwrap_or_else(|p| p.into_inner());
            for outcome in outcomes {
                line += 1;
                if line <= written {
                    continue;
                }
                log_outcome(epoch, outcome, several.then_some(lane.slot_id));
                journal
                    .record(epoch, outcome)
                    .map_err(|e| anyhow::anyhow!("writing {}: {e}", journal.path().display()))?;
                recording.journaled = Some((epoch.epoch_id, line));
            }
        }
        if several {
            log_summary(epoch, &worked.outcomes);
        }
        self.keep_books(epoch, worked)?;
        recording.journaled = None;
        if epoch.epoch_id >= recording.prune_at {
            self.prune(&mut recording, epoch.epoch_id);
        }
        Ok(())
    }

    fn trouble(&self, what: Trouble, problem: Option<String>) {
        self.status.troubles.set(what, problem);
    }

    fn polled(&self, poll: &Poll) {
        let m = &self.status.metrics;
        m.anchor_head.set(poll.head as i64);
        m.anchor_lag_blocks.set(poll.head.saturating_sub(poll.scanned_to) as i64);
        if let Some(newest) = poll.epochs.last() {
            m.last_epoch_seen.set(newest.epoch_id as i64);
        }
        // A head that does not move: no epoch can be released, nothing submitted.
        let now = tokio::time::Instant::now();
        let mut recording = self.recording.lock().unwrap_or_else(|p| p.into_inner());
        match recording.head_since {
            Some((head, _)) if head != poll.head => recording.head_since = Some((poll.head, now)),
            None => recording.head_since = Some((poll.head, now)),
            _ => {}
        }
        let stalled = recording.head_since.filter(|(_, since)| since.elapsed() > self.anchor_stall_after);
        self.status.troubles.set(
            Trouble::AnchorHead,
            stalled.map(|(head, since)| {
                format!("the anchor chain's head has been stuck at block {head} for {}s", since.elapsed().as_secs())
            }),
        );
    }
}

/// Results stored and submitted at once, at most: each in flight holds a
/// task, a gRPC call and its buffers (about 14 KiB, measured), and a thousand slots'
/// results arrive within a fraction of a second; more in flight would not
/// make the collector answer sooner. A result's turn ends with the
/// collector's answer: the ledger write that makes the answer durable is
/// waited for apart (small: an entry and a channel), before the epoch ends.
const STAGES_IN_FLIGHT: usize = 128;

/// What one result's stages need, owned (they run as a task of their own).
struct Stage {
    store: Arc<SnapshotStore>,
    namespace: String,
    anchor: Arc<Anchor>,
    submitter: Option<Arc<Submitter>>,
}

/// The stages after a compute: its snapshots stored, then submitted by the
/// slot's lane; the result's key (slot, project) comes back with it.
async fn stage(s: Stage, epoch: Epoch, result: ComputeResult) -> anyhow::Result<Staged> {
    let key = (result.slot_id, result.project_type.clone());
    let mut durable = Vec::new();
    // Each snapshot's file is synced: on the blocking pool, never on the
    // runtime's threads (a slow disk must not stall the anchor's polling,
    // the status API or the other results' submissions).
    let (store, namespace, epoch_id) = (s.store.clone(), s.namespace.clone(), epoch.epoch_id);
    let (stored, result) = tokio::task::spawn_blocking(move || {
        let stored = store.store(epoch_id, &namespace, &result);
        (stored, result)
    })
    .await
    .map_err(|e| anyhow::anyhow!("storing the snapshots of {} (slot {}): {e}", key.1, key.0))?;
    let mut outcome = Outcome::computed(result);
    match stored {
        Ok(stored) => outcome.stored = stored,
        Err(e) => outcome.kind = OutcomeKind::Failed(e),
    }
    if let Some(submitter) = &s.submitter
        && outcome.kind == OutcomeKind::Computed
    {
        let (submissions, writes) = submitter.submit(&epoch, &outcome.stored, &s.anchor).await?;
        outcome = outcome.submitted(submissions);
        durable = writes;
    }
    Ok(Staged { key, outcome, durable })
}

/// A result's stages done: its key (slot, project), its outcome, and the
/// ledger writes its answers wait for.
struct Staged {
    key: (u64, String),
    outcome: Outcome,
    durable: Vec<crate::submission::Durable>,
}

/// How often the anchor head is read while computes wait for a worker, so
/// that those past their deadline are dropped.
const EXPIRY_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

impl EpochWork {
    /// While computes wait for a worker, reads the anchor head now and then
    /// and drops those whose submission window closed (they end as missed).
    async fn expire_waiting(&self) -> std::convert::Infallible {
        let mut tick = tokio::time::interval(EXPIRY_CHECK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.executor.queue().waiting > 0
                && let Ok(head) = self.anchor.head().await
            {
                self.executor.observe_head(head);
            }
        }
    }

    /// The epoch's tasks (every lane × every project) and the block details
    /// they are given — or, when the epoch cannot be computed at all, every
    /// lane's outcomes.
    async fn prepare(&self, epoch: &Epoch, head: u64) -> Result<(Vec<Task>, Arc<[BlockDetail]>), Vec<Vec<Outcome>>> {
        let mut tasks = Vec::with_capacity(self.lanes.len() * self.projects());
        for lane in &self.lanes {
            for project in self.executor.projects() {
                tasks.push(Task {
                    epoch_id: epoch.epoch_id,
                    begin: epoch.begin,
                    end: epoch.end,
                    day_id: epoch.day_id,
                    slot_id: lane.slot_id,
                    total_slots: 0,
                    anchor_block: epoch.released_block,
                    namespace: self.namespace.clone(),
                    project_type: project.project_type.clone(),
                    deadline: epoch.released_block + self.submission_window,
                    sources: None,
                });
            }
        }
        let every = |kind: OutcomeKind| -> Vec<Vec<Outcome>> {
            let one = |t: &Task| Outcome::computed(ComputeResult::without_compute(t, kind.clone()));
            tasks.chunks(self.projects().max(1)).map(|lane| lane.iter().map(one).collect()).collect()
        };
        let age = head.saturating_sub(epoch.released_block);
        if age > self.submission_window {
            return Err(every(OutcomeKind::Missed(format!(
                "released {age} anchor blocks ago, past the {}-block submission window",
                self.submission_window
            ))));
        }
        // Without the total no compute can know whether this slot works the
        // epoch: a failure (before selection), never a silent "not selected".
        // It is the total as of the release block, which every node and
        // validator reads alike, whenever they ask.
        let what = format!("epoch {}: reading the total slot count", epoch.epoch_id);
        let total = || self.anchor.total_slots_at(epoch.released_block);
        let total_slots = match retry(Policy::PRELOAD, what, total, |_| true).await {
            Ok(n) => n,
            Err(e) => {
                return Err(every(OutcomeKind::Failed(format!(
                    "the total slot count is unknown: getTotalNodeCount at release block {} did not answer ({e})",
                    epoch.released_block
                ))));
            }
        };
        let blocks: Vec<BlockDetail> = if self.executor.needs_block_details() {
            let what = format!("epoch {}: preloading block details", epoch.epoch_id);
            let fetch = || preload::block_details(&self.source, epoch.begin, epoch.end);
            match retry(Policy::PRELOAD, what, fetch, |_| true).await {
                Ok(blocks) => blocks,
                Err(e) => return Err(every(OutcomeKind::Failed(format!("preloading block details: {e}")))),
            }
        } else {
            Vec::new()
        };
        for task in &mut tasks {
            task.total_slots = total_slots;
        }
        Ok((tasks, blocks.into()))
    }

    /// How many projects each lane works.
    fn projects(&self) -> usize {
        self.executor.projects().count()
    }

    /// What the stages after a compute of `slot_id` need.
    fn stage_of(&self, slot_id: u64) -> Stage {
        Stage {
            store: self.store.clone(),
            namespace: self.namespace.clone(),
            anchor: self.anchor.clone(),
            submitter: self.lanes.iter().find(|l| l.slot_id == slot_id).map(|l| l.submitter.clone()),
        }
    }

    /// Keeps the last `retain_epochs` epochs on disk: journal lines and
    /// ledger entries here, snapshot files in the background; then waits half
    /// a retention before the next round, so files stay within 1.5 times it.
    /// A failure only warns: the epoch itself is recorded.
    fn prune(&self, recording: &mut Recording, epoch_id: u64) {
        let first_kept = (epoch_id + 1).saturating_sub(self.retain_epochs);
        recording.prune_at = epoch_id + (self.retain_epochs / 2).max(1);
        if first_kept == 0 {
            return;
        }
        let window_floor = recording.head_since.map_or(0, |(head, _)| head).saturating_sub(self.submission_window);
        let (mut lines, mut entries) = (0, 0);
        for lane in &self.lanes {
            match lane.journal.lock().unwrap_or_else(|p| p.into_inner()).prune(first_kept) {
                Ok(n) => lines += n,
                Err(e) => tracing::warn!("{e}"),
            }
            match lane.submitter.ledger.prune(first_kept, window_floor) {
                Ok(n) => entries += n,
                Err(e) => tracing::warn!("{e}"),
            }
        }
        if lines > 0 {
            tracing::info!("pruned {lines} journal line(s) of epochs before {first_kept}");
        }
        if entries > 0 {
            tracing::info!("pruned {entries} ledger entr(ies) of epochs before {first_kept}");
        }
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || match store.prune(first_kept) {
            Ok(0) => {}
            Ok(n) => tracing::info!("pruned the snapshots of {n} epoch(s) before {first_kept}"),
            Err(e) => tracing::warn!("{e}"),
        });
    }

    /// Counts one epoch in each slot's books (saved before the epoch is
    /// marked handled), updates the status and metrics, and queues the
    /// alerts the books ask for: one per event, naming every slot it touched.
    fn keep_books(&self, epoch: &Epoch, worked: &Worked) -> anyhow::Result<()> {
        let status = &self.status;
        let m = &status.metrics;
        m.epochs_seen.inc();
        let mut ran = false;
        let mut problem = None;
        // Every lane's books are applied on a copy and saved before any is
        // kept: a save that fails leaves them all as they were, so the retry
        // of this epoch applies it again and its alerts are not lost. They
        // and the selection trackers are saved in one batch (one sync).
        let mut applied = Vec::with_capacity(self.lanes.len());
        let mut batch = lite_node_core::atomic_file::Batch::new(&self.data_dir);
        let mut trackers = Vec::with_capacity(self.lanes.len());
        for (lane, outcomes) in self.lanes.iter().zip(&worked.outcomes) {
            let mut books = lane.status.books();
            let lane_notices = books.apply(epoch.epoch_id, outcomes);
            batch.stage(&lane.books_path, books.text()?)?;
            if let Some((path, text, mark)) = lane.tracker.unsaved() {
                batch.stage(&path, text)?;
                trackers.push((lane.tracker.clone(), mark));
            }
            applied.push((books, lane_notices));
        }
        // The alerts these books ask for are kept on disk before the books
        // are saved: a crash between the two never loses one (the restart
        // sends it, and the epoch worked again finds it kept).
        let notices: Vec<(u64, Notice, Books)> = self
            .lanes
            .iter()
            .zip(&applied)
            .flat_map(|(lane, (books, lane_notices))| {
                lane_notices.iter().map(move |n| (lane.slot_id, n.clone(), books.clone()))
            })
            .collect();
        let prepared = self.prepare_alerts(notices)?;
        batch.commit()?;
        for (tracker, mark) in trackers {
            tracker.saved(mark);
        }
        for ((lane, outcomes), (books, _)) in self.lanes.iter().zip(&worked.outcomes).zip(applied) {
            for o in outcomes {
                m.count(lane.slot_id, &crate::books::verdict(o));
                for s in o.submissions.iter().filter(|s| s.status.is_accepted()) {
                    m.submission_latency.observe(s.answered_at_ms.saturating_sub(worked.seen_at_ms) as f64 / 1000.0);
                }
            }
            m.slot_consecutive_failures
                .get_or_create(&SlotLabel { slot: lane.slot_id })
                .set(books.overall.consecutive_failures as i64);
            // Processing means a compute ran (and reported, or returned): an
            // epoch that failed before that (e.g. the source RPC is down) is
            // no sign of life for the safety net and /health.
            ran |= outcomes
                .iter()
                .any(|o| o.selected.is_some() || matches!(o.kind, OutcomeKind::Computed | OutcomeKind::NotSelected));
            problem = problem.or_else(|| {
                outcomes.iter().find_map(|o| match &o.kind {
                    OutcomeKind::Failed(e) if o.selected.is_none() => {
                        Some(format!("epoch {} could not be computed: {e}", epoch.epoch_id))
                    }
                    _ => None,
                })
            });
            lane.status.set_books(books);
        }
        if ran {
            status.activity.touch();
        }
        *status.last_epoch_problem.lock().unwrap_or_else(|p| p.into_inner()) = problem.filter(|_| !ran);
        for (notice, books, slots, prepared) in prepared {
            self.log_notice(&notice, &books, &slots);
            if let Some(prepared) = prepared {
                let taken = self.alerter.dispatch(prepared);
                self.status.metrics.alerts.inc_by(taken as u64);
            }
        }
        Ok(())
    }

    /// The books' notices as events, each made ready to alert: the slots
    /// whose streak reached three in this epoch share one message, as do the
    /// slots that recovered, and the slots that missed one project. A
    /// latched alert that cannot be kept on disk fails the epoch's record
    /// (retried), so the books are not saved without it.
    #[allow(clippy::type_complexity)]
    fn prepare_alerts(
        &self,
        notices: Vec<(u64, Notice, Books)>,
    ) -> anyhow::Result<Vec<(Notice, Books, Vec<u64>, Option<crate::alerts::Prepared>)>> {
        let mut events: Vec<(Notice, Books, Vec<u64>)> = Vec::new();
        for (slot, notice, books) in notices {
            let same = |n: &Notice| match (n, &notice) {
                (Notice::ThreeFailures { .. }, Notice::ThreeFailures { .. }) => true,
                (Notice::Recovered { .. }, Notice::Recovered { .. }) => true,
                (Notice::MissedSnapshot { project: a, .. }, Notice::MissedSnapshot { project: b, .. }) => a == b,
                _ => false,
            };
            match events.iter_mut().find(|(n, _, _)| same(n)) {
                Some((_, _, slots)) => slots.push(slot),
                None => events.push((notice, books, vec![slot])),
            }
        }
        let mut prepared = Vec::with_capacity(events.len());
        for (notice, books, slots) in events {
            let ready = self
                .alerter
                .prepare(AlertKind::from(notice.clone()), &books, slots.clone())
                .map_err(|failed| anyhow::anyhow!("keeping the alert for the operator: {}", failed.0))?;
            prepared.push((notice, books, slots, ready));
        }
        Ok(prepared)
    }

    /// The log line of one of the books' events.
    fn log_notice(&self, notice: &Notice, books: &Books, slots: &[u64]) {
        let who = if self.lanes.len() > 1 {
            format!("slots {}: ", crate::config::format_slot_ids(slots))
        } else {
            String::new()
        };
        match notice {
            Notice::ThreeFailures { streak } => tracing::error!(
                "{who}{} consecutive selected epochs failed (epochs {}); alerting",
                books.overall.consecutive_failures,
                streak.iter().map(|s| s.epoch_id.to_string()).collect::<Vec<_>>().join(", ")
            ),
            Notice::Recovered { epoch_id, failures } => {
                tracing::info!("{who}epoch {epoch_id} succeeded after {failures} failed selected epochs")
            }
            Notice::MissedSnapshot { .. } => {}
        }
    }
}

/// One outcome's line; with several slots (`slot`), what went well is a
/// debug line ([`log_summary`] counts it) and only failures stay per slot.
fn log_outcome(epoch: &Epoch, o: &Outcome, slot: Option<u64>) {
    let took = o.finished_at_ms.saturating_sub(o.started_at_ms);
    let id = epoch.epoch_id;
    let project = match slot {
        Some(slot) => format!("{} slot {slot}", o.project_type),
        None => o.project_type.clone(),
    };
    match &o.kind {
        OutcomeKind::Computed if slot.is_some() => {
            tracing::debug!("epoch {id} {project}: computed {} snapshot(s) in {took} ms", o.snapshot_count)
        }
        OutcomeKind::NotSelected if slot.is_some() => tracing::debug!("epoch {id} {project}: not selected"),
        OutcomeKind::Computed => {
            tracing::info!("epoch {id} {project}: computed {} snapshot(s) in {took} ms", o.snapshot_count)
        }
        OutcomeKind::NotSelected => tracing::info!("epoch {id} {project}: not selected"),
        OutcomeKind::Failed(e) => tracing::warn!("epoch {id} {project}: failed after {took} ms: {e}"),
        OutcomeKind::Missed(e) => tracing::warn!("epoch {id} {project}: missed: {e}"),
        OutcomeKind::Withheld(e) => tracing::warn!("epoch {id} {project}: withheld: {e}"),
    }
}

/// Several slots: one line per project for the epoch — how many slots
/// computed, were not selected, failed or missed, and how many submissions
/// the collector accepted.
fn log_summary(epoch: &Epoch, lanes: &[Vec<Outcome>]) {
    let mut by_project: BTreeMap<&str, [usize; 6]> = BTreeMap::new();
    for o in lanes.iter().flatten() {
        let n = by_project.entry(o.project_type.as_str()).or_default();
        let i = match o.kind {
            OutcomeKind::Computed => 0,
            OutcomeKind::NotSelected => 1,
            OutcomeKind::Failed(_) => 2,
            OutcomeKind::Missed(_) => 3,
            OutcomeKind::Withheld(_) => 4,
        };
        n[i] += 1;
        n[5] += o.submissions.iter().filter(|s| s.status == crate::submission::Status::Accepted).count();
    }
    for (project, [computed, not_selected, failed, missed, withheld, accepted]) in by_project {
        tracing::info!(
            "epoch {} {project}: {} slots: {computed} computed ({accepted} submission(s) accepted), {not_selected} not \
             selected, {failed} failed, {missed} missed, {withheld} withheld (quarantined)",
            epoch.epoch_id,
            computed + not_selected + failed + missed + withheld
        );
    }
}
