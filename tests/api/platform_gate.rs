//! The agent platform backend's gate (X-API-Key, rate limit, envelopes) and health routes.

use integration_tests::{Routed, TestClient, TestClock, TestStack};
use platform_api::settings::{RATE_LIMIT_CAPACITY, RATE_LIMIT_PER_MINUTE};
use platform_api::{HealthService, ToolsService};
use serde_json::json;
use uuid::Uuid;

/// The function `S` with a per-key bucket of `capacity` refilled by `per_minute`: each one
/// built is a container of its own, with its own view of the buckets.
fn limited<S: Routed>(stack: &TestStack, clock: &TestClock, capacity: u32, per_minute: u32) -> TestClient {
    let (capacity, per_minute) = (capacity.to_string(), per_minute.to_string());
    stack.with_settings(&[(RATE_LIMIT_CAPACITY, &capacity), (RATE_LIMIT_PER_MINUTE, &per_minute)]).client::<S>(clock)
}

#[tokio::test]
async fn every_route_needs_a_valid_api_key() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let health = stack.client::<HealthService>(&clock);
    let key = stack.api_key(Uuid::new_v4()).await;
    let (key_id, _) = key.split_once('.').unwrap();
    let forged = format!("{key_id}.not-the-secret");
    for path in ["/health-check", "/health-check/auth-test", "/health-check/database"] {
        for presented in [None, Some(""), Some("garbage"), Some(forged.as_str())] {
            let client = presented.map_or_else(|| health.clone(), |key| health.with_key(key));
            let reply = client.get(path).send().await;
            reply.error(401, "AUTHENTICATION_FAILED");
            assert!(reply.header("x-ratelimit-limit").is_none());
        }
    }
    health.with_key(&key).get("/health-check").expect(200).await;

    // Revocation takes effect at once.
    assert!(stack.api_keys().revoke(key_id).await.unwrap());
    health.with_key(&key).get("/health-check").error(401, "AUTHENTICATION_FAILED").await;
    assert!(!stack.api_keys().revoke(key_id).await.unwrap());
}

#[tokio::test]
async fn health_routes_answer_in_the_envelope() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let health = stack.client::<HealthService>(&clock).with_key(&key);

    let body = health.get("/health-check").expect(200).await;
    assert_eq!(body["success"], true);
    assert_eq!(body["data"], json!({"status": "healthy", "version": env!("CARGO_PKG_VERSION")}));
    assert!(body["message"].is_string());
    assert!(chrono::DateTime::parse_from_rfc3339(body["timestamp"].as_str().unwrap()).is_ok());

    let body = health.get("/health-check/auth-test/").expect(200).await;
    assert_eq!(body["data"]["authenticated"], true);
    assert_eq!(body["data"]["account_id"], account.to_string());
    assert_eq!(body["data"]["key_name"], "test key");

    let body = health.get("/health-check/database").expect(200).await;
    let tables = body["data"]["tables"].as_array().unwrap();
    assert_eq!(tables.len(), platform_api::health::TABLE_VARIABLES.len());
    assert!(tables.iter().all(|t| t["status"] == "ok" && t["latency_ms"].is_number()), "{body}");

    health.get("/health-check/other").error(404, "RESOURCE_NOT_FOUND").await;
}

#[tokio::test]
async fn an_unreachable_table_makes_the_database_check_a_503_naming_it() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let missing = format!("{}Missing", stack.prefix);
    let health = stack.with_settings(&[("MEETINGS_TABLE", &missing)]).client::<HealthService>(&clock);
    let key = stack.api_key(Uuid::new_v4()).await;
    let reply = health.with_key(&key).get("/health-check/database").send().await;
    reply.error(503, "SERVICE_UNAVAILABLE");
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
    let health = limited::<HealthService>(&stack, &clock, 3, 60);
    let key = stack.api_key(Uuid::new_v4()).await;
    let other = stack.api_key(Uuid::new_v4()).await;

    for remaining in ["2", "1", "0"] {
        let reply = health.with_key(&key).get("/health-check").send().await;
        reply.expect(200);
        assert_eq!(reply.header("x-ratelimit-limit"), Some("3"));
        assert_eq!(reply.header("x-ratelimit-remaining"), Some(remaining));
        let reset: i64 = reply.header("x-ratelimit-reset").unwrap().parse().unwrap();
        assert!(reset >= clock.now().timestamp());
    }
    let refused = health.with_key(&key).get("/health-check").send().await;
    refused.error(429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));

    // Another key has its own bucket; errors from the handler carry the headers too.
    let reply = health.with_key(&other).get("/health-check/nope").send().await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("2"));

    // One request per second refills.
    clock.advance(1);
    let reply = health.with_key(&key).get("/health-check").send().await;
    reply.expect(200);
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("0"));
    health.with_key(&key).get("/health-check").error(429, "RATE_LIMIT_EXCEEDED").await;
}

#[tokio::test]
async fn containers_sharing_a_bucket_see_each_others_requests() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let first = limited::<HealthService>(&stack, &clock, 4, 60);
    let second = limited::<HealthService>(&stack, &clock, 4, 60);
    let key = stack.api_key(Uuid::new_v4()).await;
    assert_eq!(first.with_key(&key).get("/health-check").send().await.header("x-ratelimit-remaining"), Some("3"));
    assert_eq!(first.with_key(&key).get("/health-check").send().await.header("x-ratelimit-remaining"), Some("2"));
    // `second` has never seen the bucket: it reads the bucket with the key, so its one
    // UpdateItem has the right form.
    stack.calls.reset();
    assert_eq!(second.with_key(&key).get("/health-check").send().await.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(stack.calls.operations(), ["BatchGetItem", "UpdateItem"]);
    // `first` is now stale by one request, which its increment does not depend on.
    stack.calls.reset();
    assert_eq!(first.with_key(&key).get("/health-check").send().await.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(stack.calls.operations(), ["GetItem", "UpdateItem"]);
    second.with_key(&key).get("/health-check").expect(429).await;
    first.with_key(&key).get("/health-check").expect(429).await;
}

#[tokio::test]
async fn concurrent_requests_of_one_key_do_not_contend() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    // Four containers, three of which have never seen the bucket.
    let containers: Vec<_> = (0..4).map(|_| limited::<HealthService>(&stack, &clock, 50, 60)).collect();
    let key = stack.api_key(Uuid::new_v4()).await;
    let keyed: Vec<TestClient> = containers.iter().map(|container| container.with_key(&key)).collect();
    assert_eq!(keyed[0].get("/health-check").send().await.header("x-ratelimit-remaining"), Some("49"));

    // 24 requests at once, at the same instant, with room for all: none is refused (each used
    // to race for the exact `tat` it had seen, and lost up to four times), and DynamoDB applies
    // the conditional increments one after another, losing none: the remainders are 48 down to
    // 25, each once.
    let replies =
        futures_util::future::join_all((0..24).map(|i| keyed[i % keyed.len()].get("/health-check").send())).await;
    let mut remainders: Vec<u32> = replies
        .iter()
        .map(|reply| {
            reply.expect(200);
            reply.header("x-ratelimit-remaining").unwrap().parse().unwrap()
        })
        .collect();
    remainders.sort_unstable();
    assert_eq!(remainders, (25..=48).collect::<Vec<u32>>());
}

#[tokio::test]
async fn the_gate_costs_one_get_and_one_update_per_request() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let health = limited::<HealthService>(&stack, &clock, 3, 60);
    let key = stack.api_key(Uuid::new_v4()).await;
    // A container's first request of a key reads the key and its bucket together.
    for expected in [["BatchGetItem", "UpdateItem"], ["GetItem", "UpdateItem"], ["GetItem", "UpdateItem"]] {
        stack.calls.reset();
        health.with_key(&key).get("/health-check").expect(200).await;
        assert_eq!(stack.calls.operations(), expected);
    }
    // Known to be over the limit: no bucket write at all.
    stack.calls.reset();
    health.with_key(&key).get("/health-check").expect(429).await;
    assert_eq!(stack.calls.operations(), ["GetItem"]);
}

fn sorted(mut operations: Vec<String>) -> Vec<String> {
    operations.sort();
    operations
}

#[tokio::test]
async fn a_read_runs_beside_the_rate_limit_and_a_refusal_drops_its_answer() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let first = limited::<ToolsService>(&stack, &clock, 2, 60);
    let second = limited::<ToolsService>(&stack, &clock, 2, 60);
    let account = Uuid::new_v4();
    let setup = stack.client::<ToolsService>(&clock);
    let setup_key = stack.api_key(account).await;
    let tool = setup.with_key(&setup_key).post("/tools", json!({"name": "t", "type": "http"})).created().await;
    let key = stack.api_key(account).await;
    let path = format!("/tools/{tool}");

    // `first` learns the bucket with the key (BatchGetItem); believing it has room, it reads
    // the tool while the UpdateItem is under way.
    stack.calls.reset();
    let reply = first.with_key(&key).get(&path).send().await;
    assert_eq!(reply.expect(200)["data"]["id"], tool.as_str());
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(sorted(stack.calls.operations()), ["BatchGetItem", "GetItem", "UpdateItem"]);
    // Another container takes the last request.
    second.with_key(&key).get(&path).expect(200).await;

    // `first` still believes there is room: the tool is read, but the bucket is empty, so the
    // answer is the 429 and nothing of the tool.
    stack.calls.reset();
    let refused = first.with_key(&key).get(&path).send().await;
    let body = refused.json();
    assert_eq!(refused.status, 429);
    assert_eq!(body["error"]["code"], "RATE_LIMIT_EXCEEDED");
    assert!(body.get("data").is_none(), "{body}");
    assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(sorted(stack.calls.operations()), ["GetItem", "GetItem", "UpdateItem"]);
    // It remembers what the refusal showed: the next request costs only the key's read.
    stack.calls.reset();
    first.with_key(&key).get(&path).expect(429).await;
    assert_eq!(stack.calls.operations(), ["GetItem"]);

    // A write waits for the limiter. A third container sees room after a refill, the second
    // takes it, and the third's creation is refused without being made.
    clock.advance(1);
    let third = limited::<ToolsService>(&stack, &clock, 2, 60).with_key(&key);
    third.get(&path).expect(200).await;
    clock.advance(1);
    second.with_key(&key).get(&path).expect(200).await;
    stack.calls.reset();
    let body = json!({"name": "refused", "type": "http"});
    third.post("/tools", body).expect(429).await;
    assert_eq!(stack.calls.operations(), ["GetItem", "UpdateItem"]);
    assert_eq!(setup.with_key(&setup_key).get("/tools").expect(200).await["data"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn keys_that_do_not_exist_cost_one_read_and_are_not_remembered() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let health = stack.client::<HealthService>(&clock);
    // Not a key at all: refused before any call.
    stack.calls.reset();
    health.with_key("no-key-shape").get("/health-check").error(401, "AUTHENTICATION_FAILED").await;
    assert_eq!(stack.calls.operations(), Vec::<String>::new());
    // A made-up key id: one read, every time, since its bucket is not remembered.
    for _ in 0..2 {
        stack.calls.reset();
        health.with_key("madeup.secret").get("/health-check").error(401, "AUTHENTICATION_FAILED").await;
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
