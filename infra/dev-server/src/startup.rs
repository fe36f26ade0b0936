//! `make dev`'s start-up said step by step on standard error, so a first start (tables, secrets,
//! the demo import) is never a silent minute: `==> creating 14 tables … done in 1.2 s`.

use std::future::Future;
use std::io::Write as _;
use std::time::{Duration, Instant};

/// Runs `work`, saying on standard error what it does and, on the same line, how long it took
/// or that it failed (the error itself is the caller's to report).
pub async fn step<T, E>(what: &str, work: impl Future<Output = Result<T, E>>) -> Result<T, E> {
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "{}", started(what));
    let _ = stderr.flush();
    let began = Instant::now();
    let result = work.await;
    let _ = writeln!(stderr, "{}", finished(result.is_ok(), began.elapsed()));
    result
}

/// The start of a step's line.
pub fn started(what: &str) -> String {
    format!("==> {what} … ")
}

/// The end of a step's line.
pub fn finished(succeeded: bool, elapsed: Duration) -> String {
    if succeeded { format!("done in {}", duration(elapsed)) } else { format!("failed after {}", duration(elapsed)) }
}

/// `0.04 s` below a second, `1.2 s` above.
fn duration(elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64();
    if seconds < 1.0 { format!("{seconds:.2} s") } else { format!("{seconds:.1} s") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_says_what_it_does_then_how_long_it_took() {
        assert_eq!(started("creating 14 tables"), "==> creating 14 tables … ");
        assert_eq!(finished(true, Duration::from_millis(1_240)), "done in 1.2 s");
        assert_eq!(finished(true, Duration::from_millis(42)), "done in 0.04 s");
        assert_eq!(finished(false, Duration::from_millis(3_050)), "failed after 3.0 s");
    }

    #[tokio::test]
    async fn a_step_returns_what_its_work_returned() {
        assert_eq!(step("adding", async { Ok::<_, String>(2 + 2) }).await, Ok(4));
        assert_eq!(step("failing", async { Err::<(), _>("no".to_owned()) }).await, Err("no".to_owned()));
    }
}
