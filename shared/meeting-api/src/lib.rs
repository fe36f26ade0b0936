//! HTTP handlers of the meeting data API: token endpoints and meeting reads.
//!
//! Each service implements [`http_api::HttpFunction`]; the Lambda binaries in `functions/` only
//! build one and run it.

pub mod auth;
pub mod meetings;
pub mod views;

pub use auth::AuthService;
pub use meetings::MeetingsService;

/// The AWS configuration of the environment (region, credentials, `AWS_ENDPOINT_URL`).
pub async fn load_aws_config() -> aws_config::SdkConfig {
    load_aws_config_for(std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some()).await
}

/// In Lambda the region and credentials are always environment variables; naming them skips
/// building the default provider chains, a few milliseconds of every cold start (`make bench`).
/// Elsewhere (dev server, admin, tests) the default chains apply.
pub async fn load_aws_config_for(in_lambda: bool) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if in_lambda && let Ok(region) = std::env::var("AWS_REGION") {
        loader = loader
            .region(aws_config::Region::new(region))
            .credentials_provider(aws_config::environment::EnvironmentVariableCredentialsProvider::new());
    }
    loader.load().await
}
