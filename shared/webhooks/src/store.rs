//! Webhook storage: endpoints, events and deliveries, each in its own table, every item in its
//! account's partition (`pk = ACCOUNT#{account_id}`), so another account's id is never found.
//!
//! - `WebhookEndpointsTable`: `sk = ENDPOINT#{id}`.
//! - `WebhookEventsTable`: `sk = EVENT#{id}`; ids are UUIDv7, so the sort key orders events by
//!   time and a time window is a key range. Kept 30 days (`expires_at`, TTL).
//! - `WebhookDeliveriesTable`: `sk = DELIVERY#{id}` (UUIDv7), with the index `by-endpoint`
//!   (`endpoint_id`, `sk`) for an endpoint's deliveries and `by-event` (`event_id`, `sk`) for an
//!   event's. Kept 30 days (`expires_at`, TTL).

use crate::endpoints::EndpointSpec;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Duration as Span, Utc};
use platform_data::StoreError;
use platform_data::dynamo::{Item, batch_get, batch_write, put_request, query_all};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// How long events and deliveries are kept.
pub const RETENTION_DAYS: i64 = 30;

/// A stored endpoint (its secrets are in Secrets Manager).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    pub id: Uuid,
    pub account_id: Uuid,
    pub spec: EndpointSpec,
    /// Why the service disabled it (`410 Gone`, failing for 5 days); `None` when enabled or
    /// disabled by its owner.
    pub disabled_reason: Option<String>,
    /// Start of the current run of failures; cleared by one success.
    pub failing_since: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A published event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: Uuid,
    pub account_id: Uuid,
    pub event_type: String,
    pub timestamp: DateTime<Utc>,
    pub data: Value,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not attempted yet, or failed with a retry scheduled.
    Pending,
    Succeeded,
    /// Every scheduled attempt failed, or the endpoint is gone or disabled.
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Pending, Self::Succeeded, Self::Failed].into_iter().find(|status| status.as_str() == text)
    }
}

/// What started an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The first attempt and the retry schedule.
    Scheduled,
    /// A replay.
    Manual,
}

/// One HTTP attempt of a delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub timestamp: DateTime<Utc>,
    /// The receiver's status, 0 when no response came (network error, timeout, refused address).
    pub status_code: u16,
    /// The first `MAX_RESPONSE_BODY` bytes of the response.
    pub response_body: String,
    pub duration_ms: u64,
    pub error: Option<String>,
    pub trigger: Trigger,
}

/// One event's delivery to one endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    pub id: Uuid,
    pub account_id: Uuid,
    pub endpoint_id: Uuid,
    pub event_id: Uuid,
    pub event_type: String,
    pub status: DeliveryStatus,
    pub attempts: Vec<Attempt>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Bumped by every write; a write expecting another revision is refused, so two attempts
    /// of one delivery (a replay beside a retry) never overwrite each other's record.
    #[serde(default)]
    pub revision: u64,
}

impl Delivery {
    /// Attempts made by the schedule (replays do not use up the schedule).
    pub fn scheduled_attempts(&self) -> usize {
        self.attempts.iter().filter(|attempt| attempt.trigger == Trigger::Scheduled).count()
    }
}

#[derive(Serialize, Deserialize)]
struct EndpointItem {
    pk: String,
    sk: String,
    spec: String,
    #[serde(flatten)]
    rest: EndpointRest,
}

#[derive(Serialize, Deserialize)]
struct EndpointRest {
    id: Uuid,
    account_id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disabled_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failing_since: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

#[derive(Serialize, Deserialize)]
struct EventItem {
    pk: String,
    sk: String,
    id: Uuid,
    account_id: Uuid,
    event_type: String,
    timestamp: DateTime<Utc>,
    /// JSON text, so every value round-trips exactly.
    data: String,
    expires_at: i64,
}

#[derive(Serialize, Deserialize)]
struct DeliveryItem {
    pk: String,
    sk: String,
    expires_at: i64,
    #[serde(flatten)]
    delivery: Delivery,
}

fn partition(account_id: Uuid) -> String {
    format!("ACCOUNT#{account_id}")
}

fn key(pk: String, sk: String) -> Item {
    Item::from([("pk".to_owned(), AttributeValue::S(pk)), ("sk".to_owned(), AttributeValue::S(sk))])
}

fn endpoint_key(account_id: Uuid, id: Uuid) -> Item {
    key(partition(account_id), format!("ENDPOINT#{id}"))
}

fn event_key(account_id: Uuid, id: Uuid) -> Item {
    key(partition(account_id), format!("EVENT#{id}"))
}

fn delivery_key(account_id: Uuid, id: Uuid) -> Item {
    key(partition(account_id), format!("DELIVERY#{id}"))
}

fn expires_at(from: DateTime<Utc>) -> i64 {
    (from + Span::days(RETENTION_DAYS)).timestamp()
}

impl Endpoint {
    fn to_item(&self) -> Result<Item, StoreError> {
        let spec = serde_json::to_string(&self.spec).map_err(|err| StoreError::json("webhook JSON attribute", err))?;
        Ok(serde_dynamo::to_item(EndpointItem {
            pk: partition(self.account_id),
            sk: format!("ENDPOINT#{}", self.id),
            spec,
            rest: EndpointRest {
                id: self.id,
                account_id: self.account_id,
                disabled_reason: self.disabled_reason.clone(),
                failing_since: self.failing_since,
                created_at: self.created_at,
                updated_at: self.updated_at,
            },
        })?)
    }

    fn from_item(item: Item) -> Result<Self, StoreError> {
        let item: EndpointItem = serde_dynamo::from_item(item)?;
        let spec = serde_json::from_str(&item.spec).map_err(|err| StoreError::json("webhook JSON attribute", err))?;
        let rest = item.rest;
        Ok(Self {
            id: rest.id,
            account_id: rest.account_id,
            spec,
            disabled_reason: rest.disabled_reason,
            failing_since: rest.failing_since,
            created_at: rest.created_at,
            updated_at: rest.updated_at,
        })
    }
}

impl Event {
    fn to_item(&self) -> Result<Item, StoreError> {
        Ok(serde_dynamo::to_item(EventItem {
            pk: partition(self.account_id),
            sk: format!("EVENT#{}", self.id),
            id: self.id,
            account_id: self.account_id,
            event_type: self.event_type.clone(),
            timestamp: self.timestamp,
            data: self.data.to_string(),
            expires_at: expires_at(self.timestamp),
        })?)
    }

    fn from_item(item: Item) -> Result<Self, StoreError> {
        let item: EventItem = serde_dynamo::from_item(item)?;
        let data = serde_json::from_str(&item.data).map_err(|err| StoreError::json("webhook JSON attribute", err))?;
        Ok(Self {
            id: item.id,
            account_id: item.account_id,
            event_type: item.event_type,
            timestamp: item.timestamp,
            data,
        })
    }
}

impl Delivery {
    fn to_item(&self) -> Result<Item, StoreError> {
        Ok(serde_dynamo::to_item(DeliveryItem {
            pk: partition(self.account_id),
            sk: format!("DELIVERY#{}", self.id),
            expires_at: expires_at(self.created_at),
            delivery: self.clone(),
        })?)
    }

    fn from_item(item: Item) -> Result<Self, StoreError> {
        Ok(serde_dynamo::from_item::<_, DeliveryItem>(item)?.delivery)
    }
}

/// The three webhook tables.
#[derive(Clone)]
pub struct WebhookStore {
    db: Client,
    endpoints: String,
    events: String,
    deliveries: String,
}

/// A delivery with what sending it needs, read in one BatchGetItem.
#[derive(Debug, Clone)]
pub struct DeliveryContext {
    pub delivery: Delivery,
    pub endpoint: Option<Endpoint>,
    pub event: Option<Event>,
}

impl WebhookStore {
    /// A store over the endpoints, events and deliveries tables.
    pub fn new(db: Client, endpoints: String, events: String, deliveries: String) -> Self {
        Self { db, endpoints, events, deliveries }
    }

    /// Writes an endpoint (create or full replacement).
    pub async fn put_endpoint(&self, endpoint: &Endpoint) -> Result<(), StoreError> {
        self.db
            .put_item()
            .table_name(&self.endpoints)
            .set_item(Some(endpoint.to_item()?))
            .send()
            .await
            .map_err(|err| StoreError::dynamo("PutItem", err))?;
        Ok(())
    }

    /// Replaces an endpoint unless it changed since `expected_updated_at` (the worker's health
    /// bookkeeping must not undo an owner's edit); `false` when it changed or is gone.
    pub async fn replace_endpoint_if_unchanged(
        &self,
        endpoint: &Endpoint,
        expected_updated_at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let expected = serde_dynamo::to_attribute_value(expected_updated_at)?;
        let result = self
            .db
            .put_item()
            .table_name(&self.endpoints)
            .set_item(Some(endpoint.to_item()?))
            .condition_expression("updated_at = :expected")
            .expression_attribute_values(":expected", expected)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_conditional_check_failed_exception()) => Ok(false),
            Err(err) => Err(StoreError::dynamo("PutItem", err)),
        }
    }

    /// An endpoint of the account.
    pub async fn get_endpoint(&self, account_id: Uuid, id: Uuid) -> Result<Option<Endpoint>, StoreError> {
        let output = self
            .db
            .get_item()
            .table_name(&self.endpoints)
            .set_key(Some(endpoint_key(account_id, id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("GetItem", err))?;
        output.item.map(Endpoint::from_item).transpose()
    }

    /// Every endpoint of the account (one Query per MB).
    pub async fn list_endpoints(&self, account_id: Uuid) -> Result<Vec<Endpoint>, StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.endpoints)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", AttributeValue::S(partition(account_id)))
            .expression_attribute_values(":prefix", AttributeValue::S("ENDPOINT#".into()));
        query_all(query).await?.into_iter().map(Endpoint::from_item).collect()
    }

    /// Deletes an endpoint; `false` when there was none.
    pub async fn delete_endpoint(&self, account_id: Uuid, id: Uuid) -> Result<bool, StoreError> {
        let output = self
            .db
            .delete_item()
            .table_name(&self.endpoints)
            .set_key(Some(endpoint_key(account_id, id)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("DeleteItem", err))?;
        Ok(output.attributes.is_some_and(|old| !old.is_empty()))
    }

    /// Stores an event and its deliveries (BatchWriteItem, 25 items a call).
    pub async fn put_event(&self, event: &Event, deliveries: &[Delivery]) -> Result<(), StoreError> {
        let mut writes = vec![(self.events.clone(), event.to_item()?)];
        for delivery in deliveries {
            writes.push((self.deliveries.clone(), delivery.to_item()?));
        }
        self.write_all(writes).await
    }

    /// Stores deliveries.
    pub async fn put_deliveries(&self, deliveries: &[Delivery]) -> Result<(), StoreError> {
        let writes = deliveries
            .iter()
            .map(|delivery| Ok((self.deliveries.clone(), delivery.to_item()?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.write_all(writes).await
    }

    async fn write_all(&self, writes: Vec<(String, Item)>) -> Result<(), StoreError> {
        let requests = writes
            .into_iter()
            .map(|(table, item)| Ok((table, put_request(item)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        batch_write(&self.db, requests).await
    }

    /// An event of the account.
    pub async fn get_event(&self, account_id: Uuid, id: Uuid) -> Result<Option<Event>, StoreError> {
        let output = self
            .db
            .get_item()
            .table_name(&self.events)
            .set_key(Some(event_key(account_id, id)))
            .send()
            .await
            .map_err(|err| StoreError::dynamo("GetItem", err))?;
        output.item.map(Event::from_item).transpose()
    }

    /// The account's events created in `[since, until]`, newest first (one Query per MB). Event
    /// ids are UUIDv7, whose text starts with the creation time in milliseconds, so the window is
    /// a sort-key range.
    pub async fn list_events(
        &self,
        account_id: Uuid,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<Event>, StoreError> {
        let bound = |at: DateTime<Utc>| {
            let ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
            format!("EVENT#{:08x}-{:04x}", ms >> 16, ms & 0xffff)
        };
        let (from, to) = (bound(since), format!("{}~", bound(until)));
        let query = self
            .db
            .query()
            .table_name(&self.events)
            .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
            .expression_attribute_values(":pk", AttributeValue::S(partition(account_id)))
            .expression_attribute_values(":from", AttributeValue::S(from))
            .expression_attribute_values(":to", AttributeValue::S(to))
            .scan_index_forward(false);
        query_all(query).await?.into_iter().map(Event::from_item).collect()
    }

    /// A delivery of the account.
    pub async fn get_delivery(&self, account_id: Uuid, id: Uuid) -> Result<Option<Delivery>, StoreError> {
        let output = self
            .db
            .get_item()
            .table_name(&self.deliveries)
            .set_key(Some(delivery_key(account_id, id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("GetItem", err))?;
        output.item.map(Delivery::from_item).transpose()
    }

    /// A delivery with its endpoint and event, in one BatchGetItem over the three tables.
    pub async fn delivery_context(
        &self,
        account_id: Uuid,
        delivery_id: Uuid,
        endpoint_id: Uuid,
        event_id: Uuid,
    ) -> Result<Option<DeliveryContext>, StoreError> {
        let keys = vec![
            (self.deliveries.clone(), delivery_key(account_id, delivery_id)),
            (self.endpoints.clone(), endpoint_key(account_id, endpoint_id)),
            (self.events.clone(), event_key(account_id, event_id)),
        ];
        let mut found = batch_get(&self.db, keys, true).await?;
        let mut take = |table: &str| found.remove(table).and_then(|mut items| items.pop());
        let Some(delivery) = take(&self.deliveries).map(Delivery::from_item).transpose()? else {
            return Ok(None);
        };
        let endpoint = take(&self.endpoints).map(Endpoint::from_item).transpose()?;
        let event = take(&self.events).map(Event::from_item).transpose()?;
        Ok(Some(DeliveryContext { delivery, endpoint, event }))
    }

    /// Writes a delivery's new state if nobody wrote it since it was read (its revision is
    /// still `delivery.revision - 1`); `false` when somebody did.
    pub async fn update_delivery(&self, delivery: &Delivery) -> Result<bool, StoreError> {
        let expected = AttributeValue::N(delivery.revision.saturating_sub(1).to_string());
        let result = self
            .db
            .put_item()
            .table_name(&self.deliveries)
            .set_item(Some(delivery.to_item()?))
            .condition_expression("revision = :expected")
            .expression_attribute_values(":expected", expected)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_conditional_check_failed_exception()) => Ok(false),
            Err(err) => Err(StoreError::dynamo("PutItem", err)),
        }
    }

    /// An endpoint's deliveries, newest first (Query on `by-endpoint`, one per MB).
    pub async fn deliveries_of_endpoint(&self, endpoint_id: Uuid) -> Result<Vec<Delivery>, StoreError> {
        self.query_index("by-endpoint", "endpoint_id", endpoint_id).await
    }

    /// An event's deliveries (Query on `by-event`).
    pub async fn deliveries_of_event(&self, event_id: Uuid) -> Result<Vec<Delivery>, StoreError> {
        self.query_index("by-event", "event_id", event_id).await
    }

    async fn query_index(&self, index: &str, attribute: &str, value: Uuid) -> Result<Vec<Delivery>, StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.deliveries)
            .index_name(index)
            .key_condition_expression("#attribute = :value")
            .expression_attribute_names("#attribute", attribute)
            .expression_attribute_values(":value", AttributeValue::S(value.to_string()))
            .scan_index_forward(false);
        query_all(query).await?.into_iter().map(Delivery::from_item).collect()
    }
}
