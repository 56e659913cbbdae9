//! The command-line verbs, as library functions that take an environment and
//! write their report to a writer.

use std::{fs, io::Write, path::Path};

use anyhow::{Context, Result};

use crate::{
    compute::{self, ComputeError, Fetch, LoadedPackage},
    config::{ComputeConfig, ConfigErrors, EnvSnapshot, NodeConfig, Projects, ProjectsSource},
    repo,
};

/// How a command ended, as the process exit code documents it (README).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Ok = 0,
    /// The node or a command failed while running.
    Failure = 1,
    /// The configuration or the input is wrong; fix it and retry.
    BadConfig = 2,
    /// The safety net found the node stuck (no epoch processed for too long):
    /// restart it.
    Stuck = 3,
}

/// Marks an error as the operator's to fix (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Maps an error to its exit status: configuration problems are 2.
pub fn exit_status(err: &anyhow::Error) -> ExitStatus {
    if err.chain().any(|c| c.is::<crate::node::NodeStuck>()) {
        return ExitStatus::Stuck;
    }
    let bad = err.chain().any(|c| {
        c.is::<ConfigErrors>()
            || c.is::<BadInput>()
            || matches!(c.downcast_ref::<ComputeError>(), Some(ComputeError::Fetch(_) | ComputeError::Build { .. }))
    });
    if bad { ExitStatus::BadConfig } else { ExitStatus::Failure }
}

/// `lite-node compute fetch` / `compute list`: ensure (or only read) the
/// cached package, load it, and print what it holds.
pub fn compute_show(env: &EnvSnapshot, fetch: Fetch, out: &mut dyn Write) -> Result<LoadedPackage> {
    let cfg = ComputeConfig::from_env(env)?;
    let package = compute::ensure(&cfg, fetch)?;
    let loaded = LoadedPackage::load(package)?;
    print_package(&loaded, out)?;
    Ok(loaded)
}

fn print_package(loaded: &LoadedPackage, out: &mut dyn Write) -> std::io::Result<()> {
    let m = &loaded.package.manifest;
    writeln!(out, "cache: {}", loaded.package.dir.display())?;
    writeln!(
        out,
        "source: {} {}{}",
        m.source,
        m.location,
        m.branch.as_ref().map(|b| format!(" (branch {b})")).unwrap_or_default()
    )?;
    writeln!(out, "commit: {}", m.commit)?;
    writeln!(
        out,
        "built: {} with {}, plugin-api {}",
        m.profile,
        m.rustc.lines().next().unwrap_or_default(),
        m.plugin_api
    )?;
    for lib in &loaded.libraries {
        let extra = if lib.provides_assignments() { ", provides slot assignments" } else { "" };
        writeln!(out, "library {} (plugin-api {}{extra})", lib.name, lib.api_version)?;
        for (class, description) in &lib.processors {
            writeln!(out, "  {class}  {description}")?;
        }
        if lib.processors.is_empty() {
            writeln!(out, "  (no processors)")?;
        }
    }
    Ok(())
}

/// `lite-node check`: validates everything that can be checked without
/// running, one line per check; fails when any check fails.
pub fn check(env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
    let mut failed = 0usize;
    let mut bad_config = false;
    let mut line = |ok: bool, what: &str, detail: &str, out: &mut dyn Write| -> std::io::Result<()> {
        if !ok {
            failed += 1;
        }
        let detail = detail.replace('\n', "\n      ");
        writeln!(out, "{} {what}: {detail}", if ok { "ok  " } else { "FAIL" })
    };

    let node = NodeConfig::from_env(env);
    match &node {
        Ok(cfg) => line(
            true,
            "environment",
            &format!("slot {} on {}, data market {}", cfg.slot_id, cfg.full_namespace(), cfg.data_market),
            out,
        )?,
        Err(e) => {
            bad_config = true;
            line(false, "environment", &e.to_string(), out)?
        }
    }
    let compute_cfg = ComputeConfig::from_env(env);
    let data_dir = compute_cfg.as_ref().map(|c| c.data_dir.clone()).unwrap_or_else(|_| "data".into());
    let projects =
        ProjectsSource::from_env(env).map_err(anyhow::Error::from).and_then(|s| load_projects(&s, &data_dir));
    match &projects {
        Ok(p) => {
            let names: Vec<_> = p.projects.iter().map(|p| p.project_type.as_str()).collect();
            line(true, "projects", &format!("{} project(s): {}", names.len(), names.join(", ")), out)?
        }
        Err(e) => {
            bad_config = true;
            line(false, "projects", &format!("{e:#}"), out)?
        }
    }
    let loaded = match compute_cfg {
        Ok(cfg) => match compute::ensure(&cfg, Fetch::Allowed)
            .map_err(anyhow::Error::from)
            .and_then(|p| Ok(LoadedPackage::load(p)?))
        {
            Ok(loaded) => {
                let m = &loaded.package.manifest;
                line(
                    true,
                    "compute package",
                    &format!(
                        "{} {} ({} libraries) at {}",
                        m.source,
                        m.commit,
                        loaded.libraries.len(),
                        loaded.package.dir.display()
                    ),
                    out,
                )?;
                Some(loaded)
            }
            Err(e) => {
                bad_config |= exit_status(&e) == ExitStatus::BadConfig;
                line(false, "compute package", &format!("{e:#}"), out)?;
                None
            }
        },
        Err(e) => {
            bad_config = true;
            line(false, "compute package", &e.to_string(), out)?;
            None
        }
    };
    match (&projects, &loaded) {
        (Ok(projects), Some(loaded)) => {
            for p in &projects.projects {
                let settings = serde_json::Value::Object(p.settings.clone()).to_string();
                let what = format!("processor {}", p.project_type);
                match loaded.new_processor(&p.module, &p.class_name, &settings) {
                    Ok(_) => {
                        let lib = loaded.library(&p.module)?;
                        line(
                            true,
                            &what,
                            &format!("{}::{} (plugin-api {})", lib.name, p.class_name, lib.api_version),
                            out,
                        )?
                    }
                    Err(e) => {
                        bad_config = true;
                        line(false, &what, &e.to_string(), out)?
                    }
                }
            }
        }
        _ => line(false, "processors", "skipped: needs valid projects and a loadable compute package", out)?,
    }
    if failed == 0 {
        return Ok(());
    }
    let summary = format!("{failed} check(s) failed");
    if bad_config { Err(BadInput(summary).into()) } else { Err(anyhow::anyhow!(summary)) }
}

/// Reads projects.json from its file, or from its pinned repository (fetched
/// once per commit into `<data dir>/config/<commit>/`).
pub fn load_projects(source: &ProjectsSource, data_dir: &Path) -> Result<Projects> {
    match source {
        ProjectsSource::File(path) => Ok(Projects::load(path)?),
        ProjectsSource::Git { pin, file } => {
            let root = data_dir.join("config");
            let cached = pin.commit.as_ref().map(|c| root.join(c));
            let dir = match cached {
                Some(dir) if dir.join(file).is_file() => dir,
                _ => {
                    fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
                    let staging = tempfile::Builder::new().prefix(".staging-").tempdir_in(&root)?;
                    let src = staging.path().join("repo");
                    let commit = repo::checkout(pin, &src, "projects config")?;
                    let dir = root.join(&commit);
                    if !dir.join(file).is_file() {
                        if !src.join(file).is_file() {
                            return Err(BadInput(format!(
                                "{} has no {} at commit {commit} (set PROJECTS_CONFIG to its path in the repository)",
                                pin.describe(),
                                file.display()
                            ))
                            .into());
                        }
                        let _ = fs::remove_dir_all(&dir);
                        fs::rename(&src, &dir)
                            .with_context(|| format!("moving the projects config to {}", dir.display()))?;
                    }
                    dir
                }
            };
            Ok(Projects::load(&dir.join(file))?)
        }
    }
}

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

/// What `lite-node assignments` is asked.
#[derive(Clone, Debug)]
pub struct AssignmentQuery {
    pub epoch_id: u64,
    pub block_hash: String,
    pub total_slots: u64,
    pub pools: Vec<String>,
    pub pools_file: Option<std::path::PathBuf>,
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
pub fn assignments(env: &EnvSnapshot, query: &AssignmentQuery, out: &mut dyn Write) -> Result<()> {
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
    let loaded = LoadedPackage::load(compute::ensure(&cfg, Fetch::Allowed)?)?;
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

/// `lite-node alert test`: one test message through every configured alert
/// channel; a line per channel with what it answered or why it failed.
pub async fn alert_test(env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
    let cfg = crate::config::AlertConfig::from_env(env)?;
    if !cfg.any() {
        return Err(BadInput(
            "no alert channel configured: set TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID \
             (TELEGRAM_API_URL for a self-hosted Bot API), or TELEGRAM_REPORTING_URL and TELEGRAM_CHAT_ID"
                .into(),
        )
        .into());
    }
    let from = crate::alerts::Sender {
        slot_id: env.get("SLOT_ID").and_then(|s| s.parse().ok()).unwrap_or(0),
        signer: env.get("SIGNER_ACCOUNT_ADDRESS").unwrap_or("unknown signer").to_owned(),
    };
    let results = crate::alerts::test(&cfg, from).await.map_err(BadInput)?;
    let mut failed = 0;
    for (channel, result) in &results {
        match result {
            Ok(answer) => writeln!(out, "ok   {channel}: {answer}")?,
            Err(e) => {
                failed += 1;
                writeln!(out, "fail {channel}: {e}")?;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} alert channel(s) failed", results.len());
    }
    Ok(())
}
