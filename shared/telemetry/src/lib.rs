//! What the platform tells its operators about runs: a trace per run in OpenTelemetry's GenAI
//! conventions (`span`, `genai`, `otlp`; exported by `trace-export`), the trace context that arrives with a request
//! and leaves with each call a run makes (`context`), and business metrics in CloudWatch's
//! embedded metric format (`metrics`). docs/tracing.md and docs/operations.md say how to use them.
//!
//! A few hundred lines on tokio (the current span is a task-local), uuid (ids) and serde_json
//! (EMF lines), so every crate may mark spans; the exporter is the `trace-export` crate.

pub mod context;
pub mod genai;
pub mod metrics;
pub mod otlp;
pub mod span;

pub use context::{Parent, SpanContext, SpanId, TraceId};
pub use span::{Kind, Recorder, Span, SpanData, Value, current_context, current_traceparent};
