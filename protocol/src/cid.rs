//! Content identifiers of snapshot bytes (docs/protocol.md §4): CIDv1, codec
//! `raw`, multihash sha2-256, base32 lower case (`bafkrei…`).

use cid::{Cid, multihash::Multihash};
use sha2::{Digest, Sha256};

/// CIDv1 codec `raw`.
const RAW: u64 = 0x55;
/// Multihash code of sha2-256.
const SHA2_256: u64 = 0x12;

/// The CID of snapshot bytes.
pub fn cid(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let hash = Multihash::<64>::wrap(SHA2_256, &digest).expect("a 32-byte digest fits");
    Cid::new_v1(RAW, hash).to_string()
}
