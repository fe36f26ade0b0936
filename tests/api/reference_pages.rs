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
    // The routes, and the requests the service sends (OpenAPI 3.1's `webhooks`): the page shows both.
    ["paths", "webhooks"]
        .iter()
        .filter_map(|section| document[*section].as_object())
        .flat_map(|items| items.values())
        .flat_map(|item| item.as_object().unwrap().values())
        .filter_map(|operation| operation["operationId"].as_str().map(str::to_owned))
        .collect()
}

/// A whole answer of `router` to GET `path` with `accept_encoding`: its headers and body bytes.
async fn fetched(router: &Router, path: &str, accept_encoding: Option<&str>) -> (http::HeaderMap, Vec<u8>) {
    use http_body_util::BodyExt;
    let mut asked = request(Method::GET, path);
    if let Some(encoding) = accept_encoding {
        asked = asked.header("accept-encoding", encoding);
    }
    let (parts, body) = router.dispatch_streaming(asked.body(Body::Empty).unwrap()).await.into_parts();
    assert_eq!(parts.status, 200, "{path}");
    (parts.headers, body.collect().await.unwrap().to_bytes().to_vec())
}

#[tokio::test]
async fn pages_and_documents_go_out_gzipped_to_clients_that_accept_it_as_api_gateway_sends_them() {
    use std::io::Read as _;
    let stack = TestStack::new().await;
    for (api, page, _) in pages() {
        let router = Router::from_template(&local_template(), &stack.sdk, &stack.prefix, api).unwrap();
        for path in [page.to_owned(), page.replace("/docs", "/openapi.json")] {
            let (headers, plain) = fetched(&router, &path, None).await;
            assert!(!headers.contains_key("content-encoding"), "{path}");
            let (refused, _) = fetched(&router, &path, Some("gzip;q=0, identity")).await;
            assert!(!refused.contains_key("content-encoding"), "{path}");
            let (headers, gzipped) = fetched(&router, &path, Some("br, gzip, deflate")).await;
            assert_eq!(headers["content-encoding"], "gzip", "{path}");
            assert_eq!(headers["cache-control"], "public, max-age=300", "{path}");
            assert_eq!(headers["vary"], "Accept-Encoding", "{path}");
            let mut unpacked = Vec::new();
            flate2::read::GzDecoder::new(gzipped.as_slice()).read_to_end(&mut unpacked).unwrap();
            assert!(unpacked == plain, "{path}: the same bytes");
            assert!(gzipped.len() * 2 < plain.len(), "{path}: {} of {} bytes", gzipped.len(), plain.len());
        }
        // An answer below the API's MinimumCompressionSize goes out as it is.
        let asked = request(Method::GET, "/no/such/route").header("accept-encoding", "gzip");
        let answer = router.dispatch_streaming(asked.body(Body::Empty).unwrap()).await;
        assert!(!answer.headers().contains_key("content-encoding"));
    }
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
