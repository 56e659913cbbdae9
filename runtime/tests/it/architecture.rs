//! ARCHITECTURE.md's crate tables are what `cargo metadata` says: every
//! crate of both workspaces named, at its path, with every workspace crate it
//! depends on (normal and build dependencies) and no other, and listed in
//! dependency order. A dependency added without updating the map fails here.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    process::Command,
};

use lite_node_testkit::workspace_root;
use serde_json::Value;

/// Crate name → (path relative to the checkout, its workspace dependencies).
type Crates = BTreeMap<String, (String, BTreeSet<String>)>;

/// What `cargo metadata` says of the workspace at `dir`; `outside` names
/// crates of another workspace that count as edges (the compute package's
/// `lite-node-plugin-api`, which it takes from the registry or its patch).
fn metadata(dir: &Path, outside: &[&str]) -> Crates {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let members: BTreeSet<&str> =
        meta["workspace_members"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let packages: Vec<&Value> =
        meta["packages"].as_array().unwrap().iter().filter(|p| members.contains(p["id"].as_str().unwrap())).collect();
    let names: BTreeSet<&str> =
        packages.iter().map(|p| p["name"].as_str().unwrap()).chain(outside.iter().copied()).collect();
    let root = workspace_root();
    packages
        .iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().unwrap());
            let path = manifest.parent().unwrap().strip_prefix(&root).unwrap().display().to_string();
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null() || d["kind"] == "build")
                .map(|d| d["name"].as_str().unwrap())
                .filter(|name| names.contains(name))
                .map(str::to_owned)
                .collect();
            (p["name"].as_str().unwrap().to_owned(), (path, deps))
        })
        .collect()
}

/// The table under `header` in `doc`, rows in order.
fn table(doc: &str, header: &str) -> Vec<(String, String, BTreeSet<String>)> {
    let rows = doc.split(&format!("\n{header}\n")).nth(1).unwrap_or_else(|| panic!("no table `{header}`"));
    let cell = |c: &str| c.trim().trim_matches('`').to_owned();
    rows.lines()
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').collect();
            assert_eq!(cells.len(), 3, "a row of three cells: {l}");
            let deps = match cells[2].trim() {
                "—" | "-" | "" => BTreeSet::new(),
                list => list.split(',').map(cell).collect(),
            };
            (cell(cells[0]), cell(cells[1]), deps)
        })
        .collect()
}

/// Every difference between the map's table and the metadata, each naming the fix.
fn differences(rows: &[(String, String, BTreeSet<String>)], crates: &Crates) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut listed = BTreeSet::new();
    for (name, path, deps) in rows {
        let Some((real_path, real_deps)) = crates.get(name) else {
            wrong.push(format!("`{name}` is in the table but is no workspace crate: remove its row"));
            continue;
        };
        if path != real_path {
            wrong.push(format!("`{name}` lives in `{real_path}`, the table says `{path}`"));
        }
        for d in real_deps.difference(deps) {
            wrong.push(format!("`{name}` depends on `{d}`: add it to its row"));
        }
        for d in deps.difference(real_deps) {
            wrong.push(format!("`{name}` does not depend on `{d}`: take it off its row"));
        }
        for d in deps.iter().filter(|d| !listed.contains(*d) && crates.contains_key(*d)) {
            wrong.push(format!(
                "`{name}` is listed before `{d}`, which it depends on: keep the rows in dependency order"
            ));
        }
        listed.insert(name.clone());
    }
    for name in crates.keys().filter(|n| !listed.contains(*n)) {
        wrong.push(format!("`{name}` is a workspace crate the table does not name: add a row for it"));
    }
    wrong
}

#[test]
fn architecture_md_names_every_crate_and_every_dependency_edge_of_both_workspaces() {
    let root = workspace_root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut wrong = Vec::new();
    for (header, dir, outside) in [
        ("| crate | path | depends on (workspace crates) |", root.clone(), &[][..]),
        (
            "| compute crate | path | depends on (workspace crates) |",
            root.join("computes"),
            &["lite-node-plugin-api"][..],
        ),
    ] {
        let rows = table(&doc, header);
        assert!(!rows.is_empty(), "the table `{header}` has no rows");
        wrong.extend(differences(&rows, &metadata(&dir, outside)));
    }
    assert!(wrong.is_empty(), "ARCHITECTURE.md's crate tables disagree with cargo metadata:\n{}", wrong.join("\n"));
}

/// The comparison can fail: an edge the table lacks, one it invents, a crate
/// it forgets and an order it breaks are each named.
#[test]
fn the_crate_table_check_names_each_kind_of_drift() {
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    let crates: Crates = [
        ("a".to_owned(), ("x/a".to_owned(), set(&[]))),
        ("b".to_owned(), ("x/b".to_owned(), set(&["a"]))),
        ("c".to_owned(), ("x/c".to_owned(), set(&["a", "b"]))),
    ]
    .into();
    let row = |n: &str, deps: &[&str]| (n.to_owned(), format!("x/{n}"), set(deps));
    assert!(differences(&[row("a", &[]), row("b", &["a"]), row("c", &["a", "b"])], &crates).is_empty());
    let wrong = differences(&[row("b", &["a"]), row("a", &[]), row("c", &["b", "z"])], &crates).join("\n");
    for expected in ["`b` is listed before `a`", "`c` depends on `a`: add it", "`c` does not depend on `z`"] {
        assert!(wrong.contains(expected), "{expected}: {wrong}");
    }
    let forgot = differences(&[row("a", &[]), row("b", &["a"])], &crates).join("\n");
    assert!(forgot.contains("`c` is a workspace crate the table does not name"), "{forgot}");
}

/// Every production source file of the runtime's workspace (`src/` of each
/// member), with its text up to its first `#[cfg(test)]` (the unit tests
/// sit at the end of a file), by its path from the checkout.
fn production_sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = workspace_root();
    let mut files = Vec::new();
    for (_, (dir, _)) in metadata(&root, &[]) {
        let src = root.join(&dir).join("src");
        if src.is_dir() && dir != "tests" {
            walk(&src, &mut files);
        }
    }
    files.sort();
    assert!(files.len() > 100, "the production sources: {} files", files.len());
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.split("#[cfg(test)]").next().unwrap().to_owned();
            (path.strip_prefix(&root).unwrap().display().to_string(), text)
        })
        .collect()
}

/// Where `text` parses hex digits into a number by hand (`from_str_radix`
/// with radix 16): what a JSON-RPC quantity parser does.
fn hex_parses(text: &str) -> usize {
    text.match_indices("from_str_radix(")
        .filter(|(at, _)| {
            let args = &text[at + "from_str_radix(".len()..];
            let mut depth = 0usize;
            let close = args
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    _ => false,
                })
                .map_or(args.len(), |(i, _)| i);
            args[..close].trim_end().ends_with("16")
        })
        .count()
}

/// ARCHITECTURE.md: hex quantities are parsed only in `protocol::quantity`,
/// so every room reads `0x…` answers alike (and refuses the same junk).
#[test]
fn hex_quantities_are_parsed_only_in_protocol_quantity() {
    // Hex that is not a JSON-RPC quantity, with why.
    let allowed = [
        ("protocol/src/quantity.rs", "the quantity parser itself"),
        ("protocol/src/canonical_json.rs", "a JSON string's \\u escape (4 hex digits), not a quantity"),
    ];
    let found: Vec<String> = production_sources()
        .iter()
        .filter(|(path, text)| hex_parses(text) > 0 && !allowed.iter().any(|(a, _)| a == path))
        .map(|(path, _)| path.clone())
        .collect();
    assert!(
        found.is_empty(),
        "hex parsed by hand outside protocol/src/quantity.rs (use lite_node_protocol::quantity): {found:#?}"
    );
    assert_eq!(hex_parses("u64::from_str_radix(t.trim_start_matches(\"0x\"), 16)"), 1, "the check can fail");
    assert_eq!(hex_parses("u8::from_str_radix(t, 10)"), 0);
}

/// The spawns in `text`: tokio tasks, threads, task-set members, blocking
/// sections and child processes (`spawn(` and `spawn_blocking(` calls; the
/// supervisor's `spawn_critical` and `spawn_restarting` are its own).
fn spawns(text: &str) -> usize {
    text.matches("spawn(").count() + text.matches("spawn_blocking(").count()
}

/// ARCHITECTURE.md: a task that lives as long as its process starts through
/// the process's `Supervisor` (the validator: `service::run`'s task set,
/// whose first ending stops it); every other spawn belongs to code that
/// awaits, joins or drops it. Each file that spawns is listed here with how
/// many and why: a new spawn fails this test until it is said which it is.
#[test]
fn every_spawn_is_supervised_or_owned_by_its_caller() {
    let owners: &[(&str, usize, &str)] = &[
        ("runtime/crates/core/src/supervisor.rs", 3, "the Supervisor: the process's long-lived tasks, watched"),
        (
            "validator/src/service.rs",
            15,
            "the validator's components: service::run's task set (its supervisor); the store opened off the async threads, awaited",
        ),
        (
            "validator/src/store.rs",
            4,
            "an epoch's commit, its outcome on chain, archives and retention off the async threads, each awaited",
        ),
        ("validator/src/aggregator.rs", 3, "the component's loops, in a task set it awaits"),
        ("validator/src/dequeuer.rs", 3, "the component's loops, in a task set it awaits"),
        ("validator/src/finalizer.rs", 3, "the component's loops, in a task set it awaits"),
        ("validator/src/gateway.rs", 1, "the rate table's pruner, aborted when `serve` returns"),
        ("runtime/crates/node/src/node/work.rs", 4, "an epoch's stages, joined before it is recorded; blocking writes"),
        ("runtime/crates/node/src/node/mod.rs", 1, "the package's load, a blocking section awaited"),
        ("runtime/crates/node/src/submission/ledger.rs", 1, "a commit round, a blocking section awaited"),
        ("runtime/crates/node/src/submission/submitter.rs", 3, "the collector probe, ending once it answers; writes"),
        ("runtime/crates/compute/src/cargo_build.rs", 2, "cargo, and the reader of its output, joined"),
        ("runtime/crates/compute/src/selection.rs", 1, "an assignment, a blocking section awaited"),
        ("runtime/crates/compute/src/executor.rs", 3, "a compute's thread, awaited; the chain probe, until it answers"),
        ("runtime/crates/collector/src/lib.rs", 1, "one answer, finished even when its caller goes"),
        ("runtime/crates/chain/src/ws.rs", 1, "the WebSocket link, ending with its handle"),
        (
            "runtime/crates/chain/src/rpc.rs",
            3,
            "calls on the I/O runtime, awaited; the freshness prober, ending with its HttpRpc",
        ),
        ("runtime/crates/gossip/src/lib.rs", 1, "the swarm, ending with the last `Gossip` handle"),
        (
            "runtime/src/commands/compute/run.rs",
            1,
            "the package's load (compute run, --replay), a blocking section awaited",
        ),
        ("runtime/crates/devnet/src/", 0, "the devnet's children, relays and drills, all stopped with it"),
    ];
    let mut wrong = Vec::new();
    for (path, text) in production_sources() {
        let n = spawns(&text);
        match owners.iter().find(|(p, ..)| *p == path || (p.ends_with('/') && path.starts_with(p))) {
            Some((p, ..)) if p.ends_with('/') => {}
            Some((_, listed, _)) if *listed == n => {}
            Some((_, listed, _)) => wrong.push(format!("{path}: {n} spawns, {listed} listed")),
            None if n > 0 => wrong.push(format!("{path}: {n} spawns, none listed")),
            None => {}
        }
    }
    for (path, ..) in owners {
        assert!(workspace_root().join(path).exists(), "{path} is listed but gone: take it out of the list");
    }
    assert!(
        wrong.is_empty(),
        "tasks spawned where the list does not say why: a long-lived one goes through the process's Supervisor \
         (core/src/supervisor.rs); a short one is awaited, joined or dropped by its owner — then list the file \
         here with how many and why:\n{wrong:#?}"
    );
    assert_eq!(spawns("tokio::spawn(a); x.spawn(b); tokio::task::spawn_blocking(c)"), 3, "the count can fail");
}
