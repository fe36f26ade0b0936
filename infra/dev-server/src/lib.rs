//! The local stand-in for API Gateway: every HTTP function of `template.yaml`, routed by the
//! template's own `HttpApi` events, each built with the environment the template gives it.

pub mod demo_model;
pub mod functions;
pub mod gateway;
pub mod lambda;
pub mod triggers;

use functions::{Function, build_function};
use http::StatusCode;
use http_api::{Body, HttpFunction, Request, Response, StreamBody, StreamingFunction, json};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use stack::{FunctionSpec, Route, Template};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Builds a template function with its resolved environment, as its `main.rs` builds it, on
/// clients of its own (each function in AWS is its own process).
fn build(
    function: &FunctionSpec,
    sdk: &aws_env::SdkConfig,
    env: &BTreeMap<String, String>,
) -> Result<Function, String> {
    let lookup = |name: &str| env.get(name).cloned();
    build_function(&function.binary, &aws_env::Clients::new(sdk.clone()), &lookup)
        .map_err(|err| format!("{}: {err}", function.logical_id))
}

/// The handler of a template function with HTTP routes. Every such function must be an HTTP
/// function (`functions::build_function`); `Router::from_template` fails loudly otherwise.
fn build_http(
    function: &FunctionSpec,
    sdk: &aws_env::SdkConfig,
    env: &BTreeMap<String, String>,
) -> Result<Arc<dyn HttpFunction>, String> {
    match build(function, sdk, env)? {
        Function::Http(handler) => Ok(handler),
        _ => Err(format!(
            "{} (binary {}) has HTTP routes but is not an HTTP function",
            function.logical_id, function.binary
        )),
    }
}

/// The handler of a template function whose routes stream (`Metadata.StreamingRoutes`).
fn build_streaming(
    function: &FunctionSpec,
    sdk: &aws_env::SdkConfig,
    env: &BTreeMap<String, String>,
) -> Result<Arc<dyn StreamingFunction>, String> {
    match build(function, sdk, env)? {
        Function::Streaming(handler) => Ok(handler),
        _ => Err(format!(
            "{} (binary {}) has streaming routes but is not a streaming function",
            function.logical_id, function.binary
        )),
    }
}

/// The dev server's trivial handler (not a template route; absent in AWS).
pub const PING_PATH: &str = "/_dev/ping";

/// Routes requests to functions as API Gateway (and, for streamed routes, function URLs) would.
#[derive(Clone)]
pub struct Router {
    routes: Arc<Vec<(Route, Arc<dyn HttpFunction>)>>,
    /// Checked first: in AWS they are served by their own URL, so nothing else shadows them.
    streaming_routes: Arc<Vec<(Route, Arc<dyn StreamingFunction>)>>,
    /// A service's function URL: every request goes to this one function, which routes itself.
    whole_service: Option<Arc<dyn StreamingFunction>>,
}

impl Router {
    /// Every routed function of the template that is not a separate service (see
    /// `for_service`), on the local stack named by `prefix`.
    pub fn from_template(template: &Template, sdk: &aws_env::SdkConfig, prefix: &str) -> Result<Self, String> {
        let mut routes = Vec::new();
        let shared = |function: &&FunctionSpec| function.service.is_none();
        for function in template.functions.iter().filter(shared).filter(|f| !f.routes.is_empty()) {
            let handler = build_http(function, sdk, &template.environment(function, prefix))?;
            routes.extend(function.routes.iter().map(|route| (route.clone(), Arc::clone(&handler))));
        }
        let mut streaming_routes = Vec::new();
        for function in template.functions.iter().filter(shared).filter(|f| !f.streaming_routes.is_empty()) {
            let handler = build_streaming(function, sdk, &template.environment(function, prefix))?;
            streaming_routes
                .extend(function.streaming_routes.iter().map(|route| (route.clone(), Arc::clone(&handler))));
        }
        Ok(Self { routes: Arc::new(routes), streaming_routes: Arc::new(streaming_routes), whole_service: None })
    }

    /// The function serving the separate API `service` (`Metadata.Service`), as its function URL
    /// would: every request goes to it.
    pub fn for_service(
        template: &Template,
        sdk: &aws_env::SdkConfig,
        prefix: &str,
        service: &str,
    ) -> Result<Self, String> {
        let function = service_function(template, service)?;
        let handler = build_streaming(function, sdk, &template.environment(function, prefix))?;
        Ok(Self { routes: Arc::default(), streaming_routes: Arc::default(), whole_service: Some(handler) })
    }

    /// Lambda mode: every routed function of the template that is not a separate service, each
    /// invoked as its own binary through `invoker` with the event its route's integration sends.
    pub fn invoking(template: &Template, invoker: &Arc<lambda::Invoker>) -> Self {
        let shared = |function: &&FunctionSpec| function.service.is_none();
        let mut routes: Vec<(Route, Arc<dyn HttpFunction>)> = Vec::new();
        let mut streaming_routes: Vec<(Route, Arc<dyn StreamingFunction>)> = Vec::new();
        for function in template.functions.iter().filter(shared) {
            for route in &function.routes {
                let integration = gateway::Integration::HttpApi(route.clone());
                let target = lambda::InvokedFunction::new(Arc::clone(invoker), &function.binary, integration);
                routes.push((route.clone(), Arc::new(target)));
            }
            for route in &function.streaming_routes {
                let integration = gateway::Integration::FunctionUrl;
                let target = lambda::InvokedFunction::new(Arc::clone(invoker), &function.binary, integration);
                streaming_routes.push((route.clone(), Arc::new(target)));
            }
        }
        Self { routes: Arc::new(routes), streaming_routes: Arc::new(streaming_routes), whole_service: None }
    }

    /// Lambda mode: the separate API `service`, every request sent to its function's binary as
    /// its function URL sends it.
    pub fn invoking_service(
        template: &Template,
        invoker: &Arc<lambda::Invoker>,
        service: &str,
    ) -> Result<Self, String> {
        let function = service_function(template, service)?;
        let target =
            lambda::InvokedFunction::new(Arc::clone(invoker), &function.binary, gateway::Integration::FunctionUrl);
        Ok(Self { routes: Arc::default(), streaming_routes: Arc::default(), whole_service: Some(Arc::new(target)) })
    }

    /// The streaming function serving `method` `path`, if one does.
    fn streaming(&self, method: &str, path: &str) -> Option<&Arc<dyn StreamingFunction>> {
        self.streaming_routes.iter().find(|(route, _)| route.matches(method, path)).map(|(_, function)| function)
    }

    /// The response to `request`, streamed when its route streams.
    pub async fn dispatch_streaming(&self, request: Request) -> Response<StreamBody> {
        let path = request.uri().path().to_owned();
        let method = request.method().as_str().to_owned();
        if let Some(function) = &self.whole_service {
            return function.handle(request).await;
        }
        match self.streaming(&method, &path) {
            Some(function) => function.handle(request).await,
            None => http_api::streaming::whole(self.dispatch(request).await),
        }
    }

    /// The response of the function whose route matches, or API Gateway's own 404.
    /// `GET /_dev/ping` is the dev server's own trivial handler: `make load` measures it beside
    /// the functions, so the stack's share of their latency is visible.
    pub async fn dispatch(&self, request: Request) -> Response<Body> {
        let path = request.uri().path().to_owned();
        let method = request.method().as_str().to_owned();
        if (method.as_str(), path.as_str()) == ("GET", PING_PATH) {
            return json(StatusCode::OK, &serde_json::json!({ "ok": true }));
        }
        let matching = self.routes.iter().filter(|(route, _)| route.matches(&method, &path));
        match matching.max_by_key(|(route, _)| route.specificity()) {
            Some((_, function)) => function.handle(request).await,
            None => json(StatusCode::NOT_FOUND, &serde_json::json!({ "message": "Not Found" })),
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
        let retry = deliverer.handle_batch(&messages).await;
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
        match scheduler.tick(chrono::Utc::now()).await {
            Ok(report) if report.fired + report.skipped > 0 => {
                tracing::info!(fired = report.fired, skipped = report.skipped, "scheduler tick");
            }
            Ok(_) => {}
            Err(err) => tracing::error!(error = %err, "scheduler tick failed"),
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
            _ = ticks.tick() => {
                if let Err(err) = sweeper.sweep().await {
                    tracing::error!(error = %err, "webhook sweep failed");
                }
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

/// The function of `template` that serves the separate API `service` (`Metadata.Service`).
fn service_function<'a>(template: &'a Template, service: &str) -> Result<&'a FunctionSpec, String> {
    template
        .functions
        .iter()
        .find(|function| function.service.as_deref() == Some(service))
        .ok_or_else(|| format!("no function of template.yaml serves the {service} service"))
}
