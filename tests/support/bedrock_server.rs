//! A stand-in for Amazon Bedrock Runtime's `ConverseStream` (`POST /model/{modelId}/converse-stream`)
//! speaking its wire format: an `application/vnd.amazon.eventstream` body of event-stream frames
//! written by AWS's own `aws-smithy-eventstream` crate (one HTTP chunk per frame), exceptions as
//! frames in the stream, and restJson1 errors (`x-amzn-errortype`) before it. Each request takes
//! the next scripted reply; every request is recorded for assertions. boto3 reads it in
//! `tests/api/interop.rs`.

use crate::local_server::{Handler, LocalServer, ResponseBody, respond};
use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame};
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

/// The namespace Bedrock's `x-amzn-errortype` names after the error code.
const ERROR_NAMESPACE: &str = "http://internal.amazon.com/coral/com.amazon.bedrock/";

/// One scripted answer, served in order (one per request; when they run out, answer 500).
#[derive(Debug, Clone)]
pub enum BedrockReply {
    /// HTTP 200 `application/vnd.amazon.eventstream`, one event frame per `(event_type, payload)`:
    /// headers `:event-type` = event_type, `:content-type` = "application/json", `:message-type` =
    /// "event", payload = the JSON (e.g. `("contentBlockDelta", {"contentBlockIndex":0,"delta":{"text":"Hi"}})`).
    Events(Vec<(String, Value)>),
    /// The events, then an exception frame (`:message-type` = "exception", `:exception-type` = the
    /// type such as "throttlingException" or "modelStreamErrorException", `:content-type` =
    /// "application/json", payload `{"message": message}`), then the stream ends.
    EventsThenException { events: Vec<(String, Value)>, exception_type: String, message: String },
    /// The events, then the connection stays open and silent (idle-timeout tests; tokio paused
    /// time may be used).
    EventsThenSilence(Vec<(String, Value)>),
    /// An HTTP error before any stream, as Bedrock's restJson1 errors look: `status`, header
    /// `x-amzn-errortype: {code}:http://internal.amazon.com/coral/com.amazon.bedrock/`, body
    /// `{"message": message}`, content-type application/json. E.g. 429 ThrottlingException, 403
    /// AccessDeniedException, 400 ValidationException, 404 ResourceNotFoundException.
    Error { status: u16, code: String, message: String },
}

/// What the stand-in received.
#[derive(Debug, Clone)]
pub struct BedrockRequest {
    pub method: String,
    /// The request path as sent, percent-encoding kept (`/model/arn%3Aaws%3A.../converse-stream`).
    pub path: String,
    /// The path's model id label, percent-decoded (empty when the path is not `ConverseStream`'s).
    pub model_id: String,
    /// Every header (lower-case names): `authorization`, `x-amz-date`, `x-amz-security-token`,
    /// `content-type`...
    pub headers: BTreeMap<String, String>,
    /// The JSON body (`Null` when not JSON).
    pub body: Value,
}

/// A running Bedrock Runtime stand-in; it stops when dropped.
pub struct BedrockServer {
    pub server: LocalServer,
    /// Every request received, in order (those answered 404 included).
    pub requests: Arc<Mutex<Vec<BedrockRequest>>>,
}

impl BedrockServer {
    /// Serves `replies` in order on a free loopback port; past the script, every
    /// `ConverseStream` gets a 500.
    pub async fn start(replies: Vec<BedrockReply>) -> Self {
        let script = Arc::new(Mutex::new(VecDeque::from(replies)));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let handler: Handler = Arc::new(move |request| {
            let (script, seen) = (Arc::clone(&script), Arc::clone(&seen));
            Box::pin(async move {
                let method = request.method().as_str().to_owned();
                let path = request.uri().path().to_owned();
                let headers: BTreeMap<String, String> = request
                    .headers()
                    .iter()
                    .map(|(name, value)| {
                        (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned())
                    })
                    .collect();
                let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let model_id = (method == "POST").then(|| converse_stream_model_id(&path)).flatten();
                let known = model_id.is_some();
                let model_id = model_id.unwrap_or_default();
                seen.lock().unwrap().push(BedrockRequest { method, path: path.clone(), model_id, headers, body });
                if !known {
                    return error(404, "UnknownOperationException", &format!("no operation at {path}"));
                }
                let reply = script.lock().unwrap().pop_front();
                match reply {
                    Some(BedrockReply::Events(events)) => stream(event_frames(&events), Ending::Close),
                    Some(BedrockReply::EventsThenException { events, exception_type, message }) => {
                        let mut frames = event_frames(&events);
                        frames.push(exception_frame(&exception_type, &message));
                        stream(frames, Ending::Close)
                    }
                    Some(BedrockReply::EventsThenSilence(events)) => stream(event_frames(&events), Ending::Silence),
                    Some(BedrockReply::Error { status, code, message }) => error(status, &code, &message),
                    None => error(500, "InternalServerException", "the stand-in's script ended"),
                }
            })
        });
        Self { server: LocalServer::start(handler).await, requests }
    }

    /// `http://127.0.0.1:{port}`: the endpoint URL an SDK client is given.
    pub fn url(&self) -> String {
        self.server.url("")
    }
}

/// The percent-decoded model id of `/model/{modelId}/converse-stream`, the label one path
/// segment (an SDK encodes the `/` and `:` of an ARN).
fn converse_stream_model_id(path: &str) -> Option<String> {
    let label = path.strip_prefix("/model/")?.strip_suffix("/converse-stream")?;
    if label.is_empty() || label.contains('/') {
        return None;
    }
    Some(percent_encoding::percent_decode_str(label).decode_utf8_lossy().into_owned())
}

/// A restJson1 error as Bedrock answers it, with a request id as every Bedrock answer has.
fn error(status: u16, code: &str, message: &str) -> hyper::Response<ResponseBody> {
    let mut response = respond(status, "application/json", json!({"message": message}).to_string());
    let headers = response.headers_mut();
    let errortype = format!("{code}:{ERROR_NAMESPACE}");
    headers.insert("x-amzn-errortype", errortype.parse().expect("a header value"));
    headers.insert("x-amzn-requestid", request_id().parse().expect("a header value"));
    response
}

fn request_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// How a stream ends after its frames.
enum Ending {
    Close,
    /// The body neither ends nor sends: the connection stays open until the client leaves.
    Silence,
}

/// `200 application/vnd.amazon.eventstream` writing each frame as its own chunk.
fn stream(frames: Vec<Bytes>, ending: Ending) -> hyper::Response<ResponseBody> {
    let frames = futures_util::stream::unfold(frames.into_iter(), |mut frames| async move {
        let frame = frames.next()?;
        // Pending once between frames: hyper flushes what it has before polling for the next, so
        // each frame goes out in its own write.
        tokio::task::yield_now().await;
        Some((Ok::<_, Infallible>(Frame::data(frame)), frames))
    });
    let body = match ending {
        Ending::Close => StreamBody::new(frames).boxed(),
        Ending::Silence => {
            let silence = futures_util::stream::pending::<Result<Frame<Bytes>, Infallible>>();
            StreamBody::new(futures_util::StreamExt::chain(frames, silence)).boxed()
        }
    };
    hyper::Response::builder()
        .status(200)
        .header("content-type", "application/vnd.amazon.eventstream")
        .header("x-amzn-requestid", request_id())
        .body(body)
        .expect("valid response")
}

fn event_frames(events: &[(String, Value)]) -> Vec<Bytes> {
    events
        .iter()
        .map(|(event_type, payload)| {
            frame(vec![string_header(":event-type", event_type), string_header(":message-type", "event")], payload)
        })
        .collect()
}

fn exception_frame(exception_type: &str, message: &str) -> Bytes {
    let headers = vec![string_header(":exception-type", exception_type), string_header(":message-type", "exception")];
    frame(headers, &json!({"message": message}))
}

fn string_header(name: &'static str, value: &str) -> Header {
    Header::new(name, HeaderValue::String(value.to_owned().into()))
}

/// One event-stream message: `headers` and `:content-type: application/json`, `payload` as JSON.
fn frame(mut headers: Vec<Header>, payload: &Value) -> Bytes {
    headers.push(string_header(":content-type", "application/json"));
    let message = Message::new_from_parts(headers, payload.to_string());
    let mut buffer = Vec::new();
    write_message_to(&message, &mut buffer).expect("a frame within the event-stream limits");
    Bytes::from(buffer)
}

/// Bedrock's usage object. As Bedrock reports Anthropic models, `inputTokens` excludes the cached
/// tokens and `totalTokens` counts them all.
pub fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Value {
    json!({"inputTokens": input, "outputTokens": output, "totalTokens": input + output + cache_read + cache_write,
        "cacheReadInputTokens": cache_read, "cacheWriteInputTokens": cache_write})
}

fn event(event_type: &str, payload: Value) -> (String, Value) {
    (event_type.to_owned(), payload)
}

/// The end of every turn: `messageStop` with `stop_reason`, `metadata` with `usage` and a latency.
fn turn_end(stop_reason: &str, usage: Value) -> [(String, Value); 2] {
    [
        event("messageStop", json!({"stopReason": stop_reason})),
        event("metadata", json!({"usage": usage, "metrics": {"latencyMs": 12}})),
    ]
}

/// A text block at `index`: one `contentBlockDelta` per piece (Bedrock starts no text block with
/// `contentBlockStart`), then `contentBlockStop`.
fn text_block(index: u64, pieces: &[&str]) -> Vec<(String, Value)> {
    let deltas = pieces
        .iter()
        .map(|piece| event("contentBlockDelta", json!({"contentBlockIndex": index, "delta": {"text": piece}})));
    deltas.chain([event("contentBlockStop", json!({"contentBlockIndex": index}))]).collect()
}

/// A whole text turn: `messageStart` `{"role":"assistant"}`, a `contentBlockDelta` per piece
/// (index 0), `contentBlockStop`, `messageStop` `{"stopReason": stop_reason}`, `metadata`
/// `{"usage": usage, "metrics": {"latencyMs": 12}}`.
pub fn text_turn(pieces: &[&str], stop_reason: &str, usage: Value) -> Vec<(String, Value)> {
    let mut events = vec![event("messageStart", json!({"role": "assistant"}))];
    events.extend(text_block(0, pieces));
    events.extend(turn_end(stop_reason, usage));
    events
}

/// A tool-use turn: an optional leading text block (index 0), then a toolUse block:
/// `contentBlockStart` `{"contentBlockIndex": i, "start": {"toolUse": {"toolUseId", "name"}}}`, one
/// `contentBlockDelta` `{"contentBlockIndex": i, "delta": {"toolUse": {"input": fragment}}}` per
/// fragment of the JSON input string, `contentBlockStop`, `messageStop` `{"stopReason":"tool_use"}`,
/// `metadata` with `usage`.
pub fn tool_use_turn(
    text: Option<&str>,
    tool_use_id: &str,
    name: &str,
    input_fragments: &[&str],
    usage: Value,
) -> Vec<(String, Value)> {
    let mut events = vec![event("messageStart", json!({"role": "assistant"}))];
    if let Some(text) = text {
        events.extend(text_block(0, &[text]));
    }
    let index = u64::from(text.is_some());
    let start = json!({"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": tool_use_id, "name": name}}});
    events.push(event("contentBlockStart", start));
    events.extend(input_fragments.iter().map(|fragment| {
        event("contentBlockDelta", json!({"contentBlockIndex": index, "delta": {"toolUse": {"input": fragment}}}))
    }));
    events.push(event("contentBlockStop", json!({"contentBlockIndex": index})));
    events.extend(turn_end("tool_use", usage));
    events
}
