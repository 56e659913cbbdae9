//! `lite-node compute fetch` and `compute list`: the pinned compute package,
//! fetched and built (or only read from the cache), loaded, and shown.

use std::io::Write;

use anyhow::Result;

use crate::{
    compute::{self, Fetch, LoadedPackage},
    config::{ComputeConfig, EnvSnapshot},
};

/// `lite-node compute fetch` / `compute list`: ensure (or only read) the
/// cached package, load it, and print what it holds.
pub fn compute_show(env: &EnvSnapshot, fetch: Fetch, out: &mut dyn Write) -> Result<LoadedPackage> {
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
        let width = lib.processors.iter().map(|(class, _)| class.chars().count()).max().unwrap_or(0);
        for (class, description) in &lib.processors {
            writeln!(out, "  {class:<width$}  {description}")?;
        }
        if lib.processors.is_empty() {
            writeln!(out, "  (no processors)")?;
        }
    }
    Ok(())
}
