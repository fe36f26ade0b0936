//! `/tools`: CRUD, custom scripts (validated by the Python parser), uploads, and agents using tools.

use http::Method;
use http_api::Body;
use integration_tests::{Reply, TestClock, TestStack, call_api, request, send};
use platform_api::ToolsService;
use serde_json::{Value, json};
use storage::rate_limit::RateLimit;
use uuid::Uuid;

const SCRIPT: &str = "def run(city: str) -> str:\n    return f'sunny in {city}'\n";

fn error(reply: &Reply, status: u16, code: &str) -> Value {
    let body = reply.expect(status);
    assert_eq!(body["error"]["code"], code, "{body}");
    body["error"]["details"].clone()
}

async fn upload(
    service: &ToolsService,
    method: Method,
    path: &str,
    key: &str,
    file: Option<(&str, &str)>,
    metadata: Option<Value>,
) -> Reply {
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
    let request = request(method, path)
        .header("x-api-key", key)
        .header("content-type", "multipart/form-data; boundary=B0und")
        .body(Body::Text(body))
        .unwrap();
    send(service, request).await
}

#[tokio::test]
async fn crud_with_type_filter_soft_delete_and_restore() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let other = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.tools_service(&clock);
    let created = call_api(
        &tools,
        Method::POST,
        "/tools",
        &key,
        Some(json!({
            "name": "weather", "type": "custom", "script": SCRIPT, "description": "Weather by city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        })),
    )
    .await
    .expect(201)["data"]
        .clone();
    assert_eq!((created["type"].as_str(), created["has_script"].as_bool()), (Some("custom"), Some(true)));
    assert!(created.get("script").is_none());
    let id = created["id"].as_str().unwrap().to_owned();
    call_api(
        &tools,
        Method::POST,
        "/tools",
        &key,
        Some(json!({"name": "fetch", "type": "http", "config": {"url": "https://api.test"}})),
    )
    .await
    .expect(201);

    let list = call_api(&tools, Method::GET, "/tools?type=http", &key, None).await.expect(200);
    assert_eq!(list["pagination"]["total"], 1);
    assert_eq!(list["data"][0]["name"], "fetch");
    error(&call_api(&tools, Method::GET, "/tools?type=robot", &key, None).await, 422, "VALIDATION_ERROR");

    let script = call_api(&tools, Method::GET, &format!("/tools/{id}/script"), &key, None).await.expect(200);
    assert_eq!(script["data"], json!({"id": id, "name": "weather", "entry_point": "run", "script": SCRIPT}));

    let path = format!("/tools/{id}");
    let replaced = call_api(&tools, Method::PUT, &path, &key, Some(json!({"name": "weather", "type": "native"})))
        .await
        .expect(200);
    assert_eq!(
        (replaced["data"]["type"].as_str(), replaced["data"]["has_script"].as_bool()),
        (Some("native"), Some(false))
    );
    error(&call_api(&tools, Method::GET, &format!("{path}/script"), &key, None).await, 404, "RESOURCE_NOT_FOUND");

    error(&call_api(&tools, Method::GET, &path, &other, None).await, 404, "RESOURCE_NOT_FOUND");
    error(
        &call_api(&tools, Method::POST, "/tools", &key, Some(json!({"name": "fetch", "type": "native"}))).await,
        409,
        "CONFLICT",
    );
    call_api(&tools, Method::DELETE, &path, &key, None).await.expect(200);
    error(&call_api(&tools, Method::GET, &path, &key, None).await, 404, "RESOURCE_NOT_FOUND");
    assert_eq!(call_api(&tools, Method::GET, "/tools", &key, None).await.expect(200)["pagination"]["total"], 1);
    call_api(&tools, Method::POST, &format!("{path}/restore"), &key, None).await.expect(200);
    error(&call_api(&tools, Method::POST, &format!("{path}/restore"), &key, None).await, 404, "RESOURCE_NOT_FOUND");
    call_api(&tools, Method::GET, &path, &key, None).await.expect(200);
    error(&call_api(&tools, Method::GET, "/tools/not-a-uuid", &key, None).await, 422, "VALIDATION_ERROR");
}

#[tokio::test]
async fn scripts_are_validated_with_line_and_column() {
    let stack = TestStack::new().await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.tools_service(&TestClock::new());
    let post = |body: Value| call_api(&tools, Method::POST, "/tools", &key, Some(body));
    let details = error(
        &post(json!({"name": "t", "type": "custom", "script": "def run(:\n  pass\n"})).await,
        422,
        "VALIDATION_ERROR",
    );
    assert!(details["script"].as_str().unwrap().contains("line 1, column 9"), "{details}");
    let details = error(
        &post(json!({"name": "t", "type": "custom", "script": "def main():\n  pass\n"})).await,
        422,
        "VALIDATION_ERROR",
    );
    assert!(details["script"].as_str().unwrap().contains("`run`"));
    error(&post(json!({"name": "t", "type": "custom"})).await, 422, "VALIDATION_ERROR");
    error(&post(json!({"name": "t", "type": "custom", "script": 5})).await, 400, "BAD_REQUEST");
}

#[tokio::test]
async fn deeply_nested_scripts_are_422_not_a_crash() {
    // Issue 9, point 5: this script overflowed the stack and aborted the whole process. Python
    // compiles scripts now, in a process of its own; its refusal names the problem.
    let stack = TestStack::new().await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.tools_service(&TestClock::new());
    let script = format!("def run():\n    pass\nx={}1", "-".repeat(250_000));
    let reply =
        call_api(&tools, Method::POST, "/tools", &key, Some(json!({"name": "t", "type": "custom", "script": script})))
            .await;
    let details = error(&reply, 422, "VALIDATION_ERROR");
    let message = details["script"].as_str().unwrap();
    assert!(message.contains("nested too deeply") || message.starts_with("syntax error"), "{details}");
    // The same through an upload, and with brackets.
    let script = format!("def run():\n    return {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let details = error(
        &upload(&tools, Method::POST, "/tools/upload", &key, Some(("deep.py", &script)), None).await,
        422,
        "VALIDATION_ERROR",
    );
    assert!(details["script"].as_str().unwrap().contains("too many nested parentheses (line 2, column"), "{details}");
    // The function still answers.
    call_api(&tools, Method::GET, "/tools", &key, None).await.expect(200);
}

#[tokio::test]
async fn a_custom_script_is_stored_only_once_the_sandbox_has_compiled_it() {
    let stack = TestStack::new().await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let clock = TestClock::new();
    // Python's compiler, not only its parser: `return` outside a function is refused.
    let tools = stack.tools_service(&clock);
    let script = "return 1\ndef run():\n    pass\n";
    let details = error(
        &call_api(&tools, Method::POST, "/tools", &key, Some(json!({"name": "t", "type": "custom", "script": script})))
            .await,
        422,
        "VALIDATION_ERROR",
    );
    assert_eq!(details["script"], "syntax error: 'return' outside function (line 1, column 1)");

    // A sandbox that cannot be reached: custom tools are 503 and nothing is stored; other
    // tools, and scripts refused before Python, need no sandbox.
    let down =
        integration_tests::lambda_server::sdk_config_at(&integration_tests::local_server::closed_port_url("")).await;
    let sandbox = agent_runtime::tools::python::ToolSandbox::from_setting(&down, Some("tool-sandbox".into()));
    let tools = ToolsService::new(stack.gate(&clock, RateLimit::DEFAULT), stack.tools(), sandbox);
    let post = |body: Value| call_api(&tools, Method::POST, "/tools", &key, Some(body));
    let reply = post(json!({"name": "c", "type": "custom", "script": "def run():\n    pass\n"})).await;
    let body = reply.expect(503);
    assert_eq!(body["error"]["code"], "SERVICE_UNAVAILABLE");
    assert_eq!(body["error"]["message"], "The script could not be checked now; try again.");
    let details = error(&post(json!({"name": "c", "type": "custom", "script": " "})).await, 422, "VALIDATION_ERROR");
    assert_eq!(details["script"], "the script is empty");
    post(json!({"name": "h", "type": "http", "config": {"url": "https://example.com"}})).await.expect(201);
    let listed = call_api(&tools, Method::GET, "/tools", &key, None).await.expect(200);
    assert_eq!(listed["pagination"]["total"], 1, "{listed}");
}

#[tokio::test]
async fn uploads_create_and_replace_custom_tools() {
    let stack = TestStack::new().await;
    let key = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.tools_service(&TestClock::new());
    let created = upload(
        &tools,
        Method::POST,
        "/tools/upload",
        &key,
        Some(("geo_lookup.py", SCRIPT)),
        Some(json!({"description": "uploaded"})),
    )
    .await
    .expect(201)["data"]
        .clone();
    assert_eq!((created["name"].as_str(), created["type"].as_str()), (Some("geo_lookup"), Some("custom")));
    assert_eq!(created["description"], "uploaded");
    let id = created["id"].as_str().unwrap().to_owned();

    let new_script = "async def run(**kwargs):\n    return kwargs\n";
    let replaced = upload(&tools, Method::PUT, &format!("/tools/{id}/upload"), &key, Some(("v2.py", new_script)), None)
        .await
        .expect(200);
    assert_eq!(replaced["data"]["description"], "uploaded");
    let script = call_api(&tools, Method::GET, &format!("/tools/{id}/script"), &key, None).await.expect(200);
    assert_eq!(script["data"]["script"], new_script);

    let details = error(
        &upload(&tools, Method::POST, "/tools/upload", &key, Some(("bad.py", "def run(:\n")), None).await,
        422,
        "VALIDATION_ERROR",
    );
    assert!(details["script"].as_str().unwrap().contains("line 1"));
    error(
        &upload(&tools, Method::POST, "/tools/upload", &key, None, Some(json!({"name": "x"}))).await,
        400,
        "BAD_REQUEST",
    );
    error(
        &upload(&tools, Method::POST, "/tools/upload", &key, Some(("x.py", SCRIPT)), Some(json!({"type": "http"})))
            .await,
        422,
        "VALIDATION_ERROR",
    );
    let json_body = call_api(&tools, Method::POST, "/tools/upload", &key, Some(json!({"name": "x"}))).await;
    error(&json_body, 400, "BAD_REQUEST");

    let native =
        call_api(&tools, Method::POST, "/tools", &key, Some(json!({"name": "n", "type": "native"}))).await.expect(201);
    let native_id = native["data"]["id"].as_str().unwrap();
    error(
        &upload(&tools, Method::PUT, &format!("/tools/{native_id}/upload"), &key, Some(("n.py", SCRIPT)), None).await,
        422,
        "VALIDATION_ERROR",
    );
}

#[tokio::test]
async fn agents_reference_existing_tools_and_see_them_expanded() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let tools = stack.tools_service(&clock);
    let agents = stack.agents_service(&clock);
    let tool = call_api(
        &tools,
        Method::POST,
        "/tools",
        &key,
        Some(json!({"name": "search", "type": "native", "description": "web search"})),
    )
    .await
    .expect(201)["data"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = json!({"type": "config", "name": "Searcher", "framework": "chainlib", "language_model_id": "l",
        "tools": [tool], "tool_configs": {(tool.clone()): {"max_results": 3}, (Uuid::new_v4().to_string()): {}}});
    let agent = call_api(&agents, Method::POST, "/agents/", &key, Some(body)).await.expect(201)["data"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let detail = call_api(&agents, Method::GET, &format!("/agents/{agent}"), &key, None).await.expect(200);
    assert_eq!(detail["data"]["tools"], json!([{"id": tool, "name": "search", "description": "web search"}]));
    assert_eq!(detail["data"]["tool_configs"], json!({(tool.clone()): {"max_results": 3}}));

    // A deleted tool cannot be referenced by a new agent.
    call_api(&tools, Method::DELETE, &format!("/tools/{tool}"), &key, None).await.expect(200);
    let body = json!({"type": "a2a", "name": "Late", "tools": [tool]});
    let details = error(&call_api(&agents, Method::POST, "/agents/", &key, Some(body)).await, 422, "VALIDATION_ERROR");
    assert_eq!(details["tools[0]"], format!("tool {tool} does not exist"));
}
