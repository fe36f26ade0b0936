//! A parsed wall-clock pattern and the search for its next fire time.
//!
//! The search walks the wall clock of the schedule's time zone (year, month, day, hour, minute,
//! skipping whole months and days that cannot match), then turns each matching local minute into
//! an instant by the daylight saving policy: the first instant whose wall clock reads that time
//! or later. So a time skipped by a spring-forward gap fires when the gap ends, and a time the
//! fall-back repeats fires at its first occurrence only.

use crate::zone::{LocalTime, TimeZone};
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, TimeDelta, Timelike, Utc};

/// The first year of an AWS year field.
pub(crate) const FIRST_YEAR: i32 = 1970;
/// The last year of an AWS year field.
pub(crate) const LAST_YEAR: i32 = 2199;

/// How far a search without a year field looks: the Gregorian calendar (month lengths and
/// weekdays together) repeats every 400 years, so a pattern that matches no date in 400 years
/// matches none ever.
const HORIZON_YEARS: i32 = 400;
/// Month steps a date search may take: the horizon, plus the steps that skip unlisted years.
const MAX_MONTH_STEPS: usize = ((HORIZON_YEARS as usize) + 1) * 12 * 2;
/// Matching minutes a search may pass over because they fall at or before `after`. Only the
/// second pass of a repeated (fall-back) hour causes any; real overlaps last at most a day.
const MAX_PASSED_CANDIDATES: usize = 3 * 24 * 60;
/// The longest spring-forward gap walked, in minutes (real gaps are at most a day long).
const MAX_GAP_MINUTES: usize = 2 * 24 * 60;

/// A set of small field values (0..=63), one bit each.
pub(crate) type Bits = u64;

/// Years of an AWS year field (1970..=2199), one bit each from 1970.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Years([u64; 4]);

impl Years {
    /// An empty set.
    pub(crate) fn new() -> Years {
        Years([0; 4])
    }

    /// Adds a year in 1970..=2199 (others are ignored).
    pub(crate) fn insert(&mut self, year: i32) {
        if let Some(index) = Self::index(year) {
            self.0[index / 64] |= 1 << (index % 64);
        }
    }

    /// The first year in the set at or after `year`.
    fn next_from(&self, year: i32) -> Option<i32> {
        let start = Self::index(year.max(FIRST_YEAR))?;
        (start..=(LAST_YEAR - FIRST_YEAR) as usize)
            .find(|&index| self.0[index / 64] & (1 << (index % 64)) != 0)
            .map(|index| FIRST_YEAR + index as i32)
    }

    /// The last year in the set.
    fn last(&self) -> Option<i32> {
        (0..=(LAST_YEAR - FIRST_YEAR) as usize)
            .rev()
            .find(|&index| self.0[index / 64] & (1 << (index % 64)) != 0)
            .map(|index| FIRST_YEAR + index as i32)
    }

    fn index(year: i32) -> Option<usize> {
        (FIRST_YEAR..=LAST_YEAR).contains(&year).then(|| (year - FIRST_YEAR) as usize)
    }
}

/// Which days of the month a day-of-month field selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DayOfMonth {
    /// These days (bits 1..=31); days past the month's end never match.
    Days(Bits),
    /// `L`: the last day of the month.
    Last,
    /// `LW`: the last weekday (Monday to Friday) of the month.
    LastWeekday,
    /// `15W`: the weekday nearest the given day, within the same month. No match in a month
    /// shorter than the day.
    NearestWeekday(u32),
}

/// Which days of the month a day-of-week field selects. Weekdays count from 0 = Sunday.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DayOfWeek {
    /// Every day that falls on one of these weekdays (bits 0..=6).
    Weekdays(Bits),
    /// `6L`: the last such weekday of the month.
    Last(u32),
    /// `3#2`: the nth (1..=5) such weekday of the month; no match in a month without one.
    Nth(u32, u32),
}

/// A wall-clock pattern: minutes, hours, days, months and (AWS only) years.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cron {
    /// Minutes 0..=59.
    pub(crate) minutes: Bits,
    /// Hours 0..=23.
    pub(crate) hours: Bits,
    /// `None` when the field is `*` (or AWS `?`).
    pub(crate) day_of_month: Option<DayOfMonth>,
    /// `None` when the field is `*` (or AWS `?`).
    pub(crate) day_of_week: Option<DayOfWeek>,
    /// Months 1..=12.
    pub(crate) months: Bits,
    /// `None` when there is no year field or it is `*`.
    pub(crate) years: Option<Years>,
}

impl Cron {
    /// Whether any date at all matches (every matching local time fires, gaps included).
    pub(crate) fn ever_fires(&self) -> bool {
        let first_year = match &self.years {
            Some(years) => years.next_from(FIRST_YEAR),
            None => Some(2000),
        };
        first_year.and_then(|year| NaiveDate::from_ymd_opt(year, 1, 1)).and_then(|date| self.next_date(date)).is_some()
    }

    /// The first fire time strictly after `after`, read on the wall clock of `timezone`.
    pub(crate) fn next_after(&self, timezone: &TimeZone, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Every matching minute before this one fires at or before `after`: the policy's
        // instants never decrease as the wall clock moves on.
        let offset = timezone.offset_at(after)?;
        let mut cursor = after.naive_utc().checked_add_offset(offset)?.with_second(0)?.with_nanosecond(0)?;
        for _ in 0..MAX_PASSED_CANDIDATES {
            let candidate = self.next_local(cursor)?;
            let instant = first_instant_at_or_after(timezone, candidate)?;
            if instant > after {
                return Some(instant);
            }
            cursor = candidate.checked_add_signed(TimeDelta::minutes(1))?;
        }
        None
    }

    /// The first matching wall-clock minute at or after `from`.
    fn next_local(&self, from: NaiveDateTime) -> Option<NaiveDateTime> {
        let date = self.next_date(from.date())?;
        let time = if date == from.date() { self.next_time(from.hour(), from.minute()) } else { self.next_time(0, 0) };
        match time {
            Some((hour, minute)) => date.and_hms_opt(hour, minute, 0),
            // No matching time left today: the first one on the next matching day.
            None => {
                let date = self.next_date(date.succ_opt()?)?;
                let (hour, minute) = self.next_time(0, 0)?;
                date.and_hms_opt(hour, minute, 0)
            }
        }
    }

    /// The first matching (hour, minute) at or after `hour:minute` on the same day.
    fn next_time(&self, hour: u32, minute: u32) -> Option<(u32, u32)> {
        let first_minute = next_bit(self.minutes, 0)?;
        let matching_hour = next_bit(self.hours, hour)?;
        if matching_hour != hour {
            return Some((matching_hour, first_minute));
        }
        match next_bit(self.minutes, minute) {
            Some(matching_minute) => Some((hour, matching_minute)),
            None => Some((next_bit(self.hours, hour + 1)?, first_minute)),
        }
    }

    /// The first matching date at or after `from`, within the horizon.
    fn next_date(&self, from: NaiveDate) -> Option<NaiveDate> {
        let last_year = match &self.years {
            Some(years) => years.last()?,
            None => from.year().checked_add(HORIZON_YEARS)?,
        };
        let (mut year, mut month, mut day) = (from.year(), from.month(), from.day());
        for _ in 0..MAX_MONTH_STEPS {
            if year > last_year {
                return None;
            }
            if let Some(years) = &self.years
                && years.next_from(year) != Some(year)
            {
                (year, month, day) = (years.next_from(year)?, 1, 1);
                continue;
            }
            if self.months & (1 << month) == 0 {
                match next_bit(self.months, month) {
                    Some(next) => (month, day) = (next, 1),
                    None => (year, month, day) = (year + 1, 1, 1),
                }
                continue;
            }
            let days = self.day_mask(year, month)? & (u64::MAX << day);
            if days != 0 {
                return NaiveDate::from_ymd_opt(year, month, days.trailing_zeros());
            }
            (year, month, day) = if month == 12 { (year + 1, 1, 1) } else { (year, month + 1, 1) };
        }
        None
    }

    /// The days (bits 1..=31) of `year`-`month` that the day fields select: either field when
    /// both are restricted (Vixie cron), the restricted one otherwise, every day if neither is.
    fn day_mask(&self, year: i32, month: u32) -> Option<Bits> {
        let length = days_in_month(year, month);
        let first_weekday = NaiveDate::from_ymd_opt(year, month, 1)?.weekday().num_days_from_sunday();
        let whole_month = (u64::MAX >> (63 - length)) & !1;
        let by_day = self.day_of_month.map(|field| field.mask(length, first_weekday));
        let by_weekday = self.day_of_week.map(|field| field.mask(length, first_weekday));
        let days = match (by_day, by_weekday) {
            (None, None) => whole_month,
            (Some(days), None) | (None, Some(days)) => days,
            (Some(days), Some(weekdays)) => days | weekdays,
        };
        Some(days & whole_month)
    }
}

impl DayOfMonth {
    /// The selected days of a month of `length` days whose 1st falls on `first_weekday`.
    fn mask(self, length: u32, first_weekday: u32) -> Bits {
        let weekday_of = |day: u32| (first_weekday + day - 1) % 7;
        match self {
            DayOfMonth::Days(days) => days,
            DayOfMonth::Last => 1 << length,
            DayOfMonth::LastWeekday => match weekday_of(length) {
                6 => 1 << (length - 1),
                0 => 1 << (length - 2),
                _ => 1 << length,
            },
            DayOfMonth::NearestWeekday(day) if day > length => 0,
            DayOfMonth::NearestWeekday(day) => {
                let nearest = match weekday_of(day) {
                    // Saturday: the Friday before, unless that leaves the month.
                    6 if day == 1 => 3,
                    6 => day - 1,
                    // Sunday: the Monday after, unless that leaves the month.
                    0 if day == length => day - 2,
                    0 => day + 1,
                    _ => day,
                };
                1 << nearest
            }
        }
    }
}

impl DayOfWeek {
    /// The selected days of a month of `length` days whose 1st falls on `first_weekday`.
    fn mask(self, length: u32, first_weekday: u32) -> Bits {
        let first_on = |weekday: u32| (weekday + 7 - first_weekday) % 7 + 1;
        match self {
            DayOfWeek::Weekdays(weekdays) => {
                let mut days = 0;
                for weekday in (0..7).filter(|weekday| weekdays & (1 << weekday) != 0) {
                    let mut day = first_on(weekday);
                    while day <= length {
                        days |= 1 << day;
                        day += 7;
                    }
                }
                days
            }
            DayOfWeek::Last(weekday) => {
                let first = first_on(weekday);
                1 << (first + 7 * ((length - first) / 7))
            }
            DayOfWeek::Nth(weekday, nth) => {
                let day = first_on(weekday) + 7 * (nth - 1);
                if day <= length { 1 << day } else { 0 }
            }
        }
    }
}

/// The daylight saving policy: the first instant whose wall clock in `timezone` reads `local`
/// or later. That is the only instant for an ordinary time, the first of the two for a time the
/// clock repeats, and the end of the gap for a time the clock skips.
fn first_instant_at_or_after(timezone: &TimeZone, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    let mut probe = local;
    for _ in 0..=MAX_GAP_MINUTES {
        match timezone.earliest_instant_at(probe) {
            LocalTime::At(instant) => return Some(instant),
            LocalTime::OutOfRange => return None,
            // Inside a gap: the first whole minute that exists is the instant the gap ends
            // (every transition since 1970 falls on a whole minute).
            LocalTime::Skipped => probe = probe.checked_add_signed(TimeDelta::minutes(1))?,
        }
    }
    None
}

/// The lowest value in `bits` at or above `from`.
fn next_bit(bits: Bits, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let rest = bits & (u64::MAX << from);
    (rest != 0).then(|| rest.trailing_zeros())
}

/// Days in `month` of `year` (Gregorian).
fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_weekday_stays_inside_the_month() {
        // June 2024: the 1st is a Saturday (6), 30 days, the 30th a Sunday.
        assert_eq!(DayOfMonth::NearestWeekday(1).mask(30, 6), 1 << 3);
        assert_eq!(DayOfMonth::NearestWeekday(30).mask(30, 6), 1 << 28);
        assert_eq!(DayOfMonth::NearestWeekday(15).mask(30, 6), 1 << 14);
        assert_eq!(DayOfMonth::NearestWeekday(16).mask(30, 6), 1 << 17);
        assert_eq!(DayOfMonth::NearestWeekday(31).mask(30, 6), 0);
    }

    #[test]
    fn years_outside_the_aws_range_are_not_kept() {
        let mut years = Years::new();
        years.insert(1969);
        years.insert(2200);
        assert_eq!(years.last(), None);
        years.insert(2199);
        years.insert(1970);
        assert_eq!(years.next_from(1900), Some(1970));
        assert_eq!(years.next_from(1971), Some(2199));
        assert_eq!(years.last(), Some(2199));
    }
}
