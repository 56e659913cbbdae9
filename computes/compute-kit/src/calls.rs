//! Typed `eth_call`: one call, many of one function, or a mixed batch of
//! several functions in one round trip; and the encoding and decoding they
//! share, for authors who build their own requests.

use std::{
    marker::PhantomData,
    sync::atomic::{AtomicU64, Ordering},
};

use alloy_primitives::{Address, hex};
use alloy_sol_types::SolCall;
use lite_node_plugin_api::{Chain, Host, RpcCall, RpcError};
use serde_json::json;

use crate::to_quantity;

/// Calls per JSON-RPC batch in [`eth_calls`] and [`Batch::send`].
pub const BATCH: usize = 100;

/// Calls `call` on the contract `to` at `block` and decodes its answer.
pub fn eth_call<C: SolCall>(
    host: &Host<'_>,
    chain: Chain,
    to: Address,
    call: &C,
    block: u64,
) -> Result<C::Return, String> {
    let what = || describe::<C>(to, block);
    let request = eth_call_request(to, call, block);
    let answer =
        host.rpc(chain, "eth_call", &request.params_json).map_err(|e| format!("{}: {}", what(), reason(&e)))?;
    decode_return::<C>(&answer).map_err(|e| format!("{}: {e}", what()))
}

/// [`eth_call`] of one function on many contracts (or with many arguments)
/// at one block, in batches of [`BATCH`]; the answers come back in the
/// calls' order, and the first failure is the error. For several functions
/// at once, see [`Batch`].
pub fn eth_calls<C: SolCall>(
    host: &Host<'_>,
    chain: Chain,
    calls: &[(Address, C)],
    block: u64,
) -> Result<Vec<C::Return>, String> {
    let mut batch = Batch::new(chain, block);
    let pending: Vec<Pending<C>> = calls.iter().map(|(to, call)| batch.add(*to, call)).collect();
    let answers = batch.send(host)?;
    pending.into_iter().map(|p| answers.get(p)).collect()
}

/// The JSON-RPC request for `call` on `to` at `block`: what [`eth_call`]
/// sends, for a batch of an author's own making.
pub fn eth_call_request<C: SolCall>(to: Address, call: &C, block: u64) -> RpcCall {
    let data = format!("0x{}", hex::encode(call.abi_encode()));
    let params = json!([{"to": to.to_string(), "data": data}, to_quantity(block)]);
    RpcCall { method: "eth_call".into(), params_json: params.to_string().into() }
}

/// Decodes an `eth_call` answer (the raw `result` JSON, `"0x…"`) as `C`
/// returns it. An empty answer is an error: no contract at that address at
/// that block, or a function it does not have. An answer that does not
/// fit the declared types exactly (a wider integer, a `bool` that is not 0
/// or 1) is an error too, never a truncated value.
pub fn decode_return<C: SolCall>(answer_json: &str) -> Result<C::Return, String> {
    let text: String =
        serde_json::from_str(answer_json).map_err(|_| format!("the answer {answer_json} is not a hex string"))?;
    let bytes = hex::decode(&text).map_err(|_| format!("the answer {text} is not hex"))?;
    if bytes.is_empty() {
        return Err("the answer is empty (no contract at that address, at that block?)".into());
    }
    // Validated: a value wider than its type (a `uint128` declared for a
    // `uint256`), a `bool` that is not 0 or 1, are errors, not truncated.
    C::abi_decode_returns_validate(&bytes).map_err(|e| format!("the answer does not decode as {}: {e}", C::SIGNATURE))
}

/// Calls of any functions, on any contracts, at one block, sent together:
/// one round trip for up to [`BATCH`] calls. Each [`Batch::add`] gives a
/// [`Pending`] that reads its own typed answer from what [`Batch::send`]
/// returns.
///
/// ```ignore
/// let mut batch = Batch::new(Chain::Source, epoch.end);
/// let state = batch.add(pool, &slot0Call {});
/// let liquidity = batch.add(pool, &liquidityCall {});
/// let answers = batch.send(host)?;
/// let (state, liquidity) = (answers.get(state)?, answers.get(liquidity)?);
/// ```
#[derive(Debug)]
pub struct Batch {
    id: u64,
    chain: Chain,
    block: u64,
    calls: Vec<(RpcCall, String)>,
}

/// One call of a [`Batch`]; [`Answers::get`] decodes its answer as `C`.
#[must_use = "read the answer with `Answers::get`"]
pub struct Pending<C> {
    batch: u64,
    index: usize,
    call: PhantomData<fn() -> C>,
}

impl<C> Clone for Pending<C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C> Copy for Pending<C> {}

impl<C> std::fmt::Debug for Pending<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pending(batch {}, call {})", self.batch, self.index)
    }
}

/// What a [`Batch`] was answered, call by call.
#[derive(Debug)]
pub struct Answers {
    batch: u64,
    answers: Vec<Result<String, RpcError>>,
    described: Vec<String>,
}

/// Tells batches apart, so a [`Pending`] is read only from its own.
static BATCHES: AtomicU64 = AtomicU64::new(0);

impl Batch {
    /// An empty batch of calls at `block` of `chain`.
    pub fn new(chain: Chain, block: u64) -> Self {
        Self { id: BATCHES.fetch_add(1, Ordering::Relaxed), chain, block, calls: Vec::new() }
    }

    /// Adds `call` on the contract `to`.
    pub fn add<C: SolCall>(&mut self, to: Address, call: &C) -> Pending<C> {
        let index = self.calls.len();
        self.calls.push((eth_call_request(to, call, self.block), describe::<C>(to, self.block)));
        Pending { batch: self.id, index, call: PhantomData }
    }

    /// How many calls it holds.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Sends the calls, [`BATCH`] to a round trip. The error is a batch
    /// that failed as a whole (the chain was not reached, or answered
    /// another number of calls); a call's own failure (a revert, say) is
    /// [`Answers::get`]'s error for that call alone.
    pub fn send(self, host: &Host<'_>) -> Result<Answers, String> {
        let mut answers = Vec::with_capacity(self.calls.len());
        let mut described = Vec::with_capacity(self.calls.len());
        let whole = self.calls.len();
        let mut calls = self.calls.into_iter().peekable();
        while calls.peek().is_some() {
            let (requests, names): (Vec<RpcCall>, Vec<String>) = calls.by_ref().take(BATCH).unzip();
            let what = || {
                let of = if whole > requests.len() { format!(" (of {whole})") } else { String::new() };
                format!("a batch of {} eth_call{of}, the first {}", requests.len(), names[0])
            };
            let got = host.rpc_batch(self.chain, &requests).map_err(|e| format!("{}: {}", what(), reason(&e)))?;
            if got.len() != requests.len() {
                return Err(format!("{}: the chain answered {} calls", what(), got.len()));
            }
            answers.extend(got);
            described.extend(names);
        }
        Ok(Answers { batch: self.id, answers, described })
    }
}

impl Answers {
    /// The answer to `pending`, decoded; an error names the function, the
    /// contract and the block.
    pub fn get<C: SolCall>(&self, pending: Pending<C>) -> Result<C::Return, String> {
        if pending.batch != self.batch || pending.index >= self.answers.len() {
            return Err(format!("{pending:?} was added to another batch than these answers'"));
        }
        let what = &self.described[pending.index];
        let answer = self.answers[pending.index].as_ref().map_err(|e| format!("{what}: {}", reason(e)))?;
        decode_return::<C>(answer).map_err(|e| format!("{what}: {e}"))
    }
}

fn describe<C: SolCall>(to: Address, block: u64) -> String {
    format!("eth_call {} on {to} at block {block}", C::SIGNATURE)
}

/// A JSON-RPC error as a reason: with its code (the chain answered, e.g. a
/// revert) or without one (the chain was not reached).
pub(crate) fn reason(e: &RpcError) -> String {
    e.to_string()
}
