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

use std::borrow::Cow;

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

/// Whether `answer` is about `asked`'s market and epoch: its `epochId`,
/// `protocolState` and `dataMarket`.
fn same_market(answer: &Value, asked: &Asked<'_>) -> bool {
    let text = |field: &str| answer[field].as_str().unwrap_or_default();
    same_market_of(answer["epochId"].as_u64(), text("protocolState"), text("dataMarket"), asked)
}

fn same_market_of(epoch_id: Option<u64>, protocol_state: &str, data_market: &str, asked: &Asked<'_>) -> bool {
    let address = |given: &str, want: Address| given.parse::<Address>().ok() == Some(want);
    epoch_id == Some(asked.epoch_id)
        && address(protocol_state, asked.protocol_state)
        && address(data_market, asked.data_market)
}

/// A bundle's fields as an answer carries them, read in one pass with no
/// tree of values built, and borrowed from the answer where they hold no
/// escape. Read so only when the answer is an object whose every field
/// present has the type a bundle gives it (and none is given twice); any
/// other answer is read as a [`Value`], so both readings check alike
/// ([`check_slice`]).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    epoch_id: Option<u64>,
    #[serde(borrow)]
    project_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    protocol_state: Option<Cow<'a, str>>,
    #[serde(borrow)]
    data_market: Option<Cow<'a, str>>,
    #[serde(borrow)]
    snapshot: Option<Cow<'a, str>>,
    #[serde(borrow)]
    cid: Option<Cow<'a, str>>,
    #[serde(borrow)]
    root: Option<Cow<'a, str>>,
    #[serde(borrow)]
    proof: Option<Vec<Cow<'a, str>>>,
}

/// A bundle's fields, however they were read: a text field absent (or
/// not text) is empty; `proof` is `None` unless a list of texts.
struct Fields<'b> {
    epoch_id: Option<u64>,
    /// `epochId` as the answer gave it, for the reason.
    epoch_shown: String,
    project_id: &'b str,
    protocol_state: &'b str,
    data_market: &'b str,
    snapshot: Option<&'b str>,
    cid: &'b str,
    root: &'b str,
    proof: Option<Vec<&'b str>>,
}

/// Checks a whole epoch's bundle (`/data/{epoch}`, NDJSON), a line at a
/// time, in bounded memory (32 bytes a project): the header line names the
/// market, the epoch, the root, how many projects follow and the multiproof
/// of them; each following line is one project's `{projectId, cid,
/// snapshot}`, in project-id order (the tree's). Checks 1–3 hold for each
/// line as it comes; check 4 (the multiproof takes every leaf to the root)
/// at [`EpochCheck::finish`].
#[derive(Debug)]
pub struct EpochCheck {
    epoch_id: u64,
    root: B256,
    expected: usize,
    multiproof: crate::merkle::MultiProof,
    leaves: Vec<B256>,
    last_project: Option<String>,
}

/// The most projects a whole-epoch bundle may name: a hostile server's
/// endless epoch stops here.
pub const MAX_EPOCH_PROJECTS: u64 = 1 << 20;

/// Checks an epoch's pairs (`/data/pairs/{epoch}`): about the market and
/// epoch asked, each `[projectId, cid]` once, in project-id order; the root
/// they make, recomputed here (what the caller holds against the chain's:
/// the set is then whole, so a project not in it has no CID that epoch).
pub fn check_pairs(answer: &Value, asked: &Asked<'_>) -> Result<(B256, Vec<(String, String)>), Failed> {
    if !same_market(answer, asked) {
        let text = |field: &str| answer[field].as_str().unwrap_or_default().to_owned();
        let why = format!(
            "the pairs are of epoch {} in market {} on ProtocolState {}",
            answer["epochId"],
            text("dataMarket"),
            text("protocolState")
        );
        return Err(failed("what was asked", why));
    }
    let listed = answer["pairs"].as_array().ok_or_else(|| failed("what was asked", "no `pairs` list".into()))?;
    if listed.len() as u64 > MAX_EPOCH_PROJECTS {
        let why = format!("{} pairs, more than an epoch has ({MAX_EPOCH_PROJECTS} at most)", listed.len());
        return Err(failed("what was asked", why));
    }
    let mut pairs: Vec<(String, String)> = Vec::with_capacity(listed.len());
    for (i, pair) in listed.iter().enumerate() {
        let (Some(project), Some(cid)) = (pair[0].as_str(), pair[1].as_str()) else {
            return Err(failed("what was asked", format!("pair {i} is not [projectId, cid]: {pair}")));
        };
        if let Some((last, _)) = pairs.last()
            && last.as_str() >= project
        {
            return Err(failed("Merkle proof", format!("pair {i} ({project}) is not after {last}")));
        }
        pairs.push((project.to_owned(), cid.to_owned()));
    }
    let tree = crate::merkle::Tree::of(pairs.iter().map(|(p, c)| (p.as_str(), c.as_str())))
        .map_err(|e| failed("Merkle proof", e))?;
    Ok((tree.root(), pairs))
}

/// One project of a whole-epoch bundle whose checks 1–3 hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedLine {
    pub project_id: String,
    pub cid: String,
    pub snapshot: String,
}

impl EpochCheck {
    /// Starts with the `header` line, checked against what was asked
    /// (`asked.project_id` is not read).
    pub fn start(header: &Value, asked: &Asked<'_>) -> Result<Self, Failed> {
        let text = |field: &str| header[field].as_str().unwrap_or_default();
        if !same_market(header, asked) {
            let why = format!(
                "the bundle is epoch {} in market {} on ProtocolState {}",
                header["epochId"],
                text("dataMarket"),
                text("protocolState")
            );
            return Err(failed("what was asked", why));
        }
        let root: B256 = text("root")
            .parse()
            .map_err(|_| failed("Merkle proof", format!("root `{}` is not a 32-byte hash", text("root"))))?;
        let expected = header["projects"]
            .as_u64()
            .ok_or_else(|| failed("what was asked", "the header does not say how many projects follow".into()))?;
        if expected > MAX_EPOCH_PROJECTS {
            let why =
                format!("the header names {expected} projects, more than an epoch has ({MAX_EPOCH_PROJECTS} at most)");
            return Err(failed("what was asked", why));
        }
        let expected = expected as usize;
        let hashes = |field: &str| -> Option<Vec<B256>> {
            header["multiproof"][field].as_array()?.iter().map(|h| h.as_str()?.parse().ok()).collect()
        };
        let flags: Option<Vec<bool>> =
            header["multiproof"]["flags"].as_array().and_then(|f| f.iter().map(Value::as_bool).collect());
        let multiproof = match (hashes("proof"), flags) {
            (Some(proof), Some(flags)) => crate::merkle::MultiProof { proof, flags },
            _ => {
                return Err(failed(
                    "Merkle proof",
                    "the header's multiproof is not {proof: [hash], flags: [bool]}".into(),
                ));
            }
        };
        Ok(Self {
            epoch_id: asked.epoch_id,
            root,
            expected,
            multiproof,
            leaves: Vec::with_capacity(expected.min(1 << 20)),
            last_project: None,
        })
    }

    /// Checks one project's line (checks 1–3, and that it comes in tree
    /// order).
    pub fn line(&mut self, line: &Value) -> Result<CheckedLine, Failed> {
        let text = |field: &str| line[field].as_str();
        self.line_of(text("projectId"), text("cid"), text("snapshot"))
    }

    /// [`EpochCheck::line`] of a line as it came: read in one pass
    /// ([`Wire`]) when it has a line's shape, else as a [`Value`]. The
    /// outer error: the line is not JSON.
    pub fn line_slice(&mut self, line: &[u8]) -> Result<Result<CheckedLine, Failed>, serde_json::Error> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct LineWire<'a> {
            #[serde(borrow)]
            project_id: Option<Cow<'a, str>>,
            #[serde(borrow)]
            cid: Option<Cow<'a, str>>,
            #[serde(borrow)]
            snapshot: Option<Cow<'a, str>>,
        }
        match is_object(line).then(|| serde_json::from_slice::<LineWire<'_>>(line)) {
            Some(Ok(w)) => Ok(self.line_of(w.project_id.as_deref(), w.cid.as_deref(), w.snapshot.as_deref())),
            _ => Ok(self.line(&serde_json::from_slice::<Value>(line)?)),
        }
    }

    fn line_of(
        &mut self,
        project: Option<&str>,
        cid: Option<&str>,
        snapshot: Option<&str>,
    ) -> Result<CheckedLine, Failed> {
        let (Some(project), Some(cid)) = (project, cid) else {
            return Err(failed("what was asked", "a line without projectId and cid".into()));
        };
        if self.leaves.len() == self.expected {
            return Err(failed("what was asked", format!("more than the {} projects the header names", self.expected)));
        }
        if self.last_project.as_deref().is_some_and(|last| last >= project) {
            return Err(failed("what was asked", format!("project `{project}` is out of the tree's order")));
        }
        let snapshot = snapshot.ok_or_else(|| {
            failed(
                "bytes hash to the CID",
                format!("epoch {} {project}: the bundle carries no snapshot", self.epoch_id),
            )
        })?;
        let hashed = crate::cid::cid(snapshot.as_bytes());
        if hashed != cid {
            return Err(failed(
                "bytes hash to the CID",
                format!("epoch {} {project}: the snapshot hashes to {hashed}, the bundle says {cid}", self.epoch_id),
            ));
        }
        match crate::is_canonical(snapshot) {
            Ok(true) => {}
            Ok(false) => {
                return Err(failed("canonical JSON", format!("{project}: the snapshot is not in canonical form")));
            }
            Err(e) => return Err(failed("canonical JSON", format!("{project}: the snapshot is not JSON ({e})"))),
        }
        self.leaves.push(crate::merkle::leaf(project, cid));
        self.last_project = Some(project.to_owned());
        Ok(CheckedLine { project_id: project.to_owned(), cid: cid.to_owned(), snapshot: snapshot.to_owned() })
    }

    /// Check 4 once every line is in: the multiproof takes the leaves to the
    /// header's root, which is returned (the chain must hold it).
    pub fn finish(self) -> Result<B256, Failed> {
        if self.leaves.len() != self.expected {
            let why = format!("{} of the {} projects the header names came", self.leaves.len(), self.expected);
            return Err(failed("what was asked", why));
        }
        let reached = if self.leaves.is_empty() && self.multiproof.proof.is_empty() {
            Some(alloy::primitives::keccak256([]))
        } else {
            crate::merkle::multiproof_root(&self.leaves, &self.multiproof)
        };
        match reached {
            Some(root) if root == self.root => Ok(root),
            Some(root) => Err(failed(
                "Merkle proof",
                format!("the multiproof reaches {root}, not the header's root {}", self.root),
            )),
            None => Err(failed("Merkle proof", "the multiproof does not fit the projects given".into())),
        }
    }
}

/// Checks 1–4 (module docs) of `bundle` against what was `asked`.
pub fn check(bundle: &Value, asked: &Asked<'_>) -> Result<Checked, Failed> {
    let text = |field: &str| bundle[field].as_str().unwrap_or_default();
    let proof = bundle["proof"].as_array().and_then(|p| p.iter().map(Value::as_str).collect::<Option<Vec<&str>>>());
    check_fields(
        Fields {
            epoch_id: bundle["epochId"].as_u64(),
            epoch_shown: bundle["epochId"].to_string(),
            project_id: text("projectId"),
            protocol_state: text("protocolState"),
            data_market: text("dataMarket"),
            snapshot: bundle["snapshot"].as_str(),
            cid: text("cid"),
            root: text("root"),
            proof,
        },
        asked,
    )
}

/// [`check`] of a bundle as it came: read in one pass ([`Wire`]) when it
/// has a bundle's shape, else as a [`Value`] — the same checks and the same
/// answer either way, at about half the reader's CPU. The outer error: the
/// answer is not JSON.
pub fn check_slice(body: &[u8], asked: &Asked<'_>) -> Result<Result<Checked, Failed>, serde_json::Error> {
    let w = match is_object(body).then(|| serde_json::from_slice::<Wire<'_>>(body)) {
        Some(Ok(w)) => w,
        _ => return Ok(check(&serde_json::from_slice::<Value>(body)?, asked)),
    };
    let proof = w.proof.as_ref().map(|p| p.iter().map(|h| h.as_ref()).collect());
    Ok(check_fields(
        Fields {
            epoch_id: w.epoch_id,
            epoch_shown: w.epoch_id.map_or_else(|| "null".to_owned(), |e| e.to_string()),
            project_id: w.project_id.as_deref().unwrap_or_default(),
            protocol_state: w.protocol_state.as_deref().unwrap_or_default(),
            data_market: w.data_market.as_deref().unwrap_or_default(),
            snapshot: w.snapshot.as_deref(),
            cid: w.cid.as_deref().unwrap_or_default(),
            root: w.root.as_deref().unwrap_or_default(),
            proof,
        },
        asked,
    ))
}

/// The epoch a bundle (or a range's `{epochId, missing}` line) names, read
/// as [`check_slice`] reads it; `None` when it names none (or is not JSON).
pub fn epoch_of(body: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct EpochWire {
        epoch_id: Option<u64>,
    }
    match is_object(body).then(|| serde_json::from_slice::<EpochWire>(body)) {
        Some(Ok(w)) => w.epoch_id,
        _ => serde_json::from_slice::<Value>(body).ok()?["epochId"].as_u64(),
    }
}

/// Whether `body` opens an object: a struct read by serde takes a list of
/// its fields' values as well, which as a [`Value`] is no bundle.
fn is_object(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

fn check_fields(f: Fields<'_>, asked: &Asked<'_>) -> Result<Checked, Failed> {
    if !same_market_of(f.epoch_id, f.protocol_state, f.data_market, asked) || f.project_id != asked.project_id {
        let why = format!(
            "the bundle is epoch {} of `{}` in market {} on ProtocolState {}",
            f.epoch_shown, f.project_id, f.data_market, f.protocol_state
        );
        return Err(failed("what was asked", why));
    }
    let snapshot =
        f.snapshot.ok_or_else(|| failed("bytes hash to the CID", "the bundle carries no snapshot".into()))?;
    let cid = f.cid;
    let hashed = crate::cid::cid(snapshot.as_bytes());
    if hashed != cid {
        return Err(failed("bytes hash to the CID", format!("the snapshot hashes to {hashed}, the bundle says {cid}")));
    }
    match crate::is_canonical(snapshot) {
        Ok(true) => {}
        Ok(false) => return Err(failed("canonical JSON", "the snapshot is JSON, not in its canonical form".into())),
        Err(e) => return Err(failed("canonical JSON", format!("the snapshot is not JSON ({e})"))),
    }
    let root: B256 =
        f.root.parse().map_err(|_| failed("Merkle proof", format!("root `{}` is not a 32-byte hash", f.root)))?;
    let proof: Vec<B256> = f
        .proof
        .and_then(|p| p.iter().map(|h| h.parse().ok()).collect::<Option<Vec<B256>>>())
        .ok_or_else(|| failed("Merkle proof", "the proof is not a list of 32-byte hashes".into()))?;
    if !crate::merkle::verify(root, asked.project_id, cid, &proof) {
        let why = format!("the proof does not take ({}, {cid}) to root {root}", asked.project_id);
        return Err(failed("Merkle proof", why));
    }
    Ok(Checked { snapshot: snapshot.to_owned(), cid: cid.to_owned(), root, proof_len: proof.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked() -> Asked<'static> {
        Asked {
            epoch_id: 7,
            project_id: "",
            protocol_state: Address::repeat_byte(1),
            data_market: Address::repeat_byte(2),
        }
    }

    fn answer(pairs: &[(&str, &str)]) -> Value {
        serde_json::json!({
            "epochId": 7,
            "protocolState": Address::repeat_byte(1).to_string(),
            "dataMarket": Address::repeat_byte(2).to_string(),
            "pairs": pairs.iter().map(|(p, c)| [p, c]).collect::<Vec<_>>(),
        })
    }

    /// A bundle of project `b:2` in a tree of three, as a server writes it.
    fn bundle() -> (Value, Asked<'static>) {
        let snapshot = r#"{"pool":"0x01","trades":[{"amount":"-5","tx":"0xab"}],"v":2}"#;
        let cid = crate::cid::cid(snapshot.as_bytes());
        let pairs = [("a:1", "bafy1"), ("b:2", cid.as_str()), ("c:3", "bafy3")];
        let tree = crate::merkle::Tree::of(pairs).unwrap();
        let proof = (0..3)
            .filter_map(|i| tree.proof(i))
            .find(|p| crate::merkle::verify(tree.root(), "b:2", &cid, p))
            .expect("one of the proofs is b:2's");
        let asked = Asked { project_id: "b:2", ..asked() };
        let bundle = serde_json::json!({
            "epochId": 7,
            "projectId": "b:2",
            "cid": cid,
            "snapshot": snapshot,
            "proof": proof.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
            "root": tree.root().to_string(),
            "batchCid": "bafyb",
            "chainId": 7001,
            "protocolState": Address::repeat_byte(1).to_string(),
            "dataMarket": Address::repeat_byte(2).to_string(),
            "finalized": {"block": 12, "tx": "0x01"},
        });
        (bundle, asked)
    }

    /// `check_slice` reads a bundle in one pass when it can and as a
    /// `Value` otherwise: its answer is `check`'s for every text, the right
    /// bundle and each way of spoiling it (a field missing, null, of
    /// another type, given twice, escaped, a tampered byte, hash or root).
    #[test]
    fn a_bundle_read_in_one_pass_is_checked_as_its_value_is() {
        let (good, asked) = bundle();
        let mut texts: Vec<String> = vec![good.to_string(), serde_json::to_string_pretty(&good).unwrap()];
        let fields = ["epochId", "projectId", "cid", "snapshot", "proof", "root", "protocolState", "dataMarket"];
        let others = [
            Value::Null,
            serde_json::json!(7),
            serde_json::json!(-7),
            serde_json::json!(7.5),
            serde_json::json!("7"),
            serde_json::json!("b:2"),
            serde_json::json!(["0x00"]),
            serde_json::json!([7]),
            serde_json::json!([null]),
            serde_json::json!({"a": 1}),
            serde_json::json!(true),
            serde_json::json!(u64::MAX),
        ];
        for field in fields {
            let mut gone = good.clone();
            gone.as_object_mut().unwrap().remove(field);
            texts.push(gone.to_string());
            for other in &others {
                let mut changed = good.clone();
                changed[field] = other.clone();
                texts.push(changed.to_string());
            }
            // Given twice: the first as it was, the second spoiled (a
            // `Value` keeps the last), and the other way round.
            let text = good.to_string();
            let key = format!("\"{field}\":");
            texts.push(text.replacen(&key, &format!("{key}\"x\",{key}"), 1));
            texts.push(format!("{},{key}\"x\"}}", &text[..text.len() - 1]));
        }
        // Escapes where there were none, and a tampered byte, hash and root.
        let text = good.to_string();
        texts.push(text.replace("\"b:2\"", "\"b\\u003a2\""));
        texts.push(text.replace("trades", "trade\\u0073"));
        texts.push(text.replace("-5", "-6"));
        let hash = good["proof"][0].as_str().unwrap().to_owned();
        texts.push(text.replace(&hash[..10], "0x00000000"));
        let root = good["root"].as_str().unwrap().to_owned();
        texts.push(text.replace(&root[..10], "0x00000000"));
        texts.push(text.replace("\"epochId\":7", "\"epochId\":8"));
        texts.push("not json".into());
        texts.push("[1, 2]".into());
        // The fields' values as a list, in the order serde would take them
        // for a struct: no bundle, read either way.
        let list: Vec<Value> =
            ["epochId", "projectId", "protocolState", "dataMarket", "snapshot", "cid", "root", "proof"]
                .iter()
                .map(|f| good[*f].clone())
                .collect();
        texts.push(Value::Array(list).to_string());

        let mut held = 0;
        for text in &texts {
            let slice = check_slice(text.as_bytes(), &asked).map_err(|_| ());
            let value = serde_json::from_str::<Value>(text).map(|v| check(&v, &asked)).map_err(|_| ());
            assert_eq!(slice, value, "{text}");
            held += usize::from(matches!(slice, Ok(Ok(_))));
            let epoch = serde_json::from_str::<Value>(text).ok().and_then(|v| v["epochId"].as_u64());
            assert_eq!(epoch_of(text.as_bytes()), epoch, "{text}");
        }
        assert!(held >= 3, "the right bundle (and its respellings) hold: {held}");
        assert!(texts.len() > 100, "{}", texts.len());
    }

    /// A whole epoch's line read in one pass is checked as its value is.
    #[test]
    fn an_epochs_line_read_in_one_pass_is_checked_as_its_value_is() {
        let (good, asked) = bundle();
        let line = serde_json::json!({"projectId": "b:2", "cid": good["cid"], "snapshot": good["snapshot"]});
        let header = serde_json::json!({
            "epochId": 7,
            "protocolState": good["protocolState"],
            "dataMarket": good["dataMarket"],
            "root": good["root"],
            "projects": 3,
            "multiproof": {"proof": [], "flags": []},
        });
        let mut texts = vec![line.to_string()];
        for field in ["projectId", "cid", "snapshot"] {
            for other in [Value::Null, serde_json::json!(3), serde_json::json!("a:0")] {
                let mut changed = line.clone();
                changed[field] = other;
                texts.push(changed.to_string());
            }
            let mut gone = line.clone();
            gone.as_object_mut().unwrap().remove(field);
            texts.push(gone.to_string());
        }
        texts.push(line.to_string().replace("-5", "-6"));
        texts.push(line.to_string().replace("\"b:2\"", "\"b\\u003a2\""));
        texts.push("{".into());
        texts.push(serde_json::json!([line["projectId"], line["cid"], line["snapshot"]]).to_string());
        let mut held = 0;
        for text in &texts {
            let mut a = EpochCheck::start(&header, &asked).unwrap();
            let mut b = EpochCheck::start(&header, &asked).unwrap();
            let slice = a.line_slice(text.as_bytes()).map_err(|_| ());
            let value = serde_json::from_str::<Value>(text).map(|v| b.line(&v)).map_err(|_| ());
            assert_eq!(slice, value, "{text}");
            assert_eq!(a.leaves, b.leaves, "{text}");
            held += usize::from(matches!(slice, Ok(Ok(_))));
        }
        // The line, its escaped respelling, and another project's id (a
        // line's checks hold; the multiproof decides at `finish`).
        assert_eq!(held, 3);
    }

    #[test]
    fn an_epochs_pairs_make_their_root_and_out_of_order_or_foreign_ones_are_refused() {
        let pairs = [("a:1", "bafy1"), ("b:2", "bafy2"), ("c:3", "bafy3")];
        let (root, got) = check_pairs(&answer(&pairs), &asked()).unwrap();
        assert_eq!(root, crate::merkle::Tree::of(pairs).unwrap().root());
        assert_eq!(got.len(), 3);
        // Another CID makes another root: the caller's check against the chain fails.
        let (other, _) =
            check_pairs(&answer(&[("a:1", "bafy1"), ("b:2", "bafyX"), ("c:3", "bafy3")]), &asked()).unwrap();
        assert_ne!(other, root);
        let unordered = check_pairs(&answer(&[("b:2", "bafy2"), ("a:1", "bafy1")]), &asked()).unwrap_err();
        assert_eq!(unordered.check, "Merkle proof", "{unordered}");
        let twice = check_pairs(&answer(&[("a:1", "bafy1"), ("a:1", "bafy2")]), &asked()).unwrap_err();
        assert!(twice.why.contains("is not after"), "{twice}");
        let mut foreign = answer(&pairs);
        foreign["epochId"] = 8.into();
        assert_eq!(check_pairs(&foreign, &asked()).unwrap_err().check, "what was asked");
        let mut garbled = answer(&pairs);
        garbled["pairs"][1] = serde_json::json!({"projectId": "b:2"});
        assert!(check_pairs(&garbled, &asked()).unwrap_err().why.contains("not [projectId, cid]"));
        // No project at all: the empty tree's root.
        let (empty, none) = check_pairs(&answer(&[]), &asked()).unwrap();
        assert!(none.is_empty());
        assert_eq!(empty, alloy::primitives::keccak256([]));
    }
}
