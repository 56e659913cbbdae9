//! Reading Uniswap V3 pools through the host's batched JSON-RPC. Every
//! failure names the pool and the call; an answer that does not look right
//! (a missing block, a truncated log, an error inside a batch) is an error,
//! never a silently smaller snapshot.

use std::collections::BTreeMap;

use lite_node_plugin_api::{Chain, Host, RpcCall};
use serde_json::{Value, json};

use crate::math::Wide;

/// Calls per JSON-RPC batch.
const BATCH: usize = 500;

pub const SWAP: &str = "0xc42079f94a6350d7e6235f29174924f928cc2ac818eb64fed8004e115fbcca67";
pub const MINT: &str = "0x7a53080ba414158be7ec69b987b5fb7d07dee101fe85488f0853ae16239d0bde";
pub const BURN: &str = "0x0c396cd989a39f4459b5fa1aed6a9a8dcdbc45908acfd67e028cd568da98982c";
pub const COLLECT: &str = "0x70935338e69775456a85ddef226c395fb668b63fa0115f5f20610b388e6ca9c0";
pub const POOL_CREATED: &str = "0x783cca1c0412dd0d695e784568c96da2e9c22ff989357a2e8b1d9b2b4e6b7118";

pub const SLOT0: &str = "0x3850c7bd";
pub const TOKEN0: &str = "0x0dfe1681";
pub const TOKEN1: &str = "0xd21220a7";
pub const FEE: &str = "0xddca3f43";
pub const DECIMALS: &str = "0x313ce567";
pub const BALANCE_OF: &str = "0x70a08231";

/// One `eth_call`: target, calldata, block tag, and how errors name it.
#[derive(Clone, Debug)]
pub struct Call {
    pub pool: String,
    pub to: String,
    pub data: String,
    pub block: u64,
    pub what: &'static str,
}

impl Call {
    fn describe(&self) -> String {
        format!("pool {}: eth_call {} at block {}", self.pool, self.what, self.block)
    }
}

/// Runs `calls` in batches; every answer must be 32-byte words.
pub fn eth_calls(host: &Host<'_>, calls: &[Call]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::with_capacity(calls.len());
    for chunk in calls.chunks(BATCH) {
        let requests: Vec<RpcCall> = chunk
            .iter()
            .map(|c| {
                let tag = format!("0x{:x}", c.block);
                RpcCall {
                    method: "eth_call".into(),
                    params_json: json!([{"to": c.to, "data": c.data}, tag]).to_string().into(),
                }
            })
            .collect();
        let answers = host
            .rpc_batch(Chain::Source, &requests)
            .map_err(|e| format!("{}: batch of {} calls failed: {e}", chunk[0].describe(), chunk.len()))?;
        if answers.len() != chunk.len() {
            return Err(format!("{}: batch answered {} of {} calls", chunk[0].describe(), answers.len(), chunk.len()));
        }
        for (call, answer) in chunk.iter().zip(answers) {
            let text = answer.map_err(|e| format!("{}: {e}", call.describe()))?;
            let bytes = hex_value(&text).map_err(|e| format!("{}: {e}", call.describe()))?;
            if bytes.is_empty() || bytes.len() % 32 != 0 {
                return Err(format!("{}: answer is {} bytes, not 32-byte words", call.describe(), bytes.len()));
            }
            out.push(bytes);
        }
    }
    Ok(out)
}

/// A JSON string `"0x…"` as bytes.
fn hex_value(text: &str) -> Result<Vec<u8>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("answer is not JSON: {e}"))?;
    let s = v.as_str().ok_or_else(|| format!("answer is not a hex string: {v}"))?;
    hex_bytes(s)
}

pub fn hex_bytes(s: &str) -> Result<Vec<u8>, String> {
    let h = s.strip_prefix("0x").ok_or_else(|| format!("`{s}` lacks 0x"))?;
    if h.len() % 2 != 0 {
        return Err(format!("odd-length hex `{s}`"));
    }
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_err(|_| format!("bad hex `{s}`")))
        .collect()
}

/// Word `i` of ABI data as an unsigned integer.
pub fn word(data: &[u8], i: usize) -> Wide {
    let mut limbs = [0u8; 32];
    limbs.copy_from_slice(&data[i * 32..i * 32 + 32]);
    Wide::from(ruint::aliases::U256::from_be_bytes(limbs))
}

/// Word `i` as a two's-complement int256: (negative, magnitude).
pub fn signed_word(data: &[u8], i: usize) -> (bool, Wide) {
    let mut bytes = [0u8; 32];
    bytes.copy_from_slice(&data[i * 32..i * 32 + 32]);
    let v = ruint::aliases::U256::from_be_bytes(bytes);
    if bytes[0] & 0x80 != 0 { (true, Wide::from(v.wrapping_neg())) } else { (false, Wide::from(v)) }
}

/// Word `i` as an address, `0x` + 40 lower-case hex digits.
pub fn address_word(data: &[u8], i: usize) -> String {
    let w = &data[i * 32..i * 32 + 32];
    format!("0x{}", w[12..].iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// `balanceOf(owner)` calldata.
pub fn balance_of(owner: &str) -> String {
    format!("{BALANCE_OF}{:0>64}", owner.trim_start_matches("0x"))
}

/// A decoded pool event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Signed amounts: positive flows into the pool.
    Swap {
        amount0: (bool, Wide),
        amount1: (bool, Wide),
    },
    Mint {
        amount0: Wide,
        amount1: Wide,
    },
    Burn {
        amount0: Wide,
        amount1: Wide,
    },
    Collect {
        amount0: Wide,
        amount1: Wide,
    },
}

/// A pool event at its block, in chain order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolEvent {
    pub block: u64,
    pub log_index: u64,
    pub event: Event,
}

fn quantity(v: &Value) -> Option<u64> {
    v.as_str().and_then(|s| s.strip_prefix("0x")).and_then(|h| u64::from_str_radix(h, 16).ok())
}

/// Swap, Mint, Burn and Collect logs of `pools` in `begin..=end`, one
/// `eth_getLogs`, grouped by pool (lower-case address).
pub fn pool_events(
    host: &Host<'_>,
    pools: &[&str],
    begin: u64,
    end: u64,
) -> Result<BTreeMap<String, Vec<PoolEvent>>, String> {
    let who = if pools.len() == 1 { format!("pool {}", pools[0]) } else { format!("{} pools", pools.len()) };
    let call = format!("{who}: eth_getLogs {begin}..={end}");
    let filter = json!([{
        "address": pools,
        "fromBlock": format!("0x{begin:x}"),
        "toBlock": format!("0x{end:x}"),
        "topics": [[SWAP, MINT, BURN, COLLECT]],
    }]);
    let text = host.rpc(Chain::Source, "eth_getLogs", &filter.to_string()).map_err(|e| format!("{call}: {e}"))?;
    let logs: Value = serde_json::from_str(&text).map_err(|e| format!("{call}: answer is not JSON: {e}"))?;
    let logs = logs.as_array().ok_or_else(|| format!("{call}: answer is not a list of logs"))?;
    let mut by_pool: BTreeMap<String, Vec<PoolEvent>> = pools.iter().map(|p| (p.to_string(), Vec::new())).collect();
    for (n, log) in logs.iter().enumerate() {
        let bad = |why: &str| format!("{call}: log {n} {why}: {log}");
        let address = log["address"].as_str().map(str::to_ascii_lowercase).ok_or_else(|| bad("has no address"))?;
        let events = by_pool.get_mut(&address).ok_or_else(|| bad("is from a pool that was not asked for"))?;
        if log["removed"].as_bool() == Some(true) {
            return Err(bad("was removed by a reorg; retry the epoch"));
        }
        let block = quantity(&log["blockNumber"]).ok_or_else(|| bad("has no block number"))?;
        if !(begin..=end).contains(&block) {
            return Err(bad("is outside the asked range"));
        }
        let log_index = quantity(&log["logIndex"]).ok_or_else(|| bad("has no log index"))?;
        let topic0 = log["topics"][0].as_str().map(str::to_ascii_lowercase).ok_or_else(|| bad("has no topic"))?;
        let data = hex_bytes(log["data"].as_str().ok_or_else(|| bad("has no data"))?).map_err(|e| bad(&e))?;
        let words = match topic0.as_str() {
            SWAP => 5,
            MINT => 4,
            BURN | COLLECT => 3,
            _ => return Err(bad("has an unexpected topic")),
        };
        if data.len() != words * 32 {
            return Err(bad(&format!("is truncated: {} data bytes, expected {}", data.len(), words * 32)));
        }
        let event = match topic0.as_str() {
            SWAP => Event::Swap { amount0: signed_word(&data, 0), amount1: signed_word(&data, 1) },
            MINT => Event::Mint { amount0: word(&data, 2), amount1: word(&data, 3) },
            BURN => Event::Burn { amount0: word(&data, 1), amount1: word(&data, 2) },
            _ => Event::Collect { amount0: word(&data, 1), amount1: word(&data, 2) },
        };
        events.push(PoolEvent { block, log_index, event });
    }
    for events in by_pool.values_mut() {
        events.sort_by_key(|e| (e.block, e.log_index));
    }
    Ok(by_pool)
}

/// Pools created by `factory` in `from..=to` (`PoolCreated` logs), lower-case.
pub fn created_pools(host: &Host<'_>, factory: &str, from: u64, to: u64) -> Result<Vec<String>, String> {
    let call = format!("factory {factory}: eth_getLogs PoolCreated {from}..={to}");
    let filter = json!([{
        "address": factory,
        "fromBlock": format!("0x{from:x}"),
        "toBlock": format!("0x{to:x}"),
        "topics": [POOL_CREATED],
    }]);
    let text = host.rpc(Chain::Source, "eth_getLogs", &filter.to_string()).map_err(|e| format!("{call}: {e}"))?;
    let logs: Value = serde_json::from_str(&text).map_err(|e| format!("{call}: answer is not JSON: {e}"))?;
    let logs = logs.as_array().ok_or_else(|| format!("{call}: answer is not a list of logs"))?;
    logs.iter()
        .enumerate()
        .map(|(n, log)| {
            let data = log["data"].as_str().ok_or_else(|| format!("{call}: log {n} has no data"))?;
            let data = hex_bytes(data).map_err(|e| format!("{call}: log {n}: {e}"))?;
            if data.len() != 64 {
                return Err(format!("{call}: log {n} is truncated: {} data bytes, expected 64", data.len()));
            }
            Ok(address_word(&data, 1))
        })
        .collect()
}
