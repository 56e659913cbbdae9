//! Progress for long work (fetching, building): a live line on a terminal,
//! a log line every few seconds otherwise, so container logs show the node is
//! alive without drowning in updates.

use std::{
    io::IsTerminal,
    time::{Duration, Instant},
};

use indicatif::{ProgressBar, ProgressStyle};

const LOG_EVERY: Duration = Duration::from_secs(10);

/// One long-running step.
#[derive(Debug)]
pub struct Progress {
    label: String,
    bar: Option<ProgressBar>,
    started: Instant,
    last_log: Instant,
}

impl Progress {
    pub fn start(label: impl Into<String>) -> Self {
        let label = label.into();
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix} [{elapsed}] {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_prefix(label.clone());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        if bar.is_none() {
            tracing::info!("{label}: started");
        }
        let now = Instant::now();
        Self { label, bar, started: now, last_log: now }
    }

    /// Shows the current state; `message` is only evaluated when shown.
    pub fn update(&mut self, message: impl FnOnce() -> String) {
        match &self.bar {
            Some(bar) => bar.set_message(message()),
            None if self.last_log.elapsed() >= LOG_EVERY => {
                self.last_log = Instant::now();
                tracing::info!("{}: {} ({}s so far)", self.label, message(), self.started.elapsed().as_secs());
            }
            None => {}
        }
    }

    /// Ends the step with a summary line that always reaches the log.
    pub fn finish(self, summary: &str) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        tracing::info!("{}: {summary} in {:.1}s", self.label, self.started.elapsed().as_secs_f64());
    }

    /// Ends the step without a success line (the caller reports the error).
    pub fn abandon(self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
