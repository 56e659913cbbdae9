//! Environment variables → checked configuration.
//!
//! Names follow the reference node (docs/protocol.md §7) so operators can switch
//! over with their existing env files.

use std::{
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
    time::Duration,
};

use alloy::primitives::Address;
use lite_node_core::url::{Url, parse_anchor_url, parse_rpc_url, redact_url};

use super::{AnchorConfig, ChainConfig, ConfigErrors, Drill};

/// The variables `lite-node run` cannot start without, in the order they are
/// reported.
/// The variables every node needs (docs/protocol.md §7; `init.sh` checks the same list).
pub const REQUIRED: &[&str] = &[
    "SOURCE_RPC_URL",
    "SIGNER_ACCOUNT_ADDRESS",
    "SIGNER_ACCOUNT_PRIVATE_KEY",
    "SLOT_ID",
    "POWERLOOM_RPC_URL",
    "PROTOCOL_STATE_CONTRACT",
    "DATA_MARKET_CONTRACT",
    "NAMESPACE",
    "POWERLOOM_CHAIN",
    "SOURCE_CHAIN",
];

/// A snapshot of the environment, taken once; empty values count as unset.
#[derive(Clone, Default)]
pub struct EnvSnapshot {
    vars: BTreeMap<String, String>,
    /// What reading an env file found worth a warning (a repeated key), for
    /// the log once it is set up.
    warnings: Vec<String>,
}

impl EnvSnapshot {
    /// Reads the process environment.
    pub fn from_process() -> Self {
        Self::from_pairs(std::env::vars())
    }

    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        Self { vars: pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect(), warnings: Vec::new() }
    }

    /// Adds the variables of an env file, read as dotenv reads them (quotes,
    /// `export`, `# comments` after a value), for keys not already set: the
    /// process environment wins, as with `docker --env-file` overrides. A key
    /// repeated in the file takes its last value, as Docker does, with a
    /// warning. A line that cannot be read is named by its number (never
    /// echoed: it may hold the signer key).
    pub fn with_env_file(mut self, path: &Path) -> Result<Self, ConfigErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors::one(format!("cannot read env file {}: {e}", path.display())))?;
        let mut problems = Vec::new();
        let mut from_file: BTreeMap<String, (String, usize)> = BTreeMap::new();
        for item in dotenvy::from_read_iter(text.as_bytes()) {
            match item {
                Ok((key, value)) => {
                    let entry = from_file.entry(key).or_insert_with(|| (String::new(), 0));
                    *entry = (value, entry.1 + 1);
                }
                Err(dotenvy::Error::LineParse(line, _)) => {
                    let n = text.lines().position(|l| l.trim() == line.trim()).map_or(0, |i| i + 1);
                    problems.push(format!(
                        "{}:{n}: cannot read this line: expected KEY=VALUE (quote a value with spaces)",
                        path.display()
                    ));
                }
                Err(e) => problems.push(format!("env file {}: {e}", path.display())),
            }
        }
        for (key, (value, times)) in from_file {
            if times > 1 {
                self.warnings
                    .push(format!("env file {}: {key} is set {times} times; the last value is used", path.display()));
            }
            self.vars.entry(key).or_insert(value);
        }
        if problems.is_empty() { Ok(self) } else { Err(ConfigErrors { problems }) }
    }

    /// Warnings from reading env files (shown once logging is set up).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    /// This snapshot with `key` set to `value`.
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.vars.insert(key.to_owned(), value.into());
        self
    }

    /// Every variable, for handing the same environment to a child process.
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    fn flag(&self, key: &str, problems: &mut Vec<String>) -> bool {
        match self.get(key).map(str::to_ascii_lowercase).as_deref() {
            None | Some("false" | "0" | "no") => false,
            Some("true" | "1" | "yes") => true,
            Some(other) => {
                problems.push(format!("{key}={other} is not a boolean: use true or false"));
                false
            }
        }
    }
}

/// A private key: never printed, never logged.
#[derive(Clone)]
pub struct SecretKey([u8; 32]);

impl SecretKey {
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub(crate) fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A key from 64 hex digits (with or without `0x`), as `name` gives it;
    /// the error names `name` and never echoes the value.
    pub fn parse_hex(name: &str, value: &str) -> Result<Self, String> {
        let hex = value.trim().strip_prefix("0x").unwrap_or(value.trim());
        let mut bytes = [0u8; 32];
        match hex::decode_to_slice(hex, &mut bytes) {
            Ok(()) if bytes != [0; 32] && alloy::signers::local::PrivateKeySigner::from_slice(&bytes).is_ok() => {
                Ok(Self(bytes))
            }
            _ => Err(format!("{name} is not a secp256k1 private key: expected 64 hex digits (with or without 0x)")),
        }
    }

    /// A key from raw bytes, for tests.
    pub fn for_tests(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(<redacted>)")
    }
}

/// A repository pinned to a commit (or, when explicitly allowed, a branch tip).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitPin {
    pub url: String,
    pub branch: String,
    /// Full 40-hex commit id; `None` only when unpinned use was allowed.
    pub commit: Option<String>,
}

impl GitPin {
    /// `repo (branch b, commit c)` with any credentials in the URL hidden.
    pub fn describe(&self) -> String {
        format!(
            "{} (branch {}, commit {})",
            redact_url(&self.url),
            self.branch,
            self.commit.as_deref().unwrap_or("unpinned")
        )
    }
}

/// Where the compute package comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComputeSource {
    /// The `computes/` workspace of the checkout the node runs from.
    Bundled(PathBuf),
    /// A pinned repository; `path` is the workspace's directory inside it.
    Git { pin: GitPin, path: PathBuf },
}

/// How to obtain and build the compute package.
#[derive(Clone, Debug)]
pub struct ComputeConfig {
    pub source: ComputeSource,
    /// `LITE_NODE_DATA_DIR`, absolute.
    pub data_dir: PathBuf,
    /// Cargo profile for compute builds (`LITE_NODE_COMPUTE_PROFILE`, default release).
    pub profile: String,
    /// Cargo target dir for compute builds (`LITE_NODE_COMPUTE_TARGET_DIR`,
    /// default `<data dir>/compute/target`).
    pub target_dir: PathBuf,
    /// Where built packages are cached (`LITE_NODE_COMPUTE_CACHE_DIR`, default
    /// `<data dir>/compute`); nodes on one machine may share it.
    pub cache_dir: PathBuf,
    /// Build against this plugin-api source instead of the embedded one
    /// (`LITE_NODE_PLUGIN_API_DIR`; for interface development).
    pub plugin_api_dir: Option<PathBuf>,
    /// The cargo to run (`LITE_NODE_CARGO`, default `cargo` on PATH).
    pub cargo: PathBuf,
    /// The rustc whose version keys the cache (`RUSTC`, default `rustc`).
    pub rustc: PathBuf,
    /// `LITE_NODE_COMPUTE_DIR`: an author's package directory, built as it
    /// is now (the source is then that directory, not a pinned commit).
    pub local_dir: Option<PathBuf>,
}

/// Where projects.json comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProjectsSource {
    File(PathBuf),
    /// `file` is relative to the repository root.
    Git {
        pin: GitPin,
        file: PathBuf,
    },
}

/// How the node watches the anchor chain and runs computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSettings {
    /// `LITE_NODE_POLL_INTERVAL_MS` (default 500).
    pub poll_interval: Duration,
    /// Anchor blocks re-checked on every poll for reorgs (`LITE_NODE_CONFIRMATIONS`, default 12).
    pub confirmations: u64,
    /// An epoch released more than this many anchor blocks ago is past its
    /// submission deadline and counted as missed, not computed
    /// (`LITE_NODE_SUBMISSION_WINDOW_BLOCKS`, default 100).
    pub submission_window: u64,
    /// Where a node without a saved cursor starts (`LITE_NODE_START_BLOCK`;
    /// default: the anchor head at start).
    pub start_block: Option<u64>,
    /// `LITE_NODE_COMPUTE_TIMEOUT_SECS` (default 60).
    pub compute_timeout: Duration,
    /// `LITE_NODE_MAX_CONCURRENT_COMPUTES` (default 4).
    pub max_concurrent_computes: usize,
    /// Computes hung past their timeout at once (each holds a thread of the
    /// runtime's blocking pool, 512 threads) before the node exits for a
    /// restart (`LITE_NODE_MAX_HUNG_COMPUTES`, default 128; exit code 4). A
    /// hanging project is quarantined long before that.
    pub max_hung_computes: usize,
    /// Computes that may wait for a worker at once (`LITE_NODE_QUEUE_CAPACITY`,
    /// default 16384); past it the lowest in priority is dropped.
    pub queue_capacity: usize,
    /// An anchor head that has not moved for this long makes the node
    /// unhealthy (`LITE_NODE_ANCHOR_STALL_SECS`, default 120).
    pub anchor_stall_after: Duration,
    /// Epochs whose snapshots, journal lines and ledger entries are kept
    /// (`LITE_NODE_RETAIN_EPOCHS`, default 1000); older ones are pruned.
    pub retain_epochs: u64,
    /// Per JSON-RPC request (`LITE_NODE_RPC_TIMEOUT_SECS`, default 15).
    pub rpc_timeout: Duration,
    /// A submission's deadline is the anchor head plus this many blocks
    /// (`LITE_NODE_DEADLINE_BUFFER_BLOCKS`, default 30).
    pub deadline_buffer: u64,
    /// On a stop, how long the epoch in flight and running computes may take
    /// (`LITE_NODE_STOP_GRACE_SECS`, default 30).
    pub stop_grace: Duration,
}

/// A whole-number variable of at least `min` (`default` when unset).
fn number(env: &EnvSnapshot, key: &str, default: u64, min: u64, problems: &mut Vec<String>) -> u64 {
    match env.get(key).map(str::parse::<u64>) {
        None => default,
        Some(Ok(n)) if n >= min => n,
        Some(_) => {
            problems.push(format!("{key} must be a whole number of at least {min}"));
            default
        }
    }
}

/// `LITE_NODE_RPC_TIMEOUT_SECS` (default 15): how long one JSON-RPC request may take.
pub(crate) fn rpc_timeout(env: &EnvSnapshot, problems: &mut Vec<String>) -> Duration {
    Duration::from_secs(number(env, "LITE_NODE_RPC_TIMEOUT_SECS", 15, 1, problems))
}

/// The most hung computes the node lets pile up: each keeps a thread of the
/// runtime's blocking pool (512), which file writes and the other computes
/// need too.
pub const MAX_HUNG_COMPUTES_LIMIT: u64 = 384;

impl WatchSettings {
    fn from_env(env: &EnvSnapshot, problems: &mut Vec<String>) -> Self {
        let rpc_timeout = rpc_timeout(env, problems);
        let hung = number(env, "LITE_NODE_MAX_HUNG_COMPUTES", 128, 1, problems);
        if hung > MAX_HUNG_COMPUTES_LIMIT {
            problems.push(format!(
                "LITE_NODE_MAX_HUNG_COMPUTES={hung} is more than {MAX_HUNG_COMPUTES_LIMIT}: each hung compute keeps one \
                 of the runtime's 512 blocking threads, which the other computes and file writes need too"
            ));
        }
        let mut number = |key: &str, default: u64, min: u64| number(env, key, default, min, problems);
        Self {
            poll_interval: Duration::from_millis(number("LITE_NODE_POLL_INTERVAL_MS", 500, 10)),
            confirmations: number("LITE_NODE_CONFIRMATIONS", 12, 0),
            submission_window: number("LITE_NODE_SUBMISSION_WINDOW_BLOCKS", 100, 1),
            start_block: env.get("LITE_NODE_START_BLOCK").map(|_| number("LITE_NODE_START_BLOCK", 0, 0)),
            compute_timeout: Duration::from_secs(number("LITE_NODE_COMPUTE_TIMEOUT_SECS", 60, 1)),
            max_concurrent_computes: number("LITE_NODE_MAX_CONCURRENT_COMPUTES", 4, 1) as usize,
            max_hung_computes: hung.min(MAX_HUNG_COMPUTES_LIMIT) as usize,
            queue_capacity: number("LITE_NODE_QUEUE_CAPACITY", 16_384, 1) as usize,
            anchor_stall_after: Duration::from_secs(number("LITE_NODE_ANCHOR_STALL_SECS", 120, 1)),
            retain_epochs: number("LITE_NODE_RETAIN_EPOCHS", 1000, 1),
            rpc_timeout,
            deadline_buffer: number("LITE_NODE_DEADLINE_BUFFER_BLOCKS", 30, 1),
            stop_grace: Duration::from_secs(number("LITE_NODE_STOP_GRACE_SECS", 30, 1)),
        }
    }
}

/// All the node needs to run.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub source_rpc_urls: Vec<Url>,
    pub anchor_rpc_urls: Vec<Url>,
    pub signer_address: Address,
    pub signer_key: SecretKey,
    /// The first slot of [`NodeConfig::slots`].
    pub slot_id: u64,
    /// Every slot this node runs (`SLOT_ID`, or `SLOT_IDS`), each with its
    /// signer (`SLOT_SIGNERS_FILE`, else the node's).
    pub slots: Vec<NodeSlot>,
    /// `LITE_NODE_SKIP_FOREIGN_SLOTS`: a slot registered to another signer is
    /// skipped with a warning instead of refused.
    pub skip_foreign_slots: bool,
    pub protocol_state: Address,
    pub data_market: Address,
    pub namespace: String,
    pub powerloom_chain: String,
    pub source_chain: String,
    pub collector_port: u16,
    /// `LOCAL_COLLECTOR_HOST` (default `localhost`).
    pub collector_host: String,
    pub projects: ProjectsSource,
    pub compute: ComputeConfig,
    pub watch: WatchSettings,
    /// `IPFS_URL` (kubo's HTTP API), when snapshots are also uploaded.
    pub ipfs: Option<IpfsConfig>,
    pub alerts: super::AlertConfig,
    pub safety: SafetySettings,
    /// `STATUS_HOST:STATUS_PORT` for the status API, when `STATUS_PORT` is set.
    pub status_addr: Option<std::net::SocketAddr>,
    /// `LITE_NODE_DRILL`: an alert drill.
    pub drill: Option<Drill>,
    /// `LITE_NODE_ROLE=coordinator`: this node is a full node whose epochs
    /// are computed by workers (a worker reads a [`WorkerConfig`] instead).
    pub cluster: Option<super::ClusterSettings>,
}

/// One slot a node runs, and who signs for it.
#[derive(Clone, Debug)]
pub struct NodeSlot {
    pub slot_id: u64,
    pub signer_address: Address,
    pub signer_key: SecretKey,
}

/// Where snapshots are uploaded: a kubo HTTP API (`IPFS_URL`), with optional
/// basic-auth credentials (`IPFS_API_KEY`, `IPFS_API_SECRET`) for a hosted one.
#[derive(Clone)]
pub struct IpfsConfig {
    pub url: String,
    pub api_key: Option<String>,
    api_secret: Option<String>,
}

impl IpfsConfig {
    pub fn new(url: &str) -> Self {
        Self { url: url.to_owned(), api_key: None, api_secret: None }
    }

    pub fn api_secret(&self) -> Option<&str> {
        self.api_secret.as_deref()
    }

    fn from_env(env: &EnvSnapshot, problems: &mut Vec<String>) -> Option<Self> {
        let url = env.get("IPFS_URL")?;
        match Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => problems.push(format!(
                "IPFS_URL {} is not an http(s) URL (kubo's API, e.g. http://127.0.0.1:5001)",
                redact_url(url)
            )),
        }
        let (api_key, api_secret) = (env.get("IPFS_API_KEY"), env.get("IPFS_API_SECRET"));
        if api_key.is_some() != api_secret.is_some() {
            problems.push("IPFS_API_KEY and IPFS_API_SECRET go together: set both or neither".into());
        }
        Some(Self {
            url: url.to_owned(),
            api_key: api_key.map(str::to_owned),
            api_secret: api_secret.map(str::to_owned),
        })
    }
}

impl fmt::Debug for IpfsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IpfsConfig")
            .field("url", &redact_url(&self.url))
            .field("api_key", &self.api_key)
            .field("api_secret", &self.api_secret.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl NodeConfig {
    /// The source chain and the anchor with the market's contracts.
    pub fn chains(&self) -> ChainConfig {
        ChainConfig {
            source_rpc_urls: self.source_rpc_urls.clone(),
            anchor: Some(AnchorConfig {
                rpc_urls: self.anchor_rpc_urls.clone(),
                protocol_state: self.protocol_state,
                data_market: self.data_market,
            }),
            rpc_timeout: self.watch.rpc_timeout,
        }
    }

    /// The name the full node's coordinator and workers share on Redis.
    pub fn cluster_name(&self) -> String {
        cluster_name(&self.data_market, self.slot_id)
    }

    /// `{POWERLOOM_CHAIN}-{NAMESPACE}-{SOURCE_CHAIN}` (docs/protocol.md §3).
    pub fn full_namespace(&self) -> String {
        format!("{}-{}-{}", self.powerloom_chain, self.namespace, self.source_chain)
    }

    /// Checks every variable the node needs, reporting all problems at once.
    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let cluster = super::ClusterSettings::from_env(env, &mut problems);
        if cluster.as_ref().is_some_and(|c| c.role == super::Role::Worker) {
            problems.push("LITE_NODE_ROLE=worker is read by `lite-node run` as a worker's configuration".into());
        }
        if cluster.is_some() && env.get("SLOT_IDS").is_some() {
            problems.push(
                "LITE_NODE_ROLE=coordinator runs one slot, the full node's: give it as SLOT_ID, not SLOT_IDS".into(),
            );
        }
        // SLOT_IDS (several slots) stands in for SLOT_ID.
        let missing: Vec<&str> = REQUIRED
            .iter()
            .copied()
            .filter(|k| env.get(k).is_none() && !(*k == "SLOT_ID" && env.get("SLOT_IDS").is_some()))
            .collect();
        if !missing.is_empty() {
            problems.push(format!(
                "missing required environment variable{}: {} (see env.example)",
                if missing.len() == 1 { "" } else { "s" },
                missing.join(", ")
            ));
        }
        let compute = ComputeConfig::from_env(env).map_err(|e| problems.extend(e.problems)).ok();
        let projects = ProjectsSource::from_env(env).map_err(|e| problems.extend(e.problems)).ok();
        let watch = WatchSettings::from_env(env, &mut problems);
        let ipfs = IpfsConfig::from_env(env, &mut problems);
        let alerts = super::AlertConfig::from_env(env).map_err(|e| problems.extend(e.problems)).unwrap_or_default();
        let safety = safety_settings(env, &mut problems);
        let status_addr = status_addr(env, &mut problems);
        let drill = env
            .get("LITE_NODE_DRILL")
            .and_then(|d| d.parse::<Drill>().map_err(|e| problems.push(format!("LITE_NODE_DRILL: {e}"))).ok());

        let source_rpc_urls = rpc_urls(env, "SOURCE_RPC_URL", &mut problems);
        let anchor_rpc_urls = rpc_urls(env, "POWERLOOM_RPC_URL", &mut problems);
        let signer_address = address(env, "SIGNER_ACCOUNT_ADDRESS", &mut problems);
        let protocol_state = address(env, "PROTOCOL_STATE_CONTRACT", &mut problems);
        let data_market = address(env, "DATA_MARKET_CONTRACT", &mut problems);
        let signer_key = secret_key(env, &mut problems);
        let slot_ids: Vec<u64> = match (env.get("SLOT_ID"), env.get("SLOT_IDS")) {
            (Some(_), Some(_)) => {
                problems.push("SLOT_ID and SLOT_IDS are both set: give one (SLOT_IDS lists several slots)".into());
                Vec::new()
            }
            (Some(one), None) => match one.parse::<u64>() {
                Ok(id) if id > 0 => vec![id],
                _ => {
                    problems.push("SLOT_ID must be a positive integer (your slot's id on the data market)".into());
                    Vec::new()
                }
            },
            (None, Some(list)) => super::parse_slot_ids(list).unwrap_or_else(|e| {
                problems.push(format!("SLOT_IDS: {e} (slot ids and ranges, e.g. 1-20,35)"));
                Vec::new()
            }),
            (None, None) => Vec::new(),
        };
        let slot_id = slot_ids.first().copied().unwrap_or(0);
        let slot_signers = match env.get("SLOT_SIGNERS_FILE") {
            Some(path) if !slot_ids.is_empty() => super::read_signers_file(std::path::Path::new(path), &slot_ids)
                .unwrap_or_else(|e| {
                    problems.push(e);
                    Default::default()
                }),
            _ => Default::default(),
        };
        let skip_foreign_slots = match env.get("LITE_NODE_SKIP_FOREIGN_SLOTS").map(str::to_ascii_lowercase).as_deref() {
            None | Some("false" | "0" | "no") => false,
            Some("true" | "1" | "yes") => true,
            Some(other) => {
                problems.push(format!("LITE_NODE_SKIP_FOREIGN_SLOTS={other}: use true or false"));
                false
            }
        };
        let collector_port = match env.get("LOCAL_COLLECTOR_PORT").map(str::parse::<u16>) {
            None => 50051,
            Some(Ok(p)) if p > 0 => p,
            Some(_) => {
                problems.push("LOCAL_COLLECTOR_PORT must be a port number (1-65535)".into());
                0
            }
        };
        if let (Some(key), true) = (&signer_key, problems.is_empty()) {
            match alloy::signers::local::PrivateKeySigner::from_slice(key.bytes()) {
                Ok(derived) if derived.address() == signer_address => {}
                Ok(derived) => problems.push(format!(
                    "SIGNER_ACCOUNT_PRIVATE_KEY belongs to {}, not to SIGNER_ACCOUNT_ADDRESS {signer_address}",
                    derived.address()
                )),
                Err(_) => problems.push("SIGNER_ACCOUNT_PRIVATE_KEY is not a valid secp256k1 private key".into()),
            }
        }
        let text = |k: &str| env.get(k).unwrap_or_default().to_owned();
        for key in ["NAMESPACE", "POWERLOOM_CHAIN", "SOURCE_CHAIN"] {
            if env.get(key).is_some_and(|v| v.contains([':', ' '])) {
                problems.push(format!("{key} must not contain ':' or spaces: it is part of every project id"));
            }
        }
        match (compute, projects, signer_key) {
            (Some(compute), Some(projects), Some(signer_key)) if problems.is_empty() => Ok(Self {
                source_rpc_urls,
                anchor_rpc_urls,
                signer_address,
                slots: slot_ids
                    .iter()
                    .map(|&id| match slot_signers.get(&id) {
                        Some(s) => NodeSlot { slot_id: id, signer_address: s.address, signer_key: s.key.clone() },
                        None => NodeSlot { slot_id: id, signer_address, signer_key: signer_key.clone() },
                    })
                    .collect(),
                skip_foreign_slots,
                signer_key,
                slot_id,
                protocol_state,
                data_market,
                namespace: text("NAMESPACE"),
                powerloom_chain: text("POWERLOOM_CHAIN"),
                source_chain: text("SOURCE_CHAIN"),
                collector_port,
                collector_host: env.get("LOCAL_COLLECTOR_HOST").unwrap_or("localhost").to_owned(),
                projects,
                compute,
                watch,
                ipfs,
                alerts,
                safety,
                status_addr,
                drill,
                cluster,
            }),
            _ => Err(ConfigErrors { problems }),
        }
    }
}

/// What `lite-node compute run` reads: the package, the projects and the
/// chains — no signer, no slot registration, no collector.
#[derive(Clone, Debug)]
pub struct ComputeRunConfig {
    pub compute: ComputeConfig,
    pub projects: ProjectsSource,
    pub source_rpc_urls: Vec<Url>,
    /// `POWERLOOM_RPC_URL` with both contracts, when all three are set: the
    /// total slot count and epoch releases are read from it.
    pub anchor: Option<(Vec<Url>, Address, Address)>,
    /// `POWERLOOM_CHAIN-NAMESPACE-SOURCE_CHAIN`, a missing part shown as its
    /// variable's name.
    pub namespace: String,
    /// `SLOT_ID`, or the first of `SLOT_IDS`.
    pub slot_id: Option<u64>,
    pub watch: WatchSettings,
}

impl ComputeRunConfig {
    /// The source chain, and the anchor when it is configured.
    pub fn chains(&self) -> ChainConfig {
        ChainConfig {
            source_rpc_urls: self.source_rpc_urls.clone(),
            anchor: self.anchor.as_ref().map(|(rpc_urls, protocol_state, data_market)| AnchorConfig {
                rpc_urls: rpc_urls.clone(),
                protocol_state: *protocol_state,
                data_market: *data_market,
            }),
            rpc_timeout: self.watch.rpc_timeout,
        }
    }

    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let compute = ComputeConfig::from_env(env).map_err(|e| problems.extend(e.problems)).ok();
        let projects = ProjectsSource::from_env(env).map_err(|e| problems.extend(e.problems)).ok();
        let watch = WatchSettings::from_env(env, &mut problems);
        let source_rpc_urls = rpc_urls(env, "SOURCE_RPC_URL", &mut problems);
        if env.get("SOURCE_RPC_URL").is_none() {
            problems
                .push("SOURCE_RPC_URL is required: the chain the processors read (e.g. http://127.0.0.1:8545)".into());
        }
        let anchor =
            match (env.get("POWERLOOM_RPC_URL"), env.get("PROTOCOL_STATE_CONTRACT"), env.get("DATA_MARKET_CONTRACT")) {
                (Some(_), Some(_), Some(_)) => Some((
                    rpc_urls(env, "POWERLOOM_RPC_URL", &mut problems),
                    address(env, "PROTOCOL_STATE_CONTRACT", &mut problems),
                    address(env, "DATA_MARKET_CONTRACT", &mut problems),
                )),
                _ => None,
            };
        let part = |k: &str| env.get(k).unwrap_or(k).to_owned();
        let namespace = format!("{}-{}-{}", part("POWERLOOM_CHAIN"), part("NAMESPACE"), part("SOURCE_CHAIN"));
        let slot_id = match (env.get("SLOT_ID"), env.get("SLOT_IDS")) {
            (Some(one), _) => match one.parse::<u64>() {
                Ok(id) if id > 0 => Some(id),
                _ => {
                    problems.push(format!("SLOT_ID={one} is not a slot id (a positive integer); or give --slot"));
                    None
                }
            },
            (None, Some(list)) => match super::parse_slot_ids(list) {
                Ok(ids) => ids.first().copied(),
                Err(e) => {
                    problems.push(format!("SLOT_IDS: {e} (slot ids and ranges, e.g. 1-20,35); or give --slot"));
                    None
                }
            },
            (None, None) => None,
        };
        match (compute, projects) {
            (Some(compute), Some(projects)) if problems.is_empty() => {
                Ok(Self { compute, projects, source_rpc_urls, anchor, namespace, slot_id, watch })
            }
            _ => Err(ConfigErrors { problems }),
        }
    }
}

/// `STATUS_HOST:STATUS_PORT`, when `STATUS_PORT` is set.
fn status_addr(env: &EnvSnapshot, problems: &mut Vec<String>) -> Option<std::net::SocketAddr> {
    match env.get("STATUS_PORT").map(str::parse::<u16>) {
        None => None,
        Some(Ok(port)) => {
            let host = env.get("STATUS_HOST").unwrap_or("0.0.0.0");
            match host.parse::<std::net::IpAddr>() {
                Ok(ip) => Some(std::net::SocketAddr::new(ip, port)),
                Err(_) => {
                    problems.push(format!("STATUS_HOST {host} is not an IP address (e.g. 0.0.0.0 or 127.0.0.1)"));
                    None
                }
            }
        }
        Some(Err(_)) => {
            problems.push("STATUS_PORT must be a port number (0-65535; 0 picks a free one)".into());
            None
        }
    }
}

/// What a full node's worker (`LITE_NODE_ROLE=worker`) reads: the package,
/// the projects and the source chain as `lite-node compute run` does, the
/// cluster, and whose full node it works for — no signer, no collector.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub run: ComputeRunConfig,
    pub cluster: super::ClusterSettings,
    /// The full node's board: `DATA_MARKET_CONTRACT` and `SLOT_ID`, as its
    /// coordinator names it ([`NodeConfig::cluster_name`]).
    pub board: String,
    pub status_addr: Option<std::net::SocketAddr>,
}

impl WorkerConfig {
    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let run = ComputeRunConfig::from_env(env).map_err(|e| problems.extend(e.problems)).ok();
        let cluster = super::ClusterSettings::from_env(env, &mut problems);
        let status_addr = status_addr(env, &mut problems);
        let market = match env.get("DATA_MARKET_CONTRACT") {
            Some(_) => Some(address(env, "DATA_MARKET_CONTRACT", &mut problems)),
            None => {
                problems.push(
                    "a worker needs DATA_MARKET_CONTRACT and SLOT_ID: the full node it computes for (its \
                     coordinator's)"
                        .into(),
                );
                None
            }
        };
        if env.get("SLOT_ID").is_none() {
            problems.push("a worker needs SLOT_ID: the full node's slot (its coordinator's SLOT_ID)".into());
        }
        if env.get("SLOT_IDS").is_some() {
            problems.push("a worker computes for one full node: give its SLOT_ID, not SLOT_IDS".into());
        }
        match (run, cluster, market) {
            (Some(run), Some(cluster), Some(market)) if problems.is_empty() => {
                let board = cluster_name(&market, run.slot_id.unwrap_or(0));
                Ok(Self { run, cluster, board, status_addr })
            }
            _ => Err(ConfigErrors { problems }),
        }
    }
}

/// The name a full node's coordinator and workers share on Redis: its data
/// market and slot.
pub fn cluster_name(data_market: &Address, slot_id: u64) -> String {
    format!("{}:{slot_id}", data_market.to_string().to_ascii_lowercase())
}

/// The safety net's intervals (`LITE_NODE_SAFETY_CHECK_SECS`,
/// `LITE_NODE_STUCK_AFTER_SECS`, `LITE_NODE_STUCK_EXIT_AFTER_CHECKS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SafetySettings {
    pub check_every: Duration,
    pub stuck_after: Duration,
    pub exit_after: u32,
}

impl Default for SafetySettings {
    fn default() -> Self {
        Self { check_every: Duration::from_secs(120), stuck_after: Duration::from_secs(600), exit_after: 3 }
    }
}

fn safety_settings(env: &EnvSnapshot, problems: &mut Vec<String>) -> SafetySettings {
    let d = SafetySettings::default();
    let mut secs = |key: &str, default: Duration| match env.get(key).map(str::parse::<u64>) {
        None => default,
        Some(Ok(n)) if n > 0 => Duration::from_secs(n),
        Some(_) => {
            problems.push(format!("{key} must be a whole number of seconds above 0"));
            default
        }
    };
    let check_every = secs("LITE_NODE_SAFETY_CHECK_SECS", d.check_every);
    let stuck_after = secs("LITE_NODE_STUCK_AFTER_SECS", d.stuck_after);
    let exit_after = match env.get("LITE_NODE_STUCK_EXIT_AFTER_CHECKS").map(str::parse::<u32>) {
        None => d.exit_after,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            problems.push("LITE_NODE_STUCK_EXIT_AFTER_CHECKS must be a whole number above 0".into());
            d.exit_after
        }
    };
    SafetySettings { check_every, stuck_after, exit_after }
}

impl ComputeConfig {
    /// Checks the variables that say where the compute package comes from
    /// and how to build it.
    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let allow_unpinned = env.flag("SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED", &mut problems);
        let source = match env.get("SNAPSHOTTER_COMPUTE_REPO") {
            // An author's working tree, built as it is now (not pinned: for
            // `compute run` and the devnet, not for a node that earns).
            None => match env.get("LITE_NODE_COMPUTE_DIR") {
                Some(dir) => {
                    let dir = absolute(Path::new(dir));
                    if !dir.join("Cargo.toml").is_file() {
                        problems.push(format!(
                            "LITE_NODE_COMPUTE_DIR={}: no Cargo.toml there (the compute package's workspace root)",
                            dir.display()
                        ));
                    }
                    ComputeSource::Bundled(dir)
                }
                None => ComputeSource::Bundled(bundled_computes_dir()),
            },
            Some(_) if env.get("LITE_NODE_COMPUTE_DIR").is_some() => {
                problems.push(
                    "SNAPSHOTTER_COMPUTE_REPO and LITE_NODE_COMPUTE_DIR are both set: give the pinned repository \
                     or the local directory, not both"
                        .into(),
                );
                ComputeSource::Bundled(bundled_computes_dir())
            }
            Some(url) => {
                let pin = git_pin(env, "SNAPSHOTTER_COMPUTE_REPO", url, allow_unpinned, &mut problems);
                let path = PathBuf::from(env.get("SNAPSHOTTER_COMPUTE_REPO_PATH").unwrap_or(""));
                if path.is_absolute() || path.components().any(|c| c == std::path::Component::ParentDir) {
                    problems.push(
                        "SNAPSHOTTER_COMPUTE_REPO_PATH must be a relative path inside the repository (e.g. computes)"
                            .into(),
                    );
                }
                ComputeSource::Git { pin, path }
            }
        };
        let data_dir = absolute(Path::new(env.get("LITE_NODE_DATA_DIR").unwrap_or("./data")));
        let profile = env.get("LITE_NODE_COMPUTE_PROFILE").unwrap_or("release").to_owned();
        if !profile.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            problems.push(format!("LITE_NODE_COMPUTE_PROFILE={profile} is not a cargo profile name"));
        }
        let target_dir = env
            .get("LITE_NODE_COMPUTE_TARGET_DIR")
            .map(|p| absolute(Path::new(p)))
            .unwrap_or_else(|| data_dir.join("compute").join("target"));
        let cache_dir = env
            .get("LITE_NODE_COMPUTE_CACHE_DIR")
            .map(|p| absolute(Path::new(p)))
            .unwrap_or_else(|| data_dir.join("compute"));
        let plugin_api_dir = env.get("LITE_NODE_PLUGIN_API_DIR").map(|p| absolute(Path::new(p)));
        let local_dir = env.get("LITE_NODE_COMPUTE_DIR").map(|p| absolute(Path::new(p)));
        if problems.is_empty() {
            Ok(Self {
                source,
                data_dir,
                profile,
                target_dir,
                cache_dir,
                plugin_api_dir,
                cargo: PathBuf::from(env.get("LITE_NODE_CARGO").unwrap_or("cargo")),
                rustc: PathBuf::from(env.get("RUSTC").unwrap_or("rustc")),
                local_dir,
            })
        } else {
            Err(ConfigErrors { problems })
        }
    }
}

impl EnvSnapshot {
    /// The toolchain and compute-package variables, all a devnet's child
    /// nodes inherit (never an operator's alert channels or status port).
    pub fn toolchain_and_compute(&self) -> Vec<(String, String)> {
        const EXACT: [&str; 6] = ["PATH", "HOME", "TMPDIR", "RUSTC", "LITE_NODE_CARGO", "LITE_NODE_PLUGIN_API_DIR"];
        const PREFIXES: [&str; 5] =
            ["CARGO", "RUSTUP_", "LITE_NODE_COMPUTE_", "SNAPSHOTTER_COMPUTE_", "LITE_NODE_DATA_DIR"];
        let inherited = |key: &str| EXACT.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p));
        self.vars().filter(|(k, _)| inherited(k)).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    }

    /// The environment a devnet builds its compute package in, and hands
    /// its nodes: this one, with `data_dir`, and the devnet's own cache and
    /// target under `cache` unless they are set; `LITE_NODE_COMPUTE_DIR`
    /// made absolute (the nodes run in other directories).
    pub fn for_devnet_compute(&self, data_dir: &Path, cache: &Path) -> EnvSnapshot {
        let mut env = self.clone().with("LITE_NODE_DATA_DIR", data_dir.display().to_string());
        if self.get("LITE_NODE_COMPUTE_CACHE_DIR").is_none() {
            env = env.with("LITE_NODE_COMPUTE_CACHE_DIR", cache.join("compute").display().to_string());
        }
        if let Some(dir) = self.get("LITE_NODE_COMPUTE_DIR") {
            env = env.with("LITE_NODE_COMPUTE_DIR", absolute(Path::new(dir)).display().to_string());
        }
        if self.get("LITE_NODE_COMPUTE_TARGET_DIR").is_none() {
            env = env.with("LITE_NODE_COMPUTE_TARGET_DIR", cache.join("target").display().to_string());
        }
        env
    }
}

/// The checkout this binary was built from (`runtime/crates/config/../../..`).
const CHECKOUT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../..");

/// The compute package when none is named: the one the current directory
/// is in (an author's, found by its workspace manifest, which patches in
/// `lite-node-plugin-api`), else the checkout's `computes/` here, else the
/// one next to the runtime's sources this binary was built from.
fn bundled_computes_dir() -> PathBuf {
    let here = absolute(Path::new("computes"));
    if here.join("Cargo.toml").is_file() {
        return here;
    }
    if let Some(package) = enclosing_package(&absolute(Path::new("."))) {
        return package;
    }
    let built_from = Path::new(CHECKOUT).join("computes");
    built_from.canonicalize().unwrap_or(built_from)
}

/// The compute package workspace `dir` is in: the nearest directory at or
/// above it whose Cargo.toml is a workspace that patches in
/// `lite-node-plugin-api` (a package's; the node's own workspace builds the
/// interface as a member instead, and its package is `computes/`).
pub fn enclosing_package(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find_map(|d| {
        let text = std::fs::read_to_string(d.join("Cargo.toml")).ok()?;
        if !text.contains("[workspace]") {
            return None;
        }
        let patched = text.split("[patch.crates-io]").nth(1).is_some_and(|p| p.contains("lite-node-plugin-api"));
        if patched {
            return Some(d.to_path_buf());
        }
        let checkout = d.join("computes").join("Cargo.toml");
        checkout.is_file().then(|| d.join("computes"))
    })
}

/// The projects a data market defines, as a collector or validator is told
/// them: its namespace (`{POWERLOOM_CHAIN}-{NAMESPACE}-{SOURCE_CHAIN}`, the
/// three variables every node of the market sets) and its projects.json.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarketProjects {
    pub namespace: String,
    pub source: ProjectsSource,
}

impl MarketProjects {
    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let missing: Vec<&str> =
            ["POWERLOOM_CHAIN", "NAMESPACE", "SOURCE_CHAIN"].into_iter().filter(|k| env.get(k).is_none()).collect();
        if !missing.is_empty() {
            problems.push(format!(
                "{} not set: the data market's project namespace (POWERLOOM_CHAIN-NAMESPACE-SOURCE_CHAIN, as its \
                 nodes set them) is what submissions' project ids are checked against",
                missing.join(", ")
            ));
        }
        let source = ProjectsSource::from_env(env).map_err(|e| problems.extend(e.problems)).ok();
        match source {
            Some(source) if problems.is_empty() => {
                let part = |k: &str| env.get(k).unwrap_or_default().to_owned();
                let namespace = format!("{}-{}-{}", part("POWERLOOM_CHAIN"), part("NAMESPACE"), part("SOURCE_CHAIN"));
                Ok(Self { namespace, source })
            }
            _ => Err(ConfigErrors { problems }),
        }
    }
}

impl ProjectsSource {
    /// Whether the environment names projects.json at all (`PROJECTS_CONFIG`
    /// or `SNAPSHOT_CONFIG_REPO`).
    pub fn configured(env: &EnvSnapshot) -> bool {
        env.get("PROJECTS_CONFIG").is_some() || env.get("SNAPSHOT_CONFIG_REPO").is_some()
    }

    /// `PROJECTS_CONFIG`, or the pinned `SNAPSHOT_CONFIG_REPO{,_BRANCH,_COMMIT}`.
    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let source = match env.get("SNAPSHOT_CONFIG_REPO") {
            None => ProjectsSource::File(absolute(Path::new(env.get("PROJECTS_CONFIG").unwrap_or("./projects.json")))),
            Some(url) => {
                let allow = env.flag("SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED", &mut problems);
                let pin = git_pin(env, "SNAPSHOT_CONFIG_REPO", url, allow, &mut problems);
                let file = PathBuf::from(env.get("PROJECTS_CONFIG").unwrap_or("projects.json"));
                if file.is_absolute() || file.components().any(|c| c == std::path::Component::ParentDir) {
                    problems.push(
                        "PROJECTS_CONFIG must be a relative path inside the repository when SNAPSHOT_CONFIG_REPO is set"
                            .into(),
                    );
                }
                ProjectsSource::Git { pin, file }
            }
        };
        if problems.is_empty() { Ok(source) } else { Err(ConfigErrors { problems }) }
    }
}

fn git_pin(env: &EnvSnapshot, prefix: &str, url: &str, allow_unpinned: bool, problems: &mut Vec<String>) -> GitPin {
    let branch_key = format!("{prefix}_BRANCH");
    let commit_key = format!("{prefix}_COMMIT");
    let branch = env.get(&branch_key).unwrap_or_default().to_owned();
    if branch.is_empty() {
        problems.push(format!("{branch_key} is required when {prefix} is set (the branch that holds the commit)"));
    }
    let commit = match env.get(&commit_key) {
        Some(c) if c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()) => Some(c.to_ascii_lowercase()),
        Some(c) => {
            problems.push(format!(
                "{commit_key}={c} is not a full commit id: give all 40 hex digits (git rev-parse <commit>)"
            ));
            None
        }
        None if allow_unpinned => None,
        None => {
            problems.push(format!(
                "{commit_key} is not set: the node runs only a pinned commit of {prefix}; set it to a 40-hex commit id, \
                 or set SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED=true to follow the tip of {branch_key}"
            ));
            None
        }
    };
    GitPin { url: url.to_owned(), branch, commit }
}

fn rpc_urls(env: &EnvSnapshot, key: &str, problems: &mut Vec<String>) -> Vec<Url> {
    let websocket = key == "POWERLOOM_RPC_URL";
    let Some(value) = env.get(key) else {
        return Vec::new();
    };
    let mut urls = Vec::new();
    for text in value.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let parsed = if websocket { parse_anchor_url(text) } else { parse_rpc_url(text) };
        match parsed {
            Ok(url) => urls.push(url),
            Err(e) => problems.push(format!("{key} has {e}; separate several URLs with commas")),
        }
    }
    urls
}

/// An address variable, checked once (a missing one is reported by the
/// required list; the zero address stands in until the problems are shown).
fn address(env: &EnvSnapshot, key: &str, problems: &mut Vec<String>) -> Address {
    let Some(value) = env.get(key) else {
        return Address::ZERO;
    };
    let hex = value.strip_prefix("0x").or_else(|| value.strip_prefix("0X")).unwrap_or("");
    match hex.parse::<Address>() {
        Ok(address) if hex.len() == 40 => address,
        _ => {
            problems.push(format!("{key}={value} is not an address: expected 0x followed by 40 hex digits"));
            Address::ZERO
        }
    }
}

fn secret_key(env: &EnvSnapshot, problems: &mut Vec<String>) -> Option<SecretKey> {
    const KEY: &str = "SIGNER_ACCOUNT_PRIVATE_KEY";
    let Some(value) = env.get(KEY) else {
        return Some(SecretKey([0; 32]));
    };
    let hex = value.strip_prefix("0x").unwrap_or(value);
    let mut bytes = [0u8; 32];
    match hex::decode_to_slice(hex, &mut bytes) {
        Ok(()) if bytes != [0; 32] => Some(SecretKey(bytes)),
        // The value itself is never echoed: it is a secret.
        _ => {
            problems.push(format!("{KEY} is not a private key: expected 64 hex digits (with or without 0x)"));
            None
        }
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_websocket_url_is_the_anchors_only() {
        let mut pairs = full_env();
        pairs.retain(|(k, _)| *k != "POWERLOOM_RPC_URL");
        pairs.push(("POWERLOOM_RPC_URL", "wss://anchor.example/v1/s3cret"));
        assert!(NodeConfig::from_env(&EnvSnapshot::from_pairs(pairs.clone())).is_ok(), "the anchor may be ws(s)");
        pairs.retain(|(k, _)| *k != "SOURCE_RPC_URL");
        pairs.push(("SOURCE_RPC_URL", "wss://source.example/v1/s3cret"));
        let err = NodeConfig::from_env(&EnvSnapshot::from_pairs(pairs)).unwrap_err().to_string();
        assert!(err.contains("SOURCE_RPC_URL has `wss://source.example/…`, a WebSocket endpoint"), "{err}");
        assert!(err.contains("http(s) URL"), "says what to give instead: {err}");
        assert!(!err.contains("s3cret"), "{err}");
    }

    #[test]
    fn env_files_are_read_as_dotenv_reads_them_and_a_repeated_key_takes_its_last_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".env");
        std::fs::write(
            &file,
            "# the node's settings\n\
             LITE_NODE_POLL_INTERVAL_MS=500   # anchor poll interval\n\
             TELEGRAM_CHAT_ID=123 # the operator's chat\n\
             QUOTED=\"a # not a comment\"\n\
             export EXPORTED=yes\n\
             REPEATED=first\n\
             REPEATED=second\n\
             NAMESPACE=file\n",
        )
        .unwrap();
        let env = EnvSnapshot::from_pairs([("NAMESPACE", "process")]).with_env_file(&file).unwrap();
        assert_eq!(env.get("LITE_NODE_POLL_INTERVAL_MS"), Some("500"), "an inline comment is not part of the value");
        assert_eq!(env.get("TELEGRAM_CHAT_ID"), Some("123"));
        assert_eq!(env.get("QUOTED"), Some("a # not a comment"));
        assert_eq!(env.get("EXPORTED"), Some("yes"));
        assert_eq!(env.get("REPEATED"), Some("second"), "the last value, as docker --env-file");
        assert_eq!(env.get("NAMESPACE"), Some("process"), "the process environment wins");
        assert_eq!(env.warnings().len(), 1, "{:?}", env.warnings());
        assert!(env.warnings()[0].contains("REPEATED is set 2 times"), "{:?}", env.warnings());
    }

    #[test]
    fn an_unreadable_env_file_line_is_named_by_number_and_never_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".env");
        std::fs::write(&file, "A=1\nSIGNER_ACCOUNT_PRIVATE_KEY 0xac0974bec39a17e36ba4a6b4d238ff944bacb478\n").unwrap();
        let Err(err) = EnvSnapshot::default().with_env_file(&file) else { panic!("a line without = is an error") };
        let err = err.to_string();
        assert!(err.contains(".env:2: cannot read this line"), "{err}");
        assert!(!err.contains("ac0974bec"), "the line is not echoed: {err}");
    }

    fn full_env() -> Vec<(&'static str, &'static str)> {
        vec![
            ("SOURCE_RPC_URL", "http://127.0.0.1:8545"),
            ("SIGNER_ACCOUNT_ADDRESS", "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"),
            ("SIGNER_ACCOUNT_PRIVATE_KEY", "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"),
            ("SLOT_ID", "1"),
            ("POWERLOOM_RPC_URL", "http://127.0.0.1:8546,http://127.0.0.1:8547"),
            ("PROTOCOL_STATE_CONTRACT", "0x5FbDB2315678afecb367f032d93F642f64180aa3"),
            ("DATA_MARKET_CONTRACT", "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"),
            ("NAMESPACE", "UNISWAPV3"),
            ("POWERLOOM_CHAIN", "devnet"),
            ("SOURCE_CHAIN", "ETH"),
        ]
    }

    #[test]
    fn complete_env_is_accepted_with_defaults() {
        let cfg = NodeConfig::from_env(&EnvSnapshot::from_pairs(full_env())).unwrap();
        assert_eq!(cfg.full_namespace(), "devnet-UNISWAPV3-ETH");
        assert_eq!(cfg.anchor_rpc_urls.len(), 2);
        assert_eq!(cfg.collector_port, 50051);
        assert!(matches!(cfg.compute.source, ComputeSource::Bundled(_)));
        assert_eq!(cfg.compute.profile, "release");
    }

    #[test]
    fn hung_computes_past_what_the_blocking_pool_can_spare_are_refused() {
        let with = |n: &str| {
            let mut env = full_env();
            env.push(("LITE_NODE_MAX_HUNG_COMPUTES", n));
            NodeConfig::from_env(&EnvSnapshot::from_pairs(env))
        };
        assert_eq!(with("384").unwrap().watch.max_hung_computes, 384);
        let err = with("500").unwrap_err().to_string();
        assert!(err.contains("LITE_NODE_MAX_HUNG_COMPUTES=500 is more than 384"), "{err}");
    }

    #[test]
    fn every_missing_variable_is_named_in_one_error() {
        let err = NodeConfig::from_env(&EnvSnapshot::default()).unwrap_err();
        let text = err.to_string();
        for key in REQUIRED {
            assert!(text.contains(key), "{key} not named in: {text}");
        }
    }

    #[test]
    fn secret_key_never_appears_in_errors_or_debug() {
        let mut env = full_env();
        env.retain(|(k, _)| *k != "SIGNER_ACCOUNT_PRIVATE_KEY");
        env.push(("SIGNER_ACCOUNT_PRIVATE_KEY", "0xnot-a-key-but-secret-anyway"));
        let err = NodeConfig::from_env(&EnvSnapshot::from_pairs(env)).unwrap_err().to_string();
        assert!(!err.contains("secret-anyway"), "{err}");
        let cfg = NodeConfig::from_env(&EnvSnapshot::from_pairs(full_env())).unwrap();
        assert!(!format!("{cfg:?}").contains("ac0974bec"));
    }

    #[test]
    fn a_key_that_is_not_the_signers_is_refused() {
        let mut env = full_env();
        env.retain(|(k, _)| *k != "SIGNER_ACCOUNT_ADDRESS");
        env.push(("SIGNER_ACCOUNT_ADDRESS", "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"));
        let err = NodeConfig::from_env(&EnvSnapshot::from_pairs(env)).unwrap_err().to_string();
        assert_eq!(
            err,
            "SIGNER_ACCOUNT_PRIVATE_KEY belongs to 0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266, \
             not to SIGNER_ACCOUNT_ADDRESS 0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
        );
    }

    #[test]
    fn unpinned_repo_is_refused_unless_allowed() {
        let mut env = vec![
            ("SNAPSHOTTER_COMPUTE_REPO", "https://example.invalid/c.git"),
            ("SNAPSHOTTER_COMPUTE_REPO_BRANCH", "main"),
        ];
        let err = ComputeConfig::from_env(&EnvSnapshot::from_pairs(env.clone())).unwrap_err().to_string();
        assert!(err.contains("SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED=true"), "{err}");
        env.push(("SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED", "true"));
        let cfg = ComputeConfig::from_env(&EnvSnapshot::from_pairs(env)).unwrap();
        assert!(matches!(cfg.source, ComputeSource::Git { pin: GitPin { commit: None, .. }, .. }));
    }

    #[test]
    fn short_commit_and_escaping_path_are_refused() {
        let env = vec![
            ("SNAPSHOTTER_COMPUTE_REPO", "file:///tmp/x"),
            ("SNAPSHOTTER_COMPUTE_REPO_BRANCH", "main"),
            ("SNAPSHOTTER_COMPUTE_REPO_COMMIT", "abc123"),
            ("SNAPSHOTTER_COMPUTE_REPO_PATH", "../elsewhere"),
        ];
        let err = ComputeConfig::from_env(&EnvSnapshot::from_pairs(env)).unwrap_err();
        assert_eq!(err.problems.len(), 2, "{err}");
    }
}
