//! One epoch's whole assignment through the module's `assignments` entry
//! (pools sorted, strings out), T = 10,000 slots and 100 pools: a regular epoch
//! (target: median under 150 µs) and the genesis epoch (under 2 ms).
//! `cargo bench -p slot-selection --bench selection`; the comparison with the
//! Python reference is `--bench compare_python`.

use criterion::{Criterion, criterion_group, criterion_main};
use slot_selection::assignments;

mod common;
use common::request;

fn selection(c: &mut Criterion) {
    let regular = request(12_345);
    let genesis = request(0);
    c.bench_function("regular epoch, T=10000, 100 pools", |b| b.iter(|| assignments(std::hint::black_box(&regular))));
    c.bench_function("genesis epoch, T=10000, 100 pools", |b| b.iter(|| assignments(std::hint::black_box(&genesis))));
}

criterion_group!(benches, selection);
criterion_main!(benches);
