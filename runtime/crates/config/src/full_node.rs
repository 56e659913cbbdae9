//! A full node spread over machines: which part this process plays, where
//! its coordinator and workers meet, and what a worker reads
//! (`WorkerConfig`).

use std::time::Duration;

use alloy::primitives::Address;

use crate::{
    ComputeRunConfig, ConfigErrors, EnvSnapshot,
    env::{address, status_addr},
};

/// The part a `lite-node run` process plays (`LITE_NODE_ROLE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A node of its own slot(s) (the default).
    Lite,
    /// A full node's coordinator: watches the chain, hands the epoch's data
    /// sources to the workers, submits what they computed.
    Coordinator,
    /// A full node's worker: computes what the coordinator's board gives it.
    Worker,
}

/// How a full node's items find their worker (`LITE_NODE_CLUSTER_ASSIGN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterAssign {
    /// Peer index: member k of n (members sorted by id) takes the items whose
    /// index ≡ k (mod n).
    PeerIndex,
    /// Least backlog: the coordinator gives each item to the worker with the
    /// fewest items outstanding.
    LeastBacklog,
}

impl ClusterAssign {
    /// Both modes, as `LITE_NODE_CLUSTER_ASSIGN` spells them.
    pub const ALL: [ClusterAssign; 2] = [ClusterAssign::PeerIndex, ClusterAssign::LeastBacklog];

    /// As `LITE_NODE_CLUSTER_ASSIGN` spells it (and a cluster's board records it).
    pub fn name(self) -> &'static str {
        match self {
            ClusterAssign::PeerIndex => "peer-index",
            ClusterAssign::LeastBacklog => "least-backlog",
        }
    }
}

/// Where and how a full node's coordinator and workers meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    pub role: Role,
    /// `LITE_NODE_CLUSTER_REDIS_URL` (required for either role).
    pub redis_url: String,
    /// `LITE_NODE_CLUSTER_ASSIGN`: `peer-index` (default) or `least-backlog`.
    pub assign: ClusterAssign,
    /// `LITE_NODE_WORKER_ID` (default: the host name): a worker's name in
    /// the cluster, the same after a restart.
    pub worker_id: String,
    /// `LITE_NODE_CLUSTER_LEASE_SECS` (10): an assignment not acknowledged
    /// within it is given to another worker.
    pub lease: Duration,
    /// `LITE_NODE_CLUSTER_HEARTBEAT_MS` (1000): how often a member renews
    /// its membership, which lapses after three of these.
    pub heartbeat: Duration,
}

impl ClusterSettings {
    /// The cluster settings of a coordinator or worker; `None` for a lite
    /// node. Problems are added to `problems`.
    pub fn from_env(env: &EnvSnapshot, problems: &mut Vec<String>) -> Option<Self> {
        let role = match env.get("LITE_NODE_ROLE").map(str::trim) {
            None | Some("") | Some("lite") => return None,
            Some("coordinator") => Role::Coordinator,
            Some("worker") => Role::Worker,
            Some(other) => {
                problems.push(format!("LITE_NODE_ROLE={other} is not a role: use lite, coordinator or worker"));
                return None;
            }
        };
        let redis_url = match env.get("LITE_NODE_CLUSTER_REDIS_URL").map(str::trim).filter(|u| !u.is_empty()) {
            Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => url.to_owned(),
            Some(_) => {
                problems.push("LITE_NODE_CLUSTER_REDIS_URL must be a redis:// (or rediss://) URL".into());
                String::new()
            }
            None => {
                problems.push(format!(
                    "LITE_NODE_ROLE={} needs LITE_NODE_CLUSTER_REDIS_URL, the Redis the coordinator and its workers \
                     share (e.g. redis://10.0.0.5:6379)",
                    if role == Role::Coordinator { "coordinator" } else { "worker" }
                ));
                String::new()
            }
        };
        let assign = match env.get("LITE_NODE_CLUSTER_ASSIGN").map(str::trim) {
            None | Some("") => ClusterAssign::PeerIndex,
            Some(name) => match ClusterAssign::ALL.iter().find(|a| a.name() == name) {
                Some(&assign) => assign,
                None => {
                    problems.push(format!("LITE_NODE_CLUSTER_ASSIGN={name}: use peer-index or least-backlog"));
                    ClusterAssign::PeerIndex
                }
            },
        };
        let worker_id = env
            .get("LITE_NODE_WORKER_ID")
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_owned()))
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("worker-{}", std::process::id()));
        if !worker_id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) || worker_id.len() > 64 {
            problems.push(format!("LITE_NODE_WORKER_ID={worker_id}: use at most 64 letters, digits, `-`, `_` or `.`"));
        }
        let mut millis = |key: &str, default: u64, max: u64, scale: u64| match env.get(key).map(str::parse::<u64>) {
            None => Duration::from_millis(default * scale),
            Some(Ok(n)) if (1..=max).contains(&n) => Duration::from_millis(n * scale),
            Some(_) => {
                problems.push(format!("{key} must be a whole number from 1 to {max}"));
                Duration::from_millis(default * scale)
            }
        };
        let lease = millis("LITE_NODE_CLUSTER_LEASE_SECS", 10, 3600, 1000);
        let heartbeat = millis("LITE_NODE_CLUSTER_HEARTBEAT_MS", 1000, 60_000, 1);
        Some(Self { role, redis_url, assign, worker_id, lease, heartbeat })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> (Option<ClusterSettings>, Vec<String>) {
        let env = EnvSnapshot::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let mut problems = Vec::new();
        (ClusterSettings::from_env(&env, &mut problems), problems)
    }

    #[test]
    fn a_lite_node_has_no_cluster_and_a_role_needs_its_redis() {
        assert_eq!(parse(&[]), (None, vec![]));
        assert_eq!(parse(&[("LITE_NODE_ROLE", "lite")]).0, None);
        let (_, problems) = parse(&[("LITE_NODE_ROLE", "worker")]);
        assert!(problems[0].contains("needs LITE_NODE_CLUSTER_REDIS_URL"), "{problems:?}");
        let (_, problems) = parse(&[("LITE_NODE_ROLE", "boss")]);
        assert!(problems[0].contains("use lite, coordinator or worker"), "{problems:?}");
    }

    #[test]
    fn a_worker_is_read_with_its_defaults_and_its_errors_named() {
        let (s, problems) = parse(&[
            ("LITE_NODE_ROLE", "worker"),
            ("LITE_NODE_CLUSTER_REDIS_URL", "redis://127.0.0.1:6379"),
            ("LITE_NODE_WORKER_ID", "w-1"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        let s = s.unwrap();
        assert_eq!((s.role, s.assign, s.worker_id.as_str()), (Role::Worker, ClusterAssign::PeerIndex, "w-1"));
        assert_eq!((s.lease, s.heartbeat), (Duration::from_secs(10), Duration::from_secs(1)));
        let (_, problems) = parse(&[
            ("LITE_NODE_ROLE", "coordinator"),
            ("LITE_NODE_CLUSTER_REDIS_URL", "http://x"),
            ("LITE_NODE_CLUSTER_ASSIGN", "random"),
            ("LITE_NODE_WORKER_ID", "a b"),
            ("LITE_NODE_CLUSTER_LEASE_SECS", "0"),
            ("LITE_NODE_CLUSTER_HEARTBEAT_MS", "18446744073709551615"),
        ]);
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(
            problems.iter().any(|p| p.contains("HEARTBEAT_MS must be a whole number from 1 to 60000")),
            "{problems:?}"
        );
    }

    #[test]
    fn a_worker_needs_its_full_nodes_market_and_slot_and_no_signer() {
        let env =
            |pairs: &[(&str, &str)]| EnvSnapshot::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let base = [
            ("LITE_NODE_ROLE", "worker"),
            ("LITE_NODE_CLUSTER_REDIS_URL", "redis://127.0.0.1:6379"),
            ("LITE_NODE_WORKER_ID", "w1"),
            ("SOURCE_RPC_URL", "http://127.0.0.1:8545"),
            ("PROJECTS_CONFIG", "projects.json"),
        ];
        let problems = crate::WorkerConfig::from_env(&env(&base)).unwrap_err().problems;
        assert!(problems.iter().any(|p| p.contains("needs DATA_MARKET_CONTRACT and SLOT_ID")), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("needs SLOT_ID")), "{problems:?}");
        let mut full = base.to_vec();
        full.extend([("DATA_MARKET_CONTRACT", "0x00000000000000000000000000000000000D47a1"), ("SLOT_ID", "9")]);
        let cfg = crate::WorkerConfig::from_env(&env(&full)).unwrap();
        assert_eq!(cfg.board, "0x00000000000000000000000000000000000d47a1:9", "lower case: the coordinator's name");
        assert_eq!(cfg.cluster.role, Role::Worker);
    }
}

/// What a full node's worker (`LITE_NODE_ROLE=worker`) reads: the package,
/// the projects and the source chain as `lite-node compute run` does, the
/// cluster, and whose full node it works for — no signer, no collector.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub run: ComputeRunConfig,
    pub cluster: ClusterSettings,
    /// The full node's board: `DATA_MARKET_CONTRACT` and `SLOT_ID`, as its
    /// coordinator names it ([`NodeConfig::cluster_name`]).
    pub board: String,
    pub status_addr: Option<std::net::SocketAddr>,
}

impl WorkerConfig {
    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let run = ComputeRunConfig::from_env(env).map_err(|e| problems.extend(e.problems)).ok();
        let cluster = ClusterSettings::from_env(env, &mut problems);
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
