//! One submission to the collector over gRPC (docs/protocol.md §6), retried
//! under [`Policy::COLLECTOR`] while the collector cannot be reached and the
//! submission's deadline holds.

use std::{sync::OnceLock, time::Duration};

use lite_node_protocol::proto::{self, SnapshotSubmission, SubmissionResponse, submission_client::SubmissionClient};
use tonic::transport::{Channel, Endpoint};

use crate::retry::Policy;

/// What the collector answered, or why nothing was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// The collector answered `Failure` (or anything but `Success`).
    Rejected(String),
    /// No answer before the deadline.
    Unreachable(String),
}

/// How long one attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// A collector and the one HTTP/2 connection every submission to it shares
/// (made on first use, made again after it breaks): a thousand slots'
/// submissions are a thousand streams on it, not a thousand connections.
#[derive(Debug)]
pub struct Collector {
    endpoint: String,
    channel: OnceLock<Result<Channel, String>>,
}

impl Collector {
    /// The collector at `endpoint` (`http://host:port`); nothing is
    /// connected until the first submission.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self { endpoint: endpoint.into(), channel: OnceLock::new() }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Whether the collector takes a connection now (HTTP/2 set up on a
    /// fresh connection, within the attempt timeout); not a submission.
    pub async fn reachable(&self) -> Result<(), String> {
        let endpoint = Endpoint::from_shared(self.endpoint.clone())
            .map_err(|e| format!("collector endpoint {}: {e}", self.endpoint))?
            .connect_timeout(ATTEMPT_TIMEOUT);
        match tokio::time::timeout(ATTEMPT_TIMEOUT, endpoint.connect()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no connection within {}s", ATTEMPT_TIMEOUT.as_secs())),
        }
    }

    /// A client on the shared connection (within a tokio runtime).
    fn client(&self) -> Result<SubmissionClient<Channel>, String> {
        let channel = self.channel.get_or_init(|| {
            Endpoint::from_shared(self.endpoint.clone())
                .map(|e| e.connect_timeout(ATTEMPT_TIMEOUT).connect_lazy())
                .map_err(|e| format!("collector endpoint {}: {e}", self.endpoint))
        });
        channel.clone().map(SubmissionClient::new)
    }
}

/// Whether a submission's deadline still holds, as [`submit`] asks it.
pub type InTime = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

/// Sends one submission, retrying while the collector cannot be reached and
/// `still_in_time()` holds; `retrying` hears each failed attempt's error.
pub async fn submit(
    collector: &Collector,
    submission: SnapshotSubmission,
    mut still_in_time: impl FnMut() -> InTime,
    mut retrying: impl FnMut(&str),
) -> Verdict {
    let mut delays = Policy::COLLECTOR.delays();
    let mut last_error = String::new();
    let mut failures = 0u32;
    let endpoint = collector.endpoint();
    loop {
        if !still_in_time().await {
            return Verdict::Unreachable(format!(
                "collector {endpoint} did not answer before the deadline ({last_error})"
            ));
        }
        let attempt = async {
            let mut client = collector.client()?;
            let answer = client
                .submit_snapshot(submission.clone())
                .await
                .map_err(|s| format!("{}: {}", s.code(), s.message()))?;
            let reason = answer.metadata().get(proto::REASON_METADATA).and_then(|v| v.to_str().ok()).map(str::to_owned);
            Ok::<(SubmissionResponse, Option<String>), String>((answer.into_inner(), reason))
        };
        match tokio::time::timeout(ATTEMPT_TIMEOUT, attempt).await {
            Ok(Ok((r, _))) if r.message == proto::SUCCESS => return Verdict::Accepted,
            Ok(Ok((r, reason))) => {
                return Verdict::Rejected(match reason {
                    Some(reason) => format!("collector answered `{}`: {reason}", r.message),
                    None => format!("collector answered `{}` and gave no reason", r.message),
                });
            }
            Ok(Err(e)) => last_error = e,
            Err(_) => last_error = format!("timed out after {}s", ATTEMPT_TIMEOUT.as_secs()),
        }
        let wait = delays.next().unwrap_or(Policy::COLLECTOR.max);
        retrying(&last_error);
        failures += 1;
        if failures == 1 {
            tracing::warn!("submitting to {endpoint} failed ({last_error}); retrying in {wait:?}");
        } else {
            tracing::debug!("submitting to {endpoint} still failing ({last_error}); next try in {wait:?}");
        }
        tokio::time::sleep(wait).await;
    }
}

/// A listening address, as a gRPC endpoint.
pub fn http_endpoint(addr: std::net::SocketAddr) -> String {
    format!("http://{addr}")
}
