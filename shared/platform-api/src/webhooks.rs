//! `/webhooks/…`: endpoints (CRUD, secret rotation, test), events, deliveries and replay.
//!
//! What endpoints do is `webhooks::manage`'s (shared with the meeting API's routes for external
//! applications); this module answers in the backend's envelope.
//!
//! Calls after the gate: the endpoint routes as `webhooks::manage` lists them; events = 1 Query with `Limit` (at most `MAX_PAGE_QUERIES` when a filter
//! skips items); event = 1 GetItem + 1 Query (`by-event`); deliveries = 1 GetItem + 1 Query with
//! `Limit` (at most `MAX_PAGE_QUERIES`); replay = 2 GetItem + 1 SendMessageBatch; replay-failed =
//! 1 GetItem + 1 Query with `Limit` on `by-endpoint-failed` + 1 SendMessageBatch per 10 (at most
//! `REPLAY_BATCH` deliveries a call).

use crate::envelope::{ApiError, ErrorCode, PageRequest, path_id, success};
use crate::gate::{Access, Gate};
use crate::settings;
use aws_env::settings::{Lookup, SettingError, required};
use chrono::{DateTime, Duration as Span, SecondsFormat, Utc};
use http::{Method, StatusCode};
use http_api::routing::segments_under;
use http_api::{Body, HttpFunction, Params, Request, Response, ResponseFuture};
use platform_data::api_keys::Caller;
use platform_data::ids::{AccountId, WebhookEndpointId};
use platform_data::secrets::RecordSecrets;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use uuid::Uuid;
use webhooks::endpoints::UrlPolicy;
use webhooks::events::EVENT_TYPES;
use webhooks::fairness::InFlight;
use webhooks::manage::{ManageError, Management};
use webhooks::owner::Owner;
use webhooks::publisher::Publisher;
use webhooks::store::{Delivery, DeliveryStatus, Endpoint, RETENTION_DAYS, WebhookStore, Window};

pub use webhooks::manage::ROTATION_OVERLAP_HOURS;

/// Default and longest window of `replay-failed`.
pub const REPLAY_WINDOW_DEFAULT_HOURS: i64 = 24;
pub const REPLAY_WINDOW_MAX_DAYS: i64 = 14;

/// Failed deliveries one `replay-failed` call queues at most.
pub const REPLAY_BATCH: usize = 100;

/// The webhooks management function.
pub struct WebhooksService {
    gate: Gate,
    manage: Management,
}

/// The publisher, endpoint secrets and URL policy every webhook-aware function builds from
/// settings.
pub struct WebhookSettings {
    pub publisher: Publisher,
    pub secrets: RecordSecrets<WebhookEndpointId>,
    pub policy: UrlPolicy,
}

impl WebhookSettings {
    /// From the template's `WEBHOOK_*` settings.
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        Ok(Self {
            publisher: publisher_from_settings(aws, lookup)?,
            secrets: webhooks::settings::secrets_from_settings(aws, lookup)?,
            policy: webhooks::settings::url_policy_from_settings(lookup),
        })
    }
}

impl WebhookSettings {
    /// The delivery worker over these settings, on the system clock with random jitter.
    pub fn into_deliverer(self) -> webhooks::delivery::Deliverer {
        webhooks::delivery::Deliverer::new(
            self.publisher,
            self.secrets,
            self.policy,
            aws_env::clock::system_clock(),
            Arc::new(webhooks::policy::random_jitter),
        )
    }
}

/// The delivery function's worker: the webhook settings, and each endpoint owner's attempts in
/// flight bounded by `QUOTA_WEBHOOK_DELIVERIES_IN_FLIGHT` (default 5) in `QUOTAS_TABLE`.
pub fn deliverer_from_settings(
    aws: &aws_env::Clients,
    lookup: Lookup,
) -> Result<webhooks::delivery::Deliverer, SettingError> {
    Ok(WebhookSettings::from_settings(aws, lookup)?
        .into_deliverer()
        .with_in_flight(in_flight_from_settings(aws, lookup)?))
}

/// Each endpoint owner's bound on attempts in flight, from the settings.
pub fn in_flight_from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<InFlight, SettingError> {
    let leases = storage::quota::Leases::new(aws.dynamodb(), required(lookup, settings::QUOTAS_TABLE)?);
    let limit = aws_env::settings::positive_or(
        lookup,
        settings::QUOTA_WEBHOOK_DELIVERIES_IN_FLIGHT,
        DEFAULT_DELIVERIES_IN_FLIGHT,
    )?;
    Ok(InFlight::new(leases, limit))
}

/// Each endpoint owner's attempts in flight when `QUOTA_WEBHOOK_DELIVERIES_IN_FLIGHT` says
/// nothing: a quarter of the pool's default 20 invocations.
pub const DEFAULT_DELIVERIES_IN_FLIGHT: u32 = 5;

pub use webhooks::settings::publisher_from_settings;

/// The sweeper that queues lost deliveries again, on the system clock.
pub fn sweeper_from_settings(
    aws: &aws_env::Clients,
    lookup: Lookup,
) -> Result<webhooks::sweeper::Sweeper, SettingError> {
    Ok(webhooks::sweeper::Sweeper {
        publisher: publisher_from_settings(aws, lookup)?,
        clock: aws_env::clock::system_clock(),
    })
}

pub use webhooks::settings::webhook_secrets;

impl WebhooksService {
    /// A service over explicit dependencies.
    pub fn new(gate: Gate, settings: WebhookSettings) -> Self {
        let manage = Management {
            publisher: settings.publisher,
            secrets: settings.secrets,
            policy: settings.policy,
            event_types: &EVENT_TYPES,
        };
        Self { gate, manage }
    }

    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let mut webhooks = WebhookSettings::from_settings(aws, lookup)?;
        // Endpoints are created and deleted here only: here they are counted.
        webhooks.publisher.store = webhooks.publisher.store.with_quota(
            storage::quota::Counters::new(aws.dynamodb(), required(lookup, settings::QUOTAS_TABLE)?),
            settings::quota(lookup, "webhook_endpoints", settings::QUOTA_WEBHOOK_ENDPOINTS, 20)?,
        );
        Ok(Self::new(Gate::from_settings(aws, lookup)?, webhooks))
    }

    /// Reads the time from `clock` (tests).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.gate = self.gate.with_clock(clock);
        self
    }

    fn store(&self) -> &WebhookStore {
        &self.manage.publisher.store
    }

    async fn route(&self, caller: Caller, request: Request) -> Result<Response<Body>, ApiError> {
        let path = request.uri().path().to_owned();
        let segments = segments_under(&path, "/webhooks").ok_or_else(|| ApiError::not_found("resource"))?;
        let account = caller.account_id;
        let params = Params::from_query(request.uri());
        match (request.method().clone(), segments.as_slice()) {
            (Method::GET, ["endpoints"]) => self.list_endpoints(account, &params).await,
            (Method::POST, ["endpoints"]) => self.create(account, request.body()).await,
            (method, ["endpoints", raw]) => {
                let id = path_id(raw, "endpoint_id")?;
                match method {
                    Method::GET => {
                        let endpoint = self.manage.endpoint(&account.into(), id).await?;
                        Ok(success(StatusCode::OK, view(&endpoint), "Endpoint retrieved"))
                    }
                    Method::PUT => self.replace(account, id, request.body()).await,
                    Method::DELETE => self.delete(account, id).await,
                    other => Err(ApiError::method_not_allowed(&other, "GET, PUT, DELETE")),
                }
            }
            (Method::POST, ["endpoints", raw, "rotate"]) => self.rotate(account, path_id(raw, "endpoint_id")?).await,
            (Method::POST, ["endpoints", raw, "test"]) => self.test(account, path_id(raw, "endpoint_id")?).await,
            (Method::GET, ["endpoints", raw, "deliveries"]) => {
                self.deliveries(account, path_id(raw, "endpoint_id")?, &params).await
            }
            (Method::POST, ["endpoints", raw, "replay-failed"]) => {
                self.replay_failed(account, path_id(raw, "endpoint_id")?, request.body()).await
            }
            (Method::GET, ["events"]) => self.events(account, &params).await,
            (Method::GET, ["events", raw]) => {
                let id = path_id(raw, "event_id")?;
                self.event(account, id).await
            }
            (Method::POST, ["deliveries", raw, "replay"]) => {
                let id = path_id(raw, "delivery_id")?;
                self.replay(account, id).await
            }
            (other, ["endpoints"]) => Err(ApiError::method_not_allowed(&other, "GET, POST")),
            (other, ["events"] | ["events", _] | ["endpoints", _, "deliveries"]) => {
                Err(ApiError::method_not_allowed(&other, "GET"))
            }
            (other, ["endpoints", _, "rotate" | "test" | "replay-failed"] | ["deliveries", _, "replay"]) => {
                Err(ApiError::method_not_allowed(&other, "POST"))
            }
            _ => Err(ApiError::not_found("resource")),
        }
    }

    async fn create(&self, account: AccountId, body: &Body) -> Result<Response<Body>, ApiError> {
        let spec = self.manage.parse(body.as_ref()).await?;
        let (endpoint, secret) = self.manage.create(&account.into(), spec, self.gate.now()).await?;
        let mut data = view(&endpoint);
        data["secret"] = json!(secret);
        Ok(success(StatusCode::CREATED, data, "Endpoint created; store the secret now, it is not shown again"))
    }

    async fn replace(
        &self,
        account: AccountId,
        id: WebhookEndpointId,
        body: &Body,
    ) -> Result<Response<Body>, ApiError> {
        let spec = self.manage.parse(body.as_ref()).await?;
        let previous = self.manage.endpoint(&account.into(), id).await?;
        let endpoint = self.manage.replace(previous, spec, self.gate.now()).await?;
        Ok(success(StatusCode::OK, view(&endpoint), "Endpoint updated"))
    }

    async fn delete(&self, account: AccountId, id: WebhookEndpointId) -> Result<Response<Body>, ApiError> {
        self.manage.delete(&account.into(), id).await?;
        Ok(success(StatusCode::OK, json!({ "id": id }), "Endpoint deleted"))
    }

    /// A new secret; the previous one keeps signing (beside it) for 24 hours.
    async fn rotate(&self, account: AccountId, id: WebhookEndpointId) -> Result<Response<Body>, ApiError> {
        let rotated = self.manage.rotate(&account.into(), id, self.gate.now()).await?;
        let data = json!({
            "id": id,
            "secret": rotated.secret,
            "previous_secret_expires_at": rotated.previous_expires_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        });
        Ok(success(StatusCode::OK, data, "Secret rotated; the previous secret stays valid for 24 hours"))
    }

    /// Sends a `webhook.test` event to this endpoint only, through the real delivery path.
    async fn test(&self, account: AccountId, id: WebhookEndpointId) -> Result<Response<Body>, ApiError> {
        let (event, delivery_id) = self.manage.test(&account.into(), id, self.gate.now()).await?;
        let data = json!({ "event_id": event.id, "delivery_id": delivery_id });
        Ok(success(StatusCode::ACCEPTED, data, "Test event queued"))
    }

    async fn list_endpoints(&self, account: AccountId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = PageRequest::from_params(params, &mut problems);
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        let endpoints = self.manage.list(&account.into()).await?;
        Ok(page.respond(endpoints.iter().map(view), endpoints.len(), "Endpoints retrieved"))
    }

    /// Events newest first: `type`, `since` (default: the retention period), `until` (RFC
    /// 3339), `limit`, `cursor`.
    async fn events(&self, account: AccountId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = CursorRequest::from_params(params, &mut problems);
        let event_type = params.non_empty("type");
        if event_type.is_some_and(|t| !EVENT_TYPES.contains(&t)) {
            problems.insert("type".into(), json!("unknown event type"));
        }
        let now = self.gate.now();
        let since = time_param(params, "since", &mut problems).unwrap_or(now - Span::days(RETENTION_DAYS));
        let until = time_param(params, "until", &mut problems).unwrap_or(now);
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        let events = self.store().list_events(account, (since, until), event_type, page.limit, page.cursor).await?;
        let items = events.items.iter().map(|event| {
            json!({ "id": event.id, "type": event.event_type, "timestamp": event.timestamp, "data": event.data })
        });
        Ok(page.respond(items.collect(), events.next, "Events retrieved"))
    }

    /// An event with its payload and each endpoint's delivery status.
    async fn event(&self, account: AccountId, id: Uuid) -> Result<Response<Body>, ApiError> {
        let event = self.store().get_event(account, id).await?.ok_or_else(|| ApiError::not_found("event"))?;
        let deliveries = self.store().deliveries_of_event(id).await?;
        let deliveries: Vec<Value> = deliveries
            .iter()
            .filter(|delivery| delivery.owner == Owner::Account(account))
            .map(|delivery| {
                json!({
                    "delivery_id": delivery.id,
                    "endpoint_id": delivery.endpoint_id,
                    "status": delivery.status,
                    "attempts": delivery.attempt_count,
                    "next_attempt_at": delivery.next_attempt_at,
                    "last_attempt": delivery.attempts.last(),
                })
            })
            .collect();
        let data = json!({
            "id": event.id,
            "type": event.event_type,
            "timestamp": event.timestamp,
            "data": event.data,
            "deliveries": deliveries,
        });
        Ok(success(StatusCode::OK, data, "Event retrieved"))
    }

    /// An endpoint's deliveries, newest first, with their kept attempts: `status`, `limit`,
    /// `cursor`.
    async fn deliveries(
        &self,
        account: AccountId,
        id: WebhookEndpointId,
        params: &Params,
    ) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = CursorRequest::from_params(params, &mut problems);
        let status = params.non_empty("status").map(DeliveryStatus::parse);
        if status.is_some_and(|parsed| parsed.is_none()) {
            problems.insert("status".into(), json!("must be one of pending, succeeded, failed"));
        }
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        let deliveries = self.manage.deliveries(&account.into(), id, status.flatten(), page.limit, page.cursor).await?;
        let items = deliveries.items.iter().map(delivery_view).collect();
        Ok(page.respond(items, deliveries.next, "Deliveries retrieved"))
    }

    /// Re-sends one delivery now (manual trigger).
    async fn replay(&self, account: AccountId, id: Uuid) -> Result<Response<Body>, ApiError> {
        self.manage.replay(&account.into(), id).await?;
        Ok(success(StatusCode::ACCEPTED, json!({ "delivery_id": id, "status": "queued" }), "Delivery queued"))
    }

    /// Re-sends the failed deliveries of the endpoint created in `[since, until]` (JSON body,
    /// both optional: the last 24 hours; at most 14 days), newest first, `REPLAY_BATCH` per
    /// call: `next_cursor` (sent back as `cursor`) continues with the next batch.
    async fn replay_failed(
        &self,
        account: AccountId,
        id: WebhookEndpointId,
        body: &Body,
    ) -> Result<Response<Body>, ApiError> {
        let now = self.gate.now();
        let (window, cursor) = parse_window(body.as_ref(), now)?;
        let owner = Owner::Account(account);
        let endpoint = self.manage.endpoint(&owner, id).await?;
        let batch = self.store().failed_deliveries(id, window, REPLAY_BATCH, cursor).await?;
        let failed: Vec<Delivery> = batch.items.into_iter().filter(|delivery| delivery.owner == owner).collect();
        self.manage.replay_all(&endpoint, &failed).await?;
        let data = json!({
            "endpoint_id": id,
            "queued": failed.len(),
            "since": window.0.to_rfc3339_opts(SecondsFormat::Millis, true),
            "until": window.1.to_rfc3339_opts(SecondsFormat::Millis, true),
            "next_cursor": batch.next,
        });
        Ok(success(StatusCode::ACCEPTED, data, "Failed deliveries queued"))
    }
}

impl HttpFunction for WebhooksService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        let access = Access::by_method(&request);
        Box::pin(self.gate.serve(request, access, |caller, request| self.route(caller, request)))
    }
}

const INVALID_CURSOR: &str = "must be a next_cursor this list returned";

/// A cursor-paged list request (events, deliveries): `limit` (1–100, default 20) and `cursor`
/// (a previous page's `pagination.next_cursor`). Only `page=1` is accepted: these lists are
/// not counted, so there are no page numbers.
struct CursorRequest {
    limit: usize,
    cursor: Option<Uuid>,
}

impl CursorRequest {
    fn from_params(params: &Params, problems: &mut Map<String, Value>) -> Self {
        let numbered = PageRequest::from_params(params, problems);
        if numbered.page != 1 {
            problems
                .insert("page".into(), json!("this list is paged by cursor: send pagination.next_cursor as cursor"));
        }
        let cursor = params.non_empty("cursor").and_then(|raw| {
            let parsed = Uuid::parse_str(raw).ok();
            if parsed.is_none() {
                problems.insert("cursor".into(), json!(INVALID_CURSOR));
            }
            parsed
        });
        Self { limit: numbered.limit, cursor }
    }

    /// The list envelope of one page: `pagination: {"limit", "next_cursor"}`, `next_cursor`
    /// `null` after the last page.
    fn respond(&self, data: Vec<Value>, next: Option<Uuid>, message: &str) -> Response<Body> {
        let body = json!({
            "success": true,
            "data": data,
            "message": message,
            "timestamp": crate::envelope::timestamp(),
            "pagination": { "limit": self.limit, "next_cursor": next },
        });
        http_api::json(StatusCode::OK, &body)
    }
}

fn time_param(params: &Params, name: &str, problems: &mut Map<String, Value>) -> Option<DateTime<Utc>> {
    let raw = params.non_empty(name)?;
    match DateTime::parse_from_rfc3339(raw) {
        Ok(at) => Some(at.with_timezone(&Utc)),
        Err(_) => {
            problems.insert(name.to_owned(), json!("must be an RFC 3339 date-time"));
            None
        }
    }
}

/// The replay window of a `replay-failed` body, and where to continue in it.
fn parse_window(body: &[u8], now: DateTime<Utc>) -> Result<(Window, Option<Uuid>), ApiError> {
    let fields = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(fields)) => fields,
            _ => {
                return Err(ApiError::new(ErrorCode::BadRequest, "The request body is malformed.")
                    .with_detail("body", "must be a JSON object"));
            }
        }
    };
    let mut problems = Map::new();
    let mut time = |name: &str| match fields.get(name) {
        None | Some(Value::Null) => None,
        Some(Value::String(raw)) => match DateTime::parse_from_rfc3339(raw) {
            Ok(at) => Some(at.with_timezone(&Utc)),
            Err(_) => {
                problems.insert(name.to_owned(), json!("must be an RFC 3339 date-time"));
                None
            }
        },
        Some(_) => {
            problems.insert(name.to_owned(), json!("must be an RFC 3339 date-time"));
            None
        }
    };
    let until = time("until").unwrap_or(now);
    let since = time("since").unwrap_or(until - Span::hours(REPLAY_WINDOW_DEFAULT_HOURS));
    let cursor = match fields.get("cursor") {
        None | Some(Value::Null) => None,
        Some(value) => {
            let parsed = value.as_str().and_then(|raw| Uuid::parse_str(raw).ok());
            if parsed.is_none() {
                problems.insert("cursor".into(), json!(INVALID_CURSOR));
            }
            parsed
        }
    };
    for key in fields.keys().filter(|key| !["since", "until", "cursor"].contains(&key.as_str())) {
        problems.insert(key.clone(), json!("unknown field"));
    }
    if since > until {
        problems.insert("since".into(), json!("must not be after until"));
    } else if until - since > Span::days(REPLAY_WINDOW_MAX_DAYS) {
        problems.insert("since".into(), json!("the window is at most 14 days"));
    }
    if problems.is_empty() {
        Ok(((since, until), cursor))
    } else {
        Err(ApiError::validation("Invalid replay window.", problems))
    }
}

fn view(endpoint: &Endpoint) -> Value {
    let spec = &endpoint.spec;
    json!({
        "id": endpoint.id,
        "url": spec.url,
        "description": spec.description,
        "event_types": spec.event_types,
        "metadata": spec.metadata,
        "enabled": spec.enabled,
        "disabled_reason": endpoint.disabled_reason,
        "failing_since": endpoint.failing_since,
        "account_id": endpoint.owner.account(),
        "created_at": endpoint.created_at,
        "updated_at": endpoint.updated_at,
    })
}

fn delivery_view(delivery: &Delivery) -> Value {
    json!({
        "id": delivery.id,
        "endpoint_id": delivery.endpoint_id,
        "event_id": delivery.event_id,
        "event_type": delivery.event_type,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "attempt_count": delivery.attempt_count,
        "next_attempt_at": delivery.next_attempt_at,
        "created_at": delivery.created_at,
        "updated_at": delivery.updated_at,
    })
}

impl From<ManageError> for ApiError {
    fn from(err: ManageError) -> Self {
        let details = |fields: std::collections::BTreeMap<String, String>| -> Map<String, Value> {
            fields.into_iter().map(|(k, v)| (k, Value::String(v))).collect()
        };
        match err {
            ManageError::NotFound(what) => ApiError::not_found(what),
            ManageError::Malformed(fields) => ApiError {
                code: ErrorCode::BadRequest,
                message: "The request body is malformed.".into(),
                details: details(fields),
            },
            ManageError::Invalid(fields) => ApiError::validation("The endpoint is invalid.", details(fields)),
            ManageError::Conflict(message) => ApiError::new(ErrorCode::Conflict, message),
            ManageError::QuotaReached(quota) => ApiError::quota_reached(quota),
            ManageError::Store(err) => err.into(),
        }
    }
}
