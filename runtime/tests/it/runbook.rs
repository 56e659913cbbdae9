//! docs/launch-a-market.md, run as written: its `sh` blocks in order, in
//! one bash shell, in an empty directory — the prerequisites (the devnet
//! world by `devnet/build-world.sh --if-stale`, a no-op once `./init.sh test`
//! has built it; `lite-node` installed only if it is not on `PATH`, and the
//! test puts the one it built there), two anvils (anchor 7001, source 7002),
//! `market deploy`, slots and validators, three validators, the collector,
//! four nodes from `market env`, `market release` — until a consumer's
//! `lite-node finalized --proof` verifies a CID against the root on chain.
//! Only the checkout's path and the first port are filled in (tests run side
//! by side), and the compute package builds into the tests' shared target dir.

use std::{
    os::unix::process::CommandExt,
    process::{Command, Stdio},
    time::Duration,
};

use crate::support::Node;

/// A process group killed (SIGKILL) however the test ends.
struct Group(std::process::Child);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.0.id())]).status();
        let _ = self.0.wait();
    }
}

/// The first of 41 consecutive ports on 127.0.0.1 that are free now, below
/// the kernel's ephemeral range (32768 and up on Linux): ports the other
/// tests take with `bind(0)` and hand to their children never land here
/// between this check and the runbook's listeners.
fn free_ports() -> u16 {
    const FIRST: u16 = 20_000;
    const LAST: u16 = 32_000;
    let span = (LAST - FIRST) / 41;
    let mut base = FIRST + (std::process::id() % u32::from(span)) as u16 * 41;
    loop {
        let free = (0..=40).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if free {
            return base;
        }
        base = if base + 82 > LAST { FIRST } else { base + 41 };
    }
}

/// The last `n` lines of a log, for a failure's report.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The runbook, run: its `sh` blocks in order (with `steps` put in after
/// the blocks they name, a drill's own), in one bash shell in `node`'s
/// directory; panics naming where it stood if it does not end in time.
fn run(node: &Node, steps: &[(usize, &str)]) -> String {
    run_with(node, steps, &[])
}

/// [`run`], with each `(text, instead)` of `swaps` put in for the
/// runbook's text (which must hold it).
fn run_with(node: &Node, steps: &[(usize, &str)], swaps: &[(&str, String)]) -> String {
    let root = lite_node_testkit::workspace_root();
    let doc = std::fs::read_to_string(root.join("docs/launch-a-market.md")).unwrap();
    let blocks: Vec<&str> = doc.split("```sh\n").skip(1).map(|b| b.split("```").next().unwrap()).collect();
    assert!(blocks.len() >= 13, "the runbook's steps: {}", blocks.len());
    // The first block is the prerequisites a newcomer on a fresh clone needs:
    // the git-ignored world, and lite-node when it is not on PATH.
    assert!(
        blocks[0].contains("\"$CHECKOUT/devnet/build-world.sh\" --if-stale")
            && blocks[0].contains("command -v lite-node"),
        "the runbook's prerequisites:\n{}",
        blocks[0]
    );
    let mut script = String::new();
    for (i, block) in blocks.iter().enumerate() {
        script.push_str(block);
        for (_, step) in steps.iter().filter(|(after, _)| *after == i) {
            script.push_str(step);
        }
    }
    let placeholder = "CHECKOUT=<this repository's root>";
    assert!(script.contains(placeholder) && script.contains("\nBASE=18500 "), "the runbook's settings:\n{script}");
    for (text, instead) in swaps {
        assert!(script.contains(text), "the runbook no longer says `{text}`");
        script = script.replace(text, instead);
    }
    let base = free_ports();
    let script = script
        .replace(placeholder, &format!("CHECKOUT='{}'", root.display()))
        .replace("\nBASE=18500 ", &format!("\nBASE={base} "));

    let dir = node.cwd.path();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node")).parent().unwrap().to_owned();
    let path = format!("{}:{}", bin.display(), lite_node_testkit::host_var("PATH"));
    let output = std::fs::File::create(dir.join("runbook.out")).unwrap();
    let child = Command::new("bash")
        .arg("-ec")
        .arg(&script)
        .current_dir(dir)
        .env_clear()
        .envs(lite_node_testkit::toolchain_env())
        .env("PATH", &path)
        .envs(lite_node_testkit::compute_build_env())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(output.try_clone().unwrap())
        .stderr(output)
        .process_group(0)
        .spawn()
        .unwrap();
    let mut group = Group(child);
    let read = |rel: &str| std::fs::read_to_string(dir.join(rel)).unwrap_or_default();
    // Polled until it ends, with a deadline that names where it stood.
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    let status = loop {
        if let Some(status) = group.0.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let logs: Vec<String> = [
                "logs/releaser.log",
                "logs/collector.log",
                "logs/validator-1.log",
                "logs/validator-2.log",
                "logs/validator-3.log",
                "logs/node-1.log",
                "logs/node-2.log",
            ]
            .iter()
            .map(|l| format!("--- {l} (its last lines)\n{}", tail(&read(l), 12)))
            .collect();
            panic!("the runbook did not end in 600 s:\n{}\n{}", read("runbook.out"), logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = read("runbook.out");
    assert!(status.success(), "the runbook failed ({status}):\n{out}\n--- collector\n{}", read("logs/collector.log"));
    assert!(
        out.contains("verified against the root on chain: here, and by ProtocolState.verifyFinalizedCid (true)"),
        "{out}"
    );
    // Step 10: the consumer read the data itself, verified to the root,
    // and computed it again with the market's package: the same bytes.
    assert!(out.contains("replayed: the market's compute package computes the same"), "{out}");
    assert!(out.contains("verified: ") && out.contains(" bytes → bafk"), "one snapshot read and verified:\n{out}");
    assert!(out.contains("project(s): bytes → CID (sha256, canonical JSON) → multiproof → root"), "{out}");
    let snapshot = read("snapshot.json");
    let parsed: serde_json::Value = serde_json::from_str(snapshot.trim()).expect("the snapshot is JSON");
    assert!(parsed.is_object(), "{snapshot}");
    let epoch = read("epoch.ndjson");
    let lines: Vec<serde_json::Value> = epoch.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!lines.is_empty() && lines.iter().all(|l| l["snapshot"].is_object()), "{epoch}");
    assert!(lines.iter().any(|l| l["snapshot"] == parsed), "the epoch holds the project's snapshot");
    out
}

#[test]
fn the_launch_a_market_runbook_reaches_a_finalized_cid_a_consumer_verifies() {
    let node = Node::new();
    // Issue 55: an operator's `.env` from `market env` is whole — the
    // market's pinned projects and what identifies them — and `lite-node
    // check` takes it; with a projects file the market does not list (the
    // checkout's own), it exits 2 naming the difference.
    let check = r#"
(cd node-1 && lite-node --env-file .env check --offline > ../check-whole.txt 2>&1)
lite-node market env --validator > validator-block.env
grep -v '^SNAPSHOT_CONFIG_REPO' node-1/.env | sed "s|^PROJECTS_CONFIG=.*|PROJECTS_CONFIG=$CHECKOUT/projects.json|" > other.env
set +e
(cd node-1 && lite-node --env-file ../other.env check --offline > ../check-other.txt 2>&1)
echo "other projects: exit $?" >> check-other.txt
set -e
"#;
    run(&node, &[(7, check)]);
    let read = |rel: &str| std::fs::read_to_string(node.cwd.path().join(rel)).unwrap_or_default();
    let whole = read("check-whole.txt");
    assert!(whole.contains("ok   market's projects: the market's (5 pool(s)"), "{whole}");
    assert!(!whole.contains("FAIL"), "{whole}");
    let env = read("node-1/.env");
    for line in ["SNAPSHOT_CONFIG_REPO=file://", "PROJECTS_CONFIG=projects.json", "MARKET_PROJECT_TYPES=baseSnapshot"] {
        assert!(env.lines().any(|l| l.starts_with(line)), "{line} in:\n{env}");
    }
    // A new validator's block: the market's settings and flags.
    let block = read("validator-block.env");
    for part in ["SNAPSHOT_CONFIG_REPO=file://", "MARKET_PROJECTS_HASH=0x", "--from-block ", "--p2p-bootstrap /ip4/"] {
        assert!(block.contains(part), "{part} in:\n{block}");
    }
    let other = read("check-other.txt");
    assert!(other.contains("other projects: exit 2"), "{other}");
    assert!(
        other.contains(
            "FAIL market's projects: projects blockDetails are not the market's baseSnapshot (missing here: \
                        baseSnapshot; not the market's: blockDetails)"
        ),
        "{other}"
    );
    // Every submission was signed for the anchor chain's domain, by the
    // slot's signer, selected by the market's rule: none was rejected.
    // The market's own processes read the market's pinned projects and
    // what identifies them (the validator's block as market.env).
    let market_env = read("market.env");
    assert!(market_env.contains("MARKET_PROJECTS_HASH=0x") && !market_env.contains("PRIVATE_KEY"), "{market_env}");
    // The pools come from the pinned projects (no pools file is given).
    let validator = read("logs/validator-1.log");
    assert!(validator.contains(", 5 active pools"), "{validator}");
    let collector = read("logs/collector.log");
    assert!(collector.lines().any(|l| l.starts_with("accepted epoch ")), "{collector}");
    assert!(!collector.lines().any(|l| l.starts_with("rejected ")), "{collector}");
    let manifest: serde_json::Value = serde_json::from_str(&read("market.json")).unwrap();
    assert_eq!(
        (manifest["anchor"]["chainId"].as_u64(), manifest["source"]["chainId"].as_u64()),
        (Some(7001), Some(7002))
    );
}

/// Issue 55: the runbook's market with its anchor chain on an EVM node
/// other than anvil — ganache (ethereumjs, pinned in devnet/package.json),
/// its accounts the runbook's keys: the contract deployed, slots and
/// validators registered, epochs released, batches submitted, attested,
/// finalized and their pairs stored, and a consumer's read verified to the
/// root on chain, as on anvil.
#[test]
fn the_launch_a_market_runbook_runs_with_ganache_as_its_anchor_chain() {
    let node = Node::new();
    // The owner's and the three validators' keys (the runbook's), funded.
    let keys = [
        "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
        "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
        "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
        "7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    ];
    let accounts: Vec<String> = keys.iter().map(|k| format!("--wallet.accounts 0x{k},0x3635C9ADC5DEA00000")).collect();
    let ganache = format!(
        "ganache --server.host 127.0.0.1 --server.port $BASE --chain.chainId 7001 --miner.blockTime 0.5 {} \
         > logs/anchor.log 2>&1 &",
        accounts.join(" ")
    );
    let anvil = "anvil --port $BASE --chain-id 7001 --block-time 0.5 > logs/anchor.log 2>&1 &";
    run_with(&node, &[], &[(anvil, ganache)]);
    let anchor = std::fs::read_to_string(node.cwd.path().join("logs/anchor.log")).unwrap_or_default();
    assert!(anchor.contains("ganache v7.9.2"), "the anchor chain was ganache's:\n{anchor}");
}

/// Extra collectors on the validators' topic the runbook's market gets.
const EXTRA_COLLECTORS: usize = 40;

/// Slot 2's new signer in the upkeep drill (anvil's account 8) and its key.
const NEW_SIGNER: &str = "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f";
const NEW_KEY: &str = "dbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97";

/// The upkeep drill's steps, in the runbook's shell after the release: slot
/// 2 to a new signer whose node takes over from the old one, slot 4 removed
/// and registered again (its node keeps running), validator 3 removed and
/// added back; then five more epochs finalized.
const UPKEEP: &str = r#"released() { lite-node market status | sed -n 's/^epochs released: \([0-9]*\).*/\1/p'; }
finalized() { lite-node market status | sed -n 's/^last finalized: epoch \([0-9]*\).*/\1/p'; }
stop_node() { for p in $(pgrep -f -- '--env-file .env run'); do
  [ "$(readlink /proc/$p/cwd)" = "$PWD/$1" ] && kill $p; done; true; }
lite-node market slots reassign --slot 2 --signer {NEW_SIGNER} --key-file owner.key
echo "slot 2 reassigned after epoch $(released)"
stop_node node-2
mkdir -p node-2b
(umask 077; lite-node market env --slot 2 | sed "s/^SIGNER_ACCOUNT_PRIVATE_KEY=\$/&{NEW_KEY}/" > node-2b/.env)
cat >> node-2b/.env <<ENV
LOCAL_COLLECTOR_HOST=127.0.0.1
LOCAL_COLLECTOR_PORT=$((BASE + 2))
LITE_NODE_COMPUTE_CACHE_DIR=$PWD/compute-cache
LITE_NODE_DATA_DIR=$PWD/node-2b
STATUS_PORT=$((BASE + 9))
ENV
(cd node-2b && exec lite-node --env-file .env run > ../logs/node-2b.log 2>&1) &
lite-node market slots remove --slot 4 --key-file owner.key
lite-node market slots register --signer 0x14dC79964da2C08b23698B3D3cc7Ca32193d9955 --key-file owner.key
lite-node market validators remove 0x90F79bf6EB2c4f870365E785982E1f101E93b906 --key-file owner.key
lite-node market validators add 0x90F79bf6EB2c4f870365E785982E1f101E93b906 --key-file owner.key
UPKEPT=$(released)
echo "upkeep done after epoch $UPKEPT"
until [ "$(finalized)" -ge $((UPKEPT + 5)) ]; do sleep 1; done
LAST=$(finalized)
echo "last checked: $LAST"
"#;

/// The runbook's market with forty more operators' collectors on the
/// validators' topic (real `lite-node collector` processes, started after
/// the validators and before the market's own collector, as operators
/// running `docker-compose.yaml` would), then its routine upkeep while
/// every node keeps submitting: slot 2 reassigned to a new signer (whose
/// node takes over), slot 4 removed and registered again, a validator
/// removed and added back. No validator's intake breaks, the market's
/// collector never asks a node to retry, no epoch finalizes empty, and
/// every epoch from the first finalized on holds every submission the nodes
/// had accepted — the new signer's included.
#[test]
fn the_runbooks_market_with_forty_more_collectors_and_its_upkeep_finalizes_every_submission() {
    let node = Node::new();
    let dir = node.cwd.path();
    let extra = format!(
        "for i in $(seq 1 {EXTRA_COLLECTORS}); do
  lite-node collector --listen 127.0.0.1:0 --anchor-rpc $ANCHOR_RPC --protocol-state $PROTOCOL_STATE \\
    --data-market $DATA_MARKET --p2p-listen /ip4/127.0.0.1/tcp/0 --p2p-bootstrap $PEERS \\
    --data-dir extra-$i > logs/extra-$i.log 2>&1 &
done
"
    );
    // After the first finalized epoch, four more.
    let more = "FIRST=$(lite-node market status | sed -n 's/^last finalized: epoch \\([0-9]*\\).*/\\1/p')
echo \"first finalized: $FIRST\"
until [ \"$(lite-node market status | sed -n 's/^last finalized: epoch \\([0-9]*\\).*/\\1/p')\" -ge $((FIRST + 4)) ]; do
  sleep 1
done
";
    // Upkeep, each step while every node submits.
    let upkeep = UPKEEP.replace("{NEW_SIGNER}", NEW_SIGNER).replace("{NEW_KEY}", NEW_KEY);
    // What the chain finalized for each of them, read before the runbook's
    // last step stops the chains.
    let read_back = "for e in $(seq $FIRST $LAST); do
  until lite-node finalized --epoch-id $e --anchor-rpc $ANCHOR_RPC --protocol-state $PROTOCOL_STATE \\
    --data-market $DATA_MARKET > finalized-$e.txt; do sleep 1; done
done
";
    // Blocks: 0 prerequisites, 1 chains, 2 deploy, 3 projects, 4 slots,
    // 5 validators, 6 collector, 7 nodes, 8 release, 9 the consumer's CID,
    // 10 the consumer's data.
    let out = run(&node, &[(5, &extra), (8, more), (8, &upkeep), (9, read_back)]);
    let read = |rel: &str| std::fs::read_to_string(dir.join(rel)).unwrap_or_default();
    for i in 1..=EXTRA_COLLECTORS {
        let log = read(&format!("logs/extra-{i}.log"));
        assert!(log.contains("gossip: publishing accepted submissions from"), "extra collector {i}:\n{log}");
    }
    for v in 1..=3 {
        let log = read(&format!("logs/validator-{v}.log"));
        assert!(!log.contains("are not attested"), "validator {v}'s intake broke:\n{log}");
    }
    let collector = read("logs/collector.log");
    for refusal in ["no validator connected", "was not published"] {
        assert!(!collector.contains(refusal), "the market's collector refused ({refusal}):\n{collector}");
    }
    // Every epoch from the first finalized to the last checked holds
    // exactly what the nodes' submissions the collector accepted were.
    let said = |prefix: &str| -> u64 {
        out.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{prefix}` in:\n{out}"))
    };
    let (first, last) = (said("first finalized: "), said("last checked: "));
    let mut accepted: std::collections::BTreeMap<u64, std::collections::BTreeSet<(String, String)>> =
        Default::default();
    let mut new_signer_took = 0;
    for node in ["node-1", "node-2", "node-2b", "node-3", "node-4"] {
        for line in read(&format!("{node}/state/epochs.jsonl")).lines() {
            let entry: serde_json::Value = serde_json::from_str(line).unwrap();
            let epoch = entry["epoch_id"].as_u64().unwrap();
            for stored in entry["stored"].as_array().into_iter().flatten() {
                let id = stored["project_id"].as_str().unwrap();
                let took = entry["submissions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|s| s["project_id"] == id && s["verdict"] == "accepted");
                if took {
                    new_signer_took += usize::from(node == "node-2b");
                    accepted
                        .entry(epoch)
                        .or_default()
                        .insert((id.to_owned(), stored["cid"].as_str().unwrap().to_owned()));
                }
            }
        }
    }
    assert!(new_signer_took > 0, "node-2b (slot 2's new signer) had nothing accepted:\n{}", read("logs/node-2b.log"));
    let rejected: Vec<&str> = collector.lines().filter(|l| l.starts_with("rejected ")).collect();
    println!(
        "upkeep drill: epochs {first}..={last} checked; node-2b (slot 2's new signer) had {new_signer_took} \
         accepted; the collector rejected {}{}",
        rejected.len(),
        rejected.iter().map(|l| format!("\n  {l}")).collect::<String>()
    );
    for epoch in first..=last {
        let want = accepted.get(&epoch).cloned().unwrap_or_default();
        assert!(!want.is_empty(), "epoch {epoch}: no accepted submission in the nodes' journals");
        let finalized = read(&format!("finalized-{epoch}.txt"));
        let got: std::collections::BTreeSet<(String, String)> = finalized
            .lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                let (id, cid) = (words.next()?, words.next()?);
                id.starts_with("baseSnapshot:").then(|| (id.to_owned(), cid.to_owned()))
            })
            .collect();
        assert_eq!(got, want, "epoch {epoch}: finalized on chain vs accepted from the nodes:\n{finalized}");
    }
}
