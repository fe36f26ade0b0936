//! Account-scoped, uniquely named records (agents, language models, …) and their storage.
//!
//! One table per kind of record, every item in the owning account's partition, so another
//! account's record is simply not found:
//! - record: `pk = ACCOUNT#{account_id}`, `sk = {KIND}#{id}`; the validated body is kept as JSON
//!   text (`spec`) so every value round-trips exactly. `revision` counts the record's writes and
//!   is the optimistic lock of replace and delete (items written before it existed read as 0);
//! - name marker: `pk = ACCOUNT#{account_id}`, `sk = NAME#{hex SHA-256 of the name}` (69 bytes
//!   whatever the name, within the 1024-byte sort-key limit), holding `name` and `record_id`,
//!   written in the same transaction as the record, which makes names unique per account
//!   atomically. Soft-deleted records keep their marker, so a restore never conflicts.
//!
//! While a record is active (not soft-deleted) it carries `active_pk` (its partition's key), so
//! it is in the table's sparse `active` index, which projects the whole record, ordered by
//! `created_sort` (`{created_at}#{id}`: the lists' order, read backwards): a page of the
//! account's records reads the index down to its depth, a filtered list the account's active
//! records, and neither reads soft-deleted ones. With a quota, the account's counter
//! (`storage::quota`) is a page's total.
//!
//! Every TransactWriteItems carries a `ClientRequestToken` derived from the record id, the
//! revision and the written content, so sending the same write again (within DynamoDB's
//! 10-minute window) is answered with success instead of a conflict with itself.

use crate::StoreError;
use crate::dynamo::{Item, MAX_ITEM_BYTES, Read, batch_get, get_item, item_size, query_all, query_down_to};
use crate::ids::{AccountId, TypedId};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Delete, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::marker::PhantomData;
use storage::quota::{Counted, Counter, Counters, Quota};
use uuid::Uuid;

/// A record body: what kind it is and the name that must be unique in its account.
pub trait RecordBody: Serialize + DeserializeOwned + Clone {
    /// The sort-key prefix of records of this kind (`AGENT`).
    const KIND: &'static str;
    /// The id of records of this kind (`AgentId`).
    type Id: TypedId;
    /// The unique name.
    fn name(&self) -> &str;
    /// The free-text description, shown with the name where the record is referenced.
    fn description(&self) -> Option<&str>;
}

/// One page of the account's active records, newest first, and how many there are.
#[derive(Debug, Clone)]
pub struct RecordPage<T: RecordBody> {
    pub records: Vec<Record<T>>,
    pub total: usize,
}

/// A stored record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<T: RecordBody> {
    pub id: T::Id,
    pub account_id: AccountId,
    pub spec: T,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
    /// The revision this copy was read at (0 for a new record). The store sets the stored one:
    /// every write adds 1, and replace and delete require the one they were given.
    pub revision: u64,
}

impl<T: RecordBody> Record<T> {
    /// A new record of `account_id` with a fresh (random) id, created `now` (not yet stored).
    pub fn new(account_id: AccountId, spec: T, now: DateTime<Utc>) -> Self {
        Self {
            id: T::Id::from(Uuid::new_v4()),
            account_id,
            spec,
            created_at: now,
            updated_at: now,
            deleted_at: None,
            revision: 0,
        }
    }
}

/// The item shape of a record.
#[derive(Serialize, Deserialize)]
struct RecordItem {
    pk: String,
    sk: String,
    id: Uuid,
    account_id: AccountId,
    name: String,
    spec: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deleted_at: Option<DateTime<Utc>>,
    #[serde(default)]
    revision: u64,
    /// The partition key, while the record is active: the sparse `active` index's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    active_pk: Option<String>,
    /// `{created_at}#{id}`: the `active` index's sort key, the lists' order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    created_sort: Option<String>,
}

/// The `active` index's sort key of a record: its creation time (fixed width, UTC, so it sorts
/// as text) and its id.
fn created_sort(created_at: DateTime<Utc>, id: impl std::fmt::Display) -> String {
    format!("{}#{id}", created_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
}

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("the name {0:?} is already taken in this account")]
    NameTaken(String),
    #[error("record not found")]
    NotFound,
    /// The record exists but was written since it was read (the optimistic lock was lost).
    #[error("the record changed since it was read")]
    Conflict,
    /// The record's item would exceed DynamoDB's 400 KB limit; `field` is its largest body field.
    #[error("the record is too large to store; its largest field is {field:?}")]
    TooLarge { field: String },
    /// The account already has `quota.limit` active records of this kind.
    #[error("the account already has {} records (its {} quota)", .0.limit, .0.name)]
    QuotaReached(Quota),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn partition(account_id: AccountId) -> String {
    format!("ACCOUNT#{account_id}")
}

fn record_sort<T: RecordBody>(id: T::Id) -> String {
    format!("{}#{id}", T::KIND)
}

/// The marker's sort key: a digest, so the key's length does not depend on the name's.
fn name_sort(name: &str) -> String {
    format!("NAME#{}", hex(&Sha256::digest(name.as_bytes())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A `ClientRequestToken` (at most 36 characters) for the write `parts` describe.
fn request_token(parts: &[&str]) -> String {
    let mut digest = Sha256::new();
    for part in parts {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    hex(&digest.finalize()[..16])
}

fn key(pk: String, sk: String) -> Item {
    Item::from([("pk".to_owned(), AttributeValue::S(pk)), ("sk".to_owned(), AttributeValue::S(sk))])
}

/// The condition that the stored revision is still `revision` (`:revision`); records written
/// before revisions existed have none, which counts as 0.
fn revision_condition(revision: u64) -> &'static str {
    if revision == 0 { "(attribute_not_exists(revision) OR revision = :revision)" } else { "revision = :revision" }
}

/// A record as its item, with a digest of that item (the token of writing it).
struct Encoded {
    item: Item,
    digest: String,
}

impl<T: RecordBody> Record<T> {
    /// The item of this record at `revision`; an item over DynamoDB's size limit is refused here.
    fn to_item(&self, revision: u64) -> Result<Encoded, WriteError> {
        let spec = serde_json::to_string(&self.spec).map_err(|err| StoreError::json("record body", err))?;
        let item = RecordItem {
            pk: partition(self.account_id),
            sk: record_sort::<T>(self.id),
            id: self.id.into(),
            account_id: self.account_id,
            name: self.spec.name().to_owned(),
            spec,
            created_at: self.created_at,
            updated_at: self.updated_at,
            deleted_at: self.deleted_at,
            revision,
            active_pk: self.deleted_at.is_none().then(|| partition(self.account_id)),
            created_sort: Some(created_sort(self.created_at, self.id)),
        };
        let text = serde_json::to_string(&item).map_err(|err| StoreError::json("record item", err))?;
        let digest = hex(&Sha256::digest(text.as_bytes()));
        let item: Item = serde_dynamo::to_item(item).map_err(StoreError::from)?;
        if item_size(&item) > MAX_ITEM_BYTES {
            return Err(WriteError::TooLarge { field: self.largest_field(&item) });
        }
        Ok(Encoded { item, digest })
    }

    /// The largest top-level attribute of `item`; within the body (`spec`), its largest field.
    fn largest_field(&self, item: &Item) -> String {
        let largest = item.iter().max_by_key(|(name, value)| name.len() + storage::attribute_size(value));
        let Some((attribute, _)) = largest else { return "body".into() };
        if attribute != "spec" {
            return attribute.clone();
        }
        let fields = match serde_json::to_value(&self.spec) {
            Ok(serde_json::Value::Object(fields)) => fields,
            _ => return "body".into(),
        };
        fields
            .iter()
            .max_by_key(|(name, value)| name.len() + value.to_string().len())
            .map_or_else(|| "body".into(), |(name, _)| name.clone())
    }

    fn from_item(item: Item) -> Result<Self, StoreError> {
        let item: RecordItem = serde_dynamo::from_item(item)?;
        let spec = serde_json::from_str(&item.spec).map_err(|err| StoreError::json("record body", err))?;
        Ok(Self {
            id: item.id.into(),
            account_id: item.account_id,
            spec,
            created_at: item.created_at,
            updated_at: item.updated_at,
            deleted_at: item.deleted_at,
            revision: item.revision,
        })
    }
}

/// Storage of one kind of record.
#[derive(Clone)]
pub struct RecordStore<T> {
    db: Client,
    table: String,
    kind: PhantomData<T>,
    /// The per-account count of active records, when the kind has a quota.
    quota: Option<(Counters, Quota)>,
}

impl<T: RecordBody> RecordStore<T> {
    /// A store over the kind's table.
    pub fn new(db: Client, table: impl Into<String>) -> Self {
        Self { db, table: table.into(), kind: PhantomData, quota: None }
    }

    /// Holds each account to `quota` active records: creating and restoring count one more
    /// (refused at the limit: [`WriteError::QuotaReached`]), deleting one fewer, in the same
    /// transaction as the record (`storage::quota`).
    pub fn with_quota(mut self, counters: Counters, quota: Quota) -> Self {
        self.quota = Some((counters, quota));
        self
    }

    /// Sends a write of the account's records, counted when the kind has a quota: `change`
    /// builds the counter's item (increment or decrement), appended last.
    async fn counted(
        &self,
        account_id: AccountId,
        mut items: Vec<TransactWriteItem>,
        change: fn(&Counter) -> Result<TransactWriteItem, StoreError>,
        token: Option<String>,
        expect: Expect<'_>,
    ) -> Result<(), WriteError> {
        let Some((counters, quota)) = &self.quota else { return self.transact(items, token, expect).await };
        let counter = counters.counter(*quota, &account_id.to_string());
        items.push(change(&counter)?);
        let at = items.len() - 1;
        let tally = || async {
            let records = self.list(account_id).await?;
            Ok(records.iter().filter(|record| record.deleted_at.is_none()).count())
        };
        match counters.transact(&counter, items, at, token, tally).await? {
            Counted::Written => Ok(()),
            Counted::QuotaReached(quota) => Err(WriteError::QuotaReached(quota)),
            Counted::Refused(reasons) => Err(expect.cancelled(&reasons).unwrap_or(WriteError::Conflict)),
        }
    }

    /// Creates a record and reserves its name, atomically (one TransactWriteItems). The record
    /// is stored at `record.revision` (0 for a new one).
    pub async fn create(&self, record: &Record<T>) -> Result<(), WriteError> {
        let encoded = record.to_item(record.revision)?;
        let token = request_token(&[T::KIND, "create", &encoded.digest]);
        let items = vec![
            self.put(encoded.item, "attribute_not_exists(pk)", HashMap::new())?,
            self.put_marker(record.account_id, record.spec.name(), record.id)?,
        ];
        let expect = Expect { record: 0, marker: Some(1), name: record.spec.name() };
        self.counted(record.account_id, items, Counter::increment, Some(token), expect).await
    }

    /// Replaces an active record as read in `previous`, at the next revision; a write since
    /// that read (another revision) is a conflict. A new name is reserved and the old one
    /// released in the same transaction.
    pub async fn replace(&self, record: &Record<T>, previous: &Record<T>) -> Result<(), WriteError> {
        let encoded = record.to_item(previous.revision + 1)?;
        let token = request_token(&[T::KIND, "replace", &encoded.digest]);
        let condition = format!(
            "attribute_exists(pk) AND attribute_not_exists(deleted_at) AND {}",
            revision_condition(previous.revision)
        );
        let values = HashMap::from([(":revision".to_owned(), AttributeValue::N(previous.revision.to_string()))]);
        let mut items = vec![self.put(encoded.item, &condition, values)?];
        let mut expect = Expect { record: 0, marker: None, name: record.spec.name() };
        if record.spec.name() != previous.spec.name() {
            items.push(self.put_marker(record.account_id, record.spec.name(), record.id)?);
            items.push(self.delete_marker(record.account_id, previous.spec.name())?);
            expect.marker = Some(1);
        }
        self.transact(items, Some(token), expect).await
    }

    /// Deletes an active record for good and releases its name (one TransactWriteItems), if it
    /// is still at the revision `record` was read at: a write since then (a rename would leave
    /// its new name reserved forever) is a conflict; a soft-deleted or missing record is "not
    /// found".
    pub async fn delete(&self, record: &Record<T>) -> Result<(), WriteError> {
        let condition = format!(
            "attribute_exists(pk) AND attribute_not_exists(deleted_at) AND {}",
            revision_condition(record.revision)
        );
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(key(partition(record.account_id), record_sort::<T>(record.id))))
            .condition_expression(condition)
            .expression_attribute_values(":revision", AttributeValue::N(record.revision.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_error)?;
        let items = vec![
            TransactWriteItem::builder().delete(delete).build(),
            self.delete_marker(record.account_id, record.spec.name())?,
        ];
        let id = record.id.to_string();
        let token = request_token(&[T::KIND, "delete", &id, &record.revision.to_string()]);
        let expect = Expect { record: 0, marker: None, name: record.spec.name() };
        self.counted(record.account_id, items, Counter::decrement, Some(token), expect).await
    }

    /// One record of the account, deleted or not (GetItem).
    pub async fn get(&self, account_id: AccountId, id: T::Id) -> Result<Option<Record<T>>, StoreError> {
        let (table, key) = self.item_key(account_id, id);
        let item = get_item(&self.db, table, key, Read::CONSISTENT).await?;
        item.map(Record::from_item).transpose()
    }

    /// The DynamoDB client the store reads with, for reads joined with other tables' items.
    pub fn db(&self) -> &Client {
        &self.db
    }

    /// Where record `id` of the account is (table, key): for a request that reads it together
    /// with items of other tables ([`crate::dynamo::get_together`]); [`RecordStore::decode`] reads the
    /// item found. Another account's id is another key, so it is never found.
    pub fn item_key(&self, account_id: AccountId, id: T::Id) -> (String, Item) {
        (self.table.clone(), key(partition(account_id), record_sort::<T>(id)))
    }

    /// The record in an item found at [`RecordStore::item_key`].
    pub fn decode(&self, item: Item) -> Result<Record<T>, StoreError> {
        Record::from_item(item)
    }

    /// Records of the account by id (one BatchGetItem per 100 distinct ids); missing ids are
    /// skipped, repeated ids read once.
    pub async fn get_many(&self, account_id: AccountId, ids: &[T::Id]) -> Result<Vec<Record<T>>, StoreError> {
        let mut distinct = ids.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let mut records = Vec::new();
        for chunk in distinct.chunks(100) {
            let keys = chunk.iter().map(|id| (self.table.clone(), key(partition(account_id), record_sort::<T>(*id))));
            let mut found = batch_get(&self.db, keys.collect(), false).await?;
            for item in found.remove(&self.table).unwrap_or_default() {
                records.push(Record::from_item(item)?);
            }
        }
        Ok(records)
    }

    /// Which of `ids` are active (not soft-deleted) records of the account.
    pub async fn active_ids(&self, account_id: AccountId, ids: &[T::Id]) -> Result<Vec<T::Id>, StoreError> {
        let records = self.get_many(account_id, ids).await?;
        Ok(records.into_iter().filter(|record| record.deleted_at.is_none()).map(|record| record.id).collect())
    }

    /// Every record of the account, deleted ones included (one Query per MB).
    pub async fn list(&self, account_id: AccountId) -> Result<Vec<Record<T>>, StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :kind)")
            .expression_attribute_values(":pk", AttributeValue::S(partition(account_id)))
            .expression_attribute_values(":kind", AttributeValue::S(format!("{}#", T::KIND)));
        query_all(query).await?.into_iter().map(Record::from_item).collect()
    }

    /// How many active records the account has, when the kind has a quota and the account's
    /// counter is started (1 GetItem of the counter); `None` otherwise.
    pub async fn active_count(&self, account_id: AccountId) -> Result<Option<usize>, StoreError> {
        let Some((counters, quota)) = &self.quota else { return Ok(None) };
        let value = counters.value(&counters.counter(*quota, &account_id.to_string())).await?;
        Ok(value.map(|count| usize::try_from(count).unwrap_or(0)))
    }

    /// A Query of the account's active records in the `active` index, newest first.
    fn active_query(&self, account_id: AccountId) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        self.db
            .query()
            .table_name(&self.table)
            .index_name("active")
            .key_condition_expression("active_pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(partition(account_id)))
            .scan_index_forward(false)
    }

    /// The account's active records `skip..skip + take`, newest first, and how many there are.
    /// With the account's counter (a kind with a quota): 1 GetItem (the counter) + Queries of the
    /// `active` index with `Limit` down to the page's depth (none past the end). Without: every
    /// active record (`active_records`).
    pub async fn active_page(
        &self,
        account_id: AccountId,
        skip: usize,
        take: usize,
    ) -> Result<RecordPage<T>, StoreError> {
        let Some(total) = self.active_count(account_id).await? else {
            let all = self.active_records(account_id).await?;
            let total = all.len();
            return Ok(RecordPage { records: all.into_iter().skip(skip).take(take).collect(), total });
        };
        let depth = skip.saturating_add(take).min(total);
        if skip >= depth {
            return Ok(RecordPage { records: Vec::new(), total });
        }
        let items = query_down_to(self.active_query(account_id), depth).await?;
        let records = items.into_iter().skip(skip).map(Record::from_item).collect::<Result<_, _>>()?;
        Ok(RecordPage { records, total })
    }

    /// Every active record of the account, newest first (1 Query of the `active` index per MB):
    /// its cost follows the account's active records (bounded by the kind's quota), never its
    /// deleted ones.
    pub async fn active_records(&self, account_id: AccountId) -> Result<Vec<Record<T>>, StoreError> {
        query_all(self.active_query(account_id)).await?.into_iter().map(Record::from_item).collect()
    }

    /// Soft-deletes an active record (one conditional UpdateItem, next revision; with a quota,
    /// a TransactWriteItems that also counts it out).
    pub async fn soft_delete(&self, account_id: AccountId, id: T::Id, now: DateTime<Utc>) -> Result<(), WriteError> {
        self.update_state(
            account_id,
            id,
            "SET deleted_at = :now, updated_at = :now REMOVE active_pk ADD revision :one",
            "attribute_exists(pk) AND attribute_not_exists(deleted_at)",
            Counter::decrement,
            now,
        )
        .await
    }

    /// Restores a soft-deleted record (one conditional UpdateItem, next revision; with a quota,
    /// a TransactWriteItems that also counts it in, refused at the limit); an active one is
    /// "not found".
    pub async fn restore(&self, account_id: AccountId, id: T::Id, now: DateTime<Utc>) -> Result<(), WriteError> {
        self.update_state(
            account_id,
            id,
            "REMOVE deleted_at SET updated_at = :now, active_pk = pk ADD revision :one",
            "attribute_exists(deleted_at)",
            Counter::increment,
            now,
        )
        .await
    }

    async fn update_state(
        &self,
        account_id: AccountId,
        id: T::Id,
        update: &str,
        condition: &str,
        change: fn(&Counter) -> Result<TransactWriteItem, StoreError>,
        now: DateTime<Utc>,
    ) -> Result<(), WriteError> {
        let now = serde_dynamo::to_attribute_value(now).map_err(StoreError::from)?;
        let key = key(partition(account_id), record_sort::<T>(id));
        let values = HashMap::from([(":now".to_owned(), now), (":one".to_owned(), AttributeValue::N("1".into()))]);
        if self.quota.is_some() {
            let update = Update::builder()
                .table_name(&self.table)
                .set_key(Some(key))
                .update_expression(update)
                .condition_expression(condition)
                .set_expression_attribute_values(Some(values))
                .build()
                .map_err(build_error)?;
            let items = vec![TransactWriteItem::builder().update(update).build()];
            // No idempotency token: a second restore of the same record must be refused.
            let expect = Expect { record: 0, marker: None, name: "" };
            // The record's condition failing is "not found" here, whatever the record holds.
            return match self.counted(account_id, items, change, None, expect).await {
                Err(WriteError::Conflict) => Err(WriteError::NotFound),
                other => other,
            };
        }
        let request = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_values(Some(values));
        match request.send().await {
            Ok(_) => Ok(()),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| matches!(e, UpdateItemError::ConditionalCheckFailedException(_))) =>
            {
                Err(WriteError::NotFound)
            }
            Err(err) => Err(StoreError::dynamo("UpdateItem", err).into()),
        }
    }

    fn put(
        &self,
        item: Item,
        condition: &str,
        values: HashMap<String, AttributeValue>,
    ) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_values((!values.is_empty()).then_some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    fn delete_marker(&self, account_id: AccountId, name: &str) -> Result<TransactWriteItem, StoreError> {
        let release = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(key(partition(account_id), name_sort(name))))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().delete(release).build())
    }

    fn put_marker(&self, account_id: AccountId, name: &str, id: T::Id) -> Result<TransactWriteItem, StoreError> {
        let mut marker = key(partition(account_id), name_sort(name));
        marker.insert("name".into(), AttributeValue::S(name.to_owned()));
        marker.insert("record_id".into(), AttributeValue::S(id.to_string()));
        self.put(marker, "attribute_not_exists(pk)", HashMap::new())
    }

    /// Runs a transaction with its idempotency token; failures are told apart by `expect`.
    async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
        token: Option<String>,
        expect: Expect<'_>,
    ) -> Result<(), WriteError> {
        let result =
            self.db.transact_write_items().set_transact_items(Some(items)).set_client_request_token(token).send().await;
        let Err(err) = result else { return Ok(()) };
        if let Some(refusal) = err.as_service_error().and_then(|service| expect.refusal(service)) {
            return Err(refusal);
        }
        Err(StoreError::dynamo("TransactWriteItems", err).into())
    }
}

/// Which items of a transaction carry the conditions that can refuse it.
struct Expect<'a> {
    /// The record's put or delete.
    record: usize,
    /// The new name's marker, if the write reserves one.
    marker: Option<usize>,
    /// The name the write reserves.
    name: &'a str,
}

impl Expect<'_> {
    /// Why DynamoDB refused the transaction, when it is an answer rather than a fault: the
    /// record's condition failed on a record that exists and is active (it changed since it was
    /// read: a conflict) or on one that is missing or soft-deleted (not found); else the
    /// marker's (the name is taken); a concurrent transaction on the same items, or the same
    /// token sent with other content, is a conflict too.
    fn refusal(&self, err: &TransactWriteItemsError) -> Option<WriteError> {
        match err {
            TransactWriteItemsError::TransactionCanceledException(cancelled) => {
                self.cancelled(cancelled.cancellation_reasons())
            }
            TransactWriteItemsError::IdempotentParameterMismatchException(_)
            | TransactWriteItemsError::TransactionInProgressException(_) => Some(WriteError::Conflict),
            _ => None,
        }
    }

    fn cancelled(&self, reasons: &[CancellationReason]) -> Option<WriteError> {
        let failed =
            |index: usize| reasons.get(index).and_then(CancellationReason::code) == Some("ConditionalCheckFailed");
        if failed(self.record) {
            let current = reasons.get(self.record).and_then(CancellationReason::item);
            let active = current.is_some_and(|item| !item.is_empty() && !item.contains_key("deleted_at"));
            return Some(if active { WriteError::Conflict } else { WriteError::NotFound });
        }
        if self.marker.is_some_and(failed) {
            return Some(WriteError::NameTaken(self.name.to_owned()));
        }
        if reasons.iter().any(|reason| reason.code() == Some("TransactionConflict")) {
            return Some(WriteError::Conflict);
        }
        None
    }
}

fn build_error(err: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::request("TransactWriteItems", err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ToolId;
    use crate::tools::{ToolSpec, ToolType};
    use serde_json::{Map, Value};

    fn tool(metadata: Map<String, Value>) -> Record<ToolSpec> {
        let now = Utc::now();
        let spec = ToolSpec {
            name: "lookup".into(),
            description: None,
            tool_type: ToolType::Http,
            input_schema: Map::new(),
            script: None,
            config: Map::new(),
            metadata,
        };
        Record {
            id: ToolId::new_v4(),
            account_id: AccountId::new_v4(),
            spec,
            created_at: now,
            updated_at: now,
            deleted_at: None,
            revision: 0,
        }
    }

    #[test]
    fn marker_keys_have_one_length_whatever_the_name() {
        let long = name_sort(&"𝔸".repeat(255));
        assert_eq!(long.len(), 69);
        assert_eq!(name_sort("a").len(), 69);
        assert_ne!(name_sort("a"), name_sort("A"), "names stay case-sensitive");
        assert_eq!(name_sort("a"), name_sort("a"));
    }

    #[test]
    fn request_tokens_fit_dynamodb_and_follow_their_parts() {
        let token = request_token(&["TOOL", "create", "digest"]);
        assert_eq!(token.len(), 32, "at most 36 characters");
        assert_eq!(token, request_token(&["TOOL", "create", "digest"]));
        assert_ne!(token, request_token(&["TOOL", "createdigest"]), "parts are delimited");
    }

    #[test]
    fn a_record_at_the_next_revision_is_another_write() {
        let record = tool(Map::new());
        let first = record.to_item(1).expect("item");
        let again = record.to_item(1).expect("item");
        let next = record.to_item(2).expect("item");
        assert_eq!(first.digest, again.digest);
        assert_ne!(first.digest, next.digest);
        assert_eq!(first.item.get("revision"), Some(&AttributeValue::N("1".into())));
    }

    #[test]
    fn an_item_over_the_limit_names_the_largest_body_field() {
        let big = Map::from_iter([("blob".to_owned(), Value::String("x".repeat(MAX_ITEM_BYTES)))]);
        match tool(big).to_item(0) {
            Err(WriteError::TooLarge { field }) => assert_eq!(field, "metadata"),
            other => panic!("expected TooLarge, got {:?}", other.map(|encoded| encoded.digest)),
        }
        let fits = Map::from_iter([("blob".to_owned(), Value::String("x".repeat(MAX_ITEM_BYTES - 1024)))]);
        assert!(tool(fits).to_item(0).is_ok(), "just under the limit is stored");
    }

    fn reason(code: &str, item: Option<Item>) -> CancellationReason {
        CancellationReason::builder().code(code).set_item(item).build()
    }

    #[test]
    fn a_failed_record_condition_is_a_conflict_only_when_the_record_is_active() {
        let expect = Expect { record: 0, marker: Some(1), name: "n" };
        let active = Item::from([("pk".to_owned(), AttributeValue::S("p".into()))]);
        let mut deleted = active.clone();
        deleted.insert("deleted_at".into(), AttributeValue::S("2026-11-23T00:00:00Z".into()));
        let none = reason("None", None);
        let cases = [
            (vec![reason("ConditionalCheckFailed", Some(active)), none.clone()], "Conflict"),
            (vec![reason("ConditionalCheckFailed", Some(deleted)), none.clone()], "NotFound"),
            (vec![reason("ConditionalCheckFailed", None), none.clone()], "NotFound"),
            (vec![none.clone(), reason("ConditionalCheckFailed", None)], "NameTaken(\"n\")"),
            (vec![reason("TransactionConflict", None), none.clone()], "Conflict"),
        ];
        for (reasons, expected) in cases {
            let refusal = expect.cancelled(&reasons).map(|err| format!("{err:?}"));
            assert_eq!(refusal.as_deref(), Some(expected), "{reasons:?}");
        }
        assert!(expect.cancelled(&[none.clone(), none]).is_none(), "no condition failed: a fault");
    }
}
