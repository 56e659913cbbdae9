//! Transactions this process signs itself and sends raw
//! (`eth_sendRawTransaction`), so no node has to hold the key: each is
//! estimated first (a call that would revert is refused here, with the
//! chain's reason, and costs nothing), given the account's next nonce
//! counting its pending transactions, priced from `eth_gasPrice`, signed
//! (EIP-1559) and sent. The key never leaves [`TxSender`] and is never
//! printed.

use std::sync::Arc;

use alloy::{
    consensus::{SignableTransaction, TxEip1559},
    eips::eip2718::Encodable2718,
    primitives::{Address, B256, Bytes, TxKind, U256},
    signers::{SignerSync, local::PrivateKeySigner},
};
use lite_node_plugin_api::RpcError;
use serde_json::{Value, json};

use crate::HttpRpc;

/// Signs and sends transactions from one account.
#[derive(Clone)]
pub struct TxSender {
    rpc: Arc<HttpRpc>,
    key: PrivateKeySigner,
    chain_id: u64,
    /// The most any transaction offers per gas (`None`: no cap).
    max_fee: Option<u128>,
}

impl std::fmt::Debug for TxSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxSender").field("from", &self.key.address()).field("chain_id", &self.chain_id).finish()
    }
}

/// Why a transaction was not sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxError {
    /// The chain says the call would revert (its reason, as the node gave it).
    Reverted(String),
    /// The chain could not be asked, or gave an answer that does not parse.
    Rpc(RpcError),
}

impl std::fmt::Display for TxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TxError::Reverted(why) => write!(f, "the chain refuses the call: {why}"),
            TxError::Rpc(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TxError {}

/// A signed transaction, not sent yet.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub hash: B256,
    /// Its nonce and fees: a replacement takes the nonce and outbids them.
    pub nonce: u64,
    pub max_fee: u128,
    pub priority_fee: u128,
    /// Its gas limit: a replacement keeps it (the same call).
    pub gas_limit: u64,
    raw: String,
}

/// A mined transaction's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    pub block_number: u64,
    /// `false`: it reverted when mined.
    pub success: bool,
    pub gas_used: u64,
    /// The contract a creation made.
    pub contract_address: Option<Address>,
}

/// The priority fee offered, capped by the fee cap.
const PRIORITY_FEE: u128 = 1_000_000_000;

/// The least fee a replacement must offer over `old` to be taken in its
/// place (geth: +10 %; an eighth, and one more).
fn outbid(old: u128) -> u128 {
    old.saturating_add(old / 8).saturating_add(1)
}

impl Prepared {
    /// Whether this transaction outbids `old` enough to take its place in
    /// a node's pool (false: the fee cap held it under).
    pub fn outbids(&self, old: &Prepared) -> bool {
        self.max_fee >= outbid(old.max_fee) && self.priority_fee >= outbid(old.priority_fee)
    }
}

fn bad(what: &str, detail: impl std::fmt::Display) -> RpcError {
    RpcError { code: None.into(), message: format!("{what}: unexpected answer: {detail}").into() }
}

fn quantity(v: &Value, what: &str) -> Result<u128, RpcError> {
    lite_node_protocol::quantity::wide_quantity(v).map_err(|e| bad(what, e))
}

impl TxSender {
    /// A sender from `key` (a raw secp256k1 secret) on the chain `chain_id`.
    pub fn new(rpc: Arc<HttpRpc>, key: &[u8; 32], chain_id: u64) -> Result<Self, String> {
        let key = PrivateKeySigner::from_slice(key)
            .map_err(|_| "not a valid secp256k1 private key (zero, or not below the curve order)".to_owned())?;
        Ok(Self { rpc, key, chain_id, max_fee: None })
    }

    /// The same sender, never offering more than `cap` wei per gas: a
    /// transaction is priced at most at the cap (and waits in the pool while
    /// the base fee is above it), a replacement that would have to outbid
    /// past it is not made ([`Prepared::outbids`] says).
    pub fn with_max_fee(mut self, cap: Option<u128>) -> Self {
        self.max_fee = cap;
        self
    }

    /// The account's transactions mined (`latest`) and known to the node
    /// including its pool (`pending`): more pending than mined is a
    /// transaction of this account still waiting, whoever sent it.
    pub async fn nonces(&self) -> Result<(u64, u64), RpcError> {
        let from = self.address();
        let answers = self
            .rpc
            .batch_values(&[
                ("eth_getTransactionCount", json!([from, "latest"])),
                ("eth_getTransactionCount", json!([from, "pending"])),
            ])
            .await?;
        let mut nonce = answers.into_iter().map(|a| {
            let n = quantity(&a?, "eth_getTransactionCount")?;
            u64::try_from(n).map_err(|_| bad("eth_getTransactionCount", n))
        });
        let mined = nonce.next().unwrap_or_else(|| Err(bad("batch", "too few answers")))?;
        let pending = nonce.next().unwrap_or_else(|| Err(bad("batch", "too few answers")))?;
        if pending > mined {
            return Ok((mined, pending));
        }
        // Not every client counts its pool in `pending` (ganache does not):
        // where the pool can be read, a transaction of ours there counts.
        Ok((mined, self.pooled_next(mined).await.unwrap_or(mined).max(mined)))
    }

    /// One past the highest nonce of this account's transactions in the
    /// node's pool (`txpool_contentFrom`, else `txpool_content`); `None`
    /// where neither can be read (a provider that hides its pool: its
    /// `pending` count is then the word).
    async fn pooled_next(&self, mined: u64) -> Option<u64> {
        let from = self.address();
        let mine = match self.rpc.call_value("txpool_contentFrom", json!([from])).await {
            Ok(content) => content,
            Err(_) => {
                let all = self.rpc.call_value("txpool_content", json!([])).await.ok()?;
                let by = all.as_object()?.values().filter_map(Value::as_object);
                let mut mine = serde_json::Map::new();
                for (section, senders) in all.as_object()?.keys().zip(by) {
                    let ours = senders.iter().find(|(a, _)| a.parse::<Address>().ok() == Some(from));
                    if let Some((_, txs)) = ours {
                        mine.insert(section.clone(), txs.clone());
                    }
                }
                Value::Object(mine)
            }
        };
        let nonces = mine["pending"].as_object()?.keys().filter_map(|n| n.parse::<u64>().ok());
        nonces.filter(|n| *n >= mined).max().map(|n| n + 1)
    }

    /// A call of `input` to `to` under `nonce`, to take the place of a
    /// transaction of this account waiting there whose fees are not known
    /// (one a previous process sent): gas estimated at the latest block
    /// (`fallback_gas` if that cannot be), fees from the gas price now —
    /// outbidding `outbid` when given (the last such attempt the node
    /// refused as underpriced).
    pub async fn prepare_at(
        &self,
        to: Address,
        input: Bytes,
        nonce: u64,
        fallback_gas: u64,
        outbid: Option<&Prepared>,
    ) -> Result<Prepared, TxError> {
        let call = json!({"from": self.address(), "to": to, "data": input});
        let answers = self
            .rpc
            .batch_values(&[("eth_estimateGas", json!([call, "latest"])), ("eth_gasPrice", json!([]))])
            .await
            .map_err(TxError::Rpc)?;
        let mut answers = answers.into_iter();
        let gas_limit = match answers.next() {
            Some(Ok(v)) => quantity(&v, "eth_estimateGas")
                .ok()
                .and_then(|g| u64::try_from(g.saturating_mul(3) / 2).ok())
                .unwrap_or(fallback_gas),
            _ => fallback_gas,
        };
        let gas_price = answers.next().unwrap_or_else(|| Err(bad("batch", "too few answers"))).map_err(TxError::Rpc)?;
        let gas_price = quantity(&gas_price, "eth_gasPrice").map_err(TxError::Rpc)?;
        self.sign(TxKind::Call(to), input, nonce, gas_limit, gas_price, outbid)
    }

    pub fn address(&self) -> Address {
        self.key.address()
    }

    /// The chain it signs for.
    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The RPC it sends through.
    pub fn rpc(&self) -> &HttpRpc {
        &self.rpc
    }

    /// Estimates, signs and sends a call of `input` to `to`; returns its hash.
    pub async fn send(&self, to: Address, input: Bytes) -> Result<B256, TxError> {
        let tx = self.prepare(to, input).await?;
        self.broadcast(&tx).await?;
        Ok(tx.hash)
    }

    /// Estimates and signs a call of `input` to `to`, without sending it:
    /// its hash is known (and can be recorded) before it can be mined.
    pub async fn prepare(&self, to: Address, input: Bytes) -> Result<Prepared, TxError> {
        self.prepare_kind(TxKind::Call(to), input, None).await
    }

    /// The same call as `stuck` (not mined in time) again, under its nonce
    /// with both fees at least an eighth higher, so the node takes it in
    /// the old one's place and only one of them can be mined.
    pub async fn prepare_replacing(&self, to: Address, input: Bytes, stuck: &Prepared) -> Result<Prepared, TxError> {
        self.prepare_kind(TxKind::Call(to), input, Some(stuck)).await
    }

    /// Estimates, signs and sends the creation of a contract whose init
    /// code (bytecode and constructor arguments) is `code`; returns the
    /// transaction's hash (the receipt names the contract's address).
    pub async fn deploy(&self, code: Bytes) -> Result<B256, TxError> {
        let tx = self.prepare_deploy(code).await?;
        self.broadcast(&tx).await?;
        Ok(tx.hash)
    }

    /// Estimates and signs the creation of a contract, without sending it:
    /// its hash is known (and can be recorded) before it can be mined.
    pub async fn prepare_deploy(&self, code: Bytes) -> Result<Prepared, TxError> {
        self.prepare_kind(TxKind::Create, code, None).await
    }

    async fn prepare_kind(
        &self,
        kind: TxKind,
        input: Bytes,
        replacing: Option<&Prepared>,
    ) -> Result<Prepared, TxError> {
        let from = self.address();
        let call = match kind {
            TxKind::Call(to) => json!({"from": from, "to": to, "data": input}),
            TxKind::Create => json!({"from": from, "data": input}),
        };
        // A replacement is the same call under the same nonce and gas limit:
        // nothing is estimated again (a node estimating against its pending
        // block would see the stuck call's own effect and refuse it).
        if let Some(stuck) = replacing {
            let gas_price = self.rpc.call_value("eth_gasPrice", json!([])).await.map_err(TxError::Rpc)?;
            let gas_price = quantity(&gas_price, "eth_gasPrice").map_err(TxError::Rpc)?;
            return self.sign(kind, input, stuck.nonce, stuck.gas_limit, gas_price, Some(stuck));
        }
        let answers = self
            .rpc
            .batch_values(&[
                ("eth_estimateGas", json!([call])),
                ("eth_getTransactionCount", json!([from, "pending"])),
                ("eth_gasPrice", json!([])),
            ])
            .await
            .map_err(TxError::Rpc)?;
        let mut answers = answers.into_iter();
        let mut next = || answers.next().unwrap_or_else(|| Err(bad("batch", "too few answers")));
        let gas = match next() {
            Ok(v) => quantity(&v, "eth_estimateGas").map_err(TxError::Rpc)?,
            // A node answers a call that would revert with an error object
            // (code 3, or -32000/-32603 with "revert" in the message).
            Err(e) if e.code.into_option().is_some() && e.message.to_ascii_lowercase().contains("revert") => {
                return Err(TxError::Reverted(e.message.to_string()));
            }
            Err(e) => return Err(TxError::Rpc(e)),
        };
        let nonce = quantity(&next().map_err(TxError::Rpc)?, "eth_getTransactionCount").map_err(TxError::Rpc)?;
        let gas_price = quantity(&next().map_err(TxError::Rpc)?, "eth_gasPrice").map_err(TxError::Rpc)?;
        let nonce = u64::try_from(nonce).map_err(|_| TxError::Rpc(bad("eth_getTransactionCount", nonce)))?;
        // Half again the estimate: the state may move between the estimate
        // and the block (another validator's attestation first makes ours
        // the one that finalizes, which costs more).
        let gas_limit = u64::try_from(gas.saturating_mul(3) / 2).unwrap_or(u64::MAX);
        self.sign(kind, input, nonce, gas_limit, gas_price, None)
    }

    /// Signs the call with fees from `gas_price` (outbidding `replacing`'s).
    fn sign(
        &self,
        kind: TxKind,
        input: Bytes,
        nonce: u64,
        gas_limit: u64,
        gas_price: u128,
        replacing: Option<&Prepared>,
    ) -> Result<Prepared, TxError> {
        let mut max_fee = gas_price.saturating_mul(2).max(1);
        let mut priority_fee = PRIORITY_FEE.min(max_fee);
        let nonce = match replacing {
            None => nonce,
            Some(stuck) => {
                // Nodes take a replacement only above the old fees (geth: +10 %).
                max_fee = max_fee.max(outbid(stuck.max_fee));
                priority_fee = priority_fee.max(outbid(stuck.priority_fee)).min(max_fee);
                stuck.nonce
            }
        };
        // The cap holds for every transaction, the first too.
        if let Some(cap) = self.max_fee {
            max_fee = max_fee.min(cap).max(1);
            priority_fee = priority_fee.min(max_fee);
        }
        let tx = TxEip1559 {
            chain_id: self.chain_id,
            nonce,
            gas_limit,
            max_fee_per_gas: max_fee,
            max_priority_fee_per_gas: priority_fee,
            to: kind,
            value: U256::ZERO,
            access_list: Default::default(),
            input,
        };
        let signature = self
            .key
            .sign_hash_sync(&tx.signature_hash())
            .map_err(|e| TxError::Rpc(bad("signing the transaction", e)))?;
        let signed = tx.into_signed(signature);
        Ok(Prepared {
            hash: *signed.hash(),
            nonce,
            max_fee,
            priority_fee,
            gas_limit,
            raw: format!("0x{}", hex::encode(signed.encoded_2718())),
        })
    }

    /// Sends a prepared transaction.
    pub async fn broadcast(&self, tx: &Prepared) -> Result<(), TxError> {
        match self.rpc.call_value("eth_sendRawTransaction", json!([tx.raw])).await {
            Ok(_) => Ok(()),
            // Sent before (a retry after a timeout): it is in the pool.
            Err(e) if e.message.to_ascii_lowercase().contains("already known") => Ok(()),
            Err(e) if e.message.to_ascii_lowercase().contains("revert") => {
                Err(TxError::Reverted(e.message.to_string()))
            }
            Err(e) => Err(TxError::Rpc(e)),
        }
    }

    /// The receipt of `hash`: `None` while it is not mined.
    pub async fn receipt(&self, hash: B256) -> Result<Option<Receipt>, RpcError> {
        let v = self.rpc.call_value("eth_getTransactionReceipt", json!([hash])).await?;
        if v.is_null() {
            return Ok(None);
        }
        let field = |k: &str| quantity(&v[k], "eth_getTransactionReceipt");
        Ok(Some(Receipt {
            block_number: field("blockNumber")? as u64,
            success: field("status")? == 1,
            gas_used: field("gasUsed")? as u64,
            contract_address: v["contractAddress"].as_str().and_then(|a| a.parse().ok()),
        }))
    }

    /// Whether the node knows `hash` at all (pending or mined); a
    /// transaction it does not know was never received, or was dropped.
    pub async fn known(&self, hash: B256) -> Result<bool, RpcError> {
        Ok(!self.rpc.call_value("eth_getTransactionByHash", json!([hash])).await?.is_null())
    }
}
