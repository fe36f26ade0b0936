//! A run's lifecycle, the same for every entry point: record the run, execute it in a task of
//! its own (a client that goes away does not stop it), number and record every event, and hand
//! the entry point the SSE frames as they happen, with keep-alive comments while the model is
//! silent.
//!
//! Events are written in batches: at most `FLUSH_EVENTS` per BatchWriteItem, and at least every
//! `FLUSH_INTERVAL` while a run is producing them, so a reader in another process (a resumed
//! stream) is at most that far behind. DynamoDB calls per run: 1 PutItem (start) + 1
//! BatchWriteItem per flush + 1 conditional PutItem (end), plus what preparing the agent reads.

use crate::engine::execute;
use crate::events::{FailureReason, KEEP_ALIVE, RunEvent, Usage};
use crate::resolve::{PrepareError, PreparedRun, RunRequest, RunSources};
use crate::runs::{RunInput, RunRecord, RunStatus, RunStore, RunType};
use chrono::{DateTime, Utc};
use platform_data::agent_spec::AgentType;
use platform_data::agents::Agent;
use std::sync::Arc;
use std::time::Duration;
use storage::StoreError;
use tokio::sync::mpsc;
use uuid::Uuid;
use webhooks::publisher::Publisher;

/// Events written per BatchWriteItem.
pub const FLUSH_EVENTS: usize = 25;
/// Longest a produced event waits before it is written.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);
/// A keep-alive comment goes out after this long without an event (DESIGN.md: at least every 15 s).
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Runs an `a2a` agent: its remote agent does the work; the run streams its text and ends with
/// its task.
async fn remote_run(
    client: &outbound::TenantClient,
    agent: &Agent,
    run_id: Uuid,
    message: &str,
    timeout: chrono::Duration,
    events: &mpsc::UnboundedSender<RunEvent>,
) -> (Result<String, (FailureReason, String)>, Usage, u32) {
    let _ = events.send(RunEvent::Metadata { run_id, agent_id: agent.id });
    let profile_url =
        agent.spec.a2a_profile.as_ref().and_then(|profile| profile.get("url")).and_then(|url| url.as_str());
    let result = match profile_url {
        None => Err((FailureReason::Error, "the a2a agent has no a2a_profile.url".to_owned())),
        Some(url) => {
            let limit = timeout.to_std().unwrap_or(Duration::from_secs(60));
            let call = crate::a2a::run_remote(client, url, message, events, REMOTE_CALL_TIMEOUT);
            match tokio::time::timeout(limit, call).await {
                Ok(result) => result.map(|(output, _)| output),
                Err(_) => Err((
                    FailureReason::Timeout,
                    format!("the remote agent did not finish within {} seconds", limit.as_secs()),
                )),
            }
        }
    };
    let _ = events.send(last_event(run_id, &result));
    (result, Usage::default(), 1)
}

/// Runs a `flowtool` agent: its flow (`agent_config.flowtool.flow_id`) on the configured flow
/// server, its tokens streamed as `message` deltas.
async fn flow_run(
    sources: &RunSources,
    agent: &Agent,
    run_id: Uuid,
    message: &str,
    session_id: Option<&str>,
    timeout: chrono::Duration,
    events: &mpsc::UnboundedSender<RunEvent>,
) -> (Result<String, (FailureReason, String)>, Usage, u32) {
    let _ = events.send(RunEvent::Metadata { run_id, agent_id: agent.id });
    let flow_id = agent.spec.agent_config.get("flowtool").and_then(|f| f.get("flow_id")).and_then(|id| id.as_str());
    let result = match (flow_id, sources.flow_server.server().await) {
        (None, _) => Err((FailureReason::Error, "the flowtool agent has no agent_config.flowtool.flow_id".to_owned())),
        (_, Err(problem)) => Err((FailureReason::Error, problem)),
        (Some(flow_id), Ok(server)) => {
            let limit = timeout.to_std().unwrap_or(Duration::from_secs(60));
            let mut on_token = |token: &str| {
                let _ = events.send(RunEvent::Message { delta: token.to_owned() });
            };
            let call = server.run_flow(&sources.client, flow_id, message, session_id, &mut on_token);
            match tokio::time::timeout(limit, call).await {
                Ok(Ok(output)) => Ok(output),
                Ok(Err(err)) => Err((FailureReason::Error, err.to_string())),
                Err(_) => {
                    Err((FailureReason::Timeout, format!("the flow did not finish within {} seconds", limit.as_secs())))
                }
            }
        }
    };
    let _ = events.send(last_event(run_id, &result));
    (result, Usage::default(), 1)
}

/// The `done` or `error` event of a run delegated elsewhere (no token usage is known).
fn last_event(run_id: Uuid, result: &Result<String, (FailureReason, String)>) -> RunEvent {
    match result {
        Ok(output) => RunEvent::Done { run_id, output: output.clone(), usage: Usage::default() },
        Err((reason, message)) => RunEvent::Error { run_id, failure_reason: *reason, message: message.clone() },
    }
}

/// The time allowed to fetch a remote agent's card.
const REMOTE_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How many earlier messages a run with memory is given when `metadata.chat_history_limit`
/// does not say.
pub const DEFAULT_CHAT_HISTORY_LIMIT: usize = 20;

/// Whether `agent_config.memory` turns memory on: any identifier but an empty one, `none`,
/// `false` or null.
pub fn keeps_memory(agent_config: &serde_json::Map<String, serde_json::Value>) -> bool {
    match agent_config.get("memory") {
        Some(serde_json::Value::String(kind)) => !kind.trim().is_empty() && !kind.eq_ignore_ascii_case("none"),
        Some(serde_json::Value::Bool(on)) => *on,
        Some(serde_json::Value::Object(_)) => true,
        _ => false,
    }
}

/// `metadata.chat_history_limit` (a non-negative number), else the default.
pub fn history_limit(metadata: &serde_json::Map<String, serde_json::Value>) -> usize {
    metadata
        .get("chat_history_limit")
        .and_then(serde_json::Value::as_u64)
        .map_or(DEFAULT_CHAT_HISTORY_LIMIT, |limit| usize::try_from(limit).unwrap_or(usize::MAX).min(1000))
}

/// The clock runs are timed by.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// What starts a run.
#[derive(Debug, Clone)]
pub struct StartRun {
    pub run_type: RunType,
    pub input: RunInput,
    pub request: RunRequest,
    pub schedule_id: Option<Uuid>,
    pub session_id: Option<String>,
}

/// A started run: its id, its SSE frames as they happen (keep-alives included), and its end.
pub struct RunHandle {
    pub run_id: Uuid,
    pub frames: mpsc::UnboundedReceiver<String>,
    /// The run record as it ended (recorded before this resolves).
    pub finished: tokio::task::JoinHandle<RunRecord>,
}

/// Starts runs.
#[derive(Clone)]
pub struct Runner {
    sources: Arc<RunSources>,
    runs: RunStore,
    clock: Clock,
    /// Where `run.started`, `run.succeeded` and `run.failed` are published (webhooks).
    events: Option<Publisher>,
}

impl Runner {
    pub fn new(sources: Arc<RunSources>, runs: RunStore, clock: Clock) -> Self {
        Self { sources, runs, clock, events: None }
    }

    /// Publishes the run's webhook events through `publisher`.
    pub fn with_events(mut self, publisher: Publisher) -> Self {
        self.events = Some(publisher);
        self
    }

    /// Publishes a webhook event about `run`. The run is already recorded, so a failure to
    /// publish is logged, not returned (the webhook sweeper sends what was stored).
    async fn announce(&self, event_type: &str, run: &RunRecord) {
        let Some(publisher) = &self.events else { return };
        if let Err(err) = publisher.publish(run.account_id, event_type, run.view(), (self.clock)()).await {
            tracing::error!(run_id = %run.run_id, event_type, error = %err, "run event not published");
        }
    }

    /// The run store, for reads (lists, resumed streams).
    pub fn runs(&self) -> &RunStore {
        &self.runs
    }

    /// Records a new run of `agent` and starts it. Fails only when the run cannot be recorded
    /// (or its conversation read).
    pub async fn start(&self, agent: Agent, mut start: StartRun) -> Result<RunHandle, StoreError> {
        let run_id = Uuid::now_v7();
        let timeout = crate::resolve::run_timeout(start.request.timeout, &agent.spec.metadata);
        // Memory: with `agent_config.memory` set, a run with a `session_id` continues that
        // conversation (its last `metadata.chat_history_limit` messages, default 20).
        let session = start.session_id.clone().filter(|_| keeps_memory(&agent.spec.agent_config));
        if let Some(session_id) = &session {
            let limit = history_limit(&agent.spec.metadata);
            start.request.history = self.runs.session_history(agent.id, session_id, limit).await?;
        }
        let mut record = RunRecord::start(
            run_id,
            agent.id,
            agent.account_id,
            start.run_type,
            start.input,
            start.schedule_id,
            start.session_id,
            (self.clock)(),
            timeout,
        );
        record.session_key = session.map(|session_id| crate::runs::session_key(agent.id, &session_id));
        self.runs.create(&record).await?;
        self.announce("run.started", &record).await;
        let (frames, receiver) = mpsc::unbounded_channel();
        let runner = self.clone();
        let finished = tokio::spawn(async move { runner.drive(agent, start.request, record, frames).await });
        Ok(RunHandle { run_id, frames: receiver, finished })
    }

    /// Prepares and executes the run, relaying and recording its events, then records its end.
    async fn drive(
        self,
        agent: Agent,
        request: RunRequest,
        mut record: RunRecord,
        frames: mpsc::UnboundedSender<String>,
    ) -> RunRecord {
        let (events, mut receiver) = mpsc::unbounded_channel();
        let run_id = record.run_id;
        let session = record.session_id.clone();
        let sources = Arc::clone(&self.sources);
        let timeout = record.deadline_at - record.started_at;
        let execution = async move {
            match agent.spec.agent_type {
                AgentType::A2a => {
                    return remote_run(&sources.client, &agent, run_id, &request.message, timeout, &events).await;
                }
                AgentType::Flowtool => {
                    return flow_run(&sources, &agent, run_id, &request.message, session.as_deref(), timeout, &events)
                        .await;
                }
                AgentType::Config => {}
            }
            match sources.prepare(&agent, request, run_id, 0).await {
                Ok(PreparedRun { run, sessions }) => {
                    let outcome = execute(run, events, std::future::pending()).await;
                    PreparedRun::close(sessions).await;
                    (outcome.result, outcome.usage, outcome.steps)
                }
                Err(err) => {
                    let (reason, message) = match &err {
                        PrepareError::Provider(_) => (FailureReason::ProviderError, err.to_string()),
                        PrepareError::Agent(_) => (FailureReason::Error, err.to_string()),
                        PrepareError::Store(_) => {
                            tracing::error!(%run_id, error = %err, "run could not be prepared");
                            (FailureReason::Error, "the run could not be prepared (internal error)".to_owned())
                        }
                    };
                    let _ = events.send(RunEvent::Metadata { run_id, agent_id: agent.id });
                    let _ = events.send(RunEvent::Error { run_id, failure_reason: reason, message: message.clone() });
                    (Err((reason, message)), Usage::default(), 0)
                }
            }
        };
        let relay = self.relay(run_id, &mut receiver, &frames);
        let ((result, usage, steps), ()) = tokio::join!(execution, relay);
        record.finish(&result, usage, steps, (self.clock)());
        match self.runs.finish(&record).await {
            Ok(true) => {
                let event_type = if record.status == RunStatus::Success { "run.succeeded" } else { "run.failed" };
                self.announce(event_type, &record).await;
            }
            Ok(false) => tracing::warn!(%run_id, "the run had already been ended (marked lost or cancelled)"),
            Err(err) => tracing::error!(%run_id, error = %err, "run end not recorded"),
        }
        record
    }

    /// Numbers each event, sends its frame to the client (if still there) and writes events in
    /// batches; keep-alives while nothing happens. Returns when the last event was written.
    async fn relay(
        &self,
        run_id: Uuid,
        receiver: &mut mpsc::UnboundedReceiver<RunEvent>,
        frames: &mpsc::UnboundedSender<String>,
    ) {
        let mut sequence = 0u64;
        let mut pending: Vec<(u64, RunEvent)> = Vec::new();
        let mut flush_at: Option<tokio::time::Instant> = None;
        loop {
            let wait =
                flush_at.map_or(KEEP_ALIVE_INTERVAL, |at| at.saturating_duration_since(tokio::time::Instant::now()));
            match tokio::time::timeout(wait, receiver.recv()).await {
                Ok(Some(event)) => {
                    sequence += 1;
                    let _ = frames.send(event.to_sse(sequence));
                    pending.push((sequence, event));
                    flush_at.get_or_insert_with(|| tokio::time::Instant::now() + FLUSH_INTERVAL);
                    if pending.len() >= FLUSH_EVENTS {
                        self.flush(run_id, &mut pending).await;
                        flush_at = None;
                    }
                }
                Ok(None) => {
                    self.flush(run_id, &mut pending).await;
                    return;
                }
                Err(_) if !pending.is_empty() => {
                    self.flush(run_id, &mut pending).await;
                    flush_at = None;
                }
                Err(_) => {
                    let _ = frames.send(KEEP_ALIVE.to_owned());
                }
            }
        }
    }

    async fn flush(&self, run_id: Uuid, pending: &mut Vec<(u64, RunEvent)>) {
        if pending.is_empty() {
            return;
        }
        if let Err(err) = self.runs.append_events(run_id, pending, (self.clock)()).await {
            // The live stream still has them; a resumed stream would miss them. Logged, not fatal.
            tracing::error!(%run_id, error = %err, events = pending.len(), "run events not recorded");
        }
        pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn memory_is_on_for_any_identifier_and_the_limit_defaults() {
        for on in [json!({"memory": "buffer"}), json!({"memory": true}), json!({"memory": {"kind": "x"}})] {
            assert!(keeps_memory(&object(on)));
        }
        for off in [
            json!({}),
            json!({"memory": null}),
            json!({"memory": ""}),
            json!({"memory": "none"}),
            json!({"memory": false}),
        ] {
            assert!(!keeps_memory(&object(off)));
        }
        assert_eq!(history_limit(&object(json!({"chat_history_limit": 4}))), 4);
        assert_eq!(history_limit(&object(json!({"chat_history_limit": "x"}))), DEFAULT_CHAT_HISTORY_LIMIT);
        assert_eq!(history_limit(&object(json!({"chat_history_limit": 1e9}))), DEFAULT_CHAT_HISTORY_LIMIT);
        assert_eq!(history_limit(&object(json!({"chat_history_limit": 5000}))), 1000);
    }
}
