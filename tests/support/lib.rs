//! Test support: an isolated stack per test on the local AWS endpoint, and a client that calls
//! the functions' handlers in-process exactly as Lambda and the dev server do.

pub mod a2a_server;
pub mod client;
pub mod lambda_server;
pub mod langflow_server;
pub mod local_server;
pub mod mcp_server;
pub mod model_server;
pub mod python_server;
pub mod runtime_api;
pub mod services;

pub use client::{Call, Reply, TestClient};
pub use services::{Routed, Service};

use aws_env::settings::{Lookup, SettingError};
use aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use chrono::{DateTime, Utc};
use credentials::PepperSource;
use http::Method;
use http_api::{Body, HttpFunction, Request};
use meeting_api::{AuthService, MeetingsService};
use meeting_data::access::ExternalApp;
use meeting_data::clock::Clock;
use meeting_data::settings;
use meeting_data::store::{AppStore, DirectoryStore, MeetingStore};
use platform_api::agents::ReferenceStores;
use platform_api::flowtool::FlowServerSettings;
use platform_api::{AgentsService, Gate, HealthService, LanguageModelsService, McpsService, ToolsService};
use platform_data::agents::AgentStore;
use platform_data::api_keys::{ApiKey, ApiKeyStore};
use platform_data::language_models::LanguageModelStore;
use platform_data::mcp_configs::McpConfigStore;
use platform_data::tools::ToolStore;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use storage::rate_limit::{RateLimit, RateLimiter};

/// One test's own tables and secret, named with a unique prefix.
#[derive(Clone)]
pub struct TestStack {
    pub sdk: aws_config::SdkConfig,
    /// The environment `template.yaml` gives the functions, resolved for this stack, with the
    /// parameters `make dev` sets (`LOCAL_PARAMETERS`).
    pub env: BTreeMap<String, String>,
    /// DynamoDB client whose calls are recorded in `calls`.
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub calls: CallLog,
    pub prefix: String,
}

/// A point in time tests can move, or the system's time.
#[derive(Clone)]
pub struct TestClock(Arc<Mutex<Option<DateTime<Utc>>>>);

impl TestClock {
    /// A clock stopped at the current time.
    pub fn new() -> Self {
        Self(Arc::new(Mutex::new(Some(Utc::now()))))
    }

    /// The system's clock, as in AWS: for tests where time must pass (leases, cancel waits).
    pub fn system() -> Self {
        Self(Arc::new(Mutex::new(None)))
    }

    /// The clock's current time.
    pub fn now(&self) -> DateTime<Utc> {
        self.0.lock().unwrap().unwrap_or_else(Utc::now)
    }

    /// Moves the clock forward (a stopped clock only).
    pub fn advance(&self, seconds: i64) {
        let mut now = self.0.lock().unwrap();
        let now = now.as_mut().expect("the system clock is not moved by tests");
        *now += chrono::Duration::seconds(seconds);
    }

    /// The clock as the services take it.
    pub fn clock(&self) -> Clock {
        let inner = Arc::clone(&self.0);
        Arc::new(move || inner.lock().unwrap().unwrap_or_else(Utc::now))
    }
}

impl Default for TestClock {
    fn default() -> Self {
        Self::new()
    }
}

/// One DynamoDB call: its operation and its `Limit`, if it set one.
type Operation = (String, Option<u64>);

/// The DynamoDB operations a client made, in order; with `keep_bodies`, also each call's
/// request and response bodies (`exchanges`).
#[derive(Debug, Clone, Default)]
pub struct CallLog(Arc<Mutex<Vec<Operation>>>, Arc<Mutex<Exchanges>>);

/// One DynamoDB call's request and response, as JSON bodies (kept after `CallLog::keep_bodies`).
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The operation, e.g. `Query`.
    pub operation: String,
    /// The request body (`Null` when it was not JSON).
    pub request: Value,
    /// The response body (`Null` when it was not JSON or has not arrived).
    pub response: Value,
    /// The response body's length in bytes, as received (0 until it arrives).
    pub response_bytes: usize,
}

#[derive(Debug, Default)]
struct Exchanges {
    keep: bool,
    list: Vec<Exchange>,
    /// How many of `list` have their response.
    answered: usize,
}

impl CallLog {
    /// Forgets the calls made so far (and their bodies).
    pub fn reset(&self) {
        self.0.lock().unwrap().clear();
        let mut exchanges = self.1.lock().unwrap();
        exchanges.list.clear();
        exchanges.answered = 0;
    }

    /// Whether to keep each further call's request and response bodies (off by default: tests
    /// only count calls). Responses are paired with requests in the order they arrive, which is
    /// exact for calls made one after another (not for concurrent ones).
    pub fn keep_bodies(&self, keep: bool) {
        self.1.lock().unwrap().keep = keep;
    }

    /// The calls with their bodies since the last reset, made while `keep_bodies` was on.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.1.lock().unwrap().list.clone()
    }

    /// The operations since the last reset, e.g. `["BatchGetItem", "GetItem"]`.
    pub fn operations(&self) -> Vec<String> {
        self.0.lock().unwrap().iter().map(|(operation, _)| operation.clone()).collect()
    }

    /// The `Limit` of each Query since the last reset (`None`: unlimited, up to 1 MB a page).
    pub fn query_limits(&self) -> Vec<Option<u64>> {
        self.0.lock().unwrap().iter().filter(|(operation, _)| operation == "Query").map(|(_, limit)| *limit).collect()
    }
}

impl Intercept for CallLog {
    fn name(&self) -> &'static str {
        "CallLog"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        // DynamoDB's JSON protocol names the operation in X-Amz-Target: DynamoDB_20120810.GetItem.
        if let Some(target) = context.request().headers().get("x-amz-target") {
            let operation = target.rsplit('.').next().unwrap_or(target).to_owned();
            let body: Option<Value> =
                context.request().body().bytes().and_then(|bytes| serde_json::from_slice(bytes).ok());
            let limit = body.as_ref().and_then(|body| body.get("Limit")).and_then(Value::as_u64);
            self.0.lock().unwrap().push((operation.clone(), limit));
            let mut exchanges = self.1.lock().unwrap();
            if exchanges.keep {
                let request = body.unwrap_or(Value::Null);
                exchanges.list.push(Exchange { operation, request, response: Value::Null, response_bytes: 0 });
            }
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let mut exchanges = self.1.lock().unwrap();
        let next = exchanges.answered;
        if let Some(exchange) = exchanges.list.get_mut(next) {
            let bytes = context.response().body().bytes().unwrap_or_default();
            exchange.response_bytes = bytes.len();
            exchange.response = serde_json::from_slice(bytes).unwrap_or(Value::Null);
            exchanges.answered += 1;
        }
        Ok(())
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The test binary's global subscriber: it logs nothing itself, but keeps every callsite's
/// interest "sometimes", so that a test's scoped subscriber (`tracing::subscriber::set_default`)
/// sees every event, including those of callsites other tests' threads reached first. Without
/// it, a callsite first reached with no subscriber at all may be cached as never enabled.
struct DeferToScoped;

impl tracing::Subscriber for DeferToScoped {
    fn register_callsite(&self, _: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::DEBUG)
    }

    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, _: &tracing::Event<'_>) {}

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// Installs `DeferToScoped` as the global subscriber (once; later calls do nothing).
pub fn defer_logs_to_scoped_subscribers() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let _ = tracing::subscriber::set_global_default(DeferToScoped);
    });
}

impl TestStack {
    /// The SDK clients a function of this stack builds from its configuration.
    pub fn aws(&self) -> aws_env::Clients {
        aws_env::Clients::new(self.sdk.clone())
    }

    /// Creates every table and secret of `template.yaml` under a fresh prefix.
    pub async fn new() -> Self {
        defer_logs_to_scoped_subscribers();
        assert!(
            std::env::var("AWS_ENDPOINT_URL").is_ok(),
            "integration tests need a local AWS endpoint: run them with `make test`"
        );
        let sdk = aws_env::load().await;
        let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("t{}-{}-{unique}-", std::process::id(), Utc::now().timestamp_micros() % 1_000_000_000);
        let mut template = stack::Template::embedded().expect("template.yaml parses");
        template.override_parameters(|name| {
            LOCAL_PARAMETERS.iter().find(|(parameter, _)| *parameter == name).map(|(_, value)| (*value).to_owned())
        });
        stack::bootstrap(&sdk, &template, &prefix).await.expect("bootstrap the test stack");
        let calls = CallLog::default();
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(calls.clone()).build(),
        );
        Self { env: template.stack_environment(&prefix), sdk, dynamodb, calls, prefix }
    }

    /// This stack with `settings` replacing its environment's (a tighter rate limit, a flow
    /// server, the production address policy): what `service` and `client` build reads them.
    pub fn with_settings(&self, settings: &[(&str, &str)]) -> TestStack {
        let mut stack = self.clone();
        stack.env.extend(settings.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())));
        stack
    }

    /// `S` as its function builds it: `from_settings` over this stack's environment, its
    /// DynamoDB calls recorded in `calls`, its time read from `clock`.
    pub fn service<S: Service>(&self, clock: &TestClock) -> S {
        self.build(S::from_settings).with_clock(clock.clock())
    }

    /// The webhook publisher, endpoint secrets and URL policy, as the webhook functions build
    /// them (the delivery worker's parts: tests give it their clock and no jitter).
    pub fn webhook_settings(&self) -> platform_api::webhooks::WebhookSettings {
        self.build(platform_api::webhooks::WebhookSettings::from_settings)
    }

    /// What `build` makes of this stack's environment, on the recording DynamoDB client.
    fn build<T>(&self, build: impl FnOnce(&aws_env::Clients, Lookup) -> Result<T, SettingError>) -> T {
        let lookup = |name: &str| self.env.get(name).cloned();
        let aws = aws_env::Clients::with_dynamodb(self.sdk.clone(), self.dynamodb.clone());
        build(&aws, &lookup).unwrap_or_else(|err| panic!("the stack's settings: {err}"))
    }

    /// A client of the function `S`, built as `service` builds it.
    pub fn client<S: Routed>(&self, clock: &TestClock) -> TestClient {
        self.service::<S>(clock).into_client()
    }

    /// A setting the template gives some function, if one does.
    pub fn lookup(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }

    /// A setting the template gives some function (a table name, a secret prefix).
    pub fn setting(&self, name: &str) -> String {
        self.env.get(name).cloned().unwrap_or_else(|| panic!("template gives no function {name}"))
    }

    /// The application and token store.
    pub fn apps(&self) -> AppStore {
        AppStore::new(
            self.dynamodb.clone(),
            self.setting(settings::EXTERNAL_APPS_TABLE),
            self.setting(settings::ACCESS_TOKENS_TABLE),
        )
    }

    /// The meeting store.
    pub fn meetings(&self) -> MeetingStore {
        MeetingStore::new(self.dynamodb.clone(), self.setting(settings::MEETINGS_TABLE))
    }

    /// The directory store.
    pub fn directory(&self) -> DirectoryStore {
        DirectoryStore::new(self.dynamodb.clone(), self.setting(settings::DIRECTORY_TABLE))
    }

    /// The pepper source of this stack.
    pub fn pepper(&self) -> PepperSource {
        PepperSource::new(aws_sdk_secretsmanager::Client::new(&self.sdk), self.setting(settings::PEPPER_SECRET_ID))
    }

    /// The auth function as configured from the template's environment.
    pub fn auth_service(&self, clock: &TestClock) -> AuthService {
        let lookup = |name: &str| self.env.get(name).cloned();
        AuthService::from_settings(&self.aws(), &lookup).expect("auth settings").with_clock(clock.clock())
    }

    /// The meetings function, its DynamoDB calls recorded in `calls`.
    pub fn meetings_service(&self, clock: &TestClock) -> MeetingsService {
        self.meetings_service_with_limit(clock, RateLimit::DEFAULT)
    }

    /// The meetings function with a per-client `limit`, its DynamoDB calls recorded in `calls`.
    pub fn meetings_service_with_limit(&self, clock: &TestClock, limit: RateLimit) -> MeetingsService {
        MeetingsService::new(self.apps(), self.meetings(), self.client_limiter(limit)).with_clock(clock.clock())
    }

    /// The auth function with a per-client `limit` and the default token lifetime, its DynamoDB
    /// calls recorded in `calls`.
    pub fn auth_service_with_limit(&self, clock: &TestClock, limit: RateLimit) -> AuthService {
        let lifetime = meeting_api::auth::DEFAULT_TOKEN_LIFETIME_SECONDS;
        AuthService::new(self.apps(), self.pepper(), lifetime, self.client_limiter(limit)).with_clock(clock.clock())
    }

    /// The meeting API's per-client limiter with `limit`, its DynamoDB calls recorded in `calls`.
    pub fn client_limiter(&self, limit: RateLimit) -> RateLimiter {
        RateLimiter::new(self.dynamodb.clone(), self.setting(settings::RATE_LIMITS_TABLE), limit)
    }

    /// Creates an API key for `account_id`; returns the key.
    pub async fn api_key(&self, account_id: uuid::Uuid) -> String {
        let pepper = self.pepper();
        let pepper = pepper.get().await.expect("pepper");
        let (record, key) = ApiKey::create(account_id, "test key", pepper, Utc::now());
        self.api_keys().insert(&record).await.expect("key stored");
        key
    }

    /// The API key store.
    pub fn api_keys(&self) -> ApiKeyStore {
        ApiKeyStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::API_KEYS_TABLE))
    }

    /// The API-key gate with `limit` and `clock`, its DynamoDB calls recorded in `calls`.
    pub fn gate(&self, clock: &TestClock, limit: RateLimit) -> Gate {
        Gate::new(
            self.api_keys(),
            self.pepper(),
            RateLimiter::new(self.dynamodb.clone(), self.setting(platform_api::settings::RATE_LIMITS_TABLE), limit),
        )
        .with_clock(clock.clock())
    }

    /// The health function configured from the template's environment, with the test gate.
    pub fn health_service(&self, clock: &TestClock, limit: RateLimit) -> HealthService {
        let lookup = |name: &str| self.env.get(name).cloned();
        HealthService::from_settings(&self.aws(), &lookup).expect("health settings").with_gate(self.gate(clock, limit))
    }

    /// The agents function, its DynamoDB calls recorded in `calls`.
    pub fn agents_service(&self, clock: &TestClock) -> AgentsService {
        self.agents_service_with_flow_server(clock, None)
    }

    /// The agents function with `FLOW_SERVER_URL` set to `flow_server_url`.
    pub fn agents_service_with_flow_server(&self, clock: &TestClock, flow_server_url: Option<String>) -> AgentsService {
        let store = AgentStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::AGENTS_TABLE));
        let references = ReferenceStores {
            tools: self.tools(),
            mcps: self.mcp_configs(),
            language_models: LanguageModelStore::new(
                self.dynamodb.clone(),
                self.setting(platform_api::settings::LANGUAGE_MODELS_TABLE),
            ),
        };
        let flow_server = FlowServerSettings {
            base_url: flow_server_url,
            secrets: aws_sdk_secretsmanager::Client::new(&self.sdk).into(),
            secret_id: Some(self.setting(platform_api::settings::FLOW_SERVER_SECRET_ID)),
            client: loopback_client(),
        };
        AgentsService::new(
            self.gate(clock, RateLimit::DEFAULT),
            store,
            references,
            flow_server,
            self.webhooks().publisher,
            self.runs(),
            self.tool_secrets(),
        )
    }

    /// Where secret headers of `http` tools and of agents' `tool_configs` are kept.
    pub fn tool_secrets(&self) -> platform_data::tools::ToolSecrets {
        platform_data::tools::ToolSecrets::new(
            aws_sdk_secretsmanager::Client::new(&self.sdk),
            &self.setting(platform_api::settings::TOOL_SECRET_PREFIX),
        )
    }

    /// Where runs read agents, tools, MCP configurations, models and keys (loopback allowed).
    pub fn run_sources(&self) -> Arc<agent_runtime::resolve::RunSources> {
        Arc::new(agent_runtime::resolve::RunSources {
            agents: AgentStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::AGENTS_TABLE)),
            tools: self.tools(),
            mcps: self.mcp_configs(),
            models: LanguageModelStore::new(
                self.dynamodb.clone(),
                self.setting(platform_api::settings::LANGUAGE_MODELS_TABLE),
            ),
            model_keys: platform_api::language_models::language_model_keys(
                aws_sdk_secretsmanager::Client::new(&self.sdk),
                self.setting(platform_api::settings::LANGUAGE_MODEL_SECRET_PREFIX),
            ),
            mcp_secrets: platform_api::mcps::mcp_secrets(
                aws_sdk_secretsmanager::Client::new(&self.sdk),
                self.setting(platform_api::settings::MCP_SECRET_PREFIX),
            ),
            tool_secrets: self.tool_secrets(),
            client: loopback_client(),
            flow_server: agent_runtime::resolve::FlowServerAccess::default(),
            tool_sandbox: agent_runtime::tools::python::ToolSandbox::default(),
            limits: agent_runtime::engine::RunLimits::default(),
        })
    }

    /// The run function (`POST /agents/{agent_id}/run`), its clock `clock`.
    pub fn agent_runs_service(&self, clock: &TestClock) -> platform_api::AgentRunsService {
        self.agent_runs_service_with_flow_server(clock, None)
    }

    /// The run function with `FLOW_SERVER_URL` set to `flow_server_url` (its key in the stack's
    /// flow server secret).
    pub fn agent_runs_service_with_flow_server(
        &self,
        clock: &TestClock,
        flow_server_url: Option<String>,
    ) -> platform_api::AgentRunsService {
        let mut sources = Arc::into_inner(self.run_sources()).expect("a fresh Arc");
        sources.flow_server = agent_runtime::resolve::FlowServerAccess {
            base_url: flow_server_url,
            key: Some((
                aws_sdk_secretsmanager::Client::new(&self.sdk).into(),
                self.setting(platform_api::settings::FLOW_SERVER_SECRET_ID),
            )),
        };
        let runner = agent_runtime::lifecycle::RunLifecycle::new(Arc::new(sources), self.runs(), clock.clock())
            .with_events(self.webhooks().publisher);
        platform_api::AgentRunsService::new(
            self.gate(clock, RateLimit::DEFAULT),
            AgentStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::AGENTS_TABLE)),
            runner,
        )
    }

    /// The runner service (`functions/runner`), its clock `clock`, its runs executed with the
    /// stack's sources (loopback allowed) and queued on the stack's runner queue.
    pub fn runner_service(&self, clock: &TestClock) -> platform_api::RunnerService {
        let runner = agent_runtime::lifecycle::RunLifecycle::new(self.run_sources(), self.runs(), clock.clock())
            .with_events(self.webhooks().publisher);
        let lookup = |name: &str| self.lookup(name);
        platform_api::RunnerService::new(
            self.gate(clock, RateLimit::DEFAULT),
            AgentStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::AGENTS_TABLE)),
            runner,
            self.run_queue(),
            platform_api::runner::Probes::from_settings(&self.aws(), &lookup),
        )
    }

    /// The schedules store.
    pub fn schedules(&self) -> platform_data::schedules::ScheduleStore {
        platform_data::schedules::ScheduleStore::new(
            self.dynamodb.clone(),
            self.setting(platform_api::settings::SCHEDULES_TABLE),
        )
    }

    /// The scheduler, its runs timed by `clock` and recorded on their schedules.
    pub fn scheduler(&self, clock: &TestClock) -> agent_runtime::scheduler::Scheduler {
        let runner = agent_runtime::lifecycle::RunLifecycle::new(self.run_sources(), self.runs(), clock.clock())
            .with_events(self.webhooks().publisher)
            .with_schedules(self.schedules());
        agent_runtime::scheduler::Scheduler::new(
            self.schedules(),
            AgentStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::AGENTS_TABLE)),
            runner,
            self.run_queue(),
        )
        .with_events(self.webhooks().publisher)
    }

    /// The schedules function, its clock `clock`.
    pub fn schedules_service(&self, clock: &TestClock) -> platform_api::SchedulesService {
        platform_api::SchedulesService::new(
            self.gate(clock, RateLimit::DEFAULT),
            self.schedules(),
            AgentStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::AGENTS_TABLE)),
            self.scheduler(clock),
        )
    }

    /// The runner queue of queued runs.
    pub fn run_queue(&self) -> agent_runtime::queue::RunQueue {
        agent_runtime::queue::RunQueue::new(Arc::new(queues::SqsQueue::new(
            aws_sdk_sqs::Client::new(&self.sdk),
            self.setting(platform_api::settings::RUNNER_QUEUE_URL),
        )))
    }

    /// The run store.
    pub fn runs(&self) -> agent_runtime::runs::RunStore {
        agent_runtime::runs::RunStore::new(
            self.dynamodb.clone(),
            self.setting(platform_api::settings::RUNS_TABLE),
            self.setting(platform_api::settings::RUN_EVENTS_TABLE),
            self.setting(platform_api::settings::RUN_STEPS_TABLE),
        )
    }

    /// The tool store.
    pub fn tools(&self) -> ToolStore {
        ToolStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::TOOLS_TABLE))
    }

    /// The tools function, its DynamoDB calls recorded in `calls`.
    pub fn tools_service(&self, clock: &TestClock) -> ToolsService {
        ToolsService::new(
            self.gate(clock, RateLimit::DEFAULT),
            self.tools(),
            agent_runtime::tools::python::ToolSandbox::default(),
            self.tool_secrets(),
        )
    }

    /// The language models function, its DynamoDB calls recorded in `calls`.
    pub fn language_models_service(&self, clock: &TestClock) -> LanguageModelsService {
        LanguageModelsService::new(
            self.gate(clock, RateLimit::DEFAULT),
            LanguageModelStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::LANGUAGE_MODELS_TABLE)),
            platform_api::language_models::language_model_keys(
                aws_sdk_secretsmanager::Client::new(&self.sdk),
                self.setting(platform_api::settings::LANGUAGE_MODEL_SECRET_PREFIX),
            ),
            AgentStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::AGENTS_TABLE)),
        )
    }

    /// The webhook publisher, secrets and URL policy, as the template configures them (with
    /// loopback allowed, as for local development).
    pub fn webhooks(&self) -> platform_api::webhooks::WebhookSettings {
        let mut env = self.env.clone();
        env.insert(platform_api::settings::WEBHOOK_ALLOWED_HOSTS.into(), "127.0.0.1,localhost".into());
        let lookup = |name: &str| env.get(name).cloned();
        platform_api::webhooks::WebhookSettings::from_settings(&self.aws(), &lookup).expect("webhook settings")
    }

    /// The webhooks function.
    pub fn webhooks_service(&self, clock: &TestClock) -> platform_api::WebhooksService {
        platform_api::WebhooksService::new(self.gate(clock, RateLimit::DEFAULT), self.webhooks())
    }

    /// The MCP configuration store.
    pub fn mcp_configs(&self) -> McpConfigStore {
        McpConfigStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::MCP_CONFIGS_TABLE))
    }

    /// The MCP configurations function, its DynamoDB calls recorded in `calls`.
    pub fn mcps_service(&self, clock: &TestClock) -> McpsService {
        McpsService::new(
            self.gate(clock, RateLimit::DEFAULT),
            self.mcp_configs(),
            platform_api::mcps::mcp_secrets(
                aws_sdk_secretsmanager::Client::new(&self.sdk),
                self.setting(platform_api::settings::MCP_SECRET_PREFIX),
            ),
            loopback_client(),
        )
    }

    /// The MCP configurations function with the production address policy (public addresses
    /// only), as in AWS.
    pub fn mcps_service_public_only(&self, clock: &TestClock) -> McpsService {
        McpsService::new(
            self.gate(clock, RateLimit::DEFAULT),
            self.mcp_configs(),
            platform_api::mcps::mcp_secrets(
                aws_sdk_secretsmanager::Client::new(&self.sdk),
                self.setting(platform_api::settings::MCP_SECRET_PREFIX),
            ),
            outbound::TenantClient::new(outbound::AddressPolicy::public_only()),
        )
    }

    /// Imports a document in the admin CLI's format.
    pub async fn import(&self, document: &Value) {
        let json = serde_json::to_vec(document).unwrap();
        let plan = meeting_data::import::prepare(&self.directory(), &json, Utc::now()).await.expect("valid import");
        meeting_data::import::apply(&self.directory(), &self.meetings(), &plan).await.expect("import written");
    }

    /// Creates an application linked to `organizations`; returns its client id and secret.
    pub async fn create_app(&self, organizations: &[i64]) -> (String, String) {
        let pepper = self.pepper();
        let pepper = pepper.get().await.expect("pepper");
        let (app, secret) = ExternalApp::create("Test app", organizations.to_vec(), pepper, Utc::now());
        self.apps().insert(&app).await.expect("app stored");
        (app.client_id, secret)
    }
}

/// Builds a request with an absolute URI, as API Gateway hands it to the function.
pub fn request(method: Method, path_and_query: &str) -> http::request::Builder {
    http::Request::builder().method(method).uri(format!("https://api.test{path_and_query}"))
}

/// Sends a request to a function in-process.
pub async fn send(function: &impl HttpFunction, request: Request) -> Reply {
    let response = function.handle(request).await;
    let (parts, body) = response.into_parts();
    Reply { status: parts.status, headers: parts.headers, text: http_api::body_text(&body) }
}

/// `GET path` with a bearer token.
pub async fn get(function: &impl HttpFunction, path_and_query: &str, token: Option<&str>) -> Reply {
    let mut builder = request(Method::GET, path_and_query);
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    send(function, builder.body(Body::Empty).unwrap()).await
}

/// `POST path` with a form body.
pub async fn post_form(function: &impl HttpFunction, path: &str, form: &[(&str, &str)]) -> Reply {
    let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
    let request = request(Method::POST, path)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::Text(body))
        .unwrap();
    send(function, request).await
}

/// Obtains an access token with form credentials.
pub async fn obtain_token(auth: &AuthService, client_id: &str, secret: &str) -> String {
    let reply = post_form(
        auth,
        "/api/auth/token/",
        &[("grant_type", "client_credentials"), ("client_id", client_id), ("client_secret", secret)],
    )
    .await;
    reply.expect(200)["access_token"].as_str().expect("access_token").to_owned()
}

/// A valid meeting in the import format, with `patch`'s fields replacing the defaults.
pub fn meeting(id: i64, organization_id: i64, host_id: i64, patch: Value) -> Value {
    let mut meeting = serde_json::json!({
        "id": id,
        "organization_id": organization_id,
        "title": format!("Meeting {id}"),
        "location": "",
        "start_time": "2026-01-01T10:00:00Z",
        "end_time": "2026-01-01T11:00:00Z",
        "created_at": "2026-01-01T09:00:00Z",
        "status": "past",
        "summary_complete": false,
        "host_id": host_id,
        "language": "en",
        "keywords": [],
        "num_cluster": 1,
        "participants": [{"user_id": host_id}],
        "calendar_event": null,
        "transcript": [],
        "summary": null,
        "notes": "",
        "recordings": []
    });
    if let (Value::Object(fields), Value::Object(patch)) = (&mut meeting, patch) {
        // A later start without an explicit end lasts an hour.
        if let (Some(start), false) = (patch.get("start_time").and_then(Value::as_str), patch.contains_key("end_time"))
        {
            let start: DateTime<Utc> = start.parse().expect("start_time");
            fields.insert("end_time".into(), Value::String((start + chrono::Duration::hours(1)).to_rfc3339()));
        }
        fields.extend(patch);
    }
    meeting
}

/// The demo fixture shipped with the project.
pub fn demo_fixture() -> Value {
    serde_json::from_str(include_str!("../../fixtures/demo-meetings.json")).unwrap()
}

/// The calendar event of demo meeting 1001 as the API renders it.
pub fn demo_calendar_event() -> Value {
    serde_json::json!({
        "event_id": "evt-8f2c",
        "summary": "Weekly product sync",
        "organizer_email": "ada@northwind.test",
        "attendees": [
            {"email": "ada@northwind.test", "display_name": "Ada Moreno", "response_status": "accepted"},
            {"email": "ben@northwind.test", "display_name": null, "response_status": "tentative"},
            {"email": "dana@partner.test", "display_name": "Dana Smith", "response_status": "needsAction"}
        ],
        "meeting_link": "https://meet.example.test/abc-defg-hij",
        "start_time": "2026-11-02T09:00:00Z",
        "end_time": "2026-11-02T09:45:00Z"
    })
}

/// The guarded tenant client allowing loopback, as `make dev` configures it: test servers run
/// on 127.0.0.1.
pub fn loopback_client() -> outbound::TenantClient {
    let policy = outbound::AddressPolicy::from_setting(Some(LOOPBACK_ALLOWED)).expect("loopback policy");
    outbound::TenantClient::new(policy)
}

/// The allow-list of local development and tests.
pub const LOOPBACK_ALLOWED: &str = "127.0.0.0/8,::1,localhost";

/// The template parameters `make dev` sets (see the Makefile), and tests too: test servers run on
/// 127.0.0.1, so tenant requests and webhooks may reach loopback.
pub const LOCAL_PARAMETERS: [(&str, &str); 2] =
    [("OutboundAllowedHosts", LOOPBACK_ALLOWED), ("WebhookAllowedHosts", "127.0.0.1,localhost")];

/// Creates a record through a backend function (`POST path` with `body`, expecting 201) and
/// returns its id.
pub async fn create_record(function: &impl HttpFunction, path: &str, key: &str, body: Value) -> String {
    let reply = call_api(function, Method::POST, path, key, Some(body)).await;
    reply.expect(201)["data"]["id"].as_str().expect("an id").to_owned()
}

/// Sends a request to a streaming function; the response's body is read as the test wants.
pub async fn send_streaming(
    function: &impl http_api::StreamingFunction,
    request: Request,
) -> http::Response<http_api::StreamBody> {
    function.handle(request).await
}

/// A worker invocation of `owner` with ten minutes left and a minute's step budget (a run goes
/// on until it ends, without pausing).
pub fn worker_invocation(owner: &str) -> agent_runtime::lifecycle::Invocation {
    agent_runtime::lifecycle::Invocation {
        owner: owner.to_owned(),
        deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(600),
        step_budget: std::time::Duration::from_secs(60),
    }
}

/// A request with an API key and an optional JSON body to a streaming function (the runner),
/// its whole body read.
pub async fn call_streaming_api(
    function: &impl http_api::StreamingFunction,
    method: Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> Reply {
    use http_body_util::BodyExt;
    let builder = request(method, path).header("x-api-key", key).header("content-type", "application/json");
    let body = body.map_or(Body::Empty, |body| Body::Text(body.to_string()));
    let (parts, body) = function.handle(builder.body(body).unwrap()).await.into_parts();
    let bytes = body.collect().await.map(|collected| collected.to_bytes()).unwrap_or_default();
    Reply { status: parts.status, headers: parts.headers, text: String::from_utf8_lossy(&bytes).into_owned() }
}

/// A request to a backend function with an API key and an optional JSON body.
pub async fn call_api(
    function: &impl HttpFunction,
    method: Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> Reply {
    let builder = request(method, path).header("x-api-key", key).header("content-type", "application/json");
    let body = body.map_or(Body::Empty, |body| Body::Text(body.to_string()));
    send(function, builder.body(body).unwrap()).await
}
