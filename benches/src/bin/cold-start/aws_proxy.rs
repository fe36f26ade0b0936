//! A proxy in front of the local AWS endpoint, for the cold-start bench: it speaks to the
//! functions as AWS's endpoints do, and splits a request into AWS time and the function's own.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::convert::Infallible;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

type Exchanges = Arc<Mutex<Vec<(Instant, Instant)>>>;

/// A proxy in front of the local AWS endpoint that serves the functions as AWS does: HTTPS, with
/// connections kept alive, so a function opens (TCP and TLS) only the connections it would open
/// in AWS. Like AWS's endpoints, it presents an RSA 2048 certificate under an intermediate (the
/// functions trust the run's root through `SSL_CERT_FILE`), so a function's side of a handshake
/// verifies what it would verify there. Each request goes on to the local stack over a fresh connection,
/// as moto closes each of its own.
///
/// It records when each exchange was under way, from the request's arrival (its headers read)
/// to the answer's last byte from the local stack, so a figure can be split into the time spent waiting on
/// AWS and the function's own. The proxy's connection to the local stack counts as AWS time (in AWS it is
/// part of the network path), and so does its side of a TLS handshake: from the client's hello
/// read to the server's flight written. The function's side (its key share, then verifying the
/// certificates and deriving the keys) counts as its own.
pub struct AwsProxy {
    pub address: std::net::SocketAddr,
    /// The proxy's certificate (PEM), for the functions' `SSL_CERT_FILE`.
    pub certificate_file: PathBuf,
    tls: bool,
    exchanges: Exchanges,
    task: tokio::task::JoinHandle<()>,
}

/// Where the proxy sends calls (`host:port`): DynamoDB's to DynamoDB Local, the others to moto,
/// as `with-local-aws` serves them. One endpoint for the function, as AWS's regional ones are
/// one host name per service behind the same kind of connection.
#[derive(Debug, Clone)]
pub struct Upstreams {
    pub dynamodb: String,
    pub other: String,
}

impl Upstreams {
    /// The upstream of a request: DynamoDB's calls are named by `X-Amz-Target: DynamoDB_…`.
    fn of(&self, parts: &http::request::Parts) -> &str {
        let target = parts.headers.get("x-amz-target").and_then(|value| value.to_str().ok()).unwrap_or_default();
        if target.starts_with("DynamoDB_") { &self.dynamodb } else { &self.other }
    }
}

impl AwsProxy {
    /// Proxies to `upstreams` over HTTPS, writing the root certificate to `certificate_file`;
    /// over plain HTTP when `tls` is false (to see what TLS costs).
    pub async fn start(upstreams: Upstreams, certificate_file: PathBuf, tls: bool) -> Self {
        let (root, chain, key) = certificates();
        std::fs::write(&certificate_file, root).expect("write the proxy's root certificate");
        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("TLS 1.2 and 1.3")
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .expect("the certificates and their key");
        // No session tickets: a fresh process has none to resume with, and they would go out
        // after the client's Finished, blurring the server's turn in the handshake.
        config.send_tls13_tickets = 0;
        let acceptor = tls.then(|| tokio_rustls::TlsAcceptor::from(Arc::new(config)));

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a local port");
        let address = listener.local_addr().expect("local address");
        let exchanges = Exchanges::default();
        let recorded = Arc::clone(&exchanges);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                tokio::spawn(serve(acceptor.clone(), client, upstreams.clone(), Arc::clone(&recorded)));
            }
        });
        Self { address, certificate_file, tls, exchanges, task }
    }

    /// The functions' `AWS_ENDPOINT_URL`.
    pub fn endpoint_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.address)
    }

    /// The exchanges under way between `from` and `to`, each cut to that interval.
    fn spans_between(&self, from: Instant, to: Instant) -> Vec<(Instant, Instant)> {
        let mut spans: Vec<(Instant, Instant)> = self
            .exchanges
            .lock()
            .map(|exchanges| exchanges.iter().map(|&(start, end)| (start.max(from), end.min(to))).collect())
            .unwrap_or_default();
        spans.retain(|(start, end)| start < end);
        spans
    }

    /// The exchanges between `from` and `to`, as (start, end) in µs from `from` (debugging).
    pub fn exchanges_between(&self, from: Instant, to: Instant) -> Vec<(u128, u128)> {
        let micros = |at: Instant| (at - from).as_micros();
        self.spans_between(from, to).into_iter().map(|(start, end)| (micros(start), micros(end))).collect()
    }

    /// How long, between `from` and `to`, at least one exchange with AWS was under way.
    pub fn busy_between(&self, from: Instant, to: Instant) -> std::time::Duration {
        let mut spans = self.spans_between(from, to);
        spans.sort();
        let mut busy = std::time::Duration::ZERO;
        let mut covered: Option<(Instant, Instant)> = None;
        for (start, end) in spans {
            covered = match covered {
                Some((s, e)) if start <= e => Some((s, e.max(end))),
                Some((s, e)) => {
                    busy += e - s;
                    Some((start, end))
                }
                None => Some((start, end)),
            };
        }
        busy + covered.map(|(s, e)| e - s).unwrap_or_default()
    }
}

impl Drop for AwsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The proxy's certificates, made for the run: a root (written for the functions to trust), an
/// intermediate and the leaf for 127.0.0.1, all RSA 2048 as AWS's are (one key signs them all:
/// what a verification costs depends on the algorithm and the key's size, not on which key).
fn certificates() -> (String, Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let key = rcgen::KeyPair::from_pem(include_str!("proxy-rsa-key.pem")).expect("the proxy's RSA key");
    let authority = |name: &str| {
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params
    };
    let root_params = authority("cold-start bench root");
    let root = root_params.self_signed(&key).expect("the root certificate");
    let intermediate_params = authority("cold-start bench intermediate");
    let intermediate = intermediate_params
        .signed_by(&key, &rcgen::Issuer::from_params(&root_params, &key))
        .expect("the intermediate certificate");
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("the leaf's names")
        .signed_by(&key, &rcgen::Issuer::from_params(&intermediate_params, &key))
        .expect("the leaf certificate");
    let private = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    (root.pem(), vec![leaf.der().clone(), intermediate.der().clone()], private)
}

/// One connection of a function's: TLS, then HTTP/1.1 requests until the function closes it.
async fn serve(
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    client: tokio::net::TcpStream,
    upstreams: Upstreams,
    recorded: Exchanges,
) {
    let exchanges = Arc::clone(&recorded);
    let service = hyper::service::service_fn(move |request| {
        let (upstreams, recorded) = (upstreams.clone(), Arc::clone(&exchanges));
        async move {
            let started = Instant::now();
            let answer = forward(request, &upstreams).await;
            if let Ok(mut exchanges) = recorded.lock() {
                exchanges.push((started, Instant::now()));
            }
            Ok::<_, Infallible>(answer.unwrap_or_else(|| {
                let mut failed = hyper::Response::new(Full::new(Bytes::from_static(b"the local AWS endpoint failed")));
                *failed.status_mut() = http::StatusCode::BAD_GATEWAY;
                failed
            }))
        }
    });
    let http = hyper::server::conn::http1::Builder::new();
    let Some(acceptor) = acceptor else {
        let _ = http.serve_connection(TokioIo::new(client), service).await;
        return;
    };
    let Ok(tls) = acceptor.accept(HandshakeClock::new(client)).await else { return };
    if let (Some(hello), Some(flight)) = (tls.get_ref().0.hello_read, tls.get_ref().0.flight_written)
        && let Ok(mut exchanges) = recorded.lock()
    {
        exchanges.push((hello, flight));
    }
    let _ = http.serve_connection(TokioIo::new(tls), service).await;
}

/// A function's connection, noting the server's turn in the TLS handshake: when the client's
/// hello arrived (the first bytes read) and when the server's answering flight was last
/// written, before the client's next bytes (its Finished) arrive.
struct HandshakeClock {
    stream: tokio::net::TcpStream,
    hello_read: Option<Instant>,
    flight_written: Option<Instant>,
    /// The client has spoken again after the server's flight: the server's turn is over.
    turn_over: bool,
}

impl HandshakeClock {
    fn new(stream: tokio::net::TcpStream) -> Self {
        Self { stream, hello_read: None, flight_written: None, turn_over: false }
    }

    /// Notes a write that went out during the server's turn.
    fn note_write(&mut self, polled: &Poll<std::io::Result<usize>>) {
        if matches!(polled, Poll::Ready(Ok(written)) if *written > 0) && !self.turn_over {
            self.flight_written = Some(Instant::now());
        }
    }
}

impl AsyncRead for HandshakeClock {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            if self.hello_read.is_none() {
                self.hello_read = Some(Instant::now());
            } else if self.flight_written.is_some() {
                self.turn_over = true;
            }
        }
        polled
    }
}

impl AsyncWrite for HandshakeClock {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, data);
        self.note_write(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, data);
        self.note_write(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Sends `request` to its upstream over a fresh connection and reads the whole answer; `None`
/// when the endpoint cannot be reached or breaks off.
async fn forward(request: hyper::Request<Incoming>, upstreams: &Upstreams) -> Option<hyper::Response<Full<Bytes>>> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    let server = tokio::net::TcpStream::connect(upstreams.of(&parts)).await.ok()?;
    let _ = server.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(server)).await.ok()?;
    tokio::spawn(connection);
    let answer = sender.send_request(hyper::Request::from_parts(parts, Full::new(body))).await.ok()?;
    let (mut parts, body) = answer.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    // Moto closes its connection after each answer; the function's stays open, as AWS's do.
    parts.headers.remove(http::header::CONNECTION);
    Some(hyper::Response::from_parts(parts, Full::new(body)))
}
