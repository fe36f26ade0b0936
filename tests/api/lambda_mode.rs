//! Lambda mode (`make dev-lambda`): each function's own binary under `cargo lambda watch`, with
//! only its template environment, invoked by the dev server with the proxy events a REST API
//! sends (streamed routes through `response-streaming-invocations`), and its answers read back
//! as API Gateway reads them.

use dev_server::Router;
use dev_server::lambda::{WatchOptions, WatchedFunctions};
use http::Method;
use http_api::Body;
use http_body_util::BodyExt;
use integration_tests::local_server::{Handler, LocalServer, respond};
use integration_tests::model_server::{ModelServer, gated_hello_world, text_reply};
use integration_tests::{TestClock, TestStack, demo_fixture, local_template};
use platform_api::AgentsService;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

/// The workspace, whose binaries `cargo lambda watch` runs.
fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where cargo put the function binaries: beside this test's own `deps/` directory (make test
/// builds them first, with the tests' features).
fn built_binaries() -> PathBuf {
    let executable = std::env::current_exe().expect("the test binary's path");
    executable.ancestors().nth(2).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// `binaries` under `cargo lambda watch`, with the template environment of `stack`.
async fn watch(stack: &TestStack, binaries: &[&str]) -> WatchedFunctions {
    let root = workspace();
    let options = WatchOptions {
        cargo_lambda: root.join(".venv/bin/cargo-lambda"),
        workspace: root.clone(),
        binaries: built_binaries(),
        state_dir: root.join(".local/test-lambda").join(stack.prefix.trim_end_matches('-')),
        local_env: dev_server::lambda::local_aws_environment(),
        instances: 2,
    };
    let template = local_template();
    let watched = WatchedFunctions::start(&template, &stack.prefix, &options, Some(binaries))
        .await
        .unwrap_or_else(|err| panic!("cargo lambda watch: {err}"));
    dev_server::triggers::warm_up(&watched.invoker, &template).await;
    watched
}

/// A request as the dev server hands it on: an absolute URI on its own address.
fn request(method: Method, path_and_query: &str, headers: &[(&str, &str)], body: Body) -> http_api::Request {
    let mut builder = http::Request::builder().method(method).uri(format!("http://127.0.0.1:3000{path_and_query}"));
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(body).unwrap()
}

fn json_body(response: &http_api::Response<Body>) -> Value {
    serde_json::from_slice(response.body().as_ref()).unwrap_or_else(|_| panic!("{:?}", response.body()))
}

#[tokio::test]
async fn the_function_binaries_answer_rest_api_events_and_stream_their_runs() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let (client_id, secret) = stack.create_app(&[1, 2]).await;
    let clock = TestClock::system();
    let gate = Arc::new(tokio::sync::Notify::new());
    let model = ModelServer::start(vec![gated_hello_world(&gate)]).await;
    let key = stack.api_key(uuid::Uuid::new_v4()).await;
    let language_model = stack.language_model(&clock, &key, "local", &model.base_url()).await;
    let agent = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .post(
            "/agents/",
            json!({"type": "config", "name": "Runner", "framework": "chainlib",
                "language_model_id": language_model, "instruction": "Be brief."}),
        )
        .created()
        .await;

    let watched = watch(&stack, &["auth", "meetings", "health", "agents", "agent-runs"]).await;
    let router = Router::invoking(&local_template(), &watched.invoker, dev_server::BACKEND_API).unwrap();

    // A form body: not one of the API's binary media types, it arrives as text.
    let form = format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}");
    let content_type = ("content-type", "application/x-www-form-urlencoded");
    let response = router.dispatch(request(Method::POST, "/api/auth/token/", &[content_type], Body::Text(form))).await;
    assert_eq!(response.status(), 200, "{:?}", response.body());
    let token = json_body(&response)["access_token"].as_str().unwrap().to_owned();

    // A query string; links point back at the gateway's address, with the stage when the
    // client's URL had it.
    let bearer = format!("Bearer {token}");
    for (path, next) in [
        ("/api/v1/external/meeting/?size=1", "http://127.0.0.1:3000/api/v1/external/meeting/?page=2&size=1"),
        ("/Prod/api/v1/external/meeting/?size=1", "http://127.0.0.1:3000/Prod/api/v1/external/meeting/?page=2&size=1"),
    ] {
        let response = router.dispatch(request(Method::GET, path, &[("authorization", &bearer)], Body::Empty)).await;
        assert_eq!(response.status(), 200);
        let page = json_body(&response);
        assert_eq!((page["count"].clone(), page["next"].clone()), (json!(3), json!(next)));
    }

    let with_key = [("x-api-key", key.as_str())];
    let response = router.dispatch(request(Method::GET, "/health-check/auth-test", &with_key, Body::Empty)).await;
    assert_eq!(response.status(), 200, "{:?}", response.body());
    let response = router.dispatch(request(Method::GET, &format!("/agents/{agent}"), &with_key, Body::Empty)).await;
    assert_eq!((response.status().as_u16(), json_body(&response)["data"]["id"].as_str()), (200, Some(agent.as_str())));
    // Refusals are the function's, with its headers.
    let response = router.dispatch(request(Method::GET, "/agents/", &[], Body::Empty)).await;
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["content-type"], "application/json");
    let response = router.dispatch(request(Method::GET, "/nowhere", &[], Body::Empty)).await;
    assert_eq!(response.status(), 403);

    // A streamed run: the first delta arrives while the model is still held.
    let json_type = ("content-type", "application/json");
    let response = router
        .dispatch_streaming(request(
            Method::POST,
            &format!("/agents/{agent}/run"),
            &[with_key[0], json_type],
            Body::Text(r#"{"message": "hi"}"#.into()),
        ))
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let seen = integration_tests::read_until(&mut body, "event: message").await;
    assert!(seen.contains(r#"{"delta":"Hello "}"#) && !seen.contains("event: done"), "{seen}");
    gate.notify_one();
    let rest = body.collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&rest).contains("event: done"));
}

#[tokio::test]
async fn queued_runs_and_webhooks_go_through_sqs_and_the_scheduler_gets_its_scheduled_event() {
    let stack = TestStack::new().await;
    let clock = TestClock::system();
    let model = ModelServer::start(vec![text_reply("Queued hello.")]).await;
    let key = stack.api_key(uuid::Uuid::new_v4()).await;
    let language_model = stack.language_model(&clock, &key, "local", &model.base_url()).await;
    let agent = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .post(
            "/agents/",
            json!({"type": "config", "name": "Worker", "framework": "chainlib",
                "language_model_id": language_model}),
        )
        .created()
        .await;
    let received: Arc<std::sync::Mutex<Vec<Vec<u8>>>> = Arc::default();
    let seen = Arc::clone(&received);
    let handler: Handler = Arc::new(move |request| {
        let seen = Arc::clone(&seen);
        Box::pin(async move {
            let body = request.into_body().collect().await.map(|b| b.to_bytes().to_vec()).unwrap_or_default();
            seen.lock().unwrap().push(body);
            respond(200, "text/plain", "ok")
        })
    });
    let receiver = LocalServer::start(handler).await;

    let watched = watch(&stack, &["runner", "runner-worker", "webhooks", "webhook-delivery", "scheduler"]).await;
    let template = local_template();
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let (stop, _) = tokio::sync::watch::channel(false);
    let mut mappings = Vec::new();
    for mapping in dev_server::triggers::queue_mappings(&template, &stack.prefix, &sqs, 2) {
        let mut stopped = stop.subscribe();
        mappings.push(tokio::spawn(mapping.run(Arc::clone(&watched.invoker), async move {
            let _ = stopped.changed().await;
        })));
    }
    let router = Router::invoking(&template, &watched.invoker, dev_server::BACKEND_API).unwrap();
    let runner = Router::invoking(&template, &watched.invoker, dev_server::RUNNER_API).unwrap();

    // The runner binary queues the run; the event source mapping hands it to the worker binary;
    // the runner streams what the worker records.
    let with_key = ("x-api-key", key.as_str());
    let json_type = ("content-type", "application/json");
    let body = json!({"agent_id": agent, "message": "Queue me"}).to_string();
    let response = runner
        .dispatch_streaming(request(
            Method::POST,
            "/execute/a2a/stream/celery/agent",
            &[with_key, json_type],
            Body::Text(body),
        ))
        .await;
    assert_eq!(response.status(), 200);
    let streamed = response.into_body().collect().await.unwrap().to_bytes();
    let streamed = String::from_utf8_lossy(&streamed);
    assert!(streamed.contains("Queued hello.") && streamed.contains("event: done"), "{streamed}");

    // A webhook's test event: queued by the webhooks binary, delivered by webhook-delivery.
    let endpoint = json!({"url": receiver.url("/hook"), "description": "lambda mode"}).to_string();
    let response = router
        .dispatch(request(Method::POST, "/webhooks/endpoints", &[with_key, json_type], Body::Text(endpoint)))
        .await;
    assert_eq!(response.status(), 201, "{:?}", response.body());
    let endpoint_id = json_body(&response)["data"]["id"].as_str().unwrap().to_owned();
    let test_path = format!("/webhooks/endpoints/{endpoint_id}/test");
    let response = router.dispatch(request(Method::POST, &test_path, &[with_key], Body::Empty)).await;
    assert_eq!(response.status(), 202, "{:?}", response.body());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while received.lock().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the webhook was not delivered");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let delivered: Value = serde_json::from_slice(&received.lock().unwrap()[0]).unwrap();
    assert_eq!(delivered["type"], "webhook.test");

    // The scheduler's tick, from EventBridge's scheduled event.
    let event = dev_server::triggers::scheduled_event("SchedulerFunctionTick", chrono::Utc::now());
    let answer = watched.invoker.invoke("scheduler", &event).await.unwrap();
    assert_eq!(answer.status(), 200);
    let report: Value = serde_json::from_slice(&answer.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(report["fired"], 0, "{report}");

    let _ = stop.send(true);
    for mapping in mappings {
        let _ = mapping.await;
    }
}

#[tokio::test]
async fn every_template_route_reaches_its_function_binary() {
    let stack = TestStack::new().await;
    let template = local_template();
    let routed: Vec<&str> = template
        .functions
        .iter()
        .filter(|function| !function.routes.is_empty())
        .map(|function| function.binary.as_str())
        .collect();
    let watched = watch(&stack, &routed).await;
    let mut calls = 0;
    for api in [dev_server::BACKEND_API, dev_server::RUNNER_API] {
        let router = Router::invoking(&template, &watched.invoker, api).unwrap();
        for (_, route) in template.routes_of(api) {
            let path = format!("/Prod{}/", integration_tests::concrete_path(&route.path));
            let response = router.dispatch(request(Method::GET, &path, &[], Body::Empty)).await;
            // The binary answered (its auth refusal, 405, or its 404 for an id of the wrong
            // kind; the documents and pages, open to all, 200), not the gateway's 403 or 502.
            let status = response.status().as_u16();
            let open = route.path.ends_with("/openapi.json") || route.path.ends_with("/docs");
            let expected = if open { status == 200 } else { matches!(status, 400 | 401 | 404 | 405) };
            assert!(expected, "{} {path}: {status}", route.method);
            calls += 1;
        }
    }
    assert!(calls > 50, "{calls} routes");
}

/// The template's SQS event source mapping of `binary`, polling its queue and invoking `handler`
/// (a stand-in for the function's Invoke API) until stopped.
struct MappedQueue {
    _function: LocalServer,
    stop: tokio::sync::watch::Sender<bool>,
    polling: tokio::task::JoinHandle<()>,
}

impl MappedQueue {
    async fn start(stack: &TestStack, sqs: &aws_sdk_sqs::Client, binary: &str, handler: Handler) -> Self {
        let function = LocalServer::start(handler).await;
        let invoker =
            Arc::new(dev_server::lambda::Invoker::new([(binary.to_owned(), function.address)].into_iter().collect()));
        let mapping = dev_server::triggers::queue_mappings(&local_template(), &stack.prefix, sqs, 1)
            .into_iter()
            .find(|mapping| mapping.binary == binary)
            .unwrap();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let polling = tokio::spawn(mapping.run(invoker, async move {
            let _ = stopped.changed().await;
        }));
        Self { _function: function, stop, polling }
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.polling.await;
    }
}

#[tokio::test]
async fn the_event_source_mapping_deletes_what_the_function_handled_and_leaves_its_failures() {
    let stack = TestStack::new().await;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let queue_name = stack::physical_name(&stack.prefix, "WebhookDeliveryQueue");
    let queue_url = sqs.get_queue_url().queue_name(&queue_name).send().await.unwrap().queue_url.unwrap();
    for body in ["ok-1", "fail", "ok-2"] {
        sqs.send_message().queue_url(&queue_url).message_body(body).send().await.unwrap();
    }
    // A stand-in for the function's Invoke API: it fails the message whose body is "fail".
    let batches: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
    let seen = Arc::clone(&batches);
    let handler: Handler = Arc::new(move |request| {
        let seen = Arc::clone(&seen);
        Box::pin(async move {
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let event: Value = serde_json::from_slice(&body).unwrap();
            let failures: Vec<Value> = event["Records"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|record| record["body"] == "fail")
                .map(|record| json!({"itemIdentifier": record["messageId"]}))
                .collect();
            seen.lock().unwrap().push(event);
            respond(200, "application/json", json!({"batchItemFailures": failures}).to_string())
        })
    });
    let mapped = MappedQueue::start(&stack, &sqs, "webhook-delivery", handler).await;

    let count = |name: aws_sdk_sqs::types::QueueAttributeName| {
        let (sqs, queue_url) = (sqs.clone(), queue_url.clone());
        async move {
            let attributes = sqs.get_queue_attributes().queue_url(queue_url).attribute_names(name.clone()).send().await;
            attributes.unwrap().attributes.unwrap()[&name].parse::<u32>().unwrap()
        }
    };
    use aws_sdk_sqs::types::QueueAttributeName::{ApproximateNumberOfMessages, ApproximateNumberOfMessagesNotVisible};
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let delivered: usize =
            batches.lock().unwrap().iter().map(|event| event["Records"].as_array().unwrap().len()).sum();
        let (waiting, in_flight) =
            (count(ApproximateNumberOfMessages).await, count(ApproximateNumberOfMessagesNotVisible).await);
        // Every message went out, the two handled ones are deleted, the failure is invisible
        // until the queue's visibility timeout.
        if delivered == 3 && (waiting, in_flight) == (0, 1) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "delivered {delivered}, waiting {waiting}, in flight {in_flight}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let event = batches.lock().unwrap()[0].clone();
    assert_eq!(event["Records"][0]["eventSource"], "aws:sqs");
    assert_eq!(event["Records"][0]["attributes"]["ApproximateReceiveCount"], "1");
    mapped.stop().await;
}

#[tokio::test]
async fn a_message_whose_function_keeps_failing_moves_to_the_dead_letter_queue_after_max_receive_count() {
    let stack = TestStack::new().await;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let queue_url = |logical_id: &str| {
        let (sqs, name) = (sqs.clone(), stack::physical_name(&stack.prefix, logical_id));
        async move { sqs.get_queue_url().queue_name(name).send().await.unwrap().queue_url.unwrap() }
    };
    let (queue, dead_letters) = (queue_url("RunnerQueue").await, queue_url("RunnerDeadLetterQueue").await);
    // The template's redrive policy (maxReceiveCount 3), with a visibility timeout of one second
    // in place of 16 minutes, so a failed message comes back at once.
    sqs.set_queue_attributes()
        .queue_url(&queue)
        .attributes(aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout, "1")
        .send()
        .await
        .unwrap();
    sqs.send_message().queue_url(&queue).message_body("doomed").send().await.unwrap();
    // A stand-in for the function's Invoke API whose function always fails (cargo-lambda's 500).
    let invocations = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&invocations);
    let handler: Handler = Arc::new(move |_request| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async { respond(500, "application/json", r#"{"errorType":"Panic"}"#.to_owned()) })
    });
    let mapped = MappedQueue::start(&stack, &sqs, "runner-worker", handler).await;

    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let dead = loop {
        let received = sqs.receive_message().queue_url(&dead_letters).wait_time_seconds(1).send().await.unwrap();
        if let Some(message) = received.messages.unwrap_or_default().into_iter().next() {
            break message;
        }
        assert!(tokio::time::Instant::now() < deadline, "{invocations:?} invocations, nothing dead-lettered");
    };
    mapped.stop().await;
    assert_eq!(dead.body(), Some("doomed"));
    // Three receives, three failed invocations; the fourth receive moved it.
    assert_eq!(invocations.load(std::sync::atomic::Ordering::SeqCst), 3);
}
