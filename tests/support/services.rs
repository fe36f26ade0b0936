//! What tests build as the functions build it: each type's `from_settings`, the one its
//! function's `main.rs` calls (see `dev_server::functions`), and a clock tests move.

use crate::client::TestClient;
use agent_runtime::lifecycle::RunLifecycle;
use agent_runtime::queue::RunWorker;
use agent_runtime::scheduler::Scheduler;
use aws_env::clock::Clock;
use aws_env::settings::{Lookup, SettingError};
use meeting_api::{AuthService, ExternalWebhooksService, MeetingsService};
use platform_api::{
    AgentRunsService, AgentsService, Gate, HealthService, LanguageModelsService, McpsService, RunnerService,
    SchedulesService, SpendService, ToolsService, WebhooksService,
};
use webhooks::sweeper::Sweeper;

/// A function's service, or a part of one, built from its settings on a given clock.
pub trait Service: Sized {
    /// The template function (logical id) this is, whose AWS calls the IAM test checks against
    /// its policy; `None` for a part several functions build.
    const FUNCTION: Option<&'static str>;

    /// Built as the function builds it, from `aws` and the settings `lookup` gives.
    fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError>;

    /// The same, reading the time from `clock` (its gate, and the runs it starts).
    fn with_clock(self, clock: Clock) -> Self;
}

/// A service tests call over HTTP.
pub trait Routed: Service {
    /// A client calling it (presenting no credentials yet).
    fn into_client(self) -> TestClient;
}

/// `Service` through each type's own `from_settings` and `with_clock`.
macro_rules! services {
    ($($service:ty => $from_settings:path, $function:expr);* $(;)?) => {$(
        impl Service for $service {
            const FUNCTION: Option<&'static str> = $function;

            fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
                $from_settings(aws, lookup)
            }

            fn with_clock(self, clock: Clock) -> Self {
                <$service>::with_clock(self, clock)
            }
        }
    )*};
}

services! {
    AuthService => AuthService::from_settings, Some("AuthFunction");
    MeetingsService => MeetingsService::from_settings, Some("MeetingsFunction");
    ExternalWebhooksService => ExternalWebhooksService::from_settings, Some("ExternalWebhooksFunction");
    HealthService => HealthService::from_settings, Some("HealthFunction");
    AgentsService => AgentsService::from_settings, Some("AgentsFunction");
    ToolsService => ToolsService::from_settings, Some("ToolsFunction");
    McpsService => McpsService::from_settings, Some("McpsFunction");
    WebhooksService => WebhooksService::from_settings, Some("WebhooksFunction");
    LanguageModelsService => LanguageModelsService::from_settings, Some("LanguageModelsFunction");
    SpendService => SpendService::from_settings, Some("SpendFunction");
    SchedulesService => SchedulesService::from_settings, Some("SchedulesFunction");
    AgentRunsService => AgentRunsService::from_settings, Some("AgentRunsFunction");
    RunnerService => RunnerService::from_settings, Some("RunnerFunction");
    Gate => Gate::from_settings, None;
    RunLifecycle => platform_api::agent_runs::lifecycle_from_settings, None;
    RunWorker => platform_api::agent_runs::run_worker_from_settings, Some("RunnerWorkerFunction");
    Scheduler => platform_api::schedules::scheduler_from_settings, Some("SchedulerFunction");
}

impl Service for Sweeper {
    const FUNCTION: Option<&'static str> = Some("WebhookSweeperFunction");

    fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        platform_api::webhooks::sweeper_from_settings(aws, lookup)
    }

    fn with_clock(self, clock: Clock) -> Self {
        Self { clock, ..self }
    }
}

/// `Routed` for HTTP functions (`TestClient::new`) and streaming ones (`TestClient::streaming`).
macro_rules! routed {
    ($constructor:ident: $($service:ty),*) => {$(
        impl Routed for $service {
            fn into_client(self) -> TestClient {
                TestClient::$constructor(self)
            }
        }
    )*};
}

routed!(new: AuthService, MeetingsService, ExternalWebhooksService, HealthService, AgentsService, ToolsService, McpsService, WebhooksService,
    LanguageModelsService, SchedulesService, SpendService);
routed!(streaming: AgentRunsService, RunnerService);
