//! A real MCP server over Streamable HTTP (the official SDK's server side), offering two
//! weather tools, optionally requiring a header.

use crate::local_server::{Handler, LocalServer, ResponseBody, respond};
use http_body_util::BodyExt;
use rmcp::ErrorData;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use std::sync::Arc;

/// Name and version the server reports in `initialize`.
pub const SERVER_NAME: &str = "weather-test-server";
pub const SERVER_VERSION: &str = "1.2.3";

#[derive(Clone)]
struct WeatherServer;

impl ServerHandler for WeatherServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, SERVER_VERSION))
            .with_instructions("Ask about the weather.")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let city = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let city = Arc::new(city.as_object().cloned().unwrap_or_default());
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("forecast", "Tomorrow's forecast for a city", Arc::clone(&city)),
            Tool::new("alerts", "Weather alerts for a city", city),
        ]))
    }

    /// `forecast` answers `Sunny in {city}`; `alerts` always reports an error (`isError`).
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let city = request.arguments.as_ref().and_then(|a| a.get("city")).and_then(|c| c.as_str()).unwrap_or("nowhere");
        let result = match request.name.as_ref() {
            "forecast" => CallToolResult::success(vec![ContentBlock::text(format!("Sunny in {city}"))]),
            _ => CallToolResult::error(vec![ContentBlock::text("alerts service down")]),
        };
        Ok(result.into())
    }
}

/// Starts the server at `/mcp`. With `required_header` (name, value), requests without that
/// exact header are answered 401, as a server behind an API gateway would.
pub async fn start_mcp_server(required_header: Option<(&'static str, &'static str)>) -> LocalServer {
    serve(required_header, None).await
}

/// A request the server received: its `traceparent` header ("" for none) and its JSON-RPC body.
pub type McpRequest = (String, serde_json::Value);

/// The server, keeping every request it receives.
pub async fn start_recording_mcp_server() -> (LocalServer, Arc<std::sync::Mutex<Vec<McpRequest>>>) {
    let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
    (serve(None, Some(Arc::clone(&requests))).await, requests)
}

async fn serve(
    required_header: Option<(&'static str, &'static str)>,
    record: Option<Arc<std::sync::Mutex<Vec<McpRequest>>>>,
) -> LocalServer {
    let service = Arc::new(StreamableHttpService::new(
        || Ok(WeatherServer),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    ));
    let handler: Handler = Arc::new(move |request| {
        let (service, record) = (Arc::clone(&service), record.clone());
        Box::pin(async move {
            if let Some((name, value)) = required_header
                && request.headers().get(name).and_then(|v| v.to_str().ok()) != Some(value)
            {
                return respond(401, "text/plain", "missing credentials");
            }
            if request.uri().path() != "/mcp" {
                return respond(404, "text/plain", "not found");
            }
            let (parts, body) = request.into_parts();
            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            if let Some(record) = &record {
                let traceparent = parts.headers.get("traceparent").and_then(|v| v.to_str().ok()).unwrap_or("");
                let message = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                record.lock().unwrap().push((traceparent.to_owned(), message));
            }
            let request = hyper::Request::from_parts(parts, http_body_util::Full::new(body));
            let response = service.handle(request).await;
            let (parts, body) = response.into_parts();
            hyper::Response::from_parts(parts, body.boxed() as ResponseBody)
        })
    });
    LocalServer::start(handler).await
}
