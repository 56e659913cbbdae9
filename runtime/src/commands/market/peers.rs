//! `lite-node market peers [--set A,B,…]`: the validators' gossip
//! addresses the manifest publishes.

use std::{io::Write, path::PathBuf};

use anyhow::{Context, Result, bail};
use lite_node_chain::market::Manifest;
use lite_node_validator::gossip::Multiaddr;

use crate::exit::BadInput;

/// `lite-node market peers`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Record these, comma-separated, each ending in /p2p/<peer id>.
    #[arg(long, value_name = "MULTIADDR,…", value_delimiter = ',')]
    pub set: Option<Vec<Multiaddr>>,
    /// Record these as the validators' data APIs (consumers, and the nodes
    /// of a market without pairs on chain, read there), comma-separated.
    #[arg(long, value_name = "URL,…", value_delimiter = ',')]
    pub apis: Option<Vec<String>>,
    /// The market's manifest.
    #[arg(long, value_name = "PATH", default_value = "market.json")]
    pub manifest: PathBuf,
}

/// `lite-node market peers [--set A,B,…]`: the validators' gossip addresses
/// the manifest publishes; `--set` records them (each must name its peer).
pub fn run(a: &Args, out: &mut dyn Write) -> Result<()> {
    let (manifest, set) = (&a.manifest, a.set.as_deref());
    let mut m = Manifest::load(manifest)?;
    if let Some(peers) = set {
        if peers.is_empty() {
            bail!(BadInput("--set: name at least one validator's address (/ip4/…/tcp/…/p2p/<peer id>)".into()));
        }
        lite_node_validator::gossip::check_peers(peers).map_err(|e| BadInput(format!("--set: {e}")))?;
        m.validator_peers = peers.iter().map(ToString::to_string).collect();
    }
    if let Some(apis) = &a.apis {
        if apis.is_empty() {
            bail!(BadInput("--apis: name at least one validator's data API (e.g. http://127.0.0.1:9091)".into()));
        }
        for api in apis {
            match reqwest::Url::parse(api) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                _ => bail!(BadInput(format!("--apis {api}: not an http(s) URL (e.g. http://127.0.0.1:9091)"))),
            }
        }
        m.data_apis = apis.iter().map(|u| u.trim_end_matches('/').to_owned()).collect();
    }
    if set.is_some() || a.apis.is_some() {
        let text = serde_json::to_string_pretty(&m)? + "\n";
        lite_node_core::atomic_file::write_durable(manifest, text.as_bytes())
            .with_context(|| format!("writing the manifest {}", manifest.display()))?;
    }
    writeln!(out, "{} validator peer(s) in {}", m.validator_peers.len(), manifest.display())?;
    for peer in &m.validator_peers {
        writeln!(out, "{peer}")?;
    }
    writeln!(out, "{} data API(s)", m.data_apis.len())?;
    for api in &m.data_apis {
        writeln!(out, "{api}")?;
    }
    Ok(())
}
