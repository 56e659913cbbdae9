//! The one way a process connects its chains from configuration: the I/O
//! runtime, the source chain's client and the anchor's (shared with the
//! ProtocolState reads), each with the configured timeout. Every verb and
//! the devnet build their clients here.

use std::sync::Arc;

use lite_node_config::ChainConfig;
use lite_node_core::BadInput;
use prometheus_client::metrics::counter::Counter;

use crate::{Anchor, HttpRpc, IoRuntime};

/// A process's chains.
#[derive(Debug)]
pub struct Chains {
    /// The runtime every request runs on; kept for as long as the clients.
    pub io: IoRuntime,
    pub source: Arc<HttpRpc>,
    /// ProtocolState on the anchor chain, when one is configured.
    pub anchor: Option<Arc<Anchor>>,
}

impl Chains {
    /// Connects what `cfg` names (no request is made yet).
    pub fn connect(cfg: &ChainConfig) -> Result<Self, String> {
        Self::connect_counting(cfg, |_| None)
    }

    /// [`Chains::connect`], counting each role's failed requests in the
    /// counter `errors` gives for it (`"source"`, `"anchor"`).
    pub fn connect_counting(
        cfg: &ChainConfig,
        errors: impl Fn(&'static str) -> Option<Counter>,
    ) -> Result<Self, String> {
        let io = IoRuntime::new().map_err(|e| format!("starting the I/O runtime: {e}"))?;
        let client = |role: &'static str, urls: &[lite_node_core::url::Url]| {
            let rpc = HttpRpc::from_urls(role, urls.to_vec(), cfg.rpc_timeout, io.clone())?;
            Ok::<_, String>(match errors(role) {
                Some(counter) => rpc.count_errors(counter),
                None => rpc,
            })
        };
        let source = Arc::new(client("source", &cfg.source_rpc_urls)?);
        let anchor = match &cfg.anchor {
            Some(a) => {
                let rpc = Arc::new(client("anchor", &a.rpc_urls)?);
                Some(Arc::new(Anchor::shared(rpc, a.protocol_state, a.data_market)))
            }
            None => None,
        };
        Ok(Self { io, source, anchor })
    }

    /// The anchor, for a caller whose configuration always names one.
    pub fn anchor(&self) -> Result<&Arc<Anchor>, BadInput> {
        self.anchor.as_ref().ok_or_else(|| BadInput("no anchor chain is configured (POWERLOOM_RPC_URL)".into()))
    }
}
