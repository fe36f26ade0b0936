//! `/mcps`: configurations with write-only secret headers, and live MCP calls against a real
//! MCP server (the official SDK's Streamable HTTP server) started in the test.

use http::Method;
use integration_tests::local_server::{Handler, LocalServer, closed_port_url, respond};
use integration_tests::mcp_server::{SERVER_NAME, SERVER_VERSION, start_mcp_server};
use integration_tests::{TestClock, TestStack};
use platform_api::McpsService;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

fn tool_names(tools: &Value) -> Vec<&str> {
    tools.as_array().unwrap().iter().map(|tool| tool["name"].as_str().unwrap()).collect()
}

/// A server that answers every request with an HTML page, as a web server would.
async fn start_web_server() -> LocalServer {
    let handler: Handler = Arc::new(|_| Box::pin(async { respond(200, "text/html", "<html>hello</html>") }));
    LocalServer::start(handler).await
}

/// A server that accepts requests and answers after `seconds`.
async fn start_slow_server(seconds: u64) -> LocalServer {
    let handler: Handler = Arc::new(move |_| {
        Box::pin(async move {
            tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
            respond(200, "application/json", "{}")
        })
    });
    LocalServer::start(handler).await
}

#[tokio::test]
async fn configurations_keep_secret_headers_write_only() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let account = Uuid::new_v4();
    let key = stack.api_key(account).await;
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let body = json!({
        "name": "weather", "description": "Weather tools", "url": "https://mcp.example.com/mcp",
        "headers": {"X-Team": "blue"}, "secret_headers": {"Authorization": "Bearer s3cret"},
        "timeout_seconds": 5, "metadata": {"owner": "ops"}
    });
    let reply = mcps.post("/mcps", body.clone()).send().await;
    assert!(!reply.text.contains("s3cret"), "{}", reply.text);
    let created = reply.expect(201)["data"].clone();
    assert_eq!(created["headers"], json!({"x-team": "blue"}));
    assert_eq!(created["secret_header_names"], json!(["authorization"]));
    assert_eq!(
        (created["transport"].as_str(), created["timeout_seconds"].as_u64()),
        (Some("streamable_http"), Some(5))
    );
    let id = created["id"].as_str().unwrap().to_owned();

    // The value is in Secrets Manager under the configuration's name, and nowhere in the table.
    let secret_name = format!("{}{account}/{id}", stack.setting(platform_api::settings::MCP_SECRET_PREFIX));
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    let stored = secrets.get_secret_value().secret_id(&secret_name).send().await.unwrap();
    assert!(stored.secret_string().unwrap().contains("Bearer s3cret"));
    let item = stack.mcp_configs().get(account.into(), id.parse().unwrap()).await.unwrap().unwrap();
    assert!(!serde_json::to_string(&item.spec).unwrap().contains("s3cret"));

    let detail = mcps.get(&format!("/mcps/{id}")).send().await;
    assert!(!detail.text.contains("s3cret"));
    assert_eq!(detail.expect(200)["data"]["metadata"], json!({"owner": "ops"}));
    let list = mcps.get("/mcps").expect(200).await;
    assert_eq!(list["pagination"]["total"], 1);
    assert!(list["data"][0].get("tools").is_none());
    let with_credentials = json!({"name": "creds", "url": "https://user:pw@mcp.example.com/mcp"});
    let refused = mcps.post("/mcps", with_credentials).error(422, "VALIDATION_ERROR").await;
    assert_eq!(refused["details"]["url"], "must not carry credentials");

    // A refused PUT (the name is another configuration's) leaves the secret as it was.
    let taken = json!({"name": "taken", "url": "https://other.example.com/mcp"});
    mcps.post("/mcps", taken).expect(201).await;
    let clash = json!({"name": "taken", "url": "https://mcp.example.com/mcp", "secret_headers": {"Authorization": "Bearer new"}});
    mcps.put(&format!("/mcps/{id}"), clash).error(409, "CONFLICT").await;
    let kept = secrets.get_secret_value().secret_id(&secret_name).send().await.unwrap();
    assert!(kept.secret_string().unwrap().contains("Bearer s3cret"));

    // PUT without secret_headers keeps them; null removes them (and the secret).
    let mut replacement = body.clone();
    replacement.as_object_mut().unwrap().remove("secret_headers");
    replacement["description"] = json!("Renamed");
    let kept = mcps.put(&format!("/mcps/{id}"), replacement.clone()).expect(200).await;
    assert_eq!(
        (kept["data"]["secret_header_names"].clone(), kept["data"]["description"].clone()),
        (json!(["authorization"]), json!("Renamed"))
    );
    let clash = json!({"name": "weather", "url": "https://mcp.example.com/mcp", "headers": {"authorization": "x"}});
    let clash = mcps.put(&format!("/mcps/{id}"), clash).error(422, "VALIDATION_ERROR").await;
    assert_eq!(clash["details"]["headers.authorization"], "is already a secret header");
    replacement["secret_headers"] = Value::Null;
    let removed = mcps.put(&format!("/mcps/{id}"), replacement).expect(200).await;
    assert_eq!(removed["data"]["secret_header_names"], json!([]));
    assert!(secrets.get_secret_value().secret_id(&secret_name).send().await.is_err());

    // Names are unique per account; other accounts see nothing.
    mcps.post("/mcps", body.clone()).error(409, "CONFLICT").await;
    let other = stack.api_key(Uuid::new_v4()).await;
    mcps.with_key(&other).get(&format!("/mcps/{id}")).error(404, "RESOURCE_NOT_FOUND").await;
    mcps.with_key(&other).delete(&format!("/mcps/{id}")).error(404, "RESOURCE_NOT_FOUND").await;
    assert_eq!(mcps.with_key(&other).get("/mcps").expect(200).await["pagination"]["total"], 0);
    mcps.get("/mcps/not-a-uuid").error(422, "VALIDATION_ERROR").await;

    // Soft delete hides it; restore brings it back; restoring an active one is 404.
    mcps.delete(&format!("/mcps/{id}")).expect(200).await;
    mcps.get(&format!("/mcps/{id}")).error(404, "RESOURCE_NOT_FOUND").await;
    // Only the other configuration ("taken") is left in the list.
    assert_eq!(mcps.get("/mcps").expect(200).await["pagination"]["total"], 1);
    mcps.post("/mcps", body).error(409, "CONFLICT").await;
    mcps.request(Method::POST, &format!("/mcps/{id}/restore")).expect(200).await;
    mcps.get(&format!("/mcps/{id}")).expect(200).await;
    mcps.request(Method::POST, &format!("/mcps/{id}/restore")).error(404, "RESOURCE_NOT_FOUND").await;
    mcps.request(Method::PATCH, &format!("/mcps/{id}")).error(405, "METHOD_NOT_ALLOWED").await;
}

#[tokio::test]
async fn invalid_configurations_are_400_for_types_and_422_for_rules() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let types = mcps.post("/mcps", json!({"name": 3, "url": "http://x.test/mcp"})).error(400, "BAD_REQUEST").await;
    assert_eq!(types["details"]["name"], "must be a string");
    let rules = json!({"url": "file:///etc/passwd", "timeout_seconds": 600, "headers": {"Mcp-Session-Id": "x"}});
    let rules = mcps.post("/mcps", rules).error(422, "VALIDATION_ERROR").await;
    let details = &rules["details"];
    assert_eq!(details["name"], "is required");
    assert_eq!(details["url"], "must use http or https");
    assert_eq!(details["timeout_seconds"], "must be between 1 and 25");
    assert_eq!(details["headers.Mcp-Session-Id"], "is set by the MCP transport and cannot be configured");
    mcps.request(Method::POST, "/mcps").body("application/json", "{").error(400, "BAD_REQUEST").await;
}

#[tokio::test]
async fn connect_reports_a_real_server_and_lists_its_tools() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let server = start_mcp_server(None).await;

    let connected = mcps.post("/mcps/connect", json!({"url": server.url("/mcp")})).expect(200).await;
    let data = &connected["data"];
    assert_eq!(data["connected"], true);
    assert_eq!(data["server"], json!({"name": SERVER_NAME, "version": SERVER_VERSION}));
    assert!(!data["protocol_version"].as_str().unwrap().is_empty());
    assert!(data["capabilities"]["tools"].is_object(), "{data}");
    assert_eq!(data["instructions"], "Ask about the weather.");

    let tools = mcps.post("/mcps/connect/tools", json!({"url": server.url("/mcp")})).expect(200).await;
    assert_eq!(tools["data"]["count"], 2);
    assert_eq!(tool_names(&tools["data"]["tools"]), ["forecast", "alerts"]);
    let forecast = &tools["data"]["tools"][0];
    assert_eq!(forecast["description"], "Tomorrow's forecast for a city");
    assert_eq!(forecast["input_schema"]["required"], json!(["city"]));
}

#[tokio::test]
async fn stored_configurations_send_their_secret_headers() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let server = start_mcp_server(Some(("authorization", "Bearer s3cret"))).await;
    let body =
        json!({"name": "guarded", "url": server.url("/mcp"), "secret_headers": {"Authorization": "Bearer s3cret"}});
    let id = mcps.post("/mcps", body).created().await;

    let tools = mcps.get(&format!("/mcps/{id}/tools")).expect(200).await;
    assert_eq!(tool_names(&tools["data"]["tools"]), ["forecast", "alerts"]);
    assert_eq!(tools["data"]["server"]["name"], SERVER_NAME);
    let connected = mcps.post("/mcps/connect", json!({"mcp_id": id})).expect(200).await;
    assert_eq!(connected["data"]["server"]["version"], SERVER_VERSION);
    let detail = mcps.get(&format!("/mcps/{id}?include_tools=true")).expect(200).await;
    assert_eq!(tool_names(&detail["data"]["tools"]), ["forecast", "alerts"]);
    assert_eq!(detail["data"]["tools_error"], Value::Null);

    // Without the secret the server refuses: a 400 that says so, never a 500.
    let refused = mcps.post("/mcps/connect", json!({"url": server.url("/mcp")})).error(400, "BAD_REQUEST").await;
    assert!(refused["details"]["error"].as_str().unwrap().contains("401"), "{refused}");
    mcps.post("/mcps/connect", json!({"mcp_id": id, "url": "http://x.test"})).error(422, "VALIDATION_ERROR").await;
    let other = stack.api_key(Uuid::new_v4()).await;
    mcps.with_key(&other).post("/mcps/connect", json!({"mcp_id": id})).error(404, "RESOURCE_NOT_FOUND").await;
}

#[tokio::test]
async fn unreachable_slow_and_non_mcp_servers_are_clear_400s() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let connect =
        |body: Value| async { mcps.post("/mcps/connect", body).error(400, "BAD_REQUEST").await["details"].clone() };

    let refused = connect(json!({"url": closed_port_url("/mcp")})).await;
    assert!(
        refused["error"].as_str().unwrap().starts_with("could not reach the MCP server: could not connect"),
        "{refused}"
    );

    let web = start_web_server().await;
    let not_mcp = connect(json!({"url": web.url("/")})).await;
    assert!(not_mcp["error"].as_str().unwrap().starts_with("the server did not answer as an MCP server"), "{not_mcp}");

    let mcp = start_mcp_server(None).await;
    let missing = connect(json!({"url": mcp.url("/elsewhere")})).await;
    assert_eq!(missing["url"], mcp.url("/elsewhere"));

    let slow = start_slow_server(10).await;
    let timed_out = connect(json!({"url": slow.url("/mcp"), "timeout_seconds": 1})).await;
    assert_eq!(timed_out["error"], "the MCP server did not answer within 1 seconds");
}

#[tokio::test]
async fn lists_include_tools_per_server_and_report_broken_ones() {
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(Uuid::new_v4()).await;
    let mcps = stack.client::<McpsService>(&clock).with_key(&key);
    let server = start_mcp_server(None).await;
    mcps.post("/mcps", json!({"name": "good", "url": server.url("/mcp")})).expect(201).await;
    clock.advance(1);
    mcps.post("/mcps", json!({"name": "gone", "url": closed_port_url("/mcp")})).expect(201).await;

    let list = mcps.get("/mcps?include_tools=true").expect(200).await;
    let items = list["data"].as_array().unwrap();
    assert_eq!(items.iter().map(|item| item["name"].as_str().unwrap()).collect::<Vec<_>>(), ["gone", "good"]);
    assert_eq!(items[0]["tools"], Value::Null);
    assert!(items[0]["tools_error"].as_str().unwrap().contains("could not connect"));
    assert_eq!(tool_names(&items[1]["tools"]), ["forecast", "alerts"]);
    let refused = mcps.get("/mcps?include_tools=maybe").error(422, "VALIDATION_ERROR").await;
    assert_eq!(refused["details"]["include_tools"], "must be true or false");
}
