//! One submission to the collector over gRPC (docs/protocol.md §6), retried
//! under [`Policy::COLLECTOR`] while the collector cannot be reached and the
//! submission's deadline holds.

use std::time::Duration;

use lite_node_protocol::proto::{self, SnapshotSubmission, SubmissionResponse, submission_client::SubmissionClient};

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

/// Sends one submission, retrying while the collector cannot be reached and
/// `still_in_time()` holds; `retrying` hears each failed attempt's error.
pub async fn submit(
    endpoint: &str,
    submission: SnapshotSubmission,
    mut still_in_time: impl AsyncFnMut() -> bool,
    mut retrying: impl FnMut(&str),
) -> Verdict {
    let mut delays = Policy::COLLECTOR.delays();
    let mut last_error = String::new();
    let mut failures = 0u32;
    loop {
        if !still_in_time().await {
            return Verdict::Unreachable(format!(
                "collector {endpoint} did not answer before the deadline ({last_error})"
            ));
        }
        let attempt = async {
            let mut client = SubmissionClient::connect(endpoint.to_owned()).await.map_err(|e| e.to_string())?;
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
