//! A function's environment, one way for functions, tools and tests: the AWS configuration, its
//! settings, and the clock.
//!
//! Every SDK client of the project gets its HTTP client here: rustls with the ring crypto
//! provider, which is much smaller than the SDK's default aws-lc (see `docs/performance.md`).
//!
//! Two ways to load the AWS configuration, one per kind of process:
//! - [`function_config`], for the functions: the region, credentials and `AWS_ENDPOINT_URL` are
//!   read from the environment, as Lambda (and `make watch`, and the cold-start bench) give them.
//!   It links none of `aws-config`'s provider chains (profiles, SSO, IMDS, STS: 0.8 MB of every
//!   binary) and reads no file at init.
//! - [`load`] (feature `provider-chains`), for the admin CLI, the dev server, tests and benches on
//!   a developer's machine: the SDK's default provider chains (profiles, SSO and the rest).

pub mod clients;
pub mod clock;
pub mod settings;

pub use clients::{Clients, Lazy};

use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider, future};
use aws_smithy_http_client::tls::{Provider, TlsContext, TrustStore, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::behavior_version::BehaviorVersion;
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{HttpClient, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
pub use aws_types::SdkConfig;
use aws_types::region::Region;
use settings::Lookup;

/// The roots of Amazon Trust Services, whose certificates every AWS service endpoint presents
/// (Amazon Root CA 1–4 and the Starfield Services root that cross-signs them).
const AMAZON_TRUST_ROOTS: &[u8] = include_bytes!("amazon-trust-roots.pem");

/// A function's AWS configuration, from its environment only: `AWS_REGION` (or
/// `AWS_DEFAULT_REGION`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` and
/// `AWS_ENDPOINT_URL`. Lambda always sets the first four; nothing else is consulted (no profile
/// files, no per-service endpoint variables). Everything else is the SDK's defaults for the
/// latest behavior version, as the provider chains would give them: standard retries (3
/// attempts), a 3.1 s connect timeout, a lazy identity cache.
///
/// Missing credentials are not an error here but on each call, naming the variables, so a
/// misconfigured function still starts and answers what needs no AWS call.
pub fn function_config(lookup: Lookup) -> SdkConfig {
    let in_lambda = lookup("AWS_LAMBDA_FUNCTION_NAME").is_some();
    let set = |name| lookup(name).filter(|value: &String| !value.trim().is_empty());
    let endpoint_url = set("AWS_ENDPOINT_URL");
    let region = set("AWS_REGION").or_else(|| set("AWS_DEFAULT_REGION"));
    let aws_endpoints_only = in_lambda && !endpoint_url.as_deref().is_some_and(is_tls_url);
    let mut config = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(http_client(aws_endpoints_only))
        .credentials_provider(SharedCredentialsProvider::new(EnvironmentCredentials::read(lookup)))
        .region(region.map(Region::new));
    config.set_endpoint_url(endpoint_url);
    config.build()
}

/// The configuration of a tool on a developer's machine (admin CLI, dev server, tests): the
/// SDK's default provider chains, with the project's HTTP client and the system's roots.
#[cfg(feature = "provider-chains")]
pub async fn load() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest()).http_client(http_client(false)).load().await
}

/// The SDK's HTTPS client: rustls with ring; Amazon Trust Services' roots only when every call
/// goes to AWS's own endpoints.
fn http_client(aws_endpoints_only: bool) -> SharedHttpClient {
    let http_client = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .tls_context(tls_context(aws_endpoints_only))
        .build_https();
    SharedHttpClient::new(ConnectorOnFirstRequest(http_client))
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

/// The SDK's HTTPS client, minus the check every SDK client makes of it when it is created: that
/// check builds a whole connector (TLS configuration, trust store parsed from PEM) and throws it
/// away, so that a misconfigured store fails early. With a dozen clients (the runner has 13) it
/// was half of a function's init (callgrind of `make bench`'s cold start, docs/performance.md).
/// Connectors are still built and cached by the inner client, once per setting, at the first
/// request; the embedded roots are checked by a test instead.
#[derive(Debug)]
struct ConnectorOnFirstRequest(SharedHttpClient);

impl HttpClient for ConnectorOnFirstRequest {
    fn http_connector(&self, settings: &HttpConnectorSettings, components: &RuntimeComponents) -> SharedHttpConnector {
        self.0.http_connector(settings, components)
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.0.connector_metadata()
    }
}

/// An `AWS_ENDPOINT_URL` over TLS (LocalStack with HTTPS, a proxy) may present any authority's
/// certificate; a plain-HTTP one (moto, LocalStack's default) needs no roots.
fn is_tls_url(url: &str) -> bool {
    url.trim().to_ascii_lowercase().starts_with("https://")
}

/// The certificates the SDK's HTTPS client trusts. In Lambda, talking to AWS's own endpoints,
/// only Amazon Trust Services' roots: reading and parsing the system's ~150 roots (a bundle and
/// a folder of them) was most of a function's init time (`make bench`, docs/performance.md),
/// and no other authority need be trusted for AWS's endpoints. Elsewhere (a local endpoint,
/// an `AWS_ENDPOINT_URL` over TLS, the admin CLI), the system's roots.
fn tls_context(aws_endpoints_only: bool) -> TlsContext {
    if !aws_endpoints_only {
        return TlsContext::default();
    }
    let roots = TrustStore::empty().with_native_roots(false).with_pem_certificate(AMAZON_TRUST_ROOTS);
    // Building only fails on a malformed store; the embedded roots are checked by a test.
    TlsContext::builder().with_trust_store(roots).build().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_runtime_api::client::runtime_components::RuntimeComponentsBuilder;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts the checks it is asked to make.
    #[derive(Debug, Default)]
    struct CountingClient(Arc<AtomicUsize>);

    impl HttpClient for CountingClient {
        fn http_connector(&self, _: &HttpConnectorSettings, _: &RuntimeComponents) -> SharedHttpConnector {
            unreachable!("not asked for a connector here")
        }

        fn validate_base_client_config(
            &self,
            _: &RuntimeComponentsBuilder,
            _: &aws_smithy_types::config_bag::ConfigBag,
        ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

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
    fn only_an_https_endpoint_url_needs_other_roots() {
        assert!(is_tls_url(" HTTPS://localhost.localstack.cloud:4566"));
        assert!(!is_tls_url("http://127.0.0.1:5050"));
    }

    #[test]
    fn creating_an_sdk_client_does_not_build_a_connector() {
        let checks = Arc::new(AtomicUsize::new(0));
        let inner = SharedHttpClient::new(CountingClient(Arc::clone(&checks)));
        let client = ConnectorOnFirstRequest(inner.clone());
        let (components, config) =
            (RuntimeComponentsBuilder::new("test"), aws_smithy_types::config_bag::ConfigBag::base());
        assert!(client.validate_base_client_config(&components, &config).is_ok());
        assert_eq!(checks.load(Ordering::SeqCst), 0);
        // The inner client would have been asked (smithy's builds and drops a connector there).
        assert!(inner.validate_base_client_config(&components, &config).is_ok());
        assert_eq!(checks.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_embedded_roots_are_the_five_amazon_trust_services_certificates() {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject as _;
        let certificates: Vec<CertificateDer> =
            CertificateDer::pem_slice_iter(AMAZON_TRUST_ROOTS).collect::<Result<_, _>>().expect("valid PEM");
        assert_eq!(certificates.len(), 5);
        let mut store = rustls::RootCertStore::empty();
        let (valid, invalid) = store.add_parsable_certificates(certificates);
        assert_eq!((valid, invalid), (5, 0));
        assert!(
            TlsContext::builder()
                .with_trust_store(TrustStore::empty().with_pem_certificate(AMAZON_TRUST_ROOTS))
                .build()
                .is_ok()
        );
    }
}
