//! Dispatch: one epoch goes to every project's processor on a blocking
//! worker, with a per-compute timeout and a bound on concurrent computes.
//!
//! A compute that times out keeps its worker thread (a thread cannot be
//! stopped) but gives back its permit, so a hung compute never holds up other
//! projects or later epochs; it is counted as *hung* until it really returns.
//! The count is watched ([`Dispatcher::hung`]): `/health` reports hung
//! computes, and the node exits for a restart when too many pile up.
//! [`Dispatcher::drain`] waits for the running (not hung) computes.

use std::{
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use abi_stable::std_types::RString;
use lite_node_plugin_api::{BlockDetail, EpochContext, Host, ProcessorBox};
use lite_node_protocol::project_id;
use std::sync::atomic::Ordering::SeqCst;

use tokio::sync::Semaphore;

use crate::{
    compute::{
        host::{RpcEndpoint, RuntimeHost, SelectionTracker},
        memo::Memo,
    },
    config::Project,
    retry::{Policy, retry},
    snapshots::{SnapshotStore, Stored},
    submission::Submission,
};

/// A project and its processor instance.
pub struct ProjectProcessor {
    pub project: Project,
    pub processor: Arc<ProcessorBox>,
}

impl std::fmt::Debug for ProjectProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectProcessor").field("project", &self.project.project_type).finish_non_exhaustive()
    }
}

/// How one project's compute for one epoch ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutcomeKind {
    /// Snapshots to submit.
    Computed,
    /// The slot does not work this epoch (or the compute had nothing to do).
    NotSelected,
    /// An error, a panic, a timeout, or nothing returned although selected.
    Failed(String),
    /// Released longer ago than the submission window: not computed.
    Missed(String),
}

/// One project's result for one epoch.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub project_type: String,
    pub kind: OutcomeKind,
    /// What this compute reported to the SlotSelectionTracker for this epoch.
    pub selected: Option<bool>,
    /// `(data_source, snapshot JSON)` pairs.
    pub snapshots: Vec<(String, String)>,
    /// The snapshots' canonical bytes as stored, with their project ids and
    /// CIDs (when the dispatcher keeps a history).
    pub stored: Vec<Stored>,
    /// Each snapshot's submission, in order.
    pub submissions: Vec<Submission>,
    /// When the compute was called and when it returned (Unix ms).
    pub started_at_ms: u64,
    pub finished_at_ms: u64,
}

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const HUNG: u8 = 2;

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A compute that failed while a chain was out of reach (worth another try).
struct Unreachable(Outcome);

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0.kind {
            OutcomeKind::Failed(reason) => write!(f, "{reason}; a chain could not be reached"),
            _ => f.write_str("a chain could not be reached"),
        }
    }
}

/// A chain a compute may reach (`None`: not configured).
pub type Chain = Option<Arc<dyn RpcEndpoint>>;

/// What one slot's computes reach: the chains and the slot's
/// SlotSelectionTracker.
#[derive(Clone, Debug)]
pub struct Reach {
    pub source: Option<Arc<dyn RpcEndpoint>>,
    pub anchor: Option<Arc<dyn RpcEndpoint>>,
    pub tracker: Arc<SelectionTracker>,
    /// Log lines name the slot (a node with several).
    pub named: bool,
}

/// Runs processors for epochs.
#[derive(Debug)]
pub struct Dispatcher {
    pub projects: Vec<ProjectProcessor>,
    permits: Arc<Semaphore>,
    max_concurrent: usize,
    /// Computes past their timeout that have not returned yet.
    hung: Arc<tokio::sync::watch::Sender<usize>>,
    timeout: Duration,
    source: Option<Arc<dyn RpcEndpoint>>,
    anchor: Option<Arc<dyn RpcEndpoint>>,
    pub tracker: Arc<SelectionTracker>,
    history: Option<(Arc<SnapshotStore>, String)>,
    drill: Option<Drill>,
}

/// An alert drill (`LITE_NODE_DRILL`): when the slot is selected, the real
/// compute runs and then its result is replaced, so an operator can see the
/// whole failure and alert path without breaking anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drill {
    /// The compute's result becomes an error.
    ComputeError,
    /// The compute's snapshots are dropped (the empty-return failure).
    EmptyReturn,
}

impl Drill {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ComputeError => "compute-error",
            Self::EmptyReturn => "empty-return",
        }
    }
}

impl std::str::FromStr for Drill {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "compute-error" => Ok(Self::ComputeError),
            "empty-return" => Ok(Self::EmptyReturn),
            other => Err(format!("unknown drill `{other}` (compute-error or empty-return)")),
        }
    }
}

impl std::fmt::Debug for dyn RpcEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RpcEndpoint")
    }
}

impl Dispatcher {
    pub fn new(
        projects: Vec<ProjectProcessor>,
        max_concurrent: usize,
        timeout: Duration,
        source: Option<Arc<dyn RpcEndpoint>>,
        anchor: Option<Arc<dyn RpcEndpoint>>,
        tracker: Arc<SelectionTracker>,
    ) -> Self {
        Self {
            projects,
            permits: Arc::new(Semaphore::new(max_concurrent)),
            max_concurrent,
            hung: Arc::new(tokio::sync::watch::Sender::new(0)),
            timeout,
            source,
            anchor,
            tracker,
            history: None,
            drill: None,
        }
    }

    /// Applies an alert drill to every selected compute.
    pub fn with_drill(mut self, drill: Option<Drill>) -> Self {
        self.drill = drill;
        self
    }

    /// Stores every computed snapshot (canonical bytes, CID) and lets
    /// computes see their recent ones; `namespace` completes project ids.
    pub fn with_history(mut self, store: Arc<SnapshotStore>, namespace: String) -> Self {
        self.history = Some((store, namespace));
        self
    }

    /// Whether any project asked for block details to be preloaded.
    pub fn needs_block_details(&self) -> bool {
        self.projects.iter().any(|p| p.project.preload_tasks.iter().any(|t| t == "block_details"))
    }

    /// Runs every project for one epoch; returns their outcomes in project order.
    pub async fn dispatch(&self, ctx: &EpochContext, blocks: &[BlockDetail]) -> Vec<Outcome> {
        let runs = self.projects.iter().map(|p| self.run_one(p, ctx, blocks));
        futures_util::future::join_all(runs).await
    }

    /// Runs one project for one epoch. A compute that fails while a chain
    /// could not be reached (a call timed out, a connection was refused) is
    /// run again a few times, a second apart and then more: an RPC outage of
    /// some seconds costs a late submission, not a failed epoch. A processor's
    /// own error, a revert, a panic or a timeout is final at once.
    pub async fn run_one(&self, p: &ProjectProcessor, ctx: &EpochContext, blocks: &[BlockDetail]) -> Outcome {
        let reach = Reach {
            source: self.source.clone(),
            anchor: self.anchor.clone(),
            tracker: self.tracker.clone(),
            named: false,
        };
        self.run_for(p, ctx, blocks, &reach).await
    }

    /// The chains for one epoch's computes: with `shared` (the epoch), through
    /// one [`Memo`] each, so the computes of many slots ask each pinned read once.
    pub fn epoch_chains(&self, shared: Option<u64>) -> (Chain, Chain) {
        let wrap = |e: &Chain, chain: &str| {
            e.clone().map(|e| match shared {
                Some(epoch_id) => Arc::new(Memo::new(e, format!("epoch {epoch_id} {chain}"))) as Arc<dyn RpcEndpoint>,
                None => e,
            })
        };
        (wrap(&self.source, "source"), wrap(&self.anchor, "anchor"))
    }

    /// [`Dispatcher::run_one`] for one slot of several (`ctx.slot_id`), with
    /// that slot's tracker and the epoch's shared chains.
    pub async fn run_for(
        &self,
        p: &ProjectProcessor,
        ctx: &EpochContext,
        blocks: &[BlockDetail],
        reach: &Reach,
    ) -> Outcome {
        let what = if reach.named {
            format!("epoch {} {} slot {}: the compute", ctx.epoch_id, p.project.project_type, ctx.slot_id)
        } else {
            format!("epoch {} {}: the compute", ctx.epoch_id, p.project.project_type)
        };
        let attempt = || async {
            let (outcome, unreachable) = self.run_once(p, ctx, blocks, reach).await;
            if unreachable { Err(Unreachable(outcome)) } else { Ok(outcome) }
        };
        retry(Policy::RECOMPUTE, what, attempt, |_| true).await.unwrap_or_else(|Unreachable(outcome)| outcome)
    }

    /// One compute call, and whether it failed with a chain out of reach.
    async fn run_once(
        &self,
        p: &ProjectProcessor,
        ctx: &EpochContext,
        blocks: &[BlockDetail],
        reach: &Reach,
    ) -> (Outcome, bool) {
        let project_type = p.project.project_type.clone();
        let mut ctx = ctx.clone();
        ctx.project_type = project_type.as_str().into();
        let blocks =
            if p.project.preload_tasks.iter().any(|t| t == "block_details") { blocks.to_vec() } else { vec![] };
        let mut host =
            RuntimeHost::new(&project_type, reach.source.clone(), reach.anchor.clone(), reach.tracker.clone(), blocks);
        host.history = self.history.clone();
        host.epoch_id = ctx.epoch_id;
        // Shared, so what the compute reported is known even if it times out.
        let host = Arc::new(host);
        let reported_by = host.clone();
        let processor = p.processor.clone();
        let permit = self.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
        let started_at_ms = now_ms();
        let epoch_id = ctx.epoch_id;
        // RUNNING until one side settles it: the worker (DONE) or the timeout (HUNG).
        let state = Arc::new(std::sync::atomic::AtomicU8::new(RUNNING));
        let (worker_state, hung) = (state.clone(), self.hung.clone());
        let worker = tokio::task::spawn_blocking(move || {
            let result = processor.compute(&ctx, Host::to_ref(&*host)).into_result();
            if worker_state.compare_exchange(RUNNING, DONE, SeqCst, SeqCst).is_err() {
                hung.send_modify(|n| *n = n.saturating_sub(1));
            }
            (result, host.reported())
        });
        let mut answer = tokio::time::timeout(self.timeout, worker).await;
        if answer.is_err() && state.compare_exchange(RUNNING, HUNG, SeqCst, SeqCst).is_ok() {
            self.hung.send_modify(|n| *n += 1);
            tracing::warn!(
                "epoch {epoch_id} {project_type}: the compute did not return within {}s; its thread is left \
                 running (hung) and other computes go on",
                self.timeout.as_secs_f64()
            );
        }
        drop(permit);
        let selected = reported_by.reported().filter(|(e, _)| *e == epoch_id).map(|(_, s)| s);
        if let Ok(Ok((result, _))) = &mut answer {
            match (self.drill, selected) {
                (Some(Drill::ComputeError), Some(true)) => {
                    *result =
                        Err(RString::from("drill (LITE_NODE_DRILL=compute-error): the compute's result was discarded"))
                }
                (Some(Drill::EmptyReturn), Some(true)) => {
                    if let Ok(snapshots) = result {
                        snapshots.clear();
                    }
                }
                _ => {}
            }
        }
        let unreachable = matches!(answer, Ok(Ok((Err(_), _)))) && reported_by.unreachable_calls() > 0;
        let (kind, snapshots) = match answer {
            Err(_) => (OutcomeKind::Failed(format!("timed out after {}s", self.timeout.as_secs_f64())), vec![]),
            Ok(Err(join)) => (OutcomeKind::Failed(format!("compute worker failed: {join}")), vec![]),
            Ok(Ok((Err(e), _))) => (OutcomeKind::Failed(e.into_string()), vec![]),
            Ok(Ok((Ok(snapshots), reported))) if snapshots.is_empty() => match reported {
                // docs/protocol.md §9: nothing returned after selection is a failure.
                Some((e, true)) if e == epoch_id => {
                    (OutcomeKind::Failed(format!("selected for epoch {epoch_id} but returned no snapshots")), vec![])
                }
                _ => (OutcomeKind::NotSelected, vec![]),
            },
            Ok(Ok((Ok(snapshots), _))) => (
                OutcomeKind::Computed,
                snapshots.into_iter().map(|s| (s.data_source.into_string(), s.json.into_string())).collect(),
            ),
        };
        let finished_at_ms = now_ms();
        let mut outcome = Outcome {
            project_type,
            kind,
            selected,
            snapshots,
            stored: vec![],
            submissions: vec![],
            started_at_ms,
            finished_at_ms,
        };
        if let (OutcomeKind::Computed, Some((store, namespace))) = (&outcome.kind, &self.history) {
            for (data_source, json) in &outcome.snapshots {
                let id = project_id(&outcome.project_type, data_source, namespace);
                match store.record(epoch_id, &id, json) {
                    Ok(stored) => outcome.stored.push(stored),
                    Err(e) => {
                        outcome.kind = OutcomeKind::Failed(format!("snapshot for `{data_source}`: {e}"));
                        outcome.stored.clear();
                        break;
                    }
                }
            }
        }
        (outcome, unreachable)
    }

    /// Computes past their timeout that have not returned, as a watch.
    pub fn hung(&self) -> tokio::sync::watch::Receiver<usize> {
        self.hung.subscribe()
    }

    /// Waits until no compute is running (hung ones aside), at most `grace`.
    pub async fn drain(&self, grace: Duration) -> bool {
        let all = self.max_concurrent as u32;
        matches!(tokio::time::timeout(grace, self.permits.acquire_many(all)).await, Ok(Ok(_)))
    }
}
