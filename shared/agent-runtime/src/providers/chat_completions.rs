//! OpenAI's Chat Completions streaming format, spoken by `openai`, `openai_compatible` and
//! `azure_openai` models: `POST …/chat/completions` with `"stream": true`, answered by SSE chunks
//! ending with `data: [DONE]`.
//!
//! Known quirks handled: tool call arguments split across chunks; several calls in one turn;
//! servers that give every call index 0 (a new `id` starts a new call) or no index at all; the
//! usage chunk with an empty `choices` array; a `null` content.

use super::{
    DeltaSink, Message, Provider, ProviderError, SilenceLimits, ToolCall, Turn, TurnRequest, read_events,
    send_with_retries,
};
use crate::events::Usage;
use futures_util::future::BoxFuture;
use outbound::TenantClient;
use serde_json::{Map, Value, json};

/// How the key is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyHeader {
    /// `Authorization: Bearer …` (OpenAI and compatible servers).
    Bearer,
    /// `api-key: …` (Azure OpenAI).
    AzureApiKey,
}

/// A Chat Completions endpoint and the model to ask.
pub struct ChatCompletions {
    pub client: TenantClient,
    /// The full `…/chat/completions` URL (with Azure's `api-version` query).
    pub url: String,
    pub api_key: Option<String>,
    pub key_header: KeyHeader,
    pub model: String,
    /// The model's `default_parameters`, passed through (`temperature`, `max_tokens`, …).
    pub parameters: Map<String, Value>,
    /// How long the model's stream may be silent.
    pub silence: SilenceLimits,
}

impl std::fmt::Debug for ChatCompletions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatCompletions")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("silence", &self.silence)
            .finish_non_exhaustive()
    }
}

impl ChatCompletions {
    /// The request body of one turn.
    pub fn body(&self, request: &TurnRequest) -> Value {
        let mut messages = Vec::new();
        if let Some(system) = &request.system {
            messages.push(json!({ "role": "system", "content": system }));
        }
        for message in &request.messages {
            messages.push(match message {
                Message::User { text, attachments } if attachments.is_empty() => {
                    json!({ "role": "user", "content": text })
                }
                // Vision and file input: a text part, then each image as a data URL and each PDF
                // as a file part (`pdf_documents_only` refused any other document).
                Message::User { text, attachments } => {
                    let mut parts = vec![json!({ "type": "text", "text": text })];
                    parts.extend(attachments.iter().map(|file| {
                        let url = format!("data:{};base64,{}", file.media_type, file.base64());
                        if file.is_image() {
                            json!({ "type": "image_url", "image_url": { "url": url } })
                        } else {
                            json!({ "type": "file", "file": { "filename": file.name, "file_data": url } })
                        }
                    }));
                    json!({ "role": "user", "content": parts })
                }
                Message::Assistant { text, tool_calls } if tool_calls.is_empty() => {
                    json!({ "role": "assistant", "content": text })
                }
                Message::Assistant { text, tool_calls } => json!({
                    "role": "assistant",
                    "content": if text.is_empty() { Value::Null } else { json!(text) },
                    "tool_calls": tool_calls.iter().map(|call| json!({
                        "id": call.id,
                        "type": "function",
                        "function": { "name": call.name, "arguments": Value::Object(call.arguments.clone()).to_string() },
                    })).collect::<Vec<_>>(),
                }),
                Message::Tool { call_id, content, .. } => {
                    json!({ "role": "tool", "tool_call_id": call_id, "content": content })
                }
            });
        }
        let mut body = self.parameters.clone();
        body.insert("model".into(), json!(self.model));
        body.insert("messages".into(), Value::Array(messages));
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({ "include_usage": true }));
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    json!({ "type": "function", "function": {
                        "name": tool.name, "description": tool.description, "parameters": tool.parameters,
                    }})
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        Value::Object(body)
    }

    async fn run_turn(&self, request: &TurnRequest, on_delta: DeltaSink<'_>) -> Result<Turn, ProviderError> {
        super::pdf_documents_only(request, "Chat Completions")?;
        let http = self.client.for_url(&self.url).map_err(|refused| ProviderError::Unreachable(refused.to_string()))?;
        let body = self.body(request);
        let build = || {
            let call = http
                .post(&self.url)
                .stream_limits(self.silence.for_turn(request.deadline))
                .json(&body)
                .header("accept", "text/event-stream");
            match (&self.api_key, &self.key_header) {
                (None, _) => call,
                (Some(key), KeyHeader::Bearer) => call.bearer_auth(key),
                (Some(key), KeyHeader::AzureApiKey) => call.header("api-key", key),
            }
        };
        let response = send_with_retries(build, &[429]).await?;
        let mut turn = TurnAccumulator::default();
        let done = read_events(response, |event| {
            if event.data.trim() == "[DONE]" {
                return Ok(true);
            }
            let value: Value = serde_json::from_str(&event.data)
                .map_err(|err| ProviderError::Malformed(format!("a chunk is not JSON ({err})")))?;
            for delta in turn.feed(&value)? {
                on_delta(&delta);
            }
            Ok(false)
        })
        .await?;
        // Some compatible servers close without `[DONE]` after the final chunk.
        if done || turn.finished {
            turn.finish()
        } else {
            Err(ProviderError::Malformed("the stream ended before the answer did".into()))
        }
    }
}

impl Provider for ChatCompletions {
    fn turn<'a>(
        &'a self,
        request: &'a TurnRequest,
        on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<Turn, ProviderError>> {
        Box::pin(self.run_turn(request, on_delta))
    }
}

/// A tool call whose parts are still arriving.
#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
}

/// Builds a turn from its chunks.
#[derive(Debug, Default)]
pub struct TurnAccumulator {
    text: String,
    calls: Vec<PartialCall>,
    usage: Usage,
    finished: bool,
}

impl TurnAccumulator {
    /// Takes one chunk; returns its text deltas.
    pub fn feed(&mut self, chunk: &Value) -> Result<Vec<String>, ProviderError> {
        if let Some(error) = chunk.get("error") {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("an error chunk");
            return Err(ProviderError::Status { status: 200, message: message.chars().take(300).collect() });
        }
        if let Some(usage) = chunk.get("usage").filter(|usage| !usage.is_null()) {
            let number = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
            // `prompt_tokens` include the prompt cache's reads (`cached_tokens`); the run's
            // `input_tokens` do not, for every provider. The API reports no cache writes.
            let cached = number("/prompt_tokens_details/cached_tokens");
            self.usage = Usage {
                input_tokens: number("/prompt_tokens").saturating_sub(cached),
                output_tokens: number("/completion_tokens"),
                cache_read_tokens: cached,
                cache_write_tokens: 0,
            };
        }
        let mut deltas = Vec::new();
        let choices = match chunk.get("choices") {
            None | Some(Value::Null) => return Ok(deltas),
            Some(Value::Array(choices)) => choices,
            Some(_) => return Err(ProviderError::Malformed("choices is not an array".into())),
        };
        // Only the first choice is the answer (`n` > 1 is not asked for).
        let Some(choice) = choices.iter().find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0) else {
            return Ok(deltas);
        };
        if choice.get("finish_reason").is_some_and(|reason| !reason.is_null()) {
            self.finished = true;
        }
        let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) else { return Ok(deltas) };
        if let Some(text) = delta.get("content").and_then(Value::as_str).filter(|text| !text.is_empty()) {
            self.text.push_str(text);
            deltas.push(text.to_owned());
        }
        match delta.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => {
                for call in calls {
                    self.feed_call(call)?;
                }
            }
            Some(_) => return Err(ProviderError::Malformed("tool_calls is not an array".into())),
        }
        Ok(deltas)
    }

    fn feed_call(&mut self, call: &Value) -> Result<(), ProviderError> {
        let index = call.get("index").and_then(Value::as_u64);
        let id = call.get("id").and_then(Value::as_str).filter(|id| !id.is_empty());
        let function = call.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let arguments = function.and_then(|f| f.get("arguments")).and_then(Value::as_str);
        // A known id continues its call; a new id starts a call even at an index already used
        // (servers that give every call index 0); without an id, the call at that index (or the
        // last one) continues.
        let position = match id {
            Some(id) => self.calls.iter().position(|partial| partial.id == id),
            None => match index {
                Some(index) => self.calls.iter().rposition(|partial| partial.index == Some(index)),
                None => self.calls.len().checked_sub(1),
            },
        };
        let position = match position {
            Some(position) => position,
            None => {
                if id.is_none() && name.is_none() {
                    return Err(ProviderError::Malformed("a tool call fragment belongs to no call".into()));
                }
                self.calls.push(PartialCall { index, ..PartialCall::default() });
                self.calls.len() - 1
            }
        };
        let partial = &mut self.calls[position];
        if let Some(id) = id {
            partial.id = id.to_owned();
        }
        if let Some(name) = name {
            partial.name.push_str(name);
        }
        if let Some(arguments) = arguments {
            partial.arguments.push_str(arguments);
        }
        Ok(())
    }

    /// The whole turn; each call's arguments must be a JSON object (empty text counts as `{}`).
    pub fn finish(self) -> Result<Turn, ProviderError> {
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (position, partial) in self.calls.into_iter().enumerate() {
            if partial.name.is_empty() {
                return Err(ProviderError::Malformed("a tool call has no name".into()));
            }
            let Some(arguments) = super::tool_arguments(&partial.arguments) else {
                return Err(ProviderError::Malformed(format!(
                    "the arguments of tool call {} are not a JSON object",
                    partial.name
                )));
            };
            let id = if partial.id.is_empty() { format!("call_{position}") } else { partial.id };
            tool_calls.push(ToolCall { id, name: partial.name, arguments });
        }
        Ok(Turn { text: self.text, tool_calls, usage: self.usage })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn_of(chunks: &[Value]) -> Result<(Vec<String>, Turn), ProviderError> {
        let mut accumulator = TurnAccumulator::default();
        let mut deltas = Vec::new();
        for chunk in chunks {
            deltas.extend(accumulator.feed(chunk)?);
        }
        Ok((deltas, accumulator.finish()?))
    }

    fn delta(delta: Value) -> Value {
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    }

    #[test]
    fn text_and_usage_with_an_empty_choices_chunk() {
        let (deltas, turn) = turn_of(&[
            delta(json!({"role": "assistant", "content": ""})),
            delta(json!({"content": "Hel"})),
            delta(json!({"content": null})),
            delta(json!({"content": "lo"})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}}),
        ])
        .unwrap();
        assert_eq!(deltas, ["Hel", "lo"]);
        assert_eq!(turn.text, "Hello");
        assert_eq!(turn.usage, Usage::tokens(12, 2));
    }

    #[test]
    fn cached_prompt_tokens_are_counted_apart_from_the_input() {
        let (_, turn) = turn_of(&[
            delta(json!({"content": "Hi"})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 2006, "completion_tokens": 300,
                "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0}}}),
        ])
        .unwrap();
        assert_eq!(
            turn.usage,
            Usage { input_tokens: 86, output_tokens: 300, cache_read_tokens: 1920, cache_write_tokens: 0 }
        );
        // A server that reports more cached tokens than prompt tokens does not underflow.
        let (_, odd) = turn_of(&[
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 9}}}),
        ])
        .unwrap();
        assert_eq!((odd.usage.input_tokens, odd.usage.cache_read_tokens), (0, 9));
    }

    #[test]
    fn parallel_calls_split_across_chunks() {
        let (_, turn) = turn_of(&[
            delta(json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "forecast", "arguments": ""}}]})),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ci"}}]})),
            delta(json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "alerts", "arguments": "{}"}}]})),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "ty\": \"Oslo\"}"}}]})),
        ])
        .unwrap();
        assert_eq!(turn.tool_calls.len(), 2);
        assert_eq!((turn.tool_calls[0].id.as_str(), turn.tool_calls[0].name.as_str()), ("call_a", "forecast"));
        assert_eq!(turn.tool_calls[0].arguments["city"], "Oslo");
        assert_eq!((turn.tool_calls[1].id.as_str(), turn.tool_calls[1].arguments.len()), ("call_b", 0));
    }

    #[test]
    fn every_call_at_index_zero_is_told_apart_by_its_id() {
        let (_, turn) = turn_of(&[
            delta(json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "a", "arguments": "{\"x\":"}}]})),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]})),
            delta(
                json!({"tool_calls": [{"index": 0, "id": "c2", "function": {"name": "b", "arguments": "{\"y\":2}"}}]}),
            ),
        ])
        .unwrap();
        let names: Vec<(&str, &str)> = turn.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str())).collect();
        assert_eq!(names, [("c1", "a"), ("c2", "b")]);
        assert_eq!(turn.tool_calls[0].arguments["x"], 1);
        assert_eq!(turn.tool_calls[1].arguments["y"], 2);
    }

    #[test]
    fn malformed_chunks_are_errors_not_panics() {
        for chunks in [
            vec![json!({"choices": "x"})],
            vec![delta(json!({"tool_calls": {"index": 0}}))],
            vec![delta(json!({"tool_calls": [{"index": 3, "function": {"arguments": "{}"}}]}))],
            vec![delta(json!({"tool_calls": [{"id": "c", "function": {"name": "a", "arguments": "[1]"}}]}))],
            vec![delta(json!({"tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}))],
            vec![json!({"error": {"message": "context length exceeded"}})],
        ] {
            assert!(turn_of(&chunks).is_err(), "{chunks:?}");
        }
    }

    #[test]
    fn the_body_carries_messages_tools_and_default_parameters() {
        let provider = ChatCompletions {
            client: TenantClient::new(outbound::AddressPolicy::default()),
            url: "https://api.openai.com/v1/chat/completions".into(),
            api_key: None,
            key_header: KeyHeader::Bearer,
            model: "gpt-x".into(),
            parameters: Map::from_iter([("temperature".to_owned(), json!(0.2)), ("model".to_owned(), json!("other"))]),
            silence: SilenceLimits::default(),
        };
        let call =
            ToolCall { id: "c1".into(), name: "f".into(), arguments: Map::from_iter([("a".to_owned(), json!(1))]) };
        let request = TurnRequest {
            system: Some("Be brief.".into()),
            messages: vec![
                Message::user("hi"),
                Message::Assistant { text: String::new(), tool_calls: vec![call] },
                Message::Tool { call_id: "c1".into(), name: "f".into(), content: "{\"ok\":true}".into() },
            ],
            tools: vec![super::super::ToolSpec {
                name: "f".into(),
                description: "does f".into(),
                parameters: json!({"type": "object"}),
            }],
            deadline: None,
        };
        let body = provider.body(&request);
        assert_eq!(body["model"], "gpt-x");
        assert_eq!(body["temperature"], 0.2);
        assert_eq!(body["stream"], true);
        assert_eq!(body["messages"][0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(body["messages"][2]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert_eq!(body["messages"][3], json!({"role": "tool", "tool_call_id": "c1", "content": "{\"ok\":true}"}));
        assert_eq!(body["tools"][0]["function"]["name"], "f");
    }

    fn chunk_values() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<u8>().prop_map(|n| json!(n)),
            proptest::sample::select(vec!["", "{", "}", "{\"a\":1}", "call_1", "f", "stop"]).prop_map(|s| json!(s)),
        ];
        let keys = proptest::sample::select(vec![
            "choices",
            "delta",
            "index",
            "content",
            "tool_calls",
            "id",
            "function",
            "name",
            "arguments",
            "usage",
            "finish_reason",
            "error",
            "message",
        ]);
        leaf.prop_recursive(5, 48, 4, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                proptest::collection::btree_map(keys.clone(), inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any sequence of chunk-shaped JSON gives a turn or a provider error, never a panic;
        /// every call of a finished turn has a name and object arguments.
        #[test]
        fn any_chunks_give_a_turn_or_an_error(chunks in proptest::collection::vec(chunk_values(), 0..6)) {
            if let Ok((_, turn)) = turn_of(&chunks) {
                proptest::prop_assert!(turn.tool_calls.iter().all(|call| !call.name.is_empty()));
            }
        }
    }
}
