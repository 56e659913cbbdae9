//! `BaseSnapshotProcessor`: lite node (the pool this slot is assigned) and
//! full node (every active pool, fetched in one batched round).

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
};

use lite_node_plugin_api::{
    BlockDetail, Chain, ComputeProcessor, EpochContext, Host, Need, ProcessorSpec, RpcCall, Snapshot,
};
use serde_json::{Map, Value, json};

use crate::{
    chain::{self, Event, PoolEvent, PoolState},
    math::{self, MAX_DECIMALS, PRICE_DIGITS, Wide},
    usd::{self, RoutePool, UsdSource},
};

/// `class_name` `BaseSnapshotProcessor` in projects.json.
pub const BASE_SNAPSHOT: ProcessorSpec = ProcessorSpec {
    class_name: "BaseSnapshotProcessor",
    description: "Uniswap V3 pool base snapshot (reserves, prices, volumes, fees) for the assigned pool, or every pool in full-node mode",
    needs: &[Need::BlockDetails],
    new: BaseSnapshotProcessor::from_settings,
};

/// The project's settings (its projects.json keys).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `pools`: active pool addresses, as the market lists them.
    pub pools: Vec<String>,
    /// `pools_file`: a file with one pool address per line.
    pub pools_file: Option<PathBuf>,
    /// `factory`: discover pools from this factory's `PoolCreated` logs.
    pub factory: Option<String>,
    /// `factory_start_block`: where discovery starts (default 0).
    pub factory_start_block: u64,
    /// `full_node`: snapshot every active pool every epoch.
    pub full_node: bool,
    /// `batch_pools` (default true): fetch all pools in one batched round;
    /// false fetches pool by pool (slower; kept for comparison).
    pub batch_pools: bool,
    /// `usd`: where USD prices come from; without it no `…USD` field is emitted.
    pub usd: Option<UsdSource>,
}

const KNOWN: [&str; 7] = ["pools", "pools_file", "factory", "factory_start_block", "full_node", "batch_pools", "usd"];

fn address(v: &str, what: &str) -> Result<String, String> {
    let h = v.strip_prefix("0x").unwrap_or("");
    if h.len() == 40 && h.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(v.to_owned())
    } else {
        Err(format!("{what} `{v}` is not an address (0x + 40 hex digits)"))
    }
}

impl Settings {
    pub fn parse(json_text: &str) -> Result<Self, String> {
        let v: Map<String, Value> =
            serde_json::from_str(json_text).map_err(|e| format!("settings must be a JSON object: {e}"))?;
        if let Some(k) = v.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(format!("unknown setting `{k}`; known: {}", KNOWN.join(", ")));
        }
        let mut s = Settings { batch_pools: true, ..Settings::default() };
        if let Some(p) = v.get("pools") {
            let list = p.as_array().ok_or("`pools` must be a list of addresses")?;
            for item in list {
                s.pools.push(address(item.as_str().ok_or("`pools` must be a list of addresses")?, "pool")?);
            }
        }
        if let Some(f) = v.get("pools_file") {
            s.pools_file = Some(PathBuf::from(f.as_str().ok_or("`pools_file` must be a path")?));
        }
        if let Some(f) = v.get("factory") {
            s.factory = Some(address(f.as_str().ok_or("`factory` must be an address")?, "factory")?.to_lowercase());
        }
        if let Some(b) = v.get("factory_start_block") {
            s.factory_start_block = b.as_u64().ok_or("`factory_start_block` must be a block number")?;
        }
        for (key, slot) in [("full_node", &mut s.full_node), ("batch_pools", &mut s.batch_pools)] {
            if let Some(b) = v.get(key) {
                *slot = b.as_bool().ok_or_else(|| format!("`{key}` must be true or false"))?;
            }
        }
        if let Some(u) = v.get("usd") {
            s.usd = Some(UsdSource::parse(u)?);
        }
        if s.pools.is_empty() && s.pools_file.is_none() && s.factory.is_none() {
            return Err("no pools: set `pools`, `pools_file` or `factory`".into());
        }
        Ok(s)
    }
}

/// What never changes about a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PoolMeta {
    token0: String,
    token1: String,
    fee: u32,
    dec0: u32,
    dec1: u32,
}

#[derive(Debug, Default)]
struct Discovery {
    next_block: u64,
    pools: Vec<String>,
}

/// Snapshots Uniswap V3 pools.
#[derive(Debug)]
pub struct BaseSnapshotProcessor {
    settings: Settings,
    meta: Mutex<HashMap<String, PoolMeta>>,
    decimals: Mutex<HashMap<String, u32>>,
    discovery: Mutex<Discovery>,
    shared: Mutex<Shared>,
}

/// One pool's snapshot of one epoch, as a lite slot computes it: filled by
/// the first slot that drew the pool, waited for by the others.
type SharedCell = Arc<OnceLock<Result<String, String>>>;

/// Which epoch a shared snapshot belongs to: its id, its blocks and the
/// anchor block its finalized history is read at — everything a lite
/// snapshot depends on besides the pool and the (pinned) chain.
type EpochKey = (u64, u64, u64, u64);

/// The pool snapshots of the epochs lite slots are computing. A lite
/// snapshot depends on the epoch and the pool only — never on the slot that
/// drew it — so when one node works many slots, the slots that drew the same
/// pool share one computation: the first computes, the others take its
/// bytes. A failed computation is not kept: the slots that waited for it,
/// and the next to draw the pool, compute alone.
/// The last [`SHARED_EPOCHS`] epochs are kept.
#[derive(Debug, Default)]
struct Shared {
    epochs: BTreeMap<EpochKey, HashMap<String, SharedCell>>,
}

/// Epochs whose shared snapshots are kept: the one being computed and one
/// that may still be finishing beside it.
const SHARED_EPOCHS: usize = 2;

impl Shared {
    /// The cell of `pool` in `epoch`, and whether the caller must fill it.
    fn cell(&mut self, epoch: EpochKey, pool: &str) -> (SharedCell, bool) {
        let cells = self.epochs.entry(epoch).or_default();
        let found = match cells.get(pool) {
            Some(cell) => (cell.clone(), false),
            None => {
                let cell = SharedCell::default();
                cells.insert(pool.to_owned(), cell.clone());
                (cell, true)
            }
        };
        while self.epochs.len() > SHARED_EPOCHS {
            self.epochs.pop_first();
        }
        found
    }
}

/// Fills a shared cell whatever happens to its computation: a panic (caught
/// by the node as the slot's error) leaves the waiting slots an error, not
/// a wait that never ends; a failure is dropped from the map so the next
/// slot that draws the pool computes it again.
struct Filling<'a> {
    shared: &'a Mutex<Shared>,
    epoch: EpochKey,
    pool: &'a str,
    cell: SharedCell,
}

impl Filling<'_> {
    fn fill(self, result: Result<String, String>) {
        if result.is_err() {
            self.forget();
        }
        let _ = self.cell.set(result);
    }

    fn forget(&self) {
        let mut shared = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cells) = shared.epochs.get_mut(&self.epoch) {
            cells.remove(self.pool);
        }
    }
}

impl Drop for Filling<'_> {
    fn drop(&mut self) {
        if self.cell.get().is_none() {
            self.forget();
            let _ =
                self.cell.set(Err(format!("pool {}: the slot computing its snapshot stopped (panicked)", self.pool)));
        }
    }
}

impl BaseSnapshotProcessor {
    pub fn new(settings: Settings) -> Self {
        let discovery = Discovery { next_block: settings.factory_start_block, pools: Vec::new() };
        Self {
            settings,
            meta: Mutex::default(),
            decimals: Mutex::default(),
            discovery: Mutex::new(discovery),
            shared: Mutex::default(),
        }
    }

    /// A lite slot's snapshot of `pool`: computed once per epoch for every
    /// slot of this node that drew it (see [`Shared`]).
    fn shared_snapshot(
        &self,
        host: &Host<'_>,
        epoch: &EpochContext,
        pool: &str,
        details: &[BlockDetail],
    ) -> Result<Vec<Snapshot>, String> {
        let key = (epoch.epoch_id, epoch.begin, epoch.end, epoch.anchor_block);
        let (cell, mine) = self.shared.lock().unwrap_or_else(|p| p.into_inner()).cell(key, pool);
        let json = if mine {
            let filling = Filling { shared: &self.shared, epoch: key, pool, cell: cell.clone() };
            let computed = self.snapshots_of(host, epoch, &[pool.to_owned()], details).and_then(|mut one| {
                one.pop().map(|s| s.json.into_string()).ok_or_else(|| format!("pool {pool}: no snapshot"))
            });
            filling.fill(computed.clone());
            computed?
        } else {
            match cell.wait() {
                Ok(json) => json.clone(),
                // Its failure is the first slot's: this one computes alone,
                // so it fails (or not) as it would have by itself — and the
                // node sees its own chain reads (a source out of reach is
                // retried, not counted as a failure of this slot's).
                Err(_) => return self.snapshots_of(host, epoch, &[pool.to_owned()], details),
            }
        };
        Ok(vec![Snapshot::new(pool.to_owned(), json)])
    }

    pub fn from_settings(json_text: &str) -> Result<Box<dyn ComputeProcessor>, String> {
        Ok(Box::new(Self::new(Settings::parse(json_text)?)))
    }

    /// Configured, listed and discovered pools, as given, sorted as Python
    /// sorts strings (docs/protocol.md §2), without duplicates.
    pub fn active_pools(&self, host: &Host<'_>, up_to_block: u64) -> Result<Vec<String>, String> {
        let mut pools = self.settings.pools.clone();
        if let Some(file) = &self.settings.pools_file {
            let text = std::fs::read_to_string(file).map_err(|e| format!("pools_file {}: {e}", file.display()))?;
            for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
                pools.push(address(line, &format!("pools_file {} line", file.display()))?);
            }
        }
        if let Some(factory) = &self.settings.factory {
            let mut d = self.discovery.lock().unwrap_or_else(|p| p.into_inner());
            if d.next_block <= up_to_block {
                let found = chain::created_pools(host, factory, d.next_block, up_to_block)?;
                d.pools.extend(found);
                d.next_block = up_to_block + 1;
            }
            pools.extend(d.pools.iter().cloned());
        }
        pools.sort();
        pools.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
        Ok(pools)
    }

    /// Each pool's tokens and fee and each token's decimals, read at block
    /// `at` (the epoch's last) the first time and kept: a pool's tokens and
    /// fee are immutable and ERC-20 decimals are constant, so whether this
    /// node had them cached never changes a snapshot's bytes.
    fn ensure_meta(&self, host: &Host<'_>, pools: &[String], at: u64) -> Result<HashMap<String, PoolMeta>, String> {
        let missing: Vec<String> = {
            let meta = self.meta.lock().unwrap_or_else(|p| p.into_inner());
            pools.iter().filter(|p| !meta.contains_key(*p)).cloned().collect()
        };
        if !missing.is_empty() {
            let infos = chain::pool_infos(host, &missing, at)?;
            let mut partial = Vec::new();
            for (p, info) in missing.iter().zip(infos) {
                if info.fee > 1_000_000 {
                    return Err(format!("pool {p}: fee() answered {}, more than 100%", info.fee));
                }
                partial.push((p.clone(), info.token0, info.token1, info.fee));
            }
            let tokens: Vec<(String, String)> = {
                let known = self.decimals.lock().unwrap_or_else(|p| p.into_inner());
                let mut t: Vec<(String, String)> = partial
                    .iter()
                    .flat_map(|(p, t0, t1, _)| [(p.clone(), t0.clone()), (p.clone(), t1.clone())])
                    .filter(|(_, t)| !known.contains_key(t))
                    .collect();
                t.sort_by(|a, b| a.1.cmp(&b.1));
                t.dedup_by(|a, b| a.1 == b.1);
                t
            };
            let answers = chain::decimals_of(host, &tokens, at)?;
            let mut decimals = self.decimals.lock().unwrap_or_else(|p| p.into_inner());
            for ((p, t), d) in tokens.iter().zip(answers) {
                let d = u32::from(d);
                if d > MAX_DECIMALS {
                    return Err(format!("pool {p}: token {t} has {d} decimals; at most {MAX_DECIMALS} are supported"));
                }
                decimals.insert(t.clone(), d);
            }
            let mut meta = self.meta.lock().unwrap_or_else(|p| p.into_inner());
            for (p, token0, token1, fee) in partial {
                let (dec0, dec1) = (decimals[&token0], decimals[&token1]);
                meta.insert(p, PoolMeta { token0, token1, fee, dec0, dec1 });
            }
        }
        let meta = self.meta.lock().unwrap_or_else(|p| p.into_inner());
        Ok(pools.iter().map(|p| (p.clone(), meta[p].clone())).collect())
    }

    /// Base snapshots of `pools` (lower-case) for the epoch: metadata, one
    /// `eth_getLogs`, one batched round of state calls, then the arithmetic.
    fn snapshot_pools(
        &self,
        host: &Host<'_>,
        epoch: &EpochContext,
        pools: &[String],
        timestamps: &BTreeMap<u64, u64>,
    ) -> Result<Vec<(String, Value)>, String> {
        let route_pools: Vec<String> = self.settings.usd.as_ref().map(|u| u.pools.clone()).unwrap_or_default();
        let all: Vec<String> = pools.iter().chain(&route_pools).cloned().collect();
        let meta = self.ensure_meta(host, &all, epoch.end)?;
        let refs: Vec<&str> = pools.iter().map(String::as_str).collect();
        let mut events = chain::pool_events(host, &refs, epoch.begin, epoch.end)?;
        let blocks: Vec<u64> = (epoch.begin..=epoch.end).collect();
        let targets: Vec<(&str, &str, &str)> =
            pools.iter().map(|p| (p.as_str(), meta[p].token0.as_str(), meta[p].token1.as_str())).collect();
        let chain::States { pools: states, routes: route_prices } =
            chain::states(host, &targets, &route_pools, &blocks)?;
        let route_view = |p: &str, sqrt: BTreeMap<u64, Wide>| {
            let m = &meta[p];
            RoutePool { token0: m.token0.clone(), token1: m.token1.clone(), dec0: m.dec0, dec1: m.dec1, sqrt }
        };
        let routes: HashMap<String, RoutePool> = route_pools
            .iter()
            .zip(route_prices)
            .map(|(r, prices)| (r.clone(), route_view(r, blocks.iter().copied().zip(prices).collect())))
            .collect();
        if let Some((r, _)) = routes.iter().find(|(_, v)| v.sqrt.values().any(|s| s.is_zero())) {
            return Err(format!("pool {r}: slot0() has no price (USD route pool not initialized)"));
        }
        let mut out = Vec::with_capacity(pools.len());
        for (p, state) in pools.iter().zip(&states) {
            let pool_events = events.remove(p).unwrap_or_default();
            let mut snapshot = base_snapshot(p, &meta[p], epoch, &blocks, state, &pool_events, timestamps)?;
            if let Some(source) = &self.settings.usd {
                let sqrt = blocks.iter().zip(state).map(|(&b, s)| (b, s.sqrt_price)).collect();
                let view = route_view(p, sqrt);
                let usd0 = usd::token_usd(source, &routes, p, &view, &view.token0, &blocks)?;
                let usd1 = usd::token_usd(source, &routes, p, &view, &view.token1, &blocks)?;
                add_usd_fields(&mut snapshot, &meta[p], &blocks, state, &pool_events, &usd0, &usd1);
            }
            // What the chain finalized, the same on every node (an anchor
            // out of reach fails the compute: the node runs it again).
            let finalized = host.previous_snapshots(p).map_err(|e| format!("pool {p}: previous snapshots: {e}"))?;
            let previous: Vec<Value> = finalized.into_iter().map(|(e, cid)| json!([e, cid])).collect();
            snapshot["previousSnapshots"] = Value::Array(previous);
            out.push((p.clone(), snapshot));
        }
        Ok(out)
    }
}

/// One pool's snapshot from its fetched state and events.
fn base_snapshot(
    pool: &str,
    m: &PoolMeta,
    epoch: &EpochContext,
    blocks: &[u64],
    state: &[PoolState],
    events: &[PoolEvent],
    timestamps: &BTreeMap<u64, u64>,
) -> Result<Value, String> {
    let (mut reserves0, mut reserves1, mut prices0, mut prices1, mut times) =
        (Map::new(), Map::new(), Map::new(), Map::new(), Map::new());
    let mut sqrt_at = BTreeMap::new();
    for (&b, s) in blocks.iter().zip(state) {
        let sqrt = s.sqrt_price;
        if sqrt.is_zero() {
            return Err(format!("pool {pool}: slot0() at block {b} has no price (pool not initialized)"));
        }
        sqrt_at.insert(b, sqrt);
        let key = b.to_string();
        reserves0.insert(key.clone(), json!(math::decimal(s.balance0, m.dec0)));
        reserves1.insert(key.clone(), json!(math::decimal(s.balance1, m.dec1)));
        prices0.insert(key.clone(), json!(math::decimal(math::price0(sqrt, m.dec0, m.dec1), PRICE_DIGITS)));
        prices1.insert(key.clone(), json!(math::decimal(math::price1(sqrt, m.dec0, m.dec1), PRICE_DIGITS)));
        let ts = timestamps.get(&b).ok_or_else(|| format!("pool {pool}: no timestamp for block {b}"))?;
        times.insert(key, json!(ts));
    }
    let mint_burn_scale = PRICE_DIGITS.max(m.dec1);
    let (mut trade0, mut trade1, mut mb0, mut mb1, mut mb_value) =
        (Wide::ZERO, Wide::ZERO, Wide::ZERO, Wide::ZERO, Wide::ZERO);
    for e in events {
        match &e.event {
            Event::Swap { amount0, amount1 } => {
                trade0 += amount0.1;
                trade1 += amount1.1;
            }
            Event::Mint { amount0, amount1 } | Event::Burn { amount0, amount1 } => {
                mb0 += *amount0;
                mb1 += *amount1;
                let sqrt = sqrt_at[&e.block];
                mb_value += *amount1 * math::pow10(mint_burn_scale - m.dec1)
                    + math::token0_in_token1(*amount0, sqrt, m.dec1, mint_burn_scale);
            }
            Event::Collect { .. } => {}
        }
    }
    let fee = trade1 * Wide::from(m.fee);
    Ok(json!({
        "address": pool,
        "epoch": {"begin": epoch.begin, "end": epoch.end},
        "timestamps": times,
        "token0": m.token0,
        "token1": m.token1,
        "token0Reserves": reserves0,
        "token1Reserves": reserves1,
        "token0Prices": prices0,
        "token1Prices": prices1,
        "token0TradeVolume": math::decimal(trade0, m.dec0),
        "token1TradeVolume": math::decimal(trade1, m.dec1),
        "token0MintBurnVolume": math::decimal(mb0, m.dec0),
        "token1MintBurnVolume": math::decimal(mb1, m.dec1),
        "totalTrade": math::decimal(trade1, m.dec1),
        "totalFee": math::decimal(fee, m.dec1 + 6),
        "totalTradeMintBurn": math::decimal(mb_value, mint_burn_scale),
        "previousSnapshots": [],
    }))
}

/// The `…USD` fields (see the crate docs), from per-block USD prices.
fn add_usd_fields(
    snapshot: &mut Value,
    m: &PoolMeta,
    blocks: &[u64],
    state: &[PoolState],
    events: &[PoolEvent],
    usd0: &BTreeMap<u64, Wide>,
    usd1: &BTreeMap<u64, Wide>,
) {
    let d = |v: Wide| math::decimal(v, PRICE_DIGITS);
    let (mut p0, mut p1, mut r0, mut r1) = (Map::new(), Map::new(), Map::new(), Map::new());
    for (&b, s) in blocks.iter().zip(state) {
        let key = b.to_string();
        p0.insert(key.clone(), json!(d(usd0[&b])));
        p1.insert(key.clone(), json!(d(usd1[&b])));
        r0.insert(key.clone(), json!(d(usd::value(s.balance0, m.dec0, usd0[&b]))));
        r1.insert(key, json!(d(usd::value(s.balance1, m.dec1, usd1[&b]))));
    }
    let (mut t0, mut t1, mut mb0, mut mb1, mut fee) = (Wide::ZERO, Wide::ZERO, Wide::ZERO, Wide::ZERO, Wide::ZERO);
    for e in events {
        let (u0, u1) = (usd0[&e.block], usd1[&e.block]);
        match &e.event {
            Event::Swap { amount0, amount1 } => {
                t0 += usd::value(amount0.1, m.dec0, u0);
                t1 += usd::value(amount1.1, m.dec1, u1);
                fee += usd::value(amount1.1 * Wide::from(m.fee), m.dec1 + 6, u1);
            }
            Event::Mint { amount0, amount1 } | Event::Burn { amount0, amount1 } => {
                mb0 += usd::value(*amount0, m.dec0, u0);
                mb1 += usd::value(*amount1, m.dec1, u1);
            }
            Event::Collect { .. } => {}
        }
    }
    let fields = [
        ("token0PricesUSD", Value::Object(p0)),
        ("token1PricesUSD", Value::Object(p1)),
        ("token0ReservesUSD", Value::Object(r0)),
        ("token1ReservesUSD", Value::Object(r1)),
        ("token0TradeVolumeUSD", json!(d(t0))),
        ("token1TradeVolumeUSD", json!(d(t1))),
        ("token0MintBurnVolumeUSD", json!(d(mb0))),
        ("token1MintBurnVolumeUSD", json!(d(mb1))),
        ("totalTradeUSD", json!(d(t1))),
        ("totalFeeUSD", json!(d(fee))),
        ("totalTradeMintBurnUSD", json!(d(mb0 + mb1))),
    ];
    for (k, v) in fields {
        snapshot[k] = v;
    }
}

/// Block hashes and timestamps of `begin..=end`: preloaded when the project
/// has `preload_tasks: ["block_details"]`, else fetched.
fn block_details(host: &Host<'_>, epoch: &EpochContext) -> Result<Vec<BlockDetail>, String> {
    let pre = host.block_details();
    if !pre.is_empty() {
        return Ok(pre);
    }
    let calls: Vec<RpcCall> = (epoch.begin..=epoch.end)
        .map(|b| RpcCall {
            method: "eth_getBlockByNumber".into(),
            params_json: json!([compute_kit::to_quantity(b), false]).to_string().into(),
        })
        .collect();
    let answers = host
        .rpc_batch(Chain::Source, &calls)
        .map_err(|e| format!("eth_getBlockByNumber {}..={}: {e}", epoch.begin, epoch.end))?;
    (epoch.begin..=epoch.end)
        .zip(answers)
        .map(|(b, a)| {
            let text = a.map_err(|e| format!("eth_getBlockByNumber {b}: {e}"))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| format!("eth_getBlockByNumber {b}: {e}"))?;
            let hash = v["hash"]
                .as_str()
                .ok_or_else(|| format!("eth_getBlockByNumber {b}: the source chain has no such block"))?;
            let ts = v["timestamp"].as_str().and_then(|t| compute_kit::quantity(t).ok());
            Ok(BlockDetail {
                number: b,
                hash: hash.into(),
                timestamp: ts.ok_or_else(|| format!("eth_getBlockByNumber {b}: no timestamp"))?,
            })
        })
        .collect()
}

impl BaseSnapshotProcessor {
    /// The active pools, or why there are none.
    fn pools(&self, host: &Host<'_>, epoch: &EpochContext) -> Result<Vec<String>, String> {
        let pools = self.active_pools(host, epoch.end)?;
        if pools.is_empty() {
            return Err("no active pools (the configured list is empty and discovery found none)".into());
        }
        Ok(pools)
    }

    /// Snapshots of `targets` (pools as given), in their order.
    fn snapshots_of(
        &self,
        host: &Host<'_>,
        epoch: &EpochContext,
        targets: &[String],
        details: &[BlockDetail],
    ) -> Result<Vec<Snapshot>, String> {
        let timestamps: BTreeMap<u64, u64> = details.iter().map(|d| (d.number, d.timestamp)).collect();
        let lower: Vec<String> = targets.iter().map(|p| p.to_ascii_lowercase()).collect();
        let computed = if self.settings.batch_pools {
            self.snapshot_pools(host, epoch, &lower, &timestamps)?
        } else {
            let mut all = Vec::with_capacity(lower.len());
            for p in &lower {
                all.extend(self.snapshot_pools(host, epoch, std::slice::from_ref(p), &timestamps)?);
            }
            all
        };
        Ok(targets
            .iter()
            .zip(computed)
            .map(|(given, (_, snapshot))| Snapshot::new(given.clone(), snapshot.to_string()))
            .collect())
    }
}

impl ComputeProcessor for BaseSnapshotProcessor {
    fn compute(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        let pools = self.pools(host, epoch)?;
        let details = block_details(host, epoch)?;
        let seed_block = details
            .iter()
            .find(|d| d.number == epoch.begin)
            .ok_or_else(|| format!("no block details for block {}, the epoch's seed block", epoch.begin))?;
        let targets: Vec<String> = if self.settings.full_node {
            host.report_selection(epoch.epoch_id, true, epoch.slot_id);
            pools.clone()
        } else {
            match slot_selection::decide(epoch, host, &seed_block.hash, &pools)? {
                None => return Ok(vec![]),
                Some(pool) => return self.shared_snapshot(host, epoch, pool, &details),
            }
        };
        self.snapshots_of(host, epoch, &targets, &details)
    }

    /// A full node's pools: every active pool, sorted as the selection
    /// sorts them. A lite slot's work is the one pool its selection gives,
    /// so it does not divide.
    fn data_sources(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Option<Vec<String>>, String> {
        if !self.settings.full_node {
            return Ok(None);
        }
        self.pools(host, epoch).map(Some)
    }

    /// Each pool's snapshot depends only on its own reads, the USD route
    /// pools' and what the chain finalized for it, so a share's bytes are
    /// the whole's.
    fn compute_share(
        &self,
        epoch: &EpochContext,
        host: &Host<'_>,
        sources: &[String],
    ) -> Result<Vec<Snapshot>, String> {
        if !self.settings.full_node {
            return Err("only a full node (`full_node: true`) divides its pools into shares".into());
        }
        let pools = self.pools(host, epoch)?;
        if let Some(stray) = sources.iter().find(|s| !pools.iter().any(|p| p.eq_ignore_ascii_case(s))) {
            return Err(format!("pool {stray} is not one of the epoch's {} active pools", pools.len()));
        }
        let details = block_details(host, epoch)?;
        self.snapshots_of(host, epoch, sources, &details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot whose computation panics (the node catches it as that slot's
    /// error) leaves the slots waiting on it an error, and no cell that the
    /// next slot to draw the pool would wait on for ever.
    #[test]
    fn a_computation_that_panics_leaves_an_error_and_no_cell() {
        let shared = Mutex::new(Shared::default());
        let key = (3, 100, 100, 0);
        let (cell, mine) = shared.lock().unwrap().cell(key, "0xaa");
        assert!(mine);
        let (waiting, mine) = shared.lock().unwrap().cell(key, "0xaa");
        assert!(!mine, "the second slot waits for the first");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _filling = Filling { shared: &shared, epoch: key, pool: "0xaa", cell: cell.clone() };
            panic!("a processor bug");
        }));
        assert!(panicked.is_err());
        assert!(waiting.wait().as_ref().unwrap_err().contains("stopped (panicked)"));
        assert!(shared.lock().unwrap().cell(key, "0xaa").1, "the next slot computes anew");
    }

    #[test]
    fn only_the_last_epochs_are_kept() {
        let mut shared = Shared::default();
        for epoch in 1..=5 {
            shared.cell((epoch, epoch, epoch, 0), "0xaa");
        }
        assert_eq!(shared.epochs.keys().map(|k| k.0).collect::<Vec<_>>(), [4, 5]);
    }
}
