//! The Bedrock provider against the Bedrock Runtime stand-in, which speaks AWS's event-stream
//! framing (frames written by the smithy event-stream crate, checked with boto3 in
//! `interop.rs`): text, tool use over two turns, usage with the cache's tokens, a throttled
//! first attempt, access denied, a mid-stream exception, API keys, and runs through the real
//! run function, whose calls the IAM check reads.

use agent_runtime::events::Usage;
use agent_runtime::providers::bedrock::{Bedrock, Route};
use agent_runtime::providers::{Message, Provider, ProviderError, SilenceLimits, ToolSpec, Turn, TurnRequest};
use aws_env::bedrock::{BedrockRuntime, Credentials};
use integration_tests::bedrock_server::{BedrockReply, BedrockServer, text_turn, tool_use_turn, usage};
use integration_tests::{TestClock, TestStack, loopback_client};
use platform_api::{AgentRunsService, AgentsService, LanguageModelsService};
use serde_json::{Map, Value, json};
use std::time::Duration;
use uuid::Uuid;

const MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

/// A function's AWS configuration with Bedrock Runtime at `url` (as the endpoint variable sets it).
fn runtime_at(url: &str) -> BedrockRuntime {
    let vars = [
        ("AWS_REGION", "eu-west-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", "AKIDBEDROCKTEST".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "bedrock-test-secret".to_owned()),
        ("AWS_SESSION_TOKEN", "bedrock-test-session".to_owned()),
        ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", url.to_owned()),
    ];
    let lookup = move |name: &str| vars.iter().find(|(key, _)| *key == name).map(|(_, value)| value.clone());
    BedrockRuntime::new(&aws_env::function_config(&lookup))
}

fn provider(server: &BedrockServer, credentials: Credentials) -> Bedrock {
    Bedrock {
        model: MODEL.into(),
        region: "us-east-1".into(),
        route: Route::Aws { runtime: runtime_at(&server.url()), credentials },
        parameters: Map::from_iter([("max_tokens".to_owned(), json!(256))]),
        silence: SilenceLimits::default(),
    }
}

fn request(messages: Vec<Message>) -> TurnRequest {
    TurnRequest {
        system: Some("Be brief.".into()),
        messages,
        tools: vec![ToolSpec {
            name: "forecast".into(),
            description: "Forecast for a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }],
        deadline: Some(tokio::time::Instant::now() + Duration::from_secs(120)),
    }
}

async fn turn(provider: &Bedrock, request: &TurnRequest) -> (Vec<String>, Result<Turn, ProviderError>) {
    let mut deltas = Vec::new();
    let result = provider.turn(request, &mut |delta| deltas.push(delta.to_owned())).await;
    (deltas, result)
}

#[tokio::test]
async fn a_signed_turn_streams_text_and_reads_usage_with_the_caches_tokens() {
    let server = BedrockServer::start(vec![BedrockReply::Events(text_turn(
        &["It will ", "rain."],
        "end_turn",
        usage(30, 5, 120, 8),
    ))])
    .await;
    let provider = provider(&server, Credentials::Role);
    let (deltas, result) = turn(&provider, &request(vec![Message::user("Weather in Oslo?")])).await;
    let turn = result.unwrap();
    assert_eq!(deltas, ["It will ", "rain."]);
    assert_eq!(turn.text, "It will rain.");
    assert_eq!(turn.usage, Usage { input_tokens: 30, output_tokens: 5, cache_read_tokens: 120, cache_write_tokens: 8 });

    let sent = &server.requests.lock().unwrap()[0];
    assert_eq!(sent.model_id, MODEL);
    assert_eq!(sent.path, format!("/model/{MODEL}/converse-stream").replace(':', "%3A"));
    let authorization = &sent.headers["authorization"];
    assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDBEDROCKTEST/"), "{authorization}");
    assert!(
        authorization.contains("/us-east-1/bedrock/aws4_request"),
        "signed for the model's region: {authorization}"
    );
    assert_eq!(sent.headers["x-amz-security-token"], "bedrock-test-session");
    assert_eq!(sent.body["system"], json!([{"text": "Be brief."}]));
    assert_eq!(sent.body["messages"], json!([{"role": "user", "content": [{"text": "Weather in Oslo?"}]}]));
    assert_eq!(sent.body["inferenceConfig"], json!({"maxTokens": 256}));
    assert_eq!(sent.body["toolConfig"]["tools"][0]["toolSpec"]["name"], "forecast");
}

#[tokio::test]
async fn a_tool_use_streamed_in_fragments_is_answered_in_a_second_turn() {
    let server = BedrockServer::start(vec![
        BedrockReply::Events(tool_use_turn(
            Some("Checking."),
            "tooluse_1",
            "forecast",
            &["{\"ci", "ty\": \"Os", "lo\"}"],
            usage(40, 12, 0, 0),
        )),
        BedrockReply::Events(text_turn(&["Rain."], "end_turn", usage(60, 3, 0, 0))),
    ])
    .await;
    let provider = provider(&server, Credentials::Role);
    let first_request = request(vec![Message::user("Weather in Oslo?")]);
    let (_, first) = turn(&provider, &first_request).await;
    let first = first.unwrap();
    assert_eq!(first.text, "Checking.");
    let call = &first.tool_calls[0];
    assert_eq!((call.id.as_str(), call.name.as_str()), ("tooluse_1", "forecast"));
    assert_eq!(call.arguments["city"], "Oslo");

    let second_request = request(vec![
        Message::user("Weather in Oslo?"),
        Message::Assistant { text: first.text.clone(), tool_calls: first.tool_calls.clone() },
        Message::Tool { call_id: call.id.clone(), name: call.name.clone(), content: "rain".into() },
    ]);
    let (deltas, second) = turn(&provider, &second_request).await;
    assert_eq!((deltas, second.unwrap().text), (vec!["Rain.".to_owned()], "Rain.".to_owned()));
    let sent = server.requests.lock().unwrap()[1].body.clone();
    assert_eq!(
        sent["messages"][1]["content"],
        json!([{"text": "Checking."}, {"toolUse": {"toolUseId": "tooluse_1", "name": "forecast", "input": {"city": "Oslo"}}}])
    );
    assert_eq!(
        sent["messages"][2],
        json!({"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "rain"}]}}]})
    );
}

// Real time: the waits are 0.25 to 4 s (paused time would also jump the stream's limits while
// the stand-in's bytes are on their way).
#[tokio::test]
async fn a_throttled_first_attempt_is_tried_again_after_a_backoff() {
    let server = BedrockServer::start(vec![
        BedrockReply::Error { status: 429, code: "ThrottlingException".into(), message: "Too many requests".into() },
        BedrockReply::EventsThenException {
            events: Vec::new(),
            exception_type: "throttlingException".into(),
            message: "Slow down".into(),
        },
        BedrockReply::Events(text_turn(&["Done."], "end_turn", usage(1, 1, 0, 0))),
    ])
    .await;
    let provider = provider(&server, Credentials::Role);
    let (deltas, result) = turn(&provider, &request(vec![Message::user("hi")])).await;
    assert_eq!(result.map(|turn| turn.text), Ok("Done.".to_owned()));
    assert_eq!(deltas, ["Done."]);
    assert_eq!(server.requests.lock().unwrap().len(), 3);

    // Throttled on every attempt: the run's error names the model and AWS's reason.
    let always = (0..5)
        .map(|_| BedrockReply::Error {
            status: 429,
            code: "ThrottlingException".into(),
            message: "Too many requests".into(),
        })
        .collect();
    let server = BedrockServer::start(always).await;
    let (_, result) = turn(&provider_at(&server), &request(vec![Message::user("hi")])).await;
    assert_eq!(
        result.unwrap_err().to_string(),
        format!(
            "the provider failed (HTTP 429): Bedrock throttled model {MODEL} on each of 5 attempts: ThrottlingException: Too many requests"
        )
    );
    assert_eq!(server.requests.lock().unwrap().len(), 5);
}

fn provider_at(server: &BedrockServer) -> Bedrock {
    provider(server, Credentials::Role)
}

#[tokio::test]
async fn access_denied_and_a_mid_stream_exception_end_the_turn_naming_the_model_and_the_reason() {
    let server = BedrockServer::start(vec![
        BedrockReply::Error {
            status: 403,
            code: "AccessDeniedException".into(),
            message: "You don't have access to the model with the specified model ID.".into(),
        },
        BedrockReply::EventsThenException {
            events: text_turn(&["Partial"], "end_turn", usage(1, 1, 0, 0)).into_iter().take(2).collect(),
            exception_type: "modelStreamErrorException".into(),
            message: "The model stream failed".into(),
        },
        BedrockReply::EventsThenException {
            events: text_turn(&["Partial"], "end_turn", usage(1, 1, 0, 0)).into_iter().take(2).collect(),
            exception_type: "throttlingException".into(),
            message: "Slow down".into(),
        },
    ])
    .await;
    let provider = provider(&server, Credentials::Role);
    let (_, denied) = turn(&provider, &request(vec![Message::user("hi")])).await;
    assert_eq!(
        denied.unwrap_err().to_string(),
        format!(
            "the provider failed (HTTP 403): Bedrock refused model {MODEL}: AccessDeniedException: You don't have access \
             to the model with the specified model ID."
        )
    );
    let (deltas, broken) = turn(&provider, &request(vec![Message::user("hi")])).await;
    assert_eq!(deltas, ["Partial"]);
    assert_eq!(
        broken.unwrap_err().to_string(),
        format!(
            "the provider failed (HTTP 200): model {MODEL}'s stream failed: modelStreamErrorException: The model stream failed"
        )
    );
    // Throttled once text went out: a retry would repeat the text, so the stream failed.
    let (deltas, throttled) = turn(&provider, &request(vec![Message::user("hi")])).await;
    assert_eq!(deltas, ["Partial"]);
    assert_eq!(
        throttled.unwrap_err().to_string(),
        format!("the provider failed (HTTP 200): model {MODEL}'s stream failed: throttlingException: Slow down")
    );
    assert_eq!(server.requests.lock().unwrap().len(), 3, "none is retried");
}

#[tokio::test]
async fn an_api_key_is_a_bearer_token_to_aws_or_to_the_models_own_base_url() {
    let server = BedrockServer::start(vec![
        BedrockReply::Events(text_turn(&["A"], "end_turn", usage(1, 1, 0, 0))),
        BedrockReply::Events(text_turn(&["B"], "end_turn", usage(1, 1, 0, 0))),
    ])
    .await;
    let keyed = provider(&server, Credentials::ApiKey("bedrock-api-key".into()));
    assert_eq!(turn(&keyed, &request(vec![Message::user("hi")])).await.1.unwrap().text, "A");
    let tenant = Bedrock {
        route: Route::BaseUrl { client: loopback_client(), base_url: server.url(), api_key: "tenant-key".into() },
        ..provider(&server, Credentials::Role)
    };
    assert_eq!(turn(&tenant, &request(vec![Message::user("hi")])).await.1.unwrap().text, "B");
    let requests = server.requests.lock().unwrap();
    assert_eq!(requests[0].headers["authorization"], "Bearer bedrock-api-key");
    assert!(!requests[0].headers.contains_key("x-amz-security-token"), "nothing is signed");
    assert_eq!(requests[1].headers["authorization"], "Bearer tenant-key");
    assert_eq!(requests[1].model_id, MODEL);
}

#[tokio::test]
async fn a_base_url_goes_through_the_guarded_client() {
    let server = BedrockServer::start(Vec::new()).await;
    let guarded = Bedrock {
        route: Route::BaseUrl {
            client: outbound::TenantClient::new(outbound::AddressPolicy::default()),
            base_url: server.url(),
            api_key: "tenant-key".into(),
        },
        ..provider(&server, Credentials::Role)
    };
    let (_, result) = turn(&guarded, &request(vec![Message::user("hi")])).await;
    assert!(matches!(result, Err(ProviderError::Unreachable(_))), "{result:?}");
    assert!(server.requests.lock().unwrap().is_empty(), "loopback is refused before anything is sent");
}

/// A Bedrock language model and a config agent using it, through the API; the agent's id.
async fn bedrock_agent(stack: &TestStack, clock: &TestClock, key: &str) -> String {
    let model = stack
        .client::<LanguageModelsService>(clock)
        .with_key(key)
        .post(
            "/language-models",
            json!({"name": "Claude on Bedrock", "provider": "bedrock", "model_name": MODEL, "region": "us-east-1"}),
        )
        .created()
        .await;
    let agent = json!({"type": "config", "name": "Bedrock agent", "framework": "chainlib", "language_model_id": model});
    stack.client::<AgentsService>(clock).with_key(key).post("/agents/", agent).created().await
}

/// Runs `agent` through the run function: the last event's name and data.
async fn run(stack: &TestStack, clock: &TestClock, key: &str, agent: &str) -> (String, Value) {
    let runs = stack.client::<AgentRunsService>(clock).with_key(key);
    let body = json!({"message": "Weather in Oslo?"}).to_string();
    let response = crate::agent_runs::run(&runs, agent, "application/json", body).stream().await;
    let frames = crate::agent_runs::read_stream(response.into_body()).await;
    let (_, name, data) = frames.last().expect("a last event").clone();
    (name, data)
}

#[tokio::test]
async fn a_run_of_a_bedrock_agent_is_signed_by_the_run_functions_role_and_counts_the_caches_tokens() {
    let server = BedrockServer::start(vec![BedrockReply::Events(text_turn(
        &["Rain ", "in Oslo."],
        "end_turn",
        usage(30, 5, 100, 0),
    ))])
    .await;
    let stack = TestStack::new().await.with_bedrock_endpoint(&server.url());
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agent = bedrock_agent(&stack, &clock, &key).await;
    let (name, done) = run(&stack, &clock, &key, &agent).await;
    assert_eq!(name, "done", "{done}");
    assert_eq!(done["output"], "Rain in Oslo.");
    assert_eq!(
        done["usage"],
        json!({"input_tokens": 30, "output_tokens": 5, "cache_read_tokens": 100, "cache_write_tokens": 0})
    );
    let sent = &server.requests.lock().unwrap()[0];
    assert!(sent.headers["authorization"].contains("/us-east-1/bedrock/aws4_request"), "{:?}", sent.headers);
}

#[tokio::test]
async fn under_a_local_stack_without_the_endpoint_variable_a_run_fails_naming_it() {
    // The test stack's AWS_ENDPOINT_URL is the local stack's, as under `make dev`.
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agent = bedrock_agent(&stack, &clock, &key).await;
    let (name, error) = run(&stack, &clock, &key, &agent).await;
    assert_eq!(name, "error", "{error}");
    assert_eq!(error["failure_reason"], "provider_error");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("AWS_ENDPOINT_URL_BEDROCK_RUNTIME is not set"), "{message}");
}

#[tokio::test]
async fn a_run_sends_its_pdf_and_image_files_as_converse_blocks() {
    let server =
        BedrockServer::start(vec![BedrockReply::Events(text_turn(&["A report."], "end_turn", usage(900, 3, 0, 0)))])
            .await;
    let stack = TestStack::new().await.with_bedrock_endpoint(&server.url());
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let agent = bedrock_agent(&stack, &clock, &key).await;
    let pdf = b"%PDF-1.7\n%\xE2\xE3\xCF\xD3\n1 0 obj".to_vec();
    let gif = b"GIF89a\x01\x00\x01\x00\x80".to_vec();
    let mut body = b"--b\r\nContent-Disposition: form-data; name=\"message\"\r\n\r\nWhat is this?\r\n".to_vec();
    for (name, data) in [("Q3 report.pdf", &pdf), ("dot.gif", &gif)] {
        body.extend_from_slice(
            format!("--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"--b--\r\n");
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let response = crate::agent_runs::run(&runs, &agent, "multipart/form-data; boundary=b", body).stream().await;
    let frames = crate::agent_runs::read_stream(response.into_body()).await;
    assert_eq!(frames.last().unwrap().1, "done", "{frames:?}");
    use base64::Engine;
    let base64 = |data: &[u8]| base64::engine::general_purpose::STANDARD.encode(data);
    let sent = &server.requests.lock().unwrap()[0].body;
    assert_eq!(
        sent["messages"][0]["content"],
        json!([
            {"document": {"format": "pdf", "name": "Q3 report", "source": {"bytes": base64(&pdf)}}},
            {"image": {"format": "gif", "source": {"bytes": base64(&gif)}}},
            {"text": "What is this?"},
        ])
    );
}

// Real time (a second): paused time would also jump past the limit while the stand-in's first
// frames are on their way.
#[tokio::test]
async fn a_silent_stream_on_the_aws_route_ends_at_the_models_idle_limit() {
    let server = BedrockServer::start(vec![BedrockReply::EventsThenSilence(
        text_turn(&["Thinking"], "end_turn", usage(1, 1, 0, 0)).into_iter().take(2).collect(),
    )])
    .await;
    let mut provider = provider(&server, Credentials::Role);
    provider.silence.idle = Duration::from_secs(1);
    let (deltas, result) = turn(&provider, &request(vec![Message::user("hi")])).await;
    assert_eq!(deltas, ["Thinking"]);
    assert_eq!(
        result.unwrap_err(),
        ProviderError::TimedOut("the stream was silent for 1 seconds (the idle limit)".into())
    );
}
