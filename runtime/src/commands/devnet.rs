//! `lite-node devnet`: the whole network on this machine (`crate::devnet`)
//! until its epochs are done or a stop signal.

use crate::{config::EnvSnapshot, devnet::Options, signals::shutdown_signals};

/// Runs the devnet; fails when a selected slot's submission was rejected or
/// never answered.
pub fn devnet(opts: Options, env: &EnvSnapshot) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("devnet").build()?;
    let summary = runtime.block_on(async {
        // Registered before anything starts: a Ctrl-C during set-up still stops every child.
        let stop = shutdown_signals(true);
        crate::devnet::run(opts, env.clone(), &mut std::io::stdout(), stop).await
    })?;
    if summary.ok() {
        return Ok(());
    }
    let mut problems = Vec::new();
    for (n, what) in [
        (summary.rejected, "submission(s) rejected by the collector"),
        (summary.missing, "selected slot(s) never answered"),
        (summary.duplicates, "submission(s) accepted twice"),
        (summary.validator_disagrees, "submission(s) rejected by the validator"),
        (summary.validator_unjudged, "submission(s) the validator never judged"),
    ] {
        if n > 0 {
            problems.push(format!("{n} {what}"));
        }
    }
    if let Some(f) = summary.finalized.filter(|f| *f != summary.epochs) {
        problems.push(format!("{} epoch(s) not finalized by the validator", summary.epochs - f));
    }
    if problems.is_empty() {
        problems.push("no epoch ran".to_owned());
    }
    anyhow::bail!("{}", problems.join(", "))
}
