//! The validator against real `redis-server` processes.

mod gateway;
mod onchain;
mod pipeline;
mod queue;
