//! Properties over generated input: no text makes parsing panic or answer outside the documented
//! errors, 5-field fire times agree with an independent implementation (the `croner` crate), and
//! the bundled time zone database agrees with `chrono-tz`'s.

use std::str::FromStr;

use chrono::{DateTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::CronParser;
use proptest::prelude::*;
use proptest::sample::select;
use schedule::{Schedule, ScheduleError, TimeZone as BundledZone};

/// Zones whose rules are settled (the two databases may be different IANA releases), with
/// half-hour, 45-minute and southern-hemisphere offsets among them.
const SETTLED_ZONES: &[&str] = &[
    "UTC",
    "America/New_York",
    "America/Sao_Paulo",
    "Europe/Berlin",
    "Europe/London",
    "Australia/Lord_Howe",
    "Australia/Adelaide",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Asia/Tokyo",
    "Pacific/Auckland",
    "Pacific/Chatham",
];

/// 2000-01-01T00:00:00Z and 2035-01-01T00:00:00Z: the range of generated instants.
const FROM: i64 = 946_684_800;
const UNTIL: i64 = 2_051_222_400;

const ZONES: &[&str] = &["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata"];

fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    (FROM..UNTIL).prop_map(|seconds| DateTime::from_timestamp(seconds, 0).unwrap_or_default())
}

/// Any instant chrono can hold, the extremes included.
fn any_instant() -> impl Strategy<Value = DateTime<Utc>> {
    prop_oneof![
        instant(),
        Just(DateTime::<Utc>::MIN_UTC),
        Just(DateTime::<Utc>::MAX_UTC),
        any::<i64>().prop_map(|seconds| DateTime::from_timestamp(seconds / 1000, 0).unwrap_or_default()),
    ]
}

/// Every error is one of the documented kinds, and a schedule that parsed answers in order.
fn check_outcome(expression: &str, timezone: &str, after: DateTime<Utc>) {
    match Schedule::parse(expression, timezone) {
        Ok(schedule) => {
            let times = schedule.upcoming(after, 3);
            let mut previous = after;
            for time in times {
                assert!(time > previous, "{expression}: {time} after {previous}");
                previous = time;
            }
        }
        Err(ScheduleError::InvalidExpression(detail)) => assert!(!detail.is_empty()),
        Err(ScheduleError::UnknownTimeZone(_)) => assert!(!ZONES.contains(&timezone)),
        Err(ScheduleError::NeverFires) => {}
    }
}

/// Text made of the characters schedule expressions use, so that it often gets far.
fn expression_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9*,/?#LW -]{0,30}",
        "[0-9*,/ -]{1,6}( [0-9*,/ -]{1,6}){4}",
        "cron\\([0-9*,/?#LWA-Z -]{0,40}\\)",
        "cron\\(([0-9*,/?#LW-]{1,5} ){5}[0-9*,/-]{1,9}\\)",
        "rate\\([0-9 ]{0,12}(minutes?|hours?|days?|weeks)?\\)",
        "@[a-z]{0,9}",
    ]
}

/// One item of a 5-field list: a value, a range, or a step.
fn item(min: u32, max: u32, names: &'static [&'static str]) -> BoxedStrategy<String> {
    let span = max - min + 1;
    let value = (min..=max).prop_map(|value| value.to_string());
    let range = (min..=max, min..=max).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b)));
    let every = (1..=span).prop_map(|step| format!("*/{step}"));
    let range_step =
        (min..=max, min..=max, 1..=span).prop_map(|(a, b, step)| format!("{}-{}/{step}", a.min(b), a.max(b)));
    let start_step = (min..=max, 1..=span).prop_map(|(start, step)| format!("{start}/{step}"));
    if names.is_empty() {
        prop_oneof![value, range, every, range_step, start_step].boxed()
    } else {
        let name = select(names).prop_map(str::to_string);
        prop_oneof![value, range, every, range_step, start_step, name].boxed()
    }
}

/// A 5-field field: `*` (weighted by `star`) or a list of one to three items.
fn field(min: u32, max: u32, names: &'static [&'static str], star: u32) -> BoxedStrategy<String> {
    prop_oneof![
        star => Just("*".to_string()),
        4 => prop::collection::vec(item(min, max, names), 1..=3).prop_map(|items| items.join(",")),
    ]
    .boxed()
}

fn five_fields() -> impl Strategy<Value = String> {
    (
        field(0, 59, &[], 1),
        field(0, 23, &[], 2),
        field(1, 31, &[], 4),
        field(1, 12, &["JAN", "mar", "Jun", "SEP", "dec"], 4),
        field(0, 7, &["SUN", "mon", "Wed", "FRI", "sat"], 4),
    )
        .prop_map(|(minute, hour, day, month, weekday)| format!("{minute} {hour} {day} {month} {weekday}"))
}

/// Whether the UTC offset of `zone` changes anywhere in `from..=until` (sampled every 12 hours,
/// which no two real transitions are closer than).
fn offset_changes(zone: Tz, from: DateTime<Utc>, until: DateTime<Utc>) -> bool {
    let offset = |at: DateTime<Utc>| zone.offset_from_utc_datetime(&at.naive_utc()).fix();
    let first = offset(from);
    let mut at = from;
    while at < until {
        at = (at + TimeDelta::hours(12)).min(until);
        if offset(at) != first {
            return true;
        }
    }
    false
}

/// The next fire time by croner, which reads `a/n` like we do only with sloppy ranges on.
fn croner_next(expression: &str, zone: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let cron = CronParser::builder()
        .sloppy_ranges(true)
        .build()
        .parse(expression)
        .unwrap_or_else(|error| panic!("croner refuses {expression}: {error}"));
    cron.find_next_occurrence(&after.with_timezone(&zone), false).ok().map(|next| next.with_timezone(&Utc))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn bundled_offsets_agree_with_chrono_tz(timezone in select(SETTLED_ZONES), at in instant()) {
        let bundled = BundledZone::named(timezone).and_then(|zone| zone.offset_at(at));
        let reference = Tz::from_str(timezone).map(|zone| zone.offset_from_utc_datetime(&at.naive_utc()).fix());
        prop_assert_eq!(bundled, reference.ok(), "{} at {}", timezone, at);
    }

    #[test]
    fn any_text_parses_or_gives_a_documented_error(
        expression in any::<String>(),
        timezone in prop_oneof![select(ZONES).prop_map(str::to_string), any::<String>()],
        after in any_instant(),
    ) {
        check_outcome(&expression, &timezone, after);
    }

    #[test]
    fn expression_like_text_parses_or_gives_a_documented_error(
        expression in expression_like(),
        timezone in select(ZONES),
        after in any_instant(),
    ) {
        check_outcome(&expression, timezone, after);
    }

    /// In UTC there is no daylight saving, so every generated case is compared.
    #[test]
    fn five_field_fire_times_agree_with_croner_in_utc(
        expression in five_fields(),
        after in instant(),
    ) {
        let Ok(schedule) = Schedule::parse(&expression, "UTC") else {
            // Only `NeverFires` can happen to a generated expression; croner has no answer.
            prop_assert_eq!(Schedule::parse(&expression, "UTC"), Err(ScheduleError::NeverFires));
            return Ok(());
        };
        prop_assert_eq!(schedule.next_after(after), croner_next(&expression, Tz::UTC, after));
    }

    /// Croner's policy for the repeated hour differs (it fires minute and hour patterns in both
    /// passes), so a case is compared only when the zone's offset stays the same from two hours
    /// before `after` to two hours past the earlier of the two answers.
    #[test]
    fn five_field_fire_times_agree_with_croner_in_zones_away_from_transitions(
        expression in five_fields(),
        timezone in select(&ZONES[1..]),
        after in instant(),
    ) {
        let zone = Tz::from_str(timezone).unwrap_or(Tz::UTC);
        let Ok(schedule) = Schedule::parse(&expression, timezone) else {
            return Ok(());
        };
        let ours = schedule.next_after(after);
        let theirs = croner_next(&expression, zone, after);
        let earlier = match (ours, theirs) {
            (Some(ours), Some(theirs)) => ours.min(theirs),
            (Some(one), None) | (None, Some(one)) => one,
            (None, None) => return Ok(()),
        };
        let window = TimeDelta::hours(2);
        if offset_changes(zone, after - window, earlier + window) {
            // About one case in eight; not a proptest reject, so any case count runs through.
            return Ok(());
        }
        prop_assert_eq!(ours, theirs);
    }

    /// Across daylight saving changes too, fire times strictly increase (each fires once).
    #[test]
    fn fire_times_strictly_increase_in_every_zone(
        expression in five_fields(),
        timezone in select(ZONES),
        after in instant(),
    ) {
        let Ok(schedule) = Schedule::parse(&expression, timezone) else {
            return Ok(());
        };
        let times = schedule.upcoming(after, 20);
        prop_assert_eq!(times.len(), 20);
        prop_assert!(times[0] > after);
        for pair in times.windows(2) {
            prop_assert!(pair[0] < pair[1], "{} then {}", pair[0], pair[1]);
        }
    }
}
