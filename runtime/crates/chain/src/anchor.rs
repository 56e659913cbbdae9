//! The anchor chain as the node reads it: ProtocolState's events for our data
//! market, the slot registry, and the total slot count.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256, Bytes, U256},
    sol_types::{SolCall, SolEvent},
};
use lite_node_plugin_api::RpcError;
use lite_node_protocol::{parse_quantity, to_quantity};
use serde_json::{Value, json};

use lite_node_protocol::contracts::{
    DayStartedEvent, EpochReleased, FullNodeUpdated, SlotRegistered, SnapshotBatchFinalized, SnapshotterEnabled,
    allSnapshottersCall, currentDayIdCall, getFullNodesCall, getTotalNodeCountCall, slotSnapshotterMappingCall,
};

use super::rpc::HttpRpc;

/// How long `getTotalNodeCount()` is trusted (docs/protocol.md §1).
const TOTAL_SLOTS_TTL: Duration = Duration::from_secs(30);

/// An event of our data market on ProtocolState, with where it was mined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnchorEvent {
    pub block_number: u64,
    pub block_hash: B256,
    pub log_index: u64,
    pub kind: EventKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    EpochReleased { epoch_id: u64, begin: u64, end: u64, timestamp: u64 },
    DayStarted { day_id: u64 },
}

/// A log as `eth_getLogs` answers it: the fields the node reads.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RpcLog {
    topics: Vec<B256>,
    data: Bytes,
    block_number: Option<String>,
    block_hash: Option<B256>,
    log_index: Option<String>,
    #[serde(default)]
    transaction_hash: Option<B256>,
    #[serde(default)]
    removed: bool,
}

/// An epoch's release: its source-chain blocks and the anchor block it was
/// released in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    pub begin: u64,
    pub end: u64,
    pub block_number: u64,
}

/// What the registry says about this node's slot and signer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub signer_enabled: bool,
    pub slot_owner: Address,
}

/// ProtocolState on the anchor chain, for one data market.
#[derive(Debug)]
pub struct Anchor {
    rpc: Arc<HttpRpc>,
    pub protocol_state: Address,
    pub data_market: Address,
    total_slots: Mutex<Option<(u64, Instant)>>,
    /// `getTotalNodeCount()` at the anchor blocks asked about.
    totals_at: Mutex<std::collections::BTreeMap<u64, u64>>,
}

fn bad_answer(what: &str, detail: impl std::fmt::Display) -> RpcError {
    RpcError { code: None.into(), message: format!("{what}: unexpected answer: {detail}").into() }
}

fn quantity(value: &Value, what: &str) -> Result<u64, RpcError> {
    lite_node_protocol::quantity(value).map_err(|e| bad_answer(what, e))
}

fn to_u64(v: U256, what: &str) -> Result<u64, String> {
    u64::try_from(v).map_err(|_| format!("{what} {v} does not fit in 64 bits"))
}

impl Anchor {
    pub fn new(rpc: HttpRpc, protocol_state: Address, data_market: Address) -> Self {
        Self::shared(Arc::new(rpc), protocol_state, data_market)
    }

    /// On endpoints others use too (the node's processors read the anchor
    /// through the same connections, one WebSocket for both).
    pub fn shared(rpc: Arc<HttpRpc>, protocol_state: Address, data_market: Address) -> Self {
        Self { rpc, protocol_state, data_market, total_slots: Mutex::new(None), totals_at: Default::default() }
    }

    pub fn rpc(&self) -> &HttpRpc {
        &self.rpc
    }

    /// The client itself, for others to share (a processor's anchor reads).
    pub fn shared_rpc(&self) -> Arc<HttpRpc> {
        self.rpc.clone()
    }

    pub async fn head(&self) -> Result<u64, RpcError> {
        quantity(&self.rpc.call_value("eth_blockNumber", json!([])).await?, "eth_blockNumber")
    }

    /// The contracts this anchor was given that have no code on the chain
    /// (`eth_getCode` is empty): `(--flag name, address)` for each.
    /// ProtocolState only: the data market is named by its address in
    /// ProtocolState's calls and events, whatever is deployed there.
    pub async fn contracts_without_code(&self) -> Result<Vec<(&'static str, Address)>, RpcError> {
        let mut missing = Vec::new();
        for (name, address) in [("protocol-state", self.protocol_state)] {
            let code = self.rpc.call_value("eth_getCode", json!([address, "latest"])).await?;
            let code = code.as_str().ok_or_else(|| bad_answer("eth_getCode", code.clone()))?;
            if code.trim_start_matches("0x").is_empty() {
                missing.push((name, address));
            }
        }
        Ok(missing)
    }

    /// `eth_chainId`: the chain id EIP-712 signatures are bound to.
    pub async fn chain_id(&self) -> Result<u64, RpcError> {
        quantity(&self.rpc.call_value("eth_chainId", json!([])).await?, "eth_chainId")
    }

    async fn call(&self, data: Vec<u8>, what: &str) -> Result<Bytes, RpcError> {
        self.call_at(data, what, json!("latest")).await
    }

    /// `eth_call` on ProtocolState at `block` (a tag or a quantity).
    async fn call_at(&self, data: Vec<u8>, what: &str, block: serde_json::Value) -> Result<Bytes, RpcError> {
        let params = json!([{"to": self.protocol_state, "data": Bytes::from(data)}, block]);
        let out = self.rpc.call_value("eth_call", params).await?;
        serde_json::from_value::<Bytes>(out.clone()).map_err(|_| bad_answer(what, out))
    }

    /// `allSnapshotters(signer)` and `slotSnapshotterMapping(slot)`.
    pub async fn identity(&self, signer: Address, slot_id: u64) -> Result<Identity, RpcError> {
        let enabled = self.call(allSnapshottersCall { snapshotter: signer }.abi_encode(), "allSnapshotters").await?;
        let signer_enabled =
            allSnapshottersCall::abi_decode_returns(&enabled).map_err(|e| bad_answer("allSnapshotters", e))?;
        Ok(Identity { signer_enabled, slot_owner: self.slot_owner(slot_id).await? })
    }

    /// `slotSnapshotterMapping(slot)`: the signer registered for a slot.
    pub async fn slot_owner(&self, slot_id: u64) -> Result<Address, RpcError> {
        self.slot_owner_as_of(slot_id, json!("latest")).await
    }

    /// `allSnapshotters(signer)` as of anchor block `block`: whether the
    /// signer was an enabled snapshotter then.
    pub async fn snapshotter_enabled_at(&self, signer: Address, block: u64) -> Result<bool, RpcError> {
        self.read(&allSnapshottersCall { snapshotter: signer }, Some(block)).await
    }

    /// `slotSnapshotterMapping(slot)` as of anchor block `block`: who signed
    /// for the slot then (an epoch released in that block is judged by it).
    pub async fn slot_owner_at(&self, slot_id: u64, block: u64) -> Result<Address, RpcError> {
        self.slot_owner_as_of(slot_id, json!(to_quantity(block))).await
    }

    async fn slot_owner_as_of(&self, slot_id: u64, block: serde_json::Value) -> Result<Address, RpcError> {
        let call = slotSnapshotterMappingCall { slotId: U256::from(slot_id) }.abi_encode();
        let owner = self.call_at(call, "slotSnapshotterMapping", block).await?;
        slotSnapshotterMappingCall::abi_decode_returns(&owner).map_err(|e| bad_answer("slotSnapshotterMapping", e))
    }

    /// `getTotalNodeCount()` as of anchor block `block`: the total an epoch
    /// released in that block is selected from, the same for every node and
    /// validator whenever they ask (docs/protocol.md §2). Kept for the newest
    /// few blocks asked about.
    pub async fn total_slots_at(&self, block: u64) -> Result<u64, RpcError> {
        if let Some(n) = self.totals_at.lock().unwrap_or_else(|p| p.into_inner()).get(&block) {
            return Ok(*n);
        }
        let out =
            self.call_at(getTotalNodeCountCall {}.abi_encode(), "getTotalNodeCount", json!(to_quantity(block))).await?;
        let n = getTotalNodeCountCall::abi_decode_returns(&out).map_err(|e| bad_answer("getTotalNodeCount", e))?;
        let n = to_u64(n, "total node count").map_err(|e| bad_answer("getTotalNodeCount", e))?;
        let mut totals = self.totals_at.lock().unwrap_or_else(|p| p.into_inner());
        totals.insert(block, n);
        while totals.len() > 64 {
            totals.pop_first();
        }
        Ok(n)
    }

    /// The data market's day as of anchor block `block` (`currentDayId`;
    /// 0 before its first `DayStartedEvent`).
    pub async fn day_at(&self, block: u64) -> Result<u64, RpcError> {
        let call = currentDayIdCall { dataMarketAddress: self.data_market };
        let out = self.call_at(call.abi_encode(), "currentDayId", json!(to_quantity(block))).await?;
        let day = currentDayIdCall::abi_decode_returns(&out).map_err(|e| bad_answer("currentDayId", e))?;
        to_u64(day, "day id").map_err(|e| bad_answer("currentDayId", e))
    }

    /// The data market's full-node slots at anchor block `block`, sorted
    /// (docs/protocol.md §13).
    pub async fn full_nodes_at(&self, block: u64) -> Result<Vec<u64>, RpcError> {
        let call = getFullNodesCall { dataMarketAddress: self.data_market };
        let out = self.call_at(call.abi_encode(), "getFullNodes", json!(to_quantity(block))).await?;
        let list = getFullNodesCall::abi_decode_returns(&out).map_err(|e| bad_answer("getFullNodes", e))?;
        let mut slots = list
            .into_iter()
            .map(|s| to_u64(s, "full-node slot").map_err(|e| bad_answer("getFullNodes", e)))
            .collect::<Result<Vec<_>, _>>()?;
        slots.sort_unstable();
        Ok(slots)
    }

    /// `getTotalNodeCount()`, cached for 30 s; when the call fails, the last
    /// known value (however old) is used and the failure logged.
    pub async fn total_slots(&self) -> Result<u64, RpcError> {
        let cached = *self.total_slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((n, at)) = cached
            && at.elapsed() < TOTAL_SLOTS_TTL
        {
            return Ok(n);
        }
        let fresh = async {
            let out = self.call(getTotalNodeCountCall {}.abi_encode(), "getTotalNodeCount").await?;
            let n = getTotalNodeCountCall::abi_decode_returns(&out).map_err(|e| bad_answer("getTotalNodeCount", e))?;
            to_u64(n, "total node count").map_err(|e| bad_answer("getTotalNodeCount", e))
        };
        match (fresh.await, cached) {
            (Ok(n), _) => {
                *self.total_slots.lock().unwrap_or_else(|p| p.into_inner()) = Some((n, Instant::now()));
                Ok(n)
            }
            (Err(e), Some((n, at))) => {
                tracing::warn!("getTotalNodeCount failed ({e}); using {n} from {}s ago", at.elapsed().as_secs());
                Ok(n)
            }
            (Err(e), None) => Err(e),
        }
    }

    /// Our data market's ProtocolState events in `from..=to`, in chain order.
    /// Logs that do not decode are logged and skipped.
    pub async fn events(&self, from: u64, to: u64) -> Result<Vec<AnchorEvent>, RpcError> {
        let market_topic = B256::left_padding_from(self.data_market.as_slice());
        let filter = json!([{
            "address": self.protocol_state,
            "fromBlock": to_quantity(from),
            "toBlock": to_quantity(to),
            "topics": [[EpochReleased::SIGNATURE_HASH, DayStartedEvent::SIGNATURE_HASH], market_topic],
        }]);
        let raw = self.rpc.call_value("eth_getLogs", filter).await?;
        let Value::Array(entries) = raw else { return Err(bad_answer("eth_getLogs", "not an array")) };
        let mut events = Vec::with_capacity(entries.len());
        for entry in entries {
            match self.decode(entry) {
                Ok(Some(event)) => events.push(event),
                Ok(None) => {}
                Err(reason) => tracing::warn!("skipping a malformed ProtocolState log: {reason}"),
            }
        }
        events.sort_by_key(|e| (e.block_number, e.log_index));
        Ok(events)
    }

    /// The slot registry's changes on ProtocolState in `from..=to`: slots
    /// (re)registered (`SlotRegistered`: a registration, a reassignment or a
    /// removal) or marked or unmarked a full node of a market
    /// (`FullNodeUpdated`: it changes the highest slot that can hold a
    /// signer), and snapshotters enabled or disabled (`SnapshotterEnabled`),
    /// each with the block it was mined in, in chain order. A log without
    /// its subject in its topics or without its block is skipped.
    pub async fn slot_registrations(&self, from: u64, to: u64) -> Result<Vec<(RegistryChange, u64)>, RpcError> {
        let filter = json!([{
            "address": self.protocol_state,
            "fromBlock": to_quantity(from),
            "toBlock": to_quantity(to),
            "topics": [[
                SlotRegistered::SIGNATURE_HASH,
                FullNodeUpdated::SIGNATURE_HASH,
                SnapshotterEnabled::SIGNATURE_HASH,
            ]],
        }]);
        let raw = self.rpc.call_value("eth_getLogs", filter).await?;
        let Value::Array(entries) = raw else { return Err(bad_answer("eth_getLogs", "not an array")) };
        let mut slots = Vec::new();
        for entry in entries {
            let Ok(log) = serde_json::from_value::<RpcLog>(entry) else { continue };
            if log.removed {
                continue;
            }
            let Some(Ok(block)) = log.block_number.as_deref().map(parse_quantity) else { continue };
            let topics = log.topics.iter().copied();
            if let Ok(e) = SnapshotterEnabled::decode_raw_log(topics.clone(), &log.data) {
                slots.push((RegistryChange::Snapshotter(e.snapshotter), block));
                continue;
            }
            let slot = match SlotRegistered::decode_raw_log(topics.clone(), &log.data) {
                Ok(e) => Some(e.slotId),
                Err(_) => FullNodeUpdated::decode_raw_log(topics, &log.data).ok().map(|e| e.slotId),
            };
            if let Some(Ok(slot)) = slot.map(|s| to_u64(s, "slot id")) {
                slots.push((RegistryChange::Slot(slot), block));
            }
        }
        slots.sort_by_key(|(_, block)| *block);
        Ok(slots)
    }

    /// A ProtocolState view `call` as of anchor block `block` (`None`: the
    /// latest), decoded.
    pub async fn read<C: SolCall>(&self, call: &C, block: Option<u64>) -> Result<C::Return, RpcError> {
        let at = block.map_or(json!("latest"), |b| json!(to_quantity(b)));
        let out = self.call_at(call.abi_encode(), C::SIGNATURE, at).await?;
        C::abi_decode_returns(&out).map_err(|e| bad_answer(C::SIGNATURE, e))
    }

    /// ProtocolState's logs of `event` (its signature hash) for our data
    /// market's epoch `epoch_id` (events indexed by market, then epoch id),
    /// from block `from` to the head, as the node answered them.
    pub async fn epoch_logs(&self, event: B256, epoch_id: u64, from: u64) -> Result<Vec<Value>, RpcError> {
        let filter = json!([{
            "address": self.protocol_state,
            "fromBlock": to_quantity(from),
            "toBlock": "latest",
            "topics": [
                event,
                B256::left_padding_from(self.data_market.as_slice()),
                B256::from(U256::from(epoch_id)),
            ],
        }]);
        match self.rpc.call_value("eth_getLogs", filter).await? {
            Value::Array(entries) => Ok(entries),
            _ => Err(bad_answer("eth_getLogs", "not an array")),
        }
    }

    /// The anchor block in which our data market's epoch `epoch_id` was
    /// finalized on chain (its `SnapshotBatchFinalized`), looking from block
    /// `from`; `None` when it was not.
    pub async fn finalized_in(&self, epoch_id: u64, from: u64) -> Result<Option<u64>, RpcError> {
        Ok(self.finalized_by(epoch_id, from).await?.map(|(block, _)| block))
    }

    /// [`Anchor::finalized_in`], with the transaction that finalized it
    /// (its hash, when the RPC gives it).
    pub async fn finalized_by(&self, epoch_id: u64, from: u64) -> Result<Option<(u64, Option<B256>)>, RpcError> {
        for entry in self.epoch_logs(SnapshotBatchFinalized::SIGNATURE_HASH, epoch_id, from).await? {
            let log: RpcLog = serde_json::from_value(entry.clone()).map_err(|e| bad_answer("eth_getLogs", e))?;
            if let (false, Some(block)) = (log.removed, log.block_number) {
                let block = parse_quantity(&block).map_err(|e| bad_answer("eth_getLogs", e))?;
                return Ok(Some((block, log.transaction_hash)));
            }
        }
        Ok(None)
    }

    /// How our data market's epoch `epoch_id` was released, looked up by its
    /// indexed id from block `from`; `None` when no such release exists.
    pub async fn epoch_release(&self, epoch_id: u64, from: u64) -> Result<Option<Release>, RpcError> {
        for entry in self.epoch_logs(EpochReleased::SIGNATURE_HASH, epoch_id, from).await? {
            if let Ok(Some(AnchorEvent {
                kind: EventKind::EpochReleased { epoch_id: id, begin, end, .. },
                block_number,
                ..
            })) = self.decode(entry)
                && id == epoch_id
            {
                return Ok(Some(Release { begin, end, block_number }));
            }
        }
        Ok(None)
    }

    fn decode(&self, entry: Value) -> Result<Option<AnchorEvent>, String> {
        let log: RpcLog = serde_json::from_value(entry.clone()).map_err(|e| format!("{e}: {entry}"))?;
        if log.removed {
            return Ok(None);
        }
        let (Some(block_number), Some(block_hash), Some(log_index)) = (log.block_number, log.block_hash, log.log_index)
        else {
            return Ok(None); // pending logs carry no position yet
        };
        let (block_number, log_index) = (
            parse_quantity(&block_number).map_err(|e| format!("blockNumber: {e}"))?,
            parse_quantity(&log_index).map_err(|e| format!("logIndex: {e}"))?,
        );
        let at = format!("block {block_number} log {log_index}");
        let kind = match log.topics.first() {
            Some(t) if *t == EpochReleased::SIGNATURE_HASH => {
                let e = EpochReleased::decode_raw_log(log.topics.iter().copied(), &log.data)
                    .map_err(|e| format!("EpochReleased at {at}: {e}"))?;
                if e.dataMarketAddress != self.data_market {
                    return Ok(None);
                }
                let epoch_id = to_u64(e.epochId, "epoch id").map_err(|m| format!("{m} at {at}"))?;
                let (begin, end) = (to_u64(e.begin, "begin")?, to_u64(e.end, "end")?);
                if end < begin {
                    return Err(format!("EpochReleased {epoch_id} at {at} ends ({end}) before it begins ({begin})"));
                }
                EventKind::EpochReleased { epoch_id, begin, end, timestamp: to_u64(e.timestamp, "timestamp")? }
            }
            Some(t) if *t == DayStartedEvent::SIGNATURE_HASH => {
                let e = DayStartedEvent::decode_raw_log(log.topics.iter().copied(), &log.data)
                    .map_err(|e| format!("DayStartedEvent at {at}: {e}"))?;
                if e.dataMarketAddress != self.data_market {
                    return Ok(None);
                }
                EventKind::DayStarted { day_id: to_u64(e.dayId, "day id")? }
            }
            _ => return Ok(None),
        };
        Ok(Some(AnchorEvent { block_number, block_hash, log_index, kind }))
    }
}

/// One change of the slot registry ([`Anchor::slot_registrations`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegistryChange {
    /// A slot registered, reassigned or removed, or marked or unmarked a
    /// full node.
    Slot(u64),
    /// A snapshotter enabled or disabled, for all its slots.
    Snapshotter(Address),
}

/// A slot as its number, a snapshotter as its lower-case `0x` address: the
/// two cannot be mistaken for each other.
impl std::fmt::Display for RegistryChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Slot(slot) => write!(f, "{slot}"),
            Self::Snapshotter(address) => write!(f, "{address:#x}"),
        }
    }
}
