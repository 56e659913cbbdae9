//! Integration tests of the `lite-node` binary and library, one test binary
//! for the crate (one link of the binary and its dependencies, not one per
//! file). Shared fixtures come from the testkit.

mod alerts;
mod architecture;
mod assignments;
mod author;
mod bds;
mod check;
mod cluster;
mod collector;
mod compute_fetch;
mod container;
mod contracts;
mod devnet;
mod executor;
mod finalized;
mod init_sh;
mod market;
mod node;
mod plugins;
mod read;
mod readme;
mod rpc;
mod runbook;
mod support;
mod validator;
mod websocket;
