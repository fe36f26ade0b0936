//! Cancel from another process, queued runs through SQS on the local AWS endpoint with the worker
//! in-process, runs that span several worker invocations, and a worker that dies mid-run: no
//! model turn or tool call is done twice.

use agent_runtime::events::FailureReason;
use agent_runtime::lifecycle::{Invocation, RunLifecycle, StartRun};
use agent_runtime::queue::{RunQueue, RunWorker};
use agent_runtime::runs::{RunInput, RunOrigin, RunStatus, RunType};
use futures_util::StreamExt;
use integration_tests::local_server::{LocalServer, respond};
use integration_tests::model_server::{ModelServer, gated_hello_world, text_reply, tool_calls_reply};
use integration_tests::{TestClock, TestStack};
use platform_api::{AgentsService, ToolsService};
use platform_data::ids::RunId;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use uuid::Uuid;

/// A tool endpoint counting its calls.
async fn counting_tool() -> (LocalServer, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let server = LocalServer::start(Arc::new(move |_request| {
        let count = counter.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move { respond(200, "application/json", json!({"count": count}).to_string()) })
    }))
    .await;
    (server, calls)
}

/// A config agent on `model` with an `http` tool `count` at `tool_url`.
pub(crate) async fn agent(
    stack: &TestStack,
    clock: &TestClock,
    model: &ModelServer,
    tool_url: Option<String>,
) -> platform_data::agents::Agent {
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let lm = stack.language_model(clock, &key, "local", &model.base_url()).await;
    let mut tools = Vec::new();
    if let Some(url) = tool_url {
        let tool = stack.client::<ToolsService>(clock).with_key(&key).post("/tools", json!({"name": "count", "type": "http", "description": "Counts", "config": {"url": url, "method": "POST"}})).created().await;
        tools.push(tool);
    }
    let agent = stack.client::<AgentsService>(clock).with_key(&key).post("/agents/", json!({"type": "config", "name": "Worker", "framework": "chainlib", "language_model_id": lm, "tools": tools})).created().await;
    let store = platform_data::agents::AgentStore::new(stack.dynamodb.clone(), stack.setting("AGENTS_TABLE"));
    store.get(account.into(), agent.parse().unwrap()).await.unwrap().unwrap()
}

pub(crate) fn start(message: &str, run_type: RunType) -> StartRun {
    StartRun {
        origin: RunOrigin {
            run_type,
            input: RunInput { message: message.into(), files: Vec::new() },
            schedule_id: None,
            session_id: None,
            parent: None,
        },
        request: agent_runtime::resolve::RunRequest { message: message.into(), ..Default::default() },
    }
}

/// The functions' run lifecycle on the system clock.
fn new_runner(stack: &TestStack) -> RunLifecycle {
    stack.service(&TestClock::system())
}

/// An invocation of `owner` with plenty of time; `pause_every_step` makes it pause before every
/// step after its first (a run then takes one invocation per step).
fn invocation(owner: &str, pause_every_step: bool) -> Invocation {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    let step_budget = if pause_every_step { Duration::from_secs(3600) } else { Duration::from_secs(60) };
    Invocation { owner: owner.to_owned(), deadline, step_budget }
}

/// Works the queue as Lambda's event source mapping would until it is empty: returns the number
/// of messages handled.
pub(crate) async fn drain(worker: &RunWorker, queue: &RunQueue, pause_every_step: bool) -> usize {
    let mut handled = 0;
    for round in 0..50 {
        let messages = queue.sqs().receive(Duration::from_secs(0)).await.unwrap();
        if messages.is_empty() {
            return handled;
        }
        let retry = worker.handle_batch(&messages, &invocation(&format!("invocation-{round}"), pause_every_step)).await;
        assert!(retry.is_empty(), "no message fails: {retry:?}");
        for message in &messages {
            queue.sqs().delete(&message.receipt_handle).await.unwrap();
        }
        handled += messages.len();
    }
    panic!("the queue never emptied");
}

/// The run's recorded events through the follower and a real SSE parser: (id, event, data).
async fn followed(stack: &TestStack, run_id: RunId, after: u64) -> Vec<(u64, String, Value)> {
    let frames = agent_runtime::follow::follow(stack.runs(), run_id, after, Arc::new(chrono::Utc::now));
    let body = http_api::streaming::frames_body(frames);
    let mut parsed = sse_stream::SseStream::new(body);
    let mut events = Vec::new();
    while let Some(frame) = parsed.next().await {
        let frame = frame.unwrap();
        if let (Some(id), Some(event), Some(data)) = (frame.id, frame.event, frame.data) {
            events.push((id.parse().unwrap(), event, serde_json::from_str(&data).unwrap()));
        }
    }
    events
}

#[tokio::test]
async fn a_cancel_recorded_by_another_process_stops_a_streaming_run_mid_answer() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let gate = Arc::new(tokio::sync::Notify::new());
    let model = ModelServer::start(vec![gated_hello_world(&gate)]).await;
    let agent = agent(&stack, &clock, &model, None).await;
    let runner = new_runner(&stack);
    let mut handle = runner.start(agent, start("Hi", RunType::Api)).await.unwrap();
    // The first delta arrives; the model then waits for the gate, which never opens.
    let mut seen = String::new();
    while !seen.contains("Hello") {
        seen.push_str(&handle.frames.recv().await.unwrap());
    }
    // Another process (here: a second runner over the same tables) asks for the cancel.
    new_runner(&stack).request_cancel(handle.run_id).await.unwrap();
    let mut rest = String::new();
    while let Some(frame) = handle.frames.recv().await {
        rest.push_str(&frame);
    }
    assert!(rest.contains("event: error") && rest.contains(r#""failure_reason":"cancelled""#), "{rest}");
    let record = handle.finished.await.unwrap();
    assert_eq!((record.status, record.failure_reason.map(|r| r.as_str())), (RunStatus::Failed, Some("cancelled")));
    let stored = stack.runs().get(handle.run_id, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!(stored.error.as_deref(), Some("the run was cancelled"));
    // Cancelling again is harmless; the run stays as it ended.
    new_runner(&stack).request_cancel(handle.run_id).await.unwrap();
    let again = stack.runs().get(handle.run_id, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!(again.status, RunStatus::Failed);
    gate.notify_one();
}

#[tokio::test]
async fn a_queued_run_is_executed_by_the_worker_and_followed_from_its_recorded_events() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Queued hello.")]).await;
    let agent = agent(&stack, &clock, &model, None).await;
    let runner = new_runner(&stack);
    let queue = stack.run_queue();
    let record = runner.enqueue(&agent, &start("Hi", RunType::Queue), &queue).await.unwrap();
    assert_eq!(record.status, RunStatus::Started);
    let worker = stack.service::<RunWorker>(&TestClock::system());
    assert_eq!(drain(&worker, &queue, false).await, 1);
    let stored = stack.runs().get(record.run_id, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.run_type, stored.output.as_deref()),
        (RunStatus::Success, RunType::Queue, Some("Queued hello."))
    );
    let events = followed(&stack, record.run_id, 0).await;
    let names: Vec<&str> = events.iter().map(|(_, name, _)| name.as_str()).collect();
    assert_eq!(names.first(), Some(&"metadata"));
    assert_eq!(names.last(), Some(&"done"));
    assert_eq!(events.iter().map(|(id, ..)| *id).collect::<Vec<_>>(), (1..=events.len() as u64).collect::<Vec<_>>());
    // Resuming after event 2 gives exactly the rest.
    let rest = followed(&stack, record.run_id, 2).await;
    assert_eq!(rest, events[2..].to_vec());
    // A redelivered message of an ended run does nothing.
    queue.enqueue(record.run_id).await.unwrap();
    assert_eq!(drain(&worker, &queue, false).await, 1);
    assert_eq!(model.requests.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_run_spanning_several_invocations_does_each_turn_and_tool_call_once() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (tool, tool_calls) = counting_tool().await;
    let model = ModelServer::start(vec![
        tool_calls_reply(&[("c1", "count", json!({"n": 1}))]),
        tool_calls_reply(&[("c2", "count", json!({"n": 2})), ("c3", "count", json!({"n": 3}))]),
        text_reply("Counted three times."),
    ])
    .await;
    let agent = agent(&stack, &clock, &model, Some(tool.url("/count"))).await;
    let runner = new_runner(&stack);
    let queue = stack.run_queue();
    let record = runner.enqueue(&agent, &start("Count", RunType::Queue), &queue).await.unwrap();
    let worker = stack.service::<RunWorker>(&TestClock::system());
    // One invocation per step: turn, tools, turn, tools, turn.
    assert_eq!(drain(&worker, &queue, true).await, 5);
    let stored = stack.runs().get(record.run_id, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.output.as_deref(), stored.steps),
        (RunStatus::Success, Some("Counted three times."), 3)
    );
    assert_eq!(model.requests.lock().unwrap().len(), 3, "each turn asked once");
    assert_eq!(tool_calls.load(Ordering::SeqCst), 3, "each tool call made once");
    // The last turn saw every tool result.
    let last = model.requests.lock().unwrap()[2]["messages"].clone();
    let results: Vec<&str> =
        last.as_array().unwrap().iter().filter(|m| m["role"] == "tool").filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(results, [r#"{"count":1}"#, r#"{"count":2}"#, r#"{"count":3}"#]);
    // The stream is whole: one metadata, contiguous ids, one done.
    let events = followed(&stack, record.run_id, 0).await;
    assert_eq!(events.iter().filter(|(_, name, _)| name == "metadata").count(), 1);
    assert_eq!(events.iter().filter(|(_, name, _)| name == "tool_result").count(), 3);
    assert_eq!(events.last().unwrap().1, "done");
    assert_eq!(events.iter().map(|(id, ..)| *id).collect::<Vec<_>>(), (1..=events.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_worker_that_dies_mid_run_is_resumed_by_the_redelivery_without_repeating_a_step() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (tool, tool_calls) = counting_tool().await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let model = ModelServer::start(vec![
        tool_calls_reply(&[("c1", "count", json!({}))]),
        // The second turn hangs until the gate opens: the first worker dies there.
        gated_hello_world(&gate),
        text_reply("Resumed."),
    ])
    .await;
    let agent = agent(&stack, &clock, &model, Some(tool.url("/count"))).await;
    // Timed by the test's clock, so the lost invocation's lease can run out without waiting.
    let runner = stack.service::<RunLifecycle>(&clock);
    let queue = stack.run_queue();
    let mut start = start("Count", RunType::Queue);
    start.request.timeout = Some(Duration::from_secs(3600));
    let record = runner.enqueue(&agent, &start, &queue).await.unwrap();
    let worker = stack.service::<RunWorker>(&clock);
    let messages = queue.sqs().receive(Duration::from_secs(0)).await.unwrap();
    assert_eq!(messages.len(), 1);
    let short = invocation("doomed", false);
    let doomed = {
        let worker = worker.clone();
        let messages = messages.clone();
        tokio::spawn(async move { worker.handle_batch(&messages, &short).await })
    };
    // Wait until the second turn is being asked, then kill the invocation.
    while model.requests.lock().unwrap().len() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    doomed.abort();
    assert_eq!(tool_calls.load(Ordering::SeqCst), 1);
    // While the dead invocation's lease holds, a redelivery is told to come back later.
    let retry = worker.handle_batch(&messages, &invocation("early", false)).await;
    assert_eq!(retry.len(), 1, "the lease of the lost invocation still holds");
    // The lost invocation's lease ends with its deadline (10 minutes here).
    clock.advance(11 * 60);
    // The redelivery after the lease: the journal is replayed, the tool not called again.
    let retry = worker.handle_batch(&messages, &invocation("redelivery", false)).await;
    assert!(retry.is_empty());
    let stored = stack.runs().get(record.run_id, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.output.as_deref()), (RunStatus::Success, Some("Resumed.")));
    assert_eq!(tool_calls.load(Ordering::SeqCst), 1, "the tool call is not repeated");
    assert_eq!(model.requests.lock().unwrap().len(), 3, "only the interrupted turn is asked again");
    gate.notify_one();
}

#[tokio::test]
async fn a_message_that_keeps_failing_marks_its_run_failed_on_its_last_delivery() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(Vec::new()).await;
    let agent = agent(&stack, &clock, &model, None).await;
    let record =
        new_runner(&stack).create(&agent, &start("Hi", RunType::Queue), Duration::from_secs(60)).await.unwrap();
    // A worker whose steps table is gone: every attempt fails before the run executes.
    let missing = format!("{}missing-steps", stack.prefix);
    let broken = stack.with_settings(&[("RUN_STEPS_TABLE", &missing)]);
    let worker = broken.service::<RunWorker>(&TestClock::system());
    let message = |count: u32| queues::ReceivedMessage {
        message_id: "m-1".into(),
        receipt_handle: "r-1".into(),
        body: json!({"run_id": record.run_id}).to_string(),
        receive_count: count,
    };
    assert_eq!(worker.handle_batch(&[message(1)], &invocation("w", false)).await, ["m-1"]);
    let retried = stack.runs().get(record.run_id, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!(retried.status, RunStatus::Started, "an early failure is retried, not final");
    assert_eq!(
        worker.handle_batch(&[message(agent_runtime::queue::MAX_RECEIVES)], &invocation("w", false)).await,
        ["m-1"]
    );
    let failed = stack.runs().get(record.run_id, chrono::Utc::now()).await.unwrap().unwrap();
    assert_eq!(
        (failed.status, failed.error.as_deref()),
        (RunStatus::Failed, Some("the run could not be executed after 3 deliveries"))
    );
    let events = followed(&stack, record.run_id, 0).await;
    assert_eq!(events.iter().map(|(_, name, _)| name.as_str()).collect::<Vec<_>>(), ["metadata", "error"]);
    // A malformed message names no run: retried until the queue dead-letters it.
    let malformed = queues::ReceivedMessage { body: "not json".into(), ..message(5) };
    assert_eq!(worker.handle_batch(&[malformed], &invocation("w", false)).await, ["m-1"]);
}

#[tokio::test]
async fn time_in_the_queue_does_not_use_up_the_timeout_and_duration_counts_from_the_pick_up() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Late but whole.")]).await;
    let agent = agent(&stack, &clock, &model, None).await;
    let runner = stack.service::<RunLifecycle>(&clock);
    let queue = stack.run_queue();
    let mut start = start("Hi", RunType::Queue);
    start.request.timeout = Some(Duration::from_secs(60));
    let record = runner.enqueue(&agent, &start, &queue).await.unwrap();
    assert_eq!((record.queued_at(), record.started_at), (clock.now(), None));
    assert_eq!(record.view()["started_at"], Value::Null, "not started while it waits");
    // Ten minutes in the queue, ten times its timeout: a read does not find it lost.
    clock.advance(600);
    let waiting = stack.runs().get(record.run_id, clock.now()).await.unwrap().unwrap();
    assert_eq!(waiting.status, RunStatus::Started);
    let worker = stack.service::<RunWorker>(&clock);
    assert_eq!(drain(&worker, &queue, false).await, 1);
    let stored = stack.runs().get(record.run_id, clock.now()).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.output.as_deref()), (RunStatus::Success, Some("Late but whole.")));
    let started_at = stored.started_at.unwrap();
    assert_eq!(stored.queued_at(), record.queued_at());
    assert_eq!((started_at - stored.queued_at()).num_seconds(), 600, "started when the worker picked it up");
    // The test clock stood still while the run executed: it took no time from its start.
    assert_eq!(stored.duration_ms, Some(0));
    assert_eq!(stored.deadline_at, started_at + chrono::Duration::seconds(60));
    let view = stored.view();
    assert_eq!(view["queued_at"], json!(record.queued_at()));
    assert_eq!(view["started_at"], json!(started_at));
}

#[tokio::test]
async fn a_resumed_run_keeps_the_deadline_of_its_first_pick_up() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (tool, tool_calls) = counting_tool().await;
    let model =
        ModelServer::start(vec![tool_calls_reply(&[("c1", "count", json!({}))]), text_reply("Never asked.")]).await;
    let agent = agent(&stack, &clock, &model, Some(tool.url("/count"))).await;
    let runner = stack.service::<RunLifecycle>(&clock);
    let queue = stack.run_queue();
    let mut start = start("Count", RunType::Queue);
    start.request.timeout = Some(Duration::from_secs(60));
    let record = runner.enqueue(&agent, &start, &queue).await.unwrap();
    let worker = stack.service::<RunWorker>(&clock);
    // The first invocation takes one step (the model turn) and pauses.
    let messages = queue.sqs().receive(Duration::from_secs(0)).await.unwrap();
    assert!(worker.handle_batch(&messages, &invocation("first", true)).await.is_empty());
    queue.sqs().delete(&messages[0].receipt_handle).await.unwrap();
    let paused = stack.runs().get(record.run_id, clock.now()).await.unwrap().unwrap();
    assert_eq!(paused.status, RunStatus::Started);
    // The continuation comes after the timeout from the first pick-up: no fresh timeout.
    clock.advance(61);
    drain(&worker, &queue, true).await;
    let stored = stack.runs().get(record.run_id, clock.now()).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.failure_reason), (RunStatus::Failed, Some(FailureReason::Timeout)));
    assert_eq!(stored.started_at, paused.started_at);
    assert_eq!(tool_calls.load(Ordering::SeqCst), 0);
    assert_eq!(model.requests.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_run_that_waits_past_the_queue_limit_fails_without_running_and_says_so() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Too late.")]).await;
    let agent = agent(&stack, &clock, &model, None).await;
    let stack = stack.with_settings(&[("RUN_MAX_QUEUE_WAIT_SECONDS", "120")]);
    let runner = stack.service::<RunLifecycle>(&clock);
    let queue = stack.run_queue();
    let message = "the run waited in the queue longer than its limit of 120 seconds and did not run";

    // Picked up past the limit: the worker ends it.
    let record = runner.enqueue(&agent, &start("Hi", RunType::Queue), &queue).await.unwrap();
    clock.advance(121);
    let worker = stack.service::<RunWorker>(&clock);
    assert_eq!(drain(&worker, &queue, false).await, 1);
    let stored = stack.runs().get(record.run_id, clock.now()).await.unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.failure_reason, stored.error.as_deref()),
        (RunStatus::Failed, Some(FailureReason::Timeout), Some(message))
    );
    assert_eq!((stored.started_at, stored.duration_ms), (None, None), "it never started");
    assert!(model.requests.lock().unwrap().is_empty(), "the model was never asked");
    let events = followed(&stack, record.run_id, 0).await;
    assert_eq!(events.iter().map(|(_, name, _)| name.as_str()).collect::<Vec<_>>(), ["metadata", "error"]);
    assert_eq!(events[1].2["message"], message);

    // Never picked up (its message lost): a read past the limit and the margin ends it the same way.
    let lost = runner.create(&agent, &start("Hi", RunType::Schedule), Duration::from_secs(60)).await.unwrap();
    clock.advance(120 + agent_runtime::runs::STALE_MARGIN.num_seconds() + 1);
    let read = stack.runs().get(lost.run_id, clock.now()).await.unwrap().unwrap();
    assert_eq!((read.status, read.error.as_deref()), (RunStatus::Failed, Some(message)));
}
