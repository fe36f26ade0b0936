//! AWS `rate(value unit)`: a fixed period, anchored at the Unix epoch.

use chrono::{DateTime, Utc};

use crate::error::ScheduleError;

/// A fixed period that fires at every multiple of itself since 1970-01-01T00:00:00Z.
///
/// Anchoring at the epoch (rather than at creation time) makes the due times a function of the
/// expression alone, so every scheduler tick computes the same ones without stored state, and
/// `rate(1 day)` fires at 00:00 UTC whatever the schedule's time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rate {
    period_seconds: i64,
}

/// The longest period: one year (365 days), in seconds.
const MAX_PERIOD_SECONDS: i64 = 365 * 86_400;

impl Rate {
    /// Parses the inside of `rate(...)`: a positive whole number and a unit, singular for 1
    /// (`minute`, `hour`, `day`) and plural otherwise, as AWS requires.
    pub(crate) fn parse(inner: &str) -> Result<Rate, ScheduleError> {
        let mut words = inner.split_ascii_whitespace();
        let (Some(value), Some(unit), None) = (words.next(), words.next(), words.next()) else {
            return Err(ScheduleError::invalid("rate(...) takes a value and a unit, such as rate(5 minutes)"));
        };
        if value.is_empty() || value.len() > 9 || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ScheduleError::invalid(format!("rate value {value:?} is not a positive whole number")));
        }
        let count: i64 =
            value.parse().map_err(|_| ScheduleError::invalid(format!("rate value {value:?} is not a number")))?;
        if count == 0 {
            return Err(ScheduleError::invalid("rate value must be at least 1"));
        }
        let (unit_seconds, singular) = match unit {
            "minute" => (60, true),
            "minutes" => (60, false),
            "hour" => (3_600, true),
            "hours" => (3_600, false),
            "day" => (86_400, true),
            "days" => (86_400, false),
            _ => {
                return Err(ScheduleError::invalid(format!("rate unit {unit:?} is not minute(s), hour(s) or day(s)")));
            }
        };
        if singular != (count == 1) {
            return Err(ScheduleError::invalid(format!(
                "rate({value} {unit}): the unit is singular for 1 and plural otherwise"
            )));
        }
        let period_seconds = count.saturating_mul(unit_seconds);
        if period_seconds > MAX_PERIOD_SECONDS {
            return Err(ScheduleError::invalid(format!("rate({value} {unit}) is longer than the maximum of 365 days")));
        }
        Ok(Rate { period_seconds })
    }

    /// The first multiple of the period (since the epoch) strictly after `after`.
    pub(crate) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // `timestamp()` floors, so a fractional `after` on a multiple still moves to the next one.
        let periods = after.timestamp().div_euclid(self.period_seconds).checked_add(1)?;
        DateTime::from_timestamp(periods.checked_mul(self.period_seconds)?, 0)
    }
}
