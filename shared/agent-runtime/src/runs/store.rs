//! The runs' tables: `RunsTable` (records and per-agent counts) and `RunEventsTable` (each
//! run's events by sequence number), with the run's execution state (`crate::journal`).

use super::{RunRecord, RunStatus, RunType};
use crate::events::{EVENT_RETENTION, MAX_EVENT_DATA_BYTES, RunEvent, truncate};
use crate::journal::RunSteps;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem, Update};
use chrono::{DateTime, Duration, Utc};
use platform_data::ids::{AccountId, AgentId, RunId, ScheduleId};
use serde_json::Value;
use std::collections::HashMap;
use storage::{Backoff, Item, Read, StoreError, batch_write, get_item, n, put_request, query_all, query_page, s};

/// The most index pages one list of an account's recent runs reads (`recent_for_account`).
pub const MAX_RECENT_PAGES: usize = 4;

/// How long after a purge of an uncounted run (one stored before counts were kept) the
/// `by-agent` index is not trusted to show it gone: indexes follow the table asynchronously
/// (usually within a second), so a tally meanwhile could still count it.
pub const INDEX_SETTLE: Duration = Duration::seconds(60);

/// How often a run's creation or purge is sent when it collides with another transaction on
/// the agent's count (runs of one agent starting at once), and the pauses between.
const COUNT_CONTENTION: Backoff =
    Backoff { base: std::time::Duration::from_millis(20), cap: std::time::Duration::from_millis(500), max_attempts: 8 };

/// The key of an agent's run count in `RunsTable`.
fn count_key(agent_id: AgentId) -> Item {
    Item::from([("run_id".to_owned(), s(format!("RUN_COUNT#{agent_id}")))])
}

/// An agent's run count item: `runs`, its runs counted at creation and not purged; `uncounted`,
/// once `tallied`, its runs stored before counts were kept and not purged (before the tally it
/// only goes down with their purges, and the tally overwrites it); `uncounted_purged_at`, the
/// last purge of such a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCount {
    /// `runs`: the runs counted at their creation and not purged.
    pub counted: i64,
    /// `uncounted`: the runs from before counts were kept (meaningful once `tallied`).
    pub uncounted: Option<i64>,
    /// Whether `uncounted` was tallied, so that the count is the agent's total.
    pub tallied: bool,
    /// The last purge of a run from before counts were kept.
    pub uncounted_purged_at: Option<DateTime<Utc>>,
}

impl RunCount {
    /// How many runs the agent has, once its runs from before counts were kept are tallied.
    pub fn total(&self) -> Option<usize> {
        let total = self.counted.saturating_add(self.uncounted.unwrap_or(0));
        self.tallied.then(|| usize::try_from(total).unwrap_or(0))
    }
}

/// One page of a list of runs, and how many runs the list holds.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPage {
    pub runs: Vec<RunRecord>,
    pub total: usize,
}

impl RunPage {
    /// The page of `all` after the first `skip`, at most `take`.
    fn of(all: Vec<RunRecord>, skip: usize, take: usize) -> Self {
        let total = all.len();
        Self { runs: all.into_iter().skip(skip).take(take).collect(), total }
    }
}

/// Which runs of an agent a list wants.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    pub run_type: Option<RunType>,
    pub schedule_id: Option<ScheduleId>,
}

impl RunFilter {
    /// Whether the filter lets every run through.
    pub fn is_empty(&self) -> bool {
        self.status.is_none() && self.run_type.is_none() && self.schedule_id.is_none()
    }

    fn matches(&self, run: &RunRecord) -> bool {
        self.status.is_none_or(|status| run.status == status)
            && self.run_type.is_none_or(|run_type| run.run_type == run_type)
            && self.schedule_id.is_none_or(|id| run.schedule_id == Some(id))
    }
}

/// Storage of runs, their events and their execution state (`crate::journal`).
#[derive(Clone)]
pub struct RunStore {
    pub(super) db: Client,
    pub(super) runs_table: String,
    events_table: String,
    steps: RunSteps,
}

impl RunStore {
    pub fn new(
        db: Client,
        runs_table: impl Into<String>,
        events_table: impl Into<String>,
        steps_table: impl Into<String>,
    ) -> Self {
        let steps = RunSteps::new(db.clone(), steps_table);
        Self { db, runs_table: runs_table.into(), events_table: events_table.into(), steps }
    }

    /// Runs' control items (cancel, lease) and journals.
    pub fn steps(&self) -> &RunSteps {
        &self.steps
    }

    /// The sequence number of the run's last recorded event (0: none), one Query.
    pub async fn last_event_seq(&self, run_id: RunId) -> Result<u64, StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.events_table)
            .key_condition_expression("run_id = :run")
            .expression_attribute_values(":run", AttributeValue::S(run_id.to_string()))
            .projection_expression("seq")
            .scan_index_forward(false)
            .consistent_read(true);
        let page = query_page(query, Some(1), None).await?;
        Ok(page
            .items
            .first()
            .and_then(|item| item.get("seq"))
            .and_then(|value| value.as_n().ok())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }

    /// Records a starting run and counts it in its agent's run count, with `extra` items (its
    /// webhook event and deliveries), in one transaction; a run id is written once: `false` when
    /// it already exists (and nothing is written).
    pub async fn create(&self, run: &RunRecord, extra: Vec<TransactWriteItem>) -> Result<bool, StoreError> {
        let put = Put::builder()
            .table_name(&self.runs_table)
            .set_item(Some(serde_dynamo::to_item(run)?))
            .condition_expression("attribute_not_exists(run_id)")
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        let count = self.count_change(run.agent_id, "ADD runs :one", [(":one", n(1))])?;
        let mut items = vec![TransactWriteItem::builder().put(put).build(), count];
        items.extend(extra);
        self.transact(items).await
    }

    /// Records how a run ended, with its last event (`done` or `error` as the record says,
    /// numbered `seq`) and `extra` items (its webhook event and deliveries), in one
    /// TransactWriteItems, unless it already ended (the sweep found it lost, a cancel): `false`
    /// then, and nothing is written. So a run's record, its stream's last event and its webhook
    /// event are written together or not at all.
    ///
    /// A run past its deadline and `STALE_MARGIN` reads as lost (`RunRecord::settled`), so only
    /// the sweep (`lost`) may end it: a late end from a process that was not lost after all is
    /// refused, and what readers saw is what is recorded.
    pub async fn finish(
        &self,
        run: &RunRecord,
        seq: u64,
        extra: Vec<TransactWriteItem>,
        now: DateTime<Utc>,
        lost: bool,
    ) -> Result<bool, StoreError> {
        let mut put = Put::builder()
            .table_name(&self.runs_table)
            .set_item(Some(serde_dynamo::to_item(run)?))
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":started", AttributeValue::S("started".into()));
        put = if lost {
            put.condition_expression("#status = :started")
        } else {
            put.condition_expression(
                "#status = :started AND (attribute_not_exists(open_deadline) OR open_deadline >= :fresh)",
            )
            .expression_attribute_values(":fresh", n((now - super::STALE_MARGIN).timestamp_millis()))
        };
        let put = put.build().map_err(|err| StoreError::request("TransactWriteItems", err))?;
        let last = Put::builder()
            .table_name(&self.events_table)
            .set_item(Some(self.event_item(run.run_id, seq, &run.last_event(), now)))
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        let mut items =
            vec![TransactWriteItem::builder().put(put).build(), TransactWriteItem::builder().put(last).build()];
        items.extend(extra);
        self.transact(items).await
    }

    /// Records that a worker picked up a waiting run (`RunRecord::begin`): its `started_at` and
    /// new deadline, unless the run already ended or began: `false` then.
    pub async fn begin(&self, run: &RunRecord) -> Result<bool, StoreError> {
        let Some(started_at) = run.started_at else { return Ok(false) };
        let (table, key) = self.item_key(run.run_id);
        let written = self
            .db
            .update_item()
            .table_name(table)
            .set_key(Some(key))
            // The `open-by-deadline` index follows the new deadline (a record from before the index
            // has no shard, and stays out of it).
            .update_expression(
                "SET started_at = :started_at, deadline_at = :deadline_at, open_deadline = :open_deadline",
            )
            .condition_expression("#status = :started AND attribute_not_exists(started_at)")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":started", AttributeValue::S("started".into()))
            .expression_attribute_values(":started_at", serde_dynamo::to_attribute_value(started_at)?)
            .expression_attribute_values(":deadline_at", serde_dynamo::to_attribute_value(run.deadline_at)?)
            .expression_attribute_values(":open_deadline", n(run.deadline_at.timestamp_millis()))
            .send()
            .await;
        match written {
            Ok(_) => Ok(true),
            Err(err) if storage::is_condition_failure(&err) => Ok(false),
            Err(err) => Err(StoreError::dynamo("UpdateItem", err)),
        }
    }

    /// Appends events (their sequence numbers given), in as few BatchWriteItem calls as the
    /// limits allow (25 per call).
    pub async fn append_events(
        &self,
        run_id: RunId,
        events: &[(u64, RunEvent)],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut writes = Vec::with_capacity(events.len());
        for (seq, event) in events {
            writes.push((self.events_table.clone(), put_request(self.event_item(run_id, *seq, event, now))?));
        }
        batch_write(&self.db, writes).await
    }

    /// The item of run `run_id`'s event number `seq`, kept `EVENT_RETENTION` from `now`.
    fn event_item(&self, run_id: RunId, seq: u64, event: &RunEvent, now: DateTime<Utc>) -> Item {
        let expires_at = (now + EVENT_RETENTION).timestamp();
        [
            ("run_id".to_owned(), AttributeValue::S(run_id.to_string())),
            ("seq".to_owned(), AttributeValue::N(seq.to_string())),
            ("name".to_owned(), AttributeValue::S(event.name().to_owned())),
            ("data".to_owned(), AttributeValue::S(bounded_data(event))),
            ("expires_at".to_owned(), AttributeValue::N(expires_at.to_string())),
        ]
        .into_iter()
        .collect()
    }

    /// The events after sequence number `after` (0: all), in order, at most `limit` (one Query).
    pub async fn events_after(
        &self,
        run_id: RunId,
        after: u64,
        limit: i32,
    ) -> Result<Vec<(u64, RunEvent)>, StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.events_table)
            .key_condition_expression("run_id = :run AND seq > :after")
            .expression_attribute_values(":run", AttributeValue::S(run_id.to_string()))
            .expression_attribute_values(":after", AttributeValue::N(after.to_string()))
            .consistent_read(true);
        let page = query_page(query, Some(limit), None).await?;
        let mut events = Vec::with_capacity(page.items.len());
        for item in page.items {
            let text = |key: &str| item.get(key).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
            let seq = item.get("seq").and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok()).unwrap_or(0);
            let data: Value = serde_json::from_str(&text("data")).map_err(|err| StoreError::json("run event", err))?;
            if let Some(event) = RunEvent::from_parts(&text("name"), &data) {
                events.push((seq, event));
            }
        }
        Ok(events)
    }

    /// A run by id as it reads at `now` (a lost run as it will be recorded: `RunRecord::settled`).
    pub async fn get(&self, run_id: RunId, now: DateTime<Utc>) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.get_stored(run_id).await?.map(|run| run.settled(now)))
    }

    /// A run by id as it is stored (one consistent GetItem).
    pub async fn get_stored(&self, run_id: RunId) -> Result<Option<RunRecord>, StoreError> {
        let (table, key) = self.item_key(run_id);
        let Some(item) = get_item(&self.db, table, key, Read::CONSISTENT).await? else { return Ok(None) };
        Ok(Some(serde_dynamo::from_item(item)?))
    }

    /// The ids of open runs of `open-by-deadline` shard `shard` whose deadline was before
    /// `before` (epoch milliseconds), earliest first, at most `limit` (one Query of a keys-only
    /// index: its cost follows the runs lost, not the runs kept).
    pub async fn overdue(&self, shard: u128, before: DateTime<Utc>, limit: i32) -> Result<Vec<RunId>, StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.runs_table)
            .index_name("open-by-deadline")
            .key_condition_expression("open_shard = :shard AND open_deadline < :before")
            .expression_attribute_values(":shard", AttributeValue::S(shard.to_string()))
            .expression_attribute_values(":before", n(before.timestamp_millis()));
        let page = query_page(query, Some(limit), None).await?;
        Ok(page.items.iter().filter_map(|item| item.get("run_id")?.as_s().ok()?.parse().ok()).collect())
    }

    /// Where run `run_id`'s record is (table, key): for a request that reads it together with
    /// items of other tables ([`storage::get_together`]); [`RunStore::decode`] reads the item found.
    pub fn item_key(&self, run_id: RunId) -> (String, Item) {
        (self.runs_table.clone(), Item::from([("run_id".to_owned(), AttributeValue::S(run_id.to_string()))]))
    }

    /// The run in an item found at [`RunStore::item_key`], as [`RunStore::get`] answers it.
    pub fn decode(&self, item: Item, now: DateTime<Utc>) -> Result<RunRecord, StoreError> {
        let run: RunRecord = serde_dynamo::from_item(item)?;
        Ok(run.settled(now))
    }

    /// One page of the agent's runs matching `filter`, newest first: the `take` runs after the
    /// newest `skip`, and how many match in all.
    ///
    /// Unfiltered, once the agent's count is known, it costs 1 GetItem (the count) + Queries of
    /// `by-agent` with `Limit` down to the page's depth (`skip + take`, at most the count): its
    /// cost grows with the page's depth, not with the agent's history; a page past the end makes
    /// no Query. The count is known once its runs from before counts were kept are tallied: until
    /// then (and with a filter) the list reads every run of the agent (`list_for_agent`), and an
    /// unfiltered one then tallies them (1 UpdateItem, once per agent).
    pub async fn page_for_agent(
        &self,
        agent_id: AgentId,
        filter: &RunFilter,
        skip: usize,
        take: usize,
        now: DateTime<Utc>,
    ) -> Result<RunPage, StoreError> {
        if !filter.is_empty() {
            let runs = self.list_for_agent(agent_id, filter, now).await?;
            return Ok(RunPage::of(runs, skip, take));
        }
        let count = self.run_count(agent_id).await?;
        let Some(total) = count.total() else {
            let runs = self.list_for_agent(agent_id, filter, now).await?;
            self.tally(agent_id, &count, &runs, now).await;
            return Ok(RunPage::of(runs, skip, take));
        };
        let depth = skip.saturating_add(take).min(total);
        if skip >= depth {
            return Ok(RunPage { runs: Vec::new(), total });
        }
        let query = self.by_agent(agent_id);
        let mut items = Vec::with_capacity(depth);
        let mut start_key = None;
        while items.len() < depth {
            let wanted = i32::try_from(depth - items.len()).unwrap_or(i32::MAX);
            let page = query_page(query.clone(), Some(wanted), start_key).await?;
            items.extend(page.items);
            match page.last_key {
                Some(key) => start_key = Some(key),
                None => break,
            }
        }
        let mut runs = Vec::with_capacity(take);
        for item in items.into_iter().skip(skip).take(take) {
            let run: RunRecord = serde_dynamo::from_item(item)?;
            runs.push(run.settled(now));
        }
        Ok(RunPage { runs, total })
    }

    /// A Query of the agent's runs, newest first (`by-agent` backwards).
    fn by_agent(&self, agent_id: AgentId) -> QueryFluentBuilder {
        self.db
            .query()
            .table_name(&self.runs_table)
            .index_name("by-agent")
            .key_condition_expression("agent_id = :agent")
            .expression_attribute_values(":agent", AttributeValue::S(agent_id.to_string()))
            .scan_index_forward(false)
    }

    /// The agent's run count as stored (1 consistent GetItem); all zero when it has none.
    pub async fn run_count(&self, agent_id: AgentId) -> Result<RunCount, StoreError> {
        let item =
            get_item(&self.db, &self.runs_table, count_key(agent_id), Read::CONSISTENT).await?.unwrap_or_default();
        let number =
            |name: &str| item.get(name).and_then(|value| value.as_n().ok()).and_then(|n| n.parse::<i64>().ok());
        Ok(RunCount {
            counted: number("runs").unwrap_or(0),
            uncounted: number("uncounted"),
            tallied: matches!(item.get("tallied"), Some(AttributeValue::Bool(true))),
            uncounted_purged_at: number("uncounted_purged_at").and_then(DateTime::from_timestamp_millis),
        })
    }

    /// Records how many of the agent's runs (`runs`, its whole index as just read) were stored
    /// before counts were kept, unless one of them was purged since the count was read, or so
    /// recently that the index may still show it. Its failure is logged: the list it follows is
    /// answered from the whole read either way, and the next list tries again.
    async fn tally(&self, agent_id: AgentId, seen: &RunCount, runs: &[RunRecord], now: DateTime<Utc>) {
        if seen.uncounted_purged_at.is_some_and(|purged| now - purged < INDEX_SETTLE) {
            return;
        }
        let uncounted = runs.iter().filter(|run| !run.counted).count();
        let mut values =
            HashMap::from([(":uncounted".to_owned(), n(uncounted)), (":yes".to_owned(), AttributeValue::Bool(true))]);
        let unchanged = match seen.uncounted {
            None => "attribute_not_exists(uncounted)",
            Some(value) => {
                values.insert(":seen".to_owned(), n(value));
                "uncounted = :seen"
            }
        };
        let written = self
            .db
            .update_item()
            .table_name(&self.runs_table)
            .set_key(Some(count_key(agent_id)))
            .update_expression("SET uncounted = :uncounted, tallied = :yes")
            .condition_expression(format!("attribute_not_exists(tallied) AND {unchanged}"))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        match written {
            Ok(_) => tracing::info!(%agent_id, uncounted, "agent's runs tallied"),
            Err(err) if storage::is_condition_failure(&err) => {}
            Err(err) => {
                tracing::warn!(%agent_id, error = %StoreError::dynamo("UpdateItem", err), "agent's runs not tallied");
            }
        }
    }

    /// Every run of the agent matching `filter`, newest first (one Query per MB of the agent's
    /// runs, however few match).
    pub async fn list_for_agent(
        &self,
        agent_id: AgentId,
        filter: &RunFilter,
        now: DateTime<Utc>,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let query = self.by_agent(agent_id);
        let mut runs = Vec::new();
        for item in query_all(query).await? {
            let run: RunRecord = serde_dynamo::from_item(item)?;
            let run = run.settled(now);
            if filter.matches(&run) {
                runs.push(run);
            }
        }
        Ok(runs)
    }

    /// The account's most recent runs, newest first, at most `limit`; with `status`, only runs
    /// of that status. `started` reads the sparse `open-by-account` index, so its cost follows
    /// the account's running work; another status filters the `by-account` index and reads at
    /// most `MAX_RECENT_PAGES` pages of it, so a rare status may return fewer than `limit` runs.
    pub async fn recent_for_account(
        &self,
        account: AccountId,
        status: Option<RunStatus>,
        limit: usize,
        now: DateTime<Utc>,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let (index, key) = match status {
            Some(RunStatus::Started) => ("open-by-account", "open_account"),
            _ => ("by-account", "account_id"),
        };
        let mut query = self
            .db
            .query()
            .table_name(&self.runs_table)
            .index_name(index)
            .key_condition_expression(format!("{key} = :account"))
            .expression_attribute_values(":account", AttributeValue::S(account.to_string()))
            .scan_index_forward(false);
        if let Some(wanted @ (RunStatus::Success | RunStatus::Failed)) = status {
            query = query
                .filter_expression("#status = :status")
                .expression_attribute_names("#status", "status")
                .expression_attribute_values(":status", AttributeValue::S(wanted.as_str().to_owned()));
        }
        let page_size = i32::try_from(limit.clamp(1, 100)).unwrap_or(100);
        let mut runs = Vec::new();
        let mut start_key = None;
        for _ in 0..MAX_RECENT_PAGES {
            let page = query_page(query.clone(), Some(page_size), start_key).await?;
            for item in page.items {
                let run: RunRecord = serde_dynamo::from_item(item)?;
                let run = run.settled(now);
                if status.is_none_or(|wanted| run.status == wanted) && runs.len() < limit {
                    runs.push(run);
                }
            }
            match page.last_key {
                Some(key) if runs.len() < limit => start_key = Some(key),
                _ => break,
            }
        }
        Ok(runs)
    }

    /// Deletes a run: its events, its control item and journal, then its record, uncounted from
    /// its agent's run count in the same transaction (an operator's purge of a finished run).
    /// A run already deleted is left as it is, and uncounted once only.
    pub async fn delete(&self, run: &RunRecord, now: DateTime<Utc>) -> Result<(), StoreError> {
        let run_id = run.run_id;
        let events = self
            .db
            .query()
            .table_name(&self.events_table)
            .key_condition_expression("run_id = :run")
            .expression_attribute_values(":run", AttributeValue::S(run_id.to_string()))
            .projection_expression("run_id, seq");
        let mut deletes = Vec::new();
        for key in query_all(events).await? {
            deletes.push((self.events_table.clone(), storage::delete_request(key)?));
        }
        batch_write(&self.db, deletes).await?;
        self.steps.delete(run_id).await?;
        let delete = Delete::builder()
            .table_name(&self.runs_table)
            .key("run_id", AttributeValue::S(run_id.to_string()))
            .condition_expression("attribute_exists(run_id)")
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        let count = if run.counted {
            self.count_change(run.agent_id, "ADD runs :minus", [(":minus", n(-1))])?
        } else {
            self.count_change(
                run.agent_id,
                "ADD uncounted :minus SET uncounted_purged_at = :now",
                [(":minus", n(-1)), (":now", n(now.timestamp_millis()))],
            )?
        };
        self.transact(vec![TransactWriteItem::builder().delete(delete).build(), count]).await?;
        Ok(())
    }

    /// An update of the agent's count item.
    fn count_change<const N: usize>(
        &self,
        agent_id: AgentId,
        expression: &str,
        values: [(&str, AttributeValue); N],
    ) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(&self.runs_table)
            .set_key(Some(count_key(agent_id)))
            .update_expression(expression)
            .set_expression_attribute_values(Some(
                values.into_iter().map(|(name, value)| (name.to_owned(), value)).collect(),
            ))
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// Writes a run's item (first) and its count in one transaction: `false` when the run's
    /// condition refused it. A collision with another transaction on the count (runs of one agent
    /// starting at once) is sent again after a pause.
    async fn transact(&self, items: Vec<TransactWriteItem>) -> Result<bool, StoreError> {
        let mut attempt = 0;
        loop {
            let result = self.db.transact_write_items().set_transact_items(Some(items.clone())).send().await;
            let Err(err) = result else { return Ok(true) };
            let reasons = match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
                    cancelled.cancellation_reasons()
                }
                _ => return Err(StoreError::dynamo("TransactWriteItems", err)),
            };
            if reasons.first().and_then(|reason| reason.code()) == Some("ConditionalCheckFailed") {
                return Ok(false);
            }
            let collided = reasons.iter().any(|reason| reason.code() == Some("TransactionConflict"));
            attempt += 1;
            if !collided || attempt >= COUNT_CONTENTION.max_attempts {
                return Err(StoreError::dynamo("TransactWriteItems", err));
            }
            COUNT_CONTENTION.pause(attempt).await;
        }
    }
}

/// The event's data as JSON text, within `MAX_EVENT_DATA_BYTES`: a large tool output or answer
/// is replaced by its cut text.
fn bounded_data(event: &RunEvent) -> String {
    let text = event.data().to_string();
    if text.len() <= MAX_EVENT_DATA_BYTES {
        return text;
    }
    let cut = |value: &str| truncate(value, MAX_EVENT_DATA_BYTES / 2);
    let smaller = match event {
        RunEvent::ToolResult { id, name, result: Ok(output) } => RunEvent::ToolResult {
            id: id.clone(),
            name: name.clone(),
            result: Ok(Value::String(cut(&output.to_string()))),
        },
        RunEvent::ToolResult { id, name, result: Err(error) } => {
            RunEvent::ToolResult { id: id.clone(), name: name.clone(), result: Err(cut(error)) }
        }
        RunEvent::Done { run_id, output, usage } => {
            RunEvent::Done { run_id: *run_id, output: cut(output), usage: *usage }
        }
        RunEvent::Message { delta } => RunEvent::Message { delta: cut(delta) },
        RunEvent::Plan { plan } => RunEvent::Plan { plan: cut(plan) },
        RunEvent::ToolCall { id, name, .. } => {
            let mut arguments = serde_json::Map::new();
            arguments.insert("truncated".into(), Value::String(cut(&text)));
            RunEvent::ToolCall { id: id.clone(), name: name.clone(), arguments }
        }
        RunEvent::Error { run_id, failure_reason, message } => {
            RunEvent::Error { run_id: *run_id, failure_reason: *failure_reason, message: cut(message) }
        }
        RunEvent::Metadata { .. } => event.clone(),
    };
    smaller.data().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::{RunInput, RunOrigin};

    #[test]
    fn truncation_keeps_character_boundaries() {
        assert_eq!(truncate("héllo", 10), "héllo");
        assert_eq!(truncate("héllo", 2), "h… [truncated]");
        let big =
            RunEvent::ToolResult { id: "c".into(), name: "n".into(), result: Ok(Value::String("é".repeat(100_000))) };
        let data = bounded_data(&big);
        assert!(data.len() <= MAX_EVENT_DATA_BYTES, "{}", data.len());
        assert!(data.contains("[truncated]"));
    }

    #[test]
    fn a_count_is_a_total_only_once_the_runs_from_before_counts_are_tallied() {
        let untallied = RunCount { counted: 3, uncounted: Some(-1), tallied: false, uncounted_purged_at: None };
        assert_eq!(untallied.total(), None);
        let tallied = RunCount { uncounted: Some(4), tallied: true, ..untallied };
        assert_eq!(tallied.total(), Some(7));
        assert_eq!(
            RunCount { counted: -2, uncounted: None, tallied: true, uncounted_purged_at: None }.total(),
            Some(0)
        );
    }

    #[test]
    fn new_runs_are_counted_and_stored_runs_without_the_mark_are_not() {
        let origin =
            RunOrigin { run_type: RunType::Api, input: RunInput::default(), schedule_id: None, session_id: None };
        let run = RunRecord::start(
            RunId::now_v7(),
            AgentId::new_v4(),
            AccountId::new_v4(),
            origin,
            Utc::now(),
            std::time::Duration::from_secs(60),
        );
        assert!(run.counted);
        let mut stored = serde_json::to_value(&run).unwrap();
        assert_eq!(stored["counted"], true);
        assert!(run.view().get("counted").is_none(), "not part of the API's run record");
        stored.as_object_mut().unwrap().remove("counted");
        let old: RunRecord = serde_json::from_value(stored).unwrap();
        assert!(!old.counted);
        let page = RunPage::of(vec![run.clone(), old.clone(), run.clone()], 1, 5);
        assert_eq!((page.runs, page.total), (vec![old, run], 3));
        assert_eq!(RunPage::of(Vec::new(), usize::MAX, 10).total, 0);
    }
}
