//! The work queue under compute dispatch. Pure: no runtime, no clock — the
//! caller says what the anchor head is and when an epoch's window closed,
//! and holds the queue behind its own lock.
//!
//! - **Order** (what [`Queue::pop`] hands out first) is [`rank`], one
//!   function of an item and the host's seed, which the queue and its
//!   proptest model both use; arrival breaks what it leaves tied. A new
//!   scheduling rule is an edit of [`rank`] (and of [`Item`] if it needs a
//!   fact the item does not carry yet). Today: the earliest deadline (an
//!   anchor block); among equal deadlines the costliest expected work first
//!   (longest processing time first: on parallel workers the last one
//!   finishes soonest); then a tie-break that is fixed on one host and
//!   differs between hosts (a hash of the host's seed and the item's key),
//!   so that hosts competing for shared work start in different places.
//! - **Dedupe**: one item per [`Key`] (epoch, project, data source) waiting
//!   or being worked on; the same key again is ignored and counted.
//! - **Bounded**: at most `capacity` items wait; one more drops the
//!   lowest-priority waiting item (the last by [`rank`], then arrival) —
//!   the newcomer itself when it is the lowest — and counts it.
//! - **Workers**: at most `workers` items are out at once, each handed out
//!   with a [`Permit`] that gives its worker back when dropped — on success,
//!   error, panic (unwinding) or timeout (its future dropped) alike, and also
//!   for an item the worker skips, so no ending leaks a worker.
//! - **Expiry**: [`Queue::expire`] drops every waiting item whose deadline the
//!   head has passed; [`Queue::close_epoch`] drops an epoch's waiting items
//!   once its window closed. Both are counted.
//! - **Pause**: while paused nothing is handed out; items still arrive,
//!   expire and are dropped. The executor pauses when a compute finds a
//!   chain out of reach and resumes when the chain answers again
//!   (`LocalExecutor::outage`); what expires meanwhile is a failure naming
//!   the outage, not a miss (`dispatch::Refused::Paused`).

use std::{
    cmp::Reverse,
    collections::{BTreeMap, HashMap, HashSet},
    hash::{Hash, Hasher},
    sync::{Arc, Mutex},
};

/// What is deduplicated: one epoch's work for one slot on one project's
/// data source (`None`: the project whole). Lite slots each compute every
/// project, so the slot is part of the key; a full node's work is its one
/// slot's.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub epoch_id: u64,
    pub slot_id: u64,
    pub project: String,
    pub source: Option<String>,
}

/// One piece of work and what orders it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item<T> {
    pub key: Key,
    /// The anchor block after which its result is of no use.
    pub deadline: u64,
    /// Its expected cost (say, milliseconds last time), any unit.
    pub cost: u64,
    pub payload: T,
}

/// What became of a pushed item (an item not kept comes back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pushed<T> {
    Queued,
    /// Its key is waiting or being worked on already: ignored.
    Duplicate(Item<T>),
    /// The queue was full and it was the lowest in priority: dropped.
    Dropped(Item<T>),
    /// Queued; the queue was full, and this lower item was dropped for it.
    QueuedDropping(Item<T>),
}

impl<T> Pushed<T> {
    /// The key of the item not kept, if any (`Queued`: none).
    pub fn key(&self) -> Option<&Key> {
        match self {
            Pushed::Queued => None,
            Pushed::Duplicate(i) | Pushed::Dropped(i) | Pushed::QueuedDropping(i) => Some(&i.key),
        }
    }
}

/// What the queue did, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub queued: u64,
    pub duplicates: u64,
    /// Dropped because the queue was full (the lowest in priority).
    pub dropped_full: u64,
    /// Dropped because the head passed their deadline while they waited.
    pub expired: u64,
    /// Dropped because their epoch's window closed while they waited.
    pub closed: u64,
    /// Taken back by the caller ([`Queue::withdraw`]: a quarantined project's).
    pub withdrawn: u64,
    pub handed_out: u64,
}

/// Where an item stands in the order (smallest first): what [`rank`] says.
pub type Rank = (u64, Reverse<u64>, u64);

/// **The queue's order**, smallest first: the earliest deadline, then the
/// costliest, then the host's tie-break (module documentation). The queue
/// and its model call nothing else to order items; a rule changes here.
pub fn rank<T>(item: &Item<T>, seed: u64) -> Rank {
    (item.deadline, Reverse(item.cost), tie_break(seed, &item.key))
}

/// An item's place in the queue: its [`rank`], then its arrival.
type Place = (Rank, u64);

/// The queue; see the module's documentation for its rules.
#[derive(Debug)]
pub struct Queue<T> {
    waiting: BTreeMap<Place, Item<T>>,
    places: HashMap<Key, Place>,
    out: Arc<Mutex<HashSet<Key>>>,
    capacity: usize,
    workers: usize,
    seed: u64,
    arrivals: u64,
    paused: bool,
    counters: Counters,
}

/// An item's worker, given back when this is dropped.
#[derive(Debug)]
pub struct Permit {
    key: Key,
    out: Arc<Mutex<HashSet<Key>>>,
}

impl Permit {
    pub fn key(&self) -> &Key {
        &self.key
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.key);
    }
}

/// The host-dependent tie-break of `key` under `seed`.
pub fn tie_break(seed: u64, key: &Key) -> u64 {
    // SipHash with fixed keys: the same on every run of one build.
    let mut h = std::hash::DefaultHasher::new();
    seed.hash(&mut h);
    key.hash(&mut h);
    h.finish()
}

impl<T> Queue<T> {
    /// A queue of at most `capacity` waiting items (at least 1) and
    /// `workers` items out at once (at least 1), ordered with `seed`'s
    /// tie-break (the host's: a hash of its identity, say).
    pub fn new(capacity: usize, workers: usize, seed: u64) -> Self {
        Self {
            waiting: BTreeMap::new(),
            places: HashMap::new(),
            out: Arc::default(),
            capacity: capacity.max(1),
            workers: workers.max(1),
            seed,
            arrivals: 0,
            paused: false,
            counters: Counters::default(),
        }
    }

    fn working(&self) -> std::sync::MutexGuard<'_, HashSet<Key>> {
        self.out.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `item` (module documentation: dedupe, bound).
    pub fn push(&mut self, item: Item<T>) -> Pushed<T> {
        if self.places.contains_key(&item.key) || self.working().contains(&item.key) {
            self.counters.duplicates += 1;
            return Pushed::Duplicate(item);
        }
        self.arrivals += 1;
        let place = (rank(&item, self.seed), self.arrivals);
        self.places.insert(item.key.clone(), place);
        self.waiting.insert(place, item);
        if self.waiting.len() <= self.capacity {
            self.counters.queued += 1;
            return Pushed::Queued;
        }
        self.counters.dropped_full += 1;
        let (lowest, dropped) = self.waiting.pop_last().expect("over capacity: not empty");
        self.places.remove(&dropped.key);
        if lowest == place {
            Pushed::Dropped(dropped)
        } else {
            self.counters.queued += 1;
            Pushed::QueuedDropping(dropped)
        }
    }

    /// The first item in the order, with its worker — none while paused,
    /// while every worker is out, or when nothing waits.
    pub fn pop(&mut self) -> Option<(Item<T>, Permit)> {
        if self.paused || self.working().len() >= self.workers {
            return None;
        }
        let (_, item) = self.waiting.pop_first()?;
        self.places.remove(&item.key);
        self.working().insert(item.key.clone());
        self.counters.handed_out += 1;
        let permit = Permit { key: item.key.clone(), out: self.out.clone() };
        Some((item, permit))
    }

    /// Drops every waiting item whose deadline `head` has passed, in order.
    pub fn expire(&mut self, head: u64) -> Vec<Item<T>> {
        let gone = self.remove_where(|item| item.deadline < head);
        self.counters.expired += gone.len() as u64;
        gone
    }

    /// Drops epoch `epoch_id`'s waiting items (its window closed), in order.
    pub fn close_epoch(&mut self, epoch_id: u64) -> Vec<Item<T>> {
        let gone = self.remove_where(|item| item.key.epoch_id == epoch_id);
        self.counters.closed += gone.len() as u64;
        gone
    }

    /// Takes back the waiting items `gone` picks, in order.
    pub fn withdraw(&mut self, gone: impl Fn(&Key) -> bool) -> Vec<Item<T>> {
        let gone = self.remove_where(|item| gone(&item.key));
        self.counters.withdrawn += gone.len() as u64;
        gone
    }

    /// Takes back the waiting item of `key`, if it waits, uncounted (its
    /// caller gave up waiting).
    pub fn cancel(&mut self, key: &Key) -> Option<Item<T>> {
        let place = self.places.remove(key)?;
        self.waiting.remove(&place)
    }

    fn remove_where(&mut self, gone: impl Fn(&Item<T>) -> bool) -> Vec<Item<T>> {
        let places: Vec<Place> = self.waiting.iter().filter(|(_, item)| gone(item)).map(|(place, _)| *place).collect();
        let mut items = Vec::with_capacity(places.len());
        for place in places {
            if let Some(item) = self.waiting.remove(&place) {
                self.places.remove(&item.key);
                items.push(item);
            }
        }
        items
    }

    /// Nothing is handed out until [`Queue::resume`].
    pub fn pause(&mut self) {
        self.paused = true;
    }

    pub fn resume(&mut self) {
        self.paused = false;
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Items out with a worker now.
    pub fn running(&self) -> usize {
        self.working().len()
    }

    /// Items that may be out at once.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Items that may wait at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(epoch_id: u64, project: &str) -> Key {
        Key { epoch_id, slot_id: 1, project: project.to_owned(), source: None }
    }

    fn item(epoch_id: u64, project: &str, deadline: u64, cost: u64) -> Item<()> {
        Item { key: key(epoch_id, project), deadline, cost, payload: () }
    }

    #[test]
    fn the_earliest_deadline_goes_first_then_the_costliest() {
        let mut q = Queue::new(10, 10, 7);
        q.push(item(2, "late", 200, 1));
        q.push(item(1, "cheap", 100, 1));
        q.push(item(1, "dear", 100, 50));
        let order: Vec<String> = std::iter::from_fn(|| q.pop().map(|(i, _)| i.key.project)).collect();
        assert_eq!(order, ["dear", "cheap", "late"]);
    }

    #[test]
    fn a_key_waiting_or_out_is_a_duplicate_and_comes_back_once_its_worker_is_given_back() {
        let mut q = Queue::new(10, 1, 0);
        assert_eq!(q.push(item(1, "p", 100, 1)), Pushed::Queued);
        assert_eq!(q.push(item(1, "p", 100, 9)), Pushed::Duplicate(item(1, "p", 100, 9)));
        let (_, permit) = q.pop().unwrap();
        assert_eq!(q.push(item(1, "p", 100, 1)), Pushed::Duplicate(item(1, "p", 100, 1)), "out with a worker");
        let other_slot = Item { key: Key { slot_id: 2, ..key(1, "p") }, deadline: 100, cost: 1, payload: () };
        assert_eq!(q.push(other_slot), Pushed::Queued, "another slot's work on the same project");
        drop(permit);
        assert_eq!(q.push(item(1, "p", 100, 1)), Pushed::Queued);
        assert_eq!(q.push(item(1, "p", 100, 1)), Pushed::Duplicate(item(1, "p", 100, 1)), "waiting again");
        assert_eq!(q.counters().duplicates, 3);
    }

    #[test]
    fn full_drops_the_lowest_in_priority_and_counts_it() {
        let mut q = Queue::new(2, 1, 0);
        q.push(item(1, "a", 100, 1));
        q.push(item(1, "b", 300, 1));
        assert_eq!(q.push(item(1, "c", 200, 1)), Pushed::QueuedDropping(item(1, "b", 300, 1)));
        assert_eq!(q.push(item(1, "d", 400, 1)), Pushed::Dropped(item(1, "d", 400, 1)), "the newcomer is the lowest");
        assert_eq!(q.counters().dropped_full, 2);
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn workers_are_bounded_and_given_back_on_a_panic_too() {
        let mut q = Queue::new(10, 2, 0);
        for p in ["a", "b", "c"] {
            q.push(item(1, p, 100, 1));
        }
        let (_, first) = q.pop().unwrap();
        let (_, second) = q.pop().unwrap();
        assert!(q.pop().is_none(), "two workers out");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _held = first;
            panic!("the compute panicked");
        }));
        assert!(panicked.is_err());
        assert_eq!(q.running(), 1, "the panicking worker's permit came back");
        assert!(q.pop().is_some());
        drop(second);
    }

    #[test]
    fn expiry_closing_and_pause_drop_or_hold_what_waits() {
        let mut q = Queue::new(10, 10, 0);
        q.push(item(1, "a", 100, 1));
        q.push(item(1, "b", 105, 1));
        q.push(item(2, "c", 110, 1));
        assert_eq!(q.expire(101), [item(1, "a", 100, 1)]);
        assert_eq!(q.close_epoch(1), [item(1, "b", 105, 1)]);
        q.pause();
        assert!(q.pop().is_none(), "paused");
        q.resume();
        assert_eq!(q.pop().unwrap().0.key, key(2, "c"));
        q.push(item(3, "d", 120, 1));
        q.push(item(3, "e", 120, 1));
        assert_eq!(q.withdraw(|k| k.project == "e"), [item(3, "e", 120, 1)]);
        let c = q.counters();
        assert_eq!((c.expired, c.closed, c.withdrawn), (1, 1, 1));
    }

    #[test]
    fn hosts_break_ties_differently_and_each_host_always_the_same_way() {
        let order = |seed: u64| {
            let mut q = Queue::new(100, 100, seed);
            for p in 0..20 {
                q.push(item(1, &format!("p{p}"), 100, 1));
            }
            std::iter::from_fn(|| q.pop().map(|(i, _)| i.key.project)).collect::<Vec<_>>()
        };
        assert_eq!(order(1), order(1));
        assert_ne!(order(1), order(2));
    }

    mod model {
        use proptest::prelude::*;

        use super::super::*;

        /// The queue as a plain list, every rule spelled out the slow way
        /// (the order is the queue's own [`rank`]: what is modelled is how
        /// the queue keeps to it).
        #[derive(Default)]
        struct Model {
            /// Each waiting item's place, key and deadline.
            waiting: Vec<(Place, Key, u64)>,
            out: Vec<Key>,
            arrivals: u64,
            paused: bool,
        }

        const CAPACITY: usize = 4;
        const WORKERS: usize = 2;
        const SEED: u64 = 11;

        impl Model {
            /// What is not kept, and whether it was a duplicate.
            fn push(&mut self, key: Key, deadline: u64, cost: u64) -> (Option<Key>, bool) {
                if self.waiting.iter().any(|(_, k, _)| *k == key) || self.out.contains(&key) {
                    return (Some(key), true);
                }
                self.arrivals += 1;
                let place = (rank(&Item { key: key.clone(), deadline, cost, payload: () }, SEED), self.arrivals);
                self.waiting.push((place, key, deadline));
                if self.waiting.len() <= CAPACITY {
                    return (None, false);
                }
                let lowest = (0..self.waiting.len()).max_by_key(|&i| self.waiting[i].0).unwrap();
                (Some(self.waiting.remove(lowest).1), false)
            }

            fn pop(&mut self) -> Option<Key> {
                if self.paused || self.out.len() >= WORKERS || self.waiting.is_empty() {
                    return None;
                }
                let first = (0..self.waiting.len()).min_by_key(|&i| self.waiting[i].0).unwrap();
                let (_, key, _) = self.waiting.remove(first);
                self.out.push(key.clone());
                Some(key)
            }

            fn remove_where(&mut self, gone: impl Fn(&Key, u64) -> bool) -> Vec<Key> {
                let mut all: Vec<(Place, Key, u64)> = self.waiting.drain(..).collect();
                all.sort_by_key(|(place, _, _)| *place);
                let (gone, kept): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, k, deadline)| gone(k, *deadline));
                self.waiting = kept;
                gone.into_iter().map(|(_, k, _)| k).collect()
            }
        }

        #[derive(Clone, Debug)]
        enum Op {
            Push {
                epoch: u64,
                project: u8,
                deadline: u64,
                cost: u64,
            },
            Pop,
            /// Gives back the n-th worker out (if any).
            Finish(usize),
            Expire(u64),
            Close(u64),
            Withdraw(u8),
            Pause,
            Resume,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0..3u64, 0..6u8, 0..20u64, 0..4u64)
                    .prop_map(|(epoch, project, deadline, cost)| Op::Push { epoch, project, deadline, cost }),
                3 => Just(Op::Pop),
                2 => (0..3usize).prop_map(Op::Finish),
                1 => (0..20u64).prop_map(Op::Expire),
                1 => (0..3u64).prop_map(Op::Close),
                1 => (0..6u8).prop_map(Op::Withdraw),
                1 => Just(Op::Pause),
                1 => Just(Op::Resume),
            ]
        }

        proptest! {
            #[test]
            fn the_queue_does_what_the_plain_model_does(ops in proptest::collection::vec(op(), 1..120)) {
                let mut q: Queue<()> = Queue::new(CAPACITY, WORKERS, SEED);
                let mut m = Model::default();
                let mut permits: Vec<Permit> = Vec::new();
                for op in ops {
                    match op {
                        Op::Push { epoch, project, deadline, cost } => {
                            let key = Key { epoch_id: epoch, slot_id: 1, project: format!("p{project}"), source: None };
                            let got = q.push(Item { key: key.clone(), deadline, cost, payload: () });
                            let got = (got.key().cloned(), matches!(got, Pushed::Duplicate(_)));
                            prop_assert_eq!(got, m.push(key, deadline, cost));
                        }
                        Op::Pop => {
                            let got = q.pop().map(|(item, permit)| {
                                permits.push(permit);
                                item.key
                            });
                            prop_assert_eq!(got, m.pop());
                        }
                        Op::Finish(n) => {
                            if n < permits.len() {
                                let permit = permits.remove(n);
                                let at = m.out.iter().position(|k| k == permit.key()).unwrap();
                                m.out.remove(at);
                            }
                        }
                        Op::Expire(head) => {
                            let got: Vec<Key> = q.expire(head).into_iter().map(|i| i.key).collect();
                            prop_assert_eq!(got, m.remove_where(|_, deadline| deadline < head));
                        }
                        Op::Close(epoch) => {
                            let got: Vec<Key> = q.close_epoch(epoch).into_iter().map(|i| i.key).collect();
                            prop_assert_eq!(got, m.remove_where(|k, _| k.epoch_id == epoch));
                        }
                        Op::Withdraw(project) => {
                            let p = format!("p{project}");
                            let got: Vec<Key> = q.withdraw(|k| k.project == p).into_iter().map(|i| i.key).collect();
                            prop_assert_eq!(got, m.remove_where(|k, _| k.project == p));
                        }
                        Op::Pause => { q.pause(); m.paused = true; }
                        Op::Resume => { q.resume(); m.paused = false; }
                    }
                    prop_assert_eq!(q.len(), m.waiting.len());
                    prop_assert_eq!(q.running(), m.out.len());
                    prop_assert!(q.len() <= CAPACITY && q.running() <= WORKERS);
                }
            }
        }
    }
}
