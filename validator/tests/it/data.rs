//! The consumers' routes over a validator's finalized-data store (issue 54),
//! served on real sockets: the event stream a consumer follows through a
//! server restart and a switch to another validator, retention, the
//! per-client rate limit, and an epoch whose root on chain is not this
//! validator's.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use lite_node_protocol::submission::Scope;
use lite_node_testkit::RedisServer;
use lite_node_validator::{
    Market,
    api::Data,
    store::{FinalizedEpoch, OnChain, Store},
};

fn scope() -> Scope {
    Scope {
        data_market: "0x0000000000000000000000000000000000000d01".parse().unwrap(),
        protocol_state: "0x0000000000000000000000000000000000000501".parse().unwrap(),
    }
}

/// Epoch `epoch_id` of two projects, its bytes and its root.
fn epoch(epoch_id: u64) -> (FinalizedEpoch, BTreeMap<String, Vec<u8>>) {
    let snapshots: Vec<(String, Vec<u8>)> = (0..2)
        .map(|i| {
            (format!("baseSnapshot:0xpool{i}:devnet"), format!(r#"{{"epoch":{epoch_id},"pool":{i}}}"#).into_bytes())
        })
        .collect();
    let pairs: Vec<(String, String)> =
        snapshots.iter().map(|(p, b)| (p.clone(), lite_node_protocol::cid::cid(b))).collect();
    let tree = lite_node_protocol::merkle::Tree::of(pairs.iter().map(|(p, c)| (p.as_str(), c.as_str()))).unwrap();
    let bytes = snapshots.iter().map(|(_, b)| (lite_node_protocol::cid::cid(b), b.clone())).collect();
    let e = FinalizedEpoch {
        epoch_id,
        root: tree.root().to_string(),
        batch_cid: format!("bafy-batch-{epoch_id}"),
        pairs,
        finalized_at: 1,
        without_bytes: Vec::new(),
    };
    (e, bytes)
}

fn finalized(block: u64) -> OnChain {
    OnChain { finalized: true, block: Some(block), tx: Some(format!("0x{block:064x}")), root: None }
}

/// Serves `data` on a fresh port until `stop` is sent; its base URL.
async fn serve(redis: &RedisServer, data: Data) -> (String, tokio::sync::oneshot::Sender<()>) {
    let market = Arc::new(Market::new(scope(), 7001, "validator-1"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let client = redis::Client::open(redis.url()).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(lite_node_validator::api::serve_with_store(
        market,
        client,
        listener,
        async move {
            let _ = stopped.await;
        },
        None,
        Some(data),
    ));
    (base, stop)
}

fn data(store: &Arc<Store>) -> Data {
    Data { store: store.clone(), rate_per_client: None, retention_days: Some(30) }
}

/// An open event stream: the `id`s of the events it sends, as they come.
struct Events {
    response: reqwest::Response,
    pending: String,
}

impl Events {
    async fn open(base: &str, last_id: Option<u64>, after: Option<u64>) -> Self {
        let mut request = reqwest::Client::new().get(format!("{base}/data/events"));
        if let Some(id) = last_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        if let Some(after) = after {
            request = request.query(&[("after", after)]);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Self { response, pending: String::new() }
    }

    /// The next event's id and data, within 10 s.
    async fn next(&mut self) -> (u64, serde_json::Value) {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(end) = self.pending.find("\n\n") {
                    let event: String = self.pending.drain(..end + 2).collect();
                    let field =
                        |name: &str| event.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()));
                    if let (Some(id), Some(data)) = (field("id:"), field("data:")) {
                        return (id.parse().unwrap(), data.parse().unwrap());
                    }
                    continue; // a keep-alive comment
                }
                let chunk = self.response.chunk().await.unwrap().expect("the stream stays open");
                self.pending.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        })
        .await
        .expect("an event within 10 s")
    }
}

#[tokio::test]
async fn a_consumer_following_the_stream_through_a_restart_and_a_switch_sees_every_epoch_once() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let a = Arc::new(Store::open(&dir.path().join("a.redb")).unwrap());
    let b = Arc::new(Store::open(&dir.path().join("b.redb")).unwrap());
    for e in 1..=3 {
        let (epoch, bytes) = epoch(e);
        for store in [&a, &b] {
            store.put_epoch(&epoch, &bytes).unwrap();
            store.settle(e, &finalized(100 + e)).unwrap();
        }
    }
    let (base_a, stop_a) = serve(&redis, data(&a)).await;
    let (base_b, _stop_b) = serve(&redis, data(&b)).await;

    // From the start (after epoch 0): epochs 1–3, in order, with where the
    // chain finalized each.
    let mut seen = Vec::new();
    let mut events = Events::open(&base_a, None, Some(0)).await;
    for _ in 1..=3 {
        let (id, data) = events.next().await;
        assert_eq!(data["epochId"], id);
        assert_eq!(data["finalized"]["block"], 100 + id);
        assert_eq!(data["servedHere"], true);
        assert_eq!(data["root"], epoch(id).0.root);
        seen.push(id);
    }
    // Epoch 5 settles before epoch 4: nothing is sent past 4 until it has.
    for e in [4, 5] {
        let (epoch, bytes) = epoch(e);
        for store in [&a, &b] {
            store.put_epoch(&epoch, &bytes).unwrap();
        }
    }
    a.settle(5, &finalized(105)).unwrap();
    let stalled = tokio::time::timeout(Duration::from_millis(800), events.next()).await;
    assert!(stalled.is_err(), "epoch 5 is not sent while epoch 4 awaits the chain: {stalled:?}");
    a.settle(4, &finalized(104)).unwrap();
    for _ in 4..=5 {
        seen.push(events.next().await.0);
    }

    // The server restarts: the consumer resumes with the last id it saw.
    drop(events);
    stop_a.send(()).unwrap();
    let (base_a, _stop_a) = serve(&redis, data(&a)).await;
    let (e6, bytes6) = epoch(6);
    a.put_epoch(&e6, &bytes6).unwrap();
    a.settle(6, &finalized(106)).unwrap();
    let mut events = Events::open(&base_a, Some(*seen.last().unwrap()), None).await;
    seen.push(events.next().await.0);

    // A switch to another validator, resumed by the same id: B has settled
    // epochs 4–6 later (and 7, which the chain did not finalize, is never
    // sent); the consumer sees 8 next, once.
    drop(events);
    b.settle(4, &finalized(104)).unwrap();
    b.settle(5, &finalized(105)).unwrap();
    b.put_epoch(&e6, &bytes6).unwrap();
    b.settle(6, &finalized(106)).unwrap();
    for e in [7, 8] {
        let (epoch, bytes) = epoch(e);
        b.put_epoch(&epoch, &bytes).unwrap();
    }
    b.settle(7, &OnChain { finalized: false, block: None, tx: None, root: None }).unwrap();
    b.settle(8, &finalized(108)).unwrap();
    let mut events = Events::open(&base_b, Some(*seen.last().unwrap()), None).await;
    seen.push(events.next().await.0);
    assert_eq!(seen, [1, 2, 3, 4, 5, 6, 8], "every finalized epoch once, in order");

    // Without an id or `after`: from the newest finalized epoch.
    let mut events = Events::open(&base_b, None, None).await;
    assert_eq!(events.next().await.0, 8);
    // A malformed id: 400, saying so.
    let r = reqwest::Client::new()
        .get(format!("{base_b}/data/events"))
        .header("Last-Event-ID", "seven")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("is not an epoch id"));
}

#[tokio::test]
async fn retention_drops_what_is_past_it_and_the_api_says_so() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&dir.path().join("finalized.redb")).unwrap());
    for e in 1..=3 {
        let (epoch, bytes) = epoch(e);
        store.put_epoch(&epoch, &bytes).unwrap();
    }
    let before = store.counts().unwrap();
    assert_eq!((before.epochs, before.blocks), (3, 6));
    // Nothing is 30 days old yet.
    assert_eq!(store.retain(30).unwrap(), None);
    // A cutoff past every epoch but the newest (the clock a day on).
    let (through, dropped) =
        store.retain_before(lite_node_core::time::now_secs() + 1).unwrap().expect("every epoch is before it");
    assert_eq!((through, dropped.epochs, dropped.blocks), (3, 3, 6));
    let (epoch4, bytes4) = epoch(4);
    store.put_epoch(&epoch4, &bytes4).unwrap();
    let (base, _stop) = serve(&redis, data(&store)).await;
    let r = reqwest::get(format!("{base}/data/2/baseSnapshot:0xpool0:devnet")).await.unwrap();
    assert_eq!(r.status(), 410);
    let why = r.text().await.unwrap();
    assert!(why.contains("epoch 2 is past this server's retention (it keeps from epoch 4, 30 days)"), "{why}");
    assert_eq!(reqwest::get(format!("{base}/data/4")).await.unwrap().status(), 200);
    assert_eq!(reqwest::get(format!("{base}/data/9")).await.unwrap().status(), 404);
}

#[tokio::test]
async fn a_client_past_its_rate_gets_429_and_another_root_on_chain_gets_409() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&dir.path().join("finalized.redb")).unwrap());
    let (e1, bytes) = epoch(1);
    store.put_epoch(&e1, &bytes).unwrap();
    let other = alloy::primitives::B256::repeat_byte(9).to_string();
    store.settle(1, &OnChain { root: Some(other.clone()), ..finalized(101) }).unwrap();
    let limited = Data { rate_per_client: std::num::NonZeroU32::new(5), ..data(&store) };
    let (base, _stop) = serve(&redis, limited).await;
    let url = format!("{base}/data/1/baseSnapshot:0xpool0:devnet");
    let mut statuses = Vec::new();
    let started = std::time::Instant::now();
    for _ in 0..30 {
        statuses.push(reqwest::get(&url).await.unwrap().status().as_u16());
    }
    let elapsed = started.elapsed().as_secs_f64();
    // A burst of 10 (twice the rate) answered, then 429s — but for what the
    // rate gave back meanwhile (5 a second: a loaded machine's slow
    // requests earn a few more).
    let answered = statuses.iter().filter(|s| **s == 409).count();
    assert!(statuses[..10].iter().all(|s| *s == 409), "{statuses:?}");
    assert!(answered <= 10 + (elapsed * 5.0).ceil() as usize, "{answered} answered in {elapsed:.2} s: {statuses:?}");
    assert!(
        statuses.iter().filter(|s| **s == 429).count() >= 30 - 10 - (elapsed * 5.0).ceil() as usize,
        "{statuses:?}"
    );
    assert!(statuses.iter().all(|s| *s == 409 || *s == 429), "{statuses:?}");
    // The monitor's routes are not the data routes: not limited; and
    // /health says when keeping the finalized data fails.
    store.set_problem(Some("finalized-data store: Redis: connection refused".into()));
    let health = reqwest::get(format!("{base}/health")).await.unwrap();
    assert_ne!(health.status(), 429);
    let health: serde_json::Value = serde_json::from_slice(&health.bytes().await.unwrap()).unwrap();
    assert!(health["degraded"].to_string().contains("finalized-data store: Redis: connection refused"), "{health}");
    store.set_problem(None);
    let health = reqwest::get(format!("{base}/health")).await.unwrap().bytes().await.unwrap();
    let health: serde_json::Value = serde_json::from_slice(&health).unwrap();
    assert!(!health["degraded"].to_string().contains("finalized-data store"), "{health}");
    let (base, _stop) = serve(&redis, data(&store)).await;
    let r = reqwest::get(format!("{base}/data/1/baseSnapshot:0xpool0:devnet")).await.unwrap();
    assert_eq!(r.status(), 409);
    let why = r.text().await.unwrap();
    assert!(why.contains(&format!("the chain finalized root {other}")) && why.contains("ask another server"), "{why}");
}

#[tokio::test]
async fn an_epoch_streams_whole_or_a_page_at_a_time_and_a_range_proves_each_epoch() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&dir.path().join("finalized.redb")).unwrap());
    // Epoch 10: 600 projects (more than a chunk of the stream), one of them
    // without bytes.
    let snapshot = |e: u64, i: usize| format!(r#"{{"epoch":{e},"pool":{i}}}"#).into_bytes();
    let project = |i: usize| format!("baseSnapshot:0xpool{i:04}:devnet");
    let pairs: Vec<(String, String)> =
        (0..600).map(|i| (project(i), lite_node_protocol::cid::cid(&snapshot(10, i)))).collect();
    let tree = lite_node_protocol::merkle::Tree::of(pairs.iter().map(|(p, c)| (p.as_str(), c.as_str()))).unwrap();
    let bytes: BTreeMap<String, Vec<u8>> =
        (1..600).map(|i| (lite_node_protocol::cid::cid(&snapshot(10, i)), snapshot(10, i))).collect();
    let big = FinalizedEpoch {
        epoch_id: 10,
        root: tree.root().to_string(),
        batch_cid: "bafy-batch-10".into(),
        pairs: pairs.clone(),
        finalized_at: 1,
        without_bytes: Vec::new(),
    };
    assert!(store.put_epoch(&big, &bytes).unwrap());
    assert_eq!(store.meta(10).unwrap().unwrap().without_bytes, [pairs[0].1.clone()]);
    let (base, _stop) = serve(&redis, data(&store)).await;
    let asked = |epoch_id| lite_node_protocol::bundle::Asked {
        epoch_id,
        project_id: "",
        protocol_state: scope().protocol_state,
        data_market: scope().data_market,
    };
    // A page of 250 after project 99: its multiproof takes its lines to the
    // root.
    let page = reqwest::get(format!("{base}/data/10?after={}&limit=250", project(99))).await.unwrap();
    assert_eq!(page.headers()["content-type"], "application/x-ndjson");
    let page = page.text().await.unwrap();
    let lines: Vec<serde_json::Value> = page.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(lines.len(), 251, "a header and 250 projects");
    let mut check = lite_node_protocol::bundle::EpochCheck::start(&lines[0], &asked(10)).unwrap();
    for (i, line) in lines[1..].iter().enumerate() {
        assert_eq!(line["projectId"], project(100 + i));
        check.line(line).unwrap();
    }
    assert_eq!(check.finish().unwrap(), tree.root());
    // The whole epoch: project 0's snapshot is missing, and the check says
    // so.
    let whole = reqwest::get(format!("{base}/data/10")).await.unwrap().text().await.unwrap();
    let lines: Vec<serde_json::Value> = whole.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!((lines.len(), lines[0]["projects"].as_u64()), (601, Some(600)));
    let mut check = lite_node_protocol::bundle::EpochCheck::start(&lines[0], &asked(10)).unwrap();
    let failed = check.line(&lines[1]).unwrap_err();
    assert_eq!(failed.check, "bytes hash to the CID", "{failed}");
    // The epoch's pairs alone (a market without pairs on chain reads them
    // so): the whole set, in order, making the root — with client and server
    // both this crate's, through the consumer's own read.
    let client = reqwest::Client::new();
    let (root, read) = lite_node_chain::consumer::read_pairs(&client, &base, &asked(10)).await.unwrap();
    assert_eq!((root, read), (tree.root(), pairs.clone()));
    let r = reqwest::get(format!("{base}/data/pairs/11")).await.unwrap();
    assert_eq!(r.status(), 404, "an epoch not kept here");
    // Past the last project, and a zero limit: said.
    let r = reqwest::get(format!("{base}/data/10?after={}", project(599))).await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("has no project after"));
    assert_eq!(reqwest::get(format!("{base}/data/10?limit=0")).await.unwrap().status(), 400);

    // A range of project 5 over epochs 8–12: epoch 10 has it and its
    // bundle's proof checks; 12 is kept without it, 11 not at all: each
    // named missing; 8 and 9, before anything kept here, are not answered.
    let (e12, bytes12) = epoch(12);
    store.put_epoch(&e12, &bytes12).unwrap();
    let r = reqwest::get(format!("{base}/data/range/{}?from=8&to=12", project(5))).await.unwrap();
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    let lines: Vec<serde_json::Value> = body.lines().map(|l| l.parse().unwrap()).collect();
    let epochs: Vec<u64> = lines.iter().map(|l| l["epochId"].as_u64().unwrap()).collect();
    assert_eq!(epochs, [10, 11, 12], "cut to the epochs kept here (10 to 12): {body}");
    for l in &lines {
        if l["epochId"] == 10 {
            let asked = lite_node_protocol::bundle::Asked { project_id: &project(5), ..asked(10) };
            let checked = lite_node_protocol::bundle::check(l, &asked).unwrap();
            assert_eq!(checked.root, tree.root());
        } else {
            assert!(l["missing"].as_str().unwrap().contains("not kept here"), "{l}");
        }
    }
    assert_eq!(reqwest::get(format!("{base}/data/range/x?from=3&to=2")).await.unwrap().status(), 400);
    // Epochs 0 to 2⁶⁴−1: what is kept, not an endless stream.
    let all = reqwest::get(format!("{base}/data/range/{}?from=0&to={}", project(5), u64::MAX)).await.unwrap();
    assert_eq!(all.text().await.unwrap().lines().count(), 3);
    let r = reqwest::get(format!("{base}/data/range/x?from=20&to=30")).await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("it keeps epochs 10 to 12"));
}

#[test]
fn a_store_of_another_layout_is_refused_naming_the_file_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("finalized.redb");
    {
        // The first layout: epochs kept, no version.
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let table: redb::TableDefinition<'_, u64, &[u8]> = redb::TableDefinition::new("epochs");
        txn.open_table(table).unwrap().insert(1, b"{}".as_slice()).unwrap();
        txn.commit().unwrap();
    }
    let err = Store::open(&path).unwrap_err().to_string();
    assert!(err.contains("finalized.redb") && err.contains("version 1") && err.contains("move it aside"), "{err}");
}

#[test]
fn an_archive_that_cannot_be_written_leaves_no_half_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("finalized.redb")).unwrap();
    let (e3, bytes) = epoch(3);
    store.put_epoch(&e3, &bytes).unwrap();
    let of = lite_node_validator::archive::MarketOf {
        chain_id: 7001,
        protocol_state: scope().protocol_state.to_string(),
        data_market: scope().data_market.to_string(),
    };
    let archives = dir.path().join("archives");
    // Where the archive goes, a directory that is not empty: the last step
    // (the rename into place) fails, as a full disk fails a write.
    std::fs::create_dir_all(archives.join("epochs-1-5.car/taken")).unwrap();
    let err = lite_node_validator::archive::write(&store, &of, 1, 5, &archives).unwrap_err();
    assert!(err.contains("epochs-1-5.car"), "{err}");
    let left: Vec<String> =
        std::fs::read_dir(&archives).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(left, ["epochs-1-5.car"], "only what was there: no temporary file left");
    // Once it can be, it is, whole.
    std::fs::remove_dir_all(archives.join("epochs-1-5.car")).unwrap();
    let written = lite_node_validator::archive::write(&store, &of, 1, 5, &archives).unwrap().unwrap();
    assert_eq!((written.epochs, written.blocks), (1, 2));
    let other = Store::open(&dir.path().join("other.redb")).unwrap();
    let restored = lite_node_validator::archive::restore(&other, &written.path, Some(&of)).unwrap();
    assert_eq!((restored.epochs, restored.blocks), (1, 2));
    assert_eq!(other.epoch(3).unwrap(), store.epoch(3).unwrap(), "the epoch restored is the one kept");
}

/// A restored epoch's retention counts from its finalization, not from the
/// restore: restored today from an archive, an epoch finalized 40 days ago
/// is past 30 days' retention and dropped; one finalized an hour ago stays.
#[test]
fn a_restored_epoch_keeps_its_retention_clock_from_its_finalization() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("finalized.redb")).unwrap();
    let now = lite_node_core::time::now_secs();
    for (id, at) in [(3, now - 40 * 86_400), (4, now - 3_600)] {
        let (mut e, bytes) = epoch(id);
        e.finalized_at = at;
        store.put_epoch(&e, &bytes).unwrap();
        store.settle(id, &finalized(100 + id)).unwrap();
    }
    let of = lite_node_validator::archive::MarketOf {
        chain_id: 7001,
        protocol_state: scope().protocol_state.to_string(),
        data_market: scope().data_market.to_string(),
    };
    let written =
        lite_node_validator::archive::write(&store, &of, 1, 5, &dir.path().join("archives")).unwrap().unwrap();
    let other = Store::open(&dir.path().join("other.redb")).unwrap();
    lite_node_validator::archive::restore(&other, &written.path, Some(&of)).unwrap();
    let (through, dropped) = other.retain(30).unwrap().expect("the 40-day-old epoch is past 30 days");
    assert_eq!((through, dropped.epochs), (3, 1));
    assert_eq!(other.epoch_ids(1..=5).unwrap(), [4]);
}
