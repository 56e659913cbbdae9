//! Talking to the chains: JSON-RPC endpoints (HTTP, or the anchor's
//! WebSockets with new-head notifications) with failover on the node's
//! dedicated I/O runtime, and ProtocolState on the anchor chain (alloy types
//! and ABI).

pub mod anchor;
pub mod rpc;
pub mod ws;

pub use anchor::{Anchor, AnchorEvent, EventKind, Identity, Release};
pub use rpc::{HttpRpc, IoRuntime};
pub use ws::HeadSignal;
