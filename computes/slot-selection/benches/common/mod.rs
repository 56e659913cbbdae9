//! The benchmark input shared by the benches: T = 10,000 slots, 100 pools.

use lite_node_plugin_api::AssignmentRequest;

pub fn request(epoch_id: u64) -> AssignmentRequest {
    AssignmentRequest {
        epoch_id,
        block_hash: format!("0x{}", "3c".repeat(32)).into(),
        total_slots: 10_000,
        pools: (0..100u32)
            .map(|i| format!("0x{:040x}", u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15)).into())
            .collect(),
    }
}
