//! A proxy in front of the local AWS endpoint, for the cold-start bench: it speaks to the
//! functions as AWS's endpoints do, and splits a request into AWS time and the function's own.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

type Exchanges = Arc<Mutex<Vec<(Instant, Instant)>>>;

/// A proxy in front of the local AWS endpoint that serves the functions as AWS does: HTTPS, with
/// a certificate made for the run (the functions trust it through `SSL_CERT_FILE`), and
/// connections kept alive, so a function opens (TCP and TLS) only the connections it would open
/// in AWS. Each request goes on to moto over a fresh connection, since moto closes each one.
///
/// It records when each exchange was under way, from the request's arrival (its headers read)
/// to the answer's last byte from moto, so a figure can be split into the time spent waiting on
/// AWS and the function's own. The proxy's connection to moto counts as AWS time (in AWS it is
/// part of the network path); its side of a TLS handshake counts as the function's own.
pub struct AwsProxy {
    pub address: std::net::SocketAddr,
    /// The proxy's certificate (PEM), for the functions' `SSL_CERT_FILE`.
    pub certificate_file: PathBuf,
    exchanges: Exchanges,
    task: tokio::task::JoinHandle<()>,
}

impl AwsProxy {
    /// Proxies to `upstream` (`host:port`), writing its certificate to `certificate_file`.
    pub async fn start(upstream: String, certificate_file: PathBuf) -> Self {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("a self-signed certificate");
        std::fs::write(&certificate_file, certified.cert.pem()).expect("write the proxy's certificate");
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .expect("the certificate and its key");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a local port");
        let address = listener.local_addr().expect("local address");
        let exchanges = Exchanges::default();
        let recorded = Arc::clone(&exchanges);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                tokio::spawn(serve(acceptor.clone(), client, upstream.clone(), Arc::clone(&recorded)));
            }
        });
        Self { address, certificate_file, exchanges, task }
    }

    /// The functions' `AWS_ENDPOINT_URL`.
    pub fn endpoint_url(&self) -> String {
        format!("https://{}", self.address)
    }

    /// How long, between `from` and `to`, at least one exchange with AWS was under way.
    pub fn busy_between(&self, from: Instant, to: Instant) -> std::time::Duration {
        let mut spans: Vec<(Instant, Instant)> = self
            .exchanges
            .lock()
            .map(|exchanges| exchanges.iter().map(|&(start, end)| (start.max(from), end.min(to))).collect())
            .unwrap_or_default();
        spans.retain(|(start, end)| start < end);
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

/// One connection of a function's: TLS, then HTTP/1.1 requests until the function closes it.
async fn serve(
    acceptor: tokio_rustls::TlsAcceptor,
    client: tokio::net::TcpStream,
    upstream: String,
    recorded: Exchanges,
) {
    let Ok(tls) = acceptor.accept(client).await else { return };
    let service = hyper::service::service_fn(move |request| {
        let (upstream, recorded) = (upstream.clone(), Arc::clone(&recorded));
        async move {
            let started = Instant::now();
            let answer = forward(request, &upstream).await;
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
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
}

/// Sends `request` to `upstream` over a fresh connection and reads the whole answer; `None`
/// when the endpoint cannot be reached or breaks off.
async fn forward(request: hyper::Request<Incoming>, upstream: &str) -> Option<hyper::Response<Full<Bytes>>> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    let server = tokio::net::TcpStream::connect(upstream).await.ok()?;
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
