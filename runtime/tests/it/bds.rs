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
use lite_node_testkit::{World, data, toolchain_env};
use serde_json::{Value, json};

pub(crate) fn bundled(data_dir: &std::path::Path) -> LoadedPackage {
    let mut env = toolchain_env();
    env.push(("LITE_NODE_DATA_DIR".into(), data_dir.display().to_string()));
    env.extend(lite_node_testkit::compute_build_env());
    let cfg = ComputeConfig::from_env(&EnvSnapshot::from_pairs(env)).unwrap();
    compute::load(&cfg).unwrap()
}

/// Swaps both ways, a mint, a burn and a collect on pool 0 (several in one
/// block), a swap on pool 1; returns the blocks they span.
pub(crate) fn activity(world: &World) -> (u64, u64) {
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
        anchor_block: 0,
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

/// Two nodes with different histories compute the same epoch of the same
/// pool: byte-identical snapshots, whose `previousSnapshots` is what the
/// chain finalized before the epoch (not what either node computed), read
/// at the epoch's release block (a finalization after it changes nothing).
#[test]
fn nodes_with_different_histories_write_the_same_bytes_and_name_what_the_chain_finalized() {
    use futures_util::StreamExt;
    use lite_node::{
        compute::host::FinalizedReads,
        executor::{Executor, LocalExecutor, OutcomeKind, ProjectProcessor, Task},
        snapshots::SnapshotStore,
    };
    let world = World::load();
    let (begin, end) = activity(&world);
    let pool = world.manifest.pools[0].clone();
    let namespace = "devnet-UNISWAPV3-ETH";
    let project_id = format!("baseSnapshot:{}:{namespace}", pool.to_lowercase());
    let settings = json!({"pools": [pool], "full_node": true});
    let project = bds_project(&settings);
    let c = chain(&world);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let blocks: Arc<[_]> = rt.block_on(preload::block_details(&c.source, begin, end)).unwrap().into();

    // On chain: epoch 11 finalized, epoch 12 only submitted (pending), 9
    // finalized later (after epoch 13's release block).
    // Two validators: the deployer's batch is one attestation of two.
    world.register_validators(2);
    let finalized_cid = lite_node_protocol::cid(b"epoch 11 as the validators finalized it");
    let pending_cid = lite_node_protocol::cid(b"epoch 12, not attested yet");
    world.release_epoch_with_id(12);
    let root = world.submit_batch(11, "batch-11", &[(project_id.clone(), finalized_cid.clone())]);
    world.attest_as(1, 11, "batch-11", root);
    world.store_finalized(11, &[(project_id.clone(), finalized_cid.clone())]);
    world.submit_batch(12, "batch-12", &[(project_id.clone(), pending_cid)]);
    let release_block = world.head();

    let node = |dir: &std::path::Path| {
        let package = bundled(dir);
        let processor = package.new_processor("bds_uniswapv3", "BaseSnapshotProcessor", &settings.to_string()).unwrap();
        let store = Arc::new(SnapshotStore::open(dir).unwrap());
        let executor = LocalExecutor::new(
            vec![ProjectProcessor { project: project.clone(), processor: Arc::new(processor) }],
            1,
            Duration::from_secs(60),
            Some(c.source.clone() as Arc<dyn RpcEndpoint>),
            Some(c.source.clone() as Arc<dyn RpcEndpoint>),
        )
        .with_finalized(FinalizedReads {
            protocol_state: world.manifest.protocol_state.parse().unwrap(),
            data_market: world.manifest.data_market.parse().unwrap(),
            namespace: namespace.into(),
            pairs: None,
        });
        (executor, store)
    };
    let compute = |executor: &LocalExecutor, store: &SnapshotStore, epoch_id: u64, anchor_block: u64| {
        let task = Task {
            epoch_id,
            begin,
            end,
            day_id: 1,
            slot_id: 1,
            total_slots: 4,
            anchor_block,
            namespace: namespace.into(),
            project_type: "baseSnapshot".into(),
            deadline: u64::MAX,
            sources: None,
        };
        let results: Vec<_> = rt.block_on(executor.execute(vec![task], blocks.clone()).collect());
        assert_eq!(results[0].kind, OutcomeKind::Computed, "{:?}", results[0]);
        let stored = &store.store(epoch_id, namespace, &results[0]).unwrap()[0];
        assert_eq!(stored.project_id, project_id);
        std::fs::read(&stored.path).unwrap()
    };

    // Node A has a history: it computed epochs 10 to 12 itself.
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, store_a) = node(dir_a.path());
    for epoch_id in 10..=12 {
        compute(&a, &store_a, epoch_id, release_block);
    }
    let from_a = compute(&a, &store_a, 13, release_block);
    // Node B is fresh.
    let (b, store_b) = node(dir_b.path());
    let from_b = compute(&b, &store_b, 13, release_block);
    assert_eq!(String::from_utf8_lossy(&from_a), String::from_utf8_lossy(&from_b), "byte-identical");
    let snapshot: Value = serde_json::from_slice(&from_a).unwrap();
    assert_eq!(snapshot["previousSnapshots"], json!([[11, finalized_cid]]), "finalized only, from the chain");

    // A finalization after the release block does not change the epoch's
    // bytes: the read is pinned to the release.
    let late = lite_node_protocol::cid(b"epoch 9, finalized late");
    let root = world.submit_batch(9, "batch-9", &[(project_id.clone(), late.clone())]);
    world.attest_as(1, 9, "batch-9", root);
    world.store_finalized(9, &[(project_id.clone(), late.clone())]);
    assert_eq!(compute(&b, &store_b, 13, release_block), from_b, "pinned to the release block");
    let later: Value = serde_json::from_slice(&compute(&b, &store_b, 14, world.head())).unwrap();
    assert_eq!(later["previousSnapshots"], json!([[9, late], [11, finalized_cid]]), "read at a later release");
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

/// The world's first token as the stablecoin and its 0.3 % pools as the
/// USD routes: `(stablecoin, route pools)`.
fn usd_routes(world: &World) -> (String, Vec<String>) {
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
    (stable, routes)
}

#[test]
fn usd_fields_appear_with_a_usd_source_and_match_exactly() {
    let world = World::load();
    let (begin, end) = activity(&world);
    let data_dir = tempfile::tempdir().unwrap();
    let package = bundled(data_dir.path());
    let pools = world.manifest.pools.clone();
    let (stable, routes) = usd_routes(&world);
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

/// A full node's pools computed in shares, as the workers of a cluster
/// compute them (split any way, each share's pools in any order), give the
/// bytes computing them all at once gives — with the USD route pools, which
/// every share reads, on. Through the executor, with the processor's own
/// `data_sources`; a fresh processor each time, so no cache helps.
#[test]
fn a_full_nodes_pools_computed_in_shares_give_the_bytes_of_all_at_once() {
    use lite_node::executor::{Executor, OutcomeKind, Task};
    let world = World::load();
    let (begin, end) = activity(&world);
    let data_dir = tempfile::tempdir().unwrap();
    let package = bundled(data_dir.path());
    let (stable, routes) = usd_routes(&world);
    let settings = json!({"pools": world.manifest.pools, "full_node": true,
                          "usd": {"stablecoins": [stable], "pools": routes}});
    let c = chain(&world);
    let executor = || full_node_executor(&package, &settings, &c.source);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let blocks: Arc<[_]> = rt.block_on(preload::block_details(&c.source, begin, end)).unwrap().into();
    let task = |sources: Option<Vec<String>>| full_node_task(begin, end, sources);
    let snapshots = |tasks: Vec<Task>| {
        let results: Vec<_> =
            rt.block_on(futures_util::StreamExt::collect::<Vec<_>>(executor().execute(tasks, blocks.clone())));
        let mut all = std::collections::BTreeMap::new();
        for r in results {
            assert_eq!((&r.kind, r.selected), (&OutcomeKind::Computed, Some(true)), "{r:?}");
            for (pool, json) in r.snapshots {
                assert!(all.insert(pool.clone(), json).is_none(), "{pool} twice");
            }
        }
        all
    };

    let sources = rt.block_on(executor().data_sources(&task(None), &blocks)).unwrap().unwrap();
    let mut sorted = world.manifest.pools.clone();
    sorted.sort();
    assert_eq!(sources, sorted, "every active pool, sorted");
    let whole = snapshots(vec![task(Some(sources.clone()))]);
    assert_eq!(whole.len(), sources.len());
    for parts in [2, 3, sources.len()] {
        let shares: Vec<Task> = (0..parts)
            .map(|k| {
                let mut share: Vec<String> = sources.iter().skip(k).step_by(parts).cloned().collect();
                share.reverse();
                task(Some(share))
            })
            .collect();
        assert_eq!(snapshots(shares), whole, "in {parts} shares");
    }
    // compute (the node's whole-project call) gives the same bytes too.
    let results: Vec<_> =
        rt.block_on(futures_util::StreamExt::collect::<Vec<_>>(executor().execute(vec![task(None)], blocks.clone())));
    let by_compute: std::collections::BTreeMap<String, String> = results[0].snapshots.iter().cloned().collect();
    assert_eq!(by_compute, whole);

    let stray = "0x00000000000000000000000000000000000000aa".to_owned();
    let results: Vec<_> = rt.block_on(futures_util::StreamExt::collect::<Vec<_>>(
        executor().execute(vec![task(Some(vec![stray]))], blocks.clone()),
    ));
    assert!(
        matches!(&results[0].kind, OutcomeKind::Failed(e) if e.contains("is not one of the epoch's 5 active pools")),
        "{:?}",
        results[0].kind
    );
}

/// An executor of one project, `baseSnapshot`, run by a fresh BDS processor
/// with `settings` against `source` (two workers, a minute per compute).
pub(crate) fn full_node_executor(
    package: &LoadedPackage,
    settings: &Value,
    source: &Arc<HttpRpc>,
) -> lite_node::executor::LocalExecutor {
    use lite_node::executor::ProjectProcessor;
    let processor = package.new_processor("bds_uniswapv3", "BaseSnapshotProcessor", &settings.to_string()).unwrap();
    let project = bds_project(settings);
    let endpoint = Some(source.clone() as Arc<dyn RpcEndpoint>);
    let projects = vec![ProjectProcessor { project, processor: Arc::new(processor) }];
    lite_node::executor::LocalExecutor::new(projects, 2, Duration::from_secs(60), endpoint, None)
}

/// Epoch 9's `baseSnapshot` task over `begin..=end` for slot 1 of 4, with a
/// share of data sources (`None`: the project whole).
pub(crate) fn full_node_task(begin: u64, end: u64, sources: Option<Vec<String>>) -> lite_node::executor::Task {
    lite_node::executor::Task {
        epoch_id: 9,
        begin,
        end,
        day_id: 1,
        slot_id: 1,
        total_slots: 4,
        anchor_block: 0,
        namespace: "devnet-UNISWAPV3-ETH".into(),
        project_type: "baseSnapshot".into(),
        deadline: u64::MAX,
        sources,
    }
}

/// The BDS base snapshot as a projects.json entry with `settings`.
fn bds_project(settings: &serde_json::Value) -> lite_node::config::Project {
    lite_node::config::Project {
        project_type: "baseSnapshot".into(),
        module: "bds_uniswapv3".into(),
        class_name: "BaseSnapshotProcessor".into(),
        preload_tasks: vec!["block_details".into()],
        per_pool: Some(true),
        settings: settings.as_object().unwrap().clone(),
    }
}

/// A node maps the libraries its projects name, and one that implements the
/// slot assignment when none of those does; the package's others stay
/// closed (each is hundreds of kilobytes resident for as long as it runs).
#[test]
fn a_node_opens_only_the_libraries_its_projects_name() {
    let data_dir = tempfile::tempdir().unwrap();
    let mut env = toolchain_env();
    env.push(("LITE_NODE_DATA_DIR".into(), data_dir.path().display().to_string()));
    env.extend(lite_node_testkit::compute_build_env());
    let cfg = ComputeConfig::from_env(&EnvSnapshot::from_pairs(env)).unwrap();
    let project = |module: &str, class: &str| {
        json!({"config": [{"project_type": "p", "processor": {"module": module, "class_name": class},
            "preload_tasks": ["block_details"]}]})
        .to_string()
    };
    let opened = |projects: &str| {
        let projects = lite_node::config::Projects::parse(projects, "projects.json").unwrap();
        let loaded = compute::load_for(&cfg, &projects).unwrap();
        let names: Vec<String> = loaded.libraries.iter().map(|l| l.name.clone()).collect();
        (loaded, names)
    };
    let (loaded, names) = opened(&project("bds-uniswapv3", "BaseSnapshotProcessor"));
    assert_eq!(names, ["bds_uniswapv3"], "it implements the assignment itself");
    let all: Vec<&str> = loaded.package.manifest.libraries.iter().map(|l| l.name.as_str()).collect();
    assert!(all.len() >= 3 && all.contains(&"block_details"), "{all:?}");
    let err = loaded.library("block_details").unwrap_err().to_string();
    assert!(err.contains("library `block_details` of the compute package") && err.contains("was not opened"), "{err}");

    let (loaded, names) = opened(&project("block_details", "BlockDetailsProcessor"));
    assert_eq!(names[0], "block_details");
    assert_eq!(names.len(), 2, "one more, for the assignment: {names:?}");
    assert!(loaded.libraries[1].provides_assignments());
    assert!(loaded.libraries.iter().all(|l| l.name != "compute_template"), "{names:?}");
}
