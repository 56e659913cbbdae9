//! One epoch's whole assignment through the module's `assignments` entry
//! (pools sorted, strings out), T = 10,000 slots and 100 pools: a regular epoch
//! (target: median under 150 µs) and the genesis epoch (under 2 ms).
//! `cargo bench -p slot-selection --bench selection`; the comparison with the
//! Python reference is `--bench compare_python`.

use criterion::{Criterion, criterion_group, criterion_main};
use lite_node_plugin_api::AssignmentRequest;
use slot_selection::assignments;

fn request(epoch_id: u64) -> AssignmentRequest {
    AssignmentRequest {
        epoch_id,
        block_hash: format!("0x{}", "3c".repeat(32)).into(),
        total_slots: 10_000,
        pools: (0..100u32)
            .map(|i| format!("0x{:040x}", u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15)).into())
            .collect(),
    }
}

fn selection(c: &mut Criterion) {
    let regular = request(12_345);
    let genesis = request(0);
    c.bench_function("regular epoch, T=10000, 100 pools", |b| b.iter(|| assignments(std::hint::black_box(&regular))));
    c.bench_function("genesis epoch, T=10000, 100 pools", |b| b.iter(|| assignments(std::hint::black_box(&genesis))));
}

criterion_group!(benches, selection);
criterion_main!(benches);
