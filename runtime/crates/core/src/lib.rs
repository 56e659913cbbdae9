//! Plumbing every room of the lite node shares, and nothing that knows the
//! protocol: how a retry waits, how a long task is supervised, how a state
//! file is written, how a command ends.
//!
//! This crate sits at the bottom of the runtime's crates (ARCHITECTURE.md):
//! it depends on none of them, so none of them can reach around it.

pub mod atomic_file;
pub mod data_dir;
pub mod exit;
pub mod jsonl;
pub mod retry;
pub mod signals;
pub mod supervisor;
pub mod time;
pub mod tls;
pub mod url;

pub use exit::{BadInput, ExitStatus};
