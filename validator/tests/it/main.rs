//! The validator against real `redis-server` processes.

mod gateway;
mod pipeline;
mod queue;
