//! `POST /agents/{agent_id}/run`: runs an agent and streams its events as Server-Sent Events
//! while they happen (DESIGN.md's event stream), behind the same gate as every backend route.
//!
//! Body: JSON `{"message", "timeout"?, "session_id"?}`, or `multipart/form-data` with a
//! `message` part, optional `session_id` and `timeout` parts and `files` parts: UTF-8 text files
//! are inlined into the message under their names; PNG, JPEG, GIF and WebP images and PDF, Word
//! and Excel documents (recognised by their bytes) go to the model as files it reads, so only
//! `config` agents take them. Another
//! content type is 400; an unknown, deleted or another account's agent is 404.
//!
//! `GET /agents/{agent_id}/runs/{run_id}/stream` resumes a run's stream after `Last-Event-ID`.
//!
//! Calls: the gate, 1 GetItem (the agent), then the run's own (see `agent_runtime::runner`); a
//! resumed stream: 1 GetItem each of the agent and the run, then the follower's polls (see
//! `agent_runtime::follow`).

use crate::envelope::{ApiError, ErrorCode, path_id};
use crate::gate::{Access, Gate};
use crate::records::{active, active_record};
use crate::settings;
use agent_runtime::engine::RunLimits;
use agent_runtime::lifecycle::{RunLifecycle, StartRun};
use agent_runtime::providers::Attachment;
use agent_runtime::queue::{RunQueue, RunWorker};
use agent_runtime::quotas::RunQuotas;
use agent_runtime::resolve::{RunRequest, RunSources};
use agent_runtime::runs::{RunFilter, RunInput, RunOrigin, RunStatus, RunType};
use agent_runtime::timeouts::MAX_RUN_TIMEOUT;
use agent_runtime::timeouts::positive_seconds;
use aws_env::settings::{Lookup, SettingError, required};
use http::header::CONTENT_TYPE;
use http::{Method, StatusCode};
use http_api::multipart::parse_multipart;
use http_api::routing::segments_under;
use http_api::streaming::{StreamBody, StreamingFunction, StreamingFuture, frames_body};
use http_api::{Request, Response};
use platform_data::agent_spec::AgentType;
use platform_data::agents::{Agent, AgentStore};
use platform_data::api_keys::Caller;
use platform_data::ids::{AgentId, RunId};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use storage::quota::Leases;

/// The largest run body: a message and its files (Lambda takes at most 6 MB per invocation).
pub const MAX_BODY_BYTES: usize = 5 * 1024 * 1024;
/// At most this many files: text files of at most `MAX_FILE_BYTES`, images of at most
/// `MAX_IMAGE_BYTES` (providers take about 5 MB per image once base64-encoded).
pub const MAX_FILES: usize = 10;
pub const MAX_FILE_BYTES: usize = 1024 * 1024;
pub const MAX_IMAGE_BYTES: usize = 3 * 1024 * 1024 + 512 * 1024;
/// Documents (PDF, Word, Excel) of at most this size: Bedrock's limit per document, and within
/// the body's.
pub const MAX_DOCUMENT_BYTES: usize = 4_500_000;
/// The longest `message`.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// The longest `session_id`: an agent that keeps memory indexes its runs by
/// `{agent_id}#{session_id}`, a partition key of at most 2,048 bytes in DynamoDB.
pub const MAX_SESSION_ID_BYTES: usize = 1024;

/// The run function.
pub struct AgentRunsService {
    gate: Gate,
    agents: AgentStore,
    runner: RunLifecycle,
}

/// A valid run body.
#[derive(Debug, Clone, PartialEq)]
pub struct RunBody {
    /// `agent_id` as sent (the runner's execute routes name the agent in the body).
    pub agent_id: Option<String>,
    /// The message as sent (what the run record shows).
    pub message: String,
    /// What the model is asked: the message with the files' text after it.
    pub prompt: String,
    pub timeout: Option<Duration>,
    pub session_id: Option<String>,
    /// Names of the files sent (text inlined into the prompt, images and documents in
    /// `attachments`), in order.
    pub files: Vec<String>,
    pub attachments: Vec<Attachment>,
}

impl AgentRunsService {
    /// A service over explicit dependencies.
    pub fn new(gate: Gate, agents: AgentStore, runner: RunLifecycle) -> Self {
        Self { gate: gate.with_body_limit(MAX_BODY_BYTES), agents, runner }
    }

    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let runner = lifecycle_from_settings(aws, lookup)?;
        let agents = AgentStore::new(aws.dynamodb(), required(lookup, settings::AGENTS_TABLE)?);
        Ok(Self::new(Gate::from_settings(aws, lookup)?, agents, runner))
    }

    /// Reads the time, its runs' included, from `clock` (tests).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.gate = self.gate.with_clock(std::sync::Arc::clone(&clock));
        self.runner = self.runner.with_clock(clock);
        self
    }

    async fn route(&self, caller: Caller, request: Request) -> Result<Response<StreamBody>, ApiError> {
        let path = request.uri().path().to_owned();
        let segments = segments_under(&path, "/agents").ok_or_else(|| ApiError::not_found("resource"))?;
        if let [raw, "runs", run_id, "stream"] = segments.as_slice() {
            if request.method() != Method::GET {
                return Err(ApiError::method_not_allowed(request.method(), "GET"));
            }
            let id = path_id(raw, "agent_id")?;
            let run_id = path_id(run_id, "run_id")?;
            return self.resume_stream(caller, id, run_id, &request).await;
        }
        let [raw, "run"] = segments.as_slice() else { return Err(ApiError::not_found("resource")) };
        if request.method() != Method::POST {
            return Err(ApiError::method_not_allowed(request.method(), "POST"));
        }
        let id = path_id(raw, "agent_id")?;
        let body = parse_run_body(&request, MAX_RUN_TIMEOUT)?;
        let agent = active_record(&self.agents, caller.account_id, id, "agent").await?;
        let start = start_run(&agent, body, RunType::Api, &request)?;
        let handle = self.runner.start(agent, start).await?;
        tracing::info!(run_id = %handle.run_id, agent_id = %id, "run started");
        event_stream(handle.run_id, handle.frames)
    }

    /// `GET /agents/{agent_id}/runs/{run_id}/stream`: the run's events after `Last-Event-ID`
    /// (header, or `last_event_id` query parameter; 0 or none: from the start), then the live
    /// ones until its last; a finished run is replayed and closed. Works from any process: the
    /// events are read from DynamoDB (`agent_runtime::follow`).
    async fn resume_stream(
        &self,
        caller: Caller,
        id: AgentId,
        run_id: RunId,
        request: &Request,
    ) -> Result<Response<StreamBody>, ApiError> {
        let after = last_event_id(request)?;
        let runs = self.runner.runs();
        // The agent and the run are read together (one BatchGetItem); the agent's 404 comes first.
        let [agent, run] = platform_data::dynamo::get_together(
            self.agents.db(),
            [self.agents.item_key(caller.account_id, id), runs.item_key(run_id)],
        )
        .await?;
        active(agent.map(|item| self.agents.decode(item)).transpose()?, "agent")?;
        let run = match run {
            Some(item) => runs.decode(item, self.runner.now())?,
            None => None,
        };
        run.filter(|run| run.agent_id == id && run.account_id == caller.account_id)
            .ok_or_else(|| ApiError::not_found("run"))?;
        let frames = self.runner.follow(caller.account_id, run_id, after).await?;
        event_stream(run_id, frames)
    }
}

/// The runner of every entry point that executes agents, configured from settings: where a run's
/// parts are read, where runs are recorded, where their webhook events go.
pub fn lifecycle_from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<RunLifecycle, SettingError> {
    let db = aws.dynamodb();
    let secrets = aws.secrets();
    let agents = AgentStore::new(db.clone(), required(lookup, settings::AGENTS_TABLE)?);
    let sources = RunSources {
        agents: agents.clone(),
        tools: platform_data::tools::ToolStore::new(db.clone(), required(lookup, settings::TOOLS_TABLE)?),
        mcps: platform_data::mcp_configs::McpConfigStore::new(
            db.clone(),
            required(lookup, settings::MCP_CONFIGS_TABLE)?,
        ),
        models: platform_data::language_models::LanguageModelStore::new(
            db.clone(),
            required(lookup, settings::LANGUAGE_MODELS_TABLE)?,
        ),
        model_keys: crate::language_models::language_model_keys(
            secrets.clone(),
            required(lookup, settings::LANGUAGE_MODEL_SECRET_PREFIX)?,
        ),
        mcp_secrets: crate::mcps::mcp_secrets(secrets.clone(), required(lookup, settings::MCP_SECRET_PREFIX)?),
        tool_secrets: platform_data::tools::ToolSecrets::new(secrets, &required(lookup, settings::TOOL_SECRET_PREFIX)?),
        client: settings::tenant_client(lookup)?,
        bedrock: aws_env::bedrock::BedrockRuntime::new(aws.config()),
        flow_server: agent_runtime::resolve::FlowServerAccess {
            base_url: lookup(settings::FLOW_SERVER_URL),
            key: lookup(settings::FLOW_SERVER_SECRET_ID).map(|secret_id| (aws.secrets(), secret_id)),
        },
        tool_sandbox: agent_runtime::tools::python::ToolSandbox::from_setting(
            aws.config(),
            lookup(settings::TOOL_SANDBOX_FUNCTION),
            lookup(settings::OUTBOUND_ALLOWED_HOSTS),
        )
        .with_call_slots(
            Leases::new(aws.dynamodb(), required(lookup, settings::QUOTAS_TABLE)?),
            aws_env::settings::positive_or(lookup, settings::QUOTA_SANDBOX_CALLS, DEFAULT_SANDBOX_CALLS)?,
        ),
        limits: run_limits(lookup)?,
    };
    let runs = settings::run_store(db, lookup)?;
    let events = crate::webhooks::publisher_from_settings(aws, lookup)?;
    let max_queue_wait = aws_env::settings::positive_or(
        lookup,
        settings::RUN_MAX_QUEUE_WAIT_SECONDS,
        agent_runtime::lifecycle::DEFAULT_MAX_QUEUE_WAIT.as_secs().try_into().unwrap_or(u32::MAX),
    )?;
    let runner = RunLifecycle::new(Arc::new(sources), runs, Arc::new(chrono::Utc::now))
        .with_events(events)
        .with_max_queue_wait(Duration::from_secs(u64::from(max_queue_wait)))
        .with_quotas(run_quotas(aws, lookup)?)
        .with_usage(agent_runtime::usage::UsageStore::new(aws.dynamodb(), required(lookup, settings::USAGE_TABLE)?));
    let runner = match crate::traces::span_sink(aws, lookup) {
        Some(sink) => runner.with_spans(sink),
        None => runner,
    };
    // A function that executes scheduled runs records their end on their schedule.
    Ok(match lookup(settings::SCHEDULES_TABLE) {
        Some(table) => runner.with_schedules(platform_data::schedules::ScheduleStore::new(aws.dynamodb(), table)),
        None => runner,
    })
}

/// Each account's custom-tool calls in the tool sandbox at once, unless `QUOTA_SANDBOX_CALLS`
/// says otherwise (the template's default).
pub const DEFAULT_SANDBOX_CALLS: u32 = 50;

/// The account quotas of runs and run streams (`QuotasTable`, `QUOTA_*`; defaults as the
/// template's).
pub fn run_quotas(aws: &aws_env::Clients, lookup: Lookup) -> Result<RunQuotas, SettingError> {
    let quota = |name, setting, default| settings::quota(lookup, name, setting, default);
    Ok(RunQuotas {
        leases: Leases::new(aws.dynamodb(), required(lookup, settings::QUOTAS_TABLE)?),
        concurrent_runs: quota("concurrent_runs", settings::QUOTA_CONCURRENT_RUNS, 10)?,
        queued_runs: quota("queued_runs", settings::QUOTA_QUEUED_RUNS, 50)?,
        stream_followers: quota("stream_followers", settings::QUOTA_STREAM_FOLLOWERS, 20)?,
    })
}

/// How far each run may fan out, from the `RUN_*` settings (each a positive integer; the
/// engine's defaults when absent).
pub fn run_limits(lookup: Lookup) -> Result<RunLimits, SettingError> {
    let defaults = RunLimits::default();
    let count = |name: &'static str, default: usize| -> Result<usize, SettingError> {
        let value = aws_env::settings::positive_or(lookup, name, u32::try_from(default).unwrap_or(u32::MAX))?;
        Ok(usize::try_from(value).unwrap_or(usize::MAX))
    };
    Ok(RunLimits {
        tool_calls_per_turn: count(settings::RUN_MAX_TOOL_CALLS_PER_TURN, defaults.tool_calls_per_turn)?,
        tool_call_concurrency: count(settings::RUN_TOOL_CALL_CONCURRENCY, defaults.tool_call_concurrency)?,
        sub_agent_calls: aws_env::settings::positive_or(
            lookup,
            settings::RUN_MAX_SUB_AGENT_CALLS,
            defaults.sub_agent_calls,
        )?,
    })
}

/// What a run of `agent` is asked, from a valid run body: 422 naming `files` when images or
/// documents go to an agent that is not a `config` agent (only those talk to a model itself).
pub(crate) fn start_run(
    agent: &Agent,
    body: RunBody,
    run_type: RunType,
    request: &Request,
) -> Result<StartRun, ApiError> {
    let parent = trace_parent(request);
    if !body.attachments.is_empty() && agent.spec.agent_type != AgentType::Config {
        return Err(ApiError::validation(
            "The run request is invalid.",
            Map::from_iter([("files".to_owned(), json!("images and documents can only be sent to config agents"))]),
        ));
    }
    Ok(StartRun {
        origin: RunOrigin {
            run_type,
            input: RunInput { message: body.message, files: body.files },
            schedule_id: None,
            session_id: body.session_id,
            parent,
        },
        request: RunRequest {
            message: body.prompt,
            attachments: body.attachments,
            timeout: body.timeout,
            history: Vec::new(),
        },
    })
}

/// The trace a run request belongs to: its W3C `traceparent`, else the X-Ray header API Gateway
/// and Lambda give it (an invalid header is ignored: the run's trace is then its own).
pub(crate) fn trace_parent(request: &Request) -> Option<telemetry::Parent> {
    let header = |name: &str| request.headers().get(name).and_then(|value| value.to_str().ok());
    header("traceparent")
        .and_then(telemetry::Parent::from_traceparent)
        .or_else(|| header("x-amzn-trace-id").and_then(telemetry::Parent::from_xray))
}

/// A run's events as a Server-Sent Events response, its id in `X-Run-Id`.
pub(crate) fn event_stream(
    run_id: RunId,
    frames: tokio::sync::mpsc::UnboundedReceiver<String>,
) -> Result<Response<StreamBody>, ApiError> {
    http::Response::builder()
        .status(StatusCode::OK)
        .header(CONTENT_TYPE, "text/event-stream")
        .header("cache-control", "no-cache")
        .header("x-run-id", run_id.to_string())
        .body(frames_body(frames))
        .map_err(|err| ApiError::internal(&err))
}

/// The run filters of a run list (`status`, `run_type`, `schedule_id`); invalid values are
/// recorded in `problems`.
pub(crate) fn run_filter(params: &http_api::Params, problems: &mut Map<String, Value>) -> RunFilter {
    let mut filter = RunFilter::default();
    if let Some(raw) = params.non_empty("status") {
        filter.status = RunStatus::parse(raw);
        if filter.status.is_none() {
            problems.insert("status".into(), json!("must be one of started, success, failed"));
        }
    }
    match params.non_empty("run_type") {
        None => {}
        Some("schedule") => filter.run_type = Some(RunType::Schedule),
        Some("api") => filter.run_type = Some(RunType::Api),
        Some("queue") => filter.run_type = Some(RunType::Queue),
        Some(_) => {
            problems.insert("run_type".into(), json!("must be one of schedule, api, queue"));
        }
    }
    if let Some(raw) = params.non_empty("schedule_id") {
        match raw.parse() {
            Ok(schedule) => filter.schedule_id = Some(schedule),
            Err(_) => {
                problems.insert("schedule_id".into(), json!("must be a UUID"));
            }
        }
    }
    filter
}

/// The queue worker of queued runs (`runner-worker`), configured from settings.
pub fn run_worker_from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<RunWorker, SettingError> {
    let queue =
        RunQueue::new(Arc::new(queues::SqsQueue::new(aws.sqs(), required(lookup, settings::RUNNER_QUEUE_URL)?)));
    Ok(RunWorker::new(lifecycle_from_settings(aws, lookup)?, queue))
}

impl StreamingFunction for AgentRunsService {
    fn handle(&self, request: Request) -> StreamingFuture<'_> {
        let access = Access::by_method(&request);
        Box::pin(self.gate.serve_streaming(request, access, |caller, request| self.route(caller, request)))
    }
}

/// The sequence number a resumed stream starts after: the `Last-Event-ID` header, else the
/// `last_event_id` query parameter, else 0; 400 when it is not a sequence number.
pub fn last_event_id(request: &Request) -> Result<u64, ApiError> {
    let header = request.headers().get("last-event-id").map(|value| value.to_str().unwrap_or("?").to_owned());
    let query = http_api::Params::from_query(request.uri()).non_empty("last_event_id").map(str::to_owned);
    match header.or(query) {
        None => Ok(0),
        Some(raw) => agent_runtime::follow::parse_last_event_id(&raw).ok_or_else(|| {
            ApiError::new(ErrorCode::BadRequest, "The stream request is malformed.")
                .with_detail("last_event_id", "must be the sequence number of an event")
        }),
    }
}

/// Reads a run body: JSON or multipart; 400 for another content type or malformed data, 422
/// for a missing or oversized message, an oversized session id, a timeout outside
/// (0, `max_timeout`] or too many or too large files.
pub fn parse_run_body(request: &Request, max_timeout: Duration) -> Result<RunBody, ApiError> {
    let bad = |field: &str, issue: &str| {
        ApiError::new(ErrorCode::BadRequest, "The run request is malformed.").with_detail(field, issue.to_owned())
    };
    let content_type = request.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let media = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let (agent_id, message, timeout, session_id, files) = match media.as_str() {
        "application/json" => {
            let value: Value = serde_json::from_slice(request.body().as_ref())
                .map_err(|err| bad("body", &format!("malformed JSON: {err}")))?;
            let Value::Object(fields) = value else { return Err(bad("body", "must be a JSON object")) };
            let fields_and_types = [
                ("agent_id", "a string"),
                ("message", "a string"),
                ("session_id", "a string"),
                ("timeout", "a number"),
            ];
            for (key, expected) in fields_and_types {
                let wrong = match (fields.get(key), expected) {
                    (None | Some(Value::Null), _) => false,
                    (Some(value), "a number") => !value.is_number(),
                    (Some(value), _) => !value.is_string(),
                };
                if wrong {
                    return Err(bad(key, &format!("must be {expected}")));
                }
            }
            let text = |key: &str| fields.get(key).and_then(Value::as_str).map(str::to_owned);
            let timeout = fields.get("timeout").and_then(Value::as_f64);
            (text("agent_id"), text("message"), timeout, text("session_id"), Vec::new())
        }
        "multipart/form-data" => {
            let parts =
                parse_multipart(content_type, request.body().as_ref()).map_err(|err| bad("body", &err.to_string()))?;
            let text = |name: &str| -> Result<Option<String>, ApiError> {
                match parts.iter().find(|part| part.name == name) {
                    None => Ok(None),
                    Some(part) => {
                        String::from_utf8(part.data.clone()).map(Some).map_err(|_| bad(name, "must be UTF-8 text"))
                    }
                }
            };
            let timeout = match text("timeout")? {
                None => None,
                Some(raw) => Some(raw.trim().parse::<f64>().map_err(|_| bad("timeout", "must be a number"))?),
            };
            let files: Vec<_> = parts.iter().filter(|part| part.name == "files" || part.name == "file").collect();
            (text("agent_id")?, text("message")?, timeout, text("session_id")?, files.into_iter().cloned().collect())
        }
        _ => return Err(bad("content-type", "must be application/json or multipart/form-data")),
    };
    let mut problems = Map::new();
    let message = message.unwrap_or_default();
    if message.trim().is_empty() {
        problems.insert("message".into(), json!("is required"));
    } else if message.len() > MAX_MESSAGE_BYTES {
        problems.insert("message".into(), json!(format!("must be at most {MAX_MESSAGE_BYTES} bytes")));
    }
    if session_id.as_ref().is_some_and(|session| session.len() > MAX_SESSION_ID_BYTES) {
        problems.insert("session_id".into(), json!(format!("must be at most {MAX_SESSION_ID_BYTES} bytes")));
    }
    let timeout = timeout.and_then(|seconds| {
        let within = positive_seconds(seconds, max_timeout).filter(|_| seconds <= max_timeout.as_secs_f64());
        if within.is_none() {
            let max = max_timeout.as_secs();
            problems.insert("timeout".into(), json!(format!("must be a number of seconds from 0 to {max}")));
        }
        within
    });
    if files.len() > MAX_FILES {
        problems.insert("files".into(), json!(format!("at most {MAX_FILES} files")));
    }
    let mut inlined = String::new();
    let mut names = Vec::new();
    let mut attachments = Vec::new();
    for (i, file) in files.into_iter().enumerate() {
        let name = file.filename.clone().unwrap_or_else(|| format!("file-{}", i + 1));
        let size = file.data.len();
        // A PDF may be all ASCII, and still is a document.
        let text =
            Some(&file.data).filter(|data| !data.starts_with(b"%PDF-")).and_then(|data| std::str::from_utf8(data).ok());
        if let Some(text) = text {
            if size > MAX_FILE_BYTES {
                problems.insert(format!("files[{i}]"), json!(format!("{name} is larger than {MAX_FILE_BYTES} bytes")));
            }
            inlined.push_str(&format!("\n\n--- file: {name} ---\n{text}"));
        } else if let Some(attachment) = Attachment::sniff(&name, file.data) {
            let limit = if attachment.is_image() { MAX_IMAGE_BYTES } else { MAX_DOCUMENT_BYTES };
            if size > limit {
                problems.insert(format!("files[{i}]"), json!(format!("{name} is larger than {limit} bytes")));
            }
            attachments.push(attachment);
        } else {
            problems.insert(
                format!("files[{i}]"),
                json!(format!(
                    "{name} is neither a UTF-8 text file nor a PNG, JPEG, GIF or WebP image nor a PDF, Word \
                     (.docx, .doc) or Excel (.xlsx, .xls) document"
                )),
            );
        }
        names.push(name);
    }
    if !problems.is_empty() {
        return Err(ApiError::validation("The run request is invalid.", problems));
    }
    Ok(RunBody {
        agent_id,
        prompt: format!("{message}{inlined}"),
        message,
        timeout,
        session_id,
        files: names,
        attachments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::ErrorCode;
    use proptest::prelude::*;

    fn parse_run_body_840(request: &Request) -> Result<RunBody, ApiError> {
        parse_run_body(request, MAX_RUN_TIMEOUT)
    }

    #[test]
    fn run_limits_come_from_settings_or_default_and_must_be_positive() {
        assert_eq!(run_limits(&|_: &str| None).unwrap(), RunLimits::default());
        let set = |name: &str| match name {
            settings::RUN_MAX_TOOL_CALLS_PER_TURN => Some("5".to_owned()),
            settings::RUN_TOOL_CALL_CONCURRENCY => Some("2".to_owned()),
            settings::RUN_MAX_SUB_AGENT_CALLS => Some("3".to_owned()),
            _ => None,
        };
        assert_eq!(
            run_limits(&set).unwrap(),
            RunLimits { tool_calls_per_turn: 5, tool_call_concurrency: 2, sub_agent_calls: 3 }
        );
        let zero = |name: &str| (name == settings::RUN_TOOL_CALL_CONCURRENCY).then(|| "0".to_owned());
        assert_eq!(run_limits(&zero).unwrap_err().name, settings::RUN_TOOL_CALL_CONCURRENCY);
    }

    fn request(content_type: &str, body: Vec<u8>) -> Request {
        http::Request::builder()
            .method(Method::POST)
            .uri("/agents/x/run")
            .header(CONTENT_TYPE, content_type)
            .body(http_api::Body::Binary(body))
            .unwrap()
    }

    #[test]
    fn the_timeout_is_bounded_by_the_route_s_maximum() {
        let body = |timeout: u32| {
            request("application/json", format!(r#"{{"message": "m", "timeout": {timeout}}}"#).into_bytes())
        };
        let refused = parse_run_body_840(&body(3600)).unwrap_err();
        assert_eq!(refused.details["timeout"], "must be a number of seconds from 0 to 840");
        let queued = parse_run_body(&body(3600), agent_runtime::timeouts::MAX_QUEUED_RUN_TIMEOUT).unwrap();
        assert_eq!(queued.timeout, Some(Duration::from_secs(3600)));
        let named = parse_run_body_840(&request("application/json", br#"{"agent_id": "a", "message": "m"}"#.to_vec()));
        assert_eq!(named.unwrap().agent_id.as_deref(), Some("a"));
        let wrong = parse_run_body_840(&request("application/json", br#"{"agent_id": 3, "message": "m"}"#.to_vec()));
        assert_eq!(wrong.unwrap_err().details["agent_id"], "must be a string");
    }

    #[test]
    fn json_and_multipart_bodies_are_read() {
        let body = parse_run_body_840(&request(
            "application/json",
            br#"{"message": "hi", "timeout": 30, "session_id": "s"}"#.to_vec(),
        ))
        .unwrap();
        assert_eq!(
            (body.prompt.as_str(), body.timeout, body.session_id.as_deref()),
            ("hi", Some(Duration::from_secs(30)), Some("s"))
        );
        let multipart = b"--b\r\nContent-Disposition: form-data; name=\"message\"\r\n\r\nRead\r\n--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a.txt\"\r\n\r\nA\r\n--b--\r\n";
        let body = parse_run_body_840(&request("multipart/form-data; boundary=b", multipart.to_vec())).unwrap();
        assert_eq!(
            (body.message.as_str(), body.prompt.as_str(), body.files.as_slice()),
            ("Read", "Read\n\n--- file: a.txt ---\nA", &["a.txt".to_owned()][..])
        );
    }

    fn multipart_with_file(data: &[u8]) -> Vec<u8> {
        let mut body = b"--b\r\nContent-Disposition: form-data; name=\"message\"\r\n\r\nLook\r\n--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"f\"\r\n\r\n".to_vec();
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n--b--\r\n");
        body
    }

    #[test]
    fn images_are_recognised_by_their_bytes_and_other_binaries_refused() {
        let png = [b"\x89PNG\r\n\x1a\n".as_slice(), &[0, 0, 0, 13, 0xFF]].concat();
        let body = parse_run_body_840(&request("multipart/form-data; boundary=b", multipart_with_file(&png))).unwrap();
        assert_eq!((body.prompt.as_str(), body.files.as_slice()), ("Look", &["f".to_owned()][..]));
        assert_eq!(body.attachments.iter().map(|file| file.media_type).collect::<Vec<_>>(), ["image/png"]);
        assert_eq!(body.attachments[0].data, png);

        let error = parse_run_body_840(&request(
            "multipart/form-data; boundary=b",
            multipart_with_file(&[0xFF, 0xFE, 0x00, 0x81]),
        ))
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::ValidationError);
        assert!(error.details["files[0]"].as_str().unwrap().contains("neither a UTF-8 text file nor"), "{error:?}");

        // A PDF is a document even when all of it is ASCII; an Office file by its container and
        // its name (`f` has no extension: a ZIP named so is refused).
        let pdf = b"%PDF-1.7\n1 0 obj\n".to_vec();
        let body = parse_run_body_840(&request("multipart/form-data; boundary=b", multipart_with_file(&pdf))).unwrap();
        assert_eq!(body.prompt, "Look");
        assert_eq!(body.attachments[0].media_type, "application/pdf");
        assert_eq!(body.attachments[0].document_format(), Some("pdf"));
        let zip = b"PK\x03\x04\x14\x00\x06\x00\xff".to_vec();
        assert!(parse_run_body_840(&request("multipart/form-data; boundary=b", multipart_with_file(&zip))).is_err());
        let docx = Attachment::sniff("Report.DOCX", zip).unwrap();
        assert_eq!((docx.document_format(), docx.is_image()), (Some("docx"), false));
        let xls = Attachment::sniff("a.xls", vec![0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1, 0]).unwrap();
        assert_eq!(xls.media_type, "application/vnd.ms-excel");

        let huge = [&[0xFF, 0xD8, 0xFF][..], &vec![0u8; MAX_IMAGE_BYTES]].concat();
        let error =
            parse_run_body_840(&request("multipart/form-data; boundary=b", multipart_with_file(&huge))).unwrap_err();
        assert!(error.details["files[0]"].as_str().unwrap().contains("larger than"), "{error:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any body and content type is a run body or a 400/422 error envelope, never a panic.
        #[test]
        fn any_body_is_read_or_refused_with_a_documented_status(
            content_type in prop::sample::select(vec!["application/json", "multipart/form-data; boundary=b", "multipart/form-data", "text/plain", ""]),
            body in prop::collection::vec(any::<u8>(), 0..200),
            json in r#"\{("message"|"timeout"|"session_id"|"x"): ?("hi"|-?[0-9]{1,4}|null|\[\]|\{\}|"")\}"#,
        ) {
            for candidate in [body.clone(), json.clone().into_bytes()] {
                match parse_run_body_840(&request(content_type, candidate)) {
                    Ok(run) => prop_assert!(!run.message.trim().is_empty()),
                    Err(error) => prop_assert!(matches!(error.code, ErrorCode::BadRequest | ErrorCode::ValidationError), "{error:?}"),
                }
            }
        }
    }
}
