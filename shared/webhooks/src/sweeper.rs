//! The sweeper: publishing stores pending deliveries, then queues them; when queueing fails (or
//! a message is lost) the stored delivery is still `pending`. On a schedule the sweeper finds
//! pending deliveries whose next attempt is overdue (`PENDING_INDEX`, never a Scan), leases
//! each one and queues it again. The lease makes the new message the only scheduled one that
//! may attempt the delivery, so a late original cannot send it twice.

use crate::messages::DeliveryMessage;
use crate::publisher::Publisher;
use crate::store::{PENDING_SHARDS, Trigger};
use aws_env::clock::Clock;
use chrono::{DateTime, Duration as Span, SubsecRound, Utc};
use futures_util::{StreamExt, stream};
use platform_data::StoreError;
use uuid::Uuid;

/// A pending delivery whose next attempt is this much overdue has lost its message. Well
/// above an attempt (15 s) and the queue's visibility timeout (2 min).
pub const OVERDUE_AFTER_MINUTES: i64 = 10;

/// An overdue delivery older than this is failed instead of queued again: its schedule (at most
/// 7 waits of 10 h with `Retry-After`) is over, so its messages keep being lost (a delivery that
/// crashes the worker ends in the dead-letter queue every time). `replay-failed` can still send it.
pub const GIVE_UP_AFTER_HOURS: i64 = 72;

/// Deliveries read (Query `Limit`) and leased per batch.
pub const SWEEP_BATCH: i32 = 100;

/// Batches per shard in one sweep; what is left waits for the next sweep.
pub const SWEEP_BATCHES_PER_SHARD: usize = 10;

/// Shards swept at once: an empty sweep takes two rounds of Queries instead of eight, over at
/// most four connections to DynamoDB (each a TLS handshake when the container's pool is cold).
pub const SWEEP_CONCURRENCY: usize = 4;

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Overdue deliveries queued again.
    pub queued: usize,
    /// Overdue deliveries older than `GIVE_UP_AFTER_HOURS`, failed for good.
    pub failed: usize,
}

/// Queues lost deliveries again.
pub struct Sweeper {
    pub publisher: Publisher,
    pub clock: Clock,
}

impl Sweeper {
    /// One sweep over every shard, `SWEEP_CONCURRENCY` shards at a time. At most
    /// `PENDING_SHARDS × SWEEP_BATCHES_PER_SHARD` Queries, one UpdateItem per overdue delivery
    /// and one SendMessageBatch per 10. Every shard is swept even when another fails; the first
    /// failure is then the answer.
    pub async fn sweep(&self) -> Result<SweepReport, StoreError> {
        let now = (self.clock)().trunc_subsecs(3);
        let shards: Vec<Result<SweepReport, StoreError>> = stream::iter(0..PENDING_SHARDS)
            .map(|shard| self.sweep_shard(shard, now))
            .buffer_unordered(SWEEP_CONCURRENCY)
            .collect()
            .await;
        let mut report = SweepReport::default();
        let mut failure = None;
        for shard in shards {
            match shard {
                Ok(shard) => {
                    report.queued += shard.queued;
                    report.failed += shard.failed;
                }
                Err(err) => failure = failure.or(Some(err)),
            }
        }
        if report != SweepReport::default() {
            tracing::warn!(queued = report.queued, failed = report.failed, "overdue webhook deliveries swept");
        }
        failure.map_or(Ok(report), Err)
    }

    /// One shard of `PENDING_INDEX`, batch after batch.
    async fn sweep_shard(&self, shard: u128, now: DateTime<Utc>) -> Result<SweepReport, StoreError> {
        let cutoff = now - Span::minutes(OVERDUE_AFTER_MINUTES);
        let too_old = now - Span::hours(GIVE_UP_AFTER_HOURS);
        let store = &self.publisher.store;
        let mut report = SweepReport::default();
        let mut resume = None;
        for _ in 0..SWEEP_BATCHES_PER_SHARD {
            let (overdue, next) = store.overdue_deliveries(shard, cutoff, SWEEP_BATCH, resume).await?;
            let mut messages = Vec::new();
            for delivery in overdue {
                if delivery.created_at().is_none_or(|created| created < too_old) {
                    if store.fail_overdue(&delivery, now).await? {
                        report.failed += 1;
                    }
                    continue;
                }
                let lease = Uuid::new_v4();
                // Refused when an attempt was recorded since the read: nothing was lost.
                if store.lease_overdue(&delivery, lease, now).await? {
                    messages.push(DeliveryMessage {
                        owner: delivery.owner.clone(),
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
            report.queued += messages.len();
            match next {
                Some(key) => resume = Some(key),
                None => break,
            }
        }
        Ok(report)
    }
}
