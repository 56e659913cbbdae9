//! `lite-node market status`: what the chain says of the market its
//! manifest names.

use std::{io::Write, path::Path};

use alloy::primitives::U256;
use anyhow::Result;
use lite_node_chain::market::{LOG_SPAN, LOG_SPANS, Market};
use lite_node_protocol::{
    contracts::{
        currentEpochIdCall, epochsPerDayCall, getTotalNodeCountCall, getTotalValidatorsCountCall, lastReleasedEndCall,
        ownerCall, storedCidsCall,
    },
    quantity::quantity,
};
use serde_json::json;

use super::block_on;

/// Prints what the chain says of the market the manifest names.
pub fn run(manifest_path: &Path, out: &mut dyn Write) -> Result<()> {
    block_on(async |io| {
        let market = Market::open(manifest_path, io).await?;
        let source = market.source(io).await?;
        let m = &market.manifest;
        let dm = m.data_market;
        let owner = market.view(ownerCall {}).await?;
        let epoch = market.view(currentEpochIdCall { dataMarketAddress: dm }).await?;
        let last_end = market.view(lastReleasedEndCall { dataMarketAddress: dm }).await?;
        let per_day = market.view(epochsPerDayCall { dataMarketAddress: dm }).await?;
        let slots = market.view(getTotalNodeCountCall {}).await?;
        let validators = market.view(getTotalValidatorsCountCall { dataMarketAddress: dm }).await?;
        let head = quantity(&source.call_value("eth_blockNumber", json!([])).await?)?;
        writeln!(
            out,
            "market {dm} (namespace {}), ProtocolState {} on chain {}",
            m.namespace, m.protocol_state, m.anchor.chain_id
        )?;
        writeln!(out, "owner: {owner}")?;
        let days = if per_day.is_zero() { "no day schedule".to_owned() } else { format!("days of {per_day} epochs") };
        let size = if m.epoch_size == 1 { "1 block".to_owned() } else { format!("{} blocks", m.epoch_size) };
        writeln!(out, "epochs released: {epoch} (epoch size {size}; {days})")?;
        if last_end.is_zero() {
            writeln!(out, "releaser: nothing released yet (source chain {} head {head})", m.source.chain_id)?;
        } else {
            let lag = U256::from(head).saturating_sub(last_end);
            writeln!(out, "releaser: released up to source block {last_end}, head {head} ({lag} blocks behind)")?;
        }
        match market.last_finalized().await? {
            Some((epoch_id, block)) => {
                let stored =
                    market.view(storedCidsCall { dataMarketAddress: dm, epochId: U256::from(epoch_id) }).await?;
                writeln!(out, "last finalized: epoch {epoch_id} (anchor block {block}; {stored} project CIDs stored)")?
            }
            None => writeln!(out, "last finalized: none in the last {} anchor blocks", LOG_SPAN * LOG_SPANS)?,
        }
        writeln!(out, "slots registered: {slots}")?;
        writeln!(out, "validators: {validators}")?;
        Ok(())
    })
}
