//! The signals that stop a process: Ctrl-C, SIGTERM and, for the devnet,
//! SIGHUP.

/// What a long-running entry point (the node, the devnet, the validator)
/// stops on.
pub type Shutdown = crate::BoxFuture<'static, ()>;

/// The next delivery of a signal that is listened for; never, if it is not.
async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Ctrl-C, SIGTERM and, with `hangup`, SIGHUP, registered at once (before
/// anything is started), resolving when the first arrives. Must be called
/// inside a tokio runtime.
pub fn shutdown_signals(hangup: bool) -> Shutdown {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind: SignalKind, name: &str| match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("cannot listen for {name} ({e})");
            None
        }
    };
    let mut int = listen(SignalKind::interrupt(), "SIGINT");
    let mut term = listen(SignalKind::terminate(), "SIGTERM");
    let mut hup = if hangup { listen(SignalKind::hangup(), "SIGHUP") } else { None };
    Box::pin(async move {
        tokio::select! {
            _ = recv(&mut int) => tracing::info!("Ctrl-C received"),
            _ = recv(&mut term) => tracing::info!("SIGTERM received"),
            _ = recv(&mut hup) => tracing::info!("SIGHUP received"),
        }
    })
}
