//! The streamed functions' Lambda loop (`http_api::run_streaming_on_lambda`, what `agent-runs`
//! and `runner` run in Lambda) against a local Runtime API. Its own test binary: the loop reads
//! its configuration from the process's environment.

use http_api::{Request, StreamingFunction, StreamingFuture};
use integration_tests::runtime_api::{Mark, RuntimeApi, gateway_event};
use serde_json::json;
use std::time::Duration;

/// Answers every request with a streamed body of three frames.
struct ThreeFrames;

impl StreamingFunction for ThreeFrames {
    fn handle(&self, _: Request) -> StreamingFuture<'_> {
        Box::pin(async {
            let (frames, body) = tokio::sync::mpsc::unbounded_channel();
            for frame in ["id: 1\n\n", "id: 2\n\n", "id: 3\n\n"] {
                let _ = frames.send(frame.to_owned());
            }
            http::Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(http_api::streaming::frames_body(body))
                .unwrap_or_default()
        })
    }
}

async fn next_mark(api: &mut RuntimeApi) -> Mark {
    tokio::time::timeout(Duration::from_secs(30), api.marks.recv())
        .await
        .expect("the function answers the Runtime API")
        .expect("the Runtime API is still serving")
}

#[tokio::test]
async fn a_streamed_answer_is_sent_whole_over_a_connection_without_nagle() {
    let event = gateway_event("GET", "/agents/a/runs/r/stream", &json!({}), None);
    let mut api = RuntimeApi::start_watching(vec![event]).await;
    let runtime_api: std::net::SocketAddr = api.address().parse().unwrap();
    let environment = [
        ("AWS_LAMBDA_RUNTIME_API", api.address()),
        ("AWS_LAMBDA_FUNCTION_NAME", "streaming".to_owned()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128".to_owned()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
    ];
    for (name, value) in environment {
        // SAFETY: the only test of this binary, before the loop (or any other thread) reads it.
        unsafe { std::env::set_var(name, value) };
    }
    // The function runs in this process: the marks read this process's CPU time.
    api.watch(std::process::id());
    let function = tokio::spawn(http_api::run_streaming_on_lambda(ThreeFrames));

    let Mark::Next(asked) = next_mark(&mut api).await else { panic!("no next") };
    let Mark::Answered(answered, body) = next_mark(&mut api).await else { panic!("no answer") };
    let (Some(cpu_asked), Some(cpu_answered)) = (asked.cpu, answered.cpu) else { panic!("no CPU time read") };
    assert!(cpu_asked > std::time::Duration::ZERO && cpu_answered >= cpu_asked, "{cpu_asked:?} → {cpu_answered:?}");
    // Lambda's streamed HTTP answer: the JSON prelude, eight NUL bytes, then the body's frames.
    let separator = body.windows(8).position(|bytes| bytes == [0; 8]).expect("the prelude's separator");
    let prelude: serde_json::Value = serde_json::from_slice(&body[..separator]).unwrap();
    assert_eq!(prelude["statusCode"], 200);
    assert_eq!(prelude["headers"]["content-type"], "text/event-stream");
    assert_eq!(&body[separator + 8..], b"id: 1\n\nid: 2\n\nid: 3\n\n");

    // The answer's pieces went out as written: Nagle's algorithm is off on the connection the
    // runtime keeps to the Runtime API (it would hold each piece for the last one's delayed ACK).
    assert!(matches!(next_mark(&mut api).await, Mark::Idle));
    let settings = http_api::runtime_socket::nodelay_toward(runtime_api);
    assert!(!settings.is_empty() && settings.iter().all(|on| *on), "TCP_NODELAY per connection: {settings:?}");
    function.abort();
}
