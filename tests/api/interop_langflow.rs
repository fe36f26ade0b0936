//! Flowtool agents against a real Langflow (`make test-interop`: `infra/scripts/with-langflow`
//! starts Langflow 1.13 from `.venv-langflow` and sets `LANGFLOW_URL` and `LANGFLOW_API_KEY`).
//! Each test creates its flows through Langflow's API (`tests/interop/langflow_flows.py`), then
//! goes the README's way: a sync with the server's URL and key in the body, then runs, with no
//! flow server configured in the settings. Without `LANGFLOW_URL` the tests say so and pass.

use integration_tests::python_server::run_script;
use integration_tests::{TestClient, TestStack};
use platform_api::{AgentRunsService, AgentsService};
use serde_json::{Value, json};
use uuid::Uuid;

/// What every run sends; the chat and text flows answer it back.
const MESSAGE: &str = "hello flow";

/// Langflow's URL and API key from `infra/scripts/with-langflow`, or `None` (with a note) when
/// the test runs without it.
fn langflow() -> Option<(String, String)> {
    match (std::env::var("LANGFLOW_URL"), std::env::var("LANGFLOW_API_KEY")) {
        (Ok(url), Ok(key)) => Some((url, key)),
        _ => {
            eprintln!(
                "skipped: no LANGFLOW_URL/LANGFLOW_API_KEY; `make test-interop` runs this against a real Langflow"
            );
            None
        }
    }
}

/// A fresh account whose flowtool agents were synced from the four flows of
/// `langflow_flows.py` (named after `prefix`).
struct Synced {
    /// The account's agents function.
    agents_api: TestClient,
    /// The account's run function.
    runs: TestClient,
    url: String,
    /// Agent ids by the helper's flow names: chat, tokens, failing, text.
    agents: Value,
}

impl Synced {
    async fn new(url: String, api_key: String, prefix: &str) -> Self {
        let prefix = format!("{prefix} {}", Uuid::new_v4());
        let printed = run_script("langflow_flows.py", &[&url, &api_key, &prefix], "").await;
        let flows: Value = serde_json::from_str(&printed).expect("the flows' ids as JSON");
        let stack = TestStack::new().await;
        let clock = integration_tests::TestClock::new();
        let key = stack.api_key(Uuid::new_v4()).await;
        let agents_api = stack.client::<AgentsService>(&clock).with_key(&key);
        let runs = stack.client::<AgentRunsService>(&clock).with_key(&key);
        let body = json!({"base_url": url, "api_key": api_key});
        let report = agents_api.post("/agents/flowtool/sync", body).expect(200).await["data"].clone();
        let mut agents = json!({});
        for (name, flow_id) in flows.as_object().expect("an object of flow ids") {
            let created = report["created"].as_array().expect("created").iter().find(|c| c["flow_id"] == *flow_id);
            let created = created.unwrap_or_else(|| panic!("no agent for the {name} flow: {report}"));
            agents[name] = created["agent_id"].clone();
        }
        Self { agents_api, runs, url, agents }
    }

    fn agent(&self, flow: &str) -> &str {
        self.agents[flow].as_str().expect("an agent id")
    }

    /// Runs the agent of `flow` on [`MESSAGE`]: its stream's (event, data).
    async fn run(&self, flow: &str) -> Vec<(String, Value)> {
        let body = json!({"message": MESSAGE, "session_id": "s-1"});
        let response = self.runs.post(&format!("/agents/{}/run", self.agent(flow)), body).stream().await;
        let mut parsed = sse_stream::SseStream::new(response.into_body());
        let mut events = Vec::new();
        while let Some(frame) = futures_util::StreamExt::next(&mut parsed).await {
            let frame = frame.unwrap();
            if let (Some(event), Some(data)) = (frame.event, frame.data) {
                events.push((event, serde_json::from_str(&data).unwrap()));
            }
        }
        events
    }
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

fn deltas(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().filter(|(name, _)| name == "message").filter_map(|(_, data)| data["delta"].as_str()).collect()
}

#[tokio::test]
async fn interop_langflow_sync_keeps_each_flows_origin_and_types_and_the_chat_flow_answers() {
    let Some((url, api_key)) = langflow() else { return };
    let synced = Synced::new(url, api_key, "chat").await;
    for (flow, io_type) in [("chat", "chat"), ("text", "text")] {
        let detail = synced.agents_api.get(&format!("/agents/{}", synced.agent(flow))).expect(200).await;
        let flowtool = detail["data"]["agent_config"]["flowtool"].clone();
        assert_eq!(flowtool["base_url"], synced.url.as_str(), "{flow}: {flowtool}");
        assert_eq!((&flowtool["input_type"], &flowtool["output_type"]), (&json!(io_type), &json!(io_type)), "{flow}");
    }

    let events = synced.run("chat").await;
    assert_eq!(names(&events).last(), Some(&"done"), "{events:?}");
    assert_eq!(deltas(&events).concat(), MESSAGE, "{events:?}");
    assert_eq!(events.last().unwrap().1["output"], MESSAGE);
}

#[tokio::test]
async fn interop_langflow_a_component_streaming_chunks_streams_message_deltas() {
    let Some((url, api_key)) = langflow() else { return };
    let synced = Synced::new(url, api_key, "tokens").await;
    let events = synced.run("tokens").await;
    assert_eq!(names(&events).last(), Some(&"done"), "{events:?}");
    // One delta per chunk the component yielded (Langflow's `token` events).
    assert_eq!(deltas(&events), ["You ", "said: ", MESSAGE], "{events:?}");
    assert_eq!(events.last().unwrap().1["output"], "You said: hello flow");
}

#[tokio::test]
async fn interop_langflow_a_failing_component_ends_the_run_with_its_reason() {
    let Some((url, api_key)) = langflow() else { return };
    let synced = Synced::new(url, api_key, "failing").await;
    let events = synced.run("failing").await;
    assert_eq!(names(&events).last(), Some(&"error"), "{events:?}");
    let message = events.last().unwrap().1["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("the quota of widgets is exhausted"), "{message}");
}

#[tokio::test]
async fn interop_langflow_a_text_flow_gets_the_message_and_answers_it() {
    let Some((url, api_key)) = langflow() else { return };
    let synced = Synced::new(url, api_key, "text").await;
    let events = synced.run("text").await;
    assert_eq!(names(&events).last(), Some(&"done"), "{events:?}");
    assert_eq!(events.last().unwrap().1["output"], MESSAGE, "{events:?}");
}
