//! One node working 1,000 slots on the devnet, against the same node
//! working one: EpochReleased → collector acknowledgement (p50, p99) and the
//! node's peak RSS. Goals: p99 under 250 ms with 1,000 slots, and peak RSS
//! under twice one slot's. `cargo bench -p lite-node --bench many_slots`
//! (needs the devnet world: `devnet/build-world.sh`; ./init.sh test builds
//! it). Quick mode (`./init.sh test`): 100 slots, 2 epochs.

use lite_node_testkit::{devnet_record, quantile, record_latencies};

/// `(p50 ms, p99 ms, peak RSS MiB, submissions)` of a devnet run of one
/// node with `slots` slots over `epochs` epochs.
fn run(slots: u64, epochs: u64) -> (f64, f64, f64, usize) {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let slots = slots.to_string();
    let args = ["--nodes", "1", "--slots-per-node", &slots, "--total-slots", &slots, "--epochs", &epochs.to_string()];
    let json = devnet_record(bin, &args);
    let latencies = record_latencies(&json);
    let rss = json["nodes"][0]["peakRssKiB"].as_f64().unwrap() / 1024.0;
    (quantile(&latencies, 0.5), quantile(&latencies, 0.99), rss, latencies.len())
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
