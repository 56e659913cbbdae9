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

/// Every event and function the node, validators and tests decode with
/// (`protocol/src/contracts.rs`) is in the production contract's ABI with
/// the same parameter types, indexed flags and return types: the bindings
/// cannot drift from what the market deploys.
#[test]
fn the_protocol_crates_bindings_match_the_production_abi() {
    let read = |rel: &str| std::fs::read_to_string(workspace_root().join(rel)).unwrap();
    let artifact: serde_json::Value = serde_json::from_str(&read("contracts/out/ProtocolState.json")).unwrap();
    let types = |params: &serde_json::Value| -> Vec<(String, bool)> {
        params
            .as_array()
            .map(|ps| ps.iter().map(|p| (p["type"].as_str().unwrap().to_owned(), p["indexed"] == true)).collect())
            .unwrap_or_default()
    };
    let abi: Vec<Declaration> = artifact["abi"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function" || i["type"] == "event")
        .map(|i| {
            let kind = i["type"].as_str().unwrap().to_owned();
            (kind, i["name"].as_str().unwrap().to_owned(), types(&i["inputs"]), types(&i["outputs"]))
        })
        .collect();
    let declared = solidity_declarations(&read("protocol/src/contracts.rs"));
    assert!(declared.len() >= 25, "the parser found the declarations: {declared:?}");
    for item in &declared {
        assert!(
            abi.contains(item),
            "protocol/src/contracts.rs declares {item:?}, which contracts/out/ProtocolState.json does not have"
        );
    }
}

/// `(kind, name, params, returns)` of each `function`/`event` in a sol!
/// block, a parameter as `(type, indexed)`.
type Declaration = (String, String, Vec<(String, bool)>, Vec<(String, bool)>);

fn solidity_declarations(source: &str) -> Vec<Declaration> {
    let code: String = source.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join(" ");
    let body = &code[code.find("sol! {").expect("a sol! block") + 6..];
    // The parameters inside the parentheses that open at `at`.
    let group = |s: &str| -> Vec<(String, bool)> {
        let open = s.find('(').unwrap();
        let mut depth = 0;
        let close = s[open..]
            .char_indices()
            .find_map(|(i, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                (depth == 0).then_some(open + i)
            })
            .unwrap();
        s[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                let words: Vec<&str> = p.split_whitespace().collect();
                (words[0].to_owned(), words.contains(&"indexed"))
            })
            .collect()
    };
    body.split(';')
        .map(str::trim)
        .filter_map(|decl| {
            let (kind, rest) = decl.split_once(' ')?;
            if kind != "function" && kind != "event" {
                return None;
            }
            let name = rest[..rest.find('(')?].trim().to_owned();
            let params = group(rest);
            let returns = rest.find("returns").map(|at| group(&rest[at..])).unwrap_or_default();
            Some((kind.to_owned(), name, params, returns))
        })
        .collect()
}
