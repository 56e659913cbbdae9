//! `lite-node market days --epochs-per-day N`: the market's day schedule,
//! set by the owner.

use std::io::Write;

use alloy::primitives::U256;
use anyhow::{Result, bail};
use lite_node_chain::market::Market;
use lite_node_protocol::contracts::setEpochsPerDayCall;

use super::{AccessArgs, block_on};
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
        let call = setEpochsPerDayCall { dataMarketAddress: m.manifest.data_market, n: U256::from(a.epochs_per_day) };
        let block = m.send(&a.access.sender(&m, "setEpochsPerDay")?, call, "setEpochsPerDay").await?;
        writeln!(out, "a day starts every {} epochs from the next release (block {block})", a.epochs_per_day)?;
        Ok(())
    })
}
