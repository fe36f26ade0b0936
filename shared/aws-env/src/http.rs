//! The SDK's HTTP client: hyper's pooled HTTP/1.1 client over rustls with the ring provider.
//!
//! The SDK's own client (`aws-smithy-http-client`) always links an HTTP/2 implementation (`h2`)
//! and proxy support, neither of which a function uses: AWS's DynamoDB, SQS, Secrets Manager and
//! Lambda endpoints speak HTTP/1.1, and Lambda has no proxy. This one is what is left: a
//! connection pool, the connect and read timeouts the SDK asks for, TLS built at the first HTTPS
//! connection (a plain-HTTP local endpoint never builds it), and errors classified the way the
//! SDK's retry strategy expects (`docs/performance.md`, binary size).
//!
//! One pool per AWS service: in AWS each service is its own host, so a DynamoDB call never
//! finds a connection that Secrets Manager's call opened. Behind one local endpoint (moto,
//! LocalStack, the cold-start bench's proxy) they would share connections, and a function
//! would open fewer connections, and do fewer TLS handshakes, than it does in AWS. A request's
//! service is the one its SigV4 signature is scoped to ([`signing_service`]).

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::retries::ErrorKind;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector as TcpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::borrow::Cow;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;

/// The certificates HTTPS connections to AWS trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Roots {
    /// Amazon Trust Services' roots only, embedded (a function in Lambda calling AWS's own
    /// endpoints).
    AmazonTrustServices,
    /// The system's roots (a developer's machine, an `AWS_ENDPOINT_URL` over TLS).
    System,
}

/// The roots of Amazon Trust Services, whose certificates every AWS service endpoint presents
/// (Amazon Root CA 1–4 and the Starfield Services root that cross-signs them).
pub(crate) const AMAZON_TRUST_ROOTS: &[u8] = include_bytes!("amazon-trust-roots.pem");

/// One per process (it is in the `SdkConfig` every client is built from): it hands each client a
/// connector per timeout setting, and all of them share one TLS configuration.
#[derive(Debug)]
pub(crate) struct SdkHttpClient {
    tls: Arc<LazyTls>,
    connectors: Mutex<Vec<(Timeouts, SharedHttpConnector)>>,
}

type Timeouts = (Option<Duration>, Option<Duration>);

impl SdkHttpClient {
    pub(crate) fn new(roots: Roots) -> Self {
        Self { tls: Arc::new(LazyTls { roots, config: OnceLock::new() }), connectors: Mutex::new(Vec::new()) }
    }
}

impl HttpClient for SdkHttpClient {
    fn http_connector(&self, settings: &HttpConnectorSettings, _: &RuntimeComponents) -> SharedHttpConnector {
        self.connector((settings.connect_timeout(), settings.read_timeout()))
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        Some(ConnectorMetadata::new("hyper", Some(Cow::Borrowed("1.x"))))
    }
}

impl SdkHttpClient {
    /// The connector of these timeouts. It holds the connection pool, so every client with the
    /// same settings (all of a function's, with the SDK's defaults) shares one.
    fn connector(&self, timeouts: Timeouts) -> SharedHttpConnector {
        let mut connectors = self.connectors.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, connector)) = connectors.iter().find(|(of, _)| *of == timeouts) {
            return connector.clone();
        }
        let connector = SharedHttpConnector::new(SdkConnector::new(Arc::clone(&self.tls), timeouts));
        connectors.push((timeouts, connector.clone()));
        connector
    }
}

/// The rustls configuration, built at the first HTTPS connection.
#[derive(Debug)]
struct LazyTls {
    roots: Roots,
    config: OnceLock<Result<Arc<rustls::ClientConfig>, rustls::Error>>,
}

impl LazyTls {
    fn config(&self) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
        self.config.get_or_init(|| tls_config(self.roots).map(Arc::new)).clone()
    }
}

/// Rustls on ring, HTTP/1.1 (no ALPN), trusting `roots`. A root that does not parse is skipped
/// (the embedded ones are checked by a test); with none left, every HTTPS call fails with a
/// certificate error. The only error is a provider without the default protocol versions,
/// which ring is not.
pub(crate) fn tls_config(roots: Roots) -> Result<rustls::ClientConfig, rustls::Error> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject as _;
    let certificates: Vec<CertificateDer<'static>> = match roots {
        Roots::AmazonTrustServices => {
            CertificateDer::pem_slice_iter(AMAZON_TRUST_ROOTS).filter_map(Result::ok).collect()
        }
        Roots::System => rustls_native_certs::load_native_certs().certs,
    };
    let mut store = rustls::RootCertStore::empty();
    store.add_parsable_certificates(certificates);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(store)
        .with_no_client_auth())
}

/// The connections of one setting of timeouts: a pool per service.
struct SdkConnector {
    connect: Connect,
    /// By the service requests are signed for; a function calls two to four services.
    pools: Mutex<Vec<(String, Client<Connect, SdkBody>)>>,
    read_timeout: Option<Duration>,
}

impl SdkConnector {
    fn new(tls: Arc<LazyTls>, (connect_timeout, read_timeout): Timeouts) -> Self {
        let mut tcp = TcpConnector::new();
        // HTTPS URIs are passed through to it by `Connect`.
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let connect = Connect { tcp, tls, timeout: connect_timeout };
        Self { connect, pools: Mutex::new(Vec::new()), read_timeout }
    }

    /// The pool of `service`'s connections (a handle on it: hyper's client is shared by clones).
    fn pool(&self, service: &str) -> Client<Connect, SdkBody> {
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, pool)) = pools.iter().find(|(of, _)| of == service) {
            return pool.clone();
        }
        let pool = Client::builder(TokioExecutor::new())
            // Without a timer the pool never expires idle connections.
            .pool_timer(TokioTimer::new())
            .build(self.connect.clone());
        pools.push((service.to_owned(), pool.clone()));
        pool
    }
}

impl fmt::Debug for SdkConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SdkConnector").field("read_timeout", &self.read_timeout).finish_non_exhaustive()
    }
}

/// The service a signed request is for: its credential scope's part before `aws4_request`
/// (`Credential=AKID/20261124/eu-west-1/dynamodb/aws4_request`, SigV4a's without the region);
/// empty when the request is unsigned.
fn signing_service(headers: &http::HeaderMap) -> &str {
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once("Credential=")?.1.split([',', ' ']).next())
        .and_then(|scope| scope.rsplit('/').nth(1))
        .unwrap_or("")
}

impl HttpConnector for SdkConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let request = match request.try_into_http1x() {
            Ok(request) => request,
            Err(err) => return HttpConnectorFuture::ready(Err(ConnectorError::user(err.into()))),
        };
        let response = self.pool(signing_service(request.headers())).request(request);
        let read_timeout = self.read_timeout;
        HttpConnectorFuture::new(async move {
            let response = match read_timeout {
                Some(limit) => match tokio::time::timeout(limit, response).await {
                    Ok(response) => response,
                    Err(_) => return Err(ConnectorError::timeout(Box::new(TimedOut { what: "read", after: limit }))),
                },
                None => response.await,
            };
            match response {
                Ok(response) => HttpResponse::try_from(response.map(SdkBody::from_body_1_x))
                    .map_err(|err| ConnectorError::other(err.into(), None)),
                Err(err) => Err(connector_error(err)),
            }
        })
    }
}

/// Opens a connection: TCP, then TLS for `https` URIs, within the connect timeout.
#[derive(Clone)]
struct Connect {
    tcp: TcpConnector,
    tls: Arc<LazyTls>,
    timeout: Option<Duration>,
}

type Stream = MaybeHttpsStream<TokioIo<TcpStream>>;

impl tower_service::Service<http::Uri> for Connect {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // `HttpConnector` and `HttpsConnector` are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting: Self::Future = if uri.scheme() == Some(&http::uri::Scheme::HTTPS) {
            match self.tls.config() {
                Ok(config) => {
                    let mut https = HttpsConnector::from((self.tcp.clone(), config));
                    Box::pin(tower_service::Service::call(&mut https, uri))
                }
                Err(err) => return Box::pin(std::future::ready(Err(err.into()))),
            }
        } else {
            let mut tcp = self.tcp.clone();
            Box::pin(async move { Ok(MaybeHttpsStream::Http(tower_service::Service::call(&mut tcp, uri).await?)) })
        };
        let Some(limit) = self.timeout else { return connecting };
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(Box::new(TimedOut { what: "connect", after: limit }) as BoxError),
            }
        })
    }
}

/// A connect or read timeout.
#[derive(Debug)]
struct TimedOut {
    what: &'static str,
    after: Duration,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} timeout occurred after {:?}", self.what, self.after)
    }
}

impl Error for TimedOut {}

/// What the SDK's retry strategy should make of a failed exchange: timeouts and I/O errors
/// (a refused or reset connection, a failed DNS lookup, a connection the server closed while
/// idle in the pool) are transient and retried; a request hyper could not send is the caller's.
fn connector_error(err: hyper_util::client::legacy::Error) -> ConnectorError {
    if find_source::<TimedOut>(&err).is_some() {
        return ConnectorError::timeout(err.into());
    }
    if err.is_connect() {
        return ConnectorError::io(err.into());
    }
    if let Some(hyper_error) = find_source::<hyper::Error>(&err) {
        if hyper_error.is_timeout() {
            return ConnectorError::timeout(err.into());
        }
        if hyper_error.is_user() {
            return ConnectorError::user(err.into());
        }
        if hyper_error.is_closed() || hyper_error.is_canceled() || find_source::<std::io::Error>(hyper_error).is_some()
        {
            return ConnectorError::io(err.into());
        }
        if hyper_error.is_incomplete_message() {
            return ConnectorError::other(err.into(), Some(ErrorKind::TransientError));
        }
    }
    if find_source::<std::io::Error>(&err).is_some() {
        return ConnectorError::io(err.into());
    }
    ConnectorError::other(err.into(), None)
}

fn find_source<'a, E: Error + 'static>(err: &'a (dyn Error + 'static)) -> Option<&'a E> {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<E>() {
            return Some(found);
        }
        next = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    /// What a scripted server does with each connection it accepts.
    #[derive(Clone, Copy)]
    enum Server {
        /// Answers every request on the connection with `200 OK` and the body `ok`.
        Answers,
        /// Reads the request and never answers.
        Silent,
        /// Reads the request and closes the connection.
        Closes,
    }

    /// A local server; returns its address and the number of connections it has accepted.
    async fn serve(behaviour: Server) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    // Each test request fits in one read.
                    while let Ok(read) = socket.read(&mut buffer).await {
                        if read == 0 {
                            return;
                        }
                        match behaviour {
                            Server::Answers => {
                                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                                if socket.write_all(answer).await.is_err() {
                                    return;
                                }
                            }
                            Server::Silent => {}
                            Server::Closes => return,
                        }
                    }
                });
            }
        });
        (address, accepted)
    }

    fn client() -> SdkHttpClient {
        SdkHttpClient::new(Roots::AmazonTrustServices)
    }

    async fn get(connector: &SharedHttpConnector, url: String) -> Result<HttpResponse, ConnectorError> {
        connector.call(HttpRequest::get(url).unwrap()).await
    }

    #[tokio::test]
    async fn plain_http_reuses_one_connection_and_builds_no_tls() {
        let (address, accepted) = serve(Server::Answers).await;
        let client = client();
        let connector = client.connector((Some(Duration::from_secs(5)), None));
        for _ in 0..3 {
            let response = get(&connector, format!("http://{address}/")).await.unwrap();
            assert_eq!(response.status().as_u16(), 200);
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert!(client.tls.config.get().is_none());
    }

    fn signed_for(service: &str, url: String) -> HttpRequest {
        let mut request = HttpRequest::get(url).unwrap();
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261124/eu-west-1/{service}/aws4_request, \
             SignedHeaders=host;x-amz-date, Signature=00"
        );
        request.headers_mut().insert("authorization", authorization);
        request
    }

    #[tokio::test]
    async fn each_service_has_its_own_connections_even_behind_one_endpoint() {
        let (address, accepted) = serve(Server::Answers).await;
        let client = client();
        let connector = client.connector((None, None));
        for service in ["dynamodb", "secretsmanager", "dynamodb", "secretsmanager", "dynamodb"] {
            let response = connector.call(signed_for(service, format!("http://{address}/"))).await.unwrap();
            response.into_body().collect().await.unwrap();
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "one connection per service, each reused");
    }

    #[test]
    fn a_request_s_service_is_its_signature_s_scope() {
        let service = |authorization: Option<&str>| {
            let mut headers = http::HeaderMap::new();
            if let Some(value) = authorization {
                headers.insert("authorization", http::HeaderValue::from_str(value).unwrap());
            }
            signing_service(&headers).to_owned()
        };
        let sigv4 = "AWS4-HMAC-SHA256 Credential=AKID/20261124/eu-west-1/dynamodb/aws4_request, \
                     SignedHeaders=host, Signature=ab";
        assert_eq!(service(Some(sigv4)), "dynamodb");
        let sigv4a = "AWS4-ECDSA-P256-SHA256 Credential=AKID/20261124/sqs/aws4_request,SignedHeaders=host";
        assert_eq!(service(Some(sigv4a)), "sqs");
        for unsigned in [None, Some(""), Some("Bearer token"), Some("AWS4-HMAC-SHA256 Credential=")] {
            assert_eq!(service(unsigned), "", "{unsigned:?}");
        }
    }

    #[tokio::test]
    async fn clients_with_the_same_timeouts_share_a_connector() {
        let client = client();
        for _ in 0..3 {
            client.connector((Some(Duration::from_millis(3100)), None));
        }
        client.connector((Some(Duration::from_secs(1)), None));
        assert_eq!(client.connectors.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_refused_connection_is_an_io_error_which_the_sdk_retries() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let err = get(&client().connector((None, None)), format!("http://{address}/")).await.unwrap_err();
        assert!(err.is_io(), "{err:?}");
    }

    #[tokio::test]
    async fn a_server_that_does_not_answer_is_a_read_timeout() {
        let (address, _) = serve(Server::Silent).await;
        let connector = client().connector((None, Some(Duration::from_millis(50))));
        let err = get(&connector, format!("http://{address}/")).await.unwrap_err();
        assert!(err.is_timeout(), "{err:?}");
    }

    #[tokio::test]
    async fn a_connection_closed_before_the_answer_is_transient() {
        let (address, _) = serve(Server::Closes).await;
        let err = get(&client().connector((None, None)), format!("http://{address}/")).await.unwrap_err();
        assert!(err.is_io() || err.as_other() == Some(ErrorKind::TransientError), "{err:?}");
    }

    #[tokio::test]
    async fn https_builds_the_tls_configuration_at_the_first_connection() {
        // The server answers in plain HTTP, so the handshake fails: as I/O, which is retried.
        let (address, _) = serve(Server::Answers).await;
        let client = client();
        let err = get(&client.connector((None, None)), format!("https://{address}/")).await.unwrap_err();
        assert!(err.is_io(), "{err:?}");
        assert!(matches!(client.tls.config.get(), Some(Ok(_))));
    }

    #[test]
    fn the_embedded_roots_are_the_five_amazon_trust_services_certificates() {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject as _;
        let certificates: Vec<CertificateDer> =
            CertificateDer::pem_slice_iter(AMAZON_TRUST_ROOTS).collect::<Result<_, _>>().expect("valid PEM");
        assert_eq!(certificates.len(), 5);
        let mut store = rustls::RootCertStore::empty();
        assert_eq!(store.add_parsable_certificates(certificates), (5, 0));
        let config = tls_config(Roots::AmazonTrustServices).unwrap();
        assert!(config.alpn_protocols.is_empty(), "HTTP/1.1 only");
    }
}
