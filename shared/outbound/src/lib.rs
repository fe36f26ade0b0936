//! Outbound HTTP to servers the platform does not run: MCP servers, flow servers, webhook
//! receivers, language model providers, remote agents and HTTP tools.
//!
//! [`Client`] is hyper's HTTP/1.1 client on rustls with the ring provider: the same TLS stack
//! the AWS SDK uses here, so functions do not link a second crypto library (aws-lc would add
//! ~2 MB). Redirects are never followed (a server cannot bounce a request carrying secret
//! headers to another host), and every request has a connect timeout and an overall deadline.
//! Every client resolves names through the guard ([`guard`]).

pub mod client;
pub mod guard;
pub mod sse;

pub use client::{
    Client, Error, HeaderMap, HeaderName, HeaderValue, Method, RequestBuilder, Response, StatusCode, StreamLimits,
    header,
};
pub use guard::{AddressPolicy, Refused, TenantClient};

use std::time::Duration;

/// `user-agent` of every outbound request.
pub const USER_AGENT: &str = concat!("meeting-agent-platform/", env!("CARGO_PKG_VERSION"));

/// Time allowed to open a connection (TCP and TLS).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest time any request may take, unless the caller asks for less per request. Streamed
/// requests (model turns, A2A and flow runs) set [`StreamLimits`] instead.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A stream's default wait from sending to its first byte (a reasoning model may think long
/// before it answers).
pub const STREAM_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(120);

/// A stream's default longest silence between two chunks.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// TLS of every outbound request: rustls on ring, trusting the roots of Mozilla's program as
/// compiled in by `webpki-roots`, already parsed; built at a client's first HTTPS connection.
/// Reading and parsing the system's ~150 roots (a bundle and a folder of files) instead made the
/// webhook delivery worker's init 3.8× a bare function's (docs/performance.md). The roots change
/// with a dependency update and a deploy, like every other part of the function. HTTP/1.1 only
/// (no ALPN).
fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Reads a response body of at most `max_bytes`, chunk by chunk, so a server cannot make the
/// process hold more than that (a longer body is an error, not a truncated answer).
pub async fn read_limited(mut response: Response, max_bytes: usize) -> Result<Vec<u8>, String> {
    if response.content_length().is_some_and(|length| length > max_bytes as u64) {
        return Err(format!("the answer is larger than {max_bytes} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|err| describe(&err))? {
        if body.len() + chunk.len() > max_bytes {
            return Err(format!("the answer is larger than {max_bytes} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A sentence saying why a request failed, fit for an API error message: no internals, no
/// URLs (with or without credentials).
pub fn describe(err: &Error) -> String {
    if err.is_connect() {
        return match root_cause(err) {
            Some(cause) => format!("could not connect ({cause})"),
            None => "could not connect".into(),
        };
    }
    if err.is_timeout() || err.is_body() {
        return err.to_string();
    }
    match root_cause(err) {
        Some(cause) => format!("{err} ({cause})"),
        None => err.to_string(),
    }
}

/// A tenant's URL as a log may show it: scheme, host, port and path, without credentials,
/// query or fragment (where tokens such as `?api_key=` ride). Text that is not a URL is not
/// shown at all.
pub fn loggable_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(parsed) => {
            let host = parsed.host_str().unwrap_or_default();
            let port = parsed.port().map(|port| format!(":{port}")).unwrap_or_default();
            format!("{}://{host}{port}{}", parsed.scheme(), parsed.path())
        }
        Err(_) => "(not a URL)".to_owned(),
    }
}

/// The innermost error's text (e.g. "Connection refused (os error 111)", "dns error").
pub fn root_cause(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut source = err.source()?;
    while let Some(next) = source.source() {
        source = next;
    }
    Some(source.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loggable_url_keeps_no_credentials_query_or_fragment() {
        assert_eq!(
            loggable_url("https://user:pw@mcp.example.com:8443/v1/mcp?api_key=s3cret&x=1#frag"),
            "https://mcp.example.com:8443/v1/mcp"
        );
        assert_eq!(loggable_url("http://127.0.0.1/mcp"), "http://127.0.0.1/mcp");
        assert_eq!(loggable_url("not a url ?api_key=s3cret"), "(not a URL)");
    }

    #[test]
    fn clients_trust_the_compiled_in_roots() {
        let tls = tls_config().unwrap();
        let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        assert!(roots.len() > 100, "{} roots", roots.len());
        // Let's Encrypt's and Amazon's roots, which most providers' certificates chain to.
        for name in [&b"ISRG Root X1"[..], b"Amazon Root CA 1"] {
            let found = roots.roots.iter().any(|root| root.subject.windows(name.len()).any(|part| part == name));
            assert!(found, "{} missing", String::from_utf8_lossy(name));
        }
        assert!(tls.alpn_protocols.is_empty());
    }

    /// A client that may call this machine's scripted servers.
    fn loopback_client() -> Client {
        Client::new(AddressPolicy::from_setting(Some("127.0.0.0/8")).unwrap())
    }

    #[tokio::test]
    async fn the_deadline_covers_the_body_and_https_needs_a_handshake() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 1024];
                    let _ = socket.read(&mut request).await;
                    // The head and part of the body, then nothing.
                    let _ = socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc").await;
                    tokio::time::sleep(Duration::from_secs(30)).await;
                });
            }
        });
        let client = loopback_client();
        let mut response =
            client.get(format!("http://{address}/")).timeout(Duration::from_millis(200)).send().await.unwrap();
        assert_eq!(response.content_length(), Some(10));
        assert_eq!(response.chunk().await.unwrap().as_deref(), Some(&b"abc"[..]));
        let err = response.chunk().await.unwrap_err();
        assert!(err.is_timeout(), "{err:?}");
        assert_eq!(describe(&err), "the server did not answer in time");
        // The server speaks plain HTTP: the TLS handshake fails, as a connection error.
        let err = client.get(format!("https://{address}/")).send().await.unwrap_err();
        assert!(err.is_connect(), "{err:?}");
    }

    /// A server answering every request with `pieces` of raw HTTP, each written after its pause.
    async fn scripted_server(pieces: Vec<(Duration, Vec<u8>)>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let pieces = pieces.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 1024];
                    let _ = socket.read(&mut request).await;
                    for (pause, piece) in pieces {
                        tokio::time::sleep(pause).await;
                        let _ = socket.write_all(&piece).await;
                    }
                    // Hold the connection open (silence, not a closed stream).
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                });
            }
        });
        url
    }

    // `connection: close`: each request gets a fresh connection (the server answers only one).
    const CHUNKED_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n";

    /// One chunk of a chunked body.
    fn chunk_of(text: &str) -> Vec<u8> {
        format!("{:x}\r\n{text}\r\n", text.len()).into_bytes()
    }

    /// The head at once, then `count` chunks `every` apart, then the body's end.
    fn spaced_chunks(count: usize, every: Duration) -> Vec<(Duration, Vec<u8>)> {
        let mut pieces = vec![(Duration::ZERO, CHUNKED_HEAD.to_vec())];
        pieces.extend((0..count).map(|i| (every, chunk_of(&format!("delta {i};")))));
        pieces.push((Duration::ZERO, b"0\r\n\r\n".to_vec()));
        pieces
    }

    /// Reads the whole body, or the error that stopped it.
    async fn read_all(mut response: Response) -> Result<String, Error> {
        let mut body = String::new();
        while let Some(chunk) = response.chunk().await? {
            body.push_str(&String::from_utf8_lossy(&chunk));
        }
        Ok(body)
    }

    // Paused time: the clock jumps to the next timer whenever both sides wait, so 45 s of stream
    // take no real time; the loopback socket is polled before each jump.
    #[tokio::test(start_paused = true)]
    async fn a_stream_may_outlast_the_deadline_while_chunks_keep_coming() {
        let url = scripted_server(spaced_chunks(9, Duration::from_secs(5))).await;
        let client = loopback_client();
        let limits = StreamLimits { total: Duration::from_secs(300), ..StreamLimits::new(Duration::ZERO) };
        let response = client.post(&url).stream_limits(limits).send().await.unwrap();
        let body = read_all(response).await.unwrap();
        assert_eq!(body.matches("delta").count(), 9, "{body}");
        // The same stream as an ordinary request ends at its 30 s deadline.
        let response = client.post(&url).send().await.unwrap();
        let err = read_all(response).await.unwrap_err();
        assert_eq!(describe(&err), "the server did not answer in time");
    }

    #[tokio::test(start_paused = true)]
    async fn each_stream_limit_names_itself_when_it_passes() {
        let limits = StreamLimits {
            total: Duration::from_secs(40),
            first_byte: Duration::from_secs(10),
            idle: Duration::from_secs(6),
        };
        let client = loopback_client();
        let failure = |pieces| {
            let client = client.clone();
            async move {
                let url = scripted_server(pieces).await;
                let err = match client.post(&url).stream_limits(limits).send().await {
                    Ok(response) => read_all(response).await.unwrap_err(),
                    Err(err) => err,
                };
                assert!(err.is_timeout(), "{err:?}");
                describe(&err)
            }
        };
        // Silent after one chunk: the idle limit.
        let silent = vec![(Duration::ZERO, CHUNKED_HEAD.to_vec()), (Duration::ZERO, chunk_of("a"))];
        assert_eq!(failure(silent).await, "the stream was silent for 6 seconds (the idle limit)");
        // No head at all, then a head and no chunk: the first-byte limit.
        assert_eq!(failure(Vec::new()).await, "nothing arrived within 10 seconds (the first-byte limit)");
        let head_only = vec![(Duration::from_secs(8), CHUNKED_HEAD.to_vec())];
        assert_eq!(failure(head_only).await, "nothing arrived within 10 seconds (the first-byte limit)");
        // Chunks 5 s apart forever: the whole stream's limit.
        assert_eq!(
            failure(spaced_chunks(100, Duration::from_secs(5))).await,
            "the stream did not end within 40 seconds (its time limit)"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_is_described_without_the_url() {
        // Port 9 (discard) on loopback is closed on any sane machine; bind-and-drop would race.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let err = loopback_client().get(format!("http://user:secret@127.0.0.1:{port}/x")).send().await.unwrap_err();
        let text = describe(&err);
        assert!(text.starts_with("could not connect"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }

    #[tokio::test]
    async fn bodies_longer_than_the_limit_are_refused() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            for chunked in [false, true, false] {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut request = [0u8; 1024];
                let _ = socket.read(&mut request).await;
                let head = if chunked {
                    // No length announced: the limit is found while reading.
                    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n400\r\n".to_owned()
                        + &"x".repeat(1024)
                        + "\r\n0\r\n\r\n"
                } else {
                    "HTTP/1.1 200 OK\r\ncontent-length: 1024\r\n\r\n".to_owned() + &"x".repeat(1024)
                };
                let _ = socket.write_all(head.as_bytes()).await;
            }
        });
        let client = loopback_client();
        let get = || async { client.get(&url).send().await.unwrap() };
        assert_eq!(read_limited(get().await, 100).await, Err("the answer is larger than 100 bytes".into()));
        assert_eq!(read_limited(get().await, 100).await, Err("the answer is larger than 100 bytes".into()));
        assert_eq!(read_limited(get().await, 2048).await.map(|body| body.len()), Ok(1024));
    }
}
