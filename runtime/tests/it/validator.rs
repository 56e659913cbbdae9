//! `lite-node validator` broken on purpose, against a real redis-server and
//! the devnet world on anvil: a dequeuer SIGKILLed in the middle of a burst
//! and started again, and Redis restarted under a running dequeuer. Either
//! way every submission gets exactly one verdict: counted in Redis, none
//! twice, none lost.

use std::{
    path::Path,
    process::{Command, Stdio},
    sync::Arc,
    time::Duration,
};

use lite_node_protocol::{
    eip712::{Request, Signer},
    proto,
    submission::Scope,
};
use lite_node_testkit::{Reaped, RedisServer, World, poll_until, toolchain_env};
use lite_node_validator::{Keys, Market, gateway::Gateway, monitor::Monitor};
use redis::AsyncCommands;

/// Submissions in the burst: mostly slots that are not registered (each
/// costs the dequeuer a registry read), and the world's registered slots.
const BURST: u64 = 2_000;

struct Setup {
    world: World,
    runtime: tokio::runtime::Runtime,
    market: Arc<Market>,
    epoch_id: u64,
    cache: tempfile::TempDir,
}

fn setup() -> Setup {
    let world = World::load();
    let (epoch_id, release_block) = world.release_next_epoch();
    let scope = Scope {
        protocol_state: world.manifest.protocol_state.parse().unwrap(),
        data_market: world.manifest.data_market.parse().unwrap(),
    };
    let market = Arc::new(Market::new(scope, world.manifest.chain_id, "validator-1"));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let _ = release_block;
    Setup { world, runtime, market, epoch_id, cache: tempfile::tempdir().unwrap() }
}

impl Setup {
    fn conn(&self, redis: &RedisServer) -> redis::aio::ConnectionManager {
        let client = redis::Client::open(redis.url()).unwrap();
        self.runtime.block_on(lite_node_validator::connect(&client)).unwrap()
    }

    /// Opens the epoch's window (as the event monitor does) and queues the
    /// burst through the gateway's own code.
    fn open_and_queue(&self, redis: &RedisServer) {
        let conn = self.conn(redis);
        let monitor = Monitor::new(self.market.clone(), conn.clone());
        let gateway = Gateway::new(conn, self.market.clone());
        let head = self.world.head();
        let project = |pool: &str| format!("baseSnapshot:{}:devnet-UNISWAPV3-ETH", pool.to_lowercase());
        // The world's registered slots submit for every pool (exactly the
        // assigned one is accepted); unregistered slots fill the burst.
        let pools = &self.world.manifest.pools;
        let registered: Vec<u64> = self.world.manifest.slots.iter().map(|(s, _)| *s).collect();
        let mut burst: Vec<(u64, String)> =
            registered.iter().flat_map(|s| pools.iter().map(move |p| (*s, project(p)))).collect();
        let mut next = 1_000_000;
        while (burst.len() as u64) < BURST {
            burst.push((next, project(&pools[0])));
            next += 1;
        }
        let cid = lite_node_protocol::cid::cid(b"a snapshot");
        self.runtime.block_on(async {
            monitor.released(self.epoch_id, head, head, head).await.unwrap();
            monitor.head(head).await.unwrap();
            for (slot, project) in burst {
                let key = match registered.contains(&slot) {
                    true => {
                        let hex = self.world.manifest.signer_key(slot).trim_start_matches("0x").to_owned();
                        <[u8; 32]>::try_from(hex::decode(hex).unwrap()).unwrap()
                    }
                    false => {
                        let mut k = [7u8; 32];
                        k[..8].copy_from_slice(&slot.to_be_bytes());
                        k
                    }
                };
                let signer = Signer::new(&key, self.world.manifest.chain_id, self.market.scope.protocol_state).unwrap();
                let request = Request {
                    slot_id: slot,
                    deadline: head + 100,
                    snapshot_cid: cid.clone(),
                    epoch_id: self.epoch_id,
                    project_id: project,
                };
                let s = proto::SnapshotSubmission {
                    signature: signer.sign(&request).unwrap(),
                    request: Some((&request).into()),
                    header: String::new(),
                    data_market: self.world.manifest.data_market.clone(),
                    node_version: None,
                    protocol_state: self.world.manifest.protocol_state.clone(),
                    snapshot: None,
                };
                let admitted = gateway.accept(&s, "test").await.unwrap();
                assert_eq!(admitted, lite_node_validator::gateway::Admitted::Queued);
            }
        });
    }

    /// A `lite-node validator` running only dequeuers.
    fn dequeuer(&self, redis: &RedisServer, log: &Path) -> Reaped {
        Command::new(env!("CARGO_BIN_EXE_lite-node"))
            .arg("validator")
            .args(["--components", "dequeuer", "--workers", "2"])
            .args(["--redis-url", &redis.url()])
            .args(["--anchor-rpc", &self.world.url()])
            .args(["--protocol-state", &self.world.manifest.protocol_state])
            .args(["--data-market", &self.world.manifest.data_market])
            .args(["--pools", &self.world.manifest.pools.join(",")])
            .env_clear()
            .envs(toolchain_env())
            .envs(lite_node_testkit::market_env(self.cache.path()))
            .envs(lite_node_testkit::compute_build_env())
            .env("LITE_NODE_COMPUTE_CACHE_DIR", self.cache.path())
            .env("LITE_NODE_DATA_DIR", self.cache.path())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .map(Reaped)
            .expect("lite-node validator starts")
    }

    /// Verdicts given so far (accepted + rejected), `None` while Redis is away.
    fn verdicts(&self, redis_url: &str) -> Option<u64> {
        let k = &self.market.keys;
        let client = redis::Client::open(redis_url).ok()?;
        let mut conn = client.get_connection().ok()?;
        let accepted: u64 = redis::Commands::scard(&mut conn, k.epoch_processed_set(self.epoch_id)).ok()?;
        let rejected: u64 = redis::Commands::hlen(&mut conn, k.rejections(self.epoch_id)).ok()?;
        Some(accepted + rejected)
    }

    /// Every submission has exactly one verdict, counted once.
    fn assert_exactly_once(&self, redis: &RedisServer) {
        let mut conn = self.conn(redis);
        let k: &Keys = &self.market.keys;
        self.runtime.block_on(async {
            let counters: std::collections::BTreeMap<String, u64> = conn.hgetall(k.counters()).await.unwrap();
            let counted: u64 = counters.iter().filter(|(name, _)| *name != "received").map(|(_, n)| *n).sum();
            assert_eq!(counted, BURST, "one count per submission: {counters:?}");
            // Every registered slot of the world is selected (it has fewer
            // slots than an epoch selects), for exactly one of the pools.
            let registered = self.world.manifest.slots.len() as u64;
            assert_eq!(counters.get("accepted").copied().unwrap_or(0), registered, "{counters:?}");
            assert!(counters.get("rejected:unregistered_slot").copied().unwrap_or(0) > BURST / 2, "{counters:?}");
            let accepted: u64 = conn.scard(k.epoch_processed_set(self.epoch_id)).await.unwrap();
            let rejected: u64 = conn.hlen(k.rejections(self.epoch_id)).await.unwrap();
            assert_eq!(accepted + rejected, BURST);
            assert_eq!(counters.get("accepted").copied().unwrap_or(0), accepted, "accepted counted once each");
            let queued: u64 = conn.llen(k.submission_queue()).await.unwrap();
            let held = lite_node_validator::ReliableQueue::submissions(conn.clone(), k).depth().await.unwrap().1 as u64;
            assert_eq!((queued, held), (0, 0), "nothing left behind");
        });
    }
}

/// Submissions the dequeuer workers hold (taken, not yet acknowledged).
fn held_by_workers(conn: &mut redis::Connection, k: &Keys) -> redis::RedisResult<u64> {
    let queue = k.submission_queue();
    let owners: Vec<String> = redis::Commands::smembers(conn, format!("{queue}:holders"))?;
    let mut held = 0;
    for owner in owners {
        let n: u64 = redis::Commands::llen(conn, format!("{queue}:held:{owner}"))?;
        held += n;
    }
    Ok(held)
}

fn wait_for_verdicts(s: &Setup, url: &str, at_least: u64, child: &mut Reaped, log: &Path) -> u64 {
    poll_until(&format!("{at_least} verdicts"), Duration::from_secs(180), || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the validator exited ({status}): {}", std::fs::read_to_string(log).unwrap_or_default());
        }
        s.verdicts(url).filter(|n| *n >= at_least)
    })
}

#[test]
fn a_dequeuer_killed_mid_burst_and_started_again_gives_every_submission_exactly_one_verdict() {
    let s = setup();
    let redis = RedisServer::start();
    s.open_and_queue(&redis);
    let log = s.cache.path().join("validator.log");
    // SIGKILL the dequeuer while its workers hold items: between two
    // batches, nothing would be left to recover.
    let held_at_kill = |s: &Setup| -> u64 {
        let mut conn = redis::Client::open(redis.url()).unwrap().get_connection().unwrap();
        held_by_workers(&mut conn, &s.market.keys).unwrap()
    };
    let url = redis.url();
    let mut first = s.dequeuer(&redis, &log);
    // Killed while held still at a point its workers hold items: the state a
    // kill there leaves.
    let at_kill = held_mid_burst(&s, &url, &mut first, &log, |verdicts, held| verdicts > 0 && held > 0);
    let held = held_at_kill(&s);
    first.kill().unwrap(); // SIGKILL, while held still
    first.wait().unwrap();
    assert!(held > 0);
    let after = s.verdicts(&redis.url()).unwrap();
    assert!(after < BURST, "killed mid-burst: {at_kill} verdicts at the kill, {after} after");

    let log2 = s.cache.path().join("validator-2.log");
    let mut second = s.dequeuer(&redis, &log2);
    wait_for_verdicts(&s, &redis.url(), BURST, &mut second, &log2);
    // What the dead worker held comes back once its heartbeat is gone.
    poll_until("the dead worker's items recovered", Duration::from_secs(60), || {
        let client = redis::Client::open(redis.url()).ok()?;
        let mut conn = client.get_connection().ok()?;
        let held: u64 = held_by_workers(&mut conn, &s.market.keys).ok()?;
        (held == 0).then_some(())
    });
    second.kill().unwrap();
    second.wait().unwrap();
    s.assert_exactly_once(&redis);
    let log = std::fs::read_to_string(&log2).unwrap();
    assert!(log.contains("put back on the queue"), "the restarted dequeuer recovered the held items:\n{log}");
}

/// Sends `signal` (`STOP`, `CONT`) to a child process.
fn signal(child: &Reaped, signal: &str) {
    let status = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
    assert!(status.success(), "kill -{signal}");
}

/// Runs a dequeuer held still (SIGSTOP) in slices of 2 ms until `wanted`
/// (verdicts so far, items its workers hold) is true, and leaves it held
/// still there: a point mid-burst taken without a race (a whole burst is
/// well under a second of its work, so waiting for a count and then
/// stopping it could find the burst over). The 2 ms are its slice of
/// work, not a wait for a condition.
fn held_mid_burst(s: &Setup, url: &str, child: &mut Reaped, log: &Path, wanted: impl Fn(u64, u64) -> bool) -> u64 {
    signal(child, "STOP");
    poll_until("a point mid-burst", Duration::from_secs(120), || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the validator exited ({status}): {}", std::fs::read_to_string(log).unwrap_or_default());
        }
        signal(child, "CONT");
        std::thread::sleep(Duration::from_millis(2));
        signal(child, "STOP");
        let verdicts = s.verdicts(url)?;
        let mut conn = redis::Client::open(url).ok()?.get_connection().ok()?;
        let held = held_by_workers(&mut conn, &s.market.keys).ok()?;
        assert!(verdicts < BURST, "the burst ended within one slice");
        wanted(verdicts, held).then_some(verdicts)
    })
}

#[test]
fn redis_restarted_under_a_running_dequeuer_loses_nothing_with_aof_on() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let s = setup();
    let redis = RedisServer::start_with(&aof);
    s.open_and_queue(&redis);
    let log = s.cache.path().join("validator.log");
    let mut child = s.dequeuer(&redis, &log);
    // Redis restarts under it mid-burst while it is held still; it goes on
    // with the connection it had.
    let before = held_mid_burst(&s, &redis.url(), &mut child, &log, |verdicts, _| verdicts > 0);
    let url = redis.url();
    let redis = redis.restart(&aof);
    signal(&child, "CONT");
    assert!(before < BURST, "restarted mid-burst ({before} verdicts before)");
    // The monitor's head has a TTL; refresh it as a running monitor would.
    poll_until("Redis back with its append-only file", Duration::from_secs(30), || {
        let client = redis::Client::open(url.as_str()).ok()?;
        let conn = s.runtime.block_on(lite_node_validator::connect(&client)).ok()?;
        s.runtime.block_on(Monitor::new(s.market.clone(), conn).head(s.world.head())).ok()
    });
    wait_for_verdicts(&s, &url, BURST, &mut child, &log);
    poll_until("nothing held", Duration::from_secs(60), || {
        let client = redis::Client::open(url.as_str()).ok()?;
        let mut conn = client.get_connection().ok()?;
        let held: u64 = held_by_workers(&mut conn, &s.market.keys).ok()?;
        let queued: u64 = redis::Commands::llen(&mut conn, s.market.keys.submission_queue()).ok()?;
        (held + queued == 0).then_some(())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    s.assert_exactly_once(&redis);
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn http_get(url: &str) -> Option<(u16, serde_json::Value)> {
    let r = reqwest::blocking::get(url).ok()?;
    let status = r.status().as_u16();
    Some((status, r.json().ok()?))
}

#[test]
fn the_validator_follows_the_chain_judges_a_reassigned_slot_by_the_registry_at_each_release_and_finalizes_when_the_window_closes()
 {
    let s = setup();
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let redis = RedisServer::start_with(&aof);
    let (gateway_port, api_port) = (free_port(), free_port());
    let api = format!("http://127.0.0.1:{api_port}");
    let log = s.cache.path().join("validator.log");
    let from_block = s.world.head().to_string();
    let start = |redis_url: &str, log: &std::path::Path| {
        let mut child = Reaped(
            Command::new(env!("CARGO_BIN_EXE_lite-node"))
                .arg("validator")
                .args(["--redis-url", redis_url])
                .args(["--listen", &format!("127.0.0.1:{gateway_port}")])
                .args(["--api-listen", &format!("127.0.0.1:{api_port}")])
                .args(["--anchor-rpc", &s.world.url()])
                .args(["--protocol-state", &s.world.manifest.protocol_state])
                .args(["--data-market", &s.world.manifest.data_market])
                .args(["--pools", &s.world.manifest.pools.join(",")])
                .args(["--from-block", &from_block, "--window-blocks", "5", "--poll-ms", "50"])
                .arg("--data-dir")
                .arg(s.cache.path().join("validator"))
                .env_clear()
                .envs(toolchain_env())
                .envs(lite_node_testkit::market_env(s.cache.path()))
                .envs(lite_node_testkit::compute_build_env())
                .env("LITE_NODE_COMPUTE_CACHE_DIR", s.cache.path())
                .env("LITE_NODE_DATA_DIR", s.cache.path())
                .env("RUST_LOG", "info")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(log).unwrap())
                .spawn()
                .unwrap(),
        );
        poll_until("the validator healthy", Duration::from_secs(180), || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the validator exited ({status}):\n{}", std::fs::read_to_string(log).unwrap_or_default());
            }
            http_get(&format!("{api}/health")).filter(|(status, _)| *status == 200)
        });
        child
    };
    let mut child = start(&redis.url(), &log);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // A release on the chain opens the window, seen by the event monitor.
    let (epoch_id, release_block) = s.world.release_next_epoch();
    let (_, epoch) = poll_until("the window open", Duration::from_secs(30), || {
        http_get(&format!("{api}/epochs/{epoch_id}")).filter(|(status, _)| *status == 200)
    });
    assert_eq!(epoch["state"]["window_status"], "open", "{epoch}");
    assert_eq!(epoch["state"]["release_block"], release_block.to_string());

    // Slot 1 signed by a key it is not registered with: wrong signer. Then
    // the key is registered for slot 1: the epoch released before is still
    // judged by the registry at its release (wrong signer again), the next
    // one released by the new signer's (every validator judges alike,
    // whenever it read the chain).
    let new_key = [9u8; 32];
    let signer = Signer::new(&new_key, s.world.manifest.chain_id, s.market.scope.protocol_state).unwrap();
    let mut client = s
        .runtime
        .block_on(proto::submission_client::SubmissionClient::connect(format!("http://127.0.0.1:{gateway_port}")))
        .unwrap();
    let project = format!("baseSnapshot:{}:devnet-UNISWAPV3-ETH", s.world.manifest.pools[0]);
    let mut submit = |epoch_id: u64, deadline: u64| {
        let cid = lite_node_protocol::cid::cid(format!("snapshot {deadline}").as_bytes());
        let request = Request { slot_id: 1, deadline, snapshot_cid: cid, epoch_id, project_id: project.clone() };
        let submission = proto::SnapshotSubmission {
            signature: signer.sign(&request).unwrap(),
            request: Some((&request).into()),
            header: String::new(),
            data_market: s.world.manifest.data_market.clone(),
            node_version: None,
            protocol_state: s.world.manifest.protocol_state.clone(),
            snapshot: None,
        };
        let answer = s.runtime.block_on(client.submit_snapshot(submission)).unwrap().into_inner();
        assert_eq!(answer.message, proto::SUCCESS, "the gateway queues what it gets");
    };
    let reasons = |epoch_id: u64| -> Vec<String> {
        let (_, subs) = http_get(&format!("{api}/epochs/{epoch_id}/submissions")).unwrap();
        let mut all: Vec<String> =
            subs["rejected"].as_array().unwrap().iter().map(|r| r["reason"].as_str().unwrap().to_owned()).collect();
        all.extend(subs["accepted"].as_array().unwrap().iter().map(|_| "accepted".to_owned()));
        all
    };
    submit(epoch_id, release_block + 20);
    poll_until("a verdict", Duration::from_secs(30), || (reasons(epoch_id).len() == 1).then_some(()));
    assert_eq!(reasons(epoch_id), ["wrong_signer"]);
    s.world.assign_slot(1, &signer.address().to_string());
    poll_until("the registration seen", Duration::from_secs(30), || {
        log_text().contains("slot registry changed").then_some(())
    });
    submit(epoch_id, release_block + 21);
    poll_until("a second verdict", Duration::from_secs(30), || (reasons(epoch_id).len() == 2).then_some(()));
    assert_eq!(reasons(epoch_id), ["wrong_signer", "wrong_signer"], "judged by the registry at its release");
    let (after_change, after_block) = s.world.release_next_epoch();
    poll_until("the next window open", Duration::from_secs(30), || {
        http_get(&format!("{api}/epochs/{after_change}")).filter(|(status, _)| *status == 200)
    });
    submit(after_change, after_block + 4);
    poll_until("its verdict", Duration::from_secs(30), || (reasons(after_change).len() == 1).then_some(()));
    let second = reasons(after_change).into_iter().next();
    assert!(
        matches!(second.as_deref(), Some("accepted" | "not_selected" | "wrong_pool")),
        "the new signer passes the signer check from the epoch released after the change: {second:?}"
    );

    // The registry disables the new signer: an epoch released before is
    // still judged as of its release (its signer check passes, though its
    // submission comes after the disabling), the next one refuses it
    // (`snapshotter_disabled`); enabled again, the epoch released after
    // that passes the check again.
    let passes = |verdict: Option<&str>| matches!(verdict, Some("accepted" | "not_selected" | "wrong_pool"));
    let changes_seen = |n: usize| log_text().matches("slot registry changed").count() >= n;
    let seen = log_text().matches("slot registry changed").count();
    let (before, before_block) = s.world.release_next_epoch();
    poll_until("the window before the disabling open", Duration::from_secs(30), || {
        http_get(&format!("{api}/epochs/{before}")).filter(|(status, _)| *status == 200)
    });
    let signer_address = signer.address().to_string();
    s.world.set_snapshotter_enabled(&signer_address, false);
    poll_until("the disabling recorded", Duration::from_secs(30), || changes_seen(seen + 1).then_some(()));
    submit(before, before_block + 4);
    poll_until("the verdict after the disabling", Duration::from_secs(30), || {
        (reasons(before).len() == 1).then_some(())
    });
    let verdict = reasons(before).into_iter().next();
    assert!(passes(verdict.as_deref()), "an epoch released before the disabling is judged as of it: {verdict:?}");
    let (disabled, disabled_block) = s.world.release_next_epoch();
    poll_until("the window after the disabling open", Duration::from_secs(30), || {
        http_get(&format!("{api}/epochs/{disabled}")).filter(|(status, _)| *status == 200)
    });
    submit(disabled, disabled_block + 4);
    poll_until("the disabled signer's verdict", Duration::from_secs(30), || {
        (reasons(disabled).len() == 1).then_some(())
    });
    assert_eq!(reasons(disabled), ["snapshotter_disabled"], "refused for an epoch released while disabled");
    s.world.set_snapshotter_enabled(&signer_address, true);
    poll_until("the enabling recorded", Duration::from_secs(30), || changes_seen(seen + 2).then_some(()));
    let (enabled, enabled_block) = s.world.release_next_epoch();
    poll_until("the window after the enabling open", Duration::from_secs(30), || {
        http_get(&format!("{api}/epochs/{enabled}")).filter(|(status, _)| *status == 200)
    });
    submit(enabled, enabled_block + 4);
    poll_until("the enabled signer's verdict", Duration::from_secs(30), || (reasons(enabled).len() == 1).then_some(()));
    let verdict = reasons(enabled).into_iter().next();
    assert!(
        passes(verdict.as_deref()),
        "enabled again, the signer passes the check from the next release: {verdict:?}"
    );

    // The windows close in anchor blocks: mined past release + 5, the
    // epochs are finalized.
    s.world.mine(6);
    let (_, epoch) = poll_until("the epoch finalized", Duration::from_secs(30), || {
        http_get(&format!("{api}/epochs/{epoch_id}")).filter(|(_, e)| !e["finalized"].is_null())
    });
    assert_eq!(epoch["state"]["window_status"], "closed");
    assert_eq!(epoch["state"]["level1_status"], "completed");
    assert_eq!(epoch["finalized"]["projects"].as_array().unwrap().len(), 0, "{epoch}");
    let (_, later) = poll_until("the later epoch finalized", Duration::from_secs(30), || {
        http_get(&format!("{api}/epochs/{after_change}")).filter(|(_, e)| !e["finalized"].is_null())
    });
    let projects = later["finalized"]["projects"].as_array().unwrap().len();
    assert_eq!(projects, usize::from(second.as_deref() == Some("accepted")), "{later}");
    // The epoch set-up released before the validator started is finalized
    // too (its window closed with these: it may be a moment behind).
    let metrics = poll_until("the six epochs finalized", Duration::from_secs(30), || {
        let metrics = reqwest::blocking::get(format!("{api}/metrics")).ok()?.text().ok()?;
        metrics.contains("validator_epochs_finalized_total 6").then_some(metrics)
    });
    assert!(metrics.contains("validator_submissions_rejected_total{reason=\"wrong_signer\"} 2"), "{metrics}");

    // Redis restarts under every component: each reconnects and the next
    // epoch goes through the whole pipeline.
    let redis = redis.restart(&aof);
    // A snapshot of Redis as it is now, before the next epoch: what a Redis
    // that loses its last writes comes back with.
    poll_until("a snapshot of Redis", Duration::from_secs(30), || {
        let mut conn = redis::Client::open(redis.url()).ok()?.get_connection().ok()?;
        redis::cmd("SAVE").query::<()>(&mut conn).ok()
    });
    let (next, next_block) = s.world.release_next_epoch();
    poll_until("the next window open", Duration::from_secs(60), || {
        http_get(&format!("{api}/epochs/{next}")).filter(|(status, _)| *status == 200)
    });
    submit(next, next_block + 20); // the gateway queues again
    poll_until("its verdict", Duration::from_secs(30), || {
        let (_, e) = http_get(&format!("{api}/epochs/{next}"))?;
        (e["accepted"].as_u64()? + e["rejected"].as_u64()? == 1).then_some(())
    });
    s.world.mine(6);
    let (_, after) = poll_until("the next epoch finalized after the restart", Duration::from_secs(60), || {
        http_get(&format!("{api}/epochs/{next}")).filter(|(_, e)| !e["finalized"].is_null())
    });
    assert_eq!(after["state"]["level1_status"], "completed", "{after}");
    // What was finalized before the restart is still there (append-only file).
    let (_, old) = http_get(&format!("{api}/epochs/{epoch_id}")).unwrap();
    assert!(!old["finalized"].is_null(), "{old}");

    // SIGTERM: a clean stop.
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let status = poll_until("the validator stopped", Duration::from_secs(20), || child.try_wait().unwrap());
    assert!(status.success(), "{status}:\n{}", log_text());

    // Two epochs are released while it is stopped: it cannot have watched
    // them, and says so once it is back.
    let missed: Vec<u64> = (0..2).map(|_| s.world.release_next_epoch().0).collect();
    s.world.mine(6);

    // Redis comes back without its last writes (the snapshot from before
    // the next epoch), and the validator is started again: its cursor on
    // disk is past that epoch, Redis's record of the monitor is not, so the
    // monitor reads those blocks again and reports the epoch it lost — and
    // only that one.
    let redis = redis.restart(&["--appendonly", "no"]);
    let log2 = s.cache.path().join("validator-2.log");
    let mut child = start(&redis.url(), &log2);
    // The epochs `/epochs/gaps` lists as gaps of `kind`.
    let gaps_of = |kind: &str| -> Option<Vec<u64>> {
        let (_, gaps) = http_get(&format!("{api}/epochs/gaps"))?;
        Some(
            gaps["gaps"]
                .as_array()?
                .iter()
                .filter(|g| g["gap"] == kind)
                .filter_map(|g| g["epoch_id"].as_u64())
                .collect(),
        )
    };
    let unwatched = || gaps_of("not_watched").filter(|e| missed.iter().all(|m| e.contains(m)));
    poll_until("the epochs released while it was stopped listed as gaps", Duration::from_secs(60), unwatched);
    let lost = || gaps_of("state_lost").filter(|lost| !lost.is_empty());
    assert_eq!(poll_until("the lost epoch reported", Duration::from_secs(60), lost), [next]);
    let (_, health) = http_get(&format!("{api}/health")).unwrap();
    assert_eq!(health["status"], "degraded", "{health}");
    let (_, kept) = http_get(&format!("{api}/epochs/{epoch_id}")).unwrap();
    assert!(!kept["finalized"].is_null(), "the epoch in the snapshot is kept: {kept}");
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let status = poll_until("the validator stopped", Duration::from_secs(20), || child.try_wait().unwrap());
    let log2_text = std::fs::read_to_string(&log2).unwrap_or_default();
    assert!(status.success(), "{status}:\n{log2_text}");
    assert!(log2_text.contains(&format!("epoch {next}: its state is gone")), "{log2_text}");
}

/// `lite-node validator` with the world's market flags (ProtocolState
/// `protocol_state` if given) and `extra`.
fn validator_command(s: &Setup, protocol_state: Option<&str>, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lite-node"));
    cmd.arg("validator")
        .args(["--anchor-rpc", &s.world.url()])
        .args(["--protocol-state", protocol_state.unwrap_or(&s.world.manifest.protocol_state)])
        .args(["--data-market", &s.world.manifest.data_market])
        .arg("--data-dir")
        .arg(s.cache.path().join("flags"))
        .args(extra)
        .env_clear()
        .envs(toolchain_env())
        .envs(lite_node_testkit::market_env(s.cache.path()))
        .envs(lite_node_testkit::compute_build_env())
        .env("LITE_NODE_COMPUTE_CACHE_DIR", s.cache.path())
        .env("RUST_LOG", "info");
    cmd
}

#[test]
fn bad_flags_exit_2_naming_the_flag_and_sigterm_stops_a_validator_waiting_for_redis() {
    let s = setup();
    let pools = s.world.manifest.pools.join(",");
    let nothing_there = Some("0x00000000000000000000000000000000000000f1");
    for (ps, extra, says) in [
        (None, vec!["--workers", "0", "--pools", &pools], "--workers must be at least 1"),
        (None, vec!["--pools", "0xzz,0x12"], "`0xzz`, `0x12`"),
        (nothing_there, vec!["--pools", &pools], "no contract"),
        (
            None,
            vec!["--p2p-bootstrap", "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWCg2PHtjJj4CvERPhm9GKLkmrD1KK5dVd97jZNy5FKv93"],
            "--p2p-bootstrap needs --p2p-listen",
        ),
        (
            None,
            vec!["--p2p-listen", "/ip4/127.0.0.1/tcp/0", "--p2p-bootstrap", "/ip4/127.0.0.1/tcp/1"],
            "end it with /p2p/<peer id>",
        ),
        (None, vec!["--p2p-listen", "/ip4/nonsense"], "invalid value '/ip4/nonsense' for '--p2p-listen"),
    ] {
        let out = validator_command(&s, ps, &extra).args(["--redis-url", "redis://127.0.0.1:1"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
    }

    // The validator key: not a key (never echoed), not registered for the
    // market, or asked for without one.
    let redis = RedisServer::start();
    let unregistered = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    for (key, extra, says) in [
        (Some("0xnot-a-key-but-secret"), vec![], "VALIDATOR_SIGNER_PRIVATE_KEY is not a secp256k1 private key"),
        (Some(unregistered), vec!["--fallback-blocks", "0"], "--fallback-blocks must be at least 1"),
        (Some(unregistered), vec![], "is not a registered validator of data market"),
        (None, vec!["--components", "onchain"], "--components onchain needs the validator's key"),
    ] {
        let mut cmd = validator_command(&s, None, &extra);
        cmd.args(["--redis-url", &redis.url(), "--pools", &pools, "--components", "onchain,monitor"]);
        if let Some(key) = key {
            cmd.env("VALIDATOR_SIGNER_PRIVATE_KEY", key);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{key:?} {extra:?}: {stderr}");
        assert!(stderr.contains(says), "{key:?} {extra:?}: {stderr}");
        assert!(!stderr.contains("secret") && !stderr.contains(&unregistered[4..20]), "the key leaked: {stderr}");
    }

    // An identity file that is not a key: exit 2 naming the file (kept, not
    // overwritten: it may be an operator's key in the wrong format).
    let identity = s.cache.path().join("flags").join("p2p-identity.key");
    std::fs::create_dir_all(identity.parent().unwrap()).unwrap();
    std::fs::write(&identity, b"not a key").unwrap();
    let out = validator_command(&s, None, &["--components", "gateway", "--p2p-listen", "/ip4/127.0.0.1/tcp/0"])
        .args(["--redis-url", &redis.url(), "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("p2p-identity.key"), "{stderr}");
    assert_eq!(std::fs::read(&identity).unwrap(), b"not a key", "the file is left as it was");
    std::fs::remove_file(&identity).unwrap();

    // Redis unreachable: the validator waits for it (its password never
    // shown), and a stop ends the wait.
    let log = s.cache.path().join("waiting.log");
    let mut child = validator_command(
        &s,
        None,
        &["--components", "gateway,monitor", "--redis-url", "redis://u:hunter2@127.0.0.1:1"],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .map(Reaped)
    .unwrap();
    poll_until("the wait for Redis logged", Duration::from_secs(60), || {
        std::fs::read_to_string(&log).unwrap_or_default().contains("connecting to Redis").then_some(())
    });
    let stopped_at = std::time::Instant::now();
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = poll_until("the validator gone", Duration::from_secs(10), || child.try_wait().unwrap());
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "{status}: {logged}");
    assert!(!logged.contains("hunter2"), "the Redis password leaked: {logged}");
    println!("stopped {} ms after SIGTERM", stopped_at.elapsed().as_millis());
}
