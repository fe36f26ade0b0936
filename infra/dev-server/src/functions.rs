//! Every Rust function of `template.yaml`, by its binary name, built as its `main.rs` builds it:
//! `from_settings` over the environment the template gives it. The dev server serves the HTTP
//! ones; the tests build every one of them here, so a new function is wired in one place.

use agent_runtime::queue::RunWorker;
use agent_runtime::scheduler::Scheduler;
use aws_env::settings::{Lookup, SettingError};
use http_api::{HttpFunction, StreamingFunction};
use meeting_api::{AuthService, MeetingsService};
use platform_api::{
    AgentRunsService, AgentsService, HealthService, LanguageModelsService, McpsService, RunnerService,
    SchedulesService, ToolsService, WebhooksService,
};
use std::sync::Arc;
use webhooks::delivery::Deliverer;
use webhooks::sweeper::Sweeper;

/// A built function, by the way it is invoked (the workers boxed: they hold many stores).
pub enum Function {
    /// Answers API Gateway's requests.
    Http(Arc<dyn HttpFunction>),
    /// Answers with streamed responses (through its function URL).
    Streaming(Arc<dyn StreamingFunction>),
    /// `runner-worker`: executes the runs of the runner queue.
    RunWorker(Box<RunWorker>),
    /// `scheduler`: starts the runs of due schedules.
    Scheduler(Box<Scheduler>),
    /// `webhook-delivery`: delivers queued webhook deliveries.
    WebhookDelivery(Box<Deliverer>),
    /// `webhook-sweeper`: queues lost webhook deliveries again.
    WebhookSweeper(Box<Sweeper>),
}

/// Why a function could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A setting of its environment is missing or invalid.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// No function of the project has this binary name.
    #[error("no function is built from binary {0:?}: add it to dev_server::functions")]
    Unknown(String),
}

/// The function whose binary is `binary`, built from `aws` and the settings `lookup` gives.
pub fn build_function(binary: &str, aws: &aws_env::Clients, lookup: Lookup) -> Result<Function, BuildError> {
    let http = |function: Arc<dyn HttpFunction>| Function::Http(function);
    let streaming = |function: Arc<dyn StreamingFunction>| Function::Streaming(function);
    Ok(match binary {
        "auth" => http(Arc::new(AuthService::from_settings(aws, lookup)?)),
        "meetings" => http(Arc::new(MeetingsService::from_settings(aws, lookup)?)),
        "health" => http(Arc::new(HealthService::from_settings(aws, lookup)?)),
        "agents" => http(Arc::new(AgentsService::from_settings(aws, lookup)?)),
        "tools" => http(Arc::new(ToolsService::from_settings(aws, lookup)?)),
        "mcps" => http(Arc::new(McpsService::from_settings(aws, lookup)?)),
        "webhooks" => http(Arc::new(WebhooksService::from_settings(aws, lookup)?)),
        "language-models" => http(Arc::new(LanguageModelsService::from_settings(aws, lookup)?)),
        "schedules" => http(Arc::new(SchedulesService::from_settings(aws, lookup)?)),
        "agent-runs" => streaming(Arc::new(AgentRunsService::from_settings(aws, lookup)?)),
        "runner" => streaming(Arc::new(RunnerService::from_settings(aws, lookup)?)),
        "runner-worker" => {
            Function::RunWorker(Box::new(platform_api::agent_runs::run_worker_from_settings(aws, lookup)?))
        }
        "scheduler" => Function::Scheduler(Box::new(platform_api::schedules::scheduler_from_settings(aws, lookup)?)),
        "webhook-delivery" => Function::WebhookDelivery(Box::new(
            platform_api::webhooks::WebhookSettings::from_settings(aws, lookup)?.into_deliverer(),
        )),
        "webhook-sweeper" => {
            Function::WebhookSweeper(Box::new(platform_api::webhooks::sweeper_from_settings(aws, lookup)?))
        }
        other => return Err(BuildError::Unknown(other.to_owned())),
    })
}
