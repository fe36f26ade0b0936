//! Flowtool sync against a local server speaking Langflow's `GET /api/v1/flows/`.

use http::Method;
use integration_tests::langflow_server::{FlowKind, LangflowServer};
use integration_tests::local_server::{Handler, LocalServer, RecordingServer, closed_port_url, respond};
use integration_tests::{TestClient, TestClock, TestStack};
use platform_api::settings::FLOW_SERVER_URL;
use platform_api::{AgentRunsService, AgentsService};
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

const FLOW_KEY: &str = "flow-key-1";

/// A flow server holding `flows`, answering as Langflow does: 403 without the right
/// `x-api-key`, the header-only projection as a JSON array (or as a page when `paged`).
async fn start_flow_server(flows: Value, paged: bool) -> LocalServer {
    let handler: Handler = Arc::new(move |request| {
        let flows = flows.clone();
        Box::pin(async move {
            if request.headers().get("x-api-key").and_then(|v| v.to_str().ok()) != Some(FLOW_KEY) {
                return respond(403, "application/json", r#"{"detail":"Invalid API key"}"#);
            }
            let query = request.uri().query().unwrap_or_default();
            // One flow: a graph with no chat or text component.
            if let Some(id) = request.uri().path().strip_prefix("/api/v1/flows/").filter(|id| !id.is_empty()) {
                return respond(200, "application/json", json!({"id": id, "data": {"nodes": []}}).to_string());
            }
            if request.uri().path() != "/api/v1/flows/" || !query.contains("header_flows=true") {
                return respond(404, "application/json", r#"{"detail":"Not Found"}"#);
            }
            let body =
                if paged { json!({"items": flows, "total": 3, "page": 1, "size": 50, "pages": 1}) } else { flows };
            respond(200, "application/json", body.to_string())
        })
    });
    LocalServer::start(handler).await
}

fn flows() -> Value {
    json!([
        {"id": "f-1", "name": "Summarize", "description": "Summarizes a meeting", "endpoint_name": "summarize",
         "folder_id": "d-1", "is_component": false},
        {"id": "f-2", "name": "Translate", "description": null, "endpoint_name": null, "folder_id": "d-1",
         "is_component": false},
        {"id": "c-1", "name": "A component", "description": "", "folder_id": "d-1", "is_component": true},
        {"id": "f-3", "name": "Taken", "description": "", "folder_id": "d-1", "is_component": false}
    ])
}

fn flow_ids(outcomes: &Value) -> Vec<&str> {
    outcomes.as_array().unwrap().iter().map(|outcome| outcome["flow_id"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn sync_creates_one_agent_per_flow_and_reports_the_rest() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let server = start_flow_server(flows(), false).await;
    let taken = json!({"type": "a2a", "name": "Taken"});
    agents.post("/agents/", taken).expect(201).await;
    let body = json!({"base_url": server.url(""), "api_key": FLOW_KEY});

    let first = agents.post("/agents/flowtool/sync", body.clone()).expect(200).await;
    let report = &first["data"];
    assert_eq!(report["total_flows"], 3);
    assert_eq!(flow_ids(&report["created"]), ["f-1", "f-2"]);
    assert_eq!(flow_ids(&report["failed"]), ["f-3"]);
    assert_eq!(report["failed"][0]["reason"], "another agent is already named \"Taken\"");
    assert_eq!(report["skipped"], json!([]));

    let summarize = report["created"][0]["agent_id"].as_str().unwrap().to_owned();
    let detail = agents.get(&format!("/agents/{summarize}")).expect(200).await;
    assert_eq!(detail["data"]["type"], "flowtool");
    assert_eq!(detail["data"]["name"], "Summarize");
    assert_eq!(detail["data"]["description"], "Summarizes a meeting");
    assert_eq!(
        detail["data"]["agent_config"],
        json!({"flowtool": {"flow_id": "f-1", "endpoint_name": "summarize", "base_url": server.url(""),
            "input_type": "chat", "output_type": "chat"}})
    );
    assert_eq!(detail["data"]["metadata"], json!({"agent_source": "flowtool"}));

    // A second sync creates nothing; a deleted flow agent is not brought back.
    agents.delete(&format!("/agents/{summarize}")).expect(200).await;
    let second = agents.post("/agents/flowtool/sync", body).expect(200).await;
    assert_eq!(second["data"]["created"], json!([]));
    assert_eq!(flow_ids(&second["data"]["skipped"]), ["f-1", "f-2"]);
    assert_eq!(second["data"]["skipped"][0]["reason"], "the flow's agent is deleted; restore it to use it");
    assert_eq!(second["data"]["skipped"][1]["reason"], "the flow already has an agent");
    let list = agents.get("/agents/?agent_type=flowtool").expect(200).await;
    assert_eq!(list["data"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn settings_and_secrets_manager_supply_the_defaults() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let server = start_flow_server(flows(), true).await;

    // Nothing configured: a 400 naming what is missing, before any call to a server.
    let unconfigured = stack.client::<AgentsService>(&clock).with_key(&key);
    let refused = unconfigured.request(Method::POST, "/agents/flowtool/sync").error(400, "BAD_REQUEST").await;
    assert!(refused["message"].as_str().unwrap().starts_with("No flow server is configured"), "{refused}");
    let with_server = stack.with_settings(&[(FLOW_SERVER_URL, &server.url(""))]);
    let configured = with_server.client::<AgentsService>(&clock).with_key(&key);
    let refused = configured.request(Method::POST, "/agents/flowtool/sync").error(400, "BAD_REQUEST").await;
    assert!(refused["message"].as_str().unwrap().starts_with("No flow server API key"), "{refused}");
    configured.get("/agents/?sync_flowtool_agents=true").error(400, "BAD_REQUEST").await;

    // With the key in Secrets Manager, a sync needs no body, and so does the list's sync.
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    let secret_id = stack.setting(platform_api::settings::FLOW_SERVER_SECRET_ID);
    secrets.put_secret_value().secret_id(secret_id).secret_string(FLOW_KEY).send().await.unwrap();
    let list = configured.get("/agents/?sync_flowtool_agents=true").expect(200).await;
    assert_eq!(list["data"].as_array().map(Vec::len), Some(3));
    let again = configured.request(Method::POST, "/agents/flowtool/sync").expect(200).await;
    assert_eq!(flow_ids(&again["data"]["skipped"]), ["f-1", "f-2", "f-3"]);
    // The stored key goes only to the configured server: another base_url needs its own key.
    let elsewhere = json!({"base_url": server.url("/elsewhere")});
    let refused = configured.post("/agents/flowtool/sync", elsewhere).error(400, "BAD_REQUEST").await;
    assert_eq!(refused["message"], "A base_url in the request needs its own api_key.");
    // The body overrides the settings.
    let wrong_key = json!({"api_key": "wrong"});
    let refused = configured.post("/agents/flowtool/sync", wrong_key).error(400, "BAD_REQUEST").await;
    assert_eq!(refused["details"]["error"], "the flow server refused the API key (HTTP 403)");
}

#[tokio::test]
async fn bad_bodies_and_unreachable_servers_are_refused() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let sync = |body: Value| agents.post("/agents/flowtool/sync", body);

    sync(json!([1])).error(400, "BAD_REQUEST").await;
    sync(json!({"base_url": 5})).error(400, "BAD_REQUEST").await;
    sync(json!({"base_url": "ftp://flows.test", "api_key": "k"})).error(422, "VALIDATION_ERROR").await;
    sync(json!({"base_url": "http://flows.test", "api_key": "k", "extra": 1})).error(422, "VALIDATION_ERROR").await;
    let unreachable = sync(json!({"base_url": closed_port_url(""), "api_key": "k"})).error(400, "BAD_REQUEST").await;
    let reason = unreachable["details"]["error"].as_str().unwrap();
    assert!(reason.starts_with("could not reach the flow server"), "{unreachable}");
    let web = start_flow_server(json!({"not": "flows"}), false).await;
    let unreadable = sync(json!({"base_url": web.url(""), "api_key": FLOW_KEY})).error(400, "BAD_REQUEST").await;
    assert!(unreadable["details"]["error"].as_str().unwrap().contains("not a list of flows"));
    agents.get("/agents/flowtool/sync").error(405, "METHOD_NOT_ALLOWED").await;
    agents.get("/agents/?sync_flowtool_agents=yes").error(422, "VALIDATION_ERROR").await;
}

/// A flow server whose run streams `count` tokens `every` apart, then its `end` event.
async fn start_slow_flow_run(count: usize, every: std::time::Duration) -> LocalServer {
    use http_body_util::{BodyExt, StreamBody};
    let handler: Handler = Arc::new(move |_request| {
        Box::pin(async move {
            let mut events: Vec<(std::time::Duration, String)> = (0..count)
                .map(|i| (every, json!({"event": "token", "data": {"chunk": format!("t{i} ")}}).to_string() + "\n\n"))
                .collect();
            events.push((std::time::Duration::ZERO, json!({"event": "end", "data": {"result": {}}}).to_string()));
            let frames = futures_util::stream::unfold(events.into_iter(), |mut events| async move {
                let (pause, text) = events.next()?;
                tokio::time::sleep(pause).await;
                Some((
                    Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(hyper::body::Bytes::from(text))),
                    events,
                ))
            });
            hyper::Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(StreamBody::new(frames).boxed())
                .expect("valid response")
        })
    });
    LocalServer::start(handler).await
}

// Paused time: 45 s of flow run take no real time (client and server wait on the same clock).
#[tokio::test(start_paused = true)]
async fn a_flow_run_streaming_for_45_seconds_succeeds_and_a_silent_one_names_its_limit() {
    use std::time::Duration;
    let limits = outbound::StreamLimits::new(Duration::from_secs(300));
    let slow = start_slow_flow_run(9, Duration::from_secs(5)).await;
    let server = flow_server::FlowServer { base_url: slow.url(""), api_key: FLOW_KEY.into() };
    let client = integration_tests::loopback_client();
    let mut tokens = Vec::new();
    let run = flow_server::FlowRun {
        flow_id: "f-1",
        message: "Hi",
        session_id: "a:b:s",
        input_type: flow_server::IoType::Chat,
        output_type: flow_server::IoType::Chat,
    };
    let answer = server.run_flow(&client, run, limits, &mut |token| tokens.push(token.to_owned())).await;
    assert_eq!(answer.as_deref(), Ok("t0 t1 t2 t3 t4 t5 t6 t7 t8 "));
    assert_eq!(tokens.len(), 9);

    let silent = start_slow_flow_run(1, Duration::from_secs(130)).await;
    let server = flow_server::FlowServer { base_url: silent.url(""), api_key: FLOW_KEY.into() };
    let err = server.run_flow(&client, run, limits, &mut |_| {}).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "the flow run's stream stopped: nothing arrived within 120 seconds (the first-byte limit)"
    );
}

/// Runs `agent` with `body`: the last event's name and data.
async fn run_agent(runs: &TestClient, agent: &str, key: &str, body: Value) -> (String, Value) {
    let runs = runs.with_key(key);
    let response = crate::agent_runs::run(&runs, agent, "application/json", body.to_string()).stream().await;
    let frames = crate::agent_runs::read_stream(response.into_body()).await;
    let (_, name, data) = frames.last().expect("a last event").clone();
    (name, data)
}

/// The agent a sync report created for `flow_id`.
fn created_agent(report: &Value, flow_id: &str) -> String {
    let created = report["data"]["created"].as_array().unwrap();
    let outcome = created.iter().find(|outcome| outcome["flow_id"] == flow_id).expect("the flow's agent");
    outcome["agent_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_sync_with_a_key_is_followed_by_runs_that_work_on_the_flows_own_server() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let langflow = LangflowServer::start(FLOW_KEY, &[("f-chat", FlowKind::Chat)]).await;
    // The settings name another server, with no key: the agent's own server is used.
    let elsewhere = RecordingServer::start().await;
    let runs = stack.with_settings(&[(FLOW_SERVER_URL, &elsewhere.url(""))]).client::<AgentRunsService>(&clock);

    let body = json!({"base_url": langflow.url(""), "api_key": FLOW_KEY});
    let report = agents.post("/agents/flowtool/sync", body).expect(200).await;
    let agent = created_agent(&report, "f-chat");
    let detail = agents.get(&format!("/agents/{agent}")).expect(200).await;
    assert_eq!(detail["data"]["agent_config"]["flowtool"]["base_url"], langflow.url(""));
    assert!(!detail.to_string().contains(FLOW_KEY), "the key is write-only: {detail}");

    let (last, data) = run_agent(&runs, &agent, &key, json!({"message": "hello"})).await;
    assert_eq!((last.as_str(), &data["output"]), ("done", &json!("Hi there")), "{data}");
    let run = langflow.received().into_iter().rfind(|r| r.path.starts_with("/api/v1/run/")).unwrap();
    assert_eq!((run.path.as_str(), run.api_key.as_deref()), ("/api/v1/run/f-chat?stream=true", Some(FLOW_KEY)));
    assert!(elsewhere.received().is_empty());

    // The key is the account's and its origin's: another account's agent of the same flow, and
    // this agent moved to another origin, have none.
    let other_key = stack.api_key(Uuid::new_v4()).await;
    let flowtool = json!({"flow_id": "f-chat", "base_url": langflow.url("")});
    let copy = json!({"type": "flowtool", "name": "Copy", "agent_config": {"flowtool": flowtool}});
    let copy = agents.with_key(&other_key).post("/agents/", copy).created().await;
    let (last, data) = run_agent(&runs, &copy, &other_key, json!({"message": "hello"})).await;
    assert_eq!(last, "error");
    let expected =
        format!("no API key is stored for the flow server at {}: sync from it with its api_key", langflow.url(""));
    assert_eq!(data["message"], expected);
    let moved = json!({"agent_config": {"flowtool": {"flow_id": "f-chat", "base_url": elsewhere.url("/x")}}});
    agents.patch(&format!("/agents/{agent}"), moved).expect(200).await;
    let (last, _) = run_agent(&runs, &agent, &key, json!({"message": "hello"})).await;
    assert_eq!(last, "error");
    assert!(elsewhere.received().is_empty(), "no key goes to another origin");
}

#[tokio::test]
async fn the_configured_server_key_serves_a_sync_without_a_body_and_its_agents() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let langflow = LangflowServer::start(FLOW_KEY, &[("f-chat", FlowKind::Chat)]).await;
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    let secret_id = stack.setting(platform_api::settings::FLOW_SERVER_SECRET_ID);
    secrets.put_secret_value().secret_id(secret_id).secret_string(FLOW_KEY).send().await.unwrap();
    let with_langflow = stack.with_settings(&[(FLOW_SERVER_URL, &langflow.url(""))]);
    let agents = with_langflow.client::<AgentsService>(&clock).with_key(&key);
    let runs = with_langflow.client::<AgentRunsService>(&clock);

    let report = agents.request(Method::POST, "/agents/flowtool/sync").expect(200).await;
    let agent = created_agent(&report, "f-chat");
    let (last, data) = run_agent(&runs, &agent, &key, json!({"message": "hello"})).await;
    assert_eq!((last.as_str(), &data["output"]), ("done", &json!("Hi there")), "{data}");
}

#[tokio::test]
async fn a_failed_flow_reports_langflows_reason() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let runs = stack.client::<AgentRunsService>(&clock);
    let langflow = LangflowServer::start(FLOW_KEY, &[("f-boom", FlowKind::Failing)]).await;
    let body = json!({"base_url": langflow.url(""), "api_key": FLOW_KEY});
    let report = agents.post("/agents/flowtool/sync", body).expect(200).await;
    let agent = created_agent(&report, "f-boom");

    let (last, data) = run_agent(&runs, &agent, &key, json!({"message": "hello"})).await;
    assert_eq!(last, "error");
    assert_eq!(
        (data["failure_reason"].as_str(), data["message"].as_str()),
        (Some("error"), Some("the flow failed: Error building Component Boom: \n\nboom"))
    );
}

#[tokio::test]
async fn text_flows_run_with_their_own_types_and_no_answer_is_a_failure() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let runs = stack.client::<AgentRunsService>(&clock);
    let langflow = LangflowServer::start(FLOW_KEY, &[("f-text", FlowKind::Text), ("f-chat", FlowKind::Chat)]).await;
    let body = json!({"base_url": langflow.url(""), "api_key": FLOW_KEY});
    let report = agents.post("/agents/flowtool/sync", body.clone()).expect(200).await;
    let agent = created_agent(&report, "f-text");
    let detail = agents.get(&format!("/agents/{agent}")).expect(200).await;
    let flowtool = &detail["data"]["agent_config"]["flowtool"];
    assert_eq!((flowtool["input_type"].as_str(), flowtool["output_type"].as_str()), (Some("text"), Some("text")));

    let (last, data) = run_agent(&runs, &agent, &key, json!({"message": "hello"})).await;
    assert_eq!((last.as_str(), &data["output"]), ("done", &json!("You said: hello")), "{data}");
    let sent = langflow.runs().last().cloned().unwrap();
    assert_eq!((sent["input_type"].as_str(), sent["output_type"].as_str()), (Some("text"), Some("text")));

    // Overridden to chat, the flow gives no answer: the run fails, it does not succeed empty.
    let flowtool = |input: &str, output: &str| {
        json!({"agent_config": {"flowtool": {"flow_id": "f-text", "base_url": langflow.url(""),
            "input_type": input, "output_type": output}}})
    };
    let path = format!("/agents/{agent}");
    agents.patch(&path, flowtool("chat", "chat")).expect(200).await;
    let (last, data) = run_agent(&runs, &agent, &key, json!({"message": "hello"})).await;
    assert_eq!(last, "error");
    assert_eq!(data["message"], "the flow gave no answer (none of its output components produced text)");
    let refused = agents.patch(&path, flowtool("any", "text")).error(422, "VALIDATION_ERROR").await;
    assert_eq!(refused["details"]["agent_config.flowtool.input_type"], "must be one of chat, text", "{refused}");

    // The next sync brings the types of the flow's graph back, and those of a flow edited since.
    langflow.edit("f-chat", FlowKind::Text);
    let again = agents.post("/agents/flowtool/sync", body).expect(200).await;
    let updated = flow_ids(&again["data"]["updated"]);
    assert_eq!(updated, ["f-chat", "f-text"], "{again}");
    let chat_agent = created_agent(&report, "f-chat");
    let (last, data) = run_agent(&runs, &chat_agent, &key, json!({"message": "edited"})).await;
    assert_eq!((last.as_str(), &data["output"]), ("done", &json!("You said: edited")), "{data}");
}

#[tokio::test]
async fn a_timed_out_flow_names_the_timeout_the_run_was_given() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let runs = stack.client::<AgentRunsService>(&clock);
    let slow = start_slow_flow_run(1, std::time::Duration::from_secs(30)).await;
    let flowtool = json!({"flow_id": "f-slow", "base_url": slow.url("")});
    let agent = json!({"type": "flowtool", "name": "Slow", "agent_config": {"flowtool": flowtool}});
    let agent = agents.post("/agents/", agent).created().await;
    let keys = stack.tool_secrets().flow_server_keys;
    keys.put(account.into(), &slow.url(""), FLOW_KEY).await.unwrap();

    // A fractional timeout: the message said "2 seconds" (the remaining time, rounded down).
    let (last, data) = run_agent(&runs, &agent, &key, json!({"message": "hello", "timeout": 2.5})).await;
    assert_eq!(last, "error");
    assert_eq!(
        (data["failure_reason"].as_str(), data["message"].as_str()),
        (Some("timeout"), Some("the flow did not finish within 2.5 seconds"))
    );
}
