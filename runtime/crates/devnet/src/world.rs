//! The saved devnet world (`devnet/world/manifest.json`, written by
//! `devnet/build-world.sh`) and the transactions the devnet sends to it:
//! releases, slot registrations, the node count, and swaps for activity.

use std::{path::Path, time::Duration};

use alloy::{
    primitives::{Address, U256, Uint},
    sol,
    sol_types::{SolCall, SolEvent},
};
use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::{Value, json};

use lite_node_chain::HttpRpc;
use lite_node_protocol::contracts::{lastReleasedEndCall, reassignSlotCall, registerSlotCall, releaseEpochCall};

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
    function setTotalNodeCount(uint256 n) external;
}

/// An anvil development account (public keys, never for a real network).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Account {
    pub address: String,
    pub private_key: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotEntry {
    pub slot_id: u64,
    pub signer: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Pool {
    pub address: String,
    pub token0: String,
    pub token1: String,
    pub fee: u32,
}

/// What `manifest.json` records about a saved world.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub chain_id: u64,
    pub deployer: String,
    pub accounts: Vec<Account>,
    pub protocol_state: String,
    pub data_market: String,
    pub slots: Vec<SlotEntry>,
    pub pools: Vec<Pool>,
    pub swap_router: String,
}

impl Manifest {
    pub fn load(world: &Path) -> Result<Self> {
        let path = world.join("manifest.json");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {}: build the world first (./init.sh devnet does; or devnet/build-world.sh)",
                path.display()
            )
        })?;
        serde_json::from_str(&text).with_context(|| format!("{} is not a devnet world manifest", path.display()))
    }

    /// The private key of an account of the world, by address.
    pub fn key_of(&self, address: &str) -> Option<&str> {
        self.accounts.iter().find(|a| a.address.eq_ignore_ascii_case(address)).map(|a| a.private_key.as_str())
    }
}

/// Sends the devnet's transactions from the world's deployer (an unlocked
/// anvil account that owns ProtocolState and holds the pools' tokens).
pub struct Driver {
    pub rpc: std::sync::Arc<HttpRpc>,
    pub manifest: Manifest,
}

/// An address from the world's manifest; a bad one names the field.
pub fn address(text: &str, field: &str) -> Result<Address> {
    text.parse().with_context(|| {
        format!(
            "the devnet world's manifest: {field} `{text}` is not an address (rebuild it with devnet/build-world.sh)"
        )
    })
}

fn quantity(v: &Value) -> Result<u64> {
    Ok(lite_node_protocol::quantity(v)?)
}

impl Driver {
    pub async fn call(&self, method: &str, params: Value) -> Result<Value> {
        self.rpc.call_value(method, params).await.map_err(|e| anyhow!("{method}: {e}"))
    }

    pub async fn head(&self) -> Result<u64> {
        quantity(&self.call("eth_blockNumber", json!([])).await?)
    }

    /// Sends a transaction and returns its receipt once mined; an error if it reverted.
    pub async fn transact(&self, to: &str, data: Vec<u8>, what: &str) -> Result<Value> {
        let tx = json!({
            "from": self.manifest.deployer,
            "to": to,
            "data": format!("0x{}", hex::encode(&data)),
            "gas": "0xe4e1c0",
        });
        let hash = self.call("eth_sendTransaction", json!([tx])).await.with_context(|| what.to_owned())?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let receipt = self.call("eth_getTransactionReceipt", json!([hash])).await?;
            if !receipt.is_null() {
                if receipt["status"] != "0x1" {
                    bail!("{what}: the transaction reverted ({receipt})");
                }
                return Ok(receipt);
            }
            if tokio::time::Instant::now() > deadline {
                bail!("{what}: no receipt for {hash} after 30 s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn protocol_state(&self) -> String {
        self.manifest.protocol_state.clone()
    }

    /// A view of ProtocolState at the newest block.
    async fn view<C: SolCall>(&self, call: C) -> Result<C::Return> {
        let to = address(&self.protocol_state(), "protocolState")?;
        self.rpc.view(to, &call).await.map_err(|e| anyhow!(e))
    }

    /// Releases the next epoch of our data market, as a market's releaser
    /// does: from the block after the last released one (the contract takes
    /// nothing else) to `head`; the first release is `head` alone. Returns
    /// `(epoch id, begin, end, anchor block of the release)`.
    pub async fn release_epoch_to(&self, head: u64) -> Result<(u64, u64, u64, u64)> {
        let market = address(&self.manifest.data_market, "dataMarket")?;
        let last = self.view(lastReleasedEndCall { dataMarketAddress: market }).await?;
        let last = u64::try_from(last).map_err(|_| anyhow!("lastReleasedEnd {last} is past u64"))?;
        let begin = if last == 0 { head } else { last + 1 };
        if begin > head {
            bail!("nothing to release: blocks up to {last} are released and the head is {head}");
        }
        let call = releaseEpochCall { dataMarketAddress: market, begin: U256::from(begin), end: U256::from(head) };
        let receipt = self.transact(&self.protocol_state(), call.abi_encode(), "releaseEpoch").await?;
        // A release that starts a day logs DayStartedEvent first.
        let topic = format!("{:#x}", lite_node_protocol::contracts::EpochReleased::SIGNATURE_HASH);
        let logs = receipt["logs"].as_array().map(Vec::as_slice).unwrap_or_default();
        let log = logs
            .iter()
            .find(|l| l["topics"][0].as_str() == Some(topic.as_str()))
            .ok_or_else(|| anyhow!("releaseEpoch: no EpochReleased log in its receipt"))?;
        Ok((quantity(&log["topics"][2])?, begin, head, quantity(&receipt["blockNumber"])?))
    }

    /// Registers `slot_id` as a full node of our data market (docs/protocol.md §13).
    pub async fn set_full_node(&self, slot_id: u64) -> Result<()> {
        let market = address(&self.manifest.data_market, "dataMarket")?;
        let call = lite_node_protocol::contracts::setFullNodeCall {
            dataMarketAddress: market,
            slotId: U256::from(slot_id),
            full: true,
        };
        self.transact(&self.protocol_state(), call.abi_encode(), "setFullNode").await.map(drop)
    }

    /// Gives `slot_id` to `signer`: a registered slot is reassigned, the
    /// next one registered (slots register in order).
    pub async fn assign_slot(&self, slot_id: u64, signer: Address) -> Result<()> {
        let holder = self
            .view(lite_node_protocol::contracts::slotSnapshotterMappingCall { slotId: U256::from(slot_id) })
            .await?;
        if holder == signer {
            return Ok(());
        }
        let (data, what) = if holder == Address::ZERO {
            (registerSlotCall { slotId: U256::from(slot_id), snapshotter: signer }.abi_encode(), "registerSlot")
        } else {
            (reassignSlotCall { slotId: U256::from(slot_id), snapshotter: signer }.abi_encode(), "reassignSlot")
        };
        self.transact(&self.protocol_state(), data, what).await.map(drop)
    }

    /// Makes `validators` the data market's validators (on top of any) and
    /// gives each 100 ETH for its transactions.
    pub async fn register_validators(&self, validators: &[Address]) -> Result<()> {
        let market = address(&self.manifest.data_market, "dataMarket")?;
        let call = lite_node_protocol::contracts::updateAddressesCall {
            dataMarketAddress: market,
            role: 0,
            addrs: validators.to_vec(),
            allowed: vec![true; validators.len()],
        };
        self.transact(&self.protocol_state(), call.abi_encode(), "updateAddresses").await?;
        for v in validators {
            self.call("anvil_setBalance", json!([v, "0x56bc75e2d63100000"])).await?;
        }
        Ok(())
    }

    pub async fn set_total_node_count(&self, n: u64) -> Result<()> {
        let call = setTotalNodeCountCall { n: U256::from(n) };
        self.transact(&self.protocol_state(), call.abi_encode(), "setTotalNodeCount").await.map(drop)
    }

    /// Swaps `amount_in` raw units through pool `pool` (an index into the
    /// manifest's pools), token0 → token1 when `zero_for_one`.
    pub async fn swap(&self, pool: usize, zero_for_one: bool, amount_in: u128) -> Result<()> {
        let p = &self.manifest.pools[pool];
        let (token_in, token_out) = if zero_for_one { (&p.token0, &p.token1) } else { (&p.token1, &p.token0) };
        let params = ExactInputSingleParams {
            tokenIn: address(token_in, "a pool's token")?,
            tokenOut: address(token_out, "a pool's token")?,
            fee: Uint::from(p.fee),
            recipient: address(&self.manifest.deployer, "deployer")?,
            deadline: U256::from(1u64 << 40),
            amountIn: U256::from(amount_in),
            amountOutMinimum: U256::ZERO,
            sqrtPriceLimitX96: Uint::ZERO,
        };
        let data = exactInputSingleCall { params }.abi_encode();
        self.transact(&self.manifest.swap_router.clone(), data, "swap").await.map(drop)
    }
}
