//! The saved devnet world (`devnet/world/manifest.json`, written by
//! `devnet/build-world.sh`) — the source chain's Uniswap V3 pools and the
//! accounts — and the transactions the devnet sends: swaps for activity on
//! the source chain; slot registrations and validators on the anchor chain,
//! to the market it deployed there (releases are the releaser's).

use std::{path::Path, time::Duration};

use alloy::{
    primitives::{Address, U256, Uint},
    sol,
    sol_types::SolCall,
};
use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::{Value, json};

use lite_node_chain::HttpRpc;
use lite_node_protocol::contracts::{reassignSlotCall, registerSlotCall};

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
/// anvil account on both chains: it holds the pools' tokens on the source
/// chain and owns the market's ProtocolState on the anchor chain).
pub struct Driver {
    pub source: std::sync::Arc<HttpRpc>,
    pub anchor: std::sync::Arc<HttpRpc>,
    pub manifest: Manifest,
    pub protocol_state: Address,
    pub data_market: Address,
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
    /// A call to the anchor chain.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value> {
        self.anchor.call_value(method, params).await.map_err(|e| anyhow!("anchor {method}: {e}"))
    }

    /// A call to the source chain.
    pub async fn source_call(&self, method: &str, params: Value) -> Result<Value> {
        self.source.call_value(method, params).await.map_err(|e| anyhow!("source {method}: {e}"))
    }

    /// The anchor chain's head.
    pub async fn head(&self) -> Result<u64> {
        quantity(&self.call("eth_blockNumber", json!([])).await?)
    }

    /// Sends a transaction to the anchor chain and returns its receipt once
    /// mined; an error if it reverted.
    pub async fn transact(&self, to: &str, data: Vec<u8>, what: &str) -> Result<Value> {
        transact_on(&self.anchor, &self.manifest.deployer, to, data, what).await
    }
}

/// Sends a transaction from `from` (unlocked) through `rpc` and returns its
/// receipt once mined; an error if it reverted.
async fn transact_on(rpc: &HttpRpc, from: &str, to: &str, data: Vec<u8>, what: &str) -> Result<Value> {
    let call = |method: &'static str, params: Value| async move {
        rpc.call_value(method, params).await.map_err(|e| anyhow!("{method}: {e}"))
    };
    {
        let tx = json!({
            "from": from,
            "to": to,
            "data": format!("0x{}", hex::encode(&data)),
            "gas": "0xe4e1c0",
        });
        let hash = call("eth_sendTransaction", json!([tx])).await.with_context(|| what.to_owned())?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let receipt = call("eth_getTransactionReceipt", json!([hash.clone()])).await?;
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
}

impl Driver {
    fn protocol_state(&self) -> String {
        self.protocol_state.to_string()
    }

    /// A view of ProtocolState at the newest block.
    async fn view<C: SolCall>(&self, call: C) -> Result<C::Return> {
        self.anchor.view(self.protocol_state, &call).await.map_err(|e| anyhow!(e))
    }

    /// Registers `slot_id` as a full node of our data market (docs/protocol.md §13).
    pub async fn set_full_node(&self, slot_id: u64) -> Result<()> {
        let market = self.data_market;
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
        let market = self.data_market;
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

    /// Makes `account` a releaser of ProtocolState (as the owner does with
    /// `setReleaser`) and gives it 100 ETH for its releases.
    pub async fn grant_releaser(&self, account: Address) -> Result<()> {
        let call = lite_node_protocol::contracts::setReleaserCall { account, allowed: true };
        self.transact(&self.protocol_state(), call.abi_encode(), "setReleaser").await?;
        self.call("anvil_setBalance", json!([account, "0x56bc75e2d63100000"])).await?;
        Ok(())
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
        transact_on(&self.source, &self.manifest.deployer, &self.manifest.swap_router, data, "swap").await.map(drop)
    }
}
