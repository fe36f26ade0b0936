//! No value a tenant stores can panic a shared function (issue 44, point 1).
//!
//! A property test over a table of every free-form field of agents, schedules, tools and tool
//! configs (`FIELDS`; later capabilities add their fields to it). Each case puts an arbitrary
//! JSON value (huge, negative, fractional, deeply nested, wrong-typed) into one field, twice:
//! - **through the API**: the create is 201 or refused with 400, 413 or 422 (never a 5xx); a
//!   refused record is created without the value;
//! - **stored unchecked**, as records written before today's validation may hold it: the value
//!   is written straight into the stored record.
//!
//! After each, the agent runs (`POST /agents/{id}/run`, its model calling its http tool), its
//! schedule is triggered and the queued run executed by the worker, and the scheduler ticks:
//! never a panic, a run stream ends with exactly one `done` or `error`, no message is left for
//! SQS to retry, and no schedule decision fails. Cases are proptest's (a fresh seed each run;
//! `PROPTEST_RNG_SEED` replays one), a fixed number, one after the other (they talk to moto).

use agent_runtime::queue::RunWorker;
use agent_runtime::scheduler::Scheduler;
use aws_env::isolation::caught;
use http::Method;
use integration_tests::local_server::RecordingServer;
use integration_tests::model_server::{ModelServer, text_reply, tool_calls_reply};
use integration_tests::{TestClient, TestClock, TestStack};
use platform_api::{AgentRunsService, AgentsService, SchedulesService, ToolsService};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};
use uuid::Uuid;

/// Drawn cases per run (after the known ones): each creates an account's records and runs its
/// agent six times.
const CASES: u32 = 20;

/// A free-form field: where a value goes in its record.
#[derive(Debug, Clone, Copy)]
enum Field {
    /// `metadata.<key>` of an agent.
    AgentMetadata(&'static str),
    /// `tool_configs.<tool>.<key>` of an agent.
    ToolConfigEntry(&'static str),
    /// `agent_config.<key>` of an agent.
    AgentConfig(&'static str),
    /// `metadata.<key>` of a schedule.
    ScheduleMetadata(&'static str),
    /// `timeout` of a schedule.
    ScheduleTimeout,
    /// `config.<key>` of an http tool.
    ToolConfig(&'static str),
    /// `input_schema.<key>` of a tool.
    ToolInputSchema(&'static str),
    /// `metadata.<key>` of a tool.
    ToolMetadata(&'static str),
}

/// Every free-form field a run, a trigger or a tick reads, and one each that nothing reads.
const FIELDS: &[Field] = &[
    Field::AgentMetadata("timeout"),
    Field::AgentMetadata("chat_history_limit"),
    Field::AgentMetadata("display_name"),
    Field::ToolConfigEntry("timeout_seconds"),
    Field::ToolConfigEntry("arguments"),
    Field::ToolConfigEntry("headers"),
    Field::AgentConfig("max_recursion_limit"),
    Field::AgentConfig("memory"),
    Field::AgentConfig("planning"),
    Field::AgentConfig("tool_output_sharing"),
    Field::ScheduleMetadata("owner"),
    Field::ScheduleTimeout,
    Field::ToolConfig("method"),
    Field::ToolConfig("headers"),
    Field::ToolInputSchema("properties"),
    Field::ToolMetadata("owner"),
];

/// Numbers at and past every bound a field has, and where conversions break.
fn edge_numbers() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(1e20)),
        Just(json!(-1e20)),
        Just(json!(f64::MAX)),
        Just(json!(f64::MIN_POSITIVE)),
        Just(json!(1e-300)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(0)),
        Just(json!(-0.0)),
        Just(json!(0.5)),
        Just(json!(300)),
        Just(json!(300.5)),
        Just(json!(1000)),
        Just(json!(1001)),
        Just(json!(21600)),
        Just(json!(21600.001)),
        Just(json!(18446744073709551616.0)),
    ]
}

fn leaves() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => edge_numbers(),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::from),
        2 => any::<i64>().prop_map(Value::from),
        2 => any::<f64>().prop_filter("JSON numbers are finite", |x| x.is_finite()).prop_map(Value::from),
        2 => ".{0,24}".prop_map(Value::from),
    ]
}

/// Any JSON value: leaves, small arrays and objects a few levels deep, and deep nesting.
fn values() -> impl Strategy<Value = Value> {
    let nested = leaves().prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    });
    let deep = (1usize..120, leaves()).prop_map(|(depth, leaf)| (0..depth).fold(leaf, |value, _| json!([value])));
    prop_oneof![6 => nested, 1 => deep]
}

fn with(mut object: Value, key: &str, value: &Value) -> Value {
    if let Some(map) = object.as_object_mut() {
        map.insert(key.to_owned(), value.clone());
    }
    object
}

/// One account with its records: the value under test is in one of them.
struct Records {
    key: String,
    tool: String,
    agent: String,
    schedule: String,
}

struct Fixture {
    stack: TestStack,
    clock: TestClock,
    model: ModelServer,
    receiver: RecordingServer,
}

impl Fixture {
    fn client<S: integration_tests::Routed>(&self, key: &str) -> TestClient {
        self.stack.client::<S>(&self.clock).with_key(key)
    }

    /// The tool, agent and schedule bodies, `value` in `field` when given.
    fn bodies(&self, field: Field, value: Option<&Value>, lm: &str, tool: Option<&str>) -> (Value, Value, Value) {
        let mut config = json!({"url": self.receiver.url("/lookup")});
        let (mut input_schema, mut tool_metadata) = (json!({"type": "object"}), json!({}));
        let mut metadata = json!({});
        let mut entry = json!({"arguments": {"units": "metric"}});
        let mut agent_config = json!({"memory": "buffer"});
        let mut schedule = json!({"cron_expression": "* * * * *", "message": "tick", "overlap_policy": "allow"});
        let mut schedule_metadata = json!({});
        if let Some(value) = value {
            match field {
                Field::AgentMetadata(key) => metadata = with(metadata, key, value),
                Field::ToolConfigEntry(key) => entry = with(entry, key, value),
                Field::AgentConfig(key) => agent_config = with(agent_config, key, value),
                Field::ScheduleMetadata(key) => schedule_metadata = with(schedule_metadata, key, value),
                Field::ScheduleTimeout => schedule = with(schedule, "timeout", value),
                Field::ToolConfig(key) => config = with(config, key, value),
                Field::ToolInputSchema(key) => input_schema = with(input_schema, key, value),
                Field::ToolMetadata(key) => tool_metadata = with(tool_metadata, key, value),
            }
        }
        let tool_body = json!({"name": "lookup", "type": "http", "config": config, "input_schema": input_schema,
            "metadata": tool_metadata});
        let tool = tool.unwrap_or_default();
        let agent_body = json!({"type": "config", "name": "Subject", "framework": "chainlib", "language_model_id": lm,
            "tools": [tool], "tool_configs": {tool: entry}, "metadata": metadata, "agent_config": agent_config});
        (tool_body, agent_body, with(schedule, "metadata", &schedule_metadata))
    }

    /// Creates a record from `body`, or from `fallback` when `body` is refused: a refusal is
    /// 400, 413 or 422, never a 5xx.
    async fn create(&self, client: &TestClient, path: &str, body: Value, fallback: Value, case: &str) -> String {
        let reply = client.post(path, body).send().await;
        if reply.status == 201 {
            return reply.json()["data"]["id"].as_str().unwrap().to_owned();
        }
        assert!(
            [400, 413, 422].contains(&reply.status.as_u16()),
            "{case}: {path} answered {}: {}",
            reply.status,
            reply.text
        );
        client.post(path, fallback).created().await
    }

    /// A fresh account whose records hold `value` in `field`, as far as the API accepts it.
    async fn through_the_api(&self, field: Field, value: &Value, case: &str) -> Records {
        let key = self.stack.api_key(Uuid::new_v4()).await;
        let lm = self.stack.language_model(&self.clock, &key, "lm", &self.model.base_url()).await;
        let (tool_body, _, _) = self.bodies(field, Some(value), &lm, None);
        let (default_tool, _, _) = self.bodies(field, None, &lm, None);
        let tool = self.create(&self.client::<ToolsService>(&key), "/tools", tool_body, default_tool, case).await;
        let (_, agent_body, schedule_body) = self.bodies(field, Some(value), &lm, Some(&tool));
        let (_, default_agent, default_schedule) = self.bodies(field, None, &lm, Some(&tool));
        let agents = self.client::<AgentsService>(&key);
        let agent = self.create(&agents, "/agents/", agent_body, default_agent, case).await;
        let schedules = self.client::<SchedulesService>(&key);
        let path = format!("/agents/{agent}/schedule");
        let schedule = self.create(&schedules, &path, schedule_body, default_schedule, case).await;
        Records { key, tool, agent, schedule }
    }

    /// Writes `value` into `field` of the stored records, past every check. `false` when the
    /// store cannot hold it (DynamoDB's nesting limit for a schedule's attributes).
    async fn store_unchecked(&self, records: &Records, field: Field, value: &Value) -> bool {
        let account = self.stack.account_of(&records.key).await;
        let set = |map: &mut Map<String, Value>, key: &str| {
            map.insert(key.to_owned(), value.clone());
        };
        match field {
            Field::AgentMetadata(_) | Field::ToolConfigEntry(_) | Field::AgentConfig(_) => {
                let store = self.stack.agents();
                let previous = store.get(account, records.agent.parse().unwrap()).await.unwrap().unwrap();
                let mut changed = previous.clone();
                match field {
                    Field::AgentMetadata(key) => set(&mut changed.spec.metadata, key),
                    Field::ToolConfigEntry(key) => {
                        let entry = changed.spec.tool_configs.entry(records.tool.clone()).or_insert_with(|| json!({}));
                        if let Some(entry) = entry.as_object_mut() {
                            set(entry, key);
                        }
                    }
                    Field::AgentConfig(key) => {
                        let mut raw = changed.spec.agent_config.as_map().clone();
                        set(&mut raw, key);
                        changed.spec.agent_config = platform_data::agent_config::AgentConfig::new(raw);
                    }
                    _ => {}
                }
                store.replace(&changed, &previous).await.is_ok()
            }
            Field::ScheduleMetadata(_) | Field::ScheduleTimeout => {
                let store = self.stack.schedules();
                let mut schedule = store.get(account, records.schedule.parse().unwrap()).await.unwrap().unwrap();
                match field {
                    Field::ScheduleMetadata(key) => set(&mut schedule.spec.metadata, key),
                    // A stored timeout is a whole number: the largest there is, when it is not one.
                    _ => schedule.spec.timeout = Some(value.as_u64().unwrap_or(u64::MAX)),
                }
                store.put(&schedule).await.is_ok()
            }
            Field::ToolConfig(_) | Field::ToolInputSchema(_) | Field::ToolMetadata(_) => {
                let store = self.stack.tools();
                let previous = store.get(account, records.tool.parse().unwrap()).await.unwrap().unwrap();
                let mut changed = previous.clone();
                match field {
                    Field::ToolConfig(key) => set(&mut changed.spec.config, key),
                    Field::ToolInputSchema(key) => set(&mut changed.spec.input_schema, key),
                    Field::ToolMetadata(key) => set(&mut changed.spec.metadata, key),
                    _ => {}
                }
                store.replace(&changed, &previous).await.is_ok()
            }
        }
    }

    /// Runs the agent, triggers its schedule and ticks the scheduler, executing what they
    /// queue: each must end as documented, never panic.
    async fn exercise(&self, records: &Records, case: &str) {
        let runs = self.client::<AgentRunsService>(&records.key);
        let body = json!({"message": "go", "session_id": "s-1"});
        let reply = caught(runs.post(&format!("/agents/{}/run", records.agent), body).send())
            .await
            .unwrap_or_else(|panic| panic!("{case}: the run {panic}"));
        assert_eq!(reply.status, 200, "{case}: {}", reply.text);
        let ends = reply.text.matches("event: done").count() + reply.text.matches("event: error").count();
        assert_eq!(ends, 1, "{case}: {}", reply.text);

        let schedules = self.client::<SchedulesService>(&records.key);
        let trigger = schedules.request(Method::POST, &format!("/agents/schedules/{}/trigger", records.schedule));
        let triggered = caught(trigger.send()).await.unwrap_or_else(|panic| panic!("{case}: the trigger {panic}"));
        assert_eq!(triggered.status, 202, "{case}: {}", triggered.text);
        self.work_the_queue(case).await;

        self.clock.advance(61);
        let scheduler = self.stack.service::<Scheduler>(&self.clock);
        let report = caught(scheduler.tick(self.clock.now()))
            .await
            .unwrap_or_else(|panic| panic!("{case}: the tick {panic}"))
            .unwrap_or_else(|err| panic!("{case}: the tick failed: {err}"));
        assert_eq!(report.failed, 0, "{case}: {report:?}");
        self.work_the_queue(case).await;
    }

    /// Executes every queued run as the worker does: none is left for SQS to retry.
    async fn work_the_queue(&self, case: &str) {
        let queue = self.stack.run_queue();
        let worker = self.stack.service::<RunWorker>(&self.clock);
        let invocation = integration_tests::worker_invocation("stored-values");
        loop {
            let messages = queue.sqs().receive(std::time::Duration::ZERO).await.unwrap();
            if messages.is_empty() {
                return;
            }
            for message in messages {
                let retry = caught(worker.handle_batch(std::slice::from_ref(&message), &invocation))
                    .await
                    .unwrap_or_else(|panic| panic!("{case}: the worker {panic}"));
                assert!(retry.is_empty(), "{case}: the worker left {} to retry", message.body);
                queue.sqs().delete(&message.receipt_handle).await.unwrap();
            }
        }
    }

    /// Ends the case: its schedule no longer fires in later cases' ticks.
    async fn tidy(&self, records: &Records) {
        let schedules = self.client::<SchedulesService>(&records.key);
        schedules.delete(&format!("/agents/schedules/{}", records.schedule)).expect(200).await;
    }
}

#[tokio::test]
async fn no_value_stored_in_a_free_form_field_panics_a_run_a_trigger_or_a_tick() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    // Each run: the model calls the http tool, then answers. Past the script the model answers
    // 500, which a run reports as its error (still an end as documented).
    let script = (0..(CASES + 5) * 12)
        .flat_map(|i| [tool_calls_reply(&[(&format!("c{i}"), "lookup", json!({"q": "tides"}))]), text_reply("done")])
        .collect();
    let fixture =
        Fixture { stack, clock, model: ModelServer::start(script).await, receiver: RecordingServer::start().await };

    // The values that panicked before (issue 44) come first, whatever the seed draws.
    let known = [
        (Field::AgentMetadata("timeout"), json!(1e20)),
        (Field::ToolConfigEntry("timeout_seconds"), json!(1e20)),
        (Field::AgentMetadata("chat_history_limit"), json!(u64::MAX)),
        (Field::ScheduleTimeout, json!(u64::MAX)),
        // A number DynamoDB cannot store in a schedule's metadata (kept as attributes): was a 500.
        (Field::ScheduleMetadata("owner"), json!([0, null, 2.2250738585072014e-308])),
    ];
    let mut runner = TestRunner::new(Config::with_cases(CASES));
    let strategy = ((0..FIELDS.len()).prop_map(|index| FIELDS[index]), values());
    let drawn = (0..CASES).map(|_| strategy.new_tree(&mut runner).expect("a generated case").current());
    for (field, value) in known.into_iter().chain(drawn) {
        let case = format!("{field:?} = {}", truncated(&value));
        let records = fixture.through_the_api(field, &value, &case).await;
        fixture.exercise(&records, &format!("{case} (through the API)")).await;
        if fixture.store_unchecked(&records, field, &value).await {
            fixture.exercise(&records, &format!("{case} (stored unchecked)")).await;
        }
        fixture.tidy(&records).await;
    }
}

/// A value as a case names it: at most 200 characters.
fn truncated(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}
