//! Processors that misbehave on purpose, for the runtime's tests.

use lite_node_plugin_api::{
    AssignmentRequest, Assignments, Chain, ComputeProcessor, EpochContext, Host, ProcessorSpec, RpcCall, Snapshot,
    export_compute_module,
};

export_compute_module! {
    processors: [PANICKING, FAILING, ECHO, RPC, SLOW, SELECTED_EMPTY, IDLE, RETURNS],
    assignments: always_panics,
}

pub const PANICKING: ProcessorSpec = ProcessorSpec {
    class_name: "PanickingProcessor",
    description: "panics in compute",
    needs: &[],
    new: |_| Ok(Box::new(Panicking)),
};

pub const FAILING: ProcessorSpec = ProcessorSpec {
    class_name: "FailingProcessor",
    description: "returns an error from compute",
    needs: &[],
    new: |_| Ok(Box::new(Failing)),
};

pub const ECHO: ProcessorSpec = ProcessorSpec {
    class_name: "EchoProcessor",
    description: "returns its settings as the snapshot (no data source)",
    needs: &[],
    new: |settings| {
        if settings.contains("\"reject\"") {
            return Err("setting `reject` present".to_owned());
        }
        Ok(Box::new(Echo(settings.to_owned())))
    },
};

struct Panicking;
struct Failing;
struct Echo(String);

impl ComputeProcessor for Panicking {
    fn compute(&self, epoch: &EpochContext, _: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        panic!("fixture panic at epoch {}", epoch.epoch_id)
    }
}

impl ComputeProcessor for Failing {
    fn compute(&self, epoch: &EpochContext, _: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        Err(format!("fixture failure at epoch {}", epoch.epoch_id))
    }
}

impl ComputeProcessor for Echo {
    fn compute(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        host.report_selection(epoch.epoch_id, true, epoch.slot_id);
        // No data source: a collector takes only pool addresses or none.
        Ok(vec![Snapshot::new("", self.0.clone())])
    }
}

fn always_panics(_: &AssignmentRequest) -> Result<Assignments, String> {
    panic!("fixture assignments panic")
}

/// Calls the host's JSON-RPC once and in a batch, and returns what came back,
/// so tests can watch a call cross the boundary both ways.
pub const RPC: ProcessorSpec = ProcessorSpec {
    class_name: "RpcProcessor",
    description: "returns eth_chainId and a batch answer from the source chain",
    needs: &[],
    new: |_| Ok(Box::new(Rpc)),
};

struct Rpc;

impl ComputeProcessor for Rpc {
    fn compute(&self, _: &EpochContext, host: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        let chain_id = host.rpc(Chain::Source, "eth_chainId", "[]").map_err(|e| e.to_string())?;
        let calls = [
            RpcCall { method: "eth_blockNumber".into(), params_json: "[]".into() },
            RpcCall { method: "no_such_method".into(), params_json: "[]".into() },
        ];
        let batch = host.rpc_batch(Chain::Source, &calls).map_err(|e| e.to_string())?;
        let batch: Vec<String> = batch
            .into_iter()
            .map(|r| match r {
                Ok(v) => format!("ok {v}"),
                Err(e) => format!("err {e}"),
            })
            .collect();
        Ok(vec![Snapshot::new("rpc", format!("{chain_id}|{}", batch.join("|")))])
    }
}

/// Sleeps `{"sleep_ms": N}` and returns how many computes of this library
/// were running at once, at most, as seen from inside (`{"max_running": M}`),
/// so tests can check the node's concurrency bound without timing anything.
pub const SLOW: ProcessorSpec = ProcessorSpec {
    class_name: "SlowProcessor",
    description: "sleeps, and reports the most computes it saw running at once",
    needs: &[],
    new: |settings| {
        let ms = settings
            .split("\"sleep_ms\":")
            .nth(1)
            .and_then(|rest| rest.trim_start().split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| "settings need {\"sleep_ms\": N}".to_owned())?;
        Ok(Box::new(Slow(ms)))
    },
};

static RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static MAX_RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct Slow(u64);

impl ComputeProcessor for Slow {
    fn compute(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        use std::sync::atomic::Ordering::SeqCst;
        host.report_selection(epoch.epoch_id, true, epoch.slot_id);
        let now = RUNNING.fetch_add(1, SeqCst) + 1;
        MAX_RUNNING.fetch_max(now, SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(self.0));
        let max = MAX_RUNNING.load(SeqCst);
        RUNNING.fetch_sub(1, SeqCst);
        Ok(vec![Snapshot::new("slow", format!("{{\"max_running\":{max}}}"))])
    }
}

/// Reports selection, then returns nothing: the docs/protocol.md §9 failure.
pub const SELECTED_EMPTY: ProcessorSpec = ProcessorSpec {
    class_name: "SelectedButEmptyProcessor",
    description: "reports selected, returns no snapshots",
    needs: &[],
    new: |_| Ok(Box::new(SelectedEmpty)),
};

struct SelectedEmpty;

impl ComputeProcessor for SelectedEmpty {
    fn compute(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        host.report_selection(epoch.epoch_id, true, epoch.slot_id);
        Ok(vec![])
    }
}

/// Reports not selected and returns nothing: the quiet epoch.
pub const IDLE: ProcessorSpec = ProcessorSpec {
    class_name: "IdleProcessor",
    description: "reports not selected, returns no snapshots",
    needs: &[],
    new: |_| Ok(Box::new(Idle)),
};

struct Idle;

impl ComputeProcessor for Idle {
    fn compute(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        host.report_selection(epoch.epoch_id, false, epoch.slot_id);
        Ok(vec![])
    }
}

/// Reports selected and returns one snapshot `{"n": i}` for each data
/// source its settings list (`{"sources": "0xAA 0xaa"}`, space-separated):
/// two for one pool, a pool the slot was not assigned, a data source with
/// `:` in it — what a collector refuses.
pub const RETURNS: ProcessorSpec = ProcessorSpec {
    class_name: "ReturnsProcessor",
    description: "reports selected, returns a snapshot per data source its settings list",
    needs: &[],
    new: |settings| {
        let listed = settings
            .split("\"sources\":")
            .nth(1)
            .and_then(|rest| rest.trim_start().strip_prefix('"'))
            .and_then(|rest| rest.split('"').next())
            .ok_or_else(|| "settings need {\"sources\": \"SOURCE SOURCE ...\"}".to_owned())?;
        Ok(Box::new(Returns(listed.split_whitespace().map(str::to_owned).collect())))
    },
};

struct Returns(Vec<String>);

impl ComputeProcessor for Returns {
    fn compute(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        host.report_selection(epoch.epoch_id, true, epoch.slot_id);
        Ok(self
            .0
            .iter()
            .enumerate()
            .map(|(i, source)| Snapshot::new(source.as_str(), format!("{{\"n\":{i}}}")))
            .collect())
    }
}
