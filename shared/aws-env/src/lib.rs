//! A function's environment, one way for functions, tools and tests: the AWS configuration, its
//! settings, and the clock.
//!
//! Every SDK client of the project gets its HTTP client here: rustls with the ring crypto
//! provider, which is much smaller than the SDK's default aws-lc (see `docs/performance.md`).
//! `AWS_ENDPOINT_URL` (moto, LocalStack) is honoured as usual.

pub mod clock;
pub mod settings;

pub use aws_config::SdkConfig;
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};

/// The configuration of the current environment: the Lambda path inside Lambda, the default
/// provider chains elsewhere.
pub async fn load() -> SdkConfig {
    load_for(std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some()).await
}

/// In Lambda the region and credentials are always environment variables; naming them skips
/// building the default provider chains, a few milliseconds of every cold start (`make bench`).
pub async fn load_for(in_lambda: bool) -> SdkConfig {
    let http_client =
        aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring)).build_https();
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http_client);
    if in_lambda && let Ok(region) = std::env::var("AWS_REGION") {
        loader = loader
            .region(aws_config::Region::new(region))
            .credentials_provider(aws_config::environment::EnvironmentVariableCredentialsProvider::new());
    }
    loader.load().await
}
