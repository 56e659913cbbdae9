//! A full node's worker (`LITE_NODE_ROLE=worker`): `WorkerConfig`.

use alloy::primitives::Address;

use crate::{
    ComputeRunConfig, ConfigErrors, EnvSnapshot,
    env::{address, status_addr},
};

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
