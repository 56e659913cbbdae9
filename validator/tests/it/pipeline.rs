//! The whole pipeline against a real redis-server: submissions through the
//! gateway, the monitor's window, the dequeuer's checks (each rejection
//! reason counted), the finalizer in parts and the aggregator's batch; then
//! every key written is checked against seed 001's table.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};

use alloy::primitives::Address;
use lite_node_protocol::{
    eip712::{Request, Signer},
    proto,
    submission::{Scope, cases},
};
use lite_node_testkit::RedisServer;
use lite_node_validator::{
    Market,
    aggregator::{Aggregator, Batch},
    chain::{ChainReads, EpochFacts, Selection},
    consensus::Finalized,
    dequeuer::{Dequeuer, Reason, Verdict},
    finalizer::Finalizer,
    gateway::Gateway,
    keys::{self, Ttl},
    monitor::Monitor,
};
use redis::{AsyncCommands, aio::ConnectionManager};

const CHAIN_ID: u64 = 31337;
const POOL_A: &str = "0x00000000000000000000000000000000000000aa";
const POOL_B: &str = "0x00000000000000000000000000000000000000bb";

fn cids() -> (String, String, String) {
    let c = |s: &str| lite_node_protocol::cid::cid(s.as_bytes());
    (c("snapshot a"), c("snapshot b"), c("snapshot c"))
}

/// The chain as a table: registered signers, and per epoch the selected
/// slots and their pools.
struct TableChain {
    signers: HashMap<u64, Address>,
    selected: BTreeMap<u64, String>,
}

impl ChainReads for TableChain {
    async fn signer(&self, slot_id: u64) -> Result<Address, String> {
        Ok(self.signers.get(&slot_id).copied().unwrap_or(Address::ZERO))
    }

    async fn selection(&self, epoch: EpochFacts, slot_id: u64, project_id: &str) -> Result<Selection, String> {
        match self.selected.get(&slot_id) {
            None => Ok(Selection::NotSelected(format!("slot {slot_id} not selected in {}", epoch.epoch_id))),
            // Only projects whose data source is a pool are scoped by it.
            Some(pool) if project_id.contains(pool.as_str()) || !project_id.contains("0x") => Ok(Selection::Selected),
            Some(pool) => Ok(Selection::WrongPool(format!("slot {slot_id} was assigned {pool}"))),
        }
    }
}

fn key(slot: u64) -> [u8; 32] {
    let mut k = [0u8; 32];
    k[31] = slot as u8;
    k[0] = 1;
    k
}

struct World {
    _server: RedisServer,
    conn: ConnectionManager,
    market: Arc<Market>,
    gateway: Gateway,
    monitor: Monitor,
    dequeuer: Dequeuer<TableChain>,
    finalizer: Finalizer,
    aggregator: Aggregator,
}

fn scope() -> Scope {
    Scope {
        data_market: "0x0000000000000000000000000000000000000d01".parse().unwrap(),
        protocol_state: "0x0000000000000000000000000000000000000501".parse().unwrap(),
    }
}

async fn world(part_size: usize) -> World {
    world_with(part_size, 10).await
}

async fn world_with(part_size: usize, window_blocks: u64) -> World {
    let server = RedisServer::start();
    let conn = lite_node_validator::connect(&redis::Client::open(server.url()).unwrap()).await.unwrap();
    let mut market = Market::new(scope(), CHAIN_ID, "validator-1");
    market.window_blocks = window_blocks;
    let market = Arc::new(market);
    let signers = (1..=8).map(|s| (s, Signer::new(&key(s), CHAIN_ID, scope().protocol_state).unwrap().address()));
    let chain = TableChain {
        signers: signers.collect(),
        selected: [(1, POOL_A), (2, POOL_A), (3, POOL_A), (4, POOL_B), (5, POOL_A), (6, POOL_A), (7, POOL_A)]
            .into_iter()
            .map(|(s, p)| (s, p.to_owned()))
            .collect(),
    };
    World {
        gateway: Gateway::new(conn.clone(), market.keys.clone()),
        monitor: Monitor::new(market.clone(), conn.clone()),
        dequeuer: Dequeuer::new(market.clone(), Arc::new(chain), conn.clone()),
        finalizer: Finalizer::new(market.clone(), conn.clone(), part_size),
        aggregator: Aggregator::new(market.clone(), conn.clone()),
        market,
        conn,
        _server: server,
    }
}

fn project(pool: &str) -> String {
    format!("baseSnapshot:{pool}:devnet-UNISWAPV3-ETH")
}

/// A submission signed by `signer_slot`'s key.
fn signed(
    slot: u64,
    signer_slot: u64,
    epoch: u64,
    project: &str,
    cid: &str,
    deadline: u64,
) -> proto::SnapshotSubmission {
    let signer = Signer::new(&key(signer_slot), CHAIN_ID, scope().protocol_state).unwrap();
    let request =
        Request { slot_id: slot, deadline, snapshot_cid: cid.into(), epoch_id: epoch, project_id: project.into() };
    proto::SnapshotSubmission {
        signature: signer.sign(&request).unwrap(),
        request: Some((&request).into()),
        header: String::new(),
        data_market: scope().data_market.to_string(),
        node_version: Some("test".into()),
        protocol_state: scope().protocol_state.to_string(),
    }
}

impl World {
    async fn submit(&self, s: proto::SnapshotSubmission) {
        self.gateway.accept(&s, "test").await.unwrap();
    }

    /// Dequeuer rounds until the queue is empty; every verdict, in order.
    async fn drain(&self) -> Vec<Verdict> {
        let mut all = Vec::new();
        loop {
            let v = self.dequeuer.round(64, Duration::from_millis(50)).await.unwrap();
            if v.iter().all(|v| *v == Verdict::Deferred) {
                all.extend(v);
                return all;
            }
            all.extend(v);
        }
    }

    /// Finalizer and aggregator steps until both queues are empty.
    async fn finalize(&self) {
        while self.finalizer.step(Duration::from_millis(100)).await.unwrap() {}
        while self.aggregator.step(Duration::from_millis(100)).await.unwrap() {}
    }

    async fn finalized(&self, epoch: u64) -> serde_json::Value {
        let body: String = self.conn.clone().get(self.market.keys.finalized(epoch)).await.unwrap();
        serde_json::from_str(&body).unwrap()
    }

    async fn counters(&self) -> BTreeMap<String, u64> {
        self.conn.clone().hgetall(self.market.keys.counters()).await.unwrap()
    }
}

#[tokio::test]
async fn submissions_are_checked_counted_finalized_and_every_key_matches_the_seed() {
    let w = world(250).await;
    let (p_a, p_b) = (project(POOL_A), project(POOL_B));
    let (cid_a, cid_b, cid_c) = cids();
    assert!(w.monitor.released(5, 100, 1000, 1000).await.unwrap());
    assert!(!w.monitor.released(5, 100, 1000, 1000).await.unwrap(), "a release seen again opens nothing");
    assert!(w.monitor.head(101).await.unwrap().is_empty());

    // Votes: A from slots 1, 2 and 5; B from slot 3; slot 4 on pool B.
    for (slot, cid) in [(1, &cid_a), (2, &cid_a), (3, &cid_b), (5, &cid_a)] {
        w.submit(signed(slot, slot, 5, &p_a, cid, 120)).await;
    }
    w.submit(signed(4, 4, 5, &p_b, &cid_c, 120)).await;
    // One of each rejection.
    let mut garbled = signed(6, 6, 5, &p_a, &cid_a, 120);
    garbled.signature = "11".repeat(65);
    w.submit(garbled).await; // bad_signature
    w.submit(signed(6, 7, 5, &p_a, &cid_a, 120)).await; // wrong_signer
    w.submit(signed(6, 6, 5, &p_a, &cid_a, 100)).await; // deadline_passed (head 101)
    w.submit(signed(6, 6, 5, &p_a, &cid_a, 231)).await; // deadline_too_far (100 + 130 < 231)
    w.submit(signed(8, 8, 5, &p_a, &cid_a, 120)).await; // not_selected
    w.submit(signed(7, 7, 5, &p_b, &cid_a, 120)).await; // wrong_pool
    w.submit(signed(1, 1, 5, &p_a, &cid_a, 121)).await; // duplicate (the same CID, signed anew)
    w.submit(signed(2, 2, 5, &p_a, &cid_c, 121)).await; // equivocation
    w.submit(signed(9, 9, 5, &p_a, &cid_a, 120)).await; // unregistered_slot
    w.submit(signed(6, 6, 99, &p_a, &cid_a, 100)).await; // unknown_epoch (and its deadline passed: not waited for)
    w.submit(signed(6, 6, 5, &p_a, "not-a-cid", 120)).await; // bad_form
    lite_node_validator::ReliableQueue::submissions(w.conn.clone(), &w.market.keys)
        .push("{\"this is\": \"not a submission\"}")
        .await
        .unwrap(); // malformed

    // Each submission's own verdict, in the order they were queued (one
    // batch takes them first in, first out).
    let verdicts = w.drain().await;
    let got: Vec<Option<Reason>> = verdicts
        .iter()
        .filter(|v| **v != Verdict::Deferred)
        .map(|v| match v {
            Verdict::Accepted => None,
            Verdict::Rejected(reason, _) => Some(*reason),
            other => panic!("{other:?}"),
        })
        .collect();
    use Reason::*;
    let expected = [
        None,
        None,
        None,
        None,
        None, // the five votes
        Some(BadSignature),
        Some(WrongSigner),
        Some(DeadlinePassed),
        Some(DeadlineTooFar),
        Some(NotSelected),
        Some(WrongPool),
        Some(Duplicate),
        Some(Equivocation),
        Some(UnregisteredSlot),
        Some(UnknownEpoch),
        Some(BadForm),
        Some(Malformed),
    ];
    assert_eq!(got, expected, "{verdicts:#?}");
    let counters = w.counters().await;
    assert_eq!(counters.get("accepted"), Some(&5));
    assert_eq!(counters.get("received"), Some(&16), "the gateway counted what it queued");
    for reason in Reason::ALL.iter().filter(|r| **r != Reason::WindowClosed) {
        assert_eq!(counters.get(&format!("rejected:{}", reason.as_str())), Some(&1), "{reason:?}: {counters:?}");
    }

    // The window closes in anchor blocks: open through block 110 (release
    // 100 + 10), so a deadline of 110 is still taken there; closed at 111.
    assert!(w.monitor.head(110).await.unwrap().is_empty());
    w.submit(signed(6, 6, 5, &p_a, &cid_a, 120)).await;
    assert_eq!(w.monitor.head(111).await.unwrap(), [5]);
    assert_eq!(w.monitor.head(112).await.unwrap(), Vec::<u64>::new(), "closed once");
    let late = w.drain().await;
    assert!(matches!(late.as_slice(), [Verdict::Rejected(Reason::WindowClosed, _)]), "{late:?}");

    w.finalize().await;
    let batch = w.finalized(5).await;
    let projects = &batch["projects"];
    assert_eq!(projects.as_array().unwrap().len(), 2, "{batch}");
    assert_eq!(projects[0]["projectId"], p_a);
    assert_eq!(projects[0]["snapshotCid"], cid_a.as_str());
    assert_eq!(projects[0]["votes"], 3, "slot 2's second CID is not a second vote");
    assert_eq!(projects[1]["projectId"], p_b);
    assert_eq!(projects[1]["votes"], 1);
    let expected = Batch {
        epoch_id: 5,
        projects: [
            (p_a.clone(), Finalized { cid: cid_a.clone(), votes: 3, voters: 4 }),
            (p_b.clone(), Finalized { cid: cid_c.clone(), votes: 1, voters: 1 }),
        ]
        .into(),
        root: String::new(),
    };
    let expected = Batch { root: lite_node_validator::consensus::root(&expected.projects), ..expected };
    assert_eq!(batch["root"], expected.root);
    assert_eq!(batch["batch_cid"], expected.cid());
    let state: HashMap<String, String> = w.conn.clone().hgetall(w.market.keys.epoch_state(5)).await.unwrap();
    assert_eq!(state["window_status"], "closed");
    assert_eq!(state["level1_status"], "completed");
    assert_eq!(state["submissions_count"], "5");
    let broadcast: Vec<String> = w.conn.clone().lrange(w.market.keys.outgoing_batches(), 0, -1).await.unwrap();
    assert_eq!(broadcast.len(), 1);
    assert!(broadcast[0].contains(&expected.cid()), "{}", broadcast[0]);

    // Epoch 6 is open: the tracker's views and the monitor API.
    w.monitor.released(6, 111, 1001, 1001).await.unwrap();
    let tracker = lite_node_validator::tracker::Tracker::new(w.market.clone(), w.conn.clone());
    tracker.current_epoch().await.unwrap();
    let dashboard = tracker.dashboard().await.unwrap();
    assert_eq!(dashboard["submissions_accepted"], 5);
    assert_eq!(dashboard["submissions_rejected"], 13, "one of each reason");
    assert_eq!(dashboard["batches_1m"], 1);
    assert_eq!(tracker.participation().await.unwrap()["epochs_participated_24h"], 1);
    assert!(tracker.gaps().await.unwrap().is_empty(), "epoch 5 was finalized");
    api_answers(&w, &cid_a).await;

    audit_keys(&w).await;
}

async fn api_answers(w: &World, cid_a: &str) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(lite_node_validator::api::serve(w.market.clone(), w.conn.clone(), listener, std::future::pending()));
    let get = |path: &str| {
        let url = format!("{base}{path}");
        async move {
            let r = reqwest::get(&url).await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, body) = get("/epochs/5").await;
    assert_eq!(status, 200, "{body}");
    let epoch: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(epoch["accepted"], 5);
    assert_eq!(epoch["finalized"]["projects"][0]["snapshotCid"], cid_a);
    let (_, body) = get("/epochs/5/submissions").await;
    let subs: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(subs["accepted"].as_array().unwrap().len(), 5);
    assert!(subs["rejected"].as_array().unwrap().iter().any(|r| r["reason"] == "equivocation"), "{body}");
    let (_, body) = get("/epochs/active").await;
    assert!(body.contains("\"epoch_id\":6") && !body.contains("\"epoch_id\":5"), "{body}");
    assert_eq!(get("/epochs/404").await.0, 404);
    assert_eq!(get("/health").await.0, 200);
    let (_, body) = get("/epochs/gaps").await;
    assert_eq!(body, "{\"gaps\":[]}");
    let (_, metrics) = get("/metrics").await;
    for line in [
        "validator_submissions_accepted_total 5",
        "validator_submissions_rejected_total{reason=\"equivocation\"} 1",
        "validator_submissions_rejected_total{reason=\"window_closed\"} 1",
        "validator_queue_depth{queue=\"submissions\"} 0",
        "validator_epochs_finalized_total 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(get("/dashboard").await.1.contains("\"submissions_accepted\":5"));
    assert!(get("/participation").await.1.contains("\"epochs_participated_24h\":1"));
}

/// Every key in Redis is one of seed 001's (or ours, listed with them),
/// with the type and TTL the table gives.
async fn audit_keys(w: &World) {
    let mut conn = w.conn.clone();
    let mut iter: redis::AsyncIter<'_, String> = conn.scan().await.unwrap();
    let mut names = Vec::new();
    while let Some(k) = iter.next_item().await {
        names.push(k.unwrap());
    }
    drop(iter);
    assert!(names.len() > 20, "{names:?}");
    for name in names {
        let spec = keys::spec_of(&name).unwrap_or_else(|| panic!("{name} is in no row of the schema"));
        let kind: String = redis::cmd("TYPE").arg(&name).query_async(&mut conn).await.unwrap();
        assert_eq!(kind, spec.kind.redis_name(), "{name} ({})", spec.pattern);
        let ttl: i64 = conn.ttl(&name).await.unwrap();
        match spec.ttl {
            Ttl::None => assert_eq!(ttl, -1, "{name} should not expire"),
            Ttl::Fixed(d) => assert!(ttl > 0 && ttl <= d.as_secs() as i64, "{name}: ttl {ttl}, expected ≤ {d:?}"),
            Ttl::AfterWindowClose(d) => {
                let window_closed = name.contains(":epoch:5:");
                if window_closed {
                    assert!(ttl > 0 && ttl <= d.as_secs() as i64, "{name}: ttl {ttl} after the close");
                }
            }
        }
    }
}

/// The protocol's table of submission cases (`submission::cases`), the one
/// the devnet collector's test runs too, through the gateway and the
/// dequeuer: each gets the reason the table says.
#[tokio::test]
async fn every_shared_submission_case_gets_its_reason() {
    let w = world_with(250, 130).await;
    w.monitor.released(5, 100, 1, 1).await.unwrap();
    w.monitor.head(104).await.unwrap();
    let setting = cases::Setting {
        scope: scope(),
        chain_id: CHAIN_ID,
        epoch_id: 5,
        release_block: 100,
        head: 104,
        unknown_epoch_id: 999,
        slot_id: 1,
        key: key(1),
        project_id: project(POOL_A),
        other_pool_project_id: project(POOL_B),
        unselected_slot_id: 8,
        unselected_key: key(8),
        unregistered_slot_id: 9,
    };
    for case in cases::cases() {
        w.submit(case.submission(&setting)).await;
        let verdicts = w.drain().await;
        let got = match verdicts.as_slice() {
            [Verdict::Accepted] => None,
            [Verdict::Rejected(reason, _)] => Some(*reason),
            other => panic!("{}: {other:?}", case.name),
        };
        assert_eq!(got, case.expect, "{}: {verdicts:?}", case.name);
    }
}

#[tokio::test]
async fn a_submission_for_an_epoch_not_open_yet_waits_for_it() {
    let w = world(250).await;
    let (cid_a, _, _) = cids();
    w.monitor.head(100).await.unwrap();
    // The node saw epoch 7's release before this validator's monitor did.
    w.submit(signed(1, 1, 7, &project(POOL_A), &cid_a, 120)).await;
    assert_eq!(w.drain().await, [Verdict::Deferred]);
    assert_eq!(w.drain().await, [Verdict::Deferred], "still waiting, not rejected");
    w.monitor.released(7, 100, 1, 1).await.unwrap();
    assert_eq!(w.drain().await, [Verdict::Accepted]);
    // One whose deadline the head has passed is not waited for.
    w.submit(signed(2, 2, 8, &project(POOL_A), &cid_a, 99)).await;
    let late = w.drain().await;
    assert!(matches!(late.as_slice(), [Verdict::Rejected(Reason::UnknownEpoch, _)]), "{late:?}");
}

#[tokio::test]
async fn a_deadline_on_the_windows_last_block_is_taken_there() {
    // The defaults: a deadline up to 130 blocks after the release, a window
    // of as many.
    let w = world_with(250, 130).await;
    assert_eq!(w.market.window_blocks, lite_node_protocol::submission::WINDOW_BLOCKS);
    let (cid_a, _, _) = cids();
    w.monitor.released(5, 100, 1, 1).await.unwrap();
    assert!(w.monitor.head(230).await.unwrap().is_empty(), "open through release + 130");
    w.submit(signed(1, 1, 5, &project(POOL_A), &cid_a, 230)).await;
    assert_eq!(w.drain().await, [Verdict::Accepted]);
    assert_eq!(w.monitor.head(231).await.unwrap(), [5]);
    // A head behind the one recorded (a second monitor, an RPC behind)
    // does not move it back.
    w.monitor.head(200).await.unwrap();
    let head: u64 = w.conn.clone().get(w.market.keys.anchor_head()).await.unwrap();
    assert_eq!(head, 231);
}

#[tokio::test]
async fn an_unreadable_part_fails_its_epoch_and_does_not_hold_the_next_one() {
    let w = world(250).await;
    let (cid_a, _, _) = cids();
    for (epoch, release) in [(5, 100), (6, 101)] {
        w.monitor.released(epoch, release, 1, 1).await.unwrap();
    }
    w.monitor.head(102).await.unwrap();
    for epoch in [5, 6] {
        w.submit(signed(1, 1, epoch, &project(POOL_A), &cid_a, 120)).await;
    }
    assert_eq!(w.drain().await, [Verdict::Accepted, Verdict::Accepted]);
    assert_eq!(w.monitor.head(112).await.unwrap(), [5, 6]);
    while w.finalizer.step(Duration::from_millis(100)).await.unwrap() {}
    // Epoch 5's part is corrupted before the aggregator reads it.
    let _: () = w.conn.clone().set(w.market.keys.batch_part(5, 0), "{torn").await.unwrap();
    while w.aggregator.step(Duration::from_millis(100)).await.unwrap() {}
    let state: BTreeMap<String, String> = w.conn.clone().hgetall(w.market.keys.epoch_state(5)).await.unwrap();
    assert_eq!(state.get("level1_status").map(String::as_str), Some("failed"), "{state:?}");
    let none: Option<String> = w.conn.clone().get(w.market.keys.finalized(5)).await.unwrap();
    assert_eq!(none, None);
    assert_eq!(w.finalized(6).await["projects"][0]["snapshotCid"], cid_a.as_str());
}

#[tokio::test]
async fn without_an_anchor_head_a_submission_for_an_epoch_not_seen_is_kept_not_rejected() {
    let w = world(250).await;
    let (cid_a, _, _) = cids();
    // The event monitor is down (no `anchor:head`) while a node submits for
    // a release it saw.
    w.submit(signed(1, 1, 7, &project(POOL_A), &cid_a, 120)).await;
    let e = w.dequeuer.round(64, Duration::from_millis(50)).await.unwrap_err();
    assert!(e.contains("is the event monitor running?"), "{e}");
    let queue = lite_node_validator::ReliableQueue::submissions(w.conn.clone(), &w.market.keys);
    let held = queue.take_batch(10).await.unwrap();
    assert_eq!(held.len(), 1, "given back, still queued");
    queue.give_back(&held).await.unwrap();
    let counters = w.counters().await;
    assert_eq!(counters.get("rejected:unknown_epoch"), None, "{counters:?}");
    // The monitor comes back and sees the release: the vote counts.
    w.monitor.head(100).await.unwrap();
    w.monitor.released(7, 100, 1, 1).await.unwrap();
    assert_eq!(w.drain().await, [Verdict::Accepted]);
}

#[tokio::test]
async fn a_submission_redelivered_after_a_crash_is_counted_once() {
    let w = world(250).await;
    let (cid_a, _, _) = cids();
    w.monitor.released(5, 100, 1000, 1000).await.unwrap();
    w.monitor.head(101).await.unwrap();
    for slot in [1, 2, 3] {
        w.submit(signed(slot, slot, 5, &project(POOL_A), &cid_a, 120)).await;
    }
    w.submit(signed(8, 8, 5, &project(POOL_A), &cid_a, 120)).await; // rejected: not selected
    let queue = lite_node_validator::ReliableQueue::submissions(w.conn.clone(), &w.market.keys);
    // A worker takes everything, commits its verdicts, and dies before
    // acknowledging: the items are still held when their marks expire.
    let taken = queue.take_batch(10).await.unwrap();
    assert_eq!(taken.len(), 4);
    queue.give_back(&taken).await.unwrap();
    assert_eq!(w.drain().await.len(), 4);
    for t in &taken {
        queue.push(&t.payload).await.unwrap(); // delivered again
    }
    let again = w.drain().await;
    assert_eq!(again, vec![Verdict::Again; 4], "a verdict is never given twice");
    let counters = w.counters().await;
    assert_eq!(counters.get("accepted"), Some(&3));
    assert_eq!(counters.get("rejected:not_selected"), Some(&1));
    assert_eq!(counters.get("rejected:duplicate"), None);
}

#[tokio::test]
async fn parts_and_ties_give_the_same_batch_whatever_the_order_and_the_part_size() {
    // Seven projects, each with a tie between two CIDs: the smallest wins.
    let projects: Vec<String> = (0..7).map(|i| format!("baseSnapshot:tie{i}:devnet")).collect();
    let (cid_a, cid_b, _) = cids();
    let smallest = cid_a.clone().min(cid_b.clone());
    let mut batches = Vec::new();
    for (part_size, forward) in [(250, true), (2, false), (3, true)] {
        let w = world(part_size).await;
        w.monitor.released(9, 50, 1, 1).await.unwrap();
        w.monitor.head(51).await.unwrap();
        let mut order: Vec<(u64, &str)> = vec![(6, cid_b.as_str()), (7, cid_a.as_str())];
        if !forward {
            order.reverse();
        }
        for p in &projects {
            for (slot, cid) in &order {
                w.submit(signed(*slot, *slot, 9, p, cid, 70)).await;
            }
        }
        assert_eq!(w.drain().await.iter().filter(|v| **v == Verdict::Accepted).count(), 14);
        w.monitor.head(61).await.unwrap();
        w.finalize().await;
        let parts: Option<u64> = w.conn.clone().get(w.market.keys.parts_total(9)).await.unwrap();
        assert_eq!(parts, Some(7u64.div_ceil(part_size as u64)));
        let mut batch = w.finalized(9).await;
        for p in batch["projects"].as_array().unwrap() {
            assert_eq!(p["snapshotCid"], smallest.as_str(), "a tie goes to the smallest CID");
        }
        batch.as_object_mut().unwrap().remove("finalized_at");
        batches.push(batch);
    }
    assert_eq!(batches[0], batches[1]);
    assert_eq!(batches[0], batches[2]);
}
