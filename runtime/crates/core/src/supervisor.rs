//! The supervisor: every long-lived task of a process (the status server,
//! the alert channels' delivery, background work) is spawned through it, by
//! name, so none is spawned and forgotten.
//!
//! A task ends in one of three ways the supervisor makes visible: a
//! *critical* task that returns or panics stops the process with that task's
//! name and error ([`Supervisor::failed`] resolves); a *restarting* task that
//! panics or returns an error is logged and started again after a pause; any
//! task still running when the supervisor is dropped is aborted.

use std::{future::Future, time::Duration};

use tokio::{sync::mpsc, task::JoinHandle};

/// Why a critical task ended.
#[derive(Debug, thiserror::Error)]
#[error("task `{name}` {how}")]
pub struct TaskFailed {
    pub name: &'static str,
    pub how: String,
}

/// Spawns and watches named tasks on the current tokio runtime.
#[derive(Debug)]
pub struct Supervisor {
    handles: Vec<(&'static str, JoinHandle<()>)>,
    failures: mpsc::UnboundedSender<TaskFailed>,
    failed: mpsc::UnboundedReceiver<TaskFailed>,
}

impl Default for Supervisor {
    fn default() -> Self {
        let (failures, failed) = mpsc::unbounded_channel();
        Self { handles: Vec::new(), failures, failed }
    }
}

/// Aborts a task when dropped: a watcher that is aborted takes its task with it.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `task` on its own tokio task and says how it ended (`None`: it
/// returned `Ok`); aborting the caller aborts the task.
async fn run<F>(task: F) -> Option<String>
where
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let inner = tokio::spawn(task);
    let _guard = AbortOnDrop(inner.abort_handle());
    describe(inner.await)
}

/// The wait before a restarting task is started again.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

fn describe(outcome: Result<anyhow::Result<()>, tokio::task::JoinError>) -> Option<String> {
    match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("failed: {e:#}")),
        Err(e) if e.is_panic() => {
            let payload = e.into_panic();
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic".into());
            Some(format!("panicked: {msg}"))
        }
        Err(_) => Some("was cancelled".into()),
    }
}

impl Supervisor {
    pub fn new() -> Self {
        Self::default()
    }

    /// A task the process cannot run without: when it ends — an error, a
    /// panic, or even a normal return — [`Supervisor::failed`] reports it.
    pub fn spawn_critical<F>(&mut self, name: &'static str, task: F)
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let failures = self.failures.clone();
        let watcher = tokio::spawn(async move {
            let how = run(task).await.unwrap_or_else(|| "stopped".into());
            tracing::error!("task `{name}` {how}");
            let _ = failures.send(TaskFailed { name, how });
        });
        self.handles.push((name, watcher));
    }

    /// A task that is started again (after a pause, logged) whenever it
    /// panics or fails; one that returns `Ok` is done. `start` makes a fresh
    /// run of it each time.
    pub fn spawn_restarting<F, Fut>(&mut self, name: &'static str, start: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let watcher = tokio::spawn(async move {
            loop {
                match run(start()).await {
                    None => return,
                    Some(how) => {
                        tracing::error!("task `{name}` {how}; restarting it in {}s", RESTART_PAUSE.as_secs());
                        tokio::time::sleep(RESTART_PAUSE).await;
                    }
                }
            }
        });
        self.handles.push((name, watcher));
    }

    /// Resolves when a critical task has ended (never, while none has).
    pub async fn failed(&mut self) -> TaskFailed {
        match self.failed.recv().await {
            Some(failure) => failure,
            // Unreachable while `self` holds a sender; wait forever rather than invent a failure.
            None => std::future::pending().await,
        }
    }

    /// The names of the tasks started so far.
    pub fn names(&self) -> Vec<&'static str> {
        self.handles.iter().map(|(n, _)| *n).collect()
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        for (_, handle) in &self.handles {
            handle.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    };

    use super::*;

    #[tokio::test]
    async fn a_critical_task_that_fails_or_panics_is_reported_by_name() {
        let mut s = Supervisor::new();
        s.spawn_critical("quiet", std::future::pending());
        s.spawn_critical("status server", async { anyhow::bail!("address in use") });
        let failure = s.failed().await;
        assert_eq!(failure.name, "status server");
        assert!(failure.to_string().contains("failed: address in use"), "{failure}");

        s.spawn_critical("alerts", async { panic!("boom") });
        let failure = s.failed().await;
        assert_eq!((failure.name, failure.how.as_str()), ("alerts", "panicked: boom"));
        assert_eq!(s.names(), ["quiet", "status server", "alerts"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_restarting_task_runs_again_after_a_panic_until_it_returns() {
        let runs = Arc::new(AtomicU32::new(0));
        let mut s = Supervisor::new();
        let counter = runs.clone();
        s.spawn_restarting("delivery", move || {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                match n {
                    1 => panic!("first run panics"),
                    2 => anyhow::bail!("second run fails"),
                    _ => Ok(()),
                }
            }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while runs.load(Ordering::SeqCst) < 3 {
            assert!(tokio::time::Instant::now() < deadline, "restarted twice within a minute");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3, "a run that returns Ok is not restarted");
    }

    #[tokio::test]
    async fn dropping_the_supervisor_aborts_its_tasks() {
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let mut s = Supervisor::new();
        s.spawn_critical("holder", async move {
            let _keep = tx;
            std::future::pending::<()>().await;
            Ok(())
        });
        drop(s);
        assert!(rx.recv().await.is_none(), "the task (and its sender) is gone");
    }
}
