//! Epochs: watching the anchor chain for releases (with a persisted cursor),
//! and preloading what computes need from the source chain.

pub mod cursor;
pub mod preload;
pub mod watcher;

pub use cursor::Cursor;
pub use watcher::{Epoch, Follow, Poll, PollError, Watcher};
