//! The local network's saved world on a real anvil, and the means to drive it:
//! mine blocks, release epochs, start days, register slots, change the node
//! count. Built by `devnet/build-world.sh` (`./init.sh test` runs it).

use std::{path::PathBuf, time::Duration};

use alloy::{
    primitives::{Address, U256},
    sol,
    sol_types::{SolCall, SolEvent},
};
use serde_json::{Value, json};

use crate::{Anvil, workspace_root};

sol! {
    struct ExactInputSingleParams {
        address tokenIn;
        address tokenOut;
        uint24 fee;
        address recipient;
        uint256 deadline;
        uint256 amountIn;
        uint256 amountOutMinimum;
        uint160 sqrtPriceLimitX96;
    }
    function exactInputSingle(ExactInputSingleParams params) external returns (uint256);
    struct IncreaseLiquidityParams {
        uint256 tokenId;
        uint256 amount0Desired;
        uint256 amount1Desired;
        uint256 amount0Min;
        uint256 amount1Min;
        uint256 deadline;
    }
    function increaseLiquidity(IncreaseLiquidityParams params) external returns (uint128, uint256, uint256);
    struct DecreaseLiquidityParams {
        uint256 tokenId;
        uint128 liquidity;
        uint256 amount0Min;
        uint256 amount1Min;
        uint256 deadline;
    }
    function decreaseLiquidity(DecreaseLiquidityParams params) external returns (uint256, uint256);
    struct CollectParams {
        uint256 tokenId;
        address recipient;
        uint128 amount0Max;
        uint128 amount1Max;
    }
    function collect(CollectParams params) external returns (uint256, uint256);
    function releaseEpochWithId(address dataMarketAddress, uint256 epochId, uint256 begin, uint256 end) external;
    function emitMalformedRelease(address dataMarketAddress) external;
    function startDay(address dataMarketAddress) external returns (uint256);
    function setSnapshotterEnabled(address snapshotter, bool enabled) external;
    function setTotalNodeCount(uint256 n) external;
}

// The V2 batch flow, as the protocol crate declares it.
use lite_node_protocol::contracts::{
    lastReleasedEndCall, reassignSlotCall, registerSlotCall, releaseEpochCall, setFullNodeCall, storeFinalizedCidsCall,
    submitBatchAttestationCall, submitSubmissionBatchCall, updateAddressesCall,
};

/// An anvil account of the world (public development keys).
#[derive(Clone, Debug)]
pub struct Account {
    pub address: String,
    pub private_key: String,
}

/// What `devnet/world/manifest.json` says.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub chain_id: u64,
    /// The anchor head when the world was saved.
    pub head: u64,
    pub protocol_state: String,
    pub data_market: String,
    pub other_data_market: String,
    pub accounts: Vec<Account>,
    /// `(slot_id, signer address)` as registered.
    pub slots: Vec<(u64, String)>,
    pub pools: Vec<String>,
    pub raw: Value,
}

/// `devnet/world/`.
pub fn world_dir() -> PathBuf {
    workspace_root().join("devnet").join("world")
}

impl Manifest {
    pub fn load() -> Self {
        Self::load_from(&world_dir())
    }

    /// The manifest of a world saved in `dir`.
    pub fn load_from(dir: &std::path::Path) -> Self {
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; build the world with devnet/build-world.sh", path.display()));
        let raw: Value = serde_json::from_str(&text).unwrap();
        let s = |k: &str| raw[k].as_str().unwrap_or_else(|| panic!("manifest has no {k}")).to_owned();
        Self {
            chain_id: raw["chainId"].as_u64().unwrap(),
            head: raw["head"].as_u64().unwrap(),
            protocol_state: s("protocolState"),
            data_market: s("dataMarket"),
            other_data_market: s("otherDataMarket"),
            accounts: raw["accounts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| Account {
                    address: a["address"].as_str().unwrap().to_owned(),
                    private_key: a["privateKey"].as_str().unwrap().to_owned(),
                })
                .collect(),
            slots: raw["slots"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| (s["slotId"].as_u64().unwrap(), s["signer"].as_str().unwrap().to_owned()))
                .collect(),
            pools: raw["pools"].as_array().unwrap().iter().map(|p| p["address"].as_str().unwrap().to_owned()).collect(),
            raw,
        }
    }

    /// The private key of a registered slot's signer.
    pub fn signer_key(&self, slot_id: u64) -> &str {
        let (_, signer) = self.slots.iter().find(|(s, _)| *s == slot_id).expect("slot is registered");
        &self
            .accounts
            .iter()
            .find(|a| a.address.eq_ignore_ascii_case(signer))
            .expect("signer is an account")
            .private_key
    }
}

/// The world loaded into a fresh anvil; anvil stops when this is dropped.
#[derive(Debug)]
pub struct World {
    pub anvil: Anvil,
    pub manifest: Manifest,
    client: reqwest::blocking::Client,
}

impl World {
    /// Loads the saved world on a port the OS picks.
    pub fn load() -> Self {
        Self::start(None)
    }

    /// Loads the saved world on `port` (for "the RPC comes back" tests).
    pub fn load_on_port(port: u16) -> Self {
        Self::start(Some(port))
    }

    fn start(port: Option<u16>) -> Self {
        Self::start_from(&world_dir(), port, &[])
    }

    /// Loads the world saved in `dir` (e.g. `devnet/world-1000`), with extra anvil arguments.
    pub fn load_dir(dir: &std::path::Path, args: &[&str]) -> Self {
        Self::start_from(dir, None, args)
    }

    fn start_from(dir: &std::path::Path, port: Option<u16>, extra: &[&str]) -> Self {
        let manifest = Manifest::load_from(dir);
        let state = dir.join("state.json");
        let mut args = vec!["--load-state", state.to_str().unwrap()];
        args.extend(extra);
        let anvil = Anvil::start_on(port.unwrap_or(0), &args);
        let world = Self { anvil, manifest, client: reqwest::blocking::Client::new() };
        // Lost on --load-state: Uniswap's gas depends on timestamps moving.
        world.rpc("anvil_setBlockTimestampInterval", json!([12]));
        world
    }

    pub fn url(&self) -> String {
        self.anvil.url()
    }

    /// One JSON-RPC call; panics on an error answer.
    pub fn rpc(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let text = self
            .client
            .post(self.url())
            .json_body(&body)
            .timeout(Duration::from_secs(30))
            .send()
            .and_then(|r| r.text())
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        let answer: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method}: {e}: {text}"));
        if let Some(err) = answer.get("error") {
            panic!("{method} failed: {err}");
        }
        answer["result"].clone()
    }

    pub fn head(&self) -> u64 {
        hex_u64(&self.rpc("eth_blockNumber", json!([])))
    }

    pub fn mine(&self, blocks: u64) {
        self.rpc("anvil_mine", json!([format!("0x{blocks:x}")]));
    }

    /// Sends a transaction from the deployer (ProtocolState's owner) to
    /// ProtocolState and returns its receipt once mined.
    pub fn transact(&self, data: Vec<u8>) -> Value {
        self.transact_to(&self.manifest.protocol_state.clone(), data)
    }

    /// Sends a transaction from the deployer without waiting for it to be
    /// mined (for several in one block with automine off); returns its hash.
    pub fn send_to(&self, to: &str, data: Vec<u8>) -> Value {
        self.send_with_gas(to, data, 15_000_000)
    }

    /// As [`World::send_to`], with an explicit gas limit (many in one block).
    pub fn send_with_gas(&self, to: &str, data: Vec<u8>, gas: u64) -> Value {
        let tx = json!({
            "from": self.manifest.accounts[0].address,
            "to": to,
            "data": format!("0x{}", hex(&data)),
            "gas": format!("0x{gas:x}"),
        });
        self.rpc("eth_sendTransaction", json!([tx]))
    }

    /// Turns anvil's mine-on-arrival on or off; with it off, [`World::mine`]
    /// puts everything sent since into one block.
    pub fn set_automine(&self, on: bool) {
        self.rpc("evm_setAutomine", json!([on]));
    }

    /// The receipt of a sent transaction, once mined; panics if it reverted.
    pub fn receipt(&self, hash: &Value) -> Value {
        let receipt = crate::poll_until("the transaction's receipt", Duration::from_secs(30), || {
            Some(self.rpc("eth_getTransactionReceipt", json!([hash]))).filter(|r| !r.is_null())
        });
        assert_eq!(receipt["status"], "0x1", "transaction reverted: {receipt}");
        receipt
    }

    /// Sends a transaction from the deployer to `to`; returns its receipt.
    pub fn transact_to(&self, to: &str, data: Vec<u8>) -> Value {
        let tx = json!({
            "from": self.manifest.accounts[0].address,
            "to": to,
            "data": format!("0x{}", hex(&data)),
            "gas": "0xe4e1c0",
        });
        let hash = self.rpc("eth_sendTransaction", json!([tx]));
        // anvil mines on arrival, but the receipt can trail the answer.
        self.receipt(&hash)
    }

    fn market(&self) -> Address {
        self.manifest.data_market.parse().unwrap()
    }

    /// Releases the next epoch of our data market over `begin..=end`;
    /// returns `(epoch_id, anchor block)`.
    pub fn release_epoch(&self, begin: u64, end: u64) -> (u64, u64) {
        self.release_epoch_for(&self.manifest.data_market.clone(), begin, end)
    }

    /// Releases the next epoch of any data market.
    pub fn release_epoch_for(&self, market: &str, begin: u64, end: u64) -> (u64, u64) {
        let call = releaseEpochCall {
            dataMarketAddress: market.parse().unwrap(),
            begin: U256::from(begin),
            end: U256::from(end),
        };
        let receipt = self.transact(call.abi_encode());
        // A release that starts a day logs DayStartedEvent first.
        let topic = format!("{:#x}", lite_node_protocol::contracts::EpochReleased::SIGNATURE_HASH);
        let log = receipt["logs"]
            .as_array()
            .and_then(|logs| logs.iter().find(|l| l["topics"][0].as_str() == Some(topic.as_str())))
            .unwrap_or_else(|| panic!("no EpochReleased log: {receipt}"));
        (hex_u64(&log["topics"][2]), hex_u64(&receipt["blockNumber"]))
    }

    /// Releases our market's next epoch as a releaser does: the blocks
    /// after the last released one, up to the newest (the newest alone the
    /// first time; a block is mined first when none is new).
    pub fn release_next_epoch(&self) -> (u64, u64) {
        self.release_next_epoch_for(&self.manifest.data_market.clone())
    }

    /// As [`World::release_next_epoch`], for any data market.
    pub fn release_next_epoch_for(&self, market: &str) -> (u64, u64) {
        let call = lastReleasedEndCall { dataMarketAddress: market.parse().unwrap() };
        let tx = json!({"to": self.manifest.protocol_state, "data": format!("0x{}", hex(&call.abi_encode()))});
        let last = self.rpc("eth_call", json!([tx, "latest"]));
        let last = u64::from_str_radix(last.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
        if last >= self.head() {
            self.mine(1);
        }
        let head = self.head();
        self.release_epoch_for(market, if last == 0 { head } else { last + 1 }, head)
    }

    pub fn emit_malformed_release(&self) {
        self.transact(emitMalformedReleaseCall { dataMarketAddress: self.market() }.abi_encode());
    }

    pub fn start_day(&self) {
        self.transact(startDayCall { dataMarketAddress: self.market() }.abi_encode());
    }

    /// Gives `slot_id` to `snapshotter`: a registered slot is reassigned,
    /// the next one registered (slots register in order).
    pub fn assign_slot(&self, slot_id: u64, snapshotter: &str) {
        let snapshotter = snapshotter.parse().unwrap();
        let data = if slot_id <= self.manifest.slots.len() as u64 {
            reassignSlotCall { slotId: U256::from(slot_id), snapshotter }.abi_encode()
        } else {
            registerSlotCall { slotId: U256::from(slot_id), snapshotter }.abi_encode()
        };
        self.transact(data);
    }

    /// Makes the world's first `n` accounts (the deployer, who sends every
    /// transaction here, first) the validators of our data market.
    pub fn register_validators(&self, n: usize) {
        let addrs: Vec<Address> = self.manifest.accounts[..n].iter().map(|a| a.address.parse().unwrap()).collect();
        let call =
            updateAddressesCall { dataMarketAddress: self.market(), role: 0, allowed: vec![true; addrs.len()], addrs };
        self.transact(call.abi_encode());
    }

    /// Marks (or unmarks) `slot_id` as a full node of our data market.
    pub fn set_full_node(&self, slot_id: u64, full: bool) {
        let call = setFullNodeCall { dataMarketAddress: self.market(), slotId: U256::from(slot_id), full };
        self.transact(call.abi_encode());
    }

    /// Releases epoch `epoch_id` of our data market (over block 1), making
    /// it the market's current epoch.
    pub fn release_epoch_with_id(&self, epoch_id: u64) {
        let call = releaseEpochWithIdCall {
            dataMarketAddress: self.market(),
            epochId: U256::from(epoch_id),
            begin: U256::from(1),
            end: U256::from(1),
        };
        self.transact(call.abi_encode());
    }

    /// Puts epoch `epoch_id`'s batch on chain (as the deployer, a
    /// validator; the batch is its attestation): `projects` as `(project
    /// id, CID)`, sorted here, under their Merkle root, which is returned.
    /// The epoch must have been released (see [`World::release_epoch_with_id`]).
    pub fn submit_batch(&self, epoch_id: u64, batch_cid: &str, projects: &[(String, String)]) -> [u8; 32] {
        let mut sorted = projects.to_vec();
        sorted.sort();
        let root =
            lite_node_protocol::merkle::Tree::of(sorted.iter().map(|(p, c)| (p.as_str(), c.as_str()))).unwrap().root();
        let call = submitSubmissionBatchCall {
            dataMarketAddress: self.market(),
            batchCid: batch_cid.to_owned(),
            epochId: U256::from(epoch_id),
            finalizedCidsRootHash: root,
        };
        let receipt = self.transact(call.abi_encode());
        assert_eq!(receipt["status"], "0x1", "the batch of epoch {epoch_id} reverted: {receipt}");
        root.0
    }

    /// Stores a finalized epoch's `projects` (`(project id, CID)`, sorted
    /// here) on chain in one part, proved against their root, as a
    /// validator does once the epoch is finalized; panics when the chain
    /// refuses it.
    pub fn store_finalized(&self, epoch_id: u64, projects: &[(String, String)]) {
        let mut sorted = projects.to_vec();
        sorted.sort();
        let tree = lite_node_protocol::merkle::Tree::of(sorted.iter().map(|(p, c)| (p.as_str(), c.as_str()))).unwrap();
        let proof = tree.multiproof(0..sorted.len()).expect("at least one project");
        let call = storeFinalizedCidsCall {
            dataMarketAddress: self.market(),
            epochId: U256::from(epoch_id),
            projectIds: sorted.iter().map(|(p, _)| p.clone()).collect(),
            snapshotCids: sorted.iter().map(|(_, c)| c.clone()).collect(),
            proof: proof.proof,
            proofFlags: proof.flags,
        };
        let receipt = self.transact(call.abi_encode());
        assert_eq!(receipt["status"], "0x1", "storing epoch {epoch_id}'s CIDs reverted: {receipt}");
    }

    /// The world's account `account` (a validator) attests `root` for epoch
    /// `epoch_id`'s batch; panics when the chain refuses it.
    pub fn attest_as(&self, account: usize, epoch_id: u64, batch_cid: &str, root: [u8; 32]) {
        let call = submitBatchAttestationCall {
            dataMarketAddress: self.market(),
            batchCid: batch_cid.to_owned(),
            epochId: U256::from(epoch_id),
            finalizedCidsRootHash: root.into(),
        };
        let tx = json!({
            "from": self.manifest.accounts[account].address,
            "to": self.manifest.protocol_state,
            "data": format!("0x{}", hex(&call.abi_encode())),
            "gas": "0xe4e1c0",
        });
        let hash = self.rpc("eth_sendTransaction", json!([tx]));
        let receipt = self.receipt(&hash);
        assert_eq!(receipt["status"], "0x1", "the attestation of epoch {epoch_id} reverted: {receipt}");
    }

    fn pool_field(&self, pool: usize, field: &str) -> String {
        self.manifest.raw["pools"][pool][field]
            .as_str()
            .unwrap_or_else(|| panic!("pool {pool} has no {field}"))
            .to_owned()
    }

    /// Calldata of a swap of `amount_in` raw units into pool `pool` (an index
    /// into the manifest's pools), token0 → token1 when `zero_for_one`.
    pub fn swap_call(&self, pool: usize, zero_for_one: bool, amount_in: u128) -> (String, Vec<u8>) {
        let (t0, t1) = (self.pool_field(pool, "token0"), self.pool_field(pool, "token1"));
        let (token_in, token_out) = if zero_for_one { (t0, t1) } else { (t1, t0) };
        let params = ExactInputSingleParams {
            tokenIn: token_in.parse().unwrap(),
            tokenOut: token_out.parse().unwrap(),
            fee: alloy::primitives::Uint::from(self.manifest.raw["pools"][pool]["fee"].as_u64().unwrap()),
            recipient: self.manifest.accounts[0].address.parse().unwrap(),
            deadline: U256::from(1u64 << 40),
            amountIn: U256::from(amount_in),
            amountOutMinimum: U256::ZERO,
            sqrtPriceLimitX96: alloy::primitives::Uint::ZERO,
        };
        (self.manifest.raw["swapRouter"].as_str().unwrap().to_owned(), exactInputSingleCall { params }.abi_encode())
    }

    /// A swap, mined on its own.
    pub fn swap(&self, pool: usize, zero_for_one: bool, amount_in: u128) -> Value {
        let (to, data) = self.swap_call(pool, zero_for_one, amount_in);
        self.transact_to(&to, data)
    }

    fn npm(&self) -> String {
        self.manifest.raw["positionManager"].as_str().unwrap().to_owned()
    }

    /// Adds liquidity to the world's full-range position in pool `pool` (a
    /// `Mint` on the pool).
    pub fn add_liquidity(&self, pool: usize, amount0: u128, amount1: u128) -> Value {
        let params = IncreaseLiquidityParams {
            tokenId: U256::from(pool as u64 + 1),
            amount0Desired: U256::from(amount0),
            amount1Desired: U256::from(amount1),
            amount0Min: U256::ZERO,
            amount1Min: U256::ZERO,
            deadline: U256::from(1u64 << 40),
        };
        self.transact_to(&self.npm(), increaseLiquidityCall { params }.abi_encode())
    }

    /// Removes `liquidity` from that position (a `Burn` on the pool).
    pub fn remove_liquidity(&self, pool: usize, liquidity: u128) -> Value {
        let params = DecreaseLiquidityParams {
            tokenId: U256::from(pool as u64 + 1),
            liquidity,
            amount0Min: U256::ZERO,
            amount1Min: U256::ZERO,
            deadline: U256::from(1u64 << 40),
        };
        self.transact_to(&self.npm(), decreaseLiquidityCall { params }.abi_encode())
    }

    /// Collects what the position is owed (a `Collect` on the pool).
    pub fn collect(&self, pool: usize) -> Value {
        let params = CollectParams {
            tokenId: U256::from(pool as u64 + 1),
            recipient: self.manifest.accounts[0].address.parse().unwrap(),
            amount0Max: u128::MAX,
            amount1Max: u128::MAX,
        };
        self.transact_to(&self.npm(), collectCall { params }.abi_encode())
    }

    /// Enables or disables `snapshotter` for all its slots; the receipt.
    pub fn set_snapshotter_enabled(&self, snapshotter: &str, enabled: bool) -> Value {
        self.transact(setSnapshotterEnabledCall { snapshotter: snapshotter.parse().unwrap(), enabled }.abi_encode())
    }

    pub fn set_total_node_count(&self, n: u64) {
        self.transact(setTotalNodeCountCall { n: U256::from(n) }.abi_encode());
    }
}

trait JsonBody {
    fn json_body(self, body: &Value) -> Self;
}

impl JsonBody for reqwest::blocking::RequestBuilder {
    fn json_body(self, body: &Value) -> Self {
        self.header("content-type", "application/json").body(body.to_string())
    }
}

/// A `0x…` quantity or 32-byte word as a number.
pub fn hex_u64(v: &Value) -> u64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a hex string: {v}"));
    let digits = s.trim_start_matches("0x").trim_start_matches('0');
    if digits.is_empty() { 0 } else { u64::from_str_radix(digits, 16).unwrap_or_else(|e| panic!("{s}: {e}")) }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
