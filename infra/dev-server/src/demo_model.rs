//! The language model of `make dev`'s demo agent: a tiny OpenAI-compatible Chat Completions
//! server on loopback, so the demo agent really answers locally without a provider key. It
//! streams a fixed reply that quotes the last user message, in the real wire format (chunks,
//! a usage chunk, `[DONE]`); it never calls tools.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};

/// The model name the demo language model and the demo agent use.
pub const DEMO_MODEL_NAME: &str = "demo-model";

/// The largest request the demo model reads.
const MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;

/// The reply to a Chat Completions request body: the SSE text of a streamed answer.
pub fn reply(request: &[u8]) -> String {
    let body: Value = serde_json::from_slice(request).unwrap_or(Value::Null);
    let asked = body["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|message| message["role"] == "user"))
        .map(|message| match &message["content"] {
            Value::String(text) => text.clone(),
            Value::Array(parts) => parts.iter().filter_map(|part| part["text"].as_str()).collect::<Vec<_>>().join(" "),
            _ => String::new(),
        })
        .unwrap_or_default();
    let quoted: String = asked.chars().take(200).collect();
    let answer = format!(
        "This is the local demo model of make dev. You said: \"{quoted}\". Add a language model with a real \
         provider (POST /language-models) and point an agent at it for real answers."
    );
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "demo", "object": "chat.completion.chunk", "created": 0, "model": DEMO_MODEL_NAME,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    for word in answer.split_inclusive(' ') {
        events.push(chunk(json!({"content": word}), Value::Null));
    }
    events.push(chunk(json!({}), json!("stop")));
    let words = u64::try_from(answer.split(' ').count()).unwrap_or(0);
    let input = u64::try_from(asked.split_whitespace().count()).unwrap_or(0);
    events.push(json!({"id": "demo", "object": "chat.completion.chunk", "created": 0, "model": DEMO_MODEL_NAME,
        "choices": [], "usage": {"prompt_tokens": input, "completion_tokens": words, "total_tokens": input + words}}));
    let mut text: String = events.iter().map(|event| format!("data: {event}\n\n")).collect();
    text.push_str("data: [DONE]\n\n");
    text
}

/// Serves the demo model on `listener` until `shutdown` resolves.
pub async fn serve(listener: tokio::net::TcpListener, shutdown: impl std::future::Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|request: hyper::Request<Incoming>| async move {
                        let body = Limited::new(request.into_body(), MAX_REQUEST_BYTES).collect().await;
                        let response = match body {
                            Ok(body) => hyper::Response::builder()
                                .header("content-type", "text/event-stream")
                                .body(Full::new(Bytes::from(reply(&body.to_bytes())))),
                            Err(_) => hyper::Response::builder().status(413).body(Full::new(Bytes::new())),
                        };
                        Ok::<_, std::convert::Infallible>(response.unwrap_or_default())
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reply_quotes_the_last_user_message_and_ends_with_done() {
        let request = json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "hello"}]}]});
        let text = reply(request.to_string().as_bytes());
        assert!(text.contains(r#""content":"\"hello\". "#), "{text}");
        assert!(!text.contains("first"));
        assert!(text.ends_with("data: [DONE]\n\n"));
        assert!(text.contains(r#""finish_reason":"stop""#));
        assert!(reply(b"not json").contains(r#""content":"\"\". "#), "anything gets an answer");
    }
}
