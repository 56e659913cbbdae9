//! The state tracker: pre-computed views for dashboards and gap detection,
//! from the timelines and sets the other components write, never by `SCAN`.
//! Nothing depends on it to stay bounded: timelines are trimmed to a day by
//! whoever writes them, and per-epoch keys expire with the epoch (7 days).
//!
//! | key | every | TTL |
//! |---|---|---|
//! | `metrics:current_epoch` | 15 s | 30 s |
//! | `dashboard:summary`, `stats:current` | 30 s | 60 s |
//! | `metrics:participation` | 150 s | 300 s |
//! | `epochs:gaps` (+ `submissions_count` of active epochs) | 30 s | 24 h, members older than 1 h dropped |

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use redis::{AsyncCommands, aio::ConnectionManager};
use serde_json::{Value, json};

use crate::{Market, now_secs};

/// An epoch whose window closed this long ago without a level-1 batch is a
/// gap.
pub const GAP_AFTER: Duration = Duration::from_secs(120);

/// Writes the tracker's keys.
#[derive(Clone)]
pub struct Tracker {
    market: Arc<Market>,
    conn: ConnectionManager,
}

impl Tracker {
    pub fn new(market: Arc<Market>, conn: ConnectionManager) -> Self {
        Self { market, conn }
    }

    /// Runs the schedule above until `stop`; Redis errors are logged and the
    /// next tick tries again.
    pub async fn run(self, stop: impl std::future::Future<Output = ()> + Send) {
        let work = async {
            let mut tick: u64 = 0;
            let mut every = tokio::time::interval(Duration::from_secs(15));
            loop {
                every.tick().await;
                let mut jobs: Vec<(&str, redis::RedisResult<()>)> = vec![("current epoch", self.current_epoch().await)];
                if tick.is_multiple_of(2) {
                    jobs.push(("dashboard", self.dashboard().await.map(|_| ())));
                    jobs.push(("gaps", self.gaps().await.map(|_| ())));
                }
                if tick.is_multiple_of(10) {
                    jobs.push(("participation", self.participation().await.map(|_| ())));
                }
                for (what, result) in jobs {
                    if let Err(e) = result {
                        tracing::warn!("state tracker: {what} not updated ({e}); next tick tries again");
                    }
                }
                tick += 1;
            }
        };
        tokio::select! {
            () = work => {}
            () = stop => {}
        }
    }

    /// Timeline entries in the last `secs`.
    async fn count_since(&self, key: &str, secs: u64, prefix: Option<&str>) -> redis::RedisResult<u64> {
        let from = now_secs().saturating_sub(secs);
        let mut conn = self.conn.clone();
        match prefix {
            None => conn.zcount(key, from, "+inf").await,
            Some(p) => {
                let members: Vec<String> = conn.zrangebyscore(key, from, "+inf").await?;
                Ok(members.iter().filter(|m| m.starts_with(p)).count() as u64)
            }
        }
    }

    /// The dashboard summary, written as `dashboard:summary` (JSON) and
    /// `stats:current` (hash), and returned.
    pub async fn dashboard(&self) -> redis::RedisResult<Value> {
        let summary = self.summary().await?;
        let k = &self.market.keys;
        let fields: Vec<(String, String)> =
            summary.as_object().expect("an object").iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
        redis::pipe()
            .atomic()
            .set_ex(k.dashboard_summary(), summary.to_string(), 60)
            .ignore()
            .del(k.stats_current())
            .ignore()
            .hset_multiple(k.stats_current(), &fields)
            .ignore()
            .expire(k.stats_current(), 60)
            .ignore()
            .query_async::<()>(&mut self.conn.clone())
            .await?;
        Ok(summary)
    }

    /// The dashboard summary as it is now, written nowhere (what the monitor
    /// API answers).
    pub async fn summary(&self) -> redis::RedisResult<Value> {
        let k = &self.market.keys;
        let epochs = k.epochs_timeline();
        let (epochs_1m, epochs_5m) =
            (self.count_since(&epochs, 60, Some("open:")).await?, self.count_since(&epochs, 300, Some("open:")).await?);
        let batches = k.batches_timeline();
        let (batches_1m, batches_5m) =
            (self.count_since(&batches, 60, None).await?, self.count_since(&batches, 300, None).await?);
        let subs = k.submissions_timeline();
        let (submissions_1m, submissions_5m) =
            (self.count_since(&subs, 60, None).await?, self.count_since(&subs, 300, None).await?);
        let vals = k.validations_timeline();
        let (validations_1m, validations_5m) =
            (self.count_since(&vals, 60, None).await?, self.count_since(&vals, 300, None).await?);
        let ours = self.count_since(&k.validator_batches(&self.market.validator_id), 300, None).await?;
        let mut conn = self.conn.clone();
        let counters: BTreeMap<String, u64> = conn.hgetall(k.counters()).await?;
        let queued: u64 = conn.llen(k.submission_queue()).await?;
        let active: Vec<u64> = conn.smembers(k.epochs_active()).await?;
        let summary = json!({
            "active_validators": u64::from(ours > 0),
            "active_epochs": active.len(),
            "epochs_1m": epochs_1m, "epochs_5m": epochs_5m,
            "batches_1m": batches_1m, "batches_5m": batches_5m,
            "submissions_1m": submissions_1m, "submissions_5m": submissions_5m,
            "validations_1m": validations_1m, "validations_5m": validations_5m,
            "epochs_rate": epochs_5m as f64 / 5.0, "batch_rate": batches_5m as f64 / 5.0,
            "submissions_received": counters.get("received").copied().unwrap_or(0),
            "submissions_accepted": counters.get("accepted").copied().unwrap_or(0),
            "submissions_rejected": counters.iter().filter(|(k, _)| k.starts_with("rejected:")).map(|(_, v)| v).sum::<u64>(),
            "queue_depth": queued,
            "updated_at": now_secs(),
        });
        Ok(summary)
    }

    /// 24-hour participation, written as `metrics:participation` and
    /// returned.
    pub async fn participation(&self) -> redis::RedisResult<Value> {
        let value = self.participation_now().await?;
        self.conn.clone().set_ex::<_, _, ()>(self.market.keys.participation(), value.to_string(), 300).await?;
        Ok(value)
    }

    /// 24-hour participation as it is now, written nowhere: epochs whose
    /// window closed (one still open cannot have been missed yet), and those
    /// this validator finalized. Level 2 (the validators' network) is not
    /// built yet: its inclusions are 0.
    pub async fn participation_now(&self) -> redis::RedisResult<Value> {
        let k = &self.market.keys;
        let day = 24 * 3600;
        let total = self.count_since(&k.epochs_timeline(), day, Some("close:")).await?;
        let participated = self.count_since(&k.validator_batches(&self.market.validator_id), day, None).await?;
        let level1 = self.count_since(&k.batches_timeline(), day, Some("local:")).await?;
        let rate = if total == 0 { 0.0 } else { (participated as f64 / total as f64).min(1.0) };
        let value = json!({
            "validator_id": self.market.validator_id,
            "epochs_total_24h": total,
            "epochs_participated_24h": participated,
            "level1_batches_24h": level1,
            "level2_inclusions_24h": 0,
            "participation_rate": rate,
            "inclusion_rate": 0.0,
            "updated_at": now_secs(),
        });
        Ok(value)
    }

    /// The newest active epoch's phase and progress, as
    /// `metrics:current_epoch` (windows are counted in anchor blocks).
    pub async fn current_epoch(&self) -> redis::RedisResult<()> {
        let k = &self.market.keys;
        let mut conn = self.conn.clone();
        let active: Vec<u64> = conn.smembers(k.epochs_active()).await?;
        let Some(&epoch_id) = active.iter().max() else { return Ok(()) };
        let state: BTreeMap<String, String> = conn.hgetall(k.epoch_state(epoch_id)).await?;
        let head: Option<u64> = conn.get(k.anchor_head()).await?;
        let submissions: u64 = conn.scard(k.epoch_processed(epoch_id)).await?;
        let closes: Option<u64> = state.get("window_closes_block").and_then(|v| v.parse().ok());
        let value = json!({
            "epoch_id": epoch_id,
            "phase": state.get("phase"),
            "window_status": state.get("window_status"),
            "window_duration_blocks": self.market.window_blocks,
            "blocks_remaining": closes.zip(head).map(|(c, h)| c.saturating_sub(h)),
            "anchor_head": head,
            "submissions_received": submissions,
            "updated_at": now_secs(),
        });
        conn.set_ex::<_, _, ()>(k.current_epoch(), value.to_string(), 30).await
    }

    /// Records epochs whose window closed more than [`GAP_AFTER`] ago
    /// without a level-1 batch (`{epochId}:missing_level1`), or, where this
    /// validator acts on chain, not finalized there
    /// (`{epochId}:missing_onchain`), or not attested because this
    /// validator did not watch it whole (`{epochId}:not_watched`, wherever
    /// it acts: its gossip intake was cut off, or the validator restarted
    /// and opened it late), drops gaps
    /// since filled and those older than an hour, refreshes active epochs'
    /// `submissions_count`. Returns the gaps now listed.
    pub async fn gaps(&self) -> redis::RedisResult<Vec<String>> {
        let k = &self.market.keys;
        let mut conn = self.conn.clone();
        let now = now_secs();
        // Gaps older than an hour are dropped, so only the last hour's closes matter.
        let members: Vec<(String, u64)> =
            conn.zrangebyscore_withscores(k.epochs_timeline(), now.saturating_sub(3600), "+inf").await?;
        let closes: Vec<(u64, u64)> =
            members.into_iter().filter_map(|(m, at)| Some((m.strip_prefix("close:")?.parse().ok()?, at))).collect();
        let mut exists = redis::pipe();
        for (epoch_id, _) in &closes {
            exists.exists(k.finalized(*epoch_id));
            exists
                .cmd("HMGET")
                .arg(k.epoch_state(*epoch_id))
                .arg("onchain_status")
                .arg("release_block")
                .arg("intake_since_at_close");
        }
        type Found = (bool, (Option<String>, Option<u64>, Option<String>));
        let found: Vec<Found> = if closes.is_empty() { Vec::new() } else { exists.query_async(&mut conn).await? };
        let mut gaps = redis::pipe();
        for ((epoch_id, at), (finalized, (onchain, release_block, since))) in closes.into_iter().zip(found) {
            // Not watched whole (a restart, a cut-off intake), wherever it
            // acts: a gap at once, whatever it finalized.
            let since = since.and_then(|s| s.parse::<u64>().ok());
            // Scored when first found (NX): it ages out an hour after that.
            if release_block.is_some_and(|r| crate::monitor::not_watched_whole(r, since).is_some()) {
                gaps.cmd("ZADD")
                    .arg(k.epochs_gaps())
                    .arg("NX")
                    .arg(now)
                    .arg(format!("{epoch_id}:not_watched"))
                    .ignore();
            }
            let due = at + GAP_AFTER.as_secs() <= now;
            let gap = format!("{epoch_id}:missing_level1");
            if finalized {
                gaps.zrem(k.epochs_gaps(), &gap).ignore();
            } else if due {
                gaps.zadd(k.epochs_gaps(), &gap, now).ignore();
            }
            // On chain: only where this validator acts on chain (a status
            // other than `not_run`); an epoch it did not watch whole is a gap
            // of its own, at once (it will not be attested).
            let gap = format!("{epoch_id}:missing_onchain");
            match onchain.as_deref() {
                Some("finalized") => {
                    gaps.zrem(k.epochs_gaps(), &gap).ignore();
                }
                // Not attested: not watched whole (listed above).
                Some("not_run" | "pending" | "skipped") | None => {}
                Some(_) if due => {
                    gaps.zadd(k.epochs_gaps(), &gap, now).ignore();
                }
                Some(_) => {}
            }
        }
        gaps.zrembyscore(k.epochs_gaps(), "-inf", now.saturating_sub(3600)).ignore();
        gaps.expire(k.epochs_gaps(), 24 * 3600).ignore();
        let active: Vec<u64> = conn.smembers(k.epochs_active()).await?;
        for e in active {
            let n: u64 = conn.scard(k.epoch_processed(e)).await?;
            let exists: bool = conn.exists(k.epoch_state(e)).await?;
            if exists {
                gaps.hset(k.epoch_state(e), "submissions_count", n).ignore();
            }
        }
        gaps.query_async::<()>(&mut conn).await?;
        conn.zrange(k.epochs_gaps(), 0, -1).await
    }
}
