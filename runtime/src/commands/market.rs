//! `lite-node market …`: a data market operator's verbs, against any EVM
//! chain. `deploy` puts the production ProtocolState (`contracts/out/`,
//! embedded in the binary) on the anchor chain with the deployer's key and
//! writes the market's manifest; `status` reads the market back through
//! the manifest. The key is read from a file, never from the command line
//! (where `ps` shows it), and never printed.

use std::{
    io::Write,
    path::{Path, PathBuf},
    time::Duration,
};

use alloy::{
    primitives::{Address, Bytes, U256},
    sol_types::SolCall,
};
use anyhow::{Context, Result, anyhow, bail};
use lite_node_chain::{HttpRpc, IoRuntime, TxSender};
use lite_node_protocol::contracts::{
    currentEpochIdCall, epochsPerDayCall, getFullNodesCall, getTotalNodeCountCall, getTotalValidatorsCountCall,
    getValidatorsCall, isRegistrarCall, isReleaserCall, lastReleasedEndCall, ownerCall, reassignSlotCall,
    registerSlotCall, removeSlotCall, setEpochsPerDayCall, setFullNodeCall, setRegistrarCall, setReleaserCall,
    slotSnapshotterMappingCall, storedCidsCall, transferOwnershipCall, updateAddressesCall,
};
use serde_json::{Value, json};

use crate::{config::SecretKey, exit::BadInput};

/// The production contract as the pinned solc compiled it (a test holds
/// the checked-in artifact to the sources).
const PROTOCOL_STATE: &str = include_str!("../../../contracts/out/ProtocolState.json");

use lite_node_chain::market::mined;
pub use lite_node_chain::market::{ChainEntry, Manifest};

/// What `lite-node market deploy` is given.
#[derive(Clone, Debug)]
pub struct DeployOptions {
    pub anchor_rpcs: Vec<String>,
    /// Default: the anchor's.
    pub source_rpcs: Vec<String>,
    pub key_file: PathBuf,
    pub epoch_size: u64,
    pub epochs_per_day: Option<u64>,
    pub namespace: String,
    /// The chains' names in project ids (default: `chain<id>` and `ETH`).
    pub anchor_name: Option<String>,
    pub source_name: String,
    /// Default: the deployed contract's address.
    pub data_market: Option<String>,
    pub out: PathBuf,
}

/// Deploys ProtocolState and writes the manifest to `o.out`.
pub fn market_deploy(o: &DeployOptions, out: &mut dyn Write) -> Result<()> {
    if o.out.exists() {
        bail!(BadInput(format!(
            "--out {}: a file is there (a market's manifest is never overwritten): move it, or give another path",
            o.out.display()
        )));
    }
    if o.epoch_size == 0 {
        bail!(BadInput("--epoch-size 0: an epoch is at least one block".into()));
    }
    if o.epochs_per_day == Some(0) {
        bail!(BadInput("--epochs-per-day 0: a day is at least one epoch".into()));
    }
    let word = |flag: &str, text: &str| -> Result<()> {
        if text.is_empty() || !text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!(BadInput(format!("{flag} `{text}`: letters, digits and `_` only (it is a part of project ids)")));
        }
        Ok(())
    };
    word("--namespace", &o.namespace)?;
    word("--source-chain", &o.source_name)?;
    if let Some(name) = &o.anchor_name {
        word("--anchor-chain", name)?;
    }
    let data_market = o
        .data_market
        .as_deref()
        .map(|t| t.parse::<Address>().map_err(|_| BadInput(format!("--data-market {t}: not an address"))))
        .transpose()?;
    let key = read_key(&o.key_file)?;
    let (anchor_rpcs, source_rpcs) =
        (o.anchor_rpcs.clone(), if o.source_rpcs.is_empty() { o.anchor_rpcs.clone() } else { o.source_rpcs.clone() });

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let manifest = runtime.block_on(async {
        let io = IoRuntime::new()?;
        let anchor = connect("anchor", &anchor_rpcs, &io)?;
        let source = connect("source", &source_rpcs, &io)?;
        let anchor_id = chain_id(&anchor, "--anchor-rpc", &anchor_rpcs).await?;
        let source_id = chain_id(&source, "--source-rpc", &source_rpcs).await?;
        let anchor = std::sync::Arc::new(anchor);
        let sender = TxSender::new(anchor.clone(), key.bytes(), anchor_id)
            .map_err(|e| BadInput(format!("--key-file {}: {e}", o.key_file.display())))?;
        writeln!(out, "deploying ProtocolState on chain {anchor_id} from {}", sender.address())?;
        let mut lines = Vec::new();
        let deployed = lite_node_chain::market::deploy(&sender, bytecode()?, data_market, o.epochs_per_day, &mut |l| {
            lines.push(l)
        })
        .await;
        for line in lines {
            writeln!(out, "{line}")?;
        }
        let deployed = deployed?;
        Ok::<_, anyhow::Error>(Manifest {
            version: 1,
            anchor: ChainEntry {
                name: o.anchor_name.clone().unwrap_or_else(|| format!("chain{anchor_id}")),
                chain_id: anchor_id,
                rpcs: anchor_rpcs,
            },
            source: ChainEntry { name: o.source_name.clone(), chain_id: source_id, rpcs: source_rpcs },
            protocol_state: deployed.protocol_state,
            data_market: deployed.data_market,
            deployer: deployed.deployer,
            deploy_block: deployed.block,
            epoch_size: o.epoch_size,
            epochs_per_day: o.epochs_per_day,
            namespace: o.namespace.clone(),
            validator_peers: Vec::new(),
        })
    })?;
    let text = serde_json::to_string_pretty(&manifest)? + "\n";
    lite_node_core::atomic_file::write_durable(&o.out, text.as_bytes())
        .with_context(|| format!("writing the manifest to {}", o.out.display()))?;
    writeln!(
        out,
        "market {} (namespace {}): manifest written to {}",
        manifest.data_market,
        manifest.namespace,
        o.out.display()
    )?;
    Ok(())
}

/// Prints what the chain says of the market the manifest names.
pub fn market_status(manifest_path: &Path, out: &mut dyn Write) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let io = IoRuntime::new()?;
        let market = Market::open(manifest_path, &io).await?;
        let source = market.source(&io).await?;
        let m = &market.manifest;
        let dm = m.data_market;
        let owner = market.view(ownerCall {}).await?;
        let epoch = market.view(currentEpochIdCall { dataMarketAddress: dm }).await?;
        let last_end = market.view(lastReleasedEndCall { dataMarketAddress: dm }).await?;
        let per_day = market.view(epochsPerDayCall { dataMarketAddress: dm }).await?;
        let slots = market.view(getTotalNodeCountCall {}).await?;
        let validators = market.view(getTotalValidatorsCountCall { dataMarketAddress: dm }).await?;
        let head = quantity(&source.call_value("eth_blockNumber", json!([])).await?)?;
        writeln!(
            out,
            "market {dm} (namespace {}), ProtocolState {} on chain {}",
            m.namespace, m.protocol_state, m.anchor.chain_id
        )?;
        writeln!(out, "owner: {owner}")?;
        let days = if per_day.is_zero() { "no day schedule".to_owned() } else { format!("days of {per_day} epochs") };
        let size = if m.epoch_size == 1 { "1 block".to_owned() } else { format!("{} blocks", m.epoch_size) };
        writeln!(out, "epochs released: {epoch} (epoch size {size}; {days})")?;
        if last_end.is_zero() {
            writeln!(out, "releaser: nothing released yet (source chain {} head {head})", m.source.chain_id)?;
        } else {
            let lag = U256::from(head).saturating_sub(last_end);
            writeln!(out, "releaser: released up to source block {last_end}, head {head} ({lag} blocks behind)")?;
        }
        match last_finalized(&market).await? {
            Some((epoch_id, block)) => {
                let stored =
                    market.view(storedCidsCall { dataMarketAddress: dm, epochId: U256::from(epoch_id) }).await?;
                writeln!(out, "last finalized: epoch {epoch_id} (anchor block {block}; {stored} project CIDs stored)")?
            }
            None => writeln!(out, "last finalized: none in the last {} anchor blocks", LOG_SPAN * LOG_SPANS)?,
        }
        writeln!(out, "slots registered: {slots}")?;
        writeln!(out, "validators: {validators}")?;
        Ok(())
    })
}

/// Anchor blocks one log query spans (public RPCs refuse wide ranges).
const LOG_SPAN: u64 = 5_000;

/// Spans read back at most for the last finalized epoch (200,000 blocks).
const LOG_SPANS: u64 = 40;

/// The newest epoch finalized on chain and its anchor block: the market's
/// `SnapshotBatchFinalized` logs, read back from the head a span at a time
/// down to the deploy block.
async fn last_finalized(market: &Market) -> Result<Option<(u64, u64)>> {
    let mut spans = 0;
    use alloy::sol_types::SolEvent;
    let m = &market.manifest;
    let head = quantity(&market.anchor.call_value("eth_blockNumber", json!([])).await?)?;
    let topic = format!("{:#x}", lite_node_protocol::contracts::SnapshotBatchFinalized::SIGNATURE_HASH);
    let market_topic = format!("{:#x}", m.data_market.into_word());
    let mut to = head;
    loop {
        let from = to.saturating_sub(LOG_SPAN - 1).max(m.deploy_block);
        let filter = json!({
            "fromBlock": format!("{from:#x}"), "toBlock": format!("{to:#x}"),
            "address": m.protocol_state, "topics": [topic, market_topic],
        });
        let logs = market.anchor.call_value("eth_getLogs", json!([filter])).await?;
        let newest = logs.as_array().into_iter().flatten().filter_map(|l| {
            let epoch = l["topics"][2].as_str()?;
            let epoch = u64::try_from(U256::from_str_radix(epoch.trim_start_matches("0x"), 16).ok()?).ok()?;
            Some((epoch, quantity(&l["blockNumber"]).ok()?))
        });
        if let Some(found) = newest.max() {
            return Ok(Some(found));
        }
        spans += 1;
        if from <= m.deploy_block || spans >= LOG_SPANS {
            return Ok(None);
        }
        to = from - 1;
    }
}

/// The deployer's key from `path`: 64 hex digits (with or without 0x); the
/// file's text is never shown.
fn read_key(path: &Path) -> Result<SecretKey> {
    let text = std::fs::read_to_string(path).map_err(|e| BadInput(format!("--key-file {}: {e}", path.display())))?;
    Ok(SecretKey::parse_hex(&format!("--key-file {}", path.display()), &text).map_err(BadInput)?)
}

/// The endpoints of one of the manifest's chains, checked to answer with
/// the chain id the manifest records.
async fn reach(path: &Path, role: &'static str, entry: &ChainEntry, io: &IoRuntime) -> Result<HttpRpc> {
    let rpc = connect(role, &entry.rpcs, io)?;
    let id = chain_id(&rpc, &format!("the {role} RPC"), &entry.rpcs).await?;
    if id != entry.chain_id {
        bail!(BadInput(format!(
            "{}: the market's {role} chain is {}, but its RPC ({}) is chain {id}: a manifest of another chain?",
            path.display(),
            entry.chain_id,
            shown(&entry.rpcs)
        )));
    }
    Ok(rpc)
}

fn connect(role: &'static str, urls: &[String], io: &IoRuntime) -> Result<HttpRpc> {
    if urls.is_empty() {
        bail!(BadInput(format!("no {role} RPC given (--{role}-rpc URL)")));
    }
    Ok(HttpRpc::new(role, urls.to_vec(), Duration::from_secs(30), io.clone()).map_err(BadInput)?)
}

/// The chain id the endpoints answer; an endpoint that is not an EVM
/// chain's JSON-RPC is named.
async fn chain_id(rpc: &HttpRpc, flag: &str, urls: &[String]) -> Result<u64> {
    let answer = rpc.call_value("eth_chainId", json!([])).await.map_err(|e| {
        BadInput(format!(
            "{flag} {}: not an EVM chain's JSON-RPC endpoint, or not answering ({})",
            shown(urls),
            e.message
        ))
    })?;
    quantity(&answer)
        .map_err(|_| BadInput(format!("{flag} {}: eth_chainId answered {answer}, not a chain id", shown(urls))).into())
}

/// Endpoints as messages show them: an API key in a URL is left out.
fn shown(urls: &[String]) -> String {
    urls.iter().map(|u| lite_node_core::url::redact_rpc_url(u)).collect::<Vec<_>>().join(", ")
}

fn quantity(v: &Value) -> Result<u64> {
    let text = v.as_str().ok_or_else(|| anyhow!("{v} is not a quantity"))?;
    u64::from_str_radix(text.trim_start_matches("0x"), 16).map_err(|_| anyhow!("{v} is not a quantity"))
}

/// ProtocolState's creation code from the embedded artifact.
fn bytecode() -> Result<Bytes> {
    let artifact: Value = serde_json::from_str(PROTOCOL_STATE).context("the embedded ProtocolState artifact")?;
    let code = artifact["bytecode"].as_str().ok_or_else(|| anyhow!("the embedded artifact has no bytecode"))?;
    code.parse().map_err(|e| anyhow!("the embedded bytecode: {e}"))
}

/// The manifest and, for the verbs that send transactions, the key of the
/// account that sends them (the owner, or a registrar for slots).
#[derive(Clone, Debug)]
pub struct MarketAccess {
    pub manifest: PathBuf,
    pub key_file: Option<PathBuf>,
}

/// A slot operation of `lite-node market slots`.
#[derive(Clone, Debug)]
pub enum SlotsVerb {
    /// `slot`: must be the next (count + 1); `None` takes it.
    Register {
        slot: Option<u64>,
        signer: String,
    },
    Reassign {
        slot: u64,
        signer: String,
    },
    Remove {
        slot: u64,
    },
    FullNode {
        slot: u64,
        on: bool,
    },
    List,
}

/// A validator operation of `lite-node market validators`.
#[derive(Clone, Debug)]
pub enum ValidatorsVerb {
    Add(Vec<String>),
    Remove(Vec<String>),
    List,
}

/// The manifest, its chains checked, ProtocolState found: what every verb
/// after `deploy` starts from.
struct Market {
    manifest: Manifest,
    path: PathBuf,
    anchor: std::sync::Arc<HttpRpc>,
}

impl Market {
    /// The manifest at `path`, its anchor chain reached and checked, and
    /// ProtocolState found there.
    async fn open(path: &Path, io: &IoRuntime) -> Result<Self> {
        let manifest = Manifest::load(path)?;
        let anchor = reach(path, "anchor", &manifest.anchor, io).await?;
        let code = anchor.call_value("eth_getCode", json!([manifest.protocol_state, "latest"])).await?;
        if code.as_str().is_none_or(|c| c.trim_start_matches("0x").is_empty()) {
            bail!(BadInput(format!(
                "{}: no contract at {} on chain {}: a manifest of another chain, or a chain that was reset?",
                path.display(),
                manifest.protocol_state,
                manifest.anchor.chain_id
            )));
        }
        Ok(Self { manifest, path: path.to_owned(), anchor: std::sync::Arc::new(anchor) })
    }

    /// The market's source chain, reached and checked.
    async fn source(&self, io: &IoRuntime) -> Result<HttpRpc> {
        reach(&self.path, "source", &self.manifest.source, io).await
    }

    /// Each of the source chain's RPCs on its own, every one checked, with
    /// the URL as messages show it (the releaser compares their heads).
    /// One that does not answer now is left out (said on stderr) while
    /// another does; one of another chain is bad input.
    async fn sources(&self, io: &IoRuntime) -> Result<Vec<(String, std::sync::Arc<HttpRpc>)>> {
        let mut sources = Vec::new();
        let mut silent = Vec::new();
        for url in &self.manifest.source.rpcs {
            let one = ChainEntry { rpcs: vec![url.clone()], ..self.manifest.source.clone() };
            let shown_url = shown(std::slice::from_ref(url));
            let rpc = connect("source", &one.rpcs, io)?;
            match rpc.call_value("eth_chainId", json!([])).await {
                Err(e) => silent.push(format!("{shown_url} ({})", e.message)),
                Ok(_) => {
                    // Answers: now it must be the market's chain.
                    let rpc = reach(&self.path, "source", &one, io).await?;
                    sources.push((shown_url, std::sync::Arc::new(rpc)));
                }
            }
        }
        if sources.is_empty() {
            bail!("no source RPC of the market answers: {}", silent.join("; "));
        }
        for s in &silent {
            eprintln!("source RPC {s} does not answer: left out until the releaser is started again");
        }
        Ok(sources)
    }

    /// A view of ProtocolState at the newest block.
    async fn view<C: SolCall>(&self, call: C) -> Result<C::Return> {
        self.anchor.view(self.manifest.protocol_state, &call).await.map_err(|e| anyhow!(e))
    }

    /// Sends `call` to ProtocolState from the key in `key_file` and waits
    /// for it; a call the contract refuses is bad input, in its words.
    async fn send<C: SolCall>(&self, key_file: Option<&Path>, call: C, what: &str) -> Result<u64> {
        let key_file = key_file.ok_or_else(|| {
            BadInput(format!("{what} sends a transaction: give --key-file (the owner's or a registrar's key)"))
        })?;
        let key = read_key(key_file)?;
        let sender = TxSender::new(self.anchor.clone(), key.bytes(), self.manifest.anchor.chain_id)
            .map_err(|e| BadInput(format!("--key-file {}: {e}", key_file.display())))?;
        let hash = match sender.send(self.manifest.protocol_state, call.abi_encode().into()).await {
            Ok(hash) => hash,
            Err(lite_node_chain::TxError::Reverted(why)) => {
                bail!(BadInput(format!("{what}: ProtocolState refuses it from {}: {why}", sender.address())))
            }
            Err(e) => bail!("{what}: {e}"),
        };
        Ok(mined(&sender, hash, what).await?.block_number)
    }

    async fn signer_of(&self, slot: u64) -> Result<Address> {
        self.view(slotSnapshotterMappingCall { slotId: U256::from(slot) }).await
    }
}

fn parse_address(flag: &str, text: &str) -> Result<Address> {
    text.trim().parse().map_err(|_| BadInput(format!("{flag} {text}: not an address (0x and 40 hex digits)")).into())
}

/// `lite-node market slots …`.
pub fn market_slots(access: &MarketAccess, verb: &SlotsVerb, out: &mut dyn Write) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let io = IoRuntime::new()?;
        let m = Market::open(&access.manifest, &io).await?;
        let key = access.key_file.as_deref();
        let count = u64::try_from(m.view(getTotalNodeCountCall {}).await?).unwrap_or(u64::MAX);
        let registered = |slot: u64| -> Result<()> {
            if slot == 0 || slot > count {
                bail!(BadInput(format!("--slot {slot}: not a registered slot (slots 1 to {count} are)")));
            }
            Ok(())
        };
        match verb {
            SlotsVerb::Register { slot, signer } => {
                let signer = parse_address("--signer", signer)?;
                let next = count + 1;
                let slot = slot.unwrap_or(next);
                if slot <= count {
                    let holder = m.signer_of(slot).await?;
                    bail!(BadInput(format!(
                        "--slot {slot}: taken by {holder} (give it to another signer with `market slots reassign`)"
                    )));
                }
                if slot != next {
                    bail!(BadInput(format!("--slot {slot}: slots register in order; the next is {next}")));
                }
                let call = registerSlotCall { slotId: U256::from(slot), snapshotter: signer };
                let block = m.send(key, call, "registerSlot").await?;
                writeln!(out, "slot {slot} registered to {signer} (block {block})")?;
            }
            SlotsVerb::Reassign { slot, signer } => {
                registered(*slot)?;
                let signer = parse_address("--signer", signer)?;
                let call = reassignSlotCall { slotId: U256::from(*slot), snapshotter: signer };
                let block = m.send(key, call, "reassignSlot").await?;
                writeln!(out, "slot {slot} reassigned to {signer} (block {block})")?;
            }
            SlotsVerb::Remove { slot } => {
                registered(*slot)?;
                if *slot != count {
                    bail!(BadInput(format!("--slot {slot}: only the last slot ({count}) can be removed")));
                }
                let block = m.send(key, removeSlotCall { slotId: U256::from(*slot) }, "removeSlot").await?;
                writeln!(out, "slot {slot} removed (block {block})")?;
            }
            SlotsVerb::FullNode { slot, on } => {
                registered(*slot)?;
                let call =
                    setFullNodeCall { dataMarketAddress: m.manifest.data_market, slotId: U256::from(*slot), full: *on };
                let block = m.send(key, call, "setFullNode").await?;
                let state = if *on { "a full node" } else { "no longer a full node" };
                writeln!(out, "slot {slot} is {state} of market {} (block {block})", m.manifest.data_market)?;
            }
            SlotsVerb::List => {
                let full = m.view(getFullNodesCall { dataMarketAddress: m.manifest.data_market }).await?;
                writeln!(out, "{count} slot(s) registered")?;
                for slot in 1..=count {
                    let signer = m.signer_of(slot).await?;
                    let role = if full.contains(&U256::from(slot)) { "  full node" } else { "" };
                    writeln!(out, "slot {slot}: {signer}{role}")?;
                }
            }
        }
        Ok(())
    })
}

/// `lite-node market validators …`.
pub fn market_validators(access: &MarketAccess, verb: &ValidatorsVerb, out: &mut dyn Write) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let io = IoRuntime::new()?;
        let m = Market::open(&access.manifest, &io).await?;
        let dm = m.manifest.data_market;
        let change = |addrs: &[String], allowed: bool| -> Result<updateAddressesCall> {
            if addrs.is_empty() {
                bail!(BadInput("name at least one validator's address".into()));
            }
            let addrs = addrs.iter().map(|a| parse_address("validator", a)).collect::<Result<Vec<_>>>()?;
            Ok(updateAddressesCall { dataMarketAddress: dm, role: 0, allowed: vec![allowed; addrs.len()], addrs })
        };
        match verb {
            ValidatorsVerb::Add(addrs) | ValidatorsVerb::Remove(addrs) => {
                let on = matches!(verb, ValidatorsVerb::Add(_));
                let call = change(addrs, on)?;
                let shown: Vec<String> = call.addrs.iter().map(ToString::to_string).collect();
                let block = m.send(access.key_file.as_deref(), call, "updateAddresses").await?;
                let done = if on { "added" } else { "removed" };
                writeln!(out, "{} {done} (block {block})", shown.join(", "))?;
            }
            ValidatorsVerb::List => {
                let validators = m.view(getValidatorsCall { dataMarketAddress: dm }).await?;
                writeln!(out, "{} validator(s) of market {dm}", validators.len())?;
                for v in validators {
                    writeln!(out, "{v}")?;
                }
            }
        }
        Ok(())
    })
}

/// `lite-node market days --epochs-per-day N`: the day schedule, set by the owner.
pub fn market_days(access: &MarketAccess, epochs_per_day: u64, out: &mut dyn Write) -> Result<()> {
    if epochs_per_day == 0 {
        bail!(BadInput("--epochs-per-day 0: a day is at least one epoch".into()));
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let io = IoRuntime::new()?;
        let m = Market::open(&access.manifest, &io).await?;
        let call = setEpochsPerDayCall { dataMarketAddress: m.manifest.data_market, n: U256::from(epochs_per_day) };
        let block = m.send(access.key_file.as_deref(), call, "setEpochsPerDay").await?;
        writeln!(out, "a day starts every {epochs_per_day} epochs from the next release (block {block})")?;
        Ok(())
    })
}

/// A role the owner grants: who may release epochs, or register slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Releaser,
    Registrar,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Releaser => "releaser",
            Role::Registrar => "registrar",
        }
    }
}

/// What `lite-node market roles` does.
#[derive(Clone, Debug)]
pub enum RolesVerb {
    /// Grant (`true`) or revoke (`false`) `Role` for the addresses.
    Set(Role, Vec<String>, bool),
    /// The roles each address holds.
    Show(Vec<String>),
    /// Hand the contract to a new owner.
    TransferOwnership(String),
}

/// `lite-node market roles …`: the owner's grants (releasers, slot
/// registrars, ownership), each sent from the owner's key, and what an
/// address may do.
pub fn market_roles(access: &MarketAccess, verb: &RolesVerb, out: &mut dyn Write) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let io = IoRuntime::new()?;
        let m = Market::open(&access.manifest, &io).await?;
        let key = access.key_file.as_deref();
        let parse_all = |addrs: &[String], what: &str| -> Result<Vec<Address>> {
            if addrs.is_empty() {
                bail!(BadInput(format!("name at least one {what}'s address")));
            }
            addrs.iter().map(|a| parse_address(what, a)).collect()
        };
        match verb {
            RolesVerb::Set(role, addrs, allowed) => {
                for account in parse_all(addrs, role.name())? {
                    let block = match role {
                        Role::Releaser => {
                            m.send(key, setReleaserCall { account, allowed: *allowed }, "setReleaser").await?
                        }
                        Role::Registrar => {
                            m.send(key, setRegistrarCall { account, allowed: *allowed }, "setRegistrar").await?
                        }
                    };
                    let done = if *allowed { "is now" } else { "is no longer" };
                    writeln!(out, "{account} {done} a {} (block {block})", role.name())?;
                }
            }
            RolesVerb::Show(addrs) => {
                let owner = m.view(ownerCall {}).await?;
                let dm = m.manifest.data_market;
                let validators = m.view(getValidatorsCall { dataMarketAddress: dm }).await?;
                for account in parse_all(addrs, "account")? {
                    let mut roles = Vec::new();
                    if account == owner {
                        roles.push("owner");
                    }
                    if m.view(isReleaserCall { account }).await? {
                        roles.push("releaser");
                    }
                    if m.view(isRegistrarCall { account }).await? {
                        roles.push("registrar");
                    }
                    if validators.contains(&account) {
                        roles.push("validator");
                    }
                    let roles = if roles.is_empty() { "no role".to_owned() } else { roles.join(", ") };
                    writeln!(out, "{account}: {roles}")?;
                }
            }
            RolesVerb::TransferOwnership(to) => {
                let new_owner = parse_address("new owner", to)?;
                if new_owner == Address::ZERO {
                    bail!(BadInput("--to 0x0…0: a market without an owner could never grant a role again".into()));
                }
                let block = m.send(key, transferOwnershipCall { newOwner: new_owner }, "transferOwnership").await?;
                writeln!(
                    out,
                    "ProtocolState {} is now owned by {new_owner} (block {block})",
                    m.manifest.protocol_state
                )?;
            }
        }
        Ok(())
    })
}

/// `lite-node market env --slot N`: the lines an operator pastes into the
/// node's `.env` for slot N. The private key is the operator's own: its
/// line is left for them to fill.
pub fn market_env(manifest: &Path, slot: u64, out: &mut dyn Write) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let io = IoRuntime::new()?;
        let m = Market::open(manifest, &io).await?;
        let count = u64::try_from(m.view(getTotalNodeCountCall {}).await?).unwrap_or(u64::MAX);
        if slot == 0 || slot > count {
            bail!(BadInput(format!(
                "--slot {slot}: not a registered slot of {} (slots 1 to {count} are)",
                m.path.display()
            )));
        }
        let signer = m.signer_of(slot).await?;
        let mf = &m.manifest;
        writeln!(out, "# slot {slot} of market {} ({}), from {}", mf.data_market, mf.namespace, m.path.display())?;
        writeln!(out, "SOURCE_RPC_URL={}", mf.source.rpcs.join(","))?;
        writeln!(out, "SOURCE_CHAIN={}", mf.source.name)?;
        writeln!(out, "POWERLOOM_RPC_URL={}", mf.anchor.rpcs.join(","))?;
        writeln!(out, "POWERLOOM_CHAIN={}", mf.anchor.name)?;
        writeln!(out, "PROTOCOL_STATE_CONTRACT={}", mf.protocol_state)?;
        writeln!(out, "DATA_MARKET_CONTRACT={}", mf.data_market)?;
        writeln!(out, "NAMESPACE={}", mf.namespace)?;
        writeln!(out, "SLOT_ID={slot}")?;
        writeln!(out, "# for the collector of docker-compose.yaml: where it starts reading releases,")?;
        writeln!(out, "# and the market's validators it publishes accepted submissions to")?;
        writeln!(out, "MARKET_DEPLOY_BLOCK={}", mf.deploy_block)?;
        if mf.validator_peers.is_empty() {
            writeln!(out, "# (the manifest names no validators yet: `lite-node market peers --set …`)")?;
        }
        writeln!(out, "VALIDATOR_PEERS={}", mf.validator_peers.join(","))?;
        writeln!(out, "SIGNER_ACCOUNT_ADDRESS={signer}")?;
        writeln!(out, "# your own key, the one of {signer}: it never leaves your machine")?;
        writeln!(out, "SIGNER_ACCOUNT_PRIVATE_KEY=")?;
        Ok(())
    })
}

/// `lite-node market peers [--set A,B,…]`: the validators' gossip addresses
/// the manifest publishes; `--set` records them (each must name its peer).
pub fn market_peers(
    manifest: &Path,
    set: Option<&[lite_node_validator::gossip::Multiaddr]>,
    out: &mut dyn Write,
) -> Result<()> {
    let mut m = Manifest::load(manifest)?;
    if let Some(peers) = set {
        if peers.is_empty() {
            bail!(BadInput("--set: name at least one validator's address (/ip4/…/tcp/…/p2p/<peer id>)".into()));
        }
        lite_node_validator::gossip::check_peers(peers).map_err(|e| BadInput(format!("--set: {e}")))?;
        m.validator_peers = peers.iter().map(ToString::to_string).collect();
        let text = serde_json::to_string_pretty(&m)? + "\n";
        lite_node_core::atomic_file::write_durable(manifest, text.as_bytes())
            .with_context(|| format!("writing the manifest {}", manifest.display()))?;
    }
    writeln!(out, "{} validator peer(s) in {}", m.validator_peers.len(), manifest.display())?;
    for peer in &m.validator_peers {
        writeln!(out, "{peer}")?;
    }
    Ok(())
}

/// What `lite-node market release` is given.
#[derive(Clone, Debug)]
pub struct ReleaseOptions {
    pub access: MarketAccess,
    pub finality: u64,
    pub first_block: Option<u64>,
    /// Where `/health` and `/metrics` are served.
    pub listen: Option<std::net::SocketAddr>,
    pub poll: Duration,
    pub replace_after: Duration,
    pub max_source_lag: u64,
    /// The highest max fee per gas a replacement may offer, in gwei.
    pub max_fee_gwei: Option<u64>,
}

/// The epoch releaser as a service: one line per epoch released, until
/// Ctrl-C or SIGTERM.
pub fn market_release(o: &ReleaseOptions, out: &mut dyn Write) -> Result<()> {
    use lite_node_chain::releaser::{Releaser, ReleaserSettings, Step};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let mut shutdown = lite_node_core::signals::shutdown_signals(false);
        let io = IoRuntime::new()?;
        let m = Market::open(&o.access.manifest, &io).await?;
        let sources = m.sources(&io).await?;
        let key_file =
            o.access.key_file.as_deref().ok_or_else(|| {
                BadInput("the releaser sends transactions: give --key-file (a releaser's key)".into())
            })?;
        let key = read_key(key_file)?;
        let sender = TxSender::new(m.anchor.clone(), key.bytes(), m.manifest.anchor.chain_id)
            .map_err(|e| BadInput(format!("--key-file {}: {e}", key_file.display())))?;
        if !m.view(isReleaserCall { account: sender.address() }).await? {
            bail!(BadInput(format!(
                "--key-file {}: {} is not a releaser of ProtocolState {} (the owner grants it: `lite-node market roles grant releaser ADDRESS`)",
                key_file.display(),
                sender.address(),
                m.manifest.protocol_state
            )));
        }
        let settings = ReleaserSettings {
            protocol_state: m.manifest.protocol_state,
            data_market: m.manifest.data_market,
            epoch_size: m.manifest.epoch_size,
            finality: o.finality,
            first_block: o.first_block,
            replace_after: o.replace_after,
            max_source_lag: o.max_source_lag,
            max_fee_per_gas: o.max_fee_gwei.map(|g| u128::from(g) * 1_000_000_000),
        };
        let releaser = Releaser::new(m.anchor.clone(), sources, sender, settings);
        if let Some(addr) = o.listen {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| BadInput(format!("--listen {addr}: cannot listen ({e})")))?;
            writeln!(out, "health on http://{}/health, metrics on /metrics", listener.local_addr()?)?;
            tokio::spawn(serve_health(listener, releaser.state.clone()));
        }
        writeln!(
            out,
            "releasing epochs of {} source block(s) for market {} ({} blocks of finality)",
            m.manifest.epoch_size, m.manifest.data_market, o.finality
        )?;
        let mut failures = 0u32;
        let mut stopping = false;
        loop {
            // A signal lets the step in flight end (its transaction mined,
            // and said) for up to half a minute.
            let step = releaser.step();
            tokio::pin!(step);
            let step = tokio::select! {
                step = &mut step => step,
                _ = &mut shutdown => {
                    stopping = true;
                    match tokio::time::timeout(Duration::from_secs(30), step).await {
                        Ok(step) => step,
                        Err(_) => break,
                    }
                }
            };
            if step.is_ok() {
                failures = 0;
            }
            let pause = match step {
                Ok(Step::Released { epoch_id, begin, end, .. }) => {
                    writeln!(out, "epoch {epoch_id} released: source blocks {begin}-{end}")?;
                    None
                }
                Ok(Step::Raced { begin, end }) => {
                    writeln!(
                        out,
                        "source blocks {begin}-{end} were released by another transaction: following the chain"
                    )?;
                    // That transaction may still be pending: give it a poll.
                    Some(o.poll)
                }
                Ok(Step::Waiting) => Some(o.poll),
                Err(e) => {
                    failures += 1;
                    eprintln!("release: {e}");
                    Some((o.poll * failures.min(30)).min(Duration::from_secs(30)))
                }
            };
            if stopping {
                break;
            }
            if let Some(pause) = pause {
                tokio::select! {
                    _ = &mut shutdown => break,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
        writeln!(out, "stopped")?;
        Ok(())
    })
}

async fn serve_health(
    listener: tokio::net::TcpListener,
    state: std::sync::Arc<std::sync::Mutex<lite_node_chain::releaser::ReleaserState>>,
) {
    use axum::{extract::State, http::StatusCode, response::IntoResponse, routing::get};
    type Shared = std::sync::Arc<std::sync::Mutex<lite_node_chain::releaser::ReleaserState>>;
    async fn health(State(state): State<Shared>) -> impl IntoResponse {
        let s = state.lock().expect("not poisoned").clone();
        let code = if s.error.is_some() { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
        (code, axum::Json(s))
    }
    async fn metrics(State(state): State<Shared>) -> impl IntoResponse {
        let s = state.lock().expect("not poisoned").clone();
        let mut text = String::new();
        let mut gauge = |name: &str, help: &str, value: Option<u64>| {
            if let Some(v) = value {
                text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}\n"));
            }
        };
        gauge("lite_node_releaser_source_head", "The source chain's newest block.", s.source_head);
        gauge("lite_node_releaser_last_released_end", "The last source block released.", s.last_released_end);
        gauge("lite_node_releaser_epochs_released", "The market's current epoch id.", s.epochs_released);
        gauge(
            "lite_node_releaser_lag_blocks",
            "Source blocks not released yet.",
            s.source_head.zip(s.last_released_end).map(|(h, l)| h.saturating_sub(l)),
        );
        gauge("lite_node_releaser_released_here", "Epochs this process released.", Some(s.released_here));
        gauge("lite_node_releaser_replaced", "Stuck transactions replaced.", Some(s.replaced));
        gauge("lite_node_releaser_raced", "Ranges released by another transaction.", Some(s.raced));
        gauge("lite_node_releaser_up", "1 unless the last step failed.", Some(u64::from(s.error.is_none())));
        text.push_str(
            "# HELP lite_node_releaser_source_rpc_behind Blocks a source RPC is under the highest.\n# TYPE \
             lite_node_releaser_source_rpc_behind gauge\n",
        );
        for rpc in &s.source_rpcs {
            if let Some(behind) = rpc.behind {
                let url = rpc.url.replace('\\', "\\\\").replace('"', "\\\"");
                text.push_str(&format!("lite_node_releaser_source_rpc_behind{{url=\"{url}\"}} {behind}\n"));
            }
        }
        ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
    }
    let app = axum::Router::new().route("/health", get(health)).route("/metrics", get(metrics)).with_state(state);
    if let Err(e) = axum::serve(listener, app).await {
        eprintln!("the health server stopped: {e}");
    }
}
