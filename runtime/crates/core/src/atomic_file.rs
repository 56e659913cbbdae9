//! Whole-file writes that a crash cannot tear: the bytes go to a temporary
//! file in the same directory, are synced, then renamed over the target.

use std::{io, path::Path};

/// Writes `bytes` to `path` atomically, creating its directory. The error
/// names the path (a full disk or a read-only data dir must say where).
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_whole(path, bytes).map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))
}

fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    io::Write::write_all(&mut tmp, bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
