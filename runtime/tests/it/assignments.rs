//! `lite-node assignments`: the observer's view of slot selection, computed by
//! the bundled compute package, against every conformance vector.

use std::fs;

use lite_node_testkit::data;
use serde_json::{Value, json};

use crate::support::{Node, Run};

fn cases() -> Vec<Value> {
    serde_json::from_str(&fs::read_to_string(data("conformance/slot_selection_cases.json")).unwrap()).unwrap()
}

fn query(node: &Node, case: &Value, extra: &[&str]) -> Run {
    let pools: Vec<&str> = case["pools"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    let (epoch, total) = (case["epoch_id"].to_string(), case["total_slots"].to_string());
    let mut args = vec!["assignments", "--epoch-id", &epoch, "--block-hash", case["block_hash"].as_str().unwrap()];
    args.extend(["--total-slots", &total]);
    let joined = pools.join(",");
    args.extend(["--pools", &joined]);
    args.extend(extra);
    node.run(&args)
}

#[test]
fn every_conformance_case_matches_through_the_cli() {
    let node = Node::new();
    for case in cases() {
        let run = query(&node, &case, &[]);
        run.assert_ok();
        let got: Value = serde_json::from_str(run.stdout.trim()).unwrap();
        assert_eq!(got, case["expected"], "epoch {} total {}", case["epoch_id"], case["total_slots"]);
        // Field order as documented: epoch_id, seed, total_slots, selected.
        assert!(run.stdout.starts_with(&format!("{{\"epoch_id\":{},\"seed\":", case["epoch_id"])), "{}", run.stdout);
    }
}

#[test]
fn one_slot_and_a_pools_file() {
    let node = Node::new();
    let case = &cases()[1];
    let expected = &case["expected"]["selected"];
    let picked = &expected[0];
    let slot = picked["slot_id"].to_string();
    let run = query(&node, case, &["--slot", &slot]);
    run.assert_ok();
    let got: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(
        got,
        json!({"epoch_id": case["epoch_id"], "slot_id": picked["slot_id"], "selected": true, "pool": picked["pool"]})
    );

    let selected: Vec<u64> = expected.as_array().unwrap().iter().map(|s| s["slot_id"].as_u64().unwrap()).collect();
    let idle = (1..).find(|s| !selected.contains(s)).unwrap().to_string();
    let run = query(&node, case, &["--slot", &idle]);
    run.assert_ok();
    let got: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(got["selected"], json!(false));
    assert_eq!(got["pool"], Value::Null);

    let file = node.cwd.path().join("pools.txt");
    let pools: Vec<&str> = case["pools"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    fs::write(&file, format!("# active pools\n{}\n\n", pools.join("\n"))).unwrap();
    let (epoch, total) = (case["epoch_id"].to_string(), case["total_slots"].to_string());
    let args = ["assignments", "--epoch-id", &epoch, "--block-hash", case["block_hash"].as_str().unwrap()];
    let run = node.run(&[&args[..], &["--total-slots", &total, "--pools-file", file.to_str().unwrap()]].concat());
    run.assert_ok();
    assert_eq!(serde_json::from_str::<Value>(run.stdout.trim()).unwrap(), case["expected"]);
}

#[test]
fn bad_input_is_a_clear_error_with_exit_code_2() {
    let node = Node::new();
    let hash = format!("0x{}", "11".repeat(32));
    let base = ["assignments", "--epoch-id", "5", "--total-slots", "10"];
    let checks: [(Vec<&str>, &str); 6] = [
        (vec!["--block-hash", "0x1234", "--pools", "0xaa"], "--block-hash 0x1234 is not 32 bytes of hex"),
        (vec!["--block-hash", &hash], "no pools: give --pools"),
        (vec!["--block-hash", &hash, "--pools", "0xaa", "--slot", "0"], "--slot 0 is outside 1..=10"),
        (vec!["--block-hash", &hash, "--pools", "0xaa", "--slot", "11"], "--slot 11 is outside 1..=10"),
        (
            vec!["--block-hash", &hash, "--pools", "0xaa", "--pools-file", "/nonexistent/pools"],
            "cannot read --pools-file",
        ),
        (vec!["--block-hash", &hash, "--pools", ","], "no pools"),
    ];
    for (extra, message) in checks {
        let run = node.run(&[&base[..], &extra].concat());
        assert_eq!(run.code, 2, "{extra:?}: {run:?}");
        assert!(run.stderr.contains(message), "{extra:?}: expected `{message}` in {}", run.stderr);
        assert!(run.stdout.is_empty(), "no partial output: {}", run.stdout);
    }
    let run = node.run(&[
        "assignments",
        "--epoch-id",
        "five",
        "--block-hash",
        &hash,
        "--total-slots",
        "1",
        "--pools",
        "0xaa",
    ]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("invalid value 'five' for '--epoch-id <E>'"), "{}", run.stderr);
}
