//! A fair delivery pool: every endpoint owner (an account today; external applications join
//! them as owners) has at most `limit` attempts in flight at once, across every delivery worker,
//! kept as leases in the quotas table (`storage::quota::Leases`, one UpdateItem to take a place,
//! one to give it back; a worker that dies leaves a lease that expires with its attempt).
//!
//! One owner's endpoint that accepts connections and never answers holds each of its places for a
//! whole attempt; its other deliveries wait their turn (deferred, not attempted: see
//! `Deliverer::handle`) instead of filling the pool every owner shares.

use crate::owner::Owner;
use chrono::{DateTime, Utc};
use platform_data::StoreError;
use storage::quota::{Leases, Quota, QuotaFull};

/// `details.quota`-style name of the in-flight bound, in the quotas table's lease items.
pub const IN_FLIGHT_QUOTA: &str = "webhook_deliveries_in_flight";

/// The owner's lease scope: distinct per kind of owner, so ids of two kinds never share one.
fn lease_scope(owner: &Owner) -> String {
    match owner {
        Owner::Account(id) => format!("account:{id}"),
        other => other.scope(),
    }
}

/// The in-flight attempts of each owner.
#[derive(Clone)]
pub struct InFlight {
    leases: Leases,
    quota: Quota,
}

impl InFlight {
    /// At most `limit` attempts in flight per owner, leased in `leases`.
    pub fn new(leases: Leases, limit: u32) -> Self {
        Self { leases, quota: Quota { name: IN_FLIGHT_QUOTA, limit } }
    }

    /// The bound per owner.
    pub fn limit(&self) -> u32 {
        self.quota.limit
    }

    /// Takes a place for attempt `holder` of `owner` until `until`; `Err(full)` when the owner
    /// already has `limit` attempts in flight.
    pub async fn take(
        &self,
        owner: &Owner,
        holder: &str,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Result<(), QuotaFull>, StoreError> {
        self.leases
            .acquire(self.quota, &lease_scope(owner), holder, until.timestamp_millis(), now.timestamp_millis())
            .await
    }

    /// Gives the place of `holder` back (a failure is logged: the lease expires by itself).
    pub async fn give_back(&self, owner: &Owner, holder: &str) {
        if let Err(err) = self.leases.release(self.quota, &lease_scope(owner), holder).await {
            tracing::warn!(error = %err, "an in-flight delivery's place was not given back; it expires by itself");
        }
    }
}
