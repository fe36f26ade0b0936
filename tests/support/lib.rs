//! Test support: an isolated stack per test on the local AWS endpoint, whose functions are built
//! as their `main.rs` builds them (`TestStack::service`, `TestStack::client`), and a client that
//! calls their handlers in-process exactly as Lambda and the dev server do, each call stating the
//! answer it expects (`client`).

pub mod a2a_server;
pub mod bedrock_server;
pub mod client;
pub mod iam;
pub mod lambda_server;
pub mod langflow_server;
pub mod local_server;
pub mod mcp_server;
pub mod model_server;
pub mod openapi;
pub mod otlp_receiver;
pub mod python_server;
pub mod runtime_api;
pub mod served_api;
pub mod services;

pub use client::{Call, Reply, TestClient, read_until};
pub use served_api::ServedApi;
pub use services::{Routed, Service};

use aws_env::settings::{Lookup, SettingError};
use aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use chrono::{DateTime, Utc};
use credentials::PepperSource;
use http::Method;
use meeting_data::access::ExternalApp;
use meeting_data::clock::Clock;
use meeting_data::settings;
use meeting_data::store::{AppStore, DirectoryStore, MeetingStore};
use platform_data::api_keys::{ApiKey, ApiKeyStore};
use platform_data::mcp_configs::McpConfigStore;
use platform_data::tools::ToolStore;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One test's own tables and secret, named with a unique prefix.
#[derive(Clone)]
pub struct TestStack {
    pub sdk: aws_config::SdkConfig,
    /// The environment `template.yaml` gives the functions, resolved for this stack, with the
    /// parameters `make dev` sets (`local_template`).
    pub env: BTreeMap<String, String>,
    /// DynamoDB client whose calls are recorded in `calls`.
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub calls: CallLog,
    pub prefix: String,
    /// What `with_settings` set: a function built by `service` reads these over its own
    /// template environment.
    pub overrides: BTreeMap<String, String>,
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
    /// Creates every table, queue and secret of `template.yaml` under a fresh prefix.
    pub async fn new() -> Self {
        defer_logs_to_scoped_subscribers();
        assert!(
            std::env::var("AWS_ENDPOINT_URL").is_ok(),
            "integration tests need a local AWS endpoint: run them with `make test`"
        );
        let sdk = aws_env::load().await;
        let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("t{}-{}-{unique}-", std::process::id(), Utc::now().timestamp_micros() % 1_000_000_000);
        let template = local_template();
        stack::bootstrap(&sdk, &template, &prefix).await.expect("bootstrap the test stack");
        let calls = CallLog::default();
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(calls.clone()).build(),
        );
        Self { env: template.stack_environment(&prefix), sdk, dynamodb, calls, prefix, overrides: BTreeMap::new() }
    }

    /// The stack another test process made under `prefix` (a test's second process).
    pub async fn attach(prefix: &str) -> Self {
        defer_logs_to_scoped_subscribers();
        let sdk = aws_env::load().await;
        let template = local_template();
        let calls = CallLog::default();
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(calls.clone()).build(),
        );
        let env = template.stack_environment(prefix);
        Self { env, sdk, dynamodb, calls, prefix: prefix.to_owned(), overrides: BTreeMap::new() }
    }

    /// The SDK clients a function of this stack builds, DynamoDB's recording its calls in `calls`.
    pub fn aws(&self) -> aws_env::Clients {
        aws_env::Clients::with_dynamodb(self.sdk.clone(), self.dynamodb.clone())
    }

    /// This stack with `settings` replacing its environment's (a tighter rate limit, a flow
    /// server, the production address policy, a missing table): what `service` and `client`
    /// build reads them.
    pub fn with_settings(&self, settings: &[(&str, &str)]) -> TestStack {
        let mut stack = self.clone();
        let settings = settings.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned()));
        stack.overrides.extend(settings);
        stack.env.extend(stack.overrides.clone());
        stack
    }

    /// This stack with its functions' Bedrock Runtime endpoint at `url` (a stand-in), as
    /// `AWS_ENDPOINT_URL_BEDROCK_RUNTIME` sets it in a function's environment.
    pub fn with_bedrock_endpoint(&self, url: &str) -> TestStack {
        let mut stack = self.clone();
        let endpoint = BedrockEndpoint { url: url.to_owned(), inner: self.sdk.clone() };
        stack.sdk = self.sdk.to_builder().service_config(endpoint).build();
        stack
    }

    /// `S` as its function's `main.rs` builds it: `from_settings` over this stack's environment,
    /// on `aws()`, its time read from `clock`.
    pub fn service<S: Service>(&self, clock: &TestClock) -> S {
        self.build_as(S::FUNCTION, S::from_settings).with_clock(clock.clock())
    }

    /// A client of the function `S`, built as `service` builds it.
    pub fn client<S: Routed>(&self, clock: &TestClock) -> TestClient {
        self.service::<S>(clock).into_client()
    }

    /// The webhook publisher, endpoint secrets and URL policy, as the webhook functions build
    /// them (the delivery worker's parts: tests give it their clock and no jitter).
    pub fn webhook_settings(&self) -> platform_api::webhooks::WebhookSettings {
        self.build_as(Some("WebhookDeliveryFunction"), platform_api::webhooks::WebhookSettings::from_settings)
    }

    /// The delivery function's bound on each endpoint owner's attempts in flight, as its
    /// `main.rs` builds it (`QUOTA_WEBHOOK_DELIVERIES_IN_FLIGHT` from `with_settings`).
    pub fn delivery_in_flight(&self) -> webhooks::fairness::InFlight {
        self.build_as(Some("WebhookDeliveryFunction"), platform_api::webhooks::in_flight_from_settings)
    }

    /// Who the delivery function lets receive meeting events, as its `main.rs` builds it.
    pub fn delivery_audience(&self) -> Arc<meeting_data::store::ApplicationAudience> {
        self.build_as(Some("WebhookDeliveryFunction"), meeting_data::store::ApplicationAudience::from_settings)
    }

    /// The webhook publisher of `function` (a template logical id), as its `main.rs` builds it.
    pub fn publisher(&self, function: &'static str) -> webhooks::publisher::Publisher {
        self.build_as(Some(function), platform_api::webhooks::publisher_from_settings)
    }

    /// What `build` makes of this stack's environment, on `aws()`; the AWS calls of what it
    /// builds are recorded for `function` (a template logical id) for the IAM test (`iam`).
    fn build_as<T>(
        &self,
        function: Option<&'static str>,
        build: impl FnOnce(&aws_env::Clients, Lookup) -> Result<T, SettingError>,
    ) -> T {
        // A function reads only what the template gives it (and what the test set), as in
        // Lambda; a part several functions build reads the whole stack's environment.
        let own = function.map(|function| {
            let template = &*LOCAL_TEMPLATE;
            let spec = template.functions.iter().find(|spec| spec.logical_id == function);
            let spec = spec.unwrap_or_else(|| panic!("no function {function} in template.yaml"));
            let mut env = template.environment(spec, &self.prefix);
            env.extend(self.overrides.clone());
            env
        });
        let lookup = |name: &str| own.as_ref().unwrap_or(&self.env).get(name).cloned();
        let aws = match (function, self.sdk.http_client()) {
            (Some(function), Some(http)) => {
                let http = iam::recording_client(http, function);
                let sdk = self.sdk.to_builder().http_client(http.clone()).build();
                let dynamodb = self.dynamodb.config().to_builder().http_client(http).build();
                aws_env::Clients::with_dynamodb(sdk, aws_sdk_dynamodb::Client::from_conf(dynamodb))
            }
            _ => self.aws(),
        };
        build(&aws, &lookup).unwrap_or_else(|err| panic!("the stack's settings: {err}"))
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

    /// The meeting store, its writes announced to external applications' webhooks as the admin
    /// CLI's are.
    pub fn meetings(&self) -> MeetingStore {
        let outbox = self.build_as(None, webhooks::settings::publisher_from_settings);
        MeetingStore::new(self.dynamodb.clone(), self.setting(settings::MEETINGS_TABLE)).with_outbox(outbox)
    }

    /// The directory store.
    pub fn directory(&self) -> DirectoryStore {
        DirectoryStore::new(self.dynamodb.clone(), self.setting(settings::DIRECTORY_TABLE))
    }

    /// The pepper source of this stack.
    pub fn pepper(&self) -> PepperSource {
        PepperSource::new(aws_sdk_secretsmanager::Client::new(&self.sdk), self.setting(settings::PEPPER_SECRET_ID))
    }

    /// Creates an API key for `account_id` (the tests' accounts are bare UUIDs); returns the key.
    pub async fn api_key(&self, account_id: uuid::Uuid) -> String {
        let pepper = self.pepper();
        let pepper = pepper.get().await.expect("pepper");
        let (record, key) = ApiKey::create(account_id.into(), "test key", pepper, Utc::now());
        self.api_keys().insert(&record).await.expect("key stored");
        key
    }

    /// The account a key belongs to.
    pub async fn account_of(&self, key: &str) -> platform_data::ids::AccountId {
        let key_id = platform_data::api_keys::key_id_of(key).expect("a key of this stack");
        self.api_keys().get(key_id).await.expect("key read").expect("key stored").account_id
    }

    /// Creates a language model named `name` of the account `key` belongs to, served at
    /// `base_url` (a local model server); returns its id.
    pub async fn language_model(&self, clock: &TestClock, key: &str, name: &str, base_url: &str) -> String {
        self.client::<platform_api::LanguageModelsService>(clock)
            .with_key(key)
            .post(
                "/language-models",
                serde_json::json!({"name": name, "provider": "openai_compatible", "model_name": "m", "base_url": base_url}),
            )
            .created()
            .await
    }

    /// The API key store.
    pub fn api_keys(&self) -> ApiKeyStore {
        ApiKeyStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::API_KEYS_TABLE))
    }

    /// Where secret headers of `http` tools and of agents' `tool_configs` are kept.
    pub fn tool_secrets(&self) -> platform_data::tools::ToolSecrets {
        platform_data::tools::ToolSecrets::new(
            aws_sdk_secretsmanager::Client::new(&self.sdk),
            &self.setting(platform_api::settings::TOOL_SECRET_PREFIX),
        )
    }

    /// The agents store.
    pub fn agents(&self) -> platform_data::agents::AgentStore {
        platform_data::agents::AgentStore::new(
            self.dynamodb.clone(),
            self.setting(platform_api::settings::AGENTS_TABLE),
        )
    }

    /// The schedules store.
    pub fn schedules(&self) -> platform_data::schedules::ScheduleStore {
        platform_data::schedules::ScheduleStore::new(
            self.dynamodb.clone(),
            self.setting(platform_api::settings::SCHEDULES_TABLE),
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
        platform_api::settings::run_store(self.dynamodb.clone(), &|name| Some(self.setting(name)))
            .expect("the stack's run settings")
    }

    /// The tool store.
    pub fn tools(&self) -> ToolStore {
        ToolStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::TOOLS_TABLE))
    }

    /// The MCP configuration store.
    pub fn mcp_configs(&self) -> McpConfigStore {
        McpConfigStore::new(self.dynamodb.clone(), self.setting(platform_api::settings::MCP_CONFIGS_TABLE))
    }

    /// Imports a document in the admin CLI's format, its recording files read from `fixtures/`
    /// (the demo fixture's `recordings/1002.wav`).
    pub async fn import(&self, document: &Value) {
        self.import_from(document, Some(std::path::Path::new(FIXTURES_DIR))).await;
    }

    /// Imports a document whose recording files are read relative to `base`, uploading them
    /// first, as `admin import` does.
    pub async fn import_from(&self, document: &Value, base: Option<&std::path::Path>) {
        let json = serde_json::to_vec(document).unwrap();
        let plan =
            meeting_data::import::prepare(&self.directory(), &json, base, Utc::now()).await.expect("valid import");
        let recordings = object_storage::transfer::Transfer::new(self.recordings_bucket());
        meeting_data::import::upload(&recordings, &plan).await.expect("recording files uploaded");
        meeting_data::import::apply(&self.directory(), &self.meetings(), &plan).await.expect("import written");
    }

    /// The stack's recordings bucket, as the tools reach it.
    pub fn recordings_bucket(&self) -> object_storage::Bucket {
        object_storage::Bucket::new(self.setting(meeting_data::settings::RECORDINGS_BUCKET), &self.sdk)
    }

    /// Creates an application linked to `organizations`; returns its client id and secret.
    pub async fn create_app(&self, organizations: &[i64]) -> (String, String) {
        self.create_app_with_scopes(organizations, &[]).await
    }

    /// An application granted `scopes` besides `meetings:read`.
    pub async fn create_app_with_scopes(&self, organizations: &[i64], scopes: &[&str]) -> (String, String) {
        let pepper = self.pepper();
        let pepper = pepper.get().await.expect("pepper");
        let (mut app, secret) = ExternalApp::create("Test app", organizations.to_vec(), pepper, Utc::now());
        app.extra_scopes = scopes.iter().map(|scope| (*scope).to_owned()).collect();
        self.apps().insert(&app).await.expect("app stored");
        (app.client_id, secret)
    }
}

/// `template.yaml` with the parameters `make dev` sets (see the Makefile), as tests run it: test
/// servers run on 127.0.0.1, so tenant requests and webhooks may reach loopback.
/// `local_template()`, read once.
static LOCAL_TEMPLATE: std::sync::LazyLock<stack::Template> = std::sync::LazyLock::new(local_template);

pub fn local_template() -> stack::Template {
    let mut template = stack::Template::embedded().expect("template.yaml parses");
    template.override_parameters(|name| match name {
        "OutboundAllowedHosts" => Some(LOOPBACK_ALLOWED.to_owned()),
        "WebhookAllowedHosts" => Some("127.0.0.1,localhost".to_owned()),
        _ => None,
    });
    template
}

/// A route's path with every variable (`{agent_id}`, `{id}`) an id, as a client would send it.
pub fn concrete_path(route_path: &str) -> String {
    let id = "8f0e2a5c-6f7d-4b8a-9c1d-2e3f4a5b6c7d";
    route_path
        .split('/')
        .map(|segment| if segment.starts_with('{') { id } else { segment })
        .collect::<Vec<_>>()
        .join("/")
}

/// Builds a request with an absolute URI, as API Gateway hands it to the function.
pub fn request(method: Method, path_and_query: &str) -> http::request::Builder {
    http::Request::builder().method(method).uri(format!("https://api.test{path_and_query}"))
}

/// Obtains an access token from the auth function with form credentials.
/// A token asking for `scope` (space-separated scopes).
pub async fn obtain_scoped_token(auth: &TestClient, client_id: &str, secret: &str, scope: &str) -> String {
    let form =
        [("grant_type", "client_credentials"), ("client_id", client_id), ("client_secret", secret), ("scope", scope)];
    let body = auth.post_form("/api/auth/token/", &form).expect(200).await;
    assert_eq!(body["scope"], scope);
    body["access_token"].as_str().expect("access_token").to_owned()
}

pub async fn obtain_token(auth: &TestClient, client_id: &str, secret: &str) -> String {
    let form = [("grant_type", "client_credentials"), ("client_id", client_id), ("client_secret", secret)];
    let body = auth.post_form("/api/auth/token/", &form).expect(200).await;
    body["access_token"].as_str().expect("access_token").to_owned()
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
/// The demo fixture's directory: the recording files it names are under it.
pub const FIXTURES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures");

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

/// The allow-list of local development and tests (`make dev`'s `OutboundAllowedHosts`).
const LOOPBACK_ALLOWED: &str = "127.0.0.0/8,::1,localhost";

/// A worker invocation of `owner` with ten minutes left and a minute's step budget (a run goes
/// on until it ends, without pausing).
pub fn worker_invocation(owner: &str) -> agent_runtime::lifecycle::Invocation {
    agent_runtime::lifecycle::Invocation {
        owner: owner.to_owned(),
        deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(600),
        step_budget: std::time::Duration::from_secs(60),
    }
}

/// Whether headless Chromium is there for the browser tests (`CHROMIUM`, which `make test-browser`
/// sets); when it is not, says the test is skipped so that a plain `make test` passes without it.
pub fn chromium_available() -> bool {
    let available = std::env::var_os("CHROMIUM").is_some();
    if !available {
        eprintln!("skipped: no CHROMIUM; `make test-browser` runs this in headless Chromium");
    }
    available
}

/// Answers Bedrock Runtime's endpoint variable with a stand-in's URL, every other setting as the
/// configuration it wraps does.
#[derive(Debug)]
struct BedrockEndpoint {
    url: String,
    inner: aws_config::SdkConfig,
}

impl aws_types::service_config::LoadServiceConfig for BedrockEndpoint {
    fn load_config(&self, key: aws_types::service_config::ServiceConfigKey<'_>) -> Option<String> {
        if key.service_id() == "Bedrock Runtime" && key.env() == "AWS_ENDPOINT_URL" {
            return Some(self.url.clone());
        }
        self.inner.service_config().and_then(|services| services.load_config(key))
    }
}
