//! Per-account quotas, enforced across processes in DynamoDB (`QuotasTable`, key `id`), so that
//! one tenant cannot starve the others whichever containers its requests reach.
//!
//! **Leases** bound what an account does at once (runs executing, runs queued, streams
//! followed). One item per account and quota, `id = LEASES#{quota}#{account}`, holds `held`,
//! the number of leases, and one attribute per lease, `lease:{holder}`, the epoch millisecond it
//! expires. Taking a lease is one UpdateItem (`ADD held :one`, on condition that `held < :limit`
//! and the holder has none, evaluated atomically, so two processes racing never exceed the
//! limit; it creates the item the first time); giving it back is one UpdateItem. A holder that
//! dies never gives its lease back: it expires, and the next taker that finds the set full
//! removes the expired leases (one conditional UpdateItem) and tries again. A lease lasts as
//! long as its holder may legitimately run (a run's deadline, a stream's longest follow), so an
//! expired lease is one whose holder is gone.
//!
//! **Counters** bound how many records an account keeps (agents, schedules, webhook endpoints).
//! One item per account and quota, `id = COUNT#{quota}#{account}`, holds `n`. The record's write
//! and the counter's change are one TransactWriteItems (see [`Counter`]): the increment is
//! conditional on `n < :limit`, so the count is exact under concurrency. A counter must exist
//! before it counts: an account whose counter is missing (records created before quotas) has it
//! initialized once from a tally of its records, and the write is sent again.

use crate::{Item, StoreError, n, s};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update};
use std::collections::HashMap;

/// A quota: its name (in `details.quota` of a refusal) and its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub name: &'static str,
    pub limit: u32,
}

/// Why a lease was not taken: the account holds `quota.limit` live leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaFull {
    pub quota: Quota,
    /// Seconds until the soonest live lease expires, at least 1 and at most
    /// [`MAX_RETRY_AFTER_SECONDS`]: a holder usually gives its lease back long before it expires.
    pub retry_after_seconds: i64,
}

/// The longest `Retry-After` of a full lease set.
pub const MAX_RETRY_AFTER_SECONDS: i64 = 30;

/// Attempts of one `acquire` (each after a reclaim or a lost race).
const ACQUIRE_ATTEMPTS: usize = 4;

/// Expired entries removed by one reclaim (an expression's names and values stay small).
const RECLAIM_BATCH: usize = 50;

/// The lease sets of accounts (see the module's documentation).
#[derive(Clone)]
pub struct Leases {
    db: Client,
    table: String,
}

/// The attribute of `holder`'s lease.
fn lease_attribute(holder: &str) -> String {
    format!("lease:{holder}")
}

impl Leases {
    pub fn new(db: Client, table: impl Into<String>) -> Self {
        Self { db, table: table.into() }
    }

    fn key(quota: &Quota, scope: &str) -> Item {
        Item::from([("id".to_owned(), s(format!("LEASES#{}#{scope}", quota.name)))])
    }

    /// Takes (or renews) lease `holder` of `scope`'s `quota` until `expires_at_ms`, unless the
    /// scope holds `quota.limit` other live leases at `now_ms`. One UpdateItem when there is
    /// room; a renewal, or a full set with expired leases, adds one or two.
    pub async fn acquire(
        &self,
        quota: Quota,
        scope: &str,
        holder: &str,
        expires_at_ms: i64,
        now_ms: i64,
    ) -> Result<Result<(), QuotaFull>, StoreError> {
        let mut soonest = None;
        for _ in 0..ACQUIRE_ATTEMPTS {
            let taken = self
                .update(&quota, scope)
                .update_expression("SET #holder = :expires ADD held :one")
                .condition_expression("attribute_not_exists(#holder) AND (attribute_not_exists(held) OR held < :limit)")
                .expression_attribute_names("#holder", lease_attribute(holder))
                .expression_attribute_values(":expires", n(expires_at_ms))
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":limit", n(quota.limit))
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .send()
                .await;
            let old = match taken {
                Ok(_) => return Ok(Ok(())),
                Err(err) => match err.as_service_error() {
                    Some(
                        aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(
                            failed,
                        ),
                    ) => failed.item.clone().unwrap_or_default(),
                    _ => return Err(StoreError::dynamo("UpdateItem", err)),
                },
            };
            if old.contains_key(&lease_attribute(holder)) {
                if self.renew(&quota, scope, holder, expires_at_ms).await? {
                    return Ok(Ok(()));
                }
                continue;
            }
            let leases: Vec<(&str, i64)> = old
                .iter()
                .filter_map(|(name, value)| Some((name.strip_prefix("lease:")?, value.as_n().ok()?.parse().ok()?)))
                .collect();
            let expired: Vec<(&str, i64)> =
                leases.iter().copied().filter(|(_, expires)| *expires <= now_ms).take(RECLAIM_BATCH).collect();
            if expired.is_empty() {
                soonest = leases.iter().map(|(_, expires)| *expires).min();
                break;
            }
            self.reclaim(&quota, scope, &expired).await?;
        }
        let wait_ms = soonest.map_or(1_000, |expires| expires.saturating_sub(now_ms));
        let retry_after_seconds = (wait_ms.saturating_add(999) / 1_000).clamp(1, MAX_RETRY_AFTER_SECONDS);
        Ok(Err(QuotaFull { quota, retry_after_seconds }))
    }

    fn update(
        &self,
        quota: &Quota,
        scope: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.db.update_item().table_name(&self.table).set_key(Some(Self::key(quota, scope)))
    }

    /// Moves the expiry of a lease `holder` holds; `false` when it no longer holds one.
    async fn renew(&self, quota: &Quota, scope: &str, holder: &str, expires_at_ms: i64) -> Result<bool, StoreError> {
        let renewed = self
            .update(quota, scope)
            .update_expression("SET #holder = :expires")
            .condition_expression("attribute_exists(#holder)")
            .expression_attribute_names("#holder", lease_attribute(holder))
            .expression_attribute_values(":expires", n(expires_at_ms))
            .send()
            .await;
        crate::applied("UpdateItem", renewed)
    }

    /// Removes expired leases, only if none of them was renewed since it was read.
    async fn reclaim(&self, quota: &Quota, scope: &str, expired: &[(&str, i64)]) -> Result<(), StoreError> {
        let mut names = HashMap::new();
        let mut values = HashMap::from([(":minus".to_owned(), n(-i64::try_from(expired.len()).unwrap_or(0)))]);
        let mut removals = Vec::new();
        let mut conditions = Vec::new();
        for (index, (holder, expires)) in expired.iter().enumerate() {
            names.insert(format!("#h{index}"), lease_attribute(holder));
            values.insert(format!(":e{index}"), n(expires));
            removals.push(format!("#h{index}"));
            conditions.push(format!("#h{index} = :e{index}"));
        }
        let reclaimed = self
            .update(quota, scope)
            .update_expression(format!("REMOVE {} ADD held :minus", removals.join(", ")))
            .condition_expression(conditions.join(" AND "))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        if crate::applied("UpdateItem", reclaimed)? {
            tracing::info!(quota = quota.name, scope, reclaimed = expired.len(), "expired leases reclaimed");
        }
        Ok(())
    }

    /// Gives lease `holder` back (nothing happens when it is not held).
    pub async fn release(&self, quota: Quota, scope: &str, holder: &str) -> Result<(), StoreError> {
        let released = self
            .update(&quota, scope)
            .update_expression("REMOVE #holder ADD held :minus")
            .condition_expression("attribute_exists(#holder)")
            .expression_attribute_names("#holder", lease_attribute(holder))
            .expression_attribute_values(":minus", n(-1))
            .send()
            .await;
        crate::applied("UpdateItem", released).map(|_| ())
    }

    /// The live leases of `scope`'s `quota` at `now_ms` (one consistent GetItem).
    pub async fn live(&self, quota: Quota, scope: &str, now_ms: i64) -> Result<usize, StoreError> {
        let item = crate::get_item(&self.db, &self.table, Self::key(&quota, scope), crate::Read::CONSISTENT).await?;
        Ok(item
            .unwrap_or_default()
            .iter()
            .filter(|(name, value)| {
                name.starts_with("lease:")
                    && value.as_n().ok().and_then(|n| n.parse::<i64>().ok()).is_some_and(|expires| expires > now_ms)
            })
            .count())
    }
}

/// One account's counter of one quota, changed in the same transaction as the records it counts.
#[derive(Debug, Clone)]
pub struct Counter {
    table: String,
    quota: Quota,
    scope: String,
}

/// What the counter's item in a cancelled transaction says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterRefusal {
    /// The counter does not exist yet: initialize it ([`Counters::initialize`]) and write again.
    Missing,
    /// The account has `quota.limit` records.
    Full(Quota),
}

impl Counter {
    fn key(&self) -> Item {
        Item::from([("id".to_owned(), s(format!("COUNT#{}#{}", self.quota.name, self.scope)))])
    }

    fn update(
        &self,
        expression: &str,
        condition: &str,
        values: &[(&str, AttributeValue)],
    ) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(self.key()))
            .update_expression(expression)
            .condition_expression(condition)
            .set_expression_attribute_values(Some(
                values.iter().map(|(name, value)| ((*name).to_owned(), value.clone())).collect(),
            ))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// The transaction item that counts one more record, refused at the limit.
    pub fn increment(&self) -> Result<TransactWriteItem, StoreError> {
        self.update("ADD n :one", "n < :limit", &[(":one", n(1)), (":limit", n(self.quota.limit))])
    }

    /// The transaction item that counts one record fewer.
    pub fn decrement(&self) -> Result<TransactWriteItem, StoreError> {
        self.update("ADD n :minus", "attribute_exists(n)", &[(":minus", n(-1))])
    }

    /// Why the counter's item refused a transaction, from its cancellation reason (the item as
    /// it was, returned by `ReturnValuesOnConditionCheckFailure`); `None` when it did not refuse.
    pub fn refusal(&self, reason: &aws_sdk_dynamodb::types::CancellationReason) -> Option<CounterRefusal> {
        if reason.code() != Some("ConditionalCheckFailed") {
            return None;
        }
        match reason.item().and_then(|item| item.get("n")) {
            None => Some(CounterRefusal::Missing),
            Some(_) => Some(CounterRefusal::Full(self.quota)),
        }
    }

    pub fn quota(&self) -> Quota {
        self.quota
    }
}

/// The record counters of accounts (see the module's documentation).
#[derive(Clone)]
pub struct Counters {
    db: Client,
    table: String,
}

impl Counters {
    pub fn new(db: Client, table: impl Into<String>) -> Self {
        Self { db, table: table.into() }
    }

    /// The counter of `scope`'s `quota`.
    pub fn counter(&self, quota: Quota, scope: &str) -> Counter {
        Counter { table: self.table.clone(), quota, scope: scope.to_owned() }
    }

    /// Creates `counter` at `tally` (the records counted now) unless it exists: a racing
    /// initializer counted the same records, and no counted write happens without the counter.
    pub async fn initialize(&self, counter: &Counter, tally: usize) -> Result<(), StoreError> {
        let mut item = counter.key();
        item.insert("n".to_owned(), n(tally));
        let created = self
            .db
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(id)")
            .send()
            .await;
        if crate::applied("PutItem", created)? {
            tracing::info!(quota = counter.quota.name, scope = counter.scope, tally, "quota counter initialized");
        }
        Ok(())
    }

    /// The counter's value (one consistent GetItem); `None` before it is initialized.
    pub async fn value(&self, counter: &Counter) -> Result<Option<i64>, StoreError> {
        let item = crate::get_item(&self.db, &self.table, counter.key(), crate::Read::CONSISTENT).await?;
        Ok(item.and_then(|item| item.get("n")?.as_n().ok()?.parse().ok()))
    }
}

/// What a counted write came to.
#[derive(Debug)]
pub enum Counted {
    /// Written, and counted.
    Written,
    /// Refused: the account has `quota.limit` records.
    QuotaReached(Quota),
    /// Refused by another item's condition: the cancellation reasons, in the items' order.
    Refused(Vec<aws_sdk_dynamodb::types::CancellationReason>),
}

/// How often a counted write is sent again when it collides with another transaction on the
/// counter (records of one account written at once), and the pauses between.
const COUNTER_CONTENTION: crate::Backoff = crate::Backoff {
    base: std::time::Duration::from_millis(20),
    cap: std::time::Duration::from_millis(500),
    max_attempts: 10,
};

impl Counters {
    /// Sends `items`, a transaction whose item `counter_at` changes `counter` (built by
    /// [`Counter::increment`] or [`Counter::decrement`]). A missing counter is initialized from
    /// `tally` (what the account holds now, counted once) and the write sent again; a collision
    /// with another transaction on the counter is sent again after a pause. `token`, when
    /// given, is the transaction's `ClientRequestToken` (the same write sent twice is applied
    /// once).
    pub async fn transact<F, Fut>(
        &self,
        counter: &Counter,
        items: Vec<TransactWriteItem>,
        counter_at: usize,
        token: Option<String>,
        tally: F,
    ) -> Result<Counted, StoreError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<usize, StoreError>>,
    {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
        let mut initialized = false;
        let mut attempt = 0;
        loop {
            let sent = self
                .db
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .set_client_request_token(token.clone())
                .send()
                .await;
            let Err(err) = sent else { return Ok(Counted::Written) };
            let reasons = match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
                    cancelled.cancellation_reasons().to_vec()
                }
                _ => return Err(StoreError::dynamo("TransactWriteItems", err)),
            };
            let others_refused = reasons
                .iter()
                .enumerate()
                .any(|(index, reason)| index != counter_at && reason.code() == Some("ConditionalCheckFailed"));
            if others_refused {
                return Ok(Counted::Refused(reasons));
            }
            match reasons.get(counter_at).and_then(|reason| counter.refusal(reason)) {
                Some(CounterRefusal::Full(quota)) => return Ok(Counted::QuotaReached(quota)),
                Some(CounterRefusal::Missing) if !initialized => {
                    self.initialize(counter, tally().await?).await?;
                    initialized = true;
                    continue;
                }
                _ => {}
            }
            let collided = reasons.iter().any(|reason| reason.code() == Some("TransactionConflict"));
            attempt += 1;
            if !collided || attempt >= COUNTER_CONTENTION.max_attempts {
                return Err(StoreError::dynamo("TransactWriteItems", err));
            }
            COUNTER_CONTENTION.pause(attempt).await;
        }
    }
}
