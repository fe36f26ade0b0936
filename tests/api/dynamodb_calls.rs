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
