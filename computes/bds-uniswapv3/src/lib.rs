//! The BDS Uniswap V3 data market's compute library.
//!
//! It exports the market's slot assignment (`slot-selection`), which the node,
//! observers (`lite-node assignments`) and the collector all call through the
//! compute module, and `BaseSnapshotProcessor` (project type `baseSnapshot`):
//! each epoch, the pool this slot is assigned — or, in full-node mode, every
//! active pool — is snapshotted from the source chain alone.
//!
//! # The base snapshot (one pool, one epoch `begin..=end`)
//! - `address`, `token0`, `token1`: lower-case addresses; `epoch {begin, end}`;
//!   `timestamps {block: seconds}`.
//! - `token0Reserves`, `token1Reserves` `{block: decimal}`: the pool's token
//!   balances (`balanceOf(pool)`) at the end of each block, in token units.
//! - `token0Prices` `{block: decimal}`: token0 priced in token1 from
//!   `slot0().sqrtPriceX96` at the end of the block,
//!   `sqrtP² · 10^dec0 / (2^192 · 10^dec1)`; `token1Prices` the inverse; 18
//!   fractional digits, truncated.
//! - `token0TradeVolume`, `token1TradeVolume`: Σ |amount| over `Swap` logs.
//! - `token0MintBurnVolume`, `token1MintBurnVolume`: Σ amounts over `Mint` and
//!   `Burn` logs. `Collect` logs are read and checked but not counted: they
//!   pay out what Burn and swap fees already account for.
//! - `totalTrade`: Σ |amount1| over swaps (each trade valued on its token1
//!   leg), in token1; `totalFee`: Σ |amount1| · fee / 10^6, in token1;
//!   `totalTradeMintBurn`: Σ (amount1 + amount0 valued at the block's pool
//!   price) over mints and burns, in token1, 18 or more fractional digits.
//! - `previousSnapshots`: `[[epoch, cid], …]` the chain finalized for the pool
//!   in the five epochs before (`Host::previous_snapshots`, read at the
//!   release block: the same on every node).
//! - With a USD source configured (`usd: {stablecoins, pools}`, see `usd.rs`):
//!   `token0PricesUSD`, `token1PricesUSD`, `token0ReservesUSD`,
//!   `token1ReservesUSD` `{block: decimal}`; `token0TradeVolumeUSD`,
//!   `token1TradeVolumeUSD`, `token0MintBurnVolumeUSD`,
//!   `token1MintBurnVolumeUSD`, `totalTradeUSD`, `totalFeeUSD`,
//!   `totalTradeMintBurnUSD` — each event valued at its block's price, 18
//!   fractional digits, truncated per event.
//!
//! Token amounts carry exactly `decimals` fractional digits; all arithmetic is
//! on integers and every value is serialized as a string.

pub mod chain;
pub mod math;
mod processor;
pub mod usd;

pub use processor::{BASE_SNAPSHOT, BaseSnapshotProcessor, Settings};

use lite_node_plugin_api::export_compute_module;

export_compute_module! {
    processors: [BASE_SNAPSHOT],
    assignments: slot_selection::assignments,
}
