//! `lite-node compute run`: one epoch through the compute crate, nothing signed.

use alloy::primitives::Address;
use lite_node_core::url::Url;

use crate::{
    AnchorConfig, ChainConfig, ComputeConfig, ConfigErrors, EnvSnapshot, ProjectsSource, WatchSettings,
    env::{address, rpc_urls},
};

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
    /// `Some`: the market finalizes roots only, and its pairs are read from
    /// these APIs (`PAIRS_ON_CHAIN=false`, `DATA_API_URLS`).
    pub pairs_from: Option<Vec<Url>>,
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
        let pairs_from = crate::env::pairs_from(env, &mut problems);
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
                Ok(Self { compute, projects, source_rpc_urls, anchor, namespace, pairs_from, slot_id, watch })
            }
            _ => Err(ConfigErrors { problems }),
        }
    }
}
