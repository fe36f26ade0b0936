//! A function's environment, one way for functions, tools and tests: the AWS configuration, its
//! settings, and the clock.
//!
//! Every SDK client of the project gets its HTTP client here: rustls with the ring crypto
//! provider, which is much smaller than the SDK's default aws-lc (see `docs/performance.md`).
//! `AWS_ENDPOINT_URL` (moto, LocalStack) is honoured as usual.

pub mod clock;
pub mod settings;

pub use aws_config::SdkConfig;
use aws_smithy_http_client::tls::{Provider, TlsContext, TrustStore, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{HttpClient, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;

/// The roots of Amazon Trust Services, whose certificates every AWS service endpoint presents
/// (Amazon Root CA 1–4 and the Starfield Services root that cross-signs them).
const AMAZON_TRUST_ROOTS: &[u8] = include_bytes!("amazon-trust-roots.pem");

/// The configuration of the current environment: the Lambda path inside Lambda, the default
/// provider chains elsewhere.
pub async fn load() -> SdkConfig {
    load_for(std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some()).await
}

/// In Lambda the region and credentials are always environment variables; naming them skips
/// building the default provider chains, a few milliseconds of every cold start (`make bench`).
pub async fn load_for(in_lambda: bool) -> SdkConfig {
    let http_client = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .tls_context(tls_context(in_lambda && !custom_tls_endpoint()))
        .build_https();
    let http_client = SharedHttpClient::new(ConnectorOnFirstRequest(http_client));
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http_client);
    if in_lambda && let Ok(region) = std::env::var("AWS_REGION") {
        loader = loader
            .region(aws_config::Region::new(region))
            .credentials_provider(aws_config::environment::EnvironmentVariableCredentialsProvider::new());
    }
    loader.load().await
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
fn custom_tls_endpoint() -> bool {
    std::env::var("AWS_ENDPOINT_URL").is_ok_and(|url| url.trim().to_ascii_lowercase().starts_with("https://"))
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
