//! Agent platform backend HTTP layer: envelopes, errors, the API-key gate with rate limiting,
//! and the handlers of the backend functions.

pub mod agent_runs;
pub mod agents;
pub mod envelope;
pub mod flowtool;
pub mod gate;
pub mod health;
pub mod language_models;
pub mod mcps;
mod records;
pub mod runner;
pub mod schedules;
pub mod settings;
pub mod spend;
pub mod tools;
pub mod traces;
pub mod webhooks;

pub use agent_runs::AgentRunsService;
pub use agents::AgentsService;
pub use envelope::{ApiError, ErrorCode};
pub use gate::Gate;
pub use health::HealthService;
pub use language_models::LanguageModelsService;
pub use mcps::McpsService;
pub use runner::RunnerService;
pub use schedules::SchedulesService;
pub use spend::SpendService;
pub use tools::ToolsService;
pub use webhooks::WebhooksService;
