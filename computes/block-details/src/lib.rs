//! An example compute: one snapshot per epoch with the hash and timestamp of
//! every block in the epoch's range, taken from the node's preloaded block
//! details. It needs no RPC, so tests and the local network use it to watch
//! epochs flow end to end.

use lite_node_plugin_api::{
    ComputeProcessor, EpochContext, Host, Need, ProcessorSpec, Snapshot, export_compute_module,
};
use serde_json::{Map, Value, json};

/// `class_name` `BlockDetailsProcessor` in projects.json.
pub const BLOCK_DETAILS: ProcessorSpec = ProcessorSpec {
    class_name: "BlockDetailsProcessor",
    description: "hash and timestamp of every block in the epoch",
    needs: &[Need::BlockDetails],
    new: BlockDetailsProcessor::from_settings,
};

export_compute_module! {
    processors: [BLOCK_DETAILS],
}

/// Snapshots the epoch's block details.
#[derive(Debug, Default)]
pub struct BlockDetailsProcessor;

impl BlockDetailsProcessor {
    /// Accepts an empty settings object; anything else is a configuration
    /// mistake worth reporting.
    pub fn from_settings(settings_json: &str) -> Result<Box<dyn ComputeProcessor>, String> {
        let settings: Map<String, Value> =
            serde_json::from_str(settings_json).map_err(|e| format!("settings must be a JSON object: {e}"))?;
        if let Some(key) = settings.keys().next() {
            return Err(format!("unknown setting `{key}` (BlockDetailsProcessor takes none)"));
        }
        Ok(Box::new(Self))
    }
}

impl ComputeProcessor for BlockDetailsProcessor {
    fn compute(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        // Every slot works every epoch for this market: report it first.
        host.report_selection(epoch.epoch_id, true, epoch.slot_id);
        let blocks = host.block_details();
        let expected = epoch.end.checked_sub(epoch.begin).map(|d| d + 1).unwrap_or(0);
        if blocks.len() as u64 != expected {
            return Err(format!(
                "epoch {} covers blocks {}..={} ({expected} blocks) but {} were preloaded",
                epoch.epoch_id,
                epoch.begin,
                epoch.end,
                blocks.len()
            ));
        }
        let mut by_number = Map::new();
        for b in &blocks {
            by_number.insert(b.number.to_string(), json!({ "hash": b.hash.as_str(), "timestamp": b.timestamp }));
        }
        let snapshot = json!({
            "epoch": { "begin": epoch.begin, "end": epoch.end },
            "blocks": by_number,
        });
        Ok(vec![Snapshot::new("", snapshot.to_string())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lite_node_plugin_api::{BlockDetail, testing::TestHost};

    fn epoch(begin: u64, end: u64) -> EpochContext {
        EpochContext {
            epoch_id: 7,
            begin,
            end,
            day_id: 1,
            slot_id: 3,
            total_slots: 10,
            anchor_block: 0,
            namespace: "devnet-BLOCKS-ETH".into(),
            project_type: "blockDetails".into(),
        }
    }

    fn block(number: u64) -> BlockDetail {
        BlockDetail { number, hash: format!("0x{number:064x}").into(), timestamp: 1_700_000_000 + number }
    }

    #[test]
    fn snapshots_every_block_and_reports_selection_first() {
        let host = TestHost::with_blocks(vec![block(9), block(10)]);
        let out = BlockDetailsProcessor.compute(&epoch(9, 10), &host.host()).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data_source.as_str(), "");
        let v: Value = serde_json::from_str(&out[0].json).unwrap();
        assert_eq!(v["epoch"], json!({"begin": 9, "end": 10}));
        assert_eq!(v["blocks"]["10"]["timestamp"], json!(1_700_000_010u64));
        assert_eq!(host.reports(), vec![(7, true, 3)]);
    }

    #[test]
    fn missing_preloaded_blocks_is_an_error() {
        let host = TestHost::with_blocks(vec![block(9)]);
        let err = BlockDetailsProcessor.compute(&epoch(9, 10), &host.host()).unwrap_err();
        assert!(err.contains("2 blocks) but 1 were preloaded"), "{err}");
    }

    #[test]
    fn unknown_settings_are_refused() {
        assert!(BlockDetailsProcessor::from_settings("{}").is_ok());
        let err = BlockDetailsProcessor::from_settings(r#"{"pools":[]}"#).err().unwrap();
        assert!(err.contains("unknown setting `pools`"), "{err}");
    }
}
