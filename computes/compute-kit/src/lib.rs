//! Helpers for compute authors, over the host's raw JSON-RPC:
//!
//! - typed `eth_call`: declare a contract's functions with alloy's [`sol!`]
//!   and call them with [`eth_call`] (one), [`eth_calls`] (one function,
//!   many times) or a [`Batch`] (several functions, one round trip); the
//!   calldata is encoded and the answer decoded for you, and every error
//!   names the function, the contract and the block ([`eth_call_request`]
//!   and [`decode_return`] do each half alone);
//! - typed logs: declare an event with [`sol!`] and read it over a block
//!   range with [`get_logs`], in chunks a provider accepts, checked and in
//!   chain order ([`get_raw_logs`] for several events at once);
//! - typed answers in unit tests: [`testing::ChainAnswers`] on `TestHost`;
//! - blocks and quantities: [`block`], [`quantity`], [`to_quantity`];
//! - the epoch's seed block, which `slot_selection::decide` expects:
//!   [`seed_block_hash`].
//!
//! ```ignore
//! use compute_kit::{Address, Chain, eth_call, sol};
//!
//! sol! {
//!     // `sol!` writes paths under `alloy_sol_types`: this points them here
//!     // (or depend on alloy-sol-types yourself and leave it out).
//!     #![sol(alloy_sol_types = compute_kit::sol_types)]
//!     function liquidity() external view returns (uint128);
//! }
//!
//! let pool: Address = compute_kit::address("0x…")?;
//! let liquidity: u128 = eth_call(host, Chain::Source, pool, &liquidityCall {}, epoch.end)?;
//! ```
//!
//! Calls are pinned to a block: the same epoch gives the same answer on
//! every node, and the node asks a pinned read once for all its slots. This
//! crate keeps no cache of its own: what a node happened to read before can
//! never change a snapshot's bytes.

pub use alloy_primitives::{Address, B256, I256, U256, aliases, hex};
pub use alloy_sol_types::{self as sol_types, SolCall, SolEvent, sol};
pub use lite_node_plugin_api::Chain;

use lite_node_plugin_api::{EpochContext, Host};
use serde_json::{Value, json};

mod calls;
mod logs;
pub mod testing;

pub use calls::{Answers, BATCH, Batch, Pending, decode_return, eth_call, eth_call_request, eth_calls};
pub use logs::{LOG_BLOCKS, Log, LogFilter, RawLog, get_logs, get_raw_logs};

/// `0x`-prefixed hex of `n`, as JSON-RPC wants block numbers.
pub fn to_quantity(n: u64) -> String {
    format!("0x{n:x}")
}

/// A JSON-RPC quantity (`"0x1a"`) as a number.
pub fn quantity(text: &str) -> Result<u64, String> {
    let digits = text.strip_prefix("0x").ok_or_else(|| format!("`{text}` is not a quantity (0x and hex digits)"))?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("`{text}` is not a quantity (0x and hex digits)"));
    }
    u64::from_str_radix(digits, 16).map_err(|_| format!("`{text}` is not a quantity (0x and hex digits)"))
}

/// An address from settings or an answer, with an error that names it.
pub fn address(text: &str) -> Result<Address, String> {
    let ok = text.len() == 42 && text.starts_with("0x") && text[2..].bytes().all(|b| b.is_ascii_hexdigit());
    if !ok {
        return Err(format!("`{text}` is not an address (0x and 40 hex digits)"));
    }
    text.parse().map_err(|_| format!("`{text}` is not an address (0x and 40 hex digits)"))
}

/// The fields of a block that processors use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub number: u64,
    /// `0x` and 64 hex digits.
    pub hash: String,
    pub parent_hash: String,
    /// Unix seconds.
    pub timestamp: u64,
}

impl Block {
    /// Reads `eth_getBlockByNumber`'s answer (the raw `result` JSON);
    /// `null` — a block the chain does not have yet — is an error.
    pub fn parse(result_json: &str) -> Result<Self, String> {
        let v: Value = serde_json::from_str(result_json).map_err(|e| format!("the block is not JSON: {e}"))?;
        if v.is_null() {
            return Err("the chain has no such block yet".into());
        }
        let text = |k: &str| v[k].as_str().ok_or_else(|| format!("the block has no `{k}`"));
        Ok(Self {
            number: quantity(text("number")?)?,
            hash: text("hash")?.to_owned(),
            parent_hash: text("parentHash")?.to_owned(),
            timestamp: quantity(text("timestamp")?)?,
        })
    }
}

/// Block `number` of `chain` (without its transactions).
pub fn block(host: &Host<'_>, chain: Chain, number: u64) -> Result<Block, String> {
    let params = json!([to_quantity(number), false]).to_string();
    let answer = host.rpc(chain, "eth_getBlockByNumber", &params).map_err(|e| format!("block {number}: {e}"))?;
    let block = Block::parse(&answer).map_err(|e| format!("block {number}: {e}"))?;
    if block.number != number {
        return Err(format!("asked for block {number}, the chain answered block {}", block.number));
    }
    Ok(block)
}

/// The hash of the epoch's seed block (`epoch.begin`), which the market's
/// slot selection draws from: from the preloaded block details when the
/// project lists `"block_details"`, else read from the source chain.
pub fn seed_block_hash(host: &Host<'_>, epoch: &EpochContext) -> Result<String, String> {
    if let Some(detail) = host.block_details().into_iter().find(|d| d.number == epoch.begin) {
        return Ok(detail.hash.into_string());
    }
    block(host, Chain::Source, epoch.begin).map(|b| b.hash).map_err(|e| format!("the epoch's seed {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_sol_types::SolValue;
    use lite_node_plugin_api::{BlockDetail, RpcError, testing::TestHost};

    sol! {
        #[derive(Debug)]
        function slot0() external view returns (uint160 sqrtPriceX96, int24 tick, uint16 observationIndex,
            uint16 observationCardinality, uint16 observationCardinalityNext, uint8 feeProtocol, bool unlocked);
        function balanceOf(address owner) external view returns (uint256);
    }

    const POOL: &str = "0x9d187010a2aac0c8057393b21a2c2ce089d2f5a7";

    fn host_answering(f: impl Fn(&str, &Value) -> Result<String, RpcError> + Send + Sync + 'static) -> TestHost {
        TestHost {
            rpc: Some(Box::new(move |_, method, params| f(method, &serde_json::from_str(params).unwrap()))),
            ..TestHost::default()
        }
    }

    fn hex_answer(bytes: &[u8]) -> String {
        Value::String(format!("0x{}", hex::encode(bytes))).to_string()
    }

    #[test]
    fn a_typed_call_encodes_the_calldata_pins_the_block_and_decodes_the_answer() {
        let t = host_answering(|method, params| {
            assert_eq!(method, "eth_call");
            assert_eq!(params[1], "0x23", "pinned to block 35");
            assert_eq!(params[0]["to"].as_str().unwrap().to_lowercase(), POOL);
            // slot0()'s selector, and nothing else.
            assert_eq!(params[0]["data"], "0x3850c7bd");
            let answer = slot0Return {
                sqrtPriceX96: aliases::U160::from(79_228_162_514_264_337_593_543_950_336u128),
                tick: aliases::I24::try_from(-5).unwrap(),
                observationIndex: 1,
                observationCardinality: 2,
                observationCardinalityNext: 3,
                feeProtocol: 0,
                unlocked: true,
            };
            Ok(hex_answer(&slot0Call::abi_encode_returns(&answer)))
        });
        let state = eth_call(&t.host(), Chain::Source, address(POOL).unwrap(), &slot0Call {}, 35).unwrap();
        assert_eq!(state.sqrtPriceX96.to_string(), "79228162514264337593543950336");
        assert_eq!(state.tick.as_i32(), -5);
        assert!(state.unlocked);
    }

    #[test]
    fn a_batch_answers_in_order_and_names_the_call_that_failed() {
        let owners = [Address::repeat_byte(1), Address::repeat_byte(2), Address::repeat_byte(3)];
        let t = host_answering(|_, params| {
            let data = params[0]["data"].as_str().unwrap();
            match &data[data.len() - 2..] {
                "03" => Err(RpcError { code: Some(3).into(), message: "execution reverted".into() }),
                last => Ok(hex_answer(&U256::from(u8::from_str_radix(last, 16).unwrap()).abi_encode())),
            }
        });
        let calls: Vec<_> = owners[..2].iter().map(|o| (address(POOL).unwrap(), balanceOfCall { owner: *o })).collect();
        let balances = eth_calls(&t.host(), Chain::Source, &calls, 7).unwrap();
        assert_eq!(balances, vec![U256::from(1), U256::from(2)]);

        let calls: Vec<_> = owners.iter().map(|o| (address(POOL).unwrap(), balanceOfCall { owner: *o })).collect();
        let err = eth_calls(&t.host(), Chain::Source, &calls, 7).unwrap_err();
        let lower = err.to_lowercase();
        assert!(lower.contains("eth_call balanceof(address) on 0x9d18") && err.contains("at block 7"), "{err}");
        assert!(err.contains("execution reverted"), "{err}");
    }

    #[test]
    fn an_empty_or_malformed_answer_is_an_error_naming_the_call() {
        let t = host_answering(|_, _| Ok("\"0x\"".into()));
        let err = eth_call(&t.host(), Chain::Source, Address::ZERO, &slot0Call {}, 1).unwrap_err();
        assert!(err.contains("eth_call slot0() on 0x0000") && err.contains("empty"), "{err}");
        let t = host_answering(|_, _| Ok("\"0x1234\"".into()));
        let err = eth_call(&t.host(), Chain::Source, Address::ZERO, &slot0Call {}, 1).unwrap_err();
        assert!(err.contains("does not decode"), "{err}");
        // sqrtPriceX96 (a uint160) with bits set above 160: refused, not cut.
        let wide = format!("\"0x{}{}\"", "ff".repeat(32), "00".repeat(6 * 32));
        let t = host_answering(move |_, _| Ok(wide.clone()));
        let err = eth_call(&t.host(), Chain::Source, Address::ZERO, &slot0Call {}, 1).unwrap_err();
        assert!(err.contains("does not decode as slot0()"), "{err}");
        let t = host_answering(|_, _| Err(RpcError { code: None.into(), message: "connection refused".into() }));
        let err = eth_call(&t.host(), Chain::Source, Address::ZERO, &slot0Call {}, 1).unwrap_err();
        assert!(err.contains("connection refused"), "{err}");
    }

    #[test]
    fn blocks_quantities_and_addresses_are_read_or_refused_by_name() {
        assert_eq!(quantity("0x1a"), Ok(26));
        assert!(quantity("26").unwrap_err().contains("`26` is not a quantity"));
        assert!(quantity("0x+1a").is_err() && quantity("0x").is_err());
        assert_eq!(to_quantity(255), "0xff");
        assert!(address("0x12").unwrap_err().contains("`0x12` is not an address"));
        let hash = format!("0x{}", "ab".repeat(32));
        let answer = json!({"number": "0x5", "hash": hash, "parentHash": hash, "timestamp": "0x10"}).to_string();
        let t = host_answering(move |method, params| {
            assert_eq!((method, params[0].as_str().unwrap()), ("eth_getBlockByNumber", "0x5"));
            Ok(answer.clone())
        });
        let b = block(&t.host(), Chain::Source, 5).unwrap();
        assert_eq!((b.number, b.timestamp, b.hash.len()), (5, 16, 66));
        let t = host_answering(|_, _| Ok("null".into()));
        assert!(block(&t.host(), Chain::Source, 9).unwrap_err().contains("block 9: the chain has no such block yet"));
    }

    #[test]
    fn the_seed_block_comes_from_the_preload_or_the_source_chain() {
        let epoch = EpochContext::builder(3, 40, 42).build();
        let preloaded = TestHost::with_blocks(vec![BlockDetail { number: 40, hash: "0xseed".into(), timestamp: 1 }]);
        assert_eq!(seed_block_hash(&preloaded.host(), &epoch).unwrap(), "0xseed");
        let hash = format!("0x{}", "cd".repeat(32));
        let answer = json!({"number": "0x28", "hash": hash, "parentHash": hash, "timestamp": "0x1"}).to_string();
        let fetched = host_answering(move |_, _| Ok(answer.clone()));
        assert_eq!(seed_block_hash(&fetched.host(), &epoch).unwrap(), hash);
        let missing = host_answering(|_, _| Ok("null".into()));
        let err = seed_block_hash(&missing.host(), &epoch).unwrap_err();
        assert!(err.contains("the epoch's seed block 40"), "{err}");
    }
}
