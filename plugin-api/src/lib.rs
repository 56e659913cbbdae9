//! The stable-ABI contract between the lite-node runtime and compute plugins.
//!
//! A compute package is a set of `cdylib` crates. Each exports one root module
//! ([`ComputeModule`]) that lists the processors it offers, builds them by
//! `class_name`, and answers the data market's slot-assignment question. The
//! runtime hands each processor an [`EpochContext`] and a [`Host`] through
//! which it reaches the chains, the slot-selection tracker and the node's log.
//!
//! Compute authors normally touch only the Rust-side pieces: implement
//! [`ComputeProcessor`], describe it with a [`ProcessorSpec`], and call
//! [`export_compute_module!`]. Everything that crosses the boundary is an
//! `abi_stable` type, and every call into plugin code is guarded so that a
//! panic comes back as an error value instead of ending the node.
//!
//! This crate depends on `abi_stable` only: it knows nothing of tokio, alloy or
//! the runtime.

// `#[sabi_trait]` expands to impls inside function bodies, which rustc 1.95
// reports as `non_local_definitions`; the expansion is abi_stable's, not ours.
#![allow(non_local_definitions)]
#![deny(missing_docs)]

pub use abi_stable;

mod epoch;
mod guard;
mod host;
mod module;
mod processor;
pub mod testing;

pub use epoch::{BlockDetail, EpochContext, EpochContextBuilder};
pub use guard::{guarded, panic_message};
pub use host::{
    Chain, Host, HostApi, HostApi_TO, HostRef, LogLevel, PreviousSnapshot, RpcCall, RpcError, SelectionReport,
};
pub use module::{
    __build_module, AssignmentFn as __AssignmentFn, AssignmentRequest, Assignments, ComputeModule, ComputeModuleRef,
    ProcessorInfo, SlotAssignment,
};
pub use processor::{ComputeProcessor, Need, Processor, Processor_TO, ProcessorBox, ProcessorSpec, Snapshot};

/// The version of this interface crate, as compiled into a plugin or the runtime.
///
/// Two sides built from different versions refuse each other at load time.
pub const PLUGIN_API_VERSION: &str = env!("CARGO_PKG_VERSION");
