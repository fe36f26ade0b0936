//! Secret headers: header values that are write-only (kept in Secrets Manager, never in a record
//! or a response) and bound to the origin they are sent to (`secret_origin`). MCP configurations,
//! `http` tools and agents' `tool_configs` entries keep theirs this one way.
//!
//! A body says what happens to them in `secret_headers`: absent keeps the stored ones, `null`
//! removes them, an object replaces them. Records keep only their names (`secret_header_names`).

use crate::secret_origin::{self, SecretRefused};
use crate::validation::{Checker, Expected, ProblemKind, Problems};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Headers that carry credentials: in the `headers` of an `http` tool or a `tool_configs` entry
/// they are secret headers, as if sent in `secret_headers`.
pub const CREDENTIAL_HEADERS: [&str; 6] =
    ["authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "x-auth-token"];

/// Headers an `http` tool's request sets itself (HTTP framing); a tool may not send them.
pub const TOOL_RESERVED_HEADERS: [&str; 3] = ["host", "content-length", "transfer-encoding"];

/// What a request says about secret headers: absent keeps them, `null` removes them, an object
/// replaces them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretHeadersChange {
    Keep,
    Set(BTreeMap<String, String>),
    Remove,
}

impl SecretHeadersChange {
    /// The secret header names once this change is applied to a record that had `previous`
    /// stored for `previous_origin`, the record now sending to `origin` with plain `headers`.
    /// Secret headers never follow a record to another origin: kept ones need sending again
    /// there. `Err` maps the failing field (under `prefix`, e.g. `config.`) to its issue.
    pub fn names_after(
        &self,
        previous: &[String],
        previous_origin: &str,
        origin: &str,
        headers: &BTreeMap<String, String>,
        prefix: &str,
    ) -> Result<Vec<String>, Map<String, Value>> {
        match self {
            Self::Set(secret) => Ok(secret.keys().cloned().collect()),
            Self::Remove => Ok(Vec::new()),
            Self::Keep if previous.is_empty() => Ok(Vec::new()),
            Self::Keep if origin != previous_origin => Err(Map::from_iter([(
                format!("{prefix}secret_headers"),
                json!("must be sent again (or null to remove them) when url moves to another origin"),
            )])),
            Self::Keep => match previous.iter().find(|name| headers.contains_key(*name)) {
                Some(name) => {
                    Err(Map::from_iter([(format!("{prefix}headers.{name}"), json!("is already a secret header"))]))
                }
                None => Ok(previous.to_vec()),
            },
        }
    }
}

/// A header object with names lower-cased (HTTP names are case-insensitive, so `Authorization`
/// and `authorization` are one header), each name valid and not in `reserved` (`reserved_issue`
/// says why).
pub fn header_map(
    rules: &mut Checker,
    field: &str,
    value: Option<&Value>,
    reserved: &[&str],
    reserved_issue: &str,
) -> BTreeMap<String, String> {
    let mut headers = BTreeMap::new();
    for (name, value) in value.and_then(Value::as_object).into_iter().flatten() {
        let lower = name.to_ascii_lowercase();
        let value = value.as_str().unwrap_or_default();
        if !is_header_name(&lower) {
            rules.fail(&format!("{field}.{name}"), "is not a valid HTTP header name");
        } else if reserved.contains(&lower.as_str()) {
            rules.fail(&format!("{field}.{name}"), reserved_issue);
        } else if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            rules.fail(&format!("{field}.{name}"), "must not contain line breaks");
        } else if headers.insert(lower, value.to_owned()).is_some() {
            rules.fail(&format!("{field}.{name}"), "is given twice (header names ignore case)");
        }
    }
    headers
}

/// RFC 9110 token characters.
fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The headers of an `http` tool's `config` or of a `tool_configs` entry, split into plain and
/// secret ones.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolHeaders {
    /// Sent as they are and shown in responses.
    pub headers: BTreeMap<String, String>,
    /// `secret_headers`, with the credential headers of `headers` (`CREDENTIAL_HEADERS`) added.
    pub secret: SecretHeadersChange,
}

/// Reads `headers` and `secret_headers` of `object` (fields named under `prefix`, e.g.
/// `config.`): 400 for wrong types, 422 for bad names. `secret_header_names` (what responses
/// show) is ignored: the service keeps it.
pub fn read_tool_headers(object: &Map<String, Value>, prefix: &str) -> Result<ToolHeaders, Problems> {
    let mut types = Checker::default();
    for key in ["headers", "secret_headers"] {
        if let Some(value) = object.get(key).filter(|value| !value.is_null()) {
            Expected::StringMap.check(&mut types, &format!("{prefix}{key}"), value);
        }
    }
    if !types.problems.is_empty() {
        return Err(Problems { kind: ProblemKind::BadRequest, fields: types.problems });
    }
    let mut rules = Checker::default();
    let issue = "is set by the HTTP request itself and cannot be configured";
    let mut headers =
        header_map(&mut rules, &format!("{prefix}headers"), object.get("headers"), &TOOL_RESERVED_HEADERS, issue);
    let mut secret = match object.get("secret_headers") {
        None => SecretHeadersChange::Keep,
        Some(Value::Null) => SecretHeadersChange::Remove,
        Some(value) => SecretHeadersChange::Set(header_map(
            &mut rules,
            &format!("{prefix}secret_headers"),
            Some(value),
            &TOOL_RESERVED_HEADERS,
            issue,
        )),
    };
    if let SecretHeadersChange::Set(given) = &secret {
        for name in given.keys().filter(|name| headers.contains_key(*name)) {
            rules.fail(&format!("{prefix}secret_headers.{name}"), "is also in headers");
        }
    }
    let credentials: BTreeMap<String, String> =
        CREDENTIAL_HEADERS.iter().filter_map(|name| headers.remove_entry(*name)).collect();
    if !credentials.is_empty() {
        secret = match secret {
            SecretHeadersChange::Set(mut given) => {
                given.extend(credentials);
                SecretHeadersChange::Set(given)
            }
            SecretHeadersChange::Keep | SecretHeadersChange::Remove => SecretHeadersChange::Set(credentials),
        };
    }
    if !rules.problems.is_empty() {
        return Err(Problems { kind: ProblemKind::Validation, fields: rules.problems });
    }
    Ok(ToolHeaders { headers, secret })
}

/// Secret header values as stored in Secrets Manager (one JSON object), bound to `origin`.
pub fn encode_secret_headers(origin: &str, headers: &BTreeMap<String, String>) -> String {
    secret_origin::encode(origin, headers)
}

/// Reads what `encode_secret_headers` wrote, if it was written for `origin`.
pub fn decode_secret_headers(stored: &str, origin: &str) -> Result<BTreeMap<String, String>, SecretRefused> {
    secret_origin::decode_for(stored, origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(value: Value) -> Result<ToolHeaders, Problems> {
        read_tool_headers(value.as_object().unwrap(), "config.")
    }

    fn names(list: &[&str]) -> BTreeMap<String, String> {
        list.iter().map(|name| ((*name).to_owned(), "v".to_owned())).collect()
    }

    #[test]
    fn credential_headers_are_secret_wherever_they_are_sent() {
        let split = read(json!({"url": "https://x.test", "headers": {"Authorization": "Bearer t", "X-Team": "a",
            "COOKIE": "c"}, "secret_headers": {"X-Signature": "s"}, "secret_header_names": ["ignored"]}))
        .unwrap();
        assert_eq!(split.headers, BTreeMap::from([("x-team".to_owned(), "a".to_owned())]));
        assert_eq!(
            split.secret,
            SecretHeadersChange::Set(BTreeMap::from([
                ("authorization".to_owned(), "Bearer t".to_owned()),
                ("cookie".to_owned(), "c".to_owned()),
                ("x-signature".to_owned(), "s".to_owned()),
            ]))
        );
        assert_eq!(read(json!({"headers": {"X-Team": "a"}})).unwrap().secret, SecretHeadersChange::Keep);
        assert_eq!(read(json!({"secret_headers": null})).unwrap().secret, SecretHeadersChange::Remove);
        let moved = read(json!({"secret_headers": null, "headers": {"x-api-key": "k"}})).unwrap();
        assert_eq!(moved.secret, SecretHeadersChange::Set(BTreeMap::from([("x-api-key".into(), "k".into())])));
    }

    #[test]
    fn wrong_types_are_400_and_bad_names_422() {
        let problems = read(json!({"headers": {"a": 1}})).unwrap_err();
        assert_eq!(
            (problems.kind, problems.fields["config.headers.a"].as_str()),
            (ProblemKind::BadRequest, "must be a string")
        );
        let problems = read(json!({"headers": {"Host": "x", "bad name": "y", "X-A": "1\r\nX-B: 2", "x-b": "1"},
            "secret_headers": {"X-B": "2"}}))
        .unwrap_err();
        assert_eq!(problems.kind, ProblemKind::Validation);
        assert_eq!(
            problems.fields.keys().collect::<Vec<_>>(),
            ["config.headers.Host", "config.headers.X-A", "config.headers.bad name", "config.secret_headers.x-b"]
        );
    }

    #[test]
    fn kept_secret_headers_do_not_follow_a_new_origin() {
        let previous = ["authorization".to_owned()];
        let (a, b) = ("https://a.example.com", "https://b.example.com");
        let plain = BTreeMap::new();
        let keep = SecretHeadersChange::Keep;
        assert_eq!(keep.names_after(&previous, a, a, &plain, ""), Ok(previous.to_vec()));
        let moved = keep.names_after(&previous, a, b, &plain, "config.").unwrap_err();
        assert!(moved.contains_key("config.secret_headers"), "{moved:?}");
        let clash = keep.names_after(&previous, a, a, &names(&["authorization"]), "").unwrap_err();
        assert_eq!(clash["headers.authorization"], "is already a secret header");
        assert_eq!(keep.names_after(&[], a, b, &plain, ""), Ok(Vec::new()));
        assert_eq!(SecretHeadersChange::Remove.names_after(&previous, a, b, &plain, ""), Ok(Vec::new()));
        let set = SecretHeadersChange::Set(names(&["x-key"]));
        assert_eq!(set.names_after(&previous, a, b, &plain, ""), Ok(vec!["x-key".to_owned()]));
    }
}
