//! What the validator's benchmarks share: a registry where every slot is
//! registered with its key and selected, the market they run in, and each
//! slot's key.

use std::collections::HashMap;

use alloy::primitives::Address;
use lite_node_protocol::{
    eip712::{Request, Signer},
    proto,
    submission::Scope,
};
use lite_node_validator::chain::{ChainReads, EpochFacts, Selection, SlotRegistry};

pub const CHAIN_ID: u64 = 31337;

/// Every slot registered with its key; every slot selected.
pub struct Registry(pub HashMap<u64, Address>);

impl Registry {
    /// Slots `1..=slots`, each registered to [`key`]'s address.
    pub fn of(slots: u64) -> Self {
        Self((1..=slots).map(|s| (s, signer(s).address())).collect())
    }
}

impl SlotRegistry for Registry {
    async fn signer(&self, slot_id: u64, _: u64) -> Result<Address, String> {
        Ok(self.0.get(&slot_id).copied().unwrap_or(Address::ZERO))
    }

    async fn total_slots(&self, _: u64) -> Result<u64, String> {
        Ok(self.0.len() as u64)
    }
}

impl ChainReads for Registry {
    async fn selection(&self, _: EpochFacts, _: u64, _: &str) -> Result<Selection, String> {
        Ok(Selection::Selected)
    }
}

pub fn scope() -> Scope {
    Scope {
        data_market: "0x0000000000000000000000000000000000000d01".parse().unwrap(),
        protocol_state: "0x0000000000000000000000000000000000000501".parse().unwrap(),
    }
}

pub fn key(slot: u64) -> [u8; 32] {
    let mut k = [3u8; 32];
    k[..8].copy_from_slice(&slot.to_be_bytes());
    k
}

/// Slot `slot`'s signer.
pub fn signer(slot: u64) -> Signer {
    Signer::new(&key(slot), CHAIN_ID, scope().protocol_state).unwrap()
}

/// `request` signed by `signer`, in the market's envelope.
pub fn signed(signer: &Signer, request: &Request) -> proto::SnapshotSubmission {
    proto::SnapshotSubmission {
        signature: signer.sign(request).unwrap(),
        request: Some(request.into()),
        header: String::new(),
        data_market: scope().data_market.to_string(),
        node_version: None,
        protocol_state: scope().protocol_state.to_string(),
        snapshot: None,
    }
}
