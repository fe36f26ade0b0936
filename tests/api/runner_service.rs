//! The runner service (`functions/runner`) through its handler: both execute routes (the queued
//! one with the worker running in-process, as `make dev` does), monitoring and cancel, agent
//! list and health, tool validation, health checks, and tenant isolation on every route.

use futures_util::StreamExt;
use http::Method;
use integration_tests::a2a_server::{A2aServer, RemoteOutcome};
use integration_tests::mcp_server::start_mcp_server;
use integration_tests::model_server::{ModelServer, gated_hello_world, text_reply};
use integration_tests::{TestClock, TestStack, call_streaming_api, create_record, request, send_streaming};
use platform_api::RunnerService;
use platform_data::ids::RunId;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

/// An account's key, a model served by `model` and a config agent on it: (key, agent id).
async fn agent(stack: &TestStack, clock: &TestClock, model: &ModelServer) -> (String, String) {
    let key = stack.api_key(Uuid::new_v4()).await;
    let agent = config_agent(stack, clock, &key, model, "Runner", json!([])).await;
    (key, agent)
}

async fn config_agent(
    stack: &TestStack,
    clock: &TestClock,
    key: &str,
    model: &ModelServer,
    name: &str,
    mcps: Value,
) -> String {
    let lm = create_record(
        &stack.language_models_service(clock),
        "/language-models",
        key,
        json!({"name": format!("lm for {name}"), "provider": "openai_compatible", "model_name": "m",
            "base_url": model.base_url()}),
    )
    .await;
    create_record(
        &stack.agents_service(clock),
        "/agents/",
        key,
        json!({"type": "config", "name": name, "framework": "chainlib", "language_model_id": lm, "mcps": mcps}),
    )
    .await
}

fn execute(path: &str, key: &str, body: Value) -> http_api::Request {
    request(Method::POST, path)
        .header("x-api-key", key)
        .header("content-type", "application/json")
        .body(http_api::Body::Text(body.to_string()))
        .unwrap()
}

/// The stream's frames through an independent SSE parser: (id, event, data).
async fn read_stream(body: http_api::StreamBody) -> Vec<(u64, String, Value)> {
    let mut parsed = sse_stream::SseStream::new(body);
    let mut frames = Vec::new();
    while let Some(frame) = parsed.next().await {
        let frame = frame.unwrap();
        if let (Some(id), Some(event), Some(data)) = (frame.id, frame.event, frame.data) {
            frames.push((id.parse().unwrap(), event, serde_json::from_str(&data).unwrap()));
        }
    }
    frames
}

fn names(frames: &[(u64, String, Value)]) -> Vec<&str> {
    frames.iter().map(|(_, name, _)| name.as_str()).collect()
}

async fn get(runner: &RunnerService, path: &str, key: &str) -> integration_tests::Reply {
    call_streaming_api(runner, Method::GET, path, key, None).await
}

#[tokio::test]
async fn an_execution_streams_and_is_a_task_monitored_and_rejoined_by_its_id() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Hello from the runner.")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runner = stack.runner_service(&clock);

    let body = json!({"agent_id": agent, "message": "Say hello", "session_id": "s-1"});
    let response = send_streaming(&runner, execute("/execute/a2a/stream/agent", &key, body)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert!(response.headers().contains_key("x-ratelimit-remaining"));
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    let frames = read_stream(response.into_body()).await;
    assert_eq!(names(&frames).first(), Some(&"metadata"));
    assert_eq!(names(&frames).last(), Some(&"done"));
    assert_eq!(frames.last().unwrap().2["output"], "Hello from the runner.");

    let task = get(&runner, &format!("/monitoring/tasks/{task_id}"), &key).await.expect(200)["data"].clone();
    assert_eq!((task["id"].as_str(), task["agent_id"].as_str()), (Some(task_id.as_str()), Some(agent.as_str())));
    assert_eq!((task["status"].as_str(), task["run_type"].as_str()), (Some("success"), Some("api")));
    assert_eq!(task["last_event_id"], json!(frames.len()));
    assert_eq!(task["cancel_requested_at"], Value::Null);

    // One id space: the backend shows the task as a run of its agent.
    let run = integration_tests::call_api(
        &stack.agents_service(&clock),
        Method::GET,
        &format!("/agents/{agent}/runs/{task_id}"),
        &key,
        None,
    )
    .await
    .expect(200);
    assert_eq!(run["data"]["output"], "Hello from the runner.");

    let executions = get(&runner, &format!("/monitoring/agent/{agent}/executions?status=success"), &key).await;
    let executions = executions.expect(200);
    assert_eq!(executions["data"][0]["id"], task_id.as_str());
    assert_eq!(executions["pagination"]["total"], 1);
    let recent = get(&runner, "/monitoring/executions/recent", &key).await.expect(200);
    assert_eq!(recent["data"].as_array().unwrap().len(), 1);
    assert_eq!(recent["data"][0]["id"], task_id.as_str());
    assert!(
        get(&runner, "/monitoring/executions/recent?status=started", &key).await.expect(200)["data"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Rejoined after its second event: the rest, with no gap and no duplicate.
    let rejoin = request(Method::GET, &format!("/monitoring/tasks/{task_id}/stream"))
        .header("x-api-key", &key)
        .header("last-event-id", "2")
        .body(http_api::Body::Empty)
        .unwrap();
    let rest = read_stream(send_streaming(&runner, rejoin).await.into_body()).await;
    assert_eq!(rest, frames[2..].to_vec());
}

#[tokio::test]
async fn execute_refuses_what_it_cannot_run_with_the_spec_s_statuses() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runner = stack.runner_service(&clock);
    let refused = |path: &'static str, body: Value| {
        let runner = &runner;
        let key = key.clone();
        async move {
            let response = send_streaming(runner, execute(path, &key, body)).await;
            let status = response.status().as_u16();
            let text = read_whole(response.into_body()).await;
            (status, serde_json::from_str::<Value>(&text).unwrap_or(Value::Null))
        }
    };
    let (status, body) = refused("/execute/a2a/stream/agent", json!({"message": "hi"})).await;
    assert_eq!((status, body["error"]["details"]["agent_id"].as_str()), (422, Some("is required")));
    let (status, body) = refused("/execute/a2a/stream/agent", json!({"agent_id": "nope", "message": "hi"})).await;
    assert_eq!((status, body["error"]["details"]["agent_id"].as_str()), (422, Some("must be a UUID")));
    let (status, body) = refused("/execute/a2a/stream/agent", json!({"agent_id": agent, "message": " "})).await;
    assert_eq!((status, body["error"]["details"]["message"].as_str()), (422, Some("is required")));
    let (status, body) = refused("/execute/a2a/stream/agent", json!({"agent_id": agent, "message": 3})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("BAD_REQUEST")));
    let (status, body) =
        refused("/execute/a2a/stream/agent", json!({"agent_id": agent, "message": "hi", "timeout": 3600})).await;
    assert_eq!(
        (status, body["error"]["details"]["timeout"].as_str()),
        (422, Some("must be a number of seconds from 0 to 840"))
    );
    let unknown = Uuid::new_v4().to_string();
    let (status, body) =
        refused("/execute/a2a/stream/celery/agent", json!({"agent_id": unknown, "message": "hi"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("RESOURCE_NOT_FOUND")));
    let (status, body) =
        refused("/execute/a2a/stream/celery/agent", json!({"agent_id": agent, "message": "hi", "timeout": 30000}))
            .await;
    assert_eq!(
        (status, body["error"]["details"]["timeout"].as_str()),
        (422, Some("must be a number of seconds from 0 to 21600"))
    );
    // Nothing was run or recorded.
    assert!(model.requests.lock().unwrap().is_empty());
    let recent = get(&runner, "/monitoring/executions/recent", &key).await.expect(200);
    assert_eq!(recent["data"], json!([]));

    let wrong_method = get(&runner, "/execute/a2a/stream/agent", &key).await;
    assert_eq!((wrong_method.status.as_u16(), wrong_method.header("allow")), (405, Some("POST")));
    assert_eq!(get(&runner, "/execute/nothing", &key).await.status.as_u16(), 404);
    let anonymous =
        send_streaming(&runner, request(Method::GET, "/health-check").body(http_api::Body::Empty).unwrap()).await;
    assert_eq!(anonymous.status(), 401);
}

async fn read_whole(body: http_api::StreamBody) -> String {
    use http_body_util::BodyExt;
    String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

#[tokio::test]
async fn a_queued_execution_streams_the_events_the_worker_records_in_another_task() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Queued hello.")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runner = stack.runner_service(&clock);
    // The worker, as `make dev` runs it: its own runner, reading the queue.
    let worker_runner = agent_runtime::lifecycle::RunLifecycle::new(stack.run_sources(), stack.runs(), clock.clock());
    let worker = agent_runtime::queue::RunWorker::new(worker_runner, stack.run_queue());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let working = tokio::spawn(dev_server::run_runner_worker(worker, stack.run_queue(), async move {
        let _ = stopped.await;
    }));

    let body = json!({"agent_id": agent, "message": "Queue me", "timeout": 3600});
    let response = send_streaming(&runner, execute("/execute/a2a/stream/celery/agent", &key, body)).await;
    assert_eq!(response.status(), 200);
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    let frames = read_stream(response.into_body()).await;
    assert_eq!(names(&frames).first(), Some(&"metadata"));
    assert_eq!(frames.last().unwrap().1, "done");
    assert_eq!(frames.last().unwrap().2["output"], "Queued hello.");
    assert_eq!(frames.iter().map(|(id, _, _)| *id).collect::<Vec<_>>(), (1..=frames.len() as u64).collect::<Vec<_>>());
    let _ = stop.send(());
    working.await.unwrap();

    let task = get(&runner, &format!("/monitoring/tasks/{task_id}"), &key).await.expect(200)["data"].clone();
    assert_eq!((task["status"].as_str(), task["run_type"].as_str()), (Some("success"), Some("queue")));
}

#[tokio::test]
async fn running_work_is_listed_cancelled_and_then_purged_through_monitoring() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    // The model says "Hello " and then holds its answer: the run stays started until cancelled.
    let gate = Arc::new(tokio::sync::Notify::new());
    let model = ModelServer::start(vec![gated_hello_world(&gate)]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runner = stack.runner_service(&clock);
    let response = send_streaming(
        &runner,
        execute("/execute/a2a/stream/agent", &key, json!({"agent_id": agent, "message": "hi"})),
    )
    .await;
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    let reading = tokio::spawn(read_stream(response.into_body()));

    let running = get(&runner, "/monitoring/executions/recent?status=started", &key).await.expect(200);
    assert_eq!(running["data"].as_array().unwrap().len(), 1);
    assert_eq!(running["data"][0]["id"], task_id.as_str());
    let purge =
        call_streaming_api(&runner, Method::DELETE, &format!("/monitoring/tasks/{task_id}?purge=true"), &key, None)
            .await;
    assert_eq!(purge.expect(409)["error"]["code"], "CONFLICT");

    let cancelled =
        call_streaming_api(&runner, Method::DELETE, &format!("/monitoring/tasks/{task_id}"), &key, None).await;
    let cancelled = cancelled.expect(200)["data"].clone();
    assert_eq!(
        (cancelled["status"].as_str(), cancelled["failure_reason"].as_str()),
        (Some("failed"), Some("cancelled"))
    );
    assert!(cancelled["cancel_requested_at"].is_string(), "{cancelled}");
    let frames = tokio::time::timeout(std::time::Duration::from_secs(30), reading).await.unwrap().unwrap();
    let (_, last, data) = frames.last().unwrap();
    assert_eq!((last.as_str(), data["failure_reason"].as_str()), ("error", Some("cancelled")));

    // run.failed was published, saying why.
    let events =
        integration_tests::call_api(&stack.webhooks_service(&clock), Method::GET, "/webhooks/events", &key, None)
            .await
            .expect(200);
    let failed: Vec<&Value> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["type"] == "run.failed" && event["data"]["id"] == task_id.as_str())
        .collect();
    assert_eq!(failed.len(), 1, "{events}");
    assert_eq!(failed[0]["data"]["failure_reason"], "cancelled");

    // Cancel is idempotent: a finished task is answered as it ended.
    let again = call_streaming_api(&runner, Method::DELETE, &format!("/monitoring/tasks/{task_id}"), &key, None).await;
    assert_eq!(again.expect(200)["data"]["failure_reason"], "cancelled");
    assert!(
        get(&runner, "/monitoring/executions/recent?status=started", &key).await.expect(200)["data"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let failed = get(&runner, "/monitoring/executions/recent?status=failed&limit=5", &key).await.expect(200);
    assert_eq!(failed["data"][0]["id"], task_id.as_str());

    let purged =
        call_streaming_api(&runner, Method::DELETE, &format!("/monitoring/tasks/{task_id}?purge=true"), &key, None)
            .await;
    assert_eq!(purged.expect(200)["data"], Value::Null);
    assert_eq!(
        get(&runner, &format!("/monitoring/tasks/{task_id}"), &key).await.expect(404)["error"]["code"],
        "RESOURCE_NOT_FOUND"
    );
    assert!(stack.runs().events_after(task_id.parse().unwrap(), 0, 100).await.unwrap().is_empty());
    assert!(stack.runs().steps().steps(task_id.parse().unwrap()).await.unwrap().is_empty());
    let bad =
        call_streaming_api(&runner, Method::DELETE, &format!("/monitoring/tasks/{task_id}?purge=maybe"), &key, None)
            .await;
    assert_eq!(bad.expect(422)["error"]["details"]["purge"], "must be true or false");
}

#[tokio::test]
async fn a_queued_task_waiting_for_a_worker_is_cancelled_at_once_and_never_executed() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("never asked")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runner = stack.runner_service(&clock);
    let response = send_streaming(
        &runner,
        execute("/execute/a2a/stream/celery/agent", &key, json!({"agent_id": agent, "message": "later"})),
    )
    .await;
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();

    // No worker runs: the cancel ends the task itself, under the run's lease.
    let cancelled =
        call_streaming_api(&runner, Method::DELETE, &format!("/monitoring/tasks/{task_id}"), &key, None).await;
    assert_eq!(cancelled.expect(200)["data"]["failure_reason"], "cancelled");
    let frames = read_stream(response.into_body()).await;
    assert_eq!(names(&frames), ["metadata", "error"]);
    assert_eq!(frames[1].2["failure_reason"], "cancelled");

    // The delivery that comes later finds the task ended and runs nothing.
    let worker_runner = agent_runtime::lifecycle::RunLifecycle::new(stack.run_sources(), stack.runs(), clock.clock());
    let worker = agent_runtime::queue::RunWorker::new(worker_runner, stack.run_queue());
    let messages = stack.run_queue().sqs().receive(std::time::Duration::from_secs(0)).await.unwrap();
    assert_eq!(messages.len(), 1);
    let invocation = integration_tests::worker_invocation("late");
    assert!(worker.handle_batch(&messages, &invocation).await.is_empty());
    assert!(model.requests.lock().unwrap().is_empty());
}

#[tokio::test]
async fn agents_are_listed_and_their_dependencies_checked_concurrently() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let mcp_server = start_mcp_server(None).await;
    let mcp = create_record(
        &stack.mcps_service(&clock),
        "/mcps",
        &key,
        json!({"name": "weather", "url": mcp_server.url("/mcp")}),
    )
    .await;
    let healthy = config_agent(&stack, &clock, &key, &model, "Healthy", json!([mcp])).await;
    let agents = stack.agents_service(&clock);
    let no_model = create_record(
        &agents,
        "/agents/",
        &key,
        json!({"type": "config", "name": "No model", "framework": "chainlib",
            "provider": "openai_compatible", "model_name": "missing"}),
    )
    .await;
    let remote = A2aServer::start(true, RemoteOutcome::Completed).await;
    let a2a = create_record(
        &agents,
        "/agents/",
        &key,
        json!({"type": "a2a", "name": "Remote", "a2a_profile": {"url": remote.server.url("")}}),
    )
    .await;
    let gone = create_record(
        &agents,
        "/agents/",
        &key,
        json!({"type": "a2a", "name": "Gone", "a2a_profile": {"url": integration_tests::local_server::closed_port_url("/")}}),
    )
    .await;
    clock.advance(1); // the newest agent, listed first
    let flow = create_record(
        &agents,
        "/agents/",
        &key,
        json!({"type": "flowtool", "name": "Flow", "agent_config": {"flowtool": {"flow_id": "f1"}}}),
    )
    .await;
    let runner = stack.runner_service(&clock);

    let listed = get(&runner, "/execute/a2a/agents/list?limit=2", &key).await.expect(200);
    assert_eq!(listed["pagination"], json!({"page": 1, "limit": 2, "total": 5, "pages": 3}));
    assert_eq!(listed["data"][0]["id"], flow.as_str());
    assert_eq!(
        (listed["data"][0]["agent_type"].as_str(), listed["data"][0]["name"].as_str()),
        (Some("flowtool"), Some("Flow"))
    );

    let health = get(&runner, "/execute/a2a/agents/health", &key).await.expect(200);
    assert_eq!(health["message"], "3 agent(s) unhealthy");
    let by_id = |id: &str| -> Value {
        health["data"].as_array().unwrap().iter().find(|agent| agent["agent_id"] == id).cloned().unwrap()
    };
    let checks = |id: &str| -> Vec<(String, String)> {
        by_id(id)["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|check| (check["check"].as_str().unwrap().to_owned(), check["status"].as_str().unwrap().to_owned()))
            .collect()
    };
    assert_eq!(by_id(&healthy)["healthy"], true);
    assert_eq!(checks(&healthy), [("language_model".into(), "ok".into()), ("mcp".into(), "ok".into())]);
    assert_eq!(checks(&no_model), [("language_model".to_owned(), "failed".to_owned())]);
    assert_eq!(by_id(&no_model)["checks"][0]["message"], "the agent's language model does not exist");
    assert_eq!((by_id(&a2a)["healthy"].as_bool(), checks(&a2a)), (Some(true), vec![("a2a_card".into(), "ok".into())]));
    assert_eq!(checks(&gone), [("a2a_card".to_owned(), "failed".to_owned())]);
    assert_eq!(checks(&flow), [("flow_server".to_owned(), "failed".to_owned())]);
    assert!(by_id(&flow)["checks"][0]["message"].as_str().unwrap().contains("no flow server is configured"));

    let one = get(&runner, &format!("/execute/a2a/agents/health?agent_id={healthy}"), &key).await.expect(200);
    assert_eq!((one["data"].as_array().unwrap().len(), one["message"].as_str()), (1, Some("All agents are healthy")));
    let refused = get(&runner, "/execute/a2a/agents/health?agent_id=x&limit=50", &key).await.expect(422);
    assert_eq!(refused["error"]["details"]["agent_id"], "must be a UUID");
    assert_eq!(refused["error"]["details"]["limit"], "must be an integer from 1 to 20");
}

#[tokio::test]
async fn every_route_hides_another_account_s_agents_and_tasks() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Mine.")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let other = stack.api_key(Uuid::new_v4()).await;
    let runner = stack.runner_service(&clock);
    let response = send_streaming(
        &runner,
        execute("/execute/a2a/stream/agent", &key, json!({"agent_id": agent, "message": "hi"})),
    )
    .await;
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    read_stream(response.into_body()).await;

    let not_found = |reply: integration_tests::Reply| {
        assert_eq!(reply.expect(404)["error"]["code"], "RESOURCE_NOT_FOUND");
    };
    not_found(get(&runner, &format!("/monitoring/tasks/{task_id}"), &other).await);
    not_found(get(&runner, &format!("/monitoring/tasks/{task_id}/stream"), &other).await);
    not_found(call_streaming_api(&runner, Method::DELETE, &format!("/monitoring/tasks/{task_id}"), &other, None).await);
    not_found(
        call_streaming_api(&runner, Method::DELETE, &format!("/monitoring/tasks/{task_id}?purge=true"), &other, None)
            .await,
    );
    not_found(get(&runner, &format!("/monitoring/agent/{agent}/executions"), &other).await);
    not_found(get(&runner, &format!("/execute/a2a/agents/health?agent_id={agent}"), &other).await);
    for path in ["/execute/a2a/stream/agent", "/execute/a2a/stream/celery/agent"] {
        let refused = send_streaming(&runner, execute(path, &other, json!({"agent_id": agent, "message": "hi"}))).await;
        assert_eq!(refused.status(), 404, "{path}");
    }
    assert_eq!(get(&runner, "/monitoring/executions/recent", &other).await.expect(200)["data"], json!([]));
    assert_eq!(get(&runner, "/execute/a2a/agents/list", &other).await.expect(200)["data"], json!([]));
    assert_eq!(get(&runner, "/execute/a2a/agents/health", &other).await.expect(200)["data"], json!([]));
    // The owner still sees its task, untouched.
    let task = get(&runner, &format!("/monitoring/tasks/{task_id}"), &key).await.expect(200);
    assert_eq!(task["data"]["status"], "success");
}

#[tokio::test]
async fn tool_scripts_are_validated_with_their_problem_located() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let runner = stack.runner_service(&clock);
    let valid = call_streaming_api(
        &runner,
        Method::POST,
        "/tools/validation",
        &key,
        Some(json!({"script": "def run(city):\n    return city\n"})),
    )
    .await;
    assert_eq!(valid.expect(200)["data"], json!({"valid": true, "entry_point": "run", "errors": []}));
    let broken = call_streaming_api(
        &runner,
        Method::POST,
        "/tools/validation",
        &key,
        Some(json!({"script": "def run(city):\n    return city +\n"})),
    )
    .await
    .expect(200);
    assert_eq!(
        (broken["data"]["valid"].as_bool(), broken["data"]["errors"][0]["line"].as_u64()),
        (Some(false), Some(2))
    );
    assert!(broken["data"]["errors"][0]["column"].as_u64().is_some());
    let missing = call_streaming_api(&runner, Method::POST, "/tools/validation", &key, Some(json!({}))).await;
    assert_eq!(missing.expect(422)["error"]["details"]["script"], "is required");
}

#[tokio::test]
async fn health_checks_report_tables_queues_and_secrets_and_name_what_is_unreachable() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let runner = stack.runner_service(&clock);
    let basic = get(&runner, "/health-check", &key).await.expect(200);
    assert_eq!(
        (basic["data"]["status"].as_str(), basic["data"]["service"].as_str()),
        (Some("healthy"), Some("runner"))
    );

    stack.run_queue().enqueue(RunId::now_v7()).await.unwrap();
    let detailed = get(&runner, "/health-check/detailed", &key).await.expect(200)["data"].clone();
    assert_eq!(detailed["status"], "healthy");
    let queue = detailed["queues"].as_array().unwrap().iter().find(|q| q["queue"] == "RUNNER_QUEUE_URL").cloned();
    let queue = queue.expect("the runner queue is probed");
    assert_eq!((queue["status"].as_str(), queue["waiting"].as_u64()), (Some("ok"), Some(1)));
    assert!(detailed["queues"].as_array().unwrap().iter().any(|q| q["queue"] == "RUNNER_DEAD_LETTER_QUEUE_URL"));
    assert!(
        detailed["tables"].as_array().unwrap().iter().any(|t| t["table"] == "RUN_STEPS_TABLE" && t["status"] == "ok")
    );
    assert!(
        detailed["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["secret"] == "PEPPER_SECRET_ID" && s["status"] == "ok")
    );

    // A queue and a table that do not exist: 503 naming both, the rest still reported.
    let lookup = |name: &str| match name {
        "RUNNER_QUEUE_URL" => Some("no-such-queue".to_owned()),
        "RUNS_TABLE" => Some("no-such-table".to_owned()),
        other => stack.lookup(other),
    };
    let broken = RunnerService::new(
        stack.gate(&clock, storage::rate_limit::RateLimit::DEFAULT),
        platform_data::agents::AgentStore::new(stack.dynamodb.clone(), stack.setting("AGENTS_TABLE")),
        agent_runtime::lifecycle::RunLifecycle::new(stack.run_sources(), stack.runs(), clock.clock()),
        stack.run_queue(),
        platform_api::runner::Probes::from_settings(&stack.aws(), &lookup),
    );
    let unhealthy = get(&broken, "/health-check/detailed", &key).await.expect(503);
    let message = unhealthy["error"]["message"].as_str().unwrap();
    assert!(message.contains("RUNNER_QUEUE_URL") && message.contains("RUNS_TABLE"), "{message}");
    assert!(!message.contains("PEPPER_SECRET_ID"), "{message}");
}

#[tokio::test]
async fn a_queued_task_executing_on_the_worker_is_stopped_by_a_cancel_from_the_runner() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    // The model says "Hello " and then holds its answer until the test ends.
    let gate = Arc::new(tokio::sync::Notify::new());
    let model = ModelServer::start(vec![gated_hello_world(&gate)]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runner = stack.runner_service(&clock);
    // The worker is another process in all but address space: its own runner and clients.
    let worker_runner = agent_runtime::lifecycle::RunLifecycle::new(stack.run_sources(), stack.runs(), clock.clock());
    let worker = agent_runtime::queue::RunWorker::new(worker_runner, stack.run_queue());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let working = tokio::spawn(dev_server::run_runner_worker(worker, stack.run_queue(), async move {
        let _ = stopped.await;
    }));

    let body = json!({"agent_id": agent, "message": "Take your time"});
    let response = send_streaming(&runner, execute("/execute/a2a/stream/celery/agent", &key, body)).await;
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    let mut stream = sse_stream::SseStream::new(response.into_body());
    // Wait until the worker is mid-answer: its first delta is recorded and followed.
    loop {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(60), stream.next()).await.unwrap();
        if frame.unwrap().unwrap().event.as_deref() == Some("message") {
            break;
        }
    }
    let cancel = call_streaming_api(&runner, Method::DELETE, &format!("/monitoring/tasks/{task_id}"), &key, None).await;
    // 200 once the worker stopped it within the wait, 202 if it needs longer; either way it ends.
    assert!(matches!(cancel.status.as_u16(), 200 | 202), "{}", cancel.text);
    let mut rest = Vec::new();
    while let Some(frame) = tokio::time::timeout(std::time::Duration::from_secs(60), stream.next()).await.unwrap() {
        let frame = frame.unwrap();
        if let (Some(event), Some(data)) = (frame.event, frame.data) {
            rest.push((event, serde_json::from_str::<Value>(&data).unwrap()));
        }
    }
    let (last, data) = rest.last().unwrap();
    assert_eq!((last.as_str(), data["failure_reason"].as_str()), ("error", Some("cancelled")));
    let task = get(&runner, &format!("/monitoring/tasks/{task_id}"), &key).await.expect(200)["data"].clone();
    assert_eq!((task["status"].as_str(), task["failure_reason"].as_str()), (Some("failed"), Some("cancelled")));
    assert_eq!(model.requests.lock().unwrap().len(), 1, "the model was asked once and never again");
    let _ = stop.send(());
    working.await.unwrap();
}
