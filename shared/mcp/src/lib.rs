//! A client for MCP servers over Streamable HTTP: the four operations the platform needs
//! (`initialize`, `tools/list`, `tools/call`, ending the session), on the outbound client.
//!
//! Our own rather than the official Rust SDK (`rmcp`), which linked 1 MiB of code into four
//! functions for these calls (docs/performance.md); it stays in the tests as a server, beside
//! the MCP Python SDK's, and both check this client (tests/api/mcps.rs, tests/api/interop.rs).
//!
//! Every operation opens a session (initialize), does its work and closes it, all within the
//! target's timeout. Failures are `McpError`s whose text is fit for an API response: what went
//! wrong and where, never the secret headers.

mod transport;

use outbound::TenantClient;
use outbound::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Serialize;
use serde_json::{Value, json};
use std::time::Duration;
use transport::Connection;
pub use transport::MAX_MESSAGE_BYTES;

/// The protocol version asked for in `initialize` (the latest with an `initialize` handshake).
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// The versions a server may answer with: the ones whose messages this client speaks.
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The most pages of `tools/list` followed (a server repeating its cursor would loop forever).
pub const MAX_TOOL_PAGES: usize = 100;

/// Where an MCP server is and how to reach it.
#[derive(Debug, Clone)]
pub struct McpTarget {
    /// The server's Streamable HTTP endpoint (`https://…/mcp`).
    pub url: String,
    /// Sent with every request (plain and secret headers alike).
    pub headers: Vec<(String, String)>,
    /// The whole operation's limit: connect, initialize, work, close.
    pub timeout: Duration,
}

/// What a server says about itself in `initialize`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerSummary {
    pub name: Option<String>,
    pub version: Option<String>,
    pub protocol_version: String,
    pub instructions: Option<String>,
    /// The server's capabilities as it declared them (`tools`, `resources`, `prompts`, …).
    pub capabilities: Value,
}

/// A tool a server offers, as MCP describes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpTool {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub annotations: Option<Value>,
}

/// Why an MCP operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The configuration cannot be sent (a header name or value HTTP does not allow).
    #[error("invalid header {0}")]
    InvalidHeader(String),
    /// The server could not be reached, or answered HTTP errors.
    #[error("could not reach the MCP server: {0}")]
    Unreachable(String),
    /// The server answered, but not as an MCP server.
    #[error("the server did not answer as an MCP server: {0}")]
    NotMcp(String),
    /// The server refused an MCP request (a JSON-RPC error).
    #[error("the MCP server refused the request: {0}")]
    Refused(String),
    /// The server's address is one the platform does not call (see `outbound::guard`).
    #[error("{0}")]
    Forbidden(String),
    /// The tool ran and reported an error (`isError`).
    #[error("{0}")]
    ToolFailed(String),
    /// The whole operation took longer than the target's timeout.
    #[error("the MCP server did not answer within {0} seconds")]
    Timeout(u64),
}

impl McpError {
    /// A short, low-cardinality name of the failure (a span's `error.type`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::InvalidHeader(_) => "invalid_header",
            Self::Unreachable(_) => "unreachable",
            Self::NotMcp(_) => "not_mcp",
            Self::Refused(_) => "jsonrpc_error",
            Self::Forbidden(_) => "forbidden",
            Self::ToolFailed(_) => "tool_error",
            Self::Timeout(_) => "timeout",
        }
    }
}

/// Initializes a session and reports the server.
pub async fn probe(client: &TenantClient, target: &McpTarget) -> Result<ServerSummary, McpError> {
    within(target, async {
        let (connection, summary) = open(client, target).await?;
        connection.close().await;
        Ok(summary)
    })
    .await
}

/// Initializes a session and lists every tool (all pages).
pub async fn list_tools(client: &TenantClient, target: &McpTarget) -> Result<(ServerSummary, Vec<McpTool>), McpError> {
    within(target, async {
        let (connection, summary) = open(client, target).await?;
        let tools = all_tools(&connection).await;
        connection.close().await;
        Ok((summary, tools?))
    })
    .await
}

/// An open session with one server, kept for the calls of one run.
#[derive(Debug)]
pub struct McpSession {
    connection: Connection,
    timeout: Duration,
}

/// Opens a session and lists the server's tools, within the target's timeout; the session
/// then serves `call_tool` until `close`.
pub async fn open_session(client: &TenantClient, target: &McpTarget) -> Result<(McpSession, Vec<McpTool>), McpError> {
    within(target, async {
        let (connection, _) = open(client, target).await?;
        match all_tools(&connection).await {
            Ok(tools) => Ok((McpSession { connection, timeout: target.timeout }, tools)),
            Err(err) => {
                connection.close().await;
                Err(err)
            }
        }
    })
    .await
}

impl McpSession {
    /// Calls a tool. Its structured content when it has one, else its text content (or the
    /// content blocks as JSON); a tool reporting `isError` is `ToolFailed` with its text.
    pub async fn call_tool(&self, name: &str, arguments: serde_json::Map<String, Value>) -> Result<Value, McpError> {
        let call = self.connection.request("tools/call", json!({"name": name, "arguments": arguments}));
        let (result, _) =
            tokio::time::timeout(self.timeout, call).await.map_err(|_| McpError::Timeout(self.timeout.as_secs()))??;
        tool_outcome(result)
    }

    /// Ends the session (HTTP DELETE to the server), within the session's timeout.
    pub async fn close(self) {
        let _ = tokio::time::timeout(self.timeout, self.connection.close()).await;
    }
}

async fn within<T>(target: &McpTarget, work: impl Future<Output = Result<T, McpError>>) -> Result<T, McpError> {
    tokio::time::timeout(target.timeout, work).await.unwrap_or(Err(McpError::Timeout(target.timeout.as_secs())))
}

/// Connects and initializes a session: `initialize`, then `notifications/initialized`.
async fn open(client: &TenantClient, target: &McpTarget) -> Result<(Connection, ServerSummary), McpError> {
    let http = client.for_url(&target.url).map_err(|refused| McpError::Forbidden(refused.to_string()))?;
    let mut headers = HeaderMap::new();
    for (name, value) in &target.headers {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| McpError::InvalidHeader(name.clone()))?;
        let value = HeaderValue::from_str(value).map_err(|_| McpError::InvalidHeader(name.clone()))?;
        headers.insert(header, value);
    }
    let mut connection = Connection::new(http.clone(), target.url.clone(), headers);
    let initialize = json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "meeting-agent-platform", "version": env!("CARGO_PKG_VERSION")},
    });
    let (result, headers) = connection.request("initialize", initialize).await?;
    let summary = server_summary(&result)?;
    connection.join_session(headers.get("mcp-session-id").cloned(), &summary.protocol_version);
    if let Err(err) = connection.notify("notifications/initialized").await {
        connection.close().await;
        return Err(err);
    }
    Ok((connection, summary))
}

/// What `initialize`'s result says, if it is one in a protocol version this client speaks.
fn server_summary(result: &Value) -> Result<ServerSummary, McpError> {
    let not_initialize = || McpError::NotMcp("its answer to initialize was not an MCP initialize result".into());
    let version = result.get("protocolVersion").and_then(Value::as_str).ok_or_else(not_initialize)?;
    let capabilities = result.get("capabilities").filter(|value| value.is_object()).ok_or_else(not_initialize)?;
    if !SUPPORTED_PROTOCOL_VERSIONS.contains(&version) {
        return Err(McpError::NotMcp("no protocol version in common".into()));
    }
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
    let server = result.get("serverInfo");
    Ok(ServerSummary {
        name: text(server.and_then(|server| server.get("name"))),
        version: text(server.and_then(|server| server.get("version"))),
        protocol_version: version.to_owned(),
        instructions: text(result.get("instructions")),
        capabilities: capabilities.clone(),
    })
}

/// Every page of `tools/list`.
async fn all_tools(connection: &Connection) -> Result<Vec<McpTool>, McpError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_TOOL_PAGES {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let (mut page, _) = connection.request("tools/list", params).await?;
        let listed = page.get_mut("tools").map(Value::take);
        let Some(Value::Array(listed)) = listed else {
            return Err(McpError::NotMcp("its answer to tools/list has no list of tools".into()));
        };
        tools.extend(listed.into_iter().filter_map(tool));
        cursor = page.get("nextCursor").and_then(Value::as_str).map(str::to_owned);
        if cursor.is_none() {
            return Ok(tools);
        }
    }
    Err(McpError::NotMcp(format!("its tool list goes on for more than {MAX_TOOL_PAGES} pages")))
}

/// A listed tool; one without a name cannot be called and is left out, one without an input
/// schema takes no arguments.
fn tool(mut listed: Value) -> Option<McpTool> {
    let name = listed.get("name").and_then(Value::as_str)?.to_owned();
    let mut take = |field: &str| listed.get_mut(field).map(Value::take).filter(|value| !value.is_null());
    let text = |value: Option<Value>| value.and_then(|value| value.as_str().map(str::to_owned));
    Some(McpTool {
        title: text(take("title")),
        description: text(take("description")),
        input_schema: take("inputSchema").filter(Value::is_object).unwrap_or_else(|| json!({"type": "object"})),
        output_schema: take("outputSchema").filter(Value::is_object),
        annotations: take("annotations"),
        name,
    })
}

/// A `tools/call` result as the run sees it (see [`McpSession::call_tool`]).
fn tool_outcome(result: Value) -> Result<Value, McpError> {
    let blocks = result.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    let texts: Vec<&str> = blocks.iter().filter_map(|block| block.get("text").and_then(Value::as_str)).collect();
    let text = texts.join("\n");
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(McpError::ToolFailed(if text.is_empty() { "the tool failed".into() } else { text }));
    }
    Ok(match result.get("structuredContent").filter(|content| !content.is_null()) {
        Some(structured) => structured.clone(),
        None if texts.len() == blocks.len() => Value::String(text),
        None => Value::Array(blocks),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// JSON shaped like MCP results: their field names, any values.
    fn mcp_shaped() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            prop_oneof![Just("2025-06-18".to_owned()), Just("text".to_owned()), any::<String>()].prop_map(Value::from),
        ];
        let keys = proptest::sample::select(vec![
            "protocolVersion",
            "capabilities",
            "serverInfo",
            "name",
            "version",
            "instructions",
            "title",
            "description",
            "inputSchema",
            "outputSchema",
            "annotations",
            "content",
            "text",
            "type",
            "isError",
            "structuredContent",
            "tools",
            "nextCursor",
        ]);
        leaf.prop_recursive(4, 32, 4, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                proptest::collection::btree_map(keys.clone(), inner, 0..5)
                    .prop_map(|map| Value::Object(map.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever a server answers, reading it never panics and gives a documented answer: a
        /// summary in a supported version or `NotMcp`; a named tool with an object schema or
        /// nothing; a result or `ToolFailed`.
        #[test]
        fn any_answer_is_read_without_panicking(answer in mcp_shaped()) {
            match server_summary(&answer) {
                Ok(summary) => {
                    prop_assert!(SUPPORTED_PROTOCOL_VERSIONS.contains(&summary.protocol_version.as_str()));
                    prop_assert!(summary.capabilities.is_object());
                }
                Err(err) => prop_assert!(matches!(err, McpError::NotMcp(_))),
            }
            if let Some(tool) = tool(answer.clone()) {
                prop_assert!(tool.input_schema.is_object());
            }
            if let Err(err) = tool_outcome(answer) {
                prop_assert!(matches!(err, McpError::ToolFailed(_)));
            }
        }
    }

    #[test]
    fn an_initialize_result_in_a_known_version_is_summarized() {
        let result = json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "weather", "version": "1.2.3"},
            "instructions": "Ask about the weather.",
        });
        let summary = server_summary(&result).unwrap();
        assert_eq!(summary.name.as_deref(), Some("weather"));
        assert_eq!(summary.version.as_deref(), Some("1.2.3"));
        assert_eq!(summary.protocol_version, "2025-06-18");
        assert_eq!(summary.capabilities, json!({"tools": {"listChanged": true}}));
        let unknown = json!({"protocolVersion": "2099-01-01", "capabilities": {}});
        assert_eq!(server_summary(&unknown), Err(McpError::NotMcp("no protocol version in common".into())));
        for not_initialize in [json!({}), json!({"protocolVersion": "2025-06-18"}), json!([1]), json!("x")] {
            assert!(matches!(server_summary(&not_initialize), Err(McpError::NotMcp(_))), "{not_initialize}");
        }
    }

    #[test]
    fn listed_tools_need_a_name_and_default_to_no_arguments() {
        let full = json!({"name": "forecast", "title": "Forecast", "description": "Tomorrow",
            "inputSchema": {"type": "object", "required": ["city"]}, "outputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true}});
        let forecast = tool(full).unwrap();
        assert_eq!(forecast.name, "forecast");
        assert_eq!(forecast.title.as_deref(), Some("Forecast"));
        assert_eq!(forecast.input_schema["required"], json!(["city"]));
        assert_eq!(forecast.output_schema, Some(json!({"type": "object"})));
        assert_eq!(forecast.annotations, Some(json!({"readOnlyHint": true})));
        let bare = tool(json!({"name": "now", "inputSchema": "not a schema"})).unwrap();
        assert_eq!((bare.input_schema, bare.description, bare.output_schema), (json!({"type": "object"}), None, None));
        assert_eq!(tool(json!({"title": "no name"})), None);
        assert_eq!(tool(json!({"name": 7})), None);
    }

    #[test]
    fn tool_results_prefer_structured_content_then_text() {
        let text = json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(tool_outcome(text), Ok(json!("a\nb")));
        let structured = json!({"content": [{"type": "text", "text": "{}"}], "structuredContent": {"t": 21}});
        assert_eq!(tool_outcome(structured), Ok(json!({"t": 21})));
        let image = json!({"content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]});
        assert_eq!(tool_outcome(image), Ok(json!([{"type": "image", "data": "AA==", "mimeType": "image/png"}])));
        assert_eq!(tool_outcome(json!({})), Ok(json!("")));
        let failed = json!({"content": [{"type": "text", "text": "down"}], "isError": true});
        assert_eq!(tool_outcome(failed), Err(McpError::ToolFailed("down".into())));
        assert_eq!(tool_outcome(json!({"isError": true})), Err(McpError::ToolFailed("the tool failed".into())));
    }
}
