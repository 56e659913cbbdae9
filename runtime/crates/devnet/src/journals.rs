//! What a devnet node's journal says of one slot's epoch: how each of its
//! projects ended (`<data dir>/[slots/<id>/]state/epochs.jsonl`, one line per
//! project, written once the node's epoch has ended). The devnet reads it
//! for selected slots whose submission has not arrived, to show why in the
//! table and to stop waiting for an answer that will not come.

use std::{
    io::{Read, Seek, SeekFrom},
    path::{Path, PathBuf},
};

/// How one project of a slot ended for an epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    pub project_type: String,
    /// `computed`, `not_selected`, `failed` or `missed`.
    pub outcome: String,
    pub error: Option<String>,
    /// How many of its snapshots were sent to the collector.
    pub submitted: usize,
}

/// The journal of `slot_id` in a node's data dir (its only slot keeps its
/// state at the top; several keep theirs under `slots/<id>/`).
pub fn path(data_dir: &Path, slot_id: u64, several: bool) -> PathBuf {
    let dir = if several { data_dir.join("slots").join(slot_id.to_string()) } else { data_dir.to_path_buf() };
    dir.join("state").join("epochs.jsonl")
}

/// How much of a journal's end is read: an epoch's lines are among the last.
const TAIL: u64 = 256 * 1024;

/// The lines of `epoch_id` in the journal at `path` (none while it has not
/// ended there, or when the journal cannot be read).
pub fn read(path: &Path, epoch_id: u64) -> Vec<Ended> {
    let Ok(mut file) = std::fs::File::open(path) else { return Vec::new() };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).is_err() {
        return Vec::new();
    }
    let mut text = String::new();
    if file.read_to_string(&mut text).is_err() {
        return Vec::new();
    }
    // Cut into a line: that line is not whole.
    let whole = if len > TAIL { text.split_once('\n').map_or("", |(_, rest)| rest) } else { &text };
    whole
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["epoch_id"].as_u64() == Some(epoch_id))
        .map(|v| Ended {
            project_type: v["project_type"].as_str().unwrap_or_default().to_owned(),
            outcome: v["outcome"].as_str().unwrap_or_default().to_owned(),
            error: v["error"].as_str().map(str::to_owned),
            submitted: v["submissions"].as_array().map_or(0, Vec::len),
        })
        .collect()
}

/// Why a slot's epoch ended with nothing sent, in a line: each project that
/// did not compute, with the first line of its reason.
pub fn describe(ended: &[Ended]) -> String {
    let parts: Vec<String> = ended
        .iter()
        .filter(|e| e.submitted == 0)
        .map(|e| match (e.outcome.as_str(), &e.error) {
            ("not_selected", _) => {
                format!("{} reported not selected (the selection selected the slot)", e.project_type)
            }
            (outcome, Some(error)) => format!("{} {outcome}: {}", e.project_type, first_line(error)),
            (outcome, None) => format!("{} {outcome}", e.project_type),
        })
        .collect();
    parts.join("; ")
}

/// The first line of a reason, at most 200 characters.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epochs_lines_are_read_from_the_journals_end_and_described() {
        let dir = tempfile::tempdir().unwrap();
        let journal = path(dir.path(), 3, true);
        assert_eq!(journal, dir.path().join("slots/3/state/epochs.jsonl"));
        std::fs::create_dir_all(journal.parent().unwrap()).unwrap();
        let mut text = String::new();
        for epoch in 1..=3000u64 {
            let line = serde_json::json!({"epoch_id": epoch, "project_type": "p", "outcome": "computed",
                                          "submissions": [{"verdict": "accepted"}]});
            text.push_str(&format!("{line}\n"));
        }
        let failed = serde_json::json!({"epoch_id": 3001, "project_type": "p", "outcome": "failed",
                                        "error": "P panicked: boom\nat line 3", "submissions": []});
        text.push_str(&format!("{failed}\n"));
        std::fs::write(&journal, text).unwrap();
        assert!(std::fs::metadata(&journal).unwrap().len() > TAIL, "the journal is longer than what is read");
        assert_eq!(read(&journal, 2999)[0].submitted, 1);
        let ended = read(&journal, 3001);
        assert_eq!(ended.len(), 1);
        assert_eq!(describe(&ended), "p failed: P panicked: boom");
        assert!(read(&journal, 1).is_empty(), "not in the tail");
        assert!(read(&dir.path().join("none"), 1).is_empty());
    }
}
