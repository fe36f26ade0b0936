//! Run records and their events in DynamoDB (DynamoDB Local): sequence reads, ordering and filters, one
//! ending per run, lost runs marked failed by timeout when read; an agent's run counts by day and
//! cell, kept with each creation, end and purge, pages (filtered or not) read only down to their
//! depth, and runs gone from reads and counts once past their retention.

use agent_runtime::events::{FailureReason, RunEvent, Usage};
use agent_runtime::runs::{
    INDEX_SETTLE, Retention, RunFilter, RunInput, RunOrigin, RunRecord, RunStatus, RunStore, RunType,
};
use agent_runtime::spend::Bill;
use chrono::{DateTime, Duration, Utc};
use integration_tests::TestStack;
use platform_data::ids::{AccountId, AgentId, RunId, ScheduleId};
use uuid::Uuid;

fn store(stack: &TestStack) -> RunStore {
    stack.runs()
}

/// A run of `agent_id` started at `started`, its id of that moment.
fn run(agent_id: AgentId, run_type: RunType, started: DateTime<Utc>) -> RunRecord {
    let input = RunInput { message: "hi".into(), files: Vec::new() };
    let origin = RunOrigin { run_type, input, schedule_id: None, session_id: None, parent: None };
    let millis = u64::try_from(started.timestamp_millis()).unwrap();
    let run_id = RunId::from(uuid::Builder::from_unix_timestamp_millis(millis, &rand_tail()).into_uuid());
    RunRecord::start(
        run_id,
        agent_id,
        AccountId::new_v4(),
        origin,
        started,
        std::time::Duration::from_secs(60),
        Retention::default(),
    )
}

fn rand_tail() -> [u8; 10] {
    let mut tail = [0; 10];
    tail.copy_from_slice(&Uuid::new_v4().as_bytes()[..10]);
    tail
}

#[tokio::test]
async fn events_are_read_back_after_a_sequence_number() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let now = Utc::now();
    let record = run(AgentId::new_v4(), RunType::Api, now);
    assert!(runs.create(&record, Vec::new()).await.unwrap());
    assert!(!runs.create(&record, Vec::new()).await.unwrap(), "a run id is written once");
    let mut events = vec![(
        1,
        RunEvent::Metadata {
            run_id: record.run_id,
            agent_id: record.agent_id,
            trace_id: record.trace_id().map(str::to_owned),
        },
    )];
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
    let second = run(agent, RunType::Schedule, now + Duration::milliseconds(1));
    runs.create(&second, Vec::new()).await.unwrap();
    runs.create(&run(AgentId::new_v4(), RunType::Api, now), Vec::new()).await.unwrap();

    first.finish(&Ok("answer".into()), Bill { usage: Usage::tokens(3, 4), cost: None }, 2, now + Duration::seconds(2));
    assert!(runs.finish(&first, 1, Vec::new(), Utc::now(), false).await.unwrap());
    let mut again = first.clone();
    again.finish(&Err((FailureReason::Cancelled, "late cancel".into())), Bill::default(), 2, now);
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
    late.finish(&Ok("too late".into()), Bill::default(), 1, Utc::now());
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
    let base = Utc::now();
    for i in 0..5 {
        let started = base + Duration::milliseconds(i);
        let mut record = run(agent_id, if i % 2 == 0 { RunType::Api } else { RunType::Schedule }, started);
        record.account_id = account.into();
        if record.run_type == RunType::Schedule {
            record.schedule_id = Some(schedule);
        }
        runs.create(&record, Vec::new()).await.unwrap();
        if i == 0 {
            record.finish(&Ok("done".into()), Bill::default(), 1, Utc::now());
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

fn ids(runs: &[RunRecord]) -> Vec<RunId> {
    runs.iter().map(|run| run.run_id).collect()
}

/// The entries each Query since the last reset read (its `ScannedCount`), in order.
fn scanned_counts(stack: &TestStack) -> Vec<u64> {
    let exchanges = stack.calls.exchanges();
    let queries = exchanges.iter().filter(|exchange| exchange.operation == "Query");
    queries.map(|exchange| exchange.response["ScannedCount"].as_u64().unwrap_or(0)).collect()
}

/// `count` runs of `agent`, a millisecond apart from `start`, of the types given in turn.
async fn create_runs(
    runs: &RunStore,
    agent: AgentId,
    start: DateTime<Utc>,
    types: &[RunType],
    count: i64,
) -> Vec<RunRecord> {
    let mut created = Vec::new();
    for i in 0..count {
        let record = run(agent, types[usize::try_from(i).unwrap() % types.len()], start + Duration::milliseconds(i));
        assert!(runs.create(&record, Vec::new()).await.unwrap());
        created.push(record);
    }
    created
}

#[tokio::test]
async fn unfiltered_pages_match_the_full_read_at_every_depth_and_read_only_down_to_it() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let agent = AgentId::new_v4();
    let now = Utc::now();
    // One lost run among them: listed as failed by timeout.
    let created = create_runs(&runs, agent, now - Duration::hours(1), &[RunType::Api], 1).await;
    create_runs(&runs, agent, now, &[RunType::Api], 22).await;
    runs.create(&run(AgentId::new_v4(), RunType::Api, now), Vec::new()).await.unwrap();

    // The first list tallies the agent's runs from before counts (none): the whole index once.
    stack.calls.reset();
    let first = runs.page_for_agent(agent, &RunFilter::default(), 0, 5, now).await.unwrap();
    assert_eq!(stack.calls.operations(), ["Query", "Query", "UpdateItem"]);
    assert_eq!(first.total, 23);
    let full = runs.list_for_agent(agent, &RunFilter::default(), now).await.unwrap();
    assert_eq!(full.len(), 23);
    assert_eq!(ids(&first.runs), ids(&full[..5]));
    assert_eq!(full.last().map(|run| (run.run_id, run.status)), Some((created[0].run_id, RunStatus::Failed)));

    for (skip, take) in [(0, 1), (0, 5), (5, 5), (10, 10), (20, 5), (22, 1), (0, 23), (0, 100), (3, 20)] {
        stack.calls.reset();
        let page = runs.page_for_agent(agent, &RunFilter::default(), skip, take, now).await.unwrap();
        let end = (skip + take).min(full.len());
        assert_eq!(page.runs, full[skip..end].to_vec(), "skip {skip}, take {take}");
        assert_eq!(page.total, 23);
        // The counts (a Query without `Limit`), then the index down to the page's depth.
        let limits = stack.calls.query_limits();
        assert_eq!(limits[0], None);
        assert!(limits[1..].iter().all(|limit| limit.is_some_and(|l| l as usize <= end)), "{limits:?}");
        assert!(stack.calls.operations().iter().all(|op| op == "Query"));
    }
    // A page past the end reads the counts only.
    for (skip, take) in [(23, 5), (40, 10)] {
        stack.calls.reset();
        let page = runs.page_for_agent(agent, &RunFilter::default(), skip, take, now).await.unwrap();
        assert_eq!((page.runs.len(), page.total), (0, 23));
        assert_eq!(stack.calls.operations(), ["Query"]);
    }
}

#[tokio::test]
async fn filtered_pages_match_the_full_read_and_read_only_their_cells_down_to_the_depth() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let agent = AgentId::new_v4();
    let now = Utc::now();
    let schedule = ScheduleId::now_v7();
    let other_schedule = ScheduleId::now_v7();
    // 60 runs: api, queue and schedule runs of two schedules; some succeed, some fail, some run
    // on, two are lost (past their deadline, not yet recorded by the sweep).
    let mut created = Vec::new();
    for i in 0..60 {
        let started = if i == 4 || i == 31 {
            now - Duration::hours(2) + Duration::milliseconds(i)
        } else {
            now + Duration::milliseconds(i)
        };
        let run_type = [RunType::Api, RunType::Queue, RunType::Schedule][usize::try_from(i % 3).unwrap()];
        let mut record = run(agent, run_type, started);
        if run_type == RunType::Schedule {
            record.schedule_id = Some(if i % 2 == 0 { schedule } else { other_schedule });
        }
        assert!(runs.create(&record, Vec::new()).await.unwrap());
        match i % 5 {
            0 | 1 if i != 4 && i != 31 => record.finish(&Ok("ok".into()), Bill::default(), 1, now),
            2 if i != 4 && i != 31 => record.finish(&Err((FailureReason::Error, "no".into())), Bill::default(), 1, now),
            _ => continue,
        }
        assert!(runs.finish(&record, 1, Vec::new(), now, false).await.unwrap());
        created.push(record);
    }
    // Runs of another agent, in the same cells, are in none of this agent's lists.
    create_runs(&runs, AgentId::new_v4(), now, &[RunType::Api, RunType::Schedule], 6).await;
    runs.page_for_agent(agent, &RunFilter::default(), 0, 1, now).await.unwrap();

    let mut filters = Vec::new();
    for status in [None, Some(RunStatus::Started), Some(RunStatus::Success), Some(RunStatus::Failed)] {
        for run_type in [None, Some(RunType::Api), Some(RunType::Schedule)] {
            for schedule_id in [None, Some(schedule)] {
                filters.push(RunFilter { status, run_type, schedule_id });
            }
        }
    }
    stack.calls.keep_bodies(true);
    for filter in filters.iter().filter(|filter| !filter.is_empty()) {
        let full = runs.list_for_agent(agent, filter, now).await.unwrap();
        assert!(full.iter().all(|run| filter.matches(run) && run.agent_id == agent));
        for (skip, take) in [(0, 1), (0, 5), (3, 4), (0, 100), (7, 7)] {
            stack.calls.reset();
            let page = runs.page_for_agent(agent, filter, skip, take, now).await.unwrap();
            let end = (skip + take).min(full.len());
            let expected = full.get(skip..end).unwrap_or_default();
            assert_eq!(page.total, full.len(), "{filter:?}");
            assert_eq!(page.runs, expected.to_vec(), "{filter:?} skip {skip} take {take}");
            // Each cell's Query reads at most the page's depth (and a `started` list as many
            // more as lost runs it skips); the lost-run Query reads the lost ones only.
            let most = u64::try_from(end + 2).unwrap();
            let scanned = scanned_counts(&stack);
            assert!(scanned.iter().skip(1).all(|n| *n <= most), "{filter:?}: {scanned:?}");
            let cells = if filter.status.is_some() { 1 } else { 3 } * if filter.run_type.is_some() { 1 } else { 3 };
            let lost_query = usize::from(matches!(filter.status, Some(RunStatus::Started | RunStatus::Failed)));
            assert!(scanned.len() <= 1 + cells + lost_query, "{filter:?}: {scanned:?}");
        }
    }
    // The lost runs read `failed`, and are counted so until the sweep records them.
    let failed = RunFilter { status: Some(RunStatus::Failed), ..RunFilter::default() };
    let page = runs.page_for_agent(agent, &failed, 0, 100, now).await.unwrap();
    assert_eq!(page.runs.iter().filter(|run| run.failure_reason == Some(FailureReason::Timeout)).count(), 2);
    let lost = runs
        .get_stored(page.runs.iter().find(|run| run.failure_reason == Some(FailureReason::Timeout)).unwrap().run_id)
        .await
        .unwrap()
        .unwrap();
    let mut swept = lost.clone().settled(now);
    assert!(runs.finish(&swept, 1, Vec::new(), now, true).await.unwrap(), "the sweep records it");
    let after = runs.page_for_agent(agent, &failed, 0, 100, now).await.unwrap();
    assert_eq!((after.total, ids(&after.runs)), (page.total, ids(&page.runs)), "the same list, now from the counts");
    let started = RunFilter { status: Some(RunStatus::Started), ..RunFilter::default() };
    assert_eq!(
        runs.page_for_agent(agent, &started, 0, 100, now).await.unwrap().total,
        runs.list_for_agent(agent, &started, now).await.unwrap().len()
    );
    // A purge takes its run out of its cell's count, once.
    swept = runs.get_stored(swept.run_id).await.unwrap().unwrap();
    runs.delete(&swept, now).await.unwrap();
    runs.delete(&swept, now).await.unwrap();
    assert_eq!(runs.page_for_agent(agent, &failed, 0, 100, now).await.unwrap().total, page.total - 1);
    // A lost run purged before the sweep is taken out of the `started` count it is in.
    let other_lost = page
        .runs
        .iter()
        .find(|run| run.failure_reason == Some(FailureReason::Timeout) && run.run_id != swept.run_id)
        .unwrap();
    let stored = runs.get_stored(other_lost.run_id).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Started);
    runs.delete(&stored, now).await.unwrap();
    for filter in [&failed, &started, &RunFilter::default()] {
        let page = runs.page_for_agent(agent, filter, 0, 100, now).await.unwrap();
        assert_eq!(ids(&page.runs), ids(&runs.list_for_agent(agent, filter, now).await.unwrap()), "{filter:?}");
        assert_eq!(page.total, page.runs.len(), "{filter:?}");
    }
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
    // Runs of one agent started at once collide on its day's bucket and are sent again.
    let burst: Vec<RunRecord> = (0..8).map(|_| run(agent, RunType::Api, now)).collect();
    for created in futures_util::future::join_all(burst.iter().map(|record| runs.create(record, Vec::new()))).await {
        assert!(created.unwrap());
    }
    assert_eq!(total(runs.clone()).await, 11);

    // A purge uncounts the run once, however often it is sent.
    let stored = runs.get_stored(second.run_id).await.unwrap().unwrap();
    runs.delete(&stored, now).await.unwrap();
    runs.delete(&stored, now).await.unwrap();
    assert_eq!(total(runs.clone()).await, 10);
    assert!(runs.get(second.run_id, now).await.unwrap().is_none());
    let counts = runs.counts(agent, now).await.unwrap();
    assert_eq!((counts.of("started.api"), counts.of("started.schedule")), (9, 1));
    assert!(counts.tally.all_counted());
}

#[tokio::test]
async fn runs_past_their_retention_are_gone_from_reads_and_counts_before_ttl_deletes_them() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let agent = AgentId::new_v4();
    let retention = runs.retention();
    let day = Utc::now() - Duration::days(200);
    let mut old = create_runs(&runs, agent, day, &[RunType::Api, RunType::Queue], 4).await;
    for record in &mut old {
        record.finish(&Ok("ok".into()), Bill::default(), 1, day);
        assert!(runs.finish(record, 1, Vec::new(), day, false).await.unwrap());
    }
    let later = create_runs(&runs, agent, day + Duration::days(2), &[RunType::Api], 3).await;
    let success = RunFilter { status: Some(RunStatus::Success), ..RunFilter::default() };
    let on = |now| {
        let runs = runs.clone();
        let success = success.clone();
        async move {
            let all = runs.page_for_agent(agent, &RunFilter::default(), 0, 100, now).await.unwrap();
            let succeeded = runs.page_for_agent(agent, &success, 0, 100, now).await.unwrap();
            (all.total, all.runs.len(), succeeded.total, succeeded.runs.len())
        }
    };
    let expiry = DateTime::from_timestamp(old[0].expires_at.unwrap(), 0).unwrap();
    assert_eq!(expiry, retention.expires_at(old[0].run_id));
    let just_before = expiry - Duration::seconds(1);
    assert_eq!(on(just_before).await, (7, 7, 4, 4));
    assert!(runs.get(old[0].run_id, just_before).await.unwrap().is_some());
    // DynamoDB Local never expires items: they are still stored, and read as gone.
    assert_eq!(on(expiry).await, (3, 3, 0, 0));
    assert!(runs.get(old[0].run_id, expiry).await.unwrap().is_none());
    assert!(runs.get_stored(old[0].run_id).await.unwrap().is_some(), "TTL has not deleted it");
    assert!(
        runs.list_for_agent(agent, &RunFilter::default(), expiry)
            .await
            .unwrap()
            .iter()
            .all(|run| later.iter().any(|l| l.run_id == run.run_id))
    );
    let all_gone = DateTime::from_timestamp(later[0].expires_at.unwrap(), 0).unwrap();
    assert_eq!(on(all_gone).await, (0, 0, 0, 0));
    // A bucket expires with its runs.
    let bucket = stack
        .dynamodb
        .get_item()
        .table_name(stack.setting("RUN_COUNTS_TABLE"))
        .key("agent_id", aws_sdk_dynamodb::types::AttributeValue::S(agent.to_string()))
        .key("day", aws_sdk_dynamodb::types::AttributeValue::S(day.format("%Y-%m-%d").to_string()))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(bucket["expires_at"].as_n().unwrap(), &old[0].expires_at.unwrap().to_string());
}

/// Runs as a version before counts stored them: no expiry, no cell, no count.
fn legacy(agent: AgentId, started: DateTime<Utc>) -> RunRecord {
    RunRecord { expires_at: None, ..run(agent, RunType::Api, started) }
}

#[tokio::test]
async fn runs_stored_before_counts_are_read_whole_until_none_is_left() {
    let stack = TestStack::new().await;
    let runs = store(&stack);
    let agent = AgentId::new_v4();
    let now = Utc::now();
    let mut old = Vec::new();
    for i in 0..4 {
        let record = legacy(agent, now - Duration::days(400) + Duration::milliseconds(i));
        runs.create(&record, Vec::new()).await.unwrap();
        old.push(record);
    }
    create_runs(&runs, agent, now, &[RunType::Api], 2).await;
    let counts = runs.counts(agent, now).await.unwrap();
    assert_eq!((counts.of("started.api"), counts.tally.tallied), (2, false));

    // Runs from before retention never expire; the first list reads whole and tallies them.
    stack.calls.reset();
    let page = runs.page_for_agent(agent, &RunFilter::default(), 0, 2, now).await.unwrap();
    assert_eq!(page.total, 6);
    assert_eq!(stack.calls.operations(), ["Query", "Query", "UpdateItem"], "read whole, then tallied");
    let counts = runs.counts(agent, now).await.unwrap();
    assert_eq!((counts.tally.legacy, counts.tally.all_counted()), (Some(4), false));
    // While any is left, lists are read whole and right, filtered or not, and tally no more.
    let full = runs.list_for_agent(agent, &RunFilter::default(), now).await.unwrap();
    stack.calls.reset();
    let page = runs.page_for_agent(agent, &RunFilter::default(), 2, 2, now).await.unwrap();
    assert_eq!((ids(&page.runs), page.total), (ids(&full[2..4]), 6));
    assert_eq!(stack.calls.operations(), ["Query", "Query"]);
    let api = RunFilter { run_type: Some(RunType::Api), ..RunFilter::default() };
    assert_eq!(runs.page_for_agent(agent, &api, 0, 10, now).await.unwrap().total, 6);

    // A purge of an old run is taken from the tally, of a new one from its cell; once no old
    // run is left, lists read the counts and the cells.
    for record in &old {
        // Lost long ago: the sweep records it.
        let swept = runs.get_stored(record.run_id).await.unwrap().unwrap().settled(now);
        assert!(runs.finish(&swept, 1, Vec::new(), now, true).await.unwrap());
        let stored = runs.get_stored(record.run_id).await.unwrap().unwrap();
        assert!(stored.expires_at.is_none(), "an old run ends without joining the counts");
        runs.delete(&stored, now).await.unwrap();
    }
    let newest = runs.get_stored(full[0].run_id).await.unwrap().unwrap();
    runs.delete(&newest, now).await.unwrap();
    let counts = runs.counts(agent, now).await.unwrap();
    assert_eq!((counts.tally.legacy, counts.of("started.api")), (Some(0), 1));
    stack.calls.reset();
    let page = runs.page_for_agent(agent, &api, 0, 10, now).await.unwrap();
    assert_eq!((ids(&page.runs), page.total), (ids(&full[1..2]), 1));
    assert_eq!(stack.calls.operations(), ["Query", "Query", "BatchGetItem"], "counts, one cell, the page");

    // An agent with only old runs, one purged just now: its index may still show the purged run,
    // so no tally until `INDEX_SETTLE` has passed; each list is read whole and right meanwhile.
    let agent = AgentId::new_v4();
    let mut old = Vec::new();
    for i in 0..3 {
        let record = legacy(agent, now + Duration::milliseconds(i));
        runs.create(&record, Vec::new()).await.unwrap();
        old.push(record);
    }
    runs.delete(&old[1], now).await.unwrap();
    let soon = now + Duration::seconds(10);
    stack.calls.reset();
    let page = runs.page_for_agent(agent, &RunFilter::default(), 0, 10, soon).await.unwrap();
    assert_eq!((ids(&page.runs), page.total), (vec![old[2].run_id, old[0].run_id], 2));
    assert_eq!(stack.calls.operations(), ["Query", "Query"], "not tallied yet");
    let later = now + INDEX_SETTLE + Duration::seconds(1);
    runs.page_for_agent(agent, &RunFilter::default(), 0, 10, later).await.unwrap();
    let counts = runs.counts(agent, later).await.unwrap();
    assert_eq!((counts.tally.legacy, counts.tally.tallied), (Some(2), true));
}
