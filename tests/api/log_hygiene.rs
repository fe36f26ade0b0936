//! The logs: a representative session of every kind of secret the platform handles (client
//! secrets and tokens, API keys, provider keys, MCP secret headers, webhook secrets), run through
//! the handlers as Lambda runs them (each request in its span) with the production log format at
//! `debug`, never logs one of them; and request lines name their route and caller.

use integration_tests::model_server::{ModelServer, text_reply};
use integration_tests::{TestClock, TestStack};
use meeting_api::{AuthService, MeetingsService};
use platform_api::{AgentRunsService, AgentsService, LanguageModelsService, McpsService, WebhooksService};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Log lines written to memory.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn no_secret_reaches_the_logs_and_request_lines_name_their_route_and_caller() {
    integration_tests::defer_logs_to_scoped_subscribers();
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber =
        http_api::json_logs(tracing_subscriber::filter::LevelFilter::DEBUG, move || writer.clone()).finish();
    // The test runs on one thread (and so do the tasks it spawns): the subscriber sees them all.
    let _logging = tracing::subscriber::set_default(subscriber);

    let stack = TestStack::new().await;
    let clock = TestClock::new();
    stack.import(&integration_tests::demo_fixture()).await;
    let (client_id, client_secret) = stack.create_app(&[1]).await;
    // Every call is made in its request's span, as Lambda makes it (the TestClient's way).
    let auth = stack.client::<AuthService>(&clock);
    let form = [("grant_type", "client_credentials"), ("client_id", &client_id), ("client_secret", &client_secret)];
    let token = auth.post_form("/api/auth/token/", &form).expect(200).await;
    let token = token["access_token"].as_str().unwrap().to_owned();
    let meetings = stack.client::<MeetingsService>(&clock).with_token(&token);
    meetings.get("/api/v1/external/meeting/").expect(200).await;
    let wrong_secret = format!("{client_secret}x");
    let wrong = [("grant_type", "client_credentials"), ("client_id", &client_id), ("client_secret", &wrong_secret)];
    auth.post_form("/api/auth/token/", &wrong).expect(401).await;

    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let provider_key = "sk-live-7f3a9c1e5b2d8f40";
    let model = ModelServer::start(vec![text_reply("Logged?")]).await;
    let models = stack.client::<LanguageModelsService>(&clock).with_key(&key);
    let lm = models
        .post(
            "/language-models",
            json!({"name": "lm", "provider": "openai_compatible", "model_name": "m",
                "base_url": model.base_url(), "api_key": provider_key}),
        )
        .created()
        .await;
    let mcp_secret = "Bearer mcp-9d2c4e6a8b0f1357";
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let mcp = json!({"name": "m", "url": "http://127.0.0.1:9/mcp", "secret_headers": {"Authorization": mcp_secret}});
    mcps.post("/mcps", mcp).expect(201).await;
    // A tenant's URL may carry a token in its query: a failed connection logs the URL without it.
    let url_token = "mcp-query-token-3e1f9a";
    let refused = mcps.post("/mcps/connect", json!({"url": format!("http://127.0.0.1:9/mcp?api_key={url_token}")}));
    refused.expect(400).await;
    // So does a request's own query string (its span names the route's path only).
    let query_token = "query-token-5b7d2c";
    stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .get(&format!("/agents/?api_key={query_token}"))
        .expect(200)
        .await;
    let webhooks = stack.client::<WebhooksService>(&clock).with_key(&key);
    let endpoint = webhooks.post("/webhooks/endpoints", json!({"url": "http://127.0.0.1:9/hook"})).expect(201).await;
    let webhook_secret = endpoint["data"]["secret"].as_str().unwrap().to_owned();
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let agent = json!({"type": "config", "name": "a", "framework": "chainlib", "language_model_id": lm});
    let agent = agents.post("/agents/", agent).created().await;
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let streamed = runs.post(&format!("/agents/{agent}/run"), json!({"message": "hi"})).send().await;
    assert!(streamed.text.contains("event: done"), "{}", streamed.text);
    assert_eq!(model.authorizations.lock().unwrap()[0], format!("Bearer {provider_key}"), "the key was used");

    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    for (what, secret) in [
        ("client secret", client_secret.as_str()),
        ("access token", token.as_str()),
        ("API key", key.as_str()),
        ("API key secret part", key.split('.').nth(1).unwrap()),
        ("provider key", provider_key),
        ("MCP secret header", mcp_secret),
        ("webhook secret", webhook_secret.as_str()),
        ("webhook secret body", webhook_secret.trim_start_matches("whsec_")),
        ("token in a tenant URL's query", url_token),
        ("token in a request's query", query_token),
    ] {
        assert!(!logs.contains(secret), "the {what} was logged");
    }
    // Request lines carry their route and caller.
    let lines: Vec<Value> = logs.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    assert!(lines.len() > 5, "{logs}");
    let unreachable = lines
        .iter()
        .find(|line| line["fields"]["message"] == "MCP server refused or unreachable")
        .unwrap_or_else(|| panic!("no connection line in {logs}"));
    assert_eq!(unreachable["fields"]["url"], "http://127.0.0.1:9/mcp");
    let created = lines
        .iter()
        .find(|line| line["fields"]["message"] == "language model created")
        .unwrap_or_else(|| panic!("no creation line in {logs}"));
    assert_eq!(created["span"]["route"], "POST /language-models");
    assert_eq!(created["span"]["account_id"], account.to_string());
    let issued = lines.iter().find(|line| line["fields"]["message"] == "access token issued").unwrap();
    assert_eq!(
        (issued["span"]["route"].as_str(), issued["span"]["client_id"].as_str()),
        (Some("POST /api/auth/token/"), Some(client_id.as_str()))
    );
}
