//! EIP-712 signatures of snapshot submissions (docs/protocol.md §5): domain
//! `PowerloomProtocolContract` / `0.1` / anchor chain id / ProtocolState, struct
//! `EIPRequest{slotId, deadline, snapshotCid, epochId, projectId}`; signatures
//! are 65 bytes `r || s || v` with `v` in {27, 28}, hex without `0x`.

use alloy::{
    primitives::{Address, B256, U256},
    signers::local::PrivateKeySigner,
    sol_types::{Eip712Domain, SolStruct, eip712_domain},
};

alloy::sol! {
    /// The signed part of a submission.
    #[derive(Debug, PartialEq, Eq)]
    struct EIPRequest {
        uint256 slotId;
        uint256 deadline;
        string snapshotCid;
        uint256 epochId;
        string projectId;
    }
}

/// What one submission signs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub slot_id: u64,
    pub deadline: u64,
    pub snapshot_cid: String,
    pub epoch_id: u64,
    pub project_id: String,
}

/// The signed part of a submission as it travels (§6).
impl From<&crate::proto::Request> for Request {
    fn from(r: &crate::proto::Request) -> Self {
        Self {
            slot_id: r.slot_id,
            deadline: r.deadline,
            snapshot_cid: r.snapshot_cid.clone(),
            epoch_id: r.epoch_id,
            project_id: r.project_id.clone(),
        }
    }
}

impl From<&Request> for crate::proto::Request {
    fn from(r: &Request) -> Self {
        Self {
            slot_id: r.slot_id,
            deadline: r.deadline,
            snapshot_cid: r.snapshot_cid.clone(),
            epoch_id: r.epoch_id,
            project_id: r.project_id.clone(),
        }
    }
}

impl Request {
    fn typed(&self) -> EIPRequest {
        EIPRequest {
            slotId: U256::from(self.slot_id),
            deadline: U256::from(self.deadline),
            snapshotCid: self.snapshot_cid.clone(),
            epochId: U256::from(self.epoch_id),
            projectId: self.project_id.clone(),
        }
    }
}

/// The protocol's EIP-712 domain on one anchor chain.
pub fn domain(chain_id: u64, protocol_state: Address) -> Eip712Domain {
    eip712_domain! {
        name: "PowerloomProtocolContract",
        version: "0.1",
        chain_id: chain_id,
        verifying_contract: protocol_state,
    }
}

/// The EIP-712 digest a submission's signature covers.
pub fn digest(domain: &Eip712Domain, request: &Request) -> B256 {
    request.typed().eip712_signing_hash(domain)
}

/// Signs submissions with the node's key. Never prints the key.
///
/// Signing runs in libsecp256k1 (RFC 6979 nonces, low `s`: byte for byte
/// the signature alloy's k256 signer makes, several times faster — a node of
/// a thousand slots signs a thousand submissions an epoch).
pub struct Signer {
    key: secp256k1::SecretKey,
    address: Address,
    domain: Eip712Domain,
}

impl Drop for Signer {
    fn drop(&mut self) {
        // The secret does not outlive the signer in freed memory.
        self.key.non_secure_erase();
    }
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("address", &self.address).finish_non_exhaustive()
    }
}

static SIGNING: std::sync::LazyLock<secp256k1::Secp256k1<secp256k1::SignOnly>> =
    std::sync::LazyLock::new(secp256k1::Secp256k1::signing_only);

impl Signer {
    /// A signer for one anchor chain and ProtocolState; `key` is the raw
    /// secp256k1 secret (the caller keeps it out of logs).
    pub fn new(key: &[u8; 32], chain_id: u64, protocol_state: Address) -> Result<Self, String> {
        let invalid = || "the signer key is not a valid secp256k1 key (zero, or not below the curve order)".to_owned();
        let address = PrivateKeySigner::from_slice(key).map_err(|_| invalid())?.address();
        let key = secp256k1::SecretKey::from_byte_array(key).map_err(|_| invalid())?;
        Ok(Self { key, address, domain: domain(chain_id, protocol_state) })
    }

    pub fn address(&self) -> Address {
        self.address
    }

    /// `r || s || v` (v = 27 or 28) as hex without `0x`.
    pub fn sign(&self, request: &Request) -> Result<String, String> {
        let message = secp256k1::Message::from_digest(digest(&self.domain, request).0);
        let (recid, compact) = SIGNING.sign_ecdsa_recoverable(&message, &self.key).serialize_compact();
        let mut bytes = [0u8; 65];
        bytes[..64].copy_from_slice(&compact);
        bytes[64] = 27 + u8::from(recid != secp256k1::ecdsa::RecoveryId::Zero);
        Ok(hex::encode(bytes))
    }
}

/// Half the order of secp256k1, big-endian: a signature's `s` above it is
/// the other form of a signature with `n - s` (EIP-2), which Ethereum does
/// not accept, so one signed message has one signature.
const HALF_ORDER: [u8; 32] = [
    0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x5d, 0x57, 0x6e,
    0x73, 0x57, 0xa4, 0x50, 0x1d, 0xdf, 0xe9, 0x2f, 0x46, 0x68, 0x1b, 0x20, 0xa0,
];

/// A signature's 65 bytes `r || s || v` with `v` as 27 or 28, from hex
/// (with or without `0x`, `v` as 27/28 or 0/1); high-s is refused.
fn signature_bytes(signature: &str) -> Result<[u8; 65], String> {
    let text = signature.strip_prefix("0x").unwrap_or(signature);
    if text.len() != 130 {
        return Err(format!("signature is {} hex digits, expected 130 (65 bytes)", text.len()));
    }
    let raw = hex::decode(text).map_err(|_| "signature is not hex".to_owned())?;
    let mut bytes = [0u8; 65];
    bytes.copy_from_slice(&raw);
    bytes[64] = match bytes[64] {
        27 | 0 => 27,
        28 | 1 => 28,
        v => return Err(format!("signature v is {v}, expected 27 or 28")),
    };
    if bytes[32..64] > HALF_ORDER[..] {
        return Err("signature s is in the upper half of the curve order (a malleated signature)".into());
    }
    Ok(bytes)
}

/// The one form of a signature: lower-case hex without `0x`, `v` as 27 or
/// 28. What a validator stores and relays, so one signed message is one
/// submission however it was spelled. `Err`: not a signature (high-s
/// included).
pub fn canonical_signature(signature: &str) -> Result<String, String> {
    signature_bytes(signature).map(hex::encode)
}

/// The address that signed `request` under `domain`, from a hex signature
/// (with or without `0x`, `v` as 27/28 or 0/1; high-s refused). Recovery
/// runs in libsecp256k1: it is what bounds a validator's throughput.
pub fn recover(domain: &Eip712Domain, request: &Request, signature: &str) -> Result<Address, String> {
    use secp256k1::{
        Message, Secp256k1, VerifyOnly,
        ecdsa::{RecoverableSignature, RecoveryId},
    };
    static SECP: std::sync::LazyLock<Secp256k1<VerifyOnly>> = std::sync::LazyLock::new(Secp256k1::verification_only);
    let raw = signature_bytes(signature)?;
    let recid = if raw[64] == 27 { RecoveryId::Zero } else { RecoveryId::One };
    let sig =
        RecoverableSignature::from_compact(&raw[..64], recid).map_err(|e| format!("cannot recover the signer: {e}"))?;
    let message = Message::from_digest(digest(domain, request).0);
    let key = SECP.recover_ecdsa(&message, &sig).map_err(|e| format!("cannot recover the signer: {e}"))?;
    Ok(Address::from_raw_public_key(&key.serialize_uncompressed()[1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector() -> serde_json::Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/conformance/eip712_submission_vector.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn request_of(v: &serde_json::Value) -> (Eip712Domain, Request) {
        let d = &v["domain"];
        let m = &v["message"];
        let domain = domain(d["chainId"].as_u64().unwrap(), d["verifyingContract"].as_str().unwrap().parse().unwrap());
        let request = Request {
            slot_id: m["slotId"].as_u64().unwrap(),
            deadline: m["deadline"].as_u64().unwrap(),
            snapshot_cid: m["snapshotCid"].as_str().unwrap().into(),
            epoch_id: m["epochId"].as_u64().unwrap(),
            project_id: m["projectId"].as_str().unwrap().into(),
        };
        (domain, request)
    }

    #[test]
    fn the_network_vector_digest_and_signer_match() {
        let v = vector();
        let (domain, request) = request_of(&v);
        assert_eq!(digest(&domain, &request).to_string(), v["digest"].as_str().unwrap());
        let signer = recover(&domain, &request, v["signature"].as_str().unwrap()).unwrap();
        assert_eq!(signer, v["expected_signer"].as_str().unwrap().parse::<Address>().unwrap());
    }

    #[test]
    fn our_signatures_recover_to_our_address_and_tampering_does_not() {
        let v = vector();
        let (_, mut request) = request_of(&v);
        let ps: Address = "0x5FbDB2315678afecb367f032d93F642f64180aa3".parse().unwrap();
        let signer = Signer::new(&[7u8; 32], 31337, ps).unwrap();
        let sig = signer.sign(&request).unwrap();
        assert_eq!(sig.len(), 130);
        assert!(sig.ends_with("1b") || sig.ends_with("1c"), "v is 27 or 28: {sig}");
        let domain = domain(31337, ps);
        assert_eq!(recover(&domain, &request, &sig).unwrap(), signer.address());
        request.deadline += 1;
        assert_ne!(recover(&domain, &request, &sig).unwrap(), signer.address());
        assert!(!format!("{signer:?}").contains("0707"), "the key never prints");
    }

    /// libsecp256k1's signature is, byte for byte, the one alloy's k256
    /// signer makes (RFC 6979 nonce, low `s`) for any key and message.
    #[test]
    fn signatures_are_alloys_byte_for_byte() {
        use alloy::signers::SignerSync;
        let v = vector();
        let (_, mut request) = request_of(&v);
        let ps: Address = "0x5FbDB2315678afecb367f032d93F642f64180aa3".parse().unwrap();
        for n in 1..=40u8 {
            let key = alloy::primitives::keccak256([n]).0;
            request.slot_id = u64::from(n);
            let ours = Signer::new(&key, 31337, ps).unwrap();
            let theirs = PrivateKeySigner::from_slice(&key).unwrap();
            let sig = theirs.sign_hash_sync(&digest(&domain(31337, ps), &request)).unwrap();
            let mut bytes = [0u8; 65];
            bytes[..32].copy_from_slice(&sig.r().to_be_bytes::<32>());
            bytes[32..64].copy_from_slice(&sig.s().to_be_bytes::<32>());
            bytes[64] = 27 + u8::from(sig.v());
            assert_eq!(ours.sign(&request).unwrap(), hex::encode(bytes), "key {n}");
            assert_eq!(ours.address(), theirs.address());
        }
    }

    /// `n - s` for a 32-byte big-endian `s` below the order `n`.
    fn negate(s: &[u8]) -> [u8; 32] {
        const N: [u8; 32] = [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0xba, 0xae,
            0xdc, 0xe6, 0xaf, 0x48, 0xa0, 0x3b, 0xbf, 0xd2, 0x5e, 0x8c, 0xd0, 0x36, 0x41, 0x41,
        ];
        let mut out = [0u8; 32];
        let mut borrow = 0i16;
        for i in (0..32).rev() {
            let d = N[i] as i16 - s[i] as i16 - borrow;
            (out[i], borrow) = if d < 0 { ((d + 256) as u8, 1) } else { (d as u8, 0) };
        }
        out
    }

    #[test]
    fn one_signed_message_has_one_signature_form() {
        let v = vector();
        let (_, request) = request_of(&v);
        let ps: Address = "0x5FbDB2315678afecb367f032d93F642f64180aa3".parse().unwrap();
        let signer = Signer::new(&[7u8; 32], 31337, ps).unwrap();
        let domain = domain(31337, ps);
        let sig = signer.sign(&request).unwrap();
        // v as 0/1, upper case, with 0x: the same signature, one form.
        let mut raw = hex::decode(&sig).unwrap();
        raw[64] -= 27;
        let respelled = format!("0x{}", hex::encode_upper(&raw));
        assert_eq!(recover(&domain, &request, &respelled).unwrap(), signer.address());
        assert_eq!(canonical_signature(&respelled).unwrap(), sig);
        // The malleated twin (n - s, v flipped) recovers to the same key in
        // libsecp256k1, and is refused.
        let mut twin = hex::decode(&sig).unwrap();
        let high = negate(&twin[32..64]);
        twin[32..64].copy_from_slice(&high);
        twin[64] = if twin[64] == 27 { 28 } else { 27 };
        let twin = hex::encode(twin);
        let err = recover(&domain, &request, &twin).unwrap_err();
        assert!(err.contains("upper half"), "{err}");
        assert!(canonical_signature(&twin).is_err());
        assert!(canonical_signature(&"ab".repeat(64)).unwrap_err().contains("128 hex digits, expected 130"));
    }
}
