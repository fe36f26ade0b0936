//! A client for MCP servers over Streamable HTTP, on the official Rust SDK (`rmcp`).
//!
//! Every operation opens a session (initialize), does its work and closes it, all within the
//! target's timeout. Failures are `McpError`s whose text is fit for an API response: what went
//! wrong and where, never the secret headers.

use http::{HeaderName, HeaderValue};
use outbound::TenantClient;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use rmcp::transport::worker::WorkerQuitReason;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

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

/// Initializes a session and reports the server.
pub async fn probe(client: &TenantClient, target: &McpTarget) -> Result<ServerSummary, McpError> {
    within(target, async {
        let session = open(client, target).await?;
        let summary = summarize(&session);
        close(session).await;
        Ok(summary)
    })
    .await
}

/// Initializes a session and lists every tool (all pages).
pub async fn list_tools(client: &TenantClient, target: &McpTarget) -> Result<(ServerSummary, Vec<McpTool>), McpError> {
    within(target, async {
        let session = open(client, target).await?;
        let summary = summarize(&session);
        let tools = session.list_all_tools().await.map_err(|err| service_error(&err));
        close(session).await;
        Ok((summary, tools?.into_iter().map(tool).collect()))
    })
    .await
}

/// An open session with one server, kept for the calls of one run.
pub struct McpSession {
    session: RunningService<RoleClient, ClientConfig>,
    timeout: Duration,
}

/// Opens a session and lists the server's tools, within the target's timeout; the session
/// then serves `call_tool` until `close`.
pub async fn open_session(client: &TenantClient, target: &McpTarget) -> Result<(McpSession, Vec<McpTool>), McpError> {
    within(target, async {
        let session = open(client, target).await?;
        match session.list_all_tools().await {
            Ok(tools) => Ok((McpSession { session, timeout: target.timeout }, tools.into_iter().map(tool).collect())),
            Err(err) => {
                let err = service_error(&err);
                close(session).await;
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
        let params = rmcp::model::CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        let call = self.session.call_tool(params);
        let result = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| McpError::Timeout(self.timeout.as_secs()))?
            .map_err(|err| service_error(&err))?;
        let blocks: Vec<Value> = result.content.iter().filter_map(|block| serde_json::to_value(block).ok()).collect();
        let texts: Vec<&str> = blocks.iter().filter_map(|block| block.get("text").and_then(Value::as_str)).collect();
        let text = texts.join("\n");
        if result.is_error == Some(true) {
            return Err(McpError::ToolFailed(if text.is_empty() { "the tool failed".into() } else { text }));
        }
        Ok(match result.structured_content {
            Some(structured) => structured,
            None if texts.len() == blocks.len() => Value::String(text),
            None => Value::Array(blocks),
        })
    }

    /// Ends the session (HTTP DELETE to the server).
    pub async fn close(self) {
        close(self.session).await;
    }
}

async fn within<T>(target: &McpTarget, work: impl Future<Output = Result<T, McpError>>) -> Result<T, McpError> {
    tokio::time::timeout(target.timeout, work).await.unwrap_or(Err(McpError::Timeout(target.timeout.as_secs())))
}

async fn open(client: &TenantClient, target: &McpTarget) -> Result<RunningService<RoleClient, ClientConfig>, McpError> {
    let http = client.for_url(&target.url).map_err(|refused| McpError::Forbidden(refused.to_string()))?;
    let mut headers = HashMap::new();
    for (name, value) in &target.headers {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| McpError::InvalidHeader(name.clone()))?;
        let value = HeaderValue::from_str(value).map_err(|_| McpError::InvalidHeader(name.clone()))?;
        headers.insert(header, value);
    }
    let config = StreamableHttpClientTransportConfig::with_uri(target.url.as_str()).custom_headers(headers);
    let transport = StreamableHttpClientTransport::with_client(http.clone(), config);
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("meeting-agent-platform", env!("CARGO_PKG_VERSION")),
    );
    client.serve(transport).await.map_err(|err| initialize_error(&err))
}

async fn close(session: RunningService<RoleClient, ClientConfig>) {
    // Closing ends the server's session (HTTP DELETE); failing to is harmless to us.
    let _ = session.cancel().await;
}

fn summarize(session: &RunningService<RoleClient, ClientConfig>) -> ServerSummary {
    match session.peer_info() {
        Some(info) => ServerSummary {
            name: info.server_info.as_ref().map(|server| server.name.clone()),
            version: info.server_info.as_ref().map(|server| server.version.clone()),
            protocol_version: info.protocol_version.to_string(),
            instructions: info.instructions.clone(),
            capabilities: serde_json::to_value(&info.capabilities).unwrap_or(Value::Null),
        },
        None => ServerSummary {
            name: None,
            version: None,
            protocol_version: String::new(),
            instructions: None,
            capabilities: Value::Null,
        },
    }
}

fn tool(tool: rmcp::model::Tool) -> McpTool {
    McpTool {
        name: tool.name.into_owned(),
        title: tool.title,
        description: tool.description.map(|text| text.into_owned()),
        input_schema: Value::Object((*tool.input_schema).clone()),
        output_schema: tool.output_schema.map(|schema| Value::Object((*schema).clone())),
        annotations: tool.annotations.and_then(|annotations| serde_json::to_value(annotations).ok()),
    }
}

fn initialize_error(err: &rmcp::service::ClientInitializeError) -> McpError {
    use rmcp::service::ClientInitializeError as E;
    match err {
        E::JsonRpcError(data) => McpError::Refused(data.message.to_string()),
        E::TransportError { error, .. } => transport_error(error),
        E::ConnectionClosed(_) => McpError::NotMcp("the connection closed during initialize".into()),
        E::NoCompatibleProtocolVersion { .. } => McpError::NotMcp("no protocol version in common".into()),
        _ => McpError::NotMcp("its answer to initialize was not an MCP initialize result".into()),
    }
}

fn service_error(err: &rmcp::ServiceError) -> McpError {
    match err {
        rmcp::ServiceError::McpError(data) => McpError::Refused(data.message.to_string()),
        other => transport_error(other),
    }
}

/// Classifies a transport failure. The SDK wraps the HTTP client's error in its own types
/// without exposing it as a `source`, so the known wrappers are opened by downcasting.
fn transport_error(err: &(dyn std::error::Error + 'static)) -> McpError {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(error) = current {
        if let Some(WorkerQuitReason::Fatal { error, .. }) = error.downcast_ref::<WorkerQuitReason<HttpError>>() {
            return http_error(error);
        }
        if let Some(error) = error.downcast_ref::<HttpError>() {
            return http_error(error);
        }
        if let Some(error) = error.downcast_ref::<reqwest::Error>() {
            return McpError::Unreachable(outbound::describe(error));
        }
        current = error.source();
    }
    McpError::NotMcp(innermost(err))
}

type HttpError = StreamableHttpError<reqwest::Error>;

fn http_error(err: &HttpError) -> McpError {
    match err {
        StreamableHttpError::Client(error) => McpError::Unreachable(outbound::describe(error)),
        StreamableHttpError::HttpStatus(status) => {
            McpError::Unreachable(format!("the server answered HTTP {}", status.status))
        }
        StreamableHttpError::AuthRequired(_) => {
            McpError::Unreachable("the server requires authentication (HTTP 401)".into())
        }
        StreamableHttpError::InsufficientScope(_) => {
            McpError::Unreachable("the server refused the credentials (HTTP 403)".into())
        }
        StreamableHttpError::SessionExpired => McpError::NotMcp("it answered HTTP 404".into()),
        other => McpError::NotMcp(other.to_string()),
    }
}

/// The last error of a chain: the specific one, without the wrappers' type names.
fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    let mut last = err;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}
