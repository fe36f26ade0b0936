//! Agent platform domain and storage: API keys, rate limits, agents, tools, MCP
//! configurations, language models and the secrets they keep.

pub mod agent_spec;
pub mod agents;
pub mod api_keys;
pub mod dynamo;
pub mod language_models;
pub mod mcp_configs;
pub mod python_script;
pub mod rate_limit;
pub mod records;
pub mod secrets;
pub mod tools;
pub mod validation;

use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};

/// A storage operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("DynamoDB {operation} failed: {message}")]
    Dynamo { operation: &'static str, message: String },
    #[error("Secrets Manager {operation} failed: {message}")]
    Secrets { operation: &'static str, message: String },
    #[error("stored item could not be read: {0}")]
    Decode(#[from] serde_dynamo::Error),
}

impl StoreError {
    /// A failed AWS call, with the SDK's whole error context.
    pub fn dynamo<E: std::error::Error + 'static, R: std::fmt::Debug>(
        operation: &'static str,
        err: SdkError<E, R>,
    ) -> Self {
        Self::Dynamo { operation, message: DisplayErrorContext(err).to_string() }
    }
}
