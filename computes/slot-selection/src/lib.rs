//! The BDS data market's slot selection: which slots work an epoch, and on
//! which pool. Every node and every observer must compute the same answer bit
//! for bit (docs/protocol.md §2):
//!
//! - `seed = sha256(block_hash || epoch_id as 8 bytes, big-endian)`;
//! - a partial Fisher–Yates shuffle of `1..=total_slots` picks
//!   `min(1000, total_slots)` slots, step `i` drawing
//!   `sha256(seed || i as 4 bytes)`;
//! - a selected slot's pool is `sorted_pools[h % len]` with
//!   `h = sha256(seed || slot_id as 4 bytes)`, pools sorted as Python's
//!   `sorted()` sorts strings;
//! - in the genesis epoch (0) every slot works, on
//!   `random.Random(slot_id).choice(sorted_pools)` (CPython's MT19937).
//!
//! [`assign`] answers for a whole epoch; [`decide`] is what a processor calls
//! first: it computes this slot's assignment and reports it to the node's
//! SlotSelectionTracker.

pub mod mt;

use std::fmt;

use lite_node_plugin_api::{AssignmentRequest, Assignments, EpochContext, Host, SlotAssignment};

/// Slots selected per epoch (fewer when fewer are registered).
pub const SLOTS_PER_EPOCH: u64 = 1000;

/// Why an assignment cannot be computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectionError {
    /// The block hash is not 32 bytes of hex.
    BlockHash(String),
    /// There are slots to assign but no pools.
    NoPools,
    /// Slot ids are hashed as 4 bytes; more slots cannot be represented.
    TooManySlots(u64),
    /// More pools than an index can address.
    TooManyPools(usize),
}

impl fmt::Display for SelectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BlockHash(h) => write!(f, "block hash `{h}` is not 32 bytes of hex (64 hex digits, 0x optional)"),
            Self::NoPools => f.write_str("no pools to assign: give at least one pool address"),
            Self::TooManySlots(t) => write!(f, "total slots {t} exceeds 2^32 - 1, the protocol's slot id range"),
            Self::TooManyPools(n) => write!(f, "{n} pools exceed 2^32 - 1"),
        }
    }
}

impl std::error::Error for SelectionError {}

/// An epoch's assignment: the seed and `(slot_id, index into sorted pools)`,
/// by slot id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub seed: [u8; 32],
    pub selected: Vec<(u64, usize)>,
}

/// Parses a 32-byte block hash, with or without `0x`.
pub fn parse_block_hash(hash: &str) -> Result<[u8; 32], SelectionError> {
    let hex = hash.strip_prefix("0x").or_else(|| hash.strip_prefix("0X")).unwrap_or(hash);
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return Err(SelectionError::BlockHash(hash.to_owned()));
    }
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => out[i] = (h * 16 + l) as u8,
            _ => return Err(SelectionError::BlockHash(hash.to_owned())),
        }
    }
    Ok(out)
}

/// Pools in the order Python's `sorted()` gives strings (code point order,
/// which is byte order for UTF-8).
pub fn sorted_pools<S: AsRef<str>>(pools: &[S]) -> Vec<&str> {
    let mut sorted: Vec<&str> = pools.iter().map(AsRef::as_ref).collect();
    sorted.sort_unstable();
    sorted
}

/// One SHA-256 compression over a message of at most 55 bytes, padded by hand
/// (every hash here is of 36 or 40 bytes, so one block suffices).
fn sha256_short(parts: &[&[u8]]) -> [u8; 32] {
    let mut block = [0u8; 64];
    let mut len = 0;
    for p in parts {
        block[len..len + p.len()].copy_from_slice(p);
        len += p.len();
    }
    debug_assert!(len <= 55);
    block[len] = 0x80;
    block[56..].copy_from_slice(&((len as u64) * 8).to_be_bytes());
    let mut state = SHA256_IV;
    sha2::compress256(&mut state, &[block.into()]);
    let mut out = [0u8; 32];
    for (chunk, word) in out.chunks_exact_mut(4).zip(state) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

const SHA256_IV: [u32; 8] =
    [0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19];

/// `sha256(block_hash || epoch_id.to_bytes(8, "big"))`.
pub fn seed(block_hash: &[u8; 32], epoch_id: u64) -> [u8; 32] {
    sha256_short(&[block_hash, &epoch_id.to_be_bytes()])
}

fn draw(seed: &[u8; 32], n: u32) -> u64 {
    let h = sha256_short(&[seed, &n.to_be_bytes()]);
    u64::from_be_bytes(h[..8].try_into().expect("8 bytes"))
}

/// The selected slots of a regular epoch, in shuffle order.
pub fn selected_slots(seed: &[u8; 32], total_slots: u64) -> Result<Vec<u64>, SelectionError> {
    let total = u32::try_from(total_slots).map_err(|_| SelectionError::TooManySlots(total_slots))? as u64;
    Ok(shuffle(seed, total).0)
}

/// The selected slots in shuffle order, and the draws `sha256(seed || i)` of
/// each step (reused as the pool draw of slots below the step count).
fn shuffle(seed: &[u8; 32], total: u64) -> (Vec<u64>, Vec<u64>) {
    let k = total.min(SLOTS_PER_EPOCH);
    let draws: Vec<u64> = (0..k).map(|i| draw(seed, i as u32)).collect();
    let slots = if total <= DENSE_LIMIT { dense_prefix(&draws, total) } else { sparse_prefix(&draws, total) };
    (slots, draws)
}

/// Totals up to this shuffle a full array; above it only touched positions
/// are stored.
const DENSE_LIMIT: u64 = 1 << 22;

fn dense_prefix(draws: &[u64], total: u64) -> Vec<u64> {
    let mut items: Vec<u32> = (1..=total as u32).collect();
    (0..draws.len() as u64)
        .map(|i| {
            let j = i + draws[i as usize] % (total - i);
            items.swap(i as usize, j as usize);
            u64::from(items[i as usize])
        })
        .collect()
}

fn sparse_prefix(draws: &[u64], total: u64) -> Vec<u64> {
    let mut moved = std::collections::HashMap::with_capacity(2 * draws.len());
    (0..draws.len() as u64)
        .map(|i| {
            let j = i + draws[i as usize] % (total - i);
            let at_j = *moved.get(&j).unwrap_or(&(j + 1));
            let at_i = *moved.get(&i).unwrap_or(&(i + 1));
            moved.insert(j, at_i);
            at_j
        })
        .collect()
}

/// The pool index of a selected slot in a regular epoch.
pub fn pool_index(seed: &[u8; 32], slot_id: u64, pools: usize) -> usize {
    (draw(seed, slot_id as u32) % pools as u64) as usize
}

/// The whole epoch: every selected slot and its pool index, by slot id.
pub fn assign(
    epoch_id: u64,
    block_hash: &[u8; 32],
    total_slots: u64,
    pools: usize,
) -> Result<Assignment, SelectionError> {
    let seed = seed(block_hash, epoch_id);
    if total_slots == 0 {
        return Ok(Assignment { seed, selected: Vec::new() });
    }
    if pools == 0 {
        return Err(SelectionError::NoPools);
    }
    let total = u32::try_from(total_slots).map_err(|_| SelectionError::TooManySlots(total_slots))?;
    let n = u32::try_from(pools).map_err(|_| SelectionError::TooManyPools(pools))?;
    let selected = if epoch_id == 0 {
        let slots: Vec<u32> = (1..=total).collect();
        let mut indices = Vec::new();
        mt::choice_indices(&slots, n, &mut indices);
        slots.into_iter().zip(indices).map(|(s, i)| (u64::from(s), i as usize)).collect()
    } else {
        let (mut slots, draws) = shuffle(&seed, u64::from(total));
        slots.sort_unstable();
        slots
            .into_iter()
            .map(|s| {
                // The pool draw hashes the slot id as the shuffle hashed step
                // ids: for slots below the step count it is already known.
                let h = draws.get(s as usize).copied().unwrap_or_else(|| draw(&seed, s as u32));
                (s, (h % pools as u64) as usize)
            })
            .collect()
    };
    Ok(Assignment { seed, selected })
}

/// One slot's assignment: its pool index when selected.
pub fn slot_assignment(
    epoch_id: u64,
    block_hash: &[u8; 32],
    total_slots: u64,
    pools: usize,
    slot_id: u64,
) -> Result<Option<usize>, SelectionError> {
    if slot_id == 0 || slot_id > total_slots {
        return Ok(None);
    }
    if pools == 0 {
        return Err(SelectionError::NoPools);
    }
    let n = u32::try_from(pools).map_err(|_| SelectionError::TooManyPools(pools))?;
    if epoch_id == 0 {
        return Ok(Some(mt::choice_index(slot_id as u32, n) as usize));
    }
    let seed = seed(block_hash, epoch_id);
    let selected = selected_sorted(&seed, total_slots)?;
    Ok(selected.binary_search(&slot_id).is_ok().then(|| pool_index(&seed, slot_id, pools)))
}

/// The newest epoch's selected slots, sorted, by seed and total: a node that
/// works many slots asks once per slot, and the shuffle is the same for all
/// of them, so it is drawn once.
#[allow(clippy::type_complexity)]
static SELECTED: std::sync::Mutex<Option<([u8; 32], u64, std::sync::Arc<Vec<u64>>)>> = std::sync::Mutex::new(None);

fn selected_sorted(seed: &[u8; 32], total_slots: u64) -> Result<std::sync::Arc<Vec<u64>>, SelectionError> {
    let mut last = SELECTED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((s, t, slots)) = last.as_ref()
        && s == seed
        && *t == total_slots
    {
        return Ok(slots.clone());
    }
    let mut slots = selected_slots(seed, total_slots)?;
    slots.sort_unstable();
    let slots = std::sync::Arc::new(slots);
    *last = Some((*seed, total_slots, slots.clone()));
    Ok(slots)
}

/// What a processor calls before any work: computes whether this node's slot
/// works `epoch` and on which pool, reports that to the SlotSelectionTracker,
/// and returns the pool (`None`: not selected, return no snapshots).
pub fn decide<'p, S: AsRef<str>>(
    epoch: &EpochContext,
    host: &Host<'_>,
    block_hash: &str,
    pools: &'p [S],
) -> Result<Option<&'p str>, String> {
    let hash = parse_block_hash(block_hash).map_err(|e| e.to_string())?;
    let sorted = sorted_pools(pools);
    let pick = slot_assignment(epoch.epoch_id, &hash, epoch.total_slots, sorted.len(), epoch.slot_id)
        .map_err(|e| format!("slot selection for epoch {}: {e}", epoch.epoch_id))?;
    host.report_selection(epoch.epoch_id, pick.is_some(), epoch.slot_id);
    Ok(pick.map(|i| sorted[i]))
}

/// The market's rule behind the compute module's `assignments` entry.
pub fn assignments(request: &AssignmentRequest) -> Result<Assignments, String> {
    let hash = parse_block_hash(&request.block_hash).map_err(|e| e.to_string())?;
    let sorted = sorted_pools(&request.pools);
    let a = assign(request.epoch_id, &hash, request.total_slots, sorted.len()).map_err(|e| e.to_string())?;
    Ok(Assignments {
        seed: hex(&a.seed).into(),
        pools: sorted.iter().map(|p| (*p).into()).collect(),
        selected: a.selected.into_iter().map(|(slot_id, i)| SlotAssignment { slot_id, pool: i as u32 }).collect(),
    })
}

/// Lower-case hex without `0x`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_hash_parsing() {
        let h = "0x".to_owned() + &"ab".repeat(32);
        assert_eq!(parse_block_hash(&h).unwrap(), [0xab; 32]);
        assert_eq!(parse_block_hash(&h[2..]).unwrap(), [0xab; 32]);
        for bad in ["0x12", "zz", &("0x".to_owned() + &"g1".repeat(32)), &"ab".repeat(33)] {
            assert!(parse_block_hash(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn short_hash_matches_the_sha2_crate() {
        use sha2::Digest;
        let data = [7u8; 40];
        assert_eq!(sha256_short(&[&data[..32], &data[32..]]), <[u8; 32]>::from(sha2::Sha256::digest(data)));
        assert_eq!(sha256_short(&[&data[..36]]), <[u8; 32]>::from(sha2::Sha256::digest(&data[..36])));
    }

    #[test]
    fn sparse_and_dense_shuffles_agree() {
        for (epoch, total) in [(9, 1u64), (9, 2), (10, 999), (11, 1000), (12, 1001), (13, 50_000), (14, DENSE_LIMIT)] {
            let seed = seed(&[epoch as u8; 32], epoch);
            let draws: Vec<u64> = (0..total.min(SLOTS_PER_EPOCH)).map(|i| draw(&seed, i as u32)).collect();
            assert_eq!(dense_prefix(&draws, total), sparse_prefix(&draws, total), "total {total}");
        }
    }

    #[test]
    fn edge_cases() {
        let h = [0u8; 32];
        assert!(assign(5, &h, 0, 0).unwrap().selected.is_empty(), "no slots, nothing selected");
        assert_eq!(assign(5, &h, 3, 0), Err(SelectionError::NoPools));
        assert_eq!(assign(5, &h, 1 << 32, 1), Err(SelectionError::TooManySlots(1 << 32)));
        assert_eq!(assign(5, &h, 1, 1).unwrap().selected, vec![(1, 0)]);
        assert_eq!(slot_assignment(5, &h, 3, 1, 4).unwrap(), None, "a slot above the total is never selected");
    }
}
