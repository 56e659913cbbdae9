//! Ethereum JSON-RPC quantities (`"0x1a"`): the one place the node, the
//! collector and the devnet turn them into numbers.

use serde_json::Value;

/// A value that is not a hex quantity that fits in the width asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected a hex quantity (0x…) that fits in {bits} bits, got {text}")]
pub struct QuantityError {
    pub text: String,
    pub bits: u32,
}

/// The hex digits of `0x`-prefixed `text` (`0x` alone: none), or `None`.
fn digits(text: &str) -> Option<&str> {
    let digits = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X"))?;
    digits.bytes().all(|b| b.is_ascii_hexdigit()).then_some(digits)
}

/// Parses `0x`-prefixed hex (`0x0`, `0x1a`; `0x` alone is zero) into 64 bits.
pub fn parse_quantity(text: &str) -> Result<u64, QuantityError> {
    parse_wide_quantity(text)
        .and_then(|n| u64::try_from(n).map_err(|_| QuantityError { text: format!("`{text}`"), bits: 64 }))
}

/// Parses `0x`-prefixed hex into 128 bits: fees and gas prices in wei.
pub fn parse_wide_quantity(text: &str) -> Result<u128, QuantityError> {
    let bad = || QuantityError { text: format!("`{text}`"), bits: 128 };
    match digits(text).ok_or_else(bad)? {
        "" => Ok(0),
        digits => u128::from_str_radix(digits, 16).map_err(|_| bad()),
    }
}

/// A JSON-RPC answer that must be a quantity string of 64 bits.
pub fn quantity(value: &Value) -> Result<u64, QuantityError> {
    match value {
        Value::String(s) => parse_quantity(s),
        other => Err(QuantityError { text: other.to_string(), bits: 64 }),
    }
}

/// A JSON-RPC answer that must be a quantity string of 128 bits.
pub fn wide_quantity(value: &Value) -> Result<u128, QuantityError> {
    match value {
        Value::String(s) => parse_wide_quantity(s),
        other => Err(QuantityError { text: other.to_string(), bits: 128 }),
    }
}

/// A block number in the form JSON-RPC requests take it.
pub fn to_quantity(n: u64) -> String {
    format!("0x{n:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_and_garbage_is_named() {
        assert_eq!(parse_quantity("0x0"), Ok(0));
        assert_eq!(parse_quantity("0x"), Ok(0));
        assert_eq!(parse_quantity("0x1A"), Ok(26));
        assert_eq!(parse_quantity("0xffffffffffffffff"), Ok(u64::MAX));
        assert!(parse_quantity("0x10000000000000000").is_err(), "65 bits");
        assert!(parse_quantity("26").is_err(), "no 0x");
        assert!(parse_quantity("0xzz").is_err());
        assert!(parse_quantity("0x+1a").is_err(), "a sign is not a digit");
        assert_eq!(parse_wide_quantity("0x10000000000000000"), Ok(1 << 64));
        assert!(parse_wide_quantity("0x100000000000000000000000000000000").is_err(), "129 bits");
        assert_eq!(wide_quantity(&Value::from("0x3b9aca00")), Ok(1_000_000_000));
        assert!(wide_quantity(&Value::from(7)).unwrap_err().to_string().contains("128 bits"));
        assert_eq!(quantity(&Value::from("0x10")), Ok(16));
        let err = quantity(&Value::Null).unwrap_err().to_string();
        assert!(err.contains("got null"), "{err}");
        assert_eq!(to_quantity(255), "0xff");
    }
}
