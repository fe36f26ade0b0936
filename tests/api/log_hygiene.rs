//! The logs: a representative session of every kind of secret the platform handles (client
//! secrets and tokens, API keys, provider keys, MCP secret headers, webhook secrets), run through
//! the handlers as Lambda runs them (each request in its span) with the production log format at
//! `debug`, never logs one of them; and request lines name their route and caller.

use http::Method;
use integration_tests::model_server::{ModelServer, text_reply};
use integration_tests::{TestClock, TestStack, request};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use tracing::Instrument;
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

/// Sends `request` to `function` as `run_on_lambda` does: in the request's span.
async fn send(function: &impl http_api::HttpFunction, request: http_api::Request) -> (u16, Value) {
    let span = http_api::request_span(&request);
    let response = function.handle(request).instrument(span).await;
    let text = http_api::body_text(response.body());
    (response.status().as_u16(), serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn json_request(method: Method, path: &str, key: &str, body: Value) -> http_api::Request {
    request(method, path)
        .header("x-api-key", key)
        .header("content-type", "application/json")
        .body(http_api::Body::Text(body.to_string()))
        .unwrap()
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
    let form = format!("grant_type=client_credentials&client_id={client_id}&client_secret={client_secret}");
    let token_request = request(Method::POST, "/api/auth/token/")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(http_api::Body::Text(form))
        .unwrap();
    let (status, token) = send(&stack.auth_service(&clock), token_request).await;
    assert_eq!(status, 200);
    let token = token["access_token"].as_str().unwrap().to_owned();
    let meetings = request(Method::GET, "/api/v1/external/meeting/")
        .header("authorization", format!("Bearer {token}"))
        .body(http_api::Body::Empty)
        .unwrap();
    assert_eq!(send(&stack.meetings_service(&clock), meetings).await.0, 200);
    let wrong = format!("grant_type=client_credentials&client_id={client_id}&client_secret={client_secret}x");
    let wrong = request(Method::POST, "/api/auth/token/")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(http_api::Body::Text(wrong))
        .unwrap();
    assert_eq!(send(&stack.auth_service(&clock), wrong).await.0, 401);

    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let provider_key = "sk-live-7f3a9c1e5b2d8f40";
    let model = ModelServer::start(vec![text_reply("Logged?")]).await;
    let (status, lm) = send(
        &stack.language_models_service(&clock),
        json_request(
            Method::POST,
            "/language-models",
            &key,
            json!({"name": "lm", "provider": "openai_compatible", "model_name": "m",
                "base_url": model.base_url(), "api_key": provider_key}),
        ),
    )
    .await;
    assert_eq!(status, 201);
    let mcp_secret = "Bearer mcp-9d2c4e6a8b0f1357";
    let (status, _) = send(
        &stack.mcps_service(&clock),
        json_request(
            Method::POST,
            "/mcps",
            &key,
            json!({"name": "m", "url": "http://127.0.0.1:9/mcp", "secret_headers": {"Authorization": mcp_secret}}),
        ),
    )
    .await;
    assert_eq!(status, 201);
    let (status, endpoint) = send(
        &stack.webhooks_service(&clock),
        json_request(Method::POST, "/webhooks/endpoints", &key, json!({"url": "http://127.0.0.1:9/hook"})),
    )
    .await;
    assert_eq!(status, 201, "{endpoint}");
    let webhook_secret = endpoint["data"]["secret"].as_str().unwrap().to_owned();
    let (status, agent) = send(
        &stack.agents_service(&clock),
        json_request(
            Method::POST,
            "/agents/",
            &key,
            json!({"type": "config", "name": "a", "framework": "chainlib", "language_model_id": lm["data"]["id"]}),
        ),
    )
    .await;
    assert_eq!(status, 201);
    let agent = agent["data"]["id"].as_str().unwrap().to_owned();
    let run = json_request(Method::POST, &format!("/agents/{agent}/run"), &key, json!({"message": "hi"}));
    let span = http_api::request_span(&run);
    let response = http_api::StreamingFunction::handle(&stack.agent_runs_service(&clock), run).instrument(span).await;
    let streamed = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&streamed).contains("event: done"));
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
    ] {
        assert!(!logs.contains(secret), "the {what} was logged");
    }
    // Request lines carry their route and caller.
    let lines: Vec<Value> = logs.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    assert!(lines.len() > 5, "{logs}");
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
