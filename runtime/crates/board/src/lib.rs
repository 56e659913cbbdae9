//! A full node spread over machines: one coordinator and K workers, each
//! `lite-node run` with a role, sharing one Redis. [`board::Board`] is what
//! they share and the only ways to change it; [`assign`] says who computes
//! which item.

pub mod assign;
pub mod board;

pub use board::{Assignment, Board, Boards, Completion, Joined, Member, Refused};
