//! Property tests of the JSON body validators (AgentCreate, tools, language models, MCP
//! configurations) and of the `X-API-Key` shape: any body gets a value or the documented
//! problems (400 `BAD_REQUEST` for malformed JSON and wrong types, 422 `VALIDATION_ERROR` for
//! rules), each naming at least one field with an issue, and never a panic.

use platform_data::agent_spec::parse_agent_spec;
use platform_data::api_keys::key_id_of;
use platform_data::language_models::parse_language_model;
use platform_data::mcp_configs::parse_mcp_config;
use platform_data::tools::parse_tool;
use platform_data::validation::{Problems, check_base_url, check_http_url};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Any JSON value, at most four levels deep.
fn json_values() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|n| serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)),
        any::<String>().prop_map(Value::String),
        Just(json!("00000000-0000-4000-8000-000000000000")),
        Just(json!("https://example.test/mcp")),
        Just(json!("")),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

/// Objects using the validators' own field names, with any values.
fn bodies() -> impl Strategy<Value = Vec<u8>> {
    const FIELDS: &[&str] = &[
        "type",
        "name",
        "framework",
        "account_id",
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
        "base_url",
        "api_key",
        "default_parameters",
        "stream_timeouts",
        "url",
        "transport",
        "headers",
        "secret_headers",
        "timeout_seconds",
        "mcp_id",
    ];
    const VALUES: &[&str] = &[
        "config",
        "a2a",
        "flowtool",
        "custom",
        "http",
        "chainlib",
        "openai",
        "azure_openai",
        "streamable_http",
        "def run():\n    pass\n",
    ];
    let field = (0..FIELDS.len(), prop_oneof![json_values(), (0..VALUES.len()).prop_map(|i| json!(VALUES[i]))]);
    prop_oneof![
        prop::collection::vec(field, 0..10).prop_map(|fields| {
            let object: Map<String, Value> =
                fields.into_iter().map(|(name, value)| (FIELDS[name].to_owned(), value)).collect();
            Value::Object(object).to_string().into_bytes()
        }),
        json_values().prop_map(|value| value.to_string().into_bytes()),
        any::<Vec<u8>>(),
    ]
}

/// A refusal is documented when it names at least one field, each with an issue. (A field may
/// be named `""`: an unknown key `""` in the body is reported as itself.)
fn assert_documented<T>(result: Result<T, Problems>) -> Result<(), TestCaseError> {
    if let Err(problems) = result {
        prop_assert!(!problems.fields.is_empty(), "{:?}", problems);
        prop_assert!(problems.fields.values().all(|issue| !issue.is_empty()), "{:?}", problems);
    }
    Ok(())
}

proptest! {
    // No regression files: this test target has no lib.rs beside it to put them next to.
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_agent_body_is_valid_or_documented(body in bodies()) {
        assert_documented(parse_agent_spec(&body))?;
    }

    #[test]
    fn any_tool_body_is_valid_or_documented(body in bodies()) {
        assert_documented(parse_tool(&body))?;
    }

    #[test]
    fn any_language_model_body_is_valid_or_documented(body in bodies()) {
        assert_documented(parse_language_model(&body))?;
    }

    #[test]
    fn any_mcp_body_is_valid_or_documented(body in bodies(), name_required in any::<bool>()) {
        assert_documented(parse_mcp_config(&body, name_required))?;
    }

    #[test]
    fn any_url_is_checked(url in prop_oneof![any::<String>(), "(https?|ftp)://[ -~]{0,40}"]) {
        let _ = check_http_url(&url);
        let _ = check_base_url(&url);
    }

    #[test]
    fn any_api_key_has_an_id_or_none(key in prop_oneof![any::<String>(), "[A-Za-z0-9_-]{0,16}\\.[A-Za-z0-9_.-]{0,43}"]) {
        if let Some(key_id) = key_id_of(&key) {
            prop_assert!(!key_id.is_empty() && !key_id.contains('.'));
            prop_assert!(key.len() > key_id.len() + 1);
        }
    }
}

#[test]
fn deeply_nested_bodies_are_refused_not_a_crash() {
    // serde_json stops at 128 levels; deeper bodies are 400, never a stack overflow.
    for depth in [127, 129, 100_000] {
        let body = format!("{{\"metadata\": {}1{}}}", "[".repeat(depth), "]".repeat(depth));
        let _ = parse_agent_spec(body.as_bytes());
        let _ = parse_tool(body.as_bytes());
    }
}
