//! Typed answers for [`TestHost`]: a unit test says what the source chain
//! answers in the processor's own `sol!` types, and the host encodes it —
//! no selectors, no hex.
//!
//! ```ignore
//! use compute_kit::testing::{ChainAnswers, TestHost, blocks};
//!
//! let host = TestHost::with_blocks(blocks(40..=42))
//!     .on_call::<slot0Call>(pool, 42, state)
//!     .on_call::<liquidityCall>(pool, 42, 7_000)
//!     .on_logs(pool, [(41, swap.clone()), (42, swap)]);
//! ```
//!
//! A call nobody set an answer for fails with the call and every answer
//! that was set, so a test that pins the wrong block says so.

use alloy_primitives::{Address, B256, hex};
use alloy_sol_types::{SolCall, SolEvent};
pub use lite_node_plugin_api::testing::{TestHost, check_shares};
use lite_node_plugin_api::{BlockDetail, Chain, RpcError, testing::RpcHandler};
use serde_json::{Value, json};

use crate::{quantity, to_quantity};

/// Block details for `numbers`, as the node preloads an epoch's blocks
/// (`block_details`): each hash is its number in 32 bytes (as the logs
/// [`ChainAnswers::on_logs`] sets are of), each timestamp 12 s after the one
/// before. The seed block of an epoch comes from here, and the chain's head
/// (`eth_blockNumber`, which [`get_logs`](crate::get_logs) asks with its
/// logs) is the highest block listed here or logged.
pub fn blocks(numbers: std::ops::RangeInclusive<u64>) -> Vec<BlockDetail> {
    numbers
        .map(|number| BlockDetail {
            number,
            hash: format!("0x{number:064x}").as_str().into(),
            timestamp: 1_700_000_000 + 12 * number,
        })
        .collect()
}

/// How an unanswered call's error starts.
const NO_ANSWER: &str = "TestHost has no answer for";

/// Typed answers of the source chain, set on a [`TestHost`]. Each adds to
/// what was set before (and to its `rpc` handler, which answers what these
/// do not).
pub trait ChainAnswers: Sized {
    /// Answers `C` called on `to` at `block` with `returns`, whatever the
    /// call's arguments.
    fn on_call<C: SolCall>(self, to: Address, block: u64, returns: C::Return) -> Self;

    /// Answers exactly `call` (its arguments too) on `to` at `block`. Of
    /// two answers for one call, the one set last is given.
    fn on_call_with<C: SolCall>(self, to: Address, block: u64, call: &C, returns: C::Return) -> Self;

    /// Emits `events` from the contract `address`, each at its block: what
    /// `eth_getLogs` answers for any filter they match. Logs at one block
    /// take their positions (`logIndex`) in the order they are set, across
    /// every `on_logs`, whatever a filter picks of them.
    fn on_logs<E: SolEvent>(self, address: Address, events: impl IntoIterator<Item = (u64, E)>) -> Self;
}

impl ChainAnswers for TestHost {
    fn on_call<C: SolCall>(self, to: Address, block: u64, returns: C::Return) -> Self {
        let selector = format!("0x{}", hex::encode(C::SELECTOR));
        let set = format!("{} on {to} at block {block}", C::SIGNATURE);
        call_layer(self, set, to, block, Match::Selector(selector), &C::abi_encode_returns(&returns))
    }

    fn on_call_with<C: SolCall>(self, to: Address, block: u64, call: &C, returns: C::Return) -> Self {
        let data = format!("0x{}", hex::encode(call.abi_encode()));
        let set = format!("{} on {to} at block {block} with calldata {data}", C::SIGNATURE);
        call_layer(self, set, to, block, Match::Calldata(data), &C::abi_encode_returns(&returns))
    }

    fn on_logs<E: SolEvent>(self, address: Address, events: impl IntoIterator<Item = (u64, E)>) -> Self {
        let logs: Vec<(u64, Vec<B256>, Vec<u8>)> = events
            .into_iter()
            .map(|(block, event)| {
                let data = event.encode_log_data();
                (block, data.topics().to_vec(), data.data.to_vec())
            })
            .collect();
        let set = format!("{} {} logs of {address}", logs.len(), E::SIGNATURE);
        // The chain has every block preloaded or logged: its head is the last.
        let head = self.blocks.iter().map(|b| b.number).chain(logs.iter().map(|l| l.0)).max().unwrap_or(0);
        layer(self, set, move |method, params, raw, below| {
            if method == "eth_blockNumber" {
                let higher = match below(method, raw) {
                    Err(e) if e.message.starts_with(NO_ANSWER) => head,
                    Err(e) => return Some(Err(e)),
                    Ok(text) => match serde_json::from_str::<String>(&text).map(|q| quantity(&q)) {
                        Ok(Ok(n)) => n.max(head),
                        _ => return Some(Ok(text)),
                    },
                };
                return Some(Ok(Value::String(to_quantity(higher)).to_string()));
            }
            if method != "eth_getLogs" {
                return None;
            }
            let listed = |answer: Result<String, RpcError>| match answer {
                Ok(text) => match serde_json::from_str::<Value>(&text) {
                    Ok(Value::Array(list)) => Ok(list),
                    _ => Err(RpcError {
                        code: None.into(),
                        message: format!("TestHost: the rpc handler answered eth_getLogs with {text}, not a list")
                            .into(),
                    }),
                },
                Err(e) if e.message.starts_with(NO_ANSWER) => Ok(Vec::new()),
                Err(e) => Err(e),
            };
            let answer = || -> Result<String, RpcError> {
                let mut list = listed(below("eth_getLogs", raw))?;
                // Each block's logs set before these come first, whatever
                // the filter: ask for all of them.
                let mut positions: std::collections::BTreeMap<u64, u64> = Default::default();
                for (block, topics, data) in &logs {
                    let index = match positions.get_mut(block) {
                        Some(next) => next,
                        None => {
                            let all = json!([{"fromBlock": to_quantity(*block), "toBlock": to_quantity(*block)}]);
                            let before = listed(below("eth_getLogs", &all.to_string()))?.len() as u64;
                            positions.entry(*block).or_insert(before)
                        }
                    };
                    if matches(&params[0], address, *block, topics) {
                        list.push(log_json(address, *block, *index, topics, data));
                    }
                    *index += 1;
                }
                list.sort_by_key(|l| {
                    let n = |k: &str| l[k].as_str().and_then(|s| quantity(s).ok()).unwrap_or(0);
                    (n("blockNumber"), n("logIndex"))
                });
                Ok(Value::Array(list).to_string())
            };
            Some(answer())
        })
    }
}

enum Match {
    Selector(String),
    Calldata(String),
}

fn call_layer(host: TestHost, set: String, to: Address, block: u64, wanted: Match, returns: &[u8]) -> TestHost {
    let answer = Value::String(format!("0x{}", hex::encode(returns))).to_string();
    layer(host, set, move |method, params, _, _| {
        let call = &params[0];
        let data = call["data"].as_str().or_else(|| call["input"].as_str())?.to_ascii_lowercase();
        let hit = method == "eth_call"
            && call["to"].as_str().and_then(|t| t.parse::<Address>().ok()) == Some(to)
            && params[1] == to_quantity(block)
            && match &wanted {
                Match::Selector(selector) => data.starts_with(selector.as_str()),
                Match::Calldata(calldata) => data == *calldata,
            };
        hit.then(|| Ok(answer.clone()))
    })
}

/// What a layer can ask of the handlers below it: `(method, params_json)`.
type Below<'a> = &'a dyn Fn(&str, &str) -> Result<String, RpcError>;

/// Puts `answers` in front of the host's handler: it gets the method, the
/// params (parsed and as given) and the handlers below; what it does not
/// answer (`None`) goes below, and an unanswered call's error lists this
/// layer's answer among those set.
fn layer<F>(mut host: TestHost, set: String, answers: F) -> TestHost
where
    F: Fn(&str, &Value, &str, Below<'_>) -> Option<Result<String, RpcError>> + Send + Sync + 'static,
{
    let below: Option<RpcHandler> = host.rpc.take();
    host.rpc = Some(Box::new(move |chain, method, params| {
        let next = |method: &str, params: &str| match &below {
            Some(handler) => handler(chain, method, params),
            None => {
                Err(RpcError { code: None.into(), message: format!("{NO_ANSWER} {}", asked(method, params)).into() })
            }
        };
        let parsed: Value = serde_json::from_str(params).unwrap_or(Value::Null);
        let mine = if chain == Chain::Source { answers(method, &parsed, params, &next) } else { None };
        mine.unwrap_or_else(|| {
            next(method, params).map_err(|mut e| {
                if e.message.starts_with(NO_ANSWER) {
                    let sep = if e.message.contains("; answers set: ") { ", " } else { "; answers set: " };
                    e.message = format!("{}{sep}{set}", e.message).into();
                }
                e
            })
        })
    }));
    host
}

/// A call as an unanswered error names it.
fn asked(method: &str, params: &str) -> String {
    let parsed: Value = serde_json::from_str(params).unwrap_or(Value::Null);
    let call = &parsed[0];
    match (method, call["to"].as_str(), call["data"].as_str(), parsed[1].as_str().map(quantity)) {
        ("eth_call", Some(to), Some(data), Some(Ok(block))) => {
            let selector = data.get(..10).unwrap_or(data);
            let args = if data.len() > 10 { " with arguments" } else { "" };
            format!("eth_call of selector {selector}{args} on {to} at block {block}")
        }
        _ => format!("{method} {params}"),
    }
}

/// Whether a log of `address` at `block` with `topics` is one the
/// `eth_getLogs` filter asks for.
fn matches(filter: &Value, address: Address, block: u64, topics: &[B256]) -> bool {
    let number = |k: &str| filter[k].as_str().and_then(|s| quantity(s).ok());
    let in_range =
        number("fromBlock").is_none_or(|from| from <= block) && number("toBlock").is_none_or(|to| block <= to);
    let is = |v: &Value, want: String| v.as_str().is_some_and(|s| s.eq_ignore_ascii_case(&want));
    let one_of = |v: &Value, want: String| match v {
        Value::Null => true,
        Value::Array(list) => list.iter().any(|x| is(x, want.clone())),
        other => is(other, want),
    };
    let of_address = one_of(&filter["address"], format!("{address:#x}"));
    let of_topics = filter["topics"].as_array().is_none_or(|wanted| {
        wanted
            .iter()
            .enumerate()
            .all(|(i, w)| topics.get(i).is_some_and(|t| one_of(w, format!("{t:#x}"))) || w.is_null())
    });
    in_range && of_address && of_topics
}

/// A log as a chain's `eth_getLogs` lists it (hashes made up from its place).
fn log_json(address: Address, block: u64, index: u64, topics: &[B256], data: &[u8]) -> Value {
    let place = |tag: u8| {
        let mut h = [0u8; 32];
        h[0] = tag;
        h[8..16].copy_from_slice(&block.to_be_bytes());
        h[16..24].copy_from_slice(&index.to_be_bytes());
        format!("{:#x}", B256::from(h))
    };
    json!({
        "address": format!("{address:#x}"),
        "blockNumber": to_quantity(block),
        "blockHash": format!("0x{block:064x}"),
        "logIndex": to_quantity(index),
        "transactionHash": place(2),
        "transactionIndex": to_quantity(index),
        "topics": topics.iter().map(|t| format!("{t:#x}")).collect::<Vec<_>>(),
        "data": format!("0x{}", hex::encode(data)),
        "removed": false,
    })
}

#[cfg(test)]
mod tests {
    use alloy_sol_types::sol;

    use super::*;
    use crate::{Batch, U256, eth_call};

    sol! {
        function liquidity() external view returns (uint128);
        function balanceOf(address owner) external view returns (uint256);
        #[derive(Debug)]
        event Swap(address indexed sender, int256 amount0);
    }

    const POOL: Address = Address::repeat_byte(0xaa);

    #[test]
    fn typed_answers_go_to_their_call_block_and_contract_and_a_mixed_batch_is_one_round_trip() {
        let (me, you) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let host = TestHost::default()
            .on_call::<liquidityCall>(POOL, 42, 7_000)
            .on_call::<balanceOfCall>(POOL, 42, U256::from(1))
            .on_call_with(POOL, 42, &balanceOfCall { owner: you }, U256::from(2));
        let mut batch = Batch::new(Chain::Source, 42);
        let liquidity = batch.add(POOL, &liquidityCall {});
        let mine = batch.add(POOL, &balanceOfCall { owner: me });
        let yours = batch.add(POOL, &balanceOfCall { owner: you });
        let answers = batch.send(&host.host()).unwrap();
        assert_eq!(host.round_trips(), [vec!["eth_call"; 3]]);
        assert_eq!(answers.get(liquidity), Ok(7_000));
        assert_eq!((answers.get(mine), answers.get(yours)), (Ok(U256::from(1)), Ok(U256::from(2))));

        let other = Batch::new(Chain::Source, 42).send(&host.host()).unwrap();
        assert!(other.get(liquidity).unwrap_err().contains("another batch"));
    }

    #[test]
    fn a_call_nobody_answered_names_itself_and_every_answer_that_was_set() {
        let host = TestHost::default().on_call::<liquidityCall>(POOL, 42, 1).on_logs::<Swap>(POOL, []);
        let err = eth_call(&host.host(), Chain::Source, POOL, &liquidityCall {}, 41).unwrap_err();
        let err = err.to_lowercase();
        assert!(err.starts_with("eth_call liquidity() on 0xaaaa") && err.contains("at block 41"), "{err}");
        let no_answer = "testhost has no answer for eth_call of selector 0x1a686502 on 0xaaaa";
        assert!(err.contains(no_answer) && err.contains("at block 41; answers set: liquidity() on 0xaaaa"), "{err}");
        assert!(err.contains("at block 42, 0 swap(address,int256) logs of 0xaaaa"), "{err}");
        let anchor = eth_call(&host.host(), Chain::Anchor, POOL, &liquidityCall {}, 42).unwrap_err();
        assert!(anchor.contains("no answer"), "answers are the source chain's: {anchor}");
    }

    #[test]
    fn the_answer_set_last_wins_and_a_handler_below_that_answers_logs_wrongly_is_an_error() {
        let host = TestHost::with_blocks(blocks(1..=3))
            .on_call::<liquidityCall>(POOL, 2, 1)
            .on_call::<liquidityCall>(POOL, 2, 2);
        assert_eq!(eth_call(&host.host(), Chain::Source, POOL, &liquidityCall {}, 2), Ok(2));
        let below = TestHost {
            rpc: Some(Box::new(|_, method, _| Ok(if method == "eth_blockNumber" { "\"0x3\"" } else { "null" }.into()))),
            ..TestHost::with_blocks(blocks(1..=3))
        };
        let host = below.on_logs::<Swap>(POOL, []);
        let err = crate::get_logs::<Swap>(&host.host(), Chain::Source, &[POOL], 1, 3).unwrap_err();
        assert!(err.contains("answered eth_getLogs with null, not a list"), "{err}");
    }
}
