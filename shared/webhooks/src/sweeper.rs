//! The sweeper: publishing stores pending deliveries, then queues them; when queueing fails (or
//! a message is lost) the stored delivery is still `pending`. On a schedule the sweeper finds
//! pending deliveries whose next attempt is overdue (`PENDING_INDEX`, never a Scan), leases
//! each one and queues it again. The lease makes the new message the only scheduled one that
//! may attempt the delivery, so a late original cannot send it twice.

use crate::publisher::Publisher;
use crate::queue::DeliveryMessage;
use crate::store::{PENDING_SHARDS, Trigger};
use aws_env::clock::Clock;
use chrono::{Duration as Span, SubsecRound};
use platform_data::StoreError;
use uuid::Uuid;

/// A pending delivery whose next attempt is this much overdue has lost its message. Well
/// above an attempt (15 s) and the queue's visibility timeout (2 min).
pub const OVERDUE_AFTER_MINUTES: i64 = 10;

/// Deliveries read (Query `Limit`) and leased per batch.
pub const SWEEP_BATCH: i32 = 100;

/// Batches per shard in one sweep; what is left waits for the next sweep.
pub const SWEEP_BATCHES_PER_SHARD: usize = 10;

/// Queues lost deliveries again.
pub struct Sweeper {
    pub publisher: Publisher,
    pub clock: Clock,
}

impl Sweeper {
    /// One sweep over every shard; returns how many deliveries were queued again. At most
    /// `PENDING_SHARDS × SWEEP_BATCHES_PER_SHARD` Queries, one UpdateItem per overdue delivery
    /// and one SendMessageBatch per 10.
    pub async fn sweep(&self) -> Result<usize, StoreError> {
        let now = (self.clock)().trunc_subsecs(3);
        let cutoff = now - Span::minutes(OVERDUE_AFTER_MINUTES);
        let store = &self.publisher.store;
        let mut queued = 0;
        for shard in 0..PENDING_SHARDS {
            let mut resume = None;
            for _ in 0..SWEEP_BATCHES_PER_SHARD {
                let (overdue, next) = store.overdue_deliveries(shard, cutoff, SWEEP_BATCH, resume).await?;
                let mut messages = Vec::new();
                for delivery in overdue {
                    let lease = Uuid::new_v4();
                    // Refused when an attempt was recorded since the read: nothing was lost.
                    if store.lease_overdue(&delivery, lease, now).await? {
                        messages.push(DeliveryMessage {
                            account_id: delivery.account_id,
                            delivery_id: delivery.id,
                            endpoint_id: delivery.endpoint_id,
                            event_id: delivery.event_id,
                            trigger: Trigger::Scheduled,
                            lease: Some(lease),
                        });
                    }
                }
                // If this fails the leased deliveries are overdue again after the bound.
                self.publisher.queue.send(&messages).await?;
                queued += messages.len();
                match next {
                    Some(key) => resume = Some(key),
                    None => break,
                }
            }
        }
        if queued > 0 {
            tracing::warn!(queued, "overdue webhook deliveries queued again");
        }
        Ok(queued)
    }
}
