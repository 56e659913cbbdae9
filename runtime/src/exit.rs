//! How a command ends, as the process exit code documents it (README): the
//! error types that decide the code, shared by every room.

use crate::{compute::ComputeError, config::ConfigErrors, safety::NodeStuck};

/// The process exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Ok = 0,
    /// The node or a command failed while running.
    Failure = 1,
    /// The configuration or the input is wrong; fix it and retry.
    BadConfig = 2,
    /// The safety net found the node stuck (no epoch processed for too long):
    /// restart it.
    Stuck = 3,
}

/// Marks an error as the operator's to fix (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Maps an error to its exit status: configuration problems are 2, a stuck
/// node 3, anything else 1.
pub fn exit_status(err: &anyhow::Error) -> ExitStatus {
    if err.chain().any(|c| c.is::<NodeStuck>()) {
        return ExitStatus::Stuck;
    }
    let bad = err.chain().any(|c| {
        c.is::<ConfigErrors>()
            || c.is::<BadInput>()
            || matches!(c.downcast_ref::<ComputeError>(), Some(ComputeError::Fetch(_) | ComputeError::Build { .. }))
    });
    if bad { ExitStatus::BadConfig } else { ExitStatus::Failure }
}
