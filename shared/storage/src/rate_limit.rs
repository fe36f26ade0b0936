//! Rate limiting per caller (an API key, a meeting API client): a token bucket (by default
//! capacity 200, refilling 100 per minute) kept in DynamoDB as GCRA, the token bucket's
//! single-number form. The backend's gate and the meeting API share this one limiter and its
//! table; a bucket's id says whose it is (a key id, or `client:{client_id}`).
//!
//! The bucket is one item in `RateLimitsTable`: `tat`, the theoretical arrival time in
//! milliseconds (the moment the bucket would be full again). A request is allowed when
//! `max(tat, now) + interval - now <= capacity × interval`, and then `tat` moves by one interval.
//!
//! DynamoDB calls: one conditional UpdateItem per allowed request, in one of two forms:
//! - the bucket is partly used (`tat` in the future): `tat = tat + interval`, on condition that
//!   the bucket has room (`now < tat <= now + tolerance - interval`). The increment is atomic,
//!   so concurrent requests of one key never contend, whichever container they come from;
//! - the bucket is full (`tat` in the past or absent): `tat = now + interval`, on condition that
//!   it is still full.
//!
//! The form follows what the container last saw. A container's first request of a key reads
//! the bucket along with the key (`ApiKeyStore::find`), so a new container gets the form right
//! even while other containers use the key. When the bucket turned out to be in the other state
//! (another container used it since), the failed condition returns the current item and a
//! second UpdateItem uses the other form (or the request is refused, if the bucket has no room).
//! A request this container already knows to be over the limit costs no call: `tat` only grows,
//! so the bucket can only be emptier than last seen.

use crate::{Item, Read, StoreError, get_item};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use std::collections::HashMap;
use std::future::Future;
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

impl Decision {
    /// The `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` headers every
    /// limited response carries.
    pub fn headers(&self) -> [(&'static str, String); 3] {
        [
            ("x-ratelimit-limit", self.limit.to_string()),
            ("x-ratelimit-remaining", self.remaining.to_string()),
            ("x-ratelimit-reset", self.reset_at.to_string()),
        ]
    }
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
    (allowed(limit, new_tat, now_ms), Some(new_tat))
}

/// The decision for an allowed request that moved the bucket's `tat` to `new_tat`.
fn allowed(limit: RateLimit, new_tat: i64, now_ms: i64) -> Decision {
    let remaining = (limit.tolerance_ms() - (new_tat - now_ms)) / limit.interval_ms();
    Decision {
        allowed: true,
        limit: limit.capacity,
        remaining: u32::try_from(remaining).unwrap_or(0),
        reset_at: (new_tat + 999).div_euclid(1000),
        retry_after: None,
    }
}

/// The buckets of every API key, with what this container last saw of each.
pub struct RateLimiter {
    db: Client,
    table: String,
    limit: RateLimit,
    last_seen: Mutex<HashMap<String, i64>>,
}

/// What a conditional take found.
enum Take {
    /// The request took its interval; the bucket's `tat` is now this.
    Taken(i64),
    /// The bucket was not in the state the take's form needs; this is its `tat`.
    OtherState(Option<i64>),
}
use Take::{OtherState, Taken};

/// Entries of `last_seen` kept at most; past that it starts again (only a guess is lost).
const MAX_REMEMBERED: usize = 10_000;
/// What `last_seen` keeps for a bucket known to be full: a `tat` long past.
const FULL: i64 = 0;
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
            if new_tat.is_none() {
                // Refused: the bucket's state as last seen (here, possibly just now), so that
                // this container refuses the key's next requests without a call until it refills.
                if let Some(tat) = believed {
                    self.remember(bucket, tat);
                }
                return Ok(decision);
            }
            match self.take(bucket, believed, now_ms).await? {
                Taken(tat) => {
                    self.remember(bucket, tat);
                    return Ok(allowed(self.limit, tat, now_ms));
                }
                OtherState(actual) => believed = actual,
            }
        }
        let (mut decision, _) = decide(self.limit, believed, now_ms);
        decision.allowed = false;
        decision.retry_after = Some(decision.retry_after.unwrap_or(1));
        Ok(decision)
    }

    /// Takes one request from `bucket` and, unless it is refused, answers it with `answer`.
    /// A request that only reads (`reads_only`), when this container believes the bucket has
    /// room, is answered while the take is under way: one round trip fewer; should the bucket
    /// turn out empty, the answer is dropped. The decision is `None` when the limiter failed:
    /// that is logged and the request answered, so a failing limiter cannot take the API down.
    /// The answer is `None` only for a refused request.
    pub async fn serve<T>(
        &self,
        bucket: &str,
        now_ms: i64,
        reads_only: bool,
        answer: impl Future<Output = T>,
    ) -> (Option<Decision>, Option<T>) {
        let allowed_or_logged = |decision: Result<Decision, StoreError>| match decision {
            Ok(decision) => Some(decision),
            Err(err) => {
                tracing::error!(error = %err, "rate limiter unavailable; request allowed");
                None
            }
        };
        let refused = |decision: Option<Decision>| decision.is_some_and(|decision| !decision.allowed);
        if reads_only && self.believes_allowed(bucket, now_ms) {
            let (decision, answer) = tokio::join!(self.check(bucket, now_ms), answer);
            let decision = allowed_or_logged(decision);
            return (decision, (!refused(decision)).then_some(answer));
        }
        let decision = allowed_or_logged(self.check(bucket, now_ms).await);
        if refused(decision) {
            return (decision, None);
        }
        (decision, Some(answer.await))
    }

    /// Takes one interval from the bucket in the form its `believed` state calls for.
    async fn take(&self, bucket: &str, believed: Option<i64>, now_ms: i64) -> Result<Take, StoreError> {
        let interval = self.limit.interval_ms();
        let number = |value: i64| AttributeValue::N(value.to_string());
        // Kept a minute past the latest `tat` this request can write; TTL only removes full buckets.
        let expires_at = (now_ms + self.limit.tolerance_ms()).div_euclid(1000) + 60;
        let update = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(item_key(bucket)))
            .expression_attribute_values(":now", number(now_ms))
            .expression_attribute_values(":expires", number(expires_at))
            .return_values(ReturnValue::UpdatedNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let update = match believed {
            Some(tat) if tat > now_ms => update
                .update_expression("SET tat = tat + :interval, expires_at = :expires")
                .condition_expression("tat > :now AND tat <= :latest")
                .expression_attribute_values(":interval", number(interval))
                .expression_attribute_values(":latest", number(now_ms + self.limit.tolerance_ms() - interval)),
            _ => update
                .update_expression("SET tat = :new, expires_at = :expires")
                .condition_expression("attribute_not_exists(tat) OR tat <= :now")
                .expression_attribute_values(":new", number(now_ms + interval)),
        };
        match update.send().await {
            Ok(output) => Ok(Taken(output.attributes.as_ref().and_then(read_tat).unwrap_or(now_ms + interval))),
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
                Ok(OtherState(actual))
            }
        }
    }

    /// The bucket's `tat`, for endpoints that do not return the old item on a failed condition.
    async fn read(&self, bucket: &str) -> Result<Option<i64>, StoreError> {
        let item = get_item(&self.db, &self.table, item_key(bucket), Read::CONSISTENT).await?;
        Ok(item.as_ref().and_then(read_tat))
    }

    /// Whether, by what this container last saw of `bucket`, a request at `now_ms` would be
    /// allowed; `false` when it has not seen the bucket. Other containers may have used it since,
    /// so only [`RateLimiter::check`] decides.
    pub fn believes_allowed(&self, bucket: &str, now_ms: i64) -> bool {
        self.remembered(bucket).is_some_and(|tat| decide(self.limit, Some(tat), now_ms).0.allowed)
    }

    /// Whether this container has seen `bucket`'s state, so that its next take has the form
    /// the bucket's state calls for (see [`RateLimiter::learn`]).
    pub fn knows(&self, bucket: &str) -> bool {
        self.remembered(bucket).is_some()
    }

    /// The table and key of `bucket`'s item, for a read made along with another
    /// (`ApiKeyStore::find`).
    pub fn bucket_key(&self, bucket: &str) -> (String, Item) {
        (self.table.clone(), item_key(bucket))
    }

    /// Records `bucket`'s item as read (consistently) by someone else; `None` when it has none.
    pub fn learn(&self, bucket: &str, item: Option<&Item>) {
        // No item (or no `tat`) is a full bucket, which any `tat` not in the future says too.
        self.remember(bucket, item.and_then(read_tat).unwrap_or(FULL));
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

/// The key of `bucket`'s item in `RateLimitsTable`.
fn item_key(bucket: &str) -> Item {
    Item::from([("bucket_id".to_owned(), AttributeValue::S(bucket.to_owned()))])
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
