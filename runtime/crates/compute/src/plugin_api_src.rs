//! The runtime's own copy of the plugin-api source, which every compute
//! package is built against, so that both sides of the boundary agree by
//! construction.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/plugin_api_files.rs"));
}

/// A plugin-api source tree on disk, and what identifies it in cache keys.
#[derive(Clone, Debug)]
pub struct PluginApiSource {
    pub dir: PathBuf,
    pub version: String,
    /// Hash of the crate's files: the same version with other contents is
    /// another interface.
    pub content_hash: String,
}

impl PluginApiSource {
    /// `0.1.0+3f2a…`: version and content, as shown to users and keyed on.
    pub fn id(&self) -> String {
        format!("{}+{}", self.version, &self.content_hash[..12])
    }

    /// The embedded copy's files, `(path inside the crate, contents)`.
    pub fn embedded_files() -> &'static [(&'static str, &'static str)] {
        embedded::FILES
    }

    /// The embedded copy, written under `<dir>/plugin-api/` once (`dir`: the
    /// package's place under the target dir, `crate::interface_home`).
    pub fn embedded(dir: &Path) -> io::Result<Self> {
        let files: Vec<(PathBuf, &[u8])> =
            embedded::FILES.iter().map(|(p, c)| (PathBuf::from(p), c.as_bytes())).collect();
        let content_hash = hash_files(files.iter().map(|(p, c)| (p.as_path(), *c)));
        let version = lite_node_plugin_api::PLUGIN_API_VERSION.to_owned();
        let parent = dir.join("plugin-api");
        let dir = parent.join(format!("{version}-{}", &content_hash[..12]));
        if !dir.join("Cargo.toml").is_file() {
            fs::create_dir_all(&parent)?;
            let staging = tempfile::Builder::new().prefix(".staging-").tempdir_in(&parent)?;
            for (rel, contents) in &files {
                let path = staging.path().join(rel);
                if let Some(p) = path.parent() {
                    fs::create_dir_all(p)?;
                }
                fs::write(path, contents)?;
            }
            // Another node may have written the same copy meanwhile; either is fine.
            if let Err(e) = fs::rename(staging.path(), &dir)
                && !dir.join("Cargo.toml").is_file()
            {
                return Err(e);
            }
        }
        Ok(Self { dir, version, content_hash })
    }

    /// A plugin-api checkout given by `LITE_NODE_PLUGIN_API_DIR`.
    pub fn from_dir(dir: &Path) -> io::Result<Self> {
        let manifest = fs::read_to_string(dir.join("Cargo.toml"))?;
        let version = manifest
            .lines()
            .find_map(|l| l.trim().strip_prefix("version").and_then(|r| r.trim().strip_prefix('=')))
            .map(|v| v.trim().trim_matches('"').to_owned())
            .ok_or_else(|| io::Error::other(format!("no version in {}/Cargo.toml", dir.display())))?;
        let mut files = vec![(PathBuf::from("Cargo.toml"), manifest.into_bytes())];
        for rel in walk(dir, &["target"])? {
            if rel.starts_with("src") {
                files.push((rel.clone(), fs::read(dir.join(&rel))?));
            }
        }
        let content_hash = hash_files(files.iter().map(|(p, c)| (p.as_path(), c.as_slice())));
        Ok(Self { dir: dir.to_path_buf(), version, content_hash })
    }
}

/// SHA-256 over (path, contents) pairs, in the order given, hex.
pub fn hash_files<'a>(files: impl Iterator<Item = (&'a Path, &'a [u8])>) -> String {
    let mut h = Sha256::new();
    for (path, contents) in files {
        let p = path.to_string_lossy();
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
        h.update((contents.len() as u64).to_be_bytes());
        h.update(contents);
    }
    hex::encode(h.finalize())
}

/// Every file below `root` (relative paths, sorted), skipping hidden entries
/// and directories named in `skip`.
pub fn walk(root: &Path, skip: &[&str]) -> io::Result<Vec<PathBuf>> {
    walk_kept(root, skip, |_, _| true)
}

/// [`walk`], leaving out what `keep(relative path, is a directory)` refuses
/// (a directory refused is not entered).
pub fn walk_kept(root: &Path, skip: &[&str], keep: impl Fn(&Path, bool) -> bool) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in fs::read_dir(root.join(&rel))? {
            let entry = entry?;
            let name = entry.file_name();
            let name_str = name.to_string_lossy();
            if name_str.starts_with('.') || skip.contains(&name_str.as_ref()) {
                continue;
            }
            let child = rel.join(&name);
            let dir = entry.file_type()?.is_dir();
            if !keep(&child, dir) {
                continue;
            }
            if dir {
                stack.push(child);
            } else {
                out.push(child);
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_copy_matches_the_checkout_and_is_written_once() {
        let data = tempfile::tempdir().unwrap();
        let a = PluginApiSource::embedded(data.path()).unwrap();
        let b = PluginApiSource::embedded(data.path()).unwrap();
        assert_eq!(a.dir, b.dir);
        assert!(a.dir.join("src/lib.rs").is_file());
        let checkout =
            PluginApiSource::from_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../plugin-api")).unwrap();
        assert_eq!(checkout.id(), a.id(), "the binary embeds the plugin-api of this checkout");
    }
}
