//! Archives that outlive the market's servers (issue 54): a range of kept
//! epochs as one CARv1 file of raw blocks (`lite_node_protocol::car`) —
//! every snapshot once, each epoch's index (its root, batch CID, where the
//! chain finalized it, its pairs) and the archive's index as the root — so
//! any IPFS tool can read it and a new validator or a read-only server
//! restores from it, every block checked against its CID and every epoch's
//! pairs against its root.
//!
//! Layout, in order: the root block (`ArchiveIndex`: the market, and each
//! epoch's index CID); then for each epoch, the snapshots it holds that the
//! epoch before did not, and its `EpochIndex`. Restoring keeps two epochs'
//! bytes at a time.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    io::{BufReader, BufWriter, Write},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::store::{FinalizedEpoch, OnChain, Store};

/// What an archive's root block says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveIndex {
    /// [`FORMAT`].
    pub format: String,
    pub chain_id: u64,
    pub protocol_state: String,
    pub data_market: String,
    /// Each epoch and the CID of its [`EpochIndex`] block.
    pub epochs: Vec<(u64, String)>,
}

/// One epoch of an archive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EpochIndex {
    pub epoch_id: u64,
    pub root: String,
    pub batch_cid: String,
    pub finalized_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_chain: Option<OnChain>,
    /// (project id, CID) in project-id order.
    pub pairs: Vec<(String, String)>,
}

/// The root block's `format`.
pub const FORMAT: &str = "lite-node-archive/1";

/// The market an archive is of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarketOf {
    pub chain_id: u64,
    pub protocol_state: String,
    pub data_market: String,
}

/// What [`write`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    pub epochs: usize,
    pub blocks: usize,
    pub bytes: u64,
}

/// An archive's file name for epochs `first..=last`.
pub fn file_name(first: u64, last: u64) -> String {
    format!("epochs-{first}-{last}.car")
}

/// The epoch range an archive's file name covers.
pub fn range_of(name: &str) -> Option<(u64, u64)> {
    let (first, last) = name.strip_prefix("epochs-")?.strip_suffix(".car")?.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// Writes the kept epochs of `first..=last` to `dir` as one CAR
/// (`epochs-{first}-{last}.car`; atomically: a crash leaves no half file);
/// `None` when none of them is kept.
pub fn write(store: &Store, market: &MarketOf, first: u64, last: u64, dir: &Path) -> Result<Option<Written>, String> {
    let ids = store.epoch_ids(first..=last).map_err(|e| e.to_string())?;
    if ids.is_empty() {
        return Ok(None);
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let name = file_name(first, last);
    let (blocks_path, tmp_path) = (dir.join(format!(".{name}.blocks")), dir.join(format!(".{name}.tmp")));
    let written = write_files(store, market, &ids, dir, &name, &blocks_path, &tmp_path);
    // Whatever happened, no half file stays (a full disk, a store error).
    let _ = std::fs::remove_file(&blocks_path);
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp_path);
    }
    written.map(Some)
}

/// [`write`]'s work: the blocks gathered in `blocks_path`, then the archive
/// in `tmp_path`, renamed into place.
fn write_files(
    store: &Store,
    market: &MarketOf,
    ids: &[u64],
    dir: &Path,
    name: &str,
    blocks_path: &Path,
    tmp_path: &Path,
) -> Result<Written, String> {
    let io = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
    let mut blocks = lite_node_protocol::car::Writer::headless(BufWriter::new(
        std::fs::File::create(blocks_path).map_err(|e| io(blocks_path, e))?,
    ));
    let mut written = Written { path: dir.join(name), epochs: 0, blocks: 0, bytes: 0 };
    let mut index = ArchiveIndex {
        format: FORMAT.into(),
        chain_id: market.chain_id,
        protocol_state: market.protocol_state.clone(),
        data_market: market.data_market.clone(),
        epochs: Vec::new(),
    };
    let mut before: HashSet<String> = HashSet::new();
    for &epoch_id in ids {
        let Some(meta) = store.meta(epoch_id).map_err(|e| e.to_string())? else { continue };
        let (_, rows) = store.page(epoch_id, None, usize::MAX).map_err(|e| e.to_string())?;
        let mut now = HashSet::with_capacity(rows.len());
        for (_, cid, bytes) in &rows {
            if let Some(bytes) = bytes
                && !before.contains(cid)
                && now.insert(cid.clone())
            {
                blocks.block(bytes).map_err(|e| io(blocks_path, e))?;
                written.blocks += 1;
                written.bytes += bytes.len() as u64;
            }
            now.insert(cid.clone());
        }
        let epoch = EpochIndex {
            epoch_id,
            root: meta.root,
            batch_cid: meta.batch_cid,
            finalized_at: meta.finalized_at,
            on_chain: store.on_chain(epoch_id).map_err(|e| e.to_string())?,
            pairs: rows.into_iter().map(|(p, c, _)| (p, c)).collect(),
        };
        let text = serde_json::to_vec(&epoch).map_err(|e| e.to_string())?;
        let cid = blocks.block(&text).map_err(|e| io(blocks_path, e))?;
        index.epochs.push((epoch_id, cid.to_string()));
        written.epochs += 1;
        before = now;
    }
    let mut gathered = blocks.into_inner().into_inner().map_err(|e| io(blocks_path, e.into_error()))?;
    gathered.flush().map_err(|e| io(blocks_path, e))?;
    drop(gathered);
    // The root first, then the blocks gathered.
    let root_block = serde_json::to_vec(&index).map_err(|e| e.to_string())?;
    let root = lite_node_protocol::car::raw_cid(&root_block);
    let file = std::fs::File::create(tmp_path).map_err(|e| io(tmp_path, e))?;
    let mut car = lite_node_protocol::car::Writer::new(BufWriter::new(file), &root).map_err(|e| io(tmp_path, e))?;
    car.block(&root_block).map_err(|e| io(tmp_path, e))?;
    let mut out = car.into_inner();
    let mut from = std::fs::File::open(blocks_path).map_err(|e| io(blocks_path, e))?;
    std::io::copy(&mut from, &mut out).map_err(|e| io(tmp_path, e))?;
    let file = out.into_inner().map_err(|e| io(tmp_path, e.into_error()))?;
    file.sync_all().map_err(|e| io(tmp_path, e))?;
    std::fs::rename(tmp_path, &written.path).map_err(|e| io(&written.path, e))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(written)
}

/// What [`restore`] took in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    pub epochs: usize,
    /// Epochs the store had already.
    pub kept_already: usize,
    pub blocks: usize,
}

/// Restores the archive at `path` into `store`: every block checked
/// against its CID, every epoch's pairs against its root, the market
/// against `market` when given; epochs the store has are left as they are.
/// A broken or foreign archive is an error naming the file and what is
/// wrong, with nothing of the epoch it was in kept.
pub fn restore(store: &Store, path: &Path, market: Option<&MarketOf>) -> Result<Restored, String> {
    let named = |why: String| format!("{}: {why}", path.display());
    let file = std::fs::File::open(path).map_err(|e| named(e.to_string()))?;
    let mut car = lite_node_protocol::car::Reader::new(BufReader::new(file)).map_err(named)?;
    let root = *car.root();
    let (cid, bytes) = car.next_block().map_err(named)?.ok_or_else(|| named("no block".into()))?;
    if cid != root {
        return Err(named(format!("the first block is {cid}, not the root {root}")));
    }
    let index: ArchiveIndex =
        serde_json::from_slice(&bytes).map_err(|e| named(format!("the root block is not an archive's index: {e}")))?;
    if index.format != FORMAT {
        return Err(named(format!("format `{}`, this lite-node reads `{FORMAT}`", index.format)));
    }
    if let Some(m) = market {
        let same = index.chain_id == m.chain_id
            && index.protocol_state.eq_ignore_ascii_case(&m.protocol_state)
            && index.data_market.eq_ignore_ascii_case(&m.data_market);
        if !same {
            return Err(named(format!(
                "an archive of market {} on ProtocolState {} (chain {}), not this one's {} on {} (chain {})",
                index.data_market, index.protocol_state, index.chain_id, m.data_market, m.protocol_state, m.chain_id
            )));
        }
    }
    let mut wanted: HashMap<String, u64> = index.epochs.iter().map(|(e, cid)| (cid.clone(), *e)).collect();
    let mut restored = Restored::default();
    let (mut pending, mut before): (BTreeMap<String, Vec<u8>>, BTreeMap<String, Vec<u8>>) = Default::default();
    while let Some((cid, bytes)) = car.next_block().map_err(named)? {
        let cid = cid.to_string();
        let Some(epoch_id) = wanted.remove(&cid) else {
            restored.blocks += 1;
            pending.insert(cid, bytes);
            continue;
        };
        let epoch: EpochIndex =
            serde_json::from_slice(&bytes).map_err(|e| named(format!("epoch {epoch_id}'s index is not one: {e}")))?;
        let tree = lite_node_protocol::merkle::Tree::of(epoch.pairs.iter().map(|(p, c)| (p.as_str(), c.as_str())))
            .map_err(|e| named(format!("epoch {epoch_id}: {e}")))?;
        if epoch.epoch_id != epoch_id || !tree.root().to_string().eq_ignore_ascii_case(&epoch.root) {
            return Err(named(format!("epoch {epoch_id}: its pairs do not make its root {}", epoch.root)));
        }
        let mut bytes = BTreeMap::new();
        for (_, cid) in &epoch.pairs {
            if let Some(b) = pending.get(cid).or_else(|| before.get(cid)) {
                bytes.insert(cid.clone(), b.clone());
            }
        }
        let kept = FinalizedEpoch {
            epoch_id,
            root: epoch.root,
            batch_cid: epoch.batch_cid,
            pairs: epoch.pairs,
            finalized_at: epoch.finalized_at,
            without_bytes: Vec::new(),
        };
        if store.put_restored(&kept, &bytes).map_err(|e| named(e.to_string()))? {
            restored.epochs += 1;
            if let Some(on_chain) = &epoch.on_chain {
                store.settle(epoch_id, on_chain).map_err(|e| named(e.to_string()))?;
            }
        } else {
            restored.kept_already += 1;
        }
        before = bytes;
        pending.clear();
    }
    if !wanted.is_empty() {
        let mut missing: Vec<u64> = wanted.into_values().collect();
        missing.sort_unstable();
        return Err(named(format!("the file ends before epoch(s) {missing:?}: a truncated archive")));
    }
    Ok(restored)
}

/// The epochs `first..=last` of each range of `every` epochs (`1..=every`,
/// `every+1..=2·every`, …) that [`write_due`] writes once the store holds a
/// later epoch and none of them awaits the chain.
fn range_containing(epoch_id: u64, every: u64) -> (u64, u64) {
    let k = epoch_id.saturating_sub(1) / every;
    (k * every + 1, (k + 1) * every)
}

/// Writes each range of `every` epochs that is complete (the store holds a
/// later epoch, none of its epochs awaits the chain) and neither in `dir`
/// nor among `elsewhere` (the ranges a bucket holds) yet; what was written.
pub fn write_due(
    store: &Store,
    market: &MarketOf,
    every: u64,
    dir: &Path,
    elsewhere: &HashSet<(u64, u64)>,
) -> Result<Vec<Written>, String> {
    let every = every.max(1);
    let (Some(first), Some(last)) =
        (store.first_epoch().map_err(|e| e.to_string())?, store.last_epoch().map_err(|e| e.to_string())?)
    else {
        return Ok(Vec::new());
    };
    let waiting = store.awaiting().map_err(|e| e.to_string())?.first().map(|(e, _)| *e);
    let done: HashSet<(u64, u64)> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().filter_map(|e| range_of(&e.file_name().to_string_lossy())).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    let (mut from, _) = range_containing(first, every);
    while from.saturating_add(every) <= last {
        let to = from + every - 1;
        if waiting.is_some_and(|w| w <= to) {
            break;
        }
        if !done.contains(&(from, to))
            && !elsewhere.contains(&(from, to))
            && let Some(w) = write(store, market, from, to, dir)?
        {
            out.push(w);
        }
        from += every;
    }
    Ok(out)
}
