//! The daylight saving policy (DESIGN.md): a local time that does not exist (spring forward)
//! fires at the next valid instant, the end of the gap; one that occurs twice (fall back) fires
//! once, at its first occurrence. Schedules are wall-clock schedules, so a pattern that matches
//! minutes in the repeated hour fires in its first pass only.
//!
//! 2025 transitions used here:
//! - America/New_York: 2025-03-09 02:00 EST → 03:00 EDT (07:00Z); 2025-11-02 02:00 EDT → 01:00 EST
//!   (06:00Z), so 01:00-01:59 happens at 05:00Z-05:59Z and again at 06:00Z-06:59Z.
//! - Europe/Berlin: 2025-03-30 02:00 CET → 03:00 CEST (01:00Z); 2025-10-26 03:00 CEST → 02:00 CET
//!   (01:00Z), so 02:00-02:59 happens at 00:00Z-00:59Z and again at 01:00Z-01:59Z.
//! - Australia/Lord_Howe (half-hour shift, +10:30 / +11): 2025-10-05 02:00 → 02:30 (Oct 4
//!   15:30Z); 2025-04-06 02:00 → 01:30 (Apr 5 15:00Z), so 01:30-01:59 happens at 14:30Z-14:59Z
//!   and again at 15:00Z-15:29Z.

mod support;

use support::fire_times;

#[test]
fn new_york_daily_time_in_the_spring_gap_fires_when_the_gap_ends() {
    assert_eq!(
        fire_times("30 2 * * *", "America/New_York", "2025-03-08T00:00:00Z", 3),
        [
            "2025-03-08T07:30:00Z", // 02:30 EST
            "2025-03-09T07:00:00Z", // 02:30 does not exist: 03:00 EDT
            "2025-03-10T06:30:00Z", // 02:30 EDT
        ]
    );
}

#[test]
fn new_york_daily_time_in_the_repeated_hour_fires_once_at_its_first_occurrence() {
    assert_eq!(
        fire_times("30 1 * * *", "America/New_York", "2025-11-01T00:00:00Z", 3),
        [
            "2025-11-01T05:30:00Z", // 01:30 EDT
            "2025-11-02T05:30:00Z", // 01:30 EDT, not again at 01:30 EST (06:30Z)
            "2025-11-03T06:30:00Z", // 01:30 EST
        ]
    );
}

#[test]
fn new_york_every_fifteen_minutes_across_the_spring_gap() {
    // 02:00, 02:15, 02:30 and 02:45 do not exist: with 03:00 they fire once, at 03:00 EDT.
    assert_eq!(
        fire_times("*/15 * * * *", "America/New_York", "2025-03-09T06:40:00Z", 4),
        [
            "2025-03-09T06:45:00Z", // 01:45 EST
            "2025-03-09T07:00:00Z", // 03:00 EDT
            "2025-03-09T07:15:00Z", // 03:15 EDT
            "2025-03-09T07:30:00Z",
        ]
    );
}

#[test]
fn new_york_every_fifteen_minutes_across_the_repeated_hour() {
    // The second pass of 01:00-01:59 (06:00Z-06:59Z, EST) fires nothing.
    assert_eq!(
        fire_times("*/15 * * * *", "America/New_York", "2025-11-02T05:40:00Z", 3),
        [
            "2025-11-02T05:45:00Z", // 01:45 EDT
            "2025-11-02T07:00:00Z", // 02:00 EST
            "2025-11-02T07:15:00Z",
        ]
    );
    // Asked from inside the second pass (01:20 EST), the next one is still 02:00 EST.
    assert_eq!(fire_times("*/15 * * * *", "America/New_York", "2025-11-02T06:20:00Z", 1), ["2025-11-02T07:00:00Z"]);
}

#[test]
fn new_york_hourly_across_both_changes() {
    assert_eq!(
        fire_times("0 * * * *", "America/New_York", "2025-03-09T06:30:00Z", 2),
        ["2025-03-09T07:00:00Z", "2025-03-09T08:00:00Z"]
    );
    assert_eq!(
        fire_times("0 * * * *", "America/New_York", "2025-11-02T04:30:00Z", 2),
        ["2025-11-02T05:00:00Z", "2025-11-02T07:00:00Z"]
    );
}

#[test]
fn berlin_daily_time_in_the_spring_gap_fires_when_the_gap_ends() {
    assert_eq!(
        fire_times("30 2 * * *", "Europe/Berlin", "2025-03-29T00:00:00Z", 3),
        [
            "2025-03-29T01:30:00Z", // 02:30 CET
            "2025-03-30T01:00:00Z", // 02:30 does not exist: 03:00 CEST
            "2025-03-31T00:30:00Z", // 02:30 CEST
        ]
    );
}

#[test]
fn berlin_daily_time_in_the_repeated_hour_fires_once_at_its_first_occurrence() {
    assert_eq!(
        fire_times("cron(30 2 * * ? *)", "Europe/Berlin", "2025-10-25T00:00:00Z", 3),
        [
            "2025-10-25T00:30:00Z", // 02:30 CEST
            "2025-10-26T00:30:00Z", // 02:30 CEST, not again at 02:30 CET (01:30Z)
            "2025-10-27T01:30:00Z", // 02:30 CET
        ]
    );
}

#[test]
fn berlin_every_fifteen_minutes_across_both_changes() {
    assert_eq!(
        fire_times("*/15 * * * *", "Europe/Berlin", "2025-03-30T00:50:00Z", 2),
        ["2025-03-30T01:00:00Z", "2025-03-30T01:15:00Z"]
    );
    assert_eq!(
        fire_times("*/15 * * * *", "Europe/Berlin", "2025-10-26T00:40:00Z", 3),
        [
            "2025-10-26T00:45:00Z", // 02:45 CEST
            "2025-10-26T02:00:00Z", // 03:00 CET: 02:00-02:45 CET are second passes
            "2025-10-26T02:15:00Z",
        ]
    );
}

#[test]
fn lord_howe_half_hour_gap_and_overlap() {
    assert_eq!(
        fire_times("15 2 * * *", "Australia/Lord_Howe", "2025-10-03T00:00:00Z", 3),
        [
            "2025-10-03T15:45:00Z", // Oct 4 02:15 +10:30
            "2025-10-04T15:30:00Z", // Oct 5 02:15 does not exist: 02:30 +11
            "2025-10-05T15:15:00Z", // Oct 6 02:15 +11
        ]
    );
    assert_eq!(
        fire_times("45 1 * * *", "Australia/Lord_Howe", "2025-04-04T00:00:00Z", 3),
        [
            "2025-04-04T14:45:00Z", // Apr 5 01:45 +11
            "2025-04-05T14:45:00Z", // Apr 6 01:45 +11, not again at +10:30 (15:15Z)
            "2025-04-06T15:15:00Z", // Apr 7 01:45 +10:30
        ]
    );
    assert_eq!(
        fire_times("*/15 * * * *", "Australia/Lord_Howe", "2025-04-05T14:40:00Z", 2),
        ["2025-04-05T14:45:00Z", "2025-04-05T15:30:00Z"]
    );
}

#[test]
fn rates_do_not_see_daylight_saving() {
    assert_eq!(
        fire_times("rate(1 hour)", "America/New_York", "2025-11-02T05:30:00Z", 3),
        ["2025-11-02T06:00:00Z", "2025-11-02T07:00:00Z", "2025-11-02T08:00:00Z"]
    );
}
