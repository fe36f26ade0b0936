//! Meetings and their transcripts.
//!
//! Keys in `MeetingsTable`: a meeting is `pk = MEETING#{id}, sk = MEETING`; its transcript segments
//! are `pk = MEETING#{id}, sk = SEG#{position:06}` in start-time order, so one Query returns the
//! meeting followed by its transcript. Only meeting items carry `org_id` and `list_sort`
//! (`{start_time UTC, microseconds}#{id:020}`), which makes the `by-organization` index sparse and
//! sorted newest first when read backwards. Each organization's meeting count is kept at
//! `pk = ORG#{id}, sk = MEETING_COUNT` (`meetings`), changed with the meeting item in one
//! transaction.
//!
//! The filter indexes: a meeting item also carries `updated_sort` and `created_sort` (the same
//! shape as `list_sort`, by `updated_at` and `created_at`) and `org_flags`
//! (`{org_id}#{summary_complete 0|1}{from_calendar 0|1}`); each participant of a meeting has an
//! item `pk = MEETING#{id}, sk = PARTICIPANT#{user_id:020}` carrying `participant_org`
//! (`{org_id}#{user_id}`), `list_sort` and the filtered attributes. The count item's
//! `filter_indexes` says every meeting of the organization was written with them (meetings
//! stored before have none until `admin reindex`): only then does a filtered list read them.

use crate::announcements::{self, Artifacts, Before};
use crate::listing::{ListEntry, MeetingFilter, Source, list_sort_key, newest_first};
use crate::model::{Meeting, TranscriptSegment};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use chrono::Datelike;
use chrono::Utc;
use std::collections::{HashMap, HashSet};
use storage::{
    Attributes, Item, Read, StoreError, batch_get, batch_write, delete_request, get_item, n, put_request, query_all, s,
};
use webhooks::audience::meeting_outbox;
use webhooks::messages::DeliveryMessage;
use webhooks::publisher::Publisher;
use webhooks::store::Trigger;

/// How often `put` reads and writes again when the meeting changed meanwhile.
const MAX_PUT_ATTEMPTS: usize = 5;

/// The key of an organization's meeting count (`meetings`), kept beside its meetings so an
/// unfiltered list reads a count instead of the organization's whole index.
fn count_key(organization_id: i64) -> Item {
    Item::from([("pk".to_owned(), s(format!("ORG#{organization_id}"))), ("sk".to_owned(), s("MEETING_COUNT"))])
}

/// Queues the fan-out of a meeting's outbox event, written with the meeting (a failure is
/// logged: the sweeper queues it once it is overdue).
async fn queue_outbox(webhooks: &Publisher, stand_in: &webhooks::store::Delivery, meeting_id: i64) {
    let message = DeliveryMessage::of(stand_in, Trigger::Scheduled);
    if let Err(err) = webhooks.queue.send(std::slice::from_ref(&message)).await {
        tracing::warn!(error = %err, meeting_id, "meeting event stored but not queued; the sweeper will queue it");
    }
}

/// The list index: meetings by organization, sorted by start time then id.
pub const BY_ORGANIZATION_INDEX: &str = "by-organization";
/// Meetings by organization, sorted by `updated_at` then id (`updated_after`).
pub const BY_UPDATED_INDEX: &str = "by-organization-updated";
/// Meetings by organization, sorted by `created_at` then id (`created_after`, `created_before`).
pub const BY_CREATED_INDEX: &str = "by-organization-created";
/// Meetings by organization and flags, sorted like the list (`summary_complete`, `from_calendar`).
pub const BY_FLAGS_INDEX: &str = "by-organization-flags";
/// A participant's meetings in an organization, sorted like the list (`participants`).
pub const BY_PARTICIPANT_INDEX: &str = "by-participant";

/// The version of the filter indexes a count item's `filter_indexes` names when every meeting
/// of its organization carries them.
const FILTER_INDEXES: i64 = 1;

/// An organization's count item, as lists read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrganizationCount {
    pub meetings: usize,
    /// Every meeting of the organization is in the filter indexes.
    pub filter_indexes: bool,
}

/// A flags partition key of the `by-organization-flags` index.
fn org_flags(organization_id: i64, summary_complete: bool, from_calendar: bool) -> String {
    format!("{organization_id}#{}{}", u8::from(summary_complete), u8::from(from_calendar))
}

/// A participant's partition key of the `by-participant` index.
fn participant_org(organization_id: i64, user_id: i64) -> String {
    format!("{organization_id}#{user_id}")
}

/// A meeting's item: its fields, its key, and the attributes the list index uses.
pub fn meeting_item(meeting: &Meeting) -> Result<Item, StoreError> {
    let mut item: Item = serde_dynamo::to_item(meeting)?;
    item.extend(meeting_key(meeting.id));
    item.insert("org_id".into(), n(meeting.organization_id));
    item.insert("list_sort".into(), s(list_sort_key(meeting.start_time, meeting.id)));
    item.insert("updated_sort".into(), s(list_sort_key(meeting.updated_at, meeting.id)));
    item.insert("created_sort".into(), s(list_sort_key(meeting.created_at, meeting.id)));
    let from_calendar = meeting.calendar_event.is_some();
    item.insert("org_flags".into(), s(org_flags(meeting.organization_id, meeting.summary_complete, from_calendar)));
    item.insert("from_calendar".into(), AttributeValue::Bool(from_calendar));
    item.insert(
        "participant_ids".into(),
        AttributeValue::L(meeting.participant_user_ids().into_iter().map(n).collect()),
    );
    Ok(item)
}

/// The attributes of a meeting item that list filters read and its indexes project.
const LISTED_ATTRIBUTES: [&str; 8] =
    ["id", "list_sort", "title", "created_at", "updated_at", "summary_complete", "from_calendar", "participant_ids"];

/// The `by-participant` index items of `meeting` (whose item is `item`): one per participant,
/// in the meeting's partition, with the item's listed attributes as it encodes them (not
/// `org_id`: they are not meetings).
pub fn participant_items(meeting: &Meeting, item: &Item) -> Vec<Item> {
    let listed: Item = LISTED_ATTRIBUTES
        .iter()
        .filter_map(|name| item.get(*name).map(|value| ((*name).to_owned(), value.clone())))
        .collect();
    meeting
        .participant_user_ids()
        .into_iter()
        .map(|user| {
            let mut participant = listed.clone();
            participant.insert("pk".to_owned(), partition(meeting.id));
            participant.insert("sk".to_owned(), s(format!("PARTICIPANT#{user:020}")));
            participant.insert("participant_org".to_owned(), s(participant_org(meeting.organization_id, user)));
            participant
        })
        .collect()
}

/// The `by-organization` index Query of an organization, newest first, projecting `id`,
/// `list_sort` and `attributes`.
fn index_query(db: &Client, table: &str, organization_id: i64, attributes: &[&str]) -> QueryFluentBuilder {
    projected_query(db, table, BY_ORGANIZATION_INDEX, attributes)
        .key_condition_expression("org_id = :org")
        .expression_attribute_values(":org", n(organization_id))
}

/// A Query of `index`, its sort key descending, projecting `id`, `list_sort` and `attributes`
/// (through placeholders: some names are reserved words).
fn projected_query(db: &Client, table: &str, index: &str, attributes: &[&str]) -> QueryFluentBuilder {
    let mut query = db.query().table_name(table).index_name(index).scan_index_forward(false);
    let mut projection = Vec::new();
    for (position, name) in ["id", "list_sort"].iter().chain(attributes).enumerate() {
        let placeholder = format!("#p{position}");
        projection.push(placeholder.clone());
        query = query.expression_attribute_names(placeholder, *name);
    }
    query.projection_expression(projection.join(", "))
}

/// A transcript segment's item (read by the hundred per transcript, so by hand: see
/// `storage::Attributes`). Attributes other than the segment's (its keys) are ignored.
pub fn segment_from_item(item: &Item) -> Result<TranscriptSegment, StoreError> {
    let attributes = Attributes(item);
    Ok(TranscriptSegment {
        speaker: attributes.optional_string("speaker")?,
        start_time: attributes.number("start_time")?,
        end_time: attributes.number("end_time")?,
        raw_text: attributes.optional_string("raw_text")?,
        formatted_text: attributes.optional_string("formatted_text")?,
        revised_text: attributes.optional_string("revised_text")?,
        confidential: attributes.flag("confidential")?,
    })
}

/// Storage of meetings and transcripts.
#[derive(Clone)]
pub struct MeetingStore {
    db: Client,
    table: String,
    /// Where writes announce themselves to external applications' webhooks; none: they do not.
    outbox: Option<Publisher>,
}

fn partition(id: i64) -> AttributeValue {
    s(format!("MEETING#{id}"))
}

fn meeting_key(id: i64) -> Item {
    Item::from([("pk".to_owned(), partition(id)), ("sk".to_owned(), s("MEETING"))])
}

impl MeetingStore {
    /// A store over `MeetingsTable`.
    pub fn new(db: Client, table: impl Into<String>) -> Self {
        Self { db, table: table.into(), outbox: None }
    }

    /// The same store, each write of a meeting recording what it announces (`announcements`)
    /// as an outbox event in `webhooks`' tables, in the meeting's own transaction, then queueing
    /// its fan-out on `webhooks`' queue (when that fails, the sweeper queues it).
    pub fn with_outbox(mut self, webhooks: Publisher) -> Self {
        self.outbox = Some(webhooks);
        self
    }

    /// Creates or replaces a meeting and its whole transcript (stale segments are deleted), and
    /// keeps its organization's meeting count: the meeting item and the count change in one
    /// transaction, conditional on the meeting being as read, so concurrent imports of one
    /// meeting never count it twice (a lost race is read and written again).
    pub async fn put(&self, meeting: &Meeting, transcript: &[TranscriptSegment]) -> Result<(), StoreError> {
        for _ in 0..MAX_PUT_ATTEMPTS {
            if self.put_once(meeting, transcript).await? {
                return Ok(());
            }
        }
        Err(StoreError::request("TransactWriteItems", "the meeting kept changing while it was written"))
    }

    /// One attempt of `put`: `false` when the meeting changed since it was read.
    async fn put_once(&self, meeting: &Meeting, transcript: &[TranscriptSegment]) -> Result<bool, StoreError> {
        let existing = query_all(
            self.db
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", partition(meeting.id))
                .projection_expression("pk, sk, org_id, artifacts"),
        )
        .await?;
        let stored =
            existing.iter().find(|key| matches!(key.get("sk"), Some(AttributeValue::S(sk)) if sk == "MEETING"));
        let stored_organization = stored
            .map(|item| item.get("org_id").and_then(|value| value.as_n().ok()).and_then(|n| n.parse::<i64>().ok()));
        let before = match stored {
            None => Before::New,
            Some(item) => Before::Stored(item.get("artifacts").and_then(|value| value.as_l().ok()).map(|names| {
                Artifacts::from_names(names.iter().filter_map(|name| name.as_s().ok().map(String::as_str)))
            })),
        };
        let artifacts = Artifacts::of(meeting, transcript.len());

        let mut item = meeting_item(meeting)?;
        item.insert("artifacts".into(), AttributeValue::L(artifacts.names().into_iter().map(s).collect()));
        let mut requests = Vec::new();
        let mut written = HashSet::new();
        for (position, segment) in transcript.iter().enumerate() {
            let sort = format!("SEG#{position:06}");
            let mut item: Item = serde_dynamo::to_item(segment)?;
            item.insert("pk".into(), partition(meeting.id));
            item.insert("sk".into(), s(&sort));
            requests.push((self.table.clone(), put_request(item)?));
            written.insert(sort);
        }
        for item in participant_items(meeting, &item) {
            if let Some(AttributeValue::S(sort)) = item.get("sk") {
                written.insert(sort.clone());
            }
            requests.push((self.table.clone(), put_request(item)?));
        }
        for key in existing {
            let stale = matches!(key.get("sk"), Some(AttributeValue::S(sk))
                if (sk.starts_with("SEG#") || sk.starts_with("PARTICIPANT#")) && !written.contains(sk));
            if stale {
                requests.push((self.table.clone(), delete_request(key)?));
            }
        }
        // The transcript and the participant items first: the meeting item (what lists and
        // reads find) comes last.
        batch_write(&self.db, requests).await?;
        let (condition, mut values) = match stored_organization {
            None => ("attribute_not_exists(pk)".to_owned(), HashMap::new()),
            Some(Some(organization)) => {
                ("org_id = :stored".to_owned(), HashMap::from([(":stored".to_owned(), n(organization))]))
            }
            Some(None) => ("attribute_not_exists(org_id)".to_owned(), HashMap::new()),
        };
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_values((!values.is_empty()).then(|| std::mem::take(&mut values)))
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        let mut writes = vec![TransactWriteItem::builder().put(put).build()];
        let outbox = match &self.outbox {
            Some(webhooks) => {
                let types = announcements::event_types(&before, artifacts, &announcements::expected(meeting));
                let data = announcements::payload(meeting, artifacts);
                let (event, stand_in) = meeting_outbox(meeting.organization_id, &types, data, Utc::now());
                writes.extend(webhooks.store.event_items(&event, std::slice::from_ref(&stand_in))?);
                Some((webhooks, stand_in))
            }
            None => None,
        };
        let moved_from = match stored_organization {
            None => None,
            Some(stored) if stored == Some(meeting.organization_id) => None,
            Some(stored) => stored,
        };
        if stored_organization != Some(Some(meeting.organization_id)) {
            let first_of_its_organization = self.is_first_meeting(meeting).await?;
            writes.push(self.count_change(meeting.organization_id, 1, first_of_its_organization)?);
            if let Some(previous) = moved_from {
                writes.push(self.count_change(previous, -1, false)?);
            }
        }
        if !self.write(writes).await? {
            return Ok(false);
        }
        if let Some((webhooks, stand_in)) = outbox {
            queue_outbox(webhooks, &stand_in, meeting.id).await;
        }
        Ok(true)
    }

    /// Deletes a meeting with its transcript and participant items, counts it out of its
    /// organization, and announces `meeting.deleted` with the outbox (in the meeting item's
    /// transaction). The transcript and participant items go first (BatchWriteItem), so a list
    /// never finds participant entries of a meeting that is gone; a deletion cut short leaves a
    /// meeting without them, which deleting again finishes. `false` when there was no meeting.
    pub async fn delete(&self, id: i64) -> Result<bool, StoreError> {
        let Some(meeting) = self.get(id).await? else { return Ok(false) };
        let keys = query_all(
            self.db
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", partition(id))
                .projection_expression("pk, sk"),
        )
        .await?;
        let children = keys
            .into_iter()
            .filter(|key| !matches!(key.get("sk"), Some(AttributeValue::S(sk)) if sk == "MEETING"))
            .map(|key| Ok((self.table.clone(), delete_request(key)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        batch_write(&self.db, children).await?;
        let delete = aws_sdk_dynamodb::types::Delete::builder()
            .table_name(&self.table)
            .set_key(Some(meeting_key(id)))
            .condition_expression("attribute_exists(pk)")
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        let mut writes = vec![TransactWriteItem::builder().delete(delete).build()];
        // An organization without a count item (meetings stored before counts) keeps none.
        if get_item(&self.db, &self.table, count_key(meeting.organization_id), Read::CONSISTENT).await?.is_some() {
            writes.push(self.count_change(meeting.organization_id, -1, false)?);
        }
        let now = Utc::now();
        let outbox = match &self.outbox {
            Some(webhooks) => {
                let gone = Meeting { updated_at: now, ..meeting.clone() };
                let data = announcements::payload(&gone, Artifacts::default());
                let (event, stand_in) = meeting_outbox(meeting.organization_id, &["meeting.deleted"], data, now);
                writes.extend(webhooks.store.event_items(&event, std::slice::from_ref(&stand_in))?);
                Some((webhooks, stand_in))
            }
            None => None,
        };
        if !self.write(writes).await? {
            // Deleted meanwhile by another call, which announced it.
            return Ok(false);
        }
        if let Some((webhooks, stand_in)) = outbox {
            queue_outbox(webhooks, &stand_in, id).await;
        }
        Ok(true)
    }

    /// Whether `meeting` is the first of its organization: no count item and no other meeting
    /// in its index (one GetItem, and one Query of at most 2 keys when there is no count). Its
    /// count item is then created saying every meeting of the organization is in the filter
    /// indexes; an organization whose meetings were stored before them stays without.
    async fn is_first_meeting(&self, meeting: &Meeting) -> Result<bool, StoreError> {
        let count = get_item(&self.db, &self.table, count_key(meeting.organization_id), Read::CONSISTENT).await?;
        if count.is_some() {
            return Ok(false);
        }
        let query = index_query(&self.db, &self.table, meeting.organization_id, &[]);
        let page = storage::query_page(query, Some(2), None).await?;
        let others = page.items.iter().filter(|item| ListEntry::from_item(item).map(|e| e.id).ok() != Some(meeting.id));
        Ok(others.count() == 0)
    }

    /// Adds `delta` to an organization's meeting count; `first` also records that its meetings
    /// are in the filter indexes (see `is_first_meeting`).
    fn count_change(&self, organization_id: i64, delta: i64, first: bool) -> Result<TransactWriteItem, StoreError> {
        let expression =
            if first { "ADD meetings :delta SET filter_indexes = :indexes" } else { "ADD meetings :delta" };
        let mut update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(count_key(organization_id)))
            .update_expression(expression)
            .expression_attribute_values(":delta", n(delta));
        if first {
            update = update.expression_attribute_values(":indexes", n(FILTER_INDEXES));
        }
        let update = update.build().map_err(|err| StoreError::request("TransactWriteItems", err))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// Writes `items` in one transaction: `false` when a condition failed.
    async fn write(&self, items: Vec<TransactWriteItem>) -> Result<bool, StoreError> {
        match self.db.transact_write_items().set_transact_items(Some(items)).send().await {
            Ok(_) => Ok(true),
            Err(err) => match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(cancelled))
                    if cancelled
                        .cancellation_reasons()
                        .iter()
                        .any(|reason| reason.code() == Some("ConditionalCheckFailed")) =>
                {
                    Ok(false)
                }
                _ => Err(StoreError::dynamo("TransactWriteItems", err)),
            },
        }
    }

    /// The count items of `organizations` that keep one (one BatchGetItem per 100); an
    /// organization without a count item is absent (meetings imported before counts existed:
    /// `admin recount` writes it).
    pub async fn counts(&self, organizations: &[i64]) -> Result<HashMap<i64, OrganizationCount>, StoreError> {
        let mut distinct = organizations.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let keys = distinct.iter().map(|id| (self.table.clone(), count_key(*id))).collect();
        let found = batch_get(&self.db, keys, false).await?.remove(&self.table).unwrap_or_default();
        let mut counts = HashMap::new();
        for item in found {
            let organization = match item.get("pk") {
                Some(AttributeValue::S(pk)) => pk.strip_prefix("ORG#").and_then(|id| id.parse::<i64>().ok()),
                _ => None,
            };
            let number =
                |name: &str| item.get(name).and_then(|value| value.as_n().ok()).and_then(|n| n.parse::<i64>().ok());
            if let (Some(organization), Some(count)) = (organization, number("meetings")) {
                let meetings = usize::try_from(count).unwrap_or(0);
                let filter_indexes = number("filter_indexes").is_some_and(|version| version >= FILTER_INDEXES);
                counts.insert(organization, OrganizationCount { meetings, filter_indexes });
            }
        }
        Ok(counts)
    }

    /// Sets an organization's meeting count from its index (the operator's `admin recount`).
    pub async fn recount(&self, organization_id: i64) -> Result<usize, StoreError> {
        let count = self.index_entries(organization_id, &MeetingFilter::default()).await?.len();
        self.set_count(organization_id, count, false).await?;
        Ok(count)
    }

    /// Writes every meeting of an organization again, so each carries the filter indexes'
    /// attributes and participant items, then sets its count and records that its meetings are
    /// in the filter indexes (the operator's `admin reindex`, once per organization stored
    /// before them). Returns the meetings written.
    pub async fn reindex(&self, organization_id: i64) -> Result<usize, StoreError> {
        let entries = self.index_entries(organization_id, &MeetingFilter::default()).await?;
        // Written again as they are: nothing to announce.
        let silent = Self { outbox: None, ..self.clone() };
        for entry in &entries {
            if let Some((meeting, transcript)) = self.get_with_transcript(entry.id).await? {
                silent.put(&meeting, &transcript).await?;
            }
        }
        let count = self.index_entries(organization_id, &MeetingFilter::default()).await?.len();
        self.set_count(organization_id, count, true).await?;
        Ok(entries.len())
    }

    /// Sets an organization's count (keeping what its item says of the filter indexes, unless
    /// `filter_indexes` records them).
    async fn set_count(&self, organization_id: i64, count: usize, filter_indexes: bool) -> Result<(), StoreError> {
        let expression =
            if filter_indexes { "SET meetings = :count, filter_indexes = :indexes" } else { "SET meetings = :count" };
        let mut update = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(count_key(organization_id)))
            .update_expression(expression)
            .expression_attribute_values(":count", n(count));
        if filter_indexes {
            update = update.expression_attribute_values(":indexes", n(FILTER_INDEXES));
        }
        update.send().await.map_err(|err| StoreError::dynamo("UpdateItem", err))?;
        Ok(())
    }

    /// An organization's newest `limit` index entries, newest first (one Query per page of up
    /// to `limit` entries and 1 MB).
    pub async fn newest_entries(&self, organization_id: i64, limit: usize) -> Result<Vec<ListEntry>, StoreError> {
        let query = index_query(&self.db, &self.table, organization_id, &[]);
        let mut entries = Vec::new();
        let mut start_key = None;
        while entries.len() < limit {
            let wanted = i32::try_from(limit - entries.len()).unwrap_or(i32::MAX);
            let page = storage::query_page(query.clone(), Some(wanted), start_key).await?;
            for item in &page.items {
                entries.push(ListEntry::from_item(item)?);
            }
            match page.last_key {
                Some(key) => start_key = Some(key),
                None => break,
            }
        }
        Ok(entries)
    }

    /// One meeting (GetItem).
    pub async fn get(&self, id: i64) -> Result<Option<Meeting>, StoreError> {
        let item = get_item(&self.db, &self.table, meeting_key(id), Read::EVENTUAL).await?;
        item.map(serde_dynamo::from_item).transpose().map_err(Into::into)
    }

    /// Meetings by id, in the order given (BatchGetItem); missing ids are skipped.
    pub async fn get_many(&self, ids: &[i64]) -> Result<Vec<Meeting>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys = ids.iter().map(|id| (self.table.clone(), meeting_key(*id))).collect();
        let mut found = batch_get(&self.db, keys, false).await?;
        let mut by_id: HashMap<i64, Meeting> = HashMap::new();
        for item in found.remove(&self.table).unwrap_or_default() {
            let meeting: Meeting = serde_dynamo::from_item(item)?;
            by_id.insert(meeting.id, meeting);
        }
        Ok(ids.iter().filter_map(|id| by_id.remove(id)).collect())
    }

    /// A meeting and its transcript in start-time order (one Query, plus one per further MB).
    pub async fn get_with_transcript(&self, id: i64) -> Result<Option<(Meeting, Vec<TranscriptSegment>)>, StoreError> {
        let items = query_all(
            self.db
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", partition(id)),
        )
        .await?;
        let mut meeting = None;
        let mut segments = Vec::new();
        for item in items {
            match item.get("sk") {
                Some(AttributeValue::S(sk)) if sk == "MEETING" => meeting = Some(serde_dynamo::from_item(item)?),
                Some(AttributeValue::S(sk)) if sk.starts_with("SEG#") => segments.push(segment_from_item(&item)?),
                _ => {}
            }
        }
        Ok(meeting.map(|meeting| (meeting, segments)))
    }

    /// An organization's entries that pass `filter`, newest first. When `indexed` (its count
    /// item says every meeting is in the filter indexes), they are read from the index of its
    /// most selective filter ([`Source`]): the reads are what that filter matches, one Query per
    /// MB of them (one per participant, one or two flag partitions). Otherwise, and for a title
    /// filter alone, from the whole organization index ([`MeetingStore::index_entries`]).
    pub async fn filtered_entries(
        &self,
        organization_id: i64,
        filter: &MeetingFilter,
        indexed: bool,
    ) -> Result<Vec<ListEntry>, StoreError> {
        let source = filter.source();
        if !indexed || source == Source::Organization {
            return self.index_entries(organization_id, filter).await;
        }
        let attributes = filter.attributes();
        let query = |index: &str| projected_query(&self.db, &self.table, index, &attributes);
        let organization = n(organization_id);
        let queries: Vec<QueryFluentBuilder> = match source {
            Source::UpdatedSince(instant) => vec![
                query(BY_UPDATED_INDEX)
                    .key_condition_expression("org_id = :org AND updated_sort >= :from")
                    .expression_attribute_values(":org", organization)
                    .expression_attribute_values(":from", s(list_sort_key(instant, 0))),
            ],
            Source::CreatedBetween(after, before) => {
                let midnight =
                    |date: chrono::NaiveDate| list_sort_key(date.and_time(chrono::NaiveTime::MIN).and_utc(), 0);
                let from = after.map(midnight);
                // Up to the next day's midnight, which no meeting of that day reaches. Past year
                // 9999 there is no bound: the key's `+10000-…` would sort before every year.
                let to = before.and_then(|date| date.succ_opt()).filter(|date| date.year() <= 9999).map(midnight);
                // An empty range (after its end) matches nothing; DynamoDB refuses a BETWEEN whose
                // bounds are reversed, so it is answered here.
                if from.as_ref().zip(to.as_ref()).is_some_and(|(from, to)| from > to) {
                    return Ok(Vec::new());
                }
                let base = query(BY_CREATED_INDEX).expression_attribute_values(":org", organization);
                vec![match (from, to) {
                    (Some(from), Some(to)) => base
                        .key_condition_expression("org_id = :org AND created_sort BETWEEN :from AND :to")
                        .expression_attribute_values(":from", s(from))
                        .expression_attribute_values(":to", s(to)),
                    (Some(from), None) => base
                        .key_condition_expression("org_id = :org AND created_sort >= :from")
                        .expression_attribute_values(":from", s(from)),
                    (None, Some(to)) => base
                        .key_condition_expression("org_id = :org AND created_sort <= :to")
                        .expression_attribute_values(":to", s(to)),
                    (None, None) => base.key_condition_expression("org_id = :org"),
                }]
            }
            Source::Flags(summary_complete, from_calendar) => {
                let values = |flag: Option<bool>| flag.map_or(vec![false, true], |flag| vec![flag]);
                let mut queries = Vec::new();
                for summary in values(summary_complete) {
                    for calendar in values(from_calendar) {
                        queries.push(
                            query(BY_FLAGS_INDEX)
                                .key_condition_expression("org_flags = :flags")
                                .expression_attribute_values(
                                    ":flags",
                                    s(org_flags(organization_id, summary, calendar)),
                                ),
                        );
                    }
                }
                queries
            }
            Source::Participants(users) => {
                let mut users = users;
                users.sort_unstable();
                users.dedup();
                users
                    .into_iter()
                    .map(|user| {
                        query(BY_PARTICIPANT_INDEX)
                            .key_condition_expression("participant_org = :participant")
                            .expression_attribute_values(":participant", s(participant_org(organization_id, user)))
                    })
                    .collect()
            }
            Source::Organization => Vec::new(),
        };
        let read = futures_util::future::try_join_all(queries.into_iter().map(query_all)).await?;
        let mut seen = HashSet::new();
        let mut entries = Vec::new();
        for item in read.iter().flatten() {
            if filter.matches(item)? {
                let entry = ListEntry::from_item(item)?;
                // A meeting with several of the participants asked for is read once per participant.
                if seen.insert(entry.id) {
                    entries.push(entry);
                }
            }
        }
        Ok(newest_first(vec![entries]))
    }

    /// An organization's index entries that pass `filter` (all of them for the default one),
    /// newest first: one Query per MB of entries, projecting only what `filter` reads (read
    /// units are the same, since DynamoDB bills an entry's whole size; what travels and is
    /// decoded is a few attributes per entry instead of eleven).
    pub async fn index_entries(
        &self,
        organization_id: i64,
        filter: &MeetingFilter,
    ) -> Result<Vec<ListEntry>, StoreError> {
        let items = query_all(index_query(&self.db, &self.table, organization_id, &filter.attributes())).await?;
        let mut entries = Vec::new();
        for item in &items {
            if filter.matches(item)? {
                entries.push(ListEntry::from_item(item)?);
            }
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use proptest::prelude::*;

    fn demo_plan() -> crate::import::ImportPlan {
        let json = include_str!("../../../../fixtures/demo-meetings.json");
        let document = crate::import::parse_document(json.as_bytes())
            .unwrap()
            .with_files(std::path::Path::new(crate::import::FIXTURES));
        crate::import::validate(document, vec![], vec![], Utc::now()).unwrap()
    }

    /// A time at whole microseconds (what chrono writes and reads back exactly).
    fn time() -> impl Strategy<Value = DateTime<Utc>> {
        (0i64..4_102_444_800_000_000).prop_map(|micros| DateTime::from_timestamp_micros(micros).unwrap())
    }

    /// Any combination of the list's filters.
    fn filter() -> impl Strategy<Value = MeetingFilter> {
        let flag = || proptest::option::of(any::<bool>());
        (
            proptest::option::of("[a-c]{0,2}"),
            proptest::option::of(proptest::collection::vec(0i64..40, 1..4)),
            (proptest::option::of(time()), proptest::option::of(time())),
            (flag(), flag()),
            proptest::option::of(time()),
        )
            .prop_map(
                |(title, participants, (after, before), (summary_complete, from_calendar), updated_after)| {
                    MeetingFilter {
                        title,
                        participants,
                        created_after: after.map(|time| time.date_naive()),
                        created_before: before.map(|time| time.date_naive()),
                        summary_complete,
                        from_calendar,
                        updated_after,
                    }
                },
            )
    }

    /// The filters applied to the meeting itself, as the spec words them.
    fn passes(filter: &MeetingFilter, meeting: &Meeting) -> bool {
        let created = meeting.created_at.date_naive();
        filter.title.as_ref().is_none_or(|title| meeting.title.to_lowercase().contains(&title.to_lowercase()))
            && filter
                .participants
                .as_ref()
                .is_none_or(|ids| meeting.participant_user_ids().iter().any(|id| ids.contains(id)))
            && filter.created_after.is_none_or(|date| created >= date)
            && filter.created_before.is_none_or(|date| created <= date)
            && filter.summary_complete.is_none_or(|flag| meeting.summary_complete == flag)
            && filter.from_calendar.is_none_or(|flag| meeting.calendar_event.is_some() == flag)
            && filter.updated_after.is_none_or(|instant| meeting.updated_at >= instant)
    }

    proptest! {
        #[test]
        fn a_filter_reads_from_the_index_what_the_meeting_says(
            which in 0usize..3,
            title in prop_oneof!["[a-cA-C ]{0,6}", ".*"],
            (start, created, updated) in (time(), time(), time()),
            summary_complete in any::<bool>(),
            filter in filter(),
        ) {
            let mut meeting = demo_plan().meetings.swap_remove(which).0;
            (meeting.title, meeting.start_time, meeting.created_at, meeting.updated_at) = (title, start, created, updated);
            meeting.summary_complete = summary_complete;
            // The index holds these attributes of the meeting's item (template.yaml); a list's
            // Query projects `id`, `list_sort` and what the filter reads.
            let item = meeting_item(&meeting).unwrap();
            let read = filter.attributes();
            let projected: Item = item
                .into_iter()
                .filter(|(name, _)| ["id", "list_sort"].contains(&name.as_str()) || read.contains(&name.as_str()))
                .collect();
            prop_assert_eq!(filter.matches(&projected).unwrap(), passes(&filter, &meeting));
            prop_assert_eq!(
                ListEntry::from_item(&projected).unwrap(),
                ListEntry { id: meeting.id, list_sort: list_sort_key(start, meeting.id) }
            );
            // Each participant item (the by-participant index) says the same as the meeting.
            let participants = participant_items(&meeting, &meeting_item(&meeting).unwrap());
            prop_assert_eq!(participants.len(), meeting.participant_user_ids().len());
            for item in &participants {
                prop_assert!(!item.contains_key("org_id"), "not in the meeting indexes");
                prop_assert_eq!(filter.matches(item).unwrap(), passes(&filter, &meeting));
                prop_assert_eq!(ListEntry::from_item(item).unwrap(), ListEntry::from_item(&projected).unwrap());
            }
        }

        #[test]
        fn segments_read_back_what_serde_dynamo_wrote(
            speaker in proptest::option::of(".*"),
            (start_time, end_time) in (-1e12f64..1e12, -1e12f64..1e12),
            texts in proptest::array::uniform3(proptest::option::of(".*")),
            confidential in any::<bool>(),
        ) {
            let [raw_text, formatted_text, revised_text] = texts;
            let segment =
                TranscriptSegment { speaker, start_time, end_time, raw_text, formatted_text, revised_text, confidential };
            let mut item: Item = serde_dynamo::to_item(&segment).unwrap();
            item.insert("pk".into(), partition(1));
            item.insert("sk".into(), s("SEG#000001"));
            prop_assert_eq!(segment_from_item(&item).unwrap(), segment);
        }
    }

    #[test]
    fn the_demo_transcripts_read_back() {
        for (_, transcript) in demo_plan().meetings {
            for segment in transcript {
                let item: Item = serde_dynamo::to_item(&segment).unwrap();
                assert_eq!(segment_from_item(&item).unwrap(), segment);
            }
        }
    }

    #[test]
    fn a_malformed_entry_names_its_attribute() {
        let meeting = demo_plan().meetings.swap_remove(0).0;
        let mut item = meeting_item(&meeting).unwrap();
        item.insert("list_sort".into(), n(1));
        let err = ListEntry::from_item(&item).unwrap_err();
        assert!(matches!(&err, StoreError::Attribute { name, .. } if name == "list_sort"), "{err}");
        item.remove("id");
        assert!(matches!(ListEntry::from_item(&item), Err(StoreError::Attribute { name, .. }) if name == "id"));
    }

    #[test]
    fn list_sort_keys_order_by_start_time_then_id() {
        let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let a = list_sort_key(t("2026-11-02T09:00:00Z"), 9);
        let b = list_sort_key(t("2026-11-02T09:00:00Z"), 10);
        let c = list_sort_key(t("2026-11-02T09:00:00.5Z"), 1);
        assert!(a < b && b < c);
        assert_eq!(a, "2026-11-02T09:00:00.000000Z#00000000000000000009");
    }
}
