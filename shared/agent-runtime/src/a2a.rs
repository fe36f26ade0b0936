//! `a2a` agents: the run is delegated to a remote agent over the A2A protocol (JSON-RPC 2.0).
//! Its agent card is fetched from `{a2a_profile.url}/.well-known/agent-card.json` (or the older
//! `agent.json`, or the profile URL itself when it is the card). Then the message goes out with
//! `message/stream` when the card says it streams, else with `message/send`.
//!
//! Both protocol versions in use are spoken. An A2A 1.0 card lists `supportedInterfaces`, and
//! its first JSON-RPC interface is used (the first is the agent's preferred one); with version
//! 1.x the calls are `SendStreamingMessage` / `SendMessage` with `A2A-Version: 1.0`, and results
//! come wrapped by kind (`{"statusUpdate": …}`) with `TASK_STATE_*` states. A 0.3 card names
//! its endpoint in `url`; 0.3 results are tagged with `kind`.
//!
//! Mapping to run events: text parts of status messages and artifacts become `message` deltas.
//! A task ending `completed` (or a plain agent message) is `done`, with all the text as the
//! output. `failed`, `rejected`, `canceled`, `auth-required` and a JSON-RPC error end the run
//! `failed` (`error`). `input-required` ends it as done, with the agent's question as the output.
//!
//! A call given up before its task ended (the run cancelled or timed out, so the call's future is
//! dropped; or the remote's stream broke off) cancels the remote task, once its id is known:
//! `tasks/cancel` (1.0: `CancelTask`) with `{"id": task_id}`, sent best-effort in the background
//! to the same endpoint through the same guarded client, within `CANCEL_TIMEOUT`.

use crate::events::{FailureReason, RunEvent, Usage};
use outbound::TenantClient;
use outbound::sse::SseDecoder;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

/// The largest card, and the largest single event or answer, read from a remote agent.
const MAX_CARD_BYTES: usize = 256 * 1024;
const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// The longest the cancel of an abandoned remote task may take.
pub const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// What a remote agent says about itself (the parts the run needs).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentCard {
    pub name: String,
    /// The JSON-RPC endpoint.
    pub url: String,
    /// The protocol version the endpoint speaks.
    pub protocol: Protocol,
    pub streaming: bool,
}

/// The A2A protocol version of a JSON-RPC endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// A2A 0.3: `message/stream`, objects tagged with `kind`, states like `completed`.
    V0_3,
    /// A2A 1.0: `SendStreamingMessage`, results wrapped by kind, states like
    /// `TASK_STATE_COMPLETED`.
    V1_0,
}

/// The card's JSON-RPC endpoint and its protocol: the first JSON-RPC entry of a 1.0 card's
/// `supportedInterfaces`, else a 0.3 card's `url`.
fn rpc_interface(card: &Value) -> Option<(&str, Protocol)> {
    let interfaces = card.get("supportedInterfaces").and_then(Value::as_array).into_iter().flatten();
    for interface in interfaces {
        let binding = interface.get("protocolBinding").and_then(Value::as_str).unwrap_or_default();
        let Some(url) = interface.get("url").and_then(Value::as_str) else { continue };
        if binding.eq_ignore_ascii_case("JSONRPC") {
            let version = interface.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
            let protocol = if version.starts_with("0.") { Protocol::V0_3 } else { Protocol::V1_0 };
            return Some((url, protocol));
        }
    }
    card.get("url").and_then(Value::as_str).map(|url| (url, Protocol::V0_3))
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
        let (endpoint, protocol) = rpc_interface(&card).ok_or("the agent card names no JSON-RPC endpoint")?;
        // A relative endpoint is resolved against the card's own URL.
        let endpoint = url::Url::parse(&url)
            .and_then(|card_url| card_url.join(endpoint))
            .map_err(|_| "the agent card's url is not a URL".to_owned())?;
        return Ok(AgentCard {
            name: card.get("name").and_then(Value::as_str).unwrap_or("remote agent").to_owned(),
            url: endpoint.to_string(),
            protocol,
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
        let (kind, result) = unwrap_result(result);
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
                let state = state_name(state);
                match state.as_str() {
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

/// A result's kind in 0.3 terms and the object itself: 0.3 tags it (`"kind": "status-update"`),
/// 1.0 wraps it (`{"statusUpdate": {…}}`).
fn unwrap_result(result: &Value) -> (&str, &Value) {
    if let Some(kind) = result.get("kind").and_then(Value::as_str) {
        return (kind, result);
    }
    let wrapped = [
        ("task", "task"),
        ("message", "message"),
        ("statusUpdate", "status-update"),
        ("artifactUpdate", "artifact-update"),
    ];
    for (key, kind) in wrapped {
        if let Some(inner) = result.get(key) {
            return (kind, inner);
        }
    }
    ("", result)
}

/// A task state in 0.3 terms: 1.0's `TASK_STATE_INPUT_REQUIRED` is `input-required`.
fn state_name(state: &str) -> String {
    match state.strip_prefix("TASK_STATE_") {
        Some(name) => name.to_ascii_lowercase().replace('_', "-"),
        None => state.to_owned(),
    }
}

/// The text parts of a `parts` array (1.0 parts have no `kind`).
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

/// The remote task of a call in progress. Dropped before the remote ended it (`settle`), it
/// cancels the task, if the remote said which task it is.
struct RemoteTask {
    http: outbound::Client,
    url: String,
    protocol: Protocol,
    /// The task's id, from the first result that carries one.
    id: Option<String>,
    /// The remote ended the exchange itself (a final state, an answer, a JSON-RPC error): there
    /// is nothing to cancel.
    settled: bool,
}

impl RemoteTask {
    fn new(http: outbound::Client, url: String, protocol: Protocol) -> Self {
        Self { http, url, protocol, id: None, settled: false }
    }

    /// Remembers the task's id from a JSON-RPC `result`: a Task's `id`, an update's `taskId`.
    fn observe(&mut self, result: &Value) {
        if self.id.is_some() {
            return;
        }
        let (kind, inner) = unwrap_result(result);
        let key = if kind == "task" { "id" } else { "taskId" };
        if let Some(id) = inner.get(key).and_then(Value::as_str).filter(|id| !id.is_empty()) {
            self.id = Some(id.to_owned());
        }
    }

    /// The remote ended the exchange: no cancel on drop.
    fn settle(&mut self) {
        self.settled = true;
    }

    /// The JSON-RPC cancel this task needs when dropped now, if any.
    fn cancel_request(&self) -> Option<Value> {
        if self.settled {
            return None;
        }
        let id = self.id.as_deref()?;
        let method = match self.protocol {
            Protocol::V0_3 => "tasks/cancel",
            Protocol::V1_0 => "CancelTask",
        };
        Some(json!({"jsonrpc": "2.0", "id": Uuid::new_v4().to_string(), "method": method, "params": {"id": id}}))
    }
}

impl Drop for RemoteTask {
    fn drop(&mut self) {
        let Some(request) = self.cancel_request() else { return };
        // Outside a runtime (never the case for a call in flight) there is nothing to send with.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let task_id = self.id.clone().unwrap_or_default();
        let mut send =
            self.http.post(&self.url).json(&request).header("accept", "application/json").timeout(CANCEL_TIMEOUT);
        if self.protocol == Protocol::V1_0 {
            send = send.header("a2a-version", "1.0");
        }
        runtime.spawn(async move {
            match send.send().await {
                Ok(response) if response.status().is_success() => {
                    tracing::info!(task_id, "remote a2a task cancelled");
                }
                Ok(response) => {
                    tracing::warn!(task_id, status = response.status().as_u16(), "remote a2a task cancel refused");
                }
                Err(err) => {
                    tracing::warn!(task_id, error = %outbound::describe(&err), "remote a2a task cancel not sent");
                }
            }
        });
    }
}

/// Runs `message` on the remote agent at `profile_url`, emitting `message` events; returns the
/// output or why it failed. The card is fetched within `card_timeout`; the message's answer,
/// streamed or not, is bounded by `stream`. The caller emits `metadata` before and
/// `done`/`error` after. Dropped
/// (or stopped by a broken stream) before the remote task ended, it cancels the task.
pub async fn run_remote(
    client: &TenantClient,
    profile_url: &str,
    message: &str,
    events: &UnboundedSender<RunEvent>,
    card_timeout: Duration,
    stream: outbound::StreamLimits,
) -> Result<(String, Usage), (FailureReason, String)> {
    let failure = |message: String| (FailureReason::Error, message);
    let card = fetch_card(client, profile_url, card_timeout).await.map_err(failure)?;
    let http = client.for_url(&card.url).map_err(|refused| failure(refused.to_string()))?;
    let (method, message) = match card.protocol {
        Protocol::V0_3 => (
            if card.streaming { "message/stream" } else { "message/send" },
            json!({"kind": "message", "role": "user", "messageId": Uuid::new_v4().to_string(),
                "parts": [{"kind": "text", "text": message}]}),
        ),
        Protocol::V1_0 => (
            if card.streaming { "SendStreamingMessage" } else { "SendMessage" },
            json!({"role": "ROLE_USER", "messageId": Uuid::new_v4().to_string(), "parts": [{"text": message}]}),
        ),
    };
    let request = json!({
        "jsonrpc": "2.0",
        "id": Uuid::new_v4().to_string(),
        "method": method,
        "params": {"message": message},
    });
    let mut progress = Progress::default();
    let mut task = RemoteTask::new(http.clone(), card.url.clone(), card.protocol);
    let mut send = http
        .post(&card.url)
        .stream_limits(stream)
        .json(&request)
        .header("accept", "text/event-stream, application/json");
    if card.protocol == Protocol::V1_0 {
        // Without it a 1.0 server takes the call for 0.3 and refuses the 1.0 method.
        send = send.header("a2a-version", "1.0");
    }
    let mut response = send
        .send()
        .await
        .map_err(|err| failure(format!("the remote agent is unreachable: {}", outbound::describe(&err))))?;
    if !response.status().is_success() {
        return Err(failure(format!("the remote agent answered HTTP {}", response.status().as_u16())));
    }
    let streamed = response
        .headers()
        .get(outbound::header::CONTENT_TYPE)
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
                let result = rpc_result(&value).inspect_err(|_| task.settle())?;
                task.observe(&result);
                emit(progress.take(&result));
                if progress.ended.is_some() {
                    break 'stream;
                }
            }
        }
    } else {
        let body = outbound::read_limited(response, MAX_EVENT_BYTES).await.map_err(failure)?;
        let value: Value =
            serde_json::from_slice(&body).map_err(|_| failure("the remote agent's answer is not JSON".into()))?;
        let result = rpc_result(&value).inspect_err(|_| task.settle())?;
        task.observe(&result);
        emit(progress.take(&result));
    }
    if progress.ended.is_some() {
        task.settle();
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

    #[test]
    fn a2a_1_0_results_are_wrapped_by_kind_with_prefixed_states() {
        let mut progress = Progress::default();
        let working = json!({"statusUpdate": {"status": {"state": "TASK_STATE_WORKING", "message": {"parts": [{"text": "thinking"}]}}}});
        assert!(progress.take(&working).is_empty());
        assert_eq!(progress.take(&json!({"artifactUpdate": {"artifact": {"parts": [{"text": "Hel"}]}}})), ["Hel"]);
        let done = json!({"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED", "message": {"parts": [{"text": "lo"}]}}}});
        assert_eq!(progress.take(&done), ["lo"]);
        assert_eq!((progress.output.as_str(), progress.ended.clone()), ("Hello", Some(Ok(()))));

        let mut question = Progress::default();
        let task = json!({"task": {"status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"parts": [{"text": "Which city?"}]}}}});
        assert_eq!(question.take(&task), ["Which city?"]);
        let mut canceled = Progress::default();
        canceled.take(&json!({"task": {"status": {"state": "TASK_STATE_CANCELED"}}}));
        assert_eq!(canceled.ended, Some(Err((FailureReason::Cancelled, "the remote task ended canceled".into()))));
        let mut message = Progress::default();
        assert_eq!(message.take(&json!({"message": {"role": "ROLE_AGENT", "parts": [{"text": "Hi"}]}})), ["Hi"]);
        assert_eq!(message.ended, Some(Ok(())));
    }

    #[test]
    fn an_unsettled_task_is_cancelled_by_its_id_in_each_protocol_and_a_settled_one_is_not() {
        let client = TenantClient::new(outbound::AddressPolicy::default());
        let http = client.for_url("https://agent.example/rpc").unwrap().clone();
        let task = |protocol| RemoteTask::new(http.clone(), "https://agent.example/rpc".into(), protocol);
        // 0.3: a Task's `id`, else an update's `taskId`; the first id seen is kept.
        let mut v03 = task(Protocol::V0_3);
        assert_eq!(v03.cancel_request(), None, "no id yet: nothing to cancel");
        v03.observe(&json!({"kind": "status-update", "taskId": "t-3", "status": {"state": "working"}}));
        v03.observe(&json!({"kind": "task", "id": "other", "status": {"state": "working"}}));
        let request = v03.cancel_request().unwrap();
        assert_eq!(
            (request["jsonrpc"].as_str(), request["method"].as_str(), &request["params"]),
            (Some("2.0"), Some("tasks/cancel"), &json!({"id": "t-3"}))
        );
        assert!(request["id"].is_string());
        let mut from_task = task(Protocol::V0_3);
        from_task.observe(&json!({"kind": "task", "id": "t-4", "status": {"state": "submitted"}}));
        assert_eq!(from_task.cancel_request().unwrap()["params"], json!({"id": "t-4"}));
        // 1.0: `task.id`, `statusUpdate.taskId`, `artifactUpdate.taskId`; the method is CancelTask.
        for (result, id) in [
            (json!({"task": {"id": "t-5", "status": {"state": "TASK_STATE_SUBMITTED"}}}), "t-5"),
            (json!({"statusUpdate": {"taskId": "t-6", "status": {"state": "TASK_STATE_WORKING"}}}), "t-6"),
            (json!({"artifactUpdate": {"taskId": "t-7", "artifact": {"parts": [{"text": "x"}]}}}), "t-7"),
        ] {
            let mut v10 = task(Protocol::V1_0);
            v10.observe(&result);
            let request = v10.cancel_request().unwrap();
            assert_eq!((request["method"].as_str(), &request["params"]), (Some("CancelTask"), &json!({"id": id})));
            v10.settle();
            assert_eq!(v10.cancel_request(), None, "a task the remote ended is not cancelled");
        }
        let mut unnamed = task(Protocol::V1_0);
        unnamed.observe(&json!({"message": {"role": "ROLE_AGENT", "parts": [{"text": "Hi"}]}}));
        unnamed.observe(&json!({"task": {"id": "", "status": {}}}));
        assert_eq!(unnamed.cancel_request(), None);
    }

    #[test]
    fn the_endpoint_is_the_first_json_rpc_interface_of_a_1_0_card_else_the_0_3_url() {
        let both = json!({"url": "http://a/v03", "supportedInterfaces": [
            {"url": "http://a/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "http://a/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "http://a/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]});
        assert_eq!(rpc_interface(&both), Some(("http://a/v1", Protocol::V1_0)));
        let compat = json!({"supportedInterfaces": [{"url": "http://a/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]});
        assert_eq!(rpc_interface(&compat), Some(("http://a/old", Protocol::V0_3)));
        assert_eq!(rpc_interface(&json!({"url": "http://a/rpc"})), Some(("http://a/rpc", Protocol::V0_3)));
        let grpc_only = json!({"supportedInterfaces": [{"url": "http://a/grpc", "protocolBinding": "GRPC"}]});
        assert_eq!(rpc_interface(&grpc_only), None);
    }
}
