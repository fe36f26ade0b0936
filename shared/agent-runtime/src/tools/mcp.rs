//! Tools of an agent's MCP configurations: one session per server per run (tools listed once
//! when it opens), each call a `tools/call` on it with the configuration's headers.

use crate::engine::{Tool, ToolContext, ToolError};
use crate::providers::ToolSpec;
use futures_util::future::BoxFuture;
use mcp::{McpSession, McpTool as ServerTool};
use serde_json::{Map, Value};
use std::sync::Arc;

/// One tool of an MCP server, as offered to the model.
pub struct McpTool {
    spec: ToolSpec,
    /// The tool's name on its server (the model may know it by `{configuration}__{tool}`).
    remote_name: String,
    session: Arc<McpSession>,
}

impl McpTool {
    /// `tool` of the server behind `session`, offered to the model as `exposed_name`.
    pub fn new(session: Arc<McpSession>, tool: &ServerTool, exposed_name: String) -> Self {
        let spec = ToolSpec {
            name: exposed_name,
            description: tool.description.clone().unwrap_or_default(),
            parameters: tool.input_schema.clone(),
        };
        Self { spec, remote_name: tool.name.clone(), session }
    }

    /// Offered with `description` (an `mcp` tool record's own) where there is one, else the
    /// server's.
    pub fn described(mut self, description: Option<&str>) -> Self {
        if let Some(description) = description.filter(|text| !text.trim().is_empty()) {
            self.spec.description = description.to_owned();
        }
        self
    }
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn kind(&self) -> &'static str {
        "mcp"
    }

    fn call<'a>(
        &'a self,
        arguments: Map<String, Value>,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            self.session.call_tool(&self.remote_name, arguments).await.map_err(|err| ToolError::Failed(err.to_string()))
        })
    }
}
