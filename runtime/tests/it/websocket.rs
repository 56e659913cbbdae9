//! The anchor over WebSocket: a node given a `ws://` anchor sees each
//! release as its block arrives (no poll interval to wait out), and when the
//! connection drops it reconnects and back-fills from its cursor — no epoch
//! missed, none handled twice.

use lite_node_testkit::{TcpProxy, World};

use crate::support::{node_env, start_node};

fn with_anchor(mut env: Vec<(String, String)>, url: String) -> Vec<(String, String)> {
    env.retain(|(k, _)| k != "POWERLOOM_RPC_URL" && k != "LITE_NODE_POLL_INTERVAL_MS");
    env.push(("POWERLOOM_RPC_URL".into(), url));
    // A poll interval far longer than the test: only new heads can wake it.
    env.push(("LITE_NODE_POLL_INTERVAL_MS".into(), "60000".into()));
    env
}

#[test]
fn a_websocket_anchor_wakes_the_node_per_block_and_a_dropped_connection_misses_nothing() {
    let world = World::load();
    let port = world.url().rsplit(':').next().unwrap().trim_end_matches('/').to_owned();
    let proxy = TcpProxy::start(&format!("127.0.0.1:{port}"));
    let data = tempfile::tempdir().unwrap();
    let env = with_anchor(node_env(&world.url(), &world.manifest, 1), format!("ws://127.0.0.1:{}", proxy.port));
    let mut node = start_node(&env, &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    assert!(node.log().contains("the anchor is a WebSocket"), "{}", node.log());

    // With a one-minute poll interval, only the new-head notification can
    // bring these in quickly.
    let first: Vec<u64> = (0..2).map(|_| world.release_next_epoch().0).collect();
    let journal = node.wait_for_journal(2);
    let ids: Vec<u64> = journal.iter().map(|l| l["epoch_id"].as_u64().unwrap()).collect();
    assert_eq!(ids, first);

    // The connection drops; two epochs are released while it is down.
    proxy.cut();
    node.wait_for_log("connection lost");
    let missed: Vec<u64> = (0..2).map(|_| world.release_next_epoch().0).collect();
    proxy.mend();
    node.wait_for_log("connected again");
    let journal = node.wait_for_journal(4);
    let ids: Vec<u64> = journal.iter().map(|l| l["epoch_id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [first.clone(), missed.clone()].concat(), "back-filled from the cursor, in order");

    // And it keeps following new blocks afterwards; nothing was handled twice.
    let next = world.release_next_epoch().0;
    let journal = node.wait_for_journal(5);
    let ids: Vec<u64> = journal.iter().map(|l| l["epoch_id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [first, missed, vec![next]].concat());
    for line in &journal {
        assert_eq!(line["outcome"], "computed", "{line}");
    }
    assert_eq!(node.stop(), 0);
}
