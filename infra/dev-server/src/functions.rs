//! Every Rust function of `template.yaml`, by its binary name, built as its `main.rs` builds it:
//! `from_settings` over the environment the template gives it. The dev server serves the HTTP
//! ones; the tests build every one of them here, so a new function is wired in one place.

use agent_runtime::queue::RunWorker;
use agent_runtime::scheduler::Scheduler;
use aws_env::settings::{Lookup, SettingError};
use http_api::gateway::{AtGateway, CORS_ALLOWED_ORIGINS, Cors, CorsError};
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
    /// Answers API Gateway's requests whole.
    Http(Arc<dyn HttpFunction>),
    /// Answers with responses API Gateway streams.
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
    /// Its CORS origins are not origins.
    #[error(transparent)]
    Cors(#[from] CorsError),
    /// No function of the project has this binary name.
    #[error("no function is built from binary {0:?}: add it to dev_server::functions")]
    Unknown(String),
}

/// The function whose binary is `binary`, built from `aws` and the settings `lookup` gives. An
/// HTTP function is served [`AtGateway`], as `run_on_lambda` serves it.
pub fn build_function(binary: &str, aws: &aws_env::Clients, lookup: Lookup) -> Result<Function, BuildError> {
    let cors = || Cors::parse(&lookup(CORS_ALLOWED_ORIGINS).unwrap_or_default());
    Ok(match binary {
        "auth" => http(AuthService::from_settings(aws, lookup)?, cors()?),
        "meetings" => http(MeetingsService::from_settings(aws, lookup)?, cors()?),
        "external-webhooks" => http(meeting_api::ExternalWebhooksService::from_settings(aws, lookup)?, cors()?),
        "health" => http(HealthService::from_settings(aws, lookup)?, cors()?),
        "agents" => http(AgentsService::from_settings(aws, lookup)?, cors()?),
        "tools" => http(ToolsService::from_settings(aws, lookup)?, cors()?),
        "mcps" => http(McpsService::from_settings(aws, lookup)?, cors()?),
        "webhooks" => http(WebhooksService::from_settings(aws, lookup)?, cors()?),
        "language-models" => http(LanguageModelsService::from_settings(aws, lookup)?, cors()?),
        "spend" => http(platform_api::SpendService::from_settings(aws, lookup)?, cors()?),
        "schedules" => http(SchedulesService::from_settings(aws, lookup)?, cors()?),
        "agent-runs" => streaming(AgentRunsService::from_settings(aws, lookup)?, cors()?),
        "runner" => streaming(RunnerService::from_settings(aws, lookup)?, cors()?),
        "docs" => http(api_docs::DocsService::platform(), cors()?),
        "runner-docs" => http(api_docs::DocsService::runner(), cors()?),
        "runner-worker" => {
            Function::RunWorker(Box::new(platform_api::agent_runs::run_worker_from_settings(aws, lookup)?))
        }
        "scheduler" => Function::Scheduler(Box::new(platform_api::schedules::scheduler_from_settings(aws, lookup)?)),
        "webhook-delivery" => {
            let audience = meeting_data::store::ApplicationAudience::from_settings(aws, lookup)?;
            Function::WebhookDelivery(Box::new(
                platform_api::webhooks::deliverer_from_settings(aws, lookup)?.with_audience(audience),
            ))
        }
        "webhook-sweeper" => {
            Function::WebhookSweeper(Box::new(platform_api::webhooks::sweeper_from_settings(aws, lookup)?))
        }
        other => return Err(BuildError::Unknown(other.to_owned())),
    })
}

/// An HTTP function as API Gateway reaches it.
fn http(function: impl HttpFunction, cors: Cors) -> Function {
    Function::Http(Arc::new(AtGateway::new(function, cors)))
}

/// A streaming function as API Gateway reaches it.
fn streaming(function: impl StreamingFunction, cors: Cors) -> Function {
    Function::Streaming(Arc::new(AtGateway::new(function, cors)))
}
