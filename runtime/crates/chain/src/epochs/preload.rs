//! The block-details preloader: hash and timestamp of every source-chain block
//! of an epoch, fetched in batches before computes run.

use lite_node_plugin_api::BlockDetail;
use lite_node_protocol::{parse_quantity, to_quantity};
use serde_json::{Value, json};

use crate::HttpRpc;

/// Blocks per JSON-RPC batch.
const BATCH: u64 = 100;

/// Fetches `begin..=end`. A block the source chain does not have yet, or an
/// answer that does not look like a block, is an error naming the block.
pub async fn block_details(source: &HttpRpc, begin: u64, end: u64) -> Result<Vec<BlockDetail>, String> {
    let mut out = Vec::with_capacity((end - begin + 1) as usize);
    let mut from = begin;
    while from <= end {
        let to = end.min(from + BATCH - 1);
        let calls: Vec<(&str, Value)> =
            (from..=to).map(|n| ("eth_getBlockByNumber", json!([to_quantity(n), false]))).collect();
        let answers = source.batch_values(&calls).await.map_err(|e| format!("fetching blocks {from}..={to}: {e}"))?;
        for (n, answer) in (from..=to).zip(answers) {
            let block = answer.map_err(|e| format!("block {n}: {e}"))?;
            out.push(parse(n, &block)?);
        }
        from = to + 1;
    }
    Ok(out)
}

fn parse(n: u64, block: &Value) -> Result<BlockDetail, String> {
    if block.is_null() {
        return Err(format!("the source chain has no block {n} yet"));
    }
    let field = |name: &str| block.get(name).and_then(Value::as_str).ok_or_else(|| format!("block {n} has no {name}"));
    let number = parse_quantity(field("number")?).map_err(|e| format!("block {n}: bad number: {e}"))?;
    if number != n {
        return Err(format!("asked for block {n}, the source chain answered block {number}"));
    }
    let hash = field("hash")?.to_ascii_lowercase();
    if hash.len() != 66 || !hash.starts_with("0x") {
        return Err(format!("block {n}: bad hash {hash}"));
    }
    let timestamp = parse_quantity(field("timestamp")?).map_err(|e| format!("block {n}: bad timestamp: {e}"))?;
    Ok(BlockDetail { number, hash: hash.into(), timestamp })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_block_and_refuses_a_missing_or_wrong_one() {
        let hash = format!("0x{}", "Ab".repeat(32));
        let b = parse(16, &json!({"number": "0x10", "hash": hash, "timestamp": "0x65"})).unwrap();
        assert_eq!((b.number, b.timestamp), (16, 101));
        assert_eq!(b.hash.as_str(), hash.to_lowercase());
        assert_eq!(parse(16, &Value::Null).unwrap_err(), "the source chain has no block 16 yet");
        assert!(
            parse(17, &json!({"number": "0x10", "hash": hash, "timestamp": "0x1"}))
                .unwrap_err()
                .contains("answered block 16")
        );
        assert!(parse(16, &json!({"number": "0x10", "timestamp": "0x1"})).unwrap_err().contains("has no hash"));
    }
}
