//! One interface for running computes, [`Executor`]: an epoch's [`Task`]s
//! go in, each [`ComputeResult`] comes out as soon as its compute ends. Both
//! are plain serializable data, so an executor may run computes here or on
//! another machine; what happens to a result next (stored, signed,
//! submitted, counted) is the caller's, in stages that take it.
//!
//! [`LocalExecutor`] runs them here: each on a blocking worker, with a
//! per-compute timeout, taking its turn in the work queue
//! ([`crate::queue`], ordered by [`crate::queue::rank`], with a bound on
//! workers and on what waits; see [`crate::dispatch`]). A compute
//! that times out keeps its thread (a thread cannot be stopped) but gives
//! back its worker, so a hung compute never holds up other projects or later
//! epochs; it is counted as *hung* until it really returns
//! ([`LocalExecutor::hung`]), and its project is quarantined
//! ([`LocalExecutor::quarantine`]): not called for 1, 2, 4, … epochs, while
//! every other project goes on. `/health` reports both, and the node exits
//! for a restart only when the threads hung computes hold reach a real
//! limit. [`LocalExecutor::drain`] waits for the running (not hung) computes.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, atomic::Ordering::SeqCst},
    time::Duration,
};

use abi_stable::std_types::RString;
use futures_util::{StreamExt, stream::BoxStream};
use lite_node_chain::RpcEndpoint;
use lite_node_config::{Drill, Project};
use lite_node_core::{
    retry::{Policy, retry},
    time::now_ms,
};
use lite_node_plugin_api::{BlockDetail, EpochContext, Host, ProcessorBox};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{
    dispatch::{ComputeWatch, Gate, Quarantine, Quarantined, QueueView, Refused},
    host::{RuntimeHost, SelectionTracker},
    memo::Memo,
    queue::Key,
};

/// Tasks that may wait for a worker at once, by default (a node of 1,000
/// slots with a dozen projects each fits).
pub const QUEUE_CAPACITY: usize = 16_384;

/// One compute to run: a project of one slot for one epoch, with everything
/// the processor's [`EpochContext`] is made of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub epoch_id: u64,
    pub begin: u64,
    pub end: u64,
    pub day_id: u64,
    pub slot_id: u64,
    pub total_slots: u64,
    /// The anchor block that released the epoch (what anchor reads are
    /// pinned to, `previousSnapshots` among them).
    pub anchor_block: u64,
    pub namespace: String,
    pub project_type: String,
    /// The anchor block after which its result is of no use (the end of the
    /// submission window); a task still waiting for a worker then is dropped.
    #[serde(default = "no_deadline")]
    pub deadline: u64,
    /// A share of the project's data sources to compute (some of what
    /// [`LocalExecutor::data_sources`] gave); `None`: the project whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<Vec<String>>,
}

fn no_deadline() -> u64 {
    u64::MAX
}

impl Task {
    /// What the work queue deduplicates it by: its epoch, slot and project,
    /// and for a share, a digest of its data sources.
    pub fn key(&self) -> Key {
        let source = self.sources.as_ref().map(|s| {
            let mut h = Sha256::new();
            for source in s {
                h.update(source.to_ascii_lowercase().as_bytes());
                h.update([0]);
            }
            format!("{} sources {}", s.len(), hex::encode(&h.finalize()[..8]))
        });
        Key { epoch_id: self.epoch_id, slot_id: self.slot_id, project: self.project_type.clone(), source }
    }

    /// What the processor is called with.
    pub fn context(&self) -> EpochContext {
        EpochContext {
            epoch_id: self.epoch_id,
            begin: self.begin,
            end: self.end,
            day_id: self.day_id,
            slot_id: self.slot_id,
            total_slots: self.total_slots,
            anchor_block: self.anchor_block,
            namespace: self.namespace.as_str().into(),
            project_type: self.project_type.as_str().into(),
        }
    }
}

/// How one project's compute for one epoch ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutcomeKind {
    /// Snapshots to submit.
    Computed,
    /// The slot does not work this epoch (or the compute had nothing to do).
    NotSelected,
    /// An error, a panic, a timeout, or nothing returned although selected.
    Failed(String),
    /// Released longer ago than the submission window: not computed.
    Missed(String),
    /// Not run: the node withheld it, its project being quarantined after
    /// a compute of it hung (for whichever slot). Whether the slot was
    /// selected is unknown; the node failed to do its work, so the epoch
    /// extends the slot's failure streak.
    Withheld(String),
}

/// What one compute gave: its task's slot and project, how it ended, what it
/// reported to the SlotSelectionTracker, and its snapshots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputeResult {
    pub slot_id: u64,
    pub project_type: String,
    pub kind: OutcomeKind,
    /// What this compute reported to the SlotSelectionTracker for this epoch.
    pub selected: Option<bool>,
    /// `(data_source, snapshot JSON)` pairs.
    pub snapshots: Vec<(String, String)>,
    /// When the compute was called and when it returned (Unix ms).
    pub started_at_ms: u64,
    pub finished_at_ms: u64,
    /// A full node's data sources that no worker computed in time: its
    /// snapshots are submitted, but the epoch is not a success.
    pub left_out: Vec<String>,
}

impl ComputeResult {
    /// A task that ended without its compute running (the same `kind` for
    /// every task of an epoch that cannot be computed).
    pub fn without_compute(task: &Task, kind: OutcomeKind) -> Self {
        let at = now_ms();
        Self {
            slot_id: task.slot_id,
            project_type: task.project_type.clone(),
            kind,
            selected: None,
            snapshots: vec![],
            started_at_ms: at,
            finished_at_ms: at,
            left_out: Vec::new(),
        }
    }
}

/// Runs computes. An implementation decides where and in which order; every
/// task gets exactly one result, yielded as soon as it is known, so a caller
/// can submit a fast project's snapshots while a slow one still runs.
pub trait Executor: Send + Sync {
    /// Whether any of the projects asks for the epoch's block details.
    fn needs_block_details(&self) -> bool;

    /// Runs one epoch's tasks (`blocks`: its block details, when preloaded).
    fn execute<'a>(&'a self, tasks: Vec<Task>, blocks: Arc<[BlockDetail]>) -> BoxStream<'a, ComputeResult>;
}

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

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const HUNG: u8 = 2;

/// A compute that failed while a chain was out of reach (worth another try).
struct Unreachable(ComputeResult);

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0.kind {
            OutcomeKind::Failed(reason) => write!(f, "{reason}; a chain could not be reached"),
            _ => f.write_str("a chain could not be reached"),
        }
    }
}

/// An endpoint a compute may reach (`None`: not configured).
type Endpoint = Option<Arc<dyn RpcEndpoint>>;

/// What one epoch's computes of one slot reach: the chains and the slot's
/// SlotSelectionTracker.
#[derive(Clone, Debug)]
struct Reach {
    source: Endpoint,
    anchor: Endpoint,
    tracker: Arc<SelectionTracker>,
    /// Log lines name the slot (an executor for several).
    named: bool,
}

/// Runs computes in this process.
#[derive(Debug)]
pub struct LocalExecutor {
    projects: Vec<ProjectProcessor>,
    gate: Arc<Gate>,
    quarantine: Quarantine,
    /// Each project's last compute time (ms), its expected cost.
    costs: Mutex<HashMap<String, u64>>,
    /// Computes past their timeout that have not returned yet.
    hung: Arc<tokio::sync::watch::Sender<usize>>,
    timeout: Duration,
    source: Endpoint,
    anchor: Endpoint,
    /// Each slot's SlotSelectionTracker; a slot not listed reports to `tracker`.
    trackers: BTreeMap<u64, Arc<SelectionTracker>>,
    tracker: Arc<SelectionTracker>,
    /// Where computes read what the chain finalized (`previousSnapshots`).
    finalized: Option<Arc<crate::host::FinalizedReads>>,
    drill: Option<Drill>,
    /// A chain out of reach ends the compute at once as a failure, with no
    /// pause and no retry ([`LocalExecutor::failing_on_outages`]).
    fail_on_outage: bool,
}

impl LocalExecutor {
    pub fn new(
        projects: Vec<ProjectProcessor>,
        max_concurrent: usize,
        timeout: Duration,
        source: Endpoint,
        anchor: Endpoint,
    ) -> Self {
        Self {
            projects,
            gate: Gate::new(QUEUE_CAPACITY, max_concurrent, 0),
            quarantine: Quarantine::default(),
            costs: Mutex::default(),
            hung: Arc::new(tokio::sync::watch::Sender::new(0)),
            timeout,
            source,
            anchor,
            trackers: BTreeMap::new(),
            tracker: Arc::new(SelectionTracker::default()),
            finalized: None,
            drill: None,
            fail_on_outage: false,
        }
    }

    /// A compute that finds a chain out of reach fails at once: no pause of
    /// the other computes, no retry. For a full node's worker, whose chains
    /// may be out of reach for it alone: the other workers may still reach
    /// them, and its rounds of work are the retries (a share that keeps
    /// failing steps the worker aside). Paused, it would hold its items
    /// while its own RPC stayed down, and its epochs would never finish.
    pub fn failing_on_outages(mut self) -> Self {
        self.fail_on_outage = true;
        self
    }

    /// A work queue of `capacity` waiting tasks, ties broken with `seed`
    /// (the host's; see [`crate::queue`]).
    pub fn with_queue(mut self, capacity: usize, seed: u64) -> Self {
        let workers = self.gate.view().workers;
        self.gate = Gate::new(capacity, workers, seed);
        self
    }

    /// Each slot's computes report their selection to that slot's tracker.
    pub fn with_trackers(mut self, trackers: impl IntoIterator<Item = (u64, Arc<SelectionTracker>)>) -> Self {
        self.trackers = trackers.into_iter().collect();
        self
    }

    /// Applies an alert drill to every selected compute.
    pub fn with_drill(mut self, drill: Option<Drill>) -> Self {
        self.drill = drill;
        self
    }

    /// Lets computes read what the anchor chain finalized for their
    /// projects (`Host::previous_snapshots`).
    pub fn with_finalized(mut self, reads: crate::host::FinalizedReads) -> Self {
        self.finalized = Some(Arc::new(reads));
        self
    }

    /// The projects, in the order tasks are usually made.
    pub fn projects(&self) -> impl Iterator<Item = &Project> {
        self.projects.iter().map(|p| &p.project)
    }

    /// Computes past their timeout that have not returned, as a watch.
    pub fn hung(&self) -> tokio::sync::watch::Receiver<usize> {
        self.hung.subscribe()
    }

    /// The quarantined projects, as a watch.
    pub fn quarantine(&self) -> tokio::sync::watch::Receiver<BTreeMap<String, Quarantined>> {
        self.quarantine.watch()
    }

    /// What the work queue holds and did.
    pub fn queue(&self) -> QueueView {
        self.gate.view()
    }

    /// The queue, quarantine and hung computes, for the status API.
    pub fn watch(&self) -> ComputeWatch {
        ComputeWatch { gate: self.gate.clone(), quarantine: self.quarantine.watch(), hung: self.hung.subscribe() }
    }

    /// The anchor head is `head`: tasks still waiting past their deadline
    /// are dropped (each gets a missed result).
    pub fn observe_head(&self, head: u64) {
        self.gate.expire(head);
    }

    /// Nothing new starts until [`LocalExecutor::resume`]; tasks still
    /// wait, expire and are dropped. (A chain that does not answer pauses
    /// computes by itself: [`LocalExecutor::outage`].)
    pub fn pause(&self) {
        self.gate.pause();
    }

    pub fn resume(&self) {
        self.gate.resume();
    }

    /// Waits until no compute is running (hung ones aside), at most `grace`.
    pub async fn drain(&self, grace: Duration) -> bool {
        tokio::time::timeout(grace, self.gate.idle()).await.is_ok()
    }

    /// The data sources `task`'s project divides into this epoch, in the
    /// processor's fixed order (`None`: it runs whole), asked on a blocking
    /// thread within the compute timeout.
    pub async fn data_sources(&self, task: &Task, blocks: &[BlockDetail]) -> Result<Option<Vec<String>>, String> {
        let Some(p) = self.projects.iter().find(|p| p.project.project_type == task.project_type) else {
            return Err(format!("no processor runs project `{}` here", task.project_type));
        };
        let tracker = self.trackers.get(&task.slot_id).unwrap_or(&self.tracker).clone();
        let reach = Reach { source: self.source.clone(), anchor: self.anchor.clone(), tracker, named: false };
        let host = self.host(p, task, blocks, &reach);
        let (processor, ctx) = (p.processor.clone(), task.context());
        let ask = move || {
            processor
                .data_sources(&ctx, Host::to_ref(&host))
                .into_result()
                .map(|s| s.into_option().map(|s| s.into_iter().map(RString::into_string).collect::<Vec<_>>()))
        };
        let answer = self.within_timeout(&task.project_type, task.epoch_id, "data_sources", ask).await;
        match answer {
            Ok(Ok(Ok(Some(sources)))) => {
                match lite_node_protocol::repeated_data_source(sources.iter().map(String::as_str)) {
                    Some((first, second)) => Err(format!(
                        "data_sources named `{first}` and `{second}`, one project id: each data source is computed \
                     once per epoch, so name it once"
                    )),
                    None => Ok(Some(sources)),
                }
            }
            Ok(Ok(answer)) => answer.map_err(RString::into_string),
            Ok(Err(join)) => Err(format!("data_sources worker failed: {join}")),
            Err(_) => Err(format!("data_sources did not return within {}s", self.timeout.as_secs_f64())),
        }
    }

    /// Runs `call` (`what` of a processor of `project_type`) on a blocking
    /// thread within the compute timeout. A call that does not return in
    /// time is a hung compute: its thread is left running, counted until it
    /// returns (towards LITE_NODE_MAX_HUNG_COMPUTES and on /status), and its
    /// project quarantined.
    async fn within_timeout<T: Send + 'static>(
        &self,
        project_type: &str,
        epoch_id: u64,
        what: &str,
        call: impl FnOnce() -> T + Send + 'static,
    ) -> Result<Result<T, tokio::task::JoinError>, tokio::time::error::Elapsed> {
        // RUNNING until one side settles it: the worker (DONE) or the timeout (HUNG).
        let state = Arc::new(std::sync::atomic::AtomicU8::new(RUNNING));
        let (worker_state, hung) = (state.clone(), self.hung.clone());
        let worker = tokio::task::spawn_blocking(move || {
            let out = call();
            if worker_state.compare_exchange(RUNNING, DONE, SeqCst, SeqCst).is_err() {
                hung.send_modify(|n| *n = n.saturating_sub(1));
            }
            out
        });
        let answer = tokio::time::timeout(self.timeout, worker).await;
        if answer.is_err() && state.compare_exchange(RUNNING, HUNG, SeqCst, SeqCst).is_ok() {
            self.hung.send_modify(|n| *n += 1);
            tracing::warn!(
                "epoch {epoch_id} {project_type}: {what} did not return within {}s; its thread is left running \
                 (hung) and other computes go on",
                self.timeout.as_secs_f64()
            );
            if let Some(q) = self.quarantine.hung(project_type, epoch_id) {
                tracing::warn!("{q}");
                self.gate.quarantine(&q);
            }
        }
        answer
    }

    /// What one call of `p`'s processor for `task` sees of the node (block
    /// details only for a project that preloads them).
    fn host(&self, p: &ProjectProcessor, task: &Task, blocks: &[BlockDetail], reach: &Reach) -> RuntimeHost {
        let blocks =
            if p.project.preload_tasks.iter().any(|t| t == "block_details") { blocks.to_vec() } else { vec![] };
        let mut host = RuntimeHost::new(
            &task.project_type,
            reach.source.clone(),
            reach.anchor.clone(),
            reach.tracker.clone(),
            blocks,
        );
        host.finalized = self.finalized.clone();
        host.epoch_id = task.epoch_id;
        host.anchor_block = task.anchor_block;
        host
    }

    /// The chains for one epoch's computes: with several slots, through one
    /// [`Memo`] each, so the computes of many slots ask each pinned read once.
    fn epoch_chains(&self, shared: Option<u64>) -> (Endpoint, Endpoint) {
        let wrap = |e: &Endpoint, chain: &str| {
            e.clone().map(|e| match shared {
                Some(epoch_id) => Arc::new(Memo::new(e, format!("epoch {epoch_id} {chain}"))) as Arc<dyn RpcEndpoint>,
                None => e,
            })
        };
        (wrap(&self.source, "source"), wrap(&self.anchor, "anchor"))
    }

    /// Runs one task. A compute that fails while a chain could not be
    /// reached (a call timed out, a connection was refused) is run again a
    /// few times, a second apart and then more: an RPC outage of some
    /// seconds costs a late submission, not a failed epoch. A processor's own
    /// error, a revert, a panic or a timeout is final at once.
    async fn run(&self, task: &Task, blocks: &[BlockDetail], reach: &Reach) -> ComputeResult {
        let Some(p) = self.projects.iter().find(|p| p.project.project_type == task.project_type) else {
            let why = format!("no processor runs project `{}` here", task.project_type);
            return ComputeResult::without_compute(task, OutcomeKind::Failed(why));
        };
        if let Some(q) = self.quarantine.holds(&task.project_type, task.epoch_id) {
            return ComputeResult::without_compute(task, refused(Refused::Quarantined(q)));
        }
        let what = if reach.named {
            format!("epoch {} {} slot {}: the compute", task.epoch_id, task.project_type, task.slot_id)
        } else {
            format!("epoch {} {}: the compute", task.epoch_id, task.project_type)
        };
        // What an earlier attempt reported of the selection: a retry refused
        // its turn (its deadline passed while computes were paused) is still
        // the selected slot's failure, counted in its streak.
        let selected = Mutex::new(None);
        let attempt = || async {
            let (mut result, unreachable) = self.run_once(p, task, blocks, reach).await;
            let mut known = selected.lock().unwrap_or_else(|p| p.into_inner());
            match result.selected {
                Some(s) => *known = Some(s),
                None => result.selected = *known,
            }
            drop(known);
            if !unreachable || self.fail_on_outage {
                return Ok(result);
            }
            if let OutcomeKind::Failed(e) = &result.kind {
                self.outage(e);
            }
            Err(Unreachable(result))
        };
        retry(Policy::RECOMPUTE, what, attempt, |_| true).await.unwrap_or_else(|Unreachable(result)| result)
    }

    /// A compute failed because a chain did not answer: every other compute
    /// would fail alike (and a thousand slots' computes would each ask a
    /// dead endpoint, then all at once when it is back). So computes are
    /// paused — what waits keeps its place; what passes its deadline
    /// meanwhile ends as a failure naming the reason, not as a miss — and
    /// each chain is asked for its head (at once, then from 200 ms up to
    /// 10 s apart, plus jitter) until both answer; then computes resume. One
    /// probe at a time; a compute that failed retries in its turn after the
    /// resume.
    fn outage(&self, error: &str) {
        let first_line = error.lines().next().unwrap_or_default();
        let reason = format!("a chain did not answer: {first_line}");
        // Paused already: its probe is asking.
        if !self.gate.pause_for(reason.clone()) {
            return;
        }
        tracing::warn!("computes paused ({reason}); asking the chains for their heads until they answer");
        let (source, anchor, gate) = (self.source.clone(), self.anchor.clone(), self.gate.clone());
        let since = std::time::Instant::now();
        tokio::spawn(async move {
            let ask = || {
                let (source, anchor) = (source.clone(), anchor.clone());
                async move {
                    let heads = tokio::task::spawn_blocking(move || {
                        for (chain, endpoint) in [("source", &source), ("anchor", &anchor)] {
                            if let Some(endpoint) = endpoint {
                                endpoint
                                    .call("eth_blockNumber", "[]")
                                    .map_err(|e| format!("the {chain} chain: {}", e.message))?;
                            }
                        }
                        Ok::<(), String>(())
                    });
                    heads.await.map_err(|e| e.to_string())?
                }
            };
            let what = "asking the chains for their heads while computes are paused";
            let _ = retry(Policy::RECONNECT, what, ask, |_| true).await;
            gate.resume();
            tracing::info!("the chains answer again; computes resumed after {:.1}s", since.elapsed().as_secs_f64());
        });
    }

    /// One compute call, and whether it failed with a chain out of reach.
    async fn run_once(
        &self,
        p: &ProjectProcessor,
        task: &Task,
        blocks: &[BlockDetail],
        reach: &Reach,
    ) -> (ComputeResult, bool) {
        let project_type = task.project_type.clone();
        let ctx = task.context();
        let host = self.host(p, task, blocks, reach);
        // Shared, so what the compute reported is known even if it times out.
        let host = Arc::new(host);
        let reported_by = host.clone();
        let processor = p.processor.clone();
        let key = task.key();
        let cost = self.costs.lock().unwrap_or_else(|p| p.into_inner()).get(&project_type).copied().unwrap_or(0);
        let turn = match self.gate.turn(key, task.deadline, cost).await {
            Ok(turn) => turn,
            Err(why) => return (ComputeResult::without_compute(task, refused(why)), false),
        };
        let started_at_ms = now_ms();
        let epoch_id = ctx.epoch_id;
        let share: Option<Vec<RString>> =
            task.sources.as_ref().map(|s| s.iter().map(|s| RString::from(s.as_str())).collect());
        let call = move || {
            if let Some(share) = &share {
                // A share's previous snapshots in a few batches, not one
                // anchor round trip per data source.
                host.prefetch_finalized(&share.iter().map(RString::as_str).collect::<Vec<_>>());
            }
            let host_ref = Host::to_ref(&*host);
            let result = match &share {
                Some(share) => processor.compute_share(&ctx, host_ref, share.as_slice().into()),
                None => processor.compute(&ctx, host_ref),
            }
            .into_result();
            (result, host.reported())
        };
        let mut answer = self.within_timeout(&project_type, epoch_id, "the compute", call).await;
        drop(turn);
        if answer.is_ok() {
            self.quarantine.returned(&project_type, epoch_id);
            let took = now_ms().saturating_sub(started_at_ms);
            self.costs.lock().unwrap_or_else(|p| p.into_inner()).insert(project_type.clone(), took);
        }
        // A share is a full node's work: selected every epoch, whatever the
        // processor reported.
        let share = task.sources.is_some();
        let selected =
            if share { Some(true) } else { reported_by.reported().filter(|(e, _)| *e == epoch_id).map(|(_, s)| s) };
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
            Err(_) => (
                OutcomeKind::Failed(format!(
                    "timed out after {}s (LITE_NODE_COMPUTE_TIMEOUT_SECS)",
                    self.timeout.as_secs_f64()
                )),
                vec![],
            ),
            Ok(Err(join)) => (OutcomeKind::Failed(format!("compute worker failed: {join}")), vec![]),
            Ok(Ok((Err(e), _))) => (OutcomeKind::Failed(e.into_string()), vec![]),
            Ok(Ok((Ok(snapshots), reported))) if snapshots.is_empty() => match reported {
                // docs/protocol.md §9: nothing returned after selection is a failure.
                _ if share => {
                    (OutcomeKind::Failed(format!("a share of epoch {epoch_id} returned no snapshots")), vec![])
                }
                Some((e, true)) if e == epoch_id => {
                    (OutcomeKind::Failed(format!("selected for epoch {epoch_id} but returned no snapshots")), vec![])
                }
                _ => (OutcomeKind::NotSelected, vec![]),
            },
            Ok(Ok((Ok(snapshots), _))) => {
                let snapshots: Vec<(String, String)> =
                    snapshots.into_iter().map(|s| (s.data_source.into_string(), s.json.into_string())).collect();
                match lite_node_protocol::repeated_data_source(snapshots.iter().map(|(s, _)| s.as_str())) {
                    Some((first, second)) => (
                        OutcomeKind::Failed(lite_node_protocol::repeated_data_source_error(
                            &project_type,
                            first,
                            second,
                        )),
                        vec![],
                    ),
                    None => (OutcomeKind::Computed, snapshots),
                }
            }
        };
        let result = ComputeResult {
            slot_id: task.slot_id,
            project_type,
            kind,
            selected,
            snapshots,
            started_at_ms,
            finished_at_ms: now_ms(),
            left_out: Vec::new(),
        };
        (result, unreachable)
    }
}

/// What a task refused a worker ends as: not computed in time is missed;
/// a duplicate, a quarantined project, or a deadline passed while computes
/// were paused for a chain that did not answer is a failure whose selection
/// is not known (counted as a source outage before the preload is).
fn refused(why: Refused) -> OutcomeKind {
    match why {
        Refused::Full | Refused::Expired { .. } | Refused::Closed => OutcomeKind::Missed(why.to_string()),
        Refused::Quarantined(_) => OutcomeKind::Withheld(why.to_string()),
        Refused::Duplicate | Refused::Paused { .. } => OutcomeKind::Failed(why.to_string()),
    }
}

impl Executor for LocalExecutor {
    fn needs_block_details(&self) -> bool {
        self.projects.iter().any(|p| p.project.preload_tasks.iter().any(|t| t == "block_details"))
    }

    /// Every task at once, each waiting its turn in the queue; with tasks of several
    /// slots, the epoch's pinned chain reads are asked once for all of them.
    fn execute<'a>(&'a self, tasks: Vec<Task>, blocks: Arc<[BlockDetail]>) -> BoxStream<'a, ComputeResult> {
        let mut slots: Vec<u64> = tasks.iter().map(|t| t.slot_id).collect();
        slots.sort_unstable();
        slots.dedup();
        let several = slots.len() > 1;
        let shared = tasks.first().filter(|_| several).map(|t| t.epoch_id);
        let (source, anchor) = self.epoch_chains(shared);
        let runs = futures_util::stream::FuturesUnordered::new();
        for task in tasks {
            let tracker = self.trackers.get(&task.slot_id).unwrap_or(&self.tracker).clone();
            let reach = Reach { source: source.clone(), anchor: anchor.clone(), tracker, named: several };
            let blocks = blocks.clone();
            runs.push(async move { self.run(&task, &blocks, &reach).await });
        }
        runs.boxed()
    }
}
