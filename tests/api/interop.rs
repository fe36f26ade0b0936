//! Interop with the official implementations of the protocols the agent runtime speaks, run from
//! the project's virtualenv (pinned in `infra/python/requirements-local.txt`, scripts in
//! `tests/interop/`): the MCP Python SDK's server, `a2a-sdk`'s server, OpenAI's Python client
//! reading our scripted model server, boto3 reading our Bedrock stand-in, and the documented
//! Python SSE client reading a run.

use agent_runtime::providers::chat_completions::{ChatCompletions, KeyHeader};
use agent_runtime::providers::{Message, Provider, ToolCall, ToolSpec, TurnRequest};
use http_body_util::BodyExt;
use integration_tests::bedrock_server::{BedrockReply, BedrockServer, text_turn, tool_use_turn, usage};
use integration_tests::model_server::{ModelReply, ModelServer, chunk, finish, text_reply, tool_calls_reply};
use integration_tests::python_server::{PythonServer, run_script};
use integration_tests::{Call, TestClient, TestClock, TestStack, loopback_client};
use outbound::sse::SseDecoder;
use platform_api::{AgentRunsService, AgentsService, McpsService};
use serde_json::{Map, Value, json};
use std::time::Duration;
use uuid::Uuid;

/// The bearer token the Python MCP server requires (`--token`).
const MCP_TOKEN: &str = "py-secret";

/// `POST /agents/{agent}/run` of `message`.
fn run<'a>(runs: &'a TestClient, agent: &str, message: &str) -> Call<'a> {
    runs.post(&format!("/agents/{agent}/run"), json!({"message": message}))
}

/// A run's stream as (event, data), through the runtime's SSE decoder.
async fn read_events(mut body: http_api::StreamBody) -> Vec<(String, Value)> {
    let mut decoder = SseDecoder::new(1024 * 1024);
    let mut events = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.unwrap().into_data() else { continue };
        for event in decoder.feed(&data).unwrap() {
            events.push((event.event, serde_json::from_str(&event.data).unwrap()));
        }
    }
    events
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

/// The agent's latest run as `GET /agents/{agent_id}/runs` lists it.
async fn latest_run(stack: &TestStack, clock: &TestClock, key: &str, agent: &str) -> Value {
    let agents = stack.client::<AgentsService>(clock).with_key(key);
    agents.get(&format!("/agents/{agent}/runs")).expect(200).await["data"][0].clone()
}

/// A `config` agent on a language model served by `model`, with `fields` added.
async fn config_agent(stack: &TestStack, clock: &TestClock, key: &str, model: &ModelServer, fields: Value) -> String {
    let lm = stack.language_model(clock, key, "local", &model.base_url()).await;
    let mut agent = json!({"type": "config", "name": "Interop", "framework": "chainlib", "language_model_id": lm});
    agent.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
    stack.client::<AgentsService>(clock).with_key(key).post("/agents/", agent).created().await
}

#[tokio::test]
async fn the_mcp_client_lists_and_calls_the_tools_of_an_mcp_python_sdk_server() {
    let server = PythonServer::start("mcp_server.py", &["--token", MCP_TOKEN]).await;
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let config = json!({"url": server.url("/mcp"), "secret_headers": {"Authorization": format!("Bearer {MCP_TOKEN}")}});

    // /mcps/connect: the Python server's initialize result, as the platform reports it.
    let connected = mcps.post("/mcps/connect", config.clone()).expect(200).await;
    let data = &connected["data"];
    assert_eq!(data["server"], json!({"name": "python-interop-server", "version": "2.3.0"}), "{}", server.log());
    assert_eq!(data["instructions"], "Ask about the weather.");
    assert!(data["capabilities"]["tools"].is_object(), "{data}");
    let tools = mcps.post("/mcps/connect/tools", config).expect(200).await;
    let listed: Vec<&str> =
        tools["data"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(listed, ["forecast", "conditions", "alerts", "team"]);
    let forecast = &tools["data"]["tools"][0];
    assert_eq!(forecast["description"], "Tomorrow's forecast for a city");
    assert_eq!(forecast["input_schema"]["properties"]["city"]["type"], "string");
    assert_eq!(forecast["input_schema"]["required"], json!(["city"]));
    // Without the secret header the server's gateway refuses: a 400 that says so.
    let refused = mcps.post("/mcps/connect", json!({"url": server.url("/mcp")})).error(400, "BAD_REQUEST").await;
    assert!(refused["details"]["error"].as_str().unwrap().contains("401"), "{refused}");

    // The session a run uses: every call carries the headers; text, `isError` and unknown tools.
    let target = mcp::McpTarget {
        url: server.url("/mcp"),
        headers: vec![("authorization".into(), format!("Bearer {MCP_TOKEN}")), ("x-team".into(), "blue".into())],
        timeout: Duration::from_secs(30),
    };
    let (session, tools) = mcp::open_session(&loopback_client(), &target).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    assert_eq!(names, ["forecast", "conditions", "alerts", "team"]);
    // The SDK derives an output schema from a return type, and answers with structured content.
    assert_eq!(tools[0].output_schema, None);
    assert_eq!(tools[1].output_schema.as_ref().map(|schema| schema["type"].clone()), Some(json!("object")));
    let city = |name: &str| Map::from_iter([("city".to_owned(), json!(name))]);
    assert_eq!(session.call_tool("forecast", city("Oslo")).await, Ok(json!("Sunny in Oslo")));
    let conditions = session.call_tool("conditions", city("Oslo")).await;
    assert_eq!(conditions, Ok(json!({"city": "Oslo", "sky": "clear", "celsius": 21})));
    let failed = session.call_tool("alerts", city("Oslo")).await;
    assert!(
        matches!(&failed, Err(mcp::McpError::ToolFailed(text)) if text.contains("alerts service down for Oslo")),
        "{failed:?}"
    );
    assert_eq!(session.call_tool("team", Map::new()).await, Ok(json!("blue")));
    // The SDK answers an unknown tool with an `isError` result naming it.
    let unknown = session.call_tool("nowhere", Map::new()).await;
    assert!(matches!(&unknown, Err(mcp::McpError::ToolFailed(text)) if text.contains("nowhere")), "{unknown:?}");
    session.close().await;
}

#[tokio::test]
async fn an_agent_run_calls_the_tools_of_an_mcp_python_sdk_server() {
    let (server, stack) = tokio::join!(PythonServer::start("mcp_server.py", &["--token", MCP_TOKEN]), TestStack::new());
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let model = ModelServer::start(vec![
        tool_calls_reply(&[("c1", "forecast", json!({"city": "Oslo"})), ("c2", "alerts", json!({"city": "Oslo"}))]),
        text_reply("Sunny, alerts unknown."),
    ])
    .await;
    let mcp = stack
        .client::<McpsService>(&clock)
        .with_key(&key)
        .post(
            "/mcps",
            json!({"name": "python weather", "url": server.url("/mcp"),
            "secret_headers": {"Authorization": format!("Bearer {MCP_TOKEN}")}}),
        )
        .created()
        .await;
    let agent = config_agent(&stack, &clock, &key, &model, json!({"mcps": [mcp]})).await;

    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let response = run(&runs, &agent, "Weather and alerts in Oslo?").stream().await;
    assert_eq!(response.status(), 200);
    let events = read_events(response.into_body()).await;
    assert_eq!(
        names(&events),
        ["metadata", "tool_call", "tool_call", "tool_result", "tool_result", "message", "message", "message", "done"],
        "{events:?}\n{}",
        server.log()
    );
    let mut results: Vec<&Value> =
        events.iter().filter(|(name, _)| name == "tool_result").map(|(_, data)| data).collect();
    results.sort_by_key(|data| data["id"].as_str().unwrap().to_owned());
    assert_eq!(*results[0], json!({"id": "c1", "name": "forecast", "output": "Sunny in Oslo"}));
    assert_eq!((results[1]["id"].as_str(), results[1]["name"].as_str()), (Some("c2"), Some("alerts")));
    let error = results[1]["error"].as_str().unwrap();
    assert!(error.contains("alerts service down for Oslo"), "{error}");
    assert_eq!(events.last().unwrap().1["output"], "Sunny, alerts unknown.");

    // The model's second turn got the Python server's text and its error as an error result.
    let second = model.requests.lock().unwrap()[1].clone();
    let tool_messages: Vec<(&str, &str)> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| (m["tool_call_id"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(tool_messages[0], ("c1", "Sunny in Oslo"));
    assert_eq!(tool_messages[1].0, "c2");
    assert!(tool_messages[1].1.starts_with("Error: ") && tool_messages[1].1.contains("alerts service down"));
    let run = latest_run(&stack, &clock, &key, &agent).await;
    assert_eq!((run["status"].as_str(), run["steps"].as_u64()), (Some("success"), Some(2)));
}

#[tokio::test]
async fn a2a_agents_run_on_an_a2a_sdk_server_over_a2a_1_0_and_0_3() {
    let (v1, v03, v1_unstreamed, stack) = tokio::join!(
        PythonServer::start("a2a_server.py", &["--protocol", "1.0"]),
        PythonServer::start("a2a_server.py", &["--protocol", "0.3"]),
        PythonServer::start("a2a_server.py", &["--protocol", "1.0", "--no-streaming"]),
        TestStack::new(),
    );
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let cases = [
        ("1.0 streamed", &v1, "Say hello", ["metadata", "message", "message", "done"].as_slice()),
        ("0.3 streamed", &v03, "Say hello", &["metadata", "message", "message", "done"]),
        ("1.0 not streamed", &v1_unstreamed, "Say hello", &["metadata", "message", "message", "done"]),
        ("1.0 failing", &v1, "Please fail", &["metadata", "error"]),
    ];
    for (i, (case, server, message, expected)) in cases.into_iter().enumerate() {
        let agent = stack
            .client::<AgentsService>(&clock)
            .with_key(&key)
            .post(
                "/agents/",
                json!({"type": "a2a", "name": format!("python remote {i}"), "a2a_profile": {"url": server.url("")}}),
            )
            .created()
            .await;
        let response = run(&runs, &agent, message).stream().await;
        assert_eq!(response.status(), 200, "{case}");
        let events = read_events(response.into_body()).await;
        assert_eq!(names(&events), expected, "{case}: {events:?}\n{}", server.log());
        let last = &events.last().unwrap().1;
        let run = latest_run(&stack, &clock, &key, &agent).await;
        if expected.last() == Some(&"done") {
            let deltas: Vec<&str> =
                events[1..events.len() - 1].iter().map(|(_, data)| data["delta"].as_str().unwrap()).collect();
            assert_eq!(deltas, ["You said: ", "Say hello"], "{case}");
            assert_eq!(last["output"], "You said: Say hello", "{case}");
            assert_eq!(
                (run["status"].as_str(), run["output"].as_str()),
                (Some("success"), Some("You said: Say hello"))
            );
        } else {
            assert_eq!(
                (last["failure_reason"].as_str(), last["message"].as_str()),
                (Some("error"), Some("the remote task ended failed: quota exceeded")),
                "{case}"
            );
            assert_eq!((run["status"].as_str(), run["failure_reason"].as_str()), (Some("failed"), Some("error")));
        }
    }
}

/// A turn of text and a tool call as a server may stream it: a role chunk with empty content,
/// a `null` content, the call's arguments in three pieces.
fn text_then_tool_call() -> ModelReply {
    let mut pieces = vec![
        chunk(json!({"role": "assistant", "content": ""})),
        chunk(json!({"content": null})),
        chunk(json!({"content": "Let me "})),
        chunk(json!({"content": "check."})),
        chunk(json!({"tool_calls": [{"index": 0, "id": "call_9", "type": "function",
            "function": {"name": "forecast", "arguments": ""}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ci"}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "ty\": \"Oslo\"}"}}]})),
    ];
    pieces.extend(finish("tool_calls", 31, 12));
    ModelReply::Stream(pieces.into_iter().map(|piece| (Duration::ZERO, piece)).collect())
}

#[tokio::test]
async fn openai_s_python_client_reads_the_scripted_model_server_as_our_provider_does() {
    let replies = vec![
        text_reply("It will rain in Oslo."),
        tool_calls_reply(&[
            ("call_1", "forecast", json!({"city": "Oslo"})),
            ("call_2", "alerts", json!({"city": "Bergen", "days": 2})),
        ]),
        text_then_tool_call(),
        text_reply("Rain, and no alerts."),
    ];
    let tools = vec![ToolSpec {
        name: "forecast".into(),
        description: "Forecast for a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    }];
    let first =
        TurnRequest { system: Some("Be brief.".into()), messages: vec![Message::user("Oslo?")], tools, deadline: None };
    // The last request carries a turn of tool calls and their results, as a run's second turn does.
    let call = |id: &str, city: &str| ToolCall {
        id: id.into(),
        name: "forecast".into(),
        arguments: Map::from_iter([("city".to_owned(), json!(city))]),
    };
    let mut follow_up = first.clone();
    follow_up.messages.extend([
        Message::Assistant { text: String::new(), tool_calls: vec![call("call_1", "Oslo"), call("call_2", "Bergen")] },
        Message::Tool { call_id: "call_1".into(), name: "forecast".into(), content: "Rain".into() },
        Message::Tool { call_id: "call_2".into(), name: "forecast".into(), content: "Error: no data".into() },
    ]);
    let requests = [&first, &first, &first, &follow_up];

    // Our provider reads each scripted reply...
    let ours = ModelServer::start(replies.clone()).await;
    let provider = ChatCompletions {
        client: loopback_client(),
        url: format!("{}/chat/completions", ours.base_url()),
        api_key: Some("sk-interop".into()),
        key_header: KeyHeader::Bearer,
        model: "gpt-test".into(),
        parameters: Map::from_iter([("temperature".to_owned(), json!(0))]),
        silence: agent_runtime::providers::SilenceLimits::default(),
    };
    let mut read = Vec::new();
    for request in requests {
        let mut deltas = Vec::new();
        let turn = provider.turn(request, &mut |delta| deltas.push(delta.to_owned())).await.unwrap();
        read.push((deltas, turn));
    }
    // ...and OpenAI's client sends the same requests and reads the same replies.
    let theirs = ModelServer::start(replies).await;
    let sent = ours.requests.lock().unwrap().clone();
    let job = json!({"base_url": theirs.base_url(), "requests": sent});
    let output = run_script("openai_stream.py", &[], &job.to_string()).await;
    let official: Vec<Value> = serde_json::from_str(&output).unwrap();
    assert_eq!(official.len(), read.len());
    for (i, (reply, (deltas, turn))) in official.iter().zip(&read).enumerate() {
        assert_eq!(reply["request_errors"], json!([]), "request {i} is not a valid Chat Completions request");
        assert_eq!(reply["chunk_errors"], json!([]), "reply {i} has chunks the client's types reject");
        assert_eq!(reply["deltas"], json!(deltas), "reply {i}");
        assert_eq!(reply["text"], json!(turn.text), "reply {i}");
        let calls: Vec<Value> = turn
            .tool_calls
            .iter()
            .map(|call| json!({"id": call.id, "name": call.name, "arguments": call.arguments}))
            .collect();
        assert_eq!(reply["tool_calls"], json!(calls), "reply {i}");
        assert_eq!(
            reply["usage"],
            json!({"input_tokens": turn.usage.input_tokens, "output_tokens": turn.usage.output_tokens}),
            "reply {i}"
        );
    }
    assert_eq!(official[1]["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(official[2]["text"], "Let me check.");
    assert_eq!(official[1]["finish_reasons"], json!(["tool_calls"]));
    // The official client sent what our provider sends.
    assert_eq!(*theirs.requests.lock().unwrap(), sent);
}

/// Events as boto3 presents them: `{event_type: payload}` each.
fn as_boto3_reads(events: &[(String, Value)]) -> Value {
    events.iter().map(|(event_type, payload)| json!({event_type.as_str(): payload})).collect()
}

#[tokio::test]
async fn boto3_reads_the_bedrock_stand_ins_frames_and_errors() {
    let text = text_turn(&["It will ", "rain in Oslo."], "end_turn", usage(3, 9, 1200, 40));
    let tool_use = tool_use_turn(
        Some("Let me check."),
        "tooluse_7Kq",
        "forecast",
        &["{\"ci", "ty\": \"Oslo\"}"],
        usage(20, 8, 0, 0),
    );
    let interrupted = vec![
        ("messageStart".to_owned(), json!({"role": "assistant"})),
        ("contentBlockDelta".to_owned(), json!({"contentBlockIndex": 0, "delta": {"text": "Par"}})),
    ];
    let server = BedrockServer::start(vec![
        BedrockReply::Events(text.clone()),
        BedrockReply::Events(tool_use.clone()),
        BedrockReply::EventsThenException {
            events: interrupted.clone(),
            exception_type: "modelStreamErrorException".into(),
            message: "The model stopped answering.".into(),
        },
        BedrockReply::Error {
            status: 429,
            code: "ThrottlingException".into(),
            message: "Too many requests, please wait before trying again.".into(),
        },
        BedrockReply::Error {
            status: 403,
            code: "AccessDeniedException".into(),
            message: "You don't have access to the model with the specified model ID.".into(),
        },
    ])
    .await;
    let profile =
        "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0";
    let haiku = "anthropic.claude-3-5-haiku-20241022-v1:0";
    let oslo = json!([{"role": "user", "content": [{"text": "Weather in Oslo?"}]}]);
    let tools = json!({"tools": [{"toolSpec": {"name": "forecast", "description": "Forecast for a city",
        "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}}]});
    let requests = vec![
        json!({"modelId": profile, "messages": oslo, "system": [{"text": "Be brief."}],
            "inferenceConfig": {"maxTokens": 256, "temperature": 0}}),
        json!({"modelId": haiku, "messages": oslo, "toolConfig": tools}),
        json!({"modelId": haiku, "messages": oslo}),
        json!({"modelId": profile, "messages": oslo}),
        json!({"modelId": haiku, "messages": oslo}),
    ];
    let job = json!({"endpoint_url": server.url(), "region": "us-west-2", "requests": requests});
    let output = run_script("bedrock_converse.py", &[], &job.to_string()).await;
    let read: Vec<Value> = serde_json::from_str(&output).unwrap();

    // boto3 read exactly the scripted events, each by its `:event-type`...
    assert_eq!(read[0], json!({"status": 200, "events": as_boto3_reads(&text)}));
    assert_eq!(read[1], json!({"status": 200, "events": as_boto3_reads(&tool_use)}));
    assert_eq!(read[0]["events"][5]["metadata"]["usage"]["cacheReadInputTokens"], 1200);
    assert_eq!(read[1]["events"][3]["contentBlockStart"]["start"]["toolUse"]["name"], "forecast");
    // ...an exception frame as the `EventStreamError` ending the stream, after what came before...
    assert_eq!(
        read[2],
        json!({"status": 200, "events": as_boto3_reads(&interrupted),
            "stream_error": {"code": "modelStreamErrorException", "message": "The model stopped answering."}})
    );
    // ...and the errors before a stream as `ClientError`s named by `x-amzn-errortype`.
    assert_eq!(
        read[3],
        json!({"error": {"code": "ThrottlingException", "status": 429,
            "message": "Too many requests, please wait before trying again."}})
    );
    assert_eq!(
        read[4],
        json!({"error": {"code": "AccessDeniedException", "status": 403,
            "message": "You don't have access to the model with the specified model ID."}})
    );
    assert_eq!(read.len(), 5);

    // The stand-in recorded what boto3 sent: the model id as a percent-encoded path label, the
    // other parameters as the JSON body, a SigV4 signature for the `bedrock` service.
    let received = server.requests.lock().unwrap().clone();
    assert_eq!(received.len(), 5);
    let profile_path = "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F\
        us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream";
    assert_eq!((received[0].method.as_str(), received[0].path.as_str()), ("POST", profile_path));
    assert_eq!(received[1].path, "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream");
    for (request, sent) in received.iter().zip(&job["requests"].as_array().unwrap()[..]) {
        assert_eq!(request.model_id, sent["modelId"].as_str().unwrap());
        let mut body = sent.clone();
        body.as_object_mut().unwrap().remove("modelId");
        assert_eq!(request.body, body);
        assert_eq!(request.headers["content-type"], "application/json");
        assert_eq!(request.headers["x-amz-security-token"], "stand-in-session-token");
        assert_eq!(request.headers["amz-sdk-request"], "attempt=1; max=1");
        let date = &request.headers["x-amz-date"][..8];
        let authorization = &request.headers["authorization"];
        let scope = format!("AWS4-HMAC-SHA256 Credential=AKIDSTANDIN/{date}/us-west-2/bedrock/aws4_request, ");
        assert!(authorization.starts_with(&scope), "{authorization}");
        assert!(authorization.contains("SignedHeaders=") && authorization.contains("Signature="), "{authorization}");
    }
}

/// One HTTP/1.1 exchange with `server` (`connection: close`): the status line, the body's chunks
/// as sent (chunked transfer encoding), and whether the response ended, read until the server
/// closes the connection or is silent for half a second.
async fn exchange(server: &BedrockServer, method: &str, path: &str) -> (String, Vec<Vec<u8>>, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = server.url().trim_start_matches("http://").to_owned();
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request =
        format!("{method} {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{{}}");
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = [0; 4096];
    let mut closed = false;
    while let Ok(Ok(read)) = tokio::time::timeout(Duration::from_millis(500), socket.read(&mut buffer)).await {
        closed = read == 0;
        if closed {
            break;
        }
        received.extend_from_slice(&buffer[..read]);
    }
    let end = received.windows(4).position(|window| window == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(received[..end].to_vec()).unwrap();
    let mut body = &received[end + 4..];
    let mut chunks = Vec::new();
    if head.to_lowercase().contains("transfer-encoding: chunked") {
        while let Some(line) = body.windows(2).position(|window| window == b"\r\n") {
            let size = usize::from_str_radix(std::str::from_utf8(&body[..line]).unwrap(), 16).unwrap();
            if size == 0 || body.len() < line + 2 + size {
                break;
            }
            chunks.push(body[line + 2..line + 2 + size].to_vec());
            body = &body[line + 4 + size..];
        }
    } else {
        chunks.push(body.to_vec());
    }
    (head.lines().next().unwrap().to_owned(), chunks, closed)
}

#[tokio::test]
async fn the_bedrock_stand_in_writes_one_frame_per_chunk_and_refuses_other_operations() {
    use aws_smithy_eventstream::frame::read_message_from;
    let events = text_turn(&["Hi"], "end_turn", usage(1, 1, 0, 0));
    let server = BedrockServer::start(vec![
        BedrockReply::EventsThenException {
            events: events.clone(),
            exception_type: "throttlingException".into(),
            message: "Slow down.".into(),
        },
        BedrockReply::EventsThenSilence(events[..2].to_vec()),
    ])
    .await;

    // Each chunk is one whole frame, the exception last; then the body ends.
    let (status, chunks, ended) = exchange(&server, "POST", "/model/m%3A0/converse-stream").await;
    assert_eq!((status.as_str(), ended), ("HTTP/1.1 200 OK", true));
    // A frame's prelude starts with its whole length.
    assert!(chunks.iter().all(|chunk| u32::from_be_bytes(chunk[..4].try_into().unwrap()) as usize == chunk.len()));
    let frames: Vec<_> = chunks.iter().map(|chunk| read_message_from(&chunk[..]).unwrap()).collect();
    let header = |frame: &aws_smithy_types::event_stream::Message, name: &str| {
        let header = frame.headers().iter().find(|header| header.name().as_str() == name).unwrap();
        header.value().as_string().unwrap().as_str().to_owned()
    };
    let types: Vec<String> = frames.iter().map(|frame| header(frame, ":event-type")).take(events.len()).collect();
    assert_eq!(types, events.iter().map(|(event_type, _)| event_type.clone()).collect::<Vec<_>>());
    let exception = frames.last().unwrap();
    assert_eq!(frames.len(), events.len() + 1);
    assert_eq!(
        (header(exception, ":message-type"), header(exception, ":exception-type")),
        ("exception".to_owned(), "throttlingException".to_owned())
    );
    assert_eq!(serde_json::from_slice::<Value>(exception.payload()).unwrap(), json!({"message": "Slow down."}));

    // The silent stream sends its frames and then nothing, without ending.
    let (_, chunks, ended) = exchange(&server, "POST", "/model/m/converse-stream").await;
    assert_eq!((chunks.len(), ended), (2, false));
    // Another operation (or method) is unknown, as on Bedrock; the script was not consumed.
    let (status, body, _) = exchange(&server, "POST", "/model/m/invoke").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    assert_eq!(
        serde_json::from_slice::<Value>(&body[0]).unwrap(),
        json!({"message": "no operation at /model/m/invoke"})
    );
    let (status, ..) = exchange(&server, "GET", "/model/m/converse-stream").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, ..) = exchange(&server, "POST", "/model/m/converse-stream").await;
    assert_eq!(status, "HTTP/1.1 500 Internal Server Error");
    let models: Vec<String> = server.requests.lock().unwrap().iter().map(|r| r.model_id.clone()).collect();
    assert_eq!(models, ["m:0", "m", "", "", "m"]);
}

#[tokio::test]
async fn the_documented_python_sse_client_reads_a_run_over_http() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let model = ModelServer::start(vec![text_reply("Rain in Oslo today.")]).await;
    let agent = config_agent(&stack, &clock, &key, &model, json!({})).await;

    // The dev server, as `make dev` runs it (loopback allowed for the model server).
    let template = integration_tests::local_template();
    let router =
        dev_server::Router::from_template(&template, &stack.sdk, &stack.prefix, dev_server::BACKEND_API).unwrap();
    let served = integration_tests::ServedApi::start(router).await;

    let output = run_script("sse_run.py", &[&served.base_url(), &agent, &key, "Weather in Oslo?"], "").await;
    served.stop().await;
    let (printed, events) = output.split_once("\n--- events\n").expect("the script's two parts");
    let events: Vec<Value> = events.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let names: Vec<&str> = events.iter().map(|event| event["event"].as_str().unwrap()).collect();
    assert_eq!(names, ["metadata", "message", "message", "message", "message", "done"]);
    let ids: Vec<&str> = events.iter().map(|event| event["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["1", "2", "3", "4", "5", "6"]);
    assert_eq!(events[0]["data"]["agent_id"], agent.as_str());
    let done = &events[5]["data"];
    assert_eq!((done["status"].as_str(), done["output"].as_str()), (Some("success"), Some("Rain in Oslo today.")));
    // What the documented loop prints: the deltas, then the final event's data.
    let (text, last) = printed.split_once('\n').unwrap();
    assert_eq!(text, "Rain in Oslo today.");
    assert!(last.contains("'status': 'success'"), "{printed}");
}

/// Our OTLP export, every attribute type the platform writes, decoded by OpenTelemetry's own
/// protobuf definitions (PyPI `opentelemetry-proto`, `tests/interop/otlp_decode.py`).
#[tokio::test]
async fn an_otlp_export_parses_with_opentelemetrys_own_protobuf_definitions() {
    use base64::Engine as _;
    use telemetry::{Kind, Recorder, Span, SpanContext, SpanId, TraceId};
    let recorder = Recorder::default();
    let context = SpanContext { trace_id: TraceId::random(), span_id: SpanId::random() };
    let caller = SpanId::random();
    let mut root = Span::root(&recorder, context, Some(caller), "invoke_agent Main", Kind::Internal, false);
    root.set("gen_ai.operation.name", "invoke_agent");
    root.set("gen_ai.usage.input_tokens", 1234_u64);
    root.set("gen_ai.request.stream", true);
    root.set("gen_ai.response.time_to_first_chunk", 0.125);
    root.set("gen_ai.response.finish_reasons", vec!["tool_call".to_owned(), "stop".to_owned()]);
    root.set("agent_platform.note", "ünïcode ✓");
    root.run(async {
        Span::start("execute_tool lookup", Kind::Client).fail("tool_error", "no such row");
    })
    .await;
    root.end();
    let (spans, _) = recorder.take();
    let resource = vec![("service.name".to_owned(), telemetry::Value::from("runner"))];
    let body = telemetry::otlp::encode_export_request(&resource, &spans);
    let decoded: Value = serde_json::from_str(
        &run_script("otlp_decode.py", &[], &base64::engine::general_purpose::STANDARD.encode(&body)).await,
    )
    .unwrap();
    assert_eq!(decoded["resource"], json!({"service.name": "runner"}));
    let scope = &decoded["scopes"][0];
    assert_eq!(
        (&scope["name"], &scope["schema_url"]),
        (&json!("agent-platform"), &json!(telemetry::genai::SCHEMA_URL))
    );
    let [tool, main] = scope["spans"].as_array().unwrap().as_slice() else { panic!("{scope}") };
    assert_eq!(main["trace_id"], context.trace_id.to_string());
    assert_eq!(main["span_id"], context.span_id.to_string());
    assert_eq!(main["parent_span_id"], caller.to_string());
    assert_eq!(
        (&main["kind"], &main["status"], &main["flags"]),
        (&json!("SPAN_KIND_INTERNAL"), &json!("STATUS_CODE_UNSET"), &json!(0x301)),
        "sampled, and its parent (the caller's) remote"
    );
    assert_eq!(
        main["attributes"],
        json!({"gen_ai.operation.name": "invoke_agent", "gen_ai.usage.input_tokens": 1234, "gen_ai.request.stream": true,
            "gen_ai.response.time_to_first_chunk": 0.125, "gen_ai.response.finish_reasons": ["tool_call", "stop"],
            "agent_platform.note": "ünïcode ✓"})
    );
    assert!(main["end"].as_u64() >= main["start"].as_u64());
    assert_eq!(tool["parent_span_id"], context.span_id.to_string());
    assert_eq!(tool["flags"], json!(0x101), "its parent in this process");
    assert_eq!((&tool["kind"], &tool["status"]), (&json!("SPAN_KIND_CLIENT"), &json!("STATUS_CODE_ERROR")));
    assert_eq!(
        (&tool["status_message"], &tool["attributes"]["error.type"]),
        (&json!("tool_error"), &json!("tool_error"))
    );
}
