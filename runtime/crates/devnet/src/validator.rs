//! `lite-node devnet --validators N`: per validator a real `redis-server`
//! and a real `lite-node validator` process with its own gossip identity and
//! registered validator key, meshed on loopback with the others and with the
//! devnet's collector, which publishes every submission it accepts. After
//! each epoch's submissions arrive and each validator has given each a
//! verdict, the devnet mines the anchor blocks that close the epoch's window
//! (the window is counted in blocks, so this is how a devnet moves time),
//! waits for every validator's level-1 batch, then for the chain to finalize
//! the epoch — mining a block whenever the chain has been idle a second, so
//! a fallback submitter's turn comes.

use std::{collections::BTreeMap, path::Path, process::Command, time::Duration};

use anyhow::{Context, Result, anyhow, bail};
use lite_node_validator::Keys;
use redis::AsyncCommands;
use serde_json::{Value, json};

use super::{process::Guarded, world::Driver};

/// The window the devnet's validator keeps, in anchor blocks after a
/// release, over `pools` active pools: the devnet closes it itself once an
/// epoch's submissions are in, but the anchor (anvil, mining a block per
/// transaction) also moves with the previous epoch's on-chain work — its
/// root, each validator's attestation, a finalize, a part per ~100 stored
/// pairs — so the window outlasts that work with room to spare, and a world
/// of many pools (a full node submitting one each) keeps it open longer: 20
/// blocks for the default world, 40 for 1,000 pools. (2 for the default
/// world let three validators' work on one epoch close the next epoch's
/// window before a restarted validator had heard all of it.) The devnet
/// mines up to the close itself, so a longer window costs no time.
pub fn window_blocks(pools: usize) -> u64 {
    20 + pools as u64 / 50
}

/// Anchor blocks a submitter's turn lasts on the devnet.
pub const FALLBACK_BLOCKS: u64 = 3;

/// One validator of the devnet and its Redis.
pub struct DevnetValidator {
    /// 1, 2, …
    pub index: usize,
    /// Its registered validator account.
    pub address: alloy::primitives::Address,
    /// How it is started (again, when it dies).
    cmd: Vec<std::ffi::OsString>,
    env: Vec<(String, String)>,
    exe: std::path::PathBuf,
    pub restarts: u32,
    /// The epoch in whose settling it was last restarted.
    pub restarted_in: Option<u64>,
    pub redis: Guarded,
    /// How its Redis is started (again, for `--fault restart-redis`).
    redis_port: u16,
    redis_dir: std::path::PathBuf,
    pub process: Guarded,
    pub gateway: String,
    pub api: String,
    /// Its gossip peer's address, ending in `/p2p/<peer id>`.
    pub p2p: lite_node_validator::gossip::Multiaddr,
    /// Where its gossip peer listens, and its peer id (for the devnet's relays).
    pub p2p_port: u16,
    pub peer_id: String,
    /// Cut off the mesh by a drill, now.
    pub cut_off: bool,
    /// Epochs the devnet knows it did not watch whole (released while it
    /// was cut off): not waited for.
    pub unwatched: std::collections::BTreeSet<u64>,
    /// Its window, in anchor blocks ([`window_blocks`]).
    pub window_blocks: u64,
    conn: redis::aio::ConnectionManager,
    keys: Keys,
}

/// What the validator made of one epoch.
#[derive(Clone, Debug, Default)]
pub struct EpochOutcome {
    /// The batch as stored in `finalized:{epochId}` (None: not finalized in time).
    pub batch: Option<Value>,
    /// Per submission (slot, project, CID): `accepted` or the rejection reason.
    pub verdicts: BTreeMap<(u64, String, String), String>,
    /// Its `onchain_*` fields of the epoch's state, once settled.
    pub onchain: BTreeMap<String, String>,
}

/// `redis-server` on `port` keeping its data in `dir`, with an append-only
/// file (fsync every second, as a validator's Redis should run), so a
/// restart keeps what was written.
fn start_redis(port: u16, dir: &Path, log: &Path) -> Result<Guarded> {
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
        .args(["--appendonly", "yes", "--appendfsync", "everysec"])
        .arg("--dir")
        .arg(dir);
    Guarded::spawn("redis-server", &mut cmd, log, false)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl DevnetValidator {
    /// Starts `redis-server` and `lite-node validator` (`exe`) in `run_dir`,
    /// and waits until the validator is healthy (its event monitor follows
    /// the anchor).
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        exe: &Path,
        run_dir: &Path,
        index: usize,
        key: &str,
        bootstrap: &[lite_node_validator::gossip::Multiaddr],
        env: &[(String, String)],
        anchor_url: &str,
        source_url: &str,
        protocol_state: &str,
        data_market: &str,
        pools: &[String],
        start_block: u64,
        poll: Duration,
    ) -> Result<Self> {
        let redis_dir = run_dir.join(format!("redis-{index}"));
        std::fs::create_dir_all(&redis_dir)?;
        let redis_port = free_port()?;
        let redis = start_redis(redis_port, &redis_dir, &run_dir.join(format!("redis-{index}.log"))).map_err(|e| {
            anyhow!(
                "cannot start redis-server ({e}): --validators needs it installed (./init.sh devnet installs the \
                 Debian package, or: apt-get install redis-server)"
            )
        })?;
        let redis_url = format!("redis://127.0.0.1:{redis_port}");
        let client = redis::Client::open(redis_url.as_str())?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let conn = loop {
            if let Ok(c) = lite_node_validator::connect(&client).await
                && c.clone().ping::<String>().await.is_ok()
            {
                break c;
            }
            if tokio::time::Instant::now() > deadline {
                bail!("redis-server did not answer on port {redis_port} within 20 s; see {}", redis.log.display());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };

        let (gateway_port, api_port, p2p_port) = (free_port()?, free_port()?, free_port()?);
        // Its gossip identity made here, so its address is known before it
        // starts (the collector dials it).
        let data_dir = run_dir.join(format!("validator-{index}"));
        let identity = data_dir.join("p2p-identity.key");
        let peer = lite_node_validator::gossip::load_or_create_identity(&identity)?.public().to_peer_id();
        let p2p_listen = format!("/ip4/127.0.0.1/tcp/{p2p_port}");
        let p2p: lite_node_validator::gossip::Multiaddr = format!("{p2p_listen}/p2p/{peer}").parse()?;
        let log = run_dir.join(format!("validator-{index}.log"));
        let signer: alloy::signers::local::PrivateKeySigner =
            key.parse().map_err(|e| anyhow!("validator {index}'s key: {e}"))?;
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        let mut arg = |a: &str| args.push(a.into());
        arg("validator");
        for (flag, value) in [
            ("--redis-url", redis_url.clone()),
            ("--validator-id", format!("devnet-validator-{index}")),
            ("--listen", format!("127.0.0.1:{gateway_port}")),
            ("--api-listen", format!("127.0.0.1:{api_port}")),
            ("--anchor-rpc", anchor_url.to_owned()),
            ("--source-rpc", source_url.to_owned()),
            ("--protocol-state", protocol_state.to_owned()),
            ("--data-market", data_market.to_owned()),
            ("--pools", pools.join(",")),
            ("--from-block", start_block.to_string()),
            ("--window-blocks", window_blocks(pools.len()).to_string()),
            ("--fallback-blocks", FALLBACK_BLOCKS.to_string()),
            ("--poll-ms", poll.as_millis().to_string()),
            ("--p2p-listen", p2p_listen.clone()),
            ("--data-dir", data_dir.display().to_string()),
        ] {
            arg(flag);
            arg(&value);
        }
        // The devnet's market requires the snapshot bytes.
        arg("--require-snapshot");
        if env.iter().any(|(k, v)| k == "PAIRS_ON_CHAIN" && v == "false") {
            arg("--pairs-on-chain");
            arg("false");
        }
        if !bootstrap.is_empty() {
            arg("--p2p-bootstrap");
            arg(&bootstrap.iter().map(ToString::to_string).collect::<Vec<_>>().join(","));
        }
        let mut env = env.to_vec();
        env.push(("LITE_NODE_DATA_DIR".into(), data_dir.display().to_string()));
        env.push(("VALIDATOR_SIGNER_PRIVATE_KEY".into(), key.to_owned()));
        let process = spawn(exe, &args, &env, &log)?;
        let keys = Keys::new(&protocol_state.to_ascii_lowercase(), &data_market.to_ascii_lowercase());
        let mut v = Self {
            index,
            address: signer.address(),
            cmd: args,
            env,
            exe: exe.to_owned(),
            restarts: 0,
            restarted_in: None,
            redis,
            redis_port,
            redis_dir,
            process,
            gateway: format!("http://127.0.0.1:{gateway_port}"),
            api: format!("http://127.0.0.1:{api_port}"),
            window_blocks: window_blocks(pools.len()),
            p2p,
            p2p_port,
            peer_id: peer.to_string(),
            cut_off: false,
            unwatched: Default::default(),
            conn,
            keys,
        };
        v.wait_healthy().await?;
        Ok(v)
    }

    /// Starts again a validator whose process ended, on its Redis and data
    /// dir: it rejoins the mesh and catches up from the chain and Redis.
    pub fn restart(&mut self) -> Result<()> {
        self.restarts += 1;
        let log = self.process.log.clone();
        self.process = spawn(&self.exe, &self.cmd, &self.env, &log)?;
        Ok(())
    }

    /// Starts it again (while settling `epoch_id`) if its process ended; an
    /// error once it has been restarted `max` times.
    pub fn restart_if_dead(&mut self, epoch_id: u64, max: u32) -> Result<()> {
        let Some(status) = self.exited() else { return Ok(()) };
        super::process::refuse_after(&format!("validator {}", self.index), self.restarts, max, &status, &self.process)?;
        tracing::warn!("validator {} exited ({status}); restarting it", self.index);
        self.restarted_in = Some(epoch_id);
        self.restart()
    }

    /// Where its gossip peer listens.
    pub fn p2p_socket(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.p2p_port))
    }

    /// Whether its process has ended (and how).
    pub fn exited(&mut self) -> Option<String> {
        self.process.exited().map(|s| s.to_string())
    }

    /// Waits (up to `patience`) until its intake says it listens
    /// (`intake:since`, kept by its gateway once its gossip peer is in a mesh).
    pub async fn wait_listening(&mut self, patience: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let since: Option<u64> = self.conn.get(self.keys.intake_since()).await.unwrap_or(None);
            if since.is_some() {
                return Ok(());
            }
            self.alive()?;
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "validator {}'s gossip intake was not listening after {} s; see {}",
                    self.index,
                    patience.as_secs(),
                    self.process.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What its gossip intake found unwanted, by why (`gossip_unwanted:*`
    /// of its counters; none on an honest devnet).
    pub async fn unwanted(&mut self) -> BTreeMap<String, u64> {
        let counters: BTreeMap<String, u64> = self.conn.hgetall(self.keys.counters()).await.unwrap_or_default();
        counters
            .into_iter()
            .filter_map(|(k, n)| k.strip_prefix("gossip_unwanted:").map(|why| (why.to_owned(), n)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Its `onchain_*` fields of epoch `epoch_id`'s state.
    pub async fn onchain_state(&mut self, epoch_id: u64) -> BTreeMap<String, String> {
        let state: std::collections::HashMap<String, String> =
            self.conn.hgetall(self.keys.epoch_state(epoch_id)).await.unwrap_or_default();
        state.into_iter().filter(|(k, _)| k.starts_with("onchain_")).collect()
    }
}

fn spawn(exe: &Path, args: &[std::ffi::OsString], env: &[(String, String)], log: &Path) -> Result<Guarded> {
    let mut cmd = Command::new(exe);
    cmd.args(args).env_clear().envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    Guarded::spawn("validator", &mut cmd, log, false)
}

impl DevnetValidator {
    async fn wait_healthy(&mut self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let health = format!("{}/health", self.api);
        let client = reqwest::Client::new();
        loop {
            if let Some(status) = self.process.exited() {
                bail!(
                    "the validator exited at start ({status}); last lines of {}:\n{}",
                    self.process.log.display(),
                    self.process.log_tail(15)
                );
            }
            if let Ok(r) = client.get(&health).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the validator was not healthy after 120 s; see {}", self.process.log.display());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops its Redis (SIGTERM: the append-only file is written out) and
    /// starts it again on the same port and directory.
    pub fn restart_redis(&mut self) -> Result<()> {
        super::process::stop_all(&mut [&mut self.redis], Duration::from_secs(10));
        let log = self.redis.log.clone();
        self.redis = start_redis(self.redis_port, &self.redis_dir, &log)?;
        Ok(())
    }

    /// Waits (up to `patience`) until the validator has a verdict for
    /// `forwarded` submissions of `epoch_id`; how many it has.
    pub async fn wait_judged(&mut self, epoch_id: u64, forwarded: usize, patience: Duration) -> Result<usize> {
        let k = self.keys.clone();
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            // Redis may be restarting (a drill, or an operator): its
            // connection comes back on the next command.
            let judged = async {
                let accepted: usize = self.conn.scard(k.epoch_processed_set(epoch_id)).await?;
                let rejected: usize = self.conn.hlen(k.rejections(epoch_id)).await?;
                Ok::<_, redis::RedisError>(accepted + rejected)
            };
            let judged = match judged.await {
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!("the validator's Redis did not answer ({e}); asking again");
                    0
                }
            };
            if judged >= forwarded || tokio::time::Instant::now() > deadline {
                return Ok(judged);
            }
            self.alive()?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Its process's and its Redis's peak resident memory and CPU time so far.
    pub fn usage(&self) -> Value {
        json!({
            "index": self.index,
            "peakRssKiB": self.process.peak_rss_kib(),
            "cpuSecs": self.process.cpu_secs(),
            "redisPeakRssKiB": self.redis.peak_rss_kib(),
            "redisCpuSecs": self.redis.cpu_secs(),
        })
    }

    /// Its gossip peer's `validator_gossip_*` figures from `/metrics`
    /// (`{"messages_throttled": n, "peers_graylisted": n, …}`).
    pub async fn gossip_metrics(&mut self) -> Value {
        let text = match reqwest::get(format!("{}/metrics", self.api)).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let mut out = serde_json::Map::new();
        for line in text.lines().filter(|l| l.starts_with("validator_gossip_")) {
            let Some((name, value)) = line.rsplit_once(' ') else { continue };
            let Ok(value) = value.parse::<f64>() else { continue };
            // validator_gossip_messages_total{outcome="rejected"} → messages_rejected
            let name = name.trim_start_matches("validator_gossip_").replace("_total", "");
            let key = match name.split_once('{') {
                Some((base, label)) => {
                    let label = label.split('"').nth(1).unwrap_or_default();
                    format!("{base}_{label}")
                }
                None => name,
            };
            out.insert(key, json!(value as u64));
        }
        Value::Object(out)
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }

    /// Mines up to the block that closes `epoch_id`'s window (when no other
    /// validator did) and waits (up to `patience`) for its finalized batch.
    pub async fn settle(
        &mut self,
        driver: &Driver,
        epoch_id: u64,
        release_block: u64,
        patience: Duration,
    ) -> Result<EpochOutcome> {
        let k = self.keys.clone();
        let closes = lite_node_validator::window_closes(release_block, self.window_blocks);
        let head = driver.head().await?;
        if head < closes {
            driver.call("anvil_mine", json!([format!("0x{:x}", closes - head)])).await?;
        }
        let deadline = tokio::time::Instant::now() + patience;
        let batch = loop {
            let stored: Option<String> = match self.conn.get(k.finalized(epoch_id)).await {
                Ok(stored) => stored,
                Err(e) => {
                    tracing::debug!("the validator's Redis did not answer ({e}); asking again");
                    None
                }
            };
            if let Some(text) = stored {
                break Some(serde_json::from_str::<Value>(&text).context("finalized batch")?);
            }
            if tokio::time::Instant::now() > deadline {
                break None;
            }
            self.alive()?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        Ok(EpochOutcome { batch, verdicts: self.verdicts(epoch_id).await?, onchain: BTreeMap::new() })
    }

    /// Every verdict the validator gave for `epoch_id`, page by page. An
    /// answer other than 200 (the API's Redis connection coming back after
    /// a restart) is asked again, for up to 10 s.
    async fn verdicts(&mut self, epoch_id: u64) -> Result<BTreeMap<(u64, String, String), String>> {
        let mut out = BTreeMap::new();
        let mut after = String::new();
        loop {
            let url = format!("{}/epochs/{epoch_id}/submissions?limit=1000&after={after}", self.api);
            let page = self.get_json(&url).await?;
            Self::add_verdicts(&page, &mut out);
            match page["next"].as_str() {
                Some(next) => after = next.to_owned(),
                None => return Ok(out),
            }
        }
    }

    /// `url`'s JSON, asked again while the API answers anything but 200.
    async fn get_json(&mut self, url: &str) -> Result<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let answer = async {
                let r = reqwest::get(url).await?;
                let status = r.status();
                let text = r.text().await?;
                anyhow::ensure!(status.is_success(), "{status}: {}", text.trim());
                Ok::<Value, anyhow::Error>(serde_json::from_str(&text)?)
            };
            match answer.await {
                Ok(v) => return Ok(v),
                Err(e) if tokio::time::Instant::now() > deadline => return Err(e.context(format!("GET {url}"))),
                Err(_) => {
                    self.alive()?;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn add_verdicts(body: &Value, out: &mut BTreeMap<(u64, String, String), String>) {
        let field = |v: &Value, k: &str| match &v[k] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        for a in body["accepted"].as_array().into_iter().flatten() {
            let slot = field(a, "slot_id").parse().unwrap_or(0);
            out.insert((slot, field(a, "project_id"), field(a, "snapshot_cid")), "accepted".to_owned());
        }
        for r in body["rejected"].as_array().into_iter().flatten() {
            let slot = r["slot_id"].as_u64().unwrap_or(0);
            out.entry((slot, field(r, "project_id"), field(r, "snapshot_cid"))).or_insert_with(|| field(r, "reason"));
        }
    }

    fn alive(&mut self) -> Result<()> {
        if let Some(status) = self.process.exited() {
            bail!(
                "the validator exited ({status}); last lines of {}:\n{}",
                self.process.log.display(),
                self.process.log_tail(15)
            );
        }
        Ok(())
    }
}

/// A consumer's read-back of one finalized epoch (issue 54): each project's
/// bundle from the validators' APIs, checked as `lite-node read` checks it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadBack {
    /// Snapshots whose every check held, down to the root on chain.
    pub verified: u64,
    /// Each epoch no API gave a bundle of that held: the checks failed.
    pub failed: Vec<String>,
}

/// How long a finalized snapshot may take to be readable (the validators
/// archive what they finalized within a second).
const READABLE_WITHIN: Duration = Duration::from_secs(15);

/// Reads back every project of finalized `epoch_id` from `apis` as one
/// whole-epoch bundle (the first API whose bundle holds), as a consumer
/// would: every line checked (bytes → CID, canonical JSON), the multiproof
/// to the root, that root against `root` (the one the chain finalized), and
/// the projects against `projects` (the chain's).
pub async fn read_back(
    apis: &[String],
    scope: lite_node_protocol::submission::Scope,
    epoch_id: u64,
    root: &str,
    projects: Vec<String>,
) -> ReadBack {
    let client = reqwest::Client::new();
    let on_chain: Option<alloy::primitives::B256> = root.parse().ok();
    let asked = lite_node_protocol::bundle::Asked {
        epoch_id,
        project_id: "",
        protocol_state: scope.protocol_state,
        data_market: scope.data_market,
    };
    let deadline = tokio::time::Instant::now() + READABLE_WITHIN;
    let mut last = String::new();
    // A validator whose own batch is not the one the chain finalized (it
    // judged without a late submission) proves against its own root: a
    // consumer passes it over, as one failing any check, for the next.
    let mut refused = std::collections::BTreeMap::new();
    loop {
        for api in apis {
            if refused.contains_key(api) {
                continue;
            }
            let mut read = Vec::new();
            match lite_node_chain::consumer::read_epoch(&client, api, &asked, |l| read.push(l.project_id)).await {
                Ok(got) if Some(got) == on_chain && read == projects => {
                    return ReadBack { verified: read.len() as u64, failed: Vec::new() };
                }
                Ok(got) if Some(got) == on_chain => {
                    let why = format!("{} project(s) read, the chain finalized {}", read.len(), projects.len());
                    refused.insert(api.clone(), why);
                }
                Ok(got) => {
                    let why = format!("check `root finalized on chain` failed: {got} is not the chain's {root}");
                    refused.insert(api.clone(), why);
                }
                Err(lite_node_chain::consumer::Refusal::Failed(failed)) => {
                    refused.insert(api.clone(), failed.to_string());
                }
                Err(lite_node_chain::consumer::Refusal::Unanswered(why)) => last = format!("{api}: {why}"),
            }
        }
        if refused.len() == apis.len() || tokio::time::Instant::now() > deadline {
            let refused: Vec<String> = refused.iter().map(|(api, why)| format!("{api}: {why}")).collect();
            let why = format!(
                "epoch {epoch_id}: no API gave a whole-epoch bundle that holds in {}s ({}{last})",
                READABLE_WITHIN.as_secs(),
                if refused.is_empty() { String::new() } else { format!("{}; ", refused.join("; ")) }
            );
            return ReadBack { verified: 0, failed: vec![why] };
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The pairs of finalized `epoch_id` from the first of `apis` whose pairs
/// make `root` (the chain's), waiting for the archiver's tick.
async fn pairs_read_back(
    apis: &[String],
    scope: lite_node_protocol::submission::Scope,
    epoch_id: u64,
    root: alloy::primitives::B256,
) -> Result<Vec<(String, String)>> {
    let client = reqwest::Client::new();
    let asked = lite_node_protocol::bundle::Asked {
        epoch_id,
        project_id: "",
        protocol_state: scope.protocol_state,
        data_market: scope.data_market,
    };
    let deadline = tokio::time::Instant::now() + READABLE_WITHIN;
    loop {
        let why = match lite_node_chain::consumer::proved_pairs(&client, apis, &asked, root).await {
            Ok(pairs) => return Ok(pairs),
            Err(why) => why,
        };
        if tokio::time::Instant::now() > deadline {
            bail!("epoch {epoch_id}: no validator's API gave pairs that make the root on chain {root}: {why}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What one validator's API serves at the end of a run, of the epochs the
/// chain finalized: each read whole and checked to the chain's root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Serves {
    /// The epochs whose whole bundle held, down to the root on chain.
    pub verified: Vec<u64>,
    /// The others, and why (another root than the chain's: 409; never
    /// finalized by it: 404; a failed check).
    pub refused: Vec<(u64, String)>,
}

/// [`Serves`] of the validator at `api`, over `finalized` (epoch, the
/// chain's root).
pub async fn serves(api: &str, scope: lite_node_protocol::submission::Scope, finalized: &[(u64, String)]) -> Serves {
    let client = reqwest::Client::new();
    let mut out = Serves::default();
    for (epoch_id, root) in finalized {
        let asked = lite_node_protocol::bundle::Asked {
            epoch_id: *epoch_id,
            project_id: "",
            protocol_state: scope.protocol_state,
            data_market: scope.data_market,
        };
        // An epoch finalized just now may take a tick of the archiver.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let read = loop {
            let read = lite_node_chain::consumer::read_epoch(&client, api, &asked, |_| {}).await;
            match &read {
                Err(lite_node_chain::consumer::Refusal::Unanswered(why))
                    if why.contains("not finalized here yet") && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => break read,
            }
        };
        match read {
            Ok(got) if root.parse() == Ok(got) => out.verified.push(*epoch_id),
            Ok(got) => out.refused.push((*epoch_id, format!("its root {got} is not the chain's {root}"))),
            Err(why) => out.refused.push((*epoch_id, why.to_string())),
        }
    }
    out
}

/// What the chain made of one epoch, read back from it.
#[derive(Clone, Debug, Default)]
pub struct OnchainOutcome {
    /// A consumer's read-back of its snapshots, once finalized on chain.
    pub read_back: Option<ReadBack>,
    /// The first anchor block at which the epoch's window was closed.
    pub closes: u64,
    pub batch_cid: String,
    pub root: String,
    pub submitter: alloy::primitives::Address,
    pub finalized: bool,
    pub finalized_block: Option<u64>,
    /// Validators that attested (the batch counts as its submitter's).
    pub attestations: u64,
    pub divergent: Vec<alloy::primitives::Address>,
    /// Per project of the validators' batches: `maxSnapshotsCid` (CID, status).
    pub cids: BTreeMap<String, (String, u8)>,
}

/// Terminal on-chain states of a validator's epoch.
const SETTLED: [&str; 3] = ["finalized", "skipped", "not_finalized"];

/// Waits (up to `patience`) until the chain finalized `epoch_id` and every
/// live validator with a batch is done with it, mining a block whenever the
/// chain was idle for a second (a submitter that is down: the next one's
/// turn comes in blocks); restarts a validator that dies meanwhile. Returns
/// what the chain holds and each validator's `onchain_*` fields.
pub async fn settle_onchain(
    driver: &Driver,
    anchor: &lite_node_chain::Anchor,
    validators: &mut [DevnetValidator],
    epoch_id: u64,
    release_block: u64,
    patience: Duration,
    pairs_on_chain: bool,
) -> Result<(OnchainOutcome, Vec<BTreeMap<String, String>>)> {
    use alloy::primitives::U256;
    use lite_node_protocol::contracts::{
        attestationsCountCall, divergentValidatorsCall, epochBatchCall, maxSnapshotsCidCall,
    };
    let dm = anchor.data_market;
    let e = U256::from(epoch_id);
    let deadline = tokio::time::Instant::now() + patience;
    let (mut last_head, mut idle_since) = (driver.head().await?, tokio::time::Instant::now());
    let mut states;
    let batch = loop {
        let batch = anchor.read(&epochBatchCall { dataMarketAddress: dm, epochId: e }, None).await?;
        states = Vec::new();
        let mut settled = true;
        for v in validators.iter_mut() {
            v.restart_if_dead(epoch_id, super::MAX_RESTARTS)?;
            let has_batch: bool = v.conn.exists(v.keys.finalized(epoch_id)).await.unwrap_or(false);
            let state = v.onchain_state(epoch_id).await;
            let done = state.get("onchain_status").is_some_and(|s| SETTLED.contains(&s.as_str()));
            settled &= done || !has_batch;
            states.push(state);
        }
        if (batch.finalized && settled) || tokio::time::Instant::now() > deadline {
            break batch;
        }
        let head = driver.head().await?;
        if head != last_head {
            (last_head, idle_since) = (head, tokio::time::Instant::now());
        } else if idle_since.elapsed() > Duration::from_secs(1) {
            driver.call("anvil_mine", json!(["0x1"])).await?;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let attestations =
        anchor.read(&attestationsCountCall { dataMarketAddress: dm, epochId: e }, None).await?.to::<u64>();
    let divergent = anchor.read(&divergentValidatorsCall { dataMarketAddress: dm, epochId: e }, None).await?;
    let finalized_block = if batch.finalized { anchor.finalized_in(epoch_id, release_block).await? } else { None };
    let mut projects = std::collections::BTreeSet::new();
    for v in validators.iter_mut() {
        let stored: Option<String> = v.conn.get(v.keys.finalized(epoch_id)).await.unwrap_or(None);
        let batch: Value = stored.and_then(|s| serde_json::from_str(&s).ok()).unwrap_or(Value::Null);
        for p in batch["projects"].as_array().into_iter().flatten() {
            if let Some(id) = p["projectId"].as_str() {
                projects.insert(id.to_owned());
            }
        }
    }
    let mut cids = BTreeMap::new();
    if !pairs_on_chain && batch.finalized {
        // Roots only on chain: the pairs as a node reads them, from the
        // validators' APIs, proved against the root (status 1: finalized).
        let apis: Vec<String> = validators.iter().map(|v| v.api.clone()).collect();
        let scope = lite_node_protocol::submission::Scope { protocol_state: anchor.protocol_state, data_market: dm };
        for (project, cid) in pairs_read_back(&apis, scope, epoch_id, batch.root).await? {
            cids.insert(project, (cid, lite_node_protocol::finalized::FINALIZED));
        }
        projects.clear();
    }
    for project in projects {
        let call = maxSnapshotsCidCall { dataMarketAddress: dm, projectId: project.clone(), epochId: e };
        let read = anchor.read(&call, None).await?;
        cids.insert(project, (read._0, read._1));
    }
    let outcome = OnchainOutcome {
        read_back: None,
        closes: lite_node_validator::window_closes(
            release_block,
            validators.first().map_or(window_blocks(0), |v| v.window_blocks),
        ),
        batch_cid: batch.batchCid,
        root: batch.root.to_string(),
        submitter: batch.submitter,
        finalized: batch.finalized,
        finalized_block,
        attestations,
        divergent,
        cids,
    };
    Ok((outcome, states))
}

/// A validator's [`DevnetValidator::usage`] in words.
pub fn usage_line(u: &Value) -> String {
    let mib = |k: &str| u[k].as_u64().map_or("?".to_owned(), |v| format!("{:.1} MiB", v as f64 / 1024.0));
    let secs = |k: &str| u[k].as_f64().map_or("?".to_owned(), |v| format!("{v:.1} s"));
    let gossip = u["gossip"].as_object().map_or(String::new(), |g| {
        let n = |k: &str| g.get(k).and_then(Value::as_u64).unwrap_or(0);
        format!(
            "; gossip: {} accepted, {} rejected, {} unwanted, {} throttled unread; {} peer(s) connected, {} \
             graylisted now, {} graylisting(s), {} banned, {} disconnected for not reading",
            n("messages_accepted"),
            n("messages_rejected"),
            n("messages_unwanted"),
            n("messages_throttled"),
            n("peers_connected"),
            n("peers_graylisted"),
            n("graylistings"),
            n("banned"),
            n("slow_disconnected"),
        )
    });
    format!(
        "peak RSS {}, CPU {} (its Redis: peak RSS {}, CPU {}){gossip}",
        mib("peakRssKiB"),
        secs("cpuSecs"),
        mib("redisPeakRssKiB"),
        secs("redisCpuSecs")
    )
}
