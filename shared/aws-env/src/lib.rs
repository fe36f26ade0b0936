//! A function's environment, one way for functions, tools and tests: the AWS configuration, its
//! settings, and the clock.
//!
//! Every SDK client of the project gets its HTTP client here: rustls with the ring crypto
//! provider, which is much smaller than the SDK's default aws-lc (see `docs/performance.md`).
//!
//! Two ways to load the AWS configuration, one per kind of process:
//! - [`function_config`], for the functions: the region, credentials, `AWS_ENDPOINT_URL` and the
//!   per-service `AWS_ENDPOINT_URL_<SERVICE>` are read from the environment, as Lambda (and
//!   `make watch`, and the cold-start bench) give them.
//!   It links none of `aws-config`'s provider chains (profiles, SSO, IMDS, STS: 0.8 MB of every
//!   binary) and reads no file at init.
//! - [`load`] (feature `provider-chains`), for the admin CLI, the dev server, tests and benches on
//!   a developer's machine: the SDK's default provider chains (profiles, SSO and the rest).

#[cfg(feature = "bedrock")]
pub mod bedrock;
pub mod clients;
pub mod clock;
mod http;
pub mod isolation;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod partitions;
pub mod settings;

pub use clients::{Clients, Lazy};

use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider, future};
use aws_smithy_runtime_api::client::behavior_version::BehaviorVersion;
use aws_smithy_runtime_api::client::http::SharedHttpClient;
pub use aws_types::SdkConfig;
pub use aws_types::region::Region;
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};
use settings::Lookup;

/// A function's AWS configuration, from its environment only: `AWS_REGION` (or
/// `AWS_DEFAULT_REGION`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
/// `AWS_ENDPOINT_URL` and the per-service endpoints of the services the functions call
/// ([`SERVICE_ENDPOINT_VARIABLES`]: a local stack may serve DynamoDB on one endpoint and SQS on
/// another). Lambda always sets the first four; nothing else is consulted (no profile files).
/// Everything else is the SDK's defaults for the latest behavior version, as the provider chains
/// would give them: standard retries (3 attempts), a 3.1 s connect timeout, a lazy identity cache.
///
/// Missing credentials are not an error here but on each call, naming the variables, so a
/// misconfigured function still starts and answers what needs no AWS call.
pub fn function_config(lookup: Lookup) -> SdkConfig {
    let in_lambda = lookup("AWS_LAMBDA_FUNCTION_NAME").is_some();
    let set = |name| lookup(name).filter(|value: &String| !value.trim().is_empty());
    let endpoint_url = set("AWS_ENDPOINT_URL");
    let region = set("AWS_REGION").or_else(|| set("AWS_DEFAULT_REGION"));
    let service_endpoints = ServiceEndpoints(
        SERVICE_ENDPOINT_VARIABLES.iter().filter_map(|name| set(name).map(|url| (*name, url))).collect(),
    );
    let custom_tls =
        endpoint_url.iter().chain(service_endpoints.0.iter().map(|(_, url)| url)).any(|url| is_tls_url(url));
    let aws_endpoints_only = in_lambda && !custom_tls;
    let mut config = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(http_client(aws_endpoints_only))
        .credentials_provider(SharedCredentialsProvider::new(EnvironmentCredentials::read(lookup)))
        .region(region.map(Region::new))
        .service_config(service_endpoints);
    config.set_endpoint_url(endpoint_url);
    config.build()
}

/// The per-service endpoint variables [`function_config`] reads, one per service a function
/// calls, named as the SDK names them (`AWS_ENDPOINT_URL_` + the service id in upper snake case).
pub const SERVICE_ENDPOINT_VARIABLES: [&str; 6] = [
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_SECRETS_MANAGER",
    "AWS_ENDPOINT_URL_LAMBDA",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
];

/// The per-service endpoints that were set, answered to the SDK when it builds a service's
/// client (they win over `AWS_ENDPOINT_URL`, as with the provider chains).
#[derive(Debug)]
struct ServiceEndpoints(Vec<(&'static str, String)>);

impl ServiceEndpoints {
    /// The endpoint set for the service the SDK calls `service_id` ("DynamoDB", "Secrets Manager").
    fn of(&self, service_id: &str) -> Option<&str> {
        let variable = format!("AWS_ENDPOINT_URL_{}", service_id.to_ascii_uppercase().replace(' ', "_"));
        self.0.iter().find(|(name, _)| *name == variable).map(|(_, url)| url.as_str())
    }
}

impl LoadServiceConfig for ServiceEndpoints {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        (key.env() == "AWS_ENDPOINT_URL").then(|| self.of(key.service_id())).flatten().map(str::to_owned)
    }
}

/// The endpoint a configuration gives `service_id`, chosen as the SDK's generated clients choose
/// it (for a client the SDK does not build: Lambda's Invoke): an endpoint set in code wins, then
/// the per-service endpoint, then `AWS_ENDPOINT_URL`.
pub fn service_endpoint(config: &SdkConfig, service_id: &str) -> Option<String> {
    if config.get_origin("endpoint_url").is_client_config() {
        return config.endpoint_url().map(str::to_owned);
    }
    configured_service_endpoint(config, service_id).or_else(|| config.endpoint_url().map(str::to_owned))
}

/// The endpoint set for `service_id` alone (`AWS_ENDPOINT_URL_<SERVICE>`), if one is.
pub fn configured_service_endpoint(config: &SdkConfig, service_id: &str) -> Option<String> {
    let key =
        ServiceConfigKey::builder().service_id(service_id).env("AWS_ENDPOINT_URL").profile("endpoint_url").build();
    config.service_config().and_then(|services| key.ok().and_then(|key| services.load_config(key)))
}

/// The configuration of a tool on a developer's machine (admin CLI, dev server, tests): the
/// SDK's default provider chains, with the project's HTTP client and the system's roots.
#[cfg(feature = "provider-chains")]
pub async fn load() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest()).http_client(http_client(false)).load().await
}

/// The SDK's HTTP client (see [`http`]), trusting Amazon Trust Services' roots only when every
/// call goes to AWS's own endpoints: reading and parsing the system's ~150 roots (a bundle and a
/// folder of them) was most of a function's init time (`make bench`, docs/performance.md), and
/// no other authority need be trusted for AWS's endpoints. Elsewhere (a local endpoint, an
/// `AWS_ENDPOINT_URL` over TLS, the admin CLI), the system's roots.
fn http_client(aws_endpoints_only: bool) -> SharedHttpClient {
    let roots = if aws_endpoints_only { http::Roots::AmazonTrustServices } else { http::Roots::System };
    SharedHttpClient::new(http::SdkHttpClient::new(roots))
}

/// Credentials from the environment, read once: Lambda sets them for the life of the execution
/// environment.
#[derive(Debug)]
struct EnvironmentCredentials(Option<Credentials>);

impl EnvironmentCredentials {
    fn read(lookup: Lookup) -> Self {
        let non_empty = |name| lookup(name).filter(|value: &String| !value.is_empty());
        let credentials = match (non_empty("AWS_ACCESS_KEY_ID"), non_empty("AWS_SECRET_ACCESS_KEY")) {
            (Some(key_id), Some(secret)) => {
                Some(Credentials::new(key_id, secret, non_empty("AWS_SESSION_TOKEN"), None, "Environment"))
            }
            _ => None,
        };
        Self(credentials)
    }
}

impl ProvideCredentials for EnvironmentCredentials {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::ready(self.0.clone().ok_or_else(|| {
            CredentialsError::not_loaded("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set")
        }))
    }
}

/// An `AWS_ENDPOINT_URL` over TLS (LocalStack with HTTPS, a proxy) may present any authority's
/// certificate; a plain-HTTP one (moto, LocalStack's default) needs no roots.
fn is_tls_url(url: &str) -> bool {
    url.trim().to_ascii_lowercase().starts_with("https://")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| vars.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_string())
    }

    async fn credentials_of(config: &SdkConfig) -> Result<Credentials, CredentialsError> {
        let provider = config.credentials_provider().expect("a credentials provider is always set");
        provider.provide_credentials().await
    }

    #[tokio::test]
    async fn a_function_reads_region_credentials_and_endpoint_from_its_environment() {
        let config = function_config(&lookup_of(&[
            ("AWS_LAMBDA_FUNCTION_NAME", "meetings"),
            ("AWS_REGION", "eu-west-1"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", "session"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5050"),
        ]));
        assert_eq!(config.region().map(|region| region.as_ref()), Some("eu-west-1"));
        assert_eq!(config.endpoint_url(), Some("http://127.0.0.1:5050"));
        assert_eq!(config.behavior_version(), Some(BehaviorVersion::latest()));
        assert!(config.http_client().is_some());
        let credentials = credentials_of(&config).await.expect("credentials");
        assert_eq!(credentials.access_key_id(), "AKIDEXAMPLE");
        assert_eq!(credentials.secret_access_key(), "secret");
        assert_eq!(credentials.session_token(), Some("session"));
    }

    #[tokio::test]
    async fn the_default_region_is_the_fallback_and_empty_values_are_absent() {
        let config = function_config(&lookup_of(&[
            ("AWS_REGION", ""),
            ("AWS_DEFAULT_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", ""),
            ("AWS_ENDPOINT_URL", " "),
        ]));
        assert_eq!(config.region().map(|region| region.as_ref()), Some("us-east-1"));
        assert_eq!(config.endpoint_url(), None);
        assert_eq!(credentials_of(&config).await.expect("credentials").session_token(), None);
    }

    #[tokio::test]
    async fn missing_credentials_fail_each_call_naming_the_variables() {
        for vars in [&[][..], &[("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")][..], &[("AWS_SECRET_ACCESS_KEY", "secret")][..]] {
            let config = function_config(&lookup_of(vars));
            assert_eq!(config.region(), None);
            let error = credentials_of(&config).await.expect_err("no credentials");
            let message = format!("{:?}", error);
            assert!(message.contains("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"), "{message}");
        }
    }

    #[test]
    fn per_service_endpoints_win_over_the_general_one_for_their_service_only() {
        let config = function_config(&lookup_of(&[
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5050"),
            ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000"),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", "http://127.0.0.1:4566"),
            ("AWS_ENDPOINT_URL_SQS", " "),
        ]));
        assert_eq!(service_endpoint(&config, "DynamoDB").as_deref(), Some("http://127.0.0.1:8000"));
        assert_eq!(service_endpoint(&config, "Secrets Manager").as_deref(), Some("http://127.0.0.1:4566"));
        assert_eq!(service_endpoint(&config, "SQS").as_deref(), Some("http://127.0.0.1:5050"), "empty is unset");
        assert_eq!(service_endpoint(&config, "Lambda").as_deref(), Some("http://127.0.0.1:5050"));
        let only_dynamodb = function_config(&lookup_of(&[("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000")]));
        assert_eq!(service_endpoint(&only_dynamodb, "SQS"), None);
    }

    #[test]
    fn only_an_https_endpoint_url_needs_other_roots() {
        assert!(is_tls_url(" HTTPS://localhost.localstack.cloud:4566"));
        assert!(!is_tls_url("http://127.0.0.1:5050"));
    }
}
