//! MCP configurations: how to reach an MCP server over Streamable HTTP, stored as
//! account-scoped, uniquely named records in `McpConfigsTable`.
//!
//! | field | type | rule |
//! |---|---|---|
//! | `name` | string | required, at most 255 characters, unique per account |
//! | `description` | string | optional |
//! | `url` | string | required; the server's Streamable HTTP endpoint, http(s) with a host |
//! | `transport` | string | `streamable_http` (the default and only value) |
//! | `headers` | object of strings | sent with every request and returned in responses |
//! | `secret_headers` | object of strings | sent with every request; write-only (Secrets Manager) |
//! | `timeout_seconds` | integer | 1–25, default 10: the limit of one whole MCP operation (API Gateway ends requests at 30 s) |
//! | `metadata` | object | application-defined |
//!
//! Header names must be valid HTTP header names, may not be ones the transport sets itself
//! (`RESERVED_HEADERS`), and may not appear in both `headers` and `secret_headers`.

use crate::records::{Record, RecordBody, RecordStore};
use crate::secret_headers::header_map;
pub use crate::secret_headers::{SecretHeadersChange, decode_secret_headers, encode_secret_headers};
use crate::secret_origin::origin_of;
use crate::validation::{Expected, ProblemKind, Problems, check_http_url, check_shape};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Default and largest `timeout_seconds`; requests through API Gateway end at 30 s.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 10;
pub const MAX_TIMEOUT_SECONDS: u64 = 25;

/// Headers the MCP transport (or HTTP itself) sets; a configuration may not send them.
pub const RESERVED_HEADERS: [&str; 7] =
    ["accept", "content-type", "content-length", "host", "mcp-session-id", "mcp-protocol-version", "last-event-id"];

/// A stored MCP configuration (never the secret header values).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpConfigSpec {
    pub name: String,
    pub description: Option<String>,
    pub url: String,
    pub transport: String,
    pub headers: BTreeMap<String, String>,
    /// Names of the secret headers, whose values are in Secrets Manager.
    pub secret_header_names: Vec<String>,
    pub timeout_seconds: u64,
    pub metadata: Map<String, Value>,
}

impl RecordBody for McpConfigSpec {
    const KIND: &'static str = "MCP";
    type Id = crate::ids::McpConfigId;

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }
}

/// A stored MCP configuration.
pub type McpConfig = Record<McpConfigSpec>;

/// Storage of MCP configurations.
pub type McpConfigStore = RecordStore<McpConfigSpec>;

/// A valid create or replace body.
#[derive(Debug, Clone, PartialEq)]
pub struct McpConfigInput {
    /// The record body; `secret_header_names` is settled once the change is applied.
    pub spec: McpConfigSpec,
    pub secret_headers: SecretHeadersChange,
}

/// Parses and validates an MCP configuration body (POST and PUT). With `name_required` false
/// (a connection test) the name may be absent.
pub fn parse_mcp_config(body: &[u8], name_required: bool) -> Result<McpConfigInput, Problems> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| Problems::single(ProblemKind::BadRequest, "body", &format!("malformed JSON: {err}")))?;
    let Value::Object(body) = value else {
        return Err(Problems::single(ProblemKind::BadRequest, "body", "must be a JSON object"));
    };
    validate_mcp_config(&body, name_required)
}

/// Validates an MCP configuration body already known to be a JSON object.
pub fn validate_mcp_config(body: &Map<String, Value>, name_required: bool) -> Result<McpConfigInput, Problems> {
    let present = |name: &str| body.get(name).filter(|v| !v.is_null());
    let mut rules = check_shape(
        body,
        &[
            ("name", Expected::String),
            ("description", Expected::String),
            ("url", Expected::String),
            ("transport", Expected::String),
            ("headers", Expected::StringMap),
            ("secret_headers", Expected::StringMap),
            ("timeout_seconds", Expected::Integer),
            ("metadata", Expected::Object),
        ],
    )?;
    let text = |name: &str| present(name).and_then(Value::as_str).map(str::to_owned);
    let name = text("name").unwrap_or_default();
    if present("name").is_none() {
        if name_required {
            rules.fail("name", "is required");
        }
    } else if name.trim().is_empty() {
        rules.fail("name", "must not be empty");
    } else if name.chars().count() > 255 {
        rules.fail("name", "must be at most 255 characters");
    }
    let url = text("url").unwrap_or_default();
    if present("url").is_none() {
        rules.fail("url", "is required");
    } else if let Err(issue) = check_http_url(&url) {
        rules.fail("url", issue);
    }
    let transport = text("transport").unwrap_or_else(|| "streamable_http".into());
    if transport != "streamable_http" {
        rules.fail("transport", "must be streamable_http");
    }
    let timeout_seconds = match present("timeout_seconds")
        .map(|v| crate::validation::whole_number(v).filter(|s| (1..=MAX_TIMEOUT_SECONDS).contains(s)))
    {
        None => DEFAULT_TIMEOUT_SECONDS,
        Some(Some(seconds)) => seconds,
        Some(None) => {
            rules.fail("timeout_seconds", "must be between 1 and 25");
            DEFAULT_TIMEOUT_SECONDS
        }
    };
    let reserved = "is set by the MCP transport and cannot be configured";
    let headers = header_map(&mut rules, "headers", present("headers"), &RESERVED_HEADERS, reserved);
    let secret_headers = match body.get("secret_headers") {
        None => SecretHeadersChange::Keep,
        Some(Value::Null) => SecretHeadersChange::Remove,
        Some(value) => {
            SecretHeadersChange::Set(header_map(&mut rules, "secret_headers", Some(value), &RESERVED_HEADERS, reserved))
        }
    };
    if let SecretHeadersChange::Set(secret) = &secret_headers {
        for name in secret.keys().filter(|name| headers.contains_key(*name)) {
            rules.fail(&format!("secret_headers.{name}"), "is also in headers");
        }
    }
    if !rules.problems.is_empty() {
        return Err(Problems { kind: ProblemKind::Validation, fields: rules.problems });
    }
    let spec = McpConfigSpec {
        name,
        description: text("description"),
        url,
        transport,
        headers,
        secret_header_names: Vec::new(),
        timeout_seconds,
        metadata: present("metadata").and_then(Value::as_object).cloned().unwrap_or_default(),
    };
    Ok(McpConfigInput { spec, secret_headers })
}

impl McpConfigSpec {
    /// The origin secret headers are sent to (the `url`'s); they are stored bound to it.
    pub fn secret_origin(&self) -> String {
        origin_of(&self.url).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret_origin::SecretRefused;
    use serde_json::json;

    fn parse(body: Value) -> Result<McpConfigInput, Problems> {
        parse_mcp_config(body.to_string().as_bytes(), true)
    }

    #[test]
    fn a_complete_body_keeps_secret_values_out_of_the_record() {
        let input = parse(json!({"name": "search", "url": "https://mcp.example.com/mcp",
            "headers": {"X-Team": "a"}, "secret_headers": {"Authorization": "Bearer s3cret"}, "timeout_seconds": 10}))
        .unwrap();
        assert_eq!(input.spec.headers, BTreeMap::from([("x-team".to_owned(), "a".to_owned())]));
        assert_eq!(input.spec.timeout_seconds, 10);
        assert_eq!(input.spec.transport, "streamable_http");
        assert_eq!(
            input.secret_headers,
            SecretHeadersChange::Set(BTreeMap::from([("authorization".into(), "Bearer s3cret".into())]))
        );
        assert!(!serde_json::to_string(&input.spec).unwrap().contains("s3cret"));
        let kept = parse(json!({"name": "n", "url": "http://localhost:9000/mcp"})).unwrap();
        assert_eq!(kept.secret_headers, SecretHeadersChange::Keep);
        assert_eq!(kept.spec.timeout_seconds, DEFAULT_TIMEOUT_SECONDS);
        let removed = parse(json!({"name": "n", "url": "http://x.test/mcp", "secret_headers": null})).unwrap();
        assert_eq!(removed.secret_headers, SecretHeadersChange::Remove);
    }

    #[test]
    fn wrong_types_are_400_and_rule_violations_422() {
        let problems = parse(json!({"name": "n", "url": "http://x.test", "headers": {"a": 1}})).unwrap_err();
        assert_eq!(problems.kind, ProblemKind::BadRequest);
        assert_eq!(problems.fields["headers.a"], "must be a string");
        let problems = parse(json!({"url": "http://x.test", "timeout_seconds": "5"})).unwrap_err();
        assert_eq!(problems.kind, ProblemKind::BadRequest);
        let problems = parse(json!({"url": "ftp://x", "transport": "sse", "timeout_seconds": 0,
            "headers": {"Accept": "x", "bad name": "y", "X-A": "1\r\nX-B: 2", "Authorization": "a"},
            "secret_headers": {"authorization": "b"}, "extra": 1}))
        .unwrap_err();
        assert_eq!(problems.kind, ProblemKind::Validation);
        assert_eq!(
            problems.fields.keys().collect::<Vec<_>>(),
            [
                "extra",
                "headers.Accept",
                "headers.X-A",
                "headers.bad name",
                "name",
                "secret_headers.authorization",
                "timeout_seconds",
                "transport",
                "url"
            ]
        );
        assert!(parse_mcp_config(br#"{"url": "http://x.test/mcp"}"#, false).is_ok());
    }

    #[test]
    fn secret_headers_round_trip_through_their_stored_form() {
        let headers = BTreeMap::from([("authorization".to_owned(), "Bearer \"quoted\"".to_owned())]);
        let stored = encode_secret_headers("https://mcp.example.com", &headers);
        assert_eq!(decode_secret_headers(&stored, "https://mcp.example.com"), Ok(headers));
        assert!(matches!(
            decode_secret_headers(&stored, "https://other.example.com"),
            Err(SecretRefused::OtherOrigin { .. })
        ));
        assert_eq!(decode_secret_headers("not json", "https://mcp.example.com"), Err(SecretRefused::Unreadable));
    }
}
