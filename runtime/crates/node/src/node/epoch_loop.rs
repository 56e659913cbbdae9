//! The node's main loop as a small state machine: poll the anchor for
//! released epochs, work each one (compute, submit), record it, advance the
//! cursor — and the three ways out of it (a stop, an epoch abandoned at a
//! stop, an error).
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

/// The node side: one epoch, worked and then recorded.
pub trait Work {
    type Outcomes;
    /// Computes and submits `epoch` (released while the anchor head was `head`).
    fn work(&self, epoch: &Epoch, head: u64) -> impl Future<Output = anyhow::Result<Self::Outcomes>>;
    /// Keeps what `work` produced (journal, books, status); runs before the
    /// cursor passes the epoch, and again if it failed.
    fn record(&mut self, epoch: &Epoch, outcomes: &Self::Outcomes) -> anyhow::Result<()>;
    /// Something the loop keeps retrying (the anchor, writing state) started
    /// failing (`Some`, why) or cleared (`None`).
    fn trouble(&self, _what: Trouble, _problem: Option<String>) {}
    /// The anchor answered a poll (its head, what it scanned, what was new).
    fn polled(&mut self, _poll: &Poll) {}
}

/// Where the loop is.
#[derive(Debug)]
enum State<O> {
    /// Asking the anchor for new releases.
    Polling,
    /// Working the polled epochs, the `next` one now.
    Working { poll: Poll, next: usize },
    /// The `next` epoch was worked; its outcomes are being recorded
    /// (`recorded`: done, the cursor is next), retried while that fails.
    Recording { poll: Poll, next: usize, outcomes: O, recorded: bool, stop: bool },
    /// Every polled epoch is handled; the scan position is being saved.
    Completing(Poll),
    /// Waiting before the next poll: caught up, or the anchor failed.
    Waiting(Duration),
    /// Out of the loop.
    Done(Exit),
}

/// How the loop ended without an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A stop was asked and no epoch was in flight, or the one in flight
    /// finished within the grace.
    Stopped,
    /// A stop was asked and the epoch in flight did not finish within the
    /// grace (or could not be recorded): it is not marked handled, so it is
    /// worked again after a restart.
    Abandoned { epoch_id: u64 },
}

/// The loop's timing.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The wait between polls once caught up with the anchor.
    pub poll_interval: Duration,
    /// How long an epoch in flight may still run after a stop is asked.
    pub stop_grace: Duration,
}

/// Runs the loop until `shutdown` completes (see [`Exit`]) or an epoch's
/// work fails. A failing anchor, or state that cannot be written (a full or
/// read-only disk), is retried with backoff and reported to
/// [`Work::trouble`] until it clears.
pub async fn run<E: Epochs, W: Work>(
    epochs: &mut E,
    work: &mut W,
    timing: Timing,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<Exit> {
    tokio::pin!(shutdown);
    let mut anchor = Outage::new(Trouble::Anchor, "polling the anchor chain", Policy::CHAIN);
    let mut disk = Outage::new(Trouble::State, "saving the node's state", Policy::STATE);
    let mut state = State::Polling;
    loop {
        state = match state {
            State::Polling => tokio::select! {
                _ = &mut shutdown => State::Done(Exit::Stopped),
                poll = epochs.poll() => match poll {
                    Ok(poll) => {
                        anchor.cleared(work);
                        work.polled(&poll);
                        State::Working { poll, next: 0 }
                    }
                    Err(PollError::Anchor(e)) => State::Waiting(anchor.failed(work, &e)),
                    Err(PollError::State(e)) => State::Waiting(disk.failed(work, &e)),
                    Err(PollError::Foreign(e)) => return Err(BadInput(e).into()),
                },
            },
            State::Working { poll, next } if next == poll.epochs.len() => State::Completing(poll),
            State::Working { poll, next } => {
                let epoch = &poll.epochs[next];
                match work_with_grace(work, epoch, poll.head, timing.stop_grace, &mut shutdown).await {
                    Worked::Done(outcomes, stop) => {
                        State::Recording { outcomes: outcomes?, poll, next, recorded: false, stop }
                    }
                    Worked::Abandoned => State::Done(Exit::Abandoned { epoch_id: epoch.epoch_id }),
                }
            }
            State::Recording { poll, next, outcomes, recorded, stop } => {
                let epoch = &poll.epochs[next];
                let step = if recorded { Ok(()) } else { work.record(epoch, &outcomes) };
                let recorded = step.is_ok();
                match step.and_then(|()| epochs.epoch_handled(epoch)) {
                    Ok(()) => {
                        disk.cleared(work);
                        if stop { State::Done(Exit::Stopped) } else { State::Working { poll, next: next + 1 } }
                    }
                    Err(e) => {
                        let wait = disk.failed(work, &format!("{e:#}"));
                        let epoch_id = epoch.epoch_id;
                        tokio::select! {
                            _ = &mut shutdown => State::Done(Exit::Abandoned { epoch_id }),
                            _ = tokio::time::sleep(wait) => State::Recording { poll, next, outcomes, recorded, stop },
                        }
                    }
                }
            }
            State::Completing(poll) => match epochs.scan_complete(poll.scanned_to) {
                Ok(()) => {
                    disk.cleared(work);
                    if poll.epochs.is_empty() && poll.scanned_to >= poll.head {
                        State::Waiting(timing.poll_interval)
                    } else {
                        State::Polling
                    }
                }
                Err(e) => {
                    let wait = disk.failed(work, &format!("{e:#}"));
                    tokio::select! {
                        _ = &mut shutdown => State::Done(Exit::Stopped),
                        _ = tokio::time::sleep(wait) => State::Completing(poll),
                    }
                }
            },
            State::Waiting(wait) => tokio::select! {
                _ = &mut shutdown => State::Done(Exit::Stopped),
                _ = tokio::time::sleep(wait) => State::Polling,
                _ = epochs.changed() => State::Polling,
            },
            State::Done(exit) => return Ok(exit),
        };
    }
}

enum Worked<T> {
    /// The epoch's work finished; `true` when a stop came meanwhile.
    Done(anyhow::Result<T>, bool),
    /// A stop came and the work did not finish within the grace.
    Abandoned,
}

/// Works one epoch; a stop lets it finish for `grace` (a submission waiting
/// for an anchor that is down could wait forever).
async fn work_with_grace<W: Work>(
    work: &W,
    epoch: &Epoch,
    head: u64,
    grace: Duration,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Worked<W::Outcomes> {
    let job = work.work(epoch, head);
    tokio::pin!(job);
    tokio::select! {
        outcomes = &mut job => Worked::Done(outcomes, false),
        _ = shutdown.as_mut() => {
            tracing::info!("stopping: letting epoch {} finish (at most {}s)", epoch.epoch_id, grace.as_secs());
            match tokio::time::timeout(grace, job).await {
                Ok(outcomes) => Worked::Done(outcomes, true),
                Err(_) => {
                    tracing::warn!(
                        "epoch {} did not finish within {}s; it is processed again after the restart",
                        epoch.epoch_id,
                        grace.as_secs()
                    );
                    Worked::Abandoned
                }
            }
        }
    }
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
        /// How long working each epoch takes.
        takes: Duration,
        /// Recording this epoch fails this many times first.
        fail_record: Option<(u64, u32)>,
    }

    impl Work for FakeWork {
        type Outcomes = u64;
        async fn work(&self, epoch: &Epoch, _head: u64) -> anyhow::Result<u64> {
            self.log.lock().unwrap().push(format!("work {}", epoch.epoch_id));
            tokio::time::sleep(self.takes).await;
            Ok(epoch.epoch_id)
        }
        fn record(&mut self, epoch: &Epoch, outcomes: &u64) -> anyhow::Result<()> {
            assert_eq!(*outcomes, epoch.epoch_id);
            if let Some((id, left)) = &mut self.fail_record
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

    const TIMING: Timing = Timing { poll_interval: Duration::from_millis(50), stop_grace: Duration::from_secs(30) };

    fn fakes(polls: Vec<Result<Poll, PollError>>, takes: Duration) -> (FakeAnchor, FakeWork, Log) {
        let log = Log::default();
        (
            FakeAnchor { polls: polls.into(), log: log.clone() },
            FakeWork { log: log.clone(), takes, fail_record: None },
            log,
        )
    }

    /// A shutdown that comes once `log` has `n` lines (polled every 10 ms of tokio time).
    async fn after_lines(log: Log, n: usize) {
        while log.lock().unwrap().len() < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn epochs_are_worked_recorded_and_handled_in_order_and_the_scan_completes_after_them() {
        let (mut anchor, mut work, log) = fakes(vec![poll(&[1, 2], 20, 20), poll(&[], 20, 20)], Duration::ZERO);
        let exit = run(&mut anchor, &mut work, TIMING, after_lines(log.clone(), 10)).await.unwrap();
        assert_eq!(exit, Exit::Stopped);
        let expected = [
            "poll [1, 2]",
            "work 1",
            "record 1",
            "handled 1",
            "work 2",
            "record 2",
            "handled 2",
            "scanned to 20",
            "poll []",
            "scanned to 20",
        ];
        assert_eq!(*log.lock().unwrap(), expected);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_anchor_is_polled_again_with_backoff_and_nothing_is_worked_meanwhile() {
        let refused = || Err(PollError::Anchor(RpcError { code: None.into(), message: "connection refused".into() }));
        let polls = vec![refused(), refused(), poll(&[7], 30, 30)];
        let (mut anchor, mut work, log) = fakes(polls, Duration::ZERO);
        let started = tokio::time::Instant::now();
        run(&mut anchor, &mut work, TIMING, after_lines(log.clone(), 9)).await.unwrap();
        let lines = log.lock().unwrap().clone();
        let trouble = "trouble: polling the anchor chain failed: connection refused";
        assert_eq!(
            lines[..9],
            [
                "poll error connection refused",
                trouble,
                "poll error connection refused",
                trouble,
                "poll [7]",
                "cleared: Anchor",
                "work 7",
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
        let (mut anchor, mut work, _log) = fakes(vec![], Duration::ZERO);
        let exit = run(&mut anchor, &mut work, TIMING, tokio::time::sleep(Duration::from_secs(1))).await.unwrap();
        assert_eq!(exit, Exit::Stopped);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_lets_the_epoch_in_flight_finish_and_handles_it() {
        let (mut anchor, mut work, log) = fakes(vec![poll(&[3, 4], 9, 9)], Duration::from_secs(10));
        let exit = run(&mut anchor, &mut work, TIMING, after_lines(log.clone(), 2)).await.unwrap();
        assert_eq!(exit, Exit::Stopped);
        assert_eq!(*log.lock().unwrap(), ["poll [3, 4]", "work 3", "record 3", "handled 3"], "epoch 4 is not started");
    }

    #[tokio::test(start_paused = true)]
    async fn an_epoch_that_outlasts_the_stop_grace_is_abandoned_unhandled() {
        let (mut anchor, mut work, log) = fakes(vec![poll(&[5], 9, 9)], Duration::from_secs(3600));
        let started = tokio::time::Instant::now();
        let exit = run(&mut anchor, &mut work, TIMING, after_lines(log.clone(), 2)).await.unwrap();
        assert_eq!(exit, Exit::Abandoned { epoch_id: 5 });
        assert_eq!(*log.lock().unwrap(), ["poll [5]", "work 5"], "neither recorded nor handled");
        assert!(started.elapsed() < Duration::from_secs(31), "within the 30 s grace");
    }

    #[tokio::test(start_paused = true)]
    async fn state_that_cannot_be_written_is_retried_reported_and_the_cursor_waits_for_it() {
        let (mut anchor, mut work, log) = fakes(vec![poll(&[1, 2], 9, 9)], Duration::ZERO);
        work.fail_record = Some((2, 2));
        let exit = run(&mut anchor, &mut work, TIMING, after_lines(log.clone(), 13)).await.unwrap();
        assert_eq!(exit, Exit::Stopped);
        let lines = log.lock().unwrap().clone();
        let trouble =
            "trouble: saving the node's state failed: writing /data/state/epochs.jsonl: No space left on device";
        assert_eq!(
            lines[..13],
            [
                "poll [1, 2]",
                "work 1",
                "record 1",
                "handled 1",
                "work 2",
                "record 2 failed",
                trouble,
                "record 2 failed",
                trouble,
                "record 2",
                "handled 2",
                "cleared: State",
                "scanned to 9",
            ],
            "worked once, recorded when the disk allows, then handled"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_while_state_cannot_be_written_abandons_the_epoch_unhandled() {
        let (mut anchor, mut work, log) = fakes(vec![poll(&[4], 9, 9)], Duration::ZERO);
        work.fail_record = Some((4, u32::MAX));
        let exit = run(&mut anchor, &mut work, TIMING, after_lines(log.clone(), 6)).await.unwrap();
        assert_eq!(exit, Exit::Abandoned { epoch_id: 4 });
        assert!(!log.lock().unwrap().iter().any(|l| l.starts_with("handled")), "{:?}", log.lock().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn catching_up_polls_again_without_waiting() {
        // The first poll scanned to 50 of a head at 80: the next poll comes at once.
        let (mut anchor, mut work, log) = fakes(vec![poll(&[], 80, 50), poll(&[9], 80, 80)], Duration::ZERO);
        let started = tokio::time::Instant::now();
        run(&mut anchor, &mut work, TIMING, after_lines(log.clone(), 6)).await.unwrap();
        assert_eq!(log.lock().unwrap()[..3], ["poll []", "scanned to 50", "poll [9]"]);
        assert!(started.elapsed() < TIMING.poll_interval, "no poll interval while behind");
    }
}
