//! Each function builds at most one SDK client per AWS service, and only DynamoDB's at init
//! (`aws_env::Clients`; docs/performance.md, cold start): every other client is built at its
//! first call. Counted through the HTTP client's configuration check, which the SDK runs once
//! for every client it builds.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::behavior_version::BehaviorVersion;
use aws_smithy_runtime_api::client::http::{HttpClient, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector};
use aws_smithy_runtime_api::client::runtime_components::{RuntimeComponents, RuntimeComponentsBuilder};
use aws_smithy_types::config_bag::ConfigBag;
use stack::Template;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An HTTP client that counts the SDK clients built on it and is never asked for a connection.
#[derive(Debug)]
struct CountingClient(Arc<AtomicUsize>);

impl HttpClient for CountingClient {
    fn http_connector(&self, _: &HttpConnectorSettings, _: &RuntimeComponents) -> SharedHttpConnector {
        unreachable!("building a function makes no AWS call")
    }

    fn validate_base_client_config(&self, _: &RuntimeComponentsBuilder, _: &ConfigBag) -> Result<(), BoxError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A configuration whose SDK clients are counted as they are built.
fn counting_config() -> (aws_env::SdkConfig, Arc<AtomicUsize>) {
    let built = Arc::new(AtomicUsize::new(0));
    let config = aws_env::SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(aws_types::region::Region::new("us-east-1"))
        .http_client(SharedHttpClient::new(CountingClient(Arc::clone(&built))))
        .build();
    (config, built)
}

/// Builds `binary` as its `main` does (`dev_server::functions`), and returns how many SDK clients
/// that built.
fn clients_built_by(binary: &str, env: &BTreeMap<String, String>) -> usize {
    let (config, built) = counting_config();
    let lookup = |name: &str| env.get(name).cloned();
    if let Err(err) = dev_server::functions::build_function(binary, &aws_env::Clients::new(config), &lookup) {
        panic!("{binary}: {err}");
    }
    built.load(Ordering::SeqCst)
}

#[test]
fn every_function_builds_one_sdk_client_at_init_and_shares_it() {
    let template = Template::embedded().unwrap();
    assert_eq!(template.functions.len(), 19, "every Rust function of the template is built here");
    for function in &template.functions {
        let env = template.environment(function, "test");
        // One DynamoDB client, however many stores use it; no other service's client yet. The
        // docs functions make no AWS call at all.
        let expected = if function.binary.ends_with("docs") { 0 } else { 1 };
        assert_eq!(clients_built_by(&function.binary, &env), expected, "{}", function.binary);
    }
}

#[test]
fn the_other_clients_are_built_at_their_first_call_once_for_all_their_users() {
    let (config, built) = counting_config();
    let aws = aws_env::Clients::new(config);
    let (first, second) = (aws.sqs(), aws.sqs());
    let secrets = aws.secrets();
    assert_eq!(built.load(Ordering::SeqCst), 0);
    let _ = first.config();
    assert_eq!(built.load(Ordering::SeqCst), 1, "the first use builds it");
    let _ = second.config();
    assert_eq!(built.load(Ordering::SeqCst), 1, "every handle shares it");
    assert!(!aws_env::Lazy::is_built(&secrets));
    let _ = secrets.config();
    let _ = (aws.dynamodb(), aws.dynamodb());
    assert_eq!(built.load(Ordering::SeqCst), 3, "one client per service");
}
