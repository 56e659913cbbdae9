//! One epoch's chain reads, shared by every slot's compute: when a node runs
//! many slots, the computes of slots that drew the same pool ask the same
//! questions of the same blocks. A read pinned to a block (an `eth_call` at a
//! block number, a block by number or hash, logs over a closed range) has one
//! answer, so it is asked once per epoch and every other compute gets that
//! answer — also a compute that asks while the first is still waiting for it.
//! Reads at a tag (`latest`, `pending`, …) and failed reads are never kept,
//! nor is a read answered by a node that said, in the same batch
//! (`eth_blockNumber`), that it has not reached the read's block: a node
//! behind answers logs as none, and that must not reach other computes.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

use lite_node_plugin_api::{RpcCall, RpcError};
use serde_json::Value;

use super::host::RpcEndpoint;

type Answer = Result<String, RpcError>;
type Cell = Arc<OnceLock<Answer>>;

/// An endpoint that answers each pinned read once (for one epoch).
pub struct Memo {
    inner: Arc<dyn RpcEndpoint>,
    /// Names it in the log line its counts leave at the end (`epoch 7 source`).
    label: String,
    cells: Mutex<HashMap<String, Cell>>,
    /// Reads answered from the memo, and reads sent to the chain.
    pub hits: AtomicU64,
    pub sent: AtomicU64,
}

impl Memo {
    pub fn new(inner: Arc<dyn RpcEndpoint>, label: String) -> Self {
        Self { inner, label, cells: Mutex::default(), hits: AtomicU64::new(0), sent: AtomicU64::new(0) }
    }

    /// The cell for a pinned read, and whether this caller must fill it.
    fn cell(&self, key: String) -> (Cell, bool) {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        match cells.get(&key) {
            Some(cell) => (cell.clone(), false),
            None => {
                let cell = Cell::default();
                cells.insert(key, cell.clone());
                (cell, true)
            }
        }
    }

    /// Fills a cell this caller owns; a failure, or `null` (a source node
    /// that has not seen the block yet), is not kept for later callers.
    fn fill(&self, key: &str, cell: &Cell, answer: Answer) {
        if answer.as_ref().is_ok_and(|a| a.trim() == "null") || answer.is_err() {
            self.cells.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        }
        let _ = cell.set(answer);
    }

    fn wait(&self, cell: &Cell) -> Answer {
        self.hits.fetch_add(1, Ordering::Relaxed);
        cell.wait().clone()
    }
}

impl Drop for Memo {
    fn drop(&mut self) {
        let (sent, hits) = (self.sent.load(Ordering::Relaxed), self.hits.load(Ordering::Relaxed));
        if sent + hits > 0 {
            tracing::debug!("{}: {sent} chain read(s) sent, {hits} answered by a read another slot sent", self.label);
        }
    }
}

impl RpcEndpoint for Memo {
    fn call(&self, method: &str, params_json: &str) -> Answer {
        let Some(key) = pinned_key(method, params_json) else {
            self.sent.fetch_add(1, Ordering::Relaxed);
            return self.inner.call(method, params_json);
        };
        let (cell, mine) = self.cell(key.clone());
        if !mine {
            return self.wait(&cell);
        }
        self.sent.fetch_add(1, Ordering::Relaxed);
        let answer = self.inner.call(method, params_json);
        self.fill(&key, &cell, answer.clone());
        answer
    }

    /// The calls no one has asked yet go out in one batch; the rest are
    /// waited for. Every caller sends what it owns before it waits, so two
    /// batches waiting on each other's reads cannot block each other.
    fn batch(&self, calls: &[RpcCall]) -> Result<Vec<Answer>, RpcError> {
        enum Slot {
            Send(Option<(String, Cell)>),
            Wait(Cell),
        }
        let slots: Vec<Slot> = calls
            .iter()
            .map(|c| match pinned_key(c.method.as_str(), c.params_json.as_str()) {
                None => Slot::Send(None),
                Some(key) => match self.cell(key.clone()) {
                    (cell, true) => Slot::Send(Some((key, cell))),
                    (cell, false) => Slot::Wait(cell),
                },
            })
            .collect();
        let to_send: Vec<RpcCall> =
            calls.iter().zip(&slots).filter(|(_, s)| matches!(s, Slot::Send(_))).map(|(c, _)| c.clone()).collect();
        let mut head = None;
        let mut sent = if to_send.is_empty() {
            Vec::new().into_iter()
        } else {
            self.sent.fetch_add(to_send.len() as u64, Ordering::Relaxed);
            match self.inner.batch(&to_send) {
                Ok(answers) => {
                    head = reported_head(&to_send, &answers);
                    answers.into_iter()
                }
                Err(e) => {
                    for slot in &slots {
                        if let Slot::Send(Some((key, cell))) = slot {
                            self.fill(key, cell, Err(e.clone()));
                        }
                    }
                    return Err(e);
                }
            }
        };
        let mut answers = Vec::with_capacity(calls.len());
        for slot in &slots {
            answers.push(match slot {
                Slot::Send(owned) => {
                    let answer = sent.next().unwrap_or_else(|| {
                        Err(RpcError {
                            code: abi_stable::std_types::ROption::RNone,
                            message: "a batch answer is missing".into(),
                        })
                    });
                    if let Some((key, cell)) = owned {
                        // Past the head the answering node gave: the caller
                        // gets what it said (and can tell), others an error.
                        // (Parsed only when the batch asked for the head: the
                        // many-slot hot path sends none.)
                        match head.and_then(|head| Some((head, last_block(key)?))) {
                            Some((head, block)) if block > head => {
                                let behind = format!(
                                    "the RPC that answered was at block {head}, behind block {block}; retry the epoch"
                                );
                                let e =
                                    RpcError { code: abi_stable::std_types::ROption::RNone, message: behind.into() };
                                self.fill(key, cell, Err(e));
                            }
                            _ => self.fill(key, cell, answer.clone()),
                        }
                    }
                    answer
                }
                Slot::Wait(_) => Ok(String::new()), // filled below, after every owned cell is set
            });
        }
        for (answer, slot) in answers.iter_mut().zip(&slots) {
            if let Slot::Wait(cell) = slot {
                *answer = self.wait(cell);
            }
        }
        Ok(answers)
    }
}

/// The head an `eth_blockNumber` in the batch answered, if it has one.
fn reported_head(calls: &[RpcCall], answers: &[Answer]) -> Option<u64> {
    let at = calls.iter().position(|c| c.method.as_str() == "eth_blockNumber")?;
    let text = answers.get(at)?.as_ref().ok()?;
    lite_node_protocol::quantity(&serde_json::from_str::<Value>(text).ok()?).ok()
}

/// The highest block a pinned read (its memo key) names by number.
fn last_block(key: &str) -> Option<u64> {
    let (method, params) = key.split_once(' ')?;
    let params: Value = serde_json::from_str(params).ok()?;
    let list = params.as_array()?;
    let at = if method == "eth_getLogs" {
        list.first()?.get("toBlock")?
    } else if method == "eth_getBlockByNumber" {
        list.first()?
    } else if AT_BLOCK_LAST.contains(&method) {
        list.last()?
    } else {
        return None;
    };
    lite_node_protocol::quantity(at.get("blockNumber").unwrap_or(at)).ok()
}

/// Methods whose answer is fixed once the block they name exists.
const AT_BLOCK_LAST: &[&str] =
    &["eth_call", "eth_getBalance", "eth_getCode", "eth_getStorageAt", "eth_getTransactionCount", "eth_getProof"];
const FIXED: &[&str] = &[
    // (Transactions and receipts by hash are not: a reorg moves them.)
    "eth_getBlockByHash",
    "eth_getBlockReceipts",
    "eth_chainId",
];

/// The memo key of a read whose answer cannot change, or `None`.
pub fn pinned_key(method: &str, params_json: &str) -> Option<String> {
    let params: Value = serde_json::from_str(params_json).ok()?;
    let list = params.as_array();
    let pinned = if FIXED.contains(&method) {
        true
    } else if AT_BLOCK_LAST.contains(&method) {
        list.and_then(|l| l.last()).is_some_and(is_pinned_block)
    } else if method == "eth_getBlockByNumber" {
        list.and_then(|l| l.first()).is_some_and(is_pinned_block)
    } else if method == "eth_getLogs" {
        list.and_then(|l| l.first()).is_some_and(|f| {
            f.get("blockHash").is_some()
                || (f.get("fromBlock").is_some_and(is_pinned_block) && f.get("toBlock").is_some_and(is_pinned_block))
        })
    } else {
        false
    };
    // The parsed form, so spacing and key order do not split one read in two.
    pinned.then(|| format!("{method} {params}"))
}

/// A block number in hex, or a `{blockHash|blockNumber}` object with one.
fn is_pinned_block(v: &Value) -> bool {
    match v {
        Value::String(s) => s.starts_with("0x"),
        Value::Object(o) => {
            o.get("blockHash").is_some()
                || o.get("blockNumber").and_then(Value::as_str).is_some_and(|s| s.starts_with("0x"))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts what reaches the chain and answers with the method and params.
    #[derive(Default)]
    struct Echo(AtomicU64);

    impl RpcEndpoint for Echo {
        fn call(&self, method: &str, params_json: &str) -> Answer {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(format!("{method}{params_json}"))
        }
        fn batch(&self, calls: &[RpcCall]) -> Result<Vec<Answer>, RpcError> {
            Ok(calls.iter().map(|c| self.call(c.method.as_str(), c.params_json.as_str())).collect())
        }
    }

    fn call(method: &str, params: &str) -> RpcCall {
        RpcCall { method: method.into(), params_json: params.into() }
    }

    #[test]
    fn only_reads_pinned_to_a_block_are_kept() {
        assert!(pinned_key("eth_call", r#"[{"to":"0x1"},"0x25"]"#).is_some());
        assert!(pinned_key("eth_call", r#"[{"to":"0x1"},"latest"]"#).is_none());
        assert!(pinned_key("eth_call", r#"[{"to":"0x1"},{"blockHash":"0xab"}]"#).is_some());
        assert!(pinned_key("eth_getBlockByNumber", r#"["0x25",false]"#).is_some());
        assert!(pinned_key("eth_getBlockByNumber", r#"["finalized",false]"#).is_none());
        assert!(pinned_key("eth_getLogs", r#"[{"fromBlock":"0x1","toBlock":"0x2"}]"#).is_some());
        assert!(pinned_key("eth_getLogs", r#"[{"fromBlock":"0x1","toBlock":"latest"}]"#).is_none());
        assert!(pinned_key("eth_blockNumber", "[]").is_none());
        assert!(pinned_key("eth_call", "not json").is_none());
        assert_eq!(
            pinned_key("eth_call", r#"[{"to":"0x1"}, "0x25"]"#),
            pinned_key("eth_call", r#"[{"to":"0x1"},"0x25"]"#)
        );
    }

    #[test]
    fn many_computes_asking_the_same_reads_reach_the_chain_once_per_read() {
        let chain = Arc::new(Echo::default());
        let memo = Arc::new(Memo::new(chain.clone(), "test".into()));
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let memo = memo.clone();
                std::thread::spawn(move || {
                    let batch =
                        [call("eth_call", r#"[{"to":"0xa"},"0x25"]"#), call("eth_call", r#"[{"to":"0xb"},"0x25"]"#)];
                    let answers = memo.batch(&batch).unwrap();
                    let single = memo.call("eth_call", r#"[{"to":"0xa"},"0x25"]"#).unwrap();
                    let fresh = memo.call("eth_blockNumber", "[]").unwrap();
                    (i, answers, single, fresh)
                })
            })
            .collect();
        for t in threads {
            let (_, answers, single, fresh) = t.join().unwrap();
            assert_eq!(answers[0].as_ref().unwrap(), r#"eth_call[{"to":"0xa"},"0x25"]"#);
            assert_eq!(answers[1].as_ref().unwrap(), r#"eth_call[{"to":"0xb"},"0x25"]"#);
            assert_eq!(single, *answers[0].as_ref().unwrap());
            assert_eq!(fresh, "eth_blockNumber[]");
        }
        // Two pinned reads once each; eth_blockNumber every time.
        assert_eq!(chain.0.load(Ordering::SeqCst), 2 + 16);
        assert_eq!(memo.hits.load(Ordering::SeqCst), 16 * 3 - 2);
    }

    #[test]
    fn a_failed_read_is_asked_again() {
        #[derive(Default)]
        struct FailsOnce(AtomicU64);
        impl RpcEndpoint for FailsOnce {
            fn call(&self, _: &str, _: &str) -> Answer {
                if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(RpcError { code: abi_stable::std_types::ROption::RNone, message: "timed out".into() })
                } else {
                    Ok("0x1".into())
                }
            }
            fn batch(&self, _: &[RpcCall]) -> Result<Vec<Answer>, RpcError> {
                unreachable!()
            }
        }
        let memo = Memo::new(Arc::new(FailsOnce::default()), "test".into());
        assert!(memo.call("eth_chainId", "[]").is_err());
        assert_eq!(memo.call("eth_chainId", "[]").unwrap(), "0x1");
        assert_eq!(memo.call("eth_chainId", "[]").unwrap(), "0x1");
    }

    /// A node behind the chain answers logs past its head as none: a read
    /// past the head it gave in the same batch goes back to its caller as
    /// answered and is asked again by the next, never kept.
    #[test]
    fn a_read_past_the_head_its_batch_reported_is_not_kept() {
        struct Behind(AtomicU64, u64);
        impl RpcEndpoint for Behind {
            fn call(&self, _: &str, _: &str) -> Answer {
                unreachable!()
            }
            fn batch(&self, calls: &[RpcCall]) -> Result<Vec<Answer>, RpcError> {
                self.0.fetch_add(calls.len() as u64, Ordering::SeqCst);
                let head = format!("\"0x{:x}\"", self.1);
                Ok(calls
                    .iter()
                    .map(|c| Ok(if c.method.as_str() == "eth_blockNumber" { head.clone() } else { "[]".into() }))
                    .collect())
            }
        }
        let logs = call("eth_getLogs", r#"[{"fromBlock":"0x1","toBlock":"0x9"}]"#);
        let batch = [logs.clone(), call("eth_blockNumber", "[]")];
        for (head, sent) in [(5, 4), (9, 3)] {
            let chain = Arc::new(Behind(AtomicU64::new(0), head));
            let memo = Memo::new(chain.clone(), "test".into());
            for _ in 0..2 {
                let answers = memo.batch(&batch).unwrap();
                assert_eq!(answers[0].as_ref().unwrap(), "[]", "the caller gets what the node said");
            }
            // Behind block 9: both batches reach the chain whole; at it, the
            // logs are kept and only eth_blockNumber goes again.
            assert_eq!(chain.0.load(Ordering::SeqCst), sent, "head {head}");
        }
        assert_eq!(last_block(&pinned_key("eth_call", r#"[{"to":"0x1"},"0x25"]"#).unwrap()), Some(0x25));
        assert_eq!(last_block(&pinned_key("eth_getBlockByNumber", r#"["0x7",false]"#).unwrap()), Some(7));
        assert_eq!(last_block(&pinned_key("eth_call", r#"[{"to":"0x1"},{"blockHash":"0xab"}]"#).unwrap()), None);
    }

    /// A source node that has not seen a block answers `null`: asked again,
    /// not kept, so a later compute sees the block once it is there.
    #[test]
    fn a_null_answer_is_asked_again() {
        #[derive(Default)]
        struct NullOnce(AtomicU64);
        impl RpcEndpoint for NullOnce {
            fn call(&self, _: &str, _: &str) -> Answer {
                Ok(if self.0.fetch_add(1, Ordering::SeqCst) == 0 { "null" } else { r#"{"number":"0x25"}"# }.into())
            }
            fn batch(&self, calls: &[RpcCall]) -> Result<Vec<Answer>, RpcError> {
                Ok(calls.iter().map(|c| self.call(c.method.as_str(), c.params_json.as_str())).collect())
            }
        }
        let chain = Arc::new(NullOnce::default());
        let memo = Memo::new(chain.clone(), "test".into());
        let read = || memo.batch(&[call("eth_getBlockByNumber", r#"["0x25",false]"#)]).unwrap().remove(0).unwrap();
        assert_eq!(read(), "null");
        assert_eq!(read(), r#"{"number":"0x25"}"#);
        assert_eq!(read(), r#"{"number":"0x25"}"#);
        assert_eq!(chain.0.load(Ordering::SeqCst), 2, "kept once it was there");
        assert!(pinned_key("eth_getTransactionReceipt", r#"["0xab"]"#).is_none(), "a reorg moves a receipt");
    }
}
