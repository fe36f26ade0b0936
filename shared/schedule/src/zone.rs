//! IANA time zones, from the time zone database compiled into the binary as TZif files (jiff's
//! bundle), read when a zone is first named.
//!
//! Not `chrono-tz`: its generated tables hold a pointer per zone name and per offset span, 47,000
//! relocations (1.1 MB) that the loader applied at every cold start of the schedule functions, a
//! fifth of the scheduler's init (docs/performance.md). The TZif bytes hold no pointers.

use chrono::{DateTime, FixedOffset, NaiveDateTime, Utc};
use jiff::tz::AmbiguousOffset;

/// An IANA time zone, named exactly as the database spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeZone(jiff::tz::TimeZone);

/// Where a wall-clock time falls in a time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalTime {
    /// The earliest instant whose wall clock reads it (the first of two in a repeated hour).
    At(DateTime<Utc>),
    /// Skipped by a transition (a spring-forward gap).
    Skipped,
    /// Outside the years the database answers for (-9999..=9999).
    OutOfRange,
}

impl TimeZone {
    /// The zone of this IANA name, spelled exactly (`Europe/Berlin`, not `europe/berlin`).
    pub fn named(name: &str) -> Option<TimeZone> {
        let zone = jiff::tz::TimeZone::get(name).ok()?;
        (zone.iana_name() == Some(name)).then_some(TimeZone(zone))
    }

    /// The zone's IANA name.
    pub fn name(&self) -> &str {
        self.0.iana_name().unwrap_or("UTC")
    }

    /// The zone's offset from UTC at `instant`; `None` outside the years the database answers for.
    pub fn offset_at(&self, instant: DateTime<Utc>) -> Option<FixedOffset> {
        let timestamp = jiff::Timestamp::from_second(instant.timestamp()).ok()?;
        FixedOffset::east_opt(self.0.to_offset(timestamp).seconds())
    }

    /// The earliest instant whose wall clock in this zone reads `local`.
    pub(crate) fn earliest_instant_at(&self, local: NaiveDateTime) -> LocalTime {
        use chrono::{Datelike as _, Timelike as _};
        let civil = i16::try_from(local.year()).ok().and_then(|year| {
            let small = |value: u32| i8::try_from(value).ok();
            jiff::civil::DateTime::new(
                year,
                small(local.month())?,
                small(local.day())?,
                small(local.hour())?,
                small(local.minute())?,
                small(local.second())?,
                0,
            )
            .ok()
        });
        let Some(civil) = civil else {
            return LocalTime::OutOfRange;
        };
        let at = |offset: jiff::tz::Offset| {
            FixedOffset::east_opt(offset.seconds())
                .and_then(|offset| local.checked_sub_offset(offset))
                .map_or(LocalTime::OutOfRange, |utc| LocalTime::At(utc.and_utc()))
        };
        match self.0.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => at(offset),
            // The larger offset reads the same wall clock at the earlier instant.
            AmbiguousOffset::Fold { before, after } => at(before.max(after)),
            AmbiguousOffset::Gap { .. } => LocalTime::Skipped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn local(year: i32, month: u32, day: u32, hour: u32, minute: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(year, month, day).and_then(|date| date.and_hms_opt(hour, minute, 0)).unwrap()
    }

    fn utc(year: i32, month: u32, day: u32, hour: u32, minute: u32) -> LocalTime {
        LocalTime::At(local(year, month, day, hour, minute).and_utc())
    }

    #[test]
    fn names_are_exact() {
        assert_eq!(
            TimeZone::named("Europe/Berlin").map(|zone| zone.name().to_owned()).as_deref(),
            Some("Europe/Berlin")
        );
        assert_eq!(TimeZone::named("europe/berlin"), None);
        assert_eq!(TimeZone::named("UTC").map(|zone| zone.name().to_owned()).as_deref(), Some("UTC"));
        assert_eq!(TimeZone::named("Etc/UTC").map(|zone| zone.name().to_owned()).as_deref(), Some("Etc/UTC"));
        for unknown in ["", "Nowhere/Land", "Europe/Berlin ", "../etc/passwd", "+01:00", "CET\0"] {
            assert_eq!(TimeZone::named(unknown), None, "{unknown:?}");
        }
    }

    #[test]
    fn wall_clock_times_around_berlins_transitions() {
        let berlin = TimeZone::named("Europe/Berlin").unwrap();
        // Winter (+01:00), summer (+02:00).
        assert_eq!(berlin.earliest_instant_at(local(2025, 1, 15, 9, 0)), utc(2025, 1, 15, 8, 0));
        assert_eq!(berlin.earliest_instant_at(local(2025, 7, 15, 9, 0)), utc(2025, 7, 15, 7, 0));
        // 30 March 2025, 02:00–03:00 is skipped.
        assert_eq!(berlin.earliest_instant_at(local(2025, 3, 30, 2, 30)), LocalTime::Skipped);
        assert_eq!(berlin.earliest_instant_at(local(2025, 3, 30, 3, 0)), utc(2025, 3, 30, 1, 0));
        // 26 October 2025, 02:00–03:00 happens twice: the first, still +02:00.
        assert_eq!(berlin.earliest_instant_at(local(2025, 10, 26, 2, 30)), utc(2025, 10, 26, 0, 30));
        assert_eq!(berlin.offset_at(local(2025, 10, 26, 0, 59).and_utc()), FixedOffset::east_opt(7200));
        assert_eq!(berlin.offset_at(local(2025, 10, 26, 1, 0).and_utc()), FixedOffset::east_opt(3600));
    }

    #[test]
    fn instants_outside_the_database_have_no_answer() {
        let utc_zone = TimeZone::named("UTC").unwrap();
        assert_eq!(utc_zone.offset_at(DateTime::<Utc>::MAX_UTC), None);
        assert_eq!(utc_zone.offset_at(DateTime::<Utc>::MIN_UTC), None);
        assert_eq!(utc_zone.earliest_instant_at(local(12_000, 1, 1, 0, 0)), LocalTime::OutOfRange);
        assert_eq!(utc_zone.offset_at(local(2025, 1, 1, 0, 0).and_utc()), FixedOffset::east_opt(0));
    }
}
