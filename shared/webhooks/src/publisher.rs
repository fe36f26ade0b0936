//! Publishing: an event is written once, with one pending delivery per matching enabled
//! endpoint, and each delivery is queued for the delivery worker.

use crate::messages::DeliveryMessage;
use crate::owner::Owner;
use crate::store::{Delivery, Endpoint, Event, Trigger, WebhookStore};
use chrono::{DateTime, Utc};
use platform_data::StoreError;
use queues::SqsQueue;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Publishes events of an account.
#[derive(Clone)]
pub struct Publisher {
    pub store: WebhookStore,
    pub queue: Arc<SqsQueue>,
    /// The accounts' endpoints as this container last read them.
    pub endpoints: EndpointCache,
}

/// The most accounts whose endpoints one container keeps (all are forgotten past it).
const CACHED_ACCOUNTS: usize = 10_000;

/// Each account's webhook endpoints as this container last read them, kept `ttl`, so that an
/// account's events do not each Query its endpoints. A change to an account's endpoints (a new
/// one, a new event filter) reaches events published by other containers within `ttl`; a
/// delivery to an endpoint deleted or disabled meanwhile is given up by the delivery worker,
/// which reads the endpoint itself. A zero `ttl` reads the endpoints for every event.
#[derive(Clone, Default)]
pub struct EndpointCache {
    ttl: chrono::Duration,
    read: Arc<Mutex<HashMap<Owner, ReadEndpoints>>>,
}

/// An account's endpoints and when they were read.
type ReadEndpoints = (DateTime<Utc>, Vec<Endpoint>);

impl EndpointCache {
    /// Endpoints kept `ttl` after they were read.
    pub fn new(ttl: std::time::Duration) -> Self {
        Self { ttl: chrono::Duration::from_std(ttl).unwrap_or_default(), read: Arc::default() }
    }

    /// The account's endpoints read less than `ttl` before `now` (the time the event is
    /// published at: an injected clock drives it in tests).
    fn fresh(&self, owner: &Owner, now: DateTime<Utc>) -> Option<Vec<Endpoint>> {
        let read = self.read.lock().ok()?;
        let (at, endpoints) = read.get(owner)?;
        (*at <= now && now - *at < self.ttl).then(|| endpoints.clone())
    }

    fn keep(&self, owner: &Owner, now: DateTime<Utc>, endpoints: &[Endpoint]) {
        if self.ttl <= chrono::Duration::zero() {
            return;
        }
        if let Ok(mut read) = self.read.lock() {
            if read.len() >= CACHED_ACCOUNTS && !read.contains_key(owner) {
                read.clear();
            }
            read.insert(owner.clone(), (now, endpoints.to_vec()));
        }
    }
}

/// An event and its deliveries ready to be written in another transaction (`Publisher::prepare`).
pub struct Prepared {
    /// The Puts of the event and of each delivery.
    pub items: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
    deliveries: Vec<Delivery>,
    event: Event,
}

/// A new event of the owner, its id ordered by `now`.
fn new_event(owner: Owner, event_type: &str, data: Value, now: DateTime<Utc>) -> Event {
    Event { id: time_ordered_id(now), owner, event_type: event_type.to_owned(), timestamp: now, data }
}

/// A pending delivery of `event` to each of `endpoints` that is enabled and wants its type.
fn pending_deliveries(event: &Event, endpoints: &[Endpoint]) -> Vec<Delivery> {
    let now = event.timestamp;
    endpoints
        .iter()
        .filter(|endpoint| endpoint.spec.enabled && endpoint.spec.wants(&event.event_type))
        .map(|endpoint| {
            Delivery::pending(time_ordered_id(now), event.owner.clone(), endpoint.id, event.id, &event.event_type, now)
        })
        .collect()
}

/// A time-ordered id (UUIDv7) for something created at `at`.
pub fn time_ordered_id(at: DateTime<Utc>) -> Uuid {
    let seconds = u64::try_from(at.timestamp()).unwrap_or(0);
    Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, seconds, at.timestamp_subsec_nanos()))
}

impl Publisher {
    /// The owner's endpoints: as this container read them less than the cache's `ttl` ago, or
    /// read now (1 Query).
    async fn endpoints(&self, owner: &Owner, now: DateTime<Utc>) -> Result<Vec<Endpoint>, StoreError> {
        if let Some(endpoints) = self.endpoints.fresh(owner, now) {
            return Ok(endpoints);
        }
        let endpoints = self.store.list_endpoints(owner).await?;
        self.endpoints.keep(owner, now, &endpoints);
        Ok(endpoints)
    }

    /// Writes the event and queues its deliveries; returns the event.
    pub async fn publish(
        &self,
        owner: impl Into<Owner>,
        event_type: &str,
        data: Value,
        now: DateTime<Utc>,
    ) -> Result<Event, StoreError> {
        let event = new_event(owner.into(), event_type, data, now);
        let deliveries = self.deliveries_of(&event).await;
        self.store.put_event(&event, &deliveries).await?;
        self.queue_deliveries(&event, &deliveries).await;
        Ok(event)
    }

    /// The event's pending deliveries, one per matching enabled endpoint; when the endpoints
    /// cannot be read, the fan-out's stand-in (`Delivery::fan_out`), so the event is still
    /// recorded and its deliveries are made once they can be read.
    async fn deliveries_of(&self, event: &Event) -> Vec<Delivery> {
        let now = event.timestamp;
        match self.endpoints(&event.owner, now).await {
            Ok(endpoints) => pending_deliveries(event, &endpoints),
            Err(err) => {
                tracing::warn!(error = %err, event_id = %event.id, event_type = %event.event_type,
                    "endpoints not read; the event is recorded and fanned out later");
                vec![Delivery::fan_out(time_ordered_id(now), event.owner.clone(), event.id, &event.event_type, now)]
            }
        }
    }

    /// Queues the stored deliveries of `event` (a failure is logged: the sweeper queues them).
    async fn queue_deliveries(&self, event: &Event, deliveries: &[Delivery]) {
        let messages: Vec<DeliveryMessage> =
            deliveries.iter().map(|delivery| DeliveryMessage::of(delivery, Trigger::Scheduled)).collect();
        if let Err(err) = self.queue.send(&messages).await {
            tracing::warn!(error = %err, event_id = %event.id, event_type = %event.event_type, "deliveries stored but not queued; the sweeper will queue them");
        }
        tracing::info!(event_id = %event.id, event_type = %event.event_type, deliveries = deliveries.len(), "event published");
    }

    /// Makes the deliveries of an event recorded with the fan-out's stand-in, now that the
    /// account's endpoints can be read (read now, not from the cache): stores and queues them.
    pub async fn fan_out(&self, event: &Event) -> Result<Vec<Delivery>, StoreError> {
        let endpoints = self.store.list_endpoints(&event.owner).await?;
        let deliveries = pending_deliveries(event, &endpoints);
        self.store.put_deliveries(&deliveries).await?;
        self.queue_deliveries(event, &deliveries).await;
        Ok(deliveries)
    }

    /// Writes the event with deliveries to `endpoints` only, and queues them.
    pub async fn publish_to(
        &self,
        owner: impl Into<Owner>,
        event_type: &str,
        data: Value,
        endpoints: &[Endpoint],
        now: DateTime<Utc>,
    ) -> Result<(Event, Vec<Delivery>), StoreError> {
        let event = new_event(owner.into(), event_type, data, now);
        let deliveries: Vec<Delivery> = endpoints
            .iter()
            .map(|endpoint| {
                Delivery::pending(time_ordered_id(now), event.owner.clone(), endpoint.id, event.id, event_type, now)
            })
            .collect();
        // Stored pending deliveries are the outbox: whatever is not queued now (SQS failing,
        // or a later batch of this write failing) the sweeper queues once it is overdue.
        self.store.put_event(&event, &deliveries).await?;
        self.queue_deliveries(&event, &deliveries).await;
        Ok((event, deliveries))
    }

    /// An event of the account, with its deliveries to the matching enabled endpoints (one
    /// Query, unless this container read them within the cache's `ttl`; when they cannot be
    /// read, the fan-out's stand-in), ready to be written in the caller's own transaction
    /// (`Prepared::items`, with the state change the event announces) and then queued
    /// (`Publisher::queue`). What is written but not queued (the process died in between) the
    /// sweeper queues once it is overdue.
    pub async fn prepare(
        &self,
        owner: impl Into<Owner>,
        event_type: &str,
        data: Value,
        now: DateTime<Utc>,
    ) -> Result<Prepared, StoreError> {
        let event = new_event(owner.into(), event_type, data, now);
        let deliveries = self.deliveries_of(&event).await;
        let items = self.store.event_items(&event, &deliveries)?;
        Ok(Prepared { items, deliveries, event })
    }

    /// Queues the deliveries of a prepared event once its transaction is written (a failure is
    /// logged: the sweeper queues them).
    pub async fn queue(&self, prepared: &Prepared) {
        self.queue_deliveries(&prepared.event, &prepared.deliveries).await;
    }

    /// Queues a manual re-send of deliveries.
    pub async fn replay(&self, deliveries: &[Delivery]) -> Result<(), StoreError> {
        let messages: Vec<DeliveryMessage> =
            deliveries.iter().map(|delivery| DeliveryMessage::of(delivery, Trigger::Manual)).collect();
        self.queue.send(&messages).await
    }
}
