//! The safety net (docs/protocol.md §9): every `check_every`, if the node has not
//! processed an epoch (no selection report, no handled epoch) for longer than
//! `stuck_after`, it is stuck: an `UNHEALTHY_EPOCH_PROCESSING` alert goes out,
//! and after `exit_after` stuck checks in a row the node exits with
//! [`crate::ExitStatus::Stuck`] so its container is restarted.
//!
//! Time is tokio's, so tests run it with paused time.

use std::{sync::Mutex, time::Duration};

use lite_node_config::SafetySettings;
use tokio::time::Instant;

/// When the node last showed it is processing epochs.
#[derive(Debug)]
pub struct Activity {
    started: Instant,
    last: Mutex<Option<Instant>>,
}

impl Default for Activity {
    fn default() -> Self {
        Self { started: Instant::now(), last: Mutex::new(None) }
    }
}

impl Activity {
    /// An epoch was handled or a compute reported its selection.
    pub fn touch(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// How long since the last sign of processing (since start-up if none yet).
    pub fn idle(&self) -> Duration {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).unwrap_or(self.started);
        last.elapsed()
    }

    /// Whether anything was processed yet.
    pub fn ever(&self) -> bool {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }
}

/// One stuck check's finding, for the alert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stuck {
    pub idle: Duration,
    /// Stuck checks in a row, this one included.
    pub checks: u32,
}

/// Runs the checks; calls `on_stuck` for every stuck check and returns after
/// `exit_after` of them in a row.
pub async fn watch(settings: SafetySettings, activity: &Activity, mut on_stuck: impl FnMut(Stuck)) -> Stuck {
    let mut ticks = tokio::time::interval_at(Instant::now() + settings.check_every, settings.check_every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut in_a_row = 0;
    loop {
        ticks.tick().await;
        let idle = activity.idle();
        if idle > settings.stuck_after {
            in_a_row += 1;
            let stuck = Stuck { idle, checks: in_a_row };
            tracing::warn!(
                "no epoch processed for {}s (stuck check {in_a_row} of {})",
                idle.as_secs(),
                settings.exit_after
            );
            on_stuck(stuck);
            if in_a_row >= settings.exit_after {
                return stuck;
            }
        } else {
            in_a_row = 0;
        }
    }
}

/// The safety net found the node stuck: it exits so its container restarts it.
#[derive(Debug, thiserror::Error)]
#[error(
    "no epoch processed for {}s ({checks} stuck checks in a row): exiting for a restart",
    idle.as_secs()
)]
pub struct NodeStuck {
    pub idle: Duration,
    pub checks: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SafetySettings {
        SafetySettings::default()
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_that_stops_processing_is_reported_at_each_check_and_exits_after_three() {
        let activity = Activity::default();
        activity.touch();
        let started = Instant::now();
        let mut seen = Vec::new();
        let stuck = watch(settings(), &activity, |s| seen.push((s, started.elapsed()))).await;
        assert_eq!(stuck.checks, 3);
        // Checks at 2, 4, …; idle from 0: stuck at 12, 14, 16 minutes.
        let minutes: Vec<u64> = seen.iter().map(|(_, at)| at.as_secs() / 60).collect();
        assert_eq!(minutes, [12, 14, 16]);
        assert_eq!(seen.iter().map(|(s, _)| s.checks).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(seen[0].0.idle > Duration::from_secs(600));
    }

    #[tokio::test(start_paused = true)]
    async fn processing_between_checks_resets_the_count() {
        let activity = std::sync::Arc::new(Activity::default());
        let toucher = activity.clone();
        // Processing resumes once, at 15 minutes, then stops for good.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(15 * 60)).await;
            toucher.touch();
        });
        let started = Instant::now();
        let mut at = Vec::new();
        let stuck = watch(settings(), &activity, |s| at.push((started.elapsed().as_secs() / 60, s.checks))).await;
        assert_eq!(stuck.checks, 3);
        // Stuck at 12 and 14; 16 is fine (touched at 15); stuck again at 26, 28, 30.
        assert_eq!(at, [(12, 1), (14, 2), (26, 1), (28, 2), (30, 3)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_node_is_never_stuck() {
        let activity = std::sync::Arc::new(Activity::default());
        let toucher = activity.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(60)).await;
                toucher.touch();
            }
        });
        let outcome =
            tokio::time::timeout(Duration::from_secs(6 * 3600), watch(settings(), &activity, |s| panic!("{s:?}")))
                .await;
        assert!(outcome.is_err(), "six hours of steady processing without a stuck check");
    }
}
