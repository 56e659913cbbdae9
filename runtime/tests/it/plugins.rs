//! Calling processors through the real loader: misbehaving plugins come back
//! as error values and the node process carries on.

use std::sync::Arc;

use lite_node::compute::host::{RuntimeHost, SelectionTracker};
use lite_node_plugin_api::{AssignmentRequest, Host};

use lite_node_testkit::GitFixture;

use crate::support::{Node, epoch, faulty_repo, load_faulty, load_repo};

fn host(tracker: &Arc<SelectionTracker>) -> RuntimeHost {
    RuntimeHost::new("faulty", None, None, tracker.clone(), vec![])
}

#[test]
fn panics_and_errors_in_plugins_are_values_and_the_node_lives_on() {
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    let tracker = Arc::new(SelectionTracker::default());
    let runtime_host = host(&tracker);

    let panicking = package.new_processor("faulty", "PanickingProcessor", "{}").unwrap();
    for id in [1, 2] {
        let err = panicking.compute(&epoch(id), Host::to_ref(&runtime_host)).into_result().unwrap_err();
        assert_eq!(err.as_str(), format!("PanickingProcessor panicked: fixture panic at epoch {id}"));
    }

    let failing = package.new_processor("faulty", "FailingProcessor", "{}").unwrap();
    let err = failing.compute(&epoch(3), Host::to_ref(&runtime_host)).into_result().unwrap_err();
    assert_eq!(err.as_str(), "fixture failure at epoch 3");

    // The same library still works after its siblings panicked.
    let echo = package.new_processor("faulty", "EchoProcessor", r#"{"k":1}"#).unwrap();
    let out = echo.compute(&epoch(4), Host::to_ref(&runtime_host)).into_result().unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].json.as_str(), r#"{"k":1}"#);
    let last = tracker.last().expect("echo reported its selection");
    assert_eq!((last.epoch_id, last.was_selected, last.slot_id), (4, true, 4));

    let request = AssignmentRequest { epoch_id: 1, block_hash: "0x00".into(), total_slots: 1, pools: vec![].into() };
    let err = package.library("faulty").unwrap().assignments(&request).unwrap_err();
    assert_eq!(err, "assignments panicked: fixture assignments panic");
}

/// Review finding 10 (issue 43): a package whose profile says
/// `panic = "abort"` is built to unwind all the same, so its processor's
/// panic is a value like any other's, not the end of every slot.
#[test]
fn a_package_built_to_abort_on_panic_unwinds_all_the_same() {
    let src = lite_node_testkit::data("fixture-computes");
    let copy = tempfile::tempdir().unwrap();
    for rel in ["Cargo.toml", "Cargo.lock", "rustfmt.toml", "faulty/Cargo.toml", "faulty/src/lib.rs"] {
        let to = copy.path().join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(src.join(rel), &to).unwrap_or_else(|e| panic!("{rel}: {e}"));
    }
    let manifest = copy.path().join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(text.contains("[profile.dev]\n"), "{text}");
    std::fs::write(&manifest, text.replace("[profile.dev]\n", "[profile.dev]\npanic = \"abort\"\n")).unwrap();
    let repo = GitFixture::new(&[(copy.path(), "")]);
    let data = tempfile::tempdir().unwrap();
    let package = load_repo(data.path(), &repo);
    let tracker = Arc::new(SelectionTracker::default());
    let runtime_host = host(&tracker);
    let panicking = package.new_processor("faulty", "PanickingProcessor", "{}").unwrap();
    let err = panicking.compute(&epoch(1), Host::to_ref(&runtime_host)).into_result().unwrap_err();
    assert_eq!(err.as_str(), "PanickingProcessor panicked: fixture panic at epoch 1");
}

#[test]
fn unknown_class_name_lists_what_the_library_exports() {
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    let err = package.new_processor("faulty", "Missing", "{}").err().unwrap().to_string();
    assert!(
        err.contains("processor `Missing` is not exported by this library; it exports: PanickingProcessor, FailingProcessor, EchoProcessor, RpcProcessor, SlowProcessor, SelectedButEmptyProcessor, IdleProcessor"),
        "{err}"
    );
    let err = package.new_processor("faulty", "EchoProcessor", r#"{"reject":true}"#).err().unwrap().to_string();
    assert!(err.contains("rejected its settings: setting `reject` present"), "{err}");
    let err = package.new_processor("nope", "EchoProcessor", "{}").err().unwrap().to_string();
    assert!(err.contains("library `nope` is not in the compute package") && err.contains("it has: faulty"), "{err}");
}

/// `compute list` lines up each library's processors: one description column.
#[test]
fn compute_list_aligns_processor_descriptions() {
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    let mut out = Vec::new();
    lite_node::commands::compute::print_package(&package, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let block = text.split("\nlibrary ").nth(1).expect("a library is listed");
    let starts: std::collections::BTreeSet<usize> = block
        .lines()
        .skip(1)
        .filter_map(|l| l.strip_prefix("  "))
        .map(|l| {
            let class_end = l.find(' ').unwrap_or(l.len());
            class_end + (l[class_end..].len() - l[class_end..].trim_start().len())
        })
        .collect();
    assert!(block.lines().count() > 3, "several processors:\n{text}");
    assert_eq!(starts.len(), 1, "unaligned:\n{text}");
}

/// `compute run` with processors that panic, fail and run past their time
/// limit beside one that works: the good one's snapshot is printed, each
/// failure is named by project and processor, and the exit code is 1.
#[test]
fn compute_run_names_each_processor_that_panics_fails_or_runs_past_its_time_limit() {
    let repo = faulty_repo();
    let node = Node::new();
    let projects = node.cwd.path().join("projects.json");
    let entry = |project: &str, class: &str, extra: serde_json::Value| {
        let mut e = serde_json::json!({
            "project_type": project,
            "processor": {"module": "faulty", "class_name": class},
            "preload_tasks": [],
        });
        e.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        e
    };
    let config = serde_json::json!({"config": [
        entry("echo", "EchoProcessor", serde_json::json!({"greeting": "hi"})),
        entry("panics", "PanickingProcessor", serde_json::json!({})),
        entry("fails", "FailingProcessor", serde_json::json!({})),
        entry("slow", "SlowProcessor", serde_json::json!({"sleep_ms": 30000})),
        entry("twice", "ReturnsProcessor", serde_json::json!({"sources": "0xAA 0xaa"})),
    ]});
    std::fs::write(&projects, config.to_string()).unwrap();
    let node = node
        .compute_repo(&repo, &repo.commit, "")
        .env("PROJECTS_CONFIG", projects.display().to_string())
        // Never reached: these processors make no calls.
        .env("SOURCE_RPC_URL", "http://127.0.0.1:9")
        .env("LITE_NODE_COMPUTE_TIMEOUT_SECS", "1");

    let good = node.run(&["compute", "run", "--begin", "7", "--epoch-id", "3", "--project", "echo"]);
    good.assert_ok();
    assert!(good.stdout.contains("epoch 3: source blocks 7..=7"), "{}", good.stdout);
    assert!(good.stdout.contains("echo (EchoProcessor): computed; reported selected"), "{}", good.stdout);
    assert!(good.stdout.contains("project id  echo:POWERLOOM_CHAIN-NAMESPACE-SOURCE_CHAIN"), "{}", good.stdout);
    assert!(good.stdout.contains("(set POWERLOOM_CHAIN, NAMESPACE and SOURCE_CHAIN for the node's project ids)"));
    let cid = good.stdout.lines().find_map(|l| l.trim().strip_prefix("cid")).map(str::trim).unwrap_or_default();
    assert!(cid.starts_with("bafkrei"), "{}", good.stdout);

    let bad = node.run(&["compute", "run", "--begin", "7", "--epoch-id", "3"]);
    assert_eq!(bad.code, 1, "stdout:\n{}\nstderr:\n{}", bad.stdout, bad.stderr);
    assert!(bad.stderr.contains("error: 4 of 5 projects failed"), "{}", bad.stderr);
    assert!(bad.stdout.contains(&format!("cid         {cid}")), "the good project still prints:\n{}", bad.stdout);
    for (who, why) in [
        ("project panics (PanickingProcessor in faulty)", "fixture panic at epoch 3"),
        ("project fails (FailingProcessor in faulty)", "fixture failure at epoch 3"),
        ("project slow (SlowProcessor in faulty)", "timed out after 1s (LITE_NODE_COMPUTE_TIMEOUT_SECS)"),
        ("project twice (ReturnsProcessor in faulty)", "returned two snapshots for `0xAA` and `0xaa`, one project id"),
    ] {
        let line = bad.stderr.lines().find(|l| l.contains(who)).unwrap_or_else(|| panic!("no {who}:\n{}", bad.stderr));
        assert!(line.contains(why), "{line}");
    }
    assert!(!bad.stderr.contains("project echo"), "{}", bad.stderr);

    // A slot id that is not one is named, not taken for slot 1.
    let node = node.env("SLOT_ID", "abc");
    let bad_slot = node.run(&["compute", "run", "--begin", "7"]);
    assert_eq!(bad_slot.code, 2, "{}", bad_slot.stderr);
    assert!(bad_slot.stderr.contains("SLOT_ID=abc is not a slot id"), "{}", bad_slot.stderr);
    let node = node.env("SLOT_ID", "2");

    // No epoch given is bad input, with the fix.
    let none = node.run(&["compute", "run"]);
    assert_eq!(none.code, 2, "{}", none.stderr);
    assert!(none.stderr.contains("give --begin B"), "{}", none.stderr);
}
