//! The reliable queue: a worker SIGKILLed in the middle of a burst (here:
//! items taken and never acknowledged, their marks expired) loses nothing,
//! and every item is handled exactly once.

use std::{collections::BTreeMap, time::Duration};

use lite_node_testkit::RedisServer;
use lite_node_validator::{
    Keys, ReliableQueue,
    keys::{self, Ttl},
};
use redis::AsyncCommands;

async fn queue(server: &RedisServer) -> (ReliableQueue, redis::aio::ConnectionManager) {
    let client = redis::Client::open(server.url()).unwrap();
    let conn = redis::aio::ConnectionManager::new(client).await.unwrap();
    (ReliableQueue::submissions(conn.clone(), &Keys::new("0xPS", "0xDM")), conn)
}

#[tokio::test]
async fn a_worker_that_dies_mid_burst_loses_nothing_and_nothing_is_handled_twice() {
    let server = RedisServer::start();
    let (q, mut conn) = queue(&server).await;
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
    // While their marks live, the items are a live worker's: not recovered.
    assert_eq!(q.recover().await.unwrap(), 0);
    // Every key written so far is seed 001's, with its type and TTL.
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    assert_eq!(keys.len(), 12, "the queue, the processing list, 10 marks: {keys:?}");
    for key in &keys {
        let spec = keys::spec_of(key).unwrap_or_else(|| panic!("{key} is not in seed 001"));
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
    // The marks expire (5 minutes in production; here deleted as expiry would).
    let marks: Vec<String> = conn.keys("processingSubmission:*").await.unwrap();
    assert_eq!(marks.len(), 10);
    for mark in &marks {
        conn.del::<_, ()>(mark).await.unwrap();
    }
    assert_eq!(q.recover().await.unwrap(), 10, "the dead worker's items go back");
    // Another worker drains the queue.
    while let Some(taken) = q.take(Duration::from_millis(100)).await.unwrap() {
        *handled.entry(taken.payload.clone()).or_default() += 1;
        q.ack(&taken).await.unwrap();
    }
    assert_eq!(handled.len(), 200, "none lost");
    assert!(handled.values().all(|&n| n == 1), "none twice");
    assert_eq!(q.depth().await.unwrap(), (0, 0));
}
