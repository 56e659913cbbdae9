//! Full-node mode: one epoch of 1,000 active pools on a local anvil, every
//! pool with a swap in the epoch's block. All snapshots in one batched round
//! (one `eth_getLogs` over every pool, batched state calls) against fetching
//! pool by pool (`batch_pools: false`). Target: under 2 s, at least 5× faster.
//!
//! Needs the 1,000-pool world: `devnet/build-world.sh --pools 1000 --out world-1000`.
//! `cargo bench -p lite-node --bench full_node`

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use lite_node::{
    chain::{HttpRpc, IoRuntime},
    compute::{
        self,
        host::{RpcEndpoint, RuntimeHost, SelectionTracker},
    },
    config::{ComputeConfig, EnvSnapshot},
    epochs::preload,
};
use lite_node_plugin_api::{EpochContext, Host};
use lite_node_testkit::{World, toolchain_env, workspace_root};
use serde_json::json;

const RUNS: usize = 3;

fn main() {
    // A quick run takes the tests' 5-pool world: the same path, no 1,000-pool build.
    let quick = lite_node_testkit::bench_is_quick();
    let dir = workspace_root().join(if quick { "devnet/world" } else { "devnet/world-1000" });
    assert!(
        dir.join("state.json").is_file(),
        "build the 1,000-pool world first: devnet/build-world.sh --pools 1000 --out world-1000"
    );
    let world = World::load_dir(&dir, &[]);
    // The saved state carries a 30M block gas limit: room for ~230 swaps.
    world.rpc("evm_setBlockGasLimit", json!(["0x3b9aca00"]));
    let pools = world.manifest.pools.clone();
    println!("world: {} pools", pools.len());

    // One block with a swap in every pool.
    world.set_automine(false);
    let mut sent = Vec::new();
    for i in 0..pools.len() {
        let (router, data) = world.swap_call(i, i % 2 == 0, 1_000_000_000_000_000);
        sent.push(world.send_with_gas(&router, data, 400_000));
    }
    world.mine(1);
    let head = world.head();
    let mined = world.rpc("eth_getBlockByNumber", json!([format!("0x{head:x}"), false]));
    println!(
        "mined block {head} with {} transactions; pool: {}",
        mined["transactions"].as_array().map_or(0, Vec::len),
        world.rpc("txpool_status", json!([]))
    );
    world.set_automine(true);
    let block = lite_node_testkit::world::hex_u64(&world.receipt(&sent[0])["blockNumber"]);
    for hash in &sent {
        world.receipt(hash);
    }
    println!("activity: {} swaps in block {block}", sent.len());

    let data = tempfile::tempdir().unwrap();
    let mut env = toolchain_env();
    env.push(("LITE_NODE_DATA_DIR".into(), data.path().display().to_string()));
    env.extend(lite_node_testkit::compute_build_env());
    let cfg = ComputeConfig::from_env(&EnvSnapshot::from_pairs(env)).unwrap();
    let package = compute::load(&cfg).unwrap();

    let io = IoRuntime::new().unwrap();
    let source = Arc::new(HttpRpc::new("source", vec![world.url()], Duration::from_secs(60), io).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let blocks = rt.block_on(preload::block_details(&source, block, block)).unwrap();
    let ctx = EpochContext {
        epoch_id: 1,
        begin: block,
        end: block,
        day_id: 1,
        slot_id: 1,
        total_slots: 1,
        anchor_block: 0,
        namespace: "devnet-UNISWAPV3-ETH".into(),
        project_type: "baseSnapshot".into(),
    };
    let time = |batch: bool| -> Duration {
        let settings = json!({"pools": pools, "full_node": true, "batch_pools": batch}).to_string();
        let processor = package.new_processor("bds_uniswapv3", "BaseSnapshotProcessor", &settings).unwrap();
        let endpoint: Arc<dyn RpcEndpoint> = source.clone();
        let host = RuntimeHost::new(
            "baseSnapshot",
            Some(endpoint),
            None,
            Arc::new(SelectionTracker::default()),
            blocks.clone(),
        );
        // The first epoch also learns every pool's tokens and decimals: not timed.
        let warm = processor.compute(&ctx, Host::to_ref(&host)).into_result().unwrap();
        assert_eq!(warm.len(), pools.len());
        let mut runs: Vec<Duration> = (0..RUNS)
            .map(|_| {
                let started = Instant::now();
                let out = processor.compute(&ctx, Host::to_ref(&host)).into_result().unwrap();
                let elapsed = started.elapsed();
                assert_eq!(out.len(), pools.len());
                elapsed
            })
            .collect();
        runs.sort();
        runs[RUNS / 2]
    };
    let batched = time(true);
    let per_pool = time(false);
    println!(
        "full node, {} pools, one epoch: batched {:.0} ms (target < 2000 ms), pool by pool {:.0} ms; {:.1}x faster (target >= 5x)",
        pools.len(),
        batched.as_secs_f64() * 1e3,
        per_pool.as_secs_f64() * 1e3,
        per_pool.as_secs_f64() / batched.as_secs_f64()
    );
}
