//! A full node over machines: pools gathered per second with 1, 2 and 3
//! workers on the devnet, in three settings:
//!
//! 1. as it is: anvil on loopback answers in well under a millisecond, so
//!    the work is CPU-bound, on a machine of 2 cores shared by anvil, the
//!    coordinator, the workers and Redis;
//! 2. every worker RPC request held 30 ms by a relay (a remote RPC), the
//!    package as it ships: the BDS compute reads a share's pools in a few
//!    batched requests (three per share whatever its size, plus one per 500
//!    state calls), so a share of a third of the pools saves only some of
//!    the round trips, and the CPU of setting 1 remains;
//! 3. the same relay, the compute reading one pool per request
//!    (`batch_pools: false`, as the reference pooler's workers do): the
//!    work is I/O-bound per pool, and workers divide it (goal: 3 workers ≥
//!    2.5× one).
//!
//! A rate is the epoch's pools over the coordinator's gather time (epoch
//! opened on the board → every result in), the median of the epochs after
//! the first. `cargo bench -p lite-node --bench cluster` (needs the
//! 1,000-pool world: `devnet/build-world.sh --pools 1000 --out world-1000`;
//! ./init.sh test builds it). Quick mode: 5 pools, 2 workers, 2 epochs.

use lite_node_testkit::{devnet_record, quantile};

/// The median pools per second of the epochs after the first, and the
/// median gather time (ms).
fn run(workers: u64, pools: usize, epochs: u64, delay_ms: Option<u64>, projects: Option<&str>) -> (f64, f64) {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let (workers, pools_arg, epochs) = (workers.to_string(), pools.to_string(), epochs.to_string());
    let delay = delay_ms.map(|d| d.to_string());
    let mut args = vec!["--nodes", "1", "--full-node-workers", &workers, "--pools", &pools_arg, "--epochs", &epochs];
    if let Some(d) = &delay {
        args.extend(["--worker-rpc-delay-ms", d.as_str()]);
    }
    if let Some(p) = projects {
        args.extend(["--projects", p]);
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
    // Quick: each setting once, with two workers (the first measured run
    // stands for "one worker" in the ratio), over two epochs.
    let (pools, epochs, fewest, most) = if quick { (5, 2, 2, 2) } else { (1000, 6, 1, 3) };
    // The devnet's BDS project, reading one pool per request.
    let dir = tempfile::tempdir().unwrap();
    let per_pool = dir.path().join("projects-per-pool.json");
    let project = serde_json::json!({"config": [{
        "project_type": "baseSnapshot",
        "processor": {"module": "bds_uniswapv3", "class_name": "BaseSnapshotProcessor"},
        "preload_tasks": ["block_details"],
        "pools": [],
        "batch_pools": false,
    }]});
    std::fs::write(&per_pool, project.to_string()).unwrap();
    let per_pool = per_pool.display().to_string();
    // One pool per request at +30 ms is ~60 ms a pool: 200 pools keep one
    // worker's epoch within the compute timeout.
    let settings: [(String, usize, Option<u64>, Option<&str>); 3] = [
        ("devnet as it is, batched reads".into(), pools, None, None),
        ("every worker RPC request +30 ms, batched reads".into(), pools, Some(30), None),
        ("every worker RPC request +30 ms, one pool per request".into(), pools.min(200), Some(30), Some(&per_pool)),
    ];
    for (label, pools, delay, projects) in settings {
        let mut one = 0.0;
        for workers in fewest..=most {
            let (rate, ms) = run(workers, pools, epochs, delay, projects);
            if workers == fewest {
                one = rate;
            }
            println!(
                "{label}: {workers} worker(s), {pools} pools: {rate:.0} pools/s (gather {ms:.0} ms), {:.2}× one worker",
                rate / one
            );
        }
    }
}
