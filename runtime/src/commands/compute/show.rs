//! `lite-node compute fetch`, `compute list` and `compute new`: the pinned
//! compute package fetched and built (or only read from the cache), loaded
//! and shown; a new package written from the template.

use std::io::Write;

use anyhow::Result;

use crate::{
    compute::{self, Fetch, LoadedPackage},
    config::{ComputeConfig, EnvSnapshot},
};

/// `lite-node compute fetch` / `compute list`: ensure (or only read) the
/// cached package, load it, and print what it holds.
pub fn show(env: &EnvSnapshot, fetch: Fetch, out: &mut dyn Write) -> Result<LoadedPackage> {
    let cfg = ComputeConfig::from_env(env)?;
    let package = compute::ensure(&cfg, fetch)?;
    let loaded = LoadedPackage::load(package)?;
    print_package(&loaded, out)?;
    Ok(loaded)
}

pub fn print_package(loaded: &LoadedPackage, out: &mut dyn Write) -> std::io::Result<()> {
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
        let width = lib.processors.iter().map(|p| p.class_name.chars().count()).max().unwrap_or(0);
        for p in &lib.processors {
            let needs = if p.needs.is_empty() { String::new() } else { format!(" (needs {})", p.needs.join(", ")) };
            writeln!(out, "  {:<width$}  {}{needs}", p.class_name, p.description)?;
        }
        if lib.processors.is_empty() {
            writeln!(out, "  (no processors)")?;
        }
    }
    Ok(())
}

/// `lite-node compute new DIR [--name NAME]`.
pub fn new(dir: &std::path::Path, name: Option<&str>, env: &EnvSnapshot, out: &mut dyn Write) -> Result<()> {
    let s = compute::scaffold::new_package(dir, name, &env.cargo())?;
    let api = lite_node_plugin_api::PLUGIN_API_VERSION;
    writeln!(out, "wrote the compute package {} in {} (commit {}):", s.crate_name, s.dir.display(), s.commit)?;
    let rows = [
        (format!("{}/", s.crate_name), format!("the processor {} (library {})", s.class_name, s.library)),
        (
            "compute-kit/".to_owned(),
            "helpers: typed calls, batches and logs (alloy sol!), typed test answers, the seed block".to_owned(),
        ),
        ("slot-selection/".to_owned(), "the BDS market's slot selection".to_owned()),
        ("plugin-api/".to_owned(), format!("lite-node-plugin-api {api}, this node's interface")),
        (
            "projects.json".to_owned(),
            format!(
                "the project {}, on two Ethereum mainnet pools (the devnet puts its own in their place)",
                s.project_type
            ),
        ),
        (
            "Cargo.lock".to_owned(),
            if s.locked { "the dependencies, pinned" } else { "not written (no registry): the first build writes it" }
                .to_owned(),
        ),
        ("README.md".to_owned(), "the loop: test, the devnet, re-run an epoch, publish; what operators set".to_owned()),
    ];
    let width = rows.iter().map(|(a, _)| a.len()).max().unwrap_or(0);
    for (what, why) in rows {
        writeln!(out, "  {what:<width$}  {why}")?;
    }
    writeln!(out, "next: cd {} && cargo test, then README.md's step 2: your processor on the devnet", s.dir.display())?;
    Ok(())
}
