//! The signer's key: held only as a `SecretKey`, never shown.

use std::{fmt, path::Path};

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

/// The signer's key: `SIGNER_ACCOUNT_PRIVATE_KEY`, or an encrypted keystore
/// (`SIGNER_KEYSTORE_FILE`, Web3 Secret Storage v3 as Ethereum clients
/// write it) opened with the password in `SIGNER_KEYSTORE_PASSWORD_FILE`.
/// Neither the key nor the password is ever echoed; a problem names the
/// variable and the file. With neither set, a zero key stands in so the
/// missing-variable report names `SIGNER_ACCOUNT_PRIVATE_KEY` with the rest.
pub(crate) fn secret_key(env: &EnvSnapshot, problems: &mut Vec<String>) -> Option<SecretKey> {
    const KEY: &str = "SIGNER_ACCOUNT_PRIVATE_KEY";
    match (env.get(KEY), env.get(KEYSTORE)) {
        (Some(_), Some(_)) => {
            problems.push(format!("{KEY} and {KEYSTORE} are both set: give the signer's key one way"));
            None
        }
        (None, Some(keystore)) => match open_keystore(Path::new(keystore), env.get(KEYSTORE_PASSWORD)) {
            Ok(key) => Some(key),
            Err(problem) => {
                problems.push(problem);
                None
            }
        },
        (None, None) => Some(SecretKey([0; 32])),
        (Some(value), None) => {
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
    }
}

/// The variable naming the signer's encrypted keystore file.
pub const KEYSTORE: &str = "SIGNER_KEYSTORE_FILE";
/// The variable naming the file that holds the keystore's password.
pub const KEYSTORE_PASSWORD: &str = "SIGNER_KEYSTORE_PASSWORD_FILE";

/// Where the signer's key came from, for messages about it.
pub(crate) fn key_source(env: &EnvSnapshot) -> String {
    match env.get(KEYSTORE) {
        Some(path) => format!("the key in {KEYSTORE} {path}"),
        None => "SIGNER_ACCOUNT_PRIVATE_KEY".to_owned(),
    }
}

/// Decrypts a keystore with the password from `password_file`: the file's
/// text with one trailing newline taken off (as `echo pw > file` writes it).
fn open_keystore(keystore: &Path, password_file: Option<&str>) -> Result<SecretKey, String> {
    let shown = keystore.display();
    let Some(password_file) = password_file else {
        return Err(format!(
            "{KEYSTORE} {shown} needs its password: set {KEYSTORE_PASSWORD} to a file that holds it (mode 600)"
        ));
    };
    let text = std::fs::read(keystore).map_err(|e| format!("{KEYSTORE} {shown}: cannot read it: {e}"))?;
    let password = std::fs::read(password_file)
        .map_err(|e| format!("{KEYSTORE_PASSWORD} {password_file}: cannot read the keystore's password: {e}"))?;
    let password = password.strip_suffix(b"\n").unwrap_or(&password);
    let password = password.strip_suffix(b"\r").unwrap_or(password);
    let not_a_keystore = || {
        format!("{KEYSTORE} {shown} is not an encrypted keystore (Web3 Secret Storage JSON with a `crypto` section)")
    };
    let mut json: serde_json::Value = serde_json::from_slice(&text).map_err(|_| not_a_keystore())?;
    // Older writers (geth before 1.9, ethers) spell the section `Crypto`;
    // the decrypting crate reads `crypto` only, so such a file is read from
    // a respelled copy (its contents are encrypted: the copy holds no secret).
    let respelled = match json.as_object_mut() {
        Some(o) if o.contains_key("crypto") => None,
        Some(o) => match o.remove("Crypto") {
            Some(section) => {
                o.insert("crypto".into(), section);
                let mut copy = tempfile::NamedTempFile::new()
                    .map_err(|e| format!("{KEYSTORE} {shown}: cannot make a temporary copy to read it: {e}"))?;
                std::io::Write::write_all(&mut copy, json.to_string().as_bytes())
                    .map_err(|e| format!("{KEYSTORE} {shown}: cannot make a temporary copy to read it: {e}"))?;
                Some(copy)
            }
            None => return Err(not_a_keystore()),
        },
        None => return Err(not_a_keystore()),
    };
    let path = respelled.as_ref().map_or(keystore, |copy| copy.path());
    use alloy::signers::local::{LocalSignerError, PrivateKeySigner};
    match PrivateKeySigner::decrypt_keystore(path, password) {
        Ok(signer) => {
            let bytes: [u8; 32] = signer.credential().to_bytes().into();
            Ok(SecretKey(bytes))
        }
        // eth-keystore's only wrong-password answer; its text never holds the password.
        Err(LocalSignerError::EthKeystoreError(e)) if e.to_string().contains("Mac Mismatch") => Err(format!(
            "{KEYSTORE} {shown}: the password in {KEYSTORE_PASSWORD} {password_file} does not open it \
             (wrong password, or the password of another keystore)"
        )),
        Err(e) => Err(format!("{KEYSTORE} {shown}: cannot decrypt it: {e}")),
    }
}
