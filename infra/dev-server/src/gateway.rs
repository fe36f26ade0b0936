//! The events API Gateway and function URLs send a function, and how they read its answer: what
//! the dev server's Lambda mode (`make dev-lambda`) sends each function binary.

use base64::Engine as _;
use http::StatusCode;
use http_api::{Body, Request, Response};
use serde_json::{Map, Value, json};
use stack::Route;
use std::collections::BTreeMap;

/// How a request reaches a function, as `template.yaml` wires it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Integration {
    /// An `HttpApi` event of the function: HTTP API payload format 2.0 (SAM's default; the
    /// template sets no `PayloadFormatVersion`), with the route's key and path parameters. REST
    /// API `Api` events would be one more kind, with the proxy integration's event.
    HttpApi(Route),
    /// The function's URL (`FunctionUrlConfig`, the streamed functions): payload format 2.0 with
    /// the `$default` route and no path parameters.
    FunctionUrl,
}

/// The account, API id and time every local event carries.
const LOCAL_ACCOUNT: &str = "123456789012";
const LOCAL_API_ID: &str = "local";

/// The event `integration` sends the function for `request` (whose URI is absolute, as the dev
/// server builds it).
pub fn request_event(integration: &Integration, request: &Request) -> Value {
    let uri = request.uri();
    let path = uri.path();
    let method = request.method().as_str();
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut cookies = Vec::new();
    for (name, value) in request.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        if name == http::header::COOKIE {
            // Payload 2.0 moves cookies to their own field, one per cookie.
            cookies.extend(value.split(';').map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned));
        } else {
            headers.entry(name.as_str().to_owned()).or_default().push(value);
        }
    }
    let host = uri.authority().map(|authority| authority.to_string()).unwrap_or_else(|| "localhost".to_owned());
    headers.entry("host".to_owned()).or_insert_with(|| vec![host.clone()]);
    // Locally the gateway speaks plain HTTP on the dev server's port: links the functions build
    // from these point back at it.
    headers.insert("x-forwarded-proto".to_owned(), vec![uri.scheme_str().unwrap_or("http").to_owned()]);
    headers.insert("x-forwarded-port".to_owned(), vec![uri.port_u16().unwrap_or(80).to_string()]);
    headers.insert("x-forwarded-for".to_owned(), vec!["127.0.0.1".to_owned()]);
    let user_agent = headers.get("user-agent").and_then(|values| values.first()).cloned().unwrap_or_default();
    let headers: Map<String, Value> =
        headers.into_iter().map(|(name, values)| (name, Value::String(values.join(",")))).collect();

    let query = uri.query().unwrap_or("");
    let mut parameters: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        parameters.entry(name.into_owned()).or_default().push(value.into_owned());
    }
    let query_parameters: Map<String, Value> =
        parameters.into_iter().map(|(name, values)| (name, Value::String(values.join(",")))).collect();

    let (route_key, path_parameters) = match integration {
        Integration::HttpApi(route) => (format!("{} {}", route.method, route.path), route.path_parameters(path)),
        Integration::FunctionUrl => ("$default".to_owned(), BTreeMap::new()),
    };
    let now = chrono::Utc::now();
    let domain_prefix = host.split(['.', ':']).next().unwrap_or(LOCAL_API_ID).to_owned();
    let mut event = json!({
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": LOCAL_ACCOUNT,
            "apiId": LOCAL_API_ID,
            "domainName": host,
            "domainPrefix": domain_prefix,
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": user_agent,
            },
            "requestId": uuid::Uuid::new_v4().to_string(),
            "routeKey": route_key,
            "stage": "$default",
            "time": now.format("%d/%b/%Y:%H:%M:%S %z").to_string(),
            "timeEpoch": now.timestamp_millis(),
        },
        "isBase64Encoded": false,
    });
    if !cookies.is_empty() {
        event["cookies"] = json!(cookies);
    }
    if !query_parameters.is_empty() {
        event["queryStringParameters"] = Value::Object(query_parameters);
    }
    if !path_parameters.is_empty() {
        event["pathParameters"] = json!(path_parameters);
    }
    let body = request.body().as_ref();
    if !body.is_empty() {
        let content_type = request.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        match std::str::from_utf8(body) {
            Ok(text) if is_text(content_type) => event["body"] = json!(text),
            _ => {
                event["body"] = json!(base64::engine::general_purpose::STANDARD.encode(body));
                event["isBase64Encoded"] = json!(true);
            }
        }
    }
    event
}

/// Whether API Gateway passes a body of this type as text (it base64-encodes the others, form
/// bodies included).
fn is_text(content_type: Option<&str>) -> bool {
    let Some(content_type) = content_type else { return true };
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence.starts_with("text/") || essence == "application/json" || essence.ends_with("+json")
}

/// Why a function's answer could not be read as a response.
#[derive(Debug, thiserror::Error)]
#[error("the function's answer is not an HTTP API response: {0}")]
pub struct ResponseError(String);

/// The HTTP response API Gateway makes of a function's payload 2.0 answer: `statusCode`,
/// `headers`, `multiValueHeaders`, `cookies` and a body, base64-decoded when flagged. An answer
/// without `statusCode` is, as API Gateway reads it, a 200 JSON body.
pub fn decode_response(answer: &[u8]) -> Result<Response<Body>, ResponseError> {
    let value: Value = serde_json::from_slice(answer).map_err(|err| ResponseError(err.to_string()))?;
    let Some(status) = value.get("statusCode") else {
        let mut response = Response::new(Body::Text(value.to_string()));
        response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        return Ok(response);
    };
    let status = status
        .as_u64()
        .and_then(|code| u16::try_from(code).ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or_else(|| ResponseError(format!("statusCode {status}")))?;
    let mut response = Response::new(Body::Empty);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let mut append = |name: &str, value: &str| -> Result<(), ResponseError> {
        let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|err| ResponseError(err.to_string()))?;
        let value = http::HeaderValue::from_str(value).map_err(|err| ResponseError(err.to_string()))?;
        headers.append(name, value);
        Ok(())
    };
    for (name, value) in value.get("headers").and_then(Value::as_object).into_iter().flatten() {
        append(name, value.as_str().unwrap_or_default())?;
    }
    for (name, values) in value.get("multiValueHeaders").and_then(Value::as_object).into_iter().flatten() {
        for value in values.as_array().into_iter().flatten() {
            append(name, value.as_str().unwrap_or_default())?;
        }
    }
    for cookie in value.get("cookies").and_then(Value::as_array).into_iter().flatten() {
        append("set-cookie", cookie.as_str().unwrap_or_default())?;
    }
    let body = value.get("body").and_then(Value::as_str).unwrap_or_default();
    *response.body_mut() = if body.is_empty() {
        Body::Empty
    } else if value.get("isBase64Encoded").and_then(Value::as_bool).unwrap_or(false) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|err| ResponseError(format!("body: {err}")))?;
        Body::Binary(bytes)
    } else {
        Body::Text(body.to_owned())
    };
    Ok(response)
}

/// API Gateway's answer when the function failed (an error, a crash, an unreadable answer).
pub fn internal_server_error() -> Response<Body> {
    http_api::json(StatusCode::INTERNAL_SERVER_ERROR, &json!({ "message": "Internal Server Error" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, uri: &str, headers: &[(&str, &str)], body: Body) -> Request {
        let mut builder = http::Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(body).unwrap()
    }

    #[test]
    fn an_http_api_event_carries_the_route_its_parameters_query_cookies_and_headers() {
        let route = Route { method: "GET".into(), path: "/agents/{agent_id}/runs/{proxy+}".into() };
        let request = request(
            "GET",
            "http://127.0.0.1:3000/agents/a1/runs/r1/events?after=3&tag=x&tag=y",
            &[("x-api-key", "k"), ("accept", "a"), ("accept", "b"), ("cookie", "c1=1; c2=2")],
            Body::Empty,
        );
        let event = request_event(&Integration::HttpApi(route), &request);
        assert_eq!(event["routeKey"], "GET /agents/{agent_id}/runs/{proxy+}");
        assert_eq!(event["requestContext"]["routeKey"], event["routeKey"]);
        assert_eq!(event["rawPath"], "/agents/a1/runs/r1/events");
        assert_eq!(event["rawQueryString"], "after=3&tag=x&tag=y");
        assert_eq!(event["queryStringParameters"], json!({"after": "3", "tag": "x,y"}));
        assert_eq!(event["pathParameters"], json!({"agent_id": "a1", "proxy": "r1/events"}));
        assert_eq!(event["cookies"], json!(["c1=1", "c2=2"]));
        assert_eq!(event["headers"]["accept"], "a,b");
        assert_eq!(event["headers"]["host"], "127.0.0.1:3000");
        assert_eq!(event["headers"]["x-forwarded-proto"], "http");
        assert!(event["headers"].get("cookie").is_none() && event.get("body").is_none());
        assert_eq!(event["requestContext"]["http"]["method"], "GET");
    }

    #[test]
    fn a_function_url_event_has_the_default_route_and_bodies_are_text_or_base64_as_api_gateway_sends_them() {
        let json_request =
            request("POST", "http://h/x", &[("content-type", "application/json")], Body::Text("{}".into()));
        let event = request_event(&Integration::FunctionUrl, &json_request);
        assert_eq!((event["routeKey"].as_str(), event.get("pathParameters")), (Some("$default"), None));
        assert_eq!((event["body"].as_str(), event["isBase64Encoded"].as_bool()), (Some("{}"), Some(false)));
        let form = request(
            "POST",
            "http://h/x",
            &[("content-type", "application/x-www-form-urlencoded")],
            Body::Text("a=1".into()),
        );
        let event = request_event(&Integration::FunctionUrl, &form);
        assert_eq!((event["body"].as_str(), event["isBase64Encoded"].as_bool()), (Some("YT0x"), Some(true)));
    }

    #[test]
    fn the_event_is_what_lambda_http_reads_back_into_the_request() {
        let route = Route { method: "POST".into(), path: "/agents/{id}".into() };
        let original = request(
            "POST",
            "http://127.0.0.1:3000/agents/7?q=1",
            &[("content-type", "application/octet-stream")],
            Body::Binary(vec![0, 159, 146, 150]),
        );
        let event = request_event(&Integration::HttpApi(route), &original);
        let request = lambda_http::request::from_str(&event.to_string()).unwrap();
        assert_eq!(request.uri().to_string(), "http://127.0.0.1:3000/agents/7?q=1");
        assert_eq!(request.body().as_ref(), &[0, 159, 146, 150]);
    }

    #[test]
    fn answers_are_decoded_as_api_gateway_does() {
        let answer = json!({
            "statusCode": 201,
            "headers": {"content-type": "text/plain"},
            "multiValueHeaders": {"x-many": ["1", "2"]},
            "cookies": ["a=1; Path=/", "b=2"],
            "body": "aGk=",
            "isBase64Encoded": true,
        });
        let response = decode_response(answer.to_string().as_bytes()).unwrap();
        assert_eq!(response.status(), 201);
        assert_eq!(response.headers()["content-type"], "text/plain");
        assert_eq!(response.headers().get_all("x-many").iter().count(), 2);
        assert_eq!(response.headers().get_all("set-cookie").iter().collect::<Vec<_>>(), ["a=1; Path=/", "b=2"]);
        assert_eq!(response.body().as_ref(), b"hi");

        let bare = decode_response(br#"{"ok":true}"#).unwrap();
        assert_eq!((bare.status().as_u16(), http_api::body_text(bare.body())), (200, r#"{"ok":true}"#.to_owned()));
        assert!(decode_response(b"not json").is_err());
        assert!(decode_response(br#"{"statusCode": 9999}"#).is_err());
    }
}
