//! MCP's Streamable HTTP transport, client side (MCP specification 2025-11-25, "Transports"):
//! every JSON-RPC message is a POST to the server's endpoint; the answer to a request is either
//! one JSON body or an event stream that carries it, possibly after the server's own
//! notifications and requests.
//!
//! Untrusted input: every JSON-RPC message read is at most [`MAX_MESSAGE_BYTES`], and anything
//! that is not the awaited answer is skipped (notifications), answered (`ping`, and "method not
//! found" to other requests, since this client declares no capabilities) or refused with a
//! `NotMcp` error.

use crate::McpError;
use outbound::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use outbound::sse::SseDecoder;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use telemetry::{Kind, Span, genai};

/// The largest JSON-RPC message read from a server (a tool list with large schemas, a tool's
/// result); a larger one fails the operation rather than growing the process.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// JSON-RPC's "method not found".
const METHOD_NOT_FOUND: i64 = -32601;

/// A connection to one server's endpoint: its URL, the configured headers, and once
/// initialized, the session id and protocol version every later message carries.
#[derive(Debug)]
pub(crate) struct Connection {
    http: outbound::Client,
    url: String,
    headers: HeaderMap,
    next_id: AtomicU64,
}

impl Connection {
    pub(crate) fn new(http: outbound::Client, url: String, mut headers: HeaderMap) -> Self {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        Self { http, url, headers, next_id: AtomicU64::new(0) }
    }

    /// Sends a request and returns its `result`, with the headers of the HTTP response that
    /// carried it (`initialize`'s carries the session id).
    ///
    /// Within a run's trace, each request is a client span (`{method} {tool}`, the conventions'
    /// MCP span), and its `params._meta` carries that span's `traceparent` (SEP-414).
    pub(crate) async fn request(&self, method: &str, mut params: Value) -> Result<(Value, HeaderMap), McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let tool = (method == "tools/call").then(|| params.get("name").and_then(Value::as_str)).flatten();
        let mut span =
            Span::start(tool.map_or_else(|| method.to_owned(), |tool| format!("{method} {tool}")), Kind::Client);
        span.set(genai::MCP_METHOD_NAME, method);
        span.set(genai::JSONRPC_REQUEST_ID, id.to_string());
        if let Some(tool) = tool {
            span.set(genai::TOOL_NAME, tool);
            span.set(genai::OPERATION_NAME, genai::EXECUTE_TOOL);
        }
        if let Some(version) = self.headers.get(PROTOCOL_VERSION).and_then(|value| value.to_str().ok()) {
            span.set(genai::MCP_PROTOCOL_VERSION, version);
        }
        if let (Some(context), Some(params)) = (span.context(), params.as_object_mut()) {
            let meta = params.entry("_meta").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert("traceparent".into(), Value::String(context.traceparent()));
            }
        }
        let answer = span.run(self.exchange(method, id, params)).await;
        match &answer {
            Err(err) => span.fail(err.kind(), &err.to_string()),
            Ok((result, _)) if result.get("isError").and_then(Value::as_bool) == Some(true) => {
                span.fail("tool_error", "the tool reported an error");
            }
            Ok(_) => {}
        }
        answer
    }

    async fn exchange(&self, method: &str, id: u64, params: Value) -> Result<(Value, HeaderMap), McpError> {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self.post(&message).await?;
        let headers = response.headers().clone();
        let answer = match media_type(&response).as_str() {
            "application/json" => {
                let body = outbound::read_limited(response, MAX_MESSAGE_BYTES).await.map_err(McpError::Unreachable)?;
                let message: Value = serde_json::from_slice(&body).map_err(|_| not_json_rpc())?;
                // A batch answer (older servers) holds ours among others.
                let answer = match message {
                    Value::Array(messages) => messages.into_iter().find(|message| is_answer_to(message, id)),
                    message => Some(message).filter(|message| is_answer_to(message, id)),
                };
                answer.ok_or_else(not_json_rpc)?
            }
            "text/event-stream" => self.answer_in_stream(response, id).await?,
            "" => return Err(McpError::NotMcp(format!("its answer to {method} has no content type"))),
            other => return Err(McpError::NotMcp(format!("it answered {method} with {other}, not JSON-RPC"))),
        };
        Ok((result_of(answer)?, headers))
    }

    /// Sends a notification; the server acknowledges it with 202 and no body.
    pub(crate) async fn notify(&self, method: &str) -> Result<(), McpError> {
        self.post(&json!({"jsonrpc": "2.0", "method": method})).await.map(drop)
    }

    /// From now on every message carries the session id the server gave (if any) and the
    /// protocol version agreed in `initialize`.
    pub(crate) fn join_session(&mut self, session_id: Option<HeaderValue>, protocol_version: &str) {
        if let Some(session_id) = session_id {
            self.headers.insert(SESSION_ID, session_id);
        }
        if let Ok(version) = HeaderValue::from_str(protocol_version) {
            self.headers.insert(PROTOCOL_VERSION, version);
        }
    }

    /// Ends the session on the server (DELETE with its id). A server that keeps no sessions,
    /// or refuses (405), needs nothing more, so failures are ignored.
    pub(crate) async fn close(&self) {
        if self.headers.contains_key(SESSION_ID) {
            let _ = self.http.delete(&self.url).headers(self.headers.clone()).send().await;
        }
    }

    async fn post(&self, message: &Value) -> Result<outbound::Response, McpError> {
        let body = serde_json::to_vec(message).map_err(|err| McpError::NotMcp(err.to_string()))?;
        let response = self
            .http
            .post(&self.url)
            .headers(self.headers.clone())
            .body(body)
            .send()
            .await
            .map_err(|err| McpError::Unreachable(outbound::describe(&err)))?;
        match response.status().as_u16() {
            200..=299 => Ok(response),
            401 => Err(McpError::Unreachable("the server requires authentication (HTTP 401)".into())),
            403 => Err(McpError::Unreachable("the server refused the credentials (HTTP 403)".into())),
            // The spec's answer to a message of a session the server no longer knows.
            404 if self.headers.contains_key(SESSION_ID) => Err(McpError::NotMcp("it answered HTTP 404".into())),
            status => Err(McpError::Unreachable(format!("the server answered HTTP {status}"))),
        }
    }

    /// Reads an event stream until the answer to request `id`, answering the server's own
    /// requests on the way.
    async fn answer_in_stream(&self, mut response: outbound::Response, id: u64) -> Result<Value, McpError> {
        let mut decoder = SseDecoder::new(MAX_MESSAGE_BYTES);
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return Err(McpError::NotMcp("its event stream ended without an answer".into())),
                Err(err) => return Err(McpError::Unreachable(outbound::describe(&err))),
            };
            let events = decoder.feed(&chunk).map_err(|err| McpError::NotMcp(err.to_string()))?;
            for event in events {
                if !(event.event.is_empty() || event.event == "message") || event.data.is_empty() {
                    continue;
                }
                let message: Value = serde_json::from_str(&event.data).map_err(|_| not_json_rpc())?;
                if is_answer_to(&message, id) {
                    return Ok(message);
                }
                if let (Some(method), Some(request_id)) = (message.get("method"), message.get("id")) {
                    self.answer_server_request(method.as_str().unwrap_or_default(), request_id).await;
                }
            }
        }
    }

    /// `ping` gets an empty result; anything else "method not found" (no capability declared).
    async fn answer_server_request(&self, method: &str, id: &Value) {
        let answer = match method {
            "ping" => json!({"jsonrpc": "2.0", "id": id, "result": {}}),
            _ => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": METHOD_NOT_FOUND, "message": "Method not found"}})
            }
        };
        // The server's request is not ours to fail on: a lost answer is the server's timeout.
        let _ = self.post(&answer).await;
    }
}

/// The media type of a response, lowercase, without parameters.
fn media_type(response: &outbound::Response) -> String {
    let value = response.headers().get(CONTENT_TYPE).and_then(|value| value.to_str().ok()).unwrap_or_default();
    value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

/// Whether `message` is the response (result or error) to request `id`.
fn is_answer_to(message: &Value, id: u64) -> bool {
    message.get("id").and_then(Value::as_u64) == Some(id)
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// A response's `result`, or its `error` as `Refused`.
fn result_of(mut answer: Value) -> Result<Value, McpError> {
    if let Some(error) = answer.get("error") {
        let message = error.get("message").and_then(Value::as_str).unwrap_or("no message");
        return Err(McpError::Refused(message.chars().take(500).collect()));
    }
    answer.get_mut("result").map(Value::take).ok_or_else(not_json_rpc)
}

fn not_json_rpc() -> McpError {
    McpError::NotMcp("its answer is not a JSON-RPC response".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_result_or_error_with_the_request_id_is_the_answer() {
        assert!(is_answer_to(&json!({"jsonrpc": "2.0", "id": 3, "result": {}}), 3));
        assert!(is_answer_to(&json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -1}}), 3));
        assert!(!is_answer_to(&json!({"jsonrpc": "2.0", "id": 4, "result": {}}), 3));
        assert!(!is_answer_to(&json!({"jsonrpc": "2.0", "id": "3", "result": {}}), 3));
        assert!(!is_answer_to(&json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}), 3));
        assert!(!is_answer_to(&json!({"jsonrpc": "2.0", "method": "notifications/progress"}), 3));
        assert!(!is_answer_to(&json!([1, 2]), 3));
    }

    #[test]
    fn an_error_answer_is_refused_with_its_message_cut_short() {
        let refused = result_of(json!({"id": 1, "error": {"code": -32602, "message": "x".repeat(2_000)}}));
        assert_eq!(refused, Err(McpError::Refused("x".repeat(500))));
        assert_eq!(result_of(json!({"id": 1, "error": {}})), Err(McpError::Refused("no message".into())));
        assert_eq!(result_of(json!({"id": 1, "result": {"a": 1}})), Ok(json!({"a": 1})));
        assert_eq!(result_of(json!({"id": 1})), Err(not_json_rpc()));
    }
}
