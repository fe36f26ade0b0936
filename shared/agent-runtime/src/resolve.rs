//! From a stored `config` agent to an `AgentRun`: its language model and key, its tools, one MCP
//! session per configuration (tools listed once), sub-agents as tools, and its limits.
//!
//! Limits: `timeout` of the request, else `metadata.timeout`, else `DEFAULT_RUN_TIMEOUT`, never
//! more than `MAX_RUN_TIMEOUT`; `agent_config.max_recursion_limit` model turns (default 100, at
//! most `MAX_RECURSION_LIMIT`); sub-agents nest at most `MAX_SUB_AGENT_DEPTH` deep; the fan-out of
//! tool calls within `RunSources::limits`.

use crate::engine::{AgentRun, DEFAULT_MAX_TURNS, RunLimits, SubAgentCalls, Tool, ToolContext, ToolError, execute};
use crate::providers::{self, Image, Message, ProviderError, ToolSpec};
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
use platform_data::secret_origin::{SecretRefused, origin_of};
use platform_data::secrets::RecordSecrets;
use platform_data::tools::{Tool as StoredTool, ToolSecrets, ToolStore, ToolType};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashSet};
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
    /// Images sent with the message, for vision-capable models.
    pub images: Vec<Image>,
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
            let provider = providers::for_model(&model.spec, api_key, self.client.clone())?;

            let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
            let records = self.tools.get_many(account, &spec.tools).await?;
            let config_secrets = if has_tool_config_secrets(spec) {
                let stored = self.tool_secrets.agents.get(account, agent.id).await?;
                stored.as_deref().and_then(StoredToolConfigSecrets::decode).unwrap_or_default()
            } else {
                StoredToolConfigSecrets::default()
            };
            for tool in records.iter().filter(|tool| tool.deleted_at.is_none()) {
                if matches!(tool.spec.tool_type, ToolType::Mcp | ToolType::Native) {
                    continue;
                }
                let entry = with_secret_arguments(agent, tool, &config_secrets.arguments)?;
                let secret_headers = self.tool_secret_headers(agent, tool, &config_secrets.headers).await?;
                let callable = from_stored(tool, entry.as_ref(), secret_headers, &self.client, &self.tool_sandbox)
                    .map_err(|err| PrepareError::Agent(format!("tool {}: {err}", tool.spec.name)))?;
                tools.push(callable);
            }

            let mut sessions = Vec::new();
            let configs = self.mcps.get_many(account, &spec.mcps).await?;
            let mut taken: HashSet<String> = tools.iter().map(|tool| tool.spec().name.clone()).collect();
            for config in configs.iter().filter(|config| config.deleted_at.is_none()) {
                let target = self.mcp_target(config).await?;
                let (session, server_tools) = mcp::open_session(&self.client, &target)
                    .await
                    .map_err(|err| PrepareError::Agent(format!("MCP configuration {}: {err}", config.spec.name)))?;
                let session = Arc::new(session);
                for tool in &server_tools {
                    // DESIGN.md: `{mcp name}__{tool}` when names clash.
                    let mut name = model_tool_name(&tool.name);
                    if !taken.insert(name.clone()) {
                        name = model_tool_name(&format!("{}__{}", config.spec.name, tool.name));
                        taken.insert(name.clone());
                    }
                    tools.push(Arc::new(McpTool::new(Arc::clone(&session), tool, name)));
                }
                sessions.push(session);
            }

            if depth < MAX_SUB_AGENT_DEPTH {
                let subs = self.agents.get_many(account, &spec.agents).await?;
                for sub in subs.into_iter().filter(|sub| sub.deleted_at.is_none() && sub.id != agent.id) {
                    let name = model_tool_name(&sub.spec.name);
                    if taken.insert(name.clone()) {
                        tools.push(Arc::new(SubAgentTool::new(Arc::clone(self), sub, name, depth + 1)));
                    }
                }
            }

            let config = &spec.agent_config;
            let run = AgentRun {
                run_id,
                agent_id: agent.id,
                instruction: spec.instruction.clone(),
                history: request.history,
                message: request.message,
                images: request.images,
                provider: Arc::from(provider),
                tools,
                max_turns: config.max_turns().unwrap_or(DEFAULT_MAX_TURNS),
                planning: config.planning(),
                tool_output_sharing: config.tool_output_sharing(),
                timeout: run_timeout(request.timeout, &spec.metadata, MAX_RUN_TIMEOUT),
                stated_timeout: None,
                limits: self.limits,
                sub_agent_calls: SubAgentCalls::default(),
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
        let prepared = self
            .sources
            .prepare(&self.agent, request, context.run_id, self.depth)
            .await
            .map_err(|err| format!("the agent {} could not start: {err}", self.agent.spec.name))?;
        let sessions = prepared.sessions;
        let mut run = prepared.run;
        // The sub-agent's calls of sub-agents count against the same run's cap.
        run.sub_agent_calls = context.sub_agent_calls.clone();
        // The sub-agent's own events are not part of the parent's stream; its answer is.
        let (events, _ignored) = tokio::sync::mpsc::unbounded_channel();
        let outcome = execute(run, events, std::future::pending()).await;
        PreparedRun::close(sessions).await;
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
}
