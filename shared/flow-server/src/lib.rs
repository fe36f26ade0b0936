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
        let url = format!(
            "{}/api/v1/flows/?get_all=true&header_flows=true&remove_example_flows=true",
            self.base_url.trim_end_matches('/')
        );
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
        let status = response.status().as_u16();
        match status {
            200..=299 => {}
            401 | 403 => return Err(FlowServerError::Unauthorized(status)),
            _ => return Err(FlowServerError::Status(status)),
        }
        let body = outbound::read_limited(response, MAX_LIST_BYTES).await.map_err(FlowServerError::Unreadable)?;
        let body: Value = serde_json::from_slice(&body).map_err(|err| FlowServerError::Unreadable(err.to_string()))?;
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
}

/// Largest single event of a streamed flow run, and largest whole answer.
pub const MAX_RUN_EVENT_BYTES: usize = 1024 * 1024;

impl FlowServer {
    /// Runs flow `flow_id` on `message` in `session_id`, streamed:
    /// `POST {base_url}/api/v1/run/{flow_id}?stream=true`.
    /// Langflow answers with JSON events separated by blank lines (`{"event": "token", "data":
    /// {"chunk"}}`, `add_message`, `end` with the result, `error`); each token goes to
    /// `on_token`. Returns the answer: the tokens, or the result's message text when the flow
    /// streamed none. The run is bounded by `limits` (its whole time, first byte, silence).
    pub async fn run_flow(
        &self,
        client: &TenantClient,
        flow_id: &str,
        message: &str,
        session_id: &str,
        limits: outbound::StreamLimits,
        on_token: &mut (dyn FnMut(&str) + Send),
    ) -> Result<String, FlowServerError> {
        let flow = url::form_urlencoded::byte_serialize(flow_id.as_bytes()).collect::<String>();
        let url = format!("{}/api/v1/run/{flow}?stream=true", self.base_url.trim_end_matches('/'));
        let http = match client.for_url(&url) {
            Ok(http) => http,
            Err(refused) => return Err(FlowServerError::Unreachable(refused.to_string())),
        };
        let body = serde_json::json!({
            "input_value": message, "input_type": "chat", "output_type": "chat", "session_id": session_id
        });
        let mut response = http
            .post(url)
            .stream_limits(limits)
            .header("x-api-key", &self.api_key)
            .json(&body)
            .send()
            .await
            .map_err(|err| FlowServerError::Unreachable(outbound::describe(&err)))?;
        let status = response.status().as_u16();
        match status {
            200..=299 => {}
            401 | 403 => return Err(FlowServerError::Unauthorized(status)),
            _ => return Err(FlowServerError::Status(status)),
        }
        let mut buffer: Vec<u8> = Vec::new();
        let mut answer = String::new();
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
                if let Some(done) = take_event(&event, &mut answer, on_token)? {
                    return Ok(done);
                }
            }
            if buffer.len() > MAX_RUN_EVENT_BYTES {
                return Err(FlowServerError::RunFailed("an event of the flow run is too large".into()));
            }
        }
        if let Some(done) = take_event(&buffer, &mut answer, on_token)? {
            return Ok(done);
        }
        Err(FlowServerError::RunFailed("the flow run ended without an end event".into()))
    }
}

fn find_blank_line(buffer: &[u8]) -> Option<usize> {
    buffer.windows(2).position(|pair| pair == b"\n\n")
}

/// One event of a flow run; `Some(answer)` at its end.
fn take_event(
    event: &[u8],
    answer: &mut String,
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
                answer.push_str(chunk);
                on_token(chunk);
            }
            Ok(None)
        }
        Some("error") => {
            let message = value.pointer("/data/error").and_then(Value::as_str).unwrap_or("the flow failed");
            Err(FlowServerError::RunFailed(format!(
                "the flow failed: {}",
                message.chars().take(300).collect::<String>()
            )))
        }
        Some("end") => {
            if answer.is_empty() {
                let text = result_text(value.pointer("/data/result").unwrap_or(&Value::Null));
                if !text.is_empty() {
                    on_token(&text);
                    answer.push_str(&text);
                }
            }
            Ok(Some(answer.clone()))
        }
        _ => Ok(None),
    }
}

/// The chat message text of a run result (`outputs[0].outputs[0].results.message.text`).
fn result_text(result: &Value) -> String {
    let first =
        |value: &Value, key: &str| value.get(key).and_then(Value::as_array).and_then(|items| items.first()).cloned();
    first(result, "outputs")
        .and_then(|output| first(&output, "outputs"))
        .and_then(|output| output.pointer("/results/message/text").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod run_tests {
    use super::*;

    #[test]
    fn tokens_stream_and_the_end_gives_the_answer() {
        let mut answer = String::new();
        let mut tokens = Vec::new();
        let mut on_token = |token: &str| tokens.push(token.to_owned());
        assert_eq!(take_event(br#"{"event": "add_message", "data": {}}"#, &mut answer, &mut on_token).unwrap(), None);
        assert_eq!(
            take_event(br#"{"event": "token", "data": {"chunk": "Hi"}}"#, &mut answer, &mut on_token).unwrap(),
            None
        );
        assert_eq!(
            take_event(br#"data: {"event": "end", "data": {"result": {}}}"#, &mut answer, &mut on_token).unwrap(),
            Some("Hi".into())
        );
        let mut quiet = String::new();
        let end = br#"{"event": "end", "data": {"result": {"outputs": [{"outputs": [{"results": {"message": {"text": "Whole"}}}]}]}}}"#;
        assert_eq!(take_event(end, &mut quiet, &mut |_| {}).unwrap(), Some("Whole".into()));
        assert!(take_event(br#"{"event": "error", "data": {"error": "boom"}}"#, &mut quiet, &mut |_| {}).is_err());
        assert!(take_event(b"{not json", &mut quiet, &mut |_| {}).is_err());
    }
}
