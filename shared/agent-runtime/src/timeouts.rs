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
pub const MAX_QUEUED_RUN_TIMEOUT: Duration =
    Duration::from_secs(platform_data::agent_spec::MAX_METADATA_TIMEOUT_SECONDS);
/// The run's time limit from the request and the agent's `metadata.timeout` (seconds), at most
/// `max` (`MAX_RUN_TIMEOUT` for a run executed by the process that started it,
/// `MAX_QUEUED_RUN_TIMEOUT` for a queued one).
pub fn run_timeout(requested: Option<Duration>, metadata: &Map<String, Value>, max: Duration) -> Duration {
    // Read defensively: records stored before `metadata.timeout` was validated may hold any number.
    let from_metadata =
        metadata.get("timeout").and_then(Value::as_f64).and_then(|seconds| positive_seconds(seconds, max));
    // A zero (a schedule's `timeout: 0` stored before it was checked) is no timeout asked for.
    requested.filter(|timeout| !timeout.is_zero()).or(from_metadata).unwrap_or(DEFAULT_RUN_TIMEOUT).min(max)
}

/// `seconds` as a `Duration` of at most `max`: clamped before it is converted, so no number (huge,
/// negative, NaN) can panic as `Duration::from_secs_f64` would. `None` unless finite and above 0;
/// at least a millisecond (a positive number below one is as short as a timeout goes).
pub fn positive_seconds(seconds: f64, max: Duration) -> Option<Duration> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return None;
    }
    let duration = Duration::try_from_secs_f64(seconds.min(max.as_secs_f64())).ok()?;
    Some(duration.max(Duration::from_millis(1)).min(max))
}

/// The instant `wait` from now, or a year from now when that is further than the clock holds.
pub fn instant_after(wait: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(wait).unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
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

    #[test]
    fn any_stored_number_is_a_timeout_within_the_maximum_or_none() {
        let metadata = |value: Value| value.as_object().cloned().unwrap_or_default();
        // 1e20 seconds panicked in `Duration::from_secs_f64` before the maximum applied.
        for huge in [json!(1e20), json!(f64::MAX), json!(u64::MAX), json!(1.8446744073709552e19)] {
            assert_eq!(run_timeout(None, &metadata(json!({"timeout": huge})), MAX_RUN_TIMEOUT), MAX_RUN_TIMEOUT);
        }
        assert_eq!(run_timeout(None, &metadata(json!({"timeout": 1e-300})), MAX_RUN_TIMEOUT), Duration::from_millis(1));
        assert_eq!(run_timeout(Some(Duration::ZERO), &Map::new(), MAX_RUN_TIMEOUT), DEFAULT_RUN_TIMEOUT);
        for nothing in [json!(0), json!(-1e20), json!(-0.0), json!(null), json!([1]), json!({"s": 1})] {
            assert_eq!(run_timeout(None, &metadata(json!({"timeout": nothing})), MAX_RUN_TIMEOUT), DEFAULT_RUN_TIMEOUT);
        }
        assert_eq!(positive_seconds(2.5, MAX_RUN_TIMEOUT), Some(Duration::from_millis(2500)));
        assert_eq!(positive_seconds(f64::NAN, MAX_RUN_TIMEOUT), None);
        assert_eq!(positive_seconds(f64::INFINITY, MAX_RUN_TIMEOUT), None);
    }
}
