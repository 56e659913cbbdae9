//! `lite-node compute run`: the configured package's processors for one
//! epoch, with the node's own host (block-details preload, selection
//! tracker, RPC, time limit), printing what the node would submit — each
//! snapshot's canonical JSON, project id and CID, and the selection each
//! compute reported. No anchor events, no collector, no signer.

use std::{io::Write, sync::Arc, time::Duration};

use anyhow::{Context, Result, anyhow};
use futures_util::StreamExt;
use lite_node_protocol::{canonical_json, cid, project_id};
use serde_json::json;

use crate::{
    chain::Chains,
    compute::{
        self,
        executor::{ComputeResult, Executor, LocalExecutor, OutcomeKind, Task},
        host::{FinalizedReads, RpcEndpoint},
    },
    config::{ComputeRunConfig, EnvSnapshot, Project},
    epochs::preload,
    exit::BadInput,
};

/// Which epoch to run, as the flags give it.
#[derive(Clone, Debug, Default)]
pub struct EpochQuery {
    /// The epoch's id (default 1; with only this, the release is looked up
    /// on the anchor chain).
    pub epoch_id: Option<u64>,
    /// The epoch's first and last source-chain blocks.
    pub begin: Option<u64>,
    pub end: Option<u64>,
    pub day_id: Option<u64>,
    /// Where the anchor lookup of `--epoch-id` starts (default 0).
    pub from_block: Option<u64>,
    /// The slot to run as (default `SLOT_ID`, else 1).
    pub slot: Option<u64>,
    /// getTotalNodeCount (default: the anchor's when configured, else the slot id).
    pub total_slots: Option<u64>,
    /// Only these projects (default: all).
    pub projects: Vec<String>,
    /// Print one JSON document instead of text.
    pub json: bool,
}

/// A compute that did not give the node something to submit (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ComputeRunFailed(pub String);

/// `lite-node compute run`.
pub fn compute_run(env: &EnvSnapshot, query: &EpochQuery, out: &mut dyn Write) -> Result<()> {
    let cfg = ComputeRunConfig::from_env(env)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("compute-run").build()?;
    let result = runtime.block_on(run(cfg, query, out));
    // A compute past its time limit keeps its thread: it must not keep the
    // process alive.
    runtime.shutdown_timeout(Duration::from_millis(200));
    result
}

async fn run(cfg: ComputeRunConfig, query: &EpochQuery, out: &mut dyn Write) -> Result<()> {
    // What the flags alone can tell, before any build.
    if let (Some(begin), Some(end)) = (query.begin, query.end)
        && end < begin
    {
        return Err(BadInput(format!("--end {end} is before --begin {begin}")).into());
    }
    if query.slot == Some(0) {
        return Err(BadInput("--slot 0: slot ids start at 1".into()).into());
    }
    let (projects, package) = {
        let cfg = cfg.clone();
        tokio::task::spawn_blocking(move || -> Result<_> {
            let projects = compute::load_projects(&cfg.projects, &cfg.compute.data_dir)?;
            let package = compute::load(&cfg.compute)?;
            Ok((projects, package))
        })
        .await
        .context("loading the compute package")??
    };
    for wanted in &query.projects {
        if !projects.projects.iter().any(|p| &p.project_type == wanted) {
            let known: Vec<&str> = projects.projects.iter().map(|p| p.project_type.as_str()).collect();
            return Err(BadInput(format!(
                "--project {wanted}: projects.json has no such project ({})",
                known.join(", ")
            ))
            .into());
        }
    }
    let wanted = |p: &Project| query.projects.is_empty() || query.projects.contains(&p.project_type);
    let processors = compute::processors(&package, projects.projects.into_iter().filter(wanted)).map_err(BadInput)?;

    let chains = Chains::connect(&cfg.chains()).map_err(|e| anyhow!(e))?;
    let (source, anchor) = (chains.source.clone(), chains.anchor.clone());
    let anchor_rpc = anchor.as_ref().map(|a| a.shared_rpc() as Arc<dyn RpcEndpoint>);

    // The epoch.
    let epoch_id = query.epoch_id.unwrap_or(1);
    let (begin, end, whence, released_at) = match (query.begin, &anchor) {
        (Some(begin), _) => (begin, query.end.unwrap_or(begin), "given".to_owned(), None),
        (None, Some(anchor)) if query.epoch_id.is_some() => {
            let release = anchor
                .epoch_release(epoch_id, query.from_block.unwrap_or(0))
                .await
                .map_err(|e| {
                    anyhow!(
                        "looking up epoch {epoch_id}'s release on the anchor chain (eth_getLogs from block {}): \
                         {e}; start nearer with --from-block N, or give its blocks with --begin B [--end E]",
                        query.from_block.unwrap_or(0)
                    )
                })?
                .ok_or_else(|| {
                    BadInput(format!(
                        "epoch {epoch_id} has not been released on the anchor chain (POWERLOOM_RPC_URL, \
                         PROTOCOL_STATE_CONTRACT, DATA_MARKET_CONTRACT) from block {}: give its blocks with \
                         --begin B [--end E]",
                        query.from_block.unwrap_or(0)
                    ))
                })?;
            (
                release.begin,
                release.end,
                format!("as released at anchor block {}", release.block_number),
                Some(release.block_number),
            )
        }
        _ => {
            return Err(BadInput(
                "which epoch? give --begin B [--end E] (its source-chain blocks), or --epoch-id N with \
                 POWERLOOM_RPC_URL, PROTOCOL_STATE_CONTRACT and DATA_MARKET_CONTRACT set to look its release up"
                    .into(),
            )
            .into());
        }
    };
    // Slot 0 was refused above (--slot) and by the configuration (SLOT_ID).
    let slot_id = query.slot.or(cfg.slot_id).unwrap_or(1);
    let (total_slots, total_whence) = match (query.total_slots, &anchor) {
        (Some(t), _) => (t, "given"),
        (None, Some(anchor)) => (
            anchor.total_slots().await.map_err(|e| anyhow!("reading getTotalNodeCount on the anchor chain: {e}"))?,
            "the anchor's getTotalNodeCount",
        ),
        (None, None) => (slot_id, "no --total-slots and no anchor configured: the slot's own id"),
    };
    if slot_id > total_slots {
        return Err(
            BadInput(format!("slot {slot_id} is not among {total_slots} total slots: give --total-slots")).into()
        );
    }

    // Where previousSnapshots is read: at the epoch's release block, as a
    // node reads it; at the anchor's head when the epoch was given by its
    // blocks (said below); nowhere without an anchor (empty).
    let (anchor_block, anchor_whence) = match (released_at, &anchor) {
        (Some(block), _) => {
            (block, format!("previous snapshots as finalized at anchor block {block}, as a node reads them"))
        }
        (None, Some(anchor)) => {
            let head = anchor.head().await.map_err(|e| anyhow!("reading the anchor chain's head: {e}"))?;
            let whence = format!(
                "previous snapshots as finalized at anchor block {head}, the head (give --epoch-id to read them at \
                 the epoch's release block, as a node does)"
            );
            (head, whence)
        }
        (None, None) => (0, "no anchor configured: previous snapshots are empty".to_owned()),
    };

    // The node's executor: the same host, preload, tracker and chains.
    let projects: Vec<Project> = processors.iter().map(|p| p.project.clone()).collect();
    let mut executor = LocalExecutor::new(
        processors,
        cfg.watch.max_concurrent_computes,
        cfg.watch.compute_timeout,
        Some(source.clone() as Arc<dyn RpcEndpoint>),
        anchor_rpc,
    );
    if let Some((_, protocol_state, data_market)) = &cfg.anchor {
        executor = executor.with_finalized(FinalizedReads {
            protocol_state: *protocol_state,
            data_market: *data_market,
            namespace: cfg.namespace.clone(),
        });
    }
    let blocks = if executor.needs_block_details() {
        preload::block_details(&source, begin, end).await.map_err(|e| anyhow!("preloading block details: {e}"))?
    } else {
        Vec::new()
    };
    let tasks = projects
        .iter()
        .map(|p| Task {
            epoch_id,
            begin,
            end,
            day_id: query.day_id.unwrap_or(1),
            slot_id,
            total_slots,
            anchor_block,
            namespace: cfg.namespace.clone(),
            project_type: p.project_type.clone(),
            deadline: u64::MAX,
            sources: None,
        })
        .collect();
    let mut results: Vec<ComputeResult> = executor.execute(tasks, blocks.into()).collect().await;
    let place = |r: &ComputeResult| projects.iter().position(|p| p.project_type == r.project_type);
    results.sort_by_key(place);
    let outcomes: Vec<(&Project, ComputeResult)> = projects.iter().zip(results).collect();

    // What the node would submit.
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for (p, outcome) in &outcomes {
        let who = format!("project {} ({} in {})", p.project_type, p.class_name, p.module);
        let mut snapshots = Vec::new();
        let mut verdict = match &outcome.kind {
            OutcomeKind::Computed => "computed".to_owned(),
            OutcomeKind::NotSelected => "not selected: nothing to submit".to_owned(),
            OutcomeKind::Failed(why) | OutcomeKind::Missed(why) => {
                failures.push(format!("{who}: {why}"));
                format!("failed: {why}")
            }
        };
        for (data_source, text) in &outcome.snapshots {
            let id = project_id(&outcome.project_type, data_source, &cfg.namespace);
            match canonical_json(text) {
                Ok(bytes) => snapshots.push(json!({
                    "data_source": data_source,
                    "project_id": id,
                    "cid": cid(&bytes),
                    "snapshot": String::from_utf8_lossy(&bytes),
                })),
                Err(e) => {
                    let why = format!("the snapshot for `{data_source}` is not JSON: {e}");
                    failures.push(format!("{who}: {why}"));
                    verdict = format!("failed: {why}");
                }
            }
        }
        report.push(json!({
            "project_type": outcome.project_type,
            "processor": {"module": p.module, "class_name": p.class_name},
            "selected": outcome.selected,
            "outcome": verdict,
            "took_ms": outcome.finished_at_ms.saturating_sub(outcome.started_at_ms),
            "snapshots": snapshots,
        }));
    }

    if query.json {
        let doc = json!({
            "epoch": {"epoch_id": epoch_id, "begin": begin, "end": end, "slot_id": slot_id, "total_slots": total_slots,
                      "anchor_block": anchor_block, "namespace": cfg.namespace},
            "compute_package": package.package.manifest.commit,
            "projects": report,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        writeln!(
            out,
            "epoch {epoch_id}: source blocks {begin}..={end} ({whence}); slot {slot_id} of {total_slots} total \
             ({total_whence}); {anchor_whence}; compute package {}",
            package.package.manifest.commit
        )?;
        let unset = if cfg.namespace.contains("POWERLOOM_CHAIN")
            || cfg.namespace.contains("NAMESPACE")
            || cfg.namespace.contains("SOURCE_CHAIN")
        {
            " (set POWERLOOM_CHAIN, NAMESPACE and SOURCE_CHAIN for the node's project ids)"
        } else {
            ""
        };
        writeln!(out, "namespace {}{unset}", cfg.namespace)?;
        for p in &report {
            let selected = match p["selected"].as_bool() {
                Some(true) => "reported selected",
                Some(false) => "reported not selected",
                None => "reported no selection",
            };
            writeln!(
                out,
                "\n{} ({}): {}; {selected}; {} ms",
                p["project_type"].as_str().unwrap_or_default(),
                p["processor"]["class_name"].as_str().unwrap_or_default(),
                p["outcome"].as_str().unwrap_or_default(),
                p["took_ms"]
            )?;
            for s in p["snapshots"].as_array().into_iter().flatten() {
                writeln!(out, "  project id  {}", s["project_id"].as_str().unwrap_or_default())?;
                writeln!(out, "  cid         {}", s["cid"].as_str().unwrap_or_default())?;
                writeln!(out, "  snapshot    {}", s["snapshot"].as_str().unwrap_or_default())?;
            }
        }
    }
    out.flush()?;
    match failures.as_slice() {
        [] => Ok(()),
        [one] => Err(ComputeRunFailed(one.clone()).into()),
        many => Err(ComputeRunFailed(format!(
            "{} of {} projects failed:\n  {}",
            many.len(),
            report.len(),
            many.join("\n  ")
        ))
        .into()),
    }
}
