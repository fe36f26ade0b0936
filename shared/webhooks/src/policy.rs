//! When to retry a failed delivery and when to give up on an endpoint.

use chrono::{DateTime, Duration as Span, Utc};
use std::time::Duration;

/// Waits after the 1st, 2nd, … failed attempt (the first attempt is immediate): 8 attempts over
/// about 28 hours.
pub const RETRY_DELAYS: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];

/// Every scheduled wait varies by up to this fraction, so retries of many deliveries spread out.
pub const JITTER: f64 = 0.2;

/// Bounds of a receiver's `Retry-After`: at least the first retry wait, at most the longest.
pub const RETRY_AFTER_MIN: Duration = Duration::from_secs(5);
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(10 * 3600);

/// An endpoint failing for this long without one success is disabled.
pub const DISABLE_AFTER_DAYS: i64 = 5;

/// The wait before the next attempt after `failed_attempts` scheduled attempts failed, or `None`
/// when none is left. `jitter` is in [-1, 1] (scaled to ±`JITTER`); a receiver's `Retry-After`
/// replaces the scheduled wait, within bounds.
pub fn next_retry(failed_attempts: usize, retry_after: Option<Duration>, jitter: f64) -> Option<Duration> {
    let scheduled = *RETRY_DELAYS.get(failed_attempts.checked_sub(1)?)?;
    if let Some(asked) = retry_after {
        return Some(asked.clamp(RETRY_AFTER_MIN, RETRY_AFTER_MAX));
    }
    // A NaN jitter stays NaN through `clamp`: the scheduled wait then stands.
    let jittered = scheduled.as_secs_f64() * (1.0 + JITTER * jitter.clamp(-1.0, 1.0));
    Some(Duration::try_from_secs_f64(jittered).unwrap_or(scheduled))
}

/// A random jitter in [-1, 1].
pub fn random_jitter() -> f64 {
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.0;
    }
    f64::from(u32::from_le_bytes(bytes)) / f64::from(u32::MAX) * 2.0 - 1.0
}

/// Whether an endpoint failing since `failing_since` must be disabled at `now`.
pub fn should_disable(failing_since: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    now - failing_since >= Span::days(DISABLE_AFTER_DAYS)
}

/// Parses `Retry-After` given in seconds (the HTTP-date form is not honoured).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_has_seven_retries_with_bounded_jitter() {
        assert_eq!(next_retry(1, None, 0.0), Some(Duration::from_secs(5)));
        assert_eq!(next_retry(2, None, 0.0), Some(Duration::from_secs(300)));
        assert_eq!(next_retry(7, None, 0.0), Some(Duration::from_secs(36_000)));
        assert_eq!(next_retry(8, None, 0.0), None);
        assert_eq!(next_retry(0, None, 0.0), None);
        assert_eq!(next_retry(3, None, 1.0), Some(Duration::from_secs(2160)));
        assert_eq!(next_retry(3, None, -1.0), Some(Duration::from_secs(1440)));
        assert_eq!(next_retry(3, None, 7.0), Some(Duration::from_secs(2160)));
        for _ in 0..100 {
            let jitter = random_jitter();
            assert!((-1.0..=1.0).contains(&jitter));
        }
    }

    #[test]
    fn retry_after_replaces_the_wait_within_bounds_but_not_the_attempt_count() {
        assert_eq!(next_retry(1, Some(Duration::from_secs(120)), 0.5), Some(Duration::from_secs(120)));
        assert_eq!(next_retry(1, Some(Duration::from_secs(0)), 0.0), Some(RETRY_AFTER_MIN));
        assert_eq!(next_retry(2, Some(Duration::from_secs(999_999)), 0.0), Some(RETRY_AFTER_MAX));
        assert_eq!(next_retry(8, Some(Duration::from_secs(60)), 0.0), None);
        assert_eq!(parse_retry_after(" 30 "), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn endpoints_are_disabled_after_five_days_of_failure() {
        let start = Utc::now();
        assert!(!should_disable(start, start + Span::days(5) - Span::seconds(1)));
        assert!(should_disable(start, start + Span::days(5)));
    }
}
