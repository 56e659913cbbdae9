//! The collector's gRPC interface (PROTOCOL.md §6), generated from
//! `proto/submission.proto`: the client a node submits with, and the server
//! side the devnet collector implements.

#[allow(clippy::all, missing_docs, rust_2018_idioms)] // generated code
pub mod proto {
    tonic::include_proto!("submission");
}

use std::{
    collections::BTreeSet,
    fs::OpenOptions,
    io::{self, Write},
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::primitives::Address;
use proto::{SnapshotSubmission, SubmissionResponse, submission_client::SubmissionClient};
use serde::{Deserialize, Serialize};

use crate::signing::{Request, domain, recover};

/// What the collector answered, or why nothing was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// The collector answered `Failure` (or anything but `Success`).
    Rejected(String),
    /// No answer before the deadline.
    Unreachable(String),
}

/// Submissions the collector acknowledged, `(epoch, project id)` → CID, kept
/// in `<data dir>/state/submissions.jsonl` so a restart never sends one twice.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    done: Mutex<BTreeSet<(u64, String)>>,
}

#[derive(Serialize, Deserialize)]
struct LedgerLine {
    epoch_id: u64,
    project_id: String,
    cid: String,
    verdict: String,
}

impl Ledger {
    pub fn open(data_dir: &Path) -> io::Result<Self> {
        let path = data_dir.join("state").join("submissions.jsonl");
        let mut done = BTreeSet::new();
        if let Ok(text) = std::fs::read_to_string(&path) {
            for (n, line) in text.lines().enumerate() {
                // A torn last line (crash mid-write) is ignored; any other bad line is an error.
                match serde_json::from_str::<LedgerLine>(line) {
                    Ok(l) => {
                        done.insert((l.epoch_id, l.project_id));
                    }
                    Err(_) if n + 1 == text.lines().count() => {}
                    Err(e) => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("{} line {}: {e}", path.display(), n + 1),
                        ));
                    }
                }
            }
        }
        Ok(Self { path, done: Mutex::new(done) })
    }

    pub fn contains(&self, epoch_id: u64, project_id: &str) -> bool {
        self.done.lock().unwrap_or_else(|p| p.into_inner()).contains(&(epoch_id, project_id.to_owned()))
    }

    /// Records an acknowledged submission (written and synced before returning).
    pub fn record(&self, epoch_id: u64, project_id: &str, cid: &str, verdict: &str) -> io::Result<()> {
        std::fs::create_dir_all(self.path.parent().expect("ledger has a parent"))?;
        let line = LedgerLine { epoch_id, project_id: project_id.into(), cid: cid.into(), verdict: verdict.into() };
        let mut bytes = serde_json::to_vec(&line).map_err(io::Error::other)?;
        bytes.push(b'\n');
        let mut f = OpenOptions::new().create(true).append(true).open(&self.path)?;
        f.write_all(&bytes)?;
        f.sync_data()?;
        self.done.lock().unwrap_or_else(|p| p.into_inner()).insert((epoch_id, project_id.to_owned()));
        Ok(())
    }
}

/// Sends one submission, retrying with backoff while the collector cannot be
/// reached and `still_in_time()` holds.
pub async fn submit(
    endpoint: &str,
    submission: SnapshotSubmission,
    mut still_in_time: impl AsyncFnMut() -> bool,
) -> Verdict {
    let mut delay = Duration::from_millis(100);
    let mut last_error = String::new();
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
            Ok::<SubmissionResponse, String>(answer.into_inner())
        };
        match tokio::time::timeout(Duration::from_secs(10), attempt).await {
            Ok(Ok(r)) if r.message == "Success" => return Verdict::Accepted,
            Ok(Ok(r)) => return Verdict::Rejected(format!("collector answered `{}`", r.message)),
            Ok(Err(e)) => last_error = e,
            Err(_) => last_error = "timed out after 10s".into(),
        }
        tracing::warn!("submitting to {endpoint} failed ({last_error}); retrying in {delay:?}");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// Checks a submission's signature against the slot's expected signer.
pub fn signature_is_from(
    submission: &SnapshotSubmission,
    chain_id: u64,
    protocol_state: Address,
    signer: Address,
) -> Result<(), String> {
    let r = submission.request.as_ref().ok_or("the submission has no request")?;
    let request = Request {
        slot_id: r.slot_id,
        deadline: r.deadline,
        snapshot_cid: r.snapshot_cid.clone(),
        epoch_id: r.epoch_id,
        project_id: r.project_id.clone(),
    };
    let found = recover(&domain(chain_id, protocol_state), &request, &submission.signature)?;
    if found == signer {
        Ok(())
    } else {
        Err(format!("signature recovers to {found}, slot {} belongs to {signer}", r.slot_id))
    }
}

/// A listening address, for messages.
pub fn http_endpoint(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

/// Shared record of what a collector saw.
pub type Received = Arc<Mutex<Vec<(SnapshotSubmission, Result<(), String>)>>>;

/// A collector for the local network: checks every submission (the signature
/// recovers to the slot's registered signer; the deadline has not passed) and
/// records each verdict with its reason.
pub struct DevnetCollector {
    pub anchor: Arc<crate::chain::Anchor>,
    pub chain_id: u64,
    pub received: Received,
}

impl std::fmt::Debug for DevnetCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevnetCollector").field("chain_id", &self.chain_id).finish_non_exhaustive()
    }
}

impl DevnetCollector {
    async fn verdict(&self, s: &SnapshotSubmission) -> Result<(), String> {
        let r = s.request.as_ref().ok_or("the submission has no request")?;
        let head = self.anchor.head().await.map_err(|e| format!("anchor unavailable: {e}"))?;
        if head > r.deadline {
            return Err(format!("deadline {} passed (anchor head {head})", r.deadline));
        }
        let registered = self.anchor.slot_owner(r.slot_id).await.map_err(|e| format!("anchor unavailable: {e}"))?;
        if registered == Address::ZERO {
            return Err(format!("slot {} is not registered", r.slot_id));
        }
        signature_is_from(s, self.chain_id, self.anchor.protocol_state, registered)
    }
}

#[tonic::async_trait]
impl proto::submission_server::Submission for DevnetCollector {
    async fn submit_snapshot(
        &self,
        request: tonic::Request<SnapshotSubmission>,
    ) -> Result<tonic::Response<SubmissionResponse>, tonic::Status> {
        let s = request.into_inner();
        let verdict = self.verdict(&s).await;
        let message = if verdict.is_ok() { "Success" } else { "Failure" };
        if let Err(reason) = &verdict {
            tracing::info!("rejected a submission: {reason}");
        }
        self.received.lock().unwrap_or_else(|p| p.into_inner()).push((s, verdict));
        Ok(tonic::Response::new(SubmissionResponse { message: message.into() }))
    }

    async fn submit_snapshot_simulation(
        &self,
        request: tonic::Request<tonic::Streaming<SnapshotSubmission>>,
    ) -> Result<tonic::Response<SubmissionResponse>, tonic::Status> {
        let mut stream = request.into_inner();
        let mut all_ok = true;
        while let Some(s) = stream.message().await? {
            let verdict = self.verdict(&s).await;
            all_ok &= verdict.is_ok();
            self.received.lock().unwrap_or_else(|p| p.into_inner()).push((s, verdict));
        }
        Ok(tonic::Response::new(SubmissionResponse { message: if all_ok { "Success" } else { "Failure" }.into() }))
    }
}

/// Serves `collector` on `listener` until `shutdown` completes.
pub async fn serve(
    collector: DevnetCollector,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tonic::transport::Server::builder()
        .add_service(proto::submission_server::SubmissionServer::new(collector))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
