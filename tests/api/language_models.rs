//! `/language-models`: write-only keys in Secrets Manager, validation, isolation, delete rules.

use http::Method;
use integration_tests::{Reply, TestClock, TestStack, call_api};
use serde_json::{Value, json};
use uuid::Uuid;

fn error(reply: &Reply, status: u16, code: &str) -> Value {
    let body = reply.expect(status);
    assert_eq!(body["error"]["code"], code, "{body}");
    body["error"]["details"].clone()
}

/// The stored key: the `value` of its origin-bound form `{"origin", "value"}`.
async fn secret(stack: &TestStack, account: Uuid, id: &str) -> Option<String> {
    let name = format!("{}{account}/{id}", stack.env["LANGUAGE_MODEL_SECRET_PREFIX"]);
    let client = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    let stored = client.get_secret_value().secret_id(name).send().await.ok()?.secret_string()?.to_owned();
    let stored: Value = serde_json::from_str(&stored).unwrap();
    stored["value"].as_str().map(str::to_owned)
}

#[tokio::test]
async fn keys_are_write_only_and_kept_in_secrets_manager() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let service = stack.language_models_service(&clock);
    let body = json!({"name": "Prod GPT", "provider": "openai", "model_name": "gpt-x", "api_key": "sk-secret-1",
        "default_parameters": {"temperature": 0.2}, "description": "main"});
    let reply = call_api(&service, Method::POST, "/language-models", &key, Some(body)).await;
    assert!(!reply.text.contains("sk-secret-1"));
    let created = reply.expect(201)["data"].clone();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["has_api_key"], true);
    assert_eq!(created["default_parameters"], json!({"temperature": 0.2}));
    assert!(created.get("api_key").is_none());
    assert_eq!(secret(&stack, account, &id).await.as_deref(), Some("sk-secret-1"));

    let path = format!("/language-models/{id}");
    let fetched = call_api(&service, Method::GET, &path, &key, None).await;
    assert!(!fetched.text.contains("sk-secret-1"));
    assert_eq!(fetched.expect(200)["data"]["has_api_key"], true);

    // PUT without api_key keeps it; a new one replaces it; null removes it.
    let replace = |extra: Value| {
        let mut body = json!({"name": "Prod GPT", "provider": "openai", "model_name": "gpt-y"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let kept = call_api(&service, Method::PUT, &path, &key, Some(replace(json!({})))).await.expect(200);
    assert_eq!(
        (kept["data"]["has_api_key"].as_bool(), kept["data"]["model_name"].as_str()),
        (Some(true), Some("gpt-y"))
    );
    call_api(&service, Method::PUT, &path, &key, Some(replace(json!({"api_key": "sk-2"})))).await.expect(200);
    assert_eq!(secret(&stack, account, &id).await.as_deref(), Some("sk-2"));
    let removed =
        call_api(&service, Method::PUT, &path, &key, Some(replace(json!({"api_key": null})))).await.expect(200);
    assert_eq!(removed["data"]["has_api_key"], false);
    assert_eq!(secret(&stack, account, &id).await, None);

    let list = call_api(&service, Method::GET, "/language-models?limit=5", &key, None).await.expect(200);
    assert_eq!(list["pagination"], json!({"page": 1, "limit": 5, "total": 1, "pages": 1}));
    assert_eq!(list["data"][0]["id"], id);
}

#[tokio::test]
async fn stream_timeouts_are_validated_and_shown_with_the_defaults_as_null() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let service = stack.language_models_service(&clock);
    let body =
        |timeouts: Value| json!({"name": "Slow", "provider": "openai", "model_name": "o", "stream_timeouts": timeouts});
    let post = |body: Value| call_api(&service, Method::POST, "/language-models", &key, Some(body));
    let details =
        error(&post(body(json!({"idle_seconds": 0, "first_byte_seconds": 3600}))).await, 422, "VALIDATION_ERROR");
    assert_eq!(details["stream_timeouts.idle_seconds"], "must be a whole number of seconds from 1 to 900");
    assert!(details["stream_timeouts.first_byte_seconds"].is_string(), "{details}");
    let details = error(&post(body(json!({"total_seconds": 60}))).await, 422, "VALIDATION_ERROR");
    assert_eq!(details["stream_timeouts.total_seconds"], "unknown field");
    error(&post(body(json!(60))).await, 400, "BAD_REQUEST");

    let created = post(body(json!({"idle_seconds": 300}))).await.expect(201)["data"].clone();
    assert_eq!(created["stream_timeouts"], json!({"first_byte_seconds": null, "idle_seconds": 300}));
    let path = format!("/language-models/{}", created["id"].as_str().unwrap());
    let fetched = call_api(&service, Method::GET, &path, &key, None).await.expect(200);
    assert_eq!(fetched["data"]["stream_timeouts"], created["stream_timeouts"]);
    // A replacement without the field goes back to the defaults.
    let replacing = json!({"name": "Slow", "provider": "openai", "model_name": "o"});
    let replaced = call_api(&service, Method::PUT, &path, &key, Some(replacing)).await.expect(200);
    assert_eq!(replaced["data"]["stream_timeouts"], json!({"first_byte_seconds": null, "idle_seconds": null}));
}

#[tokio::test]
async fn validation_conflicts_and_isolation() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let other = stack.api_key(Uuid::new_v4()).await;
    let service = stack.language_models_service(&clock);
    let post = |key: String, body: Value| {
        let service = &service;
        async move { call_api(service, Method::POST, "/language-models", &key, Some(body)).await }
    };
    error(&post(key.clone(), json!({"name": 5})).await, 400, "BAD_REQUEST");
    let details = error(
        &post(key.clone(), json!({"name": "L", "provider": "gemini", "model_name": "m"})).await,
        422,
        "VALIDATION_ERROR",
    );
    assert!(details["provider"].is_string());
    let details = error(
        &post(key.clone(), json!({"name": "L", "provider": "azure_openai", "model_name": "m"})).await,
        422,
        "VALIDATION_ERROR",
    );
    assert!(details["base_url"].is_string());

    let model = json!({"name": "Local", "provider": "openai_compatible", "model_name": "m", "base_url": "http://127.0.0.1:8080/v1"});
    let id = post(key.clone(), model.clone()).await.expect(201)["data"]["id"].as_str().unwrap().to_owned();
    error(&post(key.clone(), model.clone()).await, 409, "CONFLICT");
    post(other.clone(), model).await.expect(201);

    let path = format!("/language-models/{id}");
    for method in [Method::GET, Method::DELETE] {
        error(&call_api(&service, method, &path, &other, None).await, 404, "RESOURCE_NOT_FOUND");
    }
    error(&call_api(&service, Method::GET, "/language-models/xyz", &key, None).await, 422, "VALIDATION_ERROR");
}

#[tokio::test]
async fn a_model_agents_use_cannot_be_deleted() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let models = stack.language_models_service(&clock);
    let agents = stack.agents_service(&clock);
    let created = call_api(
        &models,
        Method::POST,
        "/language-models",
        &key,
        Some(json!({"name": "Used", "provider": "anthropic", "model_name": "m", "api_key": "k"})),
    )
    .await
    .expect(201);
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    let agent = call_api(
        &agents,
        Method::POST,
        "/agents/",
        &key,
        Some(json!({"type": "config", "name": "User", "framework": "chainlib", "language_model_id": id})),
    )
    .await
    .expect(201)["data"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let path = format!("/language-models/{id}");
    let details = error(&call_api(&models, Method::DELETE, &path, &key, None).await, 409, "CONFLICT");
    assert_eq!(details["agents"], json!([agent]));

    // Once no agent names it, it can go, with its key.
    let patch = json!({"language_model_id": null, "provider": "anthropic", "model_name": "m"});
    call_api(&agents, Method::PATCH, &format!("/agents/{agent}"), &key, Some(patch)).await.expect(200);
    let deleted = call_api(&models, Method::DELETE, &path, &key, None).await.expect(200);
    assert_eq!(deleted["data"]["id"], id);
    error(&call_api(&models, Method::GET, &path, &key, None).await, 404, "RESOURCE_NOT_FOUND");
    assert_eq!(secret(&stack, account, &id).await, None);
    // The name is free again.
    call_api(
        &models,
        Method::POST,
        "/language-models",
        &key,
        Some(json!({"name": "Used", "provider": "bedrock", "model_name": "m"})),
    )
    .await
    .expect(201);
}
