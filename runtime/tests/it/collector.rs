//! The devnet collector and the submission client over real gRPC, against
//! the devnet world's ProtocolState on anvil.

use std::{sync::Arc, time::Duration};

use lite_node::{
    chain::{Anchor, HttpRpc, IoRuntime},
    collector::{self, Collector, EpochAssignment, Received, SelectionCheck},
    compute::{self as compute_pkg, Fetch, LoadedPackage},
    config::{ComputeConfig, EnvSnapshot},
    submission::{self, Verdict},
};
use lite_node_protocol::{
    eip712::{Request, Signer},
    proto,
    submission::{Scope, cases},
};
use lite_node_testkit::World;

struct Setup {
    world: World,
    runtime: tokio::runtime::Runtime,
    _io: IoRuntime,
    anchor: Arc<Anchor>,
    chain_id: u64,
}

fn setup() -> Setup {
    let world = World::load();
    let io = IoRuntime::new().unwrap();
    let rpc = HttpRpc::new("anchor", vec![world.url()], Duration::from_secs(10), io.clone()).unwrap();
    let anchor = Arc::new(Anchor::new(
        rpc,
        world.manifest.protocol_state.parse().unwrap(),
        world.manifest.data_market.parse().unwrap(),
    ));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let chain_id = world.manifest.chain_id;
    // Submissions name epoch 3: the collector refuses epochs never released.
    for _ in 0..3 {
        world.release_next_epoch();
    }
    Setup { world, runtime, _io: io, anchor, chain_id }
}

/// Starts a collector on `listener`; returns what it records.
fn start_collector(s: &Setup, listener: std::net::TcpListener) -> Received {
    start_collector_with(s, listener, None)
}

fn start_collector_with(
    s: &Setup,
    listener: std::net::TcpListener,
    selection: Option<Arc<SelectionCheck>>,
) -> Received {
    let received = Received::default();
    let mut collector = Collector::new(s.anchor.clone(), s.chain_id);
    (collector.received, collector.selection) = (Some(received.clone()), selection);
    listener.set_nonblocking(true).unwrap();
    let _guard = s.runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    s.runtime.spawn(collector::serve(collector, listener, Box::pin(std::future::pending())));
    received
}

fn submission(s: &Setup, slot_id: u64, key_slot: u64, deadline: u64) -> proto::SnapshotSubmission {
    submission_for(s, slot_id, key_slot, deadline, 3, "blockDetails:devnet-UNISWAPV3-ETH")
}

fn submission_for(
    s: &Setup,
    slot_id: u64,
    key_slot: u64,
    deadline: u64,
    epoch_id: u64,
    project_id: &str,
) -> proto::SnapshotSubmission {
    let key_hex = s.world.manifest.signer_key(key_slot).trim_start_matches("0x").to_owned();
    let mut key = [0u8; 32];
    hex::decode_to_slice(key_hex, &mut key).unwrap();
    let signer = Signer::new(&key, s.chain_id, s.anchor.protocol_state).unwrap();
    let request = Request {
        slot_id,
        deadline,
        snapshot_cid: "bafkreicecnx2gvntm6fbcrvnc336qze6st5u7qq7457igegamd3bzkx7ri".into(),
        epoch_id,
        project_id: project_id.into(),
    };
    proto::SnapshotSubmission {
        signature: signer.sign(&request).unwrap(),
        request: Some((&request).into()),
        header: String::new(),
        data_market: s.world.manifest.data_market.clone(),
        node_version: Some("test".into()),
        protocol_state: s.world.manifest.protocol_state.clone(),
        snapshot: None,
    }
}

fn with(
    mut s: proto::SnapshotSubmission,
    edit: impl FnOnce(&mut proto::SnapshotSubmission),
) -> proto::SnapshotSubmission {
    edit(&mut s);
    s
}

#[test]
fn the_collector_accepts_a_good_submission_and_rejects_each_bad_one_with_its_reason() {
    let s = setup();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = submission::client::http_endpoint(listener.local_addr().unwrap());
    let received = start_collector(&s, listener);
    let head = s.world.head();
    let cases = [
        (submission(&s, 1, 1, head + 50), Verdict::Accepted, None),
        (
            submission(&s, 1, 2, head + 50),
            Verdict::Rejected("collector answered `Failure`".into()),
            Some("signature recovers to"),
        ),
        (submission(&s, 1, 1, head - 1), Verdict::Rejected("collector answered `Failure`".into()), Some("deadline")),
        (
            submission(&s, 9, 1, head + 50),
            Verdict::Rejected("collector answered `Failure`".into()),
            Some("slot 9 is not registered"),
        ),
        // Correctly signed, wrong content:
        (
            submission_for(&s, 1, 1, head + 50, 999, "blockDetails:devnet-UNISWAPV3-ETH"),
            Verdict::Rejected("collector answered `Failure`".into()),
            Some("epoch 999 was not released for this data market"),
        ),
        (
            submission(&s, 1, 1, u64::MAX),
            Verdict::Rejected("collector answered `Failure`".into()),
            Some("is past block"),
        ),
        (
            with(submission(&s, 1, 1, head + 50), |m| m.request.as_mut().unwrap().snapshot_cid = "Qm-nope".into()),
            Verdict::Rejected("collector answered `Failure`".into()),
            Some("snapshotCid `Qm-nope` is not a CID"),
        ),
        (
            submission_for(&s, 1, 1, head + 50, 3, "no-colons-here"),
            Verdict::Rejected("collector answered `Failure`".into()),
            Some("projectId `no-colons-here` is not"),
        ),
        (
            with(submission(&s, 1, 1, head + 50), |m| m.data_market = s.world.manifest.other_data_market.clone()),
            Verdict::Rejected("collector answered `Failure`".into()),
            Some("dataMarket"),
        ),
        (
            with(submission(&s, 1, 1, head + 50), |m| {
                m.protocol_state = "0x0000000000000000000000000000000000000001".into()
            }),
            Verdict::Rejected("collector answered `Failure`".into()),
            Some("protocolState 0x0000000000000000000000000000000000000001 is not this collector's"),
        ),
    ];
    for (n, (sub, want, reason)) in cases.into_iter().enumerate() {
        let verdict = s.runtime.block_on(submission::submit(
            &submission::Collector::new(&endpoint),
            sub,
            || Box::pin(async { true }) as submission::InTime,
            |_| {},
        ));
        match (&verdict, &want, reason) {
            // The node hears why, not only `Failure`.
            (Verdict::Rejected(got), Verdict::Rejected(answer), Some(text)) => {
                assert!(got.starts_with(&format!("{answer}: ")) && got.contains(text), "case {n}: {got}")
            }
            _ => assert_eq!(verdict, want, "case {n}"),
        }
        let recorded = received.lock().unwrap()[n].verdict.clone();
        match reason {
            None => assert_eq!(recorded, Ok(())),
            Some(text) => assert!(recorded.as_ref().unwrap_err().contains(text), "case {n}: {recorded:?}"),
        }
    }
}

/// A collector told the validators' window (`--window-blocks`) refuses a
/// submission that comes after it, with its reason, though its deadline is
/// still ahead: no validator would count it, so the node must not count it
/// as accepted.
#[test]
fn a_submission_after_the_validators_window_is_refused_as_window_closed() {
    let s = setup();
    let (epoch, released) = s.world.release_next_epoch();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = submission::client::http_endpoint(listener.local_addr().unwrap());
    let received = Received::default();
    let mut collector = Collector::new(s.anchor.clone(), s.chain_id);
    (collector.received, collector.window_blocks) = (Some(received.clone()), 3);
    listener.set_nonblocking(true).unwrap();
    {
        let _guard = s.runtime.enter();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        s.runtime.spawn(collector::serve(collector, listener, Box::pin(std::future::pending())));
    }
    // Each attempt its own bytes (its deadline): the same bytes again get
    // the first answer.
    let attempt = std::cell::Cell::new(0);
    let send = |slot: u64| {
        attempt.set(attempt.get() + 1);
        let deadline = released + 100 + attempt.get();
        let sub = submission_for(&s, slot, slot, deadline, epoch, "blockDetails:devnet-UNISWAPV3-ETH");
        s.runtime.block_on(submission::submit(
            &submission::Collector::new(&endpoint),
            sub,
            || Box::pin(async { true }) as submission::InTime,
            |_| {},
        ))
    };
    // Open through release + 3.
    s.world.mine(released + 3 - s.world.head());
    assert_eq!(send(1), Verdict::Accepted, "the last block of the window");
    s.world.mine(1);
    // The head is read at most every HEAD_FRESH: asked until it is seen.
    let refused = lite_node_testkit::poll_until("the window closed at the collector", Duration::from_secs(10), || {
        match send(2) {
            Verdict::Rejected(why) => Some(why),
            Verdict::Accepted => None,
            other => panic!("{other:?}"),
        }
    });
    assert!(refused.contains("window is closed"), "{refused}");
    let recorded = received.lock().unwrap().iter().filter(|r| r.verdict.is_err()).count();
    assert!(recorded >= 1);
}

#[test]
fn a_collector_down_for_a_while_is_retried_until_it_is_back_and_past_the_deadline_the_miss_is_reported() {
    let s = setup();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let head = s.world.head();
    let sub = submission(&s, 1, 1, head + 50);

    // Nothing listens and the deadline has passed: the miss is reported, not hidden.
    let verdict = s.runtime.block_on(submission::submit(
        &submission::Collector::new(&endpoint),
        sub.clone(),
        {
            let mut tries = 0;
            move || {
                tries += 1;
                let in_time = tries <= 2;
                Box::pin(async move { in_time }) as submission::InTime
            }
        },
        |_| {},
    ));
    assert!(
        matches!(&verdict, Verdict::Unreachable(m) if m.contains("did not answer before the deadline")),
        "{verdict:?}"
    );

    // The collector comes up while the client retries.
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = attempts.clone();
    let target = endpoint.clone();
    let pending = s.runtime.spawn(async move {
        submission::submit(
            &submission::Collector::new(target),
            sub,
            move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Box::pin(async { true }) as submission::InTime
            },
            |_| {},
        )
        .await
    });
    lite_node_testkit::poll_until("a second attempt", Duration::from_secs(30), || {
        (attempts.load(std::sync::atomic::Ordering::SeqCst) >= 2).then_some(())
    });
    let received = start_collector(&s, std::net::TcpListener::bind(("127.0.0.1", port)).unwrap());
    assert_eq!(s.runtime.block_on(pending).unwrap(), Verdict::Accepted);
    assert_eq!(received.lock().unwrap().len(), 1, "sent once it was back, and only once");
}

/// The same bytes again are the same submission: copies sent at once and
/// one sent later are answered as the first was and recorded once (its
/// arrivals counted) — a rejected one too, with its reason — while another
/// message for the same slot, epoch and project is a submission of its own.
#[test]
fn the_same_bytes_again_are_answered_alike_and_recorded_once() {
    let s = setup();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = submission::client::http_endpoint(listener.local_addr().unwrap());
    let received = start_collector(&s, listener);
    let head = s.world.head();
    let good = submission(&s, 1, 1, head + 50);
    let bad = submission(&s, 1, 2, head + 50); // signed by slot 2's key
    let answers = s.runtime.block_on(async {
        let client = proto::submission_client::SubmissionClient::connect(endpoint).await.unwrap();
        let send = |m: proto::SnapshotSubmission| {
            let mut client = client.clone();
            async move {
                let answer = client.submit_snapshot(m).await.unwrap();
                let reason = answer.metadata().get(proto::REASON_METADATA).map(|v| v.to_str().unwrap().to_owned());
                (answer.into_inner().message, reason)
            }
        };
        let at_once = futures_util::future::join_all((0..3).map(|_| send(good.clone()))).await;
        let mut answers = at_once;
        answers.push(send(good.clone()).await);
        answers.push(send(bad.clone()).await);
        answers.push(send(bad.clone()).await);
        answers.push(send(submission(&s, 1, 1, head + 51)).await);
        answers
    });
    for answer in &answers[..4] {
        assert_eq!(answer, &(proto::SUCCESS.to_owned(), None));
    }
    assert_eq!(answers[4].0, proto::FAILURE);
    assert!(answers[4].1.as_deref().is_some_and(|r| r.contains("signature recovers to")), "{:?}", answers[4]);
    assert_eq!(answers[5], answers[4], "the rejection repeated with its reason");
    assert_eq!(answers[6].0, proto::SUCCESS, "another deadline: another message");
    let seen = received.lock().unwrap();
    let arrivals: Vec<(u64, bool, u32)> =
        seen.iter().map(|x| (x.submission.request.as_ref().unwrap().deadline, x.verdict.is_ok(), x.arrivals)).collect();
    assert_eq!(arrivals, [(head + 50, true, 4), (head + 50, false, 2), (head + 51, true, 1)]);
}

/// A validator's gateway that takes 500 ms to take a submission, counting them.
#[derive(Clone, Default)]
struct SlowGateway(Arc<std::sync::atomic::AtomicUsize>);

#[tonic::async_trait]
impl proto::submission_server::Submission for SlowGateway {
    async fn submit_snapshot(
        &self,
        _: tonic::Request<proto::SnapshotSubmission>,
    ) -> Result<tonic::Response<proto::SubmissionResponse>, tonic::Status> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(tonic::Response::new(proto::SubmissionResponse { message: proto::SUCCESS.into() }))
    }

    async fn submit_snapshot_simulation(
        &self,
        _: tonic::Request<tonic::Streaming<proto::SnapshotSubmission>>,
    ) -> Result<tonic::Response<proto::SubmissionResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("not used"))
    }
}

/// A node that hangs up while its submission is being judged (its attempt
/// timed out; it was killed) does not cut the judgement off after the
/// forward: the copy it sends next waits for that same judgement, and the
/// validator's gateway is sent the message once.
#[test]
fn a_node_that_hangs_up_mid_judgement_does_not_get_its_message_forwarded_twice() {
    let s = setup();
    let gateway = SlowGateway::default();
    let forwards = gateway.0.clone();
    let gateway_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gateway_at = submission::client::http_endpoint(gateway_listener.local_addr().unwrap());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = submission::client::http_endpoint(listener.local_addr().unwrap());
    let received = Received::default();
    {
        let _guard = s.runtime.enter();
        gateway_listener.set_nonblocking(true).unwrap();
        let incoming =
            tonic::transport::server::TcpIncoming::from(tokio::net::TcpListener::from_std(gateway_listener).unwrap());
        let server = tonic::transport::Server::builder()
            .add_service(proto::submission_server::SubmissionServer::new(gateway))
            .serve_with_incoming(incoming);
        s.runtime.spawn(server);
        let mut collector = Collector::new(s.anchor.clone(), s.chain_id);
        collector.received = Some(received.clone());
        let channel = tonic::transport::Endpoint::from_shared(gateway_at).unwrap().connect_lazy();
        collector.forward = Some(proto::submission_client::SubmissionClient::new(channel));
        listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        s.runtime.spawn(collector::serve(collector, listener, Box::pin(std::future::pending())));
    }
    let message = submission(&s, 1, 1, s.world.head() + 50);
    let second = s.runtime.block_on(async {
        let mut client = proto::submission_client::SubmissionClient::connect(endpoint).await.unwrap();
        let mut first_client = client.clone();
        let first = tokio::time::timeout(Duration::from_millis(250), first_client.submit_snapshot(message.clone()));
        assert!(first.await.is_err(), "the first attempt gave up while the gateway held the forward");
        client.submit_snapshot(message.clone()).await.unwrap().into_inner().message
    });
    assert_eq!(second, proto::SUCCESS);
    assert_eq!(forwards.load(std::sync::atomic::Ordering::SeqCst), 1, "forwarded once");
    let seen = received.lock().unwrap();
    assert_eq!(seen.iter().map(|x| x.arrivals).collect::<Vec<_>>(), [2], "one submission, come twice");
}

/// The bundled compute package (its assignment rule), built or reused.
fn bundled(data_dir: &std::path::Path) -> LoadedPackage {
    let mut env = lite_node_testkit::toolchain_env();
    env.push(("LITE_NODE_DATA_DIR".into(), data_dir.display().to_string()));
    env.extend(lite_node_testkit::compute_build_env());
    let cfg = ComputeConfig::from_env(&EnvSnapshot::from_pairs(env)).unwrap();
    LoadedPackage::load(compute_pkg::ensure(&cfg, Fetch::Allowed).unwrap()).unwrap()
}

/// A selection check on the bundled package's rule, and an epoch (of 5,000
/// slots) where one of the 4 registered slots is selected and another is
/// not: the assignment, the selected slot, the idle one.
fn selection_setting(s: &Setup, data: &std::path::Path) -> (Arc<SelectionCheck>, Arc<EpochAssignment>, u64, u64) {
    let pools = s.world.manifest.pools.clone();
    let io = IoRuntime::new().unwrap();
    let source = Arc::new(HttpRpc::new("source", vec![s.world.url()], Duration::from_secs(10), io).unwrap());
    let projects = lite_node_protocol::submission::Projects::new("devnet-UNISWAPV3-ETH", ["baseSnapshot"]);
    let check = Arc::new(SelectionCheck::new(source, pools, Arc::new(bundled(data)), projects).unwrap());
    // 5,000 slots: 1,000 are selected per epoch, so each of our 4 with p = 0.2.
    s.world.set_total_node_count(5000);
    let (epoch, chosen, idle) = (0..40)
        .find_map(|_| {
            s.world.mine(1);
            let (epoch_id, _) = s.world.release_next_epoch();
            let release = s.runtime.block_on(s.anchor.epoch_release(epoch_id, 0)).unwrap().unwrap();
            let a = s.runtime.block_on(check.epoch(&s.anchor, epoch_id, release)).unwrap();
            let chosen = (1..=4).find(|slot| a.selected.contains_key(slot))?;
            let idle = (1..=4).find(|slot| !a.selected.contains_key(slot))?;
            Some((a, chosen, idle))
        })
        .expect("within 40 epochs one of 4 slots is selected and another is not");
    (check, epoch, chosen, idle)
}

fn key_of(s: &Setup, slot: u64) -> [u8; 32] {
    let mut key = [0u8; 32];
    hex::decode_to_slice(s.world.manifest.signer_key(slot).trim_start_matches("0x"), &mut key).unwrap();
    key
}

/// The protocol's table of submission cases (`submission::cases`), the one
/// the validator's pipeline test runs too, over gRPC against anvil: each
/// gets the reason the table says.
#[test]
fn the_collector_gives_every_shared_submission_case_its_reason() {
    let s = setup();
    let data = tempfile::tempdir().unwrap();
    let (check, epoch, chosen, idle) = selection_setting(&s, data.path());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = submission::client::http_endpoint(listener.local_addr().unwrap());
    let received = start_collector_with(&s, listener, Some(check));
    let assigned = epoch.selected[&chosen].clone();
    let other = s.world.manifest.pools.iter().find(|p| **p != assigned).unwrap().clone();
    let project = |pool: &str| format!("baseSnapshot:{}:devnet-UNISWAPV3-ETH", pool.to_lowercase());
    let release = s.runtime.block_on(s.anchor.epoch_release(epoch.epoch_id, 0)).unwrap().unwrap();
    let setting = cases::Setting {
        scope: Scope { data_market: s.anchor.data_market, protocol_state: s.anchor.protocol_state },
        chain_id: s.chain_id,
        epoch_id: epoch.epoch_id,
        release_block: release.block_number,
        head: s.world.head(),
        unknown_epoch_id: 9999,
        slot_id: chosen,
        key: key_of(&s, chosen),
        project_id: project(&assigned),
        other_pool_project_id: project(&other),
        unselected_slot_id: idle,
        unselected_key: key_of(&s, idle),
        unregistered_slot_id: 9,
    };
    for (n, case) in cases::cases().into_iter().enumerate() {
        let verdict = s.runtime.block_on(submission::submit(
            &submission::Collector::new(&endpoint),
            case.submission(&setting),
            || Box::pin(async { true }) as submission::InTime,
            |_| {},
        ));
        let seen = received.lock().unwrap()[n].clone();
        assert_eq!(seen.reason, case.expect, "{}: {:?}", case.name, seen.verdict);
        let accepted = verdict == Verdict::Accepted;
        assert_eq!(accepted, case.expect.is_none(), "{}: {verdict:?}", case.name);
    }
}

#[test]
fn the_collector_rejects_a_slot_that_was_not_selected_and_a_pool_it_was_not_assigned() {
    let s = setup();
    let data = tempfile::tempdir().unwrap();
    let pools = s.world.manifest.pools.clone();
    let (check, epoch, chosen, idle) = selection_setting(&s, data.path());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = submission::client::http_endpoint(listener.local_addr().unwrap());
    let received = start_collector_with(&s, listener, Some(check));
    assert_eq!(epoch.total_slots, 5000);
    assert_eq!(epoch.selected.len(), 1000);
    let assigned = epoch.selected[&chosen].clone();
    let other = pools.iter().find(|p| **p != assigned).unwrap().clone();
    let project = |pool: &str| format!("baseSnapshot:{}:devnet-UNISWAPV3-ETH", pool.to_lowercase());
    let head = s.world.head();
    let e = epoch.epoch_id;
    let cases = [
        (submission_for(&s, chosen, chosen, head + 50, e, &project(&assigned)), None),
        (
            submission_for(&s, chosen, chosen, head + 50, e, &project(&other)),
            Some(format!("was assigned pool {assigned}")),
        ),
        (
            submission_for(&s, idle, idle, head + 50, e, &project(&assigned)),
            Some(format!("slot {idle} was not selected")),
        ),
        (
            submission_for(&s, chosen, chosen, head + 50, e, &project("0x00000000000000000000000000000000000000aa")),
            Some("is not in the data market's active pool list".into()),
        ),
        (
            submission_for(&s, chosen, chosen, head + 50, 9999, &project(&assigned)),
            Some("epoch 9999 was not released".into()),
        ),
    ];
    // Projects made up around the assigned pool (issue 42, finding 2): a
    // data source of several pools is no project of the market, however
    // it is ordered; a project without a data source needs a selected slot.
    let a = assigned.to_lowercase();
    let b = other.to_lowercase();
    let mut cases = cases.to_vec();
    for source in [format!("{a}_{b}"), format!("{b}_{a}"), format!("{a}_{a}_{a}"), format!("{a}_{a}")] {
        cases.push((
            submission_for(&s, chosen, chosen, head + 50, e, &format!("baseSnapshot:{source}:devnet-UNISWAPV3-ETH")),
            Some("is not one pool address".into()),
        ));
    }
    cases.push((
        submission_for(&s, idle, idle, head + 50, e, "baseSnapshot:devnet-UNISWAPV3-ETH"),
        Some(format!("slot {idle} was not selected")),
    ));
    cases.push((submission_for(&s, chosen, chosen, head + 50, e, "baseSnapshot:devnet-UNISWAPV3-ETH"), None));
    submit_cases(&s, &endpoint, &received, cases);
}

/// A slot the data market marks as a full node (docs/protocol.md §13) is
/// accepted for every active pool in epochs released after it was marked,
/// selected or not; a pool outside the active list is still refused, and an
/// epoch released before the mark still needs the selection.
#[test]
fn a_full_node_slot_is_accepted_for_every_active_pool_from_the_next_release() {
    let s = setup();
    let data = tempfile::tempdir().unwrap();
    let pools = s.world.manifest.pools.clone();
    let (check, before, _, idle) = selection_setting(&s, data.path());
    s.world.set_full_node(idle, true);
    s.world.mine(1);
    let (epoch_id, _) = s.world.release_next_epoch();
    let release = s.runtime.block_on(s.anchor.epoch_release(epoch_id, 0)).unwrap().unwrap();
    let after = s.runtime.block_on(check.epoch(&s.anchor, epoch_id, release)).unwrap();
    assert!(after.full_nodes.contains(&idle) && !before.full_nodes.contains(&idle));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = submission::client::http_endpoint(listener.local_addr().unwrap());
    let received = start_collector_with(&s, listener, Some(check));
    let project = |pool: &str| format!("baseSnapshot:{}:devnet-UNISWAPV3-ETH", pool.to_lowercase());
    let head = s.world.head();
    let mut cases: Vec<_> =
        pools.iter().map(|p| (submission_for(&s, idle, idle, head + 50, epoch_id, &project(p)), None)).collect();
    cases.push((
        submission_for(&s, idle, idle, head + 50, epoch_id, &project("0x00000000000000000000000000000000000000aa")),
        Some("is not in the data market's active pool list".to_owned()),
    ));
    cases.push((
        submission_for(&s, idle, idle, head + 50, before.epoch_id, &project(&pools[0])),
        Some(format!("slot {idle} was not selected")),
    ));
    submit_cases(&s, &endpoint, &received, cases);
}

/// Submits each case in turn to the collector at `endpoint`: one with no
/// reason must be accepted; one with a reason rejected with it, as the
/// collector answered and as it recorded.
fn submit_cases(
    s: &Setup,
    endpoint: &str,
    received: &Received,
    cases: impl IntoIterator<Item = (lite_node_protocol::proto::SnapshotSubmission, Option<String>)>,
) {
    for (n, (sub, reason)) in cases.into_iter().enumerate() {
        let verdict = s.runtime.block_on(submission::submit(
            &submission::Collector::new(endpoint),
            sub,
            || Box::pin(async { true }) as submission::InTime,
            |_| {},
        ));
        let recorded = received.lock().unwrap()[n].verdict.clone();
        match reason {
            None => {
                assert_eq!(verdict, Verdict::Accepted, "case {n}: {recorded:?}");
                assert_eq!(recorded, Ok(()));
            }
            Some(text) => {
                let Verdict::Rejected(got) = &verdict else { panic!("case {n}: {verdict:?}") };
                assert!(got.starts_with("collector answered `Failure`: ") && got.contains(&text), "case {n}: {got}");
                assert!(recorded.as_ref().unwrap_err().contains(&text), "case {n}: {recorded:?}");
            }
        }
    }
}

/// A message past the collector's size cap is refused before it is decoded,
/// judged or recorded; the next good one is taken as usual.
#[test]
fn a_message_past_the_size_cap_is_refused_before_it_is_judged() {
    let s = setup();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = submission::client::http_endpoint(listener.local_addr().unwrap());
    let received = start_collector(&s, listener);
    let head = s.world.head();
    let huge = with(submission(&s, 1, 1, head + 50), |m| m.header = "x".repeat(collector::MAX_MESSAGE_BYTES));
    let answer = s.runtime.block_on(async {
        let mut client = proto::submission_client::SubmissionClient::connect(endpoint.clone()).await.unwrap();
        let refused = client.submit_snapshot(huge).await;
        let taken = client.submit_snapshot(submission(&s, 1, 1, head + 50)).await;
        (refused, taken)
    });
    let refused = answer.0.expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
    assert_eq!(answer.1.expect("taken").into_inner().message, proto::SUCCESS);
    assert_eq!(received.lock().unwrap().len(), 1, "only the good one was judged and recorded");
}

/// A collector that publishes to the validators over gossip, with none
/// connected, asks the node to retry (UNAVAILABLE) instead of answering
/// `Success` for a submission no validator would hear; nothing is recorded.
#[test]
fn a_collector_with_no_validator_reachable_over_gossip_asks_the_node_to_retry() {
    let s = setup();
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = submission::client::http_endpoint(listener.local_addr().unwrap());
    let received = Received::default();
    let mut collector = Collector::new(s.anchor.clone(), s.chain_id);
    collector.received = Some(received.clone());
    listener.set_nonblocking(true).unwrap();
    let _guard = s.runtime.enter();
    collector.gossip = Some(
        lite_node_validator::gossip::Gossip::publisher(lite_node_validator::gossip::Settings {
            listen: "/ip4/127.0.0.1/tcp/0".parse().unwrap(),
            bootstrap: Vec::new(),
            identity: dir.path().join("p2p-identity.key"),
            topic: lite_node_validator::gossip::SUBMISSIONS_TOPIC.into(),
        })
        .unwrap(),
    );
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    s.runtime.spawn(collector::serve(collector, listener, Box::pin(std::future::pending())));
    let head = s.world.head();
    let answer = s.runtime.block_on(async {
        let mut client = proto::submission_client::SubmissionClient::connect(endpoint).await.unwrap();
        client.submit_snapshot(submission(&s, 1, 1, head + 50)).await
    });
    let status = answer.expect_err("not taken");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("no validator is reachable over gossip"), "{status:?}");
    assert!(received.lock().unwrap().is_empty(), "nothing recorded as answered");
}

/// A peer past its rate is told to slow down (RESOURCE_EXHAUSTED) before
/// anything is judged or recorded (issue 42, finding 6); made-up slot ids
/// past the registry are refused as unregistered.
#[test]
fn a_peer_past_its_rate_is_told_to_slow_down_before_anything_is_judged() {
    let s = setup();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = submission::client::http_endpoint(listener.local_addr().unwrap());
    let received = Received::default();
    let mut collector = Collector::new(s.anchor.clone(), s.chain_id).with_peer_rate(1, 310);
    collector.received = Some(received.clone());
    listener.set_nonblocking(true).unwrap();
    let _guard = s.runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    s.runtime.spawn(collector::serve(collector, listener, Box::pin(std::future::pending())));
    let head = s.world.head();
    let answers = s.runtime.block_on(async {
        let mut client = proto::submission_client::SubmissionClient::connect(endpoint).await.unwrap();
        let mut out = Vec::new();
        for i in 0..400u64 {
            out.push(client.submit_snapshot(submission(&s, 1_000_000 + i, 1, head + 50)).await);
        }
        out
    });
    let (taken, refused): (Vec<_>, Vec<_>) = answers.into_iter().partition(|a| a.is_ok());
    // The burst, and one a second while they were sent.
    assert!((310..340).contains(&taken.len()), "the burst is taken: {}", taken.len());
    assert_eq!(refused.len(), 400 - taken.len(), "past it, refused");
    for r in refused {
        let status = r.unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert!(status.message().contains("slow down"), "{status:?}");
    }
    let received = received.lock().unwrap();
    assert_eq!(received.len(), taken.len(), "only what was taken was judged and recorded");
    assert!(
        received.iter().all(|r| r.verdict.as_ref().is_err_and(|e| e.contains("is not registered"))),
        "{:?}",
        received.first().map(|r| &r.verdict)
    );
}

/// `lite-node collector --status-listen` publishing on gossip: `/health` is
/// 200 while a validator is connected to take what it accepts, and 503
/// naming the validators once none is (every accepted submission would be
/// answered "retry"), then 200 again when one is back.
#[test]
fn the_collectors_health_says_when_no_validator_is_reachable_over_gossip() {
    use lite_node_validator::gossip;

    let world = World::load();
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let validator_settings = || gossip::Settings {
        listen: "/ip4/127.0.0.1/tcp/0".parse().unwrap(),
        bootstrap: Vec::new(),
        identity: dir.path().join("validator").join("p2p-identity.key"),
        topic: gossip::SUBMISSIONS_TOPIC.into(),
    };
    let start_validator = || {
        let _guard = runtime.enter();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let peer =
            gossip::Gossip::start(validator_settings(), Arc::new(|_: &[u8]| gossip::Verdict::Accept), tx).unwrap();
        (peer, rx)
    };
    let (validator, rx) = start_validator();
    let address = runtime.block_on(validator.listening())[0].to_string();
    let status = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let env = lite_node_testkit::node_env(&world.url(), &world.manifest, 1);
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let identity = dir.path().join("collector");
    let _collector = lite_node_testkit::RunningCollector::start_with(
        std::path::Path::new(env!("CARGO_BIN_EXE_lite-node")),
        &env,
        free,
        &[
            "--status-listen",
            &status.to_string(),
            "--p2p-listen",
            "/ip4/127.0.0.1/tcp/0",
            "--p2p-bootstrap",
            &address,
            "--data-dir",
            identity.to_str().unwrap(),
        ],
    );
    let health = || {
        let answer = reqwest::blocking::get(format!("http://{status}/health")).ok()?;
        Some((answer.status().as_u16(), answer.text().unwrap_or_default()))
    };
    let wait_for = |code: u16, what: &str| {
        lite_node_testkit::poll_until(what, Duration::from_secs(30), || health().filter(|(c, _)| *c == code))
    };
    let (_, body) = wait_for(200, "healthy with the validator connected");
    assert!(body.contains("\"validators_reached\":1"), "{body}");
    drop((validator, rx));
    let (_, body) = wait_for(503, "unhealthy with no validator");
    assert!(body.contains("no validator reachable over gossip"), "{body}");
    // The same validator (its identity, its address) back: healthy again.
    let (_validator, _rx) = {
        let _guard = runtime.enter();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut settings = validator_settings();
        settings.listen = address.split("/p2p/").next().unwrap().parse().unwrap();
        (gossip::Gossip::start(settings, Arc::new(|_: &[u8]| gossip::Verdict::Accept), tx).unwrap(), rx)
    };
    wait_for(200, "healthy again with the validator back");
}
