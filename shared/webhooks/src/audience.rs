//! Meeting events for external applications: a write of a meeting records one outbox event of
//! its organization (`meeting_outbox`, written in the meeting's own transaction with its
//! fan-out stand-in); the delivery worker fans it out to the applications linked to the
//! organization at that time, one event per type per application, each delivered to that
//! application's endpoints that want it. Who may receive is the meeting data's business
//! (`Audience`, implemented over the applications table); it is asked again before every
//! attempt, so an application unlinked or deactivated meanwhile is sent nothing.
//!
//! The fan-out writes events and deliveries whose ids derive from the outbox event, the
//! application, the type and the endpoint: a fan-out repeated after a crash (before its stand-in
//! was settled) writes the same records again rather than new ones, so a receiver that gets an
//! event twice sees the same `webhook-id` and can deduplicate it.

use crate::messages::DeliveryMessage;
use crate::owner::Owner;
use crate::publisher::{Publisher, time_ordered_id};
use crate::store::{Delivery, Endpoint, Event, Trigger};
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use platform_data::StoreError;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use uuid::Uuid;

/// The event types of meetings, for endpoints of external applications (with the two every
/// endpoint can get: `webhook.test` and `endpoint.disabled`).
pub const MEETING_EVENT_TYPES: [&str; 9] = [
    "meeting.created",
    "meeting.updated",
    "meeting.deleted",
    "transcript.ready",
    "summary.ready",
    "recording.ready",
    "meeting.ready",
    "webhook.test",
    "endpoint.disabled",
];

/// The type of an organization's outbox event (never delivered itself).
pub const MEETING_CHANGES: &str = "meeting.changes";

/// Who may receive an organization's events.
pub trait Audience: Send + Sync {
    /// Of `client_ids`, the applications that may receive events of `organization_id` now
    /// (active, granted `webhooks:manage`, and linked to it); with no organization (a test
    /// event), the active ones granted `webhooks:manage`.
    fn receiving<'a>(
        &'a self,
        client_ids: &'a [String],
        organization_id: Option<i64>,
    ) -> BoxFuture<'a, Result<HashSet<String>, StoreError>>;
}

/// The outbox of a meeting's write: its organization's event carrying the event types the write
/// means and their payload, and the stand-in that has it fanned out. Both are written in the
/// meeting's own transaction (`WebhookStore::event_items`), then the stand-in is queued.
pub fn meeting_outbox(organization_id: i64, types: &[&str], data: Value, now: DateTime<Utc>) -> (Event, Delivery) {
    let owner = Owner::Organization(organization_id);
    let event = Event {
        id: time_ordered_id(now),
        owner: owner.clone(),
        event_type: MEETING_CHANGES.to_owned(),
        timestamp: now,
        data: json!({ "types": types, "data": data }),
    };
    let stand_in = Delivery::fan_out(time_ordered_id(now), owner, event.id, MEETING_CHANGES, now);
    (event, stand_in)
}

/// A UUIDv7 at `at` whose random bits come from `parts`: the same parts give the same id.
fn derived_id(at: DateTime<Utc>, parts: &[&[u8]]) -> Uuid {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    let digest = hash.finalize();
    let mut random = [0u8; 10];
    random.copy_from_slice(&digest[..10]);
    let millis = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid()
}

/// Fans an organization's outbox event out: reads every application's endpoints (1 Query),
/// asks `audience` which of their applications may receive (1 BatchGetItem), and writes and
/// queues an event per type per application with a delivery per endpoint that wants it.
/// Returns the deliveries made.
pub async fn fan_out(
    publisher: &Publisher,
    audience: &dyn Audience,
    outbox: &Event,
    organization_id: i64,
) -> Result<usize, StoreError> {
    let types: Vec<&str> = outbox.data["types"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let data = &outbox.data["data"];
    let endpoints = publisher.store.application_endpoints().await?;
    let mut by_application: BTreeMap<String, Vec<Endpoint>> = BTreeMap::new();
    for endpoint in endpoints {
        let wanted = endpoint.spec.enabled && types.iter().any(|event_type| endpoint.spec.wants(event_type));
        if let (true, Owner::Application(client_id)) = (wanted, &endpoint.owner) {
            by_application.entry(client_id.clone()).or_default().push(endpoint);
        }
    }
    if by_application.is_empty() {
        return Ok(0);
    }
    let client_ids: Vec<String> = by_application.keys().cloned().collect();
    let receiving = audience.receiving(&client_ids, Some(organization_id)).await?;
    let at = outbox.timestamp;
    let outbox_id = outbox.id.as_bytes();
    let mut made = 0;
    for (client_id, endpoints) in by_application.iter().filter(|(client_id, _)| receiving.contains(*client_id)) {
        for event_type in &types {
            let event = Event {
                id: derived_id(at, &[outbox_id, client_id.as_bytes(), event_type.as_bytes()]),
                owner: Owner::Application(client_id.clone()),
                event_type: (*event_type).to_owned(),
                timestamp: at,
                data: data.clone(),
            };
            let deliveries: Vec<Delivery> = endpoints
                .iter()
                .filter(|endpoint| endpoint.spec.wants(event_type))
                .map(|endpoint| {
                    let id = derived_id(at, &[event.id.as_bytes(), endpoint.id.as_bytes()]);
                    Delivery::pending(id, event.owner.clone(), endpoint.id, event.id, event_type, at)
                })
                .collect();
            if deliveries.is_empty() {
                continue;
            }
            publisher.store.put_event(&event, &deliveries).await?;
            made += deliveries.len();
            let messages: Vec<DeliveryMessage> =
                deliveries.iter().map(|delivery| DeliveryMessage::of(delivery, Trigger::Scheduled)).collect();
            if let Err(err) = publisher.queue.send(&messages).await {
                tracing::warn!(error = %err, event_id = %event.id, "deliveries stored but not queued; the sweeper will queue them");
            }
        }
    }
    tracing::info!(event_id = %outbox.id, organization_id, deliveries = made, "meeting event fanned out");
    Ok(made)
}

/// Whether a delivery to an application's endpoint may still be made: the application may
/// receive the event's organization's events now (a test event names no organization).
pub async fn may_deliver(audience: &dyn Audience, client_id: &str, event: &Event) -> Result<bool, StoreError> {
    let organization_id = event.data.get("organization_id").and_then(Value::as_i64);
    let client_ids = [client_id.to_owned()];
    Ok(audience.receiving(&client_ids, organization_id).await?.contains(client_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_time_ordered_and_stable() {
        let at = DateTime::from_timestamp_millis(1_780_000_000_123).unwrap();
        let one = derived_id(at, &[b"outbox", b"client", b"meeting.ready"]);
        assert_eq!(one, derived_id(at, &[b"outbox", b"client", b"meeting.ready"]));
        assert_ne!(one, derived_id(at, &[b"outbox", b"client", b"summary.ready"]));
        // Parts are length-prefixed: moving a boundary gives another id.
        assert_ne!(derived_id(at, &[b"ab", b"c"]), derived_id(at, &[b"a", b"bc"]));
        assert_eq!(one.get_version_num(), 7);
        let (seconds, nanos) = one.get_timestamp().unwrap().to_unix();
        assert_eq!((seconds, nanos / 1_000_000), (1_780_000_000, 123));
    }

    #[test]
    fn the_outbox_event_carries_its_types_and_payload() {
        let now = Utc::now();
        let (event, stand_in) = meeting_outbox(7, &["meeting.created", "meeting.ready"], json!({"meeting_id": 1}), now);
        assert_eq!(event.owner, Owner::Organization(7));
        assert_eq!(event.data["types"], json!(["meeting.created", "meeting.ready"]));
        assert_eq!(event.data["data"]["meeting_id"], 1);
        assert!(stand_in.is_fan_out() && stand_in.event_id == event.id && stand_in.owner == event.owner);
    }
}
