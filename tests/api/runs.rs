//! Run records and their events in DynamoDB (DynamoDB Local): sequence reads, ordering and filters, one
//! ending per run, lost runs marked failed by timeout when read; an agent's run count, kept with
//! each creation and purge, and pages read only down to their depth.

use agent_runtime::events::{FailureReason, RunEvent, Usage};
use agent_runtime::runs::{INDEX_SETTLE, RunFilter, RunInput, RunOrigin, RunRecord, RunStatus, RunStore, RunType};
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{Duration, Utc};
use integration_tests::TestStack;
use platform_data::ids::{AccountId, AgentId, RunId, ScheduleId};
use uuid::Uuid;

fn store(stack: &TestStack) -> RunStore {
    RunStore::new(
        stack.dynamodb.clone(),
        stack.setting("RUNS_TABLE"),
        stack.setting("RUN_EVENTS_TABLE"),
        stack.setting("RUN_STEPS_TABLE"),
    )
}

fn run(agent_id: AgentId, run_type: RunType, started: chrono::DateTime<Utc>) -> RunRecord {
    let input = RunInput { message: "hi".into(), files: Vec::new() };
    let origin = RunOrigin { run_type, input, schedule_id: None, session_id: None };
    RunRecord::start(
        RunId::now_v7(),
        agent_id,
        AccountId::new_v4(),
        origin,
        started,
        std::time::Duration::from_secs(60),
    )
}

#[tokio::test]
async fn events_are_read_back_after_a_sequence_number() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let now = Utc::now();
    let record = run(AgentId::new_v4(), RunType::Api, now);
    assert!(runs.create(&record, Vec::new()).await.unwrap());
    assert!(!runs.create(&record, Vec::new()).await.unwrap(), "a run id is written once");
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
    let agent = AgentId::new_v4();
    let now = Utc::now();
    let mut first = run(agent, RunType::Api, now);
    runs.create(&first, Vec::new()).await.unwrap();
    let second = run(agent, RunType::Schedule, now);
    runs.create(&second, Vec::new()).await.unwrap();
    runs.create(&run(AgentId::new_v4(), RunType::Api, now), Vec::new()).await.unwrap();

    first.finish(&Ok("answer".into()), Usage { input_tokens: 3, output_tokens: 4 }, 2, now + Duration::seconds(2));
    assert!(runs.finish(&first, 1, Vec::new(), Utc::now(), false).await.unwrap());
    let mut again = first.clone();
    again.finish(&Err((FailureReason::Cancelled, "late cancel".into())), Usage::default(), 2, now);
    assert!(!runs.finish(&again, 1, Vec::new(), Utc::now(), false).await.unwrap(), "an ended run keeps its ending");

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
async fn a_run_lost_past_its_deadline_reads_as_failed_by_timeout_and_cannot_end_late() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let started = Utc::now() - Duration::hours(1);
    let lost = run(AgentId::new_v4(), RunType::Queue, started);
    runs.create(&lost, Vec::new()).await.unwrap();
    let read = runs.get(lost.run_id, Utc::now()).await.unwrap().unwrap();
    assert_eq!((read.status, read.failure_reason), (RunStatus::Failed, Some(FailureReason::Timeout)));
    // A read writes nothing (the sweep records the run's end and publishes `run.failed`), and a
    // late finish of the lost process cannot contradict what readers saw.
    assert_eq!(runs.get_stored(lost.run_id).await.unwrap().unwrap().status, RunStatus::Started);
    let mut late = lost.clone();
    late.finish(&Ok("too late".into()), Usage::default(), 1, Utc::now());
    assert!(!runs.finish(&late, 1, Vec::new(), Utc::now(), false).await.unwrap());
    let listed = runs.list_for_agent(lost.agent_id, &RunFilter::default(), Utc::now()).await.unwrap();
    assert_eq!(listed[0].status, RunStatus::Failed);
    // A fresh run is left alone.
    let fresh = run(AgentId::new_v4(), RunType::Api, Utc::now());
    runs.create(&fresh, Vec::new()).await.unwrap();
    assert_eq!(runs.get(fresh.run_id, Utc::now()).await.unwrap().unwrap().status, RunStatus::Started);
}

#[tokio::test]
async fn the_runs_of_an_agent_are_listed_newest_first_with_filters_pages_and_isolation() {
    use integration_tests::TestClock;
    use platform_api::AgentsService;
    use serde_json::json;
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let body = json!({"type": "config", "name": "runner", "framework": "chainlib", "language_model_id": "lm"});
    let agent = agents.post("/agents/", body).created().await;
    let agent_id: AgentId = agent.parse().unwrap();
    let runs = stack.runs();
    let schedule = ScheduleId::new_v4();
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut record = run(agent_id, if i % 2 == 0 { RunType::Api } else { RunType::Schedule }, Utc::now());
        record.account_id = account.into();
        if record.run_type == RunType::Schedule {
            record.schedule_id = Some(schedule);
        }
        runs.create(&record, Vec::new()).await.unwrap();
        if i == 0 {
            record.finish(&Ok("done".into()), Usage::default(), 1, Utc::now());
            runs.finish(&record, 1, Vec::new(), Utc::now(), false).await.unwrap();
        }
        ids.push(record.run_id.to_string());
    }
    let list = |query: &str| agents.get(&format!("/agents/{agent}/runs{query}"));
    let all = list("").expect(200).await;
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

    assert_eq!(list("?status=success").expect(200).await["pagination"]["total"], 1);
    assert_eq!(list("?run_type=schedule").expect(200).await["pagination"]["total"], 2);
    assert_eq!(list(&format!("?schedule_id={schedule}&status=started")).expect(200).await["pagination"]["total"], 2);
    let page = list("?limit=2&page=3").expect(200).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    assert_eq!(page["pagination"], json!({"page": 3, "limit": 2, "total": 5, "pages": 3}));

    let bad = list("?status=done&run_type=cron&schedule_id=x&limit=0").error(422, "VALIDATION_ERROR").await;
    let mut fields: Vec<&String> = bad["details"].as_object().unwrap().keys().collect();
    fields.sort();
    assert_eq!(fields, ["limit", "run_type", "schedule_id", "status"]);
    // Another account's agent, an unknown one and a malformed id.
    let other = stack.api_key(Uuid::new_v4()).await;
    agents.with_key(&other).get(&format!("/agents/{agent}/runs")).error(404, "RESOURCE_NOT_FOUND").await;
    agents.get(&format!("/agents/{}/runs", Uuid::new_v4())).expect(404).await;
    agents.get("/agents/not-a-uuid/runs").expect(422).await;
    let reply = agents.delete(&format!("/agents/{agent}/runs")).send().await;
    reply.expect(405);
    assert_eq!(reply.header("allow"), Some("GET"));
}

/// Makes `runs` of `agent` what runs stored before counts were kept are: no `counted` mark, and
/// no count item for the agent.
async fn forget_counts(stack: &TestStack, agent: AgentId, runs: &[RunRecord]) {
    let table = stack.setting("RUNS_TABLE");
    for run in runs {
        stack
            .dynamodb
            .update_item()
            .table_name(&table)
            .key("run_id", AttributeValue::S(run.run_id.to_string()))
            .update_expression("REMOVE counted")
            .send()
            .await
            .unwrap();
    }
    stack
        .dynamodb
        .delete_item()
        .table_name(&table)
        .key("run_id", AttributeValue::S(format!("RUN_COUNT#{agent}")))
        .send()
        .await
        .unwrap();
}

fn ids(runs: &[RunRecord]) -> Vec<RunId> {
    runs.iter().map(|run| run.run_id).collect()
}

#[tokio::test]
async fn unfiltered_pages_match_the_full_read_at_every_depth_and_read_only_down_to_it() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let agent = AgentId::new_v4();
    let now = Utc::now();
    for i in 0..23 {
        // One lost run among them: listed (and stored) as failed by timeout.
        let started = if i == 7 { now - Duration::hours(1) } else { now };
        assert!(runs.create(&run(agent, RunType::Api, started), Vec::new()).await.unwrap());
    }
    runs.create(&run(AgentId::new_v4(), RunType::Api, now), Vec::new()).await.unwrap();

    // The first list tallies the agent's runs from before counts (none): the whole index once.
    stack.calls.reset();
    let first = runs.page_for_agent(agent, &RunFilter::default(), 0, 5, now).await.unwrap();
    assert_eq!(stack.calls.query_limits(), [None]);
    assert!(stack.calls.operations().contains(&"UpdateItem".to_owned()), "{:?}", stack.calls.operations());
    assert_eq!(first.total, 23);
    let full = runs.list_for_agent(agent, &RunFilter::default(), now).await.unwrap();
    assert_eq!(full.len(), 23);
    assert_eq!(ids(&first.runs), ids(&full[..5]));
    assert_eq!(full.iter().filter(|run| run.status == RunStatus::Failed).count(), 1);

    for (skip, take) in [(0, 1), (0, 5), (5, 5), (10, 10), (20, 5), (22, 1), (0, 23), (0, 100), (3, 20)] {
        stack.calls.reset();
        let page = runs.page_for_agent(agent, &RunFilter::default(), skip, take, now).await.unwrap();
        let end = (skip + take).min(full.len());
        assert_eq!(ids(&page.runs), ids(&full[skip..end]), "skip {skip}, take {take}");
        assert_eq!(page.runs, full[skip..end].to_vec(), "skip {skip}, take {take}");
        assert_eq!(page.total, 23);
        // The count (GetItem), then the index down to the page's depth, never past the count.
        let limits = stack.calls.query_limits();
        assert!(!limits.is_empty());
        assert!(limits.iter().all(|limit| limit.is_some_and(|l| l as usize <= end)), "{limits:?} for {skip}+{take}");
        assert_eq!(stack.calls.operations().iter().filter(|op| *op == "GetItem").count(), 1);
    }
    // A page past the end reads the count only.
    for (skip, take) in [(23, 5), (40, 10)] {
        stack.calls.reset();
        let page = runs.page_for_agent(agent, &RunFilter::default(), skip, take, now).await.unwrap();
        assert_eq!((page.runs.len(), page.total), (0, 23));
        assert_eq!(stack.calls.operations(), ["GetItem"]);
    }
    // A filter reads the whole index (and needs no count).
    stack.calls.reset();
    let failed = RunFilter { status: Some(RunStatus::Failed), ..RunFilter::default() };
    let page = runs.page_for_agent(agent, &failed, 0, 10, now).await.unwrap();
    assert_eq!((page.runs.len(), page.total), (1, 1));
    assert_eq!(stack.calls.operations(), ["Query"]);
    assert_eq!(stack.calls.query_limits(), [None]);
}

#[tokio::test]
async fn an_agent_s_run_count_survives_duplicate_creates_and_purges() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let agent = AgentId::new_v4();
    let now = Utc::now();
    let total = |runs: RunStore| async move {
        let page = runs.page_for_agent(agent, &RunFilter::default(), 0, 100, now).await.unwrap();
        let full = runs.list_for_agent(agent, &RunFilter::default(), now).await.unwrap();
        assert_eq!(ids(&page.runs), ids(&full), "the page is the whole list");
        assert_eq!(page.total, full.len(), "the count is the index's");
        page.total
    };
    let first = run(agent, RunType::Api, now);
    let second = run(agent, RunType::Api, now);
    assert!(runs.create(&first, Vec::new()).await.unwrap());
    assert!(runs.create(&second, Vec::new()).await.unwrap());
    assert!(!runs.create(&first, Vec::new()).await.unwrap(), "a run id is written once");
    assert_eq!(total(runs.clone()).await, 2);

    // A scheduled run's id is its due time's: a tick completing another's, or overlapping ticks,
    // create it again, at the same moment: one create wins, and the refused ones count nothing.
    let mut scheduled = run(agent, RunType::Schedule, now);
    scheduled.run_id = agent_runtime::scheduler::scheduled_run_id(ScheduleId::new_v4(), now);
    let created: Vec<bool> = futures_util::future::join_all((0..3).map(|_| runs.create(&scheduled, Vec::new())))
        .await
        .into_iter()
        .map(|created| created.unwrap())
        .collect();
    assert_eq!(created.iter().filter(|created| **created).count(), 1, "one winner: {created:?}");
    assert_eq!(total(runs.clone()).await, 3);
    for _ in 0..8 {
        assert!(runs.create(&run(agent, RunType::Api, Utc::now()), Vec::new()).await.unwrap());
    }
    assert_eq!(total(runs.clone()).await, 11);

    // A purge uncounts the run once, however often it is sent.
    let stored = runs.get(second.run_id, now).await.unwrap().unwrap();
    runs.delete(&stored, now).await.unwrap();
    runs.delete(&stored, now).await.unwrap();
    assert_eq!(total(runs.clone()).await, 10);
    assert!(runs.get(second.run_id, now).await.unwrap().is_none());
    let count = runs.run_count(agent).await.unwrap();
    assert_eq!((count.counted, count.uncounted, count.tallied), (10, Some(0), true));
}

#[tokio::test]
async fn runs_stored_before_counts_are_read_whole_until_tallied() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let agent = AgentId::new_v4();
    let now = Utc::now();
    let mut old = Vec::new();
    for _ in 0..4 {
        let record = run(agent, RunType::Api, now);
        runs.create(&record, Vec::new()).await.unwrap();
        old.push(record);
    }
    forget_counts(&stack, agent, &old).await;
    // New runs are counted, but the count alone is not the agent's total yet.
    for _ in 0..2 {
        runs.create(&run(agent, RunType::Api, now), Vec::new()).await.unwrap();
    }
    let count = runs.run_count(agent).await.unwrap();
    assert_eq!((count.counted, count.tallied, count.total()), (2, false, None));

    stack.calls.reset();
    let page = runs.page_for_agent(agent, &RunFilter::default(), 0, 2, now).await.unwrap();
    assert_eq!(page.total, 6);
    assert_eq!(stack.calls.query_limits(), [None], "read whole");
    assert_eq!(stack.calls.operations(), ["GetItem", "Query", "UpdateItem"], "then tallied");
    let count = runs.run_count(agent).await.unwrap();
    assert_eq!((count.counted, count.uncounted, count.total()), (2, Some(4), Some(6)));

    let full = runs.list_for_agent(agent, &RunFilter::default(), now).await.unwrap();
    stack.calls.reset();
    let page = runs.page_for_agent(agent, &RunFilter::default(), 2, 2, now).await.unwrap();
    assert_eq!((ids(&page.runs), page.total), (ids(&full[2..4]), 6));
    assert_eq!(stack.calls.query_limits(), [Some(4)]);

    // A purge of an old run is uncounted from the old runs, of a new one from the new.
    let oldest = runs.get(old[0].run_id, now).await.unwrap().unwrap();
    assert!(!oldest.counted);
    runs.delete(&oldest, now).await.unwrap();
    let newest = runs.get(full[0].run_id, now).await.unwrap().unwrap();
    assert!(newest.counted);
    runs.delete(&newest, now).await.unwrap();
    let count = runs.run_count(agent).await.unwrap();
    assert_eq!((count.counted, count.uncounted, count.total()), (1, Some(3), Some(4)));
    let page = runs.page_for_agent(agent, &RunFilter::default(), 0, 10, now).await.unwrap();
    assert_eq!((ids(&page.runs), page.total), (ids(&full[1..5]), 4));

    // An agent with only old runs, one purged just now: its index may still show the purged run,
    // so no tally until `INDEX_SETTLE` has passed; each list is read whole and right meanwhile.
    let agent = AgentId::new_v4();
    let mut old = Vec::new();
    for _ in 0..3 {
        let record = run(agent, RunType::Api, now);
        runs.create(&record, Vec::new()).await.unwrap();
        old.push(record);
    }
    forget_counts(&stack, agent, &old).await;
    let purged = runs.get(old[1].run_id, now).await.unwrap().unwrap();
    runs.delete(&purged, now).await.unwrap();
    let soon = now + Duration::seconds(10);
    stack.calls.reset();
    let page = runs.page_for_agent(agent, &RunFilter::default(), 0, 10, soon).await.unwrap();
    assert_eq!((ids(&page.runs), page.total), (vec![old[2].run_id, old[0].run_id], 2));
    assert_eq!(stack.calls.operations(), ["GetItem", "Query"], "not tallied yet");
    let later = now + INDEX_SETTLE + Duration::seconds(1);
    runs.page_for_agent(agent, &RunFilter::default(), 0, 10, later).await.unwrap();
    let count = runs.run_count(agent).await.unwrap();
    assert_eq!((count.counted, count.uncounted, count.total()), (0, Some(2), Some(2)));
    runs.create(&run(agent, RunType::Api, later), Vec::new()).await.unwrap();
    stack.calls.reset();
    let page = runs.page_for_agent(agent, &RunFilter::default(), 0, 1, later).await.unwrap();
    assert_eq!((page.runs.len(), page.total), (1, 3));
    assert_eq!(stack.calls.query_limits(), [Some(1)]);
}
