//! A local Lambda Runtime API (the part a function's runtime client speaks): it hands out a
//! fixed list of events on `GET …/invocation/next`, takes each answer on `POST …/response` (or
//! `…/error`, `…/init/error`), and reports when each of those arrived. Once the events are spent,
//! `next` never answers: the function sits idle, as in Lambda between invocations.
//!
//! Used by `make bench`'s cold start and by the tests of the functions' Lambda loop.
//!
//! Started with [`RuntimeApi::start_watching`], each mark also says how much CPU the function's
//! process had used when the emulator saw it. Both calls a mark is made on leave the function
//! blocked, waiting for the emulator's answer, so the figure is exact: the CPU of init is that
//! of the first `next`, an invocation's is the difference between its `next` and its answer.

use crate::local_server::{Handler, LocalServer, respond};
use base64::Engine as _;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// When the emulator saw a call of the function's.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub at: Instant,
    /// The CPU time the watched process had used by then (on Linux; `None` when no process is
    /// watched or its `/proc` entry cannot be read).
    pub cpu: Option<Duration>,
    /// The watched process's memory then (`None` as for `cpu`): at the first `next`, what its
    /// init left resident.
    pub memory: Option<Resident>,
}

/// What the function did, and when the emulator saw it.
#[derive(Debug)]
pub enum Mark {
    /// It asked for its next event (the first time: init is over).
    Next(Stamp),
    /// It answered the current event with this body (buffered, streamed responses included).
    Answered(Stamp, Vec<u8>),
    /// It reported an error (invocation or init) with this body.
    Failed(String),
    /// It asked for an event past the list: it is idle.
    Idle,
}

pub struct RuntimeApi {
    server: LocalServer,
    pub marks: mpsc::UnboundedReceiver<Mark>,
    /// The process whose CPU time each mark reads: `None` until [`RuntimeApi::watch`] names it
    /// (the calls wait), `Some(None)` when none is watched.
    watched: tokio::sync::watch::Sender<Option<Option<u32>>>,
}

impl RuntimeApi {
    /// Serves `events` in order, on a free loopback port.
    pub async fn start(events: Vec<Vec<u8>>) -> Self {
        Self::serve(events, Some(None)).await
    }

    /// Serves `events` like [`RuntimeApi::start`], with the CPU time of the process
    /// [`RuntimeApi::watch`] names in every mark; calls wait until it is named, so a process
    /// started right after cannot reach the emulator before its pid is known.
    pub async fn start_watching(events: Vec<Vec<u8>>) -> Self {
        Self::serve(events, None).await
    }

    async fn serve(events: Vec<Vec<u8>>, watched: Option<Option<u32>>) -> Self {
        let events = Arc::new(Mutex::new(VecDeque::from(events)));
        let (sender, marks) = mpsc::unbounded_channel();
        let (watched, watched_by_handler) = tokio::sync::watch::channel(watched);
        let handler: Handler = Arc::new(move |request| {
            let (events, sender) = (Arc::clone(&events), sender.clone());
            let mut watched = watched_by_handler.clone();
            Box::pin(async move {
                let pid = watched.wait_for(Option::is_some).await.map(|pid| pid.flatten()).unwrap_or(None);
                let stamp =
                    || Stamp { at: Instant::now(), cpu: pid.and_then(cpu_time), memory: pid.and_then(resident) };
                let arrived = stamp();
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
                    Mark::Answered(stamp(), body)
                } else {
                    Mark::Failed(format!("{path}: {}", String::from_utf8_lossy(&body)))
                };
                let _ = sender.send(mark);
                respond(202, "application/json", r#"{"status":"OK"}"#)
            })
        });
        Self { server: LocalServer::start(handler).await, marks, watched }
    }

    /// Each mark reads the CPU time of process `pid` (see [`RuntimeApi::start_watching`]).
    pub fn watch(&self, pid: u32) {
        self.watched.send_replace(Some(Some(pid)));
    }

    /// The value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.server.address.to_string()
    }
}

/// The CPU time process `pid` has used, all its threads together (the first field of each
/// thread's `schedstat`: nanoseconds on a CPU). A thread that has ended is not counted; the
/// functions' only extra threads are tokio's blocking pool, whose threads live 10 s idle.
fn cpu_time(pid: u32) -> Option<Duration> {
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let nanos = threads
        .filter_map(|thread| std::fs::read_to_string(thread.ok()?.path().join("schedstat")).ok())
        .filter_map(|schedstat| schedstat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Some(Duration::from_nanos(nanos))
}

/// A process's resident memory, in KiB, from `/proc/{pid}/smaps_rollup`.
#[derive(Debug, Clone, Copy)]
pub struct Resident {
    /// All of it (`Rss`), the binary's and the shared libraries' pages included: clean pages of
    /// the page cache, mapped around each page the process touched (the kernel's fault-around),
    /// so it grows with the binary's size.
    pub total_kb: u64,
    /// What the process wrote (`Private_Dirty`): its heap, stacks and relocated data, the
    /// memory no other process shares and the kernel cannot drop.
    pub private_kb: u64,
}

fn resident(pid: u32) -> Option<Resident> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| {
        rollup.lines().find_map(|line| line.strip_prefix(name)?.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some(Resident { total_kb: field("Rss:")?, private_kb: field("Private_Dirty:")? })
}

fn header(value: &str) -> http::HeaderValue {
    http::HeaderValue::from_str(value).unwrap_or(http::HeaderValue::from_static("invalid"))
}

/// A REST API proxy event (payload 1.0) for `method path` on the `Prod` stage, as Lambda hands
/// it to an HTTP function; `body` is sent base64-encoded (as for a binary media type).
pub fn gateway_event(method: &str, path: &str, headers: &Value, body: Option<&str>) -> Vec<u8> {
    let mut headers = headers.clone();
    headers["host"] = json!("local.execute-api.us-east-1.amazonaws.com");
    headers["x-forwarded-proto"] = json!("https");
    let multi_value: serde_json::Map<String, Value> =
        headers.as_object().into_iter().flatten().map(|(name, value)| (name.clone(), json!([value]))).collect();
    json!({
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": multi_value,
        "queryStringParameters": null,
        "multiValueQueryStringParameters": null,
        "pathParameters": null,
        "stageVariables": null,
        "requestContext": {
            "accountId": "123456789012", "apiId": "local", "resourceId": "local", "resourcePath": path,
            "domainName": "local.execute-api.us-east-1.amazonaws.com", "domainPrefix": "local",
            "httpMethod": method, "path": format!("/Prod{path}"), "protocol": "HTTP/1.1",
            "identity": {"sourceIp": "192.0.2.1", "userAgent": "local"},
            "requestId": uuid::Uuid::new_v4(), "stage": "Prod",
            "requestTime": "23/Nov/2026:05:00:00 +0000", "requestTimeEpoch": 1_795_410_000_000_i64
        },
        "body": body.map(|body| base64::engine::general_purpose::STANDARD.encode(body)),
        "isBase64Encoded": body.is_some()
    })
    .to_string()
    .into_bytes()
}
