//! What the test files of this crate share: instants written as text, fire times read as text.

// Each test file is its own crate and uses only part of this.
#![allow(dead_code)]

use chrono::{DateTime, SecondsFormat, Utc};
use schedule::Schedule;

/// An instant from RFC 3339 text (`2025-03-09T07:00:00Z`).
pub fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap_or_else(|error| panic!("{text} is not an RFC 3339 instant: {error}"))
}

/// A schedule that must parse.
pub fn schedule(expression: &str, timezone: &str) -> Schedule {
    Schedule::parse(expression, timezone)
        .unwrap_or_else(|error| panic!("{expression} in {timezone} must parse: {error}"))
}

/// The next `n` fire times after `after`, as RFC 3339 text in UTC.
pub fn fire_times(expression: &str, timezone: &str, after: &str, n: usize) -> Vec<String> {
    schedule(expression, timezone)
        .upcoming(at(after), n)
        .iter()
        .map(|instant| instant.to_rfc3339_opts(SecondsFormat::Secs, true))
        .collect()
}
