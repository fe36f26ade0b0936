//! Webhook endpoints: where an account's events go, and which ones.
//!
//! | field | type | rule |
//! |---|---|---|
//! | `url` | string | required; `https` with a public host, or an allowed host (`UrlPolicy`) |
//! | `description` | string | optional |
//! | `event_types` | array of strings | known event types; absent or `null` means all |
//! | `metadata` | object | application-defined |
//! | `enabled` | boolean | default `true` |

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// A valid endpoint body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointSpec {
    pub url: String,
    pub description: Option<String>,
    /// `None`: every event type.
    pub event_types: Option<Vec<String>>,
    pub metadata: Map<String, Value>,
    pub enabled: bool,
}

impl EndpointSpec {
    /// Whether the endpoint wants events of `event_type`.
    pub fn wants(&self, event_type: &str) -> bool {
        self.event_types.as_ref().is_none_or(|types| types.iter().any(|wanted| wanted == event_type))
    }
}

/// Which endpoint URLs are acceptable: in production only `https` to public addresses; hosts
/// on the allow-list (local development, tests) may use `http` and private addresses.
#[derive(Debug, Clone, Default)]
pub struct UrlPolicy {
    /// Host names or IP addresses, lower-case.
    pub allowed_hosts: Vec<String>,
}

impl UrlPolicy {
    /// From the `WEBHOOK_ALLOWED_HOSTS` setting: comma-separated hosts.
    pub fn from_setting(value: Option<&str>) -> Self {
        let allowed_hosts = value
            .unwrap_or_default()
            .split(',')
            .map(|host| host.trim().to_ascii_lowercase())
            .filter(|host| !host.is_empty())
            .collect();
        Self { allowed_hosts }
    }

    /// Whether `host` is on the allow-list.
    pub fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        self.allowed_hosts.contains(&host)
    }

    /// The URL's problem without resolving its host, if any.
    pub fn check_url(&self, raw: &str) -> Result<url::Url, &'static str> {
        platform_data::validation::check_url_text(raw)?;
        let url = url::Url::parse(raw).map_err(|_| "must be an absolute URL")?;
        let host = url.host_str().filter(|host| !host.is_empty()).ok_or("must have a host")?.to_owned();
        if !url.username().is_empty() || url.password().is_some() {
            return Err("must not carry credentials");
        }
        let allowed = self.allows_host(&host);
        match url.scheme() {
            "https" => {}
            "http" if allowed => {}
            "http" => return Err("must use https"),
            _ => return Err("must use https"),
        }
        if !allowed
            && let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>()
            && !is_public(ip)
        {
            return Err("must not point to a private, loopback or link-local address");
        }
        Ok(url)
    }

    /// Resolves the URL's host and refuses it when it leads to a non-public address (unless the
    /// host is allowed). Deliveries check again at every attempt (DNS can change).
    pub async fn check_resolved(&self, url: &url::Url) -> Result<(), &'static str> {
        let Some(host) = url.host_str() else { return Err("must have a host") };
        if self.allows_host(host) {
            return Ok(());
        }
        let port = url.port_or_known_default().unwrap_or(443);
        let addresses = tokio::net::lookup_host((host, port)).await.map_err(|_| "has a host that does not resolve")?;
        for address in addresses {
            if !self.allows_address(host, address.ip()) {
                return Err("must not point to a private, loopback or link-local address");
            }
        }
        Ok(())
    }

    /// Whether a resolved address may be called for `host`.
    pub fn allows_address(&self, host: &str, ip: IpAddr) -> bool {
        is_public(ip) || self.allows_host(host)
    }

    /// The same rule as the guarded client's address policy (hosts on the allow-list may use
    /// any address; others public ones only).
    pub fn address_policy(&self) -> outbound::AddressPolicy {
        outbound::AddressPolicy::from_setting(Some(&self.allowed_hosts.join(","))).unwrap_or_else(|_| {
            // Only host names reach the list (`from_setting` above); a refused entry allows nothing.
            outbound::AddressPolicy::public_only()
        })
    }
}

/// Whether an address is on the public internet (the one classification of every outbound
/// guard, `outbound::guard`).
pub use outbound::guard::is_public;

/// Parses and validates an endpoint body (create and replace) whose `event_types` may name
/// `known_types`. Wrong JSON types are `(true, problems)` (400); rule violations
/// `(false, problems)` (422).
pub fn parse_endpoint(
    body: &[u8],
    policy: &UrlPolicy,
    known_types: &[&str],
) -> Result<EndpointSpec, (bool, BTreeMap<String, String>)> {
    let one = |field: &str, issue: &str| BTreeMap::from([(field.to_owned(), issue.to_owned())]);
    let value: Value =
        serde_json::from_slice(body).map_err(|err| (true, one("body", &format!("malformed JSON: {err}"))))?;
    let Value::Object(body) = value else { return Err((true, one("body", "must be a JSON object"))) };
    let present = |name: &str| body.get(name).filter(|v| !v.is_null());
    let mut types = BTreeMap::new();
    for (name, ok) in [
        ("url", present("url").is_none_or(Value::is_string)),
        ("description", present("description").is_none_or(Value::is_string)),
        ("metadata", present("metadata").is_none_or(Value::is_object)),
        ("enabled", present("enabled").is_none_or(Value::is_boolean)),
        (
            "event_types",
            present("event_types").is_none_or(|v| v.as_array().is_some_and(|a| a.iter().all(Value::is_string))),
        ),
    ] {
        if !ok {
            types.insert(name.to_owned(), "has the wrong type".to_owned());
        }
    }
    if !types.is_empty() {
        return Err((true, types));
    }
    let mut rules = BTreeMap::new();
    for key in body.keys() {
        if !["url", "description", "event_types", "metadata", "enabled"].contains(&key.as_str()) {
            rules.insert(key.clone(), "unknown field".to_owned());
        }
    }
    let url = present("url").and_then(Value::as_str).unwrap_or_default().to_owned();
    if present("url").is_none() {
        rules.insert("url".into(), "is required".into());
    } else if let Err(issue) = policy.check_url(&url) {
        rules.insert("url".into(), issue.into());
    }
    let event_types: Option<Vec<String>> = present("event_types")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).map(str::to_owned).collect());
    for (i, event_type) in event_types.iter().flatten().enumerate() {
        if !known_types.contains(&event_type.as_str()) {
            rules.insert(format!("event_types[{i}]"), format!("unknown event type {event_type:?}"));
        }
    }
    if event_types.as_ref().is_some_and(Vec::is_empty) {
        rules.insert("event_types".into(), "must name at least one event type (or be null for all)".into());
    }
    if !rules.is_empty() {
        return Err((false, rules));
    }
    Ok(EndpointSpec {
        url,
        description: present("description").and_then(Value::as_str).map(str::to_owned),
        event_types,
        metadata: present("metadata").and_then(Value::as_object).cloned().unwrap_or_default(),
        enabled: present("enabled").and_then(Value::as_bool).unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EVENT_TYPES;
    use serde_json::json;

    fn production() -> UrlPolicy {
        UrlPolicy::default()
    }

    #[test]
    fn production_takes_only_https_to_public_hosts() {
        let policy = production();
        assert!(policy.check_url("https://hooks.example.com/in").is_ok());
        assert!(policy.check_url("https://93.184.215.14/in").is_ok());
        assert!(policy.check_url("https://[2606:4700::1111]/in").is_ok());
        assert!(policy.check_url("https://[64:ff9b::5db8:d70e]/in").is_ok());
        assert_eq!(policy.check_url("http://hooks.example.com/in").unwrap_err(), "must use https");
        assert_eq!(policy.check_url("ftp://x.test").unwrap_err(), "must use https");
        for unwritten in [" https://x.test/in", "https://x.test/in ", "https://x.test/a b", "https://x.test/\u{7}"] {
            assert_eq!(policy.check_url(unwritten).unwrap_err(), "must not contain spaces or control characters");
        }
        for private in [
            "https://127.0.0.1/",
            "https://10.1.2.3/",
            "https://169.254.169.254/",
            "https://[::1]/",
            "https://[fd00::1]/",
            "https://100.64.0.1/",
            "https://[::ffff:192.168.0.1]/",
        ] {
            assert!(policy.check_url(private).is_err(), "{private}");
        }
        assert_eq!(policy.check_url("https://user:pw@x.test/").unwrap_err(), "must not carry credentials");
    }

    #[test]
    fn allowed_hosts_may_use_http_and_private_addresses() {
        let policy = UrlPolicy::from_setting(Some(" 127.0.0.1, LocalHost ,"));
        assert!(policy.check_url("http://127.0.0.1:9000/hook").is_ok());
        assert!(policy.check_url("http://localhost:9000/hook").is_ok());
        assert!(policy.check_url("http://10.0.0.1/hook").is_err());
        assert!(policy.allows_address("localhost", "127.0.0.1".parse().unwrap()));
        assert!(!policy.allows_address("evil.test", "127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn bodies_validate_types_then_rules() {
        let policy = production();
        let spec =
            parse_endpoint(br#"{"url": "https://x.test/h", "event_types": ["agent.created"]}"#, &policy, &EVENT_TYPES)
                .unwrap();
        assert!(spec.enabled && spec.wants("agent.created") && !spec.wants("agent.deleted"));
        let all =
            parse_endpoint(br#"{"url": "https://x.test/h", "event_types": null}"#, &policy, &EVENT_TYPES).unwrap();
        assert!(all.wants("run.failed"));
        let (types, problems) = parse_endpoint(br#"{"url": 1, "enabled": "yes"}"#, &policy, &EVENT_TYPES).unwrap_err();
        assert!(types);
        assert_eq!(problems.keys().collect::<Vec<_>>(), ["enabled", "url"]);
        let body = json!({"event_types": ["agent.created", "agent.exploded"], "extra": 1}).to_string();
        let (types, problems) = parse_endpoint(body.as_bytes(), &policy, &EVENT_TYPES).unwrap_err();
        assert!(!types);
        assert_eq!(problems["event_types[1]"], "unknown event type \"agent.exploded\"");
        assert_eq!(problems.keys().collect::<Vec<_>>(), ["event_types[1]", "extra", "url"]);
    }
}
