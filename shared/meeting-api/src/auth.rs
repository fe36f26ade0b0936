//! `POST /api/auth/token/` and `POST /api/auth/revoke-token/`: the OAuth 2.0 client credentials
//! grant (RFC 6749 §4.4) and token revocation (RFC 7009).
//!
//! - Clients authenticate with form fields `client_id` + `client_secret` or with HTTP Basic
//!   (RFC 6749 §2.3.1), never both.
//! - Errors are RFC 6749 §5.2 bodies `{"error", "error_description"}`: 400 `invalid_request`,
//!   `unsupported_grant_type`, `invalid_scope`; 401 `invalid_client` with `WWW-Authenticate`.
//! - `scope` (RFC 6749 §3.3) asks for scopes among those the application has been granted
//!   (`meeting_data::access::SCOPES`); without it the token gets `meetings:read`. A scope that
//!   does not exist is refused before the client is authenticated, one it was not granted after.
//!   A `client_id` longer than `credentials::MAX_PRESENTED_ID_BYTES` is `invalid_client` before
//!   anything is read (DynamoDB would refuse it as a key).
//! - Revocation answers 200 with an empty body for a revoked, unknown, expired or foreign token,
//!   and deletes the token only when it belongs to the authenticated client.
//!
//! Both endpoints count against the client's rate limit (`client_limit`) once its credentials
//! are valid; refused credentials do not, so no one can use up an integrator's allowance by
//! naming its `client_id` (guessing a 256-bit secret is hopeless anyway).
//!
//! DynamoDB calls: token = GetItem (application) + UpdateItem (the client's bucket) + PutItem
//! (token); revoke = GetItem + UpdateItem + DeleteItem (conditional on the owner); a client this
//! container knows to be over its limit: the GetItem only. During a pepper rotation, a client secret that
//! verifies only with the previous pepper adds one conditional UpdateItem, once per
//! application, that moves its hash to the current pepper (the application is read by
//! `client_id`, so the previous pepper costs no second read). The pepper secret is read from
//! Secrets Manager on first use and again every `credentials::REFRESH_INTERVAL`.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use credentials::{CredentialsError, MAX_PRESENTED_ID_BYTES, PepperSource, Verification, token_digest};
use http::header::{CACHE_CONTROL, CONTENT_TYPE, PRAGMA, WWW_AUTHENTICATE};
use http::{HeaderName, Method, StatusCode};
use http_api::params::unquote_plus;
use http_api::routing::{authorization, method_not_allowed, not_found, without_trailing_slash};
use http_api::{Body, HttpFunction, Params, Request, Response, ResponseFuture, json_with_headers};
use meeting_data::access::{ExternalApp, SCOPE, issue_token, parse_scopes};
use meeting_data::clock::{Clock, system_clock};
use meeting_data::settings::{self, Lookup, SettingError};
use meeting_data::store::{AppStore, StoreError};
use serde::Serialize;
use std::collections::HashSet;
use storage::rate_limit::RateLimiter;

/// Default access token lifetime (3 hours), as the spec states.
pub const DEFAULT_TOKEN_LIFETIME_SECONDS: i64 = 10800;

const TOKEN_PATH: &str = "/api/auth/token";
const REVOKE_PATH: &str = "/api/auth/revoke-token";
const FORM_CONTENT_TYPE: &str = "application/x-www-form-urlencoded";
const NO_STORE: [(HeaderName, &str); 2] = [(CACHE_CONTROL, "no-store"), (PRAGMA, "no-cache")];

/// The auth function.
pub struct AuthService {
    apps: AppStore,
    pepper: PepperSource,
    token_lifetime_seconds: i64,
    limiter: RateLimiter,
    clock: Clock,
}

/// The token response of RFC 6749 §5.1.
#[derive(Debug, Serialize)]
struct TokenResponse<'a> {
    access_token: &'a str,
    token_type: &'static str,
    expires_in: i64,
    scope: &'a str,
}

/// An RFC 6749 §5.2 error.
struct OAuthError {
    status: StatusCode,
    code: &'static str,
    description: String,
}

impl OAuthError {
    fn invalid_request(description: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, code: "invalid_request", description: description.into() }
    }

    fn invalid_scope(description: String) -> Self {
        Self { status: StatusCode::BAD_REQUEST, code: "invalid_scope", description }
    }

    fn invalid_client() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            code: "invalid_client",
            description: "Client authentication failed: the external application credentials are invalid or inactive."
                .into(),
        }
    }

    fn server_error() -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "server_error",
            description: "The server could not complete the request.".into(),
        }
    }

    fn into_response(self) -> Response<Body> {
        let body = serde_json::json!({ "error": self.code, "error_description": self.description });
        let mut response = json_with_headers(self.status, &body, &NO_STORE);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(WWW_AUTHENTICATE, http::HeaderValue::from_static("Basic realm=\"meetings\""));
        }
        response
    }
}

impl From<StoreError> for OAuthError {
    fn from(err: StoreError) -> Self {
        tracing::error!(error = %err, "auth storage failure");
        Self::server_error()
    }
}

impl From<CredentialsError> for OAuthError {
    fn from(err: CredentialsError) -> Self {
        tracing::error!(error = %err, "pepper unavailable");
        Self::server_error()
    }
}

/// Client credentials presented with a request.
struct ClientCredentials {
    client_id: String,
    client_secret: String,
}

impl AuthService {
    /// A service over explicit dependencies.
    pub fn new(apps: AppStore, pepper: PepperSource, token_lifetime_seconds: i64, limiter: RateLimiter) -> Self {
        Self { apps, pepper, token_lifetime_seconds, limiter, clock: system_clock() }
    }

    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let db = aws.dynamodb();
        let apps = AppStore::new(
            db,
            settings::required(lookup, settings::EXTERNAL_APPS_TABLE)?,
            settings::required(lookup, settings::ACCESS_TOKENS_TABLE)?,
        );
        let pepper = PepperSource::new(aws.secrets(), settings::required(lookup, settings::PEPPER_SECRET_ID)?);
        let lifetime = settings::number_or(lookup, settings::ACCESS_TOKEN_TTL_SECONDS, DEFAULT_TOKEN_LIFETIME_SECONDS)?;
        if lifetime <= 0 {
            return Err(SettingError { name: settings::ACCESS_TOKEN_TTL_SECONDS, problem: "must be positive".into() });
        }
        Ok(Self::new(apps, pepper, lifetime, crate::client_limit::limiter_from_settings(aws, lookup)?))
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    async fn route(&self, request: Request) -> Response<Body> {
        let path = without_trailing_slash(request.uri().path());
        if path != TOKEN_PATH && path != REVOKE_PATH {
            return not_found();
        }
        if request.method() != Method::POST {
            return method_not_allowed(request.method(), "POST");
        }
        let result = if path == TOKEN_PATH { self.token(&request).await } else { self.revoke(&request).await };
        result.unwrap_or_else(OAuthError::into_response)
    }

    async fn token(&self, request: &Request) -> Result<Response<Body>, OAuthError> {
        let form = read_form(request)?;
        match form.last("grant_type") {
            None | Some("") => return Err(OAuthError::invalid_request("The grant_type parameter is required.")),
            Some("client_credentials") => {}
            Some(other) => {
                return Err(OAuthError {
                    status: StatusCode::BAD_REQUEST,
                    code: "unsupported_grant_type",
                    description: format!("Grant type {other:?} is not supported; use \"client_credentials\"."),
                });
            }
        }
        let client = client_credentials(request, &form)?;
        let requested = match parse_scopes(form.non_empty("scope").unwrap_or(SCOPE)) {
            Ok(scopes) if !scopes.is_empty() => scopes,
            Ok(_) => return Err(OAuthError::invalid_scope("The scope parameter names no scope.".into())),
            Err(unknown) => {
                let known = meeting_data::access::SCOPES.join(", ");
                return Err(OAuthError::invalid_scope(format!(
                    "The scope {unknown:?} does not exist; scopes are {known}."
                )));
            }
        };
        let app = self.authenticate(&client).await?;
        http_api::record_on_request("client_id", &app.client_id);
        if let Some(ungranted) = requested.iter().find(|scope| !app.has_scope(scope)) {
            return Err(OAuthError::invalid_scope(format!("The scope {ungranted:?} is not granted to this client.")));
        }
        let scope = requested.join(" ");
        let now: DateTime<Utc> = (self.clock)();
        let issue = async { self.issue(&app.client_id, &scope, now).await.unwrap_or_else(OAuthError::into_response) };
        Ok(crate::client_limit::within_limit(&self.limiter, &app.client_id, now, false, issue).await)
    }

    /// A new token for `client_id`, stored, in the RFC 6749 §5.1 response.
    async fn issue(&self, client_id: &str, scope: &str, now: DateTime<Utc>) -> Result<Response<Body>, OAuthError> {
        let issued = issue_token(client_id, scope, self.token_lifetime_seconds, now);
        self.apps.put_token(&issued.record).await?;
        tracing::info!(client_id, scope, "access token issued");
        let body = TokenResponse {
            access_token: &issued.access_token,
            token_type: "Bearer",
            expires_in: self.token_lifetime_seconds,
            scope,
        };
        Ok(json_with_headers(StatusCode::OK, &body, &NO_STORE))
    }

    async fn revoke(&self, request: &Request) -> Result<Response<Body>, OAuthError> {
        let form = read_form(request)?;
        let client = client_credentials(request, &form)?;
        let token =
            form.non_empty("token").ok_or_else(|| OAuthError::invalid_request("The token parameter is required."))?;
        let app = self.authenticate(&client).await?;
        let revoke = async {
            match self.apps.delete_token(&token_digest(token), &app.client_id).await {
                Ok(revoked) => {
                    tracing::info!(client_id = %app.client_id, revoked, "token revocation");
                    let mut response = Response::new(Body::Empty);
                    for (name, value) in NO_STORE {
                        response.headers_mut().insert(name, http::HeaderValue::from_static(value));
                    }
                    response
                }
                Err(err) => OAuthError::from(err).into_response(),
            }
        };
        Ok(crate::client_limit::within_limit(&self.limiter, &app.client_id, (self.clock)(), false, revoke).await)
    }

    /// The active application these credentials belong to. A secret still hashed with the
    /// previous pepper is re-hashed with the current one (a failure to store it is logged; the
    /// request goes on, and the next one tries again).
    async fn authenticate(&self, client: &ClientCredentials) -> Result<ExternalApp, OAuthError> {
        let peppers = self.pepper.get().await?;
        let refused = || {
            tracing::info!(client_id = %client.client_id, "client authentication failed");
            OAuthError::invalid_client()
        };
        let Some(app) = self.apps.find(&client.client_id, &self.limiter).await?.filter(|app| app.active) else {
            return Err(refused());
        };
        match app.verify_secret(peppers, &client.client_secret) {
            Verification::Mismatch => Err(refused()),
            Verification::Match => Ok(app),
            Verification::MatchUnderPrevious { upgrade } => {
                match self.apps.upgrade_secret_hash(&app.client_id, &app.secret_hash, &upgrade).await {
                    Ok(upgraded) => {
                        tracing::info!(client_id = %app.client_id, upgraded, "client secret re-hashed with the current pepper")
                    }
                    Err(err) => {
                        tracing::warn!(client_id = %app.client_id, error = %err, "re-hashing the client secret with the current pepper failed")
                    }
                }
                Ok(app)
            }
        }
    }
}

impl HttpFunction for AuthService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        Box::pin(self.route(request))
    }
}

/// The form body, refusing another content type and repeated parameters (RFC 6749 §3.2).
fn read_form(request: &Request) -> Result<Params, OAuthError> {
    let media_type = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(|value| value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
    if media_type.as_deref() != Some(FORM_CONTENT_TYPE) {
        return Err(OAuthError::invalid_request(format!("The request body must be {FORM_CONTENT_TYPE}.")));
    }
    let form = Params::from_body(request.body());
    let mut seen = HashSet::new();
    if let Some((repeated, _)) = form.pairs().iter().find(|(key, _)| !seen.insert(key.as_str())) {
        return Err(OAuthError::invalid_request(format!("The {repeated} parameter is repeated.")));
    }
    Ok(form)
}

/// Client credentials from HTTP Basic or from the form, but not both; a `client_id` no
/// application can have is refused here.
fn client_credentials(request: &Request, form: &Params) -> Result<ClientCredentials, OAuthError> {
    let client = presented_credentials(request, form)?;
    if client.client_id.len() > MAX_PRESENTED_ID_BYTES {
        tracing::info!(client_id_bytes = client.client_id.len(), "client authentication failed: client_id too long");
        return Err(OAuthError::invalid_client());
    }
    Ok(client)
}

/// Client credentials as presented: HTTP Basic or the form, but not both.
fn presented_credentials(request: &Request, form: &Params) -> Result<ClientCredentials, OAuthError> {
    if let Some(encoded) = authorization(request, "Basic") {
        if form.last("client_secret").is_some() {
            return Err(OAuthError::invalid_request(
                "Use one client authentication method: HTTP Basic or form fields.",
            ));
        }
        return decode_basic(encoded).ok_or_else(OAuthError::invalid_client);
    }
    let client_id = form
        .non_empty("client_id")
        .ok_or_else(|| OAuthError::invalid_request("The client_id parameter is required."))?;
    let client_secret = form
        .non_empty("client_secret")
        .ok_or_else(|| OAuthError::invalid_request("The client_secret parameter is required."))?;
    Ok(ClientCredentials { client_id: client_id.to_owned(), client_secret: client_secret.to_owned() })
}

/// `base64(urlencode(id) ":" urlencode(secret))`, as RFC 6749 §2.3.1 specifies.
fn decode_basic(encoded: &str) -> Option<ClientCredentials> {
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    let (client_id, client_secret) = (unquote_plus(id), unquote_plus(secret));
    (!client_id.is_empty() && !client_secret.is_empty()).then_some(ClientCredentials { client_id, client_secret })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_form_decoded() {
        let encoded = base64::engine::general_purpose::STANDARD.encode("my%20id:s%3Acret+x");
        let credentials = decode_basic(&encoded).unwrap();
        assert_eq!(credentials.client_id, "my id");
        assert_eq!(credentials.client_secret, "s:cret x");
        assert!(decode_basic("!!!").is_none());
        assert!(decode_basic(&base64::engine::general_purpose::STANDARD.encode("no-colon")).is_none());
    }

    mod properties {
        //! Property tests of what the token endpoints read from a request: any form body,
        //! content type and `Authorization` header gets credentials or an RFC 6749 error
        //! (400 `invalid_request`, 401 `invalid_client`), never a panic.

        use super::super::*;
        use base64::engine::general_purpose::STANDARD;
        use http_api::params::quote_plus;
        use meeting_data::access::token_client_id;
        use proptest::prelude::*;

        fn form_bodies() -> impl Strategy<Value = Vec<u8>> {
            let pair = prop_oneof![
                Just("grant_type=client_credentials".to_owned()),
                Just("client_id=app".to_owned()),
                Just("client_secret=s3cret".to_owned()),
                Just("client_id=".to_owned()),
                Just("token=abc.def".to_owned()),
                "[a-z_%+=]{0,12}",
                any::<String>(),
            ];
            prop_oneof![
                prop::collection::vec(pair, 0..6).prop_map(|pairs| pairs.join("&").into_bytes()),
                any::<Vec<u8>>(),
            ]
        }

        fn content_types() -> impl Strategy<Value = Option<String>> {
            prop::option::of(prop_oneof![
                Just("application/x-www-form-urlencoded".to_owned()),
                Just("Application/X-WWW-Form-Urlencoded; charset=utf-8".to_owned()),
                Just("application/json".to_owned()),
                any::<String>(),
            ])
        }

        fn authorization_headers() -> impl Strategy<Value = Option<Vec<u8>>> {
            prop::option::of(prop_oneof![
                (any::<String>(), any::<String>()).prop_map(|(id, secret)| format!(
                    "Basic {}",
                    STANDARD.encode(format!("{id}:{secret}"))
                )
                .into_bytes()),
                any::<String>().prop_map(|raw| format!("Basic {}", STANDARD.encode(raw)).into_bytes()),
                "(Basic|Bearer|basic) {0,2}[ -~]{0,30}".prop_map(String::into_bytes),
                any::<Vec<u8>>(),
            ])
        }

        fn request(content_type: Option<&str>, authorization: Option<&[u8]>, body: Vec<u8>) -> Request {
            let mut builder = http::Request::builder().method(Method::POST).uri("/api/auth/token/");
            if let Some(value) = content_type.and_then(|value| http::HeaderValue::from_str(value).ok()) {
                builder = builder.header(CONTENT_TYPE, value);
            }
            if let Some(value) = authorization.and_then(|value| http::HeaderValue::from_bytes(value).ok()) {
                builder = builder.header(http::header::AUTHORIZATION, value);
            }
            builder.body(Body::Binary(body)).expect("a request from valid parts")
        }

        fn assert_rfc6749(error: OAuthError) -> Result<(), TestCaseError> {
            let expected = match error.code {
                "invalid_request" => StatusCode::BAD_REQUEST,
                "invalid_client" => StatusCode::UNAUTHORIZED,
                other => return Err(TestCaseError::fail(format!("undocumented error {other}"))),
            };
            prop_assert_eq!(error.status, expected);
            let response = error.into_response();
            let body: serde_json::Value =
                serde_json::from_slice(response.body().as_ref()).map_err(|err| TestCaseError::fail(err.to_string()))?;
            prop_assert!(body["error"].is_string() && body["error_description"].is_string(), "{}", body);
            prop_assert_eq!(body.as_object().map(|fields| fields.len()), Some(2));
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_token_request_gives_credentials_or_an_rfc6749_error(
                content_type in content_types(),
                authorization in authorization_headers(),
                body in form_bodies(),
            ) {
                let request = request(content_type.as_deref(), authorization.as_deref(), body);
                match read_form(&request) {
                    Err(error) => assert_rfc6749(error)?,
                    Ok(form) => {
                        let mut keys: Vec<&str> = form.pairs().iter().map(|(key, _)| key.as_str()).collect();
                        let count = keys.len();
                        keys.sort_unstable();
                        keys.dedup();
                        prop_assert_eq!(keys.len(), count, "a repeated parameter was accepted");
                        match client_credentials(&request, &form) {
                            Ok(client) => {
                                prop_assert!(!client.client_id.is_empty() && !client.client_secret.is_empty());
                            }
                            Err(error) => assert_rfc6749(error)?,
                        }
                    }
                }
            }

            #[test]
            fn basic_credentials_round_trip(id in "[!-~]{1,20}", secret in "[ -~]{1,40}") {
                // Form-encoded first, as RFC 6749 §2.3.1 asks.
                let encoded = STANDARD.encode(format!("{}:{}", quote_plus(&id), quote_plus(&secret)));
                let client = decode_basic(&encoded);
                prop_assert!(client.is_some());
                if let Some(client) = client {
                    prop_assert_eq!(client.client_id, id);
                    prop_assert_eq!(client.client_secret, secret);
                }
            }

            #[test]
            fn any_bearer_token_names_a_client_or_none(token in any::<String>()) {
                if let Some(client_id) = token_client_id(&token) {
                    prop_assert!(!client_id.is_empty() && !client_id.contains('.'));
                    prop_assert!(token.len() > client_id.len() + 1);
                }
            }
        }
    }
}
