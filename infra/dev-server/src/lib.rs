//! The local stand-in for API Gateway: each REST API of `template.yaml` on a port of its own,
//! routed by the functions' own `Api` events, each function built with the environment the
//! template gives it and handed the proxy events a REST API sends.

pub mod demo_model;
pub mod functions;
pub mod gateway;
pub mod lambda;
pub mod logs;
pub mod startup;
pub mod triggers;

use aws_env::isolation::caught;
use functions::{Function, build_function};
use gateway::{ClientPath, Integration};
use http::StatusCode;
use http_api::{Body, HttpFunction, Request, Response, StreamBody, StreamingFunction, json};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use stack::{ApiSpec, FunctionSpec, Route, Template};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The logical ids of the template's two REST APIs: the meeting data API and the backend
/// (`ApiUrl`, the dev server's `DEV_PORT`), and the runner (`RunnerUrl`, `RUNNER_PORT`).
pub const BACKEND_API: &str = "Api";
pub const RUNNER_API: &str = "RunnerApi";

/// The dev server's trivial handler (not a template route; absent in AWS).
pub const PING_PATH: &str = "/_dev/ping";

/// What serves one route: a function answering whole, or one whose answer API Gateway streams
/// (`ResponseTransferMode: RESPONSE_STREAM`).
#[derive(Clone)]
enum Target {
    Whole(Arc<dyn HttpFunction>),
    Streamed(Arc<dyn StreamingFunction>),
}

/// What serves a request: a route's target, or the API itself (the REST API's 403 for a path
/// or method no resource declares; the dev server's `GET /_dev/ping`, which `make load`
/// measures beside the functions so the stack's share of their latency is visible).
enum Resolved<'a> {
    Target(Request, &'a Target),
    Answer(Response<Body>),
}

/// Routes requests to functions as one REST API would: the most specific resource (literal
/// segments before variables), a trailing slash ignored, and the request handed over as the
/// proxy event of that route. Paths under the stage (`/Prod/...`, the `execute-api` URL) and
/// without it (a custom domain mapped at its root) both reach the API.
#[derive(Clone)]
pub struct Router {
    stage: String,
    /// `MinimumCompressionSize` of the API, resolved (`None`: nothing is compressed).
    compress_from: Option<usize>,
    routes: Arc<Vec<(Route, Target)>>,
}

/// A function served in this process, handed the event its route's integration sends (so it
/// reads exactly the request Lambda would give it).
struct InProcess<F: ?Sized> {
    function: Arc<F>,
    integration: Integration,
}

impl<F: ?Sized> InProcess<F> {
    fn lambda_request(&self, request: &Request) -> Option<Request> {
        let event = gateway::request_event(&self.integration, request);
        match lambda_http::request::from_str(&event.to_string()) {
            Ok(request) => Some(request),
            Err(err) => {
                tracing::error!(error = %err, "the proxy event does not read back as a request");
                None
            }
        }
    }
}

impl HttpFunction for InProcess<dyn HttpFunction> {
    fn handle(&self, request: Request) -> http_api::ResponseFuture<'_> {
        Box::pin(async move {
            match self.lambda_request(&request) {
                Some(request) => self.function.handle(request).await,
                None => gateway::internal_server_error(),
            }
        })
    }
}

impl StreamingFunction for InProcess<dyn StreamingFunction> {
    fn handle(&self, request: Request) -> http_api::StreamingFuture<'_> {
        Box::pin(async move {
            match self.lambda_request(&request) {
                Some(request) => self.function.handle(request).await,
                None => http_api::streaming::whole(gateway::internal_server_error()),
            }
        })
    }
}

impl Router {
    /// The REST API `api` of `template`, its functions built in this process on the local
    /// stack named by `prefix`.
    pub fn from_template(
        template: &Template,
        sdk: &aws_env::SdkConfig,
        prefix: &str,
        api: &str,
    ) -> Result<Self, String> {
        let spec = api_spec(template, api)?;
        let mut built: BTreeMap<&str, Function> = BTreeMap::new();
        let mut routes = Vec::new();
        for (function, route) in template.routes_of(api) {
            if !built.contains_key(function.logical_id.as_str()) {
                built.insert(&function.logical_id, build(function, sdk, &template.environment(function, prefix))?);
            }
            let integration = Integration::new(spec, route);
            let target = match (&built[function.logical_id.as_str()], route.streamed) {
                (Function::Http(function), false) => {
                    Target::Whole(Arc::new(InProcess { function: Arc::clone(function), integration }))
                }
                (Function::Streaming(function), true) => {
                    Target::Streamed(Arc::new(InProcess { function: Arc::clone(function), integration }))
                }
                _ => {
                    return Err(format!(
                        "{} (binary {}): {} {} is {}streamed, the function {}",
                        function.logical_id,
                        function.binary,
                        route.method,
                        route.path,
                        if route.streamed { "" } else { "not " },
                        if route.streamed { "does not stream" } else { "is not an HTTP function answering whole" },
                    ));
                }
            };
            routes.push((route.clone(), target));
        }
        Ok(Self {
            stage: spec.stage_name.clone(),
            compress_from: template.compression_from(spec),
            routes: Arc::new(routes),
        })
    }

    /// Lambda mode: the REST API `api` of `template`, each function invoked as its own binary
    /// through `invoker` with the event its route's integration sends.
    pub fn invoking(template: &Template, invoker: &Arc<lambda::Invoker>, api: &str) -> Result<Self, String> {
        let spec = api_spec(template, api)?;
        let routes = template
            .routes_of(api)
            .map(|(function, route)| {
                let integration = Integration::new(spec, route);
                let target = Arc::new(lambda::InvokedFunction::new(Arc::clone(invoker), &function.binary, integration));
                let target = if route.streamed { Target::Streamed(target) } else { Target::Whole(target) };
                (route.clone(), target)
            })
            .collect();
        Ok(Self {
            stage: spec.stage_name.clone(),
            compress_from: template.compression_from(spec),
            routes: Arc::new(routes),
        })
    }

    /// The route serving `method` `path` (a resource path) and its target.
    fn route(&self, method: &str, path: &str) -> Option<&(Route, Target)> {
        let matching = self.routes.iter().filter(|(route, _)| route.matches(method, path));
        matching.max_by_key(|(route, _)| route.specificity())
    }

    /// `request` with its URI's path made the resource path: a path under the stage
    /// (`/Prod/...`) is the stage URL's, kept as the client's path for the event.
    fn under_stage(&self, mut request: Request) -> Request {
        let path = request.uri().path().to_owned();
        let stage = format!("/{}", self.stage);
        let Some(rest) = path.strip_prefix(&stage).filter(|rest| rest.is_empty() || rest.starts_with('/')) else {
            return request;
        };
        let resource_path = if rest.is_empty() { "/" } else { rest };
        let query = request.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
        let mut parts = request.uri().clone().into_parts();
        if let Ok(path_and_query) = format!("{resource_path}{query}").parse() {
            parts.path_and_query = Some(path_and_query);
            if let Ok(uri) = http::Uri::from_parts(parts) {
                *request.uri_mut() = uri;
                request.extensions_mut().insert(ClientPath(path));
            }
        }
        request
    }

    /// `request` made a resource request, and what serves it.
    fn resolve(&self, request: Request) -> Resolved<'_> {
        let request = self.under_stage(request);
        let path = request.uri().path().to_owned();
        let method = request.method().as_str().to_owned();
        if (method.as_str(), path.as_str()) == ("GET", PING_PATH) {
            return Resolved::Answer(json(StatusCode::OK, &serde_json::json!({ "ok": true })));
        }
        match self.route(&method, &path) {
            Some((_, target)) => Resolved::Target(request, target),
            None => Resolved::Answer(gateway::no_route()),
        }
    }

    /// The response to `request`, streamed when its route streams; a whole one compressed as
    /// the API's `MinimumCompressionSize` says.
    pub async fn dispatch_streaming(&self, request: Request) -> Response<StreamBody> {
        let accept_encoding = request.headers().get(http::header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok());
        let accepts_gzip = gateway::accepts_gzip(accept_encoding);
        let whole =
            |response| http_api::streaming::whole(gateway::compressed(response, accepts_gzip, self.compress_from));
        match self.resolve(request) {
            Resolved::Target(request, Target::Whole(function)) => whole(function.handle(request).await),
            Resolved::Target(request, Target::Streamed(function)) => function.handle(request).await,
            Resolved::Answer(answer) => whole(answer),
        }
    }

    /// The whole response to `request` (a streamed one read to its end).
    pub async fn dispatch(&self, request: Request) -> Response<Body> {
        match self.resolve(request) {
            Resolved::Target(request, Target::Whole(function)) => function.handle(request).await,
            Resolved::Target(request, Target::Streamed(function)) => {
                let (parts, body) = function.handle(request).await.into_parts();
                let bytes = match body.collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(never) => match never {},
                };
                let body = match String::from_utf8(bytes.to_vec()) {
                    Ok(text) => Body::Text(text),
                    Err(err) => Body::Binary(err.into_bytes()),
                };
                Response::from_parts(parts, body)
            }
            Resolved::Answer(answer) => answer,
        }
    }

    /// Serves one hyper request: the request body is read whole, as API Gateway does; a
    /// streamed route's response goes out as it is produced.
    pub async fn serve(&self, request: hyper::Request<Incoming>) -> hyper::Response<StreamBody> {
        let (parts, body) = request.into_parts();
        let bytes = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => return http_api::streaming::whole(plain(StatusCode::BAD_REQUEST, "unreadable request body")),
        };
        let host = parts.headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
        let path_and_query = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        // Like API Gateway, hand the function an absolute URI.
        let Ok(uri) = format!("http://{host}{path_and_query}").parse::<http::Uri>() else {
            return http_api::streaming::whole(plain(StatusCode::BAD_REQUEST, "invalid Host header"));
        };
        let mut request = http::Request::new(if bytes.is_empty() { Body::Empty } else { Body::Binary(bytes.to_vec()) });
        *request.method_mut() = parts.method;
        *request.uri_mut() = uri;
        *request.headers_mut() = parts.headers;
        let span = http_api::request_span(&request);
        tracing::Instrument::instrument(self.dispatch_streaming(request), span).await
    }
}

/// Builds a template function with its resolved environment, as its `main.rs` builds it, on
/// clients of its own (each function in AWS is its own process).
fn build(
    function: &FunctionSpec,
    sdk: &aws_env::SdkConfig,
    env: &BTreeMap<String, String>,
) -> Result<Function, String> {
    let mut env = env.clone();
    env.extend(lambda::telemetry_environment());
    let lookup = |name: &str| env.get(name).cloned();
    build_function(&function.binary, &aws_env::Clients::new(sdk.clone()), &lookup)
        .map_err(|err| format!("{}: {err}", function.logical_id))
}

/// The REST API `api` of `template`.
fn api_spec<'a>(template: &'a Template, api: &str) -> Result<&'a ApiSpec, String> {
    template.api(api).ok_or_else(|| format!("template.yaml has no REST API {api}"))
}

fn plain(status: StatusCode, message: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::Text(message.to_owned()));
    *response.status_mut() = status;
    response
}

/// Accepts HTTP/1.1 connections on `listener` until `shutdown` resolves.
pub async fn serve(listener: tokio::net::TcpListener, router: Router, shutdown: impl std::future::Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let router = router.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let router = router.clone();
                        async move { Ok::<_, std::convert::Infallible>(router.serve(request).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    if let Err(err) = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await {
                        tracing::debug!(error = %err, "connection closed with an error");
                    }
                });
            }
        }
    }
}

/// The webhook delivery worker, as Lambda's SQS event source would run it: receive up to 10
/// messages, deliver them concurrently, delete the handled ones (retries stay on the queue,
/// invisible until their time). Runs until `shutdown`.
pub async fn run_delivery_worker(
    deliverer: webhooks::delivery::Deliverer,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let queue = std::sync::Arc::clone(&deliverer.publisher.queue);
    loop {
        let received = tokio::select! {
            _ = &mut shutdown => return,
            received = queue.receive(std::time::Duration::from_secs(1)) => received,
        };
        let messages = match received {
            Ok(messages) => messages,
            Err(err) => {
                tracing::error!(error = %err, "webhook queue not readable");
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                continue;
            }
        };
        // A batch that panics is left on the queue (retried at its visibility timeout), as a
        // failed invocation's batch is; the worker goes on.
        let retry = match caught(deliverer.handle_batch(&messages)).await {
            Ok(retry) => retry,
            Err(panic) => {
                tracing::error!(error = %panic, "webhook delivery batch failed");
                continue;
            }
        };
        for message in messages.iter().filter(|message| !retry.contains(&message.message_id)) {
            if let Err(err) = queue.delete(&message.receipt_handle).await {
                tracing::error!(error = %err, "handled webhook message not deleted");
            }
        }
    }
}

/// The runner worker, as Lambda's SQS event source would run it: receives queued runs and
/// executes them (each as an invocation of the worker's 15 minutes), until `shutdown`.
pub async fn run_runner_worker(
    worker: agent_runtime::queue::RunWorker,
    queue: agent_runtime::queue::RunQueue,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let received = tokio::select! {
            _ = &mut shutdown => return,
            received = queue.sqs().receive(std::time::Duration::from_secs(1)) => received,
        };
        let messages = match received {
            Ok(messages) => messages,
            Err(err) => {
                tracing::error!(error = %err, "runner queue not readable");
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                continue;
            }
        };
        for message in messages {
            let (worker, queue) = (worker.clone(), queue.clone());
            // Runs execute concurrently, each in an invocation of its own.
            tokio::spawn(async move {
                let invocation = agent_runtime::lifecycle::Invocation {
                    owner: format!("dev-{}", message.message_id),
                    deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(900),
                    step_budget: agent_runtime::lifecycle::Invocation::WORKER_STEP_BUDGET,
                };
                let retry = worker.handle_batch(std::slice::from_ref(&message), &invocation).await;
                if retry.is_empty()
                    && let Err(err) = queue.sqs().delete(&message.receipt_handle).await
                {
                    tracing::error!(error = %err, "handled runner message not deleted");
                }
            });
        }
    }
}

/// The scheduler, as its EventBridge rule would run it: a tick at the start of every minute
/// until `shutdown`.
pub async fn run_scheduler(
    scheduler: agent_runtime::scheduler::Scheduler,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let now = chrono::Utc::now();
        let into_minute = std::time::Duration::from_millis(u64::try_from(now.timestamp_millis() % 60_000).unwrap_or(0));
        let wait = std::time::Duration::from_secs(60).saturating_sub(into_minute);
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(wait) => {}
        }
        // A failing tick, even one that panics, is logged; the next minute ticks again (as
        // EventBridge invokes the function again).
        match caught(scheduler.tick(chrono::Utc::now())).await {
            Ok(Ok(report)) if report.fired + report.skipped + report.failed > 0 => {
                tracing::info!(
                    fired = report.fired,
                    skipped = report.skipped,
                    failed = report.failed,
                    "scheduler tick"
                );
            }
            Ok(Ok(_)) => {}
            Ok(Err(err)) => tracing::error!(error = %err, "scheduler tick failed"),
            Err(panic) => tracing::error!(error = %panic, "scheduler tick failed"),
        }
    }
}

/// How often `make dev` sweeps for lost webhook deliveries (the template's schedule is every 5
/// minutes; locally every minute, so a lost delivery shows up sooner).
pub const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// The webhook sweeper, as its schedule would run it: one sweep every `interval` until
/// `shutdown`.
pub async fn run_sweeper(
    sweeper: webhooks::sweeper::Sweeper,
    interval: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut ticks = tokio::time::interval(interval);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = ticks.tick() => match caught(sweeper.sweep()).await {
                Ok(Ok(_)) => {}
                Ok(Err(err)) => tracing::error!(error = %err, "webhook sweep failed"),
                Err(panic) => tracing::error!(error = %panic, "webhook sweep failed"),
            }
        }
    }
}

/// Stores `key` (trimmed) as the configured flow server's key, in the local stack's
/// `FlowServerSecret` (`make dev`'s `FLOW_SERVER_API_KEY`).
pub async fn store_flow_server_key(
    sdk: &aws_env::SdkConfig,
    template: &Template,
    prefix: &str,
    key: &str,
) -> Result<(), String> {
    let env = template.stack_environment(prefix);
    let lookup = |name: &str| env.get(name).cloned();
    let secret_id = aws_env::settings::required(&lookup, platform_api::settings::FLOW_SERVER_SECRET_ID)
        .map_err(|err| err.to_string())?;
    let client = aws_sdk_secretsmanager::Client::new(sdk);
    platform_data::secrets::write_secret(&client, &secret_id, key.trim(), "The flow server's API key")
        .await
        .map_err(|err| err.to_string())
}
