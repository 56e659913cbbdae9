//! Where the watcher is, saved in the data dir so a restart neither
//! re-processes nor skips an epoch.
//!
//! One file per ProtocolState and data market
//! (`state/cursor-<protocol state>-<data market>.json`), written atomically
//! after every handled epoch. It keeps the newest 64 handled
//! releases for the reorg re-check, and the block the watcher started at
//! (`floor`), below which that re-check never reaches.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

/// How many handled epochs are remembered for the reorg re-check.
const RECENT: usize = 64;

/// An epoch release the node has handled, as it saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenRelease {
    pub epoch_id: u64,
    pub block_number: u64,
    pub block_hash: String,
}

/// The watcher's persisted position.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Every event up to this anchor block is handled.
    pub scanned_to: u64,
    /// The last epoch handled (computed, or counted as missed).
    pub last_epoch: Option<u64>,
    /// The data market's current day (0 before the first DayStartedEvent seen).
    pub day_id: u64,
    /// Recently handled releases, oldest first.
    pub recent: Vec<SeenRelease>,
    /// The first anchor block this node watches: the reorg re-check never
    /// reaches below it, so releases from before the node started stay ignored.
    #[serde(default)]
    pub floor: u64,
    /// The newest `DayStartedEvent`s seen, `(anchor block, day)` oldest
    /// first: the day in force at a block, for epochs scanned again (the
    /// reorg re-check, a rewind) — not the day the scan last reached.
    #[serde(default)]
    pub day_starts: Vec<(u64, u64)>,
}

/// `DayStartedEvent`s a cursor keeps.
const DAY_STARTS_KEPT: usize = 16;

impl Cursor {
    /// The day in force at the end of anchor block `block`, from the day
    /// starts kept (a day's ids follow each other), else the saved day.
    pub fn day_at(&self, block: u64) -> u64 {
        match self.day_starts.iter().rev().find(|(at, _)| *at <= block) {
            Some((_, day)) => *day,
            None => match self.day_starts.first() {
                Some((_, first)) => first.saturating_sub(1),
                None => self.day_id,
            },
        }
    }

    /// A `DayStartedEvent` of day `day` in anchor block `block`.
    pub fn day_started(&mut self, block: u64, day: u64) {
        if !self.day_starts.contains(&(block, day)) {
            self.day_starts.push((block, day));
            self.day_starts.sort_unstable();
            if self.day_starts.len() > DAY_STARTS_KEPT {
                self.day_starts.remove(0);
            }
        }
        self.day_id = self.day_id.max(day);
    }

    /// The cursor file for one ProtocolState and data market: a node pointed
    /// at another market starts afresh instead of misreading this one.
    pub fn path(data_dir: &Path, protocol_state: &str, data_market: &str) -> PathBuf {
        data_dir.join("state").join(format!(
            "cursor-{}-{}.json",
            protocol_state.to_lowercase(),
            data_market.to_lowercase()
        ))
    }

    /// Reads the cursor; `Ok(None)` when there is none yet.
    pub fn load(path: &Path) -> io::Result<Option<Self>> {
        match fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is not a valid cursor ({e}); move it away to start from the chain head",
                        path.display()
                    ),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io::Error::new(e.kind(), format!("reading {}: {e}", path.display()))),
        }
    }

    /// Writes atomically: a crash leaves the old cursor or the new one.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        lite_node_core::atomic_file::write(path, &serde_json::to_vec_pretty(self).map_err(io::Error::other)?)
    }

    /// Records a handled release.
    pub fn handled(&mut self, release: SeenRelease) {
        self.last_epoch = Some(release.epoch_id);
        self.recent.push(release);
        if self.recent.len() > RECENT {
            self.recent.remove(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_and_loads_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = Cursor::path(dir.path(), "0xAB", "0xCD");
        assert_eq!(Cursor::load(&path).unwrap(), None);
        let mut c = Cursor { scanned_to: 10, ..Cursor::default() };
        for id in 1..=70 {
            c.handled(SeenRelease { epoch_id: id, block_number: id, block_hash: format!("0x{id:x}") });
        }
        c.save(&path).unwrap();
        let loaded = Cursor::load(&path).unwrap().unwrap();
        assert_eq!(loaded, c);
        assert_eq!(loaded.recent.len(), RECENT);
        assert_eq!(loaded.last_epoch, Some(70));
        assert!(path.ends_with("state/cursor-0xab-0xcd.json"));
    }

    #[test]
    fn a_corrupt_cursor_is_an_error_that_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        fs::write(&path, "{not json").unwrap();
        let err = Cursor::load(&path).unwrap_err().to_string();
        assert!(err.contains("move it away"), "{err}");
    }
}
