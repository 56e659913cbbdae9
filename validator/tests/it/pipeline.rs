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
    submission::{Projects, Scope, cases},
};
use lite_node_testkit::RedisServer;
use lite_node_validator::{
    Market,
    aggregator::{Aggregator, Batch},
    chain::{ChainReads, EpochFacts, Selection, SlotRegistry},
    consensus::Finalized,
    dequeuer::{Dequeuer, Reason, Verdict},
    finalizer::Finalizer,
    gateway::{Admitted, Gateway},
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
/// slots and their pools; the market's projects. Counts the signer reads.
struct TableChain {
    signers: HashMap<u64, Address>,
    selected: BTreeMap<u64, String>,
    projects: Projects,
    signer_reads: std::sync::Mutex<BTreeMap<u64, u64>>,
    /// Added to every signer read.
    delay: Duration,
    /// Slots reassigned: from this anchor block, this signer.
    reassigned: std::sync::Mutex<BTreeMap<u64, (u64, Address)>>,
    /// A snapshotter the registry disabled (slot 10's).
    disabled: Address,
}

impl SlotRegistry for TableChain {
    async fn signer(&self, slot_id: u64, block: u64) -> Result<Address, String> {
        tokio::time::sleep(self.delay).await;
        *self.signer_reads.lock().unwrap().entry(slot_id).or_default() += 1;
        if let Some((from, signer)) = self.reassigned.lock().unwrap().get(&slot_id)
            && block >= *from
        {
            return Ok(*signer);
        }
        Ok(self.signers.get(&slot_id).copied().unwrap_or(Address::ZERO))
    }

    async fn total_slots(&self, _: u64) -> Result<u64, String> {
        Ok(10)
    }

    async fn enabled(&self, signer: Address, _: u64) -> Result<bool, String> {
        Ok(signer != self.disabled)
    }
}

impl ChainReads for TableChain {
    async fn selection(&self, epoch: EpochFacts, slot_id: u64, project_id: &str) -> Result<Selection, String> {
        if let Err(why) = self.projects.check(project_id) {
            return Ok(Selection::UnknownProject(why));
        }
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
    _server: Option<RedisServer>,
    url: String,
    conn: ConnectionManager,
    market: Arc<Market>,
    chain: Arc<TableChain>,
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

const NAMESPACE: &str = "devnet-UNISWAPV3-ETH";

/// The market's projects: base snapshots of pools, and seven made-up types
/// without a data source (for tests that want many projects).
fn projects() -> Projects {
    Projects::new(NAMESPACE, ["baseSnapshot".to_owned()].into_iter().chain((0..7).map(|i| format!("tie{i}"))))
}

async fn world_with(part_size: usize, window_blocks: u64) -> World {
    world_of(part_size, window_blocks, Duration::ZERO).await
}

async fn world_of(part_size: usize, window_blocks: u64, delay: Duration) -> World {
    let server = RedisServer::start();
    let mut w = world_at(&server.url(), part_size, window_blocks, delay).await;
    w._server = Some(server);
    w
}

/// A fresh validator on `server`, emptied first.
async fn world_on(server: &RedisServer, part_size: usize) -> World {
    let mut conn = redis::Client::open(server.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    world_at(&server.url(), part_size, 10, Duration::ZERO).await
}

async fn world_at(url: &str, part_size: usize, window_blocks: u64, delay: Duration) -> World {
    let conn = lite_node_validator::connect(&redis::Client::open(url).unwrap()).await.unwrap();
    let mut market = Market::new(scope(), CHAIN_ID, "validator-1");
    market.window_blocks = window_blocks;
    let market = Arc::new(market);
    let address = |s: u64| Signer::new(&key(s), CHAIN_ID, scope().protocol_state).unwrap().address();
    let signers = (1..=8).chain([10]).map(|s| (s, address(s)));
    let chain = TableChain {
        signers: signers.collect(),
        selected: [(1, POOL_A), (2, POOL_A), (3, POOL_A), (4, POOL_B), (5, POOL_A), (6, POOL_A), (7, POOL_A)]
            .into_iter()
            .map(|(s, p)| (s, p.to_owned()))
            .collect(),
        projects: projects(),
        signer_reads: Default::default(),
        delay,
        reassigned: Default::default(),
        disabled: address(10),
    };
    let chain = Arc::new(chain);
    World {
        gateway: Gateway::new(conn.clone(), market.clone()),
        monitor: Monitor::new(market.clone(), conn.clone()),
        dequeuer: Dequeuer::new(market.clone(), chain.clone(), conn.clone()),
        chain,
        finalizer: Finalizer::new(market.clone(), conn.clone(), part_size),
        aggregator: Aggregator::new(market.clone(), conn.clone()),
        market,
        conn,
        url: url.to_owned(),
        _server: None,
    }
}

fn project(pool: &str) -> String {
    format!("baseSnapshot:{pool}:{NAMESPACE}")
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
        snapshot: None,
    }
}

impl World {
    /// Through the gateway's checks and into the queue.
    async fn submit(&self, s: proto::SnapshotSubmission) {
        assert_eq!(self.gateway.accept(&s, "test").await.unwrap(), Admitted::Queued);
    }

    /// Refused by the gateway before anything is stored: the reason.
    async fn refused(&self, s: proto::SnapshotSubmission) -> Reason {
        match self.gateway.accept(&s, "test").await.unwrap() {
            Admitted::Refused(rejection) => rejection.reason,
            other => panic!("admitted: {other:?}"),
        }
    }

    /// Dequeuer rounds until the queue is empty, or holds only submissions
    /// that wait; every verdict, in order. (Rounds are taken only while
    /// something is queued: Redis times a blocking take out in 100 ms steps.)
    async fn drain(&self) -> Vec<Verdict> {
        let queue = lite_node_validator::ReliableQueue::submissions(self.conn.clone(), &self.market.keys);
        let mut all = Vec::new();
        while queue.depth().await.unwrap().0 > 0 {
            let v = self.dequeuer.round(64, Duration::from_millis(10)).await.unwrap();
            let waiting = v.iter().all(|v| *v == Verdict::Deferred);
            all.extend(v);
            if waiting {
                break;
            }
        }
        all
    }

    /// Finalizer and aggregator steps while their queues hold anything.
    async fn finalize(&self) {
        let keys = &self.market.keys;
        let finalization = lite_node_validator::ReliableQueue::finalization(self.conn.clone(), keys);
        let aggregation = lite_node_validator::ReliableQueue::aggregation(self.conn.clone(), keys);
        for _ in 0..1_000 {
            if finalization.depth().await.unwrap().0 > 0 {
                self.finalizer.step(Duration::from_millis(10)).await.unwrap();
            } else if aggregation.depth().await.unwrap().0 > 0 {
                self.aggregator.step(Duration::from_millis(10)).await.unwrap();
            } else {
                return;
            }
        }
        panic!("the finalizer's and aggregator's queues never emptied");
    }

    async fn finalized(&self, epoch: u64) -> serde_json::Value {
        let body: String = self.conn.clone().get(self.market.keys.finalized(epoch)).await.unwrap();
        serde_json::from_str(&body).unwrap()
    }

    async fn counters(&self) -> BTreeMap<String, u64> {
        self.conn.clone().hgetall(self.market.keys.counters()).await.unwrap()
    }
}

/// Issue 54, item 2: the snapshot bytes the nodes' submissions carry go
/// through the gateway into Redis (once per CID), and once the epoch is
/// finalized into the validator's store with its tree: every CID of the
/// batch is one the validator can serve; a CID no node sent bytes for is
/// said to be without them. Kept once, however often it is archived.
#[tokio::test]
async fn a_finalized_epochs_snapshots_are_kept_in_the_store_with_its_tree() {
    let w = world(250).await;
    let (p_a, p_b) = (project(POOL_A), project(POOL_B));
    let (a, b) = (br#"{"pool":"a","trades":3}"#.to_vec(), br#"{"pool":"b","trades":0}"#.to_vec());
    let (cid_a, cid_b) = (lite_node_protocol::cid::cid(&a), lite_node_protocol::cid::cid(&b));
    assert!(w.monitor.released(5, 100, 1000, 1000).await.unwrap());
    w.monitor.head(101).await.unwrap();
    for slot in [1, 2, 3] {
        let mut s = signed(slot, slot, 5, &p_a, &cid_a, 120);
        s.snapshot = Some(a.clone());
        w.submit(s).await;
    }
    // Slot 4's node sent its CID alone.
    w.submit(signed(4, 4, 5, &p_b, &cid_b, 120)).await;
    assert!(w.drain().await.iter().all(|v| *v == Verdict::Accepted));
    let kept: Vec<String> = w.conn.clone().keys(w.market.keys.snapshot("*")).await.unwrap();
    assert_eq!(kept, [w.market.keys.snapshot(&cid_a)], "one key for three votes carrying the same bytes");
    let _: () = w.conn.clone().set_ex(w.market.keys.intake_since(), 90, 3).await.unwrap();
    assert_eq!(w.monitor.head(111).await.unwrap(), [5]);
    w.finalize().await;
    let batch = w.finalized(5).await;

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(lite_node_validator::store::Store::open(&dir.path().join("finalized.redb")).unwrap());
    let mut conn = w.conn.clone();
    assert_eq!(lite_node_validator::store::archive_new(&store, &w.market, &mut conn).await.unwrap(), 1);
    assert_eq!(lite_node_validator::store::archive_new(&store, &w.market, &mut conn).await.unwrap(), 0, "once");
    let epoch = store.epoch(5).unwrap().expect("epoch 5 kept");
    assert_eq!(epoch.root, batch["root"].as_str().unwrap());
    assert_eq!(epoch.batch_cid, batch["batch_cid"].as_str().unwrap());
    assert_eq!(epoch.pairs, [(p_a.clone(), cid_a.clone()), (p_b.clone(), cid_b.clone())]);
    assert_eq!(store.block(&cid_a).unwrap(), Some(a));
    assert_eq!(epoch.without_bytes, std::slice::from_ref(&cid_b), "no node sent B's bytes");
    assert_eq!(store.block(&cid_b).unwrap(), None);

    // What a consumer reads of it: a bundle that proves itself to the root,
    // the raw block by its CID, and a clear refusal for each kind of miss.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let client = redis::Client::open(w.url.as_str()).unwrap();
    let served = lite_node_validator::api::serve_with_store(
        w.market.clone(),
        client,
        listener,
        std::future::pending(),
        None,
        Some(lite_node_validator::api::Data { store: store.clone(), rate_per_client: None, retention_days: None }),
    );
    tokio::spawn(served);
    let get = |path: String| {
        let url = format!("{base}{path}");
        async move {
            let r = reqwest::get(&url).await.unwrap();
            let status = r.status().as_u16();
            let kind = r.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
            (status, kind, r.bytes().await.unwrap().to_vec())
        }
    };
    let (status, _, body) = get(format!("/data/5/{p_a}")).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let bundle: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let snapshot = bundle["snapshot"].as_str().unwrap().as_bytes();
    assert_eq!(lite_node_protocol::cid::cid(snapshot), cid_a, "the bytes are the CID's");
    let proof: Vec<alloy::primitives::B256> =
        bundle["proof"].as_array().unwrap().iter().map(|h| h.as_str().unwrap().parse().unwrap()).collect();
    let root: alloy::primitives::B256 = bundle["root"].as_str().unwrap().parse().unwrap();
    assert!(lite_node_protocol::merkle::verify(root, &p_a, &cid_a, &proof), "{bundle}");
    assert_eq!(bundle["root"], batch["root"]);
    let (status, kind, body) = get(format!("/ipfs/{cid_a}")).await;
    assert_eq!((status, kind.as_str()), (200, "application/vnd.ipld.raw"));
    assert_eq!(lite_node_protocol::cid::cid(&body), cid_a);
    let (status, _, body) = get("/data/last".into()).await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&body).unwrap()["epochId"], 5);
    for (path, want, says) in [
        (format!("/data/5/{p_b}"), 404, "no node sent the bytes"),
        ("/data/9/anything".to_owned(), 404, "not finalized here yet (the last is 5)"),
        ("/data/5/baseSnapshot:0xnope:ns".to_owned(), 404, "is not in epoch 5"),
        ("/data/five/x".to_owned(), 400, "not an epoch number"),
        ("/ipfs/not-a-cid".to_owned(), 400, "not-a-cid"),
        (format!("/ipfs/{}", lite_node_protocol::cid::cid(b"never")), 404, "is not kept here"),
    ] {
        let (status, _, body) = get(path.clone()).await;
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, want, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }
}

#[tokio::test]
async fn submissions_are_checked_counted_finalized_and_every_key_matches_the_seed() {
    let w = world(250).await;
    // With seed 001's per-submission keys, so that they are audited too.
    let w = World { dequeuer: w.dequeuer.keeping_seed_records(true), ..w };
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
    // The gateway refuses what needs nothing but the submission, and stores
    // none of it.
    let mut garbled = signed(6, 6, 5, &p_a, &cid_a, 120);
    garbled.signature = "11".repeat(65);
    assert_eq!(w.refused(garbled).await, Reason::BadSignature);
    assert_eq!(w.refused(signed(6, 6, 5, &p_a, "not-a-cid", 120)).await, Reason::BadForm);
    // A carried snapshot that is not the CID's, not canonical, or too large.
    let mut other_bytes = signed(6, 6, 5, &p_a, &cid_a, 120);
    other_bytes.snapshot = Some(b"{\"not\":\"this\"}".to_vec());
    assert_eq!(w.refused(other_bytes).await, Reason::BytesDoNotMatchCid);
    let spaced = lite_node_protocol::cid::cid(b"{ }");
    let mut not_canonical = signed(6, 6, 5, &p_a, &spaced, 120);
    not_canonical.snapshot = Some(b"{ }".to_vec());
    assert_eq!(w.refused(not_canonical).await, Reason::NotCanonicalJson);
    let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(lite_node_protocol::submission::caps::SNAPSHOT));
    let mut too_large = signed(6, 6, 5, &p_a, &lite_node_protocol::cid::cid(big.as_bytes()), 120);
    too_large.snapshot = Some(big.into_bytes());
    assert_eq!(w.refused(too_large).await, Reason::TooLarge);
    // One of each rejection the dequeuer gives.
    w.submit(signed(6, 7, 5, &p_a, &cid_a, 120)).await; // wrong_signer
    w.submit(signed(6, 6, 5, &p_a, &cid_a, 100)).await; // deadline_passed (head 101)
    w.submit(signed(6, 6, 5, &p_a, &cid_a, 231)).await; // deadline_too_far (100 + 130 < 231)
    w.submit(signed(8, 8, 5, &p_a, &cid_a, 120)).await; // not_selected
    w.submit(signed(7, 7, 5, &p_b, &cid_a, 120)).await; // wrong_pool
    w.submit(signed(1, 1, 5, &p_a, &cid_a, 121)).await; // duplicate (the same CID, signed anew)
    w.submit(signed(2, 2, 5, &p_a, &cid_c, 121)).await; // equivocation
    w.submit(signed(9, 9, 5, &p_a, &cid_a, 120)).await; // unregistered_slot
    w.submit(signed(10, 10, 5, &p_a, &cid_a, 120)).await; // snapshotter_disabled
    w.submit(signed(6, 6, 99, &p_a, &cid_a, 100)).await; // unknown_epoch (and its deadline passed: not waited for)
    w.submit(signed(6, 6, 5, &format!("spam:{NAMESPACE}"), &cid_a, 120)).await; // unknown_project
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
        Some(WrongSigner),
        Some(DeadlinePassed),
        Some(DeadlineTooFar),
        Some(NotSelected),
        Some(WrongPool),
        Some(Duplicate),
        Some(Equivocation),
        Some(UnregisteredSlot),
        Some(SnapshotterDisabled),
        Some(UnknownEpoch),
        Some(UnknownProject),
        Some(Malformed),
    ];
    assert_eq!(got, expected, "{verdicts:#?}");
    let records: Vec<String> = redis::AsyncCommands::keys(&mut w.conn.clone(), "*:processed:*").await.unwrap();
    assert_eq!(records.len(), 5, "a processed record per accepted submission: {records:?}");
    let counters = w.counters().await;
    assert_eq!(counters.get("accepted"), Some(&5));
    assert_eq!(counters.get("received"), Some(&16), "the gateway counted what it queued");
    // Missing bytes need a market that requires them (this one does not).
    for reason in Reason::ALL.iter().filter(|r| !matches!(r, Reason::WindowClosed | Reason::MissingBytes)) {
        assert_eq!(counters.get(&format!("rejected:{}", reason.as_str())), Some(&1), "{reason:?}: {counters:?}");
    }

    // The window closes in anchor blocks: open through block 110 (release
    // 100 + 10), closed at 111. A submission is judged by the head when it
    // arrived: one that arrived at 110 and is checked after the close
    // counts; one that arrived at 111 does not.
    assert!(w.monitor.head(110).await.unwrap().is_empty());
    w.submit(signed(6, 6, 5, &p_a, &cid_a, 120)).await;
    // Its intake listening since before the release (what the gateway's
    // keeper writes, with its TTL): epoch 5 is watched whole.
    let _: () = w.conn.clone().set_ex(w.market.keys.intake_since(), 90, 3).await.unwrap();
    assert_eq!(w.monitor.head(111).await.unwrap(), [5]);
    assert_eq!(w.monitor.head(112).await.unwrap(), Vec::<u64>::new(), "closed once");
    w.submit(signed(7, 7, 5, &p_a, &cid_a, 120)).await;
    let late = w.drain().await;
    assert!(matches!(late.as_slice(), [Verdict::Accepted, Verdict::Rejected(Reason::WindowClosed, _)]), "{late:?}");

    w.finalize().await;
    let batch = w.finalized(5).await;
    let projects = &batch["projects"];
    assert_eq!(projects.as_array().unwrap().len(), 2, "{batch}");
    assert_eq!(projects[0]["projectId"], p_a);
    assert_eq!(projects[0]["snapshotCid"], cid_a.as_str());
    assert_eq!(projects[0]["votes"], 3, "slot 2 equivocated: neither of its CIDs counts");
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
    assert_eq!(state["submissions_count"], "6", "counted when the epoch was finalized");
    let broadcast: Vec<String> = w.conn.clone().lrange(w.market.keys.outgoing_batches(), 0, -1).await.unwrap();
    assert_eq!(broadcast.len(), 1);
    assert!(broadcast[0].contains(&expected.cid()), "{}", broadcast[0]);

    // Epoch 6 is open: the tracker's views and the monitor API.
    w.monitor.released(6, 111, 1001, 1001).await.unwrap();
    let tracker = lite_node_validator::tracker::Tracker::new(w.market.clone(), w.conn.clone());
    tracker.current_epoch().await.unwrap();
    let dashboard = tracker.dashboard().await.unwrap();
    assert_eq!(dashboard["submissions_accepted"], 6);
    assert_eq!(dashboard["submissions_rejected"], 18, "one of each reason");
    assert_eq!(dashboard["batches_1m"], 1);
    assert_eq!(tracker.participation().await.unwrap()["epochs_participated_24h"], 1);
    assert!(tracker.gaps().await.unwrap().is_empty(), "epoch 5 was finalized");
    api_answers(&w, &cid_a).await;

    audit_keys(&w).await;
}

async fn api_answers(w: &World, cid_a: &str) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let client = redis::Client::open(w.url.as_str()).unwrap();
    tokio::spawn(lite_node_validator::api::serve(w.market.clone(), client, listener, std::future::pending(), None));
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
    assert_eq!(epoch["accepted"], 6);
    assert_eq!(epoch["finalized"]["projects"][0]["snapshotCid"], cid_a);
    // Every verdict, a page at a time.
    let (mut accepted, mut rejected, mut after, mut pages) = (0, Vec::new(), String::new(), 0);
    loop {
        let (status, body) = get(&format!("/epochs/5/submissions?limit=2&after={after}")).await;
        assert_eq!(status, 200, "{body}");
        let page: serde_json::Value = serde_json::from_str(&body).unwrap();
        accepted += page["accepted"].as_array().unwrap().len();
        rejected.extend(page["rejected"].as_array().unwrap().iter().map(|r| r["reason"].as_str().unwrap().to_owned()));
        pages += 1;
        match page["next"].as_str() {
            Some(next) => after = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(accepted, 6);
    assert!(rejected.iter().any(|r| r == "equivocation"), "{rejected:?}");
    assert!(pages >= 2, "{pages} pages");
    assert_eq!(get("/epochs/5/submissions?after=zz").await.0, 400);
    let (_, body) = get("/epochs/active").await;
    assert!(body.contains("\"epoch_id\":6") && !body.contains("\"epoch_id\":5"), "{body}");
    assert_eq!(get("/epochs/404").await.0, 404);
    assert_eq!(get("/health").await.0, 200);
    let (_, body) = get("/epochs/gaps").await;
    assert_eq!(body, "{\"gaps\":[]}");
    let (_, metrics) = get("/metrics").await;
    for line in [
        "validator_submissions_accepted_total 6",
        "validator_submissions_rejected_total{reason=\"equivocation\"} 1",
        "validator_submissions_rejected_total{reason=\"window_closed\"} 1",
        "validator_queue_depth{queue=\"submissions\"} 0",
        "validator_epochs_finalized_total 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(get("/dashboard").await.1.contains("\"submissions_accepted\":6"));
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
        let got = match w.gateway.accept(&case.submission(&setting), "test").await.unwrap() {
            Admitted::Queued => match w.drain().await.as_slice() {
                [Verdict::Accepted] => None,
                [Verdict::Rejected(reason, _)] => Some(*reason),
                other => panic!("{}: {other:?}", case.name),
            },
            // What needs nothing but the submission is refused before storage.
            Admitted::Refused(rejection) => Some(rejection.reason),
            other => panic!("{}: {other:?}", case.name),
        };
        assert_eq!(got, case.expect, "{}", case.name);
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

/// Slot 1 is reassigned in block 105 and epoch 6 released in 106; the new
/// signer's node submits before this validator's monitor has read either.
/// Its submission is not refused by the registry as this validator read it
/// last: it waits for the epoch, and is then judged — accepted — by the
/// signer at the release. The old signer's, for the same epoch, is refused.
#[tokio::test]
async fn a_new_signers_submission_for_an_epoch_not_seen_yet_waits_and_counts() {
    let w = world(250).await;
    let (cid_a, cid_b, _) = cids();
    w.monitor.slots_recorded(&[] as &[(u64, u64)], 1, 100).await.unwrap();
    w.monitor.head(100).await.unwrap();
    let new_signer = Signer::new(&key(9), CHAIN_ID, scope().protocol_state).unwrap().address();
    w.chain.reassigned.lock().unwrap().insert(1, (105, new_signer));
    w.submit(signed(1, 9, 6, &project(POOL_A), &cid_a, 130)).await;
    assert_eq!(w.drain().await, [Verdict::Deferred], "waits: the registry at the release is not read yet");
    w.monitor.slots_recorded(&[(1, 105)], 101, 106).await.unwrap();
    w.monitor.released(6, 106, 1, 1).await.unwrap();
    w.monitor.head(107).await.unwrap();
    assert_eq!(w.drain().await, [Verdict::Accepted]);
    w.submit(signed(1, 1, 6, &project(POOL_B), &cid_b, 130)).await;
    let old = w.drain().await;
    assert!(matches!(old.as_slice(), [Verdict::Rejected(Reason::WrongSigner, _)]), "{old:?}");
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
async fn a_lost_part_is_counted_again_from_the_votes_and_without_them_fails_alone() {
    let w = world(250).await;
    let (cid_a, _, _) = cids();
    for (epoch, release) in [(5, 100), (6, 101), (7, 101)] {
        w.monitor.released(epoch, release, 1, 1).await.unwrap();
    }
    w.monitor.head(102).await.unwrap();
    for epoch in [5, 6, 7] {
        w.submit(signed(1, 1, epoch, &project(POOL_A), &cid_a, 120)).await;
    }
    assert_eq!(w.drain().await, [Verdict::Accepted, Verdict::Accepted, Verdict::Accepted]);
    assert_eq!(w.monitor.head(112).await.unwrap(), [5, 6, 7]);
    let finalization = lite_node_validator::ReliableQueue::finalization(w.conn.clone(), &w.market.keys);
    while finalization.depth().await.unwrap().0 > 0 {
        w.finalizer.step(Duration::from_millis(10)).await.unwrap();
    }
    // Epoch 5's part is torn, epoch 6's expired (an aggregator down for
    // hours): both are counted again from their votes. Epoch 7 lost its
    // votes too: it fails, alone.
    let mut conn = w.conn.clone();
    let _: () = conn.set(w.market.keys.batch_part(5, 0), "{torn").await.unwrap();
    let _: () = conn.del(w.market.keys.batch_part(6, 0)).await.unwrap();
    let _: () = conn.del(&[w.market.keys.batch_part(7, 0), w.market.keys.votes(7)]).await.unwrap();
    w.finalize().await;
    for epoch in [5, 6] {
        assert_eq!(w.finalized(epoch).await["projects"][0]["snapshotCid"], cid_a.as_str(), "epoch {epoch}");
    }
    let state: BTreeMap<String, String> = conn.hgetall(w.market.keys.epoch_state(7)).await.unwrap();
    assert_eq!(state.get("level1_status").map(String::as_str), Some("failed"), "{state:?}");
    let none: Option<String> = conn.get(w.market.keys.finalized(7)).await.unwrap();
    assert_eq!(none, None);
    let state: BTreeMap<String, String> = conn.hgetall(w.market.keys.epoch_state(5)).await.unwrap();
    assert_eq!(state["phase"], "level1_complete");
    assert_eq!(state["level2_status"], "not_run", "no level 2 here, and the state says so");
}

#[tokio::test]
async fn without_an_anchor_head_the_gateway_stores_nothing_and_the_node_retries() {
    let w = world(250).await;
    let (cid_a, _, _) = cids();
    // The event monitor is down (no `anchor:head`) while a node submits for
    // a release it saw: nothing could judge when it arrived.
    let s = signed(1, 1, 7, &project(POOL_A), &cid_a, 120);
    assert_eq!(w.gateway.accept(&s, "test").await.unwrap(), Admitted::NoHead);
    let queue = lite_node_validator::ReliableQueue::submissions(w.conn.clone(), &w.market.keys);
    assert_eq!(queue.depth().await.unwrap(), (0, 0), "nothing queued");
    // The monitor comes back and sees the release: the retry counts.
    w.monitor.head(100).await.unwrap();
    w.monitor.released(7, 100, 1, 1).await.unwrap();
    w.submit(s).await;
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
    // Seven projects, each voted for by two slots with two CIDs; a third
    // slot decides the even ones. A tie finalizes nothing (no voter can
    // grind a winner); one more vote decides.
    let projects: Vec<String> = (0..7).map(|i| format!("tie{i}:{NAMESPACE}")).collect();
    let (cid_a, cid_b, _) = cids();
    let mut batches = Vec::new();
    for (part_size, forward) in [(250, true), (2, false), (3, true)] {
        let w = world(part_size).await;
        w.monitor.released(9, 50, 1, 1).await.unwrap();
        w.monitor.head(51).await.unwrap();
        let mut order: Vec<(u64, &str)> = vec![(6, cid_b.as_str()), (7, cid_a.as_str())];
        if !forward {
            order.reverse();
        }
        for (i, p) in projects.iter().enumerate() {
            for (slot, cid) in &order {
                w.submit(signed(*slot, *slot, 9, p, cid, 70)).await;
            }
            if i % 2 == 0 {
                w.submit(signed(5, 5, 9, p, &cid_b, 70)).await;
            }
        }
        assert_eq!(w.drain().await.iter().filter(|v| **v == Verdict::Accepted).count(), 18);
        w.monitor.head(61).await.unwrap();
        w.finalize().await;
        let parts: Option<u64> = w.conn.clone().get(w.market.keys.parts_total(9)).await.unwrap();
        assert_eq!(parts, Some(7u64.div_ceil(part_size as u64)));
        let mut batch = w.finalized(9).await;
        let finalized: Vec<(&str, &str)> = batch["projects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["projectId"].as_str().unwrap(), p["snapshotCid"].as_str().unwrap()))
            .collect();
        let decided: Vec<(&str, &str)> = projects.iter().step_by(2).map(|p| (p.as_str(), cid_b.as_str())).collect();
        assert_eq!(finalized, decided, "the decided projects, and no tied one");
        batch.as_object_mut().unwrap().remove("finalized_at");
        batches.push(batch);
    }
    assert_eq!(batches[0], batches[1]);
    assert_eq!(batches[0], batches[2]);
}

#[tokio::test]
async fn forged_submissions_cost_one_signer_read_per_slot_and_registry_change_and_the_honest_one_counts() {
    // Every signer read takes 10 ms, as a rate-limited provider would.
    let w = world_of(250, 10, Duration::from_millis(10)).await;
    let (cid_a, _, _) = cids();
    w.monitor.released(5, 100, 1, 1).await.unwrap();
    w.monitor.head(101).await.unwrap();
    // 2,000 submissions naming slot 1, signed with other slots' keys, then
    // the slot's own; and a made-up slot far past the registry's total.
    for i in 0..2_000u64 {
        let cid = lite_node_protocol::cid::cid(format!("forged {i}").as_bytes());
        w.submit(signed(1, 2 + i % 6, 5, &project(POOL_A), &cid, 120)).await;
    }
    w.submit(signed(1, 1, 5, &project(POOL_A), &cid_a, 120)).await;
    w.submit(signed(4_000_000, 4, 5, &project(POOL_A), &cid_a, 120)).await;
    // Four workers at once, as a dequeuer runs them.
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let d = w.dequeuer.clone();
        workers.spawn(async move { while !d.round(64, Duration::from_millis(50)).await.unwrap().is_empty() {} });
    }
    while let Some(done) = workers.join_next().await {
        done.unwrap();
    }
    let reads = w.chain.signer_reads.lock().unwrap().clone();
    assert_eq!(reads, BTreeMap::from([(1, 1)]), "one read of slot 1; none for a slot past the total");
    let counters = w.counters().await;
    assert_eq!(counters.get("accepted"), Some(&1), "{counters:?}");
    assert_eq!(counters.get("rejected:wrong_signer"), Some(&2_000), "{counters:?}");
    assert_eq!(counters.get("rejected:unregistered_slot"), Some(&1), "{counters:?}");
    // The slot changed in the release block (the monitor recorded it): it
    // is read afresh, once, as of that block.
    w.monitor.slots_recorded(&[(1, 100)], 1, 101).await.unwrap();
    w.submit(signed(1, 3, 5, &project(POOL_A), &cid_a, 121)).await;
    w.submit(signed(1, 4, 5, &project(POOL_A), &cid_a, 122)).await;
    w.drain().await;
    assert_eq!(w.chain.signer_reads.lock().unwrap().get(&1), Some(&2));
    // Another epoch released in the same era: no read.
    w.monitor.released(6, 101, 2, 2).await.unwrap();
    w.submit(signed(1, 3, 6, &project(POOL_A), &cid_a, 121)).await;
    w.drain().await;
    assert_eq!(w.chain.signer_reads.lock().unwrap().get(&1), Some(&2));
}

/// Slot 1 equivocates (A and B), slots 2 and 5 vote A, slot 3 votes B:
/// every arrival order of the five, on a fresh validator each time, gives
/// one finalized batch — A by 2 to 1, slot 1's votes void.
#[tokio::test]
async fn every_arrival_order_of_an_equivocation_finalizes_the_same_batch() {
    let (cid_a, cid_b, _) = cids();
    let p = project(POOL_A);
    let case = [(1, &cid_a), (1, &cid_b), (2, &cid_a), (3, &cid_b), (5, &cid_a)];
    let mut orders = vec![vec![]];
    for _ in 0..case.len() {
        orders = orders
            .into_iter()
            .flat_map(|o: Vec<usize>| {
                let rest: Vec<usize> = (0..case.len()).filter(|i| !o.contains(i)).collect();
                rest.into_iter().map(move |i| [o.clone(), vec![i]].concat())
            })
            .collect();
    }
    assert_eq!(orders.len(), 120);
    let server = RedisServer::start();
    let mut batches = std::collections::BTreeSet::new();
    for order in orders {
        let w = world_on(&server, 250).await;
        w.monitor.released(5, 100, 1, 1).await.unwrap();
        w.monitor.head(101).await.unwrap();
        for i in order {
            let (slot, cid) = case[i];
            w.submit(signed(slot, slot, 5, &p, cid, 120)).await;
        }
        w.drain().await;
        w.monitor.head(111).await.unwrap();
        w.finalize().await;
        let batch = w.finalized(5).await;
        assert_eq!(batch["projects"][0]["snapshotCid"], cid_a.as_str(), "{batch}");
        assert_eq!(batch["projects"][0]["votes"], 2, "{batch}");
        batches.insert((batch["root"].to_string(), batch["batch_cid"].to_string()));
    }
    assert_eq!(batches.len(), 1, "{batches:?}");
}

#[tokio::test]
async fn finalizers_with_different_part_sizes_still_cover_every_project() {
    let projects: Vec<String> = (0..7).map(|i| format!("tie{i}:{NAMESPACE}")).collect();
    let (cid_a, _, _) = cids();
    let w = world(3).await;
    // Mid-change: this finalizer still cuts parts of 3; the other, already
    // on the new setting, works them with 2.
    let other = Finalizer::new(w.market.clone(), w.conn.clone(), 2);
    w.monitor.released(9, 50, 1, 1).await.unwrap();
    w.monitor.head(51).await.unwrap();
    for p in &projects {
        w.submit(signed(6, 6, 9, p, &cid_a, 70)).await;
    }
    w.drain().await;
    w.monitor.head(61).await.unwrap();
    assert!(w.finalizer.step(Duration::from_millis(100)).await.unwrap(), "the split");
    while other.step(Duration::from_millis(100)).await.unwrap() {}
    while w.aggregator.step(Duration::from_millis(100)).await.unwrap() {}
    let batch = w.finalized(9).await;
    let listed: Vec<&str> =
        batch["projects"].as_array().unwrap().iter().map(|p| p["projectId"].as_str().unwrap()).collect();
    assert_eq!(listed, projects.iter().map(String::as_str).collect::<Vec<_>>(), "{batch}");
}

#[tokio::test]
async fn an_epoch_waits_for_what_arrived_in_time_before_it_is_counted() {
    let w = world(250).await;
    let (cid_a, _, _) = cids();
    w.monitor.released(5, 100, 1, 1).await.unwrap();
    w.monitor.head(105).await.unwrap();
    w.submit(signed(1, 1, 5, &project(POOL_A), &cid_a, 120)).await;
    // The window closes with the vote still queued: the finalizer waits.
    assert_eq!(w.monitor.head(111).await.unwrap(), [5]);
    assert!(!w.finalizer.step(Duration::from_millis(100)).await.unwrap(), "not split while a vote is pending");
    let parts: Option<u64> = w.conn.clone().get(w.market.keys.parts_total(5)).await.unwrap();
    assert_eq!(parts, None);
    assert_eq!(w.drain().await, [Verdict::Accepted]);
    w.finalize().await;
    assert_eq!(w.finalized(5).await["projects"][0]["votes"], 1);
}

/// Redis memory per accepted submission once its epoch is finalized —
/// everything the gateway, the dequeuer, the finalizer and the aggregator
/// keep for it — printed, and held under a bound.
#[tokio::test]
async fn redis_memory_per_accepted_submission_is_printed_and_bounded() {
    let w = world(250).await;
    let mut conn = w.conn.clone();
    async fn dataset(conn: &mut ConnectionManager) -> (u64, u64) {
        let info: String = redis::cmd("INFO").arg("memory").query_async(conn).await.unwrap();
        let bytes = info.lines().find_map(|l| l.strip_prefix("used_memory_dataset:")).unwrap().trim().parse().unwrap();
        (bytes, redis::cmd("DBSIZE").query_async(conn).await.unwrap())
    }
    let slots = [1u64, 2, 3, 4, 5, 6, 7];
    let epochs: Vec<u64> = (10..31).collect();
    for &e in &epochs {
        w.monitor.released(e, 100, 1, 1).await.unwrap();
    }
    w.monitor.head(101).await.unwrap();
    // Warm: the first of everything (counters, timelines, scripts) is not
    // per submission.
    let warm = lite_node_protocol::cid::cid(b"warm");
    w.submit(signed(1, 1, 9, &format!("tie0:{NAMESPACE}"), &warm, 120)).await;
    dataset(&mut conn).await;
    let (before, keys_before) = dataset(&mut conn).await;
    let mut n = 0u64;
    for &e in &epochs {
        for slot in slots {
            for i in 0..7 {
                let cid = lite_node_protocol::cid::cid(format!("{e} {slot} {i}").as_bytes());
                w.submit(signed(slot, slot, e, &format!("tie{i}:{NAMESPACE}"), &cid, 120)).await;
                n += 1;
            }
        }
    }
    let accepted = w.drain().await.iter().filter(|v| **v == Verdict::Accepted).count() as u64;
    assert_eq!(accepted, n);
    w.monitor.head(112).await.unwrap();
    w.finalize().await;
    let (after, keys_after) = dataset(&mut conn).await;
    let per = after.saturating_sub(before) as f64 / n as f64;
    let keys_per = keys_after.saturating_sub(keys_before) as f64 / n as f64;
    println!(
        "Redis after {n} accepted submissions, their {} epochs finalized: {per:.0} bytes and {keys_per:.2} keys \
         per submission (used_memory_dataset)",
        epochs.len()
    );
    // Where it goes, key by key (MEMORY USAGE, sampled in full), and how
    // long each part of it is kept.
    let mut breakdown: BTreeMap<String, (u64, u64, i64)> = BTreeMap::new();
    let mut kept: BTreeMap<&str, u64> = BTreeMap::new();
    let names: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut conn).await.unwrap();
    for name in names {
        let used: u64 =
            redis::cmd("MEMORY").arg("USAGE").arg(&name).arg("SAMPLES").arg(0).query_async(&mut conn).await.unwrap();
        let ttl: i64 = conn.ttl(&name).await.unwrap();
        // Timelines have no TTL: their writers trim them to a day.
        let class = match ttl {
            _ if name.ends_with(":timeline") => "a day",
            0..=3_600 => "an hour",
            3_601..=86_400 => "a day",
            _ => "a week or more",
        };
        *kept.entry(class).or_default() += used;
        let pattern = keys::spec_of(&name).map_or(name.clone(), |s| s.pattern.to_owned());
        let e = breakdown.entry(pattern).or_default();
        (e.0, e.1, e.2) = (e.0 + used, e.1 + 1, ttl);
    }
    let mut rows: Vec<_> = breakdown.into_iter().collect();
    rows.sort_by_key(|(_, (b, _, _))| std::cmp::Reverse(*b));
    for (pattern, (bytes, count, ttl)) in rows.iter().take(10) {
        println!("  {:>6.0} B/submission  {count:>5} keys  ttl {ttl:>7} s  {pattern}", *bytes as f64 / n as f64);
    }
    for (class, bytes) in &kept {
        println!("  kept {class}: {:.0} B per submission", *bytes as f64 / n as f64);
    }
    let per_class = |c: &str| kept.get(c).copied().unwrap_or(0) as f64 / n as f64;
    assert!(per_class("a week or more") < 128.0, "kept a week: {:.0} B", per_class("a week or more"));
    assert!(per_class("a day") < 1_024.0, "kept a day: {:.0} B", per_class("a day"));
    assert!(
        !rows.iter().any(|(p, _)| p == "{protocol}:{market}:metrics:submissions:metadata:{entityId}"),
        "the seed's per-submission metadata is written only when asked for"
    );
    assert!(
        !rows.iter().any(|(p, _)| p == "{protocol}:{market}:processed:{sequencerId}:{submissionId}"),
        "the seed's per-submission processed record is written only when asked for"
    );
    assert!(per < 2_048.0, "{per:.0} bytes per accepted submission");
}

/// Redis restarts without persistence: an epoch the monitor saw released
/// is opened again, recorded as a gap, and `/health` says the validator is
/// degraded — not silently forgotten.
#[tokio::test]
async fn an_epoch_whose_state_redis_lost_is_opened_again_and_reported() {
    let w = world(250).await;
    let (cid_a, _, _) = cids();
    w.monitor.released(5, 100, 1, 1).await.unwrap();
    w.monitor.head(101).await.unwrap();
    assert!(w.monitor.check_kept().await.unwrap().is_empty(), "nothing lost yet");
    let _: () = redis::cmd("FLUSHALL").query_async(&mut w.conn.clone()).await.unwrap();
    w.monitor.head(102).await.unwrap();
    assert_eq!(w.monitor.check_kept().await.unwrap(), [5]);
    let gaps: Vec<String> = w.conn.clone().zrange(w.market.keys.epochs_gaps(), 0, -1).await.unwrap();
    assert_eq!(gaps, ["5:state_lost"]);
    // The epoch takes votes again and is finalized when its window closes.
    w.submit(signed(1, 1, 5, &project(POOL_A), &cid_a, 120)).await;
    assert_eq!(w.drain().await, [Verdict::Accepted]);
    assert_eq!(w.monitor.head(111).await.unwrap(), [5]);
    w.finalize().await;
    assert_eq!(w.finalized(5).await["projects"][0]["votes"], 1);
    // The monitor API says so.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let client = redis::Client::open(w.url.as_str()).unwrap();
    tokio::spawn(lite_node_validator::api::serve(w.market.clone(), client, listener, std::future::pending(), None));
    let health: serde_json::Value =
        serde_json::from_str(&reqwest::get(format!("{base}/health")).await.unwrap().text().await.unwrap()).unwrap();
    assert_eq!(health["status"], "degraded", "{health}");
    assert!(health["degraded"][0].as_str().unwrap().contains("epoch(s) 5"), "{health}");
}

/// A registered, selected slot signs 10,000 made-up projects: the gateway
/// that knows the market's projects refuses every one before storing it;
/// one that does not queues them, the dequeuer rejects every one as
/// `unknown_project`, and the finalized batch lists none of them.
#[tokio::test]
async fn ten_thousand_made_up_projects_are_unknown_and_never_finalized() {
    let w = world(250).await;
    let (cid_a, _, _) = cids();
    w.monitor.released(5, 100, 1, 1).await.unwrap();
    w.monitor.head(101).await.unwrap();
    let spam: Vec<proto::SnapshotSubmission> =
        (0..10_000).map(|i| signed(1, 1, 5, &format!("spam:{i}:{NAMESPACE}"), &cid_a, 120)).collect();
    let guarded = lite_node_validator::gateway::Gateway::with_admission(
        w.conn.clone(),
        w.market.clone(),
        Some(projects()),
        lite_node_validator::gateway::Admission::default(),
    );
    for s in &spam {
        match guarded.accept(s, "test").await.unwrap() {
            Admitted::Refused(r) => assert_eq!(r.reason, Reason::UnknownProject, "{r:?}"),
            other => panic!("{other:?}"),
        }
    }
    let queue = lite_node_validator::ReliableQueue::submissions(w.conn.clone(), &w.market.keys);
    assert_eq!(queue.depth().await.unwrap(), (0, 0), "nothing stored");
    // Through a gateway without the market's projects: the dequeuer's rule.
    for s in spam {
        w.submit(s).await;
    }
    w.submit(signed(1, 1, 5, &project(POOL_A), &cid_a, 120)).await;
    let verdicts = w.drain().await;
    assert_eq!(verdicts.iter().filter(|v| matches!(v, Verdict::Rejected(Reason::UnknownProject, _))).count(), 10_000);
    assert_eq!(verdicts.iter().filter(|v| **v == Verdict::Accepted).count(), 1);
    w.monitor.head(111).await.unwrap();
    w.finalize().await;
    let batch = w.finalized(5).await;
    assert_eq!(batch["projects"].as_array().unwrap().len(), 1, "only the real project: {batch}");
    assert_eq!(batch["projects"][0]["projectId"], project(POOL_A));
}

/// The same submission queued ten times as fast as the gateway takes it
/// (several within one millisecond): each copy is its own queue item,
/// pending once and judged once (the first accepted, the rest duplicates),
/// so the epoch's pending count returns to nothing.
#[tokio::test]
async fn the_same_submission_queued_ten_times_leaves_nothing_pending() {
    let w = world(250).await;
    let (cid_a, _, _) = cids();
    w.monitor.released(5, 100, 1000, 1000).await.unwrap();
    w.monitor.head(101).await.unwrap();
    let s = signed(1, 1, 5, &project(POOL_A), &cid_a, 120);
    for _ in 0..10 {
        w.submit(s.clone()).await;
    }
    let verdicts = w.drain().await;
    assert_eq!(verdicts.len(), 10, "{verdicts:?}");
    let mut conn = w.conn.clone();
    let pending: Option<u64> = redis::AsyncCommands::hget(&mut conn, w.market.keys.pending(), 5).await.unwrap();
    assert_eq!(pending.unwrap_or(0), 0, "nothing of epoch 5 left pending");
    let counters = w.counters().await;
    assert_eq!(counters.get("accepted"), Some(&1));
    assert_eq!(counters.get("rejected:duplicate"), Some(&9));
    // Unless asked (`keeping_seed_records`), no key per submission.
    let records: Vec<String> = redis::AsyncCommands::keys(&mut conn, "*:processed:*").await.unwrap();
    assert!(records.is_empty(), "{records:?}");
}

/// With seed 001's records kept, each accepted submission's `processed`
/// record is its own even when the batch also holds a submission judged
/// before (its bytes queued again: `again`): the records of the accepts
/// after it are not written one key early (found in review).
#[tokio::test]
async fn each_accepted_submission_keeps_its_own_processed_record_beside_one_judged_before() {
    let w = world(250).await;
    let w = World { dequeuer: w.dequeuer.keeping_seed_records(true), ..w };
    let (cid_a, _, _) = cids();
    w.monitor.released(5, 100, 1000, 1000).await.unwrap();
    w.monitor.head(101).await.unwrap();
    let mut conn = w.conn.clone();
    let queue = w.market.keys.submission_queue();
    w.submit(signed(1, 1, 5, &project(POOL_A), &cid_a, 120)).await;
    let first: Vec<String> = conn.lrange(&queue, 0, -1).await.unwrap();
    assert_eq!(w.drain().await, [Verdict::Accepted]);
    // The first submission's bytes again, then a new one, in one batch.
    let _: () = conn.lpush(&queue, &first[0]).await.unwrap();
    w.submit(signed(2, 2, 5, &project(POOL_A), &cid_a, 120)).await;
    let second: Vec<String> = conn.lrange(&queue, 0, 0).await.unwrap();
    assert_eq!(w.drain().await, [Verdict::Again, Verdict::Accepted]);
    for payload in [&first[0], &second[0]] {
        let id = lite_node_validator::queue::item_id(payload);
        let key = w.market.keys.processed(&w.market.validator_id, &id);
        let recorded: Option<String> = conn.hget(&key, "submission_id").await.unwrap();
        assert_eq!(recorded.as_deref(), Some(id.as_str()), "{key}");
    }
}
