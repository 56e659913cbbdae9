//! The submission ledger: every submission the collector answered, kept in
//! `<data dir>/state/submissions.jsonl` (written and synced before the epoch
//! is marked handled), so a restart never sends one twice.

use std::{
    collections::BTreeSet,
    fs::OpenOptions,
    io::{self, Write},
    path::{Path, PathBuf},
    sync::Mutex,
};

use serde::{Deserialize, Serialize};

/// Submissions the collector acknowledged, `(epoch, project id)` → CID, kept
/// in `<data dir>/state/submissions.jsonl` so a restart never sends one twice.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    done: Mutex<BTreeSet<(u64, String)>>,
}

#[derive(Serialize, Deserialize)]
struct LedgerLine {
    epoch_id: u64,
    project_id: String,
    cid: String,
    verdict: String,
}

impl Ledger {
    pub fn open(data_dir: &Path) -> io::Result<Self> {
        let path = data_dir.join("state").join("submissions.jsonl");
        crate::jsonl::repair(&path)?;
        let mut done = BTreeSet::new();
        if let Ok(text) = std::fs::read_to_string(&path) {
            for (n, line) in text.lines().enumerate() {
                // A torn last line (crash mid-write) is ignored; any other bad line is an error.
                match serde_json::from_str::<LedgerLine>(line) {
                    Ok(l) => {
                        done.insert((l.epoch_id, l.project_id));
                    }
                    Err(_) if n + 1 == text.lines().count() => {}
                    Err(e) => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("{} line {}: {e}", path.display(), n + 1),
                        ));
                    }
                }
            }
        }
        Ok(Self { path, done: Mutex::new(done) })
    }

    pub fn contains(&self, epoch_id: u64, project_id: &str) -> bool {
        self.done.lock().unwrap_or_else(|p| p.into_inner()).contains(&(epoch_id, project_id.to_owned()))
    }

    /// Records an acknowledged submission (written and synced before returning).
    /// A write that fails part-way is cut back, so a retry appends a whole
    /// line; the error names the file.
    pub fn record(&self, epoch_id: u64, project_id: &str, cid: &str, verdict: &str) -> io::Result<()> {
        let line = LedgerLine { epoch_id, project_id: project_id.into(), cid: cid.into(), verdict: verdict.into() };
        let mut bytes = serde_json::to_vec(&line).map_err(io::Error::other)?;
        bytes.push(b'\n');
        let append = || -> io::Result<()> {
            std::fs::create_dir_all(self.path.parent().expect("ledger has a parent"))?;
            let mut f = OpenOptions::new().create(true).append(true).open(&self.path)?;
            let before = f.metadata()?.len();
            let written = f.write_all(&bytes).and_then(|()| f.sync_data());
            if written.is_err() {
                let _ = f.set_len(before);
            }
            written
        };
        append().map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", self.path.display())))?;
        self.done.lock().unwrap_or_else(|p| p.into_inner()).insert((epoch_id, project_id.to_owned()));
        Ok(())
    }
}
