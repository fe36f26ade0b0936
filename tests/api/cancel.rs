//! A cancel that really stops (issue 11): recorded by another process while the run waits on a
//! tool, a sub-agent or a remote A2A agent, it ends the run `failed` / `cancelled` and what the
//! run was waiting on sees its connection closed; a remote A2A task is cancelled with the
//! protocol's own call (`tasks/cancel` in 0.3, `CancelTask` in 1.0).
//!
//! Nothing here waits on the clock: each step waits for something the servers observe (a
//! request arriving, a connection closing), with `HANG_GUARD` only so a broken build fails
//! instead of hanging.

use agent_runtime::lifecycle::{RunLifecycle, StartRun};
use agent_runtime::runs::{RunInput, RunOrigin, RunStatus, RunType};
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame};
use integration_tests::local_server::{Handler, LocalServer, ResponseBody, respond};
use integration_tests::model_server::{ModelServer, chunk, text_reply, tool_calls_reply};
use integration_tests::{TestClock, TestStack};
use platform_api::{AgentsService, ToolsService};
use platform_data::ids::RunId;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use uuid::Uuid;

/// Only a guard against a test hanging forever: every wait ends on an observed event long before.
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn within<T>(what: &str, wait: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG_GUARD, wait).await.unwrap_or_else(|_| panic!("{what} never happened"))
}

/// Reports on its channel when it is dropped: held by a server's pending handler or response
/// body, it tells the test that the server let go of the exchange (the client closed the
/// connection).
struct DropSignal(mpsc::UnboundedSender<()>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// A `200 text/event-stream` response that writes `pieces` and then never ends, holding `held`
/// until the server drops it.
fn endless_stream(pieces: Vec<String>, held: DropSignal) -> hyper::Response<ResponseBody> {
    let frames = futures_util::stream::iter(pieces)
        .map(|piece| Ok::<_, Infallible>(Frame::data(Bytes::from(piece))))
        .chain(futures_util::stream::unfold(held, |held| async move {
            std::future::pending::<()>().await;
            Some((Ok(Frame::data(Bytes::new())), held))
        }));
    hyper::Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(BodyExt::boxed(StreamBody::new(frames)))
        .expect("valid response")
}

/// A server that takes every request and never answers: `arrived` gets each request's JSON
/// body, `closed` a message each time a held request is let go (its connection closed).
struct HoldingServer {
    server: LocalServer,
    arrived: mpsc::UnboundedReceiver<Value>,
    closed: mpsc::UnboundedReceiver<()>,
}

impl HoldingServer {
    async fn start() -> Self {
        let (arrived_tx, arrived) = mpsc::unbounded_channel();
        let (closed_tx, closed) = mpsc::unbounded_channel();
        let handler: Handler = Arc::new(move |request| {
            let (arrived, held) = (arrived_tx.clone(), DropSignal(closed_tx.clone()));
            Box::pin(async move {
                let _held = held;
                let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                let _ = arrived.send(serde_json::from_slice(&body).unwrap_or(Value::Null));
                std::future::pending::<hyper::Response<ResponseBody>>().await
            })
        });
        Self { server: LocalServer::start(handler).await, arrived, closed }
    }
}

/// A language model whose stream starts an answer ("Thinking") and then hangs: `streaming`
/// gets a message as the first chunk goes out, `closed` once the stream is let go.
struct HangingModel {
    server: LocalServer,
    streaming: mpsc::UnboundedReceiver<()>,
    closed: mpsc::UnboundedReceiver<()>,
}

impl HangingModel {
    async fn start() -> Self {
        let (streaming_tx, streaming) = mpsc::unbounded_channel();
        let (closed_tx, closed) = mpsc::unbounded_channel();
        let handler: Handler = Arc::new(move |request| {
            let (streaming, held) = (streaming_tx.clone(), DropSignal(closed_tx.clone()));
            Box::pin(async move {
                let _ = request.into_body().collect().await;
                // The first chunk goes out; then the stream holds `held` and never goes on.
                let first = Some(chunk(json!({"content": "Thinking"})));
                let frames =
                    futures_util::stream::unfold((first, held, streaming), |(first, held, streaming)| async move {
                        if let Some(first) = first {
                            let _ = streaming.send(());
                            return Some((
                                Ok::<_, Infallible>(Frame::data(Bytes::from(first))),
                                (None, held, streaming),
                            ));
                        }
                        std::future::pending::<()>().await;
                        None
                    });
                hyper::Response::builder()
                    .status(200)
                    .header("content-type", "text/event-stream")
                    .body(BodyExt::boxed(StreamBody::new(frames)))
                    .expect("valid response")
            })
        });
        Self { server: LocalServer::start(handler).await, streaming, closed }
    }
}

/// The A2A protocol a scripted remote agent speaks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum A2aVersion {
    V0_3,
    V1_0,
}

/// A JSON-RPC call an A2A agent received, with its `A2A-Version` header.
#[derive(Debug)]
struct A2aCall {
    method: String,
    params: Value,
    version_header: Option<String>,
}

/// A remote A2A agent, streaming. Its task `task-{n}` (n counts the messages) answers a message
/// `finish` to completion; any other message gets the task, an artifact "Partial" and then a
/// stream that never ends (the task is working). It answers the cancel of a task with the task
/// canceled. `calls` gets every JSON-RPC call; `closed` a message when a held stream is let go.
struct RemoteAgent {
    server: LocalServer,
    calls: mpsc::UnboundedReceiver<A2aCall>,
    closed: mpsc::UnboundedReceiver<()>,
}

impl RemoteAgent {
    async fn start(version: A2aVersion) -> Self {
        let (calls_tx, calls) = mpsc::unbounded_channel();
        let (closed_tx, closed) = mpsc::unbounded_channel();
        let tasks = Arc::new(AtomicUsize::new(0));
        let handler: Handler = Arc::new(move |request| {
            let (calls, closed, tasks) = (calls_tx.clone(), closed_tx.clone(), Arc::clone(&tasks));
            Box::pin(async move {
                let host = request.headers().get("host").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                if request.method() == hyper::Method::GET && request.uri().path() == "/.well-known/agent-card.json" {
                    let endpoint = format!("http://{host}/a2a");
                    let card = match version {
                        A2aVersion::V0_3 => json!({"name": "Remote", "url": endpoint, "version": "1.0",
                            "protocolVersion": "0.3.0", "capabilities": {"streaming": true}, "skills": []}),
                        A2aVersion::V1_0 => json!({"name": "Remote", "version": "1.0",
                            "supportedInterfaces": [{"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                            "capabilities": {"streaming": true}, "skills": []}),
                    };
                    return respond(200, "application/json", card.to_string());
                }
                if request.method() != hyper::Method::POST || request.uri().path() != "/a2a" {
                    return respond(404, "text/plain", "not found");
                }
                let version_header =
                    request.headers().get("a2a-version").and_then(|v| v.to_str().ok()).map(str::to_owned);
                let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                let call: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let id = call["id"].clone();
                let method = call["method"].as_str().unwrap_or_default().to_owned();
                let params = call["params"].clone();
                let _ = calls.send(A2aCall { method: method.clone(), params: params.clone(), version_header });
                let rpc = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
                match (version, method.as_str()) {
                    (A2aVersion::V0_3, "message/stream") | (A2aVersion::V1_0, "SendStreamingMessage") => {
                        let task_id = format!("task-{}", tasks.fetch_add(1, Ordering::SeqCst) + 1);
                        let text = params.pointer("/message/parts/0/text").and_then(Value::as_str).unwrap_or("");
                        let finish = text == "finish";
                        let results = match version {
                            A2aVersion::V0_3 => vec![
                                json!({"kind": "task", "id": task_id, "contextId": "c1", "status": {"state": "submitted"}}),
                                json!({"kind": "artifact-update", "taskId": task_id, "contextId": "c1",
                                    "artifact": {"artifactId": "a1", "parts": [{"kind": "text", "text": "Partial"}]}}),
                                json!({"kind": "status-update", "taskId": task_id, "contextId": "c1",
                                    "status": {"state": "completed"}, "final": true}),
                            ],
                            A2aVersion::V1_0 => vec![
                                json!({"task": {"id": task_id, "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
                                json!({"artifactUpdate": {"taskId": task_id, "contextId": "c1",
                                    "artifact": {"artifactId": "a1", "parts": [{"text": "Partial"}]}}}),
                                json!({"statusUpdate": {"taskId": task_id, "contextId": "c1",
                                    "status": {"state": "TASK_STATE_COMPLETED"}}}),
                            ],
                        };
                        let frames: Vec<String> =
                            results.into_iter().map(|result| format!("data: {}\n\n", rpc(result))).collect();
                        if finish {
                            respond(200, "text/event-stream", frames.concat())
                        } else {
                            // The task is working: the last update never comes.
                            endless_stream(frames[..2].to_vec(), DropSignal(closed))
                        }
                    }
                    (A2aVersion::V0_3, "tasks/cancel") | (A2aVersion::V1_0, "CancelTask") => {
                        let task_id = params["id"].clone();
                        let task = match version {
                            A2aVersion::V0_3 => {
                                json!({"kind": "task", "id": task_id, "contextId": "c1", "status": {"state": "canceled"}})
                            }
                            A2aVersion::V1_0 => {
                                json!({"id": task_id, "contextId": "c1", "status": {"state": "TASK_STATE_CANCELED"}})
                            }
                        };
                        respond(200, "application/json", rpc(task).to_string())
                    }
                    _ => respond(
                        200,
                        "application/json",
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}})
                            .to_string(),
                    ),
                }
            })
        });
        Self { server: LocalServer::start(handler).await, calls, closed }
    }
}

/// An account: its id and an API key.
async fn account(stack: &TestStack) -> (Uuid, String) {
    let account = Uuid::new_v4();
    (account, stack.api_key(account).await)
}

/// Creates an agent through the agents function and reads it back as runs take it.
async fn stored_agent(
    stack: &TestStack,
    clock: &TestClock,
    account: Uuid,
    key: &str,
    body: Value,
) -> platform_data::agents::Agent {
    let id = stack.client::<AgentsService>(clock).with_key(key).post("/agents/", body).created().await;
    let store = stack.agents();
    store.get(account.into(), id.parse().unwrap()).await.unwrap().unwrap()
}

fn start(message: &str) -> StartRun {
    StartRun {
        origin: RunOrigin {
            run_type: RunType::Api,
            input: RunInput { message: message.into(), files: Vec::new() },
            schedule_id: None,
            session_id: None,
            parent: None,
        },
        request: agent_runtime::resolve::RunRequest { message: message.into(), ..Default::default() },
    }
}

/// The functions' run lifecycle over the stack's tables, on the system clock; a second one
/// plays another process.
fn new_runner(stack: &TestStack) -> RunLifecycle {
    stack.service(&TestClock::system())
}

/// An SSE frame's event name and data (`None` for a keep-alive).
fn parse_frame(frame: &str) -> Option<(String, Value)> {
    let event = frame.lines().find_map(|line| line.strip_prefix("event: "))?;
    let data = frame.lines().find_map(|line| line.strip_prefix("data: "))?;
    Some((event.to_owned(), serde_json::from_str(data).unwrap()))
}

/// The run's next event, keep-alives skipped; `None` once the stream has ended.
async fn next_event(frames: &mut mpsc::UnboundedReceiver<String>) -> Option<(String, Value)> {
    loop {
        let frame = frames.recv().await?;
        if let Some(event) = parse_frame(&frame) {
            return Some(event);
        }
    }
}

/// The run's events until its stream ends.
async fn rest_of(frames: &mut mpsc::UnboundedReceiver<String>) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    while let Some(event) = next_event(frames).await {
        events.push(event);
    }
    events
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

/// How a run ended: its status and failure reason.
type Ending = (RunStatus, Option<String>);

/// Waits for the run's end as its process recorded it.
async fn finished(handle: agent_runtime::lifecycle::RunHandle) -> Ending {
    let record = within("the run's end", handle.finished).await.unwrap();
    (record.status, record.failure_reason.map(|r| r.as_str().to_owned()))
}

/// The stream's last event is the cancel's `error`, and the run ended, and is stored, `failed` /
/// `cancelled`.
async fn assert_cancelled(stack: &TestStack, events: &[(String, Value)], run_id: RunId, ending: Ending) {
    let (name, data) = events.last().expect("events");
    assert_eq!(
        (name.as_str(), data["failure_reason"].as_str(), data["message"].as_str()),
        ("error", Some("cancelled"), Some("the run was cancelled")),
        "{events:?}"
    );
    assert_eq!(ending, (RunStatus::Failed, Some("cancelled".to_owned())));
    let stored = stack.runs().get(run_id, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.failure_reason.map(|r| r.as_str().to_owned())),
        (RunStatus::Failed, Some("cancelled".to_owned()))
    );
}

#[tokio::test]
async fn a_cancel_mid_tool_call_closes_the_held_request_and_nothing_runs_after_it() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (account, key) = account(&stack).await;
    let mut tool = HoldingServer::start().await;
    let model = ModelServer::start(vec![
        tool_calls_reply(&[("c1", "hold", json!({"job": 7}))]),
        text_reply("This turn must never be asked."),
    ])
    .await;
    let lm = stack.language_model(&clock, &key, "local", &model.base_url()).await;
    let hold = stack.client::<ToolsService>(&clock).with_key(&key).post("/tools", json!({"name": "hold", "type": "http", "description": "Holds", "config": {"url": tool.server.url("/hold")}})).created().await;
    let agent = stored_agent(
        &stack,
        &clock,
        account,
        &key,
        json!({"type": "config", "name": "Holder", "framework": "chainlib", "language_model_id": lm, "tools": [hold]}),
    )
    .await;
    let mut handle = new_runner(&stack).start(agent, start("Hold on")).await.unwrap();
    // The tool's request is being held by its server.
    assert_eq!(within("the tool call", tool.arrived.recv()).await, Some(json!({"job": 7})));
    // Another process asks for the cancel.
    new_runner(&stack).request_cancel(handle.run_id).await.unwrap();
    let events = within("the end of the stream", rest_of(&mut handle.frames)).await;
    assert_eq!(names(&events), ["metadata", "tool_call", "error"]);
    let run_id = handle.run_id;
    assert_cancelled(&stack, &events, run_id, finished(handle).await).await;
    // The tool server saw the connection of the held call close.
    within("the held tool call's connection closing", tool.closed.recv()).await;
    // Nothing after the cancel: no second call, no second model turn.
    assert!(tool.arrived.try_recv().is_err(), "the tool is not called again");
    assert_eq!(model.requests.lock().unwrap().len(), 1, "the model is not asked again");
}

#[tokio::test]
async fn a_cancel_while_a_sub_agent_answers_stops_the_parent_and_closes_the_sub_agents_model_stream() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (account, key) = account(&stack).await;
    let mut sub_model = HangingModel::start().await;
    let model = ModelServer::start(vec![
        tool_calls_reply(&[("c1", "Helper", json!({"message": "Think it over"}))]),
        text_reply("This turn must never be asked."),
    ])
    .await;
    let lm = stack.language_model(&clock, &key, "parent-model", &model.base_url()).await;
    let sub_lm = stack.language_model(&clock, &key, "helper-model", &sub_model.server.url("/v1")).await;
    let helper = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .post(
            "/agents/",
            json!({"type": "config", "name": "Helper", "framework": "chainlib", "language_model_id": sub_lm,
            "description": "Thinks"}),
        )
        .created()
        .await;
    let agent = stored_agent(
        &stack,
        &clock,
        account,
        &key,
        json!({"type": "config", "name": "Lead", "framework": "chainlib", "language_model_id": lm, "agents": [helper]}),
    )
    .await;
    let mut handle = new_runner(&stack).start(agent, start("Delegate")).await.unwrap();
    // The sub-agent's model has begun its answer and hangs there.
    within("the sub-agent's model answering", sub_model.streaming.recv()).await;
    new_runner(&stack).request_cancel(handle.run_id).await.unwrap();
    let events = within("the end of the stream", rest_of(&mut handle.frames)).await;
    assert_eq!(names(&events), ["metadata", "tool_call", "error"]);
    assert_eq!(events[1].1["name"], "Helper");
    let run_id = handle.run_id;
    assert_cancelled(&stack, &events, run_id, finished(handle).await).await;
    // The sub-agent's model stream was let go with the parent's run.
    within("the sub-agent's model stream closing", sub_model.closed.recv()).await;
    assert_eq!(model.requests.lock().unwrap().len(), 1, "the parent's model is not asked again");
}

/// An `a2a` agent's run finishes a first task (no cancel for it), then is cancelled while its
/// second task is working: the remote gets the protocol's cancel of that task.
async fn cancelling_a_remote_run_cancels_its_remote_task(version: A2aVersion) {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (account, key) = account(&stack).await;
    let mut remote = RemoteAgent::start(version).await;
    let agent = stored_agent(
        &stack,
        &clock,
        account,
        &key,
        json!({"type": "a2a", "name": "Remote", "a2a_profile": {"url": remote.server.url("")}}),
    )
    .await;
    let (send, cancel) = match version {
        A2aVersion::V0_3 => ("message/stream", "tasks/cancel"),
        A2aVersion::V1_0 => ("SendStreamingMessage", "CancelTask"),
    };

    // A task that completes is left alone.
    let mut done = new_runner(&stack).start(agent.clone(), start("finish")).await.unwrap();
    let events = within("the first run", rest_of(&mut done.frames)).await;
    assert_eq!(names(&events), ["metadata", "message", "done"], "{events:?}");
    assert_eq!(finished(done).await, (RunStatus::Success, None));

    let mut handle = new_runner(&stack).start(agent, start("Hold on")).await.unwrap();
    let first = within("the metadata", next_event(&mut handle.frames)).await.unwrap();
    assert_eq!(first.0, "metadata");
    // The artifact came after the task (and its id): the run knows which task is working.
    let partial = within("the partial answer", next_event(&mut handle.frames)).await.unwrap();
    assert_eq!(partial, ("message".to_owned(), json!({"delta": "Partial"})));
    new_runner(&stack).request_cancel(handle.run_id).await.unwrap();
    let events = within("the end of the stream", rest_of(&mut handle.frames)).await;
    assert_eq!(names(&events), ["error"]);
    let run_id = handle.run_id;
    assert_cancelled(&stack, &events, run_id, finished(handle).await).await;

    // The remote got: the first message, the second, then the cancel of the second task only.
    let mut calls = Vec::new();
    while calls.len() < 3 {
        calls.push(within("the remote's calls", remote.calls.recv()).await.unwrap());
    }
    let methods: Vec<&str> = calls.iter().map(|call| call.method.as_str()).collect();
    assert_eq!(methods, [send, send, cancel]);
    assert_eq!(calls[2].params, json!({"id": "task-2"}));
    let version_header = match version {
        A2aVersion::V0_3 => None,
        A2aVersion::V1_0 => Some("1.0"),
    };
    assert!(calls.iter().all(|call| call.version_header.as_deref() == version_header), "{calls:?}");
    // The working task's stream was let go too.
    within("the remote stream closing", remote.closed.recv()).await;
}

#[tokio::test]
async fn cancelling_an_a2a_0_3_run_sends_tasks_cancel_for_its_working_task() {
    cancelling_a_remote_run_cancels_its_remote_task(A2aVersion::V0_3).await;
}

#[tokio::test]
async fn cancelling_an_a2a_1_0_run_sends_cancel_task_for_its_working_task() {
    cancelling_a_remote_run_cancels_its_remote_task(A2aVersion::V1_0).await;
}

#[tokio::test]
async fn a_cancel_abandons_a_flow_run_and_closes_its_request() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (account, key) = account(&stack).await;
    let mut flows = HoldingServer::start().await;
    aws_sdk_secretsmanager::Client::new(&stack.sdk)
        .put_secret_value()
        .secret_id(stack.setting("FLOW_SERVER_SECRET_ID"))
        .secret_string("flow-key")
        .send()
        .await
        .unwrap();
    let runner = new_runner(&stack.with_settings(&[("FLOW_SERVER_URL", &flows.server.url(""))]));
    let agent = stored_agent(
        &stack,
        &clock,
        account,
        &key,
        json!({"type": "flowtool", "name": "Slow flow", "agent_config": {"flowtool": {"flow_id": "f-slow"}}}),
    )
    .await;
    let mut handle = runner.start(agent, start("Take long")).await.unwrap();
    // The flow server holds the run's request.
    let asked = within("the flow run", flows.arrived.recv()).await.unwrap();
    assert_eq!(asked["input_value"], "Take long");
    new_runner(&stack).request_cancel(handle.run_id).await.unwrap();
    let events = within("the end of the stream", rest_of(&mut handle.frames)).await;
    assert_eq!(names(&events), ["metadata", "error"]);
    let run_id = handle.run_id;
    assert_cancelled(&stack, &events, run_id, finished(handle).await).await;
    within("the flow run's connection closing", flows.closed.recv()).await;
    assert!(flows.arrived.try_recv().is_err(), "the flow is not run again");
}
