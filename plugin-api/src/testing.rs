//! A stand-in host for compute authors' unit tests: link the compute crate as
//! an `rlib`, hand its processor a [`TestHost`], and check what it returned and
//! what it reported — no node, no chain.

use std::sync::Mutex;

use abi_stable::std_types::{ROption, RResult, RSlice, RStr, RString, RVec};

use crate::{
    epoch::BlockDetail,
    host::{Chain, Host, HostApi, LogLevel, PreviousSnapshot, RpcCall, RpcError, SelectionReport},
};

/// Answers JSON-RPC calls in tests: `(chain, method, params_json) -> result JSON`.
pub type RpcHandler = Box<dyn Fn(Chain, &str, &str) -> Result<String, RpcError> + Send + Sync>;

/// A host that serves fixed block details, answers RPC through an optional
/// handler, and records selection reports and log lines.
#[derive(Default)]
pub struct TestHost {
    /// What `block_details` answers.
    pub blocks: Vec<BlockDetail>,
    /// Answers `rpc` and `rpc_batch` (without one, every call fails).
    pub rpc: Option<RpcHandler>,
    /// Every `report_selection(epoch_id, was_selected, slot_id)`, in order.
    pub reports: Mutex<Vec<(u64, bool, u64)>>,
    /// Every logged line, in order.
    pub logs: Mutex<Vec<(LogLevel, String)>>,
    /// What `previous_snapshots` answers: `(data_source, epoch_id, cid)` —
    /// what the chain finalized, as a test sets it.
    pub previous: Vec<(String, u64, String)>,
}

impl std::fmt::Debug for TestHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestHost").field("blocks", &self.blocks.len()).finish_non_exhaustive()
    }
}

impl TestHost {
    /// A host serving `blocks` and nothing else.
    pub fn with_blocks(blocks: Vec<BlockDetail>) -> Self {
        Self { blocks, ..Self::default() }
    }

    /// The host as a processor receives it.
    pub fn host(&self) -> Host<'_> {
        Host::new(Host::to_ref(self))
    }

    /// The selection reports so far, `(epoch_id, was_selected, slot_id)`.
    pub fn reports(&self) -> Vec<(u64, bool, u64)> {
        self.reports.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn answer(&self, chain: Chain, method: &str, params: &str) -> Result<String, RpcError> {
        match &self.rpc {
            Some(handler) => handler(chain, method, params),
            None => Err(RpcError { code: ROption::RNone, message: "TestHost has no rpc handler".into() }),
        }
    }
}

impl HostApi for TestHost {
    fn rpc(&self, chain: Chain, method: RStr<'_>, params_json: RStr<'_>) -> RResult<RString, RpcError> {
        self.answer(chain, method.as_str(), params_json.as_str()).map(RString::from).into()
    }

    fn rpc_batch(
        &self,
        chain: Chain,
        calls: RSlice<'_, RpcCall>,
    ) -> RResult<RVec<RResult<RString, RpcError>>, RpcError> {
        RResult::ROk(
            calls
                .iter()
                .map(|c| self.answer(chain, c.method.as_str(), c.params_json.as_str()).map(RString::from).into())
                .collect(),
        )
    }

    fn report_selection(&self, epoch_id: u64, was_selected: bool, slot_id: u64) {
        self.reports.lock().unwrap_or_else(|p| p.into_inner()).push((epoch_id, was_selected, slot_id));
    }

    fn last_selection(&self) -> ROption<SelectionReport> {
        let reports = self.reports.lock().unwrap_or_else(|p| p.into_inner());
        reports
            .last()
            .map(|&(epoch_id, was_selected, slot_id)| SelectionReport { epoch_id, was_selected, slot_id, timestamp: 0 })
            .into()
    }

    fn block_details(&self) -> RVec<BlockDetail> {
        self.blocks.clone().into()
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        self.logs.lock().unwrap_or_else(|p| p.into_inner()).push((level, message.to_string()));
    }

    fn previous_snapshots(&self, data_source: RStr<'_>) -> RResult<RVec<PreviousSnapshot>, RpcError> {
        RResult::ROk(
            self.previous
                .iter()
                .filter(|(ds, _, _)| ds.as_str() == data_source.as_str())
                .map(|(_, epoch_id, cid)| PreviousSnapshot { epoch_id: *epoch_id, cid: cid.as_str().into() })
                .collect(),
        )
    }
}
