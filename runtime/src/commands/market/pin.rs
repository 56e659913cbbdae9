//! `lite-node market pin`: the market's compute package and projects.json,
//! each a git repository at one commit, recorded in the manifest — so that
//! `market env` hands every operator the same package and projects, and
//! `lite-node check` (and every collector and validator at start) refuses
//! other ones.

use std::{io::Write, path::PathBuf};

use anyhow::{Context, Result, bail};
use lite_node_chain::market::{Manifest, PackagePin, ProjectsPin};

use crate::{
    config::{GitPin, ProjectsSource},
    exit::BadInput,
};

/// `lite-node market pin`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// The compute package's git repository (its URL).
    #[arg(long, value_name = "URL", requires_all = ["compute_branch", "compute_commit"])]
    pub compute_repo: Option<String>,
    /// The branch that holds the package's commit.
    #[arg(long, value_name = "BRANCH", requires = "compute_repo")]
    pub compute_branch: Option<String>,
    /// The package's commit (40 hex digits).
    #[arg(long, value_name = "COMMIT", requires = "compute_repo")]
    pub compute_commit: Option<String>,
    /// The compute workspace's directory inside that repository (its root
    /// by default).
    #[arg(long, value_name = "DIR", requires = "compute_repo")]
    pub compute_path: Option<String>,
    /// The git repository that publishes the market's projects.json.
    #[arg(long, value_name = "URL", requires_all = ["projects_branch", "projects_commit"])]
    pub projects_repo: Option<String>,
    /// The branch that holds its commit.
    #[arg(long, value_name = "BRANCH", requires = "projects_repo")]
    pub projects_branch: Option<String>,
    /// Its commit (40 hex digits).
    #[arg(long, value_name = "COMMIT", requires = "projects_repo")]
    pub projects_commit: Option<String>,
    /// projects.json's path inside that repository.
    #[arg(long, value_name = "PATH", default_value = "projects.json", requires = "projects_repo")]
    pub projects_path: String,
    /// The market's manifest.
    #[arg(long, value_name = "PATH", default_value = "market.json")]
    pub manifest: PathBuf,
}

fn commit(flag: &str, text: &str) -> Result<String> {
    let c = text.trim().to_ascii_lowercase();
    if c.len() != 40 || !c.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!(BadInput(format!(
            "--{flag} {text}: not a full commit id: give all 40 hex digits (git rev-parse <commit>)"
        )));
    }
    Ok(c)
}

fn relative(flag: &str, path: &str) -> Result<()> {
    let p = std::path::Path::new(path);
    if p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir) {
        bail!(BadInput(format!("--{flag} {path}: a path inside the repository (relative, no `..`)")));
    }
    Ok(())
}

/// `lite-node market pin`: fetches each pin given (the commit must be on
/// its branch; the package's directory must hold a cargo workspace; the
/// projects file must be valid), records it in the manifest, and prints
/// what the manifest pins.
pub fn run(a: &Args, out: &mut dyn Write) -> Result<()> {
    let mut m = Manifest::load(&a.manifest)?;
    let scratch = tempfile::tempdir().context("a scratch directory for the fetches")?;
    let mut changed = false;
    if let (Some(repo), Some(branch), Some(c)) = (&a.compute_repo, &a.compute_branch, &a.compute_commit) {
        let commit = commit("compute-commit", c)?;
        if let Some(path) = &a.compute_path {
            relative("compute-path", path)?;
        }
        let pin = GitPin { url: repo.clone(), branch: branch.clone(), commit: Some(commit.clone()) };
        writeln!(out, "fetching the compute package {}…", pin.describe())?;
        let dest = scratch.path().join("compute");
        lite_node_compute::fetch_pin(&pin, &dest, "compute package")?;
        let dir = a.compute_path.as_ref().map_or(dest.clone(), |p| dest.join(p));
        if !dir.join("Cargo.toml").is_file() {
            bail!(BadInput(format!(
                "{} has no Cargo.toml in {} at that commit: --compute-path names the compute workspace's directory",
                pin.describe(),
                a.compute_path.as_deref().unwrap_or("its root")
            )));
        }
        m.compute =
            Some(PackagePin { repo: repo.clone(), branch: branch.clone(), commit, path: a.compute_path.clone() });
        changed = true;
    }
    if let (Some(repo), Some(branch), Some(c)) = (&a.projects_repo, &a.projects_branch, &a.projects_commit) {
        let commit = commit("projects-commit", c)?;
        relative("projects-path", &a.projects_path)?;
        let pin = GitPin { url: repo.clone(), branch: branch.clone(), commit: Some(commit.clone()) };
        writeln!(out, "fetching the projects {}…", pin.describe())?;
        let source = ProjectsSource::Git { pin, file: PathBuf::from(&a.projects_path) };
        let projects = lite_node_compute::load_projects(&source, scratch.path())?;
        let id = projects.identity();
        m.projects = Some(ProjectsPin {
            repo: repo.clone(),
            branch: branch.clone(),
            commit,
            path: a.projects_path.clone(),
            hash: id.hash,
            types: id.types,
            pools: id.pools,
            pools_hash: id.pools_hash,
        });
        changed = true;
    }
    if changed {
        let text = serde_json::to_string_pretty(&m)? + "\n";
        lite_node_core::atomic_file::write_durable(&a.manifest, text.as_bytes())
            .with_context(|| format!("writing the manifest {}", a.manifest.display()))?;
    }
    match &m.compute {
        Some(p) => writeln!(
            out,
            "compute package: {} (branch {}) at {}{}",
            lite_node_core::url::redact_url(&p.repo),
            p.branch,
            p.commit,
            p.path.as_ref().map(|d| format!(", directory {d}")).unwrap_or_default()
        )?,
        None => writeln!(out, "compute package: not pinned (each node runs the one bundled with its lite-node)")?,
    }
    match &m.projects {
        Some(p) => writeln!(
            out,
            "projects: {} in {} (branch {}) at {}: {} ({} pool(s)), hash {}",
            p.path,
            lite_node_core::url::redact_url(&p.repo),
            p.branch,
            p.commit,
            p.types.join(", "),
            p.pools,
            p.hash
        )?,
        None => writeln!(out, "projects: not pinned (each node reads its own PROJECTS_CONFIG)")?,
    }
    Ok(())
}
