//! `/language-models`: write-only keys in Secrets Manager, validation, isolation, delete rules.

use integration_tests::{TestClock, TestStack};
use platform_api::{AgentsService, LanguageModelsService};
use serde_json::{Value, json};
use uuid::Uuid;

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
    let api = stack.client::<LanguageModelsService>(&clock).with_key(&key);
    let body = json!({"name": "Prod GPT", "provider": "openai", "model_name": "gpt-x", "api_key": "sk-secret-1",
        "default_parameters": {"temperature": 0.2}, "description": "main"});
    let reply = api.post("/language-models", body).send().await;
    assert!(!reply.text.contains("sk-secret-1"));
    let created = reply.expect(201)["data"].clone();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["has_api_key"], true);
    assert_eq!(created["default_parameters"], json!({"temperature": 0.2}));
    assert!(created.get("api_key").is_none());
    assert_eq!(secret(&stack, account, &id).await.as_deref(), Some("sk-secret-1"));

    let path = format!("/language-models/{id}");
    let fetched = api.get(&path).send().await;
    assert!(!fetched.text.contains("sk-secret-1"));
    assert_eq!(fetched.expect(200)["data"]["has_api_key"], true);

    // PUT without api_key keeps it; a new one replaces it; null removes it.
    let replace = |extra: Value| {
        let mut body = json!({"name": "Prod GPT", "provider": "openai", "model_name": "gpt-y"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let kept = api.put(&path, replace(json!({}))).expect(200).await;
    assert_eq!(
        (kept["data"]["has_api_key"].as_bool(), kept["data"]["model_name"].as_str()),
        (Some(true), Some("gpt-y"))
    );
    api.put(&path, replace(json!({"api_key": "sk-2"}))).expect(200).await;
    assert_eq!(secret(&stack, account, &id).await.as_deref(), Some("sk-2"));
    let removed = api.put(&path, replace(json!({"api_key": null}))).expect(200).await;
    assert_eq!(removed["data"]["has_api_key"], false);
    assert_eq!(secret(&stack, account, &id).await, None);

    let list = api.get("/language-models?limit=5").expect(200).await;
    assert_eq!(list["pagination"], json!({"page": 1, "limit": 5, "total": 1, "pages": 1}));
    assert_eq!(list["data"][0]["id"], id);
}

#[tokio::test]
async fn stream_timeouts_are_validated_and_shown_with_the_defaults_as_null() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let api = stack.client::<LanguageModelsService>(&clock).with_key(&key);
    let body =
        |timeouts: Value| json!({"name": "Slow", "provider": "openai", "model_name": "o", "stream_timeouts": timeouts});
    let post = |body: Value| api.post("/language-models", body);
    let error = post(body(json!({"idle_seconds": 0, "first_byte_seconds": 3600}))).error(422, "VALIDATION_ERROR").await;
    let details = &error["details"];
    assert_eq!(details["stream_timeouts.idle_seconds"], "must be a whole number of seconds from 1 to 900");
    assert!(details["stream_timeouts.first_byte_seconds"].is_string(), "{details}");
    let error = post(body(json!({"total_seconds": 60}))).error(422, "VALIDATION_ERROR").await;
    assert_eq!(error["details"]["stream_timeouts.total_seconds"], "unknown field");
    post(body(json!(60))).error(400, "BAD_REQUEST").await;

    let created = post(body(json!({"idle_seconds": 300}))).expect(201).await["data"].clone();
    assert_eq!(created["stream_timeouts"], json!({"first_byte_seconds": null, "idle_seconds": 300}));
    let path = format!("/language-models/{}", created["id"].as_str().unwrap());
    let fetched = api.get(&path).expect(200).await;
    assert_eq!(fetched["data"]["stream_timeouts"], created["stream_timeouts"]);
    // A replacement without the field goes back to the defaults.
    let replacing = json!({"name": "Slow", "provider": "openai", "model_name": "o"});
    let replaced = api.put(&path, replacing).expect(200).await;
    assert_eq!(replaced["data"]["stream_timeouts"], json!({"first_byte_seconds": null, "idle_seconds": null}));
}

#[tokio::test]
async fn pricing_and_a_bedrock_region_are_stored_shown_and_validated() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let api = stack.client::<LanguageModelsService>(&clock).with_key(&key);
    let pricing = json!({"currency": "USD", "input_per_million_micros": 3_000_000, "output_per_million_micros": 15_000_000,
        "cache_read_per_million_micros": 300_000, "cache_write_per_million_micros": 3_750_000});
    let body = json!({"name": "Claude", "provider": "bedrock", "model_name": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "region": "us-west-2", "pricing": pricing});
    let created = api.post("/language-models", body).expect(201).await["data"].clone();
    assert_eq!((created["pricing"].clone(), created["region"].as_str()), (pricing, Some("us-west-2")));
    let path = format!("/language-models/{}", created["id"].as_str().unwrap());
    assert_eq!(api.get(&path).expect(200).await["data"], created);
    // A replacement without them: unpriced, the default region.
    let replacing = json!({"name": "Claude", "provider": "bedrock", "model_name": "anthropic.claude-v2"});
    let replaced = api.put(&path, replacing).expect(200).await["data"].clone();
    assert_eq!((replaced["pricing"].clone(), replaced["region"].clone()), (Value::Null, Value::Null));

    let error = api
        .post(
            "/language-models",
            json!({"name": "X", "provider": "openai", "model_name": "m", "region": "us-east-1",
            "pricing": {"currency": "EUR", "input_per_million_micros": 1}}),
        )
        .error(422, "VALIDATION_ERROR")
        .await;
    let details = &error["details"];
    assert_eq!(details["region"], "only bedrock models have a region");
    assert_eq!(details["pricing.currency"], "must be \"USD\"");
    assert!(details["pricing.output_per_million_micros"].as_str().unwrap().starts_with("is required"), "{details}");
    let error = api
        .post("/language-models", json!({"name": "Y", "provider": "bedrock", "model_name": "m", "region": "moon-1"}))
        .error(422, "VALIDATION_ERROR")
        .await;
    assert_eq!(error["details"]["region"], "must be an AWS region, such as us-east-1");
}

#[tokio::test]
async fn validation_conflicts_and_isolation() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let other = stack.api_key(Uuid::new_v4()).await;
    let service = stack.client::<LanguageModelsService>(&clock);
    let (api, other) = (service.with_key(&key), service.with_key(&other));
    api.post("/language-models", json!({"name": 5})).error(400, "BAD_REQUEST").await;
    let error = api
        .post("/language-models", json!({"name": "L", "provider": "gemini", "model_name": "m"}))
        .error(422, "VALIDATION_ERROR")
        .await;
    assert!(error["details"]["provider"].is_string());
    let error = api
        .post("/language-models", json!({"name": "L", "provider": "azure_openai", "model_name": "m"}))
        .error(422, "VALIDATION_ERROR")
        .await;
    assert!(error["details"]["base_url"].is_string());

    let model = json!({"name": "Local", "provider": "openai_compatible", "model_name": "m", "base_url": "http://127.0.0.1:8080/v1"});
    let id = api.post("/language-models", model.clone()).created().await;
    api.post("/language-models", model.clone()).error(409, "CONFLICT").await;
    other.post("/language-models", model).expect(201).await;

    let path = format!("/language-models/{id}");
    other.get(&path).error(404, "RESOURCE_NOT_FOUND").await;
    other.delete(&path).error(404, "RESOURCE_NOT_FOUND").await;
    api.get("/language-models/xyz").error(422, "VALIDATION_ERROR").await;
}

#[tokio::test]
async fn a_model_agents_use_cannot_be_deleted() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let models = stack.client::<LanguageModelsService>(&clock).with_key(&key);
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let id = models
        .post("/language-models", json!({"name": "Used", "provider": "anthropic", "model_name": "m", "api_key": "k"}))
        .created()
        .await;
    let agent = agents
        .post("/agents/", json!({"type": "config", "name": "User", "framework": "chainlib", "language_model_id": id}))
        .created()
        .await;

    let path = format!("/language-models/{id}");
    let error = models.delete(&path).error(409, "CONFLICT").await;
    assert_eq!(error["details"]["agents"], json!([agent]));

    // Once no agent names it, it can go, with its key.
    let patch = json!({"language_model_id": null, "provider": "anthropic", "model_name": "m"});
    agents.patch(&format!("/agents/{agent}"), patch).expect(200).await;
    let deleted = models.delete(&path).expect(200).await;
    assert_eq!(deleted["data"]["id"], id);
    models.get(&path).error(404, "RESOURCE_NOT_FOUND").await;
    assert_eq!(secret(&stack, account, &id).await, None);
    // The name is free again.
    models
        .post("/language-models", json!({"name": "Used", "provider": "bedrock", "model_name": "m"}))
        .expect(201)
        .await;
}
