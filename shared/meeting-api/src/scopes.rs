//! The answer to a valid token that lacks a route's scope (RFC 6750 §3.1).

use http::StatusCode;
use http::header::WWW_AUTHENTICATE;
use http_api::{Body, Response, json_with_headers};
use serde_json::json;

/// `403` with `WWW-Authenticate: Bearer error="insufficient_scope", scope="{scope}"` and the
/// meeting API's `{"detail"}` body.
pub fn insufficient_scope(scope: &'static str) -> Response<Body> {
    let challenge = format!("Bearer error=\"insufficient_scope\", scope=\"{scope}\"");
    let body = json!({ "detail": format!("The access token lacks the {scope} scope.") });
    let mut response = json_with_headers(StatusCode::FORBIDDEN, &body, &[]);
    if let Ok(value) = http::HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(WWW_AUTHENTICATE, value);
    }
    response
}
