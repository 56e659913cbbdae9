//! `lite-node market …`: a data market operator's verbs, against any EVM
//! chain; one file per sub-verb. `deploy` puts the production ProtocolState
//! on the anchor chain and writes the market's manifest, which every other
//! verb reads (`lite_node_chain::market::Market`). A key is read from a
//! file, never from the command line (where `ps` shows it), and never
//! printed.

mod days;
mod deploy;
mod env;
mod peers;
mod pin;
mod release;
mod roles;
mod slots;
mod status;
mod validators;

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use alloy::primitives::Address;
use anyhow::Result;
use lite_node_chain::{IoRuntime, TxSender, market::Market};

use crate::{config::SecretKey, exit::BadInput};

/// `lite-node market`'s sub-verbs.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Command {
    /// Deploy the production ProtocolState with the deployer's key and
    /// write the market's manifest (chains, contract, identity, deploy
    /// block, epoch size, namespace), which the other verbs read.
    Deploy(deploy::Args),
    /// What the chain says of the market: epochs released, the releaser's
    /// lag behind the source chain, slots and validators.
    Status(ManifestArg),
    /// The epoch releaser, as a service: releases the market's epochs as
    /// the source chain's blocks become final, resuming from the chain.
    Release(release::Args),
    /// The slot registry: register, reassign, remove, mark full nodes, list.
    #[command(subcommand)]
    Slots(slots::Command),
    /// The market's validators: add, remove, list.
    #[command(subcommand)]
    Validators(validators::Command),
    /// Set the market's day schedule: a day starts every N released epochs
    /// (the owner's key).
    Days(days::Args),
    /// The owner's grants — releasers, slot registrars, ownership — and the
    /// roles an address holds.
    #[command(subcommand)]
    Roles(roles::Command),
    /// The env block an operator pastes into the node's `.env` for a slot
    /// (their own key stays theirs: its line is left empty).
    Env(env::Args),
    /// The validators' gossip addresses the manifest publishes (an
    /// operator's collector dials them: VALIDATOR_PEERS in `market env`).
    Peers(peers::Args),
    /// Pin the market's compute package and projects.json (each a git
    /// repository at one commit) in the manifest: `market env` hands them to
    /// every operator, and `lite-node check` refuses other ones.
    Pin(pin::Args),
}

impl Command {
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        match self {
            Command::Deploy(a) => deploy::run(&a, out),
            Command::Status(a) => status::run(&a.manifest, out),
            Command::Release(a) => release::run(&a, out),
            Command::Slots(c) => slots::run(c, out),
            Command::Validators(c) => validators::run(c, out),
            Command::Days(a) => days::run(&a, out),
            Command::Roles(c) => roles::run(c, out),
            Command::Env(a) => env::run(&a, out),
            Command::Peers(a) => peers::run(&a, out),
            Command::Pin(a) => pin::run(&a, out),
        }
    }
}

/// The market's manifest, for the verbs that only read.
#[derive(Clone, Debug, clap::Args)]
pub struct ManifestArg {
    /// The market's manifest.
    #[arg(long, value_name = "PATH", default_value = "market.json")]
    pub manifest: PathBuf,
}

/// The manifest, and the key of the account that sends the transaction.
#[derive(Clone, Debug, clap::Args)]
pub struct AccessArgs {
    /// The market's manifest.
    #[arg(long, value_name = "PATH", default_value = "market.json")]
    pub manifest: PathBuf,
    /// A file holding the sender's private key (the owner's, or a
    /// registrar's for slots); never printed.
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
}

impl AccessArgs {
    /// The sender of `what`'s transactions: the key of `--key-file` on the
    /// market's anchor chain.
    fn sender(&self, market: &Market, what: &str) -> Result<TxSender> {
        let key_file = self.key_file.as_deref().ok_or_else(|| {
            BadInput(format!(
                "{what} sends a transaction: give --key-file (the owner's key; a registrar's may register, \
                 reassign and remove slots)"
            ))
        })?;
        market.sender(read_key(key_file)?.bytes(), &format!("--key-file {}", key_file.display()))
    }
}

/// Where a verb says a transaction's hash before waiting for it (and other
/// progress): standard error, so standard output keeps the verb's answer.
fn progress() -> impl FnMut(String) + Send {
    |line| eprintln!("{line}")
}

/// Runs a verb's work on a current-thread runtime, with the I/O runtime the
/// chain clients need.
fn block_on<T>(work: impl AsyncFnOnce(&IoRuntime) -> Result<T>) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let io = IoRuntime::new()?;
        work(&io).await
    })
}

/// A private key from `path`: 64 hex digits (with or without 0x); the
/// file's text is never shown.
fn read_key(path: &Path) -> Result<SecretKey> {
    let text = std::fs::read_to_string(path).map_err(|e| BadInput(format!("--key-file {}: {e}", path.display())))?;
    let key = SecretKey::parse_hex(&format!("--key-file {}", path.display()), &text).map_err(BadInput)?;
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(path) {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            eprintln!(
                "warning: --key-file {} can be read by other users (mode {mode:o}): `chmod 600 {}`",
                path.display(),
                path.display()
            );
        }
    }
    Ok(key)
}

fn parse_address(flag: &str, text: &str) -> Result<Address> {
    text.trim().parse().map_err(|_| BadInput(format!("{flag} {text}: not an address (0x and 40 hex digits)")).into())
}
