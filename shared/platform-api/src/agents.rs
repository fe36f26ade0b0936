//! `/agents/…`: list, create, get, replace, patch, soft delete and restore.
//!
//! DynamoDB calls after the gate: list = 1 Query per MB of the account's agents; create =
//! 1 BatchGetItem per referenced kind (sub-agents, tools, MCPs) + 1 TransactWriteItems; get =
//! 1 GetItem (+1 BatchGetItem per referenced kind, +1 GetItem of the language model when the
//! agent names it by id, else +1 Query of the account's models); replace/patch = 1 GetItem + the same reference reads +
//! 1 TransactWriteItems; delete/restore = 1 conditional UpdateItem. Flowtool sync: see
//! `flowtool`.
//!
//! Secret headers of `tool_configs` entries are write-only (`agent_spec::take_tool_config_secrets`):
//! one Secrets Manager secret per agent holds them, each bound to its tool's origin; the record
//! keeps their names. Writes that change them add 1 BatchGetItem of the tools (their URLs),
//! [1 GetSecretValue] and a Create/Put/DeleteSecret.

use crate::envelope::{ApiError, ErrorCode, PageRequest, path_id, success};
use crate::flowtool::{FlowServerSettings, SyncReport, SyncSource, sync_flowtool_agents};
use crate::gate::{Access, Gate};
use crate::records::active_record;
use crate::settings;
use crate::webhooks::WebhookSettings;
use agent_runtime::runs::{RunRecord, RunStore};
use agent_runtime::tools::model_tool_name;
use aws_env::settings::{Lookup, SettingError, required};
use chrono::{DateTime, Utc};
use http::{Method, StatusCode};
use http_api::routing::segments_under;
use http_api::{Body, HttpFunction, Params, Request, Response, ResponseFuture};
use platform_data::agent_spec::{
    AgentSpec, AgentType, Framework, StoredToolConfigSecrets, ToolConfigSecretChanges, has_tool_config_secrets,
    parse_agent_spec, take_tool_config_secrets, tool_config_secret_argument_names, tool_config_secret_names,
    validate_agent_spec,
};
use platform_data::agents::{Agent, AgentStore};
use platform_data::api_keys::Caller;
use platform_data::ids::{AccountId, AgentId, RunId, ToolId};
use platform_data::language_models::{LanguageModelStore, ModelSelector, find_model};
use platform_data::mcp_configs::McpConfigStore;
use platform_data::records::{Record, RecordBody, RecordStore};
use platform_data::secret_headers::{SecretHeadersChange, encode_secret_headers};
use platform_data::secrets::RecordSecrets;
use platform_data::tools::{ToolSecrets, ToolStore, ToolType};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use storage::quota::Counters;
use webhooks::publisher::Publisher;

/// The agents function.
pub struct AgentsService {
    gate: Gate,
    agents: AgentStore,
    references: ReferenceStores,
    flow_server: FlowServerSettings,
    events: Publisher,
    runs: RunStore,
    /// The secret headers of agents' `tool_configs`.
    tool_config_secrets: RecordSecrets<AgentId>,
    /// The accounts' flow server keys sent with a sync.
    flow_server_keys: platform_data::flow_server_keys::FlowServerKeys,
}

/// The stores of what agents refer to.
pub struct ReferenceStores {
    pub tools: ToolStore,
    pub mcps: McpConfigStore,
    pub language_models: LanguageModelStore,
}

/// Which parts of a body `check_references` checks: all of them on create and replace, the ones
/// a PATCH sends.
#[derive(Debug, Clone, Copy)]
struct ReferenceLists {
    account_id: bool,
    agents: bool,
    tools: bool,
    mcps: bool,
}

impl ReferenceLists {
    const ALL: Self = Self { account_id: true, agents: true, tools: true, mcps: true };

    /// `ids` when its list is checked, else nothing.
    fn pick<Id: Copy>(checked: bool, ids: &[Id]) -> Vec<Id> {
        if checked { ids.to_vec() } else { Vec::new() }
    }
}

/// A sub-agent, tool or MCP reference in a detail.
#[derive(Debug, Serialize)]
struct Reference<Id> {
    id: Id,
    name: String,
    /// `""` when the record has none.
    description: String,
}

/// An item of the agent list (AgentListItem).
#[derive(Debug, Serialize)]
struct ListItem<'a> {
    id: AgentId,
    name: &'a str,
    /// The spec's strings: `""` when unset (DESIGN.md "Field presence").
    version: &'a str,
    description: &'a str,
    metadata: &'a Map<String, Value>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    deleted_at: Option<DateTime<Utc>>,
}

impl<'a> ListItem<'a> {
    fn of(agent: &'a Agent) -> Self {
        Self {
            id: agent.id,
            name: &agent.spec.name,
            version: agent.spec.version.as_deref().unwrap_or_default(),
            description: agent.spec.description.as_deref().unwrap_or_default(),
            metadata: &agent.spec.metadata,
            created_at: agent.created_at,
            updated_at: agent.updated_at,
            deleted_at: agent.deleted_at,
        }
    }
}

impl AgentsService {
    /// A service over explicit dependencies.
    pub fn new(
        gate: Gate,
        agents: AgentStore,
        references: ReferenceStores,
        flow_server: FlowServerSettings,
        events: Publisher,
        runs: RunStore,
        tool_secrets: ToolSecrets,
    ) -> Self {
        Self {
            gate,
            agents,
            references,
            flow_server,
            events,
            runs,
            tool_config_secrets: tool_secrets.agents,
            flow_server_keys: tool_secrets.flow_server_keys,
        }
    }

    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let db = aws.dynamodb();
        let agents = AgentStore::new(db.clone(), required(lookup, settings::AGENTS_TABLE)?).with_quota(
            Counters::new(db.clone(), required(lookup, settings::QUOTAS_TABLE)?),
            settings::quota(lookup, "agents", settings::QUOTA_AGENTS, 500)?,
        );
        let references = ReferenceStores {
            tools: ToolStore::new(db.clone(), required(lookup, settings::TOOLS_TABLE)?),
            mcps: McpConfigStore::new(db.clone(), required(lookup, settings::MCP_CONFIGS_TABLE)?),
            language_models: LanguageModelStore::new(db, required(lookup, settings::LANGUAGE_MODELS_TABLE)?),
        };
        let flow_server = FlowServerSettings {
            base_url: lookup(settings::FLOW_SERVER_URL),
            secrets: aws.secrets(),
            secret_id: lookup(settings::FLOW_SERVER_SECRET_ID),
            client: settings::tenant_client(lookup)?,
        };
        let events = WebhookSettings::from_settings(aws, lookup)?.publisher;
        let runs = settings::run_store(aws.dynamodb(), lookup)?;
        let tool_secrets = ToolSecrets::new(aws.secrets(), &required(lookup, settings::TOOL_SECRET_PREFIX)?);
        Ok(Self::new(Gate::from_settings(aws, lookup)?, agents, references, flow_server, events, runs, tool_secrets))
    }

    /// Reads the time from `clock` (tests).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.gate = self.gate.with_clock(clock);
        self
    }

    async fn route(&self, caller: Caller, request: Request) -> Result<Response<Body>, ApiError> {
        let path = request.uri().path().to_owned();
        let segments = segments_under(&path, "/agents").ok_or_else(|| ApiError::not_found("resource"))?;
        let account = caller.account_id;
        match (request.method().clone(), segments.as_slice()) {
            (Method::GET, []) => self.list(account, &Params::from_query(request.uri())).await,
            (Method::POST, []) => self.create(account, request.body()).await,
            (Method::POST, ["flowtool", "sync"]) => {
                let source = self.flow_server.server(request.body().as_ref()).await?;
                let report = self.sync(&source, account).await?;
                self.announce_synced(account, &report).await;
                Ok(success(StatusCode::OK, report, "Flowtool agents synced"))
            }
            (other, ["flowtool", "sync"]) => Err(ApiError::method_not_allowed(&other, "POST")),
            (method, [id]) => {
                let id = path_id(id, "agent_id")?;
                match method {
                    Method::GET => self.detail(account, id).await,
                    Method::PUT => self.replace(account, id, request.body()).await,
                    Method::PATCH => self.patch(account, id, request.body()).await,
                    Method::DELETE => self.delete(account, id).await,
                    other => Err(ApiError::method_not_allowed(&other, "GET, PUT, PATCH, DELETE")),
                }
            }
            (Method::POST, [id, "restore"]) => self.restore(account, path_id(id, "agent_id")?).await,
            (Method::GET, [id, "runs"]) => {
                let id = path_id(id, "agent_id")?;
                self.runs(account, id, &Params::from_query(request.uri())).await
            }
            (Method::GET, [id, "runs", run_id]) => {
                let id = path_id(id, "agent_id")?;
                let run_id = path_id(run_id, "run_id")?;
                self.run(account, id, run_id).await
            }
            (other, [_, "runs"]) => Err(ApiError::method_not_allowed(&other, "GET")),
            (other, [_, "runs", _]) => Err(ApiError::method_not_allowed(&other, "GET")),
            (other, []) => Err(ApiError::method_not_allowed(&other, "GET, POST")),
            (other, [_, "restore"]) => Err(ApiError::method_not_allowed(&other, "POST")),
            _ => Err(ApiError::not_found("resource")),
        }
    }

    async fn list(&self, account: AccountId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = PageRequest::from_params(params, &mut problems);
        let agent_type = params.non_empty("agent_type");
        // The spec's filter also names `code`, a type no agent here has: it lists nothing.
        if agent_type.is_some_and(|t| t != "code" && AgentType::parse(t).is_none()) {
            problems.insert("agent_type".into(), json!("must be one of config, code, a2a, flowtool"));
        }
        let framework = params.non_empty("framework");
        if framework.is_some_and(|f| Framework::parse(f).is_none()) {
            problems.insert("framework".into(), json!("must be one of chainlib, graphlib, vendor_adk"));
        }
        let sync = match params.non_empty("sync_flowtool_agents").map(str::to_ascii_lowercase).as_deref() {
            None | Some("false" | "0") => false,
            Some("true" | "1") => true,
            Some(_) => {
                problems.insert("sync_flowtool_agents".into(), json!("must be true or false"));
                false
            }
        };
        // One value each: a filter given twice has no one meaning (the last would win silently).
        for single in ["name", "version", "agent_type", "framework", "sync_flowtool_agents", "page", "limit"] {
            if params.pairs().iter().filter(|(key, _)| key == single).count() > 1 {
                problems.insert(single.into(), json!("must be given at most once"));
            }
        }
        for (key, _) in params.pairs() {
            if metadata_filter_key(key).is_some_and(str::is_empty) {
                problems.insert(key.clone(), json!("a metadata filter names its key: metadata[key]=value"));
            }
        }
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        if sync {
            let source = self.flow_server.server(&[]).await?;
            let report = self.sync(&source, account).await?;
            self.announce_synced(account, &report).await;
        }
        let name = params.non_empty("name").map(str::to_lowercase);
        let version = params.non_empty("version");
        let metadata: Vec<(&str, &str)> = params
            .pairs()
            .iter()
            .filter_map(|(key, value)| metadata_filter_key(key).map(|k| (k, value.as_str())))
            .collect();
        // The spec's list has no pagination parameters: without `page` and `limit` it is every
        // agent of the account (bounded by the agents-per-account quota); with either, one page.
        let paged = params.non_empty("page").is_some() || params.non_empty("limit").is_some();
        let filtered =
            agent_type.is_some() || framework.is_some() || name.is_some() || version.is_some() || !metadata.is_empty();
        if paged && !filtered {
            // The page's depth of the `active` index, the counter as the total.
            let found = self.agents.active_page(account, page.offset(), page.limit).await?;
            return Ok(list_page(found.records, found.total, &page));
        }
        // The account's active agents (bounded by the quota), filtered.
        let agents: Vec<Agent> = self
            .agents
            .active_records(account)
            .await?
            .into_iter()
            .filter(|agent| agent_type.is_none_or(|t| agent.spec.agent_type.as_str() == t))
            .filter(|agent| framework.is_none_or(|f| agent.spec.framework.is_some_and(|own| own.as_str() == f)))
            .filter(|agent| name.as_ref().is_none_or(|n| agent.spec.name.to_lowercase().contains(n)))
            .filter(|agent| version.is_none_or(|v| agent.spec.version.as_deref() == Some(v)))
            .filter(|agent| metadata.iter().all(|(key, wanted)| metadata_matches(&agent.spec.metadata, key, wanted)))
            .collect();
        Ok(if paged { list_page(page.page_of(&agents).to_vec(), agents.len(), &page) } else { whole_list(agents) })
    }

    async fn create(&self, account: AccountId, body: &Body) -> Result<Response<Body>, ApiError> {
        let mut spec =
            parse_agent_spec(body.as_ref()).map_err(|problems| ApiError::from_problems(problems, "agent"))?;
        let changes =
            take_tool_config_secrets(&mut spec).map_err(|problems| ApiError::from_problems(problems, "agent"))?;
        self.check_references(account, &spec, None, ReferenceLists::ALL).await?;
        let now = self.gate.now();
        let mut agent = Agent::new(account, spec, now);
        let secrets = self.settle_tool_config_secrets(&mut agent, changes, None).await?;
        if let Some(stored) = &secrets {
            self.tool_config_secrets.put(account, agent.id, stored).await?;
        }
        if let Err(err) = self.agents.create(&agent).await {
            if secrets.is_some() {
                let _ = self.tool_config_secrets.remove(account, agent.id).await;
            }
            return Err(ApiError::from_write(err, "agent"));
        }
        tracing::info!(agent_id = %agent.id, %account, "agent created");
        self.announce(account, "agent.created", agent_event(&agent)).await;
        Ok(success(
            StatusCode::CREATED,
            json!({ "id": agent.id.to_string(), "name": agent.spec.name }),
            "Agent created",
        ))
    }

    async fn detail(&self, account: AccountId, id: AgentId) -> Result<Response<Body>, ApiError> {
        let agent = active_record(&self.agents, account, id, "agent").await?;
        Ok(success(StatusCode::OK, self.expand(&agent).await?, "Agent retrieved"))
    }

    async fn replace(&self, account: AccountId, id: AgentId, body: &Body) -> Result<Response<Body>, ApiError> {
        let mut spec =
            parse_agent_spec(body.as_ref()).map_err(|problems| ApiError::from_problems(problems, "agent"))?;
        let changes =
            take_tool_config_secrets(&mut spec).map_err(|problems| ApiError::from_problems(problems, "agent"))?;
        let previous = active_record(&self.agents, account, id, "agent").await?;
        self.store_replacement(previous, spec, changes, ReferenceLists::ALL).await
    }

    async fn patch(&self, account: AccountId, id: AgentId, body: &Body) -> Result<Response<Body>, ApiError> {
        let patch: Value = serde_json::from_slice(body.as_ref()).map_err(|err| {
            ApiError::new(ErrorCode::BadRequest, "The request body is malformed.")
                .with_detail("body", format!("malformed JSON: {err}"))
        })?;
        let Value::Object(patch) = patch else {
            return Err(ApiError::new(ErrorCode::BadRequest, "The request body is malformed.")
                .with_detail("body", "must be a JSON object"));
        };
        let existing = active_record(&self.agents, account, id, "agent").await?;
        // A top-level merge: sent fields replace stored ones, null removes one. The merged body is
        // validated whole, which keeps language model selectors exclusive; references are checked
        // only where the PATCH sends them (a stored tool deleted since does not block other edits).
        let Ok(Value::Object(mut merged)) = serde_json::to_value(&existing.spec) else {
            return Err(ApiError::internal(&"stored agent is not an object"));
        };
        let sent = ReferenceLists {
            account_id: patch.contains_key("account_id"),
            agents: patch.contains_key("agents"),
            tools: patch.contains_key("tools"),
            mcps: patch.contains_key("mcps"),
        };
        for (key, value) in patch {
            merged.insert(key, value);
        }
        let mut spec = validate_agent_spec(&merged).map_err(|problems| ApiError::from_problems(problems, "agent"))?;
        let changes =
            take_tool_config_secrets(&mut spec).map_err(|problems| ApiError::from_problems(problems, "agent"))?;
        self.store_replacement(existing, spec, changes, sent).await
    }

    /// Writes `spec` over `previous` (as read by this request; a concurrent change is a 409),
    /// after checking the references `checked` names.
    async fn store_replacement(
        &self,
        previous: Agent,
        spec: AgentSpec,
        secret_changes: BTreeMap<ToolId, ToolConfigSecretChanges>,
        checked: ReferenceLists,
    ) -> Result<Response<Body>, ApiError> {
        let (account, id) = (previous.account_id, previous.id);
        self.check_references(account, &spec, Some(id), checked).await?;
        let mut agent = Agent { spec, updated_at: self.gate.now(), ..previous.clone() };
        let secrets = self.settle_tool_config_secrets(&mut agent, secret_changes, Some(&previous)).await?;
        // The record first: a refused write (name taken, concurrent change) leaves the secret
        // as it was.
        self.agents.replace(&agent, &previous).await.map_err(|err| ApiError::from_write(err, "agent"))?;
        match &secrets {
            Some(stored) => self.tool_config_secrets.put(account, id, stored).await,
            None if has_tool_config_secrets(&previous.spec) => self.tool_config_secrets.remove(account, id).await,
            None => Ok(()),
        }?;
        tracing::info!(agent_id = %id, %account, "agent updated");
        self.announce(account, "agent.updated", agent_event(&agent)).await;
        Ok(success(StatusCode::OK, self.expand(&agent).await?, "Agent updated"))
    }

    async fn delete(&self, account: AccountId, id: AgentId) -> Result<Response<Body>, ApiError> {
        let now = self.gate.now();
        self.agents.soft_delete(account, id, now).await.map_err(|err| ApiError::from_write(err, "agent"))?;
        tracing::info!(agent_id = %id, %account, "agent deleted");
        self.announce(account, "agent.deleted", json!({ "id": id, "deleted_at": now })).await;
        let data =
            json!({ "id": id.to_string(), "deleted_at": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true) });
        Ok(success(StatusCode::OK, data, "Agent deleted"))
    }

    /// `GET /agents/{agent_id}/runs`: the agent's runs, newest first, filtered by `status`,
    /// `run_type` and `schedule_id`, paged by `page` and `limit` (unfiltered, read only down to
    /// the page: `RunStore::page_for_agent`).
    async fn runs(&self, account: AccountId, id: AgentId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = PageRequest::from_params(params, &mut problems);
        let filter = crate::agent_runs::run_filter(params, &mut problems);
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        active_record(&self.agents, account, id, "agent").await?;
        let found = self.runs.page_for_agent(id, &filter, page.offset(), page.limit, self.gate.now()).await?;
        Ok(page.respond_page(found.runs.iter().map(RunRecord::view).collect(), found.total, "Runs retrieved"))
    }

    /// One run's record: 404 unless the run is of this account's active agent `id`
    /// (GetItem of the agent, GetItem of the run).
    async fn run(&self, account: AccountId, id: AgentId, run_id: RunId) -> Result<Response<Body>, ApiError> {
        active_record(&self.agents, account, id, "agent").await?;
        let run = self
            .runs
            .get(run_id, self.gate.now())
            .await?
            .filter(|run| run.agent_id == id && run.account_id == account)
            .ok_or_else(|| ApiError::not_found("run"))?;
        Ok(success(StatusCode::OK, run.view(), "Run retrieved"))
    }

    async fn restore(&self, account: AccountId, id: AgentId) -> Result<Response<Body>, ApiError> {
        self.agents.restore(account, id, self.gate.now()).await.map_err(|err| ApiError::from_write(err, "agent"))?;
        tracing::info!(agent_id = %id, %account, "agent restored");
        self.announce(account, "agent.restored", json!({ "id": id })).await;
        Ok(success(StatusCode::OK, json!({ "id": id.to_string(), "status": "restored" }), "Agent restored"))
    }

    /// Publishes a webhook event. The change it reports is already stored, so a failure to
    /// publish is logged, not returned: the request succeeded.
    async fn announce(&self, account: AccountId, event_type: &str, data: Value) {
        if let Err(err) = self.events.publish(account, event_type, data, self.gate.now()).await {
            tracing::error!(error = %err, event_type, %account, "webhook event not published");
        }
    }

    /// Syncs the account's flowtool agents with `source`.
    async fn sync(&self, source: &SyncSource, account: AccountId) -> Result<SyncReport, ApiError> {
        let keys = &self.flow_server_keys;
        sync_flowtool_agents(&self.agents, keys, &self.flow_server.client, source, account, self.gate.now()).await
    }

    async fn announce_synced(&self, account: AccountId, report: &SyncReport) {
        for (event, agents) in [("agent.created", &report.created), ("agent.updated", &report.updated)] {
            for agent in agents {
                let data = json!({ "id": agent.agent_id, "name": agent.flow_name, "type": AgentType::Flowtool });
                self.announce(account, event, data).await;
            }
        }
    }

    /// Applies what a write says about `tool_configs` secrets: each entry of a tool in `tools`
    /// sets, removes or keeps (from `previous`) its tool's secret headers (bound to the tool's
    /// origin: only `http` tools with a URL take them) and its secret arguments (bound to where
    /// the tool sends them: an `http` tool's origin, a `custom` tool's sandbox), and its
    /// `secret_header_names` and `secret_argument_names` say which are set. Returns the agent's
    /// secret in its stored form, `None` when it has none left.
    async fn settle_tool_config_secrets(
        &self,
        agent: &mut Agent,
        changes: BTreeMap<ToolId, ToolConfigSecretChanges>,
        previous: Option<&Agent>,
    ) -> Result<Option<String>, ApiError> {
        let account = agent.account_id;
        let kept = match previous.filter(|p| has_tool_config_secrets(&p.spec)) {
            None => StoredToolConfigSecrets::default(),
            Some(previous) => {
                let stored = self.tool_config_secrets.get(account, previous.id).await?;
                stored.as_deref().and_then(StoredToolConfigSecrets::decode).unwrap_or_default()
            }
        };
        let sets =
            |change: &SecretHeadersChange| matches!(change, SecretHeadersChange::Set(given) if !given.is_empty());
        let setting: Vec<ToolId> = changes
            .iter()
            .filter(|(_, change)| sets(&change.headers) || sets(&change.arguments))
            .map(|(tool_id, _)| *tool_id)
            .collect();
        let tools: HashMap<ToolId, platform_data::tools::Tool> = if setting.is_empty() {
            HashMap::new()
        } else {
            let found = self.references.tools.get_many(account, &setting).await?;
            found.into_iter().map(|tool| (tool.id, tool)).collect()
        };
        let mut stored = StoredToolConfigSecrets::default();
        let mut problems = Map::new();
        let listed: Vec<ToolId> = agent.spec.tools.clone();
        let keep = ToolConfigSecretChanges { headers: SecretHeadersChange::Keep, arguments: SecretHeadersChange::Keep };
        for tool_id in listed {
            let change = changes.get(&tool_id).unwrap_or(&keep);
            let tool = tools.get(&tool_id);
            let kinds = [
                (
                    &change.headers,
                    tool.filter(|tool| tool.spec.tool_type == ToolType::Http)
                        .map(|tool| tool.spec.secret_origin())
                        .filter(|origin| !origin.is_empty()),
                    "secret_headers",
                    "only http tools with a config.url send headers",
                    "secret_header_names",
                    &kept.headers,
                    &mut stored.headers,
                ),
                (
                    &change.arguments,
                    tool.and_then(|tool| tool.spec.secret_argument_origin()),
                    "secret_arguments",
                    "only http tools with a config.url and custom tools take arguments",
                    "secret_argument_names",
                    &kept.arguments,
                    &mut stored.arguments,
                ),
            ];
            for (change, origin, field, refusal, names_field, kept, stored) in kinds {
                let names: Vec<String> = match change {
                    SecretHeadersChange::Set(given) if !given.is_empty() => {
                        let Some(origin) = origin else {
                            problems.insert(format!("tool_configs.{tool_id}.{field}"), json!(refusal));
                            continue;
                        };
                        stored.insert(tool_id, encode_secret_headers(&origin, given));
                        given.keys().cloned().collect()
                    }
                    SecretHeadersChange::Set(_) | SecretHeadersChange::Remove => Vec::new(),
                    SecretHeadersChange::Keep => match (kept.get(&tool_id), previous) {
                        (Some(value), Some(previous)) => {
                            stored.insert(tool_id, value.clone());
                            names_of(&previous.spec, tool_id, names_field)
                        }
                        _ => Vec::new(),
                    },
                };
                if !names.is_empty() {
                    let entry = agent.spec.tool_configs.entry(tool_id.to_string()).or_insert_with(|| json!({}));
                    if let Value::Object(entry) = entry {
                        entry.insert(names_field.into(), json!(names));
                    }
                }
            }
        }
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid tool_configs.", problems));
        }
        Ok((!stored.is_empty()).then(|| stored.encode()))
    }

    /// An agent of the account that is not soft-deleted.
    /// Sub-agents, tools and MCP configurations must be active records of the account (an agent
    /// is not its own sub-agent). Only the lists `checked` names are read.
    async fn check_references(
        &self,
        account: AccountId,
        spec: &AgentSpec,
        own_id: Option<AgentId>,
        checked: ReferenceLists,
    ) -> Result<(), ApiError> {
        let mut problems = Map::new();
        if let Some(body_account) = spec.account_id.filter(|id| checked.account_id && *id != account) {
            problems.insert("account_id".into(), json!(format!("{body_account} is not the API key's account")));
        }
        let (agents, tools, mcps) = (
            ReferenceLists::pick(checked.agents, &spec.agents),
            ReferenceLists::pick(checked.tools, &spec.tools),
            ReferenceLists::pick(checked.mcps, &spec.mcps),
        );
        let sub_agents = active_in_order(&self.agents, account, &agents).await?;
        for (i, id) in agents.iter().enumerate() {
            if Some(*id) == own_id {
                problems.insert(format!("agents[{i}]"), json!("an agent cannot be its own sub-agent"));
            } else if !sub_agents.iter().any(|sub| sub.id == *id) {
                problems.insert(format!("agents[{i}]"), json!(format!("agent {id} does not exist")));
            }
        }
        let found = active_in_order(&self.references.tools, account, &tools).await?;
        for (i, id) in tools.iter().enumerate() {
            if !found.iter().any(|tool| tool.id == *id) {
                problems.insert(format!("tools[{i}]"), json!(format!("tool {id} does not exist")));
            }
        }
        // A run offers each sub-agent as a tool named after it: two that would share a name
        // (with each other, or with one of the agent's tools read here) cannot both be offered.
        let mut offered: HashMap<String, (Option<AgentId>, String)> = found
            .iter()
            .map(|tool| (model_tool_name(&tool.spec.name), (None, format!("tool \"{}\"", tool.spec.name))))
            .collect();
        for (i, id) in agents.iter().enumerate() {
            let Some(sub) = sub_agents.iter().find(|sub| sub.id == *id && Some(sub.id) != own_id) else { continue };
            let name = model_tool_name(&sub.spec.name);
            match offered.get(&name) {
                Some((holder_id, holder)) if *holder_id != Some(sub.id) => {
                    let issue = format!("its tool name \"{name}\" is also {holder}'s: rename one");
                    problems.insert(format!("agents[{i}]"), json!(issue));
                }
                _ => {
                    offered.insert(name, (Some(sub.id), format!("sub-agent \"{}\"", sub.spec.name)));
                }
            }
        }
        let found = self.references.mcps.active_ids(account, &mcps).await?;
        for (i, id) in mcps.iter().enumerate() {
            if !found.contains(id) {
                problems.insert(format!("mcps[{i}]"), json!(format!("MCP configuration {id} does not exist")));
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(ApiError::validation("Invalid references.", problems)) }
    }

    /// The detail (AgentResponse): the body with references expanded into objects.
    async fn expand(&self, agent: &Agent) -> Result<Value, ApiError> {
        let account = agent.account_id;
        let sub_agents = references(&self.agents, account, &agent.spec.agents).await?;
        let tools = references(&self.references.tools, account, &agent.spec.tools).await?;
        // The spec's "array of MCP configuration": each as `GET /mcps/{id}` shows it.
        let mcps: Vec<Value> = active_in_order(&self.references.mcps, account, &agent.spec.mcps)
            .await?
            .iter()
            .map(crate::mcps::view)
            .collect();
        let model = self.model_shown(agent).await?;
        let spec = &agent.spec;
        let text = |value: &Option<String>| value.clone().unwrap_or_default();
        Ok(json!({
            "id": agent.id,
            "type": spec.agent_type,
            "name": spec.name,
            "description": text(&spec.description),
            "instruction": text(&spec.instruction),
            "version": text(&spec.version),
            "framework": spec.framework,
            "tools": tools,
            "agents": sub_agents,
            "mcps": mcps,
            "language_model_id": model.language_model_id,
            "provider": model.provider,
            "model_name": model.model_name,
            "metadata": spec.metadata,
            "tool_configs": spec.tool_configs,
            "agent_config": spec.agent_config,
            "a2a_profile": spec.a2a_profile,
            "account_id": agent.account_id,
            "created_at": agent.created_at,
            "updated_at": agent.updated_at,
        }))
    }
}

/// The model fields of an agent detail: the spec's strings, `""` when unknown.
#[derive(Debug, Default, PartialEq, Eq)]
struct ModelShown {
    language_model_id: String,
    provider: String,
    model_name: String,
}

impl ModelShown {
    /// What an agent whose selector names no stored model shows: what it was given
    /// (`language_model_id`, or the legacy pair with `language_model_id: ""`).
    fn as_given(spec: &AgentSpec, selector: Option<&ModelSelector>) -> Self {
        let text = |value: &Option<String>| value.clone().unwrap_or_default();
        let mut shown = Self {
            language_model_id: String::new(),
            provider: text(&spec.provider),
            model_name: text(&spec.model_name),
        };
        match selector {
            Some(ModelSelector::Id(id)) => shown.language_model_id = id.clone(),
            Some(ModelSelector::Pair(provider, model_name)) => {
                (shown.provider, shown.model_name) = (provider.clone(), model_name.clone());
            }
            Some(ModelSelector::NameOrId(_)) | None => {}
        }
        shown
    }
}

impl AgentsService {
    /// The model an agent runs with, whichever selector names it (`language_model_id`, the
    /// legacy `provider` + `model_name` pair, or `agent_config.lm_provider`): all three fields
    /// from the stored model it resolves to (1 GetItem by id, else 1 Query), else as given.
    async fn model_shown(&self, agent: &Agent) -> Result<ModelShown, ApiError> {
        let Some(selector) = ModelSelector::of(&agent.spec) else { return Ok(ModelShown::as_given(&agent.spec, None)) };
        let found = find_model(&self.references.language_models, agent.account_id, &selector).await?;
        Ok(match found {
            Some(model) => ModelShown {
                language_model_id: model.id.to_string(),
                provider: model.spec.provider.as_str().to_owned(),
                model_name: model.spec.model_name.clone(),
            },
            None => ModelShown::as_given(&agent.spec, Some(&selector)),
        })
    }
}

/// The active records among `ids`, in the agent's order (one BatchGetItem per 100; deleted ones
/// are left out, a repeated id is shown once).
async fn active_in_order<T: RecordBody>(
    store: &RecordStore<T>,
    account: AccountId,
    ids: &[T::Id],
) -> Result<Vec<Record<T>>, ApiError> {
    let records = store.get_many(account, ids).await?;
    let mut active: HashMap<T::Id, Record<T>> = HashMap::new();
    for record in records {
        if record.deleted_at.is_none() {
            active.insert(record.id, record);
        }
    }
    Ok(ids.iter().filter_map(|id| active.remove(id)).collect())
}

/// The active records among `ids` as `{id, name, description}` references, in the agent's order.
async fn references<T: RecordBody>(
    store: &RecordStore<T>,
    account: AccountId,
    ids: &[T::Id],
) -> Result<Vec<Reference<T::Id>>, ApiError> {
    Ok(active_in_order(store, account, ids)
        .await?
        .into_iter()
        .map(|record| Reference {
            id: record.id,
            name: record.spec.name().to_owned(),
            description: record.spec.description().unwrap_or_default().to_owned(),
        })
        .collect())
}

impl HttpFunction for AgentsService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        let access = access(&request);
        Box::pin(self.gate.serve(request, access, |caller, request| self.route(caller, request)))
    }
}

/// One page of agents in the list envelope: `agents` is the page, newest first, of `total`.
pub fn list_page(agents: Vec<Agent>, total: usize, page: &PageRequest) -> Response<Body> {
    page.respond_page(agents.iter().map(ListItem::of).collect(), total, "Agents retrieved")
}

/// Every one of `agents` (newest first) in the spec's envelope (no `pagination`).
fn whole_list(agents: Vec<Agent>) -> Response<Body> {
    let items: Vec<ListItem> = agents.iter().map(ListItem::of).collect();
    success(StatusCode::OK, items, "Agents retrieved")
}

/// The names a `tool_configs` entry lists under `field` (`secret_header_names`,
/// `secret_argument_names`).
fn names_of(spec: &AgentSpec, tool_id: ToolId, field: &str) -> Vec<String> {
    match field {
        "secret_argument_names" => tool_config_secret_argument_names(spec, tool_id),
        _ => tool_config_secret_names(spec, tool_id),
    }
}

/// The `data` of `agent.created` and `agent.updated`.
fn agent_event(agent: &Agent) -> Value {
    json!({
        "id": agent.id,
        "name": agent.spec.name,
        "type": agent.spec.agent_type,
        "version": agent.spec.version.as_deref().unwrap_or_default(),
        "updated_at": agent.updated_at,
    })
}

/// The metadata key a query parameter filters on: `metadata[key]` (OpenAPI's `deepObject`, what
/// generated clients send) or the older `metadata.key`.
fn metadata_filter_key(parameter: &str) -> Option<&str> {
    if let Some(key) = parameter.strip_prefix("metadata.") {
        return Some(key);
    }
    parameter.strip_prefix("metadata[")?.strip_suffix(']')
}

/// `metadata.{key}=value`: a string equals the value; other JSON values compare as their text.
fn metadata_matches(metadata: &Map<String, Value>, key: &str, wanted: &str) -> bool {
    match metadata.get(key) {
        Some(Value::String(text)) => text == wanted,
        Some(other) => {
            // Compare the JSON text (`true`, `30`); `Value == &str` would match strings only.
            let text = other.to_string();
            text == wanted
        }
        None => false,
    }
}

/// A list that syncs flowtool agents first writes (the server's agents); every other GET only
/// reads (a runs list may tally the agent's old runs once, which any request would do).
pub(crate) fn access(request: &Request) -> Access {
    let syncs = Params::from_query(request.uri()).non_empty("sync_flowtool_agents").is_some();
    if syncs { Access::MayWrite } else { Access::by_method(request) }
}
