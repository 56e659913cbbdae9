//! Helpers every lite-node test shares: where fixtures live, throwaway git
//! repositories, the environment a child `lite-node` needs, and polling with a
//! deadline (tests never sleep for a fixed time to wait for something).

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;
use tempfile::TempDir;

pub mod world;

pub use world::{Manifest, World};

/// The root of the lite-node checkout.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// `tests/data/<rel>`.
pub fn data(rel: &str) -> PathBuf {
    workspace_root().join("tests").join("data").join(rel)
}

/// Whether a bench binary runs as a quick check rather than a measurement:
/// `cargo bench` passes `--bench`, `cargo test --bench '*'` (what CI runs) does
/// not. A quick run uses tiny sizes and asserts nothing about time, so a
/// bench that stops compiling or never finishes is caught the day it breaks.
pub fn bench_is_quick() -> bool {
    let quick = !std::env::args().any(|a| a == "--bench");
    MEASURING.store(!quick, std::sync::atomic::Ordering::Relaxed);
    if quick {
        println!("quick run (no --bench): tiny sizes, the figures below mean nothing");
    }
    quick
}

/// Runs `lite-node devnet` (the binary `bin`) with `args` on the project's
/// devnet world, in a throwaway directory and quietly, and returns its
/// `--json` record; panics naming the arguments when it fails.
pub fn devnet_record(bin: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    let status = Command::new(bin)
        .arg("devnet")
        .args(args)
        .arg("--devnet-dir")
        .arg(workspace_root().join("devnet"))
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .arg("--json")
        .arg(&record)
        .env_clear()
        .envs(toolchain_env())
        .envs(compute_build_env())
        .env("LITE_NODE_COMPUTE_CACHE_DIR", dir.path().join("cache"))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("lite-node devnet runs");
    assert!(status.success(), "lite-node devnet {args:?} failed: {status}");
    serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap()
}

/// A devnet record's EpochReleased → acknowledgement latencies (ms), sorted.
pub fn record_latencies(record: &serde_json::Value) -> Vec<f64> {
    let mut latencies: Vec<f64> = record["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["submissions"].as_array().unwrap().iter().map(|s| s["latencyMs"].as_f64().unwrap()))
        .collect();
    latencies.sort_by(f64::total_cmp);
    latencies
}

/// The `q` quantile of sorted values (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Set by [`bench_is_quick`] when a bench measures: its compute packages are
/// then built as an operator's node builds them (release).
static MEASURING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The environment under which tests and benches make the runtime build
/// compute packages: the shared target dir, and cargo's dev profile, unless a
/// bench measures. What the tests check (fetching, building, caching,
/// loading, what a node computes and submits) does not depend on the
/// profile, and most packages a test builds stand at a place of their own,
/// so their crates compile anew each time: in dev, a fraction of the time,
/// and no release build of the dependencies at all.
pub fn compute_build_env() -> [(String, String); 2] {
    [
        ("LITE_NODE_COMPUTE_TARGET_DIR".to_owned(), compute_target_dir().display().to_string()),
        ("LITE_NODE_COMPUTE_PROFILE".to_owned(), compute_profile().to_owned()),
    ]
}

/// The cargo profile [`compute_build_env`] names: `release` while a bench
/// measures, else `dev`.
pub fn compute_profile() -> &'static str {
    if MEASURING.load(std::sync::atomic::Ordering::Relaxed) { "release" } else { "dev" }
}

/// A cargo target dir shared by every test that makes the runtime build a
/// compute package, so dependencies compile once per machine, not per test.
pub fn compute_target_dir() -> PathBuf {
    target_dir().join("compute-builds")
}

/// The checkout's cargo target dir (`CARGO_TARGET_DIR`, else `target/`),
/// which the compute workspace's own tests build into as well.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// `key` from this test process's own environment (`PATH`, `HOME`), empty
/// when unset: the tests read the environment only through this kit.
pub fn host_var(key: &str) -> String {
    std::env::var(key).unwrap_or_default()
}

/// The variables a child process needs to find the toolchain, and nothing
/// else: tests start `lite-node` with a cleared environment plus these.
pub fn toolchain_env() -> Vec<(String, String)> {
    ["PATH", "HOME", "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// What a collector or validator of the devnet's data market is told of its
/// projects: the namespace variables, and a projects.json with the base
/// snapshot, written into `dir`.
pub fn market_env(dir: &Path) -> Vec<(String, String)> {
    let projects = dir.join("market-projects.json");
    let text = r#"{"config": [{"project_type": "baseSnapshot",
        "processor": {"module": "bds_uniswapv3", "class_name": "BaseSnapshotProcessor"}}]}"#;
    fs::write(&projects, text).unwrap();
    [("POWERLOOM_CHAIN", "devnet"), ("NAMESPACE", "UNISWAPV3"), ("SOURCE_CHAIN", "ETH")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .chain([("PROJECTS_CONFIG".to_owned(), projects.display().to_string())])
        .collect()
}

/// Copies a directory tree, skipping build output and hidden entries.
pub fn copy_tree(src: &Path, dest: &Path) {
    fs::create_dir_all(dest).unwrap();
    for entry in fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let name_str = name.to_string_lossy();
        if name_str == "target" || name_str.starts_with('.') {
            continue;
        }
        let to = dest.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to);
        } else {
            fs::copy(entry.path(), to).unwrap();
        }
    }
}

/// Runs git in `dir` with a fixed identity; panics with its output on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=lite-node tests", "-c", "user.email=tests@lite-node.invalid"])
        .args(["-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A throwaway git repository, as a data market would publish one.
#[derive(Debug)]
pub struct GitFixture {
    _dir: TempDir,
    pub path: PathBuf,
    pub branch: String,
    /// The latest commit.
    pub commit: String,
}

impl GitFixture {
    /// A repository on branch `main` holding each `(source dir, path in repo)`.
    pub fn new(trees: &[(&Path, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("repo");
        fs::create_dir_all(&path).unwrap();
        git(&path, &["init", "-q"]);
        for (src, dest) in trees {
            copy_tree(src, &path.join(dest));
        }
        git(&path, &["add", "-A"]);
        git(&path, &["commit", "-q", "-m", "fixture"]);
        let commit = git(&path, &["rev-parse", "HEAD"]);
        Self { _dir: dir, path, branch: "main".into(), commit }
    }

    /// The repository as a `file://` URL.
    pub fn url(&self) -> String {
        format!("file://{}", self.path.display())
    }

    /// Writes `contents` to `rel`, commits, and returns the new commit.
    pub fn commit_file(&mut self, rel: &str, contents: &str) -> String {
        let file = self.path.join(rel);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(file, contents).unwrap();
        git(&self.path, &["add", "-A"]);
        git(&self.path, &["commit", "-q", "-m", "change"]);
        self.commit = git(&self.path, &["rev-parse", "HEAD"]);
        self.commit.clone()
    }
}

/// Polls `check` until it returns `Some`, or panics naming `what` after `timeout`.
pub fn poll_until<T>(what: &str, timeout: Duration, check: impl FnMut() -> Option<T>) -> T {
    poll_paced(what, timeout, Duration::from_millis(5), Duration::from_millis(200), check)
}

/// [`poll_until`] with `pause` between checks, for a check that costs
/// something itself (a `podman` command: a tenth of a second of CPU or more).
pub fn poll_every<T>(what: &str, timeout: Duration, pause: Duration, check: impl FnMut() -> Option<T>) -> T {
    poll_paced(what, timeout, pause, pause, check)
}

/// Polls with a pause that doubles from `first` up to `most`.
fn poll_paced<T>(
    what: &str,
    timeout: Duration,
    first: Duration,
    most: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    let mut pause = first;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(pause);
        pause = (pause * 2).min(most);
    }
}

/// Every file below `dir`, relative, for asserting what a failure left behind.
pub fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                out.extend(files_below(&p).into_iter().map(|f| Path::new(&entry.file_name()).join(f)));
            } else {
                out.push(PathBuf::from(entry.file_name()));
            }
        }
    }
    out.sort();
    out
}

/// The pinned anvil from `devnet/node_modules` (installed by `npm ci` in
/// `devnet/`, which `./init.sh test` runs).
pub fn anvil_bin() -> PathBuf {
    let bin = workspace_root().join("devnet/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil");
    assert!(
        bin.is_file(),
        "anvil is not installed at {}: run `npm ci` in devnet/ (./init.sh test does)",
        bin.display()
    );
    bin
}

/// A real anvil on 127.0.0.1 and a port chosen by the OS; stopped on drop,
/// also when the test panics.
///
/// anvil spills historical states to `$HOME/.foundry/anvil/tmp` and removes
/// them only when it exits cleanly, so each instance gets its own HOME, a
/// temporary directory removed with it: a killed anvil cannot fill the disk.
#[derive(Debug)]
pub struct Anvil {
    child: std::process::Child,
    pub port: u16,
    _home: TempDir,
    /// Ganache (ethereumjs) in anvil's place ([`Anvil::ganache`]): the same
    /// accounts, its own RPC methods for the pool and the miner.
    pub ganache: bool,
}

/// The client a drill's chain runs (issue 55: drills on more than one EVM
/// implementation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    Anvil,
    Ganache,
}

impl Anvil {
    /// A fresh chain of `client` with chain id `chain_id`, anvil's ten
    /// accounts funded on either.
    pub fn of(client: Client, chain_id: u64) -> Self {
        match client {
            Client::Anvil => Self::start_with(&["--chain-id", &chain_id.to_string()]),
            Client::Ganache => Self::ganache(chain_id),
        }
    }

    /// Ganache 7 (devnet/package.json's pin) on a free port with chain id
    /// `chain_id`, its accounts anvil's (the same mnemonic), mining each
    /// transaction as it comes.
    pub fn ganache(chain_id: u64) -> Self {
        let bin = workspace_root().join("devnet/node_modules/.bin/ganache");
        assert!(
            bin.exists(),
            "ganache is not installed at {}: run `npm ci` in devnet/ (./init.sh test does)",
            bin.display()
        );
        let home = tempfile::tempdir().expect("a home for ganache");
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let mut child = Command::new(bin)
            .env("HOME", home.path())
            .args(["--server.host", "127.0.0.1", "--server.port", &port.to_string()])
            .args(["--chain.chainId", &chain_id.to_string(), "--logging.quiet"])
            .args(["--wallet.mnemonic", "test test test test test test test test test test test junk"])
            .args(["--wallet.totalAccounts", "10", "--wallet.defaultBalance", "10000"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("ganache starts");
        let up = (0..600).any(|_| {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
            false
        });
        if !up {
            let _ = child.kill();
            panic!("ganache did not listen on port {port} within 30 s");
        }
        Self { child, port, _home: home, ganache: true }
    }

    /// Mines each transaction as it comes (`true`), or nothing until asked.
    pub fn set_automine(&self, on: bool) {
        if self.ganache {
            self.call(if on { "miner_start" } else { "miner_stop" }, serde_json::json!([]));
        } else {
            self.call("evm_setAutomine", serde_json::json!([on]));
        }
    }

    /// Mines `n` blocks now.
    pub fn mine(&self, n: u64) {
        if self.ganache {
            self.call("evm_mine", serde_json::json!([{"blocks": n}]));
        } else {
            self.call("anvil_mine", serde_json::json!([format!("{n:#x}")]));
        }
    }

    /// Transactions waiting in the pool.
    pub fn pending(&self) -> u64 {
        if self.ganache {
            let content = self.call("txpool_content", serde_json::json!([]));
            content["pending"]
                .as_object()
                .map_or(0, |by| by.values().filter_map(|n| n.as_object()).map(|n| n.len() as u64).sum())
        } else {
            let status = self.call("txpool_status", serde_json::json!([]));
            status["pending"]
                .as_str()
                .and_then(|q| u64::from_str_radix(q.trim_start_matches("0x"), 16).ok())
                .unwrap_or(0)
        }
    }

    /// A JSON-RPC call's result (panics on an error answer).
    pub fn call(&self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let bytes = reqwest::blocking::Client::new()
            .post(self.url())
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .and_then(|r| r.bytes())
            .unwrap_or_else(|e| panic!("{method} on {}: {e}", self.url()));
        let answer: serde_json::Value =
            serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{method} on {}: not JSON ({e})", self.url()));
        assert!(answer.get("error").is_none(), "{method} on {}: {answer}", self.url());
        answer["result"].clone()
    }

    pub fn start() -> Self {
        Self::start_with(&[])
    }

    pub fn start_with(args: &[&str]) -> Self {
        Self::start_on(0, args)
    }

    /// Starts anvil on `port` (0: the OS picks) with extra `args`.
    pub fn start_on(port: u16, args: &[&str]) -> Self {
        use std::io::{BufRead, BufReader, Read};
        let home = tempfile::tempdir().expect("a home for anvil");
        let mut child = Command::new(anvil_bin())
            .env("HOME", home.path())
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("anvil starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads the port, then keeps draining so anvil never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line.strip_prefix("Listening on 127.0.0.1:") {
                    let _ = tx.send(port.trim().parse::<u16>().ok());
                }
            }
        });
        let port = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Some(port)) => port,
            other => {
                let _ = child.kill();
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("anvil did not report its port ({other:?}): {err}");
            }
        };
        Self { child, port, _home: home, ganache: false }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Anvil {
    fn drop(&mut self) {
        // SIGTERM first, so anvil cleans up after itself; SIGKILL if it lingers.
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `lite-node collector` child process; killed on drop.
#[derive(Debug)]
pub struct RunningCollector {
    child: std::process::Child,
    pub port: u16,
    /// Its stdout so far: one `accepted …` or `rejected …: reason` line per submission.
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl RunningCollector {
    /// Starts `bin collector` on a free port, checking submissions against
    /// the ProtocolState and data market named in a node's `env`.
    pub fn start(bin: &Path, env: &[(String, String)]) -> Self {
        Self::start_with(bin, env, 0, &[])
    }

    /// As [`RunningCollector::start`], on `port` (0: any) with extra arguments.
    pub fn start_with(bin: &Path, env: &[(String, String)], port: u16, args: &[&str]) -> Self {
        use std::io::{BufRead, BufReader};
        let get = |k: &str| env.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone()).unwrap_or_default();
        let mut child = Command::new(bin)
            .args(["collector", "--listen", &format!("127.0.0.1:{port}"), "--anchor-rpc"])
            .arg(get("POWERLOOM_RPC_URL"))
            .args(["--protocol-state", &get("PROTOCOL_STATE_CONTRACT"), "--data-market", &get("DATA_MARKET_CONTRACT")])
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("lite-node collector starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("collector listening on ") {
                    let _ = tx.send(addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()));
                }
                sink.lock().unwrap().push(line);
            }
        });
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Some(port)) => Self { child, port, lines },
            other => {
                let _ = child.kill();
                panic!("the collector did not report its port: {other:?}");
            }
        }
    }

    /// The `accepted …` / `rejected …` lines so far.
    pub fn verdicts(&self) -> Vec<String> {
        let lines = self.lines.lock().unwrap();
        lines.iter().filter(|l| l.starts_with("accepted ") || l.starts_with("rejected ")).cloned().collect()
    }
}

impl Drop for RunningCollector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `lite-node run` child process against a world; killed on drop.
pub struct RunningNode {
    /// The collector this node submits to, when the test started one.
    pub collector: Option<RunningCollector>,
    child: std::process::Child,
    pub data: std::path::PathBuf,
    pub stderr: std::path::PathBuf,
}

/// The environment of a node for `slot_id` of the loaded world.
pub fn node_env(world_url: &str, manifest: &Manifest, slot_id: u64) -> Vec<(String, String)> {
    let signer = manifest.slots.iter().find(|(s, _)| *s == slot_id).map(|(_, a)| a.clone()).unwrap_or_default();
    let key = manifest.slots.iter().any(|(s, _)| *s == slot_id).then(|| manifest.signer_key(slot_id).to_owned());
    let mut env = toolchain_env();
    env.extend(
        [
            ("SOURCE_RPC_URL", world_url.to_owned()),
            ("POWERLOOM_RPC_URL", world_url.to_owned()),
            ("SIGNER_ACCOUNT_ADDRESS", signer),
            ("SIGNER_ACCOUNT_PRIVATE_KEY", key.unwrap_or_else(|| format!("0x{}", "42".repeat(32)))),
            ("SLOT_ID", slot_id.to_string()),
            ("PROTOCOL_STATE_CONTRACT", manifest.protocol_state.clone()),
            ("DATA_MARKET_CONTRACT", manifest.data_market.clone()),
            ("NAMESPACE", "UNISWAPV3".into()),
            ("POWERLOOM_CHAIN", "devnet".into()),
            ("SOURCE_CHAIN", "ETH".into()),
            ("PROJECTS_CONFIG", workspace_root().join("projects.json").display().to_string()),
            ("LITE_NODE_START_BLOCK", manifest.head.to_string()),
            ("LITE_NODE_POLL_INTERVAL_MS", "50".into()),
            ("RUST_LOG", "info".into()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    env.extend(compute_build_env());
    env
}

impl RunningNode {
    /// Starts `bin run` with `env` and data dir `data`.
    pub fn start(bin: &Path, env: &[(String, String)], data: &Path) -> Self {
        let stderr = data.with_extension(format!(
            "stderr.{}",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
        ));
        let child = Command::new(bin)
            .arg("run")
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("LITE_NODE_DATA_DIR", data)
            .current_dir(data.parent().unwrap())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("lite-node run starts");
        Self { collector: None, child, data: data.to_path_buf(), stderr }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The node's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak resident memory so far (`VmHWM`), in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// The journal's lines so far.
    pub fn journal(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.data.join("state/epochs.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("journal lines are JSON"))
            .collect()
    }

    /// Waits until the journal has `n` lines (panics with the log otherwise).
    pub fn wait_for_journal(&mut self, n: usize) -> Vec<serde_json::Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let lines = self.journal();
            if lines.len() >= n {
                return lines;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("node exited ({status}) with {} journal lines; log:\n{}", lines.len(), self.log());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "journal has {} of {n} lines; log:\n{}",
                lines.len(),
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Waits until the log contains `text`.
    pub fn wait_for_log(&mut self, text: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !self.log().contains(text) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("node exited ({status}) before logging `{text}`; log:\n{}", self.log());
            }
            assert!(std::time::Instant::now() < deadline, "no `{text}` in the log:\n{}", self.log());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit on its own; returns its exit code.
    pub fn wait_exit(&mut self) -> i32 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(std::time::Instant::now() < deadline, "node did not exit; log:\n{}", self.log());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits: the orderly stop.
    pub fn stop(mut self) -> i32 {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        self.wait_exit()
    }

    /// SIGKILL: a crash.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts one of the Python HTTP servers in `tests/data/` with its store
/// directory; returns it and the port it printed (`listening on PORT`).
fn python_server(script: &str, store: &Path, args: &[&str]) -> (std::process::Child, u16) {
    use std::io::BufRead;
    let mut child = Command::new("python3")
        .arg(data(script))
        .arg(store)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    match line.trim().strip_prefix("listening on ").and_then(|p| p.parse().ok()) {
        Some(port) => (child, port),
        None => {
            let _ = child.kill();
            panic!("{script} did not report its port: {line:?}");
        }
    }
}

/// `tests/data/kubo_standin.py`: a real HTTP server standing in for kubo's
/// `/api/v0/add`, which stores uploads by the CID it computes; killed on drop.
#[derive(Debug)]
pub struct KuboStandin {
    child: std::process::Child,
    pub port: u16,
    store: TempDir,
}

impl KuboStandin {
    /// `args`: `--wrong-cid` answers another CID than the content's.
    pub fn start(args: &[&str]) -> Self {
        let store = tempfile::tempdir().unwrap();
        let (child, port) = python_server("kubo_standin.py", store.path(), args);
        Self { child, port, store }
    }

    /// Where uploads are kept (`<cid>` files and `queries.log`).
    pub fn store(&self) -> &Path {
        self.store.path()
    }
}

impl Drop for KuboStandin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A JSON-RPC proxy in front of `upstream` that refuses every `eth_call`
/// whose data starts with one of `selectors` (`0x` + 8 hex digits), as a
/// provider that cannot answer that call would (`tests/data/rpc_filter.py`).
pub struct RpcFilter {
    child: std::process::Child,
    pub port: u16,
    store: TempDir,
}

impl RpcFilter {
    pub fn start(upstream: &str, selectors: &[&str]) -> Self {
        let store = tempfile::tempdir().unwrap();
        let mut args = vec![upstream];
        args.extend_from_slice(selectors);
        let (child, port) = python_server("rpc_filter.py", store.path(), &args);
        Self { child, port, store }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How many calls it refused so far.
    pub fn refused(&self) -> usize {
        std::fs::read_to_string(self.store.path().join("refused")).map(|s| s.lines().count()).unwrap_or(0)
    }
}

impl Drop for RpcFilter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tests/data/telegram_standin.py`: a real HTTP server standing in for
/// Telegram's Bot API and the reporting service; killed on drop.
#[derive(Debug)]
pub struct TelegramStandin {
    child: std::process::Child,
    pub port: u16,
    store: TempDir,
}

impl TelegramStandin {
    pub fn start() -> Self {
        Self::start_on(0)
    }

    /// On `port` (0: any), e.g. to bring it back where a node expects it.
    pub fn start_on(port: u16) -> Self {
        let store = tempfile::tempdir().unwrap();
        let (child, port) = python_server("telegram_standin.py", store.path(), &["--port", &port.to_string()]);
        Self { child, port, store }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn lines(&self, file: &str) -> Vec<Value> {
        fs::read_to_string(self.store.path().join(file))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Every accepted request so far: `{"path", "body"}`.
    pub fn requests(&self) -> Vec<Value> {
        self.lines("requests.jsonl")
    }

    /// The texts of the Bot API messages so far.
    pub fn messages(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|r| r["path"].as_str().is_some_and(|p| p.starts_with("/bot")))
            .map(|r| r["body"]["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Refused requests (while down, 429, 401): `{"path", "status"}`.
    pub fn refused(&self) -> Vec<Value> {
        self.lines("refused.jsonl")
    }

    fn control(&self, what: &str) {
        let ok = reqwest::blocking::Client::new()
            .post(format!("{}/control/{what}", self.url()))
            .send()
            .map(|r| r.status().is_success())
            .unwrap_or(false);
        assert!(ok, "the stand-in took /control/{what}");
    }

    /// Every request fails with 502 until [`TelegramStandin::up`].
    pub fn down(&self) {
        self.control("down");
    }

    pub fn up(&self) {
        self.control("up");
    }

    /// The next `n` Bot API calls answer 429 with `retry_after` seconds.
    pub fn rate_limit(&self, n: u32, retry_after: u32) {
        self.control(&format!("ratelimit?n={n}&retry_after={retry_after}"));
    }
}

impl Drop for TelegramStandin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed (and reaped) when dropped, so a test that fails
/// half-way leaves nothing running behind it.
pub struct Reaped(pub std::process::Child);

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// A real `redis-server` on a free loopback port with a throwaway directory,
/// no persistence unless asked; stopped on drop.
pub struct RedisServer {
    child: std::process::Child,
    pub port: u16,
    dir: TempDir,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// With extra `redis-server` arguments (e.g. `["--appendonly", "yes"]`).
    pub fn start_with(args: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        Self::spawn(port, tempfile::tempdir().unwrap(), args)
    }

    fn spawn(port: u16, dir: TempDir, args: &[&str]) -> Self {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--dir"])
            .arg(dir.path())
            .args(args)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server runs (./init.sh test installs it)");
        // Answering PING, not `-LOADING` (an append-only file being replayed).
        poll_until("redis-server answering PING", std::time::Duration::from_secs(20), || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
            stream.set_read_timeout(Some(std::time::Duration::from_secs(2))).ok()?;
            stream.write_all(b"PING\r\n").ok()?;
            let mut answer = [0u8; 5];
            stream.read_exact(&mut answer).ok()?;
            (&answer == b"+PONG").then_some(())
        });
        Self { child, port, dir }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id (a bench adds up its CPU).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it and starts it again on the same port and directory (an
    /// append-only file there is replayed).
    pub fn restart(mut self, args: &[&str]) -> Self {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        Self::spawn(self.port, dir, args)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP proxy on a free loopback port to `upstream` (host:port), whose
/// connections a test can cut: [`TcpProxy::cut`] closes every open one and
/// refuses new ones until [`TcpProxy::mend`]. For breaking a WebSocket.
/// [`TcpProxy::refuse_next`] refuses a number of new connections, then
/// passes again: a chain out of reach for exactly so many requests.
pub struct TcpProxy {
    pub port: u16,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
    refusing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    to_refuse: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl TcpProxy {
    pub fn start(upstream: &str) -> Self {
        use std::sync::{Arc, Mutex, atomic::AtomicBool};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let open: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
        let refusing = Arc::new(AtomicBool::new(false));
        let to_refuse = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (upstream, open2, refusing2, to_refuse2) =
            (upstream.to_owned(), open.clone(), refusing.clone(), to_refuse.clone());
        std::thread::spawn(move || {
            use std::sync::atomic::Ordering::SeqCst;
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let counted = to_refuse2.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok();
                if counted || refusing2.load(SeqCst) {
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(&upstream) else { continue };
                let mut kept = open2.lock().unwrap();
                kept.push(client.try_clone().unwrap());
                kept.push(server.try_clone().unwrap());
                drop(kept);
                let pipe = |mut from: std::net::TcpStream, mut to: std::net::TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                };
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        Self { port, open, refusing, to_refuse }
    }

    /// Refuses the next `n` new connections (closed as soon as accepted).
    pub fn refuse_next(&self, n: usize) {
        self.to_refuse.store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// New connections refused by [`TcpProxy::refuse_next`] still to come.
    pub fn refusals_left(&self) -> usize {
        self.to_refuse.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Closes every open connection and refuses new ones.
    pub fn cut(&self) {
        self.refusing.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Accepts connections again.
    pub fn mend(&self) {
        self.refusing.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}
