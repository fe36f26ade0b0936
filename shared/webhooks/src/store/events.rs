//! Events: `WebhookEventsTable`, `sk = EVENT#{id}` (UUIDv7, so a time window is a key range).

use super::page::{Page, Window, sort_key_window};
use super::{Delivery, WebhookStore, event_key, expires_at};
use crate::owner::Owner;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use platform_data::StoreError;
use platform_data::dynamo::{Item, Read, get_item};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// A published event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: Uuid,
    pub owner: Owner,
    pub event_type: String,
    pub timestamp: DateTime<Utc>,
    pub data: Value,
}

#[derive(Serialize, Deserialize)]
struct EventItem {
    pk: String,
    sk: String,
    id: Uuid,
    #[serde(flatten)]
    owner: Owner,
    event_type: String,
    timestamp: DateTime<Utc>,
    /// JSON text, so every value round-trips exactly.
    data: String,
    expires_at: i64,
}

impl Event {
    fn to_item(&self) -> Result<Item, StoreError> {
        Ok(serde_dynamo::to_item(EventItem {
            pk: self.owner.partition(),
            sk: format!("EVENT#{}", self.id),
            id: self.id,
            owner: self.owner.clone(),
            event_type: self.event_type.clone(),
            timestamp: self.timestamp,
            data: self.data.to_string(),
            expires_at: expires_at(self.timestamp),
        })?)
    }

    pub(super) fn from_item(item: Item) -> Result<Self, StoreError> {
        let item: EventItem = serde_dynamo::from_item(item)?;
        let data = serde_json::from_str(&item.data).map_err(|err| StoreError::json("webhook JSON attribute", err))?;
        Ok(Self { id: item.id, owner: item.owner, event_type: item.event_type, timestamp: item.timestamp, data })
    }
}

impl WebhookStore {
    /// Stores an event and its deliveries (BatchWriteItem, 25 items a call).
    pub async fn put_event(&self, event: &Event, deliveries: &[Delivery]) -> Result<(), StoreError> {
        let mut writes = vec![(self.events.clone(), event.to_item()?)];
        for delivery in deliveries {
            writes.push((self.deliveries.clone(), delivery.to_item()?));
        }
        self.write_all(writes).await
    }

    /// The Puts of an event and its deliveries, for a transaction of the caller's (a run's end
    /// written with its event: `Publisher::prepare`).
    pub fn event_items(
        &self,
        event: &Event,
        deliveries: &[Delivery],
    ) -> Result<Vec<aws_sdk_dynamodb::types::TransactWriteItem>, StoreError> {
        let put = |table: &String, item: Item| -> Result<aws_sdk_dynamodb::types::TransactWriteItem, StoreError> {
            let put = aws_sdk_dynamodb::types::Put::builder()
                .table_name(table)
                .set_item(Some(item))
                .build()
                .map_err(|err| StoreError::request("TransactWriteItems", err))?;
            Ok(aws_sdk_dynamodb::types::TransactWriteItem::builder().put(put).build())
        };
        let mut items = vec![put(&self.events, event.to_item()?)?];
        for delivery in deliveries {
            items.push(put(&self.deliveries, delivery.to_item()?)?);
        }
        Ok(items)
    }

    /// An event of the owner.
    pub async fn get_event(&self, owner: impl Into<Owner>, id: Uuid) -> Result<Option<Event>, StoreError> {
        let item = get_item(&self.db, &self.events, event_key(&owner.into(), id), Read::EVENTUAL).await?;
        item.map(Event::from_item).transpose()
    }

    /// A page of the account's events created in `[since, until]`, newest first, of type
    /// `event_type` if given, after `cursor` (an event id a previous page ended with). Event ids
    /// are UUIDv7, whose text starts with the creation time in milliseconds, so the window is a
    /// sort-key range; see `read_page` for the calls.
    pub async fn list_events(
        &self,
        owner: impl Into<Owner>,
        window: Window,
        event_type: Option<&str>,
        limit: usize,
        cursor: Option<Uuid>,
    ) -> Result<Page<Event>, StoreError> {
        let Some((from, to)) = sort_key_window("EVENT#", window, cursor) else {
            return Ok(Page { items: Vec::new(), next: None });
        };
        let mut query = self
            .db
            .query()
            .table_name(&self.events)
            .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
            .expression_attribute_values(":pk", AttributeValue::S(owner.into().partition()))
            .expression_attribute_values(":from", AttributeValue::S(from))
            .expression_attribute_values(":to", AttributeValue::S(to))
            .scan_index_forward(false);
        if let Some(event_type) = event_type {
            query = query
                .filter_expression("event_type = :type")
                .expression_attribute_values(":type", AttributeValue::S(event_type.to_owned()));
        }
        let skip = cursor.map(|id| format!("EVENT#{id}"));
        Page::read(query, limit, skip.as_deref(), "EVENT#", Event::from_item).await
    }
}
