//! The one interface every HTTP function implements, and running it on Lambda.

use lambda_http::{Body, Request, Response};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed response future; boxing keeps [`HttpFunction`] usable as a trait object.
pub type ResponseFuture<'a> = Pin<Box<dyn Future<Output = Response<Body>> + Send + 'a>>;

/// An HTTP function: every request gets a response (errors are responses too).
///
/// Lambda, the local dev server and the integration tests all call `handle`, so what is tested
/// is what runs.
pub trait HttpFunction: Send + Sync + 'static {
    /// Handles one request.
    fn handle(&self, request: Request) -> ResponseFuture<'_>;
}

/// Serves `function` on the Lambda runtime until the runtime stops.
pub async fn run_on_lambda(function: impl HttpFunction) -> Result<(), lambda_http::Error> {
    let function = Arc::new(function);
    lambda_http::run(lambda_http::service_fn(move |request: Request| {
        let function = Arc::clone(&function);
        async move { Ok::<_, Infallible>(function.handle(request).await) }
    }))
    .await
}

/// JSON logs at the level `RUST_LOG` names (`error` … `trace`, default `info`), as CloudWatch
/// expects them. A plain level, not an env-filter expression: that would pull `regex` into every
/// function binary.
pub fn init_tracing() {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|level| level.trim().parse::<tracing_subscriber::filter::LevelFilter>().ok())
        .unwrap_or(tracing_subscriber::filter::LevelFilter::INFO);
    // Ignore the error of a second initialisation (tests, the dev server).
    let _ = tracing_subscriber::fmt().json().with_max_level(filter).without_time().with_target(false).try_init();
}
