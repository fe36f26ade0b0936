//! The committed OpenAPI documents (`openapi/`), as the tests hold the handlers to them: every
//! streamed run event any test reads is checked against its operation's event schemas (the
//! `x-itemSchema` extension, docs/openapi.md), since no fuzzer reads streams.
//!
//! The checker knows the JSON Schema keywords the documents' event schemas use and panics on any
//! other, so a schema it cannot read never passes silently.

use serde_json::{Map, Value};
use stack::Route;
use std::sync::OnceLock;

/// The three documents, parsed once.
pub fn documents() -> &'static [(&'static str, Value)] {
    static DOCUMENTS: OnceLock<Vec<(&'static str, Value)>> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        [("meeting-data-api", api_docs::MEETING_DATA_API), ("backend", api_docs::BACKEND), ("runner", api_docs::RUNNER)]
            .into_iter()
            .map(|(name, text)| {
                (name, serde_json::from_str(text).unwrap_or_else(|err| panic!("openapi/{name}.json: {err}")))
            })
            .collect()
    })
}

/// The operation of any document whose path template matches `path` for `method`, matched as
/// the REST API matches template routes (`stack::template::Route`; at each level a literal
/// segment before a variable): its document and its operation object.
pub fn operation(method: &str, path: &str) -> Option<(&'static Value, &'static Value)> {
    let method = method.to_ascii_lowercase();
    let mut best: Option<(Vec<bool>, &Value, &Value)> = None;
    for (_, document) in documents() {
        for (template, item) in document["paths"].as_object().into_iter().flatten() {
            let route = Route { api: String::new(), method: method.clone(), path: template.clone(), streamed: false };
            let Some(operation) = item.get(&method) else { continue };
            if route.matches(&method, path) && best.as_ref().is_none_or(|(most, _, _)| route.specificity() > *most) {
                best = Some((route.specificity(), document, operation));
            }
        }
    }
    best.map(|(_, document, operation)| (document, operation))
}

/// Checks every event of the streamed body `text` (answered `status` to `method path`) against
/// its operation's `x-itemSchema`; panics naming the event and the schema's complaint. Returns
/// how many events it checked.
pub fn check_event_stream(method: &str, path: &str, status: u16, text: &str) -> usize {
    let (document, operation) =
        operation(method, path).unwrap_or_else(|| panic!("{method} {path} streams but no document describes it"));
    let item_schema = &operation["responses"][status.to_string()]["content"]["text/event-stream"]["x-itemSchema"];
    assert!(item_schema.is_object(), "{method} {path}: its {status} answer streams but has no x-itemSchema");
    let events = parse_events(text);
    for event in &events {
        if let Err(problem) = validate(document, item_schema, event, "") {
            panic!("{method} {path}: streamed event {event} does not match the document: {problem}");
        }
    }
    events.len()
}

/// The events of a Server-Sent Events body as `{event, id, data}` objects (`data` parsed as
/// JSON; comments skipped; fields absent from a frame left out).
pub fn parse_events(text: &str) -> Vec<Value> {
    let text = text.replace("\r\n", "\n");
    let mut events = Vec::new();
    for frame in text.split("\n\n") {
        let mut event = Map::new();
        let mut data: Vec<&str> = Vec::new();
        for line in frame.lines() {
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "" => {}
                "data" => data.push(value),
                "event" | "id" => {
                    event.insert(field.to_owned(), Value::String(value.to_owned()));
                }
                other => panic!("an unknown SSE field {other:?} in {frame:?}"),
            }
        }
        if data.is_empty() && event.is_empty() {
            continue;
        }
        let data = data.join("\n");
        let parsed = serde_json::from_str(&data).unwrap_or_else(|_| panic!("an event's data is not JSON: {frame:?}"));
        event.insert("data".to_owned(), parsed);
        events.push(Value::Object(event));
    }
    events
}

/// Keywords that only annotate.
const ANNOTATIONS: &[&str] =
    &["description", "title", "format", "default", "examples", "deprecated", "readOnly", "writeOnly"];

/// Validates `value` against `schema` (resolving `#/...` references in `document`); the first
/// problem, with its JSON pointer.
pub fn validate(document: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        return match schema {
            Value::Bool(true) => Ok(()),
            _ => Err(format!("{at}: the schema {schema} is not an object")),
        };
    };
    let fail = |what: String| Err(format!("{}: {what}", if at.is_empty() { "/" } else { at }));
    for (keyword, rule) in schema {
        match keyword.as_str() {
            "$ref" => {
                let pointer = rule.as_str().and_then(|reference| reference.strip_prefix('#')).unwrap_or_default();
                let target = document.pointer(pointer).unwrap_or_else(|| panic!("an unresolved $ref {rule}"));
                validate(document, target, value, at)?;
            }
            "type" => {
                let types: Vec<&str> = match rule {
                    Value::Array(types) => types.iter().filter_map(Value::as_str).collect(),
                    other => other.as_str().into_iter().collect(),
                };
                if !types.iter().any(|kind| is_of_type(value, kind)) {
                    return fail(format!("{value} is not of type {rule}"));
                }
            }
            "enum" => {
                if !rule.as_array().is_some_and(|allowed| allowed.contains(value)) {
                    return fail(format!("{value} is not one of {rule}"));
                }
            }
            "const" => {
                if rule != value {
                    return fail(format!("{value} is not {rule}"));
                }
            }
            "properties" | "required" | "additionalProperties" => {
                let Some(object) = value.as_object() else { continue };
                let properties = schema.get("properties").and_then(Value::as_object);
                match keyword.as_str() {
                    "properties" => {
                        for (name, property) in properties.into_iter().flatten() {
                            if let Some(field) = object.get(name) {
                                validate(document, property, field, &format!("{at}/{name}"))?;
                            }
                        }
                    }
                    "required" => {
                        for name in rule.as_array().into_iter().flatten().filter_map(Value::as_str) {
                            if !object.contains_key(name) {
                                return fail(format!("required {name:?} is missing"));
                            }
                        }
                    }
                    _ => {
                        for (name, field) in object {
                            if properties.is_some_and(|properties| properties.contains_key(name)) {
                                continue;
                            }
                            if rule == &Value::Bool(false) {
                                return fail(format!("{name:?} is not a documented property"));
                            }
                            validate(document, rule, field, &format!("{at}/{name}"))?;
                        }
                    }
                }
            }
            "items" => {
                for (index, item) in value.as_array().into_iter().flatten().enumerate() {
                    validate(document, rule, item, &format!("{at}/{index}"))?;
                }
            }
            "oneOf" | "anyOf" | "allOf" => {
                let branches = rule.as_array().map(Vec::as_slice).unwrap_or_default();
                let passed = branches.iter().filter(|branch| validate(document, branch, value, at).is_ok()).count();
                let fine = match keyword.as_str() {
                    "oneOf" => passed == 1,
                    "anyOf" => passed >= 1,
                    _ => passed == branches.len(),
                };
                if !fine {
                    let problems: Vec<String> =
                        branches.iter().filter_map(|branch| validate(document, branch, value, at).err()).collect();
                    return fail(format!("{passed} of {keyword}'s {} branches match: {problems:?}", branches.len()));
                }
            }
            "minimum" | "maximum" | "exclusiveMinimum" => {
                let (Some(number), Some(bound)) = (value.as_f64(), rule.as_f64()) else { continue };
                let within = match keyword.as_str() {
                    "minimum" => number >= bound,
                    "maximum" => number <= bound,
                    _ => number > bound,
                };
                if !within {
                    return fail(format!("{number} breaks {keyword} {bound}"));
                }
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" => {
                let length = match keyword.as_str() {
                    "minLength" | "maxLength" => value.as_str().map(|text| text.chars().count()),
                    _ => value.as_array().map(Vec::len),
                };
                let (Some(length), Some(bound)) = (length, rule.as_u64()) else { continue };
                let bound = usize::try_from(bound).unwrap_or(usize::MAX);
                if (keyword.starts_with("min") && length < bound) || (keyword.starts_with("max") && length > bound) {
                    return fail(format!("length {length} breaks {keyword} {bound}"));
                }
            }
            "pattern" => {
                let (Some(text), Some(pattern)) = (value.as_str(), rule.as_str()) else { continue };
                let regex = regex_lite::Regex::new(pattern).unwrap_or_else(|err| panic!("pattern {pattern:?}: {err}"));
                if !regex.is_match(text) {
                    return fail(format!("{text:?} does not match {pattern:?}"));
                }
            }
            annotation if ANNOTATIONS.contains(&annotation) || annotation.starts_with("x-") => {}
            other => panic!("the event schema checker does not know the keyword {other:?} (at {at})"),
        }
    }
    Ok(())
}

fn is_of_type(value: &Value, kind: &str) -> bool {
    match kind {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.as_i64().is_some() || value.as_u64().is_some(),
        other => panic!("an unknown JSON Schema type {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_checker_finds_each_kind_of_mismatch() {
        let document = json!({"components": {"schemas": {"Delta": {
            "type": "object", "required": ["delta"], "additionalProperties": false,
            "properties": {"delta": {"type": "string", "minLength": 1}, "n": {"type": ["integer", "null"], "minimum": 0}}
        }}}});
        let schema = json!({"$ref": "#/components/schemas/Delta"});
        let check = |value: Value| validate(&document, &schema, &value, "");
        assert_eq!(check(json!({"delta": "a", "n": null})), Ok(()));
        assert!(check(json!({})).unwrap_err().contains("required \"delta\""));
        assert!(check(json!({"delta": "a", "extra": 1})).unwrap_err().contains("not a documented property"));
        assert!(check(json!({"delta": 1})).unwrap_err().contains("not of type"));
        assert!(check(json!({"delta": ""})).unwrap_err().contains("minLength"));
        assert!(check(json!({"delta": "a", "n": -1})).unwrap_err().contains("minimum"));
        assert!(check(json!({"delta": "a", "n": 1.5})).unwrap_err().contains("not of type"));
        let one_of = json!({"oneOf": [{"const": "a"}, {"enum": ["a", "b"]}]});
        assert!(validate(&document, &one_of, &json!("b"), "").is_ok());
        assert!(validate(&document, &one_of, &json!("a"), "").is_err(), "two branches match");
    }

    #[test]
    fn frames_become_events_and_comments_are_skipped() {
        let events = parse_events(
            ": ping\n\nid: 1\nevent: message\ndata: {\"delta\":\"a\"}\n\nid: 2\nevent: done\ndata: {\"x\":\ndata: 1}\n",
        );
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[1]["data"], json!({"x": 1}), "data lines join with a newline");
        assert_eq!(events[0], json!({"id": "1", "event": "message", "data": {"delta": "a"}}));
    }

    #[test]
    #[should_panic(expected = "does not know the keyword")]
    fn an_unknown_keyword_is_never_passed() {
        let _ = validate(&json!({}), &json!({"contains": {"const": 1}}), &json!([1]), "");
    }

    #[test]
    fn a_pattern_is_a_regular_expression_a_string_must_match() {
        let rule = json!({"pattern": "^[0-9a-f]{32}$"});
        assert!(validate(&json!({}), &rule, &json!("4bf92f3577b34da6a3ce929d0e0e4736"), "").is_ok());
        assert!(validate(&json!({}), &rule, &json!("4BF92F3577B34DA6A3CE929D0E0E4736"), "").is_err());
        assert!(validate(&json!({}), &rule, &json!(null), "").is_ok(), "a pattern checks strings only");
    }
}
