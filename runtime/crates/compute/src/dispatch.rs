//! How [`crate::executor::LocalExecutor`] lets computes run: each task waits
//! its turn in the work queue ([`crate::queue`], whose order and rules are
//! written there) through a [`Gate`], and a project whose computes hang is
//! kept out for a while by the [`Quarantine`].

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Instant,
};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, oneshot, watch};

use crate::queue::{Counters, Item, Key, Permit, Pushed, Queue};

/// Why a task got no worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The same (epoch, slot, project, data source) waits or runs already.
    Duplicate,
    /// The queue was full and this was the lowest in priority.
    Full,
    /// The anchor head passed its deadline while it waited.
    Expired { deadline: u64, head: u64 },
    /// Its epoch was closed while it waited.
    Closed,
    /// The anchor head passed its deadline while computes were paused for
    /// the reason given (a chain that did not answer).
    Paused { reason: String, deadline: u64, head: u64 },
    /// Its project is quarantined.
    Quarantined(Quarantined),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Duplicate => f.write_str("the same compute is already queued or running"),
            Self::Full => f.write_str("the work queue was full and this was the lowest in priority"),
            Self::Expired { deadline, head } => {
                write!(f, "its deadline (anchor block {deadline}) passed while it waited for a worker (head {head})")
            }
            Self::Closed => f.write_str("its epoch was closed while it waited for a worker"),
            Self::Paused { reason, deadline, head } => write!(
                f,
                "not computed: computes were paused ({reason}) and its deadline (anchor block {deadline}) passed \
                 while it waited (head {head})"
            ),
            Self::Quarantined(q) => q.fmt(f),
        }
    }
}

type Waiter = oneshot::Sender<Result<Turn, Refused>>;

/// The work queue, shared by the tasks waiting on it.
#[derive(Debug)]
pub struct Gate {
    queue: Mutex<Queue<Waiter>>,
    /// Told whenever a worker is given back.
    freed: Notify,
    /// Why the queue is paused, when it is.
    paused_for: Mutex<Option<String>>,
    /// Time tasks spent waiting for their turn, in all and at most (ms).
    waited_ms: AtomicU64,
    longest_wait_ms: AtomicU64,
}

/// A task's worker: given back (and the next task let in) when dropped.
#[derive(Debug)]
pub struct Turn {
    permit: Option<Permit>,
    gate: Arc<Gate>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            drop(permit);
            self.gate.pump();
            self.gate.freed.notify_waiters();
        }
    }
}

/// What the queue holds and did, for `/metrics` and `/status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueView {
    pub waiting: usize,
    pub running: usize,
    pub workers: usize,
    pub capacity: usize,
    pub paused: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_for: Option<String>,
    #[serde(flatten)]
    pub counters: Counters,
    /// Time the handed-out tasks waited for their turn, in all and at most.
    pub waited_ms: u64,
    pub longest_wait_ms: u64,
}

impl Gate {
    pub fn new(capacity: usize, workers: usize, seed: u64) -> Arc<Self> {
        Arc::new(Self {
            queue: Mutex::new(Queue::new(capacity, workers, seed)),
            freed: Notify::new(),
            paused_for: Mutex::default(),
            waited_ms: AtomicU64::new(0),
            longest_wait_ms: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue<Waiter>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for `key`'s turn; the worker is given back when the [`Turn`]
    /// is dropped. A caller that stops waiting leaves nothing behind.
    pub async fn turn(self: &Arc<Self>, key: Key, deadline: u64, cost: u64) -> Result<Turn, Refused> {
        let (tx, rx) = oneshot::channel();
        let asked = Instant::now();
        let pushed = self.lock().push(Item { key: key.clone(), deadline, cost, payload: tx });
        match pushed {
            Pushed::Queued => {}
            Pushed::Duplicate(_) => return Err(Refused::Duplicate),
            Pushed::Dropped(_) => return Err(Refused::Full),
            Pushed::QueuedDropping(lower) => {
                let _ = lower.payload.send(Err(Refused::Full));
            }
        }
        let mut waiting = Waiting { gate: self, key: Some(key) };
        self.pump();
        let answer = rx.await;
        waiting.key = None;
        if answer.as_ref().is_ok_and(Result::is_ok) {
            let waited = asked.elapsed().as_millis() as u64;
            self.waited_ms.fetch_add(waited, Relaxed);
            self.longest_wait_ms.fetch_max(waited, Relaxed);
        }
        // A waiter is only ever dropped unanswered with its epoch.
        answer.unwrap_or(Err(Refused::Closed))
    }

    /// Hands out turns while a worker is free.
    fn pump(self: &Arc<Self>) {
        loop {
            let Some((item, permit)) = self.lock().pop() else { return };
            let turn = Turn { permit: Some(permit), gate: self.clone() };
            if let Err(Ok(mut turn)) = item.payload.send(Ok(turn)) {
                // Its task stopped waiting: the worker is free again at once.
                drop(turn.permit.take());
            }
        }
    }

    /// Drops what waits past its deadline at anchor head `head`.
    pub fn expire(self: &Arc<Self>, head: u64) {
        // Read under the queue's lock: a resume cannot fall between the two.
        let (gone, paused_for) = {
            let mut q = self.lock();
            (q.expire(head), self.paused_for())
        };
        for item in gone {
            let refused = match &paused_for {
                Some(reason) => Refused::Paused { reason: reason.clone(), deadline: item.deadline, head },
                None => Refused::Expired { deadline: item.deadline, head },
            };
            let _ = item.payload.send(Err(refused));
        }
    }

    /// Drops what waits of epoch `epoch_id`.
    pub fn close_epoch(self: &Arc<Self>, epoch_id: u64) {
        let gone = self.lock().close_epoch(epoch_id);
        for item in gone {
            let _ = item.payload.send(Err(Refused::Closed));
        }
    }

    /// Refuses what waits of a project just quarantined.
    pub fn quarantine(self: &Arc<Self>, q: &Quarantined) {
        let gone = self.lock().withdraw(|k| k.project == q.project);
        for item in gone {
            let _ = item.payload.send(Err(Refused::Quarantined(q.clone())));
        }
    }

    pub fn pause(self: &Arc<Self>) {
        self.lock().pause();
    }

    /// Pauses, saying why: what expires meanwhile ends as [`Refused::Paused`].
    /// `false` (and nothing changes) when it is paused for a reason already.
    /// (The reason changes under the queue's lock, as [`Gate::expire`] reads it.)
    pub fn pause_for(self: &Arc<Self>, reason: String) -> bool {
        let mut q = self.lock();
        let mut paused_for = self.paused_for.lock().unwrap_or_else(|p| p.into_inner());
        if paused_for.is_some() {
            return false;
        }
        *paused_for = Some(reason);
        q.pause();
        true
    }

    pub fn resume(self: &Arc<Self>) {
        {
            let mut q = self.lock();
            *self.paused_for.lock().unwrap_or_else(|p| p.into_inner()) = None;
            q.resume();
        }
        self.pump();
    }

    fn paused_for(&self) -> Option<String> {
        self.paused_for.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Computes running now (one past its timeout no longer counts).
    pub fn running(&self) -> usize {
        self.lock().running()
    }

    /// Waits until no compute runs.
    pub async fn idle(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.running() == 0 {
                return;
            }
            freed.await;
        }
    }

    pub fn view(&self) -> QueueView {
        let q = self.lock();
        QueueView {
            waiting: q.len(),
            running: q.running(),
            workers: q.workers(),
            capacity: q.capacity(),
            paused: q.is_paused(),
            paused_for: self.paused_for(),
            counters: q.counters(),
            waited_ms: self.waited_ms.load(Relaxed),
            longest_wait_ms: self.longest_wait_ms.load(Relaxed),
        }
    }
}

/// What the node watches of an executor's dispatch: its queue, its
/// quarantined projects and its hung computes.
#[derive(Clone, Debug)]
pub struct ComputeWatch {
    pub(crate) gate: Arc<Gate>,
    pub quarantine: watch::Receiver<BTreeMap<String, Quarantined>>,
    pub hung: watch::Receiver<usize>,
}

impl ComputeWatch {
    pub fn queue(&self) -> QueueView {
        self.gate.view()
    }

    pub fn quarantined(&self) -> Vec<Quarantined> {
        self.quarantine.borrow().values().cloned().collect()
    }

    pub fn hung(&self) -> usize {
        *self.hung.borrow()
    }
}

/// Takes a waiting item back when its task stops waiting.
struct Waiting<'a> {
    gate: &'a Arc<Gate>,
    key: Option<Key>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.gate.lock().cancel(&key);
        }
    }
}

/// The longest a quarantine lasts, in epochs.
pub const MAX_QUARANTINE_EPOCHS: u64 = 32;

/// A project kept out after its computes hung.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantined {
    pub project: String,
    /// Epochs in a row (with calls) in which a compute of it hung.
    pub hangs: u32,
    /// The epoch of the last hang.
    pub epoch_id: u64,
    /// The first epoch it is called again.
    pub until_epoch: u64,
}

impl Quarantined {
    /// No calls for 1, 2, 4, … epochs after the 1st, 2nd, 3rd, … hang in a
    /// row, at most [`MAX_QUARANTINE_EPOCHS`].
    pub fn after(project: &str, hangs: u32, epoch_id: u64) -> Self {
        let skip = 1u64.checked_shl(hangs.saturating_sub(1)).unwrap_or(u64::MAX).min(MAX_QUARANTINE_EPOCHS);
        Self { project: project.to_owned(), hangs, epoch_id, until_epoch: epoch_id + 1 + skip }
    }
}

impl std::fmt::Display for Quarantined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "project `{}` is quarantined: its compute hung past the timeout in {} epoch(s) in a row (last in epoch \
             {}); it is not called again before epoch {}",
            self.project, self.hangs, self.epoch_id, self.until_epoch
        )
    }
}

/// Which projects are quarantined, watched by the node (`/health`, alerts).
#[derive(Debug)]
pub struct Quarantine {
    held: watch::Sender<BTreeMap<String, Quarantined>>,
}

impl Default for Quarantine {
    fn default() -> Self {
        Self { held: watch::Sender::new(BTreeMap::new()) }
    }
}

impl Quarantine {
    /// The quarantine keeping `project` out of epoch `epoch_id`, if any.
    pub fn holds(&self, project: &str, epoch_id: u64) -> Option<Quarantined> {
        self.held.borrow().get(project).filter(|q| epoch_id < q.until_epoch).cloned()
    }

    /// A compute of `project` for epoch `epoch_id` hung: the quarantine it
    /// starts, or `None` when one of that epoch's started already.
    pub fn hung(&self, project: &str, epoch_id: u64) -> Option<Quarantined> {
        let mut started = None;
        self.held.send_if_modified(|held| {
            let hangs = match held.get(project) {
                Some(q) if q.epoch_id >= epoch_id => return false,
                Some(q) => q.hangs + 1,
                None => 1,
            };
            let q = Quarantined::after(project, hangs, epoch_id);
            started = Some(q.clone());
            held.insert(project.to_owned(), q);
            true
        });
        started
    }

    /// A compute of `project` for epoch `epoch_id` returned in time: a
    /// quarantine from an earlier epoch is lifted.
    pub fn returned(&self, project: &str, epoch_id: u64) {
        self.held.send_if_modified(|held| match held.get(project) {
            Some(q) if q.epoch_id < epoch_id => held.remove(project).is_some(),
            _ => false,
        });
    }

    pub fn watch(&self) -> watch::Receiver<BTreeMap<String, Quarantined>> {
        self.held.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(slot_id: u64, project: &str) -> Key {
        Key { epoch_id: 1, slot_id, project: project.to_owned(), source: None }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn turns_come_in_the_queue_order_as_workers_are_given_back() {
        runtime().block_on(async {
            let gate = Gate::new(10, 1, 0);
            let first = gate.turn(key(1, "a"), 100, 1).await.unwrap();
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let mut waiters = tokio::task::JoinSet::new();
            for (project, deadline) in [("late", 300), ("soon", 200)] {
                let (gate, tx) = (gate.clone(), tx.clone());
                waiters.spawn(async move {
                    let turn = gate.turn(key(1, project), deadline, 1).await.unwrap();
                    tx.send(project).unwrap();
                    drop(turn);
                });
            }
            while gate.view().waiting < 2 {
                tokio::task::yield_now().await;
            }
            assert_eq!(gate.view().running, 1);
            drop(first);
            let order = [rx.recv().await.unwrap(), rx.recv().await.unwrap()];
            assert_eq!(order, ["soon", "late"]);
            gate.idle().await;
            assert_eq!(gate.view().counters.handed_out, 3);
        });
    }

    #[test]
    fn a_task_that_stops_waiting_leaves_no_item_and_no_worker_behind() {
        runtime().block_on(async {
            let gate = Gate::new(10, 1, 0);
            let first = gate.turn(key(1, "a"), 100, 1).await.unwrap();
            let gave_up = tokio::time::timeout(Duration::from_millis(20), gate.turn(key(1, "b"), 100, 1)).await;
            assert!(gave_up.is_err());
            assert_eq!(gate.view().waiting, 0, "its item went with it");
            drop(first);
            assert_eq!(gate.view().running, 0);
            let again = gate.turn(key(1, "b"), 100, 1).await;
            assert!(again.is_ok(), "not a duplicate of the task that gave up");
        });
    }

    #[test]
    fn expiry_closing_and_quarantine_answer_the_waiting_tasks_with_the_reason() {
        runtime().block_on(async {
            let gate = Gate::new(10, 1, 0);
            let busy = gate.turn(key(9, "busy"), 1000, 1).await.unwrap();
            let waits = |k: Key, deadline: u64| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.turn(k, deadline, 1).await.map(drop) })
            };
            let (soon, other, hanging) = (waits(key(1, "a"), 100), waits(key(2, "a"), 500), waits(key(3, "h"), 500));
            while gate.view().waiting < 3 {
                tokio::task::yield_now().await;
            }
            assert_eq!(gate.turn(key(1, "a"), 100, 1).await.map(drop), Err(Refused::Duplicate));
            gate.expire(101);
            assert_eq!(soon.await.unwrap(), Err(Refused::Expired { deadline: 100, head: 101 }));
            let q = Quarantined::after("h", 1, 1);
            gate.quarantine(&q);
            assert_eq!(hanging.await.unwrap(), Err(Refused::Quarantined(q)));
            gate.close_epoch(1);
            assert_eq!(other.await.unwrap(), Err(Refused::Closed));
            drop(busy);
            let v = gate.view();
            assert_eq!(
                (v.counters.expired, v.counters.withdrawn, v.counters.closed, v.counters.duplicates, v.running),
                (1, 1, 1, 1, 0)
            );
        });
    }

    #[test]
    fn a_paused_gate_hands_out_nothing_until_resumed() {
        runtime().block_on(async {
            let gate = Gate::new(10, 2, 0);
            gate.pause();
            let waiting = tokio::spawn({
                let gate = gate.clone();
                async move { gate.turn(key(1, "a"), 100, 1).await.map(drop) }
            });
            while gate.view().waiting < 1 {
                tokio::task::yield_now().await;
            }
            assert!(gate.view().paused);
            assert_eq!(gate.view().running, 0);
            gate.resume();
            assert_eq!(waiting.await.unwrap(), Ok(()));
        });
    }

    /// Paused for a chain that does not answer, what waits past its deadline
    /// is refused with that reason (a failure), not as merely expired (a
    /// miss); resumed, the reason is gone.
    #[test]
    fn what_expires_while_paused_for_an_outage_is_refused_with_its_reason() {
        runtime().block_on(async {
            let gate = Gate::new(10, 2, 0);
            assert!(gate.pause_for("every source RPC endpoint failed".into()));
            assert!(!gate.pause_for("another".into()), "paused already");
            assert_eq!(gate.view().paused_for.as_deref(), Some("every source RPC endpoint failed"));
            let waiting = tokio::spawn({
                let gate = gate.clone();
                async move { gate.turn(key(1, "a"), 100, 1).await.map(drop) }
            });
            while gate.view().waiting < 1 {
                tokio::task::yield_now().await;
            }
            gate.expire(101);
            let refused = waiting.await.unwrap().unwrap_err();
            assert_eq!(
                refused,
                Refused::Paused { reason: "every source RPC endpoint failed".into(), deadline: 100, head: 101 }
            );
            assert!(refused.to_string().contains("computes were paused (every source RPC endpoint failed)"));
            gate.resume();
            assert_eq!((gate.view().paused, gate.view().paused_for), (false, None));
        });
    }

    #[test]
    fn a_quarantine_grows_with_each_epoch_that_hangs_and_ends_on_a_return_in_time() {
        let q = Quarantine::default();
        let first = q.hung("p", 10).unwrap();
        assert_eq!((first.hangs, first.until_epoch), (1, 12));
        assert_eq!(q.hung("p", 10), None, "another slot's hang in the same epoch");
        assert!(q.holds("p", 11).is_some() && q.holds("p", 12).is_none());
        assert!(q.holds("other", 11).is_none());
        assert_eq!(q.hung("p", 12).unwrap().until_epoch, 15);
        assert_eq!(q.hung("p", 15).unwrap().until_epoch, 20);
        q.returned("p", 15);
        assert!(q.holds("p", 16).is_some(), "a call of the same epoch that returned does not lift it");
        q.returned("p", 20);
        assert!(q.holds("p", 16).is_none() && q.watch().borrow().is_empty());
        assert_eq!(Quarantined::after("p", 40, 100).until_epoch, 101 + MAX_QUARANTINE_EPOCHS);
    }
}
