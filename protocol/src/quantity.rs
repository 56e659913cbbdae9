//! Ethereum JSON-RPC quantities (`"0x1a"`): the one place the node, the
//! collector and the devnet turn them into numbers.

use serde_json::Value;

/// A value that is not a hex quantity that fits in 64 bits.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected a hex quantity (0x…) that fits in 64 bits, got {0}")]
pub struct QuantityError(pub String);

/// Parses `0x`-prefixed hex (`0x0`, `0x1a`; `0x` alone is zero).
pub fn parse_quantity(text: &str) -> Result<u64, QuantityError> {
    let bad = || QuantityError(format!("`{text}`"));
    let digits = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).ok_or_else(bad)?;
    if digits.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(digits, 16).map_err(|_| bad())
}

/// A JSON-RPC answer that must be a quantity string.
pub fn quantity(value: &Value) -> Result<u64, QuantityError> {
    match value {
        Value::String(s) => parse_quantity(s),
        other => Err(QuantityError(other.to_string())),
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
        assert_eq!(quantity(&Value::from("0x10")), Ok(16));
        let err = quantity(&Value::Null).unwrap_err().to_string();
        assert!(err.contains("got null"), "{err}");
        assert_eq!(to_quantity(255), "0xff");
    }
}
