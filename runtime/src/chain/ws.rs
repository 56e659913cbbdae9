//! JSON-RPC over a WebSocket (`ws://`, `wss://`): one connection per
//! endpoint, kept open and re-opened when it drops, carrying the same
//! requests and batches as HTTP, plus a `newHeads` subscription so the
//! node learns of each new anchor block as it arrives.
//!
//! Requests are matched to answers by id (a batch by its smallest id).
//! While the connection is down, requests fail at once (the caller's retry
//! policy, or the next endpoint, takes over) and nothing waits forever: an
//! answer that does not come within the timeout fails the request. Every
//! (re)connection bumps a counter the epoch watcher listens to, so a poll
//! follows and back-fills what was missed while the connection was down.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures_util::{SinkExt, StreamExt};
use reqwest::Url;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message;

use crate::config::redact_rpc_url;

/// What a subscriber sees of the chain: the newest head announced, and how
/// many times the connection has been (re)opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeadSignal {
    pub head: Option<u64>,
    pub connections: u64,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// One WebSocket endpoint.
#[derive(Debug)]
pub struct WsEndpoint {
    shown: String,
    outgoing: mpsc::UnboundedSender<(u64, String)>,
    pending: Pending,
    signal: watch::Receiver<HeadSignal>,
    connected: watch::Receiver<bool>,
}

/// The id of the node's own `eth_subscribe` request (never used by calls,
/// whose ids count up from 1; servers refuse ids beyond `i64`).
const SUBSCRIBE_ID: u64 = 0;

impl WsEndpoint {
    /// Starts the connection task on `io` (it lives as long as the runtime);
    /// `subscribe` asks for `newHeads`.
    pub fn start(url: Url, subscribe: bool, io: &tokio::runtime::Handle) -> Self {
        let (outgoing, rx) = mpsc::unbounded_channel();
        let pending: Pending = Arc::default();
        let (signal_tx, signal) = watch::channel(HeadSignal::default());
        let (connected_tx, connected) = watch::channel(false);
        let shown = redact_rpc_url(url.as_str());
        io.spawn(run(url, subscribe, rx, pending.clone(), signal_tx, connected_tx));
        Self { shown, outgoing, pending, signal, connected }
    }

    /// Heads and (re)connections, as they happen.
    pub fn signal(&self) -> watch::Receiver<HeadSignal> {
        self.signal.clone()
    }

    /// Sends `body` (one request or a batch whose smallest id is `id`) and
    /// waits up to `timeout` for its answer.
    pub async fn send(&self, id: u64, body: &Value, timeout: Duration) -> Result<Value, String> {
        if !*self.connected.borrow() {
            // A first request may come before the first connection is up.
            let mut connected = self.connected.clone();
            let up = tokio::time::timeout(timeout.min(Duration::from_secs(5)), connected.wait_for(|c| *c)).await;
            if !matches!(up, Ok(Ok(_))) {
                return Err(format!("{}: WebSocket not connected", self.shown));
            }
        }
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(id, tx);
        if self.outgoing.send((id, body.to_string())).is_err() {
            self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            return Err(format!("{}: WebSocket closed", self.shown));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(format!("{}: WebSocket dropped before the answer", self.shown)),
            Err(_) => {
                self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                Err(format!("{}: no answer within {} s", self.shown, timeout.as_secs()))
            }
        }
    }
}

/// The id an answer belongs to: its own, or a batch's smallest.
fn answer_id(v: &Value) -> Option<u64> {
    match v {
        Value::Array(items) => items.iter().filter_map(|i| i.get("id").and_then(Value::as_u64)).min(),
        other => other.get("id").and_then(Value::as_u64),
    }
}

/// A `newHeads` notification's block number.
fn head_of(v: &Value) -> Option<u64> {
    if v.get("method").and_then(Value::as_str) != Some("eth_subscription") {
        return None;
    }
    let number = v.pointer("/params/result/number")?;
    lite_node_protocol::quantity(number).ok()
}

async fn run(
    url: Url,
    subscribe: bool,
    mut outgoing: mpsc::UnboundedReceiver<(u64, String)>,
    pending: Pending,
    signal: watch::Sender<HeadSignal>,
    connected: watch::Sender<bool>,
) {
    let shown = redact_rpc_url(url.as_str());
    let mut backoff = Duration::from_millis(200);
    let mut down_since: Option<std::time::Instant> = None;
    loop {
        let attempt =
            tokio::time::timeout(Duration::from_secs(10), tokio_tungstenite::connect_async(url.as_str())).await;
        let stream = match attempt {
            Ok(Ok((stream, _))) => stream,
            Ok(Err(e)) => {
                if down_since.is_none() {
                    tracing::warn!("anchor WebSocket {shown}: cannot connect ({e}); retrying");
                    down_since = Some(std::time::Instant::now());
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            Err(_) => {
                down_since.get_or_insert_with(std::time::Instant::now);
                continue;
            }
        };
        backoff = Duration::from_millis(200);
        if let Some(since) = down_since.take() {
            tracing::info!("anchor WebSocket {shown}: connected again after {:.1} s", since.elapsed().as_secs_f64());
        }
        let (mut sink, mut source) = stream.split();
        if subscribe {
            let request =
                json!({"jsonrpc": "2.0", "id": SUBSCRIBE_ID, "method": "eth_subscribe", "params": ["newHeads"]});
            if sink.send(Message::text(request.to_string())).await.is_err() {
                continue;
            }
        }
        let _ = connected.send(true);
        signal.send_modify(|s| s.connections += 1);
        let why = loop {
            tokio::select! {
                out = outgoing.recv() => match out {
                    Some((_, text)) => {
                        if let Err(e) = sink.send(Message::text(text)).await {
                            break format!("send failed ({e})");
                        }
                    }
                    None => return, // every handle is gone
                },
                incoming = source.next() => match incoming {
                    Some(Ok(Message::Text(text))) => {
                        let Ok(v) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                        if let Some(head) = head_of(&v) {
                            signal.send_modify(|s| s.head = Some(s.head.map_or(head, |h| h.max(head))));
                        } else if let Some(id) = answer_id(&v) {
                            if id == SUBSCRIBE_ID {
                                if v.get("error").is_some() {
                                    tracing::warn!("anchor WebSocket {shown}: newHeads refused ({}); polling only", v["error"]);
                                }
                                continue;
                            }
                            if let Some(reply) = pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id) {
                                let _ = reply.send(v);
                            }
                        }
                    }
                    Some(Ok(Message::Ping(payload))) => {
                        let _ = sink.send(Message::Pong(payload)).await;
                    }
                    Some(Ok(Message::Close(_))) | None => break "closed by the server".to_owned(),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break format!("{e}"),
                },
            }
        };
        let _ = connected.send(false);
        // Whoever waits for an answer on the old connection is told now.
        pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
        tracing::warn!("anchor WebSocket {shown}: connection lost ({why}); reconnecting");
        down_since = Some(std::time::Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_and_heads_are_told_apart() {
        assert_eq!(answer_id(&json!({"jsonrpc": "2.0", "id": 7, "result": "0x1"})), Some(7));
        assert_eq!(answer_id(&json!([{"id": 9, "result": 1}, {"id": 8, "result": 2}])), Some(8));
        let note = json!({"jsonrpc": "2.0", "method": "eth_subscription",
            "params": {"subscription": "0xab", "result": {"number": "0x1f", "hash": "0x00"}}});
        assert_eq!(head_of(&note), Some(31));
        assert_eq!(answer_id(&note), None);
        assert_eq!(head_of(&json!({"id": 1, "result": {"number": "0x1"}})), None);
    }
}
