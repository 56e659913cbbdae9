//! `lite-node market days --epochs-per-day N`: the market's day schedule,
//! set by the owner.

use std::io::Write;

use alloy::primitives::U256;
use anyhow::{Result, bail};
use lite_node_chain::market::Market;
use lite_node_protocol::contracts::{epochsPerDayCall, setEpochsPerDayCall};

use super::{AccessArgs, block_on, progress};
use crate::exit::BadInput;

/// `lite-node market days`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    #[arg(long, value_name = "N")]
    pub epochs_per_day: u64,
    #[command(flatten)]
    pub access: AccessArgs,
}

/// Sets the day schedule from the next release.
pub fn run(a: &Args, out: &mut dyn Write) -> Result<()> {
    if a.epochs_per_day == 0 {
        bail!(BadInput("--epochs-per-day 0: a day is at least one epoch".into()));
    }
    block_on(async |io| {
        let m = Market::open(&a.access.manifest, io).await?;
        let dm = m.manifest.data_market;
        if m.view(epochsPerDayCall { dataMarketAddress: dm }).await? == U256::from(a.epochs_per_day) {
            writeln!(out, "a day already starts every {} epochs: nothing sent", a.epochs_per_day)?;
            return Ok(());
        }
        let call = setEpochsPerDayCall { dataMarketAddress: dm, n: U256::from(a.epochs_per_day) };
        let block = m.send(&a.access.sender(&m, "setEpochsPerDay")?, call, "setEpochsPerDay", &mut progress()).await?;
        writeln!(out, "a day starts every {} epochs from the next release (block {block})", a.epochs_per_day)?;
        Ok(())
    })
}
