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
