//! How a process logs: `RUST_LOG` (the filter, default [`DEFAULT_FILTER`]) and
//! `LOG_FORMAT` (`text`, the default, or `json`: one object per line, for
//! operators who ship logs).

use crate::{ConfigErrors, EnvSnapshot};

/// `info`, but libp2p's swarm says only what went wrong: a line per gossip
/// peer started (its id, which its owner announces anyway) is noise in a
/// devnet of hundreds of operators' collectors.
pub const DEFAULT_FILTER: &str = "info,libp2p_swarm=warn";

/// The log settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    /// An `EnvFilter` directive (`RUST_LOG`, default `info`).
    pub filter: String,
    /// `LOG_FORMAT=json`.
    pub json: bool,
}

impl LogSettings {
    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let filter = env.get("RUST_LOG").unwrap_or(DEFAULT_FILTER).to_owned();
        let json = match env.get("LOG_FORMAT").map(str::to_ascii_lowercase).as_deref() {
            None | Some("text") => false,
            Some("json") => true,
            Some(other) => {
                return Err(ConfigErrors::one(format!(
                    "LOG_FORMAT={other} is not a log format: use text (the default) or json"
                )));
            }
        };
        Ok(Self { filter, json })
    }

    /// What a child process that logs to a file is given: at least `info`
    /// (its start-up is read from its log), or this filter when it asks for
    /// more (`debug`, `trace`).
    pub fn for_child_logs(&self) -> String {
        if self.filter.contains("debug") || self.filter.contains("trace") { self.filter.clone() } else { "info".into() }
    }
}
