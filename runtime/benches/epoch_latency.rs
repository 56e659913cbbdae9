//! EpochReleased → compute called: from just before the release transaction
//! is sent to a real anvil, to the moment the node calls the example compute
//! (its journal's `started_at_ms`), with a 50 ms poll interval.
//! Target: median under 100 ms. `cargo bench -p lite-node --bench epoch_latency`
//! (needs the devnet world: `devnet/build-world.sh`).

use std::path::Path;

use lite_node_testkit::{RunningCollector, RunningNode, World, node_env};

const EPOCHS: usize = 40;

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

fn main() {
    let epochs = if lite_node_testkit::bench_is_quick() { 2 } else { EPOCHS };
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let mut env = node_env(&world.url(), &world.manifest, 1);
    let bin = Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let collector = RunningCollector::start(bin, &env);
    env.push(("LOCAL_COLLECTOR_HOST".into(), "127.0.0.1".into()));
    env.push(("LOCAL_COLLECTOR_PORT".into(), collector.port.to_string()));
    let mut node = RunningNode::start(bin, &env, &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    let (mut called, mut acked) = (Vec::with_capacity(epochs), Vec::with_capacity(epochs));
    for n in 1..=epochs {
        let sent = now_ms();
        world.release_next_epoch();
        let journal = node.wait_for_journal(n);
        let line = &journal[n - 1];
        assert_eq!(line["submissions"][0]["verdict"], "accepted", "{line}");
        called.push(line["started_at_ms"].as_u64().unwrap().saturating_sub(sent));
        acked.push(line["submissions"][0]["answered_at_ms"].as_u64().unwrap().saturating_sub(sent));
    }
    let report = |what: &str, mut v: Vec<u64>, target: u64| {
        v.sort_unstable();
        let pick = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        println!(
            "{what}, {epochs} epochs, 50 ms poll: min {} ms, median {} ms, p90 {} ms, p99 {} ms, max {} ms (target: median < {target} ms: {})",
            v[0],
            pick(0.5),
            pick(0.9),
            pick(0.99),
            v[v.len() - 1],
            if pick(0.5) < target { "met" } else { "MISSED" }
        );
    };
    report("EpochReleased -> compute called", called, 100);
    report("EpochReleased -> collector acknowledgement", acked, 250);
    if let Some(kib) = node.peak_rss_kib() {
        println!("lite node peak RSS: {:.1} MiB (target < 40 MiB)", kib as f64 / 1024.0);
    }
    node.stop();
}
