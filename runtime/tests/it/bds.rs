//! The BDS base-snapshot compute on the devnet: scripted swaps, mints, burns
//! and collects, then every number compared, as strings, with an independent
//! Python computation from raw logs and `eth_call`.

use std::{process::Command, sync::Arc, time::Duration};

use lite_node::{
    chain::{HttpRpc, IoRuntime},
    compute::{
        self, LoadedPackage,
        host::{RpcEndpoint, RuntimeHost, SelectionTracker},
    },
    config::{ComputeConfig, EnvSnapshot},
    epochs::preload,
};
use lite_node_plugin_api::{AssignmentRequest, EpochContext, Host};
use lite_node_testkit::{World, compute_target_dir, data, toolchain_env};
use serde_json::{Value, json};

fn bundled(data_dir: &std::path::Path) -> LoadedPackage {
    let mut env = toolchain_env();
    env.push(("LITE_NODE_DATA_DIR".into(), data_dir.display().to_string()));
    env.push(("LITE_NODE_COMPUTE_TARGET_DIR".into(), compute_target_dir().display().to_string()));
    let cfg = ComputeConfig::from_env(&EnvSnapshot::from_pairs(env)).unwrap();
    compute::load(&cfg).unwrap()
}

/// Swaps both ways, a mint, a burn and a collect on pool 0 (several in one
/// block), a swap on pool 1; returns the blocks they span.
fn activity(world: &World) -> (u64, u64) {
    let first = world.swap(0, true, 3_000_000_000_000_000_000);
    world.set_automine(false);
    let (router, swap) = world.swap_call(0, false, 1_234_567_890_123_456_789);
    let a = world.send_to(&router, swap);
    let (router, swap) = world.swap_call(1, true, 777_000_000_000_000_000);
    let b = world.send_to(&router, swap);
    world.mine(1);
    world.set_automine(true);
    world.receipt(&a);
    world.receipt(&b);
    world.add_liquidity(0, 5_000_000_000_000_000_000, 9_000_000_000_000_000_000);
    world.remove_liquidity(0, 10u128.pow(18));
    world.collect(0);
    let last = world.swap(0, true, 42_000_000_000_000_000);
    let block = |r: &Value| lite_node_testkit::world::hex_u64(&r["blockNumber"]);
    (block(&first), block(&last))
}

fn expected(world: &World, pool: &str, begin: u64, end: u64) -> Value {
    expected_with(world, pool, begin, end, &[])
}

fn expected_with(world: &World, pool: &str, begin: u64, end: u64, usd: &[String]) -> Value {
    let out = Command::new("python3")
        .arg(data("bds_expected.py"))
        .args([world.url(), pool.to_owned(), begin.to_string(), end.to_string()])
        .args(usd)
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "reference failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn context(epoch_id: u64, begin: u64, end: u64, slot_id: u64, total_slots: u64) -> EpochContext {
    EpochContext {
        epoch_id,
        begin,
        end,
        day_id: 1,
        slot_id,
        total_slots,
        namespace: "devnet-UNISWAPV3-ETH".into(),
        project_type: "baseSnapshot".into(),
    }
}

struct Chain {
    _io: IoRuntime,
    source: Arc<HttpRpc>,
}

fn chain(world: &World) -> Chain {
    let io = IoRuntime::new().unwrap();
    let source = Arc::new(HttpRpc::new("source", vec![world.url()], Duration::from_secs(10), io.clone()).unwrap());
    Chain { _io: io, source }
}

fn host(c: &Chain, begin: u64, end: u64) -> (RuntimeHost, Arc<SelectionTracker>) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let blocks = rt.block_on(preload::block_details(&c.source, begin, end)).unwrap();
    let tracker = Arc::new(SelectionTracker::default());
    let source: Arc<dyn RpcEndpoint> = c.source.clone();
    (RuntimeHost::new("baseSnapshot", Some(source), None, tracker.clone(), blocks), tracker)
}

#[test]
fn full_node_snapshots_match_an_independent_computation_exactly() {
    let world = World::load();
    let (begin, end) = activity(&world);
    let data_dir = tempfile::tempdir().unwrap();
    let package = bundled(data_dir.path());
    let pools = world.manifest.pools.clone();
    let settings = json!({"pools": pools, "full_node": true}).to_string();
    let processor = package.new_processor("bds_uniswapv3", "BaseSnapshotProcessor", &settings).unwrap();
    let c = chain(&world);
    let (h, tracker) = host(&c, begin, end);
    let out = processor.compute(&context(9, begin, end, 1, 4), Host::to_ref(&h)).into_result().unwrap();
    assert_eq!(out.len(), pools.len(), "a full node snapshots every pool");
    assert!(tracker.last().unwrap().was_selected);
    let mut checked_active = false;
    for snapshot in &out {
        let pool = snapshot.data_source.as_str();
        let mut got: Value = serde_json::from_str(&snapshot.json).unwrap();
        assert_eq!(got["previousSnapshots"], json!([]));
        got.as_object_mut().unwrap().remove("previousSnapshots");
        let mut want = expected(&world, pool, begin, end);
        let counts = want.as_object_mut().unwrap().remove("logCounts").unwrap();
        if pool == pools[0] {
            // The position manager pokes the pool with a zero Burn before it collects.
            assert_eq!(counts, json!({"swap": 3, "mint": 1, "burn": 2, "collect": 1}), "the script ran as planned");
            checked_active = true;
        }
        assert_eq!(got, want, "pool {pool}");
    }
    assert!(checked_active);
}

#[test]
fn a_lite_node_snapshots_only_its_assigned_pool_or_nothing() {
    let world = World::load();
    let (begin, end) = activity(&world);
    let data_dir = tempfile::tempdir().unwrap();
    let package = bundled(data_dir.path());
    let pools = world.manifest.pools.clone();
    let settings = json!({"pools": pools}).to_string();
    let processor = package.new_processor("bds_uniswapv3", "BaseSnapshotProcessor", &settings).unwrap();
    let library = package.library("bds_uniswapv3").unwrap();
    let c = chain(&world);
    let (h, tracker) = host(&c, begin, end);
    let seed_hash = h.blocks[0].hash.to_string();
    // Genesis and regular epochs, with few and many slots.
    for (epoch_id, total, slot) in [(0u64, 7u64, 5u64), (21, 1, 1), (22, 3000, 17), (23, 3000, 2999)] {
        let request = AssignmentRequest {
            epoch_id,
            block_hash: seed_hash.as_str().into(),
            total_slots: total,
            pools: pools.iter().map(|p| p.as_str().into()).collect(),
        };
        let answer = library.assignments(&request).unwrap();
        let assigned =
            answer.selected.iter().find(|s| s.slot_id == slot).map(|s| answer.pools[s.pool as usize].to_string());
        let out =
            processor.compute(&context(epoch_id, begin, end, slot, total), Host::to_ref(&h)).into_result().unwrap();
        let last = tracker.last().unwrap();
        assert_eq!((last.epoch_id, last.slot_id), (epoch_id, slot), "reported before any work");
        assert_eq!(last.was_selected, assigned.is_some(), "epoch {epoch_id}");
        match assigned {
            None => assert!(out.is_empty(), "not selected: nothing to submit"),
            Some(pool) => {
                assert_eq!(out.len(), 1);
                assert_eq!(out[0].data_source.as_str(), pool);
                let got: Value = serde_json::from_str(&out[0].json).unwrap();
                assert_eq!(got["address"].as_str().unwrap(), pool.to_lowercase());
            }
        }
    }
}

#[test]
fn previous_snapshots_are_the_nodes_own_recent_cids() {
    use futures_util::StreamExt;
    use lite_node::{
        config::Project,
        executor::{Executor, LocalExecutor, OutcomeKind, ProjectProcessor, Task},
        snapshots::SnapshotStore,
    };
    let world = World::load();
    let (begin, end) = activity(&world);
    let data_dir = tempfile::tempdir().unwrap();
    let package = bundled(data_dir.path());
    let pool = world.manifest.pools[0].clone();
    let settings = json!({"pools": [pool], "full_node": true});
    let processor = package.new_processor("bds_uniswapv3", "BaseSnapshotProcessor", &settings.to_string()).unwrap();
    let project = Project {
        project_type: "baseSnapshot".into(),
        module: "bds_uniswapv3".into(),
        class_name: "BaseSnapshotProcessor".into(),
        preload_tasks: vec!["block_details".into()],
        settings: settings.as_object().unwrap().clone(),
    };
    let c = chain(&world);
    let store = Arc::new(SnapshotStore::open(data_dir.path()).unwrap());
    let namespace = "devnet-UNISWAPV3-ETH";
    let executor = LocalExecutor::new(
        vec![ProjectProcessor { project, processor: Arc::new(processor) }],
        1,
        Duration::from_secs(60),
        Some(c.source.clone() as Arc<dyn RpcEndpoint>),
        None,
    )
    .with_history(store.clone(), namespace.into());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let blocks: Arc<[_]> = rt.block_on(preload::block_details(&c.source, begin, end)).unwrap().into();
    let mut cids = Vec::new();
    for epoch_id in [11u64, 12, 13] {
        let task = Task {
            epoch_id,
            begin,
            end,
            day_id: 1,
            slot_id: 1,
            total_slots: 4,
            namespace: namespace.into(),
            project_type: "baseSnapshot".into(),
        };
        let results: Vec<_> = rt.block_on(executor.execute(vec![task], blocks.clone()).collect());
        assert_eq!(results[0].kind, OutcomeKind::Computed);
        let stored = &store.store(epoch_id, namespace, &results[0]).unwrap()[0];
        assert_eq!(stored.project_id, format!("baseSnapshot:{}:devnet-UNISWAPV3-ETH", pool.to_lowercase()));
        let bytes = std::fs::read(&stored.path).unwrap();
        assert_eq!(stored.cid, lite_node_protocol::cid(&bytes), "the CID is of the exact bytes on disk");
        let snapshot: Value = serde_json::from_slice(&bytes).unwrap();
        let previous: Vec<Value> = cids.iter().map(|(e, c): &(u64, String)| json!([e, c])).collect();
        assert_eq!(snapshot["previousSnapshots"], Value::Array(previous), "epoch {epoch_id}");
        cids.push((epoch_id, stored.cid.clone()));
    }
}

#[test]
fn pools_are_discovered_from_the_factory() {
    let world = World::load();
    let (begin, end) = activity(&world);
    let data_dir = tempfile::tempdir().unwrap();
    let package = bundled(data_dir.path());
    let factory = world.manifest.raw["factory"].as_str().unwrap();
    let settings = json!({"factory": factory, "full_node": true}).to_string();
    let processor = package.new_processor("bds_uniswapv3", "BaseSnapshotProcessor", &settings).unwrap();
    let c = chain(&world);
    let (h, _) = host(&c, begin, end);
    let out = processor.compute(&context(5, begin, end, 1, 4), Host::to_ref(&h)).into_result().unwrap();
    let mut expected: Vec<String> = world.manifest.pools.iter().map(|p| p.to_lowercase()).collect();
    expected.sort();
    let found: Vec<String> = out.iter().map(|s| s.data_source.to_string()).collect();
    assert_eq!(found, expected, "every pool the factory created, sorted as the protocol sorts them");
}

#[test]
fn usd_fields_appear_with_a_usd_source_and_match_exactly() {
    let world = World::load();
    let (begin, end) = activity(&world);
    let data_dir = tempfile::tempdir().unwrap();
    let package = bundled(data_dir.path());
    let pools = world.manifest.pools.clone();
    // The world's first token plays the stablecoin; its 0.3 % pools route prices.
    let stable = world.manifest.raw["tokens"][0].as_str().unwrap().to_lowercase();
    let routes: Vec<String> = world.manifest.raw["pools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["fee"] == 3000)
        .filter(|p| [&p["token0"], &p["token1"]].iter().any(|t| t.as_str().unwrap().eq_ignore_ascii_case(&stable)))
        .map(|p| p["address"].as_str().unwrap().to_lowercase())
        .collect();
    assert_eq!(routes.len(), 2, "two tokens to price through the stablecoin");
    let settings = json!({"pools": pools, "full_node": true, "usd": {"stablecoins": [stable], "pools": routes}});
    let processor = package.new_processor("bds_uniswapv3", "BaseSnapshotProcessor", &settings.to_string()).unwrap();
    let c = chain(&world);
    let (h, _) = host(&c, begin, end);
    let out = processor.compute(&context(9, begin, end, 1, 4), Host::to_ref(&h)).into_result().unwrap();
    assert_eq!(out.len(), pools.len());
    let usd_args = [stable.clone(), routes.join(",")];
    for snapshot in &out {
        let pool = snapshot.data_source.as_str();
        let mut got: Value = serde_json::from_str(&snapshot.json).unwrap();
        got.as_object_mut().unwrap().remove("previousSnapshots");
        assert!(got.get("totalFeeUSD").is_some(), "USD fields present");
        let mut want = expected_with(&world, pool, begin, end, &usd_args);
        want.as_object_mut().unwrap().remove("logCounts");
        assert_eq!(got, want, "pool {pool}");
    }
    // Without a source: no USD field at all.
    let plain = package
        .new_processor(
            "bds_uniswapv3",
            "BaseSnapshotProcessor",
            &json!({"pools": [pools[0]], "full_node": true}).to_string(),
        )
        .unwrap();
    let out = plain.compute(&context(9, begin, end, 1, 4), Host::to_ref(&h)).into_result().unwrap();
    assert!(!out[0].json.contains("USD"), "{}", out[0].json);
}
