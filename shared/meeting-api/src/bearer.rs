//! The bearer token of a meeting API request (`/api/v1/external/…`): the grant it carries, or
//! the answers to a token that is refused (401) or lacks a route's scope (403, RFC 6750 §3.1).

use chrono::{DateTime, Utc};
use http::StatusCode;
use http::header::WWW_AUTHENTICATE;
use http_api::routing::authorization;
use http_api::{Body, Request, Response, json_with_headers};
use meeting_data::access::AccessGrant;
use meeting_data::store::{AppStore, StoreError};
use serde_json::json;
use storage::rate_limit::RateLimiter;

const UNAUTHORIZED: &str = "The external application credentials are invalid or inactive.";

/// The grant of the request's bearer token: `Ok(None)` when there is none or it is refused
/// (answer `unauthorized()`). `limiter`, which will count the request, may learn the client's
/// bucket on the way (`AppStore::authorize_bearer`).
pub async fn authorize(
    apps: &AppStore,
    limiter: &RateLimiter,
    now: DateTime<Utc>,
    request: &Request,
) -> Result<Option<AccessGrant>, StoreError> {
    let Some(token) = authorization(request, "Bearer") else { return Ok(None) };
    let grant = apps.authorize_bearer(token, now, limiter).await?.map_err(|rejection| {
        tracing::info!(?rejection, "bearer token refused");
    });
    let Ok(grant) = grant else { return Ok(None) };
    http_api::record_on_request("client_id", &grant.client_id);
    Ok(Some(grant))
}

/// `401` with `WWW-Authenticate: Bearer error="invalid_token"` and the meeting API's body.
pub fn unauthorized() -> Response<Body> {
    json_with_headers(
        StatusCode::UNAUTHORIZED,
        &json!({ "detail": UNAUTHORIZED }),
        &[(WWW_AUTHENTICATE, "Bearer error=\"invalid_token\"")],
    )
}

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
