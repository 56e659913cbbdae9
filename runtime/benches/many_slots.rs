//! One node working 1,000 slots on the devnet, against the same node
//! working one: EpochReleased → collector acknowledgement (p50, p99) and the
//! node's peak RSS. Goals: p99 under 250 ms with 1,000 slots, and peak RSS
//! under twice one slot's. The latencies are those of the epochs after the
//! first (a node runs for days: the first epoch also pays for connections
//! opened and, in the devnet's collector, every slot's signer read from the
//! chain once); the first epoch's p99 is printed beside them.
//! `cargo bench -p lite-node --bench many_slots` (needs the devnet world:
//! `devnet/build-world.sh`; ./init.sh test builds it). Quick mode
//! (`./init.sh test`): 20 slots, 2 epochs.

use lite_node_testkit::{devnet_record, quantile};

/// `(p50 ms, p99 ms, first epoch's p99 ms, peak RSS MiB, submissions)` of a
/// devnet run of one node with `slots` slots over `epochs` epochs; p50 and
/// p99 over the epochs after the first.
fn run(slots: u64, epochs: u64) -> (f64, f64, f64, f64, usize) {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let slots = slots.to_string();
    let args = ["--nodes", "1", "--slots-per-node", &slots, "--total-slots", &slots, "--epochs", &epochs.to_string()];
    let json = devnet_record(bin, &args);
    let (mut first, mut steady) = (Vec::new(), Vec::new());
    for (n, epoch) in json["epochs"].as_array().unwrap().iter().enumerate() {
        let into = if n == 0 { &mut first } else { &mut steady };
        into.extend(epoch["submissions"].as_array().unwrap().iter().map(|s| s["latencyMs"].as_f64().unwrap()));
    }
    first.sort_by(f64::total_cmp);
    steady.sort_by(f64::total_cmp);
    let rss = json["nodes"][0]["peakRssKiB"].as_f64().unwrap() / 1024.0;
    (quantile(&steady, 0.5), quantile(&steady, 0.99), quantile(&first, 0.99), rss, first.len() + steady.len())
}

fn main() {
    let (slots, epochs) = if lite_node_testkit::bench_is_quick() { (20, 2) } else { (1000, 6) };
    let (p50_1, p99_1, _, rss_1, n_1) = run(1, epochs);
    let (p50, p99, cold, rss, n) = run(slots, epochs);
    println!(
        "one slot, {epochs} epochs, {n_1} submissions: EpochReleased → acknowledgement p50 {p50_1:.0} ms, p99 \
         {p99_1:.0} ms; peak RSS {rss_1:.1} MiB"
    );
    println!(
        "{slots} slots in one node, {epochs} epochs, {n} submissions: p50 {p50:.0} ms, p99 {p99:.0} ms (goal < 250; \
         the first epoch's p99 {cold:.0} ms); peak RSS {rss:.1} MiB = {:.2}× one slot (goal < 2)",
        rss / rss_1
    );
}
