//! Wall-clock time as the node records it: milliseconds since the Unix
//! epoch, the one unit every journal line, ledger entry and status field uses.

/// Milliseconds since the Unix epoch (0 on a clock set before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
