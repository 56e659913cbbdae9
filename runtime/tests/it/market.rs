//! `lite-node market`: a market deployed on real anvils (an anchor chain
//! and a source chain with their own chain ids), read back through its
//! manifest, and bad input named in one line with exit 2, the key never shown.

use lite_node_testkit::Anvil;
use serde_json::{Value, json};

use crate::support::Node;

/// anvil's first development account (a public test key).
const DEPLOYER_KEY: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const DEPLOYER: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";

fn rpc(url: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let answer: Value = reqwest::blocking::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .and_then(|r| r.json())
        .unwrap_or_else(|e| panic!("{method}: {e}"));
    answer["result"].clone()
}

/// The last line of stderr: the one-line error a verb ends with.
fn error_line(run: &crate::support::Run) -> String {
    run.stderr.lines().last().unwrap_or_default().to_owned()
}

#[test]
fn a_market_is_deployed_on_its_anchor_chain_and_read_back_through_its_manifest() {
    let anchor = Anvil::start_with(&["--chain-id", "7001"]);
    let source = Anvil::start_with(&["--chain-id", "7002"]);
    let node = Node::new();
    let dir = node.cwd.path();
    std::fs::write(dir.join("deployer.key"), format!("0x{DEPLOYER_KEY}\n")).unwrap();
    let deploy = [
        "market",
        "deploy",
        "--anchor-rpc",
        &anchor.url(),
        "--source-rpc",
        &source.url(),
        "--key-file",
        "deployer.key",
        "--namespace",
        "TEST_MARKET",
        "--epochs-per-day",
        "3",
        "--epoch-size",
        "2",
    ];
    let run = node.run(&deploy);
    run.assert_ok();
    assert!(!run.stdout.contains(DEPLOYER_KEY) && !run.stderr.contains(DEPLOYER_KEY), "the key is never shown");
    let manifest: Value = serde_json::from_slice(&std::fs::read(dir.join("market.json")).unwrap()).unwrap();
    assert_eq!(manifest["anchor"]["chainId"], 7001, "{manifest}");
    assert_eq!(manifest["source"]["chainId"], 7002, "{manifest}");
    assert_eq!(manifest["deployer"].as_str().unwrap().to_lowercase(), DEPLOYER.to_lowercase());
    assert_eq!((manifest["epochSize"].as_u64(), manifest["epochsPerDay"].as_u64()), (Some(2), Some(3)));
    assert_eq!(manifest["namespace"], "TEST_MARKET");
    let contract = manifest["protocolState"].as_str().unwrap();
    assert_eq!(manifest["dataMarket"], contract, "the market's identity defaults to the contract's address");
    let code = rpc(&anchor.url(), "eth_getCode", json!([contract, "latest"]));
    assert!(code.as_str().unwrap().len() > 1000, "ProtocolState's code is on the anchor chain: {code}");
    let on_source = rpc(&source.url(), "eth_getCode", json!([contract, "latest"]));
    assert_eq!(on_source, "0x", "nothing was deployed on the source chain");

    let status = node.run(&["market", "status"]);
    status.assert_ok();
    assert_eq!(status.field("owner").map(|o| o.to_lowercase()), Some(DEPLOYER.to_lowercase()), "{}", status.stdout);
    assert!(status.stdout.contains("epochs released: 0 (epoch size 2 blocks; days of 3 epochs)"), "{}", status.stdout);
    assert!(status.stdout.contains("releaser: nothing released yet (source chain 7002"), "{}", status.stdout);
    assert_eq!(status.field("slots registered").as_deref(), Some("0"), "{}", status.stdout);
    assert_eq!(status.field("validators").as_deref(), Some("0"), "{}", status.stdout);

    // The slot registry and the validators, by the owner's key.
    let owner = ["--key-file", "deployer.key"];
    let (alice, bob) = ("0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC");
    for signer in [alice, bob] {
        node.run(&[&["market", "slots", "register", "--signer", signer], &owner[..]].concat()).assert_ok();
    }
    let taken = node.run(&[&["market", "slots", "register", "--signer", bob, "--slot", "1"], &owner[..]].concat());
    assert_eq!(taken.code, 2, "{taken:?}");
    assert!(error_line(&taken).contains("--slot 1: taken by 0x70997970C51812dc3A010C7d01b50e0d17dc79C8"), "{taken:?}");
    let gap = node.run(&[&["market", "slots", "register", "--signer", bob, "--slot", "5"], &owner[..]].concat());
    assert!(gap.code == 2 && error_line(&gap).contains("slots register in order; the next is 3"), "{gap:?}");
    // A stranger's key: the contract refuses, in its words.
    std::fs::write(dir.join("stranger.key"), "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d")
        .unwrap();
    let stranger = node.run(&["market", "slots", "register", "--signer", bob, "--key-file", "stranger.key"]);
    assert!(
        stranger.code == 2 && error_line(&stranger).contains("ProtocolState refuses it from 0x7099"),
        "{stranger:?}"
    );
    node.run(&[&["market", "slots", "reassign", "--slot", "2", "--signer", alice], &owner[..]].concat()).assert_ok();
    node.run(&[&["market", "slots", "full-node", "--slot", "2"], &owner[..]].concat()).assert_ok();
    let list = node.run(&["market", "slots", "list"]);
    list.assert_ok();
    assert!(list.stdout.contains("2 slot(s) registered"), "{}", list.stdout);
    assert_eq!(list.field("slot 2").as_deref(), Some(&*format!("{alice}  full node")), "{}", list.stdout);
    let last_only = node.run(&[&["market", "slots", "remove", "--slot", "1"], &owner[..]].concat());
    assert!(last_only.code == 2 && error_line(&last_only).contains("only the last slot (2)"), "{last_only:?}");
    node.run(&["market", "validators", "add", alice, bob, "--key-file", "deployer.key"]).assert_ok();
    node.run(&["market", "validators", "remove", bob, "--key-file", "deployer.key"]).assert_ok();
    let validators = node.run(&["market", "validators", "list"]);
    assert!(validators.stdout.contains("1 validator(s)") && validators.stdout.contains(alice), "{validators:?}");
    let status = node.run(&["market", "status"]);
    assert_eq!(status.field("slots registered").as_deref(), Some("2"), "{}", status.stdout);
    assert_eq!(status.field("validators").as_deref(), Some("1"), "{}", status.stdout);

    // What an operator pastes into .env for slot 1: everything but their key.
    let env = node.run(&["market", "env", "--slot", "1"]);
    env.assert_ok();
    for line in [
        format!("SOURCE_RPC_URL={}", source.url()),
        format!("POWERLOOM_RPC_URL={}", anchor.url()),
        "POWERLOOM_CHAIN=chain7001".to_owned(),
        "SOURCE_CHAIN=ETH".to_owned(),
        "NAMESPACE=TEST_MARKET".to_owned(),
        "SLOT_ID=1".to_owned(),
        format!("SIGNER_ACCOUNT_ADDRESS={alice}"),
        "SIGNER_ACCOUNT_PRIVATE_KEY=".to_owned(),
    ] {
        assert!(env.stdout.lines().any(|l| l == line), "`{line}` in:\n{}", env.stdout);
    }
    let state = env.stdout.lines().find_map(|l| l.strip_prefix("PROTOCOL_STATE_CONTRACT=")).unwrap();
    assert_eq!(state.to_lowercase(), contract.to_lowercase());
    let unknown = node.run(&["market", "env", "--slot", "3"]);
    assert!(unknown.code == 2 && error_line(&unknown).contains("--slot 3: not a registered slot"), "{unknown:?}");

    // A manifest is never overwritten.
    let again = node.run(&deploy);
    assert_eq!(again.code, 2, "{again:?}");
    assert!(error_line(&again).contains("--out market.json: a file is there"), "{again:?}");

    // The manifest of another chain: its anchor RPC now answers with another id.
    let other = Anvil::start_with(&["--chain-id", "7003"]);
    let mut moved = manifest.clone();
    moved["anchor"]["rpcs"] = json!([other.url()]);
    std::fs::write(dir.join("moved.json"), moved.to_string()).unwrap();
    let run = node.run(&["market", "status", "--manifest", "moved.json"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(error_line(&run).contains("the market's anchor chain is 7001, but its RPC"), "{run:?}");
}

#[test]
fn bad_input_to_market_deploy_is_named_in_one_line_with_exit_2() {
    let anchor = Anvil::start();
    let node = Node::new();
    let dir = node.cwd.path();
    std::fs::write(dir.join("good.key"), DEPLOYER_KEY).unwrap();
    let secret = "not-a-key-but-secret-looking-1234567890";
    std::fs::write(dir.join("bad.key"), secret).unwrap();
    // An HTTP server that is not a chain: a port where nothing listens.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let cases: [(&[&str], &str); 5] = [
        (
            &["--anchor-rpc", &anchor.url(), "--key-file", "bad.key"],
            "--key-file bad.key is not a secp256k1 private key",
        ),
        (&["--anchor-rpc", &anchor.url(), "--key-file", "missing.key"], "--key-file missing.key: "),
        (&["--anchor-rpc", &closed, "--key-file", "good.key"], "not an EVM chain's JSON-RPC endpoint"),
        (&["--anchor-rpc", "ftp://x", "--key-file", "good.key"], "ftp://x"),
        (&["--anchor-rpc", &anchor.url(), "--key-file", "good.key", "--epoch-size", "0"], "--epoch-size 0"),
    ];
    for (args, expected) in cases {
        let run = node.run(&[&["market", "deploy", "--namespace", "NS"], args].concat());
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(error_line(&run).contains(expected), "{args:?}: {run:?}");
        assert!(!run.stderr.contains(secret) && !run.stdout.contains(secret), "{args:?}: the key file's text is shown");
        assert!(!dir.join("market.json").exists(), "{args:?}: no manifest for a failed deploy");
    }
    let run = node.run(&["market", "status", "--manifest", "good.key"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(error_line(&run).contains("good.key: not a market manifest"), "{run:?}");
    assert!(!run.stderr.contains(DEPLOYER_KEY), "a key given as a manifest is not shown: {run:?}");
}
