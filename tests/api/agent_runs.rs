//! `POST /agents/{agent_id}/run` through its streaming handler: the stream read frame by frame as
//! a client would, JSON and multipart bodies, the run recorded and listed, every refusal.

use futures_util::StreamExt;
use http::Method;
use http_body_util::BodyExt;
use integration_tests::model_server::{ModelServer, gated_hello_world, text_reply};
use integration_tests::{Call, Reply, TestClient, TestClock, TestStack};
use platform_api::settings::FLOW_SERVER_URL;
use platform_api::{AgentRunsService, AgentsService, LanguageModelsService, WebhooksService};
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

/// An account's key and a config agent on a model served by `model`.
async fn agent(stack: &TestStack, clock: &TestClock, model: &ModelServer) -> (String, String) {
    let key = stack.api_key(Uuid::new_v4()).await;
    let lm = stack.language_model(clock, &key, "local", &model.base_url()).await;
    let agent = stack
        .client::<AgentsService>(clock)
        .with_key(&key)
        .post(
            "/agents/",
            json!({"type": "config", "name": "Runner",
        "framework": "chainlib", "language_model_id": lm, "instruction": "Be brief."}),
        )
        .created()
        .await;
    (key, agent)
}

/// `POST /agents/{agent}/run` with `body` as `content_type`.
pub(crate) fn run<'a>(runs: &'a TestClient, agent: &str, content_type: &str, body: impl Into<Vec<u8>>) -> Call<'a> {
    runs.request(Method::POST, &format!("/agents/{agent}/run")).body(content_type, http_api::Body::Binary(body.into()))
}

/// The stream's frames through an independent SSE parser: (id, event, data).
pub(crate) async fn read_stream(body: http_api::StreamBody) -> Vec<(String, String, Value)> {
    let mut parsed = sse_stream::SseStream::new(body);
    let mut frames = Vec::new();
    while let Some(frame) = parsed.next().await {
        let frame = frame.unwrap();
        if let (Some(id), Some(event), Some(data)) = (frame.id, frame.event, frame.data) {
            frames.push((id, event, serde_json::from_str(&data).unwrap()));
        }
    }
    frames
}

#[tokio::test]
async fn a_run_streams_its_events_and_is_recorded() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Hello from the agent.")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let body = json!({"message": "Say hello", "session_id": "s-1", "timeout": 30}).to_string();
    let response = run(&runs, &agent, "application/json", body).stream().await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let run_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    assert!(response.headers().contains_key("x-ratelimit-remaining"));
    let frames = read_stream(response.into_body()).await;
    let names: Vec<&str> = frames.iter().map(|(_, name, _)| name.as_str()).collect();
    assert_eq!(names, ["metadata", "message", "message", "message", "message", "done"]);
    assert_eq!(frames.iter().map(|(id, _, _)| id.as_str()).collect::<Vec<_>>(), ["1", "2", "3", "4", "5", "6"]);
    // The run's trace id (its own: the request named none), as its record has it.
    let trace_id = frames[0].2["trace_id"].as_str().unwrap().to_owned();
    assert!(trace_id.len() == 32 && trace_id.bytes().all(|b| b.is_ascii_hexdigit()), "{trace_id}");
    assert_eq!(frames[0].2, json!({"run_id": run_id, "agent_id": agent, "status": "started", "trace_id": trace_id}));
    assert_eq!(frames[5].2["output"], "Hello from the agent.");
    assert_eq!(
        frames[5].2["usage"],
        json!({"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 0, "cache_write_tokens": 0})
    );
    assert_eq!(model.requests.lock().unwrap()[0]["messages"][0], json!({"role": "system", "content": "Be brief."}));

    // run.started and run.succeeded reached the account's webhook events.
    let events = stack.client::<WebhooksService>(&clock).with_key(&key).get("/webhooks/events").expect(200).await;
    let mut types: Vec<(&str, &str)> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["data"]["id"] == run_id.as_str())
        .map(|event| (event["type"].as_str().unwrap(), event["data"]["status"].as_str().unwrap()))
        .collect();
    types.sort();
    assert_eq!(types, [("run.started", "started"), ("run.succeeded", "success")]);

    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let run = agents.get(&format!("/agents/{agent}/runs")).expect(200).await["data"][0].clone();
    assert_eq!(
        (run["id"].as_str(), run["status"].as_str(), run["run_type"].as_str()),
        (Some(run_id.as_str()), Some("success"), Some("api"))
    );
    assert_eq!((run["input"]["message"].as_str(), run["session_id"].as_str()), (Some("Say hello"), Some("s-1")));
}

#[tokio::test]
async fn the_first_delta_reaches_the_client_before_the_model_has_finished() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let gate = Arc::new(tokio::sync::Notify::new());
    let reply = gated_hello_world(&gate);
    let model = ModelServer::start(vec![reply]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let response = run(&runs, &agent, "application/json", r#"{"message": "hi"}"#).stream().await;
    let mut body = response.into_body();
    // Read until the first delta: the model is held until then, so it cannot have finished.
    let seen = integration_tests::read_until(&mut body, "event: message").await;
    assert!(seen.contains(r#"{"delta":"Hello "}"#), "{seen}");
    assert!(!seen.contains("event: done"));
    gate.notify_one();
    let rest = body.collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&rest).contains("event: done"));
}

#[tokio::test]
async fn multipart_runs_inline_text_files() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Read it.")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let body = "--b\r\nContent-Disposition: form-data; name=\"message\"\r\n\r\nSummarize the notes\r\n\
        --b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"notes.txt\"\r\nContent-Type: text/plain\r\n\r\n\
        Ship on Friday.\r\n--b--\r\n";
    let response = run(&runs, &agent, "multipart/form-data; boundary=b", body).stream().await;
    assert_eq!(response.status(), 200);
    let frames = read_stream(response.into_body()).await;
    assert_eq!(frames.last().unwrap().1, "done");
    let sent = model.requests.lock().unwrap()[0]["messages"][1]["content"].as_str().unwrap().to_owned();
    assert_eq!(sent, "Summarize the notes\n\n--- file: notes.txt ---\nShip on Friday.");
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    assert_eq!(
        agents.get(&format!("/agents/{agent}/runs")).expect(200).await["data"][0]["input"],
        json!({"message": "Summarize the notes", "files": ["notes.txt"]})
    );
}

#[tokio::test]
async fn multipart_runs_pass_images_to_the_model_and_only_config_agents_take_them() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("A red dot.")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let png = [b"\x89PNG\r\n\x1a\n".as_slice(), b"\0\0\0\rIHDR pixels \xFF\xFE"].concat();
    let multipart = |agent_png: &[u8]| {
        let mut body = b"--b\r\nContent-Disposition: form-data; name=\"message\"\r\n\r\nWhat is this?\r\n\
            --b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"dot.png\"\r\nContent-Type: image/png\r\n\r\n"
            .to_vec();
        body.extend_from_slice(agent_png);
        body.extend_from_slice(b"\r\n--b--\r\n");
        body
    };
    let response = run(&runs, &agent, "multipart/form-data; boundary=b", multipart(&png)).stream().await;
    assert_eq!(response.status(), 200);
    assert_eq!(read_stream(response.into_body()).await.last().unwrap().1, "done");
    // Chat Completions' vision input: a text part, then the image as a base64 data URL.
    use base64::Engine;
    let data_url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(&png));
    let content = model.requests.lock().unwrap()[0]["messages"][1]["content"].clone();
    assert_eq!(
        content,
        json!([{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": data_url}}])
    );
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    assert_eq!(
        agents.get(&format!("/agents/{agent}/runs")).expect(200).await["data"][0]["input"],
        json!({"message": "What is this?", "files": ["dot.png"]})
    );

    // An a2a agent's remote takes text: an image is a 422 naming `files`, and no run starts.
    let remote = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .post("/agents/", json!({"type": "a2a", "name": "Remote", "a2a_profile": {"url": "http://127.0.0.1:9/"}}))
        .created()
        .await;
    let response = run(&runs, &remote, "multipart/form-data; boundary=b", multipart(&png)).stream().await;
    assert_eq!(response.status(), 422);
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["error"]["details"]["files"], "images and documents can only be sent to config agents");
}

#[tokio::test]
async fn bad_runs_get_the_documented_errors() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(Vec::new()).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let media = "application/json";
    let refused = run(&runs, &agent, "text/plain", "hi").error(400, "BAD_REQUEST").await;
    assert_eq!(refused["details"]["content-type"], "must be application/json or multipart/form-data");
    run(&runs, &agent, media, "{nope").error(400, "BAD_REQUEST").await;
    run(&runs, &agent, media, r#"{"message": 1}"#).error(400, "BAD_REQUEST").await;
    let refused = run(&runs, &agent, media, r#"{"timeout": -1}"#).error(422, "VALIDATION_ERROR").await;
    let details = &refused["details"];
    assert_eq!((details["message"].as_str(), details["timeout"].is_string()), (Some("is required"), true));
    let unknown = Uuid::new_v4().to_string();
    run(&runs, &unknown, media, r#"{"message": "hi"}"#).error(404, "RESOURCE_NOT_FOUND").await;
    run(&runs, "nope", media, r#"{"message": "hi"}"#).error(422, "VALIDATION_ERROR").await;
    let other = stack.api_key(Uuid::new_v4()).await;
    run(&runs.with_key(&other), &agent, media, r#"{"message": "hi"}"#).error(404, "RESOURCE_NOT_FOUND").await;
    run(&runs.with_key("bad.key"), &agent, media, r#"{"message": "hi"}"#).error(401, "AUTHENTICATION_FAILED").await;
    let reply = runs.get(&format!("/agents/{agent}/run")).send().await;
    assert_eq!(reply.header("allow"), Some("POST"));
    reply.error(405, "METHOD_NOT_ALLOWED");
    let huge = json!({"message": "x".repeat(6 * 1024 * 1024)}).to_string();
    run(&runs, &agent, media, huge).error(413, "PAYLOAD_TOO_LARGE").await;
    // No run was recorded for any of them.
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let listed = agents.get(&format!("/agents/{agent}/runs"));
    assert_eq!(listed.expect(200).await["pagination"]["total"], 0);
}

#[tokio::test]
async fn memory_continues_a_session_within_its_history_limit() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model =
        ModelServer::start(vec![text_reply("One."), text_reply("Two."), text_reply("Three."), text_reply("Alone.")])
            .await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let models = stack.client::<LanguageModelsService>(&clock).with_key(&key);
    let lm = models
        .post(
            "/language-models",
            json!({"name": "local",
        "provider": "openai_compatible", "model_name": "m", "base_url": model.base_url()}),
        )
        .created()
        .await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let agent = agents
        .post(
            "/agents/",
            json!({"type": "config",
        "name": "Rememberer", "framework": "chainlib", "language_model_id": lm,
        "agent_config": {"memory": "conversation"}, "metadata": {"chat_history_limit": 2}}),
        )
        .created()
        .await;
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    for (message, session) in [("first", "s-1"), ("second", "s-1"), ("third", "s-1"), ("elsewhere", "s-2")] {
        let body = json!({"message": message, "session_id": session}).to_string();
        let response = run(&runs, &agent, "application/json", body).stream().await;
        let frames = read_stream(response.into_body()).await;
        assert_eq!(frames.last().unwrap().1, "done");
    }
    let requests = model.requests.lock().unwrap().clone();
    let conversation = |i: usize| -> Vec<(String, String)> {
        requests[i]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap_or("").to_owned()))
            .collect()
    };
    let pair = |role: &str, text: &str| (role.to_owned(), text.to_owned());
    assert_eq!(conversation(0), [pair("user", "first")]);
    assert_eq!(conversation(1), [pair("user", "first"), pair("assistant", "One."), pair("user", "second")]);
    // chat_history_limit 2: only the last exchange.
    assert_eq!(conversation(2), [pair("user", "second"), pair("assistant", "Two."), pair("user", "third")]);
    // Another session starts empty.
    assert_eq!(conversation(3), [pair("user", "elsewhere")]);
}

#[tokio::test]
async fn a2a_agents_run_on_their_remote_agent_streamed_or_not() {
    use integration_tests::a2a_server::{A2aServer, RemoteOutcome};
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let cases = [
        (true, RemoteOutcome::Completed, vec!["metadata", "message", "message", "message", "done"], "Hello. Done."),
        (false, RemoteOutcome::Completed, vec!["metadata", "message", "message", "done"], "Hello. Done."),
        (true, RemoteOutcome::Failed, vec!["metadata", "message", "message", "error"], ""),
    ];
    for (i, (streaming, outcome, expected, output)) in cases.into_iter().enumerate() {
        let remote = A2aServer::start(streaming, outcome).await;
        let agents = stack.client::<AgentsService>(&clock).with_key(&key);
        let agent = agents
            .post(
                "/agents/",
                json!({"type": "a2a",
            "name": format!("remote-{i}"), "a2a_profile": {"url": remote.server.url("")}}),
            )
            .created()
            .await;
        let response = run(&runs, &agent, "application/json", r#"{"message": "Say hello"}"#).stream().await;
        assert_eq!(response.status(), 200);
        let frames = read_stream(response.into_body()).await;
        let names: Vec<&str> = frames.iter().map(|(_, name, _)| name.as_str()).collect();
        assert_eq!(names, expected, "case {i}");
        let last = &frames.last().unwrap().2;
        if outcome == RemoteOutcome::Completed {
            assert_eq!(last["output"], output);
        } else {
            assert_eq!(
                (last["failure_reason"].as_str(), last["message"].as_str()),
                (Some("error"), Some("the remote task ended failed: quota exceeded"))
            );
        }
        let sent = remote.requests.lock().unwrap()[0].clone();
        let method = if streaming { "message/stream" } else { "message/send" };
        assert_eq!((sent["jsonrpc"].as_str(), sent["method"].as_str()), (Some("2.0"), Some(method)));
        assert_eq!(sent["params"]["message"]["parts"][0], json!({"kind": "text", "text": "Say hello"}));
    }
}

#[tokio::test]
async fn flowtool_agents_run_their_flow_on_the_flow_server() {
    use integration_tests::local_server::{Handler, LocalServer, respond};
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = Arc::clone(&seen);
    let handler: Handler = Arc::new(move |request| {
        let recorded = Arc::clone(&recorded);
        Box::pin(async move {
            if request.headers().get("x-api-key").and_then(|v| v.to_str().ok()) != Some("flow-key") {
                return respond(403, "application/json", r#"{"detail": "Invalid API key"}"#);
            }
            let path = request.uri().to_string();
            let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            recorded
                .lock()
                .unwrap()
                .push((path.clone(), serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null)));
            let events: &[Value] = if path.starts_with("/api/v1/run/f-ok") {
                &[
                    json!({"event": "add_message", "data": {}}),
                    json!({"event": "token", "data": {"chunk": "Hi "}}),
                    json!({"event": "token", "data": {"chunk": "there"}}),
                    json!({"event": "end", "data": {"result": {}}}),
                ]
            } else {
                &[json!({"event": "error", "data": {"error": "component failed"}})]
            };
            let stream: String = events.iter().map(|event| format!("{event}\n\n")).collect();
            respond(200, "text/event-stream", stream)
        })
    });
    let flows = LocalServer::start(handler).await;
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    secrets
        .put_secret_value()
        .secret_id(stack.setting("FLOW_SERVER_SECRET_ID"))
        .secret_string("flow-key")
        .send()
        .await
        .unwrap();
    let with_flows = stack.with_settings(&[(FLOW_SERVER_URL, &flows.url(""))]);
    let runs = with_flows.client::<AgentRunsService>(&clock).with_key(&key);
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let mut ok_agent = String::new();
    for (flow, expected) in
        [("f-ok", vec!["metadata", "message", "message", "done"]), ("f-bad", vec!["metadata", "error"])]
    {
        let agent = agents
            .post(
                "/agents/",
                json!({"type": "flowtool",
            "name": format!("flow {flow}"), "agent_config": {"flowtool": {"flow_id": flow}}}),
            )
            .created()
            .await;
        let body = json!({"message": "hello flow", "session_id": "s-9"}).to_string();
        let response = run(&runs, &agent, "application/json", body).stream().await;
        let frames = read_stream(response.into_body()).await;
        let names: Vec<&str> = frames.iter().map(|(_, name, _)| name.as_str()).collect();
        assert_eq!(names, expected, "{flow}");
        let last = &frames.last().unwrap().2;
        if flow == "f-ok" {
            assert_eq!(last["output"], "Hi there");
            ok_agent = agent;
        } else {
            assert_eq!(last["message"], "the flow failed: component failed");
        }
    }
    let (path, body) = seen.lock().unwrap()[0].clone();
    assert_eq!(path, "/api/v1/run/f-ok?stream=true");
    assert_eq!(
        body,
        json!({"input_value": "hello flow", "input_type": "chat", "output_type": "chat",
               "session_id": format!("{account}:{ok_agent}:s-9")})
    );
}

#[tokio::test]
async fn flow_sessions_are_namespaced_by_account_and_agent() {
    use integration_tests::local_server::{Handler, LocalServer, respond};
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let sessions = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = Arc::clone(&sessions);
    let handler: Handler = Arc::new(move |request| {
        let recorded = Arc::clone(&recorded);
        Box::pin(async move {
            let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let body = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
            recorded.lock().unwrap().push(body["session_id"].clone());
            let end = json!({"event": "end", "data": {"result": {"outputs": [{"outputs": [{"results":
                {"message": {"text": "ok"}}}]}]}}});
            respond(200, "text/event-stream", format!("{end}\n\n"))
        })
    });
    let flows = LocalServer::start(handler).await;
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    let secret_id = stack.setting("FLOW_SERVER_SECRET_ID");
    secrets.put_secret_value().secret_id(secret_id).secret_string("flow-key").send().await.unwrap();
    let with_flows = stack.with_settings(&[(FLOW_SERVER_URL, &flows.url(""))]);
    let runs = with_flows.client::<AgentRunsService>(&clock);
    let agent_body =
        json!({"type": "flowtool", "name": "Shared flow", "agent_config": {"flowtool": {"flow_id": "f-1"}}});
    let run_as = |agent: String, key: String, body: Value| {
        let runs = runs.with_key(&key);
        async move {
            let response = run(&runs, &agent, "application/json", body.to_string()).stream().await;
            let run_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
            let frames = read_stream(response.into_body()).await;
            assert_eq!(frames.last().unwrap().1, "done", "{frames:?}");
            run_id
        }
    };

    // Two tenants run the same flow and name the same session: each gets its own.
    let (tenant_a, tenant_b) = (Uuid::new_v4(), Uuid::new_v4());
    let (key_a, key_b) = (stack.api_key(tenant_a).await, stack.api_key(tenant_b).await);
    let agents = stack.client::<AgentsService>(&clock);
    let agent_a = agents.with_key(&key_a).post("/agents/", agent_body.clone()).created().await;
    let agent_b = agents.with_key(&key_b).post("/agents/", agent_body).created().await;
    run_as(agent_a.clone(), key_a.clone(), json!({"message": "hi", "session_id": "shared"})).await;
    run_as(agent_b.clone(), key_b.clone(), json!({"message": "hi", "session_id": "shared"})).await;
    // A run without a session_id has a session of its own, not the flow's (Langflow's default).
    let sessionless = run_as(agent_a.clone(), key_a, json!({"message": "hi"})).await;

    let sent = sessions.lock().unwrap().clone();
    assert_eq!(
        sent,
        [
            json!(format!("{tenant_a}:{agent_a}:shared")),
            json!(format!("{tenant_b}:{agent_b}:shared")),
            json!(format!("{tenant_a}:{agent_a}:run-{sessionless}")),
        ]
    );
}

#[tokio::test]
async fn a_stream_resumes_after_last_event_id_with_no_gap_and_no_duplicate() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("One two three four.")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let response = run(&runs, &agent, "application/json", r#"{"message": "Count"}"#).stream().await;
    let run_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    let whole = read_stream(response.into_body()).await;
    assert_eq!(whole.last().unwrap().1, "done");

    let stream = format!("/agents/{agent}/runs/{run_id}/stream");
    // A client that saw events 1 and 2 resumes: exactly the rest, same ids, same data.
    let resumed = runs.get(&stream).header("last-event-id", "2").stream().await;
    assert_eq!(resumed.status(), 200);
    assert_eq!(read_stream(resumed.into_body()).await, whole[2..].to_vec());
    // The query parameter works too, and 0 replays everything.
    let replayed = runs.get(&format!("{stream}?last_event_id=0")).stream().await;
    assert_eq!(read_stream(replayed.into_body()).await, whole);
    // A client that holds the end (or names an id past it) gets nothing more: no second end.
    let last = whole.len().to_string();
    for held in [last.as_str(), "18446744073709551615"] {
        let rejoined = runs.get(&stream).header("last-event-id", held).stream().await;
        assert_eq!(read_stream(rejoined.into_body()).await, Vec::new(), "Last-Event-ID {held}");
    }

    // The run's record.
    let agents = stack.client::<AgentsService>(&clock);
    let record = agents.with_key(&key).get(&format!("/agents/{agent}/runs/{run_id}")).expect(200).await;
    assert_eq!(
        (record["data"]["id"].as_str(), record["data"]["status"].as_str()),
        (Some(run_id.as_str()), Some("success"))
    );

    // Refusals: a bad Last-Event-ID; another account's key (its agent is not found, though the
    // run exists); an unknown run; the run under another agent of the account; a deleted agent.
    runs.get(&stream).header("last-event-id", "soon").expect(400).await;
    let not_found = |reply: Reply| (reply.status.as_u16(), reply.json()["error"]["message"].clone());
    let resume = |agent: &str, run: &str, key: &str| {
        let path = format!("/agents/{agent}/runs/{run}/stream");
        let key = key.to_owned();
        let runs = &runs;
        async move { runs.with_key(&key).get(&path).send().await }
    };
    let other = stack.api_key(Uuid::new_v4()).await;
    assert_eq!(not_found(resume(&agent, &run_id, &other).await), (404, json!("Agent not found.")));
    let unknown = Uuid::now_v7();
    assert_eq!(not_found(resume(&agent, &unknown.to_string(), &key).await), (404, json!("Run not found.")));
    let sibling = json!({"type": "flowtool", "name": "sibling", "agent_config": {"flowtool": {"flow_id": "f"}}});
    let sibling = agents.with_key(&key).post("/agents/", sibling).created().await;
    assert_eq!(not_found(resume(&sibling, &run_id, &key).await), (404, json!("Run not found.")));
    agents.with_key(&key).delete(&format!("/agents/{sibling}")).expect(200).await;
    assert_eq!(not_found(resume(&sibling, &run_id, &key).await), (404, json!("Agent not found.")));
    agents.with_key(&key).get(&format!("/agents/{agent}/runs/{unknown}")).expect(404).await;
    agents.with_key(&other).get(&format!("/agents/{agent}/runs/{run_id}")).expect(404).await;
}
