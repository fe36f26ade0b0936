//! Per-account quotas on DynamoDB Local, whose conditional writes are atomic: two processes (two
//! clients, as two containers would be) racing for one account's leases never exceed the limit,
//! a lease whose holder died is reclaimed by its expiry, and the answers name the quota.

use agent_runtime::queue::RunWorker;
use agent_runtime::scheduler::Scheduler;
use futures_util::future::join_all;
use http_body_util::BodyExt;
use integration_tests::model_server::{ModelServer, gated_hello_world, text_reply};
use integration_tests::{Reply, TestClock, TestStack};
use platform_api::{AgentRunsService, AgentsService, RunnerService};
use serde_json::json;
use std::sync::Arc;
use storage::quota::{Leases, MAX_RETRY_AFTER_SECONDS, Quota, QuotaFull};
use uuid::Uuid;

const RUNS: Quota = Quota { name: "concurrent_runs", limit: 5 };

/// The leases of `stack` as a process of its own would reach them (its own client).
fn process(stack: &TestStack) -> Leases {
    let table = stack.setting(platform_api::settings::QUOTAS_TABLE);
    Leases::new(aws_sdk_dynamodb::Client::new(&stack.sdk), table)
}

#[tokio::test]
async fn two_processes_racing_for_leases_get_exactly_the_limit() {
    let stack = TestStack::new().await;
    let (first, second) = (process(&stack), process(&stack));
    let now = 1_000_000;
    let attempts = (0..12).map(|index| {
        let leases = if index % 2 == 0 { first.clone() } else { second.clone() };
        async move { leases.acquire(RUNS, "account-1", &format!("run-{index}"), now + 60_000, now).await.unwrap() }
    });
    let outcomes = join_all(attempts).await;
    let taken = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
    assert_eq!(taken, 5, "{outcomes:?}");
    for refused in outcomes.iter().filter_map(|outcome| outcome.err()) {
        assert_eq!(refused, QuotaFull { quota: RUNS, retry_after_seconds: MAX_RETRY_AFTER_SECONDS });
    }
    assert_eq!(first.live(RUNS, "account-1", now).await.unwrap(), 5);
    // Another account's leases are its own.
    assert_eq!(second.acquire(RUNS, "account-2", "run-0", now + 60_000, now).await.unwrap(), Ok(()));
}

#[tokio::test]
async fn a_lease_whose_holder_died_is_reclaimed_at_its_expiry_and_a_released_one_at_once() {
    let stack = TestStack::new().await;
    let leases = process(&stack);
    let quota = Quota { name: "stream_followers", limit: 2 };
    let now = 5_000_000;
    assert_eq!(leases.acquire(quota, "account", "dies", now + 1_000, now).await.unwrap(), Ok(()));
    assert_eq!(leases.acquire(quota, "account", "lives", now + 12_500, now).await.unwrap(), Ok(()));
    // Full: the answer waits for the soonest expiry (rounded up to whole seconds).
    assert_eq!(
        leases.acquire(quota, "account", "third", now + 60_000, now).await.unwrap(),
        Err(QuotaFull { quota, retry_after_seconds: 1 })
    );
    // A holder renews its own lease even when the set is full.
    assert_eq!(leases.acquire(quota, "account", "lives", now + 12_500, now).await.unwrap(), Ok(()));

    // Past the dead holder's expiry its lease is reclaimed by the next taker.
    let later = now + 2_000;
    assert_eq!(leases.live(quota, "account", later).await.unwrap(), 1);
    assert_eq!(leases.acquire(quota, "account", "third", later + 60_000, later).await.unwrap(), Ok(()));
    assert_eq!(
        leases.acquire(quota, "account", "fourth", later + 60_000, later).await.unwrap(),
        Err(QuotaFull { quota, retry_after_seconds: 11 })
    );
    // A released lease frees its place at once.
    leases.release(quota, "account", "lives").await.unwrap();
    leases.release(quota, "account", "never-held").await.unwrap();
    assert_eq!(leases.acquire(quota, "account", "fourth", later + 60_000, later).await.unwrap(), Ok(()));
    assert_eq!(leases.live(quota, "account", later).await.unwrap(), 2);
}

#[tokio::test]
async fn releasing_from_an_account_that_never_held_a_lease_is_harmless() {
    let stack = TestStack::new().await;
    let leases = process(&stack);
    leases.release(RUNS, "nobody", "run").await.unwrap();
    assert_eq!(leases.live(RUNS, "nobody", 0).await.unwrap(), 0);
}

/// The runner queue's messages waiting out a delay, and those visible (as SQS counts them).
async fn delayed_and_visible(stack: &TestStack) -> (u64, u64) {
    use aws_sdk_sqs::types::QueueAttributeName::{ApproximateNumberOfMessages, ApproximateNumberOfMessagesDelayed};
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let name = stack::physical_name(&stack.prefix, "RunnerQueue");
    let url = sqs.get_queue_url().queue_name(name).send().await.unwrap().queue_url.unwrap();
    let output = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(ApproximateNumberOfMessagesDelayed)
        .attribute_names(ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap();
    let attributes = output.attributes.unwrap();
    let count = |name| attributes[&name].parse::<u64>().unwrap();
    (count(ApproximateNumberOfMessagesDelayed), count(ApproximateNumberOfMessages))
}

/// An account's key and a `config` agent on a model served by `model`.
async fn agent(stack: &TestStack, clock: &TestClock, model: &ModelServer) -> (String, String) {
    let key = stack.api_key(Uuid::new_v4()).await;
    let lm = stack.language_model(clock, &key, "local", &model.base_url()).await;
    let body = json!({"type": "config", "name": "Busy", "framework": "chainlib", "language_model_id": lm});
    let agent = stack.client::<AgentsService>(clock).with_key(&key).post("/agents/", body).created().await;
    (key, agent)
}

/// Reads a streamed answer until its first `message` event (the model is then held at its gate).
async fn until_first_delta(response: http_api::Response<http_api::StreamBody>) -> http_api::StreamBody {
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    integration_tests::read_until(&mut body, "event: message").await;
    body
}

/// A 429 of `quota`, with `Retry-After` within the documented bounds.
fn assert_quota_full(reply: &Reply, quota: &str, limit: u64) {
    assert_eq!(reply.status, 429, "{}", reply.text);
    let body = reply.json();
    assert_eq!(body["error"]["code"], "RATE_LIMIT_EXCEEDED");
    assert_eq!(
        (body["error"]["details"]["quota"].as_str(), body["error"]["details"]["limit"].as_u64()),
        (Some(quota), Some(limit))
    );
    let retry_after: i64 = reply.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=MAX_RETRY_AFTER_SECONDS).contains(&retry_after), "{retry_after}");
    assert_eq!(body["error"]["details"]["retry_after_seconds"], retry_after);
}

#[tokio::test]
async fn runs_beyond_the_concurrent_runs_quota_are_refused_across_entry_points_and_processes() {
    let stack = TestStack::new().await;
    let stack = stack.with_settings(&[("QUOTA_CONCURRENT_RUNS", "2")]);
    let clock = TestClock::new();
    let (gate_one, gate_two) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let replies = vec![gated_hello_world(&gate_one), gated_hello_world(&gate_two), text_reply("Third.")];
    let model = ModelServer::start(replies).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    // Three processes: two of the agent-runs function, one of the runner.
    let first = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let second = stack.client::<AgentRunsService>(&clock).with_key(&key);
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let path = format!("/agents/{agent}/run");
    let one = until_first_delta(first.post(&path, json!({"message": "hi"})).stream().await).await;
    let two = until_first_delta(second.post(&path, json!({"message": "hi"})).stream().await).await;

    let execute = json!({"agent_id": agent, "message": "hi"});
    let refused = runner.post("/execute/a2a/stream/agent", execute.clone()).send().await;
    assert_quota_full(&refused, "concurrent_runs", 2);
    assert_quota_full(&first.post(&path, json!({"message": "hi"})).send().await, "concurrent_runs", 2);
    // Only the two runs were recorded.
    let runs =
        stack.client::<AgentsService>(&clock).with_key(&key).get(&format!("/agents/{agent}/runs")).expect(200).await;
    assert_eq!(runs["pagination"]["total"], 2);

    // A run's end gives its place back.
    gate_one.notify_one();
    assert!(String::from_utf8_lossy(&one.collect().await.unwrap().to_bytes()).contains("event: done"));
    let third = runner.post("/execute/a2a/stream/agent", execute).send().await;
    assert_eq!(third.status, 200, "{}", third.text);
    assert!(third.text.contains("Third."), "{}", third.text);
    gate_two.notify_one();
    assert!(String::from_utf8_lossy(&two.collect().await.unwrap().to_bytes()).contains("event: done"));
}

#[tokio::test]
async fn a_queued_run_of_an_account_at_its_quota_is_deferred_without_a_receive_and_runs_once_a_place_frees() {
    let stack = TestStack::new().await;
    let stack = stack.with_settings(&[("QUOTA_CONCURRENT_RUNS", "1")]);
    let clock = TestClock::new();
    let gate = Arc::new(tokio::sync::Notify::new());
    let model = ModelServer::start(vec![gated_hello_world(&gate), text_reply("Queued answer.")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let busy = until_first_delta(
        stack
            .client::<AgentRunsService>(&clock)
            .with_key(&key)
            .post(&format!("/agents/{agent}/run"), json!({"message": "hi"}))
            .stream()
            .await,
    )
    .await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let queued =
        runner.post("/execute/a2a/stream/celery/agent", json!({"agent_id": agent, "message": "later"})).stream().await;
    assert_eq!(queued.status(), 200);
    let run_id = queued.headers()["x-run-id"].to_str().unwrap().to_owned();

    // The worker finds the account at its quota: the run is sent again with a delay, and this
    // delivery is done (so deferrals never count toward the dead-letter queue).
    let worker = stack.service::<RunWorker>(&clock);
    let messages = stack.run_queue().sqs().receive(std::time::Duration::from_secs(0)).await.unwrap();
    assert_eq!(messages.len(), 1);
    assert!(worker.handle_batch(&messages, &integration_tests::worker_invocation("w-1")).await.is_empty());
    assert_eq!(delayed_and_visible(&stack).await, (1, 0));
    let waiting = stack.runs().get(run_id.parse().unwrap(), clock.now()).await.unwrap().unwrap();
    assert_eq!((waiting.status.as_str(), waiting.started_at), ("started", None));

    // Once the busy run ends, the deferred message's delivery executes the run.
    gate.notify_one();
    assert!(String::from_utf8_lossy(&busy.collect().await.unwrap().to_bytes()).contains("event: done"));
    let delivery = queues::ReceivedMessage {
        message_id: "deferred".into(),
        receipt_handle: "r".into(),
        body: json!({"run_id": run_id}).to_string(),
        receive_count: 1,
    };
    assert!(worker.handle_batch(&[delivery], &integration_tests::worker_invocation("w-2")).await.is_empty());
    let stream = queued.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&stream).contains("Queued answer."));
}

#[tokio::test]
async fn streams_beyond_the_followers_quota_are_refused_and_a_closed_one_gives_its_place_back() {
    let stack = TestStack::new().await;
    let stack = stack.with_settings(&[("QUOTA_STREAM_FOLLOWERS", "1")]);
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    // A queued run nobody executes: its stream follows it until the client leaves.
    let queued =
        runner.post("/execute/a2a/stream/celery/agent", json!({"agent_id": agent, "message": "m"})).stream().await;
    assert_eq!(queued.status(), 200);
    let run_id = queued.headers()["x-run-id"].to_str().unwrap().to_owned();
    let resume = format!("/agents/{agent}/runs/{run_id}/stream");
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    assert_quota_full(&runs.get(&resume).send().await, "stream_followers", 1);
    assert_quota_full(&runner.get(&format!("/monitoring/tasks/{run_id}/stream")).send().await, "stream_followers", 1);

    // The client leaves: the follower notices at its next frame (a keep-alive at the latest).
    drop(queued);
    let leases = process(&stack);
    let account = stack.account_of(&key).await.to_string();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while leases
        .live(Quota { name: "stream_followers", limit: 1 }, &account, clock.now().timestamp_millis())
        .await
        .unwrap()
        > 0
    {
        assert!(tokio::time::Instant::now() < deadline, "the closed stream kept its place");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let resumed = runs.get(&resume).stream().await;
    assert_eq!(resumed.status(), 200);
}

#[tokio::test]
async fn a_scheduler_tick_skips_the_due_times_beyond_the_queued_runs_quota() {
    let stack = TestStack::new().await;
    let stack = stack.with_settings(&[("QUOTA_QUEUED_RUNS", "2")]);
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let account = stack.account_of(&key).await;
    let spec = platform_data::schedules::parse_schedule(
        json!({"cron_expression": "*/5 * * * *", "message": "tick", "overlap_policy": "allow"}).to_string().as_bytes(),
        None,
    )
    .unwrap();
    for _ in 0..3 {
        let mut schedule =
            platform_data::schedules::ScheduleRecord::new(account, agent.parse().unwrap(), spec.clone(), clock.now());
        schedule.set_next(Some(clock.now() - chrono::Duration::minutes(1)));
        stack.schedules().put(&schedule).await.unwrap();
    }
    let report = stack.service::<Scheduler>(&clock).tick(clock.now()).await.unwrap();
    assert_eq!((report.fired, report.skipped), (2, 1));
}

/// A 409 of count quota `quota`.
fn assert_quota_reached(reply: &Reply, quota: &str, limit: u64) {
    assert_eq!(reply.status, 409, "{}", reply.text);
    let body = reply.json();
    assert_eq!(body["error"]["code"], "CONFLICT");
    assert_eq!(
        (body["error"]["details"]["quota"].as_str(), body["error"]["details"]["limit"].as_u64()),
        (Some(quota), Some(limit))
    );
}

#[tokio::test]
async fn agents_are_counted_exactly_across_processes_from_what_the_account_held_before_quotas() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let account = stack.account_of(&key).await;
    // Two agents stored before quotas were kept: no counter yet.
    let before = stack.client::<AgentsService>(&clock).with_key(&key);
    for name in ["old-1", "old-2"] {
        before
            .post("/agents/", json!({"type": "a2a", "name": name, "a2a_profile": {"url": "https://a.example"}}))
            .created()
            .await;
    }
    let table = stack.setting(platform_api::settings::QUOTAS_TABLE);
    let quotas = storage::quota::Counters::new(stack.dynamodb.clone(), &table);
    let counter = quotas.counter(Quota { name: "agents", limit: 5 }, &account.to_string());
    assert_eq!(quotas.value(&counter).await.unwrap(), Some(2));
    // As an account from before quotas: its counter is gone.
    let counter_key = storage::s(format!("COUNT#agents#{account}"));
    stack.dynamodb.delete_item().table_name(&table).key("id", counter_key).send().await.unwrap();
    assert_eq!(quotas.value(&counter).await.unwrap(), None);

    // Two processes create eight agents at once, at a quota of five: three more fit.
    let limited = stack.with_settings(&[("QUOTA_AGENTS", "5")]);
    let (first, second) = (
        limited.client::<AgentsService>(&clock).with_key(&key),
        limited.client::<AgentsService>(&clock).with_key(&key),
    );
    let creates = (0..8).map(|index| {
        let client = if index % 2 == 0 { &first } else { &second };
        let body = json!({"type": "a2a", "name": format!("new-{index}"), "a2a_profile": {"url": "https://a.example"}});
        async move { client.post("/agents/", body).send().await }
    });
    let replies = join_all(creates).await;
    let created: Vec<&Reply> = replies.iter().filter(|reply| reply.status == 201).collect();
    assert_eq!(created.len(), 3, "{:?}", replies.iter().map(|reply| reply.status).collect::<Vec<_>>());
    for refused in replies.iter().filter(|reply| reply.status != 201) {
        assert_quota_reached(refused, "agents", 5);
    }
    assert_eq!(quotas.value(&counter).await.unwrap(), Some(5));

    // A deleted agent frees its place; restoring it while the account is full is refused.
    let id = created[0].json()["data"]["id"].as_str().unwrap().to_owned();
    first.request(http::Method::DELETE, &format!("/agents/{id}")).expect(200).await;
    first
        .post("/agents/", json!({"type": "a2a", "name": "replacement", "a2a_profile": {"url": "https://a.example"}}))
        .created()
        .await;
    assert_quota_reached(
        &first.request(http::Method::POST, &format!("/agents/{id}/restore")).send().await,
        "agents",
        5,
    );
    assert_eq!(quotas.value(&counter).await.unwrap(), Some(5));
}

#[tokio::test]
async fn schedules_and_webhook_endpoints_stop_at_their_quotas_and_a_delete_frees_a_place() {
    let stack = TestStack::new().await;
    let stack = stack.with_settings(&[("QUOTA_SCHEDULES", "2"), ("QUOTA_WEBHOOK_ENDPOINTS", "1")]);
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;

    let schedules = stack.client::<platform_api::SchedulesService>(&clock).with_key(&key);
    let path = format!("/agents/{agent}/schedule");
    let body = json!({"cron_expression": "@daily", "message": "m"});
    let kept = schedules.post(&path, body.clone()).created().await;
    schedules.post(&path, body.clone()).created().await;
    assert_quota_reached(&schedules.post(&path, body.clone()).send().await, "schedules", 2);
    schedules.request(http::Method::DELETE, &format!("/agents/schedules/{kept}")).expect(200).await;
    schedules.post(&path, body).created().await;

    let webhooks = stack.client::<platform_api::WebhooksService>(&clock).with_key(&key);
    let endpoint = json!({"url": "http://127.0.0.1:9/hook"});
    let first = webhooks.post("/webhooks/endpoints", endpoint.clone()).created().await;
    assert_quota_reached(&webhooks.post("/webhooks/endpoints", endpoint.clone()).send().await, "webhook_endpoints", 1);
    // The refused endpoint left no secret behind: only the first one's is stored.
    let prefix = stack.setting(platform_api::settings::WEBHOOK_SECRET_PREFIX);
    let by_name = aws_sdk_secretsmanager::types::Filter::builder()
        .key(aws_sdk_secretsmanager::types::FilterNameStringType::Name)
        .values(&prefix)
        .build();
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk).list_secrets().filters(by_name).send().await.unwrap();
    let stored = secrets
        .secret_list()
        .iter()
        .filter(|secret| secret.name().is_some_and(|name| name.starts_with(&prefix)))
        .count();
    assert_eq!(stored, 1);
    webhooks.request(http::Method::DELETE, &format!("/webhooks/endpoints/{first}")).expect(200).await;
    webhooks.post("/webhooks/endpoints", endpoint).created().await;
}
