//! The epoch releaser: turns the source chain's blocks into `EpochReleased`
//! on the anchor chain for one data market (`lite-node market release`).
//!
//! It keeps nothing of its own: each step reads the contract's
//! `lastReleasedEnd`, so a restarted releaser resumes where the chain says,
//! and the contract takes only `begin` = last end + 1, so two releasers (or
//! a restart racing its own last transaction) can neither release a range
//! twice nor leave a hole — the loser's call is refused, and it follows.
//! An epoch is `epoch_size` source blocks, released once its last block is
//! `finality` blocks under the source head — the lowest head of the
//! market's source RPCs, so every operator's RPC has an epoch's blocks when
//! it is released (an RPC more than `max_source_lag` behind the others is
//! left out, and named, rather than holding the market back). A transaction not mined within
//! `replace_after` is sent again under its nonce with higher fees, so only
//! one of the two can be mined.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::{
    primitives::{Address, Bytes, U256},
    sol_types::SolCall,
};
use lite_node_protocol::contracts::{currentEpochIdCall, lastReleasedEndCall, releaseEpochCall};
use serde_json::json;

use crate::{HttpRpc, TxError, TxSender};

/// What a releaser is told.
#[derive(Clone, Debug)]
pub struct ReleaserSettings {
    pub protocol_state: Address,
    pub data_market: Address,
    /// Source blocks per epoch (at least 1).
    pub epoch_size: u64,
    /// Blocks under the source head an epoch's last block must be.
    pub finality: u64,
    /// The first epoch's first block, when nothing is released yet
    /// (default: the newest final epoch's).
    pub first_block: Option<u64>,
    /// How long a release may stay unmined before it is replaced.
    pub replace_after: Duration,
    /// A source RPC further behind the highest than this is left out.
    pub max_source_lag: u64,
    /// The highest max fee per gas (wei) a replacement may offer; at the
    /// cap, the release in flight is waited for instead.
    pub max_fee_per_gas: Option<u128>,
}

/// One source RPC as the last step saw it.
#[derive(Clone, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceRpc {
    /// The endpoint, an API key in it left out.
    pub url: String,
    pub head: Option<u64>,
    /// Blocks under the highest head the RPCs answered.
    pub behind: Option<u64>,
    /// Not used this step: it failed, or is more than `max_source_lag` behind.
    pub left_out: Option<String>,
}

/// What the releaser last saw and did (its `/health`).
#[derive(Clone, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaserState {
    /// The head epochs are released against: the lowest of the source RPCs used.
    pub source_head: Option<u64>,
    pub source_rpcs: Vec<SourceRpc>,
    pub last_released_end: Option<u64>,
    pub epochs_released: Option<u64>,
    /// Why no epoch is due (the source chain is not far enough yet).
    pub waiting: Option<String>,
    /// The last step's failure, until a step succeeds.
    pub error: Option<String>,
    /// Releases this process's transactions made.
    pub released_here: u64,
    /// Stuck transactions replaced.
    pub replaced: u64,
    /// Ranges another releaser released first.
    pub raced: u64,
}

/// The releaser's `/health` (200 unless its last step failed, the state as
/// JSON) and `/metrics`, for `lite_node_core::status::serve`.
pub struct ReleaserStatus(pub Arc<Mutex<ReleaserState>>);

impl lite_node_core::status::Status for ReleaserStatus {
    fn health(&self) -> (bool, serde_json::Value) {
        let s = self.0.lock().expect("not poisoned").clone();
        (s.error.is_none(), serde_json::to_value(s).unwrap_or_default())
    }

    fn metrics(&self) -> Option<String> {
        let s = self.0.lock().expect("not poisoned").clone();
        let mut g = lite_node_core::status::Gauges::default();
        g.gauge("lite_node_releaser_source_head", "The source chain's newest block.", s.source_head)
            .gauge("lite_node_releaser_last_released_end", "The last source block released.", s.last_released_end)
            .gauge("lite_node_releaser_epochs_released", "The market's current epoch id.", s.epochs_released)
            .gauge(
                "lite_node_releaser_lag_blocks",
                "Source blocks not released yet.",
                s.source_head.zip(s.last_released_end).map(|(h, l)| h.saturating_sub(l)),
            )
            .gauge("lite_node_releaser_released_here", "Epochs this process released.", Some(s.released_here))
            .gauge("lite_node_releaser_replaced", "Stuck transactions replaced.", Some(s.replaced))
            .gauge("lite_node_releaser_raced", "Ranges released by another transaction.", Some(s.raced))
            .gauge("lite_node_releaser_up", "1 unless the last step failed.", Some(u64::from(s.error.is_none())))
            .labelled(
                "lite_node_releaser_source_rpc_behind",
                "Blocks a source RPC is under the highest.",
                "url",
                s.source_rpcs.iter().filter_map(|rpc| Some((rpc.url.clone(), rpc.behind?))),
            );
        Some(g.text())
    }
}

/// What one step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Our transaction released `begin..=end` as epoch `epoch_id`.
    /// `block`: the anchor block the release is in.
    Released { epoch_id: u64, begin: u64, end: u64, block: u64 },
    /// The next epoch is not final on the source chain yet.
    Waiting,
    /// The range was released, but not by this step's last transaction:
    /// by another releaser, or by an earlier transaction of ours that a
    /// replacement did not beat. Nothing was released twice.
    Raced { begin: u64, end: u64 },
}

/// ProtocolState's reason for a range that is not the next one.
const NOT_NEXT: &str = "begin must be last end + 1";

pub struct Releaser {
    anchor: Arc<HttpRpc>,
    /// Each source endpoint on its own, with how it is shown.
    sources: Vec<(String, Arc<HttpRpc>)>,
    sender: TxSender,
    settings: ReleaserSettings,
    pub state: Arc<Mutex<ReleaserState>>,
}

fn quantity(v: &serde_json::Value, what: &str) -> Result<u64, String> {
    lite_node_protocol::quantity::quantity(v).map_err(|e| format!("{what}: {e}"))
}

impl Releaser {
    /// `sources`: each source RPC on its own (an [`HttpRpc`] of one URL) and
    /// the URL as messages show it.
    pub fn new(
        anchor: Arc<HttpRpc>,
        sources: Vec<(String, Arc<HttpRpc>)>,
        sender: TxSender,
        settings: ReleaserSettings,
    ) -> Self {
        Self { anchor, sources, sender, settings, state: Arc::default() }
    }

    /// Every source RPC's head; the one to release against (the lowest
    /// within `max_source_lag` of the highest) and, when it is under the
    /// highest, why.
    async fn source_head(&self) -> Result<(u64, Option<String>), String> {
        let heads = futures_util::future::join_all(self.sources.iter().map(|(_, rpc)| async move {
            let head = rpc.call_value("eth_blockNumber", json!([])).await.map_err(|e| e.message.to_string())?;
            quantity(&head, "eth_blockNumber")
        }))
        .await;
        let highest = heads.iter().filter_map(|h| h.as_ref().ok()).max().copied();
        let mut seen = Vec::with_capacity(heads.len());
        let mut used: Option<(u64, &str)> = None;
        for ((url, _), head) in self.sources.iter().zip(&heads) {
            let mut rpc = SourceRpc { url: url.clone(), ..SourceRpc::default() };
            match (head, highest) {
                (Ok(h), Some(top)) => {
                    (rpc.head, rpc.behind) = (Some(*h), Some(top - h));
                    if top - h > self.settings.max_source_lag {
                        rpc.left_out = Some(format!(
                            "{} blocks behind, more than {} (--max-source-lag)",
                            top - h,
                            self.settings.max_source_lag
                        ));
                    } else if used.is_none_or(|(u, _)| *h < u) {
                        used = Some((*h, url));
                    }
                }
                (Err(e), _) => rpc.left_out = Some(e.clone()),
                (Ok(_), None) => unreachable!("a head was answered"),
            }
            if let Some(why) = &rpc.left_out {
                tracing::warn!("source RPC {url} left out: {why}");
            }
            seen.push(rpc);
        }
        self.note(|st| st.source_rpcs = seen);
        let (Some((head, lowest)), Some(top)) = (used, highest) else {
            let failures: Vec<String> = self
                .sources
                .iter()
                .zip(&heads)
                .filter_map(|((url, _), h)| h.as_ref().err().map(|e| format!("{url}: {e}")))
                .collect();
            return Err(format!("no source RPC answers ({})", failures.join("; ")));
        };
        let behind = (head < top)
            .then(|| format!("source RPC {lowest} is at {head}, {} blocks behind the highest ({top})", top - head));
        Ok((head, behind))
    }

    async fn view<C: SolCall>(&self, call: C) -> Result<C::Return, String> {
        self.anchor.view(self.settings.protocol_state, &call).await
    }

    async fn last_released_end(&self) -> Result<u64, String> {
        let last = self.view(lastReleasedEndCall { dataMarketAddress: self.settings.data_market }).await?;
        u64::try_from(last).map_err(|_| format!("lastReleasedEnd {last} is past u64"))
    }

    fn note(&self, f: impl FnOnce(&mut ReleaserState)) {
        f(&mut self.state.lock().expect("not poisoned"));
    }

    /// Releases the next epoch if it is due, waiting for its transaction
    /// (replacing it if it is stuck); the error says what failed.
    pub async fn step(&self) -> Result<Step, String> {
        let result = self.try_step().await;
        self.note(|s| s.error = result.as_ref().err().cloned());
        result
    }

    async fn try_step(&self) -> Result<Step, String> {
        let s = &self.settings;
        let (head, behind) = self.source_head().await?;
        let last = self.last_released_end().await?;
        self.note(|st| (st.source_head, st.last_released_end) = (Some(head), Some(last)));
        let final_to = head.saturating_sub(s.finality);
        let begin = match (last, s.first_block) {
            (0, Some(first)) => first.max(1),
            (0, None) => final_to.saturating_sub(s.epoch_size - 1).max(1),
            (last, _) => last + 1,
        };
        let end = begin + s.epoch_size - 1;
        if end > final_to {
            let mut why = format!(
                "blocks {begin}-{end} are next: the source head is {head}, final up to {final_to} ({} blocks of \
                 finality)",
                s.finality
            );
            if let Some(behind) = behind {
                why.push_str(&format!("; {behind}: an epoch is released once every source RPC has its blocks"));
            }
            self.note(|st| st.waiting = Some(why));
            return Ok(Step::Waiting);
        }
        self.note(|st| st.waiting = None);
        let input: Bytes =
            releaseEpochCall { dataMarketAddress: s.data_market, begin: U256::from(begin), end: U256::from(end) }
                .abi_encode()
                .into();
        let raced = || {
            self.note(|st| st.raced += 1);
            Ok(Step::Raced { begin, end })
        };
        let mut tx = match self.sender.prepare(s.protocol_state, input.clone()).await {
            Ok(tx) => tx,
            // Refused: the range is no longer next (another releaser), or
            // this key may not release.
            Err(TxError::Reverted(why)) => {
                // Taken: mined since we read it, or pending (a node estimates
                // against its pending block), as the contract's reason says.
                if why.contains(NOT_NEXT) || self.last_released_end().await? != last {
                    return raced();
                }
                return Err(format!(
                    "ProtocolState refuses releaseEpoch({begin}, {end}) from {}: {why}",
                    self.sender.address()
                ));
            }
            Err(e) => return Err(format!("releaseEpoch({begin}, {end}): {e}")),
        };
        self.sender.broadcast(&tx).await.map_err(|e| format!("releaseEpoch({begin}, {end}): {e}"))?;
        let mut sent_at = tokio::time::Instant::now();
        // The receipt is looked for at once, then less and less often (a
        // chain that mines on arrival answers the first look).
        let mut pause = Duration::from_millis(10);
        loop {
            if let Some(receipt) = self.sender.receipt(tx.hash).await.map_err(|e| e.message.to_string())? {
                if !receipt.success {
                    // Mined after another releaser's: the contract refused ours.
                    return raced();
                }
                let epoch_id = self.view(currentEpochIdCall { dataMarketAddress: s.data_market }).await?;
                let epoch_id = u64::try_from(epoch_id).unwrap_or(u64::MAX);
                self.note(|st| {
                    st.released_here += 1;
                    (st.last_released_end, st.epochs_released) = (Some(end), Some(epoch_id));
                });
                return Ok(Step::Released { epoch_id, begin, end, block: receipt.block_number });
            }
            if sent_at.elapsed() >= s.replace_after {
                // An earlier transaction of ours (same nonce) may have been
                // mined, or another releaser's: the chain says which range is next.
                if self.last_released_end().await? >= end {
                    return raced();
                }
                let new = match self.sender.prepare_replacing(s.protocol_state, input.clone(), &tx).await {
                    Ok(new) => new,
                    Err(TxError::Reverted(_)) => return raced(),
                    Err(e) => return Err(format!("replacing releaseEpoch({begin}, {end}): {e}")),
                };
                if let Some(cap) = s.max_fee_per_gas
                    && new.max_fee > cap
                {
                    let why = format!(
                        "releaseEpoch({begin}, {end}) ({}) is not mined, and a replacement would pay {} wei per gas, \
                         over the cap of {cap} (--max-fee-gwei): waiting for it",
                        tx.hash, new.max_fee
                    );
                    tracing::warn!("{why}");
                    self.note(|st| st.waiting = Some(why));
                    sent_at = tokio::time::Instant::now();
                    continue;
                }
                tx = new;
                self.sender.broadcast(&tx).await.map_err(|e| format!("replacing releaseEpoch({begin}, {end}): {e}"))?;
                self.note(|st| st.replaced += 1);
                tracing::warn!(
                    "releaseEpoch({begin}, {end}) not mined in {} s: sent again as {} with higher fees",
                    s.replace_after.as_secs(),
                    tx.hash
                );
                sent_at = tokio::time::Instant::now();
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}
