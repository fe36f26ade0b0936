//! The number of DynamoDB calls per endpoint is bounded and as documented in docs/dynamodb.md.
//!
//! Every route of every function is counted here, with the SDK interceptor of `TestStack`
//! (`stack.calls`): the HTTP functions, the runner's execute routes, the runner worker, the
//! scheduler tick, the webhook delivery worker and the webhook sweeper. Counts, never times.
//!
//! Functions are built as their `main.rs` builds them, over the stack's recording DynamoDB client,
//! so a route's count is all it costs, its webhook events included. Each service gets its own
//! API key: a container that last saw a key's bucket full pays one more UpdateItem when another
//! service (another container) has started using it, which is the limiter's cost, not the route's.
//!
//! Two things only time decides are bounded instead of counted exactly: a run's event batches
//! (one BatchWriteItem per 25 events or 100 ms) and its one-second cancel checks (one GetItem of
//! its control item each); and a followed stream's polls (one Query per 250 ms).

use agent_runtime::lifecycle::{RunLifecycle, StartRun};
use agent_runtime::queue::RunWorker;
use agent_runtime::runs::{RunInput, RunOrigin, RunType};
use agent_runtime::scheduler::Scheduler;
use aws_sdk_dynamodb::Client;
use http::Method;
use integration_tests::local_server::{Handler, LocalServer, respond};
use integration_tests::model_server::{ModelServer, gated_hello_world, text_reply};
use integration_tests::{Reply, TestClock, TestStack, demo_fixture, meeting, obtain_token};
use meeting_api::{AuthService, MeetingsService};
use platform_api::settings as names;
use platform_api::{
    AgentRunsService, AgentsService, HealthService, LanguageModelsService, McpsService, RunnerService,
    SchedulesService, ToolsService, WebhooksService,
};
use platform_data::agents::{Agent, AgentStore};
use platform_data::ids::RunId;
use queues::ReceivedMessage;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Receives and deletes everything the queue holds now.
async fn drain_queue(queue: &queues::SqsQueue) -> Vec<ReceivedMessage> {
    let mut all = Vec::new();
    loop {
        let batch = queue.receive(Duration::ZERO).await.unwrap();
        if batch.is_empty() {
            return all;
        }
        for message in &batch {
            queue.delete(&message.receipt_handle).await.unwrap();
        }
        all.extend(batch);
    }
}

fn sorted(mut operations: Vec<String>) -> Vec<String> {
    operations.sort();
    operations
}

/// The operations since the last reset, sorted, and a reset. No route makes a Scan.
fn take(stack: &TestStack) -> Vec<String> {
    let operations = sorted(stack.calls.operations());
    stack.calls.reset();
    assert!(!operations.iter().any(|op| op == "Scan"), "a Scan: {operations:?}");
    operations
}

/// `ops`, sorted.
fn ops(ops: &[&str]) -> Vec<String> {
    sorted(ops.iter().map(|op| (*op).to_owned()).collect())
}

/// The gate's GetItem (the key) and UpdateItem (the rate-limit bucket), then `own`; sorted.
fn gated(own: &[&str]) -> Vec<String> {
    let mut all = vec!["GetItem", "UpdateItem"];
    all.extend_from_slice(own);
    ops(&all)
}

/// A stack whose functions read an account's webhook endpoints for every event (no cache), so
/// each count here is the worst case: a container's first event of an account. With the
/// default `WebhookEndpointCacheSeconds` its later events within that time make no Query
/// (`webhooks::a_publisher_reads_an_account_s_endpoints_once_within_its_cache_time`).
async fn calls_stack() -> TestStack {
    TestStack::new().await.with_settings(&[("WEBHOOK_ENDPOINT_CACHE_SECONDS", "0")])
}

/// A container's first request of a key: the gate reads the key and its bucket in one
/// BatchGetItem instead of the GetItem.
fn first_gated(own: &[&str]) -> Vec<String> {
    let mut all = vec!["BatchGetItem", "UpdateItem"];
    all.extend_from_slice(own);
    ops(&all)
}

fn count(operations: &[String], name: &str) -> usize {
    operations.iter().filter(|op| *op == name).count()
}

/// `operations` less `n` of `name` (those timing decides), after checking there are that many.
fn without(operations: &[String], name: &str, n: usize) -> Vec<String> {
    let mut left = n;
    let rest: Vec<String> = operations
        .iter()
        .filter(|op| {
            if left > 0 && *op == name {
                left -= 1;
                false
            } else {
                true
            }
        })
        .cloned()
        .collect();
    assert_eq!(left, 0, "fewer than {n} {name} in {operations:?}");
    rest
}

/// A run's calls: exactly `fixed`, plus its event batches (at least one BatchWriteItem, at most
/// one per event) and its cancel checks (one GetItem per whole second it ran, at most).
fn assert_run(operations: &[String], fixed: &[&str], events: usize, elapsed: Duration, label: &str) {
    let fixed = ops(fixed);
    let batches = count(operations, "BatchWriteItem").saturating_sub(count(&fixed, "BatchWriteItem"));
    assert!((1..=events).contains(&batches), "{label}: {batches} event batches for {events} events: {operations:?}");
    let checks = count(operations, "GetItem").saturating_sub(count(&fixed, "GetItem"));
    assert!(checks as u64 <= elapsed.as_secs(), "{label}: {checks} cancel checks in {elapsed:?}: {operations:?}");
    let rest = without(&without(operations, "BatchWriteItem", batches), "GetItem", checks);
    assert_eq!(rest, fixed, "{label}");
}

/// Asserts a 2xx answer and returns its JSON body.
fn ok(reply: &Reply, label: &str) -> Value {
    assert!(reply.status.is_success(), "{label}: {} {}", reply.status, reply.text);
    if reply.text.is_empty() { Value::Null } else { reply.json() }
}

/// The stack as another process uses it (a worker beside a route): its DynamoDB calls are not
/// recorded.
fn unrecorded(stack: &TestStack) -> TestStack {
    TestStack { dynamodb: Client::new(&stack.sdk), ..stack.clone() }
}

/// The agent store, for reads behind the API.
fn agent_store(stack: &TestStack, db: &Client) -> AgentStore {
    AgentStore::new(db.clone(), stack.setting(names::AGENTS_TABLE))
}

fn start(message: &str, run_type: RunType) -> StartRun {
    StartRun {
        origin: RunOrigin {
            run_type,
            input: RunInput { message: message.into(), files: Vec::new() },
            schedule_id: None,
            session_id: None,
            parent: None,
        },
        request: agent_runtime::resolve::RunRequest { message: message.into(), ..Default::default() },
    }
}

/// A runner queue message for `run_id`, as SQS delivers it.
fn run_message(run_id: RunId) -> ReceivedMessage {
    ReceivedMessage {
        message_id: format!("m-{run_id}"),
        receipt_handle: format!("r-{run_id}"),
        body: json!({"run_id": run_id}).to_string(),
        receive_count: 1,
    }
}

/// Sequence numbers of the events in an SSE body.
fn event_count(body: &str) -> usize {
    body.lines().filter(|line| line.starts_with("id: ")).count()
}

/// An account with a `config` agent on `model` (its model named by id), made through a key of
/// its own: (account, agent id).
async fn config_agent(stack: &TestStack, clock: &TestClock, model: &ModelServer, name: &str) -> (Uuid, String) {
    let account = Uuid::new_v4();
    let agent = agent_of(stack, clock, account, model, name).await;
    (account, agent)
}

/// A `config` agent of `account` on `model`.
async fn agent_of(stack: &TestStack, clock: &TestClock, account: Uuid, model: &ModelServer, name: &str) -> String {
    let key = stack.api_key(account).await;
    let lm = stack.language_model(clock, &key, name, &model.base_url()).await;
    stack
        .client::<AgentsService>(clock)
        .with_key(&key)
        .post("/agents/", json!({"type": "config", "name": name, "framework": "chainlib", "language_model_id": lm}))
        .created()
        .await
}

async fn stored_agent(stack: &TestStack, account: Uuid, id: &str) -> Agent {
    agent_store(stack, &unrecorded(stack).dynamodb).get(account.into(), id.parse().unwrap()).await.unwrap().unwrap()
}

#[tokio::test]
async fn per_meeting_reads_make_three_calls() {
    let stack = calls_stack().await;
    stack.import(&demo_fixture()).await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1, 2]).await;
    let token = obtain_token(&stack.client::<AuthService>(&clock), &client_id, &secret).await;
    let meetings = stack.client::<MeetingsService>(&clock);
    // The token (token + application, and the client's bucket on a container's first request
    // of the client: the same BatchGetItem), the client's bucket, the meeting.
    stack.calls.reset();
    for suffix in ["", "summary/", "participants/", "recording/"] {
        meetings.with_token(&token).get(&format!("/api/v1/external/meeting/1001/{suffix}")).expect(200).await;
        assert_eq!(take(&stack), ops(&["BatchGetItem", "UpdateItem", "GetItem"]), "{suffix}");
    }
    meetings.with_token(&token).get("/api/v1/external/meeting/1001/transcript/").expect(200).await;
    assert_eq!(take(&stack), ops(&["BatchGetItem", "UpdateItem", "Query"]));
    // A stored recording's response and its file's redirect: the same three (the download URL is
    // signed in the function, with no S3 call).
    for path in ["1002/recording/", "1002/recording/file.wav"] {
        let reply = meetings.with_token(&token).get(&format!("/api/v1/external/meeting/{path}")).send().await;
        assert!(matches!(reply.status.as_u16(), 200 | 302), "{path}: {}", reply.text);
        assert_eq!(take(&stack), ops(&["BatchGetItem", "UpdateItem", "GetItem"]), "{path}");
    }

    // A refused token costs one call and touches no meeting data nor any bucket.
    meetings.with_token("someone.else").get("/api/v1/external/meeting/1001/").expect(401).await;
    assert_eq!(take(&stack), ["BatchGetItem"]);

    // A client this container knows to be over its limit: the token's read only.
    let tight = stack.with_settings(&[("MEETING_RATE_LIMIT_CAPACITY", "1"), ("MEETING_RATE_LIMIT_PER_MINUTE", "1")]);
    let tight = tight.client::<MeetingsService>(&clock).with_token(&token);
    tight.with_token(&token).get("/api/v1/external/meeting/1001/").expect(429).await;
    stack.calls.reset();
    tight.with_token(&token).get("/api/v1/external/meeting/1001/").expect(429).await;
    assert_eq!(take(&stack), ["BatchGetItem"]);
}

#[tokio::test]
async fn the_list_makes_one_query_per_organization_and_one_page_read() {
    let stack = calls_stack().await;
    stack.import(&demo_fixture()).await;
    let many: Vec<_> = (1..=150).map(|id| meeting(5000 + id, 1, 11, json!({"title": format!("Bulk {id}")}))).collect();
    stack.import(&json!({"meetings": many})).await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1, 2]).await;
    let token = obtain_token(&stack.client::<AuthService>(&clock), &client_id, &secret).await;
    let meetings = stack.client::<MeetingsService>(&clock);

    stack.calls.reset();
    let body = meetings.with_token(&token).get("/api/v1/external/meeting/?size=100&title=bulk").expect(200).await;
    assert_eq!(body["count"], 150);
    assert_eq!(take(&stack), ["BatchGetItem", "BatchGetItem", "Query", "Query", "UpdateItem"]);

    // No match: no page read at all.
    meetings
        .with_token(&token)
        .get("/api/v1/external/meeting/?title=nothing-matches&organization_id=2")
        .expect(200)
        .await;
    assert_eq!(take(&stack), ["BatchGetItem", "Query", "UpdateItem"]);

    // An indexed filter: the organizations' count items (are they in the filter indexes?), then
    // one Query per organization of what the filter matches, then the page.
    let body = meetings.with_token(&token).get("/api/v1/external/meeting/?participants=11&size=5").expect(200).await;
    assert_eq!(body["count"], 151);
    assert_eq!(take(&stack), ["BatchGetItem", "BatchGetItem", "BatchGetItem", "Query", "Query", "UpdateItem"]);

    // Unfiltered: the token, the organizations' counts, each organization's index to the page's
    // depth (Limit), the page.
    let body = meetings.with_token(&token).get("/api/v1/external/meeting/?size=10&page=2").expect(200).await;
    assert!(body["count"].as_u64().unwrap() > 150, "{body}");
    assert_eq!(stack.calls.query_limits(), [Some(20), Some(20)]);
    assert_eq!(take(&stack), ["BatchGetItem", "BatchGetItem", "BatchGetItem", "Query", "Query", "UpdateItem"]);
}

#[tokio::test]
async fn the_token_endpoints_make_three_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let auth = stack.client::<AuthService>(&clock);
    stack.calls.reset();
    // A container's first request of a client reads the application and its bucket together.
    let token = obtain_token(&auth, &client_id, &secret).await;
    assert_eq!(take(&stack), ["BatchGetItem", "PutItem", "UpdateItem"], "first token");
    obtain_token(&auth, &client_id, &secret).await;
    assert_eq!(take(&stack), ["GetItem", "PutItem", "UpdateItem"], "token");

    // Refused credentials: the application's read only (no bucket is touched).
    let refused = [("grant_type", "client_credentials"), ("client_id", &client_id), ("client_secret", "wrong")];
    auth.post_form("/api/auth/token/", &refused).expect(401).await;
    assert_eq!(take(&stack), ["GetItem"], "refused token");

    let revoke = [("client_id", client_id.as_str()), ("client_secret", secret.as_str()), ("token", token.as_str())];
    assert_eq!(auth.post_form("/api/auth/revoke-token/", &revoke).send().await.status, 200);
    assert_eq!(take(&stack), ["DeleteItem", "GetItem", "UpdateItem"], "revoke");
}

/// A client-credentials token request's form.
fn token_form(client_id: &str) -> [(&str, &str); 3] {
    [("grant_type", "client_credentials"), ("client_id", client_id), ("client_secret", "s")]
}

/// An id DynamoDB would refuse as a key (over 2,048 bytes) is refused as unknown
/// before any call: an `X-API-Key` id, a bearer token's client id, a token request's `client_id`
/// (form or Basic) and a revocation's. Each answer is the one an unknown id of usual length gets.
#[tokio::test]
async fn over_long_ids_are_refused_before_any_call() {
    use base64::Engine as _;
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let too_long = "i".repeat(2049);
    let health = stack.client::<HealthService>(&clock);
    let meetings = stack.client::<MeetingsService>(&clock);
    let auth = stack.client::<AuthService>(&clock);
    let without_timestamp = |reply: &Reply| {
        let mut body = reply.json();
        body.as_object_mut().unwrap().remove("timestamp");
        (reply.status, reply.header("www-authenticate").map(str::to_owned), body)
    };
    let basic = |id: &str| {
        let credentials = base64::engine::general_purpose::STANDARD.encode(format!("{id}:s"));
        auth.request(Method::POST, "/api/auth/token/")
            .header("authorization", format!("Basic {credentials}"))
            .body("application/x-www-form-urlencoded", "grant_type=client_credentials")
    };

    let unknown_key = health.with_key("unknown.secret").get("/health-check/auth-test").send().await;
    let unknown_bearer = meetings.with_token("unknown.secret").get("/api/v1/external/meeting/").send().await;
    let unknown_client = auth.post_form("/api/auth/token/", &token_form("unknown")).send().await;
    let unknown_basic = basic("unknown").send().await;
    let unknown_revoke = auth
        .post_form("/api/auth/revoke-token/", &[("client_id", "unknown"), ("client_secret", "s"), ("token", "t")])
        .send()
        .await;
    assert_eq!(unknown_key.status, 401);
    assert_eq!(unknown_client.json()["error"], "invalid_client");
    stack.calls.reset();

    let long_key = format!("{too_long}.secret");
    let key = health.with_key(&long_key).get("/health-check/auth-test").send().await;
    assert_eq!(without_timestamp(&key), without_timestamp(&unknown_key));
    let bearer = meetings.with_token(&long_key).get("/api/v1/external/meeting/").send().await;
    assert_eq!(
        (bearer.status, bearer.header("www-authenticate"), bearer.json()),
        (unknown_bearer.status, unknown_bearer.header("www-authenticate"), unknown_bearer.json())
    );
    for (reply, unknown) in [
        (auth.post_form("/api/auth/token/", &token_form(&too_long)).send().await, &unknown_client),
        (basic(&too_long).send().await, &unknown_basic),
        (
            auth.post_form(
                "/api/auth/revoke-token/",
                &[("client_id", &too_long), ("client_secret", "s"), ("token", "t")],
            )
            .send()
            .await,
            &unknown_revoke,
        ),
    ] {
        assert_eq!(
            (reply.status, reply.header("www-authenticate"), reply.json()),
            (unknown.status, unknown.header("www-authenticate"), unknown.json())
        );
    }
    assert_eq!(take(&stack), Vec::<String>::new(), "no DynamoDB call for an over-long id");
}

#[tokio::test]
async fn health_routes_make_only_the_gate_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let health = stack.client::<HealthService>(&clock);
    stack.calls.reset();
    for (path, gate) in [("/health-check", first_gated(&[])), ("/health-check/auth-test", gated(&[]))] {
        health.with_key(&key).get(path).expect(200).await;
        assert_eq!(take(&stack), gate, "{path}");
    }
    // The database check: one DescribeTimeToLive per table of the function's environment, each
    // one in the answer.
    let body = health.with_key(&key).get("/health-check/database").expect(200).await;
    let template = integration_tests::local_template();
    let function = template.function("HealthFunction").unwrap();
    let tables =
        platform_api::health::TABLE_VARIABLES.iter().filter(|name| function.environment.contains_key(**name)).count();
    assert_eq!(take(&stack), gated(&vec!["DescribeTimeToLive"; tables]), "/health-check/database");
    assert_eq!(body["data"]["tables"].as_array().unwrap().len(), tables);
}

#[tokio::test]
async fn an_agent_detail_reads_each_referenced_kind_once() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let (setup, key) = (stack.api_key(account).await, stack.api_key(account).await);
    let (tools, mcps) = (stack.client::<ToolsService>(&clock), stack.client::<McpsService>(&clock));
    let agents = stack.client::<AgentsService>(&clock);
    let id = |reply: Reply, status| reply.expect(status)["data"]["id"].as_str().unwrap().to_owned();
    let tool = id(tools.with_key(&setup).post("/tools", json!({"name": "t", "type": "http"})).send().await, 201);
    let mcp = json!({"name": "m", "url": "https://mcp.test/mcp"});
    let mcp = id(mcps.with_key(&setup).post("/mcps", mcp).send().await, 201);
    let helper = json!({"type": "a2a", "name": "helper"});
    let helper = id(agents.with_key(&key).post("/agents/", helper).send().await, 201);
    let lead = json!({"type": "config", "name": "lead", "framework": "chainlib", "provider": "openai",
        "model_name": "m", "agents": [helper], "tools": [tool], "mcps": [mcp]});
    stack.calls.reset();
    let lead = id(agents.with_key(&key).post("/agents/", lead).send().await, 201);
    // The gate, one BatchGetItem per referenced kind, one transaction, and the `agent.created`
    // event: the account's endpoints (Query) and the event (BatchWriteItem).
    assert_eq!(
        take(&stack),
        gated(&["BatchGetItem", "BatchGetItem", "BatchGetItem", "TransactWriteItems", "Query", "BatchWriteItem"])
    );
    agents.with_key(&key).get(&format!("/agents/{lead}")).expect(200).await;
    // + the agent (GetItem), its references, and the language models (Query) to resolve the pair.
    assert_eq!(take(&stack), gated(&["BatchGetItem", "BatchGetItem", "BatchGetItem", "GetItem", "Query"]));
    let mcps = stack.client::<McpsService>(&clock);
    let key = stack.api_key(account).await;
    stack.calls.reset();
    mcps.with_key(&key).get(&format!("/mcps/{mcp}")).expect(200).await;
    assert_eq!(take(&stack), first_gated(&["GetItem"]));
}

#[tokio::test]
async fn agent_routes_make_the_documented_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let (setup, key) = (stack.api_key(account).await, stack.api_key(account).await);
    let tool = stack
        .client::<ToolsService>(&clock)
        .with_key(&setup)
        .post("/tools", json!({"name": "t", "type": "http"}))
        .created()
        .await;
    let lm = stack
        .client::<LanguageModelsService>(&clock)
        .with_key(&setup)
        .post("/language-models", json!({"name": "lm", "provider": "openai", "model_name": "m"}))
        .created()
        .await;
    let flows = json!([{"id": "f-1", "name": "Summarize", "description": "", "folder_id": "d", "is_component": false}]);
    let flow_server = LocalServer::start(Arc::new(move |request| {
        let flows = flows.clone();
        Box::pin(async move {
            if request.headers().get("x-api-key").and_then(|v| v.to_str().ok()) != Some("flow-key") {
                return respond(403, "application/json", "{}");
            }
            respond(200, "application/json", flows.to_string())
        })
    }))
    .await;
    let with_flows = stack.with_settings(&[(names::FLOW_SERVER_URL, &flow_server.url(""))]);
    let agents = with_flows.client::<AgentsService>(&clock);
    let event = ["Query", "BatchWriteItem"];
    stack.calls.reset();

    let body = json!({"type": "config", "name": "a", "framework": "chainlib", "language_model_id": lm});
    let id = agents.with_key(&key).post("/agents/", body).expect(201).await["data"]["id"].as_str().unwrap().to_owned();
    // The account's first counted write: the transaction is refused for want of the agents
    // counter, which is initialized from a tally of the account's agents (Query, PutItem), and
    // sent again.
    let first_write = ["TransactWriteItems", "Query", "PutItem", "TransactWriteItems"];
    let created = first_gated(&[&first_write[..], &event[..]].concat());
    assert_eq!(take(&stack), created, "POST /agents/ without references");

    let replacement = json!({"type": "config", "name": "a", "framework": "chainlib", "language_model_id": lm,
        "tools": [tool]});
    let detail = format!("/agents/{id}");
    // (method, path, body, the route's own calls besides the gate)
    let cases: Vec<(Method, String, Option<Value>, Vec<&str>)> = vec![
        // The spec's whole list, and a filter: the account's active agents (the `active` index).
        (Method::GET, "/agents/".into(), None, vec!["Query"]),
        (Method::GET, "/agents/?framework=chainlib&limit=5".into(), None, vec!["Query"]),
        (Method::GET, "/agents/?metadata.team=x".into(), None, vec!["Query"]),
        (Method::GET, "/agents/?metadata%5Bteam%5D=x".into(), None, vec!["Query"]),
        // A page: the counter (the total), the page's depth of the `active` index.
        (Method::GET, "/agents/?page=1&limit=5".into(), None, vec!["GetItem", "Query"]),
        // The agent, then the model it names by id (the detail shows its provider and name).
        (Method::GET, detail.clone(), None, vec!["GetItem", "GetItem"]),
        // The agent, the tools checked, the write, the event, then the detail's tools and model.
        (
            Method::PUT,
            detail.clone(),
            Some(replacement),
            vec!["GetItem", "BatchGetItem", "TransactWriteItems", "Query", "BatchWriteItem", "BatchGetItem", "GetItem"],
        ),
        // A PATCH checks only the references it sends; the detail reads the stored ones.
        (
            Method::PATCH,
            detail.clone(),
            Some(json!({"description": "d"})),
            vec!["GetItem", "TransactWriteItems", "Query", "BatchWriteItem", "BatchGetItem", "GetItem"],
        ),
        // An agent's first runs list: the agent, its counts (none yet), its whole `by-agent`
        // index once, and the tally of its runs from before counts were kept (UpdateItem).
        (Method::GET, format!("{detail}/runs"), None, vec!["GetItem", "Query", "Query", "UpdateItem"]),
        // Then the agent and its counts: with no runs, no index Query at all.
        (Method::GET, format!("{detail}/runs"), None, vec!["GetItem", "Query"]),
        // A soft delete and a restore change the agents counter in the same transaction.
        (Method::DELETE, detail.clone(), None, vec!["TransactWriteItems", "Query", "BatchWriteItem"]),
        (Method::POST, format!("{detail}/restore"), None, vec!["TransactWriteItems", "Query", "BatchWriteItem"]),
        // The server's flows, the account's agents (Query), per created agent its transaction and
        // its `agent.created` event.
        (
            Method::POST,
            "/agents/flowtool/sync".into(),
            Some(json!({"base_url": flow_server.url(""), "api_key": "flow-key"})),
            vec!["Query", "TransactWriteItems", "Query", "BatchWriteItem"],
        ),
    ];
    for (method, path, body, own) in cases {
        let reply = agents.with_key(&key).request(method.clone(), &path).json(body).send().await;
        ok(&reply, &format!("{method} {path}"));
        assert_eq!(take(&stack), gated(&own), "{method} {path}");
    }

    // A list that syncs first (the stored flow server key; nothing new): the sync's Query of the
    // account's agents, then the list's own (the `active` index).
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    let secret_id = stack.setting(names::FLOW_SERVER_SECRET_ID);
    secrets.put_secret_value().secret_id(secret_id).secret_string("flow-key").send().await.unwrap();
    stack.calls.reset();
    agents.with_key(&key).get("/agents/?sync_flowtool_agents=true").expect(200).await;
    assert_eq!(take(&stack), gated(&["Query", "Query"]), "GET /agents/?sync_flowtool_agents=true");

    // One run's record: the agent and the run.
    let agent = stored_agent(&stack, account, &id).await;
    let run = unrecorded(&stack)
        .service::<RunLifecycle>(&clock)
        .create(&agent, &start("hi", RunType::Api), Duration::from_secs(60))
        .await
        .unwrap();
    stack.calls.reset();
    agents.with_key(&key).get(&format!("{detail}/runs/{}", run.run_id)).expect(200).await;
    assert_eq!(take(&stack), gated(&["GetItem", "GetItem"]), "GET /agents/{{id}}/runs/{{run_id}}");

    // The runs list reads the agent's counts (a Query without Limit), then its `by-agent` index
    // only down to the page's depth (Limit = page × limit, at most the total): its cost follows
    // the page, not the agent's history.
    let unrecorded_runner = unrecorded(&stack).service::<RunLifecycle>(&clock);
    for _ in 0..30 {
        unrecorded_runner.create(&agent, &start("hi", RunType::Api), Duration::from_secs(60)).await.unwrap();
    }
    let list = |query: &str| {
        let (agents, key, path) = (&agents, &key, format!("{detail}/runs{query}"));
        async move { agents.with_key(key).get(&path).expect(200).await }
    };
    let all = list("?limit=100").await;
    assert_eq!(all["pagination"]["total"], 31);
    let ids = |page: &Value| -> Vec<String> {
        page["data"].as_array().unwrap().iter().map(|run| run["id"].as_str().unwrap().to_owned()).collect()
    };
    stack.calls.reset();
    let page = list("?limit=1").await;
    assert_eq!(ids(&page), ids(&all)[..1]);
    assert_eq!(page["pagination"], json!({"page": 1, "limit": 1, "total": 31, "pages": 31}));
    assert_eq!(stack.calls.query_limits(), [None, Some(1)], "the counts, the index down to the page");
    assert_eq!(take(&stack), gated(&["GetItem", "Query", "Query"]), "GET /agents/{{id}}/runs?limit=1");
    // Pages at several depths are the full read's, each read down to its depth only.
    for (page, limit) in [(1, 7), (2, 7), (4, 7), (5, 7), (3, 10), (4, 10), (2, 30)] {
        let found = list(&format!("?page={page}&limit={limit}")).await;
        let start = (page - 1) * limit;
        let expected = &ids(&all)[start.min(31)..(start + limit).min(31)];
        assert_eq!(ids(&found), expected, "page {page} of {limit}");
        assert_eq!(found["pagination"]["total"], 31);
        assert_eq!(stack.calls.query_limits(), [None, Some(((page * limit) as u64).min(31))], "page {page} of {limit}");
        stack.calls.reset();
    }
    // A page past the end: the agent and its counts only.
    let past = list("?page=9&limit=10").await;
    assert_eq!((ids(&past).len(), &past["pagination"]["total"]), (0, &json!(31)));
    assert_eq!(take(&stack), gated(&["GetItem", "Query"]), "a page past the end");
    // A filter reads the counts, the agent's lost runs (`started` and `failed` only; none), the
    // one cell with runs (`started.api`) down to the page's depth, and the page's records.
    let started = list("?status=started&limit=1").await;
    assert_eq!(started["pagination"]["total"], 31);
    assert_eq!(ids(&started), ids(&all)[..1]);
    assert_eq!(stack.calls.query_limits(), [None, None, Some(1)], "counts, lost runs, one cell");
    assert_eq!(
        take(&stack),
        gated(&["GetItem", "Query", "Query", "Query", "BatchGetItem"]),
        "GET /agents/{{id}}/runs?status=started"
    );
    // A type filter needs no lost runs: the counts, its three status cells with runs (one here).
    let api = list("?run_type=api&page=2&limit=5").await;
    assert_eq!(ids(&api), ids(&all)[5..10]);
    assert_eq!(stack.calls.query_limits(), [None, Some(10)]);
    assert_eq!(take(&stack), gated(&["GetItem", "Query", "Query", "BatchGetItem"]), "GET …/runs?run_type=api");
}

#[tokio::test]
async fn a_run_through_the_agents_api_makes_the_documented_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("All done here.")]).await;
    let (account, agent) = config_agent(&stack, &clock, &model, "a").await;
    let key = stack.api_key(account).await;
    let service = stack.client::<AgentRunsService>(&clock).with_key(&key);
    stack.calls.reset();
    let started = Instant::now();
    let reply = service.post(&format!("/agents/{agent}/run"), json!({"message": "hi"})).send().await;
    let elapsed = started.elapsed();
    assert_eq!(reply.status, 200, "{}", reply.text);
    let run_id = reply.header("x-run-id").unwrap().to_owned();
    // The gate (a first request: the key and its bucket), the agent, the run's place among the
    // account's executing runs (UpdateItem), the account's endpoints (Query) for `run.started`,
    // written with the record and its count (TransactWriteItems), the model (by id), the
    // endpoints again for `run.succeeded`, written with the end and the last event
    // (TransactWriteItems), the place given back; the account's budget before the run and
    // before its turn (GetItem each), the run's day totals after its end (TransactWriteItems).
    let fixed = [
        "BatchGetItem",
        "UpdateItem",
        "GetItem",
        "UpdateItem",
        "UpdateItem",
        "Query",
        "TransactWriteItems",
        "GetItem",
        "Query",
        "TransactWriteItems",
        "GetItem",
        "GetItem",
        "TransactWriteItems",
    ];
    assert_run(&take(&stack), &fixed, event_count(&reply.text) - 1, elapsed, "POST /agents/{id}/run");

    // A resumed stream of the ended run: the agent and the run together, one Query of its events.
    let path = format!("/agents/{agent}/runs/{run_id}/stream");
    let resumed = service.get(&path).send().await;
    assert_eq!(resumed.status, 200, "{}", resumed.text);
    assert_eq!(event_count(&resumed.text), event_count(&reply.text));
    // The stream holds a place among the account's followed streams (UpdateItem, given back).
    assert_eq!(
        take(&stack),
        gated(&["BatchGetItem", "UpdateItem", "Query", "UpdateItem"]),
        "GET …/runs/{{run_id}}/stream"
    );
}

#[tokio::test]
async fn language_model_routes_make_the_documented_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let models = stack.client::<LanguageModelsService>(&clock);
    stack.calls.reset();
    let body = json!({"name": "lm", "provider": "openai", "model_name": "m", "api_key": "sk-1"});
    let id = models.with_key(&key).post("/language-models", body).created().await;
    // The account's first counted write: refused for want of a counter, the tally of its models
    // (Query), the counter (PutItem) and the write again.
    assert_eq!(
        take(&stack),
        first_gated(&["Query", "PutItem", "TransactWriteItems", "TransactWriteItems"]),
        "POST /language-models"
    );
    let path = format!("/language-models/{id}");
    let cases: Vec<(Method, String, Option<Value>, Vec<&str>)> = vec![
        // The counter (the total), the page's depth of the `active` index.
        (Method::GET, "/language-models".into(), None, vec!["GetItem", "Query"]),
        (Method::GET, path.clone(), None, vec!["GetItem"]),
        (
            Method::PUT,
            path.clone(),
            Some(json!({"name": "lm2", "provider": "openai", "model_name": "m"})),
            vec!["GetItem", "TransactWriteItems"],
        ),
        // The model, the account's agents (one Query per MB: none may name it), the delete.
        (Method::DELETE, path.clone(), None, vec!["GetItem", "Query", "TransactWriteItems"]),
    ];
    for (method, path, body, own) in cases {
        ok(&models.with_key(&key).request(method.clone(), &path).json(body).send().await, &format!("{method} {path}"));
        assert_eq!(take(&stack), gated(&own), "{method} {path}");
    }
}

#[tokio::test]
async fn tool_routes_make_the_documented_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let script = "def run(city: str) -> str:\n    return city\n";
    let upload = |method: Method, path: String| {
        let body = format!(
            "--B0und\r\nContent-Disposition: form-data; name=\"file\"; filename=\"w.py\"\r\n\
             Content-Type: text/x-python\r\n\r\n{script}\r\n--B0und--\r\n"
        );
        tools.request(method, &path).body("multipart/form-data; boundary=B0und", body)
    };
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let mcp = mcps.post("/mcps", json!({"name": "m", "url": "https://mcp.example.com/mcp"})).created().await;
    stack.calls.reset();
    let id = tools.post("/tools", json!({"name": "t", "type": "custom", "script": script})).created().await;
    assert_eq!(
        take(&stack),
        first_gated(&["Query", "PutItem", "TransactWriteItems", "TransactWriteItems"]),
        "POST /tools"
    );
    upload(Method::POST, "/tools/upload".into()).expect(201).await;
    assert_eq!(take(&stack), gated(&["TransactWriteItems"]), "POST /tools/upload");
    upload(Method::PUT, format!("/tools/{id}/upload")).expect(200).await;
    assert_eq!(take(&stack), gated(&["GetItem", "TransactWriteItems"]), "PUT /tools/{{id}}/upload");

    let path = format!("/tools/{id}");
    let cases: Vec<(Method, String, Option<Value>, Vec<&str>)> = vec![
        (Method::GET, "/tools".into(), None, vec!["GetItem", "Query"]),
        // A type: the account's active tools.
        (Method::GET, "/tools?type=custom".into(), None, vec!["Query"]),
        (Method::GET, path.clone(), None, vec!["GetItem"]),
        (Method::GET, format!("{path}/script"), None, vec!["GetItem"]),
        (
            Method::PUT,
            path.clone(),
            Some(json!({"name": "t2", "type": "custom", "script": script})),
            vec!["GetItem", "TransactWriteItems"],
        ),
        // Counted out and in: the record and the counter in one transaction.
        (Method::DELETE, path.clone(), None, vec!["TransactWriteItems"]),
        (Method::POST, format!("{path}/restore"), None, vec!["TransactWriteItems"]),
        // An `mcp` tool: the MCP configuration it names, then the write.
        (
            Method::POST,
            "/tools".into(),
            Some(json!({"name": "m", "type": "mcp", "config": {"mcp_id": mcp, "tool_name": "search"}})),
            vec!["GetItem", "TransactWriteItems"],
        ),
    ];
    for (method, path, body, own) in cases {
        ok(&tools.request(method.clone(), &path).json(body).send().await, &format!("{method} {path}"));
        assert_eq!(take(&stack), gated(&own), "{method} {path}");
    }
}

#[tokio::test]
async fn mcp_routes_make_the_documented_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let mcps = stack.client::<McpsService>(&clock);
    let server = integration_tests::mcp_server::start_mcp_server(None).await;
    let url = server.url("/mcp");
    stack.calls.reset();
    let body = json!({"name": "m", "url": url, "secret_headers": {"X-Token": "t"}});
    let id = mcps.with_key(&key).post("/mcps", body).created().await;
    assert_eq!(
        take(&stack),
        first_gated(&["Query", "PutItem", "TransactWriteItems", "TransactWriteItems"]),
        "POST /mcps"
    );
    let path = format!("/mcps/{id}");
    let cases: Vec<(Method, String, Option<Value>, Vec<&str>)> = vec![
        (Method::GET, "/mcps".into(), None, vec!["GetItem", "Query"]),
        (Method::GET, "/mcps?include_tools=true".into(), None, vec!["GetItem", "Query"]),
        (Method::GET, path.clone(), None, vec!["GetItem"]),
        (Method::GET, format!("{path}?include_tools=true"), None, vec!["GetItem"]),
        (Method::GET, format!("{path}/tools"), None, vec!["GetItem"]),
        (Method::POST, "/mcps/connect".into(), Some(json!({"mcp_id": id})), vec!["GetItem"]),
        (Method::POST, "/mcps/connect".into(), Some(json!({"url": url})), vec![]),
        (Method::POST, "/mcps/connect/tools".into(), Some(json!({"url": url})), vec![]),
        (Method::PUT, path.clone(), Some(json!({"name": "m2", "url": url})), vec!["GetItem", "TransactWriteItems"]),
        (Method::DELETE, path.clone(), None, vec!["TransactWriteItems"]),
        (Method::POST, format!("{path}/restore"), None, vec!["TransactWriteItems"]),
    ];
    for (method, path, body, own) in cases {
        ok(&mcps.with_key(&key).request(method.clone(), &path).json(body).send().await, &format!("{method} {path}"));
        assert_eq!(take(&stack), gated(&own), "{method} {path}");
    }
}

/// A webhook receiver answering the statuses it is given (then 200).
async fn receiver() -> (LocalServer, Arc<Mutex<VecDeque<u16>>>) {
    let statuses: Arc<Mutex<VecDeque<u16>>> = Arc::default();
    let plan = Arc::clone(&statuses);
    let handler: Handler = Arc::new(move |_request| {
        let status = plan.lock().unwrap().pop_front().unwrap_or(200);
        Box::pin(async move { respond(status, "text/plain", "ok") })
    });
    (LocalServer::start(handler).await, statuses)
}

#[tokio::test]
async fn webhook_routes_the_delivery_worker_and_the_sweeper_make_the_documented_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let publisher = stack.webhook_settings().publisher;
    let service = stack.client::<WebhooksService>(&clock).with_key(&key);
    let (server, statuses) = receiver().await;
    let call = |method: Method, path: String, body: Option<Value>| {
        let service = &service;
        async move {
            let reply = service.request(method.clone(), &path).json(body).send().await;
            ok(&reply, &format!("{method} {path}"))
        }
    };
    stack.calls.reset();
    let created = call(Method::POST, "/webhooks/endpoints".into(), Some(json!({"url": server.url("/")}))).await;
    // The account's first counted write: refused for want of the endpoints counter, which is
    // initialized from a tally (Query, PutItem), and sent again.
    let first_write = ["TransactWriteItems", "Query", "PutItem", "TransactWriteItems"];
    assert_eq!(take(&stack), first_gated(&first_write), "POST /webhooks/endpoints");
    let endpoint = created["data"]["id"].as_str().unwrap().to_owned();
    let path = format!("/webhooks/endpoints/{endpoint}");
    let tested = call(Method::POST, format!("{path}/test"), None).await;
    // The endpoint, then the event and its delivery in one BatchWriteItem.
    assert_eq!(take(&stack), gated(&["GetItem", "BatchWriteItem"]), "POST …/test");
    let event = tested["data"]["event_id"].as_str().unwrap().to_owned();

    let cases: Vec<(Method, String, Option<Value>, Vec<&str>)> = vec![
        (Method::GET, "/webhooks/endpoints".into(), None, vec!["Query"]),
        (Method::GET, path.clone(), None, vec!["GetItem"]),
        (Method::PUT, path.clone(), Some(json!({"url": server.url("/hook")})), vec!["GetItem", "PutItem"]),
        (Method::POST, format!("{path}/rotate"), None, vec!["GetItem"]),
        (Method::GET, "/webhooks/events".into(), None, vec!["Query"]),
        (Method::GET, format!("/webhooks/events/{event}"), None, vec!["GetItem", "Query"]),
        (Method::GET, format!("{path}/deliveries"), None, vec!["GetItem", "Query"]),
        (Method::POST, format!("{path}/replay-failed"), None, vec!["GetItem", "Query"]),
    ];
    for (method, path, body, own) in cases {
        call(method.clone(), path.clone(), body).await;
        assert_eq!(take(&stack), gated(&own), "{method} {path}");
    }
    // Pages read with `Limit` = the page size + 1; `replay-failed`, its batch + 1.
    call(Method::GET, "/webhooks/events?limit=5".into(), None).await;
    assert_eq!(stack.calls.query_limits(), [Some(6)]);
    take(&stack);
    let deliveries = call(Method::GET, format!("{path}/deliveries?limit=5"), None).await;
    assert_eq!(stack.calls.query_limits(), [Some(6)]);
    take(&stack);
    call(Method::POST, format!("{path}/replay-failed"), None).await;
    assert_eq!(stack.calls.query_limits(), [Some(platform_api::webhooks::REPLAY_BATCH as u64 + 1)]);
    take(&stack);
    let delivery = deliveries["data"][0]["id"].as_str().unwrap().to_owned();
    call(Method::POST, format!("/webhooks/deliveries/{delivery}/replay"), None).await;
    assert_eq!(take(&stack), gated(&["GetItem", "GetItem"]), "POST /webhooks/deliveries/{{id}}/replay");

    // The delivery worker, per message: the delivery, its endpoint and its event (one
    // BatchGetItem), the attempt (PutItem), and the endpoint when its health changes (PutItem).
    let queue = Arc::clone(&publisher.queue);
    let drain = || drain_queue(&queue);
    drain().await;
    let now = clock.clone();
    // The function's deliverer (`into_deliverer`) but on the test's clock, without jitter.
    let settings = stack.webhook_settings();
    let worker = webhooks::delivery::Deliverer::new(
        settings.publisher,
        settings.secrets,
        settings.policy,
        Arc::new(move || now.now()),
        Arc::new(|| 0.0),
    )
    .with_attempt_timeout(Duration::from_secs(1));
    call(Method::POST, format!("{path}/test"), None).await;
    let [message] = <[ReceivedMessage; 1]>::try_from(drain().await).unwrap();
    stack.calls.reset();
    statuses.lock().unwrap().push_back(500);
    worker.handle(&message).await.unwrap();
    assert_eq!(take(&stack), ops(&["BatchGetItem", "PutItem", "PutItem"]), "a failed attempt starts the failure clock");
    worker.handle(&message).await.unwrap();
    assert_eq!(take(&stack), ops(&["BatchGetItem", "PutItem", "PutItem"]), "a success stops it");
    worker.handle(&message).await.unwrap();
    assert_eq!(take(&stack), ["BatchGetItem"], "a delivery already done is not sent again");
    call(Method::POST, format!("{path}/test"), None).await;
    let [message] = <[ReceivedMessage; 1]>::try_from(drain().await).unwrap();
    stack.calls.reset();
    worker.handle(&message).await.unwrap();
    assert_eq!(take(&stack), ops(&["BatchGetItem", "PutItem"]), "a success to a healthy endpoint");

    // The sweeper: one Query with Limit 100 per shard of the pending index (8), and per overdue
    // delivery one UpdateItem (its lease). The first test's delivery was never sent.
    let sweeper = stack.service::<webhooks::sweeper::Sweeper>(&clock);
    let report = sweeper.sweep().await.unwrap();
    assert_eq!(stack.calls.query_limits(), [Some(100); 8]);
    assert_eq!(take(&stack), ops(&["Query"; 8]), "nothing overdue: {report:?}");
    clock.advance(webhooks::sweeper::OVERDUE_AFTER_MINUTES * 60 + 60);
    sweeper.sweep().await.unwrap();
    let mut expected = vec!["Query"; 8];
    expected.push("UpdateItem");
    assert_eq!(take(&stack), ops(&expected), "one overdue delivery");

    call(Method::DELETE, path.clone(), None).await;
    // The endpoint and the account's endpoints counter in one transaction.
    assert_eq!(take(&stack), gated(&["TransactWriteItems"]), "DELETE /webhooks/endpoints/{{id}}");
}

#[tokio::test]
async fn runner_monitoring_routes_make_the_documented_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Done.")]).await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let lm = stack.language_model(&clock, &key, "lm", &model.base_url()).await;
    let agent = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .post("/agents/", json!({"type": "config", "name": "a", "framework": "chainlib", "language_model_id": lm}))
        .created()
        .await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let execute = runner.post("/execute/a2a/stream/agent", json!({"agent_id": agent, "message": "hi"}));
    let response = execute.stream().await;
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
        runner.request(method.clone(), &path).expect(200).await;
        let expected = sorted(gate.iter().chain(own.iter()).map(|op| (*op).to_owned()).collect());
        assert_eq!(take(&stack), expected, "{method} {path}");
    }
    runner.post("/tools/validation", json!({"script": "def run():\n  pass\n"})).expect(200).await;
    assert_eq!(take(&stack), gate);
}

#[tokio::test]
async fn runner_execution_routes_and_the_worker_make_the_documented_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("One two three."); 3]).await;
    let (account, agent) = config_agent(&stack, &clock, &model, "a").await;
    // Never notified: a run of `slow` goes on until it is cancelled.
    let never = Arc::new(tokio::sync::Notify::new());
    let slow_model = ModelServer::start(vec![gated_hello_world(&never)]).await;
    let slow = agent_of(&stack, &clock, account, &slow_model, "slow").await;
    let key = stack.api_key(account).await;
    let service = stack.client::<RunnerService>(&clock).with_key(&key);
    let other_process = unrecorded(&stack).service::<RunLifecycle>(&clock);
    let the_agent = stored_agent(&stack, account, &agent).await;
    let run_body = Some(json!({"agent_id": agent, "message": "hi"}));
    stack.calls.reset();

    // Executed here: the gate (a first request: the key and its bucket), the agent, the run's
    // place among the account's executing runs (UpdateItem), the endpoints for `run.started`
    // (Query), written with the record and its count (TransactWriteItems), the model (by id),
    // the endpoints for `run.succeeded`, written with the end and the last event
    // (TransactWriteItems), the place given back; then the event batches and cancel checks
    // time decides; the budget before the run and its turn, the day totals after its end.
    let started = Instant::now();
    let reply = service.request(Method::POST, "/execute/a2a/stream/agent").json(run_body.clone()).send().await;
    let elapsed = started.elapsed();
    assert_eq!(reply.status, 200, "{}", reply.text);
    let task = reply.header("x-run-id").unwrap().to_owned();
    let fixed = [
        "BatchGetItem",
        "UpdateItem",
        "UpdateItem",
        "UpdateItem",
        "GetItem",
        "Query",
        "TransactWriteItems",
        "GetItem",
        "Query",
        "TransactWriteItems",
        "GetItem",
        "GetItem",
        "TransactWriteItems",
    ];
    assert_run(&take(&stack), &fixed, event_count(&reply.text) - 1, elapsed, "POST /execute/a2a/stream/agent");

    let cases: Vec<(Method, String, Vec<&str>)> = vec![
        // The record, a place among the account's followed streams (UpdateItem), one Query of
        // its events (an ended run's stream replays and ends), the place given back.
        (Method::GET, format!("/monitoring/tasks/{task}/stream"), vec!["GetItem", "UpdateItem", "Query", "UpdateItem"]),
        // The agent's first list: the agent, its counts, its whole index once and the tally.
        (Method::GET, format!("/monitoring/agent/{agent}/executions"), vec!["GetItem", "Query", "Query", "UpdateItem"]),
        // Then the agent, its counts and its index down to the page's depth.
        (Method::GET, format!("/monitoring/agent/{agent}/executions?limit=1"), vec!["GetItem", "Query", "Query"]),
        // Filtered: the agent, its counts, the one cell of the filter with runs, the page.
        (
            Method::GET,
            format!("/monitoring/agent/{agent}/executions?run_type=api&status=success"),
            vec!["GetItem", "Query", "Query", "BatchGetItem"],
        ),
        // The account's agents (Query), per `config` agent its model by id (GetItem).
        (Method::GET, "/execute/a2a/agents/health".into(), vec!["Query", "GetItem", "GetItem"]),
        (Method::GET, format!("/execute/a2a/agents/health?agent_id={agent}"), vec!["GetItem", "GetItem"]),
        (Method::GET, "/health-check".into(), vec![]),
    ];
    for (method, path, own) in cases {
        let reply = service.request(method.clone(), &path).send().await;
        assert_eq!(reply.status, 200, "{method} {path}: {}", reply.text);
        if path.ends_with("executions?limit=1") {
            assert_eq!(stack.calls.query_limits(), [None, Some(1)], "{path}");
            assert_eq!(reply.json()["pagination"]["total"], 1);
        }
        assert_eq!(take(&stack), gated(&own), "{method} {path}");
    }
    // The probes: one DescribeTimeToLive per table of its environment, each one in the answer.
    let reply = service.get("/health-check/detailed").send().await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let template = integration_tests::local_template();
    let runner = template.function("RunnerFunction").unwrap();
    let tables =
        platform_api::health::TABLE_VARIABLES.iter().filter(|name| runner.environment.contains_key(**name)).count();
    assert_eq!(take(&stack), gated(&vec!["DescribeTimeToLive"; tables]), "GET /health-check/detailed");
    assert_eq!(reply.json()["data"]["tables"].as_array().unwrap().len(), tables);

    // Queued: the gate, the agent, the stream's place among the account's followed ones and the
    // run's among its queued ones (UpdateItem each), the endpoints (Query) for `run.started`,
    // written with the record and its count (TransactWriteItems), the stream's place given back
    // at its end, the account's budget (GetItem); then the follower, while a worker
    // in another process executes the run: one Query per poll, and one GetItem of the record
    // every 20 polls without events.
    let request = service.post("/execute/a2a/stream/celery/agent", run_body.clone().unwrap());
    let response = request.stream().await;
    assert_eq!(response.status(), 200);
    let run_id: RunId = response.headers()["x-run-id"].to_str().unwrap().parse().unwrap();
    let worker = unrecorded(&stack).service::<RunWorker>(&clock);
    let retry = worker.handle_batch(&[run_message(run_id)], &integration_tests::worker_invocation("w-1")).await;
    assert!(retry.is_empty());
    let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("event: done"));
    let operations = take(&stack);
    let polls = count(&operations, "Query") - 1;
    assert!(polls >= 1, "{operations:?}");
    // The gate's, the agent's and the budget's GetItem are fixed; the rest are record checks.
    let record_checks = count(&operations, "GetItem") - 3;
    assert!(record_checks <= polls / 20, "{operations:?}");
    let rest = without(&without(&operations, "Query", polls), "GetItem", record_checks);
    assert_eq!(
        rest,
        gated(&["GetItem", "GetItem", "UpdateItem", "UpdateItem", "Query", "TransactWriteItems", "UpdateItem"]),
        "POST …/stream/celery/agent"
    );

    // The worker, per queued run: the record, its lease (UpdateItem), the agent, its place among
    // the account's executing runs (UpdateItem), its start (UpdateItem, on its first pick-up),
    // its journal (Query), its last event (Query), the model, the turn journaled
    // (BatchWriteItem), the endpoints (Query) for `run.succeeded`, written with the end and the
    // last event (TransactWriteItems), its places among the executing and the queued runs given
    // back (UpdateItem each), the lease released (UpdateItem); then its event batches and
    // cancel checks.
    let queued = other_process.enqueue(&the_agent, &start("hi", RunType::Queue), &stack.run_queue()).await.unwrap();
    let worker = stack.service::<RunWorker>(&clock);
    stack.calls.reset();
    let started = Instant::now();
    let retry = worker.handle_batch(&[run_message(queued.run_id)], &integration_tests::worker_invocation("w-2")).await;
    let elapsed = started.elapsed();
    assert!(retry.is_empty());
    let operations = take(&stack);
    let events = other_process.runs().last_event_seq(queued.run_id).await.unwrap() as usize;
    // The budget before it starts and before its turn (GetItem each), its day totals after its
    // end (TransactWriteItems).
    let fixed = [
        "GetItem",
        "UpdateItem",
        "GetItem",
        "UpdateItem",
        "UpdateItem",
        "Query",
        "Query",
        "GetItem",
        "BatchWriteItem",
        "Query",
        "TransactWriteItems",
        "UpdateItem",
        "UpdateItem",
        "UpdateItem",
        "GetItem",
        "GetItem",
        "TransactWriteItems",
    ];
    assert_run(&operations, &fixed, events - 1, elapsed, "the runner worker");

    // Cancelling a queued run nobody holds ends it at once: the record, the cancel (UpdateItem),
    // the lease (UpdateItem), the record again, its last event (Query), its `metadata` event
    // (BatchWriteItem), the endpoints (Query) for `run.failed`, written with its end and its
    // `error` event (TransactWriteItems), its day totals (TransactWriteItems), its places among
    // the account's executing and queued runs given back (UpdateItem each), the lease released,
    // then the view (the control item
    // and the last event).
    let queued = other_process.enqueue(&the_agent, &start("hi", RunType::Queue), &stack.run_queue()).await.unwrap();
    let path = format!("/monitoring/tasks/{}", queued.run_id);
    stack.calls.reset();
    service.delete(&path).expect(200).await;
    let own = [
        "GetItem",
        "UpdateItem",
        "UpdateItem",
        "GetItem",
        "Query",
        "BatchWriteItem",
        "Query",
        "TransactWriteItems",
        "TransactWriteItems",
        "UpdateItem",
        "UpdateItem",
        "UpdateItem",
        "GetItem",
        "Query",
    ];
    assert_eq!(take(&stack), gated(&own), "DELETE a queued task");

    // A purge of the ended run: the record, its events and its journal (a Query and a
    // BatchWriteItem each), the record deleted and uncounted (TransactWriteItems).
    service.delete(&format!("{path}?purge=true")).expect(200).await;
    assert_eq!(
        take(&stack),
        gated(&["GetItem", "Query", "BatchWriteItem", "Query", "BatchWriteItem", "TransactWriteItems"]),
        "DELETE ?purge=true"
    );

    // Cancelling a run another process executes: the record, the cancel, then one GetItem of the
    // record per 250 ms until it ended (at most 5 s), then the view.
    let running =
        other_process.start(stored_agent(&stack, account, &slow).await, start("hi", RunType::Api)).await.unwrap();
    stack.calls.reset();
    let path = format!("/monitoring/tasks/{}", running.run_id);
    let reply = service.delete(&path).send().await;
    // 200 once it ended (within a second or so); 202 if it still ran after 5 s.
    assert!([200, 202].contains(&reply.status.as_u16()), "{}", reply.text);
    let operations = take(&stack);
    let waits = count(&operations, "GetItem") - 3;
    assert!((1..=20).contains(&waits), "{operations:?}");
    assert_eq!(without(&operations, "GetItem", waits), gated(&["GetItem", "UpdateItem", "GetItem", "Query"]));
}

#[tokio::test]
async fn schedule_routes_make_the_documented_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let agent = stack
        .client::<AgentsService>(&clock)
        .with_key(&stack.api_key(account).await)
        .post(
            "/agents/",
            json!({"type": "config", "name": "a", "framework": "chainlib", "provider": "openai", "model_name": "m"}),
        )
        .created()
        .await;
    let key = stack.api_key(account).await;
    let schedules = stack.client::<SchedulesService>(&clock);
    stack.calls.reset();
    let created = schedules
        .with_key(&key)
        .post(&format!("/agents/{agent}/schedule"), json!({"cron_expression": "@daily", "message": "m"}))
        .expect(201)
        .await;
    // The agent, then the account's first counted write: refused for want of the schedules
    // counter, which is initialized from a tally (Query, PutItem), and sent again.
    let first_write = ["TransactWriteItems", "Query", "PutItem", "TransactWriteItems"];
    assert_eq!(take(&stack), first_gated(&[&["GetItem"][..], &first_write[..]].concat()), "create");
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    let cases: [(Method, String, Option<Value>, Vec<&str>); 6] = [
        (Method::GET, format!("/agents/schedules/{id}"), None, vec!["GetItem"]),
        // The counter (the total), then the page's depth of the account's schedules.
        (Method::GET, "/agents/schedules".into(), None, vec!["GetItem", "Query"]),
        (Method::GET, format!("/agents/schedules?agent_id={agent}"), None, vec!["GetItem", "Query"]),
        (Method::PUT, format!("/agents/schedules/{id}"), Some(json!({"message": "n"})), vec!["GetItem", "UpdateItem"]),
        // The schedule, the agent, the run's place among the account's queued runs
        // (UpdateItem), the endpoints (Query) for `run.started`, written with the run and its
        // count (TransactWriteItems), the schedule's last run (UpdateItem) and
        // `schedule.triggered`; the run goes on the runner queue.
        (
            Method::POST,
            format!("/agents/schedules/{id}/trigger"),
            None,
            vec![
                "GetItem",
                "GetItem",
                "GetItem",
                "UpdateItem",
                "Query",
                "TransactWriteItems",
                "UpdateItem",
                "Query",
                "BatchWriteItem",
            ],
        ),
        // The schedule and the account's schedules counter in one transaction.
        (Method::DELETE, format!("/agents/schedules/{id}"), None, vec!["TransactWriteItems"]),
    ];
    for (method, path, body, own) in cases {
        let reply = schedules.with_key(&key).request(method.clone(), &path).json(body).send().await;
        ok(&reply, &format!("{method} {path}"));
        assert_eq!(take(&stack), gated(&own), "{method} {path}");
    }
}

#[tokio::test]
async fn a_scheduler_tick_makes_the_documented_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let agent = stack
        .client::<AgentsService>(&clock)
        .with_key(&stack.api_key(account).await)
        .post(
            "/agents/",
            json!({"type": "config", "name": "a", "framework": "chainlib", "provider": "openai", "model_name": "m"}),
        )
        .created()
        .await;
    let scheduler = stack.service::<Scheduler>(&clock);
    stack.calls.reset();
    assert_eq!(scheduler.tick(clock.now()).await.unwrap().fired, 0);
    // One Query of the due index, then the sweep: one Query per shard of the open runs'
    // `open-by-deadline` index (nothing lost).
    let sweep = vec!["Query"; agent_runtime::runs::OPEN_SHARDS as usize];
    assert_eq!(take(&stack), ops(&[&["Query"][..], &sweep[..]].concat()), "nothing due");

    let spec = platform_data::schedules::parse_schedule(
        json!({"cron_expression": "*/5 * * * *", "message": "m"}).to_string().as_bytes(),
        None,
    )
    .unwrap();
    let mut schedule =
        platform_data::schedules::ScheduleRecord::new(account.into(), agent.parse().unwrap(), spec, clock.now());
    schedule.set_next(Some(clock.now() - chrono::Duration::minutes(1)));
    stack.schedules().put(&schedule).await.unwrap();
    stack.calls.reset();
    assert_eq!(scheduler.tick(clock.now()).await.unwrap().fired, 1);
    // The due index (Query), the schedules again and their agents (a BatchGetItem each), then per
    // due schedule: its run's place among the account's queued runs (UpdateItem), the claim
    // (UpdateItem), the endpoints (Query) for `run.started`, written with the run and its count
    // (TransactWriteItems), the move (UpdateItem) and `schedule.triggered`; then the sweep.
    // The account's budget before the run's place (GetItem).
    let tick = [
        "Query",
        "BatchGetItem",
        "BatchGetItem",
        "GetItem",
        "UpdateItem",
        "UpdateItem",
        "Query",
        "TransactWriteItems",
        "UpdateItem",
        "Query",
        "BatchWriteItem",
    ];
    assert_eq!(take(&stack), ops(&[&tick[..], &sweep[..]].concat()), "one due schedule");
}

#[tokio::test]
async fn external_webhook_routes_the_meeting_outbox_and_its_fan_out_make_the_documented_calls() {
    let stack = calls_stack().await;
    let clock = TestClock::new();
    stack.import(&demo_fixture()).await;
    let (client_id, secret) = stack.create_app_with_scopes(&[1, 2], &["webhooks:manage"]).await;
    let auth = stack.client::<AuthService>(&clock);
    let token = integration_tests::obtain_scoped_token(&auth, &client_id, &secret, "webhooks:manage").await;
    let service = stack.client::<meeting_api::ExternalWebhooksService>(&clock).with_token(&token);
    let (server, _) = receiver().await;
    // The bearer's token and application (one BatchGetItem) and the client's bucket, then `own`.
    let bearer = |own: &[&str]| {
        let mut all = vec!["BatchGetItem", "UpdateItem"];
        all.extend(own);
        ops(&all)
    };
    let base = "/api/v1/external/webhooks";
    stack.calls.reset();
    let created = service.post(&format!("{base}/endpoints/"), json!({"url": server.url("/")})).expect(201).await;
    // The application's first counted write initializes its counter from a tally, as an account's.
    let first_write = ["TransactWriteItems", "Query", "PutItem", "TransactWriteItems"];
    assert_eq!(take(&stack), bearer(&first_write), "POST endpoints/");
    let path = format!("{base}/endpoints/{}/", created["id"].as_str().unwrap());
    let tested = service.post(&format!("{path}test/"), json!({})).expect(202).await;
    assert_eq!(take(&stack), bearer(&["GetItem", "BatchWriteItem"]), "POST …/test/");
    let cases: Vec<(Method, String, Option<Value>, Vec<&str>)> = vec![
        (Method::GET, format!("{base}/endpoints/"), None, vec!["Query"]),
        (Method::GET, path.clone(), None, vec!["GetItem"]),
        (Method::PATCH, path.clone(), Some(json!({"description": "d"})), vec!["GetItem", "PutItem"]),
        (Method::PUT, path.clone(), Some(json!({"url": server.url("/hook")})), vec!["GetItem", "PutItem"]),
        (Method::POST, format!("{path}rotate/"), Some(json!({})), vec!["GetItem"]),
        (Method::GET, format!("{path}deliveries/"), None, vec!["GetItem", "Query"]),
    ];
    for (method, path, body, own) in cases {
        let reply = service.request(method.clone(), &path).json(body).send().await;
        assert!(reply.status.is_success(), "{method} {path}: {}", reply.text);
        assert_eq!(take(&stack), bearer(&own), "{method} {path}");
    }
    let delivery = tested["delivery_id"].as_str().unwrap();
    service.post(&format!("{base}/deliveries/{delivery}/replay/"), json!({})).expect(202).await;
    assert_eq!(take(&stack), bearer(&["GetItem", "GetItem"]), "POST deliveries/{{id}}/replay/");

    // A meeting's write: its outbox is two more items in the transaction it already made, no call.
    let settings = stack.webhook_settings();
    let queue = Arc::clone(&settings.publisher.queue);
    let drain = || drain_queue(&queue);
    drain().await;
    let updated = meeting(1002, 1, 12, json!({"summary": "s", "title": "Changed"}));
    let plan = meeting_data::import::prepare(
        &stack.directory(),
        &serde_json::to_vec(&json!({"meetings": [updated]})).unwrap(),
        None,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let (written, transcript) = &plan.meetings[0];
    stack.calls.reset();
    stack.meetings().put(written, transcript).await.unwrap();
    assert_eq!(take(&stack), ops(&["Query", "BatchWriteItem", "TransactWriteItems"]), "an update of a meeting");

    // The fan-out: the stand-in with its event (BatchGetItem), every application's endpoints
    // (Query), their applications (BatchGetItem), an event with its deliveries per type
    // (BatchWriteItem: meeting.updated), and the stand-in settled (PutItem).
    let worker = webhooks::delivery::Deliverer::new(
        settings.publisher,
        settings.secrets,
        settings.policy,
        clock.clock(),
        Arc::new(|| 0.0),
    )
    .with_attempt_timeout(Duration::from_secs(1))
    .with_audience(stack.delivery_audience());
    let [stand_in] = <[ReceivedMessage; 1]>::try_from(drain().await).unwrap();
    stack.calls.reset();
    worker.handle(&stand_in).await.unwrap();
    assert_eq!(take(&stack), ops(&["BatchGetItem", "Query", "BatchGetItem", "BatchWriteItem", "PutItem"]), "fan-out");
    // A delivery to an application: its context, the application again (access at send), the attempt.
    let [delivery] = <[ReceivedMessage; 1]>::try_from(drain().await).unwrap();
    worker.handle(&delivery).await.unwrap();
    assert_eq!(take(&stack), ops(&["BatchGetItem", "BatchGetItem", "PutItem"]), "a delivery to an application");

    assert_eq!(service.delete(&path).send().await.status.as_u16(), 204);
    assert_eq!(take(&stack), bearer(&["TransactWriteItems"]), "DELETE endpoints/{{id}}/");
}
