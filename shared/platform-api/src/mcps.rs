//! `/mcps`: MCP configurations (list, create, get, replace, soft delete, restore), the tools a
//! stored configuration's server offers, and connection tests of any configuration.
//!
//! Secret header values are write-only: kept in Secrets Manager (one secret per configuration),
//! never returned; responses list `secret_header_names`. On PUT, an absent `secret_headers` keeps
//! them, `null` removes them and an object replaces them.
//!
//! Talking to an MCP server (connect, tools, `include_tools`) is live, over Streamable HTTP,
//! within the configuration's `timeout_seconds`. A server that cannot be reached or does not
//! speak MCP is a 400 `BAD_REQUEST` saying why; in lists (`include_tools=true`) it is that item's
//! `tools_error` instead, so one broken server does not hide the others.
//!
//! Calls after the gate: list = 1 Query (+ 1 GetSecretValue per listed configuration with secret
//! headers when `include_tools`); get = 1 GetItem (+ 1 GetSecretValue with `include_tools`);
//! create = [CreateSecret] + 1 TransactWriteItems; replace = 1 GetItem + [Put/DeleteSecret] +
//! 1 TransactWriteItems; delete, restore = 1 conditional UpdateItem; tools and connect by
//! `mcp_id` = 1 GetItem + [1 GetSecretValue].

use crate::envelope::{ApiError, ErrorCode, PageRequest, path_id, success};
use crate::gate::{Access, Gate};
use crate::records::active_record;
use crate::settings;
use aws_env::settings::{Lookup, SettingError, required};
use futures_util::StreamExt;
use http::{Method, StatusCode};
use http_api::routing::{segments_under, without_trailing_slash};
use http_api::{Body, HttpFunction, Params, Request, Response, ResponseFuture};
use mcp::{McpError, McpTarget};
use outbound::TenantClient;
use platform_data::api_keys::Caller;
use platform_data::ids::{AccountId, McpConfigId};
use platform_data::mcp_configs::{
    McpConfig, McpConfigInput, McpConfigSpec, McpConfigStore, SecretHeadersChange, decode_secret_headers,
    encode_secret_headers, parse_mcp_config, validate_mcp_config,
};
use platform_data::secrets::RecordSecrets;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Servers listed at once when a list includes tools.
const LIST_CONCURRENCY: usize = 8;

/// The most a request spends talking to MCP servers (API Gateway ends requests at 30 s).
const REQUEST_BUDGET: Duration = Duration::from_secs(25);

/// The MCP configurations function.
pub struct McpsService {
    gate: Gate,
    configs: McpConfigStore,
    secrets: RecordSecrets<McpConfigId>,
    client: TenantClient,
}

impl McpsService {
    /// A service over explicit dependencies.
    pub fn new(gate: Gate, configs: McpConfigStore, secrets: RecordSecrets<McpConfigId>, client: TenantClient) -> Self {
        Self { gate, configs, secrets, client }
    }

    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        Ok(Self::new(
            Gate::from_settings(aws, lookup)?,
            McpConfigStore::new(aws.dynamodb(), required(lookup, settings::MCP_CONFIGS_TABLE)?).with_quota(
                storage::quota::Counters::new(aws.dynamodb(), required(lookup, settings::QUOTAS_TABLE)?),
                settings::quota(lookup, "mcp_configs", settings::QUOTA_MCP_CONFIGS, 500)?,
            ),
            mcp_secrets(aws.secrets(), required(lookup, settings::MCP_SECRET_PREFIX)?),
            settings::tenant_client(lookup)?,
        ))
    }

    /// Reads the time from `clock` (tests).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.gate = self.gate.with_clock(clock);
        self
    }

    async fn route(&self, caller: Caller, request: Request) -> Result<Response<Body>, ApiError> {
        let path = request.uri().path().to_owned();
        let segments = segments_under(&path, "/mcps").ok_or_else(|| ApiError::not_found("resource"))?;
        let account = caller.account_id;
        let params = Params::from_query(request.uri());
        match (request.method().clone(), segments.as_slice()) {
            (Method::GET, []) => self.list(account, &params).await,
            (Method::POST, []) => self.create(account, request.body()).await,
            (Method::POST, ["connect"]) => self.connect(account, request.body()).await,
            (Method::POST, ["connect", "tools"]) => self.connect_tools(account, request.body()).await,
            (method, [raw]) if *raw != "connect" => {
                let id = path_id(raw, "mcp_id")?;
                match method {
                    Method::GET => self.detail(account, id, &params).await,
                    Method::PUT => self.replace(account, id, request.body()).await,
                    Method::DELETE => self.delete(account, id).await,
                    other => Err(ApiError::method_not_allowed(&other, "GET, PUT, DELETE")),
                }
            }
            (Method::POST, [raw, "restore"]) if *raw != "connect" => {
                self.restore(account, path_id(raw, "mcp_id")?).await
            }
            (Method::GET, [raw, "tools"]) if *raw != "connect" => self.tools(account, path_id(raw, "mcp_id")?).await,
            (other, []) => Err(ApiError::method_not_allowed(&other, "GET, POST")),
            (other, ["connect"] | ["connect", "tools"] | [_, "restore"]) => {
                Err(ApiError::method_not_allowed(&other, "POST"))
            }
            (other, [_, "tools"]) => Err(ApiError::method_not_allowed(&other, "GET")),
            _ => Err(ApiError::not_found("resource")),
        }
    }

    async fn list(&self, account: AccountId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = PageRequest::from_params(params, &mut problems);
        let include_tools = include_tools(params, &mut problems);
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        // The page's depth of the `active` index, the page, the counter as the total.
        let found = self.configs.active_page(account, page.offset(), page.limit).await?;
        let shown = &found.records;
        let data: Vec<Value> = if include_tools {
            // Futures built first: a closure inside the stream trips the Send check of the boxed
            // handler future (a higher-ranked lifetime limitation).
            let deadline = Instant::now() + REQUEST_BUDGET;
            let lookups: Vec<_> = shown.iter().map(|config| self.view_with_tools(config, deadline)).collect();
            futures_util::stream::iter(lookups)
                .buffered(LIST_CONCURRENCY)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<_, _>>()?
        } else {
            shown.iter().map(view).collect()
        };
        Ok(page.respond_page(data, found.total, "MCP configurations retrieved"))
    }

    async fn detail(&self, account: AccountId, id: McpConfigId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let include_tools = include_tools(params, &mut problems);
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        let config = active_record(&self.configs, account, id, "MCP configuration").await?;
        let data = if include_tools {
            self.view_with_tools(&config, Instant::now() + REQUEST_BUDGET).await?
        } else {
            view(&config)
        };
        Ok(success(StatusCode::OK, data, "MCP configuration retrieved"))
    }

    async fn create(&self, account: AccountId, body: &Body) -> Result<Response<Body>, ApiError> {
        let input =
            parse_mcp_config(body.as_ref(), true).map_err(|p| ApiError::from_problems(p, "MCP configuration"))?;
        let now = self.gate.now();
        let mut config = McpConfig::new(account, input.spec, now);
        if let SecretHeadersChange::Set(headers) = &input.secret_headers
            && !headers.is_empty()
        {
            self.secrets.put(account, config.id, &encode_secret_headers(&config.spec.secret_origin(), headers)).await?;
            config.spec.secret_header_names = headers.keys().cloned().collect();
        }
        if let Err(err) = self.configs.create(&config).await {
            if !config.spec.secret_header_names.is_empty() {
                let _ = self.secrets.remove(account, config.id).await;
            }
            return Err(ApiError::from_write(err, "MCP configuration"));
        }
        tracing::info!(mcp_id = %config.id, %account, "MCP configuration created");
        Ok(success(StatusCode::CREATED, view(&config), "MCP configuration created"))
    }

    async fn replace(&self, account: AccountId, id: McpConfigId, body: &Body) -> Result<Response<Body>, ApiError> {
        let input =
            parse_mcp_config(body.as_ref(), true).map_err(|p| ApiError::from_problems(p, "MCP configuration"))?;
        let previous = active_record(&self.configs, account, id, "MCP configuration").await?;
        let mut spec = input.spec;
        // Secret headers never follow the configuration to another server: moving it there
        // needs them again (they are also stored bound to their origin).
        spec.secret_header_names = input
            .secret_headers
            .names_after(
                &previous.spec.secret_header_names,
                &previous.spec.secret_origin(),
                &spec.secret_origin(),
                &spec.headers,
                "",
            )
            .map_err(|problems| ApiError::validation("The MCP configuration is invalid.", problems))?;
        let config = McpConfig { spec, updated_at: self.gate.now(), ..previous.clone() };
        // The record first: a refused write (name taken, concurrent change) leaves the secret
        // as it was.
        self.configs.replace(&config, &previous).await.map_err(|err| ApiError::from_write(err, "MCP configuration"))?;
        match &input.secret_headers {
            SecretHeadersChange::Keep => {}
            SecretHeadersChange::Set(headers) if !headers.is_empty() => {
                self.secrets.put(account, id, &encode_secret_headers(&config.spec.secret_origin(), headers)).await?
            }
            SecretHeadersChange::Set(_) | SecretHeadersChange::Remove => self.secrets.remove(account, id).await?,
        }
        tracing::info!(mcp_id = %id, %account, "MCP configuration updated");
        Ok(success(StatusCode::OK, view(&config), "MCP configuration updated"))
    }

    /// Soft delete: the secret headers stay, so a restore brings the configuration back whole.
    async fn delete(&self, account: AccountId, id: McpConfigId) -> Result<Response<Body>, ApiError> {
        let now = self.gate.now();
        self.configs
            .soft_delete(account, id, now)
            .await
            .map_err(|err| ApiError::from_write(err, "MCP configuration"))?;
        tracing::info!(mcp_id = %id, %account, "MCP configuration deleted");
        let data =
            json!({ "id": id.to_string(), "deleted_at": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true) });
        Ok(success(StatusCode::OK, data, "MCP configuration deleted"))
    }

    async fn restore(&self, account: AccountId, id: McpConfigId) -> Result<Response<Body>, ApiError> {
        let now = self.gate.now();
        self.configs.restore(account, id, now).await.map_err(|err| ApiError::from_write(err, "MCP configuration"))?;
        tracing::info!(mcp_id = %id, %account, "MCP configuration restored");
        Ok(success(StatusCode::OK, json!({ "id": id.to_string(), "status": "restored" }), "MCP configuration restored"))
    }

    /// `GET /mcps/{id}/tools`: the tools the stored configuration's server offers now.
    async fn tools(&self, account: AccountId, id: McpConfigId) -> Result<Response<Body>, ApiError> {
        let config = active_record(&self.configs, account, id, "MCP configuration").await?;
        let target = self.target(&config).await?;
        let (server, tools) =
            mcp::list_tools(&self.client, &target).await.map_err(|err| connection_error(&err, &target))?;
        let data = json!({ "mcp_id": id, "server": server, "tools": tools, "count": tools.len() });
        Ok(success(StatusCode::OK, data, "MCP tools retrieved"))
    }

    /// `POST /mcps/connect`: initializes a session with a configuration and reports the server.
    async fn connect(&self, account: AccountId, body: &Body) -> Result<Response<Body>, ApiError> {
        let target = self.connection_target(account, body).await?;
        let server = mcp::probe(&self.client, &target).await.map_err(|err| connection_error(&err, &target))?;
        let data = json!({
            "connected": true,
            "url": target.url,
            "server": { "name": server.name, "version": server.version },
            "protocol_version": server.protocol_version,
            "capabilities": server.capabilities,
            "instructions": server.instructions,
        });
        Ok(success(StatusCode::OK, data, "Connected to the MCP server"))
    }

    /// `POST /mcps/connect/tools`: the tools a configuration's server offers.
    async fn connect_tools(&self, account: AccountId, body: &Body) -> Result<Response<Body>, ApiError> {
        let target = self.connection_target(account, body).await?;
        let (server, tools) =
            mcp::list_tools(&self.client, &target).await.map_err(|err| connection_error(&err, &target))?;
        let data = json!({ "url": target.url, "server": server, "tools": tools, "count": tools.len() });
        Ok(success(StatusCode::OK, data, "MCP tools retrieved"))
    }

    /// A connection test's body: `{"mcp_id": …}` for a stored configuration (with its secret
    /// headers), or a configuration as POST /mcps takes it (`name` optional).
    async fn connection_target(&self, account: AccountId, body: &Body) -> Result<McpTarget, ApiError> {
        let value: Value = serde_json::from_slice(body.as_ref()).map_err(|err| {
            ApiError::new(ErrorCode::BadRequest, "The request body is malformed.")
                .with_detail("body", format!("malformed JSON: {err}"))
        })?;
        let Value::Object(fields) = value else {
            return Err(ApiError::new(ErrorCode::BadRequest, "The request body is malformed.")
                .with_detail("body", "must be a JSON object"));
        };
        if let Some(raw) = fields.get("mcp_id") {
            if fields.len() > 1 {
                return Err(ApiError::validation(
                    "Send either mcp_id or a configuration.",
                    Map::from_iter([("mcp_id".to_owned(), json!("cannot be combined with other fields"))]),
                ));
            }
            let id = raw.as_str().and_then(|text| text.parse().ok()).ok_or_else(|| {
                ApiError::validation(
                    "Invalid mcp_id.",
                    Map::from_iter([("mcp_id".to_owned(), json!("must be a UUID"))]),
                )
            })?;
            let config = active_record(&self.configs, account, id, "MCP configuration").await?;
            return self.target(&config).await;
        }
        let McpConfigInput { spec, secret_headers } =
            validate_mcp_config(&fields, false).map_err(|p| ApiError::from_problems(p, "MCP configuration"))?;
        let secret = match secret_headers {
            SecretHeadersChange::Set(headers) => headers,
            SecretHeadersChange::Keep | SecretHeadersChange::Remove => BTreeMap::new(),
        };
        Ok(target_of(&spec, secret))
    }

    /// How to reach a stored configuration's server, secret headers included.
    async fn target(&self, config: &McpConfig) -> Result<McpTarget, ApiError> {
        let secret = if config.spec.secret_header_names.is_empty() {
            BTreeMap::new()
        } else {
            let stored = self.secrets.get(config.account_id, config.id).await?;
            match stored {
                None => BTreeMap::new(),
                Some(stored) => decode_secret_headers(&stored, &config.spec.secret_origin()).map_err(|refused| {
                    tracing::warn!(mcp_id = %config.id, error = %refused, "secret headers not sent");
                    ApiError::new(ErrorCode::BadRequest, "The MCP configuration's secret headers cannot be sent.")
                        .with_detail("secret_headers", refused.to_string())
                })?,
            }
        };
        Ok(target_of(&config.spec, secret))
    }

    /// A configuration's view plus `tools` (or `tools_error` when its server failed), listed
    /// before `deadline`.
    async fn view_with_tools(&self, config: &McpConfig, deadline: Instant) -> Result<Value, ApiError> {
        let mut target = self.target(config).await?;
        target.timeout = target.timeout.min(deadline.saturating_duration_since(Instant::now()));
        let mut data = view(config);
        let (tools, error) = match mcp::list_tools(&self.client, &target).await {
            Ok((_, tools)) => (json!(tools), Value::Null),
            Err(err) => (Value::Null, json!(err.to_string())),
        };
        if let Value::Object(fields) = &mut data {
            fields.insert("tools".into(), tools);
            fields.insert("tools_error".into(), error);
        }
        Ok(data)
    }
}

impl HttpFunction for McpsService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        let access = access(&request);
        Box::pin(self.gate.serve(request, access, |caller, request| self.route(caller, request)))
    }
}

/// Where MCP secret headers live: `{prefix}{account_id}/{mcp_id}`.
pub fn mcp_secrets(
    client: impl Into<aws_env::Lazy<aws_sdk_secretsmanager::Client>>,
    prefix: String,
) -> RecordSecrets<McpConfigId> {
    RecordSecrets::new(client, prefix, "MCP configuration secret headers (write-only through the API)")
}

fn target_of(spec: &McpConfigSpec, secret: BTreeMap<String, String>) -> McpTarget {
    McpTarget {
        url: spec.url.clone(),
        headers: spec.headers.clone().into_iter().chain(secret).collect(),
        timeout: Duration::from_secs(spec.timeout_seconds),
    }
}

/// `include_tools`: `true`/`false` (also `1`/`0`), default false.
fn include_tools(params: &Params, problems: &mut Map<String, Value>) -> bool {
    match params.non_empty("include_tools").map(str::to_ascii_lowercase).as_deref() {
        None | Some("false" | "0") => false,
        Some("true" | "1") => true,
        Some(_) => {
            problems.insert("include_tools".into(), json!("must be true or false"));
            false
        }
    }
}

/// A failed MCP operation: 400, saying what went wrong with which server.
fn connection_error(err: &McpError, target: &McpTarget) -> ApiError {
    // Logged without its query: a tenant's URL may carry a token (`?api_key=`).
    tracing::info!(url = %outbound::loggable_url(&target.url), error = %err, "MCP server refused or unreachable");
    let message = match err {
        McpError::InvalidHeader(_) => "The MCP configuration cannot be sent.",
        _ => "Could not talk to the MCP server.",
    };
    ApiError::new(ErrorCode::BadRequest, message)
        .with_detail("url", target.url.clone())
        .with_detail("error", err.to_string())
}

/// An MCP configuration as responses show it (never secret header values): `GET /mcps/{id}`,
/// and each of an agent detail's `mcps`.
pub(crate) fn view(config: &McpConfig) -> Value {
    let spec = &config.spec;
    json!({
        "id": config.id,
        "name": spec.name,
        "description": spec.description,
        "url": spec.url,
        "transport": spec.transport,
        "headers": spec.headers,
        "secret_header_names": spec.secret_header_names,
        "timeout_seconds": spec.timeout_seconds,
        "metadata": spec.metadata,
        "account_id": config.account_id,
        "created_at": config.created_at,
        "updated_at": config.updated_at,
        "deleted_at": config.deleted_at,
    })
}

/// A GET that shows a configuration's tools (`include_tools`, `/mcps/{id}/tools`) asks its MCP
/// server for them: only once the request is allowed. Every other GET only reads.
pub(crate) fn access(request: &Request) -> Access {
    let asks_server = Params::from_query(request.uri()).non_empty("include_tools").is_some()
        || without_trailing_slash(request.uri().path()).ends_with("/tools");
    if asks_server { Access::MayWrite } else { Access::by_method(request) }
}
