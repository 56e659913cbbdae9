//! A consumer's bundle (issue 54): one project's snapshot at one epoch as a
//! server of the market answers it — the bytes, the CID, the Merkle proof
//! and the root — checked here for everything but the chain, by every
//! reader alike (`lite-node read`, the devnet's read-back):
//!
//! 1. it is about what was asked (this market, epoch and project);
//! 2. the bytes hash to the CID (sha256, CIDv1 raw: the bytes are the block);
//! 3. the bytes are the canonical JSON of docs/protocol.md §4;
//! 4. the Merkle proof takes (project, CID) to the root.
//!
//! The root itself is the chain's to confirm (`epochBatch`): the reader's.

use alloy::primitives::{Address, B256};
use serde_json::Value;

/// What a reader asked for.
#[derive(Clone, Copy, Debug)]
pub struct Asked<'a> {
    pub epoch_id: u64,
    pub project_id: &'a str,
    pub protocol_state: Address,
    pub data_market: Address,
}

/// A bundle whose checks 1–4 hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The snapshot: its bytes, as text.
    pub snapshot: String,
    pub cid: String,
    /// The root the proof reaches: the chain must hold it for the epoch.
    pub root: B256,
    pub proof_len: usize,
}

/// The first check a bundle failed, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failed {
    /// `what was asked`, `bytes hash to the CID`, `canonical JSON`, `Merkle proof`.
    pub check: &'static str,
    pub why: String,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "check `{}` failed: {}", self.check, self.why)
    }
}

impl std::error::Error for Failed {}

fn failed(check: &'static str, why: String) -> Failed {
    Failed { check, why }
}

/// Checks 1–4 (module docs) of `bundle` against what was `asked`.
pub fn check(bundle: &Value, asked: &Asked<'_>) -> Result<Checked, Failed> {
    let text = |field: &str| bundle[field].as_str().unwrap_or_default();
    let same_address = |field: &str, want: Address| text(field).parse::<Address>().is_ok_and(|a| a == want);
    if bundle["epochId"].as_u64() != Some(asked.epoch_id)
        || text("projectId") != asked.project_id
        || !same_address("protocolState", asked.protocol_state)
        || !same_address("dataMarket", asked.data_market)
    {
        let why = format!(
            "the bundle is epoch {} of `{}` in market {} on ProtocolState {}",
            bundle["epochId"],
            text("projectId"),
            text("dataMarket"),
            text("protocolState")
        );
        return Err(failed("what was asked", why));
    }
    let snapshot = bundle["snapshot"]
        .as_str()
        .ok_or_else(|| failed("bytes hash to the CID", "the bundle carries no snapshot".into()))?;
    let cid = text("cid");
    let hashed = crate::cid::cid(snapshot.as_bytes());
    if hashed != cid {
        return Err(failed("bytes hash to the CID", format!("the snapshot hashes to {hashed}, the bundle says {cid}")));
    }
    match crate::canonical_json(snapshot) {
        Ok(canonical) if canonical == snapshot.as_bytes() => {}
        Ok(_) => return Err(failed("canonical JSON", "the snapshot is JSON, not in its canonical form".into())),
        Err(e) => return Err(failed("canonical JSON", format!("the snapshot is not JSON ({e})"))),
    }
    let root: B256 = text("root")
        .parse()
        .map_err(|_| failed("Merkle proof", format!("root `{}` is not a 32-byte hash", text("root"))))?;
    let proof: Vec<B256> = bundle["proof"]
        .as_array()
        .and_then(|p| p.iter().map(|h| h.as_str().and_then(|h| h.parse().ok())).collect::<Option<Vec<B256>>>())
        .ok_or_else(|| failed("Merkle proof", "the proof is not a list of 32-byte hashes".into()))?;
    if !crate::merkle::verify(root, asked.project_id, cid, &proof) {
        let why = format!("the proof does not take ({}, {cid}) to root {root}", asked.project_id);
        return Err(failed("Merkle proof", why));
    }
    Ok(Checked { snapshot: snapshot.to_owned(), cid: cid.to_owned(), root, proof_len: proof.len() })
}
