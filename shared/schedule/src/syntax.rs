//! The text of an expression: 5-field cron, `@` macros, AWS `cron(...)` and `rate(...)`.

use crate::Pattern;
use crate::cron::{Bits, Cron, DayOfMonth, DayOfWeek, FIRST_YEAR, LAST_YEAR, Years};
use crate::error::ScheduleError;
use crate::rate::Rate;

/// One field of a cron expression: its name (for messages), its values and its value names.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    /// Names for `min`, `min + 1`, … (case-insensitive).
    names: &'static [&'static str],
}

const MONTH_NAMES: &[&str] = &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAY_NAMES: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const MINUTE: Field = Field { name: "minute", min: 0, max: 59, names: &[] };
const HOUR: Field = Field { name: "hour", min: 0, max: 23, names: &[] };
const DAY_OF_MONTH: Field = Field { name: "day-of-month", min: 1, max: 31, names: &[] };
const MONTH: Field = Field { name: "month", min: 1, max: 12, names: MONTH_NAMES };
/// Standard cron: 0-7, where 0 and 7 are Sunday.
const DAY_OF_WEEK: Field = Field { name: "day-of-week", min: 0, max: 7, names: DAY_NAMES };
/// AWS: 1-7, where 1 is Sunday.
const AWS_DAY_OF_WEEK: Field = Field { name: "day-of-week", min: 1, max: 7, names: DAY_NAMES };
const YEAR: Field = Field { name: "year", min: FIRST_YEAR as u32, max: LAST_YEAR as u32, names: &[] };

/// Parses any supported form of expression.
pub(crate) fn parse_expression(expression: &str) -> Result<Pattern, ScheduleError> {
    if expression.len() > crate::MAX_EXPRESSION_LEN {
        return Err(ScheduleError::invalid(format!("longer than {} bytes", crate::MAX_EXPRESSION_LEN)));
    }
    if !expression.is_ascii() {
        return Err(ScheduleError::invalid("only ASCII characters are allowed"));
    }
    let expression = expression.trim();
    if expression.is_empty() {
        return Err(ScheduleError::invalid("empty expression"));
    }
    if let Some(inner) = call(expression, "cron") {
        return parse_aws_cron(inner?).map(Pattern::Cron);
    }
    if let Some(inner) = call(expression, "rate") {
        return Rate::parse(inner?).map(Pattern::Rate);
    }
    if let Some(name) = expression.strip_prefix('@') {
        return parse_five_fields(macro_fields(name)?).map(Pattern::Cron);
    }
    parse_five_fields(expression).map(Pattern::Cron)
}

/// The inside of `name(...)` (name case-insensitive) if `expression` starts with `name(`.
fn call<'a>(expression: &'a str, name: &str) -> Option<Result<&'a str, ScheduleError>> {
    let head = expression.get(..name.len())?;
    if !head.eq_ignore_ascii_case(name) {
        return None;
    }
    let arguments = expression.get(name.len()..)?.strip_prefix('(')?;
    Some(
        arguments
            .strip_suffix(')')
            .ok_or_else(|| ScheduleError::invalid(format!("{name}(...) must end with a closing parenthesis"))),
    )
}

/// The 5-field form of a Vixie cron macro.
fn macro_fields(name: &str) -> Result<&'static str, ScheduleError> {
    const MACROS: &[(&str, &str)] = &[
        ("yearly", "0 0 1 1 *"),
        ("annually", "0 0 1 1 *"),
        ("monthly", "0 0 1 * *"),
        ("weekly", "0 0 * * 0"),
        ("daily", "0 0 * * *"),
        ("midnight", "0 0 * * *"),
        ("hourly", "0 * * * *"),
    ];
    MACROS.iter().find(|(macro_name, _)| macro_name.eq_ignore_ascii_case(name)).map(|(_, fields)| *fields).ok_or_else(
        || {
            ScheduleError::invalid(format!(
                "unknown macro @{name}: expected @yearly, @annually, @monthly, @weekly, @daily, \
                 @midnight or @hourly"
            ))
        },
    )
}

/// `minute hour day-of-month month day-of-week`, Vixie cron semantics.
fn parse_five_fields(expression: &str) -> Result<Cron, ScheduleError> {
    let fields: Vec<&str> = expression.split_ascii_whitespace().collect();
    let &[minute, hour, day_of_month, month, day_of_week] = fields.as_slice() else {
        let hint = if fields.len() == 6 {
            " (the AWS form with a year field is written cron(minutes hours day-of-month month \
             day-of-week year))"
        } else {
            ""
        };
        return Err(ScheduleError::invalid(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week), found {}{hint}",
            fields.len()
        )));
    };
    let day_of_month = match day_of_month {
        "*" => None,
        text => Some(DayOfMonth::Days(parse_list(&DAY_OF_MONTH, text)?)),
    };
    let day_of_week = match day_of_week {
        "*" => None,
        text => {
            let values = parse_list(&DAY_OF_WEEK, text)?;
            // 7 is Sunday too.
            let sundays = if values & (1 << 7) != 0 { 1 } else { 0 };
            Some(DayOfWeek::Weekdays((values | sundays) & 0x7f))
        }
    };
    Ok(Cron {
        minutes: parse_list(&MINUTE, minute)?,
        hours: parse_list(&HOUR, hour)?,
        day_of_month,
        day_of_week,
        months: parse_list(&MONTH, month)?,
        years: None,
    })
}

/// The inside of AWS `cron(minutes hours day-of-month month day-of-week year)`.
fn parse_aws_cron(inner: &str) -> Result<Cron, ScheduleError> {
    let fields: Vec<&str> = inner.split_ascii_whitespace().collect();
    let &[minute, hour, day_of_month, month, day_of_week, year] = fields.as_slice() else {
        return Err(ScheduleError::invalid(format!(
            "cron(...) takes 6 fields (minutes hours day-of-month month day-of-week year), \
             found {}",
            fields.len()
        )));
    };
    match (day_of_month == "?", day_of_week == "?") {
        (true, false) | (false, true) => {}
        (true, true) => {
            return Err(ScheduleError::invalid("cron(...): only one of day-of-month and day-of-week can be ?"));
        }
        (false, false) => {
            return Err(ScheduleError::invalid("cron(...): one of day-of-month and day-of-week must be ?"));
        }
    }
    let years = match year {
        "*" => None,
        text => {
            let mut years = Years::new();
            for value in expand_list(&YEAR, text)? {
                years.insert(value as i32);
            }
            Some(years)
        }
    };
    Ok(Cron {
        minutes: parse_list(&MINUTE, minute)?,
        hours: parse_list(&HOUR, hour)?,
        day_of_month: parse_aws_day_of_month(day_of_month)?,
        day_of_week: parse_aws_day_of_week(day_of_week)?,
        months: parse_list(&MONTH, month)?,
        years,
    })
}

/// AWS day-of-month: `?`, `*`, a list, `L`, `LW` or `<day>W`.
fn parse_aws_day_of_month(text: &str) -> Result<Option<DayOfMonth>, ScheduleError> {
    let upper = text.to_ascii_uppercase();
    if (upper.contains('L') || upper.contains('W')) && upper.contains([',', '-', '/']) {
        return Err(field_error(&DAY_OF_MONTH, text, "L and W stand alone (L, LW or a single day such as 15W)"));
    }
    Ok(match upper.as_str() {
        "?" | "*" => None,
        "L" => Some(DayOfMonth::Last),
        "LW" => Some(DayOfMonth::LastWeekday),
        _ => match upper.strip_suffix('W') {
            Some(day) => Some(DayOfMonth::NearestWeekday(parse_value(&DAY_OF_MONTH, day)?)),
            None => Some(DayOfMonth::Days(parse_list(&DAY_OF_MONTH, text)?)),
        },
    })
}

/// AWS day-of-week (1 = Sunday): `?`, `*`, a list, `L` (Saturday), `<weekday>L` or
/// `<weekday>#<n>`.
fn parse_aws_day_of_week(text: &str) -> Result<Option<DayOfWeek>, ScheduleError> {
    let upper = text.to_ascii_uppercase();
    if (upper.contains('#') || upper.ends_with('L')) && upper.contains([',', '-', '/']) {
        return Err(field_error(&AWS_DAY_OF_WEEK, text, "# and L stand alone (such as 3#2 or 6L)"));
    }
    // AWS counts 1 = Sunday; inside, weekdays count from 0 = Sunday.
    let weekday = |value: &str| parse_value(&AWS_DAY_OF_WEEK, value).map(|day| day - 1);
    Ok(match upper.as_str() {
        "?" | "*" => None,
        // The last day of the week.
        "L" => Some(DayOfWeek::Weekdays(1 << 6)),
        _ => {
            if let Some((day, nth)) = upper.split_once('#') {
                let nth = parse_number(nth)
                    .filter(|nth| (1..=5).contains(nth))
                    .ok_or_else(|| field_error(&AWS_DAY_OF_WEEK, text, "the n in day#n is 1 to 5"))?;
                Some(DayOfWeek::Nth(weekday(day)?, nth))
            } else if let Some(day) = upper.strip_suffix('L') {
                Some(DayOfWeek::Last(weekday(day)?))
            } else {
                Some(DayOfWeek::Weekdays(parse_list(&AWS_DAY_OF_WEEK, text)? >> 1))
            }
        }
    })
}

/// A list field (`*`, `a`, `a-b`, `*/n`, `a-b/n`, `a/n`, comma-separated) as bits by value.
fn parse_list(field: &Field, text: &str) -> Result<Bits, ScheduleError> {
    Ok(expand_list(field, text)?.into_iter().fold(0, |bits, value| bits | (1 << value)))
}

/// Every value a list field selects, in `field.min..=field.max`.
fn expand_list(field: &Field, text: &str) -> Result<Vec<u32>, ScheduleError> {
    let mut values = Vec::new();
    for item in text.split(',') {
        if item.is_empty() {
            return Err(field_error(field, text, "empty list item"));
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let span = field.max - field.min + 1;
                let step = parse_number(step)
                    .filter(|step| (1..=span).contains(step))
                    .ok_or_else(|| field_error(field, text, &format!("a step is a number from 1 to {span}")))?;
                (range, step)
            }
            None => (item, 1),
        };
        let (start, end) = if range == "*" {
            (field.min, field.max)
        } else if let Some((start, end)) = range.split_once('-') {
            let (start, end) = (parse_value(field, start)?, parse_value(field, end)?);
            if start > end {
                return Err(field_error(field, text, &format!("range {range} runs backwards")));
            }
            (start, end)
        } else {
            let start = parse_value(field, range)?;
            // `a/n` runs from a to the field's end.
            let end = if item.contains('/') { field.max } else { start };
            (start, end)
        };
        values.extend((start..=end).step_by(step as usize));
    }
    Ok(values)
}

/// One value: a number in range, or a name (case-insensitive).
fn parse_value(field: &Field, text: &str) -> Result<u32, ScheduleError> {
    if let Some(value) = parse_number(text) {
        return if (field.min..=field.max).contains(&value) {
            Ok(value)
        } else {
            Err(field_error(field, text, &format!("{value} is out of range {}-{}", field.min, field.max)))
        };
    }
    if let Some(index) = field.names.iter().position(|name| name.eq_ignore_ascii_case(text)) {
        return Ok(field.min + index as u32);
    }
    let expected = match (field.names.first(), field.names.last()) {
        (Some(first), Some(last)) => format!("a number from {} to {} or a name ({first}-{last})", field.min, field.max),
        _ => format!("a number from {} to {}", field.min, field.max),
    };
    Err(field_error(field, text, &format!("{text:?} is not {expected}")))
}

/// Decimal digits only, at most 4 of them (no field goes past 2199).
fn parse_number(text: &str) -> Option<u32> {
    if text.is_empty() || text.len() > 4 || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn field_error(field: &Field, text: &str, problem: &str) -> ScheduleError {
    ScheduleError::invalid(format!("{} field {text:?}: {problem}", field.name))
}
