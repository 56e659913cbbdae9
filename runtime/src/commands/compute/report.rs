//! What `lite-node compute run` prints: each project's outcome, and each
//! snapshot as the node would submit it (project id, CID, canonical JSON)
//! with what the collector would say of it; text or one JSON document.

use std::{io::Write, sync::Arc};

use anyhow::Result;
use lite_node_protocol::{
    canonical_json_with_notes, cid, project_id,
    submission::{Projects, caps, project_id_is_well_formed},
};
use serde_json::json;

use super::run::ComputeRunFailed;
use crate::{
    compute::{
        Manifest as PackageManifest,
        executor::{ComputeResult, OutcomeKind},
        selection::{EpochAssignment, Refusal, SelectionCheck},
    },
    config::Project,
};

/// One epoch as `compute run` ran it.
pub struct Ran<'a> {
    pub json: bool,
    pub epoch_id: u64,
    pub begin: u64,
    pub end: u64,
    /// Where the epoch's blocks came from.
    pub whence: String,
    pub slot_id: u64,
    pub total_slots: u64,
    pub total_whence: &'static str,
    pub anchor_block: u64,
    pub anchor_whence: String,
    pub namespace: &'a str,
    pub package: &'a PackageManifest,
    pub selection_note: String,
    pub market: &'a Projects,
    pub assignment: Option<&'a (SelectionCheck, Arc<EpochAssignment>)>,
}

/// Prints what the node would submit; fails naming each compute that gave
/// nothing to submit, or a snapshot the collector would refuse.
pub fn print(ran: &Ran<'_>, outcomes: &[(&Project, ComputeResult)], out: &mut dyn Write) -> Result<()> {
    let Ran { epoch_id, begin, end, slot_id, total_slots, anchor_block, total_whence, .. } = *ran;
    let (whence, anchor_whence, selection_note) = (&ran.whence, &ran.anchor_whence, &ran.selection_note);
    let (market, assignment) = (ran.market, ran.assignment);
    // What the node would submit.
    let mut failures = Vec::new();
    let mut failed_projects = 0;
    let mut report = Vec::new();
    for (p, outcome) in outcomes {
        let who = format!("project {} ({} in {})", p.project_type, p.class_name, p.module);
        let failed_before = failures.len();
        let mut snapshots = Vec::new();
        let mut refused = 0;
        let mut verdict = match &outcome.kind {
            OutcomeKind::Computed => "computed".to_owned(),
            OutcomeKind::NotSelected => "not selected: nothing to submit".to_owned(),
            OutcomeKind::Failed(why) | OutcomeKind::Missed(why) | OutcomeKind::Withheld(why) => {
                failures.push(format!("{who}: {why}"));
                format!("failed: {why}")
            }
        };
        for (data_source, text) in &outcome.snapshots {
            let id = project_id(&outcome.project_type, data_source, ran.namespace);
            let refusal = collector_refusal(&id, slot_id, market, assignment);
            if let Some(why) = &refusal {
                failures.push(format!("{who}: the collector would refuse `{id}`: {why}"));
                refused += 1;
            }
            match canonical_json_with_notes(text) {
                Ok((bytes, notes)) => snapshots.push(json!({
                    "data_source": data_source,
                    "project_id": id,
                    "cid": cid(&bytes),
                    "snapshot": String::from_utf8_lossy(&bytes),
                    "refused": refusal,
                    "warnings": notes,
                })),
                Err(e) => {
                    let why = format!("the snapshot for `{data_source}` is not JSON: {e}");
                    failures.push(format!("{who}: {why}"));
                    verdict = format!("failed: {why}");
                }
            }
        }
        if refused > 0 {
            verdict = format!(
                "computed, but the collector would refuse {refused} of its {} snapshots (below)",
                outcome.snapshots.len()
            );
        }
        if failures.len() > failed_before {
            failed_projects += 1;
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

    if ran.json {
        let doc = json!({
            "epoch": {"epoch_id": epoch_id, "begin": begin, "end": end, "slot_id": slot_id, "total_slots": total_slots,
                      "anchor_block": anchor_block, "namespace": ran.namespace},
            "compute_package": ran.package.commit,
            "selection": selection_note,
            "projects": report,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        writeln!(
            out,
            "epoch {epoch_id}: source blocks {begin}..={end} ({whence}); slot {slot_id} of {total_slots} total \
             ({total_whence}); {anchor_whence}; compute package {} ({})",
            ran.package.commit, ran.package.location
        )?;
        let unset = if ran.namespace.contains("POWERLOOM_CHAIN")
            || ran.namespace.contains("NAMESPACE")
            || ran.namespace.contains("SOURCE_CHAIN")
        {
            " (set POWERLOOM_CHAIN, NAMESPACE and SOURCE_CHAIN for the node's project ids)"
        } else {
            ""
        };
        writeln!(out, "namespace {}{unset}", ran.namespace)?;
        if !selection_note.is_empty() {
            writeln!(out, "{selection_note}")?;
        }
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
                if let Some(why) = s["refused"].as_str() {
                    writeln!(out, "  refused     {why}")?;
                }
                for note in s["warnings"].as_array().into_iter().flatten() {
                    writeln!(
                        out,
                        "  warning     {} (canonical JSON, docs/protocol.md §4)",
                        note.as_str().unwrap_or_default()
                    )?;
                }
            }
        }
    }
    out.flush()?;
    match failures.as_slice() {
        [] => Ok(()),
        [one] => Err(ComputeRunFailed(one.clone()).into()),
        many => Err(ComputeRunFailed(format!(
            "{failed_projects} of {} projects failed{}:\n  {}",
            report.len(),
            if failed_projects == many.len() { String::new() } else { format!(" ({} problems)", many.len()) },
            many.join("\n  ")
        ))
        .into()),
    }
}

/// The data market's active pools as its projects list them (`pools`
/// settings), in their order (the selection draws from the list as given),
/// each once.
pub fn market_pools(projects: &[Project]) -> Vec<String> {
    let listed = projects.iter().filter_map(|p| p.settings.get("pools")?.as_array()).flatten();
    let mut pools: Vec<String> = Vec::new();
    for pool in listed.filter_map(|p| p.as_str()) {
        if !pools.iter().any(|p| p.eq_ignore_ascii_case(pool)) {
            pools.push(pool.to_owned());
        }
    }
    pools
}

/// Why the collector would refuse `slot_id`'s submission of `project_id`,
/// in its words: the form and length of the id, the data market's project
/// rules, and (when it could be run) the selection.
fn collector_refusal(
    project_id: &str,
    slot_id: u64,
    market: &Projects,
    selection: Option<&(SelectionCheck, Arc<EpochAssignment>)>,
) -> Option<String> {
    if project_id.len() > caps::PROJECT_ID {
        return Some(format!(
            "projectId is {} bytes, more than the {} a submission may carry",
            project_id.len(),
            caps::PROJECT_ID
        ));
    }
    if !project_id_is_well_formed(project_id) {
        return Some(format!("projectId `{project_id}` is not `type:source:namespace` (or `type:namespace`)"));
    }
    let refusal = match selection {
        Some((check, epoch)) => check.check(epoch, slot_id, project_id).err()?,
        None => Refusal::UnknownProject(market.check(project_id).err()?),
    };
    Some(match refusal {
        Refusal::NotSelected(why) | Refusal::WrongPool(why) | Refusal::UnknownProject(why) => why,
    })
}
