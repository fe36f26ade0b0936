//! Every backend request passes the gate: `X-API-Key` authentication, then the key's rate limit,
//! then the body's size and JSON nesting (checked before any parsing). Every response to an
//! authenticated request carries `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
//! `X-RateLimit-Reset`; a refused one is 429 with `Retry-After`. A body over the function's limit
//! is 413 `PAYLOAD_TOO_LARGE`; a JSON body nesting deeper than `MAX_JSON_DEPTH` is 422 naming
//! the field.
//!
//! DynamoDB calls: GetItem (the key, consistent) + UpdateItem (the bucket; see `rate_limit`). A
//! container's first request of a key reads the key and its bucket in one BatchGetItem instead
//! of the GetItem (`ApiKeyStore::find`). A request that only reads ([`Access::ReadsOnly`]) is
//! answered while its UpdateItem is under way, when this container believes the bucket has
//! room: one round trip fewer. Should the bucket turn out empty (other containers used it
//! since), the answer is dropped and the request refused as any other.
//! During a pepper rotation, a key that verifies only with the previous pepper adds one
//! conditional UpdateItem, once per key (`ApiKeyStore::verify`).

use crate::envelope::{ApiError, ErrorCode};
use crate::settings;
use aws_env::clock::{Clock, system_clock};
use aws_env::settings::{Lookup, SettingError, positive_or, required};
use credentials::PepperSource;
use http::HeaderValue;
use http_api::limits::{MAX_JSON_DEPTH, json_nesting};
use http_api::{Body, Request, Response, StreamBody};
use platform_data::api_keys::{ApiKeyStore, Caller, key_id_of};
use serde_json::{Map, json};
use std::future::Future;
use storage::rate_limit::{RateLimit, RateLimiter};

/// The header carrying the API key.
pub const API_KEY_HEADER: &str = "x-api-key";

/// The body limit of a function that does not set its own (`Gate::with_body_limit`): every
/// record it stores stays well under DynamoDB's 400 KB item limit.
pub const DEFAULT_MAX_BODY_BYTES: usize = 256 * 1024;

/// What a request may do before the gate has taken it from its key's allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Nothing a refused request must not do: it reads the account's records (or fills in what
    /// is derived from them, as a runs list's one-time tally). Its handler may run beside the
    /// rate limit's check.
    ReadsOnly,
    /// Writes, or calls out (a tenant's server, a provider): its handler runs once the request
    /// is allowed.
    MayWrite,
}

impl Access {
    /// `ReadsOnly` for GET and HEAD: the rule of a function whose every read route only reads.
    pub fn by_method(request: &Request) -> Access {
        if matches!(*request.method(), http::Method::GET | http::Method::HEAD) {
            Access::ReadsOnly
        } else {
            Access::MayWrite
        }
    }
}

/// Authentication and rate limiting for backend functions.
pub struct Gate {
    keys: ApiKeyStore,
    pepper: PepperSource,
    limiter: RateLimiter,
    clock: Clock,
    max_body_bytes: usize,
}

impl Gate {
    /// A gate over explicit dependencies.
    pub fn new(keys: ApiKeyStore, pepper: PepperSource, limiter: RateLimiter) -> Self {
        Self { keys, pepper, limiter, clock: system_clock(), max_body_bytes: DEFAULT_MAX_BODY_BYTES }
    }

    /// A gate configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let db = aws.dynamodb();
        let limit = RateLimit {
            capacity: positive_or(lookup, settings::RATE_LIMIT_CAPACITY, RateLimit::DEFAULT.capacity)?,
            per_minute: positive_or(lookup, settings::RATE_LIMIT_PER_MINUTE, RateLimit::DEFAULT.per_minute)?,
        };
        Ok(Self::new(
            ApiKeyStore::new(db.clone(), required(lookup, settings::API_KEYS_TABLE)?),
            PepperSource::new(aws.secrets(), required(lookup, settings::PEPPER_SECRET_ID)?),
            RateLimiter::new(db, required(lookup, settings::RATE_LIMITS_TABLE)?, limit),
        ))
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the largest request body the function takes.
    pub fn with_body_limit(mut self, max_body_bytes: usize) -> Self {
        self.max_body_bytes = max_body_bytes;
        self
    }

    /// Now, by the function's clock, at the millisecond precision records store and show.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::SubsecRound::trunc_subsecs((self.clock)(), 3)
    }

    /// Authenticates and rate-limits `request`, then lets `handler` answer it (see [`Access`]).
    pub async fn serve<F, Fut>(&self, request: Request, access: Access, handler: F) -> Response<Body>
    where
        F: FnOnce(Caller, Request) -> Fut,
        Fut: Future<Output = Result<Response<Body>, ApiError>>,
    {
        self.serve_as(request, access, handler, |response| response).await
    }

    /// As `serve`, for a handler whose response streams; the gate's own answers are whole.
    pub async fn serve_streaming<F, Fut>(&self, request: Request, access: Access, handler: F) -> Response<StreamBody>
    where
        F: FnOnce(Caller, Request) -> Fut,
        Fut: Future<Output = Result<Response<StreamBody>, ApiError>>,
    {
        self.serve_as(request, access, handler, http_api::streaming::whole).await
    }

    /// The gate, for responses of body `B`; `whole` turns an error envelope into one.
    async fn serve_as<B, F, Fut>(
        &self,
        request: Request,
        access: Access,
        handler: F,
        whole: fn(Response<Body>) -> Response<B>,
    ) -> Response<B>
    where
        F: FnOnce(Caller, Request) -> Fut,
        Fut: Future<Output = Result<Response<B>, ApiError>>,
    {
        let caller = match self.authenticate(&request).await {
            Ok(caller) => caller,
            Err(error) => return whole(error.into_response()),
        };
        http_api::record_on_request("account_id", caller.account_id);
        let now_ms = (self.clock)().timestamp_millis();
        let key_id = caller.key_id.clone();
        let answer = self.answer(caller, request, handler, whole);
        let (decision, answer) = self.limiter.serve(&key_id, now_ms, access == Access::ReadsOnly, answer).await;
        let mut response = answer.unwrap_or_else(|| whole(refusal(decision.and_then(|decision| decision.retry_after))));
        if let Some(decision) = decision {
            for (name, value) in decision.headers() {
                insert(&mut response, name, value);
            }
        }
        response
    }

    /// The handler's answer, once the body passed its checks: for a read, possibly before the
    /// limiter has decided (its answer is then dropped if the request is refused).
    async fn answer<B, F, Fut>(
        &self,
        caller: Caller,
        request: Request,
        handler: F,
        whole: fn(Response<Body>) -> Response<B>,
    ) -> Response<B>
    where
        F: FnOnce(Caller, Request) -> Fut,
        Fut: Future<Output = Result<Response<B>, ApiError>>,
    {
        match self.check_body(&request) {
            Ok(()) => handler(caller, request).await.unwrap_or_else(|error| whole(error.into_response())),
            Err(error) => whole(error.into_response()),
        }
    }

    /// The body's size, then (for a JSON body) its nesting, before anything parses it.
    fn check_body(&self, request: &Request) -> Result<(), ApiError> {
        let body = request.body().as_ref();
        if body.len() > self.max_body_bytes {
            return Err(ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("The request body is larger than {} bytes.", self.max_body_bytes),
            )
            .with_detail("body", format!("must be at most {} bytes", self.max_body_bytes)));
        }
        if body.iter().find(|byte| !byte.is_ascii_whitespace()).is_some_and(|first| matches!(first, b'{' | b'[')) {
            let nesting = json_nesting(body);
            if nesting.depth > MAX_JSON_DEPTH {
                let field = nesting.field.unwrap_or_else(|| "body".into());
                return Err(ApiError::validation(
                    "The request body nests too deeply.",
                    Map::from_iter([(field, json!(format!("must not nest deeper than {MAX_JSON_DEPTH} levels")))]),
                ));
            }
        }
        Ok(())
    }

    /// The caller of `request`. The key is read beside the pepper (which is read only by a
    /// container's first request and then every few minutes), since its id is in the key itself.
    async fn authenticate(&self, request: &Request) -> Result<Caller, ApiError> {
        let refused = || ApiError::new(ErrorCode::AuthenticationFailed, "The API key is invalid or revoked.");
        let presented = request
            .headers()
            .get(API_KEY_HEADER)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .filter(|value| !value.is_empty())
            .ok_or_else(|| ApiError::new(ErrorCode::AuthenticationFailed, "The X-API-Key header is required."))?;
        let key_id = key_id_of(presented).ok_or_else(refused)?;
        // The key's read first: its request goes out before the pepper's client is built.
        let (key, peppers) = tokio::join!(self.keys.find(key_id, &self.limiter), self.pepper.get());
        let peppers = peppers.map_err(|err| ApiError::internal(&err))?;
        let key = key?;
        self.keys.verify(presented, key, peppers).await?.ok_or_else(refused)
    }
}

/// The 429 for a refused request, with `Retry-After`.
fn refusal(retry_after: Option<i64>) -> Response<Body> {
    telemetry::metrics::emit([telemetry::metrics::quota_refusal("requests_per_key")]);
    ApiError::new(ErrorCode::RateLimitExceeded, "Too many requests for this API key.")
        .with_detail("retry_after_seconds", retry_after.unwrap_or(1))
        .into_response()
}

fn insert<B>(response: &mut Response<B>, name: &'static str, value: impl ToString) {
    if let Ok(value) = HeaderValue::from_str(&value.to_string()) {
        response.headers_mut().insert(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::Access::{MayWrite, ReadsOnly};
    use http_api::{Body, Request};

    fn request(method: &str, uri: &str) -> Request {
        http::Request::builder().method(method).uri(uri).body(Body::Empty).expect("a request")
    }

    #[test]
    fn only_gets_that_act_for_no_one_run_beside_the_limiter() {
        let id = "0b0b0b0b-0000-4000-8000-000000000000";
        let cases = [
            (super::Access::by_method(&request("GET", "/tools")), ReadsOnly),
            (super::Access::by_method(&request("HEAD", "/tools")), ReadsOnly),
            (super::Access::by_method(&request("POST", "/tools")), MayWrite),
            (super::Access::by_method(&request("DELETE", "/tools/x")), MayWrite),
            (crate::agents::access(&request("GET", "/agents/")), ReadsOnly),
            (crate::agents::access(&request("GET", &format!("/agents/{id}/runs"))), ReadsOnly),
            (crate::agents::access(&request("GET", "/agents/?sync_flowtool_agents=true")), MayWrite),
            (crate::agents::access(&request("GET", "/agents/?sync_flowtool_agents=false")), MayWrite),
            (crate::agents::access(&request("PATCH", &format!("/agents/{id}"))), MayWrite),
            (crate::mcps::access(&request("GET", &format!("/mcps/{id}"))), ReadsOnly),
            (crate::mcps::access(&request("GET", "/mcps?include_tools=true")), MayWrite),
            (crate::mcps::access(&request("GET", &format!("/mcps/{id}/tools/"))), MayWrite),
            (crate::mcps::access(&request("POST", "/mcps/connect")), MayWrite),
            (crate::runner::access(&request("GET", "/monitoring/executions/recent")), ReadsOnly),
            (crate::runner::access(&request("GET", "/execute/a2a/agents/health")), MayWrite),
            (crate::runner::access(&request("GET", "/execute/a2a/agents/health/")), MayWrite),
            (crate::runner::access(&request("POST", "/execute/a2a/stream/agent")), MayWrite),
        ];
        for (index, (access, expected)) in cases.into_iter().enumerate() {
            assert_eq!(access, expected, "case {index}");
        }
    }
}
