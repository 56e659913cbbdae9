//! A market as its manifest names it, for the verbs that act on it: the
//! anchor chain reached and checked to be the manifest's, ProtocolState
//! found there; views, transactions, and the newest finalized epoch.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use alloy::{
    primitives::{Address, U256},
    sol_types::{SolCall, SolEvent},
};
use anyhow::{Result, anyhow, bail};
use lite_node_core::exit::BadInput;
use lite_node_protocol::{
    contracts::{SnapshotBatchFinalized, getTotalNodeCountCall, slotSnapshotterMappingCall},
    quantity::{quantity, to_quantity},
};
use serde_json::json;

use super::{ChainEntry, Manifest, mined};
use crate::{HttpRpc, IoRuntime, TxSender};

/// How long a market verb waits for one RPC answer.
const RPC_TIMEOUT: Duration = Duration::from_secs(30);

/// Anchor blocks one log query spans (public RPCs refuse wide ranges).
pub const LOG_SPAN: u64 = 5_000;

/// Spans read back at most for the last finalized epoch (200,000 blocks).
pub const LOG_SPANS: u64 = 40;

/// Slots whose signers one JSON-RPC batch reads.
const SIGNERS_PER_BATCH: usize = 100;

/// The manifest, its anchor chain checked, ProtocolState found: what every
/// verb after `deploy` starts from.
pub struct Market {
    pub manifest: Manifest,
    /// Where the manifest was read (messages name it).
    pub path: PathBuf,
    pub anchor: Arc<HttpRpc>,
}

impl Market {
    /// The manifest at `path`, its anchor chain reached and checked, and
    /// ProtocolState found there.
    pub async fn open(path: &Path, io: &IoRuntime) -> Result<Self> {
        let manifest = Manifest::load(path)?;
        let anchor = reach(path, "anchor", &manifest.anchor, io).await?;
        let code = anchor.call_value("eth_getCode", json!([manifest.protocol_state, "latest"])).await?;
        if code.as_str().is_none_or(|c| c.trim_start_matches("0x").is_empty()) {
            bail!(BadInput(format!(
                "{}: no contract at {} on chain {}: a manifest of another chain, or a chain that was reset?",
                path.display(),
                manifest.protocol_state,
                manifest.anchor.chain_id
            )));
        }
        check_not_reset(path, &manifest, &anchor).await?;
        Ok(Self { manifest, path: path.to_owned(), anchor: Arc::new(anchor) })
    }

    /// The market's source chain, reached and checked.
    pub async fn source(&self, io: &IoRuntime) -> Result<HttpRpc> {
        reach(&self.path, "source", &self.manifest.source, io).await
    }

    /// Each of the source chain's RPCs on its own, every one checked, with
    /// the URL as messages show it (the releaser compares their heads).
    /// One that does not answer now is left out (said on stderr) while
    /// another does; one of another chain is bad input.
    pub async fn sources(&self, io: &IoRuntime) -> Result<Vec<(String, Arc<HttpRpc>)>> {
        let mut sources = Vec::new();
        let mut silent = Vec::new();
        for url in &self.manifest.source.rpcs {
            let one = ChainEntry { rpcs: vec![url.clone()], ..self.manifest.source.clone() };
            let shown_url = shown(std::slice::from_ref(url));
            let rpc = connect("source", &one.rpcs, io)?;
            match rpc.call_value("eth_chainId", json!([])).await {
                Err(e) => silent.push(format!("{shown_url} ({})", e.message)),
                Ok(_) => {
                    // Answers: now it must be the market's chain.
                    let rpc = reach(&self.path, "source", &one, io).await?;
                    sources.push((shown_url, Arc::new(rpc)));
                }
            }
        }
        if sources.is_empty() {
            bail!("no source RPC of the market answers: {}", silent.join("; "));
        }
        for s in &silent {
            eprintln!("source RPC {s} does not answer: left out until the releaser is started again");
        }
        Ok(sources)
    }

    /// A view of ProtocolState at the newest block.
    pub async fn view<C: SolCall>(&self, call: C) -> Result<C::Return> {
        self.anchor.view(self.manifest.protocol_state, &call).await.map_err(|e| anyhow!(e))
    }

    /// A sender of transactions to the market's anchor chain from `key`;
    /// `key_name` names where the key came from in errors.
    pub fn sender(&self, key: &[u8; 32], key_name: &str) -> Result<TxSender> {
        Ok(TxSender::new(self.anchor.clone(), key, self.manifest.anchor.chain_id)
            .map_err(|e| BadInput(format!("{key_name}: {e}")))?)
    }

    /// Sends `call` to ProtocolState from `sender`, says its hash through
    /// `say` and waits for it to be mined; its anchor block. A call the
    /// contract refuses, or a sender without funds for gas, is bad input in
    /// the chain's words.
    pub async fn send<C: SolCall>(
        &self,
        sender: &TxSender,
        call: C,
        what: &str,
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<u64> {
        let hash = sender
            .send(self.manifest.protocol_state, call.abi_encode().into())
            .await
            .map_err(|e| super::refused(sender, what, e))?;
        say(format!("{what}: transaction {hash} sent from {}", sender.address()));
        Ok(mined(sender, hash, what).await?.block_number)
    }

    /// The registered slots' signers, slot 1 first, read in batches.
    pub async fn signers(&self) -> Result<Vec<Address>> {
        let count = u64::try_from(self.view(getTotalNodeCountCall {}).await?).unwrap_or(u64::MAX);
        let mut signers = Vec::new();
        let ids: Vec<u64> = (1..=count).collect();
        for chunk in ids.chunks(SIGNERS_PER_BATCH) {
            let calls: Vec<(&str, serde_json::Value)> = chunk
                .iter()
                .map(|slot| {
                    let data = alloy::primitives::Bytes::from(
                        slotSnapshotterMappingCall { slotId: U256::from(*slot) }.abi_encode(),
                    );
                    ("eth_call", json!([{"to": self.manifest.protocol_state, "data": data}, "latest"]))
                })
                .collect();
            for (slot, answer) in chunk.iter().zip(self.anchor.batch_values(&calls).await?) {
                let answer = answer.map_err(|e| anyhow!("slot {slot}'s signer: {}", e.message))?;
                let bytes: alloy::primitives::Bytes = serde_json::from_value(answer.clone())
                    .map_err(|_| anyhow!("slot {slot}'s signer: answered {answer}"))?;
                signers.push(
                    slotSnapshotterMappingCall::abi_decode_returns(&bytes)
                        .map_err(|e| anyhow!("slot {slot}'s signer: {e}"))?,
                );
            }
        }
        Ok(signers)
    }

    /// The signer a slot is registered to.
    pub async fn signer_of(&self, slot: u64) -> Result<Address> {
        self.view(slotSnapshotterMappingCall { slotId: U256::from(slot) }).await
    }

    /// The newest epoch finalized on chain and its anchor block.
    pub async fn last_finalized(&self) -> Result<Option<(u64, u64)>> {
        Ok(self.recent_finalized(1).await?.into_iter().next())
    }

    /// Up to `n` of the newest epochs finalized on chain, newest first, each
    /// with its anchor block: the market's `SnapshotBatchFinalized` logs,
    /// read back from the head [`LOG_SPAN`] blocks at a time, down to the
    /// deploy block or at most [`LOG_SPANS`] spans.
    pub async fn recent_finalized(&self, n: usize) -> Result<Vec<(u64, u64)>> {
        let m = &self.manifest;
        let head = quantity(&self.anchor.call_value("eth_blockNumber", json!([])).await?)?;
        if head < m.deploy_block {
            return Ok(Vec::new());
        }
        let topic = format!("{:#x}", SnapshotBatchFinalized::SIGNATURE_HASH);
        let market_topic = format!("{:#x}", m.data_market.into_word());
        let mut found: Vec<(u64, u64)> = Vec::new();
        let mut to = head;
        for _ in 0..LOG_SPANS {
            let from = to.saturating_sub(LOG_SPAN - 1).max(m.deploy_block);
            let filter = json!({
                "fromBlock": to_quantity(from), "toBlock": to_quantity(to),
                "address": m.protocol_state, "topics": [topic, market_topic],
            });
            let logs = self.anchor.call_value("eth_getLogs", json!([filter])).await?;
            found.extend(logs.as_array().into_iter().flatten().filter_map(|l| {
                let epoch = U256::from_be_bytes(l["topics"][2].as_str()?.parse::<alloy::primitives::B256>().ok()?.0);
                Some((u64::try_from(epoch).ok()?, quantity(&l["blockNumber"]).ok()?))
            }));
            if found.len() >= n || from <= m.deploy_block {
                break;
            }
            to = from - 1;
        }
        found.sort_unstable_by(|a, b| b.cmp(a));
        found.dedup_by_key(|(epoch, _)| *epoch);
        found.truncate(n);
        Ok(found)
    }
}

/// A manifest whose anchor chain was reset (its deploy block has another
/// hash now, or is not there at all) names a market that no longer exists:
/// bad input, said so. A manifest written before block hashes were
/// recorded is not checked.
pub async fn check_not_reset(path: &Path, manifest: &Manifest, anchor: &HttpRpc) -> Result<()> {
    let Some(recorded) = manifest.deploy_block_hash else { return Ok(()) };
    let block = manifest.deploy_block;
    match anchor.block_hash(block).await? {
        Some(now) if now == recorded => Ok(()),
        Some(now) => bail!(BadInput(format!(
            "{}: anchor block {block} is {now} on chain {}, but the market was deployed in {recorded}: the chain \
             was reset (or reorganized past the deployment), and this manifest names a market that no longer exists",
            path.display(),
            manifest.anchor.chain_id
        ))),
        None => bail!(BadInput(format!(
            "{}: the anchor RPC ({}) has no block {block}, where the market was deployed: it is behind, or the chain \
             was reset",
            path.display(),
            shown(&manifest.anchor.rpcs)
        ))),
    }
}

/// The endpoints of one of the manifest's chains, checked to answer with
/// the chain id the manifest records.
async fn reach(path: &Path, role: &'static str, entry: &ChainEntry, io: &IoRuntime) -> Result<HttpRpc> {
    let rpc = connect(role, &entry.rpcs, io)?;
    let id = chain_id(&rpc, &format!("the {role} RPC"), &entry.rpcs).await?;
    if id != entry.chain_id {
        bail!(BadInput(format!(
            "{}: the market's {role} chain is {}, but its RPC ({}) is chain {id}: a manifest of another chain?",
            path.display(),
            entry.chain_id,
            shown(&entry.rpcs)
        )));
    }
    Ok(rpc)
}

/// An RPC client over `urls` for a market verb; none given is bad input
/// naming the flag (`--<role>-rpc`).
pub fn connect(role: &'static str, urls: &[String], io: &IoRuntime) -> Result<HttpRpc> {
    if urls.is_empty() {
        bail!(BadInput(format!("no {role} RPC given (--{role}-rpc URL)")));
    }
    Ok(HttpRpc::new(role, urls.to_vec(), RPC_TIMEOUT, io.clone()).map_err(BadInput)?)
}

/// The chain id the endpoints answer; an endpoint that is not an EVM
/// chain's JSON-RPC is bad input naming `flag`.
pub async fn chain_id(rpc: &HttpRpc, flag: &str, urls: &[String]) -> Result<u64> {
    let answer = rpc.call_value("eth_chainId", json!([])).await.map_err(|e| {
        BadInput(format!(
            "{flag} {}: not an EVM chain's JSON-RPC endpoint, or not answering ({})",
            shown(urls),
            e.message
        ))
    })?;
    quantity(&answer)
        .map_err(|_| BadInput(format!("{flag} {}: eth_chainId answered {answer}, not a chain id", shown(urls))).into())
}

/// Endpoints as messages show them: an API key in a URL is left out.
pub fn shown(urls: &[String]) -> String {
    urls.iter().map(|u| lite_node_core::url::redact_rpc_url(u)).collect::<Vec<_>>().join(", ")
}
