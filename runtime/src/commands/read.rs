//! `lite-node read --api URL[,URL…] --epoch N --project P`: one project's
//! snapshot at one epoch, read from any server of the market (a validator's
//! API, or anyone's copy) and trusted for nothing it says. Printed only once
//! every check holds, in order:
//!
//! 1. the answer is about what was asked (this market, epoch and project);
//! 2. the bytes hash to the CID (sha256, CIDv1 raw: the bytes *are* the
//!    block);
//! 3. the bytes are the protocol's canonical JSON;
//! 4. the Merkle proof takes (project, CID) to the root;
//! 5. that root is the one ProtocolState finalized for the epoch (one chain
//!    read, `epochBatch`).
//!
//! A failed check exits 1 naming it; a server that cannot answer (down, an
//! error, not holding the epoch) is passed over for the next `--api`.

use std::{io::Write, time::Duration};

use alloy::primitives::U256;
use anyhow::{Context, Result, bail};
use lite_node_chain::Chains;
use lite_node_protocol::{bundle, contracts::epochBatchCall};
use serde_json::Value;

use crate::{config::EnvSnapshot, exit::BadInput};

/// `lite-node read`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// The servers to read from (a validator's API), comma-separated: tried
    /// in turn until one answers.
    #[arg(long, value_name = "URL,…", value_delimiter = ',', required = true)]
    pub api: Vec<String>,
    /// Epoch id.
    #[arg(long, value_name = "N")]
    pub epoch: u64,
    /// Project id.
    #[arg(long, value_name = "P")]
    pub project: String,
    /// The market, and the anchor where the root is checked.
    #[command(flatten)]
    pub market: super::ReaderArgs,
}

/// How long one server has to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// Prints the snapshot (its bytes, as served and checked) on `out`, and what
/// was checked on stderr.
pub fn run(q: &Args, env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
    for url in &q.api {
        if reqwest::Url::parse(url).is_err() {
            bail!(BadInput(format!("--api {url}: not a URL (e.g. http://127.0.0.1:9091)")));
        }
    }
    let (cfg, protocol_state, data_market) = q.market.resolve(env, "read")?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (bundle, server) = runtime.block_on(fetch(q))?;
    let asked = bundle::Asked { epoch_id: q.epoch, project_id: &q.project, protocol_state, data_market };
    let checked = bundle::check(&bundle, &asked).with_context(|| format!("the answer of {server}"))?;
    let root = checked.root;
    // 5. The root ProtocolState finalized.
    let on_chain = runtime.block_on(async {
        let chains = Chains::connect(&cfg).map_err(BadInput)?;
        let anchor = chains.anchor()?.clone();
        let call = epochBatchCall { dataMarketAddress: data_market, epochId: U256::from(q.epoch) };
        anchor.read(&call, None).await.context("reading epochBatch from ProtocolState")
    })?;
    if !on_chain.finalized {
        bail!(
            "check `root finalized on chain` failed: epoch {} of data market {data_market} is not finalized on \
             ProtocolState {protocol_state} (so {server}'s root {root} proves nothing yet)",
            q.epoch
        );
    }
    if on_chain.root != root {
        bail!(
            "check `root finalized on chain` failed: {server} proves against root {root}, ProtocolState finalized \
             epoch {} with {}",
            q.epoch,
            on_chain.root
        );
    }
    out.write_all(checked.snapshot.as_bytes())?;
    writeln!(out)?;
    eprintln!(
        "verified: {} bytes → {} (sha256, canonical JSON) → proof of {} hashes → root {root}, finalized for epoch {} \
         on ProtocolState {protocol_state} (read from {server})",
        checked.snapshot.len(),
        checked.cid,
        checked.proof_len,
        q.epoch
    );
    Ok(())
}

/// The first bundle a server gives, and which server gave it; every
/// server's failure when none does.
async fn fetch(q: &Args) -> Result<(Value, String)> {
    let client = reqwest::Client::builder().timeout(ANSWER_WITHIN).build()?;
    let mut failures = Vec::new();
    for server in &q.api {
        let base = server.trim_end_matches('/');
        let url = format!("{base}/data/{}/{}", q.epoch, q.project);
        let answer = async {
            let r = client.get(&url).send().await.map_err(|e| e.to_string())?;
            let status = r.status();
            let body = r.bytes().await.map_err(|e| e.to_string())?;
            if !status.is_success() {
                return Err(format!("{status}: {}", String::from_utf8_lossy(&body).trim()));
            }
            serde_json::from_slice::<Value>(&body).map_err(|e| format!("not a bundle (JSON: {e})"))
        };
        match answer.await {
            Ok(bundle) => return Ok((bundle, base.to_owned())),
            Err(why) => failures.push(format!("{base}: {why}")),
        }
    }
    bail!("no server gave epoch {} of {}:\n  {}", q.epoch, q.project, failures.join("\n  "))
}
