//! A reliable work queue on Redis lists: an item taken is moved atomically
//! (`BLMOVE`) onto a processing list and stays there until its worker
//! acknowledges it, so a worker that dies after taking an item loses
//! nothing — [`ReliableQueue::recover`] puts what no live worker holds back
//! on the queue. (The protocol's own dequeuer pops with a plain `BRPOP`: a
//! crash after the pop loses the submission.)
//!
//! Each taken item is also marked `processingSubmission:{id}` with a 5-minute
//! TTL while its worker is on it; an item on the processing list whose mark
//! has expired belongs to a worker that is gone.

use std::time::Duration;

use redis::{AsyncCommands, Direction, aio::ConnectionManager};

use crate::keys::{Keys, PROCESSING_TTL};

/// One queue and its processing list.
#[derive(Clone)]
pub struct ReliableQueue {
    conn: ConnectionManager,
    queue: String,
    processing: String,
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

/// The id an item is marked and deduplicated by: the SHA-256 of its bytes.
pub fn item_id(payload: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(payload.as_bytes()))
}

impl ReliableQueue {
    /// The submission queue of `keys`.
    pub fn submissions(conn: ConnectionManager, keys: &Keys) -> Self {
        Self { conn, queue: keys.submission_queue(), processing: keys.submission_processing() }
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
        let mark = Keys::processing_submission(&item_id(&payload));
        conn.set_ex::<_, _, ()>(mark, "1", PROCESSING_TTL.as_secs()).await?;
        Ok(Some(Taken { payload }))
    }

    /// The item is fully handled: off the processing list, mark removed.
    pub async fn ack(&self, taken: &Taken) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        redis::pipe()
            .atomic()
            .lrem(&self.processing, 1, &taken.payload)
            .ignore()
            .del(Keys::processing_submission(&item_id(&taken.payload)))
            .ignore()
            .query_async::<()>(&mut conn)
            .await
    }

    /// Puts back on the queue every item on the processing list that no live
    /// worker holds (its mark expired, or it was never marked because the
    /// worker died between the move and the mark); returns how many. Run at
    /// start and periodically.
    pub async fn recover(&self) -> redis::RedisResult<usize> {
        let mut conn = self.conn.clone();
        let held: Vec<String> = conn.lrange(&self.processing, 0, -1).await?;
        let mut moved = 0;
        for payload in held {
            let marked: bool = conn.exists(Keys::processing_submission(&item_id(&payload))).await?;
            if marked {
                continue;
            }
            // Only if it is still there: another recoverer may have moved it.
            let removed: i64 = conn.lrem(&self.processing, 1, &payload).await?;
            if removed > 0 {
                conn.rpush::<_, _, ()>(&self.queue, &payload).await?;
                moved += 1;
            }
        }
        Ok(moved)
    }

    /// Items waiting, and items being worked on.
    pub async fn depth(&self) -> redis::RedisResult<(usize, usize)> {
        let mut conn = self.conn.clone();
        Ok((conn.llen(&self.queue).await?, conn.llen(&self.processing).await?))
    }
}
