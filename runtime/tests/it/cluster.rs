//! A full node over machines, in one process: a coordinator and three
//! workers with their own processors, sharing a real `redis-server`, over
//! the devnet's pools on anvil with the bundled package.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use lite_node::{
    chain::{HttpRpc, IoRuntime},
    epochs::preload,
    executor::{Executor, LocalExecutor, OutcomeKind, Task},
    full_node::{Boards, Coordinator, Member, Mode, Worker},
};
use lite_node_testkit::{RedisServer, World};
use serde_json::json;

use crate::bds::{activity, bundled, full_node_executor, full_node_task};

/// A coordinator with `patience` and its workers `ids` on `boards`, all on
/// package `p` of plugin API 0.4.0, computing `baseSnapshot`.
fn cluster_of(boards: &Boards, mode: Mode, patience: Duration, ids: &[&str]) -> (Coordinator, Vec<Worker>) {
    let coordinator = Coordinator {
        boards: boards.clone(),
        mode,
        package: "p".into(),
        api: "0.4.0".into(),
        lease: Duration::from_secs(5),
        poll: Duration::from_millis(50),
        patience,
    };
    let member = |id: &str| Member {
        id: id.into(),
        package: "p".into(),
        api: "0.4.0".into(),
        assign: mode.name().into(),
        lease_ms: 5_000,
        instance: String::new(),
    };
    let workers =
        ids.iter().map(|id| Worker::new(boards.clone(), mode, member(id), vec!["baseSnapshot".into()])).collect();
    (coordinator, workers)
}

/// In each mode: every pool's snapshot comes back exactly once and
/// byte-identical to computing them all at once, although one of the three
/// workers stops after joining (peer index: after claiming its share) and
/// the two others finish its part within the epoch.
#[test]
fn the_cluster_gathers_every_pool_once_and_finishes_a_stopped_workers_part() {
    let world = World::load();
    let (begin, end) = activity(&world);
    let data = tempfile::tempdir().unwrap();
    let package = bundled(data.path());
    let settings = json!({"pools": world.manifest.pools, "full_node": true});
    let io = IoRuntime::new().unwrap();
    let source = Arc::new(HttpRpc::new("source", vec![world.url()], Duration::from_secs(10), io).unwrap());
    let executor = || full_node_executor(&package, &settings, &source);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let blocks: Arc<[_]> = rt.block_on(preload::block_details(&source, begin, end)).unwrap().into();
    let task = full_node_task(begin, end, None);
    let whole: BTreeMap<String, String> = {
        let sources = rt.block_on(executor().data_sources(&task, &blocks)).unwrap().unwrap();
        let all = Task { sources: Some(sources), ..task.clone() };
        let results: Vec<_> =
            rt.block_on(futures_util::StreamExt::collect::<Vec<_>>(executor().execute(vec![all], blocks.clone())));
        results[0].snapshots.iter().cloned().collect()
    };
    assert_eq!(whole.len(), world.manifest.pools.len());

    for mode in [Mode::PeerIndex, Mode::LeastBacklog] {
        let redis = RedisServer::start();
        let conn =
            rt.block_on(async { redis::Client::open(redis.url()).unwrap().get_connection_manager().await.unwrap() });
        let boards = Boards::new(conn, "market:1");
        let (coordinator, workers) = cluster_of(&boards, mode, Duration::from_secs(60), &["w0", "w1", "w2"]);
        let locals: Vec<LocalExecutor> = (0..3).map(|_| executor()).collect();
        let board = boards.of("baseSnapshot");
        let (result, accepted) = rt.block_on(async {
            board.heartbeat(&workers[0].member, Duration::from_secs(60)).await.unwrap();
            board.heartbeat(&workers[1].member, Duration::from_secs(60)).await.unwrap();
            // w2 joins for a moment and then stops.
            board.heartbeat(&workers[2].member, Duration::from_millis(400)).await.unwrap();
            let local = executor();
            let gathered = coordinator.gather(&local, &task, blocks.clone());
            tokio::pin!(gathered);
            let mut stopped_claimed = false;
            let mut accepted = [0usize; 2];
            loop {
                tokio::select! {
                    result = &mut gathered => break (result, accepted),
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {
                        if mode == Mode::PeerIndex && !stopped_claimed && board.epoch_work(9).await.unwrap().is_some() {
                            // w2 takes its share, then stops without a word.
                            let live: Vec<String> = vec!["w0".into(), "w1".into(), "w2".into()];
                            let items = world.manifest.pools.len();
                            for i in lite_node::full_node::assign::peer_index_share(&live, "w2", items).unwrap() {
                                board.claim(9, i, "w2", true).await.unwrap();
                            }
                            stopped_claimed = true;
                        }
                        for (n, (w, local)) in workers.iter().zip(&locals).take(2).enumerate() {
                            let blocks = |b, e| { let source = source.clone(); async move { preload::block_details(&source, b, e).await } };
                            accepted[n] += w.round(local, Duration::from_millis(10), blocks).await.unwrap().accepted;
                        }
                    }
                }
            }
        });
        assert_eq!(result.kind, OutcomeKind::Computed, "{mode:?}: {:?}", result.kind);
        assert_eq!(
            accepted[0] + accepted[1],
            whole.len(),
            "{mode:?}: the two living workers did every pool: {accepted:?}"
        );
        assert_eq!(result.selected, Some(true));
        let got: BTreeMap<String, String> = result.snapshots.iter().cloned().collect();
        assert_eq!(got.len(), result.snapshots.len(), "{mode:?}: a pool twice");
        assert_eq!(got, whole, "{mode:?}: the bytes of computing them all at once");
        let held: BTreeMap<usize, Option<String>> = rt.block_on(board.unfinished(9, whole.len())).unwrap();
        assert!(held.is_empty(), "{mode:?}: all in");
    }
}

/// A live worker whose computes keep failing (its source RPC refuses every
/// call) holds no epoch hostage unnoticed: its rounds say why its share
/// failed (its /health reads that), and the coordinator, when patience runs
/// out, books the epoch as a selected failure naming what was left out — not
/// a success with pools missing.
#[test]
fn a_live_worker_whose_computes_fail_leaves_a_failed_epoch_not_a_partial_success() {
    let world = World::load();
    let (begin, end) = activity(&world);
    let data = tempfile::tempdir().unwrap();
    let package = bundled(data.path());
    let settings = json!({"pools": world.manifest.pools, "full_node": true});
    let io = IoRuntime::new().unwrap();
    let source = Arc::new(HttpRpc::new("source", vec![world.url()], Duration::from_secs(10), io.clone()).unwrap());
    // The broken worker's provider answers every pool's `slot0()` with an error.
    let filter = lite_node_testkit::RpcFilter::start(&world.url(), &["0x3850c7bd"]);
    let broken = Arc::new(HttpRpc::new("source", vec![filter.url()], Duration::from_secs(10), io).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let blocks: Arc<[_]> = rt.block_on(preload::block_details(&source, begin, end)).unwrap().into();
    let task = full_node_task(begin, end, None);
    let redis = RedisServer::start();
    let conn = rt.block_on(async { redis::Client::open(redis.url()).unwrap().get_connection_manager().await.unwrap() });
    let boards = Boards::new(conn, "market:1");
    let (coordinator, workers) = cluster_of(&boards, Mode::PeerIndex, Duration::from_secs(6), &["w0", "w1"]);
    let locals = [full_node_executor(&package, &settings, &source), full_node_executor(&package, &settings, &broken)];
    let board = boards.of("baseSnapshot");
    let (result, failures) = rt.block_on(async {
        for w in &workers {
            board.heartbeat(&w.member, Duration::from_secs(60)).await.unwrap();
        }
        let local = full_node_executor(&package, &settings, &source);
        let gathered = coordinator.gather(&local, &task, blocks.clone());
        tokio::pin!(gathered);
        let mut failures: Vec<String> = Vec::new();
        loop {
            tokio::select! {
                result = &mut gathered => break (result, failures),
                _ = tokio::time::sleep(Duration::from_millis(20)) => {
                    for (w, local) in workers.iter().zip(&locals) {
                        let blocks = |b, e| { let source = source.clone(); async move { preload::block_details(&source, b, e).await } };
                        let round = w.round(local, Duration::from_millis(10), blocks).await.unwrap();
                        failures.extend(round.failure);
                    }
                }
            }
        }
    });
    assert!(!failures.is_empty(), "the broken worker's rounds say its share failed");
    assert!(filter.refused() > 0);
    assert!(failures[0].contains("a share of"), "{failures:?}");
    assert_eq!(result.selected, Some(true));
    let pools = world.manifest.pools.len();
    assert!(
        !result.left_out.is_empty() && result.left_out.len() < pools,
        "the broken worker's share is left out, the other's is in: {} of {pools}",
        result.left_out.len()
    );
    assert_eq!(result.snapshots.len() + result.left_out.len(), pools);
    let outcome = lite_node::outcome::Outcome::computed(result);
    match lite_node::books::verdict(&outcome) {
        lite_node::books::Verdict::SelectedFailure(why) => {
            assert!(why.contains("not computed by the cluster's workers in time"), "{why}")
        }
        other => panic!("booked as {other:?}, not a selected failure"),
    }
}

/// A worker on another compute package than its coordinator's is refused
/// by name when it joins: exit 2, both packages named, nothing computed.
#[test]
fn a_worker_on_another_package_than_its_coordinators_is_refused_by_name() {
    let world = World::load();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let market: alloy::primitives::Address = world.manifest.data_market.parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let conn = redis::Client::open(redis.url()).unwrap().get_connection_manager().await.unwrap();
        // What a coordinator on another commit states on the board.
        Boards::new(conn, lite_node::config::cluster_name(&market, 7))
            .of("baseSnapshot")
            .set_package("0000deadbeef", lite_node_plugin_api::PLUGIN_API_VERSION, "peer-index", 10_000)
            .await
            .unwrap();
    });
    let projects = dir.path().join("projects.json");
    let text = json!({"config": [{"project_type": "baseSnapshot", "pools": world.manifest.pools, "full_node": true,
        "processor": {"module": "bds_uniswapv3", "class_name": "BaseSnapshotProcessor"},
        "preload_tasks": ["block_details"]}]});
    std::fs::write(&projects, text.to_string()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lite-node"))
        .arg("run")
        .env_clear()
        .envs(lite_node_testkit::toolchain_env())
        .env("LITE_NODE_ROLE", "worker")
        .env("LITE_NODE_CLUSTER_REDIS_URL", redis.url())
        .env("LITE_NODE_WORKER_ID", "w9")
        .env("SOURCE_RPC_URL", world.url())
        .env("DATA_MARKET_CONTRACT", &world.manifest.data_market)
        .env("SLOT_ID", "7")
        .env("PROJECTS_CONFIG", &projects)
        .env("LITE_NODE_DATA_DIR", dir.path().join("data"))
        .envs(lite_node_testkit::compute_build_env())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("member w9 runs compute package") && stderr.contains("the coordinator 0000deadbeef"),
        "{stderr}"
    );
}
