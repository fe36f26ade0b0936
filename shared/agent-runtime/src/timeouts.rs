//! A run's time limits: the bounds of its timeout, how a run's timeout is chosen, and how a
//! passed one is said. A leaf: the engine, the providers and the entry points all read it.

use serde_json::{Map, Value};
use std::time::Duration;

/// A run's time limit when neither the request nor the agent's `metadata.timeout` sets one.
pub const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest a run executed by the process that started it may take (a Lambda invocation ends
/// at 15 minutes).
pub const MAX_RUN_TIMEOUT: Duration = Duration::from_secs(840);
/// The longest a queued run may take: it continues across worker invocations.
pub const MAX_QUEUED_RUN_TIMEOUT: Duration = Duration::from_secs(6 * 3600);
/// The run's time limit from the request and the agent's `metadata.timeout` (seconds), at most
/// `max` (`MAX_RUN_TIMEOUT` for a run executed by the process that started it,
/// `MAX_QUEUED_RUN_TIMEOUT` for a queued one).
pub fn run_timeout(requested: Option<Duration>, metadata: &Map<String, Value>, max: Duration) -> Duration {
    let from_metadata = metadata
        .get("timeout")
        .and_then(Value::as_f64)
        .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
        .map(Duration::from_secs_f64);
    requested.or(from_metadata).unwrap_or(DEFAULT_RUN_TIMEOUT).min(max)
}

/// The failure message of `what` (`the run`, `the flow`) when its `timeout` ran out: the timeout
/// as the run was given it (`3`, `2.5`), not the time left when its execution began.
pub fn did_not_finish(what: &str, timeout: Duration) -> String {
    let seconds = timeout.as_millis() as f64 / 1000.0;
    format!("{what} did not finish within {seconds} seconds")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_request_timeout_wins_then_metadata_then_the_default_within_the_maximum() {
        let metadata = |value: Value| value.as_object().cloned().unwrap_or_default();
        assert_eq!(
            run_timeout(Some(Duration::from_secs(5)), &metadata(json!({"timeout": 60})), MAX_RUN_TIMEOUT),
            Duration::from_secs(5)
        );
        assert_eq!(run_timeout(None, &metadata(json!({"timeout": 60})), MAX_RUN_TIMEOUT), Duration::from_secs(60));
        assert_eq!(run_timeout(None, &metadata(json!({"timeout": "x"})), MAX_RUN_TIMEOUT), DEFAULT_RUN_TIMEOUT);
        assert_eq!(run_timeout(None, &metadata(json!({"timeout": -3})), MAX_RUN_TIMEOUT), DEFAULT_RUN_TIMEOUT);
        assert_eq!(run_timeout(Some(Duration::from_secs(99_999)), &Map::new(), MAX_RUN_TIMEOUT), MAX_RUN_TIMEOUT);
        assert_eq!(
            run_timeout(Some(Duration::from_secs(3600)), &Map::new(), MAX_QUEUED_RUN_TIMEOUT),
            Duration::from_secs(3600)
        );
    }
}
