//! The dequeuer: takes submissions off `submissionQueue` in batches, checks
//! each, and commits the batch's verdicts in one script call — accepted
//! into the epoch's votes, `epoch:{id}:processed`, `EpochProcessed({id})`
//! and the validations timeline (and `processed:{sequencerId}:{submissionId}`
//! if asked, [`Dequeuer::keeping_seed_records`]), or rejected with its
//! [`Reason`] — before acknowledging them. Several workers (tasks or
//! processes) share the queue.
//!
//! **Judged at receipt.** A submission's window and deadline are judged
//! against the anchor head the gateway recorded when it arrived, not the
//! head when a worker gets to it: a backlog at the close drops no vote that
//! arrived in time. The finalizer waits for the epoch's pending
//! submissions (`epochs:pending`) before it counts, and a verdict committed
//! after the count started is `window_closed`.
//!
//! **Exactly once.** The queue delivers at least once (`queue`); every
//! commit is a script that first asks whether this submission id already
//! has a verdict, so a submission redelivered after a crash is acknowledged
//! without being counted again.
//!
//! **One vote per slot, whatever the order.** The first CID a slot names
//! for a project in an epoch is its vote (`epoch:{id}:votes`, shared by
//! every worker and replica); the same CID again is a `duplicate`. Another
//! CID is an `equivocation`, and it voids the slot's vote on that project
//! in that epoch — the first one too — so which of the two arrived first
//! changes nothing in the finalized batch (docs/protocol.md §11).
//!
//! **Bounded chain reads.** A slot's signer is judged as of its epoch's
//! release block, and read at most once between two changes of the slot
//! the event monitor recorded, however many epochs and submissions name it
//! and however many workers ask at once ([`SignerBook`]); slot ids past the
//! registry's total are unregistered without a read. A read that fails gives back only the
//! submissions that needed it.

use std::{
    collections::BTreeMap,
    sync::{Arc, LazyLock, Mutex},
    time::Duration,
};

use alloy::primitives::Address;
use lite_node_core::retry::Policy;
use lite_node_protocol::{
    eip712,
    proto::{Request, SnapshotSubmission},
    submission::{EpochStanding, Facts, Judgement, Rejection, Selection, WINDOW_BLOCKS, caps, judge_recovered},
};
use redis::{Script, aio::ConnectionManager};
use serde_json::json;

pub use lite_node_protocol::submission::Reason;

use crate::{
    Market,
    chain::{ChainReads, EpochFacts},
    gateway,
    keys::{DETAIL_TTL, PROCESSED_TTL, TIMELINE_RETENTION},
    queue::{ReliableQueue, Taken, item_id},
    signers::SignerBook,
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
    /// The chain could not be read for it: given back to the head of the
    /// queue, judged later.
    GivenBack(String),
}

/// What the checks made of one submission.
enum Checked {
    Pass(Candidate),
    Reject(Reason, String, SnapshotSubmission),
    Defer,
    GiveBack(String),
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

/// Checks and commits submissions; cheap to clone (one per worker task).
pub struct Dequeuer<C> {
    market: Arc<Market>,
    chain: Arc<C>,
    conn: ConnectionManager,
    queue: ReliableQueue,
    domain: Arc<alloy::sol_types::Eip712Domain>,
    signers: Arc<SignerBook<C>>,
    epochs: Arc<Mutex<BTreeMap<u64, EpochFacts>>>,
    /// Whether the per-submission keys for outside tools are kept: the
    /// `processingSubmission` mark while held, the `processed` record after.
    records: bool,
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
            records: self.records,
        }
    }
}

/// A submission that passed every check.
struct Candidate {
    id: String,
    submission: SnapshotSubmission,
    received_at: u64,
    epoch: EpochFacts,
}

/// What a batch's first read found: per epoch its facts, and the anchor
/// head now.
struct Snapshot {
    epochs: BTreeMap<u64, Option<EpochFacts>>,
    head: Option<u64>,
}

/// Commits a batch's verdicts in one call, as if item by item in order (a
/// later item sees what an earlier one wrote: the same submission twice in
/// a batch is `again` the second time, a slot's second CID for a project
/// an equivocation). What needs no answer per item is gathered and written
/// once per key at the end with variadic commands, and an epoch's keys are
/// named once per batch: a script's time goes to its calls and arguments,
/// and most of an item's can be shared.
const COMMIT: &str = r"
-- KEYS: counters, pending, validations timeline; per epoch of the batch
--       (6 each): votes, epoch processed, EpochProcessed, rejections,
--       parts total, projects; then each accept's processed key, in
--       order, if the records are kept
-- ARGV: now, detail ttl (votes, projects, EpochProcessed, rejections),
--       timeline cutoff, processed ttl, epochs in the batch, whether to
--       keep processed records ('1' or '0'); then per item
--       (12 each): kind ('a' accept, 'r' reject), submission id, epoch
--       ('' for none: its keys are epoch 0's), the epoch's place among the
--       batch's (1-based), project, slot, cid, deadline, received at,
--       validated at, and a reject's reason and record (JSON) or '', ''
local now, detail_ttl, processed_ttl = ARGV[1], ARGV[2], ARGV[4]
local epochs, records = tonumber(ARGV[5]), ARGV[6] == '1'
local n = (#ARGV - 6) / 12
local processed_key = 3 + epochs * 6
local function ek(e, j) return KEYS[3 + (e - 1) * 6 + j] end
-- Per key, what to write at the end.
local lists, order = {}, {}
local function list(cmd, k)
  local by = lists[cmd]
  if by == nil then by = {}; lists[cmd] = by; order[#order + 1] = cmd end
  local l = by[k]
  if l == nil then l = {}; by[k] = l end
  return l
end
local function variadic(cmd, k, l, answer)
  local out = {}
  for from = 1, #l, 1000 do
    local upto = math.min(from + 999, #l)
    local got = redis.call(cmd, k, unpack(l, from, upto))
    if answer then for j = 1, #got do out[#out + 1] = got[j] end end
  end
  return out
end
-- Which ids already have a verdict: one call per set and per hash.
local judged, ids_of_epoch = {}, {}
for i = 0, n - 1 do
  local a = 6 + i * 12
  local e = tonumber(ARGV[a + 4])
  local l = ids_of_epoch[e]
  if l == nil then l = {}; ids_of_epoch[e] = l end
  l[#l + 1] = ARGV[a + 2]
end
for e = 1, epochs do
  local ids = ids_of_epoch[e]
  if ids then
    local member = variadic('SMISMEMBER', ek(e, 3), ids, true)
    local rejected = variadic('HMGET', ek(e, 4), ids, true)
    for j = 1, #ids do
      if member[j] == 1 or rejected[j] then judged[ids[j]] = true end
    end
  end
end
local answers, counts, pending, closed, ballots, expire = {}, {}, {}, {}, {}, {}
local candidates, listed = 0, {}
local function count(field) counts[field] = (counts[field] or 0) + 1 end
local function reject(rejections, id, why, record)
  local l = list('HSET', rejections)
  l[#l + 1] = id
  l[#l + 1] = record
  expire[rejections] = true
  count('rejected:' .. why)
  answers[#answers + 1] = why
end
local function at_commit(a, why)
  return cjson.encode({slot_id = tonumber(ARGV[a + 6]), project_id = ARGV[a + 5],
    snapshot_cid = ARGV[a + 7], reason = why, at = tonumber(now)})
end
for i = 0, n - 1 do
  local a = 6 + i * 12
  local kind, id, epoch, e = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4])
  -- Every accept has its processed key, whatever becomes of it.
  if kind == 'a' then candidates = candidates + 1 end
  if judged[id] then
    answers[#answers + 1] = 'again'
  else
    judged[id] = true
    if epoch ~= '' then pending[epoch] = (pending[epoch] or 0) + 1 end
    local rejections = ek(e, 4)
    if kind == 'r' then
      reject(rejections, id, ARGV[a + 11], ARGV[a + 12])
    else
      if closed[e] == nil then closed[e] = redis.call('EXISTS', ek(e, 5)) == 1 end
      local votes, project, slot, cid = ek(e, 1), ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
      if closed[e] then
        reject(rejections, id, 'window_closed', at_commit(a, 'window_closed'))
      else
        local ballot = project .. '\31' .. slot .. '\31'
        local b = e .. '\31' .. ballot
        local p = e .. '\31' .. project
        local seen = ballots[b]
        if seen == nil then
          local prev = redis.call('ZRANGE', votes, '[' .. ballot, '[' .. ballot .. '\255', 'BYLEX', 'LIMIT', 0, 1)
          seen = {e = e, ballot = ballot, stored = prev[1]}
          if prev[1] then seen.cid = string.sub(prev[1], #ballot + 1) end
          ballots[b] = seen
        end
        if seen.cid == nil then
          seen.cid = cid
          if records then
            local processed = KEYS[processed_key + candidates]
            redis.call('HSET', processed, 'submission_id', id, 'epoch_id', epoch, 'slot_id', slot,
              'project_id', project, 'snapshot_cid', cid, 'deadline', ARGV[a + 8],
              'received_at', ARGV[a + 9], 'validated_at', ARGV[a + 10])
            redis.call('EXPIRE', processed, processed_ttl)
          end
          local l = list('SADD', ek(e, 2)); l[#l + 1] = id
          l = list('SADD', ek(e, 3)); l[#l + 1] = id
          if not listed[p] then
            listed[p] = true
            l = list('ZADD', ek(e, 6)); l[#l + 1] = 0; l[#l + 1] = project
          end
          l = list('ZADD', KEYS[3]); l[#l + 1] = now; l[#l + 1] = id
          expire[votes], expire[ek(e, 6)], expire[ek(e, 3)] = true, true, true
          count('accepted')
          answers[#answers + 1] = 'accepted'
        elseif seen.cid == cid then
          reject(rejections, id, 'duplicate', at_commit(a, 'duplicate'))
        else
          -- The slot's vote on the project is void, the first one too.
          if seen.cid ~= '' then
            if seen.stored then redis.call('ZREM', votes, seen.stored) end
            seen.stored, seen.cid = nil, ''
          end
          reject(rejections, id, 'equivocation', at_commit(a, 'equivocation'))
        end
      end
    end
  end
end
-- The ballots: a vote, or the bare ballot for a void one.
for _, seen in pairs(ballots) do
  if seen.stored == nil and seen.cid ~= nil then
    local l = list('ZADD', ek(seen.e, 1)); l[#l + 1] = 0; l[#l + 1] = seen.ballot .. seen.cid
  end
end
for _, cmd in ipairs(order) do
  for k, l in pairs(lists[cmd]) do variadic(cmd, k, l, false) end
end
for k in pairs(expire) do redis.call('EXPIRE', k, detail_ttl) end
if lists['ZADD'] and lists['ZADD'][KEYS[3]] then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[3])
end
for field, by in pairs(counts) do redis.call('HINCRBY', KEYS[1], field, by) end
for epoch, by in pairs(pending) do
  if redis.call('HINCRBY', KEYS[2], epoch, -by) <= 0 then redis.call('HDEL', KEYS[2], epoch) end
end
return answers
";

static COMMIT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(COMMIT));

impl<C: ChainReads> Dequeuer<C> {
    pub fn new(market: Arc<Market>, chain: Arc<C>, conn: ConnectionManager) -> Self {
        let queue = ReliableQueue::submissions(conn.clone(), &market.keys).unmarked();
        let domain = Arc::new(eip712::domain(market.chain_id, market.scope.protocol_state));
        let signers = Arc::new(SignerBook::new(chain.clone()));
        Self { market, chain, conn, queue, domain, signers, epochs: Default::default(), records: false }
    }

    /// Also keeps two keys per submission for tools outside the validator: a
    /// `processingSubmission` mark while a submission is held, and its
    /// `processed:{sequencerId}:{submissionId}` record for an hour once
    /// accepted. Nothing here reads them (the lists say what is held, the
    /// votes what was accepted); they are two keys written per submission,
    /// about a fifth of a commit's time and most of an hour's memory.
    pub fn keeping_seed_records(self, keep: bool) -> Self {
        let queue = if keep {
            ReliableQueue::submissions(self.conn.clone(), &self.market.keys).owned_by(self.queue.owner())
        } else {
            self.queue.unmarked()
        };
        Self { queue, records: keep, ..self }
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
        // Each worker holds what it takes in a list of its own (an owner of
        // its own, with its heartbeat), so a worker can put back all it
        // holds without touching another's batch.
        for i in 0..settings.workers.max(1) {
            let (me, client) = (this.clone(), client.clone());
            let owner = format!("{}-{i}", this.queue.owner());
            tasks.spawn(this.queue.clone().owned_by(&owner).keep_beating());
            tasks.spawn(async move {
                let worker = me.with_conn(crate::connect_retrying(&client, "dequeuer").await);
                let worker = Self { queue: worker.queue.clone().owned_by(&owner), ..worker };
                worker.work(settings.batch).await
            });
        }
        tasks.spawn(crate::finalizer::recover_every(this.queue.clone(), "dequeuer", settings.recover_every));
        stop.await;
        tasks.shutdown().await;
    }

    async fn work(&self, batch: usize) {
        let mut backoff = Policy::REDIS.delays();
        // After a round that failed, this worker has nothing in hand, but
        // its list may hold items: ones it could not give back or
        // acknowledge, and ones a take moved there whose answer was lost
        // (Redis restarted mid-command, its append-only file kept the move).
        // Everything on its list goes back before anything new is taken, so
        // a live worker never sits on items that recovery leaves to it.
        let mut reclaim = false;
        loop {
            if reclaim {
                match self.queue.give_back_held().await {
                    Ok(n) => {
                        if n > 0 {
                            tracing::info!("dequeuer: {n} submissions this worker held were put back on the queue");
                        }
                        reclaim = false;
                    }
                    Err(e) => {
                        tracing::warn!("dequeuer: cannot put back what this worker holds yet ({e})");
                        tokio::time::sleep(backoff.next().unwrap_or(Policy::REDIS.max)).await;
                        continue;
                    }
                }
            }
            // What a failed round could not give back is on the list: the
            // reclaim above covers it, so it need not be kept here.
            match self.round_keeping(batch, Duration::from_secs(1), &mut Vec::new()).await {
                Ok(_) => backoff = Policy::REDIS.delays(),
                Err(e) => {
                    reclaim = true;
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
        let verdicts = match self.handle(&taken).await {
            Ok(verdicts) => verdicts,
            Err(e) => {
                if self.queue.give_back(&taken).await.is_err() {
                    unreturned.extend(taken);
                }
                return Err(e);
            }
        };
        let (mut done, mut later, mut back) = (Vec::new(), Vec::new(), Vec::new());
        for (t, v) in taken.into_iter().zip(&verdicts) {
            match v {
                Verdict::Deferred => later.push(t),
                Verdict::GivenBack(_) => back.push(t),
                _ => done.push(t),
            }
        }
        if let Err(e) = self.queue.ack_all(&done).await {
            // Committed: given back, they come again and are recognised.
            unreturned.extend(done.into_iter().chain(later).chain(back));
            return Err(format!("redis: {e}"));
        }
        if let Err(e) = self.queue.defer(&later).await {
            unreturned.extend(later.into_iter().chain(back));
            return Err(format!("redis: {e}"));
        }
        if let Err(e) = self.queue.give_back(&back).await {
            unreturned.extend(back);
            return Err(format!("redis: {e}"));
        }
        if done.is_empty()
            && let Some(Verdict::GivenBack(why)) = verdicts.iter().find(|v| matches!(v, Verdict::GivenBack(_)))
        {
            // Nothing could be judged: the chain is down, so back off.
            return Err(why.clone());
        }
        if done.is_empty() && !later.is_empty() {
            // Only submissions for epochs not open yet: let the monitor catch up.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(verdicts)
    }

    async fn handle(&self, taken: &[Taken]) -> Result<Vec<Verdict>, String> {
        let decoded: Vec<Result<gateway::Received, String>> =
            taken.iter().map(|t| gateway::decode(&t.payload)).collect();
        let epoch_ids: Vec<u64> = decoded
            .iter()
            .flatten()
            .filter_map(|d| d.submission.request.as_ref().map(|r| r.epoch_id))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let snapshot = self.read(&epoch_ids).await?;

        let mut verdicts = Vec::with_capacity(taken.len());
        let mut commits = Vec::with_capacity(taken.len());
        for (t, decoded) in taken.iter().zip(decoded) {
            let id = item_id(&t.payload);
            let received = match decoded {
                Ok(received) => received,
                Err(why) => {
                    self.add_reject(&mut commits, id, Reason::Malformed, &why, None);
                    verdicts.push(Verdict::Rejected(Reason::Malformed, why));
                    continue;
                }
            };
            match self.check(&snapshot, received, id.clone()).await {
                Checked::Pass(c) => {
                    self.add_accept(&mut commits, c);
                    verdicts.push(Verdict::Accepted);
                }
                Checked::Reject(reason, why, s) => {
                    self.add_reject(&mut commits, id, reason, &why, Some(&s));
                    verdicts.push(Verdict::Rejected(reason, why));
                }
                Checked::Defer => verdicts.push(Verdict::Deferred),
                Checked::GiveBack(why) => verdicts.push(Verdict::GivenBack(why)),
            }
        }
        let judged = |v: &Verdict| matches!(v, Verdict::Accepted | Verdict::Rejected(..));
        if !verdicts.iter().any(judged) {
            return Ok(verdicts);
        }
        let mut conn = self.conn.clone();
        // `invoke_async` loads the script and calls again if a restarted
        // Redis forgot it (nothing ran then).
        let answers: Vec<String> =
            self.commit(&commits).invoke_async(&mut conn).await.map_err(|e| format!("redis: {e}"))?;
        let asked = verdicts.iter().filter(|v| judged(v)).count();
        if answers.len() != asked {
            return Err(format!("the commit script answered {} verdicts for {asked} submissions", answers.len()));
        }
        for (verdict, answer) in verdicts.iter_mut().filter(|v| judged(v)).zip(answers) {
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

    /// Per epoch its facts (cached once known), the anchor head, and then
    /// the monitor's record of the slot registry (read after the epochs:
    /// each epoch seen open has the changes up to its release recorded).
    async fn read(&self, epoch_ids: &[u64]) -> Result<Snapshot, String> {
        let keys = &self.market.keys;
        let mut pipe = redis::pipe();
        pipe.get(keys.anchor_head());
        for &e in epoch_ids {
            pipe.cmd("HMGET").arg(keys.epoch_state(e)).arg("release_block").arg("begin").arg("end");
        }
        let mut conn = self.conn.clone();
        let values: Vec<redis::Value> = pipe.query_async(&mut conn).await.map_err(|e| format!("redis: {e}"))?;
        let mut values = values.into_iter();
        let head: Option<u64> = redis::from_redis_value(values.next().unwrap_or(redis::Value::Nil)).ok().flatten();
        let mut epochs = BTreeMap::new();
        for &e in epoch_ids {
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
            epochs.insert(e, facts);
        }
        self.signers.sync(&mut conn, keys).await.map_err(|e| format!("redis: {e}"))?;
        Ok(Snapshot { epochs, head })
    }

    /// The rules (`lite_node_protocol::submission::judge`: form, signature,
    /// signer, epoch, deadline, selection) on what this batch read, the
    /// window and deadline judged at receipt.
    async fn check(&self, snapshot: &Snapshot, received: gateway::Received, id: String) -> Checked {
        let s = received.submission;
        let facts = ItemFacts { dequeuer: self, snapshot, received_head: received.head };
        match judge_recovered(&s, &self.market.scope, &self.domain, &facts, received.signer).await {
            Err(why) => Checked::GiveBack(why),
            Ok(Judgement::Accepted) => {
                let epoch_id = s.request.as_ref().map_or(0, |r| r.epoch_id);
                match snapshot.epochs.get(&epoch_id).copied().flatten() {
                    Some(epoch) => Checked::Pass(Candidate { id, submission: s, received_at: received.at, epoch }),
                    None => Checked::GiveBack("an accepted submission's epoch is not known".into()),
                }
            }
            Ok(Judgement::Rejected(Rejection { reason, detail })) => Checked::Reject(reason, detail, s),
            Ok(Judgement::Deferred) => Checked::Defer,
        }
    }

    /// The commit script's call for `items`: the batch's keys, each epoch's
    /// once, then every accept's processed key.
    fn commit(&self, items: &[Commit]) -> redis::ScriptInvocation<'static> {
        let k = &self.market.keys;
        let mut epochs: Vec<u64> = items.iter().map(|i| i.epoch.unwrap_or(0)).collect();
        epochs.sort_unstable();
        epochs.dedup();
        let mut inv = COMMIT_SCRIPT.prepare_invoke();
        inv.key(k.counters()).key(k.pending()).key(k.validations_timeline());
        for &e in &epochs {
            inv.key(k.votes(e))
                .key(k.epoch_processed(e))
                .key(k.epoch_processed_set(e))
                .key(k.rejections(e))
                .key(k.parts_total(e))
                .key(k.epoch_projects(e));
        }
        if self.records {
            for item in items.iter().filter(|i| i.reject.is_none()) {
                inv.key(k.processed(&self.market.validator_id, &item.id));
            }
        }
        let now = crate::now_secs();
        inv.arg(now)
            .arg(DETAIL_TTL.as_secs())
            .arg(now.saturating_sub(TIMELINE_RETENTION.as_secs()))
            .arg(PROCESSED_TTL.as_secs())
            .arg(epochs.len())
            .arg(if self.records { "1" } else { "0" });
        let validated_at = crate::now_ms();
        for item in items {
            let place = epochs.binary_search(&item.epoch.unwrap_or(0)).unwrap_or(0) + 1;
            let r = item.request.as_ref();
            inv.arg(if item.reject.is_some() { "r" } else { "a" })
                .arg(&item.id)
                .arg(item.epoch.map(|e| e.to_string()).unwrap_or_default())
                .arg(place)
                .arg(r.map_or("", |r| r.project_id.as_str()))
                .arg(r.map_or(0, |r| r.slot_id))
                .arg(r.map_or("", |r| r.snapshot_cid.as_str()))
                .arg(r.map_or(0, |r| r.deadline))
                .arg(item.received_at)
                .arg(validated_at);
            match &item.reject {
                Some((reason, record)) => inv.arg(reason.as_str()).arg(record),
                None => inv.arg("").arg(""),
            };
        }
        inv
    }

    /// A candidate to accept (the script may still find it judged, a
    /// duplicate, an equivocation, or its window closed).
    fn add_accept(&self, items: &mut Vec<Commit>, c: Candidate) {
        items.push(Commit {
            id: c.id,
            epoch: Some(c.epoch.epoch_id),
            request: c.submission.request,
            received_at: c.received_at,
            reject: None,
        });
    }

    /// A rejection, with its fields clipped: what a rejection record keeps
    /// is bounded whatever was sent.
    fn add_reject(
        &self,
        items: &mut Vec<Commit>,
        id: String,
        reason: Reason,
        why: &str,
        s: Option<&SnapshotSubmission>,
    ) {
        let r = s.and_then(|s| s.request.as_ref());
        let clip = |text: &str, max: usize| text.chars().take(max).collect::<String>();
        let record = match r {
            Some(r) => json!({
                "slot_id": r.slot_id,
                "project_id": clip(&r.project_id, caps::PROJECT_ID),
                "snapshot_cid": clip(&r.snapshot_cid, caps::CID),
                "reason": reason.as_str(), "detail": clip(why, 300), "at": crate::now_secs(),
            }),
            None => json!({"reason": reason.as_str(), "detail": clip(why, 300), "at": crate::now_secs()}),
        };
        // The record holds what is kept, clipped; the script needs no more.
        items.push(Commit {
            id,
            epoch: r.map(|r| r.epoch_id),
            request: None,
            received_at: 0,
            reject: Some((reason, record.to_string())),
        });
    }
}

/// One item of a batch's commit.
struct Commit {
    id: String,
    /// `None`: no epoch could be read (its keys are epoch 0's).
    epoch: Option<u64>,
    request: Option<Request>,
    received_at: u64,
    /// A rejection's reason and record; `None` for an accept.
    reject: Option<(Reason, String)>,
}

/// Loads the commit scripts into Redis (EVALSHA needs them there).
pub async fn load_scripts(conn: &mut ConnectionManager) -> redis::RedisResult<()> {
    COMMIT_SCRIPT.prepare_invoke().load_async(conn).await?;
    Ok(())
}

/// Where a submission's epoch stood when it arrived. A known epoch's
/// window was open if the anchor head at receipt (`received_head`) was
/// before the window's close. An epoch not seen here may still be released
/// but not seen yet: while the head now (`head`) has not passed the
/// deadline, and the deadline is no further than a node may sign from a
/// release at receipt, the submission waits. Without a head now (the event
/// monitor down past its key's expiry) nothing can be told apart: `Err`,
/// and the submission is given back, not judged.
fn standing(
    facts: Option<EpochFacts>,
    window_blocks: u64,
    received_head: Option<u64>,
    head: Option<u64>,
    deadline: u64,
) -> Result<EpochStanding, String> {
    let Some(epoch) = facts else {
        let head = head.ok_or("no anchor head in Redis: is the event monitor running?")?;
        let received = received_head.unwrap_or(head);
        let reachable = deadline >= head && deadline <= received.saturating_add(WINDOW_BLOCKS);
        return Ok(if reachable { EpochStanding::NotYetSeen } else { EpochStanding::Unknown });
    };
    let at = received_head.or(head).ok_or("no anchor head in Redis: is the event monitor running?")?;
    Ok(if at < crate::window_closes(epoch.release_block, window_blocks) {
        EpochStanding::Open { release_block: epoch.release_block }
    } else {
        EpochStanding::Closed
    })
}

/// The chain and the epochs as one submission of a batch is judged by: the
/// epochs and anchor head the batch read from Redis, the head when the
/// submission arrived, the signers the dequeuer caches.
struct ItemFacts<'a, C> {
    dequeuer: &'a Dequeuer<C>,
    snapshot: &'a Snapshot,
    received_head: Option<u64>,
}

impl<C: ChainReads> Facts for ItemFacts<'_, C> {
    async fn epoch(&self, r: &Request) -> Result<EpochStanding, String> {
        let facts = self.snapshot.epochs.get(&r.epoch_id).copied().flatten();
        standing(facts, self.dequeuer.market.window_blocks, self.received_head, self.snapshot.head, r.deadline)
    }

    /// The head the deadline is judged by: the one at receipt.
    async fn head(&self) -> Result<u64, String> {
        self.received_head
            .or(self.snapshot.head)
            .ok_or_else(|| "no anchor head in Redis: is the event monitor running?".to_owned())
    }

    /// As of the release block, or (an epoch not open) the newest block
    /// the monitor's record covers — the anchor head before it recorded
    /// anything.
    async fn signer(&self, slot_id: u64, at: Option<u64>) -> Result<Address, String> {
        let signers = &self.dequeuer.signers;
        let at = at.or_else(|| signers.now_block()).or(self.snapshot.head);
        signers.signer(slot_id, at).await
    }

    /// As [`ItemFacts::signer`]: as of the release block.
    async fn enabled(&self, signer: Address, at: Option<u64>) -> Result<bool, String> {
        let signers = &self.dequeuer.signers;
        let at = at.or_else(|| signers.now_block()).or(self.snapshot.head);
        signers.enabled(signer, at).await
    }

    async fn selection(&self, r: &Request) -> Result<Selection, String> {
        let epoch =
            self.snapshot.epochs.get(&r.epoch_id).copied().flatten().ok_or("the selection of an epoch not open")?;
        self.dequeuer.chain.selection(epoch, r.slot_id, &r.project_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FACTS: EpochFacts = EpochFacts { epoch_id: 5, release_block: 100, begin: 1, end: 1 };

    #[test]
    fn a_known_epochs_window_is_judged_by_the_head_at_receipt() {
        let open = Ok(EpochStanding::Open { release_block: 100 });
        // A window of 10 blocks: open through block 110.
        assert_eq!(standing(Some(FACTS), 10, Some(110), Some(500), 120), open, "arrived in time, judged late");
        assert_eq!(standing(Some(FACTS), 10, Some(111), Some(111), 120), Ok(EpochStanding::Closed));
        // Queued without a head at receipt (by hand): the head now.
        assert_eq!(standing(Some(FACTS), 10, None, Some(101), 120), open);
    }

    #[test]
    fn an_epoch_not_seen_waits_only_while_its_deadline_is_reachable() {
        // Ahead of the head and within a window of it: maybe released, not seen yet.
        assert_eq!(standing(None, 10, Some(100), Some(100), 100), Ok(EpochStanding::NotYetSeen));
        assert_eq!(standing(None, 10, Some(100), Some(100), 100 + WINDOW_BLOCKS), Ok(EpochStanding::NotYetSeen));
        // Passed now, or further than any node signs from the head at receipt.
        assert_eq!(standing(None, 10, Some(100), Some(100), 99), Ok(EpochStanding::Unknown));
        assert_eq!(standing(None, 10, Some(100), Some(140), 140), Ok(EpochStanding::NotYetSeen));
        assert_eq!(standing(None, 10, Some(100), Some(141), 140), Ok(EpochStanding::Unknown));
        assert_eq!(standing(None, 10, Some(100), Some(100), 101 + WINDOW_BLOCKS), Ok(EpochStanding::Unknown));
    }

    #[test]
    fn without_a_head_an_unseen_epoch_is_not_judged() {
        let err = standing(None, 10, Some(100), None, 120).unwrap_err();
        assert!(err.contains("is the event monitor running"), "{err}");
        // A known epoch needs only the head at receipt.
        assert_eq!(standing(Some(FACTS), 10, Some(101), None, 120), Ok(EpochStanding::Open { release_block: 100 }));
    }

    #[test]
    fn a_reason_found_at_the_commit_reads_as_what_happened() {
        assert!(Rejection::at_commit(Reason::Duplicate).detail.contains("already submitted this CID"));
        assert!(Rejection::at_commit(Reason::Equivocation).detail.contains("another CID"));
        assert!(Rejection::at_commit(Reason::WindowClosed).detail.contains("already being finalized"));
    }
}
