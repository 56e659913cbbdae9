//! The finalized data a validator keeps, to serve to the market's consumers
//! (issue 54): each epoch it finalized — its root, its batch CID and its
//! (project, CID) pairs — and the snapshot bytes of every CID in it, so any
//! CID it attests is one it can serve.
//!
//! One embedded file, `finalized.redb` in the data directory: redb, a
//! copy-on-write B-tree in pure Rust whose every commit is atomic and
//! durable (a crash leaves the last commit whole, never half an epoch), with
//! no server to run and nothing to build in C. Content-addressed: a snapshot
//! identical across epochs or projects is kept once, counted by the epochs
//! that hold it, and dropped with the last of them.
//!
//! Laid out for reads by key, so no read costs more with the market's size:
//! an epoch's meta (root, batch CID, number of projects) apart from its
//! pairs, which are keyed by (epoch, project) in the tree's order, and its
//! Merkle tree's nodes keyed by (epoch, node) — one project's proof is one
//! read a level of the tree, a page of an epoch one range read, a project
//! over many epochs one read of each. Where the chain finalized each epoch
//! (`CHAIN`) and when it was kept (retention's clock) sit beside it.
//!
//! Redis stays the pipeline's working memory (`snapshot:{cid}` for a day):
//! [`archive`] takes each epoch this validator finalized from there into the
//! store.

use std::{collections::BTreeMap, path::Path, sync::Arc, time::Duration};

use alloy::primitives::B256;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use redis::{AsyncCommands, aio::ConnectionManager};
use serde::{Deserialize, Serialize};

use crate::Market;

/// Block number → snapshot bytes, as [`pack`] keeps them: LZ4-compressed
/// behind a tag byte when that is smaller (a snapshot is JSON, which no
/// control character starts), else as they are.
const BLOCKS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("blocks");
/// [`BLOCKS`]' tag of a compressed block (LZ4 block format, its length first).
const LZ4: u8 = 0x01;
/// …and of bytes kept as they are whose first byte is a tag's.
const RAW: u8 = 0x00;

/// A snapshot's bytes as `BLOCKS` keeps them. Blocks written before
/// compression (bytes as they are) read back unchanged: JSON never starts
/// with a tag byte.
fn pack(bytes: &[u8]) -> Vec<u8> {
    let compressed = lz4_flex::block::compress_prepend_size(bytes);
    if compressed.len() + 1 < bytes.len() {
        let mut out = Vec::with_capacity(compressed.len() + 1);
        out.push(LZ4);
        out.extend_from_slice(&compressed);
        out
    } else if matches!(bytes.first(), Some(&(LZ4 | RAW))) {
        let mut out = Vec::with_capacity(bytes.len() + 1);
        out.push(RAW);
        out.extend_from_slice(bytes);
        out
    } else {
        bytes.to_vec()
    }
}

/// How many snapshot bytes a `BLOCKS` value holds, without unpacking it.
fn unpacked_len(kept: &[u8]) -> u64 {
    match kept.first() {
        Some(&LZ4) if kept.len() >= 5 => u64::from(u32::from_le_bytes([kept[1], kept[2], kept[3], kept[4]])),
        Some(&(LZ4 | RAW)) => kept.len().saturating_sub(1) as u64,
        _ => kept.len() as u64,
    }
}

/// The snapshot's bytes from a `BLOCKS` value ([`pack`]'s inverse).
fn unpack(number: u64, kept: &[u8]) -> Result<Vec<u8>, StoreError> {
    match kept.first() {
        Some(&LZ4) => match lz4_flex::block::decompress_size_prepended(&kept[1..]) {
            Ok(bytes) if bytes.len() as u64 == unpacked_len(kept) => Ok(bytes),
            Ok(bytes) => Err(failed(format!(
                "block {number}: its compressed bytes give {} bytes, not the {} it says",
                bytes.len(),
                unpacked_len(kept)
            ))),
            Err(e) => Err(failed(format!("block {number}: its compressed bytes do not decompress: {e}"))),
        },
        Some(&RAW) => Ok(kept[1..].to_vec()),
        _ => Ok(kept.to_vec()),
    }
}

/// CID → (its block's number in `BLOCKS`, how many kept epochs hold it).
/// Blocks are numbered in the order they come, so `BLOCKS` only ever grows
/// at its end (a B-tree of random keys would be rewritten by every commit
/// and keep its old pages: several times the snapshots' size on disk);
/// only this small index takes keys at random.
const CIDS: TableDefinition<'_, &str, (u64, u64)> = TableDefinition::new("cids");
/// Epoch id → its [`EpochMeta`] (JSON): small, whatever the epoch's size.
const EPOCHS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("epochs");
/// (epoch id, project id) → (the project's leaf index, its CID): in key
/// order, an epoch's pairs are in project-id order, the tree's.
const PAIRS: TableDefinition<'_, (u64, &str), (u32, &str)> = TableDefinition::new("pairs");
/// (epoch id, node index) → the epoch's Merkle tree node (32 bytes; the
/// layout of `lite_node_protocol::merkle`): a proof is one read a level.
const NODES: TableDefinition<'_, (u64, u32), &[u8]> = TableDefinition::new("nodes");
/// Epoch id → where the chain finalized it ([`OnChain`], JSON), once known.
const CHAIN: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("chain");
/// Epoch id → when it was kept (Unix seconds): retention's clock.
const KEPT: TableDefinition<'_, u64, u64> = TableDefinition::new("kept");
/// Epoch id → when it was kept (Unix seconds), while the chain's outcome for
/// it is not known yet.
const AWAITING: TableDefinition<'_, u64, u64> = TableDefinition::new("awaiting");
/// `"format"` → the layout's version ([`FORMAT`]).
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");

/// The layout's version: a file of another is refused, naming it.
const FORMAT: u64 = 3;

/// What the chain made of a kept epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnChain {
    /// Whether ProtocolState finalized the epoch; `false` when it did not,
    /// or when this validator stopped following it (it did not watch the
    /// epoch whole, or its state is gone) and cannot say.
    pub finalized: bool,
    /// The anchor block and transaction that finalized it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx: Option<String>,
    /// The root it finalized: this validator's, or another (it diverged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
}

/// The store's file in a validator's data directory.
pub const FILE: &str = "finalized.redb";

/// One finalized epoch as this validator finalized it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalizedEpoch {
    pub epoch_id: u64,
    /// The Merkle root of its pairs (docs/protocol.md §12).
    pub root: String,
    pub batch_cid: String,
    /// (project id, CID), in byte order of the project id.
    pub pairs: Vec<(String, String)>,
    /// Unix seconds.
    pub finalized_at: u64,
    /// The CIDs of its pairs whose bytes were not at hand when it was kept
    /// (no node sent them, in a market that does not require them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub without_bytes: Vec<String>,
}

/// A kept epoch without its pairs (they are read by project, or a page at
/// a time).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochMeta {
    pub epoch_id: u64,
    pub root: String,
    pub batch_cid: String,
    /// How many projects it has (its tree's leaves).
    pub projects: u64,
    pub finalized_at: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub without_bytes: Vec<String>,
}

/// One project at one epoch, with what proves it to the epoch's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proved {
    pub meta: EpochMeta,
    pub cid: String,
    /// The snapshot's bytes (`None`: no node sent them).
    pub bytes: Option<Vec<u8>>,
    pub proof: Vec<B256>,
    /// What the chain made of the epoch, once known (read in the same view).
    pub on_chain: Option<OnChain>,
}

/// What the store holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub epochs: u64,
    pub blocks: u64,
    /// The snapshot bytes kept, each distinct snapshot once.
    pub bytes: u64,
}

/// [`Store::space`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Space {
    pub allocated: u64,
    pub stored: u64,
    pub metadata: u64,
    pub fragmented: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the finalized-data store {path}: {why}")]
    Open { path: String, why: String },
    #[error("the finalized-data store: {0}")]
    Failed(String),
}

fn failed(e: impl std::fmt::Display) -> StoreError {
    StoreError::Failed(e.to_string())
}

/// The finalized-data store (see the module docs).
pub struct Store {
    db: Database,
    /// Why keeping the finalized data fails now (archiving, archives,
    /// retention), while it does: `/health` says so.
    problem: std::sync::Mutex<Option<String>>,
    /// The trees of the epochs consumers ask most of, in memory.
    trees: std::sync::Mutex<Trees>,
}

/// The trees (every node) of epochs asked for often, so that a proof of one
/// of them is read from memory, not a B-tree lookup a level of the tree: an
/// epoch's tree is loaded once [`Trees::HOT`] proofs were asked of it (never
/// one larger than a quarter of [`Trees::BUDGET`], an epoch of more than
/// ~262,000 projects), and the least recently used go past
/// [`Trees::BUDGET`] bytes. Each is held with its epoch's root, and used
/// only for an epoch of that root.
#[derive(Default)]
struct Trees {
    /// Epoch → its root, its nodes, and when it was last used.
    held: std::collections::HashMap<u64, (String, Arc<[B256]>, u64)>,
    /// Epoch → the proofs asked of it while its tree is not held.
    asked: std::collections::HashMap<u64, u32>,
    bytes: usize,
    clock: u64,
}

impl Trees {
    /// The memory the trees take at most (a 10,000-project epoch's is
    /// 0.6 MiB).
    const BUDGET: usize = 64 << 20;
    /// The proofs asked of an epoch before its tree is loaded.
    const HOT: u32 = 8;

    /// The nodes of `epoch_id`'s tree of `root`, when held.
    fn get(&mut self, epoch_id: u64, root: &str) -> Option<Arc<[B256]>> {
        self.clock += 1;
        let clock = self.clock;
        let (held_root, nodes, used) = self.held.get_mut(&epoch_id)?;
        if held_root != root {
            return None;
        }
        *used = clock;
        Some(nodes.clone())
    }

    /// Counts a proof asked of `epoch_id` while its tree is not held:
    /// whether to load it now.
    fn asked(&mut self, epoch_id: u64) -> bool {
        if self.asked.len() >= 4_096 {
            self.asked.clear();
        }
        let n = self.asked.entry(epoch_id).or_default();
        *n += 1;
        *n >= Self::HOT
    }

    fn hold(&mut self, epoch_id: u64, root: String, nodes: Arc<[B256]>) {
        let size = nodes.len() * 32;
        self.asked.remove(&epoch_id);
        self.clock += 1;
        if let Some((_, old, _)) = self.held.insert(epoch_id, (root, nodes, self.clock)) {
            self.bytes -= old.len() * 32;
        }
        self.bytes += size;
        while self.bytes > Self::BUDGET {
            let Some(oldest) = self.held.iter().min_by_key(|(_, (_, _, used))| *used).map(|(e, _)| *e) else { break };
            let (_, gone, _) = self.held.remove(&oldest).expect("held");
            self.bytes -= gone.len() * 32;
        }
    }

    /// Forgets the trees of epochs up to `epoch_id` (dropped).
    fn drop_through(&mut self, epoch_id: u64) {
        let gone: Vec<u64> = self.held.keys().copied().filter(|e| *e <= epoch_id).collect();
        for e in gone {
            let (_, nodes, _) = self.held.remove(&e).expect("held");
            self.bytes -= nodes.len() * 32;
        }
        self.asked.retain(|e, _| *e > epoch_id);
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// A node of an epoch's tree, read in `txn`'s view.
fn node_in(nodes: &impl ReadableTable<(u64, u32), &'static [u8]>, epoch_id: u64, j: usize) -> Result<B256, StoreError> {
    let j = u32::try_from(j).map_err(failed)?;
    let node = nodes
        .get((epoch_id, j))
        .map_err(failed)?
        .ok_or_else(|| failed(format!("epoch {epoch_id}: node {j} is missing")))?;
    B256::try_from(node.value()).map_err(|_| failed(format!("epoch {epoch_id}: node {j} is not 32 bytes")))
}

/// The bytes of `cid`, if kept, read in a transaction's view.
fn bytes_in(
    index: &impl ReadableTable<&'static str, (u64, u64)>,
    blocks: &impl ReadableTable<u64, &'static [u8]>,
    cid: &str,
) -> Result<Option<Vec<u8>>, StoreError> {
    let Some(entry) = index.get(cid).map_err(failed)? else { return Ok(None) };
    let (number, _) = entry.value();
    blocks.get(number).map_err(failed)?.map(|b| unpack(number, b.value())).transpose()
}

fn on_chain_in(chain: &impl ReadableTable<u64, &'static [u8]>, epoch_id: u64) -> Result<Option<OnChain>, StoreError> {
    let Some(record) = chain.get(epoch_id).map_err(failed)? else { return Ok(None) };
    serde_json::from_slice(record.value()).map(Some).map_err(failed)
}

fn meta_in(epochs: &impl ReadableTable<u64, &'static [u8]>, epoch_id: u64) -> Result<Option<EpochMeta>, StoreError> {
    let Some(record) = epochs.get(epoch_id).map_err(failed)? else { return Ok(None) };
    serde_json::from_slice(record.value()).map(Some).map_err(failed)
}

/// Keeps `epoch` in `txn` ([`Store::put_epoch`]); `false` when it is kept
/// already.
fn put_in(
    txn: &redb::WriteTransaction,
    epoch: &FinalizedEpoch,
    bytes: &BTreeMap<String, Vec<u8>>,
) -> Result<bool, StoreError> {
    let tree = lite_node_protocol::merkle::Tree::of(epoch.pairs.iter().map(|(p, c)| (p.as_str(), c.as_str())))
        .map_err(|e| failed(format!("epoch {}: {e}", epoch.epoch_id)))?;
    let mut sorted: Vec<&(String, String)> = epoch.pairs.iter().collect();
    sorted.sort();
    let mut epochs = txn.open_table(EPOCHS).map_err(failed)?;
    if epochs.get(epoch.epoch_id).map_err(failed)?.is_some() {
        return Ok(false);
    }
    let mut blocks = txn.open_table(BLOCKS).map_err(failed)?;
    let mut index = txn.open_table(CIDS).map_err(failed)?;
    let mut meta_table = txn.open_table(META).map_err(failed)?;
    let mut next = meta_table.get("next_block").map_err(failed)?.map_or(0, |n| n.value());
    let mut without_bytes = Vec::new();
    let cids: std::collections::BTreeSet<&str> = epoch.pairs.iter().map(|(_, cid)| cid.as_str()).collect();
    for cid in cids {
        let held = index.get(cid).map_err(failed)?.map(|n| n.value());
        match held {
            Some((number, n)) => {
                index.insert(cid, (number, n + 1)).map_err(failed)?;
            }
            None => match bytes.get(cid) {
                Some(b) if lite_node_protocol::cid::cid(b) == cid => {
                    blocks.insert(next, pack(b).as_slice()).map_err(failed)?;
                    index.insert(cid, (next, 1)).map_err(failed)?;
                    next += 1;
                }
                _ => without_bytes.push(cid.to_owned()),
            },
        }
    }
    meta_table.insert("next_block", next).map_err(failed)?;
    let mut pairs = txn.open_table(PAIRS).map_err(failed)?;
    for (i, (project, cid)) in sorted.iter().enumerate() {
        let i = u32::try_from(i).map_err(failed)?;
        pairs.insert((epoch.epoch_id, project.as_str()), (i, cid.as_str())).map_err(failed)?;
    }
    let mut nodes = txn.open_table(NODES).map_err(failed)?;
    for (j, node) in tree.nodes().iter().enumerate() {
        nodes.insert((epoch.epoch_id, u32::try_from(j).map_err(failed)?), node.as_slice()).map_err(failed)?;
    }
    let meta = EpochMeta {
        epoch_id: epoch.epoch_id,
        root: epoch.root.clone(),
        batch_cid: epoch.batch_cid.clone(),
        projects: sorted.len() as u64,
        finalized_at: epoch.finalized_at,
        without_bytes,
    };
    let record = serde_json::to_vec(&meta).map_err(failed)?;
    epochs.insert(epoch.epoch_id, record.as_slice()).map_err(failed)?;
    let now = lite_node_core::time::now_secs();
    txn.open_table(AWAITING).map_err(failed)?.insert(epoch.epoch_id, now).map_err(failed)?;
    txn.open_table(KEPT).map_err(failed)?.insert(epoch.epoch_id, now).map_err(failed)?;
    Ok(true)
}

impl Store {
    /// Opens (or creates) the store at `path`. Another process holding it
    /// open, or a file of another layout, is an error naming the file.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let open = |why: String| StoreError::Open { path: path.display().to_string(), why };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| open(e.to_string()))?;
        }
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => open(
                "another process holds it open (a validator, or lite-node serve): stop it, or serve a copy of the file"
                    .into(),
            ),
            e => open(e.to_string()),
        })?;
        let txn = db.begin_write().map_err(|e| open(e.to_string()))?;
        {
            let mut meta = txn.open_table(META).map_err(|e| open(e.to_string()))?;
            let epochs = txn.open_table(EPOCHS).map_err(|e| open(e.to_string()))?;
            let format = meta.get("format").map_err(|e| open(e.to_string()))?.map(|v| v.value());
            match format {
                Some(FORMAT) => {}
                None if epochs.is_empty().map_err(|e| open(e.to_string()))? => {
                    meta.insert("format", FORMAT).map_err(|e| open(e.to_string()))?;
                }
                other => {
                    return Err(open(format!(
                        "its layout is version {}, this lite-node's is {FORMAT}: move it aside (the validator \
                         starts a new one; the epochs it held are not served)",
                        other.unwrap_or(1)
                    )));
                }
            }
        }
        txn.open_table(BLOCKS).map_err(|e| open(e.to_string()))?;
        txn.open_table(CIDS).map_err(|e| open(e.to_string()))?;
        txn.open_table(PAIRS).map_err(|e| open(e.to_string()))?;
        txn.open_table(NODES).map_err(|e| open(e.to_string()))?;
        txn.open_table(CHAIN).map_err(|e| open(e.to_string()))?;
        txn.open_table(AWAITING).map_err(|e| open(e.to_string()))?;
        txn.open_table(KEPT).map_err(|e| open(e.to_string()))?;
        txn.commit().map_err(|e| open(e.to_string()))?;
        Ok(Self { db, problem: Default::default(), trees: Default::default() })
    }

    /// Keeps `epoch` — its pairs, its tree and the bytes of each of its CIDs
    /// that `bytes` has — in one commit; bytes that do not hash to their CID
    /// are not kept (the CID is listed as without bytes). An epoch kept
    /// already is left as it is: `false`.
    pub fn put_epoch(&self, epoch: &FinalizedEpoch, bytes: &BTreeMap<String, Vec<u8>>) -> Result<bool, StoreError> {
        self.put_epochs(std::iter::once((epoch, bytes))).map(|kept| kept == 1)
    }

    /// [`Store::put_epoch`] of an epoch restored from an archive: its
    /// retention counts from when it was finalized (`finalized_at`, never
    /// later than now), not from the restore, so a store restored from old
    /// archives keeps what its retention says and no more.
    pub fn put_restored(&self, epoch: &FinalizedEpoch, bytes: &BTreeMap<String, Vec<u8>>) -> Result<bool, StoreError> {
        let txn = self.db.begin_write().map_err(failed)?;
        let kept = put_in(&txn, epoch, bytes)?;
        if kept && epoch.finalized_at > 0 {
            let at = epoch.finalized_at.min(lite_node_core::time::now_secs());
            txn.open_table(KEPT).map_err(failed)?.insert(epoch.epoch_id, at).map_err(failed)?;
        }
        txn.commit().map_err(failed)?;
        Ok(kept)
    }

    /// [`Store::put_epoch`] of many epochs in one commit (a restore, a
    /// backfill): how many were new.
    pub fn put_epochs<'a>(
        &self,
        epochs: impl IntoIterator<Item = (&'a FinalizedEpoch, &'a BTreeMap<String, Vec<u8>>)>,
    ) -> Result<usize, StoreError> {
        let txn = self.db.begin_write().map_err(failed)?;
        let mut kept = 0;
        for (epoch, bytes) in epochs {
            kept += usize::from(put_in(&txn, epoch, bytes)?);
        }
        txn.commit().map_err(failed)?;
        Ok(kept)
    }

    /// The epoch, if kept, with every pair (an epoch of many projects is
    /// better read a page at a time: [`Store::page`]).
    pub fn epoch(&self, epoch_id: u64) -> Result<Option<FinalizedEpoch>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let Some(meta) = meta_in(&txn.open_table(EPOCHS).map_err(failed)?, epoch_id)? else { return Ok(None) };
        let pairs = txn.open_table(PAIRS).map_err(failed)?;
        let pairs = pairs
            .range((epoch_id, "")..(epoch_id + 1, ""))
            .map_err(failed)?
            .map(|row| row.map(|(k, v)| (k.value().1.to_owned(), v.value().1.to_owned())).map_err(failed))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(FinalizedEpoch {
            epoch_id,
            root: meta.root,
            batch_cid: meta.batch_cid,
            pairs,
            finalized_at: meta.finalized_at,
            without_bytes: meta.without_bytes,
        }))
    }

    /// The epoch's meta, if kept.
    pub fn meta(&self, epoch_id: u64) -> Result<Option<EpochMeta>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        meta_in(&txn.open_table(EPOCHS).map_err(failed)?, epoch_id)
    }

    /// Whether the epoch is kept (a lookup, nothing read of it).
    pub fn has_epoch(&self, epoch_id: u64) -> Result<bool, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let epochs = txn.open_table(EPOCHS).map_err(failed)?;
        Ok(epochs.get(epoch_id).map_err(failed)?.is_some())
    }

    /// `project` at kept `epoch_id` with its proof and bytes, in one read:
    /// `Ok(None)` for an epoch not kept, `Err` naming a project not in it.
    pub fn proved(&self, epoch_id: u64, project: &str) -> Result<Option<Result<Proved, EpochMeta>>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let Some(meta) = meta_in(&txn.open_table(EPOCHS).map_err(failed)?, epoch_id)? else { return Ok(None) };
        let pairs = txn.open_table(PAIRS).map_err(failed)?;
        let Some(pair) = pairs.get((epoch_id, project)).map_err(failed)? else { return Ok(Some(Err(meta))) };
        let (index, cid) = pair.value();
        let cid = cid.to_owned();
        let nodes = txn.open_table(NODES).map_err(failed)?;
        let leaves = usize::try_from(meta.projects).map_err(failed)?;
        let proof = self.proof(&nodes, &meta, leaves, index as usize)?;
        let (index, blocks) = (txn.open_table(CIDS).map_err(failed)?, txn.open_table(BLOCKS).map_err(failed)?);
        let bytes = bytes_in(&index, &blocks, &cid)?;
        let on_chain = on_chain_in(&txn.open_table(CHAIN).map_err(failed)?, epoch_id)?;
        Ok(Some(Ok(Proved { meta, cid, bytes, proof, on_chain })))
    }

    /// The proof of leaf `i` of kept epoch `meta` (of `leaves` leaves): from
    /// its tree in memory when held, else a lookup a level (and the tree
    /// loaded, read in the same view, once the epoch is asked for often).
    fn proof(
        &self,
        nodes: &impl ReadableTable<(u64, u32), &'static [u8]>,
        meta: &EpochMeta,
        leaves: usize,
        i: usize,
    ) -> Result<Vec<B256>, StoreError> {
        let epoch_id = meta.epoch_id;
        let trees = || self.trees.lock().unwrap_or_else(|p| p.into_inner());
        let held = trees().get(epoch_id, &meta.root);
        if let Some(held) = held {
            let node =
                |j: usize| held.get(j).copied().ok_or_else(|| failed(format!("epoch {epoch_id}: node {j} is missing")));
            return Ok(lite_node_protocol::merkle::proof_of(leaves, i, node)?.unwrap_or_default());
        }
        let proof =
            lite_node_protocol::merkle::proof_of(leaves, i, |j| node_in(nodes, epoch_id, j))?.unwrap_or_default();
        // An epoch whose tree would not be held is never loaded (nor counted).
        let all = 2 * leaves.max(1) - 1;
        if all.saturating_mul(32) <= Trees::BUDGET / 4 && trees().asked(epoch_id) {
            let mut loaded = Vec::with_capacity(all);
            // One row past the tree's is read: a tree of another size is not held.
            for row in nodes.range((epoch_id, 0)..=(epoch_id, u32::MAX)).map_err(failed)?.take(all + 1) {
                let (key, node) = row.map_err(failed)?;
                let node = B256::try_from(node.value()).ok().filter(|_| key.value().1 as usize == loaded.len());
                let Some(node) = node else { return Ok(proof) };
                loaded.push(node);
            }
            if loaded.len() == all {
                trees().hold(epoch_id, meta.root.clone(), loaded.into());
            }
        }
        Ok(proof)
    }

    /// `project` at each kept epoch of `from..=to`, a chunk at a time: at most
    /// `limit` epochs read (kept or not) from `from`; each kept epoch that
    /// has the project, proved. The next epoch to read is `from + limit`.
    pub fn proved_range(&self, project: &str, from: u64, to: u64, limit: u64) -> Result<Vec<Proved>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let (epochs, pairs) = (txn.open_table(EPOCHS).map_err(failed)?, txn.open_table(PAIRS).map_err(failed)?);
        let (nodes, blocks) = (txn.open_table(NODES).map_err(failed)?, txn.open_table(BLOCKS).map_err(failed)?);
        let (numbers, chain) = (txn.open_table(CIDS).map_err(failed)?, txn.open_table(CHAIN).map_err(failed)?);
        let mut out = Vec::new();
        let last = to.min(from.saturating_add(limit.saturating_sub(1)));
        for row in epochs.range(from..=last).map_err(failed)? {
            let (id, record) = row.map_err(failed)?;
            let epoch_id = id.value();
            let meta: EpochMeta = serde_json::from_slice(record.value()).map_err(failed)?;
            let Some(pair) = pairs.get((epoch_id, project)).map_err(failed)? else { continue };
            let (index, cid) = pair.value();
            let leaves = usize::try_from(meta.projects).map_err(failed)?;
            let proof = lite_node_protocol::merkle::proof_of(leaves, index as usize, |j| node_in(&nodes, epoch_id, j))?
                .unwrap_or_default();
            let bytes = bytes_in(&numbers, &blocks, cid)?;
            let on_chain = on_chain_in(&chain, epoch_id)?;
            out.push(Proved { meta, cid: cid.to_owned(), bytes, proof, on_chain });
        }
        Ok(out)
    }

    /// The pairs of kept `epoch_id` after project `after` (from the first
    /// with `None`), at most `limit`, each with its bytes; and the leaf
    /// index of the first.
    #[allow(clippy::type_complexity)]
    pub fn page(
        &self,
        epoch_id: u64,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(usize, Vec<(String, String, Option<Vec<u8>>)>), StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let (pairs, blocks) = (txn.open_table(PAIRS).map_err(failed)?, txn.open_table(BLOCKS).map_err(failed)?);
        let cids = txn.open_table(CIDS).map_err(failed)?;
        let rows = match after {
            Some(after) => pairs.range((epoch_id, after)..(epoch_id + 1, "")).map_err(failed)?,
            None => pairs.range((epoch_id, "")..(epoch_id + 1, "")).map_err(failed)?,
        };
        let mut first = None;
        let mut out = Vec::with_capacity(limit.min(4096));
        for row in rows {
            let (k, v) = row.map_err(failed)?;
            let project = k.value().1;
            if after == Some(project) {
                continue;
            }
            if out.len() == limit {
                break;
            }
            let (index, cid) = v.value();
            first.get_or_insert(index as usize);
            let bytes = bytes_in(&cids, &blocks, cid)?;
            out.push((project.to_owned(), cid.to_owned(), bytes));
        }
        Ok((first.unwrap_or(0), out))
    }

    /// The multiproof of leaves `range` of kept `epoch_id` (`None`: an empty
    /// range, or past the end).
    pub fn multiproof(
        &self,
        epoch_id: u64,
        leaves: usize,
        range: std::ops::Range<usize>,
    ) -> Result<Option<lite_node_protocol::merkle::MultiProof>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let nodes = txn.open_table(NODES).map_err(failed)?;
        lite_node_protocol::merkle::multiproof_of(leaves, range, |j| node_in(&nodes, epoch_id, j))
    }

    /// The snapshot bytes of `cid`, if kept.
    pub fn block(&self, cid: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let (index, blocks) = (txn.open_table(CIDS).map_err(failed)?, txn.open_table(BLOCKS).map_err(failed)?);
        bytes_in(&index, &blocks, cid)
    }

    /// The kept epochs whose chain outcome is not known yet, with when each
    /// was kept.
    pub fn awaiting(&self) -> Result<Vec<(u64, u64)>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let awaiting = txn.open_table(AWAITING).map_err(failed)?;
        awaiting.iter().map_err(failed)?.map(|row| row.map(|(e, at)| (e.value(), at.value())).map_err(failed)).collect()
    }

    /// Records what the chain made of kept `epoch_id` (once; an epoch not
    /// kept is left alone).
    pub fn settle(&self, epoch_id: u64, on_chain: &OnChain) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(failed)?;
        {
            if txn.open_table(EPOCHS).map_err(failed)?.get(epoch_id).map_err(failed)?.is_none() {
                return Ok(());
            }
            let record = serde_json::to_vec(on_chain).map_err(failed)?;
            txn.open_table(CHAIN).map_err(failed)?.insert(epoch_id, record.as_slice()).map_err(failed)?;
            txn.open_table(AWAITING).map_err(failed)?.remove(epoch_id).map_err(failed)?;
        }
        txn.commit().map_err(failed)
    }

    /// What the chain made of `epoch_id`, once known.
    pub fn on_chain(&self, epoch_id: u64) -> Result<Option<OnChain>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        on_chain_in(&txn.open_table(CHAIN).map_err(failed)?, epoch_id)
    }

    /// The settled epochs after `after` (all of them with `None`), in epoch
    /// order, at most `limit`, each with its outcome; none past an epoch
    /// still awaiting the chain (a stream in epoch order never skips one
    /// that settles later).
    pub fn settled_after(&self, after: Option<u64>, limit: usize) -> Result<Vec<(u64, OnChain)>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let chain = txn.open_table(CHAIN).map_err(failed)?;
        let awaiting = txn.open_table(AWAITING).map_err(failed)?;
        let first_awaiting = awaiting.first().map_err(failed)?.map(|(e, _)| e.value());
        let from = after.map_or(0, |a| a.saturating_add(1));
        let mut out = Vec::new();
        for row in chain.range(from..).map_err(failed)? {
            let (e, record) = row.map_err(failed)?;
            let e = e.value();
            if out.len() == limit || first_awaiting.is_some_and(|w| w < e) {
                break;
            }
            out.push((e, serde_json::from_slice(record.value()).map_err(failed)?));
        }
        Ok(out)
    }

    /// The newest settled epoch the chain finalized (where a stream with no
    /// position starts), looking back from the newest.
    pub fn last_finalized(&self) -> Result<Option<u64>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let chain = txn.open_table(CHAIN).map_err(failed)?;
        for row in chain.iter().map_err(failed)?.rev() {
            let (e, record) = row.map_err(failed)?;
            let on_chain: OnChain = serde_json::from_slice(record.value()).map_err(failed)?;
            if on_chain.finalized {
                return Ok(Some(e.value()));
            }
        }
        Ok(None)
    }

    /// Drops the epochs kept more than `days` ago ([`Store::drop_through`]
    /// the newest of them): the last dropped and what went; `None` when
    /// none is that old.
    pub fn retain(&self, days: u32) -> Result<Option<(u64, Counts)>, StoreError> {
        self.retain_before(lite_node_core::time::now_secs().saturating_sub(u64::from(days) * 86_400))
    }

    /// [`Store::retain`] against a cutoff (Unix seconds): epochs kept before
    /// it go.
    pub fn retain_before(&self, cutoff: u64) -> Result<Option<(u64, Counts)>, StoreError> {
        let through = {
            let txn = self.db.begin_read().map_err(failed)?;
            let kept = txn.open_table(KEPT).map_err(failed)?;
            let mut through = None;
            for row in kept.iter().map_err(failed)? {
                let (e, at) = row.map_err(failed)?;
                if at.value() >= cutoff {
                    break;
                }
                through = Some(e.value());
            }
            through
        };
        let Some(through) = through else { return Ok(None) };
        Ok(Some((through, self.drop_through(through)?)))
    }

    /// Why keeping the finalized data fails now, if it does.
    pub fn problem(&self) -> Option<String> {
        self.problem.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records why keeping the finalized data fails (`None`: it works again).
    pub fn set_problem(&self, why: Option<String>) {
        *self.problem.lock().unwrap_or_else(|p| p.into_inner()) = why;
    }

    /// The kept epochs of `range`, in order.
    pub fn epoch_ids(&self, range: std::ops::RangeInclusive<u64>) -> Result<Vec<u64>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let epochs = txn.open_table(EPOCHS).map_err(failed)?;
        epochs.range(range).map_err(failed)?.map(|row| row.map(|(e, _)| e.value()).map_err(failed)).collect()
    }

    /// The oldest epoch kept.
    pub fn first_epoch(&self) -> Result<Option<u64>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let epochs = txn.open_table(EPOCHS).map_err(failed)?;
        Ok(epochs.first().map_err(failed)?.map(|(id, _)| id.value()))
    }

    /// The newest epoch kept.
    pub fn last_epoch(&self) -> Result<Option<u64>, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let epochs = txn.open_table(EPOCHS).map_err(failed)?;
        Ok(epochs.last().map_err(failed)?.map(|(id, _)| id.value()))
    }

    /// Drops every epoch up to `epoch_id` (retention) — its pairs, tree and
    /// outcome — and each snapshot no epoch kept holds any more; what was
    /// dropped, in one commit.
    pub fn drop_through(&self, epoch_id: u64) -> Result<Counts, StoreError> {
        let mut dropped = Counts::default();
        let txn = self.db.begin_write().map_err(failed)?;
        {
            let mut epochs = txn.open_table(EPOCHS).map_err(failed)?;
            let mut pairs = txn.open_table(PAIRS).map_err(failed)?;
            let mut blocks = txn.open_table(BLOCKS).map_err(failed)?;
            let mut index = txn.open_table(CIDS).map_err(failed)?;
            let old: Vec<u64> = epochs
                .range(..=epoch_id)
                .map_err(failed)?
                .map(|row| row.map(|(e, _)| e.value()).map_err(failed))
                .collect::<Result<_, _>>()?;
            for e in old {
                let cids: std::collections::BTreeSet<String> = pairs
                    .range((e, "")..(e + 1, ""))
                    .map_err(failed)?
                    .map(|row| row.map(|(_, v)| v.value().1.to_owned()).map_err(failed))
                    .collect::<Result<_, _>>()?;
                for cid in &cids {
                    let Some((number, n)) = index.get(cid.as_str()).map_err(failed)?.map(|n| n.value()) else {
                        continue;
                    };
                    if n > 1 {
                        index.insert(cid.as_str(), (number, n - 1)).map_err(failed)?;
                        continue;
                    }
                    index.remove(cid.as_str()).map_err(failed)?;
                    if let Some(b) = blocks.remove(number).map_err(failed)? {
                        dropped.blocks += 1;
                        dropped.bytes += unpacked_len(b.value());
                    }
                }
                pairs.retain_in((e, "")..(e + 1, ""), |_, _| false).map_err(failed)?;
                epochs.remove(e).map_err(failed)?;
                dropped.epochs += 1;
            }
            txn.open_table(NODES)
                .map_err(failed)?
                .retain_in(..(epoch_id.saturating_add(1), 0), |_, _| false)
                .map_err(failed)?;
            txn.open_table(CHAIN).map_err(failed)?.retain_in(..=epoch_id, |_, _| false).map_err(failed)?;
            for table in [AWAITING, KEPT] {
                txn.open_table(table).map_err(failed)?.retain_in(..=epoch_id, |_, _| false).map_err(failed)?;
            }
        }
        txn.commit().map_err(failed)?;
        self.trees.lock().unwrap_or_else(|p| p.into_inner()).drop_through(epoch_id);
        Ok(dropped)
    }

    /// How the file's space is used (redb's own count): the bytes stored
    /// (keys and values), the B-trees' own, and pages allocated but free.
    pub fn space(&self) -> Result<Space, StoreError> {
        let txn = self.db.begin_write().map_err(failed)?;
        let stats = txn.stats().map_err(failed)?;
        let space = Space {
            allocated: stats.allocated_pages() * stats.page_size() as u64,
            stored: stats.stored_bytes(),
            metadata: stats.metadata_bytes(),
            fragmented: stats.fragmented_bytes(),
        };
        txn.abort().map_err(failed)?;
        Ok(space)
    }

    /// What the store holds.
    pub fn counts(&self) -> Result<Counts, StoreError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let epochs = txn.open_table(EPOCHS).map_err(failed)?;
        let blocks = txn.open_table(BLOCKS).map_err(failed)?;
        let mut counts = Counts { epochs: epochs.len().map_err(failed)?, ..Counts::default() };
        for row in blocks.iter().map_err(failed)? {
            let (_, b) = row.map_err(failed)?;
            counts.blocks += 1;
            counts.bytes += unpacked_len(b.value());
        }
        Ok(counts)
    }
}

/// How often [`archive`] drops what is past retention.
pub const RETAIN_EVERY: Duration = Duration::from_secs(60);

/// How often [`archive`] looks for newly finalized epochs.
pub const ARCHIVE_EVERY: Duration = Duration::from_millis(100);
/// How many of the newest finalized epochs [`archive`] looks at each tick…
const ARCHIVE_NEWEST: isize = 16;
/// …and every how many ticks it looks at the whole day's.
const FULL_SCAN_EVERY: u64 = 50;

/// Takes each epoch this validator finalized (`finalized:{epochId}`) into
/// `store`, with the bytes Redis keeps of its CIDs (`snapshot:{cid}`), until
/// `stop`, and once more then (an epoch finalized just before a stop is
/// kept). Redis or the store failing is logged and tried again.
pub async fn archive(
    store: Arc<Store>,
    market: Arc<Market>,
    conn: ConnectionManager,
    data: crate::service::DataSettings,
    stop: impl std::future::Future<Output = ()>,
) {
    let retention_days = data.retention_days;
    let of = crate::archive::MarketOf {
        chain_id: market.chain_id,
        protocol_state: market.scope.protocol_state.to_string(),
        data_market: market.scope.data_market.to_string(),
    };
    let mut retention = tokio::time::interval(RETAIN_EVERY);
    retention.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tick = tokio::time::interval(ARCHIVE_EVERY);
    let mut ticks = 0u64;
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    tokio::pin!(stop);
    let mut stopping = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = retention.tick(), if retention_days.is_some() || data.archive_dir.is_some() => {
                // Archives first: a range is written before retention drops it.
                if let Some(dir) = data.archive_dir.clone() {
                    // What the bucket holds is not written again.
                    let elsewhere = match &data.archive_bucket {
                        None => Ok(Default::default()),
                        Some(bucket) => bucket.archives().await.map(|held| {
                            held.iter().filter_map(|(name, _)| crate::archive::range_of(name)).collect()
                        }),
                    };
                    let elsewhere: std::collections::HashSet<(u64, u64)> = match elsewhere {
                        Ok(held) => held,
                        Err(e) => {
                            tracing::warn!("archives: {e}; writing none until the bucket answers");
                            continue;
                        }
                    };
                    let (keeping, of, every, staged) = (store.clone(), of.clone(), data.archive_epochs, dir.clone());
                    let written = tokio::task::spawn_blocking(move || {
                        crate::archive::write_due(&keeping, &of, every, &staged, &elsewhere)
                    })
                    .await;
                    match written {
                        Ok(Ok(written)) => {
                            for w in written {
                                tracing::info!(
                                    "archive {}: {} epoch(s), {} snapshot(s), {} bytes",
                                    w.path.display(), w.epochs, w.blocks, w.bytes
                                );
                            }
                        }
                        Ok(Err(e)) => tracing::warn!("archives: {e}"),
                        Err(e) => tracing::warn!("archives: {e}"),
                    }
                    if let Some(bucket) = &data.archive_bucket {
                        let (uploaded, failed) = crate::bucket::upload_written(bucket, &dir).await;
                        for (name, size) in uploaded {
                            tracing::info!("archive {name}: uploaded to {} ({size} bytes)", bucket.url());
                        }
                        for e in failed {
                            tracing::warn!("archives: {e}; kept in {} for the next try", dir.display());
                        }
                    }
                }
                let Some(days) = retention_days else { continue };
                let keeping = store.clone();
                let dropped = tokio::task::spawn_blocking(move || keeping.retain(days)).await;
                match dropped {
                    Ok(Ok(Some((through, d)))) => tracing::info!(
                        "finalized-data store: dropped {} epoch(s) through {through}, past {days} days' retention \
                         ({} snapshot(s), {} bytes no kept epoch holds)",
                        d.epochs, d.blocks, d.bytes
                    ),
                    Ok(Ok(None)) => {}
                    Ok(Err(e)) => tracing::warn!("finalized-data store: retention: {e}"),
                    Err(e) => tracing::warn!("finalized-data store: retention: {e}"),
                }
                continue;
            }
            () = &mut stop, if !stopping => stopping = true,
        }
        // The newest few each tick (an epoch readable within a tick of its
        // finalization); the whole day's now and then (one finalized late).
        ticks += 1;
        let among = if stopping || ticks % FULL_SCAN_EVERY == 1 { 0 } else { ARCHIVE_NEWEST };
        let round = archive_among(&store, &market, &mut conn.clone(), among).await;
        store.set_problem(round.as_ref().err().map(|e| format!("finalized-data store: {e}")));
        match round {
            Ok(_) if failing => {
                tracing::info!("finalized-data store: archiving again");
                failing = false;
            }
            Ok(_) => {}
            Err(e) if !failing => {
                tracing::warn!("finalized-data store: {e}; trying again every {} ms", ARCHIVE_EVERY.as_millis());
                failing = true;
            }
            Err(_) => {}
        }
        if stopping {
            return;
        }
    }
}

/// One round of [`archive`]: the epochs finalized here and not kept yet;
/// how many were kept.
pub async fn archive_new(store: &Arc<Store>, market: &Market, conn: &mut ConnectionManager) -> Result<usize, String> {
    archive_among(store, market, conn, 0).await
}

/// [`archive_new`] among the `newest` epochs this validator finalized
/// (`0`: all of the day's).
async fn archive_among(
    store: &Arc<Store>,
    market: &Market,
    conn: &mut ConnectionManager,
    newest: isize,
) -> Result<usize, String> {
    let k = &market.keys;
    // Scored by when each was finalized: the newest last.
    let finalized: Vec<u64> =
        conn.zrange(k.validator_batches(&market.validator_id), -newest, -1).await.map_err(|e| format!("Redis: {e}"))?;
    let mut kept = 0;
    for epoch_id in finalized {
        // Every round asks about a day of epochs: a lookup each, no parse.
        if store.has_epoch(epoch_id).map_err(|e| e.to_string())? {
            continue;
        }
        let Some(batch): Option<String> = conn.get(k.finalized(epoch_id)).await.map_err(|e| format!("Redis: {e}"))?
        else {
            continue;
        };
        let epoch = finalized_epoch(&batch).map_err(|e| format!("finalized:{epoch_id}: {e}"))?;
        let cids: Vec<&String> = epoch.pairs.iter().map(|(_, cid)| cid).collect();
        let mut bytes = BTreeMap::new();
        for chunk in cids.chunks(500) {
            let keys: Vec<String> = chunk.iter().map(|cid| k.snapshot(cid)).collect();
            let got: Vec<Option<Vec<u8>>> =
                redis::cmd("MGET").arg(&keys).query_async(conn).await.map_err(|e| format!("Redis: {e}"))?;
            for (cid, b) in chunk.iter().zip(got) {
                if let Some(b) = b {
                    bytes.insert((*cid).clone(), b);
                }
            }
        }
        // A commit waits for the disk: off the async threads.
        let (keeping, held) = (store.clone(), epoch.clone());
        let put = tokio::task::spawn_blocking(move || keeping.put_epoch(&held, &bytes).map(|fresh| (fresh, bytes)));
        let (fresh, bytes) = put.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        if fresh {
            kept += 1;
            let missing = epoch.pairs.len() - epoch.pairs.iter().filter(|(_, c)| bytes.contains_key(c)).count();
            if missing > 0 {
                tracing::warn!(
                    "epoch {epoch_id}: kept; {missing} of its {} snapshots came without their bytes (no node sent \
                     them): those cannot be served",
                    epoch.pairs.len()
                );
            } else {
                tracing::debug!("epoch {epoch_id}: kept with the bytes of its {} snapshots", epoch.pairs.len());
            }
        }
    }
    settle_awaiting(store, market, conn).await?;
    Ok(kept)
}

/// How long a kept epoch may await its outcome on chain before this
/// validator stops asking (its epoch state gone, or never followed).
const AWAIT_CHAIN_AT_MOST: u64 = 3_600;

/// Settles each kept epoch whose outcome on chain the on-chain worker has
/// recorded in its state (`onchain_status`, `onchain_finalized_*`).
async fn settle_awaiting(store: &Arc<Store>, market: &Market, conn: &mut ConnectionManager) -> Result<(), String> {
    let now = lite_node_core::time::now_secs();
    let awaiting = store.awaiting().map_err(|e| e.to_string())?;
    if awaiting.is_empty() {
        return Ok(());
    }
    // Every awaiting epoch's outcome in one round trip (this runs each tick).
    let mut pipe = redis::pipe();
    for (epoch_id, _) in &awaiting {
        pipe.cmd("HMGET").arg(market.keys.epoch_state(*epoch_id)).arg(&[
            "onchain_status",
            "onchain_finalized_block",
            "onchain_finalized_tx",
            "onchain_finalized_root",
        ]);
    }
    type Fields = (Option<String>, Option<String>, Option<String>, Option<String>);
    let outcomes: Vec<Fields> = pipe.query_async(conn).await.map_err(|e| format!("Redis: {e}"))?;
    for ((epoch_id, kept_at), fields) in awaiting.into_iter().zip(outcomes) {
        let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
        let on_chain = match fields.0.as_deref() {
            Some("finalized") => OnChain {
                finalized: true,
                block: nonempty(fields.1).and_then(|b| b.parse().ok()),
                tx: nonempty(fields.2),
                root: nonempty(fields.3),
            },
            Some("not_finalized" | "skipped") => OnChain { finalized: false, block: None, tx: None, root: None },
            _ if now.saturating_sub(kept_at) > AWAIT_CHAIN_AT_MOST => {
                OnChain { finalized: false, block: None, tx: None, root: None }
            }
            _ => continue,
        };
        let keeping = store.clone();
        tokio::task::spawn_blocking(move || keeping.settle(epoch_id, &on_chain))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The epoch as the aggregator wrote it (`finalized:{epochId}`).
fn finalized_epoch(batch: &str) -> Result<FinalizedEpoch, String> {
    let v: serde_json::Value = serde_json::from_str(batch).map_err(|e| e.to_string())?;
    let text = |f: &str| v[f].as_str().map(str::to_owned).ok_or_else(|| format!("no `{f}`"));
    let pairs = v["projects"]
        .as_array()
        .ok_or("no `projects`")?
        .iter()
        .map(|p| Some((p["projectId"].as_str()?.to_owned(), p["snapshotCid"].as_str()?.to_owned())))
        .collect::<Option<Vec<_>>>()
        .ok_or("a project without `projectId` or `snapshotCid`")?;
    Ok(FinalizedEpoch {
        epoch_id: v["epoch_id"].as_u64().ok_or("no `epoch_id`")?,
        root: text("root")?,
        batch_cid: text("batch_cid")?,
        pairs,
        finalized_at: v["finalized_at"].as_u64().unwrap_or(0),
        without_bytes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(epoch_id: u64, pairs: &[(&str, &[u8])]) -> (FinalizedEpoch, BTreeMap<String, Vec<u8>>) {
        let pairs: Vec<(String, String, Vec<u8>)> =
            pairs.iter().map(|(p, b)| ((*p).to_owned(), lite_node_protocol::cid::cid(b), b.to_vec())).collect();
        let e = FinalizedEpoch {
            epoch_id,
            root: format!("0xroot{epoch_id}"),
            batch_cid: format!("batch{epoch_id}"),
            pairs: pairs.iter().map(|(p, c, _)| (p.clone(), c.clone())).collect(),
            finalized_at: 1,
            without_bytes: Vec::new(),
        };
        (e, pairs.into_iter().map(|(_, c, b)| (c, b)).collect())
    }

    /// A snapshot that compresses, one that does not, and one whose first
    /// byte is a tag's each read back exactly; so does a block kept before
    /// compression; a corrupt compressed block is an error naming it.
    #[test]
    fn snapshots_are_kept_compressed_and_read_back_as_sent_and_older_blocks_as_they_were() {
        let json = format!(
            "{{\"trades\":[{}]}}",
            (0..200).map(|i| format!("{{\"n\":{i},\"side\":\"buy\"}}")).collect::<Vec<_>>().join(",")
        );
        for bytes in [json.as_bytes(), b"{}".as_slice(), &[LZ4, 9, 9], &[RAW]] {
            let kept = pack(bytes);
            assert_eq!(unpack(7, &kept).unwrap(), bytes);
            assert_eq!(unpacked_len(&kept), bytes.len() as u64);
        }
        assert!(pack(json.as_bytes()).len() * 3 < json.len(), "JSON of repeated fields shrinks several-fold");
        assert_eq!(unpack(7, json.as_bytes()).unwrap(), json.as_bytes(), "a block from before compression");
        let err = unpack(7, &[LZ4, 200, 0, 0, 0, 1]).unwrap_err().to_string();
        assert!(err.contains("block 7"), "{err}");
    }

    /// Proofs are the tree's whether read a level at a time or from the tree
    /// held in memory once the epoch is asked for often; an epoch dropped
    /// and kept again with another tree is proved from the new one.
    #[test]
    fn proofs_from_the_tree_in_memory_are_the_trees_and_follow_a_kept_again_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join(FILE)).unwrap();
        let keep = |tag: &str, root: &str| {
            let names: Vec<String> = (0..40).map(|i| format!("p{i:02}")).collect();
            let bodies: Vec<Vec<u8>> = (0..40).map(|i| format!("{{\"{tag}\":{i}}}").into_bytes()).collect();
            let pairs: Vec<(&str, &[u8])> =
                names.iter().map(String::as_str).zip(bodies.iter().map(Vec::as_slice)).collect();
            let (mut e, bytes) = epoch(3, &pairs);
            e.root = root.to_owned();
            assert!(store.put_epoch(&e, &bytes).unwrap());
            let tree = lite_node_protocol::merkle::Tree::of(e.pairs.iter().map(|(p, c)| (p.as_str(), c.as_str())));
            (names, tree.unwrap())
        };
        let held = |store: &Store| store.trees.lock().unwrap().held.get(&3).map(|(root, _, _)| root.clone());
        for (tag, root) in [("a", "0xroot-a"), ("b", "0xroot-b")] {
            let (names, tree) = keep(tag, root);
            for asked in 0..2 * names.len() {
                let at = asked % names.len();
                let hot = asked >= Trees::HOT as usize;
                assert_eq!(held(&store).as_deref(), hot.then_some(root), "{asked} proofs asked");
                let proved = store.proved(3, &names[at]).unwrap().unwrap().unwrap();
                assert_eq!(Some(proved.proof), tree.proof(at), "{tag}: {}, {asked} proofs asked", names[at]);
            }
            assert!(store.trees.lock().unwrap().get(3, "0xanother-root").is_none(), "held for its root only");
            store.drop_through(3).unwrap();
            assert_eq!(held(&store), None, "a dropped epoch's tree is let go");
        }
    }

    /// Identical snapshots are kept once across projects and epochs, an
    /// epoch kept twice is kept once, bytes that are not their CID's are
    /// not kept, and retention drops a snapshot with the last epoch holding
    /// it — all across a reopen of the file.
    #[test]
    fn snapshots_are_kept_once_by_cid_and_dropped_with_their_last_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let store = Store::open(&path).unwrap();
        let (one, bytes_one) = epoch(1, &[("a", b"{\"x\":1}"), ("b", b"{\"x\":1}"), ("c", b"{\"x\":2}")]);
        assert!(store.put_epoch(&one, &bytes_one).unwrap());
        assert!(!store.put_epoch(&one, &bytes_one).unwrap(), "kept once");
        assert!(store.has_epoch(1).unwrap() && !store.has_epoch(2).unwrap());
        let (two, mut bytes_two) = epoch(2, &[("a", b"{\"x\":2}"), ("d", b"{\"x\":3}")]);
        // d's bytes are someone else's: not kept, and said so.
        let d = lite_node_protocol::cid::cid(b"{\"x\":3}");
        bytes_two.insert(d.clone(), b"{\"x\":4}".to_vec());
        assert!(store.put_epoch(&two, &bytes_two).unwrap());
        drop(store);

        let store = Store::open(&path).unwrap();
        assert_eq!(store.counts().unwrap(), Counts { epochs: 2, blocks: 2, bytes: 14 });
        assert_eq!(store.last_epoch().unwrap(), Some(2));
        assert_eq!(store.epoch(2).unwrap().unwrap().without_bytes, std::slice::from_ref(&d));
        assert_eq!(
            store.block(&lite_node_protocol::cid::cid(b"{\"x\":2}")).unwrap().as_deref(),
            Some(&b"{\"x\":2}"[..])
        );
        assert_eq!(store.block(&d).unwrap(), None);

        // Epoch 1 past retention: {"x":1} goes, {"x":2} stays for epoch 2.
        let dropped = store.drop_through(1).unwrap();
        assert_eq!(dropped, Counts { epochs: 1, blocks: 1, bytes: 7 });
        assert_eq!(store.epoch(1).unwrap(), None);
        assert_eq!(store.block(&lite_node_protocol::cid::cid(b"{\"x\":1}")).unwrap(), None);
        assert!(store.block(&lite_node_protocol::cid::cid(b"{\"x\":2}")).unwrap().is_some());
        assert_eq!(store.counts().unwrap(), Counts { epochs: 1, blocks: 1, bytes: 7 });
    }

    #[test]
    fn a_second_process_on_the_same_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let _first = Store::open(&path).unwrap();
        let second = Store::open(&path).unwrap_err().to_string();
        assert!(
            second.contains(&path.display().to_string()) && second.contains("another process holds it open"),
            "{second}"
        );
    }
}
