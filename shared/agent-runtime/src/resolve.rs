//! From a stored `config` agent to an `AgentRun`: its language model and key, its tools, one MCP
//! session per configuration (tools listed once), sub-agents as tools, and its limits.
//!
//! Limits: `timeout` of the request, else `metadata.timeout`, else `DEFAULT_RUN_TIMEOUT`, never
//! more than `MAX_RUN_TIMEOUT`; `agent_config.max_recursion_limit` model turns (default 100, at
//! most `MAX_RECURSION_LIMIT`); sub-agents nest at most `MAX_SUB_AGENT_DEPTH` deep; the fan-out of
//! tool calls within `RunSources::limits`.

use crate::engine::{AgentRun, DEFAULT_MAX_TURNS, RunLimits, SubAgentCalls, Tool, ToolContext, ToolError, execute};
use crate::providers::{self, Attachment, Message, ProviderError, ToolSpec};
use crate::spend::RunModel;
use crate::timeouts::{MAX_RUN_TIMEOUT, run_timeout};
use crate::tools::{from_stored, mcp::McpTool, model_tool_name, python::ToolSandbox};
use futures_util::future::BoxFuture;
use mcp::{McpSession, McpTarget};
use outbound::TenantClient;
use platform_data::agent_spec::{
    AgentType, StoredToolConfigSecrets, has_tool_config_secrets, tool_config_secret_argument_names,
    tool_config_secret_names,
};
use platform_data::agents::{Agent, AgentStore};
use platform_data::flow_server_keys::FlowServerKeys;
use platform_data::ids::{AccountId, LanguageModelId, McpConfigId, RunId, ToolId};
use platform_data::language_models::{LanguageModelStore, ModelSelector, find_model, read_api_key};
use platform_data::mcp_configs::{McpConfig, McpConfigStore, decode_secret_headers};
use platform_data::records::{Record, RecordBody};
use platform_data::secret_origin::{SecretRefused, origin_of};
use platform_data::secrets::RecordSecrets;
use platform_data::tools::{Tool as StoredTool, ToolSecrets, ToolStore, ToolType};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use storage::StoreError;

/// How deep sub-agents may call sub-agents.
pub const MAX_SUB_AGENT_DEPTH: u32 = 3;

/// Where a run's parts are read from.
pub struct RunSources {
    pub agents: AgentStore,
    pub tools: ToolStore,
    pub mcps: McpConfigStore,
    pub models: LanguageModelStore,
    pub model_keys: RecordSecrets<LanguageModelId>,
    pub mcp_secrets: RecordSecrets<McpConfigId>,
    /// Secret headers of `http` tools and of agents' `tool_configs`.
    pub tool_secrets: ToolSecrets,
    pub client: TenantClient,
    /// Bedrock Runtime, for Bedrock models (AWS's endpoint or the operator's).
    pub bedrock: aws_env::bedrock::BedrockRuntime,
    /// Where `flowtool` agents' flows run.
    pub flow_server: FlowServerAccess,
    /// Where custom Python tools run (`TOOL_SANDBOX_FUNCTION`).
    pub tool_sandbox: ToolSandbox,
    /// How far each run may fan out (the `RUN_*` settings).
    pub limits: RunLimits,
}

/// `agent`'s `tool_configs` entry for `tool`, its secret arguments (`stored`, the agent's stored
/// form) added to its `arguments`, each given out only where it was bound (the tool's origin
/// as it is now, or a custom tool's sandbox).
fn with_secret_arguments(
    agent: &Agent,
    tool: &StoredTool,
    stored: &BTreeMap<ToolId, String>,
) -> Result<Option<Value>, PrepareError> {
    let entry = agent.spec.tool_configs.get(&tool.id.to_string()).cloned();
    if tool_config_secret_argument_names(&agent.spec, tool.id).is_empty() {
        return Ok(entry);
    }
    let refused = |err: SecretRefused| PrepareError::Agent(format!("tool {}: {err}", tool.spec.name));
    let origin = tool.spec.secret_argument_origin().ok_or_else(|| refused(SecretRefused::Unreadable))?;
    let stored = stored.get(&tool.id).ok_or_else(|| refused(SecretRefused::Unreadable))?;
    let secret = decode_secret_headers(stored, &origin).map_err(refused)?;
    let mut entry = match entry {
        Some(Value::Object(entry)) => entry,
        _ => Map::new(),
    };
    let arguments = entry.entry("arguments").or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(arguments) = arguments {
        arguments.extend(secret.into_iter().map(|(name, value)| (name, Value::String(value))));
    }
    Ok(Some(Value::Object(entry)))
}

/// The configured flow server (`FLOW_SERVER_URL`) and where its key is (`FLOW_SERVER_SECRET_ID`).
#[derive(Clone, Default)]
pub struct FlowServerAccess {
    pub base_url: Option<String>,
    pub key: Option<(aws_env::Lazy<aws_sdk_secretsmanager::Client>, String)>,
}

impl FlowServerAccess {
    /// The configured server with its key, read now; `Err` says what is not configured.
    pub async fn server(&self) -> Result<flow_server::FlowServer, String> {
        let base_url = self
            .base_url
            .clone()
            .filter(|url| !url.trim().is_empty())
            .ok_or("no flow server is configured (FlowServerUrl)")?;
        let api_key = self.configured_key().await?.ok_or("the flow server has no API key (FlowServerSecret)")?;
        Ok(flow_server::FlowServer { base_url, api_key })
    }

    /// The server of a flowtool agent synced from `base_url` (`agent_config.flowtool.base_url`),
    /// with the account's key stored for that origin by a sync; failing that, when `base_url` is
    /// the configured server, `FlowServerSecret`. No other key is ever sent there.
    pub async fn server_at(
        &self,
        base_url: &str,
        account_id: AccountId,
        keys: &FlowServerKeys,
    ) -> Result<flow_server::FlowServer, String> {
        let stored = keys.get(account_id, base_url).await.map_err(|err| {
            tracing::error!(error = %err, %account_id, "flow server key not readable");
            "the flow server key could not be read; sync the agent's flows again with the api_key".to_owned()
        })?;
        let origin = origin_of(base_url);
        let configured = self.base_url.as_deref().and_then(origin_of).is_some_and(|own| Some(own) == origin);
        let api_key = match stored {
            Some(key) => Some(key),
            None if configured => self.configured_key().await?,
            None => None,
        };
        let api_key = api_key.filter(|key| !key.trim().is_empty()).ok_or_else(|| {
            format!(
                "no API key is stored for the flow server at {}: sync from it with its api_key",
                origin.unwrap_or_default()
            )
        })?;
        Ok(flow_server::FlowServer { base_url: base_url.to_owned(), api_key })
    }

    /// `FlowServerSecret`'s value, if set.
    async fn configured_key(&self) -> Result<Option<String>, String> {
        let key = match &self.key {
            Some((client, secret_id)) => {
                platform_data::secrets::read_secret(client, secret_id).await.map_err(|err| {
                    tracing::error!(error = %err, "flow server key not readable");
                    "the flow server key could not be read".to_owned()
                })?
            }
            None => None,
        };
        Ok(key.filter(|key| !key.trim().is_empty()))
    }
}

/// Where and how a flowtool agent's flow runs.
pub struct FlowTarget {
    pub server: flow_server::FlowServer,
    pub flow_id: String,
    pub input_type: flow_server::IoType,
    pub output_type: flow_server::IoType,
}

impl RunSources {
    /// Where language model providers call out.
    pub fn provider_clients(&self) -> providers::ProviderClients {
        providers::ProviderClients { tenant: self.client.clone(), bedrock: self.bedrock.clone() }
    }

    /// A flowtool agent's flow, from `agent_config.flowtool`: `flow_id`; the server it was synced
    /// from (`base_url`, with the account's key for it), or for agents synced before that was
    /// kept, the configured one; `input_type` / `output_type` (default `chat`).
    pub async fn flow_target(&self, agent: &Agent) -> Result<FlowTarget, String> {
        let flowtool = agent.spec.agent_config.flowtool().cloned().unwrap_or_default();
        let flow_id = flowtool.flow_id.ok_or("the flowtool agent has no agent_config.flowtool.flow_id")?;
        let io_type = |key: &str, name: Option<&str>| match name {
            None => Ok(flow_server::IoType::Chat),
            Some(name) => flow_server::IoType::parse(name)
                .ok_or_else(|| format!("agent_config.flowtool.{key} must be one of chat, text")),
        };
        let input_type = io_type("input_type", flowtool.input_type.as_deref())?;
        let output_type = io_type("output_type", flowtool.output_type.as_deref())?;
        let server = match flowtool.base_url.as_deref() {
            Some(base_url) => {
                self.flow_server.server_at(base_url, agent.account_id, &self.tool_secrets.flow_server_keys).await?
            }
            None => self.flow_server.server().await?,
        };
        Ok(FlowTarget { server, flow_id, input_type, output_type })
    }
}

/// What a run is asked.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub message: String,
    /// Images and documents sent with the message, for models that read them.
    pub attachments: Vec<Attachment>,
    pub timeout: Option<Duration>,
    /// Earlier conversation (memory), oldest first.
    pub history: Vec<Message>,
}

/// Why a run could not be prepared. Each ends the run `failed`: `Store` as `error` (logged),
/// `Agent` as `error` with its message, `Provider` as `provider_error`.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Agent(String),
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// The records `ids` name, in the agent's order (a repeated id once): an error naming the
/// first one that is deleted ("restore it or remove it") or does not exist.
fn all_active<'r, T: RecordBody>(
    records: &'r [Record<T>],
    ids: &[T::Id],
    kind: &str,
) -> Result<Vec<&'r Record<T>>, PrepareError> {
    let mut active: Vec<&Record<T>> = Vec::new();
    for id in ids {
        if active.iter().any(|seen| seen.id == *id) {
            continue;
        }
        let Some(record) = records.iter().find(|record| record.id == *id) else {
            return Err(PrepareError::Agent(format!("{kind} {id} does not exist: remove it from the agent")));
        };
        if record.deleted_at.is_some() {
            return Err(PrepareError::Agent(format!(
                "{kind} \"{}\" ({id}) is deleted: restore it or remove it from the agent",
                record.spec.name()
            )));
        }
        active.push(record);
    }
    Ok(active)
}

/// The names a run offers the model, each once: what claims a taken one ends the run at its
/// start, naming both (writes refuse clashes they can see; a later rename can make one).
#[derive(Default)]
struct ModelToolNames {
    /// A name and what has it.
    taken: HashMap<String, String>,
}

impl ModelToolNames {
    fn is_free(&self, name: &str) -> bool {
        !self.taken.contains_key(name)
    }

    fn claim(&mut self, name: &str, what: &str) -> Result<(), PrepareError> {
        if let Some(holder) = self.taken.get(name) {
            return Err(PrepareError::Agent(format!(
                "{what} and {holder} are both offered to the model as \"{name}\": rename one"
            )));
        }
        self.taken.insert(name.to_owned(), what.to_owned());
        Ok(())
    }
}

/// An MCP session a run opened, and the tools its server listed.
struct OpenSession {
    config: McpConfigId,
    session: Arc<McpSession>,
    tools: Vec<mcp::McpTool>,
}

/// A run ready to execute, and the MCP sessions to close after it.
pub struct PreparedRun {
    pub run: AgentRun,
    pub sessions: Vec<Arc<McpSession>>,
}

impl PreparedRun {
    /// Ends the MCP sessions the run opened.
    pub async fn close(sessions: Vec<Arc<McpSession>>) {
        for session in sessions {
            if let Ok(session) = Arc::try_unwrap(session) {
                session.close().await;
            }
        }
    }
}

/// A model selector as a message names it.
fn describe(selector: &ModelSelector) -> String {
    match selector {
        ModelSelector::Id(id) => format!("language_model_id {id}"),
        ModelSelector::Pair(provider, model) => format!("provider {provider}, model_name {model}"),
        ModelSelector::NameOrId(name) => format!("lm_provider {name}"),
    }
}

impl RunSources {
    /// How to reach a stored MCP configuration: its URL, its headers with the secret ones read
    /// from Secrets Manager (given out only for the origin they were stored for), its timeout.
    pub async fn mcp_target(&self, config: &McpConfig) -> Result<McpTarget, PrepareError> {
        let secret = if config.spec.secret_header_names.is_empty() {
            BTreeMap::new()
        } else {
            match self.mcp_secrets.get(config.account_id, config.id).await? {
                None => BTreeMap::new(),
                Some(stored) => decode_secret_headers(&stored, &config.spec.secret_origin())
                    .map_err(|err| PrepareError::Agent(format!("MCP configuration {}: {err}", config.spec.name)))?,
            }
        };
        Ok(McpTarget {
            url: config.spec.url.clone(),
            headers: config.spec.headers.clone().into_iter().chain(secret).collect(),
            timeout: Duration::from_secs(config.spec.timeout_seconds),
        })
    }

    /// One MCP session per configuration, its tools listed once; when one cannot open, those
    /// already open are closed and the run cannot start.
    async fn open_sessions(&self, configs: &[&McpConfig]) -> Result<Vec<OpenSession>, PrepareError> {
        let mut sessions = Vec::new();
        for config in configs {
            let opened = match self.mcp_target(config).await {
                Ok(target) => mcp::open_session(&self.client, &target)
                    .await
                    .map_err(|err| PrepareError::Agent(format!("MCP configuration {}: {err}", config.spec.name))),
                Err(err) => Err(err),
            };
            match opened {
                Ok((session, tools)) => {
                    sessions.push(OpenSession { config: config.id, session: Arc::new(session), tools })
                }
                Err(err) => {
                    PreparedRun::close(sessions.into_iter().map(|open: OpenSession| open.session).collect()).await;
                    return Err(err);
                }
            }
        }
        Ok(sessions)
    }

    /// The secret headers an `http` tool's calls send: its own, then its `tool_configs` entry's
    /// (`config_secrets`, the agent's stored form), each given out only for the origin of the
    /// tool's URL as it is now.
    async fn tool_secret_headers(
        &self,
        agent: &Agent,
        tool: &StoredTool,
        config_secrets: &BTreeMap<ToolId, String>,
    ) -> Result<BTreeMap<String, String>, PrepareError> {
        let mut headers = BTreeMap::new();
        if tool.spec.tool_type != ToolType::Http {
            return Ok(headers);
        }
        let origin = tool.spec.secret_origin();
        let refused = |err: SecretRefused| PrepareError::Agent(format!("tool {}: {err}", tool.spec.name));
        if !tool.spec.secret_header_names().is_empty()
            && let Some(stored) = self.tool_secrets.tools.get(tool.account_id, tool.id).await?
        {
            headers.extend(decode_secret_headers(&stored, &origin).map_err(refused)?);
        }
        if !tool_config_secret_names(&agent.spec, tool.id).is_empty() {
            let stored = config_secrets.get(&tool.id).ok_or_else(|| refused(SecretRefused::Unreadable))?;
            headers.extend(decode_secret_headers(stored, &origin).map_err(refused)?);
        }
        Ok(headers)
    }

    /// Prepares `agent` (a `config` agent) for run `run_id`, at sub-agent `depth` (0 at the top).
    pub fn prepare<'a>(
        self: &'a Arc<Self>,
        agent: &'a Agent,
        request: RunRequest,
        run_id: RunId,
        depth: u32,
    ) -> BoxFuture<'a, Result<PreparedRun, PrepareError>> {
        Box::pin(async move {
            let spec = &agent.spec;
            if spec.agent_type != AgentType::Config {
                return Err(PrepareError::Agent("only config agents run on the tool-calling engine".into()));
            }
            let account = agent.account_id;
            let selector = ModelSelector::of(spec)
                .ok_or_else(|| PrepareError::Agent("the agent names no language model".into()))?;
            let model = find_model(&self.models, account, &selector).await?.ok_or_else(|| {
                PrepareError::Agent(format!("the agent's language model ({}) does not exist", describe(&selector)))
            })?;
            let api_key =
                read_api_key(&self.model_keys, &model).await.map_err(|err| PrepareError::Agent(err.to_string()))?;
            let provider = providers::for_model(&model.spec, api_key, &self.provider_clients())?;

            // Everything the agent names must be there: a run never silently goes without a
            // tool, an MCP configuration or a sub-agent (they are checked before anything opens).
            let stored_tools = self.tools.get_many(account, &spec.tools).await?;
            let mut record_tools = Vec::new();
            let mut mcp_tools = Vec::new();
            for tool in all_active(&stored_tools, &spec.tools, "tool")? {
                match tool.spec.mcp_tool() {
                    _ if tool.spec.tool_type == ToolType::Native => {
                        return Err(PrepareError::Agent(format!(
                            "tool \"{}\" ({}) is a native tool, which the platform has no built-in tool behind: \
                             remove it from the agent",
                            tool.spec.name, tool.id
                        )));
                    }
                    Some(Ok(config)) => mcp_tools.push((tool, config)),
                    Some(Err(problem)) => {
                        return Err(PrepareError::Agent(format!(
                            "tool \"{}\" ({}): {problem}",
                            tool.spec.name, tool.id
                        )));
                    }
                    None => record_tools.push(tool),
                }
            }
            let mut config_ids = spec.mcps.clone();
            config_ids.extend(mcp_tools.iter().map(|(_, config)| config.mcp_id));
            let stored_configs = self.mcps.get_many(account, &config_ids).await?;
            let agent_configs = all_active(&stored_configs, &spec.mcps, "MCP configuration")?;
            for (tool, config) in &mcp_tools {
                all_active(&stored_configs, &[config.mcp_id], "MCP configuration")
                    .map_err(|err| PrepareError::Agent(format!("tool \"{}\" ({}): {err}", tool.spec.name, tool.id)))?;
            }
            let stored_subs = if depth < MAX_SUB_AGENT_DEPTH {
                self.agents.get_many(account, &spec.agents).await?
            } else {
                Vec::new()
            };
            // Documented: sub-agents nest at most MAX_SUB_AGENT_DEPTH deep (none offered below).
            let sub_ids = if depth < MAX_SUB_AGENT_DEPTH { spec.agents.as_slice() } else { &[] };
            let subs = all_active(&stored_subs, sub_ids, "sub-agent")?;
            if subs.iter().any(|sub| sub.id == agent.id) {
                return Err(PrepareError::Agent("the agent names itself as a sub-agent: remove it".into()));
            }

            // Every name the model is offered is claimed before any MCP session opens.
            let mut names = ModelToolNames::default();
            let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
            let config_secrets = if has_tool_config_secrets(spec) {
                let stored = self.tool_secrets.agents.get(account, agent.id).await?;
                stored.as_deref().and_then(StoredToolConfigSecrets::decode).unwrap_or_default()
            } else {
                StoredToolConfigSecrets::default()
            };
            for tool in record_tools {
                let entry = with_secret_arguments(agent, tool, &config_secrets.arguments)?;
                let secret_headers = self.tool_secret_headers(agent, tool, &config_secrets.headers).await?;
                let callable = from_stored(tool, entry.as_ref(), secret_headers, &self.client, &self.tool_sandbox)
                    .map_err(|err| PrepareError::Agent(format!("tool {}: {err}", tool.spec.name)))?;
                names.claim(&callable.spec().name, &format!("tool \"{}\"", tool.spec.name))?;
                tools.push(callable);
            }
            let mut mcp_tool_names = Vec::new();
            for (tool, _) in &mcp_tools {
                let name = model_tool_name(&tool.spec.name);
                names.claim(&name, &format!("tool \"{}\"", tool.spec.name))?;
                mcp_tool_names.push(name);
            }
            let mut sub_names = Vec::new();
            for sub in &subs {
                let name = model_tool_name(&sub.spec.name);
                names.claim(&name, &format!("sub-agent \"{}\"", sub.spec.name))?;
                sub_names.push(name);
            }

            // One session per MCP configuration, shared by the agent's `mcps` and its `mcp` tools.
            let mut configs = agent_configs.clone();
            for (_, config) in &mcp_tools {
                if !configs.iter().any(|open| open.id == config.mcp_id)
                    && let Some(stored) = stored_configs.iter().find(|stored| stored.id == config.mcp_id)
                {
                    configs.push(stored);
                }
            }
            let sessions = self.open_sessions(&configs).await?;
            let listed = |id: McpConfigId| sessions.iter().find(|open| open.config == id);
            let unlisted = mcp_tools.iter().find(|(_, config)| {
                listed(config.mcp_id).is_none_or(|open| !open.tools.iter().any(|tool| tool.name == config.tool_name))
            });
            if let Some((tool, config)) = unlisted {
                let problem = format!(
                    "tool \"{}\" ({}): the MCP server lists no tool \"{}\"",
                    tool.spec.name, tool.id, config.tool_name
                );
                PreparedRun::close(sessions.into_iter().map(|open| open.session).collect()).await;
                return Err(PrepareError::Agent(problem));
            }
            for ((tool, config), name) in mcp_tools.iter().zip(mcp_tool_names) {
                let Some(open) = listed(config.mcp_id) else { continue };
                let Some(server_tool) = open.tools.iter().find(|listed| listed.name == config.tool_name) else {
                    continue;
                };
                let callable = McpTool::new(Arc::clone(&open.session), server_tool, name);
                tools.push(Arc::new(callable.described(tool.spec.description.as_deref())));
            }
            for (sub, name) in subs.into_iter().zip(sub_names) {
                tools.push(Arc::new(SubAgentTool::new(Arc::clone(self), sub.clone(), name, depth + 1)));
            }
            for config in &agent_configs {
                let Some(open) = listed(config.id) else { continue };
                for tool in &open.tools {
                    // DESIGN.md: `{mcp name}__{tool}` when names clash.
                    let mut name = model_tool_name(&tool.name);
                    if !names.is_free(&name) {
                        name = model_tool_name(&format!("{}__{}", config.spec.name, tool.name));
                    }
                    names.taken.insert(name.clone(), format!("MCP tool \"{}\"", tool.name));
                    tools.push(Arc::new(McpTool::new(Arc::clone(&open.session), tool, name)));
                }
            }
            let sessions = sessions.into_iter().map(|open| open.session).collect();

            let config = &spec.agent_config;
            let run = AgentRun {
                run_id,
                agent_id: agent.id,
                instruction: spec.instruction.clone(),
                history: request.history,
                message: request.message,
                attachments: request.attachments,
                provider: Arc::from(provider),
                model: RunModel { model_id: model.id.to_string(), pricing: model.spec.pricing },
                model_name: model.spec.model_name.clone(),
                provider_name: crate::trace::provider_name(model.spec.provider),
                tools,
                max_turns: config.max_turns().unwrap_or(DEFAULT_MAX_TURNS),
                planning: config.planning(),
                tool_output_sharing: config.tool_output_sharing(),
                timeout: run_timeout(request.timeout, &spec.metadata, MAX_RUN_TIMEOUT),
                stated_timeout: None,
                limits: self.limits,
                sub_agent_calls: SubAgentCalls::default(),
                gate: None,
            };
            Ok(PreparedRun { run, sessions })
        })
    }
}

/// A sub-agent offered as a tool taking `message`: a call runs it to its end (within the
/// parent's run, so a cancel or timeout of the parent stops it too).
pub struct SubAgentTool {
    spec: ToolSpec,
    sources: Arc<RunSources>,
    agent: Agent,
    depth: u32,
}

impl SubAgentTool {
    fn new(sources: Arc<RunSources>, agent: Agent, name: String, depth: u32) -> Self {
        let description =
            agent.spec.description.clone().unwrap_or_else(|| format!("Ask the agent {}", agent.spec.name));
        let parameters = json!({
            "type": "object",
            "properties": {"message": {"type": "string", "description": "What to ask the agent"}},
            "required": ["message"],
        });
        Self { spec: ToolSpec { name, description, parameters }, sources, agent, depth }
    }

    async fn ask(&self, arguments: Map<String, Value>, context: &ToolContext) -> Result<Value, String> {
        let message = arguments.get("message").and_then(Value::as_str).ok_or("the call needs a message")?.to_owned();
        let request = RunRequest { message, ..RunRequest::default() };
        // The sub-agent's span covers its preparation (its MCP sessions) and their close too.
        let mut span = crate::trace::sub_agent_span(&self.agent);
        let prepared = span.run(self.sources.prepare(&self.agent, request, context.run_id, self.depth)).await;
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(err) => {
                let message = format!("the agent {} could not start: {err}", self.agent.spec.name);
                span.fail("prepare_error", &message);
                return Err(message);
            }
        };
        let sessions = prepared.sessions;
        let mut run = prepared.run;
        // The sub-agent's calls of sub-agents count against the same run's cap.
        run.sub_agent_calls = context.sub_agent_calls.clone();
        // Its turns are checked against, and charged to, the same account's budget.
        run.gate = context.gate.clone();
        // The sub-agent's own events are not part of the parent's stream; its answer is.
        let (events, _ignored) = tokio::sync::mpsc::unbounded_channel();
        span.set(telemetry::genai::PROVIDER_NAME, run.provider_name);
        span.set(telemetry::genai::REQUEST_MODEL, run.model_name.clone());
        let outcome = span.run(execute(run, events, std::future::pending())).await;
        crate::trace::record_end(&mut span, &outcome.result, &outcome.spend.bill(), outcome.steps);
        span.run(PreparedRun::close(sessions)).await;
        // The sub-agent's turns (its own sub-agents' included) are the parent run's spend.
        context.spent.add(&outcome.spend);
        outcome.result.map(Value::String).map_err(|(reason, message)| format!("{}: {message}", reason.as_str()))
    }
}

impl Tool for SubAgentTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        arguments: Map<String, Value>,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move { self.ask(arguments, context).await.map_err(ToolError::Failed) })
    }

    fn is_sub_agent(&self) -> bool {
        true
    }

    fn kind(&self) -> &'static str {
        "agent"
    }
}
