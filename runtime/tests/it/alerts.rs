//! Alerts against a real local HTTP server standing in for Telegram's Bot
//! API and the reporting service (`tests/data/telegram_standin.py`): the books
//! drive the real delivery path, and whole nodes run alert drills.

use std::time::Duration;

use lite_node::{
    alerts::{AlertKind, Alerter, Sender},
    books::Books,
    config::{AlertConfig, BotConfig},
    outcome::{Outcome, OutcomeKind},
    supervisor::Supervisor,
};
use lite_node_testkit::{TelegramStandin, World, poll_until};
use serde_json::Value;

use crate::support::{node_env, start_node};

fn outcome(kind: OutcomeKind, selected: Option<bool>) -> Outcome {
    Outcome {
        project_type: "baseSnapshot".into(),
        kind,
        selected,
        snapshot_count: 0,
        stored: vec![],
        submissions: vec![],
        started_at_ms: 0,
        finished_at_ms: 0,
        left_out: vec![],
    }
}

fn failed(e: &str) -> Outcome {
    outcome(OutcomeKind::Failed(e.into()), Some(true))
}

fn idle() -> Outcome {
    outcome(OutcomeKind::NotSelected, Some(false))
}

fn succeeded() -> Outcome {
    outcome(OutcomeKind::Computed, Some(true))
}

fn bot(api: &TelegramStandin, cooldown: Duration) -> AlertConfig {
    let mut bot = BotConfig::new("123456:test-token", "42");
    bot.api_url = Some(api.url());
    bot.thread_id = Some(7);
    AlertConfig { bot: Some(bot), reporting: None, cooldown }
}

fn alerts_of(api: &TelegramStandin, text: &str) -> Vec<String> {
    api.messages().into_iter().filter(|m| m.contains(text)).collect()
}

#[test]
fn the_streak_alerts_once_survives_idle_epochs_recovers_and_alerts_again_with_the_cooldown_kept() {
    let api = TelegramStandin::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _guard = rt.enter();
    let mut tasks = Supervisor::new();
    let alerter = Alerter::start(
        &bot(&api, Duration::from_secs(3600)),
        Sender { slot_id: 7, signer: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into() },
        None,
        &mut tasks,
    )
    .unwrap();
    let mut books = Books::default();
    let mut feed = |epoch: u64, o: Outcome| {
        for notice in books.apply(epoch, &[o]) {
            alerter.notify(AlertKind::from(notice), &books);
        }
    };
    feed(10, failed("timed out after 60s"));
    feed(11, idle());
    feed(12, failed("rpc down"));
    feed(13, idle());
    feed(14, failed("selected for epoch 14 but returned no snapshots"));
    let first = poll_until("the three-failure alert", Duration::from_secs(30), || {
        alerts_of(&api, "consecutive selected epochs failed").pop()
    });
    assert!(first.contains("slot 7"), "{first}");
    for epoch in ["epoch 10:", "epoch 12:", "epoch 14:"] {
        assert!(first.contains(epoch), "{first}");
    }
    assert!(!first.contains("epoch 11") && !first.contains("epoch 13"), "not-selected epochs are not in the streak");
    feed(15, failed("still down"));
    feed(16, succeeded());
    poll_until("the recovery note", Duration::from_secs(30), || alerts_of(&api, "succeeded after").pop());
    for e in 17..=19 {
        feed(e, failed("down again"));
    }
    poll_until("a second alert", Duration::from_secs(30), || {
        (alerts_of(&api, "consecutive selected epochs failed").len() == 2).then_some(())
    });
    let recovery = alerts_of(&api, "succeeded after");
    assert_eq!(recovery, ["✅ lite-node slot 7: epoch 16 succeeded after 4 failed selected epoch(s)."]);
    // Failure reports obey the cooldown (one hour here): one for seven failures.
    assert_eq!(alerts_of(&api, "MISSED_SNAPSHOT").len(), 1, "{:?}", api.messages());
    assert_eq!(alerts_of(&api, "consecutive selected epochs failed").len(), 2);
    // Sent to the configured chat and topic.
    let request = &api.requests()[0]["body"];
    assert_eq!(request["chat_id"], 42);
    assert_eq!(request["message_thread_id"], 7);
}

#[test]
fn a_rate_limit_is_waited_out_and_an_api_that_is_down_gets_the_alert_once_back() {
    let api = TelegramStandin::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _guard = rt.enter();
    let mut tasks = Supervisor::new();
    let alerter =
        Alerter::start(&bot(&api, Duration::ZERO), Sender { slot_id: 3, signer: "0xabc".into() }, None, &mut tasks)
            .unwrap();
    api.rate_limit(1, 1);
    alerter.notify(AlertKind::Test, &Books::default());
    let sent = poll_until("the message after the 429", Duration::from_secs(30), || api.messages().pop());
    assert!(sent.contains("slot 3"), "{sent}");
    let refused = api.refused();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["status"], 429);

    api.down();
    // notify returns while the API is down (and stays down until after it
    // returned): were it waiting for delivery, it could not return before
    // `up` below, and the deadline would fail the test.
    let (returned, notified) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let handle = rt.handle().clone();
        let alerter = &alerter;
        scope.spawn(move || {
            let _inside = handle.enter();
            alerter.notify(AlertKind::Recovered { epoch_id: 5, failures: 3 }, &Books::default());
            returned.send(()).unwrap();
        });
        notified.recv_timeout(Duration::from_secs(30)).expect("notify returned while the API was down");
    });
    poll_until("a refused attempt while down", Duration::from_secs(30), || {
        (api.refused().iter().filter(|r| r["status"] == 502).count() >= 2).then_some(())
    });
    assert_eq!(api.messages().len(), 1, "nothing delivered while down");
    api.up();
    poll_until("the alert once the API is back", Duration::from_secs(60), || {
        api.messages().iter().any(|m| m.contains("epoch 5 succeeded")).then_some(())
    });
    assert_eq!(api.messages().len(), 2, "delivered exactly once");
}

/// A blockDetails node (selected every epoch) running an alert drill.
fn drill_env(world: &World, slot: u64, extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut env = node_env(&world.url(), &world.manifest, slot);
    env.push(("LITE_NODE_DRILL".into(), "compute-error".into()));
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    env
}

#[test]
fn a_node_keeps_processing_while_telegram_is_down_and_its_one_alert_arrives_when_it_is_back() {
    let world = World::load();
    let api = TelegramStandin::start();
    api.down();
    let data = tempfile::tempdir().unwrap();
    let env = drill_env(
        &world,
        1,
        &[
            ("TELEGRAM_BOT_TOKEN", "123456:node-token".into()),
            ("TELEGRAM_CHAT_ID", "-1001".into()),
            ("TELEGRAM_API_URL", api.url()),
            ("TELEGRAM_REPORTING_URL", api.url()),
        ],
    );
    let mut node = start_node(&env, &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    for _ in 0..4 {
        world.release_next_epoch();
    }
    let journal = node.wait_for_journal(4);
    assert!(journal.iter().all(|l| l["outcome"] == "failed"), "{journal:?}");
    assert!(api.messages().is_empty());
    api.up();
    let alert = poll_until("the three-failure alert", Duration::from_secs(90), || {
        alerts_of(&api, "consecutive selected epochs failed").pop()
    });
    assert!(alert.contains("slot 1") && alert.contains("LITE_NODE_DRILL"), "{alert}");
    for e in 1..=3 {
        assert!(alert.contains(&format!("epoch {e}:")), "{alert}");
    }
    // The reporting service got the reference's shape, with the books.
    let report = poll_until("a snapshot issue report", Duration::from_secs(30), || {
        api.requests().into_iter().find(|r| r["path"] == "/reportSnapshotIssue")
    });
    let body = &report["body"];
    assert_eq!(body["chatId"], "-1001");
    assert_eq!(body["slotId"], 1);
    assert_eq!(body["issue"]["issueType"], "MISSED_SNAPSHOT");
    for key in ["instanceID", "projectID", "epochId", "timeOfReporting", "extra"] {
        assert!(body["issue"].get(key).is_some(), "issue.{key} missing: {body}");
    }
    for key in ["totalSuccessfulSubmissions", "totalMissedSubmissions", "consecutiveMissedSubmissions", "projects"] {
        assert!(body["status"].get(key).is_some(), "status.{key} missing: {body}");
    }
    assert_eq!(node.stop(), 0);
    assert_eq!(alerts_of(&api, "consecutive selected epochs failed").len(), 1);
    let books: Value = serde_json::from_slice(
        &std::fs::read(lite_node::books::Books::path(
            &data.path().join("node"),
            &world.manifest.protocol_state,
            &world.manifest.data_market,
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(books["overall"]["selected_failure"], 4);
    assert_eq!(books["alerted"], true);
    let tracker: Value =
        serde_json::from_slice(&std::fs::read(data.path().join("node/state/slot_selection_status.json")).unwrap())
            .unwrap();
    assert_eq!(tracker["was_selected"], true);
    assert_eq!(tracker["epoch_id"], 4);
}

fn status_port(log: &str) -> Option<u16> {
    log.lines()
        .find_map(|l| l.split("status API on http://").nth(1)?.split(' ').next()?.rsplit(':').next()?.parse().ok())
}

fn get(port: u16, path: &str) -> (u16, String) {
    let r = reqwest::blocking::get(format!("http://127.0.0.1:{port}{path}")).unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

#[test]
fn health_follows_epoch_processing_and_status_and_metrics_report_the_books() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let mut env = node_env(&world.url(), &world.manifest, 2);
    env.push(("STATUS_PORT".into(), "0".into()));
    env.push(("STATUS_HOST".into(), "127.0.0.1".into()));
    env.push(("LITE_NODE_STUCK_AFTER_SECS".into(), "2".into()));
    let mut node = start_node(&env, &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    let port = status_port(&node.log()).expect("the status port is logged");
    world.release_next_epoch();
    node.wait_for_journal(1);
    poll_until("healthy while epochs are processed", Duration::from_secs(10), || {
        (get(port, "/health").0 == 200).then_some(())
    });
    let (code, body) = poll_until("unhealthy once processing stalls", Duration::from_secs(30), || {
        Some(get(port, "/health")).filter(|r| r.0 == 503)
    });
    assert_eq!(code, 503);
    assert!(body.contains("no epoch processed for"), "{body}");
    world.release_next_epoch();
    poll_until("healthy again when it resumes", Duration::from_secs(30), || {
        (get(port, "/health").0 == 200).then_some(())
    });

    let status: Value = serde_json::from_str(&get(port, "/status").1).unwrap();
    assert_eq!((status["slotIds"].as_str(), status["slots"][0]["slotId"].as_u64()), (Some("2"), Some(2)), "{status}");
    assert_eq!(status["books"]["overall"]["selected_success"], 2);
    assert_eq!(status["slots"][0]["books"]["overall"]["selected_success"], 2);
    assert_eq!(
        (status["lastSelection"]["epoch_id"].as_u64(), status["lastSelection"]["slots_selected"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(status["books"]["last_submission"]["verdict"], "accepted");
    assert_eq!(status["books"]["last_submission"]["slot_id"], 2);
    assert!(status["computePackage"].as_str().is_some_and(|c| !c.is_empty()));
    let metrics = get(port, "/metrics").1;
    for line in [
        "lite_node_epochs_seen_total 2",
        "lite_node_epochs_selected_succeeded_total 2",
        "lite_node_epochs_selected_failed_total 0",
        "lite_node_submission_latency_seconds_count 2",
        "# TYPE lite_node_rpc_errors counter",
    ] {
        assert!(metrics.contains(line), "no `{line}` in\n{metrics}");
    }
    assert_eq!(node.stop(), 0);
}

#[test]
fn a_stuck_node_alerts_and_exits_with_code_3_after_three_checks() {
    let world = World::load();
    let api = TelegramStandin::start();
    let data = tempfile::tempdir().unwrap();
    let mut env = node_env(&world.url(), &world.manifest, 3);
    for (k, v) in [
        ("LITE_NODE_SAFETY_CHECK_SECS", "1".to_owned()),
        ("LITE_NODE_STUCK_AFTER_SECS", "1".into()),
        ("TELEGRAM_BOT_TOKEN", "123456:node-token".into()),
        ("TELEGRAM_CHAT_ID", "5".into()),
        ("TELEGRAM_API_URL", api.url()),
        ("TELEGRAM_NOTIFICATION_COOLDOWN", "0".into()),
    ] {
        env.push((k.into(), v));
    }
    let mut node = start_node(&env, &data.path().join("node"));
    assert_eq!(node.wait_exit(), 3, "{}", node.log());
    assert!(node.log().contains("stuck checks in a row): exiting for a restart"), "{}", node.log());
    poll_until("the unhealthy alerts", Duration::from_secs(30), || {
        (alerts_of(&api, "UNHEALTHY_EPOCH_PROCESSING").len() >= 2).then_some(())
    });
}

#[test]
fn alert_test_reports_each_channel_and_names_the_failure() {
    let api = TelegramStandin::start();
    let bin = env!("CARGO_BIN_EXE_lite-node");
    let run = |vars: &[(&str, String)]| {
        let out = std::process::Command::new(bin)
            .args(["alert", "test"])
            .env_clear()
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, _) = run(&[
        ("TELEGRAM_BOT_TOKEN", "123456:secret-token".into()),
        ("TELEGRAM_CHAT_ID", "77".into()),
        ("TELEGRAM_API_URL", api.url()),
        ("TELEGRAM_REPORTING_URL", api.url()),
        ("SLOT_ID", "9".into()),
    ]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("ok   telegram bot") && stdout.contains("sent to chat 77"), "{stdout}");
    assert!(stdout.contains("ok   reporting service"), "{stdout}");
    assert!(api.messages().iter().any(|m| m.contains("slot 9") && m.contains("test message")));

    let (code, stdout, _) = run(&[
        ("TELEGRAM_BOT_TOKEN", "123456:invalid-token".into()),
        ("TELEGRAM_CHAT_ID", "77".into()),
        ("TELEGRAM_API_URL", api.url()),
    ]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("fail telegram bot") && stdout.contains("Invalid bot token"), "{stdout}");
    assert!(!stdout.contains("invalid-token"), "the token never appears: {stdout}");

    let (code, _, stderr) = run(&[("TELEGRAM_BOT_TOKEN", "123456:x".into())]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("TELEGRAM_CHAT_ID is not"), "{stderr}");
    let (code, _, stderr) = run(&[]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("no alert channel configured"), "{stderr}");
}

/// Slot 2's compute-error drill, alerting through the Telegram stand-in.
fn telegram_drill_env(world: &World, api: &TelegramStandin) -> Vec<(String, String)> {
    drill_env(
        world,
        2,
        &[
            ("TELEGRAM_BOT_TOKEN", "123456:node-token".into()),
            ("TELEGRAM_CHAT_ID", "8".into()),
            ("TELEGRAM_API_URL", api.url()),
        ],
    )
}

#[test]
fn a_latched_alert_not_yet_delivered_survives_a_restart_and_arrives_exactly_once() {
    let world = World::load();
    let api = TelegramStandin::start();
    api.down();
    let data = tempfile::tempdir().unwrap();
    let env = telegram_drill_env(&world, &api);
    let dir = data.path().join("node");
    let mut node = start_node(&env, &dir);
    node.wait_for_log("watching ProtocolState");
    for _ in 0..3 {
        world.release_next_epoch();
    }
    node.wait_for_journal(3);
    let pending = dir.join("state/pending-alerts.json");
    poll_until("the latched alert kept on disk", Duration::from_secs(30), || {
        std::fs::read_to_string(&pending).ok().filter(|t| t.contains("ThreeFailures"))
    });
    node.kill(); // before Telegram ever answered
    api.up();
    let mut node = start_node(&env, &dir);
    node.wait_for_log("sending again the three-failure alert from before the restart");
    let alert = poll_until("the alert after the restart", Duration::from_secs(60), || {
        alerts_of(&api, "consecutive selected epochs failed").pop()
    });
    assert!(alert.contains("epoch 1:") && alert.contains("epoch 3:"), "{alert}");
    // Delivered everywhere: nothing left to send (the entry stays, delivered,
    // so that the epoch worked again after a crash does not send it twice).
    poll_until("the pending file's alert delivered", Duration::from_secs(30), || {
        let kept: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&pending).ok()?).ok()?;
        kept.iter().all(|e| e["remaining"].as_array().is_some_and(|r| r.is_empty())).then_some(())
    });
    world.release_next_epoch();
    node.wait_for_journal(4);
    assert_eq!(node.stop(), 0);
    assert_eq!(alerts_of(&api, "consecutive selected epochs failed").len(), 1, "{:?}", api.messages());
}

/// The three-failure alert is kept on disk before the books that latch it
/// are saved. Here the pending-alerts file cannot be written (its path is
/// taken by a directory) while Telegram is down, and the node is killed:
/// the books must not have been saved as "alerted" without the alert kept,
/// so after the restart (the path free, Telegram up) the alert arrives, once.
#[test]
fn the_three_failure_alert_is_kept_before_the_books_that_latch_it() {
    let world = World::load();
    let api = TelegramStandin::start();
    api.down();
    let data = tempfile::tempdir().unwrap();
    let env = telegram_drill_env(&world, &api);
    let dir = data.path().join("node");
    let pending = dir.join("state/pending-alerts.json");
    std::fs::create_dir_all(pending.join("in-the-way")).unwrap();
    let mut node = start_node(&env, &dir);
    node.wait_for_log("watching ProtocolState");
    for _ in 0..3 {
        world.release_next_epoch();
    }
    node.wait_for_journal(3);
    node.wait_for_log("pending-alerts.json");
    node.kill();
    std::fs::remove_dir_all(&pending).unwrap();
    api.up();
    let mut node = start_node(&env, &dir);
    node.wait_for_log("watching ProtocolState");
    let alert = poll_until("the three-failure alert after the restart", Duration::from_secs(60), || {
        alerts_of(&api, "consecutive selected epochs failed").pop()
    });
    assert!(alert.contains("epoch 1:") && alert.contains("epoch 3:"), "{alert}");
    world.release_next_epoch();
    node.wait_for_journal(4);
    assert_eq!(node.stop(), 0);
    assert_eq!(alerts_of(&api, "consecutive selected epochs failed").len(), 1, "{:?}", api.messages());
}

/// getTotalNodeCount never answers (the provider refuses the call): no
/// compute can know whether the slot works the epoch, so the epoch is a
/// failure before selection — counted, and /health says so at once — never a
/// silent "not selected".
#[test]
fn an_unknown_total_slot_count_fails_the_epoch_and_turns_health_unhealthy() {
    use alloy::sol_types::SolCall;
    let world = World::load();
    let selector = format!("0x{}", hex::encode(lite_node_protocol::contracts::getTotalNodeCountCall::SELECTOR));
    let anchor = lite_node_testkit::RpcFilter::start(&world.url(), &[&selector]);
    let data = tempfile::tempdir().unwrap();
    let mut env = node_env(&world.url(), &world.manifest, 2);
    for (k, v) in env.iter_mut() {
        if k == "POWERLOOM_RPC_URL" {
            *v = anchor.url();
        }
    }
    env.push(("STATUS_PORT".into(), "0".into()));
    env.push(("STATUS_HOST".into(), "127.0.0.1".into()));
    let mut node = start_node(&env, &data.path().join("node"));
    node.wait_for_log("watching ProtocolState");
    let port = status_port(&node.log()).expect("the status port is logged");
    world.release_next_epoch();
    let journal = node.wait_for_journal(1);
    assert_eq!(journal[0]["outcome"], "failed", "{}", journal[0]);
    let error = journal[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("total slot count is unknown"), "{error}");
    assert!(anchor.refused() > 0);
    // The journal line is written before the books: /health follows at once.
    let (_, body) = poll_until("unhealthy", Duration::from_secs(10), || {
        Some(get(port, "/health")).filter(|(code, _)| *code == 503)
    });
    assert!(body.contains("could not be computed") && body.contains("getTotalNodeCount"), "{body}");
    let status: Value = serde_json::from_str(&get(port, "/status").1).unwrap();
    assert_eq!(status["books"]["overall"]["not_selected"], 0, "never booked as not selected: {status}");
    let metrics = get(port, "/metrics").1;
    assert!(metrics.contains("lite_node_epochs_failed_before_selection_total 1"), "{metrics}");
    assert_eq!(node.stop(), 0);
}

/// The node's state cannot be written mid-run (here the cursor's path is
/// taken by a directory, which fails for root too): the error names the
/// file, /health turns unhealthy with it at once, and once the path is free
/// again the epoch is handled — recorded once, nothing lost.
#[test]
fn state_that_cannot_be_written_is_named_and_unhealthy_until_it_clears() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("node");
    let m = &world.manifest;
    let cursor = dir.join("state").join(format!(
        "cursor-{}-{}.json",
        m.protocol_state.to_lowercase(),
        m.data_market.to_lowercase()
    ));
    let mut env = node_env(&world.url(), &world.manifest, 2);
    env.push(("STATUS_PORT".into(), "0".into()));
    env.push(("STATUS_HOST".into(), "127.0.0.1".into()));
    let mut node = start_node(&env, &dir);
    node.wait_for_log("watching ProtocolState");
    let port = status_port(&node.log()).expect("the status port is logged");
    poll_until("the first cursor", Duration::from_secs(30), || cursor.is_file().then_some(()));
    std::fs::remove_file(&cursor).unwrap();
    std::fs::create_dir_all(cursor.join("in-the-way")).unwrap();

    world.release_next_epoch();
    node.wait_for_log("saving the node's state failed");
    let log = node.log();
    assert!(log.contains(&format!("writing {}", cursor.display())), "names the file: {log}");
    assert!(!log.contains("polling the anchor chain failed"), "not blamed on the anchor: {log}");
    let (code, body) = get(port, "/health");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("saving the node's state failed") && body.contains("cursor-"), "{body}");

    std::fs::remove_dir_all(&cursor).unwrap();
    node.wait_for_log("saving the node's state works again");
    poll_until("healthy again", Duration::from_secs(30), || (get(port, "/health").0 == 200).then_some(()));
    assert_eq!(node.journal().len(), 1, "recorded once");
    let saved: Value = serde_json::from_slice(&std::fs::read(&cursor).unwrap()).unwrap();
    assert_eq!(saved["last_epoch"], 1);
    assert_eq!(node.stop(), 0);
}

/// Slot 2's node, watching, with its status API and `extra` settings,
/// submitting to a collector port nothing listens on yet: the node, its
/// env, the collector's port and the status port.
fn node_before_its_collector(
    world: &World,
    data: &std::path::Path,
    extra: &[(&str, &str)],
) -> (lite_node_testkit::RunningNode, Vec<(String, String)>, u16, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut env = node_env(&world.url(), &world.manifest, 2);
    env.push(("LOCAL_COLLECTOR_HOST".into(), "127.0.0.1".into()));
    env.push(("LOCAL_COLLECTOR_PORT".into(), port.to_string()));
    env.push(("STATUS_PORT".into(), "0".into()));
    env.push(("STATUS_HOST".into(), "127.0.0.1".into()));
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let mut node = lite_node_testkit::RunningNode::start(bin, &env, &data.join("node"));
    node.wait_for_log("watching ProtocolState");
    let status = status_port(&node.log()).expect("the status port is logged");
    (node, env, port, status)
}

/// /health follows submissions, not only computes: while the collector cannot
/// be reached it is unhealthy at once (and /metrics counts the retries), and
/// an anchor whose head stops moving is unhealthy after
/// LITE_NODE_ANCHOR_STALL_SECS; both clear when the cause does.
#[test]
fn health_reflects_an_unreachable_collector_and_a_stalled_anchor() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let (mut node, env, port, status) =
        node_before_its_collector(&world, data.path(), &[("LITE_NODE_ANCHOR_STALL_SECS", "2")]);
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));

    // The anchor's head does not move (anvil mines only on transactions).
    let (_, body) = poll_until("unhealthy: the anchor is stalled", Duration::from_secs(30), || {
        Some(get(status, "/health")).filter(|r| r.0 == 503)
    });
    assert!(body.contains("the anchor chain's head has been stuck at block"), "{body}");

    // A release moves the head; the collector is down, so the submission waits.
    world.release_next_epoch();
    let (_, body) = poll_until("unhealthy: the collector is unreachable", Duration::from_secs(30), || {
        Some(get(status, "/health")).filter(|r| r.0 == 503 && r.1.contains("submitting to"))
    });
    assert!(body.contains(&format!("submitting to http://127.0.0.1:{port} failed")), "{body}");
    assert!(!body.contains("stuck at block"), "the head moved: {body}");
    let metrics = get(status, "/metrics").1;
    assert!(!metrics.contains("lite_node_submission_retries_total 0\n"), "{metrics}");
    assert!(metrics.contains("lite_node_last_epoch_seen 1"), "{metrics}");
    assert!(metrics.contains("lite_node_anchor_lag_blocks"), "{metrics}");

    // The collector comes up: the submission goes through and /health clears.
    let collector = lite_node_testkit::RunningCollector::start_with(bin, &env, port, &[]);
    node.wait_for_journal(1);
    assert_eq!(collector.verdicts().len(), 1, "{:?}", collector.verdicts());
    world.release_next_epoch();
    node.wait_for_journal(2);
    poll_until("healthy again", Duration::from_secs(30), || (get(status, "/health").0 == 200).then_some(()));
    assert_eq!(node.stop(), 0);
}

/// A submission that ended unanswered (its deadline passed while the
/// collector was down) leaves the collector's trouble on /health only while
/// it is true: once the collector is back, /health clears without waiting
/// for this slot's next selection.
#[test]
fn the_collectors_trouble_clears_when_it_is_back_without_another_submission() {
    let world = World::load();
    let data = tempfile::tempdir().unwrap();
    let (mut node, env, port, status) = node_before_its_collector(
        &world,
        data.path(),
        &[("LITE_NODE_ANCHOR_STALL_SECS", "3600"), ("LITE_NODE_DEADLINE_BUFFER_BLOCKS", "2")],
    );
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    world.release_next_epoch();
    poll_until("unhealthy: the collector is unreachable", Duration::from_secs(30), || {
        Some(get(status, "/health")).filter(|r| r.0 == 503 && r.1.contains("submitting to"))
    });
    // Past the deadline: the submission ends as missed.
    world.mine(10);
    let journal = node.wait_for_journal(1);
    let verdict = journal[0]["submissions"][0]["verdict"].as_str().unwrap_or_default();
    assert!(verdict.starts_with("missed: collector"), "{}", journal[0]);
    assert_eq!(get(status, "/health").0, 503, "the collector is still down");
    let _collector = lite_node_testkit::RunningCollector::start_with(bin, &env, port, &[]);
    poll_until("healthy again, with no epoch since", Duration::from_secs(30), || {
        (get(status, "/health").0 == 200).then_some(())
    });
    assert!(node.log().contains("answers again"), "{}", node.log());
    assert_eq!(node.journal().len(), 1);
    assert_eq!(node.stop(), 0);
}
