//! `lite-node alert test`: a test message through every configured channel.

use std::io::Write;

use anyhow::Result;

use crate::{config::EnvSnapshot, exit::BadInput};

/// `lite-node alert …`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Command {
    /// Send a test message through every configured channel and show each answer.
    Test,
}

impl Command {
    pub fn run(self, env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
        match self {
            Command::Test => test(env, out),
        }
    }
}

/// `lite-node alert test`: one test message through every configured alert
/// channel, on a runtime of its own; a line per channel with what it
/// answered or why it failed.
pub fn test(env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(send_test(env, out))
}

async fn send_test(env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
    let cfg = crate::config::AlertConfig::from_env(env)?;
    if !cfg.any() {
        return Err(BadInput(
            "no alert channel configured: set TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID \
             (TELEGRAM_API_URL for a self-hosted Bot API), or TELEGRAM_REPORTING_URL and TELEGRAM_CHAT_ID"
                .into(),
        )
        .into());
    }
    let (slot_id, signer) = crate::config::alert_sender(env)?;
    let from = crate::alerts::Sender {
        slot_id: slot_id.unwrap_or(0),
        signer: signer.unwrap_or_else(|| "unknown signer".to_owned()),
    };
    let results = crate::alerts::test(&cfg, from).await.map_err(BadInput)?;
    let mut failed = 0;
    for (channel, result) in &results {
        match result {
            Ok(answer) => writeln!(out, "ok   {channel}: {answer}")?,
            Err(e) => {
                failed += 1;
                writeln!(out, "fail {channel}: {e}")?;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} alert channel(s) failed", results.len());
    }
    Ok(())
}
