//! The backend's response envelope `{success, data, message, timestamp}` and error envelope
//! `{success: false, error: {code, message, details}, timestamp}`.

use chrono::{SecondsFormat, Utc};
use http::{HeaderValue, StatusCode};
use http_api::{Body, Response, json};
use platform_data::StoreError;
use platform_data::records::WriteError;
use platform_data::validation::{ProblemKind, Problems};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// The machine-readable error codes (the spec's table plus DESIGN.md's additions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    AuthenticationFailed,
    AuthorizationFailed,
    ResourceNotFound,
    ValidationError,
    RateLimitExceeded,
    InternalError,
    BadRequest,
    Conflict,
    MethodNotAllowed,
    PayloadTooLarge,
    ServiceUnavailable,
}

impl ErrorCode {
    /// The HTTP status that goes with the code.
    pub fn status(self) -> StatusCode {
        match self {
            Self::AuthenticationFailed => StatusCode::UNAUTHORIZED,
            Self::AuthorizationFailed => StatusCode::FORBIDDEN,
            Self::ResourceNotFound => StatusCode::NOT_FOUND,
            Self::ValidationError => StatusCode::UNPROCESSABLE_ENTITY,
            Self::RateLimitExceeded => StatusCode::TOO_MANY_REQUESTS,
            Self::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            Self::BadRequest => StatusCode::BAD_REQUEST,
            Self::Conflict => StatusCode::CONFLICT,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::ServiceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// A failed request, rendered as the error envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Map<String, Value>,
}

impl ApiError {
    /// An error without details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), details: Map::new() }
    }

    /// Adds a detail.
    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    /// An internal error: logged here with its cause, returned without it.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(ErrorCode::InternalError, "An internal error occurred.")
    }

    /// A refused body: 400 `BAD_REQUEST` for wrong JSON types, else 422 `VALIDATION_ERROR`;
    /// `details` maps each field to its issue. `what` names the resource ("agent").
    pub fn from_problems(problems: Problems, what: &str) -> Self {
        let (code, message) = match problems.kind {
            ProblemKind::BadRequest => (ErrorCode::BadRequest, "The request body is malformed.".to_owned()),
            ProblemKind::Validation => (ErrorCode::ValidationError, format!("The {what} is invalid.")),
        };
        let details = problems.fields.into_iter().map(|(field, issue)| (field, Value::String(issue))).collect();
        Self { code, message, details }
    }

    /// A refused write of a `what` record: 409 for a taken name, a record changed since it was
    /// read or the account's quota of such records reached, 404 for a vanished record, 422 naming the field of a record too large to store.
    pub fn from_write(err: WriteError, what: &str) -> Self {
        match err {
            WriteError::NameTaken(name) => {
                Self::new(ErrorCode::Conflict, format!("A {what} named {name:?} already exists."))
                    .with_detail("name", "already exists in this account")
            }
            WriteError::NotFound => Self::not_found(what),
            WriteError::Conflict => Self::new(
                ErrorCode::Conflict,
                format!("The {what} was changed by another request; read it again and retry."),
            ),
            WriteError::TooLarge { field } => {
                Self::new(ErrorCode::ValidationError, format!("The {what} is too large to store."))
                    .with_detail(&field, "too large: the stored record would exceed 400 KB")
            }
            WriteError::QuotaReached(quota) => Self::quota_reached(quota),
            WriteError::Store(err) => err.into(),
        }
    }

    /// 422 with a message and details by field.
    pub fn validation(message: &str, details: Map<String, Value>) -> Self {
        Self { code: ErrorCode::ValidationError, message: message.to_owned(), details }
    }

    /// 404 for a `what` that does not exist (or belongs to another account).
    pub fn not_found(what: &str) -> Self {
        let mut message = format!("{what} not found.");
        if let Some(first) = message.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        Self::new(ErrorCode::ResourceNotFound, message)
    }

    /// 405 for a method the path does not serve; `allow` lists the ones it does ("GET, POST"),
    /// returned in `details.allow` and in the `Allow` header (RFC 9110 §15.5.6).
    pub fn method_not_allowed(method: &http::Method, allow: &'static str) -> Self {
        Self::new(ErrorCode::MethodNotAllowed, format!("Method {method} not allowed.")).with_detail("allow", allow)
    }

    /// 422 for a path id that is not a UUID; `field` names it (`agent_id`).
    pub fn invalid_id(field: &str) -> Self {
        Self::new(ErrorCode::ValidationError, format!("The {field} must be a UUID."))
            .with_detail(field, "must be a UUID")
    }

    /// The 429 of a concurrency quota the account has reached: `details.quota` names it,
    /// `Retry-After` says when a place may be free.
    pub fn quota_full(full: storage::quota::QuotaFull) -> Self {
        let quota = full.quota;
        telemetry::metrics::emit([telemetry::metrics::quota_refusal(quota.name)]);
        Self::new(
            ErrorCode::RateLimitExceeded,
            format!("This account already has {} {} at once.", quota.limit, quota_noun(quota.name)),
        )
        .with_detail("quota", quota.name)
        .with_detail("limit", quota.limit)
        .with_detail("retry_after_seconds", full.retry_after_seconds)
    }

    /// The 429 of an account whose monthly budget is spent, until the month ends.
    pub fn budget_spent(reached: agent_runtime::usage::BudgetReached) -> Self {
        telemetry::metrics::emit([telemetry::metrics::quota_refusal("monthly_budget")]);
        Self::new(
            ErrorCode::RateLimitExceeded,
            format!(
                "This account's monthly budget of {} micro-USD is spent ({} used); runs start again next month.",
                reached.limit_micros, reached.used_micros
            ),
        )
        .with_detail("quota", "monthly_budget")
        .with_detail("limit", reached.limit_micros)
        .with_detail("used", reached.used_micros)
        .with_detail("retry_after_seconds", reached.retry_after_seconds)
    }

    /// The 409 of a count quota the account has reached: `details.quota` names it.
    pub fn quota_reached(quota: storage::quota::Quota) -> Self {
        telemetry::metrics::emit([telemetry::metrics::quota_refusal(quota.name)]);
        Self::new(ErrorCode::Conflict, format!("This account already has {} {}.", quota.limit, quota_noun(quota.name)))
            .with_detail("quota", quota.name)
            .with_detail("limit", quota.limit)
    }

    /// The error envelope; a 405 carries `Allow`, a 429 `Retry-After`.
    pub fn into_response(self) -> Response<Body> {
        let header = match (self.code, self.details.get("allow"), self.details.get("retry_after_seconds")) {
            (ErrorCode::MethodNotAllowed, Some(Value::String(allow)), _) => {
                HeaderValue::from_str(allow).ok().map(|value| (http::header::ALLOW, value))
            }
            (ErrorCode::RateLimitExceeded, _, Some(Value::Number(seconds))) => {
                HeaderValue::from_str(&seconds.to_string()).ok().map(|value| (http::header::RETRY_AFTER, value))
            }
            _ => None,
        };
        let body = json!({
            "success": false,
            "error": { "code": self.code, "message": self.message, "details": self.details },
            "timestamp": timestamp(),
        });
        let mut response = json(self.code.status(), &body);
        if let Some((name, value)) = header {
            response.headers_mut().insert(name, value);
        }
        response
    }
}

/// What a quota counts, for its refusal's message.
fn quota_noun(quota: &str) -> String {
    match quota {
        "concurrent_runs" => "runs executing".to_owned(),
        "queued_runs" => "queued runs in flight".to_owned(),
        "stream_followers" => "run streams followed".to_owned(),
        other => other.replace('_', " "),
    }
}

/// A failed storage call is an internal error: `?` carries it to the handler's 500, logged once
/// (by [`ApiError::internal`]).
impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        Self::internal(&err)
    }
}

/// A run or a stream refused by a quota is its 429; a storage failure a 500.
impl From<agent_runtime::lifecycle::StartError> for ApiError {
    fn from(err: agent_runtime::lifecycle::StartError) -> Self {
        match err {
            agent_runtime::lifecycle::StartError::Quota(full) => Self::quota_full(full),
            agent_runtime::lifecycle::StartError::Budget(reached) => Self::budget_spent(reached),
            agent_runtime::lifecycle::StartError::Store(err) => Self::from(err),
        }
    }
}

/// A success envelope.
pub fn success(status: StatusCode, data: impl Serialize, message: &str) -> Response<Body> {
    json(status, &json!({ "success": true, "data": data, "message": message, "timestamp": timestamp() }))
}

/// Default and largest `limit` of backend lists.
pub const DEFAULT_LIMIT: usize = 20;
pub const MAX_LIMIT: usize = 100;

/// A list request's `page` (1-based, default 1) and `limit` (default 20, at most 100).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub page: usize,
    pub limit: usize,
}

impl PageRequest {
    /// Reads `page` and `limit`; out-of-range or non-integer values are recorded in `problems`.
    pub fn from_params(params: &http_api::Params, problems: &mut Map<String, Value>) -> Self {
        let mut number = |name: &str, default: usize, max: usize| match params
            .non_empty(name)
            .map(|raw| raw.trim().parse::<usize>())
        {
            None => default,
            Some(Ok(value)) if (1..=max).contains(&value) => value,
            Some(_) => {
                problems.insert(name.to_owned(), json!(format!("must be an integer from 1 to {max}")));
                default
            }
        };
        Self { page: number("page", 1, usize::MAX), limit: number("limit", DEFAULT_LIMIT, MAX_LIMIT) }
    }

    /// The list envelope over `items` (all matches, in order): this page's items and
    /// `pagination: {page, limit, total, pages}`. A page past the end is empty.
    pub fn respond<T: Serialize>(
        &self,
        items: impl IntoIterator<Item = T>,
        total: usize,
        message: &str,
    ) -> Response<Body> {
        let data: Vec<T> = items.into_iter().skip(self.offset()).take(self.limit).collect();
        self.respond_page(data, total, message)
    }

    /// How many items come before this page.
    pub fn offset(&self) -> usize {
        (self.page - 1).saturating_mul(self.limit)
    }

    /// The items of this page among `items`.
    pub fn page_of<'a, T>(&self, items: &'a [T]) -> &'a [T] {
        let start = self.offset().min(items.len());
        let end = start.saturating_add(self.limit).min(items.len());
        &items[start..end]
    }

    /// The list envelope over one page's items, already cut (`page_of`).
    pub fn respond_page<T: Serialize>(&self, data: Vec<T>, total: usize, message: &str) -> Response<Body> {
        let body = json!({
            "success": true,
            "data": data,
            "message": message,
            "timestamp": timestamp(),
            "pagination": { "page": self.page, "limit": self.limit, "total": total, "pages": total.div_ceil(self.limit) },
        });
        json(StatusCode::OK, &body)
    }
}

/// Now, as envelopes write it: RFC 3339 UTC with milliseconds.
pub fn timestamp() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A path id: 422 naming `field` when it is not a UUID.
pub fn path_id<Id: std::str::FromStr>(raw: &str, field: &str) -> Result<Id, ApiError> {
    raw.parse().map_err(|_| ApiError::invalid_id(field))
}

/// An optional UUID query parameter; a value that is not one is recorded in `problems`.
pub fn uuid_param<Id: std::str::FromStr>(
    params: &http_api::Params,
    name: &str,
    problems: &mut Map<String, Value>,
) -> Option<Id> {
    let raw = params.non_empty(name)?;
    match raw.parse() {
        Ok(id) => Some(id),
        Err(_) => {
            problems.insert(name.to_owned(), json!("must be a UUID"));
            None
        }
    }
}
