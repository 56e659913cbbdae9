//! `lite-node run` against the devnet world on a real anvil: epochs are
//! dispatched once, in order, across restarts and RPC outages.

use lite_node_testkit::{KuboStandin, RunningCollector, RunningNode, World};
use serde_json::{Value, json};

use crate::support::{node_env, start_node};

fn ids(journal: &[Value]) -> Vec<u64> {
    journal.iter().map(|l| l["epoch_id"].as_u64().unwrap()).collect()
}

#[test]
fn five_released_epochs_reach_the_example_compute_once_in_order() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let mut node = start_node(&node_env(&world.url(), &world.manifest, 1), &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    world.start_day();
    let released: Vec<(u64, u64)> = (0..5).map(|_| world.release_next_epoch()).collect();
    let journal = node.wait_for_journal(5);
    assert_eq!(ids(&journal), released.iter().map(|(id, _)| *id).collect::<Vec<_>>());
    for (line, (_, block)) in journal.iter().zip(&released) {
        assert_eq!(line["project_type"], "blockDetails");
        assert_eq!(line["outcome"], "computed", "{line}");
        assert_eq!(line["submissions"][0]["verdict"], "accepted", "{line}");
        assert_eq!(line["snapshots"], 1);
        assert_eq!(line["released_block"].as_u64(), Some(*block));
    }
    // Nothing more arrives: exactly those five.
    world.mine(3);
    let marker = world.release_next_epoch().0;
    let journal = node.wait_for_journal(6);
    assert_eq!(ids(&journal), [1, 2, 3, 4, 5, marker]);
    assert_eq!(node.stop(), 0);
}

#[test]
fn a_restart_resumes_at_the_next_unprocessed_epoch() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let env = node_env(&world.url(), &world.manifest, 2);
    let dir = data.path().join("node");
    let mut node = start_node(&env, &dir);
    node.wait_for_log("watching ProtocolState");
    world.release_next_epoch();
    world.release_next_epoch();
    node.wait_for_journal(2);
    // Epoch 2 is handled once its cursor is saved (its journal line comes just
    // before: a crash in between computes it again, which is by design).
    lite_node_testkit::poll_until("the cursor at epoch 2", std::time::Duration::from_secs(30), || {
        let cursor = std::fs::read_dir(dir.join("state"))
            .ok()?
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with("cursor-"))?;
        let saved: Value = serde_json::from_slice(&std::fs::read(cursor.path()).ok()?).ok()?;
        (saved["last_epoch"] == 2).then_some(())
    });
    node.kill(); // a crash, not an orderly stop

    world.release_next_epoch();
    world.release_next_epoch();
    let mut node = start_node(&env, &dir);
    let journal = node.wait_for_journal(4);
    assert!(node.log().contains("resuming after anchor block"), "{}", node.log());
    world.release_next_epoch();
    let journal_after = node.wait_for_journal(5);
    assert_eq!(ids(&journal), [1, 2, 3, 4]);
    assert_eq!(ids(&journal_after), [1, 2, 3, 4, 5], "no epoch processed twice or skipped");
    assert_eq!(node.stop(), 0);
}

#[test]
fn the_node_waits_for_an_anchor_that_is_down_at_start_then_catches_up() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let manifest = lite_node_testkit::Manifest::load();
    let url = format!("http://127.0.0.1:{port}");
    let data = tempfile::tempdir().unwrap();
    let mut node = start_node(&node_env(&url, &manifest, 1), &data.path().join("node"));
    node.wait_for_log("identity check: anchor RPC failed");

    let world = World::load_on_port(port);
    world.release_next_epoch();
    world.release_next_epoch();
    let journal = node.wait_for_journal(2);
    assert_eq!(ids(&journal), [1, 2]);
    world.release_next_epoch();
    assert_eq!(ids(&node.wait_for_journal(3)), [1, 2, 3]);
    assert_eq!(node.stop(), 0);
}

#[test]
fn other_markets_and_malformed_logs_are_ignored_without_a_crash() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let mut node = start_node(&node_env(&world.url(), &world.manifest, 1), &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    let other = world.manifest.other_data_market.clone();
    world.release_next_epoch_for(&other);
    world.release_next_epoch_for(&other);
    world.emit_malformed_release();
    let (ours, _) = world.release_next_epoch();
    let journal = node.wait_for_journal(1);
    world.release_next_epoch();
    let journal_after = node.wait_for_journal(2);
    assert_eq!(ids(&journal), [ours]);
    assert_eq!(ids(&journal_after), [ours, ours + 1], "the other market's epochs never show up");
    assert!(node.log().contains("skipping a malformed ProtocolState log"), "{}", node.log());
    assert_eq!(node.stop(), 0);
}

#[test]
fn start_up_refuses_a_slot_that_is_not_this_signers() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    // Slot 9 is not registered.
    let mut env = node_env(&world.url(), &world.manifest, 9);
    let signer = world.manifest.slots[0].1.clone();
    let key = world.manifest.signer_key(1).to_owned();
    env.retain(|(k, _)| k != "SIGNER_ACCOUNT_ADDRESS" && k != "SIGNER_ACCOUNT_PRIVATE_KEY");
    env.push(("SIGNER_ACCOUNT_ADDRESS".into(), signer.clone()));
    env.push(("SIGNER_ACCOUNT_PRIVATE_KEY".into(), key.clone()));
    let mut node = start_node(&env, &data.path().join("a"));
    assert_eq!(node.wait_exit(), 2, "{}", node.log());
    let log = node.log();
    assert!(log.contains("slot 9 is not this node's"), "{log}");
    assert!(log.contains("0x0000000000000000000000000000000000000000 (the slot is not registered)"), "{log}");
    assert!(log.contains(&format!("expected {signer}")), "{log}");

    // Slot 2 belongs to another signer.
    let mut env = node_env(&world.url(), &world.manifest, 2);
    let slot2 = world.manifest.slots[1].1.clone();
    env.retain(|(k, _)| k != "SIGNER_ACCOUNT_ADDRESS" && k != "SIGNER_ACCOUNT_PRIVATE_KEY");
    env.push(("SIGNER_ACCOUNT_ADDRESS".into(), signer.clone()));
    env.push(("SIGNER_ACCOUNT_PRIVATE_KEY".into(), key));
    let mut node = start_node(&env, &data.path().join("b"));
    assert_eq!(node.wait_exit(), 2, "{}", node.log());
    let log = node.log();
    assert!(
        log.contains(&format!(
            "slot 2 is not this node's: ProtocolState {} maps it to {slot2}, expected {signer}",
            world.manifest.protocol_state
        )),
        "{log}"
    );
}

#[test]
fn after_downtime_epochs_within_the_window_are_computed_and_older_ones_counted_missed() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let mut env = node_env(&world.url(), &world.manifest, 1);
    env.push(("LITE_NODE_SUBMISSION_WINDOW_BLOCKS".into(), "20".into()));
    let dir = data.path().join("node");
    let mut node = start_node(&env, &dir);
    node.wait_for_log("watching ProtocolState");
    assert_eq!(node.stop(), 0);

    let (late, _) = world.release_next_epoch();
    world.mine(30);
    let (fresh, _) = world.release_next_epoch();
    let mut node = start_node(&env, &dir);
    let journal = node.wait_for_journal(2);
    assert_eq!(ids(&journal), [late, fresh]);
    assert_eq!(journal[0]["outcome"], "missed");
    assert!(journal[0]["error"].as_str().unwrap().contains("past the 20-block submission window"), "{}", journal[0]);
    assert_eq!(journal[1]["outcome"], "computed");
    assert_eq!(node.stop(), 0);
}

#[test]
fn a_reorged_release_is_noticed_and_never_dispatched_twice() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let mut node = start_node(&node_env(&world.url(), &world.manifest, 1), &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    let snapshot = world.rpc("evm_snapshot", serde_json::json!([]));
    let (first, block) = world.release_next_epoch();
    node.wait_for_journal(1);

    // The release block is replaced: the same epoch id lands one block later.
    world.rpc("evm_revert", serde_json::json!([snapshot]));
    world.mine(1);
    let (again, moved_to) = world.release_next_epoch();
    assert_eq!((again, moved_to), (first, block + 1));
    let (next, _) = world.release_next_epoch();
    let journal = node.wait_for_journal(2);
    assert_eq!(ids(&journal), [first, next], "epoch {first} is not dispatched again");
    node.wait_for_log(&format!("reorg: epoch {first} was released in block {block}"));
    assert_eq!(node.stop(), 0);
}

/// A node configured for the BDS base snapshot of `pools` (lite mode).
fn bds_env(world: &World, slot: u64, dir: &std::path::Path, pools: &[String]) -> Vec<(String, String)> {
    let projects = dir.join("projects.json");
    let config = serde_json::json!({"config": [{
        "project_type": "baseSnapshot",
        "processor": {"module": "bds_uniswapv3", "class_name": "BaseSnapshotProcessor"},
        "preload_tasks": ["block_details"],
        "pools": pools,
    }]});
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(&projects, config.to_string()).unwrap();
    let mut env = node_env(&world.url(), &world.manifest, slot);
    env.retain(|(k, _)| k != "PROJECTS_CONFIG");
    env.push(("PROJECTS_CONFIG".into(), projects.display().to_string()));
    env.push(("LITE_NODE_DATA_DIR".into(), dir.join("collector").display().to_string()));
    env
}

#[test]
fn a_collector_failure_counts_as_a_failed_epoch_with_its_reason_and_is_not_resent() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let pools = &world.manifest.pools;
    // The node snapshots pool 0; the market's list (the collector's) lacks it.
    let env = bds_env(&world, 1, data.path(), &pools[..1]);
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let listed = pools[1..].join(",");
    let collector = RunningCollector::start_with(bin, &env, 0, &["--pools", &listed]);
    let mut env = env;
    env.push(("LOCAL_COLLECTOR_HOST".into(), "127.0.0.1".into()));
    env.push(("LOCAL_COLLECTOR_PORT".into(), collector.port.to_string()));
    let mut node = RunningNode::start(bin, &env, &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    world.release_next_epoch();
    let journal = node.wait_for_journal(1);
    assert_eq!(journal[0]["outcome"], "failed", "{}", journal[0]);
    let error = journal[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("rejected: collector answered `Failure`"), "{}", journal[0]);
    let verdicts = collector.verdicts();
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert!(verdicts[0].contains("is not in the data market's active pool list"), "{verdicts:?}");
    assert!(node.log().contains("rejected: collector answered `Failure`"), "{}", node.log());

    // A rejection is final: after a restart that recomputes the epoch (a
    // crash before the cursor moved), it is not sent again, and it stays a
    // failure that counts toward the three-failure alert — not an "already
    // acknowledged" success (review finding 2, issue 43).
    assert_eq!(node.stop(), 0);
    remove_cursor(&data.path().join("node"));
    let mut node = RunningNode::start(bin, &env, &data.path().join("node"));
    let journal = node.wait_for_journal(2);
    let again = journal[1]["submissions"][0]["verdict"].as_str().unwrap_or_default();
    assert!(again.starts_with("rejected: collector answered `Failure`"), "{}", journal[1]);
    assert!(again.ends_with("(answered before a restart)"), "{}", journal[1]);
    assert_eq!(journal[1]["outcome"], "failed", "{}", journal[1]);
    assert_eq!(collector.verdicts().len(), 1);
    assert_eq!(node.stop(), 0);
}

fn remove_cursor(data: &std::path::Path) {
    let state = data.join("state");
    for entry in std::fs::read_dir(&state).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("cursor-") {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
}

#[test]
fn a_restart_between_compute_and_acknowledgement_neither_loses_nor_duplicates_a_submission() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("node");
    let env = bds_env(&world, 2, data.path(), &world.manifest.pools);
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut node_env = env.clone();
    node_env.push(("LOCAL_COLLECTOR_HOST".into(), "127.0.0.1".into()));
    node_env.push(("LOCAL_COLLECTOR_PORT".into(), port.to_string()));

    // Computed, but the collector is not there: the node keeps retrying; then it crashes.
    let mut node = RunningNode::start(bin, &node_env, &dir);
    node.wait_for_log("watching ProtocolState");
    let (epoch, _) = world.release_next_epoch();
    node.wait_for_log(&format!("submitting to http://127.0.0.1:{port} failed"));
    assert!(dir.join(format!("snapshots/{epoch}")).is_dir(), "the snapshot was computed");
    node.kill();
    assert!(node_journal(&dir).is_empty());

    // The collector comes up; the restarted node recomputes and submits once.
    let collector = RunningCollector::start_with(bin, &env, port, &[]);
    let mut node = RunningNode::start(bin, &node_env, &dir);
    let journal = node.wait_for_journal(1);
    assert_eq!(journal[0]["epoch_id"].as_u64(), Some(epoch));
    assert_eq!(journal[0]["submissions"][0]["verdict"], "accepted", "{}", journal[0]);
    world.release_next_epoch();
    node.wait_for_journal(2);
    assert_eq!(node.stop(), 0);

    // Acknowledged but the cursor not yet saved (a crash at that moment):
    // the epochs are computed again, and nothing is sent twice.
    remove_cursor(&dir);
    let mut node = RunningNode::start(bin, &node_env, &dir);
    let journal = node.wait_for_journal(4);
    for line in &journal[2..] {
        assert_eq!(line["submissions"][0]["verdict"], "already acknowledged", "{line}");
    }
    assert_eq!(node.stop(), 0);
    let verdicts = collector.verdicts();
    assert_eq!(verdicts.len(), 2, "one submission per epoch: {verdicts:?}");
    assert!(verdicts.iter().all(|v| v.starts_with("accepted ")), "{verdicts:?}");
}

/// Trial finding (issue 43): a submission whose deadline passed with the
/// collector down was left as a `sending` line with no closing line; the
/// ledger now closes it as missed.
#[test]
fn a_missed_submission_closes_its_ledger_line() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("node");
    let mut env = node_env(&world.url(), &world.manifest, 1);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    env.push(("LOCAL_COLLECTOR_HOST".into(), "127.0.0.1".into()));
    env.push(("LOCAL_COLLECTOR_PORT".into(), port.to_string()));
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let mut node = RunningNode::start(bin, &env, &dir);
    node.wait_for_log("watching ProtocolState");
    let (epoch, _) = world.release_next_epoch();
    node.wait_for_log(&format!("submitting to http://127.0.0.1:{port} failed"));
    world.mine(lite_node_protocol::submission::WINDOW_BLOCKS + 5);
    let journal = node.wait_for_journal(1);
    let verdict = journal[0]["submissions"][0]["verdict"].as_str().unwrap().to_owned();
    assert!(verdict.starts_with("missed"), "{}", journal[0]);
    assert_eq!(node.stop(), 0);
    let ledger = std::fs::read_to_string(dir.join("state/submissions.jsonl")).unwrap();
    let lines: Vec<Value> =
        ledger.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|l| l["epoch_id"] == epoch).collect();
    let verdicts: Vec<&str> = lines.iter().map(|l| l["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts.len(), 2, "{ledger}");
    assert_eq!(verdicts[0], "sending");
    assert!(verdicts[1].starts_with("missed"), "{ledger}");
}

fn node_journal(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("state/epochs.jsonl")).unwrap_or_default().lines().map(str::to_owned).collect()
}

#[test]
fn with_ipfs_configured_the_exact_bytes_are_uploaded_and_a_cid_mismatch_is_not_submitted() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let kubo = KuboStandin::start(&[]);
    let mut env = node_env(&world.url(), &world.manifest, 1);
    env.push(("IPFS_URL".into(), format!("http://127.0.0.1:{}", kubo.port)));
    let dir = data.path().join("node");
    let mut node = start_node(&env, &dir);
    node.wait_for_log("watching ProtocolState");
    let (epoch, _) = world.release_next_epoch();
    let journal = node.wait_for_journal(1);
    assert_eq!(journal[0]["submissions"][0]["verdict"], "accepted", "{}", journal[0]);
    let snapshot = std::fs::read_dir(dir.join(format!("snapshots/{epoch}"))).unwrap().next().unwrap().unwrap().path();
    let bytes = std::fs::read(&snapshot).unwrap();
    let cid = lite_node_protocol::cid(&bytes);
    assert_eq!(std::fs::read(kubo.store().join(&cid)).unwrap(), bytes, "IPFS holds the exact bytes under the CID");
    let queries = std::fs::read_to_string(kubo.store().join("queries.log")).unwrap();
    assert!(queries.contains("cid-version=1") && queries.contains("raw-leaves=true"), "{queries}");
    assert_eq!(node.stop(), 0);

    // An IPFS that answers another CID: counted as a failure, nothing submitted.
    let wrong = KuboStandin::start(&["--wrong-cid"]);
    let mut env = node_env(&world.url(), &world.manifest, 2);
    env.push(("IPFS_URL".into(), format!("http://127.0.0.1:{}", wrong.port)));
    let mut node = start_node(&env, &data.path().join("node2"));
    node.wait_for_log("watching ProtocolState");
    world.release_next_epoch();
    let journal = node.wait_for_journal(1);
    assert_eq!(journal[0]["outcome"], "failed", "{}", journal[0]);
    assert!(journal[0]["error"].as_str().unwrap().contains("IPFS stored the snapshot as"), "{}", journal[0]);
    assert!(node.collector.as_ref().unwrap().verdicts().is_empty(), "nothing was submitted");
    assert_eq!(node.stop(), 0);
}

/// Slot 1's env, its collector on a free port where nothing listens (yet).
fn env_with_no_collector(world: &World) -> (Vec<(String, String)>, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut env = node_env(&world.url(), &world.manifest, 1);
    env.push(("LOCAL_COLLECTOR_HOST".into(), "127.0.0.1".into()));
    env.push(("LOCAL_COLLECTOR_PORT".into(), port.to_string()));
    (env, port)
}

#[test]
fn a_stop_while_a_submission_waits_for_the_collector_ends_within_the_grace() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let (mut env, port) = env_with_no_collector(&world);
    env.push(("LITE_NODE_STOP_GRACE_SECS".into(), "2".into()));
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let dir = data.path().join("node");
    let mut node = RunningNode::start(bin, &env, &dir);
    node.wait_for_log("watching ProtocolState");
    world.release_next_epoch();
    node.wait_for_log(&format!("submitting to http://127.0.0.1:{port} failed"));
    let log_path = node.stderr.clone();
    assert_eq!(node.stop(), 0);
    let log = std::fs::read_to_string(log_path).unwrap();
    assert!(log.contains("stopping: letting epoch 1 finish (at most 2s)"), "{log}");
    assert!(log.contains("epoch 1 did not finish within 2s; it is processed again after the restart"), "{log}");
    assert!(node_journal(&dir).is_empty(), "nothing recorded for the abandoned epoch");
}

/// The trial's collector outage: epochs released while the collector is
/// down are computed and their messages signed (a `sending` line each in the
/// ledger) while the first one's submission still retries — not one after
/// another, each waiting out the one before. When the collector is back,
/// all three are accepted and recorded in release order.
#[test]
fn epochs_released_while_the_collector_is_down_are_worked_meanwhile_and_all_sent_when_it_is_back() {
    use std::time::Duration;

    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let (env, port) = env_with_no_collector(&world);
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let dir = data.path().join("node");
    let mut node = RunningNode::start(bin, &env, &dir);
    node.wait_for_log("watching ProtocolState");
    let released: Vec<u64> = (0..3).map(|_| world.release_next_epoch().0).collect();
    let sending = || -> std::collections::BTreeSet<u64> {
        let text = std::fs::read_to_string(dir.join("state/submissions.jsonl")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["epoch_id"].as_u64())
            .collect()
    };
    lite_node_testkit::poll_until(
        "every released epoch signed while the collector is down",
        Duration::from_secs(60),
        || (sending().len() == released.len()).then_some(()),
    );
    assert!(node_journal(&dir).is_empty(), "nothing recorded while the first epoch's submission retries");
    let collector = lite_node_testkit::RunningCollector::start_with(bin, &env, port, &[]);
    let journal = node.wait_for_journal(released.len());
    assert_eq!(ids(&journal), released, "recorded in release order");
    assert!(journal.iter().all(|l| l["outcome"] == "computed"), "{journal:?}");
    let accepted = collector.verdicts().iter().filter(|v| v.starts_with("accepted")).count();
    assert_eq!(accepted, released.len(), "{:?}", collector.verdicts());
    assert_eq!(node.stop(), 0);
}

#[test]
fn a_second_node_on_the_same_data_dir_refuses_to_start_naming_the_first_and_nothing_is_sent_twice() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("node");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let mut env = node_env(&world.url(), &world.manifest, 1);
    let collector = crate::support::with_collector(&mut env);
    let mut first = RunningNode::start(bin, &env, &dir);
    first.wait_for_log("watching ProtocolState");
    let mut second = RunningNode::start(bin, &env, &dir);
    assert_eq!(second.wait_exit(), 2, "{}", second.log());
    let log = second.log();
    assert!(log.contains(&format!("in use by another lite-node (process {} holds", first.pid())), "{log}");
    assert!(log.contains("LITE_NODE_DATA_DIR"), "{log}");

    let (epoch, _) = world.release_next_epoch();
    assert_eq!(ids(&first.wait_for_journal(1)), [epoch]);
    assert_eq!(collector.verdicts().len(), 1, "one submission: {:?}", collector.verdicts());
    assert_eq!(first.stop(), 0);
}

/// A crash (or a full disk) mid-write leaves a torn last line in the ledger
/// and the journal: every later start keeps the complete records, drops the
/// fragment, and runs; nothing is submitted twice.
#[test]
fn torn_last_lines_in_the_ledger_and_journal_are_mended_at_every_start() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("node");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let mut env = node_env(&world.url(), &world.manifest, 1);
    let collector = crate::support::with_collector(&mut env);
    let tear = |name: &str, fragment: &str| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(dir.join("state").join(name)).unwrap();
        f.write_all(fragment.as_bytes()).unwrap();
    };

    let mut node = RunningNode::start(bin, &env, &dir);
    node.wait_for_log("watching ProtocolState");
    world.release_next_epoch();
    node.wait_for_journal(1);
    assert_eq!(node.stop(), 0);
    tear("submissions.jsonl", "{\"epoch_id\":2,\"project_id\":\"blockDe");
    tear("epochs.jsonl", "{\"epoch_id\":2,\"be");

    // Twice: the start after the mended one used to refuse to run.
    for round in 2..=3u64 {
        let mut node = RunningNode::start(bin, &env, &dir);
        node.wait_for_log("watching ProtocolState");
        world.release_next_epoch();
        let journal = node.wait_for_journal(round as usize);
        assert_eq!(ids(&journal), (1..=round).collect::<Vec<_>>(), "complete records kept, fragment gone");
        if round == 2 {
            assert!(node.log().contains("dropped a torn last line"), "{}", node.log());
        }
        assert_eq!(node.stop(), 0);
    }
    let ledger = std::fs::read_to_string(dir.join("state/submissions.jsonl")).unwrap();
    assert_eq!(ledger.lines().count(), 6, "each epoch's message and its answer: {ledger}");
    assert!(ledger.lines().all(|l| serde_json::from_str::<Value>(l).is_ok()), "{ledger}");
    assert_eq!(collector.verdicts().len(), 3, "one submission per epoch: {:?}", collector.verdicts());
}

/// Each submission's verdict is one INFO line at the default level; with
/// LOG_FORMAT=json every log line is a JSON object.
#[test]
fn each_verdict_is_logged_and_log_format_json_writes_json_lines() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let mut env = node_env(&world.url(), &world.manifest, 1);
    env.push(("LOG_FORMAT".into(), "json".into()));
    let mut node = start_node(&env, &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    let (epoch, _) = world.release_next_epoch();
    node.wait_for_journal(1);
    let stderr = node.stderr.clone();
    assert_eq!(node.stop(), 0);
    let lines: Vec<Value> = std::fs::read_to_string(&stderr)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}")))
        .collect();
    let verdict = lines
        .iter()
        .find(|l| l["fields"]["message"].as_str().is_some_and(|m| m.contains("submission accepted")))
        .unwrap_or_else(|| panic!("no verdict line in {lines:?}"));
    assert_eq!(verdict["level"], "INFO");
    assert!(verdict["fields"]["message"].as_str().unwrap().starts_with(&format!("epoch {epoch} blockDetails")));

    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let bad = std::process::Command::new(bin).arg("check").env("LOG_FORMAT", "xml").output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("LOG_FORMAT=xml is not a log format"));
}

/// A node whose first projects (`hanging`) sleep ten minutes and whose last
/// (`echo`) echoes, from the faulty fixture package, with extra settings.
fn node_with_sleepers(world: &World, data: &std::path::Path, hanging: &[&str], extra: &[(&str, &str)]) -> RunningNode {
    let repo = crate::support::faulty_repo();
    let projects = data.join("projects.json");
    let mut config: Vec<Value> = hanging
        .iter()
        .map(|p| {
            json!({"project_type": p, "processor": {"module": "faulty", "class_name": "SlowProcessor"},
                   "preload_tasks": [], "sleep_ms": 600_000})
        })
        .collect();
    config.push(json!({"project_type": "echo", "processor": {"module": "faulty", "class_name": "EchoProcessor"},
                       "preload_tasks": [], "k": 1}));
    std::fs::write(&projects, json!({ "config": config }).to_string()).unwrap();
    let mut env = node_env(&world.url(), &world.manifest, 1);
    env.retain(|(k, _)| k != "PROJECTS_CONFIG");
    env.push(("PROJECTS_CONFIG".into(), projects.display().to_string()));
    env.push(("SNAPSHOTTER_COMPUTE_REPO".into(), repo.url()));
    env.push(("SNAPSHOTTER_COMPUTE_REPO_BRANCH".into(), repo.branch.clone()));
    env.push(("SNAPSHOTTER_COMPUTE_REPO_COMMIT".into(), repo.commit.clone()));
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut node = start_node(&env, &data.join("node"));
    node.wait_for_log("watching ProtocolState");
    node
}

/// SIGTERM while a compute runs on: the whole stop takes the stop grace,
/// not the grace twice over plus the runtime's own wait.
#[test]
fn a_stop_with_a_compute_still_running_ends_within_the_stop_grace() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let mut node = node_with_sleepers(&world, data.path(), &["hangs"], &[("LITE_NODE_STOP_GRACE_SECS", "2")]);
    world.release_next_epoch();
    node.wait_for_log("submission accepted");
    let asked = std::time::Instant::now();
    assert_eq!(node.stop(), 0);
    let took = asked.elapsed();
    assert!(took < std::time::Duration::from_millis(3500), "stopped in {took:?}, grace 2 s");
}

fn status_port(node: &RunningNode) -> u16 {
    node.log()
        .lines()
        .find_map(|l| {
            l.split("status API on http://").nth(1)?.split(' ').next()?.rsplit(':').next()?.parse::<u16>().ok()
        })
        .unwrap()
}

/// Two projects whose computes never return beside a healthy one, 8 epochs
/// on the real binary. The healthy project is submitted in every epoch, and
/// in the first before the hanging ones time out. Each hanging project is
/// quarantined: called in the 1st, 3rd and 6th epochs only (1, 2, then 4
/// epochs off), alerted, and named by `/health`, `/status` and `/metrics`.
/// The node keeps running. (It used to exit with code 4 once 4 computes
/// hung, taking the healthy project down with it.)
#[test]
fn projects_that_hang_are_quarantined_and_a_healthy_one_is_submitted_in_every_epoch() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let extra = [("LITE_NODE_COMPUTE_TIMEOUT_SECS", "1"), ("STATUS_PORT", "0"), ("STATUS_HOST", "127.0.0.1")];
    let mut node = node_with_sleepers(&world, data.path(), &["hangs", "hangs2"], &extra);
    let port = status_port(&node);
    let mut journal = vec![];
    for n in 1..=8 {
        world.release_next_epoch();
        journal = node.wait_for_journal(3 * n);
    }
    let first = journal[0]["epoch_id"].as_u64().unwrap();
    for project in ["hangs", "hangs2"] {
        let called: Vec<u64> = journal
            .iter()
            .filter(|l| l["project_type"] == project)
            .filter(|l| l["error"].as_str().unwrap().contains("timed out after 1s"))
            .map(|l| l["epoch_id"].as_u64().unwrap() - first + 1)
            .collect();
        assert_eq!(called, [1, 3, 6], "{project}: {journal:?}");
        // The epochs it was kept out of are withheld (finding 5: they extend
        // the failure streak), not failures before selection.
        let kept_out: Vec<&Value> = journal
            .iter()
            .filter(|l| l["project_type"] == project && !l["error"].as_str().unwrap_or("").contains("timed out"))
            .collect();
        assert_eq!(kept_out.len(), 5, "{project}: {journal:?}");
        for l in kept_out {
            assert_eq!(l["outcome"], "withheld", "{l}");
            assert!(l["error"].as_str().unwrap().contains(&format!("project `{project}` is quarantined")), "{l}");
        }
    }
    let echoes: Vec<&Value> = journal.iter().filter(|l| l["project_type"] == "echo").collect();
    assert_eq!(echoes.len(), 8);
    for echo in &echoes {
        assert_eq!(echo["outcome"], "computed", "{echo}");
        assert_eq!(echo["submissions"][0]["verdict"], "accepted", "{echo}");
    }
    let hung_first = journal.iter().find(|l| l["project_type"] == "hangs").unwrap();
    let answered = echoes[0]["submissions"][0]["answered_at_ms"].as_u64().unwrap();
    assert!(answered < hung_first["finished_at_ms"].as_u64().unwrap(), "submitted before the hanging ones gave up");

    let health = reqwest::blocking::get(format!("http://127.0.0.1:{port}/health")).unwrap();
    assert_eq!(health.status().as_u16(), 503);
    let health = health.text().unwrap();
    for project in ["hangs", "hangs2"] {
        assert!(health.contains(&format!("project `{project}` is quarantined")), "{health}");
    }
    assert!(health.contains("6 compute(s) hung past their timeout"), "{health}");
    let status: Value = reqwest::blocking::get(format!("http://127.0.0.1:{port}/status")).unwrap().json().unwrap();
    let held = status["computes"]["quarantined"].as_array().unwrap();
    assert_eq!(held.len(), 2, "{status}");
    assert_eq!((held[0]["hangs"].as_u64(), held[0]["until_epoch"].as_u64()), (Some(3), Some(first - 1 + 6 + 1 + 4)));
    assert_eq!(status["computes"]["queue"]["running"], 0, "{status}");
    let metrics = reqwest::blocking::get(format!("http://127.0.0.1:{port}/metrics")).unwrap().text().unwrap();
    for line in
        ["lite_node_projects_quarantined 2", "lite_node_project_quarantines_total 6", "lite_node_computes_hung 6"]
    {
        assert!(metrics.lines().any(|l| l == line), "no `{line}` in\n{metrics}");
    }
    assert!(node.log().contains("project `hangs2` is quarantined"), "logged");
    assert_eq!(node.stop(), 0, "still running, and stops cleanly");
}

/// The node exits with code 4 for a restart only when the threads that hung
/// computes hold reach LITE_NODE_MAX_HUNG_COMPUTES.
#[test]
fn hung_threads_at_the_bound_end_the_node_with_code_4() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let extra = [("LITE_NODE_COMPUTE_TIMEOUT_SECS", "1"), ("LITE_NODE_MAX_HUNG_COMPUTES", "2")];
    let mut node = node_with_sleepers(&world, data.path(), &["hangs", "hangs2"], &extra);
    world.release_next_epoch();
    assert_eq!(node.wait_exit(), 4, "{}", node.log());
    assert!(node.log().contains("LITE_NODE_MAX_HUNG_COMPUTES is 2"), "{}", node.log());
}

/// The anchor chain was reset under a data dir (a fresh devnet from the same
/// saved world): the saved position cannot be this chain's, so the node
/// refuses to start (exit 2) with the fix instead of sitting idle — whether
/// the new chain is still behind the old one or has grown past it.
#[test]
fn a_data_dir_from_another_chain_is_refused_with_the_fix() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("node");
    {
        let world = World::load();
        let mut node = start_node(&node_env(&world.url(), &world.manifest, 1), &dir);
        node.wait_for_log("watching ProtocolState");
        for _ in 0..3 {
            world.release_next_epoch();
        }
        node.wait_for_journal(3);
        assert_eq!(node.stop(), 0);
    }
    for grown in [0, 20] {
        let world = World::load();
        world.mine(grown);
        let mut node = start_node(&node_env(&world.url(), &world.manifest, 1), &dir);
        assert_eq!(node.wait_exit(), 2, "{}", node.log());
        let log = node.log();
        assert!(log.contains("is not from this anchor chain"), "chain grown by {grown}: {log}");
        assert!(log.contains("move that one file away"), "says how to start over: {log}");
        assert!(log.contains("the submission ledger and books beside it stay"), "keeping the ledger: {log}");
    }
}

/// Review finding 4 (issue 43): after a failover to an endpoint of the same
/// chain that lags (anvil forked from the chain some blocks back: the same
/// blocks, fewer of them), the node waits for it, saying why, instead of
/// exiting 2 as if its data dir were another chain's.
#[test]
fn an_anchor_endpoint_that_lags_is_waited_for_not_refused() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("node");
    let world = World::load();
    let env = node_env(&world.url(), &world.manifest, 1);
    let mut node = start_node(&env, &dir);
    node.wait_for_log("watching ProtocolState");
    let (_, first_release) = world.release_next_epoch();
    world.mine(20);
    world.release_next_epoch();
    world.release_next_epoch();
    node.wait_for_journal(3);
    assert_eq!(node.stop(), 0);

    let fork_block = (first_release + 2).to_string();
    let lagging =
        lite_node_testkit::Anvil::start_with(&["--fork-url", &world.url(), "--fork-block-number", &fork_block]);
    let env: Vec<(String, String)> =
        env.into_iter().map(|(k, v)| if k == "POWERLOOM_RPC_URL" { (k, lagging.url()) } else { (k, v) }).collect();
    let mut node = start_node(&env, &dir);
    node.wait_for_log("it lags; waiting for it to catch up");
    let log = node.log();
    assert!(!log.contains("is not from this anchor chain"), "{log}");
    assert_eq!(node.stop(), 0, "{log}");
}

/// A data dir that cannot be used (here a file stands where it should be;
/// a read-only mount fails the same way) stops the node with the path named.
#[test]
fn a_data_dir_that_cannot_be_used_is_named_in_the_error() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let not_a_dir = data.path().join("data");
    std::fs::write(&not_a_dir, "a file").unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let mut node = RunningNode::start(bin, &node_env(&world.url(), &world.manifest, 1), &not_a_dir);
    assert_eq!(node.wait_exit(), 1, "{}", node.log());
    assert!(node.log().contains(&format!("creating the data dir {}", not_a_dir.display())), "{}", node.log());
}

/// Many epochs past LITE_NODE_RETAIN_EPOCHS leave only the retained ones on
/// disk (snapshots, journal, ledger — the ledger keeps whatever is still in
/// the submission window), and a restart that computes every epoch again
/// (a lost cursor, an old start block) still sends nothing twice.
#[test]
fn the_data_dir_stays_bounded_and_a_restart_still_refuses_a_double_submission() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("node");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let mut env = node_env(&world.url(), &world.manifest, 1);
    env.push(("LITE_NODE_RETAIN_EPOCHS".into(), "3".into()));
    env.push(("LITE_NODE_SUBMISSION_WINDOW_BLOCKS".into(), "5".into()));
    let collector = crate::support::with_collector(&mut env);
    let m = &world.manifest;
    let cursor = dir.join("state").join(format!(
        "cursor-{}-{}.json",
        m.protocol_state.to_lowercase(),
        m.data_market.to_lowercase()
    ));
    let handled = |n: u64| {
        lite_node_testkit::poll_until(&format!("epoch {n} handled"), std::time::Duration::from_secs(60), || {
            let saved: Value = serde_json::from_slice(&std::fs::read(&cursor).ok()?).ok()?;
            (saved["last_epoch"].as_u64() >= Some(n)).then_some(())
        })
    };

    let mut node = RunningNode::start(bin, &env, &dir);
    node.wait_for_log("watching ProtocolState");
    for n in 1..=12 {
        world.release_next_epoch();
        handled(n);
    }
    let epochs_in = |file: &str| -> Vec<u64> {
        let text = std::fs::read_to_string(dir.join("state").join(file)).unwrap();
        text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["epoch_id"].as_u64().unwrap()).collect()
    };
    assert_eq!(epochs_in("epochs.jsonl"), [10, 11, 12], "the journal keeps three epochs");
    // Each epoch's message (before it was sent) and its answer.
    let mut ledger = epochs_in("submissions.jsonl");
    assert_eq!(ledger.len() % 2, 0, "{ledger:?}");
    ledger.dedup();
    assert!(ledger.len() <= 6 && ledger.ends_with(&[10, 11, 12]), "three epochs, and the window's: {ledger:?}");
    let snapshot_dirs = || std::fs::read_dir(dir.join("snapshots")).unwrap().count();
    lite_node_testkit::poll_until("snapshots pruned", std::time::Duration::from_secs(30), || {
        (snapshot_dirs() <= 3).then_some(())
    });
    assert_eq!(collector.verdicts().len(), 12);

    // A crash that loses the cursor: every epoch is computed again from the
    // start block. Those past the window are missed, the rest refused by the
    // ledger: no submission is sent twice.
    node.kill();
    std::fs::remove_file(&cursor).unwrap();
    let mut node = RunningNode::start(bin, &env, &dir);
    node.wait_for_log("watching ProtocolState");
    handled(12);
    let log = node.log();
    assert!(log.contains("the ledger holds the collector's answer to it already (accepted); not sent again"), "{log}");
    assert_eq!(collector.verdicts().len(), 12, "nothing sent twice: {:?}", collector.verdicts());
    assert_eq!(node.stop(), 0);
}

#[test]
fn slot_ids_naming_another_signers_slot_are_refused_by_name_or_skipped_when_asked() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    // SLOT_IDS 1-3 with slot 1's signer: slots 2 and 3 are other signers'.
    let mut env = node_env(&world.url(), &world.manifest, 1);
    env.retain(|(k, _)| k != "SLOT_ID");
    env.push(("SLOT_IDS".into(), "1-3".into()));
    let mut node = start_node(&env, &data.path().join("a"));
    assert_eq!(node.wait_exit(), 2, "{}", node.log());
    let log = node.log();
    let (slot2, slot3) = (&world.manifest.slots[1].1, &world.manifest.slots[2].1);
    assert!(log.contains("2 of 3 slot(s) are not this node's"), "{log}");
    assert!(log.contains(&format!("slot 2 is registered to {slot2}")), "{log}");
    assert!(log.contains(&format!("slot 3 is registered to {slot3}")), "{log}");
    assert!(log.contains("LITE_NODE_SKIP_FOREIGN_SLOTS=true"), "says how to run the others: {log}");

    // Told to skip them, the node runs slot 1.
    env.push(("LITE_NODE_SKIP_FOREIGN_SLOTS".into(), "true".into()));
    let mut node = start_node(&env, &data.path().join("b"));
    node.wait_for_log("watching ProtocolState");
    assert!(node.log().contains("skipping 2 slot(s)"), "{}", node.log());
    let (epoch_id, _) = world.release_next_epoch();
    let journal = node.wait_for_journal(1);
    assert_eq!(journal[0]["epoch_id"].as_u64(), Some(epoch_id));
    assert_eq!(node.stop(), 0);
}

/// Review finding 8 (issue 43): a node with a fresh data dir gave its
/// epochs day 0 until the next `DayStartedEvent` (a whole day, at worst); it
/// now reads the market's day where it starts. An epoch scanned again (the
/// reorg re-check) keeps the day it was released in, not the day the scan
/// reached since.
#[test]
fn epochs_carry_the_markets_day_from_a_fresh_start_and_when_scanned_again() {
    use lite_node::chain::{
        Anchor, HttpRpc, IoRuntime,
        epochs::{Follow, Watcher},
    };
    let world = World::load();
    world.start_day();
    world.start_day();
    let io = IoRuntime::new().unwrap();
    let rpc = HttpRpc::new("anchor", vec![world.url()], std::time::Duration::from_secs(10), io.clone()).unwrap();
    let anchor = std::sync::Arc::new(Anchor::new(
        rpc,
        world.manifest.protocol_state.parse().unwrap(),
        world.manifest.data_market.parse().unwrap(),
    ));
    let data = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let start = world.head() + 1;
    // Re-checks the last 50 blocks on every poll: the first epoch below is
    // scanned again after the next day started.
    let follow = Follow { confirmations: 50, start_block: Some(start) };
    let mut watcher = Watcher::open(anchor, data.path(), follow).unwrap();
    let (first, _) = world.release_next_epoch();
    let poll = runtime.block_on(watcher.poll()).unwrap();
    let days: Vec<(u64, u64)> = poll.epochs.iter().map(|e| (e.epoch_id, e.day_id)).collect();
    assert_eq!(days, [(first, 2)], "the day the market was in when the node started");
    for e in &poll.epochs {
        watcher.epoch_handled(e).unwrap();
    }
    world.start_day();
    let (second, _) = world.release_next_epoch();
    let poll = runtime.block_on(watcher.poll()).unwrap();
    let days: Vec<(u64, u64)> = poll.epochs.iter().map(|e| (e.epoch_id, e.day_id)).collect();
    assert_eq!(days, [(second, 3)]);
    for e in &poll.epochs {
        watcher.epoch_handled(e).unwrap();
    }
    // Rewound (as a validator whose Redis lost the epochs does): both are
    // handed out again, each with its own day.
    assert!(watcher.rewind(start - 1, None).unwrap());
    let poll = runtime.block_on(watcher.poll()).unwrap();
    let days: Vec<(u64, u64)> = poll.epochs.iter().map(|e| (e.epoch_id, e.day_id)).collect();
    assert_eq!(days, [(first, 2), (second, 3)]);
}

/// The market reassigns the node's slot while it runs: `/health` turns 503
/// naming the slot and its new signer (its submissions would be refused as
/// the wrong signer), and healthy again once the slot is the node's signer's
/// again.
#[test]
fn a_slot_the_market_reassigns_while_the_node_runs_is_named_on_health() {
    use std::time::Duration;

    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let mut env = lite_node_testkit::node_env(&world.url(), &world.manifest, 2);
    for (k, v) in [("STATUS_PORT", "0"), ("STATUS_HOST", "127.0.0.1"), ("LITE_NODE_SLOT_CHECK_SECS", "1")] {
        env.push((k.to_owned(), v.to_owned()));
    }
    let signer = env.iter().find(|(k, _)| k == "SIGNER_ACCOUNT_ADDRESS").unwrap().1.clone();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let mut node = RunningNode::start(bin, &env, &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    let port = status_port(&node);
    let health = || {
        let answer = reqwest::blocking::get(format!("http://127.0.0.1:{port}/health")).ok()?;
        Some((answer.status().as_u16(), answer.text().unwrap_or_default()))
    };
    lite_node_testkit::poll_until("healthy", Duration::from_secs(30), || health().filter(|(c, _)| *c == 200));
    let other = world.manifest.accounts[9].address.clone();
    world.assign_slot(2, &other);
    let (_, body) = lite_node_testkit::poll_until("the reassignment named", Duration::from_secs(30), || {
        health().filter(|(c, _)| *c == 503)
    });
    assert!(body.to_lowercase().contains(&format!("slot 2 is registered to {}", other.to_lowercase())), "{body}");
    assert!(node.log().contains("removed or reassigned it"), "said in the log too");
    world.assign_slot(2, &signer);
    lite_node_testkit::poll_until("healthy again", Duration::from_secs(30), || health().filter(|(c, _)| *c == 200));
}

/// The anchor reorganized the block of the last release the node handled
/// while it was stopped (that release undone, then the same epoch released
/// again in another block): the node starts and goes on instead of exiting
/// 2 as if its data dir were another chain's, and no epoch is worked twice.
#[test]
fn a_reorg_of_the_last_release_while_the_node_was_stopped_is_followed_not_refused() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("node");
    let world = World::load();
    let env = node_env(&world.url(), &world.manifest, 1);
    let mut node = start_node(&env, &dir);
    node.wait_for_log("watching ProtocolState");
    world.release_next_epoch();
    world.release_next_epoch();
    let snapshot = world.rpc("evm_snapshot", serde_json::json!([]));
    world.release_next_epoch();
    node.wait_for_journal(3);
    assert_eq!(node.stop(), 0);

    world.rpc("evm_revert", serde_json::json!([snapshot]));
    world.mine(1);
    world.release_next_epoch();
    let mut node = start_node(&env, &dir);
    node.wait_for_log("watching ProtocolState");
    let log = node.log();
    assert!(log.contains("reorg while stopped"), "{log}");
    assert!(!log.contains("is not from this anchor chain"), "{log}");
    world.release_next_epoch();
    node.wait_for_journal(4);
    assert_eq!(node.stop(), 0);
    let epochs: Vec<u64> = node_journal(&dir)
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["epoch_id"].as_u64().unwrap())
        .collect();
    assert_eq!(epochs, [1, 2, 3, 4], "each epoch once");
}
