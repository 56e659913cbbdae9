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
    /// Every round trip to a chain, in order: its chain and the methods it
    /// carried (one for `rpc`, each call's for `rpc_batch`).
    pub round_trips: Mutex<Vec<(Chain, Vec<String>)>>,
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

    /// The round trips so far: each one's methods, as
    /// `[["eth_call", "eth_call"], ["eth_getLogs"]]` for a batch of two
    /// calls and then one `eth_getLogs` (each one's chain is in the
    /// `round_trips` field).
    pub fn round_trips(&self) -> Vec<Vec<String>> {
        let trips = self.round_trips.lock().unwrap_or_else(|p| p.into_inner());
        trips.iter().map(|(_, methods)| methods.clone()).collect()
    }

    fn trip(&self, chain: Chain, methods: Vec<String>) {
        self.round_trips.lock().unwrap_or_else(|p| p.into_inner()).push((chain, methods));
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
        self.trip(chain, vec![method.to_string()]);
        self.answer(chain, method.as_str(), params_json.as_str()).map(RString::from).into()
    }

    fn rpc_batch(
        &self,
        chain: Chain,
        calls: RSlice<'_, RpcCall>,
    ) -> RResult<RVec<RResult<RString, RpcError>>, RpcError> {
        if !calls.is_empty() {
            self.trip(chain, calls.iter().map(|c| c.method.to_string()).collect());
        }
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

/// Checks that `processor` computes shares of its data sources byte for
/// byte as it computes them all, as a full node spreading them over workers
/// needs: asks [`ComputeProcessor::data_sources`] for `epoch`, computes them
/// all at once with [`ComputeProcessor::compute_share`], then again in
/// `parts` interleaved shares (source `i` in share `i mod parts`), each
/// share's sources in reverse order, and compares each source's snapshot.
/// Returns how many sources were checked (0 when the processor does not
/// divide its work).
///
/// ```ignore
/// let host = TestHost { rpc: Some(my_chain_stub()), ..TestHost::default() };
/// assert_eq!(check_shares(&processor, &epoch, &host, 3), Ok(5));
/// ```
pub fn check_shares(
    processor: &dyn crate::ComputeProcessor,
    epoch: &crate::EpochContext,
    host: &TestHost,
    parts: usize,
) -> Result<usize, String> {
    let host = host.host();
    let Some(sources) = processor.data_sources(epoch, &host)? else { return Ok(0) };
    let by_source = |share: &[String], snapshots: Vec<crate::Snapshot>| {
        let mut out = std::collections::BTreeMap::new();
        for s in snapshots {
            let source = s.data_source.into_string();
            if !share.iter().any(|x| x.eq_ignore_ascii_case(&source)) {
                return Err(format!("a share of {share:?} returned a snapshot of `{source}`, not in it"));
            }
            if out.insert(source.to_ascii_lowercase(), s.json.into_string()).is_some() {
                return Err(format!("a share returned `{source}` twice"));
            }
        }
        if out.len() != share.len() {
            return Err(format!("a share of {} sources returned {} snapshots", share.len(), out.len()));
        }
        Ok(out)
    };
    let whole = by_source(&sources, processor.compute_share(epoch, &host, &sources)?)?;
    let parts = parts.max(1);
    let mut pieced = std::collections::BTreeMap::new();
    for k in 0..parts {
        let mut share: Vec<String> = sources.iter().skip(k).step_by(parts).cloned().collect();
        share.reverse();
        if share.is_empty() {
            continue;
        }
        pieced.extend(by_source(&share, processor.compute_share(epoch, &host, &share)?)?);
    }
    for (source, json) in &whole {
        if pieced.get(source) != Some(json) {
            return Err(format!(
                "`{source}`: computed in a share of {parts} it differs from computed with all sources:\n  all:   \
                 {json}\n  share: {}",
                pieced.get(source).map_or("(missing)", String::as_str)
            ));
        }
    }
    Ok(whole.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ComputeProcessor, EpochContext, Snapshot};

    /// Snapshots each source; `leaky` also writes how many sources the call had.
    struct Sources {
        leaky: bool,
    }

    impl ComputeProcessor for Sources {
        fn compute(&self, _: &EpochContext, _: &Host<'_>) -> Result<Vec<Snapshot>, String> {
            Ok(vec![])
        }

        fn data_sources(&self, _: &EpochContext, _: &Host<'_>) -> Result<Option<Vec<String>>, String> {
            Ok(Some((0..5).map(|i| format!("s{i}")).collect()))
        }

        fn compute_share(&self, _: &EpochContext, _: &Host<'_>, sources: &[String]) -> Result<Vec<Snapshot>, String> {
            let n = if self.leaky { sources.len() } else { 0 };
            Ok(sources.iter().map(|s| Snapshot::new(s.as_str(), format!("{{\"s\":\"{s}\",\"n\":{n}}}"))).collect())
        }
    }

    #[test]
    fn check_shares_passes_a_processor_whose_bytes_do_not_depend_on_the_share_and_names_one_that_does() {
        let epoch = EpochContext::builder(1, 10, 10).build();
        let host = TestHost::default();
        assert_eq!(check_shares(&Sources { leaky: false }, &epoch, &host, 2), Ok(5));
        let err = check_shares(&Sources { leaky: true }, &epoch, &host, 2).unwrap_err();
        assert!(err.starts_with("`s0`: computed in a share of 2 it differs"), "{err}");
    }
}
