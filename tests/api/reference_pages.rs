//! The OpenAPI documents as the docs function serves them through the dev server's REST APIs
//! (docs/openapi.md): without a key, each at its API's path, with `servers` naming the base URL
//! the client used; and (with `make test-browser`) each reference page rendered by Redoc in
//! headless Chromium: every operation of its document listed, no console error, no request
//! leaving the page, a screenshot kept in `target/browser/`.

use dev_server::Router;
use http::Method;
use http_api::Body;
use integration_tests::{ServedApi, TestStack, local_template, request};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The pages of each API: (dev server API, the page's path, its document).
fn pages() -> [(&'static str, &'static str, &'static str); 3] {
    [
        (dev_server::BACKEND_API, "/api/v1/external/docs", api_docs::MEETING_DATA_API),
        (dev_server::BACKEND_API, "/docs", api_docs::BACKEND),
        (dev_server::RUNNER_API, "/docs", api_docs::RUNNER),
    ]
}

fn operation_ids(document: &str) -> BTreeSet<String> {
    let document: Value = serde_json::from_str(document).unwrap();
    let paths = document["paths"].as_object().unwrap();
    paths
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .filter_map(|operation| operation["operationId"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn each_document_is_served_without_a_key_with_the_base_url_the_client_used() {
    let stack = TestStack::new().await;
    for (api, page, committed) in pages() {
        let router = Router::from_template(&local_template(), &stack.sdk, &stack.prefix, api).unwrap();
        let document_path = page.replace("/docs", "/openapi.json");
        for prefix in ["", "/Prod"] {
            let response = router
                .dispatch(request(Method::GET, &format!("{prefix}{document_path}")).body(Body::Empty).unwrap())
                .await;
            let text = http_api::body_text(response.body());
            assert_eq!(response.status(), 200, "{prefix}{document_path}: {text}");
            assert_eq!(response.headers()["content-type"], "application/json");
            let mut served: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(served["servers"], json!([{ "url": format!("https://api.test{prefix}") }]));
            let mut committed: Value = serde_json::from_str(committed).unwrap();
            served["servers"] = Value::Null;
            committed["servers"] = Value::Null;
            assert!(served == committed, "{document_path} is served as committed");
        }
        let response = router.dispatch(request(Method::GET, page).body(Body::Empty).unwrap()).await;
        assert_eq!(response.status(), 200, "{page}");
        assert_eq!(response.headers()["content-type"], "text/html; charset=utf-8", "{page}");
        assert!(http_api::body_text(response.body()).contains("Redoc.init("), "{page}");
    }
}

#[tokio::test]
async fn each_reference_page_renders_every_operation_in_a_browser_without_errors() {
    if !integration_tests::chromium_available() {
        return;
    }
    let stack = TestStack::new().await;
    let screenshots = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/browser");
    std::fs::create_dir_all(&screenshots).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/browser/reference_page.mjs");
    for (index, (api, page, document)) in pages().into_iter().enumerate() {
        let served =
            ServedApi::start(Router::from_template(&local_template(), &stack.sdk, &stack.prefix, api).unwrap()).await;
        let screenshot = screenshots.join(format!("reference-page-{index}.png"));
        let output = tokio::process::Command::new("node")
            .arg(script)
            .arg(format!("{}{page}", served.base_url()))
            .arg(&screenshot)
            .output()
            .await
            .expect("node runs");
        assert!(output.status.success(), "{page}: {}", String::from_utf8_lossy(&output.stderr));
        let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
        let listed: BTreeSet<String> =
            shown["operations"].as_array().unwrap().iter().filter_map(|id| id.as_str().map(str::to_owned)).collect();
        assert_eq!(listed, operation_ids(document), "{page}: the operations the page lists");
        assert_eq!(shown["console_errors"], serde_json::json!([]), "{page}");
        assert_eq!(shown["requests"], serde_json::json!([]), "{page}: nothing is fetched");
        assert!(std::fs::metadata(&screenshot).is_ok_and(|file| file.len() > 0), "{page}: a screenshot");
        served.stop().await;
    }
}
