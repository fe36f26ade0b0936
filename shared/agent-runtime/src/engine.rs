//! The tool-calling loop of a `config` agent: model turns, the tool calls of each turn run
//! concurrently (within `RunLimits`), limits (turns, time, fan-out) and cancellation, every step
//! emitted as a `RunEvent`.
//!
//! The engine knows nothing of HTTP or storage: an entry point builds an `AgentRun`, hands the
//! engine a channel, and streams or records what comes out of it.

use crate::events::{FailureReason, RunEvent, Usage};
use crate::journal::{Journal, Step};
use crate::providers::{Attachment, DeltaSink, Message, Provider, ToolCall, ToolSpec, Turn, TurnRequest};
use crate::spend::{RunModel, Spend};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use platform_data::ids::{AgentId, RunId};
use serde_json::{Map, Value};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// `agent_config.max_recursion_limit` when the agent sets none (the spec's documented default).
pub const DEFAULT_MAX_TURNS: u32 = 100;

/// Tool calls of one model turn that run by default; the rest are answered with an error.
pub const DEFAULT_TOOL_CALLS_PER_TURN: usize = 32;
/// Tool calls of one run (or sub-agent run) executing at once by default.
pub const DEFAULT_TOOL_CALL_CONCURRENCY: usize = 8;
/// Sub-agent calls of one run, its sub-agents' own included, by default.
pub const DEFAULT_SUB_AGENT_CALLS: u32 = 20;

/// How far one run may fan out: a model asking for thousands of tool calls must not exhaust the
/// account's Lambda concurrency or a third party (docs/agent-runtime.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// Most tool calls of one model turn that run; the model gets an error naming this limit
    /// for each call past it.
    pub tool_calls_per_turn: usize,
    /// Most tool calls executing at once (per run; a sub-agent's run has its own).
    pub tool_call_concurrency: usize,
    /// Most sub-agent calls of the whole run, nested ones included; a call past it is an error.
    pub sub_agent_calls: u32,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            tool_calls_per_turn: DEFAULT_TOOL_CALLS_PER_TURN,
            tool_call_concurrency: DEFAULT_TOOL_CALL_CONCURRENCY,
            sub_agent_calls: DEFAULT_SUB_AGENT_CALLS,
        }
    }
}

/// The sub-agent calls a run has made, shared with the runs of its sub-agents so that the cap
/// holds for the whole tree.
#[derive(Debug, Clone, Default)]
pub struct SubAgentCalls(Arc<AtomicU32>);

impl SubAgentCalls {
    /// Counts one more call; `false` when the run already made `max`.
    fn take(&self, max: u32) -> bool {
        self.0.fetch_add(1, Ordering::SeqCst) < max
    }

    /// Counts calls made by an earlier invocation of the run (its journal).
    fn add(&self, calls: u32) {
        self.0.fetch_add(calls, Ordering::SeqCst);
    }
}

/// What a tool call may know of the run it belongs to.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub run_id: RunId,
    /// Earlier tool outputs of this run, oldest first, when `agent_config.tool_output_sharing`
    /// is on (empty otherwise). Shared, not copied, by each call's own context.
    pub shared_outputs: Arc<Vec<SharedOutput>>,
    /// The run's sub-agent calls so far (a sub-agent's run counts into the same).
    pub sub_agent_calls: SubAgentCalls,
    /// The tokens this call spent on the run's behalf (a sub-agent's model turns, per model):
    /// added to the run's spend and journaled with the call's result. Each call has its own.
    pub spent: Spent,
    /// The run's budget check, which a sub-agent's run shares.
    pub gate: Option<Arc<dyn SpendGate>>,
}

/// Tokens a tool call spent (its sub-agent's turns), shared with the call that records them.
#[derive(Debug, Clone, Default)]
pub struct Spent(Arc<std::sync::Mutex<Spend>>);

impl Spent {
    /// Adds `spend` to what the call spent.
    pub fn add(&self, spend: &Spend) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).merge(spend);
    }

    /// What the call spent so far.
    pub fn total(&self) -> Spend {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// An account's monthly budget as a run sees it (`crate::budget`): checked before every model
/// turn, charged after it. The engine knows only this.
pub trait SpendGate: Send + Sync + std::fmt::Debug {
    /// `Err` with the run's failure message when the budget is reached: no turn may start.
    fn check(&self) -> BoxFuture<'_, Result<(), String>>;
    /// Counts a turn of `model` that used `usage` against the budget.
    fn charge<'a>(&'a self, model: &'a RunModel, usage: Usage) -> BoxFuture<'a, ()>;
}

/// One earlier tool output, as shared with later calls.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedOutput {
    pub call_id: String,
    pub name: String,
    pub output: Value,
}

/// Why a tool call failed; its text is the error the model and the run's events see.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// The model named a tool the run does not have.
    #[error("there is no tool named {0}")]
    Unknown(String),
    /// The call would run a sub-agent past the run's limit of sub-agent calls.
    #[error("not run: the run reached its limit of {0} sub-agent calls")]
    SubAgentLimit(u32),
    /// The tool ran and failed; the message says how.
    #[error("{0}")]
    Failed(String),
}

/// A tool the model may call.
pub trait Tool: Send + Sync {
    /// Its name, description and argument schema as the model sees them.
    fn spec(&self) -> &ToolSpec;

    /// Runs one call. An `Err` is given to the model as the call's error; the run goes on.
    fn call<'a>(
        &'a self,
        arguments: Map<String, Value>,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>>;

    /// Whether a call runs another agent (counted against `RunLimits::sub_agent_calls`).
    fn is_sub_agent(&self) -> bool {
        false
    }

    /// What kind of tool it is, for traces and metrics (`http`, `python`, `mcp`, `agent`).
    fn kind(&self) -> &'static str {
        "function"
    }
}

/// Everything one run of a `config` agent needs.
pub struct AgentRun {
    pub run_id: RunId,
    pub agent_id: AgentId,
    pub instruction: Option<String>,
    /// Earlier conversation (memory), oldest first.
    pub history: Vec<Message>,
    pub message: String,
    /// Images and documents sent with the message (the model reads them).
    pub attachments: Vec<Attachment>,
    pub provider: Arc<dyn Provider>,
    /// The language model the provider asks, with its prices when the run began.
    pub model: RunModel,
    /// The model's name and its provider's (`gen_ai.provider.name`), for the run's trace and
    /// metrics.
    pub model_name: String,
    pub provider_name: &'static str,
    pub tools: Vec<Arc<dyn Tool>>,
    /// Most model turns (`agent_config.max_recursion_limit`).
    pub max_turns: u32,
    /// Ask for a plan first (`agent_config.planning`).
    pub planning: bool,
    /// Share earlier tool outputs with later calls (`agent_config.tool_output_sharing`).
    pub tool_output_sharing: bool,
    /// What is left of the run's time.
    pub timeout: Duration,
    /// The timeout the run was given, named when it runs out; `None`: `timeout` (a run that
    /// began with all of its time).
    pub stated_timeout: Option<Duration>,
    pub limits: RunLimits,
    /// The sub-agent calls counted so far: new for a run, its parent's for a sub-agent's run.
    pub sub_agent_calls: SubAgentCalls,
    /// The account's budget, checked before every model turn (none: no budget is kept).
    pub gate: Option<Arc<dyn SpendGate>>,
}

/// How a run ended, for its record.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub result: Result<String, (FailureReason, String)>,
    /// The tokens of every model turn, sub-agents' included, per model.
    pub spend: Spend,
    /// Model turns taken (the run record's `steps`).
    pub steps: u32,
    /// The conversation of this run (the user's message, the model's turns, tool results), for
    /// memory.
    pub transcript: Vec<Message>,
}

/// The instruction of the planning turn.
const PLANNING_PROMPT: &str = "Before acting, write a short numbered plan of the steps you will take to answer. \
Reply with the plan only.";

/// Runs `run` to its end. Events go to `events` in order, the first `Metadata`, the last `Done`
/// or `Error`; a closed receiver does not stop the run. `cancelled` resolving stops it within
/// the current model turn or tool calls.
pub async fn execute(
    run: AgentRun,
    events: UnboundedSender<RunEvent>,
    cancelled: impl Future<Output = ()> + Send,
) -> RunOutcome {
    match execute_resumable(run, None, Vec::new(), events, cancelled).await {
        Execution::Ended(outcome) => outcome,
        // Only a journal pauses a run.
        Execution::Paused { spend, steps } => RunOutcome {
            result: Err((FailureReason::Error, "the run paused without a journal".to_owned())),
            spend,
            steps,
            transcript: Vec::new(),
        },
    }
}

/// How a resumable run stopped: at its end, or paused to be continued by another invocation.
#[derive(Debug, Clone, PartialEq)]
pub enum Execution {
    Ended(RunOutcome),
    /// Paused between steps, every step so far journaled; no last event was emitted.
    Paused {
        spend: Spend,
        steps: u32,
    },
}

/// Runs `run` from where its journal's `done` steps left it, journaling each new step in
/// `journal` (see `crate::journal`): a finished turn or tool call is never done again, and a
/// tool call begun but not finished gets an error result rather than a second call. A resumed
/// run (`done` not empty) does not emit `Metadata` again. With a journal, the run pauses before
/// a step once the journal says so, after at least one step of this invocation.
pub async fn execute_resumable(
    run: AgentRun,
    journal: Option<&dyn Journal>,
    done: Vec<Step>,
    events: UnboundedSender<RunEvent>,
    cancelled: impl Future<Output = ()> + Send,
) -> Execution {
    let emit = |event: RunEvent| {
        let _ = events.send(event);
    };
    if done.is_empty() {
        emit(RunEvent::metadata(run.run_id, run.agent_id));
    }
    let mut progress = Progress::default();
    let deadline = crate::timeouts::instant_after(run.timeout);
    let outcome = tokio::select! {
        // The run's own timeout first: a model stream bounded by the same deadline ends the run
        // as `timeout`, not as the stream's failure.
        biased;
        () = tokio::time::sleep_until(deadline) => {
            let timeout = run.stated_timeout.unwrap_or(run.timeout);
            Err((FailureReason::Timeout, crate::timeouts::did_not_finish("the run", timeout)).into())
        }
        result = loop_turns(&run, deadline, journal, done, &events, &mut progress) => result,
        () = cancelled => Err((FailureReason::Cancelled, "the run was cancelled".to_owned()).into()),
    };
    let outcome = match outcome {
        Err(Stop::Pause) => return Execution::Paused { spend: progress.spend, steps: progress.steps },
        Err(Stop::Fail(reason, message)) => Err((reason, message)),
        Ok(output) => Ok(output),
    };
    let bill = progress.spend.bill();
    emit(match &outcome {
        Ok(output) => RunEvent::Done { run_id: run.run_id, output: output.clone(), bill },
        Err((reason, message)) => {
            RunEvent::Error { run_id: run.run_id, failure_reason: *reason, message: message.clone(), bill }
        }
    });
    Execution::Ended(RunOutcome {
        result: outcome,
        spend: progress.spend,
        steps: progress.steps,
        transcript: progress.transcript,
    })
}

/// Why the loop stopped short of an answer.
enum Stop {
    Fail(FailureReason, String),
    Pause,
}

impl From<(FailureReason, String)> for Stop {
    fn from((reason, message): (FailureReason, String)) -> Self {
        Self::Fail(reason, message)
    }
}

/// What a run has done so far (kept outside the loop so a timeout or cancel still reports it).
#[derive(Default)]
struct Progress {
    spend: Spend,
    steps: u32,
    transcript: Vec<Message>,
    /// Steps taken by this invocation (a journaled run pauses only after one).
    taken: u32,
}

/// The result a resumed run gives a tool call that began before and never ended.
pub const INTERRUPTED_TOOL_CALL: &str =
    "the tool call was interrupted before it finished; it is not run a second time, since it may have had effects";

/// Rebuilds a run's progress from its journal: the transcript, turns, usage and shared outputs.
/// Returns the answer when the journal ends with the final turn, else the tool calls of the
/// last turn still to be made.
fn replay(
    done: Vec<Step>,
    run: &AgentRun,
    progress: &mut Progress,
    context: &mut ToolContext,
) -> (Option<String>, Vec<ToolCall>, bool) {
    let mut pending: Vec<ToolCall> = Vec::new();
    let mut started: Vec<String> = Vec::new();
    let mut planned = false;
    let mut answer = None;
    let finish_turn = |pending: &mut Vec<ToolCall>, started: &mut Vec<String>, progress: &mut Progress| {
        // The calls of the previous turn that began and never ended: an error result each.
        for call in pending.iter().filter(|call| started.contains(&call.id)) {
            progress.transcript.push(Message::Tool {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: format!("Error: {INTERRUPTED_TOOL_CALL}"),
            });
        }
        pending.retain(|call| !started.contains(&call.id));
        started.clear();
    };
    for step in done {
        match step {
            Step::Turn { text, tool_calls, usage, plan, model } => {
                finish_turn(&mut pending, &mut started, progress);
                progress.steps += 1;
                // Steps journaled before turns named their model were the run's own model's.
                progress.spend.add(model.as_ref().unwrap_or(&run.model), usage);
                planned |= plan;
                if !plan && tool_calls.is_empty() {
                    answer = Some(text.clone());
                }
                pending = tool_calls.clone();
                progress.transcript.push(Message::Assistant { text, tool_calls });
            }
            Step::ToolStarted { call_id } => {
                // A sub-agent call begun by an earlier invocation counts against the run's cap.
                if pending.iter().any(|call| call.id == call_id && names_sub_agent(&run.tools, &call.name)) {
                    context.sub_agent_calls.add(1);
                }
                started.push(call_id);
            }
            Step::ToolFinished { call_id, result, spend } => {
                let Some(position) = pending.iter().position(|call| call.id == call_id) else { continue };
                progress.spend.merge(&spend);
                let call = pending.remove(position);
                started.retain(|id| *id != call_id);
                if run.tool_output_sharing
                    && let Ok(output) = &result
                {
                    Arc::make_mut(&mut context.shared_outputs).push(SharedOutput {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        output: output.clone(),
                    });
                }
                progress.transcript.push(Message::Tool { call_id, name: call.name, content: tool_content(&result) });
            }
        }
    }
    finish_turn(&mut pending, &mut started, progress);
    (answer, pending, planned)
}

async fn loop_turns(
    run: &AgentRun,
    deadline: tokio::time::Instant,
    journal: Option<&dyn Journal>,
    done: Vec<Step>,
    events: &UnboundedSender<RunEvent>,
    progress: &mut Progress,
) -> Result<String, Stop> {
    let emit = |event: RunEvent| {
        let _ = events.send(event);
    };
    let mut on_delta = |delta: &str| {
        let _ = events.send(RunEvent::Message { delta: delta.to_owned() });
    };
    progress.transcript.push(Message::User { text: run.message.clone(), attachments: run.attachments.clone() });
    let mut context = ToolContext {
        run_id: run.run_id,
        shared_outputs: Arc::default(),
        sub_agent_calls: run.sub_agent_calls.clone(),
        spent: Spent::default(),
        gate: run.gate.clone(),
    };
    let (answer, mut pending, planned) = replay(done, run, progress, &mut context);
    if let Some(answer) = answer {
        return Ok(answer);
    }
    let conversation = |progress: &Progress| -> Vec<Message> {
        run.history.iter().chain(progress.transcript.iter()).cloned().collect()
    };
    let specs: Vec<ToolSpec> = run.tools.iter().map(|tool| tool.spec().clone()).collect();
    let pause_here = |progress: &Progress| journal.is_some_and(|journal| progress.taken > 0 && journal.should_pause());
    let record = |steps: Vec<Step>| async move {
        match journal {
            None => Ok(()),
            Some(journal) => journal.record(steps).await,
        }
    };

    if run.planning && !planned && progress.steps == 0 {
        let request = TurnRequest {
            system: Some(join_instructions(run.instruction.as_deref(), PLANNING_PROMPT)),
            messages: conversation(progress),
            tools: Vec::new(),
            deadline: Some(deadline),
        };
        within_budget(run).await?;
        // The plan is not the answer: it is emitted as `plan`, not as message deltas.
        let turn = ask_model(run, &request, &mut |_| {}).await?;
        progress.steps += 1;
        progress.taken += 1;
        spend_turn(run, progress, turn.usage).await;
        emit(RunEvent::Plan { plan: turn.text.clone() });
        let step = Step::Turn {
            text: turn.text.clone(),
            tool_calls: Vec::new(),
            usage: turn.usage,
            plan: true,
            model: Some(run.model.clone()),
        };
        if let Err(err) = record(vec![step]).await {
            // Not fatal: a resumed run would ask for the plan again.
            tracing::warn!(run_id = %run.run_id, error = %err, "planning turn not journaled");
        }
        progress.transcript.push(Message::Assistant { text: turn.text, tool_calls: Vec::new() });
    }

    loop {
        if !pending.is_empty() {
            if pause_here(progress) {
                return Err(Stop::Pause);
            }
            let calls = std::mem::take(&mut pending);
            let cap = run.limits.tool_calls_per_turn;
            let refusal = format!(
                "not run: the model asked for {} tool calls in one turn, past the run's limit of {cap} tool calls per turn",
                calls.len()
            );
            // Journaled before they run: a resumed run never calls them a second time. The calls
            // past the cap are journaled first, already answered, so a resumed run refuses the
            // same ones even after a partly written batch.
            let refused = calls.iter().skip(cap).map(|call| Step::ToolFinished {
                call_id: call.id.clone(),
                result: Err(refusal.clone()),
                spend: Spend::default(),
            });
            let started = calls.iter().take(cap).map(|call| Step::ToolStarted { call_id: call.id.clone() });
            record(refused.chain(started).collect()).await.map_err(|err| {
                tracing::error!(run_id = %run.run_id, error = %err, "tool calls not journaled");
                Stop::Fail(FailureReason::Error, "the run's progress could not be recorded".to_owned())
            })?;
            progress.taken += 1;
            let (call_context, refusal) = (&context, &refusal);
            let runs: Vec<_> = calls
                .iter()
                .enumerate()
                .map(|(position, call)| async move {
                    if position >= cap {
                        return (Err(refusal.clone()), Spend::default());
                    }
                    // Each call counts what it spends (a sub-agent's turns) on its own.
                    let own = ToolContext { spent: Spent::default(), ..call_context.clone() };
                    // Journaled and sent as text: a resumed run reads back what the model saw.
                    let result = traced_call(run, call, &own).await;
                    let spend = own.spent.total();
                    let step =
                        Step::ToolFinished { call_id: call.id.clone(), result: result.clone(), spend: spend.clone() };
                    if let Err(err) = record(vec![step]).await {
                        // A resumed run gives this call the interrupted error; it is not run again.
                        tracing::warn!(run_id = %run.run_id, error = %err, "tool result not journaled");
                    }
                    (result, spend)
                })
                .collect();
            // `buffered` keeps the results in the calls' order while at most the limit run.
            let results: Vec<(Result<Value, String>, Spend)> =
                futures_util::stream::iter(runs).buffered(run.limits.tool_call_concurrency.max(1)).collect().await;
            for (call, (result, spend)) in calls.iter().zip(results) {
                progress.spend.merge(&spend);
                emit(RunEvent::ToolResult { id: call.id.clone(), name: call.name.clone(), result: result.clone() });
                let content = tool_content(&result);
                if run.tool_output_sharing
                    && let Ok(output) = result
                {
                    Arc::make_mut(&mut context.shared_outputs).push(SharedOutput {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        output,
                    });
                }
                progress.transcript.push(Message::Tool { call_id: call.id.clone(), name: call.name.clone(), content });
            }
        }
        if progress.steps >= run.max_turns {
            return Err(Stop::Fail(
                FailureReason::RecursionLimit,
                format!("the agent did not finish within its limit of {} model turns", run.max_turns),
            ));
        }
        if pause_here(progress) {
            return Err(Stop::Pause);
        }
        let request = TurnRequest {
            system: run.instruction.clone(),
            messages: conversation(progress),
            tools: specs.clone(),
            deadline: Some(deadline),
        };
        within_budget(run).await?;
        let turn = ask_model(run, &request, &mut on_delta).await?;
        progress.steps += 1;
        progress.taken += 1;
        spend_turn(run, progress, turn.usage).await;
        let step = Step::Turn {
            text: turn.text.clone(),
            tool_calls: turn.tool_calls.clone(),
            usage: turn.usage,
            plan: false,
            model: Some(run.model.clone()),
        };
        if let Err(err) = record(vec![step]).await {
            // Not fatal: a resumed run would ask this turn again.
            tracing::warn!(run_id = %run.run_id, error = %err, "model turn not journaled");
        }
        if turn.tool_calls.is_empty() {
            progress.transcript.push(Message::Assistant { text: turn.text.clone(), tool_calls: Vec::new() });
            return Ok(turn.text);
        }
        for call in &turn.tool_calls {
            emit(RunEvent::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        progress.transcript.push(Message::Assistant { text: turn.text, tool_calls: turn.tool_calls.clone() });
        pending = turn.tool_calls;
    }
}

/// A tool's result as the text the model reads.
fn tool_content(result: &Result<Value, String>) -> String {
    match result {
        Ok(Value::String(text)) => text.clone(),
        Ok(output) => output.to_string(),
        Err(error) => format!("Error: {error}"),
    }
}

/// One model turn in its `chat` span, with its time to the first streamed chunk, and its
/// duration metric.
async fn ask_model(run: &AgentRun, request: &TurnRequest, on_delta: DeltaSink<'_>) -> Result<Turn, Stop> {
    let mut span = crate::trace::chat_span(run.provider_name, &run.model_name, request);
    let started = std::time::Instant::now();
    let mut first_chunk: Option<Duration> = None;
    let turn = {
        let mut timed = |delta: &str| {
            first_chunk.get_or_insert_with(|| started.elapsed());
            on_delta(delta);
        };
        span.run(run.provider.turn(request, &mut timed)).await
    };
    let first_chunk = first_chunk.map(|elapsed| elapsed.as_secs_f64());
    crate::trace::record_turn(&mut span, &turn, first_chunk);
    let millis = |seconds: f64| seconds * 1000.0;
    telemetry::metrics::emit([telemetry::metrics::model_turn(
        run.provider_name,
        millis(started.elapsed().as_secs_f64()),
        first_chunk.map(millis),
    )]);
    turn.map_err(provider_failure)
}

/// One tool call in its `execute_tool` span (its sub-agent, MCP and HTTP requests are the span's
/// children), with its metric; the result as the model reads it.
async fn traced_call(run: &AgentRun, call: &ToolCall, context: &ToolContext) -> Result<Value, String> {
    use telemetry::genai::*;
    let kind = run.tools.iter().find(|tool| tool.spec().name == call.name).map_or("unknown", |tool| tool.kind());
    let mut span = telemetry::Span::start(format!("{EXECUTE_TOOL} {}", call.name), telemetry::Kind::Internal);
    span.set(OPERATION_NAME, EXECUTE_TOOL);
    span.set(TOOL_NAME, call.name.clone());
    span.set(TOOL_CALL_ID, call.id.clone());
    span.set(TOOL_TYPE, TOOL_TYPE_EXTENSION);
    span.set(TOOL_KIND, kind);
    span.set_content(TOOL_CALL_ARGUMENTS, || Value::Object(call.arguments.clone()).to_string());
    let result = span.run(call_tool(run, call, context)).await.map_err(|err| err.to_string());
    match &result {
        Ok(output) => span.set_content(TOOL_CALL_RESULT, || output.to_string()),
        Err(error) => span.fail("tool_error", error),
    }
    telemetry::metrics::emit([telemetry::metrics::tool_call(kind, result.is_ok())]);
    result
}

async fn call_tool(run: &AgentRun, call: &ToolCall, context: &ToolContext) -> Result<Value, ToolError> {
    let Some(tool) = run.tools.iter().find(|tool| tool.spec().name == call.name) else {
        return Err(ToolError::Unknown(call.name.clone()));
    };
    let max = run.limits.sub_agent_calls;
    if tool.is_sub_agent() && !context.sub_agent_calls.take(max) {
        return Err(ToolError::SubAgentLimit(max));
    }
    tool.call(call.arguments.clone(), context).await
}

/// Whether the tool the model calls `name` runs a sub-agent.
fn names_sub_agent(tools: &[Arc<dyn Tool>], name: &str) -> bool {
    tools.iter().any(|tool| tool.spec().name == name && tool.is_sub_agent())
}

/// Stops the run with `budget_exceeded` when its account's budget is reached.
async fn within_budget(run: &AgentRun) -> Result<(), Stop> {
    match &run.gate {
        Some(gate) => gate.check().await.map_err(|message| Stop::Fail(FailureReason::BudgetExceeded, message)),
        None => Ok(()),
    }
}

/// Adds a finished turn's tokens to the run's spend and charges them to the account's budget.
async fn spend_turn(run: &AgentRun, progress: &mut Progress, usage: Usage) {
    progress.spend.add(&run.model, usage);
    if let Some(gate) = &run.gate {
        gate.charge(&run.model, usage).await;
    }
}

fn provider_failure(err: crate::providers::ProviderError) -> Stop {
    Stop::Fail(FailureReason::ProviderError, err.to_string())
}

fn join_instructions(instruction: Option<&str>, extra: &str) -> String {
    match instruction {
        Some(instruction) if !instruction.trim().is_empty() => format!("{instruction}\n\n{extra}"),
        _ => extra.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{DeltaSink, ProviderError, Turn};
    use serde_json::json;
    use std::sync::Mutex;
    use uuid::Uuid;

    /// A provider answering from a script, one turn per call, recording the requests.
    #[derive(Debug)]
    struct Scripted {
        turns: Mutex<Vec<Result<Turn, ProviderError>>>,
        requests: Mutex<Vec<TurnRequest>>,
    }

    impl Scripted {
        fn new(turns: Vec<Result<Turn, ProviderError>>) -> Arc<Self> {
            Arc::new(Self { turns: Mutex::new(turns.into_iter().rev().collect()), requests: Mutex::new(Vec::new()) })
        }
    }

    impl Provider for Scripted {
        fn turn<'a>(
            &'a self,
            request: &'a TurnRequest,
            on_delta: DeltaSink<'a>,
        ) -> BoxFuture<'a, Result<Turn, ProviderError>> {
            self.requests.lock().unwrap().push(request.clone());
            let next = self.turns.lock().unwrap().pop().unwrap_or_else(|| Ok(text("(script ended)")));
            if let Ok(turn) = &next {
                for word in turn.text.split_inclusive(' ') {
                    on_delta(word);
                }
            }
            Box::pin(async move { next })
        }
    }

    fn text(text: &str) -> Turn {
        Turn { text: text.into(), tool_calls: Vec::new(), usage: Usage::tokens(10, 2) }
    }

    fn calls(calls: &[(&str, &str, Value)]) -> Turn {
        let tool_calls = calls
            .iter()
            .map(|(id, name, arguments)| ToolCall {
                id: (*id).into(),
                name: (*name).into(),
                arguments: arguments.as_object().cloned().unwrap_or_default(),
            })
            .collect();
        Turn { text: String::new(), tool_calls, usage: Usage::tokens(5, 1) }
    }

    /// A tool answering with its arguments and the outputs shared with it, or failing.
    struct Echo {
        spec: ToolSpec,
        fails: bool,
        delay: Duration,
    }

    impl Echo {
        fn new(name: &str) -> Arc<Self> {
            Arc::new(Self { spec: spec(name), fails: false, delay: Duration::ZERO })
        }
    }

    fn spec(name: &str) -> ToolSpec {
        ToolSpec { name: name.into(), description: format!("{name} tool"), parameters: json!({"type": "object"}) }
    }

    impl Tool for Echo {
        fn spec(&self) -> &ToolSpec {
            &self.spec
        }

        fn call<'a>(
            &'a self,
            arguments: Map<String, Value>,
            context: &'a ToolContext,
        ) -> BoxFuture<'a, Result<Value, ToolError>> {
            Box::pin(async move {
                tokio::time::sleep(self.delay).await;
                if self.fails {
                    return Err(ToolError::Failed("the tool broke".into()));
                }
                let shared: Vec<&str> = context.shared_outputs.iter().map(|s| s.call_id.as_str()).collect();
                Ok(json!({"arguments": arguments, "shared": shared}))
            })
        }
    }

    fn run(provider: Arc<dyn Provider>, tools: Vec<Arc<dyn Tool>>) -> AgentRun {
        AgentRun {
            run_id: RunId::from(Uuid::from_u128(1)),
            agent_id: AgentId::from(Uuid::from_u128(2)),
            instruction: Some("Be helpful.".into()),
            history: Vec::new(),
            message: "What is the weather?".into(),
            attachments: Vec::new(),
            provider,
            tools,
            max_turns: DEFAULT_MAX_TURNS,
            planning: false,
            tool_output_sharing: false,
            timeout: Duration::from_secs(60),
            stated_timeout: None,
            limits: RunLimits::default(),
            sub_agent_calls: SubAgentCalls::default(),
            model: priced_model("parent-model", 1_000_000),
            model_name: "test-model".into(),
            provider_name: "openai",
            gate: None,
        }
    }

    /// A model whose input and output tokens cost `micros_per_million` each.
    fn priced_model(id: &str, micros_per_million: u64) -> RunModel {
        RunModel {
            model_id: id.into(),
            pricing: Some(platform_data::language_models::Pricing {
                currency: platform_data::language_models::Currency::Usd,
                input_per_million_micros: micros_per_million,
                output_per_million_micros: micros_per_million,
                cache_read_per_million_micros: 0,
                cache_write_per_million_micros: 0,
            }),
        }
    }

    async fn collect(run: AgentRun) -> (Vec<RunEvent>, RunOutcome) {
        collect_with(run, std::future::pending()).await
    }

    async fn collect_with(run: AgentRun, cancelled: impl Future<Output = ()> + Send) -> (Vec<RunEvent>, RunOutcome) {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let outcome = execute(run, sender, cancelled).await;
        let mut events = Vec::new();
        while let Ok(event) = receiver.try_recv() {
            events.push(event);
        }
        (events, outcome)
    }

    fn names(events: &[RunEvent]) -> Vec<&'static str> {
        events.iter().map(RunEvent::name).collect()
    }

    #[tokio::test]
    async fn a_multi_step_loop_runs_parallel_calls_and_gives_failures_to_the_model() {
        let provider = Scripted::new(vec![
            Ok(calls(&[
                ("c1", "forecast", json!({"city": "Oslo"})),
                ("c2", "broken", json!({})),
                ("c3", "nope", json!({})),
            ])),
            Ok(calls(&[("c4", "forecast", json!({"city": "Bergen"}))])),
            Ok(text("Rain in both.")),
        ]);
        let broken: Arc<dyn Tool> = Arc::new(Echo { spec: spec("broken"), fails: true, delay: Duration::ZERO });
        let (events, outcome) = collect(run(provider.clone(), vec![Echo::new("forecast"), broken])).await;
        assert_eq!(
            names(&events),
            [
                "metadata",
                "tool_call",
                "tool_call",
                "tool_call",
                "tool_result",
                "tool_result",
                "tool_result",
                "tool_call",
                "tool_result",
                "message",
                "message",
                "message",
                "done"
            ]
        );
        assert_eq!(outcome.result, Ok("Rain in both.".into()));
        assert_eq!((outcome.steps, outcome.spend.usage()), (3, Usage::tokens(20, 4)));
        let RunEvent::ToolResult { result, .. } = &events[5] else { panic!() };
        assert_eq!(result, &Err("the tool broke".to_owned()));
        let RunEvent::ToolResult { result, .. } = &events[6] else { panic!() };
        assert_eq!(result, &Err("there is no tool named nope".to_owned()));
        // The model saw each result, errors included, in the next turn.
        let requests = provider.requests.lock().unwrap();
        let last = &requests[2].messages;
        assert!(
            matches!(&last[2], Message::Tool { call_id, content, .. } if call_id == "c1" && content.contains("Oslo"))
        );
        assert!(matches!(&last[3], Message::Tool { content, .. } if content == "Error: the tool broke"));
        assert_eq!(requests[0].tools.len(), 2);
        assert_eq!(requests[0].system.as_deref(), Some("Be helpful."));
    }

    #[tokio::test]
    async fn calls_of_one_turn_run_concurrently() {
        tokio::time::pause();
        let slow = |name: &str| -> Arc<dyn Tool> {
            Arc::new(Echo { spec: spec(name), fails: false, delay: Duration::from_secs(10) })
        };
        let provider =
            Scripted::new(vec![Ok(calls(&[("a", "one", json!({})), ("b", "two", json!({}))])), Ok(text("ok"))]);
        let mut agent_run = run(provider, vec![slow("one"), slow("two")]);
        agent_run.timeout = Duration::from_secs(15);
        // Run one after the other, the two calls would need 20 s and the run would time out.
        let (_, outcome) = collect(agent_run).await;
        assert_eq!(outcome.result, Ok("ok".into()));
    }

    /// A tool that counts its calls and how many ran at once; optionally a sub-agent.
    struct Counting {
        spec: ToolSpec,
        delay: Duration,
        sub_agent: bool,
        calls: std::sync::atomic::AtomicUsize,
        running: std::sync::atomic::AtomicUsize,
        most_at_once: std::sync::atomic::AtomicUsize,
    }

    impl Counting {
        fn new(name: &str, delay: Duration, sub_agent: bool) -> Arc<Self> {
            Arc::new(Self {
                spec: spec(name),
                delay,
                sub_agent,
                calls: Default::default(),
                running: Default::default(),
                most_at_once: Default::default(),
            })
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    impl Tool for Counting {
        fn spec(&self) -> &ToolSpec {
            &self.spec
        }

        fn call<'a>(&'a self, _: Map<String, Value>, _: &'a ToolContext) -> BoxFuture<'a, Result<Value, ToolError>> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                let now_running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
                self.most_at_once.fetch_max(now_running, Ordering::SeqCst);
                tokio::time::sleep(self.delay).await;
                self.running.fetch_sub(1, Ordering::SeqCst);
                Ok(json!("ok"))
            })
        }

        fn is_sub_agent(&self) -> bool {
            self.sub_agent
        }
    }

    /// A journal keeping its steps in memory (the engine's side of `crate::journal`).
    #[derive(Default)]
    struct Recorded {
        steps: Mutex<Vec<Step>>,
    }

    impl Journal for Recorded {
        fn record(&self, steps: Vec<Step>) -> BoxFuture<'_, Result<(), storage::StoreError>> {
            self.steps.lock().unwrap().extend(steps);
            Box::pin(async { Ok(()) })
        }

        fn should_pause(&self) -> bool {
            false
        }
    }

    fn results(events: &[RunEvent]) -> Vec<(String, Result<Value, String>)> {
        events
            .iter()
            .filter_map(|event| match event {
                RunEvent::ToolResult { id, result, .. } => Some((id.clone(), result.clone())),
                _ => None,
            })
            .collect()
    }

    fn many_calls(prefix: &str, name: &str, count: usize) -> Turn {
        let ids: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
        calls(&ids.iter().map(|id| (id.as_str(), name, json!({}))).collect::<Vec<_>>())
    }

    #[tokio::test]
    async fn calls_past_the_per_turn_cap_are_answered_with_an_error_naming_it_and_journaled() {
        let tool = Counting::new("lookup", Duration::ZERO, false);
        let provider = Scripted::new(vec![Ok(many_calls("c", "lookup", 5)), Ok(text("done"))]);
        let mut agent_run = run(provider.clone(), vec![tool.clone()]);
        agent_run.limits.tool_calls_per_turn = 3;
        let journal = Recorded::default();
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let execution = execute_resumable(agent_run, Some(&journal), Vec::new(), sender, std::future::pending()).await;
        assert!(matches!(execution, Execution::Ended(RunOutcome { result: Ok(_), .. })));
        let mut events = Vec::new();
        while let Ok(event) = receiver.try_recv() {
            events.push(event);
        }
        assert_eq!(tool.calls(), 3);
        assert_eq!(names(&events).iter().filter(|name| **name == "tool_call").count(), 5);
        let answered = results(&events);
        let ids: Vec<&str> = answered.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["c0", "c1", "c2", "c3", "c4"]);
        assert!(answered[..3].iter().all(|(_, result)| result.is_ok()));
        for (_, result) in &answered[3..] {
            let error = result.clone().unwrap_err();
            assert!(error.contains("limit of 3 tool calls per turn") && error.contains("asked for 5"), "{error}");
        }
        // The model read every answer, refusals included.
        let second_turn = provider.requests.lock().unwrap()[1].messages.clone();
        assert_eq!(second_turn.iter().filter(|m| matches!(m, Message::Tool { .. })).count(), 5);

        // The refusals are journaled before the calls begin: a run resumed after the calls
        // began (and never ended) calls nothing again and answers the same.
        let steps = journal.steps.lock().unwrap().clone();
        let refused: Vec<&Step> =
            steps.iter().filter(|s| matches!(s, Step::ToolFinished { result: Err(_), .. })).collect();
        assert_eq!(refused.len(), 2);
        assert!(matches!(&steps[1], Step::ToolFinished { call_id, result: Err(_), .. } if call_id == "c3"));
        let begun = steps[..steps.iter().rposition(|s| matches!(s, Step::ToolStarted { .. })).unwrap() + 1].to_vec();
        let again = Counting::new("lookup", Duration::ZERO, false);
        let provider = Scripted::new(vec![Ok(text("done"))]);
        let mut resumed = run(provider.clone(), vec![again.clone()]);
        resumed.limits.tool_calls_per_turn = 3;
        let (sender, _receiver) = tokio::sync::mpsc::unbounded_channel();
        execute_resumable(resumed, None, begun, sender, std::future::pending()).await;
        assert_eq!(again.calls(), 0);
        let requests = provider.requests.lock().unwrap();
        let refusals = requests[0]
            .messages
            .iter()
            .filter(
                |m| matches!(m, Message::Tool { content, .. } if content.contains("limit of 3 tool calls per turn")),
            )
            .count();
        assert_eq!(refusals, 2);
    }

    #[tokio::test]
    async fn at_most_the_concurrency_limit_of_tool_calls_run_at_once_and_results_keep_their_order() {
        tokio::time::pause();
        let tool = Counting::new("slow", Duration::from_secs(1), false);
        let provider = Scripted::new(vec![Ok(many_calls("c", "slow", 10)), Ok(text("done"))]);
        let mut agent_run = run(provider, vec![tool.clone()]);
        agent_run.limits.tool_call_concurrency = 3;
        let (events, outcome) = collect(agent_run).await;
        assert_eq!(outcome.result, Ok("done".into()));
        assert_eq!(tool.calls(), 10);
        assert_eq!(tool.most_at_once.load(Ordering::SeqCst), 3);
        let ids: Vec<String> = results(&events).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, (0..10).map(|i| format!("c{i}")).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn sub_agent_calls_past_the_run_cap_are_errors_and_a_resumed_run_counts_its_earlier_ones() {
        let helper = Counting::new("helper", Duration::ZERO, true);
        let provider = Scripted::new(vec![Ok(many_calls("a", "helper", 3)), Ok(text("done"))]);
        let mut agent_run = run(provider, vec![helper.clone()]);
        agent_run.limits.sub_agent_calls = 2;
        let (events, _) = collect(agent_run).await;
        assert_eq!(helper.calls(), 2);
        let answered = results(&events);
        assert!(answered[..2].iter().all(|(_, result)| result.is_ok()));
        assert_eq!(answered[2].1, Err("not run: the run reached its limit of 2 sub-agent calls".to_owned()));

        // The count spans the run: one call journaled by an earlier invocation leaves one.
        let earlier = vec![
            Step::Turn {
                text: String::new(),
                tool_calls: many_calls("e", "helper", 1).tool_calls,
                usage: Usage::default(),
                plan: false,
                model: None,
            },
            Step::ToolStarted { call_id: "e0".into() },
            Step::ToolFinished {
                call_id: "e0".into(),
                result: Ok(json!("ok")),
                spend: {
                    let mut spend = Spend::default();
                    spend.add(&priced_model("sub-model", 2_000_000), Usage::tokens(7, 1));
                    spend
                },
            },
        ];
        let helper = Counting::new("helper", Duration::ZERO, true);
        let provider = Scripted::new(vec![Ok(many_calls("b", "helper", 2)), Ok(text("done"))]);
        let mut resumed = run(provider, vec![helper.clone()]);
        resumed.limits.sub_agent_calls = 2;
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        execute_resumable(resumed, None, earlier, sender, std::future::pending()).await;
        let mut events = Vec::new();
        while let Ok(event) = receiver.try_recv() {
            events.push(event);
        }
        assert_eq!(helper.calls(), 1);
        assert!(results(&events)[1].1.as_ref().is_err_and(|error| error.contains("limit of 2 sub-agent calls")));
        // What the journaled call spent (7, 1) counts in the resumed run's usage, beside its own
        // two turns (5, 1) and (10, 2).
        let done = events.iter().find_map(|event| match event {
            RunEvent::Done { bill, .. } => Some(*bill),
            _ => None,
        });
        assert_eq!(done.map(|bill| bill.usage), Some(Usage::tokens(22, 4)));
        // Each model at its own price: the parent's 18 tokens at $1 per million, the sub-agent's
        // 8 at $2 per million.
        assert_eq!(done.and_then(|bill| bill.cost).map(|cost| cost.amount_micros), Some(18 + 16));
    }

    /// A sub-agent stand-in: each call spends 100 input tokens of another model, and is checked
    /// against the run's budget as a sub-agent's turn would be.
    struct Spending {
        spec: ToolSpec,
    }

    impl Tool for Spending {
        fn spec(&self) -> &ToolSpec {
            &self.spec
        }

        fn call<'a>(
            &'a self,
            _arguments: Map<String, Value>,
            context: &'a ToolContext,
        ) -> BoxFuture<'a, Result<Value, ToolError>> {
            Box::pin(async move {
                if let Some(gate) = &context.gate {
                    gate.check().await.map_err(ToolError::Failed)?;
                }
                let model = priced_model("sub-model", 3_000_000);
                let mut spend = Spend::default();
                spend.add(&model, Usage::tokens(100, 0));
                if let Some(gate) = &context.gate {
                    gate.charge(&model, Usage::tokens(100, 0)).await;
                }
                context.spent.add(&spend);
                Ok(json!("spent"))
            })
        }

        fn is_sub_agent(&self) -> bool {
            true
        }
    }

    /// A budget of `limit` micros, charged with each turn's exact cost rounded up.
    #[derive(Debug)]
    struct Budget {
        limit: u64,
        used: std::sync::Mutex<u64>,
        checks: AtomicU32,
    }

    impl SpendGate for Budget {
        fn check(&self) -> BoxFuture<'_, Result<(), String>> {
            self.checks.fetch_add(1, Ordering::SeqCst);
            let used = *self.used.lock().unwrap();
            let limit = self.limit;
            Box::pin(async move {
                if used >= limit { Err(format!("the budget of {limit} is reached ({used} used)")) } else { Ok(()) }
            })
        }

        fn charge<'a>(&'a self, model: &'a RunModel, usage: Usage) -> BoxFuture<'a, ()> {
            let cost = model
                .pricing
                .map_or(0, |pricing| crate::spend::micros_rounded_up(crate::spend::exact_cost(&pricing, usage)));
            *self.used.lock().unwrap() += cost;
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn a_sub_agents_spend_is_priced_by_its_model_and_the_budget_stops_the_next_turn() {
        let spending = Arc::new(Spending { spec: spec("helper") });
        // Turn 1 asks the helper (5 + 1 tokens at $1/M: 6 micros; the helper 100 at $3/M: 300),
        // turn 2 asks again; the budget of 400 is passed after the second helper call, so the
        // third turn never starts.
        let provider = Scripted::new(vec![
            Ok(calls(&[("c1", "helper", json!({}))])),
            Ok(calls(&[("c2", "helper", json!({}))])),
            Ok(text("never")),
        ]);
        let mut agent_run = run(provider, vec![spending]);
        let budget = Arc::new(Budget { limit: 400, used: std::sync::Mutex::new(0), checks: AtomicU32::new(0) });
        agent_run.gate = Some(budget.clone());
        let (events, outcome) = collect(agent_run).await;
        let Err((reason, message)) = &outcome.result else { panic!("{:?}", outcome.result) };
        assert_eq!(*reason, FailureReason::BudgetExceeded);
        assert!(message.contains("budget of 400"), "{message}");
        assert_eq!(outcome.steps, 2);
        assert_eq!(*budget.used.lock().unwrap(), 612);
        // Two turns and two helper calls checked, and the third turn refused.
        assert_eq!(budget.checks.load(Ordering::SeqCst), 5);
        let bill = outcome.spend.bill();
        assert_eq!(bill.usage, Usage::tokens(210, 2));
        assert_eq!(bill.cost.map(|cost| cost.amount_micros), Some(612));
        let Some(RunEvent::Error { bill: reported, failure_reason, .. }) = events.last() else { panic!() };
        assert_eq!((*reported, *failure_reason), (bill, FailureReason::BudgetExceeded));
    }

    #[tokio::test]
    async fn the_turn_limit_fails_the_run_with_recursion_limit() {
        let provider = Scripted::new((0..5).map(|i| Ok(calls(&[(&format!("c{i}"), "forecast", json!({}))]))).collect());
        let mut agent_run = run(provider, vec![Echo::new("forecast")]);
        agent_run.max_turns = 3;
        let (events, outcome) = collect(agent_run).await;
        assert_eq!(outcome.steps, 3);
        assert!(matches!(outcome.result, Err((FailureReason::RecursionLimit, _))));
        assert!(matches!(events.last(), Some(RunEvent::Error { failure_reason: FailureReason::RecursionLimit, .. })));
    }

    #[tokio::test]
    async fn provider_errors_timeouts_and_cancels_end_the_run_failed() {
        let provider = Scripted::new(vec![Err(ProviderError::Unauthorized(401))]);
        let (events, outcome) = collect(run(provider, Vec::new())).await;
        assert_eq!(
            outcome.result,
            Err((FailureReason::ProviderError, "the provider refused the API key (HTTP 401)".into()))
        );
        assert_eq!(names(&events), ["metadata", "error"]);

        tokio::time::pause();
        let slow: Arc<dyn Tool> = Arc::new(Echo { spec: spec("slow"), fails: false, delay: Duration::from_secs(600) });
        let provider = Scripted::new(vec![Ok(calls(&[("c1", "slow", json!({}))]))]);
        let mut agent_run = run(provider.clone(), vec![slow.clone()]);
        agent_run.timeout = Duration::from_secs(30);
        let (events, outcome) = collect(agent_run).await;
        assert!(matches!(outcome.result, Err((FailureReason::Timeout, _))));
        assert_eq!(outcome.steps, 1, "what was done before the timeout is reported");
        assert_eq!(names(&events), ["metadata", "tool_call", "error"]);

        let provider = Scripted::new(vec![Ok(calls(&[("c1", "slow", json!({}))]))]);
        let cancel = tokio::time::sleep(Duration::from_secs(5));
        let (events, outcome) = collect_with(run(provider, vec![slow]), cancel).await;
        assert!(matches!(outcome.result, Err((FailureReason::Cancelled, _))));
        assert!(matches!(events.last(), Some(RunEvent::Error { failure_reason: FailureReason::Cancelled, .. })));
    }

    #[tokio::test(start_paused = true)]
    async fn every_turn_may_stream_until_the_run_ends() {
        let provider =
            Scripted::new(vec![Ok(text("1. Look.")), Ok(calls(&[("c1", "slow", json!({}))])), Ok(text("Done."))]);
        let slow: Arc<dyn Tool> = Arc::new(Echo { spec: spec("slow"), fails: false, delay: Duration::from_secs(5) });
        let mut agent_run = run(provider.clone(), vec![slow]);
        agent_run.planning = true;
        let started = tokio::time::Instant::now();
        let (_, outcome) = collect(agent_run).await;
        assert_eq!(outcome.result, Ok("Done.".to_owned()));
        let deadlines: Vec<_> = provider.requests.lock().unwrap().iter().map(|request| request.deadline).collect();
        // The plan, the turn before the 5 s tool call and the one after: one deadline, the run's.
        assert_eq!(deadlines, vec![Some(started + Duration::from_secs(60)); 3]);
    }

    /// A provider whose stream is cut by its own limit at the run's deadline.
    #[derive(Debug)]
    struct StreamsUntilTheDeadline;

    impl Provider for StreamsUntilTheDeadline {
        fn turn<'a>(
            &'a self,
            request: &'a TurnRequest,
            _: DeltaSink<'a>,
        ) -> BoxFuture<'a, Result<Turn, ProviderError>> {
            Box::pin(async move {
                tokio::time::sleep_until(request.deadline.unwrap_or_else(tokio::time::Instant::now)).await;
                Err(ProviderError::TimedOut("the stream did not end within 60 seconds (its time limit)".into()))
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_cut_at_the_run_deadline_ends_the_run_as_a_timeout() {
        // Both the run's timer and the stream's fire at once; the run's wins every time.
        for _ in 0..20 {
            let (events, outcome) = collect(run(Arc::new(StreamsUntilTheDeadline), Vec::new())).await;
            assert_eq!(
                outcome.result,
                Err((FailureReason::Timeout, "the run did not finish within 60 seconds".to_owned()))
            );
            assert_eq!(names(&events), ["metadata", "error"]);
        }
    }

    #[tokio::test]
    async fn planning_comes_first_and_tool_outputs_can_be_shared() {
        let provider = Scripted::new(vec![
            Ok(text("1. forecast 2. answer")),
            Ok(calls(&[("c1", "forecast", json!({}))])),
            Ok(calls(&[("c2", "forecast", json!({}))])),
            Ok(text("done")),
        ]);
        let mut agent_run = run(provider.clone(), vec![Echo::new("forecast")]);
        agent_run.planning = true;
        agent_run.tool_output_sharing = true;
        let (events, outcome) = collect(agent_run).await;
        assert_eq!(names(&events)[..2], ["metadata", "plan"]);
        assert_eq!(events[1], RunEvent::Plan { plan: "1. forecast 2. answer".into() });
        assert_eq!(outcome.steps, 4);
        let second_result = events.iter().rev().find_map(|event| match event {
            RunEvent::ToolResult { id, result: Ok(output), .. } if id == "c2" => Some(output.clone()),
            _ => None,
        });
        assert_eq!(second_result.unwrap()["shared"], json!(["c1"]));
        let requests = provider.requests.lock().unwrap();
        assert!(requests[0].tools.is_empty() && requests[0].system.as_deref().unwrap().contains("plan"));
        assert!(matches!(&requests[1].messages[1], Message::Assistant { text, .. } if text.starts_with("1.")));
    }

    #[tokio::test]
    async fn history_comes_before_the_message_and_the_transcript_is_this_run() {
        let provider = Scripted::new(vec![Ok(text("Hi again"))]);
        let mut agent_run = run(provider.clone(), Vec::new());
        agent_run.history =
            vec![Message::user("Hello"), Message::Assistant { text: "Hi".into(), tool_calls: Vec::new() }];
        let (_, outcome) = collect(agent_run).await;
        assert_eq!(provider.requests.lock().unwrap()[0].messages.len(), 3);
        assert_eq!(
            outcome.transcript,
            [
                Message::user("What is the weather?"),
                Message::Assistant { text: "Hi again".into(), tool_calls: Vec::new() }
            ]
        );
    }
}
