//! Time as a dependency, so expiry can be tested without waiting.

use chrono::{DateTime, Utc};
use std::sync::Arc;

/// Returns the current time.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(Utc::now)
}
