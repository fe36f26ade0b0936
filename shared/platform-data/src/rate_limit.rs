//! Rate limiting per API key: a token bucket (capacity 200, refilling 100 per minute) kept in
//! DynamoDB as GCRA, the token bucket's single-number form.
//!
//! The bucket is one item in `RateLimitsTable`: `tat`, the theoretical arrival time in
//! milliseconds (the moment the bucket would be full again). A request is allowed when
//! `max(tat, now) + interval - now <= capacity × interval`, and then `tat` moves by one interval.
//!
//! DynamoDB calls: one conditional UpdateItem per allowed request, conditioned on the state the
//! container last saw. When another container moved the bucket meanwhile, the failed condition
//! returns the current item and a second UpdateItem applies the decision to it. A request this
//! container already knows to be over the limit costs no call: `tat` only grows, so the bucket can
//! only be emptier than last seen.

use crate::StoreError;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use std::collections::HashMap;
use std::sync::Mutex;

/// Bucket size and refill rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub capacity: u32,
    pub per_minute: u32,
}

impl RateLimit {
    /// The spec's limit: bursts of 200, 100 per minute.
    pub const DEFAULT: RateLimit = RateLimit { capacity: 200, per_minute: 100 };

    /// The milliseconds one request takes from the bucket: at least 1, since `tat` is kept in
    /// milliseconds, so a rate above 60,000 per minute acts as 60,000 (a zero interval divided
    /// by zero on every request: `make load` found it).
    fn interval_ms(self) -> i64 {
        (60_000 / i64::from(self.per_minute.max(1))).max(1)
    }

    fn tolerance_ms(self) -> i64 {
        i64::from(self.capacity) * self.interval_ms()
    }
}

/// The outcome for one request, with what the response headers report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// `X-RateLimit-Limit`: the bucket's capacity.
    pub limit: u32,
    /// `X-RateLimit-Remaining`: requests left in the bucket after this one.
    pub remaining: u32,
    /// `X-RateLimit-Reset`: Unix time (seconds) at which the bucket is full again.
    pub reset_at: i64,
    /// `Retry-After` seconds for a refused request.
    pub retry_after: Option<i64>,
}

/// One GCRA step: the decision and, if allowed, the new `tat`.
pub fn decide(limit: RateLimit, stored_tat: Option<i64>, now_ms: i64) -> (Decision, Option<i64>) {
    let interval = limit.interval_ms();
    let tolerance = limit.tolerance_ms();
    let base = stored_tat.map_or(now_ms, |tat| tat.max(now_ms));
    let new_tat = base + interval;
    let seconds_ceil = |ms: i64| (ms + 999).div_euclid(1000);
    if new_tat - now_ms > tolerance {
        let decision = Decision {
            allowed: false,
            limit: limit.capacity,
            remaining: 0,
            reset_at: seconds_ceil(base),
            retry_after: Some(seconds_ceil(new_tat - tolerance - now_ms).max(1)),
        };
        return (decision, None);
    }
    let remaining = u32::try_from((tolerance - (new_tat - now_ms)) / interval).unwrap_or(0);
    let decision = Decision {
        allowed: true,
        limit: limit.capacity,
        remaining,
        reset_at: seconds_ceil(new_tat),
        retry_after: None,
    };
    (decision, Some(new_tat))
}

/// The buckets of every API key, with what this container last saw of each.
pub struct RateLimiter {
    db: Client,
    table: String,
    limit: RateLimit,
    last_seen: Mutex<HashMap<String, i64>>,
}

/// Entries of `last_seen` kept at most; past that it starts again (only a guess is lost).
const MAX_REMEMBERED: usize = 10_000;
/// Conditional writes tried before a contended request is refused.
const MAX_ATTEMPTS: usize = 4;

impl RateLimiter {
    /// A limiter over `RateLimitsTable`.
    pub fn new(db: Client, table: impl Into<String>, limit: RateLimit) -> Self {
        Self { db, table: table.into(), limit, last_seen: Mutex::new(HashMap::new()) }
    }

    /// The configured limit.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Takes one request from `bucket`'s allowance at `now_ms`.
    pub async fn check(&self, bucket: &str, now_ms: i64) -> Result<Decision, StoreError> {
        let mut believed = self.remembered(bucket);
        for _ in 0..MAX_ATTEMPTS {
            let (decision, new_tat) = decide(self.limit, believed, now_ms);
            let Some(new_tat) = new_tat else { return Ok(decision) };
            match self.write(bucket, believed, new_tat, now_ms).await? {
                None => {
                    self.remember(bucket, new_tat);
                    return Ok(decision);
                }
                Some(actual) => believed = actual,
            }
        }
        let (mut decision, _) = decide(self.limit, believed, now_ms);
        decision.allowed = false;
        decision.retry_after = Some(decision.retry_after.unwrap_or(1));
        Ok(decision)
    }

    /// Writes `new_tat` if the bucket is as `believed`; otherwise returns the actual `tat`.
    async fn write(
        &self,
        bucket: &str,
        believed: Option<i64>,
        new_tat: i64,
        now_ms: i64,
    ) -> Result<Option<Option<i64>>, StoreError> {
        let expires_at = new_tat.div_euclid(1000) + 60;
        let mut update = self
            .db
            .update_item()
            .table_name(&self.table)
            .key("bucket_id", AttributeValue::S(bucket.to_owned()))
            .update_expression("SET tat = :new, expires_at = :expires")
            .expression_attribute_values(":new", AttributeValue::N(new_tat.to_string()))
            .expression_attribute_values(":expires", AttributeValue::N(expires_at.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        update = match believed {
            // A bucket last seen full (or never seen) is full whenever its tat is in the past.
            Some(tat) if tat > now_ms => update
                .condition_expression("tat = :believed")
                .expression_attribute_values(":believed", AttributeValue::N(tat.to_string())),
            _ => update
                .condition_expression("attribute_not_exists(tat) OR tat <= :now")
                .expression_attribute_values(":now", AttributeValue::N(now_ms.to_string())),
        };
        match update.send().await {
            Ok(_) => Ok(None),
            Err(err) => {
                let Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(
                    failed,
                )) = err.as_service_error()
                else {
                    return Err(StoreError::dynamo("UpdateItem", err));
                };
                let actual = match failed.item() {
                    Some(item) => read_tat(item),
                    None => self.read(bucket).await?,
                };
                Ok(Some(actual))
            }
        }
    }

    /// The bucket's `tat`, for endpoints that do not return the old item on a failed condition.
    async fn read(&self, bucket: &str) -> Result<Option<i64>, StoreError> {
        let output = self
            .db
            .get_item()
            .table_name(&self.table)
            .key("bucket_id", AttributeValue::S(bucket.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("GetItem", err))?;
        Ok(output.item.as_ref().and_then(read_tat))
    }

    fn remembered(&self, bucket: &str) -> Option<i64> {
        self.last_seen.lock().ok().and_then(|seen| seen.get(bucket).copied())
    }

    fn remember(&self, bucket: &str, tat: i64) {
        if let Ok(mut seen) = self.last_seen.lock() {
            if seen.len() >= MAX_REMEMBERED {
                seen.clear();
            }
            seen.insert(bucket.to_owned(), tat);
        }
    }
}

fn read_tat(item: &HashMap<String, AttributeValue>) -> Option<i64> {
    match item.get("tat") {
        Some(AttributeValue::N(value)) => value.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: RateLimit = RateLimit::DEFAULT;

    #[test]
    fn a_full_bucket_allows_a_burst_of_capacity_then_refuses() {
        let now = 1_000_000;
        let mut tat = None;
        for expected_remaining in (0..200).rev() {
            let (decision, new_tat) = decide(LIMIT, tat, now);
            assert!(decision.allowed);
            assert_eq!(decision.remaining, expected_remaining);
            tat = new_tat;
        }
        let (refused, none) = decide(LIMIT, tat, now);
        assert!(!refused.allowed && none.is_none());
        assert_eq!(refused.retry_after, Some(1));
        assert_eq!(refused.reset_at, (now + 200 * 600) / 1000);
    }

    #[test]
    fn the_bucket_refills_100_per_minute() {
        let now = 5_000_000;
        let empty = Some(now + 200 * 600);
        assert!(!decide(LIMIT, empty, now).0.allowed);
        // After 0.6 s one request is allowed again, after a minute 100.
        assert!(decide(LIMIT, empty, now + 600).0.allowed);
        assert_eq!(decide(LIMIT, empty, now + 60_000).0.remaining, 99);
        // A long-idle bucket is full, never fuller.
        assert_eq!(decide(LIMIT, Some(0), now).0.remaining, 199);
    }

    #[test]
    fn rates_above_one_per_millisecond_act_as_one_per_millisecond() {
        let fast = RateLimit { capacity: 1_000_000, per_minute: 1_000_000 };
        let (decision, tat) = decide(fast, None, 5_000);
        assert!(decision.allowed);
        assert_eq!((decision.remaining, tat), (999_999, Some(5_001)));
    }

    proptest::proptest! {
        /// Any configured limit, stored state and clock: a decision, never a panic; a refusal
        /// stores nothing and an allowed request moves `tat` forward.
        #[test]
        fn any_limit_and_state_gives_a_decision(
            capacity in 1u32..=u32::MAX,
            per_minute in 1u32..=u32::MAX,
            stored in proptest::option::of(0i64..=4_000_000_000_000),
            now in 0i64..=4_000_000_000_000,
        ) {
            let (decision, tat) = decide(RateLimit { capacity, per_minute }, stored, now);
            proptest::prop_assert_eq!(decision.allowed, tat.is_some());
            if let Some(tat) = tat {
                proptest::prop_assert!(tat > stored.unwrap_or(now).max(now) - 1);
            }
        }
    }
}
