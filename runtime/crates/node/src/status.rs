//! The status API (`STATUS_PORT`, axum): `/health` answers 200 only while
//! epochs are being processed — not merely while the process is up —
//! `/status` the node's books (every slot's summed), the last selection and
//! submission and the compute package, with each slot's own under `slots`,
//! `/metrics` the Prometheus text format.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use serde_json::json;

use crate::{
    books::{Books, Counts, Verdict},
    compute::{dispatch::ComputeWatch, host::SelectionTracker},
    safety::Activity,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChainLabel {
    pub chain: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabel {
    pub chain: String,
    pub url: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SlotLabel {
    pub slot: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SlotVerdictLabel {
    pub slot: u64,
    pub verdict: &'static str,
}

/// The node's Prometheus metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub epochs_seen: Counter,
    pub selected_succeeded: Counter,
    pub selected_failed: Counter,
    pub not_selected: Counter,
    pub missed: Counter,
    pub failed_before_selection: Counter,
    /// Epoch seen → collector acknowledgement, seconds.
    pub submission_latency: Histogram,
    pub rpc_errors: Family<ChainLabel, Counter>,
    pub alerts: Counter,
    /// Submissions that ended without the collector's acceptance.
    pub submission_failures: Counter,
    /// Attempts at a submission that failed and were retried.
    pub submission_retries: Counter,
    /// The newest epoch the node saw released.
    pub last_epoch_seen: Gauge,
    /// The anchor chain's head at the last poll.
    pub anchor_head: Gauge,
    /// Anchor blocks between the head and what the node has scanned.
    pub anchor_lag_blocks: Gauge,
    /// Per slot: its epochs by verdict, and its streak of selected failures.
    pub slot_epochs: Family<SlotVerdictLabel, Counter>,
    pub slot_consecutive_failures: Family<SlotLabel, Gauge>,
    /// The compute work queue (set from the executor's view when read).
    pub queue_waiting: Gauge,
    pub queue_running: Gauge,
    pub queue_workers: Gauge,
    pub queue_paused: Gauge,
    pub queue_handed_out: Counter,
    pub queue_wait_ms: Counter,
    pub queue_dropped: Family<ReasonLabel, Counter>,
    pub computes_hung: Gauge,
    pub projects_quarantined: Gauge,
    /// Quarantines started (each project's each back-off).
    pub quarantines: Counter,
    /// Each RPC endpoint's blocks under its chain's freshest, as probed.
    pub rpc_behind: Family<EndpointLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("lite_node");
        let m = Self {
            epochs_seen: Counter::default(),
            selected_succeeded: Counter::default(),
            selected_failed: Counter::default(),
            not_selected: Counter::default(),
            missed: Counter::default(),
            failed_before_selection: Counter::default(),
            submission_latency: Histogram::new([0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]),
            rpc_errors: Family::default(),
            alerts: Counter::default(),
            submission_failures: Counter::default(),
            submission_retries: Counter::default(),
            last_epoch_seen: Gauge::default(),
            anchor_head: Gauge::default(),
            anchor_lag_blocks: Gauge::default(),
            slot_epochs: Family::default(),
            slot_consecutive_failures: Family::default(),
            queue_waiting: Gauge::default(),
            queue_running: Gauge::default(),
            queue_workers: Gauge::default(),
            queue_paused: Gauge::default(),
            queue_handed_out: Counter::default(),
            queue_wait_ms: Counter::default(),
            queue_dropped: Family::default(),
            computes_hung: Gauge::default(),
            projects_quarantined: Gauge::default(),
            quarantines: Counter::default(),
            rpc_behind: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "epochs_seen",
            "Epochs released for our data market that the node handled",
            m.epochs_seen.clone(),
        );
        registry.register(
            "epochs_selected_succeeded",
            "Selected epochs computed and accepted",
            m.selected_succeeded.clone(),
        );
        registry.register("epochs_selected_failed", "Selected epochs that failed", m.selected_failed.clone());
        registry.register("epochs_not_selected", "Epochs in which the slot was not selected", m.not_selected.clone());
        registry.register("epochs_missed", "Epochs older than the submission window when seen", m.missed.clone());
        registry.register(
            "epochs_failed_before_selection",
            "Epochs that failed before the compute reported its selection",
            m.failed_before_selection.clone(),
        );
        registry.register(
            "submission_latency_seconds",
            "From seeing an epoch to the collector's answer",
            m.submission_latency.clone(),
        );
        registry.register("rpc_errors", "Failed JSON-RPC requests, per chain", m.rpc_errors.clone());
        registry.register("alerts_queued", "Alerts handed to a channel's delivery queue", m.alerts.clone());
        registry.register(
            "submission_failures",
            "Submissions rejected, missed or not sent",
            m.submission_failures.clone(),
        );
        registry.register(
            "submission_retries",
            "Submission attempts that failed and were retried",
            m.submission_retries.clone(),
        );
        registry.register("last_epoch_seen", "The newest epoch seen released", m.last_epoch_seen.clone());
        registry.register("anchor_head", "The anchor chain's head at the last poll", m.anchor_head.clone());
        registry.register(
            "anchor_lag_blocks",
            "Anchor blocks between the head and the node's scan position",
            m.anchor_lag_blocks.clone(),
        );
        registry.register(
            "slot_epochs",
            "Epochs per slot and verdict (selected_succeeded, selected_failed, not_selected, missed, \
             failed_before_selection)",
            m.slot_epochs.clone(),
        );
        registry.register(
            "slot_consecutive_failures",
            "Consecutive selected epochs the slot failed (3 raises the alert)",
            m.slot_consecutive_failures.clone(),
        );
        registry.register("compute_queue_waiting", "Computes waiting for a worker", m.queue_waiting.clone());
        registry.register("compute_queue_running", "Computes running on a worker", m.queue_running.clone());
        registry.register(
            "compute_queue_workers",
            "Workers (LITE_NODE_MAX_CONCURRENT_COMPUTES)",
            m.queue_workers.clone(),
        );
        registry.register("compute_queue_paused", "1 while the queue hands out nothing", m.queue_paused.clone());
        registry.register("compute_queue_handed_out", "Computes given a worker", m.queue_handed_out.clone());
        registry.register(
            "compute_queue_wait_milliseconds",
            "Time computes waited for a worker, in all (divide by handed_out for the mean)",
            m.queue_wait_ms.clone(),
        );
        registry.register(
            "compute_queue_dropped",
            "Computes that never got a worker, by reason (full, expired, closed, quarantined, duplicate)",
            m.queue_dropped.clone(),
        );
        registry.register(
            "computes_hung",
            "Computes past their timeout that have not returned",
            m.computes_hung.clone(),
        );
        registry.register(
            "projects_quarantined",
            "Projects not called now because their compute hung",
            m.projects_quarantined.clone(),
        );
        registry.register("project_quarantines", "Quarantines started", m.quarantines.clone());
        registry.register(
            "rpc_behind_blocks",
            "Blocks an RPC endpoint is under its chain's freshest endpoint (several configured); one more than 8 \
             behind is used only after the fresh ones",
            m.rpc_behind.clone(),
        );
        Self { registry, ..m }
    }
}

impl Metrics {
    /// Counts one project's epoch of `slot`, in the node's totals and the
    /// slot's own series.
    pub fn count(&self, slot: u64, verdict: &Verdict) {
        let name = match verdict {
            Verdict::SelectedSuccess => {
                self.selected_succeeded.inc();
                "selected_succeeded"
            }
            Verdict::SelectedFailure(_) => {
                self.selected_failed.inc();
                "selected_failed"
            }
            Verdict::NotSelected => {
                self.not_selected.inc();
                "not_selected"
            }
            Verdict::Missed => {
                self.missed.inc();
                "missed"
            }
            Verdict::Unknown(_) => {
                self.failed_before_selection.inc();
                "failed_before_selection"
            }
            Verdict::Withheld(_) => {
                self.failed_before_selection.inc();
                "withheld"
            }
        };
        self.slot_epochs.get_or_create(&SlotVerdictLabel { slot, verdict: name }).inc();
    }

    /// A counter of failed requests for one chain's RPC.
    pub fn rpc_errors(&self, chain: &str) -> Counter {
        self.rpc_errors.get_or_create(&ChainLabel { chain: chain.to_owned() }).clone()
    }

    /// Brings the queue's series up to `w`'s view.
    pub fn observe_computes(&self, w: &ComputeWatch) {
        let q = w.queue();
        self.queue_waiting.set(q.waiting as i64);
        self.queue_running.set(q.running as i64);
        self.queue_workers.set(q.workers as i64);
        self.queue_paused.set(i64::from(q.paused));
        let catch_up = |c: &Counter, to: u64| {
            c.inc_by(to.saturating_sub(c.get()));
        };
        catch_up(&self.queue_handed_out, q.counters.handed_out);
        catch_up(&self.queue_wait_ms, q.waited_ms);
        for (reason, n) in [
            ("full", q.counters.dropped_full),
            ("expired", q.counters.expired),
            ("closed", q.counters.closed),
            ("quarantined", q.counters.withdrawn),
            ("duplicate", q.counters.duplicates),
        ] {
            catch_up(&self.queue_dropped.get_or_create(&ReasonLabel { reason }), n);
        }
        self.computes_hung.set(w.hung() as i64);
        self.projects_quarantined.set(w.quarantined().len() as i64);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

/// Facts about the node that do not change while it runs.
#[derive(Clone, Debug)]
pub struct Info {
    pub data_market: String,
    pub protocol_state: String,
    pub namespace: String,
    pub compute_package: String,
    pub version: &'static str,
}

/// What the status API reports, shared with the node's loop.
#[derive(Debug)]
pub struct NodeStatus {
    pub info: Info,
    pub activity: Arc<Activity>,
    /// Every slot this node works, in order (one, usually); set once the
    /// identity check has said which.
    pub slots: std::sync::OnceLock<Vec<Arc<SlotStatus>>>,
    pub metrics: Metrics,
    /// The node passed its identity check and watches the anchor chain.
    pub watching: AtomicBool,
    /// No epoch processed for longer than this: unhealthy.
    pub stuck_after: Duration,
    /// Why the last epoch could not even be computed (the total slots never
    /// known, block details unavailable): unhealthy until an epoch runs.
    pub last_epoch_problem: Mutex<Option<String>>,
    /// What is failing right now (the anchor, writing state, the collector,
    /// hung computes), by kind: unhealthy while any is.
    pub troubles: Arc<Troubles>,
    /// The executor's queue, quarantine and hung computes, once it runs.
    pub computes: std::sync::OnceLock<ComputeWatch>,
    /// The chains' RPC endpoints by role, for their freshness.
    pub rpcs: std::sync::OnceLock<Vec<(&'static str, Arc<lite_node_chain::HttpRpc>)>>,
}

/// One slot as the status API shows it.
#[derive(Debug)]
pub struct SlotStatus {
    pub slot_id: u64,
    pub signer: String,
    pub tracker: Arc<SelectionTracker>,
    pub books: Mutex<Books>,
    /// The last epoch the books held when this process opened them: a
    /// standing alert makes `/health` 503 only when the streak's latest
    /// failure came after it, so a node restarted after a fix is healthy
    /// until it fails again (the streak stays in `/status` until a selected
    /// success clears it).
    pub last_epoch_at_start: Option<u64>,
}

impl SlotStatus {
    pub fn books(&self) -> Books {
        self.books.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_books(&self, books: Books) {
        *self.books.lock().unwrap_or_else(|p| p.into_inner()) = books;
    }

    /// Whether this slot's three-failure alert stands and it has failed
    /// again since this process started.
    fn failing_now(&self) -> bool {
        let books = self.books();
        let latest_failure = books.streak.last().map(|e| e.epoch_id);
        books.alerted && latest_failure.is_some_and(|e| self.last_epoch_at_start.is_none_or(|start| e > start))
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "slotId": self.slot_id,
            "signer": self.signer,
            "lastSelection": self.tracker.last().map(|r| json!({
                "epoch_id": r.epoch_id, "was_selected": r.was_selected, "slot_id": r.slot_id, "timestamp": r.timestamp,
            })),
            "books": self.books(),
        })
    }
}

/// A kind of trouble `/health` reports: each is set by the room that
/// notices it and cleared by the same room when it works again. Listed in
/// the order `/health` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Trouble {
    /// The anchor's head has not moved for too long (`EpochWork::polled`).
    AnchorHead,
    /// Submissions cannot reach the collector (the submitter).
    Collector,
    /// Computes hung past their timeout (the node's hung-compute watch).
    Computes,
    /// The anchor does not answer the epoch loop's polls.
    Anchor,
    /// The node's state cannot be written (the epoch loop).
    State,
    /// A slot is no longer registered to this node's signer (removed or
    /// reassigned by the market): its submissions are refused.
    Slots,
}

/// What is failing right now, by kind, shared by the rooms that notice it.
#[derive(Debug, Default)]
pub struct Troubles(Mutex<std::collections::BTreeMap<Trouble, String>>);

impl Troubles {
    /// `what` is failing (`Some`, why) or works again (`None`).
    pub fn set(&self, what: Trouble, problem: Option<String>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match problem {
            Some(p) => {
                map.insert(what, p);
            }
            None => {
                map.remove(&what);
            }
        }
    }

    /// Whether `what` is failing now.
    pub fn has(&self, what: Trouble) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&what)
    }

    /// Every current problem, joined.
    pub fn current(&self) -> Option<String> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        (!map.is_empty()).then(|| map.values().cloned().collect::<Vec<_>>().join("; "))
    }
}

impl NodeStatus {
    /// The slots being worked (none before the identity check).
    pub fn slots(&self) -> &[Arc<SlotStatus>] {
        self.slots.get().map_or(&[], Vec::as_slice)
    }

    /// `Ok` while epochs are being processed, else why not.
    pub fn health(&self) -> Result<String, String> {
        if !self.watching.load(Ordering::Relaxed) {
            return Err("starting: not watching the anchor chain yet".into());
        }
        if let Some(problem) = self.troubles.current() {
            return Err(problem);
        }
        // Paused for a chain that does not answer (the executor resumes by itself).
        if let Some(why) = self.computes.get().and_then(|w| w.queue().paused_for) {
            return Err(format!("computes are paused: {why}"));
        }
        if let Some(problem) = self.last_epoch_problem.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            return Err(problem.clone());
        }
        // A slot whose three-failure alert stands, and that failed again
        // since start-up, is not earning.
        let failing: Vec<u64> = self.slots().iter().filter(|s| s.failing_now()).map(|s| s.slot_id).collect();
        if !failing.is_empty() {
            return Err(format!(
                "{} failed {} or more consecutive selected epochs",
                slots_named(&failing),
                crate::books::ALERT_AFTER
            ));
        }
        let idle = self.activity.idle();
        if idle > self.stuck_after {
            let since = if self.activity.ever() { "no epoch processed" } else { "no epoch processed since start-up" };
            return Err(format!("{since} for {}s (limit {}s)", idle.as_secs(), self.stuck_after.as_secs()));
        }
        let earlier: Vec<u64> = self.slots().iter().filter(|s| s.books().alerted).map(|s| s.slot_id).collect();
        let note = if earlier.is_empty() {
            String::new()
        } else {
            format!(
                "; {}: failure streak from before this start, not failed since (see /status)",
                slots_named(&earlier)
            )
        };
        Ok(format!("processing epochs (last {}s ago){note}", idle.as_secs()))
    }
}

/// "slot 3", "slots 1-2, 4".
fn slots_named(ids: &[u64]) -> String {
    let which = if ids.len() == 1 { "slot" } else { "slots" };
    format!("{which} {}", crate::config::format_slot_ids(ids))
}

async fn health(State(s): State<Arc<NodeStatus>>) -> impl IntoResponse {
    match s.health() {
        Ok(detail) => (StatusCode::OK, axum::Json(json!({"healthy": true, "detail": detail}))),
        Err(detail) => (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"healthy": false, "detail": detail}))),
    }
}

async fn status_json(State(s): State<Arc<NodeStatus>>) -> impl IntoResponse {
    axum::Json(s.document())
}

impl NodeStatus {
    /// What `/status` answers: the node's totals at the top, each slot's
    /// own under `slots`.
    pub fn document(&self) -> serde_json::Value {
        let i = &self.info;
        let slots = self.slots();
        let ids: Vec<u64> = slots.iter().map(|s| s.slot_id).collect();
        let health = self.health();
        json!({
            "slotIds": crate::config::format_slot_ids(&ids),
            "slotCount": ids.len(),
            "dataMarket": i.data_market,
            "protocolState": i.protocol_state,
            "namespace": i.namespace,
            "computePackage": i.compute_package,
            "version": i.version,
            "healthy": health.is_ok(),
            "health": health.unwrap_or_else(|e| e),
            "lastSelection": last_selection(slots),
            "books": totals(slots),
            "slots": slots.iter().map(|slot| slot.json()).collect::<Vec<_>>(),
            "rpcs": self.rpcs.get().map(|rpcs| {
                rpcs.iter().map(|(role, rpc)| (role.to_string(), json!(rpc.endpoints()))).collect::<serde_json::Map<_, _>>()
            }),
            "computes": self.computes.get().map(|w| json!({
                "queue": w.queue(),
                "hung": w.hung(),
                "quarantined": w.quarantined(),
            })),
        })
    }
}

/// The latest epoch any slot reported a selection for, and how many slots
/// reported it and were selected (`null` before the first report).
fn last_selection(slots: &[Arc<SlotStatus>]) -> serde_json::Value {
    let reports: Vec<_> = slots.iter().filter_map(|s| s.tracker.last()).collect();
    let Some(epoch_id) = reports.iter().map(|r| r.epoch_id).max() else { return serde_json::Value::Null };
    let of_it: Vec<_> = reports.iter().filter(|r| r.epoch_id == epoch_id).collect();
    json!({
        "epoch_id": epoch_id,
        "slots_reported": of_it.len(),
        "slots_selected": of_it.iter().filter(|r| r.was_selected).count(),
        "timestamp": of_it.iter().map(|r| r.timestamp).max(),
    })
}

/// Every slot's books summed: epochs counted per verdict, overall and per
/// project; the longest current streak; the slots whose three-failure
/// alert stands; the latest epoch booked; the latest submission answered,
/// with its slot.
fn totals(slots: &[Arc<SlotStatus>]) -> serde_json::Value {
    let mut overall = Counts::default();
    let mut projects: std::collections::BTreeMap<String, Counts> = Default::default();
    let (mut alerted, mut last_epoch, mut last_submission) = (Vec::new(), None, None);
    for slot in slots {
        let books = slot.books();
        overall.add(&books.overall);
        for (project, counts) in &books.projects {
            projects.entry(project.clone()).or_default().add(counts);
        }
        if books.alerted {
            alerted.push(slot.slot_id);
        }
        last_epoch = last_epoch.max(books.last_epoch);
        if let Some(s) = books.last_submission {
            let later = |(_, l): &(u64, crate::books::LastSubmission)| {
                (s.epoch_id, s.answered_at_ms) > (l.epoch_id, l.answered_at_ms)
            };
            if last_submission.as_ref().is_none_or(later) {
                last_submission = Some((slot.slot_id, s));
            }
        }
    }
    let last_submission = last_submission.map(|(slot_id, s)| {
        let mut v = json!(s);
        v["slot_id"] = json!(slot_id);
        v
    });
    json!({
        "overall": overall,
        "projects": projects,
        "alerted_slots": crate::config::format_slot_ids(&alerted),
        "last_epoch": last_epoch,
        "last_submission": last_submission,
    })
}

async fn metrics(State(s): State<Arc<NodeStatus>>) -> impl IntoResponse {
    if let Some(w) = s.computes.get() {
        s.metrics.observe_computes(w);
    }
    for (role, rpc) in s.rpcs.get().into_iter().flatten() {
        for e in rpc.endpoints() {
            let label = EndpointLabel { chain: role.to_string(), url: e.url };
            s.metrics.rpc_behind.get_or_create(&label).set(i64::try_from(e.behind).unwrap_or(i64::MAX));
        }
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], s.metrics.encode())
}

/// Serves the status API on `listener` until `shutdown` completes.
pub async fn serve(
    status: Arc<NodeStatus>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/health", get(health))
        .route("/status", get(status_json))
        .route("/metrics", get(metrics))
        .with_state(status);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::books::tests::{fail, idle, ok};

    fn node(alerted: &[u64]) -> NodeStatus {
        node_of(1..=4, alerted)
    }

    fn node_of(worked: std::ops::RangeInclusive<u64>, alerted: &[u64]) -> NodeStatus {
        let books = |slot_id| if alerted.contains(&slot_id) { failed(&[3, 4, 5]) } else { Books::default() };
        node_with(worked, |slot_id| (books(slot_id), None))
    }

    /// A node working `worked`, each slot with its books and the last epoch
    /// they held at start.
    fn node_with(worked: std::ops::RangeInclusive<u64>, slot: impl Fn(u64) -> (Books, Option<u64>)) -> NodeStatus {
        let info = Info {
            data_market: String::new(),
            protocol_state: String::new(),
            namespace: String::new(),
            compute_package: String::new(),
            version: "test",
        };
        let status = NodeStatus {
            info,
            activity: Arc::new(Activity::default()),
            slots: Default::default(),
            metrics: Metrics::default(),
            watching: AtomicBool::new(true),
            stuck_after: Duration::from_secs(600),
            last_epoch_problem: Mutex::default(),
            troubles: Arc::default(),
            computes: Default::default(),
            rpcs: Default::default(),
        };
        status.activity.touch();
        let slots = worked
            .map(|slot_id| {
                let (books, last_epoch_at_start) = slot(slot_id);
                Arc::new(SlotStatus {
                    slot_id,
                    signer: format!("0xsigner-of-{slot_id}"),
                    tracker: Arc::default(),
                    books: Mutex::new(books),
                    last_epoch_at_start,
                })
            })
            .collect();
        status.slots.set(slots).unwrap();
        status
    }

    /// Books after a selected failure in each of `epochs`.
    fn failed(epochs: &[u64]) -> Books {
        let mut books = Books::default();
        for &epoch in epochs {
            books.apply(epoch, &[fail()]);
        }
        books
    }

    #[test]
    fn a_streak_from_before_a_restart_leaves_health_until_the_slot_fails_again() {
        // Restarted (say, after a fix) with slot 2's alert standing from epochs 3-5.
        let books = failed(&[3, 4, 5]);
        assert!(books.alerted);
        let status = node_with(1..=4, |slot_id| match slot_id {
            2 => (books.clone(), books.last_epoch),
            _ => (Books::default(), None),
        });
        let detail = status.health().expect("healthy until it fails again");
        assert!(
            detail.ends_with("; slot 2: failure streak from before this start, not failed since (see /status)"),
            "{detail}"
        );
        // Not selected since: still healthy.
        let slot = &status.slots()[1];
        let mut books = slot.books();
        books.apply(6, &[idle()]);
        slot.set_books(books);
        assert!(status.health().is_ok());
        // Fails again: the standing streak counts once more.
        let mut books = slot.books();
        books.apply(7, &[fail()]);
        slot.set_books(books);
        assert_eq!(status.health().unwrap_err(), "slot 2 failed 3 or more consecutive selected epochs");
        // A success clears it; a new streak of three after it counts too.
        let mut books = slot.books();
        books.apply(8, &[ok()]);
        slot.set_books(books);
        let detail = status.health().unwrap();
        assert!(!detail.contains("streak"), "{detail}");
        let mut books = slot.books();
        for epoch in 9..=11 {
            books.apply(epoch, &[fail()]);
        }
        slot.set_books(books);
        assert_eq!(status.health().unwrap_err(), "slot 2 failed 3 or more consecutive selected epochs");
    }

    #[test]
    fn health_names_the_slots_whose_three_failure_alert_stands() {
        assert!(node(&[]).health().is_ok());
        assert_eq!(node(&[3]).health().unwrap_err(), "slot 3 failed 3 or more consecutive selected epochs");
        assert_eq!(node(&[1, 2, 4]).health().unwrap_err(), "slots 1-2, 4 failed 3 or more consecutive selected epochs");
    }

    /// Slot 1 configured but skipped, slots 2-3 worked with their own
    /// signers: `/status` names the slots worked, each under `slots` with
    /// its own signer; the top names no one slot.
    #[test]
    fn status_names_the_slots_worked_each_with_its_own_signer() {
        let doc = node_of(2..=3, &[]).document();
        assert_eq!((doc["slotIds"].as_str(), doc["slotCount"].as_u64()), (Some("2-3"), Some(2)));
        let slots = doc["slots"].as_array().unwrap();
        assert_eq!((slots[0]["slotId"].as_u64(), slots[0]["signer"].as_str()), (Some(2), Some("0xsigner-of-2")));
        assert_eq!(slots[1]["signer"], "0xsigner-of-3");
        assert!(doc.get("slotId").is_none() && doc.get("signer").is_none(), "{doc}");
        assert_eq!(doc["lastSelection"], serde_json::Value::Null, "no report yet");
    }

    /// Ten slots, four epochs each: the top of `/status` is the node's
    /// (40 selected successes, as `/metrics` counts them), each slot's own
    /// under `slots`; the alerted slots, the longest streak and the latest
    /// submission are named.
    #[test]
    fn status_sums_the_books_of_every_slot_at_the_top() {
        let status = node_with(1..=10, |slot_id| {
            let mut books = Books::default();
            for epoch in 1..=4 {
                books.apply(epoch, &[ok()]);
            }
            if slot_id % 5 == 0 {
                for epoch in 5..=(4 + slot_id / 5 + 2) {
                    books.apply(epoch, &[fail()]);
                }
            }
            if [3, 7].contains(&slot_id) {
                let (epoch_id, project_id, verdict) = (4, format!("p:{slot_id}"), "accepted".into());
                let answered_at_ms = slot_id * 10;
                books.last_submission =
                    Some(crate::books::LastSubmission { epoch_id, project_id, verdict, answered_at_ms });
            }
            (books, None)
        });
        for slot in status.slots() {
            slot.tracker.report(6, slot.slot_id % 2 == 0, slot.slot_id);
        }
        status.slots()[0].tracker.report(7, true, 1);
        let doc = status.document();
        let books = &doc["books"];
        assert_eq!(books["overall"]["selected_success"], 40, "{books}");
        assert_eq!(books["overall"]["selected_failure"], 3 + 4);
        assert_eq!(books["overall"]["consecutive_failures"], 4, "the longest streak, not a sum");
        assert_eq!(books["projects"]["p"]["selected_success"], 40, "{books}");
        assert_eq!(books["alerted_slots"], "5, 10");
        assert_eq!(books["last_epoch"], 8);
        let latest = &books["last_submission"];
        assert_eq!((latest["slot_id"].as_u64(), latest["project_id"].as_str()), (Some(7), Some("p:7")), "{latest}");
        assert_eq!(doc["slots"][0]["books"]["overall"]["selected_success"], 4);
        assert_eq!(doc["slots"].as_array().unwrap().len(), 10);
        let last = &doc["lastSelection"];
        assert_eq!((last["epoch_id"].as_u64(), last["slots_reported"].as_u64()), (Some(7), Some(1)), "{last}");
        assert_eq!(last["slots_selected"], 1);
        assert_eq!(doc["slots"][1]["lastSelection"]["epoch_id"], 6);
    }

    #[test]
    fn metrics_carry_each_slots_verdicts_and_streak() {
        let status = node(&[]);
        let m = &status.metrics;
        m.count(2, &Verdict::SelectedSuccess);
        m.count(3, &Verdict::SelectedFailure("x".into()));
        m.slot_consecutive_failures.get_or_create(&SlotLabel { slot: 3 }).set(1);
        let text = m.encode();
        assert!(text.contains(r#"lite_node_slot_epochs_total{slot="2",verdict="selected_succeeded"} 1"#), "{text}");
        assert!(text.contains(r#"lite_node_slot_epochs_total{slot="3",verdict="selected_failed"} 1"#), "{text}");
        assert!(text.contains(r#"lite_node_slot_consecutive_failures{slot="3"} 1"#), "{text}");
        assert!(text.contains("lite_node_epochs_selected_succeeded_total 1"), "{text}");
    }
}
