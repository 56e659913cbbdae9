//! `lite-node devnet` end to end: the real binary starts anvil, the
//! collector and its nodes; its record is re-verified by an independent
//! JavaScript checker; Ctrl-C stops everything it started.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use lite_node_testkit::{poll_until, toolchain_env, workspace_root};
use serde_json::Value;

use crate::support::{compute_new, edit};

fn devnet(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lite-node"));
    cmd.arg("devnet")
        .arg("--devnet-dir")
        .arg(workspace_root().join("devnet"))
        .arg("--run-dir")
        .arg(dir.join("run"))
        .args(["--interval-ms", "200"])
        .args(args)
        .env_clear()
        .envs(toolchain_env())
        .envs(lite_node_testkit::compute_build_env())
        .env("LITE_NODE_COMPUTE_CACHE_DIR", dir.join("cache"))
        .env("RUST_LOG", "warn")
        .current_dir(dir);
    cmd
}

/// A running devnet and its stdout, line by line.
fn spawn_devnet(dir: &Path, args: &[&str]) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut child =
        devnet(dir, args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("lite-node devnet starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// The variables that pin a node to `commit` of the package at `package`.
fn pinned(package: &Path, commit: &str) -> [(&'static str, String); 3] {
    [
        ("SNAPSHOTTER_COMPUTE_REPO", format!("file://{}", package.display())),
        ("SNAPSHOTTER_COMPUTE_REPO_BRANCH", "main".to_owned()),
        ("SNAPSHOTTER_COMPUTE_REPO_COMMIT", commit.to_owned()),
    ]
}

fn verify(record: &Path) -> std::process::Output {
    Command::new("node").arg(workspace_root().join("devnet/verify-record.js")).arg(record).output().expect("node runs")
}

#[test]
fn a_devnet_run_accepts_every_selected_slot_and_its_record_verifies_independently() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let out = devnet(dir.path(), &["--epochs", "3", "--nodes", "3", "--json", record.to_str().unwrap()])
        .output()
        .expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    // Three slots of three total: every slot is selected every epoch.
    assert!(stdout.contains("3 epochs in"), "{stdout}");
    assert!(stdout.contains("9 accepted, 0 rejected, 0 missing"), "{stdout}");
    for epoch in 1..=3 {
        assert!(
            stdout.lines().any(|l| l.trim_start().starts_with(&format!("{epoch} "))),
            "no row for {epoch}:\n{stdout}"
        );
    }

    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    assert_eq!(json["domain"]["name"], "PowerloomProtocolContract");
    // Two chains, as a market has them: the signatures are the anchor
    // chain's (7001), the epochs' blocks the source chain's (the world's).
    let market: Value = serde_json::from_slice(&std::fs::read(dir.path().join("run/market.json")).unwrap()).unwrap();
    assert_eq!(json["domain"]["chainId"], 7001);
    assert_eq!(market["anchor"]["chainId"], 7001, "{market}");
    assert_ne!(market["source"]["chainId"], 7001, "{market}");
    assert_eq!(json["domain"]["verifyingContract"], market["protocolState"], "{market}");
    assert_eq!(json["epochs"].as_array().unwrap().len(), 3);
    assert_eq!(json["nodes"].as_array().unwrap().len(), 3);
    for node in json["nodes"].as_array().unwrap() {
        let kib = node["peakRssKiB"].as_u64().expect("peak RSS recorded");
        assert!(kib > 1024, "{node}");
    }
    let verified = verify(&record);
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stdout));
    assert!(String::from_utf8_lossy(&verified.stdout).contains("verified 9 submissions over 3 epochs"));

    // The checker can fail: one byte of one snapshot changed.
    let path = PathBuf::from(json["epochs"][1]["submissions"][0]["snapshotPath"].as_str().unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[0] = b' ';
    std::fs::write(&path, bytes).unwrap();
    let verified = verify(&record);
    assert_eq!(verified.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&verified.stdout).contains("the snapshot's bytes hash to"));

    // anvil's HOME (where it spills state) is gone with it.
    assert!(!dir.path().join("run/anvil-home").exists());
}

#[test]
fn ctrl_c_stops_the_devnet_and_everything_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, rx) = spawn_devnet(dir.path(), &["--nodes", "2"]);
    let mut lines = Vec::new();
    // Two chains, each its own anvil: "source chain 31337 on http://…: …;
    // anchor chain 7001 on http://…: ProtocolState …".
    let anvils = poll_until("the devnet's first epoch row", Duration::from_secs(180), || {
        while let Ok(l) = rx.try_recv() {
            lines.push(l);
        }
        let chains = lines.iter().find(|l| l.starts_with("source chain "))?;
        let urls: Vec<String> = chains
            .split("http://")
            .skip(1)
            .filter_map(|rest| rest.split(':').take(2).collect::<Vec<_>>().join(":").into())
            .collect();
        let first_row = lines.iter().any(|l| l.trim_start().starts_with("1 "));
        first_row.then_some(urls)
    });
    assert_eq!(anvils.len(), 2, "{anvils:?}");
    assert!(lines.iter().any(|l| l.contains("; anchor chain 7001 on http://")), "{lines:?}");
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let status = poll_until("the devnet to exit", Duration::from_secs(60), || child.try_wait().unwrap());
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(5)) {
        lines.push(l);
    }
    let text = lines.join("\n");
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("(interrupted)"), "{text}");
    for anvil in &anvils {
        assert!(std::net::TcpStream::connect(anvil).is_err(), "anvil still listens on {anvil}");
    }
    for slot in 1..=2 {
        let log = std::fs::read_to_string(dir.path().join(format!("run/node-{slot}.log"))).unwrap();
        assert!(log.contains("shutting down"), "node {slot} was not stopped in order:\n{log}");
    }
    assert!(!dir.path().join("run/anvil-home").exists());
}

#[test]
fn bad_devnet_options_are_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out = devnet(dir.path(), &["--nodes", "3", "--total-slots", "2", "--world", "/nonexistent"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--total-slots 2 is below --nodes 3"), "{stderr}");
    assert!(stderr.contains("no devnet world in /nonexistent") && stderr.contains("build-world.sh"), "{stderr}");
}

#[test]
fn devnet_drills_deliver_exactly_one_three_failure_alert_per_drilled_slot() {
    let dir = tempfile::tempdir().unwrap();
    let api = lite_node_testkit::TelegramStandin::start();
    let args =
        ["--epochs", "6", "--fault", "compute-error:1", "--fault", "empty-return:2", "--telegram-api-url", &api.url()];
    let out = devnet(dir.path(), &args).output().expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("1→drill") && stdout.contains("2→drill"), "the drilled slots are shown: {stdout}");
    // The other two slots work normally: 6 epochs × 2.
    assert!(stdout.contains("12 accepted, 0 rejected, 0 missing"), "{stdout}");
    let alerts: Vec<String> =
        api.messages().into_iter().filter(|m| m.contains("consecutive selected epochs failed")).collect();
    assert_eq!(alerts.len(), 2, "{:?}", api.messages());
    let of = |slot: &str| alerts.iter().filter(|a| a.contains(slot)).cloned().collect::<Vec<_>>();
    let (one, two) = (of("slot 1 "), of("slot 2 "));
    assert_eq!((one.len(), two.len()), (1, 1), "exactly one per slot: {alerts:?}");
    assert!(one[0].contains("LITE_NODE_DRILL=compute-error"), "{}", one[0]);
    assert!(two[0].contains("but returned no snapshots"), "the empty-return failure: {}", two[0]);
    let request = &api.requests()[0];
    assert!(request["path"].as_str().unwrap().starts_with("/bot123456:"), "{request}");
}

/// The devnet survives its own drill: node 2 is SIGKILLed right after epoch
/// 5's release, the devnet restarts it, it rejoins where its cursor was and
/// submits what it owes — nothing twice — and the record re-verifies.
#[test]
fn a_killed_node_is_restarted_and_rejoins_without_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let args = ["--epochs", "8", "--nodes", "3", "--fault", "kill-node:2@5", "--json", record.to_str().unwrap()];
    let out = devnet(dir.path(), &args).output().expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("24 accepted, 0 rejected, 0 missing, 0 duplicate(s), 1 node restart(s)"), "{stdout}");
    let log = std::fs::read_to_string(dir.path().join("run/node-2.log")).unwrap();
    assert!(log.matches("watching ProtocolState").count() >= 2, "node 2 started twice:\n{log}");
    let verified = verify(&record);
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stdout));

    let bad = devnet(dir.path(), &["--fault", "kill-node:2"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected kill-node:SLOT@EPOCH"));
}

/// A node of 200 slots is SIGKILLed mid-burst — the collector has received
/// some of its submissions of epoch 2 and holds their answers back, others
/// are in flight — and the anchor moves on before it is back: the restarted node sends what it had sent again byte for byte (a
/// message signed again would carry a new deadline and header: a second
/// submission), so the collector holds one submission per slot, and no
/// slot's ledger holds two different messages for one epoch and project.
#[test]
fn a_node_killed_mid_burst_sends_the_same_bytes_again_never_a_second_submission() {
    let dir = mid_burst_drill(200, "kill-node-mid-burst:1@2");
    let log = std::fs::read_to_string(dir.path().join("run/node-1.log")).unwrap();
    assert!(log.contains("sending the same signed message again"), "the restarted node sent what it had sent");
    // Every slot signed one message per epoch and project, and each has its answer.
    for slot in 1..=200 {
        let ledger = dir.path().join(format!("run/node-1/slots/{slot}/state/submissions.jsonl"));
        let text = std::fs::read_to_string(&ledger).unwrap();
        let mut sent: BTreeMap<(u64, String), std::collections::BTreeSet<String>> = BTreeMap::new();
        let mut answered = std::collections::BTreeSet::new();
        for line in text.lines() {
            let line: Value = serde_json::from_str(line).unwrap();
            let key = (line["epoch_id"].as_u64().unwrap(), line["project_id"].as_str().unwrap().to_owned());
            match line["sent"].as_str() {
                Some(message) => {
                    sent.entry(key).or_default().insert(message.to_owned());
                }
                None => {
                    assert_eq!(line["verdict"], "accepted", "slot {slot}: {line}");
                    answered.insert(key);
                }
            }
        }
        assert_eq!(sent.len(), 3, "slot {slot}: one message an epoch: {text}");
        for (key, copies) in &sent {
            assert_eq!(copies.len(), 1, "slot {slot} {key:?}: signed twice: {copies:?}");
            assert!(answered.contains(key), "slot {slot} {key:?}: sent, never answered");
        }
    }
}

/// A power loss mid-burst: the node is killed with messages sent and
/// unanswered, and the `sending` lines its ledgers had not synced are gone.
/// It signs those messages again — with the deadline and header the epoch
/// fixed on disk before its first send — as the very bytes it sent: the
/// collector sees retransmissions, never a second submission.
#[test]
fn a_node_that_loses_power_mid_burst_signs_the_same_bytes_again_never_a_second_submission() {
    let dir = mid_burst_drill(100, "lose-power-mid-burst:1@2");
    // Nothing in its ledger told it what it had sent: it signed anew.
    let log = std::fs::read_to_string(dir.path().join("run/node-1.log")).unwrap();
    assert!(!log.contains("sending the same signed message again"), "the ledger lost what it sent: signed anew");
}

/// A devnet of one node of `slots` slots over 3 epochs with `fault` (a
/// mid-burst drill in epoch 2): it exits 0 with every slot accepted once
/// per epoch, no duplicate and one restart, its record verifies, and the
/// collector saw at least one message again, byte for byte (it held back
/// the answers to what it had received before the kill).
fn mid_burst_drill(slots: u64, fault: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let slots_arg = slots.to_string();
    let args = [
        "--epochs",
        "3",
        "--nodes",
        "1",
        "--slots-per-node",
        &slots_arg,
        "--total-slots",
        &slots_arg,
        "--fault",
        fault,
        "--json",
        record.to_str().unwrap(),
    ];
    let out = devnet(dir.path(), &args).output().expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    let summary = format!("{} accepted, 0 rejected, 0 missing, 0 duplicate(s), 1 node restart(s)", 3 * slots);
    assert!(stdout.contains(&summary), "{stdout}");
    let verified = verify(&record);
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stdout));
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    assert!(json["summary"]["retransmissions"].as_u64() >= Some(1), "{}", json["summary"]);
    dir
}

/// Anvil stops answering for 16 s (past every 15 s RPC timeout) right after
/// epoch 3's release: the driver, the collector and the nodes wait it out,
/// and every selected slot is still accepted, once.
#[test]
fn a_stalled_anvil_is_waited_out() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let args = ["--epochs", "5", "--nodes", "3", "--fault", "stall-anvil:16@3", "--json", record.to_str().unwrap()];
    let out = devnet(dir.path(), &args).output().expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("15 accepted, 0 rejected, 0 missing"), "{stdout}");
    // The stall happened: no node could read epoch 3 while anvil was
    // stopped, so each of its acknowledgements came 16 s or more after the
    // release was sent; the epochs around it were not held up.
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let latencies = |epoch_id: u64| -> Vec<f64> {
        let epoch = json["epochs"].as_array().unwrap().iter().find(|e| e["epochId"] == epoch_id).unwrap();
        epoch["submissions"].as_array().unwrap().iter().map(|s| s["latencyMs"].as_f64().unwrap()).collect()
    };
    let stalled = latencies(3);
    assert!(!stalled.is_empty() && stalled.iter().all(|ms| *ms >= 16_000.0), "epoch 3: {stalled:?}");
    let before = latencies(2);
    assert!(before.iter().all(|ms| *ms < 16_000.0), "epoch 2 came before the stall: {before:?}");
}

/// The devnet's full node holds a slot past `getTotalNodeCount` (the
/// market counts its lite nodes): the validators judge its submissions by
/// the highest slot that can hold a signer, full nodes included, as the
/// collector does, and finalize every pool of every epoch. (They once
/// ignored them all as `unregistered_slot`: 4 of 1,004 judged an epoch.)
#[test]
fn a_full_node_past_the_node_count_is_judged_and_finalized_by_the_validator() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--epochs", "2", "--nodes", "2", "--full-node-workers", "2", "--validators", "1"];
    let out = devnet(dir.path(), &args).output().expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("the validator finalized 2 of 2 epochs"), "{stdout}");
    assert_eq!(stdout.matches("full node: 5 of 5 pools accepted").count(), 2, "{stdout}");
    // Every pool finalized each epoch: the full node's five, with its votes.
    assert_eq!(stdout.matches("  5p ").count(), 2, "{stdout}");
    assert!(!stdout.contains("no use"), "{stdout}");
}

#[test]
fn a_devnet_with_a_validator_finalizes_every_epoch_and_its_batches_verify_independently() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let out =
        devnet(dir.path(), &["--epochs", "3", "--nodes", "3", "--validators", "1", "--json", record.to_str().unwrap()])
            .output()
            .expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("finalized (projects, votes, root)"), "{stdout}");
    assert!(stdout.contains("the validator finalized 3 of 3 epochs"), "{stdout}");
    assert!(stdout.contains("the chain finalized 3 of 3 epochs"), "{stdout}");
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    for epoch in json["epochs"].as_array().unwrap() {
        let votes: u64 =
            epoch["finalized"]["projects"].as_array().unwrap().iter().map(|p| p["votes"].as_u64().unwrap()).sum();
        assert!(votes >= 1, "{epoch}");
        for s in epoch["submissions"].as_array().unwrap() {
            assert_eq!(s["validatorVerdict"], "accepted", "{s}");
        }
    }
    let verified = verify(&record);
    let text = String::from_utf8_lossy(&verified.stdout);
    assert!(verified.status.success(), "{text}");
    assert!(text.contains("3 finalized batches recomputed"), "{text}");

    // A consumer read every finalized snapshot back from the validator's
    // API and verified each down to the root on chain (issue 54).
    let projects: u64 = json["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["onchain"]["cids"].as_array().map_or(0, |c| c.len() as u64))
        .sum();
    assert!(projects >= 3, "{projects}");
    assert_eq!(json["summary"]["readBack"]["verified"], projects, "{}", json["summary"]);
    assert_eq!(json["summary"]["readBack"]["failed"], Value::Array(Vec::new()));
    assert!(
        stdout.contains(&format!("a consumer read back {projects} finalized snapshot(s), each verified")),
        "{stdout}"
    );

    // The validator kept every epoch it finalized, with the bytes the nodes
    // sent of each CID in it (issue 54): every pair is one it can serve.
    let store = lite_node_validator::store::Store::open(&dir.path().join("run/validator-1/finalized.redb")).unwrap();
    for epoch in json["epochs"].as_array().unwrap() {
        let id = epoch["epochId"].as_u64().unwrap();
        let kept = store.epoch(id).unwrap().unwrap_or_else(|| panic!("epoch {id} is not in the validator's store"));
        assert_eq!(kept.root, epoch["finalized"]["root"].as_str().unwrap(), "epoch {id}");
        assert!(kept.without_bytes.is_empty(), "epoch {id}: no bytes for {:?}", kept.without_bytes);
        for (project, cid) in &kept.pairs {
            let bytes = store.block(cid).unwrap().unwrap_or_else(|| panic!("epoch {id} {project}: {cid} not kept"));
            assert_eq!(lite_node_protocol::cid::cid(&bytes), *cid);
        }
    }

    // The checker can fail: a vote count the submissions do not support.
    let mut tampered = json.clone();
    tampered["epochs"][0]["finalized"]["projects"][0]["votes"] = Value::from(99);
    std::fs::write(&record, serde_json::to_vec(&tampered).unwrap()).unwrap();
    let verified = verify(&record);
    assert_eq!(verified.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&verified.stdout).contains("(validator): finalized"));
}

/// Issue 54, item 7: a market that finalizes roots only. The validators
/// store no pair on chain; every epoch is finalized on chain all the same,
/// its pairs (read from the validators' APIs, proved against the root) are
/// the recomputed batch's, and the nodes' snapshots name what was finalized
/// before them (`previousSnapshots`) as read from those APIs: each entry one
/// the chain finalized.
#[test]
fn a_market_without_pairs_on_chain_finalizes_roots_and_its_nodes_read_earlier_epochs_from_the_validators() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let args = ["--epochs", "4", "--nodes", "2", "--validators", "2", "--pairs-on-chain", "false"];
    let out =
        devnet(dir.path(), &args).args(["--json", record.to_str().unwrap()]).output().expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("the chain finalized 4 of 4 epochs"), "{stdout}");
    let verified = verify(&record);
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stdout));
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    // What the chain finalized, epoch → CIDs (read from the APIs, proved).
    let mut finalized: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
    for e in json["epochs"].as_array().unwrap() {
        let cids = e["onchain"]["cids"].as_array().unwrap();
        assert!(!cids.is_empty(), "epoch {}: no pair read", e["epochId"]);
        let id = e["epochId"].as_u64().unwrap();
        finalized.insert(id, cids.iter().map(|c| c["snapshotCid"].as_str().unwrap().to_owned()).collect());
    }
    // The nodes' snapshots: those after epoch 1 name earlier epochs, each a
    // CID the chain finalized then.
    let mut named = 0;
    let mut stack = vec![dir.path().join("run")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if !path.components().any(|c| c.as_os_str() == "snapshots") {
                continue;
            }
            let Ok(snapshot) = serde_json::from_slice::<Value>(&std::fs::read(&path).unwrap()) else { continue };
            for pair in snapshot["previousSnapshots"].as_array().into_iter().flatten() {
                let (epoch, cid) = (pair[0].as_u64().unwrap(), pair[1].as_str().unwrap());
                assert!(
                    finalized.get(&epoch).is_some_and(|c| c.iter().any(|f| f == cid)),
                    "{}: names {cid} for epoch {epoch}, which the chain did not finalize",
                    path.display()
                );
                named += 1;
            }
        }
    }
    assert!(named > 0, "no node's snapshot names an earlier epoch's finalized CID");
}

/// Three validators, meshed with each other and the collector, each with
/// its own Redis and registered key: every epoch is finalized on chain once,
/// with the root the record's checker recomputes; one of them SIGKILLed
/// after epoch 2's release is started again, does not attest the epoch it
/// did not watch whole, and attests the later ones; another, cut off the
/// mesh for epochs 4 and 5 (its connections closed and refused, as a blocked
/// port would), attests neither, lists them as gaps, and attests epoch 6.
#[test]
fn three_validators_finalize_every_epoch_on_chain_and_one_killed_or_cut_off_does_not_stop_them() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let args = [
        "--epochs",
        "6",
        "--nodes",
        "2",
        "--slots-per-node",
        "3",
        "--validators",
        "3",
        "--fault",
        "kill-validator:2@2",
        "--fault",
        "cut-validator:3@4..5",
        "--json",
        record.to_str().unwrap(),
    ];
    let out = devnet(dir.path(), &args).output().expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("the chain finalized 6 of 6 epochs, 1 validator restart(s)"), "{stdout}");
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    // The SIGKILLed validator's store outlived the kill: at the end it
    // serves, whole and verified to the root on chain, epoch 1 (finalized
    // before the kill) and every epoch after its restart.
    let serves = &json["validatorUsage"][1]["serves"];
    let verified: Vec<u64> = serves["verified"].as_array().unwrap().iter().map(|e| e.as_u64().unwrap()).collect();
    assert!(verified.contains(&1) && verified.contains(&6), "validator 2 serves {serves}");
    assert!(stdout.contains("validator 2: serves "), "{stdout}");
    for epoch in json["epochs"].as_array().unwrap() {
        let e = epoch["epochId"].as_u64().unwrap();
        let chain = &epoch["onchain"];
        assert_eq!(chain["finalized"], true, "epoch {e}: {chain}");
        let validators = epoch["validators"].as_array().unwrap();
        assert_eq!(validators.len(), 3);
        let status = |i: usize| validators[i]["onchain"]["onchain_status"].as_str().unwrap_or("").to_owned();
        if e == 2 || e == 4 || e == 5 {
            let v = if e == 2 { 1 } else { 2 };
            assert_eq!(
                status(v),
                "skipped",
                "epoch {e}: a validator that did not watch it vouches for nothing: {epoch}"
            );
            let why = validators[v]["onchain"]["onchain_error"].as_str().unwrap_or("");
            assert!(why.contains("not listening"), "epoch {e}: it says why: {why}");
            assert_eq!(chain["attestations"], 2, "{chain}");
        } else {
            assert_eq!(chain["attestations"], 3, "epoch {e}: {chain}");
            for (i, v) in validators.iter().enumerate() {
                assert_eq!(v["batch"]["root"], chain["root"], "epoch {e} validator {}", i + 1);
                assert_eq!(status(i), "finalized", "epoch {e} validator {}", i + 1);
            }
        }
    }
    let verified = verify(&record);
    let text = String::from_utf8_lossy(&verified.stdout);
    assert!(verified.status.success(), "{text}");
    assert!(text.contains("3 validators' batches each epoch; 6 epochs finalized on chain"), "{text}");

    // The checker can fail: a chain root the validators do not hold.
    let mut tampered = json.clone();
    tampered["epochs"][0]["onchain"]["root"] = Value::from(format!("0x{}", "11".repeat(32)));
    std::fs::write(&record, serde_json::to_vec(&tampered).unwrap()).unwrap();
    let verified = verify(&record);
    assert_eq!(verified.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&verified.stdout).contains("(chain): the chain finalized root"));
}

/// Two nodes of five slots each: every selected slot's submission is
/// accepted (the collector checks each against its slot's registered
/// signer), each slot's state is kept apart, and the record verifies.
#[test]
fn nodes_with_several_slots_submit_for_each_and_the_record_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let args = ["--epochs", "3", "--nodes", "2", "--slots-per-node", "5", "--json", record.to_str().unwrap()];
    let out = devnet(dir.path(), &args).output().expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("10 slots registered"), "{stdout}");
    assert!(stdout.contains("30 accepted, 0 rejected, 0 missing"), "{stdout}");
    let log = std::fs::read_to_string(dir.path().join("run/node-2.log")).unwrap();
    assert!(log.contains("working 5 slots: 6-10"), "{log}");
    for slot in 6..=10 {
        let books = dir.path().join(format!("run/node-2/slots/{slot}/state"));
        assert!(std::fs::read_dir(&books).unwrap().count() >= 3, "slot {slot}'s own state in {}", books.display());
    }
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    assert_eq!(json["nodes"][1]["slots"], serde_json::json!([6, 7, 8, 9, 10]));
    let verified = verify(&record);
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stdout));
}

/// One node's ten slots all fail their third selected epoch together: one
/// Telegram message names the ten, not ten messages.
#[test]
fn a_drill_on_ten_slots_of_one_node_sends_one_three_failure_message_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let api = lite_node_testkit::TelegramStandin::start();
    let args = [
        "--epochs",
        "4",
        "--nodes",
        "2",
        "--slots-per-node",
        "10",
        "--fault",
        "compute-error:3",
        "--telegram-api-url",
        &api.url(),
    ];
    let out = devnet(dir.path(), &args).output().expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("10 drilled"), "{stdout}");
    // Node 2's slots work normally: 4 epochs × 10.
    assert!(stdout.contains("40 accepted, 0 rejected, 0 missing"), "{stdout}");
    let alerts: Vec<String> =
        api.messages().into_iter().filter(|m| m.contains("consecutive selected epochs failed")).collect();
    assert_eq!(alerts.len(), 1, "{:?}", api.messages());
    assert!(alerts[0].contains("lite-node slots 1-10 (10 slots)"), "{}", alerts[0]);
    assert!(alerts[0].contains("LITE_NODE_DRILL=compute-error"), "{}", alerts[0]);
}

/// A node the devnet did not start (here: a hand-made submission for a
/// slot that is not the devnet's) is answered but not counted: the run still
/// passes, and says how many such submissions came.
#[test]
fn submissions_from_a_node_the_devnet_did_not_start_are_not_counted_as_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let (mut child, rx) =
        spawn_devnet(dir.path(), &["--nodes", "2", "--epochs", "10", "--json", record.to_str().unwrap()]);
    let mut lines = Vec::new();
    let collector = poll_until("the devnet's collector", Duration::from_secs(180), || {
        while let Ok(l) = rx.try_recv() {
            lines.push(l);
        }
        lines.iter().find_map(|l| l.strip_prefix("collector on ")?.split(' ').next().map(str::to_owned))
    });
    let request = lite_node_protocol::proto::Request {
        slot_id: 42,
        deadline: 1_000_000,
        snapshot_cid: "bafkreicecnx2gvntm6fbcrvnc336qze6st5u7qq7457igegamd3bzkx7ri".into(),
        epoch_id: 1,
        project_id: "baseSnapshot:devnet-UNISWAPV3-ETH".into(),
    };
    let stranger = lite_node_protocol::proto::SnapshotSubmission {
        request: Some(request),
        signature: "11".repeat(65),
        ..Default::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let endpoint = format!("http://{collector}");
    let mut tries = 0;
    let in_time = || {
        tries += 1;
        let in_time = tries <= 20;
        Box::pin(async move { in_time }) as lite_node::submission::InTime
    };
    let verdict = runtime.block_on(lite_node::submission::submit(
        &lite_node::submission::Collector::new(&endpoint),
        stranger,
        in_time,
        |_| {},
    ));
    assert!(matches!(verdict, lite_node::submission::Verdict::Rejected(_)), "{verdict:?}");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            lines.push(l);
        }
        if started.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            panic!("the devnet did not finish:\n{}", lines.join("\n"));
        }
    };
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(5)) {
        lines.push(l);
    }
    let text = lines.join("\n");
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("1 submission(s) came from nodes this devnet did not start"), "{text}");
    assert!(text.contains("20 accepted, 0 rejected, 0 missing"), "{text}");
    // Shown, in the output and in the record, though not counted.
    assert!(text.contains("  epoch 1 slot 42 baseSnapshot:devnet-UNISWAPV3-ETH bafkrei"), "{text}");
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let foreign = record["foreign"].as_array().unwrap();
    assert_eq!(foreign.len(), 1, "{foreign:?}");
    assert_eq!((foreign[0]["slotId"].as_u64(), foreign[0]["verdict"].as_str()), (Some(42), Some("rejected")));
}

/// `compute run` against the devnet's chain, with the env file the devnet
/// writes for it, prints for the first epoch (no earlier snapshots on either
/// side) the CID each node submitted, and reads the total from the anchor.
#[test]
fn compute_run_on_the_devnet_chain_prints_the_cid_the_devnet_submitted() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, rx) = spawn_devnet(dir.path(), &["--nodes", "2"]);
    let mut lines = Vec::new();
    let env_file = poll_until("the devnet's first epoch row", Duration::from_secs(180), || {
        while let Ok(l) = rx.try_recv() {
            lines.push(l);
        }
        let hint = lines.iter().find_map(|l| l.strip_prefix("re-run an epoch on this chain: lite-node --env-file "))?;
        let file = hint.split(' ').next()?.to_owned();
        // Epoch 2's row: the anchor head is past epoch 1's release.
        lines.iter().any(|l| l.starts_with("    2 ")).then_some(file)
    });
    let released_at: u64 = lines
        .iter()
        .find_map(|l| l.strip_prefix("    1 ")?.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("epoch 1's row names its release block: {lines:?}"));
    let run = |slot: u64| {
        Command::new(env!("CARGO_BIN_EXE_lite-node"))
            .args(["--env-file", &env_file, "compute", "run", "--epoch-id", "1", "--json", "--slot", &slot.to_string()])
            .env_clear()
            .envs(toolchain_env())
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let outputs: Vec<_> = (1..=2).map(run).collect();
    // A lookup that starts after the release does not find it, and says so.
    let late = Command::new(env!("CARGO_BIN_EXE_lite-node"))
        .args(["--env-file", &env_file, "compute", "run", "--epoch-id", "1", "--from-block"])
        .arg((released_at + 1).to_string())
        .env_clear()
        .envs(toolchain_env())
        .current_dir(dir.path())
        .output()
        .unwrap();
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    poll_until("the devnet to exit", Duration::from_secs(60), || child.try_wait().unwrap());
    // Its env file, once the devnet has stopped: said so, not a chain error.
    let stale = run(1);
    let stale_err = String::from_utf8_lossy(&stale.stderr);
    assert_eq!(stale.status.code(), Some(2), "{stale_err}");
    assert!(stale_err.contains("is not running, and its chain went with it"), "{stale_err}");
    let late_err = String::from_utf8_lossy(&late.stderr);
    assert_eq!(late.status.code(), Some(2), "{late_err}");
    assert!(late_err.contains("epoch 1 has not been released on the anchor chain"), "{late_err}");
    for (slot, out) in (1..=2).zip(outputs) {
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["epoch"]["total_slots"], 2, "read from the anchor: {doc}");
        let snapshot = &doc["projects"][0]["snapshots"][0];
        let (project_id, cid) = (snapshot["project_id"].as_str().unwrap(), snapshot["cid"].as_str().unwrap());
        let log = std::fs::read_to_string(dir.path().join(format!("run/node-{slot}.log"))).unwrap();
        let accepted = format!("epoch 1 {project_id}: submission accepted ({cid})");
        assert!(log.contains(&accepted), "slot {slot}: no `{accepted}` in its node's log:\n{log}");
    }
}

/// An author's loop: a package from `compute new`, pinned by its first
/// commit, runs on the whole devnet with its own projects.json (its `pools`
/// become the world's), selection and all.
#[test]
fn the_devnet_runs_a_package_from_compute_new_with_its_own_projects() {
    let dir = tempfile::tempdir().unwrap();
    let (package, commit) = compute_new(dir.path(), "pool-state");

    let record = dir.path().join("run.json");
    let out = devnet(dir.path(), &["--epochs", "5", "--nodes", "2", "--json", record.to_str().unwrap()])
        .envs(pinned(&package, &commit))
        .env("PROJECTS_CONFIG", package.join("projects.json"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("compute package {commit} ready")), "{stdout}");
    assert!(stdout.contains("projects: poolState from ") && stdout.contains("over the world's 5 pools"), "{stdout}");
    assert!(stdout.contains("10 accepted, 0 rejected, 0 missing"), "{stdout}");
    // Pool-scoped: every submission names the pool its slot was assigned.
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    for epoch in json["epochs"].as_array().unwrap() {
        for s in epoch["submissions"].as_array().unwrap() {
            let project = s["projectId"].as_str().unwrap();
            assert!(project.starts_with("poolState:0x") && project.ends_with(":devnet-UNISWAPV3-ETH"), "{project}");
        }
    }
    let verified = verify(&record);
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stdout));

    // The BDS projects on this package: refused before any node starts, with the fix.
    let out = devnet(dir.path(), &["--epochs", "1"]).envs(pinned(&package, &commit)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("project baseSnapshot") && stderr.contains("--projects FILE or PROJECTS_CONFIG"),
        "{stderr}"
    );
}

/// A full node over three workers on the 1,000-pool world, through drills
/// on real processes and a real `redis-server`, in `mode`: worker 2
/// SIGKILLed as epoch 2 is released (the others finish its pools), then
/// `faults` at epochs 3 and 4. Every epoch: every pool accepted exactly once
/// from the full node; the record verifies independently. The drills are
/// split between the two assignment modes, each run once; what is the same
/// in both (a worker that stops mid-share, in each mode) is
/// `cluster::the_cluster_gathers_every_pool_once_and_finishes_a_stopped_workers_part`'s.
fn full_node_drill(mode: &str, faults: [&str; 2]) -> (PathBuf, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let mut args = vec!["--epochs", "4", "--nodes", "2", "--full-node-workers", "3", "--assign", mode];
    args.extend(["--pools", "1000", "--fault", "kill-worker:2@2", "--fault", faults[0], "--fault", faults[1]]);
    args.extend(["--json", record.to_str().unwrap()]);
    let out = devnet(dir.path(), &args).output().expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{mode}: stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let full = &json["fullNode"];
    let slot = full["slotId"].as_u64().unwrap();
    assert_eq!(slot, 3, "{mode}: the full node's slot follows the lite nodes'");
    let pools = json["pools"].as_array().unwrap().len();
    assert_eq!(pools, 1000);
    for epoch in json["epochs"].as_array().unwrap() {
        let e = epoch["epochId"].as_u64().unwrap();
        let mine: Vec<&Value> =
            epoch["submissions"].as_array().unwrap().iter().filter(|s| s["slotId"] == slot).collect();
        let projects: std::collections::BTreeSet<&str> =
            mine.iter().map(|s| s["projectId"].as_str().unwrap()).collect();
        assert_eq!((mine.len(), projects.len()), (pools, pools), "{mode} epoch {e}: every pool, once");
        assert!(mine.iter().all(|s| s["verdict"] == "accepted" && s["fullNode"] == true), "{mode} epoch {e}");
        let by = epoch["computedBy"].as_object().unwrap();
        if e == 2 {
            assert!(!by.contains_key("w2"), "{mode}: w2 was killed at epoch 2's release: {by:?}");
            assert_eq!(by.values().map(|n| n.as_u64().unwrap()).sum::<u64>(), 1000, "{mode}: {by:?}");
        }
    }
    assert!(stdout.contains("0 missing, 0 duplicate(s)"), "{mode}: {stdout}");
    let verified = verify(&record);
    assert!(verified.status.success(), "{mode}: {}", String::from_utf8_lossy(&verified.stdout));
    let text = String::from_utf8_lossy(&verified.stdout);
    assert!(text.contains("covered all 1000 pools once per epoch"), "{mode}: {text}");
    let coordinator = std::fs::read_to_string(dir.path().join("run/full-node.log")).unwrap();
    (record, dir, coordinator)
}

/// Peer index: worker 3 SIGSTOPped while it holds items of epoch 3 and
/// continued once the others finished them (its late results meet the
/// fence); the coordinator SIGKILLed mid-gather of epoch 4 (restarted, it
/// resumes the epoch from Redis and submits nothing twice).
#[test]
fn a_full_node_by_peer_index_covers_every_pool_once_through_a_killed_and_a_stopped_worker_and_coordinator() {
    let (record, dir, coordinator) = full_node_drill("peer-index", ["stop-worker:3@3", "kill-coordinator@4"]);
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let full = &json["fullNode"];
    assert!(full["fenced"].as_u64().unwrap() >= 1, "the stopped worker's late results: {full}");
    let lines: Vec<&str> =
        coordinator.lines().filter(|l| l.contains("epoch 4") || l.contains("watching Protocol")).take(12).collect();
    assert!(
        coordinator.contains("resumed from the cluster's board"),
        "the restarted coordinator resumed:\n{}",
        lines.join("\n")
    );
    let stopped = std::fs::read_to_string(dir.path().join("run/worker-w3.log")).unwrap();
    assert!(stopped.contains("refused by the fence"), "the late results are logged");
}

/// Peer index: worker 2 loses its source RPC at epoch 2's release but stays
/// a live member (its heartbeats hold): its shares fail a few rounds in a
/// row, it steps aside, and the others compute every pool of every epoch
/// (issue 55, item 8: its items stayed with it, and every epoch was a
/// selected failure).
#[test]
fn a_full_node_worker_whose_shares_keep_failing_steps_aside_and_the_others_cover_its_pools() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let args = [
        "--epochs",
        "4",
        "--nodes",
        "1",
        "--full-node-workers",
        "3",
        "--assign",
        "peer-index",
        "--fault",
        "break-worker:2@2",
        "--json",
        record.to_str().unwrap(),
    ];
    let out = devnet(dir.path(), &args).output().expect("lite-node devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // The broken worker's own account: whether its shares failed, and why it did or did not step aside.
    let broken = std::fs::read_to_string(dir.path().join("run/worker-w2.log")).unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}\nworker w2's log:\n{broken}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let slot = json["fullNode"]["slotId"].as_u64().unwrap();
    let pools = json["pools"].as_array().unwrap().len();
    for epoch in json["epochs"].as_array().unwrap() {
        let e = epoch["epochId"].as_u64().unwrap();
        let mine: Vec<&Value> =
            epoch["submissions"].as_array().unwrap().iter().filter(|s| s["slotId"] == slot).collect();
        assert_eq!(mine.len(), pools, "epoch {e}: every pool");
        assert!(mine.iter().all(|s| s["verdict"] == "accepted"), "epoch {e}");
        if e >= 3 {
            let by = epoch["computedBy"].as_object().unwrap();
            assert!(!by.contains_key("w2"), "epoch {e}: w2 stepped aside: {by:?}");
        }
    }
    assert!(broken.contains("stepping aside"), "{broken}");
    assert!(verify(&record).status.success());
}

/// Least backlog: the cluster's Redis restarted (append-only) as epoch 3 is
/// released, and emptied (`FLUSHALL`) mid-gather of epoch 4 (the
/// coordinator opens it again).
#[test]
fn a_full_node_by_least_backlog_covers_every_pool_once_through_a_killed_worker_and_redis_restarted_and_emptied() {
    let (_, _dir, coordinator) = full_node_drill("least-backlog", ["restart-cluster-redis@3", "flush-cluster-redis@4"]);
    assert!(
        coordinator.contains("epoch 4 baseSnapshot: the cluster's board no longer holds the epoch"),
        "the flush of epoch 4 was seen and the epoch opened again"
    );
}

/// An author's processor that panics in odd epochs and returns two
/// snapshots for its pool in even ones, on the devnet: each epoch's row
/// names the reason as soon as the node knows it (no epoch waits out the
/// timeout), the run exits non-zero, and the record still verifies.
#[test]
fn a_processor_that_fails_is_named_in_the_table_and_not_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let (package, _) = compute_new(dir.path(), "pool-state");
    let selected = "        Ok(vec![self.snapshot(epoch, host, pool)?])";
    let broken = "        if epoch.epoch_id % 2 == 1 {
            panic!(\"boom in epoch {}\", epoch.epoch_id);
        }
        let once = self.snapshot(epoch, host, pool)?;
        Ok(vec![once.clone(), once])";
    edit(&package.join("pool-state/src/lib.rs"), selected, broken);
    lite_node_testkit::git(&package, &["commit", "-qam", "break the processor"]);
    let commit = lite_node_testkit::git(&package, &["rev-parse", "HEAD"]);

    let record = dir.path().join("run.json");
    let projects = package.join("projects.json");
    let args = ["--epochs", "4", "--nodes", "2", "--projects", projects.to_str().unwrap()];
    let out = devnet(dir.path(), &args)
        .args(["--json", record.to_str().unwrap()])
        .envs(pinned(&package, &commit))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    let panicked =
        "slots 1-2: poolState failed: PoolStateProcessor panicked: boom in epoch 1 (run/node-1.log, run/node-2.log)";
    assert!(stdout.contains(panicked), "{stdout}");
    // One row line per pool: slots that drew the same pool share the reason.
    assert!(
        stdout.contains(": poolState failed: returned two snapshots for data source `0x"),
        "the second snapshot is named, nothing of it submitted:\n{stdout}"
    );
    assert!(!stdout.contains("not answered in time"), "{stdout}");
    assert!(stdout.contains("0 accepted, 0 rejected, 8 missing (8 of them ended in their node"), "{stdout}");
    // Four epochs within one epoch's timeout (60 s): none was waited out.
    let took: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("4 epochs in ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("a summary line:\n{stdout}"));
    assert!(took < 60.0, "{stdout}");
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    assert_eq!(json["summary"]["endedWithoutSending"], 8, "{}", json["summary"]);
    assert_eq!(json["epochs"][0]["endedWithoutSending"].as_array().map(Vec::len), Some(2));
    // The record is true (its bytes, signatures and selection hold) and says
    // which slots sent nothing.
    let verified = verify(&record);
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(verified.status.success(), "{said}");
    assert!(said.contains("8 selected slot(s) sent nothing, each explained by the record"), "{said}");
}

/// What a devnet run with `--operators` or `--hostile` must show whatever
/// else it does: every epoch finalized by every validator (each a batch of
/// every pool) and on chain, nothing rejected or missing, and the record
/// re-verified independently. Returns the record.
fn every_epoch_finalized_by_every_validator(args: &[&str], epochs: u64, validators: usize) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let out = devnet(dir.path(), args).arg("--json").arg(&record).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "devnet {args:?} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let summary = &json["summary"];
    assert_eq!((summary["rejected"].as_u64(), summary["missing"].as_u64()), (Some(0), Some(0)), "{stdout}");
    assert_eq!(summary["onchainFinalized"].as_u64(), Some(epochs), "{stdout}");
    let pools = json["pools"].as_array().unwrap().len();
    for e in json["epochs"].as_array().unwrap() {
        let of = e["validators"].as_array().unwrap();
        assert_eq!(of.len(), validators);
        for v in of {
            let projects = v["batch"]["projects"].as_array().map_or(0, Vec::len);
            assert_eq!(
                projects, pools,
                "epoch {} validator {}: {projects} of {pools} pools\n{stdout}",
                e["epochId"], v["index"]
            );
            assert_eq!(v["onchain"]["onchain_status"], "finalized", "epoch {} validator {}", e["epochId"], v["index"]);
        }
    }
    let verified = verify(&record);
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stdout));
    // What each validator took of the machine is reported.
    for u in json["validatorUsage"].as_array().unwrap() {
        assert!(u["peakRssKiB"].as_u64().unwrap() > 0 && u["cpuSecs"].as_f64().is_some(), "{u}");
    }
    json
}

/// Issue 53: a market of many operators, each with its own collector on the
/// validators' gossip topic (20 `lite-node collector` processes, the rest in
/// the devnet's process), and 5 validators: every operator's submission is
/// answered Success by its own collector the first time (none asked to
/// retry, none refused) and finalized by every validator. The full size —
/// 200 operators, a full node over 1,000 pools, 10 epochs — is the same
/// command (docs/devnet.md).
#[test]
fn a_market_of_many_operators_collectors_answers_each_success_and_finalizes_every_submission() {
    let (operators, epochs) = (24, 3);
    let args = ["--full-node-workers", "1", "--validators", "5", "--operators", "24", "--epochs", "3"];
    let json = every_epoch_finalized_by_every_validator(&args, epochs, 5);
    let o = &json["operators"];
    assert_eq!(o["collectorProcesses"], 20);
    assert_eq!(o["sent"].as_u64(), Some(operators * epochs), "every operator selected every epoch: {o}");
    assert_eq!(o["success"], o["sent"], "{o}");
    assert_eq!(
        (o["refused"].as_u64(), o["retry"].as_u64(), o["nothingToSign"].as_u64()),
        (Some(0), Some(0), Some(0)),
        "{o}"
    );
    // Each operator's votes are in every epoch's finalized batch.
    for e in json["epochs"].as_array().unwrap() {
        let by_operators = e["submissions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["slotId"].as_u64() > Some(5) && s["validatorVerdict"] == "accepted")
            .count() as u64;
        assert_eq!(by_operators, operators, "epoch {}", e["epochId"]);
    }
}

/// Issue 53, the hostile variant: the same market with peers attacking the
/// validators' gossip the whole run — slot holders flooding epochs not yet
/// released, forgers naming registered slots, replayers sending accepted
/// submissions again, sinks that subscribe and stop reading. Every epoch is
/// still finalized by every validator with every operator's submission,
/// each validator's memory stays bounded, and each validator shows the
/// attackers contained on /metrics (their useless messages counted, then
/// left unread or their peers graylisted, the floods banned).
#[test]
fn hostile_peers_on_the_gossip_stop_no_epoch_and_are_contained_by_every_validator() {
    let args =
        ["--full-node-workers", "1", "--validators", "3", "--operators", "8", "--hostile", "20", "--epochs", "3"];
    let json = every_epoch_finalized_by_every_validator(&args, 3, 3);
    let o = &json["operators"];
    assert_eq!((o["success"].as_u64(), o["refused"].as_u64()), (Some(24), Some(0)), "{o}");
    for u in json["validatorUsage"].as_array().unwrap() {
        let g = &u["gossip"];
        let n = |k: &str| g[k].as_u64().unwrap_or(0);
        // The floods are read as unreleased epochs; the forgeries as a wrong
        // signer, or a closed window when their epoch's closed first.
        assert!(n("unwanted_unreleased_epoch") > 0, "the floods were read: {u}");
        assert!(n("unwanted_wrong_signer") + n("unwanted_window_closed") > 0, "the forgeries were read: {u}");
        assert!(n("messages_throttled") + n("graylistings") > 0, "the attackers were not contained: {u}");
        // The flood attackers, graylisted again and again, are banned.
        assert!(n("banned") >= 1, "no attacker banned: {u}");
        // Bounded: an honest validator of this market takes ~50 MiB.
        assert!(u["peakRssKiB"].as_u64().unwrap() < 256 * 1024, "validator memory: {u}");
    }
}
