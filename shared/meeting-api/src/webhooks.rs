//! `/api/v1/external/webhooks/…`: an external application's webhook endpoints, in the meeting
//! API's style (bare objects, DRF pagination, `{"detail"}` errors, field errors as DRF's 400),
//! with the backend's webhook fields and semantics (`webhooks::manage`): Standard Webhooks
//! signing, the same retries, disabling, URL guard and delivery pool (the application is the
//! endpoints' owner). The token must carry `webhooks:manage`.
//!
//! | route | answer |
//! |---|---|
//! | `GET endpoints/` | page-number list, newest first (`page`, `size`: 10, at most 100) |
//! | `POST endpoints/` | 201, the endpoint and its `secret` (shown once) |
//! | `GET endpoints/{id}/` | the endpoint |
//! | `PUT endpoints/{id}/` | replaced (the whole body, as create) |
//! | `PATCH endpoints/{id}/` | the fields given changed (`url`, `description`, `event_types`, `metadata`, `enabled`) |
//! | `DELETE endpoints/{id}/` | 204 |
//! | `POST endpoints/{id}/rotate/` | a new `secret`; the previous one signs beside it for 24 hours |
//! | `POST endpoints/{id}/test/` | 202, a `webhook.test` event queued to this endpoint |
//! | `GET endpoints/{id}/deliveries/` | cursor list `{next, previous, results}`, newest first, with attempts (`status`, `cursor`, `size`: 20, at most 100) |
//! | `POST deliveries/{id}/replay/` | 202, the delivery queued again |
//!
//! Order of checks: route (404), method (405), bearer token (401), scope (403 `insufficient_scope`), the
//! client's rate limit (429), the body's size (413, at most `MAX_BODY_BYTES`) and nesting (400),
//! then the route's own. DynamoDB calls: the bearer's (as the meeting
//! routes: 1 BatchGetItem + 1 UpdateItem), then `webhooks::manage`'s.

use crate::bearer::insufficient_scope;
use chrono::{DateTime, Utc};
use http::{Method, StatusCode};
use http_api::pagination::{INVALID_PAGE, PageBody, PageNumberPagination, RequestUrl};
use http_api::routing::{method_not_allowed, not_found, segments_under};
use http_api::{Body, HttpFunction, Params, Request, Response, ResponseFuture, detail_response, json};
use meeting_data::access::{AccessGrant, WEBHOOKS_SCOPE};
use meeting_data::clock::{Clock, system_clock};
use meeting_data::settings::{self, Lookup, SettingError};
use meeting_data::store::AppStore;
use platform_data::ids::WebhookEndpointId;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use storage::rate_limit::RateLimiter;
use uuid::Uuid;
use webhooks::audience::MEETING_EVENT_TYPES;
use webhooks::manage::{ManageError, Management};
use webhooks::owner::Owner;
use webhooks::settings as wh_settings;
use webhooks::store::{Delivery, DeliveryStatus, Endpoint};

const BASE_PATH: &str = "/api/v1/external/webhooks";

/// Endpoints a page: 10 by default, at most 100.
pub const ENDPOINT_PAGINATION: PageNumberPagination = PageNumberPagination { default_size: 10, max_size: 100 };

/// Deliveries a page: 20 by default, at most 100.
pub const DELIVERY_PAGE_SIZE: (usize, usize) = (20, 100);

/// The quotas table (shared with the backend's quotas).
const QUOTAS_TABLE: &str = "QUOTAS_TABLE";

/// The external webhooks function.
pub struct ExternalWebhooksService {
    apps: AppStore,
    limiter: RateLimiter,
    manage: Management,
    clock: Clock,
}

/// Every way a request ends other than success.
enum Failure {
    Unauthorized,
    /// DRF's 400: field → messages.
    Fields(BTreeMap<String, String>),
    Detail(StatusCode, String),
    Internal,
}

impl From<ManageError> for Failure {
    fn from(err: ManageError) -> Self {
        match err {
            ManageError::NotFound(_) => Failure::Detail(StatusCode::NOT_FOUND, "Not found.".into()),
            ManageError::Malformed(fields) | ManageError::Invalid(fields) => Failure::Fields(fields),
            ManageError::Conflict(message) => Failure::Detail(StatusCode::CONFLICT, message.into()),
            ManageError::QuotaReached(quota) => {
                telemetry::metrics::emit([telemetry::metrics::quota_refusal(quota.name)]);
                Failure::Detail(
                    StatusCode::CONFLICT,
                    format!("This application already has {} webhook endpoints.", quota.limit),
                )
            }
            ManageError::Store(err) => {
                tracing::error!(error = %err, "webhook storage failure");
                Failure::Internal
            }
        }
    }
}

impl From<storage::StoreError> for Failure {
    fn from(err: storage::StoreError) -> Self {
        ManageError::Store(err).into()
    }
}

impl Failure {
    fn into_response(self) -> Response<Body> {
        match self {
            Failure::Unauthorized => crate::bearer::unauthorized(),
            Failure::Fields(fields) => {
                let body: Map<String, Value> =
                    fields.into_iter().map(|(field, issue)| (field, json!([issue]))).collect();
                json(StatusCode::BAD_REQUEST, &body)
            }
            Failure::Detail(status, detail) => detail_response(status, &detail),
            Failure::Internal => detail_response(StatusCode::INTERNAL_SERVER_ERROR, "A server error occurred."),
        }
    }
}

fn not_found_failure() -> Failure {
    Failure::Detail(StatusCode::NOT_FOUND, "Not found.".into())
}

impl ExternalWebhooksService {
    /// A service over explicit dependencies.
    pub fn new(apps: AppStore, limiter: RateLimiter, manage: Management) -> Self {
        Self { apps, limiter, manage, clock: system_clock() }
    }

    /// A service configured from settings (see `template.yaml`): the applications and tokens,
    /// the client rate limit, the webhook tables, queue and secrets, and each application's
    /// endpoint quota (`QUOTA_WEBHOOK_ENDPOINTS`, default 20, counted in `QUOTAS_TABLE`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let apps = AppStore::new(
            aws.dynamodb(),
            settings::required(lookup, settings::EXTERNAL_APPS_TABLE)?,
            settings::required(lookup, settings::ACCESS_TOKENS_TABLE)?,
        );
        let counters = storage::quota::Counters::new(aws.dynamodb(), settings::required(lookup, QUOTAS_TABLE)?);
        let quota = storage::quota::Quota {
            name: "webhook_endpoints",
            limit: aws_env::settings::positive_or(lookup, wh_settings::QUOTA_WEBHOOK_ENDPOINTS, 20)?,
        };
        let mut publisher = wh_settings::publisher_from_settings(aws, lookup)?;
        publisher.store = publisher.store.with_quota(counters, quota);
        let manage = Management {
            publisher,
            secrets: wh_settings::secrets_from_settings(aws, lookup)?,
            policy: wh_settings::url_policy_from_settings(lookup),
            event_types: &MEETING_EVENT_TYPES,
        };
        Ok(Self::new(apps, crate::client_limit::limiter_from_settings(aws, lookup)?, manage))
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    async fn route(&self, request: Request) -> Response<Body> {
        let path = request.uri().path().to_owned();
        let Some(segments) = segments_under(&path, BASE_PATH) else { return not_found() };
        let Some(allow) = allowed_methods(&segments) else { return not_found() };
        if !allow.split(", ").any(|method| method == request.method().as_str()) {
            return method_not_allowed(request.method(), allow);
        }
        let grant = match self.authorize(&request).await {
            Ok(grant) => grant,
            Err(failure) => return failure.into_response(),
        };
        if !grant.allows(WEBHOOKS_SCOPE) {
            return insufficient_scope(WEBHOOKS_SCOPE);
        }
        let owner = Owner::Application(grant.client_id.clone());
        let reads_only = request.method() == Method::GET;
        let answer = async { self.serve(&owner, &segments, &request).await.unwrap_or_else(Failure::into_response) };
        crate::client_limit::within_limit(&self.limiter, &grant.client_id, (self.clock)(), reads_only, answer).await
    }

    async fn authorize(&self, request: &Request) -> Result<AccessGrant, Failure> {
        let grant = crate::bearer::authorize(&self.apps, &self.limiter, (self.clock)(), request).await?;
        grant.ok_or(Failure::Unauthorized)
    }

    async fn serve(&self, owner: &Owner, segments: &[&str], request: &Request) -> Result<Response<Body>, Failure> {
        let now = (self.clock)();
        let params = Params::from_query(request.uri());
        let body = request.body().as_ref();
        check_body(body)?;
        match (request.method().clone(), segments) {
            (Method::GET, ["endpoints"]) => self.list(owner, request, &params).await,
            (Method::POST, ["endpoints"]) => {
                let spec = self.manage.parse(body).await?;
                let (endpoint, secret) = self.manage.create(owner, spec, now).await?;
                let mut view = endpoint_view(&endpoint);
                view["secret"] = json!(secret);
                Ok(json(StatusCode::CREATED, &view))
            }
            (method, ["endpoints", raw]) => {
                let id = endpoint_id(raw)?;
                match method {
                    Method::GET => Ok(json(StatusCode::OK, &endpoint_view(&self.manage.endpoint(owner, id).await?))),
                    Method::DELETE => {
                        self.manage.delete(owner, id).await?;
                        Ok(empty(StatusCode::NO_CONTENT))
                    }
                    _ => {
                        let previous = self.manage.endpoint(owner, id).await?;
                        let body =
                            if method == Method::PATCH { Management::merged(&previous, body) } else { body.to_vec() };
                        let spec = self.manage.parse(&body).await?;
                        let endpoint = self.manage.replace(previous, spec, now).await?;
                        Ok(json(StatusCode::OK, &endpoint_view(&endpoint)))
                    }
                }
            }
            (_, ["endpoints", raw, "rotate"]) => {
                let id = endpoint_id(raw)?;
                let rotated = self.manage.rotate(owner, id, now).await?;
                let expires = time(rotated.previous_expires_at);
                Ok(json(
                    StatusCode::OK,
                    &json!({ "id": id, "secret": rotated.secret, "previous_secret_expires_at": expires }),
                ))
            }
            (_, ["endpoints", raw, "test"]) => {
                let (event, delivery_id) = self.manage.test(owner, endpoint_id(raw)?, now).await?;
                Ok(json(StatusCode::ACCEPTED, &json!({ "event_id": event.id, "delivery_id": delivery_id })))
            }
            (_, ["endpoints", raw, "deliveries"]) => self.deliveries(owner, endpoint_id(raw)?, request, &params).await,
            (_, ["deliveries", raw, "replay"]) => {
                let id = Uuid::parse_str(raw).map_err(|_| not_found_failure())?;
                self.manage.replay(owner, id).await?;
                Ok(json(StatusCode::ACCEPTED, &json!({ "delivery_id": id, "status": "queued" })))
            }
            _ => Err(not_found_failure()),
        }
    }

    async fn list(&self, owner: &Owner, request: &Request, params: &Params) -> Result<Response<Body>, Failure> {
        let endpoints = self.manage.list(owner).await?;
        let page = ENDPOINT_PAGINATION
            .request(params)
            .resolve(endpoints.len())
            .map_err(|_| Failure::Detail(StatusCode::NOT_FOUND, INVALID_PAGE.into()))?;
        let url = RequestUrl::of(request);
        let results = endpoints.get(page.range()).unwrap_or_default().iter().map(endpoint_view).collect();
        let body =
            PageBody { count: page.count, next: page.next_url(&url), previous: page.previous_url(&url), results };
        Ok(json(StatusCode::OK, &body))
    }

    /// DRF's cursor pagination: `next` carries the `cursor` of the following page; `previous`
    /// is always null (the list is read forward only).
    async fn deliveries(
        &self,
        owner: &Owner,
        id: WebhookEndpointId,
        request: &Request,
        params: &Params,
    ) -> Result<Response<Body>, Failure> {
        let mut problems = BTreeMap::new();
        let status = match params.non_empty("status") {
            None => None,
            Some(raw) => {
                let parsed = DeliveryStatus::parse(raw);
                if parsed.is_none() {
                    problems.insert("status".to_owned(), "Must be one of pending, succeeded, failed.".to_owned());
                }
                parsed
            }
        };
        let cursor = match params.non_empty("cursor") {
            None => None,
            Some(raw) => {
                let parsed = Uuid::parse_str(raw).ok();
                if parsed.is_none() {
                    problems.insert("cursor".to_owned(), "Invalid cursor".to_owned());
                }
                parsed
            }
        };
        if !problems.is_empty() {
            return Err(Failure::Fields(problems));
        }
        let (default_size, max_size) = DELIVERY_PAGE_SIZE;
        let size = params
            .last("size")
            .and_then(|raw| raw.parse::<usize>().ok())
            .filter(|size| *size > 0)
            .map_or(default_size, |size| size.min(max_size));
        let page = self.manage.deliveries(owner, id, status, size, cursor).await?;
        let url = RequestUrl::of(request);
        let next = page.next.map(|next| url.with_param("cursor", Some(next.to_string())));
        let results: Vec<Value> = page.items.iter().map(delivery_view).collect();
        Ok(json(StatusCode::OK, &json!({ "next": next, "previous": null, "results": results })))
    }
}

impl HttpFunction for ExternalWebhooksService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        Box::pin(self.route(request))
    }
}

/// The largest body a route takes: an endpoint is a URL, a description, a few event types and
/// some metadata.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The body's size (413) and, for JSON, its nesting (400 naming the field), before anything
/// parses it.
fn check_body(body: &[u8]) -> Result<(), Failure> {
    if body.len() > MAX_BODY_BYTES {
        let detail = format!("The request body is larger than {MAX_BODY_BYTES} bytes.");
        return Err(Failure::Detail(StatusCode::PAYLOAD_TOO_LARGE, detail));
    }
    let nesting = http_api::limits::json_nesting(body);
    if nesting.depth > http_api::limits::MAX_JSON_DEPTH {
        let field = nesting.field.unwrap_or_else(|| "body".into());
        let issue = format!("must not nest deeper than {} levels", http_api::limits::MAX_JSON_DEPTH);
        return Err(Failure::Fields(BTreeMap::from([(field, issue)])));
    }
    Ok(())
}

/// The methods a path takes, `None` when no route serves it.
fn allowed_methods(segments: &[&str]) -> Option<&'static str> {
    match segments {
        ["endpoints"] => Some("GET, POST"),
        ["endpoints", _] => Some("GET, PUT, PATCH, DELETE"),
        ["endpoints", _, "rotate" | "test"] | ["deliveries", _, "replay"] => Some("POST"),
        ["endpoints", _, "deliveries"] => Some("GET"),
        _ => None,
    }
}

/// An endpoint id of the path; one that is not a UUID names nothing (404).
fn endpoint_id(raw: &str) -> Result<WebhookEndpointId, Failure> {
    Uuid::parse_str(raw).map(WebhookEndpointId::from).map_err(|_| not_found_failure())
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Body::Empty);
    *response.status_mut() = status;
    response
}

fn time(value: DateTime<Utc>) -> String {
    meeting_data::announcements::format_datetime(value)
}

fn endpoint_view(endpoint: &Endpoint) -> Value {
    let spec = &endpoint.spec;
    json!({
        "id": endpoint.id,
        "url": spec.url,
        "description": spec.description,
        "event_types": spec.event_types,
        "metadata": spec.metadata,
        "enabled": spec.enabled,
        "disabled_reason": endpoint.disabled_reason,
        "failing_since": endpoint.failing_since.map(time),
        "created_at": time(endpoint.created_at),
        "updated_at": time(endpoint.updated_at),
    })
}

fn delivery_view(delivery: &Delivery) -> Value {
    let attempts: Vec<Value> = delivery
        .attempts
        .iter()
        .map(|attempt| {
            json!({
                "timestamp": time(attempt.timestamp),
                "status_code": attempt.status_code,
                "response_body": attempt.response_body,
                "duration_ms": attempt.duration_ms,
                "error": attempt.error,
                "trigger": attempt.trigger,
            })
        })
        .collect();
    json!({
        "id": delivery.id,
        "endpoint_id": delivery.endpoint_id,
        "event_id": delivery.event_id,
        "event_type": delivery.event_type,
        "status": delivery.status,
        "attempts": attempts,
        "attempt_count": delivery.attempt_count,
        "next_attempt_at": delivery.next_attempt_at.map(time),
        "created_at": time(delivery.created_at),
        "updated_at": time(delivery.updated_at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_bounded_before_they_are_parsed() {
        assert!(check_body(br#"{"url": "https://x.test"}"#).is_ok());
        let too_large = vec![b' '; MAX_BODY_BYTES + 1];
        assert!(matches!(check_body(&too_large), Err(Failure::Detail(StatusCode::PAYLOAD_TOO_LARGE, _))));
        let deep = format!(r#"{{"metadata": {}{}}}"#, "[".repeat(40), "]".repeat(40));
        let Err(Failure::Fields(fields)) = check_body(deep.as_bytes()) else { panic!("too deep") };
        assert_eq!(fields.keys().collect::<Vec<_>>(), ["metadata"]);
    }

    #[test]
    fn routes_name_their_methods() {
        assert_eq!(allowed_methods(&["endpoints"]), Some("GET, POST"));
        assert_eq!(allowed_methods(&["endpoints", "x", "rotate"]), Some("POST"));
        assert_eq!(allowed_methods(&["endpoints", "x", "deliveries"]), Some("GET"));
        assert_eq!(allowed_methods(&["events"]), None);
        assert_eq!(allowed_methods(&[]), None);
    }
}
