//! Webhook storage: endpoints, events and deliveries, each in its own table, every item in its
//! owner's partition (`pk = ACCOUNT#{account_id}`, `APP#{client_id}` or `ORG#{organization_id}`:
//! `crate::owner`), so another owner's id is never found. Applications' endpoints are the one
//! exception: all in `pk = APPLICATIONS`, `sk = APP#{client_id}#ENDPOINT#{id}`, so an
//! organization's event is fanned out with one Query.
//! One module per aggregate; this one holds the store, the key scheme and the paging they share.
//!
//! - `WebhookEndpointsTable`: `sk = ENDPOINT#{id}`.
//! - `WebhookEventsTable`: `sk = EVENT#{id}`; ids are UUIDv7, so the sort key orders events by
//!   time and a time window is a key range. Kept 30 days (`expires_at`, TTL).
//! - `WebhookDeliveriesTable`: `sk = DELIVERY#{id}` (UUIDv7), with the index `by-endpoint`
//!   (`endpoint_id`, `sk`) for an endpoint's deliveries and `by-event` (`event_id`, `sk`) for an
//!   event's, and two sparse ones: `by-endpoint-failed` (`failed_endpoint_id`, `sk`; failed
//!   deliveries only) and `by-pending-due` (`pending_shard`, `pending_due`; pending deliveries
//!   only, for the sweeper). Kept 30 days (`expires_at`, TTL). A record keeps its latest
//!   `KEPT_ATTEMPTS` attempts, so it never nears the 400 KB item limit.

mod deliveries;
mod endpoints;
mod events;
mod page;

pub use deliveries::{
    Attempt, Delivery, DeliveryContext, DeliveryStatus, FAILED_INDEX, KEPT_ATTEMPTS, OverdueDelivery, PENDING_INDEX,
    PENDING_SHARDS, ResumeKey, Trigger,
};
pub use endpoints::Endpoint;
pub use events::Event;
pub use page::{MAX_PAGE_QUERIES, Page, Window};

use crate::owner::Owner;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Duration as Span, Utc};
use platform_data::StoreError;
use platform_data::dynamo::{Item, batch_write, put_request};
use platform_data::ids::WebhookEndpointId;
use uuid::Uuid;

/// How long events and deliveries are kept.
pub const RETENTION_DAYS: i64 = 30;

/// The three webhook tables.
#[derive(Clone)]
pub struct WebhookStore {
    db: Client,
    endpoints: String,
    events: String,
    deliveries: String,
    /// The per-account count of endpoints, when they have a quota.
    quota: Option<(storage::quota::Counters, storage::quota::Quota)>,
}

impl WebhookStore {
    /// A store over the endpoints, events and deliveries tables.
    pub fn new(db: Client, endpoints: String, events: String, deliveries: String) -> Self {
        Self { db, endpoints, events, deliveries, quota: None }
    }

    /// Holds each account to `quota` endpoints: `create_endpoint` counts one more (refused at
    /// the limit), `delete_endpoint` one fewer, in the same transaction (`storage::quota`).
    pub fn with_quota(mut self, counters: storage::quota::Counters, quota: storage::quota::Quota) -> Self {
        self.quota = Some((counters, quota));
        self
    }

    async fn write_all(&self, writes: Vec<(String, Item)>) -> Result<(), StoreError> {
        let requests = writes
            .into_iter()
            .map(|(table, item)| Ok((table, put_request(item)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        batch_write(&self.db, requests).await
    }
}

fn key(pk: String, sk: String) -> Item {
    Item::from([("pk".to_owned(), AttributeValue::S(pk)), ("sk".to_owned(), AttributeValue::S(sk))])
}

fn endpoint_key(owner: &Owner, id: WebhookEndpointId) -> Item {
    let (pk, prefix) = owner.endpoint_keys();
    key(pk, format!("{prefix}{id}"))
}

fn event_key(owner: &Owner, id: Uuid) -> Item {
    key(owner.partition(), format!("EVENT#{id}"))
}

fn delivery_key(owner: &Owner, id: Uuid) -> Item {
    key(owner.partition(), format!("DELIVERY#{id}"))
}

fn expires_at(from: DateTime<Utc>) -> i64 {
    (from + Span::days(RETENTION_DAYS)).timestamp()
}
