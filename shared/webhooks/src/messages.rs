//! The webhook delivery queue's message: one per delivery attempt to make (the queue itself is
//! a `queues::SqsQueue`).

use crate::owner::Owner;
use crate::store::Trigger;
use platform_data::ids::WebhookEndpointId;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A queued delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryMessage {
    #[serde(flatten)]
    pub owner: Owner,
    pub delivery_id: Uuid,
    /// With the delivery's endpoint and event ids the worker reads all three in one call.
    pub endpoint_id: WebhookEndpointId,
    pub event_id: Uuid,
    pub trigger: Trigger,
    /// The sweeper's lease (see `Delivery::lease`); absent on first messages and replays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Uuid>,
}

impl DeliveryMessage {
    /// The message that (re)sends `delivery`.
    pub fn of(delivery: &crate::store::Delivery, trigger: Trigger) -> Self {
        Self {
            owner: delivery.owner.clone(),
            delivery_id: delivery.id,
            endpoint_id: delivery.endpoint_id,
            event_id: delivery.event_id,
            trigger,
            lease: None,
        }
    }
}
