//! `lite-node check`: configuration problems reported all at once, exit 2;
//! and the network: RPCs, ProtocolState, the slot, the collector.

use std::fs;

use lite_node_testkit::workspace_root;

use crate::support::Node;

const REQUIRED: &[&str] = &[
    "SOURCE_RPC_URL",
    "SIGNER_ACCOUNT_ADDRESS",
    "SIGNER_ACCOUNT_PRIVATE_KEY",
    "SLOT_ID",
    "POWERLOOM_RPC_URL",
    "PROTOCOL_STATE_CONTRACT",
    "DATA_MARKET_CONTRACT",
    "NAMESPACE",
    "POWERLOOM_CHAIN",
    "SOURCE_CHAIN",
];

#[test]
fn missing_environment_names_every_variable_in_one_run() {
    let run = Node::new().run(&["check"]);
    assert_eq!(run.code, 2, "{run:?}");
    let line = run.stdout.lines().find(|l| l.starts_with("FAIL environment")).expect("an environment line");
    for key in REQUIRED {
        assert!(line.contains(key), "{key} missing from: {line}");
    }
}

#[test]
fn env_example_passes_check_with_the_bundled_package() {
    let node = Node::new().env("PROJECTS_CONFIG", workspace_root().join("projects.json").display().to_string());
    let env_file = workspace_root().join("env.example");
    let run = node.run(&["--env-file", env_file.to_str().unwrap(), "check", "--offline"]);
    run.assert_ok();
    assert!(!run.stdout.contains("RPC"), "--offline reaches nothing: {}", run.stdout);
    assert!(run.stdout.contains("ok   processor blockDetails: block_details::BlockDetailsProcessor"), "{}", run.stdout);
    // Issue 55, item 11: nothing configured and no computes/ here: the
    // build tree's package, said as such.
    assert!(run.stdout.contains("the computes/ of the checkout this lite-node was built from"), "{}", run.stdout);
    assert!(!run.stdout.contains("ac0974bec") && !run.stderr.contains("ac0974bec"), "the signer key leaked");
    assert!(run.stdout.contains("ok   environment: slot 1 on "), "{}", run.stdout);
    // Many slots are named, as ranges; a list with a hole in it is refused, quoted.
    let example = std::fs::read_to_string(&env_file).unwrap();
    let check_slots = |ids: &str| {
        let file = node.cwd.path().join(format!("slots-{}.env", ids.len()));
        let text: String = example
            .lines()
            .map(|l| if l.starts_with("SLOT_ID=") { format!("SLOT_IDS={ids}\n") } else { format!("{l}\n") })
            .collect();
        assert!(text.contains("SLOT_IDS="), "env.example sets SLOT_ID");
        std::fs::write(&file, text).unwrap();
        node.run(&["--env-file", file.to_str().unwrap(), "check", "--offline"])
    };
    let many = check_slots("1-10000");
    assert!(many.stdout.contains("ok   environment: 10000 slots 1-10000 on "), "{}", many.stdout);
    let holed = check_slots("1,,2");
    assert!(holed.stdout.contains("`1,,2` has an empty item between commas"), "{}", holed.stdout);
}

#[test]
fn bad_projects_file_is_reported_with_position_or_path() {
    let node = Node::new();
    let file = node.cwd.path().join("projects.json");
    fs::write(&file, "{\"config\": [\n  {\"project_type\": \"a\"\n]}").unwrap();
    let run = node.run(&["check"]);
    assert_eq!(run.code, 2, "{run:?}");
    let expected = format!("FAIL projects: {}:3:1: invalid JSON", file.display());
    assert!(run.stdout.contains(&expected), "{}", run.stdout);

    fs::write(
        &file,
        r#"{"config": [{"project_type": "a", "processor": {"module": "m", "class_name": "A"}},
                       {"project_type": "a", "processor": {"module": "m"}}]}"#,
    )
    .unwrap();
    let run = node.run(&["check"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stdout.contains("config[1].processor.class_name is missing"), "{}", run.stdout);
}

#[test]
fn projects_json_comes_from_a_pinned_config_repo_once() {
    let config = tempfile::tempdir().unwrap();
    fs::copy(workspace_root().join("projects.json"), config.path().join("projects.json")).unwrap();
    let repo = lite_node_testkit::GitFixture::new(&[(config.path(), "")]);
    let env_file = workspace_root().join("env.example");
    let node = Node::new()
        .env("SNAPSHOT_CONFIG_REPO", repo.url())
        .env("SNAPSHOT_CONFIG_REPO_BRANCH", repo.branch.clone())
        .env("SNAPSHOT_CONFIG_REPO_COMMIT", repo.commit.clone());
    let run = node.run(&["--env-file", env_file.to_str().unwrap(), "check", "--offline"]);
    run.assert_ok();
    assert!(run.stdout.contains("ok   projects: 1 project(s): blockDetails"), "{}", run.stdout);
    assert!(node.data_dir().join("config").join(&repo.commit).join("projects.json").is_file());

    let bogus = "fedcba9876543210fedcba9876543210fedcba98";
    let run = node.env("SNAPSHOT_CONFIG_REPO_COMMIT", bogus).run(&[
        "--env-file",
        env_file.to_str().unwrap(),
        "check",
        "--offline",
    ]);
    assert_eq!(run.code, 2, "{run:?}");
    let expected = format!("FAIL projects: commit {bogus} not found on {} (branch main)", repo.url());
    assert!(run.stdout.contains(&expected), "{}", run.stdout);
}

/// Against the devnet world on a real anvil: every network check says ok with
/// a collector up; a slot registered to another signer is bad configuration
/// (exit 2); an RPC or collector that cannot be reached fails (exit 1) — all
/// of which the offline check would have passed.
#[test]
fn the_network_checks_reach_the_rpcs_the_slot_and_the_collector() {
    let world = lite_node_testkit::World::load();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    let base = lite_node_testkit::node_env(&world.url(), &world.manifest, 1);
    let collector = lite_node_testkit::RunningCollector::start(bin, &base);
    let node = |extra: &[(&str, String)]| {
        let mut node = Node::new();
        for (k, v) in base.iter().filter(|(k, _)| k != "LITE_NODE_DATA_DIR") {
            node = node.env(k, v.clone());
        }
        node = node.env("LOCAL_COLLECTOR_HOST", "127.0.0.1").env("LOCAL_COLLECTOR_PORT", collector.port.to_string());
        for (k, v) in extra {
            node = node.env(k, v.clone());
        }
        node
    };

    let run = node(&[]).run(&["check"]);
    run.assert_ok();
    for line in [
        format!("ok   source RPC: chain id {}", world.manifest.chain_id),
        format!("ok   anchor RPC: chain id {}", world.manifest.chain_id),
        "ok   ProtocolState: contract at".to_owned(),
        "ok   slot 1: registered to".to_owned(),
        "ok   collector: http://127.0.0.1:".to_owned(),
    ] {
        assert!(run.stdout.contains(&line), "no `{line}` in\n{}", run.stdout);
    }

    let run = node(&[("SLOT_ID", "2".into())]).run(&["check"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stdout.contains("FAIL slot 2: slot 2 is not this node's"), "{}", run.stdout);
    assert_eq!(node(&[("SLOT_ID", "2".into())]).run(&["check", "--offline"]).code, 0, "offline cannot tell");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = format!("http://127.0.0.1:{closed}");
    let run = node(&[("SOURCE_RPC_URL", down.clone()), ("LOCAL_COLLECTOR_PORT", closed.to_string())]).run(&["check"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stdout.contains("FAIL source RPC: every source RPC endpoint failed"), "{}", run.stdout);
    assert!(run.stdout.contains(&format!("FAIL collector: {down}")), "{}", run.stdout);
}

/// A processor that reads block details, in a project that does not preload
/// them, would fail every epoch: `check` refuses it, naming the project and
/// the line to add.
#[test]
fn a_project_without_the_preload_its_processor_needs_is_refused_by_check() {
    let node = Node::new();
    let file = node.cwd.path().join("projects.json");
    let project = r#"{"config": [{"project_type": "blockDetails",
        "processor": {"module": "block_details", "class_name": "BlockDetailsProcessor"}}]}"#;
    fs::write(&file, project).unwrap();
    let node = node.env("PROJECTS_CONFIG", file.display().to_string());
    let env_file = workspace_root().join("env.example");
    let run = node.run(&["--env-file", env_file.to_str().unwrap(), "check", "--offline"]);
    assert_eq!(run.code, 2, "{run:?}");
    let line = run.stdout.lines().find(|l| l.starts_with("FAIL processor blockDetails")).expect("a processor line");
    assert!(line.contains("needs the preload task(s) `block_details`"), "{line}");
    assert!(line.contains(r#"add "preload_tasks": ["block_details"] to it in projects.json"#), "{line}");
}

/// A stderr that cannot be written (a log redirected to a full disk) costs
/// the log lines, not the process: a warning is logged (a variable set
/// twice in the env file), then the missing configuration is reported with
/// exit 2 — not a panic (101), which is what tracing's own fallback print
/// used to cause.
#[test]
fn a_full_disk_under_the_log_loses_lines_not_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("twice.env");
    std::fs::write(&env_file, "REPEATED=1\nREPEATED=2\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lite-node"))
        .arg("--env-file")
        .arg(&env_file)
        .args(["check", "--offline"])
        .env_clear()
        // Its default data dir (`./data`) inside the test's directory, not the repository.
        .current_dir(dir.path())
        .stderr(std::fs::File::options().write(true).open("/dev/full").unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// The signer from an encrypted keystore (Web3 Secret Storage, as geth and
/// ethers write it) with its password in a file, instead of the env key:
/// the right password checks out, a wrong one is exit 2 naming both files,
/// and neither the password nor the key is ever printed.
#[test]
fn a_keystore_with_its_password_file_stands_in_for_the_env_key() {
    let node = Node::new().env("PROJECTS_CONFIG", workspace_root().join("projects.json").display().to_string());
    let dir = node.cwd.path();
    let example = fs::read_to_string(workspace_root().join("env.example")).unwrap();
    let without_key: String =
        example.lines().filter(|l| !l.starts_with("SIGNER_ACCOUNT_PRIVATE_KEY=")).map(|l| format!("{l}\n")).collect();
    let keystores = workspace_root().join("tests/data/keystore");
    let password = "correct horse battery staple";
    fs::write(dir.join("right"), format!("{password}\n")).unwrap();
    fs::write(dir.join("wrong"), "battery horse staple correct\n").unwrap();
    let check = |keystore: &str, password_file: &str| {
        let env = dir.join("keystore.env");
        let store = keystores.join(keystore);
        fs::write(
            &env,
            format!(
                "{without_key}SIGNER_KEYSTORE_FILE={}\nSIGNER_KEYSTORE_PASSWORD_FILE={}\n",
                store.display(),
                dir.join(password_file).display()
            ),
        )
        .unwrap();
        node.run(&["--env-file", env.to_str().unwrap(), "check", "--offline"])
    };
    for keystore in ["anvil-0.json", "anvil-0-ethers.json"] {
        let run = check(keystore, "right");
        run.assert_ok();
        assert!(run.stdout.contains("ok   environment: slot 1 on "), "{keystore}: {}", run.stdout);
    }
    let run = check("anvil-0.json", "wrong");
    assert_eq!(run.code, 2, "{run:?}");
    let expected = format!(
        "SIGNER_KEYSTORE_FILE {}: the password in SIGNER_KEYSTORE_PASSWORD_FILE {} does not open it",
        keystores.join("anvil-0.json").display(),
        dir.join("wrong").display()
    );
    assert!(run.stdout.contains(&expected), "{}", run.stdout);
    // `run` refuses it the same way, before reaching anything.
    let env = dir.join("keystore.env");
    let started = node.run(&["--env-file", env.to_str().unwrap(), "run"]);
    assert_eq!(started.code, 2, "{started:?}");
    assert!(started.stderr.contains("does not open it"), "{}", started.stderr);
    for out in [&run.stdout, &run.stderr, &started.stdout, &started.stderr] {
        assert!(!out.contains("battery horse") && !out.contains(password), "a password was printed: {out}");
        assert!(!out.contains("ac0974bec"), "the key was printed: {out}");
    }
    // Without the password file, or with the env key as well: named, exit 2.
    fs::write(&env, format!("{without_key}SIGNER_KEYSTORE_FILE={}\n", keystores.join("anvil-0.json").display()))
        .unwrap();
    let run = node.run(&["--env-file", env.to_str().unwrap(), "check", "--offline"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stdout.contains("set SIGNER_KEYSTORE_PASSWORD_FILE to a file that holds it"), "{}", run.stdout);
    let both =
        check_with(&node, &format!("{example}SIGNER_KEYSTORE_FILE={}\n", keystores.join("anvil-0.json").display()));
    assert!(
        both.stdout.contains("SIGNER_ACCOUNT_PRIVATE_KEY and SIGNER_KEYSTORE_FILE are both set"),
        "{}",
        both.stdout
    );
}

/// Issue 55, item 9: `lite-node run --check` (what the image's init.sh
/// runs) checks the configuration it then runs with — the same lines as
/// `check --offline`, so a keystore is opened once, not by a `check` and
/// again by `run` — and does not start on a failed check (exit 2).
#[test]
fn run_with_check_prints_the_checks_and_does_not_start_on_a_failed_one() {
    let node = Node::new();
    let env_file = workspace_root().join("env.example");
    let file = node.cwd.path().join("projects.json");
    fs::write(&file, "{\"config\": [\n  {\"project_type\": \"a\"\n]}").unwrap();
    let run = node.run(&["--env-file", env_file.to_str().unwrap(), "run", "--check"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stdout.contains("ok   environment: slot 1 on "), "{}", run.stdout);
    assert!(run.stdout.contains(&format!("FAIL projects: {}:3:1: invalid JSON", file.display())), "{}", run.stdout);
    assert!(!run.stderr.contains("watching ProtocolState"), "it did not start: {}", run.stderr);
}

/// `lite-node check --offline` over an env file with `text`.
fn check_with(node: &Node, text: &str) -> crate::support::Run {
    let env = node.cwd.path().join("with.env");
    fs::write(&env, text).unwrap();
    node.run(&["--env-file", env.to_str().unwrap(), "check", "--offline"])
}

/// Issue 55: the market's identity an operator's `.env` carries (`MARKET_*`,
/// from `market env`): `lite-node check`, a collector and a validator with
/// other projects are refused (exit 2), naming the difference, before they
/// reach anything; the same projects pass; a package at another commit is
/// refused too.
#[test]
fn projects_or_a_package_that_are_not_the_markets_are_refused_by_check_the_collector_and_the_validator() {
    let projects = workspace_root().join("projects.json");
    let env_file = workspace_root().join("env.example");
    let env_file = env_file.to_str().unwrap();
    let id = lite_node::config::Projects::load(&projects).unwrap().identity();
    let node = |vars: &[(&str, String)]| {
        vars.iter().fold(Node::new().env("PROJECTS_CONFIG", projects.display().to_string()), |n, (k, v)| n.env(k, v))
    };
    let market = [
        ("MARKET_PROJECTS_HASH", id.hash.clone()),
        ("MARKET_PROJECT_TYPES", id.types.join(",")),
        ("MARKET_POOLS", id.pools.to_string()),
        ("MARKET_POOLS_HASH", id.pools_hash.clone()),
    ];
    let run = node(&market).run(&["--env-file", env_file, "check", "--offline"]);
    run.assert_ok();
    assert!(run.stdout.contains("ok   market's projects: the market's (0 pool(s), hash 0x"), "{}", run.stdout);

    let other = node(&[
        ("MARKET_PROJECT_TYPES", "baseSnapshot".into()),
        ("MARKET_POOLS", "5".into()),
        ("MARKET_PROJECTS_HASH", format!("0x{}", "ab".repeat(32))),
    ]);
    let expected = "projects blockDetails are not the market's baseSnapshot (missing here: baseSnapshot; not the \
                    market's: blockDetails)";
    let run = other.run(&["--env-file", env_file, "check", "--offline"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stdout.contains(&format!("FAIL market's projects: {expected}")), "{}", run.stdout);
    let market_args = [
        "--anchor-rpc",
        "http://127.0.0.1:9",
        "--protocol-state",
        "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        "--data-market",
        "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",
    ];
    let collector: Vec<&str> =
        ["--env-file", env_file, "collector", "--listen", "127.0.0.1:0"].into_iter().chain(market_args).collect();
    let run = other.run(&collector);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains(expected), "{}", run.stderr);
    let validator: Vec<&str> = ["--env-file", env_file, "validator", "--redis-url", "redis://127.0.0.1:9"]
        .into_iter()
        .chain(market_args)
        .collect();
    let run = other.run(&validator);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains(expected), "{}", run.stderr);

    // The pools alone differ: named with both counts.
    let run = node(&market).env("MARKET_POOLS", "5").run(&["--env-file", env_file, "check", "--offline"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stdout.contains("the projects' pools are not the market's: 0 pool(s) here"), "{}", run.stdout);
    // Another package than the market's.
    let run = node(&market).env("MARKET_COMPUTE_COMMIT", "ab".repeat(20)).run(&[
        "--env-file",
        env_file,
        "check",
        "--offline",
    ]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stdout.contains(&format!("not the market's {} (MARKET_COMPUTE_COMMIT)", "ab".repeat(20))),
        "{}",
        run.stdout
    );
}
