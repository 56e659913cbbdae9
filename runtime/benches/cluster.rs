//! A full node over machines: pools gathered per second with 1, 2 and 3
//! workers on the devnet, as it is (anvil on loopback answers in well under
//! a millisecond: the work is CPU-bound, and this machine has 2 cores) and
//! with every worker RPC request held 30 ms by a relay (a remote RPC: the
//! work is I/O-bound and should scale near-linearly; goal: 3 workers ≥ 2.5×
//! one). A rate is the epoch's pools over the coordinator's gather time
//! (epoch opened on the board → every result in), the median of the epochs
//! after the first. `cargo bench -p lite-node --bench cluster` (needs the
//! 1,000-pool world: `devnet/build-world.sh --pools 1000 --out world-1000`;
//! ./init.sh test builds it). Quick mode: 5 pools, 1 and 2 workers.

use lite_node_testkit::{devnet_record, quantile};

/// The median pools per second of the epochs after the first, and the
/// median gather time (ms).
fn run(workers: u64, pools: usize, epochs: u64, delay_ms: Option<u64>) -> (f64, f64) {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let (workers, pools_arg, epochs) = (workers.to_string(), pools.to_string(), epochs.to_string());
    let delay = delay_ms.map(|d| d.to_string());
    let mut args = vec!["--nodes", "1", "--full-node-workers", &workers, "--pools", &pools_arg, "--epochs", &epochs];
    if let Some(d) = &delay {
        args.extend(["--worker-rpc-delay-ms", d.as_str()]);
    }
    let json = devnet_record(bin, &args);
    let mut rates = Vec::new();
    let mut times = Vec::new();
    for epoch in json["epochs"].as_array().unwrap().iter().skip(1) {
        let gather = &epoch["fullNodeGather"];
        let (ms, n) = (gather["ms"].as_f64().unwrap().max(1.0), gather["snapshots"].as_f64().unwrap());
        assert_eq!(n as usize, pools, "every pool gathered: {gather}");
        rates.push(n * 1000.0 / ms);
        times.push(ms);
    }
    rates.sort_by(f64::total_cmp);
    times.sort_by(f64::total_cmp);
    (quantile(&rates, 0.5), quantile(&times, 0.5))
}

fn main() {
    let quick = lite_node_testkit::bench_is_quick();
    let (pools, epochs, most) = if quick { (5, 3, 2) } else { (1000, 6, 3) };
    for delay in [None, Some(30)] {
        let label = delay.map_or("devnet as it is".to_owned(), |d| format!("every worker RPC request +{d} ms"));
        let mut one = 0.0;
        for workers in 1..=most {
            let (rate, ms) = run(workers, pools, epochs, delay);
            if workers == 1 {
                one = rate;
            }
            println!(
                "{label}: {workers} worker(s), {pools} pools: {rate:.0} pools/s (gather {ms:.0} ms), {:.2}× one worker",
                rate / one
            );
        }
    }
}
