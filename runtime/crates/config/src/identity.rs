//! A market's identity as its operators' settings carry it: the projects
//! (their hash, their types and their pools) and the compute package's
//! commit, which `lite-node market env` prints from the market's manifest
//! (`MARKET_PROJECTS_HASH`, `MARKET_PROJECT_TYPES`, `MARKET_POOLS`,
//! `MARKET_POOLS_HASH`, `MARKET_COMPUTE_COMMIT`). A node, collector or
//! validator whose own differ is refused, naming the difference: it would
//! compute, accept or judge projects the market's validators do not.

use alloy::primitives::keccak256;

use crate::{ConfigErrors, EnvSnapshot, Projects};

/// What identifies a projects.json: the hash of its content (keys sorted,
/// no whitespace: an edit that changes nothing the node reads keeps it),
/// its project types in file order, and its pools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectsIdentity {
    /// `0x` and the keccak-256 of the file's JSON, keys sorted, compact.
    pub hash: String,
    pub types: Vec<String>,
    /// How many distinct pools its projects name (their `pools` settings).
    pub pools: usize,
    /// `0x` and the keccak-256 of those pools, as written, sorted, one per line.
    pub pools_hash: String,
}

impl Projects {
    /// Every distinct pool address the projects' `pools` settings name, as
    /// written (the assignment rule sorts them as strings: their case is
    /// part of the market) and in the order first named: the market's
    /// active pools when its projects list them.
    pub fn pools(&self) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        self.projects
            .iter()
            .filter_map(|p| p.settings.get("pools").and_then(|v| v.as_array()))
            .flatten()
            .filter_map(|p| p.as_str().map(|s| s.trim().to_owned()))
            .filter(|p| seen.insert(p.clone()))
            .collect()
    }

    /// This file's [`ProjectsIdentity`].
    pub fn identity(&self) -> ProjectsIdentity {
        let pools = self.pools();
        ProjectsIdentity {
            hash: self.hash.clone(),
            types: self.projects.iter().map(|p| p.project_type.clone()).collect(),
            pools: pools.len(),
            pools_hash: pools_hash(&pools),
        }
    }
}

/// `0x` and the keccak-256 of `pools` (as written, sorted), one per line.
pub fn pools_hash(pools: &[String]) -> String {
    let mut sorted: Vec<String> = pools.to_vec();
    sorted.sort();
    sorted.dedup();
    keccak256(sorted.join("\n")).to_string()
}

/// The content hash of a parsed projects.json.
pub(crate) fn content_hash(root: &serde_json::Value) -> String {
    // serde_json's maps are sorted by key (no `preserve_order`).
    keccak256(serde_json::to_vec(root).unwrap_or_default()).to_string()
}

/// The market's identity an operator's settings name (`market env` prints
/// it); each part is checked only when set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarketIdentity {
    pub projects_hash: Option<String>,
    pub project_types: Option<Vec<String>>,
    pub pools: Option<usize>,
    pub pools_hash: Option<String>,
    /// The compute package's commit (40 hex digits).
    pub compute_commit: Option<String>,
}

impl MarketIdentity {
    /// The `MARKET_*` variables; a malformed one is a problem naming it.
    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let hash = |key: &str, problems: &mut Vec<String>| {
            let value = env.get(key)?.trim().to_ascii_lowercase();
            let ok = value.len() == 66 && value.starts_with("0x") && value[2..].bytes().all(|b| b.is_ascii_hexdigit());
            if !ok {
                problems.push(format!(
                    "{key}={value}: not a hash (0x and 64 hex digits, as `lite-node market env` prints it)"
                ));
            }
            Some(value)
        };
        let projects_hash = hash("MARKET_PROJECTS_HASH", &mut problems);
        let pools_hash = hash("MARKET_POOLS_HASH", &mut problems);
        let project_types = env
            .get("MARKET_PROJECT_TYPES")
            .map(|t| t.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect::<Vec<_>>());
        let pools = env.get("MARKET_POOLS").and_then(|n| match n.trim().parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) => {
                problems.push(format!("MARKET_POOLS={n}: not a number of pools"));
                None
            }
        });
        let compute_commit = env.get("MARKET_COMPUTE_COMMIT").map(|c| c.trim().to_ascii_lowercase());
        if let Some(c) = &compute_commit
            && !(c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            problems.push(format!("MARKET_COMPUTE_COMMIT={c}: not a commit id (40 hex digits)"));
        }
        if !problems.is_empty() {
            return Err(ConfigErrors { problems });
        }
        Ok(Self { projects_hash, project_types, pools, pools_hash, compute_commit })
    }

    /// Whether the settings name any part of the market's identity.
    pub fn is_set(&self) -> bool {
        *self != Self::default()
    }

    /// `ours` against the market's projects: `Err` names the first
    /// difference (types, then pools, then anything else) and the fix.
    pub fn check_projects(&self, ours: &ProjectsIdentity) -> Result<(), String> {
        const FIX: &str = "use the market's projects: SNAPSHOT_CONFIG_REPO, _BRANCH, _COMMIT and PROJECTS_CONFIG as \
                           `lite-node market env` prints them";
        if let Some(types) = &self.project_types
            && *types != ours.types
        {
            let missing: Vec<&str> = types.iter().filter(|t| !ours.types.contains(t)).map(String::as_str).collect();
            let extra: Vec<&str> = ours.types.iter().filter(|t| !types.contains(t)).map(String::as_str).collect();
            let mut what = Vec::new();
            if !missing.is_empty() {
                what.push(format!("missing here: {}", missing.join(", ")));
            }
            if !extra.is_empty() {
                what.push(format!("not the market's: {}", extra.join(", ")));
            }
            if what.is_empty() {
                what.push("in another order".to_owned());
            }
            return Err(format!(
                "projects {} are not the market's {} ({}): {FIX}",
                list(&ours.types),
                list(types),
                what.join("; ")
            ));
        }
        let pools_differ = self.pools_hash.as_ref().is_some_and(|h| *h != ours.pools_hash)
            || self.pools.is_some_and(|n| n != ours.pools);
        if pools_differ {
            let theirs = self.pools.map_or_else(|| "other".to_owned(), |n| n.to_string());
            return Err(format!(
                "the projects' pools are not the market's: {} pool(s) here (hash {}), {theirs} in the market \
                 (MARKET_POOLS_HASH {}): {FIX}",
                ours.pools,
                short(&ours.pools_hash),
                self.pools_hash.as_deref().map_or("unset".into(), short)
            ));
        }
        if let Some(hash) = &self.projects_hash
            && *hash != ours.hash
        {
            return Err(format!(
                "projects.json is not the market's: the same projects and pools, other settings (hash {} here, \
                 MARKET_PROJECTS_HASH {}): {FIX}",
                short(&ours.hash),
                short(hash)
            ));
        }
        Ok(())
    }

    /// The compute package's `commit` against the market's.
    pub fn check_compute(&self, commit: &str) -> Result<(), String> {
        match &self.compute_commit {
            Some(theirs) if !theirs.eq_ignore_ascii_case(commit) => Err(format!(
                "compute package at {commit}, not the market's {theirs} (MARKET_COMPUTE_COMMIT): use the market's \
                 SNAPSHOTTER_COMPUTE_REPO, _BRANCH and _COMMIT as `lite-node market env` prints them"
            )),
            _ => Ok(()),
        }
    }
}

fn list(types: &[String]) -> String {
    if types.is_empty() { "(none)".into() } else { types.join(", ") }
}

/// A hash as messages show it: `0x1234abcd…`.
fn short(hash: &str) -> String {
    format!("{}…", &hash[..hash.len().min(10)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn projects(text: &str) -> Projects {
        Projects::parse(text, "projects.json").unwrap()
    }

    const BASE: &str = r#"{"config":[{"project_type":"baseSnapshot","processor":{"module":"m","class_name":"C"},
        "per_pool":true,"pools":["0x00000000000000000000000000000000000000AA","0x00000000000000000000000000000000000000bb"]}]}"#;

    fn market(of: &Projects) -> MarketIdentity {
        let id = of.identity();
        MarketIdentity {
            projects_hash: Some(id.hash),
            project_types: Some(id.types),
            pools: Some(id.pools),
            pools_hash: Some(id.pools_hash),
            compute_commit: None,
        }
    }

    #[test]
    fn the_hash_ignores_layout_and_key_order_but_not_content() {
        let a = projects(BASE);
        let b = projects(
            r#"{ "config": [ { "pools": ["0x00000000000000000000000000000000000000AA",
                "0x00000000000000000000000000000000000000bb"], "per_pool": true,
                "processor": {"class_name": "C", "module": "m"}, "project_type": "baseSnapshot" } ] }"#,
        );
        assert_eq!(a.identity(), b.identity());
        assert_eq!(a.identity().pools, 2);
        // A pool in another case sorts otherwise in the assignment rule:
        // another market.
        let upper = projects(&BASE.replace("00bb", "00BB"));
        assert_ne!(a.identity().pools_hash, upper.identity().pools_hash);
        assert_eq!(a.pools()[0], "0x00000000000000000000000000000000000000AA", "as written");
        let c = projects(&BASE.replace("\"C\"", "\"D\""));
        assert_ne!(a.identity().hash, c.identity().hash);
        assert_eq!(a.identity().pools_hash, c.identity().pools_hash);
    }

    #[test]
    fn each_difference_is_named() {
        let ours = projects(BASE);
        let m = market(&ours);
        assert_eq!(m.check_projects(&ours.identity()), Ok(()));
        let other = projects(&BASE.replace("baseSnapshot", "blockDetails"));
        let e = m.check_projects(&other.identity()).unwrap_err();
        assert!(e.contains("missing here: baseSnapshot") && e.contains("not the market's: blockDetails"), "{e}");
        let fewer = projects(&BASE.replace(",\"0x00000000000000000000000000000000000000bb\"", ""));
        let e = m.check_projects(&fewer.identity()).unwrap_err();
        assert!(e.contains("1 pool(s) here") && e.contains("2 in the market"), "{e}");
        let settings = projects(&BASE.replace("\"C\"", "\"D\""));
        let e = m.check_projects(&settings.identity()).unwrap_err();
        assert!(e.contains("other settings"), "{e}");
        assert!(MarketIdentity::default().check_projects(&other.identity()).is_ok());
    }

    #[test]
    fn malformed_variables_are_named() {
        let env = EnvSnapshot::from_pairs([("MARKET_PROJECTS_HASH", "0x12"), ("MARKET_POOLS", "many")]);
        let e = MarketIdentity::from_env(&env).unwrap_err();
        assert!(e.problems.iter().any(|p| p.starts_with("MARKET_PROJECTS_HASH=0x12")), "{e:?}");
        assert!(e.problems.iter().any(|p| p.starts_with("MARKET_POOLS=many")), "{e:?}");
        let c = "ab".repeat(20);
        let env = EnvSnapshot::from_pairs([("MARKET_COMPUTE_COMMIT", c.as_str())]);
        let m = MarketIdentity::from_env(&env).unwrap();
        assert!(m.is_set() && m.check_compute(&c).is_ok());
        assert!(m.check_compute(&"cd".repeat(20)).unwrap_err().contains("MARKET_COMPUTE_COMMIT"));
    }
}
