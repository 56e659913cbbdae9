//! `--operators N`: the market's other operators, as a market of hundreds
//! has them. Each is a slot of its own (registered to its own signer) and a
//! collector of its own on the validators' gossip topic: the first
//! [`REAL_COLLECTORS`] are real `lite-node collector` processes, the rest
//! collectors in this process, each with its own gossip peer.
//!
//! An operator's node is a stand-in: once the full node's snapshot of the
//! operator's pool is accepted for an epoch, it signs that CID (the bytes
//! its own node would compute) for its own slot, as a node would, and sends
//! it to its own collector, asking again while the collector says to retry.
//! What each collector answered is kept with what the devnet's collector
//! answered, so the table, the summary, the record and the validators'
//! verdicts count it.

use std::sync::atomic::{AtomicU64, Ordering};

use lite_node_protocol::{
    eip712,
    proto::{self, SnapshotSubmission, submission_client::SubmissionClient},
};
use tonic::transport::Channel;

use super::*;
use crate::start::{ANCHOR_CHAIN_ID, derived_key, key_bytes};

/// Operators whose collector is a real `lite-node collector` process; the
/// rest run theirs in this process.
pub(crate) const REAL_COLLECTORS: u64 = 20;

/// How long an operator's collector may take to start and reach a validator.
const START_WITHIN: Duration = Duration::from_secs(60);

/// How often the stand-ins look for the full node's snapshots, and how long
/// one waits before asking a collector that said "retry" again.
const LOOK_EVERY: Duration = Duration::from_millis(20);
const RETRY_AFTER: Duration = Duration::from_millis(200);

type Serving = tokio::task::JoinHandle<Result<(), tonic::transport::Error>>;

/// One operator: its slot, signer and collector.
#[derive(Clone)]
pub(crate) struct Operator {
    pub slot_id: u64,
    pub address: Address,
    signer: Arc<eip712::Signer>,
    client: SubmissionClient<Channel>,
}

/// What the operators' collectors answered, over the run.
#[derive(Debug, Default)]
pub(crate) struct Answers {
    pub sent: AtomicU64,
    pub success: AtomicU64,
    pub refused: AtomicU64,
    /// Answers that asked the stand-in to retry (UNAVAILABLE, RESOURCE_EXHAUSTED).
    pub retry: AtomicU64,
    /// Selected operators whose pool the full node never had accepted in time.
    pub nothing_to_sign: AtomicU64,
}

pub(crate) struct Operators {
    pub list: Vec<Operator>,
    processes: Vec<Guarded>,
    /// The in-process collectors: how to stop each, and its server.
    in_process: Vec<(tokio::sync::oneshot::Sender<()>, Serving)>,
    /// How many collectors run in this process (kept once they are stopped).
    in_process_count: usize,
    /// The real collectors' largest peak resident memory, KiB (read at the stop).
    peak_rss_kib: Option<u64>,
    sending: tokio::task::JoinSet<()>,
    pub answers: Arc<Answers>,
    /// What the stand-ins sign with: the anchor's chain, the market.
    scope: (Address, Address),
}

/// Where and how the operators' collectors run.
pub(crate) struct Setting<'a> {
    pub exe: &'a Path,
    pub run_dir: &'a Path,
    pub env: &'a [(String, String)],
    pub anchor: &'a Arc<Anchor>,
    pub anchor_url: &'a str,
    /// The source chain's RPC: an operator's collector checks each slot's
    /// selection (the market's projects list the pools) by its seed blocks.
    pub source_url: &'a str,
    pub selection: &'a Arc<SelectionCheck>,
    pub protocol_state: Address,
    pub data_market: Address,
    pub validators: &'a [validator::DevnetValidator],
    pub window_blocks: u64,
}

impl Operators {
    /// Starts a collector for each of `slots` (already registered to
    /// `derived_key(slot)`'s signer) and returns once each reaches every
    /// validator.
    pub(crate) async fn start(slots: std::ops::RangeInclusive<u64>, s: &Setting<'_>) -> Result<Self> {
        let bootstrap: Vec<String> =
            s.validators.iter().map(|v| format!("/ip4/127.0.0.1/tcp/{}/p2p/{}", v.p2p_port, v.peer_id)).collect();
        let mut processes = Vec::new();
        let mut in_process = Vec::new();
        let mut peers = Vec::new();
        let mut endpoints = Vec::new();
        for (i, slot_id) in slots.clone().enumerate() {
            let dir = s.run_dir.join(format!("operator-{slot_id}"));
            std::fs::create_dir_all(&dir)?;
            if (i as u64) < REAL_COLLECTORS {
                let mut cmd = Command::new(s.exe);
                cmd.env_clear().envs(s.env.iter().map(|(k, v)| (k, v)));
                cmd.args(["collector", "--listen", "127.0.0.1:0", "--status-listen", "127.0.0.1:0"]);
                cmd.args(["--anchor-rpc", s.anchor_url, "--source-rpc", s.source_url]);
                cmd.args(["--protocol-state", &s.protocol_state.to_string()]);
                cmd.args(["--data-market", &s.data_market.to_string()]);
                cmd.args(["--window-blocks", &s.window_blocks.to_string(), "--require-snapshot"]);
                cmd.args(["--p2p-listen", "/ip4/127.0.0.1/tcp/0", "--data-dir", &dir.display().to_string()]);
                if !bootstrap.is_empty() {
                    cmd.args(["--p2p-bootstrap", &bootstrap.join(",")]);
                }
                let log = s.run_dir.join(format!("operator-{slot_id}.log"));
                processes.push(Guarded::spawn(&format!("operator {slot_id}'s collector"), &mut cmd, &log, false)?);
                endpoints.push(None);
            } else {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                endpoints.push(Some(format!("http://{}", listener.local_addr()?)));
                let mut collector = Collector::new(s.anchor.clone(), ANCHOR_CHAIN_ID);
                collector.selection = Some(s.selection.clone());
                collector.window_blocks = s.window_blocks;
                collector.snapshot.required = true;
                if !s.validators.is_empty() {
                    let gossip =
                        lite_node_validator::gossip::Gossip::publisher(lite_node_validator::gossip::Settings {
                            listen: "/ip4/127.0.0.1/tcp/0".parse()?,
                            bootstrap: bootstrap.iter().map(|a| a.parse()).collect::<Result<_, _>>()?,
                            identity: dir.join("p2p-identity.key"),
                            topic: lite_node_validator::gossip::SUBMISSIONS_TOPIC.into(),
                        })?;
                    peers.push(gossip.clone());
                    collector.gossip = Some(gossip);
                }
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let serving = tokio::spawn(collector::serve(
                    collector,
                    listener,
                    Box::pin(async move {
                        let _ = stopped.await;
                    }),
                ));
                in_process.push((stop, serving));
            }
        }
        // The real ones: their ports from their logs, then healthy (a
        // validator connected to hear them).
        let deadline = tokio::time::Instant::now() + START_WITHIN;
        let mut list = Vec::new();
        let mut real = processes.iter_mut();
        for (slot_id, endpoint) in slots.zip(endpoints) {
            let endpoint = match endpoint {
                Some(e) => e,
                None => {
                    let p = real.next().expect("a process for each real collector");
                    wait_healthy(p, deadline).await?
                }
            };
            let key = key_bytes(&derived_key(slot_id))?;
            let signer = eip712::Signer::new(&key, ANCHOR_CHAIN_ID, s.protocol_state)
                .map_err(|e| anyhow!("operator {slot_id}'s key: {e}"))?;
            let client = SubmissionClient::new(Channel::from_shared(endpoint)?.connect_lazy());
            list.push(Operator { slot_id, address: signer.address(), signer: Arc::new(signer), client });
        }
        // The in-process ones: each gossip peer heard by every validator.
        for peer in &peers {
            while peer.peers().await.subscribed < s.validators.len() {
                if tokio::time::Instant::now() > deadline {
                    bail!("an operator's collector did not reach the validators within {} s", START_WITHIN.as_secs());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(Self {
            list,
            processes,
            in_process_count: in_process.len(),
            peak_rss_kib: None,
            in_process,
            sending: tokio::task::JoinSet::new(),
            answers: Arc::default(),
            scope: (s.protocol_state, s.data_market),
        })
    }

    /// For `epoch`, each selected operator's stand-in signs the full node's
    /// accepted snapshots of its pool (`projects` of them, one per pooled
    /// project) and sends them to its collector, in the background, for up
    /// to `patience`; every answer goes into `received`.
    pub(crate) fn send(
        &mut self,
        epoch: &Released,
        full_slot: u64,
        projects: usize,
        received: &Received,
        patience: Duration,
    ) {
        let epoch_id = epoch.assignment.epoch_id;
        let mut pending: Vec<(Operator, String)> = self
            .list
            .iter()
            .filter_map(|o| epoch.assignment.selected.get(&o.slot_id).map(|pool| (o.clone(), pool.to_lowercase())))
            .collect();
        let (received, answers, scope) = (received.clone(), self.answers.clone(), self.scope);
        self.sending.spawn(async move {
            let deadline = tokio::time::Instant::now() + patience;
            let mut sends = tokio::task::JoinSet::new();
            // The full node's accepted snapshots by pool, read once each (the record only grows).
            let (mut read, mut by_pool) = (0, BTreeMap::<String, Vec<SnapshotSubmission>>::new());
            loop {
                {
                    let seen = received.lock().unwrap_or_else(|p| p.into_inner());
                    let new = &seen[read.min(seen.len())..];
                    read = seen.len();
                    for s in new.iter().filter(|s| s.verdict.is_ok()) {
                        let Some(r) = s.submission.request.as_ref() else { continue };
                        if r.epoch_id != epoch_id || r.slot_id != full_slot {
                            continue;
                        }
                        if let Some(pool) = r.project_id.split(':').nth(1) {
                            by_pool.entry(pool.to_owned()).or_default().push(s.submission.clone());
                        }
                    }
                }
                pending.retain(|(operator, pool)| match by_pool.get(pool) {
                    Some(theirs) if theirs.len() >= projects => {
                        for s in theirs {
                            let mine = operator.sign(s, scope);
                            sends.spawn(deliver(operator.clone(), mine, received.clone(), answers.clone(), deadline));
                        }
                        false
                    }
                    _ => true,
                });
                if pending.is_empty() || tokio::time::Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(LOOK_EVERY).await;
            }
            answers.nothing_to_sign.fetch_add(pending.len() as u64, Ordering::Relaxed);
            while sends.join_next().await.is_some() {}
        });
    }

    /// The record's account of the operators.
    pub(crate) fn summary(&self) -> serde_json::Value {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let a = &self.answers;
        json!({
            "count": self.list.len(),
            "collectorProcesses": self.processes.len(),
            "collectorsInProcess": self.in_process_count,
            "sent": n(&a.sent),
            "success": n(&a.success),
            "refused": n(&a.refused),
            "retry": n(&a.retry),
            "nothingToSign": n(&a.nothing_to_sign),
            "collectorPeakRssKiB": self.peak_rss_kib(),
        })
    }

    /// A line for the start of the run.
    pub(crate) fn describe_start(&self) -> String {
        let (first, last) = (self.list.first().map_or(0, |o| o.slot_id), self.list.last().map_or(0, |o| o.slot_id));
        format!(
            "operators: slots {first}..={last}, each with its own collector on the validators' gossip ({} \
             `lite-node collector` processes, {} in this process, every one heard by every validator)",
            self.processes.len(),
            self.in_process_count
        )
    }

    /// Peak resident memory of the real collectors, in KiB (the largest).
    pub(crate) fn peak_rss_kib(&self) -> Option<u64> {
        self.processes.iter().filter_map(Guarded::peak_rss_kib).max().or(self.peak_rss_kib)
    }

    /// A line for the end of the run.
    pub(crate) fn describe(&self) -> String {
        let a = &self.answers;
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "operators: {} ({} collector processes, {} in this process): {} submission(s) sent, {} answered \
             Success, {} refused, {} asked to retry, {} selected slot(s) left with nothing to sign{}",
            self.list.len(),
            self.processes.len(),
            self.in_process_count,
            n(&a.sent),
            n(&a.success),
            n(&a.refused),
            n(&a.retry),
            n(&a.nothing_to_sign),
            self.peak_rss_kib().map_or(String::new(), |k| format!("; collector peak RSS {} MiB", k / 1024)),
        )
    }

    /// Stops every stand-in and collector.
    pub(crate) async fn stop(&mut self) {
        self.peak_rss_kib = self.peak_rss_kib();
        self.sending.abort_all();
        while self.sending.join_next().await.is_some() {}
        for (stop, mut serving) in self.in_process.drain(..) {
            let _ = stop.send(());
            // A client left connected must not keep the devnet from ending.
            if tokio::time::timeout(Duration::from_secs(2), &mut serving).await.is_err() {
                serving.abort();
            }
        }
        tokio::task::block_in_place(|| {
            let mut procs: Vec<&mut Guarded> = self.processes.iter_mut().collect();
            stop_all(&mut procs, Duration::from_secs(10));
        });
    }
}

impl Operator {
    /// `theirs` (the full node's accepted submission) signed for this operator's slot.
    fn sign(
        &self,
        theirs: &SnapshotSubmission,
        (protocol_state, data_market): (Address, Address),
    ) -> SnapshotSubmission {
        let r = theirs.request.as_ref().expect("an accepted submission has a request");
        let request = eip712::Request {
            slot_id: self.slot_id,
            deadline: r.deadline,
            snapshot_cid: r.snapshot_cid.clone(),
            epoch_id: r.epoch_id,
            project_id: r.project_id.clone(),
        };
        SnapshotSubmission {
            request: Some((&request).into()),
            signature: self.signer.sign(&request).expect("a devnet key signs"),
            header: theirs.header.clone(),
            data_market: data_market.to_string(),
            node_version: theirs.node_version.clone(),
            protocol_state: protocol_state.to_string(),
            // The bytes its own node would have computed: the same.
            snapshot: theirs.snapshot.clone(),
        }
    }
}

/// Sends `submission` to the operator's collector until it answers anything
/// but "retry" (or `deadline`), and keeps the answer.
async fn deliver(
    operator: Operator,
    submission: SnapshotSubmission,
    received: Received,
    answers: Arc<Answers>,
    deadline: tokio::time::Instant,
) {
    answers.sent.fetch_add(1, Ordering::Relaxed);
    let mut client = operator.client.clone();
    let verdict = loop {
        match client.submit_snapshot(submission.clone()).await {
            Ok(r) if r.get_ref().message == proto::SUCCESS => break Ok(()),
            Ok(r) => break Err(format!("collector answered `{}`", r.get_ref().message)),
            Err(status)
                if matches!(status.code(), tonic::Code::Unavailable | tonic::Code::ResourceExhausted)
                    && tokio::time::Instant::now() < deadline =>
            {
                answers.retry.fetch_add(1, Ordering::Relaxed);
                tracing::info!("operator {}'s collector: {}; asking again", operator.slot_id, status.message());
                tokio::time::sleep(RETRY_AFTER).await;
            }
            Err(status) => break Err(format!("{}: {}", status.code(), status.message())),
        }
    };
    let counter = if verdict.is_ok() { &answers.success } else { &answers.refused };
    counter.fetch_add(1, Ordering::Relaxed);
    received.lock().unwrap_or_else(|p| p.into_inner()).push(collector::Seen {
        submission,
        verdict,
        reason: None,
        answered_at: SystemTime::now(),
        foreign: false,
        arrivals: 1,
    });
}

/// A real collector's gRPC endpoint, once its `/health` says a validator is
/// connected (or it has no validators to reach).
async fn wait_healthy(p: &mut Guarded, deadline: tokio::time::Instant) -> Result<String> {
    let client = reqwest::Client::new();
    loop {
        let log = std::fs::read_to_string(&p.log).unwrap_or_default();
        let find = |prefix: &str| log.lines().find_map(|l| l.strip_prefix(prefix)).map(str::to_owned);
        if let (Some(grpc), Some(health)) = (find("collector listening on "), find("health on ")) {
            let ok = client.get(&health).send().await.is_ok_and(|r| r.status().is_success());
            if ok {
                return Ok(format!("http://{grpc}"));
            }
        }
        if let Some(status) = p.exited() {
            bail!("{} exited ({status}); the last lines of {}:\n{}", p.name, p.log.display(), p.log_tail(15));
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{} was not healthy within {} s; see {}", p.name, START_WITHIN.as_secs(), p.log.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
