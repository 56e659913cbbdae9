//! `lite-node compute fetch` / `compute list` against real git repositories
//! and real cargo builds.

use std::{fs, os::unix::fs::PermissionsExt, time::Instant};

use lite_node_testkit::{copy_tree, workspace_root};

use crate::support::{Node, cached_packages, computes_repo};

#[test]
fn pinned_fetch_builds_once_then_starts_from_cache_without_git_or_cargo() {
    let repo = computes_repo();
    let node = Node::new().compute_repo(&repo, &repo.commit, "computes");
    let first = node.run(&["compute", "fetch"]);
    first.assert_ok();
    let path = first.field("cache").expect("prints the cache path");
    assert!(path.starts_with(&node.data_dir().display().to_string()), "{path}");
    assert_eq!(first.field("commit").as_deref(), Some(repo.commit.as_str()));
    assert!(first.stdout.contains("BlockDetailsProcessor"), "{}", first.stdout);
    assert!(
        first
            .stdout
            .contains(&format!("library block_details (plugin-api {})", lite_node_plugin_api::PLUGIN_API_VERSION)),
        "{}",
        first.stdout
    );

    // Second start: the repository is gone and git/cargo on PATH would leave a
    // trace, so success proves neither ran.
    let trace = tempfile::tempdir().unwrap();
    let bin = trace.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let marker = trace.path().join("ran");
    for tool in ["git", "cargo"] {
        let script = format!("#!/bin/sh\necho {tool} >> '{}'\nexit 1\n", marker.display());
        fs::write(bin.join(tool), script).unwrap();
        fs::set_permissions(bin.join(tool), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let moved = repo.path.with_extension("moved");
    fs::rename(&repo.path, &moved).unwrap();
    let path_var = format!("{}:{}", bin.display(), lite_node_testkit::host_var("PATH"));
    let node = node.env("PATH", path_var);
    let started = Instant::now();
    let second = node.run(&["compute", "fetch"]);
    let elapsed = started.elapsed();
    second.assert_ok();
    assert_eq!(second.field("cache"), Some(path.clone()));
    assert!(!marker.exists(), "a second run started {}", fs::read_to_string(&marker).unwrap_or_default());
    eprintln!("warm `compute fetch`: {elapsed:?}");

    let listed = node.run(&["compute", "list"]);
    listed.assert_ok();
    assert_eq!(listed.field("cache"), Some(path));
    fs::rename(&moved, &repo.path).unwrap();
}

#[test]
fn wrong_commit_names_repo_branch_and_commit_and_caches_nothing() {
    let repo = computes_repo();
    let bogus = "0123456789abcdef0123456789abcdef01234567";
    let node = Node::new().compute_repo(&repo, bogus, "computes");
    let run = node.run(&["compute", "fetch"]);
    assert_eq!(run.code, 2, "{run:?}");
    let error = run.stderr.lines().find(|l| l.starts_with("error:")).expect("an error line");
    assert!(error.contains(bogus) && error.contains(&repo.url()) && error.contains("branch main"), "{error}");
    assert!(error.contains("not found"), "{error}");
    assert!(cached_packages(node.data_dir()).is_empty());
}

#[test]
fn missing_branch_and_unreachable_repo_are_one_line_errors() {
    let repo = computes_repo();
    let node = Node::new().compute_repo(&repo, &repo.commit, "computes").env("SNAPSHOTTER_COMPUTE_REPO_BRANCH", "nope");
    let run = node.run(&["compute", "fetch"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains(&format!("error: branch nope not found on {} (wanted commit {})", repo.url(), repo.commit)),
        "{}",
        run.stderr
    );

    let gone = format!("file://{}/does-not-exist", repo.path.display());
    let node = Node::new().compute_repo(&repo, &repo.commit, "computes").env("SNAPSHOTTER_COMPUTE_REPO", gone.clone());
    let run = node.run(&["compute", "fetch"]);
    assert_eq!(run.code, 2, "{run:?}");
    let error = run.stderr.lines().find(|l| l.starts_with("error:")).expect("an error line");
    assert!(error.starts_with(&format!("error: cannot reach {gone} (branch main, commit {})", repo.commit)), "{error}");
    assert!(cached_packages(node.data_dir()).is_empty());
}

/// A git host that does not answer (nothing listens on its port) is not a
/// setting to fix: exit 1, so `init.sh` backs off before a restart, with the
/// error saying so; nothing is cached.
#[test]
fn a_git_host_that_does_not_answer_is_a_failure_to_retry_not_bad_input() {
    let repo = computes_repo();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/computes.git");
    let node = Node::new().compute_repo(&repo, &repo.commit, "computes").env("SNAPSHOTTER_COMPUTE_REPO", url.clone());
    let run = node.run(&["compute", "fetch"]);
    assert_eq!(run.code, 1, "{run:?}");
    let error = run.stderr.lines().find(|l| l.starts_with("error:")).expect("an error line");
    assert!(error.starts_with(&format!("error: cannot reach {url} (branch main, commit {})", repo.commit)), "{error}");
    assert!(error.ends_with("(a network failure, not a setting: try again later)"), "{error}");
    assert!(cached_packages(node.data_dir()).is_empty());
}

/// Trial finding (issue 43): a checkout mounted into the container is
/// owned by the host's user, not the node's. libgit2 refused it ("repository
/// path … is not owned by current user", exit 2); the node only reads its
/// source, so it fetches from it like any other.
#[test]
fn a_source_repository_another_user_owns_is_fetched() {
    let repo = computes_repo();
    let chown = std::process::Command::new("chown").args(["-R", "4242:4242"]).arg(&repo.path).output().unwrap();
    assert!(
        chown.status.success(),
        "the suite runs as root (it installs redis-server and podman), so it can give the repository away: {}",
        String::from_utf8_lossy(&chown.stderr)
    );
    let node = Node::new().compute_repo(&repo, &repo.commit, "computes");
    let run = node.run(&["compute", "fetch"]);
    run.assert_ok();
    assert_eq!(run.field("commit").as_deref(), Some(repo.commit.as_str()));
}

#[test]
fn unpinned_repo_is_refused_unless_allowed_and_then_logs_the_commit() {
    let repo = computes_repo();
    let node = Node::new().compute_repo(&repo, "", "computes");
    let run = node.run(&["compute", "fetch"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("SNAPSHOTTER_COMPUTE_REPO_COMMIT is not set"), "{}", run.stderr);
    assert!(run.stderr.contains("SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED=true"), "{}", run.stderr);

    let run = node.env("SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED", "true").run(&["compute", "fetch"]);
    run.assert_ok();
    assert_eq!(run.field("commit").as_deref(), Some(repo.commit.as_str()));
    assert!(run.stderr.contains(&format!("SNAPSHOTTER_COMPUTE_REPO_COMMIT={}", repo.commit)), "{}", run.stderr);
}

#[test]
fn build_failure_shows_commit_and_compiler_error_and_caches_nothing() {
    let mut repo = computes_repo();
    let lib = repo.path.join("computes/template/src/lib.rs");
    let broken = fs::read_to_string(&lib).unwrap() + "\nfn broken() -> u32 { \"not a number\" }\n";
    let commit = repo.commit_file("computes/template/src/lib.rs", &broken);
    let node = Node::new().compute_repo(&repo, &commit, "computes");
    let run = node.run(&["compute", "fetch"]);
    assert_eq!(run.code, 2, "{run:?}");
    let error = run.stderr.lines().find(|l| l.starts_with("error:")).expect("an error line");
    assert!(error.contains(&commit) && error.ends_with("failed to build:"), "{error}");
    assert!(run.stderr.contains("mismatched types"), "{}", run.stderr);
    assert!(cached_packages(node.data_dir()).is_empty());
    assert!(!node.data_dir().join("compute/staging/out").exists());
}

#[test]
fn plugin_built_against_another_interface_is_refused_with_a_short_summary() {
    // Another interface: version 0.4.1 with one more field in a boundary type.
    let api = tempfile::tempdir().unwrap();
    copy_tree(&workspace_root().join("plugin-api"), api.path());
    let manifest = fs::read_to_string(api.path().join("Cargo.toml")).unwrap().replacen(
        "version = \"0.4.0\"",
        "version = \"0.4.1\"",
        1,
    );
    fs::write(api.path().join("Cargo.toml"), manifest).unwrap();
    let epoch = fs::read_to_string(api.path().join("src/epoch.rs")).unwrap();
    let changed = epoch.replacen(
        "pub project_type: RString,\n}",
        "pub project_type: RString,\n    /// A field this node does not know.\n    pub base_fee: u64,\n}",
        1,
    );
    let changed = changed.replacen(
        "project_type: RString::new(),\n",
        "project_type: RString::new(),\n            base_fee: 0,\n",
        1,
    );
    assert_ne!(epoch, changed, "the fixture edit must apply");
    fs::write(api.path().join("src/epoch.rs"), changed).unwrap();

    let repo = computes_repo();
    let node = Node::new()
        .compute_repo(&repo, &repo.commit, "computes")
        .env("LITE_NODE_PLUGIN_API_DIR", api.path().display().to_string());
    let run = node.run(&["compute", "fetch"]);
    assert_eq!(run.code, 2, "bad input, not a failure to retry: {run:?}");
    assert!(run.stderr.contains("needs lite-node-plugin-api 0.4.1, this node provides 0.4.0"), "{}", run.stderr);
    assert!(cached_packages(node.data_dir()).is_empty(), "an unloadable build is not cached");
    assert!(
        run.stderr.contains("layouts differ: `EpochContext` incompatible type size (expected 120, found 128)"),
        "{}",
        run.stderr
    );
    let lines = run.stderr.lines().skip_while(|l| !l.starts_with("error:")).count();
    assert!(lines <= 20, "the mismatch report should be short, got {lines} lines:\n{}", run.stderr);
}

#[test]
fn two_nodes_starting_together_build_once_and_agree() {
    let repo = computes_repo();
    let node = Node::new().compute_repo(&repo, &repo.commit, "computes");
    let runs: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2).map(|_| s.spawn(|| node.run(&["compute", "fetch"]))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for run in &runs {
        run.assert_ok();
    }
    assert_eq!(runs[0].field("cache"), runs[1].field("cache"));
    let builds = runs.iter().filter(|r| r.stderr.contains("building compute package")).count();
    assert_eq!(builds, 1, "exactly one node builds: {runs:#?}");
    assert_eq!(cached_packages(node.data_dir()).len(), 1);
}

/// A package written for another plugin interface is the operator's pin to
/// fix, not a transient failure: exit 2 naming both versions and what the
/// package should require, and nothing cached (so init.sh does not retry it
/// forever and a later start does not load it).
#[test]
fn a_package_for_another_interface_is_bad_input_naming_both_versions_and_caches_nothing() {
    let src = tempfile::tempdir().unwrap();
    let files = [
        ("Cargo.toml", "[workspace]\nmembers = [\"other\"]\nresolver = \"2\"\n"),
        (
            "other/Cargo.toml",
            "[package]\nname = \"other\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[lib]\ncrate-type = [\"cdylib\", \
             \"rlib\"]\n\n[dependencies]\nlite-node-plugin-api = \"0.5\"\n",
        ),
        ("other/src/lib.rs", "//! Written for an interface this node does not provide.\n"),
    ];
    for (path, text) in files {
        let file = src.path().join(path);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(file, text).unwrap();
    }
    let repo = lite_node_testkit::GitFixture::new(&[(src.path(), "")]);
    let node = Node::new().compute_repo(&repo, &repo.commit, "");
    let run = node.run(&["compute", "fetch"]);
    assert_eq!(run.code, 2, "{run:?}");
    let provided = lite_node_plugin_api::PLUGIN_API_VERSION;
    assert!(
        run.stderr.contains(&format!("needs lite-node-plugin-api ^0.5, this node provides {provided}")),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("`lite-node-plugin-api = \"0.4\"`"), "{}", run.stderr);
    assert!(!run.stderr.contains("compute fetch` does"), "no advice that cannot help: {}", run.stderr);
    assert!(cached_packages(node.data_dir()).is_empty());
}

/// `compute new` writes a package that stands on its own outside this
/// checkout: `cargo test` passes there, and after a change is committed a
/// node builds and loads exactly that commit from its file URL.
#[test]
fn a_new_package_tests_on_its_own_and_a_node_builds_and_loads_its_commit() {
    let outside = tempfile::tempdir().unwrap();
    let pkg = outside.path().join("my-market");
    let node = Node::new();
    let made = node.run(&["compute", "new", pkg.to_str().unwrap()]);
    made.assert_ok();
    assert!(made.stdout.contains("the processor MyMarketProcessor (library my_market)"), "{}", made.stdout);
    let projects: serde_json::Value = serde_json::from_slice(&fs::read(pkg.join("projects.json")).unwrap()).unwrap();
    assert_eq!(projects["config"][0]["processor"]["class_name"], "MyMarketProcessor");

    let cargo = |args: &[&str]| {
        std::process::Command::new("cargo")
            .args(args)
            .current_dir(&pkg)
            .env_clear()
            .envs(lite_node_testkit::toolchain_env())
            // Where the compute workspace's own tests built the same
            // dependencies in the same profile (./init.sh test runs them first).
            .env("CARGO_TARGET_DIR", lite_node_testkit::compute_target_dir())
            .output()
            .expect("cargo runs")
    };
    let tested = cargo(&["test", "--quiet"]);
    assert!(tested.status.success(), "{}", String::from_utf8_lossy(&tested.stderr));

    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").args(args).current_dir(&pkg).output().expect("git runs");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let lib = pkg.join("my-market/src/lib.rs");
    let text = fs::read_to_string(&lib).unwrap().replace("and its swaps\"", "and its swaps, changed\"");
    fs::write(&lib, text).unwrap();
    // The working tree as it is, before any commit: the author's inner loop.
    // Run from inside the package with the defaults, as its README says: the
    // node's ./data is not part of the package (built once, never committed).
    let inside = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_lite-node"))
            .args(["compute", "fetch"])
            .current_dir(&pkg)
            .env_clear()
            .envs(lite_node_testkit::toolchain_env())
            .envs(lite_node_testkit::compute_build_env())
            .env("LITE_NODE_COMPUTE_DIR", ".")
            .output()
            .expect("lite-node runs")
    };
    let first = inside();
    let listed = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(listed.contains("and its swaps, changed (needs block_details)"), "{listed}");
    let second = inside();
    assert!(second.status.success());
    assert_eq!(String::from_utf8_lossy(&second.stdout), listed, "the same package, from the cache");
    assert!(
        !String::from_utf8_lossy(&second.stderr).contains("building"),
        "rebuilt:\n{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(pkg.join("data").is_dir());
    assert!(!git(&["status", "--porcelain"]).contains("data"), "data/ is ignored");
    let local = Node::new().env("LITE_NODE_COMPUTE_DIR", pkg.display().to_string());
    // On a chain without its (mainnet) pools: the processor's own error, named.
    let chain = lite_node_testkit::Anvil::start();
    let ran = local
        .env("PROJECTS_CONFIG", pkg.join("projects.json").display().to_string())
        .env("SOURCE_RPC_URL", chain.url())
        .run(&["compute", "run", "--begin", "0"]);
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(ran.stdout.contains("myMarket (MyMarketProcessor): failed: eth_call slot0() on 0x"), "{}", ran.stdout);
    let error = ran.stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_default();
    assert!(error.contains("project myMarket (MyMarketProcessor in my_market): eth_call slot0()"), "{}", ran.stderr);
    assert!(error.contains("at block 0: the answer is empty"), "{}", ran.stderr);
    git(&["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "a change"]);
    let commit = git(&["rev-parse", "HEAD"]);

    let node = node
        .env("SNAPSHOTTER_COMPUTE_REPO", format!("file://{}", pkg.display()))
        .env("SNAPSHOTTER_COMPUTE_REPO_BRANCH", "main")
        .env("SNAPSHOTTER_COMPUTE_REPO_COMMIT", commit.clone());
    let fetched = node.run(&["compute", "fetch"]);
    fetched.assert_ok();
    assert_eq!(fetched.field("commit"), Some(commit));
    assert!(
        fetched.stdout.contains(
            "MyMarketProcessor  template: the selected pool's price and liquidity at the epoch's last block, and its \
             swaps, changed (needs block_details)"
        ),
        "{}",
        fetched.stdout
    );

    let again = Node::new().run(&["compute", "new", pkg.to_str().unwrap()]);
    assert_eq!(again.code, 2, "an existing package is never overwritten: {again:?}");
    let bad = Node::new().run(&["compute", "new", outside.path().join("x").to_str().unwrap(), "--name", "Bad_Name"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("cannot name a compute crate"), "{}", bad.stderr);
    let keyword = Node::new().run(&["compute", "new", outside.path().join("type").to_str().unwrap()]);
    assert_eq!(keyword.code, 2);
    assert!(keyword.stderr.contains("`type` cannot name a compute crate") && keyword.stderr.contains("keyword"));
    let builtin = Node::new().run(&["compute", "new", outside.path().join("Test").to_str().unwrap()]);
    assert_eq!(builtin.code, 2);
    assert!(builtin.stderr.contains("`test` is a crate Rust itself provides"), "{}", builtin.stderr);
}
