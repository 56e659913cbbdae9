//! The lite-node runtime: loads a data market's compute package, feeds it
//! epochs, and submits what it computes.
//!
//! `main.rs` only parses the command line and sets up logging; every command
//! lives in `commands` so tests can call it with their own environment. The
//! code map is ARCHITECTURE.md.

pub mod alerts;
pub mod atomic_file;
pub mod books;
pub mod chain;
pub mod collector;
pub mod commands;
pub mod compute;
pub mod config;
pub mod data_dir;
pub mod devnet;
pub mod dispatch;
pub mod epochs;
pub mod exit;
pub mod ipfs;
pub mod journal;
pub mod jsonl;
pub mod node;
mod progress;
pub mod repo;
pub mod retry;
pub mod safety;
pub mod signals;
pub mod snapshots;
pub mod status;
pub mod submission;
pub mod supervisor;

pub use exit::{ExitStatus, exit_status};
