//! `lite-node finalized` against a real anvil with the devnet's
//! ProtocolState: what the chain finalized, and a project's Merkle proof,
//! checked against the root on chain before it is printed.

use lite_node_protocol::merkle;
use lite_node_testkit::world::World;
use serde_json::Value;

use crate::support::Node;

fn node_for(world: &World) -> Node {
    Node::new()
        .env("POWERLOOM_RPC_URL", world.url())
        .env("PROTOCOL_STATE_CONTRACT", world.manifest.protocol_state.clone())
        .env("DATA_MARKET_CONTRACT", world.manifest.data_market.clone())
}

#[test]
fn a_finalized_epoch_is_printed_with_a_proof_that_verifies_and_an_unfinalized_one_is_named() {
    let world = World::load();
    world.register_validators(2);
    let pairs: Vec<(String, String)> = (0..5)
        .map(|i| (format!("baseSnapshot:0xpool{i}:devnet"), lite_node_protocol::cid(format!("{i}").as_bytes())))
        .collect();
    let tree = merkle::Tree::of(pairs.iter().map(|(p, c)| (p.as_str(), c.as_str()))).unwrap();
    world.release_epoch_with_id(3);
    let root = world.submit_batch(3, "bafy-batch-3", &pairs);
    assert_eq!(root, tree.root().0);
    let node = node_for(&world);

    // One attestation of two: not finalized yet, and said so.
    let run = node.run(&["finalized", "--epoch-id", "3"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("epoch 3 of data market") && run.stderr.contains("a batch, not finalized"), "{run:?}");
    assert!(run.stderr.contains("1 of 2 validators attested"), "{run:?}");

    world.attest_as(1, 3, "bafy-batch-3", root);
    world.store_finalized(3, &pairs);
    let run = node.run(&["finalized", "--epoch-id", "3"]);
    run.assert_ok();
    assert!(run.stdout.contains("2 of 2 validators attested; divergent: none"), "{}", run.stdout);
    for (p, c) in &pairs {
        assert!(run.stdout.contains(&format!("  {p}  {c}")), "{}", run.stdout);
    }

    let (project, cid) = &pairs[3];
    let run = node.run(&["finalized", "--epoch-id", "3", "--project", project, "--proof"]);
    run.assert_ok();
    assert!(run.stdout.contains("verified against the root on chain"), "{}", run.stdout);
    let last: Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["cid"], cid.as_str());
    let proof: Vec<alloy::primitives::B256> = serde_json::from_value(last["proof"].clone()).unwrap();
    assert!(merkle::verify(tree.root(), project, cid, &proof), "the printed proof verifies");
    assert!(!merkle::verify(tree.root(), project, "bafyOther", &proof));

    // Bad questions are named.
    let run = node.run(&["finalized", "--epoch-id", "3", "--proof"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--proof needs --project"), "{run:?}");
    let run = node.run(&["finalized", "--epoch-id", "3", "--project", "nope", "--proof"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--project nope: epoch 3 finalized no CID for it"), "{run:?}");
    let run = Node::new().run(&["finalized", "--epoch-id", "3"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("give --anchor-rpc, or set POWERLOOM_RPC_URL"), "{run:?}");
    // Not a market of this ProtocolState: named, not "not finalized".
    let stranger = "0x000000000000000000000000000000000000dEaD";
    let run = node.run(&["finalized", "--epoch-id", "3", "--data-market", stranger]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("has released no epoch for it: not a data market"), "{run:?}");
    // An epoch not released yet: said so.
    let run = node.run(&["finalized", "--epoch-id", "99"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("epoch 99 of data market") && run.stderr.contains("not released yet"), "{run:?}");
}

/// A forwarder (what a Safe or a relayer is, to this question): its runtime
/// calls `target` with the calldata after its own first 4 bytes, and
/// reverts when that call does. Its deployment code.
fn forwarder(target: alloy::primitives::Address) -> Vec<u8> {
    let mut runtime = vec![
        0x60, 0x04, 0x36, 0x03, // size = calldatasize - 4
        0x80, 0x60, 0x04, 0x60, 0x00, 0x37, // calldatacopy(0, 4, size)
        0x60, 0x00, 0x60, 0x00, 0x82, 0x60, 0x00, 0x60, 0x00, // ret 0,0; args 0,size; value 0
        0x73, // push20 target
    ];
    runtime.extend_from_slice(target.as_slice());
    runtime.extend_from_slice(&[0x5a, 0xf1, 0x60, 0x31, 0x57, 0x60, 0x00, 0x80, 0xfd, 0x5b, 0x00]);
    assert_eq!(runtime[0x31], 0x5b, "the jump lands on its JUMPDEST");
    let len = u8::try_from(runtime.len()).unwrap();
    let mut init = vec![0x60, len, 0x60, 0x0c, 0x60, 0x00, 0x39, 0x60, len, 0x60, 0x00, 0xf3];
    init.extend(runtime);
    init
}

/// Issue 53, finding 10: an epoch whose parts were stored only through
/// another contract — a forwarder whose own function shares
/// `storeFinalizedCids`'s selector — stays readable and provable: the part
/// is read from the call to ProtocolState the RPC traces, and the
/// transaction's own input (the same selector, not ProtocolState's call) is
/// passed over instead of breaking the epoch for good.
#[test]
fn parts_stored_through_another_contract_leave_the_epoch_provable() {
    use alloy::sol_types::SolCall;
    use lite_node_protocol::contracts::storeFinalizedCidsCall;
    let world = World::load();
    world.register_validators(2);
    let pairs: Vec<(String, String)> = (0..4)
        .map(|i| (format!("baseSnapshot:0xpool{i}:devnet"), lite_node_protocol::cid(format!("r{i}").as_bytes())))
        .collect();
    world.release_epoch_with_id(4);
    let root = world.submit_batch(4, "bafy-batch-4", &pairs);
    world.attest_as(1, 4, "bafy-batch-4", root);

    let protocol_state: alloy::primitives::Address = world.manifest.protocol_state.parse().unwrap();
    let deploy = serde_json::json!({
        "from": world.manifest.accounts[0].address,
        "data": format!("0x{}", alloy::hex::encode(forwarder(protocol_state))),
        "gas": "0x100000",
    });
    let hash = world.rpc("eth_sendTransaction", serde_json::json!([deploy]));
    let forwarder_at = world.receipt(&hash)["contractAddress"].as_str().unwrap().to_owned();
    let mut sorted = pairs.clone();
    sorted.sort();
    let tree = merkle::Tree::of(sorted.iter().map(|(p, c)| (p.as_str(), c.as_str()))).unwrap();
    let proof = tree.multiproof(0..sorted.len()).unwrap();
    let call = storeFinalizedCidsCall {
        dataMarketAddress: world.manifest.data_market.parse().unwrap(),
        epochId: alloy::primitives::U256::from(4),
        projectIds: sorted.iter().map(|(p, _)| p.clone()).collect(),
        snapshotCids: sorted.iter().map(|(_, c)| c.clone()).collect(),
        proof: proof.proof,
        proofFlags: proof.flags,
    };
    // The forwarder's own selector is storeFinalizedCids's.
    let mut data = storeFinalizedCidsCall::SELECTOR.to_vec();
    data.extend(call.abi_encode());
    let receipt = world.transact_to(&forwarder_at, data);
    assert_eq!(receipt["logs"].as_array().map(Vec::len), Some(1), "ProtocolState stored the part: {receipt}");

    let (project, cid) = &pairs[2];
    let run = node_for(&world).run(&["finalized", "--epoch-id", "4", "--project", project, "--proof"]);
    run.assert_ok();
    assert!(run.stdout.contains("verified against the root on chain"), "{}", run.stdout);
    let last: Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["cid"], cid.as_str());
}

/// Serves `answer` as every epoch's pairs (`/data/pairs/{epoch}`); its base
/// URL.
fn serving_pairs(runtime: &tokio::runtime::Runtime, answer: Value) -> String {
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .route("/data/pairs/{epoch}", axum::routing::get(move || async move { axum::Json(answer.clone()) }));
    runtime.spawn(async move { axum::serve(listener, app).await });
    base
}

/// Issue 54, item 7: an epoch of a market that stores no pair on chain is
/// read from a data API, its pairs proved against the root on chain: none
/// given is exit 2 naming `--api`; a hostile server's pairs (one CID
/// changed) are passed over for the next, and with no honest one it is exit
/// 1; a project's proof from those pairs is verified by the contract too.
#[test]
fn an_epoch_without_pairs_on_chain_is_read_from_a_data_api_and_proved_against_the_root() {
    let world = World::load();
    world.register_validators(1);
    let pairs: Vec<(String, String)> = (0..4)
        .map(|i| (format!("baseSnapshot:0xpool{i}:devnet"), lite_node_protocol::cid(format!("{i}").as_bytes())))
        .collect();
    world.release_epoch_with_id(3);
    world.submit_batch(3, "bafy-batch-3", &pairs);
    let node = node_for(&world);

    let run = node.run(&["finalized", "--epoch-id", "3"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("no pair of it is stored on chain yet") && run.stderr.contains("--api"), "{run:?}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let answer = |pairs: &[(String, String)]| {
        serde_json::json!({
            "epochId": 3,
            "protocolState": world.manifest.protocol_state,
            "dataMarket": world.manifest.data_market,
            "pairs": pairs.iter().map(|(p, c)| [p, c]).collect::<Vec<_>>(),
        })
    };
    let mut tampered = pairs.clone();
    tampered[2].1 = lite_node_protocol::cid(b"not what was finalized");
    let hostile = serving_pairs(&runtime, answer(&tampered));
    let honest = serving_pairs(&runtime, answer(&pairs));

    let run = node.run(&["finalized", "--epoch-id", "3", "--api", &hostile]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("no data API gave pairs that make the root on chain"), "{run:?}");

    let apis = format!("{hostile},{honest}");
    let run = node.run(&["finalized", "--epoch-id", "3", "--api", &apis]);
    run.assert_ok();
    assert!(run.stdout.contains("no pair on chain (roots only)"), "{}", run.stdout);
    for (p, c) in &pairs {
        assert!(run.stdout.contains(&format!("  {p}  {c}")), "{}", run.stdout);
    }
    let (project, cid) = &pairs[2];
    let run = node.run(&["finalized", "--epoch-id", "3", "--project", project, "--proof", "--api", &apis]);
    run.assert_ok();
    assert!(run.stdout.contains("by ProtocolState.verifyFinalizedCid (true)"), "{}", run.stdout);
    assert!(run.stdout.contains(&format!("proof of {project} = {cid}")), "{}", run.stdout);
}
