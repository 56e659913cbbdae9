//! `lite-node run`: start-up, then the main loop until a stop, a stuck node
//! or an error.
//!
//! Start-up loads the compute package and one processor per project, starts
//! the status API and the alert channels (under the [`Supervisor`]), checks
//! this node's identity on the anchor chain, and opens the cursor, journal,
//! ledger and books. Then [`epoch_loop::run`] drives polling and each epoch's
//! [`work::EpochWork`], while the safety net watches that epochs are being
//! processed.

pub mod epoch_loop;
mod identity;
pub use identity::{check_identity, check_slots};
pub mod work;

use std::{
    future::Future,
    sync::{Arc, Mutex, atomic::Ordering},
    time::Duration,
};

use anyhow::{Context, Result};
use lite_node_protocol::eip712::Signer;

use self::{
    epoch_loop::{Epochs, Exit, Timing},
    work::{EpochWork, Lane},
};
use crate::{
    alerts::{AlertKind, Alerter, Sender},
    books::Books,
    chain::Chains,
    compute::{
        self,
        host::{FinalizedReads, RpcEndpoint, SelectionTracker},
    },
    config::NodeConfig,
    data_dir::DataDirLock,
    epochs::{Epoch, Follow, Poll, PollError, Watcher},
    executor::LocalExecutor,
    exit::{BadInput, ComputesHung},
    ipfs::Ipfs,
    journal::Journal,
    retry::{Policy, retry},
    safety::{self, Activity, NodeStuck},
    snapshots::SnapshotStore,
    status::{Info, Metrics, NodeStatus, SlotStatus, Trouble},
    submission::{self, Ledger, Submitter},
    supervisor::Supervisor,
};

/// The watcher is the main loop's anchor side.
impl Epochs for Watcher {
    fn poll(&mut self) -> impl Future<Output = Result<Poll, PollError>> {
        Watcher::poll(self)
    }

    fn epoch_handled(&mut self, epoch: &Epoch) -> Result<()> {
        Watcher::epoch_handled(self, epoch).context("saving the epoch cursor")
    }

    fn scan_complete(&mut self, scanned_to: u64) -> Result<()> {
        Watcher::scan_complete(self, scanned_to).context("saving the epoch cursor")
    }

    fn changed(&mut self) -> impl Future<Output = ()> {
        Watcher::changed(self)
    }
}

/// A cached compute package no node has loaded for this long is removed.
const PACKAGE_UNUSED_FOR: std::time::Duration = std::time::Duration::from_secs(14 * 24 * 3600);

/// Runs the node until `shutdown` completes. A stop takes at most
/// `LITE_NODE_STOP_GRACE_SECS` from the signal, everything included: the
/// epoch in flight, then running computes (a hung one is not waited for).
pub fn run(
    cfg: NodeConfig,
    shutdown: lite_node_core::signals::Shutdown,
) -> lite_node_core::LocalBoxFuture<'static, Result<()>> {
    Box::pin(run_node(cfg, shutdown))
}

async fn run_node(cfg: NodeConfig, shutdown: lite_node_core::signals::Shutdown) -> Result<()> {
    let stopped_at = std::sync::OnceLock::new();
    let shutdown = async {
        shutdown.await;
        let _ = stopped_at.set(tokio::time::Instant::now());
    };
    tokio::pin!(shutdown);
    let data_dir = cfg.compute.data_dir.clone();
    // Held until the node ends: a second node on this data dir refuses to start.
    let _lock = DataDirLock::acquire(&data_dir)?;
    let (projects, package) = load_package(&cfg.projects, &cfg.compute).await?;
    let processors = compute::processors(&package, projects.projects).map_err(BadInput)?;
    let work_projects: Vec<String> = processors.iter().map(|p| p.project.project_type.clone()).collect();
    let package_commit = package.package.manifest.commit.clone();
    let m = &package.package.manifest;
    tracing::info!(
        "compute package {} ({} {}) loaded: {}",
        m.commit,
        m.source,
        m.location,
        processors.iter().map(|p| p.project.project_type.as_str()).collect::<Vec<_>>().join(", ")
    );
    if let crate::config::ComputeSource::Bundled(dir) = &cfg.compute.source
        && crate::config::is_build_tree(dir)
    {
        tracing::warn!(
            "no compute package is configured: running the computes/ of the checkout this lite-node was built \
             from ({}), which nothing pins; set SNAPSHOTTER_COMPUTE_REPO, _BRANCH and _COMMIT to the market's \
             (`lite-node market env` prints them)",
            dir.display()
        );
    }

    let metrics = Metrics::default();
    let chains = Chains::connect_counting(&cfg.chains(), |role| Some(metrics.rpc_errors(role)))
        .map_err(|e| anyhow::anyhow!(e))?;
    let (source, anchor) = (chains.source.clone(), chains.anchor()?.clone());
    let anchor_for_host: Arc<dyn RpcEndpoint> = anchor.shared_rpc();
    let (protocol_state, data_market, signer) = (cfg.protocol_state, cfg.data_market, cfg.signer_address);

    let activity = Arc::new(Activity::default());
    let status = Arc::new(NodeStatus {
        info: Info {
            data_market: data_market.to_string(),
            protocol_state: protocol_state.to_string(),
            namespace: cfg.full_namespace(),
            compute_package: package.package.manifest.commit.clone(),
            version: env!("CARGO_PKG_VERSION"),
        },
        activity: activity.clone(),
        slots: Default::default(),
        metrics,
        watching: Default::default(),
        stuck_after: cfg.safety.stuck_after,
        last_epoch_problem: Default::default(),
        troubles: Default::default(),
        computes: Default::default(),
        rpcs: std::sync::OnceLock::from(vec![("source", source.clone()), ("anchor", anchor.shared_rpc())]),
    });
    let mut tasks = Supervisor::new();
    if let Some(addr) = cfg.status_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| BadInput(format!("STATUS_PORT: cannot listen on {addr}: {e}")))?;
        tracing::info!("status API on http://{} (/health, /status, /metrics)", listener.local_addr()?);
        let serving = crate::status::serve(status.clone(), listener, std::future::pending());
        tasks.spawn_critical("status API", async move { Ok(serving.await?) });
    }
    let alerter = Alerter::start(
        &cfg.alerts,
        Sender { slot_id: cfg.slot_id, signer: signer.to_string() },
        Some(data_dir.join("state").join("pending-alerts.json")),
        &mut tasks,
    )
    .map_err(BadInput)?;

    // The identity check waits while the anchor does not answer; a wrong slot
    // or signer is the operator's to fix.
    let identity = retry(
        Policy::CHAIN,
        "identity check: anchor RPC",
        || check_slots(&anchor, &cfg.slots, cfg.skip_foreign_slots),
        |_| true,
    );
    let slots = tokio::select! {
        _ = &mut shutdown => {
            tracing::info!("shutdown before the node started");
            return Ok(());
        }
        checked = identity => checked??,
    };
    let slot_anchor = anchor.clone();
    if let Some(drill) = cfg.drill {
        tracing::warn!("alert drill {drill:?} (LITE_NODE_DRILL): every selected compute's result will be replaced");
    }
    let chain_id = anchor.chain_id().await.context("reading the anchor chain id")?;
    let ipfs = cfg.ipfs.as_ref().map(Ipfs::new).transpose().map_err(BadInput)?;
    let mut shared = submission::Shared::new(
        submission::Collector::new(format!("http://{}:{}", cfg.collector_host, cfg.collector_port)),
        ipfs,
        cfg.watch.deadline_buffer,
        data_market.to_string(),
        protocol_state.to_string(),
        status.clone(),
    );
    // Several slots: one line per epoch, not one per slot's submission.
    shared.quiet = slots.len() > 1;
    shared.keep_fixes_in(data_dir.join("state").join("epoch-deadline.json")).map_err(|e| BadInput(format!("{e:#}")))?;
    let shared = Arc::new(shared);
    // Books and trackers a crash left half-saved are completed first.
    let replayed = crate::atomic_file::Batch::replay(&data_dir).context("completing the last saved batch")?;
    tracing::debug!("{replayed} file(s) rewritten from the last batch");
    let mut lanes = Vec::with_capacity(slots.len());
    for slot in &slots {
        let dir = slot_dir(&data_dir, slot.slot_id, slots.len() > 1);
        if dir == data_dir {
            // Whose state this is, even before its compute reports a selection.
            let marker = data_dir.join(TOP_SLOT_MARKER);
            crate::atomic_file::write(&marker, slot.slot_id.to_string().as_bytes())?;
        }
        let tracker = Arc::new(SelectionTracker::persistent(dir.join("state").join("slot_selection_status.json")));
        let books_path = Books::path(&dir, &protocol_state.to_string(), &data_market.to_string());
        let books = Books::open(&books_path).with_context(|| format!("opening the books of slot {}", slot.slot_id))?;
        let lane_status = Arc::new(SlotStatus {
            slot_id: slot.slot_id,
            signer: slot.signer_address.to_string(),
            tracker: tracker.clone(),
            last_epoch_at_start: books.last_epoch,
            books: Mutex::new(books),
        });
        lanes.push(Lane {
            slot_id: slot.slot_id,
            tracker,
            submitter: Arc::new(Submitter {
                signer: Signer::new(slot.signer_key.bytes(), chain_id, protocol_state).map_err(|e| {
                    BadInput(format!(
                        "slot {}: {e}: fix SIGNER_ACCOUNT_PRIVATE_KEY (or the slot's line in SLOT_SIGNERS_FILE)",
                        slot.slot_id
                    ))
                })?,
                ledger: Arc::new(
                    Ledger::open(&dir)
                        .with_context(|| format!("opening the submission ledger of slot {}", slot.slot_id))?,
                ),
                slot_id: slot.slot_id,
                shared: shared.clone(),
            }),
            journal: Mutex::new(
                Journal::open(&dir).with_context(|| format!("opening the epoch journal of slot {}", slot.slot_id))?,
            ),
            books_path,
            status: lane_status,
        });
    }
    let _ = status.slots.set(lanes.iter().map(|l| l.status.clone()).collect());
    alerter.set_signers(lanes.iter().map(|l| (l.slot_id, l.status.signer.clone())).collect());
    if lanes.len() > 1 {
        tracing::info!(
            "working {} slots: {} (state of each in {})",
            lanes.len(),
            crate::config::format_slot_ids(&lanes.iter().map(|l| l.slot_id).collect::<Vec<_>>()),
            data_dir.join("slots").display()
        );
    }
    if let Some(ipfs) = &cfg.ipfs {
        tracing::info!("snapshots are also uploaded to IPFS at {}", crate::config::redact_url(&ipfs.url));
    }
    let store = Arc::new(SnapshotStore::open(&data_dir).context("opening the snapshot store")?);
    let executor = LocalExecutor::new(
        processors,
        cfg.watch.max_concurrent_computes,
        cfg.watch.compute_timeout,
        Some(source.clone() as Arc<dyn RpcEndpoint>),
        Some(anchor_for_host),
    )
    .with_queue(cfg.watch.queue_capacity, slots.first().map_or(0, |s| s.slot_id))
    .with_trackers(lanes.iter().map(|l| (l.slot_id, l.tracker.clone())))
    .with_drill(cfg.drill)
    .with_finalized(FinalizedReads::new(
        protocol_state,
        data_market,
        cfg.full_namespace(),
        cfg.pairs_from.as_deref(),
        &chains.io,
    ));
    let follow = Follow { confirmations: cfg.watch.confirmations, start_block: cfg.watch.start_block };
    let mut watcher = Watcher::open(anchor.clone(), &data_dir, follow)
        .with_context(|| format!("opening the epoch cursor in {}", data_dir.display()))?;
    // A data dir from another chain (a reset devnet or testnet) would sit
    // idle without a word: refuse it with the fix.
    let checked = retry(
        Policy::CHAIN,
        "checking the saved position against the anchor chain",
        || watcher.check_chain(),
        |e| !matches!(e, PollError::Foreign(_)),
    );
    tokio::select! {
        _ = &mut shutdown => return Ok(()),
        checked = checked => if let Err(e) = checked {
            return Err(BadInput(e.to_string()).into());
        },
    }
    let cluster = match &cfg.cluster {
        Some(c) => {
            let conn = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                conn = crate::full_node::worker::connect(&c.redis_url) => conn?,
            };
            let boards = crate::full_node::Boards::new(conn, cfg.cluster_name());
            let mode = crate::full_node::Mode::from(c.assign);
            for project in &work_projects {
                boards
                    .of(project)
                    .set_package(
                        &package_commit,
                        lite_node_plugin_api::PLUGIN_API_VERSION,
                        mode.name(),
                        crate::full_node::lease_ms(c.lease),
                    )
                    .await
                    .context("stating the compute package on the cluster's board")?;
            }
            tracing::info!(
                "coordinator of full node {} ({mode:?}): each epoch's data sources go to its workers",
                cfg.cluster_name()
            );
            Some(Arc::new(crate::full_node::Coordinator {
                boards,
                mode,
                package: package_commit.clone(),
                api: lite_node_plugin_api::PLUGIN_API_VERSION.to_owned(),
                lease: c.lease,
                poll: Duration::from_millis(10),
                patience: cfg.watch.compute_timeout,
            }))
        }
        None => None,
    };
    let work = EpochWork {
        anchor,
        source,
        executor,
        lanes,
        status: status.clone(),
        alerter: alerter.clone(),
        namespace: cfg.full_namespace(),
        submission_window: cfg.watch.submission_window,
        anchor_stall_after: cfg.watch.anchor_stall_after,
        recording: Default::default(),
        store,
        data_dir: data_dir.clone(),
        retain_epochs: cfg.watch.retain_epochs,
        cluster,
    };
    tracing::info!(
        "watching ProtocolState {protocol_state} for data market {data_market} every {} ms",
        cfg.watch.poll_interval.as_millis()
    );

    // The market may remove or reassign a slot while the node runs: its
    // submissions are then refused (`wrong signer`), so the node says so on
    // /health and in its log until the slot is its signer's again.
    tasks.spawn_restarting("slot registry watch", {
        let (anchor, status, slots, every) = (slot_anchor, status.clone(), slots.clone(), cfg.watch.slot_check);
        move || {
            let (anchor, status, slots) = (anchor.clone(), status.clone(), slots.clone());
            async move {
                let mut said: Option<String> = None;
                loop {
                    tokio::time::sleep(every).await;
                    // A chain that does not answer is the anchor's trouble, said elsewhere.
                    let Ok(lost) = identity::slots_not_ours(&anchor, &slots).await else { continue };
                    let now = (!lost.is_empty()).then(|| {
                        format!(
                            "{}: its submissions are refused (wrong signer); the market removed or reassigned it \
                             (lite-node market slots list)",
                            lost.join("; ")
                        )
                    });
                    if now != said {
                        match &now {
                            Some(problem) => tracing::warn!("{problem}"),
                            None => tracing::info!("every slot of this node is its signer's again"),
                        }
                        status.troubles.set(crate::status::Trouble::Slots, now.clone());
                        said = now;
                    }
                }
            }
        }
    });

    status.watching.store(true, Ordering::Relaxed);
    activity.touch();
    // A full node's epochs are worked one at a time: its workers share each
    // epoch's thousand pools, and its submissions are many already.
    let epochs_in_flight = if work.cluster.is_some() { 1 } else { epoch_loop::EPOCHS_IN_FLIGHT };
    let timing = Timing { poll_interval: cfg.watch.poll_interval, stop_grace: cfg.watch.stop_grace, epochs_in_flight };
    let on_stuck = |s: safety::Stuck| {
        let slots = status.slots();
        let taken = alerter.notify_slots(
            AlertKind::Unhealthy { idle: s.idle, checks: s.checks, exit_after: cfg.safety.exit_after },
            &slots.first().map(|s| s.books()).unwrap_or_default(),
            slots.iter().map(|s| s.slot_id).collect(),
        );
        status.metrics.alerts.inc_by(taken as u64);
    };
    // Hung computes and quarantined projects: /health names them while
    // there are any, each quarantine is alerted, and the node exits for a
    // restart only when hung threads reach the bound.
    let mut hung = work.executor.hung();
    let _ = status.computes.set(work.executor.watch());
    tasks.spawn_critical("compute health watch", {
        let (status, alerter) = (status.clone(), alerter.clone());
        let mut watch = work.executor.watch();
        async move {
            let mut alerted = std::collections::BTreeSet::new();
            loop {
                let n = *watch.hung.borrow_and_update();
                let held: Vec<_> = watch.quarantine.borrow_and_update().values().cloned().collect();
                for q in &held {
                    if alerted.insert((q.project.clone(), q.epoch_id)) {
                        status.metrics.quarantines.inc();
                        let slots = status.slots();
                        let kind = AlertKind::Quarantined {
                            project: q.project.clone(),
                            hangs: q.hangs,
                            epoch_id: q.epoch_id,
                            until_epoch: q.until_epoch,
                        };
                        let books = slots.first().map(|s| s.books()).unwrap_or_default();
                        let taken = alerter.notify_slots(kind, &books, slots.iter().map(|s| s.slot_id).collect());
                        status.metrics.alerts.inc_by(taken as u64);
                    }
                }
                let mut problems: Vec<String> = held.iter().map(ToString::to_string).collect();
                if n > 0 {
                    problems.push(format!("{n} compute(s) hung past their timeout"));
                }
                status.troubles.set(Trouble::Computes, (!problems.is_empty()).then(|| problems.join("; ")));
                let changed = tokio::select! {
                    c = watch.hung.changed() => c,
                    c = watch.quarantine.changed() => c,
                };
                if changed.is_err() {
                    // The executor is gone: the node is stopping.
                    std::future::pending::<()>().await;
                }
            }
        }
    });
    let max_hung = cfg.watch.max_hung_computes;
    let ended = tokio::select! {
        exit = epoch_loop::run(&mut watcher, &work, timing, shutdown) => Ended::Loop(exit?),
        stuck = safety::watch(cfg.safety, &activity, on_stuck) => Ended::Stuck(stuck),
        failed = tasks.failed() => Ended::Task(failed),
        n = hung.wait_for(|n| *n >= max_hung) => Ended::Hung(n.map(|n| *n).unwrap_or(max_hung)),
    };
    status.watching.store(false, Ordering::Relaxed);
    match ended {
        Ended::Stuck(stuck) => Err(NodeStuck { idle: stuck.idle, checks: stuck.checks }.into()),
        Ended::Task(failed) => Err(failed.into()),
        Ended::Hung(n) => Err(ComputesHung { hung: n, bound: max_hung }.into()),
        Ended::Loop(exit) => {
            if let Exit::Abandoned { epoch_id } = exit {
                tracing::info!("epoch {epoch_id} was abandoned at the stop; it is worked again after the restart");
            }
            tracing::info!("shutting down: waiting for running computes");
            watcher.flush().context("saving the epoch cursor")?;
            let left =
                stopped_at.get().map_or(cfg.watch.stop_grace, |at| cfg.watch.stop_grace.saturating_sub(at.elapsed()));
            if !work.executor.drain(left).await {
                tracing::warn!(
                    "computes still running {}s after the stop; exiting anyway (their epoch is computed again after the restart)",
                    cfg.watch.stop_grace.as_secs()
                );
            }
            Ok(())
        }
    }
}

/// Loads the projects and the compute package (off the async threads), and
/// removes cached packages no node has used for a while.
pub(crate) async fn load_package(
    projects: &crate::config::ProjectsSource,
    compute_cfg: &crate::config::ComputeConfig,
) -> Result<(crate::config::Projects, compute::LoadedPackage)> {
    let (projects, cfg) = (projects.clone(), compute_cfg.clone());
    tokio::task::spawn_blocking(move || -> Result<_> {
        let projects = compute::load_projects(&projects, &cfg.data_dir)?;
        // Other projects or another package than the market's would compute
        // what its validators refuse: said before anything is built.
        cfg.market.check_projects(&projects.identity()).map_err(crate::config::ConfigErrors::one)?;
        let package = compute::load_for(&cfg, &projects)?;
        cfg.market.check_compute(&package.package.manifest.commit).map_err(crate::config::ConfigErrors::one)?;
        // Packages no node on this cache has used for a while go.
        let pruned = compute::mark_used(&package.package)
            .and_then(|()| compute::prune_unused(&cfg.cache_dir, &package.package.dir, PACKAGE_UNUSED_FOR));
        match pruned {
            Ok(removed) => {
                removed.iter().for_each(|d| tracing::info!("removed the unused compute package {}", d.display()))
            }
            Err(e) => tracing::warn!("pruning unused compute packages: {e}"),
        }
        Ok((projects, package))
    })
    .await
    .context("loading the compute package")?
}

/// Names the slot whose state is at the top of the data dir.
const TOP_SLOT_MARKER: &str = "state/slot_id";

/// Where a slot's own state lives (tracker, ledger, journal, books): a node
/// with one slot keeps it at the top of the data dir, one with several under
/// `slots/<id>/` — except that a slot keeps the directory that already
/// holds its state when an operator goes from one slot to several or back,
/// so its ledger still stops a double submission.
pub fn slot_dir(data_dir: &std::path::Path, slot_id: u64, several: bool) -> std::path::PathBuf {
    let own = data_dir.join("slots").join(slot_id.to_string());
    if own.is_dir() {
        return own;
    }
    // The slot the top-level state belongs to: its marker, else (state from
    // before the marker) what its tracker recorded.
    let marked = std::fs::read_to_string(data_dir.join(TOP_SLOT_MARKER)).ok().and_then(|t| t.trim().parse().ok());
    let top = marked.or_else(|| {
        std::fs::read(data_dir.join("state").join("slot_selection_status.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["slot_id"].as_u64())
    });
    // One slot alone takes the top unless another slot's state is there: a
    // node moved from slot 5 to slot 6 starts slot 6's books, latch, tracker
    // and ledger afresh under `slots/6/`, and slot 5's stay where they were.
    if top == Some(slot_id) || (!several && top.is_none()) { data_dir.to_path_buf() } else { own }
}

/// How `run` left the main loop.
enum Ended {
    Loop(Exit),
    Stuck(safety::Stuck),
    Task(crate::supervisor::TaskFailed),
    Hung(usize),
}

#[cfg(test)]
mod tests {
    use super::slot_dir;

    #[test]
    fn a_slot_keeps_the_directory_that_holds_its_state_from_one_slot_to_several_and_back() {
        let data = tempfile::tempdir().unwrap();
        let d = data.path();
        assert_eq!(slot_dir(d, 5, false), d, "one slot: the top of the data dir");
        assert_eq!(slot_dir(d, 5, true), d.join("slots/5"), "several, nothing yet: each its own");
        // Slot 5 ran alone first: its state is at the top, and stays its.
        std::fs::create_dir_all(d.join("state")).unwrap();
        std::fs::write(
            d.join("state/slot_selection_status.json"),
            r#"{"epoch_id":3,"was_selected":true,"slot_id":5,"timestamp":1}"#,
        )
        .unwrap();
        assert_eq!(slot_dir(d, 5, true), d);
        assert_eq!(slot_dir(d, 6, true), d.join("slots/6"));
        // Slot 6 ran beside it; alone again later, it finds its own state.
        std::fs::create_dir_all(d.join("slots/6")).unwrap();
        assert_eq!(slot_dir(d, 6, false), d.join("slots/6"));
        assert_eq!(slot_dir(d, 5, false), d);
        // The marker names the owner even when its tracker says nothing (a
        // compute that never reported).
        std::fs::remove_file(d.join("state/slot_selection_status.json")).unwrap();
        assert_eq!(slot_dir(d, 5, true), d.join("slots/5"), "no owner known: its own");
        std::fs::write(d.join(super::TOP_SLOT_MARKER), "5").unwrap();
        assert_eq!(slot_dir(d, 5, true), d);
        assert_eq!(slot_dir(d, 7, true), d.join("slots/7"));
        // A one-slot node moved from slot 5 to slot 7 does not take slot 5's
        // books and alert latch for its own.
        assert_eq!(slot_dir(d, 7, false), d.join("slots/7"));
        assert_eq!(slot_dir(d, 5, false), d, "and back: slot 5's state is where it was");
    }
}
