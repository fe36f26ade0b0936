//! Schedules: the routes with their statuses, and the scheduler tick with an injected clock
//! (never sleeping): exactly once per due time under overlapping ticks, the missed-window policy,
//! skip on overlap, disabled / not-yet-started / ended / deleted-agent schedules, manual triggers,
//! the run recorded with its schedule and its end recorded on the schedule, tenant isolation.

use agent_runtime::queue::RunWorker;
use agent_runtime::scheduler::Scheduler;
use chrono::{DateTime, Utc};
use http::Method;
use integration_tests::model_server::{ModelServer, text_reply};
use integration_tests::{TestClient, TestClock, TestStack};
use platform_api::{AgentsService, SchedulesService, WebhooksService};
use platform_data::ids::AgentId;
use serde_json::{Value, json};
use uuid::Uuid;

/// An account's key and a config agent on a model served by `model`: (key, agent id).
async fn agent(stack: &TestStack, clock: &TestClock, model: &ModelServer) -> (String, String) {
    let key = stack.api_key(Uuid::new_v4()).await;
    let lm = stack.language_model(clock, &key, "lm", &model.base_url()).await;
    let agent = stack
        .client::<AgentsService>(clock)
        .with_key(&key)
        .post(
            "/agents/",
            json!({"type": "config", "name": "Scheduled", "framework": "chainlib", "language_model_id": lm}),
        )
        .created()
        .await;
    (key, agent)
}

fn at(value: &Value) -> DateTime<Utc> {
    value.as_str().and_then(|text| text.parse().ok()).unwrap_or_else(|| panic!("not a time: {value}"))
}

/// Moves the clock to `when` (never back).
fn advance_to(clock: &TestClock, when: DateTime<Utc>) {
    let seconds = (when - clock.now()).num_seconds();
    if seconds > 0 {
        clock.advance(seconds + 1);
    }
}

async fn schedule(schedules: &TestClient, id: &str) -> Value {
    schedules.get(&format!("/agents/schedules/{id}")).expect(200).await["data"].clone()
}

/// The run ids waiting on the runner queue (received and deleted).
async fn queued_runs(stack: &TestStack) -> Vec<String> {
    let queue = stack.run_queue();
    let mut runs = Vec::new();
    loop {
        let messages = queue.sqs().receive(std::time::Duration::from_secs(0)).await.unwrap();
        if messages.is_empty() {
            return runs;
        }
        for message in messages {
            let body: Value = serde_json::from_str(&message.body).unwrap();
            runs.push(body["run_id"].as_str().unwrap().to_owned());
            queue.sqs().delete(&message.receipt_handle).await.unwrap();
        }
    }
}

#[tokio::test]
async fn schedules_are_created_read_listed_replaced_and_deleted_with_their_next_runs() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let schedules = stack.client::<SchedulesService>(&clock).with_key(&key);
    let created = schedules
        .post(
            &format!("/agents/{agent}/schedule"),
            json!({"cron_expression": "0 9 * * MON-FRI", "timezone": "Europe/Berlin", "message": "Daily report",
            "metadata": {"team": "ops"}}),
        )
        .expect(201)
        .await["data"]
        .clone();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!((created["agent_id"].as_str(), created["enabled"].as_bool()), (Some(agent.as_str()), Some(true)));
    assert_eq!((created["overlap_policy"].as_str(), created["skipped_count"].as_u64()), (Some("skip"), Some(0)));
    assert_eq!(created["last_run_at"], Value::Null);
    let next_runs: Vec<DateTime<Utc>> = created["next_runs"].as_array().unwrap().iter().map(at).collect();
    assert_eq!(next_runs.len(), 5);
    assert_eq!(next_runs[0], at(&created["next_run_at"]));
    assert!(next_runs.windows(2).all(|pair| pair[0] < pair[1]));
    let berlin: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    for run in &next_runs {
        let local = run.with_timezone(&berlin);
        assert_eq!(local.format("%H:%M").to_string(), "09:00");
        assert!(!["Sat", "Sun"].contains(&local.format("%a").to_string().as_str()));
    }

    assert_eq!(schedule(&schedules, &id).await["message"], "Daily report");
    let listed = schedules.get(&format!("/agents/schedules?agent_id={agent}")).expect(200).await;
    assert_eq!(
        (listed["data"][0]["id"].as_str(), listed["pagination"]["total"].as_u64()),
        (Some(id.as_str()), Some(1))
    );
    let all = schedules.get("/agents/schedules?limit=1&page=1").expect(200).await;
    assert_eq!(all["pagination"], json!({"page": 1, "limit": 1, "total": 1, "pages": 1}));

    let replaced = schedules
        .put(&format!("/agents/schedules/{id}"), json!({"cron_expression": "rate(1 hour)", "enabled": false}))
        .expect(200)
        .await["data"]
        .clone();
    assert_eq!((replaced["enabled"].as_bool(), replaced["next_run_at"].clone()), (Some(false), Value::Null));
    assert_eq!(replaced["next_runs"], json!([]));
    assert_eq!(
        (replaced["message"].as_str(), replaced["timezone"].as_str()),
        (Some("Daily report"), Some("Europe/Berlin"))
    );

    assert_eq!(schedules.delete(&format!("/agents/schedules/{id}")).expect(200).await["data"], Value::Null);
    schedules.get(&format!("/agents/schedules/{id}")).error(404, "RESOURCE_NOT_FOUND").await;
    schedules.delete(&format!("/agents/schedules/{id}")).expect(404).await;
}

#[tokio::test]
async fn refused_schedules_get_the_spec_s_statuses_naming_the_field() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let schedules = stack.client::<SchedulesService>(&clock).with_key(&key);
    let path = format!("/agents/{agent}/schedule");
    let refused = |body: Value| schedules.post(&path, body);
    let base = |patch: Value| {
        let mut body = json!({"cron_expression": "*/5 * * * *", "message": "m"});
        if let (Value::Object(body), Value::Object(patch)) = (&mut body, patch) {
            body.extend(patch);
        }
        body
    };
    // 422: the format.
    for (patch, field) in [
        (json!({"cron_expression": "61 * * * *"}), "cron_expression"),
        (json!({"cron_expression": "every day"}), "cron_expression"),
        (json!({"cron_expression": 5}), "cron_expression"),
        (json!({"enabled": "yes"}), "enabled"),
        (json!({"timeout": -1}), "timeout"),
        (json!({"overlap_policy": "queue"}), "overlap_policy"),
        (json!({"start_at": "tomorrow"}), "start_at"),
        (json!({"message": ""}), "message"),
        (json!({"colour": "blue"}), "colour"),
    ] {
        let error = refused(base(patch.clone())).error(422, "VALIDATION_ERROR").await;
        assert!(error["details"][field].is_string(), "{patch}");
    }
    let missing = refused(json!({"message": "m"})).error(422, "VALIDATION_ERROR").await;
    assert_eq!(missing["details"]["cron_expression"], "is required");
    // 400: a configuration that cannot work.
    for (patch, field) in [
        (json!({"timezone": "Mars/Olympus"}), "timezone"),
        (json!({"cron_expression": "0 0 30 2 *"}), "cron_expression"),
        (json!({"cron_expression": "cron(0 0 1 1 ? 2020)"}), "cron_expression"),
        (json!({"start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}), "end_at"),
        (json!({"end_at": "2020-01-01T00:00:00Z"}), "end_at"),
    ] {
        let error = refused(base(patch.clone())).error(400, "BAD_REQUEST").await;
        assert!(error["details"][field].is_string(), "{patch}");
    }
    // 404: the agent; 422: an id that is not one.
    let unknown = Uuid::new_v4();
    schedules.post(&format!("/agents/{unknown}/schedule"), base(json!({}))).expect(404).await;
    schedules.get(&format!("/agents/schedules?agent_id={unknown}")).expect(404).await;
    let error = schedules.get("/agents/schedules?agent_id=nope").error(422, "VALIDATION_ERROR").await;
    assert_eq!(error["details"]["agent_id"], "must be a UUID");
    let error = schedules.get("/agents/schedules/nope").error(422, "VALIDATION_ERROR").await;
    assert_eq!(error["details"]["schedule_id"], "must be a UUID");
    schedules.request(Method::PATCH, "/agents/schedules").expect(405).await;
}

#[tokio::test]
async fn another_account_s_schedules_are_not_found() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let schedules = stack.client::<SchedulesService>(&clock).with_key(&key);
    let id = schedules
        .post(&format!("/agents/{agent}/schedule"), json!({"cron_expression": "@daily", "message": "m"}))
        .created()
        .await;
    let other = stack.api_key(Uuid::new_v4()).await;
    for (method, path, body) in [
        (Method::GET, format!("/agents/schedules/{id}"), None),
        (Method::PUT, format!("/agents/schedules/{id}"), Some(json!({"message": "mine now"}))),
        (Method::DELETE, format!("/agents/schedules/{id}"), None),
        (Method::POST, format!("/agents/schedules/{id}/trigger"), None),
        (Method::POST, format!("/agents/{agent}/schedule"), Some(json!({"cron_expression": "@daily", "message": "m"}))),
        (Method::GET, format!("/agents/schedules?agent_id={agent}"), None),
    ] {
        schedules.with_key(&other).request(method, &path).json(body).error(404, "RESOURCE_NOT_FOUND").await;
    }
    let listed = schedules.with_key(&other).get("/agents/schedules").expect(200).await;
    assert_eq!(listed["data"], json!([]));
    assert_eq!(schedule(&schedules, &id).await["message"], "m", "untouched");
}

#[tokio::test]
async fn overlapping_ticks_fire_a_due_time_exactly_once_and_the_run_carries_its_schedule() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let schedules = stack.client::<SchedulesService>(&clock).with_key(&key);
    let created = schedules
        .post(
            &format!("/agents/{agent}/schedule"),
            json!({"cron_expression": "*/5 * * * *", "message": "Tick", "overlap_policy": "allow"}),
        )
        .expect(201)
        .await["data"]
        .clone();
    let id = created["id"].as_str().unwrap().to_owned();
    let due = at(&created["next_run_at"]);
    let scheduler = stack.service::<Scheduler>(&clock);
    // Not due yet: nothing.
    assert_eq!(scheduler.tick(clock.now()).await.unwrap().fired, 0);
    advance_to(&clock, due);
    assert_eq!(scheduler.tick(clock.now()).await.unwrap().fired, 1);
    // A repeated tick (EventBridge may deliver one twice) does nothing more.
    assert_eq!(scheduler.tick(clock.now()).await.unwrap().fired, 0);
    let queued = queued_runs(&stack).await;
    assert_eq!(queued.len(), 1);
    // schedule.triggered was published once for the due time, naming its run.
    let events = stack.client::<WebhooksService>(&clock).with_key(&key).get("/webhooks/events").expect(200).await;
    let triggered: Vec<&Value> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["type"] == "schedule.triggered" && event["data"]["run_id"] == queued[0].as_str())
        .collect();
    assert_eq!(triggered.len(), 1);
    assert_eq!(triggered[0]["data"]["manual"], false);
    // A tick that died after claiming the due time and before moving the schedule on (played by
    // putting the schedule back) is completed by the next one: the same run is sent again, and
    // no second run is made.
    let moved_record = stack.schedules().get(stack.account_of(&key).await, id.parse().unwrap()).await.unwrap();
    let mut stale = moved_record.clone().unwrap();
    stale.set_next(Some(due));
    stale.last_run_id = None;
    stack.schedules().put(&stale).await.unwrap();
    scheduler.tick(clock.now()).await.unwrap();
    let resent = queued_runs(&stack).await;
    assert!(resent.iter().all(|run| *run == queued[0]), "{resent:?}");
    // Overlapping ticks at the next due time: one run for it, whatever their interleaving.
    advance_to(&clock, due + chrono::Duration::minutes(5));
    let (a, b, c) = tokio::join!(scheduler.tick(clock.now()), scheduler.tick(clock.now()), scheduler.tick(clock.now()));
    assert_eq!([a, b, c].into_iter().map(|report| report.unwrap().fired).sum::<usize>(), 1, "one tick claims it");
    // The others may send the claimed run again, as they would complete a tick that died: the
    // same run id, which the worker executes once.
    let mut overlapping = queued_runs(&stack).await;
    overlapping.dedup();
    assert_eq!(overlapping.len(), 1, "one run id for one due time");
    assert_ne!(overlapping[0], queued[0]);
    let runs = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .get(&format!("/agents/{agent}/runs?run_type=schedule&schedule_id={id}"))
        .expect(200)
        .await;
    assert_eq!(runs["data"].as_array().unwrap().len(), 2, "two due times, two runs");
    assert_eq!(runs["data"][1]["id"].as_str(), Some(queued[0].as_str()));
    assert_eq!(runs["data"][1]["input"]["message"], "Tick");
    assert_eq!(runs["data"][1]["run_type"], "schedule");
    // The creates the resent and overlapping ticks had refused counted nothing: the agent's run
    // count says two, on the first unfiltered list (which reads the index whole and tallies) and
    // on the next (which reads the count).
    for _ in 0..2 {
        let all = stack
            .client::<AgentsService>(&clock)
            .with_key(&key)
            .get(&format!("/agents/{agent}/runs"))
            .expect(200)
            .await;
        assert_eq!(all["pagination"]["total"], 2);
    }
    let counts = stack.runs().counts(agent.parse().unwrap(), clock.now()).await.unwrap();
    assert_eq!((counts.runs(), counts.tally.all_counted()), (2, true));

    let moved = schedule(&schedules, &id).await;
    assert_eq!(at(&moved["next_run_at"]), due + chrono::Duration::minutes(10));
    assert_eq!(
        (moved["last_run_id"].as_str(), moved["last_run_status"].as_str()),
        (Some(overlapping[0].as_str()), Some("started"))
    );
    assert_eq!(at(&moved["last_run_at"]), due + chrono::Duration::minutes(5));
}

#[tokio::test]
async fn after_downtime_a_schedule_fires_once_for_the_missed_window() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let schedules = stack.client::<SchedulesService>(&clock).with_key(&key);
    let created = schedules
        .post(
            &format!("/agents/{agent}/schedule"),
            json!({"cron_expression": "* * * * *", "message": "m", "overlap_policy": "allow"}),
        )
        .expect(201)
        .await["data"]
        .clone();
    clock.advance(3 * 3600);
    let scheduler = stack.service::<Scheduler>(&clock);
    let report = scheduler.tick(clock.now()).await.unwrap();
    assert_eq!(report.fired, 1, "180 missed minutes fire once");
    let moved = schedule(&schedules, created["id"].as_str().unwrap()).await;
    assert!(at(&moved["next_run_at"]) > clock.now(), "the next due time is after now");
    assert_eq!(at(&moved["last_run_at"]), at(&created["next_run_at"]), "the oldest missed time is the one fired");
    // The other minutes that passed were merged into that run, and counted.
    let merged = (clock.now() - at(&created["next_run_at"])).num_minutes();
    assert_eq!(moved["skipped_count"].as_i64(), Some(merged));
}

#[tokio::test]
async fn skip_on_overlap_counts_the_skip_and_allow_fires_anyway() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let schedules = stack.client::<SchedulesService>(&clock).with_key(&key);
    // Runs that are never executed stay `started` (not lost) for their hour.
    let skip = schedules
        .post(
            &format!("/agents/{agent}/schedule"),
            json!({"cron_expression": "*/10 * * * *", "message": "s", "timeout": 3600}),
        )
        .expect(201)
        .await["data"]
        .clone();
    let allow = schedules
        .post(
            &format!("/agents/{agent}/schedule"),
            json!({"cron_expression": "*/10 * * * *", "message": "a", "overlap_policy": "allow"}),
        )
        .expect(201)
        .await["data"]
        .clone();
    let scheduler = stack.service::<Scheduler>(&clock);
    advance_to(&clock, at(&skip["next_run_at"]));
    assert_eq!(scheduler.tick(clock.now()).await.unwrap().fired, 2);
    // Nobody executes the runs: they are still `started` at the next due time.
    advance_to(&clock, at(&skip["next_run_at"]) + chrono::Duration::minutes(10));
    let report = scheduler.tick(clock.now()).await.unwrap();
    assert_eq!((report.fired, report.skipped), (1, 1));
    let skipped = schedule(&schedules, skip["id"].as_str().unwrap()).await;
    assert_eq!(skipped["skipped_count"], 1);
    let allowed = schedule(&schedules, allow["id"].as_str().unwrap()).await;
    assert_eq!(allowed["skipped_count"], 0);
    assert_ne!(allowed["last_run_id"], skipped["last_run_id"]);
}

#[tokio::test]
async fn disabled_unstarted_ended_and_deleted_agent_schedules_do_not_fire_and_a_restored_agent_resumes() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let schedules = stack.client::<SchedulesService>(&clock).with_key(&key);
    let later = clock.now() + chrono::Duration::days(2);
    let soon_over = clock.now() + chrono::Duration::minutes(30);
    let disabled = schedules
        .post(
            &format!("/agents/{agent}/schedule"),
            json!({"cron_expression": "* * * * *", "message": "d", "enabled": false}),
        )
        .expect(201)
        .await["data"]
        .clone();
    assert_eq!(disabled["next_run_at"], Value::Null);
    let unstarted = schedules
        .post(
            &format!("/agents/{agent}/schedule"),
            json!({"cron_expression": "* * * * *", "message": "u", "start_at": later.to_rfc3339()}),
        )
        .expect(201)
        .await["data"]
        .clone();
    assert!(at(&unstarted["next_run_at"]) >= later);
    let ending = schedules.post(&format!("/agents/{agent}/schedule"), json!({"cron_expression": "*/10 * * * *", "message": "e", "end_at": soon_over.to_rfc3339(), "overlap_policy": "allow"})).expect(201).await["data"].clone();
    let scheduler = stack.service::<Scheduler>(&clock);
    // Past `end_at`: the last due time inside the window fires, then none is left.
    clock.advance(2 * 3600);
    let report = scheduler.tick(clock.now()).await.unwrap();
    let ended = schedule(&schedules, ending["id"].as_str().unwrap()).await;
    assert_eq!(report.fired, 1, "the missed window fires once, within end_at");
    assert_eq!(ended["next_run_at"], Value::Null);
    assert_eq!(ended["next_runs"], json!([]));
    assert_eq!(schedule(&schedules, disabled["id"].as_str().unwrap()).await["last_run_at"], Value::Null);
    assert_eq!(schedule(&schedules, unstarted["id"].as_str().unwrap()).await["last_run_at"], Value::Null);

    // A deleted agent's schedule is passed over; restoring the agent resumes it.
    let hourly = schedules
        .post(&format!("/agents/{agent}/schedule"), json!({"cron_expression": "0 * * * *", "message": "h"}))
        .expect(201)
        .await["data"]
        .clone();
    let agents = stack.client::<AgentsService>(&clock);
    agents.with_key(&key).delete(&format!("/agents/{agent}")).expect(200).await;
    advance_to(&clock, at(&hourly["next_run_at"]));
    queued_runs(&stack).await;
    let report = scheduler.tick(clock.now()).await.unwrap();
    assert_eq!((report.fired, report.passed_over), (0, 1));
    assert!(queued_runs(&stack).await.is_empty());
    agents.with_key(&key).request(Method::POST, &format!("/agents/{agent}/restore")).expect(200).await;
    advance_to(&clock, at(&hourly["next_run_at"]) + chrono::Duration::hours(1));
    let report = scheduler.tick(clock.now()).await.unwrap();
    assert_eq!(report.fired, 1);
    assert_eq!(queued_runs(&stack).await.len(), 1);
}

#[tokio::test]
async fn a_manual_trigger_queues_a_schedule_run_that_the_worker_records_on_the_schedule() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("Scheduled answer.")]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let schedules = stack.client::<SchedulesService>(&clock).with_key(&key);
    let created = schedules
        .post(&format!("/agents/{agent}/schedule"), json!({"cron_expression": "0 0 1 1 *", "message": "Now please"}))
        .expect(201)
        .await["data"]
        .clone();
    let id = created["id"].as_str().unwrap().to_owned();
    let run =
        schedules.request(Method::POST, &format!("/agents/schedules/{id}/trigger")).expect(202).await["data"].clone();
    assert_eq!(
        (run["run_type"].as_str(), run["schedule_id"].as_str(), run["status"].as_str()),
        (Some("schedule"), Some(id.as_str()), Some("started"))
    );
    let after = schedule(&schedules, &id).await;
    assert_eq!(
        (after["last_run_id"].clone(), after["next_run_at"].clone()),
        (run["id"].clone(), created["next_run_at"].clone())
    );

    // The worker executes it and records its end on the schedule.
    let worker = stack.service::<RunWorker>(&clock);
    let messages = stack.run_queue().sqs().receive(std::time::Duration::from_secs(0)).await.unwrap();
    assert_eq!(messages.len(), 1);
    let invocation = integration_tests::worker_invocation("worker");
    assert!(worker.handle_batch(&messages, &invocation).await.is_empty());
    let ended = schedule(&schedules, &id).await;
    assert_eq!(ended["last_run_status"], "success");
    let runs = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .get(&format!("/agents/{agent}/runs?run_type=schedule&schedule_id={id}&status=success"))
        .expect(200)
        .await;
    assert_eq!(runs["data"][0]["output"], "Scheduled answer.");
}

#[tokio::test]
async fn schedule_paths_reach_the_schedules_function_not_the_agents_one() {
    let stack = TestStack::new().await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let template = stack::Template::embedded().unwrap();
    let router =
        dev_server::Router::from_template(&template, &stack.sdk, &stack.prefix, dev_server::BACKEND_API).unwrap();
    let get = |path: &str| {
        integration_tests::request(Method::GET, path).header("x-api-key", &key).body(http_api::Body::Empty).unwrap()
    };
    // `schedules` is not an agent id: API Gateway picks the more specific route.
    let response = router.dispatch(get("/agents/schedules")).await;
    let body: Value = serde_json::from_str(&http_api::body_text(response.body())).unwrap();
    assert_eq!((response.status().as_u16(), body["pagination"]["total"].as_u64()), (200, Some(0)));
    let response = router.dispatch(get(&format!("/agents/schedules/{}", Uuid::new_v4()))).await;
    let body: Value = serde_json::from_str(&http_api::body_text(response.body())).unwrap();
    assert_eq!((response.status().as_u16(), body["error"]["message"].as_str()), (404, Some("Schedule not found.")));
    // Agent paths still reach the agents function.
    let response = router.dispatch(get("/agents/")).await;
    assert_eq!(response.status().as_u16(), 200);
}

#[tokio::test]
async fn a_tick_with_hundreds_due_fires_each_once_with_calls_that_grow_with_what_is_due() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let account = stack.account_of(&key).await;
    let agent: AgentId = agent.parse().unwrap();
    let store = stack.schedules();
    let spec = platform_data::schedules::parse_schedule(
        json!({"cron_expression": "*/5 * * * *", "message": "bulk", "overlap_policy": "allow"}).to_string().as_bytes(),
        None,
    )
    .unwrap();
    let due_count = 150;
    let now = clock.now();
    for i in 0..due_count + 20 {
        let mut schedule = platform_data::schedules::ScheduleRecord::new(account, agent, spec.clone(), now);
        // 150 are due now (two pages); 20 are not due for an hour (they must not be read).
        let next = if i < due_count { now - chrono::Duration::minutes(1) } else { now + chrono::Duration::hours(1) };
        schedule.set_next(Some(next));
        store.put(&schedule).await.unwrap();
    }
    // One account with 150 runs queued at once: above the default quota of queued runs.
    let scheduler = stack.with_settings(&[("QUOTA_QUEUED_RUNS", "1000")]).service::<Scheduler>(&clock);
    stack.calls.reset();
    stack.calls.keep_bodies(true);
    let report = scheduler.tick(clock.now()).await.unwrap();
    assert_eq!(report.fired, due_count);
    // The tick's own calls: those the webhook publisher makes alone (on the webhook tables only)
    // are left out; a transaction that writes a run with its `run.started` is the tick's.
    let webhook_tables = ["WEBHOOK_ENDPOINTS_TABLE", "WEBHOOK_EVENTS_TABLE", "WEBHOOK_DELIVERIES_TABLE"];
    let webhook_tables: Vec<String> = webhook_tables.iter().map(|name| stack.setting(name)).collect();
    let operations: Vec<String> = stack
        .calls
        .exchanges()
        .into_iter()
        .filter(|call| {
            let request = call.request.to_string();
            call.operation == "TransactWriteItems"
                || !webhook_tables.iter().any(|table| request.contains(&format!("\"{table}\"")))
        })
        .map(|call| call.operation)
        .collect();
    let count = |name: &str| operations.iter().filter(|op| *op == name).count();
    // Per page: a Query of the due index, a consistent BatchGetItem of its schedules and one of
    // their agents; per due schedule: its run's place among the account's queued runs
    // (UpdateItem), the claim (UpdateItem), the run, its agent's run count and `run.started`
    // (one TransactWriteItems) and the move (UpdateItem); no Scan.
    // Two pages of the due index, then the sweep of lost runs: one Query per shard.
    assert_eq!(count("Query"), 2 + agent_runtime::runs::OPEN_SHARDS as usize);
    assert_eq!(count("BatchGetItem"), 2 * 2);
    assert_eq!(count("TransactWriteItems"), due_count);
    assert_eq!(count("PutItem"), 0);
    // Each run counted once, though the tick writes 16 at a time to the same count item.
    let counted = stack.runs().counts(agent, clock.now()).await.unwrap();
    assert_eq!(counted.runs(), due_count);
    assert_eq!(count("UpdateItem"), 3 * due_count);
    assert_eq!(count("Scan"), 0);
    let mut queued = queued_runs(&stack).await;
    queued.sort();
    queued.dedup();
    assert_eq!(queued.len(), due_count, "one run per due schedule");
    assert_eq!(scheduler.tick(clock.now()).await.unwrap().fired, 0, "and none again");
}

#[tokio::test]
async fn a_scheduled_run_that_keeps_failing_is_dead_lettered_and_its_schedule_says_failed() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let schedules = stack.client::<SchedulesService>(&clock).with_key(&key);
    let id = schedules
        .post(&format!("/agents/{agent}/schedule"), json!({"cron_expression": "@daily", "message": "m"}))
        .created()
        .await;
    let run = schedules.request(Method::POST, &format!("/agents/schedules/{id}/trigger")).send().await;
    let run_id = run.expect(202)["data"]["id"].as_str().unwrap().to_owned();
    // A worker whose steps table is gone: every delivery fails before the run executes.
    let missing = format!("{}missing-steps", stack.prefix);
    let worker = stack.with_settings(&[("RUN_STEPS_TABLE", &missing)]).service::<RunWorker>(&clock);
    let invocation = integration_tests::worker_invocation("w");
    let message = |count: u32| queues::ReceivedMessage {
        message_id: "m-1".into(),
        receipt_handle: "r-1".into(),
        body: json!({"run_id": run_id}).to_string(),
        receive_count: count,
    };
    // Retried (left for SQS to redeliver), then on its last delivery the run is failed.
    assert_eq!(worker.handle_batch(&[message(1)], &invocation).await, ["m-1"]);
    assert_eq!(schedule(&schedules, &id).await["last_run_status"], "started");
    let last = agent_runtime::queue::MAX_RECEIVES;
    assert_eq!(worker.handle_batch(&[message(last)], &invocation).await, ["m-1"]);
    let after = schedule(&schedules, &id).await;
    assert_eq!(
        (after["last_run_id"].as_str(), after["last_run_status"].as_str()),
        (Some(run_id.as_str()), Some("failed"))
    );
}

#[tokio::test]
async fn a_put_keeps_a_due_time_that_has_passed_so_the_next_tick_still_fires_it() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (key, agent) = agent(&stack, &clock, &model).await;
    let schedules = stack.client::<SchedulesService>(&clock).with_key(&key);
    let created = schedules
        .post(&format!("/agents/{agent}/schedule"), json!({"cron_expression": "*/5 * * * *", "message": "m"}))
        .expect(201)
        .await["data"]
        .clone();
    let id = created["id"].as_str().unwrap().to_owned();
    let due = at(&created["next_run_at"]);
    advance_to(&clock, due);
    // Due, not yet fired: a PUT of other fields keeps it due.
    let put = schedules.put(&format!("/agents/schedules/{id}"), json!({"metadata": {"v": 2}})).expect(200).await;
    assert_eq!(at(&put["data"]["next_run_at"]), due);
    assert_eq!(stack.service::<Scheduler>(&clock).tick(clock.now()).await.unwrap().fired, 1);
    // A PUT that changes the expression moves on from now.
    let put =
        schedules.put(&format!("/agents/schedules/{id}"), json!({"cron_expression": "0 * * * *"})).expect(200).await;
    assert!(at(&put["data"]["next_run_at"]) > clock.now());
    let after = schedule(&schedules, &id).await;
    assert_eq!(
        (after["metadata"]["v"].as_u64(), after["last_run_status"].as_str()),
        (Some(2), Some("started")),
        "the move is kept"
    );
}

/// An every-minute schedule of `agent` that runs whatever its last run is doing: its id.
async fn every_minute(schedules: &TestClient, agent: &str) -> String {
    let body = json!({"cron_expression": "* * * * *", "message": "m", "overlap_policy": "allow"});
    schedules.post(&format!("/agents/{agent}/schedule"), body).created().await
}

/// Stores `change` into the agent's record as records stored before validation could hold it.
async fn store_unchecked(
    stack: &TestStack,
    key: &str,
    agent: &str,
    change: impl FnOnce(&mut platform_data::agents::Agent),
) {
    let store = stack.agents();
    let previous = store.get(stack.account_of(key).await, agent.parse().unwrap()).await.unwrap().unwrap();
    let mut changed = previous.clone();
    change(&mut changed);
    store.replace(&changed, &previous).await.unwrap();
}

#[tokio::test]
async fn a_huge_stored_timeout_neither_panics_the_tick_nor_stops_another_accounts_schedule() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![text_reply("ran"), text_reply("ran")]).await;
    let (huge_key, huge_agent) = agent(&stack, &clock, &model).await;
    let (other_key, other_agent) = agent(&stack, &clock, &model).await;
    // `metadata.timeout: 1e20` panicked in `Duration::from_secs_f64` inside the tick, so the other
    // account's every-minute schedule never fired.
    store_unchecked(&stack, &huge_key, &huge_agent, |agent| {
        agent.spec.metadata.insert("timeout".into(), json!(1e20));
    })
    .await;
    every_minute(&stack.client::<SchedulesService>(&clock).with_key(&huge_key), &huge_agent).await;
    every_minute(&stack.client::<SchedulesService>(&clock).with_key(&other_key), &other_agent).await;
    clock.advance(61);
    let report = stack.service::<Scheduler>(&clock).tick(clock.now()).await.unwrap();
    assert_eq!((report.fired, report.failed), (2, 0), "{report:?}");
    // The huge timeout's run executes with the longest a queued run may take.
    let queued = queued_runs(&stack).await;
    let worker = stack.service::<RunWorker>(&clock);
    let invocation = integration_tests::worker_invocation("w");
    for run_id in &queued {
        let message = queues::ReceivedMessage {
            message_id: run_id.clone(),
            receipt_handle: "r".into(),
            body: json!({"run_id": run_id}).to_string(),
            receive_count: 1,
        };
        assert!(worker.handle_batch(&[message], &invocation).await.is_empty());
    }
    for run_id in queued {
        let run = stack.runs().get(run_id.parse().unwrap(), clock.now()).await.unwrap().unwrap();
        assert_eq!((run.status.as_str(), run.output.as_deref()), ("success", Some("ran")), "{run:?}");
        assert!(run.timeout() <= agent_runtime::timeouts::MAX_QUEUED_RUN_TIMEOUT);
    }
}

#[tokio::test]
async fn a_schedule_whose_decision_fails_is_counted_and_skipped_while_the_others_fire_and_the_sweep_runs() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let model = ModelServer::start(vec![]).await;
    let (broken_key, broken_agent) = agent(&stack, &clock, &model).await;
    let (good_key, good_agent) = agent(&stack, &clock, &model).await;
    let broken_schedules = stack.client::<SchedulesService>(&clock).with_key(&broken_key);
    let good_schedules = stack.client::<SchedulesService>(&clock).with_key(&good_key);
    let broken = every_minute(&broken_schedules, &broken_agent).await;
    let good = every_minute(&good_schedules, &good_agent).await;
    // A run that waits for a worker that never comes: lost once the queue's limit passed.
    let lost = good_schedules.request(Method::POST, &format!("/agents/schedules/{good}/trigger")).send().await;
    let lost = lost.expect(202)["data"]["id"].as_str().unwrap().to_owned();
    // The broken account's agent no longer decodes: its schedule's decision fails every tick.
    let store = stack.agents();
    let (table, key) = store.item_key(stack.account_of(&broken_key).await, broken_agent.parse().unwrap());
    stack
        .dynamodb
        .update_item()
        .table_name(table)
        .set_key(Some(key))
        .update_expression("SET spec = :junk")
        .expression_attribute_values(":junk", aws_sdk_dynamodb::types::AttributeValue::S("{not json".into()))
        .send()
        .await
        .unwrap();
    let due_before = at(&schedule(&broken_schedules, &broken).await["next_run_at"]);

    clock.advance(2 * 3600);
    let scheduler = stack.service::<Scheduler>(&clock);
    let report = scheduler.tick(clock.now()).await.unwrap();
    assert_eq!((report.fired, report.failed, report.lost_runs_ended), (1, 1, 1), "{report:?}");
    let lost = stack.runs().get(lost.parse().unwrap(), clock.now()).await.unwrap().unwrap();
    assert_eq!(lost.status.as_str(), "failed");
    // The failed due time moved on as skipped: it holds no place in the due pages.
    let broken_after = schedule(&broken_schedules, &broken).await;
    assert!(at(&broken_after["next_run_at"]) > clock.now(), "{broken_after}");
    assert!(at(&broken_after["next_run_at"]) > due_before);
    assert!(broken_after["skipped_count"].as_u64().unwrap() >= 1, "{broken_after}");
    // And so every minute: the good schedule fires, the broken one is counted again.
    clock.advance(60);
    let report = scheduler.tick(clock.now()).await.unwrap();
    assert_eq!((report.fired, report.failed), (1, 1), "{report:?}");
    assert_eq!(schedule(&good_schedules, &good).await["last_run_status"], "started");
}
