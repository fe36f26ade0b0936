//! Agents: an AgentCreate body stored as an account-scoped, uniquely named record in
//! `AgentsTable` (see `records`).

use crate::agent_spec::AgentSpec;
use crate::records::{Record, RecordBody, RecordStore};

impl RecordBody for AgentSpec {
    const KIND: &'static str = "AGENT";
    type Id = crate::ids::AgentId;

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// What `GET /agents/` filters on besides the name: `agent_type`, `framework`, `version`.
    fn listed(&self) -> Vec<(&'static str, String)> {
        let mut listed = vec![("agent_type", self.agent_type.as_str().to_owned())];
        listed.extend(self.framework.map(|framework| ("framework", framework.as_str().to_owned())));
        listed.extend(self.version.clone().map(|version| ("version", version)));
        listed
    }
}

/// A stored agent.
pub type Agent = Record<AgentSpec>;

/// Storage of agents.
pub type AgentStore = RecordStore<AgentSpec>;

pub use crate::records::WriteError as AgentWriteError;
