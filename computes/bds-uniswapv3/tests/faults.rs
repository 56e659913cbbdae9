//! Bad RPC answers make the compute fail, naming the pool and the call; it
//! never returns a partial snapshot. The chain here is a `TestHost` handler.

use bds_uniswapv3::BaseSnapshotProcessor;
use lite_node_plugin_api::{BlockDetail, Chain, EpochContext, RpcError, testing::TestHost};
use serde_json::{Value, json};

const POOL: &str = "0x00000000000000000000000000000000000000aa";
const T0: &str = "0x00000000000000000000000000000000000000b0";
const T1: &str = "0x00000000000000000000000000000000000000b1";
const SWAP: &str = "0xc42079f94a6350d7e6235f29174924f928cc2ac818eb64fed8004e115fbcca67";

fn word(v: u128) -> String {
    format!("{v:064x}")
}

fn address_word(a: &str) -> String {
    format!("{:0>64}", &a[2..])
}

/// A healthy single-pool chain at block 100, with `fault` applied.
fn host(fault: &'static str) -> TestHost {
    let mut h = TestHost::with_blocks(vec![BlockDetail {
        number: 100,
        hash: format!("0x{}", "ab".repeat(32)).into(),
        timestamp: 1_700_000_000,
    }]);
    h.rpc = Some(Box::new(move |chain: Chain, method: &str, params: &str| {
        assert_eq!(chain, Chain::Source);
        let p: Value = serde_json::from_str(params).unwrap();
        let err = |code: i64, m: &str| Err(RpcError { code: Some(code).into(), message: m.into() });
        match method {
            // The node that answers the logs says how far it is.
            "eth_blockNumber" if fault == "behind" => Ok("\"0x63\"".into()),
            "eth_blockNumber" => Ok("\"0x64\"".into()),
            "eth_getLogs" => {
                let data = if fault == "truncated-log" {
                    format!("0x{}", word(1))
                } else {
                    format!("0x{}", word(5).repeat(5))
                };
                if fault == "logs-error" {
                    return err(-32005, "query returned more than 10000 results");
                }
                let hash = format!("0x{}", "ab".repeat(32));
                let tx = format!("0x{}", "cd".repeat(32));
                let topics = [SWAP.to_owned(), format!("0x{}", address_word(T0)), format!("0x{}", address_word(T1))];
                Ok(json!([{"address": POOL, "blockNumber": "0x64", "blockHash": hash, "logIndex": "0x0",
                    "transactionHash": tx, "topics": topics, "data": data}])
                .to_string())
            }
            "eth_call" => {
                let to = p[0]["to"].as_str().unwrap().to_ascii_lowercase();
                let data = p[0]["data"].as_str().unwrap();
                let out = match (to.as_str(), &data[..10]) {
                    (POOL, "0x0dfe1681") => address_word(T0),
                    (POOL, "0xd21220a7") => address_word(T1),
                    (POOL, "0xddca3f43") => word(3000),
                    (_, "0x313ce567") => word(18),
                    (POOL, "0x3850c7bd") if fault == "missing-block" => return err(-32000, "header not found"),
                    (POOL, "0x3850c7bd") => format!("{}{}", word(1 << 96), word(0).repeat(6)),
                    (T1, "0x70a08231") if fault == "balance-error" => return err(-32603, "internal error"),
                    (_, "0x70a08231") => word(10u128.pow(21)),
                    other => panic!("unexpected call {other:?}"),
                };
                Ok(format!("\"0x{out}\""))
            }
            other => panic!("unexpected method {other}"),
        }
    }));
    h
}

fn epoch() -> EpochContext {
    EpochContext {
        epoch_id: 3,
        begin: 100,
        end: 100,
        day_id: 1,
        slot_id: 1,
        total_slots: 1,
        anchor_block: 0,
        namespace: "devnet-UNISWAPV3-ETH".into(),
        project_type: "baseSnapshot".into(),
    }
}

fn run(fault: &'static str) -> Result<Vec<lite_node_plugin_api::Snapshot>, String> {
    let p = BaseSnapshotProcessor::from_settings(&json!({"pools": [POOL], "full_node": true}).to_string()).unwrap();
    let epoch = epoch();
    let h = host(fault);
    p.compute(&epoch, &h.host())
}

#[test]
fn a_healthy_chain_gives_one_snapshot() {
    let out = run("none").unwrap();
    assert_eq!(out.len(), 1);
    let v: Value = serde_json::from_str(&out[0].json).unwrap();
    assert_eq!(v["token0Prices"]["100"], "1.000000000000000000");
    assert_eq!(v["token0TradeVolume"], "0.000000000000000005");
    assert_eq!(v["token1Reserves"]["100"], "1000.000000000000000000");
}

#[test]
fn each_bad_answer_is_an_error_naming_pool_and_call() {
    // Each error, lower-cased, starts with the pool and holds what was asked and what was answered.
    let cases: [(&str, &[&str]); 5] = [
        (
            "missing-block",
            &["eth_call slot0() on 0x00000000000000000000000000000000000000aa at block 100", "header not found"],
        ),
        (
            "balance-error",
            &[
                "eth_call balanceof(address) on 0x00000000000000000000000000000000000000b1 at block 100",
                "internal error",
            ],
        ),
        ("truncated-log", &["eth_getlogs 100..=100", "is not swap(", "buffer overrun"]),
        ("logs-error", &["eth_getlogs", "in blocks 100..=100", "query returned more than 10000 results"]),
        // compute-kit's lag guard: an RPC behind the epoch's last block would answer its logs as none.
        ("behind", &["eth_getlogs", "is at block 99, behind block 100"]),
    ];
    for (fault, expected) in cases {
        let err = run(fault).map(|s| s.len()).unwrap_err().to_lowercase();
        assert!(err.starts_with(&format!("pool {POOL}: ")), "{fault}: {err}");
        for part in expected {
            assert!(err.contains(part), "{fault}: {part:?} not in {err}");
        }
    }
}

#[test]
fn settings_are_checked() {
    for (settings, expected) in [
        (json!({}), "no pools: set `pools`, `pools_file` or `factory`"),
        (json!({"pools": ["0x12"]}), "pool `0x12` is not an address"),
        (json!({"pools": [POOL], "turbo": true}), "unknown setting `turbo`"),
        (json!({"pools": [POOL], "full_node": "yes"}), "`full_node` must be true or false"),
        (json!({"pools": [POOL], "usd": {"stablecoins": []}}), "`usd.pools` must be a list"),
        (json!({"pools": [POOL], "usd": {"stablecoins": [], "pools": []}}), "`usd.stablecoins` is empty"),
        (json!({"pools": [POOL], "usd": {"stablecoins": ["0x1"], "pools": []}}), "`usd.stablecoins` has `\"0x1\"`"),
    ] {
        let err = BaseSnapshotProcessor::from_settings(&settings.to_string()).err().unwrap();
        assert!(err.starts_with(expected), "{settings}: {err}");
    }
}

#[test]
fn a_token_without_a_usd_route_is_an_error_naming_it() {
    let settings = json!({"pools": [POOL], "full_node": true,
        "usd": {"stablecoins": ["0x00000000000000000000000000000000000000c0"], "pools": []}});
    let p = BaseSnapshotProcessor::from_settings(&settings.to_string()).unwrap();
    let epoch = epoch();
    let h = host("none");
    let err = p.compute(&epoch, &h.host()).map(|s| s.len()).unwrap_err();
    assert!(err.starts_with(&format!("pool {POOL}: no USD price for token {T0}")), "{err}");
}

/// A lite slot's snapshot depends on the epoch and the pool, not the slot:
/// the slots of one node that drew the same pool share one computation —
/// the second reads nothing from the chain and gets the first's bytes. A
/// failure is not kept, and another epoch computes anew.
#[test]
fn slots_that_drew_one_pool_share_its_computation_and_only_a_success_is_kept() {
    let lite = || BaseSnapshotProcessor::from_settings(&json!({"pools": [POOL]}).to_string()).unwrap();
    let no_chain = TestHost::with_blocks(host("none").blocks.clone()); // every chain read fails
    let p = lite();
    let first = p.compute(&epoch(), &host("none").host()).unwrap();
    assert_eq!(first.len(), 1, "slot 1 of 1 is selected");
    let again = p.compute(&epoch(), &no_chain.host()).unwrap();
    assert_eq!(again, first, "the same bytes, without a chain read");
    let next = EpochContext { epoch_id: 4, ..epoch() };
    assert!(p.compute(&next, &no_chain.host()).is_err(), "another epoch is computed anew");

    let p = lite();
    let failed = p.compute(&epoch(), &host("balance-error").host()).unwrap_err();
    assert!(failed.contains("internal error"), "{failed}");
    assert_eq!(p.compute(&epoch(), &host("none").host()).unwrap(), first, "a failure is not kept");
}
