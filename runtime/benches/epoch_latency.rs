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
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let mut env = node_env(&world.url(), &world.manifest, 1);
    let bin = Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let collector = RunningCollector::start(bin, &env);
    env.push(("LOCAL_COLLECTOR_HOST".into(), "127.0.0.1".into()));
    env.push(("LOCAL_COLLECTOR_PORT".into(), collector.port.to_string()));
    let mut node = RunningNode::start(bin, &env, &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    let mut latencies = Vec::with_capacity(EPOCHS);
    for n in 1..=EPOCHS {
        let sent = now_ms();
        world.release_next_epoch();
        let journal = node.wait_for_journal(n);
        let called = journal[n - 1]["started_at_ms"].as_u64().unwrap();
        latencies.push(called.saturating_sub(sent));
    }
    latencies.sort_unstable();
    let pick = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    println!(
        "EpochReleased -> compute called, {EPOCHS} epochs, 50 ms poll: min {} ms, median {} ms, p90 {} ms, max {} ms (target: median < 100 ms: {})",
        latencies[0],
        pick(0.5),
        pick(0.9),
        latencies[EPOCHS - 1],
        if pick(0.5) < 100 { "met" } else { "MISSED" }
    );
    node.stop();
}
