//! Everything the node is told from outside: environment variables and
//! projects.json, checked into types that cannot be invalid.
//!
//! This is the only crate that reads the process environment or parses the
//! projects file (its pinned repository is fetched by `lite_node_compute`). Each loader reports *every* problem it finds at once, as a
//! [`ConfigErrors`], which the command line maps to exit code 2.

mod alerts;
mod chains;
mod cluster;
mod drill;
mod env;
mod logs;
mod projects;
mod slots;

pub use alerts::{AlertConfig, BotConfig, alert_sender};
pub use chains::{AnchorConfig, ChainConfig};
pub use cluster::{ClusterAssign, ClusterSettings, Role};
pub use drill::Drill;
pub use env::{
    ComputeConfig, ComputeRunConfig, ComputeSource, EnvSnapshot, GitPin, IpfsConfig, MarketProjects, NodeConfig,
    NodeSlot, ProjectsSource, REQUIRED, SafetySettings, SecretKey, WatchSettings, WorkerConfig, cluster_name,
};
pub use lite_node_core::url::{parse_anchor_url, parse_rpc_url, redact_rpc_url, redact_url};
pub use logs::LogSettings;
pub use projects::{PRELOAD_TASKS, Project, Projects};
pub use slots::{MAX_SLOTS, SlotSigner, format_slot_ids, parse_slot_ids, read_signers_file};

use std::fmt;

/// One or more problems with the node's configuration, all reported together.
#[derive(Debug, thiserror::Error)]
pub struct ConfigErrors {
    pub problems: Vec<String>,
}

impl ConfigErrors {
    pub fn one(problem: impl Into<String>) -> Self {
        Self { problems: vec![problem.into()] }
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.problems.as_slice() {
            [one] => f.write_str(one),
            many => {
                write!(f, "{} configuration problems:", many.len())?;
                for p in many {
                    write!(f, "\n  - {p}")?;
                }
                Ok(())
            }
        }
    }
}
