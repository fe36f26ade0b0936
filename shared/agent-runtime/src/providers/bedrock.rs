//! Amazon Bedrock's Converse API, streamed: `POST /model/{modelId}/converse-stream`, answered
//! by an AWS event stream (binary frames, each a JSON event: `messageStart`,
//! `contentBlockStart` for a tool use, `contentBlockDelta` with text or a fragment of a tool's
//! input JSON, `contentBlockStop`, `messageStop` with the stop reason, `metadata` with usage), or
//! by an exception frame mid-stream.
//!
//! Requests go to AWS (or the operator's endpoint), signed with the function's role or carrying
//! the model's Bedrock API key, through `aws_env::bedrock`; only a model with an API key may
//! name a `base_url`, and then requests go there through the tenant's guarded client
//! (docs/bedrock.md). Throttling is retried with backoff and jitter within the run's time.

use super::{Attachment, DeltaSink, Message, Provider, ProviderError, SilenceLimits, ToolCall, Turn, TurnRequest};
use crate::events::Usage;
use aws_env::bedrock::{BedrockRuntime, ConverseError, ConverseRequest, Credentials, EventStreamBody};
use aws_smithy_types::event_stream::{HeaderValue, Message as Frame};
use bytes::{Buf, Bytes, BytesMut};
use futures_util::future::BoxFuture;
use outbound::TenantClient;
use serde_json::{Map, Value, json};
use std::time::Duration;
use tokio::time::Instant;

/// Where a model's requests go. (One per model turn's provider: the variants' sizes do not matter.)
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Route {
    /// AWS's Bedrock Runtime endpoint for the region (or the operator's), with the function's
    /// role or the model's API key.
    Aws { runtime: BedrockRuntime, credentials: Credentials },
    /// The model's own `base_url`, with its API key, through the tenant's guarded client.
    BaseUrl { client: TenantClient, base_url: String, api_key: String },
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Aws { credentials, .. } => f.debug_struct("Aws").field("credentials", credentials).finish(),
            Self::BaseUrl { base_url, .. } => f.debug_struct("BaseUrl").field("base_url", base_url).finish(),
        }
    }
}

/// A Bedrock model and where to ask it.
#[derive(Debug)]
pub struct Bedrock {
    /// A model id, an inference profile id or an ARN.
    pub model: String,
    pub region: String,
    pub route: Route,
    pub parameters: Map<String, Value>,
    /// How long the model's stream may be silent.
    pub silence: SilenceLimits,
}

/// How often a throttled turn is tried, and the longest wait between two tries.
pub const MAX_ATTEMPTS: u32 = 5;
pub const MAX_BACKOFF: Duration = Duration::from_secs(20);
/// The first retry's wait before jitter; each further one doubles it.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// The largest event frame accepted (Bedrock's are a few KB: a delta, a usage object).
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// Keys of `default_parameters` that are Converse's `inferenceConfig`, by the names users
/// write (Chat Completions' and Converse's own); every other key goes to
/// `additionalModelRequestFields` (the model's native parameters, such as `top_k`), except the
/// request's own top-level fields.
const INFERENCE_CONFIG: [(&str, &str); 8] = [
    ("max_tokens", "maxTokens"),
    ("maxTokens", "maxTokens"),
    ("temperature", "temperature"),
    ("top_p", "topP"),
    ("topP", "topP"),
    ("stop", "stopSequences"),
    ("stop_sequences", "stopSequences"),
    ("stopSequences", "stopSequences"),
];
const TOP_LEVEL: [&str; 5] =
    ["guardrailConfig", "performanceConfig", "promptVariables", "requestMetadata", "additionalModelResponseFieldPaths"];

impl Bedrock {
    /// The Converse request of one turn. Consecutive messages of one role are merged (Converse
    /// wants the roles to alternate: tool results are the user's turn).
    pub fn body(&self, request: &TurnRequest) -> Value {
        let mut messages: Vec<(&str, Vec<Value>)> = Vec::new();
        for message in &request.messages {
            let (role, content) = match message {
                Message::User { text, attachments } => {
                    let mut content: Vec<Value> = attachment_blocks(attachments);
                    if !text.trim().is_empty() {
                        content.push(json!({ "text": text }));
                    }
                    ("user", content)
                }
                Message::Assistant { text, tool_calls } => {
                    let mut content = Vec::new();
                    if !text.trim().is_empty() {
                        content.push(json!({ "text": text }));
                    }
                    for call in tool_calls {
                        content.push(
                            json!({ "toolUse": { "toolUseId": call.id, "name": call.name, "input": call.arguments } }),
                        );
                    }
                    ("assistant", content)
                }
                Message::Tool { call_id, content, .. } => {
                    ("user", vec![json!({ "toolResult": { "toolUseId": call_id, "content": [{ "text": content }] } })])
                }
            };
            if content.is_empty() {
                continue;
            }
            match messages.last_mut() {
                Some((last, blocks)) if *last == role => blocks.extend(content),
                _ => messages.push((role, content)),
            }
        }
        let messages: Vec<Value> =
            messages.into_iter().map(|(role, content)| json!({ "role": role, "content": content })).collect();
        let mut body = Map::new();
        body.insert("messages".into(), Value::Array(messages));
        if let Some(system) = request.system.as_deref().filter(|system| !system.trim().is_empty()) {
            body.insert("system".into(), json!([{ "text": system }]));
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    let mut spec = Map::new();
                    spec.insert("name".into(), json!(tool.name));
                    if !tool.description.is_empty() {
                        spec.insert("description".into(), json!(tool.description));
                    }
                    spec.insert("inputSchema".into(), json!({ "json": tool.parameters }));
                    json!({ "toolSpec": spec })
                })
                .collect();
            body.insert("toolConfig".into(), json!({ "tools": tools }));
        }
        let mut inference = Map::new();
        let mut additional = Map::new();
        for (key, value) in &self.parameters {
            if let Some((_, name)) = INFERENCE_CONFIG.iter().find(|(alias, _)| alias == key) {
                let value = match (name, value) {
                    (&"stopSequences", Value::String(stop)) => json!([stop]),
                    _ => value.clone(),
                };
                inference.insert((*name).to_owned(), value);
            } else if TOP_LEVEL.contains(&key.as_str()) {
                body.insert(key.clone(), value.clone());
            } else if key == "additionalModelRequestFields" {
                if let Value::Object(fields) = value {
                    additional.extend(fields.clone());
                }
            } else {
                additional.insert(key.clone(), value.clone());
            }
        }
        if !inference.is_empty() {
            body.insert("inferenceConfig".into(), Value::Object(inference));
        }
        if !additional.is_empty() {
            body.insert("additionalModelRequestFields".into(), Value::Object(additional));
        }
        Value::Object(body)
    }

    async fn run_turn(&self, request: &TurnRequest, on_delta: DeltaSink<'_>) -> Result<Turn, ProviderError> {
        let body = serde_json::to_vec(&self.body(request))
            .map_err(|err| ProviderError::Configuration(format!("the request could not be written: {err}")))?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let limits = self.silence.for_turn(request.deadline);
            let mut turn = ConverseAccumulator::default();
            let outcome = match self.open(&body, limits).await {
                Ok(mut stream) => read_stream(&mut stream, &mut turn, on_delta).await,
                Err(failure) => Err(failure),
            };
            let failure = match outcome {
                Ok(()) => return turn.finish(&self.model),
                Err(failure) => failure,
            };
            // A throttled attempt is tried again, unless the model had begun to answer (its
            // deltas are out) or the run has no time for another wait.
            match failure {
                // Once text went out, a retry would repeat it: the stream failed.
                Failure::Throttled { code, message } if turn.answered => {
                    return Err(ProviderError::Status {
                        status: 200,
                        message: format!("model {}'s stream failed: {code}: {}", self.model, cut(&message)),
                    });
                }
                Failure::Throttled { code, message } if attempt < MAX_ATTEMPTS => {
                    let wait = backoff(attempt);
                    let time_left = request.deadline.map(|deadline| deadline.saturating_duration_since(Instant::now()));
                    if time_left.is_some_and(|left| left <= wait) {
                        return Err(self.throttled(attempt, &code, &message));
                    }
                    tracing::info!(model = %self.model, attempt, code = %code, "Bedrock throttled a turn; retrying");
                    tokio::time::sleep(wait).await;
                }
                Failure::Throttled { code, message } => return Err(self.throttled(attempt, &code, &message)),
                Failure::Provider(err) => return Err(err),
                Failure::Refused { status, code, message } => {
                    return Err(ProviderError::Status {
                        status,
                        message: format!("Bedrock refused model {}: {code}: {}", self.model, cut(&message)),
                    });
                }
                Failure::Exception { kind, message } => {
                    return Err(ProviderError::Status {
                        status: 200,
                        message: format!("model {}'s stream failed: {kind}: {}", self.model, cut(&message)),
                    });
                }
            }
        }
    }

    fn throttled(&self, attempts: u32, code: &str, message: &str) -> ProviderError {
        ProviderError::Status {
            status: 429,
            message: format!(
                "Bedrock throttled model {} on each of {attempts} attempts: {code}: {}",
                self.model,
                cut(message)
            ),
        }
    }

    /// Sends the request; the answer's event stream once it is 2xx.
    async fn open(&self, body: &[u8], limits: outbound::StreamLimits) -> Result<Answer, Failure> {
        match &self.route {
            Route::Aws { runtime, credentials } => {
                let request = ConverseRequest {
                    region: self.region.clone(),
                    model_id: self.model.clone(),
                    body: body.to_vec(),
                    credentials: credentials.clone(),
                };
                let clock = StreamClock::new(limits);
                let head = tokio::time::timeout_at(clock.next_wait().0, runtime.converse_stream(request));
                match head.await {
                    Err(_) => Err(Failure::Provider(ProviderError::TimedOut(clock.next_wait().1))),
                    Ok(Ok(stream)) => Ok(Answer::Aws { stream, clock: clock.after_first_byte() }),
                    Ok(Err(ConverseError::Refused { status, code, message })) => Err(refused(status, code, message)),
                    Ok(Err(ConverseError::Unavailable(reason))) => {
                        Err(Failure::Provider(ProviderError::Unreachable(reason)))
                    }
                    Ok(Err(ConverseError::NotConfigured(reason))) => {
                        Err(Failure::Provider(ProviderError::Configuration(reason)))
                    }
                }
            }
            Route::BaseUrl { client, base_url, api_key } => {
                let url = format!("{base_url}/model/{}/converse-stream", encode_path_label(&self.model));
                let http = client
                    .for_url(&url)
                    .map_err(|refused| Failure::Provider(ProviderError::Unreachable(refused.to_string())))?;
                let response = http
                    .post(&url)
                    .stream_limits(limits)
                    .header("content-type", "application/json")
                    .header("accept", "application/vnd.amazon.eventstream")
                    .header("authorization", format!("Bearer {api_key}"))
                    .body(body.to_vec())
                    .send()
                    .await
                    .map_err(|err| Failure::Provider(super::request_failure(&err)))?;
                let status = response.status().as_u16();
                if (200..300).contains(&status) {
                    return Ok(Answer::BaseUrl(response));
                }
                let error_type =
                    response.headers().get("x-amzn-errortype").and_then(|value| value.to_str().ok()).map(str::to_owned);
                let body = outbound::read_limited(response, 4096).await.unwrap_or_default();
                match aws_env::bedrock::refusal_of(status, error_type.as_deref(), &body) {
                    ConverseError::Refused { status, code, message } => Err(refused(status, code, message)),
                    other => Err(Failure::Provider(ProviderError::Unreachable(other.to_string()))),
                }
            }
        }
    }
}

impl Provider for Bedrock {
    fn turn<'a>(
        &'a self,
        request: &'a TurnRequest,
        on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<Turn, ProviderError>> {
        Box::pin(self.run_turn(request, on_delta))
    }
}

/// Images and documents as Converse's `image` blocks (`png`, `jpeg`, `gif`, `webp`) and
/// `document` blocks (`pdf`, `docx`, `xlsx`, `doc`, `xls`), each document under a name
/// Converse accepts (letters, digits, single spaces, `-`, `(`, `)`, `[`, `]`), unique in the
/// message.
fn attachment_blocks(attachments: &[Attachment]) -> Vec<Value> {
    let mut names: Vec<String> = Vec::new();
    let mut blocks = Vec::new();
    for file in attachments {
        let source = json!({ "bytes": file.base64() });
        match file.document_format() {
            None => {
                let format = file.media_type.trim_start_matches("image/");
                blocks.push(json!({ "image": { "format": format, "source": source } }));
            }
            Some(format) => {
                let mut name = document_name(&file.name);
                if names.contains(&name) {
                    name = format!("{name} ({})", names.len() + 1);
                }
                names.push(name.clone());
                blocks.push(json!({ "document": { "format": format, "name": name, "source": source } }));
            }
        }
    }
    blocks
}

/// A file name as a Converse document name: its extension dropped, other characters than
/// those allowed as `-`, whitespace runs as one space; `document` when nothing is left.
pub fn document_name(file_name: &str) -> String {
    let stem = file_name.rsplit_once('.').map_or(file_name, |(stem, _)| stem);
    let mut name = String::new();
    for c in stem.chars().take(200) {
        let c = if c.is_ascii_alphanumeric() || "-()[]".contains(c) {
            c
        } else if c.is_whitespace() {
            ' '
        } else {
            '-'
        };
        if !(c == ' ' && (name.is_empty() || name.ends_with(' '))) {
            name.push(c);
        }
    }
    let name = name.trim_end().to_owned();
    if name.is_empty() { "document".to_owned() } else { name }
}

/// Why an attempt failed.
#[derive(Debug)]
enum Failure {
    /// Throttled (or briefly unavailable): worth another attempt.
    Throttled {
        code: String,
        message: String,
    },
    /// Bedrock refused the request.
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    /// An exception frame mid-stream.
    Exception {
        kind: String,
        message: String,
    },
    Provider(ProviderError),
}

/// Bedrock's refusal as a failure: throttling and unavailability are worth another attempt.
fn refused(status: u16, code: String, message: String) -> Failure {
    let transient = matches!(
        code.as_str(),
        "ThrottlingException" | "ServiceUnavailableException" | "ModelNotReadyException" | "InternalServerException"
    ) || matches!(status, 429 | 500 | 502 | 503 | 504);
    if transient { Failure::Throttled { code, message } } else { Failure::Refused { status, code, message } }
}

/// The wait before try `attempt + 1`: exponential backoff with jitter, half of it random
/// (so throttled runs do not come back together).
pub fn backoff(attempt: u32) -> Duration {
    let doubled = FIRST_BACKOFF.saturating_mul(1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX));
    let ceiling = doubled.min(MAX_BACKOFF);
    let random = (uuid::Uuid::new_v4().as_u128() % 1000) as u32;
    ceiling / 2 + (ceiling / 2) * random / 1000
}

/// A model id, profile id or ARN as a path label (an ARN's `:` and `/` escaped).
fn encode_path_label(label: &str) -> String {
    let mut encoded = String::with_capacity(label.len());
    for byte in label.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

fn cut(message: &str) -> String {
    message.chars().take(300).collect()
}

/// An answer being read.
enum Answer {
    Aws { stream: EventStreamBody, clock: StreamClock },
    BaseUrl(outbound::Response),
}

impl Answer {
    async fn next_chunk(&mut self) -> Result<Option<Bytes>, ProviderError> {
        match self {
            Self::Aws { stream, clock } => {
                let (until, limit) = clock.next_wait();
                match tokio::time::timeout_at(until, stream.next_chunk()).await {
                    Err(_) => Err(ProviderError::TimedOut(limit)),
                    Ok(None) => Ok(None),
                    Ok(Some(Ok(chunk))) => {
                        clock.chunk_arrived();
                        Ok(Some(chunk))
                    }
                    Ok(Some(Err(reason))) => Err(ProviderError::Unreachable(reason)),
                }
            }
            Self::BaseUrl(response) => response.chunk().await.map_err(|err| super::request_failure(&err)),
        }
    }
}

/// A stream's limits on the AWS route (the guarded client keeps its own): the whole stream's
/// time, the wait for the answer, and the silence between two chunks.
#[derive(Debug, Clone, Copy)]
struct StreamClock {
    end: Instant,
    limits: outbound::StreamLimits,
    next: Instant,
    waiting_for_first_byte: bool,
}

impl StreamClock {
    fn new(limits: outbound::StreamLimits) -> Self {
        let now = Instant::now();
        Self {
            end: later(now, limits.total),
            limits,
            next: later(now, limits.first_byte),
            waiting_for_first_byte: true,
        }
    }

    fn after_first_byte(mut self) -> Self {
        self.chunk_arrived();
        self
    }

    fn chunk_arrived(&mut self) {
        self.next = later(Instant::now(), self.limits.idle);
        self.waiting_for_first_byte = false;
    }

    /// When the current wait ends, and what it is called then (as the guarded client says it).
    fn next_wait(&self) -> (Instant, String) {
        if self.next < self.end {
            let limit = if self.waiting_for_first_byte {
                format!("no answer came within {} seconds (the first-byte limit)", self.limits.first_byte.as_secs())
            } else {
                format!("the stream was silent for {} seconds (the idle limit)", self.limits.idle.as_secs())
            };
            (self.next, limit)
        } else {
            (
                self.end,
                format!("the stream did not end within {} seconds (its time limit)", self.limits.total.as_secs()),
            )
        }
    }
}

/// `after` from `now`; a limit too large for the clock counts as a year.
fn later(now: Instant, after: Duration) -> Instant {
    now.checked_add(after).unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// Reads frames until the stream ends, feeding each event to `turn`.
async fn read_stream(
    answer: &mut Answer,
    turn: &mut ConverseAccumulator,
    on_delta: DeltaSink<'_>,
) -> Result<(), Failure> {
    let mut frames = FrameReader::default();
    while let Some(chunk) = answer.next_chunk().await.map_err(Failure::Provider)? {
        for frame in frames.feed(&chunk).map_err(Failure::Provider)? {
            if let Some(delta) = turn.feed(&frame)? {
                on_delta(&delta);
            }
        }
    }
    if frames.pending() {
        return Err(Failure::Provider(malformed("the stream ended inside a frame")));
    }
    Ok(())
}

/// Splits a byte stream into event-stream frames, each checked (lengths, CRCs) by the smithy
/// event-stream decoder; a frame larger than [`MAX_FRAME_BYTES`] is refused before it is
/// buffered.
#[derive(Debug, Default)]
pub struct FrameReader {
    buffer: BytesMut,
}

impl FrameReader {
    /// The frames `chunk` completes.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<Frame>, ProviderError> {
        self.buffer.extend_from_slice(chunk);
        let mut frames = Vec::new();
        while self.buffer.len() >= 4 {
            let declared = (&self.buffer[..4]).get_u32();
            let length = usize::try_from(declared).unwrap_or(usize::MAX);
            if length > MAX_FRAME_BYTES {
                return Err(malformed(&format!("a frame of {declared} bytes is larger than {MAX_FRAME_BYTES}")));
            }
            if self.buffer.len() < length {
                break;
            }
            let frame = self.buffer.split_to(length).freeze();
            let frame = aws_smithy_eventstream::frame::read_message_from(frame)
                .map_err(|err| malformed(&format!("a frame could not be read: {err}")))?;
            frames.push(frame);
        }
        Ok(frames)
    }

    /// Whether part of a frame is buffered.
    pub fn pending(&self) -> bool {
        !self.buffer.is_empty()
    }
}

/// A frame's string header.
fn header<'a>(frame: &'a Frame, name: &str) -> Option<&'a str> {
    frame.headers().iter().find(|header| header.name().as_str() == name).and_then(|header| match header.value() {
        HeaderValue::String(value) => Some(value.as_str()),
        _ => None,
    })
}

/// A content block being streamed.
#[derive(Debug)]
enum Block {
    Text,
    ToolUse { id: String, name: String, input: String },
}

/// Builds a turn from Converse stream events.
#[derive(Debug, Default)]
pub struct ConverseAccumulator {
    text: String,
    blocks: Vec<(u64, Block)>,
    usage: Usage,
    stop_reason: Option<String>,
    /// Whether a text delta went out (a retry would repeat it).
    answered: bool,
}

impl ConverseAccumulator {
    /// Takes one frame; returns a text delta if it carried one.
    fn feed(&mut self, frame: &Frame) -> Result<Option<String>, Failure> {
        match header(frame, ":message-type") {
            Some("event") => {}
            Some("exception") => {
                let kind = header(frame, ":exception-type").unwrap_or("exception").to_owned();
                let payload: Value = serde_json::from_slice(frame.payload()).unwrap_or(Value::Null);
                let message = payload.get("message").or_else(|| payload.get("Message")).and_then(Value::as_str);
                let message = message.unwrap_or_default().to_owned();
                return Err(match kind.as_str() {
                    "throttlingException" | "serviceUnavailableException" | "internalServerException" => {
                        Failure::Throttled { code: kind, message }
                    }
                    _ => Failure::Exception { kind, message },
                });
            }
            Some("error") => {
                let code = header(frame, ":error-code").unwrap_or("error").to_owned();
                let message = header(frame, ":error-message").unwrap_or_default().to_owned();
                return Err(Failure::Exception { kind: code, message });
            }
            other => return Err(Failure::Provider(malformed(&format!("a frame has message type {other:?}")))),
        }
        let kind = header(frame, ":event-type").unwrap_or_default().to_owned();
        let event: Value = serde_json::from_slice(frame.payload())
            .map_err(|err| Failure::Provider(malformed(&format!("a {kind} event is not JSON ({err})"))))?;
        self.event(&kind, &event).map_err(Failure::Provider)
    }

    /// Takes one event (its type and payload); returns a text delta if it carried one.
    pub fn event(&mut self, kind: &str, event: &Value) -> Result<Option<String>, ProviderError> {
        let index = event.get("contentBlockIndex").and_then(Value::as_u64);
        match kind {
            "contentBlockStart" => {
                let index = index.ok_or_else(|| malformed("a block start has no contentBlockIndex"))?;
                if let Some(tool) = event.pointer("/start/toolUse") {
                    let text = |key: &str| tool.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
                    self.blocks.push((
                        index,
                        Block::ToolUse { id: text("toolUseId"), name: text("name"), input: String::new() },
                    ));
                }
            }
            "contentBlockDelta" => {
                let index = index.ok_or_else(|| malformed("a delta has no contentBlockIndex"))?;
                let delta = event.get("delta").ok_or_else(|| malformed("a delta event has no delta"))?;
                if let Some(text) = delta.get("text").and_then(Value::as_str) {
                    // Text blocks have no start event: the first delta opens one.
                    if !self.blocks.iter().any(|(at, _)| *at == index) {
                        self.blocks.push((index, Block::Text));
                    }
                    if !text.is_empty() {
                        self.text.push_str(text);
                        self.answered = true;
                        return Ok(Some(text.to_owned()));
                    }
                } else if let Some(fragment) = delta.pointer("/toolUse/input").and_then(Value::as_str) {
                    match self.blocks.iter_mut().rev().find(|(at, _)| *at == index) {
                        Some((_, Block::ToolUse { input, .. })) => input.push_str(fragment),
                        _ => return Err(malformed("a toolUse delta belongs to no toolUse block")),
                    }
                }
                // Reasoning and citation deltas are not part of the answer.
            }
            "messageStop" => {
                let reason = event.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
                self.stop_reason = Some(reason.to_owned());
            }
            "metadata" => {
                let usage = event.get("usage");
                let number = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64).unwrap_or(0);
                self.usage = Usage {
                    input_tokens: number("inputTokens"),
                    output_tokens: number("outputTokens"),
                    cache_read_tokens: number("cacheReadInputTokens"),
                    cache_write_tokens: number("cacheWriteInputTokens"),
                };
            }
            // `messageStart`, `contentBlockStop` and event types added later carry nothing needed.
            _ => {}
        }
        Ok(None)
    }

    /// The whole turn, once the stream has ended: its text and tool uses, or the reason the
    /// model's stop ends the run.
    pub fn finish(self, model: &str) -> Result<Turn, ProviderError> {
        let Some(stop_reason) = self.stop_reason else {
            return Err(malformed("the stream ended before messageStop"));
        };
        match stop_reason.as_str() {
            // A complete answer; `max_tokens` a cut one (a cut tool input fails below);
            // `guardrail_intervened` answers with the guardrail's message.
            "end_turn" | "tool_use" | "stop_sequence" | "max_tokens" | "guardrail_intervened" => {}
            "content_filtered" | "malformed_model_output" | "malformed_tool_use" | "model_context_window_exceeded" => {
                return Err(ProviderError::Status {
                    status: 200,
                    message: format!("model {model} stopped without an answer: {stop_reason}"),
                });
            }
            // Reasons added later end the turn as an answer, like `end_turn`.
            _ => {}
        }
        let mut tool_calls = Vec::new();
        for (_, block) in self.blocks {
            if let Block::ToolUse { id, name, input } = block {
                if name.is_empty() || id.is_empty() {
                    return Err(malformed("a toolUse block has no name or id"));
                }
                let Some(arguments) = super::tool_arguments(&input) else {
                    return Err(malformed(&format!(
                        "the input of tool use {name} is not a JSON object (stop reason {stop_reason})"
                    )));
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
    use aws_smithy_types::event_stream::Header;

    fn frame(headers: &[(&str, &str)], payload: Value) -> Vec<u8> {
        let headers = headers
            .iter()
            .map(|(name, value)| Header::new(name.to_string(), HeaderValue::String(value.to_string().into())));
        let message = Frame::new_from_parts(headers.collect(), payload.to_string().into_bytes());
        let mut bytes = Vec::new();
        aws_smithy_eventstream::frame::write_message_to(&message, &mut bytes).unwrap();
        bytes
    }

    fn event(kind: &str, payload: Value) -> Vec<u8> {
        frame(&[(":message-type", "event"), (":event-type", kind), (":content-type", "application/json")], payload)
    }

    /// Feeds `bytes` to a reader in pieces of `piece` bytes, then to an accumulator.
    fn read(bytes: &[u8], piece: usize) -> (Vec<String>, Result<Turn, String>) {
        let mut reader = FrameReader::default();
        let mut turn = ConverseAccumulator::default();
        let mut deltas = Vec::new();
        for chunk in bytes.chunks(piece) {
            for frame in reader.feed(chunk).unwrap() {
                match turn.feed(&frame) {
                    Ok(delta) => deltas.extend(delta),
                    Err(failure) => return (deltas, Err(format!("{failure:?}"))),
                }
            }
        }
        assert!(!reader.pending());
        (deltas, turn.finish("m").map_err(|err| err.to_string()))
    }

    #[test]
    fn text_and_tool_use_arrive_in_frames_split_anywhere() {
        let mut bytes = event("messageStart", json!({"role": "assistant"}));
        bytes.extend(event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "Let me "}})));
        bytes.extend(event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "check."}})));
        bytes.extend(event("contentBlockStop", json!({"contentBlockIndex": 0})));
        bytes.extend(event(
            "contentBlockStart",
            json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "forecast"}}}),
        ));
        for fragment in ["{\"ci", "ty\": \"Os", "lo\"}"] {
            bytes.extend(event(
                "contentBlockDelta",
                json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": fragment}}}),
            ));
        }
        bytes.extend(event("contentBlockStop", json!({"contentBlockIndex": 1})));
        bytes.extend(event("messageStop", json!({"stopReason": "tool_use"})));
        bytes.extend(event(
            "metadata",
            json!({"usage": {"inputTokens": 30, "outputTokens": 12, "totalTokens": 42, "cacheReadInputTokens": 100,
                "cacheWriteInputTokens": 7}, "metrics": {"latencyMs": 300}}),
        ));
        for piece in [1, 7, bytes.len()] {
            let (deltas, turn) = read(&bytes, piece);
            let turn = turn.unwrap();
            assert_eq!(deltas, ["Let me ", "check."]);
            assert_eq!(turn.text, "Let me check.");
            assert_eq!(turn.tool_calls.len(), 1);
            assert_eq!(turn.tool_calls[0].id, "tooluse_1");
            assert_eq!(turn.tool_calls[0].arguments["city"], "Oslo");
            assert_eq!(
                turn.usage,
                Usage { input_tokens: 30, output_tokens: 12, cache_read_tokens: 100, cache_write_tokens: 7 }
            );
        }
    }

    #[test]
    fn stop_reasons_end_the_turn_or_the_run() {
        let turn_stopped = |reason: &str| {
            let mut bytes = event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}}));
            bytes.extend(event("messageStop", json!({"stopReason": reason})));
            read(&bytes, 64).1
        };
        for reason in ["end_turn", "stop_sequence", "max_tokens", "guardrail_intervened", "a_reason_added_later"] {
            assert_eq!(turn_stopped(reason).map(|turn| turn.text), Ok("Hi".to_owned()), "{reason}");
        }
        for reason in ["content_filtered", "malformed_tool_use", "model_context_window_exceeded"] {
            let err = turn_stopped(reason).unwrap_err();
            assert_eq!(err, format!("the provider failed (HTTP 200): model m stopped without an answer: {reason}"));
        }
        let unfinished = event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}}));
        assert_eq!(
            read(&unfinished, 64).1.unwrap_err(),
            "the provider's stream could not be read: the stream ended before messageStop"
        );
    }

    #[test]
    fn exceptions_mid_stream_are_failures_and_throttling_is_retryable() {
        let mut bytes = event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}}));
        bytes.extend(frame(
            &[(":message-type", "exception"), (":exception-type", "modelStreamErrorException")],
            json!({"message": "The model failed"}),
        ));
        let (deltas, failure) = read(&bytes, 64);
        assert_eq!(deltas, ["Hi"]);
        assert!(failure.unwrap_err().contains("Exception { kind: \"modelStreamErrorException\""));
        let throttled = frame(
            &[(":message-type", "exception"), (":exception-type", "throttlingException")],
            json!({"message": "slow down"}),
        );
        assert!(read(&throttled, 64).1.unwrap_err().starts_with("Throttled"));
    }

    #[test]
    fn frames_that_are_too_large_or_corrupt_are_refused_before_they_are_buffered() {
        let mut reader = FrameReader::default();
        let err = reader.feed(&[0x7f, 0xff, 0xff, 0xff, 0, 0]).unwrap_err();
        assert!(err.to_string().contains("larger than"), "{err}");
        let mut corrupt = event("messageStop", json!({"stopReason": "end_turn"}));
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        assert!(FrameReader::default().feed(&corrupt).is_err());
    }

    #[test]
    fn the_request_merges_roles_maps_parameters_and_names_tools() {
        let provider = Bedrock {
            model: "anthropic.claude-test".into(),
            region: "us-east-1".into(),
            route: Route::Aws {
                runtime: BedrockRuntime::new(&aws_env::SdkConfig::builder().build()),
                credentials: Credentials::Role,
            },
            parameters: serde_json::from_value(json!({"temperature": 0.2, "max_tokens": 500, "stop": "END",
                "top_k": 40, "guardrailConfig": {"guardrailIdentifier": "g", "guardrailVersion": "1"}}))
            .unwrap(),
            silence: SilenceLimits::default(),
        };
        let call = |id: &str| ToolCall { id: id.into(), name: "f".into(), arguments: Map::new() };
        let image = Attachment::sniff("x.gif", b"GIF89a..".to_vec()).unwrap();
        let pdf = Attachment::sniff("Q3 report.final.pdf", b"%PDF-1.7 ..".to_vec()).unwrap();
        let request = TurnRequest {
            system: Some("Be brief.".into()),
            messages: vec![
                Message::User { text: "What is it?".into(), attachments: vec![image, pdf] },
                Message::Assistant { text: String::new(), tool_calls: vec![call("t1"), call("t2")] },
                Message::Tool { call_id: "t1".into(), name: "f".into(), content: "one".into() },
                Message::Tool { call_id: "t2".into(), name: "f".into(), content: "two".into() },
            ],
            tools: vec![ToolSpec {
                name: "f".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }],
            deadline: None,
        };
        let body = provider.body(&request);
        assert_eq!(body["system"], json!([{"text": "Be brief."}]));
        assert_eq!(
            body["messages"][0]["content"][0],
            json!({"image": {"format": "gif", "source": {"bytes": "R0lGODlhLi4="}}})
        );
        assert_eq!(
            body["messages"][1]["content"][0],
            json!({"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}})
        );
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3, "the two tool results are one user message");
        assert_eq!(messages[2]["content"][1]["toolResult"]["toolUseId"], "t2");
        assert_eq!(
            body["toolConfig"]["tools"][0],
            json!({"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}})
        );
        assert_eq!(body["inferenceConfig"], json!({"temperature": 0.2, "maxTokens": 500, "stopSequences": ["END"]}));
        assert_eq!(body["additionalModelRequestFields"], json!({"top_k": 40}));
        assert_eq!(body["guardrailConfig"]["guardrailIdentifier"], "g");
    }

    #[test]
    fn document_names_keep_what_converse_accepts() {
        assert_eq!(document_name("Q3 report.final.pdf"), "Q3 report-final");
        assert_eq!(document_name("a  b\t(c)[d]_é.docx"), "a b (c)[d]--");
        assert_eq!(document_name(".pdf"), "document");
        assert_eq!(document_name("   x  "), "x");
        let twice = [("a.pdf", "%PDF-1"), ("a.pdf", "%PDF-2")]
            .map(|(name, data)| Attachment::sniff(name, data.as_bytes().to_vec()).unwrap());
        let blocks = attachment_blocks(&twice);
        assert_eq!(
            (blocks[0]["document"]["name"].as_str(), blocks[1]["document"]["name"].as_str()),
            (Some("a"), Some("a (2)"))
        );
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_its_ceiling() {
        for _ in 0..50 {
            let first = backoff(1);
            assert!(first >= Duration::from_millis(250) && first <= Duration::from_millis(500), "{first:?}");
            let third = backoff(3);
            assert!(third >= Duration::from_secs(1) && third <= Duration::from_secs(2), "{third:?}");
            assert!(backoff(40) <= MAX_BACKOFF && backoff(40) >= MAX_BACKOFF / 2);
        }
    }

    #[test]
    fn path_labels_escape_an_arns_separators() {
        assert_eq!(
            encode_path_label("arn:aws:bedrock:us-east-1:1:inference-profile/us.x-v1:0"),
            "arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x-v1%3A0"
        );
    }

    proptest::proptest! {
        /// Any bytes, cut anywhere: frames, or `Malformed`; never a panic, never more than a
        /// frame's limit buffered.
        #[test]
        fn any_bytes_are_frames_or_malformed(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
            cut in 1usize..64,
        ) {
            let mut reader = FrameReader::default();
            for chunk in bytes.chunks(cut) {
                match reader.feed(chunk) {
                    Ok(_) => proptest::prop_assert!(reader.buffer.len() <= MAX_FRAME_BYTES),
                    Err(err) => {
                        proptest::prop_assert!(matches!(err, ProviderError::Malformed(_)), "{:?}", err);
                        break;
                    }
                }
            }
        }

        /// Text deltas framed and cut anywhere arrive whole and in order.
        #[test]
        fn framed_deltas_cut_anywhere_arrive_in_order(
            pieces in proptest::collection::vec("[a-zé ]{1,12}", 1..8),
            cut in 1usize..40,
        ) {
            let mut bytes = Vec::new();
            for piece in &pieces {
                bytes.extend(event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": piece}})));
            }
            bytes.extend(event("messageStop", json!({"stopReason": "end_turn"})));
            let (deltas, turn) = read(&bytes, cut);
            proptest::prop_assert_eq!(&deltas, &pieces);
            proptest::prop_assert_eq!(turn.map(|turn| turn.text), Ok(pieces.concat()));
        }

        /// Any event of any type with any JSON payload: a delta, nothing, or `Malformed`; and the
        /// turn it leaves is a turn or a provider error, never a panic.
        #[test]
        fn any_event_is_read_or_refused(
            kinds in proptest::collection::vec(proptest::sample::select(vec![
                "messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata", "x",
            ]), 0..8),
            payloads in proptest::collection::vec(proptest::sample::select(vec![
                json!({}), json!(null), json!([1]), json!({"contentBlockIndex": 0, "delta": {"text": "a"}}),
                json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{"}}}),
                json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t", "name": "f"}}}),
                json!({"contentBlockIndex": 18446744073709551615u64, "delta": {"text": 5}}),
                json!({"stopReason": "content_filtered"}), json!({"stopReason": 7}),
                json!({"usage": {"inputTokens": -1, "outputTokens": 1.5, "cacheReadInputTokens": "x"}}),
            ]), 8),
        ) {
            let mut turn = ConverseAccumulator::default();
            for (kind, payload) in kinds.iter().zip(&payloads) {
                if let Err(err) = turn.event(kind, payload) {
                    proptest::prop_assert!(matches!(err, ProviderError::Malformed(_)), "{:?}", err);
                }
            }
            if let Err(err) = turn.finish("m") {
                proptest::prop_assert!(matches!(err, ProviderError::Malformed(_) | ProviderError::Status { .. }), "{:?}", err);
            }
        }
    }
}
