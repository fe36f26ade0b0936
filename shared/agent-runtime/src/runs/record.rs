//! The run record (DESIGN.md's): how a run starts, waits for a worker, begins, finishes, and
//! what the API shows of it.

use crate::events::{FailureReason, RunEvent, Usage, truncate};
use crate::spend::{Bill, Cost};
use chrono::{DateTime, Duration, Utc};
use platform_data::ids::{AccountId, AgentId, RunId, ScheduleId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How long after its deadline a `started` run counts as lost.
pub const STALE_MARGIN: Duration = Duration::seconds(60);

/// The most of a run's answer or error its record keeps.
pub const MAX_OUTPUT_BYTES: usize = 128 * 1024;

/// Shards of the `open-by-deadline` index: its writes spread over this many partitions, and a
/// sweep reads each.
pub const OPEN_SHARDS: u128 = 8;

/// The `open-by-deadline` shard of run `run_id` (its id's random tail spreads runs evenly).
pub fn open_shard(run_id: RunId) -> String {
    (run_id.into_uuid().as_u128() % OPEN_SHARDS).to_string()
}

/// How a run was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunType {
    Api,
    Queue,
    Schedule,
}

impl RunType {
    /// The type as the API and the stored record spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Queue => "queue",
            Self::Schedule => "schedule",
        }
    }
}

/// The spec's run statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Started,
    Success,
    Failed,
}

impl RunStatus {
    /// The status as the API and the stored record spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Success => "success",
            Self::Failed => "failed",
        }
    }

    /// A status from its name.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Started, Self::Success, Self::Failed].into_iter().find(|status| status.as_str() == name)
    }
}

/// What the run was asked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInput {
    pub message: String,
    #[serde(default)]
    pub files: Vec<String>,
}

/// How a run came to be: who started it, what it was asked, and the schedule and session it
/// belongs to (what its record keeps of its start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOrigin {
    pub run_type: RunType,
    pub input: RunInput,
    pub schedule_id: Option<ScheduleId>,
    pub session_id: Option<String>,
    /// The trace the request that started the run belongs to (its `traceparent` or X-Ray
    /// header): the run's trace continues it. None: the run's trace is new.
    pub parent: Option<telemetry::Parent>,
}

/// The run's place in its trace (docs/tracing.md): chosen when it is recorded and kept, so
/// every invocation that executes it adds to the same trace under the same `invoke_agent` span.
/// Stored as hex; a stored value that does not parse leaves the run untraced (never a panic).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTrace {
    /// 32 hex digits: the run's `trace_id`.
    pub trace_id: String,
    /// 16 hex digits: the run's `invoke_agent` span.
    pub span_id: String,
    /// The caller's span, when the request named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
}

impl RunTrace {
    /// A new place: in `parent`'s trace when there is one, else in a trace of its own.
    pub fn new(parent: Option<telemetry::Parent>) -> Self {
        let trace_id = parent.map_or_else(telemetry::TraceId::random, |parent| parent.trace_id);
        Self {
            trace_id: trace_id.to_string(),
            span_id: telemetry::SpanId::random().to_string(),
            parent_span_id: parent.and_then(|parent| parent.span_id).map(|id| id.to_string()),
        }
    }

    /// The run's span and its parent, when the stored ids are valid.
    pub fn span(&self) -> Option<(telemetry::SpanContext, Option<telemetry::SpanId>)> {
        let context = telemetry::SpanContext {
            trace_id: telemetry::TraceId::from_hex(&self.trace_id)?,
            span_id: telemetry::SpanId::from_hex(&self.span_id)?,
        };
        Some((context, self.parent_span_id.as_deref().and_then(telemetry::SpanId::from_hex)))
    }
}

/// A run record (DESIGN.md), as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: RunId,
    pub agent_id: AgentId,
    pub account_id: AccountId,
    pub run_type: RunType,
    pub status: RunStatus,
    pub failure_reason: Option<FailureReason>,
    pub input: RunInput,
    pub output: Option<String>,
    pub error: Option<String>,
    pub usage: Usage,
    /// What the run's tokens cost, when a model it used is priced (none before costs were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    pub steps: u32,
    pub schedule_id: Option<ScheduleId>,
    pub session_id: Option<String>,
    /// When the run was recorded; absent from records stored before it was kept (their
    /// `started_at` is their creation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<DateTime<Utc>>,
    /// When its execution began: its creation for a run executed where it was started, a
    /// worker's first pick-up for a queued or scheduled run (none while it waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// From `started_at` to the end (none for a run that ended before it started).
    pub duration_ms: Option<i64>,
    /// When a `started` run must have ended: `started_at` + its timeout, or, while a queued run
    /// waits for a worker, the end of its allowed wait.
    pub deadline_at: DateTime<Utc>,
    /// The run's timeout in milliseconds, kept while a queued run waits (it counts from the
    /// pick-up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// `{agent_id}#{session_id}` when the agent keeps memory: the `by-session` index's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// What the model is asked when it is more than `input.message` (the files' text inlined):
    /// kept so that another process can execute the run (the queue worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The account, while the run is `started`: the sparse `open-by-account` index's key, so an
    /// account's running work is listed without reading its finished runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_account: Option<AccountId>,
    /// While the run is `started`: its shard of the sparse `open-by-deadline` index (from its
    /// id, `OPEN_SHARDS` of them) and its deadline in epoch milliseconds, the index's sort key,
    /// so the sweep finds runs lost with their process without a Scan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_shard: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_deadline: Option<i64>,
    /// When the run stops being kept (epoch seconds, `RunsTable`'s TTL attribute): midnight
    /// after its retention's last day (`Retention::expires_at`). Every run `RunRecord::start`
    /// makes has it and is counted in its agent's run counts by cell (`counts`); runs stored
    /// before counts were kept lack it, are never deleted, and are counted by the agent's tally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// Ended, its spend not yet added to the day's totals (`crate::usage`): it keeps its place
    /// in the `open-by-deadline` index until then, so the sweep settles it if its process died.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub usage_pending: bool,
    /// Its trace (none for runs recorded before traces were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<RunTrace>,
}

/// `time` plus `span`, or the latest time there is when that overflows (a stored timeout of any
/// size must not panic the function that reads it).
fn later(time: DateTime<Utc>, span: Duration) -> DateTime<Utc> {
    time.checked_add_signed(span).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl RunRecord {
    /// Run `run_id` of agent `agent_id` of `account_id`, started now with `timeout`, kept as
    /// `retention` says (`waiting_for_a_worker` makes it a queued run's).
    pub fn start(
        run_id: RunId,
        agent_id: AgentId,
        account_id: AccountId,
        origin: RunOrigin,
        now: DateTime<Utc>,
        timeout: std::time::Duration,
        retention: super::Retention,
    ) -> Self {
        let timeout = Duration::from_std(timeout).unwrap_or(Duration::hours(1));
        let RunOrigin { run_type, input, schedule_id, session_id, parent } = origin;
        Self {
            run_id,
            agent_id,
            account_id,
            run_type,
            status: RunStatus::Started,
            failure_reason: None,
            input,
            output: None,
            error: None,
            usage: Usage::default(),
            cost: None,
            steps: 0,
            schedule_id,
            session_id,
            queued_at: Some(now),
            started_at: Some(now),
            finished_at: None,
            duration_ms: None,
            deadline_at: later(now, timeout),
            timeout_ms: None,
            session_key: None,
            prompt: None,
            open_account: Some(account_id),
            open_shard: Some(open_shard(run_id)),
            open_deadline: Some(later(now, timeout).timestamp_millis()),
            expires_at: Some(retention.expires_at(run_id).timestamp()),
            usage_pending: false,
            trace: Some(RunTrace::new(parent)),
        }
    }

    /// The run's trace id (32 hex), as the API shows it.
    pub fn trace_id(&self) -> Option<&str> {
        self.trace.as_ref().map(|trace| trace.trace_id.as_str())
    }

    /// The record of a queued run: it waits at most `max_wait` from its creation for a worker,
    /// and its timeout counts from the pick-up (`begin`), not from its time in the queue.
    pub fn waiting_for_a_worker(mut self, max_wait: std::time::Duration) -> Self {
        let queued_at = self.queued_at();
        let timeout = self.deadline_at - queued_at;
        self.timeout_ms = Some(u64::try_from(timeout.num_milliseconds()).unwrap_or(0));
        self.started_at = None;
        self.deadline_at = later(queued_at, Duration::from_std(max_wait).unwrap_or(Duration::hours(1)));
        self.open_deadline = Some(self.deadline_at.timestamp_millis());
        self
    }

    /// When the run was recorded.
    pub fn queued_at(&self) -> DateTime<Utc> {
        self.queued_at.or(self.started_at).unwrap_or(self.deadline_at)
    }

    /// Whether the run is `started` and still waits for its first worker.
    pub fn is_waiting(&self) -> bool {
        self.status == RunStatus::Started && self.started_at.is_none()
    }

    /// Starts a waiting run at `now`: its timeout counts from here, and a resumed run keeps this
    /// deadline. `Err` with the run's failure message when it waited past its limit.
    pub fn begin(&mut self, now: DateTime<Utc>) -> Result<(), String> {
        if !self.is_waiting() {
            return Ok(());
        }
        if now > self.deadline_at {
            return Err(self.waited_too_long());
        }
        // At most a queued run's longest: the stored number is read, never trusted.
        let longest = u64::try_from(crate::timeouts::MAX_QUEUED_RUN_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
        let timeout = Duration::milliseconds(i64::try_from(self.timeout_ms.unwrap_or(0).min(longest)).unwrap_or(0));
        self.started_at = Some(now);
        self.deadline_at = later(now, timeout);
        self.open_deadline = self.open_shard.as_ref().map(|_| self.deadline_at.timestamp_millis());
        Ok(())
    }

    /// The timeout the run was given: from its start to its deadline (once it has started).
    pub fn timeout(&self) -> std::time::Duration {
        let started_at = self.started_at.unwrap_or_else(|| self.queued_at());
        (self.deadline_at - started_at).to_std().unwrap_or_default()
    }

    /// The failure message of a run that waited in the queue past its limit.
    pub(super) fn waited_too_long(&self) -> String {
        let limit = (self.deadline_at - self.queued_at()).num_seconds();
        format!("the run waited in the queue longer than its limit of {limit} seconds and did not run")
    }

    /// The record as it ended: `Ok(output)` or `Err((reason, message))`.
    pub fn finish(
        &mut self,
        result: &Result<String, (FailureReason, String)>,
        bill: Bill,
        steps: u32,
        now: DateTime<Utc>,
    ) {
        match result {
            Ok(output) => {
                self.status = RunStatus::Success;
                self.output = Some(truncate(output, MAX_OUTPUT_BYTES));
            }
            Err((reason, message)) => {
                self.status = RunStatus::Failed;
                self.failure_reason = Some(*reason);
                self.error = Some(truncate(message, MAX_OUTPUT_BYTES));
            }
        }
        self.usage = bill.usage;
        self.cost = bill.cost;
        self.steps = steps;
        self.open_account = None;
        self.open_shard = None;
        self.open_deadline = None;
        self.finished_at = Some(now);
        self.duration_ms = self.started_at.map(|started_at| (now - started_at).num_milliseconds());
    }

    /// Whether the run is still kept at `now` (runs from before retention always are).
    pub fn is_kept(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_none_or(|expires_at| now.timestamp() < expires_at)
    }

    /// Whether the run is `started` past its deadline and the margin: lost.
    pub fn is_stale(&self, now: DateTime<Utc>) -> bool {
        self.status == RunStatus::Started
            && self.deadline_at.checked_add_signed(STALE_MARGIN).is_some_and(|stale_at| now > stale_at)
    }

    /// The run as it reads at `now`: a lost run (`is_stale`) as it will be recorded, `failed` by
    /// `timeout` at its deadline (the sweep records it so, and publishes `run.failed`); any
    /// other run as it is. Deterministic, so what a read shows is what the sweep records.
    pub fn settled(mut self, now: DateTime<Utc>) -> Self {
        if !self.is_stale(now) {
            return self;
        }
        let message = if self.is_waiting() {
            self.waited_too_long()
        } else {
            "the run did not finish by its deadline; the process running it was lost".to_owned()
        };
        let finished_at = self.deadline_at;
        self.finish(&Err((FailureReason::Timeout, message)), self.bill(), self.steps, finished_at);
        self
    }

    /// Marks an ended run's spend as still to be added to the day's totals, in the
    /// `open-by-deadline` index from `now` (the sweep settles it when nobody else does).
    pub fn mark_usage_pending(&mut self, now: DateTime<Utc>) {
        self.usage_pending = true;
        self.open_shard = Some(open_shard(self.run_id));
        self.open_deadline = Some(now.timestamp_millis());
    }

    /// The record once its spend was added to the day's totals (as `RunStore::settle_usage`
    /// leaves it).
    pub fn usage_settled(&mut self) {
        self.usage_pending = false;
        self.open_shard = None;
        self.open_deadline = None;
    }

    /// What the run spent, as recorded.
    pub fn bill(&self) -> Bill {
        Bill { usage: self.usage, cost: self.cost }
    }

    /// The `done` or `error` event of an ended run, as its record says it ended.
    pub fn last_event(&self) -> RunEvent {
        match self.status {
            RunStatus::Success => RunEvent::Done {
                run_id: self.run_id,
                output: self.output.clone().unwrap_or_default(),
                bill: self.bill(),
            },
            _ => RunEvent::Error {
                run_id: self.run_id,
                failure_reason: self.failure_reason.unwrap_or(FailureReason::Error),
                message: self.error.clone().unwrap_or_else(|| "the run has not ended".to_owned()),
                bill: self.bill(),
            },
        }
    }

    /// The run as the API shows it (DESIGN.md's run record).
    pub fn view(&self) -> Value {
        serde_json::json!({
            "id": self.run_id,
            "agent_id": self.agent_id,
            "run_type": self.run_type,
            "status": self.status,
            "failure_reason": self.failure_reason,
            "input": self.input,
            "output": self.output,
            "error": self.error,
            "usage": self.usage,
            "cost": self.cost,
            "steps": self.steps,
            "schedule_id": self.schedule_id,
            "session_id": self.session_id,
            "queued_at": self.queued_at(),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_ms": self.duration_ms,
            "trace_id": self.trace_id(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_trace_continues_its_callers_and_a_stored_value_that_does_not_parse_is_no_trace() {
        let parent = telemetry::Parent::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let trace = RunTrace::new(parent);
        let (context, caller) = trace.span().unwrap();
        assert_eq!(context.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(caller.map(|id| id.to_string()).as_deref(), Some("00f067aa0ba902b7"));
        assert_ne!(context.span_id.to_string(), "00f067aa0ba902b7", "the run's span is its own");
        let own = RunTrace::new(None);
        assert_ne!(own.trace_id, trace.trace_id);
        assert_eq!(own.span().unwrap().1, None);
        for (trace_id, span_id) in
            [("not hex", "00f067aa0ba902b7"), ("4bf92f3577b34da6a3ce929d0e0e4736", "é"), ("", "")]
        {
            let stored =
                RunTrace { trace_id: trace_id.into(), span_id: span_id.into(), parent_span_id: Some("x".into()) };
            assert_eq!(stored.span(), None);
        }
    }

    #[test]
    fn a_started_run_is_stale_only_past_its_deadline_and_the_margin() {
        let now = Utc::now();
        let origin = RunOrigin {
            run_type: RunType::Api,
            input: RunInput::default(),
            schedule_id: None,
            session_id: None,
            parent: None,
        };
        let run = RunRecord::start(
            RunId::now_v7(),
            AgentId::new_v4(),
            AccountId::new_v4(),
            origin,
            now,
            std::time::Duration::from_secs(60),
            super::super::Retention::default(),
        );
        assert!(!run.is_stale(now + Duration::seconds(100)));
        assert!(run.is_stale(now + Duration::seconds(121)));
        let mut done = run.clone();
        done.finish(&Ok("x".into()), Bill::default(), 1, now);
        assert!(!done.is_stale(now + Duration::days(1)));
        assert_eq!(done.view()["status"], "success");
        assert_eq!(done.view()["id"], serde_json::json!(run.run_id));
    }
}
