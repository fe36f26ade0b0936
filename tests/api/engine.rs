//! The execution engine end to end over real wire formats: a scripted Chat Completions server as
//! the model, a Python tool in the sandbox, an `http` tool on a local server, and the tools of a
//! real MCP server; the event stream checked with an independent SSE parser.

use agent_runtime::engine::{AgentRun, DEFAULT_MAX_TURNS, Tool, execute};
use agent_runtime::events::RunEvent;
use agent_runtime::providers::chat_completions::{ChatCompletions, KeyHeader};
use agent_runtime::tools::{from_stored, mcp::McpTool};
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use integration_tests::local_server::{Handler, LocalServer, respond};
use integration_tests::loopback_client;
use integration_tests::mcp_server::start_mcp_server;
use integration_tests::model_server::{ModelServer, text_reply, tool_calls_reply};
use platform_data::tools::{Tool as StoredTool, parse_tool};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

fn stored(body: Value) -> StoredTool {
    let now = chrono::Utc::now();
    StoredTool {
        id: Uuid::new_v4(),
        account_id: Uuid::new_v4(),
        spec: parse_tool(body.to_string().as_bytes()).unwrap(),
        created_at: now,
        updated_at: now,
        deleted_at: None,
        revision: 0,
    }
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
        from_stored(&add, None, &client).unwrap(),
        from_stored(&http, Some(&json!({"arguments": {"units": "metric"}})), &client).unwrap(),
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
    };
    let run = AgentRun {
        run_id: Uuid::new_v4(),
        agent_id: Uuid::new_v4(),
        instruction: Some("Use the tools.".into()),
        history: Vec::new(),
        message: "Add 2 and 3, look up tides, and check Oslo.".into(),
        provider: Arc::new(provider),
        tools,
        max_turns: DEFAULT_MAX_TURNS,
        planning: false,
        tool_output_sharing: false,
        timeout: Duration::from_secs(60),
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
