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

/// docs/commands.md's observer's check, run as written: each `$ lite-node
/// assignments` line (`…` standing for the first one's arguments) prints
/// the line under it.
#[test]
fn the_observers_check_in_the_commands_doc_prints_what_it_shows() {
    let doc = fs::read_to_string(lite_node_testkit::workspace_root().join("docs/commands.md")).unwrap();
    let block = doc.split("```sh\n$ lite-node assignments").nth(1).expect("the observer's check in docs/commands.md");
    let block = format!("$ lite-node assignments{}", block.split("```").next().unwrap());
    let mut lines = block.lines().peekable();
    let mut first: Option<Vec<String>> = None;
    let node = Node::new();
    let mut checked = 0;
    while let Some(line) = lines.next() {
        let Some(command) = line.strip_prefix("$ lite-node ") else { continue };
        let mut command = command.to_owned();
        while command.ends_with('\\') {
            command.pop();
            command.push_str(lines.next().expect("a continued line"));
        }
        let mut args: Vec<String> = Vec::new();
        for word in command.split_whitespace() {
            match (word, &first) {
                ("…", Some(first)) => args.extend(first[1..].iter().cloned()),
                _ => args.push(word.to_owned()),
            }
        }
        first.get_or_insert_with(|| args.clone());
        let shown = lines.next().expect("the output under the command");
        let run = node.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        run.assert_ok();
        assert_eq!(run.stdout.trim(), shown.trim(), "`lite-node {command}` as docs/commands.md shows it");
        checked += 1;
    }
    assert_eq!(checked, 2, "the doc's two commands");
}
