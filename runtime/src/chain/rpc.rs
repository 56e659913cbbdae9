//! JSON-RPC over HTTP for processors: single calls and batches, several
//! endpoint URLs with failover, and the crossing from a processor's blocking
//! thread into async I/O.
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
use lite_node_plugin_api::{RpcCall, RpcError};
use serde_json::{Value, json};

use crate::{compute::host::RpcEndpoint, config::redact_url};

/// The node's I/O runtime: every network call of a processor runs here.
#[derive(Debug, Clone)]
pub struct IoRuntime {
    handle: tokio::runtime::Handle,
    // Keeps the runtime alive as long as any handle to it exists.
    _runtime: Arc<tokio::runtime::Runtime>,
}

impl IoRuntime {
    pub fn new() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lite-node-io")
            .enable_all()
            .build()?;
        Ok(Self { handle: runtime.handle().clone(), _runtime: Arc::new(runtime) })
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

/// One chain's JSON-RPC endpoints, tried in order from the last that worked.
#[derive(Debug)]
pub struct HttpRpc {
    /// `source` or `anchor`, for messages.
    role: &'static str,
    urls: Arc<Vec<String>>,
    client: reqwest::Client,
    io: IoRuntime,
    next_id: AtomicU64,
    preferred: Arc<AtomicUsize>,
}

fn rpc_error(message: String) -> RpcError {
    RpcError { code: ROption::RNone, message: message.into() }
}

impl HttpRpc {
    pub fn new(role: &'static str, urls: Vec<String>, timeout: Duration, io: IoRuntime) -> Result<Self, String> {
        if urls.is_empty() {
            return Err(format!("no {role} RPC URL configured"));
        }
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            role,
            urls: Arc::new(urls),
            client,
            io,
            next_id: AtomicU64::new(1),
            preferred: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Posts `body` to each endpoint in turn until one answers with JSON.
    fn post(&self, body: Value) -> Result<Value, RpcError> {
        let urls = self.urls.clone();
        let client = self.client.clone();
        let preferred = self.preferred.clone();
        let role = self.role;
        self.io
            .wait(async move {
                let start = preferred.load(Ordering::Relaxed);
                let mut failures = Vec::new();
                for k in 0..urls.len() {
                    let i = (start + k) % urls.len();
                    match post_once(&client, &urls[i], &body).await {
                        Ok(value) => {
                            preferred.store(i, Ordering::Relaxed);
                            return Ok(value);
                        }
                        Err(e) => {
                            tracing::warn!("{role} RPC {}: {e}", redact_url(&urls[i]));
                            failures.push(format!("{}: {e}", redact_url(&urls[i])));
                        }
                    }
                }
                Err(rpc_error(format!("every {role} RPC endpoint failed ({})", failures.join("; "))))
            })
            .unwrap_or_else(|| Err(rpc_error(format!("{role} RPC: the I/O runtime is shutting down"))))
    }

    fn request(&self, method: &str, params_json: &str) -> Result<(u64, Value), RpcError> {
        let params: Value =
            serde_json::from_str(params_json).map_err(|e| rpc_error(format!("{method}: params are not JSON: {e}")))?;
        if !params.is_array() && !params.is_object() {
            return Err(rpc_error(format!("{method}: params must be a JSON array or object")));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        Ok((id, json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})))
    }
}

async fn post_once(client: &reqwest::Client, url: &str, body: &Value) -> Result<Value, String> {
    let response = client
        .post(url)
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
fn result_of(response: &Value, method: &str) -> Result<String, RpcError> {
    if let Some(err) = response.get("error") {
        let code = err.get("code").and_then(Value::as_i64);
        let message = err.get("message").and_then(Value::as_str).unwrap_or("no message");
        return Err(RpcError { code: code.into(), message: format!("{method}: {message}").into() });
    }
    match response.get("result") {
        Some(result) => Ok(result.to_string()),
        None => Err(rpc_error(format!("{method}: answer has neither result nor error"))),
    }
}

impl RpcEndpoint for HttpRpc {
    fn call(&self, method: &str, params_json: &str) -> Result<String, RpcError> {
        let (id, body) = self.request(method, params_json)?;
        let response = self.post(body)?;
        if response.get("id").and_then(Value::as_u64) != Some(id) {
            return Err(rpc_error(format!("{method}: answer carries another id ({})", response["id"])));
        }
        result_of(&response, method)
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
        let Value::Array(answers) = response else {
            // Some servers answer a refused batch with one error object.
            let reason = response.get("error").map(|e| e.to_string()).unwrap_or_else(|| response.to_string());
            return Err(rpc_error(format!("batch of {} calls refused: {reason}", calls.len())));
        };
        let mut by_id: std::collections::HashMap<u64, &Value> =
            answers.iter().filter_map(|a| a.get("id").and_then(Value::as_u64).map(|id| (id, a))).collect();
        Ok(ids
            .iter()
            .zip(calls)
            .enumerate()
            .map(|(n, (id, call))| match by_id.remove(id) {
                Some(answer) => result_of(answer, call.method.as_str()),
                None => Err(rpc_error(format!("{}: no answer for call {n} of the batch", call.method))),
            })
            .collect())
    }
}
