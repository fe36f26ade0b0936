//! Running a function on Lambda, behind API Gateway: each request through the gateway layer
//! (`crate::gateway`), in the span of its request.

use crate::function::{HttpFunction, request_span};
use crate::gateway::{AtGateway, Cors};
use crate::streaming::StreamingFunction;
use lambda_http::Request;
use std::convert::Infallible;
use std::sync::Arc;
use tracing::Instrument;

/// Serves `function` on the Lambda runtime until the runtime stops. A function's `main` runs it
/// on tokio's current-thread scheduler (`#[tokio::main(flavor = "current_thread")]`): Lambda
/// hands a container one event at a time, and worker threads would only add hand-offs and start
/// time (docs/performance.md, cold start).
pub async fn run_on_lambda(function: impl HttpFunction) -> Result<(), lambda_http::Error> {
    let function = Arc::new(AtGateway::new(function, Cors::from_env()?));
    lambda_http::run(lambda_http::service_fn(move |request: Request| {
        let function = Arc::clone(&function);
        async move {
            let span = request_span(&request);
            Ok::<_, Infallible>(function.handle(request).instrument(span).await)
        }
    }))
    .await
}

/// Serves `function` on the Lambda runtime with response streaming until the runtime stops.
pub async fn run_streaming_on_lambda(function: impl StreamingFunction) -> Result<(), lambda_http::Error> {
    let function = Arc::new(AtGateway::new(function, Cors::from_env()?));
    let runtime_api = crate::runtime_socket::runtime_api_address();
    lambda_http::run_with_streaming_response(lambda_http::service_fn(move |request: Request| {
        let function = Arc::clone(&function);
        // Before the answer is written: see `runtime_socket`.
        if let Some(runtime_api) = runtime_api {
            crate::runtime_socket::set_nodelay_toward(runtime_api);
        }
        async move {
            let span = request_span(&request);
            Ok::<_, Infallible>(function.handle(request).instrument(span).await)
        }
    }))
    .await
}
