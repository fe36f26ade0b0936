//! Anthropic's Messages API, streamed: `POST {base}/v1/messages` with `"stream": true`, answered
//! by typed SSE events (`message_start`, `content_block_start`/`_delta`/`_stop` for text and
//! `tool_use` blocks, `message_delta` with the stop reason and output tokens, `message_stop`).

use super::{
    DeltaSink, Message, Provider, ProviderError, SilenceLimits, ToolCall, Turn, TurnRequest, read_events,
    send_with_retries,
};
use crate::events::Usage;
use futures_util::future::BoxFuture;
use outbound::TenantClient;
use serde_json::{Map, Value, json};

/// The API version this client speaks.
pub const API_VERSION: &str = "2023-06-01";

/// `max_tokens` when the model's `default_parameters` set none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// An Anthropic Messages endpoint and the model to ask.
pub struct Anthropic {
    pub client: TenantClient,
    /// The full `…/v1/messages` URL.
    pub url: String,
    pub api_key: Option<String>,
    pub model: String,
    pub parameters: Map<String, Value>,
    /// How long the model's stream may be silent.
    pub silence: SilenceLimits,
}

impl std::fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anthropic")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("silence", &self.silence)
            .finish_non_exhaustive()
    }
}

impl Anthropic {
    /// The request body of one turn. Consecutive tool results go in one user message, as the
    /// API requires.
    pub fn body(&self, request: &TurnRequest) -> Value {
        let mut messages: Vec<Value> = Vec::new();
        for message in &request.messages {
            match message {
                Message::User { text, attachments } if attachments.is_empty() => {
                    messages.push(json!({ "role": "user", "content": text }));
                }
                // Vision and PDF input: the files first, then the text (Anthropic's recommended
                // order); `pdf_documents_only` refused any other document.
                Message::User { text, attachments } => {
                    let mut content: Vec<Value> = attachments
                        .iter()
                        .map(|file| {
                            let kind = if file.is_image() { "image" } else { "document" };
                            json!({ "type": kind, "source": {
                                "type": "base64", "media_type": file.media_type, "data": file.base64(),
                            }})
                        })
                        .collect();
                    content.push(json!({ "type": "text", "text": text }));
                    messages.push(json!({ "role": "user", "content": content }));
                }
                Message::Assistant { text, tool_calls } => {
                    let mut content = Vec::new();
                    if !text.is_empty() {
                        content.push(json!({ "type": "text", "text": text }));
                    }
                    for call in tool_calls {
                        content.push(
                            json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments }),
                        );
                    }
                    messages.push(json!({ "role": "assistant", "content": content }));
                }
                Message::Tool { call_id, content, .. } => {
                    let block = json!({ "type": "tool_result", "tool_use_id": call_id, "content": content });
                    let previous_is_results = messages.last().is_some_and(|last| {
                        last["role"] == "user"
                            && last["content"]
                                .as_array()
                                .is_some_and(|blocks| blocks.iter().all(|block| block["type"] == "tool_result"))
                    });
                    match messages.last_mut().and_then(|last| last["content"].as_array_mut()) {
                        Some(blocks) if previous_is_results => blocks.push(block),
                        _ => messages.push(json!({ "role": "user", "content": [block] })),
                    }
                }
            }
        }
        let mut body = self.parameters.clone();
        body.entry("max_tokens").or_insert(json!(DEFAULT_MAX_TOKENS));
        body.insert("model".into(), json!(self.model));
        body.insert("messages".into(), Value::Array(messages));
        body.insert("stream".into(), json!(true));
        if let Some(system) = &request.system {
            body.insert("system".into(), json!(system));
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| json!({ "name": tool.name, "description": tool.description, "input_schema": tool.parameters }))
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        Value::Object(body)
    }

    async fn run_turn(&self, request: &TurnRequest, on_delta: DeltaSink<'_>) -> Result<Turn, ProviderError> {
        super::pdf_documents_only(request, "anthropic")?;
        let http = self.client.for_url(&self.url).map_err(|refused| ProviderError::Unreachable(refused.to_string()))?;
        let body = self.body(request);
        let build = || {
            let call = http
                .post(&self.url)
                .stream_limits(self.silence.for_turn(request.deadline))
                .json(&body)
                .header("anthropic-version", API_VERSION)
                .header("accept", "text/event-stream");
            match &self.api_key {
                Some(key) => call.header("x-api-key", key),
                None => call,
            }
        };
        // 529: Anthropic's "overloaded", retried like a rate limit.
        let response = send_with_retries(build, &[429, 529]).await?;
        let mut turn = MessageAccumulator::default();
        let stopped = read_events(response, |event| {
            let value: Value = serde_json::from_str(&event.data)
                .map_err(|err| ProviderError::Malformed(format!("an event is not JSON ({err})")))?;
            if let Some(delta) = turn.feed(&value)? {
                on_delta(&delta);
            }
            Ok(turn.stopped)
        })
        .await?;
        if stopped {
            turn.finish()
        } else {
            Err(ProviderError::Malformed("the stream ended before message_stop".into()))
        }
    }
}

impl Provider for Anthropic {
    fn turn<'a>(
        &'a self,
        request: &'a TurnRequest,
        on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<Turn, ProviderError>> {
        Box::pin(self.run_turn(request, on_delta))
    }
}

/// A content block being streamed.
#[derive(Debug)]
enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    /// Thinking and other block types are not part of the answer.
    Other,
}

/// Builds a turn from Messages stream events.
#[derive(Debug, Default)]
pub struct MessageAccumulator {
    text: String,
    blocks: Vec<(u64, Block)>,
    usage: Usage,
    stopped: bool,
}

impl MessageAccumulator {
    /// Takes one event (its `data`); returns a text delta if it carried one.
    pub fn feed(&mut self, event: &Value) -> Result<Option<String>, ProviderError> {
        let kind = event.get("type").and_then(Value::as_str).unwrap_or_default();
        let index = event.get("index").and_then(Value::as_u64);
        match kind {
            "message_start" => {
                let usage = event.pointer("/message/usage");
                let number = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64).unwrap_or(0);
                // Anthropic's `input_tokens` already exclude the cache's reads and writes.
                self.usage = Usage {
                    input_tokens: number("input_tokens"),
                    output_tokens: number("output_tokens"),
                    cache_read_tokens: number("cache_read_input_tokens"),
                    cache_write_tokens: number("cache_creation_input_tokens"),
                };
            }
            "content_block_start" => {
                let index = index.ok_or_else(|| malformed("a block has no index"))?;
                let block = event.get("content_block").ok_or_else(|| malformed("a block start has no block"))?;
                let text = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
                let block = match block.get("type").and_then(Value::as_str) {
                    Some("text") => Block::Text,
                    Some("tool_use") => Block::ToolUse { id: text("id"), name: text("name"), json: String::new() },
                    _ => Block::Other,
                };
                self.blocks.push((index, block));
            }
            "content_block_delta" => {
                let index = index.ok_or_else(|| malformed("a delta has no index"))?;
                let delta = event.get("delta").ok_or_else(|| malformed("a delta event has no delta"))?;
                let block = self
                    .blocks
                    .iter_mut()
                    .rev()
                    .find(|(at, _)| *at == index)
                    .map(|(_, block)| block)
                    .ok_or_else(|| malformed("a delta belongs to no block"))?;
                match (block, delta.get("type").and_then(Value::as_str)) {
                    (Block::Text, Some("text_delta")) => {
                        let text = delta.get("text").and_then(Value::as_str).unwrap_or_default();
                        if !text.is_empty() {
                            self.text.push_str(text);
                            return Ok(Some(text.to_owned()));
                        }
                    }
                    (Block::ToolUse { json, .. }, Some("input_json_delta")) => {
                        json.push_str(delta.get("partial_json").and_then(Value::as_str).unwrap_or_default());
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(output) = event.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    self.usage.output_tokens = output;
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let message = event.pointer("/error/message").and_then(Value::as_str).unwrap_or("an error event");
                return Err(ProviderError::Status { status: 200, message: message.chars().take(300).collect() });
            }
            // `ping`, `content_block_stop` and event types added later carry nothing needed here.
            _ => {}
        }
        Ok(None)
    }

    /// The whole turn: text and every `tool_use` block with its input as an object.
    pub fn finish(self) -> Result<Turn, ProviderError> {
        let mut tool_calls = Vec::new();
        for (_, block) in self.blocks {
            if let Block::ToolUse { id, name, json } = block {
                if name.is_empty() {
                    return Err(malformed("a tool_use block has no name"));
                }
                let Some(arguments) = super::tool_arguments(&json) else {
                    return Err(malformed(&format!("the input of tool_use {name} is not a JSON object")));
                };
                tool_calls.push(ToolCall { id, name, arguments });
            }
        }
        Ok(Turn { text: self.text, tool_calls, usage: self.usage })
    }
}

fn malformed(message: &str) -> ProviderError {
    ProviderError::Malformed(message.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ToolSpec;

    fn turn_of(events: &[Value]) -> Result<(Vec<String>, Turn), ProviderError> {
        let mut accumulator = MessageAccumulator::default();
        let mut deltas = Vec::new();
        for event in events {
            deltas.extend(accumulator.feed(event)?);
        }
        Ok((deltas, accumulator.finish()?))
    }

    #[test]
    fn text_and_tool_use_blocks_with_usage() {
        let (deltas, turn) = turn_of(&[
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 25, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "check."}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "forecast", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": "}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"Oslo\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "alerts", "input": {}}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 40}}),
            json!({"type": "message_stop"}),
        ])
        .unwrap();
        assert_eq!(deltas, ["Let me ", "check."]);
        assert_eq!(turn.text, "Let me check.");
        assert_eq!(turn.usage, Usage::tokens(25, 40));
        assert_eq!(turn.tool_calls.len(), 2);
        assert_eq!(
            (turn.tool_calls[0].id.as_str(), turn.tool_calls[0].arguments["city"].as_str()),
            ("toolu_1", Some("Oslo"))
        );
        assert!(turn.tool_calls[1].arguments.is_empty());
    }

    #[test]
    fn malformed_events_are_errors() {
        for events in [
            vec![json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}})],
            vec![json!({"type": "content_block_start", "content_block": {"type": "text"}})],
            vec![
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "f"}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "[1]"}}),
            ],
            vec![json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})],
        ] {
            assert!(turn_of(&events).is_err(), "{events:?}");
        }
    }

    #[test]
    fn tool_results_of_one_turn_share_one_user_message() {
        let provider = Anthropic {
            client: TenantClient::new(outbound::AddressPolicy::default()),
            url: "https://api.anthropic.com/v1/messages".into(),
            api_key: None,
            model: "claude-test".into(),
            parameters: Map::new(),
            silence: SilenceLimits::default(),
        };
        let call = |id: &str| ToolCall { id: id.into(), name: "f".into(), arguments: Map::new() };
        let request = TurnRequest {
            system: Some("Be brief.".into()),
            messages: vec![
                Message::user("hi"),
                Message::Assistant { text: "Checking.".into(), tool_calls: vec![call("t1"), call("t2")] },
                Message::Tool { call_id: "t1".into(), name: "f".into(), content: "one".into() },
                Message::Tool { call_id: "t2".into(), name: "f".into(), content: "two".into() },
            ],
            tools: vec![ToolSpec { name: "f".into(), description: "f".into(), parameters: json!({"type": "object"}) }],
            deadline: None,
        };
        let body = provider.body(&request);
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(body["system"], "Be brief.");
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["content"][1], json!({"type": "tool_use", "id": "t1", "name": "f", "input": {}}));
        assert_eq!(messages[2]["content"].as_array().unwrap().len(), 2);
        assert_eq!(messages[2]["content"][1]["tool_use_id"], "t2");
        assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
    }

    #[test]
    fn images_go_before_the_text_as_base64_blocks() {
        let provider = Anthropic {
            client: TenantClient::new(outbound::AddressPolicy::default()),
            url: "https://api.anthropic.com/v1/messages".into(),
            api_key: None,
            model: "claude-test".into(),
            parameters: Map::new(),
            silence: SilenceLimits::default(),
        };
        let image = crate::providers::Attachment::sniff("x.gif", b"GIF89a..".to_vec()).unwrap();
        let request = TurnRequest {
            messages: vec![Message::User { text: "What is it?".into(), attachments: vec![image] }],
            ..TurnRequest::default()
        };
        assert_eq!(
            provider.body(&request)["messages"][0]["content"],
            json!([
                {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "R0lGODlhLi4="}},
                {"type": "text", "text": "What is it?"},
            ])
        );
    }
}
