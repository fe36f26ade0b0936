//! Hardening of the backend (issue 9): secrets that cannot be redirected, PATCH validating what
//! it carries, references in the agent's order, 405 with `Allow`, a refused PUT keeping the key.

use http::Method;
use integration_tests::local_server::{Handler, LocalServer, respond};
use integration_tests::mcp_server::start_mcp_server;
use integration_tests::{Reply, TestClock, TestStack, call_api, create_record};
use platform_api::language_models::language_model_keys;
use platform_data::ids::LanguageModelId;
use platform_data::language_models::{ApiKeyError, LanguageModelStore, read_api_key};
use platform_data::secrets::RecordSecrets;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

fn error(reply: &Reply, status: u16, code: &str) -> Value {
    let body = reply.expect(status);
    assert_eq!(body["error"]["code"], code, "{body}");
    body["error"]["details"].clone()
}

/// The language model store and the stored keys, to look behind the API.
fn model_storage(stack: &TestStack) -> (LanguageModelStore, RecordSecrets<LanguageModelId>) {
    let store = LanguageModelStore::new(stack.dynamodb.clone(), stack.setting("LANGUAGE_MODELS_TABLE"));
    let keys = language_model_keys(
        aws_sdk_secretsmanager::Client::new(&stack.sdk),
        stack.setting("LANGUAGE_MODEL_SECRET_PREFIX"),
    );
    (store, keys)
}

/// A server that records the `authorization` header of every request and answers 401.
async fn start_recording_server() -> (LocalServer, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&seen);
    let handler: Handler = Arc::new(move |request| {
        let header = request.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        recorded.lock().unwrap().push(header);
        Box::pin(async { respond(401, "text/plain", "who are you") })
    });
    (LocalServer::start(handler).await, seen)
}

#[tokio::test]
async fn mcp_secret_headers_never_follow_a_changed_url() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let mcps = stack.mcps_service(&clock);
    let server = start_mcp_server(Some(("authorization", "Bearer sk-mcp"))).await;
    let (other, seen) = start_recording_server().await;
    let body =
        json!({"name": "weather", "url": server.url("/mcp"), "secret_headers": {"Authorization": "Bearer sk-mcp"}});
    let created = call_api(&mcps, Method::POST, "/mcps", &key, Some(body)).await.expect(201)["data"].clone();
    let id = created["id"].as_str().unwrap().to_owned();
    call_api(&mcps, Method::GET, &format!("/mcps/{id}/tools"), &key, None).await.expect(200);

    // A PUT moving the URL to another origin must send the secret headers again.
    let moved = json!({"name": "weather", "url": other.url("/mcp")});
    let reply = call_api(&mcps, Method::PUT, &format!("/mcps/{id}"), &key, Some(moved.clone())).await;
    let details = error(&reply, 422, "VALIDATION_ERROR");
    assert!(details["secret_headers"].as_str().unwrap().contains("another origin"), "{details}");
    // The same origin (another path) keeps them.
    let same_origin = json!({"name": "weather", "url": server.url("/mcp?v=2")});
    call_api(&mcps, Method::PUT, &format!("/mcps/{id}"), &key, Some(same_origin)).await.expect(200);

    // Even a record moved behind the API's back (a race, a restore of old data) does not send
    // them: the secret is bound to the origin it was stored for.
    let store = stack.mcp_configs();
    let mut config = store
        .get(created["account_id"].as_str().unwrap().parse().unwrap(), id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    let previous = config.clone();
    config.spec.url = other.url("/mcp");
    store.replace(&config, &previous).await.unwrap();
    let reply = call_api(&mcps, Method::GET, &format!("/mcps/{id}/tools"), &key, None).await;
    let details = error(&reply, 400, "BAD_REQUEST");
    assert!(details["secret_headers"].as_str().unwrap().contains("send it again"), "{details}");
    assert!(seen.lock().unwrap().iter().all(|header| !header.contains("sk-mcp")), "{:?}", seen.lock().unwrap());

    // Sending them again with the new URL is accepted; `null` drops them.
    let resent =
        json!({"name": "weather", "url": other.url("/mcp"), "secret_headers": {"Authorization": "Bearer sk-2"}});
    call_api(&mcps, Method::PUT, &format!("/mcps/{id}"), &key, Some(resent)).await.expect(200);
    let dropped = json!({"name": "weather", "url": server.url("/mcp"), "secret_headers": null});
    let reply = call_api(&mcps, Method::PUT, &format!("/mcps/{id}"), &key, Some(dropped)).await;
    assert_eq!(reply.expect(200)["data"]["secret_header_names"], json!([]));
}

#[tokio::test]
async fn language_model_keys_never_follow_a_changed_base_url_or_provider() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let models = stack.language_models_service(&clock);
    let body = json!({"name": "Prod", "provider": "openai", "model_name": "gpt-x", "api_key": "sk-real"});
    let id = create_record(&models, "/language-models", &key, body).await;
    let path = format!("/language-models/{id}");
    let (store, keys) = model_storage(&stack);
    let stored = || async { store.get(account.into(), id.parse().unwrap()).await.unwrap().unwrap() };
    assert_eq!(read_api_key(&keys, &stored().await).await.unwrap().as_deref(), Some("sk-real"));

    for moved in [
        json!({"name": "Prod", "provider": "openai", "model_name": "gpt-x", "base_url": "https://collector.example.net/v1"}),
        json!({"name": "Prod", "provider": "anthropic", "model_name": "gpt-x"}),
    ] {
        let reply = call_api(&models, Method::PUT, &path, &key, Some(moved)).await;
        let details = error(&reply, 422, "VALIDATION_ERROR");
        assert!(details["api_key"].as_str().unwrap().contains("another origin"), "{details}");
    }
    // Renaming, or a base_url on the provider's own origin, keeps the key.
    let same = json!({"name": "Renamed", "provider": "openai", "model_name": "gpt-y", "base_url": "https://api.openai.com/v1"});
    call_api(&models, Method::PUT, &path, &key, Some(same)).await.expect(200);
    assert_eq!(read_api_key(&keys, &stored().await).await.unwrap().as_deref(), Some("sk-real"));

    // A record moved without the API: the key is refused for the new origin.
    let previous = stored().await;
    let mut moved = previous.clone();
    moved.spec.base_url = Some("https://collector.example.net/v1".into());
    store.replace(&moved, &previous).await.unwrap();
    assert!(matches!(read_api_key(&keys, &stored().await).await, Err(ApiKeyError::Refused(_))));

    // Sent again with the new base_url, the key is bound to it.
    let resent = json!({"name": "Renamed", "provider": "openai", "model_name": "gpt-y",
        "base_url": "https://collector.example.net/v1", "api_key": "sk-new"});
    call_api(&models, Method::PUT, &path, &key, Some(resent)).await.expect(200);
    assert_eq!(read_api_key(&keys, &stored().await).await.unwrap().as_deref(), Some("sk-new"));
}

#[tokio::test]
async fn a_language_model_put_refused_with_409_keeps_the_stored_key() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let models = stack.language_models_service(&clock);
    let first = json!({"name": "A", "provider": "openai", "model_name": "m", "api_key": "sk-a"});
    let id = create_record(&models, "/language-models", &key, first).await;
    let other = json!({"name": "B", "provider": "openai", "model_name": "m"});
    call_api(&models, Method::POST, "/language-models", &key, Some(other)).await.expect(201);

    for api_key in [json!("sk-replaced"), Value::Null] {
        let taken = json!({"name": "B", "provider": "openai", "model_name": "m", "api_key": api_key});
        let reply = call_api(&models, Method::PUT, &format!("/language-models/{id}"), &key, Some(taken)).await;
        error(&reply, 409, "CONFLICT");
    }
    let (store, keys) = model_storage(&stack);
    let model = store.get(account.into(), id.parse().unwrap()).await.unwrap().unwrap();
    assert!(model.spec.has_api_key);
    assert_eq!(read_api_key(&keys, &model).await.unwrap().as_deref(), Some("sk-a"));
}

#[tokio::test]
async fn patch_checks_only_the_references_it_sends_and_details_keep_the_agents_order() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.agents_service(&clock);
    let tools = stack.tools_service(&clock);
    let mut tool_ids = Vec::new();
    // Five tools: storage order (by random id) matches the agent's order once in 120.
    for name in ["zeta", "alpha", "mid", "omega", "beta"] {
        let body = json!({"name": name, "type": "http", "config": {"url": "https://api.example.com/x"}});
        tool_ids.push(create_record(&tools, "/tools", &key, body).await);
    }
    let body = json!({"type": "config", "name": "ordered", "framework": "chainlib", "language_model_id": "lm-1",
        "tools": tool_ids});
    let agent = create_record(&agents, "/agents/", &key, body).await;
    let detail = call_api(&agents, Method::GET, &format!("/agents/{agent}"), &key, None).await.expect(200);
    let shown: Vec<&str> =
        detail["data"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(shown, ["zeta", "alpha", "mid", "omega", "beta"]);

    // A tool deleted since does not block a PATCH that does not send `tools`…
    call_api(&tools, Method::DELETE, &format!("/tools/{}", tool_ids[1]), &key, None).await.expect(200);
    let path = format!("/agents/{agent}");
    let reply = call_api(&agents, Method::PATCH, &path, &key, Some(json!({"description": "x"}))).await;
    assert_eq!(reply.expect(200)["data"]["description"], "x");
    // …but a PATCH that sends `tools` is checked.
    let reply = call_api(&agents, Method::PATCH, &path, &key, Some(json!({"tools": tool_ids}))).await;
    let details = error(&reply, 422, "VALIDATION_ERROR");
    assert!(details["tools[1]"].as_str().unwrap().contains("does not exist"), "{details}");
}

#[tokio::test]
async fn method_not_allowed_answers_carry_allow() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let id = Uuid::new_v4();
    let agents = stack.agents_service(&clock);
    for (method, path, allow) in [
        (Method::DELETE, "/agents/".to_owned(), "GET, POST"),
        (Method::POST, format!("/agents/{id}"), "GET, PUT, PATCH, DELETE"),
        (Method::GET, format!("/agents/{id}/restore"), "POST"),
    ] {
        let reply = call_api(&agents, method, &path, &key, None).await;
        let details = error(&reply, 405, "METHOD_NOT_ALLOWED");
        assert_eq!(reply.header("allow"), Some(allow), "{path}");
        assert_eq!(details["allow"], allow);
    }
    let reply = call_api(&stack.mcps_service(&clock), Method::DELETE, "/mcps/connect", &key, None).await;
    error(&reply, 405, "METHOD_NOT_ALLOWED");
    assert_eq!(reply.header("allow"), Some("POST"));
    let reply = call_api(&stack.tools_service(&clock), Method::POST, &format!("/tools/{id}/script"), &key, None).await;
    error(&reply, 405, "METHOD_NOT_ALLOWED");
    assert_eq!(reply.header("allow"), Some("GET"));
    let reply = call_api(&stack.webhooks_service(&clock), Method::PUT, "/webhooks/events", &key, None).await;
    error(&reply, 405, "METHOD_NOT_ALLOWED");
    assert_eq!(reply.header("allow"), Some("GET"));
}

#[tokio::test]
async fn tenant_requests_never_reach_loopback_or_metadata_addresses_unless_allowed() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let server = start_mcp_server(None).await;
    let port = server.address.port();
    let guarded = stack.mcps_service_public_only(&clock);
    for url in [
        server.url("/mcp"),
        format!("http://localhost:{port}/mcp"),
        format!("http://[::ffff:127.0.0.1]:{port}/mcp"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let reply = call_api(&guarded, Method::POST, "/mcps/connect", &key, Some(json!({"url": url}))).await;
        let details = error(&reply, 400, "BAD_REQUEST");
        assert!(details["error"].as_str().unwrap().contains("private, loopback or link-local"), "{url}: {details}");
    }
    // Allowed by the operator's list (as `make dev` does), the same server answers.
    let allowed = stack.mcps_service(&clock);
    call_api(&allowed, Method::POST, "/mcps/connect", &key, Some(json!({"url": server.url("/mcp")}))).await.expect(200);

    // Flowtool sync goes through the same guard (the agents function as the template configures it).
    let env = stack.env.clone();
    let agents =
        platform_api::AgentsService::from_settings(&stack.aws(), &|name: &str| env.get(name).cloned()).unwrap();
    for base_url in [server.url(""), "http://169.254.169.254".to_owned()] {
        let body = json!({"base_url": base_url, "api_key": "k"});
        let reply = call_api(&agents, Method::POST, "/agents/flowtool/sync", &key, Some(body)).await;
        let details = error(&reply, 400, "BAD_REQUEST");
        assert!(details["error"].as_str().unwrap().contains("private, loopback or link-local"), "{details}");
    }
    // A base URL with a query string or fragment is refused.
    let body = json!({"base_url": "https://flows.example.com/?token=1", "api_key": "k"});
    let reply = call_api(&agents, Method::POST, "/agents/flowtool/sync", &key, Some(body)).await;
    assert_eq!(error(&reply, 422, "VALIDATION_ERROR")["base_url"], "must not have a query string or fragment");
}

#[test]
fn the_api_stage_is_throttled_by_parameters() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap();
    let template = stack::Template::parse(&text).unwrap();
    assert!(template.parameters.contains_key("ApiThrottlingRateLimit"));
    assert!(template.parameters.contains_key("ApiThrottlingBurstLimit"));
    let settings: Vec<&str> = text.lines().map(str::trim).collect();
    let at = settings.iter().position(|line| *line == "DefaultRouteSettings:").expect("stage throttling");
    assert_eq!(settings[at + 1], "ThrottlingRateLimit: !Ref ApiThrottlingRateLimit");
    assert_eq!(settings[at + 2], "ThrottlingBurstLimit: !Ref ApiThrottlingBurstLimit");
}

#[tokio::test]
async fn bodies_that_would_break_a_storage_limit_are_413_or_422_naming_the_field() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.agents_service(&clock);
    let agent = |patch: Value| {
        let mut body = json!({"type": "config", "name": "big", "framework": "chainlib", "language_model_id": "lm"});
        for (field, value) in patch.as_object().unwrap() {
            body[field] = value.clone();
        }
        body
    };

    // Over the function's body limit: 413 before anything parses the body.
    let reply =
        call_api(&agents, Method::POST, "/agents/", &key, Some(agent(json!({"instruction": "x".repeat(500_000)}))))
            .await;
    let details = error(&reply, 413, "PAYLOAD_TOO_LARGE");
    assert_eq!(details["body"], "must be at most 262144 bytes");
    // Within it, a field over its own limit: 422 naming the field.
    let reply =
        call_api(&agents, Method::POST, "/agents/", &key, Some(agent(json!({"instruction": "é".repeat(100_000)}))))
            .await;
    assert_eq!(error(&reply, 422, "VALIDATION_ERROR")["instruction"], "must be at most 131072 bytes");
    let reply = call_api(
        &agents,
        Method::POST,
        "/agents/",
        &key,
        Some(agent(json!({"metadata": {"blob": "x".repeat(70_000)}}))),
    )
    .await;
    assert_eq!(error(&reply, 422, "VALIDATION_ERROR")["metadata"], "must be at most 65536 bytes");
    // Nesting DynamoDB cannot store is refused before parsing, naming the field.
    let mut deep = json!(1);
    for _ in 0..40 {
        deep = json!({"n": deep});
    }
    let reply = call_api(&agents, Method::POST, "/agents/", &key, Some(agent(json!({"agent_config": deep})))).await;
    assert_eq!(error(&reply, 422, "VALIDATION_ERROR")["agent_config"], "must not nest deeper than 16 levels");
    // The same body shape through PATCH.
    let id = create_record(&agents, "/agents/", &key, agent(json!({}))).await;
    let reply = call_api(
        &agents,
        Method::PATCH,
        &format!("/agents/{id}"),
        &key,
        Some(json!({"description": "d".repeat(70_000)})),
    )
    .await;
    assert_eq!(error(&reply, 422, "VALIDATION_ERROR")["description"], "must be at most 65536 bytes");
    // A name of 255 four-byte characters is within the spec's 255 characters: stored, found again.
    let name = "𝄞".repeat(255);
    let reply = call_api(&agents, Method::POST, "/agents/", &key, Some(agent(json!({"name": name})))).await;
    assert_eq!(reply.expect(201)["data"]["name"], name);
    let reply = call_api(&agents, Method::POST, "/agents/", &key, Some(agent(json!({"name": name})))).await;
    error(&reply, 409, "CONFLICT");

    // Tools, MCP configurations, language models and webhook endpoints.
    let tools = stack.tools_service(&clock);
    let script = format!("def run():\n    return 1\n#{}\n", "x".repeat(300_000));
    let reply =
        call_api(&tools, Method::POST, "/tools", &key, Some(json!({"name": "t", "type": "custom", "script": script})))
            .await;
    assert_eq!(error(&reply, 422, "VALIDATION_ERROR")["script"], "must be at most 262144 bytes");
    let reply = call_api(
        &tools,
        Method::POST,
        "/tools",
        &key,
        Some(json!({"name": "t", "type": "http",
        "config": {"url": "https://x.example.com"}, "description": "x".repeat(700_000)})),
    )
    .await;
    error(&reply, 413, "PAYLOAD_TOO_LARGE");
    let mcps = stack.mcps_service(&clock);
    let reply = call_api(
        &mcps,
        Method::POST,
        "/mcps",
        &key,
        Some(json!({"name": "m", "url": "https://mcp.example.com/mcp",
        "metadata": {"x": "y".repeat(70_000)}})),
    )
    .await;
    assert_eq!(error(&reply, 422, "VALIDATION_ERROR")["metadata"], "must be at most 65536 bytes");
    let models = stack.language_models_service(&clock);
    let reply = call_api(
        &models,
        Method::POST,
        "/language-models",
        &key,
        Some(json!({"name": "l", "provider": "openai",
        "model_name": "m", "default_parameters": {"stop": vec!["x".repeat(1000); 70]}})),
    )
    .await;
    assert_eq!(error(&reply, 422, "VALIDATION_ERROR")["default_parameters"], "must be at most 65536 bytes");
    let webhooks = stack.webhooks_service(&clock);
    let reply = call_api(
        &webhooks,
        Method::POST,
        "/webhooks/endpoints",
        &key,
        Some(json!({"url": "https://hooks.example.com/x",
        "metadata": {"x": "y".repeat(300_000)}})),
    )
    .await;
    error(&reply, 413, "PAYLOAD_TOO_LARGE");
    let reply = call_api(
        &webhooks,
        Method::POST,
        "/webhooks/endpoints",
        &key,
        Some(json!({"url": "https://hooks.example.com/x",
        "metadata": deep})),
    )
    .await;
    assert_eq!(error(&reply, 422, "VALIDATION_ERROR")["metadata"], "must not nest deeper than 16 levels");
}
