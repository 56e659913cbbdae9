//! Whole-file writes that a crash cannot tear: the bytes go to a temporary
//! file in the same directory, are synced, then renamed over the target.
//!
//! The node's whole-file state (cursor, books, trackers, pending alerts) is
//! written this way (its append-only files are `jsonl`'s), and every error
//! names the file. [`write_durable`] also syncs the directory (what must
//! survive a power loss before something leaves the machine). [`Batch`]
//! makes many small files (each slot's books and selection tracker) durable
//! with one sync: a write-ahead file, then each file rewritten in place;
//! [`Batch::replay`] at start-up completes a batch a crash interrupted.

use std::{io, path::Path};

/// Writes `bytes` to `path` atomically, creating its directory. The error
/// names the path (a full disk or a read-only data dir must say where).
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_whole(path, bytes).map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))
}

/// [`write`], and then the directory synced too, so that the rename itself
/// survives a power loss (what must be on disk before something leaves the
/// machine; one more sync).
pub fn write_durable(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("writing {}: {e}", path.display()));
    write_whole(path, bytes).map_err(named)?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(named)
}

/// Makes everything written on the filesystem that holds `file` durable:
/// one `syncfs` (Linux) for many files' writes, where each file's own sync
/// would cost one flush apiece. Elsewhere, an error: the caller syncs each
/// file then.
pub fn sync_filesystem(file: &std::fs::File) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: syncfs only reads the descriptor, which `file` keeps open.
        if unsafe { libc::syncfs(file.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        Err(io::Error::new(io::ErrorKind::Unsupported, "no syncfs on this system"))
    }
}

fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_with(path, |f| io::Write::write_all(f, bytes))
}

/// [`write`] of what `fill` writes into the (temporary) file: a large file
/// (a batch's write-ahead record) need not be held whole in memory first.
fn write_with(path: &Path, fill: impl FnOnce(&mut std::fs::File) -> io::Result<()>) -> io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    fill(tmp.as_file_mut())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Several small files made durable with one sync: a write-ahead file
/// (`<root>/state/pending-writes.json`) holds every file's new text and is
/// written atomically (one sync), then each file is replaced without a sync
/// of its own. After a crash, [`Batch::replay`] at start-up writes the files
/// again from it, so every file is either as it was before the commit or as
/// the commit left it — a node of a thousand slots saves each slot's books
/// and selection tracker every epoch at the cost of one sync, not two
/// thousand. Only files written through batches may be staged (the
/// write-ahead file is their newest state).
#[derive(Debug)]
pub struct Batch {
    root: std::path::PathBuf,
    files: std::collections::BTreeMap<String, String>,
}

/// The write-ahead file below a root.
fn pending_path(root: &Path) -> std::path::PathBuf {
    root.join("state").join("pending-writes.json")
}

impl Batch {
    /// A batch of files below `root` (the data dir).
    pub fn new(root: &Path) -> Self {
        Self { root: root.to_path_buf(), files: Default::default() }
    }

    /// `path` (below the root) is to hold `text`.
    pub fn stage(&mut self, path: &Path, text: String) -> io::Result<()> {
        let relative = path.strip_prefix(&self.root).ok().and_then(Path::to_str).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not below {}", path.display(), self.root.display()),
            )
        })?;
        self.files.insert(relative.to_owned(), text);
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Writes the write-ahead file (synced), then every file.
    pub fn commit(self) -> io::Result<()> {
        if self.files.is_empty() {
            return Ok(());
        }
        let pending = pending_path(&self.root);
        let stream = |f: &mut std::fs::File| {
            let mut buffered = io::BufWriter::with_capacity(64 * 1024, f);
            serde_json::to_writer(&mut buffered, &self.files).map_err(io::Error::from)?;
            io::Write::flush(&mut buffered)
        };
        write_with(&pending, stream)
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", pending.display())))?;
        write_all_unsynced(&self.root, &self.files)
    }

    /// Writes every file the write-ahead file below `root` holds, if any;
    /// how many. Run before anything reads those files.
    pub fn replay(root: &Path) -> io::Result<usize> {
        let path = pending_path(root);
        let files: std::collections::BTreeMap<String, String> = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e} (written atomically: corrupted?)", path.display()),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io::Error::new(e.kind(), format!("reading {}: {e}", path.display()))),
        };
        write_all_unsynced(root, &files)?;
        Ok(files.len())
    }
}

/// Rewrites each file in place, without a sync: the write-ahead file covers
/// a write a crash tears, and rewriting in place spares the file system an
/// inode created and one freed per file (a temporary file renamed over it).
fn write_all_unsynced(root: &Path, files: &std::collections::BTreeMap<String, String>) -> io::Result<()> {
    for (relative, text) in files {
        let path = root.join(relative);
        let unsynced = || -> io::Result<()> {
            // Owner-only, as the temporary files of `write` are.
            let open = || {
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create(true).truncate(false);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                options.open(&path)
            };
            let mut file = match open() {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
                    std::fs::create_dir_all(dir)?;
                    open()?
                }
                opened => opened?,
            };
            io::Write::write_all(&mut file, text.as_bytes())?;
            file.set_len(text.len() as u64)?;
            Ok(())
        };
        unsynced().map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_replayed_after_a_crash_between_its_record_and_its_files() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("slots/1/books.json"), root.path().join("state/tracker.json"));
        let mut batch = Batch::new(root.path());
        batch.stage(&a, "one".into()).unwrap();
        batch.stage(&b, "two".into()).unwrap();
        assert!(batch.stage(Path::new("/elsewhere/x"), String::new()).is_err(), "only files below the root");
        batch.commit().unwrap();
        assert_eq!((fs_text(&a), fs_text(&b)), ("one".into(), "two".into()));
        // A crash after the record, before (some of) the files: as if torn.
        std::fs::write(&a, "to").unwrap();
        std::fs::remove_file(&b).unwrap();
        assert_eq!(Batch::replay(root.path()).unwrap(), 2);
        assert_eq!((fs_text(&a), fs_text(&b)), ("one".into(), "two".into()));
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(Batch::replay(empty.path()).unwrap(), 0, "nothing to replay");
    }

    fn fs_text(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap()
    }
}
