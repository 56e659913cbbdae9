//! A starting point for compute authors. Copy this crate, rename it (package
//! and `[lib] name`), list it in the workspace, and name it in projects.json:
//!
//! ```json
//! {"project_type": "myProject",
//!  "processor": {"module": "compute_template", "class_name": "TemplateProcessor"},
//!  "preload_tasks": ["block_details"],
//!  "greeting": "hello"}
//! ```
//!
//! Keys of the project entry other than `project_type`, `processor` and
//! `preload_tasks` arrive here as the settings object.

use lite_node_plugin_api::{ComputeProcessor, EpochContext, Host, ProcessorSpec, Snapshot, export_compute_module};
use serde_json::{Value, json};

/// How projects.json finds this processor.
pub const TEMPLATE: ProcessorSpec = ProcessorSpec {
    class_name: "TemplateProcessor",
    description: "template: one snapshot per epoch carrying a greeting",
    // What the node prepares for it: `&[Need::BlockDetails]` if it reads
    // `host.block_details()` (its project must then list "block_details").
    needs: &[],
    new: TemplateProcessor::from_settings,
};

// One line exports the library's root module. Add `assignments: path::to::fn`
// when your data market assigns work to slots (see the slot-selection crate).
export_compute_module! {
    processors: [TEMPLATE],
}

/// Replace with your own state: clients, caches, settings.
#[derive(Debug)]
pub struct TemplateProcessor {
    greeting: String,
}

impl TemplateProcessor {
    /// Parses the settings; return an error that says what to fix.
    pub fn from_settings(settings_json: &str) -> Result<Box<dyn ComputeProcessor>, String> {
        let settings: Value = serde_json::from_str(settings_json).map_err(|e| format!("settings are not JSON: {e}"))?;
        let greeting = match settings.get("greeting") {
            None => "hello".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => return Err(format!("`greeting` must be a string, found {other}")),
        };
        Ok(Box::new(Self { greeting }))
    }
}

impl ComputeProcessor for TemplateProcessor {
    fn compute(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Vec<Snapshot>, String> {
        // 1. Decide whether this slot works this epoch and report it before
        //    anything else; return `Ok(vec![])` when it does not.
        host.report_selection(epoch.epoch_id, true, epoch.slot_id);
        // 2. Gather data through the host (`host.rpc`, `host.rpc_batch`,
        //    `host.block_details`). Errors are values: return `Err` naming
        //    the call that failed; a panic is caught but reads worse.
        // 3. Return one snapshot per data source; the runtime serializes,
        //    signs and submits it.
        let snapshot = json!({ "greeting": self.greeting, "epochId": epoch.epoch_id });
        Ok(vec![Snapshot::new("", snapshot.to_string())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting_defaults_and_is_validated() {
        assert!(TemplateProcessor::from_settings("{}").is_ok());
        let err = TemplateProcessor::from_settings(r#"{"greeting": 3}"#).err().unwrap();
        assert!(err.contains("`greeting` must be a string"), "{err}");
    }
}
