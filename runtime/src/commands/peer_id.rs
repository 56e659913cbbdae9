//! `lite-node peer-id`: the gossip peer id of a validator's or collector's
//! data dir.

use std::{io::Write, path::PathBuf};

use crate::exit::BadInput;

/// `lite-node peer-id`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// The validator's or collector's --data-dir.
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
}

/// Prints the gossip peer id kept in `data_dir` (made there if missing).
pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<()> {
    let data_dir = &args.data_dir;
    let identity = data_dir.join("p2p-identity.key");
    let key = lite_node_validator::gossip::load_or_create_identity(&identity)
        .map_err(|e| BadInput(format!("--data-dir {}: {e}", data_dir.display())))?;
    writeln!(out, "{}", key.public().to_peer_id())?;
    Ok(())
}
