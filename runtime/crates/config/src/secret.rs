//! The signer's key: held only as a `SecretKey`, never shown.

use std::fmt;

use crate::EnvSnapshot;

/// A private key: never printed, never logged.
#[derive(Clone)]
pub struct SecretKey([u8; 32]);

impl SecretKey {
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub(crate) fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A key from 64 hex digits (with or without `0x`), as `name` gives it;
    /// the error names `name` and never echoes the value.
    pub fn parse_hex(name: &str, value: &str) -> Result<Self, String> {
        let hex = value.trim().strip_prefix("0x").unwrap_or(value.trim());
        let mut bytes = [0u8; 32];
        match hex::decode_to_slice(hex, &mut bytes) {
            Ok(()) if bytes != [0; 32] && alloy::signers::local::PrivateKeySigner::from_slice(&bytes).is_ok() => {
                Ok(Self(bytes))
            }
            _ => Err(format!("{name} is not a secp256k1 private key: expected 64 hex digits (with or without 0x)")),
        }
    }

    /// A key from raw bytes, for tests.
    pub fn for_tests(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(<redacted>)")
    }
}

pub(crate) fn secret_key(env: &EnvSnapshot, problems: &mut Vec<String>) -> Option<SecretKey> {
    const KEY: &str = "SIGNER_ACCOUNT_PRIVATE_KEY";
    let Some(value) = env.get(KEY) else {
        return Some(SecretKey([0; 32]));
    };
    let hex = value.strip_prefix("0x").unwrap_or(value);
    let mut bytes = [0u8; 32];
    match hex::decode_to_slice(hex, &mut bytes) {
        Ok(()) if bytes != [0; 32] => Some(SecretKey(bytes)),
        // The value itself is never echoed: it is a secret.
        _ => {
            problems.push(format!("{KEY} is not a private key: expected 64 hex digits (with or without 0x)"));
            None
        }
    }
}
