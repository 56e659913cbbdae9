//! The slot registry as the validator reads it: each slot's signer read
//! from the chain at most once per `slots:generation` (the event monitor
//! bumps it on every registration, which empties the book), however many
//! submissions name the slot and however many tasks ask at once; slot ids
//! past the registry's total are unregistered without a read. The dequeuer
//! judges every submission with one; the gossip intake judges with another
//! before it relays anything, so a submission signed by anyone but its
//! slot's signer is never relayed or stored.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use alloy::primitives::Address;

use crate::chain::SlotRegistry;

/// How long the registry is trusted without a `SlotRegistered` telling
/// otherwise (a safety net: the event monitor bumps `slots:generation` on
/// every registration, which empties the book at once).
const SIGNER_TTL: Duration = Duration::from_secs(600);

/// What the registry said, for one `slots:generation`: the total number of
/// slots and each slot's signer, each read once (concurrent askers wait for
/// the one read; a failed read is tried again by the next asker).
struct Signers {
    generation: Option<String>,
    since: Instant,
    total: Arc<tokio::sync::OnceCell<u64>>,
    by_slot: HashMap<u64, Arc<tokio::sync::OnceCell<Address>>>,
}

impl Default for Signers {
    fn default() -> Self {
        Self { generation: None, since: Instant::now(), total: Default::default(), by_slot: HashMap::new() }
    }
}

/// Each slot's registered signer, read through `R` and kept per generation.
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

    /// Empties the book when the registry's generation changed (or the
    /// book is older than its TTL).
    pub fn refresh(&self, generation: Option<String>) {
        let mut signers = self.lock();
        if signers.generation != generation || signers.since.elapsed() > SIGNER_TTL {
            *signers = Signers { generation, ..Signers::default() };
        }
    }

    /// The signer registered for `slot_id` if the book knows it without a
    /// read: `Address::ZERO` for a slot id past the known total.
    pub fn cached(&self, slot_id: u64) -> Option<Address> {
        let signers = self.lock();
        if signers.since.elapsed() > SIGNER_TTL {
            return None;
        }
        match signers.total.get() {
            Some(total) if slot_id > *total => Some(Address::ZERO),
            _ => signers.by_slot.get(&slot_id).and_then(|cell| cell.get().copied()),
        }
    }

    /// The signer registered for `slot_id`, read from the chain at most
    /// once per generation; `Address::ZERO` without a read for a slot id
    /// past the registry's total. `Err`: the chain could not be read.
    pub async fn signer(&self, slot_id: u64) -> Result<Address, String> {
        let (total, cell) = {
            let signers = self.lock();
            (signers.total.clone(), signers.by_slot.get(&slot_id).cloned())
        };
        let total = *total.get_or_try_init(|| self.registry.total_slots()).await?;
        if slot_id > total {
            return Ok(Address::ZERO);
        }
        let cell = match cell {
            Some(cell) => cell,
            None => self.lock().by_slot.entry(slot_id).or_default().clone(),
        };
        cell.get_or_try_init(|| self.registry.signer(slot_id)).await.copied()
    }
}

/// A [`SignerBook`] whatever its registry (what the gateway holds).
pub trait Registered: Send + Sync {
    /// [`SignerBook::cached`].
    fn cached(&self, slot_id: u64) -> Option<Address>;
    /// [`SignerBook::signer`].
    fn lookup(&self, slot_id: u64) -> Pin<Box<dyn Future<Output = Result<Address, String>> + Send + '_>>;
    /// [`SignerBook::refresh`].
    fn refresh(&self, generation: Option<String>);
}

impl<R: SlotRegistry> Registered for SignerBook<R> {
    fn cached(&self, slot_id: u64) -> Option<Address> {
        SignerBook::cached(self, slot_id)
    }

    fn lookup(&self, slot_id: u64) -> Pin<Box<dyn Future<Output = Result<Address, String>> + Send + '_>> {
        Box::pin(self.signer(slot_id))
    }

    fn refresh(&self, generation: Option<String>) {
        SignerBook::refresh(self, generation)
    }
}
