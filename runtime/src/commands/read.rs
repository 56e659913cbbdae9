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
//! A server that cannot answer (down, an error, not holding the epoch) or
//! whose answer fails a check is passed over for the next `--api`; when none
//! gives a bundle that holds, it exits 1 naming each server's failed check.

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
    /// in turn until one's answer holds every check.
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
    let asked = bundle::Asked { epoch_id: q.epoch, project_id: &q.project, protocol_state, data_market };
    let client = reqwest::Client::builder().timeout(ANSWER_WITHIN).build()?;
    // 5. The root ProtocolState finalized: read once, when the first bundle
    // that holds checks 1–4 asks for it.
    let mut on_chain: Option<alloy::primitives::B256> = None;
    let mut failures = Vec::new();
    let mut verified = None;
    for server in &q.api {
        let server = server.trim_end_matches('/');
        let bundle = match runtime.block_on(fetch(&client, server, q)) {
            Ok(bundle) => bundle,
            Err(why) => {
                failures.push(format!("{server}: {why}"));
                continue;
            }
        };
        let checked = match bundle::check(&bundle, &asked) {
            Ok(checked) => checked,
            Err(failed) => {
                failures.push(format!("{server}: {failed}"));
                continue;
            }
        };
        let root = match on_chain {
            Some(root) => root,
            None => {
                let batch = runtime.block_on(async {
                    let chains = Chains::connect(&cfg).map_err(BadInput)?;
                    let anchor = chains.anchor()?.clone();
                    let call = epochBatchCall { dataMarketAddress: data_market, epochId: U256::from(q.epoch) };
                    anchor.read(&call, None).await.context("reading epochBatch from ProtocolState")
                })?;
                if !batch.finalized {
                    bail!(
                        "check `root finalized on chain` failed: epoch {} of data market {data_market} is not \
                         finalized on ProtocolState {protocol_state} (so {server}'s root {} proves nothing yet)",
                        q.epoch,
                        checked.root
                    );
                }
                *on_chain.insert(batch.root)
            }
        };
        if checked.root != root {
            failures.push(format!(
                "{server}: check `root finalized on chain` failed: it proves against root {}, ProtocolState \
                 finalized epoch {} with {root}",
                checked.root, q.epoch
            ));
            continue;
        }
        verified = Some((checked, server.to_owned()));
        break;
    }
    let Some((checked, server)) = verified else {
        bail!("no server gave a verified epoch {} of {}:\n  {}", q.epoch, q.project, failures.join("\n  "));
    };
    let root = checked.root;
    for failure in &failures {
        eprintln!("passed over {failure}");
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

/// `server`'s bundle for what `q` asks, unchecked.
async fn fetch(client: &reqwest::Client, server: &str, q: &Args) -> Result<Value, String> {
    let url = format!("{server}/data/{}/{}", q.epoch, q.project);
    let r = client.get(&url).send().await.map_err(|e| e.to_string())?;
    let status = r.status();
    let body = r.bytes().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body).trim()));
    }
    serde_json::from_slice::<Value>(&body).map_err(|e| format!("not a bundle (JSON: {e})"))
}
