//! The validator: the receiving end of the protocol. Submissions arrive at a
//! gateway, are checked by dequeuer workers, finalized per epoch and
//! aggregated into the validator's batch, all through Redis keys (`keys`
//! lists each, its type, writers, readers and lifetime), so each component
//! can run in its own process. Depends on the protocol crate and the
//! runtime's shared crates (core, config, chain, compute, gossip), never on
//! the node or the devnet: what the dequeuer must know of the chains comes
//! through the [`chain::ChainReads`] trait, which [`service::AnchorChain`]
//! implements on the anchor and the data market's assignment rule.
//!
//! - `gateway`: the collector's gRPC service, queueing each submission;
//! - `dequeuer`: the checks, and one verdict per submission;
//! - `monitor`: each epoch's submission window, opened and closed in anchor
//!   blocks;
//! - `finalizer` and `aggregator`: the epoch's consensus (`consensus`) in
//!   parts, and the validator's level-1 batch;
//! - `onchain`: the batch submitted and attested on the anchor chain;
//! - `tracker`: the dashboards and gap detection; `api`: the read-only
//!   monitor API;
//! - `queue`: the reliable queue each component's intake rests on;
//! - `service`: which components run in a process, and [`service::run`].

pub use lite_node_gossip as gossip;
pub mod aggregator;
pub mod api;
pub mod archive;
pub mod bucket;
pub mod chain;
pub mod consensus;
pub mod dequeuer;
pub mod finalizer;
pub mod gateway;
pub mod keys;
pub mod monitor;
pub mod onchain;
pub mod queue;
pub mod service;
pub mod signers;
pub mod store;
pub mod tracker;

pub use keys::Keys;
pub use queue::ReliableQueue;

use lite_node_protocol::submission::Scope;

/// The data market a validator serves, and who it is.
#[derive(Clone, Debug)]
pub struct Market {
    pub keys: Keys,
    pub scope: Scope,
    /// The anchor chain's id (the EIP-712 domain).
    pub chain_id: u64,
    /// This validator's id: the `sequencerId` of its processed keys, and its
    /// batches' author.
    pub validator_id: String,
    /// Anchor blocks an epoch's submission window stays open after its
    /// release: `WINDOW_BLOCKS` (130), the furthest deadline a node signs, so
    /// no submission with a valid deadline is cut off; the devnet and tests
    /// use fewer.
    pub window_blocks: u64,
}

impl Market {
    pub fn new(scope: Scope, chain_id: u64, validator_id: impl Into<String>) -> Self {
        Self {
            keys: Keys::new(&scope.protocol_state.to_string(), &scope.data_market.to_string()),
            scope,
            chain_id,
            validator_id: validator_id.into(),
            window_blocks: lite_node_protocol::submission::WINDOW_BLOCKS,
        }
    }

    /// The first anchor block at which the window of an epoch released in
    /// `release_block` is closed: it stays open through `release_block +
    /// window_blocks`, since a deadline of that block is still valid while
    /// the head is on it.
    pub fn window_closes(&self, release_block: u64) -> u64 {
        window_closes(release_block, self.window_blocks)
    }
}

/// [`Market::window_closes`] for a window of `window_blocks`.
pub use lite_node_protocol::submission::window_closes;

pub(crate) use lite_node_core::time::{now_ms, now_secs};

/// A connection to Redis for one worker. Operations time out after 10 s
/// (longer than any blocking take waits); a broken connection is
/// re-established on the next command. A worker that blocks on a queue
/// needs a connection of its own: Redis answers a connection's commands in
/// order, so a blocked take would hold up everything else sent on it.
pub async fn connect(client: &redis::Client) -> redis::RedisResult<redis::aio::ConnectionManager> {
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(10)))
        .set_connection_timeout(Some(std::time::Duration::from_secs(2)));
    redis::aio::ConnectionManager::new_with_config(client.clone(), config).await
}

/// [`connect`], retried under `Policy::REDIS` until Redis answers (a worker
/// starting before Redis, or while it restarts); one warning per outage.
pub async fn connect_retrying(client: &redis::Client, who: &str) -> redis::aio::ConnectionManager {
    let what = format!("{who}: connecting to Redis");
    let result =
        lite_node_core::retry::retry(lite_node_core::retry::Policy::REDIS, what, || connect(client), |_| true).await;
    result.expect("Policy::REDIS retries for ever")
}
