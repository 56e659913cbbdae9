//! `lite-node market env --slot N`: the `.env` block of a slot's operator.

use std::{io::Write, path::PathBuf};

use anyhow::{Result, bail};
use lite_node_chain::{
    IoRuntime,
    market::{Market, connect},
    rpc::MAX_BEHIND,
};
use lite_node_protocol::contracts::getTotalNodeCountCall;
use serde_json::json;

use super::block_on;
use crate::exit::BadInput;

/// `lite-node market env`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// The slot.
    #[arg(long, value_name = "N", required_unless_present = "validator", conflicts_with = "validator")]
    pub slot: Option<u64>,
    /// A new validator's block instead: the market's settings and the
    /// flags every validator of the market runs with.
    #[arg(long)]
    pub validator: bool,
    /// The market's manifest.
    #[arg(long, value_name = "PATH", default_value = "market.json")]
    pub manifest: PathBuf,
}

/// `lite-node market env --slot N`: the lines an operator pastes into the
/// node's `.env` for slot N. The private key is the operator's own: its
/// line is left for them to fill.
pub fn run(a: &Args, out: &mut dyn Write) -> Result<()> {
    let Some(slot) = a.slot else { return validator(a, out) };
    block_on(async |io| {
        let m = Market::open(&a.manifest, io).await?;
        let count = u64::try_from(m.view(getTotalNodeCountCall {}).await?).unwrap_or(u64::MAX);
        if slot == 0 || slot > count {
            bail!(BadInput(format!(
                "--slot {slot}: not a registered slot of {} (slots 1 to {count} are)",
                m.path.display()
            )));
        }
        let signer = m.signer_of(slot).await?;
        let mf = &m.manifest;
        writeln!(out, "# slot {slot} of market {} ({}), from {}", mf.data_market, mf.namespace, m.path.display())?;
        let (source, source_notes) = by_freshness("source", &mf.source.rpcs, io).await;
        let (anchor, anchor_notes) = by_freshness("anchor", &mf.anchor.rpcs, io).await;
        for note in source_notes.iter().chain(&anchor_notes) {
            writeln!(out, "# {note}")?;
        }
        writeln!(out, "SOURCE_RPC_URL={}", source.join(","))?;
        writeln!(out, "SOURCE_CHAIN={}", mf.source.name)?;
        writeln!(out, "POWERLOOM_RPC_URL={}", anchor.join(","))?;
        writeln!(out, "POWERLOOM_CHAIN={}", mf.anchor.name)?;
        writeln!(out, "PROTOCOL_STATE_CONTRACT={}", mf.protocol_state)?;
        writeln!(out, "DATA_MARKET_CONTRACT={}", mf.data_market)?;
        writeln!(out, "NAMESPACE={}", mf.namespace)?;
        writeln!(out, "SLOT_ID={slot}")?;
        identity(mf, out)?;
        writeln!(out, "# for the collector of docker-compose.yaml: where it starts reading releases,")?;
        writeln!(out, "# and the market's validators it publishes accepted submissions to")?;
        writeln!(out, "MARKET_DEPLOY_BLOCK={}", mf.deploy_block)?;
        if mf.validator_peers.is_empty() {
            writeln!(out, "# (the manifest names no validators yet: `lite-node market peers --set …`)")?;
        }
        writeln!(out, "VALIDATOR_PEERS={}", mf.validator_peers.join(","))?;
        writeln!(out, "# the validators' window: the collector refuses what comes after it")?;
        writeln!(out, "WINDOW_BLOCKS={}", mf.window_blocks.unwrap_or(lite_node_protocol::submission::WINDOW_BLOCKS))?;
        let terms = mf.snapshots.unwrap_or_default();
        writeln!(out, "# what the market takes of a submission's snapshot bytes")?;
        writeln!(out, "REQUIRE_SNAPSHOT={}", terms.required)?;
        writeln!(out, "MAX_SNAPSHOT_BYTES={}", terms.max_bytes)?;
        writeln!(out, "# where the market's data is served; with PAIRS_ON_CHAIN=false (roots only on chain)")?;
        writeln!(out, "# the node reads each epoch's finalized pairs there, proved against the root")?;
        if mf.data_apis.is_empty() {
            writeln!(out, "# (the manifest names no data API yet: `lite-node market peers --apis …`)")?;
        }
        writeln!(out, "PAIRS_ON_CHAIN={}", mf.pairs_on_chain.unwrap_or(true))?;
        writeln!(out, "DATA_API_URLS={}", mf.data_apis.join(","))?;
        writeln!(out, "SIGNER_ACCOUNT_ADDRESS={signer}")?;
        writeln!(out, "# your own key, the one of {signer}: it never leaves your machine")?;
        writeln!(out, "SIGNER_ACCOUNT_PRIVATE_KEY=")?;
        Ok(())
    })
}

/// `lite-node market env --validator`: what a new validator of the market
/// needs — the settings its projects are read with, the market's pinned
/// package and projects, and the flags every validator of the market runs
/// with (its own identity, Redis, listeners and key are its operator's).
fn validator(a: &Args, out: &mut dyn Write) -> Result<()> {
    block_on(async |io| {
        let m = Market::open(&a.manifest, io).await?;
        let mf = &m.manifest;
        writeln!(out, "# a validator of market {} ({}), from {}", mf.data_market, mf.namespace, m.path.display())?;
        writeln!(out, "POWERLOOM_CHAIN={}", mf.anchor.name)?;
        writeln!(out, "NAMESPACE={}", mf.namespace)?;
        writeln!(out, "SOURCE_CHAIN={}", mf.source.name)?;
        identity(mf, out)?;
        let (source, source_notes) = by_freshness("source", &mf.source.rpcs, io).await;
        let (anchor, anchor_notes) = by_freshness("anchor", &mf.anchor.rpcs, io).await;
        for note in source_notes.iter().chain(&anchor_notes) {
            writeln!(out, "# {note}")?;
        }
        let terms = mf.snapshots.unwrap_or_default();
        let mut flags = vec![
            format!("--anchor-rpc {}", anchor.join(",")),
            format!("--source-rpc {}", source.join(",")),
            format!("--protocol-state {}", mf.protocol_state),
            format!("--data-market {}", mf.data_market),
            format!("--from-block {}", mf.deploy_block),
            format!("--window-blocks {}", mf.window_blocks.unwrap_or(lite_node_protocol::submission::WINDOW_BLOCKS)),
            format!("--max-snapshot-bytes {}", terms.max_bytes),
            format!("--pairs-on-chain {}", mf.pairs_on_chain.unwrap_or(true)),
        ];
        if terms.required {
            flags.push("--require-snapshot".into());
        }
        if !mf.validator_peers.is_empty() {
            flags.push(format!("--p2p-bootstrap {}", mf.validator_peers.join(",")));
        }
        writeln!(out, "# the market's flags, the same for every validator (saved as validator.env, the lines above):")?;
        writeln!(out, "#   lite-node --env-file validator.env validator \\")?;
        for flag in &flags {
            writeln!(out, "#     {flag} \\")?;
        }
        writeln!(out, "#     --validator-id … --redis-url … --listen … --api-listen … --p2p-listen … --data-dir …")?;
        writeln!(
            out,
            "# (its own: a Redis of its own, its listeners; `lite-node peer-id --data-dir …` is the peer id"
        )?;
        writeln!(out, "# the market records with `market peers --set`)")?;
        writeln!(out, "# its own key, once the market's owner added its address (`market validators add`):")?;
        writeln!(out, "VALIDATOR_SIGNER_PRIVATE_KEY=")?;
        Ok(())
    })
}

/// The market's compute package and projects (`market pin`), and what
/// identifies them: `lite-node check`, the collector and the validator
/// refuse other ones.
fn identity(mf: &lite_node_chain::market::Manifest, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "# the market's compute package and projects: every node runs exactly these")?;
    match &mf.compute {
        Some(p) => {
            writeln!(out, "SNAPSHOTTER_COMPUTE_REPO={}", p.repo)?;
            writeln!(out, "SNAPSHOTTER_COMPUTE_REPO_BRANCH={}", p.branch)?;
            writeln!(out, "SNAPSHOTTER_COMPUTE_REPO_COMMIT={}", p.commit)?;
            if let Some(path) = &p.path {
                writeln!(out, "SNAPSHOTTER_COMPUTE_REPO_PATH={path}")?;
            }
        }
        None => writeln!(
            out,
            "# (the manifest pins no compute package: the one bundled with lite-node runs; `lite-node market pin \
             --compute-repo …`)"
        )?,
    }
    match &mf.projects {
        Some(p) => {
            writeln!(out, "SNAPSHOT_CONFIG_REPO={}", p.repo)?;
            writeln!(out, "SNAPSHOT_CONFIG_REPO_BRANCH={}", p.branch)?;
            writeln!(out, "SNAPSHOT_CONFIG_REPO_COMMIT={}", p.commit)?;
            writeln!(out, "PROJECTS_CONFIG={}", p.path)?;
        }
        None => writeln!(
            out,
            "# (the manifest pins no projects: set PROJECTS_CONFIG to the market's; `lite-node market pin \
             --projects-repo …`)"
        )?,
    }
    if mf.compute.is_some() || mf.projects.is_some() {
        writeln!(out, "# what identifies them: `lite-node check`, the collector and the validator refuse others")?;
    }
    if let Some(p) = &mf.compute {
        writeln!(out, "MARKET_COMPUTE_COMMIT={}", p.commit)?;
    }
    if let Some(p) = &mf.projects {
        writeln!(out, "MARKET_PROJECTS_HASH={}", p.hash)?;
        writeln!(out, "MARKET_PROJECT_TYPES={}", p.types.join(","))?;
        writeln!(out, "MARKET_POOLS={}", p.pools)?;
        writeln!(out, "MARKET_POOLS_HASH={}", p.pools_hash)?;
    }
    Ok(())
}

/// `urls` as a node should try them: those that answer and are within
/// [`MAX_BEHIND`] blocks of the highest head first (in the manifest's
/// order), then those behind, then those that do not answer now; a note for
/// each one moved back (its URL as messages show it). The node leaves such
/// an endpoint for the fresh ones as well, but only after trying it.
async fn by_freshness(role: &'static str, urls: &[String], io: &IoRuntime) -> (Vec<String>, Vec<String>) {
    let mut heads = Vec::with_capacity(urls.len());
    for url in urls {
        let head = match connect(role, std::slice::from_ref(url), io) {
            Ok(rpc) => match rpc.call_value("eth_blockNumber", json!([])).await {
                Ok(v) => v.as_str().ok_or_else(|| format!("answered {v}")).and_then(|q| {
                    lite_node_protocol::quantity::parse_quantity(q).map_err(|e| format!("answered {q}: {e}"))
                }),
                Err(e) => Err(e.message.to_string()),
            },
            Err(e) => Err(e.to_string()),
        };
        heads.push(head);
    }
    let highest = heads.iter().filter_map(|h| h.as_ref().ok()).copied().max();
    let mut notes = Vec::new();
    let mut ranked: Vec<(u8, &String)> = Vec::with_capacity(urls.len());
    for (url, head) in urls.iter().zip(&heads) {
        let shown = lite_node_core::url::redact_rpc_url(url);
        let rank = match (head, highest) {
            (Ok(h), Some(top)) if top - h <= MAX_BEHIND => 0,
            (Ok(h), Some(top)) => {
                let behind = top - h;
                notes.push(format!(
                    "{role} RPC {shown} is at block {h}, {behind} behind the highest ({top}): listed after the fresh \
                     ones"
                ));
                1
            }
            (Ok(_), None) => 0,
            (Err(why), _) => {
                notes.push(format!("{role} RPC {shown} does not answer now ({why}): listed last"));
                2
            }
        };
        ranked.push((rank, url));
    }
    ranked.sort_by_key(|(rank, _)| *rank);
    (ranked.into_iter().map(|(_, url)| url.clone()).collect(), notes)
}
