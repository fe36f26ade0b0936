//! A run's execution state in DynamoDB (`RunStepsTable`, key `run_id` + `step`), so that a run
//! can be cancelled from any process and resumed by another one without repeating its work.
//!
//! - Step 0 is the run's **control item**: `cancel_requested_at` (a cancel asked for) and the
//!   lease of the invocation executing the run (`lease_owner`, `lease_until`), so two deliveries
//!   of one queued run never execute it at the same time. It is a few bytes, so the watcher that
//!   polls it for a cancel reads one small item.
//! - Steps 1, 2, … are the run's **journal**, one item per step as it happens: a model turn
//!   (its text, tool calls and usage), a tool call begun, a tool call ended. A resumed run
//!   replays them instead of doing them again: a finished turn is not asked again, a finished
//!   tool call is not called again, and a tool call begun but never ended is given an error
//!   result instead of being called a second time (at most once, since a tool may have effects).
//!
//! Items are kept as long as the run's events (TTL `expires_at`).

use crate::events::{EVENT_RETENTION, MAX_EVENT_DATA_BYTES, Usage, truncate};
use crate::providers::ToolCall;
use crate::spend::{RunModel, Spend};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use platform_data::ids::RunId;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use storage::{Item, Read, StoreError, batch_write, get_item, n, put_request, query_all, s};

/// One step of a run, as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Step {
    /// A model turn ended: its text, the tool calls it asked for, its usage and the model (with
    /// its prices) that used it. `plan` marks the planning turn of `agent_config.planning`.
    Turn {
        text: String,
        tool_calls: Vec<ToolCall>,
        usage: Usage,
        #[serde(default)]
        plan: bool,
        /// Absent in steps journaled before turns named their model: the run's model then.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<RunModel>,
    },
    /// A tool call is about to run (journaled before it runs).
    ToolStarted { call_id: String },
    /// A tool call ended with its output or its error, and the tokens it spent on the run's
    /// behalf per model (a sub-agent's turns; absent when none, and in steps journaled before it
    /// existed).
    ToolFinished {
        call_id: String,
        result: Result<Value, String>,
        #[serde(default, skip_serializing_if = "Spend::is_empty")]
        spend: Spend,
    },
}

impl Step {
    /// The step within what one item holds: a large text or output is cut (the model of a
    /// resumed run then reads the cut text, marked `[truncated]`).
    fn bounded(self) -> Self {
        match self {
            Self::Turn { text, tool_calls, usage, plan, model } => {
                Self::Turn { text: truncate(&text, MAX_STEP_TEXT_BYTES), tool_calls, usage, plan, model }
            }
            Self::ToolFinished { call_id, result: Ok(output), spend } => {
                let text = output.to_string();
                let output = if text.len() > MAX_STEP_TEXT_BYTES {
                    Value::String(truncate(&text, MAX_STEP_TEXT_BYTES))
                } else {
                    output
                };
                Self::ToolFinished { call_id, result: Ok(output), spend }
            }
            Self::ToolFinished { call_id, result: Err(error), spend } => {
                Self::ToolFinished { call_id, result: Err(truncate(&error, MAX_STEP_TEXT_BYTES)), spend }
            }
            started @ Self::ToolStarted { .. } => started,
        }
    }
}

/// The largest text a step item keeps (a turn's text, a tool's output). Tool call arguments are
/// the model's own output, bounded by its token limit.
const MAX_STEP_TEXT_BYTES: usize = 4 * MAX_EVENT_DATA_BYTES;

/// Where a resumable run records its steps, and whether it should stop to be continued in
/// another invocation.
pub trait Journal: Send + Sync {
    /// Records steps, in order, before the run goes on.
    fn record(&self, steps: Vec<Step>) -> BoxFuture<'_, Result<(), StoreError>>;
    /// Whether the run should stop before its next step (its invocation is near its end).
    fn should_pause(&self) -> bool;
}

/// A cancel asked for, and the lease of the invocation executing the run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Control {
    pub cancel_requested_at: Option<DateTime<Utc>>,
}

impl Control {
    /// The control item as stored (none: nothing asked).
    fn of(item: Option<&Item>) -> Self {
        let cancel_requested_at = item
            .and_then(|item| item.get("cancel_requested_at"))
            .and_then(|value| value.as_s().ok())
            .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
            .map(|at| at.with_timezone(&Utc));
        Self { cancel_requested_at }
    }
}

/// Storage of runs' control items and journals.
#[derive(Clone)]
pub struct RunSteps {
    db: Client,
    table: String,
}

impl RunSteps {
    pub fn new(db: Client, table: impl Into<String>) -> Self {
        Self { db, table: table.into() }
    }

    fn key(run_id: RunId, step: u64) -> Item {
        [("run_id".to_owned(), s(run_id.to_string())), ("step".to_owned(), n(step))].into_iter().collect()
    }

    /// Records a cancel of the run (idempotent: the first request's time is kept).
    pub async fn request_cancel(&self, run_id: RunId, now: DateTime<Utc>) -> Result<(), StoreError> {
        self.db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(run_id, 0)))
            .update_expression(
                "SET cancel_requested_at = if_not_exists(cancel_requested_at, :now), expires_at = :expires",
            )
            .expression_attribute_values(":now", s(now.to_rfc3339()))
            .expression_attribute_values(":expires", n((now + EVENT_RETENTION).timestamp()))
            .send()
            .await
            .map_err(|err| StoreError::dynamo("UpdateItem", err))?;
        Ok(())
    }

    /// The run's control item (an eventually consistent read of a few bytes: the cancel watcher
    /// polls it).
    pub async fn control(&self, run_id: RunId) -> Result<Control, StoreError> {
        let read = Read::EVENTUAL.only("cancel_requested_at");
        let item = get_item(&self.db, &self.table, Self::key(run_id, 0), read).await?;
        Ok(Control::of(item.as_ref()))
    }

    /// Takes the lease of executing the run until `until` and answers its control item, unless
    /// another invocation holds an unexpired lease: `None` then.
    pub async fn claim(
        &self,
        run_id: RunId,
        owner: &str,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<Control>, StoreError> {
        let claimed = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(run_id, 0)))
            .update_expression("SET lease_owner = :owner, lease_until = :until, expires_at = :expires")
            .condition_expression("attribute_not_exists(lease_until) OR lease_until < :now OR lease_owner = :owner")
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":until", n(until.timestamp_millis()))
            .expression_attribute_values(":now", n(now.timestamp_millis()))
            .expression_attribute_values(":expires", n((now + EVENT_RETENTION).timestamp()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .send()
            .await;
        match claimed {
            Ok(output) => Ok(Some(Control::of(output.attributes.as_ref()))),
            Err(err) if storage::is_condition_failure(&err) => Ok(None),
            Err(err) => Err(StoreError::dynamo("UpdateItem", err)),
        }
    }

    /// Gives the lease up (the run paused or ended), if `owner` still holds it.
    pub async fn release(&self, run_id: RunId, owner: &str) -> Result<(), StoreError> {
        let released = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(run_id, 0)))
            .update_expression("REMOVE lease_owner, lease_until")
            .condition_expression("lease_owner = :owner")
            .expression_attribute_values(":owner", s(owner))
            .send()
            .await;
        match released {
            Ok(_) => Ok(()),
            Err(err) if storage::is_condition_failure(&err) => Ok(()),
            Err(err) => Err(StoreError::dynamo("UpdateItem", err)),
        }
    }

    /// The run's journal, in order (one Query per MB).
    pub async fn steps(&self, run_id: RunId) -> Result<Vec<Step>, StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.table)
            .key_condition_expression("run_id = :run AND step > :control")
            .expression_attribute_values(":run", s(run_id.to_string()))
            .expression_attribute_values(":control", n(0))
            .consistent_read(true);
        let mut steps = Vec::new();
        for item in query_all(query).await? {
            let data = item.get("data").and_then(|value| value.as_s().ok()).map_or("", String::as_str);
            steps.push(serde_json::from_str(data).map_err(|err| StoreError::json("run step", err))?);
        }
        Ok(steps)
    }

    /// Deletes the run's control item and journal (a finished run's record being deleted).
    pub async fn delete(&self, run_id: RunId) -> Result<(), StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.table)
            .key_condition_expression("run_id = :run")
            .expression_attribute_values(":run", s(run_id.to_string()))
            .projection_expression("run_id, step");
        let mut deletes = Vec::new();
        for key in query_all(query).await? {
            deletes.push((self.table.clone(), storage::delete_request(key)?));
        }
        batch_write(&self.db, deletes).await
    }

    /// A journal of `run_id` appending after the `recorded` steps already there.
    pub fn journal(&self, run_id: RunId, recorded: usize, pause: PauseWhen) -> StoredJournal {
        StoredJournal { steps: self.clone(), run_id, next: Arc::new(AtomicU64::new(recorded as u64 + 1)), pause }
    }
}

/// When a journaled run pauses: past `deadline` (a `tokio` instant: the invocation's end minus
/// what one step may take).
#[derive(Debug, Clone, Copy)]
pub struct PauseWhen {
    pub deadline: tokio::time::Instant,
}

/// The journal of one run in `RunStepsTable`.
pub struct StoredJournal {
    steps: RunSteps,
    run_id: RunId,
    next: Arc<AtomicU64>,
    pause: PauseWhen,
}

impl Journal for StoredJournal {
    fn record(&self, steps: Vec<Step>) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let expires_at = (Utc::now() + EVENT_RETENTION).timestamp();
            let mut writes = Vec::with_capacity(steps.len());
            for step in steps {
                let number = self.next.fetch_add(1, Ordering::SeqCst);
                let data = serde_json::to_string(&step.bounded()).map_err(|err| StoreError::json("run step", err))?;
                let mut item = RunSteps::key(self.run_id, number);
                item.insert("data".to_owned(), AttributeValue::S(data));
                item.insert("expires_at".to_owned(), n(expires_at));
                writes.push((self.steps.table.clone(), put_request(item)?));
            }
            batch_write(&self.steps.db, writes).await
        })
    }

    fn should_pause(&self) -> bool {
        tokio::time::Instant::now() >= self.pause.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn steps_round_trip_as_tagged_json_and_large_texts_are_cut() {
        let turn = Step::Turn {
            text: "Checking.".into(),
            tool_calls: vec![ToolCall { id: "c1".into(), name: "f".into(), arguments: serde_json::Map::new() }],
            usage: Usage::tokens(3, 1),
            plan: false,
            model: Some(RunModel { model_id: "m".into(), pricing: None }),
        };
        let text = serde_json::to_string(&turn).unwrap();
        assert!(text.starts_with(r#"{"kind":"turn""#), "{text}");
        assert_eq!(serde_json::from_str::<Step>(&text).unwrap(), turn);
        let finished: Step =
            serde_json::from_value(json!({"kind": "tool_finished", "call_id": "c1", "result": {"Err": "no"}})).unwrap();
        assert_eq!(
            finished,
            Step::ToolFinished { call_id: "c1".into(), result: Err("no".into()), spend: Spend::default() }
        );

        let big = Step::ToolFinished {
            call_id: "c".into(),
            result: Ok(json!({"x": "é".repeat(300_000)})),
            spend: Spend::default(),
        }
        .bounded();
        let Step::ToolFinished { result: Ok(Value::String(cut)), .. } = big else { panic!("{big:?}") };
        assert!(cut.len() < MAX_STEP_TEXT_BYTES + 32 && cut.ends_with("[truncated]"));
    }
}
