//! Reading Uniswap V3 pools through compute-kit: the pool's and ERC-20's
//! functions and the pool's events are declared with `sol!`, so calldata,
//! answers and logs are encoded and decoded (and checked) by alloy's ABI
//! code. Calls are batched, pinned to their block; logs are read in chunks
//! a provider accepts, with an RPC behind the epoch's last block refused
//! (compute-kit's lag guard). Every failure names the pool and the call; an
//! answer that does not look right (an empty or wider answer, a truncated
//! log, a removed one) is an error, never a silently smaller snapshot.

use std::collections::BTreeMap;

use compute_kit::{
    Address, Batch, Chain, I256, LogFilter, Pending, RawLog, SolEvent, U256, get_logs, get_raw_logs, sol,
};
use lite_node_plugin_api::Host;

use crate::math::Wide;

sol! {
    #![sol(alloy_sol_types = compute_kit::sol_types)]
    event Swap(address indexed sender, address indexed recipient, int256 amount0, int256 amount1,
        uint160 sqrtPriceX96, uint128 liquidity, int24 tick);
    event Mint(address sender, address indexed owner, int24 indexed tickLower, int24 indexed tickUpper,
        uint128 amount, uint256 amount0, uint256 amount1);
    event Burn(address indexed owner, int24 indexed tickLower, int24 indexed tickUpper, uint128 amount,
        uint256 amount0, uint256 amount1);
    event Collect(address indexed owner, address recipient, int24 indexed tickLower, int24 indexed tickUpper,
        uint128 amount0, uint128 amount1);
    event PoolCreated(address indexed token0, address indexed token1, uint24 indexed fee, int24 tickSpacing,
        address pool);

    function slot0() external view returns (uint160 sqrtPriceX96, int24 tick, uint16 observationIndex,
        uint16 observationCardinality, uint16 observationCardinalityNext, uint8 feeProtocol, bool unlocked);
    function token0() external view returns (address);
    function token1() external view returns (address);
    function fee() external view returns (uint24);
    function decimals() external view returns (uint8);
    function balanceOf(address owner) external view returns (uint256);
}

/// An unsigned ABI integer as the arithmetic's integer.
pub fn wide(v: U256) -> Wide {
    Wide::from_limbs_slice(v.as_limbs())
}

fn signed(v: I256) -> (bool, Wide) {
    (v.is_negative(), wide(v.unsigned_abs()))
}

/// `0x` and 40 lower-case hex digits, as snapshots write addresses.
pub fn lower(a: Address) -> String {
    format!("{a:#x}")
}

fn address_of(pool: &str) -> Result<Address, String> {
    compute_kit::address(pool).map_err(|e| format!("pool {pool}: {e}"))
}

fn token_of(pool: &str, token: &str) -> Result<Address, String> {
    compute_kit::address(token).map_err(|e| format!("pool {pool}: token {e}"))
}

/// A pool's tokens and fee, read at `at`.
pub struct PoolInfo {
    pub token0: String,
    pub token1: String,
    pub fee: u32,
}

/// `token0()`, `token1()` and `fee()` of each pool at block `at`, one batch.
pub fn pool_infos(host: &Host<'_>, pools: &[String], at: u64) -> Result<Vec<PoolInfo>, String> {
    let mut batch = Batch::new(Chain::Source, at);
    let pending = pools
        .iter()
        .map(|p| {
            let a = address_of(p)?;
            Ok((batch.add(a, &token0Call {}), batch.add(a, &token1Call {}), batch.add(a, &feeCall {})))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let answers = batch.send(host)?;
    pools
        .iter()
        .zip(pending)
        .map(|(p, (t0, t1, fee))| {
            let named = |e: String| format!("pool {p}: {e}");
            Ok(PoolInfo {
                token0: lower(answers.get(t0).map_err(named)?),
                token1: lower(answers.get(t1).map_err(named)?),
                fee: answers.get(fee).map_err(named)?.to::<u32>(),
            })
        })
        .collect()
}

/// `decimals()` of each `(pool, token)` at block `at`, one batch (the pool
/// names a failure).
pub fn decimals_of(host: &Host<'_>, tokens: &[(String, String)], at: u64) -> Result<Vec<u8>, String> {
    let mut batch = Batch::new(Chain::Source, at);
    let pending = tokens
        .iter()
        .map(|(p, t)| Ok(batch.add(token_of(p, t)?, &decimalsCall {})))
        .collect::<Result<Vec<Pending<decimalsCall>>, String>>()?;
    let answers = batch.send(host)?;
    tokens.iter().zip(pending).map(|((p, _), d)| answers.get(d).map_err(|e| format!("pool {p}: {e}"))).collect()
}

/// A pool at the end of a block: its price and its two token balances.
#[derive(Clone, Debug)]
pub struct PoolState {
    pub sqrt_price: Wide,
    pub balance0: Wide,
    pub balance1: Wide,
}

/// What [`states`] read.
pub struct States {
    /// `[pool][block]`.
    pub pools: Vec<Vec<PoolState>>,
    /// Each USD route pool's `sqrtPriceX96`, `[route][block]`.
    pub routes: Vec<Vec<Wide>>,
}

/// Each pool's state (`(pool, token0, token1)`) and each route pool's price
/// at each of `blocks`: one batch per block.
pub fn states(
    host: &Host<'_>,
    pools: &[(&str, &str, &str)],
    routes: &[String],
    blocks: &[u64],
) -> Result<States, String> {
    // Parsed once, asked at every block.
    let targets = pools
        .iter()
        .map(|&(p, t0, t1)| Ok((address_of(p)?, token_of(p, t0)?, token_of(p, t1)?)))
        .collect::<Result<Vec<_>, String>>()?;
    let route_addresses = routes.iter().map(|r| address_of(r)).collect::<Result<Vec<_>, String>>()?;
    let mut state = vec![Vec::with_capacity(blocks.len()); pools.len()];
    let mut route = vec![Vec::with_capacity(blocks.len()); routes.len()];
    for &b in blocks {
        let mut batch = Batch::new(Chain::Source, b);
        let pending: Vec<_> = targets
            .iter()
            .map(|&(pool, t0, t1)| {
                (
                    batch.add(pool, &slot0Call {}),
                    batch.add(t0, &balanceOfCall { owner: pool }),
                    batch.add(t1, &balanceOfCall { owner: pool }),
                )
            })
            .collect();
        let route_pending: Vec<_> = route_addresses.iter().map(|&r| batch.add(r, &slot0Call {})).collect();
        let answers = batch.send(host)?;
        for ((&(p, _, _), (s, b0, b1)), out) in pools.iter().zip(pending).zip(&mut state) {
            let named = |e: String| format!("pool {p}: {e}");
            out.push(PoolState {
                sqrt_price: wide(U256::from(answers.get(s).map_err(named)?.sqrtPriceX96)),
                balance0: wide(answers.get(b0).map_err(named)?),
                balance1: wide(answers.get(b1).map_err(named)?),
            });
        }
        for ((r, s), out) in routes.iter().zip(route_pending).zip(&mut route) {
            let price = answers.get(s).map_err(|e| format!("pool {r} (USD route): {e}"))?;
            out.push(wide(U256::from(price.sqrtPriceX96)));
        }
    }
    Ok(States { pools: state, routes: route })
}

/// A decoded pool event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Signed amounts `(negative, magnitude)`: positive flows into the pool.
    Swap {
        amount0: (bool, Wide),
        amount1: (bool, Wide),
    },
    Mint {
        amount0: Wide,
        amount1: Wide,
    },
    Burn {
        amount0: Wide,
        amount1: Wide,
    },
    Collect {
        amount0: Wide,
        amount1: Wide,
    },
}

/// A pool event at its block, in chain order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolEvent {
    pub block: u64,
    pub log_index: u64,
    pub event: Event,
}

fn decoded(log: &RawLog) -> Result<Event, String> {
    let topic = log.topic0();
    Ok(if topic == Some(Swap::SIGNATURE_HASH) {
        let e = log.decode::<Swap>()?.event;
        Event::Swap { amount0: signed(e.amount0), amount1: signed(e.amount1) }
    } else if topic == Some(Mint::SIGNATURE_HASH) {
        let e = log.decode::<Mint>()?.event;
        Event::Mint { amount0: wide(e.amount0), amount1: wide(e.amount1) }
    } else if topic == Some(Burn::SIGNATURE_HASH) {
        let e = log.decode::<Burn>()?.event;
        Event::Burn { amount0: wide(e.amount0), amount1: wide(e.amount1) }
    } else {
        let e = log.decode::<Collect>()?.event;
        Event::Collect { amount0: Wide::from(e.amount0), amount1: Wide::from(e.amount1) }
    })
}

/// Swap, Mint, Burn and Collect logs of `pools` (lower-case) in
/// `begin..=end`, grouped by pool, each pool's in chain order.
pub fn pool_events(
    host: &Host<'_>,
    pools: &[&str],
    begin: u64,
    end: u64,
) -> Result<BTreeMap<String, Vec<PoolEvent>>, String> {
    let who = if pools.len() == 1 { format!("pool {}", pools[0]) } else { format!("{} pools", pools.len()) };
    let addresses = pools.iter().map(|p| address_of(p)).collect::<Result<Vec<_>, String>>()?;
    let filter = LogFilter {
        from: begin,
        to: end,
        addresses,
        topic0: vec![Swap::SIGNATURE_HASH, Mint::SIGNATURE_HASH, Burn::SIGNATURE_HASH, Collect::SIGNATURE_HASH],
        blocks_per_call: compute_kit::LOG_BLOCKS,
    };
    let logs = get_raw_logs(host, Chain::Source, &filter).map_err(|e| format!("{who}: {e}"))?;
    let mut by_pool: BTreeMap<String, Vec<PoolEvent>> = pools.iter().map(|p| (p.to_string(), Vec::new())).collect();
    for log in &logs {
        let pool = lower(log.address);
        let event = decoded(log).map_err(|e| format!("pool {pool}: eth_getLogs {begin}..={end}: {e}"))?;
        // The filter named these pools only, and compute-kit checked each log against it.
        if let Some(events) = by_pool.get_mut(&pool) {
            events.push(PoolEvent { block: log.block_number, log_index: log.log_index, event });
        }
    }
    Ok(by_pool)
}

/// Pools created by `factory` in `from..=to` (`PoolCreated` logs), lower-case.
pub fn created_pools(host: &Host<'_>, factory: &str, from: u64, to: u64) -> Result<Vec<String>, String> {
    let named = |e: String| format!("factory {factory}: {e}");
    let factory_address = compute_kit::address(factory).map_err(named)?;
    let created = get_logs::<PoolCreated>(host, Chain::Source, &[factory_address], from, to).map_err(named)?;
    Ok(created.into_iter().map(|log| lower(log.event.pool)).collect())
}
