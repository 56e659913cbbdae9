//! `lite-node market status`: what the chain says of the market its
//! manifest names.

use std::{io::Write, path::Path};

use alloy::primitives::U256;
use anyhow::Result;
use lite_node_chain::market::{LOG_SPAN, LOG_SPANS, Market};
use lite_node_protocol::{
    contracts::{
        currentEpochIdCall, epochBatchCall, epochsPerDayCall, getTotalNodeCountCall, getTotalValidatorsCountCall,
        lastReleasedEndCall, ownerCall, storedCidsCall,
    },
    quantity::quantity,
};
use serde_json::json;

use super::block_on;

/// The finalized epochs `status` shows the projects of.
const RECENT: usize = 10;

/// How long the source chain's head may take to read.
const SOURCE_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Empty finalized epochs in a row that `status` warns of.
const EMPTY_RUN: usize = 3;

/// The root of an empty batch (ProtocolState's `merkleRoot` of nothing).
const EMPTY_ROOT: alloy::primitives::B256 = alloy::primitives::KECCAK256_EMPTY;

/// Prints what the chain says of the market the manifest names.
pub fn run(manifest_path: &Path, out: &mut dyn Write) -> Result<()> {
    block_on(async |io| {
        let market = Market::open(manifest_path, io).await?;
        // The source chain only gives the releaser's lag: one that stalls
        // leaves the rest of the status to be said.
        let head = tokio::time::timeout(SOURCE_WITHIN, async {
            let source = market.source(io).await?;
            Ok::<_, anyhow::Error>(quantity(&source.call_value("eth_blockNumber", json!([])).await?)?)
        })
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {} s", SOURCE_WITHIN.as_secs())))
        .map_err(|e| format!("{e:#}"));
        let m = &market.manifest;
        let dm = m.data_market;
        let owner = market.view(ownerCall {}).await?;
        let epoch = market.view(currentEpochIdCall { dataMarketAddress: dm }).await?;
        let last_end = market.view(lastReleasedEndCall { dataMarketAddress: dm }).await?;
        let per_day = market.view(epochsPerDayCall { dataMarketAddress: dm }).await?;
        let slots = market.view(getTotalNodeCountCall {}).await?;
        let validators = market.view(getTotalValidatorsCountCall { dataMarketAddress: dm }).await?;
        writeln!(
            out,
            "market {dm} (namespace {}), ProtocolState {} on chain {}",
            m.namespace, m.protocol_state, m.anchor.chain_id
        )?;
        writeln!(out, "owner: {owner}")?;
        let days = if per_day.is_zero() { "no day schedule".to_owned() } else { format!("days of {per_day} epochs") };
        let size = if m.epoch_size == 1 { "1 block".to_owned() } else { format!("{} blocks", m.epoch_size) };
        writeln!(out, "epochs released: {epoch} (epoch size {size}; {days})")?;
        match &head {
            Ok(head) if last_end.is_zero() => {
                writeln!(out, "releaser: nothing released yet (source chain {} head {head})", m.source.chain_id)?
            }
            Ok(head) => {
                let lag = U256::from(*head).saturating_sub(last_end);
                writeln!(out, "releaser: released up to source block {last_end}, head {head} ({lag} blocks behind)")?
            }
            Err(why) => writeln!(
                out,
                "releaser: released up to source block {last_end}; the source chain's head is unknown: {} {why}",
                lite_node_chain::market::shown(&m.source.rpcs)
            )?,
        }
        let recent = market.recent_finalized(RECENT).await?;
        match recent.first() {
            Some(&(epoch_id, block)) => {
                let stored =
                    market.view(storedCidsCall { dataMarketAddress: dm, epochId: U256::from(epoch_id) }).await?;
                writeln!(out, "last finalized: epoch {epoch_id} (anchor block {block}; {stored} project CIDs stored)")?
            }
            None => writeln!(out, "last finalized: none in the last {} anchor blocks", LOG_SPAN * LOG_SPANS)?,
        }
        // How many projects each of the last epochs finalized: a run of
        // empty ones is a market whose submissions reach no validator.
        let mut counts = Vec::new();
        for &(epoch_id, _) in &recent {
            let e = U256::from(epoch_id);
            let batch = market.view(epochBatchCall { dataMarketAddress: dm, epochId: e }).await?;
            // None: finalized empty; Some(0): its CIDs are being stored.
            let projects = if batch.root == EMPTY_ROOT {
                None
            } else {
                let stored: U256 = market.view(storedCidsCall { dataMarketAddress: dm, epochId: e }).await?;
                Some(u64::try_from(stored).unwrap_or(u64::MAX))
            };
            counts.push((epoch_id, projects));
        }
        if !counts.is_empty() {
            let shown: Vec<String> = counts
                .iter()
                .map(|(e, n)| match n {
                    None => format!("{e}: empty"),
                    Some(0) => format!("{e}: storing"),
                    Some(n) => format!("{e}: {n}"),
                })
                .collect();
            writeln!(out, "projects finalized, newest first: {}", shown.join(", "))?;
        }
        let empty_run = counts.iter().take_while(|(_, n)| n.is_none()).count();
        if empty_run >= EMPTY_RUN {
            writeln!(
                out,
                "warning: the last {empty_run} finalized epochs are empty: no submission reached the validators \
                 (check the collectors' and the validators' /health, and that nodes are selected and submitting)"
            )?;
        }
        writeln!(out, "slots registered: {slots}")?;
        writeln!(out, "validators: {validators}")?;
        if let Err(why) = head {
            anyhow::bail!("the source chain did not answer ({why}): the releaser's lag is unknown");
        }
        Ok(())
    })
}
