//! The gateway over real gRPC into a real redis-server: a submission is
//! answered Success once it is queued with its timeline entry and metadata;
//! what fails the checks that need nothing but the submission is refused
//! before anything is stored; with Redis down it is UNAVAILABLE (the node
//! retries) and nothing is lost.

use std::{sync::Arc, time::Duration};

use lite_node_protocol::{
    eip712::{Request, Signer},
    proto::{self, submission_client::SubmissionClient},
    submission::{Projects, Scope},
};
use lite_node_testkit::RedisServer;
use lite_node_validator::{
    Market, ReliableQueue,
    chain::SlotRegistry,
    gateway::{Admission, Gateway},
    signers::SignerBook,
};
use redis::AsyncCommands;

const CHAIN_ID: u64 = 31337;
const NAMESPACE: &str = "devnet-UNISWAPV3-ETH";

fn market() -> Arc<Market> {
    let scope = Scope {
        data_market: "0x0000000000000000000000000000000000000d01".parse().unwrap(),
        protocol_state: "0x0000000000000000000000000000000000000501".parse().unwrap(),
    };
    Arc::new(Market::new(scope, CHAIN_ID, "validator-1"))
}

fn submission(market: &Market, epoch_id: u64, slot_id: u64, project_id: &str) -> proto::SnapshotSubmission {
    let signer = Signer::new(&[9u8; 32], CHAIN_ID, market.scope.protocol_state).unwrap();
    let request = Request {
        slot_id,
        deadline: 100,
        snapshot_cid: "bafkreicecnx2gvntm6fbcrvnc336qze6st5u7qq7457igegamd3bzkx7ri".into(),
        epoch_id,
        project_id: project_id.into(),
    };
    proto::SnapshotSubmission {
        signature: signer.sign(&request).unwrap(),
        request: Some((&request).into()),
        header: String::new(),
        data_market: market.scope.data_market.to_string(),
        node_version: None,
        protocol_state: market.scope.protocol_state.to_string(),
        snapshot: None,
    }
}

/// `s` signed again by `key` (after its request was changed, or by a stranger).
fn signed_by(mut s: proto::SnapshotSubmission, market: &Market, key: [u8; 32]) -> proto::SnapshotSubmission {
    let request = Request::from(s.request.as_ref().unwrap());
    s.signature = Signer::new(&key, CHAIN_ID, market.scope.protocol_state).unwrap().sign(&request).unwrap();
    s
}

/// `s` as a collector publishes it: its gossip form, encoded (as it is, if
/// its signature is none).
fn gossip_bytes(s: &proto::SnapshotSubmission) -> Vec<u8> {
    let form = lite_node_protocol::submission::gossip_form(s).unwrap_or_else(|_| s.clone());
    prost::Message::encode_to_vec(&form)
}

/// The slot registry of these tests: slots 1..=10,000, each registered to
/// the key [`submission`] signs with.
struct OneSigner(alloy::primitives::Address);

impl OneSigner {
    fn of(market: &Market) -> Self {
        Self(Signer::new(&[9u8; 32], CHAIN_ID, market.scope.protocol_state).unwrap().address())
    }
}

impl SlotRegistry for OneSigner {
    async fn signer(&self, _: u64, _: u64) -> Result<alloy::primitives::Address, String> {
        Ok(self.0)
    }

    async fn total_slots(&self, _: u64) -> Result<u64, String> {
        Ok(10_000)
    }
}

fn pool_project() -> String {
    format!("baseSnapshot:0x00000000000000000000000000000000000000aa:{NAMESPACE}")
}

/// A gateway on a fresh port, with `admission`; its gRPC endpoint.
async fn serve(conn: &redis::aio::ConnectionManager, market: &Arc<Market>, admission: Admission) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let projects = Projects::new(NAMESPACE, ["baseSnapshot"]);
    let gateway = Gateway::with_admission(conn.clone(), market.clone(), Some(projects), admission);
    tokio::spawn(lite_node_validator::gateway::serve(gateway, listener, std::future::pending()));
    endpoint
}

async fn set_head(conn: &redis::aio::ConnectionManager, market: &Market, head: u64) {
    let _: () = conn.clone().set(market.keys.anchor_head(), head).await.unwrap();
}

/// `DBSIZE` and the memory the data takes (`used_memory` less Redis's own
/// overhead: client buffers, which move with every command, are not data).
/// The keys stored and the bytes they take (`MEMORY USAGE` of each, every
/// element counted): what was stored, whatever the server's client buffers
/// hold at the moment (`used_memory_dataset` moved by tens of KiB with
/// them on a busy machine).
async fn footprint(conn: &redis::aio::ConnectionManager) -> (u64, u64) {
    let mut conn = conn.clone();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut conn).await.unwrap();
    let mut bytes = 0;
    for key in &keys {
        let used: Option<u64> =
            redis::cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0).query_async(&mut conn).await.unwrap();
        bytes += used.unwrap_or(0);
    }
    (keys.len() as u64, bytes)
}

#[tokio::test]
async fn a_submission_is_answered_once_it_is_queued_with_its_timeline_metadata_and_head() {
    let server = RedisServer::start();
    let market = market();
    let keys = market.keys.clone();
    let conn = redis::aio::ConnectionManager::new(redis::Client::open(server.url()).unwrap()).await.unwrap();
    set_head(&conn, &market, 42).await;
    let endpoint = serve(&conn, &market, Admission { metadata: true, ..Admission::default() }).await;
    let mut client = SubmissionClient::connect(endpoint).await.unwrap();
    let answer = client.submit_snapshot(submission(&market, 7, 3, &pool_project())).await.unwrap().into_inner();
    assert_eq!(answer.message, proto::SUCCESS);

    let queue = ReliableQueue::submissions(conn.clone(), &keys);
    let taken = queue.take(Duration::from_secs(1)).await.unwrap().expect("queued");
    let queued: serde_json::Value = serde_json::from_str(&taken.payload).unwrap();
    assert_eq!(queued["request"]["epochId"], 7);
    assert_eq!(queued["request"]["slotId"], 3);
    assert_eq!(queued["receivedHead"], 42, "the anchor head at receipt");
    let mut conn = conn;
    let timeline: Vec<String> = conn.zrange(keys.submissions_timeline(), 0, -1).await.unwrap();
    assert_eq!(timeline.len(), 1);
    assert!(timeline[0].starts_with(&format!("received:7:3:{}:", pool_project())), "{}", timeline[0]);
    let metadata_key = keys.submission_metadata(&timeline[0]);
    let metadata: String = conn.get(&metadata_key).await.unwrap();
    assert!(metadata.contains("\"snapshot_cid\":\"bafkrei"), "{metadata}");
    assert!(metadata.contains("\"validator_id\":\"validator-1\""), "{metadata}");
    let ttl: i64 = conn.ttl(&metadata_key).await.unwrap();
    assert!(ttl > 86_000 && ttl <= 86_400, "24 h: {ttl}");

    // Redis goes away: the node is told to retry, not that it succeeded.
    drop(server);
    let refused = client.submit_snapshot(submission(&market, 8, 3, &pool_project())).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
}

#[tokio::test]
async fn what_fails_before_storage_is_refused_and_nothing_is_stored() {
    let server = RedisServer::start();
    let market = market();
    let conn = redis::aio::ConnectionManager::new(redis::Client::open(server.url()).unwrap()).await.unwrap();
    set_head(&conn, &market, 42).await;
    let endpoint = serve(&conn, &market, Admission::default()).await;
    let mut client = SubmissionClient::connect(endpoint).await.unwrap();
    // One honest submission first: the keys a running validator has.
    let ok = client.submit_snapshot(submission(&market, 7, 3, &pool_project())).await.unwrap();
    assert_eq!(ok.into_inner().message, proto::SUCCESS);
    // The first INFO allocates what later ones reuse (~24 KB): measure from
    // the second.
    footprint(&conn).await;
    let before = footprint(&conn).await;

    // A 1 MB projectId: refused before it is decoded.
    let mut huge = submission(&market, 7, 3, &pool_project());
    huge.request.as_mut().unwrap().project_id = "p".repeat(1 << 20);
    let refused = client.submit_snapshot(huge).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");

    // Decodable but wrong: `Failure`, with the reason.
    let reason = |r: &tonic::Response<proto::SubmissionResponse>| {
        assert_eq!(r.get_ref().message, proto::FAILURE);
        r.metadata().get(proto::REASON_METADATA).unwrap().to_str().unwrap().to_owned()
    };
    let mut unsigned = submission(&market, 99, 3, &pool_project());
    unsigned.signature = "00".repeat(65);
    let answer = client.submit_snapshot(unsigned).await.unwrap();
    assert!(reason(&answer).starts_with("bad_signature:"), "{}", reason(&answer));
    let mut long = submission(&market, 7, 3, &pool_project());
    long.header = "h".repeat(300);
    let answer = client.submit_snapshot(long).await.unwrap();
    assert!(reason(&answer).contains("header is 300 bytes"), "{}", reason(&answer));
    let answer = client.submit_snapshot(submission(&market, 7, 3, &format!("spam:1:{NAMESPACE}"))).await.unwrap();
    assert!(reason(&answer).starts_with("unknown_project:"), "{}", reason(&answer));

    let after = footprint(&conn).await;
    assert_eq!(after.0, before.0, "no key was added");
    let moved = after.1.abs_diff(before.1);
    println!("stored bytes before {} B, after {} B", before.1, after.1);
    // The counters hash takes its new fields (64 B); one stored submission
    // is several hundred bytes.
    assert!(moved < 256, "the data in Redis moved by {moved} bytes");
    let counters: std::collections::BTreeMap<String, u64> = conn.clone().hgetall(market.keys.counters()).await.unwrap();
    assert_eq!(counters.get("received"), Some(&1), "{counters:?}");
    assert_eq!(counters.get("rejected:bad_signature"), Some(&1), "{counters:?}");
    assert_eq!(counters.get("rejected:unknown_project"), Some(&1), "{counters:?}");
}

#[tokio::test]
async fn a_peer_past_its_rate_or_a_full_queue_is_told_to_slow_down() {
    let server = RedisServer::start();
    let market = market();
    let conn = redis::aio::ConnectionManager::new(redis::Client::open(server.url()).unwrap()).await.unwrap();
    set_head(&conn, &market, 42).await;
    let one = std::num::NonZeroU32::new(1).unwrap();
    let tight = Admission {
        max_queue: 1_000,
        peer_rate: one,
        peer_burst: std::num::NonZeroU32::new(3).unwrap(),
        ..Admission::default()
    };
    let mut client = SubmissionClient::connect(serve(&conn, &market, tight).await).await.unwrap();
    let mut codes = Vec::new();
    for slot in 1..=5 {
        let answer = client.submit_snapshot(submission(&market, 7, slot, &pool_project())).await;
        codes.push(answer.map(|_| tonic::Code::Ok).unwrap_or_else(|s| s.code()));
    }
    assert_eq!(&codes[..3], [tonic::Code::Ok; 3], "the burst is taken");
    assert_eq!(codes[3], tonic::Code::ResourceExhausted, "{codes:?}");

    let small = Admission { max_queue: 2, ..Admission::default() };
    let mut client = SubmissionClient::connect(serve(&conn, &market, small).await).await.unwrap();
    // Three queued already (by the first gateway): past the second's limit.
    let full = client.submit_snapshot(submission(&market, 7, 9, &pool_project())).await.unwrap_err();
    assert_eq!(full.code(), tonic::Code::ResourceExhausted, "{full:?}");
    let queued: u64 = conn.clone().llen(market.keys.submission_queue()).await.unwrap();
    assert_eq!(queued, 3);
}

/// Two validators' gateways, each on its own redis-server and fed by its
/// gossip peer through the production intake; a collector and a junk peer
/// dial the first, the second validator sits behind it. Returned once the
/// first has all three in its mesh and the second has the first.
struct Mesh {
    _dir: tempfile::TempDir,
    _servers: [RedisServer; 2],
    conn1: redis::aio::ConnectionManager,
    conn2: redis::aio::ConnectionManager,
    v1: lite_node_validator::gossip::Gossip,
    v2: lite_node_validator::gossip::Gossip,
    collector: lite_node_validator::gossip::Gossip,
    junk: lite_node_validator::gossip::Gossip,
    /// The first validator's gateway (its gRPC intake).
    gateway1: Gateway,
}

async fn mesh(market: &Arc<Market>) -> Mesh {
    mesh_with(market, Admission::default()).await
}

async fn mesh_with(market: &Arc<Market>, admission: Admission) -> Mesh {
    use lite_node_validator::gossip::{Gossip, Multiaddr, Settings, Verdict};
    let dir = tempfile::tempdir().unwrap();
    let projects = Projects::new(NAMESPACE, ["baseSnapshot"]);
    let settings = |name: &str, bootstrap: Vec<Multiaddr>| Settings {
        listen: "/ip4/127.0.0.1/tcp/0".parse().unwrap(),
        bootstrap,
        identity: dir.path().join(name).join("p2p-identity.key"),
        topic: lite_node_validator::gossip::SUBMISSIONS_TOPIC.into(),
    };
    let validator = async |name: &str, bootstrap| {
        let server = RedisServer::start();
        let conn = lite_node_validator::connect(&redis::Client::open(server.url()).unwrap()).await.unwrap();
        set_head(&conn, market, 42).await;
        let gateway = Gateway::with_admission(conn.clone(), market.clone(), Some(projects.clone()), admission)
            .with_signers(Arc::new(SignerBook::new(Arc::new(OneSigner::of(market)))));
        let (tx, mut rx) = tokio::sync::mpsc::channel::<lite_node_validator::gossip::Delivery>(4096);
        let judge = gateway.clone();
        let peer =
            Gossip::start(settings(name, bootstrap), Arc::new(move |p: &[u8]| judge.judge_gossip(p)), tx).unwrap();
        gateway.relay_through(peer.clone());
        let taker = gateway.clone();
        tokio::spawn(async move { taker.take_gossip_from(&mut rx).await });
        (server, conn, peer, gateway)
    };
    let (s1, conn1, v1, gateway1) = validator("v1", vec![]).await;
    let v1_addr = v1.listening().await;
    let (s2, conn2, v2, _) = validator("v2", v1_addr.clone()).await;
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let quiet = || -> lite_node_validator::gossip::Check { Arc::new(|_: &[u8]| Verdict::Ignore) };
    let collector = Gossip::start(settings("collector", v1_addr.clone()), quiet(), tx.clone()).unwrap();
    let junk = Gossip::start(settings("junk", v1_addr), quiet(), tx).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // …and the publishers know v1 takes the topic (a publish before that
    // reaches nobody).
    while v1.mesh_peers().await < 3
        || v2.mesh_peers().await < 1
        || collector.peers().await.subscribed < 1
        || junk.peers().await.subscribed < 1
    {
        assert!(tokio::time::Instant::now() < deadline, "no mesh in 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Mesh { _dir: dir, _servers: [s1, s2], conn1, conn2, v1, v2, collector, junk, gateway1 }
}

/// The gateway's gossip peer between a collector and a junk peer, and a
/// second validator behind it: an honest submission reaches both queues;
/// malformed bytes, a bad signature and a made-up project are rejected at
/// the first hop, never relayed, and the peer that sent them is
/// graylisted; a valid signature by a key that is not the slot's, and a
/// slot nobody holds, are ignored — neither relayed nor held against the
/// sender (whose view of the registry may be a block behind or ahead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_is_judged_before_it_is_relayed_and_junk_senders_are_graylisted() {
    use lite_node_validator::gossip::{GRAYLIST, Stats};
    let market = market();
    let m = mesh(&market).await;
    let Mesh { conn1, conn2, v1, v2, collector, junk, .. } = &m;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);

    // Junk: signed by a fresh key (for a slot held by another, and for a
    // slot nobody holds), bytes that are no submission, a bad signature, a
    // made-up project.
    let fresh_key = |slot: u64| signed_by(submission(&market, 7, slot, &pool_project()), &market, [0x77u8; 32]);
    // The fresh keys' first: their slots are read before they are judged
    // (held meanwhile), so they are judged before the peer is graylisted.
    assert!(junk.publish(gossip_bytes(&fresh_key(3))));
    assert!(junk.publish(gossip_bytes(&fresh_key(20_000))));
    while Stats::get(&v1.stats().ignored) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "v1 judged the fresh keys: {:?}", v1.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(Stats::get(&v1.stats().rejected), 0, "a registry mismatch costs the sender nothing");
    assert!(Stats::get(&v1.stats().held) >= 1, "slot 3 was read before it was judged: {:?}", v1.stats());
    let mut forged = submission(&market, 7, 3, &pool_project());
    forged.signature = format!("0x{}1b", "00".repeat(64)); // recovers to no key
    let made_up = submission(&market, 7, 3, &format!("spam:0xaa:{NAMESPACE}"));
    for payload in [b"not a submission".to_vec(), gossip_bytes(&forged), gossip_bytes(&made_up)] {
        assert!(junk.publish(payload));
    }
    // Three rejections graylist the peer (what it sends after is dropped unread).
    while Stats::get(&v1.stats().rejected) < 3 {
        assert!(tokio::time::Instant::now() < deadline, "v1 judged the junk: {:?}", v1.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let score = v1.score_of(junk.peer_id()).await.unwrap();
    assert!(score < GRAYLIST, "the junk peer is graylisted: {score}");

    // An honest submission reaches both validators' queues.
    let honest = submission(&market, 7, 3, &pool_project());
    assert!(collector.publish(gossip_bytes(&honest)));
    let queue = market.keys.submission_queue();
    for (name, conn) in [("v1", conn1), ("v2", conn2)] {
        loop {
            let queued: u64 = conn.clone().llen(&queue).await.unwrap();
            if queued == 1 {
                break;
            }
            assert!(queued == 0, "{name}: only the honest one is queued, {queued} are");
            assert!(tokio::time::Instant::now() < deadline, "{name} queued the honest submission");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(Stats::get(&v2.stats().rejected), 0, "no junk was relayed to v2");
    assert_eq!(Stats::get(&v2.stats().accepted), 1);

    // A replay of a signed submission whose deadline the head (42) has
    // passed: stale, ignored at the first hop — not relayed, not queued, and
    // not held against the collector that relayed it.
    let ignored = Stats::get(&v1.stats().ignored);
    let mut stale = submission(&market, 6, 4, &pool_project());
    stale.request.as_mut().unwrap().deadline = 41;
    let stale = signed_by(stale, &market, [9u8; 32]);
    assert!(collector.publish(gossip_bytes(&stale)));
    while Stats::get(&v1.stats().ignored) == ignored {
        assert!(tokio::time::Instant::now() < deadline, "v1 judged the stale one: {:?}", v1.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(conn1.clone().llen::<_, u64>(&queue).await.unwrap(), 1, "the stale one was not queued");
    assert_eq!(Stats::get(&v2.stats().accepted) + Stats::get(&v2.stats().ignored), 1, "nor relayed");
    let score = v1.score_of(collector.peer_id()).await.unwrap();
    assert!(score > -5.0, "and held against the collector only lightly: {score}");
}

/// Issue 42, findings 1 and 7: a registered slot flooding gossip with
/// submissions for an epoch far past the last released one, and for a slot
/// nobody holds, fills nothing and breaks no intake — each is unwanted
/// (neither relayed nor queued) and counted on `/metrics` by why, and the
/// far epochs cost the peer that sent them score until it is graylisted; a slot's
/// submissions for one epoch past its cap are cut there; an honest
/// submission sent after all that reaches both validators.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_for_an_unreleased_epoch_or_an_empty_slot_is_unwanted_and_breaks_no_intake() {
    use lite_node_validator::gossip::{GRAYLIST, Stats};
    let market = market();
    let admission = Admission { max_queue: 50, per_slot_epoch: 10, ..Admission::default() };
    let m = mesh_with(&market, admission).await;
    let Mesh { conn1, conn2, v1, v2, collector, junk, gateway1, .. } = &m;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // Epoch 7 is the last released: its window is open on both.
    for conn in [conn1, conn2] {
        let _: () = conn.clone().zadd(market.keys.epochs_closing(), 7, 50).await.unwrap();
    }
    while gateway1.latest_epoch() != 7 {
        assert!(tokio::time::Instant::now() < deadline, "v1's intake read the last released epoch");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let project = |i: u64| format!("baseSnapshot:0x{i:040x}:{NAMESPACE}");
    let queue = market.keys.submission_queue();
    let queued = async |conn: &redis::aio::ConnectionManager| -> u64 { conn.clone().llen(&queue).await.unwrap() };

    // Slot 4 sends 30 for epoch 7: the first 10 are taken, the rest cut.
    for i in 0..30 {
        assert!(collector.publish(gossip_bytes(&submission(&market, 7, 4, &project(i)))));
    }
    while Stats::get(&v1.stats().accepted) < 10 || Stats::get(&v1.stats().unwanted) < 20 {
        assert!(tokio::time::Instant::now() < deadline, "v1 judged slot 4's 30: {:?}", v1.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Counted when judged, queued just after: waited for.
    while queued(conn1).await < 10 {
        assert!(tokio::time::Instant::now() < deadline, "v1 queued slot 4's first 10");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(queued(conn1).await, 10, "v1 queued slot 4's first 10, no more");

    // A flood: validly signed, for epoch 9,999 and for slot 20,000 (nobody's).
    let mut sent = 0;
    for i in 0..2_000u64 {
        let s = if i % 2 == 0 {
            submission(&market, 9_999, 3, &project(i))
        } else {
            submission(&market, 7, 20_000, &project(i))
        };
        assert!(junk.publish(gossip_bytes(&s)));
        sent += 1;
    }
    let score = loop {
        let score = v1.score_of(junk.peer_id()).await.unwrap_or(0.0);
        if score < GRAYLIST {
            break score;
        }
        assert!(tokio::time::Instant::now() < deadline, "the flooder graylisted: {score}, {:?}", v1.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(Stats::get(&v1.stats().rejected), 0, "nothing of it is junk");
    assert_eq!(Stats::get(&v1.stats().full), 0, "no message lost for lack of room");
    assert_eq!(gateway1.held_back(), 0, "nothing held back: the intake had no break");
    assert_eq!(queued(conn1).await, 10, "none of the flood was queued");
    // Counted by why on /metrics (flushed within a second).
    let counters = market.keys.counters();
    loop {
        let c: std::collections::HashMap<String, u64> = conn1.clone().hgetall(&counters).await.unwrap();
        let n = |k: &str| c.get(k).copied().unwrap_or(0);
        if n("gossip_unwanted:over_slot_cap") == 20
            && n("gossip_unwanted:unreleased_epoch") > 0
            && n("gossip_unwanted:unregistered_slot") > 0
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the unwanted counted by why: {c:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // An honest submission after it all reaches both.
    assert!(collector.publish(gossip_bytes(&submission(&market, 7, 5, &project(0)))));
    for (name, conn) in [("v1", conn1), ("v2", conn2)] {
        while queued(conn).await < 11 {
            assert!(tokio::time::Instant::now() < deadline, "{name} queued the honest one after the flood");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(queued(conn).await, 11, "{name}");
    }
    assert_eq!(Stats::get(&v2.stats().unwanted), 0, "nothing unwanted was relayed to v2");
    println!(
        "flood: {sent} sent, {} unwanted at v1 before the flooder was graylisted ({score:.0})",
        Stats::get(&v1.stats().unwanted) - 20
    );
}

/// A junk peer floods the first validator at ten times the honest rate —
/// bytes that are no submission, bad signatures, and copies of the honest
/// submissions under another header, one of them sent *before* the honest
/// one (a copy the check rejects must not share the honest message's id, or
/// the honest one would be dropped as its duplicate): every honest
/// submission reaches both validators' queues once, the junk is rejected at
/// the first hop and never relayed, and the flooder ends graylisted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_junk_flood_at_ten_times_the_honest_rate_loses_no_honest_submission() {
    use lite_node_validator::gossip::{GRAYLIST, Stats};
    let market = market();
    let m = mesh(&market).await;
    let Mesh { conn1, conn2, v1, v2, collector, junk, .. } = &m;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);

    const HONEST: u64 = 50;
    // Ahead of each honest submission: its copy with a header over the cap.
    let ahead = |honest: &proto::SnapshotSubmission| {
        let mut copy = lite_node_protocol::submission::gossip_form(honest).unwrap();
        copy.header = "x".repeat(lite_node_protocol::submission::caps::HEADER + 1);
        prost::Message::encode_to_vec(&copy)
    };
    // The first one certainly judged (and rejected) before its honest original is sent.
    assert!(junk.publish(ahead(&submission(&market, 7, 1, &pool_project()))));
    while Stats::get(&v1.stats().rejected) < 1 {
        assert!(tokio::time::Instant::now() < deadline, "v1 judged the first copy");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut junk_sent = 1;
    for slot in 1..=HONEST {
        let honest = submission(&market, 7, slot, &pool_project());
        if slot > 1 {
            assert!(junk.publish(ahead(&honest)));
            junk_sent += 1;
        }
        assert!(collector.publish(gossip_bytes(&honest)));
        for i in 1..10u64 {
            let payload = match i % 3 {
                0 => format!("not a submission {slot} {i}").into_bytes(),
                1 => {
                    let mut forged = submission(&market, 7, 1_000 + slot * 10 + i, &pool_project());
                    forged.signature = format!("0x{}1b", "00".repeat(64)); // recovers to no key
                    gossip_bytes(&forged)
                }
                _ => {
                    let mut replay = lite_node_protocol::submission::gossip_form(&honest).unwrap();
                    replay.header = format!("replayed {i}");
                    prost::Message::encode_to_vec(&replay)
                }
            };
            assert!(junk.publish(payload));
            junk_sent += 1;
        }
    }
    let queue = market.keys.submission_queue();
    for (name, conn) in [("v1", conn1), ("v2", conn2)] {
        loop {
            let queued: u64 = conn.clone().llen(&queue).await.unwrap();
            if queued == HONEST {
                break;
            }
            assert!(queued < HONEST, "{name}: each honest submission once, {queued} queued");
            assert!(tokio::time::Instant::now() < deadline, "{name} queued {queued} of {HONEST}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(Stats::get(&v2.stats().rejected), 0, "no junk was relayed to v2");
    assert_eq!(Stats::get(&v2.stats().accepted), HONEST);
    let rejected = Stats::get(&v1.stats().rejected);
    assert!(rejected >= 3, "v1 rejected the junk it judged ({rejected} of {junk_sent} sent)");
    let score = v1.score_of(junk.peer_id()).await.unwrap();
    assert!(score < GRAYLIST, "the flooder is graylisted: {score}");
    println!("junk: {junk_sent} sent, {rejected} judged and rejected at the first hop, the rest dropped unread");
}

/// What a node sends to one validator's gRPC gateway reaches the others
/// over gossip (so every validator judges the same submissions, and an
/// equivocating node cannot split them by gateway); one signed by a key
/// that is not the slot's is queued where it came in but never published,
/// so no peer holds it against the validator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_to_one_gateway_by_grpc_reaches_the_other_validators() {
    use lite_node_validator::gossip::Stats;
    let market = market();
    let m = mesh(&market).await;
    let Mesh { conn2, v2, gateway1, .. } = &m;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let queue = market.keys.submission_queue();
    let wrong_key = signed_by(submission(&market, 7, 3, &pool_project()), &market, [0x77u8; 32]);
    assert_eq!(gateway1.accept(&wrong_key, "grpc-test").await.unwrap(), lite_node_validator::gateway::Admitted::Queued);
    let honest = submission(&market, 7, 4, &pool_project());
    assert_eq!(gateway1.accept(&honest, "grpc-test").await.unwrap(), lite_node_validator::gateway::Admitted::Queued);
    loop {
        let queued: u64 = conn2.clone().llen(&queue).await.unwrap();
        if queued == 1 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "v2 queued the gRPC submission: {queued}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(Stats::get(&v2.stats().accepted), 1, "only the honest one was published");
    assert_eq!(Stats::get(&v2.stats().rejected), 0, "nothing v1 published was junk to v2");
}

/// A slot registry that cannot be read (the anchor away).
struct Unreadable;

impl SlotRegistry for Unreadable {
    async fn signer(&self, _: u64, _: u64) -> Result<alloy::primitives::Address, String> {
        Err("the anchor does not answer".into())
    }

    async fn total_slots(&self, _: u64) -> Result<u64, String> {
        Err("the anchor does not answer".into())
    }
}

/// A slot registry whose reads never answer (an anchor RPC that hangs).
struct Hanging;

impl SlotRegistry for Hanging {
    async fn signer(&self, _: u64, _: u64) -> Result<alloy::primitives::Address, String> {
        std::future::pending().await
    }

    async fn total_slots(&self, _: u64) -> Result<u64, String> {
        std::future::pending().await
    }
}

/// When the slot's signer cannot be read, a held gossip message is queued
/// where it arrived (the dequeuer checks the signer again) but not relayed
/// unchecked: the first validator settles it as ignored, and the second,
/// behind it, never gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signer_that_cannot_be_read_is_queued_here_but_not_relayed_unchecked() {
    queued_here_not_relayed(Unreadable).await;
}

/// …and so it is when the read hangs: within a few seconds, not after the
/// RPC's timeout, while the epoch's window may close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signer_read_that_hangs_is_given_up_in_seconds_and_the_message_queued_here() {
    let started = tokio::time::Instant::now();
    queued_here_not_relayed(Hanging).await;
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
}

async fn queued_here_not_relayed<R: SlotRegistry>(registry: R) {
    use lite_node_validator::gossip::{Gossip, Settings, Stats, Verdict};
    let market = market();
    let dir = tempfile::tempdir().unwrap();
    let projects = Projects::new(NAMESPACE, ["baseSnapshot"]);
    let settings = |name: &str, bootstrap| Settings {
        listen: "/ip4/127.0.0.1/tcp/0".parse().unwrap(),
        bootstrap,
        identity: dir.path().join(name).join("p2p-identity.key"),
        topic: lite_node_validator::gossip::SUBMISSIONS_TOPIC.into(),
    };
    let server = RedisServer::start();
    let conn = lite_node_validator::connect(&redis::Client::open(server.url()).unwrap()).await.unwrap();
    set_head(&conn, &market, 42).await;
    let gateway = Gateway::with_admission(conn.clone(), market.clone(), Some(projects), Admission::default())
        .with_signers(Arc::new(SignerBook::new(Arc::new(registry))));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<lite_node_validator::gossip::Delivery>(4096);
    let judge = gateway.clone();
    let v1 = Gossip::start(settings("v1", vec![]), Arc::new(move |p: &[u8]| judge.judge_gossip(p)), tx).unwrap();
    tokio::spawn(async move { gateway.take_gossip_from(&mut rx).await });
    let v1_addr = v1.listening().await;
    let (quiet_tx, _quiet_rx) = tokio::sync::mpsc::channel(16);
    let v2 = Gossip::start(settings("v2", v1_addr.clone()), Arc::new(|_: &[u8]| Verdict::Accept), quiet_tx).unwrap();
    let (ctx, _crx) = tokio::sync::mpsc::channel(1);
    let collector = Gossip::start(settings("collector", v1_addr), Arc::new(|_: &[u8]| Verdict::Ignore), ctx).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // v1's mesh holds both, and the collector knows v1 takes the topic (a
    // publish before that reaches nobody).
    while v1.mesh_peers().await < 2 || collector.peers().await.subscribed < 1 {
        assert!(tokio::time::Instant::now() < deadline, "no mesh in 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(collector.publish(gossip_bytes(&submission(&market, 7, 3, &pool_project()))));
    let queue = market.keys.submission_queue();
    loop {
        let queued: u64 = conn.clone().llen(&queue).await.unwrap();
        if queued == 1 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "v1 queued it");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(Stats::get(&v1.stats().ignored), 1, "settled as ignored, not accepted: {:?}", v1.stats());
    assert_eq!(Stats::get(&v1.stats().accepted), 0, "{:?}", v1.stats());
    assert_eq!(Stats::get(&v2.stats().accepted), 0, "not relayed to v2");
}

/// Issue 53, finding 6: a replay of an accepted gossip submission once
/// gossipsub's 60 s duplicate cache has forgotten it (the check is asked
/// again, as it is then) is ignored — neither relayed nor queued — and is
/// not counted against its slot's cap for the epoch, so nobody can use up
/// an honest slot's cap with its own submissions.
/// Issue 54, item 1: a submission carrying its snapshot's bytes. Bytes that
/// do not hash to the signed CID, that are not canonical JSON, too large,
/// or missing where the market requires them are refused with their reason
/// over gRPC and rejected on gossip (never relayed), and nothing of them is
/// stored; the right bytes are taken on both.
#[tokio::test]
async fn a_carried_snapshot_is_checked_before_anything_is_stored_or_relayed() {
    use lite_node_protocol::submission::{SnapshotRule, caps};
    use lite_node_validator::gossip::Verdict;
    let server = RedisServer::start();
    let market = market();
    let conn = redis::aio::ConnectionManager::new(redis::Client::open(server.url()).unwrap()).await.unwrap();
    set_head(&conn, &market, 42).await;
    let admission =
        Admission { snapshot: SnapshotRule { required: true, max_bytes: caps::SNAPSHOT }, ..Admission::default() };
    let endpoint = serve(&conn, &market, admission).await;
    let mut client = SubmissionClient::connect(endpoint).await.unwrap();
    // Slot 3's submission of `cid_of`, carrying `bytes`.
    let carrying = |epoch_id: u64, cid_of: &[u8], bytes: Option<&[u8]>| {
        let mut s = submission(&market, epoch_id, 3, &pool_project());
        s.request.as_mut().unwrap().snapshot_cid = lite_node_protocol::cid::cid(cid_of);
        let mut s = signed_by(s, &market, [9u8; 32]);
        s.snapshot = bytes.map(<[u8]>::to_vec);
        s
    };
    let reason = |r: &tonic::Response<proto::SubmissionResponse>| {
        assert_eq!(r.get_ref().message, proto::FAILURE);
        r.metadata().get(proto::REASON_METADATA).unwrap().to_str().unwrap().to_owned()
    };
    let ok = client.submit_snapshot(carrying(7, b"{}", Some(b"{}"))).await.unwrap();
    assert_eq!(ok.into_inner().message, proto::SUCCESS, "the right bytes are taken");
    // Kept by their CID until what keeps finalized data takes them: one
    // key however many votes carry them.
    let key = market.keys.snapshot(&lite_node_protocol::cid::cid(b"{}"));
    let kept: Option<Vec<u8>> = conn.clone().get(&key).await.unwrap();
    assert_eq!(kept.as_deref(), Some(&b"{}"[..]));
    let ttl: i64 = conn.clone().ttl(&key).await.unwrap();
    assert!(ttl > 0 && ttl <= 86_400, "{ttl}");
    let again = client.submit_snapshot(carrying(6, b"{}", Some(b"{}"))).await.unwrap();
    assert_eq!(again.into_inner().message, proto::SUCCESS);
    let keys: Vec<String> = conn.clone().keys(market.keys.snapshot("*")).await.unwrap();
    assert_eq!(keys, [key], "one key for the same bytes");
    footprint(&conn).await;
    let before = footprint(&conn).await;
    let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(caps::SNAPSHOT));
    // Each, with its reason and what its detail says.
    let bad: [(proto::SnapshotSubmission, &str, &str); 4] = [
        (carrying(8, b"{}", Some(b"[]")), "bytes_do_not_match_cid:", "the snapshot's CID is"),
        (carrying(8, b"{ }", Some(b"{ }")), "not_canonical_json:", "not canonical JSON"),
        (carrying(8, big.as_bytes(), Some(big.as_bytes())), "too_large:", "more than the"),
        (carrying(8, b"{}", None), "missing_bytes:", "requires each submission to carry its snapshot"),
    ];
    for (s, expected, _) in &bad {
        let answer = client.submit_snapshot(s.clone()).await.unwrap();
        assert!(reason(&answer).starts_with(expected), "{expected} {}", reason(&answer));
    }
    let after = footprint(&conn).await;
    assert_eq!(after.0, before.0, "no key was added");
    assert!(after.1.abs_diff(before.1) < 256, "the data in Redis moved by {} bytes", after.1.abs_diff(before.1));
    // The same on gossip: rejected before it is relayed (a relayer's own
    // check would have refused it), the right one accepted.
    let projects = Projects::new(NAMESPACE, ["baseSnapshot"]);
    let gateway = Gateway::with_admission(conn.clone(), market.clone(), Some(projects), admission);
    for (s, expected, detail) in &bad {
        match gateway.judge_gossip(&gossip_bytes(s)) {
            Verdict::Reject(why) => assert!(why.contains(detail), "{expected} {why}"),
            other => panic!("{expected}: {other:?}"),
        }
    }
    assert_eq!(gateway.judge_gossip(&gossip_bytes(&carrying(9, b"{}", Some(b"{}")))), Verdict::Accept);
}

#[tokio::test]
async fn a_replay_after_gossipsub_forgot_it_is_ignored_and_costs_its_slot_nothing() {
    use lite_node_validator::gossip::Verdict;
    let market = market();
    let server = RedisServer::start();
    let conn = lite_node_validator::connect(&redis::Client::open(server.url()).unwrap()).await.unwrap();
    let projects = Projects::new(NAMESPACE, ["baseSnapshot"]);
    let admission = Admission { per_slot_epoch: 2, ..Admission::default() };
    let gateway = Gateway::with_admission(conn, market.clone(), Some(projects), admission);
    let of = |i: u64| gossip_bytes(&submission(&market, 7, 3, &format!("baseSnapshot:0x{i:040x}:{NAMESPACE}")));
    assert_eq!(gateway.judge_gossip(&of(1)), Verdict::Accept);
    for _ in 0..5 {
        assert_eq!(gateway.judge_gossip(&of(1)), Verdict::Ignore, "a replay is ignored");
    }
    // The slot's cap (2) was used once: its second submission is taken.
    assert_eq!(gateway.judge_gossip(&of(2)), Verdict::Accept);
    assert!(matches!(gateway.judge_gossip(&of(3)), Verdict::Unwanted(_)), "the third is past the cap");
}

/// Issue 53, findings 3 and 9: a stranger sending well-signed messages no
/// validator wants — signed by its own key for a registered slot, which
/// costs it no score (a registry mismatch is never held against a relayer)
/// — is read up to its budget of useless messages and ignored unread past
/// it: it costs a validator a bounded number of signature recoveries and
/// breaks nothing; an honest submission sent after it reaches both
/// validators.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_useless_messages_are_read_up_to_its_budget_then_ignored_unread() {
    use lite_node_validator::gossip::{Stats, USELESS_BURST, USELESS_PER_SECOND};
    let market = market();
    let m = mesh(&market).await;
    let Mesh { conn1, conn2, v1, v2, collector, junk, .. } = &m;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    const SENT: u64 = 4_000;
    let started = std::time::Instant::now();
    for i in 0..SENT {
        let s = submission(&market, 7, 3, &format!("baseSnapshot:0x{i:040x}:{NAMESPACE}"));
        assert!(junk.publish(gossip_bytes(&signed_by(s, &market, [0x77u8; 32]))));
    }
    while Stats::get(&v1.stats().ignored) < SENT {
        assert!(tokio::time::Instant::now() < deadline, "v1 ignored all the stranger sent: {:?}", v1.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let read = SENT - Stats::get(&v1.stats().throttled);
    // Those held for their slot's first read are not taken from the budget.
    let most = USELESS_BURST + USELESS_PER_SECOND * elapsed + Stats::get(&v1.stats().held) as f64;
    assert!((read as f64) <= most, "{read} of {SENT} read in {elapsed:.1} s, more than the budget ({most:.0})");
    assert_eq!(Stats::get(&v1.stats().rejected), 0, "none held against the stranger's score");
    assert_eq!(Stats::get(&v2.stats().accepted) + Stats::get(&v2.stats().ignored), 0, "none relayed");
    let honest = submission(&market, 7, 4, &pool_project());
    assert!(collector.publish(gossip_bytes(&honest)));
    let queue = market.keys.submission_queue();
    for (name, conn) in [("v1", conn1), ("v2", conn2)] {
        while conn.clone().llen::<_, u64>(&queue).await.unwrap() < 1 {
            assert!(tokio::time::Instant::now() < deadline, "{name} queued the honest submission");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    println!("a stranger's {SENT} useless messages: {read} read by v1 in {elapsed:.1} s, the rest ignored unread");
}

/// Issue 53, finding 2: a slot may send only a tenth of its cap for an
/// epoch the validator has not seen released yet (such a submission waits in
/// the queue until it is), and nothing for a released epoch whose window has
/// closed, whatever deadline its signer chose: one slot holder cannot park
/// enough in the queue to break the intake.
#[tokio::test]
async fn a_slot_parks_little_on_an_unseen_epoch_and_nothing_on_a_closed_one() {
    use lite_node_validator::gossip::Verdict;
    let market = market();
    let server = RedisServer::start();
    let conn = lite_node_validator::connect(&redis::Client::open(server.url()).unwrap()).await.unwrap();
    set_head(&conn, &market, 42).await;
    // Epoch 7's window is open (it closes at block 50); epoch 6's has closed.
    let _: () = conn.clone().zadd(market.keys.epochs_closing(), 7, 50).await.unwrap();
    let projects = Projects::new(NAMESPACE, ["baseSnapshot"]);
    let admission = Admission { per_slot_epoch: 20, ..Admission::default() };
    let gateway = Gateway::with_admission(conn, market.clone(), Some(projects), admission);
    let (_tx, mut rx) = tokio::sync::mpsc::channel(16);
    let intake = gateway.clone();
    tokio::spawn(async move { intake.take_gossip_from(&mut rx).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while gateway.latest_epoch() != 7 {
        assert!(tokio::time::Instant::now() < deadline, "the intake read the open epochs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let of = |epoch: u64, i: u64| {
        let mut s = submission(&market, epoch, 3, &format!("baseSnapshot:0x{i:040x}:{NAMESPACE}"));
        s.request.as_mut().unwrap().deadline = 1_000_000; // as far as its signer likes
        gossip_bytes(&signed_by(s, &market, [9u8; 32]))
    };
    let judged = |epoch: u64, n: u64| (0..n).map(|i| gateway.judge_gossip(&of(epoch, i))).collect::<Vec<_>>();
    let taken = |verdicts: &[Verdict]| verdicts.iter().filter(|v| **v == Verdict::Accept).count();
    let unseen = judged(8, 10);
    assert_eq!(taken(&unseen), 2, "a tenth of the cap for an epoch not seen released: {unseen:?}");
    assert!(unseen[2..].iter().all(|v| matches!(v, Verdict::Unwanted(_))), "{unseen:?}");
    assert_eq!(taken(&judged(7, 25)), 20, "the whole cap for an open epoch");
    let closed = judged(6, 3);
    assert!(closed.iter().all(|v| *v == Verdict::Ignore), "ignored, at no cost to the relayer: {closed:?}");
}
