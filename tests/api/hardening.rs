//! Hardening of the backend (issue 9): secrets that cannot be redirected, PATCH validating what
//! it carries, references in the agent's order, 405 with `Allow`, a refused PUT keeping the key.

use http::Method;
use integration_tests::local_server::{Handler, LocalServer, respond};
use integration_tests::mcp_server::start_mcp_server;
use integration_tests::{TestClock, TestStack};
use platform_api::language_models::language_model_keys;
use platform_api::settings::OUTBOUND_ALLOWED_HOSTS;
use platform_api::{AgentsService, LanguageModelsService, McpsService, ToolsService, WebhooksService};
use platform_data::ids::LanguageModelId;
use platform_data::language_models::{ApiKeyError, LanguageModelStore, read_api_key};
use platform_data::secrets::RecordSecrets;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

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
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let server = start_mcp_server(Some(("authorization", "Bearer sk-mcp"))).await;
    let (other, seen) = start_recording_server().await;
    let body =
        json!({"name": "weather", "url": server.url("/mcp"), "secret_headers": {"Authorization": "Bearer sk-mcp"}});
    let created = mcps.post("/mcps", body).expect(201).await["data"].clone();
    let id = created["id"].as_str().unwrap().to_owned();
    mcps.get(&format!("/mcps/{id}/tools")).expect(200).await;

    // A PUT moving the URL to another origin must send the secret headers again.
    let moved = json!({"name": "weather", "url": other.url("/mcp")});
    let details =
        mcps.put(&format!("/mcps/{id}"), moved.clone()).error(422, "VALIDATION_ERROR").await["details"].clone();
    assert!(details["secret_headers"].as_str().unwrap().contains("another origin"), "{details}");
    // The same origin (another path) keeps them.
    let same_origin = json!({"name": "weather", "url": server.url("/mcp?v=2")});
    mcps.put(&format!("/mcps/{id}"), same_origin).expect(200).await;

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
    let details = mcps.get(&format!("/mcps/{id}/tools")).error(400, "BAD_REQUEST").await["details"].clone();
    assert!(details["secret_headers"].as_str().unwrap().contains("send it again"), "{details}");
    assert!(seen.lock().unwrap().iter().all(|header| !header.contains("sk-mcp")), "{:?}", seen.lock().unwrap());

    // Sending them again with the new URL is accepted; `null` drops them.
    let resent =
        json!({"name": "weather", "url": other.url("/mcp"), "secret_headers": {"Authorization": "Bearer sk-2"}});
    mcps.put(&format!("/mcps/{id}"), resent).expect(200).await;
    let dropped = json!({"name": "weather", "url": server.url("/mcp"), "secret_headers": null});
    let kept = mcps.put(&format!("/mcps/{id}"), dropped).expect(200).await;
    assert_eq!(kept["data"]["secret_header_names"], json!([]));
}

#[tokio::test]
async fn language_model_keys_never_follow_a_changed_base_url_or_provider() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let models = stack.client::<LanguageModelsService>(&clock).with_key(&key);
    let body = json!({"name": "Prod", "provider": "openai", "model_name": "gpt-x", "api_key": "sk-real"});
    let id = models.post("/language-models", body).created().await;
    let path = format!("/language-models/{id}");
    let (store, keys) = model_storage(&stack);
    let stored = || async { store.get(account.into(), id.parse().unwrap()).await.unwrap().unwrap() };
    assert_eq!(read_api_key(&keys, &stored().await).await.unwrap().as_deref(), Some("sk-real"));

    for moved in [
        json!({"name": "Prod", "provider": "openai", "model_name": "gpt-x", "base_url": "https://collector.example.net/v1"}),
        json!({"name": "Prod", "provider": "anthropic", "model_name": "gpt-x"}),
    ] {
        let details = models.put(&path, moved).error(422, "VALIDATION_ERROR").await["details"].clone();
        assert!(details["api_key"].as_str().unwrap().contains("another origin"), "{details}");
    }
    // Renaming, or a base_url on the provider's own origin, keeps the key.
    let same = json!({"name": "Renamed", "provider": "openai", "model_name": "gpt-y", "base_url": "https://api.openai.com/v1"});
    models.put(&path, same).expect(200).await;
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
    models.put(&path, resent).expect(200).await;
    assert_eq!(read_api_key(&keys, &stored().await).await.unwrap().as_deref(), Some("sk-new"));
}

#[tokio::test]
async fn a_language_model_put_refused_with_409_keeps_the_stored_key() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let models = stack.client::<LanguageModelsService>(&clock).with_key(&key);
    let first = json!({"name": "A", "provider": "openai", "model_name": "m", "api_key": "sk-a"});
    let id = models.post("/language-models", first).created().await;
    let other = json!({"name": "B", "provider": "openai", "model_name": "m"});
    models.post("/language-models", other).expect(201).await;

    for api_key in [json!("sk-replaced"), Value::Null] {
        let taken = json!({"name": "B", "provider": "openai", "model_name": "m", "api_key": api_key});
        models.put(&format!("/language-models/{id}"), taken).error(409, "CONFLICT").await;
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
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let mut tool_ids = Vec::new();
    // Five tools: storage order (by random id) matches the agent's order once in 120.
    for name in ["zeta", "alpha", "mid", "omega", "beta"] {
        let body = json!({"name": name, "type": "http", "config": {"url": "https://api.example.com/x"}});
        tool_ids.push(tools.post("/tools", body).created().await);
    }
    let body = json!({"type": "config", "name": "ordered", "framework": "chainlib", "language_model_id": "lm-1",
        "tools": tool_ids});
    let agent = agents.post("/agents/", body).created().await;
    let detail = agents.get(&format!("/agents/{agent}")).expect(200).await;
    let shown: Vec<&str> =
        detail["data"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(shown, ["zeta", "alpha", "mid", "omega", "beta"]);

    // A tool deleted since does not block a PATCH that does not send `tools`…
    tools.delete(&format!("/tools/{}", tool_ids[1])).expect(200).await;
    let path = format!("/agents/{agent}");
    let patched = agents.patch(&path, json!({"description": "x"})).expect(200).await;
    assert_eq!(patched["data"]["description"], "x");
    // …but a PATCH that sends `tools` is checked.
    let details =
        agents.patch(&path, json!({"tools": tool_ids})).error(422, "VALIDATION_ERROR").await["details"].clone();
    assert!(details["tools[1]"].as_str().unwrap().contains("does not exist"), "{details}");
}

#[tokio::test]
async fn method_not_allowed_answers_carry_allow() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let id = Uuid::new_v4();
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    for (method, path, allow) in [
        (Method::DELETE, "/agents/".to_owned(), "GET, POST"),
        (Method::POST, format!("/agents/{id}"), "GET, PUT, PATCH, DELETE"),
        (Method::GET, format!("/agents/{id}/restore"), "POST"),
    ] {
        let reply = agents.request(method, &path).send().await;
        let refused = reply.error(405, "METHOD_NOT_ALLOWED");
        assert_eq!(reply.header("allow"), Some(allow), "{path}");
        assert_eq!(refused["details"]["allow"], allow);
    }
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let reply = mcps.delete("/mcps/connect").send().await;
    reply.error(405, "METHOD_NOT_ALLOWED");
    assert_eq!(reply.header("allow"), Some("POST"));
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let reply = tools.request(Method::POST, &format!("/tools/{id}/script")).send().await;
    reply.error(405, "METHOD_NOT_ALLOWED");
    assert_eq!(reply.header("allow"), Some("GET"));
    let webhooks = stack.client::<WebhooksService>(&clock).with_key(&key);
    let reply = webhooks.request(Method::PUT, "/webhooks/events").send().await;
    reply.error(405, "METHOD_NOT_ALLOWED");
    assert_eq!(reply.header("allow"), Some("GET"));
}

#[tokio::test]
async fn tenant_requests_never_reach_loopback_or_metadata_addresses_unless_allowed() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let server = start_mcp_server(None).await;
    let port = server.address.port();
    // The production address policy (no allow-list), as in AWS.
    let in_aws = stack.with_settings(&[(OUTBOUND_ALLOWED_HOSTS, "")]);
    let guarded = in_aws.client::<McpsService>(&clock).with_key(&key);
    for url in [
        server.url("/mcp"),
        format!("http://localhost:{port}/mcp"),
        format!("http://[::ffff:127.0.0.1]:{port}/mcp"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let refused = guarded.post("/mcps/connect", json!({"url": url})).error(400, "BAD_REQUEST").await;
        let reason = refused["details"]["error"].as_str().unwrap();
        assert!(reason.contains("private, loopback or link-local"), "{url}: {refused}");
    }
    // Allowed by the operator's list (as `make dev` does), the same server answers.
    let allowed = stack.client::<McpsService>(&clock).with_key(&key);
    allowed.post("/mcps/connect", json!({"url": server.url("/mcp")})).expect(200).await;

    // Flowtool sync goes through the same guard (the agents function as the template configures it).
    let agents = in_aws.client::<AgentsService>(&clock).with_key(&key);
    for base_url in [server.url(""), "http://169.254.169.254".to_owned()] {
        let body = json!({"base_url": base_url, "api_key": "k"});
        let refused = agents.post("/agents/flowtool/sync", body).error(400, "BAD_REQUEST").await;
        let reason = refused["details"]["error"].as_str().unwrap();
        assert!(reason.contains("private, loopback or link-local"), "{refused}");
    }
    // A base URL with a query string or fragment is refused.
    let body = json!({"base_url": "https://flows.example.com/?token=1", "api_key": "k"});
    let refused = agents.post("/agents/flowtool/sync", body).error(422, "VALIDATION_ERROR").await;
    assert_eq!(refused["details"]["base_url"], "must not have a query string or fragment");
}

#[test]
fn the_api_stage_is_throttled_by_parameters() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap();
    let template = stack::Template::parse(&text).unwrap();
    assert!(template.parameters.contains_key("ApiThrottlingRateLimit"));
    assert!(template.parameters.contains_key("ApiThrottlingBurstLimit"));
    // Both REST APIs' stages, every method (tests/template checks it on SAM's transform).
    let settings: Vec<&str> = text.lines().map(str::trim).collect();
    let stages: Vec<usize> = (0..settings.len()).filter(|&at| settings[at] == r#"- ResourcePath: "/*""#).collect();
    assert_eq!(stages.len(), 2, "stage throttling on Api and RunnerApi");
    for at in stages {
        assert_eq!(settings[at + 1], r#"HttpMethod: "*""#);
        assert_eq!(settings[at + 2], "ThrottlingRateLimit: !Ref ApiThrottlingRateLimit");
        assert_eq!(settings[at + 3], "ThrottlingBurstLimit: !Ref ApiThrottlingBurstLimit");
    }
}

#[tokio::test]
async fn bodies_that_would_break_a_storage_limit_are_413_or_422_naming_the_field() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let agent = |patch: Value| {
        let mut body = json!({"type": "config", "name": "big", "framework": "chainlib", "language_model_id": "lm"});
        for (field, value) in patch.as_object().unwrap() {
            body[field] = value.clone();
        }
        body
    };

    // Over the function's body limit: 413 before anything parses the body.
    let details = agents
        .post("/agents/", agent(json!({"instruction": "x".repeat(500_000)})))
        .error(413, "PAYLOAD_TOO_LARGE")
        .await["details"]
        .clone();
    assert_eq!(details["body"], "must be at most 262144 bytes");
    // Within it, a field over its own limit: 422 naming the field.
    let refused = agents.post("/agents/", agent(json!({"instruction": "é".repeat(100_000)})));
    assert_eq!(refused.error(422, "VALIDATION_ERROR").await["details"]["instruction"], "must be at most 131072 bytes");
    let refused = agents.post("/agents/", agent(json!({"metadata": {"blob": "x".repeat(70_000)}})));
    assert_eq!(refused.error(422, "VALIDATION_ERROR").await["details"]["metadata"], "must be at most 65536 bytes");
    // Nesting DynamoDB cannot store is refused before parsing, naming the field.
    let mut deep = json!(1);
    for _ in 0..40 {
        deep = json!({"n": deep});
    }
    let refused = agents.post("/agents/", agent(json!({"agent_config": deep})));
    let refused = refused.error(422, "VALIDATION_ERROR").await;
    assert_eq!(refused["details"]["agent_config"], "must not nest deeper than 16 levels");
    // The same body shape through PATCH.
    let id = agents.post("/agents/", agent(json!({}))).created().await;
    let refused = agents.patch(&format!("/agents/{id}"), json!({"description": "d".repeat(70_000)}));
    assert_eq!(refused.error(422, "VALIDATION_ERROR").await["details"]["description"], "must be at most 65536 bytes");
    // A name of 255 four-byte characters is within the spec's 255 characters: stored, found again.
    let name = "𝄞".repeat(255);
    let created = agents.post("/agents/", agent(json!({"name": name}))).expect(201).await;
    assert_eq!(created["data"]["name"], name);
    agents.post("/agents/", agent(json!({"name": name}))).error(409, "CONFLICT").await;

    // Tools, MCP configurations, language models and webhook endpoints.
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let script = format!("def run():\n    return 1\n#{}\n", "x".repeat(300_000));
    let refused = tools.post("/tools", json!({"name": "t", "type": "custom", "script": script}));
    assert_eq!(refused.error(422, "VALIDATION_ERROR").await["details"]["script"], "must be at most 262144 bytes");
    let body = json!({"name": "t", "type": "http", "config": {"url": "https://x.example.com"},
        "description": "x".repeat(700_000)});
    tools.post("/tools", body).error(413, "PAYLOAD_TOO_LARGE").await;
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let body = json!({"name": "m", "url": "https://mcp.example.com/mcp", "metadata": {"x": "y".repeat(70_000)}});
    let refused = mcps.post("/mcps", body).error(422, "VALIDATION_ERROR").await;
    assert_eq!(refused["details"]["metadata"], "must be at most 65536 bytes");
    let models = stack.client::<LanguageModelsService>(&clock).with_key(&key);
    let body = json!({"name": "l", "provider": "openai", "model_name": "m",
        "default_parameters": {"stop": vec!["x".repeat(1000); 70]}});
    let refused = models.post("/language-models", body).error(422, "VALIDATION_ERROR").await;
    assert_eq!(refused["details"]["default_parameters"], "must be at most 65536 bytes");
    let webhooks = stack.client::<WebhooksService>(&clock).with_key(&key);
    let body = json!({"url": "https://hooks.example.com/x", "metadata": {"x": "y".repeat(300_000)}});
    webhooks.post("/webhooks/endpoints", body).error(413, "PAYLOAD_TOO_LARGE").await;
    let body = json!({"url": "https://hooks.example.com/x", "metadata": deep});
    let refused = webhooks.post("/webhooks/endpoints", body).error(422, "VALIDATION_ERROR").await;
    assert_eq!(refused["details"]["metadata"], "must not nest deeper than 16 levels");
}
