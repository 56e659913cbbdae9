//! The validator against real `redis-server` processes.

mod queue;
