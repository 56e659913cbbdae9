//! The `lite-node` command: assembles the command tree from the verbs in
//! `commands` (each owns its arguments), sets up logging, runs the verb, and
//! turns its outcome into an exit code.

use std::{
    io::{IsTerminal, Write},
    path::PathBuf,
    process::ExitCode,
};

use clap::{Parser, Subcommand};
use lite_node::{
    commands,
    config::{EnvSnapshot, LogSettings},
    exit::{ExitStatus, exit_status},
};
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
    Run(commands::run::Args),
    /// Validate environment, projects.json and the compute package without
    /// running, then reach the RPCs, ProtocolState, the slot and the collector.
    Check(commands::check::Args),
    /// Work with the compute package.
    #[command(subcommand)]
    Compute(commands::compute::Command),
    /// The data market's slot assignment for one epoch, as JSON, computed by
    /// the configured compute package: which slots work it and on which pool.
    Assignments(commands::assignments::Args),
    /// What the anchor chain finalized for an epoch (batch, root, validators,
    /// each project's CID); with --project P --proof, the Merkle proof of P's
    /// CID, checked against the root on chain before it is printed.
    Finalized(commands::finalized::Args),
    /// One project's snapshot at one epoch, read from the market's servers
    /// (--api) and trusted for nothing: printed only once its bytes hash to
    /// its CID, are canonical JSON, and its Merkle proof reaches the root
    /// ProtocolState finalized for the epoch; exit 1 naming the first check
    /// that fails.
    Read(commands::read::Args),
    /// A market's archives (CAR files a validator writes with --archive-dir).
    #[command(subcommand)]
    Archive(commands::archive::Command),
    /// A read-only server of a market's finalized data (the consumers'
    /// routes of a validator's API) over a store or archives: no Redis, no
    /// pipeline, nothing of the market running.
    Serve(commands::archive::ServeArgs),
    /// The collector nodes submit to: checks each submission's signer and
    /// deadline against ProtocolState and, given the active pools, that the
    /// slot was selected for that epoch and pool; answers Success or Failure,
    /// and publishes what it takes to the validators over gossip.
    Collector(commands::collector::Args),
    /// The gossip peer id of a validator's or collector's data dir (its
    /// p2p-identity.key, made if missing): what others put after /p2p/ in
    /// their --p2p-bootstrap.
    PeerId(commands::peer_id::Args),
    /// The receiving end: a validator on Redis. Its gateway takes submissions
    /// as the collector does; dequeuers check them, each epoch's window opens
    /// and closes in anchor blocks, and every epoch is finalized into this
    /// validator's batch; a read-only API shows it all.
    Validator(Box<commands::validator::Args>),
    /// Alert channels (Telegram bot, reporting service).
    #[command(subcommand)]
    Alert(commands::alert::Command),
    /// The whole network on this machine: anvil with Uniswap V3 pools and
    /// ProtocolState, the collector, N nodes, activity and epoch releases.
    Devnet(commands::devnet::Args),
    /// A data market's operator: deploy ProtocolState on any EVM chain,
    /// read the market back.
    #[command(subcommand)]
    Market(commands::market::Command),
}

/// glibc's malloc keeps up to eight arenas per core, one for each thread
/// that allocates while another holds one; the node's threads mostly wait,
/// and a thousand slots' epoch spread over many arenas holds memory none of
/// them gives back. Two suffice (an operator's `MALLOC_ARENA_MAX` wins).
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[expect(clippy::disallowed_methods, reason = "glibc reads MALLOC_ARENA_MAX itself, before any configuration")]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a tunable; it runs before any thread starts.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    let cli = Cli::parse();
    lite_node::core::tls::install_crypto_provider();
    let env = match cli.env_file.as_deref().map(|f| EnvSnapshot::from_process().with_env_file(f)) {
        None => EnvSnapshot::from_process(),
        Some(Ok(env)) => env,
        Some(Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(ExitStatus::BadConfig as u8);
        }
    };
    let log = match LogSettings::from_env(&env) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(ExitStatus::BadConfig as u8);
        }
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&log.filter).unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(|| LossyStderr)
        .with_target(false);
    if log.json {
        logs.json().with_ansi(false).init();
    } else {
        logs.with_ansi(std::io::stderr().is_terminal()).init();
    }
    for warning in env.warnings() {
        tracing::warn!("{warning}");
    }

    // Locked per command: the collector and the devnet print from other threads.
    let stdout = || std::io::stdout().lock();
    let result = match cli.command {
        Command::Run(a) => commands::run::run(&a, &env),
        Command::Check(a) => commands::check::run(&a, &env, &mut stdout()),
        Command::Compute(c) => c.run(&env, &mut stdout()),
        Command::Assignments(a) => commands::assignments::run(&a, &env, &mut stdout()),
        Command::Finalized(a) => commands::finalized::run(&a, &env, &mut stdout()),
        Command::Read(a) => commands::read::run(&a, &env, &mut stdout()),
        Command::Archive(c) => c.run(&env, &mut stdout()),
        Command::Serve(a) => commands::archive::serve(&a, &env, &mut stdout()),
        Command::Collector(a) => commands::collector::run(a, &env),
        Command::PeerId(a) => commands::peer_id::run(&a, &mut stdout()),
        Command::Validator(a) => commands::validator::run(*a, &env),
        Command::Alert(c) => c.run(&env, &mut stdout()),
        Command::Devnet(a) => commands::devnet::run(a, &env),
        Command::Market(c) => c.run(&mut stdout()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Output piped into a reader that stopped (`| head`): quiet, as a
        // Unix tool is, with the failure's code.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::FAILURE
        }
        Err(e) => {
            // Not eprintln!: a stderr that cannot be written must not turn
            // the exit status into a panic's.
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::from(exit_status(&e) as u8)
        }
    }
}

/// Standard error for the logs, losing a line rather than the process when
/// it cannot be written (a full disk under a redirected log): for a write
/// that fails, tracing-subscriber falls back to printing to stderr itself,
/// which panics — found by filling the disk under a devnet, where every
/// node and validator then died at its next log line and again at each
/// restart.
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}
