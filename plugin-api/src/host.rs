//! The services the runtime offers to a running processor.
//!
//! [`HostApi`] is the stable-ABI trait the runtime implements; [`Host`] is the
//! thin Rust-side wrapper compute authors call, with ordinary Rust types.

use abi_stable::{
    StableAbi, sabi_trait,
    sabi_trait::prelude::TD_Opaque,
    std_types::{ROption, RResult, RSlice, RStr, RString, RVec},
};

use crate::epoch::BlockDetail;

/// Which chain a JSON-RPC call goes to.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chain {
    /// The chain whose data is snapshotted (`SOURCE_RPC_URL`).
    Source,
    /// The chain holding the protocol contracts (`POWERLOOM_RPC_URL`).
    Anchor,
}

/// Severity of a message a plugin logs through the node.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// Something failed that the operator should see.
    Error,
    /// Something odd that did not stop the compute.
    Warn,
    /// Normal progress (shown at the node's default log level).
    Info,
    /// Detail for a compute author (`RUST_LOG=debug`).
    Debug,
    /// Finer detail still.
    Trace,
}

/// One call of a JSON-RPC batch.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct RpcCall {
    /// Method name, e.g. `eth_getLogs`.
    pub method: RString,
    /// The `params` array, as JSON text.
    pub params_json: RString,
}

/// Why a JSON-RPC call failed.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    /// The JSON-RPC error code when the node answered with an error object;
    /// none for transport failures and malformed answers.
    pub code: ROption<i64>,
    /// What went wrong, naming the endpoint's role (never its credentials).
    pub message: RString,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            ROption::RSome(code) => write!(f, "rpc error {code}: {}", self.message),
            ROption::RNone => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for RpcError {}

/// The last selection decision a compute reported.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectionReport {
    /// The epoch the decision was about.
    pub epoch_id: u64,
    /// Whether the slot works that epoch.
    pub was_selected: bool,
    /// The slot it was about.
    pub slot_id: u64,
    /// Seconds since the Unix epoch when it was reported.
    pub timestamp: u64,
}

/// Services the runtime implements for processors (stable ABI).
///
/// New methods are only ever added at the end, after the last prefix field.
#[sabi_trait]
pub trait HostApi: Sync {
    /// One JSON-RPC call; `Ok` carries the `result` member as JSON text.
    fn rpc(&self, chain: Chain, method: RStr<'_>, params_json: RStr<'_>) -> RResult<RString, RpcError>;

    /// A JSON-RPC batch; the outer error is a transport failure, the inner
    /// results are per call, in the order given.
    fn rpc_batch(
        &self,
        chain: Chain,
        calls: RSlice<'_, RpcCall>,
    ) -> RResult<RVec<RResult<RString, RpcError>>, RpcError>;

    /// Tells the SlotSelectionTracker whether this slot works this epoch.
    fn report_selection(&self, epoch_id: u64, was_selected: bool, slot_id: u64);

    /// The last decision reported to the tracker, if any.
    fn last_selection(&self) -> ROption<SelectionReport>;

    /// Preloaded details of the epoch's blocks, `begin..=end`, in order.
    fn block_details(&self) -> RVec<BlockDetail>;

    /// Writes a message into the node's log, attributed to the plugin.
    fn log(&self, level: LogLevel, message: RStr<'_>);

    /// `(epoch_id, cid)` the anchor chain finalized for `data_source` in
    /// this project in the five epochs before this one, as read at the
    /// epoch's release block, oldest first (docs/protocol.md §10).
    #[sabi(last_prefix_field)]
    fn previous_snapshots(&self, data_source: RStr<'_>) -> RResult<RVec<PreviousSnapshot>, RpcError>;
}

/// A snapshot the chain finalized for an earlier epoch of the same project
/// and data source.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct PreviousSnapshot {
    /// The epoch it was finalized for.
    pub epoch_id: u64,
    /// Its CID (CIDv1, raw codec, SHA-256, base32: `bafkrei…`).
    pub cid: RString,
}

/// The host as it crosses the boundary: a borrowed trait object.
pub type HostRef<'a> = HostApi_TO<'a, abi_stable::sabi_types::RRef<'a, ()>>;

/// Rust-side view of the host for compute authors.
pub struct Host<'a> {
    inner: HostRef<'a>,
}

impl<'a> Host<'a> {
    /// Wraps the boundary object; the runtime and tests call this.
    pub fn new(inner: HostRef<'a>) -> Self {
        Self { inner }
    }

    /// Builds a boundary object from any implementation borrowed for `'a`.
    pub fn to_ref<T: HostApi + 'a>(host: &'a T) -> HostRef<'a> {
        HostApi_TO::from_ptr(host, TD_Opaque)
    }

    /// One JSON-RPC call to `chain`; `params_json` is the `params` array as
    /// JSON text (`"[]"` for none).
    ///
    /// `Ok` is the answer's raw `result` member as JSON text: a string comes
    /// back quoted (`eth_chainId` → `"0x7a69"`), an object as an object; parse
    /// it with serde_json. An `Err` with a `code` is the node's JSON-RPC error
    /// object (a revert of `eth_call`, an unknown method: deterministic, the
    /// same on every retry); without a `code` the chain was not reached or
    /// answered garbage (every configured URL was tried, each for at most
    /// `LITE_NODE_RPC_TIMEOUT_SECS`, 15 s by default). A compute that fails
    /// after such a call is run again by the node, up to three more times.
    ///
    /// Pin reads to a block (a hex block number, never `latest`): the epoch's
    /// blocks are `epoch.begin..=epoch.end`, every node must compute the same
    /// bytes, and a node working many slots asks each pinned read once.
    pub fn rpc(&self, chain: Chain, method: &str, params_json: &str) -> Result<String, RpcError> {
        self.inner.rpc(chain, method.into(), params_json.into()).into_result().map(RString::into_string)
    }

    /// A JSON-RPC batch, one HTTP request: the answers come back in the
    /// order of `calls`, each as [`Host::rpc`] would return it. The outer
    /// error means the batch as a whole failed (transport, or an answer that
    /// does not match the calls).
    pub fn rpc_batch(&self, chain: Chain, calls: &[RpcCall]) -> Result<Vec<Result<String, RpcError>>, RpcError> {
        let out = self.inner.rpc_batch(chain, calls.into()).into_result()?;
        Ok(out.into_iter().map(|r| r.into_result().map(RString::into_string)).collect())
    }

    /// Tells the node's SlotSelectionTracker whether `slot_id` works
    /// `epoch_id`. Do this first, before any other work: the node counts an
    /// epoch as the slot's own work (and a failure as a missed snapshot) only
    /// once it knows the slot was selected, and a compute that returns no
    /// snapshots after reporting `true` is a failure. `slot_selection::decide`
    /// reports for you.
    pub fn report_selection(&self, epoch_id: u64, was_selected: bool, slot_id: u64) {
        self.inner.report_selection(epoch_id, was_selected, slot_id);
    }

    /// The last decision reported to this slot's tracker (by any compute of
    /// this slot, possibly an earlier epoch's), if any.
    pub fn last_selection(&self) -> Option<SelectionReport> {
        self.inner.last_selection().into_option()
    }

    /// The epoch's source-chain blocks `begin..=end` (number, hash,
    /// timestamp), in block order, fetched once per epoch by the node. Empty
    /// unless the project lists `"block_details"` in its `preload_tasks` in
    /// projects.json. The slot selection's seed is the hash of block
    /// `epoch.begin`, which is why a selecting processor needs this.
    pub fn block_details(&self) -> Vec<BlockDetail> {
        self.inner.block_details().into_vec()
    }

    /// Writes `message` into the node's log at `level`, attributed to the
    /// project. Never log secrets: operators share their logs.
    pub fn log(&self, level: LogLevel, message: &str) {
        self.inner.log(level, message.into());
    }

    /// `(epoch_id, cid)` the anchor chain finalized for `data_source` in
    /// this project (`maxSnapshotsCid`, status `FINALIZED`) in the five
    /// epochs before this one, oldest first, read at the anchor block that
    /// released this epoch ([`crate::EpochContext::anchor_block`]). The same
    /// on every node, whatever each computed or stored before; empty while
    /// the market finalizes nothing on chain. An `Err` is the anchor chain
    /// out of reach: fail the compute (the node runs it again) rather than
    /// leave the field out — a snapshot without it would differ from
    /// everyone else's.
    pub fn previous_snapshots(&self, data_source: &str) -> Result<Vec<(u64, String)>, RpcError> {
        let found = self.inner.previous_snapshots(data_source.into()).into_result()?;
        Ok(found.into_iter().map(|p| (p.epoch_id, p.cid.into_string())).collect())
    }

    /// [`Host::log`] at [`LogLevel::Info`].
    pub fn info(&self, message: &str) {
        self.log(LogLevel::Info, message);
    }

    /// [`Host::log`] at [`LogLevel::Warn`].
    pub fn warn(&self, message: &str) {
        self.log(LogLevel::Warn, message);
    }

    /// [`Host::log`] at [`LogLevel::Debug`].
    pub fn debug(&self, message: &str) {
        self.log(LogLevel::Debug, message);
    }
}

impl std::fmt::Debug for Host<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Host { .. }")
    }
}
