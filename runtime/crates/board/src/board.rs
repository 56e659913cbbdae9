//! What one full node's coordinator and workers share on Redis, and the
//! only ways to change it. Keys live under `cluster:{name}:` (`name`: the
//! data market and slot):
//!
//! - `member:{id}` — a member's heartbeat (its [`Member`] record), expiring
//!   after its TTL; `members` — every id that ever joined (pruned on read).
//! - `package` — the compute package, plugin interface and assignment mode
//!   the coordinator runs (stated at its start and at every epoch it opens);
//!   a member on another is refused by name when it joins.
//! - `epochs` — a stream of the epochs the coordinator opened.
//! - `epoch:{e}` — the epoch's work (text the coordinator chose);
//!   `epoch:{e}:token`, `:holder`, `:result` — per item index: its fencing
//!   token (a counter bumped on every assignment), who holds it, and its
//!   result once accepted.
//! - `work:{worker}` — a stream of assignments to one worker, read by its
//!   consumer group; an entry not acknowledged within the lease (which the
//!   worker renews while it computes) is taken back with `XAUTOCLAIM`;
//!   `streams` — the workers that have one (a gone worker's is deleted when
//!   the next epoch opens).
//! - `stats` — counters: results refused by the fence, entries reclaimed.
//!
//! A result is accepted only with its item's current token, checked and
//! stored in one script (`COMPLETE`, which stores it once: `HSETNX`): a
//! worker paused or cut off past its lease, whose item was given again — to
//! another worker or to itself — cannot complete it with the token it was
//! first given. Every assignment bumps the token (`CLAIM`); least backlog's
//! claims the item and appends the worker's stream entry in one script
//! (`ASSIGN`), so a lost connection never leaves an item held by a worker
//! that was not told. [`Board::take_over`] hands over what a gone worker
//! held or never read. Every script that writes an
//! epoch's items first checks that the epoch is open, so a claim or result
//! racing the epoch's close cannot bring its keys back.

use std::{collections::BTreeMap, sync::LazyLock, time::Duration};

use anyhow::{Context, Result};
use redis::{AsyncCommands, Script, aio::ConnectionManager, streams};
use serde::{Deserialize, Serialize};

/// The consumer group on every worker's stream.
const GROUP: &str = "workers";

/// Who a member is and what it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: String,
    /// The compute package (commit) it loaded.
    pub package: String,
    /// Its plugin interface version.
    pub api: String,
    /// Its assignment mode (`peer-index`, `least-backlog`).
    #[serde(default)]
    pub assign: String,
    /// Its lease on least backlog's assignments (ms): it renews them within
    /// it, so it must be the coordinator's.
    #[serde(default)]
    pub lease_ms: u64,
    /// This process (a second one under the same id is refused while the
    /// first one's heartbeat holds).
    #[serde(default)]
    pub instance: String,
}

/// A member the board does not take, and why: the operator's to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// It runs another compute package, plugin interface or assignment
    /// mode than the coordinator's.
    Package(String),
    /// Another live process holds its id.
    Taken(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Package(why) | Refused::Taken(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Refused {}

/// One assignment as a worker reads it from its stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The stream entry (acknowledged once the result is in).
    pub entry: String,
    pub epoch_id: u64,
    pub index: usize,
    pub token: u64,
}

/// What became of a result offered with a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    Accepted,
    /// The item was given again since this token: refused and counted.
    Fenced,
    /// Its result is in already (this token's own, offered twice).
    AlreadyDone,
    /// The epoch is closed (or gone from Redis): nothing is kept.
    Closed,
}

/// Whether a member's heartbeat found a coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Joined {
    /// The coordinator stated what it runs, and the member runs the same.
    Matched,
    /// No coordinator has stated what it runs on this board (yet).
    Unstated,
}

/// Claims items: for each, bumps its token and names its holder, unless
/// its result is in or the epoch is not open (-1) or, with `if-free`, a
/// live member other than the claimer holds it (-2). KEYS: token, holder,
/// result hashes, the epoch's work. ARGV: worker, member key prefix, mode
/// (`force` or `if-free`), then the indices. One answer per index.
const CLAIM: &str = r"
local out = {}
if redis.call('EXISTS', KEYS[4]) == 0 then
  for i = 4, #ARGV do out[#out + 1] = -1 end
  return out
end
for i = 4, #ARGV do
  local index = ARGV[i]
  local answer
  if redis.call('HEXISTS', KEYS[3], index) == 1 then
    answer = -1
  else
    local holder = redis.call('HGET', KEYS[2], index)
    if ARGV[3] == 'if-free' and holder and holder ~= ARGV[1] and redis.call('EXISTS', ARGV[2] .. holder) == 1 then
      answer = -2
    else
      answer = redis.call('HINCRBY', KEYS[1], index, 1)
      redis.call('HSET', KEYS[2], index, ARGV[1])
    end
  end
  out[#out + 1] = answer
end
return out
";

/// Accepts each result only with its item's current token, once. KEYS:
/// token, result, stats, the epoch's work. ARGV: (index, token, result)
/// triples. Per triple: 1 accepted, 0 fenced (counted), 2 done already,
/// 3 the epoch is not open.
const COMPLETE: &str = r"
local out = {}
if redis.call('EXISTS', KEYS[4]) == 0 then
  for i = 1, #ARGV, 3 do out[#out + 1] = 3 end
  return out
end
for i = 1, #ARGV, 3 do
  local answer
  if redis.call('HGET', KEYS[1], ARGV[i]) ~= ARGV[i + 1] then
    redis.call('HINCRBY', KEYS[3], 'fenced', 1)
    answer = 0
  elseif redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 2]) == 0 then
    answer = 2
  else
    answer = 1
  end
  out[#out + 1] = answer
end
return out
";

/// Claims items for a worker (as [`CLAIM`] with `force`) and appends each
/// assignment to the worker's stream, in one script. KEYS: token, holder,
/// result hashes, the worker's stream, the epoch's work. ARGV: worker,
/// epoch, then the indices. Per index its token, or -1: the result is in,
/// or the epoch is not open.
const ASSIGN: &str = r"
local out = {}
if redis.call('EXISTS', KEYS[5]) == 0 then
  for i = 3, #ARGV do out[#out + 1] = -1 end
  return out
end
for i = 3, #ARGV do
  local index = ARGV[i]
  if redis.call('HEXISTS', KEYS[3], index) == 1 then
    out[#out + 1] = -1
  else
    local token = redis.call('HINCRBY', KEYS[1], index, 1)
    redis.call('HSET', KEYS[2], index, ARGV[1])
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', 20000, '*', 'epoch', ARGV[2], 'index', index, 'token', token)
    out[#out + 1] = token
  end
end
return out
";

/// Opens an epoch and announces it, once. KEYS: the epoch's work, the
/// epochs stream. ARGV: work, epoch id. 1 opened, 0 open already.
const OPEN: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', 64, '*', 'epoch', ARGV[2])
  return 1
end
return 0
";

/// Leaves, if the member record is still this process's own (a member
/// refused because another process took its id must not remove that
/// one). KEYS: the member key, the members set. ARGV: id, its record.
const LEAVE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[2] then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[1])
  return 1
end
return 0
";

static OPEN_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(OPEN));
static LEAVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LEAVE));
static CLAIM_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CLAIM));
static ASSIGN_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ASSIGN));
static COMPLETE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(COMPLETE));

/// One full node's shared state on Redis.
#[derive(Clone)]
pub struct Board {
    conn: ConnectionManager,
    prefix: String,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Board").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl Board {
    /// The board of full node `name` on the Redis at `conn`.
    pub fn new(conn: ConnectionManager, name: &str) -> Self {
        Self { conn, prefix: format!("cluster:{name}:") }
    }

    fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    fn epoch_key(&self, epoch_id: u64, part: &str) -> String {
        if part.is_empty() {
            self.key(&format!("epoch:{epoch_id}"))
        } else {
            self.key(&format!("epoch:{epoch_id}:{part}"))
        }
    }

    // ---- membership ----

    /// The coordinator states what every member must run: its compute
    /// package, plugin interface, assignment mode and lease (ms).
    pub async fn set_package(&self, package: &str, api: &str, assign: &str, lease_ms: u64) -> Result<()> {
        let record = serde_json::to_string(&(package, api, assign, lease_ms))?;
        self.conn.clone().set::<_, _, ()>(self.key("package"), record).await.context("writing the cluster's package")
    }

    /// Joins (or renews) `member` for `ttl`; refused, naming both sides,
    /// when it runs another package, interface or assignment mode than the
    /// coordinator's. [`Joined::Unstated`] while no coordinator has said
    /// what it runs (it may not have started yet, or it is configured for
    /// another full node).
    pub async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<Joined> {
        let mut conn = self.conn.clone();
        let member_key = self.key(&format!("member:{}", member.id));
        let (wanted, current): (Option<String>, Option<String>) =
            redis::pipe().get(self.key("package")).get(&member_key).query_async(&mut conn).await?;
        let joined = match wanted {
            None => Joined::Unstated,
            Some(wanted) => {
                let (package, api, assign, lease_ms): (String, String, String, u64) =
                    serde_json::from_str(&wanted).context("the cluster's package record")?;
                if package != member.package || api != member.api {
                    return Err(Refused::Package(format!(
                        "member {} runs compute package {} on plugin interface {}, the coordinator {} on {}: start it \
                         on the coordinator's (SNAPSHOTTER_COMPUTE_REPO_COMMIT and the same lite-node release)",
                        member.id, member.package, member.api, package, api
                    ))
                    .into());
                }
                if assign != member.assign {
                    return Err(Refused::Package(format!(
                        "member {} assigns work by {}, the coordinator by {}: set LITE_NODE_CLUSTER_ASSIGN={} on the \
                         worker",
                        member.id, member.assign, assign, assign
                    ))
                    .into());
                }
                if lease_ms != member.lease_ms {
                    return Err(Refused::Package(format!(
                        "member {} holds assignments for {} ms, the coordinator gives them for {} ms: set \
                         LITE_NODE_CLUSTER_LEASE_SECS to the coordinator's on the worker",
                        member.id, member.lease_ms, lease_ms
                    ))
                    .into());
                }
                Joined::Matched
            }
        };
        if let Some(other) = current.and_then(|c| serde_json::from_str::<Member>(&c).ok())
            && other.instance != member.instance
        {
            return Err(Refused::Taken(format!(
                "member id {} is held by another live process ({}): give this one its own LITE_NODE_WORKER_ID, or \
                 stop the other",
                member.id, other.instance
            ))
            .into());
        }
        let record = serde_json::to_string(member)?;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        redis::pipe()
            .cmd("SET")
            .arg(&member_key)
            .arg(record)
            .arg("PX")
            .arg(ttl_ms)
            .ignore()
            .sadd(self.key("members"), &member.id)
            .ignore()
            .exec_async(&mut conn)
            .await
            .context("writing a heartbeat")?;
        Ok(joined)
    }

    /// Leaves at once (an orderly stop): its items go to others without
    /// waiting for its heartbeat to lapse. Only its own membership: `false`
    /// when another process holds the id now.
    pub async fn leave(&self, member: &Member) -> Result<bool> {
        let left: i64 = LEAVE_SCRIPT
            .key(self.key(&format!("member:{}", member.id)))
            .key(self.key("members"))
            .arg(&member.id)
            .arg(serde_json::to_string(member)?)
            .invoke_async(&mut self.conn.clone())
            .await
            .context("leaving the cluster")?;
        Ok(left == 1)
    }

    /// The members whose heartbeat holds, sorted by id.
    pub async fn live_members(&self) -> Result<Vec<Member>> {
        let mut conn = self.conn.clone();
        let mut ids: Vec<String> = conn.smembers(self.key("members")).await?;
        ids.sort_unstable();
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let keys: Vec<String> = ids.iter().map(|id| self.key(&format!("member:{id}"))).collect();
        let records: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query_async(&mut conn).await?;
        let mut live = Vec::new();
        for (id, record) in ids.iter().zip(records) {
            match record.map(|r| serde_json::from_str::<Member>(&r)) {
                Some(Ok(member)) => live.push(member),
                _ => {
                    let _: () = conn.srem(self.key("members"), id).await?;
                }
            }
        }
        Ok(live)
    }

    // ---- epochs and items ----

    /// Opens an epoch with its work (once: `false` when it was open
    /// already, e.g. a coordinator restarted mid-epoch) and announces it.
    pub async fn open_epoch(&self, epoch_id: u64, work: &str) -> Result<bool> {
        // In one script: a coordinator stopped half-way cannot leave an
        // epoch open that was never announced (peer-index workers would
        // never hear of it).
        let opened: i64 = OPEN_SCRIPT
            .key(self.epoch_key(epoch_id, ""))
            .key(self.key("epochs"))
            .arg(work)
            .arg(epoch_id)
            .invoke_async(&mut self.conn.clone())
            .await
            .context("opening an epoch")?;
        Ok(opened == 1)
    }

    /// The epoch's work as opened, if it is.
    pub async fn epoch_work(&self, epoch_id: u64) -> Result<Option<String>> {
        Ok(self.conn.clone().get(self.epoch_key(epoch_id, "")).await?)
    }

    /// The epochs announced after stream entry `after` (`"0"`: all the
    /// stream keeps, the last 64 or so), with the last entry read;
    /// waits up to `block` for one (not at all for zero).
    pub async fn epochs_after(&self, after: &str, block: Duration) -> Result<(Vec<u64>, String)> {
        let mut opts = streams::StreamReadOptions::default().count(500);
        if !block.is_zero() {
            opts = opts.block(block.as_millis().max(1) as usize);
        }
        let reply: Option<streams::StreamReadReply> =
            self.conn.clone().xread_options(&[self.key("epochs")], &[after], &opts).await?;
        let mut last = after.to_owned();
        let mut epochs = Vec::new();
        for entry in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
            if let Some(e) = entry.get::<String>("epoch").and_then(|e| e.parse().ok()) {
                epochs.push(e);
            }
            last = entry.id;
        }
        Ok((epochs, last))
    }

    /// Claims item `index` of `epoch_id` for `worker`: its new token, or
    /// `None` when its result is in, or (`only_if_free`) a live member other
    /// than `worker` holds it.
    pub async fn claim(&self, epoch_id: u64, index: usize, worker: &str, only_if_free: bool) -> Result<Option<u64>> {
        Ok(self.claim_many(epoch_id, &[index], worker, only_if_free).await?.pop().flatten())
    }

    /// [`Board::claim`] for many items in one script (one round trip).
    pub async fn claim_many(
        &self,
        epoch_id: u64,
        indices: &[usize],
        worker: &str,
        only_if_free: bool,
    ) -> Result<Vec<Option<u64>>> {
        if indices.is_empty() {
            return Ok(Vec::new());
        }
        let tokens: Vec<i64> = CLAIM_SCRIPT
            .key(self.epoch_key(epoch_id, "token"))
            .key(self.epoch_key(epoch_id, "holder"))
            .key(self.epoch_key(epoch_id, "result"))
            .key(self.epoch_key(epoch_id, ""))
            .arg(worker)
            .arg(self.key("member:"))
            .arg(if only_if_free { "if-free" } else { "force" })
            .arg(indices)
            .invoke_async(&mut self.conn.clone())
            .await
            .context("claiming items")?;
        Ok(tokens.into_iter().map(|t| u64::try_from(t).ok()).collect())
    }

    /// Offers item `index`'s result under `token` (see [`Completion`]).
    pub async fn complete(&self, epoch_id: u64, index: usize, token: u64, result: &str) -> Result<Completion> {
        let mut answers = self.complete_many(epoch_id, &[(index, token, result)]).await?;
        Ok(answers.pop().unwrap_or(Completion::AlreadyDone))
    }

    /// [`Board::complete`] for many results in one script (one round trip).
    pub async fn complete_many(&self, epoch_id: u64, results: &[(usize, u64, &str)]) -> Result<Vec<Completion>> {
        if results.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = COMPLETE_SCRIPT.key(self.epoch_key(epoch_id, "token"));
        invocation.key(self.epoch_key(epoch_id, "result")).key(self.key("stats")).key(self.epoch_key(epoch_id, ""));
        for (index, token, result) in results {
            invocation.arg(index).arg(token).arg(result);
        }
        let answers: Vec<i64> = invocation.invoke_async(&mut self.conn.clone()).await.context("offering results")?;
        Ok(answers
            .into_iter()
            .map(|a| match a {
                1 => Completion::Accepted,
                0 => Completion::Fenced,
                3 => Completion::Closed,
                _ => Completion::AlreadyDone,
            })
            .collect())
    }

    /// Each item's holder, for items without a result.
    pub async fn unfinished(&self, epoch_id: u64, items: usize) -> Result<BTreeMap<usize, Option<String>>> {
        let mut conn = self.conn.clone();
        let holders: BTreeMap<usize, String> = conn.hgetall(self.epoch_key(epoch_id, "holder")).await?;
        let done: std::collections::BTreeSet<usize> = conn.hkeys(self.epoch_key(epoch_id, "result")).await?;
        Ok((0..items).filter(|i| !done.contains(i)).map(|i| (i, holders.get(&i).cloned())).collect())
    }

    /// How many of the epoch's accepted results each worker computed (an
    /// item's holder is the one its current token was given to: the one
    /// whose result was accepted).
    pub async fn computed_by(&self, epoch_id: u64) -> Result<BTreeMap<String, usize>> {
        let mut conn = self.conn.clone();
        let holders: BTreeMap<usize, String> = conn.hgetall(self.epoch_key(epoch_id, "holder")).await?;
        let done: Vec<usize> = conn.hkeys(self.epoch_key(epoch_id, "result")).await?;
        let mut by = BTreeMap::new();
        for worker in done.iter().filter_map(|i| holders.get(i)) {
            *by.entry(worker.clone()).or_insert(0) += 1;
        }
        Ok(by)
    }

    /// How many of the epoch's results are in, or `None` when the epoch is
    /// not open (closed, or lost with Redis's data): one round trip, cheap
    /// to poll.
    pub async fn done(&self, epoch_id: u64) -> Result<Option<usize>> {
        let (open, done): (bool, usize) = redis::pipe()
            .exists(self.epoch_key(epoch_id, ""))
            .hlen(self.epoch_key(epoch_id, "result"))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(open.then_some(done))
    }

    /// The accepted results, by item index.
    pub async fn results(&self, epoch_id: u64) -> Result<BTreeMap<usize, String>> {
        Ok(self.conn.clone().hgetall(self.epoch_key(epoch_id, "result")).await?)
    }

    /// Removes what the board holds of `epoch_id`.
    pub async fn close_epoch(&self, epoch_id: u64) -> Result<()> {
        let keys: Vec<String> = ["", "token", "holder", "result"].iter().map(|p| self.epoch_key(epoch_id, p)).collect();
        let _: () = self.conn.clone().del(keys).await?;
        Ok(())
    }

    /// The board's counters (`fenced`, `reclaimed`).
    pub async fn stats(&self) -> Result<BTreeMap<String, u64>> {
        Ok(self.conn.clone().hgetall(self.key("stats")).await?)
    }

    // ---- least backlog: assignments over each worker's stream ----

    /// Makes `worker`'s stream and its consumer group (idempotent).
    pub async fn open_stream(&self, worker: &str) -> Result<()> {
        let mut conn = self.conn.clone();
        let _: () = conn.sadd(self.key("streams"), worker).await?;
        let created: redis::RedisResult<()> =
            conn.xgroup_create_mkstream(self.key(&format!("work:{worker}")), GROUP, "0").await;
        match created {
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => other.context("creating a worker's stream"),
        }
    }

    /// Deletes the streams of workers not in `live` (gone for good, or
    /// lapsed: one that comes back makes its stream again); how many.
    pub async fn forget_streams(&self, live: &[String]) -> Result<usize> {
        let mut conn = self.conn.clone();
        let ids: Vec<String> = conn.smembers(self.key("streams")).await?;
        let gone: Vec<&String> = ids.iter().filter(|id| !live.contains(id)).collect();
        if gone.is_empty() {
            return Ok(0);
        }
        let mut pipe = redis::pipe();
        for id in &gone {
            pipe.del(self.key(&format!("work:{id}"))).ignore().srem(self.key("streams"), *id).ignore();
        }
        pipe.exec_async(&mut conn).await.context("deleting gone workers' streams")?;
        Ok(gone.len())
    }

    /// Renews `worker`'s lease on entries it is still computing (resets
    /// their idle time; an entry taken back already is not brought back).
    pub async fn renew(&self, worker: &str, entries: &[&str]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let _: redis::Value = redis::cmd("XCLAIM")
            .arg(self.key(&format!("work:{worker}")))
            .arg(GROUP)
            .arg(worker)
            .arg(0)
            .arg(entries)
            .arg("JUSTID")
            .query_async(&mut self.conn.clone())
            .await
            .context("renewing a lease")?;
        Ok(())
    }

    /// Claims item `index` for `worker` and sends it the assignment, in one
    /// script: a connection lost half-way cannot leave an item held by a
    /// worker that was not told.
    pub async fn assign(&self, epoch_id: u64, index: usize, worker: &str) -> Result<Option<u64>> {
        Ok(self.assign_many(epoch_id, &[index], worker).await?.pop().flatten())
    }

    /// [`Board::assign`] for many items to one worker, in one script.
    pub async fn assign_many(&self, epoch_id: u64, indices: &[usize], worker: &str) -> Result<Vec<Option<u64>>> {
        if indices.is_empty() {
            return Ok(Vec::new());
        }
        self.open_stream(worker).await?;
        let tokens: Vec<i64> = ASSIGN_SCRIPT
            .key(self.epoch_key(epoch_id, "token"))
            .key(self.epoch_key(epoch_id, "holder"))
            .key(self.epoch_key(epoch_id, "result"))
            .key(self.key(&format!("work:{worker}")))
            .key(self.epoch_key(epoch_id, ""))
            .arg(worker)
            .arg(epoch_id)
            .arg(indices)
            .invoke_async(&mut self.conn.clone())
            .await
            .context("assigning items")?;
        Ok(tokens.into_iter().map(|t| u64::try_from(t).ok()).collect())
    }

    /// `worker`'s next assignments (new ones, then — after a restart — any
    /// it was given and had not acknowledged); waits up to `block`.
    pub async fn next_assignments(&self, worker: &str, block: Duration) -> Result<Vec<Assignment>> {
        self.open_stream(worker).await?;
        let key = self.key(&format!("work:{worker}"));
        let mut conn = self.conn.clone();
        // Its own pending entries first (given before a restart).
        let own = streams::StreamReadOptions::default().group(GROUP, worker).count(64);
        let pending: Option<streams::StreamReadReply> = conn.xread_options(&[&key], &["0"], &own).await?;
        let mut out = parse(pending);
        // New ones too, even beside its own pending entries: an entry whose
        // compute keeps failing must not keep the rest from being read.
        {
            let opts =
                if block.is_zero() || !out.is_empty() { own } else { own.block(block.as_millis().max(1) as usize) };
            let fresh: Option<streams::StreamReadReply> = conn.xread_options(&[&key], &[">"], &opts).await?;
            out.extend(parse(fresh));
        }
        Ok(out)
    }

    /// `worker` is done with stream entry `entry`.
    pub async fn ack(&self, worker: &str, entry: &str) -> Result<()> {
        self.ack_many(worker, &[entry]).await
    }

    /// `worker` is done with these stream entries (one `XACK`).
    pub async fn ack_many(&self, worker: &str, entries: &[&str]) -> Result<()> {
        if !entries.is_empty() {
            let _: usize = self.conn.clone().xack(self.key(&format!("work:{worker}")), GROUP, entries).await?;
        }
        Ok(())
    }

    /// Takes over everything given to `worker`, which is gone: what it read
    /// and did not acknowledge, and what it never read.
    pub async fn take_over(&self, worker: &str) -> Result<Vec<Assignment>> {
        let mut taken = self.reclaim(worker, Duration::ZERO).await?;
        let key = self.key(&format!("work:{worker}"));
        let mut conn = self.conn.clone();
        loop {
            let opts = streams::StreamReadOptions::default().group(GROUP, "coordinator").count(500);
            let reply: Option<streams::StreamReadReply> = match conn.xread_options(&[&key], &[">"], &opts).await {
                Ok(reply) => reply,
                Err(e) if e.code() == Some("NOGROUP") => return Ok(taken),
                Err(e) => return Err(e).context("taking over a worker's assignments"),
            };
            let unread = parse(reply);
            if unread.is_empty() {
                return Ok(taken);
            }
            let ids: Vec<&str> = unread.iter().map(|a| a.entry.as_str()).collect();
            let _: usize = conn.xack(&key, GROUP, &ids).await?;
            let _: u64 = conn.hincr(self.key("stats"), "reclaimed", ids.len()).await?;
            taken.extend(unread);
        }
    }

    /// Takes back from `worker` every assignment it read and has not
    /// acknowledged within `lease`, with `XAUTOCLAIM`, and acknowledges them
    /// on its stream; what they were.
    pub async fn reclaim(&self, worker: &str, lease: Duration) -> Result<Vec<Assignment>> {
        let key = self.key(&format!("work:{worker}"));
        let mut conn = self.conn.clone();
        let mut start = "0-0".to_owned();
        let mut taken = Vec::new();
        loop {
            let opts = streams::StreamAutoClaimOptions::default().count(100);
            let reply: streams::StreamAutoClaimReply = match conn
                .xautoclaim_options(&key, GROUP, "coordinator", lease.as_millis() as usize, &start, opts)
                .await
            {
                Ok(reply) => reply,
                Err(e) if e.code() == Some("NOGROUP") => return Ok(taken),
                Err(e) => return Err(e).context("reclaiming a worker's assignments"),
            };
            let ids: Vec<String> = reply.claimed.iter().map(|e| e.id.clone()).collect();
            taken.extend(reply.claimed.iter().filter_map(assignment));
            if !ids.is_empty() {
                let _: usize = conn.xack(&key, GROUP, &ids).await?;
                let _: u64 = conn.hincr(self.key("stats"), "reclaimed", ids.len()).await?;
            }
            if reply.next_stream_id == "0-0" {
                return Ok(taken);
            }
            start = reply.next_stream_id;
        }
    }
}

fn assignment(entry: &streams::StreamId) -> Option<Assignment> {
    Some(Assignment {
        entry: entry.id.clone(),
        epoch_id: entry.get::<String>("epoch")?.parse().ok()?,
        index: entry.get::<String>("index")?.parse().ok()?,
        token: entry.get::<String>("token")?.parse().ok()?,
    })
}

fn parse(reply: Option<streams::StreamReadReply>) -> Vec<Assignment> {
    reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids).filter_map(|e| assignment(&e)).collect()
}

/// The boards of one full node's projects: each project has its own
/// (`{name}:{project}`).
#[derive(Clone)]
pub struct Boards {
    conn: ConnectionManager,
    name: String,
}

impl Boards {
    pub fn new(conn: ConnectionManager, name: impl Into<String>) -> Self {
        Self { conn, name: name.into() }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn of(&self, project: &str) -> Board {
        Board::new(self.conn.clone(), &format!("{}:{project}", self.name))
    }
}
