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

/// The identity check for every slot of a node: each slot's registered
/// signer (read 16 at a time) and each signer's enablement. Slots registered
/// to someone else are refused all at once, each named with the address it
/// is registered to — or, with `skip_foreign`, left out with a warning (the
/// slots kept are returned). Errors from the anchor are the caller's to retry.
/// (Boxed here: see `lite_node_core::BoxFuture`.)
pub fn check_slots<'a>(
    anchor: &'a Anchor,
    slots: &'a [crate::config::NodeSlot],
    skip_foreign: bool,
) -> lite_node_core::LocalBoxFuture<'a, anyhow::Result<Result<Vec<crate::config::NodeSlot>, BadInput>>> {
    Box::pin(check_slots_now(anchor, slots, skip_foreign))
}

async fn check_slots_now(
    anchor: &Anchor,
    slots: &[crate::config::NodeSlot],
    skip_foreign: bool,
) -> anyhow::Result<Result<Vec<crate::config::NodeSlot>, BadInput>> {
    use futures_util::{StreamExt, TryStreamExt};
    if let [only] = slots {
        return Ok(check_identity(anchor, only.signer_address, only.slot_id).await?.map(|()| vec![only.clone()]));
    }
    let ids: Vec<u64> = slots.iter().map(|s| s.slot_id).collect();
    let owners: Vec<Address> = futures_util::stream::iter(ids.into_iter().map(|id| anchor.slot_owner(id)))
        .buffered(16)
        .try_collect()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let ps = anchor.protocol_state;
    let mut kept = Vec::new();
    let mut foreign = Vec::new();
    for (slot, owner) in slots.iter().zip(owners) {
        if owner == slot.signer_address {
            kept.push(slot.clone());
        } else if owner == Address::ZERO {
            foreign.push(format!("slot {} is not registered", slot.slot_id));
        } else {
            foreign.push(format!("slot {} is registered to {owner}, not {}", slot.slot_id, slot.signer_address));
        }
    }
    if !foreign.is_empty() {
        let list = foreign.join("; ");
        if !skip_foreign {
            return Ok(Err(BadInput(format!(
                "{} of {} slot(s) are not this node's on ProtocolState {ps}: {list}. Fix SLOT_IDS (or \
                 SLOT_SIGNERS_FILE), or set LITE_NODE_SKIP_FOREIGN_SLOTS=true to run the others",
                foreign.len(),
                slots.len()
            ))));
        }
        tracing::warn!("skipping {} slot(s) (LITE_NODE_SKIP_FOREIGN_SLOTS): {list}", foreign.len());
        if kept.is_empty() {
            return Ok(Err(BadInput(format!("none of the {} slot(s) is this node's: {list}", slots.len()))));
        }
    }
    let mut signers: Vec<Address> = kept.iter().map(|s| s.signer_address).collect();
    signers.sort();
    signers.dedup();
    for signer in signers {
        let identity = anchor.identity(signer, kept[0].slot_id).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        if !identity.signer_enabled {
            return Ok(Err(BadInput(format!(
                "signer {signer} is not an enabled snapshotter on ProtocolState {ps} (allSnapshotters is false)"
            ))));
        }
    }
    let ids: Vec<u64> = kept.iter().map(|s| s.slot_id).collect();
    tracing::info!("identity confirmed: slot(s) {} belong to their signers", crate::config::format_slot_ids(&ids));
    Ok(Ok(kept))
}

/// Each of `slots` that is no longer registered to its signer, said as the
/// operator reads it (read at the anchor's head, a slot at a time).
pub async fn slots_not_ours(anchor: &Anchor, slots: &[crate::config::NodeSlot]) -> anyhow::Result<Vec<String>> {
    let mut lost = Vec::new();
    for slot in slots {
        let owner = anchor.slot_owner(slot.slot_id).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        if owner == slot.signer_address {
            continue;
        }
        lost.push(match owner {
            Address::ZERO => format!("slot {} was removed from the market", slot.slot_id),
            other => format!("slot {} is registered to {other} now, not to {}", slot.slot_id, slot.signer_address),
        });
    }
    Ok(lost)
}
