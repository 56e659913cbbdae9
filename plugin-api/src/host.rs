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
    Error,
    Warn,
    Info,
    Debug,
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
    pub epoch_id: u64,
    pub was_selected: bool,
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

    /// `(epoch_id, cid)` of the snapshots this node recently produced for
    /// `data_source` in this project, oldest first.
    #[sabi(last_prefix_field)]
    fn previous_snapshots(&self, data_source: RStr<'_>) -> RVec<PreviousSnapshot>;
}

/// A snapshot the node produced earlier for the same project and data source.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct PreviousSnapshot {
    pub epoch_id: u64,
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

    /// One JSON-RPC call; returns the `result` member as JSON text.
    pub fn rpc(&self, chain: Chain, method: &str, params_json: &str) -> Result<String, RpcError> {
        self.inner.rpc(chain, method.into(), params_json.into()).into_result().map(RString::into_string)
    }

    /// A JSON-RPC batch; the outer error is a transport failure.
    pub fn rpc_batch(&self, chain: Chain, calls: &[RpcCall]) -> Result<Vec<Result<String, RpcError>>, RpcError> {
        let out = self.inner.rpc_batch(chain, calls.into()).into_result()?;
        Ok(out.into_iter().map(|r| r.into_result().map(RString::into_string)).collect())
    }

    /// Reports the selection decision; do this before any other work.
    pub fn report_selection(&self, epoch_id: u64, was_selected: bool, slot_id: u64) {
        self.inner.report_selection(epoch_id, was_selected, slot_id);
    }

    /// The last decision reported to the tracker.
    pub fn last_selection(&self) -> Option<SelectionReport> {
        self.inner.last_selection().into_option()
    }

    /// Preloaded block details for the epoch, in block order.
    pub fn block_details(&self) -> Vec<BlockDetail> {
        self.inner.block_details().into_vec()
    }

    /// Logs through the node at the given level.
    pub fn log(&self, level: LogLevel, message: &str) {
        self.inner.log(level, message.into());
    }

    /// `(epoch_id, cid)` the node recently produced for `data_source`, oldest first.
    pub fn previous_snapshots(&self, data_source: &str) -> Vec<(u64, String)> {
        self.inner
            .previous_snapshots(data_source.into())
            .into_iter()
            .map(|p| (p.epoch_id, p.cid.into_string()))
            .collect()
    }

    pub fn info(&self, message: &str) {
        self.log(LogLevel::Info, message);
    }

    pub fn warn(&self, message: &str) {
        self.log(LogLevel::Warn, message);
    }

    pub fn debug(&self, message: &str) {
        self.log(LogLevel::Debug, message);
    }
}

impl std::fmt::Debug for Host<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Host { .. }")
    }
}
