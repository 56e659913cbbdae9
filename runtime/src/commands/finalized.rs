//! `lite-node finalized --epoch-id E [--project P] [--proof]`: what the
//! anchor chain finalized for an epoch of a data market, read from
//! ProtocolState by anyone (docs/protocol.md §12). With `--proof`, the
//! Merkle proof of one project's CID (docs/protocol.md §11): the leaves come
//! from the transactions that stored the batch's parts, the tree they make must
//! have the root the chain finalized, and the proof is checked twice before
//! it is printed — here, and by the contract (`verifyFinalizedCid`).

use std::io::Write;

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use anyhow::{Context, Result, anyhow, bail};
use lite_node_chain::{Anchor, Chains};
use lite_node_protocol::{
    contracts::{
        FinalizedCidsStored, attestationsCountCall, currentEpochIdCall, divergentValidatorsCall, epochBatchCall,
        getTotalValidatorsCountCall, maxSnapshotsCidCall, storeFinalizedCidsCall, storedCidsCall,
        verifyFinalizedCidCall,
    },
    merkle,
};
use serde_json::{Value, json};

use crate::{config::EnvSnapshot, exit::BadInput};

/// `lite-node finalized`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Epoch id.
    #[arg(long, value_name = "E")]
    pub epoch_id: u64,
    /// Only this project (its id, as submitted).
    #[arg(long, value_name = "P")]
    pub project: Option<String>,
    /// Print the Merkle proof of the project's CID (needs --project).
    #[arg(long)]
    pub proof: bool,
    #[command(flatten)]
    pub market: super::ReaderArgs,
    /// The anchor block to look for the epoch's events from.
    #[arg(long, value_name = "B", default_value_t = 0)]
    pub from_block: u64,
    /// The market's data APIs, comma-separated (default: DATA_API_URLS):
    /// where an epoch whose pairs are not on chain (a market that finalizes
    /// roots only) is read, its pairs proved against the root on chain.
    #[arg(long, value_name = "URL,…", value_delimiter = ',')]
    pub api: Vec<String>,
}

/// Prints what the chain finalized for the epoch.
pub fn run(q: &Args, env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
    if q.proof && q.project.is_none() {
        bail!(BadInput("--proof needs --project (the project whose CID is proven)".into()));
    }
    let (cfg, _, _) = q.market.resolve(env, "finalized")?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let chains = Chains::connect(&cfg).map_err(BadInput)?;
        let anchor = chains.anchor()?.clone();
        let mut apis = q.api.clone();
        if apis.is_empty() {
            apis = env.get("DATA_API_URLS").unwrap_or_default().split(',').map(str::trim).map(str::to_owned).collect();
            apis.retain(|a| !a.is_empty());
        }
        report(&anchor, q, &apis, out).await
    })
}

async fn report(anchor: &Anchor, q: &Args, apis: &[String], out: &mut dyn Write) -> Result<()> {
    let (dm, e) = (anchor.data_market, U256::from(q.epoch_id));
    let batch = anchor
        .read(&epochBatchCall { dataMarketAddress: dm, epochId: e }, None)
        .await
        .context("reading epochBatch from ProtocolState")?;
    let attestations = anchor.read(&attestationsCountCall { dataMarketAddress: dm, epochId: e }, None).await?;
    let validators = anchor.read(&getTotalValidatorsCountCall { dataMarketAddress: dm }, None).await?;
    if !batch.finalized {
        // No epoch ever released for it: not a market of this ProtocolState
        // (a typo, another market's address), not an epoch to wait for.
        let current = anchor.read(&currentEpochIdCall { dataMarketAddress: dm }, None).await?;
        if current.is_zero() {
            bail!(BadInput(format!(
                "--data-market {dm}: ProtocolState {} has released no epoch for it: not a data market of this \
                 ProtocolState (check --data-market and --protocol-state)",
                anchor.protocol_state
            )));
        }
        if e > current {
            bail!("epoch {} of data market {dm} is not released yet (the current epoch is {current})", q.epoch_id);
        }
        let state = if batch.submitter == Address::ZERO { "no batch yet" } else { "a batch, not finalized" };
        bail!(
            "epoch {} of data market {dm} is not finalized on chain ({state}; {attestations} of {validators} \
             validators attested)",
            q.epoch_id
        );
    }
    let block = anchor.finalized_in(q.epoch_id, q.from_block).await?;
    let divergent = anchor.read(&divergentValidatorsCall { dataMarketAddress: dm, epochId: e }, None).await?;
    writeln!(
        out,
        "epoch {} of data market {dm}: finalized on chain{} (ProtocolState {})",
        q.epoch_id,
        block.map_or(String::new(), |b| format!(" in anchor block {b}")),
        anchor.protocol_state
    )?;
    writeln!(out, "  batch {} submitted by {}", batch.batchCid, batch.submitter)?;
    writeln!(out, "  root {}", batch.root)?;
    writeln!(
        out,
        "  {attestations} of {validators} validators attested; divergent: {}",
        if divergent.is_empty() {
            "none".to_owned()
        } else {
            divergent.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        }
    )?;
    let stored = anchor.read(&storedCidsCall { dataMarketAddress: dm, epochId: e }, None).await?;
    let empty = batch.root == alloy::primitives::keccak256([]);
    let from_api = stored.is_zero() && !empty;
    let leaves =
        if from_api { api_leaves(anchor, q, apis, batch.root).await? } else { leaves(anchor, q, batch.root).await? };
    if from_api {
        writeln!(out, "  no pair on chain (roots only): the pairs read from a data API, proved against the root")?;
    }
    let projects: Vec<&(String, String)> = match &q.project {
        Some(p) => {
            let one: Vec<_> = leaves.iter().filter(|(id, _)| id == p).collect();
            if one.is_empty() {
                bail!(BadInput(format!("--project {p}: epoch {} finalized no CID for it", q.epoch_id)));
            }
            one
        }
        None => leaves.iter().collect(),
    };
    for (project, cid) in &projects {
        if from_api {
            writeln!(out, "  {project}  {cid}")?;
            continue;
        }
        // The chain's own answer for the project, beside the batch's.
        let call = maxSnapshotsCidCall { dataMarketAddress: dm, projectId: project.clone(), epochId: e };
        let read = anchor.read(&call, None).await?;
        if read._0 != *cid || read._1 != 1 {
            bail!("{project}: the batch names {cid}, maxSnapshotsCid answers {} (status {})", read._0, read._1);
        }
        writeln!(out, "  {project}  {cid}")?;
    }
    if !q.proof {
        return Ok(());
    }
    let (project, cid) = projects[0];
    let tree = merkle::Tree::of(leaves.iter().map(|(p, c)| (p.as_str(), c.as_str()))).map_err(|e| anyhow!(e))?;
    let index = leaves.iter().position(|(p, _)| p == project).expect("the project is a leaf");
    let proof = tree.proof(index).expect("the leaf exists");
    if !merkle::verify(batch.root, project, cid, &proof) {
        bail!("the proof of {project} does not verify against the root {} (a bug: report it)", batch.root);
    }
    let call = verifyFinalizedCidCall {
        dataMarketAddress: dm,
        epochId: e,
        projectId: project.clone(),
        cid: cid.clone(),
        proof: proof.clone(),
    };
    if !anchor.read(&call, None).await.context("verifyFinalizedCid")? {
        bail!("ProtocolState's verifyFinalizedCid refuses the proof of {project} against the root {}", batch.root);
    }
    writeln!(out, "proof of {project} = {cid} (leaf {index} of {}):", leaves.len())?;
    writeln!(out, "  leaf  {}", merkle::leaf(project, cid))?;
    for (i, p) in proof.iter().enumerate() {
        writeln!(out, "  {i:>4}  {p}")?;
    }
    writeln!(out, "verified against the root on chain: here, and by ProtocolState.verifyFinalizedCid (true)")?;
    let as_json = json!({"projectId": project, "cid": cid, "leaf": merkle::leaf(project, cid), "proof": proof, "root": batch.root});
    writeln!(out, "{}", Value::to_string(&as_json))?;
    Ok(())
}

/// The finalized batch's `(project id, CID)` pairs when none is on chain:
/// from the first of `apis` whose pairs make `root` (`/data/pairs/{epoch}`).
async fn api_leaves(anchor: &Anchor, q: &Args, apis: &[String], root: B256) -> Result<Vec<(String, String)>> {
    if apis.is_empty() {
        // Exit 1, not 2: in a market with pairs on chain this passes once
        // its parts are mined.
        bail!(
            "epoch {}: no pair of it is stored on chain yet (its parts are being stored; or a market that \
             finalizes roots only: give --api or DATA_API_URLS, the market's data APIs, to read its pairs proved \
             against the root {root})",
            q.epoch_id
        );
    }
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30)).build()?;
    let asked = lite_node_protocol::bundle::Asked {
        epoch_id: q.epoch_id,
        project_id: "",
        protocol_state: anchor.protocol_state,
        data_market: anchor.data_market,
    };
    lite_node_chain::consumer::proved_pairs(&client, apis, &asked, root).await.map_err(|why| {
        anyhow!("epoch {}: no data API gave pairs that make the root on chain {root} ({why})", q.epoch_id)
    })
}

/// The finalized batch's `(project id, CID)` pairs, from the transactions
/// that stored them (their `FinalizedCidsStored` logs name them), checked:
/// each part proves against the finalized root, and all of them make it.
/// A part is read from the call to ProtocolState that stored it: the
/// transaction's own input when it is one, else its calls as the RPC traces
/// them (`debug_traceTransaction`: a store through a Safe or a relayer). A
/// call that is not ProtocolState's, or does not prove (another contract's
/// function under the same selector), is no part and is passed over — it
/// cannot make the epoch unreadable.
async fn leaves(anchor: &Anchor, q: &Args, root: B256) -> Result<Vec<(String, String)>> {
    let logs = anchor.epoch_logs(FinalizedCidsStored::SIGNATURE_HASH, q.epoch_id, q.from_block).await?;
    let mut pairs: std::collections::BTreeMap<String, String> = Default::default();
    let mut seen = std::collections::BTreeSet::new();
    let mut untraced = Vec::new();
    for log in &logs {
        let Some(hash) = log["transactionHash"].as_str() else { continue };
        if !seen.insert(hash.to_owned()) {
            continue;
        }
        let tx = anchor.rpc().call_value("eth_getTransactionByHash", json!([hash])).await?;
        let direct = tx["to"].as_str().and_then(|to| to.parse::<alloy::primitives::Address>().ok())
            == Some(anchor.protocol_state);
        let inputs = if direct {
            vec![tx["input"].as_str().or_else(|| tx["data"].as_str()).unwrap_or_default().to_owned()]
        } else {
            match traced_calls(anchor, hash).await {
                Some(inputs) => inputs,
                None => {
                    untraced.push(hash.to_owned());
                    continue;
                }
            }
        };
        for input in inputs {
            let Ok(bytes) = alloy::hex::decode(&input) else { continue };
            let Ok(call) = storeFinalizedCidsCall::abi_decode(&bytes) else { continue };
            if call.dataMarketAddress != anchor.data_market || call.epochId != U256::from(q.epoch_id) {
                continue;
            }
            let leaves: Vec<B256> =
                call.projectIds.iter().zip(&call.snapshotCids).map(|(p, c)| merkle::leaf(p, c)).collect();
            let proof = merkle::MultiProof { proof: call.proof, flags: call.proofFlags };
            if merkle::multiproof_root(&leaves, &proof) != Some(root) {
                continue;
            }
            pairs.extend(call.projectIds.into_iter().zip(call.snapshotCids));
        }
    }
    if !untraced.is_empty() {
        tracing::debug!("parts stored through other contracts, not traced by this RPC: {untraced:?}");
    }
    let pairs: Vec<(String, String)> = pairs.into_iter().collect();
    let stored = anchor
        .read(&storedCidsCall { dataMarketAddress: anchor.data_market, epochId: U256::from(q.epoch_id) }, None)
        .await?;
    if stored != U256::from(pairs.len()) {
        let through = if untraced.is_empty() {
            String::new()
        } else {
            format!(
                "; {} transaction(s) stored parts through another contract and this RPC does not trace them \
                 (debug_traceTransaction): use an anchor RPC that does",
                untraced.len()
            )
        };
        bail!(
            "epoch {}: the chain has {stored} of its finalized CIDs stored, the parts from block {} on carry {} \
             (give --from-block at or before the epoch's finalization; or its parts are still being stored){through}",
            q.epoch_id,
            q.from_block,
            pairs.len()
        );
    }
    let tree =
        merkle::Tree::of(pairs.iter().map(|(p, c)| (p.as_str(), c.as_str()))).map_err(|e| anyhow!("the parts: {e}"))?;
    if tree.root() != root {
        bail!(
            "epoch {}: the stored parts make the root {}, not the finalized {root}: its parts are still being stored",
            q.epoch_id,
            tree.root()
        );
    }
    Ok(pairs)
}

/// The inputs of the calls transaction `hash` made to ProtocolState that
/// succeeded, as the RPC's call tracer reports them; `None` when the RPC
/// does not trace.
async fn traced_calls(anchor: &Anchor, hash: &str) -> Option<Vec<String>> {
    let trace =
        anchor.rpc().call_value("debug_traceTransaction", json!([hash, {"tracer": "callTracer"}])).await.ok()?;
    let mut inputs = Vec::new();
    let mut stack = vec![&trace];
    while let Some(frame) = stack.pop() {
        let to = frame["to"].as_str().and_then(|to| to.parse::<alloy::primitives::Address>().ok());
        if to == Some(anchor.protocol_state)
            && frame.get("error").is_none()
            && let Some(input) = frame["input"].as_str()
        {
            inputs.push(input.to_owned());
        }
        stack.extend(frame["calls"].as_array().into_iter().flatten());
    }
    Some(inputs)
}
