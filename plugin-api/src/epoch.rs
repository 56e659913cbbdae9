//! What a processor is told about the epoch it works on.

use abi_stable::{StableAbi, std_types::RString};

/// One source-chain block of the epoch's range, preloaded by the runtime.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct BlockDetail {
    /// Block number on the source chain.
    pub number: u64,
    /// Block hash, `0x`-prefixed lower-case hex.
    pub hash: RString,
    /// Block timestamp, seconds since the Unix epoch.
    pub timestamp: u64,
}

/// The epoch a processor is asked to compute, and who is asking.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct EpochContext {
    /// Epoch id as released on the anchor chain.
    pub epoch_id: u64,
    /// First source-chain block of the epoch (inclusive).
    pub begin: u64,
    /// Last source-chain block of the epoch (inclusive).
    pub end: u64,
    /// The data market's day the epoch belongs to (0 when not known).
    pub day_id: u64,
    /// This node's slot id.
    pub slot_id: u64,
    /// Total registered slots (`getTotalNodeCount()`), 0 when not known.
    pub total_slots: u64,
    /// `{POWERLOOM_CHAIN}-{NAMESPACE}-{SOURCE_CHAIN}`.
    pub namespace: RString,
    /// The project type from projects.json this processor serves.
    pub project_type: RString,
}
