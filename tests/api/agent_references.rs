//! What an agent names is what it runs with (issue 46): `mcp` tools run through their MCP
//! configuration's session, and a deleted tool, MCP configuration or sub-agent, a `native` tool
//! or two tools offered under one name end the run at its start with an error saying so —
//! never a run that silently goes without them. `framework` selects nothing at run time.

use agent_runtime::engine::execute;
use agent_runtime::events::RunEvent;
use agent_runtime::lifecycle::RunLifecycle;
use agent_runtime::resolve::{PrepareError, PreparedRun, RunRequest};
use integration_tests::mcp_server::start_mcp_server;
use integration_tests::model_server::{ModelServer, text_reply, tool_calls_reply};
use integration_tests::{TestClient, TestClock, TestStack};
use platform_api::{AgentsService, McpsService, ToolsService};
use platform_data::agents::Agent;
use platform_data::ids::RunId;
use platform_data::tools::{Tool as StoredTool, ToolSpec, ToolType, parse_tool};
use serde_json::{Value, json};
use uuid::Uuid;

struct Fixture {
    stack: TestStack,
    clock: TestClock,
    account: Uuid,
    key: String,
    /// A language model served by `model`.
    lm: String,
    model: ModelServer,
}

impl Fixture {
    async fn new(replies: Vec<integration_tests::model_server::ModelReply>) -> Self {
        let stack = TestStack::new().await;
        let clock = TestClock::new();
        let account = Uuid::new_v4();
        let key = stack.api_key(account).await;
        let model = ModelServer::start(replies).await;
        let lm = stack.language_model(&clock, &key, "local", &model.base_url()).await;
        Self { stack, clock, account, key, lm, model }
    }

    fn agents(&self) -> TestClient {
        self.stack.client::<AgentsService>(&self.clock).with_key(&self.key)
    }

    fn tools(&self) -> TestClient {
        self.stack.client::<ToolsService>(&self.clock).with_key(&self.key)
    }

    fn mcps(&self) -> TestClient {
        self.stack.client::<McpsService>(&self.clock).with_key(&self.key)
    }

    /// A `config` agent on the fixture's model, with `fields` added.
    async fn agent(&self, name: &str, fields: Value) -> String {
        let mut body = json!({"type": "config", "name": name, "framework": "chainlib", "language_model_id": self.lm});
        body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        self.agents().post("/agents/", body).created().await
    }

    async fn stored(&self, agent: &str) -> Agent {
        self.stack.agents().get(self.account.into(), agent.parse().unwrap()).await.unwrap().unwrap()
    }

    /// Why `agent` cannot be prepared (panics when it can).
    async fn refusal(&self, agent: &str) -> String {
        let runner: RunLifecycle = self.stack.service(&self.clock);
        let agent = self.stored(agent).await;
        match runner.sources().prepare(&agent, RunRequest::default(), RunId::now_v7(), 0).await {
            Err(PrepareError::Agent(message)) => message,
            Err(other) => panic!("not the agent's problem: {other}"),
            Ok(_) => panic!("the agent was prepared"),
        }
    }

    /// A tool stored as it could be before writes refused it (a `native` one).
    async fn stored_tool(&self, spec: ToolSpec) -> String {
        let tool = StoredTool::new(self.account.into(), spec, chrono::Utc::now());
        self.stack.tools().create(&tool).await.unwrap();
        tool.id.to_string()
    }
}

#[tokio::test]
async fn mcp_tools_run_through_their_configuration_s_session() {
    let f =
        Fixture::new(vec![tool_calls_reply(&[("c1", "weather_now", json!({"city": "Oslo"}))]), text_reply("Sunny.")])
            .await;
    let server = start_mcp_server(None).await;
    let mcp = f.mcps().post("/mcps", json!({"name": "weather", "url": server.url("/mcp")})).created().await;
    let tool = f
        .tools()
        .post(
            "/tools",
            json!({"name": "weather now", "type": "mcp", "description": "Today's weather in a city",
                "config": {"mcp_id": mcp, "tool_name": "forecast"}}),
        )
        .created()
        .await;
    // The configuration is also one of the agent's own: one session serves both.
    let agent = f.agent("Forecaster", json!({"tools": [tool], "mcps": [mcp]})).await;

    let runner: RunLifecycle = f.stack.service(&f.clock);
    let sources = runner.sources();
    let request = RunRequest { message: "Weather in Oslo?".into(), ..RunRequest::default() };
    let prepared = sources.prepare(&f.stored(&agent).await, request, RunId::now_v7(), 0).await.unwrap();
    let names: Vec<String> = prepared.run.tools.iter().map(|tool| tool.spec().name.clone()).collect();
    assert_eq!(names, ["weather_now", "forecast", "alerts"]);
    assert_eq!(prepared.sessions.len(), 1, "one session per configuration");
    let sessions = prepared.sessions;
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let outcome = execute(prepared.run, sender, std::future::pending()).await;
    PreparedRun::close(sessions).await;
    assert_eq!(outcome.result, Ok("Sunny.".to_owned()));
    let mut results = Vec::new();
    while let Ok(event) = receiver.try_recv() {
        if let RunEvent::ToolResult { name, result, .. } = event {
            results.push((name, result));
        }
    }
    assert_eq!(results, [("weather_now".to_owned(), Ok(json!("Sunny in Oslo")))]);
    // The model saw the record's name and description with the server's input schema.
    let offered = f.model.requests.lock().unwrap()[0]["tools"][0]["function"].clone();
    assert_eq!(
        (offered["name"].as_str(), offered["description"].as_str()),
        (Some("weather_now"), Some("Today's weather in a city"))
    );
    assert_eq!(offered["parameters"]["required"], json!(["city"]), "{offered}");

    // A tool the server does not list ends the run at its start, naming it.
    let missing = f
        .tools()
        .post("/tools", json!({"name": "tides", "type": "mcp", "config": {"mcp_id": mcp, "tool_name": "tides"}}))
        .created()
        .await;
    let agent = f.agent("Sailor", json!({"tools": [missing]})).await;
    assert_eq!(f.refusal(&agent).await, format!("tool \"tides\" ({missing}): the MCP server lists no tool \"tides\""));

    // Its configuration deleted: the run says so.
    f.mcps().delete(&format!("/mcps/{mcp}")).expect(200).await;
    assert_eq!(
        f.refusal(&agent).await,
        format!(
            "tool \"tides\" ({missing}): MCP configuration \"weather\" ({mcp}) is deleted: restore it or remove it \
             from the agent"
        )
    );
}

#[tokio::test]
async fn mcp_tools_must_name_an_active_configuration_of_the_account_and_native_ones_are_refused() {
    let f = Fixture::new(Vec::new()).await;
    let tools = f.tools();
    let mcp = f.mcps().post("/mcps", json!({"name": "m", "url": "https://mcp.example.com/mcp"})).created().await;
    let stranger = f.stack.api_key(Uuid::new_v4()).await;
    let foreign = f
        .stack
        .client::<McpsService>(&f.clock)
        .with_key(&stranger)
        .post("/mcps", json!({"name": "f", "url": "https://f.example.com/mcp"}))
        .created()
        .await;
    let body = |mcp_id: &str| json!({"name": "t", "type": "mcp", "config": {"mcp_id": mcp_id, "tool_name": "search"}});
    for unknown in [foreign.clone(), Uuid::new_v4().to_string()] {
        let error = tools.post("/tools", body(&unknown)).error(422, "VALIDATION_ERROR").await;
        assert_eq!(error["details"]["config.mcp_id"], format!("MCP configuration {unknown} does not exist"));
    }
    let error = tools.post("/tools", body("not-a-uuid")).error(422, "VALIDATION_ERROR").await;
    assert_eq!(error["details"]["config.mcp_id"], "must be a UUID");
    let error = tools
        .post("/tools", json!({"name": "t", "type": "mcp", "config": {"mcp_id": mcp}}))
        .error(422, "VALIDATION_ERROR")
        .await;
    assert_eq!(error["details"]["config.tool_name"], "is required for mcp tools");
    let tool = tools.post("/tools", body(&mcp)).created().await;
    // A replace is held to the same rule: a deleted configuration is no longer there.
    f.mcps().delete(&format!("/mcps/{mcp}")).expect(200).await;
    let error = tools.put(&format!("/tools/{tool}"), body(&mcp)).error(422, "VALIDATION_ERROR").await;
    assert_eq!(error["details"]["config.mcp_id"], format!("MCP configuration {mcp} does not exist"));

    let error = tools.post("/tools", json!({"name": "n", "type": "native"})).error(422, "VALIDATION_ERROR").await;
    assert_eq!(error["details"]["type"], platform_data::tools::NATIVE_REFUSED);
    let http = tools
        .post("/tools", json!({"name": "h", "type": "http", "config": {"url": "https://api.test"}}))
        .created()
        .await;
    tools.put(&format!("/tools/{http}"), json!({"name": "h", "type": "native"})).error(422, "VALIDATION_ERROR").await;
    // The type filter still finds native tools stored before.
    let native = f.stored_tool(parse_tool(br#"{"name": "old", "type": "http"}"#).map(native).unwrap()).await;
    let listed = tools.get("/tools?type=native").expect(200).await;
    assert_eq!(listed["data"][0]["id"], native.as_str());
}

fn native(mut spec: ToolSpec) -> ToolSpec {
    spec.tool_type = ToolType::Native;
    spec
}

#[tokio::test]
async fn a_run_ends_at_its_start_naming_what_the_agent_names_and_cannot_have() {
    let f = Fixture::new(Vec::new()).await;
    let tools = f.tools();
    let http = |name: &str| json!({"name": name, "type": "http", "config": {"url": "https://api.test/x"}});

    let tool = tools.post("/tools", http("lookup")).created().await;
    let agent = f.agent("Looker", json!({"tools": [tool]})).await;
    tools.delete(&format!("/tools/{tool}")).expect(200).await;
    assert_eq!(
        f.refusal(&agent).await,
        format!("tool \"lookup\" ({tool}) is deleted: restore it or remove it from the agent")
    );
    tools.request(http::Method::POST, &format!("/tools/{tool}/restore")).expect(200).await;

    let mcp = f.mcps().post("/mcps", json!({"name": "docs", "url": "https://mcp.example.com/mcp"})).created().await;
    let agent = f.agent("Reader", json!({"mcps": [mcp]})).await;
    f.mcps().delete(&format!("/mcps/{mcp}")).expect(200).await;
    assert_eq!(
        f.refusal(&agent).await,
        format!("MCP configuration \"docs\" ({mcp}) is deleted: restore it or remove it from the agent")
    );

    let helper = f.agent("Helper", json!({})).await;
    let agent = f.agent("Boss", json!({"agents": [helper]})).await;
    f.agents().delete(&format!("/agents/{helper}")).expect(200).await;
    assert_eq!(
        f.refusal(&agent).await,
        format!("sub-agent \"Helper\" ({helper}) is deleted: restore it or remove it from the agent")
    );

    let native = f.stored_tool(parse_tool(br#"{"name": "search", "type": "http"}"#).map(native).unwrap()).await;
    let agent = f.agent("Searcher", json!({"tools": [native]})).await;
    assert!(f.refusal(&agent).await.starts_with(&format!("tool \"search\" ({native}) is a native tool")));

    // Through the API: the run's stream ends with an error that says why.
    let runs = f.stack.client::<platform_api::AgentRunsService>(&f.clock).with_key(&f.key);
    let body = json!({"message": "Hi"}).to_string();
    let response = crate::agent_runs::run(&runs, &agent, "application/json", body).stream().await;
    let events = crate::agent_runs::read_stream(response.into_body()).await;
    let (_, kind, data) = events.last().unwrap();
    assert_eq!(
        (kind.as_str(), data["status"].as_str(), data["failure_reason"].as_str()),
        ("error", Some("failed"), Some("error"))
    );
    assert!(data["message"].as_str().unwrap().contains("is a native tool"), "{data}");
}

#[tokio::test]
async fn two_tools_the_model_would_know_by_one_name_are_refused_when_written_and_end_a_run_after_a_rename() {
    let f = Fixture::new(Vec::new()).await;
    let first = f.agent("Ask Bob", json!({})).await;
    let second = f.agent("Ask_Bob", json!({})).await;
    let body = json!({"type": "config", "name": "Team", "framework": "chainlib", "language_model_id": f.lm,
        "agents": [first, second]});
    let error = f.agents().post("/agents/", body).error(422, "VALIDATION_ERROR").await;
    assert_eq!(error["details"]["agents[1]"], "its tool name \"Ask_Bob\" is also sub-agent \"Ask Bob\"'s: rename one");
    let tool = f
        .tools()
        .post("/tools", json!({"name": "Ask-Bob", "type": "http", "config": {"url": "https://api.test"}}))
        .created()
        .await;
    let other = f
        .tools()
        .post("/tools", json!({"name": "Ask?Bob", "type": "http", "config": {"url": "https://api.test"}}))
        .created()
        .await;
    let body = json!({"type": "config", "name": "Team", "framework": "chainlib", "language_model_id": f.lm,
        "agents": [first], "tools": [other]});
    let error = f.agents().post("/agents/", body).error(422, "VALIDATION_ERROR").await;
    assert_eq!(error["details"]["agents[0]"], "its tool name \"Ask_Bob\" is also tool \"Ask?Bob\"'s: rename one");
    // A repeated sub-agent is one tool.
    let team = f.agent("Team", json!({"agents": [first, first], "tools": [tool]})).await;

    // A rename after the agent was written: the run names both.
    let renamed = json!({"name": "Ask/Bob", "type": "http", "config": {"url": "https://api.test"}});
    f.tools().put(&format!("/tools/{tool}"), renamed).expect(200).await;
    assert_eq!(
        f.refusal(&team).await,
        "sub-agent \"Ask Bob\" and tool \"Ask/Bob\" are both offered to the model as \"Ask_Bob\": rename one"
    );
}

/// `framework` is stored and filtered on, but every `config` agent runs on the one engine: the
/// model receives the same request whatever the agent's framework.
#[tokio::test]
async fn every_framework_runs_on_the_one_engine() {
    let frameworks = platform_data::agent_spec::Framework::ALL;
    let f = Fixture::new(frameworks.iter().map(|_| text_reply("Done.")).collect()).await;
    let runner: RunLifecycle = f.stack.service(&f.clock);
    for framework in frameworks {
        let agent = f
            .agents()
            .post(
                "/agents/",
                json!({"type": "config", "name": format!("On {}", framework.as_str()), "framework": framework.as_str(),
                    "language_model_id": f.lm, "instruction": "Be brief."}),
            )
            .created()
            .await;
        let request = RunRequest { message: "Hello".into(), ..RunRequest::default() };
        let prepared = runner.sources().prepare(&f.stored(&agent).await, request, RunId::now_v7(), 0).await.unwrap();
        let (sender, _events) = tokio::sync::mpsc::unbounded_channel();
        assert_eq!(execute(prepared.run, sender, std::future::pending()).await.result, Ok("Done.".to_owned()));
    }
    let requests = f.model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), frameworks.len());
    assert!(requests.iter().all(|request| *request == requests[0]), "{requests:#?}");
}
