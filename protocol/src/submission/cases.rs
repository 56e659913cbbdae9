//! The table of submission cases every side that judges submissions runs:
//! one good submission and one for each reason [`judge`](super::judge) can
//! give, each with the reason it must get. The protocol's own test runs it
//! against a table of facts; the devnet collector's test runs it over gRPC
//! against anvil, the validator's through its gateway and dequeuer on a real
//! Redis — so a rule that drifts on one side fails there by name.

use super::{Reason, Scope, WINDOW_BLOCKS};
use crate::{
    eip712::{Request, Signer},
    proto::SnapshotSubmission,
};

/// What a side's test provides: an epoch whose window is open, slots in
/// each standing the rules tell apart, and their keys.
#[derive(Clone, Debug)]
pub struct Setting {
    pub scope: Scope,
    pub chain_id: u64,
    /// Released in `release_block`, window open; the anchor head is `head`
    /// (at or after the release, well before `release_block + WINDOW_BLOCKS`).
    pub epoch_id: u64,
    pub release_block: u64,
    pub head: u64,
    /// An epoch never released here.
    pub unknown_epoch_id: u64,
    /// A registered slot, its signer's key, and a project it was selected
    /// for in `epoch_id`.
    pub slot_id: u64,
    pub key: [u8; 32],
    pub project_id: String,
    /// A project of the same type naming a pool the slot was not assigned.
    pub other_pool_project_id: String,
    /// A registered slot (and its key) not selected in `epoch_id`.
    pub unselected_slot_id: u64,
    pub unselected_key: [u8; 32],
    /// A slot no signer is registered for.
    pub unregistered_slot_id: u64,
}

/// One case: a submission made from the setting, and what it must get.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub name: &'static str,
    /// `None`: accepted.
    pub expect: Option<Reason>,
    make: fn(&Setting) -> SnapshotSubmission,
}

impl Case {
    /// The submission, signed as the case says.
    pub fn submission(&self, setting: &Setting) -> SnapshotSubmission {
        (self.make)(setting)
    }
}

/// The good submission: the selected slot, its project, signed by its key,
/// with a deadline a node would sign (the head plus 30).
fn good(s: &Setting) -> Draft {
    Draft {
        request: Request {
            slot_id: s.slot_id,
            deadline: s.head + 30,
            snapshot_cid: crate::cid(b"{}"),
            epoch_id: s.epoch_id,
            project_id: s.project_id.clone(),
        },
        key: s.key,
        data_market: s.scope.data_market.to_string(),
    }
}

/// A submission before it is signed.
struct Draft {
    request: Request,
    key: [u8; 32],
    data_market: String,
}

impl Draft {
    fn signed(self, s: &Setting) -> SnapshotSubmission {
        let signer = Signer::new(&self.key, s.chain_id, s.scope.protocol_state).expect("a valid test key");
        SnapshotSubmission {
            signature: signer.sign(&self.request).expect("signing a request"),
            request: Some((&self.request).into()),
            header: String::new(),
            data_market: self.data_market,
            node_version: Some("cases".into()),
            protocol_state: s.scope.protocol_state.to_string(),
            snapshot: None,
        }
    }
}

/// `s` carrying `bytes` as its snapshot (not signed: the CID commits to it).
fn carrying(mut s: SnapshotSubmission, bytes: &[u8]) -> SnapshotSubmission {
    s.snapshot = Some(bytes.to_vec());
    s
}

/// The other signature of the same message and key: `s` replaced by
/// `n - s` and `v` flipped. libsecp256k1 recovers it to the same signer;
/// Ethereum (EIP-2) and the rules refuse it.
fn malleated(signature: &str) -> String {
    use alloy::primitives::U256;
    const ORDER: U256 =
        alloy::primitives::uint!(0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141_U256);
    let mut raw = hex::decode(signature).expect("a signature this table made");
    let n = ORDER;
    let high = n - U256::from_be_slice(&raw[32..64]);
    raw[32..64].copy_from_slice(&high.to_be_bytes::<32>());
    raw[64] = if raw[64] == 27 { 28 } else { 27 };
    hex::encode(raw)
}

/// Every case, in the order the rules apply. Duplicate and equivocation
/// need an earlier vote and are the validator's own (its pipeline test).
pub fn cases() -> Vec<Case> {
    vec![
        Case { name: "a good submission", expect: None, make: |s| good(s).signed(s) },
        Case {
            name: "a CID that is not one",
            expect: Some(Reason::BadForm),
            make: |s| {
                let mut d = good(s);
                d.request.snapshot_cid = "Qm-not-a-cid".into();
                d.signed(s)
            },
        },
        // One spelling per content: another would be a different string for
        // the same snapshot, and would split the votes for it.
        Case {
            name: "a CID with a path before it",
            expect: Some(Reason::BadForm),
            make: |s| {
                let mut d = good(s);
                d.request.snapshot_cid = format!("!/ipfs/{}", d.request.snapshot_cid);
                d.signed(s)
            },
        },
        Case {
            name: "a CID in base32 upper case",
            expect: Some(Reason::BadForm),
            make: |s| {
                let mut d = good(s);
                d.request.snapshot_cid = d.request.snapshot_cid.to_uppercase();
                d.signed(s)
            },
        },
        Case {
            name: "a project id of four parts",
            expect: Some(Reason::BadForm),
            make: |s| {
                let mut d = good(s);
                d.request.project_id = format!("{}:extra", s.project_id);
                d.signed(s)
            },
        },
        Case {
            name: "another data market",
            expect: Some(Reason::BadForm),
            make: |s| {
                let mut d = good(s);
                d.data_market = "0x00000000000000000000000000000000000000d9".into();
                d.signed(s)
            },
        },
        Case {
            name: "a signature that recovers to no one",
            expect: Some(Reason::BadSignature),
            make: |s| {
                let mut m = good(s).signed(s);
                m.signature = "00".repeat(65);
                m
            },
        },
        Case {
            name: "the malleated twin of a good signature (high s)",
            expect: Some(Reason::BadSignature),
            make: |s| {
                let mut m = good(s).signed(s);
                m.signature = malleated(&m.signature);
                m
            },
        },
        // The snapshot's bytes, when carried: checked against the CID and
        // the canonical form, and the market's size (the default here).
        Case {
            name: "a snapshot that does not hash to the signed CID",
            expect: Some(Reason::BytesDoNotMatchCid),
            make: |s| carrying(good(s).signed(s), b"[]"),
        },
        Case {
            name: "a snapshot that is JSON, not in its canonical form",
            expect: Some(Reason::NotCanonicalJson),
            make: |s| {
                let mut d = good(s);
                d.request.snapshot_cid = crate::cid(b"{ }");
                carrying(d.signed(s), b"{ }")
            },
        },
        Case {
            name: "a snapshot larger than the market takes",
            expect: Some(Reason::TooLarge),
            make: |s| {
                let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(crate::submission::caps::SNAPSHOT));
                let mut d = good(s);
                d.request.snapshot_cid = crate::cid(big.as_bytes());
                carrying(d.signed(s), big.as_bytes())
            },
        },
        Case {
            name: "a slot nobody registered",
            expect: Some(Reason::UnregisteredSlot),
            make: |s| {
                let mut d = good(s);
                d.request.slot_id = s.unregistered_slot_id;
                d.signed(s)
            },
        },
        Case {
            name: "a registered slot signed with another key",
            expect: Some(Reason::WrongSigner),
            make: |s| {
                let mut d = good(s);
                d.key = s.unselected_key;
                d.signed(s)
            },
        },
        Case {
            name: "an epoch never released",
            expect: Some(Reason::UnknownEpoch),
            make: |s| {
                let mut d = good(s);
                d.request.epoch_id = s.unknown_epoch_id;
                // Beyond any release a validator may not have seen yet.
                d.request.deadline = s.head + WINDOW_BLOCKS + 1;
                d.signed(s)
            },
        },
        Case {
            name: "a deadline further from the release than a node signs",
            expect: Some(Reason::DeadlineTooFar),
            make: |s| {
                let mut d = good(s);
                d.request.deadline = s.release_block + WINDOW_BLOCKS + 1;
                d.signed(s)
            },
        },
        Case {
            name: "a deadline the head has passed",
            expect: Some(Reason::DeadlinePassed),
            make: |s| {
                let mut d = good(s);
                d.request.deadline = s.head - 1;
                d.signed(s)
            },
        },
        Case {
            name: "a registered slot not selected",
            expect: Some(Reason::NotSelected),
            make: |s| {
                let mut d = good(s);
                d.request.slot_id = s.unselected_slot_id;
                d.key = s.unselected_key;
                d.signed(s)
            },
        },
        Case {
            name: "a selected slot naming another pool",
            expect: Some(Reason::WrongPool),
            make: |s| {
                let mut d = good(s);
                d.request.project_id = s.other_pool_project_id.clone();
                d.signed(s)
            },
        },
        Case {
            name: "a project type the data market does not define",
            expect: Some(Reason::UnknownProject),
            make: |s| {
                let mut d = good(s);
                let (_, rest) = s.project_id.split_once(':').expect("a project id has a type");
                d.request.project_id = format!("spam:{rest}");
                d.signed(s)
            },
        },
        Case {
            name: "a project in another namespace",
            expect: Some(Reason::UnknownProject),
            make: |s| {
                let mut d = good(s);
                let (rest, _) = s.project_id.rsplit_once(':').expect("a project id has a namespace");
                d.request.project_id = format!("{rest}:elsewhere-UNISWAPV3-ETH");
                d.signed(s)
            },
        },
    ]
}
