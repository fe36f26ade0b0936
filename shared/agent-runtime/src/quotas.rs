//! The account quotas of runs and run streams (docs/quotas.md): a run's place among the account's
//! executing runs (an `api` run from its start, a queued or scheduled run from its worker's
//! pick-up) and among its queued runs, and a stream's place among its followed streams, each a
//! lease in `QuotasTable` (`storage::quota`) that its holder gives back and that expires if the
//! holder dies.

use crate::runs::{RunRecord, RunType};
use platform_data::ids::AccountId;
use std::sync::Arc;
use std::time::Duration;
use storage::StoreError;
use storage::quota::{Leases, Quota, QuotaFull};

/// The per-account quotas runs and run streams hold leases of: each lease is named after its
/// run (a follower's after a fresh id) and expires when its holder could no longer be running,
/// so a lease of a process that died frees itself.
#[derive(Clone)]
pub struct RunQuotas {
    pub leases: Leases,
    /// Runs executing at once: an `api` run from its start, a queued or scheduled run from its
    /// worker's pick-up, to its end.
    pub concurrent_runs: Quota,
    /// Queued and scheduled runs from their creation to their end.
    pub queued_runs: Quota,
    /// Streams following a run's recorded events.
    pub stream_followers: Quota,
}

/// Why a run or a stream did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The account is at one of its concurrency quotas.
    #[error("the account's {} quota ({}) is full", .0.quota.name, .0.quota.limit)]
    Quota(QuotaFull),
    /// The account's monthly budget is spent.
    #[error(transparent)]
    Budget(crate::usage::BudgetReached),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A place held among an account's followed streams (`RunLifecycle::follower_place`).
#[derive(Debug)]
pub struct FollowerPlace {
    pub(crate) account: AccountId,
    pub(crate) holder: String,
}

/// How long past the end its holder must reach a lease lasts: the run's deadline plus the time a
/// lost run takes to be noticed.
const LEASE_MARGIN: Duration = Duration::from_secs(120);

/// Takes and gives back places in an account's quotas (none configured: every place is free).
#[derive(Clone, Default)]
pub(crate) struct Places(Option<Arc<RunQuotas>>);

impl Places {
    pub(crate) fn new(quotas: RunQuotas) -> Self {
        Self(Some(Arc::new(quotas)))
    }

    /// Takes the place of `quota` (one of the quotas') named `holder`, for `until` from `now_ms`.
    pub(crate) async fn take(
        &self,
        quota: fn(&RunQuotas) -> Quota,
        account: AccountId,
        holder: &str,
        until: Duration,
        now_ms: i64,
    ) -> Result<(), StartError> {
        let Some(quotas) = &self.0 else { return Ok(()) };
        let expires = now_ms.saturating_add(i64::try_from((until + LEASE_MARGIN).as_millis()).unwrap_or(i64::MAX));
        let taken = quotas.leases.acquire(quota(quotas), &account.to_string(), holder, expires, now_ms).await?;
        taken.map_err(StartError::Quota)
    }

    /// Gives back the place of `quota` named `holder` (logged when it fails: the lease then
    /// expires by itself).
    pub(crate) async fn give_back(&self, quota: fn(&RunQuotas) -> Quota, account: AccountId, holder: &str) {
        let Some(quotas) = &self.0 else { return };
        let quota = quota(quotas);
        if let Err(err) = quotas.leases.release(quota, &account.to_string(), holder).await {
            tracing::warn!(quota = quota.name, holder, error = %err, "lease not released; it expires by itself");
        }
    }

    /// Gives back what an ended run held: its place among the account's executing runs and,
    /// for a queued or scheduled run, among its queued ones.
    pub(crate) async fn give_back_run(&self, run: &RunRecord) {
        let holder = run.run_id.to_string();
        self.give_back(|quotas| quotas.concurrent_runs, run.account_id, &holder).await;
        if run.run_type != RunType::Api {
            self.give_back(|quotas| quotas.queued_runs, run.account_id, &holder).await;
        }
    }
}
