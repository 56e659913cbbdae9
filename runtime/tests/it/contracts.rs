//! The market's contracts (`contracts/`): the checked-in ABI and bytecode
//! are what the pinned solc makes of the sources, the production contract's
//! rules hold on a real anvil, and it carries no drill hook.

use std::process::{Command, Output};

use lite_node_testkit::workspace_root;

/// `node <script> <args>` from the checkout's root.
fn node(script: &str, args: &[&str]) -> Output {
    Command::new("node")
        .arg(workspace_root().join(script))
        .args(args)
        .current_dir(workspace_root())
        .output()
        .expect("node runs (Node.js 20+; ./init.sh test installs the devnet's npm packages)")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn the_checked_in_artifacts_are_what_the_pinned_solc_compiles() {
    let out = node("contracts/compile.js", &["--check"]);
    assert!(out.status.success(), "run `node contracts/compile.js` and commit contracts/out:\n{}", text(&out));
}

/// contracts/test/roles.js on its own anvil: every gated function refused to
/// a stranger, releases only contiguous (two releasers racing: one wins),
/// the node count derived from the registry, days on the market's schedule,
/// finalization counted from current validators only, the drills' hooks.
#[test]
fn the_production_contract_gates_every_role_and_releases_epochs_only_contiguously() {
    let out = node("contracts/test/roles.js", &[]);
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    let summary = text.lines().find(|l| l.ends_with(" failed")).unwrap_or_else(|| panic!("a summary line:\n{text}"));
    let passed: u32 = summary.split(' ').next().and_then(|n| n.parse().ok()).expect("a count");
    assert!(passed >= 80 && summary.ends_with(", 0 failed"), "{summary}\n{text}");
}

#[test]
fn the_production_contract_has_no_drill_hook() {
    let read = |rel: &str| std::fs::read_to_string(workspace_root().join(rel)).unwrap();
    let source = read("contracts/src/ProtocolState.sol");
    let artifact: serde_json::Value = serde_json::from_str(&read("contracts/out/ProtocolState.json")).unwrap();
    let functions: Vec<&str> = artifact["abi"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "function")
        .filter_map(|item| item["name"].as_str())
        .collect();
    assert!(functions.contains(&"releaseEpoch") && functions.contains(&"registerSlot"), "{functions:?}");
    for hook in ["emitMalformedRelease", "releaseEpochWithId", "setTotalNodeCount"] {
        assert!(!source.contains(hook), "the production contract's source names {hook}");
        assert!(!functions.contains(&hook), "the production contract's ABI has {hook}");
    }
    let drills: serde_json::Value = serde_json::from_str(&read("contracts/out/ProtocolStateDrills.json")).unwrap();
    assert!(drills["abi"].to_string().contains("emitMalformedRelease"), "the drills contract keeps the hooks");
}
