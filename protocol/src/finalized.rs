//! What the anchor chain finalized, read the same way by every node
//! (docs/protocol.md §10, `previousSnapshots`; §12).
//!
//! A snapshot may name earlier results only as the chain records them:
//! `maxSnapshotsCid(dataMarket, projectId, epochId)` with status
//! `FINALIZED`, for the [`PREVIOUS_EPOCHS`] epochs before the one computed,
//! read at the anchor block that released it. Two honest nodes then write
//! the same bytes whatever each of them computed or stored before.

use alloy::{
    primitives::{Address, U256},
    sol_types::SolCall,
};

use crate::contracts::maxSnapshotsCidCall;

/// How many epochs before the computed one `previousSnapshots` looks at.
pub const PREVIOUS_EPOCHS: u64 = 5;

/// `maxSnapshotsCid`'s status of a finalized CID.
pub const FINALIZED: u8 = 1;

/// The epochs whose finalized CIDs make up `epoch_id`'s
/// `previousSnapshots`, oldest first: the five before it (fewer near the
/// first epoch, which is 1).
pub fn previous_epochs(epoch_id: u64) -> std::ops::Range<u64> {
    epoch_id.saturating_sub(PREVIOUS_EPOCHS).max(1)..epoch_id.max(1)
}

/// The `eth_call` params (JSON) reading `project_id`'s CID for `epoch_id`
/// from ProtocolState at anchor block `block`.
pub fn max_snapshots_cid_params(
    protocol_state: Address,
    data_market: Address,
    project_id: &str,
    epoch_id: u64,
    block: u64,
) -> serde_json::Value {
    let call = maxSnapshotsCidCall {
        dataMarketAddress: data_market,
        projectId: project_id.to_owned(),
        epochId: U256::from(epoch_id),
    };
    serde_json::json!([
        {"to": protocol_state.to_string(), "data": format!("0x{}", hex::encode(call.abi_encode()))},
        crate::to_quantity(block),
    ])
}

/// The `eth_call` params (JSON) reading `epochBatch(dataMarket, epochId)`
/// from ProtocolState at anchor block `block`: what a market that finalizes
/// roots only reads instead of its pairs ([`finalized_root`]).
pub fn epoch_batch_params(
    protocol_state: Address,
    data_market: Address,
    epoch_id: u64,
    block: u64,
) -> serde_json::Value {
    let call = crate::contracts::epochBatchCall { dataMarketAddress: data_market, epochId: U256::from(epoch_id) };
    serde_json::json!([
        {"to": protocol_state.to_string(), "data": format!("0x{}", hex::encode(call.abi_encode()))},
        crate::to_quantity(block),
    ])
}

/// The root in an `epochBatch` answer when the epoch is finalized; `None`
/// while it is not.
pub fn finalized_root(answer: &str) -> Result<Option<alloy::primitives::B256>, String> {
    let hex_text = answer.trim().trim_matches('"');
    let bytes = hex::decode(hex_text.trim_start_matches("0x"))
        .map_err(|e| format!("epochBatch answered something that is not hex ({e})"))?;
    let decoded = crate::contracts::epochBatchCall::abi_decode_returns(&bytes)
        .map_err(|e| format!("epochBatch answered {} bytes that do not decode ({e})", bytes.len()))?;
    Ok(decoded.finalized.then_some(decoded.root))
}

/// The CID in a `maxSnapshotsCid` answer (hex, `0x`-prefixed, as a JSON
/// string or bare) when its status is `FINALIZED`; `None` for a pending or
/// missing one.
pub fn finalized_cid(answer: &str) -> Result<Option<String>, String> {
    let hex_text = answer.trim().trim_matches('"');
    let bytes = hex::decode(hex_text.trim_start_matches("0x"))
        .map_err(|e| format!("maxSnapshotsCid answered something that is not hex ({e})"))?;
    let decoded = maxSnapshotsCidCall::abi_decode_returns(&bytes)
        .map_err(|e| format!("maxSnapshotsCid answered {} bytes that do not decode ({e})", bytes.len()))?;
    Ok((decoded._1 == FINALIZED && !decoded._0.is_empty()).then_some(decoded._0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::maxSnapshotsCidReturn;

    #[test]
    fn the_five_epochs_before_never_epoch_zero() {
        assert_eq!(previous_epochs(10), 5..10);
        assert_eq!(previous_epochs(3), 1..3);
        assert_eq!(previous_epochs(1), 1..1);
        assert!(previous_epochs(0).is_empty());
    }

    #[test]
    fn only_a_finalized_cid_counts() {
        let answer = |cid: &str, status: u8| {
            let r = maxSnapshotsCidReturn { _0: cid.to_owned(), _1: status };
            format!("\"0x{}\"", hex::encode(maxSnapshotsCidCall::abi_encode_returns(&r)))
        };
        assert_eq!(finalized_cid(&answer("bafkreia", 1)).unwrap().as_deref(), Some("bafkreia"));
        assert_eq!(finalized_cid(&answer("bafkreia", 0)).unwrap(), None, "pending");
        assert_eq!(finalized_cid(&answer("", 0)).unwrap(), None, "nothing");
        assert!(finalized_cid("\"0x12\"").is_err());
        assert!(finalized_cid("\"zz\"").is_err());
    }

    #[test]
    fn the_read_is_pinned_to_the_release_block() {
        let params = max_snapshots_cid_params(Address::ZERO, Address::ZERO, "p", 7, 0x1234);
        assert_eq!(params[1], "0x1234");
        assert!(params[0]["data"].as_str().unwrap().starts_with("0x"));
    }
}
