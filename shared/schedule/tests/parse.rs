//! Which expressions and time zones parse, and which error each refusal is.

mod support;

use schedule::{MAX_EXPRESSION_LEN, Schedule, ScheduleError};

fn is_invalid_expression(expression: &str) -> bool {
    matches!(Schedule::parse(expression, "UTC"), Err(ScheduleError::InvalidExpression(_)))
}

#[test]
fn every_supported_form_parses() {
    for expression in [
        "* * * * *",
        "*/15 * * * *",
        "5,35 8-18/2 * * *",
        "10/20 * * * *",
        "0 9 * * MON-FRI",
        "0 9 * * mon-fri",
        "0 0 1 jan,Jul *",
        "0 0 1-7 * 1-5/2",
        "0 0 * * 0,7",
        "  0 0 * * *  ",
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
        "@Daily",
        "cron(0 10 * * ? *)",
        "cron(0/15 * * * ? *)",
        "cron(0 18 ? * MON-FRI *)",
        "cron(0 8 1 * ? *)",
        "cron(0 0 L * ? *)",
        "cron(0 0 LW * ? *)",
        "cron(0 0 15W * ? *)",
        "cron(0 0 ? * 6L *)",
        "cron(0 0 ? * FRIL *)",
        "cron(0 0 ? * L *)",
        "cron(0 0 ? * 3#2 *)",
        "cron(0 0 ? * TUE#2 *)",
        "cron(0 0 ? * 1/2 *)",
        "cron(0 0 1 JAN ? 2030-2040/5)",
        "cron(0 0 ? * 1-7 1970,2199)",
        "rate(1 minute)",
        "rate(5 minutes)",
        "rate(1 hour)",
        "rate(12 hours)",
        "rate(1 day)",
        "rate(365 days)",
    ] {
        assert!(Schedule::parse(expression, "UTC").is_ok(), "{expression} must parse");
    }
}

#[test]
fn malformed_expressions_are_invalid_expressions() {
    for expression in [
        "",
        "   ",
        "* * * *",
        "* * * * * *",
        "60 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * 32 * *",
        "* * * 13 *",
        "* * * * 8",
        "0 0 * * FUN",
        "0 0 * JANUARY *",
        "*/0 * * * *",
        "*/61 * * * *",
        "5-1 * * * *",
        "1,,2 * * * *",
        "1- * * * *",
        "-1 * * * *",
        "1/2/3 * * * *",
        "a * * * *",
        "0 0 L * *",
        "0 0 ? * *",
        "0 0 * * 5L",
        "0 0 * * 3#2",
        "@reboot",
        "@",
        "cron(0 10 * * * *)",
        "cron(0 10 ? * ? *)",
        "cron(0 10 * * ?)",
        "cron(0 10 * * ? * *)",
        "cron(0 10 * * ? 1969)",
        "cron(0 10 * * ? 2200)",
        "cron(0 10 ? * 0 *)",
        "cron(0 10 ? * 8 *)",
        "cron(0 10 ? * 3#0 *)",
        "cron(0 10 ? * 3#6 *)",
        "cron(0 10 ? * 3#1,6#3 *)",
        "cron(0 10 ? * 2L,6L *)",
        "cron(0 10 L,15 * ? *)",
        "cron(0 10 1-5W * ? *)",
        "cron(0 10 W * ? *)",
        "cron(0 10 32W * ? *)",
        "cron(0 10 * * ? *",
        "cron()",
        "rate(1 minutes)",
        "rate(5 minute)",
        "rate(0 minutes)",
        "rate(-5 minutes)",
        "rate(5 weeks)",
        "rate(5)",
        "rate(5 minutes 2)",
        "rate(1.5 hours)",
        "rate(366 days)",
        "rate(9999999999 minutes)",
        "0 0 * * * \u{e9}",
    ] {
        assert!(
            is_invalid_expression(expression),
            "{expression:?} must be an invalid expression, got {:?}",
            Schedule::parse(expression, "UTC")
        );
    }
}

#[test]
fn an_expression_longer_than_the_cap_is_refused_before_parsing() {
    let long = format!("0 0 * * *{}", " ".repeat(MAX_EXPRESSION_LEN));
    assert!(is_invalid_expression(&long));
    let at_cap = format!("0 0 * * *{}", " ".repeat(MAX_EXPRESSION_LEN - 9));
    assert!(Schedule::parse(&at_cap, "UTC").is_ok());
}

#[test]
fn error_messages_name_the_field_and_the_problem() {
    let Err(error) = Schedule::parse("0 61 * * *", "UTC") else {
        panic!("hour 61 must be refused");
    };
    assert_eq!(error.to_string(), "invalid schedule expression: hour field \"61\": 61 is out of range 0-23");
    let Err(error) = Schedule::parse("0 0 * * * 2030", "UTC") else {
        panic!("6 fields must be refused");
    };
    assert!(error.to_string().contains("cron(minutes hours"), "{error}");
}

#[test]
fn unknown_time_zones_are_refused() {
    for timezone in ["", "Mars/Olympus_Mons", "europe/berlin", "UTC+2", "Europe/Berlin "] {
        assert_eq!(
            Schedule::parse("0 0 * * *", timezone),
            Err(ScheduleError::UnknownTimeZone(timezone.to_string())),
            "{timezone:?}"
        );
    }
    let Err(ScheduleError::UnknownTimeZone(echoed)) = Schedule::parse("0 0 * * *", &"x".repeat(500)) else {
        panic!("a 500-byte time zone must be refused");
    };
    assert_eq!(echoed.len(), 64, "the echoed name is cut short");
}

#[test]
fn rates_still_need_a_known_time_zone() {
    assert!(matches!(Schedule::parse("rate(5 minutes)", "Nowhere/Land"), Err(ScheduleError::UnknownTimeZone(_))));
}

#[test]
fn known_time_zones_parse() {
    for timezone in ["UTC", "Etc/UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata"] {
        assert_eq!(support::schedule("0 0 * * *", timezone).timezone().name(), timezone);
    }
}

#[test]
fn expressions_that_no_date_matches_never_fire() {
    for expression in [
        "0 0 30 2 *",
        "0 0 31 2,4,6,9,11 *",
        "0 0 30,31 feb *",
        "cron(0 0 30 2 ? *)",
        "cron(0 0 29 2 ? 2097-2099)",
        "cron(0 0 29 2 ? 2100)",
        "cron(0 0 31W 4 ? *)",
        "cron(0 0 ? 2 1#5 2005-2031)",
    ] {
        assert_eq!(Schedule::parse(expression, "UTC"), Err(ScheduleError::NeverFires), "{expression}");
    }
}

#[test]
fn rare_but_real_dates_are_not_never_firing() {
    for expression in [
        "0 0 29 2 *",
        "cron(0 0 29 2 ? 2096)",
        "cron(0 0 ? 2 1#5 *)",
        "cron(0 0 ? 2 1#5 2032)",
        "cron(0 0 31W 8 ? *)",
        // A time skipped by daylight saving still fires (at the end of the gap).
        "30 2 9 3 *",
    ] {
        assert!(Schedule::parse(expression, "America/New_York").is_ok(), "{expression}");
    }
}

#[test]
fn a_malformed_expression_is_reported_before_the_time_zone() {
    assert!(matches!(Schedule::parse("61 * * * *", "Nowhere/Land"), Err(ScheduleError::InvalidExpression(_))));
    assert!(matches!(Schedule::parse("0 0 30 2 *", "Nowhere/Land"), Err(ScheduleError::UnknownTimeZone(_))));
}
