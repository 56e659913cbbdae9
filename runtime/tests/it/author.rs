//! A compute author's package from `lite-node compute new`, as an author
//! edits it: what `compute run` tells them before a collector does.

use lite_node_testkit::World;

use crate::support::{Node, compute_new, edit};

/// A processor that returns a pool other than the one the selection
/// assigned its slot, and a data source with `:` in it: `compute run`
/// prints both, each refused in the collector's words, and exits 1.
#[test]
fn compute_run_refuses_what_the_collector_would_in_its_words() {
    let world = World::load();
    let node = Node::new();
    let package = compute_new(node.cwd.path(), "pool-state").0;
    let projects = package.join("projects.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&projects).unwrap()).unwrap();
    config["config"][0]["pools"] = serde_json::json!(world.manifest.pools);
    std::fs::write(&projects, config.to_string()).unwrap();
    edit(
        &package.join("pool-state/src/lib.rs"),
        "Ok(vec![self.snapshot(epoch, host, pool)?])",
        "let other = self.pools.iter().find(|p| !p.eq_ignore_ascii_case(pool)).unwrap();
        let wrong = self.snapshot(epoch, host, other)?;
        let evil = Snapshot::new(format!(\"{pool}:evil\"), r#\"{\"fee\": 0.3, \"a\": 1, \"a\": 2}\"#);
        Ok(vec![wrong, evil])",
    );
    let node = node
        .env("LITE_NODE_COMPUTE_DIR", package.display().to_string())
        .env("PROJECTS_CONFIG", projects.display().to_string())
        .env("SOURCE_RPC_URL", world.url());
    let begin = world.head().to_string();
    // Two slots, five pools: both are selected.
    let run = node.run(&["compute", "run", "--begin", &begin, "--slot", "1", "--total-slots", "2"]);
    assert_eq!(run.code, 1, "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let assigned = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("the selection assigns slot 1 pool ")?.split(' ').next())
        .unwrap_or_else(|| panic!("the assignment is named:\n{}", run.stdout))
        .to_owned();
    let refused: Vec<&str> = run.stdout.lines().filter_map(|l| l.trim().strip_prefix("refused")).collect();
    assert_eq!(refused.len(), 2, "{}", run.stdout);
    assert!(
        refused[0].contains(&format!("slot 1 was assigned pool {assigned} in epoch 1, not poolState:0x")),
        "{refused:?}"
    );
    assert!(refused[1].contains(":evil:POWERLOOM_CHAIN-NAMESPACE-SOURCE_CHAIN` is not `type:source:namespace`"));
    // What canonical JSON takes silently is a warning, with the rule.
    let warnings: Vec<&str> = run.stdout.lines().filter_map(|l| l.trim().strip_prefix("warning")).collect();
    assert_eq!(warnings.len(), 2, "{}", run.stdout);
    assert!(warnings[0].contains("0.3 is not an integer") && warnings[0].contains("docs/protocol.md §4"));
    assert!(warnings[1].contains("key \"a\" is given twice in one object; only the last value is kept"));
    assert!(run.stderr.contains("error: 1 of 1 projects failed (2 problems)"), "{}", run.stderr);
    assert!(run.stderr.contains("the collector would refuse `poolState:0x"), "{}", run.stderr);
    assert!(run.stdout.contains("computed, but the collector would refuse 2 of its 2 snapshots"), "{}", run.stdout);
}

/// The package's identity is what git would commit: a file under the
/// package's ignored `data/` (where a run inside it keeps its state) leaves
/// `compute list`'s id unchanged; a file git would commit changes it.
#[test]
fn ignored_files_are_not_part_of_the_package_id() {
    let node = Node::new();
    let package = compute_new(node.cwd.path(), "pool-state").0;
    let node = node.env("LITE_NODE_COMPUTE_DIR", package.display().to_string());
    let id = |node: &Node| {
        let run = node.run(&["compute", "list"]);
        let text = format!("{}{}", run.stdout, run.stderr);
        let id = text.find("local-").map(|at| text[at..at + 22].to_owned());
        (run.code, id.unwrap_or_else(|| panic!("a package id:\n{text}")))
    };
    node.run(&["compute", "fetch"]).assert_ok();
    let (code, first) = id(&node);
    assert_eq!(code, 0);
    std::fs::create_dir_all(package.join("data/deep")).unwrap();
    std::fs::write(package.join("data/deep/t"), "x").unwrap();
    std::fs::write(package.join("target-notes.txt"), "x").unwrap();
    std::fs::remove_file(package.join("target-notes.txt")).unwrap();
    assert_eq!(id(&node), (0, first.clone()), "an ignored file is not hashed: the package is the one built");
    std::fs::write(package.join("NOTES.md"), "x").unwrap();
    let (code, other) = id(&node);
    assert_ne!(other, first, "a file git would commit is");
    assert_eq!(code, 1, "another package, not built yet");
}

/// Commands run inside a package (at its root or below) use that package,
/// not the node checkout's; a library projects.json names that the package
/// lacks says how to point at the right one.
#[test]
fn commands_run_inside_a_package_use_it() {
    let node = Node::new();
    let package = compute_new(node.cwd.path(), "pool-state").0;
    for dir in [package.clone(), package.join("pool-state/src")] {
        let fetched = node.run_in(&dir, &["compute", "fetch"]);
        fetched.assert_ok();
        assert!(fetched.stdout.contains("library pool_state"), "from {}:\n{}", dir.display(), fetched.stdout);
    }
    let projects = node.cwd.path().join("other.json");
    let other = r#"{"config": [{"project_type": "mine", "processor": {"module": "mine", "class_name": "MineProcessor"},
                    "preload_tasks": []}]}"#;
    std::fs::write(&projects, other).unwrap();
    let node = node.env("PROJECTS_CONFIG", projects.display().to_string()).env("SOURCE_RPC_URL", "http://127.0.0.1:9");
    let run = node.run_in(&package, &["compute", "run", "--begin", "1"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("library `mine` is not in the compute package local-"), "{}", run.stderr);
    assert!(run.stderr.contains("point at it: LITE_NODE_COMPUTE_DIR=<its directory>"), "{}", run.stderr);
}

/// The README `compute new` writes, followed as written, offline: step 2's
/// devnet runs the author's processor (anvil, collector, nodes), step 3's
/// re-run of an epoch with the line the devnet printed computes on that
/// chain, and step 4's publish check builds the package's commit. Only the
/// run dir is moved (tests run side by side) and builds share a target dir.
#[test]
fn the_scaffold_readme_runs_as_written() {
    use std::{
        io::{BufRead, BufReader},
        process::{Command, Stdio},
        time::Duration,
    };

    let node = Node::new();
    let (package, _) = compute_new(node.cwd.path(), "pool-watch");
    let readme = std::fs::read_to_string(package.join("README.md")).unwrap();
    let blocks: Vec<&str> = readme.split("```sh\n").skip(1).map(|b| b.split("```").next().unwrap().trim()).collect();
    let block = |has: &str| *blocks.iter().find(|b| b.contains(has)).unwrap_or_else(|| panic!("{has}:\n{readme}"));
    let run_dir = node.cwd.path().join("run");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node")).parent().unwrap().to_owned();
    let path = format!("{}:{}", bin.display(), lite_node_testkit::host_var("PATH"));
    let sh = |script: &str| {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(script)
            .current_dir(&package)
            .env_clear()
            .envs(lite_node_testkit::toolchain_env())
            .env("PATH", &path)
            .envs(lite_node_testkit::compute_build_env())
            .env("LITE_NODE_COMPUTE_CACHE_DIR", node.cwd.path().join("cache"))
            .env("RUST_LOG", "warn");
        cmd
    };

    // `exec`: the devnet is the process spawned, whichever shell `sh` is.
    let step2 = format!(
        "{} --run-dir '{}'",
        block("lite-node devnet").replace("lite-node", "exec lite-node"),
        run_dir.display()
    );
    let stderr_path = node.cwd.path().join("devnet.stderr");
    let stderr = std::fs::File::create(&stderr_path).unwrap();
    let devnet = sh(&step2).stdout(Stdio::piped()).stderr(stderr).spawn().unwrap();
    // Stopped (and its nodes with it) however the test ends.
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            if matches!(self.0.try_wait(), Ok(None)) {
                // Ctrl-C, then a kill if it has not stopped in 30 s (no
                // assertion: this may run while a failed one unwinds).
                let _ = Command::new("kill").args(["-INT", &self.0.id().to_string()]).status();
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                while matches!(self.0.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(100));
                }
                let _ = self.0.kill();
            }
        }
    }
    let mut devnet = Stop(devnet);
    let devnet = &mut devnet.0;
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = devnet.stdout.take().unwrap();
    std::thread::spawn(move || BufReader::new(stdout).lines().map_while(Result::ok).for_each(|l| drop(tx.send(l))));
    let mut lines = Vec::new();
    let rerun = lite_node_testkit::poll_until("the devnet's third epoch", Duration::from_secs(300), || {
        lines.extend(rx.try_iter());
        if let Ok(Some(status)) = devnet.try_wait() {
            let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            panic!("the devnet ended ({status}) before its third epoch:\n{}\n{stderr}", lines.join("\n"));
        }
        let rerun = lines.iter().find_map(|l| l.strip_prefix("re-run an epoch on this chain: "))?;
        lines.iter().any(|l| l.trim_start().starts_with("3 ")).then(|| rerun.to_owned())
    });
    let env_file = run_dir.join("compute-run.env");
    assert!(rerun.starts_with(&format!("lite-node --env-file {} compute run", env_file.display())), "{rerun}");
    let step3 = block("compute run --epoch-id").replace("<the devnet's run dir>", &run_dir.display().to_string());
    let ran = sh(&step3).output().unwrap();
    let ran_out = String::from_utf8_lossy(&ran.stdout);
    // Ctrl-C.
    Command::new("kill").args(["-INT", &devnet.id().to_string()]).status().unwrap();
    let status =
        lite_node_testkit::poll_until("the devnet to exit", Duration::from_secs(60), || devnet.try_wait().unwrap());
    lines.extend(rx.try_iter());
    let table = lines.join("\n");
    assert_eq!(status.code(), Some(0), "{table}");
    assert!(table.contains("projects: poolWatch from ") && table.contains("over the world's 5 pools"), "{table}");
    assert!(!table.contains("failed") && !table.contains("not answered"), "{table}");
    assert_eq!(ran.status.code(), Some(0), "{ran_out}\n{}", String::from_utf8_lossy(&ran.stderr));
    assert!(ran_out.contains("poolWatch (PoolWatchProcessor): computed; reported selected"), "{ran_out}");
    assert!(ran_out.contains("\"swaps\":"), "{ran_out}");

    let step4 = sh(block("compute fetch")).output().unwrap();
    let fetched = String::from_utf8_lossy(&step4.stdout);
    assert!(step4.status.success(), "{fetched}\n{}", String::from_utf8_lossy(&step4.stderr));
    let commit = lite_node_testkit::git(&package, &["rev-parse", "HEAD"]);
    assert!(fetched.contains(&commit[..12]) && fetched.contains("library pool_watch"), "{fetched}");
}
