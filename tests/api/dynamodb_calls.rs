//! The number of DynamoDB calls per endpoint is bounded and as documented in docs/dynamodb.md.

use http::Method;
use integration_tests::{TestClock, TestStack, call_api, demo_fixture, get, meeting, obtain_token};
use serde_json::json;

fn sorted(mut operations: Vec<String>) -> Vec<String> {
    operations.sort();
    operations
}

#[tokio::test]
async fn per_meeting_reads_make_two_calls() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1, 2]).await;
    let token = obtain_token(&stack.auth_service(&clock), &client_id, &secret).await;
    let meetings = stack.meetings_service(&clock);
    for suffix in ["", "summary/", "participants/", "recording/"] {
        stack.calls.reset();
        get(&meetings, &format!("/api/v1/external/meeting/1001/{suffix}"), Some(&token)).await.expect(200);
        assert_eq!(stack.calls.operations(), ["BatchGetItem", "GetItem"], "{suffix}");
    }
    stack.calls.reset();
    get(&meetings, "/api/v1/external/meeting/1001/transcript/", Some(&token)).await.expect(200);
    assert_eq!(stack.calls.operations(), ["BatchGetItem", "Query"]);

    // A refused token costs one call and touches no meeting data.
    stack.calls.reset();
    get(&meetings, "/api/v1/external/meeting/1001/", Some("someone.else")).await.expect(401);
    assert_eq!(stack.calls.operations(), ["BatchGetItem"]);
}

#[tokio::test]
async fn the_list_makes_one_query_per_organization_and_one_page_read() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let many: Vec<_> = (1..=150).map(|id| meeting(5000 + id, 1, 11, json!({"title": format!("Bulk {id}")}))).collect();
    stack.import(&json!({"meetings": many})).await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1, 2]).await;
    let token = obtain_token(&stack.auth_service(&clock), &client_id, &secret).await;
    let meetings = stack.meetings_service(&clock);

    stack.calls.reset();
    let body = get(&meetings, "/api/v1/external/meeting/?size=100&title=bulk", Some(&token)).await.expect(200);
    assert_eq!(body["count"], 150);
    assert_eq!(sorted(stack.calls.operations()), ["BatchGetItem", "BatchGetItem", "Query", "Query"]);

    // No match: no page read at all.
    stack.calls.reset();
    get(&meetings, "/api/v1/external/meeting/?title=nothing-matches&organization_id=2", Some(&token)).await.expect(200);
    assert_eq!(stack.calls.operations(), ["BatchGetItem", "Query"]);
    assert!(!stack.calls.operations().iter().any(|op| op == "Scan"));
}

#[tokio::test]
async fn an_agent_detail_reads_each_referenced_kind_once() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(uuid::Uuid::new_v4()).await;
    let (agents, tools, mcps) = (stack.agents_service(&clock), stack.tools_service(&clock), stack.mcps_service(&clock));
    let id = |reply: integration_tests::Reply, status| reply.expect(status)["data"]["id"].as_str().unwrap().to_owned();
    let tool =
        id(call_api(&tools, Method::POST, "/tools", &key, Some(json!({"name": "t", "type": "http"}))).await, 201);
    let mcp = json!({"name": "m", "url": "https://mcp.test/mcp"});
    let mcp = id(call_api(&mcps, Method::POST, "/mcps", &key, Some(mcp)).await, 201);
    let helper = json!({"type": "a2a", "name": "helper"});
    let helper = id(call_api(&agents, Method::POST, "/agents/", &key, Some(helper)).await, 201);
    let lead = json!({"type": "config", "name": "lead", "framework": "chainlib", "provider": "openai",
        "model_name": "m", "agents": [helper], "tools": [tool], "mcps": [mcp]});
    stack.calls.reset();
    let lead = id(call_api(&agents, Method::POST, "/agents/", &key, Some(lead)).await, 201);
    // The gate (GetItem + UpdateItem), one BatchGetItem per referenced kind, one transaction.
    assert_eq!(
        sorted(stack.calls.operations()),
        ["BatchGetItem", "BatchGetItem", "BatchGetItem", "GetItem", "TransactWriteItems", "UpdateItem"]
    );
    stack.calls.reset();
    call_api(&agents, Method::GET, &format!("/agents/{lead}"), &key, None).await.expect(200);
    // + the agent (GetItem), its references, and the language models (Query) to resolve the pair.
    assert_eq!(
        sorted(stack.calls.operations()),
        ["BatchGetItem", "BatchGetItem", "BatchGetItem", "GetItem", "GetItem", "Query", "UpdateItem"]
    );
    // Each service is its own container: the first request after others moved the key's bucket
    // takes a second UpdateItem (see the rate limiter), so measure the second.
    call_api(&mcps, Method::GET, &format!("/mcps/{mcp}"), &key, None).await.expect(200);
    stack.calls.reset();
    call_api(&mcps, Method::GET, &format!("/mcps/{mcp}"), &key, None).await.expect(200);
    assert_eq!(sorted(stack.calls.operations()), ["GetItem", "GetItem", "UpdateItem"]);
}

#[tokio::test]
async fn runner_monitoring_routes_make_the_documented_calls() {
    use integration_tests::call_streaming_api;
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model =
        integration_tests::model_server::ModelServer::start(vec![integration_tests::model_server::text_reply("Done.")])
            .await;
    let key = stack.api_key(uuid::Uuid::new_v4()).await;
    let lm = integration_tests::create_record(
        &stack.language_models_service(&clock),
        "/language-models",
        &key,
        json!({"name": "lm", "provider": "openai_compatible", "model_name": "m", "base_url": model.base_url()}),
    )
    .await;
    let agent = integration_tests::create_record(
        &stack.agents_service(&clock),
        "/agents/",
        &key,
        json!({"type": "config", "name": "a", "framework": "chainlib", "language_model_id": lm}),
    )
    .await;
    let runner = stack.runner_service(&clock);
    let execute = integration_tests::request(Method::POST, "/execute/a2a/stream/agent")
        .header("x-api-key", &key)
        .header("content-type", "application/json")
        .body(http_api::Body::Text(json!({"agent_id": agent, "message": "hi"}).to_string()))
        .unwrap();
    let response = integration_tests::send_streaming(&runner, execute).await;
    let task = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    http_body_util::BodyExt::collect(response.into_body()).await.unwrap();

    // The gate (GetItem + UpdateItem), then each route's own calls (docs/runner.md).
    let gate = ["GetItem", "UpdateItem"];
    let cases: [(Method, String, Vec<&str>); 5] = [
        (Method::GET, format!("/monitoring/tasks/{task}"), vec!["GetItem", "GetItem", "Query"]),
        (Method::DELETE, format!("/monitoring/tasks/{task}"), vec!["GetItem", "GetItem", "Query"]),
        (Method::GET, "/monitoring/executions/recent?status=started".into(), vec!["Query"]),
        (Method::GET, "/monitoring/executions/recent".into(), vec!["Query"]),
        (Method::GET, "/execute/a2a/agents/list".into(), vec!["Query"]),
    ];
    for (method, path, own) in cases {
        stack.calls.reset();
        call_streaming_api(&runner, method.clone(), &path, &key, None).await.expect(200);
        let expected = sorted(gate.iter().chain(own.iter()).map(|op| (*op).to_owned()).collect());
        assert_eq!(sorted(stack.calls.operations()), expected, "{method} {path}");
    }
    stack.calls.reset();
    call_streaming_api(
        &runner,
        Method::POST,
        "/tools/validation",
        &key,
        Some(json!({"script": "def run():\n  pass\n"})),
    )
    .await
    .expect(200);
    assert_eq!(sorted(stack.calls.operations()), gate);
}

#[tokio::test]
async fn schedule_routes_make_the_documented_calls() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(uuid::Uuid::new_v4()).await;
    let agent = integration_tests::create_record(
        &stack.agents_service(&clock),
        "/agents/",
        &key,
        json!({"type": "config", "name": "a", "framework": "chainlib", "provider": "openai", "model_name": "m"}),
    )
    .await;
    let schedules = stack.schedules_service(&clock);
    let gate = ["GetItem", "UpdateItem"];
    let expect = |own: &[&str]| sorted(gate.iter().chain(own.iter()).map(|op| (*op).to_owned()).collect());
    // A warm container: its rate limiter has seen the key (a cold one may re-read the bucket once).
    call_api(&schedules, Method::GET, "/agents/schedules", &key, None).await.expect(200);

    stack.calls.reset();
    let created = call_api(
        &schedules,
        Method::POST,
        &format!("/agents/{agent}/schedule"),
        &key,
        Some(json!({"cron_expression": "@daily", "message": "m"})),
    )
    .await
    .expect(201);
    assert_eq!(sorted(stack.calls.operations()), expect(&["GetItem", "PutItem"]), "create");
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    let cases: [(Method, String, Option<serde_json::Value>, Vec<&str>); 5] = [
        (Method::GET, format!("/agents/schedules/{id}"), None, vec!["GetItem"]),
        (Method::GET, "/agents/schedules".into(), None, vec!["Query"]),
        (Method::GET, format!("/agents/schedules?agent_id={agent}"), None, vec!["GetItem", "Query"]),
        (Method::PUT, format!("/agents/schedules/{id}"), Some(json!({"message": "n"})), vec!["GetItem", "UpdateItem"]),
        (Method::DELETE, format!("/agents/schedules/{id}"), None, vec!["DeleteItem"]),
    ];
    for (method, path, body, own) in cases {
        stack.calls.reset();
        let reply = call_api(&schedules, method.clone(), &path, &key, body).await;
        assert_eq!(reply.status.as_u16(), 200, "{method} {path}: {}", reply.text);
        assert_eq!(sorted(stack.calls.operations()), expect(&own), "{method} {path}");
    }
}
