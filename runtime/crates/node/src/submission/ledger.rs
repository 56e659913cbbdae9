//! The submission ledger: every submission the collector answered, kept in
//! `<data dir>/state/submissions.jsonl` (written and synced before the epoch
//! is marked handled), so a restart never sends one twice. A node of many
//! slots makes its slots' lines durable together ([`GroupCommit`]): the
//! lines that arrive while one sync runs are written, then synced with one
//! call, not one sync per line.

use std::{
    collections::BTreeMap,
    fs::OpenOptions,
    io::{self, Write},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

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
        let entry = Entry::new(epoch_id, released_block, project_id, cid, verdict)?;
        let f = self.append(&entry.bytes)?;
        f.sync_data().map_err(|e| self.named(e))?;
        self.hold(&entry);
        Ok(())
    }

    fn named(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("writing {}: {e}", self.path.display()))
    }

    /// Appends a whole line, not synced (cut back if the write fails
    /// part-way); the open file, to sync.
    fn append(&self, bytes: &[u8]) -> io::Result<std::fs::File> {
        let append = || -> io::Result<std::fs::File> {
            std::fs::create_dir_all(self.path.parent().expect("ledger has a parent"))?;
            let mut f = OpenOptions::new().create(true).append(true).open(&self.path)?;
            let before = f.metadata()?.len();
            if let Err(e) = f.write_all(bytes) {
                let _ = f.set_len(before);
                return Err(e);
            }
            Ok(f)
        };
        append().map_err(|e| self.named(e))
    }

    /// What a durable line tells: it was sent.
    fn hold(&self, entry: &Entry) {
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((entry.epoch_id, entry.project_id.clone()), Some(entry.released_block));
    }
}

/// One ledger line, ready to append.
#[derive(Debug)]
struct Entry {
    epoch_id: u64,
    released_block: u64,
    project_id: String,
    bytes: Vec<u8>,
}

impl Entry {
    fn new(epoch_id: u64, released_block: u64, project_id: &str, cid: &str, verdict: &str) -> io::Result<Self> {
        let line = LedgerLine {
            epoch_id,
            project_id: project_id.into(),
            cid: cid.into(),
            verdict: verdict.into(),
            released_block: Some(released_block),
        };
        let mut bytes = serde_json::to_vec(&line).map_err(io::Error::other)?;
        bytes.push(b'\n');
        Ok(Self { epoch_id, released_block, project_id: project_id.into(), bytes })
    }
}

/// Ledger lines of many slots made durable together: a caller that finds
/// no sync running writes every line waiting (its own and those queued
/// behind it) and syncs them with one call — `syncfs` of their filesystem
/// when they are in several files, `fdatasync` when in one — then answers
/// each; callers that come meanwhile queue for the next round. A
/// thousand-slot node's answers cost a few syncs per epoch, not a thousand.
#[derive(Debug, Default)]
pub struct GroupCommit {
    state: Mutex<Group>,
    /// Syncs made, and lines they made durable (for the log and tests).
    pub syncs: std::sync::atomic::AtomicU64,
    pub lines: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct Group {
    waiting: Vec<(Arc<Ledger>, Entry, oneshot::Sender<io::Result<()>>)>,
    leading: bool,
}

impl GroupCommit {
    /// [`Ledger::record`], made durable with whatever else is waiting.
    pub async fn record(
        &self,
        ledger: &Arc<Ledger>,
        epoch_id: u64,
        released_block: u64,
        project_id: &str,
        cid: &str,
        verdict: &str,
    ) -> io::Result<()> {
        let entry = Entry::new(epoch_id, released_block, project_id, cid, verdict)?;
        let (tx, rx) = oneshot::channel();
        let lead = {
            let mut group = self.state.lock().unwrap_or_else(|p| p.into_inner());
            group.waiting.push((ledger.clone(), entry, tx));
            !std::mem::replace(&mut group.leading, true)
        };
        if lead {
            // Rounds until nobody waits; the leader's own line is in the
            // first. Dropped mid-round (a stop), the next caller leads.
            let guard = Leading(self);
            loop {
                let round = {
                    let mut group = self.state.lock().unwrap_or_else(|p| p.into_inner());
                    if group.waiting.is_empty() {
                        group.leading = false;
                        std::mem::forget(guard);
                        break;
                    }
                    std::mem::take(&mut group.waiting)
                };
                let n = round.len() as u64;
                let answered = tokio::task::spawn_blocking(move || commit(round)).await;
                if answered.is_err() {
                    // The round's senders went with the panicked thread:
                    // their callers see a closed channel below.
                    tracing::error!("a ledger sync panicked");
                }
                self.syncs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.lines.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
        rx.await.unwrap_or_else(|_| Err(io::Error::other("the ledger sync ended without an answer")))
    }
}

/// Gives up the lead if the leader is dropped mid-round.
struct Leading<'a>(&'a GroupCommit);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut group = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        group.leading = false;
        // Whoever waits has no leader now: fail them so their retry leads.
        for (_, _, tx) in group.waiting.drain(..) {
            let _ = tx.send(Err(io::Error::other("the ledger sync was interrupted; try again")));
        }
    }
}

/// One round: every line appended, then one sync, then every answer.
fn commit(round: Vec<(Arc<Ledger>, Entry, oneshot::Sender<io::Result<()>>)>) {
    let mut written = Vec::with_capacity(round.len());
    let mut files: BTreeMap<PathBuf, std::fs::File> = BTreeMap::new();
    for (ledger, entry, tx) in round {
        match ledger.append(&entry.bytes) {
            Ok(f) => {
                files.entry(ledger.path.clone()).or_insert(f);
                written.push((ledger, entry, tx));
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
    }
    let synced = sync(&files);
    for (ledger, entry, tx) in written {
        let answer = match &synced {
            Ok(()) => {
                ledger.hold(&entry);
                Ok(())
            }
            Err(e) => Err(ledger.named(io::Error::new(e.kind(), e.to_string()))),
        };
        let _ = tx.send(answer);
    }
}

/// Makes `files` durable: one `fdatasync` for one file; for several, one
/// `syncfs` per filesystem they are on (Linux), else each file's own sync.
fn sync(files: &BTreeMap<PathBuf, std::fs::File>) -> io::Result<()> {
    if files.len() <= 1 {
        return files.values().try_for_each(|f| f.sync_data());
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::{fd::AsRawFd, unix::fs::MetadataExt};
        let mut by_device: BTreeMap<u64, &std::fs::File> = BTreeMap::new();
        for f in files.values() {
            by_device.entry(f.metadata()?.dev()).or_insert(f);
        }
        for f in by_device.values() {
            // SAFETY: syncfs only reads the descriptor, which `f` keeps open.
            if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    files.values().try_for_each(|f| f.sync_data())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    /// Many slots' lines at once: each is durable when its call returns (a
    /// reopened ledger holds it), the sync count is below the line count
    /// (lines waiting while a sync ran went together), and a slot whose
    /// ledger cannot be written gets its own error, naming the file, while
    /// the others' lines are kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slots_lines_are_synced_together_and_one_bad_file_fails_alone() {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = (0..40).map(|i| root.path().join(format!("slots/{i}"))).collect();
        let ledgers: Vec<Arc<Ledger>> = dirs.iter().map(|d| Arc::new(Ledger::open(d).unwrap())).collect();
        // Slot 7's state directory is a file: its ledger cannot be written.
        std::fs::create_dir_all(&dirs[7]).unwrap();
        std::fs::write(dirs[7].join("state"), b"not a directory").unwrap();
        let group = Arc::new(GroupCommit::default());
        let mut calls = tokio::task::JoinSet::new();
        for (slot, ledger) in ledgers.iter().enumerate() {
            for project in ["a", "b", "c"] {
                let (group, ledger) = (group.clone(), ledger.clone());
                calls.spawn(async move {
                    let answer = group.record(&ledger, 9, 100, project, "bafy", "accepted").await;
                    (slot, project, answer)
                });
            }
        }
        let mut failed = 0;
        while let Some(done) = calls.join_next().await {
            let (slot, project, answer) = done.unwrap();
            if slot == 7 {
                let e = answer.unwrap_err().to_string();
                assert!(e.contains("slots/7/state/submissions.jsonl"), "{e}");
                failed += 1;
            } else {
                answer.unwrap();
                assert!(ledgers[slot].contains(9, project), "held once durable: slot {slot} {project}");
            }
        }
        assert_eq!(failed, 3);
        let (syncs, lines) = (group.syncs.load(Ordering::Relaxed), group.lines.load(Ordering::Relaxed));
        assert_eq!(lines, 120);
        assert!(syncs < lines, "{syncs} syncs for {lines} lines");
        for (slot, dir) in dirs.iter().enumerate().filter(|(s, _)| *s != 7) {
            let reopened = Ledger::open(dir).unwrap();
            for project in ["a", "b", "c"] {
                assert!(reopened.contains(9, project), "slot {slot} {project}");
            }
        }
    }
}
