//! The per-client rate limit of the meeting API: the backend's token bucket
//! (`storage::rate_limit`, its table `RateLimitsTable`), one bucket per `client_id`, shared by the
//! meeting reads and the token endpoints. Defaults as the backend's (bursts of 200, 100 per
//! minute), set by `MeetingRateLimitCapacity` and `MeetingRateLimitPerMinute`.
//!
//! Only authenticated requests count: a request is limited once its token or its client
//! credentials are valid, so nobody can use up an integrator's allowance with its `client_id`
//! alone. A refused request is 429 with Django REST Framework's throttled body and
//! `Retry-After`; every limited response carries `X-RateLimit-Limit`, `X-RateLimit-Remaining`
//! and `X-RateLimit-Reset`.

use chrono::{DateTime, Utc};
use http::{HeaderValue, StatusCode};
use http_api::{Body, Response, detail_response};
use meeting_data::access::rate_limit_bucket;
use meeting_data::settings::{self, Lookup, SettingError};
use std::future::Future;
use storage::rate_limit::{RateLimit, RateLimiter};

/// The limiter configured from settings (see `template.yaml`).
pub fn limiter_from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<RateLimiter, SettingError> {
    let limit = RateLimit {
        capacity: settings::positive_or(lookup, settings::MEETING_RATE_LIMIT_CAPACITY, RateLimit::DEFAULT.capacity)?,
        per_minute: settings::positive_or(
            lookup,
            settings::MEETING_RATE_LIMIT_PER_MINUTE,
            RateLimit::DEFAULT.per_minute,
        )?,
    };
    Ok(RateLimiter::new(aws.dynamodb(), settings::required(lookup, settings::RATE_LIMITS_TABLE)?, limit))
}

/// Answers an authenticated request of `client_id` with `answer`, unless its bucket is empty:
/// then 429. A request that only reads (`reads_only`) is answered beside the limiter's check.
pub async fn within_limit(
    limiter: &RateLimiter,
    client_id: &str,
    now: DateTime<Utc>,
    reads_only: bool,
    answer: impl Future<Output = Response<Body>>,
) -> Response<Body> {
    let (decision, answer) =
        limiter.serve(&rate_limit_bucket(client_id), now.timestamp_millis(), reads_only, answer).await;
    let mut response = match answer {
        Some(answer) => answer,
        None => {
            tracing::info!(client_id, "request throttled");
            throttled(decision.and_then(|decision| decision.retry_after).unwrap_or(1))
        }
    };
    for (name, value) in decision.iter().flat_map(|decision| decision.headers()) {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// DRF's answer to a throttled request (`rest_framework.exceptions.Throttled`): 429,
/// `{"detail": "Request was throttled. Expected available in N seconds."}` and `Retry-After: N`.
fn throttled(retry_after: i64) -> Response<Body> {
    let unit = if retry_after == 1 { "second" } else { "seconds" };
    let detail = format!("Request was throttled. Expected available in {retry_after} {unit}.");
    let mut response = detail_response(StatusCode::TOO_MANY_REQUESTS, &detail);
    response.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from(retry_after));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttled_answers_are_drf_s() {
        let response = throttled(7);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["retry-after"], "7");
        let body: serde_json::Value = serde_json::from_slice(response.body().as_ref()).unwrap();
        assert_eq!(body, serde_json::json!({"detail": "Request was throttled. Expected available in 7 seconds."}));
        let one: serde_json::Value = serde_json::from_slice(throttled(1).body().as_ref()).unwrap();
        assert_eq!(one["detail"], "Request was throttled. Expected available in 1 second.");
    }
}
