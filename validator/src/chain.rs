//! What the dequeuer reads of the chains, as a trait (`ChainReads`), so its
//! checks run on any source of those facts: `service::AnchorChain` reads
//! them from the anchor and the compute package's assignment rule; tests
//! implement it on a table.

use std::future::Future;

use alloy::primitives::Address;

/// An epoch as the event monitor recorded it (`epoch:{id}:state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochFacts {
    pub epoch_id: u64,
    /// Anchor block the epoch was released in.
    pub release_block: u64,
    /// Source-chain blocks the epoch covers.
    pub begin: u64,
    pub end: u64,
}

pub use lite_node_protocol::submission::Selection;

/// The slot registry's reads (the gossip intake's and the dequeuer's), as
/// of an anchor block: an epoch is judged by the registry as it stood at
/// its release. `Err` means the chain could not be read, never that a
/// slot is wrong.
pub trait SlotRegistry: Send + Sync + 'static {
    /// The signer registered for `slot_id` as of anchor block `block`;
    /// `Address::ZERO` when none was.
    fn signer(&self, slot_id: u64, block: u64) -> impl Future<Output = Result<Address, String>> + Send;

    /// The highest slot id that could hold a signer as of `block` (slots
    /// are numbered from 1): the registry's total, or a full node of the
    /// market past it (a market may count only its lite nodes). A slot id
    /// past it is nobody's, with no read.
    fn total_slots(&self, block: u64) -> impl Future<Output = Result<u64, String>> + Send;

    /// Whether `signer` was an enabled snapshotter (`allSnapshotters`) as
    /// of anchor block `block`. A registry that cannot disable anyone (a
    /// test's table) need not say.
    fn enabled(&self, signer: Address, block: u64) -> impl Future<Output = Result<bool, String>> + Send {
        let _ = (signer, block);
        std::future::ready(Ok(true))
    }
}

/// The chain reads the dequeuer makes: the registry's, and the assignment
/// rule. `Err` means the chain could not be read (the submission is given
/// back and tried again), never that the submission is wrong.
pub trait ChainReads: SlotRegistry {
    /// The compute package's assignment rule for `epoch`, applied to
    /// `slot_id` and `project_id`.
    fn selection(
        &self,
        epoch: EpochFacts,
        slot_id: u64,
        project_id: &str,
    ) -> impl Future<Output = Result<Selection, String>> + Send;
}
