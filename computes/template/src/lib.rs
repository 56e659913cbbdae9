//! A starting point for compute authors (`lite-node compute new` writes a
//! package from it): each epoch, the market's slot selection decides whether
//! this slot works and on which pool; a selected slot reads that pool's price
//! and liquidity at the epoch's last block (one round trip for both) and
//! counts its swaps over the epoch's blocks, and returns one snapshot. Its
//! project in projects.json:
//!
//! ```json
//! {"project_type": "poolState",
//!  "processor": {"module": "compute_template", "class_name": "TemplateProcessor"},
//!  "preload_tasks": ["block_details"],
//!  "per_pool": true,
//!  "pools": ["0x…", "0x…"]}
//! ```
//!
//! `per_pool`: each snapshot is of one pool, so each project id names it;
//! the market's collectors and validators refuse the other form. Keys of the
//! project entry other than `project_type`, `processor`, `preload_tasks` and
//! `per_pool` arrive here as the settings object.

use compute_kit::{Address, Batch, Chain, get_logs, sol};
use lite_node_plugin_api::{
    ComputeProcessor, EpochContext, Host, Need, ProcessorSpec, Snapshot, export_compute_module,
};
use serde_json::{Value, json};

/// How projects.json finds this processor.
pub const TEMPLATE: ProcessorSpec = ProcessorSpec {
    class_name: "TemplateProcessor",
    description: "template: the selected pool's price and liquidity at the epoch's last block, and its swaps",
    // What the node prepares: block details carry the epoch's seed block,
    // which the slot selection draws from (its project must then list
    // "block_details" in preload_tasks).
    needs: &[Need::BlockDetails],
    new: TemplateProcessor::from_settings,
};

// One line exports the library's root module, with the market's assignment
// rule so collectors and validators can check which slot worked which pool.
export_compute_module! {
    processors: [TEMPLATE],
    assignments: slot_selection::assignments,
}

// The contract functions this processor calls and the event it reads,
// typed: compute_kit encodes the calldata and decodes the answers and logs.
sol! {
    #![sol(alloy_sol_types = compute_kit::sol_types)]
    #[derive(Debug, Default)]
    function slot0() external view returns (uint160 sqrtPriceX96, int24 tick, uint16 observationIndex,
        uint16 observationCardinality, uint16 observationCardinalityNext, uint8 feeProtocol, bool unlocked);
    function liquidity() external view returns (uint128);
    #[derive(Debug, Default)]
    event Swap(address indexed sender, address indexed recipient, int256 amount0, int256 amount1,
        uint160 sqrtPriceX96, uint128 liquidity, int24 tick);
}

/// Replace with your own state: clients, caches, settings.
#[derive(Debug)]
pub struct TemplateProcessor {
    /// The data market's pools, as listed (they are the data sources).
    pools: Vec<String>,
}

impl TemplateProcessor {
    /// Parses the settings; return an error that says what to fix.
    pub fn from_settings(settings_json: &str) -> Result<Box<dyn ComputeProcessor>, String> {
        let settings: Value = serde_json::from_str(settings_json).map_err(|e| format!("settings are not JSON: {e}"))?;
        let pools = match settings.get("pools") {
            Some(Value::Array(list)) if !list.is_empty() => list
                .iter()
                .map(|p| {
                    let text = p.as_str().ok_or_else(|| format!("`pools` holds {p}, not an address string"))?;
                    compute_kit::address(text).map(|_| text.to_owned()).map_err(|e| format!("`pools`: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            _ => return Err("`pools` must list the market's pool addresses, e.g. \"pools\": [\"0x…\"]".into()),
        };
        Ok(Box::new(Self { pools }))
    }
}

impl TemplateProcessor {
    /// One pool's snapshot: what it reads depends on that pool alone, so it
    /// is the same whichever other pools are computed beside it.
    fn snapshot(&self, epoch: &EpochContext, host: &Host<'_>, pool: &str) -> Result<Snapshot, String> {
        // 2. Gather data through the host, pinned to a block so every node
        //    computes the same bytes. Errors are values: return `Err` naming
        //    what failed (compute_kit's errors name the call and the block).
        let address: Address = compute_kit::address(pool)?;
        // Several calls in one round trip: each `add` gives a handle that
        // reads its own typed answer.
        let mut batch = Batch::new(Chain::Source, epoch.end);
        let (state, liquidity) = (batch.add(address, &slot0Call {}), batch.add(address, &liquidityCall {}));
        let answers = batch.send(host)?;
        let (state, liquidity) = (answers.get(state)?, answers.get(liquidity)?);
        // Logs over the epoch's blocks, decoded, in chain order.
        let swaps = get_logs::<Swap>(host, Chain::Source, &[address], epoch.begin, epoch.end)?;
        // 3. Return one snapshot per data source; the runtime serializes it
        //    canonically, signs and submits it.
        let snapshot = json!({
            "pool": pool.to_ascii_lowercase(),
            "block": epoch.end,
            "sqrtPriceX96": state.sqrtPriceX96.to_string(),
            "tick": state.tick.as_i32(),
            "liquidity": liquidity.to_string(),
            "swaps": swaps.len(),
        });
        Ok(Snapshot::new(pool, snapshot.to_string()))
    }
}

impl ComputeProcessor for TemplateProcessor {
    fn compute(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        // 1. Decide whether this slot works this epoch, and on which pool.
        //    `decide` reports the answer to the node before anything else;
        //    return `Ok(vec![])` when not selected.
        let seed = compute_kit::seed_block_hash(host, epoch)?;
        let Some(pool) = slot_selection::decide(epoch, host, &seed, &self.pools)? else {
            return Ok(vec![]);
        };
        Ok(vec![self.snapshot(epoch, host, pool)?])
    }

    // A full node computes every pool each epoch and may spread them over
    // machines: these two say how the work divides. Delete them if a
    // processor of yours cannot divide its work (it then runs whole).

    /// The pools, sorted, so every machine divides them the same way.
    fn data_sources(&self, _epoch: &EpochContext, _host: &Host<'_>) -> Result<Option<Vec<String>>, String> {
        let mut pools = self.pools.clone();
        pools.sort();
        Ok(Some(pools))
    }

    /// Just these pools: each snapshot the bytes `snapshot` gives, whatever
    /// the share (`testing::check_shares` checks it).
    fn compute_share(
        &self,
        epoch: &EpochContext,
        host: &Host<'_>,
        sources: &[String],
    ) -> Result<Vec<Snapshot>, String> {
        sources.iter().map(|pool| self.snapshot(epoch, host, pool)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use compute_kit::{
        I256,
        aliases::U160,
        testing::{ChainAnswers, TestHost, blocks},
    };

    const POOLS: [&str; 2] =
        ["0x9d187010a2aac0c8057393b21a2c2ce089d2f5a7", "0xe7076a0f2a7b6aa3b2b1e59e4d14f2b9c1a6eddd"];

    fn processor() -> Box<dyn ComputeProcessor> {
        TemplateProcessor::from_settings(&json!({ "pools": POOLS }).to_string()).unwrap()
    }

    /// A chain where each pool has a price and liquidity at the epoch's
    /// last block (42), and two swaps in its blocks 40..=42.
    fn chain() -> TestHost {
        let state = slot0Return { sqrtPriceX96: U160::from(1u128 << 96), unlocked: true, ..Default::default() };
        let swap = Swap { amount0: I256::ONE, amount1: I256::MINUS_ONE, ..Default::default() };
        // The epoch's blocks, as the node preloads them (`block_details`).
        let mut host = TestHost::with_blocks(blocks(40..=42));
        for pool in POOLS.map(|p| compute_kit::address(p).unwrap()) {
            host = host
                .on_call::<slot0Call>(pool, 42, state.clone())
                .on_call::<liquidityCall>(pool, 42, 7_000)
                .on_logs(pool, [(40, swap.clone()), (42, swap.clone())]);
        }
        host
    }

    #[test]
    fn shares_of_the_pools_give_the_bytes_all_of_them_give() {
        let host = chain();
        let epoch = EpochContext::builder(3, 40, 42).slot(1, 1).build();
        assert_eq!(lite_node_plugin_api::testing::check_shares(processor().as_ref(), &epoch, &host, 2), Ok(2));
    }

    #[test]
    fn pools_are_required_and_checked() {
        let err = TemplateProcessor::from_settings("{}").err().unwrap();
        assert!(err.contains("`pools` must list"), "{err}");
        let err = TemplateProcessor::from_settings(r#"{"pools": ["0x12"]}"#).err().unwrap();
        assert!(err.contains("`0x12` is not an address"), "{err}");
    }

    #[test]
    fn a_selected_slot_snapshots_its_pool_and_reports_it() {
        let host = chain();
        // One slot of one: always selected.
        let epoch = EpochContext::builder(3, 40, 42).slot(1, 1).build();
        let snapshots = processor().compute(&epoch, &host.host()).unwrap();
        assert_eq!(host.reports(), vec![(3, true, 1)]);
        assert_eq!(
            host.round_trips(),
            [vec!["eth_call"; 2], vec!["eth_getLogs", "eth_blockNumber"]],
            "slot0 and liquidity together"
        );
        assert_eq!(snapshots.len(), 1);
        assert!(POOLS.contains(&snapshots[0].data_source.as_str()));
        let body: Value = serde_json::from_str(&snapshots[0].json).unwrap();
        assert_eq!(body["sqrtPriceX96"], "79228162514264337593543950336");
        assert_eq!((body["tick"].as_i64(), body["liquidity"].as_str()), (Some(0), Some("7000")));
        assert_eq!(body["swaps"], 2);
    }

    #[test]
    fn a_slot_not_selected_reports_it_and_returns_nothing() {
        let host = chain();
        // Of 10,000 slots, one slot is selected in few epochs: find one it is not.
        let epoch = (1..50).map(|e| EpochContext::builder(e, 40, 42).slot(7, 10_000).build()).find(|e| {
            let probe = chain();
            processor().compute(e, &probe.host()).unwrap().is_empty()
        });
        let epoch = epoch.expect("slot 7 of 10,000 is not selected in every epoch");
        assert!(processor().compute(&epoch, &host.host()).unwrap().is_empty());
        assert_eq!(host.reports(), vec![(epoch.epoch_id, false, 7)]);
    }
}
