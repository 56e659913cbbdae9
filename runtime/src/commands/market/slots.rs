//! `lite-node market slots …`: the slot registry — register, reassign,
//! remove, mark full nodes (each a transaction from the owner's or a
//! registrar's key), list.

use std::io::Write;

use alloy::primitives::U256;
use anyhow::{Result, bail};
use lite_node_chain::market::Market;
use lite_node_protocol::contracts::{
    getFullNodesCall, getTotalNodeCountCall, reassignSlotCall, registerSlotCall, removeSlotCall, setFullNodeCall,
};

use super::{AccessArgs, ManifestArg, block_on, parse_address, progress};
use crate::exit::BadInput;

/// `lite-node market slots`'s sub-verbs.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Command {
    /// Register the next slot (slots register in order) to a signer.
    Register {
        /// The signer's address.
        #[arg(long, value_name = "ADDRESS")]
        signer: String,
        /// The slot (default: the next; any other is refused).
        #[arg(long, value_name = "N")]
        slot: Option<u64>,
        #[command(flatten)]
        access: AccessArgs,
    },
    /// Give a registered slot to another signer.
    Reassign {
        #[arg(long, value_name = "N")]
        slot: u64,
        /// The new signer's address.
        #[arg(long, value_name = "ADDRESS")]
        signer: String,
        #[command(flatten)]
        access: AccessArgs,
    },
    /// Remove the last slot.
    Remove {
        #[arg(long, value_name = "N")]
        slot: u64,
        #[command(flatten)]
        access: AccessArgs,
    },
    /// Mark a slot as a full node of the market (`--off`: unmark it).
    FullNode {
        #[arg(long, value_name = "N")]
        slot: u64,
        /// Unmark instead.
        #[arg(long)]
        off: bool,
        #[command(flatten)]
        access: AccessArgs,
    },
    /// Every registered slot with its signer, full nodes marked.
    List(ManifestArg),
}

/// `lite-node market slots …`.
pub fn run(verb: Command, out: &mut dyn Write) -> Result<()> {
    let manifest = match &verb {
        Command::Register { access, .. }
        | Command::Reassign { access, .. }
        | Command::Remove { access, .. }
        | Command::FullNode { access, .. } => &access.manifest,
        Command::List(m) => &m.manifest,
    }
    .clone();
    block_on(async |io| {
        let m = Market::open(&manifest, io).await?;
        let count = u64::try_from(m.view(getTotalNodeCountCall {}).await?).unwrap_or(u64::MAX);
        let registered = |slot: u64| -> Result<()> {
            if slot == 0 || slot > count {
                bail!(BadInput(format!("--slot {slot}: not a registered slot (slots 1 to {count} are)")));
            }
            Ok(())
        };
        match verb {
            Command::Register { slot, signer, access } => {
                let signer = parse_address("--signer", &signer)?;
                let next = count + 1;
                match slot {
                    // Run again after it worked (or after a failure once
                    // the transaction was sent): the signer's slot is found,
                    // not a second one given.
                    None => {
                        let held: Vec<String> = (1..)
                            .zip(m.signers().await?)
                            .filter(|(_, s)| *s == signer)
                            .map(|(slot, _)| slot.to_string())
                            .collect();
                        if !held.is_empty() {
                            writeln!(
                                out,
                                "{signer} already holds slot {}: nothing sent (to register another slot to it, give \
                                 --slot {next})",
                                held.join(", ")
                            )?;
                            return Ok(());
                        }
                    }
                    Some(slot) if slot >= 1 && slot <= count => {
                        let holder = m.signer_of(slot).await?;
                        if holder == signer {
                            writeln!(out, "slot {slot} is already registered to {signer}: nothing sent")?;
                            return Ok(());
                        }
                        bail!(BadInput(format!(
                            "--slot {slot}: taken by {holder} (give it to another signer with `market slots reassign`)"
                        )));
                    }
                    Some(slot) if slot != next => {
                        bail!(BadInput(format!("--slot {slot}: slots register in order; the next is {next}")));
                    }
                    Some(_) => {}
                }
                let call = registerSlotCall { slotId: U256::from(next), snapshotter: signer };
                let block = m.send(&access.sender(&m, "registerSlot")?, call, "registerSlot", &mut progress()).await?;
                writeln!(out, "slot {next} registered to {signer} (block {block})")?;
            }
            Command::Reassign { slot, signer, access } => {
                registered(slot)?;
                let signer = parse_address("--signer", &signer)?;
                if m.signer_of(slot).await? == signer {
                    writeln!(out, "slot {slot} is already registered to {signer}: nothing sent")?;
                    return Ok(());
                }
                let call = reassignSlotCall { slotId: U256::from(slot), snapshotter: signer };
                let block = m.send(&access.sender(&m, "reassignSlot")?, call, "reassignSlot", &mut progress()).await?;
                writeln!(out, "slot {slot} reassigned to {signer} (block {block})")?;
            }
            Command::Remove { slot, access } => {
                registered(slot)?;
                if slot != count {
                    bail!(BadInput(format!("--slot {slot}: only the last slot ({count}) can be removed")));
                }
                let call = removeSlotCall { slotId: U256::from(slot) };
                let block = m.send(&access.sender(&m, "removeSlot")?, call, "removeSlot", &mut progress()).await?;
                writeln!(out, "slot {slot} removed (block {block})")?;
            }
            Command::FullNode { slot, off, access } => {
                let on = !off;
                registered(slot)?;
                let full = m.view(getFullNodesCall { dataMarketAddress: m.manifest.data_market }).await?;
                if full.contains(&U256::from(slot)) == on {
                    let state = if on { "already a full node" } else { "not a full node" };
                    writeln!(out, "slot {slot} is {state} of market {}: nothing sent", m.manifest.data_market)?;
                    return Ok(());
                }
                let call =
                    setFullNodeCall { dataMarketAddress: m.manifest.data_market, slotId: U256::from(slot), full: on };
                let block = m.send(&access.sender(&m, "setFullNode")?, call, "setFullNode", &mut progress()).await?;
                let state = if on { "a full node" } else { "no longer a full node" };
                writeln!(out, "slot {slot} is {state} of market {} (block {block})", m.manifest.data_market)?;
            }
            Command::List(_) => {
                let full = m.view(getFullNodesCall { dataMarketAddress: m.manifest.data_market }).await?;
                writeln!(out, "{count} slot(s) registered")?;
                for slot in 1..=count {
                    let signer = m.signer_of(slot).await?;
                    let role = if full.contains(&U256::from(slot)) { "  full node" } else { "" };
                    writeln!(out, "slot {slot}: {signer}{role}")?;
                }
            }
        }
        Ok(())
    })
}
