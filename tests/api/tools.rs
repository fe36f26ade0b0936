//! `/tools`: CRUD, custom scripts (validated by the Python parser), uploads, and agents using tools.

use http::Method;
use integration_tests::local_server::RecordingServer;
use integration_tests::model_server::{ModelServer, text_reply, tool_calls_reply};
use integration_tests::{Call, TestClient, TestClock, TestStack};
use platform_api::{AgentRunsService, AgentsService, Gate, ToolsService};
use serde_json::{Value, json};
use uuid::Uuid;

const SCRIPT: &str = "def run(city: str) -> str:\n    return f'sunny in {city}'\n";

/// A multipart upload of `file` (its name and content) and `metadata`.
fn upload<'a>(
    api: &'a TestClient,
    method: Method,
    path: &str,
    file: Option<(&str, &str)>,
    metadata: Option<Value>,
) -> Call<'a> {
    let mut body = String::new();
    if let Some(metadata) = metadata {
        body.push_str(&format!("--B0und\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{metadata}\r\n"));
    }
    if let Some((filename, content)) = file {
        body.push_str(&format!(
            "--B0und\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: text/x-python\r\n\r\n{content}\r\n"
        ));
    }
    body.push_str("--B0und--\r\n");
    api.request(method, path).body("multipart/form-data; boundary=B0und", body)
}

#[tokio::test]
async fn crud_with_type_filter_soft_delete_and_restore() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let other = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let created = tools
        .post(
            "/tools",
            json!({
                "name": "weather", "type": "custom", "script": SCRIPT, "description": "Weather by city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
            }),
        )
        .expect(201)
        .await["data"]
        .clone();
    assert_eq!((created["type"].as_str(), created["has_script"].as_bool()), (Some("custom"), Some(true)));
    assert!(created.get("script").is_none());
    let id = created["id"].as_str().unwrap().to_owned();
    tools
        .with_key(&key)
        .post("/tools", json!({"name": "fetch", "type": "http", "config": {"url": "https://api.test"}}))
        .expect(201)
        .await;

    let list = tools.get("/tools?type=http").expect(200).await;
    assert_eq!(list["pagination"]["total"], 1);
    assert_eq!(list["data"][0]["name"], "fetch");
    tools.get("/tools?type=robot").error(422, "VALIDATION_ERROR").await;

    let script = tools.get(&format!("/tools/{id}/script")).expect(200).await;
    assert_eq!(script["data"], json!({"id": id, "name": "weather", "entry_point": "run", "script": SCRIPT}));

    let path = format!("/tools/{id}");
    let replaced = tools
        .put(&path, json!({"name": "weather", "type": "http", "config": {"url": "https://api.test"}}))
        .expect(200)
        .await;
    assert_eq!(
        (replaced["data"]["type"].as_str(), replaced["data"]["has_script"].as_bool()),
        (Some("http"), Some(false))
    );
    tools.get(&format!("{path}/script")).error(404, "RESOURCE_NOT_FOUND").await;

    tools.with_key(&other).get(&path).error(404, "RESOURCE_NOT_FOUND").await;
    tools
        .post("/tools", json!({"name": "fetch", "type": "http", "config": {"url": "https://api.test"}}))
        .error(409, "CONFLICT")
        .await;
    tools.delete(&path).expect(200).await;
    tools.get(&path).error(404, "RESOURCE_NOT_FOUND").await;
    assert_eq!(tools.get("/tools").expect(200).await["pagination"]["total"], 1);
    tools.request(Method::POST, &format!("{path}/restore")).expect(200).await;
    tools.request(Method::POST, &format!("{path}/restore")).error(404, "RESOURCE_NOT_FOUND").await;
    tools.get(&path).expect(200).await;
    tools.get("/tools/not-a-uuid").error(422, "VALIDATION_ERROR").await;
}

#[tokio::test]
async fn scripts_are_validated_with_line_and_column() {
    let stack = TestStack::new().await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.client::<ToolsService>(&TestClock::new()).with_key(&key);
    let post = |body: Value| tools.post("/tools", body);
    let error = post(json!({"name": "t", "type": "custom", "script": "def run(:\n  pass\n"}))
        .error(422, "VALIDATION_ERROR")
        .await;
    assert!(error["details"]["script"].as_str().unwrap().contains("line 1, column 9"), "{error}");
    let error = post(json!({"name": "t", "type": "custom", "script": "def main():\n  pass\n"}))
        .error(422, "VALIDATION_ERROR")
        .await;
    assert!(error["details"]["script"].as_str().unwrap().contains("`run`"));
    post(json!({"name": "t", "type": "custom"})).error(422, "VALIDATION_ERROR").await;
    post(json!({"name": "t", "type": "custom", "script": 5})).error(400, "BAD_REQUEST").await;
}

#[tokio::test]
async fn deeply_nested_scripts_are_422_not_a_crash() {
    // Issue 9, point 5: this script overflowed the stack and aborted the whole process. Python
    // compiles scripts now, in a process of its own; its refusal names the problem.
    let stack = TestStack::new().await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.client::<ToolsService>(&TestClock::new()).with_key(&key);
    let script = format!("def run():\n    pass\nx={}1", "-".repeat(250_000));
    let error = tools
        .post("/tools", json!({"name": "t", "type": "custom", "script": script}))
        .error(422, "VALIDATION_ERROR")
        .await;
    let message = error["details"]["script"].as_str().unwrap();
    assert!(message.contains("nested too deeply") || message.starts_with("syntax error"), "{error}");
    // The same through an upload, and with brackets.
    let script = format!("def run():\n    return {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let error = upload(&tools, Method::POST, "/tools/upload", Some(("deep.py", &script)), None)
        .error(422, "VALIDATION_ERROR")
        .await;
    let message = error["details"]["script"].as_str().unwrap();
    assert!(message.contains("too many nested parentheses (line 2, column"), "{error}");
    // The function still answers.
    tools.get("/tools").expect(200).await;
}

#[tokio::test]
async fn a_custom_script_is_stored_only_once_the_sandbox_has_compiled_it() {
    let stack = TestStack::new().await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let clock = TestClock::new();
    // Python's compiler, not only its parser: `return` outside a function is refused.
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let script = "return 1\ndef run():\n    pass\n";
    let error = tools
        .post("/tools", json!({"name": "t", "type": "custom", "script": script}))
        .error(422, "VALIDATION_ERROR")
        .await;
    assert_eq!(error["details"]["script"], "syntax error: 'return' outside function (line 1, column 1)");

    // A sandbox that cannot be reached: custom tools are 503 and nothing is stored; other
    // tools, and scripts refused before Python, need no sandbox.
    let down =
        integration_tests::lambda_server::sdk_config_at(&integration_tests::local_server::closed_port_url("")).await;
    let sandbox = agent_runtime::tools::python::ToolSandbox::from_setting(&down, Some("tool-sandbox".into()), None);
    // Built by hand: the sandbox's client is pointed at a closed port, which no setting does.
    let tools = ToolsService::new(
        stack.service::<Gate>(&clock),
        stack.tools(),
        sandbox,
        stack.tool_secrets(),
        stack.mcp_configs(),
    );
    let tools = TestClient::new(tools).with_key(&key);
    let post = |body: Value| tools.post("/tools", body);
    let error = post(json!({"name": "c", "type": "custom", "script": "def run():\n    pass\n"}))
        .error(503, "SERVICE_UNAVAILABLE")
        .await;
    assert_eq!(error["message"], "The script could not be checked now; try again.");
    let error = post(json!({"name": "c", "type": "custom", "script": " "})).error(422, "VALIDATION_ERROR").await;
    assert_eq!(error["details"]["script"], "the script is empty");
    post(json!({"name": "h", "type": "http", "config": {"url": "https://example.com"}})).expect(201).await;
    let listed = tools.get("/tools").expect(200).await;
    assert_eq!(listed["pagination"]["total"], 1, "{listed}");
}

#[tokio::test]
async fn uploads_create_and_replace_custom_tools() {
    let stack = TestStack::new().await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.client::<ToolsService>(&TestClock::new()).with_key(&key);
    let created = upload(
        &tools,
        Method::POST,
        "/tools/upload",
        Some(("geo_lookup.py", SCRIPT)),
        Some(json!({"description": "uploaded"})),
    )
    .expect(201)
    .await["data"]
        .clone();
    assert_eq!((created["name"].as_str(), created["type"].as_str()), (Some("geo_lookup"), Some("custom")));
    assert_eq!(created["description"], "uploaded");
    let id = created["id"].as_str().unwrap().to_owned();

    let new_script = "async def run(**kwargs):\n    return kwargs\n";
    let replaced = upload(&tools, Method::PUT, &format!("/tools/{id}/upload"), Some(("v2.py", new_script)), None)
        .expect(200)
        .await;
    assert_eq!(replaced["data"]["description"], "uploaded");
    let script = tools.get(&format!("/tools/{id}/script")).expect(200).await;
    assert_eq!(script["data"]["script"], new_script);

    let error = upload(&tools, Method::POST, "/tools/upload", Some(("bad.py", "def run(:\n")), None)
        .error(422, "VALIDATION_ERROR")
        .await;
    assert!(error["details"]["script"].as_str().unwrap().contains("line 1"));
    upload(&tools, Method::POST, "/tools/upload", None, Some(json!({"name": "x"}))).error(400, "BAD_REQUEST").await;
    upload(&tools, Method::POST, "/tools/upload", Some(("x.py", SCRIPT)), Some(json!({"type": "http"})))
        .error(422, "VALIDATION_ERROR")
        .await;
    tools.post("/tools/upload", json!({"name": "x"})).error(400, "BAD_REQUEST").await;

    let http_id = tools
        .post("/tools", json!({"name": "n", "type": "http", "config": {"url": "https://api.test"}}))
        .created()
        .await;
    upload(&tools, Method::PUT, &format!("/tools/{http_id}/upload"), Some(("n.py", SCRIPT)), None)
        .error(422, "VALIDATION_ERROR")
        .await;
}

#[tokio::test]
async fn agents_reference_existing_tools_and_see_them_expanded() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let tool =
        tools.post("/tools", json!({"name": "search", "type": "http", "description": "web search", "config": {"url": "https://api.test"}})).created().await;
    let body = json!({"type": "config", "name": "Searcher", "framework": "chainlib", "language_model_id": "l",
        "tools": [tool], "tool_configs": {(tool.clone()): {"max_results": 3}, (Uuid::new_v4().to_string()): {}}});
    let agent = agents.post("/agents/", body).created().await;
    let detail = agents.get(&format!("/agents/{agent}")).expect(200).await;
    assert_eq!(detail["data"]["tools"], json!([{"id": tool, "name": "search", "description": "web search"}]));
    assert_eq!(detail["data"]["tool_configs"], json!({(tool.clone()): {"max_results": 3}}));

    // A deleted tool cannot be referenced by a new agent.
    tools.delete(&format!("/tools/{tool}")).expect(200).await;
    let body = json!({"type": "a2a", "name": "Late", "tools": [tool]});
    let error = agents.post("/agents/", body).error(422, "VALIDATION_ERROR").await;
    assert_eq!(error["details"]["tools[0]"], format!("tool {tool} does not exist"));
}

/// Every item of a table, as text: what DynamoDB holds in plain text.
async fn table_text(stack: &TestStack, table: &str) -> String {
    let items = stack.dynamodb.scan().table_name(stack.setting(table)).send().await.unwrap();
    format!("{:?}", items.items())
}

/// A Secrets Manager secret's value, if it exists.
async fn secret_value(stack: &TestStack, name: &str) -> Option<String> {
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    let found = secrets.get_secret_value().secret_id(name).send().await.ok()?;
    found.secret_string().map(str::to_owned)
}

/// Runs `agent` to its end; the whole SSE stream as text.
async fn run_to_end(stack: &TestStack, clock: &TestClock, key: &str, agent: &str) -> String {
    let runs = stack.client::<AgentRunsService>(clock).with_key(key);
    let reply = runs.post(&format!("/agents/{agent}/run"), json!({"message": "go"})).send().await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.text
}

/// An account's key and a language model whose server calls tool `lookup` once per run, then
/// answers "done".
async fn model_calling_lookup(stack: &TestStack, clock: &TestClock, runs: usize) -> (String, String, ModelServer) {
    let replies = (0..runs)
        .flat_map(|i| [tool_calls_reply(&[(&format!("c{i}"), "lookup", json!({"q": "tides"}))]), text_reply("done")])
        .collect();
    let model = ModelServer::start(replies).await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let lm = stack.language_model(clock, &key, "local", &model.base_url()).await;
    (key, lm, model)
}

#[tokio::test]
async fn http_tools_keep_secret_headers_write_only_and_send_them_only_to_their_origin() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (first, second) = (RecordingServer::start().await, RecordingServer::start().await);
    let (key, lm, _model) = model_calling_lookup(&stack, &clock, 2).await;
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let body = json!({"name": "lookup", "type": "http", "config": {"url": first.url("/hook"), "method": "POST",
        "headers": {"Authorization": "Bearer s3cret", "X-Team": "blue"}, "secret_headers": {"X-Signature": "sig-1"}}});
    let reply = tools.post("/tools", body).send().await;
    assert!(!reply.text.contains("s3cret") && !reply.text.contains("sig-1"), "{}", reply.text);
    let created = reply.expect(201)["data"].clone();
    assert_eq!(created["config"]["headers"], json!({"x-team": "blue"}));
    assert_eq!(created["config"]["secret_header_names"], json!(["authorization", "x-signature"]));
    let id = created["id"].as_str().unwrap().to_owned();
    let account = created["account_id"].as_str().unwrap().to_owned();

    // In Secrets Manager, bound to the URL's origin; nowhere in the table or a read.
    let name = format!("{}{account}/{id}", stack.setting(platform_api::settings::TOOL_SECRET_PREFIX));
    let stored = secret_value(&stack, &name).await.expect("the tool's secret");
    assert!(stored.contains("Bearer s3cret") && stored.contains(&first.url("")), "{stored}");
    let table = table_text(&stack, platform_api::settings::TOOLS_TABLE).await;
    assert!(table.contains("x-signature") && !table.contains("s3cret") && !table.contains("sig-1"), "{table}");
    for path in [format!("/tools/{id}"), "/tools".to_owned()] {
        let read = tools.get(&path).send().await;
        assert!(!read.text.contains("s3cret") && !read.text.contains("sig-1"), "{}", read.text);
        read.expect(200);
    }

    // Moving the URL to another origin needs the secret headers again (or null).
    let moved = json!({"name": "lookup", "type": "http", "config": {"url": second.url("/hook"), "headers": {"X-Team": "blue"}}});
    let refused = tools.put(&format!("/tools/{id}"), moved.clone()).error(422, "VALIDATION_ERROR").await;
    assert!(refused["details"]["config.secret_headers"].as_str().unwrap().contains("sent again"), "{refused}");
    let same_origin =
        json!({"name": "lookup", "type": "http", "config": {"url": first.url("/v2"), "headers": {"X-Team": "blue"}}});
    let kept = tools.put(&format!("/tools/{id}"), same_origin).expect(200).await;
    assert_eq!(kept["data"]["config"]["secret_header_names"], json!(["authorization", "x-signature"]));

    // A run sends them to their origin.
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let body =
        json!({"type": "config", "name": "Caller", "framework": "chainlib", "language_model_id": lm, "tools": [id]});
    let agent = agents.post("/agents/", body).created().await;
    let stream = run_to_end(&stack, &clock, &key, &agent).await;
    assert!(stream.contains("event: done"), "{stream}");
    let sent = first.received();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (sent[0]["authorization"].as_str(), sent[0]["x-signature"].as_str(), sent[0]["x-team"].as_str()),
        ("Bearer s3cret", "sig-1", "blue")
    );

    // A record moved to another origin behind the API's back (a race, a restored backup) still
    // does not get them: the run fails before calling anything.
    let mut raced = stack.tools().get(account.parse().unwrap(), id.parse().unwrap()).await.unwrap().unwrap();
    let previous = raced.clone();
    raced.spec.config.insert("url".into(), json!(second.url("/hook")));
    stack.tools().replace(&raced, &previous).await.unwrap();
    let stream = run_to_end(&stack, &clock, &key, &agent).await;
    assert!(stream.contains("event: error") && stream.contains("was stored for"), "{stream}");
    assert!(second.received().is_empty());

    // Moved with null: the secret is gone and the new origin gets only the plain headers.
    let mut moved = moved;
    moved["config"]["secret_headers"] = Value::Null;
    let reply = tools.put(&format!("/tools/{id}"), moved).expect(200).await;
    assert_eq!(reply["data"]["config"]["secret_header_names"], json!([]));
    assert_eq!(secret_value(&stack, &name).await, None);
    let stream = run_to_end(&stack, &clock, &key, &agent).await;
    assert!(stream.contains("event: done"), "{stream}");
    let sent = second.received();
    assert_eq!(sent.len(), 1);
    assert!(!sent[0].contains_key("authorization") && !sent[0].contains_key("x-signature"), "{sent:?}");
    assert_eq!(first.received().len(), 1);
}

#[tokio::test]
async fn tool_configs_secret_headers_are_write_only_and_follow_only_their_tools_origin() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let (first, second) = (RecordingServer::start().await, RecordingServer::start().await);
    let (key, lm, _model) = model_calling_lookup(&stack, &clock, 2).await;
    let tools = stack.client::<ToolsService>(&clock).with_key(&key);
    let agents = stack.client::<AgentsService>(&clock).with_key(&key);
    let tool_body = |url: String| json!({"name": "lookup", "type": "http", "config": {"url": url}});
    let tool = tools.post("/tools", tool_body(first.url("/hook"))).created().await;
    let agent_body = |entry: Value| {
        json!({"type": "config", "name": "Caller", "framework": "chainlib", "language_model_id": lm,
            "tools": [tool], "tool_configs": {tool.clone(): entry}})
    };
    let entry = json!({"headers": {"X-Api-Key": "k-123", "X-Team": "t"}, "arguments": {"units": "metric"}});
    let reply = agents.post("/agents/", agent_body(entry)).send().await;
    assert!(!reply.text.contains("k-123"), "{}", reply.text);
    let agent = reply.expect(201)["data"]["id"].as_str().unwrap().to_owned();

    let detail = agents.get(&format!("/agents/{agent}")).send().await;
    assert!(!detail.text.contains("k-123"), "{}", detail.text);
    let detail = detail.expect(200)["data"].clone();
    assert_eq!(
        detail["tool_configs"][&tool],
        json!({"headers": {"x-team": "t"}, "secret_header_names": ["x-api-key"], "arguments": {"units": "metric"}})
    );
    let account = detail["account_id"].as_str().unwrap().to_owned();
    let name = format!("{}agents/{account}/{agent}", stack.setting(platform_api::settings::TOOL_SECRET_PREFIX));
    assert!(secret_value(&stack, &name).await.expect("the agent's secret").contains("k-123"));
    let table = table_text(&stack, platform_api::settings::AGENTS_TABLE).await;
    assert!(table.contains("x-api-key") && !table.contains("k-123"), "{table}");

    // A PUT that does not send them keeps them; a header of a tool that sends none is refused.
    let kept = agents
        .with_key(&key)
        .put(&format!("/agents/{agent}"), agent_body(json!({"headers": {"X-Team": "t"}})))
        .expect(200)
        .await;
    assert_eq!(kept["data"]["tool_configs"][&tool]["secret_header_names"], json!(["x-api-key"]));
    let custom = tools.post("/tools", json!({"name": "c", "type": "custom", "script": SCRIPT})).created().await;
    let body = json!({"type": "config", "name": "Other", "framework": "chainlib", "language_model_id": lm,
        "tools": [custom], "tool_configs": {custom.clone(): {"secret_headers": {"X-Key": "v"}}}});
    let refused = agents.post("/agents/", body).error(422, "VALIDATION_ERROR").await;
    assert_eq!(
        refused["details"][format!("tool_configs.{custom}.secret_headers")],
        "only http tools with a config.url send headers"
    );

    // A run sends them to the tool's origin.
    let stream = run_to_end(&stack, &clock, &key, &agent).await;
    assert!(stream.contains("event: done"), "{stream}");
    let sent = first.received();
    assert_eq!((sent.len(), sent[0]["x-api-key"].as_str(), sent[0]["x-team"].as_str()), (1, "k-123", "t"));

    // The tool moves to another origin: the agent's secret headers do not follow it.
    tools.put(&format!("/tools/{tool}"), tool_body(second.url("/hook"))).expect(200).await;
    let stream = run_to_end(&stack, &clock, &key, &agent).await;
    assert!(stream.contains("event: error") && stream.contains("was stored for"), "{stream}");
    assert!(second.received().is_empty());

    // Removed with null (PATCH), the run goes to the new origin without them.
    let patch = json!({"tool_configs": {tool.clone(): {"headers": {"X-Team": "t"}, "secret_headers": null}}});
    let patched = agents.patch(&format!("/agents/{agent}"), patch).expect(200).await;
    assert!(patched["data"]["tool_configs"][&tool].get("secret_header_names").is_none(), "{patched}");
    assert_eq!(secret_value(&stack, &name).await, None);
    let stream = run_to_end(&stack, &clock, &key, &agent).await;
    assert!(stream.contains("event: done"), "{stream}");
    let sent = second.received();
    assert_eq!((sent.len(), sent[0].get("x-api-key")), (1, None));
}
