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
    /// The anchor block that released this epoch: pin every read of the
    /// anchor chain to it (`eth_call` at this block number, never `latest`)
    /// so every node reads the same state (docs/protocol.md §10).
    pub anchor_block: u64,
    /// `{POWERLOOM_CHAIN}-{NAMESPACE}-{SOURCE_CHAIN}`.
    pub namespace: RString,
    /// The project type from projects.json this processor serves.
    pub project_type: RString,
}

impl EpochContext {
    /// Starts an epoch context for tests over source blocks `begin..=end`:
    /// slot 1 of 1, day 0, namespace `devnet-UNISWAPV3-ETH`, no project type
    /// until set.
    ///
    /// ```
    /// use lite_node_plugin_api::EpochContext;
    /// let epoch = EpochContext::builder(7, 100, 109).slot(3, 50).project_type("baseSnapshot").build();
    /// assert_eq!((epoch.slot_id, epoch.total_slots), (3, 50));
    /// ```
    pub fn builder(epoch_id: u64, begin: u64, end: u64) -> EpochContextBuilder {
        EpochContextBuilder(EpochContext {
            epoch_id,
            begin,
            end,
            day_id: 0,
            slot_id: 1,
            total_slots: 1,
            anchor_block: 0,
            namespace: "devnet-UNISWAPV3-ETH".into(),
            project_type: RString::new(),
        })
    }
}

/// Builds an [`EpochContext`] for tests: see [`EpochContext::builder`].
#[derive(Clone, Debug)]
pub struct EpochContextBuilder(EpochContext);

impl EpochContextBuilder {
    /// This node's slot and the registered total.
    pub fn slot(mut self, slot_id: u64, total_slots: u64) -> Self {
        self.0.slot_id = slot_id;
        self.0.total_slots = total_slots;
        self
    }

    /// The anchor block that released the epoch.
    pub fn anchor_block(mut self, block: u64) -> Self {
        self.0.anchor_block = block;
        self
    }

    /// The data market's day.
    pub fn day(mut self, day_id: u64) -> Self {
        self.0.day_id = day_id;
        self
    }

    /// `{POWERLOOM_CHAIN}-{NAMESPACE}-{SOURCE_CHAIN}`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.0.namespace = namespace.into();
        self
    }

    /// The project type the processor serves.
    pub fn project_type(mut self, project_type: &str) -> Self {
        self.0.project_type = project_type.into();
        self
    }

    /// The context.
    pub fn build(self) -> EpochContext {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::EpochContext;

    #[test]
    fn the_builder_sets_what_it_is_told_and_defaults_the_rest() {
        let epoch = EpochContext::builder(7, 100, 109).slot(3, 50).day(2).project_type("baseSnapshot").build();
        assert_eq!((epoch.epoch_id, epoch.begin, epoch.end, epoch.day_id), (7, 100, 109, 2));
        assert_eq!((epoch.slot_id, epoch.total_slots), (3, 50));
        assert_eq!((epoch.namespace.as_str(), epoch.project_type.as_str()), ("devnet-UNISWAPV3-ETH", "baseSnapshot"));
        let other = EpochContext::builder(1, 5, 5).namespace("mainnet-UNISWAPV3-ETH").build();
        assert_eq!((other.slot_id, other.total_slots, other.namespace.as_str()), (1, 1, "mainnet-UNISWAPV3-ETH"));
    }
}
