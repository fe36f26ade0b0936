//! Small routing answers shared by every function, in Django REST Framework's shapes.

use crate::response::{detail_response, json_with_headers};
use http::{Method, StatusCode, header};
use lambda_http::{Body, Response};

/// A path without its trailing slash, so `/x/` and `/x` route alike.
pub fn without_trailing_slash(path: &str) -> &str {
    if path.len() > 1 { path.strip_suffix('/').unwrap_or(path) } else { path }
}

/// 404 `{"detail": "Not found."}` for a path no route serves.
pub fn not_found() -> Response<Body> {
    detail_response(StatusCode::NOT_FOUND, "Not found.")
}

/// 405 `{"detail": "Method \"X\" not allowed."}` with `Allow`.
pub fn method_not_allowed(method: &Method, allow: &'static str) -> Response<Body> {
    let body = serde_json::json!({ "detail": format!("Method \"{method}\" not allowed.") });
    json_with_headers(StatusCode::METHOD_NOT_ALLOWED, &body, &[(header::ALLOW, allow)])
}
