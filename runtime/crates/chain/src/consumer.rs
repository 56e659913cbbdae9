//! A consumer's reads from a market's servers (issue 54), shared by
//! `lite-node read` and the devnet's read-back: a bundle fetched as served,
//! and a whole epoch's NDJSON bundle streamed and checked a line at a time
//! ([`lite_node_protocol::bundle::EpochCheck`]). Nothing here trusts the
//! server: the caller confirms the root against the chain (`epochBatch`).

use alloy::primitives::B256;
use lite_node_protocol::bundle::{Asked, CheckedLine, EpochCheck};
use serde_json::Value;

/// Why a server's answer was not taken: it could not give one (down, an
/// error status, not a bundle), or its answer failed a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    Unanswered(String),
    Failed(lite_node_protocol::bundle::Failed),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unanswered(why) => f.write_str(why),
            Self::Failed(failed) => failed.fmt(f),
        }
    }
}

/// The longest line a whole-epoch bundle may have (a hostile server's
/// endless line stops here): many times the largest snapshot a market takes
/// by default, escaped.
pub const MAX_LINE: usize = 16 << 20;

/// An answer's body, read a chunk at a time up to `cap` bytes (a hostile
/// server's endless answer stops there).
async fn body_within(r: &mut reqwest::Response, cap: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = r.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > cap {
            return Err(format!("an answer longer than {cap} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// What an error answer says, its first KiB at most.
async fn error_text(mut r: reqwest::Response) -> String {
    let status = r.status();
    let mut said = Vec::new();
    while let Ok(Some(chunk)) = r.chunk().await {
        said.extend_from_slice(&chunk[..chunk.len().min(1024 - said.len())]);
        if said.len() >= 1024 {
            break;
        }
    }
    format!("{status}: {}", String::from_utf8_lossy(&said).trim())
}

/// `server`'s bundle of `project` at `epoch_id` as it came, unchecked (not
/// even as JSON: [`lite_node_protocol::bundle::check_slice`] reads it).
pub async fn fetch_bundle(
    client: &reqwest::Client,
    server: &str,
    epoch_id: u64,
    project: &str,
) -> Result<Vec<u8>, String> {
    let url = format!("{}/data/{epoch_id}/{project}", server.trim_end_matches('/'));
    let mut r = client.get(&url).send().await.map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(error_text(r).await);
    }
    // A bundle is one line.
    body_within(&mut r, MAX_LINE).await
}

/// Reads `server`'s range of `project` over epochs `from..=to`
/// (`/data/range/{project}`, NDJSON), handing each line to `each` as it
/// arrives (a bundle, or `{epochId, missing}`), unchecked (not even as JSON:
/// [`lite_node_protocol::bundle::check_slice`] reads it). Memory: one line.
pub async fn read_range(
    client: &reqwest::Client,
    server: &str,
    project: &str,
    (from, to): (u64, u64),
    mut each: impl FnMut(&[u8]),
) -> Result<(), String> {
    let url = format!("{}/data/range/{project}?from={from}&to={to}", server.trim_end_matches('/'));
    let mut r = client.get(&url).send().await.map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(error_text(r).await);
    }
    let mut pending: Vec<u8> = Vec::new();
    while let Some(chunk) = r.chunk().await.map_err(|e| e.to_string())? {
        pending.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(at) = memchr::memchr(b'\n', &pending[start..]) {
            each(&pending[start..start + at]);
            start += at + 1;
        }
        pending.drain(..start);
        if pending.len() > MAX_LINE {
            return Err(format!("a line longer than {MAX_LINE} bytes"));
        }
    }
    Ok(())
}

/// The largest answer [`read_pairs`] takes: [`lite_node_protocol::bundle::MAX_EPOCH_PROJECTS`]
/// pairs of long ids.
pub const MAX_PAIRS_ANSWER: usize = 256 << 20;

/// `server`'s pairs of `asked.epoch_id` (`/data/pairs/{epoch}`), checked
/// ([`lite_node_protocol::bundle::check_pairs`]): the root they make, for
/// the caller to hold against the chain's, and the pairs.
pub async fn read_pairs(
    client: &reqwest::Client,
    server: &str,
    asked: &Asked<'_>,
) -> Result<(B256, Vec<(String, String)>), Refusal> {
    let url = format!("{}/data/pairs/{}", server.trim_end_matches('/'), asked.epoch_id);
    let unanswered = |e: reqwest::Error| Refusal::Unanswered(e.to_string());
    let mut r = client.get(&url).send().await.map_err(unanswered)?;
    if !r.status().is_success() {
        return Err(Refusal::Unanswered(error_text(r).await));
    }
    let body = body_within(&mut r, MAX_PAIRS_ANSWER).await.map_err(Refusal::Unanswered)?;
    let value: Value =
        serde_json::from_slice(&body).map_err(|e| Refusal::Unanswered(format!("not an epoch's pairs (JSON: {e})")))?;
    lite_node_protocol::bundle::check_pairs(&value, asked).map_err(Refusal::Failed)
}

/// Reads `server`'s whole-epoch bundle of `asked.epoch_id`, checking each
/// line as it arrives and handing it to `each`; the root its multiproof
/// reaches once every line held (checks 1–4). Memory: one line and 32 bytes
/// a project.
pub async fn read_epoch(
    client: &reqwest::Client,
    server: &str,
    asked: &Asked<'_>,
    mut each: impl FnMut(CheckedLine),
) -> Result<B256, Refusal> {
    let url = format!("{}/data/{}", server.trim_end_matches('/'), asked.epoch_id);
    let unanswered = |e: reqwest::Error| Refusal::Unanswered(e.to_string());
    let mut r = client.get(&url).send().await.map_err(unanswered)?;
    if !r.status().is_success() {
        return Err(Refusal::Unanswered(error_text(r).await));
    }
    let mut check: Option<EpochCheck> = None;
    let mut pending: Vec<u8> = Vec::new();
    let not_json =
        |e: serde_json::Error| Refusal::Unanswered(format!("not a whole-epoch bundle (a line is not JSON: {e})"));
    let mut take = |line: &[u8], check: &mut Option<EpochCheck>| -> Result<(), Refusal> {
        match check {
            None => {
                let header: Value = serde_json::from_slice(line).map_err(not_json)?;
                *check = Some(EpochCheck::start(&header, asked).map_err(Refusal::Failed)?);
            }
            Some(c) => each(c.line_slice(line).map_err(not_json)?.map_err(Refusal::Failed)?),
        }
        Ok(())
    };
    while let Some(chunk) = r.chunk().await.map_err(unanswered)? {
        pending.extend_from_slice(&chunk);
        let mut from = 0;
        while let Some(at) = memchr::memchr(b'\n', &pending[from..]) {
            take(&pending[from..from + at], &mut check)?;
            from += at + 1;
        }
        pending.drain(..from);
        if pending.len() > MAX_LINE {
            return Err(Refusal::Unanswered(format!("a line longer than {MAX_LINE} bytes")));
        }
    }
    if !pending.iter().all(u8::is_ascii_whitespace) {
        take(&pending, &mut check)?;
    }
    let check = check.ok_or_else(|| Refusal::Unanswered("an empty answer".into()))?;
    check.finish().map_err(Refusal::Failed)
}

/// One epoch's (project id → CID), shared.
pub type Pairs = std::sync::Arc<std::collections::HashMap<String, String>>;

/// The pairs of `asked.epoch_id` from the first of `servers` whose pairs
/// make `root` (the chain's); each other's reason, joined, when none does.
pub async fn proved_pairs(
    client: &reqwest::Client,
    servers: &[String],
    asked: &Asked<'_>,
    root: B256,
) -> Result<Vec<(String, String)>, String> {
    let mut why = Vec::new();
    for server in servers {
        match read_pairs(client, server, asked).await {
            Ok((got, pairs)) if got == root => return Ok(pairs),
            Ok((got, _)) => why.push(format!("{server}: its pairs make root {got}, not the chain's")),
            Err(e) => why.push(format!("{server}: {e}")),
        }
    }
    Err(why.join("; "))
}

/// A market's pairs, read from its validators' APIs for a market that
/// finalizes roots only (a node's previous snapshots, issue 54 item 7):
/// each epoch's whole set, proved against the root the caller read on
/// chain, from the first server whose answer holds; the last
/// [`ApiPairs::KEPT`] epochs are kept (a finalized root's pairs never
/// change).
#[derive(Debug)]
pub struct ApiPairs {
    servers: Vec<String>,
    protocol_state: alloy::primitives::Address,
    data_market: alloy::primitives::Address,
    client: reqwest::Client,
    io: crate::IoRuntime,
    kept: std::sync::Mutex<std::collections::VecDeque<(u64, B256, Pairs)>>,
}

impl ApiPairs {
    /// Epochs whose pairs are kept: the five a snapshot names, and a few.
    pub const KEPT: usize = 8;

    pub fn new(
        servers: Vec<String>,
        protocol_state: alloy::primitives::Address,
        data_market: alloy::primitives::Address,
        io: crate::IoRuntime,
    ) -> Self {
        let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30)).build().unwrap_or_default();
        Self { servers, protocol_state, data_market, client, io, kept: Default::default() }
    }

    /// Epoch `epoch_id`'s pairs, proved against `root` (the chain's), from
    /// a blocking thread: the first server whose answer holds; each other's
    /// reason otherwise.
    pub fn pairs(&self, epoch_id: u64, root: B256) -> Result<Pairs, String> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, _, pairs)) = kept.iter().find(|(e, r, _)| *e == epoch_id && *r == root) {
            return Ok(pairs.clone());
        }
        drop(kept);
        let (servers, client) = (self.servers.clone(), self.client.clone());
        let (protocol_state, data_market) = (self.protocol_state, self.data_market);
        let read = self.io.wait(async move {
            let asked = Asked { epoch_id, project_id: "", protocol_state, data_market };
            proved_pairs(&client, &servers, &asked, root).await
        });
        let pairs: std::collections::HashMap<String, String> =
            read.ok_or("the I/O runtime stopped")??.into_iter().collect();
        let pairs = std::sync::Arc::new(pairs);
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.push_back((epoch_id, root, pairs.clone()));
        while kept.len() > Self::KEPT {
            kept.pop_front();
        }
        Ok(pairs)
    }
}
