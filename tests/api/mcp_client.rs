//! The MCP client (`mcp`) against scripted Streamable HTTP servers: what the real servers of
//! mcps.rs (the Rust SDK's) and interop.rs (the Python SDK's) do not show. Sessions, the
//! server's own requests in a stream, pagination, and every broken answer.

use http_body_util::BodyExt;
use integration_tests::local_server::{Handler, LocalServer, ResponseBody, respond};
use integration_tests::loopback_client;
use mcp::{McpError, McpTarget};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A request the scripted server received.
#[derive(Debug, Clone)]
struct Seen {
    http_method: String,
    session: Option<String>,
    protocol: Option<String>,
    message: Value,
}

impl Seen {
    fn method(&self) -> &str {
        self.message["method"].as_str().unwrap_or_default()
    }
}

type Script = dyn Fn(&Value) -> hyper::Response<ResponseBody> + Send + Sync;

/// A server answering each JSON-RPC message with `script`, recording what it received.
async fn scripted(script: impl Fn(&Value) -> hyper::Response<ResponseBody> + Send + Sync + 'static) -> Server {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script: Arc<Script> = Arc::new(script);
    let log = Arc::clone(&seen);
    let handler: Handler = Arc::new(move |request: hyper::Request<hyper::body::Incoming>| {
        let (log, script) = (Arc::clone(&log), Arc::clone(&script));
        Box::pin(async move {
            let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let (session, protocol) = (header("mcp-session-id"), header("mcp-protocol-version"));
            let http_method = request.method().to_string();
            let body = request.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default();
            let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            log.lock().unwrap().push(Seen {
                http_method: http_method.clone(),
                session,
                protocol,
                message: message.clone(),
            });
            if http_method == "DELETE" {
                return respond(200, "text/plain", "");
            }
            script(&message)
        })
    });
    Server { local: LocalServer::start(handler).await, seen }
}

struct Server {
    local: LocalServer,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn target(&self) -> McpTarget {
        McpTarget { url: self.local.url("/mcp"), headers: vec![], timeout: Duration::from_secs(5) }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn result(message: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": message["id"], "result": result})
}

fn json_answer(answer: Value) -> hyper::Response<ResponseBody> {
    respond(200, "application/json", answer.to_string())
}

/// An event stream of `messages`, one event each.
fn stream(messages: &[Value]) -> hyper::Response<ResponseBody> {
    let body: String = messages.iter().map(|message| format!("event: message\ndata: {message}\n\n")).collect();
    respond(200, "text/event-stream", body)
}

fn accepted() -> hyper::Response<ResponseBody> {
    respond(202, "text/plain", "")
}

fn initialized(message: &Value, version: &str) -> Value {
    result(
        message,
        json!({"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": {"name": "scripted", "version": "0.1"}}),
    )
}

fn forecast_tool() -> Value {
    json!({"name": "forecast", "description": "Tomorrow", "inputSchema": {"type": "object"}})
}

/// A server that answers initialize and the acknowledgements, and `rest` everything else.
async fn initializing(rest: impl Fn(&Value) -> hyper::Response<ResponseBody> + Send + Sync + 'static) -> Server {
    scripted(move |message| match message["method"].as_str() {
        Some("initialize") => json_answer(initialized(message, "2025-06-18")),
        _ if message.get("id").is_none() || message.get("method").is_none() => accepted(),
        _ => rest(message),
    })
    .await
}

#[tokio::test]
async fn a_session_carries_its_id_and_version_answers_pings_and_is_ended() {
    let server = scripted(|message| match message["method"].as_str() {
        Some("initialize") => {
            let mut response = json_answer(initialized(message, "2025-06-18"));
            response.headers_mut().insert("mcp-session-id", "session-1".parse().unwrap());
            response
        }
        Some("tools/list") => stream(&[
            json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}}),
            json!({"jsonrpc": "2.0", "id": "server-1", "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": "server-2", "method": "roots/list"}),
            result(message, json!({"tools": [forecast_tool()]})),
        ]),
        _ => accepted(),
    })
    .await;
    let (summary, tools) = mcp::list_tools(&loopback_client(), &server.target()).await.unwrap();
    assert_eq!((summary.name.as_deref(), summary.protocol_version.as_str()), (Some("scripted"), "2025-06-18"));
    assert_eq!(tools.iter().map(|tool| tool.name.as_str()).collect::<Vec<_>>(), ["forecast"]);

    let seen = server.seen();
    let initialize = &seen[0];
    assert_eq!((initialize.method(), initialize.session.as_deref()), ("initialize", None));
    assert_eq!(initialize.message["params"]["protocolVersion"], mcp::PROTOCOL_VERSION);
    assert_eq!(initialize.message["params"]["clientInfo"]["name"], "meeting-agent-platform");
    for later in &seen[1..] {
        assert_eq!(later.session.as_deref(), Some("session-1"), "{later:?}");
        assert_eq!(later.protocol.as_deref(), Some("2025-06-18"), "{later:?}");
    }
    assert_eq!(seen[1].method(), "notifications/initialized");
    assert_eq!(seen[2].method(), "tools/list");
    // The server's requests are answered: ping with an empty result, the rest "method not found".
    let answers: Vec<&Value> = seen
        .iter()
        .filter(|seen| seen.http_method == "POST" && seen.message.get("method").is_none())
        .map(|seen| &seen.message)
        .collect();
    assert_eq!(answers.len(), 2, "{seen:?}");
    assert_eq!(*answers[0], json!({"jsonrpc": "2.0", "id": "server-1", "result": {}}));
    assert_eq!((answers[1]["id"].as_str(), answers[1]["error"]["code"].as_i64()), (Some("server-2"), Some(-32601)));
    let last = seen.last().unwrap();
    assert_eq!((last.http_method.as_str(), last.session.as_deref()), ("DELETE", Some("session-1")));
}

#[tokio::test]
async fn a_server_without_sessions_is_never_sent_a_delete() {
    let server = initializing(|message| json_answer(result(message, json!({"tools": []})))).await;
    let (_, tools) = mcp::list_tools(&loopback_client(), &server.target()).await.unwrap();
    assert!(tools.is_empty());
    assert!(server.seen().iter().all(|seen| seen.http_method == "POST" && seen.session.is_none()));
}

#[tokio::test]
async fn tool_pages_are_followed_and_an_endless_cursor_is_cut() {
    let server = initializing(|message| {
        let page = match message["params"]["cursor"].as_str() {
            None => json!({"tools": [forecast_tool()], "nextCursor": "2"}),
            Some(_) => json!({"tools": [{"name": "alerts"}, {"title": "nameless"}]}),
        };
        json_answer(result(message, page))
    })
    .await;
    let (_, tools) = mcp::list_tools(&loopback_client(), &server.target()).await.unwrap();
    assert_eq!(tools.iter().map(|tool| tool.name.as_str()).collect::<Vec<_>>(), ["forecast", "alerts"]);
    assert_eq!(tools[1].input_schema, json!({"type": "object"}));

    let endless =
        initializing(|message| json_answer(result(message, json!({"tools": [], "nextCursor": "again"})))).await;
    let err = mcp::list_tools(&loopback_client(), &endless.target()).await.unwrap_err();
    assert_eq!(err, McpError::NotMcp(format!("its tool list goes on for more than {} pages", mcp::MAX_TOOL_PAGES)));
}

#[tokio::test]
async fn tool_calls_report_results_failures_and_refusals() {
    let server = initializing(|message| match message["method"].as_str() {
        Some("tools/list") => json_answer(result(message, json!({"tools": [forecast_tool()]}))),
        _ => match message["params"]["name"].as_str() {
            Some("forecast") => stream(&[result(
                message,
                json!({"content": [{"type": "text", "text": format!("Sunny in {}", message["params"]["arguments"]["city"])}]}),
            )]),
            Some("alerts") => {
                json_answer(result(message, json!({"content": [{"type": "text", "text": "down"}], "isError": true})))
            }
            // A batch, as servers of the first protocol version could answer.
            _ => json_answer(json!([
                {"jsonrpc": "2.0", "id": 999, "result": {}},
                {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": "Unknown tool"}},
            ])),
        },
    })
    .await;
    let (session, _) = mcp::open_session(&loopback_client(), &server.target()).await.unwrap();
    let arguments = |city: &str| json!({"city": city}).as_object().cloned().unwrap();
    assert_eq!(session.call_tool("forecast", arguments("Oslo")).await, Ok(json!("Sunny in \"Oslo\"")));
    assert_eq!(session.call_tool("alerts", arguments("Oslo")).await, Err(McpError::ToolFailed("down".into())));
    assert_eq!(session.call_tool("nope", arguments("Oslo")).await, Err(McpError::Refused("Unknown tool".into())));
    session.close().await;
    let call = server.seen().into_iter().find(|seen| seen.method() == "tools/call").unwrap();
    assert_eq!(call.message["params"], json!({"name": "forecast", "arguments": {"city": "Oslo"}}));
}

#[tokio::test]
async fn broken_answers_are_clear_errors() {
    let not_mcp = |text: &str| McpError::NotMcp(text.to_owned());
    let cases: Vec<(Box<Script>, McpError)> = vec![
        (Box::new(|_| stream(&[])), not_mcp("its event stream ended without an answer")),
        (
            Box::new(|_| stream(&[json!({"jsonrpc": "2.0", "id": 41, "result": {}})])),
            not_mcp("its event stream ended without an answer"),
        ),
        (
            Box::new(|_| respond(200, "text/event-stream", "data: {not json\n\n")),
            not_mcp("its answer is not a JSON-RPC response"),
        ),
        (
            Box::new(|_| json_answer(json!({"jsonrpc": "2.0", "id": 41, "result": {}}))),
            not_mcp("its answer is not a JSON-RPC response"),
        ),
        (
            Box::new(|_| respond(200, "text/plain", "hello")),
            not_mcp("it answered initialize with text/plain, not JSON-RPC"),
        ),
        (Box::new(|message| json_answer(initialized(message, "2099-01-01"))), not_mcp("no protocol version in common")),
        (
            Box::new(|message| json_answer(result(message, json!({"protocolVersion": "2025-06-18"})))),
            not_mcp("its answer to initialize was not an MCP initialize result"),
        ),
        (
            Box::new(|message| {
                json_answer(json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32600, "message": "Bad"}}))
            }),
            McpError::Refused("Bad".into()),
        ),
        (
            Box::new(|_| respond(401, "text/plain", "")),
            McpError::Unreachable("the server requires authentication (HTTP 401)".into()),
        ),
        (
            Box::new(|_| respond(403, "text/plain", "")),
            McpError::Unreachable("the server refused the credentials (HTTP 403)".into()),
        ),
        (Box::new(|_| respond(500, "text/plain", "")), McpError::Unreachable("the server answered HTTP 500".into())),
        (
            Box::new(|_| respond(200, "application/json", vec![b' '; mcp::MAX_MESSAGE_BYTES + 1])),
            McpError::Unreachable(format!("the answer is larger than {} bytes", mcp::MAX_MESSAGE_BYTES)),
        ),
        (
            Box::new(|_| {
                let data = "x".repeat(mcp::MAX_MESSAGE_BYTES + 1);
                respond(200, "text/event-stream", format!("data: {data}\n\n"))
            }),
            not_mcp(&format!("an event of the stream is larger than {} bytes", mcp::MAX_MESSAGE_BYTES)),
        ),
    ];
    for (script, expected) in cases {
        let server = scripted(script).await;
        assert_eq!(mcp::probe(&loopback_client(), &server.target()).await, Err(expected));
    }
}

#[tokio::test]
async fn a_session_the_server_forgot_is_a_404_not_mcp() {
    let server = scripted(|message| match message["method"].as_str() {
        Some("initialize") => {
            let mut response = json_answer(initialized(message, "2025-03-26"));
            response.headers_mut().insert("mcp-session-id", "gone".parse().unwrap());
            response
        }
        Some("tools/list") => respond(404, "text/plain", ""),
        _ => accepted(),
    })
    .await;
    let err = mcp::list_tools(&loopback_client(), &server.target()).await.unwrap_err();
    assert_eq!(err, McpError::NotMcp("it answered HTTP 404".into()));
}
