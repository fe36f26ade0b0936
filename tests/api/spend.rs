//! What runs spend (issue 49, docs/spend.md): usage and cost on the `done` event, the run record,
//! the runner's monitoring and `run.*` webhooks, a sub-agent priced by its own model.

use crate::agent_runs::read_stream;
use integration_tests::model_server::{ModelServer, text_reply, tool_calls_reply};
use integration_tests::{TestClock, TestStack};
use platform_api::{AgentsService, LanguageModelsService, RunnerService, WebhooksService};
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
