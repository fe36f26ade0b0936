//! Real API Gateway HTTP API (payload v2) events, converted by `lambda_http` as in Lambda.

use base64::Engine as _;
use integration_tests::{TestClock, TestStack, demo_fixture};
use meeting_api::{AuthService, MeetingsService};
use serde_json::json;

fn event(method: &str, path: &str, query: &str, headers: serde_json::Value, body: Option<String>) -> String {
    json!({
        "version": "2.0",
        "routeKey": format!("{method} {path}"),
        "rawPath": path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123",
            "domainName": "abc123.execute-api.eu-west-1.amazonaws.com",
            "domainPrefix": "abc123",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "192.0.2.1", "userAgent": "test"},
            "requestId": "id",
            "routeKey": format!("{method} {path}"),
            "stage": "$default",
            "time": "23/Nov/2026:05:00:00 +0000",
            "timeEpoch": 1_795_410_000_000_i64
        },
        "body": body,
        "isBase64Encoded": body.is_some()
    })
    .to_string()
}

#[tokio::test]
async fn gateway_events_reach_the_handlers_with_path_query_and_body() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1, 2]).await;
    let host = "abc123.execute-api.eu-west-1.amazonaws.com";

    // API Gateway base64-encodes form bodies.
    let form = format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}");
    let token_event = event(
        "POST",
        "/api/auth/token/",
        "",
        json!({"host": host, "content-type": "application/x-www-form-urlencoded", "x-forwarded-proto": "https"}),
        Some(base64::engine::general_purpose::STANDARD.encode(form)),
    );
    let request = lambda_http::request::from_str(&token_event).unwrap();
    let body = stack.client::<AuthService>(&clock).send(request).await.expect(200);
    let token = body["access_token"].as_str().unwrap();

    let list_event = event(
        "GET",
        "/api/v1/external/meeting/",
        "size=1&title=",
        json!({"host": host, "authorization": format!("Bearer {token}"), "x-forwarded-proto": "https"}),
        None,
    );
    let request = lambda_http::request::from_str(&list_event).unwrap();
    let body = stack.client::<MeetingsService>(&clock).send(request).await.expect(200);
    assert_eq!(body["count"], 3);
    assert_eq!(body["next"], format!("https://{host}/api/v1/external/meeting/?page=2&size=1&title="));
}
