//! Real libp2p peers on loopback: what is published arrives through a
//! relaying peer, junk is dropped at the first hop and never relayed, a
//! peer that stops reading is disconnected, and a peer keeps its identity
//! across restarts.

use std::{sync::Arc, time::Duration};

use lite_node_gossip::{Check, Delivery, Error, Gossip, Settings, Stats, Verdict};
use tokio::sync::mpsc;

fn settings(dir: &std::path::Path, name: &str, bootstrap: Vec<libp2p::Multiaddr>) -> Settings {
    Settings {
        listen: "/ip4/127.0.0.1/tcp/0".parse().unwrap(),
        bootstrap,
        identity: dir.join(name).join("p2p-identity.key"),
        topic: lite_node_gossip::SUBMISSIONS_TOPIC.into(),
    }
}

/// Accepts payloads starting with `ok`, rejects the rest.
fn strict() -> Check {
    Arc::new(|p: &[u8]| if p.starts_with(b"ok") { Verdict::Accept } else { Verdict::Reject("junk".into()) })
}

/// Accepts everything: a peer that would hand over junk if it reached it.
fn lenient() -> Check {
    Arc::new(|_: &[u8]| Verdict::Accept)
}

/// The next delivery `rx` gets, within 30 s.
async fn next_delivery(rx: &mut mpsc::Receiver<Delivery>, what: &str) -> Delivery {
    tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .expect("the peer is running")
}

/// The next payload `rx` gets, within 30 s.
async fn next(rx: &mut mpsc::Receiver<Delivery>, what: &str) -> Vec<u8> {
    next_delivery(rx, what).await.data
}

async fn until<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_crosses_a_relay_and_junk_stops_at_the_first_hop() {
    let dir = tempfile::tempdir().unwrap();
    // b in the middle checks; honest h and junk-sending j dial b; c dials b
    // and would hand over anything that reached it.
    let (b_tx, mut b_rx) = mpsc::channel(64);
    let b = Gossip::start(settings(dir.path(), "b", vec![]), strict(), b_tx).unwrap();
    let b_addr = tokio::time::timeout(Duration::from_secs(10), b.listening()).await.expect("b listens");
    let start = |name: &str, check: Check| {
        let (tx, rx) = mpsc::channel(64);
        (Gossip::start(settings(dir.path(), name, b_addr.clone()), check, tx).unwrap(), rx)
    };
    let (h, _h_rx) = start("h", strict());
    let (j, _j_rx) = start("j", strict());
    let (c, mut c_rx) = start("c", lenient());
    for (name, peer) in [("h", &h), ("j", &j), ("c", &c)] {
        until(&format!("{name} in b's mesh"), async || (peer.mesh_peers().await > 0).then_some(())).await;
    }
    until("b meshed with all three", async || (b.mesh_peers().await == 3).then_some(())).await;

    // j sends junk: b rejects each, relays none, and scores j down.
    for i in 0..5 {
        assert!(j.publish(format!("junk {i}").into_bytes()));
    }
    // Once j is graylisted, b drops what it sends unread.
    let score =
        until("j graylisted at b", async || b.score_of(j.peer_id()).await.filter(|s| *s < lite_node_gossip::GRAYLIST))
            .await;
    let rejected = Stats::get(&b.stats().rejected);
    println!("b rejected {rejected} of j's 5 junk messages; j's score at b: {score}");
    assert!((3..=5).contains(&rejected), "{rejected}");
    assert!(b.score_of(h.peer_id()).await.expect("b scores h") >= 0.0, "h is not");

    // h's message crosses b to c; the junk never reached c.
    assert!(h.publish(b"ok 1".to_vec()));
    assert_eq!(next(&mut c_rx, "ok 1 at c").await, b"ok 1");
    assert_eq!(next(&mut b_rx, "ok 1 at b").await, b"ok 1");
    assert_eq!(Stats::get(&c.stats().accepted), 1);
    assert!(c_rx.try_recv().is_err(), "nothing else reached c");

    // The same payload again is one message; the next new one arrives.
    assert!(h.publish(b"ok 1".to_vec()));
    assert!(h.publish(b"ok 2".to_vec()));
    assert_eq!(next(&mut c_rx, "ok 2 at c").await, b"ok 2");
}

#[tokio::test]
async fn a_peer_keeps_its_identity_and_bad_settings_name_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, _rx) = mpsc::channel(1);
    let first = Gossip::start(settings(dir.path(), "v", vec![]), lenient(), tx.clone()).unwrap().peer_id();
    let again = Gossip::start(settings(dir.path(), "v", vec![]), lenient(), tx.clone()).unwrap().peer_id();
    assert_eq!(first, again, "the identity file is kept");

    std::fs::write(dir.path().join("v/p2p-identity.key"), b"not a key").unwrap();
    let err = Gossip::start(settings(dir.path(), "v", vec![]), lenient(), tx.clone()).unwrap_err();
    assert!(matches!(err, Error::Identity { .. }), "{err}");
    assert!(err.to_string().contains("p2p-identity.key") && err.to_string().contains("move it away"), "{err}");

    let no_peer = vec!["/ip4/127.0.0.1/tcp/4001".parse().unwrap()];
    let err = Gossip::start(settings(dir.path(), "w", no_peer), lenient(), tx).unwrap_err();
    assert!(err.to_string().contains("/p2p/<peer id>"), "{err}");
}

/// A check that cannot decide alone holds the message: nothing is relayed
/// until the receiver settles its ticket — accepted, it crosses; rejected,
/// it stops there and counts against its sender; a ticket dropped unsettled
/// ignores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_message_is_relayed_only_once_its_ticket_accepts_it() {
    let dir = tempfile::tempdir().unwrap();
    let (b_tx, mut b_rx) = mpsc::channel(64);
    let hold: Check = Arc::new(|_: &[u8]| Verdict::Hold);
    let b = Gossip::start(settings(dir.path(), "b", vec![]), hold, b_tx).unwrap();
    let b_addr = tokio::time::timeout(Duration::from_secs(10), b.listening()).await.expect("b listens");
    let start = |name: &str| {
        let (tx, rx) = mpsc::channel(64);
        (Gossip::start(settings(dir.path(), name, b_addr.clone()), lenient(), tx).unwrap(), rx)
    };
    let (h, _h_rx) = start("h");
    let (c, mut c_rx) = start("c");
    for (name, peer) in [("h", &h), ("c", &c)] {
        until(&format!("{name} in b's mesh"), async || (peer.mesh_peers().await > 0).then_some(())).await;
    }
    until("b meshed with both", async || (b.mesh_peers().await == 2).then_some(())).await;

    // Held at b: handed over with a ticket, not relayed while it waits.
    assert!(h.publish(b"first".to_vec()));
    let first = next_delivery(&mut b_rx, "first at b").await;
    assert_eq!(first.data, b"first");
    let ticket = first.ticket.expect("a held message comes with its ticket");
    assert_eq!(Stats::get(&b.stats().held), 1);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), c_rx.recv()).await.is_err(),
        "nothing crosses b before its verdict"
    );
    ticket.settle(&Verdict::Accept);
    assert_eq!(next(&mut c_rx, "first at c").await, b"first");
    assert_eq!(Stats::get(&b.stats().accepted), 1);

    // Rejected on its ticket: never relayed, held against h.
    assert!(h.publish(b"second".to_vec()));
    let second = next_delivery(&mut b_rx, "second at b").await;
    second.ticket.expect("held").settle(&Verdict::Reject("not the slot's signer".into()));
    until("b scores h down", async || b.score_of(h.peer_id()).await.filter(|s| *s < 0.0)).await;
    assert_eq!(Stats::get(&b.stats().rejected), 1);

    // Dropped unsettled: ignored. The next accepted one is the next to cross.
    assert!(h.publish(b"third".to_vec()));
    drop(next_delivery(&mut b_rx, "third at b").await);
    until("the dropped ticket ignores it", async || (Stats::get(&b.stats().ignored) == 1).then_some(())).await;
    assert!(h.publish(b"fourth".to_vec()));
    next_delivery(&mut b_rx, "fourth at b").await.ticket.expect("held").settle(&Verdict::Accept);
    assert_eq!(next(&mut c_rx, "fourth at c").await, b"fourth", "second and third never crossed");
}

/// A market's many operators: twenty collectors publish to one validator.
/// None of them joins its mesh (a publisher does not subscribe), so its
/// mesh stays empty and none is pruned; each keeps reaching the validator
/// through gossipsub's heartbeats (the first at ~5.7 s, when a mesh over
/// its bounds is cut and a crowded address was penalized), every message
/// of every collector arrives, and none of them is scored down for sharing
/// an address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_publishers_each_reach_one_validator_and_every_message_arrives() {
    const PUBLISHERS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let (v_tx, mut v_rx) = mpsc::channel(4096);
    let v = Gossip::start(settings(dir.path(), "v", vec![]), strict(), v_tx).unwrap();
    let v_addr = tokio::time::timeout(Duration::from_secs(10), v.listening()).await.expect("v listens");
    assert_eq!(v.peers().await.connected, 0, "nobody yet");
    let publishers: Vec<Gossip> = (0..PUBLISHERS)
        .map(|i| Gossip::publisher(settings(dir.path(), &format!("p{i}"), v_addr.clone())).unwrap())
        .collect();
    until("every publisher reaches the validator", async || {
        for p in &publishers {
            if p.peers().await.subscribed == 0 {
                return None;
            }
        }
        Some(())
    })
    .await;
    // Through several heartbeats (the first comes at ~5.7 s), every
    // publisher stays reachable and the validator keeps hearing all of them.
    let held = tokio::time::Instant::now();
    while held.elapsed() < Duration::from_secs(8) {
        for (i, p) in publishers.iter().enumerate() {
            assert_eq!(p.peers().await.subscribed, 1, "publisher {i} lost the validator after {:?}", held.elapsed());
        }
        let seen = v.peers().await;
        assert_eq!((seen.connected, seen.mesh), (PUBLISHERS, 0), "the validator's peers after {:?}", held.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (i, p) in publishers.iter().enumerate() {
        for k in 0..5 {
            assert!(p.publish(format!("ok {i} {k}").into_bytes()), "publisher {i}'s outbox");
        }
    }
    let mut got = std::collections::HashSet::new();
    while got.len() < PUBLISHERS * 5 {
        got.insert(next(&mut v_rx, "a publisher's message").await);
    }
    for (i, p) in publishers.iter().enumerate() {
        assert_eq!(Stats::get(&p.stats().published), 5, "publisher {i}");
        assert_eq!(Stats::get(&p.stats().unpublished), 0, "publisher {i}");
        assert!(v.score_of(p.peer_id()).await.unwrap_or(0.0) >= 0.0, "publisher {i} is not scored down");
    }
}

/// What a collector answers for delivery rests on `publish_confirmed`: a
/// message no validator can take (none connected yet, or the last one
/// gone) is refused, not reported published; one a validator takes is
/// confirmed and arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_nobody_can_take_is_refused_and_one_a_validator_takes_is_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let (v_tx, mut v_rx) = mpsc::channel(64);
    let v = Gossip::start(settings(dir.path(), "v", vec![]), strict(), v_tx).unwrap();
    let v_addr = tokio::time::timeout(Duration::from_secs(10), v.listening()).await.expect("v listens");
    let alone = Gossip::publisher(settings(dir.path(), "alone", vec![])).unwrap();
    let refused = alone.publish_confirmed(b"ok nobody".to_vec()).await;
    assert!(refused.is_err(), "published with no peer: {refused:?}");
    assert_eq!(Stats::get(&alone.stats().published), 0);
    let p = Gossip::publisher(settings(dir.path(), "p", v_addr)).unwrap();
    until("the publisher reaches the validator", async || (p.peers().await.subscribed == 1).then_some(())).await;
    p.publish_confirmed(b"ok taken".to_vec()).await.expect("a validator takes it");
    assert_eq!(next(&mut v_rx, "the confirmed message").await, b"ok taken");
    drop(v);
    until("the validator gone", async || (p.peers().await.subscribed == 0).then_some(())).await;
    let gone = p.publish_confirmed(b"ok too late".to_vec()).await;
    assert!(gone.is_err(), "published after the last validator left: {gone:?}");
}

/// A relay in front of a peer: forwards both ways until `paused`, then no
/// longer reads what the far side sends (so it backs up there, as a peer
/// that stops reading would make it). Returns the port it listens on.
async fn pausing_relay(to_port: u16, paused: Arc<std::sync::atomic::AtomicBool>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((near, _)) = listener.accept().await {
            let Ok(far) = tokio::net::TcpStream::connect(("127.0.0.1", to_port)).await else { continue };
            let (mut near_r, mut near_w) = near.into_split();
            let (mut far_r, mut far_w) = far.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut near_r, &mut far_w).await;
            });
            let paused = paused.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    while paused.load(std::sync::atomic::Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    match far_r.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if near_w.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    port
}

/// A validator `v`, and a sink `s` subscribed to it through a relay that
/// stops passing `v`'s bytes once `paused` is set; with what each delivers,
/// and where `v` listens.
async fn sink_behind_a_relay(
    dir: &std::path::Path,
) -> (
    Gossip,
    mpsc::Receiver<Delivery>,
    Vec<libp2p::Multiaddr>,
    Gossip,
    mpsc::Receiver<Delivery>,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let (v_tx, v_rx) = mpsc::channel(4096);
    let v = Gossip::start(settings(dir, "v", vec![]), lenient(), v_tx).unwrap();
    let v_addr = tokio::time::timeout(Duration::from_secs(10), v.listening()).await.expect("v listens");
    let v_port = v_addr[0]
        .iter()
        .find_map(|p| match p {
            libp2p::multiaddr::Protocol::Tcp(port) => Some(port),
            _ => None,
        })
        .unwrap();
    let paused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let relay = pausing_relay(v_port, paused.clone()).await;
    let through: libp2p::Multiaddr = format!("/ip4/127.0.0.1/tcp/{relay}/p2p/{}", v.peer_id()).parse().unwrap();
    let (s_tx, s_rx) = mpsc::channel(4096);
    let s = Gossip::start(settings(dir, "s", vec![through]), lenient(), s_tx).unwrap();
    (v, v_rx, v_addr, s, s_rx, paused)
}

/// A peer that subscribes and then takes nothing (the relay in front of it
/// stops reading) holds a validator's connection queue for seconds, not for
/// good: once what is queued for it fails for `SLOW_HEARTBEATS` heartbeats in
/// a row it is disconnected, and the validator still hears its other peers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_reading_is_disconnected_and_the_others_are_still_heard() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let (v, mut v_rx, v_addr, s, mut s_rx, paused) = sink_behind_a_relay(dir.path()).await;
    let p = Gossip::publisher(settings(dir.path(), "p", v_addr.clone())).unwrap();
    until("the sink in the validator's mesh and the publisher connected", async || {
        let seen = v.peers().await;
        (seen.mesh == 1 && seen.connected == 2 && p.peers().await.subscribed == 1).then_some(())
    })
    .await;
    assert!(v.publish(b"ok while it reads".to_vec()));
    assert_eq!(next(&mut s_rx, "what the validator publishes").await, b"ok while it reads");
    // It stops reading; the validator goes on publishing (its epochs' relays).
    paused.store(true, Ordering::Relaxed);
    let padding = "x".repeat(2048);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut sent = 0u64;
    while Stats::get(&v.stats().slow_disconnected) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "not disconnected after {sent} messages");
        for _ in 0..200 {
            if v.publish(format!("ok {sent} {padding}").into_bytes()) {
                sent += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(Stats::get(&v.stats().slow_disconnected), 1, "only the one that stopped reading");
    // The publisher, which reads what it is sent, is still heard.
    assert!(p.publish(b"ok from the publisher".to_vec()));
    assert_eq!(next(&mut v_rx, "the publisher's message").await, b"ok from the publisher");
    drop(s);
}

/// Issue 53, finding 9, as a market sends: a peer that subscribes and stops
/// reading while a validator relays in epoch bursts is disconnected too. Its
/// queue fails only during each burst — never `SLOW_HEARTBEATS` in a row —
/// and a message queued behind a connection that takes nothing never
/// expires, so counted only in a row it held a full queue (~15 MB) for good
/// (the devnet's hostile drill: 0 such peers disconnected over 20 epochs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_reading_is_disconnected_when_messages_come_in_bursts() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let (v, _v_rx, _, s, _s_rx, paused) = sink_behind_a_relay(dir.path()).await;
    until("the sink in the validator's mesh", async || (v.peers().await.mesh == 1).then_some(())).await;
    paused.store(true, Ordering::Relaxed);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut bursts = 0;
    while Stats::get(&v.stats().slow_disconnected) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "not disconnected after {bursts} bursts");
        // An epoch's burst: more than one connection queue holds.
        let mut sent = 0u64;
        while sent < 25_000 {
            if v.publish(format!("burst {bursts} message {sent}").into_bytes()) {
                sent += 1;
            } else {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        bursts += 1;
        // The quiet between epochs: longer than a run of heartbeats.
        let quiet = tokio::time::Instant::now() + Duration::from_secs(4);
        while Stats::get(&v.stats().slow_disconnected) == 0 && tokio::time::Instant::now() < quiet {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(bursts >= 2, "disconnected in the first burst: counted in a row, not by bursts");
    assert_eq!(Stats::get(&v.stats().slow_disconnected), 1);
    drop(s);
}
