//! The slot selection against the protocol's conformance vectors, against an
//! independent Python implementation (CPython's own `random` for genesis),
//! and against the properties every assignment must have.

use std::{path::PathBuf, process::Command};

use lite_node_plugin_api::AssignmentRequest;
use proptest::prelude::*;
use serde_json::{Value, json};
use slot_selection::{SLOTS_PER_EPOCH, assign, assignments, parse_block_hash, slot_assignment, sorted_pools};

fn project_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

/// The crate's answer for a case, in the vectors' JSON shape.
fn answer(case: &Value) -> Value {
    let pools: Vec<String> = case["pools"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_owned()).collect();
    let request = AssignmentRequest {
        epoch_id: case["epoch_id"].as_u64().unwrap(),
        block_hash: case["block_hash"].as_str().unwrap().into(),
        total_slots: case["total_slots"].as_u64().unwrap(),
        pools: pools.iter().map(|p| p.as_str().into()).collect(),
    };
    let out = assignments(&request).unwrap();
    json!({
        "epoch_id": request.epoch_id,
        "seed": out.seed.as_str(),
        "total_slots": request.total_slots,
        "selected": out.selected.iter().map(|s| json!({"slot_id": s.slot_id, "pool": out.pools[s.pool as usize].as_str()})).collect::<Vec<_>>(),
    })
}

fn check(case: &Value) {
    let expected = &case["expected"];
    let got = answer(case);
    assert_eq!(got["seed"], expected["seed"], "seed of epoch {}", case["epoch_id"]);
    assert_eq!(got, *expected, "epoch {} total {}", case["epoch_id"], case["total_slots"]);
}

#[test]
fn conformance_vectors_match_exactly() {
    let ours = project_file("tests/data/conformance/slot_selection_cases.json");
    let text = std::fs::read_to_string(&ours).unwrap();
    let shared = project_file("../shared/conformance/slot_selection_cases.json");
    if let Ok(upstream) = std::fs::read_to_string(&shared) {
        assert_eq!(text, upstream, "tests/data copy differs from {}", shared.display());
    }
    let cases: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert!(cases.len() >= 10);
    assert!(cases.iter().any(|c| c["epoch_id"] == 0), "the vectors include genesis");
    for case in &cases {
        check(case);
    }
}

/// A small deterministic generator for the independent cross-check.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn hex(&mut self, bytes: usize) -> String {
        (0..bytes).map(|_| format!("{:02x}", self.next() as u8)).collect()
    }
}

#[test]
fn agrees_with_the_python_reference_on_generated_cases() {
    let mut rng = SplitMix(2024);
    let mut cases = Vec::new();
    let totals = [0u64, 1, 2, 3, 999, 1000, 1001, 4096, 25_000];
    for (n, &total) in totals.iter().enumerate() {
        for epoch in [0u64, 1, 7 + n as u64, u32::MAX as u64 + 3, u64::MAX] {
            if epoch == 0 && total > 3000 {
                continue; // Python's genesis is slow; the small totals cover it.
            }
            let pools: Vec<String> = (0..1 + rng.next() % 23)
                .map(|_| {
                    let a = rng.hex(20);
                    // Mixed case matters: Python sorts 'A' before 'a'.
                    if rng.next().is_multiple_of(3) { format!("0x{}", a.to_uppercase()) } else { format!("0x{a}") }
                })
                .collect();
            let hash = if rng.next().is_multiple_of(2) { format!("0x{}", rng.hex(32)) } else { rng.hex(32) };
            cases.push(json!({"epoch_id": epoch, "block_hash": hash, "total_slots": total, "pools": pools}));
        }
    }
    let dir = tempfile_dir();
    let file = dir.join("cases.json");
    std::fs::write(&file, serde_json::to_vec(&cases).unwrap()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/slot_selection.py");
    let out = Command::new("python3").arg(&script).arg("--cases").arg(&file).output().expect("python3 runs");
    assert!(out.status.success(), "reference failed: {}", String::from_utf8_lossy(&out.stderr));
    let expected: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(expected.len(), cases.len());
    for (case, expected) in cases.iter().zip(&expected) {
        assert_eq!(answer(case), *expected, "case {case}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("slot-selection-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn selection_properties(epoch in 1u64.., hash in any::<[u8; 32]>(), total in 0u64..20_000, pools in 1usize..50) {
        let a = assign(epoch, &hash, total, pools).unwrap();
        prop_assert_eq!(a.selected.len() as u64, total.min(SLOTS_PER_EPOCH));
        prop_assert!(a.selected.windows(2).all(|w| w[0].0 < w[1].0), "sorted and distinct");
        prop_assert!(a.selected.iter().all(|&(s, p)| (1..=total).contains(&s) && p < pools));
        prop_assert_eq!(&a, &assign(epoch, &hash, total, pools).unwrap(), "deterministic");
        for &(slot, pool) in a.selected.iter().take(5) {
            prop_assert_eq!(slot_assignment(epoch, &hash, total, pools, slot).unwrap(), Some(pool));
        }
    }

    #[test]
    fn genesis_selects_every_slot(hash in any::<[u8; 32]>(), total in 0u64..3000, pools in 1usize..40) {
        let a = assign(0, &hash, total, pools).unwrap();
        prop_assert_eq!(a.selected.len() as u64, total);
        prop_assert!(a.selected.iter().enumerate().all(|(i, &(s, p))| s == i as u64 + 1 && p < pools));
    }
}

#[test]
fn pools_are_assigned_roughly_uniformly() {
    let hash = parse_block_hash(&"5a".repeat(32)).unwrap();
    for epoch in [0u64, 1, 2] {
        let pools = 10;
        let a = assign(epoch, &hash, 10_000, pools).unwrap();
        let mut counts = vec![0usize; pools];
        for &(_, p) in &a.selected {
            counts[p] += 1;
        }
        let expected = a.selected.len() / pools;
        // Binomial standard deviation is ~9.5 for 1000 draws and ~30 for
        // 10,000: six of them either way.
        let slack = if epoch == 0 { 180 } else { 57 };
        for c in counts {
            assert!(c.abs_diff(expected) <= slack, "epoch {epoch}: {c} vs {expected}");
        }
    }
}

#[test]
fn pools_sort_as_python_sorts_strings() {
    let pools = ["0xab", "0xAB", "0x0a", "0xa"];
    assert_eq!(sorted_pools(&pools), ["0x0a", "0xAB", "0xa", "0xab"]);
}

mod decide {
    use lite_node_plugin_api::{EpochContext, testing::TestHost};
    use slot_selection::{assign, decide, parse_block_hash};

    fn epoch(epoch_id: u64, slot_id: u64, total_slots: u64) -> EpochContext {
        EpochContext {
            epoch_id,
            begin: 100,
            end: 100,
            day_id: 1,
            slot_id,
            total_slots,
            anchor_block: 0,
            namespace: "devnet-UNISWAPV3-ETH".into(),
            project_type: "baseSnapshot".into(),
        }
    }

    const HASH: &str = "0x9f2c5a0e4b7d1c3e8a6f0b2d4c6e8a0b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1f";
    const POOLS: [&str; 3] = ["0xcc", "0xaa", "0xbb"];

    #[test]
    fn a_selected_slot_reports_true_first_and_gets_its_pool() {
        let a = assign(42, &parse_block_hash(HASH).unwrap(), 2500, 3).unwrap();
        let (slot, pool) = a.selected[17];
        let host = TestHost::default();
        let pick = decide(&epoch(42, slot, 2500), &host.host(), HASH, &POOLS).unwrap();
        assert_eq!(pick, Some(["0xaa", "0xbb", "0xcc"][pool]));
        assert_eq!(host.reports(), vec![(42, true, slot)]);
    }

    #[test]
    fn an_idle_slot_reports_false_and_gets_nothing() {
        let a = assign(42, &parse_block_hash(HASH).unwrap(), 2500, 3).unwrap();
        let idle = (1..=2500).find(|s| a.selected.iter().all(|(t, _)| t != s)).unwrap();
        let host = TestHost::default();
        assert_eq!(decide(&epoch(42, idle, 2500), &host.host(), HASH, &POOLS).unwrap(), None);
        assert_eq!(host.reports(), vec![(42, false, idle)]);
    }

    #[test]
    fn genesis_selects_every_registered_slot() {
        let host = TestHost::default();
        for slot in 1..=5 {
            assert!(decide(&epoch(0, slot, 5), &host.host(), HASH, &POOLS).unwrap().is_some());
        }
        assert!(host.reports().iter().all(|&(e, selected, _)| e == 0 && selected));
    }

    #[test]
    fn a_bad_block_hash_is_an_error_and_nothing_is_reported() {
        let host = TestHost::default();
        let err = decide(&epoch(3, 1, 5), &host.host(), "0x1234", &POOLS).unwrap_err();
        assert!(err.contains("not 32 bytes of hex"), "{err}");
        assert!(host.reports().is_empty());
    }
}
