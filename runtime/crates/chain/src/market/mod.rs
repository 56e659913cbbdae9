//! A data market as its operator acts on it, shared by the `lite-node
//! market` verbs and the devnet (which is those verbs automated): the
//! manifest a market is known by, ProtocolState deployed from its creation
//! code with a key, the epochs-per-day schedule set, each transaction
//! waited for; a market opened from its manifest ([`Market`]).

use std::{path::Path, time::Duration};

use alloy::{
    primitives::{Address, B256, Bytes, U256},
    sol_types::SolCall,
};
use lite_node_core::exit::BadInput;
use lite_node_protocol::contracts::setEpochsPerDayCall;
use serde::{Deserialize, Serialize};

use crate::{Receipt, TxSender};

mod handle;

pub use handle::{LOG_SPAN, LOG_SPANS, Market, chain_id, connect, shown};

/// How long a deployment's transactions may take to be mined.
pub const MINED_WITHIN: Duration = Duration::from_secs(180);

/// One chain of a market: its id and the endpoints to reach it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChainEntry {
    /// The name in the market's project namespace (`POWERLOOM_CHAIN`,
    /// `SOURCE_CHAIN`).
    pub name: String,
    pub chain_id: u64,
    pub rpcs: Vec<String>,
}

/// What `market deploy` writes and the other verbs read.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    /// The manifest's format (1).
    pub version: u32,
    /// Where ProtocolState lives and epochs are released.
    pub anchor: ChainEntry,
    /// Where the market's data (and each epoch's blocks) come from.
    pub source: ChainEntry,
    pub protocol_state: Address,
    /// The market's identity in ProtocolState (`dataMarketAddress`).
    pub data_market: Address,
    pub deployer: Address,
    /// The anchor block of the deployment: events are read from here.
    pub deploy_block: u64,
    /// Source-chain blocks per epoch.
    pub epoch_size: u64,
    /// Epochs per day (the contract starts days on this schedule), if set.
    pub epochs_per_day: Option<u64>,
    /// The namespace in the market's project ids.
    pub namespace: String,
    /// The market's validators' gossip addresses (`/ip4/…/tcp/…/p2p/<peer
    /// id>`), which an operator's collector publishes to (`VALIDATOR_PEERS`
    /// in `market env`); set with `market peers --set`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validator_peers: Vec<String>,
}

impl Manifest {
    /// Reads `path`; every problem names the file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BadInput(format!("{}: {e} (write one with `lite-node market deploy`)", path.display())))?;
        let manifest: Manifest = serde_json::from_str(&text)
            .map_err(|e| BadInput(format!("{}: not a market manifest: {e}", path.display())))?;
        if manifest.epoch_size == 0 {
            anyhow::bail!(BadInput(format!("{}: epochSize 0: an epoch is at least one block", path.display())));
        }
        if manifest.version != 1 {
            anyhow::bail!(BadInput(format!(
                "{}: manifest version {} (this lite-node reads version 1)",
                path.display(),
                manifest.version
            )));
        }
        Ok(manifest)
    }

    /// The project namespace (`POWERLOOM_CHAIN-NAMESPACE-SOURCE_CHAIN`).
    pub fn project_namespace(&self) -> String {
        format!("{}-{}-{}", self.anchor.name, self.namespace, self.source.name)
    }
}

/// A ProtocolState deployed: where, by whom, in which anchor block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deployed {
    pub protocol_state: Address,
    pub data_market: Address,
    pub deployer: Address,
    pub block: u64,
    pub transaction: B256,
}

/// Deploys ProtocolState from `creation_code` (its constructor's arguments
/// appended) with `sender`'s key, and sets the market's epochs per day;
/// `data_market` defaults to the contract's address. Each step is said
/// through `say`.
pub async fn deploy(
    sender: &TxSender,
    creation_code: Bytes,
    data_market: Option<Address>,
    epochs_per_day: Option<u64>,
    say: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<Deployed> {
    let hash = sender.deploy(creation_code).await.map_err(|e| anyhow::anyhow!("deploying ProtocolState: {e}"))?;
    let receipt = mined(sender, hash, "the deployment").await?;
    let protocol_state =
        receipt.contract_address.ok_or_else(|| anyhow::anyhow!("the deployment's receipt names no contract"))?;
    say(format!("ProtocolState at {protocol_state} (block {}, transaction {hash})", receipt.block_number));
    let data_market = data_market.unwrap_or(protocol_state);
    if let Some(n) = epochs_per_day {
        let call = setEpochsPerDayCall { dataMarketAddress: data_market, n: U256::from(n) };
        let hash = sender
            .send(protocol_state, call.abi_encode().into())
            .await
            .map_err(|e| anyhow::anyhow!("setting epochs per day: {e}"))?;
        mined(sender, hash, "setEpochsPerDay").await?;
        say(format!("days of {n} epochs"));
    }
    Ok(Deployed {
        protocol_state,
        data_market,
        deployer: sender.address(),
        block: receipt.block_number,
        transaction: hash,
    })
}

/// The receipt of `hash` once mined (a line on stderr every 15 s while it
/// waits); an error if it reverted or is not mined within [`MINED_WITHIN`].
pub async fn mined(sender: &TxSender, hash: B256, what: &str) -> anyhow::Result<Receipt> {
    let started = tokio::time::Instant::now();
    let mut said = started;
    loop {
        if let Some(receipt) = sender.receipt(hash).await.map_err(|e| anyhow::anyhow!("{what}: {}", e.message))? {
            if !receipt.success {
                anyhow::bail!("{what}: transaction {hash} reverted when mined");
            }
            return Ok(receipt);
        }
        if started.elapsed() > MINED_WITHIN {
            anyhow::bail!("{what}: transaction {hash} not mined after {} s", MINED_WITHIN.as_secs());
        }
        if said.elapsed() > Duration::from_secs(15) {
            eprintln!("waiting for {what} (transaction {hash}) to be mined");
            said = tokio::time::Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
