//! A scripted language model server speaking OpenAI's Chat Completions streaming wire format
//! (SSE chunks, `data: [DONE]`), for tests of providers and runs. Each request takes the next
//! scripted reply; the request bodies are kept for assertions.

use crate::local_server::{Handler, LocalServer, ResponseBody, respond};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum ModelReply {
    /// `200 text/event-stream`: each piece is written after its pause (raw bytes on the wire).
    Stream(Vec<(Duration, String)>),
    /// `before` is written, then the stream waits for `gate` before writing `after`: proof that
    /// a client sees what came before while the model is still "thinking".
    Gated { before: Vec<String>, gate: Arc<tokio::sync::Notify>, after: Vec<String> },
    /// Any status with headers and a body (errors, rate limits).
    Status { status: u16, headers: Vec<(&'static str, String)>, body: String },
}

/// A running scripted model server.
pub struct ModelServer {
    pub server: LocalServer,
    /// The JSON bodies received, in order.
    pub requests: Arc<Mutex<Vec<Value>>>,
    /// The `authorization` header of each request.
    pub authorizations: Arc<Mutex<Vec<String>>>,
    /// The `traceparent` header of each request ("" when it had none).
    pub traceparents: Arc<Mutex<Vec<String>>>,
}

impl ModelServer {
    /// Serves `replies` in order at any path; past the script, every request gets a 500.
    pub async fn start(replies: Vec<ModelReply>) -> Self {
        let script = Arc::new(Mutex::new(VecDeque::from(replies)));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let authorizations = Arc::new(Mutex::new(Vec::new()));
        let traceparents = Arc::new(Mutex::new(Vec::new()));
        let (seen, auths, parents) = (Arc::clone(&requests), Arc::clone(&authorizations), Arc::clone(&traceparents));
        let handler: Handler = Arc::new(move |request| {
            let (script, seen, auths) = (Arc::clone(&script), Arc::clone(&seen), Arc::clone(&auths));
            let parents = Arc::clone(&parents);
            Box::pin(async move {
                let header = |name| request.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                auths.lock().unwrap().push(header("authorization"));
                parents.lock().unwrap().push(header("traceparent"));
                let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                seen.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                let reply = script.lock().unwrap().pop_front();
                match reply {
                    Some(ModelReply::Stream(pieces)) => stream(pieces),
                    Some(ModelReply::Gated { before, gate, after }) => gated(before, gate, after),
                    Some(ModelReply::Status { status, headers, body }) => {
                        let mut response = respond(status, "application/json", body);
                        for (name, value) in headers {
                            response.headers_mut().insert(name, value.parse().unwrap());
                        }
                        response
                    }
                    None => respond(500, "application/json", r#"{"error": {"message": "script ended"}}"#),
                }
            })
        });
        Self { server: LocalServer::start(handler).await, requests, authorizations, traceparents }
    }

    /// The server's base URL (`http://127.0.0.1:port/v1`).
    pub fn base_url(&self) -> String {
        self.server.url("/v1")
    }
}

fn stream(pieces: Vec<(Duration, String)>) -> hyper::Response<ResponseBody> {
    let frames = futures_util::stream::unfold(pieces.into_iter(), |mut pieces| async move {
        let (pause, text) = pieces.next()?;
        // A zero sleep still waits for the timer's next millisecond tick.
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        Some((Ok::<_, Infallible>(Frame::data(Bytes::from(text))), pieces))
    });
    hyper::Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(StreamBody::new(frames).boxed())
        .expect("valid response")
}

fn gated(before: Vec<String>, gate: Arc<tokio::sync::Notify>, after: Vec<String>) -> hyper::Response<ResponseBody> {
    let pieces: Vec<(Option<Arc<tokio::sync::Notify>>, String)> = before
        .into_iter()
        .map(|piece| (None, piece))
        .chain(after.into_iter().enumerate().map(|(i, piece)| ((i == 0).then(|| Arc::clone(&gate)), piece)))
        .collect();
    let frames = futures_util::stream::unfold(pieces.into_iter(), |mut pieces| async move {
        let (gate, text) = pieces.next()?;
        if let Some(gate) = gate {
            gate.notified().await;
        }
        Some((Ok::<_, Infallible>(Frame::data(Bytes::from(text))), pieces))
    });
    hyper::Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(StreamBody::new(frames).boxed())
        .expect("valid response")
}

/// A chunk with every field OpenAI's own chunk type requires (its Python client checks them in
/// `tests/api/interop.rs`), and `choices`.
fn chunk_body(choices: Value) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1767225600, "model": "test",
        "choices": choices})
}

/// One SSE chunk of a Chat Completions stream with `delta` as the first choice's delta.
pub fn chunk(delta: Value) -> String {
    let body = chunk_body(json!([{"index": 0, "delta": delta, "finish_reason": null}]));
    format!("data: {body}\n\n")
}

/// The end of a stream: a finish chunk, a usage chunk with no choices, `[DONE]`.
pub fn finish(reason: &str, input_tokens: u64, output_tokens: u64) -> Vec<String> {
    let stop = chunk_body(json!([{"index": 0, "delta": {}, "finish_reason": reason}]));
    let mut usage = chunk_body(json!([]));
    usage["usage"] = json!({"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens});
    vec![format!("data: {stop}\n\n"), format!("data: {usage}\n\n"), "data: [DONE]\n\n".to_owned()]
}

/// A streamed text answer, one chunk per word.
pub fn text_reply(text: &str) -> ModelReply {
    let mut pieces: Vec<String> = text.split_inclusive(' ').map(|word| chunk(json!({"content": word}))).collect();
    pieces.extend(finish("stop", 10, 5));
    ModelReply::Stream(pieces.into_iter().map(|piece| (Duration::ZERO, piece)).collect())
}

/// A streamed text answer of `count` deltas (`d0 d1 …`), each after a pause of `every`: a model
/// that answers slowly for `count × every`.
pub fn spaced_reply(count: usize, every: Duration) -> ModelReply {
    let mut pieces: Vec<(Duration, String)> =
        (0..count).map(|i| (every, chunk(json!({"content": format!("d{i} ")})))).collect();
    pieces.extend(finish("stop", 10, count as u64).into_iter().map(|piece| (Duration::ZERO, piece)));
    ModelReply::Stream(pieces)
}

/// A streamed turn of tool calls `(id, name, arguments)`, each call's arguments split in two
/// chunks.
pub fn tool_calls_reply(calls: &[(&str, &str, Value)]) -> ModelReply {
    let mut pieces = Vec::new();
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        let text = arguments.to_string();
        let (head, tail) = text.split_at(text.len() / 2);
        pieces.push(chunk(json!({"tool_calls": [{"index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": head}}]})));
        pieces.push(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": tail}}]})));
    }
    pieces.extend(finish("tool_calls", 20, 8));
    ModelReply::Stream(pieces.into_iter().map(|piece| (Duration::ZERO, piece)).collect())
}

/// "Hello " streamed at once, then "world" and the end only once `gate` is notified: proof that
/// a client sees the first delta while the model is still answering.
pub fn gated_hello_world(gate: &Arc<tokio::sync::Notify>) -> ModelReply {
    let mut after = vec![chunk(json!({"content": "world"}))];
    after.extend(finish("stop", 1, 1));
    ModelReply::Gated { before: vec![chunk(json!({"content": "Hello "}))], gate: Arc::clone(gate), after }
}
