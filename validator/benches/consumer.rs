//! The consumers' side of a validator (issue 54), over a real store and
//! the API on loopback (printed, not asserted):
//!
//! - verified bundle reads (`/data/{epoch}/{project}`) by 64 concurrent
//!   clients, a kept-alive connection each, each bundle checked as `lite-node
//!   read` checks it (bytes → CID, canonical JSON, proof → root): as fast as
//!   they go (reads/s, p50 and p99, the server's and the clients' CPU a
//!   read), then at the goal's 10,000 reads/s (p50, p99 and the worst, each
//!   from when the read was due). The server runs on a runtime of its own
//!   (one worker; `-- --server-workers 2` for two), the clients on another
//!   thread: two programs, each kept on a core of the machine's two
//!   (`-- --no-pin` leaves them to the OS);
//! - one project over a 10,000-epoch range (`/data/range`), each line
//!   checked: snapshots/s, and how much this process grew while it streamed
//!   (the server's memory, flat or not);
//! - a 10,000-project epoch as one bundle (`/data/{epoch}`), each line and
//!   the multiproof checked: time and snapshots/s;
//! - the client's checks alone, on one thread: µs of CPU per snapshot (and
//!   as they cost with the bundle parsed into a JSON value first);
//! - the store's size against the distinct snapshot bytes plus the trees.
//!
//!     cargo bench -p lite-node-validator --bench consumer
//!
//! Without cargo bench's `--bench` flag (`cargo test --bench '*'`, as CI runs
//! it), the same phases run once on tiny sizes; the numbers mean nothing
//! then.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use lite_node_protocol::{
    bundle::{self, Asked, EpochCheck},
    submission::Scope,
};
use lite_node_testkit::RedisServer;
use lite_node_validator::{
    Market,
    api::Data,
    store::{FinalizedEpoch, Store},
};
use serde_json::Value;

fn scope() -> Scope {
    Scope {
        data_market: "0x0000000000000000000000000000000000000d01".parse().unwrap(),
        protocol_state: "0x0000000000000000000000000000000000000501".parse().unwrap(),
    }
}

/// A snapshot of about 1 KB, canonical JSON, distinct per (epoch,
/// project), in the shape of the devnet's base snapshots of a pool (its
/// previous snapshots' CIDs, prices, reserves and volumes), its values as
/// varied as theirs: it compresses about as they do (LZ4: ~0.65 of its size).
fn snapshot(epoch: u64, project: usize) -> Vec<u8> {
    // A number that looks drawn at random, the same for the same inputs.
    let mix = |a: u64, b: u64, c: u64| {
        (a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F) ^ c)
            .wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let p = project as u64;
    let amount = |x: u64| format!("{}.{:018}", x % 10_000, x % 1_000_000_000_000_000_000);
    let at = |x: u64| serde_json::json!({ epoch.to_string(): amount(x) });
    let previous: Vec<Value> = (epoch.saturating_sub(5)..epoch)
        .map(|e| serde_json::json!([e, lite_node_protocol::cid(format!("{e}-{project}").as_bytes())]))
        .collect();
    let v = serde_json::json!({
        "address": format!("0x{:040x}", u128::from(mix(p, 1, 2)) << 32 | u128::from(p)),
        "epoch": {"begin": epoch, "end": epoch},
        "previousSnapshots": previous,
        "timestamps": { epoch.to_string(): 1_796_663_266 + epoch * 12 },
        "token0": format!("0x{:040x}", u128::from(mix(p, 3, 4))),
        "token0MintBurnVolume": amount((mix(epoch, p, 5) % 3).wrapping_mul(mix(epoch, p, 6))),
        "token0Prices": at(mix(epoch, p, 7)),
        "token0Reserves": at(mix(epoch, p, 8)),
        "token0TradeVolume": amount(mix(epoch, p, 9)),
        "token1": format!("0x{:040x}", u128::from(mix(p, 10, 11))),
        "token1MintBurnVolume": amount((mix(epoch, p, 12) % 3).wrapping_mul(mix(epoch, p, 13))),
        "token1Prices": at(mix(epoch, p, 14)),
        "token1Reserves": at(mix(epoch, p, 15)),
        "token1TradeVolume": amount(mix(epoch, p, 16)),
        "totalFee": amount(mix(epoch, p, 17)),
        "totalTrade": amount(mix(epoch, p, 18)),
        "totalTradeMintBurn": amount(mix(epoch, p, 19)),
    });
    lite_node_protocol::canonical_json(&v.to_string()).unwrap()
}

fn project(i: usize) -> String {
    format!("baseSnapshot:0x{i:040x}:bench-UNISWAPV3")
}

/// An epoch of `projects` projects, with its bytes.
fn epoch(epoch_id: u64, projects: usize) -> (FinalizedEpoch, BTreeMap<String, Vec<u8>>) {
    let mut bytes = BTreeMap::new();
    let pairs: Vec<(String, String)> = (0..projects)
        .map(|i| {
            let b = snapshot(epoch_id, i);
            let cid = lite_node_protocol::cid(&b);
            bytes.insert(cid.clone(), b);
            (project(i), cid)
        })
        .collect();
    let tree = lite_node_protocol::merkle::Tree::of(pairs.iter().map(|(p, c)| (p.as_str(), c.as_str()))).unwrap();
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

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn main() {
    let quick = lite_node_testkit::bench_is_quick();
    let (big, range_epochs, per_epoch, reads) = if quick { (200, 50, 4, 640) } else { (10_000, 10_000, 8, 64_000) };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("finalized.redb");
    let store = Arc::new(Store::open(&path).unwrap());

    // The store: one epoch of `big` projects, then `range_epochs` epochs of
    // `per_epoch` projects, a commit per 500 epochs.
    let started = Instant::now();
    // The trees: each epoch's nodes, and its leaves' pairs (project id and
    // CID), which the issue counts as the tree's (docs/protocol.md §12).
    let (mut distinct, mut trees, mut leaves) = (0u64, 0u64, 0u64);
    let pairs_bytes = |e: &FinalizedEpoch| e.pairs.iter().map(|(p, c)| (p.len() + c.len()) as u64).sum::<u64>();
    let (e1, b1) = epoch(1, big);
    leaves += pairs_bytes(&e1);
    distinct += b1.values().map(|b| b.len() as u64).sum::<u64>();
    trees += (2 * big as u64 - 1) * 32;
    store.put_epoch(&e1, &b1).unwrap();
    let ids: Vec<u64> = (2..2 + range_epochs).collect();
    for chunk in ids.chunks(500) {
        let made: Vec<_> = chunk.iter().map(|e| epoch(*e, per_epoch)).collect();
        for (e, b) in &made {
            leaves += pairs_bytes(e);
            distinct += b.values().map(|b| b.len() as u64).sum::<u64>();
            trees += (2 * per_epoch as u64 - 1) * 32;
        }
        store.put_epochs(made.iter().map(|(e, b)| (e, b))).unwrap();
    }
    let meta = std::fs::metadata(&path).unwrap();
    let (file, on_disk) = (meta.len(), std::os::unix::fs::MetadataExt::blocks(&meta) * 512);
    let space = store.space().unwrap();
    println!(
        "store space: {:.1} MiB allocated, {:.1} MiB stored (keys and values), {:.1} MiB the B-trees' own, {:.1} MiB \
         free in allocated pages",
        space.allocated as f64 / 1048576.0,
        space.stored as f64 / 1048576.0,
        space.metadata as f64 / 1048576.0,
        space.fragmented as f64 / 1048576.0
    );
    // The goal: the store on disk ≤ 1.2× the distinct snapshot bytes, plus
    // the trees. What the file takes on disk, not its length: redb grows the
    // file ahead (doubling it while it is small), and the part never
    // written is a hole.
    let all_trees = trees + leaves;
    println!(
        "store: {} epochs ({} projects, then {range_epochs} of {per_epoch}) kept in {:.1} s; on disk {:.1} MiB (the \
         file's length {:.1} MiB) for {:.1} MiB of distinct snapshots + {:.1} MiB of trees ({:.1} nodes, {:.1} pairs): \
         (on disk - trees) / snapshots = {:.2}× (goal ≤ 1.2×)",
        1 + range_epochs,
        big,
        started.elapsed().as_secs_f64(),
        on_disk as f64 / 1048576.0,
        file as f64 / 1048576.0,
        distinct as f64 / 1048576.0,
        all_trees as f64 / 1048576.0,
        trees as f64 / 1048576.0,
        leaves as f64 / 1048576.0,
        on_disk.saturating_sub(all_trees) as f64 / distinct as f64,
    );

    // The server runs on a runtime of its own, as it would in a process of
    // its own, of one worker by default; the clients on this thread's: each
    // program has a core of the machine's two. With two server workers
    // (`-- --server-workers 2`, a validator's on this machine) three busy
    // threads share two cores, and a read waits out the OS's time slices.
    let args: Vec<String> = std::env::args().collect();
    let server_workers: usize = args
        .windows(2)
        .find(|w| w[0] == "--server-workers")
        .and_then(|w| w[1].parse().ok())
        .filter(|w| *w > 0)
        .unwrap_or(1);
    // Each program kept on its core: left to the OS, the two threads that
    // wake each other over loopback were often put on one core (the other
    // idle), and a run's figures halved from one pass to the next.
    let cores = if args.iter().any(|a| a == "--no-pin") {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    };
    let pinned = if cores >= 2 { "pinned to CPU 0 and CPU 1" } else { "not pinned (one core)" };
    println!("the server: a runtime of {server_workers} worker(s); the clients: one thread; {pinned}");
    let redis = RedisServer::start();
    let (sent_base, base) = std::sync::mpsc::channel();
    let serving = store.clone();
    let redis_url = redis.url();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(server_workers)
            .on_thread_start(move || pin_to(SERVER_CPU, cores))
            .thread_name(SERVER_THREADS)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let market = Arc::new(Market::new(scope(), 7001, "validator-1"));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            sent_base.send(format!("http://{}", listener.local_addr().unwrap())).unwrap();
            let client = redis::Client::open(redis_url).unwrap();
            let data = Data { store: serving, rate_per_client: None, retention_days: None };
            lite_node_validator::api::serve_with_store(
                market,
                client,
                listener,
                std::future::pending(),
                None,
                Some(data),
            )
            .await
            .unwrap();
        });
    });
    let base = base.recv().unwrap();
    pin_to(CLIENTS_CPU, cores);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let asked = |epoch_id, project_id| Asked {
            epoch_id,
            project_id,
            protocol_state: scope().protocol_state,
            data_market: scope().data_market,
        };

        // 1. Verified bundle reads by 64 clients, each on a connection of its
        // own (HTTP/1.1, kept alive), each bundle checked as `lite-node read`
        // checks it: as fast as they go (each client's next read sent when
        // its last is checked: the latency is mostly the queue of 64 reads in
        // flight), then at the goal's rate.
        let clients = 64;
        let addr = base.trim_start_matches("http://").to_owned();
        let mut connections = Vec::new();
        for _ in 0..clients {
            connections.push(Reader::connect(&addr).await);
        }
        let (cpu_clients, cpu_server) = (cpu_now(), server_cpu());
        let started = Instant::now();
        let (connections, mut latencies) = read_by_all(connections, big, reads, None).await;
        let took = started.elapsed();
        let (cpu_clients, cpu_server) = (cpu_now() - cpu_clients, server_cpu() - cpu_server);
        latencies.sort();
        let n = latencies.len() as f64;
        println!(
            "bundle reads: {} verified by {clients} clients in {:.2} s: {:.0} reads/s (goal ≥ 10,000), p50 {:.2} ms, \
             p99 {:.2} ms, with 64 reads always in flight; CPU a read: the server {:.1} µs, the clients {:.1} µs",
            latencies.len(),
            took.as_secs_f64(),
            n / took.as_secs_f64(),
            percentile(&latencies, 0.5).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
            cpu_server.as_secs_f64() * 1e6 / n,
            cpu_clients.as_secs_f64() * 1e6 / n,
        );

        // 1b. The same clients at the goal's rate, 10,000 reads/s in all (each
        // client one read every 6.4 ms), each read's latency from when it was
        // due.
        let rate = 10_000.0;
        let every = Duration::from_secs_f64(clients as f64 / rate);
        let started = Instant::now();
        let (_, mut latencies) = read_by_all(connections, big, reads, Some(every)).await;
        let took = started.elapsed();
        latencies.sort();
        println!(
            "bundle reads at {rate:.0}/s: {} verified by {clients} clients in {:.2} s ({:.0}/s), p50 {:.2} ms, p99 \
             {:.2} ms (goal ≤ 5), max {:.2} ms, from when each was due",
            latencies.len(),
            took.as_secs_f64(),
            latencies.len() as f64 / took.as_secs_f64(),
            percentile(&latencies, 0.5).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
            latencies.last().unwrap().as_secs_f64() * 1e3,
        );

        // 2. One project over the whole range, streamed.
        let p = project(3);
        let before = rss_kib();
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(before));
        let sampling = {
            let peak = peak.clone();
            tokio::spawn(async move {
                loop {
                    peak.fetch_max(rss_kib(), std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        };
        // Five times over: one pass is a fifth of a second here, and one
        // stall of either program is a share of it.
        let mut rates = Vec::new();
        let (cpu_client, cpu_serving) = (cpu_now(), server_cpu());
        for _ in 0..5 {
            let started = Instant::now();
            let url = format!("{base}/data/range/{p}?from=2&to={}", 1 + range_epochs);
            let mut r = reqwest::get(url).await.unwrap();
            let (mut pending, mut checked) = (Vec::new(), 0u64);
            while let Some(chunk) = r.chunk().await.unwrap() {
                pending.extend_from_slice(&chunk);
                let mut from = 0;
                while let Some(at) = memchr::memchr(b'\n', &pending[from..]) {
                    // As `lite-node read --from/--to` reads a line.
                    let line = &pending[from..from + at];
                    bundle::check_slice(line, &asked(2 + checked, &p)).unwrap().unwrap();
                    checked += 1;
                    from += at + 1;
                }
                pending.drain(..from);
            }
            assert_eq!(checked, range_epochs);
            rates.push(checked as f64 / started.elapsed().as_secs_f64());
        }
        let (cpu_client, cpu_serving) = (cpu_now() - cpu_client, server_cpu() - cpu_serving);
        sampling.abort();
        let passes: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        rates.sort_by(f64::total_cmp);
        println!(
            "range: {range_epochs} epochs of one project streamed and checked, five times: {} snapshots/s, the median \
             {:.0} (goal ≥ 50,000); this process grew {:.1} MiB while they streamed",
            passes.join(", "),
            rates[2],
            peak.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(before) as f64 / 1024.0,
        );
        let lines = 5.0 * range_epochs as f64;
        println!(
            "  CPU a line: the server {:.1} µs, the client {:.1} µs (reading the stream, parsing and checking it)",
            cpu_serving.as_secs_f64() * 1e6 / lines,
            cpu_client.as_secs_f64() * 1e6 / lines
        );

        // 3. The big epoch as one bundle.
        let started = Instant::now();
        let mut r = reqwest::get(format!("{base}/data/1")).await.unwrap();
        let (mut pending, mut check, mut lines) = (Vec::new(), None::<EpochCheck>, 0u64);
        while let Some(chunk) = r.chunk().await.unwrap() {
            pending.extend_from_slice(&chunk);
            let mut from = 0;
            while let Some(at) = memchr::memchr(b'\n', &pending[from..]) {
                let line: Value = serde_json::from_slice(&pending[from..from + at]).unwrap();
                match check.as_mut() {
                    None => check = Some(EpochCheck::start(&line, &asked(1, "")).unwrap()),
                    Some(c) => {
                        c.line(&line).unwrap();
                        lines += 1;
                    }
                }
                from += at + 1;
            }
            pending.drain(..from);
        }
        let root = check.unwrap().finish().unwrap();
        let took = started.elapsed();
        assert_eq!(root.to_string(), e1.root);
        println!(
            "whole epoch: {lines} projects as one bundle, every line and the multiproof checked, in {:.2} s \
             ({:.0} snapshots/s)",
            took.as_secs_f64(),
            lines as f64 / took.as_secs_f64()
        );

        // 4. The server's work alone (routing, the store's read, the proof,
        // the JSON), on one thread, without HTTP's connection.
        {
            use tower::ServiceExt;
            let router = lite_node_validator::api::data_router(
                Arc::new(Market::new(scope(), 7001, "validator-1")),
                Some(Data { store: store.clone(), rate_per_client: None, retention_days: None }),
            );
            let n = big.min(5_000);
            let started = cpu_now();
            for i in 0..n {
                let request = axum::http::Request::get(format!("/data/1/{}", project(i)))
                    .body(axum::body::Body::empty())
                    .unwrap();
                let answer = router.clone().oneshot(request).await.unwrap();
                assert_eq!(answer.status(), 200);
                axum::body::to_bytes(answer.into_body(), usize::MAX).await.unwrap();
            }
            let cpu = cpu_now() - started;
            println!(
                "server's work: {:.1} µs of CPU a bundle (routing, the store's read, the proof, the JSON; no HTTP \
                 connection)",
                cpu.as_secs_f64() * 1e6 / n as f64
            );
        }

        // 5. The client's checks alone, on one thread.
        let http = reqwest::Client::new();
        let mut bundles = Vec::new();
        for i in 0..big.min(5_000) {
            let p = project(i);
            let body = http.get(format!("{base}/data/1/{p}")).send().await.unwrap().bytes().await.unwrap();
            bundles.push((p, body));
        }
        // Read in one pass (as `lite-node read` reads), and through a
        // `Value` (as it read before), turn about: the two in the same
        // minutes of this machine.
        let (mut one_pass, mut through_value) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..3 {
            let started = cpu_now();
            for (p, body) in &bundles {
                bundle::check_slice(body, &asked(1, p)).unwrap().unwrap();
            }
            one_pass += cpu_now() - started;
            let started = cpu_now();
            for (p, body) in &bundles {
                let bundle: Value = serde_json::from_slice(body).unwrap();
                bundle::check(&bundle, &asked(1, p)).unwrap();
            }
            through_value += cpu_now() - started;
        }
        let per = |cpu: Duration| cpu.as_secs_f64() * 1e6 / (3 * bundles.len()) as f64;
        println!(
            "client checks: {:.1} µs of CPU a snapshot (parse, sha256 → CID, canonical JSON, proof; goal ≤ 100); \
             {:.1} µs with the bundle parsed into a JSON value first",
            per(one_pass),
            per(through_value)
        );
        // The same of the range's lines (a proof of 3 hashes, not 14).
        let p = project(3);
        let url = format!("{base}/data/range/{p}?from=2&to={}", 1 + range_epochs);
        let body = http.get(url).send().await.unwrap().bytes().await.unwrap();
        let lines: Vec<&[u8]> = body.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
        let (mut one_pass, mut through_value) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..3 {
            let started = cpu_now();
            for (e, line) in (2..).zip(&lines) {
                bundle::check_slice(line, &asked(e, &p)).unwrap().unwrap();
            }
            one_pass += cpu_now() - started;
            let started = cpu_now();
            for (e, line) in (2..).zip(&lines) {
                let line: Value = serde_json::from_slice(line).unwrap();
                bundle::check(&line, &asked(e, &p)).unwrap();
            }
            through_value += cpu_now() - started;
        }
        let per = |cpu: Duration| cpu.as_secs_f64() * 1e6 / (3 * lines.len()) as f64;
        println!(
            "  a range's line: {:.1} µs of CPU; {:.1} µs parsed into a JSON value first",
            per(one_pass),
            per(through_value)
        );
    });
}

/// This thread's CPU time (`/proc/thread-self/schedstat`: nanoseconds on a
/// CPU).
fn cpu_now() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(stat.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0))
}

/// The CPUs the server's threads and the clients' are kept on.
const SERVER_CPU: usize = 0;
const CLIENTS_CPU: usize = 1;

/// Keeps the calling thread on CPU `cpu`, on a machine of at least two
/// `cores`.
fn pin_to(cpu: usize, cores: usize) {
    if cores < 2 {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it
    // (cpu < CPU_SETSIZE); sched_setaffinity reads it and sets the calling
    // thread's (pid 0) affinity.
    let done = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(done, 0, "sched_setaffinity to CPU {cpu}: {}", std::io::Error::last_os_error());
}

/// The name of the server's runtime threads, whose CPU [`server_cpu`] adds
/// up.
const SERVER_THREADS: &str = "bench-server";

/// The CPU the server's threads have used (`/proc/self/task/*/stat`).
fn server_cpu() -> Duration {
    let mut ticks = 0u64;
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if &stat[open + 1..close] != SERVER_THREADS {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        ticks += fields.get(11).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
        ticks += fields.get(12).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
    }
    Duration::from_millis(ticks * 10)
}

/// `reads` verified reads of epoch 1's `big` projects, shared by the
/// `readers`, each reading in turn: as fast as it goes (each read's latency
/// from when it was sent), or one read `every` (the readers' turns spread
/// over it; each read's latency from when it was due, so a read sent late
/// because the one before was slow counts its wait: no coordinated
/// omission). The readers back, and every read's latency.
async fn read_by_all(
    readers: Vec<Reader>,
    big: usize,
    reads: usize,
    every: Option<Duration>,
) -> (Vec<Reader>, Vec<Duration>) {
    let clients = readers.len();
    let started = tokio::time::Instant::now() + Duration::from_millis(10);
    let mut tasks = tokio::task::JoinSet::new();
    for (c, mut reader) in readers.into_iter().enumerate() {
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let mut at = c * 7_919;
            for k in 0..reads / clients {
                at = (at * 1_103 + 12_345) % big;
                let due = match every {
                    Some(every) => {
                        let due = started + every * k as u32 + every.mul_f64(c as f64 / clients as f64);
                        tokio::time::sleep_until(due).await;
                        due
                    }
                    None => tokio::time::Instant::now(),
                };
                reader.read_checked(&project(at)).await;
                latencies.push(due.elapsed());
            }
            (reader, latencies)
        });
    }
    let (mut readers, mut latencies) = (Vec::new(), Vec::new());
    while let Some(done) = tasks.join_next().await {
        let (reader, l) = done.unwrap();
        readers.push(reader);
        latencies.extend(l);
    }
    (readers, latencies)
}

/// A consumer reading bundles over one HTTP/1.1 connection, kept alive.
struct Reader {
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Empty<axum::body::Bytes>>,
}

impl Reader {
    async fn connect(addr: &str) -> Self {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        Self { sender }
    }

    /// Reads `project`'s bundle of epoch 1 and checks it (bytes → CID,
    /// canonical JSON, proof → root).
    async fn read_checked(&mut self, project: &str) {
        use http_body_util::BodyExt;
        let request = hyper::Request::get(format!("/data/1/{project}"))
            .header(hyper::header::HOST, "127.0.0.1")
            .body(http_body_util::Empty::new())
            .unwrap();
        let answer = self.sender.send_request(request).await.unwrap();
        assert_eq!(answer.status(), 200);
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        let asked = Asked {
            epoch_id: 1,
            project_id: project,
            protocol_state: scope().protocol_state,
            data_market: scope().data_market,
        };
        bundle::check_slice(&body, &asked).unwrap().unwrap();
    }
}
