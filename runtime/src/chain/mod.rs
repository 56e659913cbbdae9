//! Talking to the chains: JSON-RPC endpoints with failover, on the node's
//! dedicated I/O runtime.

pub mod rpc;

pub use rpc::{HttpRpc, IoRuntime};
