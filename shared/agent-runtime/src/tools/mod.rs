//! The tools an agent offers its model, one file per kind, each behind `engine::Tool`.
//!
//! An agent's `tool_configs[tool_id]` is merged into that tool's calls:
//! `{"arguments": {…}}` fixed arguments (they win over the model's), `{"headers": {…}}` extra
//! headers of `http` tools, `{"timeout_seconds": n}` the call's limit (default 30, at most 300).
//! Secret headers (the tool's own and its `tool_configs` entry's) are read from Secrets Manager
//! by `resolve`, only for the origin they were stored for, and handed to `from_stored`.

pub mod http;
pub mod mcp;
pub mod python;

use crate::engine::{Tool, ToolContext, ToolError};
use crate::providers::ToolSpec;
use crate::timeouts::positive_seconds;
use futures_util::future::BoxFuture;
use outbound::TenantClient;
use platform_data::ids::AccountId;
use platform_data::tools::{Tool as StoredTool, ToolType};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A call's default and largest time limit.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
pub const MAX_TOOL_TIMEOUT: Duration = Duration::from_secs(platform_data::agent_spec::MAX_TOOL_TIMEOUT_SECONDS);

/// What an agent's `tool_configs` entry adds to a tool's calls.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSettings {
    pub fixed_arguments: Map<String, Value>,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
}

impl ToolSettings {
    /// From a `tool_configs` entry (absent or malformed parts fall back to the defaults).
    pub fn from_config(entry: Option<&Value>) -> Self {
        let entry = entry.and_then(Value::as_object);
        let object = |key: &str| entry.and_then(|e| e.get(key)).and_then(Value::as_object).cloned().unwrap_or_default();
        let timeout = entry
            .and_then(|e| e.get("timeout_seconds"))
            .and_then(Value::as_f64)
            .and_then(|seconds| positive_seconds(seconds, MAX_TOOL_TIMEOUT))
            .unwrap_or(DEFAULT_TOOL_TIMEOUT);
        let headers = object("headers")
            .into_iter()
            .filter_map(|(name, value)| value.as_str().map(|value| (name, value.to_owned())))
            .collect();
        Self { fixed_arguments: object("arguments"), headers, timeout }
    }
}

/// A name the model APIs accept (`^[a-zA-Z0-9_-]{1,64}$`): other characters become `_`.
pub fn model_tool_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(64)
        .collect();
    if cleaned.is_empty() { "tool".into() } else { cleaned }
}

/// The callable form of a stored `custom` or `http` tool: `custom` tools run in `sandbox`,
/// `http` tools call out through `client` with `secret_headers` added to their headers. `mcp`
/// and `native` tools are offered through their MCP configurations and the platform, not as
/// records.
pub fn from_stored(
    tool: &StoredTool,
    entry: Option<&Value>,
    secret_headers: BTreeMap<String, String>,
    client: &TenantClient,
    sandbox: &python::ToolSandbox,
) -> Result<Arc<dyn Tool>, String> {
    let spec = ToolSpec {
        name: model_tool_name(&tool.spec.name),
        description: tool.spec.description.clone().unwrap_or_default(),
        parameters: Value::Object(tool.spec.input_schema.clone()),
    };
    let mut settings = ToolSettings::from_config(entry);
    settings.headers.extend(secret_headers);
    match tool.spec.tool_type {
        ToolType::Custom => {
            let script = tool.spec.script.clone().ok_or("the custom tool has no script")?;
            let allow_network = tool.spec.config.get("allow_network").and_then(Value::as_bool).unwrap_or(false);
            let (account, sandbox) = (tool.account_id, sandbox.clone());
            Ok(Arc::new(PythonTool { spec, script, settings, allow_network, account, sandbox }))
        }
        ToolType::Http => Ok(Arc::new(http::HttpTool::new(spec, &tool.spec.config, settings, client.clone())?)),
        other => Err(format!("{} tools are not callable as records", other.as_str())),
    }
}

/// A custom Python tool.
pub struct PythonTool {
    spec: ToolSpec,
    script: String,
    settings: ToolSettings,
    allow_network: bool,
    /// The tool's account: its calls run in the account's sandbox environments and places.
    account: AccountId,
    sandbox: python::ToolSandbox,
}

impl Tool for PythonTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn kind(&self) -> &'static str {
        "python"
    }

    fn call<'a>(
        &'a self,
        arguments: Map<String, Value>,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let mut arguments = arguments;
            arguments.extend(self.settings.fixed_arguments.clone());
            let shared = (!context.shared_outputs.is_empty()).then(|| {
                Value::Array(
                    context
                        .shared_outputs
                        .iter()
                        .map(
                            |shared| json!({ "call_id": shared.call_id, "name": shared.name, "output": shared.output }),
                        )
                        .collect(),
                )
            });
            let limits = python::SandboxLimits {
                wall_time: self.settings.timeout,
                allow_network: self.allow_network,
                ..python::SandboxLimits::default()
            };
            self.sandbox.run(self.account, &self.script, &arguments, shared, limits).await.map_err(ToolError::Failed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_configs_entries_become_settings() {
        let settings = ToolSettings::from_config(Some(&json!({"arguments": {"units": "metric"},
            "headers": {"X-Team": "a", "bad": 1}, "timeout_seconds": 5})));
        assert_eq!(settings.fixed_arguments["units"], "metric");
        assert_eq!(settings.headers, [("X-Team".to_owned(), "a".to_owned())]);
        assert_eq!(settings.timeout, Duration::from_secs(5));
        assert_eq!(ToolSettings::from_config(Some(&json!({"timeout_seconds": 9999}))).timeout, MAX_TOOL_TIMEOUT);
        assert_eq!(ToolSettings::from_config(Some(&json!("junk"))).timeout, DEFAULT_TOOL_TIMEOUT);
        // Stored before validation: a huge number is the maximum (it panicked the run), others the default.
        assert_eq!(ToolSettings::from_config(Some(&json!({"timeout_seconds": 1e20}))).timeout, MAX_TOOL_TIMEOUT);
        for junk in [json!(-1), json!(0), json!("5"), json!(null)] {
            assert_eq!(
                ToolSettings::from_config(Some(&json!({"timeout_seconds": junk}))).timeout,
                DEFAULT_TOOL_TIMEOUT
            );
        }
        assert_eq!(ToolSettings::from_config(None).fixed_arguments.len(), 0);
    }

    #[test]
    fn names_are_made_acceptable_to_model_apis() {
        assert_eq!(model_tool_name("get weather (v2)"), "get_weather__v2_");
        assert_eq!(model_tool_name(""), "tool");
        assert_eq!(model_tool_name(&"x".repeat(100)).len(), 64);
    }
}
