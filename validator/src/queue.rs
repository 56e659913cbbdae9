//! A reliable work queue on Redis lists. Each worker process (an owner,
//! kept alive by its heartbeat) has a list of its own, `{queue}:held:{owner}`:
//! an item taken is moved atomically (`LMOVE` in a script, or a blocking
//! `BLMOVE`) from the queue onto its taker's list, and stays there until that
//! worker acknowledges it or gives it back. What an item belongs to is where
//! it is, so:
//!
//! - a worker that is slow but alive keeps what it holds, however long it
//!   takes (its heartbeat, renewed every 5 s, is what says it lives);
//! - an acknowledgement removes the item from its own worker's list only,
//!   never another worker's copy;
//! - a worker that dies loses nothing: [`ReliableQueue::recover`] moves the
//!   lists of owners whose heartbeat is gone (`{queue}:holders` names every
//!   owner that ever held an item) back onto the queue, a page at a time.
//!
//! Each taken item is also marked `processingSubmission:{id}` (the
//! submission queue; `{queue}:mark:{id}` for the others) with a 5-minute TTL,
//! holding its owner: for outside tools and an operator's eyes, not for
//! liveness (the validator's dequeuer leaves submissions unmarked unless
//! asked, [`ReliableQueue::unmarked`]). The mark's id is the SHA-1 of the
//! item (`redis.sha1hex` in the take script); the submission's own id is
//! [`item_id`] (the first 128 bits of its SHA-256).
//!
//! (A plain `BRPOP` would lose a submission whose worker crashed after the
//! pop: that is why an item moves onto its worker's list instead.)
//!
//! Delivery is at least once: an item can come back after its worker did
//! the work but died before acknowledging it. Consumers make handling
//! idempotent by the item's id, which is how the dequeuer counts every
//! submission exactly once.

use std::{sync::Arc, time::Duration};

use redis::{AsyncCommands, Direction, Script, aio::ConnectionManager};

use crate::keys::{Keys, PROCESSING_TTL};

/// One queue, and this worker process's list of what it holds.
#[derive(Clone)]
pub struct ReliableQueue {
    conn: ConnectionManager,
    queue: String,
    /// The set of owners that have held items.
    holders: String,
    /// An owner's list, without the owner.
    held_prefix: String,
    /// The mark key without its id.
    mark_prefix: String,
    /// The heartbeat key without the owner.
    heartbeat_prefix: String,
    /// Who this queue's takes belong to.
    owner: Arc<str>,
}

impl std::fmt::Debug for ReliableQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReliableQueue").field("queue", &self.queue).field("owner", &self.owner).finish()
    }
}

/// An item taken off the queue; acknowledge it once it is fully handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    pub payload: String,
}

/// The id an item is known by (a submission's `submissionId`): the SHA-256
/// of its bytes.
pub fn item_id(payload: &str) -> String {
    use sha2::{Digest, Sha256};
    // 128 bits: no two of the submissions a market sees in its lifetime
    // collide, and each id is kept three times (its `processed` key,
    // `EpochProcessed`, the validations timeline).
    hex::encode(&Sha256::digest(payload.as_bytes())[..16])
}

/// The id of an item's mark: the SHA-1 of its bytes, as `redis.sha1hex`
/// computes it inside the take script.
pub fn mark_id(payload: &str) -> String {
    sha1_smol::Sha1::from(payload.as_bytes()).digest().to_string()
}

/// Moves up to ARGV[1] items from KEYS[1] to the owner's list KEYS[2] (as
/// that many `LMOVE … RIGHT LEFT` would, in three calls), marking each
/// `{ARGV[3]}{sha1}` for ARGV[2] seconds unless ARGV[3] is '', and names the
/// owner ARGV[4] in the holders set KEYS[3]; returns them oldest first.
const TAKE_BATCH: &str = r"
redis.call('SADD', KEYS[3], ARGV[4])
local max = tonumber(ARGV[1])
if max < 1 then return {} end
local newest_first = redis.call('LRANGE', KEYS[1], -max, -1)
local n = #newest_first
if n == 0 then return {} end
redis.call('LTRIM', KEYS[1], 0, -(n + 1))
local items = {}
for i = n, 1, -1 do items[#items + 1] = newest_first[i] end
for from = 1, n, 1000 do
  redis.call('LPUSH', KEYS[2], unpack(items, from, math.min(from + 999, n)))
end
if ARGV[3] ~= '' then
  for _, item in ipairs(items) do
    redis.call('SET', ARGV[3] .. redis.sha1hex(item), ARGV[4], 'EX', ARGV[2])
  end
end
return items
";

/// Acknowledges items: removes from the owner's list KEYS[1] each of ARGV[2..]
/// once (from the tail, where the oldest taken are, as `LREM … -1` would),
/// and their marks (`{ARGV[1]}{sha1}`) unless ARGV[1] is ''. A list no
/// longer than a few batches is rewritten in three calls; a longer one (a
/// worker that holds much more than it acknowledges) item by item.
const ACK: &str = r"
local n = #ARGV - 1
if redis.call('LLEN', KEYS[1]) <= 4 * n + 64 then
  local remove = {}
  for i = 2, #ARGV do remove[ARGV[i]] = (remove[ARGV[i]] or 0) + 1 end
  local held = redis.call('LRANGE', KEYS[1], 0, -1)
  local keep = {}
  for i = #held, 1, -1 do
    local r = remove[held[i]]
    if r and r > 0 then remove[held[i]] = r - 1 else keep[#keep + 1] = held[i] end
  end
  redis.call('DEL', KEYS[1])
  -- `keep` runs from the tail: appended from its end (the head-most
  -- first), the list reads as before.
  for from = #keep, 1, -1000 do
    local chunk = {}
    for i = from, math.max(from - 999, 1), -1 do chunk[#chunk + 1] = keep[i] end
    redis.call('RPUSH', KEYS[1], unpack(chunk))
  end
else
  for i = 2, #ARGV do redis.call('LREM', KEYS[1], -1, ARGV[i]) end
end
if ARGV[1] ~= '' then
  for i = 2, #ARGV do redis.call('DEL', ARGV[1] .. redis.sha1hex(ARGV[i])) end
end
return n
";

/// Puts back up to ARGV[1] items of a gone owner's list KEYS[1] at the head
/// of the queue KEYS[2], their marks (`{ARGV[2]}{sha1}`) removed; once the
/// list is empty, the owner ARGV[3] leaves the holders set KEYS[3]. Returns
/// how many it moved. Atomic: a recoverer dying half-way loses nothing.
const RECOVER_PAGE: &str = r"
local moved = 0
for i = 1, tonumber(ARGV[1]) do
  local item = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'RIGHT')
  if not item then break end
  if ARGV[2] ~= '' then redis.call('DEL', ARGV[2] .. redis.sha1hex(item)) end
  moved = moved + 1
end
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('SREM', KEYS[3], ARGV[3]) end
return moved
";

/// Items a recovery moves per script call.
const RECOVER_PAGE_SIZE: usize = 500;

/// A worker's heartbeat lives this long; it is renewed every third of it.
pub const HEARTBEAT_TTL: Duration = Duration::from_secs(15);

/// A fresh id for this process's workers: pid and start time.
pub fn instance_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("{}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
}

impl ReliableQueue {
    fn mark(&self, payload: &str) -> String {
        format!("{}{}", self.mark_prefix, mark_id(payload))
    }

    fn held(&self) -> String {
        format!("{}{}", self.held_prefix, self.owner)
    }

    fn new(conn: ConnectionManager, keys: &Keys, queue: String, mark_prefix: String) -> Self {
        Self {
            conn,
            holders: format!("{queue}:holders"),
            held_prefix: format!("{queue}:held:"),
            queue,
            mark_prefix,
            heartbeat_prefix: keys.worker(""),
            owner: instance_id().into(),
        }
    }

    /// This queue's takes as `owner`'s (a worker process's instance id).
    /// What an owner holds is its own while its heartbeat
    /// ([`ReliableQueue::beat`]) lives; within [`HEARTBEAT_TTL`] of its
    /// death, recovery puts it back.
    pub fn owned_by(mut self, owner: &str) -> Self {
        self.owner = owner.into();
        self
    }

    /// Whose list this queue's takes go to.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The same queue (and owner) on another connection.
    pub fn with_conn(&self, conn: ConnectionManager) -> Self {
        Self { conn, ..self.clone() }
    }

    /// Renews the owner's heartbeat every third of [`HEARTBEAT_TTL`],
    /// forever (run it beside the workers).
    pub async fn keep_beating(self) {
        let mut every = tokio::time::interval(HEARTBEAT_TTL / 3);
        loop {
            every.tick().await;
            if let Err(e) = self.beat().await {
                tracing::warn!("worker heartbeat not renewed ({e}); retrying");
            }
        }
    }

    /// Renews the owner's heartbeat.
    pub async fn beat(&self) -> redis::RedisResult<()> {
        let key = format!("{}{}", self.heartbeat_prefix, self.owner);
        self.conn.clone().set_ex(key, crate::now_secs(), HEARTBEAT_TTL.as_secs()).await
    }

    /// The submission queue of `keys`, each taken item marked
    /// `processingSubmission:{sha1}` (not namespaced).
    pub fn submissions(conn: ConnectionManager, keys: &Keys) -> Self {
        Self::new(conn, keys, keys.submission_queue(), Keys::processing_submission(""))
    }

    /// The same queue without marks: a key written and deleted per item,
    /// for nobody's use but an operator's eyes (the lists say what is held).
    pub fn unmarked(mut self) -> Self {
        self.mark_prefix.clear();
        self
    }

    /// The finalizer's queue of `keys` (epochs whose window closed, and
    /// parts of them).
    pub fn finalization(conn: ConnectionManager, keys: &Keys) -> Self {
        let queue = keys.finalization_queue();
        let marks = format!("{queue}:mark:");
        Self::new(conn, keys, queue, marks)
    }

    /// The level-1 aggregator's queue of `keys`.
    pub fn aggregation(conn: ConnectionManager, keys: &Keys) -> Self {
        let queue = keys.aggregation_queue();
        let marks = format!("{queue}:mark:");
        Self::new(conn, keys, queue, marks)
    }

    /// Adds an item (LPUSH: the oldest is taken first).
    pub async fn push(&self, payload: &str) -> redis::RedisResult<()> {
        self.conn.clone().lpush::<_, _, ()>(&self.queue, payload).await
    }

    /// Takes the oldest item, waiting up to `wait` for one: moved onto this
    /// owner's list (one atomic move: it is never in neither), then marked.
    pub async fn take(&self, wait: Duration) -> redis::RedisResult<Option<Taken>> {
        let mut conn = self.conn.clone();
        // Named a holder before anything is held, so a death right after the
        // move still leaves the list where recovery looks.
        conn.sadd::<_, _, ()>(&self.holders, &*self.owner).await?;
        let payload: Option<String> =
            conn.blmove(&self.queue, self.held(), Direction::Right, Direction::Left, wait.as_secs_f64()).await?;
        let Some(payload) = payload else { return Ok(None) };
        if !self.mark_prefix.is_empty() {
            conn.set_ex::<_, _, ()>(self.mark(&payload), &*self.owner, PROCESSING_TTL.as_secs()).await?;
        }
        Ok(Some(Taken { payload }))
    }

    /// Takes up to `max` items without waiting (none when the queue is
    /// empty), moved and marked in one script, oldest first.
    pub async fn take_batch(&self, max: usize) -> redis::RedisResult<Vec<Taken>> {
        static SCRIPT: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| Script::new(TAKE_BATCH));
        let mut conn = self.conn.clone();
        let items: Vec<String> = SCRIPT
            .key(&self.queue)
            .key(self.held())
            .key(&self.holders)
            .arg(max)
            .arg(PROCESSING_TTL.as_secs())
            .arg(&self.mark_prefix)
            .arg(&*self.owner)
            .invoke_async(&mut conn)
            .await?;
        Ok(items.into_iter().map(|payload| Taken { payload }).collect())
    }

    /// Takes a batch: at once what is there (up to `max`), else waits up to
    /// `wait` for one item.
    pub async fn take_some(&self, max: usize, wait: Duration) -> redis::RedisResult<Vec<Taken>> {
        let batch = self.take_batch(max).await?;
        if !batch.is_empty() {
            return Ok(batch);
        }
        Ok(self.take(wait).await?.into_iter().collect())
    }

    /// The item is fully handled: off this owner's list, mark removed.
    pub async fn ack(&self, taken: &Taken) -> redis::RedisResult<()> {
        self.ack_all(std::slice::from_ref(taken)).await
    }

    /// Acknowledges several items in one script.
    pub async fn ack_all(&self, taken: &[Taken]) -> redis::RedisResult<()> {
        static SCRIPT: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| Script::new(ACK));
        if taken.is_empty() {
            return Ok(());
        }
        let mut inv = SCRIPT.prepare_invoke();
        inv.key(self.held()).arg(&self.mark_prefix);
        for t in taken {
            inv.arg(&t.payload);
        }
        inv.invoke_async::<usize>(&mut self.conn.clone()).await.map(drop)
    }

    /// Puts items back at the end of the queue (to be taken after what is
    /// waiting now), marks removed: for items that must wait.
    pub async fn defer(&self, taken: &[Taken]) -> redis::RedisResult<()> {
        self.put_back(taken, false).await
    }

    /// Gives items back untouched (their worker cannot handle them now, for
    /// example because the chain is unreachable): to the head of the queue,
    /// marks removed.
    pub async fn give_back(&self, taken: &[Taken]) -> redis::RedisResult<()> {
        self.put_back(taken, true).await
    }

    /// Off this owner's list and onto the queue, first in line (`next`) or
    /// last, in one transaction.
    async fn put_back(&self, taken: &[Taken], next: bool) -> redis::RedisResult<()> {
        if taken.is_empty() {
            return Ok(());
        }
        let held = self.held();
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.atomic();
        for t in taken {
            pipe.lrem(&held, -1, &t.payload).ignore();
            if next {
                pipe.rpush(&self.queue, &t.payload).ignore();
            } else {
                pipe.lpush(&self.queue, &t.payload).ignore();
            }
            if !self.mark_prefix.is_empty() {
                pipe.del(self.mark(&t.payload)).ignore();
            }
        }
        pipe.query_async::<()>(&mut conn).await
    }

    /// Puts back on the queue everything held by owners whose heartbeat is
    /// gone, a page at a time (a crash of a worker that held a million items
    /// does not make its recoverer load them at once); returns how many.
    /// Run at start and periodically.
    pub async fn recover(&self) -> redis::RedisResult<usize> {
        let mut conn = self.conn.clone();
        let owners: Vec<String> = conn.smembers(&self.holders).await?;
        let mut moved = 0;
        for owner in owners {
            let alive: bool = conn.exists(format!("{}{owner}", self.heartbeat_prefix)).await?;
            if alive {
                continue;
            }
            moved += self.put_back_list(&owner).await?;
        }
        Ok(moved)
    }

    /// Puts back on the queue, first in line, everything this owner's list
    /// holds; returns how many. For a worker with nothing in hand whose
    /// take or acknowledgement may have lost its answer (Redis restarted
    /// mid-command, the move kept by its append-only file): it may hold
    /// items it does not know of, which recovery leaves to a live owner.
    pub async fn give_back_held(&self) -> redis::RedisResult<usize> {
        self.put_back_list(&self.owner).await
    }

    /// `owner`'s list back onto the queue, a page at a time.
    async fn put_back_list(&self, owner: &str) -> redis::RedisResult<usize> {
        static SCRIPT: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| Script::new(RECOVER_PAGE));
        let mut conn = self.conn.clone();
        let mut moved = 0;
        loop {
            let n: usize = SCRIPT
                .key(format!("{}{owner}", self.held_prefix))
                .key(&self.queue)
                .key(&self.holders)
                .arg(RECOVER_PAGE_SIZE)
                .arg(&self.mark_prefix)
                .arg(owner)
                .invoke_async(&mut conn)
                .await?;
            moved += n;
            if n < RECOVER_PAGE_SIZE {
                return Ok(moved);
            }
        }
    }

    /// Items waiting, and items held by workers (alive or not).
    pub async fn depth(&self) -> redis::RedisResult<(usize, usize)> {
        let mut conn = self.conn.clone();
        let waiting: usize = conn.llen(&self.queue).await?;
        let owners: Vec<String> = conn.smembers(&self.holders).await?;
        let mut held = 0;
        for owner in owners {
            let n: usize = conn.llen(format!("{}{owner}", self.held_prefix)).await?;
            held += n;
        }
        Ok((waiting, held))
    }
}
