//! The validator against real `redis-server` processes.

mod data;
mod gateway;
mod onchain;
mod pipeline;
mod queue;
