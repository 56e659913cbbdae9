//! How one project of one slot ended for one epoch, as the books, the
//! journal and `/status` see it: what the compute gave, and then what the
//! node's later stages did with it (the snapshots stored, each submission).

use lite_node_compute::{executor::ComputeResult, snapshots::Stored};

pub use lite_node_compute::executor::OutcomeKind;

use crate::submission::{Status, Submission};

/// One project's result for one epoch, after every stage.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub project_type: String,
    pub kind: OutcomeKind,
    /// What this compute reported to the SlotSelectionTracker for this epoch.
    pub selected: Option<bool>,
    /// How many snapshots the compute returned (their bytes are in the
    /// store, not kept here: a thousand slots' epoch would hold them all).
    pub snapshot_count: usize,
    /// The snapshots' canonical bytes as stored, with their project ids and CIDs.
    pub stored: Vec<Stored>,
    /// Each snapshot's submission, in order.
    pub submissions: Vec<Submission>,
    /// When the compute was called and when it returned (Unix ms).
    pub started_at_ms: u64,
    pub finished_at_ms: u64,
    /// A full node's data sources no worker computed in time (their
    /// snapshots were not submitted): the epoch is a failure.
    pub left_out: Vec<String>,
}

impl Outcome {
    /// A compute's result, before it is stored or submitted.
    pub fn computed(result: ComputeResult) -> Self {
        Self {
            project_type: result.project_type,
            kind: result.kind,
            selected: result.selected,
            snapshot_count: result.snapshots.len(),
            stored: vec![],
            submissions: vec![],
            started_at_ms: result.started_at_ms,
            finished_at_ms: result.finished_at_ms,
            left_out: result.left_out,
        }
    }

    /// Why the data sources left out make this a failure, if any were.
    pub fn left_out_failure(&self) -> Option<String> {
        let n = self.left_out.len();
        (n > 0).then(|| {
            let named: Vec<&str> = self.left_out.iter().take(5).map(String::as_str).collect();
            format!(
                "{n} data source(s) not computed by the cluster's workers in time, so not submitted: {}{}",
                named.join(", "),
                if n > 5 { ", …" } else { "" }
            )
        })
    }

    /// The submitting stage's answers: a submission that was not accepted
    /// (nor acknowledged before a restart) makes the outcome a failure.
    pub fn submitted(mut self, submissions: Vec<Submission>) -> Self {
        let failures: Vec<String> = submissions
            .iter()
            .filter(|s| !matches!(s.status, Status::Accepted | Status::AlreadyAcknowledged))
            .map(|s| format!("submission of {}: {}", s.project_id, s.status))
            .chain(self.left_out_failure())
            .collect();
        if !failures.is_empty() {
            self.kind = OutcomeKind::Failed(failures.join("; "));
        }
        self.submissions = submissions;
        self
    }
}
