//! The snapshots this node produced: their exact canonical bytes on disk and
//! the recent CIDs per project id it stored (its own record: computes read
//! `previousSnapshots` from the chain, never from here).

use lite_node_protocol::{canonical_json, cid, project_id};

use crate::executor::{ComputeResult, OutcomeKind};

/// How many recent (epoch, CID) pairs are kept per project id.
pub const RECENT_PER_PROJECT: usize = 5;

/// How many are kept on disk: more than are shown, so an epoch computed
/// again (after a crash before its cursor moved) sees exactly the history it
/// saw the first time, its own earlier entry left out.
const KEPT_PER_PROJECT: usize = 2 * RECENT_PER_PROJECT;

/// The snapshots this node produced: their exact bytes under
/// `<data dir>/snapshots/<epoch>/<project id>.json`, and the recent
/// `(epoch, cid)` per project id in `<data dir>/state/recent-snapshots.json`
/// (what it stored; several slots drawing one pool store its bytes once).
#[derive(Debug)]
pub struct SnapshotStore {
    root: std::path::PathBuf,
    recent_path: std::path::PathBuf,
    recent: std::sync::Mutex<std::collections::BTreeMap<String, Vec<(u64, String)>>>,
}

/// A stored snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub project_id: String,
    pub cid: String,
    pub path: std::path::PathBuf,
}

impl SnapshotStore {
    pub fn open(data_dir: &std::path::Path) -> std::io::Result<Self> {
        let recent_path = data_dir.join("state").join("recent-snapshots.json");
        let recent = match std::fs::read(&recent_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} is not valid ({e}); move it away to start a new history", recent_path.display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Default::default(),
            Err(e) => return Err(e),
        };
        Ok(Self { root: data_dir.join("snapshots"), recent_path, recent: std::sync::Mutex::new(recent) })
    }

    /// The last [`RECENT_PER_PROJECT`] `(epoch, cid)` of a project id from
    /// epochs before `epoch_id`, oldest first.
    pub fn previous(&self, project_id: &str, epoch_id: u64) -> Vec<(u64, String)> {
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let earlier: Vec<(u64, String)> =
            recent.get(project_id).into_iter().flatten().filter(|(e, _)| *e < epoch_id).cloned().collect();
        earlier[earlier.len().saturating_sub(RECENT_PER_PROJECT)..].to_vec()
    }

    /// Canonicalizes `json`, writes its bytes, records its CID.
    pub fn record(&self, epoch_id: u64, project_id: &str, json: &str) -> Result<Stored, String> {
        let mut stored = self.record_many(epoch_id, &[(project_id.to_owned(), json)])?;
        Ok(stored.pop().expect("one in, one out"))
    }

    /// [`SnapshotStore::record`] for many snapshots of one epoch: each one's
    /// bytes written, then the index of recent CIDs saved once (a full
    /// node's thousand pools would otherwise rewrite it a thousand times).
    pub fn record_many(&self, epoch_id: u64, snapshots: &[(String, &str)]) -> Result<Vec<Stored>, String> {
        let canonical = snapshots
            .iter()
            .map(|(id, json)| Ok((id.clone(), canonical_json(json)?)))
            .collect::<Result<Vec<_>, String>>()?;
        self.write_many(epoch_id, canonical)
    }

    /// Writes canonical snapshots' bytes, then saves the index once.
    fn write_many(&self, epoch_id: u64, snapshots: Vec<(String, Vec<u8>)>) -> Result<Vec<Stored>, String> {
        let mut stored = Vec::with_capacity(snapshots.len());
        let mut new = Vec::new();
        for (project_id, bytes) in snapshots {
            let cid = cid(&bytes);
            let path = snapshot_path(&self.root, epoch_id, &project_id);
            // Several slots of one node that drew the same pool store the
            // same bytes: the first writes them, the others find them.
            let known = self
                .recent
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&project_id)
                .is_some_and(|list| list.iter().any(|(e, c)| *e == epoch_id && *c == cid));
            if !(known && path.is_file()) {
                lite_node_core::atomic_file::write(&path, &bytes).map_err(|e| e.to_string())?;
                new.push((project_id.clone(), cid.clone()));
            }
            stored.push(Stored { project_id, cid, path });
        }
        if new.is_empty() {
            return Ok(stored);
        }
        // Written under the lock, so the file never goes back in time.
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        for (project_id, cid) in new {
            let list = recent.entry(project_id).or_default();
            list.retain(|(e, _)| *e != epoch_id);
            list.push((epoch_id, cid));
            list.sort_by_key(|(e, _)| *e);
            if list.len() > KEPT_PER_PROJECT {
                list.drain(..list.len() - KEPT_PER_PROJECT);
            }
        }
        let snapshot = serde_json::to_vec_pretty(&*recent).expect("a map of strings serializes");
        lite_node_core::atomic_file::write(&self.recent_path, &snapshot).map_err(|e| e.to_string())?;
        Ok(stored)
    }
}

impl SnapshotStore {
    /// The storing stage: every snapshot of a computed result, its project id
    /// completed with `namespace`; the first that cannot be stored names its
    /// data source, and nothing of the result counts as stored.
    pub fn store(&self, epoch_id: u64, namespace: &str, result: &ComputeResult) -> Result<Vec<Stored>, String> {
        if result.kind != OutcomeKind::Computed {
            return Ok(Vec::new());
        }
        // Each snapshot's JSON is checked first, so an error names its data source.
        let mut snapshots = Vec::with_capacity(result.snapshots.len());
        for (data_source, json) in &result.snapshots {
            let bytes = canonical_json(json).map_err(|e| format!("snapshot for `{data_source}`: {e}"))?;
            snapshots.push((project_id(&result.project_type, data_source, namespace), bytes));
        }
        self.write_many(epoch_id, snapshots)
    }

    /// Removes the stored bytes of epochs before `first_kept`; returns how
    /// many epochs' directories went.
    pub fn prune(&self, first_kept: u64) -> std::io::Result<usize> {
        let Ok(entries) = std::fs::read_dir(&self.root) else { return Ok(0) };
        let mut removed = 0;
        for entry in entries.flatten() {
            let old = entry.file_name().to_str().and_then(|n| n.parse::<u64>().ok()).is_some_and(|e| e < first_kept);
            if old {
                let path = entry.path();
                std::fs::remove_dir_all(&path)
                    .map_err(|e| std::io::Error::new(e.kind(), format!("removing {}: {e}", path.display())))?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Where the bytes of `project_id`'s snapshot of `epoch_id` are kept below
/// `root` (`<data dir>/snapshots`).
pub fn snapshot_path(root: &std::path::Path, epoch_id: u64, project_id: &str) -> std::path::PathBuf {
    root.join(epoch_id.to_string()).join(format!("{}.json", project_id.replace(['/', '\\'], "_")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_keeps_bytes_and_the_recent_cids() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::open(dir.path()).unwrap();
        for epoch in 1..=7 {
            let s = store.record(epoch, "baseSnapshot:0xaa:ns", &format!("{{\"e\": {epoch}}}")).unwrap();
            assert_eq!(std::fs::read(&s.path).unwrap(), format!("{{\"e\":{epoch}}}").into_bytes());
            assert_eq!(s.cid, cid(&std::fs::read(&s.path).unwrap()));
        }
        let reopened = SnapshotStore::open(dir.path()).unwrap();
        let recent = reopened.previous("baseSnapshot:0xaa:ns", 8);
        assert_eq!(recent.iter().map(|(e, _)| *e).collect::<Vec<_>>(), [3, 4, 5, 6, 7]);
        assert!(reopened.previous("other", 8).is_empty());
        assert!(store.record(8, "p", "{not json").unwrap_err().contains("line 1 column 2"));
    }

    #[test]
    fn an_epoch_computed_again_sees_the_history_it_saw_the_first_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::open(dir.path()).unwrap();
        let id = "baseSnapshot:0xaa:ns";
        for epoch in 1..=6 {
            store.record(epoch, id, &format!("{{\"e\": {epoch}}}")).unwrap();
        }
        let first = store.previous(id, 7);
        assert_eq!(first.iter().map(|(e, _)| *e).collect::<Vec<_>>(), [2, 3, 4, 5, 6]);
        // Epoch 7 is computed and stored, then (after a crash before its
        // cursor moved) computed again: its own entry is not its history.
        store.record(7, id, "{\"e\": 7}").unwrap();
        assert_eq!(store.previous(id, 7), first);
        let reopened = SnapshotStore::open(dir.path()).unwrap();
        assert_eq!(reopened.previous(id, 7), first, "also after a restart");
    }
}
