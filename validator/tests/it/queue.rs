//! The reliable queue: a worker SIGKILLed in the middle of a burst (here:
//! items taken and never acknowledged, its heartbeat gone) loses nothing,
//! every item is handled exactly once, and a worker that is slow but alive
//! keeps what it holds.

use std::{collections::BTreeMap, time::Duration};

use lite_node_testkit::RedisServer;
use lite_node_validator::{
    Keys, ReliableQueue,
    keys::{self, Ttl},
};
use redis::AsyncCommands;

async fn queue(server: &RedisServer, owner: &str) -> (ReliableQueue, redis::aio::ConnectionManager) {
    let client = redis::Client::open(server.url()).unwrap();
    let conn = redis::aio::ConnectionManager::new(client).await.unwrap();
    (ReliableQueue::submissions(conn.clone(), &Keys::new("0xPS", "0xDM")).owned_by(owner), conn)
}

#[tokio::test]
async fn a_worker_that_dies_mid_burst_loses_nothing_and_nothing_is_handled_twice() {
    let server = RedisServer::start();
    let (q, mut conn) = queue(&server, "dies-1").await;
    q.beat().await.unwrap();
    for n in 0..200 {
        q.push(&format!("{{\"n\":{n}}}")).await.unwrap();
    }
    let mut handled: BTreeMap<String, u32> = BTreeMap::new();
    // A worker takes 30 items, handles 20 of them, and dies.
    for n in 0..30 {
        let taken = q.take(Duration::from_secs(1)).await.unwrap().expect("an item");
        if n < 20 {
            *handled.entry(taken.payload.clone()).or_default() += 1;
            q.ack(&taken).await.unwrap();
        }
    }
    assert_eq!(q.depth().await.unwrap(), (170, 10), "10 held by the dead worker");
    // While its heartbeat lives, the items are a live worker's: not recovered.
    assert_eq!(q.recover().await.unwrap(), 0);
    // Every key written so far is in the schema, with its type and TTL.
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    assert_eq!(keys.len(), 14, "the queue, its list, the holders, 10 marks, the heartbeat: {keys:?}");
    for key in &keys {
        let spec = keys::spec_of(key).unwrap_or_else(|| panic!("{key} is not in the schema"));
        let kind: String = redis::cmd("TYPE").arg(key).query_async(&mut conn).await.unwrap();
        assert_eq!(kind, spec.kind.redis_name(), "{key}");
        let ttl: i64 = conn.ttl(key).await.unwrap();
        match spec.ttl {
            Ttl::None => assert_eq!(ttl, -1, "{key} does not expire"),
            Ttl::Fixed(d) | Ttl::AfterWindowClose(d) => {
                assert!(ttl > 0 && ttl <= d.as_secs() as i64, "{key}: {ttl} s of {d:?}")
            }
        }
    }
    // The heartbeat lapses (15 s in production; deleted here as expiry would).
    conn.del::<_, ()>("0xps:0xdm:worker:dies-1").await.unwrap();
    assert_eq!(q.recover().await.unwrap(), 10, "the dead worker's items go back");
    let marks: Vec<String> = conn.keys("processingSubmission:*").await.unwrap();
    assert!(marks.is_empty(), "their marks go with them: {marks:?}");
    // Another worker drains the queue.
    let (other, _) = queue(&server, "drains-2").await;
    while let Some(taken) = other.take(Duration::from_millis(100)).await.unwrap() {
        *handled.entry(taken.payload.clone()).or_default() += 1;
        other.ack(&taken).await.unwrap();
    }
    assert_eq!(handled.len(), 200, "none lost");
    assert!(handled.values().all(|&n| n == 1), "none twice");
    assert_eq!(q.depth().await.unwrap(), (0, 0));
}

#[tokio::test]
async fn a_slow_worker_keeps_what_it_holds_and_an_ack_takes_only_its_own_copy() {
    let server = RedisServer::start();
    let (slow, mut conn) = queue(&server, "slow-1").await;
    let (fast, _) = queue(&server, "fast-2").await;
    slow.beat().await.unwrap();
    fast.beat().await.unwrap();
    // The same item twice (a submission sent again): each worker takes one.
    slow.push("same").await.unwrap();
    slow.push("same").await.unwrap();
    let mine = slow.take_batch(1).await.unwrap();
    let theirs = fast.take_batch(1).await.unwrap();
    assert_eq!((mine.len(), theirs.len()), (1, 1));
    // The slow worker's mark expires (5 minutes) while it still works: its
    // heartbeat says it lives, so nothing is taken from it.
    let marks: Vec<String> = conn.keys("processingSubmission:*").await.unwrap();
    for mark in &marks {
        conn.del::<_, ()>(mark).await.unwrap();
    }
    assert_eq!(slow.recover().await.unwrap(), 0);
    // The fast worker acknowledges its copy: the slow one still holds its own.
    fast.ack(&theirs[0]).await.unwrap();
    assert_eq!(slow.depth().await.unwrap(), (0, 1));
    let held: Vec<String> = conn.lrange("0xps:0xdm:submissionQueue:held:slow-1", 0, -1).await.unwrap();
    assert_eq!(held, ["same"]);
    slow.ack(&mine[0]).await.unwrap();
    assert_eq!(slow.depth().await.unwrap(), (0, 0));
}

#[tokio::test]
async fn a_dead_workers_large_hold_comes_back_a_page_at_a_time() {
    let server = RedisServer::start();
    let (q, _) = queue(&server, "big-1").await;
    for n in 0..1_234 {
        q.push(&format!("item {n}")).await.unwrap();
    }
    // Never beat: a worker that died at once.
    assert_eq!(q.take_batch(2_000).await.unwrap().len(), 1_234);
    assert_eq!(q.depth().await.unwrap(), (0, 1_234));
    assert_eq!(q.recover().await.unwrap(), 1_234);
    assert_eq!(q.depth().await.unwrap(), (1_234, 0));
}

/// A take whose answer was lost (Redis restarted mid-command, its
/// append-only file kept the move) leaves items on a live worker's list
/// that the worker does not know of, and that recovery leaves to it: the
/// worker puts back everything on its own list, and nothing on another's.
#[tokio::test]
async fn a_live_worker_puts_back_what_its_list_holds_after_a_lost_answer_and_nothing_of_another() {
    let server = RedisServer::start();
    let (q, mut conn) = queue(&server, "w-0").await;
    let (other, _) = queue(&server, "w-1").await;
    q.beat().await.unwrap();
    other.beat().await.unwrap();
    for n in 0..10 {
        q.push(&format!("{{\"n\":{n}}}")).await.unwrap();
    }
    let kept = other.take(Duration::from_secs(1)).await.unwrap().expect("an item for the other worker");
    // The batch moved and marked, and its answer never read.
    let lost = q.take_batch(4).await.unwrap();
    assert_eq!(lost.len(), 4);
    drop(lost);
    assert_eq!(q.recover().await.unwrap(), 0, "a live worker's list is its own");
    assert_eq!(q.depth().await.unwrap(), (5, 5));
    assert_eq!(q.give_back_held().await.unwrap(), 4);
    assert_eq!(q.depth().await.unwrap(), (9, 1), "the other worker's item stays with it");
    let marks: Vec<String> = conn.keys("processingSubmission:*").await.unwrap();
    assert_eq!(marks.len(), 1, "only the other worker's mark is left: {marks:?}");
    // First in line again: the next take is one of them (items 1 to 4; item
    // 0 is the other worker's), not item 5.
    let next = q.take(Duration::from_secs(1)).await.unwrap().unwrap();
    assert!((1..=4).any(|n| next.payload == format!("{{\"n\":{n}}}")), "{}", next.payload);
    other.ack(&kept).await.unwrap();
    assert_eq!(q.give_back_held().await.unwrap(), 1, "again: nothing else was held");
}
