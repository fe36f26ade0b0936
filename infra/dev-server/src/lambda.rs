//! Lambda mode (`make dev-lambda`): every Rust function of `template.yaml` runs as its own binary
//! under `cargo lambda watch`, one watch process per function so that each gets exactly the
//! environment the template gives it (docs/local-stack.md says why), and the dev server invokes
//! them through cargo-lambda's Invoke API with the proxy events a REST API sends.

use crate::gateway::{self, Integration};
use bytes::Bytes;
use http_api::{Body, HttpFunction, Request, Response, ResponseFuture, StreamingFunction, StreamingFuture};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use stack::Template;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// The response header by which cargo-lambda's Invoke API marks a streamed answer (it has read
/// the binary's prelude and passes the rest of the stream through).
const RESPONSE_MODE: &str = "lambda-runtime-function-response-mode";

/// Why an invocation gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("no function is built from binary {0:?}")]
    Unknown(String),
    #[error("the Invoke API of {binary} is not reachable: {reason}")]
    Unreachable { binary: String, reason: String },
    #[error("{binary} did not start answering within {seconds} s")]
    TimedOut { binary: String, seconds: u64 },
}

/// How long an invocation may take to start its answer. API Gateway gives a buffered REST
/// integration 29 s; locally a watch process may first compile its function (minutes on a fresh
/// tree), so this is longer. A streamed answer starts with its prelude at once and then runs as
/// long as the function does. Past it the request is a 504: a function that never answers fails
/// its request rather than hanging it.
pub const ANSWER_START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Invokes functions by binary name through their Invoke API.
#[derive(Debug, Clone, Default)]
pub struct Invoker {
    /// The Invoke API's address of each function, by binary name.
    endpoints: BTreeMap<String, SocketAddr>,
}

impl Invoker {
    /// An invoker of the functions served at `endpoints` (binary name, Invoke API address).
    pub fn new(endpoints: BTreeMap<String, SocketAddr>) -> Self {
        Self { endpoints }
    }

    /// Invokes `binary` with `event` (`POST /2015-03-31/functions/{binary}/invocations`); the
    /// answer's body is read as it arrives.
    pub async fn invoke(
        &self,
        binary: &str,
        event: &serde_json::Value,
    ) -> Result<hyper::Response<Incoming>, InvokeError> {
        let address = *self.endpoints.get(binary).ok_or_else(|| InvokeError::Unknown(binary.to_owned()))?;
        let unreachable = |reason: String| InvokeError::Unreachable { binary: binary.to_owned(), reason };
        let stream = tokio::net::TcpStream::connect(address).await.map_err(|err| unreachable(err.to_string()))?;
        let _ = stream.set_nodelay(true);
        let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|err| unreachable(err.to_string()))?;
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "invoke connection closed with an error");
            }
        });
        let request = hyper::Request::post(format!("/2015-03-31/functions/{binary}/invocations"))
            .header(http::header::HOST, address.to_string())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(http_body_util::Full::new(Bytes::from(event.to_string())))
            .map_err(|err| unreachable(err.to_string()))?;
        let answer = tokio::time::timeout(ANSWER_START_TIMEOUT, sender.send_request(request)).await.map_err(|_| {
            InvokeError::TimedOut { binary: binary.to_owned(), seconds: ANSWER_START_TIMEOUT.as_secs() }
        })?;
        answer.map_err(|err| unreachable(err.to_string()))
    }

    /// The binaries this invoker reaches.
    pub fn binaries(&self) -> impl Iterator<Item = &str> {
        self.endpoints.keys().map(String::as_str)
    }
}

/// A template function reached through its Invoke API, by one integration (one of its routes,
/// or its URL): what the dev server routes requests to in Lambda mode.
pub struct InvokedFunction {
    invoker: Arc<Invoker>,
    binary: String,
    integration: Integration,
}

impl InvokedFunction {
    pub fn new(invoker: Arc<Invoker>, binary: &str, integration: Integration) -> Self {
        Self { invoker, binary: binary.to_owned(), integration }
    }

    async fn invoke(&self, request: &Request) -> Result<hyper::Response<Incoming>, InvokeError> {
        let event = gateway::request_event(&self.integration, request);
        self.invoker.invoke(&self.binary, &event).await
    }

    /// The buffered answer as API Gateway reads it.
    async fn buffered(&self, answer: hyper::Response<Incoming>) -> Response<Body> {
        let status = answer.status();
        let bytes = match answer.into_body().collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(err) => {
                tracing::error!(binary = %self.binary, error = %err, "the function's answer was cut off");
                return gateway::internal_server_error();
            }
        };
        if !status.is_success() {
            // cargo-lambda answers 500 with the function's error report.
            tracing::error!(binary = %self.binary, error = %String::from_utf8_lossy(&bytes), "the function failed");
            return gateway::internal_server_error();
        }
        gateway::decode_response(&bytes).unwrap_or_else(|err| {
            tracing::error!(binary = %self.binary, error = %err, "unreadable answer");
            gateway::internal_server_error()
        })
    }
}

impl HttpFunction for InvokedFunction {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        Box::pin(async move {
            match self.invoke(&request).await {
                Ok(answer) => self.buffered(answer).await,
                Err(err) => {
                    tracing::error!(error = %err, "invocation failed");
                    failed_invocation(&err)
                }
            }
        })
    }
}

impl StreamingFunction for InvokedFunction {
    fn handle(&self, request: Request) -> StreamingFuture<'_> {
        Box::pin(async move {
            let answer = match self.invoke(&request).await {
                Ok(answer) => answer,
                Err(err) => {
                    tracing::error!(error = %err, "invocation failed");
                    return http_api::streaming::whole(failed_invocation(&err));
                }
            };
            let streamed = answer.headers().get(RESPONSE_MODE).is_some_and(|mode| mode == "streaming");
            if !streamed {
                return http_api::streaming::whole(self.buffered(answer).await);
            }
            // The status, headers and cookies are the binary's prelude, read by cargo-lambda as a
            // streaming integration reads it; the framing of the invoke connection is not the client's.
            let (mut parts, body) = answer.into_parts();
            for hop in [RESPONSE_MODE, "transfer-encoding", "date", "x-amzn-remapped-content-length"] {
                parts.headers.remove(hop);
            }
            Response::from_parts(parts, EndOnError(body).boxed_unsync())
        })
    }
}

/// A streamed answer's body that ends where the connection fails (the client sees a truncated
/// stream, as from a streamed route whose function died).
struct EndOnError(Incoming);

impl http_body::Body for EndOnError {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match std::pin::Pin::new(&mut self.0).poll_frame(cx) {
            std::task::Poll::Ready(Some(Err(err))) => {
                tracing::error!(error = %err, "a streamed answer was cut off");
                std::task::Poll::Ready(None)
            }
            std::task::Poll::Ready(Some(Ok(frame))) => std::task::Poll::Ready(Some(Ok(frame))),
            std::task::Poll::Ready(None) => std::task::Poll::Ready(None),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

/// How to start the functions.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// The `cargo-lambda` executable (`.venv/bin/cargo-lambda`).
    pub cargo_lambda: PathBuf,
    /// The workspace whose binaries `cargo lambda watch` knows.
    pub workspace: PathBuf,
    /// Where the function binaries are built (`target/debug`).
    pub binaries: PathBuf,
    /// Where the logs go: the watch process's and each instance's.
    pub state_dir: PathBuf,
    /// What every function gets beside its template environment: the local endpoints and dummy
    /// credentials.
    pub local_env: BTreeMap<String, String>,
    /// The instances of each function, each taking one invocation at a time.
    pub instances: usize,
}

/// The variables the watch process keeps from the dev server's environment: what finds cargo
/// (it reads the workspace's binaries with `cargo metadata`), nothing a function reads.
const TOOLCHAIN_VARIABLES: &[&str] =
    &["PATH", "HOME", "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN", "CARGO_TARGET_DIR", "TMPDIR"];

/// The variables a function instance keeps from the dev server's environment: what the local
/// tool sandbox's `python3` subprocess needs to be found.
const INSTANCE_VARIABLES: &[&str] = &["PATH", "HOME", "TMPDIR"];

/// The local endpoints and dummy credentials from this process's environment: the variables
/// `with-local-aws` sets, which every function gets locally.
pub fn local_aws_environment() -> BTreeMap<String, String> {
    let mut names: Vec<&str> = vec!["AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"];
    names.extend(aws_env::SERVICE_ENDPOINT_VARIABLES.iter().copied());
    let mut env: BTreeMap<String, String> =
        names.into_iter().filter_map(|name| Some((name.to_owned(), std::env::var(name).ok()?))).collect();
    env.entry("AWS_REGION".to_owned()).or_insert_with(|| "us-east-1".to_owned());
    env.entry("AWS_ACCESS_KEY_ID".to_owned()).or_insert_with(|| "testing".to_owned());
    env.entry("AWS_SECRET_ACCESS_KEY".to_owned()).or_insert_with(|| "testing".to_owned());
    env
}

/// The trace settings of this process's environment (`OTEL_*`, `OTLP_SIGV4_SERVICE`), which every
/// function gets locally as a deployed function gets the stack's: `make dev` sets
/// `OTEL_TRACES_EXPORTER=console` unless an OTLP endpoint is given (docs/tracing.md).
pub fn telemetry_environment() -> BTreeMap<String, String> {
    std::env::vars().filter(|(name, _)| name.starts_with("OTEL_") || name == "OTLP_SIGV4_SERVICE").collect()
}

/// The functions of a template as Lambda runs them: one `cargo lambda watch --only-lambda-apis`
/// serving the Runtime API and the Invoke API, and instances of each prebuilt binary polling it
/// for their function's invocations. Dropping it stops them all.
pub struct WatchedFunctions {
    /// The watch process, leader of its own process group.
    watch: tokio::process::Child,
    /// One task per instance, restarting it when it exits (aborting one kills its process).
    instances: Vec<tokio::task::JoinHandle<()>>,
    pub invoker: Arc<Invoker>,
}

impl WatchedFunctions {
    /// Starts `cargo lambda watch` on a free loopback port and `options.instances` instances of
    /// each Rust function of `template` (those of `only`, when given), each with its template
    /// environment for the stack `prefix`, and waits until the Invoke API accepts invocations.
    ///
    /// The instances are the binaries already built in `options.binaries`, not `cargo run`:
    /// a build made by `cargo test --workspace` resolves features across the workspace, so
    /// `cargo run --bin NAME` would compile each function again (minutes on a fresh tree).
    pub async fn start(
        template: &Template,
        prefix: &str,
        options: &WatchOptions,
        only: Option<&[&str]>,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(&options.state_dir).map_err(|err| format!("{}: {err}", options.state_dir.display()))?;
        let chosen = |binary: &str| only.is_none_or(|only| only.contains(&binary));
        let functions: Vec<_> = template.functions.iter().filter(|function| chosen(&function.binary)).collect();
        for function in &functions {
            let path = options.binaries.join(&function.binary);
            if !path.is_file() {
                return Err(format!("{} is not built (cargo build --bin {})", path.display(), function.binary));
            }
        }
        let port = free_port()?;
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let watch = spawn_watch(options, port)?;
        let mut watched = Self { watch, instances: Vec::new(), invoker: Arc::default() };
        wait_until_listening(address).await?;
        for function in &functions {
            let mut env = template.environment(function, prefix);
            env.extend(options.local_env.clone());
            env.extend(runtime_environment(&function.binary, address));
            for instance in 0..options.instances.max(1) {
                let command = InstanceCommand {
                    program: options.binaries.join(&function.binary),
                    env: env.clone(),
                    log: options.state_dir.join(format!("{}-{instance}.log", function.binary)),
                };
                std::fs::File::create(&command.log).map_err(|err| format!("{}: {err}", command.log.display()))?;
                watched.instances.push(tokio::spawn(command.run_forever()));
            }
        }
        let endpoints = functions.iter().map(|function| (function.binary.clone(), address)).collect();
        watched.invoker = Arc::new(Invoker::new(endpoints));
        Ok(watched)
    }
}

impl Drop for WatchedFunctions {
    fn drop(&mut self) {
        for instance in &self.instances {
            instance.abort();
        }
        if let Some(group) = self.watch.id() {
            let _ = std::process::Command::new("kill").arg("-TERM").arg("--").arg(format!("-{group}")).status();
        }
        let _ = self.watch.start_kill();
    }
}

/// What Lambda's runtime gives an instance of `binary` beside its configuration, as
/// `cargo lambda watch` sets it for the instances it starts itself: its Runtime API (this
/// function's queue of invocations on the watch process) and its identity.
fn runtime_environment(binary: &str, watch: SocketAddr) -> BTreeMap<String, String> {
    [
        ("AWS_LAMBDA_RUNTIME_API", format!("http://{watch}/.rt/{binary}")),
        ("AWS_LAMBDA_FUNCTION_NAME", binary.to_owned()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "1".to_owned()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "4096".to_owned()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

/// One instance of a function: its binary, its whole environment and its log.
struct InstanceCommand {
    program: PathBuf,
    env: BTreeMap<String, String>,
    log: PathBuf,
}

impl InstanceCommand {
    /// Runs the instance, and a new one whenever it exits, as Lambda replaces an execution
    /// environment whose runtime died (an invocation waiting for it is then taken by the next).
    async fn run_forever(self) {
        loop {
            match self.spawn() {
                Ok(mut child) => match child.wait().await {
                    Ok(status) => {
                        tracing::warn!(program = %self.program.display(), %status, "a function instance exited; starting another")
                    }
                    Err(err) => {
                        tracing::error!(program = %self.program.display(), error = %err, "lost a function instance")
                    }
                },
                Err(err) => tracing::error!(error = %err, "cannot start a function instance"),
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }

    fn spawn(&self) -> Result<tokio::process::Child, String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|err| format!("{}: {err}", self.log.display()))?;
        let log_err = log.try_clone().map_err(|err| format!("{}: {err}", self.log.display()))?;
        tokio::process::Command::new(&self.program)
            .env_clear()
            .envs(INSTANCE_VARIABLES.iter().filter_map(|name| Some((name, std::env::var_os(name)?))))
            .envs(&self.env)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| format!("cannot start {}: {err}", self.program.display()))
    }
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(|err| format!("no free port: {err}"))?;
    listener.local_addr().map(|address| address.port()).map_err(|err| format!("no free port: {err}"))
}

/// `cargo lambda watch` serving only the Runtime and Invoke APIs, for every binary of the
/// workspace; the dev server starts the instances.
fn spawn_watch(options: &WatchOptions, port: u16) -> Result<tokio::process::Child, String> {
    let log_path = options.state_dir.join("cargo-lambda-watch.log");
    let log = std::fs::File::create(&log_path).map_err(|err| format!("{}: {err}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|err| format!("{}: {err}", log_path.display()))?;
    let mut command = tokio::process::Command::new(&options.cargo_lambda);
    command
        .args(["lambda", "watch", "--only-lambda-apis", "--ignore-changes", "--invoke-address", "127.0.0.1"])
        .arg("--invoke-port")
        .arg(port.to_string())
        .arg("--disable-cors")
        .current_dir(&options.workspace)
        .env_clear()
        .envs(TOOLCHAIN_VARIABLES.iter().filter_map(|name| Some((name, std::env::var_os(name)?))))
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0)
        .kill_on_drop(true);
    command.spawn().map_err(|err| format!("cannot start {}: {err}", options.cargo_lambda.display()))
}

/// Waits until the watch process accepts connections (at most a minute).
async fn wait_until_listening(address: SocketAddr) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while tokio::net::TcpStream::connect(address).await.is_err() {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("cargo lambda watch is not listening on {address}"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(())
}

/// API Gateway's answer when the invocation itself failed: 504 when the function did not answer
/// in time, else 500.
fn failed_invocation(err: &InvokeError) -> Response<Body> {
    match err {
        InvokeError::TimedOut { .. } => http_api::json(
            http::StatusCode::GATEWAY_TIMEOUT,
            &serde_json::json!({ "message": "Endpoint request timed out" }),
        ),
        _ => gateway::internal_server_error(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An instance whose process exits is replaced, with the same environment, as Lambda
    /// replaces an execution environment whose runtime died.
    #[tokio::test]
    async fn an_instance_that_exits_is_started_again() {
        let dir = std::env::temp_dir().join(format!("dev-server-instance-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let starts = dir.join("starts");
        let program = dir.join("exits-at-once");
        std::fs::write(&program, "#!/bin/sh\necho \"$GREETING\" >> \"$STARTS\"\nexit 3\n").unwrap();
        std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let env = [("GREETING", "hello"), ("STARTS", starts.to_str().unwrap())]
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        let instance = InstanceCommand { program, env, log: dir.join("log") };
        let running = tokio::spawn(instance.run_forever());

        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        let lines = loop {
            let lines = std::fs::read_to_string(&starts).unwrap_or_default();
            if lines.lines().count() >= 2 || tokio::time::Instant::now() > deadline {
                break lines;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        running.abort();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(lines.lines().take(2).collect::<Vec<_>>(), ["hello", "hello"]);
    }
}
