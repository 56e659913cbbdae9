//! Warm start: how long a new `lite-node` process takes from launch to having
//! every processor of an already-built compute package loaded and listed.
//!
//! Run with `cargo bench -p lite-node --bench warm_start`. The first (cold)
//! run builds the bundled compute package; it is reported separately.

use std::{
    process::Command,
    time::{Duration, Instant},
};

/// Warm runs measured (2 in a quick run).
const RUNS: usize = 20;
const TARGET: Duration = Duration::from_secs(1);

fn run(data: &std::path::Path, verb: &str, quick: bool) -> Duration {
    let started = Instant::now();
    let mut command = Command::new(env!("CARGO_BIN_EXE_lite-node"));
    if quick {
        // The tests' compute builds: the cold start is then a cache hit.
        command.envs(lite_node_testkit::compute_build_env());
    }
    let out = command
        .args(["compute", verb])
        .env("LITE_NODE_DATA_DIR", data)
        .env_remove("SNAPSHOTTER_COMPUTE_REPO")
        .env("RUST_LOG", "warn")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("lite-node runs");
    let elapsed = started.elapsed();
    assert!(out.status.success(), "lite-node compute {verb} failed: {}", String::from_utf8_lossy(&out.stderr));
    elapsed
}

fn main() {
    let quick = lite_node_testkit::bench_is_quick();
    let runs = if quick { 2 } else { RUNS };
    let data = tempfile::tempdir().expect("temp dir");
    let cold = run(data.path(), "fetch", quick);
    let mut warm: Vec<Duration> = (0..runs).map(|_| run(data.path(), "list", quick)).collect();
    warm.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = warm[runs / 2];
    println!("cold start (build bundled computes): {:.0} ms", ms(cold));
    println!(
        "warm start -> processors loaded, {runs} runs: min {:.1} ms, median {:.1} ms, max {:.1} ms (target < {} ms: {})",
        ms(warm[0]),
        ms(median),
        ms(warm[runs - 1]),
        TARGET.as_millis(),
        if median < TARGET { "met" } else { "MISSED" }
    );
}
