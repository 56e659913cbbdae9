//! The monitor API (read-only, axum): what the pipeline did, from Redis.
//!
//! | path | answer |
//! |---|---|
//! | `/epochs/active` | epochs whose window is open or whose level 1 runs, with their state |
//! | `/epochs/{id}` | the epoch's state, counts and finalized batch |
//! | `/epochs/{id}/submissions?after=&limit=` | accepted submissions and rejections with reasons, a page at a time (`next` is the following page's `after`) |
//! | `/epochs/gaps` | epochs closed without a level-1 batch, not finalized on chain, or not watched whole |
//! | `/dashboard` | the state tracker's summary, computed now |
//! | `/participation` | 24-hour participation, computed now |
//! | `/health` | 200 when Redis answers and the event monitor's head is fresh, else 503 with why; `degraded` for an hour after an epoch's state was lost or an epoch was not watched whole, while the event monitor reports a problem, while this validator's key is not a validator of the market (removed), or while keeping the finalized data fails |
//! | `/metrics` | Prometheus text: received, accepted, rejected by reason, queue depths, finalization latency; the gossip peer's messages by outcome, peers, graylistings |
//!
//! With the finalized-data store (`store.rs`), for the market's consumers:
//!
//! | path | answer |
//! |---|---|
//! | `/data/last` | the newest epoch kept: its id, root, batch CID and number of projects |
//! | `/data/{epoch}/{project}` | a bundle: the snapshot (its bytes, as a JSON string), its CID, its Merkle proof, the epoch's root and batch CID, and the market (chain id, ProtocolState, data market) — what `lite-node read` checks against the chain |
//! | `/data/{epoch}?after=&limit=` | every project of the epoch (or a page of them, in project-id order) as one bundle, streamed as NDJSON: a header (the market, the epoch, its root and batch CID, how many projects follow, their multiproof), then `{projectId, cid, snapshot}` a line |
//! | `/data/range/{project}?from=&to=` | one project over an epoch range, streamed as NDJSON: a bundle a line, in epoch order (`{epochId, missing}` for an epoch not proved here) |
//! | `/data/events` | the finalized epochs as Server-Sent Events, each once, in epoch order (`id` the epoch id): resumed after `Last-Event-ID` (or `?after=N`; by default from the newest), here or at another validator, with none skipped or sent twice |
//! | `/ipfs/{cid}` | the snapshot's raw bytes (`application/vnd.ipld.raw`: the IPFS trustless gateway's raw block) |
//!
//! Each refusal is its own status with a one-line reason: a malformed
//! request 400, an epoch not finalized here or a project not in it 404, a
//! snapshot whose bytes no node sent 404, an epoch past retention 410, one
//! whose root on chain is not this validator's 409 (ask another server), a
//! client past its rate (`--data-rate`) 429.
//!
//! It reads on a connection of its own (a large answer never holds up the
//! gateway's or the workers' commands), pages through one epoch's keys
//! (`ZSCAN`, `HSCAN`) rather than the keyspace, counts only when asked, and
//! writes nothing.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use futures_util::StreamExt;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use redis::{AsyncCommands, aio::ConnectionManager};
use serde_json::{Value, json};

use crate::{Market, dequeuer::Reason, tracker::Tracker};

#[derive(Clone)]
struct Api {
    market: Arc<Market>,
    conn: ConnectionManager,
    tracker: Tracker,
    /// The validator's gossip peer, when it has one (its traffic on /metrics).
    gossip: Option<lite_node_gossip::Gossip>,
    /// The finalized data it keeps (whether keeping it fails, on /health).
    store: Option<Arc<crate::store::Store>>,
}

/// The consumers' routes' state: no Redis (a read-only server runs them
/// over a store alone).
#[derive(Clone)]
struct DataApi {
    market: Arc<Market>,
    /// The finalized data this process keeps.
    store: Option<Arc<crate::store::Store>>,
    /// Days it keeps an epoch (what a refusal past retention says).
    retention_days: Option<u32>,
    /// Data requests a second per client (IP address).
    rates: Option<Arc<ClientRates>>,
    /// Event streams open now (`/data/events`), at most [`MAX_STREAMS`].
    streams: Arc<tokio::sync::Semaphore>,
    /// The market's addresses as bundles spell them (EIP-55: a Keccak each,
    /// computed once, not per answer).
    protocol_state: Arc<str>,
    data_market: Arc<str>,
}

/// The finalized data a process serves, and how.
#[derive(Clone, Debug)]
pub struct Data {
    pub store: Arc<crate::store::Store>,
    /// Requests a second one client (IP address) may make of the data
    /// routes, twice that in a burst (`None`: no limit).
    pub rate_per_client: Option<std::num::NonZeroU32>,
    /// Days an epoch is kept (said when one past it is asked for).
    pub retention_days: Option<u32>,
}

/// A keyed limiter of data requests by client IP that every 4,096 calls
/// forgets the clients whose budget is full again (clients from ever new
/// addresses do not grow it for good).
struct ClientRates {
    limiter: governor::DefaultKeyedRateLimiter<std::net::IpAddr>,
    calls: std::sync::atomic::AtomicU64,
}

impl ClientRates {
    fn admit(&self, client: std::net::IpAddr) -> bool {
        if self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 4096 == 4095 {
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
        }
        self.limiter.check_key(&client).is_ok()
    }
}

/// Event streams one server keeps open at once.
pub const MAX_STREAMS: usize = 1_024;

/// The data routes' rate limit: a client past its rate gets 429 with a
/// `Retry-After`. Served without the peer's address (a router used
/// in-process), nothing is limited.
async fn limit_data(
    State(api): State<DataApi>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let client = request.extensions().get::<axum::extract::ConnectInfo<std::net::SocketAddr>>().map(|c| c.0.ip());
    if let (Some(rates), Some(client)) = (&api.rates, client)
        && !rates.admit(client)
    {
        let why = format!("{client}: more data requests a second than this server takes from one client; retry\n");
        return (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, "1")], why).into_response();
    }
    next.run(request).await
}

/// The consumers' routes over `data` (`/data/…`, `/ipfs/…`), with the
/// per-client rate limit; no Redis.
pub fn data_router(market: Arc<Market>, data: Option<Data>) -> Router {
    let rates = data.as_ref().and_then(|d| d.rate_per_client).map(|rate| {
        let burst = rate.saturating_mul(std::num::NonZeroU32::new(2).expect("two"));
        let quota = governor::Quota::per_second(rate).allow_burst(burst);
        Arc::new(ClientRates { limiter: governor::RateLimiter::keyed(quota), calls: Default::default() })
    });
    let api = DataApi {
        protocol_state: market.scope.protocol_state.to_string().into(),
        data_market: market.scope.data_market.to_string().into(),
        market,
        store: data.as_ref().map(|d| d.store.clone()),
        retention_days: data.as_ref().and_then(|d| d.retention_days),
        rates,
        streams: Arc::new(tokio::sync::Semaphore::new(MAX_STREAMS)),
    };
    Router::new()
        .route("/data/last", get(data_last))
        .route("/data/events", get(data_events))
        .route("/data/range/{project}", get(data_range))
        .route("/data/pairs/{epoch}", get(data_pairs))
        .route("/data/{epoch}", get(data_epoch))
        .route("/data/{epoch}/{project}", get(data_bundle))
        .route("/ipfs/{cid}", get(ipfs_block))
        .route_layer(axum::middleware::from_fn_with_state(api.clone(), limit_data))
        .with_state(api)
}

/// The API's routes.
pub fn router(
    market: Arc<Market>,
    conn: ConnectionManager,
    gossip: Option<lite_node_gossip::Gossip>,
    data: Option<Data>,
) -> Router {
    let tracker = Tracker::new(market.clone(), conn.clone());
    let api = Api { market: market.clone(), conn, tracker, gossip, store: data.as_ref().map(|d| d.store.clone()) };
    Router::new()
        .route("/epochs/active", get(active))
        .route("/epochs/gaps", get(gaps))
        .route("/epochs/{id}", get(epoch))
        .route("/epochs/{id}/submissions", get(submissions))
        .route("/dashboard", get(dashboard))
        .route("/participation", get(participation))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .with_state(api)
        .merge(data_router(market, data))
}

/// Serves the consumers' routes alone over `data` on `listener` until
/// `stop`: a read-only server (`lite-node serve`), no Redis, no pipeline.
pub async fn serve_data(
    market: Arc<Market>,
    listener: tokio::net::TcpListener,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    data: Data,
) -> std::io::Result<()> {
    let store = data.store.clone();
    let health = get(move || {
        let store = store.clone();
        async move {
            // What a load balancer asks: does the store answer, and what does
            // it hold.
            match (store.first_epoch(), store.last_epoch()) {
                (Ok(first), Ok(last)) => {
                    Json(json!({"status": "ok", "firstEpoch": first, "lastEpoch": last})).into_response()
                }
                (Err(e), _) | (_, Err(e)) => {
                    let why = json!({"status": "unavailable", "why": e.to_string()});
                    (StatusCode::SERVICE_UNAVAILABLE, Json(why)).into_response()
                }
            }
        }
    });
    let app = data_router(market, Some(data))
        .route("/health", health)
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app).with_graceful_shutdown(stop).await
}

/// Serves the API on `listener` until `stop`, on a Redis connection of its
/// own from `client`; with `gossip`, /metrics shows its peers and traffic.
pub async fn serve(
    market: Arc<Market>,
    client: redis::Client,
    listener: tokio::net::TcpListener,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    gossip: Option<lite_node_gossip::Gossip>,
) -> std::io::Result<()> {
    serve_with_store(market, client, listener, stop, gossip, None).await
}

/// [`serve`], with the consumers' routes over `data`.
pub async fn serve_with_store(
    market: Arc<Market>,
    client: redis::Client,
    listener: tokio::net::TcpListener,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    gossip: Option<lite_node_gossip::Gossip>,
    data: Option<Data>,
) -> std::io::Result<()> {
    let conn = crate::connect_retrying(&client, "monitor API").await;
    let app = router(market, conn, gossip, data).into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app).with_graceful_shutdown(stop).await
}

fn refused(status: StatusCode, why: String) -> (StatusCode, String) {
    (status, format!("{why}\n"))
}

fn the_store(api: &DataApi) -> Result<&Arc<crate::store::Store>, (StatusCode, String)> {
    api.store.as_ref().ok_or_else(|| refused(StatusCode::NOT_FOUND, "this process keeps no finalized data".into()))
}

fn store_failed(e: crate::store::StoreError) -> (StatusCode, String) {
    refused(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

async fn data_last(State(api): State<DataApi>) -> Answer {
    let store = the_store(&api)?;
    let Some(id) = store.last_epoch().map_err(store_failed)? else {
        return Err(refused(StatusCode::NOT_FOUND, "no epoch is finalized here yet".into()));
    };
    let meta = store
        .meta(id)
        .map_err(store_failed)?
        .ok_or_else(|| refused(StatusCode::NOT_FOUND, format!("epoch {id} is gone")))?;
    Ok(Json(json!({
        "epochId": id,
        "root": meta.root,
        "batchCid": meta.batch_cid,
        "projects": meta.projects,
    }))
    .into_response())
}

/// The epoch's id from the path, or a 400.
fn epoch_id_of(epoch: &str) -> Result<u64, (StatusCode, String)> {
    epoch.parse().map_err(|_| refused(StatusCode::BAD_REQUEST, format!("epoch `{epoch}` is not an epoch number")))
}

/// Why kept epoch `epoch_id` is not here: not finalized yet, past
/// retention (410), or not finalized by this validator (404).
fn not_here(api: &DataApi, store: &crate::store::Store, epoch_id: u64) -> (StatusCode, String) {
    let first = store.first_epoch().map_err(store_failed);
    let last = store.last_epoch().map_err(store_failed);
    let (first, last) = match (first, last) {
        (Ok(first), Ok(last)) => (first, last),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let why = match (first, last) {
        (_, Some(last)) if epoch_id > last => {
            format!("epoch {epoch_id} is not finalized here yet (the last is {last})")
        }
        (Some(first), _) if epoch_id < first => {
            let kept = api.retention_days.map_or(String::new(), |d| format!(", {d} days"));
            let why = format!("epoch {epoch_id} is past this server's retention (it keeps from epoch {first}{kept})");
            return refused(StatusCode::GONE, why);
        }
        (Some(_), Some(_)) => format!("epoch {epoch_id} is not kept here (this validator did not finalize it)"),
        _ => "no epoch is finalized here yet".to_owned(),
    };
    refused(StatusCode::NOT_FOUND, why)
}

/// Where the chain finalized kept epoch `meta` (`{block, tx}`), `null` while
/// not known; a 409 when the chain finalized another root than this
/// validator's (its bundles would prove nothing: the consumer asks another
/// server).
fn finalized_field(store: &crate::store::Store, meta: &crate::store::EpochMeta) -> Result<Value, (StatusCode, String)> {
    finalized_of(meta, store.on_chain(meta.epoch_id).map_err(store_failed)?.as_ref())
}

/// [`finalized_field`] of what the chain made of the epoch (`on_chain`, read
/// with it).
fn finalized_of(
    meta: &crate::store::EpochMeta,
    on_chain: Option<&crate::store::OnChain>,
) -> Result<Value, (StatusCode, String)> {
    let Some(on_chain) = on_chain else { return Ok(Value::Null) };
    if let Some(root) = on_chain.root.as_deref()
        && !root.eq_ignore_ascii_case(&meta.root)
    {
        let why = format!(
            "epoch {}: the chain finalized root {root}, not this validator's {} (its batch differs): ask another server",
            meta.epoch_id, meta.root
        );
        return Err(refused(StatusCode::CONFLICT, why));
    }
    if !on_chain.finalized {
        return Ok(Value::Null);
    }
    Ok(json!({"block": on_chain.block, "tx": on_chain.tx}))
}

/// `text` as a JSON string. A snapshot (canonical JSON: printable ASCII)
/// has only quotes and backslashes to escape, and is copied a run at a
/// time between them; text with a control character is left to serde_json.
fn write_json_string(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    if bytes.iter().any(|b| *b < 0x20) {
        serde_json::to_writer(out, text).expect("a string writes to a Vec");
        return;
    }
    out.reserve(bytes.len() + bytes.len() / 8 + 2);
    out.push(b'"');
    let mut from = 0;
    for at in memchr::memchr2_iter(b'"', b'\\', bytes) {
        out.extend_from_slice(&bytes[from..at]);
        out.extend_from_slice(&[b'\\', bytes[at]]);
        from = at + 1;
    }
    out.extend_from_slice(&bytes[from..]);
    out.push(b'"');
}

/// A project's bundle (`/data/{epoch}/{project}`, and each line of a
/// range), written to `out` as JSON: `{epochId, projectId, cid, snapshot,
/// proof, root, batchCid, chainId, protocolState, dataMarket, finalized}`.
fn write_bundle(
    api: &DataApi,
    project: &str,
    proved: &crate::store::Proved,
    finalized: &Value,
    out: &mut Vec<u8>,
) -> Result<(), (StatusCode, String)> {
    use std::io::Write as _;
    let (epoch_id, cid) = (proved.meta.epoch_id, &proved.cid);
    let bytes = proved.bytes.as_ref().ok_or_else(|| {
        refused(StatusCode::NOT_FOUND, format!("epoch {epoch_id} {project}: no node sent the bytes of {cid}"))
    })?;
    let snapshot = std::str::from_utf8(bytes)
        .map_err(|_| refused(StatusCode::INTERNAL_SERVER_ERROR, format!("the bytes kept of {cid} are not UTF-8")))?;
    let _ = write!(out, "{{\"epochId\":{epoch_id},\"projectId\":");
    write_json_string(out, project);
    out.extend_from_slice(b",\"cid\":");
    write_json_string(out, cid);
    out.extend_from_slice(b",\"snapshot\":");
    write_json_string(out, snapshot);
    out.extend_from_slice(b",\"proof\":[");
    for (n, hash) in proved.proof.iter().enumerate() {
        let mut hex = [0u8; 68];
        hex[..3].copy_from_slice(b"\"0x");
        hex::encode_to_slice(hash, &mut hex[3..67]).expect("32 bytes are 64 hex digits");
        hex[67] = b'"';
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&hex);
    }
    out.extend_from_slice(b"],\"root\":");
    write_json_string(out, &proved.meta.root);
    out.extend_from_slice(b",\"batchCid\":");
    write_json_string(out, &proved.meta.batch_cid);
    let _ = write!(out, ",\"chainId\":{},\"protocolState\":", api.market.chain_id);
    write_json_string(out, &api.protocol_state);
    out.extend_from_slice(b",\"dataMarket\":");
    write_json_string(out, &api.data_market);
    out.extend_from_slice(b",\"finalized\":");
    serde_json::to_writer(&mut *out, finalized)
        .map_err(|e| refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    out.push(b'}');
    Ok(())
}

/// One project's snapshot at one epoch, with what proves it to the chain.
async fn data_bundle(State(api): State<DataApi>, Path((epoch, project)): Path<(String, String)>) -> Answer {
    let store = the_store(&api)?;
    let epoch_id = epoch_id_of(&epoch)?;
    let proved = match store.proved(epoch_id, &project).map_err(store_failed)? {
        None => return Err(not_here(&api, store, epoch_id)),
        Some(Err(_)) => {
            return Err(refused(StatusCode::NOT_FOUND, format!("project `{project}` is not in epoch {epoch_id}")));
        }
        Some(Ok(proved)) => proved,
    };
    let finalized = finalized_of(&proved.meta, proved.on_chain.as_ref())?;
    let mut body = Vec::with_capacity(proved.bytes.as_ref().map_or(0, Vec::len) * 2 + 1024);
    write_bundle(&api, &project, &proved, &finalized, &mut body)?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// An epoch's (project id, CID) pairs, without the bytes, in project-id
/// order: the whole set, so a reader recomputes the root from them and
/// learns, against the root the chain holds, both which CID a project has
/// and that a project has none (a market that finalizes roots only reads
/// its previous snapshots so: docs/consumers.md). About 110 bytes a project.
async fn data_pairs(State(api): State<DataApi>, Path(epoch): Path<String>) -> Answer {
    let store = the_store(&api)?;
    let epoch_id = epoch_id_of(&epoch)?;
    let Some(kept) = store.epoch(epoch_id).map_err(store_failed)? else {
        return Err(not_here(&api, store, epoch_id));
    };
    let meta = store.meta(epoch_id).map_err(store_failed)?.ok_or_else(|| not_here(&api, store, epoch_id))?;
    let mut body = epoch_header(&api, &meta, finalized_field(store, &meta)?);
    body["pairs"] = json!(kept.pairs);
    Ok(([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response())
}

/// What every answer about a whole epoch starts with: the epoch, its root
/// and batch CID, the market, and where the chain finalized it.
fn epoch_header(api: &DataApi, meta: &crate::store::EpochMeta, finalized: Value) -> Value {
    json!({
        "epochId": meta.epoch_id,
        "root": meta.root,
        "batchCid": meta.batch_cid,
        "chainId": api.market.chain_id,
        "protocolState": &*api.protocol_state,
        "dataMarket": &*api.data_market,
        "finalized": finalized,
    })
}

/// `/data/range/{project}`'s epochs, both included.
#[derive(serde::Deserialize)]
struct EpochRange {
    from: u64,
    to: u64,
}

/// Epochs read from the store at a time while a range streams.
const RANGE_CHUNK: u64 = 256;

/// One project over an epoch range (cut to the epochs kept here), streamed
/// as NDJSON: one bundle a line (as `/data/{epoch}/{project}` answers it)
/// for each kept epoch of `from..=to` that has the project, in epoch order; an epoch this server
/// cannot prove (not kept, the project not in it, its bytes not sent, its
/// root not the chain's) is a line `{"epochId", "missing": why}` for the
/// consumer to read elsewhere. No cap: read a chunk of epochs at a time.
async fn data_range(
    State(api): State<DataApi>,
    Path(project): Path<String>,
    Query(range): Query<EpochRange>,
) -> Answer {
    let store = the_store(&api)?.clone();
    if range.from > range.to {
        return Err(refused(StatusCode::BAD_REQUEST, format!("from {} is after to {}", range.from, range.to)));
    }
    // Only what is kept here is answered for, missing lines included: a range
    // asked of epochs 0 to 2⁶⁴ is the kept ones, not an endless stream.
    let (first, last) = (store.first_epoch().map_err(store_failed)?, store.last_epoch().map_err(store_failed)?);
    let (Some(first), Some(last)) = (first, last) else {
        return Err(refused(StatusCode::NOT_FOUND, "no epoch is finalized here yet".into()));
    };
    let range = EpochRange { from: range.from.max(first), to: range.to.min(last) };
    if range.from > range.to {
        let why = format!("no epoch of that range is kept here (it keeps epochs {first} to {last})");
        return Err(refused(StatusCode::NOT_FOUND, why));
    }
    let api2 = api.clone();
    let chunks = (range.from..=range.to).step_by(RANGE_CHUNK as usize);
    let lines = futures_util::stream::iter(chunks).map(move |from| {
        let to = range.to.min(from.saturating_add(RANGE_CHUNK - 1));
        let proved = store.proved_range(&project, from, to, RANGE_CHUNK).map_err(std::io::Error::other)?;
        let mut out = Vec::with_capacity(proved.len() * 1024);
        let mut next = from;
        for p in &proved {
            for missing in next..p.meta.epoch_id {
                let line =
                    json!({"epochId": missing, "missing": format!("epoch {missing}: not kept here with `{project}`")});
                serde_json::to_writer(&mut out, &line).map_err(std::io::Error::other)?;
                out.push(b'\n');
            }
            next = p.meta.epoch_id + 1;
            let mark = out.len();
            let written = finalized_of(&p.meta, p.on_chain.as_ref())
                .and_then(|finalized| write_bundle(&api2, &project, p, &finalized, &mut out));
            if let Err((_, why)) = written {
                out.truncate(mark);
                let line = json!({"epochId": p.meta.epoch_id, "missing": why.trim()});
                serde_json::to_writer(&mut out, &line).map_err(std::io::Error::other)?;
            }
            out.push(b'\n');
        }
        for missing in next..=to {
            let line =
                json!({"epochId": missing, "missing": format!("epoch {missing}: not kept here with `{project}`")});
            serde_json::to_writer(&mut out, &line).map_err(std::io::Error::other)?;
            out.push(b'\n');
        }
        Ok::<_, std::io::Error>(out)
    });
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], axum::body::Body::from_stream(lines)).into_response())
}

/// `/data/{epoch}`'s page: the projects after `after` (in project-id
/// order), at most `limit` of them; the whole epoch by default.
#[derive(serde::Deserialize)]
struct EpochPage {
    after: Option<String>,
    limit: Option<usize>,
}

/// Projects read from the store at a time while an epoch streams: the
/// server's memory for one answer, whatever the epoch's size.
const STREAM_CHUNK: usize = 256;

/// Every project of an epoch (or a page of them) as one bundle, streamed as
/// NDJSON: a header line (the market, the epoch, its root and batch CID, how
/// many projects follow, and their multiproof), then one
/// `{projectId, cid, snapshot}` line a project in project-id order. Read a
/// chunk at a time from the store: memory stays flat at any epoch size.
async fn data_epoch(State(api): State<DataApi>, Path(epoch): Path<String>, Query(page): Query<EpochPage>) -> Answer {
    let store = the_store(&api)?.clone();
    let epoch_id = epoch_id_of(&epoch)?;
    if page.limit == Some(0) {
        return Err(refused(StatusCode::BAD_REQUEST, "limit must be at least 1".into()));
    }
    let Some(meta) = store.meta(epoch_id).map_err(store_failed)? else { return Err(not_here(&api, &store, epoch_id)) };
    let leaves = usize::try_from(meta.projects).unwrap_or(usize::MAX);
    // Where the page starts in the tree: the first project after `after`.
    let (start, first) = store.page(epoch_id, page.after.as_deref(), 1).map_err(store_failed)?;
    if let (Some(after), true) = (page.after.as_deref(), first.is_empty()) {
        return Err(refused(StatusCode::NOT_FOUND, format!("epoch {epoch_id} has no project after `{after}`")));
    }
    let end = page.limit.map_or(leaves, |limit| start.saturating_add(limit).min(leaves));
    // None: no project at all (an empty multiproof; the root is keccak("")).
    let multiproof = store.multiproof(epoch_id, leaves, start..end).map_err(store_failed)?.unwrap_or_default();
    let mut header = epoch_header(&api, &meta, finalized_field(&store, &meta)?);
    header["projects"] = json!(end - start);
    header["multiproof"] = json!({
        "proof": multiproof.proof.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
        "flags": multiproof.flags,
    });
    let mut first = header.to_string().into_bytes();
    first.push(b'\n');
    // Each chunk resumes after the last project of the one before.
    let state = (store, page.after, end - start);
    let lines = futures_util::stream::unfold(state, move |(store, after, left)| async move {
        if left == 0 {
            return None;
        }
        let read = store.page(epoch_id, after.as_deref(), STREAM_CHUNK.min(left));
        let (_, rows) = match read {
            Ok(read) => read,
            Err(e) => return Some((Err(std::io::Error::other(e)), (store, after, 0))),
        };
        if rows.is_empty() {
            return Some((Err(std::io::Error::other("the epoch changed while it was read")), (store, after, 0)));
        }
        let mut out = Vec::with_capacity(rows.len() * 512);
        for (project, cid, bytes) in &rows {
            let snapshot = bytes.as_deref().and_then(|b| std::str::from_utf8(b).ok());
            let line = json!({"projectId": project, "cid": cid, "snapshot": snapshot});
            if let Err(e) = serde_json::to_writer(&mut out, &line) {
                return Some((Err(std::io::Error::other(e)), (store, after, 0)));
            }
            out.push(b'\n');
        }
        let left = left - rows.len();
        let after = rows.last().map(|(p, _, _)| p.clone());
        Some((Ok(out), (store, after, left)))
    });
    let body = futures_util::stream::once(async move { Ok(first) }).chain(lines);
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], axum::body::Body::from_stream(body)).into_response())
}

/// `/data/events`' start when no `Last-Event-ID` is sent: after epoch
/// `after` (without either, from the newest epoch finalized).
#[derive(serde::Deserialize)]
struct EventsFrom {
    after: Option<u64>,
}

/// How often an event stream looks for newly settled epochs.
const EVENTS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// The finalized epochs as Server-Sent Events, in epoch order, each once:
/// `id` the epoch id, `data` `{epochId, root, batchCid, projects,
/// finalized: {block, tx}, servedHere}`. An epoch is sent once the chain's
/// outcome for it is known here, and never past one still awaiting it, so a
/// consumer that resumes with `Last-Event-ID` (here, or at another
/// validator) gets every later epoch once: none twice, none skipped for
/// arriving late. An epoch the chain finalized with another root than this
/// validator's is sent with `servedHere: false` (read it elsewhere); one the
/// chain did not finalize is not sent.
async fn data_events(
    State(api): State<DataApi>,
    headers: axum::http::HeaderMap,
    Query(from): Query<EventsFrom>,
) -> Answer {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let store = the_store(&api)?.clone();
    let resumed = match headers.get("last-event-id") {
        None => None,
        Some(id) => Some(
            id.to_str()
                .ok()
                .and_then(|id| id.trim().parse::<u64>().ok())
                .ok_or_else(|| refused(StatusCode::BAD_REQUEST, format!("Last-Event-ID {id:?} is not an epoch id")))?,
        ),
    };
    let after = match resumed.or(from.after) {
        Some(after) => Some(after),
        None => store.last_finalized().map_err(store_failed)?.map(|e| e.saturating_sub(1)),
    };
    let permit = api.streams.clone().try_acquire_owned().map_err(|_| {
        refused(StatusCode::SERVICE_UNAVAILABLE, format!("{MAX_STREAMS} event streams are open here; retry"))
    })?;
    let start = (store, after, std::collections::VecDeque::<Event>::new(), permit);
    let events = futures_util::stream::unfold(start, |(store, mut after, mut pending, permit)| async move {
        loop {
            if let Some(event) = pending.pop_front() {
                return Some((Ok::<_, std::convert::Infallible>(event), (store, after, pending, permit)));
            }
            let settled = match store.settled_after(after, 64) {
                Ok(settled) => settled,
                Err(e) => {
                    tracing::warn!("event stream: {e}; closing it (the consumer resumes by its last id)");
                    return None;
                }
            };
            for (epoch_id, on_chain) in settled {
                after = Some(epoch_id);
                if !on_chain.finalized {
                    continue;
                }
                let Ok(Some(meta)) = store.meta(epoch_id) else { continue };
                let here = on_chain.root.as_deref().is_none_or(|r| r.eq_ignore_ascii_case(&meta.root));
                let data = json!({
                    "epochId": epoch_id,
                    "root": on_chain.root.as_deref().unwrap_or(&meta.root),
                    "batchCid": meta.batch_cid,
                    "projects": meta.projects,
                    "finalized": {"block": on_chain.block, "tx": on_chain.tx},
                    "servedHere": here,
                });
                pending.push_back(Event::default().id(epoch_id.to_string()).event("epoch").data(data.to_string()));
            }
            if pending.is_empty() {
                tokio::time::sleep(EVENTS_EVERY).await;
            }
        }
    });
    // A comment every 5 s: a quiet stream is told from a dead one well
    // within a client's read timeout.
    let keep_alive = KeepAlive::new().interval(std::time::Duration::from_secs(5));
    Ok(Sse::new(events).keep_alive(keep_alive).into_response())
}

/// A snapshot's raw bytes by its CID, as an IPFS trustless gateway answers
/// for a raw block: the client hashes them against the CID.
async fn ipfs_block(State(api): State<DataApi>, Path(cid): Path<String>) -> Answer {
    let store = the_store(&api)?;
    if let Err(why) = lite_node_protocol::cid::check_canonical(&cid) {
        return Err(refused(StatusCode::BAD_REQUEST, format!("`{cid}` is {why}")));
    }
    let bytes = store.block(&cid).map_err(store_failed)?;
    let bytes = bytes.ok_or_else(|| refused(StatusCode::NOT_FOUND, format!("{cid} is not kept here")))?;
    Ok(([(header::CONTENT_TYPE, "application/vnd.ipld.raw")], bytes).into_response())
}

/// Submissions per page of `/epochs/{id}/submissions` when none is asked,
/// and at most.
const PAGE: usize = 100;
const MAX_PAGE: usize = 1_000;

type Answer = Result<Response, (StatusCode, String)>;

fn unavailable(e: redis::RedisError) -> (StatusCode, String) {
    (StatusCode::SERVICE_UNAVAILABLE, format!("Redis unavailable: {e}\n"))
}

fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

async fn state_of(api: &Api, epoch_id: u64) -> redis::RedisResult<BTreeMap<String, String>> {
    api.conn.clone().hgetall(api.market.keys.epoch_state(epoch_id)).await
}

async fn active(State(api): State<Api>) -> Answer {
    let mut ids: Vec<u64> = api.conn.clone().smembers(api.market.keys.epochs_active()).await.map_err(unavailable)?;
    ids.sort_unstable();
    let mut epochs = Vec::new();
    for id in ids {
        let mut state = state_of(&api, id).await.map_err(unavailable)?;
        if !state.is_empty() {
            // Counted now, as `/epochs/{id}` counts it.
            let accepted: u64 =
                api.conn.clone().scard(api.market.keys.epoch_processed_set(id)).await.map_err(unavailable)?;
            state.insert("submissions_count".into(), accepted.to_string());
            epochs.push(json!({"epoch_id": id, "state": state}));
        }
    }
    Ok(Json(json!({"epochs": epochs})).into_response())
}

async fn epoch(State(api): State<Api>, Path(id): Path<u64>) -> Answer {
    let k = &api.market.keys;
    // One transaction: the state and the batch the aggregator wrote together
    // are read together.
    let (mut state, finalized, accepted, rejected): (BTreeMap<String, String>, Option<String>, u64, u64) =
        redis::pipe()
            .atomic()
            .hgetall(k.epoch_state(id))
            .get(k.finalized(id))
            .scard(k.epoch_processed_set(id))
            .hlen(k.rejections(id))
            .query_async(&mut api.conn.clone())
            .await
            .map_err(unavailable)?;
    if state.is_empty() && finalized.is_none() {
        return Err((StatusCode::NOT_FOUND, format!("epoch {id} is not known here (never released, or pruned)\n")));
    }
    if !state.is_empty() {
        state.insert("submissions_count".into(), accepted.to_string());
    }
    Ok(Json(json!({
        "epoch_id": id,
        "state": state,
        "accepted": accepted,
        "rejected": rejected,
        "finalized": finalized.as_deref().map(parsed),
    }))
    .into_response())
}

/// `?after=&limit=` of `/epochs/{id}/submissions`.
#[derive(Debug, Default, serde::Deserialize)]
struct PageQuery {
    after: Option<String>,
    limit: Option<usize>,
}

/// One page of an epoch's verdicts: the accepted votes (`ZSCAN` of the
/// epoch's votes: slot, project, CID, or `void` for a slot that
/// equivocated), then the rejections (`HSCAN`); `after` is where the last
/// page stopped (`a:{cursor}` or `r:{cursor}`). A page holds about `limit`
/// submissions (Redis's scan counts are a hint). Kept for a day.
async fn submissions(State(api): State<Api>, Path(id): Path<u64>, Query(q): Query<PageQuery>) -> Answer {
    let k = &api.market.keys;
    let mut conn = api.conn.clone();
    let limit = q.limit.unwrap_or(PAGE).clamp(1, MAX_PAGE);
    let bad = |why: &str| (StatusCode::BAD_REQUEST, format!("after={}: {why}\n", q.after.as_deref().unwrap_or("")));
    let (in_accepted, cursor): (bool, u64) = match q.after.as_deref() {
        None | Some("") => (true, 0),
        Some(after) => match after.split_once(':') {
            Some(("a", c)) => (true, c.parse().map_err(|_| bad("not a cursor this API gave"))?),
            Some(("r", c)) => (false, c.parse().map_err(|_| bad("not a cursor this API gave"))?),
            _ => return Err(bad("not a cursor this API gave")),
        },
    };
    let (mut accepted, mut rejected) = (Vec::<Value>::new(), Vec::<Value>::new());
    let (mut in_accepted, mut cursor) = (in_accepted, cursor);
    // Scans until the page is full or both are done: accepted, then rejected.
    let next = loop {
        if in_accepted {
            let (next, members): (u64, Vec<String>) = redis::cmd("ZSCAN")
                .arg(k.votes(id))
                .arg(cursor)
                .arg("COUNT")
                .arg(limit)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            // ZSCAN answers member, score, member, score…
            accepted.extend(members.iter().step_by(2).filter_map(|m| {
                let mut fields = m.splitn(3, '\x1f');
                let (project, slot, cid) = (fields.next()?, fields.next()?, fields.next()?);
                let slot: u64 = slot.parse().ok()?;
                Some(if cid.is_empty() {
                    json!({"slot_id": slot, "project_id": project, "snapshot_cid": null, "void": true})
                } else {
                    json!({"slot_id": slot, "project_id": project, "snapshot_cid": cid})
                })
            }));
            (in_accepted, cursor) = if next == 0 { (false, 0) } else { (true, next) };
        } else {
            let (next, fields): (u64, Vec<(String, String)>) = redis::cmd("HSCAN")
                .arg(k.rejections(id))
                .arg(cursor)
                .arg("COUNT")
                .arg(limit)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            rejected.extend(fields.into_iter().map(|(sid, record)| {
                let mut v = parsed(&record);
                if let Value::Object(o) = &mut v {
                    o.insert("submission_id".into(), sid.into());
                }
                v
            }));
            if next == 0 {
                break None;
            }
            cursor = next;
        }
        if accepted.len() + rejected.len() >= limit {
            break Some(format!("{}:{cursor}", if in_accepted { "a" } else { "r" }));
        }
    };
    Ok(Json(json!({"epoch_id": id, "accepted": accepted, "rejected": rejected, "next": next})).into_response())
}

async fn gaps(State(api): State<Api>) -> Answer {
    let gaps: Vec<(String, u64)> =
        api.conn.clone().zrange_withscores(api.market.keys.epochs_gaps(), 0, -1).await.map_err(unavailable)?;
    let gaps: Vec<Value> = gaps
        .into_iter()
        .map(|(m, at)| {
            let (epoch, kind) = m.split_once(':').unwrap_or((&m, ""));
            json!({"epoch_id": epoch.parse::<u64>().ok(), "gap": kind, "detected_at": at})
        })
        .collect();
    Ok(Json(json!({"gaps": gaps})).into_response())
}

async fn dashboard(State(api): State<Api>) -> Answer {
    Ok(Json(api.tracker.summary().await.map_err(unavailable)?).into_response())
}

async fn participation(State(api): State<Api>) -> Answer {
    Ok(Json(api.tracker.participation_now().await.map_err(unavailable)?).into_response())
}

async fn health(State(api): State<Api>) -> Response {
    let mut conn = api.conn.clone();
    let mut problems = Vec::new();
    let head: redis::RedisResult<Option<u64>> = conn.get(api.market.keys.anchor_head()).await;
    match &head {
        Err(e) => problems.push(format!("Redis unavailable: {e}")),
        Ok(None) => problems
            .push("no fresh anchor head: the event monitor is not running or cannot reach the anchor chain".to_owned()),
        Ok(Some(_)) => {}
    }
    let depth: u64 = conn.llen(api.market.keys.submission_queue()).await.unwrap_or(0);
    // Epochs whose state Redis lost in the last hour: degraded, not down.
    let since = crate::now_secs().saturating_sub(3600);
    let gaps: Vec<String> = conn.zrangebyscore(api.market.keys.epochs_gaps(), since, "+inf").await.unwrap_or_default();
    let lost: Vec<&str> = gaps.iter().filter_map(|g| g.strip_suffix(":state_lost")).collect();
    let mut degraded = if lost.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "the state of epoch(s) {} was lost from Redis in the last hour (a restart without persistence?); \
             they were opened again and their earlier votes are gone",
            lost.join(", ")
        )]
    };
    let unwatched: Vec<&str> = gaps.iter().filter_map(|g| g.strip_suffix(":not_watched")).collect();
    if !unwatched.is_empty() {
        degraded.push(format!(
            "epoch(s) {} were not watched whole in the last hour, so not attested: this validator's gossip intake was \
             not listening for the whole epoch (no gossip peer connected, out of the other validators' mesh, or \
             restarting); see /epochs/gaps",
            unwatched.join(", ")
        ));
    }
    let monitor: Option<String> = conn.get(api.market.keys.monitor_problem()).await.unwrap_or_default();
    degraded.extend(monitor);
    let onchain: Option<String> = conn.get(api.market.keys.onchain_problem()).await.unwrap_or_default();
    degraded.extend(onchain);
    // The anchor RPC endpoints as the monitor's client last probed them.
    let rpcs: Option<String> = conn.get(api.market.keys.monitor_rpcs()).await.unwrap_or_default();
    let rpcs: serde_json::Value = rpcs.and_then(|r| serde_json::from_str(&r).ok()).unwrap_or_default();
    let behind: Vec<String> = rpcs
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["leftOut"] == true)
        .map(|e| format!("{} ({} blocks behind)", e["url"].as_str().unwrap_or("?"), e["behind"]))
        .collect();
    if !behind.is_empty() {
        degraded.push(format!("anchor RPC endpoint(s) behind the freshest, used only after it: {}", behind.join(", ")));
    }
    // The finalized data consumers read: kept, or why not.
    if let Some(why) = api.store.as_ref().and_then(|s| s.problem()) {
        degraded.push(why);
    }
    let status = if problems.is_empty() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = json!({
        "status": if !problems.is_empty() { "unhealthy" } else if !degraded.is_empty() { "degraded" } else { "ok" },
        "problems": problems,
        "degraded": degraded,
        "anchor_head": head.ok().flatten(),
        "queue_depth": depth,
        "anchor_rpcs": rpcs,
    });
    (status, Json(body)).into_response()
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabel {
    state: String,
}

/// The gossip peer's traffic and peers, on `registry`.
async fn gossip_metrics(registry: &mut Registry, gossip: &lite_node_gossip::Gossip) {
    use lite_node_gossip::Stats;
    let stats = gossip.stats();
    let messages = Family::<OutcomeLabel, Counter>::default();
    for (outcome, counter) in [
        ("accepted", &stats.accepted),
        ("rejected", &stats.rejected),
        ("ignored", &stats.ignored),
        ("unwanted", &stats.unwanted),
        ("no_room", &stats.full),
        ("throttled", &stats.throttled),
    ] {
        messages.get_or_create(&OutcomeLabel { outcome: outcome.into() }).inc_by(Stats::get(counter));
    }
    registry.register(
        "gossip_messages",
        "Gossip messages received, by outcome (unwanted, no_room and throttled are of the ignored; throttled: \
         not read, its sender past its budget of useless messages)",
        messages,
    );
    let slow = Counter::<u64>::default();
    slow.inc_by(Stats::get(&stats.slow_disconnected));
    registry.register("gossip_slow_disconnected", "Peers disconnected for taking nothing queued for them", slow);
    let graylistings = Counter::<u64>::default();
    graylistings.inc_by(Stats::get(&stats.graylistings));
    let banned = Counter::<u64>::default();
    banned.inc_by(Stats::get(&stats.banned));
    registry.register(
        "gossip_banned",
        "Peers disconnected and refused for a while for being graylisted again and again",
        banned,
    );
    registry.register(
        "gossip_graylistings",
        "Times a peer's score fell below the graylist threshold by what it sent (its messages ignored since)",
        graylistings,
    );
    let p = gossip.peers().await;
    let peers = Family::<PeerLabel, Gauge>::default();
    for (state, n) in
        [("connected", p.connected), ("subscribed", p.subscribed), ("mesh", p.mesh), ("graylisted", p.graylisted)]
    {
        peers.get_or_create(&PeerLabel { state: state.into() }).set(n as i64);
    }
    registry.register(
        "gossip_peers",
        "Gossip peers now: connected and read, subscribed (validators), in the mesh, graylisted (not read)",
        peers,
    );
}

async fn metrics(State(api): State<Api>) -> Answer {
    let k = &api.market.keys;
    let mut conn = api.conn.clone();
    let counters: BTreeMap<String, u64> = conn.hgetall(k.counters()).await.map_err(unavailable)?;
    let (waiting, held) = crate::ReliableQueue::submissions(conn.clone(), k).depth().await.map_err(unavailable)?;
    let more: Vec<u64> = redis::pipe()
        .llen(k.finalization_queue())
        .llen(k.aggregation_queue())
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    let depths = [waiting as u64, held as u64, more[0], more[1]];
    let count = |name: &str| counters.get(name).copied().unwrap_or(0);
    let mut registry = Registry::with_prefix("validator");
    let counter = |v: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        c
    };
    registry.register("submissions_received", "Submissions the gateway queued", counter(count("received")));
    registry.register("submissions_accepted", "Submissions that passed every check", counter(count("accepted")));
    let rejected = Family::<ReasonLabel, Counter>::default();
    for r in Reason::ALL {
        rejected
            .get_or_create(&ReasonLabel { reason: r.as_str().into() })
            .inc_by(count(&format!("rejected:{}", r.as_str())));
    }
    registry.register("submissions_rejected", "Submissions rejected, by reason", rejected);
    let unwanted = Family::<ReasonLabel, Counter>::default();
    for why in crate::gateway::UNWANTED_WHY {
        unwanted.get_or_create(&ReasonLabel { reason: why.into() }).inc_by(count(&format!("gossip_unwanted:{why}")));
    }
    registry.register(
        "gossip_unwanted",
        "Gossip submissions of no use (neither relayed nor queued; counted against the sending peer), by reason",
        unwanted,
    );
    let queues = Family::<QueueLabel, Gauge>::default();
    for (name, depth) in ["submissions", "submissions_processing", "finalization", "aggregation"].iter().zip(&depths) {
        queues.get_or_create(&QueueLabel { queue: (*name).into() }).set(*depth as i64);
    }
    registry.register("queue_depth", "Items waiting (or held) on each queue", queues);
    registry.register("epochs_finalized", "Epochs this validator finalized", counter(count("finalized")));
    registry.register(
        "finalization_latency_milliseconds_sum",
        "Sum over finalized epochs of the time from the window's close to the finalized batch",
        counter(count("finalization_latency_ms_sum")),
    );
    if let Some(gossip) = &api.gossip {
        gossip_metrics(&mut registry, gossip).await;
    }
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).expect("writing to a String");
    Ok(([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], out).into_response())
}

#[cfg(test)]
mod tests {
    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let snapshot = r#"{"a":"x\"y\\z","b":[1,"\u00e9"],"c":"\\"}"#;
        for text in ["", "plain", "\"", "\\", "a\"b\\c\"", snapshot, "tab\there", "new\nline", "é ünï", "\u{1}"] {
            let mut out = Vec::new();
            super::write_json_string(&mut out, text);
            assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(text).unwrap(), "{text:?}");
        }
    }
}
