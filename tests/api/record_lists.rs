//! Lists of an account's records read their page, not the account's history: the sparse
//! `active` index of each record table (soft-deleted records leave it), the account's counter as
//! the total, filters over the active records only, and schedules paged from their partition.

use integration_tests::{TestClient, TestClock, TestStack};
use platform_api::{AgentsService, McpsService, SchedulesService, ToolsService};
use serde_json::{Value, json};
use uuid::Uuid;

fn ids(body: &Value) -> Vec<String> {
    body["data"].as_array().unwrap().iter().map(|item| item["id"].as_str().unwrap().to_owned()).collect()
}

/// The entries each Query since the last reset read (its `ScannedCount`). Taken from the
/// responses that carry one: the gate's UpdateItem runs beside a list's reads, so responses are
/// not paired with their requests by arrival.
fn scanned_counts(stack: &TestStack) -> Vec<u64> {
    stack.calls.exchanges().iter().filter_map(|exchange| exchange.response.get("ScannedCount")?.as_u64()).collect()
}

/// Every page of `path` at `limit` equals its slice of `all`, and reads the index only down to its
/// depth (the counter's GetItem, the index Query).
async fn pages_match(stack: &TestStack, client: &TestClient, path: &str, all: &[String]) {
    for (page, limit) in [(1, 1), (1, 5), (2, 5), (3, 7), (4, 5), (1, 100), (9, 10)] {
        stack.calls.reset();
        let body = client.get(&format!("{path}?page={page}&limit={limit}")).expect(200).await;
        let start = ((page - 1) * limit).min(all.len());
        let end = (start + limit).min(all.len());
        assert_eq!(ids(&body), all[start..end], "{path} page {page} of {limit}");
        assert_eq!(body["pagination"]["total"], all.len(), "{path}");
        let depth = (page * limit).min(all.len()) as u64;
        let scanned = scanned_counts(stack);
        assert!(scanned.iter().all(|read| *read <= depth), "{path} page {page} of {limit}: {scanned:?}");
        if start < end {
            assert_eq!(stack.calls.query_limits(), [Some(depth)], "{path} page {page} of {limit}");
        } else {
            assert!(stack.calls.query_limits().is_empty(), "a page past the end reads the counter only");
        }
    }
}

#[tokio::test]
async fn tool_pages_read_their_depth_of_the_active_tools_and_filters_their_entries() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let mcp = mcps.post("/mcps", json!({"name": "m", "url": "https://mcp.example.com/mcp"})).created().await;
    let mut created = Vec::new();
    for i in 0..23 {
        let body = if i % 3 == 0 {
            json!({"name": format!("mcp {i}"), "type": "mcp", "config": {"mcp_id": mcp, "tool_name": "search"}})
        } else {
            json!({"name": format!("fetch {i}"), "type": "http", "config": {"url": "https://api.test"}})
        };
        created.push(tools.post("/tools", body).created().await);
        // Some created in the same instant: the id decides, as it did in memory.
        if i % 4 != 0 {
            clock.advance(1);
        }
    }
    // Soft-deleted tools leave the index; a restored one comes back in its place.
    for deleted in [&created[2], &created[5], &created[6], &created[20]] {
        tools.delete(&format!("/tools/{deleted}")).expect(200).await;
    }
    tools.request(http::Method::POST, &format!("/tools/{}/restore", created[5])).expect(200).await;
    let stored = stack.tools().list(account.into()).await.unwrap();
    let mut active: Vec<_> = stored.into_iter().filter(|tool| tool.deleted_at.is_none()).collect();
    active.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    let all: Vec<String> = active.iter().map(|tool| tool.id.to_string()).collect();
    assert_eq!(all.len(), 20);
    stack.calls.keep_bodies(true);
    pages_match(&stack, &tools, "/tools", &all).await;

    // A type filter reads the active tools (never the deleted).
    let http: Vec<String> =
        active.iter().filter(|tool| tool.spec.tool_type.as_str() == "http").map(|tool| tool.id.to_string()).collect();
    stack.calls.reset();
    let page = tools.get("/tools?type=http&page=2&limit=4").expect(200).await;
    assert_eq!(ids(&page), http[4..8]);
    assert_eq!(page["pagination"]["total"], http.len());
    assert_eq!(scanned_counts(&stack), [20], "the active tools only");
}

#[tokio::test]
async fn agent_lists_page_the_active_agents_and_filter_on_their_entries() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let mut created = Vec::new();
    for i in 0..14 {
        let framework = ["chainlib", "graphlib"][i % 2];
        let team = ["ops", "sales"][i % 2];
        let body = json!({"type": "config", "name": format!("Agent {i}"), "framework": framework,
            "language_model_id": "lm", "version": format!("v{}", i % 3), "metadata": {"team": team}});
        created.push(agents.post("/agents/", body).created().await);
        clock.advance(1);
    }
    agents.delete(&format!("/agents/{}", created[3])).expect(200).await;
    agents.delete(&format!("/agents/{}", created[10])).expect(200).await;
    let all: Vec<String> =
        created.iter().rev().filter(|id| **id != created[3] && **id != created[10]).cloned().collect();
    stack.calls.keep_bodies(true);
    pages_match(&stack, &agents, "/agents/", &all).await;

    // The spec's whole list: every active agent, newest first.
    let whole = agents.get("/agents/").expect(200).await;
    assert_eq!(ids(&whole), all);
    assert!(whole.get("pagination").is_none());
    // Filters over the active agents, with and without a page.
    let expected = |keep: &dyn Fn(usize) -> bool| -> Vec<String> {
        (0..14).rev().filter(|i| *i != 3 && *i != 10 && keep(*i)).map(|i| created[i].clone()).collect()
    };
    for (query, wanted) in [
        ("framework=graphlib", expected(&|i| i % 2 == 1)),
        ("version=v2", expected(&|i| i % 3 == 2)),
        ("name=agent%201", expected(&|i| i.to_string().starts_with('1'))),
        ("agent_type=config&framework=chainlib&version=v0", expected(&|i| i % 2 == 0 && i % 3 == 0)),
        ("metadata.team=sales", expected(&|i| i % 2 == 1)),
        // OpenAPI's deepObject spelling, as generated clients send it (brackets encoded or not).
        ("metadata[team]=sales", expected(&|i| i % 2 == 1)),
        ("metadata%5Bteam%5D=ops&version=v1", expected(&|i| i % 2 == 0 && i % 3 == 1)),
        ("metadata[team]=sales&metadata.team=ops", Vec::new()),
        ("agent_type=a2a", Vec::new()),
    ] {
        stack.calls.reset();
        let listed = agents.get(&format!("/agents/?{query}")).expect(200).await;
        assert_eq!(ids(&listed), wanted, "{query}");
        assert_eq!(scanned_counts(&stack), [12], "{query}: the active agents once");
        let paged = agents.get(&format!("/agents/?{query}&page=2&limit=2")).expect(200).await;
        assert_eq!(ids(&paged), wanted.iter().skip(2).take(2).cloned().collect::<Vec<_>>(), "{query}");
        assert_eq!(paged["pagination"]["total"], wanted.len(), "{query}");
    }
    // A filter given twice, or a metadata filter without a key, has no one meaning: 422 naming it.
    for (query, field) in [
        ("version=v1&version=v2", "version"),
        ("name=a&name=b", "name"),
        ("page=1&page=2", "page"),
        ("metadata[]=1", "metadata[]"),
        ("metadata.=1", "metadata."),
    ] {
        let refused = agents.get(&format!("/agents/?{query}")).expect(422).await;
        assert!(refused["error"]["details"].get(field).is_some(), "{query}: {refused}");
    }
}

#[tokio::test]
async fn schedule_pages_read_their_depth_of_the_account_s_schedules() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let agent = agents
        .post("/agents/", json!({"type": "config", "name": "a", "framework": "chainlib", "language_model_id": "lm"}))
        .created()
        .await;
    let schedules = stack.client::<SchedulesService>(&clock).with_key(&key);
    let mut all = Vec::new();
    for i in 0..17 {
        let body = json!({"cron_expression": "@daily", "message": format!("report {i}")});
        all.push(schedules.post(&format!("/agents/{agent}/schedule"), body).created().await);
        clock.advance(1);
    }
    let removed = all.remove(4);
    schedules.delete(&format!("/agents/schedules/{removed}")).expect(200).await;
    stack.calls.keep_bodies(true);
    pages_match(&stack, &schedules, "/agents/schedules", &all).await;
    let mine = schedules.get(&format!("/agents/schedules?agent_id={agent}&limit=100")).expect(200).await;
    assert_eq!(ids(&mine), all);
}
