//! What the protocol defines, shared by everything that submits or checks
//! snapshots (the node, the collector, validators): project ids, canonical
//! snapshot bytes and their CIDs, the EIP-712 submission signature, the
//! collector's gRPC messages, ProtocolState's ABI and JSON-RPC quantities.
//!
//! Nothing here knows about the node: no configuration, files, retries or
//! tasks. Each module cites the section of `docs/protocol.md` it implements.

pub mod bundle;
pub mod canonical_json;
pub mod car;
pub mod cid;
pub mod contracts;
pub mod eip712;
pub mod finalized;
pub mod merkle;
pub mod project_id;
pub mod proto;
pub mod quantity;
pub mod submission;

pub use canonical_json::{canonical_json, canonical_json_with_notes, is_canonical};
pub use cid::cid;
pub use project_id::{is_address, is_pool_address, project_id, repeated_data_source, repeated_data_source_error};
pub use quantity::{QuantityError, parse_quantity, quantity, to_quantity};
