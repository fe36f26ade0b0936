//! Real API Gateway REST API proxy events (payload 1.0, with the stage and `requestContext`),
//! read by `lambda_http` and the gateway layer (`http_api::gateway`) as in Lambda: on the
//! stage's `execute-api` URL and on a custom domain mapped at its root.

use base64::Engine as _;
use integration_tests::{TestClock, TestStack, demo_fixture};
use meeting_api::{AuthService, MeetingsService};
use serde_json::json;

/// The event of `method` `client_path` (what the client sent, the stage included on the
/// `execute-api` URL), whose resource path is `path`.
fn event(
    method: &str,
    resource: &str,
    path: &str,
    client_path: &str,
    query: &[(&str, &str)],
    headers: serde_json::Value,
    body: Option<String>,
) -> String {
    let single: serde_json::Map<String, serde_json::Value> =
        query.iter().map(|(name, value)| ((*name).to_owned(), json!(value))).collect();
    let multi: serde_json::Map<String, serde_json::Value> =
        query.iter().map(|(name, value)| ((*name).to_owned(), json!([value]))).collect();
    let multi_headers: serde_json::Map<String, serde_json::Value> =
        headers.as_object().unwrap().iter().map(|(name, value)| (name.clone(), json!([value]))).collect();
    json!({
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": multi_headers,
        "queryStringParameters": if single.is_empty() { serde_json::Value::Null } else { json!(single) },
        "multiValueQueryStringParameters": if multi.is_empty() { serde_json::Value::Null } else { json!(multi) },
        "pathParameters": null,
        "stageVariables": null,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123",
            "resourceId": "r1",
            "resourcePath": resource,
            "httpMethod": method,
            "extendedRequestId": "e1",
            "requestTime": "23/Nov/2026:05:00:00 +0000",
            "requestTimeEpoch": 1_795_410_000_000_i64,
            "path": client_path,
            "protocol": "HTTP/1.1",
            "stage": "Prod",
            "domainPrefix": "abc123",
            "domainName": "abc123.execute-api.eu-west-1.amazonaws.com",
            "identity": {"sourceIp": "192.0.2.1", "userAgent": "test"},
            "requestId": "id"
        },
        "body": body,
        "isBase64Encoded": body.is_some()
    })
    .to_string()
}

fn read(event: &str) -> http_api::Request {
    http_api::gateway::resource_request(lambda_http::request::from_str(event).unwrap())
}

#[tokio::test]
async fn rest_events_reach_the_handlers_and_links_keep_the_stage_or_the_custom_domain() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1, 2]).await;
    let host = "abc123.execute-api.eu-west-1.amazonaws.com";

    // A form body is not one of the API's binary media types: it arrives as text.
    let form = format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}");
    let headers =
        json!({"Host": host, "Content-Type": "application/x-www-form-urlencoded", "X-Forwarded-Proto": "https"});
    let token_event = event("POST", "/api/auth/token", "/api/auth/token/", "/Prod/api/auth/token/", &[], headers, None);
    let mut token_event: serde_json::Value = serde_json::from_str(&token_event).unwrap();
    token_event["body"] = json!(form);
    token_event["isBase64Encoded"] = json!(false);
    let body = stack.client::<AuthService>(&clock).send(read(&token_event.to_string())).await.expect(200);
    let token = body["access_token"].as_str().unwrap();

    // On the stage URL: the function routes the resource path; links carry the stage.
    let bearer = format!("Bearer {token}");
    let headers = json!({"Host": host, "Authorization": bearer, "X-Forwarded-Proto": "https"});
    let list = "/api/v1/external/meeting";
    let query = [("size", "1"), ("title", "")];
    let stage_event = event("GET", list, &format!("{list}/"), &format!("/Prod{list}/"), &query, headers, None);
    let body = stack.client::<MeetingsService>(&clock).send(read(&stage_event)).await.expect(200);
    assert_eq!(body["count"], 3);
    assert_eq!(body["next"], format!("https://{host}/Prod/api/v1/external/meeting/?page=2&size=1&title="));

    // On a custom domain mapped at its root: no stage in the path, nor in the links.
    let domain = "api.example.com";
    let headers = json!({"Host": domain, "Authorization": bearer, "X-Forwarded-Proto": "https"});
    let domain_event = event("GET", list, &format!("{list}/"), &format!("{list}/"), &query, headers, None);
    let body = stack.client::<MeetingsService>(&clock).send(read(&domain_event)).await.expect(200);
    assert_eq!(body["next"], format!("https://{domain}/api/v1/external/meeting/?page=2&size=1&title="));

    // Without the trailing slash (the REST resource's own form) the same list answers.
    let headers = json!({"Host": host, "Authorization": bearer, "X-Forwarded-Proto": "https"});
    let bare = event("GET", list, list, &format!("/Prod{list}"), &[("size", "1")], headers, None);
    let body = stack.client::<MeetingsService>(&clock).send(read(&bare)).await.expect(200);
    assert_eq!(body["next"], format!("https://{host}/Prod/api/v1/external/meeting?page=2&size=1"));
}

#[tokio::test]
async fn a_multipart_body_of_a_binary_media_type_arrives_intact() {
    // API Gateway base64-encodes a body whose type is in BinaryMediaTypes; lambda_http decodes it.
    let bytes =
        b"--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"x.bin\"\r\n\r\n\xff\x00\xfe\r\n--b--\r\n";
    let headers = json!({"Host": "h", "Content-Type": "multipart/form-data; boundary=b"});
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    let run = "/agents/{agent_id}/run";
    let raw = event("POST", run, "/agents/a1/run", "/Prod/agents/a1/run", &[], headers, Some(encoded));
    let request = read(&raw);
    assert_eq!(request.uri().path(), "/agents/a1/run");
    assert_eq!(request.body().as_ref(), bytes);
}
