//! Where a process's chains are and how long a request may take, in one
//! shape for every verb, so the chain clients are built one way
//! (`lite_node_chain::Chains::connect`): the node's and `compute run`'s from
//! the environment, a collector's or validator's from its flags (the
//! timeout still from the environment), the devnet's from its own anvil.

use std::time::Duration;

use alloy::primitives::Address;
use lite_node_core::url::{Url, parse_anchor_url, parse_rpc_url};

use crate::{ConfigErrors, EnvSnapshot, env::rpc_timeout};

/// The chains one process talks to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainConfig {
    /// `SOURCE_RPC_URL`: the chain computes read.
    pub source_rpc_urls: Vec<Url>,
    /// The anchor chain and the market's contracts on it, when configured.
    pub anchor: Option<AnchorConfig>,
    /// Per JSON-RPC request (`LITE_NODE_RPC_TIMEOUT_SECS`, default 15).
    pub rpc_timeout: Duration,
}

/// The anchor chain (`POWERLOOM_RPC_URL`) and the data market on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnchorConfig {
    pub rpc_urls: Vec<Url>,
    pub protocol_state: Address,
    pub data_market: Address,
}

impl ChainConfig {
    /// A collector's or validator's chains: `--anchor-rpc`, `--source-rpc`
    /// (default: the anchor's URLs, over HTTP when those are WebSockets),
    /// each a comma-separated list named by its flag when it does not parse.
    pub fn from_flags(
        anchor_rpc: &str,
        source_rpc: Option<&str>,
        protocol_state: Address,
        data_market: Address,
        env: &EnvSnapshot,
    ) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let mut urls = |flag: &str, text: &str, parse: fn(&str) -> Result<Url, String>| {
            let mut urls = Vec::new();
            for one in text.split(',').map(str::trim).filter(|u| !u.is_empty()) {
                match parse(one) {
                    Ok(url) => urls.push(url),
                    Err(e) => problems.push(format!("--{flag}: {e}")),
                }
            }
            if urls.is_empty() && !text.split(',').any(|u| !u.trim().is_empty()) {
                problems.push(format!("--{flag} names no URL"));
            }
            urls
        };
        let anchor_urls = urls("anchor-rpc", anchor_rpc, parse_anchor_url);
        let source = source_rpc.map(str::to_owned).unwrap_or_else(|| {
            anchor_rpc
                .split(',')
                .map(|u| u.trim().replacen("wss://", "https://", 1).replacen("ws://", "http://", 1))
                .collect::<Vec<_>>()
                .join(",")
        });
        let source_rpc_urls = urls("source-rpc", &source, parse_rpc_url);
        let rpc_timeout = rpc_timeout(env, &mut problems);
        if !problems.is_empty() {
            return Err(ConfigErrors { problems });
        }
        Ok(Self {
            source_rpc_urls,
            anchor: Some(AnchorConfig { rpc_urls: anchor_urls, protocol_state, data_market }),
            rpc_timeout,
        })
    }

    /// One local chain serving as both (the devnet's anvil).
    pub fn local(
        url: Url,
        protocol_state: Address,
        data_market: Address,
        env: &EnvSnapshot,
    ) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let rpc_timeout = rpc_timeout(env, &mut problems);
        if !problems.is_empty() {
            return Err(ConfigErrors { problems });
        }
        Ok(Self {
            source_rpc_urls: vec![url.clone()],
            anchor: Some(AnchorConfig { rpc_urls: vec![url], protocol_state, data_market }),
            rpc_timeout,
        })
    }
}
