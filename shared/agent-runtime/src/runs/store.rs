//! The runs' tables: `RunsTable` (records), `RunCountsTable` (each agent's counts by day and
//! cell, `super::counts`) and `RunEventsTable` (each run's events by sequence number), with the
//! run's execution state (`crate::journal`).

use super::counts::{self, Retention, RunCounts, TALLY, Tally};
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
use storage::{
    Backoff, Item, Read, StoreError, batch_get, batch_write, get_item, n, put_request, query_all, query_down_to,
    query_page, s,
};

/// The most index pages one list of an account's recent runs reads (`recent_for_account`).
pub const MAX_RECENT_PAGES: usize = 4;

/// How long after a purge of a run from before counts were kept the `by-agent` index is not
/// trusted to show it gone: indexes follow the table asynchronously (usually within a second),
/// so a tally meanwhile could still count it.
pub const INDEX_SETTLE: Duration = Duration::seconds(60);

/// How often a run's creation, end or purge is sent when it collides with another transaction
/// on the agent's count bucket (runs of one agent starting or ending at once), and the pauses
/// between.
const COUNT_CONTENTION: Backoff =
    Backoff { base: std::time::Duration::from_millis(20), cap: std::time::Duration::from_millis(500), max_attempts: 8 };

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

    /// Whether `run` (as it reads) passes.
    pub fn matches(&self, run: &RunRecord) -> bool {
        self.status.is_none_or(|status| run.status == status) && self.matches_origin(run)
    }

    /// Whether `run`'s type and schedule pass (its status aside).
    fn matches_origin(&self, run: &RunRecord) -> bool {
        self.run_type.is_none_or(|run_type| run.run_type == run_type)
            && self.schedule_id.is_none_or(|id| run.schedule_id == Some(id))
    }
}

/// The tables runs are kept in.
#[derive(Debug, Clone)]
pub struct RunTables {
    /// `RunsTable`: the records.
    pub runs: String,
    /// `RunEventsTable`: each run's stream.
    pub events: String,
    /// `RunStepsTable`: each run's control item and journal.
    pub steps: String,
    /// `RunCountsTable`: each agent's counts by day and cell.
    pub counts: String,
}

/// Storage of runs, their events and their execution state (`crate::journal`).
#[derive(Clone)]
pub struct RunStore {
    pub(super) db: Client,
    pub(super) runs_table: String,
    events_table: String,
    counts_table: String,
    retention: Retention,
    steps: RunSteps,
}

impl RunStore {
    /// Runs in `tables`, kept as `retention` says.
    pub fn new(db: Client, tables: RunTables, retention: Retention) -> Self {
        let steps = RunSteps::new(db.clone(), tables.steps);
        Self { db, runs_table: tables.runs, events_table: tables.events, counts_table: tables.counts, retention, steps }
    }

    /// How long runs are kept.
    pub fn retention(&self) -> Retention {
        self.retention
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

    /// Records a starting run and counts it in its agent's bucket of the day, with `extra` items
    /// (its webhook event and deliveries), in one transaction; a run id is written once: `false`
    /// when it already exists (and nothing is written).
    pub async fn create(&self, run: &RunRecord, extra: Vec<TransactWriteItem>) -> Result<bool, StoreError> {
        let put = Put::builder()
            .table_name(&self.runs_table)
            .set_item(Some(self.record_item(run)?))
            .condition_expression("attribute_not_exists(run_id)")
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        let mut items = vec![TransactWriteItem::builder().put(put).build()];
        let added: Vec<_> = counts::cells_of(run, RunStatus::Started).into_iter().map(|cell| (cell, 1)).collect();
        items.extend(self.count_change(run, &added)?);
        items.extend(extra);
        self.transact(items).await
    }

    /// A run's item: its record, and while it is counted (`expires_at`), the keys of the indexes
    /// by cell (`agent_cell`, and `schedule_cell` for a schedule's run) and, while it is
    /// `started`, of `open-by-agent` (`open_agent`), all keys only.
    fn record_item(&self, run: &RunRecord) -> Result<Item, StoreError> {
        let mut item: Item = serde_dynamo::to_item(run)?;
        if run.expires_at.is_none() {
            return Ok(item);
        }
        let cell = counts::cell(run.status, run.run_type);
        item.insert("agent_cell".to_owned(), s(counts::partition(run.agent_id, &cell)));
        if let Some(schedule_id) = run.schedule_id {
            let cell = counts::schedule_cell(schedule_id, run.status, run.run_type);
            item.insert("schedule_cell".to_owned(), s(counts::partition(run.agent_id, &cell)));
        }
        if run.status == RunStatus::Started && run.open_deadline.is_some() {
            item.insert("open_agent".to_owned(), s(run.agent_id.to_string()));
        }
        Ok(item)
    }

    /// The change of run `run`'s bucket (its agent and creation day) by `changes` (cell, delta),
    /// for its transaction; none for a run from before counts were kept.
    fn count_change(
        &self,
        run: &RunRecord,
        changes: &[(String, i64)],
    ) -> Result<Option<TransactWriteItem>, StoreError> {
        let Some(expires_at) = run.expires_at else { return Ok(None) };
        let mut names = HashMap::new();
        let mut values = HashMap::from([(":expires".to_owned(), n(expires_at))]);
        let mut adds = Vec::new();
        for (index, (cell, delta)) in changes.iter().enumerate() {
            names.insert(format!("#c{index}"), cell.clone());
            values.insert(format!(":c{index}"), n(delta));
            adds.push(format!("#c{index} :c{index}"));
        }
        let key = Item::from([
            ("agent_id".to_owned(), s(run.agent_id.to_string())),
            ("day".to_owned(), s(counts::day_key(counts::day_of(run.run_id)))),
        ]);
        let update = Update::builder()
            .table_name(&self.counts_table)
            .set_key(Some(key))
            // The bucket expires with its runs.
            .update_expression(format!("ADD {} SET expires_at = if_not_exists(expires_at, :expires)", adds.join(", ")))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        Ok(Some(TransactWriteItem::builder().update(update).build()))
    }

    /// Records how a run ended, with its last event (`done` or `error` as the record says,
    /// numbered `seq`), its move from its `started` cells to its ending's in its agent's bucket,
    /// and `extra` items (its webhook event and deliveries), in one TransactWriteItems, unless
    /// it already ended (the sweep found it lost, a cancel): `false` then, and nothing is
    /// written. So a run's record, its count, its stream's last event and its webhook event are
    /// written together or not at all.
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
            .set_item(Some(self.record_item(run)?))
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
        let moved: Vec<_> = counts::cells_of(run, RunStatus::Started)
            .into_iter()
            .map(|cell| (cell, -1))
            .chain(counts::cells_of(run, run.status).into_iter().map(|cell| (cell, 1)))
            .collect();
        items.extend(self.count_change(run, &moved)?);
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

    /// A run by id as it reads at `now` (a lost run as it will be recorded: `RunRecord::settled`;
    /// a run past its retention is gone, whether or not TTL has deleted it).
    pub async fn get(&self, run_id: RunId, now: DateTime<Utc>) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.get_stored(run_id).await?.filter(|run| run.is_kept(now)).map(|run| run.settled(now)))
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
        Ok(page.items.iter().filter_map(run_id_of).collect())
    }

    /// Where run `run_id`'s record is (table, key): for a request that reads it together with
    /// items of other tables ([`storage::get_together`]); [`RunStore::decode`] reads the item found.
    pub fn item_key(&self, run_id: RunId) -> (String, Item) {
        (self.runs_table.clone(), Item::from([("run_id".to_owned(), AttributeValue::S(run_id.to_string()))]))
    }

    /// The run in an item found at [`RunStore::item_key`], as [`RunStore::get`] answers it.
    pub fn decode(&self, item: Item, now: DateTime<Utc>) -> Result<Option<RunRecord>, StoreError> {
        let run: RunRecord = serde_dynamo::from_item(item)?;
        Ok(run.is_kept(now).then(|| run.settled(now)))
    }

    /// One page of the agent's runs matching `filter`, newest first: the `take` runs after the
    /// newest `skip`, and how many match in all. Runs past their retention are left out.
    ///
    /// It reads the agent's counts first (1 consistent Query of its kept days and tally). Once
    /// every run of the agent is counted (`Tally::all_counted`), the page costs what its depth
    /// (`skip + take`, at most the total) costs, whatever the agent's history:
    /// - unfiltered: Queries of `by-agent` from the first kept id, with `Limit` down to the depth;
    /// - filtered: per cell the filter matches (at most 9, none when its count is 0), Queries of
    ///   the keys-only `by-agent-cell` (or `by-schedule-cell`) with `Limit` down to the depth,
    ///   merged newest first, then 1 BatchGetItem of the page's records. A `started` or `failed`
    ///   filter also reads the agent's lost runs (1 Query of the keys-only `open-by-agent`, and
    ///   their records when there are any): they are counted `started` until the sweep records
    ///   them, but read `failed` (`RunRecord::settled`), and the list answers as reads do.
    ///
    /// Until then the list reads every run of the agent (`list_for_agent`) and, the first time,
    /// tallies its runs from before counts were kept (1 UpdateItem).
    pub async fn page_for_agent(
        &self,
        agent_id: AgentId,
        filter: &RunFilter,
        skip: usize,
        take: usize,
        now: DateTime<Utc>,
    ) -> Result<RunPage, StoreError> {
        let counts = self.counts(agent_id, now).await?;
        if !counts.tally.all_counted() {
            let stored = self.read_whole(agent_id).await?;
            if !counts.tally.tallied {
                self.tally(agent_id, &counts.tally, &stored, now).await;
            }
            let runs = kept_matching(stored, filter, now);
            return Ok(RunPage::of(runs, skip, take));
        }
        if filter.is_empty() {
            return self.page_unfiltered(agent_id, &counts, skip, take, now).await;
        }
        self.page_by_cells(agent_id, &counts, filter, skip, take, now).await
    }

    /// An unfiltered page of a counted agent's runs, from `by-agent` (which projects whole
    /// records).
    async fn page_unfiltered(
        &self,
        agent_id: AgentId,
        counts: &RunCounts,
        skip: usize,
        take: usize,
        now: DateTime<Utc>,
    ) -> Result<RunPage, StoreError> {
        let total = counts.runs();
        let depth = skip.saturating_add(take).min(total);
        if skip >= depth {
            return Ok(RunPage { runs: Vec::new(), total });
        }
        let query = self.newest_first("by-agent", "agent_id", agent_id.to_string(), now);
        let items = query_down_to(query, depth).await?;
        let mut runs = Vec::with_capacity(take);
        for item in items.into_iter().skip(skip).take(take) {
            let run: RunRecord = serde_dynamo::from_item(item)?;
            runs.push(run.settled(now));
        }
        Ok(RunPage { runs, total })
    }

    /// A filtered page of a counted agent's runs, from the keys-only indexes by cell.
    async fn page_by_cells(
        &self,
        agent_id: AgentId,
        counts: &RunCounts,
        filter: &RunFilter,
        skip: usize,
        take: usize,
        now: DateTime<Utc>,
    ) -> Result<RunPage, StoreError> {
        let cells = counts::cells_matching(filter);
        let lost: Vec<RunId> = match filter.status {
            Some(RunStatus::Started | RunStatus::Failed) => self.lost_runs(agent_id, now).await?,
            _ => Vec::new(),
        }
        .into_iter()
        .filter(|run| filter.matches_origin(run))
        .map(|run| run.run_id)
        .collect();
        let counted = counts.sum(&cells);
        let total = match filter.status {
            Some(RunStatus::Started) => counted.saturating_sub(lost.len()),
            Some(RunStatus::Failed) => counted + lost.len(),
            _ => counted,
        };
        let depth = skip.saturating_add(take).min(total);
        if skip >= depth {
            return Ok(RunPage { runs: Vec::new(), total });
        }
        let (index, key) = if filter.schedule_id.is_some() {
            ("by-schedule-cell", "schedule_cell")
        } else {
            ("by-agent-cell", "agent_cell")
        };
        // A `started` list skips its lost runs, so it may read as many more.
        let wanted = if filter.status == Some(RunStatus::Started) { depth + lost.len() } else { depth };
        let mut ids = Vec::new();
        for cell in cells.iter().filter(|cell| counts.of(cell) > 0) {
            let query = self.newest_first(index, key, counts::partition(agent_id, cell), now);
            let items = query_down_to(query, wanted.min(counts.of(cell))).await?;
            ids.extend(items.iter().filter_map(run_id_of));
        }
        match filter.status {
            Some(RunStatus::Started) => ids.retain(|id| !lost.contains(id)),
            Some(RunStatus::Failed) => ids.extend(lost),
            _ => {}
        }
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids.dedup();
        let page: Vec<RunId> = ids.into_iter().take(depth).skip(skip).collect();
        let mut found = self.records(&page, false).await?;
        let runs = page.iter().filter_map(|id| found.remove(id)).map(|run| run.settled(now)).collect();
        Ok(RunPage { runs, total })
    }

    /// A Query of index `index`'s partition `key = value`, newest first, from the first run still
    /// kept at `now`.
    fn newest_first(&self, index: &str, key: &str, value: String, now: DateTime<Utc>) -> QueryFluentBuilder {
        self.db
            .query()
            .table_name(&self.runs_table)
            .index_name(index)
            .key_condition_expression(format!("{key} = :partition AND run_id >= :kept"))
            .expression_attribute_values(":partition", AttributeValue::S(value))
            .expression_attribute_values(":kept", AttributeValue::S(self.retention.first_kept_id(now)))
            .scan_index_forward(false)
    }

    /// The stored records of `ids` (1 BatchGetItem per 100), by id; missing ones are absent.
    async fn records(&self, ids: &[RunId], consistent: bool) -> Result<HashMap<RunId, RunRecord>, StoreError> {
        let keys = ids.iter().map(|id| self.item_key(*id)).collect();
        let mut found = HashMap::with_capacity(ids.len());
        for item in batch_get(&self.db, keys, consistent).await?.remove(&self.runs_table).unwrap_or_default() {
            let run: RunRecord = serde_dynamo::from_item(item)?;
            found.insert(run.run_id, run);
        }
        Ok(found)
    }

    /// The agent's lost runs: `started` past their deadline and the margin, not yet recorded
    /// `failed` by the sweep, as they read (1 Query of the keys-only `open-by-agent`; their
    /// records, consistent, when there are any).
    async fn lost_runs(&self, agent_id: AgentId, now: DateTime<Utc>) -> Result<Vec<RunRecord>, StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.runs_table)
            .index_name("open-by-agent")
            .key_condition_expression("open_agent = :agent AND open_deadline <= :stale")
            .expression_attribute_values(":agent", AttributeValue::S(agent_id.to_string()))
            .expression_attribute_values(":stale", n((now - super::STALE_MARGIN).timestamp_millis()));
        let ids: Vec<RunId> = query_all(query).await?.iter().filter_map(run_id_of).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let found = self.records(&ids, true).await?;
        Ok(found
            .into_values()
            .filter(|run| run.is_kept(now) && run.is_stale(now))
            .map(|run| run.settled(now))
            .collect())
    }

    /// The agent's counts: its kept days' buckets and its tally (1 consistent Query).
    pub async fn counts(&self, agent_id: AgentId, now: DateTime<Utc>) -> Result<RunCounts, StoreError> {
        let first_day = counts::day_key(self.retention.first_kept_day(now));
        let query = self
            .db
            .query()
            .table_name(&self.counts_table)
            .key_condition_expression("agent_id = :agent AND #day >= :first")
            .expression_attribute_names("#day", "day")
            .expression_attribute_values(":agent", AttributeValue::S(agent_id.to_string()))
            .expression_attribute_values(":first", AttributeValue::S(first_day))
            .consistent_read(true);
        Ok(RunCounts::from_items(&query_all(query).await?))
    }

    /// The key of the agent's tally item.
    fn tally_key(&self, agent_id: AgentId) -> Item {
        Item::from([("agent_id".to_owned(), s(agent_id.to_string())), ("day".to_owned(), s(TALLY))])
    }

    /// Records how many of the agent's runs (`stored`, its whole index as just read) are from
    /// before counts were kept, unless one of them was purged since the tally was read, or so
    /// recently that the index may still show it. Its failure is logged: the list it follows is
    /// answered from the whole read either way, and the next list tries again.
    async fn tally(&self, agent_id: AgentId, seen: &Tally, stored: &[RunRecord], now: DateTime<Utc>) {
        if seen.legacy_purged_at.is_some_and(|purged| now - purged < INDEX_SETTLE) {
            return;
        }
        let legacy = stored.iter().filter(|run| run.expires_at.is_none()).count();
        let mut values =
            HashMap::from([(":legacy".to_owned(), n(legacy)), (":yes".to_owned(), AttributeValue::Bool(true))]);
        let unchanged = match seen.legacy {
            None => "attribute_not_exists(legacy)",
            Some(value) => {
                values.insert(":seen".to_owned(), n(value));
                "legacy = :seen"
            }
        };
        let written = self
            .db
            .update_item()
            .table_name(&self.counts_table)
            .set_key(Some(self.tally_key(agent_id)))
            .update_expression("SET legacy = :legacy, tallied = :yes")
            .condition_expression(format!("attribute_not_exists(tallied) AND {unchanged}"))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        match written {
            Ok(_) => tracing::info!(%agent_id, legacy, "agent's runs tallied"),
            Err(err) if storage::is_condition_failure(&err) => {}
            Err(err) => {
                tracing::warn!(%agent_id, error = %StoreError::dynamo("UpdateItem", err), "agent's runs not tallied");
            }
        }
    }

    /// Every stored run of the agent, newest first (one Query of `by-agent` per MB).
    async fn read_whole(&self, agent_id: AgentId) -> Result<Vec<RunRecord>, StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.runs_table)
            .index_name("by-agent")
            .key_condition_expression("agent_id = :agent")
            .expression_attribute_values(":agent", AttributeValue::S(agent_id.to_string()))
            .scan_index_forward(false);
        let mut runs = Vec::new();
        for item in query_all(query).await? {
            runs.push(serde_dynamo::from_item(item)?);
        }
        Ok(runs)
    }

    /// Every kept run of the agent matching `filter` as it reads, newest first, read whole (one
    /// Query per MB of all the agent's runs, however few match): what a page must agree with.
    pub async fn list_for_agent(
        &self,
        agent_id: AgentId,
        filter: &RunFilter,
        now: DateTime<Utc>,
    ) -> Result<Vec<RunRecord>, StoreError> {
        Ok(kept_matching(self.read_whole(agent_id).await?, filter, now))
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
                if !run.is_kept(now) {
                    continue;
                }
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
    /// its agent's counts in the same transaction (an operator's purge of a finished run).
    /// `stored` is the record as stored (not as it reads: a lost run is still counted
    /// `started`). A run already deleted is left as it is, and uncounted once only.
    pub async fn delete(&self, stored: &RunRecord, now: DateTime<Utc>) -> Result<(), StoreError> {
        let run_id = stored.run_id;
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
        let mut stored = stored.clone();
        // The count taken back is the status deleted: a sweep recording the run `failed` in
        // between makes the delete read it again.
        for _ in 0..3 {
            let delete = Delete::builder()
                .table_name(&self.runs_table)
                .key("run_id", AttributeValue::S(run_id.to_string()))
                .condition_expression("attribute_exists(run_id) AND #status = :status")
                .expression_attribute_names("#status", "status")
                .expression_attribute_values(":status", s(stored.status.as_str()))
                .build()
                .map_err(|err| StoreError::request("TransactWriteItems", err))?;
            let mut items = vec![TransactWriteItem::builder().delete(delete).build()];
            if stored.expires_at.is_some() {
                let removed: Vec<_> =
                    counts::cells_of(&stored, stored.status).into_iter().map(|cell| (cell, -1)).collect();
                items.extend(self.count_change(&stored, &removed)?);
            } else {
                let update = Update::builder()
                    .table_name(&self.counts_table)
                    .set_key(Some(self.tally_key(stored.agent_id)))
                    .update_expression("ADD legacy :minus SET legacy_purged_at = :now")
                    .expression_attribute_values(":minus", n(-1))
                    .expression_attribute_values(":now", n(now.timestamp_millis()))
                    .build()
                    .map_err(|err| StoreError::request("TransactWriteItems", err))?;
                items.push(TransactWriteItem::builder().update(update).build());
            }
            if self.transact(items).await? {
                return Ok(());
            }
            match self.get_stored(run_id).await? {
                Some(current) => stored = current,
                None => return Ok(()),
            }
        }
        Err(StoreError::Conflict)
    }

    /// Writes a run's item (first) and its count in one transaction: `false` when the run's
    /// condition refused it (see `transact`).
    async fn transact(&self, items: Vec<TransactWriteItem>) -> Result<bool, StoreError> {
        transact(&self.db, items).await
    }

    /// Adds an ended run's spend to its account's and agent's per-day totals (`usage_items`,
    /// `crate::usage::UsageStore::run_items`) and clears the run's `usage_pending` mark (and its
    /// place in the `open-by-deadline` index, kept until now so the sweep finds a run whose
    /// process died first), in one transaction: exactly once. `false`: nothing was pending.
    pub async fn settle_usage(&self, run_id: RunId, usage_items: Vec<TransactWriteItem>) -> Result<bool, StoreError> {
        let (table, key) = self.item_key(run_id);
        let clear = Update::builder()
            .table_name(table)
            .set_key(Some(key))
            .update_expression("REMOVE usage_pending, open_shard, open_deadline")
            .condition_expression("attribute_exists(usage_pending)")
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        let mut items = vec![TransactWriteItem::builder().update(clear).build()];
        items.extend(usage_items);
        self.transact(items).await
    }
}

/// Writes `items` in one transaction: `false` when the first item's condition refused it. A
/// collision with another transaction (counters of one agent or account written at once) is
/// sent again after a pause.
pub(crate) async fn transact(db: &Client, items: Vec<TransactWriteItem>) -> Result<bool, StoreError> {
    let mut attempt = 0;
    loop {
        let result = db.transact_write_items().set_transact_items(Some(items.clone())).send().await;
        let Err(err) = result else { return Ok(true) };
        let reasons = match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => cancelled.cancellation_reasons(),
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

/// The run id of an item (a record, or a keys-only index entry).
fn run_id_of(item: &Item) -> Option<RunId> {
    item.get("run_id")?.as_s().ok()?.parse().ok()
}

/// The runs of `stored` still kept at `now` that match `filter` as they read.
fn kept_matching(stored: Vec<RunRecord>, filter: &RunFilter, now: DateTime<Utc>) -> Vec<RunRecord> {
    stored
        .into_iter()
        .filter(|run| run.is_kept(now))
        .map(|run| run.settled(now))
        .filter(|run| filter.matches(run))
        .collect()
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
        RunEvent::Done { run_id, output, bill } => RunEvent::Done { run_id: *run_id, output: cut(output), bill: *bill },
        RunEvent::Message { delta } => RunEvent::Message { delta: cut(delta) },
        RunEvent::Plan { plan } => RunEvent::Plan { plan: cut(plan) },
        RunEvent::ToolCall { id, name, .. } => {
            let mut arguments = serde_json::Map::new();
            arguments.insert("truncated".into(), Value::String(cut(&text)));
            RunEvent::ToolCall { id: id.clone(), name: name.clone(), arguments }
        }
        RunEvent::Error { run_id, failure_reason, message, bill } => {
            RunEvent::Error { run_id: *run_id, failure_reason: *failure_reason, message: cut(message), bill: *bill }
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
    fn lists_trust_the_counts_only_once_no_run_from_before_them_is_left() {
        let untallied = Tally { legacy: Some(-1), tallied: false, legacy_purged_at: None };
        assert!(!untallied.all_counted());
        assert!(!Tally { legacy: Some(2), tallied: true, ..untallied }.all_counted());
        assert!(Tally { legacy: Some(0), tallied: true, ..untallied }.all_counted());
        assert!(Tally { legacy: None, tallied: true, ..untallied }.all_counted());
    }

    #[test]
    fn new_runs_are_counted_and_indexed_by_cell_and_runs_without_expiry_are_not() {
        let origin = RunOrigin {
            run_type: RunType::Schedule,
            input: RunInput::default(),
            schedule_id: Some(ScheduleId::now_v7()),
            session_id: None,
            parent: None,
        };
        let run = RunRecord::start(
            RunId::now_v7(),
            AgentId::new_v4(),
            AccountId::new_v4(),
            origin,
            Utc::now(),
            std::time::Duration::from_secs(60),
            Retention::default(),
        );
        assert!(run.expires_at.is_some());
        assert!(run.view().get("expires_at").is_none(), "not part of the API's run record");
        let store = RunStore::new(
            Client::from_conf(aws_sdk_dynamodb::Config::builder().behavior_version_latest().build()),
            RunTables { runs: "runs".into(), events: "events".into(), steps: "steps".into(), counts: "counts".into() },
            Retention::default(),
        );
        let item = store.record_item(&run).unwrap();
        let partition = |name: &str| item.get(name).and_then(|value| value.as_s().ok()).cloned();
        assert_eq!(partition("agent_cell"), Some(format!("{}#started.schedule", run.agent_id)));
        assert_eq!(
            partition("schedule_cell"),
            Some(format!("{}#{}.started.schedule", run.agent_id, run.schedule_id.unwrap()))
        );
        assert_eq!(partition("open_agent"), Some(run.agent_id.to_string()));
        let mut ended = run.clone();
        ended.finish(&Ok("x".into()), Default::default(), 1, Utc::now());
        let item = store.record_item(&ended).unwrap();
        assert!(!item.contains_key("open_agent"), "only started runs are open");
        assert!(item.get("agent_cell").is_some_and(|cell| cell.as_s().unwrap().ends_with("#success.schedule")));
        let old = RunRecord { expires_at: None, ..run };
        let item = store.record_item(&old).unwrap();
        assert!(["agent_cell", "schedule_cell", "open_agent"].iter().all(|name| !item.contains_key(*name)));
        assert_eq!(RunPage::of(vec![old.clone(), old.clone(), old], 1, 5).runs.len(), 2);
        assert_eq!(RunPage::of(Vec::new(), usize::MAX, 10).total, 0);
    }
}
