//! `/tools`: list, create, get, replace, soft delete, restore, and the script routes: upload a
//! Python file as a new custom tool, replace a custom tool's script by upload, read the script.
//!
//! Calls after the gate: list = 1 Query; get, script = 1 GetItem; create, upload = 1
//! TransactWriteItems; replace, re-upload = 1 GetItem + 1 TransactWriteItems (an `mcp` tool's
//! create or replace +1 GetItem of the MCP configuration it names); delete, restore =
//! 1 conditional UpdateItem. A custom tool's script is compiled by the tool sandbox before it is
//! stored: one Lambda invoke in AWS (a `python3` process locally).
//!
//! An `http` tool's secret headers are write-only, as MCP configurations' are: kept in Secrets
//! Manager bound to the origin of `config.url` (Create/PutSecretValue on create and replace,
//! DeleteSecret when removed), never returned; responses list `config.secret_header_names`.

use crate::envelope::{ApiError, ErrorCode, PageRequest, path_id, success};
use crate::gate::{Access, Gate};
use crate::records::active_record;
use crate::settings;
use agent_runtime::tools::python::ToolSandbox;
use aws_env::settings::{Lookup, SettingError, required};
use http::header::CONTENT_TYPE;
use http::{Method, StatusCode};
use http_api::multipart::{Part, parse_multipart};
use http_api::routing::segments_under;
use http_api::{Body, HttpFunction, Params, Request, Response, ResponseFuture};
use platform_data::api_keys::Caller;
use platform_data::ids::{AccountId, ToolId};
use platform_data::mcp_configs::McpConfigStore;
use platform_data::python_script::ENTRY_POINT;
use platform_data::secret_headers::{SecretHeadersChange, encode_secret_headers};
use platform_data::secrets::RecordSecrets;
use platform_data::tools::{
    Tool, ToolSecrets, ToolSpec, ToolStore, ToolType, parse_tool, take_secret_headers, validate_tool,
};
use serde_json::{Map, Value, json};

/// The largest body the tools function takes: a script of `MAX_SCRIPT_BYTES` may double when
/// JSON escapes it, plus the other fields (or the multipart framing of an upload).
pub const MAX_BODY_BYTES: usize = 640 * 1024;

/// 503 for a script the tool sandbox could not check (logged with the reason).
pub fn script_unchecked(reason: &str) -> ApiError {
    tracing::warn!(reason, "a script could not be checked");
    ApiError::new(ErrorCode::ServiceUnavailable, "The script could not be checked now; try again.")
}

/// The tools function.
pub struct ToolsService {
    gate: Gate,
    tools: ToolStore,
    /// Checks custom tools' scripts with the Python that runs them.
    sandbox: ToolSandbox,
    /// `http` tools' secret headers.
    secrets: RecordSecrets<ToolId>,
    /// The MCP configurations `mcp` tools name.
    mcps: McpConfigStore,
}

impl ToolsService {
    /// A service over explicit dependencies.
    pub fn new(gate: Gate, tools: ToolStore, sandbox: ToolSandbox, secrets: ToolSecrets, mcps: McpConfigStore) -> Self {
        Self { gate: gate.with_body_limit(MAX_BODY_BYTES), tools, sandbox, secrets: secrets.tools, mcps }
    }

    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let tools = ToolStore::new(aws.dynamodb(), required(lookup, settings::TOOLS_TABLE)?).with_quota(
            storage::quota::Counters::new(aws.dynamodb(), required(lookup, settings::QUOTAS_TABLE)?),
            settings::quota(lookup, "tools", settings::QUOTA_TOOLS, 500)?,
        );
        let sandbox = ToolSandbox::from_setting(
            aws.config(),
            lookup(settings::TOOL_SANDBOX_FUNCTION),
            lookup(settings::OUTBOUND_ALLOWED_HOSTS),
        );
        let secrets = ToolSecrets::new(aws.secrets(), &required(lookup, settings::TOOL_SECRET_PREFIX)?);
        let mcps = McpConfigStore::new(aws.dynamodb(), required(lookup, settings::MCP_CONFIGS_TABLE)?);
        Ok(Self::new(Gate::from_settings(aws, lookup)?, tools, sandbox, secrets, mcps))
    }

    /// Reads the time from `clock` (tests).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.gate = self.gate.with_clock(clock);
        self
    }

    /// A custom tool's script, compiled by the sandbox's Python: 422 naming `script` when it is
    /// invalid, 503 when it cannot be checked now. Other tools pass.
    async fn check_script(&self, account: AccountId, spec: &ToolSpec) -> Result<(), ApiError> {
        let Some(script) = spec.script.as_deref() else { return Ok(()) };
        match self.sandbox.check_script(account, script).await.map_err(|reason| script_unchecked(&reason))? {
            Ok(()) => Ok(()),
            Err(problem) => Err(ApiError::validation(
                "The tool is invalid.",
                Map::from_iter([("script".to_owned(), json!(problem.describe()))]),
            )),
        }
    }

    /// An `mcp` tool's `config.mcp_id` names an active MCP configuration of the account (1
    /// GetItem): 422 naming the field otherwise. Other tools pass.
    async fn check_mcp_configuration(&self, account: AccountId, spec: &ToolSpec) -> Result<(), ApiError> {
        let Some(Ok(config)) = spec.mcp_tool() else { return Ok(()) };
        let found = self.mcps.get(account, config.mcp_id).await?;
        if found.is_some_and(|record| record.deleted_at.is_none()) {
            return Ok(());
        }
        Err(ApiError::validation(
            "The tool is invalid.",
            Map::from_iter([(
                "config.mcp_id".to_owned(),
                json!(format!("MCP configuration {} does not exist", config.mcp_id)),
            )]),
        ))
    }

    async fn route(&self, caller: Caller, request: Request) -> Result<Response<Body>, ApiError> {
        let path = request.uri().path().to_owned();
        let segments = segments_under(&path, "/tools").ok_or_else(|| ApiError::not_found("resource"))?;
        let account = caller.account_id;
        match (request.method().clone(), segments.as_slice()) {
            (Method::GET, []) => self.list(account, &Params::from_query(request.uri())).await,
            (Method::POST, []) => self.create(account, request.body()).await,
            (Method::POST, ["upload"]) => self.upload(account, &request).await,
            (method, [raw]) if *raw != "upload" => {
                let id = path_id(raw, "tool_id")?;
                match method {
                    Method::GET => Ok(success(
                        StatusCode::OK,
                        view(&active_record(&self.tools, account, id, "tool").await?),
                        "Tool retrieved",
                    )),
                    Method::PUT => self.replace(account, id, request.body()).await,
                    Method::DELETE => self.delete(account, id).await,
                    other => Err(ApiError::method_not_allowed(&other, "GET, PUT, DELETE")),
                }
            }
            (Method::POST, [raw, "restore"]) => self.restore(account, path_id(raw, "tool_id")?).await,
            (Method::PUT, [raw, "upload"]) => self.reupload(account, path_id(raw, "tool_id")?, &request).await,
            (Method::GET, [raw, "script"]) => self.script(account, path_id(raw, "tool_id")?).await,
            (other, []) => Err(ApiError::method_not_allowed(&other, "GET, POST")),
            (other, ["upload"] | [_, "restore"]) => Err(ApiError::method_not_allowed(&other, "POST")),
            (other, [_, "upload"]) => Err(ApiError::method_not_allowed(&other, "PUT")),
            (other, [_, "script"]) => Err(ApiError::method_not_allowed(&other, "GET")),
            _ => Err(ApiError::not_found("resource")),
        }
    }

    async fn list(&self, account: AccountId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = PageRequest::from_params(params, &mut problems);
        let wanted = params.non_empty("type");
        let tool_type = wanted.map(ToolType::parse);
        if tool_type.is_some_and(|t| t.is_none()) {
            problems.insert("type".into(), json!("must be one of custom, http, mcp, native"));
        }
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        let Some(tool_type) = tool_type.flatten() else {
            // The page's depth of the `active` index, the page, the counter as the total.
            let found = self.tools.active_page(account, page.offset(), page.limit).await?;
            return Ok(page.respond_page(found.records.iter().map(view).collect(), found.total, "Tools retrieved"));
        };
        // A type: the account's active tools (bounded by its quota), filtered.
        let tools: Vec<Tool> = self
            .tools
            .active_records(account)
            .await?
            .into_iter()
            .filter(|tool| tool.spec.tool_type == tool_type)
            .collect();
        Ok(page.respond(tools.iter().map(view), tools.len(), "Tools retrieved"))
    }

    async fn create(&self, account: AccountId, body: &Body) -> Result<Response<Body>, ApiError> {
        let spec = parse_tool(body.as_ref()).map_err(|problems| ApiError::from_problems(problems, "tool"))?;
        self.insert(account, spec).await
    }

    async fn insert(&self, account: AccountId, spec: ToolSpec) -> Result<Response<Body>, ApiError> {
        let mut spec = spec;
        let secret = take_secret_headers(&mut spec).map_err(|problems| ApiError::from_problems(problems, "tool"))?;
        self.check_script(account, &spec).await?;
        self.check_mcp_configuration(account, &spec).await?;
        let now = self.gate.now();
        let mut tool = Tool::new(account, spec, now);
        let secret = match secret {
            SecretHeadersChange::Set(headers) if !headers.is_empty() => headers,
            _ => Default::default(),
        };
        tool.spec.set_secret_header_names(secret.keys().cloned().collect());
        if !secret.is_empty() {
            let stored = encode_secret_headers(&tool.spec.secret_origin(), &secret);
            self.secrets.put(account, tool.id, &stored).await?;
        }
        if let Err(err) = self.tools.create(&tool).await {
            if !secret.is_empty() {
                let _ = self.secrets.remove(account, tool.id).await;
            }
            return Err(ApiError::from_write(err, "tool"));
        }
        tracing::info!(tool_id = %tool.id, %account, "tool created");
        Ok(success(StatusCode::CREATED, view(&tool), "Tool created"))
    }

    async fn replace(&self, account: AccountId, id: ToolId, body: &Body) -> Result<Response<Body>, ApiError> {
        let spec = parse_tool(body.as_ref()).map_err(|problems| ApiError::from_problems(problems, "tool"))?;
        self.store(account, id, |_| Ok(spec)).await
    }

    /// `POST /tools/upload`: a `file` part (the Python script) and an optional `metadata` part
    /// (JSON: `name`, `description`, `input_schema`, `config`, `metadata`). The tool is `custom`;
    /// its name defaults to the file name without `.py`.
    async fn upload(&self, account: AccountId, request: &Request) -> Result<Response<Body>, ApiError> {
        let Upload { script, filename, fields: mut body } = read_upload(request)?;
        if !body.contains_key("name")
            && let Some(stem) = filename.as_deref().map(|f| f.trim_end_matches(".py")).filter(|s| !s.is_empty())
        {
            body.insert("name".into(), json!(stem));
        }
        body.insert("type".into(), json!("custom"));
        body.insert("script".into(), json!(script));
        let spec = validate_tool(&body).map_err(|problems| ApiError::from_problems(problems, "tool"))?;
        self.insert(account, spec).await
    }

    /// `PUT /tools/{tool_id}/upload`: a new script for a custom tool (and optionally new metadata).
    async fn reupload(&self, account: AccountId, id: ToolId, request: &Request) -> Result<Response<Body>, ApiError> {
        let Upload { script, fields: changes, .. } = read_upload(request)?;
        self.store(account, id, |existing| {
            if existing.spec.tool_type != ToolType::Custom {
                return Err(ApiError::new(ErrorCode::ValidationError, "Only custom tools have a script.")
                    .with_detail("file", "only custom tools have a script"));
            }
            let Ok(Value::Object(mut body)) = serde_json::to_value(&existing.spec) else {
                return Err(ApiError::internal(&"stored tool is not an object"));
            };
            body.extend(changes);
            body.insert("type".into(), json!("custom"));
            body.insert("script".into(), json!(script));
            validate_tool(&body).map_err(|problems| ApiError::from_problems(problems, "tool"))
        })
        .await
    }

    async fn store(
        &self,
        account: AccountId,
        id: ToolId,
        change: impl FnOnce(&Tool) -> Result<ToolSpec, ApiError>,
    ) -> Result<Response<Body>, ApiError> {
        let previous = active_record(&self.tools, account, id, "tool").await?;
        let mut spec = change(&previous)?;
        let secret = take_secret_headers(&mut spec).map_err(|problems| ApiError::from_problems(problems, "tool"))?;
        let before = previous.spec.secret_header_names();
        let plain = spec.config.get("headers").and_then(|h| serde_json::from_value(h.clone()).ok()).unwrap_or_default();
        let names = secret
            .names_after(&before, &previous.spec.secret_origin(), &spec.secret_origin(), &plain, "config.")
            .map_err(|problems| ApiError::validation("The tool is invalid.", problems))?;
        spec.set_secret_header_names(names);
        self.check_script(account, &spec).await?;
        self.check_mcp_configuration(account, &spec).await?;
        let tool = Tool { spec, updated_at: self.gate.now(), ..previous.clone() };
        // The record first: a refused write (name taken, concurrent change) leaves the secret
        // as it was.
        self.tools.replace(&tool, &previous).await.map_err(|err| ApiError::from_write(err, "tool"))?;
        match secret {
            SecretHeadersChange::Set(headers) if !headers.is_empty() => {
                let stored = encode_secret_headers(&tool.spec.secret_origin(), &headers);
                self.secrets.put(account, id, &stored).await?;
            }
            SecretHeadersChange::Keep => {}
            SecretHeadersChange::Set(_) | SecretHeadersChange::Remove if !before.is_empty() => {
                self.secrets.remove(account, id).await?;
            }
            SecretHeadersChange::Set(_) | SecretHeadersChange::Remove => {}
        }
        tracing::info!(tool_id = %id, %account, "tool updated");
        Ok(success(StatusCode::OK, view(&tool), "Tool updated"))
    }

    async fn script(&self, account: AccountId, id: ToolId) -> Result<Response<Body>, ApiError> {
        let tool = active_record(&self.tools, account, id, "tool").await?;
        let script = tool
            .spec
            .script
            .as_deref()
            .ok_or_else(|| ApiError::new(ErrorCode::ResourceNotFound, "This tool has no script."))?;
        let data = json!({ "id": tool.id, "name": tool.spec.name, "entry_point": ENTRY_POINT, "script": script });
        Ok(success(StatusCode::OK, data, "Tool script retrieved"))
    }

    async fn delete(&self, account: AccountId, id: ToolId) -> Result<Response<Body>, ApiError> {
        let now = self.gate.now();
        self.tools.soft_delete(account, id, now).await.map_err(|err| ApiError::from_write(err, "tool"))?;
        let data =
            json!({ "id": id.to_string(), "deleted_at": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true) });
        Ok(success(StatusCode::OK, data, "Tool deleted"))
    }

    async fn restore(&self, account: AccountId, id: ToolId) -> Result<Response<Body>, ApiError> {
        self.tools.restore(account, id, self.gate.now()).await.map_err(|err| ApiError::from_write(err, "tool"))?;
        Ok(success(StatusCode::OK, json!({ "id": id.to_string(), "status": "restored" }), "Tool restored"))
    }
}

impl HttpFunction for ToolsService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        let access = Access::by_method(&request);
        Box::pin(self.gate.serve(request, access, |caller, request| self.route(caller, request)))
    }
}

/// What a script upload carries.
struct Upload {
    script: String,
    filename: Option<String>,
    /// The `metadata` part's fields (`name`, `description`, `input_schema`, `config`, `metadata`).
    fields: Map<String, Value>,
}

/// Reads a `multipart/form-data` upload: a `file` part and an optional `metadata` part.
fn read_upload(request: &Request) -> Result<Upload, ApiError> {
    let bad = |field: &str, issue: &str| {
        ApiError::new(ErrorCode::BadRequest, "The upload is malformed.").with_detail(field, issue.to_owned())
    };
    let content_type = request.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let parts = parse_multipart(content_type, request.body().as_ref()).map_err(|err| bad("body", &err.to_string()))?;
    let find = |name: &str| parts.iter().find(|part: &&Part| part.name == name);
    let file = find("file").ok_or_else(|| bad("file", "a file part with the Python script is required"))?;
    let script = String::from_utf8(file.data.clone()).map_err(|_| bad("file", "the script must be UTF-8 text"))?;
    let metadata = match find("metadata") {
        None => Map::new(),
        Some(part) => match serde_json::from_slice::<Value>(&part.data) {
            Ok(Value::Object(fields)) => fields,
            _ => return Err(bad("metadata", "must be a JSON object")),
        },
    };
    for forbidden in ["type", "script"] {
        if metadata.contains_key(forbidden) {
            return Err(ApiError::validation(
                "Invalid upload metadata.",
                Map::from_iter([(forbidden.to_owned(), json!("is set by the upload"))]),
            ));
        }
    }
    Ok(Upload { script, filename: file.filename.clone(), fields: metadata })
}

/// A tool as responses show it; the script is read through its own route.
fn view(tool: &Tool) -> Value {
    let spec = &tool.spec;
    json!({
        "id": tool.id,
        "name": spec.name,
        "description": spec.description,
        "type": spec.tool_type,
        "input_schema": spec.input_schema,
        "config": spec.config,
        "metadata": spec.metadata,
        "has_script": spec.script.is_some(),
        "account_id": tool.account_id,
        "created_at": tool.created_at,
        "updated_at": tool.updated_at,
        "deleted_at": tool.deleted_at,
    })
}
