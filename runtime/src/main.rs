//! The `lite-node` command: parses arguments, sets up logging, runs a verb
//! from the library, and turns its outcome into an exit code.

use lite_node_validator::gateway::Admission;
use std::{
    io::{IsTerminal, Write},
    path::PathBuf,
    process::ExitCode,
    time::Duration,
};

use clap::{Parser, Subcommand};
use lite_node::{
    commands,
    compute::Fetch,
    config::{EnvSnapshot, LogSettings},
    exit::{ExitStatus, exit_status},
};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "lite-node", version, about = "Lite-node runtime for decentralized data markets")]
struct Cli {
    /// Read KEY=VALUE lines from this file for variables not already set.
    #[arg(long, global = true, value_name = "FILE")]
    env_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the node: watch the anchor chain and compute every released epoch.
    Run,
    /// Validate environment, projects.json and the compute package without
    /// running, then reach the RPCs, ProtocolState, the slot and the collector.
    Check {
        /// Skip the network checks (configuration and compute package only).
        #[arg(long)]
        offline: bool,
    },
    /// Work with the compute package.
    #[command(subcommand)]
    Compute(ComputeCommand),
    /// The data market's slot assignment for one epoch, as JSON, computed by
    /// the configured compute package: which slots work it and on which pool.
    Assignments(AssignmentsArgs),
    /// What the anchor chain finalized for an epoch (batch, root, validators,
    /// each project's CID); with --project P --proof, the Merkle proof of P's
    /// CID, checked against the root on chain before it is printed.
    Finalized(FinalizedArgs),
    /// The collector nodes submit to: checks each submission's signer and
    /// deadline against ProtocolState and, given the active pools, that the
    /// slot was selected for that epoch and pool; answers Success or Failure,
    /// and publishes what it takes to the validators over gossip.
    Collector(CollectorArgs),
    /// The gossip peer id of a validator's or collector's data dir (its
    /// p2p-identity.key, made if missing): what others put after /p2p/ in
    /// their --p2p-bootstrap.
    PeerId {
        /// The validator's or collector's --data-dir.
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
    },
    /// The receiving end: a validator on Redis. Its gateway takes submissions
    /// as the collector does; dequeuers check them, each epoch's window opens
    /// and closes in anchor blocks, and every epoch is finalized into this
    /// validator's batch; a read-only API shows it all.
    Validator(ValidatorArgs),
    /// Alert channels (Telegram bot, reporting service).
    #[command(subcommand)]
    Alert(AlertCommand),
    /// The whole network on this machine: anvil with Uniswap V3 pools and
    /// ProtocolState, the collector, N nodes, activity and epoch releases.
    Devnet(DevnetArgs),
    /// A data market's operator: deploy ProtocolState on any EVM chain,
    /// read the market back.
    #[command(subcommand)]
    Market(MarketCommand),
}

#[derive(Subcommand)]
enum MarketCommand {
    /// Deploy the production ProtocolState with the deployer's key and
    /// write the market's manifest (chains, contract, identity, deploy
    /// block, epoch size, namespace), which the other verbs read.
    Deploy(MarketDeployArgs),
    /// What the chain says of the market: epochs released, the releaser's
    /// lag behind the source chain, slots and validators.
    Status {
        /// The market's manifest.
        #[arg(long, value_name = "PATH", default_value = "market.json")]
        manifest: PathBuf,
    },
    /// The epoch releaser, as a service: releases the market's epochs as
    /// the source chain's blocks become final, resuming from the chain.
    Release(MarketReleaseArgs),
    /// The slot registry: register, reassign, remove, mark full nodes, list.
    #[command(subcommand)]
    Slots(SlotsCommand),
    /// The market's validators: add, remove, list.
    #[command(subcommand)]
    Validators(ValidatorsCommand),
    /// Set the market's day schedule: a day starts every N released epochs
    /// (the owner's key).
    Days {
        #[arg(long, value_name = "N")]
        epochs_per_day: u64,
        #[command(flatten)]
        access: MarketAccessArgs,
    },
    /// The owner's grants — releasers, slot registrars, ownership — and the
    /// roles an address holds.
    #[command(subcommand)]
    Roles(RolesCommand),
    /// The env block an operator pastes into the node's `.env` for a slot
    /// (their own key stays theirs: its line is left empty).
    Env {
        /// The slot.
        #[arg(long, value_name = "N")]
        slot: u64,
        /// The market's manifest.
        #[arg(long, value_name = "PATH", default_value = "market.json")]
        manifest: PathBuf,
    },
    /// The validators' gossip addresses the manifest publishes (an
    /// operator's collector dials them: VALIDATOR_PEERS in `market env`).
    Peers {
        /// Record these, comma-separated, each ending in /p2p/<peer id>.
        #[arg(long, value_name = "MULTIADDR,…", value_delimiter = ',')]
        set: Option<Vec<lite_node_validator::gossip::Multiaddr>>,
        /// The market's manifest.
        #[arg(long, value_name = "PATH", default_value = "market.json")]
        manifest: PathBuf,
    },
}

#[derive(clap::Args)]
struct MarketReleaseArgs {
    #[command(flatten)]
    access: MarketAccessArgs,
    /// Blocks under the source head an epoch's last block must be.
    #[arg(long, value_name = "N", default_value_t = 2)]
    finality: u64,
    /// The first epoch's first source block, if nothing is released yet
    /// (default: the newest final epoch's).
    #[arg(long, value_name = "B")]
    first_block: Option<u64>,
    /// Serve /health and /metrics here (e.g. 127.0.0.1:9200).
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// How often to look at the source chain when no epoch is due.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    poll_ms: u64,
    /// Replace a release not mined after this long (same nonce, higher fees).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    replace_after_secs: u64,
    /// Leave out a source RPC more than N blocks behind the highest
    /// (epochs wait for the lowest of the others).
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_source_lag: u64,
    /// The most a replacement may offer per gas, in gwei (default: no cap):
    /// at the cap the release in flight is waited for.
    #[arg(long, value_name = "GWEI")]
    max_fee_gwei: Option<u64>,
}

/// The manifest, and the key of the account that sends the transaction.
#[derive(clap::Args)]
struct MarketAccessArgs {
    /// The market's manifest.
    #[arg(long, value_name = "PATH", default_value = "market.json")]
    manifest: PathBuf,
    /// A file holding the sender's private key (the owner's, or a
    /// registrar's for slots); never printed.
    #[arg(long, value_name = "PATH")]
    key_file: Option<PathBuf>,
}

impl MarketAccessArgs {
    fn access(self) -> commands::MarketAccess {
        commands::MarketAccess { manifest: self.manifest, key_file: self.key_file }
    }
}

#[derive(Subcommand)]
enum SlotsCommand {
    /// Register the next slot (slots register in order) to a signer.
    Register {
        /// The signer's address.
        #[arg(long, value_name = "ADDRESS")]
        signer: String,
        /// The slot (default: the next; any other is refused).
        #[arg(long, value_name = "N")]
        slot: Option<u64>,
        #[command(flatten)]
        access: MarketAccessArgs,
    },
    /// Give a registered slot to another signer.
    Reassign {
        #[arg(long, value_name = "N")]
        slot: u64,
        /// The new signer's address.
        #[arg(long, value_name = "ADDRESS")]
        signer: String,
        #[command(flatten)]
        access: MarketAccessArgs,
    },
    /// Remove the last slot.
    Remove {
        #[arg(long, value_name = "N")]
        slot: u64,
        #[command(flatten)]
        access: MarketAccessArgs,
    },
    /// Mark a slot as a full node of the market (`--off`: unmark it).
    FullNode {
        #[arg(long, value_name = "N")]
        slot: u64,
        /// Unmark instead.
        #[arg(long)]
        off: bool,
        #[command(flatten)]
        access: MarketAccessArgs,
    },
    /// Every registered slot with its signer, full nodes marked.
    List {
        /// The market's manifest.
        #[arg(long, value_name = "PATH", default_value = "market.json")]
        manifest: PathBuf,
    },
}

/// A role the owner grants.
#[derive(Clone, Copy, clap::ValueEnum)]
enum RoleArg {
    /// May release epochs (`lite-node market release`).
    Releaser,
    /// May register, reassign and remove slots.
    Registrar,
}

impl From<RoleArg> for commands::Role {
    fn from(r: RoleArg) -> Self {
        match r {
            RoleArg::Releaser => commands::Role::Releaser,
            RoleArg::Registrar => commands::Role::Registrar,
        }
    }
}

#[derive(Subcommand)]
enum RolesCommand {
    /// Grant a role to addresses (the owner's key).
    Grant {
        #[arg(value_enum)]
        role: RoleArg,
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        #[command(flatten)]
        access: MarketAccessArgs,
    },
    /// Revoke a role from addresses (the owner's key).
    Revoke {
        #[arg(value_enum)]
        role: RoleArg,
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        #[command(flatten)]
        access: MarketAccessArgs,
    },
    /// The roles each address holds: owner, releaser, registrar, validator.
    Show {
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        /// The market's manifest.
        #[arg(long, value_name = "PATH", default_value = "market.json")]
        manifest: PathBuf,
    },
    /// Hand ProtocolState to a new owner (the current owner's key).
    TransferOwnership {
        /// The new owner's address.
        #[arg(long, value_name = "ADDRESS")]
        to: String,
        #[command(flatten)]
        access: MarketAccessArgs,
    },
}

#[derive(Subcommand)]
enum ValidatorsCommand {
    /// Make addresses validators of the market.
    Add {
        /// The validators' addresses.
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        #[command(flatten)]
        access: MarketAccessArgs,
    },
    /// Remove validators (their attestations stop counting at once).
    Remove {
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        #[command(flatten)]
        access: MarketAccessArgs,
    },
    /// The market's validators.
    List {
        /// The market's manifest.
        #[arg(long, value_name = "PATH", default_value = "market.json")]
        manifest: PathBuf,
    },
}

#[derive(clap::Args)]
struct MarketDeployArgs {
    /// The anchor chain's JSON-RPC URL, where ProtocolState lives (repeat
    /// for several).
    #[arg(long, value_name = "URL", required = true)]
    anchor_rpc: Vec<String>,
    /// The source chain's JSON-RPC URL, where the market's data is (repeat
    /// for several; default: the anchor's).
    #[arg(long, value_name = "URL")]
    source_rpc: Vec<String>,
    /// A file holding the deployer's private key (64 hex digits), which
    /// owns the contract; never printed.
    #[arg(long, value_name = "PATH")]
    key_file: PathBuf,
    /// Source-chain blocks per epoch.
    #[arg(long, value_name = "N", default_value_t = 1)]
    epoch_size: u64,
    /// Epochs per day: the contract starts a day every N epochs.
    #[arg(long, value_name = "N")]
    epochs_per_day: Option<u64>,
    /// The namespace in the market's project ids.
    #[arg(long, value_name = "NS")]
    namespace: String,
    /// The anchor chain's name in project ids, POWERLOOM_CHAIN (default:
    /// `chain` and its id).
    #[arg(long, value_name = "NAME")]
    anchor_chain: Option<String>,
    /// The source chain's name in project ids, SOURCE_CHAIN.
    #[arg(long, value_name = "NAME", default_value = "ETH")]
    source_chain: String,
    /// The market's identity in ProtocolState (default: the contract's
    /// own address).
    #[arg(long, value_name = "ADDRESS")]
    data_market: Option<String>,
    /// Where to write the manifest (never over an existing file).
    #[arg(long, value_name = "PATH", default_value = "market.json")]
    out: PathBuf,
}

#[derive(clap::Args)]
struct DevnetArgs {
    /// Lite nodes to run, one signer each.
    #[arg(long, default_value_t = 4, value_name = "N")]
    nodes: u64,
    /// Slots each node works (SLOT_IDS), all registered to its signer.
    #[arg(long, default_value_t = 1, value_name = "K")]
    slots_per_node: u64,
    /// getTotalNodeCount (default: nodes × slots per node); above that, some epochs select none of ours.
    #[arg(long, value_name = "T")]
    total_slots: Option<u64>,
    /// Stop after N epochs (default: run until Ctrl-C).
    #[arg(long, value_name = "N")]
    epochs: Option<u64>,
    /// Milliseconds between epoch releases.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    interval_ms: u64,
    /// The nodes' anchor poll interval, milliseconds.
    #[arg(long, default_value_t = 50, value_name = "MS")]
    poll_ms: u64,
    /// Seconds to wait for an epoch's submissions before the next release.
    #[arg(long, default_value_t = 60, value_name = "S")]
    epoch_timeout_secs: u64,
    /// Write a machine-readable record of the run (domain, pools, epochs, every submission).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The devnet directory (npm-installed anvil, the saved world, run
    /// state). Default: ./devnet, else the devnet/ of the checkout this
    /// binary was built from.
    #[arg(long, value_name = "DIR")]
    devnet_dir: Option<PathBuf>,
    /// Load this saved world instead of <devnet dir>/world.
    #[arg(long, value_name = "DIR")]
    world: Option<PathBuf>,
    /// Where the run's logs, node data and snapshots go (default <devnet dir>/run; emptied at start).
    #[arg(long, value_name = "DIR")]
    run_dir: Option<PathBuf>,
    /// A drill (repeatable): compute-error:SLOT or empty-return:SLOT — that
    /// node's compute fails, or returns nothing, whenever it is selected;
    /// kill-node:SLOT@EPOCH — that node is SIGKILLed after the epoch's
    /// release and restarted by the devnet; kill-node-mid-burst:SLOT@EPOCH
    /// and lose-power-mid-burst:SLOT@EPOCH — killed with messages sent and
    /// unanswered (after a power loss, its unsynced ledger lines gone too);
    /// stall-anvil:SECS@EPOCH — anvil stops answering for SECS after the
    /// epoch's release (docs/devnet.md lists every drill).
    #[arg(long, value_name = "KIND:SLOT", value_parser = lite_node::devnet::parse_fault)]
    fault: Vec<lite_node::devnet::Fault>,
    /// Send the nodes' alerts to this Telegram Bot API (a placeholder bot token and chat id are supplied).
    #[arg(long, value_name = "URL")]
    telegram_api_url: Option<String>,
    /// Validators behind the collector (at most 16): each has its own Redis and
    /// `lite-node validator` process, finalizes every epoch, and the table
    /// and --json record show its batches.
    #[arg(long, value_name = "N", default_value_t = 0)]
    validators: u64,
    /// How the nodes follow the anchor chain: `http` polls every --poll-ms,
    /// `ws` subscribes to new heads over a WebSocket (anvil serves both).
    #[arg(long, value_enum, default_value = "http")]
    anchor: AnchorTransport,
    /// The projects the nodes run (default: PROJECTS_CONFIG or
    /// SNAPSHOT_CONFIG_REPO when set, else the BDS base snapshot); each
    /// project's `pools` is replaced by the world's pools. The compute
    /// package is the node's: SNAPSHOTTER_COMPUTE_REPO and friends.
    #[arg(long, value_name = "FILE")]
    projects: Option<PathBuf>,
    /// Run one full node beside the lite nodes, its pools computed by K
    /// workers (`lite-node run` with LITE_NODE_ROLE=worker) that share a
    /// redis-server with its coordinator; the table shows per epoch which
    /// worker computed how many pools.
    #[arg(long, value_name = "K", default_value_t = 0)]
    full_node_workers: u64,
    /// How the full node's pools find their worker: `peer-index` (member k
    /// of n takes the pools whose index ≡ k mod n) or `least-backlog` (the
    /// coordinator gives each to the least busy worker, under a lease).
    #[arg(long, value_enum, default_value = "peer-index")]
    assign: AssignMode,
    /// Only the first N pools of the world are active (above 5, the
    /// 1,000-pool world is taken: devnet/build-world.sh --pools 1000 --out world-1000).
    #[arg(long, value_name = "N")]
    pools: Option<usize>,
    /// The full node's workers reach the chain through a relay that holds
    /// every request MS milliseconds (a remote RPC's round trip).
    #[arg(long, value_name = "MS")]
    worker_rpc_delay_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum AssignMode {
    PeerIndex,
    LeastBacklog,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum AnchorTransport {
    Http,
    Ws,
}

#[derive(clap::Args)]
struct CollectorArgs {
    /// Address to listen on (port 0: any free port; the chosen one is printed).
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: std::net::SocketAddr,
    #[command(flatten)]
    market: MarketArgs,
    /// Anchor block where EpochReleased lookups start.
    #[arg(long, value_name = "N", default_value_t = 0)]
    from_block: u64,
    /// Publish every accepted submission on the validators' gossip network:
    /// where this collector's libp2p peer listens (e.g. /ip4/0.0.0.0/tcp/9100).
    #[arg(long, value_name = "MULTIADDR")]
    p2p_listen: Option<lite_node_validator::gossip::Multiaddr>,
    /// Gossip peers to dial first (validators), comma-separated, each ending
    /// in /p2p/<peer id>.
    #[arg(long, value_name = "MULTIADDR,…", value_delimiter = ',')]
    p2p_bootstrap: Vec<lite_node_validator::gossip::Multiaddr>,
    /// Where the collector keeps its gossip identity (p2p-identity.key).
    #[arg(long, value_name = "DIR", default_value = "collector-data")]
    data_dir: PathBuf,
    /// Serve `/health` here (200 while the anchor chain answers, 503 with
    /// the reason when it does not): what a container's health check asks.
    #[arg(long, value_name = "ADDRESS")]
    status_listen: Option<std::net::SocketAddr>,
}

/// The data market a collector or validator serves.
#[derive(clap::Args)]
struct MarketArgs {
    /// Anchor chain JSON-RPC URL(s), comma-separated.
    #[arg(long, value_name = "URL")]
    anchor_rpc: String,
    /// ProtocolState contract address.
    #[arg(long, value_name = "ADDRESS")]
    protocol_state: String,
    /// Data market contract address.
    #[arg(long, value_name = "ADDRESS")]
    data_market: String,
    /// Source chain JSON-RPC URL(s) for the epochs' seed blocks (default: the
    /// anchor's, over HTTP when it is a WebSocket).
    #[arg(long, value_name = "URL")]
    source_rpc: Option<String>,
    /// The data market's active pools, comma-separated: the selection check,
    /// with the configured compute package's assignment rule (a validator's
    /// dequeuer needs it; without it a collector does not check selection).
    #[arg(long, value_name = "P1,P2,…", value_delimiter = ',')]
    pools: Vec<String>,
    /// A file with one active pool address per line (as --pools).
    #[arg(long, value_name = "F")]
    pools_file: Option<PathBuf>,
}

impl From<MarketArgs> for commands::MarketOptions {
    fn from(a: MarketArgs) -> Self {
        Self {
            anchor_rpc: a.anchor_rpc,
            protocol_state: a.protocol_state,
            data_market: a.data_market,
            source_rpc: a.source_rpc,
            pools: a.pools,
            pools_file: a.pools_file,
        }
    }
}

#[derive(clap::Args)]
struct ValidatorArgs {
    /// Components to run in this process, comma-separated (default: all):
    /// gateway, monitor, dequeuer, finalizer, aggregator, tracker, api.
    /// Running them one per process (e.g. several dequeuers) is the same
    /// pipeline: they meet in Redis.
    #[arg(long, value_parser = |s: &str| s.parse::<commands::Component>(), value_delimiter = ',', value_name = "C,…")]
    components: Vec<commands::Component>,
    /// Redis the components share.
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// This validator's id (its batches' author, the sequencer id of its keys).
    #[arg(long, value_name = "ID", default_value = "validator-1")]
    validator_id: String,
    /// Where the gateway listens for submissions (gRPC).
    #[arg(long, default_value = "127.0.0.1:50052")]
    listen: std::net::SocketAddr,
    /// Where the monitor API listens (HTTP).
    #[arg(long, default_value = "127.0.0.1:9091")]
    api_listen: std::net::SocketAddr,
    #[command(flatten)]
    market: MarketArgs,
    /// Anchor block the event monitor starts at without a saved cursor
    /// (default: the head).
    #[arg(long, value_name = "N")]
    from_block: Option<u64>,
    /// Anchor blocks each epoch's submission window stays open after its
    /// release (130: every deadline a node may sign).
    #[arg(long, value_name = "N", default_value_t = lite_node_protocol::submission::WINDOW_BLOCKS,
          value_parser = at_least_one_block)]
    window_blocks: u64,
    /// Dequeuer workers in this process.
    #[arg(long, value_name = "N", default_value_t = 4)]
    workers: usize,
    /// Projects per finalization part.
    #[arg(long, value_name = "N", default_value_t = lite_node_validator::finalizer::PART_SIZE)]
    part_size: usize,
    /// The event monitor's cursor (locked: one monitor per directory).
    #[arg(long, value_name = "DIR", default_value = "validator-data")]
    data_dir: PathBuf,
    /// How often the event monitor polls the anchor chain.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    poll_ms: u64,
    /// Submissions waiting for the dequeuers past which the gateway answers
    /// RESOURCE_EXHAUSTED (nodes retry).
    #[arg(long, value_name = "N", default_value_t = Admission::default().max_queue)]
    max_queue: u64,
    /// Submissions a second the gateway takes from one peer (IP address),
    /// sustained, and in a burst.
    #[arg(long, value_name = "N", default_value_t = Admission::default().peer_rate)]
    peer_rate: std::num::NonZeroU32,
    #[arg(long, value_name = "N", default_value_t = Admission::default().peer_burst)]
    peer_burst: std::num::NonZeroU32,
    /// Calls one peer may have in flight at the gateway.
    #[arg(long, value_name = "N", default_value_t = Admission::default().peer_in_flight)]
    peer_in_flight: usize,
    /// Gossip submissions taken from one slot for one epoch; past it, the
    /// rest are unwanted (counted against the peer that relayed them).
    #[arg(long, value_name = "N", default_value_t = Admission::default().per_slot_epoch)]
    per_slot_epoch: u32,
    /// Take submissions from the validators' gossip network too: where this
    /// validator's libp2p peer listens (e.g. /ip4/0.0.0.0/tcp/9000; its
    /// identity is p2p-identity.key in --data-dir).
    #[arg(long, value_name = "MULTIADDR")]
    p2p_listen: Option<lite_node_validator::gossip::Multiaddr>,
    /// Gossip peers to dial first, comma-separated, each ending in
    /// /p2p/<peer id> (a collector's, other validators').
    #[arg(long, value_name = "MULTIADDR,…", value_delimiter = ',')]
    p2p_bootstrap: Vec<lite_node_validator::gossip::Multiaddr>,
    /// Also keep seed 001's per-submission keys, for tools that read them
    /// (the monitor API does not): `metrics:submissions:metadata:{entityId}`
    /// for 24 h (~550 B each), `processingSubmission:{id}` while held, and
    /// `processed:{sequencerId}:{submissionId}` for an hour once accepted.
    #[arg(long)]
    submission_metadata: bool,
    /// Anchor blocks the chosen submitter of an epoch's batch has before the
    /// next validator in turn submits it (with VALIDATOR_SIGNER_PRIVATE_KEY).
    #[arg(long, value_name = "BLOCKS", default_value_t = lite_node_validator::onchain::FALLBACK_BLOCKS)]
    fallback_blocks: u64,
}

#[derive(clap::Args)]
struct AssignmentsArgs {
    /// Epoch id.
    #[arg(long, value_name = "E")]
    epoch_id: u64,
    /// Hash of the epoch's seed block (32 bytes hex, 0x optional).
    #[arg(long, value_name = "H")]
    block_hash: String,
    /// Total registered slots (getTotalNodeCount()).
    #[arg(long, value_name = "T")]
    total_slots: u64,
    /// Active pools, comma-separated.
    #[arg(long, value_name = "P1,P2,…", value_delimiter = ',')]
    pools: Vec<String>,
    /// A file with one pool address per line.
    #[arg(long, value_name = "F")]
    pools_file: Option<PathBuf>,
    /// Answer for this slot only.
    #[arg(long, value_name = "S")]
    slot: Option<u64>,
}

#[derive(clap::Args)]
struct FinalizedArgs {
    /// Epoch id.
    #[arg(long, value_name = "E")]
    epoch_id: u64,
    /// Only this project (its id, as submitted).
    #[arg(long, value_name = "P")]
    project: Option<String>,
    /// Print the Merkle proof of the project's CID (needs --project).
    #[arg(long)]
    proof: bool,
    /// Anchor chain JSON-RPC URL (default: POWERLOOM_RPC_URL).
    #[arg(long, value_name = "URL")]
    anchor_rpc: Option<String>,
    /// ProtocolState address (default: PROTOCOL_STATE_CONTRACT).
    #[arg(long, value_name = "ADDRESS")]
    protocol_state: Option<String>,
    /// Data market address (default: DATA_MARKET_CONTRACT).
    #[arg(long, value_name = "ADDRESS")]
    data_market: Option<String>,
    /// The anchor block to look for the epoch's events from.
    #[arg(long, value_name = "B", default_value_t = 0)]
    from_block: u64,
}

#[derive(clap::Args)]
struct ComputeRunArgs {
    /// The epoch's first source-chain block (its seed block).
    #[arg(long, visible_alias = "epoch-block", value_name = "B")]
    begin: Option<u64>,
    /// The epoch's last source-chain block (default: --begin).
    #[arg(long, value_name = "E", requires = "begin")]
    end: Option<u64>,
    /// The epoch's id (default 1). Alone, its release is looked up on the
    /// anchor chain (POWERLOOM_RPC_URL and both contracts).
    #[arg(long, value_name = "N")]
    epoch_id: Option<u64>,
    /// The day id the processors are given (default 1).
    #[arg(long, value_name = "D")]
    day_id: Option<u64>,
    /// Where the anchor lookup of --epoch-id starts (default 0; providers
    /// that cap eth_getLogs ranges need one near the release).
    #[arg(long, value_name = "N", conflicts_with = "begin")]
    from_block: Option<u64>,
    /// Run as this slot (default: SLOT_ID or the first of SLOT_IDS, else 1).
    #[arg(long, value_name = "S")]
    slot: Option<u64>,
    /// getTotalNodeCount (default: the anchor's, when configured; else the slot id).
    #[arg(long, value_name = "T")]
    total_slots: Option<u64>,
    /// Only this project (repeatable; default: every project).
    #[arg(long, value_name = "PROJECT_TYPE")]
    project: Vec<String>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum AlertCommand {
    /// Send a test message through every configured channel and show each answer.
    Test,
}

#[derive(Subcommand)]
enum ComputeCommand {
    /// Fetch, build (unless cached) and load the pinned compute package.
    Fetch,
    /// Show the cached compute package; never fetches or builds.
    List,
    /// Run the configured package's processors for one epoch with the node's
    /// host (preload, selection tracker, RPC, time limit) and print what the
    /// node would submit: each snapshot's canonical JSON, project id and CID,
    /// and the selection reported. No anchor events, collector or signer;
    /// exit 1 when a compute fails.
    Run(ComputeRunArgs),
    /// Write a new compute package into DIR: one processor from the template,
    /// the market's slot selection, this node's plugin interface, a
    /// projects.json, an author's README, and a git repository.
    New {
        /// Where to write it (must not exist, or be empty).
        dir: PathBuf,
        /// The processor crate's name (default: the directory's name).
        #[arg(long)]
        name: Option<String>,
    },
}

/// `--window-blocks`: a whole number of anchor blocks, at least one.
fn at_least_one_block(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("a window must stay open at least 1 anchor block".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number of anchor blocks".into()),
    }
}

/// glibc's malloc keeps up to eight arenas per core, one for each thread
/// that allocates while another holds one; the node's threads mostly wait,
/// and a thousand slots' epoch spread over many arenas holds memory none of
/// them gives back. Two suffice (an operator's `MALLOC_ARENA_MAX` wins).
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[expect(clippy::disallowed_methods, reason = "glibc reads MALLOC_ARENA_MAX itself, before any configuration")]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a tunable; it runs before any thread starts.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    let cli = Cli::parse();
    lite_node::core::tls::install_crypto_provider();
    let env = match cli.env_file.as_deref().map(|f| EnvSnapshot::from_process().with_env_file(f)) {
        None => EnvSnapshot::from_process(),
        Some(Ok(env)) => env,
        Some(Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(ExitStatus::BadConfig as u8);
        }
    };
    let log = match LogSettings::from_env(&env) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(ExitStatus::BadConfig as u8);
        }
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&log.filter).unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(|| LossyStderr)
        .with_target(false);
    if log.json {
        logs.json().with_ansi(false).init();
    } else {
        logs.with_ansi(std::io::stderr().is_terminal()).init();
    }
    for warning in env.warnings() {
        tracing::warn!("{warning}");
    }

    // Locked per command: the collector and the devnet print from other threads.
    let stdout = || std::io::stdout().lock();
    let result = match cli.command {
        Command::Run => commands::run(&env),
        Command::Collector(a) => commands::collector(
            commands::CollectorOptions {
                listen: a.listen,
                market: a.market.into(),
                from_block: a.from_block,
                p2p_listen: a.p2p_listen,
                p2p_bootstrap: a.p2p_bootstrap,
                data_dir: a.data_dir,
                status_listen: a.status_listen,
            },
            &env,
        ),
        Command::Validator(a) => commands::validator(
            commands::ValidatorOptions {
                components: a.components,
                redis_url: a.redis_url,
                validator_id: a.validator_id,
                listen: a.listen,
                api_listen: a.api_listen,
                market: a.market.into(),
                from_block: a.from_block,
                window_blocks: a.window_blocks,
                workers: a.workers,
                part_size: a.part_size,
                data_dir: a.data_dir,
                poll_interval: Duration::from_millis(a.poll_ms.max(10)),
                admission: Admission {
                    max_queue: a.max_queue,
                    peer_rate: a.peer_rate,
                    peer_burst: a.peer_burst,
                    peer_in_flight: a.peer_in_flight,
                    per_slot_epoch: a.per_slot_epoch,
                    metadata: a.submission_metadata,
                },
                p2p_listen: a.p2p_listen,
                p2p_bootstrap: a.p2p_bootstrap,
                fallback_blocks: a.fallback_blocks,
            },
            &env,
        ),
        Command::Devnet(a) => commands::devnet(
            lite_node::devnet::Options {
                devnet_dir: a.devnet_dir.unwrap_or_else(lite_node::devnet::default_dir),
                world: a.world,
                nodes: a.nodes,
                slots_per_node: a.slots_per_node,
                total_slots: a.total_slots,
                epochs: a.epochs,
                interval: Duration::from_millis(a.interval_ms),
                poll_interval: Duration::from_millis(a.poll_ms),
                epoch_timeout: Duration::from_secs(a.epoch_timeout_secs),
                json: a.json,
                run_dir: a.run_dir,
                faults: a.fault,
                telegram_api_url: a.telegram_api_url,
                validators: a.validators,
                anchor_ws: a.anchor == AnchorTransport::Ws,
                projects: a.projects,
                full_node_workers: a.full_node_workers,
                assign: match a.assign {
                    AssignMode::PeerIndex => lite_node::config::ClusterAssign::PeerIndex,
                    AssignMode::LeastBacklog => lite_node::config::ClusterAssign::LeastBacklog,
                },
                pools: a.pools,
                worker_rpc_delay: a.worker_rpc_delay_ms.map(Duration::from_millis),
            },
            &env,
        ),
        Command::Alert(AlertCommand::Test) => commands::alert_test(&env, &mut stdout()),
        Command::Market(MarketCommand::Deploy(a)) => commands::market_deploy(
            &commands::DeployOptions {
                anchor_rpcs: a.anchor_rpc,
                source_rpcs: a.source_rpc,
                key_file: a.key_file,
                epoch_size: a.epoch_size,
                epochs_per_day: a.epochs_per_day,
                namespace: a.namespace,
                anchor_name: a.anchor_chain,
                source_name: a.source_chain,
                data_market: a.data_market,
                out: a.out,
            },
            &mut stdout(),
        ),
        Command::PeerId { data_dir } => commands::peer_id(&data_dir, &mut stdout()),
        Command::Market(MarketCommand::Status { manifest }) => commands::market_status(&manifest, &mut stdout()),
        Command::Market(MarketCommand::Release(a)) => commands::market_release(
            &commands::ReleaseOptions {
                access: a.access.access(),
                finality: a.finality,
                first_block: a.first_block,
                listen: a.listen,
                poll: Duration::from_millis(a.poll_ms.max(10)),
                replace_after: Duration::from_secs(a.replace_after_secs.max(1)),
                max_source_lag: a.max_source_lag,
                max_fee_gwei: a.max_fee_gwei,
            },
            &mut stdout(),
        ),
        Command::Market(MarketCommand::Env { slot, manifest }) => commands::market_env(&manifest, slot, &mut stdout()),
        Command::Market(MarketCommand::Peers { set, manifest }) => {
            commands::market_peers(&manifest, set.as_deref(), &mut stdout())
        }
        Command::Market(MarketCommand::Slots(verb)) => {
            let (access, verb) = match verb {
                SlotsCommand::Register { signer, slot, access } => {
                    (access.access(), commands::SlotsVerb::Register { slot, signer })
                }
                SlotsCommand::Reassign { slot, signer, access } => {
                    (access.access(), commands::SlotsVerb::Reassign { slot, signer })
                }
                SlotsCommand::Remove { slot, access } => (access.access(), commands::SlotsVerb::Remove { slot }),
                SlotsCommand::FullNode { slot, off, access } => {
                    (access.access(), commands::SlotsVerb::FullNode { slot, on: !off })
                }
                SlotsCommand::List { manifest } => {
                    (commands::MarketAccess { manifest, key_file: None }, commands::SlotsVerb::List)
                }
            };
            commands::market_slots(&access, &verb, &mut stdout())
        }
        Command::Market(MarketCommand::Validators(verb)) => {
            let (access, verb) = match verb {
                ValidatorsCommand::Add { addresses, access } => {
                    (access.access(), commands::ValidatorsVerb::Add(addresses))
                }
                ValidatorsCommand::Remove { addresses, access } => {
                    (access.access(), commands::ValidatorsVerb::Remove(addresses))
                }
                ValidatorsCommand::List { manifest } => {
                    (commands::MarketAccess { manifest, key_file: None }, commands::ValidatorsVerb::List)
                }
            };
            commands::market_validators(&access, &verb, &mut stdout())
        }
        Command::Market(MarketCommand::Days { epochs_per_day, access }) => {
            commands::market_days(&access.access(), epochs_per_day, &mut stdout())
        }
        Command::Market(MarketCommand::Roles(verb)) => {
            let (access, verb) = match verb {
                RolesCommand::Grant { role, addresses, access } => {
                    (access.access(), commands::RolesVerb::Set(role.into(), addresses, true))
                }
                RolesCommand::Revoke { role, addresses, access } => {
                    (access.access(), commands::RolesVerb::Set(role.into(), addresses, false))
                }
                RolesCommand::Show { addresses, manifest } => {
                    (commands::MarketAccess { manifest, key_file: None }, commands::RolesVerb::Show(addresses))
                }
                RolesCommand::TransferOwnership { to, access } => {
                    (access.access(), commands::RolesVerb::TransferOwnership(to))
                }
            };
            commands::market_roles(&access, &verb, &mut stdout())
        }
        Command::Check { offline } => commands::check(&env, offline, &mut stdout()),
        Command::Compute(ComputeCommand::Fetch) => {
            commands::compute_show(&env, Fetch::Allowed, &mut stdout()).map(drop)
        }
        Command::Assignments(a) => commands::assignments(
            &env,
            &commands::AssignmentQuery {
                epoch_id: a.epoch_id,
                block_hash: a.block_hash,
                total_slots: a.total_slots,
                pools: a.pools,
                pools_file: a.pools_file,
                slot: a.slot,
            },
            &mut stdout(),
        ),
        Command::Finalized(a) => commands::finalized(
            &commands::FinalizedQuery {
                epoch_id: a.epoch_id,
                project: a.project,
                proof: a.proof,
                anchor_rpc: a.anchor_rpc,
                protocol_state: a.protocol_state,
                data_market: a.data_market,
                from_block: a.from_block,
            },
            &env,
            &mut stdout(),
        ),
        Command::Compute(ComputeCommand::Run(a)) => commands::compute_run(
            &env,
            &commands::EpochQuery {
                epoch_id: a.epoch_id,
                begin: a.begin,
                end: a.end,
                day_id: a.day_id,
                from_block: a.from_block,
                slot: a.slot,
                total_slots: a.total_slots,
                projects: a.project,
                json: a.json,
            },
            &mut stdout(),
        ),
        Command::Compute(ComputeCommand::New { dir, name }) => {
            commands::compute_new(&dir, name.as_deref(), &env, &mut stdout())
        }
        Command::Compute(ComputeCommand::List) => {
            commands::compute_show(&env, Fetch::CacheOnly, &mut stdout()).map(drop)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Output piped into a reader that stopped (`| head`): quiet, as a
        // Unix tool is, with the failure's code.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::FAILURE
        }
        Err(e) => {
            // Not eprintln!: a stderr that cannot be written must not turn
            // the exit status into a panic's.
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::from(exit_status(&e) as u8)
        }
    }
}

/// Standard error for the logs, losing a line rather than the process when
/// it cannot be written (a full disk under a redirected log): for a write
/// that fails, tracing-subscriber falls back to printing to stderr itself,
/// which panics — found by filling the disk under a devnet, where every
/// node and validator then died at its next log line and again at each
/// restart.
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}
