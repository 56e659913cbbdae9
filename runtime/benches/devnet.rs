//! `lite-node devnet` over 50 epochs: EpochReleased sent → collector
//! acknowledgement for every submission of 4 nodes, and each node's peak RSS.
//! Targets: median under 250 ms, p99 under 1 s, RSS under 40 MB.
//! `cargo bench -p lite-node --bench devnet` (needs the devnet world:
//! `devnet/build-world.sh`; ./init.sh test builds it).

use std::process::Command;

use lite_node_testkit::{compute_target_dir, toolchain_env, workspace_root};
use serde_json::Value;

const EPOCHS: u64 = 50;

fn main() {
    let epochs = if lite_node_testkit::bench_is_quick() { 2 } else { EPOCHS };
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let status = Command::new(env!("CARGO_BIN_EXE_lite-node"))
        .args(["devnet", "--epochs", &epochs.to_string(), "--interval-ms", "300", "--devnet-dir"])
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
    assert!(status.success(), "lite-node devnet failed: {status}");
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let mut latencies: Vec<f64> = json["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["submissions"].as_array().unwrap().iter().map(|s| s["latencyMs"].as_f64().unwrap()))
        .collect();
    latencies.sort_by(f64::total_cmp);
    let pick = |q: f64| latencies[((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len()) - 1];
    println!(
        "devnet, {epochs} epochs, 4 nodes, {} submissions: EpochReleased → collector acknowledgement \
         min {:.0} / median {:.0} / p90 {:.0} / p99 {:.0} / max {:.0} ms (targets: median < 250, p99 < 1000)",
        latencies.len(),
        latencies[0],
        pick(0.5),
        pick(0.9),
        pick(0.99),
        pick(1.0)
    );
    let rss: Vec<String> = json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| format!("slot {} {:.1} MiB", n["slotId"], n["peakRssKiB"].as_f64().unwrap() / 1024.0))
        .collect();
    println!("peak RSS per node: {} (target < 40 MB)", rss.join(", "));
}
