//! The finalizer: per project, the CID with the most distinct-slot votes
//! (`consensus`), computed in parts so several workers share a large epoch.
//!
//! An epoch taken off `finalizationQueue` (pushed there when its window
//! closed) waits until none of its submissions is still pending at the
//! dequeuers (`epochs:pending`: each arrived while the window was open and
//! must be counted), or [`FINALIZE_GRACE`] after the close, whichever comes
//! first. It is then split: its projects (`epoch:{id}:projects`, in byte
//! order) are cut into parts of `part_size`, `parts:total` is set and one
//! `{epoch}:part:{i}:{n}:{size}` item per part goes back on the same queue,
//! for any worker. Each part carries the size it was cut with, so workers
//! configured with different sizes (a rolling change) still cover every
//! project, and a part reads only its own projects' votes (a range of
//! `epoch:{id}:votes`). A worker that finishes a part writes
//! `batch:part:{epochId}:{partId}` (2 hours) and counts it in
//! `parts:completed`; the one that completes the count sets `parts:ready`
//! and pushes the epoch onto `aggregationQueue`. Each step is one script
//! guarded by the key it writes, so a step redone after a crash changes
//! nothing.

use std::{
    sync::{Arc, LazyLock},
    time::Duration,
};

use lite_node_core::retry::{Delays, Policy};
use redis::{AsyncCommands, Script, aio::ConnectionManager};
use serde_json::json;

use crate::{
    Market,
    consensus::{self, Vote},
    keys::BATCH_PART_TTL,
    now_secs,
    queue::ReliableQueue,
};

/// Projects per part when none is configured.
pub const PART_SIZE: usize = 250;

/// How long after its window closed an epoch waits for submissions that
/// arrived in time and are still queued at the dequeuers. Past it, the
/// epoch is counted anyway and those are `window_closed`.
pub const FINALIZE_GRACE: Duration = Duration::from_secs(120);

const SPLIT: &str = r"
-- KEYS: parts total, parts completed, state, finalizationQueue, projects, pending,
--       epoch processed
-- ARGV: epoch, part size, now, grace over (1/0), ttl
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if ARGV[4] == '0' and tonumber(redis.call('HGET', KEYS[6], ARGV[1]) or '0') > 0 then return -1 end
local size = tonumber(ARGV[2])
local parts = math.max(1, math.ceil(redis.call('ZCARD', KEYS[5]) / size))
redis.call('SET', KEYS[1], parts, 'EX', ARGV[5])
redis.call('SET', KEYS[2], 0, 'EX', ARGV[5])
redis.call('HSET', KEYS[3], 'level1_status', 'in_progress', 'level1_started_at', ARGV[3], 'last_updated', ARGV[3],
  'submissions_count', redis.call('SCARD', KEYS[7]))
for i = 0, parts - 1 do
  redis.call('LPUSH', KEYS[4], ARGV[1] .. ':part:' .. i .. ':' .. parts .. ':' .. size)
end
return 1
";

const PART: &str = r"
-- KEYS: part, parts completed, parts total, parts ready, aggregationQueue
-- ARGV: part json, ttl, aggregation item, epoch state ttl
if not redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2], 'NX') then return 0 end
local done = redis.call('INCR', KEYS[2])
if done == tonumber(redis.call('GET', KEYS[3])) then
  redis.call('SET', KEYS[4], 'true', 'EX', ARGV[4])
  redis.call('LPUSH', KEYS[5], ARGV[3])
end
return 1
";

static SPLIT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SPLIT));
static PART_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(PART));

/// What a finalizer queue item asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Task {
    /// An epoch whose window closed: split it.
    Epoch(u64),
    /// Part `part` of `of` of an epoch, cut `size` projects a part (`None`:
    /// an item from before parts carried their size — the worker's own).
    Part { epoch_id: u64, part: u64, of: u64, size: Option<u64> },
}

fn parse(item: &str) -> Option<Task> {
    let fields: Vec<&str> = item.split(':').collect();
    let part = |e: &str, p: &str, n: &str, size: Option<&str>| -> Option<Task> {
        let size = match size {
            Some(s) => Some(s.parse().ok().filter(|s| *s > 0)?),
            None => None,
        };
        Some(Task::Part { epoch_id: e.parse().ok()?, part: p.parse().ok()?, of: n.parse().ok()?, size })
    };
    match fields.as_slice() {
        [e] => Some(Task::Epoch(e.parse().ok()?)),
        [e, "part", p, n] => part(e, p, n, None),
        [e, "part", p, n, size] => part(e, p, n, Some(size)),
        _ => None,
    }
}

/// What became of a queue item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Handled {
    Done,
    /// Not yet (an epoch still waiting for its pending submissions): put
    /// back at the end of the queue.
    Later,
}

/// Finalizer workers.
#[derive(Clone)]
pub struct Finalizer {
    market: Arc<Market>,
    conn: ConnectionManager,
    queue: ReliableQueue,
    part_size: usize,
}

impl Finalizer {
    pub fn new(market: Arc<Market>, conn: ConnectionManager, part_size: usize) -> Self {
        let queue = ReliableQueue::finalization(conn.clone(), &market.keys);
        Self { market, conn, queue, part_size: part_size.max(1) }
    }

    /// The same finalizer on another connection.
    pub fn with_conn(&self, conn: ConnectionManager) -> Self {
        Self { queue: self.queue.with_conn(conn.clone()), conn, ..self.clone() }
    }

    /// Runs `workers` workers, each on its own connection from `client`,
    /// until `stop`; held items of dead workers are put back at start and
    /// every 30 s.
    pub async fn run(self, client: redis::Client, workers: usize, stop: impl std::future::Future<Output = ()> + Send) {
        let this = Self { queue: self.queue.clone().owned_by(&crate::queue::instance_id()), ..self };
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(this.queue.clone().keep_beating());
        for _ in 0..workers.max(1) {
            let (me, client) = (this.clone(), client.clone());
            tasks.spawn(async move { me.with_conn(crate::connect_retrying(&client, "finalizer").await).work().await });
        }
        tasks.spawn(recover_every(this.queue.clone(), "finalizer", RECOVER_EVERY));
        stop.await;
        tasks.shutdown().await;
    }

    async fn work(&self) {
        work_items(&self.queue, "finalizer", |payload| async move { self.handle(&payload).await }).await
    }

    async fn handle(&self, payload: &str) -> Result<Handled, String> {
        match parse(payload) {
            Some(Task::Epoch(e)) => self.split(e).await.map_err(|err| format!("epoch {e}: redis: {err}")),
            Some(Task::Part { epoch_id, part, of, size }) => {
                let size = size.unwrap_or(self.part_size as u64);
                self.part(epoch_id, part, of, size).await.map_err(|err| format!("epoch {epoch_id}: redis: {err}"))?;
                Ok(Handled::Done)
            }
            None => {
                tracing::warn!("finalizer: dropping `{payload}`, which is not a finalization item");
                Ok(Handled::Done)
            }
        }
    }

    /// Takes one item (waiting up to `wait`) and does it; false when there
    /// was none, or only an epoch that must wait.
    pub async fn step(&self, wait: Duration) -> Result<bool, String> {
        let Some(taken) = self.queue.take(wait).await.map_err(|e| format!("redis: {e}"))? else {
            return Ok(false);
        };
        match self.handle(&taken.payload).await {
            Err(e) => {
                let _ = self.queue.give_back(std::slice::from_ref(&taken)).await;
                Err(e)
            }
            Ok(Handled::Later) => {
                self.queue.defer(std::slice::from_ref(&taken)).await.map_err(|e| format!("redis: {e}"))?;
                Ok(false)
            }
            Ok(Handled::Done) => {
                self.queue.ack(&taken).await.map_err(|e| format!("redis: {e}"))?;
                Ok(true)
            }
        }
    }

    /// Splits an epoch into parts, once none of its submissions is pending
    /// (or its grace is over): `Later` until then.
    async fn split(&self, epoch_id: u64) -> redis::RedisResult<Handled> {
        let k = &self.market.keys;
        let mut conn = self.conn.clone();
        let closed_at: Option<u64> = conn.hget(k.epoch_state(epoch_id), "window_closed_at_ms").await?;
        let grace_over =
            closed_at.is_none_or(|at| crate::now_ms().saturating_sub(at) > FINALIZE_GRACE.as_millis() as u64);
        let answer: i64 = SPLIT_SCRIPT
            .key(k.parts_total(epoch_id))
            .key(k.parts_completed(epoch_id))
            .key(k.epoch_state(epoch_id))
            .key(k.finalization_queue())
            .key(k.epoch_projects(epoch_id))
            .key(k.pending())
            .key(k.epoch_processed(epoch_id))
            .arg(epoch_id)
            .arg(self.part_size)
            .arg(now_secs())
            .arg(if grace_over { "1" } else { "0" })
            .arg(crate::keys::EPOCH_STATE_TTL.as_secs())
            .invoke_async(&mut conn)
            .await?;
        Ok(match answer {
            -1 => Handled::Later,
            _ => Handled::Done,
        })
    }

    /// The votes of the projects `part * size ..` (`size` of them, in byte
    /// order), read as one range; void votes (an equivocating slot's) left
    /// out.
    async fn part_votes(&self, epoch_id: u64, part: u64, size: u64) -> redis::RedisResult<Vec<Vote>> {
        let k = &self.market.keys;
        let mut conn = self.conn.clone();
        let first = part.saturating_mul(size);
        let last = first.saturating_add(size - 1);
        let projects: Vec<String> =
            conn.zrange(k.epoch_projects(epoch_id), first as isize, last.min(isize::MAX as u64) as isize).await?;
        let (Some(from), Some(to)) = (projects.first(), projects.last()) else { return Ok(Vec::new()) };
        // Every member `{project}\x1f…` from the first project to the last.
        let low = format!("[{from}\x1f").into_bytes();
        let mut high = format!("[{to}\x1f").into_bytes();
        high.push(0xff);
        let ballots: Vec<String> =
            redis::cmd("ZRANGE").arg(k.votes(epoch_id)).arg(low).arg(high).arg("BYLEX").query_async(&mut conn).await?;
        Ok(ballots.iter().filter_map(|b| ballot(b)).collect())
    }

    async fn part(&self, epoch_id: u64, part: u64, of: u64, size: u64) -> redis::RedisResult<()> {
        let k = &self.market.keys;
        let tally = consensus::tally(self.part_votes(epoch_id, part, size).await?);
        let projects: serde_json::Map<String, serde_json::Value> = tally
            .projects
            .iter()
            .map(|(p, f)| (p.clone(), json!({"cid": f.cid, "votes": f.votes, "voters": f.voters})))
            .collect();
        let body = json!({"epoch_id": epoch_id, "part_id": part, "parts": of, "projects": projects});
        let _: i64 = PART_SCRIPT
            .key(k.batch_part(epoch_id, part))
            .key(k.parts_completed(epoch_id))
            .key(k.parts_total(epoch_id))
            .key(k.parts_ready(epoch_id))
            .key(k.aggregation_queue())
            .arg(body.to_string())
            .arg(BATCH_PART_TTL.as_secs())
            .arg(json!({"epoch_id": epoch_id, "parts_completed": of}).to_string())
            .arg(crate::keys::EPOCH_STATE_TTL.as_secs())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

/// The vote a member of `epoch:{id}:votes` holds (`{project}\x1f{slot}\x1f{cid}`);
/// `None` for a void one (the slot equivocated) or one that does not parse.
pub(crate) fn ballot(member: &str) -> Option<Vote> {
    let mut fields = member.splitn(3, '\x1f');
    let (project, slot, cid) = (fields.next()?, fields.next()?, fields.next()?);
    if cid.is_empty() {
        return None;
    }
    Some(Vote { slot_id: slot.parse().ok()?, project_id: project.to_owned(), cid: cid.to_owned() })
}

/// A worker's loop: takes one item at a time and does it with `handle`,
/// which must be idempotent. An item taken is this worker's until it is
/// done: on a Redis error the same item is retried (with backoff), never
/// dropped for recovery to find while this worker's heartbeat says it holds
/// it. An item that must wait goes to the back of the queue, and the worker
/// pauses briefly before the next take.
pub(crate) async fn work_items<'a, F, Fut>(queue: &ReliableQueue, who: &str, mut handle: F)
where
    F: FnMut(String) -> Fut + 'a,
    Fut: std::future::Future<Output = Result<Handled, String>> + 'a,
{
    let mut backoff = Policy::REDIS.delays();
    let pause = |what: String, backoff: &mut Delays| {
        let wait = backoff.next().unwrap_or(Policy::REDIS.max);
        tracing::warn!("{who}: {what}; retrying in {wait:?}");
        tokio::time::sleep(wait)
    };
    loop {
        let taken = match queue.take(Duration::from_secs(1)).await {
            Ok(Some(t)) => t,
            Ok(None) => continue,
            Err(e) => {
                pause(format!("redis: {e}"), &mut backoff).await;
                continue;
            }
        };
        let handled = loop {
            match handle(taken.payload.clone()).await {
                Ok(handled) => break handled,
                Err(e) => pause(e, &mut backoff).await,
            }
        };
        loop {
            let put = match handled {
                Handled::Done => queue.ack(&taken).await,
                Handled::Later => queue.defer(std::slice::from_ref(&taken)).await,
            };
            match put {
                Ok(()) => break,
                Err(e) => pause(format!("redis: {e}"), &mut backoff).await,
            }
        }
        backoff = Policy::REDIS.delays();
        if handled == Handled::Later {
            tokio::time::sleep(WAIT_PAUSE).await;
        }
    }
}

/// How long a worker pauses after putting back an item that must wait.
const WAIT_PAUSE: Duration = Duration::from_millis(200);

/// How often held items of dead workers are looked for (a dead worker's
/// heartbeat is gone within 15 s).
pub const RECOVER_EVERY: Duration = Duration::from_secs(10);

/// Puts back what dead workers held, at once and then every `period`.
pub(crate) async fn recover_every(q: ReliableQueue, who: &'static str, period: Duration) {
    let mut every = tokio::time::interval(period);
    loop {
        every.tick().await;
        match q.recover().await {
            Ok(0) => {}
            Ok(n) => tracing::warn!("{who}: {n} items of a dead worker put back on the queue"),
            Err(e) => tracing::warn!("{who}: recovery failed ({e}); trying again later"),
        }
    }
}
