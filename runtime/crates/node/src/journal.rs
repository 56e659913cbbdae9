//! The epoch journal: one JSON line per (epoch, project) outcome in
//! `<data dir>/state/epochs.jsonl`, the node's own record of what it did.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Write},
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::{
    epochs::Epoch,
    outcome::{Outcome, OutcomeKind},
};

/// One line of the journal.
#[derive(Debug, Serialize)]
pub struct Entry<'a> {
    pub epoch_id: u64,
    pub begin: u64,
    pub end: u64,
    pub released_block: u64,
    pub project_type: &'a str,
    /// `computed`, `not_selected`, `failed` or `missed`.
    pub outcome: &'static str,
    pub error: Option<&'a str>,
    pub snapshots: usize,
    /// `{project_id, cid, path}` of each stored snapshot.
    pub stored: Vec<serde_json::Value>,
    /// `{project_id, verdict, answered_at_ms}` of each submission.
    pub submissions: Vec<serde_json::Value>,
    /// When the compute was called and returned (Unix ms).
    pub started_at_ms: u64,
    pub finished_at_ms: u64,
}

/// Appends outcomes to the journal file.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
}

impl Journal {
    pub fn open(data_dir: &Path) -> io::Result<Self> {
        let path = data_dir.join("state").join("epochs.jsonl");
        fs::create_dir_all(path.parent().expect("journal path has a parent"))?;
        crate::jsonl::repair(&path)?;
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Self { path, file })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Drops the lines of epochs before `first_kept` (and appends to the
    /// rewritten file from then on).
    pub fn prune(&mut self, first_kept: u64) -> io::Result<usize> {
        let dropped = crate::jsonl::keep_epochs_from(&self.path, first_kept)?;
        if dropped > 0 {
            self.file = OpenOptions::new()
                .append(true)
                .open(&self.path)
                .map_err(|e| io::Error::new(e.kind(), format!("reopening {}: {e}", self.path.display())))?;
        }
        Ok(dropped)
    }

    pub fn record(&mut self, epoch: &Epoch, outcome: &Outcome) -> io::Result<()> {
        let (name, error) = match &outcome.kind {
            OutcomeKind::Computed => ("computed", None),
            OutcomeKind::NotSelected => ("not_selected", None),
            OutcomeKind::Failed(e) => ("failed", Some(e.as_str())),
            OutcomeKind::Missed(e) => ("missed", Some(e.as_str())),
            OutcomeKind::Withheld(e) => ("withheld", Some(e.as_str())),
        };
        let entry = Entry {
            epoch_id: epoch.epoch_id,
            begin: epoch.begin,
            end: epoch.end,
            released_block: epoch.released_block,
            project_type: &outcome.project_type,
            outcome: name,
            error,
            snapshots: outcome.snapshot_count,
            stored: outcome
                .stored
                .iter()
                .map(|s| serde_json::json!({"project_id": s.project_id, "cid": s.cid, "path": s.path}))
                .collect(),
            submissions: outcome
                .submissions
                .iter()
                .map(|s| {
                    serde_json::json!({"project_id": s.project_id, "verdict": s.status.to_string(), "answered_at_ms": s.answered_at_ms})
                })
                .collect(),
            started_at_ms: outcome.started_at_ms,
            finished_at_ms: outcome.finished_at_ms,
        };
        let mut line = serde_json::to_vec(&entry).map_err(io::Error::other)?;
        line.push(b'\n');
        // One write per line, so a crash never leaves half a line behind
        // another process's reader; a write that fails part-way (a full
        // disk) is cut back, so the retry appends a whole line, not one
        // glued to a fragment.
        let before = self.file.metadata()?.len();
        if let Err(e) = self.file.write_all(&line) {
            let _ = self.file.set_len(before);
            return Err(e);
        }
        self.file.flush()
    }
}
