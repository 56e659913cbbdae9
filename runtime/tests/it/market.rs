//! `lite-node market`: a market deployed on real anvils (an anchor chain
//! and a source chain with their own chain ids), read back through its
//! manifest, and bad input named in one line with exit 2, the key never shown.

use lite_node_testkit::{Anvil, Client};
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
    let (node, anchor, source) = two_chains();
    let dir = node.cwd.path();
    let flags = [
        "--namespace",
        "TEST_MARKET",
        "--epochs-per-day",
        "3",
        "--epoch-size",
        "2",
        "--window-blocks",
        "20",
        "--require-snapshot",
        "--max-snapshot-bytes",
        "30000",
    ];
    let run = deploy(&node, &anchor, &source, &flags);
    run.assert_ok();
    assert!(!run.stdout.contains(DEPLOYER_KEY) && !run.stderr.contains(DEPLOYER_KEY), "the key is never shown");
    let manifest: Value = serde_json::from_slice(&std::fs::read(dir.join("market.json")).unwrap()).unwrap();
    assert_eq!(manifest["anchor"]["chainId"], 7001, "{manifest}");
    assert_eq!(manifest["source"]["chainId"], 7002, "{manifest}");
    assert_eq!(manifest["deployer"].as_str().unwrap().to_lowercase(), DEPLOYER.to_lowercase());
    assert_eq!((manifest["epochSize"].as_u64(), manifest["epochsPerDay"].as_u64()), (Some(2), Some(3)));
    assert_eq!(manifest["namespace"], "TEST_MARKET");
    assert_eq!(manifest["snapshots"], json!({"required": true, "maxBytes": 30000}), "{manifest}");
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
    assert_eq!(
        status.field("last finalized").as_deref(),
        Some("none in the last 200000 anchor blocks"),
        "{}",
        status.stdout
    );
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
    let carol = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
    let stranger = node.run(&["market", "slots", "register", "--signer", carol, "--key-file", "stranger.key"]);
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
        "WINDOW_BLOCKS=20".to_owned(),
        "REQUIRE_SNAPSHOT=true".to_owned(),
        "MAX_SNAPSHOT_BYTES=30000".to_owned(),
        format!("SIGNER_ACCOUNT_ADDRESS={alice}"),
        "SIGNER_ACCOUNT_PRIVATE_KEY=".to_owned(),
    ] {
        assert!(env.stdout.lines().any(|l| l == line), "`{line}` in:\n{}", env.stdout);
    }
    let state = env.stdout.lines().find_map(|l| l.strip_prefix("PROTOCOL_STATE_CONTRACT=")).unwrap();
    assert_eq!(state.to_lowercase(), contract.to_lowercase());
    assert!(env.stdout.lines().any(|l| l == "VALIDATOR_PEERS="), "no validators published yet:\n{}", env.stdout);
    // The validators' gossip addresses, published in the manifest for the operators' collectors.
    let peer = "/ip4/203.0.113.7/tcp/9100/p2p/12D3KooWNqBb2hdFBYky2bEbCfKfnHn8pjRoB9iWaSvSm6B5fGD4";
    let nameless = node.run(&["market", "peers", "--set", "/ip4/203.0.113.7/tcp/9100"]);
    assert!(nameless.code == 2 && error_line(&nameless).contains("names no peer"), "{nameless:?}");
    let set = node.run(&["market", "peers", "--set", peer]);
    set.assert_ok();
    assert!(set.stdout.contains("1 validator peer(s)") && set.stdout.contains(peer), "{set:?}");
    let env = node.run(&["market", "env", "--slot", "1"]);
    assert!(env.stdout.lines().any(|l| l == format!("VALIDATOR_PEERS={peer}")), "{}", env.stdout);
    let unknown = node.run(&["market", "env", "--slot", "3"]);
    assert!(unknown.code == 2 && error_line(&unknown).contains("--slot 3: not a registered slot"), "{unknown:?}");
    // A manifest whose first source RPC is 20 blocks behind and whose first
    // anchor RPC does not answer: each operator is handed the fresh one first.
    let stale = Anvil::start_with(&["--chain-id", "7002"]);
    rpc(&source.url(), "anvil_mine", json!(["0x14"]));
    let dead = format!(
        "http://127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    );
    let mut listed: Value = serde_json::from_slice(&std::fs::read(dir.join("market.json")).unwrap()).unwrap();
    listed["source"]["rpcs"] = json!([stale.url(), source.url()]);
    listed["anchor"]["rpcs"] = json!([&dead, anchor.url()]);
    std::fs::write(dir.join("listed.json"), listed.to_string()).unwrap();
    let env = node.run(&["market", "env", "--slot", "1", "--manifest", "listed.json"]);
    env.assert_ok();
    let line = |key: &str| env.stdout.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_default().to_owned();
    assert_eq!(line("SOURCE_RPC_URL="), format!("{},{}", source.url(), stale.url()), "{}", env.stdout);
    assert_eq!(line("POWERLOOM_RPC_URL="), format!("{},{dead}", anchor.url()), "{}", env.stdout);
    assert!(env.stdout.contains(&format!("# source RPC {} is at block 0, ", stale.url())), "{}", env.stdout);
    assert!(env.stdout.contains(&format!("# anchor RPC {dead} does not answer now")), "{}", env.stdout);

    // A manifest is never overwritten: deploy run again says the market it
    // names is deployed, and sends nothing.
    let written = std::fs::read(dir.join("market.json")).unwrap();
    let again = deploy(&node, &anchor, &source, &flags);
    again.assert_ok();
    assert!(again.stdout.contains("is already deployed") && again.stdout.contains("nothing sent"), "{again:?}");
    assert_eq!(std::fs::read(dir.join("market.json")).unwrap(), written, "the manifest is as it was");

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

/// anvil's second development account (a public test key).
const SECOND_KEY: &str = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
const SECOND: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

/// Two fresh anvils, the anchor chain (7001) and the source chain (7002),
/// and a node whose directory holds two keys: `deployer.key` (the deployer,
/// written as a key file often is: `0x`, a newline) and `second.key`.
fn two_chains() -> (Node, Anvil, Anvil) {
    two_chains_on(Client::Anvil)
}

/// [`two_chains`] of `client` (issue 55: the releaser's drills on ganache
/// as well as anvil).
fn two_chains_on(client: Client) -> (Node, Anvil, Anvil) {
    let (anchor, source) = (Anvil::of(client, 7001), Anvil::of(client, 7002));
    let node = Node::new();
    // Key files only their owner reads, as an operator keeps them.
    for (name, key) in [("deployer.key", format!("0x{DEPLOYER_KEY}\n")), ("second.key", SECOND_KEY.to_owned())] {
        let path = node.cwd.path().join(name);
        std::fs::write(&path, key).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    }
    (node, anchor, source)
}

/// `market deploy` onto the two chains with the deployer's key and `flags`.
fn deploy(node: &Node, anchor: &Anvil, source: &Anvil, flags: &[&str]) -> crate::support::Run {
    let (anchor, source) = (anchor.url(), source.url());
    let base = ["market", "deploy", "--anchor-rpc", &anchor, "--source-rpc", &source, "--key-file", "deployer.key"];
    node.run(&[&base[..], flags].concat())
}

/// A market deployed on two fresh chains with epochs of `epoch_size`
/// source blocks: the node to run verbs, the anvils and the manifest.
fn deployed(epoch_size: u64) -> (Node, Anvil, Anvil, Value) {
    deployed_on(Client::Anvil, epoch_size)
}

/// [`deployed`] on chains of `client`.
fn deployed_on(client: Client, epoch_size: u64) -> (Node, Anvil, Anvil, Value) {
    let (node, anchor, source) = two_chains_on(client);
    deploy(&node, &anchor, &source, &["--namespace", "T", "--epoch-size", &epoch_size.to_string()]).assert_ok();
    let manifest = serde_json::from_slice(&std::fs::read(node.cwd.path().join("market.json")).unwrap()).unwrap();
    (node, anchor, source, manifest)
}

/// A running `lite-node market release` and its stdout, line by line.
struct Releaser {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Releaser {
    fn start(node: &Node, key: &str, extra: &[&str]) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lite-node"))
            .args(["market", "release", "--key-file", key, "--finality", "2", "--poll-ms", "50"])
            .args(extra)
            .current_dir(node.cwd.path())
            .env_clear()
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the releaser starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self { child, lines, seen: Vec::new() }
    }

    /// Every line so far.
    fn output(&mut self) -> &[String] {
        self.seen.extend(self.lines.try_iter());
        &self.seen
    }

    fn wait_for(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        lite_node_testkit::poll_until(what, std::time::Duration::from_secs(30), || {
            self.output().iter().find(|l| pred(l)).cloned()
        })
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then its exit code.
    fn stop(&mut self) -> Option<i32> {
        let _ = std::process::Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let status = self.child.wait().unwrap();
        self.output();
        status.code()
    }
}

impl Drop for Releaser {
    fn drop(&mut self) {
        self.kill();
    }
}

fn last_released_end(anchor: &Anvil, manifest: &Value) -> u64 {
    use alloy::sol_types::SolCall;
    let market = manifest["dataMarket"].as_str().unwrap().parse().unwrap();
    let call = lite_node_protocol::contracts::lastReleasedEndCall { dataMarketAddress: market };
    let data = format!("0x{}", hex::encode(call.abi_encode()));
    let answer = rpc(&anchor.url(), "eth_call", json!([{"to": manifest["protocolState"], "data": data}, "latest"]));
    u64::from_str_radix(answer.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// Every EpochReleased of the market on the anchor chain: (epoch id, begin, end).
fn releases(anchor: &Anvil, manifest: &Value) -> Vec<(u64, u64, u64)> {
    use alloy::sol_types::SolEvent;
    let topic = format!("{:#x}", lite_node_protocol::contracts::EpochReleased::SIGNATURE_HASH);
    let logs = rpc(
        &anchor.url(),
        "eth_getLogs",
        json!([{"fromBlock": "0x0", "toBlock": "latest", "address": manifest["protocolState"], "topics": [topic]}]),
    );
    let word = |hex: &str, i: usize| u64::from_str_radix(&hex[2 + 64 * i..2 + 64 * (i + 1)][48..], 16).unwrap();
    logs.as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let id = l["topics"][2].as_str().unwrap();
            let data = l["data"].as_str().unwrap();
            (u64::from_str_radix(&id[50..], 16).unwrap(), word(data, 0), word(data, 1))
        })
        .collect()
}

/// Releases `1..=n` epochs of `size` blocks, each once, in order.
fn assert_contiguous(releases: &[(u64, u64, u64)], size: u64) {
    for (i, (id, begin, end)) in releases.iter().enumerate() {
        let i = i as u64;
        assert_eq!(
            (*id, *begin, *end),
            (i + 1, i * size + 1, (i + 1) * size),
            "releases in order, each once: {releases:?}"
        );
    }
}

/// The releaser follows the source chain with its finality lag and says in
/// /health what it waits for; SIGKILLed and started again, and then two
/// releasers (two keys) at once: every range released once, none skipped.
#[test]
fn the_releaser_resumes_from_the_chain_and_two_at_once_release_each_range_once() {
    releaser_resumes_and_two_at_once(Client::Anvil);
}

/// The same on ganache's chains (issue 55: another EVM implementation).
#[test]
fn the_releaser_resumes_and_two_at_once_release_each_range_once_on_ganache() {
    releaser_resumes_and_two_at_once(Client::Ganache);
}

fn releaser_resumes_and_two_at_once(client: Client) {
    let (node, anchor, source, manifest) = deployed_on(client, 2);
    source.mine(10);
    let mut first = Releaser::start(&node, "deployer.key", &["--first-block", "1", "--listen", "127.0.0.1:0"]);
    let line = first.wait_for("the health address", |l| l.starts_with("health on http://"));
    let health = line.split_whitespace().nth(2).unwrap().trim_end_matches(',').to_owned();
    first.wait_for("epoch 4", |l| l == "epoch 4 released: source blocks 7-8");
    // Head 10, two blocks of finality: 9-10 are not final yet.
    let (code, body) = lite_node_testkit::poll_until("/health waiting", std::time::Duration::from_secs(10), || {
        let r = reqwest::blocking::get(&health).ok()?;
        let code = r.status().as_u16();
        let body: Value = r.json().ok()?;
        body["waiting"].as_str().is_some_and(|w| w.contains("blocks 9-10 are next")).then_some((code, body))
    });
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["sourceHead"], 10, "{body}");
    let metrics = reqwest::blocking::get(health.replace("/health", "/metrics")).unwrap().text().unwrap();
    assert!(metrics.contains("lite_node_releaser_lag_blocks 2"), "{metrics}");
    first.kill();

    // A second releaser, granted by the owner; both run while 6 more blocks come.
    let call = lite_node_protocol::contracts::setReleaserCall { account: SECOND.parse().unwrap(), allowed: true };
    let data = format!("0x{}", hex::encode(alloy::sol_types::SolCall::abi_encode(&call)));
    let tx = json!({"from": DEPLOYER, "to": manifest["protocolState"], "data": data});
    rpc(&anchor.url(), "eth_sendTransaction", json!([tx]));
    let mut a = Releaser::start(&node, "deployer.key", &[]);
    let mut b = Releaser::start(&node, "second.key", &[]);
    for _ in 0..6 {
        source.mine(1);
    }
    let by = |r: &mut Releaser| r.output().iter().filter(|l| l.contains(" released: source blocks")).count();
    lite_node_testkit::poll_until("blocks up to 14 released", std::time::Duration::from_secs(30), || {
        (last_released_end(&anchor, &manifest) == 14).then_some(())
    });
    // The release of 13-14 is on chain; the releaser that sent it says so
    // once its receipt is in (CI once stopped both in between).
    let said = lite_node_testkit::poll_until("each release said", std::time::Duration::from_secs(30), || {
        let n = by(&mut a) + by(&mut b);
        (n >= 3).then_some(n)
    });
    assert_eq!((a.stop(), b.stop()), (Some(0), Some(0)));
    let released = releases(&anchor, &manifest);
    assert_eq!(released.len(), 7, "{released:?}");
    assert_contiguous(&released, 2);
    assert_eq!(said, 3, "epochs 5-7, one release each: {:?} {:?}", a.output(), b.output());
    assert_eq!(by(&mut a) + by(&mut b), 3, "and no more after: {:?} {:?}", a.output(), b.output());
}

/// A release dropped from the anchor's pool is sent again under its nonce
/// with higher fees and mined once; a key that may not release is refused.
#[test]
fn a_dropped_release_is_replaced_not_duplicated_and_a_stranger_may_not_release() {
    let (node, anchor, source, manifest) = deployed(1);
    let refused = node.run(&["market", "release", "--key-file", "second.key"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(error_line(&refused).contains("is not a releaser of ProtocolState"), "{refused:?}");

    rpc(&source.url(), "anvil_mine", json!(["0x5"]));
    rpc(&anchor.url(), "evm_setAutomine", json!([false]));
    let mut releaser = Releaser::start(
        &node,
        "deployer.key",
        &["--first-block", "1", "--replace-after-secs", "1", "--listen", "127.0.0.1:0"],
    );
    let line = releaser.wait_for("the health address", |l| l.starts_with("health on http://"));
    let metrics = line.split_whitespace().nth(2).unwrap().trim_end_matches(',').replace("/health", "/metrics");
    let pending = || -> Vec<String> {
        let pool = rpc(&anchor.url(), "txpool_content", json!([]));
        pool["pending"]
            .as_object()
            .map(|by| {
                by.values()
                    .flat_map(|txs| txs.as_object().unwrap().values())
                    .map(|t| t["hash"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let first = lite_node_testkit::poll_until("the first release pending", std::time::Duration::from_secs(30), || {
        pending().into_iter().next()
    });
    rpc(&anchor.url(), "anvil_dropTransaction", json!([first]));
    lite_node_testkit::poll_until("its replacement pending", std::time::Duration::from_secs(30), || {
        pending().into_iter().find(|h| *h != first)
    });
    let replaced = reqwest::blocking::get(&metrics).unwrap().text().unwrap();
    let count = replaced.lines().find_map(|l| l.strip_prefix("lite_node_releaser_replaced ")?.parse::<u64>().ok());
    assert!(count.is_some_and(|n| n >= 1), "a replacement counted: {replaced}");
    rpc(&anchor.url(), "evm_mine", json!([]));
    rpc(&anchor.url(), "evm_setAutomine", json!([true]));
    lite_node_testkit::poll_until("three epochs released", std::time::Duration::from_secs(30), || {
        (last_released_end(&anchor, &manifest) >= 3).then_some(())
    });
    assert_eq!(releaser.stop(), Some(0));
    let released = releases(&anchor, &manifest);
    assert_contiguous(&released, 1);
    assert!(released.len() >= 3, "{released:?}");
}

/// Two RPCs of the source chain, one 10 blocks behind the other: epochs are
/// released only as far as the lagging one has blocks, and /health says
/// which RPC holds them back; once it catches up, releases go on.
#[test]
fn a_source_rpc_behind_the_others_holds_releases_back_and_is_named_in_health() {
    source_rpc_behind(Client::Anvil);
}

/// The same on ganache's chains (issue 55: another EVM implementation).
#[test]
fn a_source_rpc_behind_the_others_holds_releases_back_on_ganache() {
    source_rpc_behind(Client::Ganache);
}

/// Issue 55, item 9: the source chain reorganises deeper than `--finality`
/// under an epoch the releaser released (its last block's hash changes):
/// the releaser names it — the block, the epoch, both hashes — and its
/// `/health` turns 503, while releases go on. (Before, nothing was seen.)
#[test]
fn a_source_reorg_deeper_than_the_finality_under_a_released_epoch_is_named_on_health() {
    let (node, anchor, source, manifest) = deployed(2);
    source.mine(4);
    let snapshot = source.call("evm_snapshot", json!([]));
    source.mine(6);
    let mut releaser = Releaser::start(&node, "deployer.key", &["--first-block", "1", "--listen", "127.0.0.1:0"]);
    let line = releaser.wait_for("the health address", |l| l.starts_with("health on http://"));
    let health = line.split_whitespace().nth(2).unwrap().trim_end_matches(',').to_owned();
    releaser.wait_for("epoch 4", |l| l == "epoch 4 released: source blocks 7-8");
    // Blocks 5 onwards replaced by others (later timestamps: other hashes).
    source.call("evm_revert", json!([snapshot]));
    source.call("evm_increaseTime", json!([1000]));
    source.mine(10);
    let body = lite_node_testkit::poll_until("/health naming the reorg", std::time::Duration::from_secs(30), || {
        let response = reqwest::blocking::get(&health).ok()?;
        let status = response.status();
        let body: Value = response.json().ok()?;
        body["reorged"].as_str().is_some().then_some((status, body))
    });
    let why = body.1["reorged"].as_str().unwrap();
    assert_eq!(body.0, 503, "{}", body.1);
    assert!(why.contains("reorganised past block 8, the last of epoch 4") && why.contains("--finality 2"), "{why}");
    releaser.wait_for("releases go on", |l| l.starts_with("epoch 5 released"));
    assert_eq!(releaser.stop(), Some(0));
    assert!(last_released_end(&anchor, &manifest) >= 10);
}

/// Issue 55, item 11: a key with no funds for gas deploys nothing and is
/// named, on anvil and on ganache alike (each says it in its own words):
/// exit 2, the address and the chain, never a raw RPC error.
#[test]
fn an_unfunded_key_is_named_on_anvil_and_on_ganache() {
    for client in [Client::Anvil, Client::Ganache] {
        let (node, anchor, source) = two_chains_on(client);
        // The deployer's key file, holding a key with nothing on either chain.
        std::fs::write(node.cwd.path().join("deployer.key"), format!("0x{}\n", "5a".repeat(32))).unwrap();
        let run = deploy(&node, &anchor, &source, &["--namespace", "T"]);
        assert_eq!(run.code, 2, "{client:?}: {run:?}");
        assert!(run.stderr.contains("has no funds for gas on chain 7001"), "{client:?}: {}", run.stderr);
    }
}

fn source_rpc_behind(client: Client) {
    let (node, anchor, source) = two_chains_on(client);
    let lagging = Anvil::of(client, 7002);
    let (a, s, l) = (anchor.url(), source.url(), lagging.url());
    let deploy = [
        "market",
        "deploy",
        "--anchor-rpc",
        &a,
        "--source-rpc",
        &s,
        "--source-rpc",
        &l,
        "--key-file",
        "deployer.key",
        "--namespace",
        "T",
        "--epoch-size",
        "2",
    ];
    node.run(&deploy).assert_ok();
    let manifest: Value = serde_json::from_slice(&std::fs::read(node.cwd.path().join("market.json")).unwrap()).unwrap();
    assert_eq!(manifest["source"]["rpcs"], json!([s, l]), "{manifest}");
    source.mine(20);
    lagging.mine(10);
    let mut releaser = Releaser::start(&node, "deployer.key", &["--first-block", "1", "--listen", "127.0.0.1:0"]);
    let line = releaser.wait_for("the health address", |l| l.starts_with("health on http://"));
    let health = line.split_whitespace().nth(2).unwrap().trim_end_matches(',').to_owned();
    // The lagging RPC is at 10: with two blocks of finality, 1-8 only.
    releaser.wait_for("epoch 4", |l| l == "epoch 4 released: source blocks 7-8");
    let body = lite_node_testkit::poll_until("/health waiting", std::time::Duration::from_secs(10), || {
        let body: Value = reqwest::blocking::get(&health).ok()?.json().ok()?;
        body["waiting"].as_str().is_some_and(|w| w.contains("blocks 9-10 are next")).then_some(body)
    });
    let waiting = body["waiting"].as_str().unwrap();
    assert!(waiting.contains(&format!("source RPC {l} is at 10, 10 blocks behind the highest (20)")), "{body}");
    assert_eq!(body["sourceRpcs"][1]["behind"], 10, "{body}");
    assert_eq!(last_released_end(&anchor, &manifest), 8, "nothing past what the lagging RPC has");
    let metrics = reqwest::blocking::get(health.replace("/health", "/metrics")).unwrap().text().unwrap();
    assert!(metrics.contains(&format!("lite_node_releaser_source_rpc_behind{{url=\"{l}\"}} 10")), "{metrics}");

    lagging.mine(10);
    releaser.wait_for("epoch 9", |l| l == "epoch 9 released: source blocks 17-18");
    assert_eq!(releaser.stop(), Some(0));
    assert_contiguous(&releases(&anchor, &manifest), 2);
}

/// A range another releaser's transaction holds while still pending is
/// taken, not an error: the second releaser says it follows the chain, and
/// once blocks are mined the releases are contiguous, each once.
#[test]
fn a_range_pending_from_another_releaser_is_followed_not_an_error() {
    let (node, anchor, source, manifest) = deployed(1);
    let call = lite_node_protocol::contracts::setReleaserCall { account: SECOND.parse().unwrap(), allowed: true };
    let data = format!("0x{}", hex::encode(alloy::sol_types::SolCall::abi_encode(&call)));
    rpc(
        &anchor.url(),
        "eth_sendTransaction",
        json!([{"from": DEPLOYER, "to": manifest["protocolState"], "data": data}]),
    );
    rpc(&source.url(), "anvil_mine", json!(["0x5"]));
    rpc(&anchor.url(), "evm_setAutomine", json!([false]));
    let mut a = Releaser::start(&node, "deployer.key", &["--first-block", "1", "--replace-after-secs", "600"]);
    wait_for_a_pending_release(&anchor);
    let mut b = Releaser::start(&node, "second.key", &["--first-block", "1", "--replace-after-secs", "600"]);
    b.wait_for("the pending range followed", |l| {
        l == "source blocks 1-1 were released by another transaction: following the chain"
    });
    mine_until_three_epochs(&anchor, &manifest);
    assert_eq!((a.stop(), b.stop()), (Some(0), Some(0)));
    assert_contiguous(&releases(&anchor, &manifest), 1);
}

/// The owner's grants: a releaser and a registrar granted, shown and
/// revoked, a stranger refused, and ownership handed on (the old owner may
/// grant nothing after).
#[test]
fn the_owner_grants_and_revokes_roles_and_hands_the_market_on() {
    let (node, _anchor, _source, _manifest) = deployed(1);
    let owner = ["--key-file", "deployer.key"];
    node.run(&[&["market", "roles", "grant", "releaser", SECOND], &owner[..]].concat()).assert_ok();
    node.run(&[&["market", "roles", "grant", "registrar", SECOND], &owner[..]].concat()).assert_ok();
    let shown = node.run(&["market", "roles", "show", SECOND, DEPLOYER]);
    shown.assert_ok();
    assert!(shown.stdout.contains(&format!("{SECOND}: releaser, registrar")), "{}", shown.stdout);
    assert!(shown.stdout.contains(&format!("{DEPLOYER}: owner, releaser, registrar")), "{}", shown.stdout);
    let third = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
    let stranger = node.run(&["market", "roles", "grant", "releaser", third, "--key-file", "second.key"]);
    assert!(stranger.code == 2 && error_line(&stranger).contains("ProtocolState refuses it"), "{stranger:?}");
    node.run(&[&["market", "roles", "revoke", "releaser", SECOND], &owner[..]].concat()).assert_ok();
    let shown = node.run(&["market", "roles", "show", SECOND]);
    assert!(shown.stdout.contains(&format!("{SECOND}: registrar")), "{}", shown.stdout);
    // The day schedule: set by the owner, shown by status.
    node.run(&[&["market", "days", "--epochs-per-day", "12"], &owner[..]].concat()).assert_ok();
    let status = node.run(&["market", "status"]);
    assert!(status.stdout.contains("days of 12 epochs"), "{}", status.stdout);
    let zero = "0x0000000000000000000000000000000000000000";
    let nobody = node.run(&[&["market", "roles", "transfer-ownership", "--to", zero], &owner[..]].concat());
    assert!(nobody.code == 2 && error_line(&nobody).contains("a market without an owner"), "{nobody:?}");
    // The deployer also releases and registers: a transfer says what
    // becomes of that, or is refused naming both choices.
    let undecided = node.run(&[&["market", "roles", "transfer-ownership", "--to", SECOND], &owner[..]].concat());
    assert!(
        undecided.code == 2
            && error_line(&undecided).contains("is also releaser and registrar")
            && error_line(&undecided).contains("--revoke-roles")
            && error_line(&undecided).contains("--keep-roles"),
        "{undecided:?}"
    );
    let moved =
        node.run(&[&["market", "roles", "transfer-ownership", "--to", SECOND, "--revoke-roles"], &owner[..]].concat());
    moved.assert_ok();
    let shown = node.run(&["market", "roles", "show", DEPLOYER]);
    assert!(shown.stdout.contains(&format!("{DEPLOYER}: no role")), "{}", shown.stdout);
    let status = node.run(&["market", "status"]);
    assert_eq!(status.field("owner").map(|o| o.to_lowercase()), Some(SECOND.to_lowercase()), "{}", status.stdout);
    let old = node.run(&[&["market", "roles", "grant", "releaser", SECOND], &owner[..]].concat());
    assert!(old.code == 2 && error_line(&old).contains("ProtocolState refuses it"), "{old:?}");
}

/// Bad input to each verb that sends or reads: one line, exit 2, naming it.
#[test]
fn bad_input_to_every_market_verb_is_named_in_one_line_with_exit_2() {
    let (node, _anchor, _source, manifest) = deployed(1);
    let dir = node.cwd.path();
    std::fs::write(dir.join("bad.key"), "not-a-key").unwrap();
    let other = Anvil::start_with(&["--chain-id", "7009"]);
    let mut moved = manifest.clone();
    moved["anchor"]["rpcs"] = json!([other.url()]);
    std::fs::write(dir.join("moved.json"), moved.to_string()).unwrap();
    let cases: [(&[&str], &str); 9] = [
        (&["market", "validators", "add", "nope", "--key-file", "deployer.key"], "validator nope: not an address"),
        (&["market", "slots", "reassign", "--slot", "9", "--signer", SECOND, "--key-file", "deployer.key"], "--slot 9"),
        (&["market", "slots", "full-node", "--slot", "9", "--key-file", "deployer.key"], "--slot 9"),
        (&["market", "release", "--key-file", "bad.key"], "--key-file bad.key is not a secp256k1 private key"),
        (&["market", "release", "--key-file", "deployer.key", "--manifest", "moved.json"], "anchor chain is 7001"),
        (
            &["market", "roles", "grant", "releaser", "0x12", "--key-file", "deployer.key"],
            "releaser 0x12: not an address",
        ),
        (&["market", "validators", "list", "--manifest", "moved.json"], "anchor chain is 7001"),
        (&["market", "env", "--slot", "1", "--manifest", "moved.json"], "anchor chain is 7001"),
        (&["market", "slots", "register", "--signer", SECOND], "give --key-file"),
    ];
    for (args, expected) in cases {
        let run = node.run(args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(error_line(&run).contains(expected), "{args:?}: {run:?}");
        assert_eq!(run.stderr.trim().lines().count(), 1, "{args:?}: one line: {run:?}");
        assert!(!run.stderr.contains(DEPLOYER_KEY), "{args:?}: the key is never shown");
    }
}

/// SIGKILL while its release is still pending: the restarted releaser
/// (same key) finds its key's transaction waiting and sends nothing over it
/// (says so on /health); once mined, releases go on — no hole, no range
/// twice, one transaction a release.
#[test]
fn a_releaser_killed_with_its_release_pending_restarts_without_a_hole_or_a_repeat() {
    restart_with_its_release_waiting(false);
}

/// Issue 55, item 1: the same on a node that estimates as geth does (at the
/// latest block: `rpc_filter.py geth:estimate`), which — unlike anvil's
/// pending block — would take a second release under the next nonce: one
/// that reverts once the first is mined, or waits forever behind one
/// priced out.
#[test]
fn a_releaser_restarted_with_its_release_waiting_sends_nothing_over_it_on_a_geth_like_node() {
    restart_with_its_release_waiting(true);
}

/// The same on ganache's chains (issue 55: another EVM implementation).
#[test]
fn a_releaser_killed_with_its_release_pending_restarts_without_a_hole_or_a_repeat_on_ganache() {
    restart_with_its_release_waiting_on(Client::Ganache, false);
}

/// A releaser killed with its release waiting in the anchor's pool, and
/// restarted (through a geth-like proxy when `geth_like`).
fn restart_with_its_release_waiting(geth_like: bool) {
    restart_with_its_release_waiting_on(Client::Anvil, geth_like);
}

fn restart_with_its_release_waiting_on(client: Client, geth_like: bool) {
    let (node, anchor, source, manifest) = deployed_on(client, 1);
    source.mine(5);
    anchor.set_automine(false);
    let mut first = Releaser::start(&node, "deployer.key", &["--first-block", "1", "--replace-after-secs", "600"]);
    wait_for_a_pending_release(&anchor);
    first.kill();
    let before = sent_by(&anchor, DEPLOYER);
    let geth = geth_like.then(|| lite_node_testkit::RpcFilter::start(&anchor.url(), &["geth:estimate"]));
    let mut flags = vec!["--first-block", "1", "--replace-after-secs", "600", "--listen", "127.0.0.1:0"];
    if let Some(geth) = &geth {
        let mut through = manifest.clone();
        through["anchor"]["rpcs"] = json!([geth.url()]);
        std::fs::write(node.cwd.path().join("market-geth.json"), through.to_string()).unwrap();
        flags.extend(["--manifest", "market-geth.json"]);
    }
    let mut again = Releaser::start(&node, "deployer.key", &flags);
    let line = again.wait_for("the health address", |l| l.starts_with("health on http://"));
    let health = line.split_whitespace().nth(2).unwrap().trim_end_matches(',').to_owned();
    lite_node_testkit::poll_until("the waiting release seen", std::time::Duration::from_secs(30), || {
        let body: Value = reqwest::blocking::get(&health).ok()?.json().ok()?;
        body["waiting"].as_str().is_some_and(|w| w.contains("(nonce") && w.contains("is waiting")).then_some(())
    });
    assert_eq!(anchor.pending(), 1, "nothing sent over the waiting release");
    mine_until_three_epochs(&anchor, &manifest);
    assert_eq!(again.stop(), Some(0));
    let released = releases(&anchor, &manifest);
    assert!(released.len() >= 3, "{released:?}");
    assert_contiguous(&released, 1);
    // One transaction a release: none went out to revert behind another.
    assert_eq!(sent_by(&anchor, DEPLOYER), before + released.len() as u64, "{released:?}");
}

/// At the fee cap a stuck release is waited for, not outbid again, and
/// /health says why; mined, releases go on.
#[test]
fn a_replacement_over_the_fee_cap_is_not_sent_and_health_says_so() {
    let (node, anchor, source, manifest) = deployed(1);
    rpc(&source.url(), "anvil_mine", json!(["0x5"]));
    rpc(&anchor.url(), "evm_setAutomine", json!([false]));
    let flags = ["--first-block", "1", "--replace-after-secs", "1", "--max-fee-gwei", "1", "--listen", "127.0.0.1:0"];
    let mut releaser = Releaser::start(&node, "deployer.key", &flags);
    let line = releaser.wait_for("the health address", |l| l.starts_with("health on http://"));
    let health = line.split_whitespace().nth(2).unwrap().trim_end_matches(',').to_owned();
    let body = lite_node_testkit::poll_until("/health at the cap", std::time::Duration::from_secs(30), || {
        let body: Value = reqwest::blocking::get(&health).ok()?.json().ok()?;
        body["waiting"].as_str().is_some_and(|w| w.contains("over the cap")).then_some(body)
    });
    assert_eq!(body["replaced"], 0, "nothing sent over the cap: {body}");
    mine_until_three_epochs(&anchor, &manifest);
    assert_eq!(releaser.stop(), Some(0));
    assert_contiguous(&releases(&anchor, &manifest), 1);
}

/// A release stuck in the pool (not dropped) is replaced under its nonce
/// with higher fees: the node takes the replacement in its place, and once
/// blocks are mined one of the two is, so no range is released twice.
#[test]
fn a_stuck_release_is_replaced_in_the_pool_and_mined_once() {
    let (node, anchor, source, manifest) = deployed(1);
    rpc(&source.url(), "anvil_mine", json!(["0x5"]));
    rpc(&anchor.url(), "evm_setAutomine", json!([false]));
    let flags = ["--first-block", "1", "--replace-after-secs", "1", "--listen", "127.0.0.1:0"];
    let mut releaser = Releaser::start(&node, "deployer.key", &flags);
    let line = releaser.wait_for("the health address", |l| l.starts_with("health on http://"));
    let health = line.split_whitespace().nth(2).unwrap().trim_end_matches(',').to_owned();
    lite_node_testkit::poll_until("a replacement sent", std::time::Duration::from_secs(30), || {
        let body: Value = reqwest::blocking::get(&health).ok()?.json().ok()?;
        (body["replaced"].as_u64() >= Some(1)).then_some(())
    });
    let pool = rpc(&anchor.url(), "txpool_status", json!([]));
    assert_eq!(pool["pending"], "0x1", "the replacement took the stuck one's place: {pool}");
    mine_until_three_epochs(&anchor, &manifest);
    assert_eq!(releaser.stop(), Some(0));
    assert_contiguous(&releases(&anchor, &manifest), 1);
}

/// Polls until a release waits in the anchor's pool (automine off).
fn wait_for_a_pending_release(anchor: &Anvil) {
    lite_node_testkit::poll_until("the first release pending", std::time::Duration::from_secs(30), || {
        (anchor.pending() > 0).then_some(())
    });
}

/// Turns automine back on, mines what is pending, and polls until source
/// blocks up to 3 are released.
fn mine_until_three_epochs(anchor: &Anvil, manifest: &Value) {
    anchor.set_automine(true);
    anchor.mine(1);
    lite_node_testkit::poll_until("three epochs released", std::time::Duration::from_secs(30), || {
        (last_released_end(anchor, manifest) >= 3).then_some(())
    });
}

/// The deployer's transactions so far (its nonce) on `anchor`.
fn sent_by(anchor: &Anvil, account: &str) -> u64 {
    let count = rpc(&anchor.url(), "eth_getTransactionCount", json!([account, "latest"]));
    lite_node_protocol::quantity::quantity(&count).unwrap()
}

/// Every market verb run again finds what the last run did and says so,
/// sending nothing: a deploy whose manifest is written, a signer that holds
/// a slot, a validator, a role, a day schedule, a slot's signer. A deploy
/// killed while it waits for a receipt the RPC cannot read (its hash said
/// first) is resumed from its record, not deployed twice.
#[test]
fn market_verbs_run_again_find_what_the_last_run_did_and_send_nothing() {
    use std::io::BufRead;

    let (node, anchor, source) = two_chains();
    // The receipt cannot be read (a provider behind on its index): the
    // deploy says its hash and waits; it is killed there.
    let filter = lite_node_testkit::RpcFilter::start(&anchor.url(), &["method:eth_getTransactionReceipt"]);
    let filtered = filter.url();
    let source_url = source.url();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lite-node"))
        .args(["market", "deploy", "--anchor-rpc", &filtered, "--source-rpc", &source_url])
        .args(["--key-file", "deployer.key", "--namespace", "T", "--epochs-per-day", "4"])
        .current_dir(node.cwd.path())
        .env_clear()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (lines, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let sent = lite_node_testkit::poll_until("the deployment's hash said", std::time::Duration::from_secs(60), || {
        said.try_iter().find(|l| l.starts_with("deployment sent: transaction 0x")).map(Some)
    });
    lite_node_testkit::poll_until("the receipt asked and refused", std::time::Duration::from_secs(30), || {
        (filter.refused() > 0).then_some(())
    });
    let _ = child.kill();
    let _ = child.wait();
    let hash =
        sent.expect("the deployment's hash is said before it is waited for").rsplit(' ').next().unwrap().to_owned();
    let record = node.cwd.path().join("market.json.deploying");
    assert!(std::fs::read_to_string(&record).unwrap().contains(&hash), "the deployment is recorded before it is sent");
    assert!(!node.cwd.path().join("market.json").exists());

    // Run again on the RPC that answers: the recorded transaction is
    // waited for, the manifest written, the record gone; one contract.
    let again = deploy(&node, &anchor, &source, &["--namespace", "T", "--epochs-per-day", "4"]);
    again.assert_ok();
    assert!(again.stderr.contains(&format!("resuming the deployment sent earlier: transaction {hash}")), "{again:?}");
    assert!(!record.exists(), "the record is removed once the manifest names the market");
    assert_eq!(sent_by(&anchor, DEPLOYER), 2, "one deployment and one setEpochsPerDay: {again:?}");

    // Deploy again with the manifest there: nothing sent.
    let third = deploy(&node, &anchor, &source, &["--namespace", "T", "--epochs-per-day", "4"]);
    third.assert_ok();
    assert!(third.stdout.contains("is already deployed") && third.stdout.contains("nothing sent"), "{third:?}");

    let owner = ["--key-file", "deployer.key"];
    let run = |args: &[&str]| node.run(&[args, &owner[..]].concat());
    let alice = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
    let steps: [(&[&str], &str); 6] = [
        (&["market", "slots", "register", "--signer", alice], "already holds slot 1: nothing sent"),
        (&["market", "slots", "register", "--signer", alice, "--slot", "1"], "slot 1 is already registered to"),
        (&["market", "slots", "reassign", "--slot", "1", "--signer", alice], "slot 1 is already registered to"),
        (&["market", "validators", "add", alice], "is already a validator: nothing sent"),
        (&["market", "roles", "grant", "releaser", alice], "is already a releaser: nothing sent"),
        (&["market", "days", "--epochs-per-day", "4"], "already starts every 4 epochs: nothing sent"),
    ];
    // The first run of each does it; the second says so and sends nothing.
    let [register, ..] = steps;
    run(register.0).assert_ok();
    run(&["market", "validators", "add", alice]).assert_ok();
    run(&["market", "roles", "grant", "releaser", alice]).assert_ok();
    let before = sent_by(&anchor, DEPLOYER);
    for (args, said) in steps {
        let again = run(args);
        again.assert_ok();
        assert!(again.stdout.contains(said), "{args:?}: {again:?}");
    }
    assert_eq!(sent_by(&anchor, DEPLOYER), before, "nothing was sent again");
    // Another slot for the same signer is asked for by its number.
    run(&["market", "slots", "register", "--signer", alice, "--slot", "2"]).assert_ok();
    let list = node.run(&["market", "slots", "list"]);
    assert!(list.stdout.contains("2 slot(s) registered"), "{list:?}");
}

/// A manifest of a chain that was reset — the same chain id, the contract
/// deployed at the same address again — is refused, naming the reset; a
/// key file others can read draws a warning.
#[test]
fn a_manifest_of_a_chain_that_was_reset_is_refused() {
    let (node, anchor, source, manifest) = deployed(1);
    // The same chain id, started afresh, and the same deployer's first
    // transaction: ProtocolState lands at the same address.
    let reset = Anvil::start_with(&["--chain-id", "7001"]);
    // Not the same history: the deployment lands in another block.
    rpc(&reset.url(), "anvil_mine", json!(["0x1"]));
    let other = Node::new();
    let key = other.cwd.path().join("deployer.key");
    std::fs::write(&key, DEPLOYER_KEY).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let second = other.run(&[
        "market",
        "deploy",
        "--anchor-rpc",
        &reset.url(),
        "--source-rpc",
        &source.url(),
        "--key-file",
        "deployer.key",
        "--namespace",
        "T",
    ]);
    second.assert_ok();
    assert!(second.stderr.contains("can be read by other users"), "a world-readable key file is warned of: {second:?}");
    let again: Value = serde_json::from_slice(&std::fs::read(other.cwd.path().join("market.json")).unwrap()).unwrap();
    assert_eq!(again["protocolState"], manifest["protocolState"], "the same address on the reset chain");
    let mut moved = manifest.clone();
    moved["anchor"]["rpcs"] = json!([reset.url()]);
    std::fs::write(node.cwd.path().join("reset.json"), moved.to_string()).unwrap();
    let run = node.run(&["market", "status", "--manifest", "reset.json"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(error_line(&run).contains("the chain was reset"), "{run:?}");
    drop(anchor);
}

/// `market status` shows how many projects each of the last epochs
/// finalized, and warns when the newest ones in a row are empty (a market
/// whose submissions reach no validator finalizes nothing, quietly).
#[test]
fn market_status_shows_the_projects_of_the_last_epochs_and_warns_on_a_run_of_empty_ones() {
    use alloy::sol_types::SolCall;
    use lite_node_protocol::contracts::submitSubmissionBatchCall;

    let world = lite_node_testkit::world::World::load();
    let m = &world.manifest;
    // The deployer is the one validator: its batch finalizes at once.
    world.register_validators(1);
    let chain = |name: &str| json!({ "name": name, "chainId": m.chain_id, "rpcs": [world.url()] });
    let manifest = json!({
        "version": 1, "anchor": chain("devnet"), "source": chain("ETH"),
        "protocolState": m.protocol_state, "dataMarket": m.data_market, "deployer": m.accounts[0].address,
        "deployBlock": 0, "epochSize": 1, "namespace": "UNISWAPV3",
    });
    let node = Node::new();
    std::fs::write(node.cwd.path().join("market.json"), manifest.to_string()).unwrap();
    let projects = [("baseSnapshot:0xaa:devnet-UNISWAPV3-ETH".to_owned(), "bafkreia".to_owned())];
    world.release_epoch_with_id(21);
    world.submit_batch(21, "bafkreibatch21", &projects);
    world.store_finalized(21, &projects);
    for epoch in 22..=25 {
        world.release_epoch_with_id(epoch);
        let call = submitSubmissionBatchCall {
            dataMarketAddress: m.data_market.parse().unwrap(),
            batchCid: format!("bafkreiempty{epoch}"),
            epochId: alloy::primitives::U256::from(epoch),
            finalizedCidsRootHash: alloy::primitives::KECCAK256_EMPTY,
        };
        assert_eq!(world.transact(call.abi_encode())["status"], "0x1");
    }
    let status = node.run(&["market", "status"]);
    status.assert_ok();
    assert!(
        status.stdout.contains("projects finalized, newest first: 25: empty, 24: empty, 23: empty, 22: empty, 21: 1"),
        "{}",
        status.stdout
    );
    assert!(status.stdout.contains("warning: the last 4 finalized epochs are empty"), "{}", status.stdout);
    // One with projects again: no warning.
    world.release_epoch_with_id(26);
    world.submit_batch(26, "bafkreibatch26", &projects);
    let status = node.run(&["market", "status"]);
    status.assert_ok();
    assert!(status.stdout.contains("newest first: 26: storing, 25: empty"), "{}", status.stdout);
    assert!(!status.stdout.contains("warning:"), "{}", status.stdout);
}
