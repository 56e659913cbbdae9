//! The rules a submission is judged by (docs/protocol.md §6, §11), once for
//! every collector and validator: [`judge`] applies them in one order —
//! form, signature, the slot's registered signer, epoch, deadline, selection
//! — asking the chain only what it must (through [`Facts`]), and every rejection is a
//! [`Reason`] with one text. A collector and a validator that disagree on a
//! submission would be two validators attesting different roots; so both
//! call this, and [`cases`] is the table both sides' tests run.

use std::future::Future;

use alloy::{primitives::Address, sol_types::Eip712Domain};

use crate::{
    eip712, is_pool_address,
    proto::{Request, SnapshotSubmission},
};

pub mod cases;

/// Anchor blocks after an epoch's release within which a submission's
/// deadline must fall: a node's submission window (100) plus its deadline
/// buffer (30). A later deadline would keep a signed submission replayable;
/// a validator's window stays open as long (docs/protocol.md §11).
pub const WINDOW_BLOCKS: u64 = 130;

/// The first anchor block at which the window of an epoch released in
/// `release_block` is closed for validators keeping windows of
/// `window_blocks`: it stays open through `release_block + window_blocks`,
/// since a deadline of that block is still valid while the head is on it.
pub fn window_closes(release_block: u64, window_blocks: u64) -> u64 {
    release_block.saturating_add(window_blocks).saturating_add(1)
}

/// Declares [`Reason`] with its labels, so the list, the labels and their
/// parsing cannot drift apart.
macro_rules! reasons {
    ($($(#[$doc:meta])* $name:ident = $label:literal,)*) => {
        /// Why a submission was rejected: the label it is counted under.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Reason {
            $($(#[$doc])* $name,)*
        }

        impl Reason {
            /// Every reason, in the order the rules apply.
            pub const ALL: &[Reason] = &[$(Reason::$name,)*];

            /// The label (metrics, the rejection record, the monitor API).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$name => $label,)*
                }
            }

            pub fn parse(label: &str) -> Option<Self> {
                match label {
                    $($label => Some(Reason::$name),)*
                    _ => None,
                }
            }
        }
    };
}

reasons! {
    /// Not a submission at all (not decodable, fields missing or mistyped).
    Malformed = "malformed",
    /// A submission whose content is wrong: no CID, a bad project id, another
    /// data market or ProtocolState.
    BadForm = "bad_form",
    /// The signature does not recover to any address.
    BadSignature = "bad_signature",
    /// No signer is registered for the slot.
    UnregisteredSlot = "unregistered_slot",
    /// The signature recovers to someone else than the slot's signer.
    WrongSigner = "wrong_signer",
    /// The slot's signer is a snapshotter the registry disabled.
    SnapshotterDisabled = "snapshotter_disabled",
    /// The epoch was never released here (or so long ago its state is gone).
    UnknownEpoch = "unknown_epoch",
    /// The epoch's window closed (it went to the finalizer).
    WindowClosed = "window_closed",
    /// The signed deadline is further from the release than a node may sign.
    DeadlineTooFar = "deadline_too_far",
    /// The anchor head is past the signed deadline.
    DeadlinePassed = "deadline_passed",
    /// The slot was not selected for the epoch.
    NotSelected = "not_selected",
    /// The slot was selected, for another pool.
    WrongPool = "wrong_pool",
    /// The project id names no project the data market defines: another
    /// namespace, a project type the market does not have, or a data source
    /// that is not a pool.
    UnknownProject = "unknown_project",
    /// The slot already submitted this CID for the project in this epoch.
    Duplicate = "duplicate",
    /// The slot submitted another CID for the project in this epoch: its
    /// vote on the project is void, whichever came first.
    Equivocation = "equivocation",
    /// The market requires each submission to carry its snapshot, and this
    /// one does not.
    MissingBytes = "missing_bytes",
    /// The snapshot carried does not hash to the submission's CID.
    BytesDoNotMatchCid = "bytes_do_not_match_cid",
    /// The snapshot carried is not JSON in the protocol's canonical form
    /// (§4), whose CID every honest node computes alike.
    NotCanonicalJson = "not_canonical_json",
    /// The snapshot carried is larger than the market takes.
    TooLarge = "too_large",
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rejected submission: the reason and what exactly was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: Reason,
    pub detail: String,
}

impl Rejection {
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Self { reason, detail: detail.into() }
    }

    /// The text for a reason found when the vote is counted (the window,
    /// one vote per slot), where only the reason is known.
    pub fn at_commit(reason: Reason) -> Self {
        let detail = match reason {
            Reason::Duplicate => "this slot already submitted this CID for the project in this epoch",
            Reason::Equivocation => {
                "this slot submitted another CID for the project in this epoch: its vote on it is void"
            }
            Reason::WindowClosed => "the epoch was already being finalized when this submission was judged",
            other => other.as_str(),
        };
        Self::new(reason, detail)
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

/// Where an epoch stands for the one judging a submission for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpochStanding {
    /// Released in `release_block`; its window is open.
    Open { release_block: u64 },
    /// Released, and its window has closed.
    Closed,
    /// Not released for this data market (as far as can be known).
    Unknown,
    /// Not seen yet, but it may be: the judge should wait (a validator whose
    /// event monitor has not seen a release a node already acted on).
    NotYetSeen,
}

/// Whether a slot may submit a project in an epoch, by the data market's
/// assignment rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    Selected,
    /// The slot was not selected for the epoch.
    NotSelected(String),
    /// The slot was selected, for another pool.
    WrongPool(String),
    /// The project is none the data market defines ([`Projects::check`]).
    UnknownProject(String),
}

/// The projects a data market defines: project ids in its namespace
/// (`{POWERLOOM_CHAIN}-{NAMESPACE}-{SOURCE_CHAIN}`) of the project types its
/// projects.json lists, each without a data source or with pool addresses
/// as its data source (which pool a slot may name is the assignment's to
/// say). Anything else would let a registered slot add made-up projects to
/// an epoch's finalized batch.
///
/// A project type may declare whether its projects are one per pool
/// (projects.json's `per_pool`): then a project id of that type names a
/// pool, or (`false`) names none; undeclared, either is taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Projects {
    pub namespace: String,
    pub types: std::collections::BTreeSet<String>,
    /// The types that declared `per_pool`, and how.
    pub per_pool: std::collections::BTreeMap<String, bool>,
}

impl Projects {
    pub fn new(namespace: impl Into<String>, types: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            namespace: namespace.into(),
            types: types.into_iter().map(Into::into).collect(),
            per_pool: Default::default(),
        }
    }

    /// The market's projects from its projects.json: each type with its
    /// `per_pool` declaration, if it made one.
    pub fn declared(namespace: impl Into<String>, types: impl IntoIterator<Item = (String, Option<bool>)>) -> Self {
        let types: Vec<(String, Option<bool>)> = types.into_iter().collect();
        let per_pool = types.iter().filter_map(|(kind, per)| per.map(|p| (kind.clone(), p))).collect();
        Self { per_pool, ..Self::new(namespace, types.into_iter().map(|(kind, _)| kind)) }
    }

    /// Whether `project_id` is one of this market's projects; `Err` says why not.
    pub fn check(&self, project_id: &str) -> Result<(), String> {
        let parts: Vec<&str> = project_id.split(':').collect();
        let (kind, source, namespace) = match parts.as_slice() {
            [kind, namespace] => (*kind, None, *namespace),
            [kind, source, namespace] => (*kind, Some(*source), *namespace),
            _ => return Err(format!("projectId `{}` is not `type:source:namespace`", clip(project_id))),
        };
        if namespace != self.namespace {
            return Err(format!(
                "projectId `{}`: namespace `{}` is not this data market's ({})",
                clip(project_id),
                clip(namespace),
                self.namespace
            ));
        }
        if !self.types.contains(kind) {
            return Err(format!(
                "projectId `{}`: project type `{}` is not one of this data market's ({})",
                clip(project_id),
                clip(kind),
                self.types.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        // One pool a project: a data source joining several (`a_b`) is none
        // of this market's projects (a slot selected for `a` could
        // otherwise make up `a_b`, `b_a`, `a_a`, … one-vote projects).
        if let Some(source) = source
            && !is_pool_address(source)
        {
            return Err(format!(
                "projectId `{}`: data source `{}` is not one pool address (lower-case 0x and 40 hex digits)",
                clip(project_id),
                clip(source)
            ));
        }
        // A type declared one per pool names one; one declared without
        // names none: the other form is a project nobody else submits,
        // a pair stored on chain for nothing.
        match (self.per_pool.get(kind), source) {
            (Some(true), None) => Err(format!(
                "projectId `{}`: project type `{kind}` is one per pool in this data market: its project id names a \
                 pool (`{kind}:0x…:{}`)",
                clip(project_id),
                self.namespace
            )),
            (Some(false), Some(_)) => Err(format!(
                "projectId `{}`: project type `{kind}` has no pool in this data market: its project id is \
                 `{kind}:{}`",
                clip(project_id),
                self.namespace
            )),
            _ => Ok(()),
        }
    }
}

/// What the rules need from the chains, asked in their order and only as
/// far as a submission gets. `Err` is a chain that cannot be read now (the
/// submission is tried again later), never a verdict on the submission.
pub trait Facts: Send + Sync {
    /// Where the submission's epoch stands.
    fn epoch(&self, request: &Request) -> impl Future<Output = Result<EpochStanding, String>> + Send;
    /// The anchor chain's head.
    fn head(&self) -> impl Future<Output = Result<u64, String>> + Send;
    /// The signer registered for `slot_id` (`Address::ZERO`: none) as of
    /// anchor block `at` — the release block of the submission's epoch,
    /// when it is known — or, `None`, as of now.
    fn signer(&self, slot_id: u64, at: Option<u64>) -> impl Future<Output = Result<Address, String>> + Send;
    /// Whether `signer` was an enabled snapshotter (`allSnapshotters`) as
    /// of anchor block `at`, as [`Facts::signer`]. Enabled unless a reader
    /// knows otherwise (a collector answering its nodes does not ask).
    fn enabled(&self, signer: Address, at: Option<u64>) -> impl Future<Output = Result<bool, String>> + Send {
        let _ = (signer, at);
        std::future::ready(Ok(true))
    }
    /// The assignment rule applied to the request's slot and project.
    fn selection(&self, request: &Request) -> impl Future<Output = Result<Selection, String>> + Send;
    /// Whether signers are judged as of the epoch's release, read first
    /// (a validator: its epochs are in Redis). `false`: as of now, before
    /// the epoch is read (a collector answering its nodes, whose epoch read
    /// is a chain read a junk signature should not cost).
    fn signers_at_release(&self) -> bool {
        true
    }
    /// What the market asks of the snapshot a submission carries
    /// ([`check_snapshot`]): by default, checked when carried, not required.
    fn snapshot_rule(&self) -> SnapshotRule {
        SnapshotRule::default()
    }
}

/// What the rules made of a submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    Accepted,
    Rejected(Rejection),
    /// Its epoch is not known yet but may be: ask again later.
    Deferred,
}

/// Judges a submission by every rule, in order: form, signature, the slot's
/// registered signer, epoch, deadline (against the release, then the
/// head), selection (the project included). What costs nothing comes
/// first, and nothing is waited for (an epoch not seen yet) until the
/// submission is known to be the slot's own. `Err` is a chain that could
/// not be read. What is counted when the vote is cast (one vote per slot)
/// is the validator's commit (docs/protocol.md §11).
pub async fn judge<F: Facts>(
    s: &SnapshotSubmission,
    scope: &Scope,
    domain: &Eip712Domain,
    facts: &F,
) -> Result<Judgement, String> {
    judge_recovered(s, scope, domain, facts, None).await
}

/// [`judge`], for a submission whose signer `recovered` already recovered
/// from its signature (a validator's gateway does before it queues one, and
/// carries it): the same rules, without recovering it a second time.
/// `None`: recovered here.
pub async fn judge_recovered<F: Facts>(
    s: &SnapshotSubmission,
    scope: &Scope,
    domain: &Eip712Domain,
    facts: &F,
    recovered: Option<Address>,
) -> Result<Judgement, String> {
    let reject = |reason, detail: String| Ok(Judgement::Rejected(Rejection::new(reason, detail)));
    let admitted = match recovered {
        Some(signer) => check_form(s, scope).map(|r| (r, signer)).map_err(|why| Rejection::new(Reason::BadForm, why)),
        None => admit(s, scope, domain),
    };
    let (r, found) = match admitted {
        Ok(admitted) => admitted,
        Err(rejection) => return Ok(Judgement::Rejected(rejection)),
    };
    if let Err(rejection) = check_snapshot(s, facts.snapshot_rule()) {
        return Ok(Judgement::Rejected(rejection));
    }
    // The registry as it stood at the epoch's release: every validator
    // judges alike whenever it reads, and a slot changed at block B is its
    // new signer's for every epoch released from B on.
    let standing = if facts.signers_at_release() { Some(facts.epoch(r).await?) } else { None };
    let at = match standing {
        Some(EpochStanding::Open { release_block }) => Some(release_block),
        _ => None,
    };
    let registered = facts.signer(r.slot_id, at).await?;
    // An epoch not seen released yet may be released after a change of the
    // slot this judge has not read: it waits, and the signer is judged as
    // of its release once it is seen.
    if registered != found && standing == Some(EpochStanding::NotYetSeen) {
        return Ok(Judgement::Deferred);
    }
    if registered == Address::ZERO {
        return reject(Reason::UnregisteredSlot, format!("slot {} is not registered", r.slot_id));
    }
    if registered != found {
        return reject(
            Reason::WrongSigner,
            format!("signature recovers to {found}, slot {} belongs to {registered}", r.slot_id),
        );
    }
    if !facts.enabled(found, at).await? {
        let when = at.map_or_else(|| "now".to_owned(), |b| format!("as of block {b}, the epoch's release"));
        return reject(
            Reason::SnapshotterDisabled,
            format!("slot {}'s snapshotter {found} is disabled on the registry ({when})", r.slot_id),
        );
    }
    let standing = match standing {
        Some(standing) => standing,
        None => facts.epoch(r).await?,
    };
    let release_block = match standing {
        EpochStanding::Open { release_block } => release_block,
        EpochStanding::Closed => {
            return reject(Reason::WindowClosed, format!("epoch {}'s submission window is closed", r.epoch_id));
        }
        EpochStanding::Unknown => {
            return reject(
                Reason::UnknownEpoch,
                format!("epoch {} was not released for this data market (or its state expired)", r.epoch_id),
            );
        }
        EpochStanding::NotYetSeen => return Ok(Judgement::Deferred),
    };
    let latest = release_block.saturating_add(WINDOW_BLOCKS);
    if r.deadline > latest {
        return reject(
            Reason::DeadlineTooFar,
            format!(
                "deadline {} is past block {latest}: epoch {} was released in block {release_block}, and a \
                 submission is valid for at most {WINDOW_BLOCKS} blocks after that",
                r.deadline, r.epoch_id
            ),
        );
    }
    let head = facts.head().await?;
    if head > r.deadline {
        return reject(Reason::DeadlinePassed, format!("deadline {} passed (anchor head {head})", r.deadline));
    }
    match facts.selection(r).await? {
        Selection::Selected => Ok(Judgement::Accepted),
        Selection::NotSelected(why) => reject(Reason::NotSelected, why),
        Selection::WrongPool(why) => reject(Reason::WrongPool, why),
        Selection::UnknownProject(why) => reject(Reason::UnknownProject, why),
    }
}

/// The checks that need nothing but the submission: its form and that its
/// signature recovers to someone (`bad_form`, `bad_signature`). A gateway
/// runs them before it stores anything; [`judge`] starts with them. Gives
/// the request and who signed it.
pub fn admit<'a>(
    s: &'a SnapshotSubmission,
    scope: &Scope,
    domain: &Eip712Domain,
) -> Result<(&'a Request, Address), Rejection> {
    let r = check_form(s, scope).map_err(|why| Rejection::new(Reason::BadForm, why))?;
    let signer = eip712::recover(domain, &eip712::Request::from(r), &s.signature)
        .map_err(|why| Rejection::new(Reason::BadSignature, why))?;
    Ok((r, signer))
}

/// The one form a submission travels in on the validators' gossip network:
/// what is signed and checked — the request, the signature in its one form
/// ([`eip712::canonical_signature`]), the data market and ProtocolState in
/// lower case — and nothing else (`header` and `nodeVersion`, which nobody
/// signs, are empty). A collector publishes this form; a validator relays
/// only payloads that are exactly this form's canonical encoding
/// ([`is_gossip_form`]), so one signed submission is one byte string, and
/// one message id ([`gossip_message_id`]) however a peer respells it.
/// `Err`: the signature is not one.
pub fn gossip_form(s: &SnapshotSubmission) -> Result<SnapshotSubmission, String> {
    let mut g = s.clone();
    g.signature = eip712::canonical_signature(&s.signature)?;
    g.header.clear();
    g.node_version = None;
    g.data_market.make_ascii_lowercase();
    g.protocol_state.make_ascii_lowercase();
    Ok(g)
}

/// Whether `payload` is exactly the canonical encoding of the gossip form
/// ([`gossip_form`]) of `s`, what it decoded to: fields in order, minimal,
/// no unknown fields, no header, every spelling the canonical one.
pub fn is_gossip_form(s: &SnapshotSubmission, payload: &[u8]) -> bool {
    // `payload` decoded to `s`: it is the encoding of `gossip_form(s)` iff
    // that form is `s` itself (each respelling a no-op) and `s` encodes to
    // `payload` — checked without a copy of `s` (its snapshot bytes) and
    // into a buffer each thread keeps, not a new one per message.
    thread_local! {
        static ENCODED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let own_form = s.header.is_empty()
        && s.node_version.is_none()
        && !s.data_market.bytes().any(|b| b.is_ascii_uppercase())
        && !s.protocol_state.bytes().any(|b| b.is_ascii_uppercase())
        && eip712::canonical_signature(&s.signature).is_ok_and(|c| c == s.signature);
    own_form
        && prost::Message::encoded_len(s) == payload.len()
        && ENCODED.with_borrow_mut(|buf| {
            buf.clear();
            prost::Message::encode(s, buf).is_ok() && buf.as_slice() == payload
        })
}

/// The id a gossip message travels under: the SHA-256 of its bytes. Only
/// the gossip form of a submission is relayed ([`is_gossip_form`]), so a
/// respelled copy (another header, the signature in capitals) is another
/// message, rejected on its own — it can never share an id with the honest
/// one and have that dropped as its duplicate.
pub fn gossip_message_id(payload: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(payload).into()
}

/// The data market and ProtocolState a collector serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope {
    pub data_market: Address,
    pub protocol_state: Address,
}

/// The submission's request when its form is right, else why not: a request
/// is present, the slot id is positive, `snapshotCid` is a CID in its one
/// spelling (`crate::cid::check_canonical`), `projectId`
/// is `type:namespace` or `type:source:namespace`, and `dataMarket` and
/// `protocolState` are the scope's own.
pub fn check_form<'a>(s: &'a SnapshotSubmission, scope: &Scope) -> Result<&'a Request, String> {
    let r = s.request.as_ref().ok_or("the submission has no request")?;
    check_lengths(s)?;
    if r.slot_id == 0 {
        return Err("slot id 0: slots are numbered from 1".into());
    }
    if let Err(why) = crate::cid::check_canonical(&r.snapshot_cid) {
        return Err(format!("snapshotCid `{}` is {why}", clip(&r.snapshot_cid)));
    }
    if !project_id_is_well_formed(&r.project_id) {
        return Err(format!(
            "projectId `{}` is not `type:source:namespace` (or `type:namespace`)",
            clip(&r.project_id)
        ));
    }
    let same = |what: &str, given: &str, ours: Address| match given.parse::<Address>() {
        Ok(a) if a == ours => Ok(()),
        Ok(a) => Err(format!("{what} {a} is not this collector's ({ours})")),
        Err(_) => Err(format!("{what} `{}` is not an address", clip(given))),
    };
    same("dataMarket", &s.data_market, scope.data_market)?;
    same("protocolState", &s.protocol_state, scope.protocol_state)?;
    Ok(r)
}

/// The longest field a submission may carry, in bytes: enough for every
/// honest value with room to spare, so that what a validator stores and
/// relays per submission is bounded whoever sends it.
pub mod caps {
    /// `projectId`: a type, up to four pool addresses and a namespace.
    pub const PROJECT_ID: usize = 256;
    /// `snapshotCid` (a CIDv1 of SHA-256 in base32 is 59).
    pub const CID: usize = 100;
    /// `signature`: 65 bytes in hex, with `0x`.
    pub const SIGNATURE: usize = 132;
    /// `header`, `nodeVersion`.
    pub const HEADER: usize = 256;
    pub const NODE_VERSION: usize = 64;
    /// `dataMarket`, `protocolState`: an address with `0x`.
    pub const ADDRESS: usize = 42;
    /// The snapshot a submission carries, by default
    /// ([`super::SnapshotRule`]): many times a pool's BDS snapshot, and a
    /// whole submission still within one gossip frame (64 KiB).
    pub const SNAPSHOT: usize = 48 * 1024;
    /// A whole encoded submission: every field at its cap, the snapshot
    /// included, with room for the protobuf framing. A gRPC message larger
    /// than this is refused before it is decoded.
    pub const MESSAGE: usize = 2048 + SNAPSHOT;
}

/// What a market asks of the snapshot a submission carries (its bytes,
/// whose CID the request signs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotRule {
    /// Every submission must carry its snapshot (`missing_bytes` if not);
    /// otherwise one that does not is judged by its CID alone.
    pub required: bool,
    /// The largest snapshot taken (`too_large` past it).
    pub max_bytes: usize,
}

impl Default for SnapshotRule {
    /// Not required (nodes that do not send it stay valid), at most
    /// [`caps::SNAPSHOT`].
    fn default() -> Self {
        Self { required: false, max_bytes: caps::SNAPSHOT }
    }
}

/// The snapshot `s` carries, checked by `rule` before anything of it is
/// stored or relayed: present if required, within the size, hashing to the
/// request's CID, and canonical JSON (§4). Cheapest first: the size, one
/// SHA-256, then the parse.
pub fn check_snapshot(s: &SnapshotSubmission, rule: SnapshotRule) -> Result<(), Rejection> {
    let Some(bytes) = &s.snapshot else {
        return if rule.required {
            Err(Rejection::new(Reason::MissingBytes, "this market requires each submission to carry its snapshot"))
        } else {
            Ok(())
        };
    };
    if bytes.len() > rule.max_bytes {
        let why = format!("the snapshot is {} bytes, more than the {} this market takes", bytes.len(), rule.max_bytes);
        return Err(Rejection::new(Reason::TooLarge, why));
    }
    let cid = s.request.as_ref().map_or("", |r| r.snapshot_cid.as_str());
    let hashed = crate::cid::cid(bytes);
    if hashed != cid {
        let why = format!("the snapshot's CID is {hashed}, the request signs `{}`", clip(cid));
        return Err(Rejection::new(Reason::BytesDoNotMatchCid, why));
    }
    // Bytes that hash to a CID already found canonical are those bytes: the
    // parse is done once per snapshot, not once per vote that carries it.
    if CANONICAL.known(&hashed) {
        return Ok(());
    }
    let canonical = std::str::from_utf8(bytes)
        .map_err(|_| "it is not UTF-8".to_owned())
        .and_then(crate::canonical_json::is_canonical)
        .and_then(|c| if c { Ok(()) } else { Err("it is JSON, not in its canonical form".to_owned()) });
    canonical
        .map(|()| CANONICAL.insert(hashed))
        .map_err(|why| Rejection::new(Reason::NotCanonicalJson, format!("the snapshot is not canonical JSON: {why}")))
}

/// CIDs whose bytes were found canonical JSON, the newest
/// [`CanonicalCids::GENERATION`] to twice that (two generations: the older
/// dropped whole when the newer fills).
static CANONICAL: std::sync::LazyLock<CanonicalCids> = std::sync::LazyLock::new(CanonicalCids::default);

#[derive(Default)]
struct CanonicalCids {
    sets: std::sync::Mutex<(std::collections::HashSet<String>, std::collections::HashSet<String>)>,
}

impl CanonicalCids {
    const GENERATION: usize = 32_768;

    fn known(&self, cid: &str) -> bool {
        let sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        sets.0.contains(cid) || sets.1.contains(cid)
    }

    fn insert(&self, cid: String) {
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        if sets.0.len() >= Self::GENERATION {
            sets.1 = std::mem::take(&mut sets.0);
        }
        sets.0.insert(cid);
    }
}

/// Every field within its cap ([`caps`]); `Err` names the first that is not.
pub fn check_lengths(s: &SnapshotSubmission) -> Result<(), String> {
    let r = s.request.as_ref();
    let fields = [
        ("projectId", r.map_or(0, |r| r.project_id.len()), caps::PROJECT_ID),
        ("snapshotCid", r.map_or(0, |r| r.snapshot_cid.len()), caps::CID),
        ("signature", s.signature.len(), caps::SIGNATURE),
        ("header", s.header.len(), caps::HEADER),
        ("nodeVersion", s.node_version.as_ref().map_or(0, String::len), caps::NODE_VERSION),
        ("dataMarket", s.data_market.len(), caps::ADDRESS),
        ("protocolState", s.protocol_state.len(), caps::ADDRESS),
    ];
    for (name, len, cap) in fields {
        if len > cap {
            return Err(format!("{name} is {len} bytes, more than the {cap} a submission may carry"));
        }
    }
    Ok(())
}

/// Two or three non-empty parts separated by `:`, no white space.
pub fn project_id_is_well_formed(id: &str) -> bool {
    let parts: Vec<&str> = id.split(':').collect();
    (2..=3).contains(&parts.len())
        && parts.iter().all(|p| !p.is_empty() && !p.chars().any(|c| c.is_whitespace() || c.is_control()))
}

/// Untrusted text, shortened for a message.
fn clip(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DM: &str = "0x0000000000000000000000000000000000000001";
    const PS: &str = "0x0000000000000000000000000000000000000002";

    fn scope() -> Scope {
        Scope { data_market: DM.parse().unwrap(), protocol_state: PS.parse().unwrap() }
    }

    fn good() -> SnapshotSubmission {
        SnapshotSubmission {
            request: Some(Request {
                slot_id: 1,
                deadline: 10,
                snapshot_cid: "bafkreicecnx2gvntm6fbcrvnc336qze6st5u7qq7457igegamd3bzkx7ri".into(),
                epoch_id: 3,
                project_id: "baseSnapshot:0xaa:devnet-UNISWAPV3-ETH".into(),
            }),
            signature: String::new(),
            header: String::new(),
            data_market: DM.into(),
            node_version: None,
            protocol_state: PS.into(),
            snapshot: None,
        }
    }

    #[test]
    fn a_good_form_passes_and_each_bad_field_is_named() {
        assert!(check_form(&good(), &scope()).is_ok());
        let bad = |edit: fn(&mut SnapshotSubmission), reason: &str| {
            let mut s = good();
            edit(&mut s);
            let err = check_form(&s, &scope()).unwrap_err();
            assert!(err.contains(reason), "{err}");
        };
        bad(|s| s.request = None, "no request");
        bad(|s| s.request.as_mut().unwrap().slot_id = 0, "slot id 0");
        bad(|s| s.request.as_mut().unwrap().snapshot_cid = "not-a-cid".into(), "`not-a-cid` is not a CID");
        bad(|s| s.request.as_mut().unwrap().project_id = "justone".into(), "projectId `justone`");
        bad(|s| s.request.as_mut().unwrap().project_id = "a:b:c:d".into(), "is not `type:source:namespace`");
        bad(|s| s.request.as_mut().unwrap().project_id = "a: b:c".into(), "is not `type:source:namespace`");
        bad(|s| s.data_market = "0x0000000000000000000000000000000000000009".into(), "dataMarket 0x");
        bad(|s| s.protocol_state = "nope".into(), "protocolState `nope` is not an address");
        assert!(project_id_is_well_formed("blockDetails:devnet-UNISWAPV3-ETH"), "no data source");
    }

    #[test]
    fn every_field_is_capped_and_the_cap_is_named() {
        let mut s = good();
        s.request.as_mut().unwrap().project_id = format!("a:{}:b", "x".repeat(caps::PROJECT_ID));
        let err = check_form(&s, &scope()).unwrap_err();
        assert!(err.starts_with("projectId is 26"), "{err}");
        let mut s = good();
        s.header = "h".repeat(caps::HEADER + 1);
        assert!(check_form(&s, &scope()).unwrap_err().contains("header is 257 bytes"));
        // A submission with every field at its cap fits the message cap.
        let mut s = good();
        let r = s.request.as_mut().unwrap();
        (r.project_id, r.snapshot_cid) = ("p".repeat(caps::PROJECT_ID), "c".repeat(caps::CID));
        (s.signature, s.header) = ("s".repeat(caps::SIGNATURE), "h".repeat(caps::HEADER));
        s.node_version = Some("v".repeat(caps::NODE_VERSION));
        (r.slot_id, r.deadline, r.epoch_id) = (u64::MAX, u64::MAX, u64::MAX);
        assert!(prost::Message::encoded_len(&s) <= caps::MESSAGE, "{}", prost::Message::encoded_len(&s));
    }

    #[test]
    fn a_market_defines_its_namespace_its_types_and_pool_sources() {
        let market = Projects::new("devnet-UNISWAPV3-ETH", ["baseSnapshot", "blockDetails"]);
        let pool = "0x00000000000000000000000000000000000000aa";
        assert_eq!(market.check(&format!("baseSnapshot:{pool}:devnet-UNISWAPV3-ETH")), Ok(()));
        assert_eq!(market.check("blockDetails:devnet-UNISWAPV3-ETH"), Ok(()));
        for (bad, says) in [
            ("spam:1:devnet-UNISWAPV3-ETH", "project type `spam`"),
            ("blockDetails:mainnet-UNISWAPV3-ETH", "namespace `mainnet-UNISWAPV3-ETH`"),
            ("baseSnapshot:spam7:devnet-UNISWAPV3-ETH", "data source `spam7` is not one pool"),
            // One pool a project: `a_b` would let a slot selected for `a`
            // make up projects of its own.
            (
                "baseSnapshot:0x00000000000000000000000000000000000000aa_0x00000000000000000000000000000000000000bb:devnet-UNISWAPV3-ETH",
                "is not one pool address",
            ),
            ("baseSnapshot:0x00000000000000000000000000000000000000AA:devnet-UNISWAPV3-ETH", "is not one pool"),
        ] {
            let err = market.check(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    /// A type that declares `per_pool` takes only its form: a slot cannot
    /// add `baseSnapshot` without a pool, or `blockDetails` once per pool,
    /// as projects of their own (issue 53, finding 8). Undeclared, both.
    #[test]
    fn a_type_declared_per_pool_or_not_takes_only_that_form() {
        let ns = "devnet-UNISWAPV3-ETH";
        let pool = "0x00000000000000000000000000000000000000aa";
        let declared = [("baseSnapshot".to_owned(), Some(true)), ("blockDetails".to_owned(), Some(false))];
        let market = Projects::declared(ns, declared);
        assert_eq!(market.check(&format!("baseSnapshot:{pool}:{ns}")), Ok(()));
        assert_eq!(market.check(&format!("blockDetails:{ns}")), Ok(()));
        let err = market.check(&format!("baseSnapshot:{ns}")).unwrap_err();
        assert!(err.contains("one per pool") && err.contains("names a pool"), "{err}");
        let err = market.check(&format!("blockDetails:{pool}:{ns}")).unwrap_err();
        assert!(err.contains("has no pool") && err.contains(&format!("`blockDetails:{ns}`")), "{err}");
        let undeclared = Projects::declared(ns, [("baseSnapshot".to_owned(), None)]);
        assert_eq!(undeclared.check(&format!("baseSnapshot:{ns}")), Ok(()));
        assert_eq!(undeclared.check(&format!("baseSnapshot:{pool}:{ns}")), Ok(()));
    }

    /// The chain as the shared cases' setting describes it.
    struct SettingFacts(cases::Setting);

    impl Facts for SettingFacts {
        async fn epoch(&self, r: &Request) -> Result<EpochStanding, String> {
            Ok(if r.epoch_id == self.0.epoch_id {
                EpochStanding::Open { release_block: self.0.release_block }
            } else {
                EpochStanding::Unknown
            })
        }

        async fn head(&self) -> Result<u64, String> {
            Ok(self.0.head)
        }

        async fn signer(&self, slot_id: u64, _: Option<u64>) -> Result<Address, String> {
            let s = &self.0;
            let of = |key: &[u8; 32]| eip712::Signer::new(key, s.chain_id, s.scope.protocol_state).unwrap().address();
            Ok(if slot_id == s.slot_id {
                of(&s.key)
            } else if slot_id == s.unselected_slot_id {
                of(&s.unselected_key)
            } else {
                Address::ZERO
            })
        }

        async fn selection(&self, r: &Request) -> Result<Selection, String> {
            let (kind, rest) = self.0.project_id.split_once(':').unwrap();
            let (_, namespace) = rest.rsplit_once(':').unwrap();
            if let Err(why) = Projects::new(namespace, [kind]).check(&r.project_id) {
                return Ok(Selection::UnknownProject(why));
            }
            Ok(if r.slot_id != self.0.slot_id {
                Selection::NotSelected(format!("slot {} was not selected", r.slot_id))
            } else if r.project_id != self.0.project_id {
                Selection::WrongPool(format!("slot {} was assigned another pool", r.slot_id))
            } else {
                Selection::Selected
            })
        }
    }

    pub(crate) fn setting() -> cases::Setting {
        let key = |n: u8| {
            let mut k = [7u8; 32];
            k[31] = n;
            k
        };
        cases::Setting {
            scope: scope(),
            chain_id: 31337,
            epoch_id: 3,
            release_block: 100,
            head: 104,
            unknown_epoch_id: 999,
            slot_id: 1,
            key: key(1),
            project_id: "baseSnapshot:0x00000000000000000000000000000000000000aa:ns".into(),
            other_pool_project_id: "baseSnapshot:0x00000000000000000000000000000000000000bb:ns".into(),
            unselected_slot_id: 2,
            unselected_key: key(2),
            unregistered_slot_id: 9,
        }
    }

    /// Runs every shared case through `judge` (driven by a minimal executor:
    /// the table's facts never wait).
    #[test]
    fn every_shared_case_gets_its_reason_from_the_rules() {
        let setting = setting();
        let facts = SettingFacts(setting.clone());
        let domain = eip712::domain(setting.chain_id, setting.scope.protocol_state);
        let all = cases::cases();
        let reasons: std::collections::BTreeSet<Reason> = all.iter().filter_map(|c| c.expect).collect();
        for reason in Reason::ALL {
            // A disabled snapshotter is the validator's own: a collector
            // answering its nodes does not read the flag. Missing bytes
            // need a market that requires them (the table's does not).
            let shared = !matches!(
                reason,
                Reason::Malformed
                    | Reason::WindowClosed
                    | Reason::Duplicate
                    | Reason::Equivocation
                    | Reason::SnapshotterDisabled
                    | Reason::MissingBytes
            );
            assert_eq!(reasons.contains(reason), shared, "{reason}: the table covers every reason judge gives");
        }
        for case in all {
            let s = case.submission(&setting);
            let got = block_on(judge(&s, &setting.scope, &domain, &facts)).unwrap();
            let got = match got {
                Judgement::Accepted => None,
                Judgement::Rejected(r) => Some(r.reason),
                Judgement::Deferred => panic!("{}: deferred", case.name),
            };
            assert_eq!(got, case.expect, "{}", case.name);
        }
    }

    /// The good submission, its snapshotter disabled as of the release:
    /// refused for it, after the signer check.
    #[test]
    fn a_disabled_snapshotters_submission_is_refused_as_of_the_release() {
        struct Disabled(SettingFacts);
        impl Facts for Disabled {
            async fn epoch(&self, r: &Request) -> Result<EpochStanding, String> {
                self.0.epoch(r).await
            }
            async fn head(&self) -> Result<u64, String> {
                self.0.head().await
            }
            async fn signer(&self, slot_id: u64, at: Option<u64>) -> Result<Address, String> {
                self.0.signer(slot_id, at).await
            }
            async fn selection(&self, r: &Request) -> Result<Selection, String> {
                self.0.selection(r).await
            }
            async fn enabled(&self, _: Address, at: Option<u64>) -> Result<bool, String> {
                assert_eq!(at, Some(self.0.0.release_block), "as of the release");
                Ok(false)
            }
        }
        let setting = setting();
        let domain = eip712::domain(setting.chain_id, setting.scope.protocol_state);
        let good = &cases::cases()[0];
        assert_eq!(good.expect, None);
        let facts = Disabled(SettingFacts(setting.clone()));
        match block_on(judge(&good.submission(&setting), &setting.scope, &domain, &facts)).unwrap() {
            Judgement::Rejected(r) => assert_eq!(r.reason, Reason::SnapshotterDisabled, "{r}"),
            other => panic!("{other:?}"),
        }
    }

    /// Each way a carried snapshot can be wrong has its reason; a right one,
    /// or none where the market does not require it, passes.
    #[test]
    fn a_carried_snapshot_is_checked_for_presence_size_cid_and_canonical_form() {
        let with = |bytes: Option<&[u8]>, cid_of: &[u8]| {
            let mut s = good();
            s.request.as_mut().unwrap().snapshot_cid = crate::cid::cid(cid_of);
            s.snapshot = bytes.map(<[u8]>::to_vec);
            s
        };
        let reason = |s: &SnapshotSubmission, rule| check_snapshot(s, rule).err().map(|r| r.reason);
        let lenient = SnapshotRule::default();
        let strict = SnapshotRule { required: true, max_bytes: 64 };
        let canonical: &[u8] = br#"{"a":1,"b":[true,null]}"#;
        assert_eq!(reason(&with(Some(canonical), canonical), strict), None);
        assert_eq!(reason(&with(None, canonical), lenient), None, "not required: judged by its CID");
        assert_eq!(reason(&with(None, canonical), strict), Some(Reason::MissingBytes));
        assert_eq!(reason(&with(Some(canonical), b"other"), strict), Some(Reason::BytesDoNotMatchCid));
        let spaced: &[u8] = br#"{ "a": 1, "b": [true, null] }"#;
        assert_eq!(reason(&with(Some(spaced), spaced), strict), Some(Reason::NotCanonicalJson));
        let not_json: &[u8] = b"not json";
        assert_eq!(reason(&with(Some(not_json), not_json), strict), Some(Reason::NotCanonicalJson));
        let not_utf8: &[u8] = &[0xff, 0xfe];
        assert_eq!(reason(&with(Some(not_utf8), not_utf8), strict), Some(Reason::NotCanonicalJson));
        let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(100));
        assert_eq!(reason(&with(Some(big.as_bytes()), big.as_bytes()), strict), Some(Reason::TooLarge));
        assert_eq!(reason(&with(Some(big.as_bytes()), big.as_bytes()), lenient), None);
    }

    #[test]
    fn every_reason_parses_from_its_label() {
        for reason in Reason::ALL {
            assert_eq!(Reason::parse(reason.as_str()), Some(*reason));
        }
        assert_eq!(Reason::parse("nonsense"), None);
    }

    /// Polls a future that never waits on anything outside itself.
    fn block_on<T>(f: impl Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the table's facts answer at once"),
        }
    }

    #[test]
    fn only_the_gossip_form_is_relayed_and_a_respelled_copy_never_shares_its_id() {
        use prost::Message;
        let signer = eip712::Signer::new(&[7u8; 32], 31337, PS.parse().unwrap()).unwrap();
        let mut s = good();
        s.header = "from a node".into();
        s.node_version = Some("0.3.0".into());
        s.data_market = DM.to_ascii_uppercase().replacen("0X", "0x", 1);
        let mut sig = hex::decode(signer.sign(&eip712::Request::from(s.request.as_ref().unwrap())).unwrap()).unwrap();
        sig[64] -= 27;
        s.signature = format!("0x{}", hex::encode_upper(&sig));
        // As a node sent it: not the gossip form.
        assert!(!is_gossip_form(&s, &s.encode_to_vec()));
        let g = gossip_form(&s).unwrap();
        let payload = g.encode_to_vec();
        assert!(is_gossip_form(&g, &payload));
        // The check without a copy answers as the form re-encoded would,
        // for each respelling alone, with and without snapshot bytes.
        let by_definition = |v: &SnapshotSubmission, p: &[u8]| gossip_form(v).is_ok_and(|f| f.encode_to_vec() == p);
        let mut with_bytes = g.clone();
        with_bytes.snapshot = Some(br#"{"a":1}"#.to_vec());
        for base in [g.clone(), with_bytes] {
            let mut variants = vec![base.clone()];
            let mut v = base.clone();
            v.header = "h".into();
            variants.push(v);
            let mut v = base.clone();
            v.node_version = Some("1".into());
            variants.push(v);
            let mut v = base.clone();
            v.data_market = v.data_market.to_ascii_uppercase().replacen("0X", "0x", 1);
            variants.push(v);
            let mut v = base.clone();
            v.protocol_state = v.protocol_state.to_ascii_uppercase().replacen("0X", "0x", 1);
            variants.push(v);
            let mut v = base.clone();
            v.signature = v.signature.to_ascii_uppercase().replacen("0X", "0x", 1);
            variants.push(v);
            // (A payload is always what `v` was decoded from.)
            for v in &variants {
                let p = v.encode_to_vec();
                assert_eq!(is_gossip_form(v, &p), by_definition(v, &p), "{v:?}");
            }
        }
        assert_eq!((g.header.as_str(), g.node_version.as_deref()), ("", None));
        assert_eq!(gossip_form(&g).unwrap(), g, "the form of the form is itself");
        let id = gossip_message_id(&payload);
        // Respelled copies (a header, an upper-case signature): other ids,
        // and none of them is the gossip form.
        let mut reheaded = g.clone();
        reheaded.header = "x".repeat(caps::HEADER + 1);
        let mut upper = g.clone();
        upper.signature = g.signature.to_ascii_uppercase();
        for copy in [reheaded, upper] {
            let bytes = copy.encode_to_vec();
            assert_ne!(gossip_message_id(&bytes), id);
            assert!(!is_gossip_form(&copy, &bytes));
        }
        // Another request: another id.
        let mut other = g.clone();
        other.request.as_mut().unwrap().epoch_id = 4;
        assert_ne!(gossip_message_id(&other.encode_to_vec()), id);
        // The gossip form with an unknown field appended is not the gossip form.
        let mut padded = payload.clone();
        padded.extend_from_slice(&[0xf8, 0x01, 0x01]); // field 31, varint 1
        let decoded = SnapshotSubmission::decode(padded.as_slice()).unwrap();
        assert!(!is_gossip_form(&decoded, &padded));
        // A signature that is none: no gossip form.
        let mut unsigned = g.clone();
        unsigned.signature = "zz".into();
        assert!(gossip_form(&unsigned).is_err());
    }
}
