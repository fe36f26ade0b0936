//! Event types and the payload every delivery carries.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

/// Every event type an endpoint can subscribe to.
pub const EVENT_TYPES: [&str; 11] = [
    "agent.created",
    "agent.updated",
    "agent.deleted",
    "agent.restored",
    "run.started",
    "run.succeeded",
    "run.failed",
    "schedule.triggered",
    "webhook.test",
    "endpoint.disabled",
    "budget.threshold_reached",
];

/// The delivered body: `{"type", "timestamp", "data"}`.
pub fn payload(event_type: &str, timestamp: DateTime<Utc>, data: &Value) -> String {
    json!({
        "type": event_type,
        "timestamp": timestamp.to_rfc3339_opts(SecondsFormat::Millis, true),
        "data": data,
    })
    .to_string()
}
