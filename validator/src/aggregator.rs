//! The level-1 aggregator: once an epoch's parts are ready
//! (`aggregationQueue`), merges them into the validator's batch and writes
//! `finalized:{epochId}`, queues it for broadcast
//! (`outgoing:broadcast:batch`) and for the chain (`onchain:pending`), and notes it on the batches timeline and
//! this validator's — in one script guarded by `finalized:{epochId}`, so an
//! epoch is finalized once.
//!
//! The batch (docs/protocol.md §11): per project, in project-id order, the
//! winning CID and its votes; the `root` over the sorted `(projectId, cid)`
//! pairs (`consensus::root`); and the batch's own CID — CIDv1 raw sha2-256 of
//! the canonical JSON of `{epochId, projects: [{projectId, snapshotCid,
//! votes}], root}`.

use std::{
    collections::BTreeMap,
    sync::{Arc, LazyLock},
    time::Duration,
};

use lite_node_protocol::{canonical_json::canonical_json, cid::cid};
use redis::{AsyncCommands, Script, aio::ConnectionManager};
use serde_json::{Value, json};

use crate::{
    Market,
    consensus::{self, Finalized},
    finalizer::recover_every,
    now_secs,
    queue::ReliableQueue,
};

/// Batches kept on `outgoing:broadcast:batch` for the P2P gateway (the
/// network of validators takes them from there); older ones are trimmed.
pub const OUTGOING_KEPT: isize = 1_000;

const FINALIZE: &str = r"
-- KEYS: finalized, outgoing, batches timeline, validator batches, state,
--       epochs:active, ActiveEpochs, counters, onchain pending
-- ARGV: batch, broadcast message, epoch, now, kept, latency from the close (ms),
--       ttl, timeline cutoff
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[7]) then return 0 end
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[5]) - 1)
redis.call('ZADD', KEYS[3], ARGV[4], 'local:' .. ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[8])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[8])
redis.call('HSET', KEYS[5], 'level1_status', 'completed', 'level1_completed_at', ARGV[4],
  'phase', 'level1_complete', 'level2_status', 'not_run', 'onchain_status', 'not_run',
  'level1_latency_ms', ARGV[6], 'last_updated', ARGV[4])
redis.call('HINCRBY', KEYS[8], 'finalized', 1)
redis.call('HINCRBY', KEYS[8], 'finalization_latency_ms_sum', ARGV[6])
redis.call('SREM', KEYS[6], ARGV[3])
redis.call('SREM', KEYS[7], ARGV[3])
redis.call('ZADD', KEYS[9], ARGV[3], ARGV[3])
redis.call('ZREMRANGEBYRANK', KEYS[9], 0, -1025)
return 1
";

static FINALIZE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FINALIZE));

/// A validator's level-1 batch of one epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub epoch_id: u64,
    pub projects: BTreeMap<String, Finalized>,
    pub root: String,
}

impl Batch {
    /// The content the batch's CID is taken over.
    pub fn content(&self) -> Value {
        let projects: Vec<Value> = self
            .projects
            .iter()
            .map(|(p, f)| json!({"projectId": p, "snapshotCid": f.cid, "votes": f.votes}))
            .collect();
        json!({"epochId": self.epoch_id, "projects": projects, "root": self.root})
    }

    /// The batch's CID (CIDv1 raw, sha2-256, of the canonical JSON).
    pub fn cid(&self) -> String {
        let bytes = canonical_json(&self.content().to_string()).expect("serde_json writes valid JSON");
        cid(&bytes)
    }
}

/// Level-1 aggregator workers.
#[derive(Clone)]
pub struct Aggregator {
    market: Arc<Market>,
    conn: ConnectionManager,
    queue: ReliableQueue,
}

impl Aggregator {
    pub fn new(market: Arc<Market>, conn: ConnectionManager) -> Self {
        let queue = ReliableQueue::aggregation(conn.clone(), &market.keys);
        Self { market, conn, queue }
    }

    /// Runs until `stop`, its worker on its own connection from `client`.
    pub async fn run(self, client: redis::Client, stop: impl std::future::Future<Output = ()> + Send) {
        let this = Self { queue: self.queue.clone().owned_by(&crate::queue::instance_id()), ..self };
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(this.queue.clone().keep_beating());
        let me = this.clone();
        tasks.spawn(async move {
            let conn = crate::connect_retrying(&client, "aggregator").await;
            let w = Self { queue: me.queue.with_conn(conn.clone()), conn, ..me };
            crate::finalizer::work_items(&w.queue, "aggregator", |payload| {
                let w = &w;
                async move { w.handle(&payload).await.map(|()| crate::finalizer::Handled::Done) }
            })
            .await
        });
        tasks.spawn(recover_every(this.queue.clone(), "aggregator", crate::finalizer::RECOVER_EVERY));
        stop.await;
        tasks.shutdown().await;
    }

    /// Takes one epoch whose parts are ready (waiting up to `wait`) and
    /// finalizes it; false when there was none.
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

    async fn handle(&self, payload: &str) -> Result<(), String> {
        let item: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
        match (item["epoch_id"].as_u64(), item["parts_completed"].as_u64()) {
            (Some(e), Some(parts)) => self.aggregate(e, parts).await.map_err(|err| format!("epoch {e}: {err}")),
            _ => {
                tracing::warn!("aggregator: dropping `{payload}`, which is not an aggregation item");
                Ok(())
            }
        }
    }

    /// Marks `epoch_id`'s level 1 failed for good (`why`), so the queue
    /// moves on to later epochs.
    async fn level1_failed(&self, epoch_id: u64, why: &str) -> Result<(), String> {
        let _: () = self
            .conn
            .clone()
            .hset_multiple(
                self.market.keys.epoch_state(epoch_id),
                &[("level1_status", "failed"), ("phase", "failed"), ("last_updated", &now_secs().to_string())],
            )
            .await
            .map_err(|e| format!("redis: {e}"))?;
        tracing::error!("epoch {epoch_id}: {why}; level 1 failed");
        Ok(())
    }

    async fn aggregate(&self, epoch_id: u64, parts: u64) -> Result<(), String> {
        let k = &self.market.keys;
        let mut conn = self.conn.clone();
        let keys: Vec<String> = (0..parts).map(|i| k.batch_part(epoch_id, i)).collect();
        let bodies: Vec<Option<String>> = if keys.is_empty() {
            Vec::new()
        } else {
            redis::cmd("MGET").arg(&keys).query_async(&mut conn).await.map_err(|e| format!("redis: {e}"))?
        };
        let mut projects = BTreeMap::new();
        for (i, body) in bodies.into_iter().enumerate() {
            // Parts live 2 hours (an aggregator down that long), and a part
            // that does not parse never will: the epoch is counted again from
            // its votes, which live 7 days; without them it fails for good
            // (retrying would hold every later epoch behind it).
            let part = match body.map(|b| serde_json::from_str::<Value>(&b)) {
                Some(Ok(part)) => part,
                Some(Err(e)) => return self.recount(epoch_id, &format!("part {i} of {parts} is not JSON ({e})")).await,
                None => {
                    return self.recount(epoch_id, &format!("part {i} of {parts} expired before aggregation")).await;
                }
            };
            for (project, f) in part["projects"].as_object().into_iter().flatten() {
                projects.insert(
                    project.clone(),
                    Finalized {
                        cid: f["cid"].as_str().unwrap_or_default().to_owned(),
                        votes: f["votes"].as_u64().unwrap_or(0),
                        voters: f["voters"].as_u64().unwrap_or(0),
                    },
                );
            }
        }
        self.finalize(epoch_id, projects).await
    }

    /// An epoch whose parts are lost (`why`), counted again from all its
    /// votes; failed for good when those are gone too.
    async fn recount(&self, epoch_id: u64, why: &str) -> Result<(), String> {
        let mut conn = self.conn.clone();
        let members: Vec<String> =
            conn.zrange(self.market.keys.votes(epoch_id), 0, -1).await.map_err(|e| format!("redis: {e}"))?;
        if members.is_empty() {
            return self.level1_failed(epoch_id, &format!("{why}, and its votes are gone")).await;
        }
        tracing::warn!("epoch {epoch_id}: {why}; counting it again from its {} votes", members.len());
        let tally = consensus::tally(members.iter().filter_map(|m| crate::finalizer::ballot(m)));
        self.finalize(epoch_id, tally.projects).await
    }

    /// Writes the epoch's batch (once).
    async fn finalize(&self, epoch_id: u64, projects: BTreeMap<String, Finalized>) -> Result<(), String> {
        let k = &self.market.keys;
        let mut conn = self.conn.clone();
        let root = consensus::root(&projects);
        let batch = Batch { epoch_id, projects, root };
        let batch_cid = batch.cid();
        let now = now_secs();
        let stored = json!({
            "epoch_id": epoch_id,
            "validator_id": self.market.validator_id,
            "batch_cid": batch_cid,
            "root": batch.root,
            "projects": batch.content()["projects"],
            "finalized_at": now,
        });
        let message = json!({"type": "finalized_batch", "data": stored});
        let closed_at: Option<u64> =
            conn.hget(k.epoch_state(epoch_id), "window_closed_at_ms").await.map_err(|e| format!("redis: {e}"))?;
        let latency = closed_at.map_or(0, |at| crate::now_ms().saturating_sub(at));
        let fresh: i64 = FINALIZE_SCRIPT
            .key(k.finalized(epoch_id))
            .key(k.outgoing_batches())
            .key(k.batches_timeline())
            .key(k.validator_batches(&self.market.validator_id))
            .key(k.epoch_state(epoch_id))
            .key(k.epochs_active())
            .key(k.active_epochs())
            .key(k.counters())
            .key(k.onchain_pending())
            .arg(stored.to_string())
            .arg(message.to_string())
            .arg(epoch_id)
            .arg(now)
            .arg(OUTGOING_KEPT)
            .arg(latency)
            .arg(crate::keys::EPOCH_STATE_TTL.as_secs())
            .arg(now.saturating_sub(crate::keys::TIMELINE_RETENTION.as_secs()))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| format!("redis: {e}"))?;
        if fresh == 1 {
            tracing::info!(
                "epoch {epoch_id}: finalized {} projects in {latency} ms from the window's close, batch {batch_cid}, \
                 root {}",
                batch.projects.len(),
                batch.root
            );
        }
        Ok(())
    }
}
