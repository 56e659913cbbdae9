//! The epoch watcher: polls ProtocolState's events on the anchor chain, keeps
//! our data market's, and hands out each new epoch once, in order.
//!
//! Position is persisted in a [`Cursor`]: `scanned_to` (every event up to that
//! block handled) and `last_epoch`. Each poll re-reads the last
//! `confirmations` blocks below the cursor, so a release that a reorg moved or
//! removed is noticed, and one that a reorg added is not missed; epoch ids at
//! or below `last_epoch` are never handed out again.
//!
//! The watcher takes only the settings it reads ([`Follow`]). A saved
//! position that cannot belong to this anchor chain (the head is behind it,
//! or its last release's block now has another hash: a reset devnet,
//! another chain's data dir) is refused as [`PollError::Foreign`], the
//! operator's to fix ([`Watcher::check_chain`]). With a WebSocket anchor,
//! [`Watcher::changed`] wakes the caller at each new head or reconnection,
//! and a poll back-fills from the cursor. A consumer whose own store lost
//! what it recorded (the validator's Redis) moves the position back with
//! [`Watcher::rewind`].

use std::{
    io,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use lite_node_plugin_api::RpcError;

use super::cursor::{Cursor, SeenRelease};
use crate::{Anchor, EventKind};

/// What the watcher reads of the node's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Follow {
    /// Anchor blocks re-checked on every poll for reorgs.
    pub confirmations: u64,
    /// Where a watcher without a saved cursor starts (default: the head).
    pub start_block: Option<u64>,
}

/// At most this many blocks per `eth_getLogs` when catching up.
const MAX_RANGE: u64 = 2_000;
/// Scan progress without new epochs is saved at most this often.
const SAVE_SCAN_EVERY: Duration = Duration::from_secs(5);

/// A released epoch of our data market.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Epoch {
    pub epoch_id: u64,
    pub begin: u64,
    pub end: u64,
    pub day_id: u64,
    /// Anchor block holding the release, and its hash.
    pub released_block: u64,
    pub released_block_hash: String,
    pub timestamp: u64,
}

/// What one poll found.
#[derive(Debug, Default)]
pub struct Poll {
    pub epochs: Vec<Epoch>,
    pub head: u64,
    /// The last block this poll covered; pass it to [`Watcher::scan_complete`]
    /// once its epochs are handled.
    pub scanned_to: u64,
}

/// Blocks the head may fall behind the last handled release in a reorg
/// before the saved position is taken for another chain's.
const REORG_SLACK: u64 = 2;

/// Watches one data market's ProtocolState.
#[derive(Debug)]
pub struct Watcher {
    anchor: Arc<Anchor>,
    settings: Follow,
    path: PathBuf,
    cursor: Option<Cursor>,
    last_scan_save: Instant,
    /// A WebSocket anchor's new heads and reconnections (`None`: polled).
    heads: Option<tokio::sync::watch::Receiver<crate::HeadSignal>>,
}

impl Watcher {
    /// Opens the cursor in `data_dir` (no RPC yet).
    pub fn open(anchor: Arc<Anchor>, data_dir: &std::path::Path, settings: Follow) -> io::Result<Self> {
        let path = Cursor::path(data_dir, &anchor.protocol_state.to_string(), &anchor.data_market.to_string());
        let cursor = Cursor::load(&path)?;
        if let Some(c) = &cursor {
            tracing::info!(
                "resuming after anchor block {} (last epoch {})",
                c.scanned_to,
                c.last_epoch.map_or("none".into(), |e| e.to_string())
            );
        }
        let heads = anchor.rpc().heads();
        if heads.is_some() {
            tracing::info!("the anchor is a WebSocket: each new block is seen as it arrives");
        }
        Ok(Self { anchor, settings, path, cursor, last_scan_save: Instant::now(), heads })
    }

    /// Resolves at the anchor's next new head or reconnection (after which a
    /// poll back-fills from the cursor); never when the anchor is polled.
    pub async fn changed(&mut self) {
        match &mut self.heads {
            Some(heads) => {
                if heads.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }

    pub fn cursor(&self) -> Option<&Cursor> {
        self.cursor.as_ref()
    }

    /// Refuses a saved position that cannot belong to this anchor chain (a
    /// devnet or testnet reset, or another chain's data dir): the chain's
    /// head is behind the last release this node handled, or the block of
    /// that release now has another hash while nothing else this node saw
    /// is there either. A reorg of that block while the node was down — an
    /// earlier release it handled still in its block, or the same epoch
    /// released again in another — is no reason to stop: the first poll
    /// reads those blocks again, as it does for a reorg while it runs.
    pub async fn check_chain(&self) -> Result<(), PollError> {
        let Some(cursor) = &self.cursor else { return Ok(()) };
        let head = self.anchor.head().await?;
        self.ahead_of(cursor, head).await?;
        let Some(last) = cursor.recent.last() else { return Ok(()) };
        let hash = match self.block_hash(last.block_number).await? {
            Some(hash) if !hash.eq_ignore_ascii_case(&last.block_hash) => hash,
            _ => return Ok(()),
        };
        for earlier in cursor.recent.iter().rev().skip(1) {
            if let Some(h) = self.block_hash(earlier.block_number).await?
                && h.eq_ignore_ascii_case(&earlier.block_hash)
            {
                tracing::warn!(
                    "reorg while stopped: epoch {}'s release block {} is now {hash}; epoch {}'s release (block {}) \
                     is as it was: the blocks after it are read again",
                    last.epoch_id,
                    last.block_number,
                    earlier.epoch_id,
                    earlier.block_number
                );
                return Ok(());
            }
        }
        let from = last.block_number.saturating_sub(REORG_SLACK + self.settings.confirmations);
        if let Some(again) = self.anchor.epoch_release(last.epoch_id, from).await? {
            tracing::warn!(
                "reorg while stopped: epoch {} was released in block {} ({}), now in block {}: the blocks after \
                 it are read again",
                last.epoch_id,
                last.block_number,
                last.block_hash,
                again.block_number
            );
            return Ok(());
        }
        Err(self.foreign(format!(
            "epoch {} was released in block {} ({}), but that block is now {hash}, and no release this node handled \
             is on this chain",
            last.epoch_id, last.block_number, last.block_hash
        )))
    }

    /// Whether the head is behind the saved position by more than a reorg
    /// would explain, and why: an endpoint of this chain that lags (a
    /// failover to a node still syncing) holds the blocks of the releases
    /// this node handled up to its head, with their hashes — then it is
    /// waited for (`PollError::Anchor`, retried) — while another chain (a
    /// reset devnet) holds none of them, or other blocks in their place.
    async fn ahead_of(&self, cursor: &Cursor, head: u64) -> Result<(), PollError> {
        let last_release = cursor.recent.last().map_or(0, |r| r.block_number);
        if cursor.scanned_to <= head + self.settings.confirmations && last_release <= head + REORG_SLACK {
            return Ok(());
        }
        let saved = format!("anchor block {} (last release in block {last_release})", cursor.scanned_to);
        let Some(known) = cursor.recent.iter().rev().find(|r| r.block_number <= head) else {
            return Err(self.foreign(format!("it saved {saved}, the chain's head is {head}")));
        };
        match self.block_hash(known.block_number).await?.as_deref() {
            Some(hash) if hash.eq_ignore_ascii_case(&known.block_hash) => Err(lagging(format!(
                "the anchor endpoint's head {head} is behind this node's saved position, {saved}, though it holds \
                 the same chain (epoch {}'s release block {} has the hash saved): it lags; waiting for it to catch \
                 up",
                known.epoch_id, known.block_number
            ))),
            Some(hash) => Err(self.foreign(format!(
                "it saved {saved}, the chain's head is {head}, and epoch {}'s release block {} is now {hash}, not {}",
                known.epoch_id, known.block_number, known.block_hash
            ))),
            None => {
                Err(lagging(format!("the anchor endpoint (head {head}) did not return block {}", known.block_number)))
            }
        }
    }

    /// The hash of anchor block `number` as the cursor keeps hashes, if
    /// the endpoint has the block.
    async fn block_hash(&self, number: u64) -> Result<Option<String>, PollError> {
        Ok(self.anchor.rpc().block_hash(number).await?.map(|h| h.to_string()))
    }

    fn foreign(&self, what: String) -> PollError {
        PollError::Foreign(format!(
            "the saved epoch cursor {} is not from this anchor chain: {what}. If the chain was reset (a devnet or \
             testnet), move that one file away to start watching afresh: it holds only where the watch stands, and \
             the submission ledger and books beside it stay, so nothing is signed or sent twice",
            self.path.display()
        ))
    }

    /// One poll: new epochs in chain order, not yet handled.
    pub async fn poll(&mut self) -> Result<Poll, PollError> {
        let head = self.anchor.head().await?;
        if let Some(cursor) = &self.cursor {
            self.ahead_of(cursor, head).await?;
        }
        let cursor = match &mut self.cursor {
            Some(c) => c,
            None => {
                let start = self.settings.start_block.unwrap_or(head);
                tracing::info!("no saved cursor: watching from anchor block {start}");
                // The day the market is in before the first block scanned:
                // its epochs are that day's until a DayStartedEvent says
                // otherwise.
                let day_id = match self.anchor.day_at(start.saturating_sub(1)).await {
                    Ok(day) => day,
                    Err(e) => {
                        tracing::warn!(
                            "cannot read the data market's current day ({e}); its epochs carry day 0 until the next \
                             DayStartedEvent"
                        );
                        0
                    }
                };
                let c = Cursor { scanned_to: start.saturating_sub(1), floor: start, day_id, ..Cursor::default() };
                c.save(&self.path).map_err(|e| PollError::State(format!("saving the epoch cursor: {e}")))?;
                self.cursor.insert(c)
            }
        };
        let from = (cursor.scanned_to + 1).saturating_sub(self.settings.confirmations).max(cursor.floor);
        if from > head {
            return Ok(Poll { epochs: Vec::new(), head, scanned_to: cursor.scanned_to });
        }
        let to = head.min(from + MAX_RANGE - 1);
        let events = self.anchor.events(from, to).await?;

        for seen in cursor.recent.iter().filter(|r| (from..=to).contains(&r.block_number)) {
            let now = events
                .iter()
                .find(|e| matches!(e.kind, EventKind::EpochReleased { epoch_id, .. } if epoch_id == seen.epoch_id));
            match now {
                None => tracing::warn!(
                    "reorg: the release of epoch {} in anchor block {} is no longer on the chain",
                    seen.epoch_id,
                    seen.block_number
                ),
                Some(e) if e.block_hash.to_string() != seen.block_hash => tracing::warn!(
                    "reorg: epoch {} was released in block {} ({}), now in block {} ({})",
                    seen.epoch_id,
                    seen.block_number,
                    seen.block_hash,
                    e.block_number,
                    e.block_hash
                ),
                Some(_) => {}
            }
        }

        // The day at the block before the range: an epoch scanned again
        // keeps the day it was released in.
        let mut day_id = cursor.day_at(from.saturating_sub(1));
        let mut epochs = Vec::new();
        let mut newest = cursor.last_epoch;
        for event in events {
            match event.kind {
                EventKind::DayStarted { day_id: d } => {
                    day_id = day_id.max(d);
                    cursor.day_started(event.block_number, d);
                }
                EventKind::EpochReleased { epoch_id, begin, end, timestamp } => {
                    if newest.is_some_and(|last| epoch_id <= last) {
                        tracing::debug!("epoch {epoch_id} in block {} already handled", event.block_number);
                        continue;
                    }
                    newest = Some(epoch_id);
                    epochs.push(Epoch {
                        epoch_id,
                        begin,
                        end,
                        day_id,
                        released_block: event.block_number,
                        released_block_hash: event.block_hash.to_string(),
                        timestamp,
                    });
                }
            }
        }
        cursor.day_id = cursor.day_id.max(day_id);
        Ok(Poll { epochs, head, scanned_to: to })
    }

    /// Records that `epoch` has an outcome for every project (computed, failed
    /// or missed) and saves the cursor.
    pub fn epoch_handled(&mut self, epoch: &Epoch) -> io::Result<()> {
        let cursor = self.cursor.as_mut().expect("poll opened the cursor");
        cursor.handled(SeenRelease {
            epoch_id: epoch.epoch_id,
            block_number: epoch.released_block,
            block_hash: epoch.released_block_hash.clone(),
        });
        cursor.save(&self.path)
    }

    /// Records that every event up to `scanned_to` is handled.
    pub fn scan_complete(&mut self, scanned_to: u64) -> io::Result<()> {
        let cursor = self.cursor.as_mut().expect("poll opened the cursor");
        if scanned_to <= cursor.scanned_to {
            return Ok(());
        }
        cursor.scanned_to = scanned_to;
        if self.last_scan_save.elapsed() >= SAVE_SCAN_EVERY {
            self.last_scan_save = Instant::now();
            cursor.save(&self.path)?;
        }
        Ok(())
    }

    /// Moves the position back to `scanned_to` and `last_epoch` (never
    /// forward, never below where the watcher started), forgetting the
    /// releases handled after it, and saves it: the next poll hands those
    /// epochs out again. For a consumer whose own store lost what it
    /// recorded of them (the validator's Redis after a crash).
    pub fn rewind(&mut self, scanned_to: u64, last_epoch: Option<u64>) -> io::Result<bool> {
        let Some(cursor) = self.cursor.as_mut() else { return Ok(false) };
        let scanned_to = scanned_to.max(cursor.floor.saturating_sub(1)).min(cursor.scanned_to);
        let last_epoch = cursor.last_epoch.zip(last_epoch).map(|(mine, theirs)| mine.min(theirs));
        if scanned_to == cursor.scanned_to && last_epoch == cursor.last_epoch {
            return Ok(false);
        }
        cursor.scanned_to = scanned_to;
        cursor.last_epoch = last_epoch;
        cursor.recent.retain(|r| last_epoch.is_some_and(|last| r.epoch_id <= last));
        cursor.save(&self.path)?;
        Ok(true)
    }

    /// Saves whatever progress is not saved yet (at shutdown).
    pub fn flush(&self) -> io::Result<()> {
        match &self.cursor {
            Some(c) => c.save(&self.path),
            None => Ok(()),
        }
    }
}

/// Why a poll failed: the anchor did not answer, or the node's own state
/// could not be written (a full or read-only disk).
#[derive(Debug)]
pub enum PollError {
    Anchor(RpcError),
    State(String),
    /// The saved position belongs to another chain: the operator's to fix.
    Foreign(String),
}

/// An anchor endpoint's answer that is not this node's to fix: retried.
fn lagging(message: String) -> PollError {
    PollError::Anchor(crate::rpc::rpc_error(message))
}

impl From<RpcError> for PollError {
    fn from(e: RpcError) -> Self {
        Self::Anchor(e)
    }
}

impl std::fmt::Display for PollError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Anchor(e) => write!(f, "{e}"),
            Self::State(e) | Self::Foreign(e) => f.write_str(e),
        }
    }
}
