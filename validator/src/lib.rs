//! The validator: the receiving end of the protocol. Submissions arrive at a
//! gateway, are checked by dequeuer workers, finalized per epoch and
//! aggregated into the validator's batch, all through Redis keys named as
//! seed 001 gives them (`keys`), so each component can run in its own
//! process. Depends on the protocol crate, never on the node's internals.
//!
//! Built so far: the key schema (`keys`), the reliable work queue (`queue`)
//! every component's intake rests on, the gateway (`gateway`), and the
//! level-1 consensus rules (`consensus`).

pub mod consensus;
pub mod gateway;
pub mod keys;
pub mod queue;

pub use keys::Keys;
pub use queue::ReliableQueue;
