//! A local Lambda Runtime API (the part a function's runtime client speaks): it hands out a
//! fixed list of events on `GET …/invocation/next`, takes each answer on `POST …/response` (or
//! `…/error`, `…/init/error`), and reports when each of those arrived. Once the events are spent,
//! `next` never answers: the function sits idle, as in Lambda between invocations.

use http_body_util::BodyExt;
use integration_tests::local_server::{Handler, LocalServer, respond};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc;

/// What the function did, and when the emulator saw it.
#[derive(Debug)]
pub enum Mark {
    /// It asked for its next event (the first time: init is over).
    Next(Instant),
    /// It answered the current event with this body (buffered, streamed responses included).
    Answered(Instant, Vec<u8>),
    /// It reported an error (invocation or init) with this body.
    Failed(String),
    /// It asked for an event past the list: it is idle.
    Idle,
}

pub struct RuntimeApi {
    server: LocalServer,
    pub marks: mpsc::UnboundedReceiver<Mark>,
}

impl RuntimeApi {
    /// Serves `events` in order, on a free loopback port.
    pub async fn start(events: Vec<Vec<u8>>) -> Self {
        let events = Arc::new(Mutex::new(VecDeque::from(events)));
        let (sender, marks) = mpsc::unbounded_channel();
        let handler: Handler = Arc::new(move |request| {
            let (events, sender) = (Arc::clone(&events), sender.clone());
            Box::pin(async move {
                let arrived = Instant::now();
                let path = request.uri().path().to_owned();
                if path.ends_with("/invocation/next") {
                    let event = events.lock().map(|mut events| events.pop_front()).unwrap_or_default();
                    let Some(event) = event else {
                        let _ = sender.send(Mark::Idle);
                        return std::future::pending().await;
                    };
                    let _ = sender.send(Mark::Next(arrived));
                    let mut response = respond(200, "application/json", event);
                    let headers = response.headers_mut();
                    headers.insert("lambda-runtime-aws-request-id", header(&uuid::Uuid::new_v4().to_string()));
                    let deadline = chrono::Utc::now().timestamp_millis() + 60_000;
                    headers.insert("lambda-runtime-deadline-ms", header(&deadline.to_string()));
                    headers.insert(
                        "lambda-runtime-invoked-function-arn",
                        header("arn:aws:lambda:us-east-1:123456789012:function:bench"),
                    );
                    headers.insert("lambda-runtime-trace-id", header("Root=1-00000000-000000000000000000000000"));
                    return response;
                }
                let body = request.into_body().collect().await.map(|body| body.to_bytes().to_vec()).unwrap_or_default();
                let mark = if path.ends_with("/response") {
                    Mark::Answered(Instant::now(), body)
                } else {
                    Mark::Failed(format!("{path}: {}", String::from_utf8_lossy(&body)))
                };
                let _ = sender.send(mark);
                respond(202, "application/json", r#"{"status":"OK"}"#)
            })
        });
        Self { server: LocalServer::start(handler).await, marks }
    }

    /// The value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.server.address.to_string()
    }
}

fn header(value: &str) -> http::HeaderValue {
    http::HeaderValue::from_str(value).unwrap_or(http::HeaderValue::from_static("invalid"))
}

/// A TCP proxy in front of the local AWS endpoint that records when each exchange was under
/// way (from the request's first byte to the answer's last), so a figure can be split into the
/// time spent waiting on AWS and the function's own.
pub struct AwsProxy {
    pub address: std::net::SocketAddr,
    exchanges: Arc<Mutex<Vec<(Instant, Instant)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl AwsProxy {
    /// Proxies to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a local port");
        let address = listener.local_addr().expect("local address");
        let exchanges = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&exchanges);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, recorded) = (upstream.clone(), Arc::clone(&recorded));
                tokio::spawn(async move {
                    if let Some(exchange) = relay(client, &upstream).await
                        && let Ok(mut exchanges) = recorded.lock()
                    {
                        exchanges.push(exchange);
                    }
                });
            }
        });
        Self { address, exchanges, task }
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

/// Copies one connection both ways; each connection carries one exchange at a time, and moto
/// closes it after each answer. Returns when the exchange started and ended.
async fn relay(client: tokio::net::TcpStream, upstream: &str) -> Option<(Instant, Instant)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = tokio::net::TcpStream::connect(upstream).await.ok()?;
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let started = Arc::new(Mutex::new(None::<Instant>));
    let first_byte = Arc::clone(&started);
    let requests = tokio::spawn(async move {
        let mut buffer = vec![0u8; 16 * 1024];
        while let Ok(read) = client_read.read(&mut buffer).await {
            if read == 0 {
                break;
            }
            if let Ok(mut started) = first_byte.lock() {
                started.get_or_insert_with(Instant::now);
            }
            if server_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        let _ = server_write.shutdown().await;
    });
    let mut buffer = vec![0u8; 16 * 1024];
    let mut ended = None;
    while let Ok(read) = server_read.read(&mut buffer).await {
        if read == 0 || client_write.write_all(&buffer[..read]).await.is_err() {
            break;
        }
        ended = Some(Instant::now());
    }
    let _ = client_write.shutdown().await;
    requests.abort();
    let started = started.lock().ok().and_then(|started| *started)?;
    Some((started, ended?))
}
