//! The submission ledger, `<data dir>/state/submissions.jsonl`: every
//! submission's signed message, written **before** it is sent (a `sending`
//! line: it outlives a killed process), and the collector's answer once it
//! comes, synced (which makes both durable). After a restart, an answered
//! submission is not sent again, and one sent without a recorded answer is
//! sent again byte for byte (never signed anew) while its deadline holds —
//! so the collector never holds two different submissions of one slot,
//! epoch and project. A node of many slots makes
//! its slots' lines durable together ([`GroupCommit`]): the lines that
//! arrive while one sync runs are written, then synced with one call, not
//! one sync per line.

use std::{
    collections::BTreeMap,
    fs::OpenOptions,
    io::{self, Write},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

/// Submissions sent and answered, by `(epoch, project id)`, kept in
/// `<data dir>/state/submissions.jsonl` so a restart never sends two
/// different ones.
/// Memory holds the newest epochs' entries only ([`EPOCHS_IN_MEMORY`]); an
/// older epoch is looked up in the file. A node of a thousand slots would
/// otherwise hold every retained epoch of every slot (a thousand epochs at
/// about 150 bytes an entry: 150 MB), although only epochs inside the
/// submission window can be sent at all.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    done: Mutex<Held>,
    /// Held through an append and its cut-back: the slot's stages append
    /// from several threads, and a cut-back must not take another's line.
    appending: Mutex<()>,
}

/// How many of the newest epochs' entries a ledger keeps in memory.
pub const EPOCHS_IN_MEMORY: u64 = 4;

/// What the ledger holds of one `(epoch, project id)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Nothing: never signed, never sent.
    Nothing,
    /// Signed and sent (or about to be) with no answer recorded: the exact
    /// message (its protobuf bytes), to be sent again as it is.
    Sent(Arc<[u8]>),
    /// Closed: the collector answered, or the deadline passed unanswered.
    /// `None` if the collector accepted it, else the verdict as the books
    /// show it (`rejected: …`, `missed: …`): a failure stays one after a
    /// restart.
    Answered(Option<String>),
}

impl Recorded {
    fn is_answered(&self) -> bool {
        matches!(self, Self::Answered(_))
    }
}

/// The ledger's entries of epochs `floor` and later — every one of them.
#[derive(Debug, Default)]
struct Held {
    /// `(epoch, project id)` → the anchor block the epoch was released in
    /// (`None` for entries written before it was recorded), and what is
    /// recorded (never [`Recorded::Nothing`]).
    entries: BTreeMap<(u64, String), (Option<u64>, Recorded)>,
    floor: u64,
}

impl Held {
    /// Keeps an entry of an epoch at or above the floor (an answer is never
    /// replaced by a message sent), then moves the floor up to the newest
    /// [`EPOCHS_IN_MEMORY`] epochs.
    fn insert(&mut self, epoch_id: u64, project_id: String, released: Option<u64>, recorded: Recorded) {
        if epoch_id < self.floor {
            return;
        }
        let entry = self.entries.entry((epoch_id, project_id)).or_insert((released, Recorded::Nothing));
        if !entry.1.is_answered() {
            *entry = (released.or(entry.0), recorded);
        }
        let floor = (epoch_id + 1).saturating_sub(EPOCHS_IN_MEMORY);
        if floor > self.floor {
            self.floor = floor;
            self.entries = self.entries.split_off(&(floor, String::new()));
        }
    }
}

#[derive(Serialize, Deserialize)]
struct LedgerLine {
    epoch_id: u64,
    project_id: String,
    cid: String,
    /// The collector's answer, or [`SENDING`].
    verdict: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    released_block: Option<u64>,
    /// A `sending` line's message: the protobuf bytes, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sent: Option<String>,
}

/// The verdict of a line written before its message is sent.
const SENDING: &str = "sending";

/// The verdict of an accepted submission's answer line (as
/// [`super::Status::Accepted`] shows).
const ACCEPTED: &str = "accepted";

impl LedgerLine {
    fn recorded(&self) -> Result<Recorded, String> {
        match &self.sent {
            None if self.verdict == ACCEPTED => Ok(Recorded::Answered(None)),
            None => Ok(Recorded::Answered(Some(self.verdict.clone()))),
            Some(hex) => Ok(Recorded::Sent(hex::decode(hex).map_err(|e| format!("its message: {e}"))?.into())),
        }
    }
}

impl Ledger {
    pub fn open(data_dir: &Path) -> io::Result<Self> {
        let path = data_dir.join("state").join("submissions.jsonl");
        crate::jsonl::repair(&path)?;
        let mut done = Held::default();
        for (line, recorded) in Self::lines(&path)? {
            done.insert(line.epoch_id, line.project_id, line.released_block, recorded);
        }
        Ok(Self { path, done: Mutex::new(done), appending: Mutex::new(()) })
    }

    /// Every line of the file (none if it does not exist), with what it
    /// records. A torn last line (a crash mid-write) is ignored; any other
    /// bad line is an error.
    fn lines(path: &Path) -> io::Result<Vec<(LedgerLine, Recorded)>> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io::Error::new(e.kind(), format!("reading {}: {e}", path.display()))),
        };
        let count = text.lines().count();
        let mut lines = Vec::with_capacity(count);
        for (n, line) in text.lines().enumerate() {
            let parsed = serde_json::from_str::<LedgerLine>(line).map_err(|e| e.to_string()).and_then(|l| {
                let recorded = l.recorded()?;
                Ok((l, recorded))
            });
            match parsed {
                Ok(l) => lines.push(l),
                Err(_) if n + 1 == count => {}
                Err(e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{} line {}: {e}", path.display(), n + 1),
                    ));
                }
            }
        }
        Ok(lines)
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
        // No append in between: the file is rewritten and renamed.
        let _no_append = self.appending.lock().unwrap_or_else(|p| p.into_inner());
        let dropped = crate::jsonl::retain_lines(&self.path, |v| {
            let epoch = v["epoch_id"].as_u64().unwrap_or(u64::MAX);
            keep(epoch, v["released_block"].as_u64())
        })?;
        done.entries.retain(|(epoch, _), (released, _)| keep(*epoch, *released));
        Ok(dropped)
    }

    /// What the ledger holds of `project_id` in `epoch_id`: from memory for
    /// the newest epochs, else from the file (an epoch computed again long
    /// after: rare, and it must still not be sent twice).
    pub fn lookup(&self, epoch_id: u64, project_id: &str) -> io::Result<Recorded> {
        match self.held(epoch_id, project_id) {
            Some(recorded) => Ok(recorded),
            None => self.on_disk(epoch_id, project_id),
        }
    }

    /// [`Ledger::lookup`] from memory; `None` for an epoch older than
    /// memory keeps ([`Ledger::on_disk`] answers for it).
    pub fn held(&self, epoch_id: u64, project_id: &str) -> Option<Recorded> {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        (epoch_id >= done.floor).then(|| {
            let entry = done.entries.get(&(epoch_id, project_id.to_owned()));
            entry.map_or(Recorded::Nothing, |(_, recorded)| recorded.clone())
        })
    }

    /// [`Ledger::lookup`] from the file (blocking: it reads the file).
    pub fn on_disk(&self, epoch_id: u64, project_id: &str) -> io::Result<Recorded> {
        let mut found = Recorded::Nothing;
        for (line, recorded) in Self::lines(&self.path)? {
            if line.epoch_id == epoch_id && line.project_id == project_id && !found.is_answered() {
                found = recorded;
            }
        }
        Ok(found)
    }

    /// Writes a line without waiting for the disk (blocking): it outlives
    /// the process, and is made durable by the next sync of the file (or of
    /// its filesystem: [`GroupCommit::record`] writes and syncs). A write
    /// that fails part-way is cut back, so a retry appends a whole line; the
    /// error names the file.
    pub fn write(&self, entry: &Entry) -> io::Result<()> {
        self.append(&entry.bytes)?;
        self.hold(entry);
        Ok(())
    }

    /// The ledger's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn named(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("writing {}: {e}", self.path.display()))
    }

    /// Appends a whole line, not synced (cut back if the write fails
    /// part-way); the open file, to sync.
    fn append(&self, bytes: &[u8]) -> io::Result<std::fs::File> {
        let append = || -> io::Result<std::fs::File> {
            let _one_at_a_time = self.appending.lock().unwrap_or_else(|p| p.into_inner());
            let open = || OpenOptions::new().create(true).append(true).open(&self.path);
            // The directory is made the first time only (a thousand slots
            // append twice an epoch each).
            let mut f = match open() {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    std::fs::create_dir_all(self.path.parent().expect("ledger has a parent"))?;
                    open()?
                }
                opened => opened?,
            };
            let before = f.metadata()?.len();
            if let Err(e) = f.write_all(bytes) {
                let _ = f.set_len(before);
                return Err(e);
            }
            Ok(f)
        };
        append().map_err(|e| self.named(e))
    }

    /// What a written line tells.
    fn hold(&self, entry: &Entry) {
        self.done.lock().unwrap_or_else(|p| p.into_inner()).insert(
            entry.epoch_id,
            entry.project_id.clone(),
            Some(entry.released_block),
            entry.recorded.clone(),
        );
    }
}

/// One ledger line, ready to append.
#[derive(Clone, Debug)]
pub struct Entry {
    epoch_id: u64,
    released_block: u64,
    project_id: String,
    recorded: Recorded,
    bytes: Vec<u8>,
}

impl Entry {
    /// A message about to be sent: `message` is its protobuf bytes, sent
    /// only once this line is written.
    pub fn sending(
        epoch_id: u64,
        released_block: u64,
        project_id: &str,
        cid: &str,
        message: Vec<u8>,
    ) -> io::Result<Self> {
        let sent = Some(hex::encode(&message));
        Self::new(epoch_id, released_block, project_id, cid, SENDING, sent, Recorded::Sent(message.into()))
    }

    /// The collector's answer (`verdict`, as the books show it).
    pub fn answered(
        epoch_id: u64,
        released_block: u64,
        project_id: &str,
        cid: &str,
        verdict: &str,
    ) -> io::Result<Self> {
        let answer = (verdict != ACCEPTED).then(|| verdict.to_owned());
        Self::new(epoch_id, released_block, project_id, cid, verdict, None, Recorded::Answered(answer))
    }

    fn new(
        epoch_id: u64,
        released_block: u64,
        project_id: &str,
        cid: &str,
        verdict: &str,
        sent: Option<String>,
        recorded: Recorded,
    ) -> io::Result<Self> {
        let line = LedgerLine {
            epoch_id,
            project_id: project_id.into(),
            cid: cid.into(),
            verdict: verdict.into(),
            released_block: Some(released_block),
            sent,
        };
        let mut bytes = serde_json::to_vec(&line).map_err(io::Error::other)?;
        bytes.push(b'\n');
        Ok(Self { epoch_id, released_block, project_id: project_id.into(), recorded, bytes })
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
    /// [`Ledger::write`], made durable with whatever else is waiting.
    pub async fn record(&self, ledger: &Arc<Ledger>, entry: Entry) -> io::Result<()> {
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
        use std::os::unix::fs::MetadataExt;
        let mut by_device: BTreeMap<u64, &std::fs::File> = BTreeMap::new();
        for f in files.values() {
            by_device.entry(f.metadata()?.dev()).or_insert(f);
        }
        by_device.values().try_for_each(|f| lite_node_core::atomic_file::sync_filesystem(f))
    }
    #[cfg(not(target_os = "linux"))]
    files.values().try_for_each(|f| f.sync_data())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    fn answered(epoch: u64, project: &str) -> Entry {
        Entry::answered(epoch, 100 + epoch, project, "bafy", "accepted").unwrap()
    }

    /// Memory holds the newest epochs only; an older epoch is answered
    /// from the file, alike before and after a restart, and an entry for an
    /// old epoch written late is found there too.
    #[test]
    fn old_epochs_are_looked_up_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path()).unwrap();
        for epoch in 1..=10 {
            ledger.write(&answered(epoch, "p")).unwrap();
        }
        ledger.write(&answered(2, "late")).unwrap();
        let sent = Entry::sending(1, 101, "sent", "bafy", b"message".to_vec()).unwrap();
        ledger.write(&sent).unwrap();
        for ledger in [ledger, Ledger::open(dir.path()).unwrap()] {
            let held = ledger.done.lock().unwrap();
            assert_eq!(held.floor, 11 - EPOCHS_IN_MEMORY);
            assert_eq!(held.entries.len() as u64, EPOCHS_IN_MEMORY, "{:?}", held.entries);
            drop(held);
            for epoch in 1..=10 {
                assert_eq!(ledger.lookup(epoch, "p").unwrap(), Recorded::Answered(None), "epoch {epoch}");
                assert_eq!(ledger.lookup(epoch, "q").unwrap(), Recorded::Nothing, "epoch {epoch}");
            }
            assert_eq!(ledger.lookup(2, "late").unwrap(), Recorded::Answered(None));
            assert_eq!(ledger.lookup(3, "late").unwrap(), Recorded::Nothing);
            assert_eq!(ledger.lookup(1, "sent").unwrap(), Recorded::Sent(b"message"[..].into()));
        }
    }

    /// A message is held as sent, with its bytes, until its answer comes —
    /// across a restart too — and an answer is never undone by a later
    /// `sending` line; a torn last line (a crash mid-write) is no line.
    #[test]
    fn a_message_sent_is_kept_until_its_answer() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path()).unwrap();
        let message = vec![0x0a, 0x02, 0xff, 0x00];
        ledger.write(&Entry::sending(7, 140, "p", "bafy", message.clone()).unwrap()).unwrap();
        assert_eq!(ledger.lookup(7, "p").unwrap(), Recorded::Sent(message.clone().into()));
        let reopened = Ledger::open(dir.path()).unwrap();
        assert_eq!(reopened.lookup(7, "p").unwrap(), Recorded::Sent(message.clone().into()));
        assert_eq!(reopened.on_disk(7, "p").unwrap(), Recorded::Sent(message.clone().into()));
        reopened.write(&answered(7, "p")).unwrap();
        reopened.write(&Entry::sending(7, 140, "p", "bafy", message.clone()).unwrap()).unwrap();
        assert_eq!(reopened.lookup(7, "p").unwrap(), Recorded::Answered(None));
        // A torn `sending` line for another project: as if never written.
        let path = dir.path().join("state/submissions.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"epoch_id":7,"project_id":"q","cid":"bafy","verdict":"sending","sent":"0a"#).unwrap();
        drop(f);
        let ledger = Ledger::open(dir.path()).unwrap();
        assert_eq!(ledger.lookup(7, "p").unwrap(), Recorded::Answered(None));
        assert_eq!(ledger.on_disk(7, "p").unwrap(), Recorded::Answered(None));
        assert_eq!(ledger.lookup(7, "q").unwrap(), Recorded::Nothing);
    }

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
                    let entry = Entry::answered(9, 100, project, "bafy", "accepted").unwrap();
                    let answer = group.record(&ledger, entry).await;
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
                let held = ledgers[slot].lookup(9, project).unwrap();
                assert_eq!(held, Recorded::Answered(None), "held once durable: slot {slot} {project}");
            }
        }
        assert_eq!(failed, 3);
        let (syncs, lines) = (group.syncs.load(Ordering::Relaxed), group.lines.load(Ordering::Relaxed));
        assert_eq!(lines, 120);
        assert!(syncs < lines, "{syncs} syncs for {lines} lines");
        for (slot, dir) in dirs.iter().enumerate().filter(|(s, _)| *s != 7) {
            let reopened = Ledger::open(dir).unwrap();
            for project in ["a", "b", "c"] {
                assert_eq!(reopened.lookup(9, project).unwrap(), Recorded::Answered(None), "slot {slot} {project}");
            }
        }
    }
}
