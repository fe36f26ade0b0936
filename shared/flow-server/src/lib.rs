//! A client of a Langflow-compatible flow server (`{base_url}/api/v1/…`, `x-api-key` auth).

use outbound::TenantClient;
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;

/// Longest a flow list may take.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(15);

/// Largest flow list read (with header-only flows, thousands fit in far less).
pub const MAX_LIST_BYTES: usize = 8 * 1024 * 1024;

/// Where the flow server is and the key it takes.
#[derive(Clone)]
pub struct FlowServer {
    /// The server's root (`https://flows.example.com`), without `/api/v1`.
    pub base_url: String,
    pub api_key: String,
}

impl std::fmt::Debug for FlowServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowServer").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

/// A flow as the list reports it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Flow {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub endpoint_name: Option<String>,
    /// Components are building blocks, not runnable flows.
    #[serde(default)]
    pub is_component: Option<bool>,
}

/// Why the flows could not be listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowServerError {
    #[error("could not reach the flow server: {0}")]
    Unreachable(String),
    #[error("the flow server refused the API key (HTTP {0})")]
    Unauthorized(u16),
    #[error("the flow server answered HTTP {0}")]
    Status(u16),
    #[error("the flow server's answer is not a list of flows: {0}")]
    Unreadable(String),
    /// A flow run failed or its stream could not be read; the text says which.
    #[error("{0}")]
    RunFailed(String),
}

impl FlowServer {
    /// Every runnable flow: `GET {base_url}/api/v1/flows/` with the header-only projection and
    /// without the server's example flows. Answers in both shapes Langflow has used (a JSON array,
    /// or a page `{"items": […]}`) are read; components are left out.
    pub async fn list_flows(&self, client: &TenantClient) -> Result<Vec<Flow>, FlowServerError> {
        let body =
            self.get_json(client, "/api/v1/flows/?get_all=true&header_flows=true&remove_example_flows=true").await?;
        let items = match body {
            Value::Array(items) => items,
            Value::Object(mut page) => match page.remove("items") {
                Some(Value::Array(items)) => items,
                _ => return Err(FlowServerError::Unreadable("an object without an items array".into())),
            },
            _ => return Err(FlowServerError::Unreadable("neither an array nor a page".into())),
        };
        let mut flows = Vec::with_capacity(items.len());
        for item in items {
            let flow: Flow =
                serde_json::from_value(item).map_err(|err| FlowServerError::Unreadable(err.to_string()))?;
            if flow.is_component != Some(true) {
                flows.push(flow);
            }
        }
        Ok(flows)
    }

    /// The input and output types of flow `flow_id`, read from its graph:
    /// `GET {base_url}/api/v1/flows/{flow_id}` (the list's header-only flows carry no graph).
    pub async fn flow_io(&self, client: &TenantClient, flow_id: &str) -> Result<FlowIo, FlowServerError> {
        let flow = url::form_urlencoded::byte_serialize(flow_id.as_bytes()).collect::<String>();
        let body = self.get_json(client, &format!("/api/v1/flows/{flow}")).await?;
        Ok(FlowIo::of_graph(&body))
    }

    /// `GET {base_url}{path}` with the key, its answer read as JSON (at most `MAX_LIST_BYTES`).
    async fn get_json(&self, client: &TenantClient, path: &str) -> Result<Value, FlowServerError> {
        let url = format!("{}{path}", self.base_url.trim_end_matches('/'));
        let http = match client.for_url(&url) {
            Ok(http) => http,
            Err(refused) => return Err(FlowServerError::Unreachable(refused.to_string())),
        };
        let response = http
            .get(url)
            .header("x-api-key", &self.api_key)
            .header("accept", "application/json")
            .timeout(LIST_TIMEOUT)
            .send()
            .await
            .map_err(|err| FlowServerError::Unreachable(outbound::describe(&err)))?;
        check_status(response.status().as_u16())?;
        let body = outbound::read_limited(response, MAX_LIST_BYTES).await.map_err(FlowServerError::Unreadable)?;
        serde_json::from_slice(&body).map_err(|err| FlowServerError::Unreadable(err.to_string()))
    }
}

/// A 2xx status, or the error that names it.
fn check_status(status: u16) -> Result<(), FlowServerError> {
    match status {
        200..=299 => Ok(()),
        401 | 403 => Err(FlowServerError::Unauthorized(status)),
        _ => Err(FlowServerError::Status(status)),
    }
}

/// Langflow's `input_type` / `output_type` of a run: which input components get the message and
/// which output components' results come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoType {
    /// `ChatInput` / `ChatOutput` components.
    Chat,
    /// `TextInput` / `TextOutput` components.
    Text,
}

impl IoType {
    /// `chat` or `text`, as Langflow and `agent_config.flowtool` spell them.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Text => "text",
        }
    }

    /// The type named `name` (`chat`, `text`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "chat" => Some(Self::Chat),
            "text" => Some(Self::Text),
            _ => None,
        }
    }
}

/// What a flow's graph says it takes and gives; `None` where it has no chat or text component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowIo {
    pub input: Option<IoType>,
    pub output: Option<IoType>,
}

impl FlowIo {
    /// The types of a flow as `GET /api/v1/flows/{id}` returns it: its components' types in
    /// `data.nodes[].data.type`. A chat component wins over a text one (Langflow's playground
    /// talks to the chat ones).
    pub fn of_graph(flow: &Value) -> Self {
        let types: Vec<&str> = flow
            .pointer("/data/nodes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|node| node.pointer("/data/type").and_then(Value::as_str))
            .collect();
        let pick = |chat: &str, text: &str| {
            if types.contains(&chat) {
                Some(IoType::Chat)
            } else if types.contains(&text) {
                Some(IoType::Text)
            } else {
                None
            }
        };
        Self { input: pick("ChatInput", "TextInput"), output: pick("ChatOutput", "TextOutput") }
    }
}

/// Largest single event of a streamed flow run, and largest whole answer.
pub const MAX_RUN_EVENT_BYTES: usize = 1024 * 1024;

/// Longest reason of a failed flow kept in the run's error.
pub const MAX_REASON_CHARS: usize = 500;

/// One run of a flow: what it is asked, in which session, as which types.
#[derive(Debug, Clone, Copy)]
pub struct FlowRun<'a> {
    pub flow_id: &'a str,
    pub message: &'a str,
    pub session_id: &'a str,
    pub input_type: IoType,
    pub output_type: IoType,
}

impl FlowServer {
    /// Runs a flow, streamed: `POST {base_url}/api/v1/run/{flow_id}?stream=true`.
    /// Langflow answers with JSON events separated by blank lines (`{"event": "token", "data":
    /// {"chunk"}}`, `add_message`, `end` with the result, `error`); each token goes to
    /// `on_token`. Returns the answer: the tokens, or the result's output texts when the flow
    /// streamed none; a flow that gives no answer fails. The run is bounded by `limits` (its
    /// whole time, first byte, silence).
    pub async fn run_flow(
        &self,
        client: &TenantClient,
        run: FlowRun<'_>,
        limits: outbound::StreamLimits,
        on_token: &mut (dyn FnMut(&str) + Send),
    ) -> Result<String, FlowServerError> {
        let flow = url::form_urlencoded::byte_serialize(run.flow_id.as_bytes()).collect::<String>();
        let url = format!("{}/api/v1/run/{flow}?stream=true", self.base_url.trim_end_matches('/'));
        let http = match client.for_url(&url) {
            Ok(http) => http,
            Err(refused) => return Err(FlowServerError::Unreachable(refused.to_string())),
        };
        let body = serde_json::json!({
            "input_value": run.message,
            "input_type": run.input_type.as_str(),
            "output_type": run.output_type.as_str(),
            "session_id": run.session_id,
        });
        let mut response = http
            .post(url)
            .stream_limits(limits)
            .header("x-api-key", &self.api_key)
            .json(&body)
            .send()
            .await
            .map_err(|err| FlowServerError::Unreachable(outbound::describe(&err)))?;
        check_status(response.status().as_u16())?;
        let mut buffer: Vec<u8> = Vec::new();
        let mut reading = RunReading::default();
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(err) if err.is_timeout() => {
                    let stopped = format!("the flow run's stream stopped: {}", outbound::describe(&err));
                    return Err(FlowServerError::RunFailed(stopped));
                }
                Err(err) => return Err(FlowServerError::Unreachable(outbound::describe(&err))),
            };
            buffer.extend_from_slice(&chunk);
            while let Some(end) = find_blank_line(&buffer) {
                let event: Vec<u8> = buffer.drain(..end).collect();
                buffer.drain(..2.min(buffer.len()));
                if let Some(done) = reading.take_event(&event, on_token)? {
                    return Ok(done);
                }
            }
            if buffer.len() > MAX_RUN_EVENT_BYTES {
                return Err(FlowServerError::RunFailed("an event of the flow run is too large".into()));
            }
        }
        if let Some(done) = reading.take_event(&buffer, on_token)? {
            return Ok(done);
        }
        Err(reading
            .failure()
            .unwrap_or_else(|| FlowServerError::RunFailed("the flow run ended without an end event".into())))
    }
}

fn find_blank_line(buffer: &[u8]) -> Option<usize> {
    buffer.windows(2).position(|pair| pair == b"\n\n")
}

/// What a flow run's events said so far.
#[derive(Debug, Default)]
struct RunReading {
    /// The streamed tokens.
    answer: String,
    /// Langflow's reason of a failure: a component's failure comes as an `error` event with the
    /// reason in `data.text` (and `data.error: false`), then one with `data.error: "500: {…}"`.
    reason: Option<String>,
}

impl RunReading {
    /// One event of a flow run; `Some(answer)` at its end.
    fn take_event(
        &mut self,
        event: &[u8],
        on_token: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Option<String>, FlowServerError> {
        let text = String::from_utf8_lossy(event);
        let text = text.trim();
        let text = text.strip_prefix("data:").map(str::trim).unwrap_or(text);
        if text.is_empty() {
            return Ok(None);
        }
        let value: Value = serde_json::from_str(text)
            .map_err(|_| FlowServerError::RunFailed("an event of the flow run is not JSON".into()))?;
        match value.get("event").and_then(Value::as_str) {
            Some("token") => {
                if let Some(chunk) = value.pointer("/data/chunk").and_then(Value::as_str).filter(|c| !c.is_empty()) {
                    self.answer.push_str(chunk);
                    on_token(chunk);
                }
                Ok(None)
            }
            Some("error") => {
                let reason = |pointer: &str| {
                    value.pointer(pointer).and_then(Value::as_str).map(str::trim).filter(|r| !r.is_empty())
                };
                match value.pointer("/data/error") {
                    // The error message of the failed component: the reason; the final error follows.
                    Some(Value::Bool(_)) | None if reason("/data/text").is_some() => {
                        if self.reason.is_none() {
                            self.reason = reason("/data/text").map(str::to_owned);
                        }
                        Ok(None)
                    }
                    _ => {
                        if self.reason.is_none() {
                            self.reason = Some(reason("/data/error").unwrap_or("no reason given").to_owned());
                        }
                        Err(self.failure().unwrap_or_else(|| FlowServerError::RunFailed("the flow failed".into())))
                    }
                }
            }
            Some("end") => {
                if let Some(failure) = self.failure() {
                    return Err(failure);
                }
                if self.answer.is_empty() {
                    let text = result_text(value.pointer("/data/result").unwrap_or(&Value::Null));
                    if !text.is_empty() {
                        on_token(&text);
                        self.answer.push_str(&text);
                    }
                }
                if self.answer.is_empty() {
                    return Err(FlowServerError::RunFailed(
                        "the flow gave no answer (none of its output components produced text)".into(),
                    ));
                }
                Ok(Some(self.answer.clone()))
            }
            _ => Ok(None),
        }
    }

    /// The run's failure, once an `error` event gave its reason.
    fn failure(&self) -> Option<FlowServerError> {
        let reason = self.reason.as_ref()?;
        let mut bounded: String = reason.chars().take(MAX_REASON_CHARS).collect();
        if bounded.len() < reason.len() {
            bounded.push('…');
        }
        Some(FlowServerError::RunFailed(format!("the flow failed: {bounded}")))
    }
}

/// The text a run result gives: for each output component (`outputs[].outputs[]`), the first
/// text among `results.{message,text}` (a message's `text`, or a string),
/// `outputs.{message,text}.message` and `artifacts.{message,text}` (a string or its `raw`),
/// joined by blank lines.
fn result_text(result: &Value) -> String {
    let components = result
        .get("outputs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|run_output| run_output.get("outputs").and_then(Value::as_array))
        .flatten();
    let texts: Vec<&str> = components.filter_map(component_text).collect();
    texts.join("\n\n")
}

/// One output component's text (see `result_text`).
fn component_text(component: &Value) -> Option<&str> {
    const PLACES: [&str; 12] = [
        "/results/message/text",
        "/results/message",
        "/results/text/text",
        "/results/text",
        "/outputs/message/message",
        "/outputs/message/message/text",
        "/outputs/text/message",
        "/outputs/text/message/text",
        "/artifacts/message",
        "/artifacts/message/raw",
        "/artifacts/text",
        "/artifacts/text/raw",
    ];
    PLACES
        .iter()
        .filter_map(|place| component.pointer(place).and_then(Value::as_str))
        .find(|text| !text.trim().is_empty())
}

#[cfg(test)]
mod run_tests {
    use super::*;
    use serde_json::json;

    fn read(events: &[Value]) -> (Result<Option<String>, FlowServerError>, Vec<String>) {
        let mut reading = RunReading::default();
        let mut tokens = Vec::new();
        let mut on_token = |token: &str| tokens.push(token.to_owned());
        let mut last = Ok(None);
        for event in events {
            last = reading.take_event(event.to_string().as_bytes(), &mut on_token);
            if !matches!(last, Ok(None)) {
                break;
            }
        }
        (last, tokens)
    }

    #[test]
    fn tokens_stream_and_the_end_gives_the_answer() {
        let (done, tokens) = read(&[
            json!({"event": "add_message", "data": {}}),
            json!({"event": "token", "data": {"chunk": "Hi"}}),
            json!({"event": "end", "data": {"result": {}}}),
        ]);
        assert_eq!((done.unwrap(), tokens), (Some("Hi".into()), vec!["Hi".to_owned()]));
        let mut reading = RunReading::default();
        assert_eq!(reading.take_event(br#"data: {"event": "add_message"}"#, &mut |_| {}).unwrap(), None);
        assert!(reading.take_event(b"{not json", &mut |_| {}).is_err());
    }

    #[test]
    fn a_component_failure_reports_langflows_reason() {
        let first =
            json!({"event": "error", "data": {"text": "Error building Component Boom: \n\nboom", "error": false}});
        let second =
            json!({"event": "error", "data": {"error": "500: {\"detail\": \"Error building Component Boom\"}"}});
        let (failed, _) = read(&[first.clone(), second.clone()]);
        assert_eq!(failed.unwrap_err().to_string(), "the flow failed: Error building Component Boom: \n\nboom");
        let (only_final, _) = read(&[second]);
        assert_eq!(
            only_final.unwrap_err().to_string(),
            "the flow failed: 500: {\"detail\": \"Error building Component Boom\"}"
        );
        // An end after the component's error is still a failure.
        let (ended, _) = read(&[first, json!({"event": "end", "data": {"result": {}}})]);
        assert!(ended.unwrap_err().to_string().ends_with("boom"));
        let long = json!({"event": "error", "data": {"error": "x".repeat(2000)}});
        let message = read(&[long]).0.unwrap_err().to_string();
        assert_eq!(message.chars().count(), "the flow failed: ".len() + MAX_REASON_CHARS + 1);
    }

    #[test]
    fn text_and_chat_outputs_are_read_and_no_answer_is_a_failure() {
        let end = |outputs: Value| json!({"event": "end", "data": {"result": {"outputs": [{"outputs": outputs}]}}});
        let cases = [
            (json!([{"results": {"message": {"text": "Chat"}}}]), "Chat"),
            (json!([{"results": {"text": {"text": "Text"}}}]), "Text"),
            (json!([{"results": {}, "outputs": {"text": {"message": "Out", "type": "text"}}}]), "Out"),
            (json!([{"results": {}, "artifacts": {"message": "Art"}}]), "Art"),
            (json!([{"results": {"text": {"text": "A"}}}, {"results": {"text": {"text": "B"}}}]), "A\n\nB"),
        ];
        for (outputs, expected) in cases {
            let (done, tokens) = read(&[end(outputs)]);
            assert_eq!(done.unwrap().as_deref(), Some(expected));
            assert_eq!(tokens, [expected]);
        }
        for nothing in [json!([]), json!([{"results": {"text": {"text": ""}}}])] {
            let failed = read(&[end(nothing)]).0.unwrap_err();
            assert_eq!(failed.to_string(), "the flow gave no answer (none of its output components produced text)");
        }
    }

    #[test]
    fn a_flows_graph_gives_its_types() {
        let graph = |types: &[&str]| {
            let nodes: Vec<Value> = types.iter().map(|t| json!({"id": t, "data": {"type": t}})).collect();
            json!({"id": "f", "data": {"nodes": nodes, "edges": []}})
        };
        let io = |input, output| FlowIo { input, output };
        use IoType::{Chat, Text};
        assert_eq!(FlowIo::of_graph(&graph(&["ChatInput", "Prompt", "ChatOutput"])), io(Some(Chat), Some(Chat)));
        assert_eq!(FlowIo::of_graph(&graph(&["TextInput", "TextOutput"])), io(Some(Text), Some(Text)));
        assert_eq!(FlowIo::of_graph(&graph(&["TextInput", "ChatInput", "TextOutput"])), io(Some(Chat), Some(Text)));
        assert_eq!(FlowIo::of_graph(&graph(&["Prompt"])), io(None, None));
        assert_eq!(FlowIo::of_graph(&json!({"data": null})), io(None, None));
    }
}
