//! The process environment, read once ([`EnvSnapshot`]: the variables and an
//! optional env file), and the field readers every config type shares
//! (numbers, RPC URL lists, addresses, the status address), each adding a
//! problem that names the variable rather than failing at the first.
//!
//! Names follow the reference node (docs/protocol.md §7) so operators can switch
//! over with their existing env files. Each config type lives in its own
//! file: `node.rs`, `compute.rs`, `watch.rs`, `compute_run.rs`, `worker.rs`,
//! `secret.rs`.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use alloy::primitives::Address;
use lite_node_core::url::{Url, parse_anchor_url, parse_rpc_url};

use crate::ConfigErrors;

/// The variables `lite-node run` cannot start without, in the order they are
/// reported.
/// The variables every node needs (docs/protocol.md §7; `init.sh` checks the same list).
pub const REQUIRED: &[&str] = &[
    "SOURCE_RPC_URL",
    "SIGNER_ACCOUNT_ADDRESS",
    "SIGNER_ACCOUNT_PRIVATE_KEY",
    "SLOT_ID",
    "POWERLOOM_RPC_URL",
    "PROTOCOL_STATE_CONTRACT",
    "DATA_MARKET_CONTRACT",
    "NAMESPACE",
    "POWERLOOM_CHAIN",
    "SOURCE_CHAIN",
];

/// A snapshot of the environment, taken once; empty values count as unset.
#[derive(Clone, Default)]
pub struct EnvSnapshot {
    vars: BTreeMap<String, String>,
    /// What reading an env file found worth a warning (a repeated key), for
    /// the log once it is set up.
    warnings: Vec<String>,
}

impl EnvSnapshot {
    /// Reads the process environment.
    pub fn from_process() -> Self {
        Self::from_pairs(std::env::vars())
    }

    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        Self { vars: pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect(), warnings: Vec::new() }
    }

    /// Adds the variables of an env file, read as dotenv reads them (quotes,
    /// `export`, `# comments` after a value), for keys not already set: the
    /// process environment wins, as with `docker --env-file` overrides. A key
    /// repeated in the file takes its last value, as Docker does, with a
    /// warning. A line that cannot be read is named by its number (never
    /// echoed: it may hold the signer key).
    pub fn with_env_file(mut self, path: &Path) -> Result<Self, ConfigErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors::one(format!("cannot read env file {}: {e}", path.display())))?;
        let mut problems = Vec::new();
        let mut from_file: BTreeMap<String, (String, usize)> = BTreeMap::new();
        for item in dotenvy::from_read_iter(text.as_bytes()) {
            match item {
                Ok((key, value)) => {
                    let entry = from_file.entry(key).or_insert_with(|| (String::new(), 0));
                    *entry = (value, entry.1 + 1);
                }
                Err(dotenvy::Error::LineParse(line, _)) => {
                    let n = text.lines().position(|l| l.trim() == line.trim()).map_or(0, |i| i + 1);
                    problems.push(format!(
                        "{}:{n}: cannot read this line: expected KEY=VALUE (quote a value with spaces)",
                        path.display()
                    ));
                }
                Err(e) => problems.push(format!("env file {}: {e}", path.display())),
            }
        }
        for (key, (value, times)) in from_file {
            if times > 1 {
                self.warnings
                    .push(format!("env file {}: {key} is set {times} times; the last value is used", path.display()));
            }
            self.vars.entry(key).or_insert(value);
        }
        if problems.is_empty() { Ok(self) } else { Err(ConfigErrors { problems }) }
    }

    /// Warnings from reading env files (shown once logging is set up).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    /// This snapshot with `key` set to `value`.
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.vars.insert(key.to_owned(), value.into());
        self
    }

    /// Every variable, for handing the same environment to a child process.
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub(crate) fn flag(&self, key: &str, problems: &mut Vec<String>) -> bool {
        match self.get(key).map(str::to_ascii_lowercase).as_deref() {
            None | Some("false" | "0" | "no") => false,
            Some("true" | "1" | "yes") => true,
            Some(other) => {
                problems.push(format!("{key}={other} is not a boolean: use true or false"));
                false
            }
        }
    }
}

impl EnvSnapshot {
    /// The cargo to run (`LITE_NODE_CARGO`, default `cargo` on PATH).
    pub fn cargo(&self) -> PathBuf {
        PathBuf::from(self.get("LITE_NODE_CARGO").unwrap_or("cargo"))
    }

    /// The toolchain and compute-package variables, all a devnet's child
    /// nodes inherit (never an operator's alert channels or status port).
    pub fn toolchain_and_compute(&self) -> Vec<(String, String)> {
        const EXACT: [&str; 6] = ["PATH", "HOME", "TMPDIR", "RUSTC", "LITE_NODE_CARGO", "LITE_NODE_PLUGIN_API_DIR"];
        const PREFIXES: [&str; 5] =
            ["CARGO", "RUSTUP_", "LITE_NODE_COMPUTE_", "SNAPSHOTTER_COMPUTE_", "LITE_NODE_DATA_DIR"];
        let inherited = |key: &str| EXACT.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p));
        self.vars().filter(|(k, _)| inherited(k)).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    }

    /// The environment a devnet builds its compute package in, and hands
    /// its nodes: this one, with `data_dir`, and the devnet's own cache and
    /// target under `cache` unless they are set; `LITE_NODE_COMPUTE_DIR`
    /// made absolute (the nodes run in other directories).
    pub fn for_devnet_compute(&self, data_dir: &Path, cache: &Path) -> EnvSnapshot {
        let mut env = self.clone().with("LITE_NODE_DATA_DIR", data_dir.display().to_string());
        if self.get("LITE_NODE_COMPUTE_CACHE_DIR").is_none() {
            env = env.with("LITE_NODE_COMPUTE_CACHE_DIR", cache.join("compute").display().to_string());
        }
        if let Some(dir) = self.get("LITE_NODE_COMPUTE_DIR") {
            env = env.with("LITE_NODE_COMPUTE_DIR", absolute(Path::new(dir)).display().to_string());
        }
        if self.get("LITE_NODE_COMPUTE_TARGET_DIR").is_none() {
            env = env.with("LITE_NODE_COMPUTE_TARGET_DIR", cache.join("target").display().to_string());
        }
        env
    }
}

/// A whole-number variable of at least `min` (`default` when unset).
pub(crate) fn number(env: &EnvSnapshot, key: &str, default: u64, min: u64, problems: &mut Vec<String>) -> u64 {
    match env.get(key).map(str::parse::<u64>) {
        None => default,
        Some(Ok(n)) if n >= min => n,
        Some(_) => {
            problems.push(format!("{key} must be a whole number of at least {min}"));
            default
        }
    }
}

/// `LITE_NODE_RPC_TIMEOUT_SECS` (default 15): how long one JSON-RPC request may take.
pub(crate) fn rpc_timeout(env: &EnvSnapshot, problems: &mut Vec<String>) -> Duration {
    Duration::from_secs(number(env, "LITE_NODE_RPC_TIMEOUT_SECS", 15, 1, problems))
}

/// `STATUS_HOST:STATUS_PORT`, when `STATUS_PORT` is set; the host is
/// loopback unless told otherwise (the image sets 0.0.0.0, so a published
/// port reaches it).
pub(crate) fn status_addr(env: &EnvSnapshot, problems: &mut Vec<String>) -> Option<std::net::SocketAddr> {
    match env.get("STATUS_PORT").map(str::parse::<u16>) {
        None => None,
        Some(Ok(port)) => {
            let host = env.get("STATUS_HOST").unwrap_or("127.0.0.1");
            match host.parse::<std::net::IpAddr>() {
                Ok(ip) => Some(std::net::SocketAddr::new(ip, port)),
                Err(_) => {
                    problems.push(format!("STATUS_HOST {host} is not an IP address (e.g. 0.0.0.0 or 127.0.0.1)"));
                    None
                }
            }
        }
        Some(Err(_)) => {
            problems.push("STATUS_PORT must be a port number (0-65535; 0 picks a free one)".into());
            None
        }
    }
}

pub(crate) fn rpc_urls(env: &EnvSnapshot, key: &str, problems: &mut Vec<String>) -> Vec<Url> {
    let websocket = key == "POWERLOOM_RPC_URL";
    let Some(value) = env.get(key) else {
        return Vec::new();
    };
    let mut urls = Vec::new();
    for text in value.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let parsed = if websocket { parse_anchor_url(text) } else { parse_rpc_url(text) };
        match parsed {
            Ok(url) => urls.push(url),
            Err(e) => problems.push(format!("{key} has {e}; separate several URLs with commas")),
        }
    }
    urls
}

/// `PAIRS_ON_CHAIN` (the market's `pairsOnChain`, default true) and
/// `DATA_API_URLS`: `Some` of the market's data APIs when it finalizes
/// roots only — each epoch's pairs are then read from them, proved against
/// the root on chain (docs/consumers.md) — `None` when its pairs are on
/// chain.
pub(crate) fn pairs_from(env: &EnvSnapshot, problems: &mut Vec<String>) -> Option<Vec<Url>> {
    match env.get("PAIRS_ON_CHAIN").map(str::to_ascii_lowercase).as_deref() {
        None | Some("true" | "1" | "yes") => return None,
        Some("false" | "0" | "no") => {}
        Some(other) => {
            problems.push(format!("PAIRS_ON_CHAIN={other}: use true or false (the market's `pairsOnChain`)"));
            return None;
        }
    }
    let mut urls = Vec::new();
    for text in env.get("DATA_API_URLS").unwrap_or_default().split(',').map(str::trim).filter(|u| !u.is_empty()) {
        match Url::parse(text) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => urls.push(url),
            _ => problems.push(format!(
                "DATA_API_URLS has `{}`, not an http(s) URL (a validator's API, e.g. http://127.0.0.1:9091)",
                lite_node_core::url::redact_url(text)
            )),
        }
    }
    if env.get("DATA_API_URLS").is_none() {
        problems.push(
            "PAIRS_ON_CHAIN=false needs DATA_API_URLS: the market's validators' APIs, where each epoch's pairs are \
             read (`lite-node market env` prints both)"
                .into(),
        );
    }
    Some(urls)
}

/// An address variable, checked once (a missing one is reported by the
/// required list; the zero address stands in until the problems are shown).
pub(crate) fn address(env: &EnvSnapshot, key: &str, problems: &mut Vec<String>) -> Address {
    let Some(value) = env.get(key) else {
        return Address::ZERO;
    };
    let hex = value.strip_prefix("0x").or_else(|| value.strip_prefix("0X")).unwrap_or("");
    match hex.parse::<Address>() {
        Ok(address) if hex.len() == 40 => address,
        _ => {
            problems.push(format!("{key}={value} is not an address: expected 0x followed by 40 hex digits"));
            Address::ZERO
        }
    }
}

pub(crate) fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_files_are_read_as_dotenv_reads_them_and_a_repeated_key_takes_its_last_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".env");
        std::fs::write(
            &file,
            "# the node's settings\n\
             LITE_NODE_POLL_INTERVAL_MS=500   # anchor poll interval\n\
             TELEGRAM_CHAT_ID=123 # the operator's chat\n\
             QUOTED=\"a # not a comment\"\n\
             export EXPORTED=yes\n\
             REPEATED=first\n\
             REPEATED=second\n\
             NAMESPACE=file\n",
        )
        .unwrap();
        let env = EnvSnapshot::from_pairs([("NAMESPACE", "process")]).with_env_file(&file).unwrap();
        assert_eq!(env.get("LITE_NODE_POLL_INTERVAL_MS"), Some("500"), "an inline comment is not part of the value");
        assert_eq!(env.get("TELEGRAM_CHAT_ID"), Some("123"));
        assert_eq!(env.get("QUOTED"), Some("a # not a comment"));
        assert_eq!(env.get("EXPORTED"), Some("yes"));
        assert_eq!(env.get("REPEATED"), Some("second"), "the last value, as docker --env-file");
        assert_eq!(env.get("NAMESPACE"), Some("process"), "the process environment wins");
        assert_eq!(env.warnings().len(), 1, "{:?}", env.warnings());
        assert!(env.warnings()[0].contains("REPEATED is set 2 times"), "{:?}", env.warnings());
    }

    #[test]
    fn an_unreadable_env_file_line_is_named_by_number_and_never_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".env");
        std::fs::write(&file, "A=1\nSIGNER_ACCOUNT_PRIVATE_KEY 0xac0974bec39a17e36ba4a6b4d238ff944bacb478\n").unwrap();
        let Err(err) = EnvSnapshot::default().with_env_file(&file) else { panic!("a line without = is an error") };
        let err = err.to_string();
        assert!(err.contains(".env:2: cannot read this line"), "{err}");
        assert!(!err.contains("ac0974bec"), "the line is not echoed: {err}");
    }
}
