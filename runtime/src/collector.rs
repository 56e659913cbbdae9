//! The collector's gRPC interface (PROTOCOL.md §6), generated from
//! `proto/submission.proto`: the client a node submits with, and the server
//! side the devnet collector implements.

pub use lite_node_protocol::proto;

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::OpenOptions,
    io::{self, Write},
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use alloy::primitives::Address;
use proto::{SnapshotSubmission, SubmissionResponse, submission_client::SubmissionClient};
use serde::{Deserialize, Serialize};

use lite_node_plugin_api::{AssignmentRequest, RpcError};
use lite_node_protocol::eip712::{Request, domain, recover};

use crate::{
    chain::{Anchor, HttpRpc},
    compute::LoadedPackage,
};

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

/// One submission as the collector saw it: what came, the verdict (with the
/// reason for a rejection), and when it was answered.
#[derive(Clone, Debug)]
pub struct Seen {
    pub submission: SnapshotSubmission,
    pub verdict: Result<(), String>,
    pub answered_at: SystemTime,
}

/// Shared record of what a collector saw.
pub type Received = Arc<Mutex<Vec<Seen>>>;

/// A collector for the local network: checks every submission (the signature
/// recovers to the slot's registered signer; the deadline has not passed;
/// with a [`SelectionCheck`], the slot was selected for that epoch and pool)
/// and records each verdict with its reason.
pub struct DevnetCollector {
    pub anchor: Arc<crate::chain::Anchor>,
    pub chain_id: u64,
    pub received: Received,
    pub selection: Option<Arc<SelectionCheck>>,
    /// Print one line per verdict on stdout (the standalone `lite-node collector`).
    pub announce: bool,
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
        signature_is_from(s, self.chain_id, self.anchor.protocol_state, registered)?;
        if let Some(selection) = &self.selection {
            let epoch = selection.epoch(&self.anchor, r.epoch_id).await?;
            selection.check(&epoch, r.slot_id, &r.project_id)?;
        }
        Ok(())
    }

    fn record(&self, submission: SnapshotSubmission, verdict: Result<(), String>) {
        if self.announce {
            let r = submission.request.clone().unwrap_or_default();
            let what = format!("epoch {} slot {} {} {}", r.epoch_id, r.slot_id, r.project_id, r.snapshot_cid);
            match &verdict {
                Ok(()) => println!("accepted {what}"),
                Err(reason) => println!("rejected {what}: {reason}"),
            }
        }
        let seen = Seen { submission, verdict, answered_at: SystemTime::now() };
        self.received.lock().unwrap_or_else(|p| p.into_inner()).push(seen);
    }
}

/// One epoch's assignment as the data market's rule gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochAssignment {
    pub epoch_id: u64,
    pub begin: u64,
    pub end: u64,
    /// Hash of the source block the seed is taken from (`begin`).
    pub block_hash: String,
    pub total_slots: u64,
    /// Selected slot → its pool (as listed).
    pub selected: BTreeMap<u64, String>,
}

/// Checks that a submission's slot was selected for its epoch and that a
/// pool-scoped project id names the pool the slot was assigned, by running
/// the compute package's own assignment rule on the epoch's seed block.
pub struct SelectionCheck {
    source: Arc<HttpRpc>,
    pools: Vec<String>,
    package: Arc<LoadedPackage>,
    library: usize,
    /// Where EpochReleased lookups start on the anchor chain.
    from_block: u64,
    epochs: tokio::sync::Mutex<BTreeMap<u64, Arc<EpochAssignment>>>,
}

impl std::fmt::Debug for SelectionCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectionCheck").field("pools", &self.pools.len()).finish_non_exhaustive()
    }
}

impl SelectionCheck {
    /// A check with the active `pools`, the source chain the seed blocks are
    /// read from, and a package that implements the assignment rule.
    pub fn new(
        source: Arc<HttpRpc>,
        pools: Vec<String>,
        package: Arc<LoadedPackage>,
        from_block: u64,
    ) -> Result<Self, String> {
        if pools.is_empty() {
            return Err("the selection check needs the active pool list".into());
        }
        let library = package.libraries.iter().position(|l| l.provides_assignments()).ok_or_else(|| {
            format!(
                "the compute package {} has no library that implements slot assignments",
                package.package.manifest.commit
            )
        })?;
        Ok(Self { source, pools, package, library, from_block, epochs: Default::default() })
    }

    pub fn pools(&self) -> &[String] {
        &self.pools
    }

    /// The assignment of `epoch_id`: its release, seed block, the total slots
    /// now, and the rule's answer (kept once computed).
    pub async fn epoch(&self, anchor: &Anchor, epoch_id: u64) -> Result<Arc<EpochAssignment>, String> {
        if let Some(known) = self.epochs.lock().await.get(&epoch_id) {
            return Ok(known.clone());
        }
        let unavailable = |what: &str, e: RpcError| format!("{what} unavailable: {e}");
        let (begin, end) = anchor
            .epoch_release(epoch_id, self.from_block)
            .await
            .map_err(|e| unavailable("anchor", e))?
            .ok_or_else(|| format!("epoch {epoch_id} was never released for this data market"))?;
        let block = self
            .source
            .call_value("eth_getBlockByNumber", serde_json::json!([format!("0x{begin:x}"), false]))
            .await
            .map_err(|e| unavailable("source chain", e))?;
        let block_hash = block["hash"]
            .as_str()
            .ok_or_else(|| format!("the source chain has no block {begin} (epoch {epoch_id}'s seed block)"))?
            .to_owned();
        let total_slots = anchor.total_slots().await.map_err(|e| unavailable("anchor", e))?;
        let library = &self.package.libraries[self.library];
        let request = AssignmentRequest {
            epoch_id,
            block_hash: block_hash.as_str().into(),
            total_slots,
            pools: self.pools.iter().map(|p| p.as_str().into()).collect(),
        };
        let answer = library.assignments(&request).map_err(|e| format!("library `{}`: {e}", library.name))?;
        let mut selected = BTreeMap::new();
        for s in &answer.selected {
            let pool = answer.pools.get(s.pool as usize).ok_or_else(|| {
                format!("library `{}` answered pool index {} of {}", library.name, s.pool, answer.pools.len())
            })?;
            selected.insert(s.slot_id, pool.to_string());
        }
        let assignment = Arc::new(EpochAssignment { epoch_id, begin, end, block_hash, total_slots, selected });
        self.epochs.lock().await.insert(epoch_id, assignment.clone());
        Ok(assignment)
    }

    /// Whether `slot_id` may submit `project_id` in `epoch`. Projects whose
    /// data source is an address (a pool) need the slot selected and assigned
    /// exactly that pool; other projects are not scoped by the assignment.
    pub fn check(&self, epoch: &EpochAssignment, slot_id: u64, project_id: &str) -> Result<(), String> {
        let parts: Vec<&str> = project_id.split(':').collect();
        let sources: Vec<&str> = match parts.as_slice() {
            [_, ds, _] => ds.split('_').collect(),
            _ => Vec::new(),
        };
        let addresses: Vec<&str> = sources.into_iter().filter(|s| is_address(s)).collect();
        if addresses.is_empty() {
            return Ok(());
        }
        let e = epoch.epoch_id;
        for a in &addresses {
            if !self.pools.iter().any(|p| p.eq_ignore_ascii_case(a)) {
                return Err(format!("{project_id}: pool {a} is not in the data market's active pool list"));
            }
        }
        let Some(assigned) = epoch.selected.get(&slot_id) else {
            return Err(format!(
                "slot {slot_id} was not selected in epoch {e} (seed block {}, {} total slots)",
                epoch.block_hash, epoch.total_slots
            ));
        };
        if !addresses.iter().any(|a| a.eq_ignore_ascii_case(assigned)) {
            return Err(format!("slot {slot_id} was assigned pool {assigned} in epoch {e}, not {project_id}"));
        }
        Ok(())
    }
}

fn is_address(s: &str) -> bool {
    s.len() == 42 && s.starts_with("0x") && s[2..].bytes().all(|b| b.is_ascii_hexdigit())
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
        self.record(s, verdict);
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
            self.record(s, verdict);
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
