//! A reliable work queue on Redis lists: an item taken is moved atomically
//! (`BLMOVE`) onto a processing list and stays there until its worker
//! acknowledges it, so a worker that dies after taking an item loses
//! nothing — [`ReliableQueue::recover`] puts what no live worker holds back
//! on the queue. (The protocol's own dequeuer pops with a plain `BRPOP`: a
//! crash after the pop loses the submission.)
//!
//! Each taken item is also marked `processingSubmission:{id}` with a 5-minute
//! TTL while its worker is on it; an item on the processing list whose mark
//! has expired belongs to a worker that is gone. The mark's id is the SHA-1
//! of the item, which Redis computes itself (`redis.sha1hex`), so a batch is
//! moved and marked in one atomic script. It only names the mark; the
//! submission's own id is [`item_id`] (SHA-256).
//!
//! Delivery is at least once: an item can come back after its worker did
//! the work but died before acknowledging it (or, rarely, when a recovery
//! runs between a blocking take and its mark). Consumers make handling
//! idempotent by the item's id, which is how the dequeuer counts every
//! submission exactly once.

use std::time::Duration;

use redis::{AsyncCommands, Direction, Script, aio::ConnectionManager};

use crate::keys::{Keys, PROCESSING_TTL};

/// One queue and its processing list.
#[derive(Clone)]
pub struct ReliableQueue {
    conn: ConnectionManager,
    queue: String,
    processing: String,
    /// The mark key without its id.
    mark_prefix: String,
    /// The heartbeat key without the owner.
    heartbeat_prefix: String,
    /// Who this queue's takes are marked as (a worker process's instance
    /// id, kept alive by [`ReliableQueue::beat`]); unowned marks say `1`
    /// and count as live until they expire.
    owner: Option<std::sync::Arc<str>>,
}

impl std::fmt::Debug for ReliableQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReliableQueue").field("queue", &self.queue).finish_non_exhaustive()
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
    hex::encode(Sha256::digest(payload.as_bytes()))
}

/// The id of an item's `processingSubmission:{id}` mark: the SHA-1 of its
/// bytes, as `redis.sha1hex` computes it inside the take script.
pub fn mark_id(payload: &str) -> String {
    sha1_smol::Sha1::from(payload.as_bytes()).digest().to_string()
}

/// Moves up to ARGV[1] items from KEYS[1] to KEYS[2], marking each
/// `{ARGV[3]}{sha1}` = ARGV[4] for ARGV[2] seconds; returns them oldest
/// first.
const TAKE_BATCH: &str = r"
local items = {}
for i = 1, tonumber(ARGV[1]) do
  local item = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not item then break end
  redis.call('SET', ARGV[3] .. redis.sha1hex(item), ARGV[4], 'EX', ARGV[2])
  items[#items + 1] = item
end
return items
";

/// Puts one held item back (KEYS: processing, queue, mark; ARGV: item),
/// if it is still held: atomic, so a recoverer dying half-way loses nothing.
const RECOVER_ONE: &str = r"
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
return 1
";

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

    fn mark_value(&self) -> &str {
        self.owner.as_deref().unwrap_or("1")
    }

    fn new(conn: ConnectionManager, keys: &Keys, queue: String, processing: String, mark_prefix: String) -> Self {
        Self { conn, queue, processing, mark_prefix, heartbeat_prefix: keys.worker(""), owner: None }
    }

    /// Marks this queue's takes as `owner`'s: a worker whose heartbeat
    /// ([`ReliableQueue::beat`]) has stopped holds nothing, so what it held
    /// is recovered within [`HEARTBEAT_TTL`] of its death instead of the
    /// marks' 5 minutes.
    pub fn owned_by(mut self, owner: &str) -> Self {
        self.owner = Some(owner.into());
        self
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

    /// Renews the owner's heartbeat (a no-op for an unowned queue).
    pub async fn beat(&self) -> redis::RedisResult<()> {
        let Some(owner) = &self.owner else { return Ok(()) };
        let key = format!("{}{owner}", self.heartbeat_prefix);
        self.conn.clone().set_ex(key, crate::now_secs(), HEARTBEAT_TTL.as_secs()).await
    }

    /// The submission queue of `keys`.
    pub fn submissions(conn: ConnectionManager, keys: &Keys) -> Self {
        let mark_prefix = Keys::processing_submission("");
        Self::new(conn, keys, keys.submission_queue(), keys.submission_processing(), mark_prefix)
    }

    /// The finalizer's queue of `keys` (epochs whose window closed, and
    /// parts of them).
    pub fn finalization(conn: ConnectionManager, keys: &Keys) -> Self {
        let (queue, processing) = (keys.finalization_queue(), keys.finalization_processing());
        Self::new(conn, keys, queue, processing.clone(), format!("{processing}:"))
    }

    /// The level-1 aggregator's queue of `keys`.
    pub fn aggregation(conn: ConnectionManager, keys: &Keys) -> Self {
        let (queue, processing) = (keys.aggregation_queue(), keys.aggregation_processing());
        Self::new(conn, keys, queue, processing.clone(), format!("{processing}:"))
    }

    /// Adds an item (LPUSH: the oldest is taken first).
    pub async fn push(&self, payload: &str) -> redis::RedisResult<()> {
        self.conn.clone().lpush::<_, _, ()>(&self.queue, payload).await
    }

    /// Takes the oldest item, waiting up to `wait` for one: moved onto the
    /// processing list and marked as being worked on.
    pub async fn take(&self, wait: Duration) -> redis::RedisResult<Option<Taken>> {
        let mut conn = self.conn.clone();
        let payload: Option<String> =
            conn.blmove(&self.queue, &self.processing, Direction::Right, Direction::Left, wait.as_secs_f64()).await?;
        let Some(payload) = payload else { return Ok(None) };
        let mark = self.mark(&payload);
        conn.set_ex::<_, _, ()>(mark, self.mark_value(), PROCESSING_TTL.as_secs()).await?;
        Ok(Some(Taken { payload }))
    }

    /// Takes up to `max` items without waiting (none when the queue is
    /// empty), moved and marked atomically, oldest first.
    pub async fn take_batch(&self, max: usize) -> redis::RedisResult<Vec<Taken>> {
        static SCRIPT: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| Script::new(TAKE_BATCH));
        let mut conn = self.conn.clone();
        let items: Vec<String> = SCRIPT
            .key(&self.queue)
            .key(&self.processing)
            .arg(max)
            .arg(PROCESSING_TTL.as_secs())
            .arg(&self.mark_prefix)
            .arg(self.mark_value())
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

    /// The item is fully handled: off the processing list, mark removed.
    pub async fn ack(&self, taken: &Taken) -> redis::RedisResult<()> {
        self.ack_all(std::slice::from_ref(taken)).await
    }

    /// Acknowledges several items in one transaction.
    pub async fn ack_all(&self, taken: &[Taken]) -> redis::RedisResult<()> {
        if taken.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.atomic();
        for t in taken {
            pipe.lrem(&self.processing, 1, &t.payload).ignore();
            pipe.del(self.mark(&t.payload)).ignore();
        }
        pipe.query_async::<()>(&mut conn).await
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

    /// Off the processing list and onto the queue, first in line (`next`) or
    /// last, in one transaction.
    async fn put_back(&self, taken: &[Taken], next: bool) -> redis::RedisResult<()> {
        if taken.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.atomic();
        for t in taken {
            pipe.lrem(&self.processing, 1, &t.payload).ignore();
            if next {
                pipe.rpush(&self.queue, &t.payload).ignore();
            } else {
                pipe.lpush(&self.queue, &t.payload).ignore();
            }
            pipe.del(self.mark(&t.payload)).ignore();
        }
        pipe.query_async::<()>(&mut conn).await
    }

    /// Puts back on the queue every item on the processing list that no live
    /// worker holds — its mark expired, its owner's heartbeat stopped, or it
    /// was never marked because the worker died between the move and the
    /// mark; returns how many. Run at start and periodically.
    pub async fn recover(&self) -> redis::RedisResult<usize> {
        static SCRIPT: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| Script::new(RECOVER_ONE));
        let mut conn = self.conn.clone();
        let held: Vec<String> = conn.lrange(&self.processing, 0, -1).await?;
        let mut moved = 0;
        for payload in held {
            let mark = self.mark(&payload);
            let owner: Option<String> = conn.get(&mark).await?;
            let live = match owner.as_deref() {
                None => false,
                Some("1") => true,
                Some(owner) => conn.exists(format!("{}{owner}", self.heartbeat_prefix)).await?,
            };
            if live {
                continue;
            }
            // Only if it is still there: another recoverer may have moved it.
            let n: i64 =
                SCRIPT.key(&self.processing).key(&self.queue).key(&mark).arg(&payload).invoke_async(&mut conn).await?;
            moved += n as usize;
        }
        Ok(moved)
    }

    /// Items waiting, and items being worked on.
    pub async fn depth(&self) -> redis::RedisResult<(usize, usize)> {
        let mut conn = self.conn.clone();
        Ok((conn.llen(&self.queue).await?, conn.llen(&self.processing).await?))
    }
}
