//! The BDS Uniswap V3 data market's compute library.
//!
//! It exports the market's slot assignment (`slot-selection`), which the node,
//! observers (`lite-node assignments`) and the collector all call through the
//! compute module, so everyone uses the very code the market published.

use lite_node_plugin_api::export_compute_module;

export_compute_module! {
    processors: [],
    assignments: slot_selection::assignments,
}
