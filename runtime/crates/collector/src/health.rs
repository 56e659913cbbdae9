//! The collector's `/health`: 200 while the anchor chain it judges by
//! answers and (publishing on gossip) a validator is connected to take what
//! it accepts — read every [`PROBE_EVERY`], whether or not submissions
//! come — 503 with the reason when not: a collector that can only answer
//! "retry" is not healthy.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use lite_node_chain::Anchor;
use lite_node_gossip::Gossip;

/// How often the anchor chain's head is read for `/health`.
pub const PROBE_EVERY: Duration = Duration::from_secs(10);

/// How often it is read while the collector is not healthy.
const RECHECK_UNWELL: Duration = Duration::from_secs(1);

/// What `/health` answers: the anchor chain as last read.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct Reading {
    chain_id: u64,
    anchor_head: Option<u64>,
    /// Validators its gossip peer reaches (`None`: it does not publish).
    validators_reached: Option<usize>,
    /// Why the last read of the anchor chain failed (the collector cannot
    /// judge submissions meanwhile); `None` when it answered.
    error: Option<String>,
    /// Each anchor RPC endpoint's head and lag (several configured: one
    /// behind the others is used only after them).
    anchor_rpcs: Vec<lite_node_chain::EndpointState>,
}

/// The collector's health, kept up to date by [`Health::probe`].
#[derive(Debug)]
pub struct Health(Mutex<Reading>);

impl Health {
    pub fn new(chain_id: u64) -> Arc<Self> {
        Arc::new(Self(Mutex::new(Reading { chain_id, ..Reading::default() })))
    }

    /// Reads the anchor head, and the validators `gossip` reaches, every
    /// [`PROBE_EVERY`], for good.
    pub async fn probe(self: Arc<Self>, anchor: Arc<Anchor>, gossip: Option<Gossip>) -> anyhow::Result<()> {
        loop {
            let read = tokio::time::timeout(PROBE_EVERY, anchor.head()).await;
            let reached = match &gossip {
                Some(g) => Some(g.peers().await.subscribed),
                None => None,
            };
            {
                let mut h = self.0.lock().expect("not poisoned");
                h.validators_reached = reached;
                h.anchor_rpcs = anchor.rpc().endpoints();
                match read {
                    Ok(Ok(head)) => (h.anchor_head, h.error) = (Some(head), None),
                    Ok(Err(e)) => h.error = Some(format!("the anchor chain: {e}")),
                    Err(_) => h.error = Some(format!("the anchor chain: no answer in {}s", PROBE_EVERY.as_secs())),
                }
                if h.error.is_none() && reached == Some(0) {
                    h.error = Some(
                        "no validator reachable over gossip: every accepted submission is answered \"retry\" \
                         (check --p2p-bootstrap, VALIDATOR_PEERS)"
                            .into(),
                    );
                }
            }
            // Trouble is looked at again soon: it clears as soon as it ends.
            let unwell = self.0.lock().expect("not poisoned").error.is_some();
            tokio::time::sleep(if unwell { RECHECK_UNWELL } else { PROBE_EVERY }).await;
        }
    }
}

impl lite_node_core::status::Status for Health {
    fn health(&self) -> (bool, serde_json::Value) {
        let h = self.0.lock().expect("not poisoned").clone();
        (h.error.is_none() && h.anchor_head.is_some(), serde_json::to_value(h).unwrap_or_default())
    }
}
