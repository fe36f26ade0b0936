//! The agent platform backend's gate (X-API-Key, rate limit, envelopes) and health routes.

use http::Method;
use http_api::Body;
use integration_tests::{Reply, TestClock, TestStack, call_api, request, send};
use platform_api::HealthService;
use serde_json::json;
use storage::rate_limit::RateLimit;
use uuid::Uuid;

async fn call(service: &HealthService, path: &str, key: Option<&str>) -> Reply {
    let mut builder = request(Method::GET, path);
    if let Some(key) = key {
        builder = builder.header("x-api-key", key);
    }
    send(service, builder.body(Body::Empty).unwrap()).await
}

fn assert_error(reply: &Reply, status: u16, code: &str) {
    let body = reply.expect(status);
    assert_eq!(body["success"], false, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(body["error"]["message"].is_string());
    assert!(body["error"]["details"].is_object());
    assert!(chrono::DateTime::parse_from_rfc3339(body["timestamp"].as_str().unwrap()).is_ok());
    assert_eq!(body.as_object().unwrap().len(), 3, "{body}");
}

#[tokio::test]
async fn every_route_needs_a_valid_api_key() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let health = stack.health_service(&clock, RateLimit::DEFAULT);
    let key = stack.api_key(Uuid::new_v4()).await;
    let (key_id, _) = key.split_once('.').unwrap();
    let forged = format!("{key_id}.not-the-secret");
    for path in ["/health-check", "/health-check/auth-test", "/health-check/database"] {
        for presented in [None, Some(""), Some("garbage"), Some(forged.as_str())] {
            let reply = call(&health, path, presented).await;
            assert_error(&reply, 401, "AUTHENTICATION_FAILED");
            assert!(reply.header("x-ratelimit-limit").is_none());
        }
    }
    call(&health, "/health-check", Some(&key)).await.expect(200);

    // Revocation takes effect at once.
    assert!(stack.api_keys().revoke(key_id).await.unwrap());
    assert_error(&call(&health, "/health-check", Some(&key)).await, 401, "AUTHENTICATION_FAILED");
    assert!(!stack.api_keys().revoke(key_id).await.unwrap());
}

#[tokio::test]
async fn health_routes_answer_in_the_envelope() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let health = stack.health_service(&clock, RateLimit::DEFAULT);
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;

    let body = call(&health, "/health-check", Some(&key)).await.expect(200);
    assert_eq!(body["success"], true);
    assert_eq!(body["data"], json!({"status": "healthy", "version": env!("CARGO_PKG_VERSION")}));
    assert!(body["message"].is_string());
    assert!(chrono::DateTime::parse_from_rfc3339(body["timestamp"].as_str().unwrap()).is_ok());

    let body = call(&health, "/health-check/auth-test/", Some(&key)).await.expect(200);
    assert_eq!(body["data"]["authenticated"], true);
    assert_eq!(body["data"]["account_id"], account.to_string());
    assert_eq!(body["data"]["key_name"], "test key");

    let body = call(&health, "/health-check/database", Some(&key)).await.expect(200);
    let tables = body["data"]["tables"].as_array().unwrap();
    assert_eq!(tables.len(), platform_api::health::TABLE_VARIABLES.len());
    assert!(tables.iter().all(|t| t["status"] == "ok" && t["latency_ms"].is_number()), "{body}");

    assert_error(&call(&health, "/health-check/other", Some(&key)).await, 404, "RESOURCE_NOT_FOUND");
}

#[tokio::test]
async fn an_unreachable_table_makes_the_database_check_a_503_naming_it() {
    let mut stack = TestStack::new().await;
    stack.env.insert("MEETINGS_TABLE".into(), format!("{}Missing", stack.prefix));
    let clock = TestClock::new();
    let health = stack.health_service(&clock, RateLimit::DEFAULT);
    let key = stack.api_key(Uuid::new_v4()).await;
    let reply = call(&health, "/health-check/database", Some(&key)).await;
    assert_error(&reply, 503, "SERVICE_UNAVAILABLE");
    let body = reply.json();
    assert!(body["error"]["message"].as_str().unwrap().contains("MEETINGS_TABLE"));
    let failed: Vec<&serde_json::Value> =
        body["error"]["details"]["tables"].as_array().unwrap().iter().filter(|t| t["status"] != "ok").collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["table"], "MEETINGS_TABLE");
    assert_eq!(failed[0]["status"], "unreachable");
    // The SDK's error text (table names, ARNs, account ids) is logged, never returned.
    assert!(!reply.text.contains("Missing") && !reply.text.contains("ResourceNotFound"), "{}", reply.text);
    assert!(!reply.text.contains(&stack.prefix), "{}", reply.text);
}

#[tokio::test]
async fn rate_limit_headers_429_and_refill() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let limit = RateLimit { capacity: 3, per_minute: 60 };
    let health = stack.health_service(&clock, limit);
    let key = stack.api_key(Uuid::new_v4()).await;
    let other = stack.api_key(Uuid::new_v4()).await;

    for remaining in ["2", "1", "0"] {
        let reply = call(&health, "/health-check", Some(&key)).await;
        reply.expect(200);
        assert_eq!(reply.header("x-ratelimit-limit"), Some("3"));
        assert_eq!(reply.header("x-ratelimit-remaining"), Some(remaining));
        let reset: i64 = reply.header("x-ratelimit-reset").unwrap().parse().unwrap();
        assert!(reset >= clock.now().timestamp());
    }
    let refused = call(&health, "/health-check", Some(&key)).await;
    assert_error(&refused, 429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));

    // Another key has its own bucket; errors from the handler carry the headers too.
    let reply = call(&health, "/health-check/nope", Some(&other)).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("2"));

    // One request per second refills.
    clock.advance(1);
    let reply = call(&health, "/health-check", Some(&key)).await;
    reply.expect(200);
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("0"));
    assert_error(&call(&health, "/health-check", Some(&key)).await, 429, "RATE_LIMIT_EXCEEDED");
}

#[tokio::test]
async fn containers_sharing_a_bucket_see_each_others_requests() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let limit = RateLimit { capacity: 4, per_minute: 60 };
    let first = stack.health_service(&clock, limit);
    let second = stack.health_service(&clock, limit);
    let key = stack.api_key(Uuid::new_v4()).await;
    assert_eq!(call(&first, "/health-check", Some(&key)).await.header("x-ratelimit-remaining"), Some("3"));
    assert_eq!(call(&first, "/health-check", Some(&key)).await.header("x-ratelimit-remaining"), Some("2"));
    // `second` has never seen the bucket: it reads the bucket with the key, so its one
    // UpdateItem has the right form.
    stack.calls.reset();
    assert_eq!(call(&second, "/health-check", Some(&key)).await.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(stack.calls.operations(), ["BatchGetItem", "UpdateItem"]);
    // `first` is now stale by one request, which its increment does not depend on.
    stack.calls.reset();
    assert_eq!(call(&first, "/health-check", Some(&key)).await.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(stack.calls.operations(), ["GetItem", "UpdateItem"]);
    assert_eq!(call(&second, "/health-check", Some(&key)).await.status, 429);
    assert_eq!(call(&first, "/health-check", Some(&key)).await.status, 429);
}

#[tokio::test]
async fn concurrent_requests_of_one_key_do_not_contend() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let limit = RateLimit { capacity: 50, per_minute: 60 };
    // Four containers, three of which have never seen the bucket.
    let containers: Vec<_> = (0..4).map(|_| stack.health_service(&clock, limit)).collect();
    let key = stack.api_key(Uuid::new_v4()).await;
    assert_eq!(call(&containers[0], "/health-check", Some(&key)).await.header("x-ratelimit-remaining"), Some("49"));

    // 24 requests at once, at the same instant, with room for all: none is refused (each used
    // to race for the exact `tat` it had seen, and lost up to four times). DynamoDB applies the
    // increments one after another, so the remainders would be 48 down to 25; moto applies
    // concurrent updates of one item without a lock and can lose one, so only the range is
    // checked here.
    let replies = futures_util::future::join_all(
        (0..24).map(|i| call(&containers[i % containers.len()], "/health-check", Some(&key))),
    )
    .await;
    for reply in &replies {
        reply.expect(200);
        let remaining: u32 = reply.header("x-ratelimit-remaining").unwrap().parse().unwrap();
        assert!((25..=48).contains(&remaining), "{remaining}");
    }
}

#[tokio::test]
async fn the_gate_costs_one_get_and_one_update_per_request() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let health = stack.health_service(&clock, RateLimit { capacity: 3, per_minute: 60 });
    let key = stack.api_key(Uuid::new_v4()).await;
    // A container's first request of a key reads the key and its bucket together.
    for expected in [["BatchGetItem", "UpdateItem"], ["GetItem", "UpdateItem"], ["GetItem", "UpdateItem"]] {
        stack.calls.reset();
        call(&health, "/health-check", Some(&key)).await.expect(200);
        assert_eq!(stack.calls.operations(), expected);
    }
    // Known to be over the limit: no bucket write at all.
    stack.calls.reset();
    call(&health, "/health-check", Some(&key)).await.expect(429);
    assert_eq!(stack.calls.operations(), ["GetItem"]);
}

/// A tools function with `limit` (its own container: its own view of the buckets).
fn tools_container(stack: &TestStack, clock: &TestClock, limit: RateLimit) -> platform_api::ToolsService {
    platform_api::ToolsService::new(
        stack.gate(clock, limit),
        stack.tools(),
        agent_runtime::tools::python::ToolSandbox::default(),
        stack.tool_secrets(),
    )
}

fn sorted(mut operations: Vec<String>) -> Vec<String> {
    operations.sort();
    operations
}

#[tokio::test]
async fn a_read_runs_beside_the_rate_limit_and_a_refusal_drops_its_answer() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let limit = RateLimit { capacity: 2, per_minute: 60 };
    let (first, second) = (tools_container(&stack, &clock, limit), tools_container(&stack, &clock, limit));
    let account = Uuid::new_v4();
    let setup = stack.tools_service(&clock);
    let setup_key = stack.api_key(account).await;
    let tool = call_api(&setup, Method::POST, "/tools", &setup_key, Some(json!({"name": "t", "type": "http"})))
        .await
        .expect(201)["data"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let key = stack.api_key(account).await;
    let path = format!("/tools/{tool}");

    // `first` learns the bucket with the key (BatchGetItem); believing it has room, it reads
    // the tool while the UpdateItem is under way.
    stack.calls.reset();
    let reply = call_api(&first, Method::GET, &path, &key, None).await;
    assert_eq!(reply.expect(200)["data"]["id"], tool.as_str());
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(sorted(stack.calls.operations()), ["BatchGetItem", "GetItem", "UpdateItem"]);
    // Another container takes the last request.
    call_api(&second, Method::GET, &path, &key, None).await.expect(200);

    // `first` still believes there is room: the tool is read, but the bucket is empty, so the
    // answer is the 429 and nothing of the tool.
    stack.calls.reset();
    let refused = call_api(&first, Method::GET, &path, &key, None).await;
    let body = refused.json();
    assert_eq!(refused.status, 429);
    assert_eq!(body["error"]["code"], "RATE_LIMIT_EXCEEDED");
    assert!(body.get("data").is_none(), "{body}");
    assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(sorted(stack.calls.operations()), ["GetItem", "GetItem", "UpdateItem"]);
    // It remembers what the refusal showed: the next request costs only the key's read.
    stack.calls.reset();
    assert_eq!(call_api(&first, Method::GET, &path, &key, None).await.status, 429);
    assert_eq!(stack.calls.operations(), ["GetItem"]);

    // A write waits for the limiter. A third container sees room after a refill, the second
    // takes it, and the third's creation is refused without being made.
    clock.advance(1);
    let third = tools_container(&stack, &clock, limit);
    call_api(&third, Method::GET, &path, &key, None).await.expect(200);
    clock.advance(1);
    call_api(&second, Method::GET, &path, &key, None).await.expect(200);
    stack.calls.reset();
    let body = json!({"name": "refused", "type": "http"});
    assert_eq!(call_api(&third, Method::POST, "/tools", &key, Some(body)).await.status, 429);
    assert_eq!(stack.calls.operations(), ["GetItem", "UpdateItem"]);
    let listed = call_api(&setup, Method::GET, "/tools", &setup_key, None).await;
    assert_eq!(listed.expect(200)["data"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn keys_that_do_not_exist_cost_one_read_and_are_not_remembered() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let health = stack.health_service(&clock, RateLimit::DEFAULT);
    // Not a key at all: refused before any call.
    stack.calls.reset();
    assert_error(&call(&health, "/health-check", Some("no-key-shape")).await, 401, "AUTHENTICATION_FAILED");
    assert_eq!(stack.calls.operations(), Vec::<String>::new());
    // A made-up key id: one read, every time, since its bucket is not remembered.
    for _ in 0..2 {
        stack.calls.reset();
        assert_error(&call(&health, "/health-check", Some("madeup.secret")).await, 401, "AUTHENTICATION_FAILED");
        assert_eq!(stack.calls.operations(), ["BatchGetItem"]);
    }
}

#[test]
fn rate_limit_settings_must_be_positive_integers() {
    for bad in ["0", "-5", "many"] {
        let lookup = |name: &str| match name {
            "RATE_LIMIT_CAPACITY" => Some(bad.to_owned()),
            _ => Some("x".to_owned()),
        };
        let sdk = aws_config::SdkConfig::builder().behavior_version(aws_config::BehaviorVersion::latest()).build();
        assert!(platform_api::Gate::from_settings(&aws_env::Clients::new(sdk), &lookup).is_err(), "{bad}");
    }
}
