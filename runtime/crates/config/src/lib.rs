//! Everything the node is told from outside: environment variables and
//! projects.json, checked into types that cannot be invalid.
//!
//! This is the only crate that reads the process environment or parses the
//! projects file (its pinned repository is fetched by `lite_node_compute`). Each loader reports *every* problem it finds at once, as a
//! [`ConfigErrors`], which the command line maps to exit code 2.

mod alerts;
mod chains;
mod compute;
mod compute_run;
mod drill;
mod env;
mod full_node;
mod identity;
mod logs;
mod node;
mod projects;
mod secret;
mod slots;
mod watch;

pub use alerts::{AlertConfig, BotConfig, alert_sender};
pub use chains::{AnchorConfig, ChainConfig};
pub use compute::{ComputeConfig, ComputeSource, GitPin, MarketProjects, ProjectsSource, is_build_tree};
pub use compute_run::ComputeRunConfig;
pub use drill::Drill;
pub use env::{EnvSnapshot, REQUIRED};
pub use full_node::{ClusterAssign, ClusterSettings, Role, WorkerConfig, cluster_name};
pub use identity::{MarketIdentity, ProjectsIdentity, pools_hash};
pub use lite_node_core::url::{parse_anchor_url, parse_rpc_url, redact_rpc_url, redact_url};
pub use logs::LogSettings;
pub use node::{IpfsConfig, NodeConfig, NodeSlot};
pub use projects::{PRELOAD_TASKS, Project, Projects};
pub use secret::{KEYSTORE, KEYSTORE_PASSWORD, SecretKey};
pub use slots::{MAX_SLOTS, SlotSigner, format_slot_ids, parse_slot_ids, read_signers_file};
pub use watch::{SafetySettings, WatchSettings};

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
