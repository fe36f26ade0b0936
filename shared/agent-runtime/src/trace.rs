//! A run's trace in OpenTelemetry's GenAI conventions (docs/tracing.md): the `invoke_agent`
//! span of a run or sub-agent run, the `chat` span of each model turn, the `execute_tool` span
//! of each tool call, and what they record. Content (messages, tool arguments and results) is
//! recorded only when the stack turns capture on; every other attribute is metadata.
//!
//! Where the spans go is the entry point's business ([`SpanSink`]): the functions that execute
//! runs export them with `trace-export` before the invocation returns.

use crate::events::{FailureReason, Usage};
use crate::providers::{Message, ProviderError, Turn, TurnRequest};
use crate::spend::Bill;
use futures_util::future::BoxFuture;
use platform_data::agent_spec::AgentType;
use platform_data::agents::Agent;
use platform_data::language_models::Provider;
use serde_json::{Value, json};
use telemetry::genai::*;
use telemetry::{Kind, Recorder, Span};

/// Where an invocation's spans go once its run ended or paused.
pub trait SpanSink: Send + Sync + std::fmt::Debug {
    /// Exports what `recorder` holds (never fails the run: failures are the sink's to count).
    fn export<'a>(&'a self, recorder: &'a Recorder) -> BoxFuture<'a, ()>;
    /// Whether spans record content.
    fn captures_content(&self) -> bool;
}

/// `gen_ai.provider.name` of a language model provider (the conventions' well-known values;
/// an OpenAI-compatible server is none of them).
pub fn provider_name(provider: Provider) -> &'static str {
    match provider {
        Provider::Openai => PROVIDER_OPENAI,
        Provider::Anthropic => PROVIDER_ANTHROPIC,
        Provider::Bedrock => PROVIDER_AWS_BEDROCK,
        Provider::AzureOpenai => PROVIDER_AZURE_OPENAI,
        Provider::OpenaiCompatible => "openai_compatible",
    }
}

/// The provider a delegated agent's run is attributed to (no model of ours is asked).
pub fn delegated_provider(agent_type: AgentType) -> &'static str {
    match agent_type {
        AgentType::A2a => "a2a",
        AgentType::Flowtool => "langflow",
        AgentType::Config => "none",
    }
}

/// The agent-side attributes of an `invoke_agent` span.
pub fn describe_agent(span: &mut Span, agent: &Agent) {
    span.set(OPERATION_NAME, INVOKE_AGENT);
    span.set(AGENT_ID, agent.id.to_string());
    span.set(AGENT_NAME, agent.spec.name.clone());
    if let Some(description) = &agent.spec.description {
        span.set(AGENT_DESCRIPTION, description.clone());
    }
    if let Some(version) = &agent.spec.version {
        span.set(AGENT_VERSION, version.clone());
    }
    span.set(AGENT_TYPE, agent.spec.agent_type.as_str());
}

/// A sub-agent's `invoke_agent` span, a child of the current tool call.
pub fn sub_agent_span(agent: &Agent) -> Span {
    let mut span = Span::start(format!("{INVOKE_AGENT} {}", agent.spec.name), Kind::Internal);
    describe_agent(&mut span, agent);
    span
}

/// Records how a run (or sub-agent run) ended on its `invoke_agent` span.
pub fn record_end(span: &mut Span, result: &Result<String, (FailureReason, String)>, bill: &Bill, steps: u32) {
    record_usage(span, &bill.usage);
    if let Some(cost) = &bill.cost {
        span.set(COST_MICROS, cost.amount_micros);
    }
    span.set(RUN_STEPS, steps);
    match result {
        Ok(output) => span.set_content(OUTPUT_MESSAGES, || output_messages(output, &[])),
        Err((reason, message)) => {
            span.set(FAILURE_REASON, reason.as_str());
            span.fail(reason.as_str(), message);
        }
    }
}

/// Token counts in the conventions' sense: `input_tokens` includes cached input (the platform's
/// own `input_tokens` does not).
fn record_usage(span: &mut Span, usage: &Usage) {
    let input = usage.input_tokens.saturating_add(usage.cache_read_tokens).saturating_add(usage.cache_write_tokens);
    span.set(USAGE_INPUT_TOKENS, input);
    span.set(USAGE_OUTPUT_TOKENS, usage.output_tokens);
    span.set(USAGE_CACHE_READ_INPUT_TOKENS, usage.cache_read_tokens);
    span.set(USAGE_CACHE_WRITE_INPUT_TOKENS, usage.cache_write_tokens);
}

/// The `chat` span of a model turn, begun.
pub fn chat_span(provider: &'static str, model: &str, request: &TurnRequest) -> Span {
    let mut span = Span::start(format!("{CHAT} {model}"), Kind::Client);
    span.set(OPERATION_NAME, CHAT);
    span.set(PROVIDER_NAME, provider);
    span.set(REQUEST_MODEL, model);
    span.set(REQUEST_STREAM, true);
    if let Some(system) = &request.system {
        span.set_content(SYSTEM_INSTRUCTIONS, || json!([{"type": "text", "content": system}]).to_string());
    }
    span.set_content(INPUT_MESSAGES, || input_messages(&request.messages));
    span
}

/// Records a finished turn (or its failure) on its `chat` span.
pub fn record_turn(span: &mut Span, turn: &Result<Turn, ProviderError>, first_chunk_seconds: Option<f64>) {
    match turn {
        Ok(turn) => {
            record_usage(span, &turn.usage);
            span.set(RESPONSE_FINISH_REASONS, vec![finish_reason(turn).to_owned()]);
            if let Some(seconds) = first_chunk_seconds {
                span.set(RESPONSE_TIME_TO_FIRST_CHUNK, seconds);
            }
            span.set_content(OUTPUT_MESSAGES, || output_messages(&turn.text, &turn.tool_calls));
        }
        Err(err) => span.fail(&err.kind(), &err.to_string()),
    }
}

/// The conventions' finish reason of a turn: `tool_call` when it asked for tools, else `stop`
/// (a turn cut short fails instead).
fn finish_reason(turn: &Turn) -> &'static str {
    if turn.tool_calls.is_empty() { "stop" } else { "tool_call" }
}

/// Messages in the conventions' JSON form (`gen-ai-input-messages.json`), for content capture.
fn input_messages(messages: &[Message]) -> String {
    let messages: Vec<Value> = messages
        .iter()
        .map(|message| match message {
            Message::User { text, .. } => json!({"role": "user", "parts": [{"type": "text", "content": text}]}),
            Message::Assistant { text, tool_calls } => json!({"role": "assistant", "parts": parts(text, tool_calls)}),
            Message::Tool { call_id, content, .. } => json!({
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": call_id, "response": content}],
            }),
        })
        .collect();
    Value::Array(messages).to_string()
}

fn output_messages(text: &str, tool_calls: &[crate::providers::ToolCall]) -> String {
    let reason = if tool_calls.is_empty() { "stop" } else { "tool_call" };
    json!([{"role": "assistant", "parts": parts(text, tool_calls), "finish_reason": reason}]).to_string()
}

fn parts(text: &str, tool_calls: &[crate::providers::ToolCall]) -> Vec<Value> {
    let mut parts = Vec::new();
    if !text.is_empty() {
        parts.push(json!({"type": "text", "content": text}));
    }
    for call in tool_calls {
        parts.push(json!({"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ToolCall;
    use telemetry::{SpanContext, SpanId, TraceId, Value as Attr};

    fn recorded(capture: bool, work: impl FnOnce()) -> Vec<telemetry::SpanData> {
        let recorder = Recorder::default();
        let context = SpanContext { trace_id: TraceId::random(), span_id: SpanId::random() };
        let root = Span::root(&recorder, context, None, "root", Kind::Internal, capture);
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(root.run(async { work() }));
        root.discard();
        recorder.take().0
    }

    fn turn_with_a_call() -> Turn {
        let arguments = serde_json::Map::from_iter([("q".to_owned(), json!("secret question"))]);
        Turn {
            text: "let me look".into(),
            tool_calls: vec![ToolCall { id: "c1".into(), name: "lookup".into(), arguments }],
            usage: Usage { input_tokens: 10, output_tokens: 4, cache_read_tokens: 5, cache_write_tokens: 1 },
        }
    }

    fn request() -> TurnRequest {
        TurnRequest {
            system: Some("be brief".into()),
            messages: vec![Message::user("what is the secret?")],
            tools: Vec::new(),
            deadline: None,
        }
    }

    #[test]
    fn a_chat_span_records_the_turn_in_the_conventions_terms_and_no_content_by_default() {
        let spans = recorded(false, || {
            let mut span = chat_span(PROVIDER_OPENAI, "gpt-4o", &request());
            record_turn(&mut span, &Ok(turn_with_a_call()), Some(0.25));
        });
        let chat = &spans[0];
        assert_eq!(chat.name, "chat gpt-4o");
        assert_eq!(chat.kind, Kind::Client);
        assert_eq!(chat.attribute(PROVIDER_NAME), Some(&Attr::from("openai")));
        assert_eq!(chat.attribute(USAGE_INPUT_TOKENS), Some(&Attr::Int(16)), "cached input is input");
        assert_eq!(chat.attribute(USAGE_CACHE_READ_INPUT_TOKENS), Some(&Attr::Int(5)));
        assert_eq!(chat.attribute(RESPONSE_FINISH_REASONS), Some(&Attr::StrArray(vec!["tool_call".into()])));
        assert_eq!(chat.attribute(RESPONSE_TIME_TO_FIRST_CHUNK), Some(&Attr::Float(0.25)));
        let everything = format!("{chat:?}");
        for content in ["secret", "be brief", "let me look"] {
            assert!(!everything.contains(content), "{content} recorded without capture: {everything}");
        }
    }

    #[test]
    fn with_capture_on_a_chat_span_holds_the_messages() {
        let spans = recorded(true, || {
            let mut span = chat_span(PROVIDER_ANTHROPIC, "claude", &request());
            record_turn(&mut span, &Ok(turn_with_a_call()), None);
        });
        let text = |key| match spans[0].attribute(key) {
            Some(Attr::Str(text)) => serde_json::from_str::<Value>(text).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(text(INPUT_MESSAGES)[0]["parts"][0]["content"], "what is the secret?");
        assert_eq!(text(SYSTEM_INSTRUCTIONS)[0]["content"], "be brief");
        assert_eq!(text(OUTPUT_MESSAGES)[0]["parts"][1]["arguments"]["q"], "secret question");
        assert_eq!(spans[0].attribute(RESPONSE_TIME_TO_FIRST_CHUNK), None);
    }

    #[test]
    fn a_failed_turn_is_an_error_span_with_a_low_cardinality_type() {
        let spans = recorded(false, || {
            let mut span = chat_span(PROVIDER_AWS_BEDROCK, "m", &request());
            record_turn(&mut span, &Err(ProviderError::Status { status: 503, message: "busy".into() }), None);
        });
        assert_eq!(spans[0].attribute(ERROR_TYPE), Some(&Attr::from("503")));
        assert_eq!(spans[0].error.as_deref(), Some("503"), "the provider's answer is content");
    }
}
