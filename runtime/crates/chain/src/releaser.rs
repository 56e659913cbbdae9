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
//! it is released (an RPC more than `max_source_lag` away from the others'
//! median — behind, or ahead: another fork, a wrong node — or frozen is
//! left out, and named; no single RPC carries the releases off). A source
//! reorganisation deeper than `finality` under an epoch released is named. A transaction not mined within
//! `replace_after` is sent again under its nonce with higher fees, so only
//! one of the two can be mined.
//!
//! **One release in flight.** The release this process sent is kept across
//! a failed step (a receipt that could not be read, an RPC away) and waited
//! for again, never sent anew under the next nonce. And whatever this
//! process remembers, the chain says whether a transaction of its key is
//! waiting (more `pending` than `latest` transactions): one sent before a
//! restart, or by another process with the key. Then nothing new is sent —
//! a node that estimates at `latest`, as geth does, would take a second
//! release under the next nonce, which can only revert, or wait forever
//! behind a first one priced out — and after `replace_after` the waiting
//! one is replaced under its own nonce by the next release, priced from
//! the gas price now and raised until the node takes it. No fee passes
//! `--max-fee-gwei`, the first transaction's included.

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
    /// A source RPC further than this from the others' median (behind or
    /// ahead) is left out.
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
    /// Not used this step: it failed, is frozen, or is more than
    /// `max_source_lag` from the others' median.
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
    /// When `last_released_end` last moved (Unix seconds), and how often it
    /// has moved (a moving average, seconds).
    pub last_release_at: Option<u64>,
    pub released_every_secs: Option<f64>,
    /// Why the market is not being released (`/health` 503): epochs due and
    /// none released for several epoch-lengths.
    pub stalled: Option<String>,
    /// A source reorganisation deeper than `--finality` under a released
    /// epoch (`/health` 503 until the releaser is restarted).
    pub reorged: Option<String>,
}

/// The releaser's `/health` (200 unless its last step failed, the state as
/// JSON) and `/metrics`, for `lite_node_core::status::serve`.
pub struct ReleaserStatus(pub Arc<Mutex<ReleaserState>>);

impl lite_node_core::status::Status for ReleaserStatus {
    fn health(&self) -> (bool, serde_json::Value) {
        let s = self.0.lock().expect("not poisoned").clone();
        (s.error.is_none() && s.stalled.is_none() && s.reorged.is_none(), serde_json::to_value(s).unwrap_or_default())
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
            .gauge(
                "lite_node_releaser_up",
                "1 unless the last step failed or releases stalled.",
                Some(u64::from(s.error.is_none() && s.stalled.is_none())),
            )
            .gauge(
                "lite_node_releaser_seconds_since_release",
                "Seconds since the last released end moved.",
                s.last_release_at.map(|at| crate::releaser::now_secs().saturating_sub(at)),
            )
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
    /// The release this process sent and has not seen mined.
    in_flight: Mutex<Option<InFlight>>,
    /// A transaction of this key found waiting that this process did not
    /// send: its nonce, since when, and the last attempt to replace it.
    foreign: Mutex<Option<(u64, tokio::time::Instant, Option<crate::tx::Prepared>)>>,
    /// The last released end seen, and when it moved.
    progress: Mutex<Option<(u64, tokio::time::Instant)>>,
    /// Each source RPC's last head and since when it has stood there.
    heads_seen: Mutex<Vec<Option<(u64, tokio::time::Instant)>>>,
    /// The last epoch this process released: its end block, that block's
    /// hash then, and the epoch id ([`Releaser::check_released`]).
    released: Mutex<Option<(u64, alloy::primitives::B256, u64)>>,
    /// The source RPC, head and released end it was last checked at.
    checked_at: Mutex<Option<(usize, u64, u64)>>,
}

/// A release sent and not seen mined.
#[derive(Clone, Debug)]
struct InFlight {
    tx: crate::tx::Prepared,
    begin: u64,
    end: u64,
    /// The hash of block `end` on the source RPC released against, then.
    end_hash: Option<alloy::primitives::B256>,
    sent_at: tokio::time::Instant,
}

/// A gas limit for a release when the node cannot estimate one (ample:
/// a release costs well under it).
const RELEASE_GAS: u64 = 500_000;

/// A source RPC whose head stood still this long while another's is more
/// than `max_source_lag` above it is frozen, and left out.
const FROZEN_AFTER: Duration = Duration::from_secs(60);

/// [`pick_source`]'s answer.
#[derive(Debug, PartialEq, Eq)]
struct Picked {
    /// Why each RPC that answered is not released against, if it is not.
    left_out: Vec<Option<String>>,
    /// The RPC released against (the lowest head kept) and the highest head kept.
    used: Option<(usize, u64)>,
}

/// Which source RPC an epoch is released against, from each one's head
/// (`Err`: no answer) and how long it has stood still: an RPC frozen (its
/// head still for [`FROZEN_AFTER`] while another is more than `lag` above
/// it) is left out; of the others, one more than `lag` away from their
/// median — ahead (another fork, another chain, a node that is wrong) or
/// behind — is left out, so no single RPC can carry the releases off
/// (with two that disagree, the lower holds them back until it is seen
/// frozen); the lowest head kept is released against, so every RPC kept
/// has the epoch's blocks.
fn pick_source(heads: &[Result<u64, String>], still: &[Option<Duration>], lag: u64) -> Picked {
    let mut left_out: Vec<Option<String>> = vec![None; heads.len()];
    let highest = heads.iter().filter_map(|h| h.as_ref().ok()).max().copied();
    let mut kept: Vec<(usize, u64)> = Vec::new();
    for (i, head) in heads.iter().enumerate() {
        let Ok(h) = head else { continue };
        let stood = still.get(i).copied().flatten().unwrap_or_default();
        if stood >= FROZEN_AFTER && highest.is_some_and(|top| top > h.saturating_add(lag)) {
            left_out[i] = Some(format!(
                "frozen at block {h} for {} s while another RPC is past {}: not answering new blocks",
                stood.as_secs(),
                h.saturating_add(lag)
            ));
        } else {
            kept.push((i, *h));
        }
    }
    let mut sorted: Vec<u64> = kept.iter().map(|(_, h)| *h).collect();
    sorted.sort_unstable();
    let Some(&median) = sorted.get(sorted.len().saturating_sub(1) / 2) else {
        return Picked { left_out, used: None };
    };
    kept.retain(|&(i, h)| {
        let why = if h > median.saturating_add(lag) {
            Some(format!(
                "{} blocks ahead of the others (their median {median}), more than {lag} (--max-source-lag): \
                 another fork or chain, or a node that is wrong",
                h - median
            ))
        } else if h.saturating_add(lag) < median {
            Some(format!(
                "{} blocks behind the others (their median {median}), more than {lag} (--max-source-lag)",
                median - h
            ))
        } else {
            None
        };
        left_out[i] = why;
        left_out[i].is_none()
    });
    let used = kept.iter().min_by_key(|(_, h)| *h).map(|&(i, _)| i);
    let top = kept.iter().map(|(_, h)| *h).max();
    Picked { left_out, used: used.zip(top) }
}

/// How many whole epochs are final on the source chain and not released:
/// after `last` (the last released block), or, before any release, from
/// `first_block` when it is given (not from block 0: a first block past the
/// head has no epoch due, however high the head).
fn due_epochs(final_to: u64, last: u64, first_block: Option<u64>, epoch_size: u64) -> u64 {
    let from = match (last, first_block) {
        (0, Some(first)) => first.max(1) - 1,
        (last, _) => last,
    };
    final_to.saturating_sub(from) / epoch_size.max(1)
}

/// Epochs due and not released past which the releaser is stalled.
const STALLED_EPOCHS: u64 = 3;

pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
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
        let sender = sender.with_max_fee(settings.max_fee_per_gas);
        Self {
            anchor,
            sources,
            sender,
            settings,
            state: Arc::default(),
            in_flight: Mutex::default(),
            foreign: Mutex::default(),
            progress: Mutex::default(),
            heads_seen: Mutex::default(),
            released: Mutex::default(),
            checked_at: Mutex::default(),
        }
    }

    /// Every source RPC's head; the one to release against ([`pick_source`]:
    /// the lowest of those that agree with the others) with its index and,
    /// when it is under the highest of those, why.
    async fn source_head(&self) -> Result<(u64, usize, Option<String>), String> {
        let heads = futures_util::future::join_all(self.sources.iter().map(|(_, rpc)| async move {
            let head = rpc.call_value("eth_blockNumber", json!([])).await.map_err(|e| e.message.to_string())?;
            quantity(&head, "eth_blockNumber")
        }))
        .await;
        // How long each head has stood still.
        let still: Vec<Option<Duration>> = {
            let mut seen = self.heads_seen.lock().expect("not poisoned");
            seen.resize(heads.len(), None);
            heads
                .iter()
                .zip(seen.iter_mut())
                .map(|(head, seen)| match (head, seen.as_ref()) {
                    (Ok(h), Some((was, since))) if was == h => Some(since.elapsed()),
                    (Ok(h), _) => {
                        *seen = Some((*h, tokio::time::Instant::now()));
                        Some(Duration::ZERO)
                    }
                    (Err(_), _) => None,
                })
                .collect()
        };
        let picked = pick_source(&heads, &still, self.settings.max_source_lag);
        let highest = heads.iter().filter_map(|h| h.as_ref().ok()).max().copied();
        let mut seen = Vec::with_capacity(heads.len());
        for (((url, _), head), left_out) in self.sources.iter().zip(&heads).zip(&picked.left_out) {
            let mut rpc = SourceRpc { url: url.clone(), ..SourceRpc::default() };
            if let (Ok(h), Some(top)) = (head, highest) {
                (rpc.head, rpc.behind) = (Some(*h), Some(top - h));
            }
            rpc.left_out = match head {
                Err(e) => Some(e.clone()),
                Ok(_) => left_out.clone(),
            };
            if let Some(why) = &rpc.left_out {
                tracing::warn!("source RPC {url} left out: {why}");
            }
            seen.push(rpc);
        }
        self.note(|st| st.source_rpcs = seen);
        let Some((used, top)) = picked.used else {
            let failures: Vec<String> = self
                .sources
                .iter()
                .zip(&picked.left_out)
                .zip(&heads)
                .filter_map(|(((url, _), left_out), h)| match h {
                    Err(e) => Some(format!("{url}: {e}")),
                    Ok(_) => left_out.as_ref().map(|why| format!("{url}: {why}")),
                })
                .collect();
            return Err(format!("no source RPC to release against ({})", failures.join("; ")));
        };
        let head = *heads[used].as_ref().expect("a used RPC answered");
        let lowest = &self.sources[used].0;
        let behind = (head < top)
            .then(|| format!("source RPC {lowest} is at {head}, {} blocks behind the highest ({top})", top - head));
        Ok((head, used, behind))
    }

    /// Whether the last epoch this process released still ends in the
    /// block it ended in: a source reorganisation deeper than `--finality`
    /// changed what a released epoch covers, which no release can undo —
    /// named (`/health` 503) for the market's operator to raise
    /// `--finality`.
    async fn check_released(&self, used: usize, head: u64) {
        let kept = *self.released.lock().expect("not poisoned");
        let Some((end, hash, epoch_id)) = kept else { return };
        // Once per source head: a reorg moves the head (or the RPC used).
        {
            let mut checked = self.checked_at.lock().expect("not poisoned");
            if *checked == Some((used, head, end)) {
                return;
            }
            *checked = Some((used, head, end));
        }
        let Ok(Some(now)) = self.sources[used].1.block_hash(end).await else { return };
        if now == hash {
            return;
        }
        let why = format!(
            "the source chain reorganised past block {end}, the last of epoch {epoch_id} released by this releaser \
             (its hash was {hash}, now {now}): deeper than --finality {}; the epoch's data changed after its release \
             — raise --finality to the source chain's reorg depth",
            self.settings.finality
        );
        tracing::error!("{why}");
        *self.released.lock().expect("not poisoned") = None;
        self.note(|st| st.reorged = Some(why));
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
        let (head, used, behind) = self.source_head().await?;
        self.check_released(used, head).await;
        let last = self.last_released_end().await?;
        self.note(|st| (st.source_head, st.last_released_end) = (Some(head), Some(last)));
        self.moved(last);
        let final_to = head.saturating_sub(s.finality);
        let due = due_epochs(final_to, last, s.first_block, s.epoch_size);
        let stalled = self.stalled(due);
        if let Some(why) = &stalled
            && self.state.lock().expect("not poisoned").stalled.is_none()
        {
            tracing::error!("releases stalled: {why}");
        }
        self.note(|st| st.stalled = stalled);
        // Our own release, sent by this process before a step failed.
        let kept = self.in_flight.lock().expect("not poisoned").clone();
        if let Some(flight) = kept {
            return self.wait_for(flight).await;
        }
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
        let input = self.release_input(begin, end);
        // A transaction of this key waiting that this process did not send.
        let (mined, pending) = self.sender.nonces().await.map_err(|e| format!("the releaser's nonce: {e}"))?;
        if pending > mined {
            return self.follow_foreign(mined, begin, end, input).await;
        }
        *self.foreign.lock().expect("not poisoned") = None;
        let tx = match self.sender.prepare(s.protocol_state, input).await {
            Ok(tx) => tx,
            // Refused: the range is no longer next (another releaser), or
            // this key may not release.
            Err(TxError::Reverted(why)) => {
                // Taken: mined since we read it, or pending (a node estimates
                // against its pending block), as the contract's reason says.
                if why.contains(NOT_NEXT) || self.last_released_end().await? != last {
                    return Ok(self.raced(begin, end));
                }
                return Err(format!(
                    "ProtocolState refuses releaseEpoch({begin}, {end}) from {}: {why}",
                    self.sender.address()
                ));
            }
            Err(e) => return Err(format!("releaseEpoch({begin}, {end}): {e}")),
        };
        // The hash its last block has now, to tell a deeper reorg later.
        let end_hash = self.sources[used].1.block_hash(end).await.ok().flatten();
        let flight = InFlight { tx, begin, end, end_hash, sent_at: tokio::time::Instant::now() };
        // Kept before it is sent: a failed send is sent again, not forgotten.
        *self.in_flight.lock().expect("not poisoned") = Some(flight.clone());
        self.sender.broadcast(&flight.tx).await.map_err(|e| format!("releaseEpoch({begin}, {end}): {e}"))?;
        self.wait_for(flight).await
    }

    /// The call data of `releaseEpoch(begin, end)` for this market.
    fn release_input(&self, begin: u64, end: u64) -> Bytes {
        let call = releaseEpochCall {
            dataMarketAddress: self.settings.data_market,
            begin: U256::from(begin),
            end: U256::from(end),
        };
        call.abi_encode().into()
    }

    /// A range someone else's transaction (or an earlier one of ours)
    /// released.
    fn raced(&self, begin: u64, end: u64) -> Step {
        self.note(|st| st.raced += 1);
        Step::Raced { begin, end }
    }

    /// Waits for the release in flight to be mined, replacing it under its
    /// nonce with higher fees when it is not within `replace_after` (never
    /// past the fee cap). Kept in flight until it is mined or its range is
    /// released by another transaction.
    async fn wait_for(&self, mut flight: InFlight) -> Result<Step, String> {
        let s = &self.settings;
        let (begin, end) = (flight.begin, flight.end);
        let done = |step: Step| {
            *self.in_flight.lock().expect("not poisoned") = None;
            Ok(step)
        };
        // The receipt is looked for at once, then less and less often (a
        // chain that mines on arrival answers the first look).
        let mut pause = Duration::from_millis(10);
        loop {
            if let Some(receipt) = self.sender.receipt(flight.tx.hash).await.map_err(|e| e.message.to_string())? {
                if !receipt.success {
                    // Mined after another releaser's: the contract refused ours.
                    return done(self.raced(begin, end));
                }
                let epoch_id = self.view(currentEpochIdCall { dataMarketAddress: s.data_market }).await?;
                let epoch_id = u64::try_from(epoch_id).unwrap_or(u64::MAX);
                self.note(|st| {
                    st.released_here += 1;
                    (st.last_released_end, st.epochs_released) = (Some(end), Some(epoch_id));
                });
                self.moved(end);
                if let Some(hash) = flight.end_hash {
                    *self.released.lock().expect("not poisoned") = Some((end, hash, epoch_id));
                }
                return done(Step::Released { epoch_id, begin, end, block: receipt.block_number });
            }
            if flight.sent_at.elapsed() >= s.replace_after {
                // An earlier transaction of ours (same nonce) may have been
                // mined, or another releaser's: the chain says which range is next.
                if self.last_released_end().await? >= end {
                    return done(self.raced(begin, end));
                }
                let new = match self
                    .sender
                    .prepare_replacing(s.protocol_state, self.release_input(begin, end), &flight.tx)
                    .await
                {
                    Ok(new) => new,
                    Err(TxError::Reverted(_)) => return done(self.raced(begin, end)),
                    Err(e) => return Err(format!("replacing releaseEpoch({begin}, {end}): {e}")),
                };
                if !new.outbids(&flight.tx) {
                    let why = format!(
                        "releaseEpoch({begin}, {end}) ({}) is not mined at {} wei per gas, and a replacement would \
                         be over the cap (--max-fee-gwei): waiting for it",
                        flight.tx.hash, flight.tx.max_fee
                    );
                    tracing::warn!("{why}");
                    self.note(|st| st.waiting = Some(why));
                    flight.sent_at = tokio::time::Instant::now();
                    continue;
                }
                let old = std::mem::replace(&mut flight.tx, new);
                flight.sent_at = tokio::time::Instant::now();
                *self.in_flight.lock().expect("not poisoned") = Some(flight.clone());
                if let Err(e) = self.sender.broadcast(&flight.tx).await {
                    // Not taken: the old one is still the one waiting.
                    flight.tx = old;
                    *self.in_flight.lock().expect("not poisoned") = Some(flight.clone());
                    return Err(format!("replacing releaseEpoch({begin}, {end}): {e}"));
                }
                self.note(|st| st.replaced += 1);
                tracing::warn!(
                    "releaseEpoch({begin}, {end}) not mined in {} s: sent again as {} with higher fees",
                    s.replace_after.as_secs(),
                    flight.tx.hash
                );
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// A transaction of this key is waiting under nonce `mined` that this
    /// process did not send (a previous process's, before a restart, or
    /// another's with the key): nothing new is sent. Once it has waited
    /// `replace_after`, the release of `begin..=end` takes its place under
    /// that nonce, priced now and raised until the node takes it.
    async fn follow_foreign(&self, mined: u64, begin: u64, end: u64, input: Bytes) -> Result<Step, String> {
        let s = &self.settings;
        let (since, last_try) = {
            let mut foreign = self.foreign.lock().expect("not poisoned");
            match &*foreign {
                Some((nonce, since, last)) if *nonce == mined => (*since, last.clone()),
                _ => {
                    *foreign = Some((mined, tokio::time::Instant::now(), None));
                    (tokio::time::Instant::now(), None)
                }
            }
        };
        let waited = since.elapsed();
        if waited < s.replace_after {
            let why = format!(
                "a transaction of {} (nonce {mined}) is waiting, sent before this releaser started or by another \
                 process with its key: waiting for it ({} s of {} before it is replaced)",
                self.sender.address(),
                waited.as_secs(),
                s.replace_after.as_secs()
            );
            self.note(|st| st.waiting = Some(why));
            tokio::time::sleep(Duration::from_millis(500)).await;
            return Ok(Step::Waiting);
        }
        let tx = self
            .sender
            .prepare_at(s.protocol_state, input, mined, RELEASE_GAS, last_try.as_ref())
            .await
            .map_err(|e| format!("replacing the waiting transaction (nonce {mined}): {e}"))?;
        if last_try.as_ref().is_some_and(|old| !tx.outbids(old)) {
            let why = format!(
                "a transaction of {} (nonce {mined}) is waiting, and outbidding it would be over the cap \
                 (--max-fee-gwei): waiting for it",
                self.sender.address()
            );
            self.note(|st| st.waiting = Some(why));
            tokio::time::sleep(Duration::from_millis(500)).await;
            return Ok(Step::Waiting);
        }
        *self.foreign.lock().expect("not poisoned") = Some((mined, since, Some(tx.clone())));
        match self.sender.broadcast(&tx).await {
            Ok(()) => {}
            // Its fees are unknown: raised on the next try.
            Err(e) => {
                return Err(format!(
                    "replacing the waiting transaction (nonce {mined}) with releaseEpoch({begin}, {end}): {e}; \
                     raised on the next try"
                ));
            }
        }
        self.note(|st| st.replaced += 1);
        tracing::warn!(
            "a transaction of {} (nonce {mined}) waited {} s: replaced by releaseEpoch({begin}, {end}) as {}",
            self.sender.address(),
            waited.as_secs(),
            tx.hash
        );
        *self.foreign.lock().expect("not poisoned") = None;
        let flight = InFlight { tx, begin, end, end_hash: None, sent_at: tokio::time::Instant::now() };
        *self.in_flight.lock().expect("not poisoned") = Some(flight.clone());
        self.wait_for(flight).await
    }

    /// Notes the released end `end` (seen moving or not).
    fn moved(&self, end: u64) {
        let mut progress = self.progress.lock().expect("not poisoned");
        let now = tokio::time::Instant::now();
        match *progress {
            Some((last, at)) if end > last => {
                let every = now.duration_since(at).as_secs_f64();
                self.note(|st| {
                    st.last_release_at = Some(now_secs());
                    st.released_every_secs = Some(st.released_every_secs.map_or(every, |e| e * 0.8 + every * 0.2));
                });
                *progress = Some((end, now));
            }
            None => {
                self.note(|st| st.last_release_at = Some(now_secs()));
                *progress = Some((end, now));
            }
            _ => {}
        }
    }

    /// Whether releases stalled: [`STALLED_EPOCHS`] or more epochs due on the
    /// source chain and none released for as many epoch-lengths (at least a
    /// minute), or none for that long while the source head stands still (a
    /// frozen source RPC). `None`: releasing.
    fn stalled(&self, due: u64) -> Option<String> {
        let (_, at) = (*self.progress.lock().expect("not poisoned"))?;
        let every = self.state.lock().expect("not poisoned").released_every_secs;
        let quiet = at.elapsed().as_secs_f64();
        if quiet < (every.unwrap_or(0.0) * STALLED_EPOCHS as f64).max(60.0) {
            return None;
        }
        let before = every.map(|e| format!(" (one every {e:.0} s before)")).unwrap_or_default();
        if due >= STALLED_EPOCHS {
            Some(format!(
                "{due} epochs are due on the source chain and none was released for {quiet:.0} s{before}: see \
                 `waiting` and `error`"
            ))
        } else {
            // Without a history of releases a quiet source is not told apart.
            every.map(|_| {
                format!("no epoch released for {quiet:.0} s{before} and the source head is not moving: is the source RPC frozen?")
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn releaser() -> Releaser {
        let io = crate::IoRuntime::new().unwrap();
        let rpc =
            Arc::new(HttpRpc::new("anchor", vec!["http://127.0.0.1:9".into()], Duration::from_secs(1), io).unwrap());
        let sender = TxSender::new(rpc.clone(), &[7u8; 32], 1).unwrap();
        let settings = ReleaserSettings {
            protocol_state: Address::ZERO,
            data_market: Address::ZERO,
            epoch_size: 4,
            finality: 2,
            first_block: None,
            replace_after: Duration::from_secs(60),
            max_source_lag: 64,
            max_fee_per_gas: None,
        };
        Releaser::new(rpc.clone(), vec![("source".into(), rpc)], sender, settings)
    }

    /// Issue 55, item 9: no single source RPC carries the releases off. One
    /// far ahead of the others (another fork, a wrong node) is left out, as
    /// is one far behind; of two that disagree the lower holds releases back
    /// until it is seen frozen; within the lag the lowest is used.
    #[test]
    fn a_source_rpc_far_ahead_of_the_others_is_left_out_not_followed() {
        let still = |secs: &[u64]| secs.iter().map(|&s| Some(Duration::from_secs(s))).collect::<Vec<_>>();
        let heads = |h: &[u64]| h.iter().map(|&h| Ok(h)).collect::<Vec<Result<u64, String>>>();
        let p = pick_source(&heads(&[20, 20, 200]), &still(&[0, 0, 0]), 64);
        assert_eq!(p.used, Some((0, 20)));
        assert!(p.left_out[2].as_deref().unwrap().contains("180 blocks ahead of the others"), "{p:?}");
        let p = pick_source(&heads(&[20, 200]), &still(&[0, 0]), 64);
        assert_eq!(p.used, Some((0, 20)), "two that disagree: the lower, until it is seen frozen");
        let p = pick_source(&heads(&[20, 200]), &still(&[61, 0]), 64);
        assert_eq!(p.used, Some((1, 200)), "the lower stood still a minute: frozen");
        assert!(p.left_out[0].as_deref().unwrap().contains("frozen at block 20"), "{p:?}");
        let p = pick_source(&heads(&[120, 200, 201]), &still(&[0, 0, 0]), 64);
        assert_eq!(p.used, Some((1, 201)));
        assert!(p.left_out[0].as_deref().unwrap().contains("80 blocks behind the others"), "{p:?}");
        let p = pick_source(&heads(&[190, 200]), &still(&[0, 0]), 64);
        assert_eq!(p.used, Some((0, 200)), "within the lag: the lowest, the highest kept beside it");
        let p = pick_source(&[Err("down".into()), Ok(5)], &[None, Some(Duration::ZERO)], 64);
        assert_eq!(p.used, Some((1, 5)));
        let p = pick_source(&heads(&[5, 10]), &still(&[100, 0]), u64::MAX);
        assert_eq!(p.used, Some((0, 10)), "no lag is too much: the lowest");
    }

    /// Issue 55, item 11: epochs due before the first release count from
    /// `--first-block`, not from block 0.
    #[test]
    fn epochs_due_before_the_first_release_count_from_the_first_block() {
        assert_eq!(due_epochs(100, 0, Some(500), 4), 0, "a first block past the head: none due");
        assert_eq!(due_epochs(100, 0, Some(81), 4), 5, "blocks 81-100");
        assert_eq!(due_epochs(100, 0, None, 4), 25);
        assert_eq!(due_epochs(100, 80, Some(1), 4), 5, "after a release: from it");
    }

    /// Releases every 2 s, then none: past three epoch-lengths and a minute
    /// the releaser is stalled — epochs due named, or, with none due, a
    /// source head standing still — and `/health` says so (503).
    #[tokio::test(start_paused = true)]
    async fn releases_that_stop_are_a_stalled_releaser_on_health() {
        use lite_node_core::status::Status;
        let r = releaser();
        for end in [4, 8, 12, 16] {
            r.moved(end);
            tokio::time::advance(Duration::from_secs(2)).await;
        }
        assert_eq!(r.stalled(5), None, "two seconds since the last");
        tokio::time::advance(Duration::from_secs(59)).await;
        let due = r.stalled(5).expect("stalled");
        assert!(due.contains("5 epochs are due") && due.contains("one every 2 s"), "{due}");
        let frozen = r.stalled(0).expect("stalled");
        assert!(frozen.contains("is the source RPC frozen"), "{frozen}");
        r.note(|st| st.stalled = Some(due));
        let (healthy, body) = ReleaserStatus(r.state.clone()).health();
        assert!(!healthy && body["stalled"].as_str().is_some(), "{body}");
        // A release again: not stalled.
        r.moved(20);
        assert_eq!(r.stalled(5), None);
    }
}
