//! The node's side of submitting: for each computed snapshot of an epoch,
//! unless the ledger already holds it — upload to IPFS when configured (the
//! CID must agree), read the anchor head for the deadline and header, sign,
//! send, and record the collector's answer before anything else happens.
//!
//! What every slot's submitter shares is [`Shared`] once: the collector's
//! connection, the anchor head (read at most every [`HEAD_FRESH`] for all of
//! them), and IPFS uploads (the same bytes, drawn by several slots, go up once).
//!
//! **A power loss.** Each message's `sending` line is appended before it is
//! sent but synced only with its answer's line (syncing every message before
//! its send cost a thousand slots too much), so a machine that loses power
//! before that sync may lose both lines. What a message varies by besides
//! its snapshot — the epoch's deadline and header — is therefore fixed by
//! the epoch ([`Shared::fix_epoch_early`], or its first submission) and
//! synced with the boot id (`state/epoch-deadline.json`) before any message
//! of the epoch is sent, and a restart on another boot keeps it for the
//! epoch: signed again (deterministic ECDSA), a message is the same bytes.
//! A restart on the same boot lost nothing: the ledger says what left.

use lite_node_protocol::{
    eip712::{Request, Signer},
    proto, quantity,
};

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures_util::{StreamExt, stream::FuturesOrdered};
use lite_node_core::time::now_ms;
use tokio::sync::OnceCell;

use super::{
    Collector, Ledger, Status, Submission, Verdict,
    ledger::{Entry, Recorded},
    submit,
};
use crate::{
    chain::Anchor,
    epochs::Epoch,
    ipfs::Ipfs,
    retry::{Policy, retry},
    snapshots::Stored,
    status::{NodeStatus, Trouble},
};

/// How old an anchor head read may be and still serve a submission's
/// deadline (a staler head only makes the deadline earlier).
pub const HEAD_FRESH: Duration = Duration::from_millis(500);

/// IPFS uploads remembered, by CID, before the memory is cleared.
const UPLOADS_KEPT: usize = 4096;

/// Snapshots of one result being sent at once (a full node's pools).
const SNAPSHOTS_IN_FLIGHT: usize = 16;

/// What the submitters of every slot share.
#[derive(Debug)]
pub struct Shared {
    pub collector: Collector,
    pub ipfs: Option<Ipfs>,
    /// Anchor blocks a submission stays valid past the head it was signed at.
    pub deadline_buffer: u64,
    pub data_market: String,
    pub protocol_state: String,
    /// Where a collector that cannot be reached shows (`/health`, metrics).
    pub status: Arc<NodeStatus>,
    /// The last anchor head read, `(when, number, hash)`.
    head: tokio::sync::Mutex<Option<(Instant, u64, String)>>,
    /// Each CID's upload, once.
    uploads: Mutex<HashMap<String, UploadOnce>>,
    /// The epoch's deadline and header ([`Shared::epoch_fix`]).
    epoch_fix: EpochFix,
    /// The slots' ledger lines, made durable together.
    pub ledger_sync: super::ledger::GroupCommit,
    /// Several slots: an accepted submission is a debug line (the epoch's
    /// summary says how many); a refused or missed one still warns.
    pub quiet: bool,
    /// A watch on the collector is running ([`Shared::watch_collector`]).
    watching_collector: std::sync::atomic::AtomicBool,
}

/// How often a collector that left a submission unanswered is tried while
/// no submission tries it.
const COLLECTOR_PROBE: Duration = Duration::from_secs(5);

/// One CID's upload, made by the first submission that needs it.
type UploadOnce = Arc<OnceCell<Result<(), Upload>>>;

impl Shared {
    pub fn new(
        collector: Collector,
        ipfs: Option<Ipfs>,
        deadline_buffer: u64,
        data_market: String,
        protocol_state: String,
        status: Arc<NodeStatus>,
    ) -> Self {
        Self {
            collector,
            ipfs,
            deadline_buffer,
            data_market,
            protocol_state,
            status,
            head: tokio::sync::Mutex::new(None),
            uploads: Mutex::default(),
            epoch_fix: EpochFix::default(),
            ledger_sync: Default::default(),
            quiet: false,
            watching_collector: Default::default(),
        }
    }

    /// After a submission ended unanswered, the collector's trouble stays on
    /// `/health` only while it is true: the collector is tried every
    /// [`COLLECTOR_PROBE`] until it answers, and then the trouble clears,
    /// without waiting for this node's next selection to try it.
    fn watch_collector(self: &Arc<Self>) {
        use std::sync::atomic::Ordering::SeqCst;
        if self.watching_collector.swap(true, SeqCst) {
            return;
        }
        let shared = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(COLLECTOR_PROBE).await;
                if !shared.status.troubles.has(Trouble::Collector) {
                    break;
                }
                if shared.collector.reachable().await.is_ok() {
                    tracing::info!("collector {} answers again", shared.collector.endpoint());
                    shared.status.troubles.set(Trouble::Collector, None);
                    break;
                }
            }
            shared.watching_collector.store(false, SeqCst);
        });
    }

    /// The anchor's latest block number and hash, read at most once every
    /// [`HEAD_FRESH`] for all submissions (the others wait for that read).
    /// The epoch's work reads it as its computes start, so the first
    /// submission does not wait for it. A head read before block
    /// `at_least` (the release of the epoch asking, which the node has seen)
    /// is read again, however fresh: on a chain whose epochs come faster
    /// than [`HEAD_FRESH`], a deadline from an earlier epoch's head would
    /// have passed before its submission was sent.
    pub async fn latest(&self, anchor: &Anchor, at_least: u64) -> (u64, String) {
        let mut head = self.head.lock().await;
        if let Some((at, number, hash)) = head.as_ref()
            && at.elapsed() < HEAD_FRESH
            && *number >= at_least
        {
            return (*number, hash.clone());
        }
        let (number, hash) = latest_block(anchor).await;
        *head = Some((Instant::now(), number, hash.clone()));
        (number, hash)
    }

    /// Keeps each epoch's deadline and header in `path` (the node's
    /// `state/epoch-deadline.json`), and takes up the one a run before this
    /// one fixed there if the machine went down since ([`EpochFix::open`]).
    pub fn keep_fixes_in(&mut self, path: PathBuf) -> anyhow::Result<()> {
        self.epoch_fix = EpochFix::open(path)?;
        Ok(())
    }

    /// The deadline and header of every submission of `epoch_id`: the head
    /// read as its computes start ([`Shared::fix_epoch_early`]: a lite
    /// node's), else for its first submission (plus the buffer, for the
    /// deadline),
    /// the same for every slot and every wave — so the submissions that wait
    /// for a turn (at most 128 are sent at once) do not each get a window of
    /// their own (with the collector down, an epoch of a thousand slots ends
    /// when its deadline passes, not eight windows later). Written and
    /// synced before the epoch's first message is sent, and kept while the
    /// epoch is worked — also after a power loss that took `sending` lines
    /// the disk had not got: a message signed again is then the same bytes
    /// as the one that may have left, never a second submission with
    /// another deadline.
    fn epoch_fix(&self, epoch_id: u64, head: u64, header: &str) -> (Fix, Written) {
        self.epoch_fix.of(epoch_id, head + self.deadline_buffer, header)
    }

    /// [`Shared::epoch_fix`] for a message about to be signed. A fix made
    /// as the computes started, under which nothing was signed yet, is made
    /// anew when less than half its buffer is left (a slow compute, a
    /// compute retried): a fresh deadline, never past the furthest one the
    /// epoch's release allows (`released_block + WINDOW_BLOCKS`).
    fn signing_fix(&self, epoch_id: u64, released_block: u64, head: u64, header: &str) -> (Fix, Written) {
        let latest = released_block.saturating_add(lite_node_protocol::submission::WINDOW_BLOCKS);
        self.epoch_fix.for_signing(epoch_id, head, self.deadline_buffer, latest, header)
    }

    /// [`Shared::epoch_fix`] as the epoch's computes start (`head` is read
    /// then), written while they run. One try: a failure (a full disk) is
    /// the submissions' to retry, or to report.
    pub async fn fix_epoch_early(&self, epoch_id: u64, head: u64, header: &str) {
        let (fix, written) = self.epoch_fix(epoch_id, head, header);
        if let Err(e) = self.epoch_fix.write(&fix, &written).await {
            tracing::debug!("epoch {epoch_id}: keeping its deadline on disk failed ({e}); its submissions try again");
        }
    }

    /// Waits until `fix` is on disk (the first caller writes it; the others
    /// sign meanwhile): no message of its epoch leaves before.
    async fn fix_on_disk(&self, fix: &Fix, written: &Written) -> anyhow::Result<()> {
        let write = || self.epoch_fix.write(fix, written);
        Ok(retry(Policy::STATE, "keeping the epoch's deadline on disk", write, |_| true).await?)
    }

    /// Uploads `stored` unless its CID went up (or is going up) already.
    async fn upload_once(&self, ipfs: &Ipfs, stored: &Stored) -> Result<(), Upload> {
        let cell = {
            let mut uploads = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
            if uploads.len() >= UPLOADS_KEPT {
                uploads.clear();
            }
            uploads.entry(stored.cid.clone()).or_default().clone()
        };
        cell.get_or_init(|| upload(ipfs, stored)).await.clone()
    }
}

/// Signs and sends computed snapshots, once per (epoch, project id).
#[derive(Debug)]
pub struct Submitter {
    pub signer: Signer,
    pub ledger: Arc<Ledger>,
    pub slot_id: u64,
    pub shared: Arc<Shared>,
}

impl Submitter {
    /// The submitting stage: every stored snapshot of a computed result,
    /// each answer as it came. Errors only when the ledger cannot be written
    /// or read (after retries).
    ///
    /// Each answer comes with its [`Durable`] write: the epoch is recorded
    /// only once every one has ended, but a submission's turn (one of the
    /// `STAGES_IN_FLIGHT` at once) ends with the answer, not
    /// with the disk.
    pub async fn submit(
        &self,
        epoch: &Epoch,
        stored: &[Stored],
        anchor: &Arc<Anchor>,
    ) -> anyhow::Result<(Vec<Submission>, Vec<Durable>)> {
        let mut submissions = Vec::with_capacity(stored.len());
        let mut durable = Vec::new();
        // A full node's result holds a snapshot per pool: sent one after
        // another, hundreds of collector round trips could outlast the
        // deadline. Each (epoch, project id) is its own message in the
        // ledger, so they go out side by side; answers keep their order.
        let mut waiting = stored.iter();
        let mut in_flight = FuturesOrdered::new();
        loop {
            while in_flight.len() < SNAPSHOTS_IN_FLIGHT {
                let Some(stored) = waiting.next() else { break };
                in_flight.push_back(self.submit_tagged(epoch, stored, anchor));
            }
            let Some((stored, answer)) = in_flight.next().await else { break };
            let (status, write) = answer?;
            submissions.push(Submission { project_id: stored.project_id.clone(), status, answered_at_ms: now_ms() });
            durable.extend(write);
        }
        Ok((submissions, durable))
    }

    async fn submit_tagged<'a>(
        &self,
        epoch: &Epoch,
        stored: &'a Stored,
        anchor: &Arc<Anchor>,
    ) -> (&'a Stored, anyhow::Result<Answered>) {
        (stored, self.submit_one(epoch, stored, anchor).await)
    }

    async fn submit_one(&self, epoch: &Epoch, stored: &Stored, anchor: &Arc<Anchor>) -> anyhow::Result<Answered> {
        let id = &stored.project_id;
        match self.recorded(epoch.epoch_id, id).await? {
            Recorded::Nothing => {}
            Recorded::Answered(answer) => {
                // After a restart, or when the epoch is worked again (a snapshot
                // is sent once per epoch and project id whatever asks again).
                tracing::info!(
                    "epoch {} {id}: the ledger holds the collector's answer to it already ({}); not sent again",
                    epoch.epoch_id,
                    answer.as_deref().unwrap_or("accepted")
                );
                // A rejection stays one: the books count it as they would have.
                let status = match answer {
                    None => Status::AlreadyAcknowledged,
                    Some(verdict) => match verdict.strip_prefix("missed: ") {
                        Some(why) => Status::Missed(format!("{why} (before a restart)")),
                        None => {
                            let why = verdict.strip_prefix("rejected: ").unwrap_or(&verdict);
                            Status::Rejected(format!("{why} (answered before a restart)"))
                        }
                    },
                };
                return Ok((status, None));
            }
            Recorded::Sent(message) => return self.send_again(epoch, stored, anchor, &message).await,
        }
        let shared = &self.shared;
        if let Some(ipfs) = &shared.ipfs {
            match shared.upload_once(ipfs, stored).await {
                Ok(()) => {}
                Err(Upload::Mismatch(e)) => {
                    tracing::warn!("epoch {} {id}: not submitted: {e}", epoch.epoch_id);
                    return Ok((Status::NotSubmitted(e), None));
                }
                Err(Upload::Unavailable(e)) => {
                    tracing::warn!("epoch {}: {e}; submitting the locally computed CID", epoch.epoch_id)
                }
            }
        }
        let (head, latest) = shared.latest(anchor, epoch.released_block).await;
        let (fix, written) = shared.signing_fix(epoch.epoch_id, epoch.released_block, head, &latest);
        let (deadline, header) = (fix.deadline, fix.header.clone());
        if head > deadline {
            let why = format!(
                "the epoch's submission deadline (anchor block {deadline}) passed before this submission's turn \
                 (head {head})"
            );
            tracing::warn!("epoch {} {id}: not submitted: {why}", epoch.epoch_id);
            shared.status.metrics.submission_failures.inc();
            return Ok((Status::Missed(why), None));
        }
        let request = Request {
            slot_id: self.slot_id,
            deadline,
            snapshot_cid: stored.cid.clone(),
            epoch_id: epoch.epoch_id,
            project_id: id.clone(),
        };
        let signature = self.signer.sign(&request).map_err(anyhow::Error::msg)?;
        let submission = proto::SnapshotSubmission {
            request: Some((&request).into()),
            signature,
            header,
            data_market: shared.data_market.clone(),
            node_version: Some(env!("CARGO_PKG_VERSION").into()),
            protocol_state: shared.protocol_state.clone(),
            snapshot: None,
        };
        // The message is in the ledger before it leaves: were the node
        // killed between the send and the answer's line, its restart sends
        // these bytes again rather than sign another message (another
        // deadline, another header) that the collector would hold beside the
        // first. One small append, here (measured: handing it to a blocking
        // thread, or syncing it, added 15-30 ms to a thousand slots' p50),
        // not waited for on the disk: it outlives the process (a SIGKILL),
        // and the answer's sync makes it durable with the answer.
        let message = prost::Message::encode_to_vec(&submission);
        let entry = Entry::sending(epoch.epoch_id, epoch.released_block, id, &stored.cid, message)?;
        let write = || std::future::ready(self.ledger.write(&entry));
        retry(Policy::STATE, "recording a submission in the ledger before sending it", write, |_| true).await?;
        shared.fix_on_disk(&fix, &written).await?;
        let submission = with_snapshot(submission, stored, epoch.epoch_id).await;
        self.send(epoch, id, anchor, submission).await
    }

    /// What the ledger holds of `id` in `epoch_id`. An epoch older than the
    /// ledger keeps in memory: its file is read off the async threads, and a
    /// read that fails is retried as a write that fails is (never guessed).
    async fn recorded(&self, epoch_id: u64, id: &str) -> anyhow::Result<Recorded> {
        if let Some(recorded) = self.ledger.held(epoch_id, id) {
            return Ok(recorded);
        }
        let read = || {
            let (ledger, id) = (self.ledger.clone(), id.to_owned());
            async move {
                tokio::task::spawn_blocking(move || ledger.on_disk(epoch_id, &id))
                    .await
                    .map_err(std::io::Error::other)?
            }
        };
        Ok(retry(Policy::STATE, "reading the submission ledger", read, |_| true).await?)
    }

    /// A message sent before a restart with no answer recorded: sent again
    /// byte for byte while its deadline holds (the collector may have it:
    /// the same bytes are the same submission), never signed anew; past its
    /// deadline, a miss.
    async fn send_again(
        &self,
        epoch: &Epoch,
        stored: &Stored,
        anchor: &Arc<Anchor>,
        message: &[u8],
    ) -> anyhow::Result<Answered> {
        let (epoch_id, id, shared) = (epoch.epoch_id, &stored.project_id, &self.shared);
        let decoded = <proto::SnapshotSubmission as prost::Message>::decode(message);
        let Some((submission, request)) = decoded.ok().and_then(|s| Some((s.clone(), s.request?))) else {
            let why = format!(
                "{} holds a message sent before a restart that does not decode; not sent again (nothing else can \
                 be sent for it without risking two different submissions)",
                self.ledger.path().display()
            );
            tracing::error!("epoch {epoch_id} {id}: {why}");
            return Ok((Status::NotSubmitted(why), None));
        };
        if request.snapshot_cid != stored.cid {
            tracing::warn!(
                "epoch {epoch_id} {id}: computed again as {}, but {} was sent before the restart: that one stands",
                stored.cid,
                request.snapshot_cid
            );
        }
        let (head, _) = shared.latest(anchor, epoch.released_block).await;
        if head > request.deadline {
            let why = format!(
                "sent before a restart with no answer recorded (the collector may hold it), and its deadline \
                 (anchor block {}) has passed (head {head}): not sent again",
                request.deadline
            );
            tracing::warn!("epoch {epoch_id} {id}: {why}");
            shared.status.metrics.submission_failures.inc();
            return Ok((Status::Missed(why), None));
        }
        tracing::info!(
            "epoch {epoch_id} {id}: sent before a restart with no answer recorded; sending the same signed message again"
        );
        let submission = with_snapshot(submission, stored, epoch_id).await;
        self.send(epoch, id, anchor, submission).await
    }

    /// Sends a message whose `sending` line is written; the collector's
    /// answer comes back with the write that makes it durable.
    async fn send(
        &self,
        epoch: &Epoch,
        id: &str,
        anchor: &Arc<Anchor>,
        submission: proto::SnapshotSubmission,
    ) -> anyhow::Result<Answered> {
        let shared = &self.shared;
        let (deadline, cid) =
            submission.request.as_ref().map(|r| (r.deadline, r.snapshot_cid.clone())).unwrap_or_default();
        let troubles = &shared.status.troubles;
        let metrics = &shared.status.metrics;
        let endpoint = shared.collector.endpoint();
        let verdict = submit(
            &shared.collector,
            submission,
            || {
                let (shared, anchor) = (shared.clone(), anchor.clone());
                Box::pin(async move { shared.latest(&anchor, 0).await.0 <= deadline })
            },
            |error: &str| {
                metrics.submission_retries.inc();
                troubles.set(Trouble::Collector, Some(format!("submitting to {endpoint} failed: {error}")));
            },
        )
        .await;
        if matches!(verdict, Verdict::Unreachable(_)) {
            shared.watch_collector();
        } else {
            troubles.set(Trouble::Collector, None);
        }
        if verdict != Verdict::Accepted {
            metrics.submission_failures.inc();
        }
        let status = match verdict {
            Verdict::Accepted => Status::Accepted,
            Verdict::Rejected(r) => Status::Rejected(r),
            Verdict::Unreachable(r) => Status::Missed(r),
        };
        let epoch_id = epoch.epoch_id;
        match &status {
            Status::Accepted if shared.quiet => tracing::debug!("epoch {epoch_id} {id}: submission accepted ({cid})"),
            Status::Accepted => tracing::info!("epoch {epoch_id} {id}: submission accepted ({cid})"),
            other => tracing::warn!("epoch {epoch_id} {id}: submission {other} ({cid})"),
        }
        if matches!(status, Status::Missed(_)) {
            // Its deadline passed unanswered: nothing can send it any more,
            // so its `sending` line is closed, and a restart that works the
            // epoch again reads a miss, not a message to send. Not waited
            // for on the disk: were the line lost, the restart would find
            // the deadline passed and end the same way.
            let entry = Entry::answered(epoch_id, epoch.released_block, id, &cid, &status.to_string())?;
            if let Err(e) = self.ledger.write(&entry) {
                tracing::warn!("epoch {epoch_id} {id}: the miss is not in the ledger: {e}");
            }
            return Ok((status, None));
        }
        // The collector has answered: until the ledger holds it durably, a
        // restart would send the message again (the same bytes), so the
        // epoch is not recorded before the disk has it (a stop abandons the
        // epoch after its grace). Off the async threads, and with the other
        // slots' lines: a thousand slots' answers cost a few syncs, not a
        // thousand — waited for apart from the sends (measured: waiting for
        // them in a submission's turn held 128 turns through each sync, and
        // a thousand slots' p99 rose by 25 ms).
        let entry = Entry::answered(epoch_id, epoch.released_block, id, &cid, &status.to_string())?;
        let (shared, ledger) = (self.shared.clone(), self.ledger.clone());
        let durable: Durable = Box::pin(async move {
            let write = || shared.ledger_sync.record(&ledger, entry.clone());
            // Retried until the disk takes it, and on /health meanwhile.
            let mut failed = false;
            let troubles = &shared.status.troubles;
            let shown = |e: &std::io::Error| {
                failed = true;
                troubles
                    .set(Trouble::State, Some(format!("recording a submission's answer in the ledger failed: {e}")));
                true
            };
            retry(Policy::STATE, "recording a submission's answer in the ledger", write, shown).await?;
            if failed {
                troubles.set(Trouble::State, None);
            }
            Ok(())
        });
        Ok((status, Some(durable)))
    }
}

/// The write that makes a collector's answer durable in the ledger.
pub type Durable = lite_node_core::BoxFuture<'static, anyhow::Result<()>>;

/// A submission's status, and the write its answer waits for (none for a
/// miss or a message not sent).
type Answered = (Status, Option<Durable>);

/// The anchor's latest block number (for the deadline) and hash (the
/// header), from one call; waits under [`Policy::CHAIN`] while the anchor
/// does not answer (a stop abandons the epoch after its grace).
async fn latest_block(anchor: &Anchor) -> (u64, String) {
    let read = || async move {
        let block = anchor.rpc().call_value("eth_getBlockByNumber", serde_json::json!(["latest", false])).await;
        let block = block.map_err(|e| e.to_string())?;
        let number = quantity(&block["number"]).map_err(|e| format!("the latest block's number: {e}"))?;
        Ok::<_, String>((number, block["hash"].as_str().unwrap_or_default().to_owned()))
    };
    let answer = retry(Policy::CHAIN, "reading the anchor head before submitting", read, |_| true).await;
    answer.expect("retried until it answers")
}

#[derive(Clone, Debug)]
enum Upload {
    /// IPFS could not be reached or refused (the CID is still the content's).
    Unavailable(String),
    /// IPFS stored the bytes under another CID than the node computed.
    Mismatch(String),
}

/// Uploads a stored snapshot's exact bytes and checks the CID IPFS gives them.
async fn upload(ipfs: &Ipfs, stored: &Stored) -> Result<(), Upload> {
    let bytes = tokio::fs::read(&stored.path)
        .await
        .map_err(|e| Upload::Unavailable(format!("reading {}: {e}", stored.path.display())))?;
    let name = stored.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let add = || ipfs.add(bytes.clone(), &name);
    let cid = retry(Policy::IPFS, "IPFS upload", add, |_| true)
        .await
        .map_err(|e| Upload::Unavailable(format!("IPFS upload failed ({e})")))?;
    if cid == stored.cid {
        Ok(())
    } else {
        Err(Upload::Mismatch(format!("IPFS stored the snapshot as {cid}, the node computed {}", stored.cid)))
    }
}

/// Each epoch's deadline and header, fixed by its first submission
/// ([`Shared::epoch_fix`]): several epochs may be in flight at once (the
/// node works the next while an earlier one's submissions still retry).
#[derive(Debug, Default)]
struct EpochFix {
    /// Where the fixes of the epochs in flight are kept (none in tests of
    /// the submitter alone).
    path: Option<PathBuf>,
    /// This boot of the machine (Linux's `boot_id`), written with each fix.
    boot: Option<String>,
    /// The newest [`KEEP_FIXES`] epochs' fixes, each with whether it is on
    /// disk and whether a message was signed under it (then it is the
    /// epoch's for good).
    fixed: Mutex<BTreeMap<u64, (Fix, Written, bool)>>,
    /// Held while the file is written, so a later write (which holds every
    /// fix made before it) is never overtaken by an earlier one.
    file: tokio::sync::Mutex<()>,
}

/// Fixes kept, the newest epochs': more than the epochs a node has in
/// flight at once, so a fix is dropped only once its epoch is handled.
const KEEP_FIXES: usize = 64;

/// The fixes file: a list (one epoch's fix alone, before several epochs
/// could be in flight).
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum StoredFixes {
    Many(Vec<Fix>),
    One(Fix),
}

impl StoredFixes {
    fn into_vec(self) -> Vec<Fix> {
        match self {
            Self::Many(fixes) => fixes,
            Self::One(fix) => vec![fix],
        }
    }
}

/// Whether a fix is on disk; its lock is held while it is written.
type Written = Arc<tokio::sync::Mutex<bool>>;

/// What every submission of one epoch carries alike, and the boot it was
/// fixed in.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Fix {
    epoch_id: u64,
    deadline: u64,
    header: String,
    #[serde(default)]
    boot_id: Option<String>,
}

impl EpochFix {
    /// The fix a run before this one left in `path`, taken up only if the
    /// machine went down since (another boot id, or none to compare): a
    /// power loss may have taken `sending` lines, so what was sent is not
    /// known, and a message signed again must be the same bytes. After a
    /// process crash on the same boot, nothing written was lost — it is
    /// made durable here (one sync of the filesystem) — so the ledgers say
    /// exactly what left: that is sent again byte for byte, and the rest
    /// may take a deadline of its own.
    fn open(path: PathBuf) -> anyhow::Result<Self> {
        Self::open_on(path, boot_id())
    }

    fn open_on(path: PathBuf, boot: Option<String>) -> anyhow::Result<Self> {
        // Every epoch's fix is in `epoch-fixes.json`; `path` holds the
        // newest alone, as a release before several epochs could be in
        // flight wrote and reads it (a one-step rollback keeps working).
        // Whichever of the two was written last wins for an epoch in both.
        let read = |path: &std::path::Path| -> anyhow::Result<Option<(Vec<Fix>, Option<std::time::SystemTime>)>> {
            match std::fs::read(path) {
                Ok(bytes) => {
                    let fixes = serde_json::from_slice::<StoredFixes>(&bytes).map_err(|e| {
                        anyhow::anyhow!(
                            "{} is not valid ({e}); it is rewritten by the next epoch's first submission: remove it \
                             if no epoch is being worked",
                            path.display()
                        )
                    })?;
                    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
                    Ok(Some((fixes.into_vec(), modified)))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => anyhow::bail!("reading {}: {e}", path.display()),
            }
        };
        let (many, newest) = (read(&fixes_path(&path))?, read(&path)?);
        let newest_is_later = match (&many, &newest) {
            (Some((_, Some(a))), Some((_, Some(b)))) => b > a,
            _ => true,
        };
        let mut by_epoch: BTreeMap<u64, Fix> = BTreeMap::new();
        for f in many.map(|(f, _)| f).unwrap_or_default() {
            by_epoch.insert(f.epoch_id, f);
        }
        for f in newest.map(|(f, _)| f).unwrap_or_default() {
            if newest_is_later || !by_epoch.contains_key(&f.epoch_id) {
                by_epoch.insert(f.epoch_id, f);
            }
        }
        let stored: Vec<Fix> = by_epoch.into_values().collect();
        let same_boot = |f: &Fix| boot.is_some() && f.boot_id == boot;
        let synced = stored.iter().any(same_boot) && sync_filesystem(&path).is_ok();
        // Taken up after a reboot: what was signed under them is not known.
        let fixed = stored
            .into_iter()
            .filter(|f| !(synced && same_boot(f)))
            .map(|f| (f.epoch_id, (f, Arc::new(tokio::sync::Mutex::new(true)), true)))
            .collect();
        Ok(Self { path: Some(path), boot, fixed: Mutex::new(fixed), file: Default::default() })
    }

    /// Keeps `fix` (and drops the oldest past [`KEEP_FIXES`]).
    fn insert(fixed: &mut BTreeMap<u64, (Fix, Written, bool)>, fix: Fix, signed: bool) -> (Fix, Written) {
        let written = Written::default();
        fixed.insert(fix.epoch_id, (fix.clone(), written.clone(), signed));
        while fixed.len() > KEEP_FIXES {
            fixed.pop_first();
        }
        (fix, written)
    }

    /// The fix of `epoch_id`: the one fixed already, or this one (to be
    /// written: [`EpochFix::write`]).
    fn of(&self, epoch_id: u64, deadline: u64, header: &str) -> (Fix, Written) {
        let mut fixed = self.fixed.lock().unwrap_or_else(|p| p.into_inner());
        match fixed.get(&epoch_id) {
            Some((f, w, _)) => (f.clone(), w.clone()),
            None => {
                let fix = Fix { epoch_id, deadline, header: header.into(), boot_id: self.boot.clone() };
                Self::insert(&mut fixed, fix, false)
            }
        }
    }

    /// The fix a message of `epoch_id` is signed under, at anchor head
    /// `head` (see `Shared::signing_fix`); from now on the epoch's.
    fn for_signing(&self, epoch_id: u64, head: u64, buffer: u64, latest: u64, header: &str) -> (Fix, Written) {
        let mut fixed = self.fixed.lock().unwrap_or_else(|p| p.into_inner());
        match fixed.get_mut(&epoch_id) {
            Some((f, written, signed)) => {
                let deadline = head.saturating_add(buffer).min(latest);
                let near = head.saturating_add(buffer / 2) > f.deadline && deadline > f.deadline;
                // Fixed as the computes started, from a head already late in
                // the window: a deadline the collector would refuse.
                let too_far = f.deadline > latest;
                if !*signed && (near || too_far) {
                    let why = if too_far {
                        format!("is past block {latest}, its release's furthest")
                    } else {
                        "came near".into()
                    };
                    tracing::info!(
                        "epoch {epoch_id}: nothing was signed before its deadline {} {why} (head {head}); its \
                         submissions take deadline {deadline}",
                        f.deadline
                    );
                    *f = Fix { epoch_id, deadline, header: header.into(), boot_id: self.boot.clone() };
                    *written = Written::default();
                }
                *signed = true;
                (f.clone(), written.clone())
            }
            None => {
                let deadline = head.saturating_add(buffer).min(latest);
                let fix = Fix { epoch_id, deadline, header: header.into(), boot_id: self.boot.clone() };
                Self::insert(&mut fixed, fix, true)
            }
        }
    }

    /// Writes `fix` and syncs it (file and directory), unless that is done;
    /// the file holds every epoch's fix kept.
    async fn write(&self, fix: &Fix, written: &Written) -> std::io::Result<()> {
        let mut done = written.lock().await;
        if *done {
            return Ok(());
        }
        if let Some(path) = self.path.clone() {
            let _file = self.file.lock().await;
            let fixes: Vec<Fix> = {
                let fixed = self.fixed.lock().unwrap_or_else(|p| p.into_inner());
                let mut fixes: Vec<Fix> = fixed.values().map(|(f, _, _)| f.clone()).collect();
                // Made anew since (or dropped): this one is what is signed under.
                fixes.retain(|f| f.epoch_id != fix.epoch_id);
                fixes.push(fix.clone());
                fixes.sort_by_key(|f| f.epoch_id);
                fixes
            };
            let text = serde_json::to_vec(&fixes).expect("fixes serialize");
            let newest = serde_json::to_vec(fixes.last().expect("one fix at least")).expect("a fix serializes");
            tokio::task::spawn_blocking(move || {
                lite_node_core::atomic_file::write_durable(&fixes_path(&path), &text)?;
                lite_node_core::atomic_file::write_durable(&path, &newest)
            })
            .await
            .map_err(std::io::Error::other)??;
        }
        *done = true;
        Ok(())
    }
}

/// Where every epoch's fix is kept, beside `path` (which holds the newest).
fn fixes_path(path: &std::path::Path) -> PathBuf {
    path.with_file_name("epoch-fixes.json")
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), where there is one.
fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|id| id.trim().to_owned())
}

/// Makes everything written on the filesystem holding `path` durable.
fn sync_filesystem(path: &std::path::Path) -> std::io::Result<()> {
    let dir = std::fs::File::open(path.parent().unwrap_or(std::path::Path::new(".")))?;
    lite_node_core::atomic_file::sync_filesystem(&dir)
}

/// `submission` carrying its snapshot's bytes (the file the CID was computed
/// from), so that the validators can keep and serve them; the signature
/// does not change (the CID commits to the bytes). The ledger holds the
/// message without them (the file is kept). Sent by its CID alone, with a
/// warning, when the file cannot be read, no longer hashes to the signed
/// CID, or is larger than a submission may carry.
async fn with_snapshot(
    mut submission: proto::SnapshotSubmission,
    stored: &Stored,
    epoch_id: u64,
) -> proto::SnapshotSubmission {
    let signed = submission.request.as_ref().map_or("", |r| r.snapshot_cid.as_str());
    let id = &stored.project_id;
    if signed != stored.cid {
        tracing::warn!(
            "epoch {epoch_id} {id}: the signed CID {signed} is not the stored snapshot's; sent without its bytes"
        );
        return submission;
    }
    match tokio::fs::read(&stored.path).await {
        Ok(bytes) if bytes.len() > lite_node_protocol::submission::caps::SNAPSHOT => tracing::warn!(
            "epoch {epoch_id} {id}: the snapshot is {} bytes, more than the {} a submission carries; sent without its \
             bytes",
            bytes.len(),
            lite_node_protocol::submission::caps::SNAPSHOT
        ),
        Ok(bytes) if lite_node_protocol::cid::cid(&bytes) != stored.cid => tracing::warn!(
            "epoch {epoch_id} {id}: {} no longer hashes to {}; sent without its bytes",
            stored.path.display(),
            stored.cid
        ),
        Ok(bytes) => submission.snapshot = Some(bytes),
        Err(e) => tracing::warn!(
            "epoch {epoch_id} {id}: cannot read the snapshot {} ({e}); sent without its bytes",
            stored.path.display()
        ),
    }
    submission
}

#[cfg(test)]
mod tests {
    use super::{EpochFix, Fix, fixes_path};

    fn fix(epoch_id: u64, deadline: u64, header: &str, boot: &str) -> Fix {
        Fix { epoch_id, deadline, header: header.into(), boot_id: Some(boot.into()) }
    }

    /// Fixed and written as a submission does it: fixed, then on disk before
    /// it is sent.
    async fn sent(d: &EpochFix, epoch: u64, deadline: u64, header: &str) -> Fix {
        let (f, written) = d.of(epoch, deadline, header);
        d.write(&f, &written).await.unwrap();
        f
    }

    /// The epoch's first submission fixes the deadline and header for the
    /// rest of it; a run after a reboot (a power loss may have taken what
    /// it sent) finds it on disk and keeps it, a run after a crash on the
    /// same boot (nothing lost: the ledgers know what left) fixes anew; the
    /// next epoch fixes its own.
    #[tokio::test]
    async fn an_epoch_keeps_its_first_submissions_deadline_and_header_across_a_reboot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("epoch-deadline.json");
        let d = EpochFix::open_on(path.clone(), Some("boot-1".into())).unwrap();
        assert_eq!(sent(&d, 7, 130, "0xa").await, fix(7, 130, "0xa", "boot-1"));
        assert_eq!(sent(&d, 7, 160, "0xb").await, fix(7, 130, "0xa", "boot-1"), "a later wave");
        let rebooted = EpochFix::open_on(path.clone(), Some("boot-2".into())).unwrap();
        assert_eq!(sent(&rebooted, 7, 190, "0xc").await, fix(7, 130, "0xa", "boot-1"), "after a reboot");
        let unknown = EpochFix::open_on(path.clone(), None).unwrap();
        assert_eq!(sent(&unknown, 7, 190, "0xc").await, fix(7, 130, "0xa", "boot-1"), "no boot id to compare");
        let crashed = EpochFix::open_on(path.clone(), Some("boot-1".into())).unwrap();
        assert_eq!(sent(&crashed, 7, 190, "0xc").await, fix(7, 190, "0xc", "boot-1"), "after a crash");
        assert_eq!(sent(&crashed, 8, 170, "0xd").await, fix(8, 170, "0xd", "boot-1"), "the next epoch");
        let on_disk: Vec<Fix> = serde_json::from_slice(&std::fs::read(fixes_path(&path)).unwrap()).unwrap();
        assert_eq!(on_disk, [fix(7, 190, "0xc", "boot-1"), fix(8, 170, "0xd", "boot-1")], "both epochs in flight");
        // The file the release before this one reads: the newest fix, alone.
        let newest: Fix = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(newest, fix(8, 170, "0xd", "boot-1"), "a one-step rollback reads the newest fix");
        // Rebooted with both in flight: each keeps its own.
        let rebooted = EpochFix::open_on(path.clone(), Some("boot-3".into())).unwrap();
        assert_eq!(sent(&rebooted, 8, 200, "0xe").await, fix(8, 170, "0xd", "boot-1"));
        assert_eq!(sent(&rebooted, 7, 200, "0xe").await, fix(7, 190, "0xc", "boot-1"));
        // A file of one fix, written by the release before (rolled back to,
        // then forward again) after this one's list: read, and it wins for
        // its epoch; the list's other epochs stay.
        std::fs::write(&path, serde_json::to_vec(&fix(8, 140, "0xf", "boot-1")).unwrap()).unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(later).unwrap();
        let old = EpochFix::open_on(path.clone(), Some("boot-4".into())).unwrap();
        assert_eq!(sent(&old, 8, 200, "0xe").await, fix(8, 140, "0xf", "boot-1"));
        assert_eq!(sent(&old, 7, 200, "0xe").await, fix(7, 190, "0xc", "boot-1"));
        std::fs::remove_file(fixes_path(&path)).unwrap();
        std::fs::write(&path, serde_json::to_vec(&fix(9, 140, "0xf", "boot-1")).unwrap()).unwrap();
        let old = EpochFix::open_on(path.clone(), Some("boot-4".into())).unwrap();
        assert_eq!(sent(&old, 9, 200, "0xe").await, fix(9, 140, "0xf", "boot-1"));
        std::fs::write(&path, "{").unwrap();
        let err = EpochFix::open(path).unwrap_err().to_string();
        assert!(err.contains("epoch-deadline.json is not valid"), "{err}");
    }

    /// A deadline fixed as the computes start (head 100 + 30) comes near
    /// while a slow compute runs; nothing is signed under it yet, so the
    /// first message takes a fresh one — never past the release's furthest
    /// (here 200) — and the epoch keeps it.
    #[tokio::test]
    async fn a_deadline_that_came_near_before_anything_was_signed_is_fixed_anew() {
        let d = EpochFix::default();
        let (early, written) = d.of(7, 130, "0xa");
        d.write(&early, &written).await.unwrap();
        assert_eq!(d.for_signing(7, 110, 30, 200, "0xb").0.deadline, 130, "half the buffer is left: kept");
        let d = EpochFix::default();
        d.of(7, 130, "0xa");
        let (fresh, written) = d.for_signing(7, 120, 30, 200, "0xb");
        assert_eq!((fresh.deadline, fresh.header.as_str()), (150, "0xb"));
        assert!(!*written.lock().await, "the fresh fix is written before anything is sent");
        assert_eq!(d.for_signing(7, 140, 30, 200, "0xc").0.deadline, 150, "signed under it: the epoch's");
        let d = EpochFix::default();
        d.of(8, 130, "0xa");
        assert_eq!(d.for_signing(8, 190, 30, 200, "0xb").0.deadline, 200, "never past the release's furthest");
        // Signed first with no fix, late in the window (the devnet's compose
        // drill: a deadline of 826 for an epoch released in 690, refused).
        let d = EpochFix::default();
        assert_eq!(d.for_signing(9, 796, 30, 820, "0xb").0.deadline, 820, "a first fix is capped too");
        // Fixed as the computes started, late: capped before anything is signed.
        let d = EpochFix::default();
        d.of(10, 826, "0xa");
        assert_eq!(d.for_signing(10, 797, 30, 820, "0xb").0.deadline, 820, "an early fix past it is made anew");
    }
}
