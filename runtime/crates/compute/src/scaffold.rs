//! `lite-node compute new DIR`: a compute package that starts outside this
//! repository — a workspace with one processor crate (from the template), the
//! market's slot-selection crate, the exact plugin interface this node builds
//! against (patched in by a relative path), a projects.json naming the
//! processor, an author's README, and a git repository with a first commit.

use std::{
    fs,
    path::{Path, PathBuf},
};

use lite_node_core::BadInput;

mod files {
    include!(concat!(env!("OUT_DIR"), "/scaffold_files.rs"));
}

/// What was written.
#[derive(Debug)]
pub struct Scaffolded {
    pub dir: PathBuf,
    /// The crate (`my-compute`), its library (`my_compute`) and processor class.
    pub crate_name: String,
    pub library: String,
    pub class_name: String,
    pub project_type: String,
    /// The first commit's id.
    pub commit: String,
    /// Whether `Cargo.lock` is in it.
    pub locked: bool,
}

/// Writes a new package into `dir` (which must not exist or be empty), named
/// `name` (default: the directory's name); `cargo` pins its dependencies.
pub fn new_package(dir: &Path, name: Option<&str>, cargo: &Path) -> anyhow::Result<Scaffolded> {
    let crate_name = match name {
        Some(n) => n.to_owned(),
        None => dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| BadInput(format!("{}: give the package a name with --name", dir.display())))?
            .to_lowercase()
            .replace(['_', ' '], "-"),
    };
    check_name(&crate_name)?;
    if dir.exists() && fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(BadInput(format!(
            "{} already exists and is not empty: compute new writes a fresh package; pick a new directory",
            dir.display()
        ))
        .into());
    }
    let library = crate_name.replace('-', "_");
    let camel: String = crate_name
        .split('-')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect();
    let class_name = format!("{camel}Processor");
    let project_type = {
        let mut c = camel.chars();
        c.next().map(|f| f.to_ascii_lowercase().to_string() + c.as_str()).unwrap_or_default()
    };
    let api = super::PluginApiSource::embedded_files();
    let wanted = super::cargo_build::wanted_requirement(lite_node_plugin_api::PLUGIN_API_VERSION);

    let mut out: Vec<(PathBuf, String)> = Vec::new();
    out.push(("Cargo.toml".into(), workspace_manifest(&crate_name, &wanted)));
    // `data/`: what a node run here (compute run, compute fetch) keeps.
    out.push((".gitignore".into(), "/target\n/data\n".into()));
    for (rel, text) in api {
        out.push((Path::new("plugin-api").join(rel), (*text).to_owned()));
    }
    let manifest = |text: &str| text.replace("license.workspace = true\n", "");
    for (rel, text) in files::COMPUTE_KIT {
        // compute-kit stays under this project's license, whatever the author picks.
        let text = text.replace("license.workspace = true\n", "license = \"Apache-2.0\"\n");
        out.push((Path::new("compute-kit").join(rel), text));
    }
    for (rel, text) in files::TEMPLATE {
        let text = manifest(text)
            .replace("compute-template", &crate_name)
            .replace("compute_template", &library)
            .replace("TemplateProcessor", &class_name)
            .replace("\"poolState\"", &format!("\"{project_type}\""))
            .replace(
                "description = \"Starting point for compute authors: copy this crate\"",
                &format!("description = \"{crate_name}: a compute package processor\""),
            );
        out.push((Path::new(&crate_name).join(rel), text));
    }
    out.push(("slot-selection/Cargo.toml".into(), SLOT_SELECTION_MANIFEST.to_owned()));
    for (rel, text) in files::SLOT_SELECTION {
        out.push((Path::new("slot-selection").join(rel), (*text).to_owned()));
    }
    let projects = serde_json::json!({"config": [{
        "project_type": project_type,
        "processor": {"module": library, "class_name": class_name},
        "preload_tasks": ["block_details"],
        // One snapshot per pool: each project id names its pool.
        "per_pool": true,
        // Ethereum mainnet's Uniswap V3 USDC/WETH at 0.05% and at 0.3% (the
        // devnet puts its own pools here; the README says so).
        "pools": ["0x88e6a0c2ddd26feeb64f039a2c41296fcb3f5640", "0x8ad599c3a0ff1de082011efddc58f1908eb6e6d8"],
    }]});
    out.push(("projects.json".into(), serde_json::to_string_pretty(&projects).expect("JSON") + "\n"));
    out.push(("README.md".into(), author_readme(&crate_name, &library, &class_name, &project_type, &wanted)));

    for (rel, text) in &out {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| anyhow::anyhow!("creating {}: {e}", parent.display()))?;
        }
        fs::write(&path, text).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    // The dependencies pinned in the first commit (from what cargo has
    // fetched, else the registry); without a network, the first build does.
    let locked = super::cargo_build::lock_dependencies(cargo, dir)
        .inspect_err(|e| tracing::warn!("{e}; the first build writes Cargo.lock (commit it then)"))
        .is_ok();
    let commit = first_commit(dir, &crate_name)?;
    Ok(Scaffolded { dir: dir.to_path_buf(), crate_name, library, class_name, project_type, commit, locked })
}

fn check_name(name: &str) -> Result<(), BadInput> {
    let ident = name.replace('-', "_");
    let why = if !name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
        "it must start with a lower-case letter".to_owned()
    } else if let Some(c) = name.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')) {
        format!("`{c}` is not a lower-case letter, a digit or a dash")
    } else if name.ends_with('-') {
        "it ends with a dash".to_owned()
    } else if TAKEN.contains(&name) {
        format!("the package holds or depends on a crate of that name ({})", TAKEN.join(", "))
    } else if ["test", "std", "core", "alloc", "proc_macro"].contains(&ident.as_str()) {
        format!("`{ident}` is a crate Rust itself provides, so the library's name would clash with it")
    } else if RUST_KEYWORDS.contains(&ident.as_str()) {
        format!("`{ident}` is a Rust keyword, and the library's name is a Rust identifier")
    } else {
        return Ok(());
    };
    Err(BadInput(format!(
        "`{name}` cannot name a compute crate: {why}; pick another with --name (e.g. --name my-market-compute)"
    )))
}

/// The package's other crates and its processor's dependencies.
const TAKEN: &[&str] = &[
    "slot-selection",
    "plugin-api",
    "compute-kit",
    "lite-node-plugin-api",
    "abi-stable",
    "serde-json",
    "sha2",
    "alloy-primitives",
    "alloy-sol-types",
];

/// Names a library cannot take (its crate name is a Rust identifier).
const RUST_KEYWORDS: &[&str] = &[
    "as",
    "async",
    "await",
    "box",
    "break",
    "const",
    "continue",
    "crate",
    "do",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "macro",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "try",
    "type",
    "typeof",
    "unsafe",
    "unsized",
    "use",
    "virtual",
    "where",
    "while",
    "yield",
    "abstract",
    "become",
    "test",
    "std",
    "core",
    "alloc",
    "proc_macro",
];

fn workspace_manifest(crate_name: &str, wanted: &str) -> String {
    format!(
        r#"# A compute package: the lite-node runtime clones a pinned commit of this
# repository, builds every library here against its own copy of
# `lite-node-plugin-api` (overriding the patch below) and loads them.
[workspace]
resolver = "3"
members = ["{crate_name}", "compute-kit", "slot-selection"]
# The interface copy is patched in below, not built as a member.
exclude = ["plugin-api"]

[workspace.package]
version = "0.1.0"
edition = "2024"
rust-version = "1.94"
publish = false

[workspace.dependencies]
lite-node-plugin-api = "{wanted}"
abi_stable = {{ version = "0.11.3", default-features = false }}
serde_json = "1"
alloy-sol-types = {{ version = "1.7.3", default-features = false, features = ["std"] }}
alloy-primitives = {{ version = "1.7.3", default-features = false, features = ["std"] }}

[workspace.lints.rust]
unsafe_op_in_unsafe_fn = "deny"

# The exact interface of the node that wrote this package (`lite-node compute
# new`), for `cargo test` here; a node building the package uses its own.
[patch.crates-io]
lite-node-plugin-api = {{ path = "plugin-api" }}

[profile.dev]
# Line tables are what a backtrace needs; full debug info, of the
# dependencies above all (alloy's generated code), only slows every build.
debug = "line-tables-only"

[profile.dev.package."*"]
debug = false

[profile.release]
# Processors run inside a long-running node: a panic must unwind so the
# interface can catch it and report it as the epoch's error.
panic = "unwind"
"#
    )
}

const SLOT_SELECTION_MANIFEST: &str = r#"[package]
name = "slot-selection"
description = "The BDS data market's slot selection: which slots work an epoch, on which pool"
version.workspace = true
edition.workspace = true
rust-version.workspace = true
publish.workspace = true

[dependencies]
lite-node-plugin-api.workspace = true
sha2 = { version = "0.10.9", default-features = false, features = ["compress"] }

[lints]
workspace = true
"#;

fn author_readme(crate_name: &str, library: &str, class_name: &str, project_type: &str, wanted: &str) -> String {
    format!(
        r#"# {crate_name}

A compute package for lite-node data markets, written by `lite-node compute
new`: one processor, `{class_name}` in the library `{library}`. Each epoch the
market's slot selection decides whether a slot works and on which pool; a
selected slot reads that pool's `slot0()` and `liquidity()` at the epoch's
last block (one round trip for both), counts the pool's `Swap` logs over the
epoch's blocks, and returns one snapshot. Make it yours.

## What is here

- `{crate_name}/` — the processor. `compute(&self, epoch, host)` returns the
  epoch's snapshots; its `ProcessorSpec` names it (`class_name`), describes it
  and says what it `needs` the node to preload. `export_compute_module!`
  exports it with the market's assignment rule.
- `compute-kit/` — helpers, typed through alloy's `sol!`: `eth_call` (one
  call), `eth_calls` (one function, many times), `Batch` (several functions,
  one round trip), `get_logs` (an event over a block range, in chunks a
  provider accepts, decoded in chain order); blocks, quantities, addresses
  and the epoch's seed block. Errors name the call, the contract and the
  block. In tests, `compute_kit::testing::ChainAnswers` lets a `TestHost`
  answer in your own types: `.on_call::<slot0Call>(pool, block, returns)`,
  `.on_logs(pool, [(block, event)])`, with the epoch's block details from
  `compute_kit::testing::blocks(begin..=end)`.
- `slot-selection/` — the market's rule: which slots work an epoch, on which
  pool. `slot_selection::decide(epoch, host, seed_block_hash, pools)` reports
  the answer to the node and returns the pool (or `None`: return no snapshots).
- `plugin-api/` — the exact interface of the node that wrote this package,
  patched in for local builds and tests. Its reference, for everything the
  host offers (`rpc`, `rpc_batch`, `block_details`, `report_selection`,
  `previous_snapshots`, `log`), their errors, project ids, threads and time
  limits: `cargo doc -p lite-node-plugin-api --open`. Your crates depend on
  `lite-node-plugin-api = "{wanted}"`; a node builds them against its own copy.
- `projects.json` — the project that runs the processor (`{project_type}`).
  Keys other than `project_type`, `processor` and `preload_tasks` reach the
  processor as its settings (here `pools`). Its two pools are Ethereum
  mainnet's (Uniswap V3 USDC/WETH at 0.05% and 0.3%): a real chain needs
  them; the devnet puts its own pools in their place.

## Before the first run (once, with a network)

`lite-node` comes from the lite-node checkout. There, `cargo install --locked
--path runtime` puts it on `PATH`, and `./init.sh devnet --epochs 1` installs
the local chain (anvil and the pinned npm packages) and runs it once. From
then on, every step below works offline: the devnet is a whole network on
this machine.

## The loop

Every step runs in this directory.

1. **Test.** `cargo test`. Processors are also `rlib`s: the tests call them
   with a `TestHost` (typed chain answers, block details) and an
   `EpochContext::builder(epoch_id, begin, end)`; see the tests at the end of
   `{crate_name}/src/lib.rs`.

2. **Run it on the devnet**: anvil with Uniswap V3 pools and swaps, the
   collector checking every submission's signature and selection, and four
   nodes running your processor as it is now (no commit needed):

   ```sh
   LITE_NODE_COMPUTE_DIR=$PWD PROJECTS_CONFIG=projects.json lite-node devnet
   ```

   Each epoch's row shows which slot worked which pool and whether the
   collector accepted it; a processor that fails is named there with its
   reason. It runs until Ctrl-C (`--epochs 5` stops after five).

3. **Re-run an epoch, with your edits**, while the devnet runs: in a second
   terminal, here, the line the devnet printed ("re-run an epoch on this
   chain"):

   ```sh
   lite-node --env-file <the devnet's run dir>/compute-run.env compute run --epoch-id 3
   ```

   It builds this directory as it is now and prints the bytes a node would
   submit — the snapshot's canonical JSON, its project id and CID, and the
   selection reported — checked as the collector checks them. A processor's
   error, panic or timeout names it and exits 1; `--json` prints one
   document.

4. **Publish.** Commit (with `Cargo.lock`), push, and note the full commit id
   (`git rev-parse HEAD`). Check that a node builds and loads exactly that
   commit, as operators' nodes will:

   ```sh
   SNAPSHOTTER_COMPUTE_REPO=file://$PWD SNAPSHOTTER_COMPUTE_REPO_BRANCH=main \
   SNAPSHOTTER_COMPUTE_REPO_COMMIT=$(git rev-parse HEAD) lite-node compute fetch
   ```

   The same variables with `PROJECTS_CONFIG=projects.json` run the devnet on
   the pinned commit.

## On a real chain

With an Ethereum RPC endpoint, `compute run` reads projects.json's mainnet
pools at any recent block (one slot of one is always selected):

```sh
LITE_NODE_COMPUTE_DIR=$PWD PROJECTS_CONFIG=projects.json \
SOURCE_RPC_URL=https://your-ethereum-rpc \
lite-node compute run --begin <a recent block number> --slot 1 --total-slots 1
```

## What operators set

```sh
SNAPSHOTTER_COMPUTE_REPO=https://github.com/you/{crate_name}
SNAPSHOTTER_COMPUTE_REPO_BRANCH=main
SNAPSHOTTER_COMPUTE_REPO_COMMIT=<the full commit id>
PROJECTS_CONFIG=projects.json   # or a projects.json from a pinned config repository
```
"#
    )
}

/// `git init` on branch `main`, everything added, one commit.
fn first_commit(dir: &Path, crate_name: &str) -> anyhow::Result<String> {
    let mut opts = git2::RepositoryInitOptions::new();
    opts.initial_head("main");
    let repo = git2::Repository::init_opts(dir, &opts)
        .map_err(|e| anyhow::anyhow!("creating a git repository in {}: {}", dir.display(), e.message()))?;
    let mut index = repo.index()?;
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None)?;
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let who =
        repo.signature().or_else(|_| git2::Signature::now("lite-node compute new", "compute-new@lite-node.invalid"))?;
    let message = format!("{crate_name}: a new compute package (lite-node compute new)");
    let oid = repo.commit(Some("HEAD"), &who, &who, &message, &tree, &[])?;
    Ok(oid.to_string())
}
