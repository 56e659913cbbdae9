//! Calling processors through the real loader: misbehaving plugins come back
//! as error values and the node process carries on.

use std::sync::Arc;

use lite_node::compute::host::{RuntimeHost, SelectionTracker};
use lite_node_plugin_api::{AssignmentRequest, Host};

use crate::support::{epoch, load_faulty};

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
    lite_node::commands::print_package(&package, &mut out).unwrap();
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
