//! The `lite-node` command: parses arguments, sets up logging, runs a verb
//! from the library, and turns its outcome into an exit code.

use std::{io::IsTerminal, path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use lite_node::{ExitStatus, commands, compute::Fetch, config::EnvSnapshot, exit_status};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "lite-node", version, about = "Lite-node runtime for decentralized data markets")]
struct Cli {
    /// Read KEY=VALUE lines from this file for variables not already set.
    #[arg(long, global = true, value_name = "FILE")]
    env_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the node: watch the anchor chain and compute every released epoch.
    Run,
    /// Validate environment, projects.json and the compute package without running.
    Check,
    /// Work with the compute package.
    #[command(subcommand)]
    Compute(ComputeCommand),
    /// The data market's slot assignment for one epoch, as JSON, computed by
    /// the configured compute package: which slots work it and on which pool.
    Assignments(AssignmentsArgs),
    /// A collector for the local network: checks each submission's signer and
    /// deadline against ProtocolState and answers Success or Failure.
    Collector(CollectorArgs),
}

#[derive(clap::Args)]
struct CollectorArgs {
    /// Address to listen on (port 0: any free port; the chosen one is printed).
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: std::net::SocketAddr,
    /// Anchor chain JSON-RPC URL(s), comma-separated.
    #[arg(long, value_name = "URL")]
    anchor_rpc: String,
    /// ProtocolState contract address.
    #[arg(long, value_name = "ADDRESS")]
    protocol_state: String,
    /// Data market contract address.
    #[arg(long, value_name = "ADDRESS")]
    data_market: String,
}

#[derive(clap::Args)]
struct AssignmentsArgs {
    /// Epoch id.
    #[arg(long, value_name = "E")]
    epoch_id: u64,
    /// Hash of the epoch's seed block (32 bytes hex, 0x optional).
    #[arg(long, value_name = "H")]
    block_hash: String,
    /// Total registered slots (getTotalNodeCount()).
    #[arg(long, value_name = "T")]
    total_slots: u64,
    /// Active pools, comma-separated.
    #[arg(long, value_name = "P1,P2,…", value_delimiter = ',')]
    pools: Vec<String>,
    /// A file with one pool address per line.
    #[arg(long, value_name = "F")]
    pools_file: Option<PathBuf>,
    /// Answer for this slot only.
    #[arg(long, value_name = "S")]
    slot: Option<u64>,
}

#[derive(Subcommand)]
enum ComputeCommand {
    /// Fetch, build (unless cached) and load the pinned compute package.
    Fetch,
    /// Show the cached compute package; never fetches or builds.
    List,
}

/// Builds the async runtime and runs the node until Ctrl-C or SIGTERM.
fn run_node(env: &EnvSnapshot) -> anyhow::Result<()> {
    let cfg = lite_node::config::NodeConfig::from_env(env)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("lite-node").build()?;
    runtime.block_on(lite_node::node::run(cfg, shutdown_signal()))
}

/// Runs the devnet collector until Ctrl-C or SIGTERM.
fn run_collector(a: CollectorArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("collector").build()?;
    runtime.block_on(async {
        let io = lite_node::chain::IoRuntime::new()?;
        let urls = a.anchor_rpc.split(',').map(str::to_owned).collect();
        let rpc = lite_node::chain::HttpRpc::new("anchor", urls, std::time::Duration::from_secs(15), io)
            .map_err(anyhow::Error::msg)?;
        let bad = |what: &str| lite_node::commands::BadInput(format!("--{what} is not an address"));
        let anchor = std::sync::Arc::new(lite_node::chain::Anchor::new(
            rpc,
            a.protocol_state.parse().map_err(|_| bad("protocol-state"))?,
            a.data_market.parse().map_err(|_| bad("data-market"))?,
        ));
        let listener =
            tokio::net::TcpListener::bind(a.listen).await.with_context(|| format!("listening on {}", a.listen))?;
        println!("collector listening on {}", listener.local_addr()?);
        use std::io::Write;
        std::io::stdout().flush()?;
        let chain_id = loop {
            match anchor.rpc().call_value("eth_chainId", serde_json::json!([])).await {
                Ok(v) => break u64::from_str_radix(v.as_str().unwrap_or("").trim_start_matches("0x"), 16)?,
                Err(e) => {
                    tracing::warn!("anchor RPC not answering ({e}); retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        };
        let collector = lite_node::collector::DevnetCollector { anchor, chain_id, received: Default::default() };
        lite_node::collector::serve(collector, listener, shutdown_signal()).await?;
        Ok(())
    })
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!("cannot listen for SIGTERM ({e}); only Ctrl-C stops the node");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("Ctrl-C received"),
        _ = term.recv() => tracing::info!("SIGTERM received"),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let env = match cli.env_file.as_deref().map(|f| EnvSnapshot::from_process().with_env_file(f)) {
        None => EnvSnapshot::from_process(),
        Some(Ok(env)) => env,
        Some(Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(ExitStatus::BadConfig as u8);
        }
    };
    let filter = env.get("RUST_LOG").unwrap_or("info");
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();

    let mut stdout = std::io::stdout().lock();
    let result = match cli.command {
        Command::Run => run_node(&env),
        Command::Collector(a) => run_collector(a),
        Command::Check => commands::check(&env, &mut stdout),
        Command::Compute(ComputeCommand::Fetch) => commands::compute_show(&env, Fetch::Allowed, &mut stdout).map(drop),
        Command::Assignments(a) => commands::assignments(
            &env,
            &commands::AssignmentQuery {
                epoch_id: a.epoch_id,
                block_hash: a.block_hash,
                total_slots: a.total_slots,
                pools: a.pools,
                pools_file: a.pools_file,
                slot: a.slot,
            },
            &mut stdout,
        ),
        Command::Compute(ComputeCommand::List) => commands::compute_show(&env, Fetch::CacheOnly, &mut stdout).map(drop),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit_status(&e) as u8)
        }
    }
}
