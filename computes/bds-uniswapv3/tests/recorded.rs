//! The market's package over a recorded epoch of the devnet's 1,000-pool
//! world: every pool's snapshot must keep the exact bytes it had when the
//! epoch was recorded, whatever the code that reads the chain becomes.
//!
//! `tests/data/world-1000-epoch.json` holds what the source chain answered
//! (every `eth_call`, every pool log of the epoch, the head) and the
//! Keccak-256 of each pool's snapshot as the package computed it then. The
//! replay below serves those answers as a chain would: an `eth_getLogs` is
//! answered by filtering the recorded logs by block range, address and
//! topic (however the range is chunked), an `eth_call` by its target,
//! calldata and block, so the test holds for any way of asking.
//!
//! To record again (the recording must come from the code whose bytes are
//! the reference), start anvil on `devnet/world-1000/state.json`, give the
//! pools some activity (`devnet/record-activity.py` makes swaps, mints,
//! burns and collects in blocks 43 and 44), then:
//!
//! ```text
//! BDS_RECORD_RPC=http://127.0.0.1:18545 BDS_RECORD_MANIFEST=$PWD/../devnet/world-1000/manifest.json \
//!   cargo test -p bds-uniswapv3 --test recorded -- --ignored record
//! ```

use std::{collections::BTreeMap, path::PathBuf, sync::Mutex};

use alloy_primitives::keccak256;
use bds_uniswapv3::BaseSnapshotProcessor;
use lite_node_plugin_api::{BlockDetail, Chain, EpochContext, RpcError, testing::TestHost};
use serde_json::{Value, json};

const EPOCH_ID: u64 = 7;
const BEGIN: u64 = 43;
const END: u64 = 44;

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/world-1000-epoch.json")
}

fn epoch() -> EpochContext {
    EpochContext {
        epoch_id: EPOCH_ID,
        begin: BEGIN,
        end: END,
        day_id: 1,
        slot_id: 1,
        total_slots: 4,
        anchor_block: 0,
        namespace: "devnet-UNISWAPV3-ETH".into(),
        project_type: "baseSnapshot".into(),
    }
}

/// An answer of 32-byte words, each without its leading zeros, joined by
/// `.` (the recording is a third of its size this way).
fn compact(answer: &str) -> String {
    let hex = answer.strip_prefix("0x").expect("a hex answer");
    assert!(!hex.is_empty() && hex.len().is_multiple_of(64), "an answer of whole words: {answer}");
    let words: Vec<&str> = (0..hex.len() / 64).map(|i| hex[i * 64..i * 64 + 64].trim_start_matches('0')).collect();
    words.join(".")
}

fn expand(compact: &str) -> String {
    let words: String = compact.split('.').map(|w| format!("{w:0>64}")).collect();
    format!("0x{words}")
}

fn quantity(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().expect("a quantity").trim_start_matches("0x"), 16).expect("a quantity")
}

/// The recorded blocks, `[number, hash, timestamp]` each, as block details.
fn details(blocks: &[Value]) -> Vec<BlockDetail> {
    blocks
        .iter()
        .map(|b| BlockDetail {
            number: b[0].as_u64().unwrap(),
            hash: b[1].as_str().unwrap().into(),
            timestamp: b[2].as_u64().unwrap(),
        })
        .collect()
}

/// The recorded chain: `calls[to][data][block]`, the logs, the head.
struct Recorded {
    calls: BTreeMap<String, BTreeMap<String, BTreeMap<u64, String>>>,
    /// `[address, block, log index, transaction hash, [topics], data]`.
    logs: Vec<Value>,
    head: u64,
    blocks: Vec<BlockDetail>,
}

impl Recorded {
    fn load(fixture: &Value) -> Self {
        let calls = serde_json::from_value(fixture["calls"].clone()).expect("calls");
        let blocks = details(fixture["blocks"].as_array().expect("blocks"));
        Self {
            calls,
            logs: fixture["logs"].as_array().expect("logs").clone(),
            head: fixture["head"].as_u64().expect("head"),
            blocks,
        }
    }

    fn answer(&self, method: &str, params: &str) -> Result<String, RpcError> {
        let p: Value = serde_json::from_str(params).expect("params are JSON");
        let missing = |what: String| Err(RpcError { code: Some(-32000).into(), message: what.into() });
        match method {
            "eth_blockNumber" => Ok(json!(format!("0x{:x}", self.head)).to_string()),
            "eth_call" => {
                let to = p[0]["to"].as_str().unwrap().to_ascii_lowercase();
                let data = p[0]["data"].as_str().or(p[0]["input"].as_str()).unwrap().to_ascii_lowercase();
                let block = quantity(&p[1]);
                match self.calls.get(&to).and_then(|c| c.get(&data)).and_then(|c| c.get(&block)) {
                    Some(answer) => Ok(json!(expand(answer)).to_string()),
                    None => missing(format!("not recorded: eth_call {data} on {to} at block {block}")),
                }
            }
            "eth_getLogs" => {
                let filter = &p[0];
                let (from, to) = (quantity(&filter["fromBlock"]), quantity(&filter["toBlock"]));
                if from < BEGIN || to > END {
                    return missing(format!("not recorded: logs of blocks {from}..={to}"));
                }
                let listed = |v: &Value| -> Vec<String> {
                    match v {
                        Value::Null => vec![],
                        Value::String(s) => vec![s.to_ascii_lowercase()],
                        Value::Array(a) => a.iter().map(|s| s.as_str().unwrap().to_ascii_lowercase()).collect(),
                        other => panic!("a filter of {other}"),
                    }
                };
                let addresses = listed(&filter["address"]);
                let topic0 = listed(&filter["topics"][0]);
                let hash = |n: u64| self.blocks.iter().find(|b| b.number == n).map(|b| b.hash.to_string());
                let logs: Vec<Value> = self
                    .logs
                    .iter()
                    .filter(|l| (from..=to).contains(&l[1].as_u64().unwrap()))
                    .filter(|l| addresses.is_empty() || addresses.contains(&l[0].as_str().unwrap().to_string()))
                    .filter(|l| topic0.is_empty() || topic0.contains(&l[4][0].as_str().unwrap().to_string()))
                    .map(|l| {
                        let block = l[1].as_u64().unwrap();
                        json!({
                            "address": l[0],
                            "blockNumber": format!("0x{block:x}"),
                            "blockHash": hash(block),
                            "logIndex": format!("0x{:x}", l[2].as_u64().unwrap()),
                            "transactionHash": l[3],
                            "topics": l[4],
                            "data": expand(l[5].as_str().unwrap()),
                            "removed": false,
                        })
                    })
                    .collect();
                Ok(Value::Array(logs).to_string())
            }
            other => missing(format!("not recorded: {other}")),
        }
    }
}

fn digest(json: &str) -> String {
    format!("{:x}", keccak256(json.as_bytes()))
}

#[test]
fn every_pool_of_a_recorded_1000_pool_epoch_keeps_its_bytes() {
    let fixture: Value = serde_json::from_slice(&std::fs::read(fixture_path()).expect("the recording")).unwrap();
    let recorded = Recorded::load(&fixture);
    let mut host = TestHost::with_blocks(recorded.blocks.clone());
    host.rpc = Some(Box::new(move |chain, method, params| {
        assert_eq!(chain, Chain::Source);
        recorded.answer(method, params)
    }));
    let processor = BaseSnapshotProcessor::from_settings(&fixture["settings"].to_string()).unwrap();
    let out = processor.compute(&epoch(), &host.host()).unwrap();
    let want: BTreeMap<String, String> = serde_json::from_value(fixture["snapshots"].clone()).unwrap();
    assert_eq!(want.len(), 1000, "the recording holds the 1,000-pool world");
    assert_eq!(out.len(), want.len(), "every pool snapshotted");
    for snapshot in &out {
        let pool = snapshot.data_source.as_str();
        assert_eq!(Some(&digest(&snapshot.json)), want.get(pool), "pool {pool}'s bytes changed: {}", snapshot.json);
    }
    let events: usize = fixture["logs"].as_array().unwrap().len();
    assert!(events >= 800, "the epoch has activity to snapshot ({events} logs)");
}

/// Forwards one JSON-RPC call to `url` (curl: a recording is made by hand,
/// never in the suite).
fn forward(url: &str, method: &str, params: &str) -> Result<String, RpcError> {
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
    let out = std::process::Command::new("curl")
        .args(["-sS", "-X", "POST", "-H", "content-type: application/json", "--data-binary", &body, url])
        .output()
        .expect("curl runs");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{url} answered no JSON: {e}"));
    if let Some(e) = v.get("error") {
        return Err(RpcError { code: e["code"].as_i64().into(), message: e["message"].to_string().into() });
    }
    Ok(v["result"].to_string())
}

#[test]
#[ignore = "records the fixture from a running anvil: see the module's docs"]
#[allow(clippy::disallowed_methods)] // a recording by hand: its two settings come from the shell
fn record() {
    let url = std::env::var("BDS_RECORD_RPC").expect("BDS_RECORD_RPC: the anvil to record from");
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(std::env::var("BDS_RECORD_MANIFEST").expect("BDS_RECORD_MANIFEST")).unwrap(),
    )
    .unwrap();
    let pools: Vec<String> =
        manifest["pools"].as_array().unwrap().iter().map(|p| p["address"].as_str().unwrap().to_lowercase()).collect();
    let tokens: Vec<&str> = manifest["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    // Token 1 is worth a dollar; every other token is priced through the
    // first pool pairing it with token 1 (the USD routes).
    let stable = tokens[1].to_lowercase();
    let mut routes: BTreeMap<String, String> = BTreeMap::new();
    for p in manifest["pools"].as_array().unwrap() {
        let pair = [p["token0"].as_str().unwrap().to_lowercase(), p["token1"].as_str().unwrap().to_lowercase()];
        if let Some(i) = pair.iter().position(|t| *t == stable) {
            routes.entry(pair[1 - i].clone()).or_insert_with(|| p["address"].as_str().unwrap().to_lowercase());
        }
    }
    let settings = json!({
        "pools": pools,
        "full_node": true,
        "usd": {"stablecoins": [stable], "pools": routes.into_values().collect::<Vec<_>>()},
    });
    let mut blocks = Vec::new();
    for n in BEGIN..=END {
        let b: Value =
            serde_json::from_str(&forward(&url, "eth_getBlockByNumber", &format!(r#"["0x{n:x}",false]"#)).unwrap())
                .unwrap();
        blocks.push(json!([n, b["hash"], quantity(&b["timestamp"])]));
    }
    let head = quantity(&serde_json::from_str(&forward(&url, "eth_blockNumber", "[]").unwrap()).unwrap());
    let calls = std::sync::Arc::new(Mutex::new(BTreeMap::<String, BTreeMap<String, BTreeMap<u64, String>>>::new()));
    let logs = std::sync::Arc::new(Mutex::new(Vec::<Value>::new()));
    let mut host = TestHost::with_blocks(details(&blocks));
    let (c, l) = (calls.clone(), logs.clone());
    host.rpc = Some(Box::new(move |_, method, params| {
        let answer = forward(&url, method, params)?;
        let p: Value = serde_json::from_str(params).unwrap();
        match method {
            "eth_call" => {
                let text: String = serde_json::from_str(&answer).unwrap();
                let to = p[0]["to"].as_str().unwrap().to_ascii_lowercase();
                let data = p[0]["data"].as_str().unwrap().to_ascii_lowercase();
                c.lock()
                    .unwrap()
                    .entry(to)
                    .or_default()
                    .entry(data)
                    .or_default()
                    .insert(quantity(&p[1]), compact(&text));
            }
            "eth_getLogs" => {
                let answered: Value = serde_json::from_str(&answer).unwrap();
                for log in answered.as_array().unwrap() {
                    l.lock().unwrap().push(json!([
                        log["address"].as_str().unwrap().to_ascii_lowercase(),
                        quantity(&log["blockNumber"]),
                        quantity(&log["logIndex"]),
                        log["transactionHash"],
                        log["topics"],
                        compact(log["data"].as_str().unwrap()),
                    ]));
                }
            }
            other => panic!("the package asked {other}, which the replay does not serve"),
        }
        Ok(answer)
    }));
    let processor = BaseSnapshotProcessor::from_settings(&settings.to_string()).unwrap();
    let out = processor.compute(&epoch(), &host.host()).unwrap();
    let snapshots: BTreeMap<String, String> =
        out.iter().map(|s| (s.data_source.to_string(), digest(&s.json))).collect();
    let mut logs = logs.lock().unwrap().clone();
    logs.sort_by_key(|l| (l[1].as_u64(), l[2].as_u64()));
    logs.dedup();
    let fixture = json!({
        "recorded": "the devnet's 1,000-pool world (devnet/build-world.sh), blocks 43-44 made by devnet/record-activity.py",
        "epoch": {"id": EPOCH_ID, "begin": BEGIN, "end": END},
        "head": head,
        "blocks": blocks,
        "settings": settings,
        "calls": *calls.lock().unwrap(),
        "logs": logs,
        "snapshots": snapshots,
    });
    std::fs::create_dir_all(fixture_path().parent().unwrap()).unwrap();
    std::fs::write(fixture_path(), serde_json::to_string(&fixture).unwrap()).unwrap();
    println!("recorded {} snapshots, {} logs", out.len(), fixture["logs"].as_array().unwrap().len());
}
