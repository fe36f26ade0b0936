//! The runner service (`functions/runner`) through its handler: both execute routes (the queued
//! one with the worker running in-process, as `make dev` does), monitoring and cancel, agent
//! list and health, tool validation, health checks, and tenant isolation on every route.

use agent_runtime::queue::RunWorker;
use futures_util::StreamExt;
use integration_tests::a2a_server::{A2aServer, RemoteOutcome};
use integration_tests::mcp_server::start_mcp_server;
use integration_tests::model_server::{ModelServer, gated_hello_world, text_reply};
use integration_tests::{TestClock, TestStack};
use platform_api::{AgentsService, LanguageModelsService, McpsService, RunnerService, WebhooksService};
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
    let lm = stack
        .client::<LanguageModelsService>(clock)
        .with_key(key)
        .post(
            "/language-models",
            json!({"name": format!("lm for {name}"), "provider": "openai_compatible", "model_name": "m",
            "base_url": model.base_url()}),
        )
        .created()
        .await;
    let agents = stack.client::<AgentsService>(clock).with_key(key);
    agents
        .post(
            "/agents/",
            json!({"type": "config", "name": name, "framework": "chainlib", "language_model_id": lm, "mcps": mcps}),
        )
        .created()
        .await
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

#[tokio::test]
async fn an_execution_streams_and_is_a_task_monitored_and_rejoined_by_its_id() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Hello from the runner.")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);

    let body = json!({"agent_id": agent, "message": "Say hello", "session_id": "s-1"});
    let response = runner.post("/execute/a2a/stream/agent", body).stream().await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert!(response.headers().contains_key("x-ratelimit-remaining"));
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    let frames = read_stream(response.into_body()).await;
    assert_eq!(names(&frames).first(), Some(&"metadata"));
    assert_eq!(names(&frames).last(), Some(&"done"));
    assert_eq!(frames.last().unwrap().2["output"], "Hello from the runner.");

    let task = runner.get(&format!("/monitoring/tasks/{task_id}")).expect(200).await["data"].clone();
    assert_eq!((task["id"].as_str(), task["agent_id"].as_str()), (Some(task_id.as_str()), Some(agent.as_str())));
    assert_eq!((task["status"].as_str(), task["run_type"].as_str()), (Some("success"), Some("api")));
    assert_eq!(task["last_event_id"], json!(frames.len()));
    assert_eq!(task["cancel_requested_at"], Value::Null);

    // One id space: the backend shows the task as a run of its agent.
    let run = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .get(&format!("/agents/{agent}/runs/{task_id}"))
        .expect(200)
        .await;
    assert_eq!(run["data"]["output"], "Hello from the runner.");

    let executions = runner.get(&format!("/monitoring/agent/{agent}/executions?status=success")).expect(200).await;
    assert_eq!(executions["data"][0]["id"], task_id.as_str());
    assert_eq!(executions["pagination"]["total"], 1);
    let recent = runner.get("/monitoring/executions/recent").expect(200).await;
    assert_eq!(recent["data"].as_array().unwrap().len(), 1);
    assert_eq!(recent["data"][0]["id"], task_id.as_str());
    assert!(
        runner.get("/monitoring/executions/recent?status=started").expect(200).await["data"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Rejoined after its second event: the rest, with no gap and no duplicate.
    let rejoin = runner.get(&format!("/monitoring/tasks/{task_id}/stream")).header("last-event-id", "2");
    let rest = read_stream(rejoin.stream().await.into_body()).await;
    assert_eq!(rest, frames[2..].to_vec());
}

#[tokio::test]
async fn execute_refuses_what_it_cannot_run_with_the_spec_s_statuses() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let (run, queue) = ("/execute/a2a/stream/agent", "/execute/a2a/stream/celery/agent");
    let invalid = |path: &str, body: Value| runner.post(path, body).error(422, "VALIDATION_ERROR");
    let refused = invalid(run, json!({"message": "hi"})).await;
    assert_eq!(refused["details"]["agent_id"], "is required");
    let refused = invalid(run, json!({"agent_id": "nope", "message": "hi"})).await;
    assert_eq!(refused["details"]["agent_id"], "must be a UUID");
    let refused = invalid(run, json!({"agent_id": agent, "message": " "})).await;
    assert_eq!(refused["details"]["message"], "is required");
    runner.post(run, json!({"agent_id": agent, "message": 3})).error(400, "BAD_REQUEST").await;
    let refused = invalid(run, json!({"agent_id": agent, "message": "hi", "timeout": 3600})).await;
    assert_eq!(refused["details"]["timeout"], "must be a number of seconds from 0 to 840");
    let unknown = Uuid::new_v4().to_string();
    runner.post(queue, json!({"agent_id": unknown, "message": "hi"})).error(404, "RESOURCE_NOT_FOUND").await;
    let refused = invalid(queue, json!({"agent_id": agent, "message": "hi", "timeout": 30000})).await;
    assert_eq!(refused["details"]["timeout"], "must be a number of seconds from 0 to 21600");
    // Nothing was run or recorded.
    assert!(model.requests.lock().unwrap().is_empty());
    let recent = runner.get("/monitoring/executions/recent").expect(200).await;
    assert_eq!(recent["data"], json!([]));

    let wrong_method = runner.get("/execute/a2a/stream/agent").send().await;
    assert_eq!((wrong_method.status.as_u16(), wrong_method.header("allow")), (405, Some("POST")));
    runner.get("/execute/nothing").expect(404).await;
    let anonymous = stack.client::<RunnerService>(&clock);
    anonymous.get("/health-check").expect(401).await;
}

#[tokio::test]
async fn a_queued_execution_streams_the_events_the_worker_records_in_another_task() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Queued hello.")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    // The worker, as `make dev` runs it: its own runner, reading the queue.
    let worker = stack.service::<RunWorker>(&clock);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let working = tokio::spawn(dev_server::run_runner_worker(worker, stack.run_queue(), async move {
        let _ = stopped.await;
    }));

    let body = json!({"agent_id": agent, "message": "Queue me", "timeout": 3600});
    let response = runner.post("/execute/a2a/stream/celery/agent", body).stream().await;
    assert_eq!(response.status(), 200);
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    let frames = read_stream(response.into_body()).await;
    assert_eq!(names(&frames).first(), Some(&"metadata"));
    assert_eq!(frames.last().unwrap().1, "done");
    assert_eq!(frames.last().unwrap().2["output"], "Queued hello.");
    assert_eq!(frames.iter().map(|(id, _, _)| *id).collect::<Vec<_>>(), (1..=frames.len() as u64).collect::<Vec<_>>());
    let _ = stop.send(());
    working.await.unwrap();

    let task = runner.get(&format!("/monitoring/tasks/{task_id}")).expect(200).await["data"].clone();
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
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let response = runner.post("/execute/a2a/stream/agent", json!({"agent_id": agent, "message": "hi"})).stream().await;
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    let reading = tokio::spawn(read_stream(response.into_body()));

    let running = runner.get("/monitoring/executions/recent?status=started").expect(200).await;
    assert_eq!(running["data"].as_array().unwrap().len(), 1);
    assert_eq!(running["data"][0]["id"], task_id.as_str());
    runner.delete(&format!("/monitoring/tasks/{task_id}?purge=true")).error(409, "CONFLICT").await;

    let cancelled = runner.delete(&format!("/monitoring/tasks/{task_id}")).expect(200).await["data"].clone();
    assert_eq!(
        (cancelled["status"].as_str(), cancelled["failure_reason"].as_str()),
        (Some("failed"), Some("cancelled"))
    );
    assert!(cancelled["cancel_requested_at"].is_string(), "{cancelled}");
    let frames = tokio::time::timeout(std::time::Duration::from_secs(30), reading).await.unwrap().unwrap();
    let (_, last, data) = frames.last().unwrap();
    assert_eq!((last.as_str(), data["failure_reason"].as_str()), ("error", Some("cancelled")));

    // run.failed was published, saying why.
    let events = stack.client::<WebhooksService>(&clock).with_key(&key).get("/webhooks/events").expect(200).await;
    let failed: Vec<&Value> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["type"] == "run.failed" && event["data"]["id"] == task_id.as_str())
        .collect();
    assert_eq!(failed.len(), 1, "{events}");
    assert_eq!(failed[0]["data"]["failure_reason"], "cancelled");

    // Cancel is idempotent: a finished task is answered as it ended.
    assert_eq!(
        runner.delete(&format!("/monitoring/tasks/{task_id}")).expect(200).await["data"]["failure_reason"],
        "cancelled"
    );
    assert!(
        runner.get("/monitoring/executions/recent?status=started").expect(200).await["data"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let failed = runner.get("/monitoring/executions/recent?status=failed&limit=5").expect(200).await;
    assert_eq!(failed["data"][0]["id"], task_id.as_str());

    assert_eq!(
        runner.delete(&format!("/monitoring/tasks/{task_id}?purge=true")).expect(200).await["data"],
        Value::Null
    );
    runner.get(&format!("/monitoring/tasks/{task_id}")).error(404, "RESOURCE_NOT_FOUND").await;
    assert!(stack.runs().events_after(task_id.parse().unwrap(), 0, 100).await.unwrap().is_empty());
    assert!(stack.runs().steps().steps(task_id.parse().unwrap()).await.unwrap().is_empty());
    assert_eq!(
        runner.delete(&format!("/monitoring/tasks/{task_id}?purge=maybe")).error(422, "VALIDATION_ERROR").await["details"]
            ["purge"],
        "must be true or false"
    );
}

#[tokio::test]
async fn a_queued_task_waiting_for_a_worker_is_cancelled_at_once_and_never_executed() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("never asked")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let response =
        runner.post("/execute/a2a/stream/celery/agent", json!({"agent_id": agent, "message": "later"})).stream().await;
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();

    // No worker runs: the cancel ends the task itself, under the run's lease.
    let cancelled = runner.delete(&format!("/monitoring/tasks/{task_id}")).send().await;
    assert_eq!(cancelled.expect(200)["data"]["failure_reason"], "cancelled");
    let frames = read_stream(response.into_body()).await;
    assert_eq!(names(&frames), ["metadata", "error"]);
    assert_eq!(frames[1].2["failure_reason"], "cancelled");

    // The delivery that comes later finds the task ended and runs nothing.
    let worker = stack.service::<RunWorker>(&clock);
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
    let mcp = stack
        .client::<McpsService>(&clock)
        .with_key(&key)
        .post("/mcps", json!({"name": "weather", "url": mcp_server.url("/mcp")}))
        .created()
        .await;
    let healthy = config_agent(&stack, &clock, &key, &model, "Healthy", json!([mcp])).await;
    let agents = stack.client::<AgentsService>(&clock);
    let no_model = agents
        .with_key(&key)
        .post(
            "/agents/",
            json!({"type": "config", "name": "No model", "framework": "chainlib",
            "provider": "openai_compatible", "model_name": "missing"}),
        )
        .created()
        .await;
    let remote = A2aServer::start(true, RemoteOutcome::Completed).await;
    let a2a = agents
        .with_key(&key)
        .post("/agents/", json!({"type": "a2a", "name": "Remote", "a2a_profile": {"url": remote.server.url("")}}))
        .created()
        .await;
    let gone = agents.with_key(&key).post("/agents/", json!({"type": "a2a", "name": "Gone", "a2a_profile": {"url": integration_tests::local_server::closed_port_url("/")}})).created().await;
    clock.advance(1); // the newest agent, listed first
    let flow = agents
        .with_key(&key)
        .post("/agents/", json!({"type": "flowtool", "name": "Flow", "agent_config": {"flowtool": {"flow_id": "f1"}}}))
        .created()
        .await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);

    let listed = runner.get("/execute/a2a/agents/list?limit=2").expect(200).await;
    assert_eq!(listed["pagination"], json!({"page": 1, "limit": 2, "total": 5, "pages": 3}));
    assert_eq!(listed["data"][0]["id"], flow.as_str());
    assert_eq!(
        (listed["data"][0]["agent_type"].as_str(), listed["data"][0]["name"].as_str()),
        (Some("flowtool"), Some("Flow"))
    );
    // The "" rule of the spec's agent tables (DESIGN.md "Field presence").
    assert_eq!((&listed["data"][0]["version"], &listed["data"][0]["description"]), (&json!(""), &json!("")));

    let health = runner.get("/execute/a2a/agents/health").expect(200).await;
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

    let one = runner.get(&format!("/execute/a2a/agents/health?agent_id={healthy}")).expect(200).await;
    assert_eq!((one["data"].as_array().unwrap().len(), one["message"].as_str()), (1, Some("All agents are healthy")));
    let refused = runner.get("/execute/a2a/agents/health?agent_id=x&limit=50").expect(422).await;
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
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let response = runner.post("/execute/a2a/stream/agent", json!({"agent_id": agent, "message": "hi"})).stream().await;
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    read_stream(response.into_body()).await;

    let not_found = |reply: integration_tests::Reply| reply.error(404, "RESOURCE_NOT_FOUND");
    let stranger = runner.with_key(&other);
    not_found(stranger.get(&format!("/monitoring/tasks/{task_id}")).send().await);
    not_found(stranger.get(&format!("/monitoring/tasks/{task_id}/stream")).send().await);
    not_found(stranger.delete(&format!("/monitoring/tasks/{task_id}")).send().await);
    not_found(stranger.delete(&format!("/monitoring/tasks/{task_id}?purge=true")).send().await);
    not_found(stranger.get(&format!("/monitoring/agent/{agent}/executions")).send().await);
    not_found(stranger.get(&format!("/execute/a2a/agents/health?agent_id={agent}")).send().await);
    for path in ["/execute/a2a/stream/agent", "/execute/a2a/stream/celery/agent"] {
        let refused = stranger.post(path, json!({"agent_id": agent, "message": "hi"}));
        refused.error(404, "RESOURCE_NOT_FOUND").await;
    }
    assert_eq!(stranger.get("/monitoring/executions/recent").expect(200).await["data"], json!([]));
    assert_eq!(stranger.get("/execute/a2a/agents/list").expect(200).await["data"], json!([]));
    assert_eq!(stranger.get("/execute/a2a/agents/health").expect(200).await["data"], json!([]));
    // The owner still sees its task, untouched.
    let task = runner.get(&format!("/monitoring/tasks/{task_id}")).expect(200).await;
    assert_eq!(task["data"]["status"], "success");
}

#[tokio::test]
async fn tool_scripts_are_validated_with_their_problem_located() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let valid = runner.post("/tools/validation", json!({"script": "def run(city):\n    return city\n"})).send().await;
    assert_eq!(valid.expect(200)["data"], json!({"valid": true, "entry_point": "run", "errors": []}));
    let broken =
        runner.post("/tools/validation", json!({"script": "def run(city):\n    return city +\n"})).expect(200).await;
    assert_eq!(
        (broken["data"]["valid"].as_bool(), broken["data"]["errors"][0]["line"].as_u64()),
        (Some(false), Some(2))
    );
    assert!(broken["data"]["errors"][0]["column"].as_u64().is_some());
    assert_eq!(
        runner.post("/tools/validation", json!({})).error(422, "VALIDATION_ERROR").await["details"]["script"],
        "is required"
    );
}

#[tokio::test]
async fn health_checks_report_tables_queues_and_secrets_and_name_what_is_unreachable() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let basic = runner.get("/health-check").expect(200).await;
    assert_eq!(
        (basic["data"]["status"].as_str(), basic["data"]["service"].as_str()),
        (Some("healthy"), Some("runner"))
    );

    stack.run_queue().enqueue(RunId::now_v7()).await.unwrap();
    let detailed = runner.get("/health-check/detailed").expect(200).await["data"].clone();
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
    let broken = stack.with_settings(&[("RUNNER_QUEUE_URL", "no-such-queue"), ("RUNS_TABLE", "no-such-table")]);
    let broken = broken.client::<RunnerService>(&clock).with_key(&key);
    let unhealthy = broken.get("/health-check/detailed").error(503, "SERVICE_UNAVAILABLE").await;
    let message = unhealthy["message"].as_str().unwrap();
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
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    // The worker is another process in all but address space: its own runner and clients.
    let worker = stack.service::<RunWorker>(&clock);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let working = tokio::spawn(dev_server::run_runner_worker(worker, stack.run_queue(), async move {
        let _ = stopped.await;
    }));

    let body = json!({"agent_id": agent, "message": "Take your time"});
    let response = runner.post("/execute/a2a/stream/celery/agent", body).stream().await;
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    let mut stream = sse_stream::SseStream::new(response.into_body());
    // Wait until the worker is mid-answer: its first delta is recorded and followed.
    loop {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(60), stream.next()).await.unwrap();
        if frame.unwrap().unwrap().event.as_deref() == Some("message") {
            break;
        }
    }
    let cancel = runner.delete(&format!("/monitoring/tasks/{task_id}")).send().await;
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
    let task = runner.get(&format!("/monitoring/tasks/{task_id}")).expect(200).await["data"].clone();
    assert_eq!((task["status"].as_str(), task["failure_reason"].as_str()), (Some("failed"), Some("cancelled")));
    assert_eq!(model.requests.lock().unwrap().len(), 1, "the model was asked once and never again");
    let _ = stop.send(());
    working.await.unwrap();
}
