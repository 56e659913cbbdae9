//! The gateway: the collector's gRPC service (docs/protocol.md §6) in front
//! of the validator, and its admission. Nothing is stored before it is
//! checked:
//!
//! 1. a gRPC message larger than any honest submission
//!    ([`caps::MESSAGE`]) is refused before it is decoded
//!    (`INVALID_ARGUMENT`);
//! 2. each peer (by IP address) gets a rate and a number of calls in flight
//!    ([`Admission`]); past either, `RESOURCE_EXHAUSTED`;
//! 3. the form, every field's length and the signature are checked
//!    (`lite_node_protocol::submission::admit`), and with the data market's
//!    [`Projects`] the project id: a submission that fails is answered
//!    `Failure` with its reason and counted (`rejected:{reason}`), never
//!    stored;
//! 4. past [`Admission::max_queue`] waiting submissions, `RESOURCE_EXHAUSTED`
//!    (the node retries later);
//! 5. otherwise, in one script, the submission is queued for the dequeuers
//!    (`submissionQueue`) with the anchor head at receipt (what its window
//!    and deadline are judged by), counted as pending for its epoch, noted on
//!    the submissions timeline with its metadata (24 h), and answered
//!    `Success`. Without an anchor head (no event monitor) nothing can be
//!    judged: `UNAVAILABLE`, as for Redis unreachable — the node retries,
//!    nothing is half-written.
//!
//! The gossip intake ([`Gateway::judge_gossip`]) runs the same checks
//! before gossipsub relays anything: it relays only a submission in its one
//! gossip form (`submission::gossip_form`) whose signature and project check
//! out and — through a [`crate::signers::SignerBook`] — whose slot's
//! registered signer signed it (a slot not read yet is held until it is); a
//! submission whose deadline the anchor head has passed is ignored. What
//! cannot be queued now (Redis away, no anchor head, the queue full) is held
//! and tried again ([`Gateway::take_gossip_from`]), and counts as a break in
//! the intake (`intake:since`).
//!
//! "Stored" means in Redis: how durable that is depends on Redis's own
//! persistence (docs/protocol.md §11).

use std::{
    collections::HashMap,
    net::IpAddr,
    num::NonZeroU32,
    sync::{Arc, LazyLock, Mutex},
};

use alloy::sol_types::Eip712Domain;
use lite_node_protocol::{
    eip712,
    proto::{self, SnapshotSubmission, SubmissionResponse},
    submission::{Projects, Reason, Rejection, admit, caps},
};
use redis::{Script, aio::ConnectionManager};
use serde_json::json;

use crate::{
    Market,
    keys::{SUBMISSION_METADATA_TTL, TIMELINE_RETENTION},
    signers::Registered,
};

/// How much the gateway takes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Submissions waiting for a dequeuer past which new ones are refused.
    pub max_queue: u64,
    /// Submissions a second one peer (IP address) may send, sustained…
    pub peer_rate: NonZeroU32,
    /// …and in a burst.
    pub peer_burst: NonZeroU32,
    /// Calls one peer may have in flight at once.
    pub peer_in_flight: usize,
    /// Gossip submissions one slot may have taken for one epoch; past it,
    /// unwanted (a full node of a 10,000-project market sends 10,000).
    pub per_slot_epoch: u32,
    /// Also write `metrics:submissions:metadata:{entityId}` (JSON: epoch,
    /// slot, project, CID, peer, time) for each submission queued (24 h;
    /// ~550 B each, more than everything else kept for a day). Off by
    /// default: nothing in the validator reads it (the monitor API reads
    /// votes and rejections), and a reader without it can take epoch, slot,
    /// project, time and peer from the entity id on the submissions
    /// timeline.
    pub metadata: bool,
    /// What the market asks of the snapshot a submission carries: checked
    /// (present if required, within the size, its CID, canonical JSON)
    /// before anything of it is stored or relayed.
    pub snapshot: lite_node_protocol::submission::SnapshotRule,
}

impl Default for Admission {
    /// Room for a node running many slots (a burst at each release) and for
    /// a collector relaying many nodes.
    fn default() -> Self {
        Self {
            max_queue: 200_000,
            peer_rate: NonZeroU32::new(500).expect("non-zero"),
            peer_burst: NonZeroU32::new(2_000).expect("non-zero"),
            peer_in_flight: 64,
            per_slot_epoch: 20_000,
            metadata: false,
            snapshot: Default::default(),
        }
    }
}

type PeerLimiter = governor::DefaultKeyedRateLimiter<IpAddr>;

/// The gateway's gRPC service.
#[derive(Clone)]
pub struct Gateway {
    conn: ConnectionManager,
    market: Arc<Market>,
    domain: Arc<Eip712Domain>,
    projects: Option<Arc<Projects>>,
    admission: Admission,
    rate: Arc<PeerLimiter>,
    in_flight: Arc<Mutex<HashMap<IpAddr, usize>>>,
    /// The slot registry, when the gossip intake checks signers before it
    /// relays ([`Gateway::with_signers`]).
    signers: Option<Arc<dyn Registered>>,
    /// Gossip submissions that could not be queued at once (held and tried
    /// again): each is a break in the intake (`intake:since`).
    held_back: Arc<std::sync::atomic::AtomicU64>,
    /// The anchor head as the gossip intake last read it (0: not yet): a
    /// gossip submission whose deadline it has passed is stale (a replay,
    /// most often) and ignored before it is relayed.
    head: Arc<std::sync::atomic::AtomicU64>,
    /// This validator's gossip peer, once started ([`Gateway::relay_through`]):
    /// what gRPC brings is published there too, so every validator judges
    /// the same submissions whichever gateway a node reached.
    relay: Arc<std::sync::OnceLock<lite_node_gossip::Gossip>>,
    /// The last epoch the intake saw released (0: none yet).
    latest_epoch: Arc<std::sync::atomic::AtomicU64>,
    /// Gossip submissions taken per (epoch, slot).
    per_slot_epoch: Arc<Mutex<std::collections::BTreeMap<(u64, u64), u32>>>,
    /// The epochs whose window is open, with their release blocks, as the
    /// intake last read them (`epochs:closing`): what a gossip submission's
    /// signer is judged as of, and the lower bound of the epochs taken.
    open: Arc<Mutex<std::collections::BTreeMap<u64, u64>>>,
    /// The message ids of the gossip submissions accepted, by epoch, while
    /// the epoch is open or not released yet: a replay of one — after
    /// gossipsub's 60 s duplicate cache too — is ignored (not relayed, not
    /// queued, not counted against its slot's cap again); once the epoch's
    /// window has closed, a replay is unwanted by its epoch alone.
    accepted_ids: Arc<Mutex<HashMap<u64, std::collections::HashSet<[u8; 32]>>>>,
    /// Per epoch not seen released, the submissions parked here whose
    /// signer is not their slot's now ([`PARKED_PER_EPOCH`]).
    parked: Arc<Mutex<std::collections::BTreeMap<u64, u32>>>,
    /// Unwanted gossip submissions by why ([`UNWANTED_WHY`]).
    unwanted_counts: Arc<[std::sync::atomic::AtomicU64; UNWANTED_WHY.len()]>,
    /// Signers the gossip check recovered, by message id, until queued.
    recovered: Arc<Mutex<HashMap<[u8; 32], alloy::primitives::Address>>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("keys", &self.market.keys).field("admission", &self.admission).finish()
    }
}

/// A submission as it travels through Redis: its fields as JSON (`request`,
/// `signature`, `header`, `dataMarket`, `nodeVersion`, `protocolState`),
/// with when and from where it arrived (`receivedAt`, `peerId`), the signer
/// the gateway recovered, and the anchor head then (`receivedHead`, which
/// the queueing script writes).
pub fn encode(
    s: &SnapshotSubmission,
    received_at: u64,
    peer: &str,
    received_head: u64,
    signer: Option<alloy::primitives::Address>,
) -> String {
    format!("{{\"receivedHead\":{received_head},{}", encode_rest(s, received_at, peer, signer))
}

/// Everything of [`encode`] after `{"receivedHead":N,`. `signer`: who the
/// gateway recovered from the signature, carried so the dequeuer does not
/// recover it again.
fn encode_rest(
    s: &SnapshotSubmission,
    received_at: u64,
    peer: &str,
    signer: Option<alloy::primitives::Address>,
) -> String {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct RequestOut<'a> {
        slot_id: u64,
        deadline: u64,
        snapshot_cid: &'a str,
        epoch_id: u64,
        project_id: &'a str,
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Rest<'a> {
        request: RequestOut<'a>,
        signature: &'a str,
        header: &'a str,
        data_market: &'a str,
        node_version: Option<&'a str>,
        protocol_state: &'a str,
        received_at: u64,
        peer_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        signer: Option<String>,
    }
    let default = proto::Request::default();
    let r = s.request.as_ref().unwrap_or(&default);
    let rest = Rest {
        request: RequestOut {
            slot_id: r.slot_id,
            deadline: r.deadline,
            snapshot_cid: &r.snapshot_cid,
            epoch_id: r.epoch_id,
            project_id: &r.project_id,
        },
        signature: &s.signature,
        header: &s.header,
        data_market: &s.data_market,
        node_version: s.node_version.as_deref(),
        protocol_state: &s.protocol_state,
        received_at,
        peer_id: peer,
        // Lower-case hex: read back as an address all the same, without
        // the checksum's Keccak on every submission.
        signer: signer.map(|a| format!("{a:#x}")),
    };
    let mut text = serde_json::to_string(&rest).expect("plain strings and numbers serialize");
    text.remove(0);
    text
}

/// A submission read back from Redis.
#[derive(Clone, Debug, PartialEq)]
pub struct Received {
    pub submission: SnapshotSubmission,
    /// When it arrived (ms since the epoch).
    pub at: u64,
    /// The anchor head when it arrived (`None`: queued by an older gateway,
    /// or by hand).
    pub head: Option<u64>,
    /// Who signed it, as the gateway recovered it (`None`: recovered by
    /// whoever judges it).
    pub signer: Option<alloy::primitives::Address>,
}

/// A submission read back from Redis; `Err` names what is wrong with a
/// payload that is not one.
pub fn decode(payload: &str) -> Result<Received, String> {
    let v: serde_json::Value = serde_json::from_str(payload).map_err(|e| format!("not JSON: {e}"))?;
    let r = v.get("request").filter(|r| r.is_object()).ok_or("no request object")?;
    let text = |o: &serde_json::Value, k: &str| -> Result<String, String> {
        o.get(k).and_then(|x| x.as_str()).map(str::to_owned).ok_or_else(|| format!("`{k}` is not text"))
    };
    let number = |o: &serde_json::Value, k: &str| -> Result<u64, String> {
        o.get(k).and_then(serde_json::Value::as_u64).ok_or_else(|| format!("`{k}` is not a whole number"))
    };
    let submission = SnapshotSubmission {
        request: Some(proto::Request {
            slot_id: number(r, "slotId")?,
            deadline: number(r, "deadline")?,
            snapshot_cid: text(r, "snapshotCid")?,
            epoch_id: number(r, "epochId")?,
            project_id: text(r, "projectId")?,
        }),
        signature: text(&v, "signature")?,
        header: v.get("header").and_then(|x| x.as_str()).unwrap_or_default().to_owned(),
        data_market: text(&v, "dataMarket")?,
        node_version: v.get("nodeVersion").and_then(|x| x.as_str()).map(str::to_owned),
        protocol_state: text(&v, "protocolState")?,
        snapshot: None,
    };
    Ok(Received {
        submission,
        at: v.get("receivedAt").and_then(serde_json::Value::as_u64).unwrap_or(0),
        head: v.get("receivedHead").and_then(serde_json::Value::as_u64),
        signer: v.get("signer").and_then(|a| a.as_str()).and_then(|a| a.parse().ok()),
    })
}

/// Queues admitted submissions, each as the one-item script did (see the
/// module docs, step 5), in one call: a burst's batch is one script run and
/// one round trip, not one each (a quarter of the mesh's CPU was Redis and
/// the client's per-command work). Answers, in order: `queued`, `full` or
/// `no_head`.
const QUEUE: &str = r#"
-- KEYS: queue, timeline, counters, anchor head, pending, then each item's
--       metadata key and snapshot key
-- ARGV: max queue, now (s), metadata ttl, timeline cutoff, snapshot ttl, then
--       per item: payload after the head, entity, metadata ('' for none),
--       epoch, snapshot bytes ('' for none)
local max = tonumber(ARGV[1])
local head = redis.call('GET', KEYS[4])
local len = redis.call('LLEN', KEYS[1])
local out = {}
for i = 1, (#ARGV - 5) / 5 do
  local a = 5 + (i - 1) * 5
  local k = 5 + (i - 1) * 2
  if len >= max then
    out[i] = 'full'
  elseif not head then
    out[i] = 'no_head'
  else
    -- Each item its own bytes (the received count goes first): the same
    -- submission queued twice in one millisecond is two items, each counted
    -- pending once and judged once (the second a duplicate), never one id
    -- judged once and pending twice.
    local seq = redis.call('HINCRBY', KEYS[3], 'received', 1)
    len = redis.call('LPUSH', KEYS[1], '{"queued":' .. seq .. ',"receivedHead":' .. head .. ',' .. ARGV[a + 1])
    redis.call('ZADD', KEYS[2], ARGV[2], ARGV[a + 2])
    if ARGV[a + 3] ~= '' then redis.call('SET', KEYS[k + 1], ARGV[a + 3], 'EX', ARGV[3]) end
    redis.call('HINCRBY', KEYS[5], ARGV[a + 4], 1)
    -- Content-addressed: the first copy stays (any other is the same bytes).
    if ARGV[a + 5] ~= '' then redis.call('SET', KEYS[k + 2], ARGV[a + 5], 'EX', ARGV[5], 'NX') end
    out[i] = 'queued'
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])
return out
"#;

static QUEUE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(QUEUE));

/// What became of one submission at the gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// Queued for the dequeuers.
    Queued,
    /// Refused by the checks made before storage; counted, not stored.
    Refused(Rejection),
    /// The queue is past [`Admission::max_queue`].
    Full,
    /// No anchor head in Redis: the event monitor is not following the chain.
    NoHead,
}

/// A gossip submission by `signer` for `slot_id`, whose registered signer
/// (as of its epoch's release, or now) is `registered`: accepted when they
/// are one; otherwise ignored and counted, at no cost to the peer that
/// relayed it. Whether a slot is someone's is a fact of the chain that a
/// relayer may see later or earlier than this validator (a registration,
/// reassignment or removal mined while nodes submit): holding it against
/// the relayer would cut an honest collector off the validators at every
/// routine change. What costs a flooder is its per-peer budget.
fn signer_verdict(
    signer: alloy::primitives::Address,
    registered: alloy::primitives::Address,
) -> (lite_node_gossip::Verdict, Option<Unwanted>) {
    use lite_node_gossip::Verdict;
    if registered == signer {
        (Verdict::Accept, None)
    } else if registered.is_zero() {
        (Verdict::Ignore, Some(Unwanted::UnregisteredSlot))
    } else {
        (Verdict::Ignore, Some(Unwanted::WrongSigner))
    }
}

/// Submissions from gossip queued together at most.
pub const GOSSIP_BATCH: usize = 256;

/// How often the gossip intake reads what it judges by (the anchor head,
/// the open epochs, the registry's record) while a burst comes.
const VIEW_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Gossip messages handed over to the intake and not taken yet, past which
/// gossip ignores what arrives (lost to this validator: a break in its
/// intake). Room for a burst of a 10,000-project epoch; ~8 MB at most.
pub const HANDOVER: usize = 16_384;

/// Epochs past the last one seen released that a gossip submission may
/// name: an honest node submits only for released epochs, and a validator's
/// monitor trails the chain by a poll at most.
pub const FUTURE_EPOCHS: u64 = 4;

/// The share of [`Admission::per_slot_epoch`] a slot may send for an epoch
/// this validator has not seen released yet (a tenth: 2,000 by default,
/// room for a full node that computed before this validator's monitor
/// polled; ×[`FUTURE_EPOCHS`] the most one slot parks in the queue).
pub const UNSEEN_SHARE: u32 = 10;

/// (epoch, slot) pairs counted for [`Admission::per_slot_epoch`] before the
/// oldest epoch's are forgotten.
const PER_SLOT_EPOCH_ENTRIES: usize = 200_000;

/// Gossip checks' recovered signers kept until their messages are queued.
const RECOVERED_KEPT: usize = 65_536;

/// Why gossip submissions are unwanted, as `/metrics` labels them (in
/// [`Unwanted`]'s order).
pub const UNWANTED_WHY: [&str; 7] =
    ["stale", "unreleased_epoch", "over_slot_cap", "unregistered_slot", "wrong_signer", "window_closed", "replay"];

/// Why a gossip submission is unwanted; its label is `UNWANTED_WHY[why as usize]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unwanted {
    /// Its deadline passed.
    Stale,
    /// Its epoch is further past the last released than [`FUTURE_EPOCHS`].
    UnreleasedEpoch,
    /// Its slot sent [`Admission::per_slot_epoch`] for the epoch already.
    OverSlotCap,
    /// Its slot held no signer (at the epoch's release). Ignored, not
    /// held against the relayer.
    UnregisteredSlot,
    /// Another signer held its slot (at the epoch's release). Ignored, not
    /// held against the relayer.
    WrongSigner,
    /// Its epoch was released and its window has closed.
    WindowClosed,
    /// Accepted here before (a replay after gossipsub forgot it). Ignored.
    Replay,
}

impl Unwanted {
    /// What gossip is told: a far epoch or a slot past its cap costs the
    /// sender score (only a flooder sends those); a passed deadline or a
    /// closed window is ignored — an honest collector relays some at every
    /// window's end, seen a poll earlier or later than here — and is paid
    /// for from the sender's budget of useless messages.
    fn verdict(self, why: String) -> lite_node_gossip::Verdict {
        match self {
            Self::UnreleasedEpoch | Self::OverSlotCap => lite_node_gossip::Verdict::Unwanted(why),
            _ => lite_node_gossip::Verdict::Ignore,
        }
    }
}

/// Settling a batch of held gossip messages for longer than this is logged:
/// their epoch's window may close meanwhile.
const SLOW_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a held message waits for its slot's signer to be read before it
/// is queued unrelayed (the dequeuer reads it again, judging the epoch by
/// the head at its arrival): a slow anchor RPC does not hold the intake
/// while the window closes.
const SETTLE_READ_WITHIN: std::time::Duration = std::time::Duration::from_secs(3);

/// Submissions parked for one epoch not seen released whose signer is not
/// their slot's now (a slot changed just before the release, read here a
/// poll later): room for the slots an upkeep changes at once, not for a
/// flood.
pub const PARKED_PER_EPOCH: u32 = 1_000;

/// Message ids kept for [`Gateway::accepted_ids`] at most (~100 MB); past
/// it a replay is queued and judged a duplicate by the dequeuer.
const ACCEPTED_IDS_KEPT: usize = 2_000_000;

/// A call in flight for a peer, released when dropped.
struct InFlight {
    table: Arc<Mutex<HashMap<IpAddr, usize>>>,
    peer: IpAddr,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = table.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                table.remove(&self.peer);
            }
        }
    }
}

impl Gateway {
    /// A gossip message judged before gossipsub relays it: it must decode
    /// as a submission in its gossip form, be well-formed and carry a valid
    /// signature, and (when the market's projects are known) name one of
    /// them; with the slot registry ([`Gateway::with_signers`]), be signed
    /// by its slot's registered signer — known without a read, or the
    /// message is held until [`Gateway::take_gossip_from`] has read it.
    /// Junk is rejected (held against the peer that sent it); a slot that is
    /// not registered is ignored (the registration may be newer than what
    /// this validator has read), and so is a submission whose deadline the
    /// anchor head has passed (stale: a replay of an old one, most often;
    /// the dequeuer would refuse it).
    pub fn judge_gossip(&self, payload: &[u8]) -> lite_node_gossip::Verdict {
        use lite_node_gossip::Verdict;
        match <SnapshotSubmission as prost::Message>::decode(payload) {
            Err(e) => Verdict::Reject(format!("not a submission: {e}")),
            Ok(s) if !lite_node_protocol::submission::is_gossip_form(&s, payload) => Verdict::Reject(
                "not in the gossip form (a header, a respelled signature or address, fields out of order or \
                 unknown ones)"
                    .into(),
            ),
            Ok(s) => {
                let admitted = self.admitted(&s);
                let id = lite_node_protocol::submission::gossip_message_id(payload);
                let (verdict, unwanted) = match &admitted {
                    Err(rejection) => (Verdict::Reject(rejection.to_string()), None),
                    Ok(_) if self.accepted_before(&s, &id) => (Verdict::Ignore, Some(Unwanted::Replay)),
                    Ok((slot_id, signer)) => match self.unwanted(&s) {
                        Some((kind, why)) => (kind.verdict(why), Some(kind)),
                        None => match &self.signers {
                            None => (Verdict::Accept, None),
                            Some(book) => match book.cached(*slot_id, self.judged_at(&s)) {
                                None => (Verdict::Hold, None),
                                // An epoch not seen released: settled with
                                // a ticket (`settle`), which may park it here.
                                Some(registered) if registered != *signer && self.unseen(&s) => (Verdict::Hold, None),
                                Some(registered) => signer_verdict(*signer, registered),
                            },
                        },
                    },
                };
                self.count(&s, &verdict, unwanted);
                if verdict == Verdict::Accept {
                    self.remember_accepted(&s, id);
                }
                // Carried to the queue: the dequeuer does not recover it again.
                if let (Verdict::Accept | Verdict::Hold, Ok((_, signer))) = (&verdict, &admitted) {
                    self.recovered_signer_of(id, Some(*signer));
                }
                verdict
            }
        }
    }

    /// Why a well-formed, signed gossip submission is of no use here, if it
    /// is: its deadline passed (a replay, most often), its epoch is further
    /// past the last one this validator saw released than any honest
    /// node's could be ([`FUTURE_EPOCHS`]), or its slot already sent
    /// [`Admission::per_slot_epoch`] for the epoch. Each such message costs
    /// its sender a little score (`Verdict::Unwanted`) and is counted
    /// (`gossip_unwanted:{why}` on `/metrics`), instead of filling the queue
    /// and breaking the intake.
    fn unwanted(&self, s: &SnapshotSubmission) -> Option<(Unwanted, String)> {
        let r = s.request.as_ref()?;
        if self.stale(r.deadline) {
            return Some((Unwanted::Stale, format!("its deadline {} passed", r.deadline)));
        }
        // Acquire: the open epochs written before it are the ones read below.
        let latest = self.latest_epoch.load(std::sync::atomic::Ordering::Acquire);
        if latest > 0 && r.epoch_id > latest.saturating_add(FUTURE_EPOCHS) {
            let why = format!("epoch {} is far past the last released ({latest})", r.epoch_id);
            return Some((Unwanted::UnreleasedEpoch, why));
        }
        // Released and not open: its window closed (or it was never
        // released), whatever deadline its signer chose.
        if latest > 0 && r.epoch_id <= latest && self.released_in(s).is_none() {
            let why = format!("epoch {}'s window is closed", r.epoch_id);
            return Some((Unwanted::WindowClosed, why));
        }
        // An epoch not seen released yet waits in the queue until it is (or
        // its deadline passes): a slot may park only a share of its cap on
        // one, so that a few slots cannot fill the queue with them.
        let cap = if latest > 0 && r.epoch_id > latest {
            (self.admission.per_slot_epoch / UNSEEN_SHARE).max(1)
        } else {
            self.admission.per_slot_epoch
        };
        let sent = self.per_slot_epoch.lock().unwrap_or_else(|p| p.into_inner());
        if sent.get(&(r.epoch_id, r.slot_id)).is_some_and(|n| *n >= cap) {
            let why = format!("slot {} sent more than {cap} submissions for epoch {}", r.slot_id, r.epoch_id);
            return Some((Unwanted::OverSlotCap, why));
        }
        None
    }

    /// Whether the gossip message `id` of `s` was accepted here before.
    fn accepted_before(&self, s: &SnapshotSubmission, id: &[u8; 32]) -> bool {
        let Some(epoch) = s.request.as_ref().map(|r| r.epoch_id) else { return false };
        let ids = self.accepted_ids.lock().unwrap_or_else(|p| p.into_inner());
        ids.get(&epoch).is_some_and(|set| set.contains(id))
    }

    /// Notes that the gossip message `id` of `s` was accepted.
    fn remember_accepted(&self, s: &SnapshotSubmission, id: [u8; 32]) {
        let Some(epoch) = s.request.as_ref().map(|r| r.epoch_id) else { return };
        let mut ids = self.accepted_ids.lock().unwrap_or_else(|p| p.into_inner());
        if ids.values().map(std::collections::HashSet::len).sum::<usize>() < ACCEPTED_IDS_KEPT {
            ids.entry(epoch).or_default().insert(id);
        }
    }

    /// Whether `s`'s epoch is past the last this validator saw released.
    fn unseen(&self, s: &SnapshotSubmission) -> bool {
        let latest = self.latest_epoch.load(std::sync::atomic::Ordering::Relaxed);
        s.request.as_ref().is_some_and(|r| latest > 0 && r.epoch_id > latest)
    }

    /// Takes one more submission parked for `s`'s epoch (not seen released,
    /// signed by someone the slot's signer is not now), if fewer than
    /// [`PARKED_PER_EPOCH`] were.
    fn park(&self, s: &SnapshotSubmission) -> bool {
        let Some(epoch) = s.request.as_ref().map(|r| r.epoch_id) else { return false };
        let mut parked = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        let n = parked.entry(epoch).or_insert(0);
        *n += 1;
        *n <= PARKED_PER_EPOCH
    }

    /// The release block of `s`'s epoch, while its window is open (as the
    /// intake last read the open epochs).
    fn released_in(&self, s: &SnapshotSubmission) -> Option<u64> {
        let epoch = s.request.as_ref()?.epoch_id;
        self.open.lock().unwrap_or_else(|p| p.into_inner()).get(&epoch).copied()
    }

    /// The anchor block `s`'s signer is judged as of: its epoch's release
    /// block while the window is open; for an epoch not seen released yet,
    /// the newest block the monitor's record of the registry covers (the
    /// anchor head before it recorded anything).
    fn judged_at(&self, s: &SnapshotSubmission) -> Option<u64> {
        let head = self.head.load(std::sync::atomic::Ordering::Relaxed);
        self.released_in(s)
            .or_else(|| self.signers.as_ref().and_then(|book| book.now_block()))
            .or((head > 0).then_some(head))
    }

    /// Counts a verdict: an accepted submission against its slot's cap for
    /// the epoch (only once its signer is known to be the slot's, so nobody
    /// else can use up an honest slot's cap), an unwanted one by why
    /// (flushed to Redis by the intake).
    fn count(&self, s: &SnapshotSubmission, verdict: &lite_node_gossip::Verdict, unwanted: Option<Unwanted>) {
        use std::sync::atomic::Ordering::Relaxed;
        if *verdict == lite_node_gossip::Verdict::Accept
            && let Some(r) = s.request.as_ref()
        {
            let mut sent = self.per_slot_epoch.lock().unwrap_or_else(|p| p.into_inner());
            *sent.entry((r.epoch_id, r.slot_id)).or_insert(0) += 1;
            // Only recent epochs are counted: the oldest forgotten first.
            if sent.len() > PER_SLOT_EPOCH_ENTRIES
                && let Some(oldest) = sent.keys().next().copied()
            {
                sent.retain(|(epoch, _), _| *epoch > oldest.0);
            }
            return;
        }
        if let Some(why) = unwanted {
            self.unwanted_counts[why as usize].fetch_add(1, Relaxed);
        }
    }

    /// Writes the unwanted counts gathered since the last flush into the
    /// counters (`gossip_unwanted:{why}`), one pipeline.
    async fn flush_unwanted(&self, flushed: &mut [u64; UNWANTED_WHY.len()]) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut pipe = redis::pipe();
        let now: [u64; UNWANTED_WHY.len()] = std::array::from_fn(|i| self.unwanted_counts[i].load(Relaxed));
        let mut any = false;
        for (i, why) in UNWANTED_WHY.iter().enumerate() {
            if now[i] > flushed[i] {
                pipe.hincr(self.market.keys.counters(), format!("gossip_unwanted:{why}"), now[i] - flushed[i]).ignore();
                any = true;
            }
        }
        // What came meanwhile is written next time.
        if any && pipe.query_async::<()>(&mut self.conn.clone()).await.is_ok() {
            *flushed = now;
        }
    }

    /// A held gossip message's verdict, from the slot registry (read now if
    /// need be), given on its ticket; its payload if it was accepted. One
    /// handed over without a ticket was accepted at once.
    async fn settle(&self, delivery: lite_node_gossip::Delivery) -> Option<Vec<u8>> {
        use lite_node_gossip::Verdict;
        let Some(ticket) = delivery.ticket else { return Some(delivery.data) };
        let decoded = <SnapshotSubmission as prost::Message>::decode(delivery.data.as_slice());
        let admitted =
            decoded.as_ref().map_err(|e| e.to_string()).and_then(|s| self.admitted(s).map_err(|r| r.to_string()));
        let (verdict, unwanted) = match (admitted, &self.signers) {
            (Err(why), _) => (Verdict::Reject(why), None),
            (Ok(_), None) => (Verdict::Accept, None),
            (Ok((slot_id, signer)), Some(book)) => {
                let at = decoded.as_ref().ok().and_then(|s| self.judged_at(s));
                // Bounded: one slow read holds every message of the batch
                // (and the intake behind it) while the window runs.
                let looked_up =
                    tokio::time::timeout(SETTLE_READ_WITHIN, book.lookup(slot_id, at)).await.unwrap_or_else(|_| {
                        Err(format!("the anchor did not answer within {} s", SETTLE_READ_WITHIN.as_secs()))
                    });
                match looked_up {
                    // Past its slot's cap now (others settled meanwhile): unwanted.
                    Ok(registered) => match (signer_verdict(signer, registered), &decoded) {
                        ((Verdict::Accept, _), Ok(s)) => match self.unwanted(s) {
                            Some((kind, why)) => (kind.verdict(why), Some(kind)),
                            None => (Verdict::Accept, None),
                        },
                        // Not the signer now, for an epoch this validator has
                        // not seen released: the release may follow a change
                        // it has not read yet. Queued here (the dequeuer
                        // waits for the epoch and judges the signer as of its
                        // release), not relayed; a few per epoch.
                        (_, Ok(s)) if self.unseen(s) && self.park(s) => {
                            ticket.settle(&Verdict::Ignore);
                            return Some(delivery.data);
                        }
                        (judged, _) => judged,
                    },
                    // The anchor not answering: queued here (the dequeuer checks
                    // the signer again), not lost — but not relayed unchecked,
                    // which would have the peers hold junk against this one.
                    Err(why) => {
                        tracing::warn!(
                            "gossip: slot {slot_id}'s signer could not be read ({why}); queued here, not relayed"
                        );
                        ticket.settle(&Verdict::Ignore);
                        return Some(delivery.data);
                    }
                }
            }
        };
        if let Ok(s) = &decoded {
            self.count(s, &verdict, unwanted);
        }
        let accepted = verdict == Verdict::Accept;
        if let (true, Ok(s)) = (accepted, &decoded) {
            self.remember_accepted(s, lite_node_protocol::submission::gossip_message_id(&delivery.data));
        }
        if !accepted {
            self.recovered_signer(&delivery.data, None);
        }
        ticket.settle(&verdict);
        accepted.then_some(delivery.data)
    }

    /// Queues submissions that came over gossip as ones that came over
    /// gRPC, in one script call; an answer for each, in order. Gossip hands
    /// over only what [`Gateway::judge_gossip`] accepted, so its checks (the
    /// signature recovery above all) are not run again.
    pub async fn take_gossip(&self, payloads: &[Vec<u8>]) -> redis::RedisResult<Vec<Admitted>> {
        let decoded: Vec<Result<(SnapshotSubmission, _), Admitted>> = payloads
            .iter()
            .map(|payload| match <SnapshotSubmission as prost::Message>::decode(payload.as_slice()) {
                Ok(s) => Ok((s, self.recovered_signer(payload, None))),
                Err(e) => Err(Admitted::Refused(Rejection::new(Reason::BadForm, format!("not a submission: {e}")))),
            })
            .collect();
        let mut queued = self
            .queue_many(decoded.iter().filter_map(|d| d.as_ref().ok()).map(|(s, signer)| (s, *signer)), "gossip")
            .await?
            .into_iter();
        Ok(decoded
            .into_iter()
            .map(|d| match d {
                Ok(_) => queued.next().unwrap_or(Admitted::NoHead),
                Err(refused) => refused,
            })
            .collect())
    }

    /// Queues what gossip hands over on `delivered`, until it closes: what
    /// is waiting is taken together (up to [`GOSSIP_BATCH`]) and queued
    /// concurrently on the one connection, so Redis sees them pipelined —
    /// one at a time, a burst outran the queueing and the channel filled,
    /// and gossip ignores (and loses: it is not sent again) what arrives
    /// then. A submission that cannot be queued now — Redis away (a
    /// restart), no anchor head yet (the event monitor starting), the queue
    /// full — is held and tried again with backoff, never dropped.
    ///
    /// Messages the check held are settled first ([`Gateway::judge_gossip`]):
    /// the registry's generation is read once a batch (a registration
    /// empties the book), then each held slot's signer, concurrently.
    pub async fn take_gossip_from(&self, delivered: &mut tokio::sync::mpsc::Receiver<lite_node_gossip::Delivery>) {
        let mut batch = Vec::with_capacity(GOSSIP_BATCH);
        let mut flushed = [0u64; UNWANTED_WHY.len()];
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut viewed: Option<std::time::Instant> = None;
        loop {
            batch.clear();
            // The head, the open epochs and the registry's record, at most
            // every VIEW_EVERY while batches come (a burst's batches are not
            // each held up by Redis round trips, which filled the hand-over
            // channel), and once a second when nothing is handed over.
            let got = tokio::select! {
                n = delivered.recv_many(&mut batch, GOSSIP_BATCH) => Some(n),
                _ = tick.tick() => None,
            };
            if got == Some(0) {
                return;
            }
            if got.is_none() || viewed.is_none_or(|at| at.elapsed() >= VIEW_EVERY) {
                self.flush_unwanted(&mut flushed).await;
                self.read_chain_view().await;
                viewed = Some(std::time::Instant::now());
            }
            let held = batch.iter().filter(|d| d.ticket.is_some()).count();
            let started = std::time::Instant::now();
            let settled = futures_util::future::join_all(batch.drain(..).map(|d| self.settle(d))).await;
            if started.elapsed() > SLOW_SETTLE {
                tracing::warn!(
                    "gossip: settling {held} held message(s) took {:.1} s (their slots' signers read from the anchor)",
                    started.elapsed().as_secs_f64()
                );
            }
            let mut pending: Vec<Vec<u8>> = settled.into_iter().flatten().collect();
            let mut delays = lite_node_core::retry::Policy::REDIS.delays();
            loop {
                let mut again = Vec::new();
                let mut why = String::new();
                match self.take_gossip(&pending).await {
                    Err(e) => {
                        why = format!("Redis: {e}");
                        again = pending;
                    }
                    Ok(answers) => {
                        for (payload, answer) in pending.into_iter().zip(answers) {
                            match answer {
                                Admitted::Queued => {}
                                Admitted::Refused(r) => tracing::debug!("gossip: a submission was not queued: {r}"),
                                Admitted::NoHead => {
                                    why = "no anchor head in Redis yet (the event monitor is starting)".into();
                                    again.push(payload);
                                }
                                Admitted::Full => {
                                    why = "the submission queue is full".into();
                                    again.push(payload);
                                }
                            }
                        }
                    }
                }
                if again.is_empty() {
                    break;
                }
                self.held_back.fetch_add(again.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let wait = delays.next().unwrap_or(lite_node_core::retry::Policy::REDIS.max);
                tracing::warn!("gossip: {} submission(s) held ({why}); trying again in {wait:?}", again.len());
                tokio::time::sleep(wait).await;
                pending = again;
            }
        }
    }

    /// What the gossip check judges by, read from Redis: the anchor head,
    /// the open epochs (by release block) and then the slot registry's
    /// record (after the epochs: each open epoch's changes are recorded).
    async fn read_chain_view(&self) {
        use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
        let mut conn = self.conn.clone();
        type HeadAndOpen = (Option<u64>, Vec<(u64, u64)>);
        let read: redis::RedisResult<HeadAndOpen> = redis::pipe()
            .get(self.market.keys.anchor_head())
            .zrange_withscores(self.market.keys.epochs_closing(), 0, -1)
            .query_async(&mut conn)
            .await;
        let Ok((head, open)) = read else { return };
        if let Some(head) = head {
            self.head.fetch_max(head, Relaxed);
        }
        let newest = open.iter().map(|(epoch, _)| *epoch).max();
        // Scored by the block the window closes at (`Market::window_closes`).
        let window = self.market.window_blocks.saturating_add(1);
        let open: std::collections::BTreeMap<u64, u64> =
            open.into_iter().map(|(epoch, closes)| (epoch, closes.saturating_sub(window))).collect();
        // Replays of a closed epoch are unwanted by their epoch: its ids go.
        let latest = self.latest_epoch.load(Acquire).max(newest.unwrap_or(0));
        self.accepted_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|epoch, _| open.contains_key(epoch) || *epoch > latest);
        self.parked.lock().unwrap_or_else(|p| p.into_inner()).retain(|epoch, _| *epoch > latest);
        // The open epochs first, then the newest released (Release, read
        // with Acquire): a gossip check that sees an epoch released sees it
        // open — never "released and its window closed" for one whose window
        // opened between the two writes, which turned away the first
        // messages of an epoch that came in with its release (issue 53's
        // late-gossip flake: one judged `window_closed` at arrival).
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = open;
        if let Some(newest) = newest {
            self.latest_epoch.fetch_max(newest, Release);
        }
        if let Some(book) = &self.signers
            && let Err(e) = book.sync(&mut conn, &self.market.keys).await
        {
            tracing::debug!("gossip: the slot registry's record could not be read: {e}");
        }
    }

    /// Whether the anchor head the intake last read has passed `deadline`.
    fn stale(&self, deadline: u64) -> bool {
        self.head.load(std::sync::atomic::Ordering::Relaxed) > deadline
    }

    /// The checks made before storage (form, signature, the market's
    /// projects): the slot and who signed, or why `s` is refused.
    fn admitted(&self, s: &SnapshotSubmission) -> Result<(u64, alloy::primitives::Address), Rejection> {
        lite_node_protocol::submission::check_snapshot(s, self.admission.snapshot)?;
        let (r, signer) = admit(s, &self.market.scope, &self.domain)?;
        if let Some(Err(why)) = self.projects.as_ref().map(|p| p.check(&r.project_id)) {
            return Err(Rejection::new(Reason::UnknownProject, why));
        }
        Ok((r.slot_id, signer))
    }

    /// The signer the gossip check recovered for `payload`: kept (`keep`
    /// given) until the intake queues it, then taken, so the dequeuer does
    /// not recover it a second time. Bounded: past [`RECOVERED_KEPT`] the
    /// oldest are forgotten at once (those are recovered again).
    fn recovered_signer(
        &self,
        payload: &[u8],
        keep: Option<alloy::primitives::Address>,
    ) -> Option<alloy::primitives::Address> {
        self.recovered_signer_of(lite_node_protocol::submission::gossip_message_id(payload), keep)
    }

    /// [`Gateway::recovered_signer`] by the message's id, already hashed.
    fn recovered_signer_of(
        &self,
        id: [u8; 32],
        keep: Option<alloy::primitives::Address>,
    ) -> Option<alloy::primitives::Address> {
        let mut kept = self.recovered.lock().unwrap_or_else(|p| p.into_inner());
        match keep {
            Some(signer) => {
                if kept.len() >= RECOVERED_KEPT {
                    kept.clear();
                }
                kept.insert(id, signer);
                Some(signer)
            }
            None => kept.remove(&id),
        }
    }

    pub fn new(conn: ConnectionManager, market: Arc<Market>) -> Self {
        Self::with_admission(conn, market, None, Admission::default())
    }

    /// A gateway that also refuses projects outside `projects` before
    /// storing them, with `admission`'s limits.
    pub fn with_admission(
        conn: ConnectionManager,
        market: Arc<Market>,
        projects: Option<Projects>,
        admission: Admission,
    ) -> Self {
        let quota = governor::Quota::per_second(admission.peer_rate).allow_burst(admission.peer_burst);
        Self {
            conn,
            domain: Arc::new(eip712::domain(market.chain_id, market.scope.protocol_state)),
            market,
            projects: projects.map(Arc::new),
            admission,
            rate: Arc::new(governor::RateLimiter::keyed(quota)),
            in_flight: Default::default(),
            signers: None,
            held_back: Default::default(),
            head: Default::default(),
            relay: Default::default(),
            latest_epoch: Default::default(),
            per_slot_epoch: Default::default(),
            open: Default::default(),
            accepted_ids: Default::default(),
            parked: Default::default(),
            unwanted_counts: Default::default(),
            recovered: Default::default(),
        }
    }

    /// How many gossip submissions could not be queued at once so far (a
    /// Redis restart, a full queue): what arrived meanwhile may be judged
    /// late, so the intake has had a break.
    pub fn held_back(&self) -> u64 {
        self.held_back.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The last epoch the gossip intake saw released (0: none yet).
    pub fn latest_epoch(&self) -> u64 {
        self.latest_epoch.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The same gateway, whose gossip intake also checks each submission's
    /// signer against its slot's registered one before relaying it.
    pub fn with_signers(mut self, signers: Arc<dyn Registered>) -> Self {
        self.signers = Some(signers);
        self
    }

    /// Checks one submission and, if it passes, queues it (module docs).
    /// `Err` is Redis unreachable.
    pub async fn accept(&self, s: &SnapshotSubmission, peer: &str) -> redis::RedisResult<Admitted> {
        let signer = match self.admitted(s) {
            Ok((_, signer)) => signer,
            Err(rejection) => {
                let field = format!("rejected:{}", rejection.reason);
                let mut conn = self.conn.clone();
                redis::cmd("HINCRBY").arg(self.market.keys.counters()).arg(field).arg(1).exec_async(&mut conn).await?;
                return Ok(Admitted::Refused(rejection));
            }
        };
        let admitted = self.queue(s, peer, Some(signer)).await?;
        if admitted == Admitted::Queued {
            self.relay(s).await;
        }
        Ok(admitted)
    }

    /// Publishes what gRPC brought to the other validators from now on.
    pub fn relay_through(&self, peer: lite_node_gossip::Gossip) {
        let _ = self.relay.set(peer);
    }

    /// Publishes a submission gRPC brought on this validator's gossip peer,
    /// in its one gossip form, once it passes the check every peer applies
    /// before relaying (its slot's registered signer read if need be): a
    /// sender cannot make this validator relay what its peers would hold
    /// against it. Not published when the registry cannot be read now (the
    /// dequeuer here still judges it).
    async fn relay(&self, s: &SnapshotSubmission) {
        use lite_node_gossip::Verdict;
        let Some(peer) = self.relay.get() else { return };
        let Ok(form) = lite_node_protocol::submission::gossip_form(s) else { return };
        let bytes = prost::Message::encode_to_vec(&form);
        let judged = self.judge_gossip(&bytes);
        // Published, not queued here again: nothing to carry.
        self.recovered_signer(&bytes, None);
        let verdict = match judged {
            Verdict::Hold => match (self.admitted(&form), &self.signers) {
                (Ok((slot_id, signer)), Some(book)) => match book.lookup(slot_id, self.judged_at(&form)).await {
                    Ok(registered) => signer_verdict(signer, registered).0,
                    Err(_) => Verdict::Ignore,
                },
                _ => Verdict::Ignore,
            },
            verdict => verdict,
        };
        if verdict == Verdict::Accept && !peer.publish(bytes) {
            tracing::warn!("gossip: the outbox is full; a gRPC submission was not published");
        }
    }

    /// Queues a submission the checks admitted (module docs, step 5).
    async fn queue(
        &self,
        s: &SnapshotSubmission,
        peer: &str,
        signer: Option<alloy::primitives::Address>,
    ) -> redis::RedisResult<Admitted> {
        let mut answers = self.queue_many([(s, signer)], peer).await?;
        Ok(answers.pop().unwrap_or(Admitted::NoHead))
    }

    /// Queues submissions the checks admitted, all from `peer`, in one
    /// script call; an answer for each, in order.
    async fn queue_many<'a>(
        &self,
        items: impl IntoIterator<Item = (&'a SnapshotSubmission, Option<alloy::primitives::Address>)>,
        peer: &str,
    ) -> redis::RedisResult<Vec<Admitted>> {
        let millis = crate::now_ms();
        let secs = millis / 1000;
        let k = &self.market.keys;
        let mut call = QUEUE_SCRIPT.prepare_invoke();
        call.key(k.submission_queue())
            .key(k.submissions_timeline())
            .key(k.counters())
            .key(k.anchor_head())
            .key(k.pending())
            .arg(self.admission.max_queue)
            .arg(secs)
            .arg(SUBMISSION_METADATA_TTL.as_secs())
            .arg(secs.saturating_sub(TIMELINE_RETENTION.as_secs()))
            .arg(crate::keys::DETAIL_TTL.as_secs());
        // `None`: refused before storage (its signature is not one).
        let mut answers: Vec<Option<Admitted>> = Vec::new();
        for (s, signer) in items {
            let signature = match eip712::canonical_signature(&s.signature) {
                Ok(signature) => signature,
                Err(why) => {
                    answers.push(Some(Admitted::Refused(Rejection::new(Reason::BadSignature, why))));
                    continue;
                }
            };
            let default = proto::Request::default();
            let r = s.request.as_ref().unwrap_or(&default);
            let entity = format!("received:{}:{}:{}:{millis}:{peer}", r.epoch_id, r.slot_id, r.project_id);
            let metadata = self.admission.metadata.then(|| {
                json!({
                    "epoch_id": r.epoch_id.to_string(),
                    "slot_id": r.slot_id,
                    "project_id": r.project_id,
                    "snapshot_cid": r.snapshot_cid,
                    "peer_id": peer,
                    "timestamp": secs,
                    "entity_id": entity,
                    "validator_id": self.market.validator_id,
                })
                .to_string()
            });
            let payload = if signature == s.signature {
                encode_rest(s, millis, peer, signer)
            } else {
                let mut s = s.clone();
                s.signature = signature;
                encode_rest(&s, millis, peer, signer)
            };
            // Checked against the CID before it got here (`check_snapshot`).
            call.key(k.submission_metadata(&entity))
                .key(k.snapshot(&r.snapshot_cid))
                .arg(payload)
                .arg(&entity)
                .arg(metadata.unwrap_or_default())
                .arg(r.epoch_id)
                .arg(s.snapshot.as_deref().unwrap_or_default());
            answers.push(None);
        }
        let queued: Vec<String> = if answers.iter().any(Option::is_none) {
            let mut conn = self.conn.clone();
            call.invoke_async(&mut conn).await?
        } else {
            Vec::new()
        };
        let mut queued = queued.into_iter();
        Ok(answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| match queued.next().as_deref() {
                    Some("queued") => Admitted::Queued,
                    Some("full") => Admitted::Full,
                    _ => Admitted::NoHead,
                })
            })
            .collect())
    }

    /// Counts a call against `peer`'s rate and calls in flight; `Err` is
    /// the answer when it is past either.
    fn enter(&self, peer: Option<IpAddr>) -> Result<Option<InFlight>, tonic::Status> {
        let Some(peer) = peer else { return Ok(None) };
        if self.rate.check_key(&peer).is_err() {
            return Err(tonic::Status::resource_exhausted(format!(
                "more than {} submissions a second from {peer}; slow down",
                self.admission.peer_rate
            )));
        }
        let mut table = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let n = table.entry(peer).or_default();
        if *n >= self.admission.peer_in_flight {
            return Err(tonic::Status::resource_exhausted(format!(
                "{} calls from {peer} in flight already",
                self.admission.peer_in_flight
            )));
        }
        *n += 1;
        Ok(Some(InFlight { table: self.in_flight.clone(), peer }))
    }

    /// The gRPC answer to one submission.
    async fn answer(&self, s: &SnapshotSubmission, peer: &str) -> Result<Option<Rejection>, tonic::Status> {
        match self.accept(s, peer).await {
            Ok(Admitted::Queued) => Ok(None),
            Ok(Admitted::Refused(rejection)) => Ok(Some(rejection)),
            Ok(Admitted::Full) => Err(tonic::Status::resource_exhausted(format!(
                "the validator's queue holds {} submissions; try again shortly",
                self.admission.max_queue
            ))),
            Ok(Admitted::NoHead) => Err(tonic::Status::unavailable(
                "the validator is not following the anchor chain yet (no anchor head); try again shortly",
            )),
            Err(e) => {
                tracing::warn!("cannot queue a submission ({e}); the node will retry");
                Err(tonic::Status::unavailable(format!("the validator's queue is unavailable: {e}")))
            }
        }
    }

    /// The cleanup after oversized messages: tonic refuses a message past
    /// its limit with `OUT_OF_RANGE` before the service sees it; for a
    /// submission that is an invalid argument.
    fn oversized(status: &tonic::Status) -> bool {
        status.code() == tonic::Code::OutOfRange && status.message().contains("message length too large")
    }
}

/// The peer's IP address, and its name on the timeline.
fn peer_of<T>(request: &tonic::Request<T>) -> (Option<IpAddr>, String) {
    match request.remote_addr() {
        Some(a) => (Some(a.ip()), format!("grpc-{a}")),
        None => (None, "grpc".to_owned()),
    }
}

/// `Failure` with the rejection's reason in the response metadata, as the
/// devnet collector answers.
fn failure(rejection: &Rejection) -> tonic::Response<SubmissionResponse> {
    let mut response = tonic::Response::new(SubmissionResponse { message: proto::FAILURE.into() });
    let text = format!("{}: {}", rejection.reason, rejection.detail);
    response.metadata_mut().insert(proto::REASON_METADATA, proto::reason_metadata(&text));
    response
}

#[tonic::async_trait]
impl proto::submission_server::Submission for Gateway {
    async fn submit_snapshot(
        &self,
        request: tonic::Request<SnapshotSubmission>,
    ) -> Result<tonic::Response<SubmissionResponse>, tonic::Status> {
        let (ip, peer) = peer_of(&request);
        let _in_flight = self.enter(ip)?;
        let s = request.into_inner();
        Ok(match self.answer(&s, &peer).await? {
            None => tonic::Response::new(SubmissionResponse { message: proto::SUCCESS.into() }),
            Some(rejection) => failure(&rejection),
        })
    }

    async fn submit_snapshot_simulation(
        &self,
        request: tonic::Request<tonic::Streaming<SnapshotSubmission>>,
    ) -> Result<tonic::Response<SubmissionResponse>, tonic::Status> {
        let (ip, peer) = peer_of(&request);
        let _in_flight = self.enter(ip)?;
        let mut stream = request.into_inner();
        let mut first_refusal = None;
        loop {
            let s = match stream.message().await {
                Ok(Some(s)) => s,
                Ok(None) => break,
                Err(status) if Gateway::oversized(&status) => {
                    return Err(tonic::Status::invalid_argument(status.message().to_owned()));
                }
                Err(status) => return Err(status),
            };
            if let Some(ip) = ip
                && self.rate.check_key(&ip).is_err()
            {
                return Err(tonic::Status::resource_exhausted(format!("too many submissions from {ip}")));
            }
            if let Some(rejection) = self.answer(&s, &peer).await? {
                first_refusal.get_or_insert(rejection);
            }
        }
        Ok(match first_refusal {
            None => tonic::Response::new(SubmissionResponse { message: proto::SUCCESS.into() }),
            Some(rejection) => failure(&rejection),
        })
    }
}

/// Serves the gateway on `listener` until `shutdown` completes. Messages
/// past [`caps::MESSAGE`] are refused undecoded, as `INVALID_ARGUMENT`.
pub async fn serve(
    gateway: Gateway,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    // Peers not seen for a while leave the rate table: however many
    // addresses a flood comes from, the table holds the recent ones only.
    let rate = gateway.rate.clone();
    let pruning = tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
        loop {
            every.tick().await;
            rate.retain_recent();
            rate.shrink_to_fit();
        }
    });
    let service = proto::submission_server::SubmissionServer::new(gateway).max_decoding_message_size(caps::MESSAGE);
    let served = tonic::transport::Server::builder()
        .layer(tower::util::MapResponseLayer::new(oversized_is_invalid))
        .add_service(service)
        .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener), shutdown)
        .await;
    pruning.abort();
    served
}

/// Rewrites tonic's `OUT_OF_RANGE` for a message past the size limit (a
/// trailers-only answer: the status is in the headers) as
/// `INVALID_ARGUMENT`.
fn oversized_is_invalid<B>(mut response: http::Response<B>) -> http::Response<B> {
    let headers = response.headers_mut();
    let too_large = headers.get("grpc-status").is_some_and(|v| v == "11")
        && headers.get("grpc-message").and_then(|m| m.to_str().ok()).is_some_and(|m| m.contains("too%20large"));
    if too_large {
        headers.insert("grpc-status", http::HeaderValue::from_static("3"));
    }
    response
}
