//! The local executor through the real loader: results per
//! docs/protocol.md §9, a timeout per compute, a bound on concurrent
//! computes, and draining.

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt;
use lite_node::{
    compute::LoadedPackage,
    config::Project,
    executor::{ComputeResult, Executor, LocalExecutor, OutcomeKind, ProjectProcessor, Task},
};
use serde_json::{Map, Value, json};

use crate::support::{load_faulty, task};

/// Every project of `executor` for one epoch, as tasks of slot 4.
fn tasks(executor: &LocalExecutor, epoch_id: u64) -> Vec<Task> {
    executor.projects().map(|p| task(epoch_id, &p.project_type)).collect()
}

/// Runs the tasks; their results in the tasks' order.
async fn run(executor: &LocalExecutor, tasks: Vec<Task>) -> Vec<ComputeResult> {
    let order: Vec<String> = tasks.iter().map(|t| t.project_type.clone()).collect();
    let mut results: Vec<ComputeResult> = executor.execute(tasks, Arc::from(Vec::new())).collect().await;
    assert_eq!(results.len(), order.len(), "one result per task");
    results.sort_by_key(|r| order.iter().position(|p| *p == r.project_type));
    results
}

fn project(package: &LoadedPackage, name: &str, class: &str, settings: Value) -> ProjectProcessor {
    let settings: Map<String, Value> = settings.as_object().cloned().unwrap_or_default();
    let processor = package.new_processor("faulty", class, &Value::Object(settings.clone()).to_string()).unwrap();
    ProjectProcessor {
        project: Project {
            project_type: name.to_owned(),
            module: "faulty".into(),
            class_name: class.into(),
            preload_tasks: vec![],
            per_pool: None,
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
        project(&package, "twice", "ReturnsProcessor", json!({"sources": "0xAA 0xBB 0xaa"})),
    ];
    let d = LocalExecutor::new(projects, 4, Duration::from_secs(30), None, None);
    let outcomes = runtime().block_on(run(&d, tasks(&d, 7)));
    let kinds: Vec<(&str, &OutcomeKind)> = outcomes.iter().map(|o| (o.project_type.as_str(), &o.kind)).collect();
    assert_eq!(kinds[0], ("echo", &OutcomeKind::Computed));
    assert_eq!(outcomes[0].snapshots, vec![(String::new(), r#"{"k":1}"#.to_owned())]);
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
    // Two snapshots for one data source: a failure naming both, nothing kept.
    let OutcomeKind::Failed(twice) = kinds[5].1 else { panic!("{:?}", kinds[5]) };
    assert!(twice.starts_with("returned two snapshots for `0xAA` and `0xaa`, one project id"), "{twice}");
    assert!(outcomes[5].snapshots.is_empty());
}

#[test]
fn concurrent_computes_stay_within_the_bound() {
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    let projects: Vec<_> =
        (0..6).map(|i| project(&package, &format!("slow{i}"), "SlowProcessor", json!({"sleep_ms": 100}))).collect();
    let d = LocalExecutor::new(projects, 2, Duration::from_secs(30), None, None);
    let outcomes = runtime().block_on(run(&d, tasks(&d, 1)));
    for o in &outcomes {
        assert_eq!(o.kind, OutcomeKind::Computed);
        let seen: Value = serde_json::from_str(&o.snapshots[0].1).unwrap();
        assert!(seen["max_running"].as_u64().unwrap() <= 2, "{} ran beside too many: {seen}", o.project_type);
    }
}

/// A compute past its timeout gives its permit back (other projects and
/// later epochs go on), is counted hung until it really returns, and a stop
/// does not wait for it.
#[test]
fn a_timed_out_compute_frees_its_permit_and_is_counted_hung_until_it_returns() {
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    let projects = vec![
        project(&package, "slow", "SlowProcessor", json!({"sleep_ms": 1500})),
        project(&package, "echo", "EchoProcessor", json!({"k": 2})),
    ];
    // One permit: before, the hung compute kept it and `echo` never ran.
    let d = LocalExecutor::new(projects, 1, Duration::from_millis(200), None, None);
    let rt = runtime();
    let hung = d.hung();
    let outcomes = rt.block_on(run(&d, tasks(&d, 1)));
    assert_eq!(outcomes[0].kind, OutcomeKind::Failed("timed out after 0.2s (LITE_NODE_COMPUTE_TIMEOUT_SECS)".into()));
    assert_eq!(outcomes[1].kind, OutcomeKind::Computed, "the other project ran");
    assert_eq!(*hung.borrow(), 1);
    assert!(rt.block_on(d.drain(Duration::from_millis(10))), "a stop does not wait for the hung compute");
    let next = rt.block_on(run(&d, vec![task(2, "echo")]));
    assert_eq!(next[0].kind, OutcomeKind::Computed, "a later epoch runs at once");
    let mut hung = hung;
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), hung.wait_for(|n| *n == 0)).await.unwrap().unwrap();
    });
}

/// A compute that fails because its chain could not be reached pauses
/// computes, and the chain is asked for its head until it answers: a short
/// outage is waited out (the compute runs again after the resume and
/// succeeds). While the chain stays down, what waits keeps its place; a
/// task whose deadline the head passes meanwhile ends as a failure naming
/// the outage, not as a miss. Once the chain answers, computes resume by
/// themselves.
#[test]
fn a_chain_that_does_not_answer_pauses_computes_until_it_does() {
    use lite_node::chain::{HttpRpc, IoRuntime};
    use lite_node_testkit::{Anvil, TcpProxy};

    let anvil = Anvil::start();
    let proxy = TcpProxy::start(anvil.url().trim_start_matches("http://"));
    let io = IoRuntime::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    // A fresh client each time: no pooled connection to reuse.
    let executor = || {
        let url = format!("http://127.0.0.1:{}", proxy.port);
        let source = HttpRpc::new("source", vec![url], Duration::from_secs(5), io.clone()).unwrap();
        let projects = vec![project(&package, "rpc", "RpcProcessor", json!({}))];
        Arc::new(LocalExecutor::new(projects, 1, Duration::from_secs(30), Some(Arc::new(source)), None))
    };
    let rt = runtime();

    proxy.refuse_next(2);
    let d = executor();
    let outcome = rt.block_on(run(&d, vec![task(1, "rpc")])).remove(0);
    assert_eq!(outcome.kind, OutcomeKind::Computed, "the outage was waited out");
    assert!(outcome.snapshots[0].1.starts_with("\"0x7a69\""), "{:?}", outcome.snapshots);
    assert_eq!(proxy.refusals_left(), 0);
    assert!(!d.queue().paused, "resumed");

    proxy.cut();
    let d = executor();
    let waiting = rt.spawn({
        let d = d.clone();
        async move { run(&d, vec![Task { deadline: 100, ..task(2, "rpc") }]).await.remove(0) }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !(d.queue().paused && d.queue().waiting == 1) {
        assert!(std::time::Instant::now() < deadline, "not paused with the retry waiting: {:?}", d.queue());
        std::thread::sleep(Duration::from_millis(20));
    }
    let why = d.queue().paused_for.unwrap();
    assert!(why.starts_with("a chain did not answer: every source RPC endpoint failed (http://127.0.0.1:"), "{why}");
    d.observe_head(101);
    let outcome = rt.block_on(waiting).unwrap();
    let OutcomeKind::Failed(reason) = &outcome.kind else { panic!("{:?}", outcome.kind) };
    assert!(reason.starts_with("not computed: computes were paused (a chain did not answer: "), "{reason}");
    assert!(reason.ends_with("its deadline (anchor block 100) passed while it waited (head 101)"), "{reason}");
    assert!(d.queue().paused, "still down");

    proxy.mend();
    while d.queue().paused {
        assert!(std::time::Instant::now() < deadline + Duration::from_secs(15), "not resumed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let outcome = rt.block_on(run(&d, vec![task(3, "rpc")])).remove(0);
    assert_eq!(outcome.kind, OutcomeKind::Computed);
}

/// A full node's worker (`failing_on_outages`): a compute whose chain is
/// out of reach fails at once naming it, with no pause and no retry, so the
/// worker's round counts the failure (and steps aside in time) instead of
/// holding its items while its own RPC stays down. Its chain back, the next
/// compute runs.
#[test]
fn a_worker_whose_chain_does_not_answer_fails_the_compute_at_once_and_does_not_pause() {
    use lite_node::chain::{HttpRpc, IoRuntime};
    use lite_node_testkit::{Anvil, TcpProxy};

    let anvil = Anvil::start();
    let proxy = TcpProxy::start(anvil.url().trim_start_matches("http://"));
    let io = IoRuntime::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    let url = format!("http://127.0.0.1:{}", proxy.port);
    let source = HttpRpc::new("source", vec![url], Duration::from_secs(5), io.clone()).unwrap();
    let projects = vec![project(&package, "rpc", "RpcProcessor", json!({}))];
    let d = LocalExecutor::new(projects, 1, Duration::from_secs(30), Some(Arc::new(source)), None).failing_on_outages();
    let rt = runtime();

    proxy.cut();
    // No anchor head ever comes: paused, this would wait for ever.
    let outcome = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), run(&d, vec![task(1, "rpc")])).await })
        .expect("the compute ended without waiting for the chain")
        .remove(0);
    let OutcomeKind::Failed(reason) = &outcome.kind else { panic!("{:?}", outcome.kind) };
    assert!(reason.contains("every source RPC endpoint failed (http://127.0.0.1:"), "{reason}");
    let queue = d.queue();
    assert!(!queue.paused && queue.paused_for.is_none(), "not paused: {queue:?}");

    proxy.mend();
    let outcome = rt.block_on(run(&d, vec![task(2, "rpc")])).remove(0);
    assert_eq!(outcome.kind, OutcomeKind::Computed, "its chain back, the next compute runs");
}

/// The work queue under the executor, with one worker: tasks that fail,
/// panic and hang each give their worker back (none leaks, the last task
/// still runs), a task still waiting when the head passes its deadline ends
/// as missed, and a duplicate of a task waiting or running is refused.
#[test]
fn every_ending_gives_the_worker_back_and_a_task_past_its_deadline_is_missed() {
    let data = tempfile::tempdir().unwrap();
    let package = load_faulty(data.path());
    let projects = vec![
        project(&package, "fails", "FailingProcessor", json!({})),
        project(&package, "panics", "PanickingProcessor", json!({})),
        project(&package, "hangs", "SlowProcessor", json!({"sleep_ms": 4000})),
        project(&package, "slow", "SlowProcessor", json!({"sleep_ms": 2000})),
        project(&package, "echo", "EchoProcessor", json!({"k": 1})),
    ];
    // A timeout a panic's unwinding (with a backtrace, on a busy machine)
    // stays well inside, and the sleepers well past.
    let d = LocalExecutor::new(projects, 1, Duration::from_secs(1), None, None);
    let rt = runtime();
    let outcomes = rt.block_on(run(&d, tasks(&d, 1)));
    let kinds: Vec<&OutcomeKind> = outcomes.iter().map(|o| &o.kind).collect();
    assert!(matches!(kinds[0], OutcomeKind::Failed(_)), "{kinds:?}");
    assert!(matches!(kinds[1], OutcomeKind::Failed(e) if e.contains("panicked")), "{kinds:?}");
    assert_eq!(kinds[2], &OutcomeKind::Failed("timed out after 1s (LITE_NODE_COMPUTE_TIMEOUT_SECS)".into()));
    assert_eq!(kinds[3], &OutcomeKind::Failed("timed out after 1s (LITE_NODE_COMPUTE_TIMEOUT_SECS)".into()));
    assert_eq!(kinds[4], &OutcomeKind::Computed, "the last task got the one worker");
    let q = d.queue();
    assert_eq!((q.running, q.waiting, q.counters.handed_out), (0, 0, 5), "{q:?}");

    // Epoch 2: `slow` holds the one worker; `echo` waits until the head
    // passes its deadline.
    let d = LocalExecutor::new(
        vec![
            project(&package, "slow", "SlowProcessor", json!({"sleep_ms": 400})),
            project(&package, "echo", "EchoProcessor", json!({"k": 1})),
        ],
        1,
        Duration::from_secs(30),
        None,
        None,
    );
    let mut waits = task(2, "echo");
    waits.deadline = 150;
    let (slow, echo) = rt.block_on(async {
        let work = run(&d, vec![task(2, "slow"), waits]);
        tokio::pin!(work);
        let observed = async {
            while d.queue().waiting == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            d.observe_head(149);
            assert_eq!(d.queue().waiting, 1, "not past its deadline yet");
            d.observe_head(151);
            std::future::pending::<()>().await
        };
        tokio::select! { results = &mut work => (results[0].clone(), results[1].clone()), _ = observed => unreachable!() }
    });
    assert_eq!(slow.kind, OutcomeKind::Computed);
    assert!(
        matches!(&echo.kind, OutcomeKind::Missed(e) if e.contains("deadline (anchor block 150) passed")),
        "{echo:?}"
    );
    assert_eq!(d.queue().counters.expired, 1);

    let twice =
        rt.block_on(d.execute(vec![task(3, "slow"), task(3, "slow")], Arc::from(Vec::new())).collect::<Vec<_>>());
    let mut kinds: Vec<String> = twice.iter().map(|o| format!("{:?}", o.kind)).collect();
    kinds.sort();
    assert_eq!(kinds, ["Computed", "Failed(\"the same compute is already queued or running\")"]);
}
