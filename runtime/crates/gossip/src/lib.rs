//! The validators' network (docs/protocol.md §11): libp2p gossipsub over
//! TCP with noise and yamux. Each peer keeps its identity (an ed25519 key)
//! in its data dir, dials the peers of a bootstrap list, and joins one
//! topic. Every message that arrives is judged by the caller's check
//! *before* gossipsub relays it: accepted messages are relayed and handed
//! over, rejected ones are dropped and count against the peer that sent
//! them (its score falls until its messages are ignored), and messages the
//! receiver cannot take now are ignored — neither relayed nor held against
//! the sender.
//!
//! A payload over [`MAX_PAYLOAD`] is rejected unread; a sender's
//! rejections score it down to [`GRAYLIST`], past which it is ignored. A
//! check that needs a slower answer (a chain read) says [`Verdict::Hold`]:
//! the payload is handed over with a [`Ticket`] on which the receiver
//! settles it, and only then is it relayed (a ticket dropped unsettled
//! ignores it). Nothing of the node, the chain or Redis is known here: the
//! validator's gateway brings its check, and a collector only publishes
//! ([`Gossip::publisher`]): it never subscribes, so it takes no place in any
//! validator's mesh (validators mesh with validators) and is sent nothing,
//! and every message it publishes is flooded to each connected validator.
//! However many collectors a market has, each reaches every validator it
//! is connected to ([`Peers`]).
//!
//! A [`Gossip`] is a handle on a task that owns the libp2p swarm: publishing
//! never waits for the mesh (a full outbox is counted and dropped), and the
//! task ends when every handle is dropped.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use futures_util::StreamExt;
pub use libp2p::{Multiaddr, PeerId};
use libp2p::{
    Swarm, gossipsub,
    identity::Keypair,
    multiaddr::Protocol,
    noise,
    swarm::{NetworkBehaviour, SwarmEvent},
    tcp, yamux,
};
use tokio::sync::{mpsc, oneshot, watch};

/// The topic snapshot submissions travel on (the protocol's name for it).
pub const SUBMISSIONS_TOPIC: &str = "/powerloom/snapshot-submissions/all";

/// The largest message payload taken: a signed submission with its fields
/// at their caps is well under it (the validator's gRPC limit too).
pub const MAX_PAYLOAD: usize = 2 * 1024;

/// The largest frame read from a peer (gossipsub's `max_transmit_size`).
/// Not the message cap — that is [`MAX_PAYLOAD`], checked before anything
/// is relayed — because the codec compares it with what it has buffered, and
/// a burst of small messages buffers 8 KiB at a time: a cap of 3 KiB closed
/// the stream in the middle of every burst, and the rest of the burst was
/// lost (found with 50 submissions an epoch through one collector).
const MAX_FRAME: usize = 64 * 1024;

/// Messages waiting to be published; past it, [`Gossip::publish`] drops
/// and counts.
const OUTBOX: usize = 4096;

/// Messages queued per connection before gossipsub drops them: room for
/// an epoch of 10,000 projects and its relays, and ~15 MB for a peer that
/// takes nothing, until it is disconnected ([`SLOW_HEARTBEATS`], [`SLOW_RUNS`]).
const CONNECTION_QUEUE: usize = 20_000;

/// How long a message to forward may wait in a connection's queue: long
/// enough that nothing is dropped for waiting behind an epoch's burst on a
/// busy machine, short enough that a peer reading slowly is sent what is
/// still of use.
const FORWARD_AT_MOST: Duration = Duration::from_secs(30);

/// How long a message this peer publishes may wait (a collector's burst).
const PUBLISH_AT_MOST: Duration = Duration::from_secs(60);

/// Heartbeats in a row (~10 s) in which messages queued for a peer failed
/// (its queue full, or messages expired in it) before it is disconnected: a
/// peer that subscribes and stops reading holds one connection queue for
/// seconds, not for good; a busy peer dropping some of a burst is not cut
/// off, and the bootstrap peers (the market's validators) never are.
pub const SLOW_HEARTBEATS: u32 = 15;

/// Separate runs of failing heartbeats within [`SLOW_WINDOW`] after which a
/// peer is disconnected too: a message queued behind a connection that
/// takes nothing never expires, so such a peer's queue fails only while
/// messages come — in a market, at each epoch's burst, never
/// [`SLOW_HEARTBEATS`] in a row — and it would hold a full queue for good.
pub const SLOW_RUNS: usize = 4;
pub const SLOW_WINDOW: Duration = Duration::from_secs(60);

/// Connections taken from other peers at once (hundreds of operators'
/// collectors, each with one connection to each validator), per peer, and
/// still being set up: past them a connection is refused.
pub const MAX_INCOMING: u32 = 1_024;
const MAX_PER_PEER: u32 = 2;
const MAX_PENDING_INCOMING: u32 = 128;

/// Each peer's budget of messages of no use to the receiver (rejected,
/// ignored or unwanted): a burst of this many, then [`USELESS_PER_SECOND`].
/// Past it the peer's messages are ignored unread — no signature recovered,
/// nothing asked of the chain — until the budget refills. Accepted messages
/// cost nothing, so an honest collector or validator never runs out; a
/// stranger sending well-signed messages nobody wants (for slots it does
/// not hold, replays, epochs long closed) costs the receiver this much CPU
/// at most, whatever its score.
pub const USELESS_BURST: f64 = 1_000.0;
pub const USELESS_PER_SECOND: f64 = 20.0;

/// A peer graylisted this many times within [`BAN_WINDOW`] (by what it sent:
/// an honest peer never is, since what only a lagging view would refuse
/// costs it no score) is disconnected and its connections refused for
/// [`BAN_FOR`]; never a bootstrap peer.
pub const BAN_AFTER: usize = 3;
pub const BAN_WINDOW: Duration = Duration::from_secs(600);
pub const BAN_FOR: Duration = Duration::from_secs(600);

/// How often unconnected bootstrap peers are dialled again.
const REDIAL_EVERY: Duration = Duration::from_secs(5);

/// What a received message is, as the caller's check sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Well-formed and signed: relay it and hand it over.
    Accept,
    /// Junk (malformed, a bad signature, too large): dropped, and held
    /// against the peer that sent it.
    Reject(String),
    /// Not junk, but not taken now (the receiver is full): neither relayed
    /// nor held against anyone.
    Ignore,
    /// Well-formed and signed, but of no use (its deadline passed, its slot
    /// holds no signer, its epoch is far from released): neither relayed
    /// nor handed over, and counted lightly against the peer that sent it
    /// ([`UNWANTED_WEIGHT`]), so a peer can send a few but not a flood.
    Unwanted(String),
    /// Not decided without a slower check: handed over with a [`Ticket`],
    /// neither relayed nor dropped until the receiver gives its verdict on
    /// the ticket (a ticket dropped without one ignores the message).
    Hold,
}

/// A message handed over, and when its check held it, the ticket on which
/// the receiver gives the verdict that decides whether it is relayed.
#[derive(Debug)]
pub struct Delivery {
    pub data: Vec<u8>,
    pub ticket: Option<Ticket>,
}

/// A held message's verdict, still to be given ([`Ticket::settle`]); dropped
/// without one, the message is ignored.
#[derive(Debug)]
pub struct Ticket {
    message: gossipsub::MessageId,
    source: PeerId,
    commands: mpsc::Sender<Command>,
    stats: Arc<Stats>,
    settled: bool,
}

impl Ticket {
    /// Gives the held message its verdict: accepted, it is relayed;
    /// rejected, it is dropped and held against the peer that sent it.
    /// `Hold` is taken as `Ignore`.
    pub fn settle(mut self, verdict: &Verdict) {
        self.give(verdict);
    }

    fn give(&mut self, verdict: &Verdict) {
        self.settled = true;
        let (acceptance, counter) = match verdict {
            Verdict::Accept => (gossipsub::MessageAcceptance::Accept, &self.stats.accepted),
            Verdict::Reject(_) => (gossipsub::MessageAcceptance::Reject, &self.stats.rejected),
            Verdict::Ignore | Verdict::Hold | Verdict::Unwanted(_) => {
                (gossipsub::MessageAcceptance::Ignore, &self.stats.ignored)
            }
        };
        Stats::add(counter);
        if let Verdict::Unwanted(_) = verdict {
            Stats::add(&self.stats.unwanted);
            let _ = self.commands.try_send(Command::Unwanted(self.source));
        }
        let report = Command::Report(self.message.clone(), self.source, acceptance);
        // The peer's inbox full (or the peer gone): the message stays
        // unvalidated, never relayed, and leaves gossipsub's cache in a few
        // heartbeats.
        let _ = self.commands.try_send(report);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.settled {
            self.give(&Verdict::Ignore);
        }
    }
}

/// Judges a received payload before anything is done with it.
pub type Check = Arc<dyn Fn(&[u8]) -> Verdict + Send + Sync>;

/// Where a peer listens, who it knows first, and where its identity lives.
#[derive(Clone, Debug)]
pub struct Settings {
    /// E.g. `/ip4/127.0.0.1/tcp/0` (a free port).
    pub listen: Multiaddr,
    /// Peers to dial, each `/ip4/…/tcp/…/p2p/<peer id>`.
    pub bootstrap: Vec<Multiaddr>,
    /// The identity file (created on first start).
    pub identity: PathBuf,
    pub topic: String,
}

/// What went wrong starting a peer: each names the setting to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the gossip identity {path}: {why}")]
    Identity { path: PathBuf, why: String },
    #[error("bootstrap address {addr}: {why}")]
    Bootstrap { addr: String, why: String },
    #[error("gossip listen address {addr}: {why}")]
    Listen { addr: String, why: String },
    #[error("gossip: {0}")]
    Setup(String),
}

/// Counters of one peer's traffic.
#[derive(Debug, Default)]
pub struct Stats {
    /// Messages this peer published.
    pub published: AtomicU64,
    /// Messages that could not be published: the outbox was full, or no
    /// peer was connected to take them.
    pub unpublished: AtomicU64,
    /// Received messages accepted (relayed, handed over).
    pub accepted: AtomicU64,
    /// Received messages the check held (handed over with a ticket); each
    /// is counted again once settled (accepted, rejected or ignored).
    pub held: AtomicU64,
    /// Received messages the check rejected (dropped, held against the sender).
    pub rejected: AtomicU64,
    /// Received messages ignored (not for the receiver, or no room).
    pub ignored: AtomicU64,
    /// Of those, the ones ignored because the receiver had no room: lost
    /// to it (gossip does not send them again).
    pub full: AtomicU64,
    /// Of those, the ones the check found of no use ([`Verdict::Unwanted`]).
    pub unwanted: AtomicU64,
    /// Of the ignored, the ones not read at all: their sender had spent its
    /// budget of useless messages ([`USELESS_BURST`]).
    pub throttled: AtomicU64,
    /// Peers disconnected for taking nothing of what was queued for them
    /// ([`SLOW_HEARTBEATS`]).
    pub slow_disconnected: AtomicU64,
    /// Times a peer's score fell below [`GRAYLIST`] (by what it sent).
    pub graylistings: AtomicU64,
    /// Peers banned for being graylisted [`BAN_AFTER`] times.
    pub banned: AtomicU64,
}

impl Stats {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
enum Command {
    Publish(Vec<u8>, Option<oneshot::Sender<Result<(), String>>>),
    Report(gossipsub::MessageId, PeerId, gossipsub::MessageAcceptance),
    Peers(oneshot::Sender<Peers>),
    Score(PeerId, oneshot::Sender<Option<f64>>),
    Unwanted(PeerId),
}

/// Who a peer can reach now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peers {
    /// Connected gossip peers whose messages are read (not graylisted).
    pub connected: usize,
    /// Of those, the peers subscribed to the topic that a publish reaches
    /// (score at least [`PUBLISH_THRESHOLD`]): a collector's validators.
    pub subscribed: usize,
    /// Peers in this peer's mesh for the topic (always 0 for a publisher).
    pub mesh: usize,
    /// Connected peers whose score fell below [`GRAYLIST`]: nothing they
    /// send is read, and nothing is sent to them.
    pub graylisted: usize,
}

/// A running peer.
#[derive(Clone, Debug)]
pub struct Gossip {
    commands: mpsc::Sender<Command>,
    peer_id: PeerId,
    listening: watch::Receiver<Vec<Multiaddr>>,
    stats: Arc<Stats>,
}

#[derive(NetworkBehaviour)]
struct Behaviour {
    limits: libp2p::connection_limits::Behaviour,
    /// Peers banned for being graylisted again and again ([`BAN_AFTER`]).
    banned: libp2p::allow_block_list::Behaviour<libp2p::allow_block_list::BlockedPeers>,
    gossipsub: gossipsub::Behaviour,
}

/// Reads the peer's key from `path`, or makes one and saves it there (owner
/// read-only) when there is none.
pub fn load_or_create_identity(path: &Path) -> Result<Keypair, Error> {
    let fail = |why: String| Error::Identity { path: path.to_owned(), why };
    match std::fs::read(path) {
        Ok(bytes) => Keypair::from_protobuf_encoding(&bytes).map_err(|e| {
            fail(format!("not a libp2p key ({e}); move it away to make a new identity (the peer id changes)"))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = Keypair::generate_ed25519();
            let bytes = key.to_protobuf_encoding().map_err(|e| fail(e.to_string()))?;
            lite_node_core::atomic_file::write(path, &bytes).map_err(|e| fail(format!("cannot be written: {e}")))?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| fail(format!("cannot be made private: {e}")))?;
            }
            Ok(key)
        }
        Err(e) => Err(fail(format!("cannot be read: {e}"))),
    }
}

/// Checks settings before anything starts: every bootstrap address names
/// its peer, and an identity file that exists is a key.
pub fn check(bootstrap: &[Multiaddr], identity: &Path) -> Result<(), Error> {
    check_peers(bootstrap)?;
    if identity.exists() {
        load_or_create_identity(identity)?;
    }
    Ok(())
}

/// Checks that every address names its peer (ends in `/p2p/<peer id>`).
pub fn check_peers(bootstrap: &[Multiaddr]) -> Result<(), Error> {
    for addr in bootstrap {
        if peer_of(addr).is_none() {
            return Err(Error::Bootstrap {
                addr: addr.to_string(),
                why: "it names no peer: end it with /p2p/<peer id>".into(),
            });
        }
    }
    Ok(())
}

/// The peer id a bootstrap address names (its `/p2p/…` part).
fn peer_of(addr: &Multiaddr) -> Option<PeerId> {
    addr.iter().find_map(|p| match p {
        Protocol::P2p(id) => Some(id),
        _ => None,
    })
}

fn gossipsub_config() -> Result<gossipsub::Config, Error> {
    gossipsub::ConfigBuilder::default()
        .heartbeat_interval(Duration::from_millis(700))
        // Messages carry no author, sequence number or signature of their
        // own: a submission is signed by its slot's signer (EIP-712), which
        // every peer checks before relaying, and peers are scored by the
        // connection they came over (authenticated by noise). An ed25519
        // signature on every message, checked on every copy, was the largest
        // cost of the mesh (a fifth of its CPU) and proved nothing more.
        .validation_mode(gossipsub::ValidationMode::Anonymous)
        // Nothing is relayed before the check has judged it.
        .validate_messages()
        .max_transmit_size(MAX_FRAME)
        // An epoch's burst (a full node's submissions for every pool, each
        // relayed to every peer) is queued whole and not dropped for
        // waiting: with the defaults (5,000 queued, 5 s to publish, 1 s to
        // forward), a collector on a busy machine dropped half of a
        // 1,000-pool epoch before it reached any validator, and each drop
        // counted against the peer as "slow" until the mesh fell apart
        // (found on a 1,000-pool devnet). The queue's length bounds the
        // memory; a peer that stops reading is disconnected.
        .connection_handler_queue_len(CONNECTION_QUEUE)
        .forward_queue_duration(FORWARD_AT_MOST)
        .publish_queue_duration(PUBLISH_AT_MOST)
        // One signed submission is one message, however it is respelled
        // (another header, another spelling of its signature): a replay is a
        // duplicate, dropped before any check.
        .message_id_fn(|m: &gossipsub::Message| {
            gossipsub::MessageId::from(lite_node_protocol::submission::gossip_message_id(&m.data).to_vec())
        })
        // Below `mesh_n_low` (5) peers a heartbeat grafts every subscribed
        // peer it knows: a small network of validators is one full mesh,
        // whoever dialled whom.
        .mesh_outbound_min(0)
        // A publish goes to every connected peer subscribed to the topic, not
        // to a sample of the mesh: a collector is in no mesh (it does not
        // subscribe), and this is how it reaches every validator.
        .flood_publish(true)
        // IDONTWANT (gossipsub 1.2) is never announced: the threshold is past
        // the largest frame. Each announcement received scans the sender's
        // whole send queue (libp2p-gossipsub 0.50): announcing every
        // submission took the mesh benchmark from 2,668 to 1,559
        // submissions/s, and at the default threshold (1,000 bytes) every
        // submission carrying its snapshot bytes (~1.2 KB) was announced.
        .idontwant_message_size_threshold(MAX_FRAME + 1)
        .build()
        .map_err(|e| Error::Setup(format!("gossipsub configuration: {e}")))
}

/// The score below which a peer's messages are ignored: with each rejected
/// message counting −10 × (rejections)², three rejections put a peer there.
pub const GRAYLIST: f64 = -80.0;

/// The score below which a peer is no longer published to.
pub const PUBLISH_THRESHOLD: f64 = -50.0;

/// What one unwanted message ([`Verdict::Unwanted`]) costs its sender, in
/// score: the count of a peer's unwanted messages, decaying by half every
/// [`UNWANTED_DECAY_EVERY`], times this (gossipsub's application score,
/// weighted 1). A peer sending ~30 a second stays above [`GRAYLIST`]; a
/// flood of hundreds a second is graylisted within a second.
pub const UNWANTED_WEIGHT: f64 = -1.0;

/// How often the unwanted-message counts are halved.
pub const UNWANTED_DECAY_EVERY: Duration = Duration::from_secs(1);

/// Peers whose messages were rejected lose score until they are
/// graylisted: what they send is then ignored.
fn scoring(topic: &gossipsub::IdentTopic) -> (gossipsub::PeerScoreParams, gossipsub::PeerScoreThresholds) {
    let mut params = gossipsub::PeerScoreParams::default();
    // Only junk counts against a peer. The default topic parameters also
    // penalize a mesh peer that delivers fewer than 20 messages in a
    // window; submissions come in bursts at each epoch (a collector is quiet
    // between them), so that graylisted every honest collector within
    // seconds and the validators ignored all it sent. And nothing counts
    // for a peer: by default each millisecond in the mesh earns a point (up
    // to 3,600) and each first delivery one more, so a flooder connected
    // for an hour could send ~18 rejected messages before it was ignored —
    // and, sending one a second (the count decays by 0.9 a second), never
    // be (a test saw a flooder at +577 after three rejections, 577 ms in).
    let topic_params = gossipsub::TopicScoreParams {
        topic_weight: 1.0,
        invalid_message_deliveries_weight: -10.0,
        invalid_message_deliveries_decay: 0.9,
        mesh_message_deliveries_weight: 0.0,
        mesh_failure_penalty_weight: 0.0,
        time_in_mesh_weight: 0.0,
        first_message_deliveries_weight: 0.0,
        ..gossipsub::TopicScoreParams::default()
    };
    params.topics.insert(topic.hash(), topic_params);
    // Many peers behind one address are not misbehaving: the operators'
    // collectors on one host or behind one NAT, a devnet on loopback. By
    // default more than ten peers on one IP cost every peer on it
    // −5 × (n − 10)², which emptied every validator's mesh (and, past 14,
    // graylisted them all) when ten collectors joined a devnet's three
    // validators. What a peer sends is judged by its signature instead.
    params.ip_colocation_factor_weight = 0.0;
    // Unwanted messages count through the application score (set per peer
    // from its decaying count).
    params.app_specific_weight = 1.0;
    // A peer slow to take what is forwarded to it (a burst on a busy
    // machine) is not misbehaving: by default each message it could not take
    // in time cost it 0.2, and a burst of 1,000 graylisted every peer.
    params.slow_peer_weight = 0.0;
    let thresholds = gossipsub::PeerScoreThresholds {
        gossip_threshold: -10.0,
        publish_threshold: PUBLISH_THRESHOLD,
        graylist_threshold: GRAYLIST,
        ..gossipsub::PeerScoreThresholds::default()
    };
    (params, thresholds)
}

impl Gossip {
    /// Starts a peer: its identity from `settings.identity`, listening on
    /// `settings.listen`, dialling the bootstrap peers, subscribed to the
    /// topic. Accepted and held messages go to `deliver` (whose free room
    /// decides between taking and ignoring).
    pub fn start(settings: Settings, check: Check, deliver: mpsc::Sender<Delivery>) -> Result<Self, Error> {
        Self::begin(settings, check, deliver, true)
    }

    fn begin(
        settings: Settings,
        check: Check,
        deliver: mpsc::Sender<Delivery>,
        subscribe: bool,
    ) -> Result<Self, Error> {
        let mut bootstrap = Vec::new();
        for addr in &settings.bootstrap {
            let peer = peer_of(addr).ok_or_else(|| Error::Bootstrap {
                addr: addr.to_string(),
                why: "it names no peer: end it with /p2p/<peer id>".into(),
            })?;
            bootstrap.push((peer, addr.clone()));
        }
        let key = load_or_create_identity(&settings.identity)?;
        let topic = gossipsub::IdentTopic::new(settings.topic.clone());
        let config = gossipsub_config()?;
        let mut swarm = libp2p::SwarmBuilder::with_existing_identity(key)
            .with_tokio()
            .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)
            .map_err(|e| Error::Setup(format!("TCP transport: {e}")))?
            .with_behaviour(|_key| {
                let mut gossipsub = gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Anonymous, config)
                    .map_err(|e| format!("gossipsub: {e}"))?;
                let (params, thresholds) = scoring(&topic);
                gossipsub.with_peer_score(params, thresholds).map_err(|e| format!("gossipsub scoring: {e}"))?;
                let limits = libp2p::connection_limits::ConnectionLimits::default()
                    .with_max_established_incoming(Some(MAX_INCOMING))
                    .with_max_pending_incoming(Some(MAX_PENDING_INCOMING))
                    .with_max_established_per_peer(Some(MAX_PER_PEER));
                Ok(Behaviour {
                    limits: libp2p::connection_limits::Behaviour::new(limits),
                    banned: Default::default(),
                    gossipsub,
                })
            })
            .map_err(|e| Error::Setup(e.to_string()))?
            .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
            .build();
        if subscribe {
            swarm
                .behaviour_mut()
                .gossipsub
                .subscribe(&topic)
                .map_err(|e| Error::Setup(format!("subscribing to {topic}: {e}")))?;
        }
        swarm
            .listen_on(settings.listen.clone())
            .map_err(|e| Error::Listen { addr: settings.listen.to_string(), why: e.to_string() })?;
        let peer_id = *swarm.local_peer_id();
        let (commands, inbox) = mpsc::channel(OUTBOX);
        let (listening_tx, listening) = watch::channel(Vec::new());
        let stats = Arc::new(Stats::default());
        let task = Task {
            swarm,
            topic,
            check,
            deliver,
            bootstrap,
            stats: stats.clone(),
            listening: listening_tx,
            commands: commands.downgrade(),
            unwanted: Default::default(),
            useless: Default::default(),
            slow: Default::default(),
            graylisted: Default::default(),
            banned: Default::default(),
        };
        tokio::spawn(task.run(inbox));
        Ok(Self { commands, peer_id, listening, stats })
    }

    /// A peer that only publishes (a collector): it does not subscribe, so
    /// it holds no place in any mesh and is sent nothing; what it publishes
    /// is flooded to every connected validator ([`Peers::subscribed`]).
    pub fn publisher(settings: Settings) -> Result<Self, Error> {
        let (deliver, _nothing_comes_back) = mpsc::channel(1);
        Self::begin(settings, Arc::new(|_: &[u8]| Verdict::Ignore), deliver, false)
    }

    pub fn peer_id(&self) -> PeerId {
        self.peer_id
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Publishes `payload` without waiting for the mesh; false (and
    /// counted) when the outbox is full.
    pub fn publish(&self, payload: Vec<u8>) -> bool {
        let sent = self.commands.try_send(Command::Publish(payload, None)).is_ok();
        if !sent {
            Stats::add(&self.stats.unpublished);
        }
        sent
    }

    /// Publishes `payload` and says whether gossipsub took it for at least
    /// one peer (the same payload again counts as taken): `Err` when the
    /// outbox is full, no subscribed peer is connected, or every peer's
    /// queue is full — a caller that answers for delivery can refuse.
    pub async fn publish_confirmed(&self, payload: Vec<u8>) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        if self.commands.try_send(Command::Publish(payload, Some(tx))).is_err() {
            Stats::add(&self.stats.unpublished);
            return Err("the gossip outbox is full".into());
        }
        rx.await.unwrap_or_else(|_| Err("the gossip peer stopped".into()))
    }

    /// The addresses this peer listens on, each ending in its `/p2p/` id
    /// (what another peer's bootstrap list names); waits for the first.
    pub async fn listening(&self) -> Vec<Multiaddr> {
        let mut rx = self.listening.clone();
        let addrs = rx.wait_for(|a| !a.is_empty()).await.map(|a| a.clone()).unwrap_or_default();
        addrs.into_iter().map(|a| a.with(Protocol::P2p(self.peer_id))).collect()
    }

    /// The score this peer gives `peer` (negative after junk; below
    /// [`GRAYLIST`] its messages are ignored), if it knows it.
    pub async fn score_of(&self, peer: PeerId) -> Option<f64> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(Command::Score(peer, tx)).await.ok()?;
        rx.await.ok().flatten()
    }

    /// Who this peer can reach now (nobody once its task is gone).
    pub async fn peers(&self) -> Peers {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Peers(tx)).await.is_err() {
            return Peers::default();
        }
        rx.await.unwrap_or_default()
    }

    /// Peers in this peer's mesh for the topic.
    pub async fn mesh_peers(&self) -> usize {
        self.peers().await.mesh
    }
}

struct Task {
    swarm: Swarm<Behaviour>,
    topic: gossipsub::IdentTopic,
    check: Check,
    deliver: mpsc::Sender<Delivery>,
    bootstrap: Vec<(PeerId, Multiaddr)>,
    /// For the tickets of held messages (weak: the task still ends when
    /// every handle is gone).
    commands: mpsc::WeakSender<Command>,
    stats: Arc<Stats>,
    listening: watch::Sender<Vec<Multiaddr>>,
    /// Per peer, its unwanted messages (decaying): its application score.
    unwanted: std::collections::HashMap<PeerId, f64>,
    /// Per peer, what is left of its budget of useless messages, and when
    /// it was last refilled.
    useless: std::collections::HashMap<PeerId, (f64, std::time::Instant)>,
    /// Per peer, the heartbeats in a row it could not take its messages,
    /// the last of them, and when each run of them within [`SLOW_WINDOW`] began.
    slow: std::collections::HashMap<PeerId, (u32, std::time::Instant, Vec<std::time::Instant>)>,
    /// Per peer, when it was graylisted within the last [`BAN_WINDOW`].
    graylisted: std::collections::HashMap<PeerId, Vec<std::time::Instant>>,
    /// Banned peers, until when.
    banned: std::collections::HashMap<PeerId, std::time::Instant>,
}

impl Task {
    async fn run(mut self, mut inbox: mpsc::Receiver<Command>) {
        let mut redial = tokio::time::interval(REDIAL_EVERY);
        let mut decay = tokio::time::interval(UNWANTED_DECAY_EVERY);
        loop {
            tokio::select! {
                command = inbox.recv() => match command {
                    Some(Command::Publish(payload, answer)) => {
                        let published = self.publish(payload);
                        if let Some(answer) = answer {
                            let _ = answer.send(published);
                        }
                    }
                    Some(Command::Report(message, source, acceptance)) => self.report(&message, &source, acceptance),
                    Some(Command::Peers(answer)) => {
                        let _ = answer.send(self.peers());
                    }
                    Some(Command::Score(peer, answer)) => {
                        let _ = answer.send(self.swarm.behaviour().gossipsub.peer_score(&peer));
                    }
                    Some(Command::Unwanted(peer)) => self.unwanted_from(peer),
                    // Every handle is gone: the peer stops.
                    None => return,
                },
                event = self.swarm.select_next_some() => self.on_event(event),
                _ = redial.tick() => self.dial_bootstrap(),
                _ = decay.tick() => {
                    self.decay_unwanted();
                    self.lift_bans();
                }
            }
        }
    }

    /// Who is reachable: what `publish` sends to and what is read.
    fn peers(&self) -> Peers {
        let gossipsub = &self.swarm.behaviour().gossipsub;
        let topic = self.topic.hash();
        // A connection that speaks no gossipsub (its kind is not exported,
        // only its name) carries no submission.
        let unsupported: std::collections::HashSet<&PeerId> = gossipsub
            .peer_protocol()
            .filter(|(_, kind)| kind.as_static_ref() == "Not Supported")
            .map(|(peer, _)| peer)
            .collect();
        let mut peers = Peers { mesh: gossipsub.mesh_peers(&topic).count(), ..Peers::default() };
        for (peer, topics) in gossipsub.all_peers() {
            let score = gossipsub.peer_score(peer).unwrap_or(0.0);
            if unsupported.contains(peer) {
                continue;
            }
            if score < GRAYLIST {
                peers.graylisted += 1;
                continue;
            }
            peers.connected += 1;
            if topics.contains(&&topic) && score >= PUBLISH_THRESHOLD {
                peers.subscribed += 1;
            }
        }
        peers
    }

    fn publish(&mut self, payload: Vec<u8>) -> Result<(), String> {
        match self.swarm.behaviour_mut().gossipsub.publish(self.topic.clone(), payload) {
            Ok(_) => {
                Stats::add(&self.stats.published);
                Ok(())
            }
            // The same payload again is not a new message.
            Err(gossipsub::PublishError::Duplicate) => Ok(()),
            Err(e) => {
                Stats::add(&self.stats.unpublished);
                tracing::debug!("gossip: not published: {e}");
                Err(format!("not published: {e}"))
            }
        }
    }

    fn report(&mut self, message: &gossipsub::MessageId, source: &PeerId, acceptance: gossipsub::MessageAcceptance) {
        // Only a rejection lowers a score: the others cost no score lookup
        // (one for every accepted message on the hot path).
        let rejected = matches!(acceptance, gossipsub::MessageAcceptance::Reject);
        let before = if rejected { self.swarm.behaviour().gossipsub.peer_score(source) } else { None };
        self.swarm.behaviour_mut().gossipsub.report_message_validation_result(message, source, acceptance);
        if rejected {
            self.count_graylisting(source, before);
        }
    }

    /// Counts `peer` graylisted when its score, `before` something it sent
    /// was scored, was not below [`GRAYLIST`] and now is; the
    /// [`BAN_AFTER`]th time within [`BAN_WINDOW`], bans it for [`BAN_FOR`]
    /// (never a bootstrap peer).
    fn count_graylisting(&mut self, peer: &PeerId, before: Option<f64>) {
        let after = self.swarm.behaviour().gossipsub.peer_score(peer);
        if before.unwrap_or(0.0) < GRAYLIST || after.is_none_or(|s| s >= GRAYLIST) {
            return;
        }
        Stats::add(&self.stats.graylistings);
        let now = std::time::Instant::now();
        let times = self.graylisted.entry(*peer).or_default();
        times.retain(|t| now.duration_since(*t) < BAN_WINDOW);
        times.push(now);
        let again = times.len();
        if again < BAN_AFTER || self.bootstrap.iter().any(|(known, _)| known == peer) {
            tracing::info!("gossip: {peer} graylisted (score {:.0}): what it sends is ignored", after.unwrap_or(0.0));
            return;
        }
        self.graylisted.remove(peer);
        self.banned.insert(*peer, now + BAN_FOR);
        self.swarm.behaviour_mut().banned.block_peer(*peer);
        Stats::add(&self.stats.banned);
        tracing::warn!(
            "gossip: {peer} graylisted {again} times within {} s; disconnected and refused for {} s",
            BAN_WINDOW.as_secs(),
            BAN_FOR.as_secs()
        );
    }

    /// Lifts the bans that are over, and forgets graylistings older than
    /// [`BAN_WINDOW`].
    fn lift_bans(&mut self) {
        let now = std::time::Instant::now();
        let over: Vec<PeerId> = self.banned.iter().filter(|(_, until)| **until <= now).map(|(p, _)| *p).collect();
        for peer in over {
            self.banned.remove(&peer);
            self.swarm.behaviour_mut().banned.unblock_peer(peer);
        }
        self.graylisted.retain(|_, times| times.last().is_some_and(|t| now.duration_since(*t) < BAN_WINDOW));
    }

    /// Whether `peer` has budget left for a message of no use (refilled at
    /// [`USELESS_PER_SECOND`] up to [`USELESS_BURST`]).
    fn has_budget(&mut self, peer: &PeerId) -> bool {
        let Some((left, at)) = self.useless.get_mut(peer) else { return true };
        let now = std::time::Instant::now();
        *left = (*left + now.duration_since(*at).as_secs_f64() * USELESS_PER_SECOND).min(USELESS_BURST);
        *at = now;
        *left >= 1.0
    }

    /// A message of no use from `peer`: one less in its budget.
    fn spend_budget(&mut self, peer: &PeerId) {
        let entry = self.useless.entry(*peer).or_insert((USELESS_BURST, std::time::Instant::now()));
        entry.0 = (entry.0 - 1.0).max(0.0);
    }

    /// Messages queued for `peer` failed in the last heartbeat: after
    /// [`SLOW_HEARTBEATS`] in a row, disconnected (never a bootstrap peer).
    fn slow_peer(&mut self, peer: PeerId) {
        let now = std::time::Instant::now();
        let entry = self.slow.entry(peer).or_insert((0, now, Vec::new()));
        // In a row: the last heartbeat's report, not one from long ago.
        let in_a_row = entry.0 > 0 && now.duration_since(entry.1) < Duration::from_secs(2);
        if !in_a_row {
            entry.2.retain(|began| now.duration_since(*began) < SLOW_WINDOW);
            entry.2.push(now);
        }
        entry.0 = if in_a_row { entry.0 + 1 } else { 1 };
        entry.1 = now;
        let why = if entry.0 >= SLOW_HEARTBEATS {
            format!("for {SLOW_HEARTBEATS} heartbeats")
        } else if entry.2.len() >= SLOW_RUNS {
            format!("at {SLOW_RUNS} bursts within {} s", SLOW_WINDOW.as_secs())
        } else {
            return;
        };
        if self.bootstrap.iter().any(|(known, _)| *known == peer) {
            return;
        }
        tracing::warn!("gossip: {peer} took nothing of what was queued for it {why}; disconnected");
        self.slow.remove(&peer);
        Stats::add(&self.stats.slow_disconnected);
        let _ = self.swarm.disconnect_peer_id(peer);
    }

    /// One more unwanted message from `peer`: its application score falls.
    fn unwanted_from(&mut self, peer: PeerId) {
        let count = self.unwanted.entry(peer).or_insert(0.0);
        *count += 1.0;
        let score = *count * UNWANTED_WEIGHT;
        let before = self.swarm.behaviour().gossipsub.peer_score(&peer);
        self.swarm.behaviour_mut().gossipsub.set_application_score(&peer, score);
        self.count_graylisting(&peer, before);
    }

    /// Halves every peer's unwanted count (forgetting those near zero).
    fn decay_unwanted(&mut self) {
        let gossipsub = &mut self.swarm.behaviour_mut().gossipsub;
        self.unwanted.retain(|peer, count| {
            *count /= 2.0;
            let keep = *count >= 0.5;
            gossipsub.set_application_score(peer, if keep { *count * UNWANTED_WEIGHT } else { 0.0 });
            keep
        });
    }

    fn dial_bootstrap(&mut self) {
        for (peer, addr) in &self.bootstrap {
            if *peer != *self.swarm.local_peer_id()
                && !self.swarm.is_connected(peer)
                && let Err(e) = self.swarm.dial(addr.clone())
            {
                tracing::debug!("gossip: dialling {addr}: {e}");
            }
        }
    }

    fn on_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        match event {
            SwarmEvent::NewListenAddr { address, .. } => {
                // Its owner announces where it listens (`listening`).
                tracing::debug!("gossip: listening on {address}/p2p/{}", self.swarm.local_peer_id());
                self.listening.send_modify(|a| a.push(address));
            }
            SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
            })) => {
                let verdict = if message.data.len() > MAX_PAYLOAD {
                    Verdict::Reject(format!("{} bytes, more than {MAX_PAYLOAD}", message.data.len()))
                } else if !self.has_budget(&propagation_source) {
                    Stats::add(&self.stats.throttled);
                    Verdict::Ignore
                } else if self.deliver.capacity() == 0 {
                    Stats::add(&self.stats.full);
                    Verdict::Ignore
                } else {
                    // Only what the check found of no use is paid for: not
                    // what was dropped unread, nor this peer's own lack of room.
                    let verdict = (self.check)(&message.data);
                    if !matches!(verdict, Verdict::Accept | Verdict::Hold) {
                        self.spend_budget(&propagation_source);
                    }
                    verdict
                };
                match verdict {
                    Verdict::Accept | Verdict::Hold => {
                        // Counted before it is handed over, so whoever takes
                        // it sees it counted.
                        let held = verdict == Verdict::Hold;
                        Stats::add(if held { &self.stats.held } else { &self.stats.accepted });
                        let ticket = match (held, self.commands.upgrade()) {
                            (true, Some(commands)) => Some(Ticket {
                                message: message_id.clone(),
                                source: propagation_source,
                                commands,
                                stats: self.stats.clone(),
                                settled: false,
                            }),
                            _ => None,
                        };
                        if !held {
                            self.report(&message_id, &propagation_source, gossipsub::MessageAcceptance::Accept);
                        }
                        if self.deliver.try_send(Delivery { data: message.data, ticket }).is_err() {
                            // Not taken after all (the room went): ignored —
                            // a held one by its ticket, dropped with it.
                            let counter = if held { &self.stats.held } else { &self.stats.accepted };
                            counter.fetch_sub(1, Ordering::Relaxed);
                            Stats::add(&self.stats.full);
                            if !held {
                                Stats::add(&self.stats.ignored);
                            }
                        }
                    }
                    Verdict::Reject(why) => {
                        tracing::debug!("gossip: rejected a message from {propagation_source}: {why}");
                        self.report(&message_id, &propagation_source, gossipsub::MessageAcceptance::Reject);
                        Stats::add(&self.stats.rejected);
                    }
                    Verdict::Ignore => {
                        self.report(&message_id, &propagation_source, gossipsub::MessageAcceptance::Ignore);
                        Stats::add(&self.stats.ignored);
                    }
                    Verdict::Unwanted(why) => {
                        tracing::trace!("gossip: an unwanted message from {propagation_source}: {why}");
                        self.report(&message_id, &propagation_source, gossipsub::MessageAcceptance::Ignore);
                        Stats::add(&self.stats.ignored);
                        Stats::add(&self.stats.unwanted);
                        self.unwanted_from(propagation_source);
                    }
                }
            }
            SwarmEvent::ConnectionEstablished { peer_id, endpoint, .. } => {
                tracing::debug!("gossip: connected to {peer_id} at {}", endpoint.get_remote_address());
            }
            SwarmEvent::ConnectionClosed { peer_id, num_established: 0, .. } => {
                self.useless.remove(&peer_id);
                self.slow.remove(&peer_id);
            }
            SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(gossipsub::Event::SlowPeer { peer_id, .. })) => {
                self.slow_peer(peer_id);
            }
            SwarmEvent::OutgoingConnectionError { peer_id, error, .. } => {
                tracing::debug!("gossip: could not reach {peer_id:?}: {error}");
            }
            _ => {}
        }
    }
}
