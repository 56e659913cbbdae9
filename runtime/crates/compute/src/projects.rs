//! projects.json as the node finds it: a file, or a file in its pinned
//! repository, fetched once per commit. The parsing and checking are
//! `lite_node_config::Projects`'; this only brings the bytes.

use std::{fs, path::Path};

use anyhow::{Context, Result};
use lite_node_config::{ConfigErrors, Projects, ProjectsSource};

use crate::repo;

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
                            return Err(ConfigErrors::one(format!(
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
