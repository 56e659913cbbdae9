//! `lite-node market env --slot N`: the `.env` block of a slot's operator.

use std::{io::Write, path::PathBuf};

use anyhow::{Result, bail};
use lite_node_chain::market::Market;
use lite_node_protocol::contracts::getTotalNodeCountCall;

use super::block_on;
use crate::exit::BadInput;

/// `lite-node market env`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// The slot.
    #[arg(long, value_name = "N")]
    pub slot: u64,
    /// The market's manifest.
    #[arg(long, value_name = "PATH", default_value = "market.json")]
    pub manifest: PathBuf,
}

/// `lite-node market env --slot N`: the lines an operator pastes into the
/// node's `.env` for slot N. The private key is the operator's own: its
/// line is left for them to fill.
pub fn run(a: &Args, out: &mut dyn Write) -> Result<()> {
    let slot = a.slot;
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
        writeln!(out, "SOURCE_RPC_URL={}", mf.source.rpcs.join(","))?;
        writeln!(out, "SOURCE_CHAIN={}", mf.source.name)?;
        writeln!(out, "POWERLOOM_RPC_URL={}", mf.anchor.rpcs.join(","))?;
        writeln!(out, "POWERLOOM_CHAIN={}", mf.anchor.name)?;
        writeln!(out, "PROTOCOL_STATE_CONTRACT={}", mf.protocol_state)?;
        writeln!(out, "DATA_MARKET_CONTRACT={}", mf.data_market)?;
        writeln!(out, "NAMESPACE={}", mf.namespace)?;
        writeln!(out, "SLOT_ID={slot}")?;
        writeln!(out, "# for the collector of docker-compose.yaml: where it starts reading releases,")?;
        writeln!(out, "# and the market's validators it publishes accepted submissions to")?;
        writeln!(out, "MARKET_DEPLOY_BLOCK={}", mf.deploy_block)?;
        if mf.validator_peers.is_empty() {
            writeln!(out, "# (the manifest names no validators yet: `lite-node market peers --set …`)")?;
        }
        writeln!(out, "VALIDATOR_PEERS={}", mf.validator_peers.join(","))?;
        writeln!(out, "SIGNER_ACCOUNT_ADDRESS={signer}")?;
        writeln!(out, "# your own key, the one of {signer}: it never leaves your machine")?;
        writeln!(out, "SIGNER_ACCOUNT_PRIVATE_KEY=")?;
        Ok(())
    })
}
