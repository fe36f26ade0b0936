//! Deliveries: `WebhookDeliveriesTable`, `sk = DELIVERY#{id}` (UUIDv7), its indexes, and the
//! sweeper's reads and writes of overdue deliveries.

use super::page::{Page, Window, sort_key_window};
use super::{Endpoint, Event, WebhookStore, delivery_key, endpoint_key, event_key, expires_at};
use crate::owner::Owner;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use platform_data::StoreError;
use platform_data::dynamo::{Item, Read, applied, batch_get, get_item, query_all};
use platform_data::ids::WebhookEndpointId;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

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

/// Attempts a delivery record keeps: the latest ones. With `MAX_RESPONSE_BODY` and
/// `MAX_ERROR` bytes each this keeps a record far below DynamoDB's 400 KB item limit however
/// many replays are made; `attempt_count` counts them all.
pub const KEPT_ATTEMPTS: usize = 20;

/// One event's delivery to one endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    pub id: Uuid,
    #[serde(flatten)]
    pub owner: Owner,
    pub endpoint_id: WebhookEndpointId,
    pub event_id: Uuid,
    pub event_type: String,
    pub status: DeliveryStatus,
    /// The latest `KEPT_ATTEMPTS` attempts, oldest first.
    pub attempts: Vec<Attempt>,
    /// Every attempt made, kept or not.
    #[serde(default)]
    pub attempt_count: u64,
    /// Attempts made by the schedule (replays do not use up the schedule).
    #[serde(default)]
    pub scheduled_attempt_count: u64,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Bumped by every write; a write expecting another revision is refused, so two attempts
    /// of one delivery (a replay beside a retry) never overwrite each other's record.
    #[serde(default)]
    pub revision: u64,
    /// Set by the sweeper when it queues the delivery again: only the scheduled message
    /// carrying this lease may attempt it, so a late original never sends it a second time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Uuid>,
}

impl Delivery {
    /// A delivery of `event_id` to `endpoint_id`, due now, not yet attempted.
    /// The delivery that stands for an event whose endpoints could not be read when it was
    /// published: stored with the event, it is the outbox's record that the event still has to
    /// be fanned out. The delivery worker (or the sweeper, when its message is lost) reads the
    /// account's endpoints then and writes the event's real deliveries (`Deliverer::fan_out`).
    /// Its endpoint id is the nil UUID, which no endpoint has; it is never listed.
    pub fn fan_out(id: Uuid, owner: Owner, event_id: Uuid, event_type: &str, now: DateTime<Utc>) -> Self {
        Self::pending(id, owner, WebhookEndpointId::from(Uuid::nil()), event_id, event_type, now)
    }

    /// Whether this stands for an event still to be fanned out (`Delivery::fan_out`).
    pub fn is_fan_out(&self) -> bool {
        self.endpoint_id.into_uuid().is_nil()
    }

    pub fn pending(
        id: Uuid,
        owner: Owner,
        endpoint_id: WebhookEndpointId,
        event_id: Uuid,
        event_type: &str,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            id,
            owner,
            endpoint_id,
            event_id,
            event_type: event_type.to_owned(),
            status: DeliveryStatus::Pending,
            attempts: Vec::new(),
            attempt_count: 0,
            scheduled_attempt_count: 0,
            next_attempt_at: Some(now),
            created_at: now,
            updated_at: now,
            revision: 0,
            lease: None,
        }
    }

    /// Attempts made by the schedule (replays do not use up the schedule).
    pub fn scheduled_attempts(&self) -> usize {
        usize::try_from(self.scheduled_attempt_count).unwrap_or(usize::MAX)
    }

    /// Adds an attempt, forgetting the oldest beyond `KEPT_ATTEMPTS`.
    pub fn add_attempt(&mut self, attempt: Attempt) {
        if attempt.trigger == Trigger::Scheduled {
            self.scheduled_attempt_count += 1;
        }
        self.attempt_count += 1;
        self.attempts.push(attempt);
        let excess = self.attempts.len().saturating_sub(KEPT_ATTEMPTS);
        self.attempts.drain(..excess);
    }

    /// Records written before the counters existed kept every attempt: count them.
    fn with_counts(mut self) -> Self {
        if self.attempt_count < self.attempts.len() as u64 {
            self.attempt_count = self.attempts.len() as u64;
            self.scheduled_attempt_count =
                self.attempts.iter().filter(|attempt| attempt.trigger == Trigger::Scheduled).count() as u64;
        }
        self
    }
}

#[derive(Serialize, Deserialize)]
struct DeliveryItem {
    pk: String,
    sk: String,
    expires_at: i64,
    /// Only while `pending`: the key of `PENDING_INDEX` (sparse), so the sweeper finds pending
    /// deliveries whose next attempt is overdue without reading anything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending_shard: Option<String>,
    /// Only while `pending`: the next attempt's time, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending_due: Option<i64>,
    /// Only while `failed`: the endpoint, the key of `FAILED_INDEX` (sparse).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failed_endpoint_id: Option<WebhookEndpointId>,
    #[serde(flatten)]
    delivery: Delivery,
}

/// Sparse index of pending deliveries: `pending_shard` (`PENDING#0` … `PENDING#7`, by delivery
/// id, so no single index partition takes every write) and `pending_due`.
pub const PENDING_INDEX: &str = "by-pending-due";

/// Partitions of `PENDING_INDEX`.
pub const PENDING_SHARDS: u128 = 8;

/// Sparse index of failed deliveries: `failed_endpoint_id` and `sk` (creation time).
pub const FAILED_INDEX: &str = "by-endpoint-failed";

fn pending_shard(id: Uuid) -> String {
    format!("PENDING#{}", id.as_u128() % PENDING_SHARDS)
}

impl Delivery {
    pub(super) fn to_item(&self) -> Result<Item, StoreError> {
        let pending = self.status == DeliveryStatus::Pending;
        Ok(serde_dynamo::to_item(DeliveryItem {
            pk: self.owner.partition(),
            sk: format!("DELIVERY#{}", self.id),
            expires_at: expires_at(self.created_at),
            pending_shard: pending.then(|| pending_shard(self.id)),
            pending_due: pending.then(|| self.next_attempt_at.unwrap_or(self.created_at).timestamp_millis()),
            failed_endpoint_id: (self.status == DeliveryStatus::Failed).then_some(self.endpoint_id),
            delivery: self.clone(),
        })?)
    }

    fn from_item(item: Item) -> Result<Self, StoreError> {
        Ok(serde_dynamo::from_item::<_, DeliveryItem>(item)?.delivery.with_counts())
    }
}

/// A delivery with what sending it needs, read in one BatchGetItem.
#[derive(Debug, Clone)]
pub struct DeliveryContext {
    pub delivery: Delivery,
    pub endpoint: Option<Endpoint>,
    pub event: Option<Event>,
}

impl WebhookStore {
    /// Stores deliveries.
    pub async fn put_deliveries(&self, deliveries: &[Delivery]) -> Result<(), StoreError> {
        let writes = deliveries
            .iter()
            .map(|delivery| Ok((self.deliveries.clone(), delivery.to_item()?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.write_all(writes).await
    }

    /// A delivery of the owner.
    pub async fn get_delivery(&self, owner: impl Into<Owner>, id: Uuid) -> Result<Option<Delivery>, StoreError> {
        let item = get_item(&self.db, &self.deliveries, delivery_key(&owner.into(), id), Read::CONSISTENT).await?;
        item.map(Delivery::from_item).transpose()
    }

    /// A delivery with its endpoint and event, in one BatchGetItem over the three tables.
    pub async fn delivery_context(
        &self,
        owner: &Owner,
        delivery_id: Uuid,
        endpoint_id: WebhookEndpointId,
        event_id: Uuid,
    ) -> Result<Option<DeliveryContext>, StoreError> {
        let keys = vec![
            (self.deliveries.clone(), delivery_key(owner, delivery_id)),
            (self.endpoints.clone(), endpoint_key(owner, endpoint_id)),
            (self.events.clone(), event_key(owner, event_id)),
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
        applied("PutItem", result)
    }

    /// A page of an endpoint's deliveries, newest first, with `status` if given, after
    /// `cursor` (a delivery id a previous page ended with): Query on `by-endpoint`, or on the
    /// sparse `FAILED_INDEX` for failed ones; see `read_page` for the calls.
    pub async fn deliveries_of_endpoint(
        &self,
        endpoint_id: WebhookEndpointId,
        status: Option<DeliveryStatus>,
        limit: usize,
        cursor: Option<Uuid>,
    ) -> Result<Page<Delivery>, StoreError> {
        let (index, attribute) = match status {
            Some(DeliveryStatus::Failed) => (FAILED_INDEX, "failed_endpoint_id"),
            _ => ("by-endpoint", "endpoint_id"),
        };
        let mut query = self
            .db
            .query()
            .table_name(&self.deliveries)
            .index_name(index)
            .expression_attribute_names("#endpoint", attribute)
            .expression_attribute_values(":endpoint", AttributeValue::S(endpoint_id.to_string()))
            .scan_index_forward(false);
        query = match cursor {
            Some(id) => query
                .key_condition_expression("#endpoint = :endpoint AND sk < :cursor")
                .expression_attribute_values(":cursor", AttributeValue::S(format!("DELIVERY#{id}"))),
            None => query.key_condition_expression("#endpoint = :endpoint"),
        };
        if let Some(status) = status.filter(|status| *status != DeliveryStatus::Failed) {
            query = query
                .filter_expression("#status = :status")
                .expression_attribute_names("#status", "status")
                .expression_attribute_values(":status", AttributeValue::S(status.as_str().to_owned()));
        }
        Page::read(query, limit, None, "DELIVERY#", Delivery::from_item).await
    }

    /// A page of an endpoint's failed deliveries created in `[since, until]`, newest first,
    /// after `cursor` (Query on the sparse `FAILED_INDEX`).
    pub async fn failed_deliveries(
        &self,
        endpoint_id: WebhookEndpointId,
        window: Window,
        limit: usize,
        cursor: Option<Uuid>,
    ) -> Result<Page<Delivery>, StoreError> {
        let Some((from, to)) = sort_key_window("DELIVERY#", window, cursor) else {
            return Ok(Page { items: Vec::new(), next: None });
        };
        let query = self
            .db
            .query()
            .table_name(&self.deliveries)
            .index_name(FAILED_INDEX)
            .key_condition_expression("failed_endpoint_id = :endpoint AND sk BETWEEN :from AND :to")
            .expression_attribute_values(":endpoint", AttributeValue::S(endpoint_id.to_string()))
            .expression_attribute_values(":from", AttributeValue::S(from))
            .expression_attribute_values(":to", AttributeValue::S(to))
            .scan_index_forward(false);
        let skip = cursor.map(|id| format!("DELIVERY#{id}"));
        Page::read(query, limit, skip.as_deref(), "DELIVERY#", Delivery::from_item).await
    }

    /// An event's deliveries to its endpoints (Query on `by-event`; a fan-out's stand-in left out).
    pub async fn deliveries_of_event(&self, event_id: Uuid) -> Result<Vec<Delivery>, StoreError> {
        let deliveries = self.query_index("by-event", "event_id", event_id).await?;
        Ok(deliveries.into_iter().filter(|delivery| !delivery.is_fan_out()).collect())
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

/// A pending delivery whose next attempt is overdue, as `PENDING_INDEX` projects it.
#[derive(Debug, Clone, PartialEq)]
pub struct OverdueDelivery {
    pub owner: Owner,
    pub id: Uuid,
    pub endpoint_id: WebhookEndpointId,
    pub event_id: Uuid,
    pub revision: u64,
}

#[derive(Deserialize)]
struct OverdueItem {
    pk: String,
    sk: String,
    endpoint_id: WebhookEndpointId,
    event_id: Uuid,
    #[serde(default)]
    revision: u64,
}

impl OverdueDelivery {
    fn from_item(item: Item) -> Result<Self, StoreError> {
        let item: OverdueItem = serde_dynamo::from_item(item)?;
        let id = |text: &str, prefix: &str| {
            text.strip_prefix(prefix)
                .and_then(|raw| Uuid::parse_str(raw).ok())
                .ok_or_else(|| StoreError::Dynamo { operation: "decode", message: format!("unexpected key {text:?}") })
        };
        Ok(Self {
            owner: Owner::from_partition(&item.pk).ok_or_else(|| StoreError::Dynamo {
                operation: "decode",
                message: format!("unexpected key {:?}", item.pk),
            })?,
            id: id(&item.sk, "DELIVERY#")?,
            endpoint_id: item.endpoint_id,
            event_id: item.event_id,
            revision: item.revision,
        })
    }
}

impl OverdueDelivery {
    /// When the delivery was created (its id is a UUIDv7).
    pub fn created_at(&self) -> Option<DateTime<Utc>> {
        let (seconds, nanos) = self.id.get_timestamp()?.to_unix();
        DateTime::from_timestamp(i64::try_from(seconds).ok()?, nanos)
    }
}

/// Where a read of `PENDING_INDEX` stopped (DynamoDB's `LastEvaluatedKey`).
pub type ResumeKey = Item;

impl WebhookStore {
    /// Up to `limit` pending deliveries of one shard whose next attempt was due before
    /// `cutoff`, oldest first (one Query on `PENDING_INDEX`), and where to resume.
    pub async fn overdue_deliveries(
        &self,
        shard: u128,
        cutoff: DateTime<Utc>,
        limit: i32,
        resume: Option<ResumeKey>,
    ) -> Result<(Vec<OverdueDelivery>, Option<ResumeKey>), StoreError> {
        let output = self
            .db
            .query()
            .table_name(&self.deliveries)
            .index_name(PENDING_INDEX)
            .key_condition_expression("pending_shard = :shard AND pending_due < :cutoff")
            .expression_attribute_values(":shard", AttributeValue::S(format!("PENDING#{shard}")))
            .expression_attribute_values(":cutoff", AttributeValue::N(cutoff.timestamp_millis().to_string()))
            .limit(limit)
            .set_exclusive_start_key(resume)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("Query", err))?;
        let overdue =
            output.items.unwrap_or_default().into_iter().map(OverdueDelivery::from_item).collect::<Result<_, _>>()?;
        Ok((overdue, output.last_evaluated_key.filter(|key| !key.is_empty())))
    }

    /// Takes an overdue delivery for a new queued message (`lease`), if it is still pending at
    /// the revision read: its next attempt becomes `now`, so it is overdue again only if that
    /// message is lost too. `false` when it changed meanwhile (an attempt was recorded).
    pub async fn lease_overdue(
        &self,
        overdue: &OverdueDelivery,
        lease: Uuid,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let at = serde_dynamo::to_attribute_value(now)?;
        let result = self
            .db
            .update_item()
            .table_name(&self.deliveries)
            .set_key(Some(delivery_key(&overdue.owner, overdue.id)))
            .update_expression("SET #next = :at, #due = :due, #lease = :lease, #updated = :at, #revision = :revision")
            .condition_expression("#revision = :expected AND #status = :pending")
            .expression_attribute_names("#next", "next_attempt_at")
            .expression_attribute_names("#due", "pending_due")
            .expression_attribute_names("#lease", "lease")
            .expression_attribute_names("#updated", "updated_at")
            .expression_attribute_names("#revision", "revision")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":at", at)
            .expression_attribute_values(":due", AttributeValue::N(now.timestamp_millis().to_string()))
            .expression_attribute_values(":lease", AttributeValue::S(lease.to_string()))
            .expression_attribute_values(":revision", AttributeValue::N((overdue.revision + 1).to_string()))
            .expression_attribute_values(":expected", AttributeValue::N(overdue.revision.to_string()))
            .expression_attribute_values(":pending", AttributeValue::S(DeliveryStatus::Pending.as_str().into()))
            .send()
            .await;
        applied("UpdateItem", result)
    }
}

impl WebhookStore {
    /// Fails an overdue delivery for good, if it is still pending at the revision read: it
    /// leaves `PENDING_INDEX` and enters `FAILED_INDEX` (so `replay-failed` can send it).
    /// `false` when it changed meanwhile.
    pub async fn fail_overdue(&self, overdue: &OverdueDelivery, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let result = self
            .db
            .update_item()
            .table_name(&self.deliveries)
            .set_key(Some(delivery_key(&overdue.owner, overdue.id)))
            .update_expression(
                "SET #status = :failed, #next = :none, #failed = :endpoint, #updated = :at, #revision = :revision \
                 REMOVE #shard, #due, #lease",
            )
            .condition_expression("#revision = :expected AND #status = :pending")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#next", "next_attempt_at")
            .expression_attribute_names("#failed", "failed_endpoint_id")
            .expression_attribute_names("#updated", "updated_at")
            .expression_attribute_names("#revision", "revision")
            .expression_attribute_names("#shard", "pending_shard")
            .expression_attribute_names("#due", "pending_due")
            .expression_attribute_names("#lease", "lease")
            .expression_attribute_values(":failed", AttributeValue::S(DeliveryStatus::Failed.as_str().into()))
            .expression_attribute_values(":none", AttributeValue::Null(true))
            .expression_attribute_values(":endpoint", AttributeValue::S(overdue.endpoint_id.to_string()))
            .expression_attribute_values(":at", serde_dynamo::to_attribute_value(now)?)
            .expression_attribute_values(":revision", AttributeValue::N((overdue.revision + 1).to_string()))
            .expression_attribute_values(":expected", AttributeValue::N(overdue.revision.to_string()))
            .expression_attribute_values(":pending", AttributeValue::S(DeliveryStatus::Pending.as_str().into()))
            .send()
            .await;
        applied("UpdateItem", result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An item's size as DynamoDB counts it (attribute names plus values), rounded up.
    fn item_size(item: &Item) -> usize {
        fn value_size(value: &AttributeValue) -> usize {
            match value {
                AttributeValue::S(text) => text.len(),
                AttributeValue::N(number) => number.len().div_ceil(2) + 1,
                AttributeValue::M(map) => 3 + map.iter().map(|(name, v)| name.len() + value_size(v) + 1).sum::<usize>(),
                AttributeValue::L(list) => 3 + list.iter().map(|v| value_size(v) + 1).sum::<usize>(),
                _ => 8,
            }
        }
        item.iter().map(|(name, value)| name.len() + value_size(value)).sum()
    }

    #[test]
    fn a_delivery_keeps_its_latest_attempts_and_stays_far_below_the_item_limit() {
        let now = Utc::now();
        let mut delivery = Delivery::pending(
            Uuid::new_v4(),
            Owner::Account(platform_data::ids::AccountId::new_v4()),
            WebhookEndpointId::new_v4(),
            Uuid::new_v4(),
            "agent.created",
            now,
        );
        // The largest attempt the worker records: a body of 1,024 three-byte characters
        // (cut to 1,024 bytes by the worker, but counted whole here) and a long error.
        let largest = |trigger| Attempt {
            timestamp: now,
            status_code: 503,
            response_body: "\u{fffd}".repeat(1024),
            duration_ms: u64::MAX,
            error: Some("e".repeat(512)),
            trigger,
        };
        for i in 0..1000 {
            delivery.add_attempt(largest(if i < 7 { Trigger::Scheduled } else { Trigger::Manual }));
            let size = item_size(&delivery.to_item().unwrap());
            assert!(size < 100 * 1024, "attempt {i}: the item is {size} bytes");
        }
        assert_eq!(delivery.attempts.len(), KEPT_ATTEMPTS);
        assert_eq!((delivery.attempt_count, delivery.scheduled_attempts()), (1000, 7));

        // A record written before the counters existed counts what it kept.
        let mut item = delivery.to_item().unwrap();
        item.remove("attempt_count");
        item.remove("scheduled_attempt_count");
        let old = Delivery::from_item(item).unwrap();
        assert_eq!((old.attempt_count, old.scheduled_attempts()), (KEPT_ATTEMPTS as u64, 0));
    }
}
