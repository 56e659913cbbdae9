//! JSON-RPC over HTTP for processors: single calls and batches, several
//! endpoint URLs with failover, and the crossing from a processor's blocking
//! thread into async I/O.
//!
//! **Failover** ([`HttpRpc`]): a request goes to each endpoint in turn,
//! starting from the last one that answered, until one answers with JSON; a
//! transport error, a timeout, a non-2xx status or an answer that is not
//! JSON moves on to the next, each counted and logged with the URL redacted.
//! A JSON-RPC error inside an answer is an answer: the caller reads it. A
//! `ws(s)://` endpoint carries the same requests over its connection
//! (`ws`).
//!
//! **Freshness.** An endpoint that answers can still be behind: a provider
//! lagging, a node frozen on an old block. With more than one endpoint,
//! each one's head is read every [`PROBE_EVERY`]; one more than
//! [`MAX_BEHIND`] blocks under the highest (or failing) is tried only after
//! every fresh one, and the first fresh endpoint in the configured order is
//! the one used. Each endpoint's head and lag are kept for `/health` and
//! `/metrics` ([`HttpRpc::endpoints`]).
//!
//! Processors run on blocking threads. A call is spawned onto the dedicated
//! [`IoRuntime`] and the blocking thread waits on a channel for its answer, so
//! no runtime is ever entered from inside another and the compute pool cannot
//! starve the I/O that would unblock it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use abi_stable::std_types::ROption;
use lite_node_core::url::Url;
use lite_node_plugin_api::{RpcCall, RpcError};
use lite_node_protocol::to_quantity;
use serde_json::{Value, json};

use lite_node_core::url::{parse_anchor_url, parse_rpc_url, redact_rpc_url};

use crate::ws::{HeadSignal, WsEndpoint};

/// A JSON-RPC endpoint, as a processor reaches it through the host: called
/// from a blocking thread, answered from the I/O runtime.
pub trait RpcEndpoint: Send + Sync {
    fn call(&self, method: &str, params_json: &str) -> Result<String, RpcError>;
    fn batch(&self, calls: &[RpcCall]) -> Result<Vec<Result<String, RpcError>>, RpcError>;
}

impl std::fmt::Debug for dyn RpcEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RpcEndpoint")
    }
}

/// The node's I/O runtime: every network call of a processor runs here.
#[derive(Debug, Clone)]
pub struct IoRuntime {
    handle: tokio::runtime::Handle,
    // Keeps the runtime alive as long as any handle to it exists.
    _runtime: Arc<RuntimeOwner>,
}

/// Shuts the runtime down without blocking, so the last handle may be
/// dropped anywhere, async code included.
#[derive(Debug)]
struct RuntimeOwner(Option<tokio::runtime::Runtime>);

impl Drop for RuntimeOwner {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl IoRuntime {
    pub fn new() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lite-node-io")
            .enable_all()
            .build()?;
        Ok(Self { handle: runtime.handle().clone(), _runtime: Arc::new(RuntimeOwner(Some(runtime))) })
    }

    /// Runs `future` on the I/O runtime and waits for it from a blocking thread.
    pub fn wait<T: Send + 'static>(&self, future: impl Future<Output = T> + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(future.await);
        });
        rx.recv().ok()
    }
}

/// One chain's JSON-RPC endpoints, tried in order from the last that worked:
/// http(s), or (the anchor's) WebSockets (`chain::ws`).
#[derive(Debug)]
pub struct HttpRpc {
    /// `source` or `anchor`, for messages.
    role: &'static str,
    urls: Arc<Vec<Url>>,
    /// The WebSocket connection of each `ws(s)://` URL (same index).
    sockets: Arc<Vec<Option<WsEndpoint>>>,
    timeout: Duration,
    client: reqwest::Client,
    io: IoRuntime,
    next_id: AtomicU64,
    preferred: Arc<AtomicUsize>,
    /// Counts every failed request to one endpoint (for `/metrics`).
    errors: Option<prometheus_client::metrics::counter::Counter>,
    /// Each endpoint's head as last probed, and whether it is left for the
    /// others (same index as `urls`).
    freshness: Arc<Vec<Freshness>>,
    /// Held while this `HttpRpc` lives: the prober ends once it is gone.
    _alive: Arc<()>,
}

/// How often each endpoint's head is read when there are several.
pub const PROBE_EVERY: Duration = Duration::from_secs(5);

/// Blocks under the highest endpoint's head past which an endpoint is
/// behind: tried only after every fresh one.
pub const MAX_BEHIND: u64 = 8;

/// One endpoint's freshness as last probed.
#[derive(Debug, Default)]
struct Freshness {
    /// Its head (0: not read yet, or failing).
    head: AtomicU64,
    /// Blocks under the highest head.
    behind: AtomicU64,
    /// Left for the others: behind more than [`MAX_BEHIND`], or failing.
    stale: std::sync::atomic::AtomicBool,
}

/// One endpoint as `/health` shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointState {
    /// The URL, an API key in it left out.
    pub url: String,
    pub head: Option<u64>,
    /// Blocks under the highest endpoint's head.
    pub behind: u64,
    /// Tried only after every fresh endpoint.
    pub left_out: bool,
}

pub(crate) fn rpc_error(message: String) -> RpcError {
    RpcError { code: ROption::RNone, message: message.into() }
}

impl HttpRpc {
    /// Endpoints given as text (a tool's `--…-rpc` flag, a test's anvil):
    /// each must be an http(s) URL.
    pub fn new(role: &'static str, urls: Vec<String>, timeout: Duration, io: IoRuntime) -> Result<Self, String> {
        let parse = if role == "anchor" { parse_anchor_url } else { parse_rpc_url };
        let urls = urls.iter().map(|u| parse(u)).collect::<Result<Vec<_>, _>>()?;
        Self::from_urls(role, urls, timeout, io)
    }

    /// Endpoints already checked (the node's configuration).
    pub fn from_urls(role: &'static str, urls: Vec<Url>, timeout: Duration, io: IoRuntime) -> Result<Self, String> {
        if urls.is_empty() {
            return Err(format!("no {role} RPC URL configured"));
        }
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        // Only the anchor's WebSockets subscribe to new heads.
        let sockets = urls
            .iter()
            .map(|u| {
                matches!(u.scheme(), "ws" | "wss")
                    .then(|| WsEndpoint::start(u.clone(), role == "anchor", timeout, &io.handle))
            })
            .collect();
        let freshness: Arc<Vec<Freshness>> = Arc::new(urls.iter().map(|_| Freshness::default()).collect());
        let rpc = Self {
            role,
            urls: Arc::new(urls),
            sockets: Arc::new(sockets),
            timeout,
            client,
            io,
            next_id: AtomicU64::new(1),
            preferred: Arc::new(AtomicUsize::new(0)),
            errors: None,
            freshness,
            _alive: Arc::new(()),
        };
        if rpc.urls.len() > 1 {
            rpc.io.handle.spawn(rpc.prober());
        }
        Ok(rpc)
    }

    /// Reads every endpoint's head each [`PROBE_EVERY`] and marks those
    /// behind; ends once this `HttpRpc` is dropped.
    fn prober(&self) -> impl Future<Output = ()> + Send + 'static {
        let alive = Arc::downgrade(&self._alive);
        let (urls, sockets, client, timeout) =
            (self.urls.clone(), self.sockets.clone(), self.client.clone(), self.timeout);
        let (freshness, preferred, role) = (self.freshness.clone(), self.preferred.clone(), self.role);
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 0, "method": "eth_blockNumber", "params": []});
            loop {
                let heads = futures_util::future::join_all((0..urls.len()).map(|i| {
                    let (body, client, urls, sockets) = (&body, &client, &urls, &sockets);
                    async move {
                        let answer = match &sockets[i] {
                            Some(socket) => socket.send(0, body, timeout).await,
                            None => post_once(client, &urls[i], body).await,
                        };
                        answer.ok().and_then(|v| lite_node_protocol::quantity::quantity(&v["result"]).ok())
                    }
                }))
                .await;
                if alive.upgrade().is_none() {
                    return;
                }
                let highest = heads.iter().flatten().max().copied().unwrap_or(0);
                for (i, head) in heads.iter().enumerate() {
                    let f = &freshness[i];
                    let behind = head.map_or(u64::MAX, |h| highest.saturating_sub(h));
                    let stale = behind > MAX_BEHIND;
                    if stale != f.stale.load(Ordering::Relaxed) {
                        let url = redact_rpc_url(urls[i].as_str());
                        match head {
                            _ if !stale => tracing::info!("{role} RPC {url} is fresh again"),
                            Some(h) => tracing::warn!(
                                "{role} RPC {url} is at block {h}, {behind} behind the highest ({highest}): the \
                                 others are used first"
                            ),
                            None => tracing::warn!("{role} RPC {url} does not answer: the others are used first"),
                        }
                    }
                    f.head.store(head.unwrap_or(0), Ordering::Relaxed);
                    f.behind.store(if head.is_some() { behind } else { 0 }, Ordering::Relaxed);
                    f.stale.store(stale, Ordering::Relaxed);
                }
                // The first fresh endpoint in the configured order is used.
                if freshness[preferred.load(Ordering::Relaxed)].stale.load(Ordering::Relaxed)
                    && let Some(fresh) = freshness.iter().position(|f| !f.stale.load(Ordering::Relaxed))
                {
                    preferred.store(fresh, Ordering::Relaxed);
                }
                tokio::time::sleep(PROBE_EVERY).await;
            }
        }
    }

    /// Each endpoint's head and lag as last probed (one endpoint: never
    /// probed, never left out).
    pub fn endpoints(&self) -> Vec<EndpointState> {
        self.urls
            .iter()
            .zip(self.freshness.iter())
            .map(|(url, f)| {
                let head = f.head.load(Ordering::Relaxed);
                EndpointState {
                    url: redact_rpc_url(url.as_str()),
                    head: (head > 0).then_some(head),
                    behind: f.behind.load(Ordering::Relaxed),
                    left_out: f.stale.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// Counts failed requests in `counter`.
    pub fn count_errors(mut self, counter: prometheus_client::metrics::counter::Counter) -> Self {
        self.errors = Some(counter);
        self
    }

    /// Posts `body` to each endpoint in turn, from the last that worked,
    /// until one answers with JSON. The future runs on the I/O runtime.
    fn post_future(&self, body: Value) -> impl Future<Output = Result<Value, RpcError>> + Send + 'static {
        let urls = self.urls.clone();
        let sockets = self.sockets.clone();
        let timeout = self.timeout;
        let client = self.client.clone();
        let preferred = self.preferred.clone();
        let role = self.role;
        let errors = self.errors.clone();
        let freshness = self.freshness.clone();
        async move {
            let start = preferred.load(Ordering::Relaxed);
            let mut failures = Vec::new();
            // From the last that worked; endpoints behind after every fresh one.
            let mut order: Vec<usize> = (0..urls.len()).map(|k| (start + k) % urls.len()).collect();
            order.sort_by_key(|i| freshness[*i].stale.load(Ordering::Relaxed));
            for i in order {
                let answer = match &sockets[i] {
                    Some(socket) => match crate::ws::message_id(&body) {
                        Some(id) => socket.send(id, &body, timeout).await,
                        None => Err("a request without an id".to_owned()),
                    },
                    None => post_once(&client, &urls[i], &body).await,
                };
                match answer {
                    Ok(value) => {
                        preferred.store(i, Ordering::Relaxed);
                        return Ok(value);
                    }
                    Err(e) => {
                        if let Some(c) = &errors {
                            c.inc();
                        }
                        tracing::debug!("{role} RPC {}: {e}", redact_rpc_url(urls[i].as_str()));
                        failures.push(format!("{}: {e}", redact_rpc_url(urls[i].as_str())));
                    }
                }
            }
            Err(rpc_error(format!("every {role} RPC endpoint failed ({})", failures.join("; "))))
        }
    }

    /// From a blocking thread (a processor's host callback).
    fn post(&self, body: Value) -> Result<Value, RpcError> {
        let role = self.role;
        self.io
            .wait(self.post_future(body))
            .unwrap_or_else(|| Err(rpc_error(format!("{role} RPC: the I/O runtime is shutting down"))))
    }

    /// From async code: the request still runs on the I/O runtime, so every
    /// connection lives on one runtime.
    async fn post_async(&self, body: Value) -> Result<Value, RpcError> {
        let role = self.role;
        self.io
            .handle
            .spawn(self.post_future(body))
            .await
            .unwrap_or_else(|e| Err(rpc_error(format!("{role} RPC task failed: {e}"))))
    }

    fn request(&self, method: &str, params_json: &str) -> Result<(u64, Value), RpcError> {
        let params: Value =
            serde_json::from_str(params_json).map_err(|e| rpc_error(format!("{method}: params are not JSON: {e}")))?;
        self.request_value(method, params)
    }

    fn request_value(&self, method: &str, params: Value) -> Result<(u64, Value), RpcError> {
        if !params.is_array() && !params.is_object() {
            return Err(rpc_error(format!("{method}: params must be a JSON array or object")));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        Ok((id, json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})))
    }

    /// A view of the contract at `to` (`eth_call` at the newest block),
    /// decoded; the error names the function.
    pub async fn view<C: alloy::sol_types::SolCall>(
        &self,
        to: alloy::primitives::Address,
        call: &C,
    ) -> Result<C::Return, String> {
        let tx = json!({"to": to, "data": alloy::primitives::Bytes::from(call.abi_encode())});
        let answer = self
            .call_value("eth_call", json!([tx, "latest"]))
            .await
            .map_err(|e| format!("{}: {}", C::SIGNATURE, e.message))?;
        let bytes: alloy::primitives::Bytes =
            serde_json::from_value(answer.clone()).map_err(|_| format!("{}: answered {answer}", C::SIGNATURE))?;
        C::abi_decode_returns(&bytes).map_err(|e| format!("{}: answered {answer}: {e}", C::SIGNATURE))
    }

    /// The hash of block `number`; `None` when the endpoint does not have
    /// that block (behind, or a chain shorter than it).
    pub async fn block_hash(&self, number: u64) -> Result<Option<alloy::primitives::B256>, RpcError> {
        let block = self.call_value("eth_getBlockByNumber", json!([to_quantity(number), false])).await?;
        if block.is_null() {
            return Ok(None);
        }
        serde_json::from_value(block["hash"].clone())
            .map(Some)
            .map_err(|_| rpc_error(format!("{} block {number}: answered {block}", self.role)))
    }

    /// One call from async code; returns the `result` member.
    pub async fn call_value(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let (id, body) = self.request_value(method, params)?;
        let response = self.post_async(body).await?;
        single_result(&response, id, method)
    }

    /// A batch from async code; the outer error is a transport failure.
    pub async fn batch_values(&self, calls: &[(&str, Value)]) -> Result<Vec<Result<Value, RpcError>>, RpcError> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids = Vec::with_capacity(calls.len());
        let mut bodies = Vec::with_capacity(calls.len());
        for (method, params) in calls {
            let (id, body) = self.request_value(method, params.clone())?;
            ids.push(id);
            bodies.push(body);
        }
        let response = self.post_async(Value::Array(bodies)).await?;
        let methods: Vec<&str> = calls.iter().map(|(m, _)| *m).collect();
        batch_results(response, &ids, &methods)
    }

    /// The role (`source`, `anchor`) this endpoint serves, for messages.
    pub fn role(&self) -> &'static str {
        self.role
    }

    /// New heads and (re)connections of the first WebSocket endpoint; `None`
    /// when every endpoint is polled over HTTP.
    pub fn heads(&self) -> Option<tokio::sync::watch::Receiver<HeadSignal>> {
        self.sockets.iter().flatten().next().map(WsEndpoint::signal)
    }
}

fn single_result(response: &Value, id: u64, method: &str) -> Result<Value, RpcError> {
    // A request the server could not read at all is refused under `id: null`.
    let refused = response.get("id").is_some_and(Value::is_null) && response.get("error").is_some();
    if !refused && response.get("id").and_then(Value::as_u64) != Some(id) {
        return Err(rpc_error(format!("{method}: answer carries another id ({})", response["id"])));
    }
    result_of(response, method)
}

fn batch_results(response: Value, ids: &[u64], methods: &[&str]) -> Result<Vec<Result<Value, RpcError>>, RpcError> {
    let Value::Array(answers) = response else {
        // Some servers answer a refused batch with one error object.
        let reason = response.get("error").map(|e| e.to_string()).unwrap_or_else(|| response.to_string());
        return Err(rpc_error(format!("batch of {} calls refused: {reason}", ids.len())));
    };
    let mut by_id: std::collections::HashMap<u64, Value> =
        answers.into_iter().filter_map(|a| a.get("id").and_then(Value::as_u64).map(|id| (id, a))).collect();
    Ok(ids
        .iter()
        .zip(methods)
        .enumerate()
        .map(|(n, (id, method))| match by_id.remove(id) {
            Some(answer) => result_of(&answer, method),
            None => Err(rpc_error(format!("{method}: no answer for call {n} of the batch"))),
        })
        .collect())
}

async fn post_once(client: &reqwest::Client, url: &Url, body: &Value) -> Result<Value, String> {
    let response = client
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(describe)?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(describe)?;
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes[..bytes.len().min(200)])));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("answer is not JSON: {e}"))
}

/// The error and its causes, without the URL (it may carry credentials).
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The `result` of one JSON-RPC response object, or its error.
fn result_of(response: &Value, method: &str) -> Result<Value, RpcError> {
    if let Some(err) = response.get("error") {
        let code = err.get("code").and_then(Value::as_i64);
        let message = err.get("message").and_then(Value::as_str).unwrap_or("no message");
        return Err(RpcError { code: code.into(), message: format!("{method}: {message}").into() });
    }
    match response.get("result") {
        Some(result) => Ok(result.clone()),
        None => Err(rpc_error(format!("{method}: answer has neither result nor error"))),
    }
}

impl RpcEndpoint for HttpRpc {
    fn call(&self, method: &str, params_json: &str) -> Result<String, RpcError> {
        let (id, body) = self.request(method, params_json)?;
        let response = self.post(body)?;
        single_result(&response, id, method).map(|v| v.to_string())
    }

    fn batch(&self, calls: &[RpcCall]) -> Result<Vec<Result<String, RpcError>>, RpcError> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids = Vec::with_capacity(calls.len());
        let mut bodies = Vec::with_capacity(calls.len());
        for call in calls {
            let (id, body) = self.request(call.method.as_str(), call.params_json.as_str())?;
            ids.push(id);
            bodies.push(body);
        }
        let response = self.post(Value::Array(bodies))?;
        let methods: Vec<&str> = calls.iter().map(|c| c.method.as_str()).collect();
        Ok(batch_results(response, &ids, &methods)?.into_iter().map(|r| r.map(|v| v.to_string())).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_refused_under_id_null_gives_the_servers_reason() {
        let refused = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}});
        let e = single_result(&refused, 7, "eth_call").unwrap_err();
        assert_eq!(e.message.as_str(), "eth_call: parse error");
        let other = json!({"jsonrpc": "2.0", "id": 8, "result": "0x1"});
        assert!(single_result(&other, 7, "eth_call").unwrap_err().message.contains("another id (8)"));
        let e = batch_results(refused, &[1, 2], &["a", "b"]).unwrap_err();
        assert!(e.message.contains("batch of 2 calls refused"), "{}", e.message);
    }
}
