//! The collector an operator's node submits to (`lite-node collector`, and
//! the devnet's): the gRPC service of docs/protocol.md §6 judging every
//! submission by the protocol's rules (`lite_node_protocol::submission::
//! judge`, the validator's too) on the anchor chain — and (with a
//! [`SelectionCheck`]) the slot's selection for that epoch and pool —,
//! answering each message once, and relaying what it took to the market's
//! validators (their gRPC gateway, the gossip network). What it keeps is
//! bounded: answers of the last [`KEEP_EPOCHS`] epochs, the releases it
//! read, and (only when asked, as the devnet does) a record of every verdict.
//! The node's own side of submitting is `lite_node_node::submission`.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use alloy::primitives::Address;
use lite_node_protocol::{
    eip712::{Request, domain, recover},
    proto::{self, SnapshotSubmission, SubmissionResponse},
    submission::{EpochStanding, Facts, Judgement, Reason, Rejection, Scope, Selection, judge, window_closes},
};
use sha2::Digest;

use lite_node_chain::Release;

pub mod health;

pub use lite_node_compute::selection::{EpochAssignment, Refusal, Refused, SelectionCheck};

/// Checks a submission's signature against the slot's expected signer.
pub fn signature_is_from(
    submission: &SnapshotSubmission,
    chain_id: u64,
    protocol_state: Address,
    signer: Address,
) -> Result<(), String> {
    let r = submission.request.as_ref().ok_or("the submission has no request")?;
    let found = recover(&domain(chain_id, protocol_state), &Request::from(r), &submission.signature)?;
    if found == signer {
        Ok(())
    } else {
        Err(format!("signature recovers to {found}, slot {} belongs to {signer}", r.slot_id))
    }
}

/// One submission as the collector saw it: what came, the verdict (with the
/// reason for a rejection), and when it was answered.
#[derive(Clone, Debug)]
pub struct Seen {
    pub submission: SnapshotSubmission,
    pub verdict: Result<(), String>,
    /// The rule a rejection broke (`None`: accepted).
    pub reason: Option<Reason>,
    pub answered_at: SystemTime,
    /// Not from one of [`Collector::own`]'s slots and signers (a node
    /// someone else started against this collector).
    pub foreign: bool,
    /// How many times these exact bytes came (a node sends a message again,
    /// unchanged, when an attempt or a restart left it without an answer):
    /// one submission, answered alike each time.
    pub arrivals: u32,
}

/// Shared record of what a collector saw.
pub type Received = Arc<Mutex<Vec<Seen>>>;

/// A collector for the local network: checks every submission — its form
/// (`protocol::submission::check_form`: a CID, a project id, our data market
/// and ProtocolState), an epoch that was released, a deadline within
/// [`DEADLINE_AFTER_RELEASE`] of that release and not passed, the signature
/// recovering to the slot's registered signer, and, with a
/// [`SelectionCheck`], the slot selected for that epoch and pool — and
/// records each verdict with its reason.
pub struct Collector {
    pub anchor: Arc<lite_node_chain::Anchor>,
    pub chain_id: u64,
    /// Every verdict, when the caller keeps them (the devnet and tests
    /// read them; a long-running collector leaves this `None`).
    pub received: Option<Received>,
    pub selection: Option<Arc<SelectionCheck>>,
    /// Print one line per verdict on stdout (the standalone `lite-node collector`).
    pub announce: bool,
    /// Where EpochReleased lookups start on the anchor chain.
    pub from_block: u64,
    /// The market's validators' window, in anchor blocks after a release
    /// (their `--window-blocks`): a submission for an epoch whose window
    /// has closed is refused (`window_closed`), not answered `Success` for
    /// a vote no validator counts.
    pub window_blocks: u64,
    /// What the market asks of the snapshot a submission carries (the
    /// validators' `--require-snapshot`, `--max-snapshot-bytes`): checked
    /// before the rules, and a submission that fails is refused with its
    /// reason, never published.
    pub snapshot: lite_node_protocol::submission::SnapshotRule,
    /// A validator's gateway every submission is relayed to (checked or
    /// not: the validator checks for itself). When it cannot take one, the
    /// node is asked to retry.
    pub forward: Option<proto::submission_client::SubmissionClient<tonic::transport::Channel>>,
    /// The validators' gossip network: every accepted submission is
    /// published there, flooded to every connected validator.
    pub gossip: Option<lite_node_gossip::Gossip>,
    /// The slots whose nodes the caller started, with their signers: other
    /// submissions are still checked and answered, but marked foreign.
    pub own: Option<BTreeMap<u64, Address>>,
    /// The last [`KEEP_EPOCHS`] releases read.
    releases: tokio::sync::Mutex<BTreeMap<u64, Release>>,
    /// The anchor head, read at most every [`HEAD_FRESH`] for every
    /// submission judged meanwhile.
    head: tokio::sync::Mutex<Option<(std::time::Instant, u64)>>,
    /// Each slot's registered signer, read once per [`SIGNERS_FRESH`].
    signers: std::sync::Mutex<(std::time::Instant, SignerCells)>,
    /// Each message's answer, by the SHA-256 of its bytes, given once:
    /// copies that arrive while the first is judged wait for its answer.
    /// By epoch, so the oldest go first once more than [`KEEP_ANSWERS`] are kept.
    answered: std::sync::Mutex<Answered>,
    /// Drills that hold answers back ([`Hold`]).
    pub holds: Vec<Hold>,
    /// Submissions a second per peer (IP address), sustained and in a burst
    /// ([`Collector::with_peer_rate`]); past it, `RESOURCE_EXHAUSTED` (the
    /// node backs off and retries).
    rate: Arc<PeerRates>,
    /// The highest slot id that can hold a signer (the node count, or a
    /// full node past it), read at most every [`SIGNERS_FRESH`]: a slot id
    /// past it is nobody's without a chain read.
    highest_slot: tokio::sync::Mutex<Option<(std::time::Instant, u64)>>,
    /// When each slot whose registered signer disagreed with a submission
    /// was last read again ([`RECHECK_AFTER`]).
    rechecked: std::sync::Mutex<BTreeMap<u64, std::time::Instant>>,
}

/// Submissions a second per peer (IP address): a keyed limiter that every
/// 4,096 calls forgets the peers whose budget is full again, so peers
/// coming from ever new addresses do not grow it for good.
struct PeerRates {
    limiter: governor::DefaultKeyedRateLimiter<std::net::IpAddr>,
    /// Calls to [`PeerRates::admit`] (when to prune).
    calls: std::sync::atomic::AtomicU64,
}

impl PeerRates {
    fn new(rate: u32, burst: u32) -> Self {
        let rate = std::num::NonZeroU32::new(rate.max(1)).expect("at least 1");
        let burst = std::num::NonZeroU32::new(burst.max(1)).expect("at least 1");
        let limiter = governor::RateLimiter::keyed(governor::Quota::per_second(rate).allow_burst(burst));
        Self { limiter, calls: Default::default() }
    }

    /// Whether `peer` may send one more submission now.
    fn admit(&self, peer: std::net::IpAddr) -> bool {
        if self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 4096 == 4095 {
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
        }
        self.limiter.check_key(&peer).is_ok()
    }
}

/// How soon a slot whose cached signer disagreed with a submission is read
/// again: a slot reassigned, removed or registered while its node submits
/// is the new signer's here within this, not within [`SIGNERS_FRESH`].
const RECHECK_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// Submissions a second one peer may send a collector, sustained…
pub const PEER_RATE: u32 = 2_000;
/// …and in a burst (a full node of a 10,000-project market at a release).
pub const PEER_BURST: u32 = 20_000;

/// One message's answer: the rejection's reason (`None`: accepted) and its
/// place in [`Collector::received`] (when kept).
type AnswerOnce = Arc<tokio::sync::OnceCell<(Option<String>, Option<usize>)>>;

/// Answers by epoch id and the SHA-256 of the message, and how many.
#[derive(Default)]
struct Answered {
    by_epoch: BTreeMap<u64, std::collections::HashMap<[u8; 32], AnswerOnce>>,
    count: usize,
}

impl Answered {
    /// The cell of `key` in `epoch`'s answers; past [`KEEP_ANSWERS`], the
    /// oldest epochs' answers are dropped (never `epoch`'s own).
    fn cell(&mut self, epoch: u64, key: [u8; 32]) -> AnswerOnce {
        let cells = self.by_epoch.entry(epoch).or_default();
        let before = cells.len();
        let cell = cells.entry(key).or_default().clone();
        self.count += cells.len() - before;
        while self.count > KEEP_ANSWERS || self.by_epoch.len() > KEEP_EPOCHS {
            let Some((&oldest, _)) = self.by_epoch.first_key_value() else { break };
            if oldest == epoch {
                // `epoch` alone is past the cap (a flood naming one epoch, a
                // made-up one most often): its other answers go, not the cap.
                let cells = self.by_epoch.entry(epoch).or_default();
                cells.retain(|k, _| *k == key);
                self.count = self.by_epoch.values().map(std::collections::HashMap::len).sum();
                break;
            }
            self.count -= self.by_epoch.remove(&oldest).map_or(0, |c| c.len());
        }
        cell
    }
}

/// Epochs whose answers (and releases) are kept: a node re-sends a message
/// within its epoch's window, far fewer epochs than this.
pub const KEEP_EPOCHS: usize = 256;

/// Answers kept at most (each a few hundred bytes).
pub const KEEP_ANSWERS: usize = 200_000;

/// A drill's hold on answers (`kill-node-mid-burst`): `slots`' submissions
/// of `epoch` are judged and recorded, but answered only once `release`
/// turns true (the devnet kills their node meanwhile), or after
/// [`HOLD_LIMIT`].
#[derive(Clone, Debug)]
pub struct Hold {
    pub slots: std::collections::BTreeSet<u64>,
    pub epoch: u64,
    pub release: tokio::sync::watch::Receiver<bool>,
}

/// The longest a [`Hold`] keeps an answer back.
const HOLD_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Each slot's signer, read by the first submission that names it.
type SignerCells = BTreeMap<u64, Arc<tokio::sync::OnceCell<Address>>>;

/// How stale the head a deadline is judged against may be (a deadline is a
/// block number: 250 ms is less than a block).
const HEAD_FRESH: std::time::Duration = std::time::Duration::from_millis(250);

/// Slots whose signers are kept at most between two resets.
const MAX_SIGNERS_KEPT: usize = 100_000;

/// How long the slots' signers are trusted (the devnet registers its slots
/// before any node starts).
const SIGNERS_FRESH: std::time::Duration = std::time::Duration::from_secs(30);

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector").field("chain_id", &self.chain_id).finish_non_exhaustive()
    }
}

impl Collector {
    /// A collector for `anchor`'s ProtocolState and data market on chain
    /// `chain_id`, without a selection check, silent.
    pub fn new(anchor: Arc<lite_node_chain::Anchor>, chain_id: u64) -> Self {
        Self {
            anchor,
            chain_id,
            received: None,
            selection: None,
            announce: false,
            from_block: 0,
            window_blocks: lite_node_protocol::submission::WINDOW_BLOCKS,
            snapshot: Default::default(),
            forward: None,
            gossip: None,
            own: None,
            releases: Default::default(),
            head: Default::default(),
            signers: std::sync::Mutex::new((std::time::Instant::now(), BTreeMap::new())),
            answered: Default::default(),
            holds: Vec::new(),
            rate: Arc::new(PeerRates::new(PEER_RATE, PEER_BURST)),
            highest_slot: Default::default(),
            rechecked: Default::default(),
        }
    }

    /// Whether `slot_id`'s signer may be read again now (not within
    /// [`RECHECK_AFTER`] of its last recheck): if so, what was cached of
    /// it, and of the highest slot, is dropped.
    async fn recheck(&self, slot_id: u64) -> bool {
        // Only a slot the registry can hold now (one past the highest known
        // may have just been registered): a made-up id costs no read.
        let highest = *self.highest_slot.lock().await;
        if highest.is_some_and(|(_, n)| slot_id > n + 1) {
            return false;
        }
        {
            let now = std::time::Instant::now();
            let mut rechecked = self.rechecked.lock().unwrap_or_else(|p| p.into_inner());
            if rechecked.get(&slot_id).is_some_and(|at| now.duration_since(*at) < RECHECK_AFTER) {
                return false;
            }
            if rechecked.len() >= MAX_SIGNERS_KEPT {
                rechecked.retain(|_, at| now.duration_since(*at) < RECHECK_AFTER);
            }
            rechecked.insert(slot_id, now);
            self.signers.lock().unwrap_or_else(|p| p.into_inner()).1.remove(&slot_id);
        }
        // The highest slot is read again at most once per RECHECK_AFTER.
        let mut highest = self.highest_slot.lock().await;
        if highest.is_some_and(|(at, _)| at.elapsed() >= RECHECK_AFTER) {
            *highest = None;
        }
        true
    }

    /// The same collector with another per-peer rate and burst.
    pub fn with_peer_rate(mut self, rate: u32, burst: u32) -> Self {
        self.rate = Arc::new(PeerRates::new(rate, burst));
        self
    }

    /// Whether `peer` may send one more submission now ([`PeerRates`]).
    fn admit_peer(&self, peer: Option<std::net::SocketAddr>) -> Result<(), tonic::Status> {
        let Some(peer) = peer else { return Ok(()) };
        if self.rate.admit(peer.ip()) {
            return Ok(());
        }
        Err(tonic::Status::resource_exhausted(format!(
            "more submissions a second from {} than this collector takes from one peer; slow down and retry",
            peer.ip()
        )))
    }

    /// [`Collector::highest_slot`], read again when stale.
    async fn highest_slot(&self) -> Result<u64, String> {
        let mut known = self.highest_slot.lock().await;
        if let Some((at, n)) = *known
            && at.elapsed() < SIGNERS_FRESH
        {
            return Ok(n);
        }
        let head = self.anchor.head().await.map_err(|e| format!("anchor unavailable: {e}"))?;
        let total = self.anchor.total_slots_at(head).await.map_err(|e| format!("anchor unavailable: {e}"))?;
        let full = self.anchor.full_nodes_at(head).await.map_err(|e| format!("anchor unavailable: {e}"))?;
        let n = full.last().copied().unwrap_or(0).max(total);
        *known = Some((std::time::Instant::now(), n));
        Ok(n)
    }

    /// How `epoch_id` was released (kept once found); an epoch never released
    /// for this data market is refused.
    async fn release(&self, epoch_id: u64) -> Result<Release, Refused> {
        if let Some(known) = self.releases.lock().await.get(&epoch_id) {
            return Ok(*known);
        }
        let release = self
            .anchor
            .epoch_release(epoch_id, self.from_block)
            .await
            .map_err(|e| Refused::Unavailable(format!("anchor unavailable: {e}")))?
            .ok_or_else(|| Refused::Rejected(format!("epoch {epoch_id} was never released for this data market")))?;
        let mut releases = self.releases.lock().await;
        releases.insert(epoch_id, release);
        while releases.len() > KEEP_EPOCHS {
            releases.pop_first();
        }
        Ok(release)
    }

    /// The submission judged by the protocol's rules; `Err` when the anchor
    /// (or the source chain) cannot be read now.
    async fn verdict(&self, s: &SnapshotSubmission) -> Result<Result<(), Rejection>, String> {
        let scope = Scope { data_market: self.anchor.data_market, protocol_state: self.anchor.protocol_state };
        let domain = domain(self.chain_id, self.anchor.protocol_state);
        let mut judged = judge(s, &scope, &domain, self).await?;
        // A registry that disagrees may be this collector's stale view of
        // it (a slot changed while its node submits): read again, once.
        if let Judgement::Rejected(r) = &judged
            && matches!(r.reason, Reason::WrongSigner | Reason::UnregisteredSlot)
            && let Some(request) = s.request.as_ref()
            && self.recheck(request.slot_id).await
        {
            judged = judge(s, &scope, &domain, self).await?;
        }
        match judged {
            Judgement::Accepted => Ok(Ok(())),
            Judgement::Rejected(rejection) => Ok(Err(rejection)),
            // The anchor is asked directly: an epoch is known or it is not.
            Judgement::Deferred => Err("the epoch is not known yet".into()),
        }
    }

    /// Announces a verdict and records it when verdicts are kept; its place
    /// in [`Self::received`].
    async fn record(&self, submission: SnapshotSubmission, verdict: Result<(), Rejection>) -> Option<usize> {
        let reason = verdict.as_ref().err().map(|r| r.reason);
        let verdict = verdict.map_err(|r| r.detail);
        if self.announce {
            use std::io::Write;
            let r = submission.request.clone().unwrap_or_default();
            let what = format!("epoch {} slot {} {} {}", r.epoch_id, r.slot_id, r.project_id, r.snapshot_cid);
            let line = match &verdict {
                Ok(()) => format!("accepted {what}"),
                Err(reason) => format!("rejected {what}: {reason}"),
            };
            // A line that cannot be written (stdout on a full disk) is lost, not the answer.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", line.replace(char::is_control, "\u{fffd}")).and_then(|()| out.flush());
        }
        let received = self.received.as_ref()?;
        let foreign = self.foreign(&submission, reason.is_none()).await;
        let seen = Seen { submission, verdict, reason, answered_at: SystemTime::now(), foreign, arrivals: 1 };
        let mut received = received.lock().unwrap_or_else(|p| p.into_inner());
        received.push(seen);
        Some(received.len() - 1)
    }

    /// A submission judged (forwarded to the validator, published on
    /// gossip) and recorded: its rejection's reason and place; `Err` when it
    /// cannot be judged now (the node retries).
    async fn answer_once(&self, s: SnapshotSubmission) -> Result<(Option<String>, Option<usize>), tonic::Status> {
        let verdict = match self.verdict(&s).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(rejection)) => {
                tracing::info!("rejected a submission ({}): {}", rejection.reason, rejection.detail);
                Err(rejection)
            }
            Err(reason) => {
                tracing::warn!("cannot check a submission now ({reason}); asking the node to retry");
                return Err(tonic::Status::unavailable(reason));
            }
        };
        // Nothing accepted is answered `Success` unless a validator can hear
        // it: with no validator connected over gossip (starting, or all
        // unreachable), the node is asked to retry rather than told it landed.
        if verdict.is_ok()
            && let Some(gossip) = &self.gossip
            && gossip.peers().await.subscribed == 0
        {
            tracing::warn!("gossip: no validator connected; asking the node to retry");
            return Err(tonic::Status::unavailable(
                "no validator is reachable over gossip yet: the collector cannot relay this submission",
            ));
        }
        if let Some(client) = &self.forward
            && let Err(e) = client.clone().submit_snapshot(s.clone()).await
        {
            tracing::warn!("the validator's gateway did not take a submission ({e}); asking the node to retry");
            return Err(tonic::Status::unavailable(format!("the validator's gateway is unavailable: {e}")));
        }
        // Published in its one gossip form (accepted: its signature is one).
        // Not taken by gossipsub (a full outbox or peer queues, the last
        // validator gone since the check above): `Success` would lose the
        // vote, so the node is asked to send it again.
        if verdict.is_ok()
            && let Some(gossip) = &self.gossip
            && let Ok(form) = lite_node_protocol::submission::gossip_form(&s)
        {
            let published =
                tokio::time::timeout(PUBLISH_WITHIN, gossip.publish_confirmed(prost::Message::encode_to_vec(&form)))
                    .await
                    .unwrap_or_else(|_| Err(format!("not taken within {} s", PUBLISH_WITHIN.as_secs())));
            if let Err(why) = published {
                tracing::warn!("gossip: a submission was not published ({why}); asking the node to retry");
                return Err(tonic::Status::unavailable(format!(
                    "the collector could not relay the submission over gossip ({why}): send it again"
                )));
            }
        }
        let rejection = verdict.as_ref().err().map(|r| r.detail.clone());
        Ok((rejection, self.record(s, verdict).await))
    }

    /// Waits while a drill holds `r`'s answer back.
    async fn held(&self, r: &proto::Request) {
        for hold in self.holds.iter().filter(|h| h.epoch == r.epoch_id && h.slots.contains(&r.slot_id)) {
            let mut release = hold.release.clone();
            let _ = tokio::time::timeout(HOLD_LIMIT, release.wait_for(|released| *released)).await;
        }
    }
}

impl Collector {
    /// Whether a submission is not from one of [`Collector::own`]'s
    /// slots and signers. An accepted one's signature recovered to the
    /// slot's registered signer (the rules checked it), so that signer is
    /// compared, not recovered a second time — recovery is most of what a
    /// submission costs the collector; a rejected one is recovered again.
    async fn foreign(&self, submission: &SnapshotSubmission, accepted: bool) -> bool {
        let Some(own) = &self.own else { return false };
        let Some(r) = submission.request.as_ref() else { return true };
        let Some(&signer) = own.get(&r.slot_id) else { return true };
        if accepted && let Ok(registered) = self.signer(r.slot_id, None).await {
            return registered != signer;
        }
        signature_is_from(submission, self.chain_id, self.anchor.protocol_state, signer).is_err()
    }
}

/// The rules' facts as the devnet collector reads them: straight from the
/// anchor chain (releases kept once found), and the package's assignment
/// rule when a selection check is configured.
impl Facts for Collector {
    async fn epoch(&self, r: &lite_node_protocol::proto::Request) -> Result<EpochStanding, String> {
        match self.release(r.epoch_id).await {
            // Closed as the validators close it: by the anchor head.
            Ok(release) => Ok(if self.head().await? >= window_closes(release.block_number, self.window_blocks) {
                EpochStanding::Closed
            } else {
                EpochStanding::Open { release_block: release.block_number }
            }),
            Err(Refused::Rejected(_)) => Ok(EpochStanding::Unknown),
            Err(Refused::Unavailable(why)) => Err(why),
        }
    }

    async fn head(&self) -> Result<u64, String> {
        let mut head = self.head.lock().await;
        if let Some((at, number)) = *head
            && at.elapsed() < HEAD_FRESH
        {
            return Ok(number);
        }
        let number = self.anchor.head().await.map_err(|e| format!("anchor unavailable: {e}"))?;
        *head = Some((std::time::Instant::now(), number));
        Ok(number)
    }

    fn signers_at_release(&self) -> bool {
        false
    }

    fn snapshot_rule(&self) -> lite_node_protocol::submission::SnapshotRule {
        self.snapshot
    }

    /// As of now, whatever the epoch: the collector answers its nodes by
    /// its own view; the validators judge by the registry at the release.
    async fn signer(&self, slot_id: u64, _: Option<u64>) -> Result<Address, String> {
        // Any slot id can be named by anyone: one past the registry is
        // nobody's, without a read of its own.
        if slot_id > self.highest_slot().await? {
            return Ok(Address::ZERO);
        }
        let cell = {
            let mut signers = self.signers.lock().unwrap_or_else(|p| p.into_inner());
            // Any slot id can be named by anyone: the cells are bounded too.
            if signers.0.elapsed() > SIGNERS_FRESH || signers.1.len() >= MAX_SIGNERS_KEPT {
                *signers = (std::time::Instant::now(), BTreeMap::new());
            }
            signers.1.entry(slot_id).or_default().clone()
        };
        let read = || async { self.anchor.slot_owner(slot_id).await.map_err(|e| format!("anchor unavailable: {e}")) };
        cell.get_or_try_init(read).await.copied()
    }

    async fn selection(&self, r: &lite_node_protocol::proto::Request) -> Result<Selection, String> {
        let Some(selection) = &self.selection else { return Ok(Selection::Selected) };
        let release = self.release(r.epoch_id).await.map_err(|e| e.to_string())?;
        let epoch = match selection.epoch(&self.anchor, r.epoch_id, release).await {
            Ok(epoch) => epoch,
            Err(Refused::Unavailable(why)) => return Err(why),
            // The epoch's assignment cannot be made (e.g. no active pool).
            Err(Refused::Rejected(why)) => return Ok(Selection::NotSelected(why)),
        };
        Ok(match selection.check(&epoch, r.slot_id, &r.project_id) {
            Ok(()) => Selection::Selected,
            Err(Refusal::NotSelected(why)) => Selection::NotSelected(why),
            Err(Refusal::WrongPool(why)) => Selection::WrongPool(why),
            Err(Refusal::UnknownProject(why)) => Selection::UnknownProject(why),
        })
    }
}

impl Collector {
    /// A submission's answer — the rejection's reason (`None`: accepted) —
    /// given once per message: the same bytes again (an attempt or a restart
    /// left the node without our answer) are the same submission, answered
    /// as the first was and counted as an arrival of it; a copy that comes
    /// while the first is judged waits for its answer.
    async fn answer(&self, s: SnapshotSubmission) -> Result<Option<String>, tonic::Status> {
        let key: [u8; 32] = sha2::Sha256::digest(prost::Message::encode_to_vec(&s)).into();
        let epoch = s.request.as_ref().map_or(0, |r| r.epoch_id);
        let cell = self.answered.lock().unwrap_or_else(|p| p.into_inner()).cell(epoch, key);
        let mut judged_here = false;
        let (rejection, index) = cell
            .get_or_try_init(|| {
                judged_here = true;
                self.answer_once(s)
            })
            .await?
            .clone();
        if !judged_here
            && let (Some(received), Some(index)) = (&self.received, index)
            && let Some(first) = received.lock().unwrap_or_else(|p| p.into_inner()).get_mut(index)
        {
            first.arrivals += 1;
        }
        Ok(rejection)
    }
}

/// The collector as tonic serves it: each submission is judged in a task of
/// its own, so a node that hangs up mid-judgement (an attempt timed out, a
/// SIGKILL) cannot cut it off after the forward and before the record —
/// leaving the next copy to forward and publish it again.
#[derive(Clone)]
struct Service(Arc<Collector>);

#[tonic::async_trait]
impl proto::submission_server::Submission for Service {
    async fn submit_snapshot(
        &self,
        request: tonic::Request<SnapshotSubmission>,
    ) -> Result<tonic::Response<SubmissionResponse>, tonic::Status> {
        self.0.admit_peer(request.remote_addr())?;
        let s = request.into_inner();
        let request = s.request.clone().unwrap_or_default();
        let collector = self.0.clone();
        let rejection = tokio::spawn(async move { collector.answer(s).await })
            .await
            .map_err(|e| tonic::Status::internal(format!("judging the submission failed: {e}")))??;
        self.0.held(&request).await;
        Ok(answer(rejection.as_deref()))
    }

    async fn submit_snapshot_simulation(
        &self,
        request: tonic::Request<tonic::Streaming<SnapshotSubmission>>,
    ) -> Result<tonic::Response<SubmissionResponse>, tonic::Status> {
        let peer = request.remote_addr();
        let mut stream = request.into_inner();
        let mut all_ok = true;
        while let Some(s) = stream.message().await? {
            self.0.admit_peer(peer)?;
            let verdict = self.0.verdict(&s).await.map_err(tonic::Status::unavailable)?;
            all_ok &= verdict.is_ok();
            self.0.record(s, verdict).await;
        }
        Ok(tonic::Response::new(SubmissionResponse {
            message: if all_ok { proto::SUCCESS } else { proto::FAILURE }.into(),
        }))
    }
}

/// `Success`, or `Failure` with the rejection's reason.
fn answer(rejection: Option<&str>) -> tonic::Response<SubmissionResponse> {
    let message = if rejection.is_none() { proto::SUCCESS } else { proto::FAILURE };
    let mut response = tonic::Response::new(SubmissionResponse { message: message.into() });
    if let Some(reason) = rejection {
        response.metadata_mut().insert(proto::REASON_METADATA, proto::reason_metadata(reason));
    }
    response
}

/// The largest submission taken: every field at its cap (a real one is a
/// few hundred bytes), as the validators' gateway takes it.
pub const MAX_MESSAGE_BYTES: usize = lite_node_protocol::submission::caps::MESSAGE;

/// How long an accepted submission may wait for the gossip peer to take it.
const PUBLISH_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Requests judged at once per connection; more wait.
const MAX_IN_FLIGHT: usize = 256;

/// Serves `collector` on `listener` until `shutdown` completes; a message
/// over [`MAX_MESSAGE_BYTES`] is refused before it is decoded.
pub fn serve(
    collector: Collector,
    listener: tokio::net::TcpListener,
    shutdown: lite_node_core::signals::Shutdown,
) -> lite_node_core::BoxFuture<'static, Result<(), tonic::transport::Error>> {
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    Box::pin(
        tonic::transport::Server::builder()
            .concurrency_limit_per_connection(MAX_IN_FLIGHT)
            .add_service(
                proto::submission_server::SubmissionServer::new(Service(Arc::new(collector)))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            )
            .serve_with_incoming_shutdown(incoming, shutdown),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Peers from ever new addresses (a botnet, or one peer rotating its
    /// IPv6 addresses) do not grow the rate table for good; a peer past its
    /// burst is still refused.
    #[test]
    fn the_rate_table_forgets_peers_whose_budget_is_full_again() {
        // A budget that refills in a microsecond: every peer but the last
        // few is full again by the time the table is pruned.
        let rates = PeerRates::new(1_000_000, 1);
        for i in 0..100_000u32 {
            let ip = std::net::IpAddr::V6(std::net::Ipv6Addr::from(u128::from(i) + 1));
            assert!(rates.admit(ip), "peer {i}'s first submission");
        }
        let kept = rates.limiter.len();
        assert!(kept < 4_096, "{kept} peers kept of 100,000 seen");
        let slow = PeerRates::new(1, 2);
        let ip: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        assert!(slow.admit(ip) && slow.admit(ip), "the burst");
        assert!(!slow.admit(ip), "past the burst");
    }

    #[test]
    fn answers_are_kept_once_per_message_and_only_for_the_newest_epochs() {
        // A flood naming one epoch keeps it under the cap too.
        let mut flooded = Answered::default();
        for i in 0..KEEP_ANSWERS as u64 + 10 {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&i.to_be_bytes());
            flooded.cell(u64::MAX, key);
        }
        assert!(flooded.count <= KEEP_ANSWERS, "{}", flooded.count);
        let mut answered = Answered::default();
        let first = answered.cell(1, [7; 32]);
        assert!(Arc::ptr_eq(&first, &answered.cell(1, [7; 32])), "the same message, the same answer");
        assert!(!Arc::ptr_eq(&first, &answered.cell(1, [8; 32])), "another message, its own");
        for epoch in 2..=(KEEP_EPOCHS as u64 + 10) {
            answered.cell(epoch, [7; 32]);
        }
        assert_eq!(answered.by_epoch.len(), KEEP_EPOCHS);
        assert_eq!(answered.count, KEEP_EPOCHS);
        assert_eq!(answered.by_epoch.first_key_value().map(|(e, _)| *e), Some(11), "the oldest went first");
        // A late message of an old epoch is answered once too; the next
        // message drops that epoch again.
        let late = answered.cell(3, [9; 32]);
        assert!(Arc::ptr_eq(&late, &answered.cell(3, [9; 32])));
        assert_eq!(answered.by_epoch.len(), KEEP_EPOCHS + 1);
        answered.cell(KEEP_EPOCHS as u64 + 11, [7; 32]);
        assert_eq!(answered.by_epoch.len(), KEEP_EPOCHS);
        assert!(!answered.by_epoch.contains_key(&3));
    }
}
