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
//!
//! A connection that goes quiet is pinged after one request timeout and
//! given up after two (a silently dropped path — NAT, load balancer — is
//! otherwise noticed only when the kernel gives up, many minutes later).
//! Reconnecting backs off (`Policy::RECONNECT`), also after a connection
//! that opened and dropped at once, and starts over from the shortest wait
//! only once a connection has lasted.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures_util::{SinkExt, StreamExt};
use lite_node_core::url::Url;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message;

use lite_node_core::{retry::Policy, url::redact_rpc_url};

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
    /// `subscribe` asks for `newHeads`; `quiet` is how long the connection
    /// may be silent before a ping (and twice that before it is given up).
    pub fn start(url: Url, subscribe: bool, quiet: Duration, io: &tokio::runtime::Handle) -> Self {
        let (outgoing, rx) = mpsc::unbounded_channel();
        let pending: Pending = Arc::default();
        let (signal_tx, signal) = watch::channel(HeadSignal::default());
        let (connected_tx, connected) = watch::channel(false);
        let shown = redact_rpc_url(url.as_str());
        let link = Link {
            shown: shown.clone(),
            subscribe,
            quiet,
            pending: pending.clone(),
            signal: signal_tx,
            connected: connected_tx,
        };
        io.spawn(run(url, link, rx));
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

/// The id a request or an answer goes by: its own, or a batch's smallest
/// (a request is answered under the id it was sent with).
pub(crate) fn message_id(v: &Value) -> Option<u64> {
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

/// A connection that lasted this long was a real one: the next reconnect
/// starts again from the shortest wait.
const LASTED: Duration = Duration::from_secs(30);

/// What the connection task shares with the endpoint's callers and
/// watchers, and how it keeps a connection.
struct Link {
    /// The URL with credentials redacted, for messages.
    shown: String,
    /// Whether to ask for `newHeads`.
    subscribe: bool,
    /// Silence before a ping (and twice it before the connection is given up).
    quiet: Duration,
    pending: Pending,
    signal: watch::Sender<HeadSignal>,
    connected: watch::Sender<bool>,
}

async fn run(url: Url, link: Link, mut outgoing: mpsc::UnboundedReceiver<(u64, String)>) {
    let shown = &link.shown;
    let mut delays = Policy::RECONNECT.delays();
    let mut down_since: Option<std::time::Instant> = None;
    loop {
        let attempt = {
            // wss:// needs the process's TLS provider, whoever else installed it or not.
            lite_node_core::tls::install_crypto_provider();
            tokio::time::timeout(Duration::from_secs(10), tokio_tungstenite::connect_async(url.as_str())).await
        };
        let stream = match attempt {
            Ok(Ok((stream, _))) => stream,
            failed => {
                if down_since.is_none() {
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => "no handshake within 10 s".to_owned(),
                    };
                    tracing::warn!("anchor WebSocket {shown}: cannot connect ({why}); retrying");
                    down_since = Some(std::time::Instant::now());
                }
                tokio::time::sleep(delays.next().unwrap_or(Policy::RECONNECT.max)).await;
                continue;
            }
        };
        let opened = std::time::Instant::now();
        if let Some(since) = down_since.take() {
            tracing::info!("anchor WebSocket {shown}: connected again after {:.1} s", since.elapsed().as_secs_f64());
        }
        let Some(why) = link.serve(stream, &mut outgoing).await else { return }; // every handle is gone
        let _ = link.connected.send(false);
        // Whoever waits for an answer on the old connection is told now.
        link.pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
        if opened.elapsed() >= LASTED {
            delays = Policy::RECONNECT.delays();
        }
        let wait = delays.next().unwrap_or(Policy::RECONNECT.max);
        tracing::warn!("anchor WebSocket {shown}: connection lost ({why}); reconnecting in {} ms", wait.as_millis());
        down_since = Some(std::time::Instant::now());
        tokio::time::sleep(wait).await;
    }
}

impl Link {
    /// Carries one open connection until it is lost (`Some`, why) or every
    /// handle is gone (`None`).
    async fn serve(
        &self,
        stream: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
        outgoing: &mut mpsc::UnboundedReceiver<(u64, String)>,
    ) -> Option<String> {
        let quiet = self.quiet;
        let (mut sink, mut source) = stream.split();
        if self.subscribe {
            let request =
                json!({"jsonrpc": "2.0", "id": SUBSCRIBE_ID, "method": "eth_subscribe", "params": ["newHeads"]});
            if let Err(e) = sink.send(Message::text(request.to_string())).await {
                return Some(format!("subscribing failed ({e})"));
            }
        }
        let _ = self.connected.send(true);
        self.signal.send_modify(|s| s.connections += 1);
        let mut heard = tokio::time::Instant::now();
        let mut pinged = false;
        loop {
            let deadline = heard + if pinged { 2 * quiet } else { quiet };
            tokio::select! {
                out = outgoing.recv() => match out {
                    Some((_, text)) => {
                        if let Err(e) = sink.send(Message::text(text)).await {
                            return Some(format!("send failed ({e})"));
                        }
                    }
                    None => return None,
                },
                () = tokio::time::sleep_until(deadline) => {
                    if pinged {
                        return Some(format!("nothing heard for {} s, a ping unanswered", (2 * quiet).as_secs()));
                    }
                    pinged = true;
                    if let Err(e) = sink.send(Message::Ping(Vec::new().into())).await {
                        return Some(format!("send failed ({e})"));
                    }
                }
                incoming = source.next() => {
                    if matches!(incoming, Some(Ok(_))) {
                        heard = tokio::time::Instant::now();
                        pinged = false;
                    }
                    match incoming {
                        Some(Ok(Message::Text(text))) => {
                            let Ok(v) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                            self.deliver(v);
                        }
                        Some(Ok(Message::Ping(payload))) => {
                            let _ = sink.send(Message::Pong(payload)).await;
                        }
                        Some(Ok(Message::Close(_))) | None => return Some("closed by the server".to_owned()),
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Some(format!("{e}")),
                    }
                }
            }
        }
    }

    /// Hands one message from the server to whom it concerns: a new head to the
    /// watchers, an answer to its caller, a refusal without an id (`id: null`,
    /// a request the server could not read) to every caller still waiting.
    fn deliver(&self, v: Value) {
        let (pending, shown) = (&self.pending, &self.shown);
        if let Some(head) = head_of(&v) {
            self.signal.send_modify(|s| s.head = Some(s.head.map_or(head, |h| h.max(head))));
        } else if let Some(id) = message_id(&v) {
            if id == SUBSCRIBE_ID {
                if v.get("error").is_some() {
                    tracing::warn!("anchor WebSocket {shown}: newHeads refused ({}); polling only", v["error"]);
                }
                return;
            }
            if let Some(reply) = pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id) {
                let _ = reply.send(v);
            }
        } else if v.get("error").is_some() {
            // Which request it refuses is not said: each waiting caller fails
            // with it now (and retries) rather than at its timeout.
            for (_, reply) in pending.lock().unwrap_or_else(|p| p.into_inner()).drain() {
                let _ = reply.send(v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_and_heads_are_told_apart() {
        assert_eq!(message_id(&json!({"jsonrpc": "2.0", "id": 7, "result": "0x1"})), Some(7));
        assert_eq!(message_id(&json!([{"id": 9, "result": 1}, {"id": 8, "result": 2}])), Some(8));
        let note = json!({"jsonrpc": "2.0", "method": "eth_subscription",
            "params": {"subscription": "0xab", "result": {"number": "0x1f", "hash": "0x00"}}});
        assert_eq!(head_of(&note), Some(31));
        assert_eq!(message_id(&note), None);
        assert_eq!(head_of(&json!({"id": 1, "result": {"number": "0x1"}})), None);
    }

    #[test]
    fn a_refusal_without_an_id_reaches_every_waiting_caller_at_once() {
        let pending: Pending = Arc::default();
        let (signal, heads) = watch::channel(HeadSignal::default());
        let link = Link {
            shown: "ws://x".into(),
            subscribe: true,
            quiet: Duration::from_secs(15),
            pending: pending.clone(),
            signal,
            connected: watch::channel(true).0,
        };
        let mut waiting: Vec<_> = (1..=3)
            .map(|id| {
                let (tx, rx) = oneshot::channel();
                pending.lock().unwrap().insert(id, tx);
                rx
            })
            .collect();
        link.deliver(json!({"jsonrpc": "2.0", "id": 2, "result": "0x2"}));
        assert_eq!(waiting.remove(1).try_recv().unwrap()["result"], "0x2");
        let refusal = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "batch too large"}});
        link.deliver(refusal.clone());
        for mut rx in waiting {
            assert_eq!(rx.try_recv().unwrap(), refusal);
        }
        assert!(pending.lock().unwrap().is_empty());
        link.deliver(json!({"method": "eth_subscription", "params": {"result": {"number": "0x10"}}}));
        assert_eq!(heads.borrow().head, Some(16));
    }

    /// A WebSocket server on loopback: `serve` gets each accepted connection
    /// (after the handshake) and its number, from 0.
    async fn server<F, Fut>(serve: F) -> (Url, Arc<Mutex<Vec<std::time::Instant>>>)
    where
        F: Fn(usize, tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("ws://{}", listener.local_addr().unwrap())).unwrap();
        let accepted: Arc<Mutex<Vec<std::time::Instant>>> = Arc::default();
        let seen = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else { continue };
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(std::time::Instant::now());
                    seen.len() - 1
                };
                tokio::spawn(serve(n, ws));
            }
        });
        (url, accepted)
    }

    /// Polls `done` every 20 ms until it holds, or fails after `limit`.
    async fn until(limit: Duration, what: &str, done: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + limit;
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "{what}: not within {limit:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_closes_every_connection_at_once_is_reconnected_to_with_growing_waits() {
        let (url, accepted) = server(|_, mut ws| async move {
            let _ = ws.close(None).await;
        })
        .await;
        let _endpoint = WsEndpoint::start(url, true, Duration::from_secs(15), &tokio::runtime::Handle::current());
        until(Duration::from_secs(60), "six connections", || accepted.lock().unwrap().len() >= 6).await;
        let at = accepted.lock().unwrap().clone();
        // Waits of at least 200, 400, 800, 1600, 3200 ms (jitter only adds);
        // without a back-off these come a few milliseconds apart.
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        for (n, gap) in gaps.iter().enumerate() {
            let least = Duration::from_millis(200 << n);
            assert!(*gap >= least, "reconnect {} came after {gap:?}, not after {least:?} or more: {gaps:?}", n + 1);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_silent_connection_is_pinged_and_given_up_while_one_that_answers_pings_is_kept() {
        // The first connection goes silent (nothing read, so no pong); later
        // ones answer pings (reading the stream answers them).
        let pings = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = pings.clone();
        let (url, accepted) = server(move |n, mut ws| {
            let counted = counted.clone();
            async move {
                if n == 0 {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    drop(ws);
                    return;
                }
                while let Some(Ok(message)) = ws.next().await {
                    if matches!(message, Message::Ping(_)) {
                        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            }
        })
        .await;
        let endpoint = WsEndpoint::start(url, false, Duration::from_secs(1), &tokio::runtime::Handle::current());
        let mut signal = endpoint.signal();
        until(Duration::from_secs(30), "a second connection", || accepted.lock().unwrap().len() >= 2).await;
        signal.wait_for(|s| s.connections >= 2).await.unwrap();
        // The live one is pinged when quiet and kept: three pings answered on
        // one connection, no third connection.
        until(Duration::from_secs(30), "three pings", || pings.load(std::sync::atomic::Ordering::SeqCst) >= 3).await;
        assert_eq!(accepted.lock().unwrap().len(), 2);
        assert_eq!(signal.borrow().connections, 2);
    }
}
