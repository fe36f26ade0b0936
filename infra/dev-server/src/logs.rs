//! `make dev`'s logs: lines a person reads by default, the functions' JSON behind a setting.

use tracing_subscriber::filter::LevelFilter;

/// How the dev server writes its logs, from `LOG_FORMAT`: `text` (the default) or `json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One readable line per event: time, level, the request's span fields, the message.
    Text,
    /// The JSON lines every function writes in Lambda (`http_api::json_logs`).
    Json,
}

impl LogFormat {
    /// The format a `LOG_FORMAT` value names; an error naming any other value.
    pub fn from_setting(setting: Option<&str>) -> Result<Self, String> {
        match setting.map(str::trim) {
            None | Some("" | "text") => Ok(Self::Text),
            Some("json") => Ok(Self::Json),
            Some(other) => Err(format!("LOG_FORMAT={other:?} is not a log format: use text or json")),
        }
    }
}

/// Starts the dev server's logging at `RUST_LOG`'s level in `LOG_FORMAT`'s format; an invalid
/// value of either is an error naming it.
pub fn init() -> Result<(), String> {
    let level = http_api::log_level(std::env::var("RUST_LOG").ok().as_deref())?;
    let format = LogFormat::from_setting(std::env::var("LOG_FORMAT").ok().as_deref())?;
    // A second initialisation (tests that start the server in-process) keeps the first.
    let _ = match format {
        LogFormat::Text => readable_logs(level).try_init(),
        LogFormat::Json => http_api::json_logs(level, std::io::stdout).try_init(),
    };
    Ok(())
}

fn readable_logs(
    level: LevelFilter,
) -> tracing_subscriber::fmt::SubscriberBuilder<
    tracing_subscriber::fmt::format::DefaultFields,
    tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Compact>,
    LevelFilter,
    fn() -> std::io::Stdout,
> {
    tracing_subscriber::fmt()
        .compact()
        .with_target(false)
        .with_max_level(level)
        .with_writer(std::io::stdout as fn() -> std::io::Stdout)
}

#[cfg(test)]
mod tests {
    use super::LogFormat;

    #[test]
    fn log_format_is_text_by_default_json_on_request_and_an_error_naming_anything_else() {
        assert_eq!(LogFormat::from_setting(None), Ok(LogFormat::Text));
        assert_eq!(LogFormat::from_setting(Some("")), Ok(LogFormat::Text));
        assert_eq!(LogFormat::from_setting(Some("json")), Ok(LogFormat::Json));
        let error = LogFormat::from_setting(Some("pretty")).err().unwrap_or_default();
        assert_eq!(error, "LOG_FORMAT=\"pretty\" is not a log format: use text or json");
    }
}
