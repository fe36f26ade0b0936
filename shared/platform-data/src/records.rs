//! Account-scoped, uniquely named records (agents, language models, …) and their storage.
//!
//! One table per kind of record, every item in the owning account's partition, so another
//! account's record is simply not found:
//! - record: `pk = ACCOUNT#{account_id}`, `sk = {KIND}#{id}`; the validated body is kept as JSON
//!   text (`spec`) so every value round-trips exactly;
//! - name marker: `pk = ACCOUNT#{account_id}`, `sk = NAME#{name}`, written in the same transaction
//!   as the record, which makes names unique per account atomically. Soft-deleted records keep
//!   their marker, so a restore never conflicts.

use crate::StoreError;
use crate::dynamo::{Item, batch_get, query_all};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::marker::PhantomData;
use uuid::Uuid;

/// A record body: what kind it is and the name that must be unique in its account.
pub trait RecordBody: Serialize + DeserializeOwned + Clone {
    /// The sort-key prefix of records of this kind (`AGENT`).
    const KIND: &'static str;
    /// The unique name.
    fn name(&self) -> &str;
    /// The free-text description, shown with the name where the record is referenced.
    fn description(&self) -> Option<&str>;
}

/// A stored record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<T> {
    pub id: Uuid,
    pub account_id: Uuid,
    pub spec: T,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
}

/// The item shape of a record.
#[derive(Serialize, Deserialize)]
struct RecordItem {
    pk: String,
    sk: String,
    id: Uuid,
    account_id: Uuid,
    name: String,
    spec: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deleted_at: Option<DateTime<Utc>>,
}

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("the name {0:?} is already taken in this account")]
    NameTaken(String),
    #[error("record not found")]
    NotFound,
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn partition(account_id: Uuid) -> String {
    format!("ACCOUNT#{account_id}")
}

fn record_sort<T: RecordBody>(id: Uuid) -> String {
    format!("{}#{id}", T::KIND)
}

fn name_sort(name: &str) -> String {
    format!("NAME#{name}")
}

fn key(pk: String, sk: String) -> Item {
    Item::from([("pk".to_owned(), AttributeValue::S(pk)), ("sk".to_owned(), AttributeValue::S(sk))])
}

impl<T: RecordBody> Record<T> {
    fn to_item(&self) -> Result<Item, StoreError> {
        let spec = serde_json::to_string(&self.spec)
            .map_err(|err| StoreError::Dynamo { operation: "encode", message: err.to_string() })?;
        let item = RecordItem {
            pk: partition(self.account_id),
            sk: record_sort::<T>(self.id),
            id: self.id,
            account_id: self.account_id,
            name: self.spec.name().to_owned(),
            spec,
            created_at: self.created_at,
            updated_at: self.updated_at,
            deleted_at: self.deleted_at,
        };
        Ok(serde_dynamo::to_item(item)?)
    }

    fn from_item(item: Item) -> Result<Self, StoreError> {
        let item: RecordItem = serde_dynamo::from_item(item)?;
        let spec = serde_json::from_str(&item.spec)
            .map_err(|err| StoreError::Dynamo { operation: "decode", message: err.to_string() })?;
        Ok(Self {
            id: item.id,
            account_id: item.account_id,
            spec,
            created_at: item.created_at,
            updated_at: item.updated_at,
            deleted_at: item.deleted_at,
        })
    }
}

/// Storage of one kind of record.
#[derive(Clone)]
pub struct RecordStore<T> {
    db: Client,
    table: String,
    kind: PhantomData<T>,
}

impl<T: RecordBody> RecordStore<T> {
    /// A store over the kind's table.
    pub fn new(db: Client, table: impl Into<String>) -> Self {
        Self { db, table: table.into(), kind: PhantomData }
    }

    /// Creates a record and reserves its name, atomically (one TransactWriteItems).
    pub async fn create(&self, record: &Record<T>) -> Result<(), WriteError> {
        let items = vec![
            self.put(record.to_item()?, "attribute_not_exists(pk)", None)?,
            self.put_marker(record.account_id, record.spec.name(), record.id)?,
        ];
        self.transact(items, record.spec.name(), 1).await
    }

    /// Replaces an active record as read in `previous` (its `updated_at` guards against a
    /// concurrent change); a new name is reserved and the old one released in the same transaction.
    pub async fn replace(&self, record: &Record<T>, previous: &Record<T>) -> Result<(), WriteError> {
        let condition = "attribute_exists(pk) AND attribute_not_exists(deleted_at) AND updated_at = :previous";
        let previous_at = serde_dynamo::to_attribute_value(previous.updated_at).map_err(StoreError::from)?;
        let mut items = vec![self.put(record.to_item()?, condition, Some((":previous", previous_at)))?];
        if record.spec.name() != previous.spec.name() {
            items.push(self.put_marker(record.account_id, record.spec.name(), record.id)?);
            items.push(self.delete_marker(record.account_id, previous.spec.name())?);
        }
        self.transact(items, record.spec.name(), 1).await
    }

    /// Deletes a record for good and releases its name (one TransactWriteItems); a soft-deleted
    /// or missing record is "not found".
    pub async fn delete(&self, record: &Record<T>) -> Result<(), WriteError> {
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(key(partition(record.account_id), record_sort::<T>(record.id))))
            .condition_expression("attribute_exists(pk) AND attribute_not_exists(deleted_at)")
            .build()
            .map_err(build_error)?;
        let items = vec![
            TransactWriteItem::builder().delete(delete).build(),
            self.delete_marker(record.account_id, record.spec.name())?,
        ];
        self.transact(items, record.spec.name(), usize::MAX).await
    }

    /// One record of the account, deleted or not (GetItem).
    pub async fn get(&self, account_id: Uuid, id: Uuid) -> Result<Option<Record<T>>, StoreError> {
        let output = self
            .db
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(partition(account_id), record_sort::<T>(id))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("GetItem", err))?;
        output.item.map(Record::from_item).transpose()
    }

    /// Records of the account by id (one BatchGetItem per 100 distinct ids); missing ids are
    /// skipped, repeated ids read once.
    pub async fn get_many(&self, account_id: Uuid, ids: &[Uuid]) -> Result<Vec<Record<T>>, StoreError> {
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
    pub async fn active_ids(&self, account_id: Uuid, ids: &[Uuid]) -> Result<Vec<Uuid>, StoreError> {
        let records = self.get_many(account_id, ids).await?;
        Ok(records.into_iter().filter(|record| record.deleted_at.is_none()).map(|record| record.id).collect())
    }

    /// Every record of the account, deleted ones included (one Query per MB).
    pub async fn list(&self, account_id: Uuid) -> Result<Vec<Record<T>>, StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :kind)")
            .expression_attribute_values(":pk", AttributeValue::S(partition(account_id)))
            .expression_attribute_values(":kind", AttributeValue::S(format!("{}#", T::KIND)));
        query_all(query).await?.into_iter().map(Record::from_item).collect()
    }

    /// Soft-deletes an active record (one conditional UpdateItem).
    pub async fn soft_delete(&self, account_id: Uuid, id: Uuid, now: DateTime<Utc>) -> Result<(), WriteError> {
        self.update_state(
            account_id,
            id,
            "SET deleted_at = :now, updated_at = :now",
            "attribute_exists(pk) AND attribute_not_exists(deleted_at)",
            now,
        )
        .await
    }

    /// Restores a soft-deleted record (one conditional UpdateItem); an active one is "not found".
    pub async fn restore(&self, account_id: Uuid, id: Uuid, now: DateTime<Utc>) -> Result<(), WriteError> {
        self.update_state(
            account_id,
            id,
            "REMOVE deleted_at SET updated_at = :now",
            "attribute_exists(deleted_at)",
            now,
        )
        .await
    }

    async fn update_state(
        &self,
        account_id: Uuid,
        id: Uuid,
        update: &str,
        condition: &str,
        now: DateTime<Utc>,
    ) -> Result<(), WriteError> {
        let now = serde_dynamo::to_attribute_value(now).map_err(StoreError::from)?;
        let request = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(partition(account_id), record_sort::<T>(id))))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_values(":now", now);
        match request.send().await {
            Ok(_) => Ok(()),
            Err(err)
                if err.as_service_error().is_some_and(|e| {
                    matches!(
                        e,
                        aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(_)
                    )
                }) =>
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
        value: Option<(&str, AttributeValue)>,
    ) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_values(value.map(|(name, value)| HashMap::from([(name.to_owned(), value)])))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    fn delete_marker(&self, account_id: Uuid, name: &str) -> Result<TransactWriteItem, StoreError> {
        let release = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(key(partition(account_id), name_sort(name))))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().delete(release).build())
    }

    fn put_marker(&self, account_id: Uuid, name: &str, id: Uuid) -> Result<TransactWriteItem, StoreError> {
        let mut marker = key(partition(account_id), name_sort(name));
        marker.insert("agent_id".into(), AttributeValue::S(id.to_string()));
        self.put(marker, "attribute_not_exists(pk)", None)
    }

    /// Runs a transaction; a failed condition on item `marker_index` means the name is taken,
    /// on any other item that the record changed or vanished.
    async fn transact(&self, items: Vec<TransactWriteItem>, name: &str, marker_index: usize) -> Result<(), WriteError> {
        let result = self.db.transact_write_items().set_transact_items(Some(items)).send().await;
        let Err(err) = result else { return Ok(()) };
        if let Some(
            aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(
                cancelled,
            ),
        ) = err.as_service_error()
        {
            let failed: Vec<usize> = cancelled
                .cancellation_reasons()
                .iter()
                .enumerate()
                .filter(|(_, reason)| reason.code() == Some("ConditionalCheckFailed"))
                .map(|(i, _)| i)
                .collect();
            if failed.contains(&marker_index) {
                return Err(WriteError::NameTaken(name.to_owned()));
            }
            if !failed.is_empty() {
                return Err(WriteError::NotFound);
            }
        }
        Err(StoreError::dynamo("TransactWriteItems", err).into())
    }
}

fn build_error(err: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Dynamo { operation: "build request", message: err.to_string() }
}
