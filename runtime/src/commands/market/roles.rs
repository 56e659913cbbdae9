//! `lite-node market roles …`: the owner's grants — releasers, slot
//! registrars, ownership — each a transaction from the owner's key, and
//! the roles an address holds.

use std::io::Write;

use alloy::primitives::Address;
use anyhow::{Result, bail};
use lite_node_chain::market::Market;
use lite_node_protocol::contracts::{
    getValidatorsCall, isRegistrarCall, isReleaserCall, ownerCall, setRegistrarCall, setReleaserCall,
    transferOwnershipCall,
};

use super::{AccessArgs, ManifestArg, block_on, parse_address, progress};
use crate::exit::BadInput;

/// A role the owner grants: who may release epochs, or register slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// May release epochs (`lite-node market release`).
    Releaser,
    /// May register, reassign and remove slots.
    Registrar,
}

/// `lite-node market roles`'s sub-verbs.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Command {
    /// Grant a role to addresses (the owner's key).
    Grant {
        #[arg(value_enum)]
        role: Role,
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        #[command(flatten)]
        access: AccessArgs,
    },
    /// Revoke a role from addresses (the owner's key).
    Revoke {
        #[arg(value_enum)]
        role: Role,
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        #[command(flatten)]
        access: AccessArgs,
    },
    /// The roles each address holds: owner, releaser, registrar, validator.
    Show {
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        #[command(flatten)]
        manifest: ManifestArg,
    },
    /// Hand ProtocolState to a new owner (the current owner's key). When the
    /// current owner also releases or registers, say what becomes of those
    /// roles: a transfer away from a key most often retires it.
    TransferOwnership {
        /// The new owner's address.
        #[arg(long, value_name = "ADDRESS")]
        to: String,
        /// Revoke the current owner's releaser and registrar roles first.
        #[arg(long, conflicts_with = "keep_roles")]
        revoke_roles: bool,
        /// The current owner keeps its releaser and registrar roles.
        #[arg(long)]
        keep_roles: bool,
        #[command(flatten)]
        access: AccessArgs,
    },
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Releaser => "releaser",
            Role::Registrar => "registrar",
        }
    }
}

/// `lite-node market roles …`: the owner's grants (releasers, slot
/// registrars, ownership), each sent from the owner's key, and what an
/// address may do.
pub fn run(verb: Command, out: &mut dyn Write) -> Result<()> {
    let manifest = match &verb {
        Command::Grant { access, .. } | Command::Revoke { access, .. } | Command::TransferOwnership { access, .. } => {
            &access.manifest
        }
        Command::Show { manifest, .. } => &manifest.manifest,
    }
    .clone();
    block_on(async |io| {
        let m = Market::open(&manifest, io).await?;
        let parse_all = |addrs: &[String], what: &str| -> Result<Vec<Address>> {
            if addrs.is_empty() {
                bail!(BadInput(format!("name at least one {what}'s address")));
            }
            addrs.iter().map(|a| parse_address(what, a)).collect()
        };
        let granting = matches!(verb, Command::Grant { .. });
        match verb {
            Command::Grant { role, addresses, access } | Command::Revoke { role, addresses, access } => {
                let allowed = &granting;
                let what = match role {
                    Role::Releaser => "setReleaser",
                    Role::Registrar => "setRegistrar",
                };
                let accounts = parse_all(&addresses, role.name())?;
                let sender = access.sender(&m, what)?;
                for account in accounts {
                    let holds = match role {
                        Role::Releaser => m.view(isReleaserCall { account }).await?,
                        Role::Registrar => m.view(isRegistrarCall { account }).await?,
                    };
                    if holds == *allowed {
                        let state = if *allowed { "already" } else { "not" };
                        writeln!(out, "{account} is {state} a {}: nothing sent", role.name())?;
                        continue;
                    }
                    let block = match role {
                        Role::Releaser => {
                            m.send(
                                &sender,
                                setReleaserCall { account, allowed: *allowed },
                                "setReleaser",
                                &mut progress(),
                            )
                            .await?
                        }
                        Role::Registrar => {
                            m.send(
                                &sender,
                                setRegistrarCall { account, allowed: *allowed },
                                "setRegistrar",
                                &mut progress(),
                            )
                            .await?
                        }
                    };
                    let done = if *allowed { "is now" } else { "is no longer" };
                    writeln!(out, "{account} {done} a {} (block {block})", role.name())?;
                }
            }
            Command::Show { addresses, .. } => {
                let owner = m.view(ownerCall {}).await?;
                let dm = m.manifest.data_market;
                let validators = m.view(getValidatorsCall { dataMarketAddress: dm }).await?;
                for account in parse_all(&addresses, "account")? {
                    let mut roles = Vec::new();
                    if account == owner {
                        roles.push("owner");
                    }
                    if m.view(isReleaserCall { account }).await? {
                        roles.push("releaser");
                    }
                    if m.view(isRegistrarCall { account }).await? {
                        roles.push("registrar");
                    }
                    if validators.contains(&account) {
                        roles.push("validator");
                    }
                    let roles = if roles.is_empty() { "no role".to_owned() } else { roles.join(", ") };
                    writeln!(out, "{account}: {roles}")?;
                }
            }
            Command::TransferOwnership { to, revoke_roles, keep_roles, access } => {
                let new_owner = parse_address("--to", &to)?;
                if new_owner == Address::ZERO {
                    bail!(BadInput("--to 0x0…0: a market without an owner could never grant a role again".into()));
                }
                let owner = m.view(ownerCall {}).await?;
                if owner == new_owner {
                    writeln!(
                        out,
                        "ProtocolState {} is already owned by {new_owner}: nothing sent",
                        m.manifest.protocol_state
                    )?;
                    return Ok(());
                }
                // The roles the current owner holds besides: kept only when
                // asked, since a transfer away from a key most often retires
                // it (and a lost key would keep releasing and registering).
                let mut held = Vec::new();
                if m.view(isReleaserCall { account: owner }).await? {
                    held.push(Role::Releaser);
                }
                if m.view(isRegistrarCall { account: owner }).await? {
                    held.push(Role::Registrar);
                }
                let names: Vec<&str> = held.iter().map(|r| r.name()).collect();
                if !held.is_empty() && !revoke_roles && !keep_roles {
                    bail!(BadInput(format!(
                        "the current owner {owner} is also {}: add --revoke-roles to revoke them before the transfer, \
                         or --keep-roles to leave them",
                        names.join(" and ")
                    )));
                }
                let sender = access.sender(&m, "transferOwnership")?;
                if revoke_roles {
                    for role in &held {
                        let block = match role {
                            Role::Releaser => {
                                let call = setReleaserCall { account: owner, allowed: false };
                                m.send(&sender, call, "setReleaser", &mut progress()).await?
                            }
                            Role::Registrar => {
                                let call = setRegistrarCall { account: owner, allowed: false };
                                m.send(&sender, call, "setRegistrar", &mut progress()).await?
                            }
                        };
                        writeln!(out, "{owner} is no longer a {} (block {block})", role.name())?;
                    }
                } else if !held.is_empty() {
                    writeln!(out, "{owner} stays a {} (--keep-roles)", names.join(" and "))?;
                }
                let call = transferOwnershipCall { newOwner: new_owner };
                let block = m.send(&sender, call, "transferOwnership", &mut progress()).await?;
                writeln!(
                    out,
                    "ProtocolState {} is now owned by {new_owner} (block {block})",
                    m.manifest.protocol_state
                )?;
            }
        }
        Ok(())
    })
}
