//! `a2a` agents: the run is delegated to a remote agent over the A2A protocol (JSON-RPC 2.0).
//! Its agent card is fetched from `{a2a_profile.url}/.well-known/agent-card.json` (or the older
//! `agent.json`, or the profile URL itself when it is the card). Then the message goes out with
//! `message/stream` when the card says it streams, else with `message/send`.
//!
//! Mapping to run events: text parts of status messages and artifacts become `message` deltas.
//! A task ending `completed` (or a plain agent message) is `done`, with all the text as the
//! output. `failed`, `rejected`, `canceled`, `auth-required` and a JSON-RPC error end the run
//! `failed` (`error`). `input-required` ends it as done, with the agent's question as the output.

use crate::events::{FailureReason, RunEvent, Usage};
use crate::sse::SseDecoder;
use outbound::TenantClient;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

/// The largest card, and the largest single event or answer, read from a remote agent.
const MAX_CARD_BYTES: usize = 256 * 1024;
const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// What a remote agent says about itself (the parts the run needs).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentCard {
    pub name: String,
    /// The JSON-RPC endpoint.
    pub url: String,
    pub streaming: bool,
}

/// Fetches the agent card from `profile_url`: its well-known paths, else the URL itself.
pub async fn fetch_card(client: &TenantClient, profile_url: &str, timeout: Duration) -> Result<AgentCard, String> {
    let base = profile_url.trim_end_matches('/');
    let mut candidates = vec![format!("{base}/.well-known/agent-card.json"), format!("{base}/.well-known/agent.json")];
    if base.ends_with(".json") {
        candidates.insert(0, base.to_owned());
    }
    let mut last_error = String::from("no agent card found");
    for url in candidates {
        let http = client.for_url(&url).map_err(|refused| refused.to_string())?;
        let response = match http.get(&url).timeout(timeout).send().await {
            Ok(response) => response,
            Err(err) => return Err(format!("the agent card could not be fetched: {}", outbound::describe(&err))),
        };
        if !response.status().is_success() {
            last_error = format!("the agent card answered HTTP {}", response.status().as_u16());
            continue;
        }
        let body = outbound::read_limited(response, MAX_CARD_BYTES).await?;
        let card: Value = serde_json::from_slice(&body).map_err(|_| "the agent card is not JSON".to_owned())?;
        let endpoint = card.get("url").and_then(Value::as_str).ok_or("the agent card has no url")?;
        // A relative endpoint is resolved against the card's own URL.
        let endpoint = url::Url::parse(&url)
            .and_then(|card_url| card_url.join(endpoint))
            .map_err(|_| "the agent card's url is not a URL".to_owned())?;
        return Ok(AgentCard {
            name: card.get("name").and_then(Value::as_str).unwrap_or("remote agent").to_owned(),
            url: endpoint.to_string(),
            streaming: card.pointer("/capabilities/streaming").and_then(Value::as_bool).unwrap_or(false),
        });
    }
    Err(last_error)
}

/// How a remote task went.
#[derive(Debug, Default)]
struct Progress {
    output: String,
    ended: Option<Result<(), (FailureReason, String)>>,
}

impl Progress {
    /// Takes one JSON-RPC `result` (a Task, a Message, a status or artifact update); returns
    /// the text to stream.
    fn take(&mut self, result: &Value) -> Vec<String> {
        let mut deltas = Vec::new();
        let kind = result.get("kind").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "message" => {
                deltas.extend(texts(result.get("parts")));
                self.ended = Some(Ok(()));
            }
            "artifact-update" => deltas.extend(texts(result.pointer("/artifact/parts"))),
            "status-update" | "task" => {
                if kind == "task" {
                    for artifact in result.get("artifacts").and_then(Value::as_array).into_iter().flatten() {
                        deltas.extend(texts(artifact.get("parts")));
                    }
                }
                let status = result.get("status");
                let message: Vec<String> = texts(status.and_then(|s| s.pointer("/message/parts")));
                let state = status.and_then(|s| s.get("state")).and_then(Value::as_str).unwrap_or_default();
                match state {
                    "completed" => {
                        deltas.extend(message);
                        self.ended = Some(Ok(()));
                    }
                    "input-required" => {
                        deltas.extend(message);
                        self.ended = Some(Ok(()));
                    }
                    "failed" | "rejected" | "canceled" | "auth-required" => {
                        let detail = message.join("");
                        let text = if detail.is_empty() {
                            format!("the remote task ended {state}")
                        } else {
                            format!("the remote task ended {state}: {detail}")
                        };
                        let reason = if state == "canceled" { FailureReason::Cancelled } else { FailureReason::Error };
                        self.ended = Some(Err((reason, text)));
                    }
                    // submitted, working: progress notes are not the answer.
                    _ => {}
                }
            }
            _ => {}
        }
        for delta in &deltas {
            self.output.push_str(delta);
        }
        deltas
    }
}

/// The text parts of a `parts` array.
fn texts(parts: Option<&Value>) -> Vec<String> {
    parts
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|part| part.get("kind").and_then(Value::as_str).unwrap_or("text") == "text")
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .filter(|text| !text.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs `message` on the remote agent at `profile_url`, emitting `message` events; returns the
/// output or why it failed. The caller emits `metadata` before and `done`/`error` after.
pub async fn run_remote(
    client: &TenantClient,
    profile_url: &str,
    message: &str,
    events: &UnboundedSender<RunEvent>,
    call_timeout: Duration,
) -> Result<(String, Usage), (FailureReason, String)> {
    let failure = |message: String| (FailureReason::Error, message);
    let card = fetch_card(client, profile_url, call_timeout).await.map_err(failure)?;
    let http = client.for_url(&card.url).map_err(|refused| failure(refused.to_string()))?;
    let method = if card.streaming { "message/stream" } else { "message/send" };
    let request = |method: &str| {
        json!({
            "jsonrpc": "2.0",
            "id": Uuid::new_v4().to_string(),
            "method": method,
            "params": {"message": {
                "kind": "message", "role": "user", "messageId": Uuid::new_v4().to_string(),
                "parts": [{"kind": "text", "text": message}],
            }},
        })
    };
    let mut progress = Progress::default();
    let send = |method: &str| {
        http.post(&card.url).json(&request(method)).header("accept", "text/event-stream, application/json")
    };
    let mut response = send(method)
        .send()
        .await
        .map_err(|err| failure(format!("the remote agent is unreachable: {}", outbound::describe(&err))))?;
    if !response.status().is_success() {
        return Err(failure(format!("the remote agent answered HTTP {}", response.status().as_u16())));
    }
    let streamed = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    let emit = |deltas: Vec<String>| {
        for delta in deltas {
            let _ = events.send(RunEvent::Message { delta });
        }
    };
    if streamed {
        let mut decoder = SseDecoder::new(MAX_EVENT_BYTES);
        'stream: loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(err) => {
                    return Err(failure(format!("the remote agent's stream broke: {}", outbound::describe(&err))));
                }
            };
            let decoded = decoder.feed(&chunk).map_err(|err| failure(err.to_string()))?;
            for event in decoded {
                let value: Value = serde_json::from_str(&event.data)
                    .map_err(|_| failure("the remote agent sent a malformed event".into()))?;
                emit(progress.take(&rpc_result(&value)?));
                if progress.ended.is_some() {
                    break 'stream;
                }
            }
        }
    } else {
        let body = outbound::read_limited(response, MAX_EVENT_BYTES).await.map_err(failure)?;
        let value: Value =
            serde_json::from_slice(&body).map_err(|_| failure("the remote agent's answer is not JSON".into()))?;
        emit(progress.take(&rpc_result(&value)?));
    }
    match progress.ended {
        Some(Ok(())) => Ok((progress.output, Usage::default())),
        Some(Err(failed)) => Err(failed),
        None => Err(failure("the remote agent stopped before its task ended".into())),
    }
}

/// A JSON-RPC response's `result`, or its `error` as a failure.
fn rpc_result(response: &Value) -> Result<Value, (FailureReason, String)> {
    if let Some(error) = response.get("error") {
        let message = error.get("message").and_then(Value::as_str).unwrap_or("an error");
        return Err((FailureReason::Error, format!("the remote agent refused the message: {message}")));
    }
    response.get("result").cloned().ok_or((FailureReason::Error, "the remote agent's answer has no result".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_states_and_parts_map_to_deltas_and_endings() {
        let mut progress = Progress::default();
        let working = json!({"kind": "status-update", "status": {"state": "working", "message": {"parts": [{"kind": "text", "text": "thinking"}]}}});
        assert!(progress.take(&working).is_empty());
        let artifact = json!({"kind": "artifact-update", "artifact": {"parts": [{"kind": "text", "text": "Hel"}, {"kind": "data", "data": {}}]}});
        assert_eq!(progress.take(&artifact), ["Hel"]);
        let done = json!({"kind": "status-update", "final": true, "status": {"state": "completed", "message": {"parts": [{"kind": "text", "text": "lo"}]}}});
        assert_eq!(progress.take(&done), ["lo"]);
        assert_eq!((progress.output.as_str(), progress.ended.clone()), ("Hello", Some(Ok(()))));

        let mut failed = Progress::default();
        failed.take(&json!({"kind": "task", "status": {"state": "failed", "message": {"parts": [{"text": "quota"}]}}}));
        assert_eq!(failed.ended, Some(Err((FailureReason::Error, "the remote task ended failed: quota".into()))));
        let mut message = Progress::default();
        assert_eq!(
            message.take(&json!({"kind": "message", "role": "agent", "parts": [{"kind": "text", "text": "Hi"}]})),
            ["Hi"]
        );
        assert_eq!(message.ended, Some(Ok(())));
        assert!(rpc_result(&json!({"jsonrpc": "2.0", "error": {"code": -32600, "message": "bad"}})).is_err());
    }
}
