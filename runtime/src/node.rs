//! `lite-node run`: the node's main loop. Loads the compute package and one
//! processor per project, checks this node's identity on the anchor chain,
//! then for every released epoch of our data market preloads block details,
//! dispatches the epoch to every processor, records the outcomes, and only
//! then advances the persisted cursor.

use std::{
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use alloy::primitives::Address;
use anyhow::{Context, Result};
use backon::{BackoffBuilder, ExponentialBuilder};
use lite_node_plugin_api::{BlockDetail, EpochContext};
use lite_node_protocol::eip712::{Request, Signer};

use crate::{
    alerts::{AlertKind, Alerter, Sender},
    books::{Books, Notice},
    chain::{Anchor, HttpRpc, IoRuntime},
    collector::{self, Ledger, Verdict, proto},
    commands::{BadInput, load_projects},
    compute::{
        self, Fetch, LoadedPackage,
        host::{RpcEndpoint, SelectionTracker},
    },
    config::NodeConfig,
    dispatch::{Dispatcher, Outcome, OutcomeKind, ProjectProcessor, now_ms},
    epochs::{Epoch, Watcher, preload},
    ipfs::Ipfs,
    journal::Journal,
    safety::{self, Activity},
    snapshots::SnapshotStore,
    status::{Info, Metrics, NodeStatus},
};

/// Attempts at preloading an epoch's blocks (the source chain may lag).
const PRELOAD_ATTEMPTS: usize = 5;

fn backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(30))
        .with_jitter()
        .without_max_times()
        .build()
}

/// Runs the node until `shutdown` completes.
pub async fn run(cfg: NodeConfig, shutdown: impl Future<Output = ()>) -> Result<()> {
    tokio::pin!(shutdown);
    let data_dir = cfg.compute.data_dir.clone();
    let (projects, package) = {
        let cfg = cfg.clone();
        tokio::task::spawn_blocking(move || -> Result<_> {
            let projects = load_projects(&cfg.projects, &cfg.compute.data_dir)?;
            let package = LoadedPackage::load(compute::ensure(&cfg.compute, Fetch::Allowed)?)?;
            Ok((projects, package))
        })
        .await
        .context("loading the compute package")??
    };
    let mut processors = Vec::new();
    for project in projects.projects {
        let settings = serde_json::Value::Object(project.settings.clone()).to_string();
        let processor = package
            .new_processor(&project.module, &project.class_name, &settings)
            .map_err(|e| BadInput(format!("project {}: {e}", project.project_type)))?;
        processors.push(ProjectProcessor { project, processor: Arc::new(processor) });
    }
    tracing::info!(
        "compute package {} loaded: {}",
        package.package.manifest.commit,
        processors.iter().map(|p| p.project.project_type.as_str()).collect::<Vec<_>>().join(", ")
    );

    let metrics = Metrics::default();
    let io = IoRuntime::new().context("starting the I/O runtime")?;
    let rpc = |role, urls: &Vec<String>| {
        HttpRpc::new(role, urls.clone(), cfg.watch.rpc_timeout, io.clone())
            .map(|r| r.count_errors(metrics.rpc_errors(role)))
            .map_err(|e| anyhow::anyhow!(e))
    };
    let source = Arc::new(rpc("source", &cfg.source_rpc_urls)?);
    let anchor_for_host: Arc<dyn RpcEndpoint> = Arc::new(rpc("anchor", &cfg.anchor_rpc_urls)?);
    let protocol_state: Address =
        cfg.protocol_state.parse().map_err(|e| BadInput(format!("PROTOCOL_STATE_CONTRACT: {e}")))?;
    let data_market: Address = cfg.data_market.parse().map_err(|e| BadInput(format!("DATA_MARKET_CONTRACT: {e}")))?;
    let anchor = Arc::new(Anchor::new(rpc("anchor", &cfg.anchor_rpc_urls)?, protocol_state, data_market));

    let tracker = Arc::new(SelectionTracker::persistent(data_dir.join("state").join("slot_selection_status.json")));
    let books_path = Books::path(&data_dir, &cfg.protocol_state, &cfg.data_market);
    let mut books = Books::open(&books_path).context("opening the books")?;
    let activity = Arc::new(Activity::default());
    let status = Arc::new(NodeStatus {
        info: Info {
            slot_id: cfg.slot_id,
            signer: cfg.signer_address.clone(),
            data_market: cfg.data_market.clone(),
            protocol_state: cfg.protocol_state.clone(),
            namespace: cfg.full_namespace(),
            compute_package: package.package.manifest.commit.clone(),
            version: env!("CARGO_PKG_VERSION"),
        },
        activity: activity.clone(),
        tracker: tracker.clone(),
        books: Mutex::new(books.clone()),
        metrics,
        watching: AtomicBool::new(false),
        stuck_after: cfg.safety.stuck_after,
    });
    let (stop_status, status_stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(addr) = cfg.status_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| BadInput(format!("STATUS_PORT: cannot listen on {addr}: {e}")))?;
        tracing::info!("status API on http://{} (/health, /status, /metrics)", listener.local_addr()?);
        tokio::spawn(crate::status::serve(status.clone(), listener, async move {
            let _ = status_stopped.await;
        }));
    }
    let alerter = Alerter::start(
        &cfg.alerts,
        Sender { slot_id: cfg.slot_id, signer: cfg.signer_address.clone() },
        Some(data_dir.join("state").join("pending-alerts.json")),
    )
    .map_err(BadInput)?;

    let Some(()) = check_identity(&cfg, &anchor, &mut shutdown).await? else {
        tracing::info!("shutdown before the node started");
        return Ok(());
    };
    if let Some(drill) = cfg.drill {
        tracing::warn!("alert drill {drill:?} (LITE_NODE_DRILL): every selected compute's result will be replaced");
    }

    let chain_id = {
        let v = anchor
            .rpc()
            .call_value("eth_chainId", serde_json::json!([]))
            .await
            .context("reading the anchor chain id")?;
        u64::from_str_radix(v.as_str().unwrap_or_default().trim_start_matches("0x"), 16)
            .with_context(|| format!("eth_chainId answered {v}"))?
    };
    let submitter = Submitter {
        signer: Signer::new(cfg.signer_key.bytes(), chain_id, protocol_state).map_err(BadInput)?,
        ledger: Ledger::open(&data_dir).context("opening the submission ledger")?,
        endpoint: format!("http://{}:{}", cfg.collector_host, cfg.collector_port),
        ipfs: cfg.ipfs.as_ref().map(Ipfs::new).transpose().map_err(BadInput)?,
    };
    if let Some(ipfs) = &cfg.ipfs {
        tracing::info!("snapshots are also uploaded to IPFS at {}", crate::config::redact_url(&ipfs.url));
    }
    let dispatcher = Dispatcher::new(
        processors,
        cfg.watch.max_concurrent_computes,
        cfg.watch.compute_timeout,
        Some(source.clone() as Arc<dyn RpcEndpoint>),
        Some(anchor_for_host),
        tracker,
    )
    .with_drill(cfg.drill)
    .with_history(
        Arc::new(SnapshotStore::open(&data_dir).context("opening the snapshot store")?),
        cfg.full_namespace(),
    );
    let mut watcher = Watcher::open(anchor.clone(), &data_dir, cfg.watch.clone())
        .with_context(|| format!("opening the epoch cursor in {}", data_dir.display()))?;
    let mut journal = Journal::open(&data_dir).context("opening the epoch journal")?;
    let needs_blocks = dispatcher.projects.iter().any(|p| p.project.preload_tasks.iter().any(|t| t == "block_details"));
    tracing::info!(
        "watching ProtocolState {protocol_state} for data market {data_market} every {} ms",
        cfg.watch.poll_interval.as_millis()
    );

    status.watching.store(true, Ordering::Relaxed);
    activity.touch();
    let watching = async {
        let mut delays = backoff();
        let mut failing = false;
        let mut stopping = false;
        'watch: loop {
            let poll = tokio::select! {
                _ = &mut shutdown => break 'watch,
                poll = watcher.poll() => poll,
            };
            let poll = match poll {
                Ok(poll) => {
                    if failing {
                        tracing::info!("anchor RPC answers again");
                        failing = false;
                    }
                    delays = backoff();
                    poll
                }
                Err(e) => {
                    let delay = delays.next().unwrap_or(Duration::from_secs(30));
                    if !failing {
                        tracing::warn!("polling the anchor chain failed ({e}); retrying with backoff");
                    } else {
                        tracing::debug!("anchor still failing ({e}); next try in {delay:?}");
                    }
                    failing = true;
                    tokio::select! {
                        _ = &mut shutdown => break 'watch,
                        _ = tokio::time::sleep(delay) => continue 'watch,
                    }
                }
            };
            for epoch in &poll.epochs {
                let seen_at = now_ms();
                let work = async {
                    let mut outcomes =
                        handle_epoch(&cfg, epoch, poll.head, &anchor, &source, &dispatcher, needs_blocks).await;
                    for outcome in &mut outcomes {
                        submitter.submit(&cfg, epoch, outcome, &anchor).await.context("recording a submission")?;
                    }
                    Ok::<_, anyhow::Error>(outcomes)
                };
                tokio::pin!(work);
                // A stop lets the epoch in flight finish, for a while: a
                // submission waiting for an anchor that is down could wait
                // forever. An abandoned epoch is computed again after the
                // restart (the ledger keeps what was acknowledged).
                let outcomes = tokio::select! {
                    outcomes = &mut work => outcomes?,
                    _ = &mut shutdown => {
                        let grace = cfg.watch.stop_grace.as_secs();
                        tracing::info!("stopping: letting epoch {} finish (at most {grace}s)", epoch.epoch_id);
                        match tokio::time::timeout(cfg.watch.stop_grace, &mut work).await {
                            Ok(outcomes) => {
                                stopping = true;
                                outcomes?
                            }
                            Err(_) => {
                                tracing::warn!(
                                    "epoch {} did not finish within {}s; it is processed again after the restart",
                                    epoch.epoch_id,
                                    cfg.watch.stop_grace.as_secs()
                                );
                                break 'watch;
                            }
                        }
                    }
                };
                for outcome in &outcomes {
                    log_outcome(epoch, outcome);
                    journal.record(epoch, outcome).with_context(|| format!("writing {}", journal.path().display()))?;
                }
                keep_books(&mut books, &status, &alerter, epoch, &outcomes, seen_at, &books_path)?;
                watcher.epoch_handled(epoch).context("saving the epoch cursor")?;
                if stopping {
                    break 'watch;
                }
            }
            watcher.scan_complete(poll.scanned_to).context("saving the epoch cursor")?;
            if poll.epochs.is_empty() && poll.scanned_to >= poll.head {
                tokio::select! {
                    _ = &mut shutdown => break 'watch,
                    _ = tokio::time::sleep(cfg.watch.poll_interval) => {}
                }
            }
        }
        Ok::<(), anyhow::Error>(())
    };
    let stuck = tokio::select! {
        done = watching => { done?; None }
        stuck = safety::watch(cfg.safety, &activity, |s| {
            let taken = alerter.notify(
                AlertKind::Unhealthy { idle: s.idle, checks: s.checks, exit_after: cfg.safety.exit_after },
                &status.books.lock().unwrap_or_else(|p| p.into_inner()),
            );
            status.metrics.alerts.inc_by(taken as u64);
        }) => Some(stuck),
    };
    status.watching.store(false, Ordering::Relaxed);
    if let Some(stuck) = stuck {
        let _ = stop_status.send(());
        return Err(NodeStuck { idle: stuck.idle, checks: stuck.checks }.into());
    }
    tracing::info!("shutting down: waiting for running computes");
    watcher.flush().context("saving the epoch cursor")?;
    if !dispatcher.drain(cfg.watch.stop_grace).await {
        tracing::warn!("computes still running after {}s; exiting anyway", cfg.watch.stop_grace.as_secs());
    }
    let _ = stop_status.send(());
    Ok(())
}

/// The safety net found the node stuck: it exits so its container restarts it.
#[derive(Debug, thiserror::Error)]
#[error(
    "no epoch processed for {}s ({checks} stuck checks in a row): exiting for a restart",
    idle.as_secs()
)]
pub struct NodeStuck {
    pub idle: Duration,
    pub checks: u32,
}

/// Counts one epoch in the books (saved before the epoch is marked handled),
/// updates the status and metrics, and queues the alerts the books ask for.
fn keep_books(
    books: &mut Books,
    status: &NodeStatus,
    alerter: &Alerter,
    epoch: &Epoch,
    outcomes: &[Outcome],
    seen_at_ms: u64,
    books_path: &std::path::Path,
) -> Result<()> {
    let notices = books.apply(epoch.epoch_id, outcomes);
    books.save(books_path).with_context(|| format!("writing {}", books_path.display()))?;
    let m = &status.metrics;
    m.epochs_seen.inc();
    for o in outcomes {
        m.count(&crate::books::verdict(o));
        for (_, verdict, at) in &o.submissions {
            if verdict == "accepted" {
                m.submission_latency.observe(at.saturating_sub(seen_at_ms) as f64 / 1000.0);
            }
        }
    }
    *status.books.lock().unwrap_or_else(|p| p.into_inner()) = books.clone();
    // Processing means a compute ran (and reported, or returned): an epoch
    // that failed before that (e.g. the source RPC is down) is no sign of
    // life for the safety net and /health.
    let ran = outcomes
        .iter()
        .any(|o| o.selected.is_some() || matches!(o.kind, OutcomeKind::Computed | OutcomeKind::NotSelected));
    if ran {
        status.activity.touch();
    }
    for notice in notices {
        match &notice {
            Notice::ThreeFailures { streak } => tracing::error!(
                "{} consecutive selected epochs failed (epochs {}); alerting",
                books.overall.consecutive_failures,
                streak.iter().map(|s| s.epoch_id.to_string()).collect::<Vec<_>>().join(", ")
            ),
            Notice::Recovered { epoch_id, failures } => {
                tracing::info!("epoch {epoch_id} succeeded after {failures} failed selected epochs")
            }
            Notice::MissedSnapshot { .. } => {}
        }
        let kind = AlertKind::from(notice);
        m.alerts.inc_by(alerter.notify(kind, books) as u64);
    }
    Ok(())
}

/// The start-up identity check (PROTOCOL.md §1): the signer is an enabled
/// snapshotter and `SLOT_ID` maps to it. Waits with backoff while the anchor
/// RPC does not answer; `Ok(None)` when shutdown came first.
async fn check_identity(
    cfg: &NodeConfig,
    anchor: &Anchor,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Result<Option<()>> {
    let signer: Address = cfg.signer_address.parse().map_err(|e| BadInput(format!("SIGNER_ACCOUNT_ADDRESS: {e}")))?;
    let mut delays = backoff();
    let identity = loop {
        match anchor.identity(signer, cfg.slot_id).await {
            Ok(identity) => break identity,
            Err(e) => {
                let delay = delays.next().unwrap_or(Duration::from_secs(30));
                tracing::warn!("identity check: anchor RPC failed ({e}); retrying in {:.1}s", delay.as_secs_f64());
                tokio::select! {
                    _ = shutdown.as_mut() => return Ok(None),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    };
    let ps = anchor.protocol_state;
    if identity.slot_owner != signer {
        let found = if identity.slot_owner == Address::ZERO {
            format!("{} (the slot is not registered)", identity.slot_owner)
        } else {
            identity.slot_owner.to_string()
        };
        return Err(BadInput(format!(
            "slot {} is not this node's: ProtocolState {ps} maps it to {found}, expected {signer} \
             (SIGNER_ACCOUNT_ADDRESS); check SLOT_ID and the signer",
            cfg.slot_id
        ))
        .into());
    }
    if !identity.signer_enabled {
        return Err(BadInput(format!(
            "signer {signer} of slot {} is not an enabled snapshotter on ProtocolState {ps} (allSnapshotters is false)",
            cfg.slot_id
        ))
        .into());
    }
    tracing::info!("identity confirmed: slot {} belongs to {signer}", cfg.slot_id);
    Ok(Some(()))
}

async fn handle_epoch(
    cfg: &NodeConfig,
    epoch: &Epoch,
    head: u64,
    anchor: &Anchor,
    source: &HttpRpc,
    dispatcher: &Dispatcher,
    needs_blocks: bool,
) -> Vec<Outcome> {
    let every = |kind: OutcomeKind| {
        let at = now_ms();
        dispatcher
            .projects
            .iter()
            .map(|p| Outcome {
                project_type: p.project.project_type.clone(),
                kind: kind.clone(),
                selected: None,
                snapshots: vec![],
                stored: vec![],
                submissions: vec![],
                started_at_ms: at,
                finished_at_ms: at,
            })
            .collect::<Vec<_>>()
    };
    let age = head.saturating_sub(epoch.released_block);
    if age > cfg.watch.submission_window {
        return every(OutcomeKind::Missed(format!(
            "released {age} anchor blocks ago, past the {}-block submission window",
            cfg.watch.submission_window
        )));
    }
    let total_slots = match anchor.total_slots().await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("getTotalNodeCount is unavailable ({e}); computes see 0 total slots");
            0
        }
    };
    let blocks: Vec<BlockDetail> = if needs_blocks {
        let mut delays = backoff();
        let mut attempt = 1;
        loop {
            match preload::block_details(source, epoch.begin, epoch.end).await {
                Ok(blocks) => break blocks,
                Err(e) if attempt < PRELOAD_ATTEMPTS => {
                    let delay = delays.next().unwrap_or(Duration::from_secs(5));
                    tracing::warn!("epoch {}: preloading block details failed ({e}); retrying", epoch.epoch_id);
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(e) => return every(OutcomeKind::Failed(format!("preloading block details: {e}"))),
            }
        }
    } else {
        Vec::new()
    };
    let ctx = EpochContext {
        epoch_id: epoch.epoch_id,
        begin: epoch.begin,
        end: epoch.end,
        day_id: epoch.day_id,
        slot_id: cfg.slot_id,
        total_slots,
        namespace: cfg.full_namespace().into(),
        project_type: "".into(),
    };
    dispatcher.dispatch(&ctx, &blocks).await
}

/// Signs and sends computed snapshots, once per (epoch, project id).
struct Submitter {
    signer: Signer,
    ledger: Ledger,
    endpoint: String,
    ipfs: Option<Ipfs>,
}

/// Upload attempts per snapshot when IPFS is configured.
const IPFS_ATTEMPTS: u32 = 3;

impl Submitter {
    async fn submit(&self, cfg: &NodeConfig, epoch: &Epoch, outcome: &mut Outcome, anchor: &Anchor) -> Result<()> {
        if outcome.kind != OutcomeKind::Computed {
            return Ok(());
        }
        let mut failures = Vec::new();
        for stored in &outcome.stored {
            let id = stored.project_id.clone();
            if self.ledger.contains(epoch.epoch_id, &id) {
                outcome.submissions.push((id, "already acknowledged".into(), now_ms()));
                continue;
            }
            if let Some(ipfs) = &self.ipfs {
                match upload(ipfs, stored).await {
                    Ok(()) => {}
                    Err(Upload::Mismatch(e)) => {
                        failures.push(format!("{id}: {e}; not submitted"));
                        outcome.submissions.push((id, format!("not submitted: {e}"), now_ms()));
                        continue;
                    }
                    Err(Upload::Unavailable(e)) => {
                        tracing::warn!("epoch {}: {e}; submitting the locally computed CID", epoch.epoch_id)
                    }
                }
            }
            // One call gives both the head (for the deadline) and its hash (the header).
            let (head, header) = loop {
                let latest =
                    anchor.rpc().call_value("eth_getBlockByNumber", serde_json::json!(["latest", false])).await;
                let parsed = latest.map(|block| {
                    let number =
                        block["number"].as_str().and_then(|n| u64::from_str_radix(n.trim_start_matches("0x"), 16).ok());
                    (number, block["hash"].as_str().unwrap_or_default().to_owned())
                });
                match parsed {
                    Ok((Some(h), hash)) => break (h, hash),
                    Ok((None, _)) => tracing::warn!("the anchor's latest block has no number; retrying"),
                    Err(e) => tracing::warn!("anchor unavailable before submitting ({e}); retrying"),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            let deadline = head + cfg.watch.deadline_buffer;
            let request = Request {
                slot_id: cfg.slot_id,
                deadline,
                snapshot_cid: stored.cid.clone(),
                epoch_id: epoch.epoch_id,
                project_id: id.clone(),
            };
            let signature = self.signer.sign(&request).map_err(anyhow::Error::msg)?;
            let submission = proto::SnapshotSubmission {
                request: Some(proto::Request {
                    slot_id: request.slot_id,
                    deadline,
                    snapshot_cid: request.snapshot_cid.clone(),
                    epoch_id: request.epoch_id,
                    project_id: id.clone(),
                }),
                signature,
                header,
                data_market: cfg.data_market.clone(),
                node_version: Some(env!("CARGO_PKG_VERSION").into()),
                protocol_state: cfg.protocol_state.clone(),
            };
            let verdict = collector::submit(&self.endpoint, submission, async || {
                anchor.head().await.map(|h| h <= deadline).unwrap_or(true)
            })
            .await;
            let text = match &verdict {
                Verdict::Accepted => "accepted".to_owned(),
                Verdict::Rejected(r) => format!("rejected: {r}"),
                Verdict::Unreachable(r) => format!("missed: {r}"),
            };
            if !matches!(verdict, Verdict::Unreachable(_)) {
                self.ledger.record(epoch.epoch_id, &id, &stored.cid, &text)?;
            }
            if verdict != Verdict::Accepted {
                failures.push(format!("submission of {id}: {text}"));
            }
            outcome.submissions.push((id, text, now_ms()));
        }
        if !failures.is_empty() {
            outcome.kind = OutcomeKind::Failed(failures.join("; "));
        }
        Ok(())
    }
}

enum Upload {
    /// IPFS could not be reached or refused (the CID is still the content's).
    Unavailable(String),
    /// IPFS stored the bytes under another CID than the node computed.
    Mismatch(String),
}

/// Uploads a stored snapshot's exact bytes and checks the CID IPFS gives them.
async fn upload(ipfs: &Ipfs, stored: &crate::snapshots::Stored) -> Result<(), Upload> {
    let bytes = tokio::fs::read(&stored.path)
        .await
        .map_err(|e| Upload::Unavailable(format!("reading {}: {e}", stored.path.display())))?;
    let name = stored.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut delay = Duration::from_millis(500);
    let mut attempt = 1;
    loop {
        match ipfs.add(bytes.clone(), &name).await {
            Ok(cid) if cid == stored.cid => return Ok(()),
            Ok(cid) => {
                return Err(Upload::Mismatch(format!(
                    "IPFS stored the snapshot as {cid}, the node computed {}",
                    stored.cid
                )));
            }
            Err(e) if attempt >= IPFS_ATTEMPTS => {
                return Err(Upload::Unavailable(format!("IPFS upload failed {attempt} times ({e})")));
            }
            Err(e) => {
                tracing::debug!("IPFS upload attempt {attempt} failed ({e}); retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
        }
    }
}

fn log_outcome(epoch: &Epoch, o: &Outcome) {
    let took = o.finished_at_ms.saturating_sub(o.started_at_ms);
    let (id, project) = (epoch.epoch_id, &o.project_type);
    match &o.kind {
        OutcomeKind::Computed => {
            tracing::info!("epoch {id} {project}: computed {} snapshot(s) in {took} ms", o.snapshots.len())
        }
        OutcomeKind::NotSelected => tracing::info!("epoch {id} {project}: not selected"),
        OutcomeKind::Failed(e) => tracing::warn!("epoch {id} {project}: failed after {took} ms: {e}"),
        OutcomeKind::Missed(e) => tracing::warn!("epoch {id} {project}: missed: {e}"),
    }
}
