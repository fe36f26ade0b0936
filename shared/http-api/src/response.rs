//! Building JSON responses.

use http::{HeaderName, HeaderValue, StatusCode, header};
use lambda_http::{Body, Response};
use serde::Serialize;

/// A JSON response with `status` and `body`.
pub fn json(status: StatusCode, body: &impl Serialize) -> Response<Body> {
    json_with_headers(status, body, &[])
}

/// A JSON response with extra headers (name, value).
pub fn json_with_headers(
    status: StatusCode,
    body: &impl Serialize,
    headers: &[(HeaderName, &'static str)],
) -> Response<Body> {
    let (status, bytes) = match serde_json::to_vec(body) {
        Ok(bytes) => (status, bytes),
        // Serializing our own response types cannot fail; if it ever does, say so plainly.
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, br#"{"detail":"Internal server error."}"#.to_vec()),
    };
    let mut response = Response::new(Body::Binary(bytes));
    *response.status_mut() = status;
    let response_headers = response.headers_mut();
    response_headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in headers {
        response_headers.insert(name.clone(), HeaderValue::from_static(value));
    }
    response
}

/// A `{"detail": message}` response, the shape of Django REST Framework's errors.
pub fn detail_response(status: StatusCode, detail: &str) -> Response<Body> {
    json(status, &serde_json::json!({ "detail": detail }))
}

/// The body of a response as UTF-8 text (for tests and logs).
pub fn body_text(body: &Body) -> String {
    String::from_utf8_lossy(body.as_ref()).into_owned()
}
