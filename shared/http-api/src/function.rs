//! The one interface every HTTP function implements, and the span each request runs in.

use lambda_http::{Body, Request, Response};
use std::future::Future;
use std::pin::Pin;

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

/// The span every request is handled in, so each of its log lines carries its `request_id`
/// (Lambda's, when there is one) and its `route` (method and path, never the query string,
/// which may hold filters but no secrets are taken there either). The gate records
/// `account_id`, the meeting API `client_id`, once known.
pub fn request_span(request: &Request) -> tracing::Span {
    use lambda_http::RequestExt;
    let request_id = request.lambda_context_ref().map(|context| context.request_id.clone()).unwrap_or_default();
    tracing::info_span!(
        "request",
        request_id = %request_id,
        route = %format_args!("{} {}", request.method(), request.uri().path()),
        account_id = tracing::field::Empty,
        client_id = tracing::field::Empty,
    )
}

/// Records `value` as `field` of the request's span (`account_id`, `client_id`).
pub fn record_on_request(field: &'static str, value: impl std::fmt::Display) {
    tracing::Span::current().record(field, tracing::field::display(value));
}

/// JSON logs at the level `RUST_LOG` names (`off`, `error` … `trace`; `info` when unset or
/// empty), as CloudWatch expects them. A plain level, not an env-filter expression: that would
/// pull `regex` into every function binary. Any other value is an error naming it, so a
/// mistyped setting stops the function's init (Lambda reports it) rather than logging at a level
/// nobody chose.
pub fn init_tracing() -> Result<(), String> {
    let level = log_level(std::env::var("RUST_LOG").ok().as_deref())?;
    // Ignore the error of a second initialisation (tests).
    let _ = json_logs(level, std::io::stdout).try_init();
    // Business metrics as EMF lines on the same stdout, when the template turns them on.
    telemetry::metrics::install_from_settings(&|name| std::env::var(name).ok());
    Ok(())
}

/// The level a `RUST_LOG` value names: `info` when unset or empty, an error naming any value
/// that is not a level.
pub fn log_level(setting: Option<&str>) -> Result<tracing_subscriber::filter::LevelFilter, String> {
    match setting.map(str::trim) {
        None | Some("") => Ok(tracing_subscriber::filter::LevelFilter::INFO),
        Some(level) => level
            .parse()
            .map_err(|_| format!("RUST_LOG={level:?} is not a log level: use off, error, warn, info, debug or trace")),
    }
}

/// The one log format: JSON lines with the current span's fields (the request's), no time
/// (CloudWatch stamps each line), no module path.
pub fn json_logs<W>(
    level: tracing_subscriber::filter::LevelFilter,
    writer: W,
) -> tracing_subscriber::fmt::SubscriberBuilder<
    tracing_subscriber::fmt::format::JsonFields,
    tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Json, ()>,
    tracing_subscriber::filter::LevelFilter,
    W,
>
where
    W: for<'writer> tracing_subscriber::fmt::MakeWriter<'writer> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .with_max_level(level)
        .without_time()
        .with_target(false)
        .with_writer(writer)
}

#[cfg(test)]
mod tests {
    use super::log_level;
    use tracing_subscriber::filter::LevelFilter;

    #[test]
    fn rust_log_is_a_plain_level_info_when_unset_and_an_error_naming_anything_else() {
        assert_eq!(log_level(None), Ok(LevelFilter::INFO));
        assert_eq!(log_level(Some(" ")), Ok(LevelFilter::INFO));
        assert_eq!(log_level(Some("debug")), Ok(LevelFilter::DEBUG));
        assert_eq!(log_level(Some("WARN")), Ok(LevelFilter::WARN));
        assert_eq!(log_level(Some("off")), Ok(LevelFilter::OFF));
        for setting in ["verbose", "info,aws=warn", "dev-server=debug"] {
            let error = log_level(Some(setting)).err().unwrap_or_default();
            assert!(error.starts_with(&format!("RUST_LOG={setting:?} is not a log level")), "{error}");
        }
    }
}
