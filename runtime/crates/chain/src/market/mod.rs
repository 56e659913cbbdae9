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
use lite_node_protocol::contracts::{epochsPerDayCall, setEpochsPerDayCall};
use serde::{Deserialize, Serialize};

use crate::{Receipt, TxSender};

mod handle;

pub use handle::{LOG_SPAN, LOG_SPANS, Market, chain_id, check_not_reset, connect, shown};

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
    /// That block's hash: a chain reset (same id, the contract at the same
    /// address again) is told from the market it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy_block_hash: Option<B256>,
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
    /// The market's validators' window, in anchor blocks after a release
    /// (their `--window-blocks`): what the operators' collectors refuse
    /// submissions after (`WINDOW_BLOCKS` in `market env`). `None`: the
    /// protocol's 130.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_blocks: Option<u64>,
    /// What the market takes of a submission's snapshot bytes (the
    /// validators' and collectors' `--require-snapshot` and
    /// `--max-snapshot-bytes`; `REQUIRE_SNAPSHOT`, `MAX_SNAPSHOT_BYTES` in
    /// `market env`). `None`: not required, the protocol's largest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<SnapshotTerms>,
    /// Whether the validators store each finalized epoch's (project, CID)
    /// pairs on chain after its root (their `--pairs-on-chain`;
    /// `PAIRS_ON_CHAIN` in `market env`). `false`: roots only, an epoch costs
    /// the same gas at any size, and its pairs are read from [`Manifest::data_apis`].
    /// `None`: true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs_on_chain: Option<bool>,
    /// The market's validators' data APIs (`DATA_API_URLS` in `market
    /// env`): where consumers, and the nodes of a market that finalizes roots
    /// only, read its data; set with `market peers --apis`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_apis: Vec<String>,
    /// The market's compute package, pinned (`SNAPSHOTTER_COMPUTE_REPO`,
    /// `_BRANCH`, `_COMMIT`, `_PATH` in `market env`); set with `market pin`.
    /// `None`: each node's lite-node runs the package bundled with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<PackagePin>,
    /// The market's projects.json, pinned, and what identifies it
    /// (`SNAPSHOT_CONFIG_REPO`…, `PROJECTS_CONFIG`, `MARKET_PROJECTS_HASH`…
    /// in `market env`); set with `market pin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projects: Option<ProjectsPin>,
}

/// A git repository at one commit, as the node fetches it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PackagePin {
    pub repo: String,
    pub branch: String,
    /// 40 hex digits.
    pub commit: String,
    /// The compute workspace's directory inside the repository (its root
    /// when `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// [`Manifest::projects`]: where the file is published and what identifies
/// it (`lite_node_config::ProjectsIdentity`), so a node, collector or
/// validator with other projects is refused before it computes or judges.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProjectsPin {
    pub repo: String,
    pub branch: String,
    /// 40 hex digits.
    pub commit: String,
    /// projects.json's path inside the repository.
    pub path: String,
    /// The file's content hash.
    pub hash: String,
    /// Its project types, in file order.
    pub types: Vec<String>,
    /// How many distinct pools its projects name, and their hash.
    pub pools: usize,
    pub pools_hash: String,
}

/// [`Manifest::snapshots`].
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotTerms {
    /// A submission without its snapshot's bytes is refused (`missing_bytes`).
    pub required: bool,
    /// The largest snapshot a submission may carry (`too_large` past it).
    pub max_bytes: u64,
}

impl Default for SnapshotTerms {
    fn default() -> Self {
        Self { required: false, max_bytes: lite_node_protocol::submission::caps::SNAPSHOT as u64 }
    }
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
    pub block_hash: Option<B256>,
    pub transaction: B256,
}

/// A deployment sent and not yet recorded in its manifest: kept beside the
/// manifest's path (`<path>.deploying`) from before the transaction is sent
/// until the manifest is written, so a deploy run again after a failure
/// (a receipt that could not be read, a kill) waits for that transaction
/// instead of deploying a second contract.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PendingDeploy {
    pub chain_id: u64,
    pub deployer: Address,
    pub transaction: B256,
    /// The keccak-256 of what was deployed (the creation code and its
    /// arguments): a record of another contract is not resumed.
    #[serde(default)]
    pub code_hash: B256,
}

impl PendingDeploy {
    /// Where the deployment for the manifest at `manifest` is recorded.
    pub fn path(manifest: &Path) -> std::path::PathBuf {
        let mut name = manifest.as_os_str().to_owned();
        name.push(".deploying");
        name.into()
    }

    /// The deployment recorded for `manifest`, if any; one that is not
    /// readable is bad input naming the file.
    pub fn load(manifest: &Path) -> anyhow::Result<Option<Self>> {
        let path = Self::path(manifest);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(serde_json::from_str(&text).map_err(|e| {
                BadInput(format!("{}: not a deployment record ({e}): move it away to deploy anew", path.display()))
            })?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(BadInput(format!("{}: {e}", path.display())).into()),
        }
    }
}

/// Deploys ProtocolState from `creation_code` (its constructor's arguments
/// appended) with `sender`'s key, and sets the market's epochs per day;
/// `data_market` defaults to the contract's address. Each step is said
/// through `say`, every transaction's hash before it is waited for.
///
/// With `record` (the manifest's path), the deployment is recorded
/// ([`PendingDeploy`]) before it is sent, and one recorded by an earlier run
/// on this chain from this key is waited for instead of sent again; the
/// caller removes the record once the manifest is written.
pub async fn deploy(
    sender: &TxSender,
    creation_code: Bytes,
    data_market: Option<Address>,
    epochs_per_day: Option<u64>,
    record: Option<&Path>,
    say: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<Deployed> {
    let pending = match record {
        Some(manifest) => PendingDeploy::load(manifest)?,
        None => None,
    };
    let earlier = match pending {
        Some(p) if p.chain_id != sender.chain_id() || p.deployer != sender.address() => {
            anyhow::bail!(BadInput(format!(
                "{}: a deployment from {} on chain {} is recorded there; this one is from {} on chain {}: \
                 move the record away (or give another --out) to deploy anew",
                PendingDeploy::path(record.unwrap_or(Path::new(""))).display(),
                p.deployer,
                p.chain_id,
                sender.address(),
                sender.chain_id()
            )));
        }
        Some(p) if p.code_hash != alloy::primitives::keccak256(&creation_code) => {
            anyhow::bail!(BadInput(format!(
                "{}: the deployment recorded there ({}) is of other creation code than this one (another \
                 lite-node, or other arguments): move the record away to deploy anew",
                PendingDeploy::path(record.unwrap_or(Path::new(""))).display(),
                p.transaction
            )));
        }
        Some(p) => match sender.receipt(p.transaction).await {
            // Reverted: its nonce is used, so a new deployment is the only one.
            Ok(Some(r)) if !r.success => {
                say(format!(
                    "the deployment recorded earlier ({}) reverted when mined: deploying again",
                    p.transaction
                ));
                None
            }
            Ok(Some(_)) => Some(p.transaction),
            _ if sender.known(p.transaction).await.unwrap_or(true) => Some(p.transaction),
            // Never mined and unknown to the chain: dropped; a new one
            // takes its nonce, so at most one of them is ever mined.
            _ => {
                say(format!("the deployment recorded earlier ({}) was dropped: deploying again", p.transaction));
                None
            }
        },
        None => None,
    };
    let hash = match earlier {
        Some(hash) => {
            say(format!("resuming the deployment sent earlier: transaction {hash}"));
            hash
        }
        None => {
            let code_hash = alloy::primitives::keccak256(&creation_code);
            let tx = sender
                .prepare_deploy(creation_code)
                .await
                .map_err(|e| refused(sender, "deploying ProtocolState", e))?;
            if let Some(manifest) = record {
                let pending = PendingDeploy {
                    chain_id: sender.chain_id(),
                    deployer: sender.address(),
                    transaction: tx.hash,
                    code_hash,
                };
                let path = PendingDeploy::path(manifest);
                lite_node_core::atomic_file::write_durable(
                    &path,
                    (serde_json::to_string_pretty(&pending)? + "\n").as_bytes(),
                )
                .map_err(|e| anyhow::anyhow!("recording the deployment in {}: {e}", path.display()))?;
            }
            sender.broadcast(&tx).await.map_err(|e| refused(sender, "deploying ProtocolState", e))?;
            say(format!("deployment sent: transaction {}", tx.hash));
            tx.hash
        }
    };
    let receipt = mined(sender, hash, "the deployment").await.map_err(|e| match record {
        Some(manifest) => e.context(format!(
            "the deployment is recorded in {}: run deploy again to wait for it once more",
            PendingDeploy::path(manifest).display()
        )),
        None => e,
    })?;
    let protocol_state =
        receipt.contract_address.ok_or_else(|| anyhow::anyhow!("the deployment's receipt names no contract"))?;
    say(format!("ProtocolState at {protocol_state} (block {}, transaction {hash})", receipt.block_number));
    let data_market = data_market.unwrap_or(protocol_state);
    if let Some(n) = epochs_per_day {
        let set = sender
            .rpc()
            .view(protocol_state, &epochsPerDayCall { dataMarketAddress: data_market })
            .await
            .map_err(|e| anyhow::anyhow!("reading the epochs per day: {e}"))?;
        if set != U256::from(n) {
            let call = setEpochsPerDayCall { dataMarketAddress: data_market, n: U256::from(n) };
            let hash = sender
                .send(protocol_state, call.abi_encode().into())
                .await
                .map_err(|e| anyhow::anyhow!("setting epochs per day: {e}"))?;
            say(format!("setEpochsPerDay sent: transaction {hash}"));
            mined(sender, hash, "setEpochsPerDay").await?;
        }
        say(format!("days of {n} epochs"));
    }
    let block_hash = match sender.rpc().block_hash(receipt.block_number).await {
        Ok(Some(hash)) => Some(hash),
        other => {
            let why = other.err().map_or_else(|| "not found".to_owned(), |e| e.to_string());
            say(format!(
                "the deployment's block {} could not be read ({why}): the manifest records no block hash, so a \
                 reset of the chain will not be told from the market",
                receipt.block_number
            ));
            None
        }
    };
    Ok(Deployed {
        protocol_state,
        data_market,
        deployer: sender.address(),
        block: receipt.block_number,
        block_hash,
        transaction: hash,
    })
}

/// Whether a node's refusal says the sender cannot pay for the gas, in the
/// words of geth, reth, erigon and nethermind (`insufficient funds…`),
/// anvil (`Insufficient funds…`, `OutOfFunds`), ganache (`sender doesn't
/// have enough funds…`) or besu (`Upfront cost exceeds account balance`).
fn unfunded(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "insufficient funds",
        "outoffunds",
        "out of funds",
        "enough funds",
        "exceeds account balance",
        "insufficient balance",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// A transaction the chain would not take, said in its words: a revert or
/// a sender without funds for gas is bad input (exit 2), anything else an
/// error of the RPC.
pub fn refused(sender: &TxSender, what: &str, e: crate::TxError) -> anyhow::Error {
    match e {
        crate::TxError::Reverted(why) => {
            BadInput(format!("{what}: ProtocolState refuses it from {}: {why}", sender.address())).into()
        }
        crate::TxError::Rpc(e) if unfunded(&e.message) => BadInput(format!(
            "{what}: {} has no funds for gas on chain {} ({}): fund it and run this again",
            sender.address(),
            sender.chain_id(),
            e.message
        ))
        .into(),
        e => anyhow::anyhow!("{what}: {e}"),
    }
}

/// The receipt of `hash` once mined (a line on stderr every 15 s while it
/// waits); an error naming the transaction if it reverted or is not mined
/// within [`MINED_WITHIN`]. A receipt that cannot be read is asked again
/// until then: the transaction was sent, and sending it again is not the
/// answer.
pub async fn mined(sender: &TxSender, hash: B256, what: &str) -> anyhow::Result<Receipt> {
    let started = tokio::time::Instant::now();
    let mut said = started;
    let mut last_error = None;
    loop {
        match sender.receipt(hash).await {
            Ok(Some(receipt)) if !receipt.success => anyhow::bail!("{what}: transaction {hash} reverted when mined"),
            Ok(Some(receipt)) => return Ok(receipt),
            Ok(None) => {}
            Err(e) => last_error = Some(e.message.to_string()),
        }
        if started.elapsed() > MINED_WITHIN {
            let why = match last_error {
                Some(e) => format!("its receipt could not be read ({e})"),
                None => "not mined".to_owned(),
            };
            anyhow::bail!(
                "{what}: transaction {hash} was sent, but {why} after {} s: look it up before sending it again",
                MINED_WITHIN.as_secs()
            );
        }
        if said.elapsed() > Duration::from_secs(15) {
            match &last_error {
                Some(e) => eprintln!("waiting for {what} (transaction {hash}); its receipt: {e}"),
                None => eprintln!("waiting for {what} (transaction {hash}) to be mined"),
            }
            said = tokio::time::Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 55, item 11: an unfunded key is named whatever the client's words.
    #[test]
    fn each_clients_words_for_an_unfunded_sender_are_read() {
        for m in [
            "insufficient funds for gas * price + value: address 0x… have 0 want 21000",
            "Insufficient funds for gas * price + value",
            "sender doesn't have enough funds to send tx. The upfront cost is: 1 and the sender's account only has: 0",
            "Upfront cost exceeds account balance",
            "OutOfFunds",
        ] {
            assert!(unfunded(m), "{m}");
        }
        assert!(!unfunded("nonce too low"));
    }
}
