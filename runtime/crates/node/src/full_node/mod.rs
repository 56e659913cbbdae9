//! A full node over machines: the coordinator's side, which hands a
//! project's data sources for an epoch to the workers through the cluster's
//! [`Board`] and gathers their snapshots into one result, and the worker's
//! side, which computes the items it is given (or, by peer index, takes) and
//! offers each result under its fencing token.
//!
//! Each project has its own board (`{name}:{project}`); an epoch's work is
//! the [`Work`] the coordinator opened it with. Item `i` is data source `i`
//! of that work, in the processor's own order.

use std::time::Duration;

pub use lite_node_board::{Board, Boards, Completion, Joined, Member, assign};
use lite_node_compute::executor::Task;
use lite_node_config::ClusterAssign;
use serde::{Deserialize, Serialize};

mod coordinator;
pub mod worker;

pub use coordinator::Coordinator;
pub use worker::{Round, Worker};

/// Epochs the board keeps after they are gathered: a coordinator restarted
/// within them resumes from what the workers computed.
const KEEP_EPOCHS: u64 = 4;

/// How often the coordinator reads who holds what (and, by least backlog,
/// gives out what nobody live holds) while an epoch's items are out.
const ASSIGN_EVERY: Duration = Duration::from_millis(100);

/// How items find their worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Peer index: member k of n (members sorted by id) takes the items whose
    /// index ≡ k (mod n).
    PeerIndex,
    /// Least backlog: the coordinator gives each item to the worker with the
    /// fewest items outstanding.
    LeastBacklog,
}

/// A lease as the board records it.
pub fn lease_ms(lease: Duration) -> u64 {
    u64::try_from(lease.as_millis()).unwrap_or(u64::MAX)
}

impl Mode {
    /// As `LITE_NODE_CLUSTER_ASSIGN` spells it (and the board records it).
    pub fn name(self) -> &'static str {
        match self {
            Mode::PeerIndex => ClusterAssign::PeerIndex,
            Mode::LeastBacklog => ClusterAssign::LeastBacklog,
        }
        .name()
    }
}

impl From<ClusterAssign> for Mode {
    fn from(assign: ClusterAssign) -> Self {
        match assign {
            ClusterAssign::PeerIndex => Mode::PeerIndex,
            ClusterAssign::LeastBacklog => Mode::LeastBacklog,
        }
    }
}

/// An epoch's work on one project, as the coordinator opens it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    /// The project's task for the epoch (every share is made from it).
    pub task: Task,
    /// Its data sources, in the processor's order: item `i` is source `i`.
    pub sources: Vec<String>,
}
