//! Agents and their storage.
//!
//! Keys in `AgentsTable`, all in the owning account's partition, so another account's agent is
//! simply not found:
//! - agent: `pk = ACCOUNT#{account_id}`, `sk = AGENT#{agent_id}`; the validated body is kept as
//!   JSON text (`spec`) so every value round-trips exactly;
//! - name marker: `pk = ACCOUNT#{account_id}`, `sk = NAME#{name}`, written in the same transaction
//!   as the agent, which makes names unique per account atomically. Soft-deleted agents keep their
//!   marker, so a restore never conflicts.

use crate::StoreError;
use crate::agent_spec::AgentSpec;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use uuid::Uuid;

type Item = HashMap<String, AttributeValue>;

/// A stored agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub id: Uuid,
    pub account_id: Uuid,
    pub spec: AgentSpec,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
}

/// The item shape of an agent.
#[derive(Serialize, Deserialize)]
struct AgentItem {
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
pub enum AgentWriteError {
    #[error("an agent named {0:?} already exists in this account")]
    NameTaken(String),
    #[error("agent not found")]
    NotFound,
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn partition(account_id: Uuid) -> String {
    format!("ACCOUNT#{account_id}")
}

fn agent_sort(id: Uuid) -> String {
    format!("AGENT#{id}")
}

fn name_sort(name: &str) -> String {
    format!("NAME#{name}")
}

fn key(pk: String, sk: String) -> Item {
    Item::from([("pk".to_owned(), AttributeValue::S(pk)), ("sk".to_owned(), AttributeValue::S(sk))])
}

impl Agent {
    fn to_item(&self) -> Result<Item, StoreError> {
        let spec = serde_json::to_string(&self.spec)
            .map_err(|err| StoreError::Dynamo { operation: "encode", message: err.to_string() })?;
        let item = AgentItem {
            pk: partition(self.account_id),
            sk: agent_sort(self.id),
            id: self.id,
            account_id: self.account_id,
            name: self.spec.name.clone(),
            spec,
            created_at: self.created_at,
            updated_at: self.updated_at,
            deleted_at: self.deleted_at,
        };
        Ok(serde_dynamo::to_item(item)?)
    }

    fn from_item(item: Item) -> Result<Self, StoreError> {
        let item: AgentItem = serde_dynamo::from_item(item)?;
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

/// Storage of agents.
#[derive(Clone)]
pub struct AgentStore {
    db: Client,
    table: String,
}

impl AgentStore {
    /// A store over `AgentsTable`.
    pub fn new(db: Client, table: impl Into<String>) -> Self {
        Self { db, table: table.into() }
    }

    /// Creates an agent and reserves its name, atomically (one TransactWriteItems).
    pub async fn create(&self, agent: &Agent) -> Result<(), AgentWriteError> {
        let items = vec![
            self.put(agent.to_item()?, "attribute_not_exists(pk)", None)?,
            self.put_marker(agent.account_id, &agent.spec.name, agent.id)?,
        ];
        self.transact(items, &agent.spec.name, 1).await
    }

    /// Replaces an active agent read at `previous_updated_at`; a new name is reserved and the old
    /// one released in the same transaction.
    pub async fn replace(&self, agent: &Agent, previous: &Agent) -> Result<(), AgentWriteError> {
        let condition = "attribute_exists(pk) AND attribute_not_exists(deleted_at) AND updated_at = :previous";
        let previous_at = serde_dynamo::to_attribute_value(previous.updated_at).map_err(StoreError::from)?;
        let mut items = vec![self.put(agent.to_item()?, condition, Some((":previous", previous_at)))?];
        if agent.spec.name != previous.spec.name {
            items.push(self.put_marker(agent.account_id, &agent.spec.name, agent.id)?);
            let release = Delete::builder()
                .table_name(&self.table)
                .set_key(Some(key(partition(agent.account_id), name_sort(&previous.spec.name))))
                .build()
                .map_err(build_error)?;
            items.push(TransactWriteItem::builder().delete(release).build());
        }
        self.transact(items, &agent.spec.name, 1).await
    }

    /// One agent of the account, deleted or not (GetItem).
    pub async fn get(&self, account_id: Uuid, id: Uuid) -> Result<Option<Agent>, StoreError> {
        let output = self
            .db
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(partition(account_id), agent_sort(id))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("GetItem", err))?;
        output.item.map(Agent::from_item).transpose()
    }

    /// Agents of the account by id (BatchGetItem, at most 100 ids); missing ids are skipped.
    pub async fn get_many(&self, account_id: Uuid, ids: &[Uuid]) -> Result<Vec<Agent>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys = ids.iter().map(|id| key(partition(account_id), agent_sort(*id))).collect();
        let request =
            aws_sdk_dynamodb::types::KeysAndAttributes::builder().set_keys(Some(keys)).build().map_err(build_error)?;
        let mut pending = HashMap::from([(self.table.clone(), request)]);
        let mut agents = Vec::new();
        for _ in 0..6 {
            if pending.is_empty() {
                break;
            }
            let output = self
                .db
                .batch_get_item()
                .set_request_items(Some(std::mem::take(&mut pending)))
                .send()
                .await
                .map_err(|err| StoreError::dynamo("BatchGetItem", err))?;
            for item in output.responses.unwrap_or_default().remove(&self.table).unwrap_or_default() {
                agents.push(Agent::from_item(item)?);
            }
            pending = output.unprocessed_keys.unwrap_or_default();
        }
        Ok(agents)
    }

    /// Every agent of the account, deleted ones included (one Query per MB).
    pub async fn list(&self, account_id: Uuid) -> Result<Vec<Agent>, StoreError> {
        let mut agents = Vec::new();
        let mut start_key = None;
        loop {
            let output = self
                .db
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND begins_with(sk, :agent)")
                .expression_attribute_values(":pk", AttributeValue::S(partition(account_id)))
                .expression_attribute_values(":agent", AttributeValue::S("AGENT#".into()))
                .set_exclusive_start_key(start_key)
                .send()
                .await
                .map_err(|err| StoreError::dynamo("Query", err))?;
            for item in output.items.unwrap_or_default() {
                agents.push(Agent::from_item(item)?);
            }
            match output.last_evaluated_key {
                Some(key) if !key.is_empty() => start_key = Some(key),
                _ => return Ok(agents),
            }
        }
    }

    /// Soft-deletes an active agent (one conditional UpdateItem).
    pub async fn soft_delete(&self, account_id: Uuid, id: Uuid, now: DateTime<Utc>) -> Result<(), AgentWriteError> {
        self.update_state(
            account_id,
            id,
            "SET deleted_at = :now, updated_at = :now",
            "attribute_exists(pk) AND attribute_not_exists(deleted_at)",
            now,
        )
        .await
    }

    /// Restores a soft-deleted agent (one conditional UpdateItem); an active one is "not found".
    pub async fn restore(&self, account_id: Uuid, id: Uuid, now: DateTime<Utc>) -> Result<(), AgentWriteError> {
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
    ) -> Result<(), AgentWriteError> {
        let now = serde_dynamo::to_attribute_value(now).map_err(StoreError::from)?;
        let request = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(partition(account_id), agent_sort(id))))
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
                Err(AgentWriteError::NotFound)
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

    fn put_marker(&self, account_id: Uuid, name: &str, id: Uuid) -> Result<TransactWriteItem, StoreError> {
        let mut marker = key(partition(account_id), name_sort(name));
        marker.insert("agent_id".into(), AttributeValue::S(id.to_string()));
        self.put(marker, "attribute_not_exists(pk)", None)
    }

    /// Runs a transaction; a failed condition on item `marker_index` means the name is taken,
    /// on any other item that the agent changed or vanished.
    async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
        name: &str,
        marker_index: usize,
    ) -> Result<(), AgentWriteError> {
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
                return Err(AgentWriteError::NameTaken(name.to_owned()));
            }
            if !failed.is_empty() {
                return Err(AgentWriteError::NotFound);
            }
        }
        Err(StoreError::dynamo("TransactWriteItems", err).into())
    }
}

fn build_error(err: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Dynamo { operation: "build request", message: err.to_string() }
}
