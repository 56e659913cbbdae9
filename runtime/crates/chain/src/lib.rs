//! Talking to the chains: JSON-RPC endpoints (HTTP, or the anchor's
//! WebSockets with new-head notifications) with failover on the node's
//! dedicated I/O runtime, and ProtocolState on the anchor chain (alloy types
//! and ABI); and the epochs it releases, followed with a persisted cursor,
//! with the source chain's block details preloaded for them; and
//! transactions signed here and sent raw.
//!
//! Each type takes the settings it reads; `Chains::connect` builds them all
//! from the configuration's `ChainConfig`, the one way every verb does.

pub mod anchor;
mod connect;
pub mod consumer;
pub mod epochs;
pub mod market;
pub mod releaser;
pub mod rpc;
pub mod tx;
pub(crate) mod ws;

pub use anchor::{Anchor, AnchorEvent, EventKind, Identity, RegistryChange, Release};
pub use connect::Chains;
pub use rpc::{EndpointState, HttpRpc, IoRuntime, RpcEndpoint};
pub use tx::{Prepared, Receipt, TxError, TxSender};
pub use ws::HeadSignal;
