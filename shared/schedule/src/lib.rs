//! When an agent schedule fires.
//!
//! A [`Schedule`] is a parsed expression (standard 5-field cron, AWS `cron(...)` or AWS
//! `rate(...)`) with its IANA time zone. It answers one question: the first fire time strictly
//! after a given instant. Pure computation: no clock, no I/O; every search is bounded.
//! The syntax, the daylight saving policy and the error kinds are in `docs/schedules.md`.

mod cron;
mod error;
mod rate;
mod syntax;
mod zone;

use chrono::{DateTime, Utc};

pub use error::ScheduleError;
pub use zone::TimeZone;

/// The longest expression accepted, in bytes (longer ones are rejected before parsing).
pub const MAX_EXPRESSION_LEN: usize = 256;

/// The most fire times [`Schedule::upcoming`] returns, whatever it is asked for.
pub const MAX_UPCOMING: usize = 1000;

/// The longest time zone name accepted, in bytes (the longest IANA name has 32).
const MAX_TIMEZONE_LEN: usize = 64;

/// A parsed schedule expression in its time zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pattern: Pattern,
    timezone: TimeZone,
}

/// What an expression says, before a time zone gives it instants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// A wall-clock pattern (5-field cron, a macro, or AWS `cron(...)`).
    Cron(cron::Cron),
    /// A fixed period anchored at the Unix epoch.
    Rate(rate::Rate),
}

impl Schedule {
    /// Parses `expression` in the IANA `timezone`.
    ///
    /// Errors, checked in this order: [`ScheduleError::InvalidExpression`] (syntax, a value out
    /// of range, an unknown name), [`ScheduleError::UnknownTimeZone`], and
    /// [`ScheduleError::NeverFires`] for an expression no date can ever satisfy (`0 0 30 2 *`).
    pub fn parse(expression: &str, timezone: &str) -> Result<Schedule, ScheduleError> {
        let pattern = syntax::parse_expression(expression)?;
        let timezone = parse_timezone(timezone)?;
        if let Pattern::Cron(cron) = &pattern
            && !cron.ever_fires()
        {
            return Err(ScheduleError::NeverFires);
        }
        Ok(Schedule { pattern, timezone })
    }

    /// The time zone the expression is read in.
    pub fn timezone(&self) -> &TimeZone {
        &self.timezone
    }

    /// The first fire time strictly after `after`, or `None` if it never fires again.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.pattern {
            Pattern::Cron(cron) => cron.next_after(&self.timezone, after),
            Pattern::Rate(rate) => rate.next_after(after),
        }
    }

    /// The next `n` fire times after `after` (at most [`MAX_UPCOMING`]), fewer if it stops firing.
    pub fn upcoming(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let n = n.min(MAX_UPCOMING);
        let mut times = Vec::with_capacity(n);
        let mut cursor = after;
        while times.len() < n {
            let Some(next) = self.next_after(cursor) else {
                break;
            };
            times.push(next);
            cursor = next;
        }
        times
    }
}

/// Looks up an IANA time zone name, exactly as the database spells it.
fn parse_timezone(name: &str) -> Result<TimeZone, ScheduleError> {
    let unknown = || ScheduleError::UnknownTimeZone(name.chars().take(MAX_TIMEZONE_LEN).collect());
    if name.is_empty() || name.len() > MAX_TIMEZONE_LEN {
        return Err(unknown());
    }
    TimeZone::named(name).ok_or_else(unknown)
}
