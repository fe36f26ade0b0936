//! Retry pacing: exponential backoff with full jitter ("Exponential Backoff And Jitter", AWS
//! Architecture Blog). The wait before retry `k` is uniform in `[0, min(cap, base * 2^(k-1))]`;
//! the first call is never delayed. Full jitter spreads the retries of many clients that were
//! throttled together, which is what makes them succeed.

use crate::StoreError;
use std::time::Duration;

/// How long to wait between calls, and how many calls to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The largest wait before the first retry.
    pub base: Duration,
    /// The largest wait before any retry.
    pub cap: Duration,
    /// Calls made in all, the first one included.
    pub max_attempts: u32,
}

impl Backoff {
    /// For what BatchGetItem and BatchWriteItem leave unprocessed: 6 calls, waits of at most
    /// 50 ms, 100 ms, 200 ms, 400 ms, 800 ms (1.55 s in all, half that on average).
    pub const UNPROCESSED: Self =
        Self { base: Duration::from_millis(50), cap: Duration::from_secs(1), max_attempts: 6 };

    /// The longest wait before call `attempt` (0 is the first call: no wait).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        if attempt == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl(attempt - 1).unwrap_or(u32::MAX);
        self.base.checked_mul(factor).map_or(self.cap, |wait| wait.min(self.cap))
    }

    /// The wait before call `attempt` for a `random` value drawn uniformly from `u64`: uniform in
    /// `[0, ceiling(attempt)]`.
    pub fn delay(&self, attempt: u32, random: u64) -> Duration {
        let ceiling = u64::try_from(self.ceiling(attempt).as_nanos()).unwrap_or(u64::MAX);
        let scaled = (u128::from(random) * (u128::from(ceiling) + 1)) >> 64;
        Duration::from_nanos(u64::try_from(scaled).unwrap_or(ceiling))
    }

    /// Waits before call `attempt`.
    pub async fn pause(&self, attempt: u32) {
        let wait = self.delay(attempt, random_u64());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// Before call `attempt` (0 is the first) of a batch that still has `remaining` requests
    /// pending: waits as the policy says, or gives up with [`StoreError::Unprocessed`] once
    /// `max_attempts` calls were made.
    pub async fn before_call(&self, operation: &'static str, attempt: u32, remaining: usize) -> Result<(), StoreError> {
        if attempt >= self.max_attempts {
            return Err(StoreError::Unprocessed { operation, remaining, attempts: attempt });
        }
        self.pause(attempt).await;
        Ok(())
    }
}

/// A uniformly random `u64`. Without an OS random source the wait is the ceiling: still
/// bounded, merely not jittered.
fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => u64::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: Backoff = Backoff::UNPROCESSED;

    #[test]
    fn the_first_call_is_never_delayed() {
        assert_eq!(POLICY.ceiling(0), Duration::ZERO);
        assert_eq!(POLICY.delay(0, u64::MAX), Duration::ZERO);
    }

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let ceilings: Vec<u64> = (1..=7).map(|attempt| POLICY.ceiling(attempt).as_millis() as u64).collect();
        assert_eq!(ceilings, [50, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(POLICY.ceiling(u32::MAX), POLICY.cap, "no overflow for absurd attempts");
    }

    #[test]
    fn jitter_spans_zero_to_the_ceiling() {
        for attempt in 1..10 {
            let ceiling = POLICY.ceiling(attempt);
            assert_eq!(POLICY.delay(attempt, 0), Duration::ZERO);
            assert_eq!(POLICY.delay(attempt, u64::MAX), ceiling);
            let middle = POLICY.delay(attempt, u64::MAX / 2);
            let half = ceiling / 2;
            assert!(middle.abs_diff(half) <= Duration::from_nanos(1), "{middle:?} vs {half:?}");
        }
    }

    #[test]
    fn random_waits_stay_within_bounds_and_vary() {
        let waits: Vec<Duration> = (0..64).map(|_| POLICY.delay(3, random_u64())).collect();
        assert!(waits.iter().all(|wait| *wait <= POLICY.ceiling(3)));
        assert!(waits.iter().any(|wait| *wait != waits[0]), "jittered: {waits:?}");
    }

    /// The loop `batch_get` and `batch_write` run, over a batch that never shrinks or shrinks by
    /// one a call.
    async fn drain(mut remaining: usize, shrinks: bool, calls: &mut Vec<Duration>) -> Result<(), StoreError> {
        let start = tokio::time::Instant::now();
        let mut attempt = 0;
        while remaining > 0 {
            POLICY.before_call("BatchWriteItem", attempt, remaining).await?;
            calls.push(start.elapsed());
            remaining -= usize::from(shrinks);
            attempt += 1;
        }
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn unprocessed_requests_are_retried_with_pauses_then_given_up() {
        let mut calls = Vec::new();
        let result = drain(3, false, &mut calls).await;
        assert!(matches!(result, Err(StoreError::Unprocessed { remaining: 3, attempts: 6, .. })), "{result:?}");
        assert_eq!(calls.len(), 6);
        assert_eq!(calls[0], Duration::ZERO, "no pause before the first call");
        // Paused time only moves by the sleeps, so each gap is one jittered wait.
        for (attempt, pair) in (1u32..).zip(calls.windows(2)) {
            let gap = pair[1] - pair[0];
            assert!(gap <= POLICY.ceiling(attempt) + Duration::from_millis(1), "gap {attempt}: {gap:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_stops_once_everything_is_processed() {
        let mut calls = Vec::new();
        drain(2, true, &mut calls).await.expect("processed");
        assert_eq!(calls.len(), 2);
        drain(0, true, &mut calls).await.expect("nothing to send");
        assert_eq!(calls.len(), 2);
    }
}
