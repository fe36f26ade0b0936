//! Local HTTP servers that play third parties in tests (MCP servers, flow servers, webhook
//! receivers): a real socket on 127.0.0.1 and a real HTTP/1.1 exchange.

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// A response body any handler can return.
pub type ResponseBody = BoxBody<Bytes, Infallible>;

/// What a local server answers to a request.
pub type Handler = Arc<
    dyn Fn(hyper::Request<Incoming>) -> Pin<Box<dyn Future<Output = hyper::Response<ResponseBody>> + Send>>
        + Send
        + Sync,
>;

/// A running local server; it stops when dropped.
pub struct LocalServer {
    pub address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl LocalServer {
    /// Serves `handler` on a free loopback port.
    pub async fn start(handler: Handler) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a local port");
        let address = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let handler = Arc::clone(&handler);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let handler = Arc::clone(&handler);
                        async move { Ok::<_, Infallible>(handler(request).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        Self { address, task }
    }

    /// `http://127.0.0.1:{port}{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A server that answers every request `200 {"ok": true}` and records the headers of each
/// (names lower-case): what a client sent to this origin.
pub struct RecordingServer {
    pub server: LocalServer,
    received: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
}

impl RecordingServer {
    /// Starts recording on a free loopback port (an origin of its own).
    pub async fn start() -> Self {
        let received = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&received);
        let handler: Handler = Arc::new(move |request| {
            let headers: BTreeMap<String, String> = request
                .headers()
                .iter()
                .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
                .collect();
            seen.lock().expect("not poisoned").push(headers);
            Box::pin(async move { respond(200, "application/json", r#"{"ok": true}"#) })
        });
        Self { server: LocalServer::start(handler).await, received }
    }

    /// `http://127.0.0.1:{port}{path}`.
    pub fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    /// The headers of every request received so far, in order.
    pub fn received(&self) -> Vec<BTreeMap<String, String>> {
        self.received.lock().expect("not poisoned").clone()
    }
}

/// A response with `status`, `content-type` and `body`.
pub fn respond(status: u16, content_type: &str, body: impl Into<Bytes>) -> hyper::Response<ResponseBody> {
    hyper::Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(body.into()).boxed())
        .expect("valid response")
}

/// A loopback URL where nothing listens (the port was bound, then released).
pub fn closed_port_url(path: &str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    let port = listener.local_addr().expect("local address").port();
    drop(listener);
    format!("http://127.0.0.1:{port}{path}")
}
