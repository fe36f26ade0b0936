//! Run records and their events in DynamoDB (moto): sequence reads, ordering and filters, one
//! ending per run, lost runs marked failed by timeout when read.

use agent_runtime::events::{FailureReason, RunEvent, Usage};
use agent_runtime::runs::{RunFilter, RunInput, RunRecord, RunStatus, RunStore, RunType};
use chrono::{Duration, Utc};
use integration_tests::TestStack;
use uuid::Uuid;

fn store(stack: &TestStack) -> RunStore {
    RunStore::new(
        stack.dynamodb.clone(),
        stack.setting("RUNS_TABLE"),
        stack.setting("RUN_EVENTS_TABLE"),
        stack.setting("RUN_STEPS_TABLE"),
    )
}

fn run(agent_id: Uuid, run_type: RunType, started: chrono::DateTime<Utc>) -> RunRecord {
    RunRecord::start(
        Uuid::now_v7(),
        agent_id,
        Uuid::new_v4(),
        run_type,
        RunInput { message: "hi".into(), files: Vec::new() },
        None,
        None,
        started,
        std::time::Duration::from_secs(60),
    )
}

#[tokio::test]
async fn events_are_read_back_after_a_sequence_number() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let now = Utc::now();
    let record = run(Uuid::new_v4(), RunType::Api, now);
    assert!(runs.create(&record).await.unwrap());
    assert!(!runs.create(&record).await.unwrap(), "a run id is written once");
    let mut events = vec![(1, RunEvent::Metadata { run_id: record.run_id, agent_id: record.agent_id })];
    events.extend((2..=30).map(|seq| (seq, RunEvent::Message { delta: format!("d{seq} ") })));
    stack.calls.reset();
    runs.append_events(record.run_id, &events, now).await.unwrap();
    assert_eq!(stack.calls.operations(), ["BatchWriteItem", "BatchWriteItem"], "25 events per call");
    let after = runs.events_after(record.run_id, 27, 100).await.unwrap();
    assert_eq!(after.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [28, 29, 30]);
    assert_eq!(after[0].1, RunEvent::Message { delta: "d28 ".into() });
    assert_eq!(runs.events_after(record.run_id, 0, 5).await.unwrap().len(), 5);
}

#[tokio::test]
async fn a_run_ends_once_and_lists_newest_first_with_filters() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let agent = Uuid::new_v4();
    let now = Utc::now();
    let mut first = run(agent, RunType::Api, now);
    runs.create(&first).await.unwrap();
    let second = run(agent, RunType::Schedule, now);
    runs.create(&second).await.unwrap();
    runs.create(&run(Uuid::new_v4(), RunType::Api, now)).await.unwrap();

    first.finish(&Ok("answer".into()), Usage { input_tokens: 3, output_tokens: 4 }, 2, now + Duration::seconds(2));
    assert!(runs.finish(&first).await.unwrap());
    let mut again = first.clone();
    again.finish(&Err((FailureReason::Cancelled, "late cancel".into())), Usage::default(), 2, now);
    assert!(!runs.finish(&again).await.unwrap(), "an ended run keeps its ending");

    let all = runs.list_for_agent(agent, &RunFilter::default(), now).await.unwrap();
    assert_eq!(all.iter().map(|r| r.run_id).collect::<Vec<_>>(), [second.run_id, first.run_id]);
    let stored = runs.get(first.run_id, now).await.unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.output.as_deref(), stored.duration_ms),
        (RunStatus::Success, Some("answer"), Some(2000))
    );
    let success = RunFilter { status: Some(RunStatus::Success), ..RunFilter::default() };
    assert_eq!(runs.list_for_agent(agent, &success, now).await.unwrap().len(), 1);
    let scheduled = RunFilter { run_type: Some(RunType::Schedule), ..RunFilter::default() };
    assert_eq!(runs.list_for_agent(agent, &scheduled, now).await.unwrap()[0].run_id, second.run_id);
}

#[tokio::test]
async fn a_run_lost_past_its_deadline_is_failed_by_timeout_when_read() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let started = Utc::now() - Duration::hours(1);
    let lost = run(Uuid::new_v4(), RunType::Queue, started);
    runs.create(&lost).await.unwrap();
    let read = runs.get(lost.run_id, Utc::now()).await.unwrap().unwrap();
    assert_eq!((read.status, read.failure_reason), (RunStatus::Failed, Some(FailureReason::Timeout)));
    // The marking was stored, and a late finish of the lost process cannot overwrite it.
    let mut late = lost.clone();
    late.finish(&Ok("too late".into()), Usage::default(), 1, Utc::now());
    assert!(!runs.finish(&late).await.unwrap());
    let listed = runs.list_for_agent(lost.agent_id, &RunFilter::default(), Utc::now()).await.unwrap();
    assert_eq!(listed[0].status, RunStatus::Failed);
    // A fresh run is left alone.
    let fresh = run(Uuid::new_v4(), RunType::Api, Utc::now());
    runs.create(&fresh).await.unwrap();
    assert_eq!(runs.get(fresh.run_id, Utc::now()).await.unwrap().unwrap().status, RunStatus::Started);
}

#[tokio::test]
async fn the_runs_of_an_agent_are_listed_newest_first_with_filters_pages_and_isolation() {
    use http::Method;
    use integration_tests::{TestClock, call_api, create_record};
    use serde_json::json;
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let agents = stack.agents_service(&clock);
    let agent = create_record(
        &agents,
        "/agents/",
        &key,
        json!({"type": "config", "name": "runner",
        "framework": "chainlib", "language_model_id": "lm"}),
    )
    .await;
    let agent_id: Uuid = agent.parse().unwrap();
    let runs = stack.runs();
    let schedule = Uuid::new_v4();
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut record = run(agent_id, if i % 2 == 0 { RunType::Api } else { RunType::Schedule }, Utc::now());
        record.account_id = account;
        if record.run_type == RunType::Schedule {
            record.schedule_id = Some(schedule);
        }
        runs.create(&record).await.unwrap();
        if i == 0 {
            record.finish(&Ok("done".into()), Usage::default(), 1, Utc::now());
            runs.finish(&record).await.unwrap();
        }
        ids.push(record.run_id.to_string());
    }
    let list = |query: &str| {
        let path = format!("/agents/{agent}/runs{query}");
        let agents = &agents;
        let key = &key;
        async move { call_api(agents, Method::GET, &path, key, None).await }
    };
    let all = list("").await.expect(200);
    let listed: Vec<&str> = all["data"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(listed, newest_first);
    assert_eq!(all["pagination"], json!({"page": 1, "limit": 20, "total": 5, "pages": 1}));
    let first = &all["data"][4];
    assert_eq!(
        (first["status"].as_str(), first["output"].as_str(), first["run_type"].as_str()),
        (Some("success"), Some("done"), Some("api"))
    );
    for field in [
        "id",
        "agent_id",
        "run_type",
        "status",
        "failure_reason",
        "input",
        "output",
        "error",
        "usage",
        "steps",
        "schedule_id",
        "started_at",
        "finished_at",
        "duration_ms",
    ] {
        assert!(first.get(field).is_some(), "{field}");
    }

    assert_eq!(list("?status=success").await.expect(200)["pagination"]["total"], 1);
    assert_eq!(list("?run_type=schedule").await.expect(200)["pagination"]["total"], 2);
    assert_eq!(list(&format!("?schedule_id={schedule}&status=started")).await.expect(200)["pagination"]["total"], 2);
    let page = list("?limit=2&page=3").await.expect(200);
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    assert_eq!(page["pagination"], json!({"page": 3, "limit": 2, "total": 5, "pages": 3}));

    let bad = list("?status=done&run_type=cron&schedule_id=x&limit=0").await.expect(422);
    let mut fields: Vec<&String> = bad["error"]["details"].as_object().unwrap().keys().collect();
    fields.sort();
    assert_eq!(fields, ["limit", "run_type", "schedule_id", "status"]);
    // Another account's agent, an unknown one and a malformed id.
    let other = stack.api_key(Uuid::new_v4()).await;
    let reply = call_api(&agents, Method::GET, &format!("/agents/{agent}/runs"), &other, None).await;
    assert_eq!(reply.expect(404)["error"]["code"], "RESOURCE_NOT_FOUND");
    call_api(&agents, Method::GET, &format!("/agents/{}/runs", Uuid::new_v4()), &key, None).await.expect(404);
    call_api(&agents, Method::GET, "/agents/not-a-uuid/runs", &key, None).await.expect(422);
    let reply = call_api(&agents, Method::DELETE, &format!("/agents/{agent}/runs"), &key, None).await;
    reply.expect(405);
    assert_eq!(reply.header("allow"), Some("GET"));
}
