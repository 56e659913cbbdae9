//! `lite-node archive restore` and `lite-node serve`: a market's finalized
//! data outliving its validators (issue 54). A validator writes archives
//! (`--archive-dir`): CAR files of every snapshot, each epoch's pairs and
//! root and where the chain finalized it. Restored into a store of one's
//! own, they serve consumers from a read-only process — no Redis, no chain
//! connection, nothing of the market running — and every bundle served
//! still proves itself to the root on chain (`lite-node read`).

use std::{path::PathBuf, sync::Arc};

use anyhow::{Context, Result, bail};
use lite_node_validator::{
    Market,
    archive::{self, MarketOf},
    store::Store,
};

use crate::{config::EnvSnapshot, exit::BadInput, signals::shutdown_signals};

/// `lite-node archive`'s verbs.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Command {
    /// Restores archives (CAR files a validator wrote with --archive-dir)
    /// into a finalized-data store: every block checked against its CID,
    /// every epoch's pairs against its root; epochs the store has are left.
    Restore(RestoreArgs),
}

/// The market the data is of.
#[derive(Clone, Debug, clap::Args)]
pub struct MarketOfArgs {
    /// The anchor chain's id.
    #[arg(long, value_name = "N")]
    pub chain_id: u64,
    /// ProtocolState address (default: PROTOCOL_STATE_CONTRACT).
    #[arg(long, value_name = "ADDRESS")]
    pub protocol_state: Option<String>,
    /// Data market address (default: DATA_MARKET_CONTRACT).
    #[arg(long, value_name = "ADDRESS")]
    pub data_market: Option<String>,
}

impl MarketOfArgs {
    fn resolve(&self, env: &EnvSnapshot, verb: &str) -> Result<(MarketOf, lite_node_protocol::submission::Scope)> {
        let pick = |flag: &Option<String>, name: &str, var: &str| -> Result<alloy::primitives::Address> {
            let text = flag.clone().or_else(|| env.get(var).map(str::to_owned)).ok_or_else(|| {
                BadInput(format!("give --{name}, or set {var} (e.g. lite-node --env-file .env {verb} …)"))
            })?;
            text.trim().parse().map_err(|_| BadInput(format!("--{name} {text}: not an address")).into())
        };
        let protocol_state = pick(&self.protocol_state, "protocol-state", "PROTOCOL_STATE_CONTRACT")?;
        let data_market = pick(&self.data_market, "data-market", "DATA_MARKET_CONTRACT")?;
        let of = MarketOf {
            chain_id: self.chain_id,
            protocol_state: protocol_state.to_string(),
            data_market: data_market.to_string(),
        };
        Ok((of, lite_node_protocol::submission::Scope { protocol_state, data_market }))
    }
}

/// `lite-node archive restore`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct RestoreArgs {
    /// The store to restore into (made if missing; not one a running
    /// validator holds open).
    #[arg(long, value_name = "PATH")]
    pub store: PathBuf,
    /// The archives: CAR files, directories of them, or an S3-compatible
    /// bucket's (s3://bucket[/prefix], with the AWS_* variables a validator's
    /// --archive-bucket takes).
    #[arg(value_name = "CAR|DIR|URL", required = true)]
    pub archives: Vec<PathBuf>,
    #[command(flatten)]
    pub market: MarketOfArgs,
}

impl Command {
    pub fn run(&self, env: &EnvSnapshot, out: &mut dyn std::io::Write) -> Result<()> {
        match self {
            Self::Restore(a) => {
                let (of, _) = a.market.resolve(env, "archive restore")?;
                let store = Store::open(&a.store).map_err(|e| BadInput(e.to_string()))?;
                restore_all(&store, &a.store, &a.archives, &of, env, out)
            }
        }
    }
}

/// The CAR files among `paths` (a directory's, in name order).
fn cars(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading {}", path.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "car"))
                .collect();
            found.sort_by_key(|p| p.file_name().and_then(|n| n.to_str()).and_then(archive::range_of));
            out.extend(found);
        } else if path.exists() {
            out.push(path.clone());
        } else {
            bail!(BadInput(format!("{}: no such file or directory", path.display())));
        }
    }
    Ok(out)
}

/// Restores the archives in `bucket` (its URL) one at a time, each
/// downloaded beside the store (`<store>.download/`) and removed once read.
fn restore_bucket(
    store: &Store,
    store_path: &std::path::Path,
    url: &str,
    of: &MarketOf,
    env: &EnvSnapshot,
    out: &mut dyn std::io::Write,
) -> Result<usize> {
    let bucket = lite_node_validator::bucket::Bucket::from_url(url, env.vars()).map_err(|e| BadInput(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let held = runtime.block_on(bucket.archives()).map_err(|e| anyhow::anyhow!(e))?;
    let staging = store_path.with_extension("download");
    std::fs::create_dir_all(&staging).with_context(|| format!("making {}", staging.display()))?;
    for (name, _) in &held {
        let file = staging.join(name);
        runtime.block_on(bucket.download(name, &file)).map_err(|e| anyhow::anyhow!(e))?;
        let restored = archive::restore(store, &file, Some(of)).map_err(|e| anyhow::anyhow!(e));
        let _ = std::fs::remove_file(&file);
        report(out, &format!("{}/{name}", url.trim_end_matches('/')), &restored?)?;
    }
    let _ = std::fs::remove_dir(&staging);
    Ok(held.len())
}

fn report(out: &mut dyn std::io::Write, what: &str, restored: &archive::Restored) -> Result<()> {
    writeln!(
        out,
        "{what}: {} epoch(s) restored ({} kept already), {} snapshot(s), each checked against its CID and its epoch's root",
        restored.epochs, restored.kept_already, restored.blocks
    )?;
    Ok(())
}

fn restore_all(
    store: &Store,
    store_path: &std::path::Path,
    paths: &[PathBuf],
    of: &MarketOf,
    env: &EnvSnapshot,
    out: &mut dyn std::io::Write,
) -> Result<()> {
    let (urls, paths): (Vec<&PathBuf>, Vec<&PathBuf>) =
        paths.iter().partition(|p| p.to_str().is_some_and(|t| t.starts_with("s3://")));
    let mut from_buckets = 0;
    for url in urls {
        from_buckets += restore_bucket(store, store_path, &url.to_string_lossy(), of, env, out)?;
    }
    let paths: Vec<PathBuf> = paths.into_iter().cloned().collect();
    if paths.is_empty() && from_buckets > 0 {
        return Ok(());
    }
    let files = cars(&paths)?;
    if files.is_empty() {
        bail!(BadInput(format!(
            "no archive (*.car) in {}",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        )));
    }
    for file in files {
        let restored = archive::restore(store, &file, Some(of)).map_err(|e| anyhow::anyhow!(e))?;
        report(out, &file.display().to_string(), &restored)?;
    }
    Ok(())
}

/// `lite-node serve`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// The finalized-data store to serve (a copy of a validator's
    /// finalized.redb, or one restored from archives; made if missing).
    #[arg(long, value_name = "PATH")]
    pub store: PathBuf,
    /// Restore these archives (CAR files, directories of them, or an
    /// s3://bucket[/prefix]) into the store first.
    #[arg(long, value_name = "CAR|DIR|URL")]
    pub archive: Vec<PathBuf>,
    /// Where the API listens.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9092")]
    pub listen: std::net::SocketAddr,
    /// Requests a second one client (IP address) may make (twice that in a
    /// burst); 0: no limit.
    #[arg(long, value_name = "N", default_value_t = lite_node_validator::service::DATA_RATE)]
    pub data_rate: u32,
    #[command(flatten)]
    pub market: MarketOfArgs,
}

/// Serves the consumers' routes over the store until Ctrl-C or SIGTERM.
pub fn serve(a: &ServeArgs, env: &EnvSnapshot, out: &mut dyn std::io::Write) -> Result<()> {
    let (of, scope) = a.market.resolve(env, "serve")?;
    let store = Store::open(&a.store).map_err(|e| BadInput(e.to_string()))?;
    if !a.archive.is_empty() {
        restore_all(&store, &a.store, &a.archive, &of, env, out)?;
    }
    let (first, last) = (store.first_epoch()?, store.last_epoch()?);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("serve").build()?;
    runtime.block_on(async {
        let stop = shutdown_signals(false);
        let listener =
            tokio::net::TcpListener::bind(a.listen).await.with_context(|| format!("listening on {}", a.listen))?;
        let held = match (first, last) {
            (Some(f), Some(l)) => format!("epochs {f} to {l}"),
            _ => "no epoch yet".to_owned(),
        };
        writeln!(
            out,
            "serving the finalized data of {} ({held}) on http://{}",
            a.store.display(),
            listener.local_addr()?
        )?;
        out.flush()?;
        let market = Arc::new(Market::new(scope, of.chain_id, "serve"));
        let data = lite_node_validator::api::Data {
            store: Arc::new(store),
            rate_per_client: std::num::NonZeroU32::new(a.data_rate),
            retention_days: None,
        };
        lite_node_validator::api::serve_data(market, listener, stop, data).await.context("the API stopped")
    })
}
