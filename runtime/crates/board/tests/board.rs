//! The board on a real `redis-server`: the fence, claims, membership by
//! heartbeat, assignments over Streams reclaimed with `XAUTOCLAIM`, a Redis
//! restart with AOF, and both assignment modes over a thousand items.

use std::{collections::BTreeMap, time::Duration};

use lite_node_board::{Board, Completion, Joined, Member, Refused, assign};
use lite_node_testkit::RedisServer;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

async fn board(redis: &RedisServer) -> Board {
    let client = redis::Client::open(redis.url()).unwrap();
    Board::new(client.get_connection_manager().await.unwrap(), "market:7")
}

fn member(id: &str) -> Member {
    Member {
        id: id.into(),
        package: "abc123".into(),
        api: "0.4.0".into(),
        assign: "peer-index".into(),
        lease_ms: 10_000,
        instance: String::new(),
    }
}

/// A result is accepted only under its item's current token: the holder of
/// an older token — another worker, or the same worker given the item again
/// (ABA) — is refused and counted; the current holder's result is taken once.
#[test]
fn only_the_current_token_completes_an_item_once() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let b = board(&redis).await;
        b.open_epoch(5, "work").await.unwrap();
        let first = b.claim(5, 0, "w1", false).await.unwrap().unwrap();
        let second = b.claim(5, 0, "w2", false).await.unwrap().unwrap();
        assert!(second > first);
        assert_eq!(b.complete(5, 0, first, "late").await.unwrap(), Completion::Fenced);
        assert_eq!(b.complete(5, 0, second, "r").await.unwrap(), Completion::Accepted);
        assert_eq!(b.complete(5, 0, second, "r").await.unwrap(), Completion::AlreadyDone);
        assert_eq!(b.claim(5, 0, "w3", false).await.unwrap(), None, "its result is in");
        // The same worker given item 1 twice: its first token is stale.
        let old = b.claim(5, 1, "w1", false).await.unwrap().unwrap();
        let new = b.claim(5, 1, "w1", false).await.unwrap().unwrap();
        assert_eq!(b.complete(5, 1, old, "stale").await.unwrap(), Completion::Fenced);
        assert_eq!(b.complete(5, 1, new, "fresh").await.unwrap(), Completion::Accepted);
        assert_eq!(b.results(5).await.unwrap(), BTreeMap::from([(0, "r".into()), (1, "fresh".into())]));
        assert_eq!(b.stats().await.unwrap()["fenced"], 2);
    });
}

/// Members live by heartbeat; one on another package, interface or
/// assignment mode is refused by name; an item held by a live member cannot
/// be taken with `only_if_free`, and can once its heartbeat lapses.
#[test]
fn membership_follows_heartbeats_and_a_mismatched_member_is_refused() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let b = board(&redis).await;
        assert_eq!(
            b.heartbeat(&member("w2"), Duration::from_secs(30)).await.unwrap(),
            Joined::Unstated,
            "no coordinator yet: joined, and told so"
        );
        b.set_package("abc123", "0.4.0", "peer-index", 10_000).await.unwrap();
        assert_eq!(b.heartbeat(&member("w2"), Duration::from_secs(30)).await.unwrap(), Joined::Matched);
        b.heartbeat(&member("w1"), Duration::from_millis(300)).await.unwrap();
        let ids = |m: Vec<Member>| m.into_iter().map(|m| m.id).collect::<Vec<_>>();
        assert_eq!(ids(b.live_members().await.unwrap()), ["w1", "w2"], "sorted by id");
        let stranger = Member { id: "w9".into(), package: "def456".into(), ..member("w9") };
        let refused = b.heartbeat(&stranger, Duration::from_secs(30)).await.unwrap_err().to_string();
        assert!(refused.contains("member w9 runs compute package def456") && refused.contains("abc123"), "{refused}");
        let other_mode = Member { assign: "least-backlog".into(), ..member("w8") };
        let refused = b.heartbeat(&other_mode, Duration::from_secs(30)).await.unwrap_err();
        assert!(
            matches!(refused.downcast_ref::<Refused>(), Some(Refused::Package(why))
                if why.contains("member w8 assigns work by least-backlog, the coordinator by peer-index")
                    && why.contains("LITE_NODE_CLUSTER_ASSIGN=peer-index")),
            "{refused:#}"
        );
        let other_lease = Member { lease_ms: 60_000, ..member("w7") };
        let refused = b.heartbeat(&other_lease, Duration::from_secs(30)).await.unwrap_err().to_string();
        assert!(
            refused.contains("member w7 holds assignments for 60000 ms, the coordinator gives them for 10000 ms")
                && refused.contains("LITE_NODE_CLUSTER_LEASE_SECS"),
            "{refused}"
        );
        // A second process under a live member's id is refused by name.
        let twin = Member { instance: "host-b:77".into(), ..member("w2") };
        let taken = b.heartbeat(&twin, Duration::from_secs(30)).await.unwrap_err();
        assert!(
            matches!(taken.downcast_ref::<Refused>(), Some(Refused::Taken(why)) if why.contains("member id w2")),
            "{taken:#}"
        );
        // The refused twin leaving does not remove the live one.
        assert!(!b.leave(&twin).await.unwrap());
        assert_eq!(ids(b.live_members().await.unwrap()), ["w1", "w2"]);

        b.open_epoch(6, "work").await.unwrap();
        b.claim(6, 3, "w1", true).await.unwrap().unwrap();
        assert_eq!(b.claim(6, 3, "w2", true).await.unwrap(), None, "w1 is alive and holds it");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while ids(b.live_members().await.unwrap()) != ["w2"] {
            assert!(std::time::Instant::now() < deadline, "w1's heartbeat never lapsed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(b.claim(6, 3, "w2", true).await.unwrap().is_some(), "w1 is gone: its item is free");
    });
}

/// Least backlog's delivery: an assignment arrives on the worker's stream;
/// one not acknowledged within the lease is taken back with `XAUTOCLAIM`
/// and given again, after which the first worker's result is fenced. A
/// worker that restarts reads what it was given and had not acknowledged.
#[test]
fn an_assignment_past_its_lease_is_reclaimed_and_its_late_result_fenced() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let b = board(&redis).await;
        b.open_epoch(7, "work").await.unwrap();
        let token = b.assign(7, 4, "w1").await.unwrap().unwrap();
        let got = b.next_assignments("w1", Duration::from_millis(100)).await.unwrap();
        assert_eq!((got.len(), got[0].index, got[0].token), (1, 4, token));
        // Restarted before acknowledging: it is read again.
        let again = b.next_assignments("w1", Duration::from_millis(100)).await.unwrap();
        assert_eq!(again[0].entry, got[0].entry);
        assert!(b.reclaim("w1", Duration::from_secs(60)).await.unwrap().is_empty(), "within its lease");
        let taken = b.reclaim("w1", Duration::ZERO).await.unwrap();
        assert_eq!(taken.iter().map(|a| a.index).collect::<Vec<_>>(), [4]);
        assert!(b.next_assignments("w1", Duration::from_millis(50)).await.unwrap().is_empty(), "taken from it");
        let new = b.assign(7, 4, "w2").await.unwrap().unwrap();
        assert_eq!(b.complete(7, 4, token, "late").await.unwrap(), Completion::Fenced);
        let w2 = b.next_assignments("w2", Duration::from_millis(100)).await.unwrap();
        assert_eq!(w2[0].token, new);
        assert_eq!(b.complete(7, 4, new, "r").await.unwrap(), Completion::Accepted);
        b.ack("w2", &w2[0].entry).await.unwrap();
        assert!(b.next_assignments("w2", Duration::from_millis(50)).await.unwrap().is_empty());
        let stats = b.stats().await.unwrap();
        assert_eq!((stats["fenced"], stats["reclaimed"]), (1, 1));
    });
}

/// Redis restarted with its append-only file: the epoch, tokens and results
/// are still there, and the fence still holds.
#[test]
fn the_board_survives_a_redis_restart_with_aof() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let redis = RedisServer::start_with(&aof);
    let rt = runtime();
    let (old, new) = rt.block_on(async {
        let b = board(&redis).await;
        b.open_epoch(8, "work").await.unwrap();
        let old = b.claim(8, 0, "w1", false).await.unwrap().unwrap();
        let new = b.claim(8, 0, "w2", false).await.unwrap().unwrap();
        b.claim(8, 1, "w2", false).await.unwrap().unwrap();
        assert_eq!(b.complete(8, 1, 1, "one").await.unwrap(), Completion::Accepted);
        (old, new)
    });
    let redis = redis.restart(&aof);
    rt.block_on(async {
        let b = board(&redis).await;
        assert_eq!(b.epoch_work(8).await.unwrap().as_deref(), Some("work"));
        assert!(!b.open_epoch(8, "work").await.unwrap(), "open already");
        assert_eq!(b.complete(8, 0, old, "late").await.unwrap(), Completion::Fenced);
        assert_eq!(b.complete(8, 0, new, "zero").await.unwrap(), Completion::Accepted);
        assert_eq!(b.results(8).await.unwrap().len(), 2);
        assert_eq!(b.unfinished(8, 2).await.unwrap(), BTreeMap::new());
    });
}

/// Peer index over a thousand items and three members through the board:
/// each member claims its share; one stops half-way (its heartbeat lapses);
/// the two left divide what it had not finished, within the same epoch.
/// Every item's result is in exactly once.
#[test]
fn peer_index_finishes_a_lapsed_members_share_within_the_epoch() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let b = board(&redis).await;
        const ITEMS: usize = 1000;
        b.open_epoch(9, "work").await.unwrap();
        for id in ["w0", "w1"] {
            b.heartbeat(&member(id), Duration::from_secs(30)).await.unwrap();
        }
        b.heartbeat(&member("w2"), Duration::from_millis(300)).await.unwrap();
        let ids: Vec<String> = b.live_members().await.unwrap().into_iter().map(|m| m.id).collect();
        let mut computed: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for me in &ids {
            let share = assign::peer_index_share(&ids, me, ITEMS).unwrap();
            // w2 stops after half of its share.
            let take = if me == "w2" { share.len() / 2 } else { share.len() };
            for (n, &i) in share.iter().enumerate() {
                let token = b.claim(9, i, me, true).await.unwrap().unwrap();
                if n < take {
                    assert_eq!(b.complete(9, i, token, &format!("r{i}")).await.unwrap(), Completion::Accepted);
                    computed.entry(i).or_default().push(me.clone());
                }
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while b.live_members().await.unwrap().len() != 2 {
            assert!(std::time::Instant::now() < deadline, "w2's heartbeat never lapsed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = b.unfinished(9, ITEMS).await.unwrap();
        assert!(left.values().all(|h| h.as_deref() == Some("w2")), "only w2's unfinished items are left");
        let unfinished: Vec<usize> = left.keys().copied().collect();
        let live: Vec<String> = b.live_members().await.unwrap().into_iter().map(|m| m.id).collect();
        for me in &live {
            // The unfinished items, divided by the same rule among the living.
            let share = assign::peer_index_share(&live, me, unfinished.len()).unwrap();
            for k in share {
                let i = unfinished[k];
                let token = b.claim(9, i, me, true).await.unwrap().expect("w2 is gone: free");
                assert_eq!(b.complete(9, i, token, &format!("r{i}")).await.unwrap(), Completion::Accepted);
                computed.entry(i).or_default().push(me.clone());
            }
        }
        assert_eq!(computed.len(), ITEMS);
        assert!(computed.values().all(|by| by.len() == 1), "no item computed twice");
        assert_eq!(b.results(9).await.unwrap().len(), ITEMS);
        let by_worker = computed.values().fold(BTreeMap::<&str, usize>::new(), |mut m, by| {
            *m.entry(by[0].as_str()).or_default() += 1;
            m
        });
        // w2 did half of its 333; the two others split the rest and its 167.
        assert_eq!(by_worker["w2"], 166, "{by_worker:?}");
        assert!(by_worker["w0"].abs_diff(417) <= 1 && by_worker["w1"].abs_diff(417) <= 1, "{by_worker:?}");
    });
}

/// Reads `worker`'s stream until it is empty, completing and acknowledging
/// each assignment; each item done goes in `done` (once).
async fn work_off(b: &Board, worker: &str, done: &mut BTreeMap<usize, String>) {
    loop {
        let got = b.next_assignments(worker, Duration::from_millis(20)).await.unwrap();
        if got.is_empty() {
            return;
        }
        for a in got {
            assert_eq!(b.complete(a.epoch_id, a.index, a.token, "r").await.unwrap(), Completion::Accepted);
            b.ack(worker, &a.entry).await.unwrap();
            assert!(done.insert(a.index, worker.into()).is_none(), "item {} twice", a.index);
        }
    }
}

/// Least backlog over a thousand items and three workers through the
/// board: the assignments even out; a worker that dies with its stream
/// unread has everything reclaimed and given to the others; every item's
/// result is in exactly once.
#[test]
fn least_backlog_spreads_evenly_and_a_dead_workers_items_go_to_the_living() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let b = board(&redis).await;
        const ITEMS: usize = 1000;
        b.open_epoch(10, "work").await.unwrap();
        let mut backlog: BTreeMap<String, usize> = ["w0", "w1", "w2"].iter().map(|w| (w.to_string(), 0)).collect();
        for (i, worker) in assign::least_backlog(&(0..ITEMS).collect::<Vec<_>>(), &mut backlog) {
            b.assign(10, i, &worker).await.unwrap().unwrap();
        }
        assert!(backlog.values().all(|&n| n == 333 || n == 334), "{backlog:?}");
        let mut done: BTreeMap<usize, String> = BTreeMap::new();
        for w in ["w0", "w1"] {
            work_off(&b, w, &mut done).await;
        }
        // w2 died without reading a thing.
        assert!(b.reclaim("w2", Duration::ZERO).await.unwrap().is_empty(), "nothing read, nothing pending");
        let taken = b.take_over("w2").await.unwrap();
        assert_eq!(taken.len(), backlog["w2"]);
        let mut living: BTreeMap<String, usize> = [("w0".to_string(), 0), ("w1".to_string(), 0)].into();
        let items: Vec<usize> = taken.iter().map(|a| a.index).collect();
        for (i, worker) in assign::least_backlog(&items, &mut living) {
            b.assign(10, i, &worker).await.unwrap().unwrap();
        }
        for w in ["w0", "w1"] {
            work_off(&b, w, &mut done).await;
        }
        assert_eq!(done.len(), ITEMS);
        assert_eq!(b.results(10).await.unwrap().len(), ITEMS);
        assert!(b.unfinished(10, ITEMS).await.unwrap().is_empty());
    });
}

/// An epoch closed (or lost with Redis's data) takes no claims, assignments
/// or results, and none of them brings its keys back; `done` says it is not
/// open. The streams of workers no longer live are deleted.
#[test]
fn a_closed_epoch_and_gone_workers_leave_nothing_behind() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let b = board(&redis).await;
        b.open_epoch(11, "work").await.unwrap();
        let token = b.claim(11, 0, "w1", false).await.unwrap().unwrap();
        assert_eq!(b.done(11).await.unwrap(), Some(0));
        b.close_epoch(11).await.unwrap();
        assert_eq!(b.done(11).await.unwrap(), None, "not open");
        assert_eq!(b.claim(11, 1, "w1", false).await.unwrap(), None);
        assert_eq!(b.assign(11, 2, "w1").await.unwrap(), None);
        assert_eq!(b.complete(11, 0, token, "late").await.unwrap(), Completion::Closed);
        let client = redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> =
            redis::cmd("KEYS").arg("cluster:market:7:epoch:*").query_async(&mut conn).await.unwrap();
        assert!(keys.is_empty(), "{keys:?}");
        assert!(b.next_assignments("w1", Duration::from_millis(20)).await.unwrap().is_empty(), "nothing was sent");

        b.open_stream("w2").await.unwrap();
        assert_eq!(b.forget_streams(&["w1".into()]).await.unwrap(), 1);
        let exists = |key: &'static str| {
            let mut conn = conn.clone();
            async move { redis::cmd("EXISTS").arg(key).query_async::<bool>(&mut conn).await.unwrap() }
        };
        assert!(exists("cluster:market:7:work:w1").await && !exists("cluster:market:7:work:w2").await);
    });
}

/// A worker computing past the lease renews it: the coordinator's reclaim
/// finds nothing to take back, and the entry is still the worker's.
#[test]
fn a_renewed_lease_is_not_reclaimed() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let b = board(&redis).await;
        b.open_epoch(12, "work").await.unwrap();
        b.assign(12, 0, "w1").await.unwrap().unwrap();
        let got = b.next_assignments("w1", Duration::from_millis(100)).await.unwrap();
        let lease = Duration::from_millis(500);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let client = redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        loop {
            // XPENDING's extended form: [[id, consumer, idle ms, deliveries]].
            let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
                .arg("cluster:market:7:work:w1")
                .arg("workers")
                .arg("-")
                .arg("+")
                .arg(10)
                .query_async(&mut conn)
                .await
                .unwrap();
            if pending[0].2 >= lease.as_millis() as u64 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the entry never aged past the lease");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        b.renew("w1", &[got[0].entry.as_str()]).await.unwrap();
        assert!(b.reclaim("w1", lease).await.unwrap().is_empty(), "renewed: not taken back");
        let again = b.next_assignments("w1", Duration::from_millis(20)).await.unwrap();
        assert_eq!(again[0].entry, got[0].entry, "still the worker's");
        assert_eq!(b.reclaim("w1", Duration::ZERO).await.unwrap().len(), 1, "without renewal it goes");
    });
}
