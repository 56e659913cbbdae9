//! Every Redis key the validator writes: [`Keys`], the builders the
//! components call, and [`SCHEMA`], the table of patterns, types and TTLs
//! that tests check what was written against.
//!
//! Every key but `processingSubmission:{sha1}` starts with `{protocol}:{market}:`
//! — the ProtocolState and data market addresses, lower-case hex with `0x` —
//! so two data markets share one Redis without meeting; the tables below
//! leave that prefix out. Every key expires by itself or is trimmed by its
//! writer, whichever components run, and no component looks for keys with
//! `SCAN`. In a pattern, a placeholder other than the last matches no `:`,
//! so the key audit files each key under one pattern.
//!
//! **Queues.** `{queue}` is `submissionQueue`, `finalizationQueue` or
//! `aggregationQueue`, each a reliable queue (`queue`): an item taken moves
//! onto its worker's own list until it is acknowledged, and a dead worker's
//! list goes back on the queue.
//!
//! | key | type | holds | writer → readers | lifetime |
//! |---|---|---|---|---|
//! | `submissionQueue` | list | admitted submissions (JSON, with the anchor head at receipt) | gateway → dequeuers | drained; the gateway refuses past `max_queue` |
//! | `finalizationQueue` | list | `{epochId}` when a window closes; `{epochId}:part:{i}:{n}:{size}` per part | monitor, finalizer → finalizer | drained |
//! | `aggregationQueue` | list | `{"epoch_id", "parts_completed"}` once every part is written | finalizer → aggregator | drained |
//! | `{queue}:held:{owner}` | list | what one worker process took and has not acknowledged | the worker → recovery | emptied by acknowledgement, give-back or recovery |
//! | `{queue}:holders` | set | the worker processes that hold or held items | takers → recovery, API | an owner leaves once recovery empties its list |
//! | `{queue}:mark:{sha1}` | string | the holder of one taken item (finalization and aggregation queues) | takers → operators | 5 min; deleted on acknowledgement |
//! | `processingSubmission:{sha1}` (no prefix) | string | the same mark for a submission, only with `Dequeuer::keeping_seed_records` | dequeuers → outside tools | 5 min; deleted on acknowledgement |
//! | `worker:{instanceId}` | string | a worker process's heartbeat (Unix seconds): while it lives, its lists are its own | dequeuer, finalizer, aggregator → recovery | 15 s, renewed every 5 s |
//!
//! **Per epoch.** The epoch's state lives 7 days from the window's opening;
//! the per-submission detail a day from its last write.
//!
//! | key | type | holds | writer → readers | lifetime |
//! |---|---|---|---|---|
//! | `epoch:{id}:state` | hash | release and source blocks, window times, `phase`, level-1 and on-chain status, `submissions_count`, `intake_since_at_close`, `onchain_*` | monitor (creates it), finalizer, aggregator, on-chain worker, tracker → all of them, API | 7 days |
//! | `epoch:{id}:window` | string | `open`, then `closed` | monitor → — | none while open; 1 h once closed |
//! | `epoch:{id}:processed` | set | ids of the accepted submissions | dequeuer → monitor, finalizer, tracker (its size) | 1 h after the window closes |
//! | `EpochProcessed({id})` | set | the same ids, kept longer | dequeuer → dequeuer (already judged?), API | a day |
//! | `epoch:{id}:votes` | zset | each slot's vote per project, `{projectId}\x1f{slotId}\x1f{cid}`, all of score 0 so a project's votes are one lexical range; an empty CID is a void vote (the slot equivocated) | dequeuer → dequeuer, finalizer, aggregator (recount), API | a day |
//! | `epoch:{id}:projects` | zset | the projects with a vote, score 0 (byte order) | dequeuer → finalizer (cuts the parts) | a day |
//! | `epoch:{id}:rejections` | hash | submission id → JSON record (slot, project, CID, reason, time) | dequeuer → dequeuer (already judged?), API | a day |
//! | `epoch:{id}:parts:total` | string | the parts the epoch was cut into; once it exists, a late accept is `window_closed` | finalizer → finalizer, dequeuer | 7 days |
//! | `epoch:{id}:parts:completed` | string | parts written so far | finalizer → finalizer | 7 days |
//! | `epoch:{id}:parts:ready` | string | `true` once every part is written | finalizer → — | 7 days |
//! | `batch:part:{epochId}:{partId}` | string | one part's tally, JSON | finalizer → aggregator | 2 h |
//! | `finalized:{epochId}` | string | the validator's level-1 batch, JSON (batch CID, root, projects), written once | aggregator → on-chain worker, tracker, API | 7 days |
//!
//! **Pipeline.** One key each, whose members or fields come and go.
//!
//! | key | type | holds | writer → readers | lifetime |
//! |---|---|---|---|---|
//! | `epochs:closing` | zset | epochs whose window is open, scored by the anchor block it closes at | monitor → monitor, gateway | a member leaves at the close |
//! | `epochs:active`, `ActiveEpochs` | set | epochs opened and not yet finalized (one set under two names; `ActiveEpochs` for outside readers) | monitor adds, aggregator removes → tracker, API | a member leaves when the batch is written |
//! | `epochs:pending` | hash | epoch → submissions queued without a verdict | gateway (+1), dequeuer (−1) → finalizer | a field goes at 0 |
//! | `anchor:head` | string | the anchor head the monitor last saw, never lowered | monitor → gateway, dequeuer, tracker, API | 120 s, renewed each head |
//! | `slots:generation` | string | a counter bumped on every `SlotRegistered` (the readers read `slots:changes` again) | monitor → dequeuer, gateway | one key |
//! | `slots:changes` | zset | `{slot}:{block}` for each `SlotRegistered` (a registration, reassignment or removal) or `FullNodeUpdated`, `{0x snapshotter}:{block}` for each `SnapshotterEnabled` (enabled or disabled), scored by its block | monitor → dequeuer, gateway (signers, and whether they are enabled, as of an epoch's release) | one key; one member a change |
//! | `slots:recorded` | hash | `from`, `to`: the anchor blocks `slots:changes` is complete for | monitor → dequeuer, gateway | one key |
//! | `monitor:cursor` | hash | `scanned_to`, `last_epoch`: how far the windows are written, only raised | monitor → monitor | one key |
//! | `monitor:rpcs` | string | JSON: each anchor RPC endpoint's head and lag as the monitor's client last probed them | monitor → API (`/health`) | 1 min, renewed each poll |
//! | `monitor:problem` | string | what is wrong with a monitor that still runs | monitor → API (`/health`) | 1 min, renewed while it lasts |
//! | `intake:since` | string | the anchor block since which the intake has listened without a break | gateway → monitor (copied into the state at the close) | 3 s, renewed every 100 ms; deleted at a break |
//! | `onchain:problem` | string | why this validator's attestations do not count (its key is not a validator of the market) | on-chain worker → API (`/health`) | 1 min, renewed while it lasts |
//! | `onchain:pending` | zset | epochs whose batch waits to be put on chain, scored by epoch id | aggregator → on-chain worker (removes when done) | the newest 1,024 |
//! | `onchain:lease` | string | the instance id of the one process acting on chain | on-chain worker → on-chain worker | 15 s, renewed |
//! | `outgoing:broadcast:batch` | list | `{"type": "finalized_batch", "data": …}` | aggregator → the validators' network | the newest 1,000 |
//! | `metrics:counters` | hash | `received`, `accepted`, `rejected:{reason}`, `gossip_unwanted:{why}`, `finalized`, `finalization_latency_ms_sum` | gateway, dequeuer, aggregator → tracker, API | a fixed set of fields |
//!
//! **Timelines and views.** A timeline is a zset scored by Unix seconds,
//! trimmed to a day ([`TIMELINE_RETENTION`]) by its writer as it adds.
//!
//! | key | type | holds | writer → readers | lifetime |
//! |---|---|---|---|---|
//! | `metrics:epochs:timeline` | zset | `open:{id}`, `close:{id}` | monitor → tracker | a day |
//! | `metrics:submissions:timeline` | zset | `received:{epoch}:{slot}:{project}:{ms}:{peer}` per queued submission | gateway → tracker | a day |
//! | `metrics:validations:timeline` | zset | accepted submission ids | dequeuer → tracker | a day |
//! | `metrics:batches:timeline` | zset | `local:{epochId}` per batch written | aggregator → tracker | a day |
//! | `metrics:validator:{validatorId}:batches` | zset | the epochs this validator finalized | aggregator → tracker | a day |
//! | `epochs:gaps` | zset | `{epochId}:missing_level1`, `:missing_onchain`, `:not_watched`, `:state_lost`, scored by when found | tracker, monitor → API | members dropped after 1 h; the key 24 h after its last write |
//! | `metrics:current_epoch` | string | the newest active epoch's phase and progress (JSON) | tracker → dashboards | 30 s |
//! | `dashboard:summary`, `stats:current` | string, hash | the dashboard summary, as JSON and field by field | tracker → dashboards | 60 s |
//! | `metrics:participation` | string | 24-hour participation (JSON) | tracker → dashboards | 300 s |
//! | `metrics:submissions:metadata:{entityId}` | string | one queued submission's metadata (JSON), only with `Admission::metadata` | gateway → outside tools | 24 h |
//! | `snapshot:{cid}` | string | the snapshot bytes a queued submission carried, checked against the CID (content-addressed: one key however many votes carry it) | gateway → what keeps finalized data | 24 h from the first |
//! | `processed:{sequencerId}:{submissionId}` | hash | one accepted submission's record (`sequencerId`: this validator's id), only with `keeping_seed_records` | dequeuer → outside tools | 1 h |

use std::time::Duration;

/// A Redis value type, as `TYPE key` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    String,
    List,
    Set,
    ZSet,
    Hash,
}

impl KeyType {
    /// The name `TYPE` answers.
    pub fn redis_name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::List => "list",
            Self::Set => "set",
            Self::ZSet => "zset",
            Self::Hash => "hash",
        }
    }
}

/// How long a key lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    /// No expiry (queues; timelines, trimmed by their writers).
    None,
    /// Set when written.
    Fixed(Duration),
    /// Set once the epoch's submission window closes.
    AfterWindowClose(Duration),
}

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// `processingSubmission:{id}`: a submission a dequeuer worker is on.
pub const PROCESSING_TTL: Duration = Duration::from_secs(5 * 60);
/// `epoch:{id}:state`.
pub const EPOCH_STATE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// `epoch:{id}:window` and `epoch:{id}:processed`, after the window closes.
pub const WINDOW_CLOSED_TTL: Duration = HOUR;
/// `batch:part:{epochId}:{partId}`.
pub const BATCH_PART_TTL: Duration = Duration::from_secs(2 * 3600);
/// `anchor:head`: a head older than this is no head (the monitor is gone).
pub const ANCHOR_HEAD_TTL: Duration = Duration::from_secs(120);
/// `monitor:problem`: renewed by the event monitor each round while it
/// lasts.
pub const MONITOR_PROBLEM_TTL: Duration = MINUTE;
/// `metrics:submissions:metadata:{entityId}` (written only with
/// `Admission::metadata`).
pub const SUBMISSION_METADATA_TTL: Duration = DAY;
/// What the timelines keep: each writer drops older entries as it adds one,
/// so they stay trimmed whichever components run.
pub const TIMELINE_RETENTION: Duration = DAY;
/// An epoch's per-submission detail: its votes (each slot's CID per
/// project, what a lost part is counted again from), its projects, the ids
/// in `EpochProcessed`, its rejection records.
pub const DETAIL_TTL: Duration = DAY;
/// `processed:{sequencerId}:{submissionId}`: the record of an accepted
/// submission, for tools outside the validator; what lasts of it is its
/// vote and its id in `EpochProcessed`.
pub const PROCESSED_TTL: Duration = HOUR;

/// One row of the key table: a pattern with `{placeholders}`.
#[derive(Clone, Copy, Debug)]
pub struct KeySpec {
    pub pattern: &'static str,
    pub kind: KeyType,
    pub ttl: Ttl,
}

const fn spec(pattern: &'static str, kind: KeyType, ttl: Ttl) -> KeySpec {
    KeySpec { pattern, kind, ttl }
}

/// The keys this validator writes, with their types and TTLs (the module's
/// documentation says what each holds and who reads it).
pub const SCHEMA: &[KeySpec] = &[
    spec("{protocol}:{market}:submissionQueue", KeyType::List, Ttl::None),
    // Each worker process's list of what it took and has not acknowledged
    // (so a crash loses no item), and the set of those workers, for
    // recovery.
    spec("{protocol}:{market}:submissionQueue:held:{owner}", KeyType::List, Ttl::None),
    spec("{protocol}:{market}:submissionQueue:holders", KeyType::Set, Ttl::None),
    spec("processingSubmission:{id}", KeyType::String, Ttl::Fixed(PROCESSING_TTL)),
    // A worker process's heartbeat; what a worker without one holds is
    // recovered at once, not after its marks' 5 minutes.
    spec("{protocol}:{market}:worker:{instanceId}", KeyType::String, Ttl::Fixed(crate::queue::HEARTBEAT_TTL)),
    // The per-epoch and per-submission keys below expire by themselves (an
    // accepted submission's record after an hour, its epoch's detail after a
    // day, its state after 7 days), so no component has to be running for
    // them to go.
    spec("{protocol}:{market}:processed:{sequencerId}:{submissionId}", KeyType::Hash, Ttl::Fixed(PROCESSED_TTL)),
    spec("{protocol}:{market}:epoch:{epochId}:processed", KeyType::Set, Ttl::AfterWindowClose(WINDOW_CLOSED_TTL)),
    spec("{protocol}:{market}:EpochProcessed({epochId})", KeyType::Set, Ttl::Fixed(DETAIL_TTL)),
    spec("{protocol}:{market}:epoch:{epochId}:window", KeyType::String, Ttl::AfterWindowClose(WINDOW_CLOSED_TTL)),
    spec("{protocol}:{market}:epoch:{epochId}:state", KeyType::Hash, Ttl::Fixed(EPOCH_STATE_TTL)),
    spec("{protocol}:{market}:finalizationQueue", KeyType::List, Ttl::None),
    // The finalizer's and the aggregator's queues are reliable too.
    spec("{protocol}:{market}:finalizationQueue:held:{owner}", KeyType::List, Ttl::None),
    spec("{protocol}:{market}:finalizationQueue:holders", KeyType::Set, Ttl::None),
    spec("{protocol}:{market}:finalizationQueue:mark:{id}", KeyType::String, Ttl::Fixed(PROCESSING_TTL)),
    spec("{protocol}:{market}:aggregationQueue:held:{owner}", KeyType::List, Ttl::None),
    spec("{protocol}:{market}:aggregationQueue:holders", KeyType::Set, Ttl::None),
    spec("{protocol}:{market}:aggregationQueue:mark:{id}", KeyType::String, Ttl::Fixed(PROCESSING_TTL)),
    // Each slot's vote per project in an epoch, as members
    // `{projectId}\x1f{slotId}\x1f{cid}` (an empty CID: the slot
    // equivocated, its vote is void) of one score, so a project's votes are
    // a range in byte order: the filter every dequeuer shares for duplicates
    // and equivocation, and what the finalizer's parts read.
    spec("{protocol}:{market}:epoch:{epochId}:votes", KeyType::ZSet, Ttl::Fixed(DETAIL_TTL)),
    // The epoch's projects with a vote, in byte order (what the finalizer's
    // parts are cut from).
    spec("{protocol}:{market}:epoch:{epochId}:projects", KeyType::ZSet, Ttl::Fixed(DETAIL_TTL)),
    // Each rejected submission with its reason, and the pipeline's counters
    // (received, accepted, rejected:{reason}) shared by every process.
    spec("{protocol}:{market}:epoch:{epochId}:rejections", KeyType::Hash, Ttl::Fixed(DETAIL_TTL)),
    spec("{protocol}:{market}:metrics:counters", KeyType::Hash, Ttl::None),
    // Per epoch, submissions the gateway queued that have no verdict yet; an
    // epoch is finalized once none is left (or its grace ran out).
    spec("{protocol}:{market}:epochs:pending", KeyType::Hash, Ttl::None),
    // The anchor head as the event monitor last saw it (the dequeuer
    // checks deadlines against it), and the epochs whose window is open, by
    // the anchor block it closes at.
    spec("{protocol}:{market}:anchor:head", KeyType::String, Ttl::Fixed(ANCHOR_HEAD_TTL)),
    spec("{protocol}:{market}:epochs:closing", KeyType::ZSet, Ttl::None),
    // Bumped by the event monitor on every `SlotRegistered`; a dequeuer that
    // sees it change forgets the signers it cached.
    spec("{protocol}:{market}:slots:generation", KeyType::String, Ttl::None),
    // Every `SlotRegistered` the monitor has seen, by block, and the blocks
    // that record is complete for: a slot's signer as of an epoch's release
    // block is known from them without a read per epoch (`signers.rs`).
    spec("{protocol}:{market}:slots:changes", KeyType::ZSet, Ttl::None),
    spec("{protocol}:{market}:slots:recorded", KeyType::Hash, Ttl::None),
    // How far the event monitors have handled the anchor chain
    // (`scanned_to`, `last_epoch`), kept beside what they wrote so that a
    // Redis that lost writes has lost this too: a monitor whose own cursor
    // is ahead reads those blocks again.
    spec("{protocol}:{market}:monitor:cursor", KeyType::Hash, Ttl::None),
    // What is wrong with an event monitor that still runs (its cursor file
    // cannot be saved), for `/health`.
    spec("{protocol}:{market}:monitor:problem", KeyType::String, Ttl::Fixed(MONITOR_PROBLEM_TTL)),
    // Each anchor RPC endpoint's freshness, for `/health`.
    spec("{protocol}:{market}:monitor:rpcs", KeyType::String, Ttl::Fixed(MONITOR_PROBLEM_TTL)),
    // Why the on-chain worker's attestations do not count (its key was
    // removed from the market's validators), for `/health`.
    spec("{protocol}:{market}:onchain:problem", KeyType::String, Ttl::Fixed(MONITOR_PROBLEM_TTL)),
    // Epochs whose level-1 batch waits to be submitted, attested or
    // finalized on chain (the newest 1,024); the lease of the one process
    // that acts on chain for this validator; and the anchor block since which
    // this validator's intake has been listening (none: it is not), so it
    // vouches only for epochs it watched whole.
    spec("{protocol}:{market}:onchain:pending", KeyType::ZSet, Ttl::None),
    spec("{protocol}:{market}:onchain:lease", KeyType::String, Ttl::Fixed(Duration::from_secs(15))),
    spec("{protocol}:{market}:intake:since", KeyType::String, Ttl::Fixed(crate::onchain::INTAKE_SINCE_TTL)),
    spec("{protocol}:{market}:batch:part:{epochId}:{partId}", KeyType::String, Ttl::Fixed(BATCH_PART_TTL)),
    spec("{protocol}:{market}:epoch:{epochId}:parts:completed", KeyType::String, Ttl::Fixed(EPOCH_STATE_TTL)),
    spec("{protocol}:{market}:epoch:{epochId}:parts:total", KeyType::String, Ttl::Fixed(EPOCH_STATE_TTL)),
    spec("{protocol}:{market}:epoch:{epochId}:parts:ready", KeyType::String, Ttl::Fixed(EPOCH_STATE_TTL)),
    spec("{protocol}:{market}:aggregationQueue", KeyType::List, Ttl::None),
    spec("{protocol}:{market}:finalized:{epochId}", KeyType::String, Ttl::Fixed(EPOCH_STATE_TTL)),
    spec("{protocol}:{market}:outgoing:broadcast:batch", KeyType::List, Ttl::None),
    spec("{protocol}:{market}:epochs:active", KeyType::Set, Ttl::None),
    spec("{protocol}:{market}:epochs:gaps", KeyType::ZSet, Ttl::Fixed(DAY)),
    // The same epochs as `epochs:active`, under the name tools outside the
    // validator read; namespaced like the rest, so two data markets on one
    // Redis stay apart.
    spec("{protocol}:{market}:ActiveEpochs", KeyType::Set, Ttl::None),
    spec("{protocol}:{market}:dashboard:summary", KeyType::String, Ttl::Fixed(MINUTE)),
    spec("{protocol}:{market}:stats:current", KeyType::Hash, Ttl::Fixed(MINUTE)),
    spec("{protocol}:{market}:metrics:participation", KeyType::String, Ttl::Fixed(Duration::from_secs(300))),
    spec("{protocol}:{market}:metrics:current_epoch", KeyType::String, Ttl::Fixed(Duration::from_secs(30))),
    spec("{protocol}:{market}:metrics:epochs:timeline", KeyType::ZSet, Ttl::None),
    spec("{protocol}:{market}:metrics:batches:timeline", KeyType::ZSet, Ttl::None),
    spec("{protocol}:{market}:metrics:submissions:timeline", KeyType::ZSet, Ttl::None),
    spec(
        "{protocol}:{market}:metrics:submissions:metadata:{entityId}",
        KeyType::String,
        Ttl::Fixed(SUBMISSION_METADATA_TTL),
    ),
    spec("{protocol}:{market}:snapshot:{cid}", KeyType::String, Ttl::Fixed(DETAIL_TTL)),
    spec("{protocol}:{market}:metrics:validations:timeline", KeyType::ZSet, Ttl::None),
    spec("{protocol}:{market}:metrics:validator:{validatorId}:batches", KeyType::ZSet, Ttl::None),
];

/// The spec a concrete key matches (placeholders match any text without a
/// `:`, or any text for the last one), if any.
pub fn spec_of(key: &str) -> Option<&'static KeySpec> {
    SCHEMA.iter().find(|s| matches(s.pattern, key))
}

fn matches(pattern: &str, key: &str) -> bool {
    let Some(open) = pattern.find('{') else { return pattern == key };
    let close = open + pattern[open..].find('}').expect("placeholders are closed");
    let (literal, rest) = (&pattern[..open], &pattern[close + 1..]);
    let Some(tail) = key.strip_prefix(literal) else { return false };
    if rest.is_empty() {
        return !tail.is_empty();
    }
    // The placeholder takes a run without `:` after which the rest matches.
    (1..=tail.len()).filter(|&n| tail.is_char_boundary(n)).any(|n| {
        let (value, after) = tail.split_at(n);
        !value.is_empty() && !value.contains(':') && matches(rest, after)
    })
}

/// The key names of one protocol and data market.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys of `protocol` and `market`, under the `{protocol}:{market}:`
    /// prefix (lower case).
    pub fn new(protocol: &str, market: &str) -> Self {
        Self { prefix: format!("{}:{}:", protocol.to_ascii_lowercase(), market.to_ascii_lowercase()) }
    }

    fn ns(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    pub fn submission_queue(&self) -> String {
        self.ns("submissionQueue")
    }

    pub fn processing_submission(id: &str) -> String {
        format!("processingSubmission:{id}")
    }

    pub fn worker(&self, instance_id: &str) -> String {
        self.ns(&format!("worker:{instance_id}"))
    }

    pub fn processed(&self, sequencer_id: &str, submission_id: &str) -> String {
        self.ns(&format!("processed:{sequencer_id}:{submission_id}"))
    }

    pub fn epoch_processed(&self, epoch_id: u64) -> String {
        self.ns(&format!("epoch:{epoch_id}:processed"))
    }

    /// `EpochProcessed({epochId})`: the epoch's accepted submission ids, as
    /// `epoch:{id}:processed` holds them, but kept a day.
    pub fn epoch_processed_set(&self, epoch_id: u64) -> String {
        self.ns(&format!("EpochProcessed({epoch_id})"))
    }

    pub fn epoch_window(&self, epoch_id: u64) -> String {
        self.ns(&format!("epoch:{epoch_id}:window"))
    }

    pub fn epoch_state(&self, epoch_id: u64) -> String {
        self.ns(&format!("epoch:{epoch_id}:state"))
    }

    pub fn finalization_queue(&self) -> String {
        self.ns("finalizationQueue")
    }

    pub fn aggregation_queue(&self) -> String {
        self.ns("aggregationQueue")
    }

    pub fn votes(&self, epoch_id: u64) -> String {
        self.ns(&format!("epoch:{epoch_id}:votes"))
    }

    pub fn epoch_projects(&self, epoch_id: u64) -> String {
        self.ns(&format!("epoch:{epoch_id}:projects"))
    }

    pub fn rejections(&self, epoch_id: u64) -> String {
        self.ns(&format!("epoch:{epoch_id}:rejections"))
    }

    pub fn counters(&self) -> String {
        self.ns("metrics:counters")
    }

    /// Per epoch, queued submissions without a verdict yet.
    pub fn pending(&self) -> String {
        self.ns("epochs:pending")
    }

    pub fn anchor_head(&self) -> String {
        self.ns("anchor:head")
    }

    pub fn slots_generation(&self) -> String {
        self.ns("slots:generation")
    }

    /// `{slot}:{block}` for each `SlotRegistered`, scored by block.
    pub fn slots_changes(&self) -> String {
        self.ns("slots:changes")
    }

    /// `from` and `to`: the anchor blocks [`Keys::slots_changes`] is complete for.
    pub fn slots_recorded(&self) -> String {
        self.ns("slots:recorded")
    }

    pub fn monitor_cursor(&self) -> String {
        self.ns("monitor:cursor")
    }

    /// JSON: each anchor RPC endpoint's head and lag.
    pub fn monitor_rpcs(&self) -> String {
        self.ns("monitor:rpcs")
    }

    pub fn monitor_problem(&self) -> String {
        self.ns("monitor:problem")
    }

    pub fn onchain_problem(&self) -> String {
        self.ns("onchain:problem")
    }

    pub fn epochs_closing(&self) -> String {
        self.ns("epochs:closing")
    }

    pub fn batch_part(&self, epoch_id: u64, part_id: u64) -> String {
        self.ns(&format!("batch:part:{epoch_id}:{part_id}"))
    }

    pub fn parts_completed(&self, epoch_id: u64) -> String {
        self.ns(&format!("epoch:{epoch_id}:parts:completed"))
    }

    pub fn parts_total(&self, epoch_id: u64) -> String {
        self.ns(&format!("epoch:{epoch_id}:parts:total"))
    }

    pub fn parts_ready(&self, epoch_id: u64) -> String {
        self.ns(&format!("epoch:{epoch_id}:parts:ready"))
    }

    pub fn onchain_pending(&self) -> String {
        self.ns("onchain:pending")
    }

    pub fn onchain_lease(&self) -> String {
        self.ns("onchain:lease")
    }

    pub fn intake_since(&self) -> String {
        self.ns("intake:since")
    }

    pub fn outgoing_batches(&self) -> String {
        self.ns("outgoing:broadcast:batch")
    }

    pub fn batches_timeline(&self) -> String {
        self.ns("metrics:batches:timeline")
    }

    pub fn validator_batches(&self, validator_id: &str) -> String {
        self.ns(&format!("metrics:validator:{validator_id}:batches"))
    }

    pub fn active_epochs(&self) -> String {
        self.ns("ActiveEpochs")
    }

    pub fn epochs_gaps(&self) -> String {
        self.ns("epochs:gaps")
    }

    pub fn dashboard_summary(&self) -> String {
        self.ns("dashboard:summary")
    }

    pub fn stats_current(&self) -> String {
        self.ns("stats:current")
    }

    pub fn participation(&self) -> String {
        self.ns("metrics:participation")
    }

    pub fn current_epoch(&self) -> String {
        self.ns("metrics:current_epoch")
    }

    pub fn finalized(&self, epoch_id: u64) -> String {
        self.ns(&format!("finalized:{epoch_id}"))
    }

    pub fn epochs_active(&self) -> String {
        self.ns("epochs:active")
    }

    pub fn epochs_timeline(&self) -> String {
        self.ns("metrics:epochs:timeline")
    }

    pub fn submissions_timeline(&self) -> String {
        self.ns("metrics:submissions:timeline")
    }

    /// The snapshot bytes a queued submission carried, by their CID.
    pub fn snapshot(&self, cid: &str) -> String {
        self.ns(&format!("snapshot:{cid}"))
    }

    pub fn submission_metadata(&self, entity_id: &str) -> String {
        self.ns(&format!("metrics:submissions:metadata:{entity_id}"))
    }

    pub fn validations_timeline(&self) -> String {
        self.ns("metrics:validations:timeline")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builder_names_a_key_of_the_schema_with_its_type() {
        let k = Keys::new("0xAbC", "0xDeF");
        let expect = [
            (k.submission_queue(), KeyType::List),
            (format!("{}:held:123-abc", k.submission_queue()), KeyType::List),
            (Keys::processing_submission("s-1"), KeyType::String),
            (k.processed("seq", "s-1"), KeyType::Hash),
            (k.epoch_processed(7), KeyType::Set),
            (k.epoch_processed_set(7), KeyType::Set),
            (k.epoch_window(7), KeyType::String),
            (k.epoch_state(7), KeyType::Hash),
            (k.finalization_queue(), KeyType::List),
            (k.finalized(7), KeyType::String),
            (k.epochs_active(), KeyType::Set),
            (k.epochs_timeline(), KeyType::ZSet),
            (k.submissions_timeline(), KeyType::ZSet),
            (k.validations_timeline(), KeyType::ZSet),
            (k.monitor_cursor(), KeyType::Hash),
        ];
        for (key, kind) in expect {
            let spec = spec_of(&key).unwrap_or_else(|| panic!("{key} is in no row of the schema"));
            assert_eq!(spec.kind, kind, "{key} ({})", spec.pattern);
        }
        assert_eq!(k.submission_queue(), "0xabc:0xdef:submissionQueue", "namespaced in lower case");
        assert_eq!(
            spec_of("0xabc:0xdef:epoch:7:window").unwrap().pattern,
            "{protocol}:{market}:epoch:{epochId}:window"
        );
        assert!(spec_of("0xabc:0xdef:somethingElse").is_none());
        assert!(spec_of("processingSubmission:").is_none(), "a placeholder is never empty");
        // A placeholder other than the last takes no `:`: a key with one
        // more part is not filed under a pattern with fewer.
        assert!(spec_of("0xabc:0xdef:epoch:7:extra:window").is_none());
        assert_eq!(
            spec_of("0xabc:0xdef:metrics:submissions:metadata:received:7:3:p:1:grpc").unwrap().pattern,
            "{protocol}:{market}:metrics:submissions:metadata:{entityId}",
            "the last placeholder takes the rest"
        );
    }
}
