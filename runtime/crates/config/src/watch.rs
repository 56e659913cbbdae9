//! How a node follows the anchor and runs its computes (`WatchSettings`), and
//! when it counts itself stuck (`SafetySettings`).

use std::time::Duration;

use crate::{
    EnvSnapshot,
    env::{number, rpc_timeout},
};

/// How the node watches the anchor chain and runs computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSettings {
    /// `LITE_NODE_POLL_INTERVAL_MS` (default 500).
    pub poll_interval: Duration,
    /// Anchor blocks re-checked on every poll for reorgs (`LITE_NODE_CONFIRMATIONS`, default 12).
    pub confirmations: u64,
    /// An epoch released more than this many anchor blocks ago is past its
    /// submission deadline and counted as missed, not computed
    /// (`LITE_NODE_SUBMISSION_WINDOW_BLOCKS`, default 100).
    pub submission_window: u64,
    /// Where a node without a saved cursor starts (`LITE_NODE_START_BLOCK`;
    /// default: the anchor head at start).
    pub start_block: Option<u64>,
    /// `LITE_NODE_COMPUTE_TIMEOUT_SECS` (default 60).
    pub compute_timeout: Duration,
    /// `LITE_NODE_MAX_CONCURRENT_COMPUTES` (default 4).
    pub max_concurrent_computes: usize,
    /// Computes hung past their timeout at once (each holds a thread of the
    /// runtime's blocking pool, 512 threads) before the node exits for a
    /// restart (`LITE_NODE_MAX_HUNG_COMPUTES`, default 128; exit code 4). A
    /// hanging project is quarantined long before that.
    pub max_hung_computes: usize,
    /// Computes that may wait for a worker at once (`LITE_NODE_QUEUE_CAPACITY`,
    /// default 16384); past it the lowest in priority is dropped.
    pub queue_capacity: usize,
    /// An anchor head that has not moved for this long makes the node
    /// unhealthy (`LITE_NODE_ANCHOR_STALL_SECS`, default 120).
    pub anchor_stall_after: Duration,
    /// Epochs whose snapshots, journal lines and ledger entries are kept
    /// (`LITE_NODE_RETAIN_EPOCHS`, default 1000); older ones are pruned.
    pub retain_epochs: u64,
    /// Per JSON-RPC request (`LITE_NODE_RPC_TIMEOUT_SECS`, default 15).
    pub rpc_timeout: Duration,
    /// A submission's deadline is the anchor head plus this many blocks
    /// (`LITE_NODE_DEADLINE_BUFFER_BLOCKS`, default 30).
    pub deadline_buffer: u64,
    /// On a stop, how long the epoch in flight and running computes may take
    /// (`LITE_NODE_STOP_GRACE_SECS`, default 30).
    pub stop_grace: Duration,
    /// How often the node reads whether its slots are still registered to
    /// its signer (`LITE_NODE_SLOT_CHECK_SECS`, default 60).
    pub slot_check: Duration,
}

/// The most hung computes the node lets pile up: each keeps a thread of the
/// runtime's blocking pool (512), which file writes and the other computes
/// need too.
pub const MAX_HUNG_COMPUTES_LIMIT: u64 = 384;

impl WatchSettings {
    pub(crate) fn from_env(env: &EnvSnapshot, problems: &mut Vec<String>) -> Self {
        let rpc_timeout = rpc_timeout(env, problems);
        let hung = number(env, "LITE_NODE_MAX_HUNG_COMPUTES", 128, 1, problems);
        if hung > MAX_HUNG_COMPUTES_LIMIT {
            problems.push(format!(
                "LITE_NODE_MAX_HUNG_COMPUTES={hung} is more than {MAX_HUNG_COMPUTES_LIMIT}: each hung compute keeps one \
                 of the runtime's 512 blocking threads, which the other computes and file writes need too"
            ));
        }
        let mut number = |key: &str, default: u64, min: u64| number(env, key, default, min, problems);
        Self {
            poll_interval: Duration::from_millis(number("LITE_NODE_POLL_INTERVAL_MS", 500, 10)),
            confirmations: number("LITE_NODE_CONFIRMATIONS", 12, 0),
            submission_window: number("LITE_NODE_SUBMISSION_WINDOW_BLOCKS", 100, 1),
            start_block: env.get("LITE_NODE_START_BLOCK").map(|_| number("LITE_NODE_START_BLOCK", 0, 0)),
            compute_timeout: Duration::from_secs(number("LITE_NODE_COMPUTE_TIMEOUT_SECS", 60, 1)),
            max_concurrent_computes: number("LITE_NODE_MAX_CONCURRENT_COMPUTES", 4, 1) as usize,
            max_hung_computes: hung.min(MAX_HUNG_COMPUTES_LIMIT) as usize,
            queue_capacity: number("LITE_NODE_QUEUE_CAPACITY", 16_384, 1) as usize,
            anchor_stall_after: Duration::from_secs(number("LITE_NODE_ANCHOR_STALL_SECS", 120, 1)),
            retain_epochs: number("LITE_NODE_RETAIN_EPOCHS", 1000, 1),
            rpc_timeout,
            deadline_buffer: number("LITE_NODE_DEADLINE_BUFFER_BLOCKS", 30, 1),
            stop_grace: Duration::from_secs(number("LITE_NODE_STOP_GRACE_SECS", 30, 1)),
            slot_check: Duration::from_secs(number("LITE_NODE_SLOT_CHECK_SECS", 60, 1)),
        }
    }
}

/// The safety net's intervals (`LITE_NODE_SAFETY_CHECK_SECS`,
/// `LITE_NODE_STUCK_AFTER_SECS`, `LITE_NODE_STUCK_EXIT_AFTER_CHECKS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SafetySettings {
    pub check_every: Duration,
    pub stuck_after: Duration,
    pub exit_after: u32,
}

impl Default for SafetySettings {
    fn default() -> Self {
        Self { check_every: Duration::from_secs(120), stuck_after: Duration::from_secs(600), exit_after: 3 }
    }
}

pub(crate) fn safety_settings(env: &EnvSnapshot, problems: &mut Vec<String>) -> SafetySettings {
    let d = SafetySettings::default();
    let mut secs = |key: &str, default: Duration| match env.get(key).map(str::parse::<u64>) {
        None => default,
        Some(Ok(n)) if n > 0 => Duration::from_secs(n),
        Some(_) => {
            problems.push(format!("{key} must be a whole number of seconds above 0"));
            default
        }
    };
    let check_every = secs("LITE_NODE_SAFETY_CHECK_SECS", d.check_every);
    let stuck_after = secs("LITE_NODE_STUCK_AFTER_SECS", d.stuck_after);
    let exit_after = match env.get("LITE_NODE_STUCK_EXIT_AFTER_CHECKS").map(str::parse::<u32>) {
        None => d.exit_after,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            problems.push("LITE_NODE_STUCK_EXIT_AFTER_CHECKS must be a whole number above 0".into());
            d.exit_after
        }
    };
    SafetySettings { check_every, stuck_after, exit_after }
}
