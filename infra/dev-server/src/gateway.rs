//! The events a REST API (API Gateway v1, Lambda proxy integration) sends a function, and how it
//! reads the function's answer: what the dev server sends each function, in process and in
//! Lambda mode (`make dev-lambda`).

use base64::Engine as _;
use http::StatusCode;
use http_api::{Body, Request, Response};
use serde_json::{Map, Value, json};
use stack::{ApiSpec, Route};
use std::collections::BTreeMap;

/// How a request reaches a function, as `template.yaml` wires it: one route (an `Api` event)
/// of one REST API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integration {
    pub route: Route,
    /// The API's stage (`StageName`).
    pub stage: String,
    /// The API's `BinaryMediaTypes`.
    pub binary_media_types: Vec<String>,
}

impl Integration {
    pub fn new(api: &ApiSpec, route: &Route) -> Self {
        Self { route: route.clone(), stage: api.stage_name.clone(), binary_media_types: api.binary_media_types.clone() }
    }
}

/// The path the client's URL had (with the stage on the `execute-api` URL), when it differs
/// from the request's URI path (the resource path): set by the router on the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientPath(pub String);

/// The account and API id every local event carries.
const LOCAL_ACCOUNT: &str = "123456789012";
const LOCAL_API_ID: &str = "local";

/// The proxy event (payload 1.0) `integration` sends the function for `request`, whose URI is
/// absolute and whose path is the resource path; its [`ClientPath`], if any, is the path the
/// client sent (`requestContext.path`).
pub fn request_event(integration: &Integration, request: &Request) -> Value {
    let uri = request.uri();
    let path = uri.path();
    let client_path = request.extensions().get::<ClientPath>().map(|p| p.0.as_str()).unwrap_or(path);
    let method = request.method().as_str();
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in request.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers.entry(name.as_str().to_owned()).or_default().push(value);
    }
    let host = uri.authority().map(|authority| authority.to_string()).unwrap_or_else(|| "localhost".to_owned());
    headers.entry("host".to_owned()).or_insert_with(|| vec![host.clone()]);
    // Locally the gateway speaks plain HTTP on the dev server's port: links the functions build
    // from these point back at it.
    headers.insert("x-forwarded-proto".to_owned(), vec![uri.scheme_str().unwrap_or("http").to_owned()]);
    headers.insert("x-forwarded-port".to_owned(), vec![uri.port_u16().unwrap_or(80).to_string()]);
    headers.insert("x-forwarded-for".to_owned(), vec!["127.0.0.1".to_owned()]);
    let user_agent = headers.get("user-agent").and_then(|values| values.first()).cloned().unwrap_or_default();
    // A REST API sends each header twice: its last value in `headers`, all in `multiValueHeaders`.
    let single: Map<String, Value> = headers
        .iter()
        .map(|(name, values)| (name.clone(), json!(values.last().cloned().unwrap_or_default())))
        .collect();
    let multi: Map<String, Value> = headers.into_iter().map(|(name, values)| (name, json!(values))).collect();

    let mut parameters: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
        parameters.entry(name.into_owned()).or_default().push(value.into_owned());
    }
    let (single_query, multi_query) = if parameters.is_empty() {
        (Value::Null, Value::Null)
    } else {
        let single: Map<String, Value> = parameters
            .iter()
            .map(|(name, values)| (name.clone(), json!(values.last().cloned().unwrap_or_default())))
            .collect();
        (Value::Object(single), json!(parameters))
    };
    let path_parameters = integration.route.path_parameters(path);
    let now = chrono::Utc::now();
    let domain_prefix = host.split(['.', ':']).next().unwrap_or(LOCAL_API_ID).to_owned();
    let resource = &integration.route.path;
    let (body, is_base64) = body_field(integration, request);
    json!({
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": single,
        "multiValueHeaders": multi,
        "queryStringParameters": single_query,
        "multiValueQueryStringParameters": multi_query,
        "pathParameters": if path_parameters.is_empty() { Value::Null } else { json!(path_parameters) },
        "stageVariables": Value::Null,
        "requestContext": {
            "accountId": LOCAL_ACCOUNT,
            "apiId": LOCAL_API_ID,
            "domainName": host,
            "domainPrefix": domain_prefix,
            "extendedRequestId": uuid::Uuid::new_v4().to_string(),
            "httpMethod": method,
            "identity": {"sourceIp": "127.0.0.1", "userAgent": user_agent},
            "path": client_path,
            "protocol": "HTTP/1.1",
            "requestId": uuid::Uuid::new_v4().to_string(),
            "requestTime": now.format("%d/%b/%Y:%H:%M:%S %z").to_string(),
            "requestTimeEpoch": now.timestamp_millis(),
            "resourceId": "local",
            "resourcePath": resource,
            "stage": integration.stage,
        },
        "body": body,
        "isBase64Encoded": is_base64,
    })
}

/// The event's `body` and `isBase64Encoded`: a body whose type is one of the API's binary media
/// types goes base64-encoded; any other as text, as a REST API passes it (bytes that are not
/// UTF-8 do not survive: that is what `BinaryMediaTypes` is for).
fn body_field(integration: &Integration, request: &Request) -> (Value, bool) {
    let body = request.body().as_ref();
    if body.is_empty() {
        return (Value::Null, false);
    }
    let content_type = request.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if is_binary(content_type, &integration.binary_media_types) {
        return (json!(base64::engine::general_purpose::STANDARD.encode(body)), true);
    }
    (json!(String::from_utf8_lossy(body)), false)
}

/// Whether a REST API with these `BinaryMediaTypes` treats a body of this type as binary.
fn is_binary(content_type: Option<&str>, binary_media_types: &[String]) -> bool {
    let Some(content_type) = content_type else { return false };
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    binary_media_types.iter().any(|kind| kind == "*/*" || kind.eq_ignore_ascii_case(&essence))
}

/// Why a function's answer could not be read as a response.
#[derive(Debug, thiserror::Error)]
#[error("the function's answer is not a proxy integration response: {0}")]
pub struct ResponseError(String);

/// The HTTP response API Gateway makes of a function's proxy integration answer: `statusCode`,
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
    http_api::json(StatusCode::BAD_GATEWAY, &json!({ "message": "Internal server error" }))
}

/// A REST API's answer to a path or method no resource declares (it does not say 404).
pub fn no_route() -> Response<Body> {
    http_api::json(StatusCode::FORBIDDEN, &json!({ "message": "Missing Authentication Token" }))
}

/// Whether an `Accept-Encoding` header accepts gzip (a `gzip` coding not refused with `q=0`).
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.unwrap_or_default().split(',').any(|coding| {
        let mut parts = coding.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default();
        let refused = parts
            .any(|parameter| matches!(parameter.replace(' ', "").as_str(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
        name.eq_ignore_ascii_case("gzip") && !refused
    })
}

/// A whole response as API Gateway sends it with `MinimumCompressionSize` (`from`): gzipped
/// when the client accepts gzip, its body is at least `from` bytes and the function did not
/// encode it itself. (Streamed responses are never compressed.)
pub fn compressed(response: Response<Body>, accepts_gzip: bool, from: Option<usize>) -> Response<Body> {
    use std::io::Write as _;
    let Some(from) = from.filter(|_| accepts_gzip) else { return response };
    if response.headers().contains_key(http::header::CONTENT_ENCODING) {
        return response;
    }
    let bytes: &[u8] = match response.body() {
        Body::Text(text) => text.as_bytes(),
        Body::Binary(bytes) => bytes,
        _ => return response,
    };
    if bytes.len() < from {
        return response;
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let Ok(gzipped) = encoder.write_all(bytes).and_then(|()| encoder.finish()) else { return response };
    let (mut parts, _) = response.into_parts();
    parts.headers.insert(http::header::CONTENT_ENCODING, http::HeaderValue::from_static("gzip"));
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::Binary(gzipped))
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

    fn integration(method: &str, path: &str) -> Integration {
        let route = Route { api: "Api".into(), method: method.into(), path: path.into(), streamed: false };
        Integration { route, stage: "Prod".into(), binary_media_types: vec!["multipart/form-data".into()] }
    }

    #[test]
    fn a_rest_event_carries_the_resource_its_parameters_query_and_headers() {
        let mut request = request(
            "GET",
            "http://127.0.0.1:3000/agents/a1/runs/r1?after=3&tag=x&tag=y",
            &[("x-api-key", "k"), ("accept", "a"), ("accept", "b")],
            Body::Empty,
        );
        request.extensions_mut().insert(ClientPath("/Prod/agents/a1/runs/r1".into()));
        let event = request_event(&integration("ANY", "/agents/{agent_id}/runs/{run_id}"), &request);
        assert_eq!(event["resource"], "/agents/{agent_id}/runs/{run_id}");
        assert_eq!(event["path"], "/agents/a1/runs/r1");
        assert_eq!(event["httpMethod"], "GET");
        assert_eq!(event["requestContext"]["path"], "/Prod/agents/a1/runs/r1");
        assert_eq!(event["requestContext"]["stage"], "Prod");
        assert_eq!(event["requestContext"]["resourcePath"], event["resource"]);
        assert_eq!(event["queryStringParameters"], json!({"after": "3", "tag": "y"}));
        assert_eq!(event["multiValueQueryStringParameters"], json!({"after": ["3"], "tag": ["x", "y"]}));
        assert_eq!(event["pathParameters"], json!({"agent_id": "a1", "run_id": "r1"}));
        assert_eq!(event["headers"]["accept"], "b");
        assert_eq!(event["multiValueHeaders"]["accept"], json!(["a", "b"]));
        assert_eq!(event["headers"]["host"], "127.0.0.1:3000");
        assert_eq!(event["headers"]["x-forwarded-proto"], "http");
        assert_eq!((event["body"].clone(), event["isBase64Encoded"].clone()), (Value::Null, json!(false)));
    }

    #[test]
    fn bodies_are_base64_only_for_the_apis_binary_media_types() {
        let json_request =
            request("POST", "http://h/x", &[("content-type", "application/json")], Body::Text("{}".into()));
        let event = request_event(&integration("POST", "/x"), &json_request);
        assert_eq!((event["body"].as_str(), event["isBase64Encoded"].as_bool()), (Some("{}"), Some(false)));
        let upload = request(
            "POST",
            "http://h/x",
            &[("content-type", "multipart/form-data; boundary=b")],
            Body::Binary(vec![0xff, 0x00]),
        );
        let event = request_event(&integration("POST", "/x"), &upload);
        assert_eq!((event["body"].as_str(), event["isBase64Encoded"].as_bool()), (Some("/wA="), Some(true)));
        let octets =
            request("POST", "http://h/x", &[("content-type", "application/octet-stream")], Body::Binary(vec![0xff]));
        let event = request_event(&integration("POST", "/x"), &octets);
        assert_eq!(event["isBase64Encoded"], false, "not a binary media type of this API: passed as text");
    }

    #[test]
    fn the_event_is_what_lambda_http_and_the_gateway_layer_read_back_into_the_request() {
        let mut original = request(
            "POST",
            "http://127.0.0.1:3000/agents/7?q=1",
            &[("content-type", "multipart/form-data; boundary=b")],
            Body::Binary(vec![0, 159, 146, 150]),
        );
        original.extensions_mut().insert(ClientPath("/Prod/agents/7".into()));
        let event = request_event(&integration("POST", "/agents/{agent_id}"), &original);
        let request = lambda_http::request::from_str(&event.to_string()).unwrap();
        let request = http_api::gateway::resource_request(request);
        assert_eq!(request.uri().to_string(), "http://127.0.0.1:3000/agents/7?q=1");
        assert_eq!(http_api::gateway::BasePath::of(&request), "/Prod");
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

    #[test]
    fn gzip_is_accepted_unless_refused() {
        assert!(accepts_gzip(Some("gzip")));
        assert!(accepts_gzip(Some("br, GZIP;q=0.5, deflate")));
        assert!(!accepts_gzip(Some("gzip;q=0, identity")));
        assert!(!accepts_gzip(Some("gzip; q=0.0")));
        assert!(!accepts_gzip(Some("x-gzip-like, deflate")));
        assert!(!accepts_gzip(None));
    }
}
