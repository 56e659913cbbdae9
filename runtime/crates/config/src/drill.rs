//! The alert drill an operator can ask for (`LITE_NODE_DRILL`); the
//! dispatcher applies it.

/// An alert drill (`LITE_NODE_DRILL`): when the slot is selected, the real
/// compute runs and then its result is replaced, so an operator can see the
/// whole failure and alert path without breaking anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drill {
    /// The compute's result becomes an error.
    ComputeError,
    /// The compute's snapshots are dropped (the empty-return failure).
    EmptyReturn,
}

impl Drill {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ComputeError => "compute-error",
            Self::EmptyReturn => "empty-return",
        }
    }
}

impl std::str::FromStr for Drill {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "compute-error" => Ok(Self::ComputeError),
            "empty-return" => Ok(Self::EmptyReturn),
            other => Err(format!("unknown drill `{other}` (compute-error or empty-return)")),
        }
    }
}
