//! Keeps plugin panics on the plugin's side of the boundary.
//!
//! A panic that reaches an `extern "C"` frame ends the whole process. Every
//! entry point the plugin exposes runs its body through [`guarded`], which turns
//! a panic into an `Err` carrying the panic message.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `f`, turning a panic into `Err("panicked: <message>")`.
pub fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(format!("{what} panicked: {}", panic_message(payload.as_ref()))),
    }
}

/// The text of a panic payload, when it carries one.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_becomes_error_with_message() {
        let out: Result<(), String> = guarded("compute", || panic!("boom {}", 7));
        assert_eq!(out, Err("compute panicked: boom 7".to_owned()));
    }

    #[test]
    fn ok_and_err_pass_through() {
        assert_eq!(guarded("x", || Ok::<_, String>(3)), Ok(3));
        assert_eq!(guarded::<()>("x", || Err("no".into())), Err("no".to_owned()));
    }
}
