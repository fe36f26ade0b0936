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

/// Builds `binary` as its `main` does, and returns how many SDK clients that built.
fn clients_built_by(binary: &str, env: &BTreeMap<String, String>) -> usize {
    let (config, built) = counting_config();
    let aws = &aws_env::Clients::new(config);
    let lookup = |name: &str| env.get(name).cloned();
    let lookup = &lookup;
    let ok =
        |result: Result<(), aws_env::settings::SettingError>| result.unwrap_or_else(|err| panic!("{binary}: {err}"));
    match binary {
        "auth" => ok(meeting_api::AuthService::from_settings(aws, lookup).map(drop)),
        "meetings" => ok(meeting_api::MeetingsService::from_settings(aws, lookup).map(drop)),
        "health" => ok(platform_api::HealthService::from_settings(aws, lookup).map(drop)),
        "agents" => ok(platform_api::AgentsService::from_settings(aws, lookup).map(drop)),
        "tools" => ok(platform_api::ToolsService::from_settings(aws, lookup).map(drop)),
        "mcps" => ok(platform_api::McpsService::from_settings(aws, lookup).map(drop)),
        "webhooks" => ok(platform_api::WebhooksService::from_settings(aws, lookup).map(drop)),
        "language-models" => ok(platform_api::LanguageModelsService::from_settings(aws, lookup).map(drop)),
        "schedules" => ok(platform_api::SchedulesService::from_settings(aws, lookup).map(drop)),
        "agent-runs" => ok(platform_api::AgentRunsService::from_settings(aws, lookup).map(drop)),
        "runner" => ok(platform_api::RunnerService::from_settings(aws, lookup).map(drop)),
        "runner-worker" => ok(platform_api::agent_runs::run_worker_from_settings(aws, lookup).map(drop)),
        "scheduler" => ok(platform_api::schedules::scheduler_from_settings(aws, lookup).map(drop)),
        "webhook-delivery" => ok(platform_api::webhooks::WebhookSettings::from_settings(aws, lookup).map(drop)),
        "webhook-sweeper" => ok(platform_api::webhooks::sweeper_from_settings(aws, lookup).map(drop)),
        other => panic!("{other} is not built here: add it"),
    }
    built.load(Ordering::SeqCst)
}

#[test]
fn every_function_builds_one_sdk_client_at_init_and_shares_it() {
    let template = Template::embedded().unwrap();
    assert_eq!(template.functions.len(), 15, "every Rust function of the template is built here");
    for function in &template.functions {
        let env = template.environment(function, "test");
        // One DynamoDB client, however many stores use it; no other service's client yet.
        assert_eq!(clients_built_by(&function.binary, &env), 1, "{}", function.binary);
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
