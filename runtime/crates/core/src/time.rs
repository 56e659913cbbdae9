//! Wall-clock time as every room records it: milliseconds (or whole
//! seconds) since the Unix epoch, read in one place. A clock set before
//! 1970 reads as 0.

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    since_epoch().as_millis() as u64
}

/// Whole seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    since_epoch().as_secs()
}

fn since_epoch() -> std::time::Duration {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
}
