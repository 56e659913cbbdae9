//! Dispatch through the real loader: outcomes per docs/protocol.md §9, a timeout
//! per compute, a bound on concurrent computes, and draining.

use std::{sync::Arc, time::Duration};

use lite_node::{
    compute::{LoadedPackage, host::SelectionTracker},
    config::Project,
    dispatch::{Dispatcher, OutcomeKind, ProjectProcessor},
};
use serde_json::{Map, Value, json};

use crate::support::{epoch, load_faulty};

fn project(package: &LoadedPackage, name: &str, class: &str, settings: Value) -> ProjectProcessor {
    let settings: Map<String, Value> = settings.as_object().cloned().unwrap_or_default();
    let processor = package.new_processor("faulty", class, &Value::Object(settings.clone()).to_string()).unwrap();
    ProjectProcessor {
        project: Project {
            project_type: name.to_owned(),
            module: "faulty".into(),
            class_name: class.into(),
            preload_tasks: vec![],
            settings,
        },
        processor: Arc::new(processor),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn outcomes_follow_the_protocols_books() {
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    let projects = vec![
        project(&package, "echo", "EchoProcessor", json!({"k": 1})),
        project(&package, "idle", "IdleProcessor", json!({})),
        project(&package, "empty", "SelectedButEmptyProcessor", json!({})),
        project(&package, "panics", "PanickingProcessor", json!({})),
        project(&package, "fails", "FailingProcessor", json!({})),
    ];
    let d = Dispatcher::new(projects, 4, Duration::from_secs(30), None, None, Arc::new(SelectionTracker::default()));
    let outcomes = runtime().block_on(d.dispatch(&epoch(7), &[]));
    let kinds: Vec<(&str, &OutcomeKind)> = outcomes.iter().map(|o| (o.project_type.as_str(), &o.kind)).collect();
    assert_eq!(kinds[0], ("echo", &OutcomeKind::Computed));
    assert_eq!(outcomes[0].snapshots, vec![("echo".to_owned(), r#"{"k":1}"#.to_owned())]);
    assert_eq!(kinds[1], ("idle", &OutcomeKind::NotSelected));
    assert_eq!(
        kinds[2],
        ("empty", &OutcomeKind::Failed("selected for epoch 7 but returned no snapshots".into())),
        "nothing returned after selection is a failure"
    );
    assert_eq!(
        kinds[3],
        ("panics", &OutcomeKind::Failed("PanickingProcessor panicked: fixture panic at epoch 7".into()))
    );
    assert_eq!(kinds[4], ("fails", &OutcomeKind::Failed("fixture failure at epoch 7".into())));
}

#[test]
fn concurrent_computes_stay_within_the_bound() {
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    let projects: Vec<_> =
        (0..6).map(|i| project(&package, &format!("slow{i}"), "SlowProcessor", json!({"sleep_ms": 100}))).collect();
    let d = Dispatcher::new(projects, 2, Duration::from_secs(30), None, None, Arc::new(SelectionTracker::default()));
    let outcomes = runtime().block_on(d.dispatch(&epoch(1), &[]));
    for o in &outcomes {
        assert_eq!(o.kind, OutcomeKind::Computed);
        let seen: Value = serde_json::from_str(&o.snapshots[0].1).unwrap();
        assert!(seen["max_running"].as_u64().unwrap() <= 2, "{} ran beside too many: {seen}", o.project_type);
    }
}

#[test]
fn a_slow_compute_times_out_and_is_drained_before_shutdown() {
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    let projects = vec![project(&package, "slow", "SlowProcessor", json!({"sleep_ms": 1500}))];
    let d = Dispatcher::new(projects, 1, Duration::from_millis(200), None, None, Arc::new(SelectionTracker::default()));
    let rt = runtime();
    let outcomes = rt.block_on(d.dispatch(&epoch(1), &[]));
    assert_eq!(outcomes[0].kind, OutcomeKind::Failed("timed out after 0.2s".into()));
    // The worker still runs and holds its permit; draining waits for it.
    assert!(!rt.block_on(d.drain(Duration::from_millis(10))), "the timed-out compute is still running");
    assert!(rt.block_on(d.drain(Duration::from_secs(30))), "drained once the compute returned");
}
