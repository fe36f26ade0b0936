//! Work done for one tenant beside other tenants' work in one invocation (a schedule in a
//! scheduler tick, a delivery in a batch, a tick in `make dev`'s loop): a panic in it is caught
//! and becomes that work's error, so it cannot end the work of the others. Numbers from stored
//! records are converted without panicking in the first place (`clippy.toml`); this is the
//! second line.

use futures_util::FutureExt;
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

/// Runs `work`; `Err` with the panic's message when it panics.
pub async fn caught<F: Future>(work: F) -> Result<F::Output, String> {
    // Unwind safety: a caller that catches a panic drops the work's state and logs it; nothing
    // the work held half-changed is read again.
    AssertUnwindSafe(work).catch_unwind().await.map_err(|payload| panic_message(payload.as_ref()))
}

/// What a panic said (`panic!`'s message), or a placeholder for any other payload.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        format!("panicked: {text}")
    } else if let Some(text) = payload.downcast_ref::<String>() {
        format!("panicked: {text}")
    } else {
        "panicked".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_an_error_and_other_work_goes_on() {
        let value = 7;
        assert_eq!(caught(async { value * 6 }).await, Ok(42));
        let failed = caught(async {
            let seconds: f64 = f64::from(value) * 1e20;
            if seconds > 1e10 {
                panic!("a stored number of {seconds} seconds");
            }
            value
        })
        .await;
        assert_eq!(failed, Err("panicked: a stored number of 700000000000000000000 seconds".to_owned()));
        assert_eq!(caught(async { std::panic::panic_any(5_u8) }).await, Err::<(), _>("panicked".to_owned()));
    }
}
