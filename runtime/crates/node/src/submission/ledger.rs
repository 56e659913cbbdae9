//! The submission ledger: every submission the collector answered, kept in
//! `<data dir>/state/submissions.jsonl` (written and synced before the epoch
//! is marked handled), so a restart never sends one twice.

use std::{
    collections::BTreeMap,
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
    /// `(epoch, project id)` → the anchor block the epoch was released in
    /// (`None` for entries written before it was recorded).
    done: Mutex<BTreeMap<(u64, String), Option<u64>>>,
}

#[derive(Serialize, Deserialize)]
struct LedgerLine {
    epoch_id: u64,
    project_id: String,
    cid: String,
    verdict: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    released_block: Option<u64>,
}

impl Ledger {
    pub fn open(data_dir: &Path) -> io::Result<Self> {
        let path = data_dir.join("state").join("submissions.jsonl");
        crate::jsonl::repair(&path)?;
        let mut done = BTreeMap::new();
        if let Ok(text) = std::fs::read_to_string(&path) {
            for (n, line) in text.lines().enumerate() {
                // A torn last line (crash mid-write) is ignored; any other bad line is an error.
                match serde_json::from_str::<LedgerLine>(line) {
                    Ok(l) => {
                        done.insert((l.epoch_id, l.project_id), l.released_block);
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

    /// Forgets submissions of epochs before `first_kept` that were released
    /// before anchor block `window_floor` — on disk and in memory. An epoch
    /// still inside the submission window is kept whatever its age in epochs:
    /// were it computed again (a lost cursor, an old start block), the ledger
    /// must still refuse to send it twice.
    pub fn prune(&self, first_kept: u64, window_floor: u64) -> io::Result<usize> {
        let keep =
            |epoch: u64, released: Option<u64>| epoch >= first_kept || released.is_some_and(|b| b >= window_floor);
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        let dropped = crate::jsonl::retain_lines(&self.path, |v| {
            let epoch = v["epoch_id"].as_u64().unwrap_or(u64::MAX);
            keep(epoch, v["released_block"].as_u64())
        })?;
        done.retain(|(epoch, _), released| keep(*epoch, *released));
        Ok(dropped)
    }

    pub fn contains(&self, epoch_id: u64, project_id: &str) -> bool {
        self.done.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&(epoch_id, project_id.to_owned()))
    }

    /// Records an acknowledged submission (written and synced before returning).
    /// A write that fails part-way is cut back, so a retry appends a whole
    /// line; the error names the file.
    pub fn record(
        &self,
        epoch_id: u64,
        released_block: u64,
        project_id: &str,
        cid: &str,
        verdict: &str,
    ) -> io::Result<()> {
        let line = LedgerLine {
            epoch_id,
            project_id: project_id.into(),
            cid: cid.into(),
            verdict: verdict.into(),
            released_block: Some(released_block),
        };
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
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((epoch_id, project_id.to_owned()), Some(released_block));
        Ok(())
    }
}
