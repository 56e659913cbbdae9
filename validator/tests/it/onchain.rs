//! Validators on a real anvil with the devnet's ProtocolState, each with its
//! own Redis database on a real redis-server: who submits the batch, the
//! fallback when that one is down, attestations, the replacement of a batch
//! whose root lost, and an epoch a validator did not watch whole.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use alloy::{
    primitives::{Address, U256},
    sol_types::SolCall,
};
use lite_node_chain::{Anchor, HttpRpc, IoRuntime, TxSender};
use lite_node_core::time::now_secs;
use lite_node_protocol::contracts::{
    attestationsCountCall, divergentValidatorsCall, epochBatchCall, epochBatchReturn, maxSnapshotsCidCall,
    updateAddressesCall,
};
use lite_node_testkit::{RedisServer, world::World};
use lite_node_validator::{
    Market,
    aggregator::Batch,
    consensus::Finalized,
    onchain::{Onchain, Step, rank},
    tracker::Tracker,
};
use redis::AsyncCommands;
use serde_json::json;

const WINDOW: u64 = 2;
const FALLBACK: u64 = 3;

struct Net {
    world: World,
    _redis: RedisServer,
    validators: Vec<V>,
    anchor: Arc<Anchor>,
    rt: tokio::runtime::Runtime,
}

/// One validator: its account, its Redis database, its on-chain worker.
struct V {
    address: Address,
    onchain: Onchain,
    conn: redis::aio::ConnectionManager,
    market: Arc<Market>,
    /// Its account's own transactions (a byzantine validator's, in a test).
    sender: TxSender,
}

/// Accounts 7, 8 and 9 of the world registered as the data market's
/// validators, each with Redis database 1, 2 or 3.
fn net() -> Net {
    let world = World::load();
    let redis = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let accounts: Vec<_> = world.manifest.accounts[7..10].to_vec();
    let market_addr: Address = world.manifest.data_market.parse().unwrap();
    let call = updateAddressesCall {
        dataMarketAddress: market_addr,
        role: 0,
        addrs: accounts.iter().map(|a| a.address.parse().unwrap()).collect(),
        allowed: vec![true; accounts.len()],
    };
    world.transact(call.abi_encode());
    // The tests' epochs (21…25) are released.
    world.release_epoch_with_id(30);
    let io = IoRuntime::new().unwrap();
    let rpc = HttpRpc::new("anchor", vec![world.url()], Duration::from_secs(10), io).unwrap();
    let anchor = Arc::new(Anchor::new(rpc, world.manifest.protocol_state.parse().unwrap(), market_addr));
    let chain_id = world.manifest.chain_id;
    let validators = accounts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            rt.block_on(async {
                let client = redis::Client::open(format!("{}/{}", redis.url(), i + 1)).unwrap();
                let conn = lite_node_validator::connect(&client).await.unwrap();
                let _: () = redis::cmd("FLUSHDB").query_async(&mut conn.clone()).await.unwrap();
                let mut market = Market::new(
                    lite_node_protocol::submission::Scope {
                        protocol_state: anchor.protocol_state,
                        data_market: anchor.data_market,
                    },
                    chain_id,
                    format!("validator-{i}"),
                );
                market.window_blocks = WINDOW;
                let market = Arc::new(market);
                let key: [u8; 32] = alloy::hex::decode(&a.private_key).unwrap().try_into().unwrap();
                let sender = TxSender::new(anchor.shared_rpc(), &key, chain_id).unwrap();
                let onchain = Onchain::new(market.clone(), conn.clone(), anchor.clone(), sender.clone(), FALLBACK);
                V { address: a.address.parse().unwrap(), onchain, conn, market, sender }
            })
        })
        .collect();
    Net { world, _redis: redis, validators, anchor, rt }
}

/// A level-1 batch of `epoch_id` over `projects` as the aggregator stores it.
fn level1(epoch_id: u64, projects: &[(&str, &str)]) -> (String, String) {
    let projects: BTreeMap<String, Finalized> = projects
        .iter()
        .map(|(p, c)| ((*p).to_owned(), Finalized { cid: (*c).to_owned(), votes: 1, voters: 1 }))
        .collect();
    let root = lite_node_validator::consensus::root(&projects);
    let batch = Batch { epoch_id, projects, root: root.clone() };
    let stored = json!({
        "epoch_id": epoch_id,
        "batch_cid": batch.cid(),
        "root": root,
        "projects": batch.content()["projects"],
    });
    (stored.to_string(), root)
}

impl Net {
    /// Validator `v` has its level-1 batch of `epoch_id` (released in
    /// `release_block`) and has listened since `since`.
    fn finalized(&self, v: usize, epoch_id: u64, release_block: u64, since: u64, batch: &str) {
        let v = &self.validators[v];
        let k = &v.market.keys;
        let mut conn = v.conn.clone();
        self.rt.block_on(async {
            let state = [("release_block", release_block), ("intake_since_at_close", since)];
            let _: () = conn.hset_multiple(k.epoch_state(epoch_id), &state).await.unwrap();
            let _: () = conn.set(k.finalized(epoch_id), batch).await.unwrap();
            let _: () = conn.zadd(k.onchain_pending(), epoch_id, epoch_id).await.unwrap();
        });
    }

    /// Rounds of the validators in `who` until nothing is pending for them or
    /// the head passes `until`; one block is mined between rounds with
    /// nothing sent (the devnet's clock).
    fn rounds(&self, who: &[usize], until: u64) {
        loop {
            let mut pending = 0;
            let head = self.world.head();
            for &i in who {
                let v = &self.validators[i];
                self.rt.block_on(v.onchain.round()).unwrap();
                let n: usize = self.rt.block_on(v.conn.clone().zcard(v.market.keys.onchain_pending())).unwrap();
                pending += n;
            }
            if pending == 0 {
                return;
            }
            assert!(head <= until, "still pending at block {head}");
            if self.world.head() == head {
                self.world.mine(1);
            }
        }
    }

    fn state(&self, v: usize, epoch_id: u64) -> std::collections::HashMap<String, String> {
        let v = &self.validators[v];
        self.rt.block_on(v.conn.clone().hgetall(v.market.keys.epoch_state(epoch_id))).unwrap()
    }

    fn chain_batch(&self, epoch_id: u64) -> epochBatchReturn {
        let call = epochBatchCall { dataMarketAddress: self.anchor.data_market, epochId: U256::from(epoch_id) };
        self.rt.block_on(self.anchor.read(&call, None)).unwrap()
    }

    fn attestations(&self, epoch_id: u64) -> u64 {
        let call = attestationsCountCall { dataMarketAddress: self.anchor.data_market, epochId: U256::from(epoch_id) };
        self.rt.block_on(self.anchor.read(&call, None)).unwrap().to::<u64>()
    }

    /// Validators by rank for `epoch_id` (rank 0 first).
    fn by_rank(&self, epoch_id: u64) -> Vec<usize> {
        let mut sorted: Vec<Address> = self.validators.iter().map(|v| v.address).collect();
        sorted.sort();
        let mut order: Vec<usize> = (0..self.validators.len()).collect();
        order.sort_by_key(|i| rank(&sorted, self.validators[*i].address, epoch_id).unwrap());
        order
    }
}

#[test]
fn the_chosen_validator_submits_the_others_attest_and_the_epoch_is_finalized_once() {
    let n = net();
    let epoch = 21;
    let release = n.world.head();
    let (batch, _) = level1(epoch, &[("p:a", "bafyA"), ("p:b", "bafyB")]);
    for v in 0..3 {
        n.finalized(v, epoch, release, release - 1, &batch);
    }
    let order = n.by_rank(epoch);
    // Before the window closes nobody acts.
    for v in 0..3 {
        assert_eq!(n.rt.block_on(n.validators[v].onchain.step(epoch, release)).unwrap(), Step::Wait);
    }
    assert_eq!(n.chain_batch(epoch).submitter, Address::ZERO);
    n.world.mine(WINDOW + 1);
    n.rounds(&[0, 1, 2], release + 20);
    let on_chain = n.chain_batch(epoch);
    assert!(on_chain.finalized, "finalized");
    assert_eq!(on_chain.submitter, n.validators[order[0]].address, "rank 0 submitted");
    assert_eq!(n.attestations(epoch), 3, "each validator attested once");
    let cid = maxSnapshotsCidCall {
        dataMarketAddress: n.anchor.data_market,
        projectId: "p:a".into(),
        epochId: U256::from(epoch),
    };
    let read = n.rt.block_on(n.anchor.read(&cid, None)).unwrap();
    assert_eq!((read._0.as_str(), read._1), ("bafyA", 1));
    for v in 0..3 {
        let s = n.state(v, epoch);
        assert_eq!(s["onchain_status"], "finalized", "validator {v}: {s:?}");
        assert!(s["onchain_tx_hash"].starts_with("0x"), "{s:?}");
        assert!(s["onchain_block_number"].parse::<u64>().unwrap() > release);
        assert!(!s["onchain_finalized_block"].is_empty());
        // Where the chain finalized it, for the consumers' bundles: the
        // transaction of the block named, and the root the chain holds.
        assert!(s["onchain_finalized_tx"].starts_with("0x") && s["onchain_finalized_tx"].len() == 66, "{s:?}");
        assert_eq!(s["onchain_finalized_root"], on_chain.root.to_string(), "{s:?}");
    }
    // Asked again (a restart that finds the epoch pending): nothing is sent.
    for v in 0..3 {
        let k = &n.validators[v].market.keys;
        let _: () = n.rt.block_on(n.validators[v].conn.clone().zadd(k.onchain_pending(), epoch, epoch)).unwrap();
        assert_eq!(
            n.rt.block_on(n.validators[v].onchain.step(epoch, n.world.head())).unwrap(),
            Step::Done("finalized")
        );
    }
    assert_eq!(n.attestations(epoch), 3);
}

#[test]
fn a_submitter_that_is_down_is_replaced_after_its_turn() {
    let n = net();
    let epoch = 22;
    let release = n.world.head();
    let (batch, _) = level1(epoch, &[("p:a", "bafyA")]);
    let order = n.by_rank(epoch);
    for v in 0..3 {
        n.finalized(v, epoch, release, release - 1, &batch);
    }
    n.world.mine(WINDOW + 1);
    let alive = [order[1], order[2]];
    let closes = release + WINDOW + 1;
    // Rank 1 waits out rank 0's turn…
    n.rt.block_on(n.validators[order[1]].onchain.round()).unwrap();
    assert_eq!(n.chain_batch(epoch).submitter, Address::ZERO, "rank 1 waits for its turn");
    n.rounds(&alive, closes + 2 * FALLBACK + 5);
    let on_chain = n.chain_batch(epoch);
    assert!(on_chain.finalized, "finalized by two of three");
    assert_eq!(on_chain.submitter, n.validators[order[1]].address, "the fallback submitted");
    assert!(n.world.head() >= closes + FALLBACK, "not before its turn");
    assert_eq!(n.attestations(epoch), 2);
}

#[test]
fn a_batch_whose_root_lost_is_replaced_and_its_submitter_recorded_as_divergent() {
    let n = net();
    let epoch = 24;
    let release = n.world.head();
    let order = n.by_rank(epoch);
    let (honest, honest_root) = level1(epoch, &[("p:a", "bafyA")]);
    let (wrong, _) = level1(epoch, &[("p:a", "bafyWRONG")]);
    n.finalized(order[0], epoch, release, release - 1, &wrong);
    n.finalized(order[1], epoch, release, release - 1, &honest);
    n.finalized(order[2], epoch, release, release - 1, &honest);
    n.world.mine(WINDOW + 1);
    // The divergent one is rank 0: its batch goes on chain first.
    n.rt.block_on(n.validators[order[0]].onchain.round()).unwrap();
    // Mined on arrival, but the state can trail the answer.
    let submitter = lite_node_testkit::poll_until("rank 0's batch on chain", Duration::from_secs(30), || {
        Some(n.chain_batch(epoch).submitter).filter(|s| !s.is_zero())
    });
    assert_eq!(submitter, n.validators[order[0]].address);
    n.rounds(&[0, 1, 2], release + 30);
    let on_chain = n.chain_batch(epoch);
    assert!(on_chain.finalized);
    assert_eq!(on_chain.root.to_string(), honest_root, "the honest root won");
    let cid = maxSnapshotsCidCall {
        dataMarketAddress: n.anchor.data_market,
        projectId: "p:a".into(),
        epochId: U256::from(epoch),
    };
    assert_eq!(n.rt.block_on(n.anchor.read(&cid, None)).unwrap()._0, "bafyA");
    let divergent = divergentValidatorsCall { dataMarketAddress: n.anchor.data_market, epochId: U256::from(epoch) };
    assert_eq!(n.rt.block_on(n.anchor.read(&divergent, None)).unwrap(), vec![n.validators[order[0]].address]);
    assert_eq!(n.attestations(epoch), 3);
}

#[test]
fn an_epoch_released_before_the_intake_listened_is_not_attested() {
    let n = net();
    let epoch = 25;
    let release = n.world.head();
    let (batch, _) = level1(epoch, &[("p:a", "bafyA")]);
    let order = n.by_rank(epoch);
    for v in 0..3 {
        // The last in rank joined late: listening only since after the release.
        let since = if v == order[2] { release + 1 } else { release - 1 };
        n.finalized(v, epoch, release, since, &batch);
    }
    n.world.mine(WINDOW + 1);
    n.rounds(&[0, 1, 2], release + 20);
    assert!(n.chain_batch(epoch).finalized, "two of three finalize it");
    assert_eq!(n.attestations(epoch), 2, "the late joiner did not attest");
    let s = n.state(order[2], epoch);
    assert_eq!(s["onchain_status"], "skipped", "{s:?}");
    assert!(s["onchain_error"].contains("not listening"), "{s:?}");
    // It reports the gap; the others, which attested, do not.
    for v in 0..3 {
        let (market, mut conn) = (n.validators[v].market.clone(), n.validators[v].conn.clone());
        let gaps = n.rt.block_on(async {
            let _: () = conn.zadd(market.keys.epochs_timeline(), format!("close:{epoch}"), now_secs()).await.unwrap();
            Tracker::new(market, conn).gaps().await.unwrap()
        });
        let expected: &[&str] = if v == order[2] { &["25:not_watched"] } else { &[] };
        assert_eq!(gaps, expected, "validator {v}");
    }
    // A validator that does not act on chain (or restarted and opened the
    // epochs released meanwhile late) lists what it did not watch whole
    // all the same: it finalized them, with only what reached it.
    let (market, mut conn) = (n.validators[order[0]].market.clone(), n.validators[order[0]].conn.clone());
    let gaps = n.rt.block_on(async {
        let k = &market.keys;
        let epochs: [(u64, &[(&str, &str)]); 3] = [
            (125, &[("release_block", "100"), ("intake_since_at_close", "120"), ("onchain_status", "not_run")]),
            (126, &[("release_block", "100"), ("onchain_status", "not_run")]),
            (127, &[("release_block", "100"), ("intake_since_at_close", "99"), ("onchain_status", "not_run")]),
        ];
        for (epoch, state) in epochs {
            let _: () = conn.hset_multiple(k.epoch_state(epoch), state).await.unwrap();
            let _: () = conn.set(k.finalized(epoch), "{}").await.unwrap();
            let _: () = conn.zadd(k.epochs_timeline(), format!("close:{epoch}"), now_secs()).await.unwrap();
        }
        Tracker::new(market.clone(), conn.clone()).gaps().await.unwrap()
    });
    assert_eq!(gaps, ["125:not_watched", "126:not_watched"], "the one watched whole is no gap");
}

/// The batch's root becomes a majority of the current validators when two
/// of three are removed, with no attestation left to come (only an
/// attestation tried to finalize): the validator behind it calls
/// `finalize()` (issue 53; before, the epoch stayed unfinalized until given
/// up).
#[test]
fn a_root_made_a_majority_by_a_validators_removal_is_finalized() {
    let n = net();
    let epoch = 27;
    let release = n.world.head();
    let (batch, root) = level1(epoch, &[("p:a", "bafyA")]);
    let order = n.by_rank(epoch);
    n.finalized(order[0], epoch, release, release - 1, &batch);
    n.world.mine(WINDOW + 1);
    // Rank 0 submits its batch (its vote: 1 of 3); the others are away.
    let v0 = &n.validators[order[0]];
    let submitted = (0..20).any(|_| {
        n.rt.block_on(v0.onchain.round()).unwrap();
        let done = n.state(order[0], epoch).get("onchain_status").is_some_and(|s| s == "submitted");
        n.world.mine(1);
        done
    });
    assert!(submitted, "{:?}", n.state(order[0], epoch));
    n.rt.block_on(v0.onchain.round()).unwrap();
    assert!(!n.chain_batch(epoch).finalized, "1 of 3 is no majority");
    // The owner removes the two that never attested.
    let call = updateAddressesCall {
        dataMarketAddress: n.anchor.data_market,
        role: 0,
        addrs: vec![n.validators[order[1]].address, n.validators[order[2]].address],
        allowed: vec![false, false],
    };
    n.world.transact(call.abi_encode());
    n.rounds(&[order[0]], n.world.head() + 10);
    let on_chain = n.chain_batch(epoch);
    assert!(on_chain.finalized, "finalized once its root had a majority of the current validators");
    assert_eq!(on_chain.root.to_string(), root);
    assert_eq!(n.state(order[0], epoch)["onchain_status"], "finalized");
}

/// A byzantine validator can neither store CIDs the finalized root does not
/// commit to, nor block the honest batch by putting its CID on chain first —
/// for another epoch, or for this one under another root: the honest ones
/// outvote it and replace it under that same CID, at a gas cost that does
/// not grow with what the byzantine batch claimed (issue 42, finding 8).
#[test]
fn pairs_that_do_not_prove_are_refused_and_a_squatted_batch_cid_blocks_nothing() {
    let n = net();
    let epoch = 26;
    let release = n.world.head();
    let order = n.by_rank(epoch);
    let pairs = [("p:a", "bafyA"), ("p:b", "bafyB"), ("p:c", "bafyC")];
    let (honest, honest_root) = level1(epoch, &pairs);
    let honest_cid =
        serde_json::from_str::<serde_json::Value>(&honest).unwrap()["batch_cid"].as_str().unwrap().to_owned();
    let byzantine = &n.validators[order[1]];
    let dm = n.anchor.data_market;
    let batch_of = |epoch: u64, cid: &str, root: alloy::primitives::B256| {
        lite_node_protocol::contracts::submitSubmissionBatchCall {
            dataMarketAddress: dm,
            batchCid: cid.to_owned(),
            epochId: U256::from(epoch),
            finalizedCidsRootHash: root,
        }
        .abi_encode()
    };
    let send = |input: Vec<u8>| n.rt.block_on(byzantine.sender.send(n.anchor.protocol_state, input.into()));
    let mined = |hash| {
        // Mined on arrival, but its receipt can trail the answer.
        let receipt = lite_node_testkit::poll_until("a byzantine transaction mined", Duration::from_secs(30), || {
            n.rt.block_on(byzantine.sender.receipt(hash)).unwrap()
        });
        assert!(receipt.success, "{receipt:?}");
    };
    let refused = |input: Vec<u8>, because: &str| match send(input) {
        Err(lite_node_chain::TxError::Reverted(why)) => assert!(why.contains(because), "{why}"),
        other => panic!("expected a refusal ({because}), got {other:?}"),
    };
    // The honest batch's CID (learnt from the mempool, say) put on chain
    // first for another released epoch: it blocks nothing in this one.
    let junk = alloy::primitives::B256::repeat_byte(0x11);
    mined(send(batch_of(epoch + 1, &honest_cid, junk)).unwrap());
    // A batch CID past the cap is refused: nothing unbounded is stored.
    refused(batch_of(epoch, &"b".repeat(257), junk), "batch CID too long");
    // The honest batch's CID squatted with a junk root.
    mined(send(batch_of(epoch, &honest_cid, junk)).unwrap());
    assert_eq!(n.chain_batch(epoch).root, junk);
    // Nothing can be stored for an epoch not finalized.
    let tree = lite_node_protocol::merkle::Tree::of(pairs).unwrap();
    let store = |ids: &[&str], cids: &[&str], range: std::ops::Range<usize>| {
        let proof = tree.multiproof(range).unwrap();
        lite_node_protocol::contracts::storeFinalizedCidsCall {
            dataMarketAddress: dm,
            epochId: U256::from(epoch),
            projectIds: ids.iter().map(|p| (*p).to_owned()).collect(),
            snapshotCids: cids.iter().map(|c| (*c).to_owned()).collect(),
            proof: proof.proof,
            proofFlags: proof.flags,
        }
        .abi_encode()
    };
    refused(store(&["p:a"], &["bafyA"], 0..1), "not finalized");
    for v in 0..3 {
        n.finalized(v, epoch, release, release - 1, &honest);
    }
    n.world.mine(WINDOW + 1);
    // Only the honest two: the byzantine one stands by.
    n.rounds(&[order[0], order[2]], release + 30);
    let on_chain = n.chain_batch(epoch);
    assert!(on_chain.finalized, "the honest two finalize it");
    assert_eq!(on_chain.root.to_string(), honest_root);
    assert_eq!(on_chain.batchCid, honest_cid, "under the CID the byzantine one used first");
    let divergent = divergentValidatorsCall { dataMarketAddress: dm, epochId: U256::from(epoch) };
    assert_eq!(n.rt.block_on(n.anchor.read(&divergent, None)).unwrap(), vec![byzantine.address]);
    for v in [order[0], order[2]] {
        let s = n.state(v, epoch);
        assert_eq!(s["onchain_status"], "finalized", "{s:?}");
        let gas: u64 = s["onchain_gas_used"].parse().unwrap();
        assert!(gas < 300_000, "validator {v}'s last batch or attestation used {gas} gas");
    }
    let read = |p: &str| {
        let call = maxSnapshotsCidCall { dataMarketAddress: dm, projectId: p.into(), epochId: U256::from(epoch) };
        let r = n.rt.block_on(n.anchor.read(&call, None)).unwrap();
        (r._0, r._1)
    };
    for (p, c) in pairs {
        assert_eq!(read(p), (c.to_owned(), 1), "{p}");
    }
    // A forged CID under an honest proof, pairs out of order, a pair of
    // another range: each refused, and what is stored stays.
    refused(store(&["p:a"], &["bafyX"], 0..1), "does not prove");
    refused(store(&["p:b", "p:a"], &["bafyB", "bafyA"], 0..2), "not ascending");
    refused(store(&["p:c"], &["bafyC"], 0..1), "does not prove");
    assert_eq!(read("p:a"), ("bafyA".to_owned(), 1));
    // Storing a stored part again changes nothing (anyone may).
    mined(send(store(&["p:b", "p:c"], &["bafyB", "bafyC"], 1..3)).unwrap());
    assert_eq!(read("p:b"), ("bafyB".to_owned(), 1));
    let stored = lite_node_protocol::contracts::storedCidsCall { dataMarketAddress: dm, epochId: U256::from(epoch) };
    assert_eq!(n.rt.block_on(n.anchor.read(&stored, None)).unwrap(), U256::from(3));
}

/// A network storing parts of 40 whose validators all hold a level-1 batch
/// of `epoch_id` over `projects` made-up pools, its window closed: the
/// network, the release block, and the project ids, CIDs and root.
fn large_epoch(epoch_id: u64, projects: usize) -> (Net, u64, (Vec<String>, Vec<String>, String)) {
    let mut n = net();
    for v in &mut n.validators {
        v.onchain = v.onchain.clone().with_part_size(40);
    }
    let release = n.world.head();
    let ids: Vec<String> = (0..projects).map(|i| format!("baseSnapshot:0x{i:040x}:devnet")).collect();
    let cids: Vec<String> = (0..projects).map(|i| lite_node_protocol::cid(format!("{i}").as_bytes())).collect();
    let pairs: Vec<(&str, &str)> = ids.iter().map(String::as_str).zip(cids.iter().map(String::as_str)).collect();
    let (batch, root) = level1(epoch_id, &pairs);
    for v in 0..3 {
        n.finalized(v, epoch_id, release, release - 1, &batch);
    }
    n.world.mine(WINDOW + 1);
    (n, release, (ids, cids, root))
}

/// An epoch of many projects is stored in parts of the size given, each
/// proved against the root, and a restart mid-way sends only what is missing.
#[test]
fn a_large_epoch_is_stored_in_parts_after_finalization() {
    let epoch = 27;
    let (n, release, (ids, cids, root)) = large_epoch(epoch, 150);
    n.rounds(&[0, 1, 2], release + 60);
    let on_chain = n.chain_batch(epoch);
    assert!(on_chain.finalized);
    assert_eq!(on_chain.root.to_string(), root);
    let dm = n.anchor.data_market;
    let stored = lite_node_protocol::contracts::storedCidsCall { dataMarketAddress: dm, epochId: U256::from(epoch) };
    assert_eq!(n.rt.block_on(n.anchor.read(&stored, None)).unwrap(), U256::from(150));
    for i in [0, 39, 40, 149] {
        let call = maxSnapshotsCidCall { dataMarketAddress: dm, projectId: ids[i].clone(), epochId: U256::from(epoch) };
        let r = n.rt.block_on(n.anchor.read(&call, None)).unwrap();
        assert_eq!((r._0.as_str(), r._1), (cids[i].as_str(), 1), "project {i}");
    }
    for v in 0..3 {
        assert_eq!(n.state(v, epoch)["onchain_status"], "finalized", "validator {v}");
    }
}

/// An epoch finalized on chain whose submitter died before storing its
/// pairs, and whose other validators came back only after the blocks an
/// epoch is followed: they store the pairs all the same and record it
/// finalized (issue 53: it was given up as `not_finalized`, nothing stored).
#[test]
fn a_finalized_epoch_whose_pairs_were_not_stored_is_stored_after_the_follow_blocks() {
    let epoch = 28;
    let (n, _, (_, _, root)) = large_epoch(epoch, 90);
    let order = n.by_rank(epoch);
    // Rank 0 submits, rank 1 attests (a majority): finalized, and rank 0
    // dies before it stores anything.
    let (v0, v1) = (&n.validators[order[0]], &n.validators[order[1]]);
    let submitted = (0..20).any(|_| {
        n.rt.block_on(v0.onchain.round()).unwrap();
        n.world.mine(1);
        n.chain_batch(epoch).submitter == v0.address
    });
    assert!(submitted);
    let finalized = (0..20).any(|_| {
        n.rt.block_on(v1.onchain.round()).unwrap();
        n.world.mine(1);
        n.chain_batch(epoch).finalized
    });
    assert!(finalized);
    assert_eq!(n.chain_batch(epoch).root.to_string(), root);
    let dm = n.anchor.data_market;
    let stored = lite_node_protocol::contracts::storedCidsCall { dataMarketAddress: dm, epochId: U256::from(epoch) };
    assert_eq!(n.rt.block_on(n.anchor.read(&stored, None)).unwrap(), U256::ZERO, "nothing stored yet");
    // The others are back after the blocks an epoch is followed.
    n.world.mine(lite_node_validator::onchain::FOLLOW_BLOCKS + 10);
    n.rounds(&[order[1], order[2]], n.world.head() + 60);
    assert_eq!(n.rt.block_on(n.anchor.read(&stored, None)).unwrap(), U256::from(90));
    for v in [order[1], order[2]] {
        assert_eq!(n.state(v, epoch)["onchain_status"], "finalized", "validator {v}");
    }
}

/// Issue 54, item 7: a market that finalizes roots only (`pairsOnChain:
/// false`) pays the same gas for an epoch of 10 projects as for one of
/// 1,000 — the batch, the attestations, nothing per project — and stores no
/// pair; its validators record the epoch finalized all the same.
#[test]
fn a_root_only_market_finalizes_ten_or_a_thousand_projects_for_the_same_gas() {
    let mut n = net();
    for v in &mut n.validators {
        v.onchain = v.onchain.clone().root_only();
    }
    let mut gas = Vec::new();
    for (epoch, projects) in [(23u64, 10usize), (24, 1_000)] {
        let release = n.world.head();
        let ids: Vec<String> = (0..projects).map(|i| format!("baseSnapshot:0x{i:040x}:devnet")).collect();
        let cids: Vec<String> = (0..projects).map(|i| lite_node_protocol::cid(format!("{i}").as_bytes())).collect();
        let pairs: Vec<(&str, &str)> = ids.iter().map(String::as_str).zip(cids.iter().map(String::as_str)).collect();
        let (batch, root) = level1(epoch, &pairs);
        for v in 0..3 {
            n.finalized(v, epoch, release, release - 1, &batch);
        }
        n.world.mine(WINDOW + 1);
        let first = n.world.head() + 1;
        n.rounds(&[0, 1, 2], release + 60);
        let on_chain = n.chain_batch(epoch);
        assert!(on_chain.finalized, "epoch {epoch}");
        assert_eq!(on_chain.root.to_string(), root);
        let dm = n.anchor.data_market;
        let stored =
            lite_node_protocol::contracts::storedCidsCall { dataMarketAddress: dm, epochId: U256::from(epoch) };
        assert_eq!(n.rt.block_on(n.anchor.read(&stored, None)).unwrap(), U256::ZERO, "no pair stored");
        for v in 0..3 {
            assert_eq!(n.state(v, epoch)["onchain_status"], "finalized", "validator {v}");
        }
        let ours: Vec<Address> = n.validators.iter().map(|v| v.address).collect();
        let mut used = 0u64;
        for block in first..=n.world.head() {
            let receipts = n.world.rpc("eth_getBlockReceipts", json!([format!("0x{block:x}")]));
            for r in receipts.as_array().unwrap() {
                let from: Address = r["from"].as_str().unwrap().parse().unwrap();
                if ours.contains(&from) {
                    used += lite_node_testkit::world::hex_u64(&r["gasUsed"]);
                }
            }
        }
        println!("epoch {epoch}: {projects} projects finalized on chain for {used} gas");
        gas.push(used);
    }
    let (small, large) = (gas[0] as f64, gas[1] as f64);
    assert!(small > 0.0);
    assert!((large / small - 1.0).abs() < 0.02, "10 projects: {small} gas, 1,000 projects: {large} gas");
}

/// `intake:since` is the head at the moment the intake (re)starts
/// listening; any break (here: signalled by the test) removes it at once,
/// and the next look sets it again to the head then — so no epoch released
/// before a break is ever vouched for; a stop removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_break_in_the_intake_moves_intake_since_to_the_head_after_it_and_a_stop_removes_it() {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    let redis = RedisServer::start();
    let conn = lite_node_validator::connect(&redis::Client::open(redis.url()).unwrap()).await.unwrap();
    let scope = lite_node_protocol::submission::Scope {
        data_market: Address::repeat_byte(0xd1),
        protocol_state: Address::repeat_byte(0x51),
    };
    let market = Arc::new(Market::new(scope, 31337, "intake"));
    let key = market.keys.intake_since();
    // The test's chain head and its count of breaks.
    let (head, breaks) = (Arc::new(AtomicU64::new(100)), Arc::new(AtomicU64::new(0)));
    let seen = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let keeper = {
        let (head, breaks, seen) = (head.clone(), breaks.clone(), seen.clone());
        tokio::spawn(lite_node_validator::onchain::keep_intake_since(
            conn.clone(),
            market.clone(),
            move || {
                let (breaks, seen) = (breaks.clone(), seen.clone());
                async move {
                    let now = breaks.load(SeqCst);
                    (seen.swap(now, SeqCst) != now).then(|| "a message was dropped".to_owned())
                }
            },
            move || {
                let head = head.clone();
                async move { Some(head.load(SeqCst)) }
            },
            async move {
                let _ = stop_rx.await;
            },
        ))
    };
    let since = || {
        let mut conn = conn.clone();
        let key = key.clone();
        async move { conn.get::<_, Option<u64>>(&key).await.unwrap() }
    };
    let until = async |want: Option<u64>| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while since().await != want {
            assert!(tokio::time::Instant::now() < deadline, "intake:since never became {want:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    until(Some(100)).await;
    // The chain moves on; nothing breaks: it still vouches since 100.
    head.store(105, SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(since().await, Some(100));
    // A break: it listens again only from the head after it.
    breaks.fetch_add(1, SeqCst);
    until(Some(105)).await;
    stop_tx.send(()).unwrap();
    keeper.await.unwrap();
    assert_eq!(since().await, None, "a stopped intake vouches for nothing");
}

/// A validator removed from the market while it runs says so: its on-chain
/// worker writes why nothing it attests counts, `/health` turns `degraded`
/// naming it, and once the owner adds it back the trouble clears.
#[test]
fn a_removed_validator_says_so_on_health_until_it_is_added_back() {
    let mut net = net();
    let v = net.validators.remove(0);
    let (address, market, conn) = (v.address, v.market.clone(), v.conn.clone());
    let problem = |conn: &redis::aio::ConnectionManager| -> Option<String> {
        net.rt.block_on(conn.clone().get(market.keys.onchain_problem())).unwrap()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    net.rt.spawn(v.onchain.run(Duration::from_millis(50), async {
        let _ = stopped.await;
    }));
    let listener = net.rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let health_url = format!("http://{}/health", listener.local_addr().unwrap());
    let client = redis::Client::open(format!("{}/1", net._redis.url())).unwrap();
    net.rt.spawn(lite_node_validator::api::serve(market.clone(), client, listener, std::future::pending(), None));
    let health = || -> String {
        let url = health_url.clone();
        net.rt.block_on(async move { reqwest::get(&url).await.unwrap().text().await.unwrap() })
    };
    let set = |allowed: bool| {
        let call = updateAddressesCall {
            dataMarketAddress: net.anchor.data_market,
            role: 0,
            addrs: vec![address],
            allowed: vec![allowed],
        };
        net.world.transact(call.abi_encode());
    };
    // The API answers, with nothing degraded while the key is registered.
    lite_node_testkit::poll_until("the API", Duration::from_secs(10), || {
        let h = health();
        h.contains("\"degraded\":[]").then_some(())
    });
    set(false);
    let said = lite_node_testkit::poll_until("the removal said", Duration::from_secs(30), || problem(&conn));
    assert!(said.contains(&format!("{address}")) && said.contains("not a validator"), "{said}");
    // With the event monitor's head there (no monitor runs here), degraded
    // is the whole story.
    let head = net.world.head();
    let _: () = net.rt.block_on(conn.clone().set_ex(market.keys.anchor_head(), head, 60)).unwrap();
    let h = health();
    assert!(h.contains("\"status\":\"degraded\"") && h.contains("not a validator of data market"), "{h}");
    set(true);
    lite_node_testkit::poll_until("the trouble cleared", Duration::from_secs(30), || {
        problem(&conn).is_none().then_some(())
    });
    let _ = stop.send(());
}
