//! The snapshots this node produced: their exact canonical bytes on disk and
//! the recent CIDs per project id it stored (its own record: computes read
//! `previousSnapshots` from the chain, never from here).

use lite_node_protocol::{canonical_json, cid, project_id, repeated_data_source, repeated_data_source_error};

use crate::executor::{ComputeResult, OutcomeKind};

/// How many recent (epoch, CID) pairs are kept per project id.
pub const RECENT_PER_PROJECT: usize = 5;

/// How many are kept on disk: more than are shown, so an epoch computed
/// again (after a crash before its cursor moved) sees exactly the history it
/// saw the first time, its own earlier entry left out.
const KEPT_PER_PROJECT: usize = 2 * RECENT_PER_PROJECT;

/// The snapshots this node produced: their exact bytes under
/// `<data dir>/snapshots/<epoch>/<cid>.json` (named by what they hash to,
/// so a file a submitted CID names is never rewritten with other bytes),
/// and the recent
/// `(epoch, cid)` per project id in `<data dir>/state/recent-snapshots.json`
/// (what it stored; several slots drawing one pool store its bytes once).
#[derive(Debug)]
pub struct SnapshotStore {
    root: std::path::PathBuf,
    recent_path: std::path::PathBuf,
    recent: std::sync::Mutex<std::collections::BTreeMap<String, Vec<(u64, String)>>>,
    /// The snapshots stored in the last [`STORED_EPOCHS`] epochs, by epoch
    /// and project id, with the JSON text they were stored from: the slots
    /// that drew one pool hand in the same text, and the second one on need
    /// not be canonicalized, hashed and looked for on disk again.
    stored: std::sync::Mutex<std::collections::BTreeMap<u64, StoredTexts>>,
}

/// An epoch's stored snapshots by project id, with the text each came from.
type StoredTexts = std::collections::HashMap<String, (String, Stored)>;

/// Epochs whose stored snapshots are remembered (see `SnapshotStore::stored`).
const STORED_EPOCHS: usize = 2;

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
        Ok(Self {
            root: data_dir.join("snapshots"),
            recent_path,
            recent: std::sync::Mutex::new(recent),
            stored: Default::default(),
        })
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
            let path = snapshot_path(&self.root, epoch_id, &cid);
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
        // The executor refuses such a result; nothing else may store one.
        if let Some((first, second)) = repeated_data_source(result.snapshots.iter().map(|(s, _)| s.as_str())) {
            return Err(repeated_data_source_error(&result.project_type, first, second));
        }
        let ids: Vec<String> =
            result.snapshots.iter().map(|(source, _)| project_id(&result.project_type, source, namespace)).collect();
        if let Some(known) = self.already_stored(epoch_id, &ids, &result.snapshots) {
            return Ok(known);
        }
        // Each snapshot's JSON is checked first, so an error names its data source.
        let mut snapshots = Vec::with_capacity(result.snapshots.len());
        for ((data_source, json), id) in result.snapshots.iter().zip(&ids) {
            let bytes = canonical_json(json).map_err(|e| format!("snapshot for `{data_source}`: {e}"))?;
            snapshots.push((id.clone(), bytes));
        }
        let stored = self.write_many(epoch_id, snapshots)?;
        let mut remembered = self.stored.lock().unwrap_or_else(|p| p.into_inner());
        let epoch = remembered.entry(epoch_id).or_default();
        for (s, (_, json)) in stored.iter().zip(&result.snapshots) {
            epoch.insert(s.project_id.clone(), (json.clone(), s.clone()));
        }
        while remembered.len() > STORED_EPOCHS {
            remembered.pop_first();
        }
        Ok(stored)
    }

    /// What an earlier result of this epoch stored from the very same JSON
    /// texts under the same project ids, if every one of them was.
    fn already_stored(&self, epoch_id: u64, ids: &[String], snapshots: &[(String, String)]) -> Option<Vec<Stored>> {
        let remembered = self.stored.lock().unwrap_or_else(|p| p.into_inner());
        let epoch = remembered.get(&epoch_id)?;
        ids.iter()
            .zip(snapshots)
            .map(|(id, (_, json))| epoch.get(id).filter(|(text, _)| text == json).map(|(_, stored)| stored.clone()))
            .collect()
    }

    /// Removes the stored bytes of epochs before `first_kept`; returns how
    /// many epochs' directories went.
    pub fn prune(&self, first_kept: u64) -> std::io::Result<usize> {
        self.stored.lock().unwrap_or_else(|p| p.into_inner()).retain(|epoch, _| *epoch >= first_kept);
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

/// Where the bytes whose CID is `cid` are kept for `epoch_id` below `root`
/// (`<data dir>/snapshots`).
pub fn snapshot_path(root: &std::path::Path, epoch_id: u64, cid: &str) -> std::path::PathBuf {
    root.join(epoch_id.to_string()).join(format!("{}.json", cid.replace(['/', '\\', '.'], "_")))
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

    fn computed(slot_id: u64, json: &str) -> ComputeResult {
        ComputeResult {
            slot_id,
            project_type: "baseSnapshot".into(),
            kind: OutcomeKind::Computed,
            selected: Some(true),
            snapshots: vec![("0xAA".into(), json.into())],
            started_at_ms: 0,
            finished_at_ms: 0,
            left_out: Vec::new(),
        }
    }

    #[test]
    fn slots_handing_in_the_same_text_share_one_stored_file_and_other_text_is_stored_anew() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::open(dir.path()).unwrap();
        let first = store.store(4, "ns", &computed(1, "{\"b\": 2, \"a\": 1}")).unwrap();
        assert_eq!(first[0].project_id, "baseSnapshot:0xaa:ns");
        assert_eq!(std::fs::read(&first[0].path).unwrap(), b"{\"a\":1,\"b\":2}");
        assert_eq!(store.store(4, "ns", &computed(2, "{\"b\": 2, \"a\": 1}")).unwrap(), first);
        let other = store.store(4, "ns", &computed(3, "{\"a\": 9}")).unwrap();
        assert_ne!(other[0].cid, first[0].cid, "another text is canonicalized and hashed, not taken for the first");
        assert_eq!(other[0].cid, cid(b"{\"a\":9}"));
        for s in first.iter().chain(&other) {
            assert_eq!(cid(&std::fs::read(&s.path).unwrap()), s.cid, "no stored file hashes to other than its CID");
        }
        let next = store.store(5, "ns", &computed(1, "{\"b\": 2, \"a\": 1}")).unwrap();
        assert!(next[0].path.is_file() && next[0].path != first[0].path, "another epoch is stored in its own place");
    }

    #[test]
    fn a_result_with_two_snapshots_for_one_data_source_is_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::open(dir.path()).unwrap();
        let mut twice = computed(1, "{\"n\": 1}");
        twice.snapshots.push(("0xaa".into(), "{\"n\": 2}".into()));
        let e = store.store(4, "ns", &twice).unwrap_err();
        assert!(e.contains("`0xAA` and `0xaa`, one project id"), "{e}");
        assert!(!dir.path().join("snapshots").exists(), "nothing of it was written");
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
