//! The node's main loop: poll the anchor for released epochs, work them
//! (compute, submit) side by side, record each in release order, advance
//! the cursor — and the three ways out of it (a stop, an epoch abandoned at
//! a stop, an error).
//!
//! The loop only decides *what happens next*; what polling and working mean
//! is behind two traits, [`Epochs`] and [`Work`], so unit tests drive it
//! with fakes and paused time, without a chain.

use std::{future::Future, time::Duration};

use backon::ExponentialBackoff;

use crate::{
    epochs::{Epoch, Poll, PollError},
    exit::BadInput,
    retry::Policy,
    status::Trouble,
};

/// The anchor side: released epochs in order, and the persisted cursor.
pub trait Epochs {
    /// New releases since the last poll (or nothing new).
    fn poll(&mut self) -> impl Future<Output = Result<Poll, PollError>>;
    /// `epoch` has an outcome for every project: it is never handed out again.
    fn epoch_handled(&mut self, epoch: &Epoch) -> anyhow::Result<()>;
    /// Every epoch released up to `scanned_to` has been handled.
    fn scan_complete(&mut self, scanned_to: u64) -> anyhow::Result<()>;
    /// Resolves when the anchor announces something new (a WebSocket's new
    /// head, or its reconnection); never for an anchor that is only polled.
    /// Once caught up, the loop polls at this or after the poll interval,
    /// whichever comes first.
    fn changed(&mut self) -> impl Future<Output = ()> {
        std::future::pending()
    }
}

/// The node side: one epoch, worked and then recorded. Several epochs may
/// be worked at once; they are recorded one at a time, in order.
pub trait Work {
    type Outcomes;
    /// Computes and submits `epoch` (released while the anchor head was `head`).
    fn work(&self, epoch: &Epoch, head: u64) -> impl Future<Output = anyhow::Result<Self::Outcomes>>;
    /// Keeps what `work` produced (journal, books, status); runs before the
    /// cursor passes the epoch, and again if it failed.
    fn record(&self, epoch: &Epoch, outcomes: &Self::Outcomes) -> anyhow::Result<()>;
    /// Something the loop keeps retrying (the anchor, writing state) started
    /// failing (`Some`, why) or cleared (`None`).
    fn trouble(&self, _what: Trouble, _problem: Option<String>) {}
    /// The anchor answered a poll (its head, what it scanned, what was new).
    fn polled(&self, _poll: &Poll) {}
}

/// How the loop ended without an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A stop was asked and no epoch was in flight, or those in flight
    /// finished within the grace.
    Stopped,
    /// A stop was asked and the oldest epoch in flight did not finish within
    /// the grace (or could not be recorded): neither it nor any later one is
    /// marked handled, so they are worked again after a restart.
    Abandoned { epoch_id: u64 },
}

/// The loop's timing.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The wait between polls once caught up with the anchor.
    pub poll_interval: Duration,
    /// How long the epochs in flight may still run after a stop is asked.
    pub stop_grace: Duration,
    /// Epochs worked at once, at most ([`EPOCHS_IN_FLIGHT`] for a lite node).
    pub epochs_in_flight: usize,
}

/// Epochs a lite node works at once, at most. The next released epoch is
/// computed and submitted while an earlier one's submissions still retry (a
/// collector that is down answers no one until its deadline): when the
/// collector is back, every epoch still in its window is sent at once,
/// instead of one after another, each waiting out the one before.
pub const EPOCHS_IN_FLIGHT: usize = 16;

/// Runs the loop until `shutdown` completes (see [`Exit`]) or an epoch's
/// work fails. Released epochs are worked side by side (up to
/// [`Timing::epochs_in_flight`]) and recorded in release order, each before
/// the cursor passes it. A failing anchor, or state that cannot be written
/// (a full or read-only disk), is retried with backoff and reported to
/// [`Work::trouble`] until it clears.
pub async fn run<E: Epochs, W: Work>(
    epochs: &mut E,
    work: &W,
    timing: Timing,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<Exit> {
    use futures_util::StreamExt;
    use tokio::time::Instant;

    tokio::pin!(shutdown);
    let mut anchor = Outage::new(Trouble::Anchor, "polling the anchor chain", Policy::CHAIN);
    let mut disk = Outage::new(Trouble::State, "saving the node's state", Policy::STATE);
    let most = timing.epochs_in_flight.max(1);
    // Released epochs not started yet, with the head they were polled at.
    let mut queued: std::collections::VecDeque<(Epoch, u64)> = Default::default();
    // The epochs being worked, oldest first, and their work, which ends in that order.
    let mut flying: std::collections::VecDeque<Epoch> = Default::default();
    let mut flight = futures_util::stream::FuturesOrdered::new();
    // The newest epoch taken from a poll: a later poll hands it out again
    // until it is handled.
    let mut newest: Option<u64> = None;
    // The furthest anchor block polled, and the furthest saved as complete.
    let (mut scanned, mut completed): (Option<u64>, Option<u64>) = (None, None);
    let mut poll_at = Instant::now();
    loop {
        while flight.len() < most
            && let Some((epoch, head)) = queued.pop_front()
        {
            flying.push_back(epoch.clone());
            flight.push_back(async move { work.work(&epoch, head).await });
        }
        // Every epoch released up to the block before the oldest one not
        // handled is handled (they are released and recorded in order).
        let oldest = flying.front().or(queued.front().map(|(e, _)| e));
        let complete = scanned.map(|s| oldest.map_or(s, |e| s.min(e.released_block.saturating_sub(1))));
        if let Some(to) = complete.filter(|to| completed.is_none_or(|c| *to > c)) {
            match epochs.scan_complete(to) {
                Ok(()) => {
                    disk.cleared(work);
                    completed = Some(to);
                }
                Err(e) => poll_at = poll_at.max(Instant::now() + disk.failed(work, &format!("{e:#}"))),
            }
        }
        let room = flight.len() + queued.len() < most;
        tokio::select! {
            biased;
            _ = &mut shutdown => return stop(epochs, work, flying, flight, timing.stop_grace).await,
            worked = flight.next(), if !flight.is_empty() => {
                let epoch = flying.pop_front().expect("one epoch per work in flight");
                let outcomes = worked.expect("not empty")?;
                if !record(epochs, work, &epoch, &outcomes, &mut disk, &mut shutdown).await {
                    return Ok(Exit::Abandoned { epoch_id: epoch.epoch_id });
                }
            }
            // A poll is given up (it changes nothing until it returns) when
            // an epoch's work ends first: that epoch is recorded at once.
            polled = async {
                tokio::select! {
                    _ = tokio::time::sleep_until(poll_at) => {}
                    _ = epochs.changed() => {}
                }
                epochs.poll().await
            }, if room => match polled {
                Ok(poll) => {
                    anchor.cleared(work);
                    work.polled(&poll);
                    let fresh: Vec<Epoch> =
                        poll.epochs.iter().filter(|e| newest.is_none_or(|n| e.epoch_id > n)).cloned().collect();
                    newest = fresh.last().map(|e| e.epoch_id).or(newest);
                    // A scan that got no further than the last (held back
                    // by an epoch still in flight, its range read again) is
                    // no reason to read it once more at once.
                    let progressed = scanned.is_none_or(|s| poll.scanned_to > s);
                    scanned = Some(scanned.map_or(poll.scanned_to, |s| s.max(poll.scanned_to)));
                    // Behind the head and moving, or epochs came: poll again at once.
                    let caught_up = fresh.is_empty() && (poll.scanned_to >= poll.head || !progressed);
                    poll_at = Instant::now() + if caught_up { timing.poll_interval } else { Duration::ZERO };
                    queued.extend(fresh.into_iter().map(|e| (e, poll.head)));
                }
                Err(PollError::Anchor(e)) => poll_at = Instant::now() + anchor.failed(work, &e),
                Err(PollError::State(e)) => poll_at = Instant::now() + disk.failed(work, &e),
                Err(PollError::Foreign(e)) => return Err(BadInput(e).into()),
            },
        }
    }
}

/// Records `epoch` and marks it handled, retrying (with backoff, reported)
/// while that fails; `false` when a stop came first.
async fn record<E: Epochs, W: Work>(
    epochs: &mut E,
    work: &W,
    epoch: &Epoch,
    outcomes: &W::Outcomes,
    disk: &mut Outage,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> bool {
    let mut recorded = false;
    loop {
        let step = if recorded { Ok(()) } else { work.record(epoch, outcomes) };
        recorded = step.is_ok();
        match step.and_then(|()| epochs.epoch_handled(epoch)) {
            Ok(()) => {
                disk.cleared(work);
                return true;
            }
            Err(e) => {
                let wait = disk.failed(work, &format!("{e:#}"));
                tokio::select! {
                    _ = shutdown.as_mut() => return false,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

/// A stop: the epochs in flight may finish within `grace`, each recorded in
/// order as it does; none is started.
async fn stop<E: Epochs, W: Work, F: Future<Output = anyhow::Result<W::Outcomes>>>(
    epochs: &mut E,
    work: &W,
    mut flying: std::collections::VecDeque<Epoch>,
    mut flight: futures_util::stream::FuturesOrdered<F>,
    grace: Duration,
) -> anyhow::Result<Exit> {
    use futures_util::StreamExt;

    if flying.is_empty() {
        return Ok(Exit::Stopped);
    }
    let ids: Vec<String> = flying.iter().map(|e| e.epoch_id.to_string()).collect();
    tracing::info!(
        "stopping: letting epoch{} {} finish (at most {}s)",
        if ids.len() > 1 { "s" } else { "" },
        ids.join(", "),
        grace.as_secs()
    );
    let deadline = tokio::time::Instant::now() + grace;
    while let Some(epoch) = flying.pop_front() {
        let outcomes = match tokio::time::timeout_at(deadline, flight.next()).await {
            Ok(worked) => worked.expect("one work per epoch in flight")?,
            Err(_) => {
                tracing::warn!(
                    "epoch {} did not finish within {}s; it is processed again after the restart",
                    epoch.epoch_id,
                    grace.as_secs()
                );
                return Ok(Exit::Abandoned { epoch_id: epoch.epoch_id });
            }
        };
        if let Err(e) = work.record(&epoch, &outcomes).and_then(|()| epochs.epoch_handled(&epoch)) {
            tracing::warn!(
                "epoch {} could not be recorded at the stop ({e:#}); it is processed again after the restart",
                epoch.epoch_id
            );
            return Ok(Exit::Abandoned { epoch_id: epoch.epoch_id });
        }
    }
    Ok(Exit::Stopped)
}

/// One kind of failure the loop retries: its backoff, one warning per
/// outage rather than one per attempt, and the report to [`Work::trouble`].
struct Outage {
    kind: Trouble,
    what: &'static str,
    policy: Policy,
    delays: ExponentialBackoff,
    failing: bool,
}

impl Outage {
    fn new(kind: Trouble, what: &'static str, policy: Policy) -> Self {
        Self { kind, what, policy, delays: policy.delays(), failing: false }
    }

    fn cleared(&mut self, work: &impl Work) {
        if self.failing {
            tracing::info!("{} works again", self.what);
            self.failing = false;
            work.trouble(self.kind, None);
        }
        self.delays = self.policy.delays();
    }

    fn failed(&mut self, work: &impl Work, e: &impl std::fmt::Display) -> Duration {
        let wait = self.delays.next().unwrap_or(self.policy.max);
        if self.failing {
            tracing::debug!("{} still failing ({e}); next try in {wait:?}", self.what);
        } else {
            tracing::warn!("{} failed ({e}); retrying with backoff", self.what);
            self.failing = true;
        }
        work.trouble(self.kind, Some(format!("{} failed: {e}", self.what)));
        wait
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::VecDeque,
        sync::{Arc, Mutex},
    };

    use super::*;
    use lite_node_plugin_api::RpcError;

    fn epoch(id: u64) -> Epoch {
        Epoch {
            epoch_id: id,
            begin: 100 + id,
            end: 100 + id,
            day_id: 1,
            released_block: 10 + id,
            released_block_hash: String::new(),
            timestamp: 0,
        }
    }

    fn poll(ids: &[u64], head: u64, scanned_to: u64) -> Result<Poll, PollError> {
        Ok(Poll { epochs: ids.iter().map(|&id| epoch(id)).collect(), head, scanned_to })
    }

    /// What happened, in order, as both fakes saw it.
    type Log = Arc<Mutex<Vec<String>>>;

    struct FakeAnchor {
        polls: VecDeque<Result<Poll, PollError>>,
        log: Log,
    }

    impl Epochs for FakeAnchor {
        async fn poll(&mut self) -> Result<Poll, PollError> {
            match self.polls.pop_front() {
                Some(p) => {
                    self.log.lock().unwrap().push(match &p {
                        Ok(p) => format!("poll {:?}", p.epochs.iter().map(|e| e.epoch_id).collect::<Vec<_>>()),
                        Err(e) => format!("poll error {e}"),
                    });
                    p
                }
                None => std::future::pending().await,
            }
        }
        fn epoch_handled(&mut self, epoch: &Epoch) -> anyhow::Result<()> {
            self.log.lock().unwrap().push(format!("handled {}", epoch.epoch_id));
            Ok(())
        }
        fn scan_complete(&mut self, to: u64) -> anyhow::Result<()> {
            self.log.lock().unwrap().push(format!("scanned to {to}"));
            Ok(())
        }
    }

    struct FakeWork {
        log: Log,
        /// How long working each epoch takes…
        takes: Duration,
        /// …but these.
        slow: Vec<(u64, Duration)>,
        /// Recording this epoch fails this many times first.
        fail_record: Mutex<Option<(u64, u32)>>,
    }

    impl Work for FakeWork {
        type Outcomes = u64;
        async fn work(&self, epoch: &Epoch, _head: u64) -> anyhow::Result<u64> {
            self.log.lock().unwrap().push(format!("work {}", epoch.epoch_id));
            let takes = self.slow.iter().find(|(id, _)| *id == epoch.epoch_id).map_or(self.takes, |(_, t)| *t);
            tokio::time::sleep(takes).await;
            self.log.lock().unwrap().push(format!("worked {}", epoch.epoch_id));
            Ok(epoch.epoch_id)
        }
        fn record(&self, epoch: &Epoch, outcomes: &u64) -> anyhow::Result<()> {
            assert_eq!(*outcomes, epoch.epoch_id);
            if let Some((id, left)) = &mut *self.fail_record.lock().unwrap()
                && *id == epoch.epoch_id
                && *left > 0
            {
                *left -= 1;
                self.log.lock().unwrap().push(format!("record {id} failed"));
                anyhow::bail!("writing /data/state/epochs.jsonl: No space left on device");
            }
            self.log.lock().unwrap().push(format!("record {}", epoch.epoch_id));
            Ok(())
        }
        fn trouble(&self, what: Trouble, problem: Option<String>) {
            let line = match problem {
                Some(p) => format!("trouble: {p}"),
                None => format!("cleared: {what:?}"),
            };
            self.log.lock().unwrap().push(line);
        }
    }

    const TIMING: Timing = Timing {
        poll_interval: Duration::from_millis(50),
        stop_grace: Duration::from_secs(30),
        epochs_in_flight: EPOCHS_IN_FLIGHT,
    };

    fn fakes(polls: Vec<Result<Poll, PollError>>, takes: Duration) -> (FakeAnchor, FakeWork, Log) {
        let log = Log::default();
        (
            FakeAnchor { polls: polls.into(), log: log.clone() },
            FakeWork { log: log.clone(), takes, slow: Vec::new(), fail_record: Mutex::new(None) },
            log,
        )
    }

    /// A shutdown that comes once `log` has `n` lines (polled every 10 ms of tokio time).
    async fn after_lines(log: Log, n: usize) {
        while log.lock().unwrap().len() < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A shutdown that comes once `log` has the line `line`.
    async fn after_line(log: Log, line: &str) {
        while !log.lock().unwrap().iter().any(|l| l == line) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn position(log: &Log, line: &str) -> usize {
        let lines = log.lock().unwrap();
        lines.iter().position(|l| l == line).unwrap_or_else(|| panic!("no `{line}` in {lines:?}"))
    }

    /// A collector outage: each epoch's submissions are retried until its
    /// deadline, and the epochs released meanwhile do not wait for it. They
    /// are worked side by side (epoch 1 takes 30 s, 2 and 3 one each, all
    /// started at once) and still recorded, and handled, in release order.
    #[tokio::test(start_paused = true)]
    async fn epochs_are_worked_side_by_side_and_recorded_in_release_order() {
        let (mut anchor, mut work, log) = fakes(vec![poll(&[1, 2, 3], 20, 20)], Duration::from_secs(1));
        work.slow = vec![(1, Duration::from_secs(30))];
        let started = tokio::time::Instant::now();
        let exit = run(&mut anchor, &work, TIMING, after_line(log.clone(), "handled 3")).await.unwrap();
        assert_eq!(exit, Exit::Stopped);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(31), "side by side: {took:?} (one after another: 32 s)");
        assert!(position(&log, "work 3") < position(&log, "worked 2"), "started together: {log:?}");
        assert!(position(&log, "worked 3") < position(&log, "worked 1"), "{log:?}");
        let order: Vec<usize> = ["worked 1", "record 1", "handled 1", "record 2", "handled 2", "record 3", "handled 3"]
            .iter()
            .map(|l| position(&log, l))
            .collect();
        assert!(order.is_sorted(), "recorded in release order, each once its work ended: {log:?}");
        // The scan never passes an epoch not handled yet.
        let lines = log.lock().unwrap().clone();
        for (n, line) in lines.iter().enumerate() {
            if let Some(to) = line.strip_prefix("scanned to ").and_then(|t| t.parse::<u64>().ok()) {
                for id in [1u64, 2, 3] {
                    if to >= 10 + id {
                        assert!(lines[..n].contains(&format!("handled {id}")), "{line} before epoch {id}: {lines:?}");
                    }
                }
            }
        }
    }

    /// Issue 55, item 9: a scan held back more than its range (an epoch in
    /// flight for over 2,000 anchor blocks) reads the same range each poll,
    /// never reaching the head: it is read once a poll interval, not back
    /// to back.
    #[tokio::test(start_paused = true)]
    async fn a_scan_that_gets_no_further_is_not_read_again_at_once() {
        let polls = (0..20).map(|_| poll(&[], 5_000, 2_000)).collect();
        let (mut anchor, work, log) = fakes(polls, Duration::ZERO);
        let started = tokio::time::Instant::now();
        run(&mut anchor, &work, TIMING, after_lines(log.clone(), 20)).await.unwrap();
        let took = started.elapsed();
        assert!(took >= TIMING.poll_interval * 15, "20 polls of one range in {took:?}: back to back");
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_epochs_than_the_bound_are_worked_at_once() {
        let (mut anchor, work, log) = fakes(vec![poll(&[1, 2, 3], 20, 20)], Duration::from_secs(10));
        let timing = Timing { epochs_in_flight: 2, ..TIMING };
        let started = tokio::time::Instant::now();
        run(&mut anchor, &work, timing, after_line(log.clone(), "handled 3")).await.unwrap();
        assert!(position(&log, "handled 1") < position(&log, "work 3"), "{log:?}");
        let took = started.elapsed();
        assert!(took >= Duration::from_secs(20) && took < Duration::from_secs(21), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn epochs_are_worked_recorded_and_handled_in_order_and_the_scan_completes_after_them() {
        let (mut anchor, work, log) = fakes(vec![poll(&[1, 2], 20, 20), poll(&[], 20, 20)], Duration::ZERO);
        let exit = run(&mut anchor, &work, TIMING, after_line(log.clone(), "poll []")).await.unwrap();
        assert_eq!(exit, Exit::Stopped);
        // The scan is complete up to the block before the oldest epoch not
        // handled (epoch N is released in block 10 + N), then to the poll's end.
        let expected = [
            "poll [1, 2]",
            "scanned to 10",
            "work 1",
            "worked 1",
            "record 1",
            "handled 1",
            "scanned to 11",
            "work 2",
            "worked 2",
            "record 2",
            "handled 2",
            "scanned to 20",
            "poll []",
        ];
        assert_eq!(*log.lock().unwrap(), expected);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_anchor_is_polled_again_with_backoff_and_nothing_is_worked_meanwhile() {
        let refused = || Err(PollError::Anchor(RpcError { code: None.into(), message: "connection refused".into() }));
        let polls = vec![refused(), refused(), poll(&[7], 30, 30)];
        let (mut anchor, work, log) = fakes(polls, Duration::ZERO);
        let started = tokio::time::Instant::now();
        run(&mut anchor, &work, TIMING, after_line(log.clone(), "handled 7")).await.unwrap();
        let lines = log.lock().unwrap().clone();
        let trouble = "trouble: polling the anchor chain failed: connection refused";
        assert_eq!(
            lines[..11],
            [
                "poll error connection refused",
                trouble,
                "poll error connection refused",
                trouble,
                "poll [7]",
                "cleared: Anchor",
                "scanned to 16",
                "work 7",
                "worked 7",
                "record 7",
                "handled 7"
            ]
        );
        // Two waits of the anchor policy (250 ms, then about 500 ms, jittered up to twice).
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(750) && waited < Duration::from_secs(3), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_while_idle_ends_the_loop_at_once() {
        let (mut anchor, work, _log) = fakes(vec![], Duration::ZERO);
        let exit = run(&mut anchor, &work, TIMING, tokio::time::sleep(Duration::from_secs(1))).await.unwrap();
        assert_eq!(exit, Exit::Stopped);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_lets_the_epochs_in_flight_finish_and_handles_them_in_order() {
        let (mut anchor, work, log) = fakes(vec![poll(&[3, 4], 9, 9)], Duration::from_secs(10));
        let exit = run(&mut anchor, &work, TIMING, after_line(log.clone(), "work 4")).await.unwrap();
        assert_eq!(exit, Exit::Stopped);
        assert!(position(&log, "handled 3") < position(&log, "handled 4"), "{log:?}");
    }

    /// The oldest epoch in flight outlasts the grace: it and the later one
    /// (finished, but not to be handled before it) are left for the restart.
    #[tokio::test(start_paused = true)]
    async fn a_stop_abandons_from_the_oldest_epoch_that_outlasts_the_grace() {
        let (mut anchor, mut work, log) = fakes(vec![poll(&[5, 6], 9, 9)], Duration::from_secs(1));
        work.slow = vec![(5, Duration::from_secs(3600))];
        let exit = run(&mut anchor, &work, TIMING, after_line(log.clone(), "worked 6")).await.unwrap();
        assert_eq!(exit, Exit::Abandoned { epoch_id: 5 });
        assert!(!log.lock().unwrap().iter().any(|l| l.starts_with("handled")), "{log:?}");
        // The older one done, the newer one not: the older is handled, the newer left.
        let (mut anchor, mut work, log) = fakes(vec![poll(&[5, 6], 9, 9)], Duration::from_secs(1));
        work.slow = vec![(6, Duration::from_secs(3600))];
        let exit = run(&mut anchor, &work, TIMING, after_line(log.clone(), "handled 5")).await.unwrap();
        assert_eq!(exit, Exit::Abandoned { epoch_id: 6 });
        assert!(!log.lock().unwrap().iter().any(|l| l == "handled 6"), "{log:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_epoch_that_outlasts_the_stop_grace_is_abandoned_unhandled() {
        let (mut anchor, work, log) = fakes(vec![poll(&[5], 9, 9)], Duration::from_secs(3600));
        let started = tokio::time::Instant::now();
        let exit = run(&mut anchor, &work, TIMING, after_lines(log.clone(), 2)).await.unwrap();
        assert_eq!(exit, Exit::Abandoned { epoch_id: 5 });
        assert_eq!(*log.lock().unwrap(), ["poll [5]", "scanned to 9", "work 5"], "neither recorded nor handled");
        assert!(started.elapsed() < Duration::from_secs(31), "within the 30 s grace");
    }

    #[tokio::test(start_paused = true)]
    async fn state_that_cannot_be_written_is_retried_reported_and_the_cursor_waits_for_it() {
        let (mut anchor, work, log) = fakes(vec![poll(&[1, 2], 9, 9)], Duration::ZERO);
        *work.fail_record.lock().unwrap() = Some((2, 2));
        let exit = run(&mut anchor, &work, TIMING, after_line(log.clone(), "cleared: State")).await.unwrap();
        assert_eq!(exit, Exit::Stopped);
        let lines = log.lock().unwrap().clone();
        let trouble =
            "trouble: saving the node's state failed: writing /data/state/epochs.jsonl: No space left on device";
        assert_eq!(
            lines[..15],
            [
                "poll [1, 2]",
                "scanned to 9",
                "work 1",
                "worked 1",
                "record 1",
                "handled 1",
                "work 2",
                "worked 2",
                "record 2 failed",
                trouble,
                "record 2 failed",
                trouble,
                "record 2",
                "handled 2",
                "cleared: State",
            ],
            "worked once, recorded when the disk allows, then handled"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_while_state_cannot_be_written_abandons_the_epoch_unhandled() {
        let (mut anchor, work, log) = fakes(vec![poll(&[4], 9, 9)], Duration::ZERO);
        *work.fail_record.lock().unwrap() = Some((4, u32::MAX));
        let exit = run(&mut anchor, &work, TIMING, after_lines(log.clone(), 6)).await.unwrap();
        assert_eq!(exit, Exit::Abandoned { epoch_id: 4 });
        assert!(!log.lock().unwrap().iter().any(|l| l.starts_with("handled")), "{:?}", log.lock().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn catching_up_polls_again_without_waiting() {
        // The first poll scanned to 50 of a head at 80: the next poll comes at once.
        let (mut anchor, work, log) = fakes(vec![poll(&[], 80, 50), poll(&[9], 80, 80)], Duration::ZERO);
        let started = tokio::time::Instant::now();
        run(&mut anchor, &work, TIMING, after_lines(log.clone(), 6)).await.unwrap();
        assert_eq!(log.lock().unwrap()[..3], ["poll []", "scanned to 50", "poll [9]"]);
        assert!(started.elapsed() < TIMING.poll_interval, "no poll interval while behind");
    }
}
