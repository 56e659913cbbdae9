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
        Ok(())
    } else {
        anyhow::bail!(
            "{} submission(s) rejected and {} selected slot(s) never answered",
            summary.rejected,
            summary.missing
        )
    }
}
