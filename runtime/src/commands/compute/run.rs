//! `lite-node compute run`: the configured package's processors for one
//! epoch, with the node's own host (block-details preload, selection
//! tracker, RPC, time limit), printing what the node would submit — each
//! snapshot's canonical JSON, project id and CID, and the selection each
//! compute reported. No anchor events, no collector, no signer.

use std::{io::Write, sync::Arc, time::Duration};

use anyhow::{Context, Result, anyhow};
use futures_util::StreamExt;
use lite_node_protocol::submission::Projects;

use crate::{
    chain::Chains,
    compute::{
        self,
        executor::{ComputeResult, Executor, LocalExecutor, Task},
        host::{FinalizedReads, RpcEndpoint},
        selection::SelectionCheck,
    },
    config::{ComputeRunConfig, EnvSnapshot, Project},
    epochs::preload,
    exit::BadInput,
};

/// `lite-node compute run`'s arguments.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// The epoch's first source-chain block (its seed block).
    #[arg(long, visible_alias = "epoch-block", value_name = "B")]
    pub begin: Option<u64>,
    /// The epoch's last source-chain block (default: --begin).
    #[arg(long, value_name = "E", requires = "begin")]
    pub end: Option<u64>,
    /// The epoch's id (default 1). Alone, its release is looked up on the
    /// anchor chain (POWERLOOM_RPC_URL and both contracts).
    #[arg(long, value_name = "N")]
    pub epoch_id: Option<u64>,
    /// The day id the processors are given (default 1).
    #[arg(long, value_name = "D")]
    pub day_id: Option<u64>,
    /// Where the anchor lookup of --epoch-id starts (default 0; providers
    /// that cap eth_getLogs ranges need one near the release).
    #[arg(long, value_name = "N", conflicts_with = "begin")]
    pub from_block: Option<u64>,
    /// Run as this slot (default: SLOT_ID or the first of SLOT_IDS, else 1).
    #[arg(long, value_name = "S")]
    pub slot: Option<u64>,
    /// getTotalNodeCount (default: the anchor's, when configured; else the slot id).
    #[arg(long, value_name = "T")]
    pub total_slots: Option<u64>,
    /// Only this project (repeatable; default: every project).
    #[arg(long, value_name = "PROJECT_TYPE")]
    pub project: Vec<String>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A compute that did not give the node something to submit (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ComputeRunFailed(pub String);

/// `lite-node compute run`.
pub fn run(query: &Args, env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
    // The env file a devnet wrote is good while that devnet runs: its chain
    // goes with it.
    if let Some(run_dir) = env.get(lite_node_devnet::DEVNET_RUN_DIR_VAR)
        && !lite_node_devnet::devnet_running(std::path::Path::new(run_dir))
    {
        return Err(BadInput(format!(
            "the devnet that wrote these settings ({} {run_dir}) is not running, and its chain went with it: \
             start it again (`./init.sh devnet`, or `lite-node devnet`) and use the compute-run.env it writes",
            lite_node_devnet::DEVNET_RUN_DIR_VAR
        ))
        .into());
    }
    let cfg = ComputeRunConfig::from_env(env)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("compute-run").build()?;
    let result = runtime.block_on(epoch(cfg, query, out));
    // A compute past its time limit keeps its thread: it must not keep the
    // process alive.
    runtime.shutdown_timeout(Duration::from_millis(200));
    result
}

/// projects.json and the compute package `cfg` names (built unless cached),
/// off the async threads.
async fn load(cfg: &ComputeRunConfig) -> Result<(lite_node_config::Projects, compute::LoadedPackage)> {
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || -> Result<_> {
        let projects = compute::load_projects(&cfg.projects, &cfg.compute.data_dir)?;
        let package = compute::load(&cfg.compute)?;
        Ok((projects, package))
    })
    .await
    .context("loading the compute package")?
}

/// The node's executor for `processors` (the same host, chains and
/// finalized reads), and the epoch's block details when a processor reads
/// them.
async fn executor_for(
    cfg: &ComputeRunConfig,
    processors: Vec<compute::executor::ProjectProcessor>,
    chains: &Chains,
    anchor_rpc: Option<Arc<dyn RpcEndpoint>>,
    (begin, end): (u64, u64),
) -> Result<(LocalExecutor, Vec<lite_node_plugin_api::BlockDetail>)> {
    let source = &chains.source;
    let mut executor = LocalExecutor::new(
        processors,
        cfg.watch.max_concurrent_computes,
        cfg.watch.compute_timeout,
        Some(source.clone() as Arc<dyn RpcEndpoint>),
        anchor_rpc,
    );
    if let Some((_, protocol_state, data_market)) = &cfg.anchor {
        executor = executor.with_finalized(FinalizedReads::new(
            *protocol_state,
            *data_market,
            cfg.namespace.clone(),
            cfg.pairs_from.as_deref(),
            &chains.io,
        ));
    }
    let blocks = if executor.needs_block_details() {
        preload::block_details(source, begin, end).await.map_err(|e| anyhow!("preloading block details: {e}"))?
    } else {
        Vec::new()
    };
    Ok((executor, blocks))
}

async fn epoch(cfg: ComputeRunConfig, query: &Args, out: &mut dyn Write) -> Result<()> {
    // What the flags alone can tell, before any build.
    if let (Some(begin), Some(end)) = (query.begin, query.end)
        && end < begin
    {
        return Err(BadInput(format!("--end {end} is before --begin {begin}")).into());
    }
    if query.slot == Some(0) {
        return Err(BadInput("--slot 0: slot ids start at 1".into()).into());
    }
    let (projects, package) = load(&cfg).await?;
    for wanted in &query.project {
        if !projects.projects.iter().any(|p| &p.project_type == wanted) {
            let known: Vec<&str> = projects.projects.iter().map(|p| p.project_type.as_str()).collect();
            return Err(BadInput(format!(
                "--project {wanted}: projects.json has no such project ({})",
                known.join(", ")
            ))
            .into());
        }
    }
    // What the collector checks against: the data market's project types
    // and its active pools (the projects' `pools` settings).
    let market = Projects::declared(
        cfg.namespace.clone(),
        projects.projects.iter().map(|p| (p.project_type.clone(), p.per_pool)),
    );
    let pools = super::report::market_pools(&projects.projects);
    let market_pools_empty = pools.is_empty();
    let wanted = |p: &Project| query.project.is_empty() || query.project.contains(&p.project_type);
    let processors = compute::processors(&package, projects.projects.into_iter().filter(wanted)).map_err(BadInput)?;
    let package = Arc::new(package);

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
    let (executor, blocks) = executor_for(&cfg, processors, &chains, anchor_rpc, (begin, end)).await?;
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

    // The collector's checks: its selection (when the package has the rule
    // and the projects list pools) and its project rules.
    // Only a pool-scoped snapshot (its data source pool addresses) needs
    // the selection, which reads the epoch's seed block.
    let pooled = outcomes
        .iter()
        .flat_map(|(_, o)| &o.snapshots)
        .any(|(source, _)| !source.is_empty() && source.split('_').all(lite_node_protocol::is_address));
    let (assignment, selection_note) = match SelectionCheck::new(source.clone(), pools, package.clone(), market.clone())
    {
        Ok(check) if pooled => {
            // At a release, what the collector reads there; else as given.
            let (at_release, full_nodes) = match (&anchor, released_at) {
                (Some(anchor), Some(block)) => {
                    (anchor.total_slots_at(block).await.ok(), anchor.full_nodes_at(block).await.unwrap_or_default())
                }
                _ => (None, Vec::new()),
            };
            let total = at_release.unwrap_or(total_slots);
            match check.assign(epoch_id, begin, end, total, full_nodes.into_iter().collect()).await {
                Ok(a) => {
                    let note = match a.selected.get(&slot_id) {
                        Some(pool) => format!("the selection assigns slot {slot_id} pool {pool} this epoch"),
                        None if a.full_nodes.contains(&slot_id) => format!("slot {slot_id} is a full node"),
                        None => format!("the selection does not select slot {slot_id} this epoch"),
                    };
                    (Some((check, a)), note)
                }
                Err(e) => (None, format!("the selection check could not run: {e}")),
            }
        }
        Ok(_) => (None, String::new()),
        Err(_) if market_pools_empty => (
            None,
            "no project in projects.json lists `pools` (the data market's active pools): which pool the selection \
             assigns this slot is not checked"
                .to_owned(),
        ),
        Err(why) => (None, format!("which pool the selection assigns this slot is not checked: {why}")),
    };

    super::report::print(
        &super::report::Ran {
            json: query.json,
            epoch_id,
            begin,
            end,
            whence,
            slot_id,
            total_slots,
            total_whence,
            anchor_block,
            anchor_whence,
            namespace: &cfg.namespace,
            package: &package.package.manifest,
            selection_note,
            market: &market,
            assignment: assignment.as_ref(),
        },
        &outcomes,
        out,
    )
}

/// `lite-node read --replay`: the snapshot of `project_id` at `epoch_id`
/// computed again here — the market's pinned package (`cfg`'s), the epoch's
/// source blocks as released on the anchor, previous snapshots as finalized
/// at its release block, only the project's own data source — as canonical
/// bytes.
pub async fn replay(cfg: ComputeRunConfig, epoch_id: u64, project_id: &str) -> Result<Vec<u8>> {
    let (project_type, rest) = project_id
        .split_once(':')
        .ok_or_else(|| BadInput(format!("`{project_id}` is not a project id (type:source:namespace)")))?;
    let source = rest.rsplit_once(':').map_or("", |(source, _)| source).to_owned();
    let (projects, package) = load(&cfg).await?;
    let market = Projects::declared(
        cfg.namespace.clone(),
        projects.projects.iter().map(|p| (p.project_type.clone(), p.per_pool)),
    );
    let pools = super::report::market_pools(&projects.projects);
    let processors =
        compute::processors(&package, projects.projects.into_iter().filter(|p| p.project_type == project_type))
            .map_err(BadInput)?;
    let package = Arc::new(package);
    if processors.is_empty() {
        return Err(BadInput(format!(
            "projects.json has no project of type `{project_type}` to replay `{project_id}`"
        ))
        .into());
    }
    let chains = Chains::connect(&cfg.chains()).map_err(|e| anyhow!(e))?;
    let (source_rpc, anchor) = (chains.source.clone(), chains.anchor.clone());
    let anchor = anchor.ok_or_else(|| BadInput("--replay reads the epoch's release: set POWERLOOM_RPC_URL".into()))?;
    let release = anchor
        .epoch_release(epoch_id, 0)
        .await
        .map_err(|e| anyhow!("looking up epoch {epoch_id}'s release on the anchor chain: {e}"))?
        .ok_or_else(|| BadInput(format!("epoch {epoch_id} was not released on the anchor chain")))?;
    let total_slots = anchor.total_slots_at(release.block_number).await.unwrap_or(1).max(1);
    // As the slot the market's selection assigned the project's pool that
    // epoch computed it (a project of no pool: as any slot).
    let slot_id = if !source.is_empty() && source.split('_').all(lite_node_protocol::is_address) {
        let check = SelectionCheck::new(source_rpc.clone(), pools, package.clone(), market)
            .map_err(|why| anyhow!("the market's selection cannot run here: {why}"))?;
        let full_nodes = anchor.full_nodes_at(release.block_number).await.unwrap_or_default();
        let assigned = check
            .assign(epoch_id, release.begin, release.end, total_slots, full_nodes.into_iter().collect())
            .await
            .map_err(|e| anyhow!("the market's selection for epoch {epoch_id}: {e}"))?;
        let wanted = source.to_ascii_lowercase();
        assigned
            .selected
            .iter()
            .find(|(_, pool)| pool.to_string().to_ascii_lowercase() == wanted)
            .map(|(slot, _)| *slot)
            .ok_or_else(|| anyhow!("no slot was selected for pool {source} at epoch {epoch_id}: nothing to replay"))?
    } else {
        1
    };
    let anchor_rpc = Some(anchor.shared_rpc() as Arc<dyn RpcEndpoint>);
    let (executor, blocks) = executor_for(&cfg, processors, &chains, anchor_rpc, (release.begin, release.end)).await?;
    let task = Task {
        epoch_id,
        begin: release.begin,
        end: release.end,
        day_id: 1,
        slot_id,
        total_slots,
        anchor_block: release.block_number,
        namespace: cfg.namespace.clone(),
        project_type: project_type.to_owned(),
        deadline: u64::MAX,
        sources: None,
    };
    let results: Vec<ComputeResult> = executor.execute(vec![task], blocks.into()).collect().await;
    for result in &results {
        for (data_source, text) in &result.snapshots {
            if lite_node_protocol::project_id(project_type, data_source, &cfg.namespace) == project_id {
                return lite_node_protocol::canonical_json(text)
                    .map_err(|e| anyhow!("the replayed snapshot of `{project_id}` is not JSON: {e}"));
            }
        }
    }
    let why = results.iter().map(|r| format!("{:?}", r.kind)).collect::<Vec<_>>().join(", ");
    Err(anyhow!("the package computed no snapshot of `{project_id}` for epoch {epoch_id} ({why})"))
}
