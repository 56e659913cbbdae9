//! Exact decimal arithmetic on integers: amounts are raw token units scaled
//! by `10^decimals`; prices come from `sqrtPriceX96` without ever touching a
//! float. Results are decimal strings with a fixed number of fractional
//! digits, truncated toward zero where the exact value has more.

use ruint::Uint;

/// Wide enough for `sqrtPriceX96² · 10^(decimals + 18)` with 77-decimal tokens.
pub type Wide = Uint<1024, 16>;

/// Fractional digits of prices and of values converted between tokens.
pub const PRICE_DIGITS: u32 = 18;

/// Token decimals above this are refused (10^77 is the largest power of ten
/// below 2^256).
pub const MAX_DECIMALS: u32 = 77;

pub fn pow10(n: u32) -> Wide {
    Wide::from(10u8).pow(Wide::from(n))
}

/// `2^192`, the square of the Q64.96 fixed-point one.
pub fn q192() -> Wide {
    Wide::from(1u8) << 192
}

/// `value / 10^scale` as a decimal string with exactly `scale` fractional digits.
pub fn decimal(value: Wide, scale: u32) -> String {
    let digits = value.to_string();
    if scale == 0 {
        return digits;
    }
    let scale = scale as usize;
    let padded =
        if digits.len() <= scale { format!("{}{digits}", "0".repeat(scale + 1 - digits.len())) } else { digits };
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{int}.{frac}")
}

/// Price of token0 in token1, `PRICE_DIGITS` digits:
/// `sqrtP² · 10^dec0 / (2^192 · 10^dec1)`.
pub fn price0(sqrt_price_x96: Wide, dec0: u32, dec1: u32) -> Wide {
    (sqrt_price_x96 * sqrt_price_x96 * pow10(dec0 + PRICE_DIGITS)) / (q192() * pow10(dec1))
}

/// Price of token1 in token0, `PRICE_DIGITS` digits:
/// `2^192 · 10^dec1 / (sqrtP² · 10^dec0)`. `sqrtP` must not be zero.
pub fn price1(sqrt_price_x96: Wide, dec0: u32, dec1: u32) -> Wide {
    (q192() * pow10(dec1 + PRICE_DIGITS)) / (sqrt_price_x96 * sqrt_price_x96 * pow10(dec0))
}

/// An amount of token0 (raw units) valued in token1 at `sqrtP`, scaled by
/// `10^scale`: `amount0 · sqrtP² · 10^scale / (2^192 · 10^dec1)`.
pub fn token0_in_token1(amount0: Wide, sqrt_price_x96: Wide, dec1: u32, scale: u32) -> Wide {
    (amount0 * sqrt_price_x96 * sqrt_price_x96 * pow10(scale)) / (q192() * pow10(dec1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact_strings() {
        assert_eq!(decimal(Wide::from(125_061_643u64), 8), "1.25061643");
        assert_eq!(decimal(Wide::from(5u8), 3), "0.005");
        assert_eq!(decimal(Wide::ZERO, 2), "0.00");
        assert_eq!(decimal(Wide::from(42u8), 0), "42");
        assert_eq!(decimal("62532078512042075697".parse().unwrap(), 18), "62.532078512042075697");
    }

    #[test]
    fn prices_from_sqrt_price() {
        let one = Wide::from(1u8) << 96; // sqrtP = 1: price 1 with equal decimals
        assert_eq!(decimal(price0(one, 18, 18), PRICE_DIGITS), "1.000000000000000000");
        assert_eq!(decimal(price1(one, 18, 18), PRICE_DIGITS), "1.000000000000000000");
        // token0 with 6 decimals, token1 with 18: a raw ratio of 1 is 10^-12 per unit.
        assert_eq!(decimal(price0(one, 6, 18), PRICE_DIGITS), "0.000000000001000000");
        let two = Wide::from(2u8) << 96; // raw price 4
        assert_eq!(decimal(price1(two, 18, 18), PRICE_DIGITS), "0.250000000000000000");
        assert_eq!(decimal(token0_in_token1(pow10(18), two, 18, 18), 18), "4.000000000000000000");
    }
}
