//! How a command ends: an error chain mapped to the exit code the README
//! documents. The codes and the marker types live in `lite_node_core::exit`,
//! so every room can raise them; only this mapping knows every room.

pub use lite_node_core::exit::{BadInput, ComputesHung, ExitStatus};

use crate::{compute::ComputeError, config::ConfigErrors, safety::NodeStuck};

/// Maps an error to its exit status: configuration problems are 2, a stuck
/// node 3, anything else 1 (a git host that does not answer too: the same
/// settings may work later; `init.sh` backs off before a restart on any code
/// but 2).
pub fn exit_status(err: &anyhow::Error) -> ExitStatus {
    if err.chain().any(|c| c.is::<NodeStuck>()) {
        return ExitStatus::Stuck;
    }
    if err.chain().any(|c| c.is::<ComputesHung>()) {
        return ExitStatus::HungComputes;
    }
    let bad = err.chain().any(|c| {
        c.is::<ConfigErrors>()
            || c.is::<BadInput>()
            || matches!(
                c.downcast_ref::<ComputeError>(),
                Some(ComputeError::Build { .. } | ComputeError::Interface { .. })
            )
            || matches!(c.downcast_ref::<ComputeError>(), Some(ComputeError::Fetch(e)) if !e.is_transient())
    });
    if bad { ExitStatus::BadConfig } else { ExitStatus::Failure }
}
