//! Reporting what is wrong with a JSON body, field by field, with the spec's precedence: wrong JSON
//! types are a bad request (400), everything else a validation error (422).

use serde_json::Value;
use std::collections::BTreeMap;
use uuid::Uuid;

/// Which status a set of problems earns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// Malformed JSON or wrong types: 400.
    BadRequest,
    /// Missing required fields or constraint violations: 422.
    Validation,
}

/// Why a body was refused: the kind and, by field, the issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problems {
    pub kind: ProblemKind,
    pub fields: BTreeMap<String, String>,
}

impl Problems {
    pub fn single(kind: ProblemKind, field: &str, issue: &str) -> Self {
        Self { kind, fields: BTreeMap::from([(field.to_owned(), issue.to_owned())]) }
    }
}

/// A URL as written, before parsing: no space or control character anywhere. The URL parser
/// would quietly trim, drop or percent-encode them, so what is stored would not be what was
/// sent, and the OpenAPI documents could not say which strings are URLs (docs/openapi.md).
pub fn check_url_text(raw: &str) -> Result<(), &'static str> {
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain spaces or control characters");
    }
    Ok(())
}

/// An absolute http(s) URL with a host.
pub fn check_http_url(raw: &str) -> Result<(), &'static str> {
    check_url_text(raw)?;
    let url = url::Url::parse(raw).map_err(|_| "must be an absolute URL")?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must use http or https");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must have a host");
    }
    // Credentials in a URL would be logged and echoed in errors; headers carry them instead.
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials");
    }
    Ok(())
}

/// A base URL that paths are appended to: an absolute http(s) URL with a host and no query or
/// fragment (either would be silently dropped or mangled by the join).
pub fn check_base_url(raw: &str) -> Result<(), &'static str> {
    check_http_url(raw)?;
    let url = url::Url::parse(raw).map_err(|_| "must be an absolute URL")?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query string or fragment");
    }
    Ok(())
}

/// The path (under `field`: `metadata.a[2]`) of the first number in `value` that DynamoDB cannot
/// store as a number attribute: not 0 and below 1e-130 or at least 1e126 in magnitude. For JSON
/// kept as DynamoDB attributes, where such a number would fail the write (a 500) instead of a 422.
pub fn unstorable_number(value: &Value, field: &str) -> Option<String> {
    match value {
        Value::Number(number) => {
            let magnitude = number.as_f64()?.abs();
            (magnitude != 0.0 && !(1e-130..1e126).contains(&magnitude)).then(|| field.to_owned())
        }
        Value::Array(items) => {
            items.iter().enumerate().find_map(|(index, item)| unstorable_number(item, &format!("{field}[{index}]")))
        }
        Value::Object(map) => map.iter().find_map(|(key, item)| unstorable_number(item, &format!("{field}.{key}"))),
        _ => None,
    }
}

/// A JSON number that is a whole number, as a `u64`: `10` and `10.0` are the same JSON number
/// (RFC 8259; JSON Schema's `integer` takes both), so both are 10. `None` for a fraction, a
/// negative number, one past `u64`, or not a number.
pub fn whole_number(value: &Value) -> Option<u64> {
    if let Some(whole) = value.as_u64() {
        return Some(whole);
    }
    // Below 2^53 every whole f64 is exact, and no limit here comes near it.
    let number = value.as_f64()?;
    (number.fract() == 0.0 && (0.0..9_007_199_254_740_992.0).contains(&number)).then_some(number as u64)
}

/// Collects problems by field (the first issue of a field wins).
#[derive(Default)]
pub struct Checker {
    pub problems: BTreeMap<String, String>,
}

impl Checker {
    pub fn fail(&mut self, field: &str, issue: &str) {
        self.problems.entry(field.to_owned()).or_insert_with(|| issue.to_owned());
    }

    pub fn uuid(&mut self, field: &str, value: &str) -> Option<Uuid> {
        let parsed = Uuid::parse_str(value).ok();
        if parsed.is_none() {
            self.fail(field, "must be a UUID");
        }
        parsed
    }
}

/// The most bytes one field of a body may take (as JSON) unless its `Expected::Text` says
/// otherwise: with the functions' body limits, no record can reach DynamoDB's 400 KB item limit.
pub const MAX_FIELD_BYTES: usize = 64 * 1024;

#[derive(Clone, Copy)]
pub enum Expected {
    String,
    /// A string of at most this many bytes (long texts: instructions, scripts).
    Text(usize),
    StringArray,
    /// An array of numbers.
    NumberArray,
    Object,
    /// An object whose values are strings (HTTP headers).
    StringMap,
    Integer,
}

impl Expected {
    pub fn check(self, checker: &mut Checker, name: &str, value: &Value) {
        match (self, value) {
            (Expected::String | Expected::Text(_), Value::String(_)) | (Expected::Object, Value::Object(_)) => {}
            (Expected::StringArray, Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    if !item.is_string() {
                        checker.fail(&format!("{name}[{i}]"), "must be a string");
                    }
                }
            }
            (Expected::NumberArray, Value::Array(items)) if items.iter().all(Value::is_number) => {}
            (Expected::StringMap, Value::Object(entries)) => {
                for (key, item) in entries {
                    if !item.is_string() {
                        checker.fail(&format!("{name}.{key}"), "must be a string");
                    }
                }
            }
            (Expected::Integer, Value::Number(number)) if number.is_i64() || whole_number(value).is_some() => {}
            (Expected::String | Expected::Text(_), _) => checker.fail(name, "must be a string"),
            (Expected::StringMap, _) => checker.fail(name, "must be an object of strings"),
            (Expected::Integer, _) => checker.fail(name, "must be an integer"),
            (Expected::StringArray, _) => checker.fail(name, "must be an array of strings"),
            (Expected::NumberArray, _) => checker.fail(name, "must be an array of numbers"),
            (Expected::Object, _) => checker.fail(name, "must be an object"),
        }
    }
}

/// Checks a body's shape: each listed field that is present and not null must have its
/// expected JSON type (else a bad request), and no unlisted field may appear. Returns a checker
/// holding the unknown-field problems, for the caller's own rules.
pub fn check_shape(body: &serde_json::Map<String, Value>, fields: &[(&str, Expected)]) -> Result<Checker, Problems> {
    let mut types = Checker::default();
    for (name, expected) in fields {
        if let Some(value) = body.get(*name).filter(|v| !v.is_null()) {
            expected.check(&mut types, name, value);
        }
    }
    if !types.problems.is_empty() {
        return Err(Problems { kind: ProblemKind::BadRequest, fields: types.problems });
    }
    let mut rules = Checker::default();
    for name in body.keys().filter(|key| !fields.iter().any(|(known, _)| known == key)) {
        rules.fail(name, "unknown field");
    }
    for (name, expected) in fields {
        let limit = match expected {
            Expected::Text(limit) => *limit,
            _ => MAX_FIELD_BYTES,
        };
        if body.get(*name).is_some_and(|value| json_size(value) > limit) {
            rules.fail(name, &format!("must be at most {limit} bytes"));
        }
    }
    Ok(rules)
}

/// The bytes `value` takes as compact JSON (strings by their UTF-8 length, the stored size).
fn json_size(value: &Value) -> usize {
    match value {
        Value::String(text) => text.len(),
        other => {
            let mut counter = ByteCounter(0);
            let _ = serde_json::to_writer(&mut counter, other);
            counter.0
        }
    }
}

/// A writer that only counts.
struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{unstorable_number, whole_number};
    use serde_json::json;

    #[test]
    fn numbers_dynamodb_cannot_store_are_found_by_their_path() {
        let storable = json!({"a": [0, -0.0, 1e-130, -1e125, u64::MAX, i64::MIN, 2.5], "b": {"c": "1e-300"}});
        assert_eq!(unstorable_number(&storable, "metadata"), None);
        let tiny = json!({"owner": [0, null, 2.2250738585072014e-308]});
        assert_eq!(unstorable_number(&tiny, "metadata"), Some("metadata.owner[2]".to_owned()));
        assert_eq!(unstorable_number(&json!({"x": {"y": 1e126}}), "metadata"), Some("metadata.x.y".to_owned()));
        assert_eq!(unstorable_number(&json!(-1e300), "m"), Some("m".to_owned()));
    }

    #[test]
    fn a_url_is_taken_as_written_or_not_at_all() {
        assert_eq!(super::check_http_url("HTTP://a.test/p?q=*#f"), Ok(()));
        for unwritten in [" http://a.test", "http://a.test\t", "http://a.test/a b", "http://a.\u{0}test"] {
            assert_eq!(super::check_http_url(unwritten), Err("must not contain spaces or control characters"));
        }
    }

    #[test]
    fn a_whole_number_may_be_written_with_a_fraction_of_zero() {
        assert_eq!(whole_number(&json!(10)), Some(10));
        assert_eq!(whole_number(&json!(10.0)), Some(10));
        assert_eq!(whole_number(&json!(0.0)), Some(0));
        for not_whole in [json!(10.5), json!(-1), json!(-1.0), json!(1e300), json!("10"), json!(null)] {
            assert_eq!(whole_number(&not_whole), None, "{not_whole}");
        }
    }
}
