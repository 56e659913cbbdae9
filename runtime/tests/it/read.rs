//! `lite-node read` against a real anvil with the devnet's ProtocolState and
//! a validator's API over its finalized-data store (real Redis): the
//! snapshot is printed only once its bytes, CID, proof and root hold to the
//! root on chain; a hostile server's tampered byte, CID, proof or root, and
//! an epoch not finalized on chain, each exit 1 naming the check; whole
//! epochs, ranges and `--follow`; the JavaScript verifier alike; archives
//! restored into a read-only server with nothing of the market running.

use std::{collections::BTreeMap, sync::Arc};

use lite_node_testkit::{RedisServer, world::World};
use lite_node_validator::{
    Market,
    store::{FinalizedEpoch, Store},
};
use serde_json::Value;

use crate::support::Node;

/// Serves `bundle` for any epoch and project (a hostile server's answer);
/// its base URL.
fn serving(runtime: &tokio::runtime::Runtime, bundle: Value) -> String {
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .route("/data/{epoch}/{project}", axum::routing::get(move || async move { axum::Json(bundle.clone()) }));
    runtime.spawn(async move { axum::serve(listener, app).await });
    base
}

/// Answers every read with a body that never ends (a hostile server's);
/// its base URL.
fn serving_endless(runtime: &tokio::runtime::Runtime) -> String {
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let endless = || async {
        let chunk = axum::body::Bytes::from(vec![b' '; 64 << 10]);
        let chunks = futures_util::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
        axum::body::Body::from_stream(chunks)
    };
    let app = axum::Router::new().fallback(axum::routing::get(endless));
    runtime.spawn(async move { axum::serve(listener, app).await });
    base
}

/// Serves `ndjson` as every epoch's whole-epoch bundle (a hostile
/// server's); its base URL.
fn serving_epoch(runtime: &tokio::runtime::Runtime, ndjson: String) -> String {
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/data/{epoch}", axum::routing::get(move || async move { ndjson.clone() }));
    runtime.spawn(async move { axum::serve(listener, app).await });
    base
}

#[test]
fn a_snapshot_is_printed_only_when_every_check_holds_and_a_tampered_answer_names_its_check() {
    let world = World::load();
    world.register_validators(2);
    let snapshot = |i: u64| format!(r#"{{"pool":{i},"trades":[{i},{}]}}"#, i * 2);
    let pairs: Vec<(String, String)> = (0..4)
        .map(|i| (format!("baseSnapshot:0xpool{i}:devnet"), lite_node_protocol::cid(snapshot(i).as_bytes())))
        .collect();
    let bytes: BTreeMap<String, Vec<u8>> =
        (0..4).map(|i| (lite_node_protocol::cid(snapshot(i).as_bytes()), snapshot(i).into_bytes())).collect();
    world.release_epoch_with_id(6);
    let root5 = world.submit_batch(5, "bafy-batch-5", &pairs);
    world.attest_as(1, 5, "bafy-batch-5", root5);
    // Epoch 6: a batch on chain, one attestation of two — not finalized.
    let root6 = world.submit_batch(6, "bafy-batch-6", &pairs[..2]);

    // The validator's store and its API.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&dir.path().join("finalized.redb")).unwrap());
    for (epoch_id, root, pairs) in [(5, root5, &pairs[..]), (6, root6, &pairs[..2])] {
        let epoch = FinalizedEpoch {
            epoch_id,
            root: alloy::primitives::B256::from(root).to_string(),
            batch_cid: format!("bafy-batch-{epoch_id}"),
            pairs: pairs.to_vec(),
            finalized_at: 1,
            without_bytes: Vec::new(),
        };
        assert!(store.put_epoch(&epoch, &bytes).unwrap());
    }
    // Epoch 5's outcome on chain, as the validator's on-chain worker records
    // it (its event goes out on /data/events); epoch 6 awaits the chain.
    let finalized = |root: [u8; 32]| lite_node_validator::store::OnChain {
        finalized: true,
        block: None,
        tx: None,
        root: Some(alloy::primitives::B256::from(root).to_string()),
    };
    store.settle(5, &finalized(root5)).unwrap();
    let redis = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let scope = lite_node_protocol::submission::Scope {
        data_market: world.manifest.data_market.parse().unwrap(),
        protocol_state: world.manifest.protocol_state.parse().unwrap(),
    };
    let market = Arc::new(Market::new(scope, world.manifest.chain_id, "validator-1"));
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let honest = format!("http://{}", listener.local_addr().unwrap());
    let client = redis::Client::open(redis.url()).unwrap();
    runtime.spawn(lite_node_validator::api::serve_with_store(
        market,
        client,
        listener,
        std::future::pending(),
        None,
        Some(lite_node_validator::api::Data { store: store.clone(), rate_per_client: None, retention_days: None }),
    ));

    let node = Node::new()
        .env("POWERLOOM_RPC_URL", world.url())
        .env("PROTOCOL_STATE_CONTRACT", world.manifest.protocol_state.clone())
        .env("DATA_MARKET_CONTRACT", world.manifest.data_market.clone());
    let (project, _) = &pairs[2];
    let read = |api: &str, epoch: &str| node.run(&["read", "--api", api, "--epoch", epoch, "--project", project]);

    // Every check holds: the snapshot, byte for byte; a dead server first
    // is passed over.
    let run = read(&format!("http://127.0.0.1:1,{honest}"), "5");
    run.assert_ok();
    assert_eq!(run.stdout, format!("{}\n", snapshot(2)));
    assert!(run.stderr.contains("verified:") && run.stderr.contains("finalized for epoch 5"), "{}", run.stderr);

    // A hostile server: each tampering is named by the check it fails.
    let bundle: Value = runtime
        .block_on(async { reqwest::get(format!("{honest}/data/5/{project}")).await.unwrap().text().await.unwrap() })
        .parse()
        .unwrap();
    let tampered = |f: &dyn Fn(&mut Value)| {
        let mut b = bundle.clone();
        f(&mut b);
        b
    };
    let other_root = alloy::primitives::B256::repeat_byte(7).to_string();
    for (bundle, check) in [
        (tampered(&|b| b["snapshot"] = Value::from(snapshot(2).replace("trades", "tradez"))), "bytes hash to the CID"),
        (tampered(&|b| b["cid"] = Value::from(lite_node_protocol::cid(b"{}"))), "bytes hash to the CID"),
        (tampered(&|b| b["proof"][0] = Value::from(other_root.clone())), "Merkle proof"),
        (tampered(&|b| b["root"] = Value::from(other_root.clone())), "Merkle proof"),
        (tampered(&|b| b["epochId"] = Value::from(4)), "what was asked"),
    ] {
        let run = read(&serving(&runtime, bundle), "5");
        assert_eq!(run.code, 1, "{check}: {run:?}");
        assert!(run.stderr.contains(&format!("check `{check}` failed")), "{check}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{check}: nothing printed: {}", run.stdout);
    }
    // An answer that never ends is read up to a bundle's longest line, and
    // refused there: one project, a whole epoch, and a range.
    let endless = serving_endless(&runtime);
    let range = ["--project", project.as_str(), "--from", "5", "--to", "6"];
    for args in [&["--project", project.as_str(), "--epoch", "5"][..], &["--epoch", "5"][..], &range[..]] {
        let run = node.run(&[&["read", "--api", endless.as_str()][..], args].concat());
        assert_eq!(run.code, 1, "{run:?}");
        assert!(run.stderr.contains("longer than"), "{args:?}: {}", run.stderr);
    }
    // A whole consistent forgery (its own bytes, CID, proof and root): only
    // the chain can refuse it.
    let forged_pairs = [(project.clone(), lite_node_protocol::cid(b"{\"forged\":true}"))];
    let forged_tree =
        lite_node_protocol::merkle::Tree::of(forged_pairs.iter().map(|(p, c)| (p.as_str(), c.as_str()))).unwrap();
    let forged = tampered(&|b| {
        b["snapshot"] = Value::from("{\"forged\":true}");
        b["cid"] = Value::from(forged_pairs[0].1.clone());
        b["proof"] = Value::Array(Vec::new());
        b["root"] = Value::from(forged_tree.root().to_string());
    });
    let run = read(&serving(&runtime, forged.clone()), "5");
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("check `root finalized on chain` failed"), "{}", run.stderr);

    // A hostile server first and an honest one after: the forgery is passed
    // over, named, and the honest answer printed.
    let run = read(&format!("{},{honest}", serving(&runtime, forged.clone())), "5");
    run.assert_ok();
    assert_eq!(run.stdout, format!("{}\n", snapshot(2)));
    assert!(
        run.stderr.contains("passed over") && run.stderr.contains("check `root finalized on chain` failed"),
        "{}",
        run.stderr
    );

    // A whole epoch: one bundle, every line checked, the multiproof to the
    // root on chain; printed as NDJSON, each snapshot as the JSON it is.
    let run = node.run(&["read", "--api", &honest, "--epoch", "5"]);
    run.assert_ok();
    let lines: Vec<Value> = run.stdout.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(lines.len(), 4, "{}", run.stdout);
    for (line, (project, cid)) in lines.iter().zip(&pairs) {
        assert_eq!((line["projectId"].as_str(), line["cid"].as_str()), (Some(project.as_str()), Some(cid.as_str())));
        assert_eq!(line["epochId"], 5);
        assert_eq!(line["snapshot"].to_string(), String::from_utf8(bytes[cid].clone()).unwrap());
    }
    assert!(run.stderr.contains("verified: epoch 5, 4 project(s)"), "{}", run.stderr);
    // A hostile whole-epoch server: a byte, the multiproof, a line dropped.
    let whole =
        runtime.block_on(async { reqwest::get(format!("{honest}/data/5")).await.unwrap().text().await.unwrap() });
    let mut whole_lines: Vec<Value> = whole.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(whole_lines.len(), 5, "a header and four projects: {whole}");
    let joined = |lines: &[Value]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    let mut byte = whole_lines.clone();
    byte[2]["snapshot"] = Value::from(snapshot(1).replace('1', "9"));
    let mut proof = whole_lines.clone();
    proof[0]["multiproof"]["flags"][0] = Value::from(false);
    whole_lines.remove(3);
    for (ndjson, check) in [
        (joined(&byte), "bytes hash to the CID"),
        (joined(&proof), "Merkle proof"),
        (joined(&whole_lines), "what was asked"),
    ] {
        let run = node.run(&["read", "--api", &serving_epoch(&runtime, ndjson), "--epoch", "5"]);
        assert_eq!(run.code, 1, "{check}: {run:?}");
        assert!(run.stderr.contains(&format!("check `{check}` failed")), "{check}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{check}: nothing printed: {}", run.stdout);
    }
    // A range of one project: each epoch in turn, stopping at the first that
    // does not hold (epoch 6 is not finalized on chain).
    let project = &pairs[1].0;
    let run = node.run(&["read", "--api", &honest, "--from", "5", "--to", "6", "--project", project]);
    assert_eq!(run.code, 1, "{run:?}");
    let printed: Vec<Value> = run.stdout.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(printed.len(), 1, "{}", run.stdout);
    assert_eq!((printed[0]["epochId"].as_u64(), printed[0]["projectId"].as_str()), (Some(5), Some(project.as_str())));
    assert!(
        run.stderr.contains("epoch 6 of data market") && run.stderr.contains("is not finalized on"),
        "{}",
        run.stderr
    );

    // The JavaScript verifier (clients/js) reads alike: the snapshot when
    // every check holds, exit 1 naming the check otherwise.
    let js = |api: &str| {
        let out = std::process::Command::new("node")
            .arg(lite_node_testkit::workspace_root().join("clients/js/verify-bundle.js"))
            .args(["--api", api, "--epoch", "5", "--project", &pairs[2].0, "--rpc", &world.url()])
            .args(["--protocol-state", &world.manifest.protocol_state, "--data-market", &world.manifest.data_market])
            .output()
            .expect("node runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = js(&format!("http://127.0.0.1:1,{honest}"));
    assert_eq!((code, stdout.as_str()), (Some(0), format!("{}\n", snapshot(2)).as_str()), "{stderr}");
    assert!(stderr.contains("verified:") && stderr.contains("passed over http://127.0.0.1:1"), "{stderr}");
    for (bundle, check) in [
        (tampered(&|b| b["snapshot"] = Value::from(snapshot(2).replace("trades", "tradez"))), "bytes hash to the CID"),
        (tampered(&|b| b["proof"][0] = Value::from(other_root.clone())), "Merkle proof"),
        (tampered(&|b| b["epochId"] = Value::from(4)), "what was asked"),
        (forged.clone(), "root finalized on chain"),
    ] {
        let (code, stdout, stderr) = js(&serving(&runtime, bundle));
        assert_eq!(code, Some(1), "{check}: {stderr}");
        assert!(stderr.contains(&format!("check `{check}` failed")) && stdout.is_empty(), "{check}: {stderr}");
    }
    let spaced = tampered(&|b| {
        let text = snapshot(2).replace(',', ", ");
        b["cid"] = Value::from(lite_node_protocol::cid(text.as_bytes()));
        b["snapshot"] = Value::from(text);
    });
    let (code, _, stderr) = js(&serving(&runtime, spaced));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("check `canonical JSON` failed"), "{stderr}");

    // Not finalized on chain yet: nothing to trust.
    let (project, _) = &pairs[1];
    let run = node.run(&["read", "--api", &honest, "--epoch", "6", "--project", project]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("is not finalized on"), "{}", run.stderr);
    // Nobody has it: every server's answer named.
    let run = node.run(&["read", "--api", &honest, "--epoch", "9", "--project", project]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("not finalized here yet"), "{}", run.stderr);
    // Bad input: exit 2 naming it.
    let run = node.run(&["read", "--api", "not a url", "--epoch", "5", "--project", project]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--api not a url: not a URL"), "{}", run.stderr);

    // --follow: each epoch once, as the chain finalizes it — epoch 5 at
    // once; epoch 6 (kept by the server, not finalized on chain) only once
    // the chain finalizes it.
    let mut follow = std::process::Command::new(env!("CARGO_BIN_EXE_lite-node"))
        .args(["read", "--api", &honest, "--follow", "--from", "5"])
        .env_clear()
        .env("POWERLOOM_RPC_URL", world.url())
        .env("PROTOCOL_STATE_CONTRACT", &world.manifest.protocol_state)
        .env("DATA_MARKET_CONTRACT", &world.manifest.data_market)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let (lines, read_line) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let epoch_of = |line: String| line.parse::<Value>().unwrap()["epochId"].as_u64().unwrap();
    let within = std::time::Duration::from_secs(30);
    let five: Vec<u64> = (0..4).map(|_| epoch_of(read_line.recv_timeout(within).expect("epoch 5 followed"))).collect();
    assert_eq!(five, [5, 5, 5, 5]);
    let early = read_line.recv_timeout(std::time::Duration::from_millis(1500));
    assert!(early.is_err(), "epoch 6 printed before the chain finalized it: {early:?}");
    world.attest_as(1, 6, "bafy-batch-6", root6);
    store.settle(6, &finalized(root6)).unwrap();
    let six: Vec<u64> = (0..2).map(|_| epoch_of(read_line.recv_timeout(within).expect("epoch 6 followed"))).collect();
    assert_eq!(six, [6, 6]);
    let _ = follow.kill();
    let _ = follow.wait();
}

/// The JavaScript verifier's canonical JSON and CID agree with the node's
/// on the shared conformance cases and on inputs that are not canonical
/// (spaces, key order, escapes, large integers, floats, integer keys).
#[test]
fn the_javascript_verifier_computes_the_nodes_canonical_json_and_cid() {
    let root = lite_node_testkit::workspace_root();
    let cases: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/data/conformance/canonical_json_cid_cases.json")).unwrap(),
    )
    .unwrap();
    let mut inputs: Vec<String> = cases.iter().map(|c| c["canonical_json"].as_str().unwrap().to_owned()).collect();
    inputs.extend(
        [
            r#"{ "b": 1, "a": [1, 2, {"d": null, "c": true}] }"#,
            r#"{"big": 123456789012345678901234567890, "neg": -0, "f": 1.5, "e": 1e16, "s": 0.0001, "t": 0.00001}"#,
            r#"{"10": "x", "9": "y", "-1": "z"}"#,
            r#"{"text": "caf\u00e9 \"q\" \n\t \u0001 😀 ü", "k": "a\/b"}"#,
            r#"{"dup": 1, "dup": 2}"#,
            r#"{"f": 123.456, "g": 1e-7, "h": 2.5e+20, "i": 100.0}"#,
        ]
        .map(str::to_owned),
    );
    let expected: Vec<Value> = inputs
        .iter()
        .map(|i| {
            let c = String::from_utf8(lite_node_protocol::canonical_json(i).unwrap()).unwrap();
            let cid = lite_node_protocol::cid(c.as_bytes());
            serde_json::json!([c, cid])
        })
        .collect();
    let script = format!(
        "const v = require({:?}); const inputs = JSON.parse(process.argv[1]); \
         console.log(JSON.stringify(inputs.map((i) => {{ const c = v.canonical(i); return [c, v.cidOf(Buffer.from(c))]; }})));",
        root.join("clients/js/verify-bundle.js").display().to_string()
    );
    let out = std::process::Command::new("node")
        .args(["-e", &script, &serde_json::to_string(&inputs).unwrap()])
        .output()
        .expect("node runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    for ((input, want), got) in inputs.iter().zip(&expected).zip(&got) {
        assert_eq!(got, want, "input {input}");
    }
    for case in &cases {
        let c = case["canonical_json"].as_str().unwrap();
        let i = inputs.iter().position(|x| x == c).unwrap();
        assert_eq!(got[i][1], case["cid"], "{}", case["name"]);
    }
}

/// Archives outlive the market's servers: a validator's store written as a
/// CAR by its archive job, every market service stopped (only the archive
/// and the anchor RPC are left), a new read-only server restored from it,
/// and a consumer verifies what it serves down to the root on chain. A
/// changed byte, a truncated file or another market's archive is refused,
/// naming the file and what is wrong.
#[test]
fn an_archive_restores_a_new_server_whose_bundles_verify_with_every_market_service_stopped() {
    let world = World::load();
    world.register_validators(2);
    let snapshot = |e: u64, i: u64| format!(r#"{{"epoch":{e},"pool":{i}}}"#);
    let pairs_of = |e: u64| -> Vec<(String, String)> {
        (0..3)
            .map(|i| (format!("baseSnapshot:0xpool{i}:devnet"), lite_node_protocol::cid(snapshot(e, i).as_bytes())))
            .collect()
    };
    world.release_epoch_with_id(6);
    let root5 = world.submit_batch(5, "bafy-batch-5", &pairs_of(5));
    world.attest_as(1, 5, "bafy-batch-5", root5);
    let dir = tempfile::tempdir().unwrap();
    let of = lite_node_validator::archive::MarketOf {
        chain_id: world.manifest.chain_id,
        protocol_state: world.manifest.protocol_state.clone(),
        data_market: world.manifest.data_market.clone(),
    };
    let archives = dir.path().join("archives");
    {
        // The validator's store, and its archive job's round: epochs 1–5 are
        // a complete range of 5 once epoch 6 is kept.
        let store = Store::open(&dir.path().join("finalized.redb")).unwrap();
        for e in [5, 6] {
            keep(&store, e, pairs_of(e), (0..3).map(|i| snapshot(e, i)));
        }
        store.settle(5, &finalized_in_block_42(root5)).unwrap();
        let written = lite_node_validator::archive::write_due(&store, &of, 5, &archives, &Default::default()).unwrap();
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(written[0].path, archives.join("epochs-1-5.car"));
        assert_eq!((written[0].epochs, written[0].blocks), (1, 3));
        assert!(
            lite_node_validator::archive::write_due(&store, &of, 5, &archives, &Default::default()).unwrap().is_empty(),
            "once"
        );
        // The validator and its store are gone from here on.
    }

    let node = Node::new()
        .env("POWERLOOM_RPC_URL", world.url())
        .env("PROTOCOL_STATE_CONTRACT", world.manifest.protocol_state.clone())
        .env("DATA_MARKET_CONTRACT", world.manifest.data_market.clone());
    let chain_id = world.manifest.chain_id.to_string();
    let fresh = dir.path().join("server.redb");
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_lite-node"))
        .args(["serve", "--store", fresh.to_str().unwrap(), "--archive", archives.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--chain-id", &chain_id])
        .args(["--protocol-state", &world.manifest.protocol_state, "--data-market", &world.manifest.data_market])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let (lines, read) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut said = Vec::new();
    let base = loop {
        let line = read.recv_timeout(std::time::Duration::from_secs(30)).expect("serve says where it listens");
        if let Some(url) = line.split(" on ").last().filter(|u| u.starts_with("http://")) {
            said.push(line.clone());
            break url.to_owned();
        }
        said.push(line);
    };
    assert!(said.iter().any(|l| l.contains("epochs-1-5.car: 1 epoch(s) restored")), "{said:?}");
    assert!(said.last().unwrap().contains("(epochs 5 to 5)"), "{said:?}");
    let project = &pairs_of(5)[1].0;
    let run = node.run(&["read", "--api", &base, "--epoch", "5", "--project", project]);
    run.assert_ok();
    assert_eq!(run.stdout, format!("{}\n", snapshot(5, 1)));
    let run = node.run(&["read", "--api", &base, "--epoch", "5"]);
    run.assert_ok();
    assert_eq!(run.stdout.lines().count(), 3, "{}", run.stdout);
    let health: Value = runtime_get(&format!("{base}/health"));
    assert_eq!(health, serde_json::json!({"status": "ok", "firstEpoch": 5, "lastEpoch": 5}));
    let bundle: Value = runtime_get(&format!("{base}/data/5/{project}"));
    assert_eq!(bundle["finalized"], serde_json::json!({"block": 42, "tx": format!("0x{:064x}", 7)}));
    let _ = server.kill();
    let _ = server.wait();

    // `archive restore`: once, then kept already; broken or foreign
    // archives are refused naming the file.
    let other = dir.path().join("other.redb");
    let restore = |car: &std::path::Path, market: &str| {
        node.run(&[
            "archive",
            "restore",
            "--store",
            other.to_str().unwrap(),
            car.to_str().unwrap(),
            "--chain-id",
            &chain_id,
            "--data-market",
            market,
        ])
    };
    let car = archives.join("epochs-1-5.car");
    let run = restore(&car, &world.manifest.data_market);
    run.assert_ok();
    assert!(run.stdout.contains("1 epoch(s) restored (0 kept already), 3 snapshot(s)"), "{}", run.stdout);
    let run = restore(&car, &world.manifest.data_market);
    assert!(run.stdout.contains("0 epoch(s) restored (1 kept already)"), "{}", run.stdout);
    let original = std::fs::read(&car).unwrap();
    let bad = dir.path().join("bad.car");
    let mut changed = original.clone();
    let at = changed.windows(6).position(|w| w == b"\"pool\"").unwrap();
    changed[at + 1] = b'P';
    std::fs::write(&bad, &changed).unwrap();
    let run = restore(&bad, &world.manifest.data_market);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("bad.car") && run.stderr.contains("do not hash to its CID"), "{}", run.stderr);
    std::fs::write(&bad, &original[..original.len() - 40]).unwrap();
    let run = restore(&bad, &world.manifest.data_market);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("bad.car"), "{}", run.stderr);
    let run = restore(&car, "0x00000000000000000000000000000000000000aa");
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("an archive of market") && run.stderr.contains("not this one's"), "{}", run.stderr);
}

/// moto's S3-compatible server on a free loopback port (`./init.sh test`
/// installs it in `.tools/s3`), killed when dropped.
struct S3Server {
    child: std::process::Child,
    endpoint: String,
}

impl S3Server {
    fn start() -> Self {
        let exe = lite_node_testkit::workspace_root().join(".tools/s3/bin/moto_server");
        assert!(exe.exists(), "{} is missing: ./init.sh test installs it (moto[server] from PyPI)", exe.display());
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new(exe)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let endpoint = format!("http://127.0.0.1:{port}");
        lite_node_testkit::poll_until("moto's S3 server answers", std::time::Duration::from_secs(60), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        Self { child, endpoint }
    }

    /// What a client of it needs (the `AWS_*` variables).
    fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "drill".into()),
            ("AWS_SECRET_ACCESS_KEY", "drill-secret".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue 54, item 5: archives in an S3-compatible bucket (moto's server on
/// loopback, through `object_store`). A validator's archive round uploads
/// what it wrote and drops the local copy; a range the bucket holds is not
/// written again; `lite-node archive restore s3://…` restores a new store
/// from the bucket alone, each block checked, and `lite-node read` verifies
/// its bundle to the root on chain; a bucket that does not exist is named.
#[test]
fn archives_uploaded_to_an_s3_bucket_restore_a_new_server_whose_bundles_verify() {
    let s3 = S3Server::start();
    let world = World::load();
    world.register_validators(1);
    let snapshot = |i: u64| format!(r#"{{"epoch":5,"pool":{i}}}"#);
    let pairs: Vec<(String, String)> = (0..3)
        .map(|i| (format!("baseSnapshot:0xpool{i}:devnet"), lite_node_protocol::cid(snapshot(i).as_bytes())))
        .collect();
    world.release_epoch_with_id(6);
    let root5 = world.submit_batch(5, "bafy-batch-5", &pairs);
    let dir = tempfile::tempdir().unwrap();
    let of = lite_node_validator::archive::MarketOf {
        chain_id: world.manifest.chain_id,
        protocol_state: world.manifest.protocol_state.clone(),
        data_market: world.manifest.data_market.clone(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // The bucket (S3's CreateBucket: a PUT of its name).
    let made = runtime.block_on(reqwest::Client::new().put(format!("{}/archives", s3.endpoint)).send()).unwrap();
    assert!(made.status().is_success(), "{made:?}");
    let vars = s3.vars();
    let url = "s3://archives/market-7001";
    let bucket =
        lite_node_validator::bucket::Bucket::from_url(url, vars.iter().map(|(k, v)| (*k, v.as_str()))).unwrap();
    let staging = dir.path().join("staging");
    {
        let store = Store::open(&dir.path().join("finalized.redb")).unwrap();
        for e in [5, 6] {
            keep(&store, e, pairs.clone(), (0..3).map(snapshot));
        }
        store.settle(5, &finalized_in_block_42(root5)).unwrap();
        let written = lite_node_validator::archive::write_due(&store, &of, 5, &staging, &Default::default()).unwrap();
        assert_eq!(written.len(), 1, "{written:?}");
        let (uploaded, failed) = runtime.block_on(lite_node_validator::bucket::upload_written(&bucket, &staging));
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(uploaded.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["epochs-1-5.car"]);
        assert!(!staging.join("epochs-1-5.car").exists(), "the local copy goes once the bucket holds it");
        let held = runtime.block_on(bucket.archives()).unwrap();
        assert_eq!(held, uploaded);
        let elsewhere = held.iter().filter_map(|(n, _)| lite_node_validator::archive::range_of(n)).collect();
        assert!(
            lite_node_validator::archive::write_due(&store, &of, 5, &staging, &elsewhere).unwrap().is_empty(),
            "a range the bucket holds is not written again"
        );
    }

    let mut node = Node::new()
        .env("POWERLOOM_RPC_URL", world.url())
        .env("PROTOCOL_STATE_CONTRACT", world.manifest.protocol_state.clone())
        .env("DATA_MARKET_CONTRACT", world.manifest.data_market.clone());
    for (k, v) in &vars {
        node = node.env(k, v.clone());
    }
    let chain_id = world.manifest.chain_id.to_string();
    let fresh = dir.path().join("restored.redb");
    let run = node.run(&["archive", "restore", "--store", fresh.to_str().unwrap(), url, "--chain-id", &chain_id]);
    run.assert_ok();
    assert!(
        run.stdout.contains(&format!("{url}/epochs-1-5.car: 1 epoch(s) restored (0 kept already), 3 snapshot(s)")),
        "{}",
        run.stdout
    );
    // The restored store served, and a snapshot read from it verified to
    // the root on chain.
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_lite-node"))
        .args(["serve", "--store", fresh.to_str().unwrap(), "--listen", "127.0.0.1:0", "--chain-id", &chain_id])
        .args(["--protocol-state", &world.manifest.protocol_state, "--data-market", &world.manifest.data_market])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut said = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(server.stdout.take().unwrap()), &mut said).unwrap();
    let base = said.trim().split(" on ").last().unwrap().to_owned();
    let run = node.run(&["read", "--api", &base, "--epoch", "5", "--project", &pairs[2].0]);
    let _ = server.kill();
    let _ = server.wait();
    run.assert_ok();
    assert_eq!(run.stdout, format!("{}\n", snapshot(2)));

    let missing = dir.path().join("none.redb");
    let run = node.run(&[
        "archive",
        "restore",
        "--store",
        missing.to_str().unwrap(),
        "s3://no-such-bucket",
        "--chain-id",
        &chain_id,
    ]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("s3://no-such-bucket"), "{}", run.stderr);
    assert!(!run.stderr.contains("drill-secret"), "the key never shows: {}", run.stderr);
}

/// Keeps epoch `epoch_id` of `pairs` in `store`, the `snapshots` their
/// bytes, as a validator's archiver does.
fn keep(store: &Store, epoch_id: u64, pairs: Vec<(String, String)>, snapshots: impl Iterator<Item = String>) {
    let bytes: BTreeMap<String, Vec<u8>> =
        snapshots.map(|s| (lite_node_protocol::cid(s.as_bytes()), s.into_bytes())).collect();
    let tree = lite_node_protocol::merkle::Tree::of(pairs.iter().map(|(p, c)| (p.as_str(), c.as_str()))).unwrap();
    let epoch = FinalizedEpoch {
        epoch_id,
        root: tree.root().to_string(),
        batch_cid: format!("bafy-batch-{epoch_id}"),
        pairs,
        finalized_at: 1,
        without_bytes: Vec::new(),
    };
    store.put_epoch(&epoch, &bytes).unwrap();
}

/// Finalized on chain with `root`, in block 42 by a made-up transaction.
fn finalized_in_block_42(root: [u8; 32]) -> lite_node_validator::store::OnChain {
    lite_node_validator::store::OnChain {
        finalized: true,
        block: Some(42),
        tx: Some(format!("0x{:064x}", 7)),
        root: Some(alloy::primitives::B256::from(root).to_string()),
    }
}

fn runtime_get(url: &str) -> Value {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async { reqwest::get(url).await.unwrap().json().await.unwrap() })
}
