//! Names of the environment variables the template gives the platform functions.

/// `ApiKeysTable` name.
pub const API_KEYS_TABLE: &str = "API_KEYS_TABLE";
/// `AgentsTable` name.
pub const AGENTS_TABLE: &str = "AGENTS_TABLE";
/// `LanguageModelsTable` name.
pub const LANGUAGE_MODELS_TABLE: &str = "LANGUAGE_MODELS_TABLE";
/// Secrets Manager name prefix of language model API keys.
pub const LANGUAGE_MODEL_SECRET_PREFIX: &str = "LANGUAGE_MODEL_SECRET_PREFIX";
/// `McpConfigsTable` name.
pub const MCP_CONFIGS_TABLE: &str = "MCP_CONFIGS_TABLE";
/// Secrets Manager name prefix of MCP secret headers.
pub const MCP_SECRET_PREFIX: &str = "MCP_SECRET_PREFIX";
/// Base URL of the Langflow-compatible flow server (empty: none configured).
pub const FLOW_SERVER_URL: &str = "FLOW_SERVER_URL";
/// Secrets Manager id of the flow server's API key.
pub const FLOW_SERVER_SECRET_ID: &str = "FLOW_SERVER_SECRET_ID";
/// `ToolsTable` name.
pub const TOOLS_TABLE: &str = "TOOLS_TABLE";
/// Secrets Manager name prefix of `http` tools' and agents' `tool_configs` secret headers.
pub const TOOL_SECRET_PREFIX: &str = "TOOL_SECRET_PREFIX";
/// `RateLimitsTable` name.
pub const RATE_LIMITS_TABLE: &str = "RATE_LIMITS_TABLE";
/// `QuotasTable` name: per-account leases and record counters (`storage::quota`).
pub const QUOTAS_TABLE: &str = "QUOTAS_TABLE";
/// Most runs of one account executing at once (`QuotaConcurrentRuns`).
pub const QUOTA_CONCURRENT_RUNS: &str = "QUOTA_CONCURRENT_RUNS";
/// Most queued and scheduled runs of one account in flight (`QuotaQueuedRuns`).
pub const QUOTA_QUEUED_RUNS: &str = "QUOTA_QUEUED_RUNS";
/// Most run streams of one account followed at once (`QuotaStreamFollowers`).
pub const QUOTA_STREAM_FOLLOWERS: &str = "QUOTA_STREAM_FOLLOWERS";
/// Most agents of one account (`QuotaAgents`).
pub const QUOTA_AGENTS: &str = "QUOTA_AGENTS";
/// Most schedules of one account (`QuotaSchedules`).
pub const QUOTA_SCHEDULES: &str = "QUOTA_SCHEDULES";
/// Most tools of one account (`QuotaTools`).
pub const QUOTA_TOOLS: &str = "QUOTA_TOOLS";
/// Most language models of one account (`QuotaLanguageModels`).
pub const QUOTA_LANGUAGE_MODELS: &str = "QUOTA_LANGUAGE_MODELS";
/// Most MCP configurations of one account (`QuotaMcpConfigs`).
pub const QUOTA_MCP_CONFIGS: &str = "QUOTA_MCP_CONFIGS";
/// Most custom-tool calls of one account in the tool sandbox at once (`QuotaSandboxCalls`;
/// `agent_runtime::tools::python::SANDBOX_CALLS_QUOTA`).
pub const QUOTA_SANDBOX_CALLS: &str = "QUOTA_SANDBOX_CALLS";
/// Most webhook delivery attempts of one endpoint owner in flight at once
/// (`QuotaWebhookDeliveriesInFlight`; `webhooks::fairness`).
pub const QUOTA_WEBHOOK_DELIVERIES_IN_FLIGHT: &str = "QUOTA_WEBHOOK_DELIVERIES_IN_FLIGHT";
/// Secrets Manager id of the hashing pepper (shared with the meeting API).
pub const PEPPER_SECRET_ID: &str = "PEPPER_SECRET_ID";
/// Bucket capacity per API key (default 200).
pub const RATE_LIMIT_CAPACITY: &str = "RATE_LIMIT_CAPACITY";
/// Refill per minute per API key (default 100).
pub const RATE_LIMIT_PER_MINUTE: &str = "RATE_LIMIT_PER_MINUTE";
/// `RunsTable` name.
pub const RUNS_TABLE: &str = "RUNS_TABLE";
/// `RunEventsTable` name.
pub const RUN_EVENTS_TABLE: &str = "RUN_EVENTS_TABLE";
/// `RunnerQueue` URL (locally its name): queued runs for the `runner-worker`.
pub const RUNNER_QUEUE_URL: &str = "RUNNER_QUEUE_URL";
/// `RunnerDeadLetterQueue` URL (locally its name): probed, with its depth, by the runner's
/// detailed health check.
pub const RUNNER_DEAD_LETTER_QUEUE_URL: &str = "RUNNER_DEAD_LETTER_QUEUE_URL";
/// `SchedulesTable` name.
pub const SCHEDULES_TABLE: &str = "SCHEDULES_TABLE";
/// `RunStepsTable` name.
pub const RUN_STEPS_TABLE: &str = "RUN_STEPS_TABLE";
/// `RunCountsTable` name.
pub const RUN_COUNTS_TABLE: &str = "RUN_COUNTS_TABLE";
/// `UsageTable` name: each account's budget, month's spend and per-day totals.
pub const USAGE_TABLE: &str = "USAGE_TABLE";
/// Days a run is kept after the day it was created (at least 30; default
/// `agent_runtime::runs::DEFAULT_RETENTION_DAYS`): the template's `RunRetentionDays`.
pub const RUN_RETENTION_DAYS: &str = "RUN_RETENTION_DAYS";
/// `ToolSandboxFunction` name: where custom Python tools run in AWS (locally empty: a `python3`
/// subprocess).
pub const TOOL_SANDBOX_FUNCTION: &str = "TOOL_SANDBOX_FUNCTION";
/// Most tool calls of one model turn that run (default `engine::DEFAULT_TOOL_CALLS_PER_TURN`).
pub const RUN_MAX_TOOL_CALLS_PER_TURN: &str = "RUN_MAX_TOOL_CALLS_PER_TURN";
/// Most tool calls of one run executing at once (default `engine::DEFAULT_TOOL_CALL_CONCURRENCY`).
pub const RUN_TOOL_CALL_CONCURRENCY: &str = "RUN_TOOL_CALL_CONCURRENCY";
/// Most sub-agent calls of one run, nested ones included (default `engine::DEFAULT_SUB_AGENT_CALLS`).
pub const RUN_MAX_SUB_AGENT_CALLS: &str = "RUN_MAX_SUB_AGENT_CALLS";
/// Longest a queued or scheduled run waits for a worker, in seconds (default
/// `runner::DEFAULT_MAX_QUEUE_WAIT`).
pub const RUN_MAX_QUEUE_WAIT_SECONDS: &str = "RUN_MAX_QUEUE_WAIT_SECONDS";

/// Hosts, addresses and CIDR networks that requests made for tenants (MCP servers, flow
/// servers, language models, tools) may reach despite being private (comma-separated; see
/// `outbound::guard`).
pub const OUTBOUND_ALLOWED_HOSTS: &str = "OUTBOUND_ALLOWED_HOSTS";

pub use webhooks::settings::{
    QUOTA_WEBHOOK_ENDPOINTS, WEBHOOK_ALLOWED_HOSTS, WEBHOOK_DELIVERIES_TABLE, WEBHOOK_DELIVERY_QUEUE_URL,
    WEBHOOK_ENDPOINT_CACHE_SECONDS, WEBHOOK_ENDPOINTS_TABLE, WEBHOOK_EVENTS_TABLE, WEBHOOK_SECRET_PREFIX,
};

/// The quota `name` from setting `setting` (a positive integer; `default` when absent).
pub fn quota(
    lookup: aws_env::settings::Lookup,
    name: &'static str,
    setting: &'static str,
    default: u32,
) -> Result<storage::quota::Quota, aws_env::settings::SettingError> {
    Ok(storage::quota::Quota { name, limit: aws_env::settings::positive_or(lookup, setting, default)? })
}

/// The run store of the function's tables (`RUNS_TABLE`, `RUN_EVENTS_TABLE`, `RUN_STEPS_TABLE`,
/// `RUN_COUNTS_TABLE`), keeping runs `RUN_RETENTION_DAYS`.
pub fn run_store(
    db: aws_sdk_dynamodb::Client,
    lookup: aws_env::settings::Lookup,
) -> Result<agent_runtime::runs::RunStore, aws_env::settings::SettingError> {
    use agent_runtime::runs::{DEFAULT_RETENTION_DAYS, Retention, RunStore, RunTables};
    use aws_env::settings::{positive_or, required};
    let days = positive_or(lookup, RUN_RETENTION_DAYS, DEFAULT_RETENTION_DAYS)?;
    let retention = Retention::days(days)
        .map_err(|problem| aws_env::settings::SettingError { name: RUN_RETENTION_DAYS, problem })?;
    let tables = RunTables {
        runs: required(lookup, RUNS_TABLE)?,
        events: required(lookup, RUN_EVENTS_TABLE)?,
        steps: required(lookup, RUN_STEPS_TABLE)?,
        counts: required(lookup, RUN_COUNTS_TABLE)?,
    };
    Ok(RunStore::new(db, tables, retention))
}

/// The guarded client of requests made for tenants, with the operator's allow-list.
pub fn tenant_client(
    lookup: aws_env::settings::Lookup,
) -> Result<outbound::TenantClient, aws_env::settings::SettingError> {
    let invalid = |problem: String| aws_env::settings::SettingError { name: OUTBOUND_ALLOWED_HOSTS, problem };
    let policy = outbound::AddressPolicy::from_setting(lookup(OUTBOUND_ALLOWED_HOSTS).as_deref()).map_err(invalid)?;
    Ok(outbound::TenantClient::new(policy))
}
