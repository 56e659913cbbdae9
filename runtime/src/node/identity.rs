//! The start-up identity check (docs/protocol.md §1): the signer is an
//! enabled snapshotter and `SLOT_ID` maps to it on ProtocolState.

use alloy::primitives::Address;

use crate::{chain::Anchor, exit::BadInput};

/// Refuses (as bad input, exit 2) a slot that is not this signer's or a
/// signer that is not enabled. Errors from the anchor are the caller's to
/// retry.
pub async fn check_identity(anchor: &Anchor, signer: Address, slot_id: u64) -> anyhow::Result<Result<(), BadInput>> {
    let identity = anchor.identity(signer, slot_id).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let ps = anchor.protocol_state;
    if identity.slot_owner != signer {
        let found = if identity.slot_owner == Address::ZERO {
            format!("{} (the slot is not registered)", identity.slot_owner)
        } else {
            identity.slot_owner.to_string()
        };
        return Ok(Err(BadInput(format!(
            "slot {slot_id} is not this node's: ProtocolState {ps} maps it to {found}, expected {signer} \
             (SIGNER_ACCOUNT_ADDRESS); check SLOT_ID and the signer"
        ))));
    }
    if !identity.signer_enabled {
        return Ok(Err(BadInput(format!(
            "signer {signer} of slot {slot_id} is not an enabled snapshotter on ProtocolState {ps} \
             (allSnapshotters is false)"
        ))));
    }
    tracing::info!("identity confirmed: slot {slot_id} belongs to {signer}");
    Ok(Ok(()))
}
