//! The execution engine end to end over real wire formats: a scripted Chat Completions server as
//! the model, a Python tool in the sandbox, an `http` tool on a local server, and the tools of a
//! real MCP server; the event stream checked with an independent SSE parser.

use agent_runtime::engine::{AgentRun, DEFAULT_MAX_TURNS, Tool, execute};
use agent_runtime::events::RunEvent;
use agent_runtime::providers::chat_completions::{ChatCompletions, KeyHeader};
use agent_runtime::tools::{from_stored, mcp::McpTool, python::ToolSandbox};
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use integration_tests::local_server::{Handler, LocalServer, respond};
use integration_tests::loopback_client;
use integration_tests::mcp_server::start_mcp_server;
use integration_tests::model_server::{
    ModelReply, ModelServer, chunk, finish, spaced_reply, text_reply, tool_calls_reply,
};
use platform_api::{AgentsService, LanguageModelsService, McpsService};
use platform_data::ids::{AccountId, AgentId, RunId};
use platform_data::tools::{Tool as StoredTool, parse_tool};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

fn stored(body: Value) -> StoredTool {
    StoredTool::new(AccountId::new_v4(), parse_tool(body.to_string().as_bytes()).unwrap(), chrono::Utc::now())
}

/// A lookup service answering `{"q": …, "team": header}` for POSTed JSON.
async fn start_lookup_server() -> LocalServer {
    let handler: Handler = Arc::new(|request| {
        Box::pin(async move {
            let team = request.headers().get("x-team").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
            let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            respond(200, "application/json", json!({"q": body["q"], "units": body["units"], "team": team}).to_string())
        })
    });
    LocalServer::start(handler).await
}

#[tokio::test]
async fn a_multi_step_run_uses_every_tool_kind_and_streams_valid_sse() {
    let model = ModelServer::start(vec![
        tool_calls_reply(&[
            ("c1", "add", json!({"a": 2, "b": 3})),
            ("c2", "lookup", json!({"q": "tides"})),
            ("c3", "forecast", json!({"city": "Oslo"})),
            ("c4", "alerts", json!({"city": "Oslo"})),
        ]),
        text_reply("Five, tides, sunny."),
    ])
    .await;
    let lookup = start_lookup_server().await;
    let mcp_server = start_mcp_server(None).await;
    let client = loopback_client();

    let add = stored(json!({"name": "add", "type": "custom", "input_schema": {"type": "object"},
        "script": "def run(a, b):\n    return a + b\n"}));
    let http = stored(json!({"name": "lookup", "type": "http",
        "config": {"url": lookup.url("/lookup"), "method": "POST", "headers": {"X-Team": "blue"}}}));
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        from_stored(&add, None, Default::default(), &client, &ToolSandbox::default()).unwrap(),
        from_stored(
            &http,
            Some(&json!({"arguments": {"units": "metric"}})),
            Default::default(),
            &client,
            &ToolSandbox::default(),
        )
        .unwrap(),
    ];
    let target = mcp::McpTarget { url: mcp_server.url("/mcp"), headers: Vec::new(), timeout: Duration::from_secs(5) };
    let (session, server_tools) = mcp::open_session(&client, &target).await.unwrap();
    let session = Arc::new(session);
    for tool in &server_tools {
        tools.push(Arc::new(McpTool::new(Arc::clone(&session), tool, tool.name.clone())));
    }

    let provider = ChatCompletions {
        client: client.clone(),
        url: format!("{}/chat/completions", model.base_url()),
        api_key: Some("sk".into()),
        key_header: KeyHeader::Bearer,
        model: "gpt-test".into(),
        parameters: Map::new(),
        silence: agent_runtime::providers::SilenceLimits::default(),
    };
    let run = AgentRun {
        run_id: RunId::now_v7(),
        agent_id: AgentId::new_v4(),
        instruction: Some("Use the tools.".into()),
        history: Vec::new(),
        message: "Add 2 and 3, look up tides, and check Oslo.".into(),
        attachments: Vec::new(),
        provider: Arc::new(provider),
        tools,
        max_turns: DEFAULT_MAX_TURNS,
        planning: false,
        tool_output_sharing: false,
        timeout: Duration::from_secs(60),
        stated_timeout: None,
        limits: agent_runtime::engine::RunLimits::default(),
        sub_agent_calls: agent_runtime::engine::SubAgentCalls::default(),
        model: agent_runtime::spend::RunModel { model_id: "gpt-test".into(), pricing: None },
        model_name: "test-model".into(),
        provider_name: "openai",
        gate: None,
    };
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let outcome = execute(run, sender, std::future::pending()).await;
    let mut events = Vec::new();
    while let Ok(event) = receiver.try_recv() {
        events.push(event);
    }
    assert_eq!(outcome.result, Ok("Five, tides, sunny.".to_owned()));
    assert_eq!(outcome.steps, 2);

    let results: Vec<(String, Result<Value, String>)> = events
        .iter()
        .filter_map(|event| match event {
            RunEvent::ToolResult { name, result, .. } => Some((name.clone(), result.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(results[0], ("add".to_owned(), Ok(json!(5))));
    assert_eq!(results[1], ("lookup".to_owned(), Ok(json!({"q": "tides", "units": "metric", "team": "blue"}))));
    assert_eq!(results[2], ("forecast".to_owned(), Ok(json!("Sunny in Oslo"))));
    assert_eq!(results[3], ("alerts".to_owned(), Err("alerts service down".to_owned())));
    // The model's second turn saw the four results.
    let second = model.requests.lock().unwrap()[1].clone();
    let tool_messages: Vec<&Value> =
        second["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tool_messages.len(), 4);
    assert_eq!(tool_messages[3]["content"], "Error: alerts service down");

    // The stream as a client reads it, through an independent SSE parser.
    let text: String = events.iter().enumerate().map(|(i, event)| event.to_sse(i as u64 + 1)).collect();
    let mut parsed = sse_stream::SseStream::new(Full::new(Bytes::from(text)));
    let mut frames = Vec::new();
    while let Some(frame) = parsed.next().await {
        frames.push(frame.unwrap());
    }
    assert_eq!(frames.len(), events.len());
    for (i, (frame, event)) in frames.iter().zip(&events).enumerate() {
        assert_eq!(frame.id.as_deref(), Some((i + 1).to_string().as_str()));
        assert_eq!(frame.event.as_deref(), Some(event.name()));
        let data: Value = serde_json::from_str(frame.data.as_deref().unwrap()).unwrap();
        assert_eq!(RunEvent::from_parts(event.name(), &data).as_ref(), Some(event));
    }
    assert_eq!(frames.first().unwrap().event.as_deref(), Some("metadata"));
    assert_eq!(frames.last().unwrap().event.as_deref(), Some("done"));
    if let Ok(session) = Arc::try_unwrap(session) {
        session.close().await;
    }
}

#[tokio::test]
async fn a_stored_agent_runs_with_its_model_key_tools_mcp_servers_and_sub_agents() {
    use agent_runtime::resolve::{PrepareError, PreparedRun, RunRequest};
    let stack = integration_tests::TestStack::new().await;
    let clock = integration_tests::TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let model = ModelServer::start(vec![
        tool_calls_reply(&[
            ("c1", "Helper", json!({"message": "What is 2+3?"})),
            ("c2", "forecast", json!({"city": "Oslo"})),
        ]),
        text_reply("Five."),
        text_reply("Five, and sunny in Oslo."),
    ])
    .await;
    let mcp_server = start_mcp_server(Some(("authorization", "Bearer mcp-secret"))).await;

    let models = stack.client::<LanguageModelsService>(&clock).with_key(&key);
    let lm = models
        .post(
            "/language-models",
            json!({"name": "local", "provider": "openai_compatible",
        "model_name": "test-model", "base_url": model.base_url(), "api_key": "sk-lm",
        "default_parameters": {"temperature": 0}}),
        )
        .created()
        .await;
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let mcp = mcps
        .post(
            "/mcps",
            json!({"name": "weather", "url": mcp_server.url("/mcp"),
        "secret_headers": {"Authorization": "Bearer mcp-secret"}}),
        )
        .created()
        .await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let helper = agents
        .post(
            "/agents/",
            json!({"type": "config", "name": "Helper", "framework": "chainlib",
        "language_model_id": lm, "description": "Does arithmetic"}),
        )
        .created()
        .await;
    let main = agents
        .post(
            "/agents/",
            json!({"type": "config", "name": "Main", "framework": "chainlib",
        "language_model_id": lm, "instruction": "Delegate.", "agents": [helper], "mcps": [mcp],
        "agent_config": {"max_recursion_limit": 5}, "metadata": {"timeout": 45}}),
        )
        .created()
        .await;

    let runner: agent_runtime::lifecycle::RunLifecycle = stack.service(&clock);
    let sources = runner.sources();
    let store = stack.agents();
    let agent = store.get(account.into(), main.parse().unwrap()).await.unwrap().unwrap();
    let request = RunRequest { message: "Add 2 and 3, and check Oslo.".into(), ..RunRequest::default() };
    let prepared = sources.prepare(&agent, request, RunId::now_v7(), 0).await.unwrap();
    assert_eq!((prepared.run.max_turns, prepared.run.timeout), (5, Duration::from_secs(45)));
    let names: Vec<String> = prepared.run.tools.iter().map(|tool| tool.spec().name.clone()).collect();
    assert_eq!(names, ["Helper", "forecast", "alerts"]);
    let sessions = prepared.sessions;
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let outcome = execute(prepared.run, sender, std::future::pending()).await;
    PreparedRun::close(sessions).await;
    assert_eq!(outcome.result, Ok("Five, and sunny in Oslo.".to_owned()));
    // The run's usage counts its sub-agent's turn: (20, 8) + (10, 5) of its own, (10, 5) of Helper's.
    assert_eq!(outcome.spend.usage(), agent_runtime::events::Usage::tokens(40, 18));
    let mut results = Vec::new();
    while let Ok(event) = receiver.try_recv() {
        if let RunEvent::ToolResult { name, result, .. } = event {
            results.push((name, result));
        }
    }
    assert_eq!(
        results,
        [("Helper".to_owned(), Ok(json!("Five."))), ("forecast".to_owned(), Ok(json!("Sunny in Oslo")))]
    );
    // The key went to the model's own server; the sub-agent asked with its own message.
    assert!(model.authorizations.lock().unwrap().iter().all(|auth| auth == "Bearer sk-lm"));
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests[0]["temperature"], 0);
    assert_eq!(requests[1]["messages"][0], json!({"role": "user", "content": "What is 2+3?"}));

    // An agent whose model does not exist, or names none, cannot be prepared.
    let orphan = agents
        .post(
            "/agents/",
            json!({"type": "config", "name": "Orphan", "framework": "chainlib",
        "language_model_id": Uuid::new_v4().to_string()}),
        )
        .created()
        .await;
    let orphan = store.get(account.into(), orphan.parse().unwrap()).await.unwrap().unwrap();
    let refused = sources.prepare(&orphan, RunRequest::default(), RunId::now_v7(), 0).await;
    assert!(matches!(refused, Err(PrepareError::Agent(ref message)) if message.contains("does not exist")));
}

/// An agent of `account` named `name` on a language model served by `model`.
async fn stored_agent(
    stack: &integration_tests::TestStack,
    key: &str,
    account: Uuid,
    model: &ModelServer,
    name: &str,
) -> platform_data::agents::Agent {
    let clock = integration_tests::TestClock::new();
    let lm = stack.language_model(&clock, key, name, &model.base_url()).await;
    let agent = stack
        .client::<AgentsService>(&clock)
        .with_key(key)
        .post(
            "/agents/",
            json!({"type": "config", "name": name,
        "framework": "chainlib", "language_model_id": lm}),
        )
        .created()
        .await;
    let store = stack.agents();
    store.get(account.into(), agent.parse().unwrap()).await.unwrap().unwrap()
}

fn start(message: &str) -> agent_runtime::lifecycle::StartRun {
    agent_runtime::lifecycle::StartRun {
        origin: agent_runtime::runs::RunOrigin {
            run_type: agent_runtime::runs::RunType::Api,
            input: agent_runtime::runs::RunInput { message: message.into(), files: Vec::new() },
            schedule_id: None,
            session_id: None,
            parent: None,
        },
        request: agent_runtime::resolve::RunRequest { message: message.into(), ..Default::default() },
    }
}

#[tokio::test]
async fn a_run_is_recorded_from_its_first_event_and_its_stored_events_equal_the_stream() {
    use agent_runtime::lifecycle::RunLifecycle;
    use agent_runtime::runs::RunStatus;
    let stack = integration_tests::TestStack::new().await;
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let model = ModelServer::start(vec![text_reply("Hello there, friend."), text_reply("Second.")]).await;
    let agent = stored_agent(&stack, &key, account, &model, "Greeter").await;
    let runner: RunLifecycle = stack.service(&integration_tests::TestClock::system());
    let runs = runner.runs().clone();

    let mut handle = runner.start(agent.clone(), start("Hi")).await.unwrap();
    // Recorded as started before anything else happens.
    let started = runs.get(handle.run_id, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!(started.input.message, "Hi");
    let mut text = String::new();
    while let Some(frame) = handle.frames.recv().await {
        text.push_str(&frame);
    }
    let record = handle.finished.await.unwrap();
    assert_eq!(
        (record.status, record.output.as_deref(), record.steps),
        (RunStatus::Success, Some("Hello there, friend."), 1)
    );
    let stored = runs.get(handle.run_id, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!(stored, record);
    assert_eq!((stored.usage.input_tokens, stored.usage.output_tokens), (10, 5));

    // The stream as a client parses it equals the stored events, in order.
    let mut parsed = sse_stream::SseStream::new(Full::new(Bytes::from(text)));
    let mut frames = Vec::new();
    while let Some(frame) = parsed.next().await {
        frames.push(frame.unwrap());
    }
    let events = runs.events_after(handle.run_id, 0, 100).await.unwrap();
    assert_eq!(frames.len(), events.len());
    for (frame, (seq, event)) in frames.iter().zip(&events) {
        assert_eq!(frame.id.as_deref(), Some(seq.to_string().as_str()));
        assert_eq!(frame.event.as_deref(), Some(event.name()));
    }
    assert_eq!(events.first().map(|(_, e)| e.name()), Some("metadata"));
    assert_eq!(events.last().map(|(_, e)| e.name()), Some("done"));

    // A client that goes away at once does not stop the run: it ends and is recorded.
    let handle = runner.start(agent, start("Again")).await.unwrap();
    drop(handle.frames);
    let record = handle.finished.await.unwrap();
    assert_eq!(record.output.as_deref(), Some("Second."));
    let names: Vec<&str> =
        runs.events_after(record.run_id, 0, 100).await.unwrap().iter().map(|(_, e)| e.name()).collect();
    assert_eq!(names, ["metadata", "message", "done"]);
}

#[tokio::test]
async fn a_stored_model_s_idle_limit_lets_a_slow_stream_finish_and_ends_a_silent_one() {
    use agent_runtime::events::FailureReason;
    use agent_runtime::lifecycle::RunLifecycle;
    use agent_runtime::runs::RunStatus;
    let stack = integration_tests::TestStack::new().await;
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let mut silent = vec![(Duration::ZERO, chunk(json!({"content": "Thinking"})))];
    silent.push((Duration::from_secs(6), chunk(json!({"content": " done."}))));
    silent.extend(finish("stop", 1, 2).into_iter().map(|piece| (Duration::ZERO, piece)));
    // Real time: deltas 0.5 s apart for 3 s under a 2 s idle limit, then 6 s of silence.
    let model = ModelServer::start(vec![spaced_reply(6, Duration::from_millis(500)), ModelReply::Stream(silent)]).await;
    let clock = integration_tests::TestClock::new();
    let lm = stack
        .client::<LanguageModelsService>(&clock)
        .with_key(&key)
        .post(
            "/language-models",
            json!({"name": "slow", "provider": "openai_compatible", "model_name": "m", "base_url": model.base_url(),
            "stream_timeouts": {"idle_seconds": 2}}),
        )
        .created()
        .await;
    let agent = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .post("/agents/", json!({"type": "config", "name": "Slow", "framework": "chainlib", "language_model_id": lm}))
        .created()
        .await;
    let store = stack.agents();
    let agent = store.get(account.into(), agent.parse().unwrap()).await.unwrap().unwrap();
    let runner: RunLifecycle = stack.service(&integration_tests::TestClock::system());

    let handle = runner.start(agent.clone(), start("Take your time")).await.unwrap();
    let record = handle.finished.await.unwrap();
    assert_eq!((record.status, record.output.as_deref()), (RunStatus::Success, Some("d0 d1 d2 d3 d4 d5 ")));

    let handle = runner.start(agent, start("And again")).await.unwrap();
    let record = handle.finished.await.unwrap();
    assert_eq!(
        (record.status, record.failure_reason, record.error.as_deref()),
        (
            RunStatus::Failed,
            Some(FailureReason::ProviderError),
            Some("the provider's stream stopped: the stream was silent for 2 seconds (the idle limit)")
        )
    );
}

#[tokio::test]
async fn a_run_that_cannot_start_is_recorded_failed_with_a_stream_that_says_why() {
    use agent_runtime::events::FailureReason;
    use agent_runtime::lifecycle::RunLifecycle;
    use agent_runtime::runs::RunStatus;
    let stack = integration_tests::TestStack::new().await;
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let model =
        ModelServer::start(vec![ModelReply::Status { status: 401, headers: Vec::new(), body: "{}".into() }]).await;
    let agent = stored_agent(&stack, &key, account, &model, "Locked").await;
    let runner: RunLifecycle = stack.service(&integration_tests::TestClock::system());
    let mut handle = runner.start(agent, start("Hi")).await.unwrap();
    let mut frames = Vec::new();
    while let Some(frame) = handle.frames.recv().await {
        frames.push(frame);
    }
    let record = handle.finished.await.unwrap();
    assert_eq!((record.status, record.failure_reason), (RunStatus::Failed, Some(FailureReason::ProviderError)));
    assert_eq!(record.error.as_deref(), Some("the provider refused the API key (HTTP 401)"));
    assert!(frames.last().unwrap().starts_with("id: 2\nevent: error\n"), "{frames:?}");
}
