//! What a function sees of API Gateway's REST API, in one place: the resource path (the URL's
//! path without the stage), the base path the client's URL had (for the links the API writes)
//! and CORS. Lambda (`run_on_lambda`), the dev server and Lambda mode all serve a function
//! through [`AtGateway`], so the functions themselves only ever see resource paths.

use crate::function::{HttpFunction, ResponseFuture};
use crate::streaming::{StreamingFunction, StreamingFuture};
use http::{HeaderValue, Method, StatusCode, header};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};

/// The setting naming the origins browsers may call the API from: a comma-separated list of
/// `scheme://host[:port]` origins (the `CorsAllowedOrigins` template parameter). Empty: no CORS.
pub const CORS_ALLOWED_ORIGINS: &str = "CORS_ALLOWED_ORIGINS";

/// The request headers a browser may send (`Access-Control-Allow-Headers`).
pub const CORS_ALLOWED_HEADERS: &str = "X-API-Key, Authorization, Content-Type, Last-Event-ID";

/// The response headers a browser's script may read (`Access-Control-Expose-Headers`).
pub const CORS_EXPOSED_HEADERS: &str =
    "X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Retry-After, X-Run-Id, WWW-Authenticate";

const CORS_ALLOWED_METHODS: &str = "GET, POST, PUT, PATCH, DELETE, OPTIONS";

/// How long a browser may cache a preflight's answer, in seconds.
const CORS_MAX_AGE_SECONDS: &str = "600";

/// The part of the client's URL path before the resource path: `/Prod` on the stage's
/// `execute-api` URL, empty on a custom domain mapped at its root. Links the API writes start
/// with it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BasePath(pub String);

impl BasePath {
    /// The base path of `request` (empty when it did not come through API Gateway).
    pub fn of<B>(request: &http::Request<B>) -> &str {
        request.extensions().get::<BasePath>().map(|base| base.0.as_str()).unwrap_or("")
    }
}

/// The base URL the client used: scheme, host and [`BasePath`] (`https://h/Prod`). Under API
/// Gateway the URI is already absolute (scheme from `X-Forwarded-Proto`); otherwise the `Host`
/// header and `X-Forwarded-Proto` complete it.
pub fn client_base_url<B>(request: &http::Request<B>) -> String {
    let uri = request.uri();
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    let scheme = uri.scheme_str().or_else(|| header("x-forwarded-proto")).unwrap_or("http");
    let host = uri.authority().map(|a| a.as_str()).or_else(|| header("host")).unwrap_or("localhost");
    format!("{scheme}://{host}{}", BasePath::of(request))
}

/// `request` as the function's routes read it: its URI's path is the resource path API Gateway
/// matched (the event's `path`), without the stage `lambda_http` puts in front of it, and its
/// [`BasePath`] is what the client's URL had before that path (`requestContext.path` minus
/// `path`). A request that did not come from a REST API event is returned as it is.
///
/// On a custom domain the base path mapping must be the domain's root (the template maps it
/// so): under a named base path API Gateway puts that name in `path` too.
pub fn resource_request(mut request: Request) -> Request {
    let Some(RequestContext::ApiGatewayV1(context)) = request.request_context_ref() else { return request };
    let resource_path = request.raw_http_path().to_owned();
    let client_path = context.path.clone().unwrap_or_default();
    let stage = context.stage.clone().unwrap_or_default();
    let base = client_path.strip_suffix(resource_path.as_str()).unwrap_or("").to_owned();
    // lambda_http puts `/{stage}` before the path unless the path already starts with it.
    let stage_prefix = format!("/{stage}");
    let uri = request.uri();
    let added_stage = !stage.is_empty()
        && stage != "$default"
        && uri.path().starts_with(&format!("{stage_prefix}/"))
        && !resource_path.starts_with(&format!("{stage_prefix}/"));
    if added_stage {
        let path_and_query = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let without_stage = &path_and_query[stage_prefix.len()..];
        let mut parts = uri.clone().into_parts();
        if let Ok(stripped) = without_stage.parse() {
            parts.path_and_query = Some(stripped);
            if let Ok(stripped) = http::Uri::from_parts(parts) {
                *request.uri_mut() = stripped;
            }
        }
    }
    request.extensions_mut().insert(BasePath(base));
    request
}

/// The CORS policy: which origins may read the API's answers from a browser.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cors {
    origins: Vec<String>,
}

/// A `CorsAllowedOrigins` entry that is not an origin.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{CORS_ALLOWED_ORIGINS}: {0:?} is not an origin (scheme://host[:port], no path)")]
pub struct CorsError(String);

impl Cors {
    /// The policy of a `CORS_ALLOWED_ORIGINS` value; empty (or unset) allows no origin.
    pub fn parse(list: &str) -> Result<Self, CorsError> {
        let mut origins = Vec::new();
        for origin in list.split(',').map(str::trim).filter(|origin| !origin.is_empty()) {
            let rest = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"))
                .ok_or_else(|| CorsError(origin.to_owned()))?;
            let valid = !rest.is_empty()
                && rest.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
            if !valid {
                return Err(CorsError(origin.to_owned()));
            }
            // Browsers send origins in lower case.
            origins.push(origin.to_ascii_lowercase());
        }
        Ok(Self { origins })
    }

    /// The policy the process environment sets (the function's template environment).
    pub fn from_env() -> Result<Self, CorsError> {
        Self::parse(&std::env::var(CORS_ALLOWED_ORIGINS).unwrap_or_default())
    }

    /// The request's `Origin`, when the policy allows it.
    fn allowed_origin<B>(&self, request: &http::Request<B>) -> Option<HeaderValue> {
        let origin = request.headers().get(header::ORIGIN)?;
        let text = origin.to_str().ok()?;
        self.origins.iter().any(|allowed| allowed == text).then(|| origin.clone())
    }

    /// The answer to a preflight (`OPTIONS` with `Access-Control-Request-Method`) from an
    /// allowed origin: 204 with what it may send. Other requests, and preflights from other
    /// origins, go to the function (which answers them as any request: a 405 for `OPTIONS`).
    pub fn preflight<B>(&self, request: &http::Request<B>) -> Option<Response<Body>> {
        let is_preflight = request.method() == Method::OPTIONS
            && request.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        if !is_preflight {
            return None;
        }
        let origin = self.allowed_origin(request)?;
        let mut response = Response::new(Body::Empty);
        *response.status_mut() = StatusCode::NO_CONTENT;
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static(CORS_ALLOWED_METHODS));
        headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static(CORS_ALLOWED_HEADERS));
        headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(CORS_MAX_AGE_SECONDS));
        headers.insert(header::VARY, HeaderValue::from_static("Origin"));
        Some(response)
    }

    /// Marks `response` readable by `origin` (the request's allowed origin, if any). Every
    /// answer varies by `Origin` when CORS is on, so caches keep them apart.
    fn decorate<B>(&self, origin: Option<HeaderValue>, response: &mut Response<B>) {
        if self.origins.is_empty() {
            return;
        }
        let headers = response.headers_mut();
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
        if let Some(origin) = origin {
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(CORS_EXPOSED_HEADERS));
        }
    }
}

/// A function served behind API Gateway: requests reach it as [`resource_request`]s, CORS
/// preflights are answered before it (they carry no credentials), and its answers carry the
/// CORS headers of the request's origin.
pub struct AtGateway<F> {
    function: F,
    cors: Cors,
}

impl<F> AtGateway<F> {
    pub fn new(function: F, cors: Cors) -> Self {
        Self { function, cors }
    }
}

impl<F: HttpFunction> HttpFunction for AtGateway<F> {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        Box::pin(async move {
            let request = resource_request(request);
            if let Some(answer) = self.cors.preflight(&request) {
                return answer;
            }
            let origin = self.cors.allowed_origin(&request);
            let mut response = self.function.handle(request).await;
            self.cors.decorate(origin, &mut response);
            response
        })
    }
}

impl<F: StreamingFunction> StreamingFunction for AtGateway<F> {
    fn handle(&self, request: Request) -> StreamingFuture<'_> {
        Box::pin(async move {
            let request = resource_request(request);
            if let Some(answer) = self.cors.preflight(&request) {
                return crate::streaming::whole(answer);
            }
            let origin = self.cors.allowed_origin(&request);
            let mut response = self.function.handle(request).await;
            self.cors.decorate(origin, &mut response);
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A REST API proxy event (payload 1.0) as API Gateway sends it for `client_path`, whose
    /// resource path is `path`.
    fn rest_event(path: &str, client_path: &str, host: &str) -> String {
        json!({
            "resource": "/agents/{agent_id}/runs",
            "path": path,
            "httpMethod": "GET",
            "headers": {"Host": host, "X-Forwarded-Proto": "https", "Origin": "https://app.example.com"},
            "multiValueHeaders": {"Host": [host], "X-Forwarded-Proto": ["https"], "Origin": ["https://app.example.com"]},
            "queryStringParameters": {"page": "2"},
            "multiValueQueryStringParameters": {"page": ["2"]},
            "pathParameters": {"agent_id": "a1"},
            "stageVariables": null,
            "requestContext": {
                "accountId": "123456789012",
                "resourceId": "abc123",
                "stage": "Prod",
                "requestId": "c6af9ac6-7b61-11e6-9a41-93e8deadbeef",
                "identity": {"sourceIp": "203.0.113.7", "userAgent": "curl/8"},
                "resourcePath": "/agents/{agent_id}/runs",
                "httpMethod": "GET",
                "apiId": "1234567890",
                "path": client_path,
                "protocol": "HTTP/1.1",
                "domainName": host,
                "requestTimeEpoch": 1_700_000_000_000_i64,
            },
            "body": null,
            "isBase64Encoded": false,
        })
        .to_string()
    }

    fn read(event: &str) -> Request {
        resource_request(lambda_http::request::from_str(event).unwrap())
    }

    #[test]
    fn on_the_stage_url_the_path_is_the_resource_path_and_the_base_is_the_stage() {
        let host = "1234567890.execute-api.us-east-1.amazonaws.com";
        let request = read(&rest_event("/agents/a1/runs", "/Prod/agents/a1/runs", host));
        assert_eq!(request.uri().to_string(), format!("https://{host}/agents/a1/runs?page=2"));
        assert_eq!(BasePath::of(&request), "/Prod");
        let trailing = read(&rest_event("/agents/a1/runs/", "/Prod/agents/a1/runs/", host));
        assert_eq!(trailing.uri().path(), "/agents/a1/runs/");
    }

    #[test]
    fn on_a_custom_domain_mapped_at_its_root_there_is_no_base() {
        let request = read(&rest_event("/agents/a1/runs", "/agents/a1/runs", "api.example.com"));
        assert_eq!(request.uri().to_string(), "https://api.example.com/agents/a1/runs?page=2");
        assert_eq!(BasePath::of(&request), "");
    }

    #[test]
    fn a_request_that_is_not_a_rest_event_is_left_alone() {
        let request = http::Request::builder().uri("http://h/Prod/x").body(Body::Empty).unwrap();
        let request = resource_request(request);
        assert_eq!((request.uri().path(), BasePath::of(&request)), ("/Prod/x", ""));
    }

    #[test]
    fn cors_origins_are_parsed_strictly() {
        assert_eq!(Cors::parse("").unwrap(), Cors::default());
        let cors = Cors::parse(" https://App.example.com, http://localhost:5173 ").unwrap();
        assert_eq!(cors.origins, ["https://app.example.com", "http://localhost:5173"]);
        for bad in ["*", "app.example.com", "https://app.example.com/path", "ftp://x", "https://"] {
            assert!(Cors::parse(bad).is_err(), "{bad}");
        }
    }

    fn request(method: Method, headers: &[(&str, &str)]) -> Request {
        let mut builder = http::Request::builder().method(method).uri("https://api.example.com/agents/");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::Empty).unwrap()
    }

    #[test]
    fn preflights_from_allowed_origins_are_answered_and_others_pass_through() {
        let cors = Cors::parse("https://app.example.com").unwrap();
        let preflight =
            |origin: &str| request(Method::OPTIONS, &[("origin", origin), ("access-control-request-method", "POST")]);
        let answer = cors.preflight(&preflight("https://app.example.com")).unwrap();
        assert_eq!(answer.status(), 204);
        assert_eq!(answer.headers()["access-control-allow-origin"], "https://app.example.com");
        assert_eq!(answer.headers()["access-control-allow-headers"], CORS_ALLOWED_HEADERS);
        assert!(answer.headers()["access-control-allow-methods"].to_str().unwrap().contains("POST"));
        assert!(cors.preflight(&preflight("https://evil.example.com")).is_none());
        assert!(Cors::default().preflight(&preflight("https://app.example.com")).is_none());
        let plain_options = request(Method::OPTIONS, &[("origin", "https://app.example.com")]);
        assert!(cors.preflight(&plain_options).is_none());
    }

    struct Answers;
    impl HttpFunction for Answers {
        fn handle(&self, request: Request) -> ResponseFuture<'_> {
            let path = request.uri().path().to_owned();
            Box::pin(async move { Response::new(Body::Text(path)) })
        }
    }

    #[tokio::test]
    async fn answers_carry_the_allowed_origin_and_the_exposed_headers() {
        let served = AtGateway::new(Answers, Cors::parse("https://app.example.com").unwrap());
        let allowed =
            HttpFunction::handle(&served, request(Method::GET, &[("origin", "https://app.example.com")])).await;
        assert_eq!(allowed.headers()["access-control-allow-origin"], "https://app.example.com");
        assert!(allowed.headers()["access-control-expose-headers"].to_str().unwrap().contains("X-Run-Id"));
        assert_eq!(allowed.headers()["vary"], "Origin");
        let other =
            HttpFunction::handle(&served, request(Method::GET, &[("origin", "https://evil.example.com")])).await;
        assert!(other.headers().get("access-control-allow-origin").is_none());
        assert_eq!(other.headers()["vary"], "Origin");
        let off = AtGateway::new(Answers, Cors::default());
        let answer = HttpFunction::handle(&off, request(Method::GET, &[("origin", "https://app.example.com")])).await;
        assert!(
            answer.headers().get("access-control-allow-origin").is_none() && answer.headers().get("vary").is_none()
        );
    }

    #[tokio::test]
    async fn the_function_sees_the_resource_path() {
        let served = AtGateway::new(Answers, Cors::default());
        let event = rest_event("/agents/a1/runs", "/Prod/agents/a1/runs", "h.example.com");
        let answer = HttpFunction::handle(&served, lambda_http::request::from_str(&event).unwrap()).await;
        assert_eq!(crate::body_text(answer.body()), "/agents/a1/runs");
    }
}
