//! Submissions through the gossip mesh into three validators (printed, not
//! asserted): three validators in this process, each with its own real
//! redis-server, gossip peer (libp2p on loopback, noise, yamux), gateway
//! (every message checked — form, EIP-712 signature, project — before it is
//! relayed or queued) and dequeuer (every check on); a collector's
//! publish-only peer meshed with all three.
//!
//! - **Latency**: one submission at a time, from the collector's publish to
//!   its presence in every validator's `submissionQueue` (dequeuers off),
//!   p50 / p99 / max (goal p99 < 50 ms);
//! - **Throughput**: a burst published as fast as the collector's outbox
//!   takes it, until every validator has a verdict for each (dequeuers on,
//!   2 workers each): submissions per second into three validators' verdicts
//!   on this machine (goal ≥ 3,000/s), and the bytes a submission takes;
//!   six bursts, three of submissions carrying their snapshot bytes (~1 KB)
//!   and three without, in the order without, with, with, without, without,
//!   with: the medians of each, and the one against the other (goal: with
//!   bytes ≥ 90 % of the rate without).
//!
//! Each burst also prints the CPU it took per submission (this process,
//! where the collector and the three validators run, and the three
//! redis-servers): the cost of the bytes, apart from how fast the machine
//! happened to be.
//!
//!     cargo bench -p lite-node-validator --bench mesh
//!     cargo bench -p lite-node-validator --bench mesh -- --only with   # or without: three bursts of one kind (for perf)
//!
//! Without `--bench` (as CI runs it), tiny sizes: it only proves it runs.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use lite_node_protocol::eip712::{Request, Signer};
use lite_node_testkit::RedisServer;
use lite_node_validator::{
    Market,
    dequeuer::{Dequeuer, DequeuerSettings},
    gateway::Gateway,
    gossip::{self, Gossip},
    monitor::Monitor,
};
use redis::AsyncCommands;

mod support;
use support::{CHAIN_ID, Registry, key, scope, signed};

/// A snapshot of about 1 KB, canonical JSON, one of three a project.
fn snapshot(project: u64, variant: u64) -> Vec<u8> {
    let trades: Vec<String> = (0..6)
        .map(|t| {
            format!(
                r#"{{"amount0":"{}","amount1":"-{}","logIndex":{t},"txHash":"0x{:064x}"}}"#,
                project * 1_000 + t,
                variant * 7 + t,
                project * 100 + t
            )
        })
        .collect();
    format!(r#"{{"pool":"0x{project:040x}","trades":[{}],"variant":{variant}}}"#, trades.join(",")).into_bytes()
}

/// `slots × projects` signed submissions of `epoch_id` as gossip carries
/// them; with `bytes`, each carries its snapshot (about 1 KB).
fn burst(epoch_id: u64, slots: u64, projects: u64, first_project: u64, bytes: bool) -> Vec<Vec<u8>> {
    let signers: Vec<Signer> =
        (1..=slots).map(|s| Signer::new(&key(s), CHAIN_ID, scope().protocol_state).unwrap()).collect();
    let mut out = Vec::new();
    for p in first_project..first_project + projects {
        let project_id = format!("baseSnapshot:project{p:06}:bench");
        for (i, signer) in signers.iter().enumerate() {
            let slot_id = i as u64 + 1;
            let body = snapshot(p, slot_id % 3);
            let cid = if bytes {
                lite_node_protocol::cid::cid(&body)
            } else {
                lite_node_protocol::cid::cid(format!("{p} {}", slot_id % 3).as_bytes())
            };
            let request =
                Request { slot_id, deadline: 200, snapshot_cid: cid, epoch_id, project_id: project_id.clone() };
            let mut s = signed(signer, &request);
            if bytes {
                s.snapshot = Some(body);
            }
            out.push(prost::Message::encode_to_vec(&lite_node_protocol::submission::gossip_form(&s).unwrap()));
        }
    }
    out
}

struct Validator {
    redis: RedisServer,
    client: redis::Client,
    conn: redis::aio::ConnectionManager,
    market: Arc<Market>,
    peer: Gossip,
    _dir: tempfile::TempDir,
}

/// A validator whose gossip intake checks signers against `slots` slots.
async fn validator(bootstrap: Vec<gossip::Multiaddr>, slots: u64) -> Validator {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = lite_node_validator::connect(&client).await.unwrap();
    let mut market = Market::new(scope(), CHAIN_ID, "bench");
    market.window_blocks = 10;
    let market = Arc::new(market);
    let monitor = Monitor::new(market.clone(), conn.clone());
    for e in 1..=7 {
        monitor.released(e, 100, 1, 1).await.unwrap();
    }
    monitor.head(101).await.unwrap();
    let book = lite_node_validator::signers::SignerBook::new(Arc::new(Registry::of(slots)));
    let gateway = Gateway::new(conn.clone(), market.clone()).with_signers(Arc::new(book));
    let (deliver, mut delivered) = tokio::sync::mpsc::channel::<gossip::Delivery>(4096);
    let judge = gateway.clone();
    let dir = tempfile::tempdir().unwrap();
    let peer = Gossip::start(
        gossip::Settings {
            listen: "/ip4/127.0.0.1/tcp/0".parse().unwrap(),
            bootstrap,
            identity: dir.path().join("p2p-identity.key"),
            topic: gossip::SUBMISSIONS_TOPIC.into(),
        },
        Arc::new(move |payload: &[u8]| judge.judge_gossip(payload)),
        deliver,
    )
    .unwrap();
    tokio::spawn(async move { gateway.take_gossip_from(&mut delivered).await });
    Validator { redis, client, conn, market, peer, _dir: dir }
}

async fn address_of(peer: &Gossip) -> gossip::Multiaddr {
    loop {
        if let Some(a) = peer.listening().await.into_iter().next() {
            return format!("{a}/p2p/{}", peer.peer_id()).parse().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn queued(v: &mut Validator) -> u64 {
    v.conn.llen(v.market.keys.submission_queue()).await.unwrap()
}

async fn verdicts(v: &mut Validator, epoch_id: u64) -> u64 {
    let a: u64 = v.conn.scard(v.market.keys.epoch_processed_set(epoch_id)).await.unwrap();
    let r: u64 = v.conn.hlen(v.market.keys.rejections(epoch_id)).await.unwrap();
    a + r
}

/// CPU used so far by process `pid` (`/proc/{pid}/stat`: user + system).
fn cpu_of(pid: &str) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return Duration::ZERO };
    let Some(close) = stat.rfind(')') else { return Duration::ZERO };
    let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// CPU used so far by this process and the validators' redis-servers.
fn cpu_all(validators: &[Validator]) -> Duration {
    cpu_of("self") + validators.iter().map(|v| cpu_of(&v.redis.pid().to_string())).sum::<Duration>()
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn main() {
    let quick = lite_node_testkit::bench_is_quick();
    let (latency_n, slots, projects) = if quick { (20, 4, 5) } else { (500, 40, 250) };
    // `-- --only with|without`: three bursts of that kind alone.
    let args: Vec<String> = std::env::args().collect();
    let only = args.iter().position(|a| a == "--only").map(|i| match args.get(i + 1).map(String::as_str) {
        Some("with") => true,
        Some("without") => false,
        other => panic!("--only takes `with` or `without`, not {other:?}"),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let mut validators = vec![validator(Vec::new(), slots).await];
        let first = address_of(&validators[0].peer).await;
        validators.push(validator(vec![first.clone()], slots).await);
        let second = address_of(&validators[1].peer).await;
        validators.push(validator(vec![first.clone(), second.clone()], slots).await);
        let third = address_of(&validators[2].peer).await;
        let dir = tempfile::tempdir().unwrap();
        let collector = Gossip::publisher(gossip::Settings {
            listen: "/ip4/127.0.0.1/tcp/0".parse().unwrap(),
            bootstrap: vec![first, second, third],
            identity: dir.path().join("p2p-identity.key"),
            topic: gossip::SUBMISSIONS_TOPIC.into(),
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while collector.peers().await.subscribed < 3 {
            assert!(Instant::now() < deadline, "the collector did not reach the three validators");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // Latency: one at a time, into every validator's queue.
        let items = burst(1, 1, latency_n, 0, false);
        let mut latencies = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let start = Instant::now();
            assert!(collector.publish(item));
            for v in validators.iter_mut() {
                while queued(v).await < i as u64 + 1 {
                    tokio::task::yield_now().await;
                }
            }
            latencies.push(start.elapsed().as_secs_f64() * 1e3);
        }
        latencies.sort_by(f64::total_cmp);
        println!(
            "collector publish → in all 3 validators' queues: {} submissions, p50 {:.2} ms, p99 {:.2} ms, max {:.2} \
             ms (goal p99 < 50 ms)",
            latencies.len(),
            quantile(&latencies, 0.5),
            quantile(&latencies, 0.99),
            quantile(&latencies, 1.0)
        );

        // Throughput: dequeuers on (what the latency phase queued is judged
        // first, epoch 1), then a burst of epoch 2.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        for v in &validators {
            let dequeuer = Dequeuer::new(v.market.clone(), Arc::new(Registry::of(slots)), v.conn.clone());
            let mut rx = stop_rx.clone();
            let settings = DequeuerSettings { workers: 2, ..DequeuerSettings::default() };
            tokio::spawn(dequeuer.run(v.client.clone(), settings, async move {
                let _ = rx.wait_for(|s| *s).await;
            }));
        }
        for v in validators.iter_mut() {
            while verdicts(v, 1).await < latency_n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        // Six bursts, three without the snapshot bytes and three with them
        // (the market requires them; goal: within 10 % of the rate
        // without), in the order without, with, with, without, without, with:
        // a rate that drifts over the run (the machine, the validators' state)
        // weighs on both alike.
        let (mut without, mut with) = (Vec::new(), Vec::new());
        let (mut cpu_without, mut cpu_with) = (Vec::new(), Vec::new());
        let order = match only {
            None => [false, true, true, false, false, true],
            Some(kind) => [kind; 6],
        };
        for (n, with_bytes) in order.into_iter().enumerate().take(if only.is_some() { 3 } else { 6 }) {
            let (epoch, first) = (2 + n as u64, 1_000 * (n as u64 + 1));
            let what = if with_bytes { "with bytes (~1 KB each)" } else { "without bytes" };
            let signing = Instant::now();
            let items = burst(epoch, slots, projects, first, with_bytes);
            let total = items.len() as u64;
            let bytes: usize = items.iter().map(Vec::len).sum();
            println!(
                "signed {total} submissions in {:.1} s (setup); {} bytes each on average",
                signing.elapsed().as_secs_f64(),
                bytes / items.len()
            );
            let sent_before: Vec<u64> = validators.iter().map(|v| gossip::Stats::get(&v.peer.stats().accepted)).collect();
            let full_before: Vec<u64> = validators.iter().map(|v| gossip::Stats::get(&v.peer.stats().full)).collect();
            let started = Instant::now();
            let cpu_before = cpu_all(&validators);
            let mut dropped = 0u64;
            for item in items {
                // The outbox full: wait a little (spinning would take the CPU
                // the validators need).
                while !collector.publish(item.clone()) {
                    dropped += 1;
                    tokio::time::sleep(Duration::from_micros(500)).await;
                }
            }
            let published = started.elapsed();
            // A message a validator's intake had no room for is lost to it
            // (gossip does not send it again, and its id is seen): counted, and
            // not waited for.
            let lost = |v: &Validator, i: usize| gossip::Stats::get(&v.peer.stats().full) - full_before[i];
            // When every validator's gossip check had taken the burst (its
            // intake, signature recovery included), apart from its verdicts.
            let deadline = Instant::now() + Duration::from_secs(600);
            while validators
                .iter()
                .enumerate()
                .any(|(i, v)| gossip::Stats::get(&v.peer.stats().accepted) - sent_before[i] + lost(v, i) < total)
            {
                assert!(Instant::now() < deadline, "not every submission reached every validator's check");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let checked = started.elapsed();
            for (i, v) in validators.iter_mut().enumerate() {
                while verdicts(v, epoch).await < total - lost(v, i) {
                    assert!(Instant::now() < deadline, "not every submission reached a verdict");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            let lost: Vec<u64> = validators.iter().enumerate().map(|(i, v)| lost(v, i)).collect();
            let took = started.elapsed();
            let cpu = cpu_all(&validators).saturating_sub(cpu_before);
            let received: Vec<u64> = validators
                .iter()
                .zip(&sent_before)
                .map(|(v, before)| gossip::Stats::get(&v.peer.stats().accepted) - before)
                .collect();
            println!(
                "{what}: through the mesh into 3 validators' verdicts: {total} submissions in {:.2} s = {:.0} submissions/s \
                 (published in {:.2} s, {dropped} outbox-full retries, checked by every validator's gossip intake in \
                 {:.2} s; every check on, 2 dequeuer workers each; goal ≥ 3,000/s)",
                took.as_secs_f64(),
                total as f64 / took.as_secs_f64(),
                published.as_secs_f64(),
                checked.as_secs_f64()
            );
            println!("  messages each validator's check accepted (gossip drops duplicates first): {received:?} of {total}");
            println!("  lost to a full intake (no room to hand over, so ignored): {lost:?}");
            let per = cpu.as_secs_f64() * 1e6 / total as f64;
            println!(
                "  CPU: {per:.0} µs a submission (this process and the 3 redis-servers: {:.2} s in {:.2} s, {:.0} % \
                 of 2 cores)",
                cpu.as_secs_f64(),
                took.as_secs_f64(),
                50.0 * cpu.as_secs_f64() / took.as_secs_f64()
            );
            let rate = total as f64 / took.as_secs_f64();
            if with_bytes {
                with.push(rate);
                cpu_with.push(per);
            } else {
                without.push(rate);
                cpu_without.push(per);
            }
        }
        if only.is_some() {
            let _ = stop_tx.send(true);
            return;
        }
        let median = |rates: &mut Vec<f64>| {
            rates.sort_by(f64::total_cmp);
            rates[rates.len() / 2]
        };
        let (with, without) = (median(&mut with), median(&mut without));
        println!(
            "  with bytes: {with:.0} submissions/s, {:.0} % of the rate without ({without:.0}/s; the medians of three \
             bursts each; goal ≥ 90 %)",
            100.0 * with / without
        );
        let (cpu_with, cpu_without) = (median(&mut cpu_with), median(&mut cpu_without));
        println!(
            "  CPU a submission: {cpu_with:.0} µs with bytes, {cpu_without:.0} µs without ({:+.1} %; the medians of \
             three bursts each)",
            100.0 * (cpu_with / cpu_without - 1.0)
        );
        let _ = stop_tx.send(true);
    });
}
