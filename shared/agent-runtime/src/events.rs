//! The run event stream of DESIGN.md ("Agent platform"), a contract: event names and fields are
//! fixed there. One place encodes it as Server-Sent Events.
//!
//! Every event carries the run's sequence number as its SSE `id:` (1, 2, 3, …) so a client can
//! resume with `Last-Event-ID`; `event:` names the type; `data:` is one JSON object on one line.

use chrono::Duration;
use platform_data::ids::{AgentId, RunId};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::spend::{Bill, Cost};

/// Why a failed run failed (`failure_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    Error,
    Timeout,
    Cancelled,
    RecursionLimit,
    ProviderError,
    /// The account's monthly budget was reached (before a model turn, or before the run began).
    BudgetExceeded,
}

impl FailureReason {
    /// The reason as the stream and the run record spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::RecursionLimit => "recursion_limit",
            Self::ProviderError => "provider_error",
            Self::BudgetExceeded => "budget_exceeded",
        }
    }
}

/// Tokens a run used, summed over its model turns. `input_tokens` are the prompt's tokens
/// read neither from nor into the provider's prompt cache; cache reads and writes are counted
/// apart (providers that report them: Bedrock, Anthropic). Records stored before the cache
/// counts existed read them as 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Input and output tokens, no cache counts.
    pub fn tokens(input_tokens: u64, output_tokens: u64) -> Self {
        Self { input_tokens, output_tokens, ..Self::default() }
    }

    /// Whether no token was counted.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }

    /// Adds another turn's usage.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(other.cache_write_tokens);
    }
}

/// What happened in a run, in order. The first event is `Metadata`, the last exactly one of
/// `Done` or `Error`.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// `trace_id`: the run's trace (32 hex; none for runs before traces were kept).
    Metadata {
        run_id: RunId,
        agent_id: AgentId,
        trace_id: Option<String>,
    },
    Message {
        delta: String,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: Map<String, Value>,
    },
    ToolResult {
        id: String,
        name: String,
        result: Result<Value, String>,
    },
    Plan {
        plan: String,
    },
    Done {
        run_id: RunId,
        output: String,
        bill: Bill,
    },
    Error {
        run_id: RunId,
        failure_reason: FailureReason,
        message: String,
        bill: Bill,
    },
}

impl RunEvent {
    /// The first event of a run executing now: its trace is the current one.
    pub fn metadata(run_id: RunId, agent_id: AgentId) -> Self {
        let trace_id = telemetry::current_context().map(|context| context.trace_id.to_string());
        Self::Metadata { run_id, agent_id, trace_id }
    }

    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Metadata { .. } => "metadata",
            Self::Message { .. } => "message",
            Self::ToolCall { .. } => "tool_call",
            Self::ToolResult { .. } => "tool_result",
            Self::Plan { .. } => "plan",
            Self::Done { .. } => "done",
            Self::Error { .. } => "error",
        }
    }

    /// Whether the event ends the run's stream.
    pub fn is_last(&self) -> bool {
        matches!(self, Self::Done { .. } | Self::Error { .. })
    }

    /// The SSE `data:` object.
    pub fn data(&self) -> Value {
        match self {
            Self::Metadata { run_id, agent_id, trace_id } => {
                json!({ "run_id": run_id, "agent_id": agent_id, "status": "started", "trace_id": trace_id })
            }
            Self::Message { delta } => json!({ "delta": delta }),
            Self::ToolCall { id, name, arguments } => json!({ "id": id, "name": name, "arguments": arguments }),
            Self::ToolResult { id, name, result: Ok(output) } => json!({ "id": id, "name": name, "output": output }),
            Self::ToolResult { id, name, result: Err(error) } => json!({ "id": id, "name": name, "error": error }),
            Self::Plan { plan } => json!({ "plan": plan }),
            Self::Done { run_id, output, bill } => json!({
                "run_id": run_id, "status": "success", "output": output, "usage": bill.usage, "cost": bill.cost,
            }),
            Self::Error { run_id, failure_reason, message, bill } => json!({
                "run_id": run_id, "status": "failed", "failure_reason": failure_reason, "message": message,
                "usage": bill.usage, "cost": bill.cost,
            }),
        }
    }

    /// The event as one SSE frame with sequence number `sequence`.
    pub fn to_sse(&self, sequence: u64) -> String {
        encode_sse(sequence, self.name(), &self.data())
    }

    /// Reads an event back from its name and data (a stored event, a replayed stream).
    pub fn from_parts(name: &str, data: &Value) -> Option<Self> {
        let text = |key: &str| data.get(key).and_then(Value::as_str).map(str::to_owned);
        let uuid = |key: &str| text(key).and_then(|value| Uuid::parse_str(&value).ok());
        // Absent or null: no cost (unpriced, or stored before costs were kept).
        let cost = || match data.get("cost") {
            None | Some(Value::Null) => Some(None),
            Some(cost) => serde_json::from_value::<Cost>(cost.clone()).ok().map(Some),
        };
        Some(match name {
            "metadata" => Self::Metadata {
                run_id: uuid("run_id")?.into(),
                agent_id: uuid("agent_id")?.into(),
                trace_id: text("trace_id"),
            },
            "message" => Self::Message { delta: text("delta")? },
            "tool_call" => Self::ToolCall {
                id: text("id")?,
                name: text("name")?,
                arguments: data.get("arguments")?.as_object()?.clone(),
            },
            "tool_result" => Self::ToolResult {
                id: text("id")?,
                name: text("name")?,
                result: match (data.get("output"), text("error")) {
                    (Some(output), None) => Ok(output.clone()),
                    (_, Some(error)) => Err(error),
                    (None, None) => return None,
                },
            },
            "plan" => Self::Plan { plan: text("plan")? },
            "done" => Self::Done {
                run_id: uuid("run_id")?.into(),
                output: text("output")?,
                bill: Bill { usage: serde_json::from_value(data.get("usage")?.clone()).ok()?, cost: cost()? },
            },
            // Events stored before an error carried usage read as none spent.
            "error" => Self::Error {
                run_id: uuid("run_id")?.into(),
                failure_reason: serde_json::from_value(data.get("failure_reason")?.clone()).ok()?,
                message: text("message")?,
                bill: Bill {
                    usage: match data.get("usage") {
                        None => Usage::default(),
                        Some(usage) => serde_json::from_value(usage.clone()).ok()?,
                    },
                    cost: cost()?,
                },
            },
            _ => return None,
        })
    }
}

/// One SSE frame: `id:`, `event:`, one `data:` line (compact JSON has no line breaks) and the
/// blank line that dispatches it.
pub fn encode_sse(sequence: u64, name: &str, data: &Value) -> String {
    format!("id: {sequence}\nevent: {name}\ndata: {data}\n\n")
}

/// The keep-alive comment sent while the model is silent; clients ignore it.
pub const KEEP_ALIVE: &str = ": ping\n\n";

/// A keep-alive comment goes out after this long without an event (DESIGN.md: at least every 15 s).
pub const KEEP_ALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a run's events are kept (and its journal, `crate::journal`, as long).
pub const EVENT_RETENTION: Duration = Duration::days(30);

/// The largest `data` a stored event holds; a larger tool output or answer is cut (the run
/// record's `output` keeps up to `crate::runs::MAX_OUTPUT_BYTES`).
pub const MAX_EVENT_DATA_BYTES: usize = 64 * 1024;

/// `text` cut to at most `max` bytes at a character boundary, marked when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [truncated]", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<RunEvent> {
        let run_id = RunId::from(Uuid::from_u128(1));
        let mut arguments = Map::new();
        arguments.insert("city".into(), json!("Oslo\nNorth"));
        vec![
            RunEvent::Metadata {
                run_id,
                agent_id: AgentId::from(Uuid::from_u128(2)),
                trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            },
            RunEvent::Message { delta: "Hel\r\nlo \"world\"".into() },
            RunEvent::ToolCall { id: "call_1".into(), name: "forecast".into(), arguments },
            RunEvent::ToolResult { id: "call_1".into(), name: "forecast".into(), result: Ok(json!({"t": 3})) },
            RunEvent::ToolResult { id: "call_2".into(), name: "alerts".into(), result: Err("timed out".into()) },
            RunEvent::Plan { plan: "1. look\n2. answer".into() },
            RunEvent::Done {
                run_id,
                output: "Hello".into(),
                bill: Bill {
                    usage: Usage::tokens(10, 3),
                    cost: Some(Cost { currency: platform_data::language_models::Currency::Usd, amount_micros: 7 }),
                },
            },
            RunEvent::Error {
                run_id,
                failure_reason: FailureReason::RecursionLimit,
                message: "too many turns".into(),
                bill: Bill { usage: Usage::tokens(1, 2), cost: None },
            },
        ]
    }

    #[test]
    fn events_carry_the_contracts_fields() {
        let events = every_kind();
        assert_eq!(
            events[0].data(),
            json!({"run_id": Uuid::from_u128(1), "agent_id": Uuid::from_u128(2), "status": "started",
                "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"})
        );
        assert_eq!(
            events[6].data(),
            json!({"run_id": Uuid::from_u128(1), "status": "success", "output": "Hello",
                "usage": {"input_tokens": 10, "output_tokens": 3, "cache_read_tokens": 0, "cache_write_tokens": 0},
                "cost": {"currency": "USD", "amount_micros": 7}})
        );
        assert_eq!(
            events[7].data(),
            json!({"run_id": Uuid::from_u128(1), "status": "failed", "failure_reason": "recursion_limit",
                "message": "too many turns",
                "usage": {"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 0, "cache_write_tokens": 0},
                "cost": null})
        );
        assert_eq!(events[4].data(), json!({"id": "call_2", "name": "alerts", "error": "timed out"}));
        assert!(events[6].is_last() && events[7].is_last() && !events[1].is_last());
    }

    #[test]
    fn frames_are_one_data_line_and_read_back() {
        for (sequence, event) in every_kind().into_iter().enumerate() {
            let frame = event.to_sse(sequence as u64 + 1);
            let lines: Vec<&str> = frame.trim_end_matches('\n').split('\n').collect();
            assert_eq!(lines.len(), 3, "{frame:?}");
            assert_eq!(lines[0], format!("id: {}", sequence + 1));
            assert_eq!(lines[1], format!("event: {}", event.name()));
            let data: Value = serde_json::from_str(lines[2].strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(RunEvent::from_parts(event.name(), &data), Some(event));
        }
        assert_eq!(RunEvent::from_parts("unknown", &json!({})), None);
        assert_eq!(RunEvent::from_parts("message", &json!({"delta": 1})), None);
    }

    #[test]
    fn an_error_stored_before_it_carried_usage_reads_as_nothing_spent() {
        let run_id = Uuid::from_u128(1);
        let stored = json!({"run_id": run_id, "status": "failed", "failure_reason": "timeout", "message": "late"});
        let Some(RunEvent::Error { bill, .. }) = RunEvent::from_parts("error", &stored) else { panic!("not read") };
        assert_eq!(bill, Bill::default());
        let garbled =
            json!({"run_id": run_id, "failure_reason": "timeout", "message": "x", "cost": {"amount_micros": -1}});
        assert_eq!(RunEvent::from_parts("error", &garbled), None);
    }
}
