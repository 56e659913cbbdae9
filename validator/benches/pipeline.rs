//! Validator benchmarks against a real redis-server (printed, not asserted):
//!
//! - dequeuer throughput with every check on (form, window, deadline,
//!   signer — recovered once, by the gateway that queued it, and carried —
//!   selection, duplicate/equivocation, the commit script), 4 workers on
//!   their own connections; and again with
//!   as much junk as honest traffic mixed in (submissions signed by the wrong
//!   key for registered slots, and for slot ids past the registry), the
//!   honest throughput printed;
//! - finalization latency: an epoch of 1,000 projects × 10 votes, from the
//!   window's close (the event monitor's close) to `finalized:{epochId}`,
//!   with 2 finalizer workers and the aggregator running;
//! - the gateway under a reading storm: 50,000 rejection records of one
//!   epoch (each at the field caps) read page by page by 10 monitor-API
//!   clients at once, while submissions go through the gateway over gRPC:
//!   the gateway's latency (p50, p99, max) and whether a worker's heartbeat
//!   ever lapsed.
//!
//!     cargo bench -p lite-node-validator --bench pipeline
//!
//! Without cargo bench's `--bench` flag (`cargo test --bench '*'`, as CI runs
//! it), the same phases run once on tiny sizes, so a bench that stops
//! compiling or never finishes is caught; its numbers mean nothing then.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use lite_node_protocol::{
    eip712::{Request, Signer},
    proto,
};
use lite_node_testkit::RedisServer;
use lite_node_validator::{
    Market,
    aggregator::Aggregator,
    dequeuer::{Dequeuer, DequeuerSettings},
    finalizer::Finalizer,
    gateway,
    monitor::Monitor,
};
use redis::AsyncCommands;

mod support;
use support::{CHAIN_ID, Registry, key, scope, signed};

/// `n` submissions of one epoch that are not their slot's: signed by the
/// wrong key for registered slots (1..=64), or naming slots past the registry.
fn junk(epoch_id: u64, n: u64, deadline: u64) -> Vec<String> {
    let cid = lite_node_protocol::cid::cid(b"junk");
    (0..n)
        .map(|i| {
            let slot_id = if i % 2 == 0 { 1 + i % 64 } else { 1_000_000 + i };
            let signer = Signer::new(&key(10_000 + i), CHAIN_ID, scope().protocol_state).unwrap();
            let request = Request {
                slot_id,
                deadline,
                snapshot_cid: cid.clone(),
                epoch_id,
                project_id: format!("baseSnapshot:junk{i}:bench"),
            };
            queued(&signer, &request)
        })
        .collect()
}

/// `request` signed by `signer`, as the gateway queues it: with the signer
/// it recovered, which the dequeuer does not recover again.
fn queued(signer: &Signer, request: &Request) -> String {
    gateway::encode(&signed(signer, request), 0, "bench", 101, Some(signer.address()))
}

/// `slots × projects` signed submissions of one epoch, as the gateway queues them.
fn burst(epoch_id: u64, slots: u64, projects: u64, deadline: u64) -> Vec<String> {
    let signers: Vec<Signer> =
        (1..=slots).map(|s| Signer::new(&key(s), CHAIN_ID, scope().protocol_state).unwrap()).collect();
    let cids: Vec<String> = (0..3).map(|i| lite_node_protocol::cid::cid(format!("snapshot {i}").as_bytes())).collect();
    let mut out = Vec::with_capacity((slots * projects) as usize);
    for p in 0..projects {
        let project_id = format!("baseSnapshot:project{p:05}:bench");
        for (i, signer) in signers.iter().enumerate() {
            let slot_id = i as u64 + 1;
            let cid = cids[(slot_id % 3) as usize].clone();
            let request = Request { slot_id, deadline, snapshot_cid: cid, epoch_id, project_id: project_id.clone() };
            out.push(queued(signer, &request));
        }
    }
    out
}

async fn queue_all(conn: &mut redis::aio::ConnectionManager, market: &Market, items: &[String]) {
    for chunk in items.chunks(1000) {
        let _: () = conn.lpush(market.keys.submission_queue(), chunk).await.unwrap();
    }
}

async fn verdicts(conn: &mut redis::aio::ConnectionManager, market: &Market, epoch_id: u64) -> u64 {
    let a: u64 = conn.scard(market.keys.epoch_processed_set(epoch_id)).await.unwrap();
    let r: u64 = conn.hlen(market.keys.rejections(epoch_id)).await.unwrap();
    a + r
}

fn main() {
    // Sizes: (slots × projects) for the dequeuer, projects × 10 votes to finalize.
    let quick = lite_node_testkit::bench_is_quick();
    let ((slots, projects), finalized) = if quick { ((4, 10), 20) } else { ((40, 1_000), 1_000) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    runtime.block_on(async {
        let mut conn = lite_node_validator::connect(&client).await.unwrap();
        let mut market = Market::new(scope(), CHAIN_ID, "bench");
        market.window_blocks = 10;
        let market = Arc::new(market);
        let registry = Registry::of(64);
        let monitor = Monitor::new(market.clone(), conn.clone());
        monitor.released(1, 100, 1, 1).await.unwrap();
        monitor.released(2, 105, 1, 1).await.unwrap();
        monitor.released(3, 106, 1, 1).await.unwrap();
        monitor.head(101).await.unwrap();

        // Dequeuer throughput: 40 slots × 1,000 projects.
        let signing = Instant::now();
        let items = burst(1, slots, projects, 200);
        println!("signed {} submissions in {:.1} s (setup)", items.len(), signing.elapsed().as_secs_f64());
        // What bounds it: EIP-712 signature recovery alone, one core.
        let domain = lite_node_protocol::eip712::domain(CHAIN_ID, scope().protocol_state);
        let sample: Vec<_> =
            items.iter().take(if quick { 10 } else { 5_000 }).map(|p| gateway::decode(p).unwrap().submission).collect();
        let t = Instant::now();
        for s in &sample {
            let request = Request::from(s.request.as_ref().unwrap());
            lite_node_protocol::eip712::recover(&domain, &request, &s.signature).unwrap();
        }
        let per = t.elapsed().as_secs_f64() / sample.len() as f64;
        println!("signature recovery alone: {:.0} µs each = {:.0}/s on one core", per * 1e6, 1.0 / per);
        queue_all(&mut conn, &market, &items).await;
        let dequeuer = Dequeuer::new(market.clone(), Arc::new(registry), conn.clone());
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let settings = DequeuerSettings { workers: 4, ..DequeuerSettings::default() };
        let redis_cpu_before = redis_cpu(&mut conn).await;
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await.unwrap();
        let started = Instant::now();
        let running = tokio::spawn(dequeuer.run(client.clone(), settings, stopped()));
        let total = items.len() as u64;
        while verdicts(&mut conn, &market, 1).await < total {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let took = started.elapsed();
        let accepted: u64 = conn.scard(market.keys.epoch_processed_set(1)).await.unwrap();
        let honest_alone = total as f64 / took.as_secs_f64();
        println!(
            "dequeuer: {total} submissions ({accepted} accepted) in {:.2} s = {honest_alone:.0} submissions/s \
             (every check on; 4 workers; goal ≥ 25,000/s)",
            took.as_secs_f64(),
        );
        println!("  {}", redis_spent(&mut conn, redis_cpu_before, total).await);

        // The same again, half of it junk, interleaved.
        let honest = burst(3, slots, projects / 2, 200);
        let forged = junk(3, honest.len() as u64, 200);
        let mixed: Vec<String> = honest.iter().zip(&forged).flat_map(|(h, j)| [h.clone(), j.clone()]).collect();
        // Staged, then queued at once: the dequeuer is running.
        let staging = format!("{}:staging", market.keys.submission_queue());
        for chunk in mixed.chunks(1000) {
            let _: () = conn.lpush(&staging, chunk).await.unwrap();
        }
        let redis_cpu_before = redis_cpu(&mut conn).await;
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await.unwrap();
        let started = Instant::now();
        let _: () = conn.rename(&staging, market.keys.submission_queue()).await.unwrap();
        while verdicts(&mut conn, &market, 3).await < mixed.len() as u64 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let took = started.elapsed();
        let accepted: u64 = conn.scard(market.keys.epoch_processed_set(3)).await.unwrap();
        let honest_mixed = honest.len() as f64 / took.as_secs_f64();
        println!(
            "dequeuer with 50 % junk: {} submissions ({accepted} accepted, {} junk rejected) in {:.2} s = \
             {honest_mixed:.0} honest submissions/s, {:.0} % of the honest rate alone (goal ≥ 50 %)",
            mixed.len(),
            forged.len(),
            took.as_secs_f64(),
            100.0 * honest_mixed / honest_alone
        );
        println!("  {}", redis_spent(&mut conn, redis_cpu_before, mixed.len() as u64).await);

        // Finalization: 1,000 projects × 10 votes.
        let items = burst(2, 10, finalized, 200);
        queue_all(&mut conn, &market, &items).await;
        while verdicts(&mut conn, &market, 2).await < items.len() as u64 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let _ = stop_tx.send(true);
        let _ = running.await;
        let finalizer = Finalizer::new(market.clone(), conn.clone(), lite_node_validator::finalizer::PART_SIZE);
        let aggregator = Aggregator::new(market.clone(), conn.clone());
        let (stop2_tx, stop2_rx) = tokio::sync::watch::channel(false);
        let stop2 = move || {
            let mut rx = stop2_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let f = tokio::spawn(finalizer.run(client.clone(), 2, stop2()));
        let a = tokio::spawn(aggregator.run(client.clone(), stop2()));
        // Epoch 1 (40,000 votes) closes first and is finalized alone; then
        // epoch 2 is measured alone.
        let mut latencies = Vec::new();
        for (epoch, released) in [(1u64, 100u64), (2, 105)] {
            let started = Instant::now();
            // The first head past the window (`Market::window_closes`), as
            // the event monitor's close; not a number kept here by hand.
            monitor.head(market.window_closes(released)).await.unwrap();
            loop {
                let done: bool = conn.exists(market.keys.finalized(epoch)).await.unwrap();
                if done {
                    break;
                }
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            latencies.push((epoch, started.elapsed()));
        }
        let _ = stop2_tx.send(true);
        let _ = (f.await, a.await);
        for (epoch, took) in latencies {
            let batch: String = conn.get(market.keys.finalized(epoch)).await.unwrap();
            let batch: serde_json::Value = serde_json::from_str(&batch).unwrap();
            let projects = batch["projects"].as_array().unwrap().len();
            let votes: u64 = batch["projects"].as_array().unwrap().iter().map(|p| p["votes"].as_u64().unwrap()).sum();
            println!(
                "finalization of epoch {epoch}: {projects} projects, {votes} winning votes, {:.1} ms from the \
                 window's close to finalized:{{epochId}}{}",
                took.as_secs_f64() * 1000.0,
                if epoch == 2 { " (goal < 100 ms for 1,000 projects × 10 votes)" } else { "" }
            );
        }

        reading_storm(&client, &market, &monitor, quick).await;
    });
}

/// CPU seconds redis-server has used (user + system), from `INFO cpu`.
/// redis-server's CPU since `before` per submission, and the commands it
/// went to (from `INFO commandstats`, reset when `before` was read).
async fn redis_spent(conn: &mut redis::aio::ConnectionManager, before: f64, submissions: u64) -> String {
    let spent = redis_cpu(conn).await - before;
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await.unwrap();
    let mut busiest: Vec<(f64, String)> = stats
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let usec: f64 = rest.split(',').find_map(|f| f.strip_prefix("usec="))?.parse().ok()?;
            let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((usec, format!("{name} {:.0} ms in {calls} calls", usec / 1000.0)))
        })
        .collect();
    busiest.sort_by(|a, b| b.0.total_cmp(&a.0));
    let busiest: Vec<String> = busiest.into_iter().take(8).map(|(_, s)| s).collect();
    format!(
        "of which redis-server: {spent:.2} s of CPU ({:.0} µs per submission); busiest (a script's time includes \
         its calls'): {}",
        spent * 1e6 / submissions as f64,
        busiest.join("; ")
    )
}

async fn redis_cpu(conn: &mut redis::aio::ConnectionManager) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await.unwrap();
    info.lines()
        .filter_map(|l| l.strip_prefix("used_cpu_user:").or_else(|| l.strip_prefix("used_cpu_sys:")))
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

/// The gateway's latency while 10 API clients page through 50,000
/// rejections of one epoch (see the module docs).
async fn reading_storm(client: &redis::Client, market: &Arc<Market>, monitor: &Monitor, quick: bool) {
    let (records, sends) = if quick { (500, 20) } else { (50_000, 2_000) };
    let mut conn = lite_node_validator::connect(client).await.unwrap();
    let epoch = 4;
    monitor.released(epoch, 110, 1, 1).await.unwrap();
    // Rejections as the dequeuer keeps them: every field at its cap.
    let record = serde_json::json!({
        "slot_id": 1, "project_id": "p".repeat(256), "snapshot_cid": "c".repeat(100),
        "reason": "wrong_signer", "detail": "d".repeat(300), "at": 0,
    })
    .to_string();
    for chunk in (0..records).collect::<Vec<u64>>().chunks(1_000) {
        let fields: Vec<(String, &str)> = chunk.iter().map(|i| (format!("{i:064x}"), record.as_str())).collect();
        let _: () = conn.hset_multiple(market.keys.rejections(epoch), &fields).await.unwrap();
    }
    // A worker's heartbeat, kept as a dequeuer keeps it, watched for a lapse.
    let beating = lite_node_validator::ReliableQueue::submissions(conn.clone(), &market.keys).owned_by("storm");
    beating.beat().await.unwrap();
    let beat = tokio::spawn(beating.keep_beating());
    let (done_tx, done) = tokio::sync::watch::channel(false);
    let lapses = {
        let (mut conn, key, mut done) = (conn.clone(), market.keys.worker("storm"), done.clone());
        tokio::spawn(async move {
            let mut lapses = 0u32;
            while !*done.borrow() {
                let alive: bool = conn.exists(&key).await.unwrap_or(false);
                lapses += u32::from(!alive);
                let _ = tokio::time::timeout(Duration::from_millis(100), done.changed()).await;
            }
            lapses
        })
    };
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_url = format!("http://{}", api.local_addr().unwrap());
    let (m, c) = (market.clone(), client.clone());
    let mut stop = done.clone();
    let stopped = async move {
        let _ = stop.wait_for(|d| *d).await;
    };
    tokio::spawn(lite_node_validator::api::serve(m, c, api, stopped, None));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let admission = gateway::Admission {
        peer_rate: std::num::NonZeroU32::new(1_000_000).unwrap(),
        peer_burst: std::num::NonZeroU32::new(1_000_000).unwrap(),
        ..gateway::Admission::default()
    };
    let g = gateway::Gateway::with_admission(conn.clone(), market.clone(), None, admission);
    tokio::spawn(gateway::serve(g, listener, std::future::pending()));
    // Ten readers, each paging through the whole epoch again and again.
    let mut readers = Vec::new();
    for _ in 0..10 {
        let (url, done) = (format!("{api_url}/epochs/{epoch}/submissions?limit=1000"), done.clone());
        readers.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut pages = 0u64;
            while !*done.borrow() {
                let mut after = String::new();
                loop {
                    let Ok(r) = http.get(format!("{url}&after={after}")).send().await else { break };
                    let Ok(text) = r.text().await else { break };
                    let Ok(page) = serde_json::from_str::<serde_json::Value>(&text) else { break };
                    pages += 1;
                    match page["next"].as_str() {
                        Some(next) if !*done.borrow() => after = next.to_owned(),
                        _ => break,
                    }
                }
            }
            pages
        }));
    }
    let mut grpc = proto::submission_client::SubmissionClient::connect(endpoint).await.unwrap();
    let signer = Signer::new(&key(1), CHAIN_ID, scope().protocol_state).unwrap();
    let cid = lite_node_protocol::cid::cid(b"storm");
    let mut latencies = Vec::with_capacity(sends);
    let started = Instant::now();
    for i in 0..sends as u64 {
        let request = Request {
            slot_id: 1,
            deadline: 200,
            snapshot_cid: cid.clone(),
            epoch_id: epoch,
            project_id: format!("baseSnapshot:storm{i}:bench"),
        };
        let s = signed(&signer, &request);
        let t = Instant::now();
        let answer = grpc.submit_snapshot(s).await.unwrap().into_inner();
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(answer.message, proto::SUCCESS);
    }
    let took = started.elapsed();
    let _ = done_tx.send(true);
    let mut pages = 0;
    for r in readers {
        pages += r.await.unwrap();
    }
    let lapses = lapses.await.unwrap();
    beat.abort();
    latencies.sort_by(f64::total_cmp);
    let q = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    println!(
        "gateway under a reading storm ({records} rejections of one epoch, 10 API clients reading {pages} pages of up \
         to 1,000 in {:.1} s): {sends} submissions, latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; heartbeat \
         lapses: {lapses}",
        took.as_secs_f64(),
        q(0.5),
        q(0.99),
        q(1.0)
    );
}
