//! Small routing answers shared by every function, in Django REST Framework's shapes.

use crate::response::{detail_response, json_with_headers};
use http::{Method, StatusCode, header};
use lambda_http::{Body, Response};

/// The credentials of an `Authorization` header using `scheme` (case-insensitive), e.g. the
/// token of `Bearer abc`; `None` for another scheme or empty credentials.
pub fn authorization<'a, B>(request: &'a http::Request<B>, scheme: &str) -> Option<&'a str> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (given, credentials) = value.split_once(' ')?;
    let credentials = credentials.trim();
    (given.eq_ignore_ascii_case(scheme) && !credentials.is_empty()).then_some(credentials)
}

/// The non-empty segments of `path` under `prefix` (`/tools/1/script` under `/tools` is
/// `["1", "script"]`); `None` when the path is not under it.
pub fn segments_under<'a>(path: &'a str, prefix: &str) -> Option<Vec<&'a str>> {
    let rest = path.strip_prefix(prefix)?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    Some(rest.split('/').filter(|segment| !segment.is_empty()).collect())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_under_a_prefix() {
        assert_eq!(segments_under("/tools/1/script/", "/tools"), Some(vec!["1", "script"]));
        assert_eq!(segments_under("/tools", "/tools"), Some(vec![]));
        assert_eq!(segments_under("/toolsx", "/tools"), None);
        assert_eq!(segments_under("/agents", "/tools"), None);
    }

    #[test]
    fn authorization_reads_one_scheme() {
        let request = |value: &str| http::Request::builder().header("authorization", value).body(()).unwrap();
        assert_eq!(authorization(&request("Bearer abc"), "bearer"), Some("abc"));
        assert_eq!(authorization(&request("bearer  abc "), "Bearer"), Some("abc"));
        assert_eq!(authorization(&request("Basic abc"), "Bearer"), None);
        assert_eq!(authorization(&request("Bearer "), "Bearer"), None);
        assert_eq!(authorization(&request("Bearer"), "Bearer"), None);
    }
}

#[cfg(test)]
mod properties {
    //! Property tests: any `Authorization` value and path get an answer, never a panic.

    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_authorization_header_is_read_or_ignored(
            value in prop_oneof![
                any::<Vec<u8>>(),
                "(Bearer|bearer|Basic|BASIC)( {0,3})[ -~]{0,40}".prop_map(String::into_bytes),
            ],
            scheme in prop_oneof![Just("Bearer"), Just("Basic")],
        ) {
            let Ok(header) = http::HeaderValue::from_bytes(&value) else { return Ok(()) };
            let request = http::Request::builder().header(header::AUTHORIZATION, header).body(()).unwrap();
            if let Some(credentials) = authorization(&request, scheme) {
                prop_assert!(!credentials.is_empty() && credentials == credentials.trim());
                prop_assert!(value.len() > scheme.len() && value[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes()));
            }
        }

        #[test]
        fn any_path_splits(path in any::<String>(), prefix in prop_oneof![Just("/tools"), Just("/agents"), Just("")]) {
            let trimmed = without_trailing_slash(&path);
            prop_assert!(path.starts_with(trimmed));
            if let Some(segments) = segments_under(&path, prefix) {
                prop_assert!(segments.iter().all(|segment| !segment.is_empty() && !segment.contains('/')));
            }
        }
    }
}
