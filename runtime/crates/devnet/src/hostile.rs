//! `--hostile N`: peers on the validators' gossip network that attack it
//! for the whole run, each in one of four ways (taken in turn):
//!
//! - **flood** — a slot holder (a slot registered to the attacker's key)
//!   signs submissions for epochs not released yet, far ahead (an opening
//!   burst, then 200 a second): what a validator parks for later is bounded;
//! - **forge** — an anonymous peer sends submissions naming registered
//!   slots, signed by keys that do not hold them;
//! - **replay** — a peer sends the market's accepted submissions again,
//!   each once soon and once past gossipsub's duplicate cache (60 s);
//! - **sink** — a peer subscribes to the topic and then stops reading
//!   (through a relay that stops taking bytes), so what validators queue
//!   for it piles up.
//!
//! What became of them is read from each validator's `/metrics`
//! (`validator_gossip_*`: throttled, rejected, graylisted, disconnected) at
//! the end of the run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use lite_node_protocol::{eip712, proto::SnapshotSubmission};
use lite_node_validator::gossip::{self, Gossip};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::start::{ANCHOR_CHAIN_ID, derived_key, key_bytes};

/// How often each attacker sends a round, and how many messages a round: 200
/// a second, ten times what a validator reads of a peer's useless messages
/// once its budget is spent, and little enough that the attackers, on this
/// machine too, leave the honest parts their CPU.
const ROUND_EVERY: Duration = Duration::from_millis(20);
const PER_ROUND: u64 = 4;

/// What a flood or forge attacker sends at once, signed beforehand, as soon
/// as it reaches every validator: more than a peer's budget of useless
/// messages (`gossip::USELESS_BURST`).
const OPENING_BURST: u64 = 3_000;

/// How far ahead of the last release a flood's epochs go.
const FLOOD_AHEAD: u64 = 100_000;

/// A replay is sent again once this old: past gossipsub's duplicate cache.
const REPLAY_AGAIN_AFTER: Duration = Duration::from_secs(63);

/// The four attacks, taken in turn by the attackers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attack {
    Flood,
    Forge,
    Replay,
    Sink,
}

impl Attack {
    const ALL: [Attack; 4] = [Attack::Flood, Attack::Forge, Attack::Replay, Attack::Sink];

    fn name(self) -> &'static str {
        match self {
            Attack::Flood => "flood (a slot holder, unreleased epochs)",
            Attack::Forge => "forge (registered slots, wrong keys)",
            Attack::Replay => "replay (accepted submissions again)",
            Attack::Sink => "sink (subscribes, stops reading)",
        }
    }

    /// The attack of the `i`-th attacker (from 0).
    pub(crate) fn of(i: u64) -> Self {
        Self::ALL[(i % 4) as usize]
    }
}

/// The attackers.
pub(crate) struct Hostile {
    peers: Vec<(Attack, Gossip)>,
    tasks: tokio::task::JoinSet<()>,
    sent: Arc<AtomicU64>,
    /// Tells the sinks' relays to stop taking bytes.
    stop_reading: Arc<AtomicBool>,
}

/// What the attackers are told of the market.
pub(crate) struct Target<'a> {
    pub run_dir: &'a Path,
    pub validators: &'a [validator::DevnetValidator],
    pub protocol_state: Address,
    pub data_market: Address,
    /// Slots 1..=this hold signers (what a forger names).
    pub registered: u64,
    /// The market's project ids of one pool, by type (`baseSnapshot:{pool}:{ns}`).
    pub project_of: Arc<dyn Fn(&str) -> String + Send + Sync>,
    pub pools: Vec<String>,
    /// The last epoch released, as the devnet moves it.
    pub released: tokio::sync::watch::Receiver<u64>,
    /// What the collectors accepted (what a replayer sends again).
    pub received: Received,
}

impl Hostile {
    /// Starts the attackers; a flood attacker signs for `flood_slots` (each
    /// registered to `derived_key(slot)`), one each, in turn.
    pub(crate) async fn start(count: u64, flood_slots: &[u64], t: Target<'_>) -> Result<Self> {
        let mut hostile = Self {
            peers: Vec::new(),
            tasks: tokio::task::JoinSet::new(),
            sent: Arc::default(),
            stop_reading: Arc::default(),
        };
        let direct: Vec<String> =
            t.validators.iter().map(|v| format!("/ip4/127.0.0.1/tcp/{}/p2p/{}", v.p2p_port, v.peer_id)).collect();
        let mut floods = flood_slots.iter();
        let validators = t.validators.len();
        for i in 0..count {
            let attack = Attack::of(i);
            let dir = t.run_dir.join(format!("hostile-{}", i + 1));
            std::fs::create_dir_all(&dir)?;
            let mut bootstrap = direct.clone();
            if attack == Attack::Sink {
                bootstrap.clear();
                for v in t.validators {
                    let port = stalling_relay(v.p2p_port, hostile.stop_reading.clone(), &mut hostile.tasks).await?;
                    bootstrap.push(format!("/ip4/127.0.0.1/tcp/{port}/p2p/{}", v.peer_id));
                }
            }
            let settings = gossip::Settings {
                listen: "/ip4/127.0.0.1/tcp/0".parse()?,
                bootstrap: bootstrap.iter().map(|a| a.parse()).collect::<Result<_, _>>()?,
                identity: dir.join("p2p-identity.key"),
                topic: gossip::SUBMISSIONS_TOPIC.into(),
            };
            let peer = if attack == Attack::Sink {
                // It takes nothing it is sent, and relays nothing.
                let (deliver, _dropped) = tokio::sync::mpsc::channel(1);
                Gossip::start(settings, Arc::new(|_: &[u8]| gossip::Verdict::Ignore), deliver)?
            } else {
                Gossip::publisher(settings)?
            };
            let sent = hostile.sent.clone();
            let (p, scope) = (peer.clone(), (t.protocol_state, t.data_market));
            match attack {
                Attack::Flood => {
                    let slot = *floods.next().context("a flood attacker without a slot")?;
                    let key = key_bytes(&derived_key(slot))?;
                    let signer = eip712::Signer::new(&key, ANCHOR_CHAIN_ID, t.protocol_state)
                        .map_err(|e| anyhow!("a flood attacker's key: {e}"))?;
                    let (released, project_of, pools) = (t.released.clone(), t.project_of.clone(), t.pools.clone());
                    let make = move |n: u64| {
                        let epoch_id = *released.borrow() + 2 + n % FLOOD_AHEAD;
                        let project = project_of(&pools[(n as usize) % pools.len()]);
                        signed(&signer, slot, epoch_id, project, n, scope)
                    };
                    hostile.tasks.spawn(send_junk(p, validators, sent, make));
                }
                Attack::Forge => {
                    let (released, project_of, pools, registered) =
                        (t.released.clone(), t.project_of.clone(), t.pools.clone(), t.registered);
                    // A key of its own, not the slots'.
                    let key: [u8; 32] = alloy::primitives::keccak256(format!("forger {i}")).0;
                    let signer = eip712::Signer::new(&key, ANCHOR_CHAIN_ID, scope.0)
                        .map_err(|e| anyhow!("a forger's key: {e}"))?;
                    let make = move |n: u64| {
                        let slot = 1 + n % registered.max(1);
                        let project = project_of(&pools[(n as usize) % pools.len()]);
                        signed(&signer, slot, (*released.borrow()).max(1), project, n, scope)
                    };
                    hostile.tasks.spawn(send_junk(p, validators, sent, make));
                }
                Attack::Replay => {
                    let received = t.received.clone();
                    hostile.tasks.spawn(async move {
                        // What was accepted, read once each (the record only
                        // grows), replayed soon and again past the cache.
                        let (mut read, mut again) = (0, std::collections::VecDeque::new());
                        loop {
                            let new: Vec<SnapshotSubmission> = {
                                let seen = received.lock().unwrap_or_else(|p| p.into_inner());
                                let new = seen[read.min(seen.len())..]
                                    .iter()
                                    .filter(|s| s.verdict.is_ok())
                                    .map(|s| s.submission.clone())
                                    .collect();
                                read = seen.len();
                                new
                            };
                            let now = tokio::time::Instant::now();
                            for s in new {
                                let bytes = encoded(&s);
                                if p.publish(bytes.clone()) {
                                    sent.fetch_add(1, Ordering::Relaxed);
                                }
                                again.push_back((now + REPLAY_AGAIN_AFTER, bytes));
                            }
                            while again.front().is_some_and(|(at, _)| *at <= now) {
                                let Some((_, bytes)) = again.pop_front() else { break };
                                if p.publish(bytes) {
                                    sent.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            tokio::time::sleep(ROUND_EVERY).await;
                        }
                    });
                }
                Attack::Sink => {}
            }
            hostile.peers.push((attack, peer));
        }
        // The sinks stop reading once subscribed (what validators send them then piles up).
        let stop_reading = hostile.stop_reading.clone();
        let sinks: Vec<Gossip> =
            hostile.peers.iter().filter(|(a, _)| *a == Attack::Sink).map(|(_, p)| p.clone()).collect();
        hostile.tasks.spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            for sink in &sinks {
                while sink.peers().await.subscribed < validators && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            stop_reading.store(true, Ordering::Relaxed);
            tracing::info!("hostile: {} sink(s) subscribed; they stop reading now", sinks.len());
        });
        Ok(hostile)
    }

    /// A line for the start of the run.
    pub(crate) fn describe_start(&self) -> String {
        let mut by: BTreeMap<&str, usize> = BTreeMap::new();
        for (a, _) in &self.peers {
            *by.entry(a.name()).or_default() += 1;
        }
        let list: Vec<String> = by.iter().map(|(name, n)| format!("{n} {name}")).collect();
        format!("hostile peers on the validators' gossip: {}", list.join(", "))
    }

    /// What the attackers sent, and how many validators each still reaches.
    pub(crate) async fn describe(&self) -> String {
        let mut reach = Vec::new();
        for (_, p) in &self.peers {
            reach.push(p.peers().await.connected);
        }
        format!(
            "hostile peers: {} message(s) published; validators each still connected to, by attacker: {:?}",
            self.sent.load(Ordering::Relaxed),
            reach
        )
    }

    pub(crate) async fn stop(&mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        self.peers.clear();
    }
}

/// `project`'s submission by `signer` for `slot` at `epoch_id`, with a CID
/// of its own (`n`), in gossip form.
fn signed(
    signer: &eip712::Signer,
    slot_id: u64,
    epoch_id: u64,
    project_id: String,
    n: u64,
    (protocol_state, data_market): (Address, Address),
) -> SnapshotSubmission {
    // Bytes of its own (canonical JSON, the CID's): the market requires
    // them, and they pass every check but the ones an attack is caught by.
    let bytes = format!(r#"{{"hostile":{n}}}"#).into_bytes();
    let request = eip712::Request {
        slot_id,
        deadline: u64::MAX >> 1,
        snapshot_cid: lite_node_protocol::cid::cid(&bytes),
        epoch_id,
        project_id,
    };
    SnapshotSubmission {
        request: Some((&request).into()),
        signature: signer.sign(&request).unwrap_or_default(),
        header: String::new(),
        data_market: data_market.to_string().to_lowercase(),
        node_version: None,
        protocol_state: protocol_state.to_string(),
        snapshot: Some(bytes),
    }
}

/// `s` as gossip carries it.
fn encoded(s: &SnapshotSubmission) -> Vec<u8> {
    prost::Message::encode_to_vec(&lite_node_protocol::submission::gossip_form(s).unwrap_or_else(|_| s.clone()))
}

/// A flood or forge attacker: once it reaches every validator, an opening
/// burst signed beforehand, then [`PER_ROUND`] every [`ROUND_EVERY`], each
/// message `make(n)`.
async fn send_junk(
    p: Gossip,
    validators: usize,
    sent: Arc<AtomicU64>,
    make: impl Fn(u64) -> SnapshotSubmission + Send + Sync + 'static,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while p.peers().await.subscribed < validators && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let make = Arc::new(make);
    let signing = make.clone();
    let burst: Vec<Vec<u8>> =
        tokio::task::spawn_blocking(move || (1..=OPENING_BURST).map(|n| encoded(&signing(n))).collect())
            .await
            .unwrap_or_default();
    for message in burst {
        if p.publish(message) {
            sent.fetch_add(1, Ordering::Relaxed);
        }
    }
    let mut n = OPENING_BURST;
    loop {
        for _ in 0..PER_ROUND {
            n += 1;
            if p.publish(encoded(&make(n))) {
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(ROUND_EVERY).await;
    }
}

/// A TCP relay to `to_port` that passes bytes both ways until `stalled`,
/// then takes nothing more from the far side (the sink stops reading); its
/// port.
async fn stalling_relay(to_port: u16, stalled: Arc<AtomicBool>, tasks: &mut tokio::task::JoinSet<()>) -> Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tasks.spawn(async move {
        // Its connections end with it (the devnet's stop).
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((near, _)) = listener.accept().await {
            let Ok(far) = tokio::net::TcpStream::connect(("127.0.0.1", to_port)).await else { continue };
            let (mut near_r, mut near_w) = near.into_split();
            let (mut far_r, mut far_w) = far.into_split();
            connections.spawn(async move {
                let _ = tokio::io::copy(&mut near_r, &mut far_w).await;
            });
            let stalled = stalled.clone();
            connections.spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    while stalled.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    match far_r.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if near_w.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    Ok(port)
}
