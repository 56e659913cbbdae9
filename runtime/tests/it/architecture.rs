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
