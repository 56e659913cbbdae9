//! The finalizer: per project, the CID with the most distinct-slot votes
//! (`consensus`), computed in parts so several workers share a large epoch.
//!
//! An epoch taken off `finalizationQueue` (pushed there when its window
//! closed) is split: its projects, sorted, are cut into parts of
//! `part_size`, `parts:total` is set and one `{epoch}:part:{i}:{n}` item per
//! part goes back on the same queue, for any worker. A worker that finishes
//! a part writes `batch:part:{epochId}:{partId}` (2 hours) and counts it in
//! `parts:completed`; the one that completes the count sets `parts:ready`
//! and pushes the epoch onto `aggregationQueue`. Each step is one script
//! guarded by the key it writes, so a step redone after a crash changes
//! nothing.

use std::{
    collections::{BTreeMap, BTreeSet},
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

const SPLIT: &str = r"
-- KEYS: parts total, parts completed, state, finalizationQueue   ARGV: epoch, parts, now
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], 0)
redis.call('HSET', KEYS[3], 'level1_status', 'in_progress', 'level1_started_at', ARGV[3], 'last_updated', ARGV[3])
for i = 0, tonumber(ARGV[2]) - 1 do
  redis.call('LPUSH', KEYS[4], ARGV[1] .. ':part:' .. i .. ':' .. ARGV[2])
end
return 1
";

const PART: &str = r"
-- KEYS: part, parts completed, parts total, parts ready, aggregationQueue
-- ARGV: part json, ttl, aggregation item
if not redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2], 'NX') then return 0 end
local done = redis.call('INCR', KEYS[2])
if done == tonumber(redis.call('GET', KEYS[3])) then
  redis.call('SET', KEYS[4], 'true')
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
    /// Part `part` of `of` of an epoch: finalize it.
    Part { epoch_id: u64, part: u64, of: u64 },
}

fn parse(item: &str) -> Option<Task> {
    let fields: Vec<&str> = item.split(':').collect();
    match fields.as_slice() {
        [e] => Some(Task::Epoch(e.parse().ok()?)),
        [e, "part", p, n] => Some(Task::Part { epoch_id: e.parse().ok()?, part: p.parse().ok()?, of: n.parse().ok()? }),
        _ => None,
    }
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

    async fn handle(&self, payload: &str) -> Result<(), String> {
        match parse(payload) {
            Some(Task::Epoch(e)) => self.split(e).await.map_err(|err| format!("epoch {e}: redis: {err}")),
            Some(Task::Part { epoch_id, part, of }) => {
                self.part(epoch_id, part, of).await.map_err(|err| format!("epoch {epoch_id}: redis: {err}"))
            }
            None => {
                tracing::warn!("finalizer: dropping `{payload}`, which is not a finalization item");
                Ok(())
            }
        }
    }

    /// Takes one item (waiting up to `wait`) and does it; false when there
    /// was none.
    pub async fn step(&self, wait: Duration) -> Result<bool, String> {
        let Some(taken) = self.queue.take(wait).await.map_err(|e| format!("redis: {e}"))? else {
            return Ok(false);
        };
        if let Err(e) = self.handle(&taken.payload).await {
            let _ = self.queue.give_back(std::slice::from_ref(&taken)).await;
            return Err(e);
        }
        self.queue.ack(&taken).await.map_err(|e| format!("redis: {e}"))?;
        Ok(true)
    }

    /// The epoch's projects (sorted) and their votes.
    async fn votes(&self, epoch_id: u64) -> redis::RedisResult<BTreeMap<String, Vec<Vote>>> {
        let ballots: Vec<(String, String)> = self.conn.clone().hgetall(self.market.keys.votes(epoch_id)).await?;
        let mut by_project: BTreeMap<String, Vec<Vote>> = BTreeMap::new();
        for (field, cid) in ballots {
            let Some((slot, project)) = field.split_once(':') else { continue };
            let Ok(slot_id) = slot.parse() else { continue };
            by_project.entry(project.to_owned()).or_default().push(Vote {
                slot_id,
                project_id: project.to_owned(),
                cid,
            });
        }
        Ok(by_project)
    }

    async fn split(&self, epoch_id: u64) -> redis::RedisResult<()> {
        let k = &self.market.keys;
        let projects: BTreeSet<String> = self.votes(epoch_id).await?.into_keys().collect();
        let parts = projects.len().div_ceil(self.part_size).max(1);
        let fresh: i64 = SPLIT_SCRIPT
            .key(k.parts_total(epoch_id))
            .key(k.parts_completed(epoch_id))
            .key(k.epoch_state(epoch_id))
            .key(k.finalization_queue())
            .arg(epoch_id)
            .arg(parts)
            .arg(now_secs())
            .invoke_async(&mut self.conn.clone())
            .await?;
        if fresh == 1 {
            tracing::debug!("epoch {epoch_id}: {} projects in {parts} parts", projects.len());
        }
        Ok(())
    }

    async fn part(&self, epoch_id: u64, part: u64, of: u64) -> redis::RedisResult<()> {
        let k = &self.market.keys;
        let by_project = self.votes(epoch_id).await?;
        let mine = by_project.into_iter().skip(part as usize * self.part_size).take(self.part_size);
        let tally = consensus::tally(mine.flat_map(|(_, votes)| votes));
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
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

/// A worker's loop: takes one item at a time and does it with `handle`,
/// which must be idempotent. An item taken is this worker's until it is
/// done: on a Redis error the same item is retried (with backoff), never
/// dropped for recovery to find while this worker's heartbeat says it holds it.
pub(crate) async fn work_items<'a, F, Fut>(queue: &ReliableQueue, who: &str, mut handle: F)
where
    F: FnMut(String) -> Fut + 'a,
    Fut: std::future::Future<Output = Result<(), String>> + 'a,
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
        while let Err(e) = handle(taken.payload.clone()).await {
            pause(e, &mut backoff).await;
        }
        while let Err(e) = queue.ack(&taken).await {
            pause(format!("redis: {e}"), &mut backoff).await;
        }
        backoff = Policy::REDIS.delays();
    }
}

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
