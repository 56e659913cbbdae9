//! The validator on the anchor chain (docs/protocol.md §12): each epoch whose
//! level-1 batch is written (`finalized:{epochId}`, which queues it on
//! `onchain:pending`) is put on chain and attested, and the validator
//! follows it until the contract finalizes it.
//!
//! - **Who submits the batch.** The validators registered for the data
//!   market at the epoch's release block (`getValidators`), sorted by
//!   address; the one at index `epochId mod n` has rank 0, the next rank 1,
//!   and so on around. Rank `r` submits once the anchor head is at least
//!   `window close + r × fallback_blocks` and no batch is on chain, so a
//!   submitter that is down is replaced after `fallback_blocks`; the
//!   contract takes one batch an epoch. The batch carries the submitter's
//!   root and counts as its attestation.
//! - **Every validator attests its own root,** once an epoch: the contract
//!   refuses a second, and the transaction's hash is kept in the epoch's
//!   state before it is sent, so a restart waits for it instead of sending
//!   another.
//! - **A batch whose root lost** (the validators that attested other roots
//!   are at least half of them) is replaced by a validator whose own root
//!   has more than half of the attestations: the contract finalizes it at
//!   once. An epoch is finalized once, whoever submits.
//! - **An epoch this validator did not watch whole** — its intake was not
//!   listening without a break from the release to the close of its window
//!   (`intake:since`, kept by the gateway: the anchor block since which it
//!   has listened, set when it starts or a gossip peer connects again,
//!   removed when none is connected; the event monitor copies it into the
//!   epoch's state as it closes the window) — is neither submitted nor
//!   attested by it (`onchain_status` `skipped`): its batch may lack
//!   submissions it never received.
//!
//! The epoch's state records what happened: `onchain_status` (`pending`,
//! `waiting`, `batch_sent`, `attestation_sent`, `submitted`, `attested`,
//! `finalized`, `skipped`, `not_finalized`), `onchain_tx_hash` and
//! `onchain_block_number` and `onchain_gas_used` (this validator's last
//! transaction, the block it was mined in, its gas), `onchain_finalized_block`
//! and `onchain_finalized_tx` and `onchain_finalized_root` (where the chain
//! finalized it, and with which root), `onchain_error`.
//!
//! Transactions are signed in this process and sent raw
//! (`lite_node_chain::TxSender`); the key is never logged.
//!
//! One process a validator runs this (a Redis lease, `onchain:lease`): two
//! would race for the account's nonces. A process started again on the same
//! host and data dir takes the lease over at once.

use std::{collections::HashMap, sync::Arc, time::Duration};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::SolCall,
};
use lite_node_chain::{Anchor, TxError, TxSender};
use lite_node_protocol::contracts::{
    attestationsForRootCall, attestedRootCall, currentVotesCall, epochBatchCall, finalizeCall,
    getTotalValidatorsCountCall, getValidatorsCall, outvotedCall, storeFinalizedCidsCall, storedCidsCall,
    submitBatchAttestationCall, submitSubmissionBatchCall, unstoredCidsCall,
};
use redis::{AsyncCommands, aio::ConnectionManager};
use serde_json::Value;

use crate::{Market, now_secs};

/// Anchor blocks a submitter's turn lasts before the next in rank may submit.
pub const FALLBACK_BLOCKS: u64 = 5;

/// Anchor blocks after its window closed that an epoch is followed on chain;
/// past them one not finalized is `not_finalized` and left (the gap detector
/// lists it), and a finalized one only has its pairs stored.
pub const FOLLOW_BLOCKS: u64 = 600;

/// Gas one stored (project id, CID) pair costs at most, roughly (measured
/// 111,000 for a project never stored before: docs/protocol.md §12), for
/// sizing parts to the block.
pub const GAS_PER_STORED_PAIR: u64 = 120_000;

/// The most pairs a part carries (the contract's `MAX_BATCH_PROJECTS`).
const MAX_PART: u64 = 2_000;

/// Parts of one epoch sent before their receipts are waited for.
const PARTS_IN_FLIGHT: usize = 16;

/// How long the lease on the on-chain work lasts without renewal.
const LEASE: Duration = Duration::from_secs(15);

const LEASE_LUA: &str = r"
-- KEYS: lease.  ARGV: holder, ms.
local holder = redis.call('GET', KEYS[1])
if holder == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

static LEASE_SCRIPT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| redis::Script::new(LEASE_LUA));

/// Epochs looked at a round: the next ones after the last round's, going
/// round the pending set, so epochs that wait long (a transaction stuck, a
/// chain outage) never keep newer ones from their turn.
const PER_ROUND: usize = 64;

/// What this validator does on chain.
#[derive(Clone)]
pub struct Onchain {
    market: Arc<Market>,
    conn: ConnectionManager,
    anchor: Arc<Anchor>,
    sender: TxSender,
    fallback_blocks: u64,
    instance: String,
    /// Per release block, the validators registered then, sorted.
    validators: Arc<std::sync::Mutex<std::collections::BTreeMap<u64, Vec<Address>>>>,
    /// The last epoch a round looked at.
    cursor: Arc<std::sync::atomic::AtomicU64>,
    /// Pairs per stored part (`None`: sized to the anchor's block gas).
    part_size: Option<usize>,
    /// Whether a finalized epoch's pairs are stored on chain after its root
    /// (the market's `pairsOnChain`): without, an epoch costs the same gas
    /// at 10 projects or 10,000, and its pairs are read from the validators'
    /// bundles, proved against the root.
    pairs_on_chain: bool,
}

impl std::fmt::Debug for Onchain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Onchain").field("from", &self.sender.address()).finish_non_exhaustive()
    }
}

/// What became of one epoch in a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do yet (a transaction in flight, another's turn).
    Wait,
    /// A transaction was sent (its hash).
    Sent(B256),
    /// Done with the epoch (finalized, skipped, or given up).
    Done(&'static str),
}

/// The rank of `me` among `validators` (sorted) for `epoch_id`: 0 submits
/// first. `None` when `me` is not among them.
pub fn rank(validators: &[Address], me: Address, epoch_id: u64) -> Option<u64> {
    let n = validators.len() as u64;
    let index = validators.iter().position(|v| *v == me)? as u64;
    let first = epoch_id % n;
    Some((index + n - first) % n)
}

/// The `bytes32` of a batch's `root` (64 hex digits).
pub fn root_bytes(root: &str) -> Option<B256> {
    root.strip_prefix("0x").unwrap_or(root).parse::<B256>().ok().filter(|r| !r.is_zero())
}

impl Onchain {
    pub fn new(
        market: Arc<Market>,
        conn: ConnectionManager,
        anchor: Arc<Anchor>,
        sender: TxSender,
        fallback_blocks: u64,
    ) -> Self {
        Self {
            market,
            conn,
            anchor,
            sender,
            fallback_blocks,
            instance: crate::queue::instance_id(),
            validators: Default::default(),
            cursor: Default::default(),
            part_size: None,
            pairs_on_chain: true,
        }
    }

    /// Finalizes roots only: no `storeFinalizedCids` (a market whose
    /// manifest says `pairsOnChain: false`).
    pub fn root_only(mut self) -> Self {
        self.pairs_on_chain = false;
        self
    }

    /// Stores finalized pairs `n` at a time instead of sizing parts to the
    /// anchor's block gas.
    pub fn with_part_size(mut self, n: usize) -> Self {
        self.part_size = Some(n.clamp(1, MAX_PART as usize));
        self
    }

    pub fn address(&self) -> Address {
        self.sender.address()
    }

    /// Who holds the lease: the same name for a process started again on
    /// the same host and data dir (which is locked, so only one runs), so a
    /// restart takes over at once instead of waiting out its predecessor's
    /// lease.
    pub fn holding_as(mut self, holder: impl Into<String>) -> Self {
        self.instance = holder.into();
        self
    }

    /// Whether this validator's key is registered for the data market now.
    pub async fn registered(&self) -> Result<bool, String> {
        Ok(self.validators_at(None).await?.contains(&self.address()))
    }

    async fn validators_at(&self, block: Option<u64>) -> Result<Vec<Address>, String> {
        if let Some(b) = block
            && let Some(v) = self.validators.lock().unwrap_or_else(|p| p.into_inner()).get(&b)
        {
            return Ok(v.clone());
        }
        let call = getValidatorsCall { dataMarketAddress: self.anchor.data_market };
        let mut list = match (self.anchor.read(&call, block).await, block) {
            (Ok(list), _) => list,
            // The release block's state pruned (a full node keeps ~128
            // blocks; the window alone is longer): the set now. The turns
            // only order who submits — a validator that misjudges its turn
            // sends a batch the contract refuses, or waits — so this can
            // delay an epoch, never finalize a wrong one.
            (Err(at_release), Some(b)) => {
                tracing::warn!(
                    "getValidators at block {b} (the release): {at_release}; taking today's set for the turns (an \
                     archive anchor RPC keeps them exact)"
                );
                self.anchor.read(&call, None).await.map_err(|e| format!("getValidators: {e}"))?
            }
            (Err(e), None) => return Err(format!("getValidators: {e}")),
        };
        list.sort();
        list.dedup();
        if let Some(b) = block {
            let mut cache = self.validators.lock().unwrap_or_else(|p| p.into_inner());
            cache.insert(b, list.clone());
            while cache.len() > 64 {
                cache.pop_first();
            }
        }
        Ok(list)
    }

    /// Runs rounds every `every` until `stop`, while this process holds the
    /// lease.
    pub async fn run(self, every: Duration, stop: impl std::future::Future<Output = ()> + Send) {
        tracing::info!("on chain: submitting and attesting batches as {}", self.address());
        let work = async {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // None: not looked yet; Some(held).
            let mut holding: Option<bool> = None;
            // The same trouble every tick (Redis refusing writes on a full
            // disk, say) is said once, then every 30 s, not 20 times a second.
            let mut said: Option<(String, tokio::time::Instant)> = None;
            // When the market's validators were last read (at once first).
            let mut registry = tokio::time::Instant::now() - REGISTRY_EVERY;
            let mut warn = |what: String| {
                let again =
                    said.as_ref().is_none_or(|(last, at)| *last != what || at.elapsed() > Duration::from_secs(30));
                if again {
                    tracing::warn!("on chain: {what}; trying again");
                    said = Some((what, tokio::time::Instant::now()));
                }
            };
            loop {
                tick.tick().await;
                match self.lease().await {
                    Ok(true) if holding != Some(true) => {
                        holding = Some(true);
                        tracing::info!("on chain: this process holds the lease");
                    }
                    Ok(true) => {}
                    Ok(false) => {
                        if holding != Some(false) {
                            let holder: Option<String> =
                                self.conn.clone().get(self.market.keys.onchain_lease()).await.unwrap_or(None);
                            let holder = holder.unwrap_or_else(|| "another process".into());
                            let was = if holding == Some(true) { "the lease went to" } else { "the lease is held by" };
                            tracing::warn!(
                                "on chain: {was} {holder} (one process per validator acts on chain); standing by"
                            );
                        }
                        holding = Some(false);
                        continue;
                    }
                    Err(e) => {
                        warn(format!("Redis: {e}"));
                        continue;
                    }
                }
                if registry.elapsed() >= REGISTRY_EVERY {
                    registry = tokio::time::Instant::now();
                    if let Err(e) = self.check_registered().await {
                        warn(e);
                    }
                }
                if let Err(e) = self.round().await {
                    warn(e);
                }
            }
        };
        tokio::select! {
            _ = work => {}
            _ = stop => {}
        }
    }

    /// Whether this validator's key is still one of the market's validators:
    /// one that was removed says so (`onchain:problem`, on `/health`, and in
    /// the log when it changes) instead of reporting healthy while nothing
    /// it attests counts.
    async fn check_registered(&self) -> Result<(), String> {
        let registered = self.registered().await?;
        let mut conn = self.conn.clone();
        let key = self.market.keys.onchain_problem();
        if registered {
            let was: Option<String> = conn.get_del(&key).await.map_err(|e| format!("Redis: {e}"))?;
            if was.is_some() {
                tracing::info!("on chain: {} is a validator of the data market again", self.address());
            }
            return Ok(());
        }
        let problem = format!(
            "this validator's key {} is not a validator of data market {} (removed from getValidators): nothing it \
             attests counts; have the market's owner add it again, or stop this validator",
            self.address(),
            self.anchor.data_market
        );
        let was: Option<String> = conn.get(&key).await.map_err(|e| format!("Redis: {e}"))?;
        if was.is_none() {
            tracing::warn!("on chain: {problem}");
        }
        let ttl = crate::keys::MONITOR_PROBLEM_TTL.as_secs();
        let set: redis::RedisResult<()> = conn.set_ex(&key, &problem, ttl).await;
        set.map_err(|e| format!("Redis: {e}"))
    }

    /// Takes the lease, or extends it when this process holds it (one
    /// script: a lease that lapsed and went to another process is never
    /// extended by this one).
    async fn lease(&self) -> redis::RedisResult<bool> {
        let held: i64 = LEASE_SCRIPT
            .key(self.market.keys.onchain_lease())
            .arg(&self.instance)
            .arg(LEASE.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(held == 1)
    }

    /// One look at every pending epoch, oldest first.
    pub async fn round(&self) -> Result<(), String> {
        let k = &self.market.keys;
        let mut conn = self.conn.clone();
        let cursor = self.cursor.load(std::sync::atomic::Ordering::Relaxed);
        let mut pending: Vec<u64> = conn
            .zrangebyscore_limit(k.onchain_pending(), format!("({cursor}"), "+inf", 0, PER_ROUND as isize)
            .await
            .map_err(|e| format!("Redis: {e}"))?;
        if pending.len() < PER_ROUND {
            // Round again from the oldest.
            let wrapped: Vec<u64> = conn
                .zrangebyscore_limit(k.onchain_pending(), "-inf", cursor, 0, (PER_ROUND - pending.len()) as isize)
                .await
                .map_err(|e| format!("Redis: {e}"))?;
            pending.extend(wrapped);
        }
        if let Some(last) = pending.last() {
            self.cursor.store(*last, std::sync::atomic::Ordering::Relaxed);
        }
        if pending.is_empty() {
            return Ok(());
        }
        let head = self.anchor.head().await.map_err(|e| format!("the anchor's head: {e}"))?;
        for epoch_id in pending {
            // The lease is checked before each epoch: a long round must not
            // go on sending after it went to another process.
            if !self.lease().await.map_err(|e| format!("Redis: {e}"))? {
                return Ok(());
            }
            match self.step(epoch_id, head).await {
                Ok(Step::Done(status)) => {
                    let _: () = conn.zrem(k.onchain_pending(), epoch_id).await.map_err(|e| format!("Redis: {e}"))?;
                    tracing::debug!("epoch {epoch_id}: on chain {status}");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("epoch {epoch_id}: on chain: {e}");
                    self.record(epoch_id, &[("onchain_error", e.as_str())]).await?;
                }
            }
        }
        Ok(())
    }

    async fn record(&self, epoch_id: u64, fields: &[(&str, &str)]) -> Result<(), String> {
        let now = now_secs().to_string();
        let mut all: Vec<(&str, &str)> = fields.to_vec();
        all.push(("last_updated", &now));
        let _: () = self
            .conn
            .clone()
            .hset_multiple(self.market.keys.epoch_state(epoch_id), &all)
            .await
            .map_err(|e| format!("Redis: {e}"))?;
        Ok(())
    }

    /// Where `epoch_id` stands and what this validator does about it now.
    pub async fn step(&self, epoch_id: u64, head: u64) -> Result<Step, String> {
        let k = &self.market.keys;
        let mut conn = self.conn.clone();
        let state: HashMap<String, String> =
            conn.hgetall(k.epoch_state(epoch_id)).await.map_err(|e| format!("Redis: {e}"))?;
        let batch: Option<String> = conn.get(k.finalized(epoch_id)).await.map_err(|e| format!("Redis: {e}"))?;
        let (Some(release_block), Some(batch)) =
            (state.get("release_block").and_then(|b| b.parse::<u64>().ok()), batch)
        else {
            // Its state or batch expired: nothing to put on chain.
            return Ok(Step::Done("expired"));
        };
        let closes = crate::window_closes(release_block, self.market.window_blocks);
        let batch: Value = serde_json::from_str(&batch).map_err(|e| format!("finalized:{epoch_id}: {e}"))?;
        let mine = Mine::from_batch(&batch).ok_or_else(|| format!("finalized:{epoch_id} has no usable root"))?;

        let following = head <= closes.saturating_add(FOLLOW_BLOCKS);
        // A transaction of ours in flight: wait for it.
        if let (Some(status), Some(hash)) = (state.get("onchain_status"), state.get("onchain_tx_hash"))
            && matches!(status.as_str(), "batch_sent" | "attestation_sent" | "finalize_sent")
            && let Ok(hash) = hash.parse::<B256>()
        {
            match self.sender.receipt(hash).await.map_err(|e| format!("the receipt of {hash}: {e}"))? {
                Some(r) if r.success => {
                    // finalize() is called after attesting: attested it stays.
                    let done = if status == "batch_sent" { "submitted" } else { "attested" };
                    tracing::info!("epoch {epoch_id}: {done} on chain in block {} ({hash})", r.block_number);
                    self.record(
                        epoch_id,
                        &[
                            ("onchain_status", done),
                            ("onchain_block_number", &r.block_number.to_string()),
                            ("onchain_gas_used", &r.gas_used.to_string()),
                            ("onchain_error", ""),
                        ],
                    )
                    .await?;
                }
                Some(r) => {
                    let why = format!("transaction {hash} reverted in block {}", r.block_number);
                    tracing::warn!("epoch {epoch_id}: {why}");
                    self.record(epoch_id, &[("onchain_status", "waiting"), ("onchain_error", &why)]).await?;
                }
                // Not waited for past the blocks the epoch is followed.
                None if !following => {}
                None if self.sender.known(hash).await.map_err(|e| format!("transaction {hash}: {e}"))? => {
                    return Ok(Step::Wait);
                }
                None => {
                    tracing::warn!("epoch {epoch_id}: transaction {hash} is unknown to the chain; deciding again");
                    self.record(epoch_id, &[("onchain_status", "waiting")]).await?;
                }
            }
        }

        let dm = self.anchor.data_market;
        let e = U256::from(epoch_id);
        let chain = self
            .anchor
            .read(&epochBatchCall { dataMarketAddress: dm, epochId: e }, None)
            .await
            .map_err(|err| format!("epochBatch: {err}"))?;
        let attested = self
            .anchor
            .read(&attestedRootCall { dataMarketAddress: dm, epochId: e, validator: self.address() }, None)
            .await
            .map_err(|err| format!("attestedRoot: {err}"))?;
        // Past the blocks an epoch is followed, only a finalized one is
        // worked on (its pairs stored, however late: a submitter that died
        // mid-store leaves them to the others); any other is left.
        if !following && !chain.finalized {
            tracing::warn!(
                "epoch {epoch_id}: given up on chain {FOLLOW_BLOCKS} blocks after its window closed (status {})",
                state.get("onchain_status").map_or("none", String::as_str)
            );
            self.record(epoch_id, &[("onchain_status", "not_finalized")]).await?;
            return Ok(Step::Done("not_finalized"));
        }

        if attested.is_zero() {
            // Only an epoch watched whole is vouched for: the intake listened
            // from before its release to its close, without a break.
            let since = state.get("intake_since_at_close").and_then(|s| s.parse::<u64>().ok());
            if let Some(why) = crate::monitor::not_watched_whole(release_block, since) {
                let why = format!("not attested: {why}");
                tracing::warn!("epoch {epoch_id}: {why}");
                self.record(epoch_id, &[("onchain_status", "skipped"), ("onchain_error", &why)]).await?;
                return Ok(Step::Done("skipped"));
            }
        }

        if chain.finalized && attested.is_zero() && following {
            // Finalized without us: our root still goes on record (agreeing,
            // or divergent), as every validator's does.
            tracing::info!("epoch {epoch_id}: finalized already; attesting our root {} for the record", mine.root);
            return self.attest(epoch_id, &chain.batchCid, mine.root).await;
        }
        if chain.finalized {
            if self.pairs_on_chain && chain.root == mine.root && !mine.projects.is_empty() {
                let stored = self
                    .anchor
                    .read(&storedCidsCall { dataMarketAddress: dm, epochId: e }, None)
                    .await
                    .map_err(|err| format!("storedCids: {err}"))?;
                if stored < U256::from(mine.projects.len()) {
                    return self.store(epoch_id, &mine, &state, &chain.submitter, head, release_block).await;
                }
            }
            let by = self.anchor.finalized_by(epoch_id, release_block).await.ok().flatten();
            let (block, tx) = (by.map(|(block, _)| block), by.and_then(|(_, tx)| tx));
            let agreed = if chain.root == mine.root { "our root" } else { "another root than ours" };
            tracing::info!(
                "epoch {epoch_id}: finalized on chain{} with {agreed} (batch {})",
                block.map_or(String::new(), |b| format!(" in block {b}")),
                chain.batchCid
            );
            let block = block.map_or(String::new(), |b| b.to_string());
            let tx = tx.map_or(String::new(), |t| t.to_string());
            let root = chain.root.to_string();
            self.record(
                epoch_id,
                &[
                    ("onchain_status", "finalized"),
                    ("onchain_finalized_block", &block),
                    ("onchain_finalized_tx", &tx),
                    ("onchain_finalized_root", &root),
                    ("onchain_error", ""),
                    ("onchain_parts", ""),
                ],
            )
            .await?;
            return Ok(Step::Done("finalized"));
        }
        if chain.submitter == Address::ZERO {
            let validators = self.validators_at(Some(release_block)).await?;
            let Some(rank) = rank(&validators, self.address(), epoch_id) else {
                return Err(format!(
                    "this validator ({}) was not a registered validator of the data market at block {release_block}",
                    self.address()
                ));
            };
            let turn = closes.saturating_add(rank.saturating_mul(self.fallback_blocks));
            if head < turn {
                self.record(epoch_id, &[("onchain_status", "waiting")]).await?;
                return Ok(Step::Wait);
            }
            return self.submit(epoch_id, &mine, rank).await;
        }
        if attested.is_zero() {
            let what = if chain.root == mine.root { "attesting" } else { "attesting a root other than the batch's" };
            tracing::info!("epoch {epoch_id}: {what} (batch {}, root {})", chain.batchCid, mine.root);
            return self.attest(epoch_id, &chain.batchCid, mine.root).await;
        }
        if chain.root != mine.root && attested == mine.root {
            // Our root against the batch's: replace the batch once ours has
            // more than half of the attestations and the batch's cannot win.
            let lost = self
                .anchor
                .read(&outvotedCall { dataMarketAddress: dm, epochId: e }, None)
                .await
                .map_err(|err| format!("outvoted: {err}"))?;
            let ours = self
                .anchor
                .read(&attestationsForRootCall { dataMarketAddress: dm, epochId: e, root: mine.root }, None)
                .await
                .map_err(|err| format!("attestationsForRoot: {err}"))?;
            let total = self
                .anchor
                .read(&getTotalValidatorsCountCall { dataMarketAddress: dm }, None)
                .await
                .map_err(|err| format!("getTotalValidatorsCount: {err}"))?;
            if lost && ours * U256::from(2) > total {
                tracing::warn!(
                    "epoch {epoch_id}: the batch on chain ({}, root {}) lost to our root {}; replacing it",
                    chain.batchCid,
                    chain.root,
                    mine.root
                );
                return self.submit(epoch_id, &mine, 0).await;
            }
        }
        if chain.root == mine.root && attested == mine.root {
            // The current validators behind the batch's root may be a
            // majority with no attestation left to come (a validator removed
            // since), and only an attestation tries to finalize: anyone may
            // call finalize(), so this one does.
            let votes = self
                .anchor
                .read(&currentVotesCall { dataMarketAddress: dm, epochId: e }, None)
                .await
                .map_err(|err| format!("currentVotes: {err}"))?;
            let total = self
                .anchor
                .read(&getTotalValidatorsCountCall { dataMarketAddress: dm }, None)
                .await
                .map_err(|err| format!("getTotalValidatorsCount: {err}"))?;
            if votes.forRoot * U256::from(2) > total {
                tracing::info!(
                    "epoch {epoch_id}: {} of the {total} current validators attested the batch's root, which is not \
                     finalized; calling finalize()",
                    votes.forRoot
                );
                let call = finalizeCall { dataMarketAddress: dm, epochId: e };
                return self.send(epoch_id, call.abi_encode(), "finalize_sent").await;
            }
        }
        Ok(Step::Wait)
    }

    /// Attests `root` for the epoch's batch `batch_cid`.
    async fn attest(&self, epoch_id: u64, batch_cid: &str, root: B256) -> Result<Step, String> {
        let call = submitBatchAttestationCall {
            dataMarketAddress: self.anchor.data_market,
            batchCid: batch_cid.to_owned(),
            epochId: U256::from(epoch_id),
            finalizedCidsRootHash: root,
        };
        self.send(epoch_id, call.abi_encode(), "attestation_sent").await
    }

    async fn submit(&self, epoch_id: u64, mine: &Mine, rank: u64) -> Result<Step, String> {
        let call = submitSubmissionBatchCall {
            dataMarketAddress: self.anchor.data_market,
            batchCid: mine.cid.clone(),
            epochId: U256::from(epoch_id),
            finalizedCidsRootHash: mine.root,
        };
        tracing::info!(
            "epoch {epoch_id}: submitting the batch {} ({} projects, root {}){}",
            mine.cid,
            mine.projects.len(),
            mine.root,
            if rank > 0 { format!(" as fallback of rank {rank}") } else { String::new() }
        );
        self.send(epoch_id, call.abi_encode(), "batch_sent").await
    }

    /// Stores the pairs of an epoch finalized with our root, in parts of
    /// [`Onchain::part_size`] proved against it: at once when this validator
    /// submitted the batch, else once `fallback_blocks × (rank + 1)` blocks
    /// have passed since it was seen finalized and pairs are still missing.
    /// Parts already stored are left; those sent are kept in the epoch's
    /// `onchain_parts` (first project index → transaction hash) before they
    /// are broadcast, and waited for, so a restart sends none twice.
    async fn store(
        &self,
        epoch_id: u64,
        mine: &Mine,
        state: &HashMap<String, String>,
        submitter: &Address,
        head: u64,
        release_block: u64,
    ) -> Result<Step, String> {
        let seen = match state.get("onchain_finalized_seen").and_then(|s| s.parse::<u64>().ok()) {
            Some(seen) => seen,
            None => {
                self.record(epoch_id, &[("onchain_finalized_seen", &head.to_string())]).await?;
                head
            }
        };
        if *submitter != self.address() {
            let validators = self.validators_at(Some(release_block)).await?;
            let rank = rank(&validators, self.address(), epoch_id).unwrap_or(validators.len() as u64);
            if head < seen.saturating_add((rank + 1).saturating_mul(self.fallback_blocks)) {
                return Ok(Step::Wait);
            }
        }
        // Parts in flight: waited for until each is mined or gone.
        let mut flight: std::collections::BTreeMap<usize, String> =
            state.get("onchain_parts").and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
        let mut waiting = false;
        for (start, hash) in flight.clone() {
            let Ok(h) = hash.parse::<B256>() else {
                flight.remove(&start);
                continue;
            };
            match self.sender.receipt(h).await.map_err(|e| format!("the receipt of {h}: {e}"))? {
                Some(r) => {
                    if !r.success {
                        tracing::warn!("epoch {epoch_id}: storing the part from project {start} reverted ({h})");
                    }
                    flight.remove(&start);
                }
                None if self.sender.known(h).await.map_err(|e| format!("transaction {h}: {e}"))? => waiting = true,
                None => {
                    flight.remove(&start);
                }
            }
        }
        if waiting {
            return Ok(Step::Wait);
        }
        let tree = lite_node_protocol::merkle::Tree::of(mine.projects.iter().map(|(p, c)| (p.as_str(), c.as_str())))
            .map_err(|e| format!("finalized:{epoch_id}: {e}"))?;
        let size = self.part_size().await?;
        let dm = self.anchor.data_market;
        let e = U256::from(epoch_id);
        let mut sent = 0;
        for start in (0..mine.projects.len()).step_by(size) {
            if sent == PARTS_IN_FLIGHT {
                break;
            }
            let part = &mine.projects[start..(start + size).min(mine.projects.len())];
            let ids: Vec<String> = part.iter().map(|(p, _)| p.clone()).collect();
            let missing = self
                .anchor
                .read(&unstoredCidsCall { dataMarketAddress: dm, epochId: e, projectIds: ids.clone() }, None)
                .await
                .map_err(|err| format!("unstoredCids: {err}"))?;
            if missing.is_zero() {
                continue;
            }
            let proof = tree.multiproof(start..start + part.len()).ok_or("a part outside the batch")?;
            let call = storeFinalizedCidsCall {
                dataMarketAddress: dm,
                epochId: e,
                projectIds: ids,
                snapshotCids: part.iter().map(|(_, c)| c.clone()).collect(),
                proof: proof.proof,
                proofFlags: proof.flags,
            };
            let tx = match self.sender.prepare(self.anchor.protocol_state, call.abi_encode().into()).await {
                Ok(tx) => tx,
                Err(TxError::Reverted(why)) => return Err(format!("storing the part from project {start}: {why}")),
                Err(TxError::Rpc(e)) => return Err(format!("preparing the part from project {start}: {e}")),
            };
            flight.insert(start, tx.hash.to_string());
            let parts = serde_json::to_string(&flight).unwrap_or_default();
            self.record(epoch_id, &[("onchain_status", "storing"), ("onchain_parts", &parts)]).await?;
            if let Err(e) = self.sender.broadcast(&tx).await {
                // Perhaps in the pool all the same: looked up next round.
                return Err(format!("sending the part from project {start} ({}): {e}", tx.hash));
            }
            sent += 1;
        }
        if sent > 0 {
            tracing::info!(
                "epoch {epoch_id}: storing its finalized CIDs: {sent} part(s) of up to {size} sent ({} projects)",
                mine.projects.len()
            );
        }
        Ok(Step::Wait)
    }

    /// Projects per `storeFinalizedCids` part: the one given, else what
    /// fits a third of the anchor block's gas limit at
    /// [`GAS_PER_STORED_PAIR`] each.
    async fn part_size(&self) -> Result<usize, String> {
        if let Some(n) = self.part_size {
            return Ok(n);
        }
        let block = self
            .anchor
            .rpc()
            .call_value("eth_getBlockByNumber", serde_json::json!(["latest", false]))
            .await
            .map_err(|e| format!("the anchor's latest block: {e}"))?;
        let limit = lite_node_protocol::quantity::quantity(&block["gasLimit"])
            .map_err(|e| format!("the anchor's latest block has no gasLimit ({e}): {block}"))?;
        Ok(((limit / 3) / GAS_PER_STORED_PAIR).clamp(1, MAX_PART) as usize)
    }

    /// Signs, records the hash (before anything can be mined: a restart
    /// finds it and waits for it instead of sending again), then sends.
    async fn send(&self, epoch_id: u64, input: Vec<u8>, status: &'static str) -> Result<Step, String> {
        let tx = match self.sender.prepare(self.anchor.protocol_state, input.into()).await {
            Ok(tx) => tx,
            // Refused before sending (another validator's transaction got
            // there first, most often): decided again next round.
            Err(TxError::Reverted(why)) => return Err(format!("not sent: {why}")),
            Err(TxError::Rpc(e)) => return Err(format!("preparing the transaction: {e}")),
        };
        let hash = tx.hash.to_string();
        self.record(epoch_id, &[("onchain_status", status), ("onchain_tx_hash", &hash), ("onchain_error", "")]).await?;
        match self.sender.broadcast(&tx).await {
            Ok(()) => Ok(Step::Sent(tx.hash)),
            Err(e) => {
                // Perhaps in the pool all the same (the answer lost, not the
                // transaction): it stays the one in flight. Next round looks
                // it up — known to the chain, it is waited for; unknown, the
                // epoch is decided again — so a lost answer never makes a
                // second transaction.
                let why = format!("sending {hash}: {e}");
                self.record(epoch_id, &[("onchain_error", &why)]).await?;
                Err(why)
            }
        }
    }
}

/// How often the on-chain worker reads whether its key is still one of
/// the market's validators.
const REGISTRY_EVERY: Duration = Duration::from_secs(10);

/// How long `intake:since` outlives its last renewal (every 100 ms): a
/// gateway that died, or hangs, stops vouching for its intake within it.
pub const INTAKE_SINCE_TTL: Duration = Duration::from_secs(3);

/// How late a renewal of `intake:since` may come and still keep the block it
/// named (nothing lost meanwhile: the breaks are counted, not timed): a
/// process starved of CPU for seconds by an epoch's burst is slow, not away.
/// Past it, listening starts again from the head.
const LAPSE_FORGIVEN: Duration = Duration::from_secs(30);

/// Keeps `intake:since` — the anchor block since which this validator's
/// intake has listened without a break — while `interrupted()` has nothing
/// to say: set to the anchor chain's head (`head()`, read from the chain)
/// when listening starts or comes back, renewed every 100 ms (it expires
/// [`INTAKE_SINCE_TTL`] after the last renewal, so a gateway that died
/// vouches for nothing), removed as soon as `interrupted()` names a break
/// (no gossip peer connected, a message lost for lack of room, a submission
/// held back) and when `stop` comes.
pub async fn keep_intake_since<L, F, H, G>(
    conn: ConnectionManager,
    market: Arc<Market>,
    interrupted: L,
    head: H,
    stop: impl std::future::Future<Output = ()> + Send,
) where
    L: Fn() -> F + Send,
    F: std::future::Future<Output = Option<String>> + Send,
    H: Fn() -> G + Send,
    G: std::future::Future<Output = Option<u64>> + Send,
{
    let k = market.keys.clone();
    let ttl = INTAKE_SINCE_TTL.as_secs();
    let mut conn_at_stop = conn.clone();
    let work = async {
        let mut conn = conn;
        // Whatever a predecessor left is not this process's to vouch for.
        let _: redis::RedisResult<()> = conn.del(k.intake_since()).await;
        let mut known: Option<bool> = None;
        // The block listened since, and when it was last renewed.
        let mut since: Option<(u64, tokio::time::Instant)> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let why = interrupted().await;
            let now = why.is_none();
            if known == Some(now) {
                if now {
                    let renewed: redis::RedisResult<bool> = conn.expire(k.intake_since(), ttl as i64).await;
                    match (renewed, since) {
                        (Ok(true), Some((block, _))) => since = Some((block, tokio::time::Instant::now())),
                        // Lapsed though nothing was lost (this process was
                        // slow to renew it — a busy machine — not away):
                        // what it vouched for still holds.
                        (Ok(false), Some((block, renewed_at))) if renewed_at.elapsed() < LAPSE_FORGIVEN => {
                            let set: redis::RedisResult<()> = conn.set_ex(k.intake_since(), block, ttl).await;
                            if set.is_ok() {
                                since = Some((block, tokio::time::Instant::now()));
                                tracing::debug!("intake:since lapsed without a break; listening since block {block}");
                            }
                        }
                        // Gone for long (expired while Redis was away): set again.
                        (Ok(false), _) => known = None,
                        _ => {}
                    }
                }
                continue;
            }
            let done = if now {
                match head().await {
                    // The chain not answering: asked again.
                    None => false,
                    Some(head) => {
                        let set: redis::RedisResult<()> = conn.set_ex(k.intake_since(), head, ttl).await;
                        if set.is_ok() {
                            tracing::info!("intake listening since anchor block {head}");
                            since = Some((head, tokio::time::Instant::now()));
                        }
                        set.is_ok()
                    }
                }
            } else {
                let del: redis::RedisResult<()> = conn.del(k.intake_since()).await;
                since = None;
                let why = why.unwrap_or_default();
                match (del.is_ok(), known) {
                    (true, Some(true)) => {
                        tracing::warn!("intake: {why}; epochs released until it listens again are not attested")
                    }
                    (true, _) => tracing::info!("intake: not listening yet ({why})"),
                    _ => {}
                }
                del.is_ok()
            };
            if done {
                known = Some(now);
            }
        }
    };
    tokio::select! {
        _ = work => {}
        _ = stop => {}
    }
    // Stopped: it vouches for nothing from here.
    let _: redis::RedisResult<()> = conn_at_stop.del(k.intake_since()).await;
}

/// This validator's batch of an epoch, as the chain takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mine {
    cid: String,
    root: B256,
    /// `(project id, CID)` in project-id order.
    projects: Vec<(String, String)>,
}

impl Mine {
    /// From `finalized:{epochId}` (the aggregator's batch).
    fn from_batch(batch: &Value) -> Option<Self> {
        let root = root_bytes(batch["root"].as_str()?)?;
        let cid = batch["batch_cid"].as_str()?.to_owned();
        let projects = batch["projects"]
            .as_array()?
            .iter()
            .map(|p| Some((p["projectId"].as_str()?.to_owned(), p["snapshotCid"].as_str()?.to_owned())))
            .collect::<Option<Vec<_>>>()?;
        Some(Self { cid, root, projects })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_go_round_from_the_epoch_and_name_one_submitter_each() {
        let v: Vec<Address> = (1..=3u8).map(Address::repeat_byte).collect();
        // Epoch 4: index 4 mod 3 = 1 is first.
        assert_eq!(rank(&v, v[1], 4), Some(0));
        assert_eq!(rank(&v, v[2], 4), Some(1));
        assert_eq!(rank(&v, v[0], 4), Some(2));
        for e in 0..10 {
            let mut ranks: Vec<u64> = v.iter().map(|a| rank(&v, *a, e).unwrap()).collect();
            ranks.sort();
            assert_eq!(ranks, [0, 1, 2]);
        }
        assert_eq!(rank(&v, Address::repeat_byte(9), 4), None);
    }
}
