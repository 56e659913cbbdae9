//! The process-wide TLS crypto provider. Two rustls users live in one
//! process (reqwest and teloxide over HTTPS, the anchor's `wss://`): with no
//! provider installed, rustls guesses, and panics when it cannot. Every TLS
//! user calls this first; the first call installs ring (the only provider
//! in the tree), the others do nothing.

/// Installs ring as the process's TLS provider, once.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
