//! `lite-node devnet` over 50 epochs: EpochReleased sent → collector
//! acknowledgement for every submission of 4 nodes, and each node's peak RSS.
//! Targets: median under 250 ms, p99 under 1 s, RSS under 40 MB.
//! `cargo bench -p lite-node --bench devnet` (needs the devnet world:
//! `devnet/build-world.sh`; ./init.sh test builds it).

use lite_node_testkit::{devnet_record, quantile, record_latencies};

const EPOCHS: u64 = 50;

fn main() {
    let epochs = if lite_node_testkit::bench_is_quick() { 2 } else { EPOCHS };
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let json = devnet_record(bin, &["--epochs", &epochs.to_string(), "--interval-ms", "300"]);
    let latencies = record_latencies(&json);
    let pick = |q: f64| quantile(&latencies, q);
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
