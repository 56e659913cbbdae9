//! Processors that misbehave on purpose, for the runtime's tests.

use lite_node_plugin_api::{
    AssignmentRequest, Assignments, ComputeProcessor, EpochContext, Host, ProcessorSpec, Snapshot,
    export_compute_module,
};

export_compute_module! {
    processors: [PANICKING, FAILING, ECHO],
    assignments: always_panics,
}

pub const PANICKING: ProcessorSpec = ProcessorSpec {
    class_name: "PanickingProcessor",
    description: "panics in compute",
    new: |_| Ok(Box::new(Panicking)),
};

pub const FAILING: ProcessorSpec = ProcessorSpec {
    class_name: "FailingProcessor",
    description: "returns an error from compute",
    new: |_| Ok(Box::new(Failing)),
};

pub const ECHO: ProcessorSpec = ProcessorSpec {
    class_name: "EchoProcessor",
    description: "returns its settings as the snapshot",
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
        Ok(vec![Snapshot::new("echo", self.0.clone())])
    }
}

fn always_panics(_: &AssignmentRequest) -> Result<Assignments, String> {
    panic!("fixture assignments panic")
}
