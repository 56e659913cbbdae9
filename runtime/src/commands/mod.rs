//! The command-line verbs, as library functions that take an environment
//! (and a writer for their report), so tests call them as `main` does.
//! One file per verb; the long-running ones (`run`, `collector`, `devnet`)
//! build their own tokio runtime here.

mod alert;
mod assignments;
mod check;
mod collector;
mod compute;
mod devnet;
mod run;

pub use alert::alert_test;
pub use assignments::{AssignmentQuery, assignments, pool_list};
pub use check::check;
pub use collector::{CollectorOptions, collector};
pub use compute::compute_show;
pub use devnet::devnet;
pub use run::run;
