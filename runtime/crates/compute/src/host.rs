//! The runtime's side of the plugin `HostApi`: what a running processor may
//! ask of the node. Processors run on blocking threads; anything here that
//! needs async I/O goes through an [`RpcEndpoint`], which owns that crossing.

use std::sync::{Arc, Mutex};

use abi_stable::std_types::{ROption, RResult, RSlice, RStr, RString, RVec};
use lite_node_plugin_api::{
    BlockDetail, Chain, HostApi, LogLevel, PreviousSnapshot, RpcCall, RpcError, SelectionReport,
};

pub use lite_node_chain::RpcEndpoint;

/// The SlotSelectionTracker: the last selection decision any compute
/// reported. A persistent tracker keeps it in a file (the reference's
/// `slot_selection_status` shape), so a restart still knows the last report.
/// A report is not written at once (a compute of a thousand slots would sync
/// a thousand files): the node saves what [`SelectionTracker::unsaved`]
/// gives with the epoch's books, in one batch.
#[derive(Debug, Default)]
pub struct SelectionTracker {
    last: Mutex<Option<SelectionReport>>,
    path: Option<std::path::PathBuf>,
    /// Reports made, and the number of them the file holds.
    reports: std::sync::atomic::AtomicU64,
    saved: std::sync::atomic::AtomicU64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SavedReport {
    epoch_id: u64,
    was_selected: bool,
    slot_id: u64,
    timestamp: u64,
}

impl SelectionTracker {
    /// A tracker saved at `path`, starting from what it holds.
    pub fn persistent(path: std::path::PathBuf) -> Self {
        let last = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<SavedReport>(&b).ok()).map(|r| {
            SelectionReport {
                epoch_id: r.epoch_id,
                was_selected: r.was_selected,
                slot_id: r.slot_id,
                timestamp: r.timestamp,
            }
        });
        Self { last: Mutex::new(last), path: Some(path), ..Self::default() }
    }

    pub fn report(&self, epoch_id: u64, was_selected: bool, slot_id: u64) {
        let timestamp = lite_node_core::time::now_secs();
        let report = SelectionReport { epoch_id, was_selected, slot_id, timestamp };
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        // Epochs may be worked side by side: the newest one's report stands.
        if (*last).is_some_and(|l| l.epoch_id > epoch_id) {
            return;
        }
        *last = Some(report);
        self.reports.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// What the file should hold and does not yet: its path, its text and a
    /// mark for [`SelectionTracker::saved`].
    pub fn unsaved(&self) -> Option<(std::path::PathBuf, String, u64)> {
        let path = self.path.as_ref()?;
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let mark = self.reports.load(std::sync::atomic::Ordering::SeqCst);
        if mark == self.saved.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        let r = (*last)?;
        let saved = SavedReport {
            epoch_id: r.epoch_id,
            was_selected: r.was_selected,
            slot_id: r.slot_id,
            timestamp: r.timestamp,
        };
        Some((path.clone(), serde_json::to_string(&saved).expect("plain data serializes"), mark))
    }

    /// What [`SelectionTracker::unsaved`] gave with `mark` is on disk.
    pub fn saved(&self, mark: u64) {
        self.saved.fetch_max(mark, std::sync::atomic::Ordering::SeqCst);
    }

    /// Writes the last report to the file now, if it is not there.
    pub fn save(&self) -> std::io::Result<()> {
        if let Some((path, text, mark)) = self.unsaved() {
            lite_node_core::atomic_file::write(&path, text.as_bytes())?;
            self.saved(mark);
        }
        Ok(())
    }

    pub fn last(&self) -> Option<SelectionReport> {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where a data market's finalized CIDs are read: its ProtocolState and
/// data market on the anchor chain, and the namespace that completes
/// project ids.
#[derive(Clone, Debug)]
pub struct FinalizedReads {
    pub protocol_state: alloy::primitives::Address,
    pub data_market: alloy::primitives::Address,
    pub namespace: String,
    /// A market that finalizes roots only (`pairsOnChain: false`): each
    /// epoch's root is read on chain (`epochBatch`) and its pairs from here,
    /// proved against it. `None`: the pairs are on chain (`maxSnapshotsCid`).
    pub pairs: Option<Arc<dyn PairsSource>>,
}

/// Where a market that finalizes roots only keeps each epoch's pairs (its
/// validators' APIs, `lite_node_chain::consumer::ApiPairs`).
pub trait PairsSource: Send + Sync + std::fmt::Debug {
    /// Epoch `epoch_id`'s (project id → CID), the whole set, proved against
    /// `root` (the one the chain finalized); `Err` when no server gave them.
    fn pairs(
        &self,
        epoch_id: u64,
        root: alloy::primitives::B256,
    ) -> Result<Arc<std::collections::HashMap<String, String>>, String>;
}

impl PairsSource for lite_node_chain::consumer::ApiPairs {
    fn pairs(
        &self,
        epoch_id: u64,
        root: alloy::primitives::B256,
    ) -> Result<Arc<std::collections::HashMap<String, String>>, String> {
        lite_node_chain::consumer::ApiPairs::pairs(self, epoch_id, root)
    }
}

impl FinalizedReads {
    /// Where a market's finalized CIDs are read: on chain, or — `pairs_from`
    /// given, a market that finalizes roots only — its roots on chain and
    /// its pairs from those APIs.
    pub fn new(
        protocol_state: alloy::primitives::Address,
        data_market: alloy::primitives::Address,
        namespace: String,
        pairs_from: Option<&[lite_node_core::url::Url]>,
        io: &lite_node_chain::IoRuntime,
    ) -> Self {
        let pairs = pairs_from.map(|urls| {
            let servers = urls.iter().map(|u| u.as_str().trim_end_matches('/').to_owned()).collect();
            Arc::new(lite_node_chain::consumer::ApiPairs::new(servers, protocol_state, data_market, io.clone()))
                as Arc<dyn PairsSource>
        });
        Self { protocol_state, data_market, namespace, pairs }
    }
}

/// What one compute call sees of the node.
pub struct RuntimeHost {
    /// Names the processor in log lines (`project_type`).
    pub project: String,
    pub source: Option<Arc<dyn RpcEndpoint>>,
    pub anchor: Option<Arc<dyn RpcEndpoint>>,
    pub tracker: Arc<SelectionTracker>,
    pub blocks: Vec<BlockDetail>,
    /// What this compute call itself reported, `(epoch_id, was_selected)`.
    pub reported: Mutex<Option<(u64, bool)>>,
    /// Where `previous_snapshots` reads what the chain finalized.
    pub finalized: Option<Arc<FinalizedReads>>,
    /// The epoch being computed: `previous_snapshots` answers earlier ones.
    pub epoch_id: u64,
    /// The anchor block that released it: `previous_snapshots` reads there.
    pub anchor_block: u64,
    /// Calls that failed without a JSON-RPC error: the chain was not reached
    /// or did not answer properly (a reason to compute again, unlike a revert).
    unreachable: std::sync::atomic::AtomicU32,
    /// `previous_snapshots` answers read ahead for a share's data sources
    /// ([`RuntimeHost::prefetch_finalized`]).
    prefetched: Mutex<std::collections::HashMap<String, Vec<PreviousSnapshot>>>,
}

/// The epochs whose finalized CIDs are read, and the calls that read them.
type FinalizedCalls = (std::ops::Range<u64>, Vec<RpcCall>);

/// Calls per JSON-RPC batch when a share's previous snapshots are read ahead.
const PREFETCH_BATCH: usize = 500;

impl RuntimeHost {
    /// A host for one compute call.
    pub fn new(
        project: impl Into<String>,
        source: Option<Arc<dyn RpcEndpoint>>,
        anchor: Option<Arc<dyn RpcEndpoint>>,
        tracker: Arc<SelectionTracker>,
        blocks: Vec<BlockDetail>,
    ) -> Self {
        Self {
            project: project.into(),
            source,
            anchor,
            tracker,
            blocks,
            reported: Mutex::new(None),
            finalized: None,
            epoch_id: 0,
            anchor_block: 0,
            unreachable: std::sync::atomic::AtomicU32::new(0),
            prefetched: Mutex::default(),
        }
    }

    /// How many of this call's chain requests failed without a JSON-RPC
    /// error code (timeouts, refused connections, garbled answers).
    pub fn unreachable_calls(&self) -> u32 {
        self.unreachable.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn counted<T>(&self, result: Result<T, RpcError>) -> Result<T, RpcError> {
        if let Err(RpcError { code: ROption::RNone, .. }) = &result {
            self.unreachable.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        result
    }

    /// What the chain finalized for `data_source` of this project in the
    /// epochs before this one (`lite_node_protocol::finalized`), read at the
    /// release block in one batch. A revert (a ProtocolState without the
    /// V2 batch flow) reads as nothing finalized, the same on every node;
    /// an unreachable anchor is an error, so the compute fails and runs
    /// again rather than submit bytes no other node writes.
    fn finalized_before(&self, data_source: &str) -> Result<Vec<PreviousSnapshot>, RpcError> {
        if let Some(known) = self.prefetched.lock().unwrap_or_else(|p| p.into_inner()).get(data_source) {
            return Ok(known.clone());
        }
        let Some((epochs, calls)) = self.finalized_calls(data_source)? else { return Ok(Vec::new()) };
        let answers = self.endpoint(Chain::Anchor).and_then(|e| self.counted(e.batch(&calls)))?;
        self.finalized_answers(data_source, epochs, answers)
    }

    /// Reads ahead, in batches of [`PREFETCH_BATCH`] calls, what the chain
    /// finalized before this epoch for each of `sources` (a full node's
    /// share: one round trip per batch instead of one per data source).
    /// What cannot be read here is read again, alone, when asked.
    pub fn prefetch_finalized(&self, sources: &[&str]) {
        let mut asked: Vec<(&str, FinalizedCalls)> = Vec::new();
        for source in sources {
            match self.finalized_calls(source) {
                Ok(Some(calls)) => asked.push((source, calls)),
                Ok(None) => {
                    self.prefetched.lock().unwrap_or_else(|p| p.into_inner()).insert((*source).to_owned(), Vec::new());
                }
                Err(_) => return,
            }
        }
        let Ok(endpoint) = self.endpoint(Chain::Anchor) else { return };
        let mut group: Vec<(&str, FinalizedCalls)> = Vec::new();
        let mut pending = asked.into_iter().peekable();
        while pending.peek().is_some() {
            let mut size = 0;
            while let Some(next) = pending.peek() {
                if size > 0 && size + next.1.1.len() > PREFETCH_BATCH {
                    break;
                }
                size += next.1.1.len();
                group.push(pending.next().expect("peeked"));
            }
            let calls: Vec<RpcCall> = group.iter().flat_map(|(_, (_, c))| c.iter().cloned()).collect();
            let Ok(mut answers) = endpoint.batch(&calls) else { return };
            let mut prefetched = self.prefetched.lock().unwrap_or_else(|p| p.into_inner());
            for (source, (epochs, calls)) in group.drain(..) {
                let mine: Vec<_> = answers.drain(..calls.len().min(answers.len())).collect();
                // Read as one source's own batch is: an unreached answer is
                // left for that source's own read (and counted there).
                if mine.len() == calls.len()
                    && !mine.iter().any(|a| matches!(a, Err(RpcError { code: ROption::RNone, .. })))
                    && let Ok(found) = self.finalized_answers(source, epochs, mine)
                {
                    prefetched.insert(source.to_owned(), found);
                }
            }
        }
    }

    /// The calls that read what the chain finalized for `data_source`
    /// before this epoch, with their epochs; `None` when there is nothing
    /// to read (no anchor configured, or no earlier epoch).
    fn finalized_calls(&self, data_source: &str) -> Result<Option<FinalizedCalls>, RpcError> {
        use lite_node_protocol::finalized;
        let refuse = |message: String| RpcError { code: ROption::RNone, message: message.into() };
        // A run without an anchor (`compute run` offline, tests) reads none.
        let Some(reads) = &self.finalized else { return Ok(None) };
        let epochs = finalized::previous_epochs(self.epoch_id);
        if epochs.is_empty() {
            return Ok(None);
        }
        if self.anchor_block == 0 {
            return Err(refuse(format!(
                "epoch {}: the anchor block that released it is not known, so what the chain finalized before it \
                 cannot be read the same way as other nodes read it",
                self.epoch_id
            )));
        }
        let project_id = lite_node_protocol::project_id(&self.project, data_source, &reads.namespace);
        if reads.pairs.is_some() {
            let calls = epochs
                .clone()
                .map(|e| RpcCall {
                    method: "eth_call".into(),
                    params_json: finalized::epoch_batch_params(
                        reads.protocol_state,
                        reads.data_market,
                        e,
                        self.anchor_block,
                    )
                    .to_string()
                    .into(),
                })
                .collect();
            return Ok(Some((epochs, calls)));
        }
        let calls: Vec<RpcCall> = epochs
            .clone()
            .map(|e| RpcCall {
                method: "eth_call".into(),
                params_json: finalized::max_snapshots_cid_params(
                    reads.protocol_state,
                    reads.data_market,
                    &project_id,
                    e,
                    self.anchor_block,
                )
                .to_string()
                .into(),
            })
            .collect();
        Ok(Some((epochs, calls)))
    }

    /// What the answers to [`RuntimeHost::finalized_calls`] say.
    fn finalized_answers(
        &self,
        data_source: &str,
        epochs: std::ops::Range<u64>,
        answers: Vec<Result<String, RpcError>>,
    ) -> Result<Vec<PreviousSnapshot>, RpcError> {
        use lite_node_protocol::finalized;
        let refuse = |message: String| RpcError { code: ROption::RNone, message: message.into() };
        let label = match &self.finalized {
            Some(reads) => lite_node_protocol::project_id(&self.project, data_source, &reads.namespace),
            None => data_source.to_owned(),
        };
        let source = self.finalized.as_ref().and_then(|r| r.pairs.as_ref());
        let mut found = Vec::new();
        for (epoch_id, answer) in epochs.zip(answers) {
            match self.counted(answer) {
                Ok(text) if source.is_some() => {
                    let root = finalized::finalized_root(&text)
                        .map_err(|e| refuse(format!("epoch {epoch_id} of {label}: {e}")))?;
                    let (Some(root), Some(source)) = (root, source) else { continue };
                    let pairs = source.pairs(epoch_id, root).map_err(|e| {
                        refuse(format!(
                            "epoch {epoch_id} of {label}: the chain finalized root {root}, and its pairs could \
                             not be read: {e}"
                        ))
                    })?;
                    found.extend(pairs.get(&label).map(|cid| PreviousSnapshot { epoch_id, cid: cid.as_str().into() }));
                }
                Ok(text) => {
                    let cid = finalized::finalized_cid(&text)
                        .map_err(|e| refuse(format!("epoch {epoch_id} of {label}: {e}")))?;
                    found.extend(cid.map(|cid| PreviousSnapshot { epoch_id, cid: cid.into() }));
                }
                // The chain answered with an error: no such function there.
                Err(RpcError { code: ROption::RSome(_), .. }) => return Ok(Vec::new()),
                Err(unreached) => return Err(unreached),
            }
        }
        Ok(found)
    }

    /// What this call reported to the tracker, if anything.
    pub fn reported(&self) -> Option<(u64, bool)> {
        *self.reported.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn endpoint(&self, chain: Chain) -> Result<&Arc<dyn RpcEndpoint>, RpcError> {
        let (endpoint, var) = match chain {
            Chain::Source => (&self.source, "SOURCE_RPC_URL"),
            Chain::Anchor => (&self.anchor, "POWERLOOM_RPC_URL"),
        };
        endpoint.as_ref().ok_or_else(|| RpcError {
            code: ROption::RNone,
            message: format!("no {chain:?} chain endpoint is configured ({var})").into(),
        })
    }
}

impl HostApi for RuntimeHost {
    fn rpc(&self, chain: Chain, method: RStr<'_>, params_json: RStr<'_>) -> RResult<RString, RpcError> {
        self.endpoint(chain)
            .and_then(|e| self.counted(e.call(method.as_str(), params_json.as_str())))
            .map(RString::from)
            .into()
    }

    fn rpc_batch(
        &self,
        chain: Chain,
        calls: RSlice<'_, RpcCall>,
    ) -> RResult<RVec<RResult<RString, RpcError>>, RpcError> {
        self.endpoint(chain)
            .and_then(|e| self.counted(e.batch(calls.as_slice())))
            // A call of the batch that failed without a JSON-RPC error (with
            // several slots: a shared read whose owner's batch failed) is
            // the chain out of reach too.
            .map(|results| results.into_iter().map(|r| self.counted(r)).collect::<Vec<_>>())
            .map(|results| results.into_iter().map(|r| r.map(RString::from).into()).collect())
            .into()
    }

    fn report_selection(&self, epoch_id: u64, was_selected: bool, slot_id: u64) {
        tracing::debug!(project = %self.project, epoch_id, was_selected, slot_id, "selection reported");
        self.tracker.report(epoch_id, was_selected, slot_id);
        *self.reported.lock().unwrap_or_else(|p| p.into_inner()) = Some((epoch_id, was_selected));
    }

    fn last_selection(&self) -> ROption<SelectionReport> {
        self.tracker.last().into()
    }

    fn block_details(&self) -> RVec<BlockDetail> {
        self.blocks.clone().into()
    }

    fn previous_snapshots(&self, data_source: RStr<'_>) -> RResult<RVec<PreviousSnapshot>, RpcError> {
        self.finalized_before(data_source.as_str()).map(RVec::from).into()
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        let (project, message) = (&self.project, message.as_str());
        match level {
            LogLevel::Error => tracing::error!(target: "compute", %project, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "compute", %project, "{message}"),
            LogLevel::Info => tracing::info!(target: "compute", %project, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "compute", %project, "{message}"),
            LogLevel::Trace => tracing::trace!(target: "compute", %project, "{message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SelectionTracker;

    /// A batch answered per call, one call unreached (as a slot sees a shared
    /// read whose owner's batch failed): the compute counts as having met an
    /// unreachable chain, so it is run again; a revert does not count.
    #[test]
    fn a_batch_call_that_did_not_reach_the_chain_counts_as_unreachable() {
        use abi_stable::std_types::ROption;
        use lite_node_plugin_api::{Chain, Host, RpcCall, RpcError};
        struct PerCall;
        impl super::RpcEndpoint for PerCall {
            fn call(&self, _: &str, _: &str) -> Result<String, RpcError> {
                Ok("0x1".into())
            }
            fn batch(&self, _: &[RpcCall]) -> Result<Vec<Result<String, RpcError>>, RpcError> {
                Ok(vec![
                    Ok("0x1".into()),
                    Err(RpcError { code: ROption::RSome(3), message: "execution reverted".into() }),
                    Err(RpcError { code: ROption::RNone, message: "timed out".into() }),
                ])
            }
        }
        let host = super::RuntimeHost::new("p", Some(std::sync::Arc::new(PerCall)), None, Default::default(), vec![]);
        let calls = [RpcCall { method: "eth_call".into(), params_json: "[]".into() }];
        let answers = Host::new(Host::to_ref(&host)).rpc_batch(Chain::Source, &calls).unwrap();
        assert_eq!(answers.len(), 3);
        assert_eq!(host.unreachable_calls(), 1);
    }

    /// A share's previous snapshots read ahead in one batch give what each
    /// data source's own read gives — finalized CIDs, nothing finalized, a
    /// revert read as nothing — and ask the anchor nothing more.
    #[test]
    fn previous_snapshots_read_ahead_for_a_share_equal_each_sources_own_read() {
        use abi_stable::std_types::ROption;
        use lite_node_plugin_api::{RpcCall, RpcError};
        use std::sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        };
        /// Answers `maxSnapshotsCid` by the project id inside the call: pool
        /// "a" has a CID for every epoch, "b" none, "c" reverts.
        struct Anchor(AtomicUsize);
        fn answer(call: &RpcCall) -> Result<String, RpcError> {
            use alloy::sol_types::SolCall;
            use lite_node_protocol::contracts::{maxSnapshotsCidCall, maxSnapshotsCidReturn};
            let params = call.params_json.as_str();
            if params.contains(&hex::encode("baseSnapshot:c")) {
                return Err(RpcError { code: ROption::RSome(3), message: "execution reverted".into() });
            }
            let cid = if params.contains(&hex::encode("baseSnapshot:a")) {
                lite_node_protocol::cid(params.as_bytes())
            } else {
                String::new()
            };
            let r = maxSnapshotsCidReturn { _0: cid, _1: 1 };
            Ok(format!("0x{}", hex::encode(maxSnapshotsCidCall::abi_encode_returns(&r))))
        }
        impl super::RpcEndpoint for Anchor {
            fn call(&self, _: &str, _: &str) -> Result<String, RpcError> {
                unreachable!("batched")
            }
            fn batch(&self, calls: &[RpcCall]) -> Result<Vec<Result<String, RpcError>>, RpcError> {
                self.0.fetch_add(1, Ordering::SeqCst);
                Ok(calls.iter().map(answer).collect())
            }
        }
        let host = |anchor: &Arc<Anchor>| {
            let mut host = super::RuntimeHost::new(
                "baseSnapshot",
                None,
                Some(anchor.clone() as Arc<dyn super::RpcEndpoint>),
                Default::default(),
                vec![],
            );
            host.finalized = Some(Arc::new(super::FinalizedReads {
                protocol_state: alloy::primitives::Address::repeat_byte(1),
                data_market: alloy::primitives::Address::repeat_byte(2),
                namespace: "devnet-UNISWAPV3-ETH".into(),
                pairs: None,
            }));
            (host.epoch_id, host.anchor_block) = (12, 500);
            host
        };
        let sources = ["a", "b", "c"];
        let alone = Arc::new(Anchor(AtomicUsize::new(0)));
        let own: Vec<_> =
            sources.iter().map(|s| host(&alone).finalized_before(s).map_err(|e| e.message.to_string())).collect();
        assert_eq!(alone.0.load(Ordering::SeqCst), 3, "one batch per source");
        let ahead = Arc::new(Anchor(AtomicUsize::new(0)));
        let shared = host(&ahead);
        shared.prefetch_finalized(&sources);
        assert_eq!(ahead.0.load(Ordering::SeqCst), 1, "one batch for the share");
        let read: Vec<_> =
            sources.iter().map(|s| shared.finalized_before(s).map_err(|e| e.message.to_string())).collect();
        assert_eq!(ahead.0.load(Ordering::SeqCst), 1, "nothing asked again");
        assert_eq!(read, own);
        assert!(!own[0].as_ref().unwrap().is_empty() && own[1].as_ref().unwrap().is_empty(), "{own:?}");
        assert_eq!(own[2].as_ref().unwrap(), &vec![], "a revert reads as nothing finalized");
    }

    #[test]
    fn a_persistent_tracker_keeps_the_last_report_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/slot_selection_status.json");
        let tracker = SelectionTracker::persistent(path.clone());
        assert_eq!(tracker.last(), None);
        tracker.report(41, true, 7);
        tracker.report(42, false, 7);
        assert!(!path.exists(), "not written at each report");
        tracker.save().unwrap();
        assert!(tracker.unsaved().is_none(), "saved");
        let again = SelectionTracker::persistent(path.clone());
        let last = again.last().expect("the report survived");
        assert_eq!((last.epoch_id, last.was_selected, last.slot_id), (42, false, 7));
        let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(saved["epoch_id"], 42);
        assert!(saved["timestamp"].as_u64().unwrap() > 1_700_000_000);
    }
}
