//! Queued runs: the runner queue (SQS, with a dead-letter queue) and its worker.
//!
//! A queued run is recorded first (`RunLifecycle::create`), then its id is sent on the queue. The
//! worker (`runner-worker`, or `make dev`'s in-process loop) executes it with `RunLifecycle::resume`:
//!
//! - **Ended** (now or before this delivery) or **missing**: the message is done.
//! - **Paused** before the invocation's end: a continuation message is sent, then this one is
//!   done; the next invocation replays the journal and goes on. If the send fails, this message
//!   is retried instead, which resumes the run the same way.
//! - **Deferred**: the run's account is at its quota of executing runs (`QuotaConcurrentRuns`):
//!   the run is sent again with a delay (a new message, so deferrals do not count toward the
//!   dead-letter queue's `maxReceiveCount`) and this one is done. The run keeps waiting, at most
//!   the queue's limit. So one account's backlog takes at most its quota of the worker's slots,
//!   and a message of it costs the worker one deferral (a few DynamoDB calls) when it comes up.
//! - **Busy** (another live invocation holds the run's lease) or a storage failure: the message
//!   is retried after the queue's visibility timeout.
//! - On its `MAX_RECEIVES`th delivery, a message that still fails marks its run `failed` before
//!   SQS moves it to the dead-letter queue (`maxReceiveCount` in `template.yaml`).
//!
//! A malformed message (not a run id) is logged and retried until it lands in the dead-letter
//! queue: it names no run to mark.

use crate::events::FailureReason;
use crate::lifecycle::{Invocation, Resumed, RunLifecycle};
use futures_util::future::join_all;
use platform_data::ids::RunId;
use queues::{ReceivedMessage, SqsQueue};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use storage::StoreError;

/// Deliveries of one message before SQS moves it to the dead-letter queue (the template's
/// `maxReceiveCount` of `RunnerQueue`).
pub const MAX_RECEIVES: u32 = 3;

/// A message of the runner queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMessage {
    pub run_id: RunId,
}

/// The runner queue.
#[derive(Clone)]
pub struct RunQueue {
    queue: Arc<SqsQueue>,
}

impl RunQueue {
    pub fn new(queue: Arc<SqsQueue>) -> Self {
        Self { queue }
    }

    /// The queue itself (the local worker receives and deletes through it).
    pub fn sqs(&self) -> &Arc<SqsQueue> {
        &self.queue
    }

    /// Sends the run to the worker.
    pub async fn enqueue(&self, run_id: RunId) -> Result<(), StoreError> {
        self.queue.send(&[RunMessage { run_id }]).await
    }

    /// Sends the run to the worker again, received no sooner than `delay` from now (a run whose
    /// account is at its quota of executing runs).
    pub async fn enqueue_after(&self, run_id: RunId, delay: std::time::Duration) -> Result<(), StoreError> {
        self.queue.send_after(&[RunMessage { run_id }], delay).await
    }
}

/// Executes queued runs.
#[derive(Clone)]
pub struct RunWorker {
    runner: RunLifecycle,
    queue: RunQueue,
}

impl RunWorker {
    pub fn new(runner: RunLifecycle, queue: RunQueue) -> Self {
        Self { runner, queue }
    }

    /// Times the runs it executes by `clock` (tests).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.runner = self.runner.with_clock(clock);
        self
    }

    /// The queue it works (and sends continuations to).
    pub fn queue(&self) -> &RunQueue {
        &self.queue
    }

    /// Handles a batch of messages concurrently within `invocation`; returns the ids of the
    /// messages to retry (the partial batch failures).
    pub async fn handle_batch(&self, messages: &[ReceivedMessage], invocation: &Invocation) -> Vec<String> {
        let outcomes = join_all(messages.iter().map(|message| self.handle(message, invocation))).await;
        messages.iter().zip(outcomes).filter(|(_, done)| !done).map(|(message, _)| message.message_id.clone()).collect()
    }

    /// `true` when the message is done with.
    async fn handle(&self, message: &ReceivedMessage, invocation: &Invocation) -> bool {
        let Ok(RunMessage { run_id }) = serde_json::from_str::<RunMessage>(&message.body) else {
            tracing::error!(message_id = %message.message_id, "malformed runner message: retried until dead-lettered");
            return false;
        };
        // Its own task: a panic in the run is this message's failure, not the invocation's.
        let runner = self.runner.clone();
        let task_invocation = invocation.clone();
        let task = tokio::spawn(async move { runner.resume(run_id, &task_invocation).await });
        // If this handling is dropped (the invocation dies), the run's task dies with it.
        let _abort = AbortOnDrop(task.abort_handle());
        let resumed = task.await;
        let problem = match resumed {
            Ok(Ok(Resumed::Ended(_) | Resumed::Missing)) => return true,
            Ok(Ok(Resumed::Paused)) => match self.queue.enqueue(run_id).await {
                Ok(()) => {
                    tracing::info!(%run_id, "run paused; continuation queued");
                    return true;
                }
                Err(err) => format!("continuation not queued: {err}"),
            },
            Ok(Ok(Resumed::Deferred(delay))) => match self.queue.enqueue_after(run_id, delay).await {
                Ok(()) => {
                    tracing::info!(%run_id, delay_seconds = delay.as_secs(), "account at its quota of executing runs; run deferred");
                    return true;
                }
                Err(err) => format!("deferred run not queued: {err}"),
            },
            Ok(Ok(Resumed::Busy)) => {
                tracing::info!(%run_id, "run held by another invocation; retried later");
                return false;
            }
            Ok(Err(err)) => err.to_string(),
            Err(panic) => format!("the run's task failed: {panic}"),
        };
        tracing::error!(%run_id, receive_count = message.receive_count, problem, "queued run not executed");
        if message.receive_count >= MAX_RECEIVES {
            let reason = format!("the run could not be executed after {} deliveries", message.receive_count);
            if let Err(err) = self.runner.fail_undeliverable(run_id, &reason).await {
                tracing::error!(%run_id, error = %err, "dead-lettered run not marked failed");
            }
        }
        false
    }
}

impl RunLifecycle {
    /// Marks a queued run that could not be executed `failed` (its message is being
    /// dead-lettered).
    pub async fn fail_undeliverable(&self, run_id: RunId, reason: &str) -> Result<(), StoreError> {
        let Some(record) = self.runs().get(run_id, self.now()).await? else { return Ok(()) };
        if record.status == crate::runs::RunStatus::Started {
            self.end_early(record, FailureReason::Error, reason, None).await;
        }
        Ok(())
    }
}

impl RunLifecycle {
    /// Records a new run of `agent` and sends it to the worker. A run that cannot be queued is
    /// recorded `failed` and the error returned.
    pub async fn enqueue(
        &self,
        agent: &crate::lifecycle::Agent,
        start: &crate::lifecycle::StartRun,
        queue: &RunQueue,
    ) -> Result<crate::runs::RunRecord, crate::lifecycle::StartError> {
        let timeout = crate::timeouts::run_timeout(
            start.request.timeout,
            &agent.spec.metadata,
            crate::timeouts::MAX_QUEUED_RUN_TIMEOUT,
        );
        let run_id = RunId::now_v7();
        self.lease_queued(agent.account_id, run_id, timeout).await?;
        let record = match self.create_once(run_id, agent, start, timeout).await {
            Ok(Some(record)) => record,
            failed => {
                self.give_back_queued(agent.account_id, run_id).await;
                failed?;
                return Err(StoreError::request("TransactWriteItems", "a new run id was already taken").into());
            }
        };
        if let Err(err) = queue.enqueue(record.run_id).await {
            tracing::error!(run_id = %record.run_id, error = %err, "run not queued");
            self.end_early(record, FailureReason::Error, "the run could not be queued", Some(agent)).await;
            return Err(err.into());
        }
        Ok(record)
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
