//! projects.json (Powerloom schema, docs/protocol.md §8) → checked projects.
//!
//! `processor.module` names a library of the compute package and
//! `processor.class_name` a processor it exports. Keys of an entry besides
//! `project_type`, `processor` and `preload_tasks` are the processor's
//! settings, handed to it as a JSON object.

use std::path::Path;

use serde_json::{Map, Value};

use super::ConfigErrors;

/// Preload tasks the runtime knows how to run before computes are called.
pub const PRELOAD_TASKS: &[&str] = &["block_details"];

/// One checked entry of projects.json.
#[derive(Clone, Debug, PartialEq)]
pub struct Project {
    pub project_type: String,
    /// Library name in the compute package, hyphens normalized to underscores.
    pub module: String,
    pub class_name: String,
    pub preload_tasks: Vec<String>,
    /// Whether its projects are one per pool (`true`: each project id names
    /// a pool) or one for the market (`false`: none does); `None`: not
    /// declared, and the market takes either (docs/protocol.md §3).
    pub per_pool: Option<bool>,
    /// The entry's other keys.
    pub settings: Map<String, Value>,
}

/// All projects, in file order.
#[derive(Clone, Debug, PartialEq)]
pub struct Projects {
    pub projects: Vec<Project>,
    /// The file's content hash ([`crate::ProjectsIdentity::hash`]).
    pub hash: String,
}

impl Projects {
    pub fn load(path: &Path) -> Result<Self, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors::one(format!(
                "cannot read projects file {}: {e} (set PROJECTS_CONFIG to its path)",
                path.display()
            ))
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and checks `text`; `name` is how errors refer to the file.
    pub fn parse(text: &str, name: &str) -> Result<Self, ConfigErrors> {
        let root: Value = serde_json::from_str(text).map_err(|e| {
            ConfigErrors::one(format!("{name}:{}:{}: invalid JSON: {}", e.line(), e.column(), strip_position(&e)))
        })?;
        let mut problems = Vec::new();
        let mut projects = Vec::new();
        let entries = match root.get("config") {
            Some(Value::Array(entries)) => entries.as_slice(),
            Some(_) => {
                problems.push(format!("{name}: `config` must be an array of projects"));
                &[]
            }
            None => {
                problems.push(format!("{name}: missing `config`, the array of projects"));
                &[]
            }
        };
        if problems.is_empty() && entries.is_empty() {
            problems.push(format!("{name}: `config` is empty; the node would have nothing to compute"));
        }
        for (i, entry) in entries.iter().enumerate() {
            if let Some(p) = check_entry(&format!("config[{i}]"), entry, name, &mut problems) {
                projects.push((i, p));
            }
        }
        for (n, (i, p)) in projects.iter().enumerate() {
            if let Some((j, _)) = projects[..n].iter().find(|(_, q)| q.project_type == p.project_type) {
                problems.push(format!(
                    "{name}: config[{j}] and config[{i}] both have project_type `{}`; project types must be unique",
                    p.project_type
                ));
            }
        }
        if problems.is_empty() {
            Ok(Self {
                projects: projects.into_iter().map(|(_, p)| p).collect(),
                hash: crate::identity::content_hash(&root),
            })
        } else {
            Err(ConfigErrors { problems })
        }
    }
}

fn check_entry(at: &str, entry: &Value, name: &str, problems: &mut Vec<String>) -> Option<Project> {
    let Value::Object(fields) = entry else {
        problems.push(format!("{name}: {at} must be an object"));
        return None;
    };
    let before = problems.len();
    let mut string_at = |value: Option<&Value>, path: String, what: &str| -> String {
        match value {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
            Some(_) => {
                problems.push(format!("{name}: {path} must be a non-empty string ({what})"));
                String::new()
            }
            None => {
                problems.push(format!("{name}: {path} is missing ({what})"));
                String::new()
            }
        }
    };
    let project_type = string_at(fields.get("project_type"), format!("{at}.project_type"), "the project's type");
    let (module, class_name) = match fields.get("processor") {
        Some(Value::Object(p)) => (
            string_at(p.get("module"), format!("{at}.processor.module"), "a library of the compute package"),
            string_at(p.get("class_name"), format!("{at}.processor.class_name"), "a processor that library exports"),
        ),
        Some(_) => {
            problems.push(format!("{name}: {at}.processor must be an object with `module` and `class_name`"));
            (String::new(), String::new())
        }
        None => {
            problems.push(format!("{name}: {at}.processor is missing (an object with `module` and `class_name`)"));
            (String::new(), String::new())
        }
    };
    if project_type.contains([':', ' ']) {
        problems.push(format!("{name}: {at}.project_type must not contain ':' or spaces: it starts every project id"));
    }
    let mut preload_tasks = Vec::new();
    match fields.get("preload_tasks") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tasks)) => {
            for (k, t) in tasks.iter().enumerate() {
                match t.as_str() {
                    Some(t) if PRELOAD_TASKS.contains(&t) => preload_tasks.push(t.to_owned()),
                    _ => problems.push(format!(
                        "{name}: {at}.preload_tasks[{k}] is {t}; known preload tasks: {}",
                        PRELOAD_TASKS.join(", ")
                    )),
                }
            }
        }
        Some(_) => problems.push(format!("{name}: {at}.preload_tasks must be an array of strings")),
    }
    let per_pool = match fields.get("per_pool") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => {
            problems.push(format!(
                "{name}: {at}.per_pool must be true (each project id names a pool) or false (none does)"
            ));
            None
        }
    };
    let settings: Map<String, Value> = fields
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "project_type" | "processor" | "preload_tasks" | "per_pool"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (problems.len() == before).then(|| Project {
        project_type,
        module: module.replace('-', "_"),
        class_name,
        preload_tasks,
        per_pool,
        settings,
    })
}

/// serde_json appends " at line L column C"; we print the position first.
fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        Projects::parse(text, "projects.json").unwrap_err().problems
    }

    #[test]
    fn reference_shaped_file_parses_with_settings() {
        let p = Projects::parse(
            r#"{"config": [{"project_type": "baseSnapshot",
                "processor": {"module": "bds-uniswapv3", "class_name": "BaseSnapshotProcessor"},
                "preload_tasks": ["block_details"], "full_node": true}]}"#,
            "projects.json",
        )
        .unwrap();
        let p = &p.projects[0];
        assert_eq!(p.module, "bds_uniswapv3");
        assert_eq!(p.preload_tasks, ["block_details"]);
        assert_eq!(p.settings.get("full_node"), Some(&Value::Bool(true)));
    }

    /// `per_pool` is a declaration of the market's, not a setting: read as
    /// a bool, kept out of the processor's settings, and anything else named.
    #[test]
    fn per_pool_is_declared_apart_from_the_settings() {
        let p = Projects::parse(
            r#"{"config": [{"project_type": "a", "processor": {"module": "m", "class_name": "A"}, "per_pool": true},
                           {"project_type": "b", "processor": {"module": "m", "class_name": "B"}, "per_pool": false},
                           {"project_type": "c", "processor": {"module": "m", "class_name": "C"}}]}"#,
            "projects.json",
        )
        .unwrap();
        let declared: Vec<Option<bool>> = p.projects.iter().map(|p| p.per_pool).collect();
        assert_eq!(declared, [Some(true), Some(false), None]);
        assert!(p.projects.iter().all(|p| !p.settings.contains_key("per_pool")));
        let e = errors(
            r#"{"config": [{"project_type": "a", "processor": {"module": "m", "class_name": "A"}, "per_pool": "yes"}]}"#,
        );
        assert!(e[0].contains("config[0].per_pool must be true"), "{e:?}");
    }

    #[test]
    fn syntax_error_names_file_line_and_column() {
        let e = errors("{\"config\": [\n  {\"project_type\": \"a\",}\n]}");
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("projects.json:2:"), "{e:?}");
    }

    #[test]
    fn schema_errors_name_their_path_all_at_once() {
        let e = errors(
            r#"{"config": [
                {"project_type": "a", "processor": {"module": "m", "class_name": "A"}},
                {"project_type": "b", "processor": {"module": "m"}},
                {"project_type": 3, "processor": {"module": "m", "class_name": "C"}, "preload_tasks": ["eth_price"]}
            ]}"#,
        );
        let all = e.join("\n");
        assert!(all.contains("config[1].processor.class_name is missing"), "{all}");
        assert!(all.contains("config[2].project_type must be a non-empty string"), "{all}");
        assert!(all.contains("config[2].preload_tasks[0]"), "{all}");
        assert_eq!(e.len(), 3, "{all}");
    }

    #[test]
    fn duplicate_project_types_name_both_entries() {
        let e = errors(
            r#"{"config": [
                {"project_type": "a", "processor": {"module": "m", "class_name": "A"}},
                {"project_type": "b", "processor": {"module": "m", "class_name": "B"}},
                {"project_type": "a", "processor": {"module": "m", "class_name": "C"}}
            ]}"#,
        );
        assert_eq!(e.len(), 1);
        assert!(e[0].contains("config[0] and config[2] both have project_type `a`"), "{e:?}");
    }

    #[test]
    fn missing_or_empty_config_is_an_error() {
        assert!(errors("{}")[0].contains("missing `config`"));
        assert!(errors(r#"{"config": []}"#)[0].contains("is empty"));
        assert!(errors(r#"{"config": {}}"#)[0].contains("must be an array"));
    }
}
