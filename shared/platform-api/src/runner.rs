//! The runner service: the spec's second API, on its own base URL (its REST API, every answer
//! streamed; `make dev`: port 3001), behind the same `X-API-Key` gate as the backend.
//! Every request and response shape is in `docs/runner.md`.
//!
//! A task is a run: one id space, so a run started through the backend is watched and cancelled
//! here, and a task started here is a run of its agent (`GET /agents/{agent_id}/runs`).
//!
//! - `POST /execute/a2a/stream/agent`: runs an agent in this process, streaming its events.
//! - `POST /execute/a2a/stream/celery/agent`: queues the run for the `runner-worker` and streams
//!   the events it records (read from DynamoDB, so from another process).
//! - `GET /execute/a2a/agents/list`, `GET /execute/a2a/agents/health`.
//! - `POST /tools/validation`: the custom tool script validator the tools routes use.
//! - `GET /monitoring/tasks/{task_id}` (and `/stream`), `DELETE /monitoring/tasks/{task_id}`,
//!   `GET /monitoring/agent/{agent_id}/executions`, `GET /monitoring/executions/recent`.
//! - `GET /health-check`, `GET /health-check/detailed`.

use crate::agent_runs::{self, MAX_BODY_BYTES, event_stream, parse_run_body, start_run};
use crate::envelope::{ApiError, ErrorCode, PageRequest, path_id, success, uuid_param};
use crate::gate::{Access, Gate};
use crate::health::{TableCheck, milliseconds, probe_tables, tables_in};
use crate::records::active_record;
use crate::settings;
use crate::tools::script_unchecked;
use agent_runtime::lifecycle::RunLifecycle;
use agent_runtime::queue::RunQueue;
use agent_runtime::runs::{RunRecord, RunStatus, RunType};
use agent_runtime::timeouts::{MAX_QUEUED_RUN_TIMEOUT, MAX_RUN_TIMEOUT};
use agent_runtime::tools::python::ToolSandbox;
use aws_env::settings::{Lookup, SettingError, required};
use futures_util::future::join_all;
use http::{Method, StatusCode};
use http_api::routing::without_trailing_slash;
use http_api::streaming::{StreamBody, StreamingFunction, StreamingFuture, whole};
use http_api::{Body, Params, Request, Response};
use platform_data::agents::{Agent, AgentStore};
use platform_data::api_keys::Caller;
use platform_data::ids::{AccountId, AgentId, RunId};
use platform_data::python_script::ENTRY_POINT;
use queues::SqsQueue;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long `DELETE /monitoring/tasks/{task_id}` waits for a running task to stop before it
/// answers 202 (the cancel stays recorded and takes effect within a second or so).
pub const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// At most this many agents are checked by one `GET /execute/a2a/agents/health` (its `limit`).
pub const MAX_HEALTH_AGENTS: usize = 20;

/// The runner function.
pub struct RunnerService {
    gate: Gate,
    agents: AgentStore,
    runner: RunLifecycle,
    queue: RunQueue,
    probes: Probes,
}

/// What `GET /health-check/detailed` probes: the function's tables, queues and secrets.
pub struct Probes {
    db: aws_sdk_dynamodb::Client,
    tables: Vec<(&'static str, String)>,
    queues: Vec<(&'static str, Arc<SqsQueue>)>,
    secrets: aws_env::Lazy<aws_sdk_secretsmanager::Client>,
    secret_ids: Vec<(&'static str, String)>,
}

impl Probes {
    /// The probes of the function's settings: every table, queue and secret they name.
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Self {
        let sqs = aws.sqs();
        let queues = [settings::RUNNER_QUEUE_URL, settings::RUNNER_DEAD_LETTER_QUEUE_URL]
            .into_iter()
            .filter_map(|variable| {
                lookup(variable)
                    .filter(|address| !address.is_empty())
                    .map(|address| (variable, Arc::new(SqsQueue::new(sqs.clone(), address))))
            })
            .collect();
        let secret_ids = [settings::PEPPER_SECRET_ID, settings::FLOW_SERVER_SECRET_ID]
            .into_iter()
            .filter_map(|variable| lookup(variable).filter(|id| !id.is_empty()).map(|id| (variable, id)))
            .collect();
        Self { db: aws.dynamodb(), tables: tables_in(lookup), queues, secrets: aws.secrets(), secret_ids }
    }
}

/// One queue's probe.
#[derive(Debug, Serialize)]
struct QueueCheck {
    queue: &'static str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    in_flight: Option<u64>,
    latency_ms: f64,
}

/// One secret's probe (GetResourcePolicy, the smallest answer naming a secret: its value is
/// never read here).
#[derive(Debug, Serialize)]
struct SecretCheck {
    secret: &'static str,
    status: &'static str,
    latency_ms: f64,
}

/// A runnable agent, as `GET /execute/a2a/agents/list` shows it.
#[derive(Debug, Serialize)]
struct RunnableAgent<'a> {
    id: AgentId,
    name: &'a str,
    agent_type: platform_data::agent_spec::AgentType,
    framework: Option<platform_data::agent_spec::Framework>,
    /// `""` when unset (DESIGN.md "Field presence").
    version: &'a str,
    description: &'a str,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
}

impl RunnerService {
    /// A service over explicit dependencies.
    pub fn new(gate: Gate, agents: AgentStore, runner: RunLifecycle, queue: RunQueue, probes: Probes) -> Self {
        Self { gate: gate.with_body_limit(MAX_BODY_BYTES), agents, runner, queue, probes }
    }

    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let runner = agent_runs::lifecycle_from_settings(aws, lookup)?;
        let agents = AgentStore::new(aws.dynamodb(), required(lookup, settings::AGENTS_TABLE)?);
        let queue = RunQueue::new(Arc::new(SqsQueue::new(aws.sqs(), required(lookup, settings::RUNNER_QUEUE_URL)?)));
        let probes = Probes::from_settings(aws, lookup);
        Ok(Self::new(Gate::from_settings(aws, lookup)?, agents, runner, queue, probes))
    }

    /// Reads the time, its runs' included, from `clock` (tests).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.gate = self.gate.with_clock(Arc::clone(&clock));
        self.runner = self.runner.with_clock(clock);
        self
    }

    async fn route(&self, caller: Caller, request: Request) -> Result<Response<StreamBody>, ApiError> {
        let path = without_trailing_slash(request.uri().path()).to_owned();
        let segments: Vec<&str> = path.split('/').filter(|segment| !segment.is_empty()).collect();
        let method = request.method().clone();
        let account = caller.account_id;
        let params = Params::from_query(request.uri());
        match segments.as_slice() {
            ["execute", "a2a", "stream", "agent"] => {
                only(&method, Method::POST, "POST")?;
                self.execute(account, &request, false).await
            }
            ["execute", "a2a", "stream", "celery", "agent"] => {
                only(&method, Method::POST, "POST")?;
                self.execute(account, &request, true).await
            }
            ["execute", "a2a", "agents", "list"] => {
                only(&method, Method::GET, "GET")?;
                self.list_agents(account, &params).await.map(whole)
            }
            ["execute", "a2a", "agents", "health"] => {
                only(&method, Method::GET, "GET")?;
                self.agents_health(account, &params).await.map(whole)
            }
            ["tools", "validation"] => {
                only(&method, Method::POST, "POST")?;
                validate_tool(self.runner.tool_sandbox(), account, request.body()).await.map(whole)
            }
            ["monitoring", "tasks", task_id] => {
                let task_id = path_id(task_id, "task_id")?;
                match method {
                    Method::GET => self.task_status(account, task_id).await.map(whole),
                    Method::DELETE => self.cancel_or_delete(account, task_id, &params).await.map(whole),
                    other => Err(ApiError::method_not_allowed(&other, "GET, DELETE")),
                }
            }
            ["monitoring", "tasks", task_id, "stream"] => {
                only(&method, Method::GET, "GET")?;
                let task_id = path_id(task_id, "task_id")?;
                let after = agent_runs::last_event_id(&request)?;
                let task = self.task(account, task_id).await?;
                let frames = self.runner.follow(account, task.run_id, after).await?;
                event_stream(task.run_id, frames)
            }
            ["monitoring", "agent", agent_id, "executions"] => {
                only(&method, Method::GET, "GET")?;
                let agent_id = path_id(agent_id, "agent_id")?;
                self.agent_executions(account, agent_id, &params).await.map(whole)
            }
            ["monitoring", "executions", "recent"] => {
                only(&method, Method::GET, "GET")?;
                self.recent_executions(account, &params).await.map(whole)
            }
            ["health-check"] => {
                only(&method, Method::GET, "GET")?;
                let data = json!({ "status": "healthy", "service": "runner", "version": env!("CARGO_PKG_VERSION") });
                Ok(whole(success(StatusCode::OK, data, "Runner is healthy")))
            }
            ["health-check", "detailed"] => {
                only(&method, Method::GET, "GET")?;
                self.detailed_health().await.map(whole)
            }
            _ => Err(ApiError::not_found("resource")),
        }
    }

    /// Both execute routes: the body names the agent; `queued` sends the run to the worker and
    /// follows its recorded events, otherwise it runs here.
    async fn execute(
        &self,
        account: AccountId,
        request: &Request,
        queued: bool,
    ) -> Result<Response<StreamBody>, ApiError> {
        let body = parse_run_body(request, if queued { MAX_QUEUED_RUN_TIMEOUT } else { MAX_RUN_TIMEOUT })?;
        let agent_id = match body.agent_id.as_deref().map(str::trim) {
            None | Some("") => {
                return Err(ApiError::validation(
                    "The run request is invalid.",
                    Map::from_iter([("agent_id".to_owned(), json!("is required"))]),
                ));
            }
            Some(raw) => path_id(raw, "agent_id")?,
        };
        let agent = active_record(&self.agents, account, agent_id, "agent").await?;
        if queued {
            let start = start_run(&agent, body, RunType::Queue, request)?;
            // The stream's place first: a refused stream queues nothing.
            let place = self.runner.follower_place(account).await?;
            let record = match self.runner.enqueue(&agent, &start, &self.queue).await {
                Ok(record) => record,
                Err(err) => {
                    self.runner.give_back(place).await;
                    return Err(err.into());
                }
            };
            tracing::info!(run_id = %record.run_id, %agent_id, "run queued");
            let frames = self.runner.follow_in(place, record.run_id, 0);
            event_stream(record.run_id, frames)
        } else {
            let start = start_run(&agent, body, RunType::Api, request)?;
            let handle = self.runner.start(agent, start).await?;
            tracing::info!(run_id = %handle.run_id, %agent_id, "run started");
            event_stream(handle.run_id, handle.frames)
        }
    }

    /// The account's active agents, newest first, paged.
    async fn list_agents(&self, account: AccountId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = PageRequest::from_params(params, &mut problems);
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        let agents = self.active_agents(account).await?;
        let items = agents.iter().map(|agent| RunnableAgent {
            id: agent.id,
            name: &agent.spec.name,
            agent_type: agent.spec.agent_type,
            framework: agent.spec.framework,
            version: agent.spec.version.as_deref().unwrap_or_default(),
            description: agent.spec.description.as_deref().unwrap_or_default(),
            created_at: agent.created_at,
            updated_at: agent.updated_at,
        });
        Ok(page.respond(items, agents.len(), "Agents retrieved"))
    }

    /// The health of one agent (`agent_id`) or of a page of the account's agents (`page`,
    /// `limit` at most `MAX_HEALTH_AGENTS`), every agent's checks concurrently.
    async fn agents_health(&self, account: AccountId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let mut page = PageRequest::from_params(params, &mut problems);
        if page.limit > MAX_HEALTH_AGENTS {
            problems.insert("limit".into(), json!(format!("must be an integer from 1 to {MAX_HEALTH_AGENTS}")));
        }
        let agent_id = uuid_param(params, "agent_id", &mut problems);
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        let agents = match agent_id {
            Some(id) => {
                page = PageRequest { page: 1, limit: page.limit };
                vec![active_record(&self.agents, account, id, "agent").await?]
            }
            None => self.active_agents(account).await?,
        };
        let sources = self.runner.sources();
        let checked = join_all(page.page_of(&agents).iter().map(|agent| sources.agent_health(agent))).await;
        let unhealthy = checked.iter().filter(|health| !health.healthy).count();
        let message = match unhealthy {
            0 => "All agents are healthy".to_owned(),
            n => format!("{n} agent(s) unhealthy"),
        };
        Ok(page.respond_page(checked, agents.len(), &message))
    }

    /// A task by id: 404 unless it is a run of the caller's account (whatever its agent became).
    async fn task(&self, account: AccountId, task_id: RunId) -> Result<RunRecord, ApiError> {
        Ok(self.stored_task(account, task_id).await?.settled(self.runner.now()))
    }

    /// The task as stored (a lost run still `started`, until the sweep records it): 404 unless
    /// it is the account's and still kept.
    async fn stored_task(&self, account: AccountId, task_id: RunId) -> Result<RunRecord, ApiError> {
        self.runner
            .runs()
            .get_stored(task_id)
            .await?
            .filter(|run| run.account_id == account && run.is_kept(self.runner.now()))
            .ok_or_else(|| ApiError::not_found("task"))
    }

    /// The task's run record, with `cancel_requested_at` and the id of its last event (where a
    /// rejoined stream would start).
    async fn task_status(&self, account: AccountId, task_id: RunId) -> Result<Response<Body>, ApiError> {
        let task = self.task(account, task_id).await?;
        Ok(success(StatusCode::OK, self.task_view(&task).await?, "Task retrieved"))
    }

    async fn task_view(&self, task: &RunRecord) -> Result<Value, ApiError> {
        let runs = self.runner.runs();
        let (control, last_event_id) =
            futures_util::future::join(runs.steps().control(task.run_id), runs.last_event_seq(task.run_id)).await;
        let control = control?;
        let last_event_id = last_event_id?;
        let mut view = task.view();
        if let Value::Object(fields) = &mut view {
            fields.insert("cancel_requested_at".into(), json!(control.cancel_requested_at));
            fields.insert("last_event_id".into(), json!(last_event_id));
        }
        Ok(view)
    }

    /// `DELETE /monitoring/tasks/{task_id}`: cancels a running task (200 once it ended, 202 while
    /// the cancel is pending); a finished task is answered as it ended (cancel is idempotent).
    /// With `purge=true`, a finished task's record, events and journal are deleted (409 while it
    /// runs).
    async fn cancel_or_delete(
        &self,
        account: AccountId,
        task_id: RunId,
        params: &Params,
    ) -> Result<Response<Body>, ApiError> {
        let purge = match params.non_empty("purge").map(str::to_ascii_lowercase).as_deref() {
            None | Some("false" | "0") => false,
            Some("true" | "1") => true,
            Some(_) => {
                return Err(ApiError::validation(
                    "Invalid query parameters.",
                    Map::from_iter([("purge".to_owned(), json!("must be true or false"))]),
                ));
            }
        };
        let stored = self.stored_task(account, task_id).await?;
        let task = stored.clone().settled(self.runner.now());
        if purge {
            if task.status == RunStatus::Started {
                return Err(ApiError::new(ErrorCode::Conflict, "The task is running; cancel it before deleting it.")
                    .with_detail("status", "started"));
            }
            self.runner.runs().delete(&stored, self.runner.now()).await?;
            tracing::info!(%task_id, %account, "task deleted");
            return Ok(success(StatusCode::OK, Value::Null, "Task deleted"));
        }
        if task.status != RunStatus::Started {
            let view = self.task_view(&task).await?;
            return Ok(success(StatusCode::OK, view, &format!("Task already ended ({})", task.status.as_str())));
        }
        let current = self.runner.cancel(task, CANCEL_WAIT).await?;
        tracing::info!(%task_id, %account, status = current.status.as_str(), "task cancel requested");
        let view = self.task_view(&current).await?;
        if current.status == RunStatus::Started {
            Ok(success(StatusCode::ACCEPTED, view, "Cancel requested; the task stops within its current step"))
        } else {
            Ok(success(StatusCode::OK, view, &format!("Task ended ({})", current.status.as_str())))
        }
    }

    /// An agent's executions: `GET /agents/{agent_id}/runs`, for any agent of the account that
    /// is not deleted.
    async fn agent_executions(
        &self,
        account: AccountId,
        agent_id: AgentId,
        params: &Params,
    ) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = PageRequest::from_params(params, &mut problems);
        let filter = agent_runs::run_filter(params, &mut problems);
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        active_record(&self.agents, account, agent_id, "agent").await?;
        let found =
            self.runner.runs().page_for_agent(agent_id, &filter, page.offset(), page.limit, self.runner.now()).await?;
        Ok(page.respond_page(found.runs.iter().map(RunRecord::view).collect(), found.total, "Executions retrieved"))
    }

    /// The account's most recent executions of every agent, newest first: at most `limit`
    /// (default 20, at most 100), optionally of one `status`.
    async fn recent_executions(&self, account: AccountId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = PageRequest::from_params(params, &mut problems);
        let status = match params.non_empty("status") {
            None => None,
            Some(raw) => {
                let status = RunStatus::parse(raw);
                if status.is_none() {
                    problems.insert("status".into(), json!("must be one of started, success, failed"));
                }
                status
            }
        };
        if params.non_empty("page").is_some() {
            problems.insert("page".into(), json!("recent executions are not paged; use limit"));
        }
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        let runs = self.runner.runs().recent_for_account(account, status, page.limit, self.runner.now()).await?;
        let data: Vec<Value> = runs.iter().map(RunRecord::view).collect();
        Ok(success(StatusCode::OK, data, "Recent executions retrieved"))
    }

    /// Tables, queues (with their depth) and secrets, probed concurrently with their latency;
    /// 503 naming what failed.
    async fn detailed_health(&self) -> Result<Response<Body>, ApiError> {
        let probes = &self.probes;
        let tables = probe_tables(&probes.db, &probes.tables);
        let queues = join_all(probes.queues.iter().map(|(variable, queue)| async move {
            let started = Instant::now();
            match queue.depth().await {
                Ok(depth) => QueueCheck {
                    queue: variable,
                    status: "ok",
                    waiting: Some(depth.waiting),
                    in_flight: Some(depth.in_flight),
                    latency_ms: milliseconds(started),
                },
                Err(err) => {
                    tracing::warn!(queue = %variable, error = %err, "queue unreachable");
                    let latency_ms = milliseconds(started);
                    QueueCheck { queue: variable, status: "unreachable", waiting: None, in_flight: None, latency_ms }
                }
            }
        }));
        let secrets = join_all(probes.secret_ids.iter().map(|(variable, id)| async move {
            let started = Instant::now();
            let result = probes.secrets.get_resource_policy().secret_id(id).send().await;
            let latency_ms = milliseconds(started);
            match result {
                Ok(_) => SecretCheck { secret: variable, status: "ok", latency_ms },
                Err(err) => {
                    let message = aws_sdk_secretsmanager::error::DisplayErrorContext(err).to_string();
                    tracing::warn!(secret = %variable, error = %message, "secret unreachable");
                    SecretCheck { secret: variable, status: "unreachable", latency_ms }
                }
            }
        }));
        let (tables, queues, secrets): (Vec<TableCheck>, Vec<QueueCheck>, Vec<SecretCheck>) =
            futures_util::join!(tables, queues, secrets);
        let failed: Vec<&str> = tables
            .iter()
            .filter(|check| check.status != "ok")
            .map(|check| check.table)
            .chain(queues.iter().filter(|check| check.status != "ok").map(|check| check.queue))
            .chain(secrets.iter().filter(|check| check.status != "ok").map(|check| check.secret))
            .collect();
        let checks = json!({ "tables": tables, "queues": queues, "secrets": secrets });
        if failed.is_empty() {
            let mut data = json!({ "status": "healthy", "service": "runner", "version": env!("CARGO_PKG_VERSION") });
            if let (Value::Object(data), Value::Object(checks)) = (&mut data, checks) {
                data.extend(checks);
            }
            Ok(success(StatusCode::OK, data, "Runner and its dependencies are reachable"))
        } else {
            Err(ApiError::new(ErrorCode::ServiceUnavailable, format!("Unreachable: {}", failed.join(", ")))
                .with_detail("checks", checks))
        }
    }

    /// The account's agents that are not deleted, newest first (the `active` index, then the
    /// agents: bounded by the agents-per-account quota, whatever the deleted ones).
    async fn active_agents(&self, account: AccountId) -> Result<Vec<Agent>, ApiError> {
        Ok(self.agents.active_records(account).await?)
    }
}

impl StreamingFunction for RunnerService {
    fn handle(&self, request: Request) -> StreamingFuture<'_> {
        let access = access(&request);
        Box::pin(self.gate.serve_streaming(request, access, |caller, request| self.route(caller, request)))
    }
}

/// 405 unless the request's method is `expected`.
fn only(method: &Method, expected: Method, allow: &'static str) -> Result<(), ApiError> {
    if *method == expected { Ok(()) } else { Err(ApiError::method_not_allowed(method, allow)) }
}

/// `POST /tools/validation`: `{"script": "…"}` → 200 `{"valid", "entry_point", "errors": [{"message",
/// "line", "column"}]}` (an invalid script is a finding, not a refused request); a body that is
/// not a JSON object with a string `script` is 400/422 naming the field. The script is compiled
/// by the tool sandbox's Python ([`ToolSandbox::check_script`]); when it cannot be reached, 503.
pub async fn validate_tool(sandbox: &ToolSandbox, account: AccountId, body: &Body) -> Result<Response<Body>, ApiError> {
    let bad = |issue: String| {
        ApiError::new(ErrorCode::BadRequest, "The request body is malformed.").with_detail("body", issue)
    };
    let value: Value = serde_json::from_slice(body.as_ref()).map_err(|err| bad(format!("malformed JSON: {err}")))?;
    let Value::Object(fields) = value else { return Err(bad("must be a JSON object".into())) };
    let script = match fields.get("script") {
        Some(Value::String(script)) => script,
        Some(Value::Null) | None => {
            return Err(ApiError::validation(
                "The validation request is invalid.",
                Map::from_iter([("script".to_owned(), json!("is required"))]),
            ));
        }
        Some(_) => {
            return Err(ApiError::new(ErrorCode::BadRequest, "The request body is malformed.")
                .with_detail("script", "must be a string"));
        }
    };
    let data = match sandbox.check_script(account, script).await.map_err(|reason| script_unchecked(&reason))? {
        Ok(()) => json!({ "valid": true, "entry_point": ENTRY_POINT, "errors": [] }),
        Err(problem) => json!({ "valid": false, "entry_point": ENTRY_POINT, "errors": [problem] }),
    };
    let message = if data["valid"] == true { "The script is valid" } else { "The script is invalid" };
    Ok(success(StatusCode::OK, data, message))
}

/// `GET /execute/a2a/agents/health` asks remote agents: only once the request is allowed. Every
/// other GET only reads (an executions list may tally an agent's old runs once).
pub(crate) fn access(request: &Request) -> Access {
    if without_trailing_slash(request.uri().path()).ends_with("/execute/a2a/agents/health") {
        Access::MayWrite
    } else {
        Access::by_method(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    async fn validated(body: &str) -> Result<Value, ApiError> {
        let response =
            validate_tool(&ToolSandbox::default(), AccountId::new_v4(), &Body::Text(body.to_owned())).await?;
        Ok(serde_json::from_slice::<Value>(response.body().as_ref()).unwrap()["data"].clone())
    }

    /// A sandbox that cannot be reached: a function, and no AWS region or endpoint to invoke it.
    fn unreachable_sandbox() -> ToolSandbox {
        ToolSandbox::from_setting(&aws_env::SdkConfig::builder().build(), Some("tool-sandbox".into()), None)
    }

    #[tokio::test]
    async fn scripts_are_reported_valid_or_with_their_first_problem_located() {
        assert_eq!(validated(r#"{"script": "def run(x):\n    return x\n"}"#).await.unwrap()["valid"], true);
        let broken = validated(r#"{"script": "def run(x):\n    return (x\n"}"#).await.unwrap();
        assert_eq!(broken["valid"], false);
        assert!(broken["errors"][0]["message"].as_str().unwrap().starts_with("syntax error"), "{broken}");
        assert!(broken["errors"][0]["line"].as_u64().is_some(), "{broken}");
        let no_entry = validated(r#"{"script": "def main():\n    pass\n"}"#).await.unwrap();
        assert_eq!(no_entry["errors"][0]["message"], "the script must define a top-level function `run`");
        assert_eq!(no_entry["errors"][0]["line"], Value::Null);

        assert_eq!(validated("{}").await.unwrap_err().code, ErrorCode::ValidationError);
        assert_eq!(validated(r#"{"script": 3}"#).await.unwrap_err().details["script"], "must be a string");
        assert_eq!(validated("[1]").await.unwrap_err().code, ErrorCode::BadRequest);
        assert_eq!(validated("{").await.unwrap_err().code, ErrorCode::BadRequest);
    }

    #[tokio::test]
    async fn a_script_the_sandbox_cannot_check_is_503_and_a_blank_one_needs_no_sandbox() {
        let sandbox = unreachable_sandbox();
        let body = Body::Text(r#"{"script": "def run():\n    pass\n"}"#.into());
        let err = validate_tool(&sandbox, AccountId::new_v4(), &body).await.unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (ErrorCode::ServiceUnavailable, "The script could not be checked now; try again.")
        );
        let blank =
            validate_tool(&sandbox, AccountId::new_v4(), &Body::Text(r#"{"script": "  "}"#.into())).await.unwrap();
        let data = serde_json::from_slice::<Value>(blank.body().as_ref()).unwrap()["data"].clone();
        assert_eq!(data["errors"][0]["message"], "the script is empty");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any body is a validation report or a 400/422/503 envelope, never a panic (the
        /// sandbox's own answers are property-tested in agent-runtime).
        #[test]
        fn any_body_is_answered_with_a_documented_status(body in prop::collection::vec(any::<u8>(), 0..300), script in ".{0,200}") {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let sandbox = unreachable_sandbox();
            for candidate in [body.clone(), serde_json::to_vec(&json!({ "script": script })).unwrap()] {
                match runtime.block_on(validate_tool(&sandbox, AccountId::new_v4(), &Body::Binary(candidate))) {
                    Ok(response) => prop_assert_eq!(response.status(), StatusCode::OK),
                    Err(error) => prop_assert!(matches!(
                        error.code,
                        ErrorCode::BadRequest | ErrorCode::ValidationError | ErrorCode::ServiceUnavailable
                    )),
                }
            }
        }
    }
}
