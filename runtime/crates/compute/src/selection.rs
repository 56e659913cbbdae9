//! The selection check: a submission's slot was selected for its epoch, and
//! a pool-scoped project id names the pool the slot was assigned — by running
//! the compute package's own assignment rule on the epoch's seed block.

use std::{collections::BTreeMap, sync::Arc};

use lite_node_plugin_api::{AssignmentRequest, RpcError};
use lite_node_protocol::{submission::Projects, to_quantity};

use lite_node_chain::{Anchor, HttpRpc, Release};

use crate::LoadedPackage;

/// Why a submission was not accepted: its own fault (answered `Failure`,
/// recorded with the reason), or the chain could not be read (answered with
/// gRPC `UNAVAILABLE`, not recorded: the node tries again).
#[derive(Debug)]
pub enum Refused {
    Rejected(String),
    Unavailable(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rejected(r) | Self::Unavailable(r) => f.write_str(r),
        }
    }
}

impl From<String> for Refused {
    fn from(reason: String) -> Self {
        Self::Rejected(reason)
    }
}

/// Assignments kept (the newest epochs).
const KEPT_EPOCHS: usize = 64;

/// One epoch's assignment as the data market's rule gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochAssignment {
    pub epoch_id: u64,
    pub begin: u64,
    pub end: u64,
    /// Hash of the source block the seed is taken from (`begin`).
    pub block_hash: String,
    pub total_slots: u64,
    /// Selected slot → its pool (as listed).
    pub selected: BTreeMap<u64, String>,
    /// The data market's full-node slots at the release block: each may
    /// submit every active pool (docs/protocol.md §13).
    pub full_nodes: std::collections::BTreeSet<u64>,
}

/// Checks that a submission's slot was selected for its epoch and that a
/// pool-scoped project id names the pool the slot was assigned, by running
/// the compute package's own assignment rule on the epoch's seed block.
pub struct SelectionCheck {
    source: Arc<HttpRpc>,
    pools: Vec<String>,
    projects: Projects,
    package: Arc<LoadedPackage>,
    library: usize,
    epochs: tokio::sync::Mutex<BTreeMap<u64, Arc<EpochAssignment>>>,
}

impl std::fmt::Debug for SelectionCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectionCheck").field("pools", &self.pools.len()).finish_non_exhaustive()
    }
}

impl SelectionCheck {
    /// A check with the active `pools`, the source chain the seed blocks are
    /// read from, a package that implements the assignment rule, and the
    /// projects the data market defines.
    pub fn new(
        source: Arc<HttpRpc>,
        pools: Vec<String>,
        package: Arc<LoadedPackage>,
        projects: Projects,
    ) -> Result<Self, String> {
        if pools.is_empty() {
            return Err("the selection check needs the active pool list".into());
        }
        let library = package.libraries.iter().position(|l| l.provides_assignments()).ok_or_else(|| {
            format!(
                "the compute package {} has no library that implements slot assignments",
                package.package.manifest.commit
            )
        })?;
        Ok(Self { source, pools, projects, package, library, epochs: Default::default() })
    }

    pub fn pools(&self) -> &[String] {
        &self.pools
    }

    pub fn projects(&self) -> &Projects {
        &self.projects
    }

    /// The assignment of `epoch_id`: its release, seed block, the total slots
    /// at the release block, and the rule's answer (kept once computed; the
    /// rule runs off the async threads).
    pub async fn epoch(
        &self,
        anchor: &Anchor,
        epoch_id: u64,
        release: Release,
    ) -> Result<Arc<EpochAssignment>, Refused> {
        if let Some(known) = self.epochs.lock().await.get(&epoch_id) {
            return Ok(known.clone());
        }
        let unavailable = |what: &str, e: RpcError| Refused::Unavailable(format!("{what} unavailable: {e}"));
        let total_slots = anchor.total_slots_at(release.block_number).await.map_err(|e| unavailable("anchor", e))?;
        // A ProtocolState without the full-node registry answers with a
        // revert: it has none. Any other error (a node without that block's
        // state, a rate limit) says nothing of the registry: the epoch is
        // asked again later, never kept without its full nodes.
        let full_nodes = match anchor.full_nodes_at(release.block_number).await {
            Ok(slots) => slots.into_iter().collect(),
            Err(e) if is_revert(&e) => Default::default(),
            Err(e) => return Err(unavailable("anchor", e)),
        };
        self.assign(epoch_id, release.begin, release.end, total_slots, full_nodes).await
    }

    /// The assignment of an epoch given its blocks, total slots and full
    /// nodes (as [`SelectionCheck::epoch`] reads them at its release): the
    /// seed block's hash from the source chain and the rule's answer.
    pub async fn assign(
        &self,
        epoch_id: u64,
        begin: u64,
        end: u64,
        total_slots: u64,
        full_nodes: std::collections::BTreeSet<u64>,
    ) -> Result<Arc<EpochAssignment>, Refused> {
        let unavailable = |what: &str, e: RpcError| Refused::Unavailable(format!("{what} unavailable: {e}"));
        let block = self
            .source
            .call_value("eth_getBlockByNumber", serde_json::json!([to_quantity(begin), false]))
            .await
            .map_err(|e| unavailable("source chain", e))?;
        let block_hash = block["hash"]
            .as_str()
            .ok_or_else(|| {
                Refused::Unavailable(format!("the source chain has no block {begin} (epoch {epoch_id}'s seed block)"))
            })?
            .to_owned();
        let request = AssignmentRequest {
            epoch_id,
            block_hash: block_hash.as_str().into(),
            total_slots,
            pools: self.pools.iter().map(|p| p.as_str().into()).collect(),
        };
        let (package, index) = (self.package.clone(), self.library);
        let selected = tokio::task::spawn_blocking(move || {
            let library = &package.libraries[index];
            let answer = library.assignments(&request).map_err(|e| format!("library `{}`: {e}", library.name))?;
            let mut selected = BTreeMap::new();
            for s in &answer.selected {
                let pool = answer.pools.get(s.pool as usize).ok_or_else(|| {
                    format!("library `{}` answered pool index {} of {}", library.name, s.pool, answer.pools.len())
                })?;
                selected.insert(s.slot_id, pool.to_string());
            }
            Ok::<_, String>(selected)
        })
        .await
        .map_err(|e| Refused::Unavailable(format!("the assignment rule did not finish: {e}")))??;
        let assignment =
            Arc::new(EpochAssignment { epoch_id, begin, end, block_hash, total_slots, selected, full_nodes });
        let mut epochs = self.epochs.lock().await;
        epochs.insert(epoch_id, assignment.clone());
        // Only recent epochs are asked about: a long-running checker keeps
        // the newest few, not one assignment per epoch forever.
        while epochs.len() > KEPT_EPOCHS {
            epochs.pop_first();
        }
        Ok(assignment)
    }

    /// Whether `slot_id` may submit `project_id` in `epoch`: the project must
    /// be one the data market defines ([`Projects::check`]); projects whose
    /// data source is a pool need the slot selected and assigned exactly that
    /// pool (one pool: `a_b` is no project of the market) — unless the slot
    /// is a full node, which may submit every active pool; a project without
    /// a data source needs the slot selected (any pool) or a full node.
    pub fn check(&self, epoch: &EpochAssignment, slot_id: u64, project_id: &str) -> Result<(), Refusal> {
        self.projects.check(project_id).map_err(Refusal::UnknownProject)?;
        let parts: Vec<&str> = project_id.split(':').collect();
        let source = match parts.as_slice() {
            [_, ds, _] => Some(*ds),
            _ => None,
        };
        let e = epoch.epoch_id;
        if let Some(pool) = source
            && !self.pools.iter().any(|p| p.eq_ignore_ascii_case(pool))
        {
            return Err(Refusal::WrongPool(format!(
                "{project_id}: pool {pool} is not in the data market's active pool list"
            )));
        }
        // A full node works every active pool, every epoch.
        if epoch.full_nodes.contains(&slot_id) {
            return Ok(());
        }
        let Some(assigned) = epoch.selected.get(&slot_id) else {
            return Err(Refusal::NotSelected(format!(
                "slot {slot_id} was not selected in epoch {e} (seed block {}, {} total slots)",
                epoch.block_hash, epoch.total_slots
            )));
        };
        // A project without a data source: any selected slot's.
        if let Some(pool) = source
            && !pool.eq_ignore_ascii_case(assigned)
        {
            return Err(Refusal::WrongPool(format!(
                "slot {slot_id} was assigned pool {assigned} in epoch {e}, not {project_id}"
            )));
        }
        Ok(())
    }
}

/// Why the selection check refuses a submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The slot was not selected for the epoch.
    NotSelected(String),
    /// The project names a pool the slot was not assigned (or no active pool).
    WrongPool(String),
    /// The project is none the data market defines.
    UnknownProject(String),
}

impl From<Refusal> for Refused {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::NotSelected(why) | Refusal::WrongPool(why) | Refusal::UnknownProject(why) => {
                Refused::Rejected(why)
            }
        }
    }
}

/// Whether a node's error answer is the call reverting (code 3, or the
/// message says so), not a failure to answer it.
fn is_revert(e: &RpcError) -> bool {
    e.code.into_option() == Some(3) || e.message.to_ascii_lowercase().contains("revert")
}

#[cfg(test)]
mod tests {
    use abi_stable::std_types::ROption;

    use super::*;

    fn error(code: Option<i64>, message: &str) -> RpcError {
        RpcError { code: code.map_or(ROption::RNone, ROption::RSome), message: message.into() }
    }

    #[test]
    fn only_a_revert_means_the_registry_is_missing() {
        assert!(is_revert(&error(Some(3), "execution reverted")));
        assert!(is_revert(&error(Some(-32000), "execution reverted: no such function")));
        // A node without the block's state, a rate limit, a timeout: the
        // full nodes are not known, and the epoch is asked again.
        assert!(!is_revert(&error(Some(-32000), "header not found")));
        assert!(!is_revert(&error(Some(429), "Too Many Requests")));
        assert!(!is_revert(&error(Some(-32005), "limit exceeded")));
        assert!(!is_revert(&error(None, "anchor: timed out")));
    }
}
