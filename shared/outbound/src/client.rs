//! The outbound HTTP client: hyper's pooled HTTP/1.1 client over rustls (ring), with the small
//! part of `reqwest`'s interface the platform uses (`get`/`post`/…, headers, a JSON or byte
//! body, a timeout, the response read chunk by chunk).
//!
//! It replaced `reqwest`, whose connection layers, redirect and proxy handling every function
//! that calls out linked for these few calls (`docs/performance.md`, binary size). What it does:
//! - every request has a deadline (the client's timeout, or the request's): sending, waiting for
//!   the answer and reading its body all stop there, as `reqwest`'s timeout did;
//! - a streamed request ([`RequestBuilder::stream_limits`]) has three limits instead: the whole
//!   stream's, the wait for its first byte, and the silence allowed between two chunks (each
//!   chunk restarts that wait), so a stream may last minutes while a silent server is still
//!   dropped soon; the error says which limit passed;
//! - connections (TCP, then TLS for `https`) open within [`CONNECT_TIMEOUT`], to the addresses
//!   the client's [`AddressPolicy`] allows once names are resolved;
//! - redirects are answers like any other (never followed); no proxy is used;
//! - credentials in a URL (`https://user:pass@host/`) become a basic `authorization` header and
//!   never appear in an error.

use crate::guard::AddressPolicy;
use crate::{CONNECT_TIMEOUT, DEFAULT_TIMEOUT, STREAM_FIRST_BYTE_TIMEOUT, STREAM_IDLE_TIMEOUT, USER_AGENT};
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http_body_util::{BodyExt as _, Full};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

pub use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};

type BoxError = Box<dyn StdError + Send + Sync>;

const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");

/// A client with its own connection pool (cheap to clone; clones share the pool).
#[derive(Clone)]
pub struct Client {
    pool: Pool<Connect, Full<Bytes>>,
    timeout: Duration,
    user_agent: HeaderValue,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl Client {
    /// A client whose connections go only to addresses `policy` allows. Building it does no
    /// I/O; TLS is set up at its first HTTPS connection.
    pub fn new(policy: AddressPolicy) -> Self {
        let policy = Arc::new(policy);
        let connector = |refuse_runtime_api| {
            let resolver = Resolver { policy: Arc::clone(&policy), refuse_runtime_api };
            let mut tcp = HttpConnector::new_with_resolver(resolver);
            // HTTPS URIs are passed through to it by `Connect`.
            tcp.enforce_http(false);
            tcp.set_nodelay(true);
            tcp
        };
        let connect = Connect {
            tcp: connector(false),
            tcp_at_runtime_api_port: connector(true),
            runtime_api_port: policy.runtime_api_port(),
            tls: Arc::new(OnceLock::new()),
        };
        let pool = Pool::builder(TokioExecutor::new())
            // Without a timer the pool never expires idle connections.
            .pool_timer(TokioTimer::new())
            .build(connect);
        Self { pool, timeout: DEFAULT_TIMEOUT, user_agent: HeaderValue::from_static(USER_AGENT) }
    }

    /// The deadline of each request, unless the request sets its own.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The `user-agent` of each request, unless the request sets its own.
    pub fn with_user_agent(mut self, user_agent: &'static str) -> Self {
        self.user_agent = HeaderValue::from_static(user_agent);
        self
    }

    pub fn get(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::GET, url)
    }

    pub fn post(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::POST, url)
    }

    pub fn put(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::PUT, url)
    }

    pub fn delete(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::DELETE, url)
    }

    pub fn request(&self, method: Method, url: impl AsRef<str>) -> RequestBuilder {
        let mut headers = HeaderMap::new();
        let uri = target(url.as_ref(), &mut headers);
        RequestBuilder {
            client: self.clone(),
            method,
            uri,
            headers,
            body: Bytes::new(),
            timeout: self.timeout,
            stream: None,
        }
    }
}

/// The URI to send to, from a URL as `url` normalises it (an internationalised host in
/// punycode, spaces percent-encoded); its credentials, if any, go to `headers`.
fn target(url: &str, headers: &mut HeaderMap) -> Result<http::Uri, Error> {
    let mut url = url::Url::parse(url).map_err(|err| Error::new(Kind::Builder, err))?;
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return Err(Error::new(Kind::Builder, "the URL is not an http(s) URL with a host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        let user = percent_decoded(url.username());
        let password = url.password().map(percent_decoded);
        headers.insert(AUTHORIZATION, basic_authorization(&user, password.as_deref()));
        // Both setters only fail on URLs without a host, which `url` is not.
        let _ = url.set_username("");
        let _ = url.set_password(None);
    }
    url.as_str().parse().map_err(|err| Error::new(Kind::Builder, err))
}

fn percent_decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned()
}

fn basic_authorization(user: &str, password: Option<&str>) -> HeaderValue {
    use base64::Engine as _;
    let credentials = format!("{user}:{}", password.unwrap_or_default());
    let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
    let mut value = HeaderValue::try_from(format!("Basic {encoded}")).unwrap_or(HeaderValue::from_static("Basic"));
    value.set_sensitive(true);
    value
}

/// A request being built; the first invalid part (URL, header) is the error `send` returns.
#[must_use = "a request does nothing until it is sent"]
pub struct RequestBuilder {
    client: Client,
    method: Method,
    uri: Result<http::Uri, Error>,
    headers: HeaderMap,
    body: Bytes,
    timeout: Duration,
    /// Set for a streamed request: replaces `timeout`.
    stream: Option<StreamLimits>,
}

/// The limits of a streamed request, which may last far longer than an ordinary one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// The whole exchange, counted from `send`: the answer and its whole body.
    pub total: Duration,
    /// From `send` to the answer's head and the first chunk of its body.
    pub first_byte: Duration,
    /// The longest silence between two chunks of the body.
    pub idle: Duration,
}

impl StreamLimits {
    /// A stream that may last `total`, with the default first-byte and idle limits.
    pub fn new(total: Duration) -> Self {
        Self { total, first_byte: STREAM_FIRST_BYTE_TIMEOUT, idle: STREAM_IDLE_TIMEOUT }
    }
}

impl RequestBuilder {
    /// Adds a header (a second value of the same name is added, not replaced).
    pub fn header<K, V>(mut self, name: K, value: V) -> Self
    where
        K: TryInto<HeaderName>,
        V: TryInto<HeaderValue>,
    {
        match (name.try_into(), value.try_into()) {
            (Ok(name), Ok(value)) => {
                self.headers.append(name, value);
            }
            _ => self.fail(Error::new(Kind::Builder, "a header name or value is not valid in HTTP")),
        }
        self
    }

    /// Sets these headers, replacing any of the same names.
    pub fn headers(mut self, headers: HeaderMap) -> Self {
        let mut last = None;
        for (name, value) in headers {
            // `HeaderMap`'s iterator names only the first of several values of one header.
            if let Some(name) = name {
                self.headers.remove(&name);
                last = Some(name);
            }
            if let Some(name) = &last {
                self.headers.append(name.clone(), value);
            }
        }
        self
    }

    /// `authorization: Bearer {token}`, kept out of debug output.
    pub fn bearer_auth(self, token: impl fmt::Display) -> Self {
        match HeaderValue::try_from(format!("Bearer {token}")) {
            Ok(mut value) => {
                value.set_sensitive(true);
                self.header(AUTHORIZATION, value)
            }
            Err(_) => {
                let mut this = self;
                this.fail(Error::new(Kind::Builder, "the token is not valid in an HTTP header"));
                this
            }
        }
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// `value` as the JSON body, with `content-type: application/json` unless one is set.
    pub fn json<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => {
                self.body = body.into();
                if !self.headers.contains_key(CONTENT_TYPE) {
                    self.headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                }
            }
            Err(err) => self.fail(Error::new(Kind::Builder, err)),
        }
        self
    }

    /// This request's deadline, counted from `send`: the answer and its whole body.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Makes this a streamed request: `limits` bound it instead of the deadline.
    pub fn stream_limits(mut self, limits: StreamLimits) -> Self {
        self.stream = Some(limits);
        self
    }

    fn fail(&mut self, error: Error) {
        if self.uri.is_ok() {
            self.uri = Err(error);
        }
    }

    pub async fn send(self) -> Result<Response, Error> {
        let RequestBuilder { client, method, uri, mut headers, body, timeout, stream } = self;
        let deadlines = match stream {
            Some(limits) => Deadlines::stream(limits),
            None => Deadlines::plain(timeout),
        };
        headers.entry(http::header::USER_AGENT).or_insert(client.user_agent.clone());
        headers.entry(ACCEPT).or_insert(HeaderValue::from_static("*/*"));
        // A request made for a run names the run's current span (W3C Trace Context).
        if let Some(traceparent) = telemetry::current_traceparent()
            && let Ok(value) = HeaderValue::try_from(traceparent)
        {
            headers.entry(TRACEPARENT).or_insert(value);
        }
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri?;
        *request.headers_mut() = headers;
        let (wait_until, limit) = deadlines.next_wait();
        let response = match tokio::time::timeout_at(wait_until, client.pool.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(err)) => return Err(Error::from_pool(err)),
            Err(_) => return Err(Error::new(Kind::Timeout(limit), "no answer before the deadline")),
        };
        let (parts, body) = response.into_parts();
        Ok(Response { status: parts.status, headers: parts.headers, body, deadlines })
    }
}

/// Which limit a wait ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// An ordinary request's deadline (or the connect timeout).
    Deadline,
    /// A stream's whole time.
    Total(Duration),
    /// A stream's wait for its first byte.
    FirstByte(Duration),
    /// A stream's silence between two chunks.
    Idle(Duration),
}

/// When each wait of a request ends, and which limit ends it.
#[derive(Debug, Clone, Copy)]
struct Deadlines {
    /// The whole exchange ends here.
    end: Instant,
    end_limit: Limit,
    /// The next piece (the head, then each chunk) must arrive by here.
    next: Instant,
    next_limit: Limit,
    /// How far each chunk that arrives moves `next` ahead (a stream's idle limit).
    idle: Option<Duration>,
}

impl Deadlines {
    /// One deadline for everything.
    fn plain(timeout: Duration) -> Self {
        let end = later(timeout);
        Self { end, end_limit: Limit::Deadline, next: end, next_limit: Limit::Deadline, idle: None }
    }

    fn stream(limits: StreamLimits) -> Self {
        Self {
            end: later(limits.total),
            end_limit: Limit::Total(limits.total),
            next: later(limits.first_byte),
            next_limit: Limit::FirstByte(limits.first_byte),
            idle: Some(limits.idle),
        }
    }

    /// The end of the current wait, and its limit (the whole exchange's on a tie).
    fn next_wait(&self) -> (Instant, Limit) {
        if self.next < self.end { (self.next, self.next_limit) } else { (self.end, self.end_limit) }
    }

    /// A chunk arrived: a stream's silence is counted anew.
    fn chunk_arrived(&mut self) {
        if let Some(idle) = self.idle {
            self.next = later(idle);
            self.next_limit = Limit::Idle(idle);
        }
    }
}

/// `after` from now; a limit too large for the clock counts as a year (never reached).
fn later(after: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(after).unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// An answer whose body is read as it arrives.
#[derive(Debug)]
pub struct Response {
    status: StatusCode,
    headers: HeaderMap,
    body: hyper::body::Incoming,
    deadlines: Deadlines,
}

impl Response {
    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body's length, when the server announced it.
    pub fn content_length(&self) -> Option<u64> {
        http_body::Body::size_hint(&self.body).exact()
    }

    /// The next piece of the body as it arrives; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        loop {
            let (wait_until, limit) = self.deadlines.next_wait();
            let frame = match tokio::time::timeout_at(wait_until, self.body.frame()).await {
                Ok(Some(Ok(frame))) => frame,
                Ok(Some(Err(err))) => return Err(Error::new(Kind::Body, err)),
                Ok(None) => return Ok(None),
                Err(_) => return Err(Error::new(Kind::Timeout(limit), "the body did not arrive in time")),
            };
            // Trailers carry no body.
            if let Ok(data) = frame.into_data() {
                self.deadlines.chunk_arrived();
                return Ok(Some(data));
            }
        }
    }
}

/// Why a request failed; its text never includes the URL.
#[derive(Debug)]
pub struct Error {
    kind: Kind,
    source: BoxError,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The request could not be built (a URL or header that is not valid).
    Builder,
    /// No connection could be opened (DNS, refused, TLS, the address guard).
    Connect,
    /// A deadline or a stream's limit passed.
    Timeout(Limit),
    /// The exchange failed after connecting (the connection closed, a malformed answer).
    Request,
    /// The body could not be read to its end.
    Body,
}

impl Error {
    fn new(kind: Kind, source: impl Into<BoxError>) -> Self {
        Self { kind, source: source.into() }
    }

    fn from_pool(err: hyper_util::client::legacy::Error) -> Self {
        let mut next: Option<&(dyn StdError + 'static)> = Some(&err);
        let mut timed_out = false;
        while let Some(cause) = next {
            timed_out |= cause.is::<ConnectTimedOut>();
            next = cause.source();
        }
        let kind = match () {
            _ if timed_out => Kind::Timeout(Limit::Deadline),
            _ if err.is_connect() => Kind::Connect,
            _ => Kind::Request,
        };
        Self::new(kind, err)
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self.kind, Kind::Timeout(_))
    }

    pub fn is_connect(&self) -> bool {
        self.kind == Kind::Connect
    }

    pub fn is_body(&self) -> bool {
        self.kind == Kind::Body
    }

    pub fn is_builder(&self) -> bool {
        self.kind == Kind::Builder
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            Kind::Builder => "the request could not be built",
            Kind::Connect => "could not connect",
            Kind::Timeout(Limit::Deadline) => "the server did not answer in time",
            Kind::Timeout(Limit::Total(limit)) => {
                return write!(f, "the stream did not end within {} seconds (its time limit)", limit.as_secs_f64());
            }
            Kind::Timeout(Limit::FirstByte(limit)) => {
                return write!(f, "nothing arrived within {} seconds (the first-byte limit)", limit.as_secs_f64());
            }
            Kind::Timeout(Limit::Idle(limit)) => {
                return write!(f, "the stream was silent for {} seconds (the idle limit)", limit.as_secs_f64());
            }
            Kind::Request => "the request failed",
            Kind::Body => "the server's response could not be read",
        };
        f.write_str(what)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(self.source.as_ref())
    }
}

/// Resolves names and keeps only the addresses the policy allows, so a public name that
/// resolves to a private address is refused too (SSRF, DNS rebinding). On the runtime API's
/// port it also drops the runtime API's address (a name resolving to it, where loopback is
/// allowed).
#[derive(Clone)]
struct Resolver {
    policy: Arc<AddressPolicy>,
    refuse_runtime_api: bool,
}

impl tower_service::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = Arc::clone(&self.policy);
        let refuse_runtime_api = self.refuse_runtime_api;
        Box::pin(async move {
            let host = name.as_str();
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
            let allowed: Vec<SocketAddr> = addresses
                .into_iter()
                .filter(|address| policy.allows_address(host, address.ip()))
                .filter(|address| !(refuse_runtime_api && policy.is_runtime_api_address(address.ip())))
                .collect();
            if allowed.is_empty() {
                return Err(std::io::Error::other(format!(
                    "{host} resolves only to private, loopback or link-local addresses"
                )));
            }
            Ok(allowed.into_iter())
        })
    }
}

type Stream = MaybeHttpsStream<TokioIo<TcpStream>>;

/// Opens a connection: TCP to an allowed address, then TLS for `https` URIs, within
/// [`CONNECT_TIMEOUT`].
#[derive(Clone)]
struct Connect {
    tcp: HttpConnector<Resolver>,
    /// For URIs on the runtime API's port: its resolver also drops the runtime API's address.
    tcp_at_runtime_api_port: HttpConnector<Resolver>,
    runtime_api_port: Option<u16>,
    tls: Arc<OnceLock<Result<Arc<rustls::ClientConfig>, rustls::Error>>>,
}

impl tower_service::Service<http::Uri> for Connect {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // `HttpConnector` and `HttpsConnector` are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = if self.runtime_api_port == Some(port) { &self.tcp_at_runtime_api_port } else { &self.tcp };
        let connecting: Self::Future = if https {
            match self.tls.get_or_init(|| crate::tls_config().map(Arc::new)) {
                Ok(config) => {
                    let mut https = HttpsConnector::from((tcp.clone(), Arc::clone(config)));
                    Box::pin(tower_service::Service::call(&mut https, uri))
                }
                Err(err) => return Box::pin(std::future::ready(Err(err.clone().into()))),
            }
        } else {
            let mut tcp = tcp.clone();
            Box::pin(async move { Ok(MaybeHttpsStream::Http(tower_service::Service::call(&mut tcp, uri).await?)) })
        };
        Box::pin(async move {
            match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(Box::new(ConnectTimedOut) as BoxError),
            }
        })
    }
}

#[derive(Debug)]
struct ConnectTimedOut;

impl fmt::Display for ConnectTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no connection within {CONNECT_TIMEOUT:?}")
    }
}

impl StdError for ConnectTimedOut {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn on_the_runtime_apis_port_a_name_resolving_to_it_is_refused() {
        use std::str::FromStr;
        // Loopback allowed (a local stack): `localhost` resolves to the runtime API's address.
        let policy = Arc::new(
            AddressPolicy::from_setting(Some("127.0.0.0/8,::1,localhost"))
                .unwrap()
                .with_runtime_api(Some("127.0.0.1:9001".into())),
        );
        let name = || Name::from_str("localhost").unwrap();
        let mut elsewhere = Resolver { policy: Arc::clone(&policy), refuse_runtime_api: false };
        assert!(
            tower_service::Service::call(&mut elsewhere, name()).await.is_ok_and(|mut found| found.next().is_some())
        );
        let mut at_its_port = Resolver { policy, refuse_runtime_api: true };
        let err = tower_service::Service::call(&mut at_its_port, name()).await.unwrap_err();
        assert!(err.to_string().contains("resolves only to private"), "{err}");
    }

    #[tokio::test]
    async fn a_request_on_the_runtime_apis_port_never_connects_to_it() {
        let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = api.local_addr().unwrap().port();
        // The runtime API named by another name than the URL's: only the resolved address tells.
        let policy = AddressPolicy::from_setting(Some("127.0.0.0/8,localhost"))
            .unwrap()
            .with_runtime_api(Some(format!("127.0.0.1:{port}")));
        let accepted =
            tokio::spawn(async move { tokio::time::timeout(Duration::from_millis(500), api.accept()).await.is_ok() });
        let err = Client::new(policy).get(format!("http://localhost:{port}/")).send().await.unwrap_err();
        assert!(crate::describe(&err).contains("resolves only to private"), "{}", crate::describe(&err));
        assert!(!accepted.await.unwrap(), "the runtime API was reached");
    }

    #[test]
    fn credentials_in_a_url_become_a_basic_authorization_header() {
        let mut headers = HeaderMap::new();
        let uri = target("https://us%40er:p%3As+s@example.com:8443/a b?q=1", &mut headers).unwrap();
        assert_eq!(uri.to_string(), "https://example.com:8443/a%20b?q=1");
        // base64("us@er:p:s+s")
        assert_eq!(headers[AUTHORIZATION], "Basic dXNAZXI6cDpzK3M=");
        assert!(headers[AUTHORIZATION].is_sensitive());
    }

    #[test]
    fn only_http_urls_with_a_host_are_sent() {
        for url in ["ftp://example.com/", "not a url", "http://", "file:///etc/passwd", "mailto:a@b.c"] {
            let err = target(url, &mut HeaderMap::new()).unwrap_err();
            assert!(err.is_builder(), "{url}");
        }
        let uri = target("http://bücher.example/", &mut HeaderMap::new()).unwrap();
        assert_eq!(uri.host(), Some("xn--bcher-kva.example"));
    }

    #[test]
    fn headers_replace_those_of_the_same_name_and_keep_every_value() {
        let client = Client::new(AddressPolicy::default());
        let mut replacing = HeaderMap::new();
        replacing.append("x-a", HeaderValue::from_static("1"));
        replacing.append("x-a", HeaderValue::from_static("2"));
        let request = client.get("http://example.com/").header("x-a", "0").header("x-b", "b").headers(replacing);
        let values: Vec<_> = request.headers.get_all("x-a").iter().collect();
        assert_eq!(values, ["1", "2"]);
        assert_eq!(request.headers["x-b"], "b");
        let invalid = client.get("http://example.com/").header("x-a", "line\nbreak");
        assert!(invalid.uri.is_err());
    }
}
