//! Fuzzing the real handlers (issue 9, point 7): a bounded number of arbitrary requests (methods,
//! paths, ids, query strings, headers, content types, bodies) against the main routes, each
//! answered with one of the documented statuses and the documented body shape:
//!
//! - backend routes: the platform envelope, `{success: true, data, message, timestamp}` or
//!   `{success: false, error: {code, message, details}, timestamp}` with the code of the status;
//! - the token endpoints: RFC 6749 `{error, error_description}`, an empty 200 for revocation, the
//!   token response, or DRF's `{"detail"}` for 404 and 405;
//! - meeting reads: DRF's `{"detail"}` (401, 404, 405), 400 objects keyed by parameter.
//!
//! Never a 500, never a panic. Cases are generated with proptest's runner (a fresh seed each run;
//! `PROPTEST_RNG_SEED` replays one) and sent one after the other, since they talk to moto. A
//! failure prints the whole request.

use http::{Method, StatusCode};
use http_api::{Body, params::quote_plus};
use integration_tests::{Reply, TestClient, TestClock, TestStack, demo_fixture, obtain_token, request};
use meeting_api::{AuthService, MeetingsService};
use platform_api::{AgentsService, HealthService, LanguageModelsService, McpsService, ToolsService};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use uuid::Uuid;

/// Requests per fuzz test: each one is a few calls to moto.
const CASES: u32 = 64;

/// One generated request.
#[derive(Debug, Clone)]
struct Case {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    /// `None`: no header; `Some(None)`: the valid credential; `Some(Some(raw))`: these bytes.
    credential: Option<Option<Vec<u8>>>,
    content_type: Option<String>,
    body: Vec<u8>,
}

impl Case {
    fn path_and_query(&self) -> String {
        let query: Vec<String> =
            self.query.iter().map(|(key, value)| format!("{}={}", quote_plus(key), quote_plus(value))).collect();
        if query.is_empty() { self.path.clone() } else { format!("{}?{}", self.path, query.join("&")) }
    }
}

/// Generates `CASES` values of `strategy`.
fn generate<S: Strategy>(strategy: S) -> Vec<S::Value> {
    let mut runner = TestRunner::new(Config::with_cases(CASES));
    (0..CASES).map(|_| strategy.new_tree(&mut runner).expect("a generated case").current()).collect()
}

fn methods() -> impl Strategy<Value = Method> {
    prop_oneof![
        3 => Just(Method::GET),
        3 => Just(Method::POST),
        2 => Just(Method::PUT),
        1 => Just(Method::PATCH),
        1 => Just(Method::DELETE),
        1 => Just(Method::OPTIONS),
        1 => Just(Method::HEAD),
    ]
}

/// A path segment: an id (valid UUID, number, junk) or any text, percent-encoded.
fn segments() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(Uuid::new_v4().to_string()),
        Just("1001".to_owned()),
        Just("not-a-uuid".to_owned()),
        Just("upload".to_owned()),
        any::<u32>().prop_map(|n| n.to_string()),
        any::<String>().prop_map(|text| quote_plus(&text).replace('+', "%20")),
    ]
}

fn query_pairs(keys: &'static [&'static str]) -> impl Strategy<Value = Vec<(String, String)>> {
    let key = prop_oneof![(0..keys.len()).prop_map(move |i| keys[i].to_owned()), "[a-z._]{1,10}"];
    let value = prop_oneof![
        Just(String::new()),
        Just("1".to_owned()),
        Just("true".to_owned()),
        Just("last".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<String>(),
    ];
    prop::collection::vec((key, value), 0..4)
}

/// Any JSON value, at most three levels deep.
fn json_values() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        Just(json!(Uuid::new_v4().to_string())),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..4)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

/// Bodies for the backend: objects with the resources' own fields, any JSON, multipart, bytes.
fn backend_bodies() -> impl Strategy<Value = (Option<String>, Vec<u8>)> {
    const FIELDS: &[&str] = &[
        "type",
        "name",
        "framework",
        "instruction",
        "version",
        "description",
        "agents",
        "tools",
        "mcps",
        "metadata",
        "language_model_id",
        "provider",
        "model_name",
        "tool_configs",
        "agent_config",
        "a2a_profile",
        "script",
        "input_schema",
        "config",
        "api_key",
        "default_parameters",
        "stream_timeouts",
        "url",
        "headers",
        "secret_headers",
        "timeout_seconds",
    ];
    const VALUES: &[&str] = &[
        "config",
        "a2a",
        "flowtool",
        "custom",
        "http",
        "chainlib",
        "openai",
        "fuzz-name",
        "def run():\n    return 1\n",
        "https://example.test/mcp",
    ];
    let field = (0..FIELDS.len(), prop_oneof![json_values(), (0..VALUES.len()).prop_map(|i| json!(VALUES[i]))]);
    let object = prop::collection::vec(field, 0..8).prop_map(|fields| {
        let object: serde_json::Map<String, Value> =
            fields.into_iter().map(|(name, value)| (FIELDS[name].to_owned(), value)).collect();
        Value::Object(object).to_string().into_bytes()
    });
    let multipart = prop::collection::vec(
        prop_oneof![
            Just(b"--B0und\r\n".to_vec()),
            Just(b"Content-Disposition: form-data; name=\"file\"; filename=\"t.py\"\r\n\r\n".to_vec()),
            Just(b"Content-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"name\": \"fuzz\"}".to_vec()),
            Just(b"def run():\n    return 1\n".to_vec()),
            Just(b"\r\n--B0und--\r\n".to_vec()),
            any::<Vec<u8>>(),
        ],
        0..8,
    )
    .prop_map(|pieces| pieces.concat());
    // Valid bodies of each resource with any name, so that creates and replaces happen too.
    let valid = (
        prop_oneof![
            Just(json!({"type": "http", "config": {"url": "https://api.example.test"}})),
            Just(json!({"type": "custom", "script": "def run():\n    return 1\n"})),
            Just(json!({"type": "config", "framework": "chainlib", "language_model_id": "lm"})),
            Just(json!({"type": "a2a", "a2a_profile": {"url": "https://agent.example.test"}})),
            Just(json!({"provider": "openai", "model_name": "gpt-4o", "api_key": "sk-fuzz"})),
            Just(json!({"url": "https://mcp.example.test/mcp", "headers": {"x-team": "fuzz"}})),
        ],
        prop_oneof!["[A-Za-z0-9 _-]{1,24}", any::<String>()],
    )
        .prop_map(|(mut body, name)| {
            body["name"] = json!(name);
            body.to_string().into_bytes()
        });
    let json_type = || Some("application/json".to_owned());
    prop_oneof![
        3 => valid.prop_map(move |body| (json_type(), body)),
        4 => object.prop_map(move |body| (json_type(), body)),
        2 => json_values().prop_map(move |value| (json_type(), value.to_string().into_bytes())),
        2 => multipart.prop_map(|body| (Some("multipart/form-data; boundary=B0und".to_owned()), body)),
        1 => (prop::option::of(any::<String>()), any::<Vec<u8>>()),
        1 => Just((None, Vec::new())),
    ]
}

fn credentials() -> impl Strategy<Value = Option<Option<Vec<u8>>>> {
    prop_oneof![
        6 => Just(Some(None)),
        1 => Just(None),
        1 => any::<Vec<u8>>().prop_map(|raw| Some(Some(raw))),
        1 => "[A-Za-z0-9_-]{0,16}\\.[A-Za-z0-9_-]{0,43}".prop_map(|key| Some(Some(key.into_bytes()))),
    ]
}

fn backend_cases() -> impl Strategy<Value = Case> {
    // Routes that call out (flow sync, MCP connections and tool listings) are left out: no test
    // reaches beyond the machine.
    const PREFIXES: &[&str] = &["/tools", "/agents", "/language-models", "/mcps", "/health-check"];
    const SUFFIXES: &[&str] = &["", "/", "/restore", "/upload", "/script", "/auth-test", "/x/y"];
    const KEYS: &[&str] =
        &["page", "limit", "type", "name", "version", "agent_type", "framework", "metadata.type", "deleted"];
    (
        methods(),
        0..PREFIXES.len(),
        prop::option::of(segments()),
        0..SUFFIXES.len(),
        query_pairs(KEYS),
        credentials(),
        backend_bodies(),
    )
        .prop_map(|(method, prefix, segment, suffix, query, credential, (content_type, body))| {
            let mut path = PREFIXES[prefix].to_owned();
            if let Some(segment) = segment {
                path.push('/');
                path.push_str(&segment);
            }
            path.push_str(SUFFIXES[suffix]);
            Case { method, path, query, credential, content_type, body }
        })
}

/// Creates with a valid body of the route's resource and any name, so that 201s happen and
/// later cases meet stored records and taken names.
fn create_cases() -> impl Strategy<Value = Case> {
    let resource = prop_oneof![
        Just(("/tools", json!({"type": "http", "config": {"url": "https://api.example.test"}}))),
        Just(("/tools", json!({"type": "custom", "script": "def run(**kwargs):\n    return kwargs\n"}))),
        Just(("/agents/", json!({"type": "config", "framework": "chainlib", "language_model_id": "lm"}))),
        Just(("/agents/", json!({"type": "a2a", "a2a_profile": {"url": "https://agent.example.test"}}))),
        Just(("/language-models", json!({"provider": "openai", "model_name": "gpt-4o", "api_key": "sk-fuzz"}))),
        Just(("/mcps", json!({"url": "https://mcp.example.test/mcp", "headers": {"x-team": "fuzz"}}))),
    ];
    (resource, prop_oneof![3 => "[A-Za-z0-9 _-]{1,12}", 1 => any::<String>()]).prop_map(|((path, mut body), name)| {
        body["name"] = json!(name);
        Case {
            method: Method::POST,
            path: path.to_owned(),
            query: vec![],
            credential: Some(None),
            content_type: Some("application/json".to_owned()),
            body: body.to_string().into_bytes(),
        }
    })
}

/// The function a backend path goes to, as `template.yaml` routes it.
fn backend_service<'a>(services: &'a [(&str, TestClient)], path: &str) -> &'a TestClient {
    services.iter().find(|(prefix, _)| path.starts_with(prefix)).map_or(&services[0].1, |(_, service)| service)
}

fn build(case: &Case, credential_header: &str, valid_credential: &str) -> http_api::Request {
    let mut builder = request(case.method.clone(), &case.path_and_query());
    match &case.credential {
        None => {}
        Some(None) => builder = builder.header(credential_header, valid_credential),
        Some(Some(raw)) => {
            if let Ok(value) = http::HeaderValue::from_bytes(raw) {
                builder = builder.header(credential_header, value);
            }
        }
    }
    if let Some(value) = case.content_type.as_deref().and_then(|value| http::HeaderValue::from_str(value).ok()) {
        builder = builder.header(http::header::CONTENT_TYPE, value);
    }
    builder.body(Body::Binary(case.body.clone())).expect("a request from a generated case")
}

fn context(case: &Case, reply: &Reply) -> String {
    format!(
        "{} {} credential={:?} content-type={:?} body={:?}\n-> {} {}",
        case.method,
        case.path_and_query(),
        case.credential.as_ref().map(|raw| raw.as_ref().map(|raw| String::from_utf8_lossy(raw).into_owned())),
        case.content_type,
        String::from_utf8_lossy(&case.body),
        reply.status,
        reply.text
    )
}

/// The backend's documented answer: its statuses, and the envelope with the status's code.
fn assert_envelope(reply: &Reply, context: &str) {
    let documented = [200, 201, 400, 401, 403, 404, 405, 409, 413, 422, 429];
    assert!(documented.contains(&reply.status.as_u16()), "undocumented status: {context}");
    let body: Value = serde_json::from_str(&reply.text).unwrap_or_else(|_| panic!("not JSON: {context}"));
    assert!(body["timestamp"].is_string(), "no timestamp: {context}");
    if reply.status.is_success() {
        assert_eq!(body["success"], true, "{context}");
        assert!(body.get("data").is_some() && body["message"].is_string(), "{context}");
        return;
    }
    assert_eq!(body["success"], false, "{context}");
    let error = &body["error"];
    assert!(error["message"].is_string() && error["details"].is_object(), "error shape: {context}");
    let code = match reply.status.as_u16() {
        400 => "BAD_REQUEST",
        401 => "AUTHENTICATION_FAILED",
        403 => "AUTHORIZATION_FAILED",
        404 => "RESOURCE_NOT_FOUND",
        405 => "METHOD_NOT_ALLOWED",
        409 => "CONFLICT",
        413 => "PAYLOAD_TOO_LARGE",
        422 => "VALIDATION_ERROR",
        _ => "RATE_LIMIT_EXCEEDED",
    };
    assert_eq!(error["code"], code, "{context}");
}

#[tokio::test]
async fn arbitrary_backend_requests_get_documented_answers() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    // Keys of one account, each used for fewer requests than its rate limit's burst.
    let account = Uuid::new_v4();
    let mut keys = Vec::new();
    for _ in 0..CASES.div_ceil(150) {
        keys.push(stack.api_key(account).await);
    }
    let services = [
        ("/tools", stack.client::<ToolsService>(&clock)),
        ("/agents", stack.client::<AgentsService>(&clock)),
        ("/language-models", stack.client::<LanguageModelsService>(&clock)),
        ("/mcps", stack.client::<McpsService>(&clock)),
        ("/health-check", stack.client::<HealthService>(&clock)),
    ];
    for (number, case) in generate(prop_oneof![2 => backend_cases(), 1 => create_cases()]).into_iter().enumerate() {
        let service = backend_service(&services, &case.path);
        let key = &keys[number / 150];
        let reply = service.send(build(&case, "x-api-key", key)).await;
        assert_envelope(&reply, &context(&case, &reply));
    }
}

#[tokio::test]
async fn huge_agent_fields_are_413_or_422_not_500() {
    // Both answered 500 before the request limits of issue 9 (points 6 and 14).
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.client::<AgentsService>(&clock);
    let bodies = [
        json!({"type": "config", "name": "big", "framework": "chainlib", "language_model_id": "lm", "instruction": "x".repeat(500_000)}),
        json!({"type": "config", "name": "😀".repeat(255), "framework": "chainlib", "language_model_id": "lm"}),
    ];
    for body in bodies {
        let case = Case {
            method: Method::POST,
            path: "/agents/".to_owned(),
            query: vec![],
            credential: Some(None),
            content_type: Some("application/json".to_owned()),
            body: body.to_string().into_bytes(),
        };
        let reply = agents.send(build(&case, "x-api-key", &key)).await;
        let context = context(&case, &reply);
        assert!([201, 413, 422].contains(&reply.status.as_u16()), "{}", &context[context.len().saturating_sub(400)..]);
        assert_envelope(&reply, &context);
    }
}

fn meeting_cases() -> impl Strategy<Value = Case> {
    const PATHS: &[&str] =
        &["/api/auth/token/", "/api/auth/revoke-token/", "/api/auth/token", "/api/v1/external/meeting/"];
    const SUFFIXES: &[&str] = &["", "/", "transcript/", "summary/", "participants/", "recording/", "x/"];
    const KEYS: &[&str] = &[
        "organization_id",
        "title",
        "participants",
        "created_after",
        "created_before",
        "summary_complete",
        "from_calendar",
        "updated_after",
        "page",
        "size",
    ];
    let form = prop::collection::vec(
        (
            prop_oneof![
                Just("grant_type".to_owned()),
                Just("client_id".to_owned()),
                Just("client_secret".to_owned()),
                Just("token".to_owned()),
                Just("scope".to_owned()),
                "[a-z_]{1,8}",
            ],
            prop_oneof![Just("client_credentials".to_owned()), Just("meetings:read".to_owned()), any::<String>()],
        ),
        0..5,
    )
    .prop_map(|pairs| {
        pairs.iter().map(|(k, v)| format!("{}={}", quote_plus(k), quote_plus(v))).collect::<Vec<_>>().join("&")
    });
    let bodies = prop_oneof![
        3 => form.prop_map(|body| (Some("application/x-www-form-urlencoded".to_owned()), body.into_bytes())),
        1 => (prop::option::of(any::<String>()), any::<Vec<u8>>()),
    ];
    let authorization = prop_oneof![
        4 => Just(Some(None)),
        1 => Just(None),
        1 => any::<Vec<u8>>().prop_map(|raw| Some(Some(raw))),
        1 => ("(Bearer|Basic|bearer) {0,2}", "[ -~]{0,60}").prop_map(|(scheme, rest)| Some(Some(format!("{scheme}{rest}").into_bytes()))),
    ];
    let meeting_ids = prop_oneof![3 => Just("1001".to_owned()), 1 => Just("1002".to_owned()), 2 => segments()];
    // Mostly the method each path serves (POST for tokens, GET for reads), sometimes any.
    let method = prop_oneof![4 => Just(None), 1 => methods().prop_map(Some)];
    (method, 0..PATHS.len(), prop::option::of(meeting_ids), 0..SUFFIXES.len(), query_pairs(KEYS), authorization, bodies)
        .prop_map(|(method, path, segment, suffix, query, credential, (content_type, body))| {
            let mut path = PATHS[path].to_owned();
            let served = if path.starts_with("/api/auth/") { Method::POST } else { Method::GET };
            let method = method.unwrap_or(served);
            if path.starts_with("/api/v1")
                && let Some(segment) = segment
            {
                path.push_str(&segment);
                path.push('/');
                path.push_str(SUFFIXES[suffix]);
            }
            Case { method, path, query, credential, content_type, body }
        })
}

/// The meeting API's documented answers: RFC 6749 errors on the token endpoints, DRF shapes
/// elsewhere.
fn assert_meeting_api(case: &Case, reply: &Reply, context: &str) {
    let status = reply.status.as_u16();
    let auth = case.path.starts_with("/api/auth/");
    if auth && status == 200 && case.path.contains("revoke") {
        assert!(reply.text.is_empty(), "{context}");
        return;
    }
    let body: Value = serde_json::from_str(&reply.text).unwrap_or_else(|_| panic!("not JSON: {context}"));
    let fields = body.as_object().map(|fields| fields.keys().map(String::as_str).collect::<Vec<_>>());
    match status {
        200 if auth => {
            assert_eq!(body["token_type"], "Bearer", "{context}");
            assert!(body["access_token"].is_string() && body["expires_in"].is_i64(), "{context}");
        }
        200 => assert!(body.is_object(), "{context}"),
        400 | 401 if auth => {
            assert_eq!(fields, Some(vec!["error", "error_description"]), "{context}");
            let codes = ["invalid_request", "invalid_client", "unsupported_grant_type", "invalid_scope"];
            assert!(codes.contains(&body["error"].as_str().unwrap_or_default()), "{context}");
            assert_eq!(status == 401, body["error"] == "invalid_client", "{context}");
        }
        400 => {
            let object = body.as_object().unwrap_or_else(|| panic!("{context}"));
            assert!(!object.is_empty(), "{context}");
            for value in object.values() {
                let texts = value.as_array().map_or(vec![value], |items| items.iter().collect());
                assert!(texts.iter().all(|text| text.is_string()), "{context}");
            }
        }
        401 | 404 | 405 => {
            assert_eq!(fields, Some(vec!["detail"]), "{context}");
            assert!(body["detail"].is_string(), "{context}");
            if status == 401 {
                assert!(reply.header("www-authenticate").is_some(), "{context}");
            }
        }
        _ => panic!("undocumented status: {context}"),
    }
}

#[tokio::test]
async fn arbitrary_meeting_api_requests_get_documented_answers() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    stack.import(&demo_fixture()).await;
    let (client_id, secret) = stack.create_app(&[1, 2]).await;
    let auth = stack.client::<AuthService>(&clock);
    let meetings = stack.client::<MeetingsService>(&clock);
    let token = obtain_token(&auth, &client_id, &secret).await;
    for case in generate(meeting_cases()) {
        let reply = if case.path.starts_with("/api/auth/") {
            // A valid Basic credential for the token endpoints, a bearer token for reads.
            let basic = format!(
                "Basic {}",
                base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("{client_id}:{secret}"))
            );
            auth.send(build(&case, "authorization", &basic)).await
        } else {
            meetings.send(build(&case, "authorization", &format!("Bearer {token}"))).await
        };
        assert_ne!(reply.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", context(&case, &reply));
        assert_meeting_api(&case, &reply, &context(&case, &reply));
    }
}
