//! `lite-node run`'s whole configuration: `NodeConfig`, its slots and IPFS.

use std::fmt;

use alloy::primitives::Address;
use lite_node_core::url::{Url, redact_url};

use crate::{
    AnchorConfig, ChainConfig, ComputeConfig, ConfigErrors, Drill, EnvSnapshot, ProjectsSource, REQUIRED,
    SafetySettings, SecretKey, WatchSettings, cluster_name,
    env::{address, rpc_urls, status_addr},
    secret::secret_key,
    watch::safety_settings,
};

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
    /// `Some`: the market finalizes roots only, and its pairs are read from
    /// these APIs (`PAIRS_ON_CHAIN=false`, `DATA_API_URLS`).
    pub pairs_from: Option<Vec<Url>>,
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
        // SLOT_IDS (several slots) stands in for SLOT_ID, and an encrypted
        // keystore (SIGNER_KEYSTORE_FILE) for SIGNER_ACCOUNT_PRIVATE_KEY.
        let missing: Vec<&str> = REQUIRED
            .iter()
            .copied()
            .filter(|k| {
                env.get(k).is_none()
                    && !(*k == "SLOT_ID" && env.get("SLOT_IDS").is_some())
                    && !(*k == "SIGNER_ACCOUNT_PRIVATE_KEY" && env.get(crate::secret::KEYSTORE).is_some())
            })
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
                    "{} belongs to {}, not to SIGNER_ACCOUNT_ADDRESS {signer_address}",
                    crate::secret::key_source(env),
                    derived.address()
                )),
                Err(_) => {
                    problems.push(format!("{} is not a valid secp256k1 private key", crate::secret::key_source(env)))
                }
            }
        }
        let pairs_from = crate::env::pairs_from(env, &mut problems);
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
                pairs_from,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ComputeSource, GitPin};

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
