//! The `lite-node` binary's library: the verbs (`commands`), each a function
//! over the crates that do the work (the node, the validator, the devnet,
//! computes and chains), and how an error becomes an exit code.
//!
//! `main.rs` only parses the command line and sets up logging; every command
//! lives in `commands` so tests can call it with their own environment. The
//! code map is ARCHITECTURE.md.

pub mod commands;
pub mod exit;

pub use exit::{ExitStatus, exit_status};
pub use lite_node_chain::{self as chain, epochs};
pub use lite_node_collector as collector;
pub use lite_node_compute::{self as compute, executor, snapshots};
pub use lite_node_config as config;
pub use lite_node_core::{self as core, retry, signals, supervisor};
pub use lite_node_devnet as devnet;
pub use lite_node_node::{alerts, books, full_node, node, outcome, safety, submission};
