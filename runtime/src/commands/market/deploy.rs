//! `lite-node market deploy`: the production ProtocolState (`contracts/out/`,
//! embedded in the binary) on the anchor chain with the deployer's key, and
//! the market's manifest written.

use std::{io::Write, path::PathBuf};

use alloy::primitives::{Address, Bytes};
use anyhow::{Context, Result, anyhow, bail};
use lite_node_chain::{
    TxSender,
    market::{ChainEntry, Manifest, PendingDeploy, chain_id, connect},
};
use serde_json::Value;

use super::{block_on, read_key};
use crate::exit::BadInput;

/// The production contract as the pinned solc compiled it (a test holds
/// the checked-in artifact to the sources).
const PROTOCOL_STATE: &str = include_str!("../../../../contracts/out/ProtocolState.json");

/// `lite-node market deploy`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// The anchor chain's JSON-RPC URL, where ProtocolState lives (repeat
    /// for several).
    #[arg(long, value_name = "URL", required = true)]
    pub anchor_rpc: Vec<String>,
    /// The source chain's JSON-RPC URL, where the market's data is (repeat
    /// for several; default: the anchor's).
    #[arg(long, value_name = "URL")]
    pub source_rpc: Vec<String>,
    /// A file holding the deployer's private key (64 hex digits), which
    /// owns the contract; never printed.
    #[arg(long, value_name = "PATH")]
    pub key_file: PathBuf,
    /// Source-chain blocks per epoch.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub epoch_size: u64,
    /// Epochs per day: the contract starts a day every N epochs.
    #[arg(long, value_name = "N")]
    pub epochs_per_day: Option<u64>,
    /// The namespace in the market's project ids.
    #[arg(long, value_name = "NS")]
    pub namespace: String,
    /// The anchor chain's name in project ids, POWERLOOM_CHAIN (default:
    /// `chain` and its id).
    #[arg(long, value_name = "NAME")]
    pub anchor_chain: Option<String>,
    /// The source chain's name in project ids, SOURCE_CHAIN.
    #[arg(long, value_name = "NAME", default_value = "ETH")]
    pub source_chain: String,
    /// The market's identity in ProtocolState (default: the contract's
    /// own address).
    #[arg(long, value_name = "ADDRESS")]
    pub data_market: Option<String>,
    /// The validators' window, in anchor blocks after a release (their
    /// --window-blocks; default 130, every deadline a node may sign): the
    /// manifest publishes it for the operators' collectors.
    #[arg(long, value_name = "N", value_parser = crate::commands::validator::at_least_one_block)]
    pub window_blocks: Option<u64>,
    /// What the market takes of the snapshot bytes, written in the manifest
    /// (`market env` tells the operators' collectors): with
    /// --require-snapshot every CID the validators finalize is one they can
    /// serve.
    #[command(flatten)]
    pub snapshot: crate::commands::SnapshotArgs,
    /// Whether the validators store each finalized epoch's pairs on chain
    /// after its root (~109k gas a project). `false`: roots only, the same gas
    /// at 10 projects or 10,000; nodes and consumers read the pairs from the
    /// validators' APIs (`market peers --apis`), proved against the root.
    #[arg(long, value_name = "true|false", num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub pairs_on_chain: bool,
    /// Where to write the manifest (never over an existing file).
    #[arg(long, value_name = "PATH", default_value = "market.json")]
    pub out: PathBuf,
}

/// Deploys ProtocolState and writes the manifest to `o.out`.
pub fn run(o: &Args, out: &mut dyn Write) -> Result<()> {
    // A manifest already at --out: this deploy ran before (said below, once
    // its chain is reached), or the path is another file's.
    let existing = if o.out.exists() {
        Some(Manifest::load(&o.out).map_err(|_| {
            BadInput(format!(
                "--out {}: a file is there (a market's manifest is never overwritten): move it, or give another path",
                o.out.display()
            ))
        })?)
    } else {
        None
    };
    if o.epoch_size == 0 {
        bail!(BadInput("--epoch-size 0: an epoch is at least one block".into()));
    }
    if o.epochs_per_day == Some(0) {
        bail!(BadInput("--epochs-per-day 0: a day is at least one epoch".into()));
    }
    let word = |flag: &str, text: &str| -> Result<()> {
        if text.is_empty() || !text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!(BadInput(format!("{flag} `{text}`: letters, digits and `_` only (it is a part of project ids)")));
        }
        Ok(())
    };
    word("--namespace", &o.namespace)?;
    word("--source-chain", &o.source_chain)?;
    if let Some(name) = &o.anchor_chain {
        word("--anchor-chain", name)?;
    }
    let data_market = o
        .data_market
        .as_deref()
        .map(|t| t.parse::<Address>().map_err(|_| BadInput(format!("--data-market {t}: not an address"))))
        .transpose()?;
    let key = read_key(&o.key_file)?;
    let (anchor_rpcs, source_rpcs) =
        (o.anchor_rpc.clone(), if o.source_rpc.is_empty() { o.anchor_rpc.clone() } else { o.source_rpc.clone() });

    let manifest = block_on(async |io| {
        let anchor = connect("anchor", &anchor_rpcs, io)?;
        let source = connect("source", &source_rpcs, io)?;
        let anchor_id = chain_id(&anchor, "--anchor-rpc", &anchor_rpcs).await?;
        let source_id = chain_id(&source, "--source-rpc", &source_rpcs).await?;
        if let Some(m) = existing {
            let code = anchor.call_value("eth_getCode", serde_json::json!([m.protocol_state, "latest"])).await?;
            let deployed = code.as_str().is_some_and(|c| !c.trim_start_matches("0x").is_empty());
            if m.anchor.chain_id != anchor_id || !deployed {
                bail!(BadInput(format!(
                    "--out {}: the manifest there names ProtocolState {} on chain {}, which this anchor RPC (chain \
                     {anchor_id}) does not hold: move it, or give another path",
                    o.out.display(),
                    m.protocol_state,
                    m.anchor.chain_id
                )));
            }
            lite_node_chain::market::check_not_reset(&o.out, &m, &anchor).await?;
            // A deployment record left by a run stopped after the manifest
            // was written is done with.
            let _ = std::fs::remove_file(PendingDeploy::path(&o.out));
            writeln!(
                out,
                "market {} is already deployed (ProtocolState {}, block {}): {} names it; nothing sent",
                m.data_market,
                m.protocol_state,
                m.deploy_block,
                o.out.display()
            )?;
            return Ok(None);
        }
        let anchor = std::sync::Arc::new(anchor);
        let sender = TxSender::new(anchor.clone(), key.bytes(), anchor_id)
            .map_err(|e| BadInput(format!("--key-file {}: {e}", o.key_file.display())))?;
        writeln!(out, "deploying ProtocolState on chain {anchor_id} from {}", sender.address())?;
        let deployed = lite_node_chain::market::deploy(
            &sender,
            bytecode()?,
            data_market,
            o.epochs_per_day,
            Some(&o.out),
            &mut super::progress(),
        )
        .await?;
        Ok::<_, anyhow::Error>(Some(Manifest {
            version: 1,
            anchor: ChainEntry {
                name: o.anchor_chain.clone().unwrap_or_else(|| format!("chain{anchor_id}")),
                chain_id: anchor_id,
                rpcs: anchor_rpcs,
            },
            source: ChainEntry { name: o.source_chain.clone(), chain_id: source_id, rpcs: source_rpcs },
            protocol_state: deployed.protocol_state,
            data_market: deployed.data_market,
            deployer: deployed.deployer,
            deploy_block: deployed.block,
            deploy_block_hash: deployed.block_hash,
            epoch_size: o.epoch_size,
            epochs_per_day: o.epochs_per_day,
            namespace: o.namespace.clone(),
            validator_peers: Vec::new(),
            window_blocks: o.window_blocks,
            snapshots: Some(lite_node_chain::market::SnapshotTerms {
                required: o.snapshot.require_snapshot,
                max_bytes: o.snapshot.max_snapshot_bytes,
            }),
            pairs_on_chain: Some(o.pairs_on_chain),
            data_apis: Vec::new(),
            compute: None,
            projects: None,
        }))
    })?;
    let Some(manifest) = manifest else { return Ok(()) };
    let text = serde_json::to_string_pretty(&manifest)? + "\n";
    lite_node_core::atomic_file::write_durable(&o.out, text.as_bytes())
        .with_context(|| format!("writing the manifest to {}", o.out.display()))?;
    // The manifest names the market now: the record of the deployment in
    // flight is done with.
    let _ = std::fs::remove_file(PendingDeploy::path(&o.out));
    writeln!(
        out,
        "market {} (namespace {}): manifest written to {}",
        manifest.data_market,
        manifest.namespace,
        o.out.display()
    )?;
    Ok(())
}

/// ProtocolState's creation code from the embedded artifact.
fn bytecode() -> Result<Bytes> {
    let artifact: Value = serde_json::from_str(PROTOCOL_STATE).context("the embedded ProtocolState artifact")?;
    let code = artifact["bytecode"].as_str().ok_or_else(|| anyhow!("the embedded artifact has no bytecode"))?;
    code.parse().map_err(|e| anyhow!("the embedded bytecode: {e}"))
}
