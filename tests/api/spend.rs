//! What runs spend (issue 49, docs/spend.md): usage and cost on the `done` event, the run record,
//! the runner's monitoring and `run.*` webhooks, a sub-agent priced by its own model; `/usage`
//! from per-day counters; `/budget`, its thresholds, and runs stopped and refused at its limit.

use crate::agent_runs::read_stream;
use integration_tests::model_server::{ModelServer, text_reply, tool_calls_reply};
use integration_tests::{TestClock, TestStack};
use platform_api::{
    AgentRunsService, AgentsService, LanguageModelsService, RunnerService, SpendService, WebhooksService,
};
use serde_json::{Value, json};
use uuid::Uuid;

/// A language model served by `model`, priced at `input` and `output` micro-USD per million tokens.
async fn priced_model(
    stack: &TestStack,
    clock: &TestClock,
    key: &str,
    name: &str,
    model: &ModelServer,
    input: u64,
    output: u64,
) -> String {
    stack
        .client::<LanguageModelsService>(clock)
        .with_key(key)
        .post(
            "/language-models",
            json!({"name": name, "provider": "openai_compatible", "model_name": "m", "base_url": model.base_url(),
                "pricing": {"currency": "USD", "input_per_million_micros": input, "output_per_million_micros": output,
                    "cache_read_per_million_micros": 0, "cache_write_per_million_micros": 0}}),
        )
        .created()
        .await
}

/// A config agent on `model` with `sub_agents`.
async fn config_agent(
    stack: &TestStack,
    clock: &TestClock,
    key: &str,
    name: &str,
    model: &str,
    sub_agents: &[&str],
) -> String {
    stack
        .client::<AgentsService>(clock)
        .with_key(key)
        .post(
            "/agents/",
            json!({"type": "config", "name": name, "framework": "chainlib", "language_model_id": model,
                "description": format!("{name} answers"), "agents": sub_agents}),
        )
        .created()
        .await
}

#[tokio::test]
async fn a_priced_run_reports_its_cost_per_model_with_its_sub_agents_turns_everywhere() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    // The parent's model: two turns, (20 in, 8 out) then (10, 5). The helper's: one turn (10, 5).
    let parent_model = ModelServer::start(vec![
        tool_calls_reply(&[("c1", "Helper", json!({"message": "2+3?"}))]),
        text_reply("Five."),
    ])
    .await;
    let helper_model = ModelServer::start(vec![text_reply("5")]).await;
    // $1.50 in, $10 out per million: 30 × 1.5 + 13 × 10 = 175 micros exactly.
    let parent_lm = priced_model(&stack, &clock, &key, "parent", &parent_model, 1_500_000, 10_000_000).await;
    // $0.333333 in, $4 out per million: 10 × 0.333333 + 5 × 4 = 23.33333 micros, rounded up to 24.
    let helper_lm = priced_model(&stack, &clock, &key, "helper", &helper_model, 333_333, 4_000_000).await;
    let helper = config_agent(&stack, &clock, &key, "Helper", &helper_lm, &[]).await;
    let main = config_agent(&stack, &clock, &key, "Main", &parent_lm, &[&helper]).await;

    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let response = runner.post("/execute/a2a/stream/agent", json!({"agent_id": main, "message": "Add"})).stream().await;
    let task_id = response.headers()["x-run-id"].to_str().unwrap().to_owned();
    let frames = read_stream(response.into_body()).await;
    let done = &frames.last().unwrap().2;
    let usage = json!({"input_tokens": 40, "output_tokens": 18, "cache_read_tokens": 0, "cache_write_tokens": 0});
    let cost = json!({"currency": "USD", "amount_micros": 199});
    assert_eq!((&done["usage"], &done["cost"]), (&usage, &cost), "{done}");

    // The run record, through the backend and the runner's monitoring.
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let run = agents.get(&format!("/agents/{main}/runs/{task_id}")).expect(200).await["data"].clone();
    assert_eq!((&run["usage"], &run["cost"]), (&usage, &cost));
    let task = runner.get(&format!("/monitoring/tasks/{task_id}")).expect(200).await["data"].clone();
    assert_eq!((&task["usage"], &task["cost"]), (&usage, &cost));

    // `run.succeeded` carries them.
    let events = stack.client::<WebhooksService>(&clock).with_key(&key).get("/webhooks/events").expect(200).await;
    let succeeded: Vec<&Value> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["type"] == "run.succeeded" && event["data"]["id"] == task_id.as_str())
        .collect();
    assert_eq!(succeeded.len(), 1);
    assert_eq!((&succeeded[0]["data"]["usage"], &succeeded[0]["data"]["cost"]), (&usage, &cost));

    // A price changed afterwards does not reprice the run.
    stack
        .client::<LanguageModelsService>(&clock)
        .with_key(&key)
        .put(
            &format!("/language-models/{parent_lm}"),
            json!({"name": "parent", "provider": "openai_compatible", "model_name": "m",
                "base_url": parent_model.base_url()}),
        )
        .expect(200)
        .await;
    let again = agents.get(&format!("/agents/{main}/runs/{task_id}")).expect(200).await["data"].clone();
    assert_eq!(again["cost"], cost);
}

#[tokio::test]
async fn an_unpriced_run_has_usage_and_a_null_cost() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let model = ModelServer::start(vec![text_reply("Hi.")]).await;
    let lm = stack.language_model(&clock, &key, "free", &model.base_url()).await;
    let agent = config_agent(&stack, &clock, &key, "Free", &lm, &[]).await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let response = runner.post("/execute/a2a/stream/agent", json!({"agent_id": agent, "message": "Hi"})).stream().await;
    let frames = read_stream(response.into_body()).await;
    let done = &frames.last().unwrap().2;
    assert_eq!(done["usage"]["input_tokens"], 10);
    assert_eq!(done["cost"], Value::Null);
}

/// A budget of `limit` micro-USD with `thresholds`, set through `PUT /budget`.
async fn set_budget(stack: &TestStack, clock: &TestClock, key: &str, limit: Value, thresholds: Value) -> Value {
    stack
        .client::<SpendService>(clock)
        .with_key(key)
        .put("/budget", json!({"currency": "USD", "monthly_limit_micros": limit, "alert_thresholds": thresholds}))
        .expect(200)
        .await["data"]
        .clone()
}

/// A `Main` agent on a model at $10 per million tokens each way (a tool-call turn of 20 + 8 tokens
/// costs 280 micros) with an unpriced `Helper` sub-agent on `helper_model`: (main, helper).
async fn spending_agents(
    stack: &TestStack,
    clock: &TestClock,
    key: &str,
    model: &ModelServer,
    helper_model: &ModelServer,
) -> (String, String) {
    let lm = priced_model(stack, clock, key, "ten", model, 10_000_000, 10_000_000).await;
    let free = stack.language_model(clock, key, "free", &helper_model.base_url()).await;
    let helper = config_agent(stack, clock, key, "Helper", &free, &[]).await;
    (config_agent(stack, clock, key, "Main", &lm, &[&helper]).await, helper)
}

#[tokio::test]
async fn a_budget_stops_a_running_run_and_its_sub_agents_refuses_new_runs_and_announces_its_thresholds_once() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let spend = stack.client::<SpendService>(&clock).with_key(&key);
    let before = spend.get("/budget").expect(200).await["data"].clone();
    assert_eq!((&before["monthly_limit_micros"], &before["used_micros"]), (&Value::Null, &json!(0)));
    let budget = set_budget(&stack, &clock, &key, json!(100), json!([0.5, 1.0])).await;
    let month = clock.now().format("%Y-%m").to_string();
    assert_eq!(
        budget,
        json!({"currency": "USD", "monthly_limit_micros": 100, "alert_thresholds": [0.5, 1.0], "month": month,
            "used_micros": 0, "thresholds_reached": []})
    );
    // Turn 1 (280 micros) asks the helper; the helper's turn and the parent's turn 2 are refused.
    let model = ModelServer::start(vec![tool_calls_reply(&[("c1", "Helper", json!({"message": "?"}))])]).await;
    let helper_model = ModelServer::start(vec![text_reply("never")]).await;
    let (main, _) = spending_agents(&stack, &clock, &key, &model, &helper_model).await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let response = runner.post("/execute/a2a/stream/agent", json!({"agent_id": main, "message": "Go"})).stream().await;
    let frames = read_stream(response.into_body()).await;
    let (_, last, error) = frames.last().unwrap();
    assert_eq!((last.as_str(), &error["failure_reason"]), ("error", &json!("budget_exceeded")), "{error}");
    assert_eq!(error["cost"], json!({"currency": "USD", "amount_micros": 280}));
    let helper_result = frames.iter().find(|(_, name, _)| name == "tool_result").unwrap();
    assert!(helper_result.2["error"].as_str().unwrap().contains("budget"), "{}", helper_result.2);
    assert_eq!((model.requests.lock().unwrap().len(), helper_model.requests.lock().unwrap().len()), (1, 0));

    // Spent: the month's use, both thresholds reached, each announced once.
    let budget = spend.get("/budget").expect(200).await["data"].clone();
    assert_eq!((&budget["used_micros"], &budget["thresholds_reached"]), (&json!(280), &json!([0.5, 1.0])));
    let events = stack.client::<WebhooksService>(&clock).with_key(&key).get("/webhooks/events").expect(200).await;
    let mut announced: Vec<Value> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["type"] == "budget.threshold_reached")
        .map(|event| event["data"].clone())
        .collect();
    announced.sort_by(|a, b| a["threshold"].as_f64().partial_cmp(&b["threshold"].as_f64()).unwrap());
    assert_eq!(
        announced,
        [0.5, 1.0].map(|threshold| json!({"threshold": threshold, "month": month, "limit_micros": 100,
            "used_micros": 280, "currency": "USD"}))
    );

    // New runs are refused until the month ends: the backend's, the runner's stream and its queue.
    let check = |reply: integration_tests::Reply| {
        let error = reply.error(429, "RATE_LIMIT_EXCEEDED");
        let retry_after: i64 = reply.header("retry-after").unwrap().parse().unwrap();
        let next_month = agent_runtime::usage::next_month_start(clock.now());
        assert!(retry_after >= 1 && retry_after <= (next_month - clock.now()).num_seconds() + 1, "{retry_after}");
        assert_eq!(
            (&error["details"]["quota"], &error["details"]["limit"], &error["details"]["used"]),
            (&json!("monthly_budget"), &json!(100), &json!(280))
        );
    };
    let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
    check(crate::agent_runs::run(&runs, &main, "application/json", r#"{"message": "again"}"#).send().await);
    check(runner.post("/execute/a2a/stream/agent", json!({"agent_id": main, "message": "again"})).send().await);
    check(runner.post("/execute/a2a/stream/celery/agent", json!({"agent_id": main, "message": "again"})).send().await);

    // A higher limit lets runs start again; the thresholds already announced stay so this month.
    let raised = set_budget(&stack, &clock, &key, json!(1_000_000), json!([0.5, 1.0])).await;
    assert_eq!((&raised["used_micros"], &raised["thresholds_reached"]), (&json!(280), &json!([0.5, 1.0])));
    let removed = set_budget(&stack, &clock, &key, Value::Null, json!([0.5])).await;
    assert_eq!(removed["monthly_limit_micros"], Value::Null);
}

#[tokio::test]
async fn a_schedule_that_fires_over_budget_records_a_failed_run() {
    use agent_runtime::queue::RunWorker;
    use agent_runtime::scheduler::Scheduler;
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let model = ModelServer::start(vec![tool_calls_reply(&[("c1", "Helper", json!({"message": "?"}))])]).await;
    let helper_model = ModelServer::start(vec![text_reply("fine")]).await;
    let (main, _) = spending_agents(&stack, &clock, &key, &model, &helper_model).await;
    set_budget(&stack, &clock, &key, json!(1), json!([1.0])).await;
    // Spend the budget: a run's first turn costs 280 micros.
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let response = runner.post("/execute/a2a/stream/agent", json!({"agent_id": main, "message": "Go"})).stream().await;
    read_stream(response.into_body()).await;

    let schedules = stack.client::<platform_api::SchedulesService>(&clock).with_key(&key);
    let created = schedules
        .post(&format!("/agents/{main}/schedule"), json!({"cron_expression": "*/5 * * * *", "message": "m"}))
        .expect(201)
        .await["data"]
        .clone();
    let due: chrono::DateTime<chrono::Utc> = created["next_run_at"].as_str().unwrap().parse().unwrap();
    clock.advance((due - clock.now()).num_seconds() + 1);
    assert_eq!(stack.service::<Scheduler>(&clock).tick(clock.now()).await.unwrap().fired, 1);
    let messages = stack.run_queue().sqs().receive(std::time::Duration::from_secs(0)).await.unwrap();
    assert_eq!(messages.len(), 1);
    let worker = stack.service::<RunWorker>(&clock);
    assert!(worker.handle_batch(&messages, &integration_tests::worker_invocation("w")).await.is_empty());
    let id = created["id"].as_str().unwrap();
    let runs = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .get(&format!("/agents/{main}/runs?run_type=schedule&schedule_id={id}"))
        .expect(200)
        .await;
    let run = &runs["data"][0];
    assert_eq!((&run["status"], &run["failure_reason"]), (&json!("failed"), &json!("budget_exceeded")));
    assert!(run["error"].as_str().unwrap().contains("did not start"), "{run}");
    let schedule = schedules.get(&format!("/agents/schedules/{id}")).expect(200).await["data"].clone();
    assert_eq!(schedule["last_run_status"], "failed");
    // The model was asked once: by the run that spent the budget.
    assert_eq!(model.requests.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn usage_answers_per_day_totals_of_the_account_and_of_one_agent_from_counters() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let model = ModelServer::start(vec![text_reply("One."), text_reply("Two."), text_reply("Three.")]).await;
    let lm = priced_model(&stack, &clock, &key, "ten", &model, 10_000_000, 10_000_000).await;
    let first = config_agent(&stack, &clock, &key, "First", &lm, &[]).await;
    let second = config_agent(&stack, &clock, &key, "Second", &lm, &[]).await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    for agent in [&first, &first, &second] {
        let response =
            runner.post("/execute/a2a/stream/agent", json!({"agent_id": agent, "message": "n"})).stream().await;
        read_stream(response.into_body()).await;
    }
    let today = clock.now().format("%Y-%m-%d").to_string();
    let spend = stack.client::<SpendService>(&clock).with_key(&key);
    let usage = spend.get(&format!("/usage?from=2026-01-01&to={today}")).send().await;
    // From January to today is more than 92 days.
    assert_eq!(usage.status, 422);
    let week_ago = (clock.now() - chrono::Duration::days(6)).format("%Y-%m-%d").to_string();
    let usage = spend.get(&format!("/usage?from={week_ago}&to={today}")).expect(200).await["data"].clone();
    // Each run: 10 + 5 tokens at $10 per million = 150 micros.
    let day = |runs: u64| {
        json!({"date": today, "runs": runs, "input_tokens": 10 * runs, "output_tokens": 5 * runs,
        "cache_read_tokens": 0, "cache_write_tokens": 0, "cost_micros": 150 * runs})
    };
    assert_eq!(usage["days"], json!([day(3)]));
    let of_first =
        spend.get(&format!("/usage?from={today}&to={today}&agent_id={first}")).expect(200).await["data"].clone();
    assert_eq!(of_first["days"], json!([day(2)]));
    // Another account sees none of it, even naming the agent.
    let other = stack.api_key(Uuid::new_v4()).await;
    let theirs = stack
        .client::<SpendService>(&clock)
        .with_key(&other)
        .get(&format!("/usage?from={today}&to={today}&agent_id={first}"))
        .expect(200)
        .await["data"]
        .clone();
    assert_eq!(theirs["days"], json!([]));
    // Bad parameters are named.
    let bad = spend.get(&format!("/usage?from={today}&to=2020-01-01&agent_id=x")).error(422, "VALIDATION_ERROR").await;
    assert_eq!((bad["details"]["to"].is_string(), bad["details"]["agent_id"].is_string()), (true, true));
    spend.get("/usage").error(422, "VALIDATION_ERROR").await;
    spend.request(http::Method::POST, "/usage").error(405, "METHOD_NOT_ALLOWED").await;
}

#[tokio::test]
async fn a_runs_spend_left_pending_by_a_lost_process_is_added_once_by_the_sweep() {
    use agent_runtime::runs::{RunInput, RunOrigin, RunType};
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let runner: agent_runtime::lifecycle::RunLifecycle = stack.service(&clock);
    let runs = runner.runs();
    let origin = RunOrigin {
        run_type: RunType::Api,
        input: RunInput::default(),
        schedule_id: None,
        session_id: None,
        parent: None,
    };
    let agent = platform_data::ids::AgentId::new_v4();
    let run_id = platform_data::ids::RunId::now_v7();
    let mut record = agent_runtime::runs::RunRecord::start(
        run_id,
        agent,
        account.into(),
        origin,
        clock.now(),
        std::time::Duration::from_secs(60),
        runs.retention(),
    );
    assert!(runs.create(&record, Vec::new()).await.unwrap());
    let bill = agent_runtime::spend::Bill {
        usage: agent_runtime::events::Usage::tokens(7, 3),
        cost: Some(agent_runtime::spend::Cost {
            currency: platform_data::language_models::Currency::Usd,
            amount_micros: 42,
        }),
    };
    record.finish(&Ok("done".into()), bill, 1, clock.now());
    // Its end recorded, its process gone before the day's totals were added.
    record.mark_usage_pending(clock.now());
    assert!(runs.finish(&record, 2, Vec::new(), clock.now(), false).await.unwrap());
    let today = clock.now().format("%Y-%m-%d").to_string();
    let spend = stack.client::<SpendService>(&clock).with_key(&key);
    let days = || spend.get(&format!("/usage?from={today}&to={today}"));
    assert_eq!(days().expect(200).await["data"]["days"], json!([]));
    // Not before its place in the index is stale; then once, however often the sweep passes.
    clock.advance(300);
    for _ in 0..2 {
        assert_eq!(runner.sweep_lost(clock.now()).await.unwrap(), 0);
    }
    let totals = days().expect(200).await["data"]["days"].clone();
    assert_eq!(
        totals,
        json!([{"date": today, "runs": 1, "input_tokens": 7, "output_tokens": 3, "cache_read_tokens": 0,
            "cache_write_tokens": 0, "cost_micros": 42}])
    );
    let stored = runs.get_stored(run_id).await.unwrap().unwrap();
    assert!(!stored.usage_pending && stored.open_shard.is_none());
}

/// The environment naming what `second_process_runs_one_agent` runs: the stack's prefix, the
/// account and the agent.
const SECOND_PROCESS: [&str; 3] = ["SPEND_SECOND_PREFIX", "SPEND_SECOND_ACCOUNT", "SPEND_SECOND_AGENT"];

/// A run of `agent` started by `runner` and awaited to its end.
async fn run_to_its_end(
    runner: &agent_runtime::lifecycle::RunLifecycle,
    stack: &TestStack,
    account: Uuid,
    agent: &str,
) -> agent_runtime::runs::RunRecord {
    use agent_runtime::lifecycle::StartRun;
    use agent_runtime::resolve::RunRequest;
    use agent_runtime::runs::{RunInput, RunOrigin, RunType};
    let agent = stack.agents().get(account.into(), agent.parse().unwrap()).await.unwrap().unwrap();
    let start = StartRun {
        origin: RunOrigin {
            run_type: RunType::Api,
            input: RunInput { message: "Go".into(), files: Vec::new() },
            schedule_id: None,
            session_id: None,
            parent: None,
        },
        request: RunRequest { message: "Go".into(), ..RunRequest::default() },
    };
    runner.start(agent, start).await.unwrap().finished.await.unwrap()
}

/// The second process of the overshoot test below: one run of the agent its environment names,
/// on the first process's stack. Without that environment (any other `--ignored` run) it does
/// nothing.
#[tokio::test]
#[ignore = "the second process of concurrent_runs_pass_the_limit_by_at_most_their_turns_in_flight"]
async fn second_process_runs_one_agent() {
    let [Ok(prefix), Ok(account), Ok(agent)] = SECOND_PROCESS.map(std::env::var) else { return };
    let stack = TestStack::attach(&prefix).await;
    let runner: agent_runtime::lifecycle::RunLifecycle = stack.service(&TestClock::system());
    let ended = run_to_its_end(&runner, &stack, account.parse().unwrap(), &agent).await;
    println!("second process: run {} ended {:?}", ended.run_id, ended.failure_reason);
}

#[tokio::test]
async fn concurrent_runs_pass_the_limit_by_at_most_their_turns_in_flight() {
    use integration_tests::model_server::ModelReply;
    let stack = TestStack::new().await;
    let clock = TestClock::system();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    // Each model turn is held until both runs have asked theirs: both turns are in flight at once.
    let gates: Vec<_> = (0..4).map(|_| std::sync::Arc::new(tokio::sync::Notify::new())).collect();
    let replies = gates
        .iter()
        .map(|gate| {
            let ModelReply::Stream(pieces) = tool_calls_reply(&[("c1", "Helper", json!({"message": "?"}))]) else {
                unreachable!()
            };
            let after = pieces.into_iter().map(|(_, piece)| piece).collect();
            ModelReply::Gated { before: Vec::new(), gate: std::sync::Arc::clone(gate), after }
        })
        .collect();
    let model = ModelServer::start(replies).await;
    let helper_model = ModelServer::start(vec![text_reply("a"), text_reply("b")]).await;
    let (main, _) = spending_agents(&stack, &clock, &key, &model, &helper_model).await;
    // 700 micros: two turns of each run (4 × 280) pass it; one of each (2 × 280) does not.
    set_budget(&stack, &clock, &key, json!(700), json!([1.0])).await;

    let runner: agent_runtime::lifecycle::RunLifecycle = stack.service(&clock);
    let here = run_to_its_end(&runner, &stack, account, &main);
    let exe = std::env::current_exe().unwrap();
    let mut second = tokio::process::Command::new(exe);
    second.args(["spend::second_process_runs_one_agent", "--exact", "--ignored", "--nocapture"]);
    for (name, value) in SECOND_PROCESS.iter().zip([stack.prefix.clone(), account.to_string(), main.clone()]) {
        second.env(name, value);
    }
    let second = second.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let release = async {
        for (asked, gates) in [(2, &gates[..2]), (4, &gates[2..])] {
            let waited = tokio::time::timeout(std::time::Duration::from_secs(120), async {
                while model.requests.lock().unwrap().len() < asked {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            });
            waited.await.unwrap_or_else(|_| panic!("the runs did not both ask turn {}", asked / 2));
            gates.iter().for_each(|gate| gate.notify_one());
        }
    };
    let (here, (), second) = tokio::join!(here, release, second.wait_with_output());
    let second = second.unwrap();
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stdout));

    // Both runs took two turns (each checked at under 700) and stopped before a third.
    let runs = stack.client::<AgentsService>(&clock).with_key(&key);
    let listed = runs.get(&format!("/agents/{main}/runs")).expect(200).await["data"].clone();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 2);
    for run in listed {
        assert_eq!((&run["status"], &run["failure_reason"]), (&json!("failed"), &json!("budget_exceeded")), "{run}");
        assert_eq!((&run["steps"], &run["cost"]["amount_micros"]), (&json!(2), &json!(560)), "{run}");
    }
    assert!(listed.iter().any(|run| run["id"] == json!(here.run_id)));
    // The month passed 700 by 420: less than the two turns in flight when it was reached (560).
    let budget = stack.client::<SpendService>(&clock).with_key(&key).get("/budget").expect(200).await["data"].clone();
    assert_eq!(budget["used_micros"], 1_120);
    assert_eq!((model.requests.lock().unwrap().len(), helper_model.requests.lock().unwrap().len()), (4, 2));
}

#[tokio::test]
async fn a_new_month_starts_its_spend_and_its_thresholds_over() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let model = ModelServer::start(vec![text_reply("One."), text_reply("Two.")]).await;
    let lm = priced_model(&stack, &clock, &key, "ten", &model, 10_000_000, 10_000_000).await;
    let agent = config_agent(&stack, &clock, &key, "Monthly", &lm, &[]).await;
    set_budget(&stack, &clock, &key, json!(100), json!([0.5, 1.0])).await;
    let runner = stack.client::<RunnerService>(&clock).with_key(&key);
    let run = || runner.post("/execute/a2a/stream/agent", json!({"agent_id": agent, "message": "n"}));
    read_stream(run().stream().await.into_body()).await;
    let spend = stack.client::<SpendService>(&clock).with_key(&key);
    let spent = spend.get("/budget").expect(200).await["data"].clone();
    assert_eq!((&spent["used_micros"], &spent["thresholds_reached"]), (&json!(150), &json!([0.5, 1.0])));
    run().send().await.error(429, "RATE_LIMIT_EXCEEDED");

    // The month's first seconds: nothing spent, nothing announced, runs start again.
    let next = agent_runtime::usage::next_month_start(clock.now());
    clock.advance((next - clock.now()).num_seconds() + 1);
    let fresh = spend.get("/budget").expect(200).await["data"].clone();
    assert_eq!(
        (&fresh["month"], &fresh["used_micros"], &fresh["thresholds_reached"]),
        (&json!(next.format("%Y-%m").to_string()), &json!(0), &json!([]))
    );
    let frames = read_stream(run().stream().await.into_body()).await;
    assert_eq!(frames.last().unwrap().1, "done");
    let after = spend.get("/budget").expect(200).await["data"].clone();
    assert_eq!((&after["used_micros"], &after["thresholds_reached"]), (&json!(150), &json!([0.5, 1.0])));
}
