//! `lite-node market release`: the epoch releaser as a service, with its
//! `/health` and `/metrics` (`lite_node_chain::releaser`).

use std::{io::Write, sync::Arc, time::Duration};

use anyhow::{Result, bail};
use lite_node_chain::{
    market::Market,
    releaser::{Releaser, ReleaserSettings, ReleaserStatus, Step},
};
use lite_node_core::supervisor::Supervisor;
use lite_node_protocol::contracts::isReleaserCall;

use super::{AccessArgs, block_on};

/// How long the releaser waits before it says why, and how often after.
const WAIT_SAID_AFTER: Duration = Duration::from_secs(60);
use crate::exit::BadInput;

/// `lite-node market release`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub access: AccessArgs,
    /// Blocks under the source head an epoch's last block must be.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub finality: u64,
    /// The first epoch's first source block, if nothing is released yet
    /// (default: the newest final epoch's).
    #[arg(long, value_name = "B")]
    pub first_block: Option<u64>,
    /// Serve /health and /metrics here (e.g. 127.0.0.1:9200).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// How often to look at the source chain when no epoch is due.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub poll_ms: u64,
    /// Replace a release not mined after this long (same nonce, higher fees).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub replace_after_secs: u64,
    /// Leave out a source RPC more than N blocks from the others' median,
    /// behind or ahead (epochs wait for the lowest of the others).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_source_lag: u64,
    /// The most any release offers per gas, in gwei (default: no cap): a
    /// release is priced at most at the cap, and at the cap the release in
    /// flight is waited for.
    #[arg(long, value_name = "GWEI")]
    pub max_fee_gwei: Option<u64>,
}

/// The epoch releaser as a service: one line per epoch released, until
/// Ctrl-C or SIGTERM.
pub fn run(o: &Args, out: &mut dyn Write) -> Result<()> {
    let poll = Duration::from_millis(o.poll_ms.max(10));
    block_on(async |io| {
        let mut shutdown = lite_node_core::signals::shutdown_signals(false);
        let m = Market::open(&o.access.manifest, io).await?;
        let sources = m.sources(io).await?;
        let key_file =
            o.access.key_file.as_deref().ok_or_else(|| {
                BadInput("the releaser sends transactions: give --key-file (a releaser's key)".into())
            })?;
        let sender = o.access.sender(&m, "the releaser")?;
        if !m.view(isReleaserCall { account: sender.address() }).await? {
            bail!(BadInput(format!(
                "--key-file {}: {} is not a releaser of ProtocolState {} (the owner grants it: `lite-node market roles grant releaser ADDRESS`)",
                key_file.display(),
                sender.address(),
                m.manifest.protocol_state
            )));
        }
        let settings = ReleaserSettings {
            protocol_state: m.manifest.protocol_state,
            data_market: m.manifest.data_market,
            epoch_size: m.manifest.epoch_size,
            finality: o.finality,
            first_block: o.first_block,
            replace_after: Duration::from_secs(o.replace_after_secs.max(1)),
            max_source_lag: o.max_source_lag,
            max_fee_per_gas: o.max_fee_gwei.map(|g| u128::from(g) * 1_000_000_000),
        };
        let releaser = Releaser::new(m.anchor.clone(), sources, sender, settings);
        let mut tasks = Supervisor::new();
        if let Some(addr) = o.listen {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| BadInput(format!("--listen {addr}: cannot listen ({e})")))?;
            writeln!(out, "health on http://{}/health, metrics on /metrics", listener.local_addr()?)?;
            let status = Arc::new(ReleaserStatus(releaser.state.clone()));
            tasks.spawn_critical("status server", lite_node_core::status::serve(listener, status));
        }
        writeln!(
            out,
            "releasing epochs of {} source block(s) for market {} ({} blocks of finality)",
            m.manifest.epoch_size, m.manifest.data_market, o.finality
        )?;
        let mut failures = 0u32;
        let mut stopping = false;
        // A wait longer than a minute (the next epoch past the source head)
        // is said, then once a minute; a release held at the fee cap is said
        // by the releaser itself.
        let mut waiting_since: Option<(std::time::Instant, std::time::Instant)> = None;
        loop {
            // A signal lets the step in flight end (its transaction mined,
            // and said) for up to half a minute.
            let step = releaser.step();
            tokio::pin!(step);
            let step = tokio::select! {
                step = &mut step => step,
                failed = tasks.failed() => return Err(failed.into()),
                _ = &mut shutdown => {
                    stopping = true;
                    match tokio::time::timeout(Duration::from_secs(30), step).await {
                        Ok(step) => step,
                        Err(_) => break,
                    }
                }
            };
            if step.is_ok() {
                failures = 0;
            }
            if !matches!(step, Ok(Step::Waiting)) {
                waiting_since = None;
            }
            let pause = match step {
                Ok(Step::Released { epoch_id, begin, end, .. }) => {
                    writeln!(out, "epoch {epoch_id} released: source blocks {begin}-{end}")?;
                    None
                }
                Ok(Step::Raced { begin, end }) => {
                    writeln!(
                        out,
                        "source blocks {begin}-{end} were released by another transaction: following the chain"
                    )?;
                    // That transaction may still be pending: give it a poll.
                    Some(poll)
                }
                Ok(Step::Waiting) => {
                    let now = std::time::Instant::now();
                    let (since, said) = waiting_since.get_or_insert((now, now));
                    if now.duration_since(*since) >= WAIT_SAID_AFTER && now.duration_since(*said) >= WAIT_SAID_AFTER {
                        *said = now;
                        let why = releaser.state.lock().expect("not poisoned").waiting.clone();
                        let why = why.unwrap_or_else(|| "the next epoch is not due".to_owned());
                        writeln!(out, "waiting {} s: {why}", now.duration_since(*since).as_secs())?;
                    }
                    Some(poll)
                }
                Err(e) => {
                    failures += 1;
                    eprintln!("release: {e}");
                    Some((poll * failures.min(30)).min(Duration::from_secs(30)))
                }
            };
            if stopping {
                break;
            }
            if let Some(pause) = pause {
                tokio::select! {
                    _ = &mut shutdown => break,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
        writeln!(out, "stopped")?;
        Ok(())
    })
}
