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

/// `text` is a snapshot CID as every honest node spells it — CIDv1, codec
/// `raw`, sha2-256 of 32 bytes, base32 lower case, nothing before or after —
/// else why not. One spelling per content: another (a CIDv0, another
/// multibase, a path prefix, trailing bytes) would be a different string for
/// the same snapshot, and would split the votes for it.
pub fn check_canonical(text: &str) -> Result<(), String> {
    let parsed = Cid::try_from(text).map_err(|_| "not a CID".to_owned())?;
    if parsed.version() != cid::Version::V1 {
        return Err("a CIDv0: snapshots are CIDv1 (`bafkrei…`)".into());
    }
    if parsed.codec() != RAW || parsed.hash().code() != SHA2_256 || parsed.hash().size() != 32 {
        return Err("not codec raw over sha2-256 (`bafkrei…`)".into());
    }
    if parsed.to_string() != text {
        return Err(format!("not in its one spelling (`{parsed}`: base32 lower case, nothing around it)"));
    }
    Ok(())
}

#[cfg(test)]
mod canonical {
    use super::*;

    #[test]
    fn only_the_one_spelling_of_a_raw_sha256_cidv1_passes() {
        let good = cid(b"{}");
        assert_eq!(check_canonical(&good), Ok(()));
        let parsed = Cid::try_from(good.as_str()).unwrap();
        let v0 = Cid::new_v0(*parsed.hash()).unwrap().to_string();
        let upper = good.to_uppercase();
        let base58 = parsed.to_string_of_base(cid::multibase::Base::Base58Btc).unwrap();
        let dag_pb = Cid::new_v1(0x70, *parsed.hash()).to_string();
        for bad in [
            format!("!/ipfs/{good}"),
            format!("/ipfs/{good}"),
            v0,
            upper,
            base58,
            dag_pb,
            format!("{good} "),
            "Qm-not-a-cid".to_owned(),
        ] {
            assert!(check_canonical(&bad).is_err(), "{bad} passed");
        }
    }
}
