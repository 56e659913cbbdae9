//! One node working 1,000 slots on the devnet, against the same node
//! working one: EpochReleased → collector acknowledgement (p50, p99) and the
//! node's peak RSS. Goals: p99 under 250 ms with 1,000 slots, and peak RSS
//! under twice one slot's. `cargo bench -p lite-node --bench many_slots`
//! (needs the devnet world: `devnet/build-world.sh`; ./init.sh test builds
//! it). Quick mode (`./init.sh test`): 100 slots, 2 epochs.

use std::process::Command;

use lite_node_testkit::{compute_target_dir, toolchain_env, workspace_root};
use serde_json::Value;

/// `(p50 ms, p99 ms, peak RSS MiB, submissions)` of a devnet run of one
/// node with `slots` slots over `epochs` epochs.
fn run(slots: u64, epochs: u64) -> (f64, f64, f64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let slots_arg = slots.to_string();
    let status = Command::new(env!("CARGO_BIN_EXE_lite-node"))
        .args(["devnet", "--nodes", "1", "--slots-per-node", &slots_arg, "--total-slots", &slots_arg])
        .args(["--epochs", &epochs.to_string(), "--devnet-dir"])
        .arg(workspace_root().join("devnet"))
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .arg("--json")
        .arg(&record)
        .env_clear()
        .envs(toolchain_env())
        .env("LITE_NODE_COMPUTE_TARGET_DIR", compute_target_dir())
        .env("LITE_NODE_COMPUTE_CACHE_DIR", dir.path().join("cache"))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("lite-node devnet runs");
    assert!(status.success(), "lite-node devnet with {slots} slots failed: {status}");
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let mut latencies: Vec<f64> = json["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["submissions"].as_array().unwrap().iter().map(|s| s["latencyMs"].as_f64().unwrap()))
        .collect();
    latencies.sort_by(f64::total_cmp);
    let pick = |q: f64| latencies[((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len()) - 1];
    let rss = json["nodes"][0]["peakRssKiB"].as_f64().unwrap() / 1024.0;
    (pick(0.5), pick(0.99), rss, latencies.len())
}

fn main() {
    let (slots, epochs) = if lite_node_testkit::bench_is_quick() { (100, 2) } else { (1000, 5) };
    let (p50_1, p99_1, rss_1, n_1) = run(1, epochs);
    let (p50, p99, rss, n) = run(slots, epochs);
    println!(
        "one slot, {epochs} epochs, {n_1} submissions: EpochReleased → acknowledgement p50 {p50_1:.0} ms, p99 \
         {p99_1:.0} ms; peak RSS {rss_1:.1} MiB"
    );
    println!(
        "{slots} slots in one node, {epochs} epochs, {n} submissions: p50 {p50:.0} ms, p99 {p99:.0} ms (goal < 250); \
         peak RSS {rss:.1} MiB = {:.2}× one slot (goal < 2)",
        rss / rss_1
    );
}
