//! Language model providers over real HTTP against the scripted Chat Completions server:
//! streaming, tool calls, and every provider failure as a clear error (never a hang).

use agent_runtime::providers::chat_completions::{ChatCompletions, KeyHeader};
use agent_runtime::providers::{Message, Provider, ProviderError, SilenceLimits, ToolSpec, Turn, TurnRequest};
use integration_tests::local_server::closed_port_url;
use integration_tests::loopback_client;
use integration_tests::model_server::{
    ModelReply, ModelServer, chunk, finish, gated_hello_world, spaced_reply, text_reply, tool_calls_reply,
};
use serde_json::{Map, json};
use std::sync::Arc;
use std::time::Duration;

fn provider(url: String) -> ChatCompletions {
    ChatCompletions {
        client: loopback_client(),
        url,
        api_key: Some("sk-test".into()),
        key_header: KeyHeader::Bearer,
        model: "gpt-test".into(),
        parameters: Map::from_iter([("temperature".to_owned(), json!(0.1))]),
        silence: SilenceLimits::default(),
    }
}

fn request() -> TurnRequest {
    TurnRequest {
        system: Some("Be brief.".into()),
        messages: vec![Message::user("Weather in Oslo?")],
        tools: vec![ToolSpec {
            name: "forecast".into(),
            description: "Forecast for a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }],
        deadline: None,
    }
}

async fn turn(provider: &ChatCompletions) -> (Vec<String>, Result<Turn, ProviderError>) {
    let mut deltas = Vec::new();
    let request = request();
    let result = provider.turn(&request, &mut |delta| deltas.push(delta.to_owned())).await;
    (deltas, result)
}

/// A turn of a run with `left` to its end.
fn request_of_a_run(left: Duration) -> TurnRequest {
    TurnRequest { deadline: Some(tokio::time::Instant::now() + left), ..request() }
}

async fn turn_of(provider: &ChatCompletions, request: TurnRequest) -> (Vec<String>, Result<Turn, ProviderError>) {
    let mut deltas = Vec::new();
    let result = provider.turn(&request, &mut |delta| deltas.push(delta.to_owned())).await;
    (deltas, result)
}

// Paused time: the clock jumps to the next timer whenever the provider and the scripted server
// (same runtime, loopback) both wait, so these minutes of stream take no real time.
#[tokio::test(start_paused = true)]
async fn a_stream_of_45_seconds_with_a_delta_every_5_succeeds() {
    let server = ModelServer::start(vec![spaced_reply(9, Duration::from_secs(5))]).await;
    let provider = provider(format!("{}/chat/completions", server.base_url()));
    let (deltas, result) = turn_of(&provider, request_of_a_run(Duration::from_secs(300))).await;
    assert_eq!(result.map(|turn| turn.text), Ok("d0 d1 d2 d3 d4 d5 d6 d7 d8 ".to_owned()));
    assert_eq!(deltas.len(), 9);
}

#[tokio::test(start_paused = true)]
async fn a_silent_stream_fails_naming_the_idle_limit_and_a_long_one_the_run_deadline() {
    let silent_after_one_delta = || {
        let mut pieces = vec![(Duration::ZERO, chunk(json!({"content": "Thinking"})))];
        pieces.push((Duration::from_secs(400), chunk(json!({"content": " done."}))));
        pieces.extend(finish("stop", 1, 2).into_iter().map(|piece| (Duration::ZERO, piece)));
        ModelReply::Stream(pieces)
    };
    let server = ModelServer::start(vec![
        silent_after_one_delta(),
        silent_after_one_delta(),
        spaced_reply(100, Duration::from_secs(5)),
    ])
    .await;
    let mut provider = provider(format!("{}/chat/completions", server.base_url()));
    // The default idle limit.
    let (deltas, result) = turn_of(&provider, request_of_a_run(Duration::from_secs(600))).await;
    assert_eq!(deltas, ["Thinking"]);
    assert_eq!(
        result.unwrap_err().to_string(),
        "the provider's stream stopped: the stream was silent for 60 seconds (the idle limit)"
    );
    // The model's own idle limit.
    provider.silence.idle = Duration::from_secs(10);
    let (_, result) = turn_of(&provider, request_of_a_run(Duration::from_secs(600))).await;
    assert_eq!(
        result.unwrap_err(),
        ProviderError::TimedOut("the stream was silent for 10 seconds (the idle limit)".into())
    );
    // A stream that never falls silent still ends with the run.
    let (deltas, result) = turn_of(&provider, request_of_a_run(Duration::from_secs(42))).await;
    assert_eq!(deltas.len(), 8);
    assert_eq!(
        result.unwrap_err(),
        ProviderError::TimedOut("the stream did not end within 42 seconds (its time limit)".into())
    );
}

#[tokio::test]
async fn a_streamed_answer_arrives_delta_by_delta_with_usage() {
    let server = ModelServer::start(vec![text_reply("It will rain.")]).await;
    let provider = provider(format!("{}/chat/completions", server.base_url()));
    let (deltas, result) = turn(&provider).await;
    let turn = result.unwrap();
    assert_eq!(deltas, ["It ", "will ", "rain."]);
    assert_eq!(turn.text, "It will rain.");
    assert_eq!((turn.usage.input_tokens, turn.usage.output_tokens), (10, 5));
    let body = server.requests.lock().unwrap()[0].clone();
    assert_eq!((body["model"].as_str(), body["stream"].as_bool()), (Some("gpt-test"), Some(true)));
    assert_eq!(body["temperature"], 0.1);
    assert_eq!(body["tools"][0]["function"]["name"], "forecast");
    assert_eq!(server.authorizations.lock().unwrap()[0], "Bearer sk-test");
}

#[tokio::test]
async fn deltas_reach_the_caller_before_the_model_has_finished() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let reply = gated_hello_world(&gate);
    let server = ModelServer::start(vec![reply]).await;
    let provider = provider(format!("{}/chat/completions", server.base_url()));
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let request = request();
    let running = async {
        let mut on_delta = |delta: &str| {
            let _ = sender.send(delta.to_owned());
        };
        provider.turn(&request, &mut on_delta).await
    };
    let observer = async {
        // The stream is held until the first delta has been seen here.
        let first = receiver.recv().await;
        gate.notify_one();
        first
    };
    let (result, first) = tokio::join!(running, observer);
    assert_eq!(first.as_deref(), Some("Hello "));
    assert_eq!(result.unwrap().text, "Hello world");
}

#[tokio::test]
async fn parallel_tool_calls_split_across_chunks_are_reassembled() {
    let server = ModelServer::start(vec![tool_calls_reply(&[
        ("call_1", "forecast", json!({"city": "Oslo"})),
        ("call_2", "forecast", json!({"city": "Bergen", "days": 2})),
    ])])
    .await;
    let (_, result) = turn(&provider(format!("{}/chat/completions", server.base_url()))).await;
    let calls = result.unwrap().tool_calls;
    assert_eq!(calls.len(), 2);
    assert_eq!((calls[0].id.as_str(), calls[0].arguments["city"].as_str()), ("call_1", Some("Oslo")));
    assert_eq!(calls[1].arguments["days"], 2);
}

#[tokio::test]
async fn provider_failures_are_errors_that_say_what_happened() {
    let status = |status: u16, headers: Vec<(&'static str, String)>, body: &str| ModelReply::Status {
        status,
        headers,
        body: body.to_owned(),
    };
    let cases: Vec<(Vec<ModelReply>, ProviderError)> = vec![
        (vec![status(401, vec![], r#"{"error": {"message": "bad key"}}"#)], ProviderError::Unauthorized(401)),
        (
            vec![status(503, vec![], r#"{"error": {"message": "overloaded"}}"#)],
            ProviderError::Status { status: 503, message: "overloaded".into() },
        ),
        (
            vec![ModelReply::Stream(vec![(Duration::ZERO, "data: {not json\n\n".into())])],
            ProviderError::Malformed("a chunk is not JSON (key must be a string at line 1 column 2)".into()),
        ),
        (
            vec![ModelReply::Stream(vec![(Duration::ZERO, chunk(json!({"content": "cut"})))])],
            ProviderError::Malformed("the stream ended before the answer did".into()),
        ),
        (
            (0..3).map(|_| status(429, vec![("retry-after", "0".into())], "{}")).collect(),
            ProviderError::RateLimited { attempts: 3, retry_after: Some(Duration::ZERO) },
        ),
    ];
    for (replies, expected) in cases {
        let server = ModelServer::start(replies).await;
        let (_, result) = turn(&provider(format!("{}/chat/completions", server.base_url()))).await;
        assert_eq!(result, Err(expected));
    }
    let (_, result) = turn(&provider(closed_port_url("/v1/chat/completions"))).await;
    assert!(matches!(result, Err(ProviderError::Unreachable(ref message)) if message.starts_with("could not connect")));
}

#[tokio::test]
async fn a_rate_limited_turn_is_retried_after_retry_after() {
    let limited = ModelReply::Status { status: 429, headers: vec![("retry-after", "0".into())], body: "{}".into() };
    let server = ModelServer::start(vec![limited, text_reply("ok")]).await;
    let (_, result) = turn(&provider(format!("{}/chat/completions", server.base_url()))).await;
    assert_eq!(result.unwrap().text, "ok");
    assert_eq!(server.requests.lock().unwrap().len(), 2);
}

/// One Anthropic Messages SSE event.
fn anthropic_event(data: serde_json::Value) -> (Duration, String) {
    let name = data["type"].as_str().unwrap_or("message").to_owned();
    (Duration::ZERO, format!("event: {name}\ndata: {data}\n\n"))
}

#[tokio::test]
async fn the_anthropic_format_streams_text_and_tool_use_over_http() {
    use agent_runtime::providers::anthropic::Anthropic;
    let reply = ModelReply::Stream(vec![
        anthropic_event(
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 9, "output_tokens": 1}}}),
        ),
        anthropic_event(
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        anthropic_event(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Checking "}}),
        ),
        anthropic_event(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Oslo."}}),
        ),
        anthropic_event(json!({"type": "content_block_stop", "index": 0})),
        anthropic_event(json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "forecast", "input": {}}})),
        anthropic_event(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Oslo\"}"}})),
        anthropic_event(
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
        ),
        anthropic_event(json!({"type": "message_stop"})),
    ]);
    let overloaded = ModelReply::Status {
        status: 529,
        headers: vec![("retry-after", "0".into())],
        body: r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#.into(),
    };
    let server = ModelServer::start(vec![overloaded, reply]).await;
    let provider = Anthropic {
        client: loopback_client(),
        url: server.server.url("/v1/messages"),
        api_key: Some("sk-ant".into()),
        model: "claude-test".into(),
        parameters: Map::new(),
        silence: SilenceLimits::default(),
    };
    let request = request();
    let mut deltas = Vec::new();
    let turn = provider.turn(&request, &mut |delta| deltas.push(delta.to_owned())).await.unwrap();
    assert_eq!(deltas, ["Checking ", "Oslo."]);
    assert_eq!(turn.tool_calls[0].arguments["city"], "Oslo");
    assert_eq!((turn.usage.input_tokens, turn.usage.output_tokens), (9, 12));
    let body = server.requests.lock().unwrap()[1].clone();
    assert_eq!((body["model"].as_str(), body["system"].as_str()), (Some("claude-test"), Some("Be brief.")));
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
}
