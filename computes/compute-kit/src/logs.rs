//! Typed `eth_getLogs`: an event declared with [`sol!`](crate::sol), read
//! over a block range in chunks a provider accepts, checked and decoded.
//!
//! The range is asked in chunks of [`LogFilter::blocks_per_call`] blocks,
//! sent together (one round trip for up to [`BATCH`](crate::BATCH) chunks).
//! A chunk the provider refuses with an error of its own (a range or result
//! cap, or any other answer with an error code) is asked again in halves,
//! down to single blocks; the logs come back in chain order whatever the
//! chunking, so every node gets the same list from any provider.
//!
//! A provider that has not reached a block answers its logs as none (or as
//! the logs up to its head), and that must not become a snapshot: each
//! batch of chunks carries an `eth_blockNumber`, so the node that answered
//! the chunks says how far it is, and a batch answered from behind its last
//! block is an error. A log whose block hash is not the hash of that block
//! in the epoch's preloaded details (another fork) is an error too.

use alloy_primitives::{Address, B256, hex};
use alloy_sol_types::SolEvent;
use lite_node_plugin_api::{Chain, Host, RpcCall};
use serde_json::{Value, json};

use crate::{calls::reason, quantity, to_quantity};

/// Blocks per `eth_getLogs` unless a filter says otherwise: within what
/// public providers accept (several cap a call at 2,000 or 10,000 blocks).
pub const LOG_BLOCKS: u64 = 1_000;

/// A log as the chain gave it, before decoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawLog {
    /// The contract that emitted it.
    pub address: Address,
    pub block_number: u64,
    /// Its position among the block's logs.
    pub log_index: u64,
    pub transaction_hash: B256,
    pub topics: Vec<B256>,
    pub data: Vec<u8>,
}

/// A decoded log: where it is, and the event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log<E> {
    pub address: Address,
    pub block_number: u64,
    pub log_index: u64,
    pub transaction_hash: B256,
    pub event: E,
}

impl RawLog {
    /// Decodes the log as `E`; an error names the event and where the log is.
    pub fn decode<E: SolEvent>(&self) -> Result<Log<E>, String> {
        let event = E::decode_raw_log_validate(self.topics.iter().copied(), &self.data).map_err(|e| {
            format!(
                "the log at block {} index {} of {} is not {}: {e}",
                self.block_number,
                self.log_index,
                self.address,
                E::SIGNATURE
            )
        })?;
        Ok(Log {
            address: self.address,
            block_number: self.block_number,
            log_index: self.log_index,
            transaction_hash: self.transaction_hash,
            event,
        })
    }

    /// The first topic: the event's signature hash (for an anonymous event,
    /// its first indexed argument; none if it has none).
    pub fn topic0(&self) -> Option<B256> {
        self.topics.first().copied()
    }
}

/// Which logs to read: blocks `from..=to`, of these contracts (all when
/// empty), with one of these first topics (any when empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFilter {
    pub from: u64,
    pub to: u64,
    pub addresses: Vec<Address>,
    pub topic0: Vec<B256>,
    /// Blocks per `eth_getLogs` call ([`LOG_BLOCKS`] by default; at least 1).
    pub blocks_per_call: u64,
}

impl LogFilter {
    /// Logs of `addresses` (all contracts when empty) in blocks `from..=to`
    /// with the first topic `E`'s. An anonymous event has no such topic:
    /// filter on its contracts with a [`LogFilter`] of your own, read them
    /// with [`get_raw_logs`] and decode each with [`RawLog::decode`].
    pub fn event<E: SolEvent>(addresses: &[Address], from: u64, to: u64) -> Result<Self, String> {
        if E::ANONYMOUS {
            return Err(format!(
                "event {} is anonymous: its logs carry no signature topic to filter by; read its contracts' logs with \
                 get_raw_logs and decode each with RawLog::decode",
                E::SIGNATURE
            ));
        }
        Ok(Self {
            from,
            to,
            addresses: addresses.to_vec(),
            topic0: vec![E::SIGNATURE_HASH],
            blocks_per_call: LOG_BLOCKS,
        })
    }

    fn params(&self, from: u64, to: u64) -> String {
        let mut filter = json!({"fromBlock": to_quantity(from), "toBlock": to_quantity(to)});
        if !self.addresses.is_empty() {
            let list: Vec<String> = self.addresses.iter().map(|a| format!("{a:#x}")).collect();
            filter["address"] = json!(list);
        }
        if !self.topic0.is_empty() {
            let list: Vec<String> = self.topic0.iter().map(|t| format!("{t:#x}")).collect();
            filter["topics"] = json!([list]);
        }
        json!([filter]).to_string()
    }

    fn describe(&self, from: u64, to: u64) -> String {
        let of = match self.addresses.as_slice() {
            [] => " of any contract".to_owned(),
            [one] => format!(" of {one}"),
            many => format!(" of {} contracts", many.len()),
        };
        format!("eth_getLogs{of} in blocks {from}..={to}")
    }
}

/// The `E` logs of `addresses` in blocks `from..=to`, decoded, in chain
/// order (block, then position in the block). `addresses` may not be empty
/// (that would read the event of every contract on the chain; a
/// [`LogFilter`] with no addresses does, if that is meant).
///
/// ```ignore
/// sol! {
///     #![sol(alloy_sol_types = compute_kit::sol_types)]
///     event Swap(address indexed sender, address indexed recipient, int256 amount0, int256 amount1,
///         uint160 sqrtPriceX96, uint128 liquidity, int24 tick);
/// }
/// let swaps = get_logs::<Swap>(host, Chain::Source, &[pool], epoch.begin, epoch.end)?;
/// ```
pub fn get_logs<E: SolEvent>(
    host: &Host<'_>,
    chain: Chain,
    addresses: &[Address],
    from: u64,
    to: u64,
) -> Result<Vec<Log<E>>, String> {
    if addresses.is_empty() {
        return Err(format!(
            "eth_getLogs {} in blocks {from}..={to}: no contracts given (an empty list would read every contract's); \
             name them, e.g. the pools from the settings",
            E::SIGNATURE
        ));
    }
    let filter = LogFilter::event::<E>(addresses, from, to)?;
    get_raw_logs(host, chain, &filter)?
        .iter()
        .map(|log| log.decode::<E>().map_err(|e| format!("{}: {e}", filter.describe(from, to))))
        .collect()
}

/// The logs `filter` names, undecoded, in chain order: for several events
/// at once, or your own decoding (match on [`RawLog::topic0`], then
/// [`RawLog::decode`]). Every log is checked against the filter (block,
/// contract, first topic); one the chain says was removed by a reorg, or
/// one listed twice, is an error.
pub fn get_raw_logs(host: &Host<'_>, chain: Chain, filter: &LogFilter) -> Result<Vec<RawLog>, String> {
    let whole = filter.describe(filter.from, filter.to);
    if filter.from > filter.to {
        return Err(format!("{whole}: the range is backwards"));
    }
    if filter.blocks_per_call == 0 {
        return Err(format!("{whole}: blocks_per_call is 0; give at least 1 (LOG_BLOCKS is {LOG_BLOCKS})"));
    }
    // The epoch's block hashes, to check each log's block against.
    let hashes: std::collections::HashMap<u64, String> = match chain {
        Chain::Source => {
            host.block_details().iter().map(|d| (d.number, d.hash.as_str().to_ascii_lowercase())).collect()
        }
        Chain::Anchor => Default::default(),
    };
    // Chunks not asked yet: `(from, to, the chunk it was first asked in)`;
    // the rest of the range is cut into chunks as rounds go.
    let mut pending: Vec<(u64, u64, (u64, u64))> = Vec::new();
    let mut next = Some(filter.from);
    let mut logs = Vec::new();
    loop {
        while pending.len() < crate::BATCH
            && let Some(start) = next
        {
            let end = start.saturating_add(filter.blocks_per_call - 1).min(filter.to);
            pending.push((start, end, (start, end)));
            next = (end < filter.to).then(|| end + 1);
        }
        if pending.is_empty() {
            break;
        }
        let round: Vec<(u64, u64, (u64, u64))> = pending.drain(..pending.len().min(crate::BATCH)).collect();
        let mut requests: Vec<RpcCall> = round
            .iter()
            .map(|&(from, to, _)| RpcCall { method: "eth_getLogs".into(), params_json: filter.params(from, to).into() })
            .collect();
        // How far the node answering these chunks is (never kept by a node's
        // memo of pinned reads: it goes out with every batch).
        requests.push(RpcCall { method: "eth_blockNumber".into(), params_json: "[]".into() });
        let span = filter.describe(round[0].0, round[round.len() - 1].1);
        let mut answers = host
            .rpc_batch(chain, &requests)
            .map_err(|e| format!("{span}: {} (a smaller LogFilter::blocks_per_call asks less per call)", reason(&e)))?;
        if answers.len() != requests.len() {
            return Err(format!("{span}: a batch of {} calls got {} answers", requests.len(), answers.len()));
        }
        let last = round.iter().map(|&(_, to, _)| to).max().unwrap_or(filter.to);
        let head = answers
            .pop()
            .map(|a| {
                let text = a.map_err(|e| reason(&e))?;
                let number: String = serde_json::from_str(&text).map_err(|_| format!("`{text}` is not a quantity"))?;
                quantity(&number)
            })
            .unwrap_or_else(|| Err("no answer".into()))
            .map_err(|e| format!("{span}: eth_blockNumber, asked with the logs: {e}"))?;
        if head < last {
            return Err(format!(
                "{span}: the RPC that answered is at block {head}, behind block {last}: it would leave out logs it has \
                 not seen — retry the epoch, or use an RPC that has reached it"
            ));
        }
        let mut halves = Vec::new();
        for (&(from, to, first), answer) in round.iter().zip(answers) {
            match answer {
                Ok(text) => logs.extend(checked(filter, from, to, &text, &hashes)?),
                // The provider answered with a refusal of its own (a range
                // or result cap, most likely): ask for less. A method or
                // request it does not take is not a matter of size.
                Err(e) if e.code.is_some() && !matches!(e.code.into_option(), Some(-32601 | -32600)) && from < to => {
                    let mid = from + (to - from) / 2;
                    halves.extend([(from, mid, first), (mid + 1, to, first)]);
                }
                Err(e) if first != (from, to) => {
                    return Err(format!(
                        "{}: refused even for block {from} alone (first asked as blocks {}..={}): {}",
                        filter.describe(from, to),
                        first.0,
                        first.1,
                        reason(&e)
                    ));
                }
                Err(e) => return Err(format!("{}: {}", filter.describe(from, to), reason(&e))),
            }
        }
        pending.splice(0..0, halves);
    }
    logs.sort_by_key(|l| (l.block_number, l.log_index));
    if let Some(w) =
        logs.windows(2).find(|w| (w[0].block_number, w[0].log_index) == (w[1].block_number, w[1].log_index))
    {
        return Err(format!(
            "{whole}: the chain listed the log at block {} index {} twice",
            w[0].block_number, w[0].log_index
        ));
    }
    Ok(logs)
}

/// One chunk's answer, read and checked against what was asked.
fn checked(
    filter: &LogFilter,
    from: u64,
    to: u64,
    answer: &str,
    hashes: &std::collections::HashMap<u64, String>,
) -> Result<Vec<RawLog>, String> {
    let call = filter.describe(from, to);
    let list: Value = serde_json::from_str(answer).map_err(|e| format!("{call}: the answer is not JSON: {e}"))?;
    let list = list.as_array().ok_or_else(|| format!("{call}: the answer is not a list of logs"))?;
    list.iter()
        .enumerate()
        .map(|(n, log)| {
            let bad = |why: &str| format!("{call}: log {n} {why}: {log}");
            if log["removed"].as_bool() == Some(true) {
                return Err(bad("was removed by a reorg; retry the epoch"));
            }
            let text = |k: &str| log[k].as_str().ok_or_else(|| bad(&format!("has no `{k}`")));
            let number = |k: &str| quantity(text(k)?).map_err(|e| bad(&e));
            let word = |s: &str| s.parse::<B256>().map_err(|_| bad(&format!("has `{s}`, not 32 bytes of hex")));
            let address: Address = text("address")?.parse().map_err(|_| bad("has no valid `address`"))?;
            let block_number = number("blockNumber")?;
            let raw = RawLog {
                address,
                block_number,
                log_index: number("logIndex")?,
                transaction_hash: word(text("transactionHash")?)?,
                topics: log["topics"]
                    .as_array()
                    .ok_or_else(|| bad("has no `topics`"))?
                    .iter()
                    .map(|t| t.as_str().ok_or_else(|| bad("has a topic that is not a string")).and_then(word))
                    .collect::<Result<_, _>>()?,
                data: hex::decode(text("data")?).map_err(|_| bad("has `data` that is not hex"))?,
            };
            if !(from..=to).contains(&block_number) {
                return Err(bad("is outside the asked blocks"));
            }
            if let (Some(known), Some(of_log)) = (hashes.get(&block_number), log["blockHash"].as_str())
                && !of_log.eq_ignore_ascii_case(known)
            {
                return Err(bad(&format!(
                    "is of block {block_number} with hash {of_log}, but the epoch's block {block_number} is {known} \
                     (another fork); retry the epoch"
                )));
            }
            if !filter.addresses.is_empty() && !filter.addresses.contains(&raw.address) {
                return Err(bad("is from a contract that was not asked for"));
            }
            if !filter.topic0.is_empty() && !raw.topic0().is_some_and(|t| filter.topic0.contains(&t)) {
                return Err(bad("has a first topic that was not asked for"));
            }
            Ok(raw)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use alloy_primitives::aliases::{I24, U160};
    use alloy_sol_types::sol;
    use lite_node_plugin_api::{RpcError, testing::TestHost};

    use super::*;
    use crate::testing::ChainAnswers;

    sol! {
        #[derive(Debug, PartialEq)]
        event Swap(address indexed sender, address indexed recipient, int256 amount0, int256 amount1,
            uint160 sqrtPriceX96, uint128 liquidity, int24 tick);
        #[derive(Debug, PartialEq)]
        event Transfer(address indexed from, address indexed to, uint256 value);
    }

    fn swap(amount0: i64) -> Swap {
        Swap {
            sender: Address::repeat_byte(1),
            recipient: Address::repeat_byte(2),
            amount0: crate::I256::try_from(amount0).unwrap(),
            amount1: crate::I256::try_from(-amount0).unwrap(),
            sqrtPriceX96: U160::from(1u128 << 96),
            liquidity: 5,
            tick: I24::ZERO,
        }
    }

    const POOL: Address = Address::repeat_byte(0xaa);

    #[test]
    fn logs_of_an_event_come_decoded_in_chain_order_and_only_the_asked_ones() {
        let other = Address::repeat_byte(0xbb);
        let transfer = Transfer { from: POOL, to: other, value: crate::U256::from(9) };
        let host = TestHost::with_blocks(crate::testing::blocks(1..=20))
            .on_logs(POOL, [(12, swap(3)), (10, swap(1))])
            .on_logs(POOL, [(10, swap(2))])
            .on_logs(other, [(11, swap(7))])
            .on_logs(POOL, [(11, transfer)]);
        let swaps = get_logs::<Swap>(&host.host(), Chain::Source, &[POOL], 10, 12).unwrap();
        let seen: Vec<(u64, u64, i64)> =
            swaps.iter().map(|l| (l.block_number, l.log_index, l.event.amount0.as_i64())).collect();
        assert_eq!(seen, [(10, 0, 1), (10, 1, 2), (12, 0, 3)]);
        assert!(swaps.iter().all(|l| l.address == POOL));
        let later = get_logs::<Swap>(&host.host(), Chain::Source, &[POOL], 11, 20).unwrap();
        assert_eq!(later.len(), 1, "the range is kept to");
        // Positions in a block count every log set before, whatever is asked.
        let transfers = get_logs::<Transfer>(&host.host(), Chain::Source, &[POOL], 11, 11).unwrap();
        assert_eq!((transfers.len(), transfers[0].log_index), (1, 1), "after the other contract's swap, set before it");
        let filter = LogFilter { addresses: vec![], ..LogFilter::event::<Swap>(&[], 11, 11).unwrap() };
        let any = get_raw_logs(&host.host(), Chain::Source, &filter).unwrap();
        assert_eq!((any.len(), any[0].address, any[0].log_index), (1, other, 0));
        let mut all = LogFilter::event::<Swap>(&[], 11, 11).unwrap();
        all.topic0.clear();
        let positions: Vec<(Address, u64)> =
            get_raw_logs(&host.host(), Chain::Source, &all).unwrap().iter().map(|l| (l.address, l.log_index)).collect();
        assert_eq!(positions, [(other, 0), (POOL, 1)], "the transfer, set last, comes after the swap at block 11");
    }

    /// A provider that refuses more than `cap` blocks per call (with a
    /// code, as providers do) and answers one log per block otherwise.
    fn capped(cap: u64, asked: Arc<Mutex<Vec<(u64, u64)>>>) -> TestHost {
        let logs = TestHost::default().on_logs(POOL, (1..=100).map(|b| (b, swap(b as i64))));
        let blocks = crate::testing::blocks(1..=100);
        let below = logs.rpc.unwrap();
        TestHost {
            rpc: Some(Box::new(move |chain, method, params| {
                if method == "eth_blockNumber" {
                    return below(chain, method, params);
                }
                let p: Value = serde_json::from_str(params).unwrap();
                let n = |k: &str| quantity(p[0][k].as_str().unwrap()).unwrap();
                asked.lock().unwrap().push((n("fromBlock"), n("toBlock")));
                if n("toBlock") - n("fromBlock") + 1 > cap {
                    return Err(RpcError { code: Some(-32005).into(), message: "block range too large".into() });
                }
                below(chain, method, params)
            })),
            ..TestHost::with_blocks(blocks)
        }
    }

    #[test]
    fn ranges_are_chunked_and_a_refused_chunk_is_asked_again_in_halves_with_the_same_result() {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let host = capped(1_000, asked.clone());
        let mut filter = LogFilter::event::<Swap>(&[POOL], 1, 100).unwrap();
        filter.blocks_per_call = 30;
        let chunked = get_raw_logs(&host.host(), Chain::Source, &filter).unwrap();
        assert_eq!(*asked.lock().unwrap(), [(1, 30), (31, 60), (61, 90), (91, 100)]);
        assert_eq!(host.round_trips().len(), 1, "the chunks go in one batch");

        let asked = Arc::new(Mutex::new(Vec::new()));
        let host = capped(20, asked.clone());
        filter.blocks_per_call = 60;
        let split = get_raw_logs(&host.host(), Chain::Source, &filter).unwrap();
        assert_eq!(split, chunked, "whatever the provider's cap, the same logs in the same order");
        assert_eq!(split.iter().map(|l| l.block_number).collect::<Vec<_>>(), (1..=100).collect::<Vec<_>>());
        let asked = asked.lock().unwrap();
        assert!(asked.iter().all(|(f, t)| t >= f) && asked.len() < 20, "{asked:?}");
    }

    #[test]
    fn a_range_refused_down_to_one_block_or_unreachable_is_an_error_naming_it() {
        let refused = TestHost {
            rpc: Some(Box::new(|_, method, _| match method {
                "eth_blockNumber" => Ok("\"0x8\"".into()),
                _ => Err(RpcError { code: Some(-32000).into(), message: "nope".into() }),
            })),
            ..TestHost::with_blocks(crate::testing::blocks(1..=8))
        };
        let err = get_logs::<Swap>(&refused.host(), Chain::Source, &[POOL], 1, 8).unwrap_err();
        assert!(err.contains("in blocks 1..=1: refused even for block 1 alone (first asked as blocks 1..=8)"), "{err}");
        assert!(err.contains("nope"), "{err}");
        assert_eq!(refused.round_trips().len(), 4, "8 blocks, halved three times: {:?}", refused.round_trips());
        let down = TestHost::with_blocks(crate::testing::blocks(1..=8));
        let err = get_logs::<Swap>(&down.host(), Chain::Source, &[POOL], 1, 8).unwrap_err();
        assert!(err.contains("in blocks 1..=8") && err.contains("no rpc handler"), "{err}");
        assert_eq!(down.round_trips().len(), 1, "a chain not reached is not asked again");
        // A method the provider does not take is not halved down to blocks.
        let unknown = TestHost {
            rpc: Some(Box::new(|_, method, _| match method {
                "eth_blockNumber" => Ok("\"0x8\"".into()),
                _ => Err(RpcError { code: Some(-32601).into(), message: "method not found".into() }),
            })),
            ..TestHost::with_blocks(crate::testing::blocks(1..=8))
        };
        let err = get_logs::<Swap>(&unknown.host(), Chain::Source, &[POOL], 1, 8).unwrap_err();
        assert!(err.contains("in blocks 1..=8: ") && err.contains("method not found"), "{err}");
        assert_eq!(unknown.round_trips().len(), 1);
        let backwards = get_logs::<Swap>(&down.host(), Chain::Source, &[POOL], 9, 8).unwrap_err();
        assert!(backwards.contains("backwards"), "{backwards}");
        let mut none = LogFilter::event::<Swap>(&[POOL], 1, 8).unwrap();
        none.blocks_per_call = 0;
        assert!(get_raw_logs(&down.host(), Chain::Source, &none).unwrap_err().contains("blocks_per_call is 0"));
    }

    #[test]
    fn an_answer_that_does_not_fit_the_filter_is_refused() {
        let answering = |log: Value| TestHost {
            rpc: Some(Box::new(move |_, method, _| match method {
                "eth_blockNumber" => Ok("\"0x5\"".into()),
                _ => Ok(json!([log.clone()]).to_string()),
            })),
            ..TestHost::with_blocks(crate::testing::blocks(5..=5))
        };
        let good = || {
            let data = swap(1).encode_log_data();
            json!({
                "address": format!("{POOL:#x}"), "blockNumber": "0x5", "logIndex": "0x0",
                "transactionHash": format!("{:#x}", B256::ZERO),
                "topics": data.topics().iter().map(|t| format!("{t:#x}")).collect::<Vec<_>>(),
                "data": format!("0x{}", hex::encode(&data.data)), "removed": false,
            })
        };
        assert_eq!(get_logs::<Swap>(&answering(good()).host(), Chain::Source, &[POOL], 5, 5).unwrap().len(), 1);
        // `liquidity` (a uint128, the fourth word) with bits set above 128.
        let mut wide = good();
        let data = wide["data"].as_str().unwrap().to_owned();
        wide["data"] = json!(format!("{}{}{}", &data[..2 + 3 * 64], "ff".repeat(32), &data[2 + 4 * 64..]));
        let err = get_logs::<Swap>(&answering(wide).host(), Chain::Source, &[POOL], 5, 5).unwrap_err();
        assert!(err.contains("is not Swap("), "a uint128 wider than one is refused, not cut: {err}");
        let cases: [(&str, Value, &str); 7] = [
            ("blockHash", json!(format!("{:#x}", B256::repeat_byte(0xff))), "(another fork); retry the epoch"),
            ("removed", json!(true), "removed by a reorg"),
            ("blockNumber", json!("0x9"), "outside the asked blocks"),
            ("address", json!(format!("{:#x}", Address::ZERO)), "from a contract that was not asked for"),
            ("topics", json!([format!("{:#x}", B256::ZERO)]), "first topic that was not asked for"),
            ("data", json!("0x12"), "is not Swap("),
            ("logIndex", json!(3), "has no `logIndex`"),
        ];
        for (key, value, says) in cases {
            let mut log = good();
            log[key] = value;
            let err = get_logs::<Swap>(&answering(log).host(), Chain::Source, &[POOL], 5, 5).unwrap_err();
            assert!(err.contains(says) && err.contains("in blocks 5..=5"), "{key}: {err}");
        }
        let mut same = good();
        same["blockHash"] = json!(format!("0x{:064x}", 5));
        assert_eq!(get_logs::<Swap>(&answering(same).host(), Chain::Source, &[POOL], 5, 5).unwrap().len(), 1);
        let twice = TestHost {
            rpc: Some(Box::new(move |_, method, _| match method {
                "eth_blockNumber" => Ok("\"0x5\"".into()),
                _ => Ok(json!([good(), good()]).to_string()),
            })),
            ..TestHost::with_blocks(crate::testing::blocks(5..=5))
        };
        let err = get_logs::<Swap>(&twice.host(), Chain::Source, &[POOL], 5, 5).unwrap_err();
        assert!(err.contains("listed the log at block 5 index 0 twice"), "{err}");
    }

    /// A provider that has not reached the range's last block answers its
    /// logs as none (or up to its head): the head it gives in the same batch
    /// says so, and that is the error, whatever the preloaded details hold.
    #[test]
    fn logs_from_an_rpc_behind_the_range_are_an_error_not_an_empty_list() {
        let chain = TestHost::default().on_logs(POOL, [(3, swap(1))]);
        let behind = TestHost {
            rpc: Some(Box::new(move |chain_id, method, params| match method {
                "eth_blockNumber" => Ok("\"0x5\"".into()),
                _ => chain.rpc.as_ref().unwrap()(chain_id, method, params),
            })),
            ..TestHost::with_blocks(crate::testing::blocks(1..=9))
        };
        let err = get_logs::<Swap>(&behind.host(), Chain::Source, &[POOL], 1, 9).unwrap_err();
        assert!(
            err.contains("the RPC that answered is at block 5, behind block 9") && err.contains("retry the epoch"),
            "{err}"
        );
        assert_eq!(behind.round_trips(), [vec!["eth_getLogs", "eth_blockNumber"]], "asked in one batch");
        assert_eq!(get_logs::<Swap>(&behind.host(), Chain::Source, &[POOL], 1, 5).unwrap().len(), 1, "up to its head");
        let garbled = TestHost {
            // Every call, `eth_blockNumber` too, answered with an empty list.
            rpc: Some(Box::new(|_, _, _| Ok("[]".into()))),
            ..TestHost::default()
        };
        let err = get_logs::<Swap>(&garbled.host(), Chain::Source, &[POOL], 1, 9).unwrap_err();
        assert!(err.contains("eth_blockNumber, asked with the logs: `[]` is not a quantity"), "{err}");
    }

    #[test]
    fn an_anonymous_event_or_no_contracts_are_refused_with_what_to_do() {
        sol! {
            #[derive(Debug)]
            event Anon(address indexed who, uint256 value) anonymous;
        }
        let host = TestHost::with_blocks(crate::testing::blocks(1..=2));
        let err = get_logs::<Anon>(&host.host(), Chain::Source, &[POOL], 1, 2).unwrap_err();
        assert!(err.contains("is anonymous") && err.contains("get_raw_logs"), "{err}");
        let err = get_logs::<Swap>(&host.host(), Chain::Source, &[], 1, 2).unwrap_err();
        assert!(err.contains("no contracts given"), "{err}");
        assert!(host.round_trips().is_empty());
    }
}
