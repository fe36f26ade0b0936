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

/// Attempts in a row without an answer after which an endpoint is *slow*: its attempts get
/// `SLOW_ATTEMPT_TIMEOUT`, its retries wait at least `SLOW_RETRY_MIN`. An endpoint that accepts
/// connections and never answers holds a place in the delivery pool for a whole attempt timeout
/// each time; a slow one holds it for a third of that, and less often.
pub const SLOW_AFTER_TIMEOUTS: u32 = 3;
/// The limit of a slow endpoint's attempts (others get `delivery::ATTEMPT_TIMEOUT`, 15 s).
pub const SLOW_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest retry wait of a slow endpoint (the schedule's first two are 5 s and 5 min).
pub const SLOW_RETRY_MIN: Duration = Duration::from_secs(30 * 60);
/// An endpoint whose last this-many attempts all timed out, failing for `DISABLE_SLOW_AFTER_HOURS`,
/// is disabled (other failures take `DISABLE_AFTER_DAYS`).
pub const DISABLE_SLOW_AFTER_TIMEOUTS: u32 = 10;
pub const DISABLE_SLOW_AFTER_HOURS: i64 = 24;

/// How an endpoint is paced, from its attempts in a row that got no answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    pub timeouts_in_a_row: u32,
}

impl Pace {
    /// The pace after an attempt of an endpoint with `timeouts_in_a_row`: a timeout adds to the
    /// run, any answer ends it.
    pub fn after(timeouts_in_a_row: u32, timed_out: bool) -> Self {
        Self { timeouts_in_a_row: if timed_out { timeouts_in_a_row.saturating_add(1) } else { 0 } }
    }

    /// Whether the endpoint is slow (see `SLOW_AFTER_TIMEOUTS`).
    pub fn is_slow(self) -> bool {
        self.timeouts_in_a_row >= SLOW_AFTER_TIMEOUTS
    }

    /// The limit of the endpoint's next attempt: `normal`, or `SLOW_ATTEMPT_TIMEOUT` when slow.
    pub fn attempt_timeout(self, normal: Duration) -> Duration {
        if self.is_slow() { normal.min(SLOW_ATTEMPT_TIMEOUT) } else { normal }
    }

    /// A retry's wait: `wait`, at least `SLOW_RETRY_MIN` when slow.
    pub fn retry_wait(self, wait: Duration) -> Duration {
        if self.is_slow() { wait.max(SLOW_RETRY_MIN) } else { wait }
    }

    /// Why an endpoint failing since `failing_since` must be disabled at `now`, if it must: after
    /// `DISABLE_SLOW_AFTER_HOURS` when its last `DISABLE_SLOW_AFTER_TIMEOUTS` attempts all timed
    /// out, after `DISABLE_AFTER_DAYS` whatever the failures.
    pub fn disable_reason(self, failing_since: DateTime<Utc>, now: DateTime<Utc>) -> Option<&'static str> {
        let failing = now - failing_since;
        if self.timeouts_in_a_row >= DISABLE_SLOW_AFTER_TIMEOUTS && failing >= Span::hours(DISABLE_SLOW_AFTER_HOURS) {
            Some("the endpoint timed out on every delivery for a day")
        } else if failing >= Span::days(DISABLE_AFTER_DAYS) {
            Some("the endpoint failed every delivery for 5 days")
        } else {
            None
        }
    }
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
    fn endpoints_are_disabled_after_five_days_of_failure_or_one_day_of_timeouts() {
        let start = Utc::now();
        let answering = Pace { timeouts_in_a_row: 0 };
        assert_eq!(answering.disable_reason(start, start + Span::days(5) - Span::seconds(1)), None);
        assert_eq!(
            answering.disable_reason(start, start + Span::days(5)),
            Some("the endpoint failed every delivery for 5 days")
        );
        let silent = Pace { timeouts_in_a_row: DISABLE_SLOW_AFTER_TIMEOUTS };
        assert_eq!(silent.disable_reason(start, start + Span::hours(24) - Span::seconds(1)), None);
        assert_eq!(
            silent.disable_reason(start, start + Span::hours(24)),
            Some("the endpoint timed out on every delivery for a day")
        );
        let fewer = Pace { timeouts_in_a_row: DISABLE_SLOW_AFTER_TIMEOUTS - 1 };
        assert_eq!(fewer.disable_reason(start, start + Span::days(4)), None);
    }

    #[test]
    fn an_endpoint_that_keeps_timing_out_gets_shorter_attempts_and_longer_waits() {
        let normal = Duration::from_secs(15);
        for timeouts in 0..SLOW_AFTER_TIMEOUTS {
            let pace = Pace { timeouts_in_a_row: timeouts };
            assert_eq!(
                (pace.attempt_timeout(normal), pace.retry_wait(Duration::from_secs(5))),
                (normal, Duration::from_secs(5))
            );
        }
        let slow = Pace { timeouts_in_a_row: SLOW_AFTER_TIMEOUTS };
        assert_eq!(slow.attempt_timeout(normal), SLOW_ATTEMPT_TIMEOUT);
        assert_eq!(slow.attempt_timeout(Duration::from_millis(200)), Duration::from_millis(200));
        assert_eq!(slow.retry_wait(Duration::from_secs(5)), SLOW_RETRY_MIN);
        assert_eq!(slow.retry_wait(Duration::from_secs(36_000)), Duration::from_secs(36_000));
    }
}
