//! `lite-node compute …`: the compute package — fetched, listed, run for
//! one epoch, or a new one written.

mod report;
pub mod run;
mod show;

use std::{io::Write, path::PathBuf};

pub use show::print_package;

use crate::{compute::Fetch, config::EnvSnapshot};

/// `lite-node compute`'s sub-verbs.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Command {
    /// Fetch, build (unless cached) and load the pinned compute package.
    Fetch,
    /// Show the cached compute package; never fetches or builds.
    List,
    /// Run the configured package's processors for one epoch with the node's
    /// host (preload, selection tracker, RPC, time limit) and print what the
    /// node would submit: each snapshot's canonical JSON, project id and CID,
    /// and the selection reported. No anchor events, collector or signer;
    /// exit 1 when a compute fails.
    Run(run::Args),
    /// Write a new compute package into DIR: one processor from the template,
    /// the market's slot selection, this node's plugin interface, a
    /// projects.json, an author's README, and a git repository.
    New {
        /// Where to write it (must not exist, or be empty).
        dir: PathBuf,
        /// The processor crate's name (default: the directory's name).
        #[arg(long)]
        name: Option<String>,
    },
}

impl Command {
    pub fn run(self, env: &EnvSnapshot, out: &mut dyn Write) -> anyhow::Result<()> {
        match self {
            Command::Fetch => show::show(env, Fetch::Allowed, out).map(drop),
            Command::List => show::show(env, Fetch::CacheOnly, out).map(drop),
            Command::Run(args) => run::run(&args, env, out),
            Command::New { dir, name } => show::new(&dir, name.as_deref(), env, out),
        }
    }
}
