//! When each form fires, away from daylight saving changes (those are in `daylight_saving.rs`).

mod support;

use chrono::{DateTime, TimeDelta, Utc};
use support::{at, fire_times, schedule};

#[test]
fn every_fifteen_minutes_fires_strictly_after_the_given_instant() {
    assert_eq!(
        fire_times("*/15 * * * *", "UTC", "2025-01-01T10:07:30Z", 3),
        ["2025-01-01T10:15:00Z", "2025-01-01T10:30:00Z", "2025-01-01T10:45:00Z"]
    );
    assert_eq!(fire_times("*/15 * * * *", "UTC", "2025-01-01T10:15:00Z", 1), ["2025-01-01T10:30:00Z"]);
    assert_eq!(fire_times("*/15 * * * *", "UTC", "2025-01-01T10:14:59.999Z", 1), ["2025-01-01T10:15:00Z"]);
}

#[test]
fn lists_ranges_and_steps_select_their_values() {
    assert_eq!(
        fire_times("5,35 8-18/4 * * *", "UTC", "2025-01-01T00:00:00Z", 7),
        [
            "2025-01-01T08:05:00Z",
            "2025-01-01T08:35:00Z",
            "2025-01-01T12:05:00Z",
            "2025-01-01T12:35:00Z",
            "2025-01-01T16:05:00Z",
            "2025-01-01T16:35:00Z",
            "2025-01-02T08:05:00Z",
        ]
    );
    // `a/n` runs from a to the end of the field.
    assert_eq!(
        fire_times("10/20 * * * *", "UTC", "2025-01-01T10:00:00Z", 4),
        ["2025-01-01T10:10:00Z", "2025-01-01T10:30:00Z", "2025-01-01T10:50:00Z", "2025-01-01T11:10:00Z",]
    );
}

#[test]
fn weekday_names_and_numbers_select_weekdays() {
    // 2025-01-03 is a Friday.
    assert_eq!(
        fire_times("0 9 * * MON-FRI", "UTC", "2025-01-03T09:00:00Z", 2),
        ["2025-01-06T09:00:00Z", "2025-01-07T09:00:00Z"]
    );
    // 0 and 7 are both Sunday.
    for expression in ["0 0 * * 0", "0 0 * * 7", "0 0 * * sun", "@weekly"] {
        assert_eq!(fire_times(expression, "UTC", "2025-01-01T00:00:00Z", 1), ["2025-01-05T00:00:00Z"], "{expression}");
    }
}

#[test]
fn month_names_select_months() {
    assert_eq!(
        fire_times("0 0 1 jan,Jul *", "UTC", "2025-02-01T00:00:00Z", 2),
        ["2025-07-01T00:00:00Z", "2026-01-01T00:00:00Z"]
    );
}

#[test]
fn a_day_matches_either_day_field_when_both_are_restricted() {
    // The 13th, or any Friday (Vixie cron).
    assert_eq!(
        fire_times("0 0 13 * FRI", "UTC", "2025-01-01T00:00:00Z", 4),
        ["2025-01-03T00:00:00Z", "2025-01-10T00:00:00Z", "2025-01-13T00:00:00Z", "2025-01-17T00:00:00Z",]
    );
    // With one of them `*`, only the other one counts.
    assert_eq!(fire_times("0 0 13 * *", "UTC", "2025-01-01T00:00:00Z", 1), ["2025-01-13T00:00:00Z"]);
}

#[test]
fn macros_fire_like_their_five_fields() {
    let after = "2025-05-17T10:30:00Z";
    assert_eq!(fire_times("@hourly", "UTC", after, 1), ["2025-05-17T11:00:00Z"]);
    assert_eq!(fire_times("@daily", "UTC", after, 1), ["2025-05-18T00:00:00Z"]);
    assert_eq!(fire_times("@monthly", "UTC", after, 1), ["2025-06-01T00:00:00Z"]);
    assert_eq!(fire_times("@yearly", "UTC", after, 1), ["2026-01-01T00:00:00Z"]);
}

#[test]
fn the_29th_of_february_waits_for_a_leap_year() {
    assert_eq!(
        fire_times("0 0 29 2 *", "UTC", "2025-01-01T00:00:00Z", 2),
        ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]
    );
}

#[test]
fn a_time_zone_moves_the_wall_clock() {
    assert_eq!(fire_times("0 9 * * *", "Asia/Kolkata", "2025-01-01T00:00:00Z", 1), ["2025-01-01T03:30:00Z"]);
    assert_eq!(fire_times("cron(0 10 * * ? *)", "Europe/Berlin", "2025-01-15T00:00:00Z", 1), ["2025-01-15T09:00:00Z"]);
    assert_eq!(fire_times("cron(0 10 * * ? *)", "Europe/Berlin", "2025-07-15T00:00:00Z", 1), ["2025-07-15T08:00:00Z"]);
}

#[test]
fn aws_cron_counts_weekdays_from_sunday_as_1() {
    assert_eq!(fire_times("cron(0 0 ? * 1 *)", "UTC", "2025-01-01T00:00:00Z", 1), ["2025-01-05T00:00:00Z"]);
    assert_eq!(fire_times("cron(0 18 ? * MON-FRI *)", "UTC", "2025-01-03T18:00:00Z", 1), ["2025-01-06T18:00:00Z"]);
    assert_eq!(
        fire_times("cron(0/15 * * * ? *)", "UTC", "2025-01-01T10:07:00Z", 2),
        ["2025-01-01T10:15:00Z", "2025-01-01T10:30:00Z"]
    );
}

#[test]
fn aws_l_is_the_last_day_of_the_month_or_week() {
    assert_eq!(
        fire_times("cron(0 0 L * ? *)", "UTC", "2024-01-31T00:00:00Z", 3),
        ["2024-02-29T00:00:00Z", "2024-03-31T00:00:00Z", "2024-04-30T00:00:00Z"]
    );
    // Alone in day-of-week, L is Saturday (the last day of the week); 2025-01-04 is one.
    assert_eq!(fire_times("cron(0 0 ? * L *)", "UTC", "2025-01-01T00:00:00Z", 1), ["2025-01-04T00:00:00Z"]);
    // 6L: the last Friday of the month.
    for expression in ["cron(0 0 ? * 6L *)", "cron(0 0 ? * FRIL *)"] {
        assert_eq!(
            fire_times(expression, "UTC", "2025-01-01T00:00:00Z", 3),
            ["2025-01-31T00:00:00Z", "2025-02-28T00:00:00Z", "2025-03-28T00:00:00Z"],
            "{expression}"
        );
    }
}

#[test]
fn aws_w_is_the_nearest_weekday_in_the_same_month() {
    // 2025-06-15 is a Sunday: the Monday after.
    assert_eq!(fire_times("cron(0 0 15W * ? *)", "UTC", "2025-06-01T00:00:00Z", 1), ["2025-06-16T00:00:00Z"]);
    // 2025-02-01 is a Saturday: not the Friday before (January) but the Monday after.
    assert_eq!(fire_times("cron(0 0 1W * ? *)", "UTC", "2025-01-31T00:00:00Z", 1), ["2025-02-03T00:00:00Z"]);
    // 2025-08-31 is a Sunday and the month's last day: the Friday before.
    assert_eq!(fire_times("cron(0 0 31W 8 ? *)", "UTC", "2025-08-01T00:00:00Z", 1), ["2025-08-29T00:00:00Z"]);
    // 31W never fires in a 30-day month: June is passed over.
    assert_eq!(fire_times("cron(0 0 31W 6,7 ? *)", "UTC", "2025-06-01T00:00:00Z", 1), ["2025-07-31T00:00:00Z"]);
    // LW: the last weekday. 2025-05-31 is a Saturday, 2025-08-31 a Sunday.
    assert_eq!(
        fire_times("cron(0 0 LW 5,8 ? *)", "UTC", "2025-05-01T00:00:00Z", 2),
        ["2025-05-30T00:00:00Z", "2025-08-29T00:00:00Z"]
    );
}

#[test]
fn aws_hash_is_the_nth_weekday_of_the_month() {
    // 3#2: the second Tuesday.
    assert_eq!(
        fire_times("cron(0 0 ? * 3#2 *)", "UTC", "2025-01-01T00:00:00Z", 2),
        ["2025-01-14T00:00:00Z", "2025-02-11T00:00:00Z"]
    );
    // The fifth Sunday of February needs a leap year whose February starts on a Sunday.
    assert_eq!(fire_times("cron(0 0 ? 2 1#5 *)", "UTC", "2005-01-01T00:00:00Z", 1), ["2032-02-29T00:00:00Z"]);
}

#[test]
fn aws_years_limit_the_fire_times() {
    assert_eq!(
        fire_times("cron(0 12 1 1 ? 2030,2035)", "UTC", "2025-01-01T00:00:00Z", 5),
        ["2030-01-01T12:00:00Z", "2035-01-01T12:00:00Z"]
    );
    assert_eq!(
        fire_times("cron(0 0 1 1 ? 2025/5)", "UTC", "2025-01-01T00:00:00Z", 2),
        ["2030-01-01T00:00:00Z", "2035-01-01T00:00:00Z"]
    );
    // Parses (it fired once), but never fires again.
    assert_eq!(schedule("cron(0 0 1 1 ? 1999)", "UTC").next_after(at("2025-01-01T00:00:00Z")), None);
    assert_eq!(
        schedule("cron(59 23 31 12 ? 2199)", "Pacific/Kiritimati").next_after(at("2199-12-31T00:00:00Z")),
        Some(at("2199-12-31T09:59:00Z"))
    );
}

#[test]
fn rates_fire_on_multiples_of_their_period_since_the_epoch() {
    assert_eq!(
        fire_times("rate(5 minutes)", "UTC", "2025-01-01T10:07:30Z", 2),
        ["2025-01-01T10:10:00Z", "2025-01-01T10:15:00Z"]
    );
    assert_eq!(fire_times("rate(5 minutes)", "UTC", "2025-01-01T10:10:00Z", 1), ["2025-01-01T10:15:00Z"]);
    assert_eq!(fire_times("rate(1 hour)", "UTC", "2025-01-01T10:00:00.5Z", 1), ["2025-01-01T11:00:00Z"]);
    // 1735689600 (2025-01-01T00:00:00Z) = 420 × 4132594 + 120.
    assert_eq!(
        fire_times("rate(7 minutes)", "UTC", "2025-01-01T00:00:00Z", 2),
        ["2025-01-01T00:05:00Z", "2025-01-01T00:12:00Z"]
    );
    // The epoch was a Thursday.
    assert_eq!(fire_times("rate(7 days)", "UTC", "2025-01-01T00:00:00Z", 1), ["2025-01-02T00:00:00Z"]);
    assert_eq!(fire_times("rate(5 minutes)", "UTC", "1969-12-31T23:58:00Z", 1), ["1970-01-01T00:00:00Z"]);
}

#[test]
fn rates_ignore_the_time_zone() {
    for timezone in ["UTC", "America/New_York", "Asia/Kolkata"] {
        assert_eq!(
            fire_times("rate(1 day)", timezone, "2025-03-09T12:00:00Z", 2),
            ["2025-03-10T00:00:00Z", "2025-03-11T00:00:00Z"],
            "{timezone}"
        );
    }
}

#[test]
fn upcoming_is_capped_and_each_time_follows_the_last() {
    let every_minute = schedule("* * * * *", "UTC");
    let after = at("2025-01-01T00:00:00Z");
    assert_eq!(every_minute.upcoming(after, usize::MAX).len(), schedule::MAX_UPCOMING);
    assert!(every_minute.upcoming(after, 0).is_empty());
    let times = every_minute.upcoming(after, 5);
    for pair in times.windows(2) {
        assert_eq!(every_minute.next_after(pair[0]), Some(pair[1]));
    }
}

#[test]
fn the_ends_of_time_give_none_rather_than_a_panic() {
    for expression in ["* * * * *", "0 0 29 2 *", "rate(1 day)", "cron(0 0 L * ? *)"] {
        let schedule = schedule(expression, "Pacific/Kiritimati");
        assert_eq!(schedule.next_after(DateTime::<Utc>::MAX_UTC), None);
        // At the very first instant the local time may be out of range; it must not panic.
        let _ = schedule.next_after(DateTime::<Utc>::MIN_UTC);
        // The time zone database answers for years -9999..=9999: a cron has fire times inside
        // them and none outside (a rate needs no time zone).
        let early = at("-9999-01-03T00:00:00Z");
        let late = at("9999-12-29T00:00:00Z");
        assert!(schedule.next_after(early).is_some_and(|next| next > early), "{expression}");
        if expression != "0 0 29 2 *" {
            assert!(schedule.next_after(late).is_some_and(|next| next > late), "{expression}");
        }
        let before_the_database = DateTime::<Utc>::MIN_UTC + TimeDelta::days(366);
        let is_rate = expression.starts_with("rate");
        assert_eq!(schedule.next_after(before_the_database).is_some(), is_rate, "{expression}");
    }
}
