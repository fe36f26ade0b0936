//! Flowtool sync: an agent of type `flowtool` for every flow of the flow server that has none.
//!
//! The flow server's base URL comes from the `FLOW_SERVER_URL` setting and its API key from the
//! `FLOW_SERVER_SECRET_ID` secret; a sync body's `base_url` and `api_key` override them. The
//! stored key is only ever sent to the configured server: a body naming another `base_url`
//! must bring its own `api_key`. An `api_key` sent in the body, once the server accepted it, is
//! kept as the account's write-only key of that server's origin (`FlowServerKeys`): the agents'
//! runs use it.
//!
//! Each agent keeps where its flow came from and how it runs, in `agent_config.flowtool`:
//! `flow_id`, `endpoint_name`, `base_url`, and `input_type` / `output_type` (`chat` or `text`,
//! read from the flow's graph: one GET of the flow, as the list carries no graph; `chat` when
//! the graph has no chat or text component). A flow "has an agent" when any agent of the
//! account, soft-deleted ones included, carries its id in `agent_config.flowtool.flow_id`: a
//! deleted flow agent stays deleted (restore it to use it) instead of coming back at every sync;
//! an active one gets the types its flow's graph shows now (a flow edited since).
//!
//! Calls: [1 GetSecretValue] + the flow list (one HTTP GET) + [1 PutSecretValue, or CreateSecret,
//! when a key was sent] + 1 Query of the account's agents + one HTTP GET per flow not deleted,
//! and 1 TransactWriteItems per created or refreshed agent.

use crate::envelope::{ApiError, ErrorCode};
use aws_sdk_secretsmanager::Client as SecretsClient;
use chrono::{DateTime, Utc};
use flow_server::{Flow, FlowIo, FlowServer, IoType};
use outbound::TenantClient;
use platform_data::agent_config::{AgentConfig, FlowtoolConfig};
use platform_data::agent_spec::{AgentType, MAX_TEXT_LENGTH, validate_agent_spec};
use platform_data::agents::{Agent, AgentStore};
use platform_data::flow_server_keys::FlowServerKeys;
use platform_data::ids::{AccountId, AgentId};
use platform_data::records::WriteError;
use platform_data::secrets::read_secret;
use platform_data::validation::{Expected, check_base_url, check_shape};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// Where the flow server is when a sync body does not say.
#[derive(Clone)]
pub struct FlowServerSettings {
    /// `FLOW_SERVER_URL`; empty means none is configured.
    pub base_url: Option<String>,
    pub secrets: aws_env::Lazy<SecretsClient>,
    /// `FLOW_SERVER_SECRET_ID`: the secret holding the API key (it may have no value yet).
    pub secret_id: Option<String>,
    /// The guarded client flow lists go through.
    pub client: TenantClient,
}

/// What a sync did, flow by flow.
#[derive(Debug, Default, Serialize)]
pub struct SyncReport {
    pub total_flows: usize,
    pub created: Vec<SyncedFlow>,
    /// Agents whose input or output type changed with their flow.
    pub updated: Vec<SyncedFlow>,
    pub skipped: Vec<SyncedFlow>,
    pub failed: Vec<SyncedFlow>,
}

/// The flow server a sync talks to, and whether its key came with the request (then it is kept
/// for the account).
pub struct SyncSource {
    pub server: FlowServer,
    pub key_sent: bool,
}

/// One flow's outcome.
#[derive(Debug, Serialize)]
pub struct SyncedFlow {
    pub flow_id: String,
    pub flow_name: String,
    /// The agent created, or the one that already had the flow.
    pub agent_id: Option<AgentId>,
    /// Why it was skipped or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl FlowServerSettings {
    /// The server a sync talks to: the body's `base_url` and `api_key` (optional JSON, may be
    /// empty) over the settings. 400 when the body is malformed or a credential is missing,
    /// 422 for an invalid `base_url`.
    pub async fn server(&self, body: &[u8]) -> Result<SyncSource, ApiError> {
        let overrides = parse_overrides(body)?;
        let base_url = overrides
            .get("base_url")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| self.base_url.clone().filter(|url| !url.trim().is_empty()))
            .ok_or_else(|| {
                missing("No flow server is configured: set the FlowServerUrl parameter or send base_url.", "base_url")
            })?;
        if let Err(issue) = check_base_url(&base_url) {
            return Err(ApiError::validation(
                "The flow server URL is invalid.",
                Map::from_iter([("base_url".to_owned(), json!(issue))]),
            ));
        }
        // The stored key belongs to the configured server: it is never sent to a URL a request
        // names, or any caller could collect it.
        let own_server = overrides.get("base_url").is_none();
        let key_sent = overrides.get("api_key").is_some();
        let api_key = match overrides.get("api_key").and_then(Value::as_str) {
            Some(key) => Some(key.to_owned()),
            None if !own_server => {
                return Err(missing("A base_url in the request needs its own api_key.", "api_key"));
            }
            None => match &self.secret_id {
                Some(secret_id) => read_secret(&self.secrets, secret_id).await?,
                None => None,
            },
        };
        let api_key = api_key.filter(|key| !key.trim().is_empty()).ok_or_else(|| {
            missing("No flow server API key: store it in the FlowServerSecret secret or send api_key.", "api_key")
        })?;
        Ok(SyncSource { server: FlowServer { base_url, api_key }, key_sent })
    }
}

/// Creates a flowtool agent for every flow of `source` that has none in the account, refreshes
/// the types of those that have one, and keeps a key sent with the request.
pub async fn sync_flowtool_agents(
    agents: &AgentStore,
    keys: &FlowServerKeys,
    client: &TenantClient,
    source: &SyncSource,
    account: AccountId,
    now: DateTime<Utc>,
) -> Result<SyncReport, ApiError> {
    let server = &source.server;
    let flows = server.list_flows(client).await.map_err(|err| {
        tracing::info!(base_url = %outbound::loggable_url(&server.base_url), error = %err, "flow list failed");
        ApiError::new(ErrorCode::BadRequest, "Could not fetch flows from the flow server.")
            .with_detail("base_url", server.base_url.clone())
            .with_detail("error", err.to_string())
    })?;
    if source.key_sent {
        keys.put(account, &server.base_url, &server.api_key).await.map_err(|err| ApiError::internal(&err))?;
    }
    let stored = agents.list(account).await?;
    let mut by_flow: HashMap<&str, &Agent> = HashMap::new();
    for agent in &stored {
        if agent.spec.agent_type == AgentType::Flowtool
            && let Some(flow_id) = agent.spec.agent_config.flowtool().and_then(|flowtool| flowtool.flow_id.as_deref())
        {
            by_flow.entry(flow_id).or_insert(agent);
        }
    }
    let mut report = SyncReport { total_flows: flows.len(), ..SyncReport::default() };
    for flow in flows {
        let outcome = |agent_id: Option<AgentId>, reason: Option<String>| SyncedFlow {
            flow_id: flow.id.clone(),
            flow_name: flow.name.clone(),
            agent_id,
            reason,
        };
        if let Some(agent) = by_flow.get(flow.id.as_str()).filter(|agent| agent.deleted_at.is_some()) {
            let reason = "the flow's agent is deleted; restore it to use it";
            report.skipped.push(outcome(Some(agent.id), Some(reason.into())));
            continue;
        }
        let io = match server.flow_io(client, &flow.id).await {
            Ok(io) => io,
            Err(err) => {
                let agent_id = by_flow.get(flow.id.as_str()).map(|agent| agent.id);
                report.failed.push(outcome(agent_id, Some(format!("the flow could not be read: {err}"))));
                continue;
            }
        };
        if let Some(agent) = by_flow.get(flow.id.as_str()) {
            match refresh_flow_types(agents, agent, io, now).await {
                Ok(None) => report.skipped.push(outcome(Some(agent.id), Some("the flow already has an agent".into()))),
                Ok(Some(change)) => report.updated.push(outcome(Some(agent.id), Some(change))),
                Err(reason) => report.failed.push(outcome(Some(agent.id), Some(reason))),
            }
            continue;
        }
        match create_flow_agent(agents, &flow, &server.base_url, io, account, now).await {
            Ok(id) => {
                tracing::info!(agent_id = %id, flow_id = %flow.id, %account, "flowtool agent created");
                report.created.push(outcome(Some(id), None));
            }
            Err(reason) => report.failed.push(outcome(None, Some(reason))),
        }
    }
    Ok(report)
}

/// Sets the stored types of `agent`'s flow to what its graph shows now (types the graph does not
/// show are left as they are); `Some(change)` when they changed. The error is the reason to
/// report.
async fn refresh_flow_types(
    agents: &AgentStore,
    agent: &Agent,
    io: FlowIo,
    now: DateTime<Utc>,
) -> Result<Option<String>, String> {
    let Some(mut flowtool) = agent.spec.agent_config.flowtool().cloned() else { return Ok(None) };
    let mut changes = Vec::new();
    for (key, stored, found) in
        [("input_type", &mut flowtool.input_type, io.input), ("output_type", &mut flowtool.output_type, io.output)]
    {
        let Some(found) = found else { continue };
        let was = stored.as_deref().unwrap_or(IoType::Chat.as_str());
        if was != found.as_str() {
            changes.push(format!("{key} {was} -> {}", found.as_str()));
            *stored = Some(found.as_str().to_owned());
        }
    }
    if changes.is_empty() {
        return Ok(None);
    }
    let mut updated = agent.clone();
    updated.spec.agent_config.set_flowtool(&flowtool);
    updated.updated_at = now;
    match agents.replace(&updated, agent).await {
        Ok(()) => Ok(Some(format!("the flow changed: {}", changes.join(", ")))),
        Err(err) => {
            tracing::error!(error = %err, agent_id = %agent.id, "flowtool agent not refreshed");
            Err("the agent's flow types could not be updated".into())
        }
    }
}

/// Creates the agent of one flow of the server at `base_url`; the error is the reason to report.
async fn create_flow_agent(
    agents: &AgentStore,
    flow: &Flow,
    base_url: &str,
    io: FlowIo,
    account: AccountId,
    now: DateTime<Utc>,
) -> Result<AgentId, String> {
    let name: String = flow.name.chars().take(MAX_TEXT_LENGTH).collect();
    let flowtool = FlowtoolConfig {
        flow_id: Some(flow.id.clone()),
        endpoint_name: flow.endpoint_name.clone(),
        base_url: Some(base_url.to_owned()),
        input_type: Some(io.input.unwrap_or(IoType::Chat).as_str().to_owned()),
        output_type: Some(io.output.unwrap_or(IoType::Chat).as_str().to_owned()),
    };
    let body = json!({
        "type": AgentType::Flowtool,
        "name": name,
        "description": flow.description,
        "agent_config": AgentConfig::for_flow(&flowtool),
        "metadata": { "agent_source": "flowtool" },
    });
    let Value::Object(body) = body else { return Err("the flow could not be described".into()) };
    let spec = validate_agent_spec(&body).map_err(|problems| {
        let issues: Vec<String> = problems.fields.iter().map(|(field, issue)| format!("{field} {issue}")).collect();
        format!("the flow does not make a valid agent: {}", issues.join("; "))
    })?;
    let agent = Agent::new(account, spec, now);
    match agents.create(&agent).await {
        Ok(()) => Ok(agent.id),
        Err(WriteError::NameTaken(name)) => Err(format!("another agent is already named {name:?}")),
        Err(err) => {
            tracing::error!(error = %err, flow_id = %flow.id, "flowtool agent not stored");
            Err("the agent could not be stored".into())
        }
    }
}

/// The sync body: absent, empty or a JSON object with optional string `base_url` and `api_key`.
fn parse_overrides(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    let malformed = |issue: String| {
        ApiError::new(ErrorCode::BadRequest, "The request body is malformed.").with_detail("body", issue)
    };
    let value: Value = serde_json::from_slice(body).map_err(|err| malformed(format!("malformed JSON: {err}")))?;
    let Value::Object(fields) = value else { return Err(malformed("must be a JSON object".into())) };
    let rules = check_shape(&fields, &[("base_url", Expected::String), ("api_key", Expected::String)])
        .map_err(|problems| ApiError::from_problems(problems, "sync request"))?;
    if !rules.problems.is_empty() {
        let details = rules.problems.into_iter().map(|(field, issue)| (field, Value::String(issue))).collect();
        return Err(ApiError::validation("The sync request is invalid.", details));
    }
    Ok(fields.into_iter().filter(|(_, value)| !value.is_null()).collect())
}

fn missing(message: &str, field: &str) -> ApiError {
    ApiError::new(ErrorCode::BadRequest, message).with_detail(field, "is not configured")
}
