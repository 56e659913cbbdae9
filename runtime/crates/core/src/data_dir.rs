//! The data dir belongs to one node at a time: `lite-node run` holds an
//! exclusive lock on `<data dir>/lite-node.lock` (with its process id in it)
//! for as long as it runs. Two nodes on one data dir would each submit every
//! epoch; the second refuses to start instead, naming the first. The lock
//! goes with the process, however it ends (SIGKILL included).

use std::{
    fs::{File, OpenOptions, TryLockError},
    io::{Read, Seek, Write},
    path::{Path, PathBuf},
};

use crate::exit::BadInput;

/// The held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Takes the data dir, creating it if needed. Another live node holding
    /// it is bad input (exit 2), naming its process id.
    pub fn acquire(data_dir: &Path) -> anyhow::Result<Self> {
        Self::acquire_for(data_dir, "LITE_NODE_DATA_DIR")
    }

    /// [`DataDirLock::acquire`], naming `setting` (the variable or flag that
    /// chose the directory) in the error.
    pub fn acquire_for(data_dir: &Path, setting: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| anyhow::anyhow!("creating the data dir {}: {e}", data_dir.display()))?;
        let path = data_dir.join("lite-node.lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| anyhow::anyhow!("opening {}: {e}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = match holder.trim() {
                    "" => "another process".to_owned(),
                    pid => format!("process {pid}"),
                };
                return Err(BadInput(format!(
                    "the data dir {} is in use by another lite-node ({holder} holds {}); \
                     stop that one, or give this one its own {setting}",
                    data_dir.display(),
                    path.display()
                ))
                .into());
            }
            Err(TryLockError::Error(e)) => anyhow::bail!("locking {}: {e}", path.display()),
        }
        let write_pid = |file: &mut File| -> std::io::Result<()> {
            file.set_len(0)?;
            file.rewind()?;
            writeln!(file, "{}", std::process::id())?;
            file.sync_data()
        };
        write_pid(&mut file).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        Ok(Self { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_and_the_lock_is_free_again_after_a_drop() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let first = DataDirLock::acquire(&data).unwrap();
        assert_eq!(std::fs::read_to_string(first.path()).unwrap().trim(), std::process::id().to_string());
        let err = DataDirLock::acquire(&data).unwrap_err();
        assert!(err.is::<BadInput>(), "exit code 2");
        let text = err.to_string();
        assert!(text.contains(&format!("process {}", std::process::id())), "{text}");
        assert!(text.contains("LITE_NODE_DATA_DIR"), "says how to fix it: {text}");
        drop(first);
        DataDirLock::acquire(&data).expect("free once the first is gone");
    }
}
