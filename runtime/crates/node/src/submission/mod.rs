//! Submissions: a computed snapshot signed (EIP-712) and sent to the
//! collector, exactly once per (epoch, project id).
//!
//! - `client` — one submission over gRPC, retried while its deadline holds;
//! - `ledger` — each message, on disk before it is sent, and the collector's
//!   answer: after a restart the same bytes or nothing, never a second message;
//! - `submitter` — the node's side: IPFS (optional), deadline, signature,
//!   send, record.

pub mod client;
pub mod ledger;
pub mod submitter;

pub use client::{Collector, InTime, Verdict, submit};
pub use ledger::Ledger;
pub use submitter::{Durable, Shared, Submitter};

/// How one snapshot's submission ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// The collector answered `Success`.
    Accepted,
    /// The collector answered anything else.
    Rejected(String),
    /// The collector gave no answer before the deadline.
    Missed(String),
    /// The ledger holds its answer from before (a restart recomputed the epoch).
    AlreadyAcknowledged,
    /// Not sent (IPFS stored different bytes under the CID).
    NotSubmitted(String),
}

impl Status {
    pub fn is_accepted(&self) -> bool {
        matches!(self, Self::Accepted)
    }
}

/// As the journal, the books and `/status` show it.
impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Accepted => f.write_str("accepted"),
            Self::Rejected(r) => write!(f, "rejected: {r}"),
            Self::Missed(r) => write!(f, "missed: {r}"),
            Self::AlreadyAcknowledged => f.write_str("already acknowledged"),
            Self::NotSubmitted(r) => write!(f, "not submitted: {r}"),
        }
    }
}

/// One snapshot's submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    pub project_id: String,
    pub status: Status,
    /// When it ended (Unix ms).
    pub answered_at_ms: u64,
}
