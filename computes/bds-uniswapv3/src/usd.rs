//! USD prices, when the project configures a source: stablecoins count as
//! exactly one dollar, and any other token is priced through a configured pool
//! that pairs it with a stablecoin, or else through the snapshotted pool's
//! other token. Prices carry 18 fractional digits, truncated.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use crate::math::{self, PRICE_DIGITS, Wide};

/// The `usd` setting: `{"stablecoins": [...], "pools": [...]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsdSource {
    /// Lower-case token addresses worth exactly 1 USD.
    pub stablecoins: Vec<String>,
    /// Lower-case pools that pair a token with a stablecoin.
    pub pools: Vec<String>,
}

impl UsdSource {
    pub fn parse(v: &Value) -> Result<Self, String> {
        let obj: &Map<String, Value> = v.as_object().ok_or("`usd` must be an object with `stablecoins` and `pools`")?;
        if let Some(k) = obj.keys().find(|k| !["stablecoins", "pools"].contains(&k.as_str())) {
            return Err(format!("unknown key `usd.{k}`; known: stablecoins, pools"));
        }
        let list = |key: &str| -> Result<Vec<String>, String> {
            let items = obj
                .get(key)
                .and_then(Value::as_array)
                .ok_or_else(|| format!("`usd.{key}` must be a list of addresses"))?;
            items
                .iter()
                .map(|i| {
                    let s = i.as_str().unwrap_or_default();
                    let h = s.strip_prefix("0x").unwrap_or("");
                    if h.len() == 40 && h.bytes().all(|b| b.is_ascii_hexdigit()) {
                        Ok(s.to_ascii_lowercase())
                    } else {
                        Err(format!("`usd.{key}` has `{i}`, which is not an address"))
                    }
                })
                .collect()
        };
        let source = Self { stablecoins: list("stablecoins")?, pools: list("pools")? };
        if source.stablecoins.is_empty() {
            return Err("`usd.stablecoins` is empty: name at least one token worth 1 USD".into());
        }
        Ok(source)
    }

    pub fn is_stable(&self, token: &str) -> bool {
        self.stablecoins.iter().any(|s| s == token)
    }
}

/// A pool as the price routes see it.
#[derive(Clone, Debug)]
pub struct RoutePool {
    pub token0: String,
    pub token1: String,
    pub dec0: u32,
    pub dec1: u32,
    /// `sqrtPriceX96` per block.
    pub sqrt: BTreeMap<u64, Wide>,
}

impl RoutePool {
    /// Price of `token` (one of the pool's) in the other token, at `block`.
    fn price_of(&self, token: &str, block: u64) -> Wide {
        let sqrt = self.sqrt[&block];
        if token == self.token0 {
            math::price0(sqrt, self.dec0, self.dec1)
        } else {
            math::price1(sqrt, self.dec0, self.dec1)
        }
    }

    fn other(&self, token: &str) -> &str {
        if token == self.token0 { &self.token1 } else { &self.token0 }
    }
}

/// USD price of `token` per block, `PRICE_DIGITS` digits: 1 for a stablecoin;
/// through a route pool pairing it with a stablecoin; else through `pool`
/// (the snapshotted pool) and its other token.
pub fn token_usd(
    source: &UsdSource,
    routes: &HashMap<String, RoutePool>,
    pool_name: &str,
    pool: &RoutePool,
    token: &str,
    blocks: &[u64],
) -> Result<BTreeMap<u64, Wide>, String> {
    let one = math::pow10(PRICE_DIGITS);
    if source.is_stable(token) {
        return Ok(blocks.iter().map(|&b| (b, one)).collect());
    }
    if let Some(route) = source.pools.iter().filter_map(|p| routes.get(p)).find(|p| direct_for(source, p, token)) {
        return Ok(blocks.iter().map(|&b| (b, route.price_of(token, b))).collect());
    }
    let other = pool.other(token).to_owned();
    let via = if source.is_stable(&other) {
        Some(blocks.iter().map(|&b| (b, one)).collect::<BTreeMap<_, _>>())
    } else {
        source
            .pools
            .iter()
            .filter_map(|p| routes.get(p))
            .find(|p| direct_for(source, p, &other))
            .map(|route| blocks.iter().map(|&b| (b, route.price_of(&other, b))).collect())
    };
    let via = via.ok_or_else(|| {
        format!(
            "pool {pool_name}: no USD price for token {token}: add a pool pairing it (or {other}) with one of \
             `usd.stablecoins` to `usd.pools`"
        )
    })?;
    Ok(blocks.iter().map(|&b| (b, pool.price_of(token, b) * via[&b] / one)).collect())
}

fn direct_for(source: &UsdSource, p: &RoutePool, token: &str) -> bool {
    (p.token0 == token || p.token1 == token) && source.is_stable(p.other(token))
}

/// `amount` raw units of a token with `decimals`, in USD at `price` (18 digits).
pub fn value(amount: Wide, decimals: u32, price: Wide) -> Wide {
    amount * price / math::pow10(decimals)
}
