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
    epochs::{Epoch, Poll},
    retry::Policy,
};

/// The anchor side: released epochs in order, and the persisted cursor.
pub trait Epochs {
    type Error: std::fmt::Display;
    /// New releases since the last poll (or nothing new).
    fn poll(&mut self) -> impl Future<Output = Result<Poll, Self::Error>>;
    /// `epoch` has an outcome for every project: it is never handed out again.
    fn epoch_handled(&mut self, epoch: &Epoch) -> anyhow::Result<()>;
    /// Every epoch released up to `scanned_to` has been handled.
    fn scan_complete(&mut self, scanned_to: u64) -> anyhow::Result<()>;
}

/// The node side: one epoch, worked and then recorded.
pub trait Work {
    type Outcomes;
    /// Computes and submits `epoch` (released while the anchor head was `head`).
    fn work(&self, epoch: &Epoch, head: u64) -> impl Future<Output = anyhow::Result<Self::Outcomes>>;
    /// Keeps what `work` produced (journal, books, status); runs before the
    /// cursor passes the epoch.
    fn record(&mut self, epoch: &Epoch, outcomes: Self::Outcomes) -> anyhow::Result<()>;
}

/// Where the loop is.
#[derive(Debug)]
enum State {
    /// Asking the anchor for new releases.
    Polling,
    /// Working the polled epochs, the `next` one now.
    Working { poll: Poll, next: usize },
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
    /// grace: it is not marked handled, so it is worked again after a restart.
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

/// Runs the loop until `shutdown` completes (see [`Exit`]) or recording an
/// epoch fails (the error).
pub async fn run<E: Epochs, W: Work>(
    epochs: &mut E,
    work: &mut W,
    timing: Timing,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<Exit> {
    tokio::pin!(shutdown);
    let mut anchor = AnchorHealth::default();
    let mut state = State::Polling;
    loop {
        state = match state {
            State::Polling => tokio::select! {
                _ = &mut shutdown => State::Done(Exit::Stopped),
                poll = epochs.poll() => match poll {
                    Ok(poll) => {
                        anchor.answered();
                        State::Working { poll, next: 0 }
                    }
                    Err(e) => State::Waiting(anchor.failed(&e)),
                },
            },
            State::Working { poll, next } if next == poll.epochs.len() => {
                epochs.scan_complete(poll.scanned_to)?;
                if poll.epochs.is_empty() && poll.scanned_to >= poll.head {
                    State::Waiting(timing.poll_interval)
                } else {
                    State::Polling
                }
            }
            State::Working { poll, next } => {
                let epoch = &poll.epochs[next];
                match work_with_grace(work, epoch, poll.head, timing.stop_grace, &mut shutdown).await {
                    Worked::Done(outcomes, stop) => {
                        work.record(epoch, outcomes?)?;
                        epochs.epoch_handled(epoch)?;
                        if stop { State::Done(Exit::Stopped) } else { State::Working { poll, next: next + 1 } }
                    }
                    Worked::Abandoned => State::Done(Exit::Abandoned { epoch_id: epoch.epoch_id }),
                }
            }
            State::Waiting(wait) => tokio::select! {
                _ = &mut shutdown => State::Done(Exit::Stopped),
                _ = tokio::time::sleep(wait) => State::Polling,
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

/// The anchor's answers to polling: the backoff while it fails, and one
/// warning per outage rather than one per attempt.
struct AnchorHealth {
    delays: ExponentialBackoff,
    failing: bool,
}

impl Default for AnchorHealth {
    fn default() -> Self {
        Self { delays: Policy::CHAIN.delays(), failing: false }
    }
}

impl AnchorHealth {
    fn answered(&mut self) {
        if self.failing {
            tracing::info!("anchor RPC answers again");
            self.failing = false;
        }
        self.delays = Policy::CHAIN.delays();
    }

    fn failed(&mut self, e: &impl std::fmt::Display) -> Duration {
        let wait = self.delays.next().unwrap_or(Policy::CHAIN.max);
        if self.failing {
            tracing::debug!("anchor still failing ({e}); next try in {wait:?}");
        } else {
            tracing::warn!("polling the anchor chain failed ({e}); retrying with backoff");
            self.failing = true;
        }
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

    fn poll(ids: &[u64], head: u64, scanned_to: u64) -> Result<Poll, String> {
        Ok(Poll { epochs: ids.iter().map(|&id| epoch(id)).collect(), head, scanned_to })
    }

    /// What happened, in order, as both fakes saw it.
    type Log = Arc<Mutex<Vec<String>>>;

    struct FakeAnchor {
        polls: VecDeque<Result<Poll, String>>,
        log: Log,
    }

    impl Epochs for FakeAnchor {
        type Error = String;
        async fn poll(&mut self) -> Result<Poll, String> {
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
        fail_record: Option<u64>,
    }

    impl Work for FakeWork {
        type Outcomes = u64;
        async fn work(&self, epoch: &Epoch, _head: u64) -> anyhow::Result<u64> {
            self.log.lock().unwrap().push(format!("work {}", epoch.epoch_id));
            tokio::time::sleep(self.takes).await;
            Ok(epoch.epoch_id)
        }
        fn record(&mut self, epoch: &Epoch, outcomes: u64) -> anyhow::Result<()> {
            assert_eq!(outcomes, epoch.epoch_id);
            if self.fail_record == Some(epoch.epoch_id) {
                anyhow::bail!("disk full writing the journal");
            }
            self.log.lock().unwrap().push(format!("record {}", epoch.epoch_id));
            Ok(())
        }
    }

    const TIMING: Timing = Timing { poll_interval: Duration::from_millis(50), stop_grace: Duration::from_secs(30) };

    fn fakes(polls: Vec<Result<Poll, String>>, takes: Duration) -> (FakeAnchor, FakeWork, Log) {
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
        let polls = vec![Err("connection refused".into()), Err("connection refused".into()), poll(&[7], 30, 30)];
        let (mut anchor, mut work, log) = fakes(polls, Duration::ZERO);
        let started = tokio::time::Instant::now();
        run(&mut anchor, &mut work, TIMING, after_lines(log.clone(), 6)).await.unwrap();
        let lines = log.lock().unwrap().clone();
        assert_eq!(
            lines[..6],
            [
                "poll error connection refused",
                "poll error connection refused",
                "poll [7]",
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
    async fn a_failure_to_record_an_epoch_is_an_error_and_the_cursor_stays() {
        let (mut anchor, mut work, log) = fakes(vec![poll(&[1, 2], 9, 9)], Duration::ZERO);
        work.fail_record = Some(2);
        let err = run(&mut anchor, &mut work, TIMING, std::future::pending()).await.unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        assert_eq!(*log.lock().unwrap(), ["poll [1, 2]", "work 1", "record 1", "handled 1", "work 2"]);
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
