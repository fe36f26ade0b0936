//! A run's lifecycle, the same for every entry point: record the run, execute it in a task of
//! its own (a client that goes away does not stop it), number and record every event, and hand
//! the entry point the SSE frames as they happen, with keep-alive comments while the model is
//! silent.
//!
//! Events are written in batches: at most `FLUSH_EVENTS` per BatchWriteItem, and at least every
//! `FLUSH_INTERVAL` while a run is producing them, so a reader in another process (a resumed
//! stream) is at most that far behind. The last event (`done` or `error`) is the record's, written
//! with the run's end and its webhook event in one transaction (`record_end`), and sent to the
//! client only then. DynamoDB calls per run: 1 UpdateItem (its quota place) + 1 Query and 1
//! TransactWriteItems (start, with `run.started`) + 1 BatchWriteItem per flush + 1 Query and 1
//! TransactWriteItems (end, with its last event and `run.*`) + 1 UpdateItem (the place given
//! back), plus what preparing the agent reads (docs/dynamodb.md).

use crate::budget::Budgets;
use crate::engine::{Execution, SpendGate, execute_resumable};
use crate::events::{FailureReason, KEEP_ALIVE, KEEP_ALIVE_INTERVAL, RunEvent};
use crate::journal::{Journal, PauseWhen, Step, StoredJournal};
pub use crate::quotas::StartError;
use crate::quotas::{FollowerPlace, Places, RunQuotas};
use crate::resolve::{FlowTarget, PrepareError, PreparedRun, RunRequest, RunSources};
use crate::runs::{OPEN_SHARDS, RunOrigin, RunRecord, RunStatus, RunStore, RunTrace, RunType, STALE_MARGIN};
use crate::spend::Bill;
use crate::timeouts::{MAX_RUN_TIMEOUT, did_not_finish};
use crate::trace::SpanSink;
use crate::usage::UsageStore;
use aws_env::clock::Clock;
use chrono::{DateTime, Utc};
use platform_data::agent_spec::AgentType;
pub use platform_data::agents::Agent;
use platform_data::ids::{AccountId, AgentId, RunId};
use std::sync::Arc;
use std::time::Duration;
use storage::StoreError;
use storage::quota::Quota;
use telemetry::genai::INVOKE_AGENT;
use telemetry::{Kind, Recorder, Span};
use tokio::sync::mpsc;
use uuid::Uuid;
use webhooks::publisher::{Prepared, Publisher};

/// Events written per BatchWriteItem.
pub const FLUSH_EVENTS: usize = 25;
/// Longest a produced event waits before it is written.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// Runs an `a2a` agent: its remote agent does the work; the run streams its text and ends with
/// its task.
async fn remote_run(
    client: &outbound::TenantClient,
    agent: &Agent,
    run_id: RunId,
    message: &str,
    time: RunTime,
    events: &mpsc::UnboundedSender<RunEvent>,
) -> (Result<String, (FailureReason, String)>, Bill, u32) {
    let limit = time.remaining;
    let _ = events.send(RunEvent::metadata(run_id, agent.id));
    let profile_url =
        agent.spec.a2a_profile.as_ref().and_then(|profile| profile.get("url")).and_then(|url| url.as_str());
    let result = match profile_url {
        None => Err((FailureReason::Error, "the a2a agent has no a2a_profile.url".to_owned())),
        Some(url) => {
            let stream = outbound::StreamLimits::new(limit);
            let call = crate::a2a::run_remote(client, url, message, events, REMOTE_CALL_TIMEOUT, stream);
            match within(limit, call).await {
                Some(result) => result.map(|(output, _)| output),
                None => Err((FailureReason::Timeout, did_not_finish("the remote agent", time.timeout))),
            }
        }
    };
    let _ = events.send(last_event(run_id, &result));
    (result, Bill::default(), 1)
}

/// The session a flowtool run sends to the flow server: `{account}:{agent}:{session}`, so one
/// tenant cannot name another's session on the shared server. A run without a `session_id` gets
/// its own session (`{account}:{agent}:run-{run_id}`): Langflow would otherwise use the flow's id,
/// one conversation shared by every tenant whose agent runs that flow.
pub fn flow_session(account_id: AccountId, agent_id: AgentId, session_id: Option<&str>, run_id: RunId) -> String {
    match session_id {
        Some(session_id) => format!("{account_id}:{agent_id}:{session_id}"),
        None => format!("{account_id}:{agent_id}:run-{run_id}"),
    }
}

/// A delegated run's time: what is left of it, and the timeout it was given (named when it runs
/// out).
#[derive(Debug, Clone, Copy)]
struct RunTime {
    remaining: Duration,
    timeout: Duration,
}

/// Runs a `flowtool` agent: its flow (`agent_config.flowtool`) on its flow server, its tokens
/// streamed as `message` deltas, in the run's `flow_session`.
async fn flow_run(
    sources: &RunSources,
    agent: &Agent,
    run_id: RunId,
    message: &str,
    session: &str,
    time: RunTime,
    events: &mpsc::UnboundedSender<RunEvent>,
) -> (Result<String, (FailureReason, String)>, Bill, u32) {
    let _ = events.send(RunEvent::metadata(run_id, agent.id));
    let result = match sources.flow_target(agent).await {
        Err(problem) => Err((FailureReason::Error, problem)),
        Ok(FlowTarget { server, flow_id, input_type, output_type }) => {
            let mut on_token = |token: &str| {
                let _ = events.send(RunEvent::Message { delta: token.to_owned() });
            };
            let stream = outbound::StreamLimits::new(time.remaining);
            let run = flow_server::FlowRun { flow_id: &flow_id, message, session_id: session, input_type, output_type };
            let call = server.run_flow(&sources.client, run, stream, &mut on_token);
            match within(time.remaining, call).await {
                Some(Ok(output)) => Ok(output),
                Some(Err(err)) => Err((FailureReason::Error, err.to_string())),
                None => Err((FailureReason::Timeout, did_not_finish("the flow", time.timeout))),
            }
        }
    };
    let _ = events.send(last_event(run_id, &result));
    (result, Bill::default(), 1)
}

/// `call`'s output, or `None` once `limit` passed. The limit is checked first, so a stream bounded
/// by the same limit ends the run as a timeout rather than as the stream's failure.
async fn within<T>(limit: Duration, call: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        () = tokio::time::sleep(limit) => None,
        output = call => Some(output),
    }
}

/// The `done` or `error` event of a run delegated elsewhere (no token usage is known).
fn last_event(run_id: RunId, result: &Result<String, (FailureReason, String)>) -> RunEvent {
    match result {
        Ok(output) => RunEvent::Done { run_id, output: output.clone(), bill: Bill::default() },
        Err((reason, message)) => {
            RunEvent::Error { run_id, failure_reason: *reason, message: message.clone(), bill: Bill::default() }
        }
    }
}

/// The time allowed to fetch a remote agent's card.
const REMOTE_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How many earlier messages a run with memory is given when `metadata.chat_history_limit`
/// does not say.
pub const DEFAULT_CHAT_HISTORY_LIMIT: usize = 20;

/// `metadata.chat_history_limit` (a non-negative number), else the default.
pub fn history_limit(metadata: &serde_json::Map<String, serde_json::Value>) -> usize {
    // A whole number as validation takes it (`10.0` is 10); records stored before are read alike.
    metadata.get("chat_history_limit").and_then(platform_data::validation::whole_number).map_or(
        DEFAULT_CHAT_HISTORY_LIMIT,
        |limit| {
            usize::try_from(limit.min(platform_data::agent_spec::MAX_CHAT_HISTORY_LIMIT))
                .unwrap_or(DEFAULT_CHAT_HISTORY_LIMIT)
        },
    )
}

/// How long a queued or scheduled run may wait for a worker when the `RUN_MAX_QUEUE_WAIT_SECONDS`
/// setting does not say: past it the run ends `failed` / `timeout` without running.
pub const DEFAULT_MAX_QUEUE_WAIT: Duration = Duration::from_secs(3600);

/// How often a running run's control item is read for a cancel.
pub const CANCEL_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How often `RunLifecycle::cancel` reads the run while it waits for it to end.
pub const CANCEL_WAIT_POLL: Duration = Duration::from_millis(250);

/// What starts a run.
#[derive(Debug, Clone)]
pub struct StartRun {
    /// What the run's record keeps of its start.
    pub origin: RunOrigin,
    /// What the run is asked (the message with its files' text inlined, a timeout).
    pub request: RunRequest,
}

/// A started run: its id, its SSE frames as they happen (keep-alives included), and its end.
pub struct RunHandle {
    pub run_id: RunId,
    pub frames: mpsc::UnboundedReceiver<String>,
    /// The run record as it ended (recorded before this resolves).
    pub finished: tokio::task::JoinHandle<RunRecord>,
}

/// Where an invocation that executes a queued run stands: who it is and when it must stop.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// Names the invocation in the run's lease (the Lambda request id).
    pub owner: String,
    /// When the invocation ends (the Lambda deadline).
    pub deadline: tokio::time::Instant,
    /// How long before `deadline` the run stops taking new steps and pauses.
    pub step_budget: Duration,
}

/// Deadlines below this (2001-09-09 in epoch milliseconds) are durations, not times.
const EMULATED_DEADLINE_BELOW_MS: u64 = 1_000_000_000_000;

impl Invocation {
    /// The step budget of the queue worker: a model turn or a batch of tool calls started with
    /// less than this left before the invocation's end is left to a continuation.
    pub const WORKER_STEP_BUDGET: Duration = Duration::from_secs(180);

    /// An invocation ending at `deadline_ms` (milliseconds since the epoch, as the Lambda
    /// context gives it).
    /// A deadline before 2001 is no epoch time but a budget: `cargo lambda watch` (`make
    /// dev-lambda`) sends `Lambda-Runtime-Deadline-Ms: 600000`, meaning 10 minutes from now.
    pub fn ending_at_epoch_ms(owner: impl Into<String>, deadline_ms: u64, now: DateTime<Utc>) -> Self {
        let now_ms = u64::try_from(now.timestamp_millis()).unwrap_or(0);
        let left = if deadline_ms < EMULATED_DEADLINE_BELOW_MS {
            Duration::from_millis(deadline_ms)
        } else {
            Duration::from_millis(deadline_ms.saturating_sub(now_ms))
        };
        Self {
            owner: owner.into(),
            deadline: crate::timeouts::instant_after(left),
            step_budget: Self::WORKER_STEP_BUDGET,
        }
    }
}

/// How recording a run's end went.
#[derive(Debug)]
pub(crate) enum Ending {
    /// Recorded with its last event and its webhook event.
    Recorded(RunRecord),
    /// Something ended it first (the sweep, a cancel): the run as that recorded it.
    EndedElsewhere(RunRecord),
    /// Not recorded (storage failed): the sweep will record it; the run as it would have ended.
    NotRecorded(RunRecord),
}

impl Ending {
    /// The run as it stands.
    pub(crate) fn record(self) -> RunRecord {
        match self {
            Self::Recorded(run) | Self::EndedElsewhere(run) | Self::NotRecorded(run) => run,
        }
    }

    fn as_record(&self) -> &RunRecord {
        match self {
            Self::Recorded(run) | Self::EndedElsewhere(run) | Self::NotRecorded(run) => run,
        }
    }

    /// The run as recorded, if its end is.
    fn recorded(&self) -> Option<&RunRecord> {
        match self {
            Self::Recorded(run) | Self::EndedElsewhere(run) => Some(run),
            Self::NotRecorded(_) => None,
        }
    }
}

/// What executing a queued run came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Resumed {
    /// The run ended (now, or before this delivery): its record.
    Ended(Box<RunRecord>),
    /// The run paused before the invocation's end: a continuation must be enqueued.
    Paused,
    /// Another live invocation holds the run: try again later.
    Busy,
    /// The run's account is at its quota of executing runs: send the run again after this
    /// delay (it keeps waiting, at most the queue's limit).
    Deferred(Duration),
    /// No such run.
    Missing,
}

/// Starts runs.
#[derive(Clone)]
pub struct RunLifecycle {
    sources: Arc<RunSources>,
    runs: RunStore,
    clock: Clock,
    /// Where `run.started`, `run.succeeded` and `run.failed` are published (webhooks).
    events: Option<Publisher>,
    /// Where a scheduled run's end is recorded on its schedule (`last_run_status`).
    schedules: Option<platform_data::schedules::ScheduleStore>,
    /// How long a queued or scheduled run may wait for a worker.
    max_queue_wait: Duration,
    /// Places in the account quotas runs and streams take (`crate::quotas`).
    places: Places,
    /// Where the account's spend and budget are kept (`crate::usage`): none, no budget is kept.
    usage: Option<UsageStore>,
    /// Where each invocation's spans go (`crate::trace`): none, runs are not traced.
    spans: Option<Arc<dyn SpanSink>>,
}

impl RunLifecycle {
    pub fn new(sources: Arc<RunSources>, runs: RunStore, clock: Clock) -> Self {
        Self {
            sources,
            runs,
            clock,
            events: None,
            schedules: None,
            max_queue_wait: DEFAULT_MAX_QUEUE_WAIT,
            places: Places::default(),
            usage: None,
            spans: None,
        }
    }

    /// Traces every run it executes, each invocation's spans given to `sink` before it returns.
    pub fn with_spans(mut self, sink: Arc<dyn SpanSink>) -> Self {
        self.spans = Some(sink);
        self
    }

    /// The run's `invoke_agent` span, from its first recording (its queue wait included), with
    /// the ids its record keeps. Made even when spans go nowhere: the run's requests still carry
    /// its trace context (and its events its `trace_id`); the spans are then dropped.
    fn run_span(&self, recorder: &Recorder, record: &RunRecord, agent: Option<&Agent>) -> Span {
        let Some((context, parent)) = record.trace.as_ref().and_then(RunTrace::span) else {
            return Span::none();
        };
        let capture_content = self.spans.as_ref().is_some_and(|sink| sink.captures_content());
        let name = agent.map_or_else(|| INVOKE_AGENT.to_owned(), |agent| format!("{INVOKE_AGENT} {}", agent.spec.name));
        let mut span = Span::root(recorder, context, parent, name, Kind::Internal, capture_content)
            .started_at(record.queued_at().into());
        match agent {
            Some(agent) => crate::trace::describe_agent(&mut span, agent),
            None => {
                span.set(telemetry::genai::OPERATION_NAME, INVOKE_AGENT);
                span.set(telemetry::genai::AGENT_ID, record.agent_id.to_string());
            }
        }
        span.set(telemetry::genai::RUN_ID, record.run_id.to_string());
        span.set(telemetry::genai::RUN_TYPE, record.run_type.as_str());
        span.set(telemetry::genai::ACCOUNT_ID, record.account_id.to_string());
        if let Some(session_id) = &record.session_id {
            span.set(telemetry::genai::CONVERSATION_ID, session_id.clone());
        }
        span
    }

    /// Ends the run's span as its record says it ended and exports the invocation's spans.
    async fn end_trace(&self, recorder: &Recorder, mut span: Span, record: &RunRecord, labels: Labels) {
        if span.is_recording() {
            let result = match record.status {
                RunStatus::Success => Ok(record.output.clone().unwrap_or_default()),
                _ => Err((
                    record.failure_reason.unwrap_or(FailureReason::Error),
                    record.error.clone().unwrap_or_default(),
                )),
            };
            crate::trace::record_end(&mut span, &result, &record.bill(), record.steps);
            span.set(telemetry::genai::PROVIDER_NAME, labels.provider);
            span.end();
        }
        self.export(recorder).await;
    }

    /// Gives the invocation's spans to the sink (or drops them: none).
    async fn export(&self, recorder: &Recorder) {
        match &self.spans {
            Some(sink) => sink.export(recorder).await,
            None => drop(recorder.take()),
        }
    }

    /// The trace of a run that ends without executing (refused at pick-up, lost): its span alone.
    async fn trace_unexecuted(&self, record: &RunRecord, agent: Option<&Agent>, labels: Labels) {
        if self.spans.is_none() {
            return;
        }
        let recorder = Recorder::default();
        let span = self.run_span(&recorder, record, agent);
        self.end_trace(&recorder, span, record, labels).await;
    }

    /// Keeps each account's spend (per-day totals, the month against its budget) in `usage`, and
    /// holds runs to the account's budget.
    pub fn with_usage(mut self, usage: UsageStore) -> Self {
        self.usage = Some(usage);
        self
    }

    /// The accounts' budgets, when spend is kept.
    pub fn budgets(&self) -> Option<Budgets> {
        let usage = self.usage.clone()?;
        Some(Budgets { usage, events: self.events.clone(), clock: Arc::clone(&self.clock) })
    }

    /// `Err` when the account's monthly budget is spent (no new run may start).
    async fn within_budget(&self, account: AccountId) -> Result<(), StartError> {
        match self.budgets() {
            Some(budgets) => budgets.allows_spending(account).await.map_err(StartError::Budget),
            None => Ok(()),
        }
    }

    /// Holds runs and streams to the account quotas of `quotas`.
    pub fn with_quotas(mut self, quotas: RunQuotas) -> Self {
        self.places = Places::new(quotas);
        self
    }

    /// Takes a place of `quota` named `holder` for `until` from now.
    async fn lease(
        &self,
        quota: fn(&RunQuotas) -> Quota,
        account: AccountId,
        holder: &str,
        until: Duration,
    ) -> Result<(), StartError> {
        self.places.take(quota, account, holder, until, (self.clock)().timestamp_millis()).await
    }

    /// Gives back what an ended run held (`Places::give_back_run`).
    pub(crate) async fn release_run(&self, run: &RunRecord) {
        self.places.give_back_run(run).await;
    }

    /// Takes a place among the account's queued runs for run `run_id`, which waits at most the
    /// queue's limit and then runs at most `timeout` (the scheduler and `enqueue`).
    pub async fn lease_queued(&self, account: AccountId, run_id: RunId, timeout: Duration) -> Result<(), StartError> {
        self.within_budget(account).await?;
        self.lease(|quotas| quotas.queued_runs, account, &run_id.to_string(), self.max_queue_wait + timeout).await
    }

    /// Gives back run `run_id`'s place among the account's queued runs (a run that was not
    /// recorded after all, or a due time another scheduler tick decided not to fire).
    pub async fn give_back_queued(&self, account: AccountId, run_id: RunId) {
        self.places.give_back(|quotas| quotas.queued_runs, account, &run_id.to_string()).await;
    }

    /// Follows run `run_id` after event `after` (`crate::follow`), holding a place among the
    /// account's followed streams while it does.
    pub async fn follow(
        &self,
        account: AccountId,
        run_id: RunId,
        after: u64,
    ) -> Result<mpsc::UnboundedReceiver<String>, StartError> {
        let place = self.follower_place(account).await?;
        Ok(self.follow_in(place, run_id, after))
    }

    /// A place among the account's followed streams, taken before what the stream will follow
    /// exists (a queued execution takes it before it queues its run).
    pub async fn follower_place(&self, account: AccountId) -> Result<FollowerPlace, StartError> {
        let holder = format!("follow-{}", Uuid::new_v4());
        self.lease(|quotas| quotas.stream_followers, account, &holder, crate::follow::MAX_FOLLOW).await?;
        Ok(FollowerPlace { account, holder })
    }

    /// Gives back a place that followed nothing.
    pub async fn give_back(&self, place: FollowerPlace) {
        self.places.give_back(|quotas| quotas.stream_followers, place.account, &place.holder).await;
    }

    /// Follows run `run_id` after event `after` in `place`, given back when the stream ends.
    pub fn follow_in(&self, place: FollowerPlace, run_id: RunId, after: u64) -> mpsc::UnboundedReceiver<String> {
        let mut followed = crate::follow::follow(self.runs.clone(), run_id, after, self.clock());
        let (frames, receiver) = mpsc::unbounded_channel();
        let places = self.places.clone();
        tokio::spawn(async move {
            while let Some(frame) = followed.recv().await {
                if frames.send(frame).is_err() {
                    break;
                }
            }
            places.give_back(|quotas| quotas.stream_followers, place.account, &place.holder).await;
        });
        receiver
    }

    /// Times runs by `clock` (tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Lets queued and scheduled runs wait at most `max_wait` for a worker.
    pub fn with_max_queue_wait(mut self, max_wait: Duration) -> Self {
        self.max_queue_wait = max_wait;
        self
    }

    /// Records the end of scheduled runs on their schedule.
    pub fn with_schedules(mut self, schedules: platform_data::schedules::ScheduleStore) -> Self {
        self.schedules = Some(schedules);
        self
    }

    /// Publishes the run's webhook events through `publisher`.
    pub fn with_events(mut self, publisher: Publisher) -> Self {
        self.events = Some(publisher);
        self
    }

    /// The webhook event `event_type` about `run`, ready to be written in the transaction of
    /// the state change it announces (`None` without a publisher; a failure to read the
    /// account's endpoints is logged and the change written without its event).
    async fn prepare_event(&self, event_type: &str, run: &RunRecord) -> Option<Prepared> {
        let publisher = self.events.as_ref()?;
        match publisher.prepare(run.account_id, event_type, run.view(), (self.clock)()).await {
            Ok(prepared) if prepared.items.len() <= MAX_EVENT_ITEMS => Some(prepared),
            Ok(_) => {
                tracing::error!(run_id = %run.run_id, event_type, "more webhook endpoints than a transaction holds; event not published");
                None
            }
            Err(err) => {
                tracing::error!(run_id = %run.run_id, event_type, error = %err, "run event not published");
                None
            }
        }
    }

    /// Queues the deliveries of an event written with its state change.
    async fn queue_event(&self, prepared: Option<Prepared>) {
        if let (Some(publisher), Some(prepared)) = (&self.events, prepared) {
            publisher.queue(&prepared).await;
        }
    }

    /// Where custom tools run, which also checks their scripts (`POST /tools/validation`).
    pub fn tool_sandbox(&self) -> &crate::tools::python::ToolSandbox {
        &self.sources.tool_sandbox
    }

    /// The run store, for reads (lists, resumed streams).
    pub fn runs(&self) -> &RunStore {
        &self.runs
    }

    /// Where runs' parts are read from (the runner's agent health checks; tests prepare runs).
    pub fn sources(&self) -> &Arc<RunSources> {
        &self.sources
    }

    /// The clock runs are timed by (for followers).
    pub fn clock(&self) -> Clock {
        Arc::clone(&self.clock)
    }

    /// The time by the clock runs are timed by.
    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// Records a new run of `agent`, `started`, without executing it, and publishes
    /// `run.started`. An `api` run's `timeout` bounds it from now; a `queue` or `schedule` run
    /// waits for a worker (at most the runner's queue wait) and its `timeout` counts from the
    /// pick-up.
    pub async fn create(&self, agent: &Agent, start: &StartRun, timeout: Duration) -> Result<RunRecord, StoreError> {
        let record = self.create_once(RunId::now_v7(), agent, start, timeout).await?;
        record.ok_or_else(|| StoreError::request("TransactWriteItems", "a new run id was already taken"))
    }

    /// Records run `run_id` as `create` does, unless a run with that id exists: `None` then (a
    /// scheduled run's id is derived from its schedule and due time, so this is its claim).
    pub async fn create_once(
        &self,
        run_id: RunId,
        agent: &Agent,
        start: &StartRun,
        timeout: Duration,
    ) -> Result<Option<RunRecord>, StoreError> {
        let origin = start.origin.clone();
        let mut record = RunRecord::start(
            run_id,
            agent.id,
            agent.account_id,
            origin,
            (self.clock)(),
            timeout,
            self.runs.retention(),
        );
        if record.run_type != RunType::Api {
            record = record.waiting_for_a_worker(self.max_queue_wait);
        }
        if start.request.message != record.input.message {
            record.prompt = Some(start.request.message.clone());
        }
        record.session_key = record
            .session_id
            .as_deref()
            .filter(|_| agent.spec.agent_config.keeps_memory())
            .map(|session_id| crate::runs::session_key(agent.id, session_id));
        // `run.started` is written with the run: both or neither.
        let event = self.prepare_event("run.started", &record).await;
        let items = event.as_ref().map(|event| event.items.clone()).unwrap_or_default();
        if !self.runs.create(&record, items).await? {
            return Ok(None);
        }
        self.queue_event(event).await;
        Ok(Some(record))
    }

    /// Records a new run of `agent` and executes it in this process. Fails only when the run
    /// cannot be recorded (or its conversation read).
    pub async fn start(&self, agent: Agent, start: StartRun) -> Result<RunHandle, StartError> {
        let timeout = crate::timeouts::run_timeout(start.request.timeout, &agent.spec.metadata, MAX_RUN_TIMEOUT);
        let mut request = start.request.clone();
        request.history = self.history(&agent, start.origin.session_id.as_deref()).await?;
        let run_id = RunId::now_v7();
        self.within_budget(agent.account_id).await?;
        self.lease(|quotas| quotas.concurrent_runs, agent.account_id, &run_id.to_string(), timeout).await?;
        let record = match self.create_once(run_id, &agent, &start, timeout).await {
            Ok(Some(record)) => record,
            failed => {
                self.places.give_back(|quotas| quotas.concurrent_runs, agent.account_id, &run_id.to_string()).await;
                failed?;
                return Err(StoreError::request("TransactWriteItems", "a new run id was already taken").into());
            }
        };
        let (frames, receiver) = mpsc::unbounded_channel();
        let runner = self.clone();
        let finished = tokio::spawn(async move {
            let (record, _) = runner.drive(agent, request, record, frames, Progress::default()).await;
            record
        });
        Ok(RunHandle { run_id, frames: receiver, finished })
    }

    /// Executes (or goes on executing) the recorded run `run_id` in this invocation, as the
    /// queue worker does: the run's lease first (so no two deliveries execute it at once), then
    /// its journal replayed, new steps journaled, a pause before `invocation`'s end.
    pub async fn resume(&self, run_id: RunId, invocation: &Invocation) -> Result<Resumed, StoreError> {
        let now = (self.clock)();
        let Some(record) = self.runs.get(run_id, now).await? else { return Ok(Resumed::Missing) };
        if record.status != RunStatus::Started {
            return Ok(Resumed::Ended(Box::new(record)));
        }
        let left =
            chrono::Duration::from_std(invocation.deadline.saturating_duration_since(tokio::time::Instant::now()))
                .unwrap_or_default();
        let lease_until =
            now.checked_add_signed(left + chrono::Duration::seconds(5)).unwrap_or(DateTime::<Utc>::MAX_UTC);
        let Some(control) = self.runs.steps().claim(run_id, &invocation.owner, lease_until, now).await? else {
            return Ok(Resumed::Busy);
        };
        let resumed = self.resume_claimed(record, control, invocation).await;
        if let Err(err) = self.runs.steps().release(run_id, &invocation.owner).await {
            // The lease runs out by itself at the invocation's end.
            tracing::warn!(%run_id, error = %err, "run lease not released");
        }
        resumed
    }

    async fn resume_claimed(
        &self,
        record: RunRecord,
        control: crate::journal::Control,
        invocation: &Invocation,
    ) -> Result<Resumed, StoreError> {
        let run_id = record.run_id;
        let agent = match self.sources.agents.get(record.account_id, record.agent_id).await? {
            Some(agent) if agent.deleted_at.is_none() => agent,
            _ => {
                let ended = self
                    .end_early(record, FailureReason::Error, "the agent was deleted before its run executed", None)
                    .await;
                return Ok(Resumed::Ended(Box::new(ended)));
            }
        };
        if control.cancel_requested_at.is_some() {
            return Ok(Resumed::Ended(Box::new(
                self.end_early(record, FailureReason::Cancelled, CANCELLED_MESSAGE, Some(&agent)).await,
            )));
        }
        // A run queued (or scheduled) before its account's budget was spent does not start.
        if let Err(StartError::Budget(reached)) = self.within_budget(record.account_id).await {
            let message = format!("{reached}; the run did not start");
            return Ok(Resumed::Ended(Box::new(
                self.end_early(record, FailureReason::BudgetExceeded, &message, Some(&agent)).await,
            )));
        }
        // A place among the account's executing runs until the run's deadline (a continuation
        // renews its own).
        let now = (self.clock)();
        let left = if record.is_waiting() {
            record.timeout()
        } else {
            (record.deadline_at - now).to_std().unwrap_or(Duration::ZERO)
        };
        match self.lease(|quotas| quotas.concurrent_runs, record.account_id, &run_id.to_string(), left).await {
            // (A lease is no budget check.)
            Ok(()) | Err(StartError::Budget(_)) => {}
            Err(StartError::Quota(full)) => {
                let seconds = u64::try_from(full.retry_after_seconds).unwrap_or(1);
                return Ok(Resumed::Deferred(Duration::from_secs(seconds)));
            }
            Err(StartError::Store(err)) => return Err(err),
        }
        let mut record = record;
        let mut picked_up = None;
        if record.is_waiting() {
            picked_up = Some((record.queued_at(), now));
            let waited = (now - record.queued_at()).num_milliseconds().max(0);
            telemetry::metrics::emit([telemetry::metrics::queue_wait(record.run_type.as_str(), waited as f64)]);
            // The first pick-up: the run's timeout counts from now, once (a continuation keeps it).
            if let Err(message) = record.begin(now) {
                return Ok(Resumed::Ended(Box::new(
                    self.end_early(record, FailureReason::Timeout, &message, Some(&agent)).await,
                )));
            }
            if !self.runs.begin(&record).await? {
                // Something ended it meanwhile (the sweep, a cancel): the place just taken goes
                // back.
                self.release_run(&record).await;
                return Ok(match self.runs.get(run_id, now).await? {
                    Some(ended) => Resumed::Ended(Box::new(ended)),
                    None => Resumed::Missing,
                });
            }
        }
        let done = self.runs.steps().steps(run_id).await?;
        let last_seq = self.runs.last_event_seq(run_id).await?;
        let request = RunRequest {
            message: record.prompt.clone().unwrap_or_else(|| record.input.message.clone()),
            history: self.history(&agent, record.session_id.as_deref()).await?,
            ..RunRequest::default()
        };
        // Past the start of the invocation's last step budget, no step starts (a budget longer
        // than the invocation pauses after every step).
        let pause_at =
            invocation.deadline.checked_sub(invocation.step_budget).unwrap_or_else(tokio::time::Instant::now);
        let pause = PauseWhen { deadline: pause_at };
        let journal = self.runs.steps().journal(run_id, done.len(), pause);
        // Nobody reads these frames: the run's stream is read from its recorded events.
        let (frames, _unread) = mpsc::unbounded_channel();
        let hard_stop = invocation.deadline.checked_sub(HARD_STOP_MARGIN).unwrap_or(invocation.deadline);
        let progress = Progress { journal: Some(journal), done, last_seq, picked_up };
        let drive = self.clone().drive(agent, request, record, frames, progress);
        match tokio::time::timeout_at(hard_stop, drive).await {
            Ok((record, false)) => Ok(Resumed::Ended(Box::new(record))),
            Ok((_, true)) => Ok(Resumed::Paused),
            // A step outlived the invocation: it is abandoned; a continuation replays the journal
            // (a tool call begun is not made again).
            Err(_) => Ok(Resumed::Paused),
        }
    }

    /// Ends a recorded run that will not execute, with its `metadata` and `error` events.
    pub(crate) async fn end_early(
        &self,
        mut record: RunRecord,
        reason: FailureReason,
        message: &str,
        agent: Option<&Agent>,
    ) -> RunRecord {
        let last_seq = self.ensure_metadata(&record).await;
        record.finish(&Err((reason, message.to_owned())), record.bill(), record.steps, (self.clock)());
        let labels = agent.map_or(Labels::UNKNOWN, Labels::of);
        let ending = self.record_end(record, last_seq + 1, false, labels).await;
        // The run's span is recorded with its end, by whoever recorded that end.
        if let Ending::Recorded(ended) = &ending {
            self.trace_unexecuted(ended, agent, labels).await;
        }
        ending.record()
    }

    /// The sequence number of the run's last event, after recording its `metadata` event if it
    /// has none (a run that ends before it executed).
    async fn ensure_metadata(&self, record: &RunRecord) -> u64 {
        let run_id = record.run_id;
        let last_seq = self.runs.last_event_seq(run_id).await.unwrap_or(0);
        if last_seq > 0 {
            return last_seq;
        }
        let trace_id = record.trace_id().map(str::to_owned);
        let metadata = [(1, RunEvent::Metadata { run_id, agent_id: record.agent_id, trace_id })];
        match self.runs.append_events(run_id, &metadata, (self.clock)()).await {
            Ok(()) => 1,
            Err(err) => {
                tracing::error!(%run_id, error = %err, "run events not recorded");
                0
            }
        }
    }

    /// Records the end of the runs lost with their process by `now`: open runs past their
    /// deadline and `STALE_MARGIN` (waiting runs past the queue's limit among them), found
    /// through the `open-by-deadline` index (at most `SWEEP_BATCH` per shard a sweep), each
    /// ended as any run ends (`record_end`: its record, its `error` event and `run.failed`
    /// together, its places given back). Reads already show such a run as it will be recorded
    /// (`RunRecord::settled`). Returns how many it ended.
    pub async fn sweep_lost(&self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        let mut ended = 0;
        for shard in 0..OPEN_SHARDS {
            for run_id in self.runs.overdue(shard, now - STALE_MARGIN, SWEEP_BATCH).await? {
                // The index follows the table late: the run may have ended or begun since. A run
                // that cannot be read is logged and passed over: it cannot stop the others' ends.
                let run = match self.runs.get_stored(run_id).await {
                    Ok(Some(run)) => run,
                    Ok(None) => continue,
                    Err(err) => {
                        tracing::error!(%run_id, error = %err, "a lost run could not be read; the sweep passes over it");
                        continue;
                    }
                };
                if !run.is_stale(now) {
                    // Ended, its process gone before its spend was added to the day's totals.
                    if run.usage_pending && run.status != RunStatus::Started {
                        self.settle_usage(&run).await;
                    }
                    continue;
                }
                let last_seq = self.ensure_metadata(&run).await;
                if let Ending::Recorded(run) =
                    self.record_end(run.settled(now), last_seq + 1, true, Labels::UNKNOWN).await
                {
                    tracing::warn!(%run_id, "a run lost with its process was ended by the sweep");
                    self.trace_unexecuted(&run, None, Labels::UNKNOWN).await;
                    ended += 1;
                }
            }
        }
        Ok(ended)
    }

    /// Adds an ended run's spend to its account's and agent's per-day totals, once (logged when
    /// it fails: the sweep finds the run's `usage_pending` mark and does it later).
    /// Returns whether it did (now).
    async fn settle_usage(&self, run: &RunRecord) -> bool {
        let Some(usage) = &self.usage else { return false };
        let settled = match usage.run_items(run) {
            Ok(items) => self.runs.settle_usage(run.run_id, items).await,
            Err(err) => Err(err),
        };
        settled.unwrap_or_else(|err| {
            tracing::warn!(run_id = %run.run_id, error = %err, "run's usage not added to the day's totals; the sweep will");
            false
        })
    }

    /// Marks the run for cancelling: whichever process executes it stops it within its current
    /// step (see `CANCEL_POLL_INTERVAL`). A queued run not yet executing ends when delivered.
    pub async fn request_cancel(&self, run_id: RunId) -> Result<(), StoreError> {
        self.runs.steps().request_cancel(run_id, (self.clock)()).await
    }

    /// Cancels a `started` run and answers it as it is after at most `wait`.
    ///
    /// The cancel is recorded first (idempotent). A queued run that no invocation holds (waiting
    /// for its delivery, or between continuations) is then ended here at once, under its lease,
    /// so a cancel never waits for the queue. Otherwise the process executing the run stops it
    /// within `CANCEL_POLL_INTERVAL`; the run is read again until it ended or `wait` passed (a
    /// `started` answer: the cancel is pending).
    pub async fn cancel(&self, record: RunRecord, wait: Duration) -> Result<RunRecord, StoreError> {
        let run_id = record.run_id;
        self.request_cancel(run_id).await?;
        if record.run_type != RunType::Api {
            let owner = format!("cancel-{}", Uuid::new_v4());
            let now = (self.clock)();
            if self.runs.steps().claim(run_id, &owner, now + chrono::Duration::seconds(30), now).await?.is_some() {
                let ended = match self.runs.get(run_id, now).await? {
                    Some(current) if current.status == RunStatus::Started => {
                        self.end_early(current, FailureReason::Cancelled, CANCELLED_MESSAGE, None).await
                    }
                    current => current.unwrap_or(record.clone()),
                };
                if let Err(err) = self.runs.steps().release(run_id, &owner).await {
                    tracing::warn!(%run_id, error = %err, "run lease not released after a cancel");
                }
                return Ok(ended);
            }
        }
        let until = tokio::time::Instant::now() + wait;
        let mut current = record;
        while current.status == RunStatus::Started && tokio::time::Instant::now() < until {
            tokio::time::sleep(CANCEL_WAIT_POLL.min(until.saturating_duration_since(tokio::time::Instant::now())))
                .await;
            match self.runs.get(run_id, (self.clock)()).await? {
                Some(read) => current = read,
                None => break,
            }
        }
        Ok(current)
    }

    /// The earlier conversation of a session, for an agent with memory.
    async fn history(
        &self,
        agent: &Agent,
        session_id: Option<&str>,
    ) -> Result<Vec<crate::providers::Message>, StoreError> {
        match session_id.filter(|_| agent.spec.agent_config.keeps_memory()) {
            None => Ok(Vec::new()),
            Some(session_id) => {
                let limit = history_limit(&agent.spec.metadata);
                self.runs.session_history(agent.id, session_id, limit, (self.clock)()).await
            }
        }
    }

    /// Resolves when a cancel of `run_id` is recorded (polled every `CANCEL_POLL_INTERVAL`).
    async fn cancel_requested(runs: RunStore, run_id: RunId) {
        loop {
            tokio::time::sleep(CANCEL_POLL_INTERVAL).await;
            match runs.steps().control(run_id).await {
                Ok(control) if control.cancel_requested_at.is_some() => return,
                Ok(_) => {}
                Err(err) => tracing::warn!(%run_id, error = %err, "cancel check failed"),
            }
        }
    }

    /// Prepares and executes the run from where `progress` says it is, relaying and recording
    /// its events (numbered after its last), then records its end; `true` when it paused instead
    /// (journaled runs only).
    async fn drive(
        self,
        agent: Agent,
        request: RunRequest,
        record: RunRecord,
        frames: mpsc::UnboundedSender<String>,
        progress: Progress,
    ) -> (RunRecord, bool) {
        let Progress { journal, done, last_seq, picked_up } = progress;
        let (events, mut receiver) = mpsc::unbounded_channel();
        let run_id = record.run_id;
        let flow_session = flow_session(record.account_id, agent.id, record.session_id.as_deref(), run_id);
        let sources = Arc::clone(&self.sources);
        let remaining = (record.deadline_at - (self.clock)()).to_std().unwrap_or(Duration::ZERO);
        let time = RunTime { remaining, timeout: record.timeout() };
        let cancelled = Self::cancel_requested(self.runs.clone(), run_id);
        let resumed = !done.is_empty() || last_seq > 0;
        let gate = self.budgets().map(|budgets| Arc::new(budgets.gate(record.account_id)) as Arc<dyn SpendGate>);
        // The run's trace: its span, this invocation's spans under it, exported at the end.
        let recorder = Recorder::default();
        let mut root = self.run_span(&recorder, &record, Some(&agent));
        let mut labels = Labels::of(&agent);
        // The model a config run asks, once prepared: its provider labels the run.
        let asked: std::sync::OnceLock<(&'static str, String)> = std::sync::OnceLock::new();
        let asked_model = &asked;
        let execution = async move {
            if let Some((queued_at, began_at)) = picked_up {
                Span::start(telemetry::genai::QUEUE_WAIT, Kind::Internal)
                    .started_at(queued_at.into())
                    .end_at(began_at.into());
            }
            // A run another invocation began: this invocation's part of it.
            let _continuation =
                (journal.is_some() && resumed).then(|| Span::start(telemetry::genai::CONTINUE_RUN, Kind::Internal));
            if agent.spec.agent_type != AgentType::Config
                && let Some(journal) = &journal
            {
                // A delegated run is one step: a delivery that finds it begun does not call the
                // remote agent or flow a second time.
                let remote = Step::ToolStarted { call_id: REMOTE_STEP.to_owned() };
                let interrupted = done.contains(&remote);
                let recorded = if interrupted { Ok(()) } else { journal.record(vec![remote]).await };
                if interrupted || recorded.is_err() {
                    let message = if interrupted {
                        "the remote run was interrupted with its worker; it is not started a second time"
                    } else {
                        "the run's progress could not be recorded"
                    };
                    if !resumed {
                        let _ = events.send(RunEvent::metadata(run_id, agent.id));
                    }
                    let _ = events.send(RunEvent::Error {
                        run_id,
                        failure_reason: FailureReason::Error,
                        message: message.to_owned(),
                        bill: Bill::default(),
                    });
                    return Some((Err((FailureReason::Error, message.to_owned())), Bill::default(), 0));
                }
            }
            match agent.spec.agent_type {
                AgentType::A2a => {
                    let call = remote_run(&sources.client, &agent, run_id, &request.message, time, &events);
                    return Self::unless_cancelled(call, cancelled, run_id, &events).await;
                }
                AgentType::Flowtool => {
                    let call = flow_run(&sources, &agent, run_id, &request.message, &flow_session, time, &events);
                    return Self::unless_cancelled(call, cancelled, run_id, &events).await;
                }
                AgentType::Config => {}
            }
            match sources.prepare(&agent, request, run_id, 0).await {
                Ok(PreparedRun { mut run, sessions }) => {
                    let _ = asked_model.set((run.provider_name, run.model_name.clone()));
                    run.gate = gate;
                    run.timeout = remaining;
                    run.stated_timeout = Some(time.timeout);
                    let journal = journal.as_ref().map(|journal| journal as &dyn Journal);
                    let execution = execute_resumable(run, journal, done, events, cancelled).await;
                    PreparedRun::close(sessions).await;
                    match execution {
                        Execution::Ended(outcome) => Some((outcome.result, outcome.spend.bill(), outcome.steps)),
                        Execution::Paused { .. } => None,
                    }
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
                    if !resumed {
                        let _ = events.send(RunEvent::metadata(run_id, agent.id));
                    }
                    let _ = events.send(RunEvent::Error {
                        run_id,
                        failure_reason: reason,
                        message: message.clone(),
                        bill: Bill::default(),
                    });
                    Some((Err((reason, message)), Bill::default(), 0))
                }
            }
        };
        let relay = self.relay(run_id, last_seq, &mut receiver, &frames);
        // Boxed: the execution is a large future, and the queue worker polls it on a thread's stack.
        let (ending, last_seq) = tokio::join!(Box::pin(root.run(execution)), relay);
        let Some((result, bill, steps)) = ending else {
            // Paused: the invocation that ends the run records its span.
            root.discard();
            self.export(&recorder).await;
            return (record, true);
        };
        if let Some((provider, model)) = asked.get() {
            labels.provider = provider;
            root.set(telemetry::genai::REQUEST_MODEL, model.clone());
        }
        let mut record = record;
        // A resumed run's earlier invocations' turns are in its journal's spend and steps.
        record.finish(&result, bill, steps, (self.clock)());
        let seq = last_seq + 1;
        let ending = self.record_end(record, seq, false, labels).await;
        // The client's last event is the recorded one, sent once it is recorded: a stream never
        // says `done` for a run whose record says otherwise. Unrecorded, the stream ends without
        // one (the sweep records the run's end; a resumed stream shows it).
        if let Some(ended) = ending.recorded() {
            let _ = frames.send(ended.last_event().to_sse(seq));
        }
        let recorded = matches!(ending, Ending::Recorded(_));
        let record = ending.record();
        // Exported before the stream ends (`frames` is still open): nothing is lost when the
        // invocation returns. The run's span goes with the end this invocation recorded; an end
        // recorded elsewhere (the sweep, a cancel) recorded it there.
        if !recorded {
            root.discard();
            self.export(&recorder).await;
        } else {
            self.end_trace(&recorder, root, &record, labels).await;
        }
        (record, false)
    }

    /// Runs a delegated (a2a, flowtool) run unless a cancel comes first: then the call is
    /// dropped (its connection closed) and the run ends `cancelled`.
    async fn unless_cancelled(
        call: impl std::future::Future<Output = (Result<String, (FailureReason, String)>, Bill, u32)>,
        cancelled: impl std::future::Future<Output = ()>,
        run_id: RunId,
        events: &mpsc::UnboundedSender<RunEvent>,
    ) -> Option<(Result<String, (FailureReason, String)>, Bill, u32)> {
        tokio::select! {
            ending = call => Some(ending),
            () = cancelled => {
                let _ = events.send(RunEvent::Error {
                    run_id,
                    failure_reason: FailureReason::Cancelled,
                    message: CANCELLED_MESSAGE.to_owned(),
                    bill: Bill::default(),
                });
                Some((Err((FailureReason::Cancelled, CANCELLED_MESSAGE.to_owned())), Bill::default(), 1))
            }
        }
    }

    /// Records the run's end with its last event (number `seq`) and its webhook event in one
    /// transaction (unless something ended it first), queues the event's deliveries, records the
    /// end on its schedule, and gives back the run's places in its account's quotas.
    /// Only the sweep ends a run `lost` (past its deadline: `RunStore::finish`).
    /// `labels` are the dimensions of the run's metrics.
    pub(crate) async fn record_end(&self, mut record: RunRecord, seq: u64, lost: bool, labels: Labels) -> Ending {
        let run_id = record.run_id;
        if self.usage.is_some() {
            record.mark_usage_pending((self.clock)());
        }
        let event_type = if record.status == RunStatus::Success { "run.succeeded" } else { "run.failed" };
        let event = self.prepare_event(event_type, &record).await;
        let items = event.as_ref().map(|event| event.items.clone()).unwrap_or_default();
        let ending = match self.runs.finish(&record, seq, items, (self.clock)(), lost).await {
            Ok(true) => {
                self.queue_event(event).await;
                emit_run_metrics(&record, labels, lost);
                if self.settle_usage(&record).await {
                    record.usage_settled();
                }
                if let (Some(schedules), Some(schedule_id)) = (&self.schedules, record.schedule_id) {
                    let status = record.status.as_str();
                    if let Err(err) = schedules.record_end(record.account_id, schedule_id, run_id, status).await {
                        tracing::error!(%run_id, %schedule_id, error = %err, "schedule's last run status not recorded");
                    }
                }
                Ending::Recorded(record)
            }
            Ok(false) => {
                tracing::warn!(%run_id, "the run had already been ended (found lost, or cancelled)");
                match self.runs.get(run_id, (self.clock)()).await {
                    Ok(Some(stored)) => Ending::EndedElsewhere(stored),
                    _ => Ending::NotRecorded(record),
                }
            }
            Err(err) => {
                tracing::error!(%run_id, error = %err, "run end not recorded; the sweep will record it");
                Ending::NotRecorded(record)
            }
        };
        self.release_run(ending.as_record()).await;
        ending
    }

    /// Numbers each event after `last_seq`, sends its frame to the client (if still there) and
    /// writes events in batches; keep-alives while nothing happens. The `done` or `error` event
    /// is left to the run's end (`record_end`). Returns, once every event is written, the last
    /// sequence number used.
    async fn relay(
        &self,
        run_id: RunId,
        last_seq: u64,
        receiver: &mut mpsc::UnboundedReceiver<RunEvent>,
        frames: &mpsc::UnboundedSender<String>,
    ) -> u64 {
        let mut sequence = last_seq;
        let mut pending: Vec<(u64, RunEvent)> = Vec::new();
        let mut flush_at: Option<tokio::time::Instant> = None;
        loop {
            let wait =
                flush_at.map_or(KEEP_ALIVE_INTERVAL, |at| at.saturating_duration_since(tokio::time::Instant::now()));
            match tokio::time::timeout(wait, receiver.recv()).await {
                // The last event is the record's, written and sent with the run's end.
                Ok(Some(RunEvent::Done { .. } | RunEvent::Error { .. })) => {}
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
                    return sequence;
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

    async fn flush(&self, run_id: RunId, pending: &mut Vec<(u64, RunEvent)>) {
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

/// What a run's metrics and span say of it: its agent's type and its model's provider
/// (`gen_ai.provider.name`; for a delegated run, the protocol it delegates over).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Labels {
    agent_type: &'static str,
    provider: &'static str,
}

impl Labels {
    /// A run whose agent is not known here (the sweep's).
    const UNKNOWN: Self = Self { agent_type: "unknown", provider: "none" };

    /// A run of `agent`, before its model is known.
    fn of(agent: &Agent) -> Self {
        let agent_type = agent.spec.agent_type;
        Self { agent_type: agent_type.as_str(), provider: crate::trace::delegated_provider(agent_type) }
    }
}

/// A recorded run's end as metrics: `RunsEnded` by outcome, agent type and provider, and its
/// tokens and cost.
fn emit_run_metrics(record: &RunRecord, labels: Labels, lost: bool) {
    use telemetry::metrics::{RunEnd, Tokens, run_ended};
    let outcome = match (record.status, record.failure_reason) {
        _ if lost => "lost",
        (RunStatus::Success, _) => "success",
        (_, reason) => reason.unwrap_or(FailureReason::Error).as_str(),
    };
    let usage = record.usage;
    let tokens = Tokens {
        input: usage.input_tokens,
        output: usage.output_tokens,
        cache_read: usage.cache_read_tokens,
        cache_write: usage.cache_write_tokens,
    };
    let end = RunEnd { outcome, agent_type: labels.agent_type, provider: labels.provider };
    telemetry::metrics::emit(run_ended(end, tokens, record.cost.map(|cost| cost.amount_micros)));
}

/// Where an execution takes a run up: from the start for a run executed where it was started
/// (the default); for a queued run, its journal, the steps it recorded and its last event's
/// sequence number.
#[derive(Default)]
struct Progress {
    journal: Option<StoredJournal>,
    done: Vec<Step>,
    last_seq: u64,
    /// When a queued run was recorded and when this invocation picked it up (its first).
    picked_up: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

/// The journal's step of a delegated (a2a, flowtool) run's remote call.
const REMOTE_STEP: &str = "remote";

/// The most items a run's webhook event may add to the transaction of its state change
/// (DynamoDB takes 100; the run's own items take at most 3). The webhook endpoint quota (at most
/// 90) keeps every account under it.
pub(crate) const MAX_EVENT_ITEMS: usize = 97;

/// Lost runs read per `open-by-deadline` shard by one sweep; the rest wait for the next.
pub const SWEEP_BATCH: i32 = 100;

/// The message of a run ended by a cancel.
pub const CANCELLED_MESSAGE: &str = "the run was cancelled";

/// How long before an invocation's end a step still running is abandoned (the run continues in
/// the next invocation).
pub const HARD_STOP_MARGIN: Duration = Duration::from_secs(20);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn the_history_limit_defaults_and_is_bounded() {
        assert_eq!(history_limit(&object(json!({"chat_history_limit": 4}))), 4);
        assert_eq!(history_limit(&object(json!({"chat_history_limit": "x"}))), DEFAULT_CHAT_HISTORY_LIMIT);
        assert_eq!(history_limit(&object(json!({"chat_history_limit": 1e9}))), 1000);
        assert_eq!(history_limit(&object(json!({"chat_history_limit": 10.0}))), 10);
        assert_eq!(history_limit(&object(json!({"chat_history_limit": 2.5}))), DEFAULT_CHAT_HISTORY_LIMIT);
        assert_eq!(history_limit(&object(json!({"chat_history_limit": -1}))), DEFAULT_CHAT_HISTORY_LIMIT);
        assert_eq!(history_limit(&object(json!({"chat_history_limit": 5000}))), 1000);
    }

    #[tokio::test]
    async fn a_deadline_is_an_epoch_time_in_lambda_and_a_budget_under_cargo_lambda_watch() {
        let now = Utc::now();
        let in_lambda = u64::try_from(now.timestamp_millis()).unwrap() + 300_000;
        let left = |invocation: Invocation| invocation.deadline - tokio::time::Instant::now();
        let lambda = left(Invocation::ending_at_epoch_ms("a", in_lambda, now));
        assert!(lambda > Duration::from_secs(290) && lambda <= Duration::from_secs(300), "{lambda:?}");
        let watched = left(Invocation::ending_at_epoch_ms("b", 600_000, now));
        assert!(watched > Duration::from_secs(590) && watched <= Duration::from_secs(600), "{watched:?}");
        let past = left(Invocation::ending_at_epoch_ms("c", in_lambda - 600_000, now));
        assert_eq!(past, Duration::ZERO);
    }
}
