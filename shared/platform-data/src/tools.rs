//! Tools agents can call, stored as account-scoped, uniquely named records in `ToolsTable`.
//!
//! | field | type | rule |
//! |---|---|---|
//! | `name` | string | required, at most 255 characters, unique per account |
//! | `description` | string | optional |
//! | `type` | `custom`, `http`, `mcp` (`native` only in records stored before it was refused) | required |
//! | `input_schema` | object | JSON Schema of the arguments; default `{"type": "object", "properties": {}}` |
//! | `script` | string | `custom` only, and required there: a valid Python script (see `python_script`; compiled by the tool sandbox) |
//! | `config` | object | type-specific settings (an `http` tool's URL and method; an `mcp` tool's `mcp_id` and `tool_name`, required) |
//! | `metadata` | object | application-defined |
//!
//! An `http` tool's `config.headers` are sent as they are; its `config.secret_headers`, and the
//! credential headers of `config.headers` (`secret_headers::CREDENTIAL_HEADERS`), are write-only
//! secret headers bound to the origin of `config.url`, kept in Secrets Manager (`ToolSecrets`);
//! the record keeps their names in `config.secret_header_names`.

use crate::ids::{AgentId, McpConfigId, ToolId};
use crate::python_script::precheck;
use crate::records::{Record, RecordBody, RecordStore};
use crate::secret_headers::{SecretHeadersChange, read_tool_headers};
use crate::secret_origin::origin_of;
use crate::secrets::RecordSecrets;
use crate::validation::{Expected, ProblemKind, Problems, check_http_url, check_shape};
use aws_sdk_secretsmanager::Client as SecretsClient;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Kinds of tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolType {
    Custom,
    Http,
    Mcp,
    Native,
}

impl ToolType {
    /// The type's name in requests and responses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Custom => "custom",
            Self::Http => "http",
            Self::Mcp => "mcp",
            Self::Native => "native",
        }
    }

    /// The type a name denotes.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Custom, Self::Http, Self::Mcp, Self::Native].into_iter().find(|t| t.as_str() == name)
    }
}

/// A valid tool body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: Option<String>,
    #[serde(rename = "type")]
    pub tool_type: ToolType,
    pub input_schema: Map<String, Value>,
    pub script: Option<String>,
    pub config: Map<String, Value>,
    pub metadata: Map<String, Value>,
}

impl RecordBody for ToolSpec {
    const KIND: &'static str = "TOOL";
    type Id = crate::ids::ToolId;

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }
}

/// The binding of a `custom` tool's secret arguments: its script in the tool sandbox.
pub const CUSTOM_TOOL_ARGUMENT_ORIGIN: &str = "tool-sandbox:";

impl ToolSpec {
    /// The origin an `http` tool's secret headers are sent to (its `config.url`'s); they are
    /// stored bound to it. Empty for a tool without a URL.
    pub fn secret_origin(&self) -> String {
        self.config.get("url").and_then(Value::as_str).and_then(origin_of).unwrap_or_default()
    }

    /// Where an agent's secret arguments for this tool are bound (`tool_configs.*.secret_arguments`,
    /// `secret_origin`): an `http` tool's URL origin (the arguments go there), a `custom` tool's
    /// sandbox (they go only to its script); `None` for tools that take none.
    pub fn secret_argument_origin(&self) -> Option<String> {
        match self.tool_type {
            ToolType::Http => Some(self.secret_origin()).filter(|origin| !origin.is_empty()),
            ToolType::Custom => Some(CUSTOM_TOOL_ARGUMENT_ORIGIN.to_owned()),
            _ => None,
        }
    }

    /// An `mcp` tool's `config` (`None` for other kinds), or why the stored one is unusable.
    pub fn mcp_tool(&self) -> Option<Result<McpToolConfig, String>> {
        (self.tool_type == ToolType::Mcp)
            .then(|| McpToolConfig::read(Some(&self.config)).map_err(|(field, issue)| format!("{field} {issue}")))
    }

    /// Names of the tool's secret headers (`config.secret_header_names`).
    pub fn secret_header_names(&self) -> Vec<String> {
        let names = self.config.get("secret_header_names").and_then(Value::as_array);
        names.into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
    }

    /// Records the names of the tool's secret headers (for `http` tools, whose responses list them).
    pub fn set_secret_header_names(&mut self, names: Vec<String>) {
        if self.tool_type == ToolType::Http {
            self.config.insert("secret_header_names".into(), json!(names));
        }
    }
}

/// Why a `native` tool cannot be written: the platform has no built-in tools behind the type.
pub const NATIVE_REFUSED: &str = "native tools have no built-in tools behind them; use custom, http or mcp";

/// An `mcp` tool's `config`: one tool of one of the account's MCP configurations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpToolConfig {
    /// The MCP configuration whose server has the tool.
    pub mcp_id: McpConfigId,
    /// The tool's name on that server.
    pub tool_name: String,
}

impl McpToolConfig {
    /// Reads `config`; on a problem, the field it names and what is wrong.
    fn read(config: Option<&Map<String, Value>>) -> Result<Self, (&'static str, &'static str)> {
        let field = |name: &str| config.and_then(|config| config.get(name)).filter(|value| !value.is_null());
        let mcp_id = match field("mcp_id").map(Value::as_str) {
            None => return Err(("config.mcp_id", "is required for mcp tools")),
            Some(None) => return Err(("config.mcp_id", "must be a string")),
            Some(Some(raw)) => raw.parse::<McpConfigId>().map_err(|_| ("config.mcp_id", "must be a UUID"))?,
        };
        let tool_name = match field("tool_name").map(Value::as_str) {
            None => return Err(("config.tool_name", "is required for mcp tools")),
            Some(None) => return Err(("config.tool_name", "must be a string")),
            Some(Some(name)) if name.trim().is_empty() => return Err(("config.tool_name", "must not be empty")),
            Some(Some(name)) => name.to_owned(),
        };
        Ok(Self { mcp_id, tool_name })
    }
}

/// Takes the secret headers out of a valid tool body: an `http` tool's `config.headers` keep
/// only the plain ones (lower-cased), `config.secret_headers` leaves the record, and what the
/// body says about secret headers is returned. Other kinds send no headers: their secret
/// headers are removed.
pub fn take_secret_headers(spec: &mut ToolSpec) -> Result<SecretHeadersChange, Problems> {
    if spec.tool_type != ToolType::Http {
        if spec.config.get("secret_headers").is_some_and(|value| !value.is_null()) {
            return Err(Problems::single(
                ProblemKind::Validation,
                "config.secret_headers",
                "only http tools send headers",
            ));
        }
        return Ok(SecretHeadersChange::Remove);
    }
    let read = read_tool_headers(&spec.config, "config.")?;
    if let SecretHeadersChange::Set(secret) = &read.secret
        && !secret.is_empty()
    {
        let url = spec.config.get("url").and_then(Value::as_str).unwrap_or_default();
        if let Err(issue) = check_http_url(url) {
            return Err(Problems::single(
                ProblemKind::Validation,
                "config.url",
                &format!("{issue} (secret headers are sent only to it)"),
            ));
        }
    }
    spec.config.remove("secret_headers");
    spec.config.remove("secret_header_names");
    if spec.config.contains_key("headers") || !read.headers.is_empty() {
        spec.config.insert("headers".into(), json!(read.headers));
    }
    Ok(read.secret)
}

/// Where secret headers of tools are kept: an `http` tool's at `{prefix}{account_id}/{tool_id}`,
/// an agent's `tool_configs` ones (all its tools in one secret) at
/// `{prefix}agents/{account_id}/{agent_id}`; flowtool agents' flow server keys (one per account
/// and origin) at `{prefix}flow-servers/{account_id}/{origin id}`.
#[derive(Clone)]
pub struct ToolSecrets {
    pub tools: RecordSecrets<ToolId>,
    pub agents: RecordSecrets<AgentId>,
    pub flow_server_keys: crate::flow_server_keys::FlowServerKeys,
}

impl ToolSecrets {
    /// The secrets under `prefix` (`TOOL_SECRET_PREFIX`).
    pub fn new(client: impl Into<aws_env::Lazy<SecretsClient>>, prefix: &str) -> Self {
        let client = client.into();
        Self {
            tools: RecordSecrets::new(client.clone(), prefix, "http tool secret headers (write-only through the API)"),
            agents: RecordSecrets::new(
                client.clone(),
                format!("{prefix}agents/"),
                "Secret headers of an agent's tool_configs (write-only through the API)",
            ),
            flow_server_keys: crate::flow_server_keys::FlowServerKeys::new(client, format!("{prefix}flow-servers/")),
        }
    }
}

/// A stored tool.
pub type Tool = Record<ToolSpec>;

/// Storage of tools.
pub type ToolStore = RecordStore<ToolSpec>;

/// Parses and validates a tool body (POST, PUT, and the metadata part of an upload).
pub fn parse_tool(body: &[u8]) -> Result<ToolSpec, Problems> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| Problems::single(ProblemKind::BadRequest, "body", &format!("malformed JSON: {err}")))?;
    let Value::Object(body) = value else {
        return Err(Problems::single(ProblemKind::BadRequest, "body", "must be a JSON object"));
    };
    validate_tool(&body)
}

/// Validates a tool body already known to be a JSON object.
pub fn validate_tool(body: &Map<String, Value>) -> Result<ToolSpec, Problems> {
    let present = |name: &str| body.get(name).filter(|v| !v.is_null());
    let mut rules = check_shape(
        body,
        &[
            ("name", Expected::String),
            ("description", Expected::String),
            ("type", Expected::String),
            ("script", Expected::Text(crate::python_script::MAX_SCRIPT_BYTES)),
            ("input_schema", Expected::Object),
            ("config", Expected::Object),
            ("metadata", Expected::Object),
        ],
    )?;

    let text = |name: &str| present(name).and_then(Value::as_str).map(str::to_owned);
    let object = |name: &str| present(name).and_then(Value::as_object).cloned();
    let name = text("name").unwrap_or_default();
    if present("name").is_none() {
        rules.fail("name", "is required");
    } else if name.trim().is_empty() {
        rules.fail("name", "must not be empty");
    } else if name.chars().count() > 255 {
        rules.fail("name", "must be at most 255 characters");
    }
    let tool_type = match text("type") {
        None => {
            rules.fail("type", "is required");
            None
        }
        Some(raw) => {
            let parsed = ToolType::parse(&raw);
            if parsed.is_none() {
                rules.fail("type", "must be one of custom, http, mcp, native");
            }
            parsed
        }
    };
    let input_schema = object("input_schema")
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}).as_object().cloned().unwrap_or_default());
    if input_schema.get("type").is_some_and(|t| !t.is_string()) {
        rules.fail("input_schema.type", "must be a string");
    }
    let script = text("script");
    match (tool_type, &script) {
        (Some(ToolType::Custom), None) => rules.fail("script", "is required for custom tools"),
        (Some(ToolType::Custom), Some(source)) => {
            // Compiling is the tool sandbox's (the tools service checks the script next).
            if let Err(problem) = precheck(source) {
                rules.fail("script", &problem.describe());
            }
        }
        (Some(_), Some(_)) => rules.fail("script", "only custom tools have a script"),
        _ => {}
    }
    match tool_type {
        Some(ToolType::Native) => rules.fail("type", NATIVE_REFUSED),
        Some(ToolType::Mcp) => {
            let config = present("config").and_then(Value::as_object);
            if let Err((field, issue)) = McpToolConfig::read(config) {
                rules.fail(field, issue);
            }
        }
        _ => {}
    }
    if !rules.problems.is_empty() {
        return Err(Problems { kind: ProblemKind::Validation, fields: rules.problems });
    }
    let Some(tool_type) = tool_type else {
        return Err(Problems::single(ProblemKind::Validation, "type", "is required"));
    };
    Ok(ToolSpec {
        name,
        description: text("description"),
        tool_type,
        input_schema,
        script,
        config: object("config").unwrap_or_default(),
        metadata: object("metadata").unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> Result<ToolSpec, Problems> {
        parse_tool(body.to_string().as_bytes())
    }

    #[test]
    fn custom_tools_need_a_valid_script_and_others_none() {
        let tool =
            parse(json!({"name": "weather", "type": "custom", "script": "def run(city):\n    return city\n"})).unwrap();
        assert_eq!(tool.input_schema, json!({"type": "object", "properties": {}}).as_object().cloned().unwrap());
        assert_eq!(
            parse(json!({"name": "w", "type": "custom"})).unwrap_err().fields["script"],
            "is required for custom tools"
        );
        let blank = parse(json!({"name": "w", "type": "custom", "script": " \n"})).unwrap_err();
        assert_eq!(blank.fields["script"], "the script is empty");
        // Syntax is the sandbox's Python's to judge (ToolSandbox::check_script).
        assert!(parse(json!({"name": "w", "type": "custom", "script": "def run(:\n  pass\n"})).is_ok());
        assert_eq!(
            parse(json!({"name": "h", "type": "http", "script": "x"})).unwrap_err().fields["script"],
            "only custom tools have a script"
        );
        assert!(parse(json!({"name": "h", "type": "http", "config": {"url": "https://x.test"}})).is_ok());
    }

    #[test]
    fn native_tools_are_refused_and_mcp_tools_name_a_configuration_and_a_tool() {
        let native = parse(json!({"name": "n", "type": "native"})).unwrap_err();
        assert_eq!((native.kind, native.fields["type"].as_str()), (ProblemKind::Validation, NATIVE_REFUSED));
        let id = "5b3c1d2e-8f9a-4b1c-9d2e-3f4a5b6c7d8e";
        let tool = parse(json!({"name": "m", "type": "mcp", "config": {"mcp_id": id, "tool_name": "search"}})).unwrap();
        let config = tool.mcp_tool().unwrap().unwrap();
        assert_eq!((config.mcp_id.to_string(), config.tool_name.as_str()), (id.to_owned(), "search"));
        for (config, field, issue) in [
            (json!({}), "config.mcp_id", "is required for mcp tools"),
            (json!({"mcp_id": 3, "tool_name": "s"}), "config.mcp_id", "must be a string"),
            (json!({"mcp_id": "nope", "tool_name": "s"}), "config.mcp_id", "must be a UUID"),
            (json!({"mcp_id": id}), "config.tool_name", "is required for mcp tools"),
            (json!({"mcp_id": id, "tool_name": " "}), "config.tool_name", "must not be empty"),
            (json!({"mcp_id": id, "tool_name": false}), "config.tool_name", "must be a string"),
        ] {
            let problems = parse(json!({"name": "m", "type": "mcp", "config": config})).unwrap_err();
            assert_eq!(problems.fields[field], issue, "{config}");
        }
        // A stored one that was never checked says why it cannot run.
        let mut stored = parse(json!({"name": "h", "type": "http"})).unwrap();
        assert!(stored.mcp_tool().is_none());
        stored.tool_type = ToolType::Mcp;
        assert_eq!(stored.mcp_tool().unwrap().unwrap_err(), "config.mcp_id is required for mcp tools");
    }

    #[test]
    fn wrong_types_are_400_and_rule_violations_422() {
        let problems = parse(json!({"name": "n", "type": "http", "input_schema": "x"})).unwrap_err();
        assert_eq!(problems.kind, ProblemKind::BadRequest);
        let problems = parse(json!({"type": "robot", "input_schema": {"type": 3}, "extra": true})).unwrap_err();
        assert_eq!(problems.kind, ProblemKind::Validation);
        assert_eq!(problems.fields.keys().collect::<Vec<_>>(), ["extra", "input_schema.type", "name", "type"]);
    }
}
