//! The event monitor's side in Redis: each released epoch's submission
//! window, opened at its release and closed in **anchor blocks**
//! (`window_blocks` after the release block), never by a wall-clock timer.
//! [`Monitor::follow`] follows the anchor chain with the node's epoch
//! watcher and calls [`Monitor::released`] for each `EpochReleased`,
//! [`Monitor::head`] for each new anchor head, and
//! [`Monitor::slots_recorded`] for the `SlotRegistered` events of the blocks
//! it scanned — before it opens the epochs released in them.
//!
//! Opening writes `epoch:{id}:window` = `open`, `epoch:{id}:state` (7 days),
//! `ActiveEpochs`, `epochs:active`, `open:{id}` on the epochs timeline.
//! Closing sets the window `closed` (1 hour), gives `epoch:{id}:processed`
//! its hour, notes `close:{id}`, records since when the intake had been
//! listening then (`intake_since_at_close`: whether this validator watched
//! the window whole), and pushes the epoch onto
//! `finalizationQueue` — in one script, so a close happens once however
//! many monitors run or restart.
//!
//! **Its position is kept twice:** the watcher's cursor on disk (in
//! `--data-dir`), and `monitor:cursor` in Redis, written after the windows
//! it covers on the same connection, so a Redis that lost those writes lost
//! the record too. Each round, a disk cursor ahead of Redis's record is moved
//! back to it (`Watcher::rewind`): the blocks whose writes Redis lost are
//! read again, and an epoch this monitor had opened that opens anew is
//! recorded as a `state_lost` gap ([`Monitor::check_kept`] looks for opened
//! epochs whose state is gone too). A Redis with no record at all makes it
//! look again at the releases its cursor remembers (the newest 64). A cursor
//! file that cannot be saved is reported (`monitor:problem`, read by
//! `/health`), not fatal: Redis holds the position.

use std::{
    sync::{Arc, LazyLock},
    time::Duration,
};

use lite_node_chain::{
    Anchor,
    epochs::{PollError, Watcher},
};
use lite_node_core::BadInput;
use redis::{AsyncCommands, Script, aio::ConnectionManager};

use crate::{
    Market,
    keys::{ANCHOR_HEAD_TTL, EPOCH_STATE_TTL, MONITOR_PROBLEM_TTL, WINDOW_CLOSED_TTL},
    now_secs,
};

const OPEN: &str = r"
-- KEYS: window, state, ActiveEpochs, epochs:active, epochs timeline, closing
-- ARGV: epoch, release block, begin, end, closing block, now, state ttl,
--       timeline retention
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('SET', KEYS[1], 'open')
redis.call('HSET', KEYS[2],
  'epoch_id', ARGV[1], 'release_block', ARGV[2], 'begin', ARGV[3], 'end', ARGV[4],
  'window_status', 'open', 'window_opened_at', ARGV[6], 'window_closes_block', ARGV[5],
  'phase', 'submission', 'submissions_count', '0',
  'level1_status', 'pending', 'level2_status', 'pending', 'onchain_status', 'pending',
  'last_updated', ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[7])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[6], 'open:' .. ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. (tonumber(ARGV[6]) - tonumber(ARGV[8])))
redis.call('ZADD', KEYS[6], ARGV[5], ARGV[1])
return 1
";

const CLOSE: &str = r"
-- KEYS: window, state, epoch processed, closing, epochs timeline, finalizationQueue,
--       intake since
-- ARGV: epoch, now, closed ttl, now in ms
if redis.call('ZREM', KEYS[4], ARGV[1]) == 0 then return 0 end
redis.call('SET', KEYS[1], 'closed', 'EX', ARGV[3])
redis.call('HSET', KEYS[2], 'window_status', 'closed', 'window_closes_at', ARGV[2],
  'window_closed_at_ms', ARGV[4], 'phase', 'level1_finalization',
  'submissions_count', redis.call('SCARD', KEYS[3]), 'last_updated', ARGV[2],
  'intake_since_at_close', redis.call('GET', KEYS[7]) or '')
redis.call('EXPIRE', KEYS[3], ARGV[3])
redis.call('ZADD', KEYS[5], ARGV[2], 'close:' .. ARGV[1])
redis.call('LPUSH', KEYS[6], ARGV[1])
return 1
";

const HEAD: &str = r"
-- KEYS: anchor head.  ARGV: head, ttl.  The head only moves forward (two
-- monitors, or an RPC failing over to a node behind, must not reopen
-- deadlines that passed); its expiry is renewed either way.
local seen = tonumber(redis.call('GET', KEYS[1]) or '-1')
local head = tonumber(ARGV[1])
if head > seen then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return ARGV[1]
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return tostring(seen)
";

const CURSOR: &str = r"
-- KEYS: monitor cursor.  ARGV: scanned to, last epoch ('' for none).  Each
-- field only moves forward: several monitors may share the key.
local function raise(field, value)
  if value == '' then return end
  local seen = tonumber(redis.call('HGET', KEYS[1], field) or '-1')
  if tonumber(value) > seen then redis.call('HSET', KEYS[1], field, value) end
end
raise('scanned_to', ARGV[1])
raise('last_epoch', ARGV[2])
return 1
";

static CURSOR_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CURSOR));
static HEAD_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(HEAD));
static OPEN_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(OPEN));
static CLOSE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CLOSE));

/// Records slot-registry changes (see [`Monitor::slots_recorded`]). The
/// record is complete from `from`: blocks scanned after a gap (a monitor
/// that lost its cursor file starts at the head) begin a new record.
const RECORD_SLOTS_LUA: &str = r#"
-- KEYS: changes, recorded, generation; ARGV: from, to, then member, block pairs
local to = redis.call('HGET', KEYS[2], 'to')
if (not to) or tonumber(ARGV[1]) > tonumber(to) + 1 then
  redis.call('HSET', KEYS[2], 'from', ARGV[1])
end
if (not to) or tonumber(ARGV[2]) > tonumber(to) then redis.call('HSET', KEYS[2], 'to', ARGV[2]) end
if #ARGV > 2 then
  for i = 3, #ARGV, 2 do redis.call('ZADD', KEYS[1], ARGV[i + 1], ARGV[i]) end
  redis.call('INCR', KEYS[3])
end
return 1
"#;

static RECORD_SLOTS: LazyLock<Script> = LazyLock::new(|| Script::new(RECORD_SLOTS_LUA));

/// Why this validator did not watch an epoch released in `release_block`
/// whole, if it did not: its intake listened (`intake_since_at_close`, the
/// block it had been listening since when the window closed) from before
/// the release to the close without a break. Listening since the release
/// block itself is not enough: the epoch's first submissions may have come
/// before. An epoch not watched whole is not attested, and is a gap.
pub fn not_watched_whole(release_block: u64, intake_since_at_close: Option<u64>) -> Option<String> {
    match intake_since_at_close {
        None => Some("this validator's intake was not listening when the epoch's window closed".to_owned()),
        Some(since) if release_block <= since => Some(format!(
            "this validator's intake was not listening before the epoch was released (block {release_block}; \
             listening since block {since})"
        )),
        Some(_) => None,
    }
}

/// Opens and closes submission windows.
#[derive(Clone)]
pub struct Monitor {
    market: Arc<Market>,
    conn: ConnectionManager,
    /// The newest epochs released: what [`Monitor::check_kept`] looks for
    /// in Redis.
    recent: Arc<std::sync::Mutex<std::collections::BTreeMap<u64, Released>>>,
}

/// An epoch's release block and source blocks (`begin`, `end`), and when
/// this monitor saw it.
type Released = (u64, u64, u64, std::time::Instant);

/// How long after its release an epoch's state is looked for: far less
/// than the state's own 7 days, so an epoch whose state expired as it
/// should is never taken for one Redis lost.
const WATCHED_FOR: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Epochs [`Monitor::check_kept`] watches.
const WATCHED: usize = 256;

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").field("keys", &self.market.keys).finish_non_exhaustive()
    }
}

impl Monitor {
    pub fn new(market: Arc<Market>, conn: ConnectionManager) -> Self {
        Self { market, conn, recent: Default::default() }
    }

    /// Redis lost the state of an epoch this monitor saw released (it
    /// restarted without persistence, or was flushed): each such epoch is
    /// opened again (its window closes by the head as before, with the votes
    /// that arrive now), recorded as a gap `{epochId}:state_lost`, and
    /// logged. Returns the epochs found lost.
    pub async fn check_kept(&self) -> redis::RedisResult<Vec<u64>> {
        let watched: Vec<(u64, Released)> = {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            recent.retain(|_, (.., seen)| seen.elapsed() < WATCHED_FOR);
            recent.iter().map(|(e, f)| (*e, *f)).collect()
        };
        if watched.is_empty() {
            return Ok(Vec::new());
        }
        let k = &self.market.keys;
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        for (e, _) in &watched {
            pipe.exists(k.epoch_state(*e));
        }
        let kept: Vec<bool> = pipe.query_async(&mut conn).await?;
        let mut lost = Vec::new();
        for ((epoch_id, (release_block, begin, end, _)), kept) in watched.into_iter().zip(kept) {
            if kept {
                continue;
            }
            self.released(epoch_id, release_block, begin, end).await?;
            self.record_lost(epoch_id).await?;
            lost.push(epoch_id);
        }
        Ok(lost)
    }

    /// Epoch `epoch_id` was released in anchor block `release_block` for
    /// source blocks `begin..=end`: opens its window (once; a release seen
    /// again, after a restart or a reorg, changes nothing). True when opened.
    pub async fn released(&self, epoch_id: u64, release_block: u64, begin: u64, end: u64) -> redis::RedisResult<bool> {
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            recent.entry(epoch_id).or_insert((release_block, begin, end, std::time::Instant::now()));
            while recent.len() > WATCHED {
                recent.pop_first();
            }
        }
        let k = &self.market.keys;
        let closes = self.market.window_closes(release_block);
        let opened: i64 = OPEN_SCRIPT
            .key(k.epoch_window(epoch_id))
            .key(k.epoch_state(epoch_id))
            .key(k.active_epochs())
            .key(k.epochs_active())
            .key(k.epochs_timeline())
            .key(k.epochs_closing())
            .arg(epoch_id)
            .arg(release_block)
            .arg(begin)
            .arg(end)
            .arg(closes)
            .arg(now_secs())
            .arg(EPOCH_STATE_TTL.as_secs())
            .arg(crate::keys::TIMELINE_RETENTION.as_secs())
            .invoke_async(&mut self.conn.clone())
            .await?;
        if opened == 1 {
            tracing::info!(
                "epoch {epoch_id}: window open (released in block {release_block}, closes at block {closes})"
            );
        }
        Ok(opened == 1)
    }

    /// The anchor chain's head is `head`: recorded for the dequeuers'
    /// deadline checks (never lowered: a head behind the one recorded keeps
    /// that one), and every window that closes at or before it is closed and
    /// its epoch queued for finalization. Returns the epochs closed now.
    pub async fn head(&self, head: u64) -> redis::RedisResult<Vec<u64>> {
        let k = &self.market.keys;
        let mut conn = self.conn.clone();
        let recorded: String =
            HEAD_SCRIPT.key(k.anchor_head()).arg(head).arg(ANCHOR_HEAD_TTL.as_secs()).invoke_async(&mut conn).await?;
        let head = recorded.parse::<u64>().unwrap_or(head).max(head);
        let due: Vec<u64> = conn.zrangebyscore(k.epochs_closing(), "-inf", head).await?;
        let mut closed = Vec::new();
        for epoch_id in due {
            let done: i64 = CLOSE_SCRIPT
                .key(k.epoch_window(epoch_id))
                .key(k.epoch_state(epoch_id))
                .key(k.epoch_processed(epoch_id))
                .key(k.epochs_closing())
                .key(k.epochs_timeline())
                .key(k.finalization_queue())
                .key(k.intake_since())
                .arg(epoch_id)
                .arg(now_secs())
                .arg(WINDOW_CLOSED_TTL.as_secs())
                .arg(crate::now_ms())
                .invoke_async(&mut conn)
                .await?;
            if done == 1 {
                tracing::info!("epoch {epoch_id}: window closed at anchor block {head}; queued for finalization");
                closed.push(epoch_id);
            }
        }
        Ok(closed)
    }

    /// Records in Redis that every release up to anchor block `scanned_to`
    /// (epochs up to `last_epoch`) has its window written. It goes after
    /// those writes on the same connection, so Redis persists it after them
    /// (the append-only file and snapshots keep the order): a Redis that
    /// lost any of them has lost this record too.
    pub async fn record_cursor(&self, scanned_to: u64, last_epoch: Option<u64>) -> redis::RedisResult<()> {
        let last = last_epoch.map_or(String::new(), |e| e.to_string());
        CURSOR_SCRIPT
            .key(self.market.keys.monitor_cursor())
            .arg(scanned_to)
            .arg(last)
            .invoke_async::<i64>(&mut self.conn.clone())
            .await
            .map(drop)
    }

    /// What Redis has of the monitors' progress: `None` when it has nothing
    /// (a new Redis, or one that lost everything).
    pub async fn recorded_cursor(&self) -> redis::RedisResult<Option<(u64, Option<u64>)>> {
        let fields: std::collections::HashMap<String, u64> =
            self.conn.clone().hgetall(self.market.keys.monitor_cursor()).await?;
        Ok(fields.get("scanned_to").map(|s| (*s, fields.get("last_epoch").copied())))
    }

    /// Compares the watcher's saved position with Redis's record of it and
    /// moves the watcher back to what Redis has: blocks whose writes Redis
    /// lost are read again. Returns the last epoch this monitor handled
    /// before it moved back — an epoch up to it that opens anew was lost —
    /// or `None` when nothing moved.
    async fn reconcile(&self, watcher: &mut Watcher, disk: &mut Option<String>) -> Result<Option<u64>, String> {
        let Some(mine) = watcher.cursor().cloned() else { return Ok(None) };
        let recorded = self.recorded_cursor().await.map_err(|e| format!("Redis: {e}"))?;
        let (to_block, to_epoch) = match recorded {
            Some((block, epoch)) if block >= mine.scanned_to && epoch >= mine.last_epoch => return Ok(None),
            Some((block, epoch)) => {
                tracing::info!(
                    "event monitor: Redis has its windows up to anchor block {block} (epoch {}), its cursor says \
                     {} (epoch {}); reading from block {} again",
                    epoch.map_or("none".into(), |e| e.to_string()),
                    mine.scanned_to,
                    mine.last_epoch.map_or("none".into(), |e| e.to_string()),
                    block + 1
                );
                (block, epoch)
            }
            None => {
                // Nothing of this monitor in Redis: look again at the
                // releases it remembers handling (its newest 64).
                let Some(oldest) = mine.recent.first() else { return Ok(None) };
                tracing::warn!(
                    "event monitor: Redis has no record of the epochs this monitor opened (a new Redis, or one \
                     that lost its data); looking again at the releases since anchor block {}",
                    oldest.block_number
                );
                (oldest.block_number.saturating_sub(1), oldest.epoch_id.checked_sub(1))
            }
        };
        // Moved in memory even when the disk refuses the save: Redis's record
        // is what counts, the file is only where a restart starts looking.
        let moved = watcher.rewind(to_block, to_epoch).unwrap_or_else(|e| {
            *disk = Some(e.to_string());
            true
        });
        Ok(if moved { mine.last_epoch } else { None })
    }

    /// What `/health` reports of the event monitor (a minute, renewed each
    /// round while it lasts); `None` clears it.
    async fn report_problem(&self, problem: Option<&str>) -> redis::RedisResult<()> {
        let key = self.market.keys.monitor_problem();
        let mut conn = self.conn.clone();
        match problem {
            Some(p) => conn.set_ex(key, p, MONITOR_PROBLEM_TTL.as_secs()).await,
            None => conn.del(key).await,
        }
    }

    /// Each anchor RPC endpoint's head and lag, for `/health`.
    async fn record_rpcs(&self, anchor: &Anchor) -> redis::RedisResult<()> {
        let endpoints = serde_json::to_string(&anchor.rpc().endpoints()).unwrap_or_default();
        self.conn.clone().set_ex(self.market.keys.monitor_rpcs(), endpoints, MONITOR_PROBLEM_TTL.as_secs()).await
    }

    /// An epoch this monitor had opened before, whose state Redis no longer
    /// has: recorded as a gap `{epochId}:state_lost` and logged.
    async fn record_lost(&self, epoch_id: u64) -> redis::RedisResult<()> {
        tracing::error!(
            "epoch {epoch_id}: its state is gone from Redis (a restart without persistence, or a crash that lost \
             the last writes?); opened again, and recorded as a gap — votes it had are lost"
        );
        let k = &self.market.keys;
        redis::pipe()
            .zadd(k.epochs_gaps(), format!("{epoch_id}:state_lost"), now_secs())
            .ignore()
            .expire(k.epochs_gaps(), 24 * 3600)
            .ignore()
            .query_async::<()>(&mut self.conn.clone())
            .await
    }

    /// Records the slot registry's changes (what changed — a slot, or a
    /// snapshotter enabled or disabled, [`lite_node_chain::RegistryChange`]
    /// — and the block) found in anchor blocks `from..=to`, and that the
    /// record is complete through `to`, in one transaction; with any
    /// change, bumps the generation (readers read the changes again).
    /// Written before the epochs released in those blocks are opened:
    /// whoever sees an epoch open sees every change up to its release block
    /// recorded.
    pub async fn slots_recorded(
        &self,
        changes: &[(impl std::fmt::Display, u64)],
        from: u64,
        to: u64,
    ) -> redis::RedisResult<()> {
        let k = &self.market.keys;
        let mut call = RECORD_SLOTS.key(k.slots_changes());
        call.key(k.slots_recorded()).key(k.slots_generation()).arg(from).arg(to);
        for (slot, block) in changes {
            call.arg(format!("{slot}:{block}")).arg(*block);
        }
        call.invoke_async::<()>(&mut self.conn.clone()).await
    }
}

impl Monitor {
    /// The event monitor's loop: each poll of the anchor opens the windows of
    /// new releases, notes slot registrations, and closes the windows the head
    /// has passed. Anchor and Redis errors are logged and retried on the next
    /// poll; a release is marked handled only once its window is open.
    pub async fn follow(
        &self,
        anchor: Arc<Anchor>,
        mut watcher: Watcher,
        every: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        tokio::pin!(stop);
        let mut registrations_from: Option<u64> = watcher.cursor().map(|c| c.scanned_to + 1);
        let mut failing = false;
        // Epochs up to this one were opened before Redis lost them: one that
        // opens anew now is a gap.
        let mut lost_above: Option<u64> = None;
        // The cursor file could not be saved (a full or read-only disk): the
        // monitor goes on — Redis holds its position too — and says so.
        let mut disk_failing = false;
        // A saved position from another chain is refused before anything
        // is compared with it.
        let mut chain_checked = false;
        loop {
            let mut disk: Option<String> = None;
            let round = async {
                if !chain_checked {
                    match watcher.check_chain().await {
                        Ok(()) => chain_checked = true,
                        Err(PollError::Foreign(why)) => return Err(Err(BadInput(why))),
                        Err(e) => return Err(Ok(e.to_string())),
                    }
                }
                if let Some(last) = self.reconcile(&mut watcher, &mut disk).await.map_err(Ok)? {
                    lost_above = lost_above.max(Some(last));
                    let rewound = watcher.cursor().map_or(0, |c| c.scanned_to + 1);
                    registrations_from = Some(registrations_from.map_or(rewound, |f| f.min(rewound)));
                }
                let poll = match watcher.poll().await {
                    Ok(p) => p,
                    // Another chain's cursor: the operator's to fix, not to retry.
                    Err(PollError::Foreign(why)) => return Err(Err(BadInput(why))),
                    Err(e) => return Err(Ok(e.to_string())),
                };
                // The registry's changes first: an epoch open in Redis has
                // every change up to its release block recorded.
                let from = registrations_from.unwrap_or(poll.scanned_to);
                if poll.scanned_to >= from {
                    let slots =
                        anchor.slot_registrations(from, poll.scanned_to).await.map_err(|e| Ok(e.to_string()))?;
                    if !slots.is_empty() {
                        tracing::info!(
                            "slot registry changed (slot or snapshotter, block): {slots:?}; judged from those \
                             blocks on by the new signers"
                        );
                    }
                    self.slots_recorded(&slots, from, poll.scanned_to).await.map_err(|e| Ok(format!("Redis: {e}")))?;
                    registrations_from = Some(poll.scanned_to + 1);
                }
                for epoch in &poll.epochs {
                    let was_lost = lost_above.is_some_and(|last| epoch.epoch_id <= last);
                    // A lost epoch older than a day is past anything it
                    // could still take or report; it is not opened again.
                    let stale = was_lost && epoch.timestamp.saturating_add(WATCHED_FOR.as_secs()) < now_secs();
                    if !stale {
                        let opened = self
                            .released(epoch.epoch_id, epoch.released_block, epoch.begin, epoch.end)
                            .await
                            .map_err(|e| Ok(format!("Redis: {e}")))?;
                        if opened && was_lost {
                            self.record_lost(epoch.epoch_id).await.map_err(|e| Ok(format!("Redis: {e}")))?;
                        }
                    }
                    if let Err(e) = watcher.epoch_handled(epoch) {
                        disk = Some(e.to_string());
                    }
                }
                self.head(poll.head).await.map_err(|e| Ok(format!("Redis: {e}")))?;
                self.record_rpcs(&anchor).await.map_err(|e| Ok(format!("Redis: {e}")))?;
                self.check_kept().await.map_err(|e| Ok(format!("Redis: {e}")))?;
                let last_epoch = watcher.cursor().and_then(|c| c.last_epoch);
                self.record_cursor(poll.scanned_to, last_epoch).await.map_err(|e| Ok(format!("Redis: {e}")))?;
                if lost_above.is_some_and(|last| last_epoch.is_some_and(|e| e >= last)) {
                    lost_above = None;
                }
                if let Err(e) = watcher.scan_complete(poll.scanned_to) {
                    disk = Some(e.to_string());
                }
                Ok::<_, Result<String, BadInput>>(())
            };
            let outcome = round.await;
            // A failed save is tried again each round until one succeeds:
            // only a save that worked says the disk is back.
            let disk = match disk {
                Some(e) => Some(e),
                None if disk_failing => watcher.flush().err().map(|e| e.to_string()),
                None => None,
            };
            match disk {
                Some(e) => {
                    let problem =
                        format!("the event monitor cannot save its cursor file ({e}); it goes on from Redis's record");
                    if !disk_failing {
                        tracing::error!("{problem}; free space under the validator's --data-dir");
                        disk_failing = true;
                    }
                    self.report_problem(Some(&problem)).await.ok();
                }
                None if disk_failing => {
                    tracing::info!("event monitor: its cursor file is saved again");
                    disk_failing = false;
                    self.report_problem(None).await.ok();
                }
                None => {}
            }
            match outcome {
                Ok(()) if failing => {
                    tracing::info!("event monitor: following the anchor chain again");
                    failing = false;
                }
                Ok(()) => {}
                Err(Err(fatal)) => return Err(fatal.into()),
                Err(Ok(e)) if !failing => {
                    tracing::warn!("event monitor: {e}; retrying every {} ms", every.as_millis());
                    failing = true;
                }
                Err(Ok(_)) => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = &mut stop => {
                    watcher.flush().ok();
                    return Ok(());
                }
            }
        }
    }
}
