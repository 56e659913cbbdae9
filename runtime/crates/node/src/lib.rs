//! The node, `lite-node run`: the epoch loop over the anchor's releases, the
//! epoch's computes through the executor, each result stored and submitted
//! by its slot's lane, and the books, journal, status API and alerts that
//! say how it went. The verbs and the binary are `lite-node`'s; the
//! devnet is not a dependency of this crate.

pub mod alerts;
pub mod books;
pub mod full_node;
pub(crate) mod ipfs;
pub(crate) mod journal;
pub mod node;
pub mod outcome;
pub mod safety;
pub(crate) mod status;
pub mod submission;

pub use node::{check_identity, check_slots, run, slot_dir};

// The shared crates under the names the node's modules use.
use lite_node_chain::{self as chain, epochs};
use lite_node_compute::{self as compute, executor, snapshots};
use lite_node_config as config;
use lite_node_core::{atomic_file, data_dir, exit, jsonl, retry, supervisor};
