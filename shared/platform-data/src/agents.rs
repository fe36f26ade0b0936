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
}

/// A stored agent.
pub type Agent = Record<AgentSpec>;

/// Storage of agents.
pub type AgentStore = RecordStore<AgentSpec>;

pub use crate::records::WriteError as AgentWriteError;
