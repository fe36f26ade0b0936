//! The dev server routes every path `template.yaml` declares to its function, over real HTTP.

use dev_server::Router;
use http::Method;
use http_api::Body;
use integration_tests::{TestStack, request};
use stack::Template;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Whether `response` is the REST API's own (no resource) rather than a function's.
fn from_the_gateway(response: &http_api::Response<Body>) -> bool {
    http_api::body_text(response.body()).contains("Missing Authentication Token")
}

#[tokio::test]
async fn every_declared_route_reaches_its_function_on_the_stage_url_and_at_the_root() {
    let stack = TestStack::new().await;
    let template = Template::embedded().unwrap();
    let mut routes = 0;
    for api in [dev_server::BACKEND_API, dev_server::RUNNER_API] {
        let router = Router::from_template(&template, &stack.sdk, &stack.prefix, api).unwrap();
        for (_, route) in template.routes_of(api) {
            let path = integration_tests::concrete_path(&route.path);
            for form in [path.clone(), format!("{path}/"), format!("/Prod{path}"), format!("/Prod{path}/")] {
                for method in [Method::GET, Method::POST] {
                    let response = router.dispatch(request(method.clone(), &form).body(Body::Empty).unwrap()).await;
                    let status = response.status().as_u16();
                    // The documents and pages answer without a key (and quote the gateway's
                    // own answers, so they are told apart by their status).
                    let open = route.path.ends_with("/openapi.json") || route.path.ends_with("/docs");
                    if open && method == Method::GET {
                        assert_eq!(status, 200, "{method} {form}");
                        continue;
                    }
                    // The function answered (its auth refusal, 405, or its 404 for an id of
                    // the wrong kind), not the gateway.
                    assert!(!from_the_gateway(&response), "{method} {form}");
                    assert!(matches!(status, 400 | 401 | 404 | 405), "{method} {form}: {status}");
                }
            }
            routes += 1;
        }
        let response = router.dispatch(request(Method::GET, "/nowhere").body(Body::Empty).unwrap()).await;
        assert_eq!(response.status(), 403);
        assert_eq!(http_api::body_text(response.body()), r#"{"message":"Missing Authentication Token"}"#);
    }
    assert!(routes > 50, "{routes} routes");
    let router = Router::from_template(&template, &stack.sdk, &stack.prefix, dev_server::BACKEND_API).unwrap();
    // The dev server's own trivial handler, measured by `make load` beside the functions.
    let response = router.dispatch(request(Method::GET, dev_server::PING_PATH).body(Body::Empty).unwrap()).await;
    assert_eq!((response.status().as_u16(), http_api::body_text(response.body())), (200, r#"{"ok":true}"#.into()));
    let response = router.dispatch(request(Method::POST, dev_server::PING_PATH).body(Body::Empty).unwrap()).await;
    assert_eq!(response.status(), 403);
    // The runner's paths are not the backend's: its own API only.
    let response =
        router.dispatch(request(Method::GET, "/monitoring/executions/recent").body(Body::Empty).unwrap()).await;
    assert!(from_the_gateway(&response));
}

#[tokio::test]
async fn trailing_slashes_reach_the_right_function_with_its_answer() {
    let stack = TestStack::new().await;
    let key = stack.api_key(uuid::Uuid::new_v4()).await;
    let router =
        Router::from_template(&Template::embedded().unwrap(), &stack.sdk, &stack.prefix, dev_server::BACKEND_API)
            .unwrap();
    let get = |path: &str| request(Method::GET, path).header("x-api-key", &key).body(Body::Empty).unwrap();
    for path in ["/agents", "/agents/", "/Prod/agents/"] {
        let response = router.dispatch(get(path)).await;
        assert_eq!(response.status(), 200, "{path}");
        let body: serde_json::Value = serde_json::from_slice(response.body().as_ref()).unwrap();
        assert_eq!(body["message"], "Agents retrieved", "{path}: {body}");
    }
    for path in ["/agents/schedules", "/agents/schedules/"] {
        let response = router.dispatch(get(path)).await;
        let body: serde_json::Value = serde_json::from_slice(response.body().as_ref()).unwrap();
        // The schedules function's paginated list, not the agents function reading "schedules" as an id.
        assert_eq!(
            (response.status().as_u16(), body["message"].as_str()),
            (200, Some("Schedules retrieved")),
            "{path}"
        );
    }
    for path in ["/api/v1/external/meeting", "/api/v1/external/meeting/"] {
        let response = router.dispatch(request(Method::GET, path).body(Body::Empty).unwrap()).await;
        // The meetings function's DRF answer to a missing token.
        assert_eq!(response.status(), 401, "{path}");
        assert!(http_api::body_text(response.body()).contains("detail"), "{path}");
    }
}

#[tokio::test]
async fn serves_http_on_a_socket() {
    let stack = TestStack::new().await;
    let (client_id, secret) = stack.create_app(&[1]).await;
    let router =
        Router::from_template(&Template::embedded().unwrap(), &stack.sdk, &stack.prefix, dev_server::BACKEND_API)
            .unwrap();
    let served = integration_tests::ServedApi::start(router).await;
    let address = served.address;

    let body = format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}");
    let raw = exchange(
        address,
        &format!(
            "POST /api/auth/token/ HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    let token = raw.split("\"access_token\":\"").nth(1).unwrap().split('"').next().unwrap().to_owned();

    let raw = exchange(
        address,
        &format!("GET /api/v1/external/meeting/?size=1 HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(raw.contains(r#""count":0"#), "{raw}");

    served.stop().await;
}

async fn exchange(address: std::net::SocketAddr, request: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn the_dev_server_streams_a_run_as_it_happens() {
    use integration_tests::model_server::{ModelServer, gated_hello_world};
    use integration_tests::{TestClock, local_template};
    use platform_api::AgentsService;
    use serde_json::json;
    use std::sync::Arc;
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let gate = Arc::new(tokio::sync::Notify::new());
    let reply = gated_hello_world(&gate);
    let model = ModelServer::start(vec![reply]).await;
    let key = stack.api_key(uuid::Uuid::new_v4()).await;
    let lm = stack.language_model(&clock, &key, "local", &model.base_url()).await;
    let agent = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .post(
            "/agents/",
            json!({"type": "config",
        "name": "Streamer", "framework": "chainlib", "language_model_id": lm}),
        )
        .created()
        .await;

    // As `make dev` runs it: loopback allowed for tenant calls.
    let template = local_template();
    assert!(template.routes_of(dev_server::BACKEND_API).any(|(_, r)| r.path == "/agents/{agent_id}/run" && r.streamed));
    let router = Router::from_template(&template, &stack.sdk, &stack.prefix, dev_server::BACKEND_API).unwrap();
    let served = integration_tests::ServedApi::start(router).await;
    let address = served.address;

    let body = r#"{"message": "hi"}"#;
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "POST /agents/{agent}/run HTTP/1.1\r\nHost: {address}\r\nX-API-Key: {key}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // The first delta arrives over the socket while the model is held.
    let mut seen = String::new();
    let mut buffer = [0u8; 4096];
    while !seen.contains(r#"{"delta":"Hello "}"#) {
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(read > 0, "the stream ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(seen.to_ascii_lowercase().contains("content-type: text/event-stream"), "{seen}");
    assert!(!seen.contains("event: done"));
    gate.notify_one();
    let mut rest = String::new();
    stream.read_to_string(&mut rest).await.unwrap();
    assert!(rest.contains("event: done"), "{rest}");
    served.stop().await;
}

#[tokio::test]
async fn make_devs_flow_server_key_lands_in_the_flow_server_secret() {
    let stack = TestStack::new().await;
    let template = Template::embedded().unwrap();
    let secret_id = stack.setting(platform_api::settings::FLOW_SERVER_SECRET_ID);
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    dev_server::store_flow_server_key(&stack.sdk, &template, &stack.prefix, "  lf-dev-key\n").await.unwrap();
    assert_eq!(platform_data::secrets::read_secret(&secrets, &secret_id).await.unwrap().as_deref(), Some("lf-dev-key"));
    // A second `make dev` with another key replaces it.
    dev_server::store_flow_server_key(&stack.sdk, &template, &stack.prefix, "lf-other").await.unwrap();
    assert_eq!(platform_data::secrets::read_secret(&secrets, &secret_id).await.unwrap().as_deref(), Some("lf-other"));
}
