//! `lite-node check`: everything that can be checked without running, one
//! line per check.

use std::io::Write;

use anyhow::Result;

use crate::{
    compute::{self, Fetch, LoadedPackage},
    config::{ComputeConfig, EnvSnapshot, NodeConfig, ProjectsSource, load_projects},
    exit::{BadInput, ExitStatus, exit_status},
};

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
