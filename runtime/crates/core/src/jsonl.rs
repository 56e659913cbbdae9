//! Append-only JSON-lines files (the epoch journal, the submission ledger):
//! one record per line, each written whole with its newline. A crash or a
//! full disk in the middle of a write leaves a torn last line; [`repair`]
//! mends it at start-up so the next append does not glue a record onto it.

use std::{
    fs::OpenOptions,
    io::{self, Read, Seek, SeekFrom, Write},
    path::Path,
};

/// What [`repair`] did to a file's last line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repair {
    /// The file ends with a complete line (or is empty, or absent).
    Intact,
    /// A whole record had lost only its newline: the newline was added.
    NewlineAdded,
    /// A fragment of this many bytes was dropped.
    FragmentDropped(u64),
}

/// Makes `path` end with a complete line: a last line without its newline
/// is kept (newline added) when it is a whole JSON record, and dropped
/// otherwise. Every complete record is kept; what was done is logged.
pub fn repair(path: &Path) -> io::Result<Repair> {
    mend(path).map_err(|e| io::Error::new(e.kind(), format!("repairing {}: {e}", path.display())))
}

fn mend(path: &Path) -> io::Result<Repair> {
    let mut file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Repair::Intact),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    // The last line starts after the last newline: read backwards in chunks.
    let mut start = len;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let from = start.saturating_sub(chunk.len() as u64);
        let n = (start - from) as usize;
        if n == 0 {
            break;
        }
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut chunk[..n])?;
        if start == len && chunk[n - 1] == b'\n' {
            return Ok(Repair::Intact);
        }
        if let Some(i) = chunk[..n].iter().rposition(|&b| b == b'\n') {
            start = from + i as u64 + 1;
            break;
        }
        start = from;
    }
    if start == len {
        return Ok(Repair::Intact);
    }
    let mut tail = Vec::with_capacity((len - start) as usize);
    file.seek(SeekFrom::Start(start))?;
    file.read_to_end(&mut tail)?;
    let repair = if serde_json::from_slice::<serde_json::Value>(&tail).is_ok_and(|v| v.is_object()) {
        file.seek(SeekFrom::End(0))?;
        file.write_all(b"\n")?;
        tracing::warn!("{}: the last record had lost its newline (an interrupted write); kept", path.display());
        Repair::NewlineAdded
    } else {
        file.set_len(start)?;
        tracing::warn!(
            "{}: dropped a torn last line of {} bytes (an interrupted write); every complete record is kept",
            path.display(),
            len - start
        );
        Repair::FragmentDropped(len - start)
    };
    file.sync_data()?;
    Ok(repair)
}

/// Keeps only the records of epochs from `first_kept` on (records carry an
/// `epoch_id`); the file is rewritten atomically, so a crash leaves either
/// the old or the new one. Returns how many records were dropped.
pub fn keep_epochs_from(path: &Path, first_kept: u64) -> io::Result<usize> {
    retain_lines(path, |v| v["epoch_id"].as_u64().is_none_or(|e| e >= first_kept))
}

/// Keeps only the records `keep` says yes to (a line that is not JSON is
/// kept), rewriting the file atomically when any goes. Returns how many
/// records were dropped.
pub fn retain_lines(path: &Path, keep: impl Fn(&serde_json::Value) -> bool) -> io::Result<usize> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("pruning {}: {e}", path.display()));
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(named(e)),
    };
    let (mut kept, mut dropped) = (Vec::new(), 0);
    for line in io::BufRead::lines(io::BufReader::new(file)) {
        let line = line.map_err(named)?;
        if serde_json::from_str::<serde_json::Value>(&line).is_ok_and(|v| !keep(&v)) {
            dropped += 1;
        } else {
            kept.extend_from_slice(line.as_bytes());
            kept.push(b'\n');
        }
    }
    if dropped > 0 {
        crate::atomic_file::write(path, &kept)?;
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        std::fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    #[test]
    fn a_torn_fragment_is_dropped_and_complete_lines_stay() {
        let (_dir, path) = file_with(b"{\"a\":1}\n{\"b\":2}\n{\"c\":");
        assert_eq!(repair(&path).unwrap(), Repair::FragmentDropped(5));
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(repair(&path).unwrap(), Repair::Intact, "a second start finds nothing to mend");
    }

    #[test]
    fn a_whole_record_that_lost_its_newline_is_kept() {
        let (_dir, path) = file_with(b"{\"a\":1}\n{\"b\":2}");
        assert_eq!(repair(&path).unwrap(), Repair::NewlineAdded);
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}\n{\"b\":2}\n");
    }

    #[test]
    fn intact_empty_absent_and_single_fragment_files() {
        let (_dir, path) = file_with(b"{\"a\":1}\n");
        assert_eq!(repair(&path).unwrap(), Repair::Intact);
        let (_dir, empty) = file_with(b"");
        assert_eq!(repair(&empty).unwrap(), Repair::Intact);
        assert_eq!(repair(&empty.with_extension("absent")).unwrap(), Repair::Intact);
        let (_dir, only) = file_with(b"{\"torn");
        assert_eq!(repair(&only).unwrap(), Repair::FragmentDropped(6));
        assert_eq!(std::fs::read(&only).unwrap(), b"");
    }

    #[test]
    fn old_epochs_are_dropped_and_the_rest_kept_in_order() {
        let (_dir, path) =
            file_with(b"{\"epoch_id\":1}\n{\"epoch_id\":2,\"x\":1}\n{\"epoch_id\":3}\n{\"epoch_id\":2,\"x\":2}\n");
        assert_eq!(keep_epochs_from(&path, 2).unwrap(), 1);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"{\"epoch_id\":2,\"x\":1}\n{\"epoch_id\":3}\n{\"epoch_id\":2,\"x\":2}\n"
        );
        assert_eq!(keep_epochs_from(&path, 0).unwrap(), 0, "nothing older: untouched");
        assert_eq!(keep_epochs_from(&path.with_extension("absent"), 5).unwrap(), 0);
    }

    #[test]
    fn a_long_last_line_is_found_across_chunks() {
        let long = format!("{{\"k\":\"{}\"", "x".repeat(200_000));
        let (_dir, path) = file_with(format!("{{\"a\":1}}\n{long}").as_bytes());
        assert_eq!(repair(&path).unwrap(), Repair::FragmentDropped(long.len() as u64));
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}\n");
    }
}
