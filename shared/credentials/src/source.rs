//! Reading the pepper secret from Secrets Manager: on first use, then again after
//! [`REFRESH_INTERVAL`], so a rotation step reaches every warm container within that time
//! without a redeploy.

use crate::CredentialsError;
use crate::pepper::Peppers;
use aws_sdk_secretsmanager::Client as SecretsClient;
use aws_sdk_secretsmanager::error::DisplayErrorContext;
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant};

/// How long a container uses the peppers it read before reading the secret again. Each
/// rotation step waits this long (plus a margin) before the next; see docs/operations.md.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(300);
/// When re-reading the secret fails, the peppers read before are kept and the read is retried
/// after this long.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);

/// The pepper secret as last read, and when to read it again.
#[derive(Clone, Copy)]
struct Cached {
    peppers: &'static Peppers,
    refresh_at: Instant,
}

/// One version of the pepper secret as the operator reads it.
#[derive(Debug)]
pub struct SecretVersion {
    pub peppers: Peppers,
    /// When this version was written (Unix seconds), if Secrets Manager says.
    pub created_at: Option<i64>,
}

/// Loads the peppers from Secrets Manager on first use and re-reads them every
/// [`REFRESH_INTERVAL`]: a cold start pays one GetSecretValue, a warm request none, except
/// the first request after each interval.
pub struct PepperSource {
    client: aws_env::Lazy<SecretsClient>,
    secret_id: String,
    refresh_interval: Duration,
    cached: RwLock<Option<Cached>>,
    /// Held while the secret is read, so concurrent requests read it once.
    reading: tokio::sync::Mutex<()>,
}

impl PepperSource {
    /// A source reading the secret `secret_id` (name or ARN) with `client`.
    pub fn new(client: impl Into<aws_env::Lazy<SecretsClient>>, secret_id: impl Into<String>) -> Self {
        Self {
            client: client.into(),
            secret_id: secret_id.into(),
            refresh_interval: REFRESH_INTERVAL,
            cached: RwLock::new(None),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    /// Replaces the refresh interval (tests; `Duration::ZERO` reads the secret on every call).
    pub fn with_refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh_interval = interval;
        self
    }

    /// The peppers, read on first use and again once the refresh interval has passed. A failed
    /// first read is an error; a failed re-read keeps the peppers read before (and is logged).
    ///
    /// The peppers are returned by plain reference, so callers hold no lock and clone nothing.
    /// That reference must outlive a later re-read, so each *distinct* secret value read is kept
    /// for the process's life (leaked): a few hundred bytes per rotation step, never per read.
    pub async fn get(&self) -> Result<&Peppers, CredentialsError> {
        if let Some(fresh) = self.fresh() {
            return Ok(fresh);
        }
        let _reading = self.reading.lock().await;
        if let Some(fresh) = self.fresh() {
            return Ok(fresh);
        }
        let before = *self.cached.read().unwrap_or_else(PoisonError::into_inner);
        let (peppers, refresh_at) = match (self.read().await, before) {
            (Ok(version), Some(before)) if version.peppers.same_as(before.peppers) => {
                (before.peppers, Instant::now() + self.refresh_interval)
            }
            (Ok(version), _) => {
                let peppers: &'static Peppers = Box::leak(Box::new(version.peppers));
                (peppers, Instant::now() + self.refresh_interval)
            }
            (Err(err), Some(before)) => {
                tracing::warn!(error = %err, "re-reading the pepper secret failed; keeping the peppers read before");
                (before.peppers, Instant::now() + RETRY_AFTER_FAILURE.min(self.refresh_interval))
            }
            (Err(err), None) => return Err(err),
        };
        *self.cached.write().unwrap_or_else(PoisonError::into_inner) = Some(Cached { peppers, refresh_at });
        Ok(peppers)
    }

    fn fresh(&self) -> Option<&'static Peppers> {
        let cached = (*self.cached.read().unwrap_or_else(PoisonError::into_inner))?;
        (Instant::now() < cached.refresh_at).then_some(cached.peppers)
    }

    /// Reads the secret's current version now, bypassing the cache (operator commands).
    pub async fn read(&self) -> Result<SecretVersion, CredentialsError> {
        let output = self
            .client
            .get_secret_value()
            .secret_id(&self.secret_id)
            .send()
            .await
            .map_err(|err| CredentialsError::SecretsManager(DisplayErrorContext(err).to_string()))?;
        let value = output.secret_string().ok_or(CredentialsError::EmptyPepper)?;
        Ok(SecretVersion { peppers: Peppers::parse(value)?, created_at: output.created_date().map(|date| date.secs()) })
    }

    /// Writes `peppers` as the secret's new current version (operator commands).
    pub async fn write(&self, peppers: &Peppers) -> Result<(), CredentialsError> {
        self.client
            .put_secret_value()
            .secret_id(&self.secret_id)
            .secret_string(peppers.to_secret_string()?)
            .send()
            .await
            .map_err(|err| CredentialsError::SecretsManager(DisplayErrorContext(err).to_string()))?;
        Ok(())
    }
}
