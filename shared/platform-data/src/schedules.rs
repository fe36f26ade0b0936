//! Agent schedules (DESIGN.md's schedule fields) and their storage.
//!
//! `SchedulesTable`: key `account_id` + `schedule_id`, so every read is scoped to its account
//! and an account's schedules are one Query. The sparse index `due` (hash `due`, range
//! `next_run_at` in epoch milliseconds) holds only schedules that will fire: enabled, with a
//! next fire time. The scheduler reads it up to now, so a tick costs what is due, not what
//! exists.
//!
//! Every write that moves a schedule forward is conditional on the `next_run_at` it read, so two
//! ticks (or a tick and an update) never both act on one due time.

use crate::StoreError;
use crate::ids::{AccountId, AgentId, RunId, ScheduleId};
use crate::validation::Problems;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use chrono::{DateTime, Utc};
use schedule::{Schedule, ScheduleError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use storage::quota::{Counted, Counters, Quota};
use storage::{Item, QueryPage, Read, get_item, n, query_all, query_page, s};

/// The `due` index's only key value (one partition: the tick's reads stay one Query per page).
pub const DUE: &str = "due";

/// At most this many passed due times are counted when they are merged (after downtime).
pub const MAX_MERGED: u64 = 100_000;

/// The largest `metadata`, as JSON text.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;

/// The longest `message`, in bytes (the run's input).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// The longest run a schedule may ask for: a queued run's limit.
pub const MAX_TIMEOUT_SECONDS: u64 = 6 * 3600;

/// What may run while the schedule's last run is still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OverlapPolicy {
    /// No new run while the last is `started`; the skip is counted.
    #[default]
    Skip,
    /// Start a run at every due time.
    Allow,
}

/// What a schedule asks for (the writable fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    pub cron_expression: String,
    pub timezone: String,
    pub message: String,
    pub enabled: bool,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub timeout: Option<u64>,
    pub overlap_policy: OverlapPolicy,
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

/// A stored schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    pub account_id: AccountId,
    pub schedule_id: ScheduleId,
    pub agent_id: AgentId,
    #[serde(flatten)]
    pub spec: ScheduleSpec,
    /// The next due time; `None` when it will not fire (disabled, past `end_at`).
    #[serde(default, with = "epoch_ms", skip_serializing_if = "Option::is_none")]
    pub next_run_at: Option<DateTime<Utc>>,
    /// `"due"` exactly when `next_run_at` is set: the sparse index's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due: Option<String>,
    pub last_run_at: Option<DateTime<Utc>>,
    pub last_run_status: Option<String>,
    pub last_run_id: Option<RunId>,
    #[serde(default)]
    pub skipped_count: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The due time (epoch ms) a scheduler tick has decided on, and its decision: the claim
    /// that makes one tick's decision final (`ScheduleStore::claim`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_due: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

mod epoch_ms {
    //! `next_run_at` as a number (the `due` index's range key), read back as a time.
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<DateTime<Utc>>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(at) => serializer.serialize_i64(at.timestamp_millis()),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        Ok(Option::<i64>::deserialize(deserializer)?.and_then(DateTime::from_timestamp_millis))
    }
}

impl ScheduleRecord {
    /// A new schedule of `agent_id`, not yet due (`set_next` gives it its first due time).
    pub fn new(account_id: AccountId, agent_id: AgentId, spec: ScheduleSpec, now: DateTime<Utc>) -> Self {
        Self {
            account_id,
            schedule_id: ScheduleId::now_v7(),
            agent_id,
            spec,
            next_run_at: None,
            due: None,
            last_run_at: None,
            last_run_status: None,
            last_run_id: None,
            skipped_count: 0,
            created_at: now,
            updated_at: now,
            claim_due: None,
            claim: None,
        }
    }

    /// The parsed expression (valid: it was checked when stored).
    pub fn schedule(&self) -> Option<Schedule> {
        Schedule::parse(&self.spec.cron_expression, &self.spec.timezone).ok()
    }

    /// The due times strictly after `after` that the schedule's window allows (not before
    /// `start_at`, not after `end_at`), in order; none when disabled. The expression is parsed
    /// once for the whole sequence.
    fn due_times(&self, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        let schedule = self.schedule().filter(|_| self.spec.enabled);
        let from = match self.spec.start_at {
            Some(start) if start > after => {
                start.checked_sub_signed(chrono::Duration::milliseconds(1)).unwrap_or(start).max(after)
            }
            _ => after,
        };
        let mut cursor = from;
        std::iter::from_fn(move || {
            let next = schedule.as_ref()?.next_after(cursor)?;
            cursor = next;
            Some(next)
        })
        .take_while(|next| self.spec.end_at.is_none_or(|end| *next <= end))
    }

    /// The first due time strictly after `after` (see `due_times`).
    pub fn next_due(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.due_times(after).next()
    }

    /// The decision a tick claimed for due time `due`, if one did.
    pub fn claim_for(&self, due: DateTime<Utc>) -> Option<&str> {
        self.claim.as_deref().filter(|_| self.claim_due == Some(due.timestamp_millis()))
    }

    /// How many due times after `due` passed by `now` (they are merged into the one run of
    /// `due`, and counted as skipped); at most `MAX_MERGED`.
    pub fn passed_since(&self, due: DateTime<Utc>, now: DateTime<Utc>) -> u64 {
        let passed = self.due_times(due).take_while(|next| *next <= now).take(MAX_MERGED as usize).count();
        u64::try_from(passed).unwrap_or(MAX_MERGED)
    }

    /// Sets `next_run_at` (and the index key with it).
    pub fn set_next(&mut self, next: Option<DateTime<Utc>>) {
        self.next_run_at = next;
        self.due = next.map(|_| DUE.to_owned());
    }

    /// The schedule as the API shows it; `next_runs` when the caller asks for them.
    pub fn view(&self, next_runs: Option<Vec<DateTime<Utc>>>) -> Value {
        let mut view = serde_json::json!({
            "id": self.schedule_id,
            "agent_id": self.agent_id,
            "cron_expression": self.spec.cron_expression,
            "timezone": self.spec.timezone,
            "message": self.spec.message,
            "enabled": self.spec.enabled,
            "start_at": self.spec.start_at,
            "end_at": self.spec.end_at,
            "timeout": self.spec.timeout,
            "overlap_policy": self.spec.overlap_policy,
            "metadata": self.spec.metadata,
            "next_run_at": self.next_run_at,
            "last_run_at": self.last_run_at,
            "last_run_status": self.last_run_status,
            "last_run_id": self.last_run_id,
            "skipped_count": self.skipped_count,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        });
        if let (Some(runs), Value::Object(fields)) = (next_runs, &mut view) {
            fields.insert("next_runs".into(), serde_json::json!(runs));
        }
        view
    }

    /// The next `count` due times after `now` within the window.
    pub fn next_runs(&self, now: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        self.due_times(now).take(count).collect()
    }
}

/// Every schedule body field and what it must be.
const FIELDS: [&str; 9] = [
    "cron_expression",
    "timezone",
    "message",
    "enabled",
    "start_at",
    "end_at",
    "timeout",
    "overlap_policy",
    "metadata",
];

/// Reads a create (every required field) or replace body into a spec. Wrong types, malformed
/// values and a malformed expression are 422 (`Problems` of kind `Validation`); an unknown time
/// zone, an expression that never fires and `end_at` not after `start_at` are 400 (`BadRequest`):
/// the schedule's configuration cannot work. `previous` fills fields a replace leaves out.
pub fn parse_schedule(body: &[u8], previous: Option<&ScheduleSpec>) -> Result<ScheduleSpec, Problems> {
    use crate::validation::ProblemKind::{BadRequest, Validation};
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| Problems::single(Validation, "body", &format!("malformed JSON: {err}")))?;
    let Value::Object(body) = value else {
        return Err(Problems::single(Validation, "body", "must be a JSON object"));
    };
    let mut invalid = BTreeMap::new();
    let mut fail = |field: &str, issue: &str| {
        invalid.entry(field.to_owned()).or_insert_with(|| issue.to_owned());
    };
    for key in body.keys() {
        if !FIELDS.contains(&key.as_str()) {
            fail(key, "is not a schedule field");
        }
    }
    let present = |key: &str| body.get(key).filter(|value| !value.is_null());
    let text = |key: &str, fail: &mut dyn FnMut(&str, &str)| match present(key) {
        None => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => {
            fail(key, "must be a string");
            None
        }
    };
    let time = |key: &str, fail: &mut dyn FnMut(&str, &str)| {
        text(key, fail).and_then(|raw| match DateTime::parse_from_rfc3339(&raw) {
            Ok(at) => Some(at.with_timezone(&Utc)),
            Err(_) => {
                fail(key, "must be an RFC 3339 date-time with a time zone offset");
                None
            }
        })
    };
    let cron_expression = text("cron_expression", &mut fail).or(previous.map(|p| p.cron_expression.clone()));
    let timezone = text("timezone", &mut fail).or(previous.map(|p| p.timezone.clone())).unwrap_or_else(|| "UTC".into());
    let message = text("message", &mut fail).or(previous.map(|p| p.message.clone()));
    let enabled = match present("enabled") {
        None => previous.is_none_or(|p| p.enabled),
        Some(Value::Bool(enabled)) => *enabled,
        Some(_) => {
            fail("enabled", "must be a boolean");
            true
        }
    };
    let start_at =
        if body.contains_key("start_at") { time("start_at", &mut fail) } else { previous.and_then(|p| p.start_at) };
    let end_at = if body.contains_key("end_at") { time("end_at", &mut fail) } else { previous.and_then(|p| p.end_at) };
    let timeout = match present("timeout") {
        None if body.contains_key("timeout") => None,
        None => previous.and_then(|p| p.timeout),
        Some(value) => {
            match crate::validation::whole_number(value).filter(|seconds| (1..=MAX_TIMEOUT_SECONDS).contains(seconds)) {
                Some(seconds) => Some(seconds),
                None => {
                    fail("timeout", &format!("must be a whole number of seconds from 1 to {MAX_TIMEOUT_SECONDS}"));
                    None
                }
            }
        }
    };
    let overlap_policy = match text("overlap_policy", &mut fail).as_deref() {
        None => previous.map(|p| p.overlap_policy).unwrap_or_default(),
        Some("skip") => OverlapPolicy::Skip,
        Some("allow") => OverlapPolicy::Allow,
        Some(_) => {
            fail("overlap_policy", "must be skip or allow");
            OverlapPolicy::Skip
        }
    };
    let metadata = match present("metadata") {
        None => previous.map(|p| p.metadata.clone()).unwrap_or_default(),
        Some(Value::Object(metadata)) if Value::Object(metadata.clone()).to_string().len() > MAX_METADATA_BYTES => {
            fail("metadata", &format!("must be at most {MAX_METADATA_BYTES} bytes as JSON"));
            Map::new()
        }
        // Kept as DynamoDB attributes: every number must be one DynamoDB stores.
        Some(metadata @ Value::Object(_))
            if let Some(field) = crate::validation::unstorable_number(metadata, "metadata") =>
        {
            fail(&field, "must be 0 or between 1e-130 and 1e126 in magnitude (a number DynamoDB stores)");
            Map::new()
        }
        Some(Value::Object(metadata)) => metadata.clone(),
        Some(_) => {
            fail("metadata", "must be an object");
            Map::new()
        }
    };
    if cron_expression.is_none() {
        fail("cron_expression", "is required");
    }
    match &message {
        None => fail("message", "is required"),
        Some(message) if message.trim().is_empty() => fail("message", "must not be empty"),
        Some(message) if message.len() > MAX_MESSAGE_BYTES => {
            fail("message", &format!("must be at most {MAX_MESSAGE_BYTES} bytes"));
        }
        Some(_) => {}
    }
    let mut unworkable = BTreeMap::new();
    if let Some(expression) = &cron_expression {
        match Schedule::parse(expression, &timezone) {
            Ok(_) => {}
            Err(ScheduleError::InvalidExpression(issue)) => fail("cron_expression", &issue),
            Err(ScheduleError::UnknownTimeZone(_)) => {
                unworkable.insert("timezone".to_owned(), "is not an IANA time zone name".to_owned());
            }
            Err(ScheduleError::NeverFires) => {
                unworkable.insert("cron_expression".to_owned(), "never fires: no date matches it".to_owned());
            }
        }
    }
    if !invalid.is_empty() {
        return Err(Problems { kind: Validation, fields: invalid });
    }
    if let (Some(start), Some(end)) = (start_at, end_at)
        && end <= start
    {
        unworkable.insert("end_at".to_owned(), "must be after start_at".to_owned());
    }
    if !unworkable.is_empty() {
        return Err(Problems { kind: BadRequest, fields: unworkable });
    }
    Ok(ScheduleSpec {
        cron_expression: cron_expression.unwrap_or_default(),
        timezone,
        message: message.unwrap_or_default(),
        enabled,
        start_at,
        end_at,
        timeout,
        overlap_policy,
        metadata,
    })
}

/// Storage of schedules.
#[derive(Clone)]
pub struct ScheduleStore {
    db: Client,
    table: String,
    /// The per-account count of schedules, when they have a quota.
    quota: Option<(Counters, Quota)>,
}

impl ScheduleStore {
    pub fn new(db: Client, table: impl Into<String>) -> Self {
        Self { db, table: table.into(), quota: None }
    }

    /// Holds each account to `quota` schedules: `create` counts one more (refused at the
    /// limit), `delete` one fewer, in the same transaction (`storage::quota`).
    pub fn with_quota(mut self, counters: Counters, quota: Quota) -> Self {
        self.quota = Some((counters, quota));
        self
    }

    /// Stores a new schedule, counted when schedules have a quota: `Err(quota)` when the account
    /// is at it (one TransactWriteItems; without a quota, one PutItem).
    pub async fn create(&self, schedule: &ScheduleRecord) -> Result<Result<(), Quota>, StoreError> {
        let Some((counters, quota)) = &self.quota else { return self.put(schedule).await.map(Ok) };
        let counter = counters.counter(*quota, &schedule.account_id.to_string());
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(serde_dynamo::to_item(schedule)?))
            .condition_expression("attribute_not_exists(schedule_id)")
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        let items = vec![TransactWriteItem::builder().put(put).build(), counter.increment()?];
        let tally = || async { Ok(self.list(schedule.account_id, None).await?.len()) };
        match counters.transact(&counter, items, 1, None, tally).await? {
            Counted::Written => Ok(Ok(())),
            Counted::QuotaReached(quota) => Ok(Err(quota)),
            Counted::Refused(_) => {
                Err(StoreError::request("TransactWriteItems", "a new schedule id was already taken"))
            }
        }
    }

    fn key(account_id: AccountId, schedule_id: ScheduleId) -> Item {
        [("account_id".to_owned(), s(account_id.to_string())), ("schedule_id".to_owned(), s(schedule_id.to_string()))]
            .into_iter()
            .collect()
    }

    /// Writes a schedule whole (create, replace).
    pub async fn put(&self, schedule: &ScheduleRecord) -> Result<(), StoreError> {
        self.db
            .put_item()
            .table_name(&self.table)
            .set_item(Some(serde_dynamo::to_item(schedule)?))
            .send()
            .await
            .map_err(|err| StoreError::dynamo("PutItem", err))?;
        Ok(())
    }

    /// One schedule of the account (consistent).
    pub async fn get(
        &self,
        account_id: AccountId,
        schedule_id: ScheduleId,
    ) -> Result<Option<ScheduleRecord>, StoreError> {
        let item = get_item(&self.db, &self.table, Self::key(account_id, schedule_id), Read::CONSISTENT).await?;
        item.map(serde_dynamo::from_item).transpose().map_err(StoreError::from)
    }

    /// Deletes a schedule, counted out when schedules have a quota (one TransactWriteItems;
    /// without a quota, one DeleteItem); `false` when there was none.
    pub async fn delete(&self, account_id: AccountId, schedule_id: ScheduleId) -> Result<bool, StoreError> {
        if let Some((counters, quota)) = &self.quota {
            let counter = counters.counter(*quota, &account_id.to_string());
            let delete = Delete::builder()
                .table_name(&self.table)
                .set_key(Some(Self::key(account_id, schedule_id)))
                .condition_expression("attribute_exists(schedule_id)")
                .build()
                .map_err(|err| StoreError::request("TransactWriteItems", err))?;
            let items = vec![TransactWriteItem::builder().delete(delete).build(), counter.decrement()?];
            let tally = || async { Ok(self.list(account_id, None).await?.len()) };
            return Ok(matches!(counters.transact(&counter, items, 1, None, tally).await?, Counted::Written));
        }
        let output = self
            .db
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(account_id, schedule_id)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("DeleteItem", err))?;
        Ok(output.attributes.is_some_and(|old| !old.is_empty()))
    }

    /// The account's schedules (of one agent, if given), oldest first (one Query per MB of the
    /// account's schedules, bounded by their quota).
    pub async fn list(
        &self,
        account_id: AccountId,
        agent_id: Option<AgentId>,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        let mut query = self
            .db
            .query()
            .table_name(&self.table)
            .key_condition_expression("account_id = :account")
            .expression_attribute_values(":account", s(account_id.to_string()));
        if let Some(agent_id) = agent_id {
            query = query
                .filter_expression("agent_id = :agent")
                .expression_attribute_values(":agent", s(agent_id.to_string()));
        }
        let mut schedules: Vec<ScheduleRecord> =
            query_all(query).await?.into_iter().map(serde_dynamo::from_item).collect::<Result<_, _>>()?;
        // Ids are UUIDv7: the partition's order is their creation's.
        schedules.sort_by_key(|schedule| schedule.schedule_id);
        Ok(schedules)
    }

    /// The account's schedules `skip..skip + take`, oldest first (by id: UUIDv7, so creation
    /// order), and how many it has. With the account's counter (schedules have a quota): 1
    /// GetItem (the counter) + Queries of the account's partition with `Limit` down to the page's
    /// depth (none past the end). Without: the whole partition (`list`).
    pub async fn page(
        &self,
        account_id: AccountId,
        skip: usize,
        take: usize,
    ) -> Result<(Vec<ScheduleRecord>, usize), StoreError> {
        let counted = match &self.quota {
            Some((counters, quota)) => counters.value(&counters.counter(*quota, &account_id.to_string())).await?,
            None => None,
        };
        let Some(total) = counted.map(|count| usize::try_from(count).unwrap_or(0)) else {
            let all = self.list(account_id, None).await?;
            let total = all.len();
            return Ok((all.into_iter().skip(skip).take(take).collect(), total));
        };
        let depth = skip.saturating_add(take).min(total);
        if skip >= depth {
            return Ok((Vec::new(), total));
        }
        let query = self
            .db
            .query()
            .table_name(&self.table)
            .key_condition_expression("account_id = :account")
            .expression_attribute_values(":account", s(account_id.to_string()));
        let items = storage::query_down_to(query, depth).await?;
        let schedules = items.into_iter().skip(skip).map(serde_dynamo::from_item).collect::<Result<_, _>>()?;
        Ok((schedules, total))
    }

    /// One page (up to `limit`) of the schedules due at or before `now`, earliest first, from
    /// `start_key` on: (account, schedule, due time) from the keys-only `due` index, which is
    /// eventually consistent: callers read the schedules themselves (`get_many`).
    pub async fn due(
        &self,
        now: DateTime<Utc>,
        limit: i32,
        start_key: Option<Item>,
    ) -> Result<(Vec<DueKey>, Option<Item>), StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.table)
            .index_name("due")
            .key_condition_expression("due = :due AND next_run_at <= :now")
            .expression_attribute_values(":due", s(DUE))
            .expression_attribute_values(":now", n(now.timestamp_millis()));
        let QueryPage { items, last_key } = query_page(query, Some(limit), start_key).await?;
        let keys = items
            .iter()
            .filter_map(|item| {
                let text = |name: &str| item.get(name).and_then(|value| value.as_s().ok());
                let due = item.get("next_run_at").and_then(|value| value.as_n().ok()).and_then(|n| n.parse().ok());
                Some(DueKey {
                    account_id: text("account_id").and_then(|id| id.parse().ok())?,
                    schedule_id: text("schedule_id").and_then(|id| id.parse().ok())?,
                    due: due.and_then(DateTime::from_timestamp_millis)?,
                })
            })
            .collect();
        Ok((keys, last_key))
    }

    /// The schedules of `keys` that exist, read consistently in one BatchGetItem per 100. An
    /// item that cannot be read is logged and left out, so one bad item never stops a tick.
    pub async fn get_many(&self, keys: &[(AccountId, ScheduleId)]) -> Result<Vec<ScheduleRecord>, StoreError> {
        let requests = keys.iter().map(|(account, id)| (self.table.clone(), Self::key(*account, *id))).collect();
        let mut found = storage::batch_get(&self.db, requests, true).await?;
        let mut schedules = Vec::new();
        for item in found.remove(&self.table).unwrap_or_default() {
            match serde_dynamo::from_item::<_, ScheduleRecord>(item) {
                Ok(schedule) => schedules.push(schedule),
                Err(err) => tracing::error!(error = %err, "a schedule item could not be read; it is left out"),
            }
        }
        Ok(schedules)
    }

    /// Claims due time `due` of the schedule for `decision`, if no tick has decided on it yet
    /// and the schedule is still at it: `false` otherwise (read it again to learn the claim).
    pub async fn claim(
        &self,
        schedule: &ScheduleRecord,
        due: DateTime<Utc>,
        decision: &str,
    ) -> Result<bool, StoreError> {
        let claimed = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(schedule.account_id, schedule.schedule_id)))
            .update_expression("SET claim_due = :due, claim = :decision")
            .condition_expression("next_run_at = :due AND (attribute_not_exists(claim_due) OR claim_due <> :due)")
            .expression_attribute_values(":due", n(due.timestamp_millis()))
            .expression_attribute_values(":decision", s(decision))
            .send()
            .await;
        match claimed {
            Ok(_) => Ok(true),
            Err(err) if storage::is_condition_failure(&err) => Ok(false),
            Err(err) => Err(StoreError::dynamo("UpdateItem", err)),
        }
    }

    /// Replaces the schedule's writable fields and its next due time (an UpdateItem, so a
    /// concurrent move's `last_run_*` and `skipped_count` are kept), only if its `next_run_at`
    /// is still `expected_next`: `false` when a tick moved it meanwhile (read and try again).
    pub async fn update_spec(
        &self,
        schedule: &ScheduleRecord,
        expected_next: Option<DateTime<Utc>>,
    ) -> Result<bool, StoreError> {
        let mut update = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(schedule.account_id, schedule.schedule_id)))
            .expression_attribute_names("#updated_at", "updated_at")
            .expression_attribute_values(":updated_at", s(schedule.updated_at.to_rfc3339()));
        let mut sets = vec!["#updated_at = :updated_at".to_owned()];
        let mut removes = Vec::new();
        let mut fields: Vec<(String, AttributeValue)> =
            serde_dynamo::to_item::<_, Item>(&schedule.spec)?.into_iter().collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        match schedule.next_run_at {
            Some(next) => {
                fields.push(("next_run_at".into(), n(next.timestamp_millis())));
                fields.push(("due".into(), s(DUE)));
            }
            None => {
                fields.push(("next_run_at".into(), AttributeValue::Null(true)));
                fields.push(("due".into(), AttributeValue::Null(true)));
            }
        }
        for (i, (name, value)) in fields.into_iter().enumerate() {
            update = update.expression_attribute_names(format!("#f{i}"), name);
            if matches!(value, AttributeValue::Null(_)) {
                removes.push(format!("#f{i}"));
            } else {
                sets.push(format!("#f{i} = :f{i}"));
                update = update.expression_attribute_values(format!(":f{i}"), value);
            }
        }
        let mut expression = format!("SET {}", sets.join(", "));
        if !removes.is_empty() {
            expression.push_str(&format!(" REMOVE {}", removes.join(", ")));
        }
        update = match expected_next {
            Some(next) => update
                .condition_expression("next_run_at = :expected")
                .expression_attribute_values(":expected", n(next.timestamp_millis())),
            None => update.condition_expression("attribute_exists(schedule_id) AND attribute_not_exists(next_run_at)"),
        };
        match update.update_expression(expression).send().await {
            Ok(_) => Ok(true),
            Err(err) if storage::is_condition_failure(&err) => Ok(false),
            Err(err) => Err(StoreError::dynamo("UpdateItem", err)),
        }
    }

    /// Moves the schedule from due time `due` to `next`, with `changes` (`SET` assignments and
    /// their values), only if it is still at `due`: `false` when something else moved it first.
    pub async fn advance(
        &self,
        schedule: &ScheduleRecord,
        due: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
        changes: Advance,
    ) -> Result<bool, StoreError> {
        let mut sets: Vec<String> = Vec::new();
        let mut update = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(schedule.account_id, schedule.schedule_id)))
            .condition_expression("next_run_at = :due")
            .expression_attribute_values(":due", n(due.timestamp_millis()));
        let mut removes = Vec::new();
        match next {
            Some(next) => {
                sets.push("next_run_at = :next".into());
                sets.push("due = :due_key".into());
                update = update
                    .expression_attribute_values(":next", n(next.timestamp_millis()))
                    .expression_attribute_values(":due_key", s(DUE));
            }
            None => removes.extend(["next_run_at", "due"]),
        }
        removes.extend(["claim_due", "claim"]);
        let skipped = match changes {
            Advance::Quietly => 0,
            Advance::Skipped { merged } => 1 + merged,
            Advance::Fired { run_id, at, merged } => {
                sets.push("last_run_at = :at".into());
                sets.push("last_run_id = :run".into());
                sets.push("last_run_status = :started".into());
                update = update
                    .expression_attribute_values(":at", s(at.to_rfc3339()))
                    .expression_attribute_values(":run", s(run_id.to_string()))
                    .expression_attribute_values(":started", s("started"));
                merged
            }
        };
        if skipped > 0 {
            sets.push("skipped_count = if_not_exists(skipped_count, :zero) + :skipped".into());
            update =
                update.expression_attribute_values(":zero", n(0)).expression_attribute_values(":skipped", n(skipped));
        }
        let mut clauses = Vec::new();
        if !sets.is_empty() {
            clauses.push(format!("SET {}", sets.join(", ")));
        }
        if !removes.is_empty() {
            clauses.push(format!("REMOVE {}", removes.join(", ")));
        }
        let expression = clauses.join(" ");
        match update.update_expression(expression).send().await {
            Ok(_) => Ok(true),
            Err(err) if storage::is_condition_failure(&err) => Ok(false),
            Err(err) => Err(StoreError::dynamo("UpdateItem", err)),
        }
    }

    /// Records a manual run of the schedule (its due time unchanged).
    pub async fn record_trigger(
        &self,
        schedule: &ScheduleRecord,
        run_id: RunId,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(schedule.account_id, schedule.schedule_id)))
            .condition_expression("attribute_exists(schedule_id)")
            .update_expression("SET last_run_at = :at, last_run_id = :run, last_run_status = :started")
            .expression_attribute_values(":at", s(at.to_rfc3339()))
            .expression_attribute_values(":run", s(run_id.to_string()))
            .expression_attribute_values(":started", s("started"))
            .send()
            .await
            .map_err(|err| StoreError::dynamo("UpdateItem", err))?;
        Ok(())
    }

    /// Records how the schedule's run `run_id` ended, if it is still its last run.
    pub async fn record_end(
        &self,
        account_id: AccountId,
        schedule_id: ScheduleId,
        run_id: RunId,
        status: &str,
    ) -> Result<(), StoreError> {
        let written = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(account_id, schedule_id)))
            .condition_expression("last_run_id = :run")
            .update_expression("SET last_run_status = :status")
            .expression_attribute_values(":run", s(run_id.to_string()))
            .expression_attribute_values(":status", s(status))
            .send()
            .await;
        match written {
            Ok(_) => Ok(()),
            Err(err) if storage::is_condition_failure(&err) => Ok(()),
            Err(err) => Err(StoreError::dynamo("UpdateItem", err)),
        }
    }
}

/// A due schedule as the `due` index lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueKey {
    pub account_id: AccountId,
    pub schedule_id: ScheduleId,
    pub due: DateTime<Utc>,
}

/// What else an `advance` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advance {
    /// Nothing (the agent is deleted: no run, nothing counted).
    Quietly,
    /// The due time was skipped (overlap): `skipped_count` + 1, plus the due times `merged`
    /// into it.
    Skipped { merged: u64 },
    /// Run `run_id` was started for it at `at`; `merged` later due times that had passed too
    /// are counted as skipped.
    Fired { run_id: RunId, at: DateTime<Utc>, merged: u64 },
}
