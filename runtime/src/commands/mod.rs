//! The command-line verbs, as library functions that take an environment
//! (and a writer for their report), so tests call them as `main` does.
//! One file per verb; the long-running ones (`run`, `collector`, `validator`, `devnet`)
//! build their own tokio runtime here.

mod alert;
mod assignments;
mod check;
mod collector;
mod compute;
mod compute_run;
mod devnet;
mod finalized;
mod market;
mod run;
mod validator;

pub use alert::alert_test;
pub use assignments::{AssignmentQuery, assignments, pool_list};
pub use check::check;
pub use collector::{CollectorOptions, collector, peer_id};
pub use compute::{compute_new, compute_show, print_package};
pub use compute_run::{ComputeRunFailed, EpochQuery, compute_run};
pub use devnet::devnet;
pub use finalized::{FinalizedQuery, finalized};
pub use lite_node_validator::service::Component;
pub use market::{
    DeployOptions, Manifest, MarketAccess, ReleaseOptions, Role, RolesVerb, SlotsVerb, ValidatorsVerb, market_days,
    market_deploy, market_env, market_peers, market_release, market_roles, market_slots, market_status,
    market_validators,
};
pub use run::run;
pub use validator::{ValidatorOptions, validator};

/// The data market a collector or validator serves, as its flags give it.
#[derive(Clone, Debug)]
pub struct MarketOptions {
    pub anchor_rpc: String,
    pub protocol_state: String,
    pub data_market: String,
    /// Where the epochs' seed blocks are read (default: the anchor).
    pub source_rpc: Option<String>,
    pub pools: Vec<String>,
    pub pools_file: Option<std::path::PathBuf>,
}

impl MarketOptions {
    /// ProtocolState and the data market, each named by its flag when it is
    /// not an address.
    pub fn scope(&self) -> Result<lite_node_protocol::submission::Scope, crate::exit::BadInput> {
        let address = |what: &str, text: &str| {
            text.parse()
                .map_err(|_| crate::exit::BadInput(format!("--{what} {text} is not an address (0x and 40 hex digits)")))
        };
        Ok(lite_node_protocol::submission::Scope {
            protocol_state: address("protocol-state", &self.protocol_state)?,
            data_market: address("data-market", &self.data_market)?,
        })
    }

    /// The active pools of `--pools` and `--pools-file`, each an address.
    pub fn pools(&self) -> anyhow::Result<Vec<String>> {
        let pools = pool_list(&self.pools, self.pools_file.as_deref())?;
        let bad: Vec<&String> = pools.iter().filter(|p| !lite_node_protocol::is_address(p)).collect();
        if !bad.is_empty() {
            let from = if self.pools_file.is_some() { "--pools / --pools-file" } else { "--pools" };
            anyhow::bail!(crate::exit::BadInput(format!(
                "{from}: {} not a pool address (0x and 40 hex digits): {}",
                if bad.len() == 1 { "is" } else { "are" },
                bad.iter().take(5).map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
            )));
        }
        Ok(pools)
    }

    /// The anchor and source chains the flags name, with the environment's
    /// `LITE_NODE_RPC_TIMEOUT_SECS`.
    pub fn chain_config(&self, env: &crate::config::EnvSnapshot) -> anyhow::Result<crate::config::ChainConfig> {
        let scope = self.scope()?;
        Ok(crate::config::ChainConfig::from_flags(
            &self.anchor_rpc,
            self.source_rpc.as_deref(),
            scope.protocol_state,
            scope.data_market,
            env,
        )?)
    }

    /// Those chains, connected the one way every verb connects (`Chains::connect`).
    pub fn chains(&self, env: &crate::config::EnvSnapshot) -> anyhow::Result<crate::chain::Chains> {
        Ok(crate::chain::Chains::connect(&self.chain_config(env)?).map_err(crate::exit::BadInput)?)
    }
}
