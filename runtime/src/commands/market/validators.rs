//! `lite-node market validators …`: the market's validators — add and
//! remove (the owner's key), list.

use std::io::Write;

use anyhow::{Result, bail};
use lite_node_chain::market::Market;
use lite_node_protocol::contracts::{getValidatorsCall, updateAddressesCall};

use super::{AccessArgs, ManifestArg, block_on, parse_address, progress};
use crate::exit::BadInput;

/// `lite-node market validators`'s sub-verbs.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Command {
    /// Make addresses validators of the market.
    Add {
        /// The validators' addresses.
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        #[command(flatten)]
        access: AccessArgs,
    },
    /// Remove validators (their attestations stop counting at once).
    Remove {
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        #[command(flatten)]
        access: AccessArgs,
    },
    /// The market's validators.
    List(ManifestArg),
}

/// `lite-node market validators …`.
pub fn run(verb: Command, out: &mut dyn Write) -> Result<()> {
    let manifest = match &verb {
        Command::Add { access, .. } | Command::Remove { access, .. } => &access.manifest,
        Command::List(m) => &m.manifest,
    }
    .clone();
    block_on(async |io| {
        let m = Market::open(&manifest, io).await?;
        let dm = m.manifest.data_market;
        let change = |addrs: &[String], allowed: bool| -> Result<updateAddressesCall> {
            if addrs.is_empty() {
                bail!(BadInput("name at least one validator's address".into()));
            }
            let addrs = addrs.iter().map(|a| parse_address("validator", a)).collect::<Result<Vec<_>>>()?;
            Ok(updateAddressesCall { dataMarketAddress: dm, role: 0, allowed: vec![allowed; addrs.len()], addrs })
        };
        let on = matches!(verb, Command::Add { .. });
        match verb {
            Command::Add { addresses, access } | Command::Remove { addresses, access } => {
                let mut call = change(&addresses, on)?;
                // What is already so is said, not sent again.
                let current = m.view(getValidatorsCall { dataMarketAddress: dm }).await?;
                let (to_change, already): (Vec<_>, Vec<_>) = call.addrs.iter().partition(|a| current.contains(a) != on);
                if !already.is_empty() {
                    let state = if on { "already a validator" } else { "not a validator" };
                    for a in &already {
                        writeln!(out, "{a} is {state}: nothing sent for it")?;
                    }
                }
                if to_change.is_empty() {
                    return Ok(());
                }
                call.allowed = vec![on; to_change.len()];
                call.addrs = to_change;
                let shown: Vec<String> = call.addrs.iter().map(ToString::to_string).collect();
                let block =
                    m.send(&access.sender(&m, "updateAddresses")?, call, "updateAddresses", &mut progress()).await?;
                let done = if on { "added" } else { "removed" };
                writeln!(out, "{} {done} (block {block})", shown.join(", "))?;
            }
            Command::List(_) => {
                let validators = m.view(getValidatorsCall { dataMarketAddress: dm }).await?;
                writeln!(out, "{} validator(s) of market {dm}", validators.len())?;
                for v in validators {
                    writeln!(out, "{v}")?;
                }
            }
        }
        Ok(())
    })
}
