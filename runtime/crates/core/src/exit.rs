//! How a command ends, as the process exit code documents it (README): the
//! codes, and the error types any room can raise to choose one. The mapping
//! from an error chain to its code is the binary's (`lite_node::exit_status`).

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
    /// Computes hung past their timeout piled up to
    /// `LITE_NODE_MAX_HUNG_COMPUTES`: restart it to reclaim their threads.
    HungComputes = 4,
}

/// Computes hung past their timeout reached the bound: the node exits so its
/// container restarts it (their threads cannot be stopped otherwise).
#[derive(Debug, thiserror::Error)]
#[error("{hung} computes hung past their timeout (LITE_NODE_MAX_HUNG_COMPUTES is {bound}): exiting for a restart")]
pub struct ComputesHung {
    pub hung: usize,
    pub bound: usize,
}

/// Marks an error as the operator's to fix (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);
