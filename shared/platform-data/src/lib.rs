//! Agent platform domain and storage: API keys, agents, tools, MCP
//! configurations, language models and the secrets they keep.

pub mod agent_config;
pub mod agent_spec;
pub mod agents;
pub mod api_keys;
pub mod dynamo;
pub mod flow_server_keys;
pub mod ids;
pub mod language_models;
pub mod mcp_configs;
pub mod python_script;
pub mod records;
pub mod schedules;
pub mod secret_headers;
pub mod secret_origin;
pub mod secrets;
pub mod tools;
pub mod validation;

/// The storage layer's one error type (DynamoDB, Secrets Manager, SQS, decoding, conflicts).
pub use storage::StoreError;
