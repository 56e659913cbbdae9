//! `lite-node check`: configuration problems reported all at once, exit 2.

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
    let run = node.run(&["--env-file", env_file.to_str().unwrap(), "check"]);
    run.assert_ok();
    assert!(run.stdout.contains("ok   processor blockDetails: block_details::BlockDetailsProcessor"), "{}", run.stdout);
    assert!(!run.stdout.contains("ac0974bec") && !run.stderr.contains("ac0974bec"), "the signer key leaked");
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
    let run = node.run(&["--env-file", env_file.to_str().unwrap(), "check"]);
    run.assert_ok();
    assert!(run.stdout.contains("ok   projects: 1 project(s): blockDetails"), "{}", run.stdout);
    assert!(node.data_dir().join("config").join(&repo.commit).join("projects.json").is_file());

    let bogus = "fedcba9876543210fedcba9876543210fedcba98";
    let run = node.env("SNAPSHOT_CONFIG_REPO_COMMIT", bogus).run(&["--env-file", env_file.to_str().unwrap(), "check"]);
    assert_eq!(run.code, 2, "{run:?}");
    let expected = format!("FAIL projects: commit {bogus} not found on {} (branch main)", repo.url());
    assert!(run.stdout.contains(&expected), "{}", run.stdout);
}
