//! Whether an agent could run now (the runner's `GET /execute/a2a/agents/health`): what it
//! depends on, checked the way a run uses it, each check within `CHECK_TIMEOUT`, all of them
//! concurrently.
//!
//! - `config` agents: `language_model` (the model the agent names exists, its key is readable
//!   for its origin, and a provider can be built from it; no model call is made, so a check
//!   costs no tokens) and one `mcp` check per MCP configuration (an MCP `initialize` handshake).
//! - `a2a` agents: `a2a_card` (the remote agent card is fetched and names a JSON-RPC endpoint).
//! - `flowtool` agents: `flow_server` (the agent's flow server, as its runs reach it, lists its flows,
//!   and the agent's flow is among them).
//!
//! Every outbound call goes through the tenant client, so a check cannot reach what a run may
//! not. Messages say what failed in words; they never carry keys or secret headers.

use crate::resolve::RunSources;
use futures_util::future::{BoxFuture, join_all};
use platform_data::agent_spec::AgentType;
use platform_data::agents::Agent;
use platform_data::ids::AgentId;
use platform_data::language_models::{ModelSelector, find_model, read_api_key};
use serde::Serialize;
use std::time::{Duration, Instant};

/// The longest one check may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// `language_model`, `mcp`, `a2a_card` or `flow_server`.
    pub check: &'static str,
    /// What was checked: the model, the MCP configuration's name, the card's URL, the flow id.
    pub target: String,
    /// `ok` or `failed`.
    pub status: &'static str,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub latency_ms: f64,
}

/// One agent's health: healthy when every check passed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentHealth {
    pub agent_id: AgentId,
    pub name: String,
    pub agent_type: AgentType,
    pub healthy: bool,
    pub checks: Vec<Check>,
}

impl RunSources {
    /// Checks what `agent` depends on, concurrently.
    pub async fn agent_health(&self, agent: &Agent) -> AgentHealth {
        let mut pending: Vec<BoxFuture<'_, Check>> = Vec::new();
        match agent.spec.agent_type {
            AgentType::Config => {
                pending.push(Box::pin(timed("language_model", model_target(agent), self.model_check(agent))));
                match self.mcps.get_many(agent.account_id, &agent.spec.mcps).await {
                    Ok(configs) => {
                        for config in configs.into_iter().filter(|config| config.deleted_at.is_none()) {
                            let name = config.spec.name.clone();
                            pending.push(Box::pin(timed("mcp", name, async move {
                                let target = self.mcp_target(&config).await.map_err(|err| err.to_string())?;
                                let target = mcp::McpTarget { timeout: target.timeout.min(CHECK_TIMEOUT), ..target };
                                mcp::probe(&self.client, &target).await.map(|_| ()).map_err(|err| err.to_string())
                            })));
                        }
                    }
                    Err(err) => {
                        tracing::error!(error = %err, "MCP configurations not readable");
                        pending.push(Box::pin(timed("mcp", "configurations".into(), async {
                            Err("the agent's MCP configurations could not be read".to_owned())
                        })));
                    }
                }
            }
            AgentType::A2a => {
                let url = agent.spec.a2a_profile.as_ref().and_then(|p| p.get("url")).and_then(|u| u.as_str());
                let target = url.unwrap_or_default().to_owned();
                pending.push(Box::pin(timed("a2a_card", target, async move {
                    let url = url.ok_or("the agent has no a2a_profile.url")?;
                    crate::a2a::fetch_card(&self.client, url, CHECK_TIMEOUT).await.map(|_| ())
                })));
            }
            AgentType::Flowtool => {
                let flow_id = agent.spec.agent_config.flowtool().and_then(|flowtool| flowtool.flow_id.clone());
                pending.push(Box::pin(timed("flow_server", flow_id.unwrap_or_default(), async move {
                    let target = self.flow_target(agent).await?;
                    let flows = target.server.list_flows(&self.client).await.map_err(|err| err.to_string())?;
                    if flows.iter().any(|flow| flow.id == target.flow_id) {
                        Ok(())
                    } else {
                        Err(format!("the flow server has no flow {}", target.flow_id))
                    }
                })));
            }
        }
        let checks = join_all(pending).await;
        AgentHealth {
            agent_id: agent.id,
            name: agent.spec.name.clone(),
            agent_type: agent.spec.agent_type,
            healthy: checks.iter().all(|check| check.status == "ok"),
            checks,
        }
    }

    /// The model the agent names exists, its key is readable, and a provider can be built.
    async fn model_check(&self, agent: &Agent) -> Result<(), String> {
        let selector = ModelSelector::of(&agent.spec).ok_or("the agent names no language model")?;
        let model = find_model(&self.models, agent.account_id, &selector)
            .await
            .map_err(|err| {
                tracing::error!(error = %err, "language models not readable");
                "the language models could not be read".to_owned()
            })?
            .ok_or("the agent's language model does not exist")?;
        let key = read_api_key(&self.model_keys, &model).await.map_err(|err| err.to_string())?;
        crate::providers::for_model(&model.spec, key, &self.provider_clients())
            .map(|_| ())
            .map_err(|err| err.to_string())
    }
}

/// The model as the agent names it, for the check's `target`.
fn model_target(agent: &Agent) -> String {
    match ModelSelector::of(&agent.spec) {
        Some(ModelSelector::Id(id)) => id,
        Some(ModelSelector::Pair(provider, model)) => format!("{provider}/{model}"),
        Some(ModelSelector::NameOrId(name)) => name,
        None => String::new(),
    }
}

/// Runs `check` within `CHECK_TIMEOUT` and records its outcome and latency.
async fn timed(
    check: &'static str,
    target: String,
    work: impl std::future::Future<Output = Result<(), String>>,
) -> Check {
    let started = Instant::now();
    let result = match tokio::time::timeout(CHECK_TIMEOUT, work).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {} seconds", CHECK_TIMEOUT.as_secs())),
    };
    let latency_ms = (started.elapsed().as_secs_f64() * 100_000.0).round() / 100.0;
    match result {
        Ok(()) => Check { check, target, status: "ok", message: None, latency_ms },
        Err(message) => Check { check, target, status: "failed", message: Some(message), latency_ms },
    }
}
