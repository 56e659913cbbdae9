//! Which slots a node runs: `SLOT_ID` (one slot) or `SLOT_IDS` (a list with
//! ranges, `1-20,35`). Every slot signs with `SIGNER_ACCOUNT_ADDRESS` /
//! `SIGNER_ACCOUNT_PRIVATE_KEY` unless `SLOT_SIGNERS_FILE` gives it a signer
//! of its own. Keys are never printed: errors name the file and line.

use std::{collections::BTreeMap, path::Path};

use alloy::{primitives::Address, signers::local::PrivateKeySigner};

use crate::SecretKey;

/// More slots than this in one node is a typo, not a plan.
pub const MAX_SLOTS: usize = 10_000;

/// `SLOT_IDS`: slot ids and inclusive ranges separated by commas, in
/// ascending order as returned; a slot listed twice, a zero, a reversed
/// range or more than [`MAX_SLOTS`] slots is an error naming it.
pub fn parse_slot_ids(text: &str) -> Result<Vec<u64>, String> {
    if text.trim().is_empty() || text.split(',').all(|i| i.trim().is_empty()) {
        return Err("no slot listed".to_owned());
    }
    let mut slots = std::collections::BTreeSet::new();
    let items: Vec<&str> = text.split(',').map(str::trim).collect();
    for (at, &item) in items.iter().enumerate() {
        if item.is_empty() {
            let where_ = match at {
                0 => "a leading comma",
                _ if at + 1 == items.len() => "a trailing comma",
                _ => "an empty item between commas",
            };
            return Err(format!("`{}` has {where_}", text.trim()));
        }
        // Each side of a range, named with the item it is in.
        let number = |s: &str, side: &str| -> Result<u64, String> {
            let s = s.trim();
            // Digits only (Rust's parser would take a sign, `+3`); too many
            // of them overflow, and that is not a slot id either.
            let n = s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse::<u64>().ok()).flatten();
            match n {
                Some(0) => Err(format!("`{item}`: slot 0: slots are numbered from 1")),
                Some(n) => Ok(n),
                None if s.is_empty() => Err(format!("`{item}` is a range without its {side} slot")),
                None if side.is_empty() => Err(format!("`{item}` is not a slot id")),
                None => Err(format!("`{item}` is not a slot id or a range of them (like `1-20`)")),
            }
        };
        let (first, last) = match item.split_once('-') {
            Some((a, b)) => (number(a, "first")?, number(b, "last")?),
            None => {
                let n = number(item, "")?;
                (n, n)
            }
        };
        if last < first {
            return Err(format!("`{item}` is a range that ends before it begins"));
        }
        if (last - first) as usize >= MAX_SLOTS || slots.len() + (last - first + 1) as usize > MAX_SLOTS {
            return Err(format!("more than {MAX_SLOTS} slots (`{item}`): one node runs at most {MAX_SLOTS}"));
        }
        for s in first..=last {
            if !slots.insert(s) {
                return Err(format!("slot {s} is listed twice"));
            }
        }
    }
    if slots.is_empty() {
        return Err("no slot listed".to_owned());
    }
    Ok(slots.into_iter().collect())
}

/// Slot ids as `SLOT_IDS` takes them, runs of consecutive ids as ranges
/// (`1-10, 35`); `slots` ascending.
pub fn format_slot_ids(slots: &[u64]) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &s in slots {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == s => *last = s,
            _ => runs.push((s, s)),
        }
    }
    runs.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect::<Vec<_>>().join(", ")
}

/// A slot's own signer from `SLOT_SIGNERS_FILE`.
#[derive(Clone, Debug)]
pub struct SlotSigner {
    pub address: Address,
    pub key: SecretKey,
}

/// Reads `SLOT_SIGNERS_FILE`: one slot (or range) per line with its signer's
/// address and private key, separated by spaces or commas; `#` starts a
/// comment. Every key must belong to its address. Only slots in `slots` may
/// be named.
pub fn read_signers_file(path: &Path, slots: &[u64]) -> Result<BTreeMap<u64, SlotSigner>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("SLOT_SIGNERS_FILE {}: cannot be read ({e})", path.display()))?;
    parse_signers(&text, slots).map_err(|e| format!("SLOT_SIGNERS_FILE {}: {e}", path.display()))
}

fn parse_signers(text: &str, slots: &[u64]) -> Result<BTreeMap<u64, SlotSigner>, String> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let at = format!("line {}", n + 1);
        let fields: Vec<&str> = line.split([' ', '\t', ',']).filter(|f| !f.is_empty()).collect();
        let [ids, address, key] = fields.as_slice() else {
            return Err(format!("{at}: expected `SLOT ADDRESS PRIVATE_KEY` (SLOT may be a range, e.g. 1-20)"));
        };
        let ids = parse_slot_ids(ids).map_err(|e| format!("{at}: {e}"))?;
        let address: Address = address.parse().map_err(|_| format!("{at}: the address is not 0x and 40 hex digits"))?;
        let hex = key.strip_prefix("0x").unwrap_or(key);
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex, &mut bytes)
            .map_err(|_| format!("{at}: the private key is not 32 bytes of hex (the key is not shown)"))?;
        let derived = PrivateKeySigner::from_slice(&bytes)
            .map_err(|_| format!("{at}: the private key is not a valid secp256k1 key (the key is not shown)"))?;
        if derived.address() != address {
            return Err(format!("{at}: the private key belongs to {}, not to {address}", derived.address()));
        }
        for id in ids {
            if slots.binary_search(&id).is_err() {
                return Err(format!("{at}: slot {id} is not in SLOT_IDS"));
            }
            let signer = SlotSigner { address, key: SecretKey::from_bytes(bytes) };
            if out.insert(id, signer).is_some() {
                return Err(format!("{at}: slot {id} already has a signer"));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_lists_are_written_back_with_ranges() {
        assert_eq!(format_slot_ids(&[1, 2, 3, 5, 7, 8]), "1-3, 5, 7-8");
        assert_eq!(format_slot_ids(&[4]), "4");
        assert_eq!(parse_slot_ids(&format_slot_ids(&[1, 2, 3, 9])).unwrap(), [1, 2, 3, 9]);
    }

    #[test]
    fn slot_lists_take_ranges_and_name_what_is_wrong() {
        assert_eq!(parse_slot_ids("1-3, 35,7").unwrap(), [1, 2, 3, 7, 35]);
        assert_eq!(parse_slot_ids("5").unwrap(), [5]);
        let err = |t: &str| parse_slot_ids(t).unwrap_err();
        assert!(err("1-3,2").contains("slot 2 is listed twice"));
        assert!(err("0").contains("slot 0"));
        assert!(err("9-3").contains("`9-3` is a range that ends before it begins"));
        assert!(err("a").contains("`a` is not a slot id"));
        assert!(err("1-20000").contains("more than 10000 slots"));
        assert!(err(" , ").contains("no slot listed"));
        assert_eq!(err("-3"), "`-3` is a range without its first slot");
        assert_eq!(err("3-"), "`3-` is a range without its last slot");
        assert_eq!(err("1,,2"), "`1,,2` has an empty item between commas");
        assert_eq!(err("1,2,"), "`1,2,` has a trailing comma");
        assert_eq!(err(",1"), "`,1` has a leading comma");
        assert_eq!(err("+3"), "`+3` is not a slot id");
        assert_eq!(err("1-+5"), "`1-+5` is not a slot id or a range of them (like `1-20`)");
        assert_eq!(err("99999999999999999999"), "`99999999999999999999` is not a slot id");
        assert_eq!(err("1-2-3"), "`1-2-3` is not a slot id or a range of them (like `1-20`)");
        assert_eq!(err("4,0"), "`0`: slot 0: slots are numbered from 1");
    }

    #[test]
    fn a_signers_file_binds_keys_to_addresses_and_never_shows_a_key() {
        let key = "11".repeat(32);
        let address = PrivateKeySigner::from_slice(&[0x11; 32]).unwrap().address().to_string();
        let (key, address) = (key.as_str(), address.as_str());
        let slots = [1, 2, 3, 4, 9];
        let signers = parse_signers(&format!("# ours\n1-2 {address} 0x{key}\n9,{address},{key}\n"), &slots).unwrap();
        assert_eq!(signers.keys().copied().collect::<Vec<_>>(), [1, 2, 9]);
        assert_eq!(signers[&9].address, address.parse::<Address>().unwrap());
        let other = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
        let err = parse_signers(&format!("3 {other} {key}"), &slots).unwrap_err();
        assert!(err.contains(&format!("line 1: the private key belongs to {address}")), "{err}");
        assert!(!err.contains(key), "{err}");
        let err = parse_signers(&format!("5 {address} {key}"), &slots).unwrap_err();
        assert!(err.contains("slot 5 is not in SLOT_IDS"), "{err}");
        let err = parse_signers(&format!("1 {address} 0x1234"), &slots).unwrap_err();
        assert!(err.contains("not 32 bytes of hex") && !err.contains("1234"), "{err}");
        let err = parse_signers(&format!("1 {address} {key}\n1 {address} {key}"), &slots).unwrap_err();
        assert!(err.contains("line 2: slot 1 already has a signer"), "{err}");
    }
}
