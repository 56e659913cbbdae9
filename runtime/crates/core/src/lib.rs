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
pub mod status;
pub mod supervisor;
pub mod time;
pub mod tls;
pub mod url;

pub use exit::{BadInput, ExitStatus};

/// A boxed future, as the crates' entry points return them (the node's
/// run, the devnet's, the validator's, the collector's serve).
///
/// In a release build, an `async fn` called from another crate is compiled
/// again in the caller's crate, with everything it awaits: every crate up
/// to the binary would compile the node's whole state machine once more.
/// An entry point that boxes its future in its own crate is compiled there
/// once; callers only poll it through the box.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// [`BoxFuture`] for what is only run where it is made (`block_on`), not
/// sent to other threads.
pub type LocalBoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>;
