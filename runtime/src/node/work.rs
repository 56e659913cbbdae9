//! One epoch's work as the node does it, behind the main loop's [`Work`]:
//! past the submission window → missed; otherwise preload block details,
//! dispatch to every project's processor, submit what was computed — then
//! record it all (journal, books, status, alerts) before the cursor moves.

use std::{path::PathBuf, sync::Arc};

use lite_node_plugin_api::{BlockDetail, EpochContext};

use super::epoch_loop::Work;
use crate::{
    alerts::{AlertKind, Alerter},
    books::{Books, Notice},
    chain::{Anchor, HttpRpc},
    dispatch::{Dispatcher, Outcome, OutcomeKind, now_ms},
    epochs::{Epoch, Poll, preload},
    journal::Journal,
    retry::{Policy, retry},
    snapshots::SnapshotStore,
    status::NodeStatus,
    submission::Submitter,
};

/// What the node needs to work and record epochs.
#[derive(Debug)]
pub struct EpochWork {
    pub anchor: Arc<Anchor>,
    pub source: Arc<HttpRpc>,
    pub dispatcher: Dispatcher,
    pub submitter: Submitter,
    pub journal: Journal,
    pub books: Books,
    pub books_path: PathBuf,
    pub status: Arc<NodeStatus>,
    pub alerter: Arc<Alerter>,
    pub slot_id: u64,
    pub namespace: String,
    /// Anchor blocks after its release within which an epoch is still worked.
    pub submission_window: u64,
    /// A head that has not moved for this long is a stalled anchor.
    pub anchor_stall_after: std::time::Duration,
    /// The anchor head at the last polls, and since when it has been that.
    pub head_since: Option<(u64, tokio::time::Instant)>,
    /// The stored snapshots' bytes (pruned with the journal and the ledger).
    pub store: Arc<SnapshotStore>,
    /// Epochs kept on disk (`LITE_NODE_RETAIN_EPOCHS`).
    pub retain_epochs: u64,
    /// The epoch at which the next pruning runs.
    pub prune_at: u64,
}

/// An epoch's outcomes, one per project, and when the node saw the epoch.
#[derive(Debug)]
pub struct Worked {
    pub outcomes: Vec<Outcome>,
    pub seen_at_ms: u64,
}

impl Work for EpochWork {
    type Outcomes = Worked;

    /// Each project's snapshots are signed and submitted as soon as that
    /// project's compute returns: a slow project delays only itself.
    async fn work(&self, epoch: &Epoch, head: u64) -> anyhow::Result<Worked> {
        let seen_at_ms = now_ms();
        let (ctx, blocks) = match self.prepare(epoch, head).await {
            Ok(prepared) => prepared,
            Err(outcomes) => return Ok(Worked { outcomes, seen_at_ms }),
        };
        let runs = self.dispatcher.projects.iter().map(|p| {
            let (ctx, blocks) = (&ctx, &blocks);
            async move {
                let mut outcome = self.dispatcher.run_one(p, ctx, blocks).await;
                self.submitter.submit(epoch, &mut outcome, &self.anchor).await?;
                Ok::<_, anyhow::Error>(outcome)
            }
        });
        let outcomes = futures_util::future::try_join_all(runs).await?;
        Ok(Worked { outcomes, seen_at_ms })
    }

    fn record(&mut self, epoch: &Epoch, worked: &Worked) -> anyhow::Result<()> {
        for outcome in &worked.outcomes {
            log_outcome(epoch, outcome);
            self.journal
                .record(epoch, outcome)
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", self.journal.path().display()))?;
        }
        self.keep_books(epoch, worked)?;
        if epoch.epoch_id >= self.prune_at {
            self.prune(epoch.epoch_id);
        }
        Ok(())
    }

    fn trouble(&self, what: &'static str, problem: Option<String>) {
        self.status.troubles.set(what, problem);
    }

    fn polled(&mut self, poll: &Poll) {
        let m = &self.status.metrics;
        m.anchor_head.set(poll.head as i64);
        m.anchor_lag_blocks.set(poll.head.saturating_sub(poll.scanned_to) as i64);
        if let Some(newest) = poll.epochs.last() {
            m.last_epoch_seen.set(newest.epoch_id as i64);
        }
        // A head that does not move: no epoch can be released, nothing submitted.
        let now = tokio::time::Instant::now();
        match self.head_since {
            Some((head, _)) if head != poll.head => self.head_since = Some((poll.head, now)),
            None => self.head_since = Some((poll.head, now)),
            _ => {}
        }
        let stalled = self.head_since.filter(|(_, since)| since.elapsed() > self.anchor_stall_after);
        self.status.troubles.set(
            "anchor head",
            stalled.map(|(head, since)| {
                format!("the anchor chain's head has been stuck at block {head} for {}s", since.elapsed().as_secs())
            }),
        );
    }
}

impl EpochWork {
    /// What every compute of `epoch` is given — or, when the epoch cannot be
    /// computed at all, every project's outcome.
    async fn prepare(&self, epoch: &Epoch, head: u64) -> Result<(EpochContext, Vec<BlockDetail>), Vec<Outcome>> {
        let age = head.saturating_sub(epoch.released_block);
        if age > self.submission_window {
            return Err(self.every(OutcomeKind::Missed(format!(
                "released {age} anchor blocks ago, past the {}-block submission window",
                self.submission_window
            ))));
        }
        // Without the total no compute can know whether this slot works the
        // epoch: a failure (before selection), never a silent "not selected".
        let total_slots = match self.anchor.total_slots().await {
            Ok(n) => n,
            Err(e) => {
                return Err(self.every(OutcomeKind::Failed(format!(
                    "the total slot count is unknown: getTotalNodeCount has not answered since start-up ({e})"
                ))));
            }
        };
        let blocks: Vec<BlockDetail> = if self.dispatcher.needs_block_details() {
            let what = format!("epoch {}: preloading block details", epoch.epoch_id);
            let fetch = || preload::block_details(&self.source, epoch.begin, epoch.end);
            match retry(Policy::PRELOAD, what, fetch, |_| true).await {
                Ok(blocks) => blocks,
                Err(e) => return Err(self.every(OutcomeKind::Failed(format!("preloading block details: {e}")))),
            }
        } else {
            Vec::new()
        };
        let ctx = EpochContext {
            epoch_id: epoch.epoch_id,
            begin: epoch.begin,
            end: epoch.end,
            day_id: epoch.day_id,
            slot_id: self.slot_id,
            total_slots,
            namespace: self.namespace.as_str().into(),
            project_type: "".into(),
        };
        Ok((ctx, blocks))
    }

    /// The same outcome for every project (an epoch not computed at all).
    fn every(&self, kind: OutcomeKind) -> Vec<Outcome> {
        let at = now_ms();
        self.dispatcher
            .projects
            .iter()
            .map(|p| Outcome {
                project_type: p.project.project_type.clone(),
                kind: kind.clone(),
                selected: None,
                snapshots: vec![],
                stored: vec![],
                submissions: vec![],
                started_at_ms: at,
                finished_at_ms: at,
            })
            .collect()
    }

    /// Keeps the last `retain_epochs` epochs on disk: journal lines and
    /// ledger entries here, snapshot files in the background; then waits half
    /// a retention before the next round, so files stay within 1.5 times it.
    /// A failure only warns: the epoch itself is recorded.
    fn prune(&mut self, epoch_id: u64) {
        let first_kept = (epoch_id + 1).saturating_sub(self.retain_epochs);
        self.prune_at = epoch_id + (self.retain_epochs / 2).max(1);
        if first_kept == 0 {
            return;
        }
        match self.journal.prune(first_kept) {
            Ok(0) => {}
            Ok(n) => tracing::info!("pruned {n} journal line(s) of epochs before {first_kept}"),
            Err(e) => tracing::warn!("{e}"),
        }
        let window_floor = self.head_since.map_or(0, |(head, _)| head).saturating_sub(self.submission_window);
        match self.submitter.ledger.prune(first_kept, window_floor) {
            Ok(0) => {}
            Ok(n) => tracing::info!("pruned {n} ledger entr(ies) of epochs before {first_kept}"),
            Err(e) => tracing::warn!("{e}"),
        }
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || match store.prune(first_kept) {
            Ok(0) => {}
            Ok(n) => tracing::info!("pruned the snapshots of {n} epoch(s) before {first_kept}"),
            Err(e) => tracing::warn!("{e}"),
        });
    }

    /// Counts one epoch in the books (saved before the epoch is marked
    /// handled), updates the status and metrics, and queues the alerts the
    /// books ask for.
    fn keep_books(&mut self, epoch: &Epoch, worked: &Worked) -> anyhow::Result<()> {
        let (books, status) = (&mut self.books, &self.status);
        let notices = books.apply(epoch.epoch_id, &worked.outcomes);
        books.save(&self.books_path)?;
        let m = &status.metrics;
        m.epochs_seen.inc();
        for o in &worked.outcomes {
            m.count(&crate::books::verdict(o));
            for s in o.submissions.iter().filter(|s| s.status.is_accepted()) {
                m.submission_latency.observe(s.answered_at_ms.saturating_sub(worked.seen_at_ms) as f64 / 1000.0);
            }
        }
        *status.books.lock().unwrap_or_else(|p| p.into_inner()) = books.clone();
        // Processing means a compute ran (and reported, or returned): an epoch
        // that failed before that (e.g. the source RPC is down) is no sign of
        // life for the safety net and /health.
        let ran = worked
            .outcomes
            .iter()
            .any(|o| o.selected.is_some() || matches!(o.kind, OutcomeKind::Computed | OutcomeKind::NotSelected));
        if ran {
            status.activity.touch();
        }
        let problem = worked.outcomes.iter().find_map(|o| match &o.kind {
            OutcomeKind::Failed(e) if o.selected.is_none() && !ran => {
                Some(format!("epoch {} could not be computed: {e}", epoch.epoch_id))
            }
            _ => None,
        });
        *status.last_epoch_problem.lock().unwrap_or_else(|p| p.into_inner()) = problem;
        for notice in notices {
            match &notice {
                Notice::ThreeFailures { streak } => tracing::error!(
                    "{} consecutive selected epochs failed (epochs {}); alerting",
                    books.overall.consecutive_failures,
                    streak.iter().map(|s| s.epoch_id.to_string()).collect::<Vec<_>>().join(", ")
                ),
                Notice::Recovered { epoch_id, failures } => {
                    tracing::info!("epoch {epoch_id} succeeded after {failures} failed selected epochs")
                }
                Notice::MissedSnapshot { .. } => {}
            }
            m.alerts.inc_by(self.alerter.notify(AlertKind::from(notice), books) as u64);
        }
        Ok(())
    }
}

fn log_outcome(epoch: &Epoch, o: &Outcome) {
    let took = o.finished_at_ms.saturating_sub(o.started_at_ms);
    let (id, project) = (epoch.epoch_id, &o.project_type);
    match &o.kind {
        OutcomeKind::Computed => {
            tracing::info!("epoch {id} {project}: computed {} snapshot(s) in {took} ms", o.snapshots.len())
        }
        OutcomeKind::NotSelected => tracing::info!("epoch {id} {project}: not selected"),
        OutcomeKind::Failed(e) => tracing::warn!("epoch {id} {project}: failed after {took} ms: {e}"),
        OutcomeKind::Missed(e) => tracing::warn!("epoch {id} {project}: missed: {e}"),
    }
}
