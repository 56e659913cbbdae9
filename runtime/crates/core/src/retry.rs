//! Retries: one policy type, built on `backon`, for everything that waits for
//! something outside the node to answer — the anchor and source chains, the
//! collector, IPFS, the alert channels.
//!
//! A [`Policy`] names how long to wait after the first failure, the longest
//! wait, and how many attempts (or forever). [`retry`] runs an operation under
//! a policy and logs the way every retry in the node logs: a warning at the
//! first failure, debug lines while it keeps failing, and an info line when it
//! answers again. Loops that must also stop on a signal select on their own
//! shutdown future around it.

use std::{fmt::Display, future::Future, time::Duration};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder, Retryable};

/// A policy's waits, one after another (`Policy::delays`).
pub type Delays = ExponentialBackoff;

/// How to retry one kind of operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The wait after the first failure; each next wait doubles.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
    /// Attempts after the first (`None`: until it answers or the caller stops).
    pub retries: Option<usize>,
    /// Spread the waits randomly (many nodes retrying the same RPC do not
    /// retry in step).
    pub jitter: bool,
    /// Stop once the waits add up to this (`None`: the attempts alone
    /// bound it); see [`Policy::within`].
    pub total: Option<Duration>,
}

impl Policy {
    /// Chain RPC that the node cannot go on without: polling the anchor, the
    /// identity check, the anchor head before a submission, the collector's
    /// start-up. Forever, from 250 ms up to 30 s.
    pub const CHAIN: Self = Self {
        first: Duration::from_millis(250),
        max: Duration::from_secs(30),
        retries: None,
        jitter: true,
        total: None,
    };
    /// What an epoch needs before its computes run — its block details (the
    /// source chain may lag a little behind the anchor) and the total slot
    /// count at its release block: five attempts in all, then the epoch
    /// fails rather than guess.
    pub const PRELOAD: Self = Self {
        first: Duration::from_millis(250),
        max: Duration::from_secs(5),
        retries: Some(4),
        jitter: true,
        total: None,
    };
    /// A submission while the collector cannot be reached: from 100 ms up to
    /// 5 s, for as long as the submission's deadline holds (the caller checks).
    pub const COLLECTOR: Self = Self {
        first: Duration::from_millis(100),
        max: Duration::from_secs(5),
        retries: None,
        jitter: false,
        total: None,
    };
    /// A compute that failed while a chain could not be reached: four
    /// attempts in all, 1, 2 and 4 s apart (an RPC timeout is 15 s).
    pub const RECOMPUTE: Self = Self {
        first: Duration::from_secs(1),
        max: Duration::from_secs(4),
        retries: Some(3),
        jitter: false,
        total: None,
    };
    /// An IPFS upload: three attempts in all.
    pub const IPFS: Self = Self {
        first: Duration::from_millis(500),
        max: Duration::from_secs(2),
        retries: Some(2),
        jitter: false,
        total: None,
    };
    /// The anchor's WebSocket, dropped or refused: from 200 ms up to 10 s,
    /// forever (a server that accepts and at once closes is not hammered).
    pub const RECONNECT: Self = Self {
        first: Duration::from_millis(200),
        max: Duration::from_secs(10),
        retries: None,
        jitter: true,
        total: None,
    };
    /// State the node must write (the ledger after the collector answered,
    /// the journal, the books, the cursor) while the disk refuses: forever,
    /// from 250 ms up to 30 s; an answered submission is never lost to a
    /// full disk, nor sent again.
    pub const STATE: Self = Self {
        first: Duration::from_millis(250),
        max: Duration::from_secs(30),
        retries: None,
        jitter: true,
        total: None,
    };
    /// Redis while it cannot be reached, restarts or refuses (a validator's
    /// workers and their connections): forever, from 100 ms up to 5 s.
    pub const REDIS: Self = Self {
        first: Duration::from_millis(100),
        max: Duration::from_secs(5),
        retries: None,
        jitter: false,
        total: None,
    };
    /// An alert while its channel is down: forever, from 250 ms up to 60 s
    /// (a rate limit's own `retry_after` takes precedence).
    pub const ALERT: Self = Self {
        first: Duration::from_millis(250),
        max: Duration::from_secs(60),
        retries: None,
        jitter: false,
        total: None,
    };

    /// This policy, giving up once its waits add up to `total` (a caller
    /// with a deadline: the cluster's board within the coordinator's patience).
    pub const fn within(self, total: Duration) -> Self {
        Self { total: Some(total), ..self }
    }

    /// The backoff builder for `backon`.
    pub fn builder(&self) -> ExponentialBuilder {
        let b = ExponentialBuilder::default()
            .with_min_delay(self.first)
            .with_max_delay(self.max)
            .with_factor(2.0)
            .with_total_delay(self.total);
        let b = if self.jitter { b.with_jitter() } else { b };
        match self.retries {
            Some(n) => b.with_max_times(n),
            None => b.without_max_times(),
        }
    }

    /// The waits one after another (`None` once the attempts are used up):
    /// for loops that poll rather than call.
    pub fn delays(&self) -> Delays {
        self.builder().build()
    }
}

/// Runs `op` until it succeeds, `retryable` says an error is final, or the
/// policy's attempts are used up; logs as the module docs say. `what` names
/// the operation in the log (e.g. "submitting to http://127.0.0.1:50051").
pub async fn retry<T, E, Fut>(
    policy: Policy,
    what: impl Display,
    op: impl FnMut() -> Fut,
    retryable: impl FnMut(&E) -> bool,
) -> Result<T, E>
where
    E: Display,
    Fut: Future<Output = Result<T, E>>,
{
    let mut failures = 0u32;
    let result = op
        .retry(policy.builder())
        .sleep(tokio::time::sleep)
        .when(retryable)
        .notify(|e: &E, wait: Duration| {
            failures += 1;
            if failures == 1 {
                tracing::warn!("{what} failed ({e}); retrying in {:.1}s", wait.as_secs_f64());
            } else {
                tracing::debug!("{what} still failing ({e}); next try in {:.1}s", wait.as_secs_f64());
            }
        })
        .await;
    if result.is_ok() && failures > 0 {
        tracing::info!("{what} succeeded after {} failed attempt(s)", failures);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_max_and_attempts_run_out() {
        let p = Policy {
            first: Duration::from_millis(100),
            max: Duration::from_millis(500),
            retries: Some(4),
            jitter: false,
            total: None,
        };
        let waits: Vec<_> = p.delays().map(|d| d.as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 500]);
        let forever = Policy { retries: None, ..p };
        assert_eq!(forever.delays().take(100).count(), 100);
        let within = forever.within(Duration::from_millis(1000));
        let waits: Vec<_> = within.delays().map(|d| d.as_millis()).collect();
        assert_eq!(waits, [100, 200, 400], "the next wait would pass the total");
    }

    #[test]
    fn jitter_stays_within_twice_the_wait() {
        for d in Policy::CHAIN.delays().take(20) {
            assert!(d >= Duration::from_millis(250) && d <= Duration::from_secs(60), "{d:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_stops_at_success_final_errors_and_the_last_attempt() {
        let mut calls = 0;
        let ok: Result<u32, String> = retry(
            Policy::PRELOAD,
            "test",
            || {
                calls += 1;
                let n = calls;
                async move { if n < 3 { Err(format!("attempt {n}")) } else { Ok(n) } }
            },
            |_| true,
        )
        .await;
        assert_eq!(ok, Ok(3));

        let mut calls = 0;
        let fatal: Result<(), String> = retry(
            Policy::CHAIN,
            "test",
            || {
                calls += 1;
                async { Err("permanent".to_owned()) }
            },
            |e| e != "permanent",
        )
        .await;
        assert_eq!((fatal, calls), (Err("permanent".into()), 1));

        let mut calls = 0;
        let exhausted: Result<(), String> = retry(
            Policy::IPFS,
            "test",
            || {
                calls += 1;
                async { Err("down".to_owned()) }
            },
            |_| true,
        )
        .await;
        assert_eq!((exhausted, calls), (Err("down".into()), 3), "three attempts in all");
    }
}
