//! The slot registry as the validator reads it: each slot's signer **as of
//! the release block of the epoch being judged**, so that every validator
//! judges a submission alike whatever its cache, backlog or poll timing
//! (docs/protocol.md §11), and a slot reassigned at block B is judged by
//! its new signer for every epoch released from B on.
//!
//! Without a read per epoch: the event monitor records every
//! `SlotRegistered` (a registration, reassignment or removal) with its block
//! in `slots:changes`, and the blocks that record is complete for in
//! `slots:recorded`, before it opens the epochs released in those blocks.
//! Between two recorded changes of a slot its signer is one (an *era*), read
//! once at any block of it however many epochs, submissions and tasks ask;
//! the registry's total likewise, between any two changes. A block outside
//! the record (before the monitor's first scan, or past what this book
//! read of it) is read as of that block, on its own. Slot ids past the
//! total are unregistered without a read.
//!
//! The dequeuer judges every submission with one book; the gossip intake
//! judges with another before it relays anything.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
};

use alloy::primitives::Address;
use redis::aio::ConnectionManager;

use crate::{chain::SlotRegistry, keys::Keys};

/// Signers (and totals) kept before the book starts again: many eras of
/// many slots, far more than a market's slots over a day of changes.
const KEPT: usize = 200_000;

/// A stretch of anchor blocks over which a slot's signer (or the total)
/// cannot have changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Era {
    /// From this recorded change (0: from the start of the record) to the
    /// next one.
    Since(u64),
    /// This block alone (outside the record).
    At(u64),
}

/// What the event monitor recorded of the registry, as last read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// `slots:generation` when read (bumped with every recorded change).
    pub generation: Option<String>,
    /// The record is complete for anchor blocks `from..=to` (`to` 0: none).
    pub from: u64,
    pub to: u64,
    /// Each slot's changes' blocks, ascending.
    pub by_slot: HashMap<u64, Vec<u64>>,
    /// Every change's block, ascending (the total's eras).
    pub all: Vec<u64>,
    /// Each snapshotter's enabled-or-disabled changes' blocks, ascending.
    pub by_signer: HashMap<Address, Vec<u64>>,
}

impl Record {
    /// A record from `(slot, block)` changes.
    pub fn new(generation: Option<String>, from: u64, to: u64, changes: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let mut record = Self { generation, from, to, ..Self::default() };
        for (slot, block) in changes {
            record.by_slot.entry(slot).or_default().push(block);
            record.all.push(block);
        }
        for blocks in record.by_slot.values_mut() {
            blocks.sort_unstable();
            blocks.dedup();
        }
        record.all.sort_unstable();
        record.all.dedup();
        record
    }

    /// The same record with snapshotters enabled or disabled at blocks.
    pub fn with_snapshotters(mut self, changes: impl IntoIterator<Item = (Address, u64)>) -> Self {
        for (signer, block) in changes {
            self.by_signer.entry(signer).or_default().push(block);
        }
        for blocks in self.by_signer.values_mut() {
            blocks.sort_unstable();
            blocks.dedup();
        }
        self
    }

    /// The era of `block` among `changes`.
    fn era(&self, changes: Option<&Vec<u64>>, block: u64) -> Era {
        if self.to == 0 || block < self.from || block > self.to {
            return Era::At(block);
        }
        let changes = changes.map_or(&[][..], Vec::as_slice);
        let after = changes.partition_point(|c| *c <= block);
        Era::Since(if after == 0 { 0 } else { changes[after - 1] })
    }
}

#[derive(Default)]
struct Signers {
    record: Record,
    by_slot: HashMap<(u64, Era), Arc<tokio::sync::OnceCell<Address>>>,
    totals: HashMap<Era, Arc<tokio::sync::OnceCell<u64>>>,
    enabled: HashMap<(Address, Era), Arc<tokio::sync::OnceCell<bool>>>,
}

impl Signers {
    fn kept(&self) -> usize {
        self.by_slot.len() + self.totals.len() + self.enabled.len()
    }
}

/// Whether `new` only adds to `old` past block `old_to`: every key's
/// changes start with the old ones and add only later blocks.
fn only_added<K: Eq + std::hash::Hash>(old: &HashMap<K, Vec<u64>>, new: &HashMap<K, Vec<u64>>, old_to: u64) -> bool {
    old.keys().all(|k| new.contains_key(k))
        && new.iter().all(|(k, blocks)| {
            let had = old.get(k).map_or(&[][..], Vec::as_slice);
            blocks.starts_with(had) && blocks[had.len()..].iter().all(|b| *b > old_to)
        })
}

/// Each slot's registered signer as of a block, read through `R` once per era.
pub struct SignerBook<R> {
    registry: Arc<R>,
    signers: Mutex<Signers>,
}

impl<R: SlotRegistry> SignerBook<R> {
    pub fn new(registry: Arc<R>) -> Self {
        Self { registry, signers: Mutex::new(Signers::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Signers> {
        self.signers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The generation this book's record was read at.
    pub fn generation(&self) -> Option<String> {
        self.lock().record.generation.clone()
    }

    /// Takes a newer read of the monitor's record: the signers known stay
    /// (an era never changes its signer; the eras near the record's old end
    /// are keyed by the block they were read at), unless the changes
    /// themselves were rewritten (Redis lost them), which starts again.
    pub fn update(&self, record: Record) {
        let mut signers = self.lock();
        // A change recorded where the old record claimed none (in a range
        // it said was complete) voids what was read for that range.
        let old = &signers.record;
        let same_past = record.from == old.from
            && only_added(&old.by_slot, &record.by_slot, old.to)
            && only_added(&old.by_signer, &record.by_signer, old.to);
        if !same_past || signers.kept() > KEPT {
            *signers = Signers::default();
        }
        signers.record = record;
    }

    /// Reads the monitor's record from Redis (`slots:recorded` and the
    /// generation together; the changes only when the generation moved) and
    /// takes it. Read **after** the epochs a caller judges: an epoch seen
    /// open has every change up to its release block recorded.
    pub async fn sync(&self, conn: &mut ConnectionManager, keys: &Keys) -> redis::RedisResult<()> {
        let (range, generation): ((Option<u64>, Option<u64>), Option<String>) = redis::pipe()
            .atomic()
            .cmd("HMGET")
            .arg(keys.slots_recorded())
            .arg("from")
            .arg("to")
            .get(keys.slots_generation())
            .query_async(conn)
            .await?;
        let (from, to) = (range.0.unwrap_or(0), range.1.unwrap_or(0));
        {
            let mut signers = self.lock();
            if signers.record.generation == generation && signers.record.from == from {
                if to > signers.record.to {
                    signers.record.to = to;
                    // Blocks read on their own, now inside the record: their
                    // eras are keyed by change from here on.
                    signers.by_slot.retain(|(_, era), _| !matches!(era, Era::At(b) if *b <= to));
                    signers.totals.retain(|era, _| !matches!(era, Era::At(b) if *b <= to));
                    signers.enabled.retain(|(_, era), _| !matches!(era, Era::At(b) if *b <= to));
                }
                return Ok(());
            }
        }
        let members: Vec<String> =
            redis::cmd("ZRANGE").arg(keys.slots_changes()).arg(0).arg(-1).query_async(conn).await?;
        // `{slot}:{block}`, or `{0x snapshotter}:{block}` (enabled or
        // disabled).
        let (mut slots, mut snapshotters) = (Vec::new(), Vec::new());
        for m in &members {
            let Some((what, block)) = m.split_once(':') else { continue };
            let Ok(block) = block.parse::<u64>() else { continue };
            if what.starts_with("0x") {
                if let Ok(signer) = what.parse::<Address>() {
                    snapshotters.push((signer, block));
                }
            } else if let Ok(slot) = what.parse::<u64>() {
                slots.push((slot, block));
            }
        }
        self.update(Record::new(generation, from, to, slots).with_snapshotters(snapshotters));
        Ok(())
    }

    /// The block a read "as of now" is made at: the last the record is
    /// complete for (`None`: the monitor has recorded nothing yet).
    pub fn now_block(&self) -> Option<u64> {
        let to = self.lock().record.to;
        (to > 0).then_some(to)
    }

    /// The signer registered for `slot_id` as of block `at` (`None`: the
    /// newest block the record is complete for) if the book knows it
    /// without a read: `Address::ZERO` for a slot id past the total then.
    pub fn cached(&self, slot_id: u64, at: Option<u64>) -> Option<Address> {
        let block = at.or_else(|| self.now_block())?;
        let signers = self.lock();
        let total_era = signers.record.era(Some(&signers.record.all), block);
        match signers.totals.get(&total_era).and_then(|cell| cell.get()) {
            Some(total) if slot_id > *total => Some(Address::ZERO),
            _ => {
                let era = signers.record.era(signers.record.by_slot.get(&slot_id), block);
                signers.by_slot.get(&(slot_id, era)).and_then(|cell| cell.get().copied())
            }
        }
    }

    /// The signer registered for `slot_id` as of block `at` (`None`: the
    /// newest block the record is complete for), read from the chain at
    /// most once per era; `Address::ZERO` without a read for a slot id past
    /// the registry's total then. `Err`: the chain could not be read, or
    /// the monitor has recorded nothing yet.
    pub async fn signer(&self, slot_id: u64, at: Option<u64>) -> Result<Address, String> {
        let block = at
            .or_else(|| self.now_block())
            .ok_or("the event monitor has not recorded the slot registry yet (is it running?)")?;
        let (total, cell) = {
            let mut signers = self.lock();
            // Bounded: blocks read on their own (outside the record) each
            // take a cell until the record covers them.
            if signers.kept() > KEPT {
                signers.by_slot.clear();
                signers.totals.clear();
                signers.enabled.clear();
            }
            let total_era = signers.record.era(Some(&signers.record.all), block);
            let era = signers.record.era(signers.record.by_slot.get(&slot_id), block);
            let total = signers.totals.entry(total_era).or_default().clone();
            (total, signers.by_slot.get(&(slot_id, era)).cloned().map(|c| (c, era)))
        };
        let total = *total.get_or_try_init(|| self.registry.total_slots(block)).await?;
        if slot_id > total {
            return Ok(Address::ZERO);
        }
        let cell = match cell {
            Some((cell, _)) => cell,
            None => {
                let mut signers = self.lock();
                let era = signers.record.era(signers.record.by_slot.get(&slot_id), block);
                signers.by_slot.entry((slot_id, era)).or_default().clone()
            }
        };
        cell.get_or_try_init(|| self.registry.signer(slot_id, block)).await.copied()
    }

    /// Whether `signer` was an enabled snapshotter as of block `at` (`None`:
    /// the newest block the record is complete for), read from the chain
    /// at most once per era of its enabled-or-disabled changes. `Err`: the
    /// chain could not be read, or the monitor has recorded nothing yet.
    pub async fn enabled(&self, signer: Address, at: Option<u64>) -> Result<bool, String> {
        let block = at
            .or_else(|| self.now_block())
            .ok_or("the event monitor has not recorded the slot registry yet (is it running?)")?;
        let cell = {
            let mut signers = self.lock();
            if signers.kept() > KEPT {
                signers.enabled.clear();
            }
            let era = signers.record.era(signers.record.by_signer.get(&signer), block);
            signers.enabled.entry((signer, era)).or_default().clone()
        };
        cell.get_or_try_init(|| self.registry.enabled(signer, block)).await.copied()
    }
}

/// A [`SignerBook`] whatever its registry (what the gateway holds).
pub trait Registered: Send + Sync {
    /// [`SignerBook::cached`].
    fn cached(&self, slot_id: u64, at: Option<u64>) -> Option<Address>;
    /// [`SignerBook::signer`].
    fn lookup(
        &self,
        slot_id: u64,
        at: Option<u64>,
    ) -> Pin<Box<dyn Future<Output = Result<Address, String>> + Send + '_>>;
    /// [`SignerBook::now_block`].
    fn now_block(&self) -> Option<u64>;
    /// [`SignerBook::sync`].
    fn sync<'a>(
        &'a self,
        conn: &'a mut ConnectionManager,
        keys: &'a Keys,
    ) -> Pin<Box<dyn Future<Output = redis::RedisResult<()>> + Send + 'a>>;
}

impl<R: SlotRegistry> Registered for SignerBook<R> {
    fn cached(&self, slot_id: u64, at: Option<u64>) -> Option<Address> {
        SignerBook::cached(self, slot_id, at)
    }

    fn lookup(
        &self,
        slot_id: u64,
        at: Option<u64>,
    ) -> Pin<Box<dyn Future<Output = Result<Address, String>> + Send + '_>> {
        Box::pin(self.signer(slot_id, at))
    }

    fn now_block(&self) -> Option<u64> {
        SignerBook::now_block(self)
    }

    fn sync<'a>(
        &'a self,
        conn: &'a mut ConnectionManager,
        keys: &'a Keys,
    ) -> Pin<Box<dyn Future<Output = redis::RedisResult<()>> + Send + 'a>> {
        Box::pin(SignerBook::sync(self, conn, keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry with a history: slot 1 is A's until block 100, B's from
    /// it; slot 2 is registered at block 150. Counts its reads.
    struct History {
        reads: std::sync::atomic::AtomicUsize,
    }

    const A: Address = Address::repeat_byte(0xa);
    const B: Address = Address::repeat_byte(0xb);
    const C: Address = Address::repeat_byte(0xc);

    impl SlotRegistry for History {
        async fn signer(&self, slot_id: u64, block: u64) -> Result<Address, String> {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(match (slot_id, block) {
                (1, ..100) => A,
                (1, _) => B,
                (2, 150..) => C,
                _ => Address::ZERO,
            })
        }

        async fn total_slots(&self, block: u64) -> Result<u64, String> {
            Ok(if block >= 150 { 2 } else { 1 })
        }

        /// B is disabled from block 200 to block 250.
        async fn enabled(&self, signer: Address, block: u64) -> Result<bool, String> {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(!(signer == B && (200..250).contains(&block)))
        }
    }

    fn book() -> (Arc<History>, SignerBook<History>) {
        let history = Arc::new(History { reads: Default::default() });
        (history.clone(), SignerBook::new(history))
    }

    fn reads(h: &History) -> usize {
        h.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Two validators judge an epoch released before a reassignment and one
    /// released after it, one having read the record before the
    /// reassignment was mined, the other after: they agree on both.
    #[tokio::test]
    async fn validators_agree_whenever_they_read_the_record() {
        let (_, early) = book();
        let (_, late) = book();
        // Read when the record reached block 90: no change yet.
        early.update(Record::new(Some("0".into()), 10, 90, [(1, 10)]));
        // Read when it reached block 200: the reassignment at 100, slot 2 at 150.
        late.update(Record::new(Some("2".into()), 10, 200, [(1, 10), (1, 100), (2, 150)]));
        for (slot, release, expected) in [(1, 95, A), (1, 120, B), (2, 120, Address::ZERO), (2, 160, C)] {
            assert_eq!(early.signer(slot, Some(release)).await.unwrap(), expected, "early, slot {slot} at {release}");
            assert_eq!(late.signer(slot, Some(release)).await.unwrap(), expected, "late, slot {slot} at {release}");
        }
    }

    /// A snapshotter disabled, then enabled again: judged as of each
    /// release alike by a book that read the record before the disabling
    /// and one that read it after, one read per era of that snapshotter's
    /// changes, none for a snapshotter whose flag never changed.
    #[tokio::test]
    async fn a_disabled_snapshotter_is_judged_as_of_each_release_one_read_an_era() {
        let (history, late) = book();
        let (_, early) = book();
        early.update(Record::new(Some("1".into()), 10, 150, [(1, 100)]));
        late.update(Record::new(Some("3".into()), 10, 400, [(1, 100)]).with_snapshotters([(B, 200), (B, 250)]));
        for release in (120..400).step_by(10) {
            let expected = !(200..250).contains(&release);
            assert_eq!(late.enabled(B, Some(release)).await.unwrap(), expected, "late, at {release}");
        }
        assert_eq!(reads(&history), 3, "one read for each of B's three eras");
        for release in (20..400).step_by(10) {
            assert!(late.enabled(A, Some(release)).await.unwrap());
        }
        assert_eq!(reads(&history), 4, "A never changed: one read");
        assert!(early.enabled(B, Some(140)).await.unwrap());
        // The early book, read again after the disabling was recorded.
        early.update(Record::new(Some("3".into()), 10, 400, [(1, 100)]).with_snapshotters([(B, 200), (B, 250)]));
        assert!(!early.enabled(B, Some(220)).await.unwrap(), "disabled as of 220");
        assert!(early.enabled(B, Some(140)).await.unwrap(), "enabled as of 140, still");
    }

    #[tokio::test]
    async fn one_read_an_era_however_many_epochs() {
        let (history, book) = book();
        book.update(Record::new(Some("1".into()), 10, 300, [(1, 10), (1, 100)]));
        for release in 20..100 {
            assert_eq!(book.signer(1, Some(release)).await.unwrap(), A);
        }
        for release in 100..300 {
            assert_eq!(book.signer(1, Some(release)).await.unwrap(), B);
        }
        assert_eq!(reads(&history), 2, "one read for each era");
        assert_eq!(book.cached(1, Some(50)), Some(A));
        assert_eq!(book.cached(1, Some(250)), Some(B));
        // Past the record: read as of that block, not taken from an era.
        assert_eq!(book.cached(1, Some(301)), None);
        assert_eq!(book.signer(1, Some(301)).await.unwrap(), B);
        assert_eq!(reads(&history), 3);
    }

    #[tokio::test]
    async fn a_slot_past_the_total_then_is_nobodys_without_a_read() {
        let (history, book) = book();
        book.update(Record::new(Some("1".into()), 10, 300, [(1, 10), (2, 150)]));
        assert_eq!(book.signer(2, Some(120)).await.unwrap(), Address::ZERO);
        assert_eq!(book.signer(9, Some(200)).await.unwrap(), Address::ZERO);
        assert_eq!(reads(&history), 0);
        assert_eq!(book.signer(2, None).await.unwrap(), C, "as of the record's end");
    }

    #[tokio::test]
    async fn a_rewritten_record_starts_again() {
        let (history, book) = book();
        book.update(Record::new(Some("1".into()), 10, 200, [(1, 10)]));
        assert_eq!(book.signer(1, Some(150)).await.unwrap(), B);
        // Redis lost the record and the monitor wrote it again, with the
        // change at 100 it had missed: what was read for 150 is not reused.
        book.update(Record::new(Some("1".into()), 10, 200, [(1, 10), (1, 100)]));
        assert_eq!(book.signer(1, Some(50)).await.unwrap(), A);
        assert_eq!(reads(&history), 2);
    }
}
