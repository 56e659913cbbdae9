//! `lite-node assignments`: the data market's slot assignment for one epoch,
//! computed by the configured compute package's own rule.

use std::{fs, io::Write};

use anyhow::Result;

use crate::{
    compute,
    config::{ComputeConfig, ConfigErrors, EnvSnapshot},
    exit::BadInput,
};

/// Pools given as `--pools P1,P2,…` and/or `--pools-file F` (one per line,
/// `#` comments), in the order given.
pub fn pool_list(listed: &[String], file: Option<&std::path::Path>) -> Result<Vec<String>> {
    let mut pools: Vec<String> = listed.iter().map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect();
    if let Some(file) = file {
        let text = fs::read_to_string(file)
            .map_err(|e| BadInput(format!("cannot read --pools-file {}: {e}", file.display())))?;
        pools.extend(text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned));
    }
    Ok(pools)
}

/// `lite-node assignments`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Epoch id.
    #[arg(long, value_name = "E")]
    pub epoch_id: u64,
    /// Hash of the epoch's seed block (32 bytes hex, 0x optional).
    #[arg(long, value_name = "H")]
    pub block_hash: String,
    /// Total registered slots (getTotalNodeCount()).
    #[arg(long, value_name = "T")]
    pub total_slots: u64,
    /// Active pools, comma-separated.
    #[arg(long, value_name = "P1,P2,…", value_delimiter = ',')]
    pub pools: Vec<String>,
    /// A file with one pool address per line.
    #[arg(long, value_name = "F")]
    pub pools_file: Option<std::path::PathBuf>,
    /// Answer for this slot only.
    #[arg(long, value_name = "S")]
    pub slot: Option<u64>,
}

#[derive(serde::Serialize)]
struct EpochAssignments<'a> {
    epoch_id: u64,
    seed: &'a str,
    total_slots: u64,
    selected: Vec<SelectedSlot<'a>>,
}

#[derive(serde::Serialize)]
struct SelectedSlot<'a> {
    slot_id: u64,
    pool: &'a str,
}

#[derive(serde::Serialize)]
struct SlotAnswer<'a> {
    epoch_id: u64,
    slot_id: u64,
    selected: bool,
    pool: Option<&'a str>,
}

/// `lite-node assignments`: the data market's slot assignment for one epoch,
/// computed by the configured compute package, as JSON on `out`.
pub fn run(query: &Args, env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
    let pools = pool_list(&query.pools, query.pools_file.as_deref())?;
    let mut problems = Vec::new();
    let hex = query.block_hash.strip_prefix("0x").or_else(|| query.block_hash.strip_prefix("0X"));
    let hex = hex.unwrap_or(&query.block_hash);
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        problems.push(format!("--block-hash {} is not 32 bytes of hex (64 hex digits, 0x optional)", query.block_hash));
    }
    if pools.is_empty() {
        problems.push("no pools: give --pools P1,P2,… or --pools-file FILE (one address per line)".to_owned());
    }
    if let Some(slot) = query.slot
        && (slot == 0 || slot > query.total_slots)
    {
        problems.push(format!("--slot {slot} is outside 1..={} (the total slots)", query.total_slots));
    }
    if query.total_slots > u64::from(u32::MAX) {
        problems.push(format!("--total-slots {} exceeds 2^32 - 1, the protocol's slot id range", query.total_slots));
    }
    if !problems.is_empty() {
        return Err(ConfigErrors { problems }.into());
    }

    let cfg = ComputeConfig::from_env(env)?;
    let loaded = compute::load(&cfg)?;
    let library = loaded.libraries.iter().find(|l| l.provides_assignments()).ok_or_else(|| {
        BadInput(format!(
            "the compute package {} has no library that implements slot assignments",
            loaded.package.manifest.commit
        ))
    })?;
    let request = lite_node_plugin_api::AssignmentRequest {
        epoch_id: query.epoch_id,
        block_hash: query.block_hash.as_str().into(),
        total_slots: query.total_slots,
        pools: pools.iter().map(|p| p.as_str().into()).collect(),
    };
    let answer = library
        .assignments(&request)
        .map_err(|e| BadInput(format!("library `{}` refused the assignment: {e}", library.name)))?;
    let pool_name = |i: u32| -> Result<&str> {
        answer.pools.get(i as usize).map(|p| p.as_str()).ok_or_else(|| {
            anyhow::anyhow!("library `{}` answered pool index {i} of {} pools", library.name, answer.pools.len())
        })
    };
    let json = match query.slot {
        None => {
            let selected = answer
                .selected
                .iter()
                .map(|s| Ok(SelectedSlot { slot_id: s.slot_id, pool: pool_name(s.pool)? }))
                .collect::<Result<Vec<_>>>()?;
            serde_json::to_string(&EpochAssignments {
                epoch_id: query.epoch_id,
                seed: answer.seed.as_str(),
                total_slots: query.total_slots,
                selected,
            })
        }
        Some(slot) => {
            let pick = answer.selected.iter().find(|s| s.slot_id == slot);
            serde_json::to_string(&SlotAnswer {
                epoch_id: query.epoch_id,
                slot_id: slot,
                selected: pick.is_some(),
                pool: pick.map(|s| pool_name(s.pool)).transpose()?,
            })
        }
    }?;
    writeln!(out, "{json}")?;
    Ok(())
}
