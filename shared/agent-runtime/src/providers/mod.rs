//! Language model providers behind one trait: a turn takes the conversation and the tools on
//! offer, streams text deltas as they arrive, and ends with the whole turn (text, complete tool
//! calls, usage). One file per wire format.

pub mod chat_completions;

use crate::events::Usage;
use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use std::time::Duration;

/// A message of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    User {
        text: String,
    },
    /// The model's own turn, with the tool calls it made.
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, as text the model reads.
    Tool {
        call_id: String,
        name: String,
        content: String,
    },
}

/// A tool the model may call: a name, what it does, and the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// A complete tool call of the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Map<String, Value>,
}

/// What one turn asks the model.
#[derive(Debug, Clone, Default)]
pub struct TurnRequest {
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
}

/// What the model answered in one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
}

/// Why a turn failed. Every variant ends the run `failed` with `provider_error`, with its text
/// as the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("the provider refused the API key (HTTP {0})")]
    Unauthorized(u16),
    #[error("the provider is rate limiting requests (HTTP 429) and still was after {attempts} attempts")]
    RateLimited { attempts: u32, retry_after: Option<Duration> },
    #[error("the provider failed (HTTP {status}): {message}")]
    Status { status: u16, message: String },
    #[error("could not reach the provider: {0}")]
    Unreachable(String),
    #[error("the provider's stream could not be read: {0}")]
    Malformed(String),
    #[error("the language model cannot be used: {0}")]
    Configuration(String),
}

/// Receives text deltas as the model streams them.
pub type DeltaSink<'a> = &'a mut (dyn FnMut(&str) + Send);

/// A language model provider.
pub trait Provider: Send + Sync {
    /// One model turn. Text deltas go to `on_delta` in order as they arrive.
    fn turn<'a>(
        &'a self,
        request: &'a TurnRequest,
        on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<Turn, ProviderError>>;
}

/// How often a rate-limited turn is tried, and the longest wait `Retry-After` may ask for.
pub const MAX_ATTEMPTS: u32 = 3;
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(20);

/// `Retry-After` as seconds (HTTP dates are rare from model APIs and count as absent).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let seconds: f64 = value.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(MAX_RETRY_AFTER.as_secs_f64())))
}
