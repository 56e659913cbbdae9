//! The command-line verbs, as library functions that take an environment
//! (and a writer for their report), so tests call them as `main` does.
//! One file per verb; the long-running ones (`run`, `collector`, `validator`, `devnet`)
//! build their own tokio runtime here.

mod alert;
mod assignments;
mod check;
mod collector;
mod compute;
mod devnet;
mod run;
mod validator;

pub use alert::alert_test;
pub use assignments::{AssignmentQuery, assignments, pool_list};
pub use check::check;
pub use collector::{CollectorOptions, collector};
pub use compute::compute_show;
pub use devnet::devnet;
pub use run::run;
pub use validator::{Component, ValidatorOptions, validator};
