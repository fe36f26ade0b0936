//! A run's trace (issue 50, docs/tracing.md), as a local OTLP receiver decodes it: the
//! `invoke_agent` span under the caller's `traceparent`, a `chat` span per model turn, an
//! `execute_tool` span per call with the MCP request and the sub-agent's own `invoke_agent` under
//! it; the `traceparent` every outbound request carried (MCP's in `params._meta` too); SigV4; no
//! content unless capture is on; `trace_id` on the stream, the record and the webhook event.

use crate::agent_runs::read_stream;
use aws_credential_types::provider::ProvideCredentials;
use integration_tests::mcp_server::start_recording_mcp_server;
use integration_tests::model_server::{ModelServer, text_reply, tool_calls_reply};
use integration_tests::otlp_receiver::{OtlpReceiver, ReceivedSpan};
use integration_tests::{TestClock, TestStack};
use platform_api::{AgentsService, LanguageModelsService, McpsService, RunnerService, WebhooksService};
use serde_json::{Value, json};
use uuid::Uuid;

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// A language model served by `model`.
async fn model(stack: &TestStack, clock: &TestClock, key: &str, name: &str, model: &ModelServer) -> String {
    let body = json!({"name": name, "provider": "openai_compatible", "model_name": format!("{name}-model"),
        "base_url": model.base_url()});
    stack.client::<LanguageModelsService>(clock).with_key(key).post("/language-models", body).created().await
}

async fn agent(stack: &TestStack, clock: &TestClock, key: &str, body: Value) -> String {
    stack.client::<AgentsService>(clock).with_key(key).post("/agents/", body).created().await
}

fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found: Vec<&ReceivedSpan> = spans.iter().filter(|span| span.name == name).collect();
    assert_eq!(found.len(), 1, "one span {name} in {:#?}", names(spans));
    found[0]
}

fn names(spans: &[ReceivedSpan]) -> Vec<(String, String, Option<String>)> {
    spans.iter().map(|span| (span.name.clone(), span.span_id.clone(), span.parent_span_id.clone())).collect()
}

fn traceparent_of(span: &ReceivedSpan) -> String {
    format!("00-{}-{}-01", span.trace_id, span.span_id)
}

/// Runs an agent that calls an MCP tool and a sub-agent in its first turn and answers in its
/// second, under the caller's `traceparent`; returns the run's id and what each party saw.
struct Traced {
    run_id: String,
    frames: Vec<(String, String, Value)>,
    parent_model: ModelServer,
    helper_model: ModelServer,
    mcp_requests: Vec<(String, Value)>,
    main: String,
}

async fn traced_run(stack: &TestStack, clock: &TestClock, key: &str) -> Traced {
    let parent_model = ModelServer::start(vec![
        tool_calls_reply(&[
            ("c1", "forecast", json!({"city": "Oslo"})),
            ("c2", "Helper", json!({"message": "2+3?"})),
            // The server's `alerts` tool always reports an error (`isError`): "alerts service down".
            ("c3", "alerts", json!({"city": "Bergen"})),
        ]),
        text_reply("Sunny, and five."),
    ])
    .await;
    let helper_model = ModelServer::start(vec![text_reply("5")]).await;
    let (mcp_server, mcp_requests) = start_recording_mcp_server().await;
    let mcp = stack
        .client::<McpsService>(clock)
        .with_key(key)
        .post("/mcps", json!({"name": "weather", "url": mcp_server.url("/mcp")}))
        .created()
        .await;
    let parent_lm = model(stack, clock, key, "parent", &parent_model).await;
    let helper_lm = model(stack, clock, key, "helper", &helper_model).await;
    let helper = agent(
        stack,
        clock,
        key,
        json!({"type": "config", "name": "Helper", "framework": "chainlib",
        "language_model_id": helper_lm, "description": "Adds numbers"}),
    )
    .await;
    let main = agent(
        stack,
        clock,
        key,
        json!({"type": "config", "name": "Main", "framework": "chainlib",
        "language_model_id": parent_lm, "agents": [helper], "mcps": [mcp], "instruction": "Be secretive."}),
    )
    .await;
    let response = stack
        .client::<RunnerService>(clock)
        .with_key(key)
        .post("/execute/a2a/stream/agent", json!({"agent_id": main, "message": "Weather in Oslo, and 2+3?"}))
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .stream()
        .await;
    let run_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    // The stream ends once the invocation's spans are exported.
    let frames = read_stream(response.into_body()).await;
    let mcp_requests = mcp_requests.lock().unwrap().clone();
    Traced { run_id, frames, parent_model, helper_model, mcp_requests, main }
}

#[tokio::test]
async fn a_runs_trace_is_one_tree_in_the_genai_conventions_and_every_call_it_made_names_its_span() {
    let receiver = OtlpReceiver::start().await;
    let stack = TestStack::new().await.with_settings(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()),
        ("OTLP_SIGV4_SERVICE", "xray"),
        ("OTEL_SERVICE_NAME", "runner-under-test"),
    ]);
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let run = traced_run(&stack, &clock, &key).await;
    let done = &run.frames.last().unwrap().2;
    assert_eq!(done["output"], "Sunny, and five.", "{done}");

    // The stream's first event names the trace: the caller's.
    let metadata = &run.frames[0];
    assert_eq!((metadata.1.as_str(), &metadata.2["trace_id"]), ("metadata", &json!(CALLER_TRACE)));

    let spans = receiver.spans_of(CALLER_TRACE);
    let root = one(&spans, "invoke_agent Main");
    assert_eq!(root.parent_span_id.as_deref(), Some(CALLER_SPAN), "the caller's span is the run's parent");
    assert_eq!(root.kind, 1, "an in-process agent is INTERNAL");
    assert_eq!(root.attribute("gen_ai.operation.name"), Some(&json!("invoke_agent")));
    assert_eq!(root.attribute("gen_ai.provider.name"), Some(&json!("openai_compatible")));
    assert_eq!(root.attribute("gen_ai.agent.name"), Some(&json!("Main")));
    assert_eq!(root.attribute("gen_ai.agent.id"), Some(&json!(run.main)));
    assert_eq!(root.attribute("gen_ai.request.model"), Some(&json!("parent-model")));
    assert_eq!(root.attribute("agent_platform.run.id"), Some(&json!(run.run_id)));
    assert!(root.attribute("gen_ai.usage.input_tokens").is_some_and(|tokens| tokens.as_i64() > Some(0)));
    assert_eq!(root.status.0, 0, "a successful run's status is unset");
    assert_eq!(root.resource.get("service.name"), Some(&json!("runner-under-test")));
    assert_eq!(root.flags & 0x1, 1, "sampled");

    // Two model turns of the parent, each a chat span under the run.
    let chats: Vec<&ReceivedSpan> = spans.iter().filter(|span| span.name == "chat parent-model").collect();
    assert_eq!(chats.len(), 2, "{:#?}", names(&spans));
    for chat in &chats {
        assert_eq!(chat.parent_span_id.as_deref(), Some(root.span_id.as_str()));
        assert_eq!(chat.kind, 3, "a model call is CLIENT");
        assert_eq!(chat.attribute("gen_ai.operation.name"), Some(&json!("chat")));
        assert_eq!(chat.attribute("gen_ai.request.model"), Some(&json!("parent-model")));
        assert!(chat.attribute("gen_ai.usage.output_tokens").is_some());
    }
    // The answer streamed text: its time to the first chunk is recorded (seconds).
    assert!(chats[1].attribute("gen_ai.response.time_to_first_chunk").is_some_and(Value::is_f64));
    let finish: Vec<&Value> =
        chats.iter().filter_map(|chat| chat.attribute("gen_ai.response.finish_reasons")).collect();
    assert_eq!(finish, [&json!(["tool_call"]), &json!(["stop"])]);
    // Each model request named its own chat span.
    let sent = run.parent_model.traceparents.lock().unwrap().clone();
    assert_eq!(sent, chats.iter().map(|chat| traceparent_of(chat)).collect::<Vec<_>>());

    // The MCP tool call: its execute_tool span, and under it the MCP request's client span,
    // which the request named in `params._meta` and in its header.
    let forecast = one(&spans, "execute_tool forecast");
    assert_eq!(forecast.parent_span_id.as_deref(), Some(root.span_id.as_str()));
    assert_eq!(forecast.attribute("gen_ai.tool.call.id"), Some(&json!("c1")));
    assert_eq!(forecast.attribute("gen_ai.tool.type"), Some(&json!("extension")));
    assert_eq!(forecast.attribute("agent_platform.tool.kind"), Some(&json!("mcp")));
    let mcp_call = one(&spans, "tools/call forecast");
    assert_eq!(mcp_call.parent_span_id.as_deref(), Some(forecast.span_id.as_str()));
    assert_eq!((mcp_call.kind, mcp_call.attribute("mcp.method.name")), (3, Some(&json!("tools/call"))));
    let call = run
        .mcp_requests
        .iter()
        .find(|(_, body)| body["method"] == "tools/call" && body["params"]["name"] == "forecast")
        .expect("a tools/call of forecast");
    assert_eq!(call.1["params"]["_meta"]["traceparent"], json!(traceparent_of(mcp_call)));
    assert_eq!(call.0, traceparent_of(mcp_call));

    // The sub-agent: its execute_tool span, its own invoke_agent under it, and its chat under that.
    let helper_call = one(&spans, "execute_tool Helper");
    assert_eq!(helper_call.attribute("agent_platform.tool.kind"), Some(&json!("agent")));
    let helper = one(&spans, "invoke_agent Helper");
    assert_eq!(helper.parent_span_id.as_deref(), Some(helper_call.span_id.as_str()));
    assert_eq!(helper.attribute("gen_ai.agent.name"), Some(&json!("Helper")));
    let helper_chat = one(&spans, "chat helper-model");
    assert_eq!(helper_chat.parent_span_id.as_deref(), Some(helper.span_id.as_str()));
    assert_eq!(*run.helper_model.traceparents.lock().unwrap(), [traceparent_of(helper_chat)]);

    // A tool that failed: an error span whose status names the kind of error, not its text.
    let alerts = one(&spans, "execute_tool alerts");
    assert_eq!((alerts.status.0, alerts.attribute("error.type")), (2, Some(&json!("tool_error"))));
    assert_eq!(alerts.status.1, "tool_error");
    assert_eq!(one(&spans, "tools/call alerts").attribute("error.type"), Some(&json!("tool_error")));

    // Every span is within its parent's time, and nothing of the conversation is recorded.
    for span in &spans {
        assert!(span.end_unix_nanos >= span.start_unix_nanos, "{}", span.name);
        let recorded = format!("{:?} {}", span.attributes, span.status.1);
        for content in
            ["Oslo", "Bergen", "alerts service down", "2+3?", "Sunny", "five", "Be secretive", "Adds numbers"]
        {
            if content == "Adds numbers" && span.name == "invoke_agent Helper" {
                continue; // The agent's description is its metadata, not content.
            }
            assert!(!recorded.contains(content), "{content} recorded without capture in {}: {recorded}", span.name);
        }
    }

    // The export was signed for X-Ray with the function's credentials.
    let exports = receiver.exports();
    let export = exports.iter().find(|export| export.path == "/v1/traces").expect("an export to /v1/traces");
    assert_eq!(export.headers["content-type"], "application/x-protobuf");
    verify_sigv4(&stack, &receiver, export).await;

    // The record and `run.succeeded` name the trace.
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let record = agents.get(&format!("/agents/{}/runs/{}", run.main, run.run_id)).expect(200).await["data"].clone();
    assert_eq!(record["trace_id"], CALLER_TRACE);
    let events = stack.client::<WebhooksService>(&clock).with_key(&key).get("/webhooks/events").expect(200).await;
    let succeeded = events["data"].as_array().unwrap().iter().find(|event| event["type"] == "run.succeeded").cloned();
    assert_eq!(succeeded.expect("run.succeeded")["data"]["trace_id"], CALLER_TRACE);
}

/// Checks the export's SigV4 signature by signing the same request again with the stack's
/// credentials at the time it names.
async fn verify_sigv4(stack: &TestStack, receiver: &OtlpReceiver, export: &integration_tests::otlp_receiver::Export) {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let authorization = &export.headers["authorization"];
    assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential="), "{authorization}");
    assert!(authorization.contains("/xray/aws4_request"), "signed for X-Ray: {authorization}");
    let date = &export.headers["x-amz-date"];
    let time = chrono::NaiveDateTime::parse_from_str(date, "%Y%m%dT%H%M%SZ").unwrap().and_utc();
    let credentials = stack.aws().config().credentials_provider().unwrap().provide_credentials().await.unwrap();
    let identity = credentials.into();
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name("xray")
        .time(time.into())
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let url = receiver.server.url("/v1/traces");
    let request = SignableRequest::new(
        "POST",
        &url,
        [("content-type", "application/x-protobuf")].into_iter(),
        SignableBody::Bytes(&export.body),
    )
    .unwrap();
    let (instructions, _) = sign(request, &params).unwrap().into_parts();
    let expected: Vec<(&str, &str)> = instructions.headers().collect();
    let expected_authorization = expected.iter().find(|(name, _)| *name == "authorization").unwrap().1;
    assert_eq!(authorization, expected_authorization, "the signature covers this body and these headers");
}

#[tokio::test]
async fn with_content_capture_on_the_spans_hold_the_conversation() {
    let receiver = OtlpReceiver::start().await;
    let stack = TestStack::new().await.with_settings(&[
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &receiver.server.url("/custom/traces")),
        ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"),
    ]);
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let run = traced_run(&stack, &clock, &key).await;
    let spans = receiver.spans_of(CALLER_TRACE);
    assert!(receiver.exports().iter().all(|export| export.path == "/custom/traces"));
    assert!(receiver.exports().iter().all(|export| !export.headers.contains_key("authorization")), "unsigned");
    let forecast = one(&spans, "execute_tool forecast");
    assert_eq!(forecast.attribute("gen_ai.tool.call.arguments"), Some(&json!(r#"{"city":"Oslo"}"#)));
    let alerts = one(&spans, "execute_tool alerts");
    assert!(alerts.status.1.contains("alerts service down"), "with capture the status has the error: {alerts:?}");
    let chat = spans.iter().find(|span| span.name == "chat parent-model").unwrap();
    let input = chat.attribute("gen_ai.input.messages").and_then(Value::as_str).unwrap();
    assert!(input.contains("Weather in Oslo, and 2+3?"), "{input}");
    let system = chat.attribute("gen_ai.system_instructions").and_then(Value::as_str).unwrap();
    assert!(system.contains("Be secretive."), "{system}");
    let root = one(&spans, "invoke_agent Main");
    assert!(root.attribute("gen_ai.output.messages").and_then(Value::as_str).unwrap().contains("Sunny, and five."));
    assert_eq!(run.frames.last().unwrap().1, "done");
}

#[tokio::test]
async fn a_queued_run_continued_by_several_invocations_is_one_trace_with_its_wait_and_each_continuation() {
    use crate::queued_runs::{agent, drain, start};
    use agent_runtime::queue::RunWorker;
    use agent_runtime::runs::RunType;
    let receiver = OtlpReceiver::start().await;
    let stack = TestStack::new().await;
    let traced = stack.with_settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint())]);
    let clock = TestClock::new();
    let tool = integration_tests::local_server::RecordingServer::start().await;
    let model = ModelServer::start(vec![
        tool_calls_reply(&[("c1", "count", json!({"n": 1}))]),
        tool_calls_reply(&[("c2", "count", json!({"n": 2}))]),
        text_reply("Counted twice."),
    ])
    .await;
    let agent = agent(&stack, &clock, &model, Some(tool.url("/count"))).await;
    let runner: agent_runtime::lifecycle::RunLifecycle = stack.service(&TestClock::system());
    let queue = stack.run_queue();
    let record = runner.enqueue(&agent, &start("Count", RunType::Queue), &queue).await.unwrap();
    let trace_id = record.trace_id().expect("a new run has a trace").to_owned();
    let worker = traced.service::<RunWorker>(&TestClock::system());
    // One invocation per step: turn, tool, turn, tool, turn.
    assert_eq!(drain(&worker, &queue, true).await, 5);

    let spans = receiver.spans_of(&trace_id);
    let root = one(&spans, "invoke_agent Worker");
    assert_eq!(root.parent_span_id, None, "a queued run without a caller's trace starts its own");
    assert_eq!(root.attribute("agent_platform.run.type"), Some(&json!("queue")));
    let children = |name: &str| -> Vec<&ReceivedSpan> {
        spans.iter().filter(|span| span.name == name && span.parent_span_id.as_ref() == Some(&root.span_id)).collect()
    };
    let wait = children("queue_wait");
    assert_eq!(wait.len(), 1, "{:#?}", names(&spans));
    assert_eq!(wait[0].start_unix_nanos, root.start_unix_nanos, "the run's span begins when it was queued");
    assert_eq!(children("continue_run").len(), 4, "each invocation after the first: {:#?}", names(&spans));
    assert_eq!(children("chat test-model").len() + children("chat local-model").len(), 0);
    let chats: Vec<&ReceivedSpan> = spans.iter().filter(|span| span.name.starts_with("chat ")).collect();
    assert_eq!(chats.len(), 3);
    assert!(chats.iter().all(|chat| chat.parent_span_id.as_ref() == Some(&root.span_id)));
    let calls = children("execute_tool count");
    assert_eq!(calls.len(), 2);
    // Each HTTP tool request named its call's span.
    let sent: Vec<String> = tool.received().iter().map(|headers| headers["traceparent"].clone()).collect();
    assert_eq!(sent, calls.iter().map(|call| traceparent_of(call)).collect::<Vec<_>>());
    // Every invocation exported its part before it returned.
    assert!(receiver.exports().len() >= 5, "{} exports", receiver.exports().len());
    let followed = stack.runs().get(record.run_id, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!(followed.trace_id(), Some(trace_id.as_str()));
}

/// The process's EMF lines, kept in memory from the first call on (one sink per process: the
/// functions' `init_tracing` installs stdout's in Lambda).
fn metric_lines() -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    static LINES: std::sync::OnceLock<std::sync::Arc<std::sync::Mutex<Vec<String>>>> = std::sync::OnceLock::new();
    std::sync::Arc::clone(LINES.get_or_init(|| {
        telemetry::metrics::install_in_memory("AgentPlatform/test").expect("the first metrics sink of this process")
    }))
}

#[tokio::test]
async fn an_export_that_fails_never_fails_the_run_and_the_metrics_name_no_tenant() {
    let lines = metric_lines();
    let stack = TestStack::new().await.with_settings(&[(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        &integration_tests::local_server::closed_port_url("/v1/traces"),
    )]);
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let run = traced_run(&stack, &clock, &key).await;
    assert_eq!(run.frames.last().unwrap().1, "done", "the run succeeded although its spans went nowhere");
    let lines = lines.lock().unwrap().clone();
    let parsed: Vec<Value> = lines.iter().map(|line| serde_json::from_str(line).unwrap()).collect();
    let has = |metric: &str, dimension: &str, value: &str| {
        parsed.iter().any(|line| line.get(metric).is_some() && line[dimension] == value)
    };
    assert!(parsed.iter().any(|line| line.get("TraceExportFailures").is_some()), "counted: {lines:?}");
    assert!(has("RunsEnded", "Provider", "openai_compatible"), "{lines:?}");
    assert!(has("ToolCalls", "ToolType", "mcp") && has("ToolCalls", "ToolType", "agent"), "{lines:?}");
    assert!(has("TurnDuration", "Provider", "openai_compatible"), "{lines:?}");
    for line in &lines {
        for id in [account.to_string(), run.main.clone(), run.run_id.clone()] {
            assert!(!line.contains(&id), "a metric names a tenant's id: {line}");
        }
    }
}
