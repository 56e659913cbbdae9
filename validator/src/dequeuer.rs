//! The dequeuer: takes submissions off `submissionQueue` in batches, checks
//! each, and commits the verdict — accepted into
//! `processed:{sequencerId}:{submissionId}`, `epoch:{id}:processed`,
//! `EpochProcessed({id})` and the validations timeline, or rejected with its
//! [`Reason`] — before acknowledging it. Several workers (tasks or
//! processes) share the queue.
//!
//! **Exactly once.** The queue delivers at least once (`queue`); every
//! commit is a script that first asks whether this submission id already
//! has a verdict, so a submission redelivered after a crash is acknowledged
//! without being counted again.
//!
//! **One vote per slot.** The first CID a slot names for a project in an
//! epoch is its vote (`epoch:{id}:votes`, shared by every worker and
//! replica); the same CID again is a `duplicate`, another CID is an
//! `equivocation`. The window is checked again inside the commit, so a
//! submission is never accepted after the event monitor closed its window
//! (and handed the epoch to the finalizer).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use alloy::primitives::Address;
use lite_node_core::retry::Policy;
use lite_node_protocol::{
    eip712,
    proto::{Request, SnapshotSubmission},
    submission::{EpochStanding, Facts, Judgement, Rejection, Selection, WINDOW_BLOCKS, check_form, judge},
};
use redis::{Script, aio::ConnectionManager};
use serde_json::json;

pub use lite_node_protocol::submission::Reason;

use crate::{
    Market,
    chain::{ChainReads, EpochFacts},
    gateway,
    keys::EPOCH_STATE_TTL,
    queue::{ReliableQueue, Taken, item_id},
};

/// What became of one submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Rejected(Reason, String),
    /// It already had a verdict (redelivered after a crash): nothing counted.
    Again,
    /// Its epoch is not open here yet, but may be: the release can reach a
    /// node before this validator's event monitor. Put back on the queue
    /// until the epoch opens or the anchor head passes its deadline.
    Deferred,
}

/// What the checks made of one submission.
enum Checked {
    Pass(Candidate),
    Reject(Reason, String, SnapshotSubmission),
    Defer,
}

/// How a dequeuer works.
#[derive(Clone, Copy, Debug)]
pub struct DequeuerSettings {
    /// Submissions taken per round trip.
    pub batch: usize,
    /// Worker tasks in this process.
    pub workers: usize,
    /// How often held items of dead workers are put back.
    pub recover_every: Duration,
}

impl Default for DequeuerSettings {
    fn default() -> Self {
        Self { batch: 256, workers: 4, recover_every: crate::finalizer::RECOVER_EVERY }
    }
}

/// How long a slot's signer is trusted without a `SlotRegistered` telling
/// otherwise (a safety net: the event monitor bumps `slots:generation` on
/// every registration, which empties the cache at once).
const SIGNER_TTL: Duration = Duration::from_secs(600);
/// Slots whose signer is kept at most (far more than any market's slots).
const MAX_CACHED_SIGNERS: usize = 100_000;

/// Checks and commits submissions; cheap to clone (one per worker task).
pub struct Dequeuer<C> {
    market: Arc<Market>,
    chain: Arc<C>,
    conn: ConnectionManager,
    queue: ReliableQueue,
    domain: Arc<alloy::sol_types::Eip712Domain>,
    signers: Arc<Mutex<Signers>>,
    epochs: Arc<Mutex<BTreeMap<u64, EpochFacts>>>,
}

impl<C> Clone for Dequeuer<C> {
    fn clone(&self) -> Self {
        Self {
            market: self.market.clone(),
            chain: self.chain.clone(),
            conn: self.conn.clone(),
            queue: self.queue.clone(),
            domain: self.domain.clone(),
            signers: self.signers.clone(),
            epochs: self.epochs.clone(),
        }
    }
}

#[derive(Default)]
struct Signers {
    generation: Option<String>,
    by_slot: HashMap<u64, (Address, Instant)>,
}

/// A submission that passed the checks made before the chain is asked.
struct Candidate {
    id: String,
    submission: SnapshotSubmission,
    received_at: u64,
    epoch: EpochFacts,
}

/// What a batch's first read found: per epoch its window and facts, the
/// anchor head, the signer generation.
struct Snapshot {
    windows: BTreeMap<u64, (Option<String>, Option<EpochFacts>)>,
    head: Option<u64>,
}

const ACCEPT: &str = r"
-- KEYS: votes, processed, epoch processed, EpochProcessed, validations
--       timeline, counters, rejections, window
-- ARGV: vote field, cid, submission id, now, ttl, rejection record
--       (reason filled here), then processed hash field/value pairs
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('HEXISTS', KEYS[7], ARGV[3]) == 1 then
  return 'again'
end
local function reject(reason)
  local record = cjson.decode(ARGV[6])
  record['reason'] = reason
  redis.call('HSET', KEYS[7], ARGV[3], cjson.encode(record))
  redis.call('EXPIRE', KEYS[7], ARGV[5])
  redis.call('HINCRBY', KEYS[6], 'rejected:' .. reason, 1)
  return reason
end
if redis.call('GET', KEYS[8]) ~= 'open' then
  return reject('window_closed')
end
local prev = redis.call('HGET', KEYS[1], ARGV[1])
if prev then
  if prev == ARGV[2] then return reject('duplicate') end
  return reject('equivocation')
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[5])
local fields = {}
for i = 7, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('SADD', KEYS[3], ARGV[3])
redis.call('SADD', KEYS[4], ARGV[3])
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[3])
redis.call('HINCRBY', KEYS[6], 'accepted', 1)
return 'accepted'
";

const REJECT: &str = r"
-- KEYS: rejections, counters, processed   ARGV: submission id, reason, record, ttl
if redis.call('EXISTS', KEYS[3]) == 1 then return 'again' end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[3]) == 0 then return 'again' end
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('HINCRBY', KEYS[2], 'rejected:' .. ARGV[2], 1)
return ARGV[2]
";

static ACCEPT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACCEPT));
static REJECT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(REJECT));

impl<C: ChainReads> Dequeuer<C> {
    pub fn new(market: Arc<Market>, chain: Arc<C>, conn: ConnectionManager) -> Self {
        let queue = ReliableQueue::submissions(conn.clone(), &market.keys);
        let domain = Arc::new(eip712::domain(market.chain_id, market.scope.protocol_state));
        Self { market, chain, conn, queue, domain, signers: Default::default(), epochs: Default::default() }
    }

    pub fn queue(&self) -> &ReliableQueue {
        &self.queue
    }

    /// The same dequeuer on another connection.
    pub fn with_conn(&self, conn: ConnectionManager) -> Self {
        Self { queue: self.queue.with_conn(conn.clone()), conn, ..self.clone() }
    }

    /// Runs `settings.workers` workers, each on its own connection from
    /// `client`, and the periodic recovery until `stop` resolves. Redis
    /// errors are logged and retried; none ends a worker.
    pub async fn run(
        self,
        client: redis::Client,
        settings: DequeuerSettings,
        stop: impl std::future::Future<Output = ()> + Send,
    ) {
        let this = Self { queue: self.queue.clone().owned_by(&crate::queue::instance_id()), ..self };
        if let Err(e) = this.queue.beat().await {
            tracing::warn!("dequeuer: Redis unreachable at start ({e}); the workers retry");
        }
        match this.queue.recover().await {
            Ok(0) => {}
            Ok(n) => tracing::info!("dequeuer: {n} submissions held by a worker that is gone put back on the queue"),
            Err(e) => tracing::warn!("dequeuer: cannot recover held submissions yet ({e})"),
        }
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(this.queue.clone().keep_beating());
        for _ in 0..settings.workers.max(1) {
            let (me, client) = (this.clone(), client.clone());
            tasks.spawn(async move {
                let worker = me.with_conn(crate::connect_retrying(&client, "dequeuer").await);
                worker.work(settings.batch).await
            });
        }
        tasks.spawn(crate::finalizer::recover_every(this.queue.clone(), "dequeuer", settings.recover_every));
        stop.await;
        tasks.shutdown().await;
    }

    async fn work(&self, batch: usize) {
        let mut backoff = Policy::REDIS.delays();
        // Items this worker took and could not give back or acknowledge
        // (Redis went away): returned before anything new is taken, so a
        // live worker never sits on items that recovery would think are held.
        let mut unreturned: Vec<Taken> = Vec::new();
        loop {
            if !unreturned.is_empty() {
                match self.queue.give_back(&unreturned).await {
                    Ok(()) => unreturned.clear(),
                    Err(e) => {
                        tracing::warn!("dequeuer: cannot give back {} submissions yet ({e})", unreturned.len());
                        tokio::time::sleep(backoff.next().unwrap_or(Policy::REDIS.max)).await;
                        continue;
                    }
                }
            }
            match self.round_keeping(batch, Duration::from_secs(1), &mut unreturned).await {
                Ok(_) => backoff = Policy::REDIS.delays(),
                Err(e) => {
                    let wait = backoff.next().unwrap_or(Policy::REDIS.max);
                    tracing::warn!("dequeuer: {e}; retrying in {wait:?}");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// One round: takes up to `batch` submissions (waiting up to `wait` for
    /// one), checks and commits them, acknowledges them; returns the
    /// verdicts in order. On a Redis or chain error the batch is given back.
    pub async fn round(&self, batch: usize, wait: Duration) -> Result<Vec<Verdict>, String> {
        let mut unreturned = Vec::new();
        let result = self.round_keeping(batch, wait, &mut unreturned).await;
        if !unreturned.is_empty() {
            self.queue.give_back(&unreturned).await.map_err(|e| format!("redis: {e}"))?;
        }
        result
    }

    /// [`Dequeuer::round`], leaving in `unreturned` what it could neither
    /// acknowledge nor give back.
    async fn round_keeping(
        &self,
        batch: usize,
        wait: Duration,
        unreturned: &mut Vec<Taken>,
    ) -> Result<Vec<Verdict>, String> {
        let taken = self.queue.take_some(batch, wait).await.map_err(|e| format!("redis: {e}"))?;
        if taken.is_empty() {
            return Ok(Vec::new());
        }
        match self.handle(&taken).await {
            Ok(verdicts) => {
                let (later, done): (Vec<_>, Vec<_>) =
                    taken.into_iter().zip(&verdicts).partition(|(_, v)| **v == Verdict::Deferred);
                let done: Vec<Taken> = done.into_iter().map(|(t, _)| t).collect();
                let later: Vec<Taken> = later.into_iter().map(|(t, _)| t).collect();
                if let Err(e) = self.queue.ack_all(&done).await {
                    // Committed: given back, they come again and are recognised.
                    unreturned.extend(done);
                    unreturned.extend(later);
                    return Err(format!("redis: {e}"));
                }
                if let Err(e) = self.queue.defer(&later).await {
                    unreturned.extend(later);
                    return Err(format!("redis: {e}"));
                }
                if done.is_empty() && !later.is_empty() {
                    // Only submissions for epochs not open yet: let the monitor catch up.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(verdicts)
            }
            Err(e) => {
                if self.queue.give_back(&taken).await.is_err() {
                    unreturned.extend(taken);
                }
                Err(e)
            }
        }
    }

    async fn handle(&self, taken: &[Taken]) -> Result<Vec<Verdict>, String> {
        // Decode and check the form; gather the epochs to read.
        let mut early: Vec<Option<(Reason, String)>> = Vec::with_capacity(taken.len());
        let mut decoded = Vec::with_capacity(taken.len());
        for t in taken {
            match gateway::decode(&t.payload) {
                Ok((s, at)) => match check_form(&s, &self.market.scope) {
                    Ok(_) => {
                        early.push(None);
                        decoded.push(Some((s, at)));
                    }
                    Err(why) => {
                        early.push(Some((Reason::BadForm, why)));
                        decoded.push(Some((s, at)));
                    }
                },
                Err(why) => {
                    early.push(Some((Reason::Malformed, why)));
                    decoded.push(None);
                }
            }
        }
        let epoch_ids: Vec<u64> = decoded
            .iter()
            .flatten()
            .filter_map(|(s, _)| s.request.as_ref().map(|r| r.epoch_id))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let snapshot = self.read(&epoch_ids).await?;

        let mut verdicts = Vec::with_capacity(taken.len());
        let mut commits = redis::pipe();
        for ((t, early), decoded) in taken.iter().zip(early).zip(decoded) {
            let id = item_id(&t.payload);
            let outcome = match (early, decoded) {
                (Some((reason, why)), d) => Err((reason, why, d)),
                (None, Some((s, at))) => match self.check(&snapshot, s, at, id.clone()).await? {
                    Checked::Pass(c) => Ok(c),
                    Checked::Reject(reason, why, s) => Err((reason, why, Some((s, at)))),
                    Checked::Defer => {
                        verdicts.push(Verdict::Deferred);
                        continue;
                    }
                },
                (None, None) => unreachable!("a submission without a decoding error was decoded"),
            };
            match outcome {
                Ok(c) => {
                    self.add_accept(&mut commits, &c);
                    verdicts.push(Verdict::Accepted);
                }
                Err((reason, why, s)) => {
                    self.add_reject(&mut commits, &id, reason, &why, s.as_ref().map(|(s, _)| s));
                    verdicts.push(Verdict::Rejected(reason, why));
                }
            }
        }
        if verdicts.iter().all(|v| *v == Verdict::Deferred) {
            return Ok(verdicts);
        }
        let mut conn = self.conn.clone();
        let answers: Vec<String> = match commits.query_async(&mut conn).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                // A restarted Redis forgot the scripts; nothing ran.
                load_scripts(&mut conn).await.map_err(|e| format!("redis: {e}"))?;
                commits.query_async(&mut conn).await.map_err(|e| format!("redis: {e}"))?
            }
            other => other.map_err(|e| format!("redis: {e}"))?,
        };
        for (verdict, answer) in verdicts.iter_mut().filter(|v| **v != Verdict::Deferred).zip(answers) {
            *verdict = match answer.as_str() {
                "accepted" => Verdict::Accepted,
                "again" => Verdict::Again,
                other => match (Reason::parse(other), &*verdict) {
                    (Some(r), Verdict::Rejected(_, why)) => Verdict::Rejected(r, why.clone()),
                    (Some(r), _) => Verdict::Rejected(r, Rejection::at_commit(r).detail),
                    (None, _) => return Err(format!("the commit script answered `{other}`")),
                },
            };
        }
        Ok(verdicts)
    }

    /// Per epoch its window and facts (facts cached once known), the anchor
    /// head, and the signer generation (a change empties the signer cache).
    async fn read(&self, epoch_ids: &[u64]) -> Result<Snapshot, String> {
        let keys = &self.market.keys;
        let mut pipe = redis::pipe();
        pipe.get(keys.anchor_head()).get(keys.slots_generation());
        for &e in epoch_ids {
            pipe.get(keys.epoch_window(e));
            pipe.cmd("HMGET").arg(keys.epoch_state(e)).arg("release_block").arg("begin").arg("end");
        }
        let mut conn = self.conn.clone();
        let values: Vec<redis::Value> = pipe.query_async(&mut conn).await.map_err(|e| format!("redis: {e}"))?;
        let mut values = values.into_iter();
        let head: Option<u64> = redis::from_redis_value(values.next().unwrap_or(redis::Value::Nil)).ok().flatten();
        let generation: Option<String> =
            redis::from_redis_value(values.next().unwrap_or(redis::Value::Nil)).ok().flatten();
        {
            let mut signers = self.signers.lock().unwrap_or_else(|p| p.into_inner());
            if signers.generation != generation {
                signers.by_slot.clear();
                signers.generation = generation;
            }
        }
        let mut windows = BTreeMap::new();
        for &e in epoch_ids {
            let window: Option<String> =
                redis::from_redis_value(values.next().unwrap_or(redis::Value::Nil)).ok().flatten();
            let facts: Vec<Option<u64>> =
                redis::from_redis_value(values.next().unwrap_or(redis::Value::Nil)).unwrap_or_default();
            let facts = match facts.as_slice() {
                [Some(release_block), Some(begin), Some(end)] => {
                    Some(EpochFacts { epoch_id: e, release_block: *release_block, begin: *begin, end: *end })
                }
                _ => self.epochs.lock().unwrap_or_else(|p| p.into_inner()).get(&e).copied(),
            };
            if let Some(f) = facts {
                let mut known = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
                known.insert(e, f);
                // The newest epochs are the ones submitted for: bounded.
                while known.len() > 1024 {
                    known.pop_first();
                }
            }
            windows.insert(e, (window, facts));
        }
        Ok(Snapshot { windows, head })
    }

    /// The rules after the form (`lite_node_protocol::submission::judge`:
    /// epoch, deadline, signature, signer, selection) on what this batch
    /// read. `Err` is the chain unreachable.
    async fn check(
        &self,
        snapshot: &Snapshot,
        s: SnapshotSubmission,
        received_at: u64,
        id: String,
    ) -> Result<Checked, String> {
        let facts = BatchFacts { dequeuer: self, snapshot };
        match judge(&s, &self.market.scope, &self.domain, &facts).await? {
            Judgement::Accepted => {
                let epoch_id = s.request.as_ref().map_or(0, |r| r.epoch_id);
                let epoch = facts.epoch_facts(epoch_id).ok_or("an accepted submission's epoch is open")?;
                Ok(Checked::Pass(Candidate { id, submission: s, received_at, epoch }))
            }
            Judgement::Rejected(Rejection { reason, detail }) => Ok(Checked::Reject(reason, detail, s)),
            Judgement::Deferred => Ok(Checked::Defer),
        }
    }

    async fn signer(&self, slot_id: u64, fresh: bool) -> Result<Address, String> {
        if !fresh {
            let signers = self.signers.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((a, at)) = signers.by_slot.get(&slot_id)
                && at.elapsed() < SIGNER_TTL
            {
                return Ok(*a);
            }
        }
        let a = self.chain.signer(slot_id).await?;
        let mut signers = self.signers.lock().unwrap_or_else(|p| p.into_inner());
        if signers.by_slot.len() >= MAX_CACHED_SIGNERS {
            // Submissions naming made-up slots must not grow it without end:
            // expired entries go, and if that is not enough, all of them.
            signers.by_slot.retain(|_, (_, at)| at.elapsed() < SIGNER_TTL);
            if signers.by_slot.len() >= MAX_CACHED_SIGNERS {
                signers.by_slot.clear();
            }
        }
        signers.by_slot.insert(slot_id, (a, Instant::now()));
        Ok(a)
    }

    fn add_accept(&self, pipe: &mut redis::Pipeline, c: &Candidate) {
        let k = &self.market.keys;
        let r = c.submission.request.as_ref().expect("checked");
        let e = c.epoch.epoch_id;
        let record = json!({
            "slot_id": r.slot_id, "project_id": r.project_id, "snapshot_cid": r.snapshot_cid,
            "at": crate::now_secs(),
        });
        let now_ms = crate::now_ms().to_string();
        let mut inv = ACCEPT_SCRIPT.prepare_invoke();
        inv.key(k.votes(e))
            .key(k.processed(&self.market.validator_id, &c.id))
            .key(k.epoch_processed(e))
            .key(k.epoch_processed_set(e))
            .key(k.validations_timeline())
            .key(k.counters())
            .key(k.rejections(e))
            .key(k.epoch_window(e))
            .arg(format!("{}:{}", r.slot_id, r.project_id))
            .arg(&r.snapshot_cid)
            .arg(&c.id)
            .arg(crate::now_secs())
            .arg(EPOCH_STATE_TTL.as_secs())
            .arg(record.to_string());
        for (field, value) in [
            ("submission_id", c.id.clone()),
            ("epoch_id", e.to_string()),
            ("slot_id", r.slot_id.to_string()),
            ("project_id", r.project_id.clone()),
            ("snapshot_cid", r.snapshot_cid.clone()),
            ("deadline", r.deadline.to_string()),
            ("signature", c.submission.signature.clone()),
            ("received_at", c.received_at.to_string()),
            ("validated_at", now_ms.clone()),
        ] {
            inv.arg(field).arg(value);
        }
        pipe.invoke_script(&inv);
    }

    fn add_reject(
        &self,
        pipe: &mut redis::Pipeline,
        id: &str,
        reason: Reason,
        why: &str,
        s: Option<&SnapshotSubmission>,
    ) {
        let k = &self.market.keys;
        let r = s.and_then(|s| s.request.clone()).unwrap_or_default();
        let record = json!({
            "slot_id": r.slot_id, "project_id": r.project_id, "snapshot_cid": r.snapshot_cid,
            "reason": reason.as_str(), "detail": why, "at": crate::now_secs(),
        });
        let mut inv = REJECT_SCRIPT.prepare_invoke();
        inv.key(k.rejections(r.epoch_id))
            .key(k.counters())
            .key(k.processed(&self.market.validator_id, id))
            .arg(id)
            .arg(reason.as_str())
            .arg(record.to_string())
            .arg(EPOCH_STATE_TTL.as_secs());
        pipe.invoke_script(&inv);
    }
}

/// Loads the commit scripts into Redis (EVALSHA needs them there).
pub async fn load_scripts(conn: &mut ConnectionManager) -> redis::RedisResult<()> {
    ACCEPT_SCRIPT.prepare_invoke().load_async(conn).await?;
    REJECT_SCRIPT.prepare_invoke().load_async(conn).await?;
    Ok(())
}

/// Where a submission's epoch stands, from its window and facts in Redis
/// and the anchor head. An epoch not seen here may still be released but
/// not seen yet: a deadline still ahead of the head (and no further than a
/// node may sign from a release at or before it) keeps the submission
/// waiting. Without a head (the event monitor down past its key's expiry)
/// nothing can be told apart: `Err`, and the batch is given back, not judged.
fn standing(
    window: Option<&str>,
    facts: Option<EpochFacts>,
    head: Option<u64>,
    deadline: u64,
) -> Result<EpochStanding, String> {
    let Some(epoch) = facts else {
        let head = head.ok_or("no anchor head in Redis: is the event monitor running?")?;
        let reachable = deadline >= head && deadline <= head.saturating_add(WINDOW_BLOCKS);
        return Ok(if reachable { EpochStanding::NotYetSeen } else { EpochStanding::Unknown });
    };
    Ok(match window {
        Some("open") => EpochStanding::Open { release_block: epoch.release_block },
        _ => EpochStanding::Closed,
    })
}

/// The chain and the epochs as one batch of a dequeuer sees them: the
/// windows and anchor head it read from Redis, the signers it caches.
struct BatchFacts<'a, C> {
    dequeuer: &'a Dequeuer<C>,
    snapshot: &'a Snapshot,
}

impl<C> BatchFacts<'_, C> {
    fn epoch_facts(&self, epoch_id: u64) -> Option<EpochFacts> {
        self.snapshot.windows.get(&epoch_id).and_then(|(_, facts)| *facts)
    }

    fn head(&self) -> Result<u64, String> {
        self.snapshot.head.ok_or_else(|| "no anchor head in Redis: is the event monitor running?".to_owned())
    }
}

impl<C: ChainReads> Facts for BatchFacts<'_, C> {
    async fn epoch(&self, r: &Request) -> Result<EpochStanding, String> {
        let (window, facts) = self.snapshot.windows.get(&r.epoch_id).cloned().unwrap_or((None, None));
        standing(window.as_deref(), facts, self.snapshot.head, r.deadline)
    }

    async fn head(&self) -> Result<u64, String> {
        BatchFacts::head(self)
    }

    async fn signer(&self, slot_id: u64, recovered: Address) -> Result<Address, String> {
        let registered = self.dequeuer.signer(slot_id, false).await?;
        if registered != recovered && registered != Address::ZERO {
            // Perhaps re-registered since it was cached: ask the chain once.
            return self.dequeuer.signer(slot_id, true).await;
        }
        Ok(registered)
    }

    async fn selection(&self, r: &Request) -> Result<Selection, String> {
        let epoch = self.epoch_facts(r.epoch_id).ok_or("the selection of an epoch not open")?;
        self.dequeuer.chain.selection(epoch, r.slot_id, &r.project_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FACTS: EpochFacts = EpochFacts { epoch_id: 5, release_block: 100, begin: 1, end: 1 };

    #[test]
    fn an_open_window_gives_its_release_and_any_other_is_closed() {
        assert_eq!(standing(Some("open"), Some(FACTS), Some(101), 120), Ok(EpochStanding::Open { release_block: 100 }));
        assert_eq!(standing(Some("closed"), Some(FACTS), Some(140), 120), Ok(EpochStanding::Closed));
        // Facts kept after the window key expired: closed, not open.
        assert_eq!(standing(None, Some(FACTS), Some(300), 120), Ok(EpochStanding::Closed));
    }

    #[test]
    fn an_epoch_not_seen_waits_only_while_its_deadline_is_reachable() {
        // Ahead of the head and within a window of it: maybe released, not seen yet.
        assert_eq!(standing(None, None, Some(100), 100), Ok(EpochStanding::NotYetSeen));
        assert_eq!(standing(None, None, Some(100), 100 + WINDOW_BLOCKS), Ok(EpochStanding::NotYetSeen));
        // Passed, or further than any node signs: not released here.
        assert_eq!(standing(None, None, Some(100), 99), Ok(EpochStanding::Unknown));
        assert_eq!(standing(None, None, Some(100), 101 + WINDOW_BLOCKS), Ok(EpochStanding::Unknown));
    }

    #[test]
    fn without_a_head_an_unseen_epoch_is_not_judged() {
        let err = standing(None, None, None, 120).unwrap_err();
        assert!(err.contains("is the event monitor running"), "{err}");
        // A known epoch needs no head to be told.
        assert_eq!(standing(Some("open"), Some(FACTS), None, 120), Ok(EpochStanding::Open { release_block: 100 }));
    }

    #[test]
    fn a_reason_found_at_the_commit_reads_as_what_happened() {
        assert!(Rejection::at_commit(Reason::Duplicate).detail.contains("already submitted this CID"));
        assert!(Rejection::at_commit(Reason::Equivocation).detail.contains("another CID"));
        assert!(Rejection::at_commit(Reason::WindowClosed).detail.contains("window closed"));
    }
}
