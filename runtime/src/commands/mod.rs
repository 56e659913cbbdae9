//! The command-line verbs. Each verb is one module that owns its clap
//! arguments (`Args`, or a subcommand enum for a verb with sub-verbs) and
//! runs them with a `run` function over the crates that do the work;
//! `main.rs` assembles the command tree from them. The long-running verbs
//! (`run`, `collector`, `validator`, `devnet`, `market release`) build their
//! own tokio runtime; the others a current-thread one when they need one.

pub mod alert;
pub mod archive;
pub mod assignments;
pub mod check;
pub mod collector;
pub mod compute;
pub mod devnet;
pub mod finalized;
pub mod market;
pub mod peer_id;
pub mod read;
pub mod run;
pub mod validator;

/// The market a reader asks about, by flags or from the environment an
/// operator's `.env` sets (flattened into `finalized` and `read`).
#[derive(Clone, Debug, clap::Args)]
pub struct ReaderArgs {
    /// Anchor chain JSON-RPC URL (default: POWERLOOM_RPC_URL).
    #[arg(long, value_name = "URL")]
    pub anchor_rpc: Option<String>,
    /// ProtocolState address (default: PROTOCOL_STATE_CONTRACT).
    #[arg(long, value_name = "ADDRESS")]
    pub protocol_state: Option<String>,
    /// Data market address (default: DATA_MARKET_CONTRACT).
    #[arg(long, value_name = "ADDRESS")]
    pub data_market: Option<String>,
}

impl ReaderArgs {
    /// The anchor's configuration, ProtocolState and the data market; one
    /// missing or not an address is exit 2 naming its flag and variable.
    pub fn resolve(
        &self,
        env: &crate::config::EnvSnapshot,
        verb: &str,
    ) -> anyhow::Result<(lite_node_config::ChainConfig, alloy::primitives::Address, alloy::primitives::Address)> {
        use crate::exit::BadInput;
        let pick = |flag: &Option<String>, name: &str, var: &str| -> anyhow::Result<String> {
            flag.clone().or_else(|| env.get(var).map(str::to_owned)).ok_or_else(|| {
                BadInput(format!("give --{name}, or set {var} (e.g. lite-node --env-file .env {verb} …)")).into()
            })
        };
        let anchor_rpc = pick(&self.anchor_rpc, "anchor-rpc", "POWERLOOM_RPC_URL")?;
        let address = |name: &str, text: String| -> anyhow::Result<alloy::primitives::Address> {
            text.trim().parse().map_err(|_| BadInput(format!("--{name} {text}: not an address")).into())
        };
        let protocol_state =
            address("protocol-state", pick(&self.protocol_state, "protocol-state", "PROTOCOL_STATE_CONTRACT")?)?;
        let data_market = address("data-market", pick(&self.data_market, "data-market", "DATA_MARKET_CONTRACT")?)?;
        let cfg = lite_node_config::ChainConfig::from_flags(&anchor_rpc, None, protocol_state, data_market, env)?;
        Ok((cfg, protocol_state, data_market))
    }
}

/// `projects` (and the compute package's `commit`, when loaded) against the
/// market's identity the environment names (`MARKET_*`, from `market env`):
/// a collector or validator with other ones is refused, naming the
/// difference (exit 2).
pub fn check_identity(
    env: &crate::config::EnvSnapshot,
    projects: &crate::config::Projects,
    commit: Option<&str>,
) -> anyhow::Result<()> {
    let market = crate::config::MarketIdentity::from_env(env)?;
    market.check_projects(&projects.identity()).map_err(crate::exit::BadInput)?;
    if let Some(commit) = commit {
        market.check_compute(commit).map_err(crate::exit::BadInput)?;
    }
    Ok(())
}

/// The data market a collector or validator serves (flattened into both
/// verbs' arguments).
#[derive(Clone, Debug, clap::Args)]
pub struct MarketArgs {
    /// Anchor chain JSON-RPC URL(s), comma-separated.
    #[arg(long, value_name = "URL")]
    pub anchor_rpc: String,
    /// ProtocolState contract address.
    #[arg(long, value_name = "ADDRESS")]
    pub protocol_state: String,
    /// Data market contract address.
    #[arg(long, value_name = "ADDRESS")]
    pub data_market: String,
    /// Source chain JSON-RPC URL(s) for the epochs' seed blocks (default: the
    /// anchor's, over HTTP when it is a WebSocket).
    #[arg(long, value_name = "URL")]
    pub source_rpc: Option<String>,
    /// The data market's active pools, comma-separated: the selection check,
    /// with the configured compute package's assignment rule (a validator's
    /// dequeuer needs it; without it a collector does not check selection).
    #[arg(long, value_name = "P1,P2,…", value_delimiter = ',')]
    pub pools: Vec<String>,
    /// A file with one active pool address per line (as --pools).
    #[arg(long, value_name = "F")]
    pub pools_file: Option<std::path::PathBuf>,
}

impl MarketArgs {
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
        let pools = assignments::pool_list(&self.pools, self.pools_file.as_deref())?;
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

/// What a market takes of a submission's snapshot bytes: the same flags for
/// the validator, the collector and `market deploy` (which writes them in
/// the manifest).
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct SnapshotArgs {
    /// Refuse a submission that does not carry its snapshot's bytes
    /// (`missing_bytes`); without it, one that carries none is judged by
    /// its CID alone. Carried bytes are always checked against the CID and
    /// the canonical JSON form before anything is stored or relayed.
    #[arg(long, value_name = "true|false", num_args = 0..=1, default_value_t = false,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub require_snapshot: bool,
    /// The largest snapshot a submission may carry (`too_large` past it).
    #[arg(long, value_name = "BYTES", default_value_t = lite_node_protocol::submission::caps::SNAPSHOT as u64,
          value_parser = clap::value_parser!(u64).range(1..=lite_node_protocol::submission::caps::SNAPSHOT as u64))]
    pub max_snapshot_bytes: u64,
}

impl SnapshotArgs {
    /// The rule the collector and the validator check by.
    pub fn rule(&self) -> lite_node_protocol::submission::SnapshotRule {
        lite_node_protocol::submission::SnapshotRule {
            required: self.require_snapshot,
            max_bytes: usize::try_from(self.max_snapshot_bytes).unwrap_or(usize::MAX),
        }
    }
}
