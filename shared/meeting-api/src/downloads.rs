//! Downloads of stored recordings: presigned S3 GETs of the recordings bucket, signed in the
//! function with its own credentials (no S3 call, nothing built at init).
//!
//! `GET …/meeting/{id}/recording/file.{format}` answers 302 to one, and the recording response
//! carries one as `download_url` with its `expires_at`. The URL is valid for
//! `RECORDING_URL_TTL_SECONDS` (template parameter `RecordingUrlTtlSeconds`, 300 by default, 1 to
//! 3600), and no longer than the function's session credentials.

use chrono::{DateTime, Timelike, Utc};
use meeting_data::settings::{self, Lookup, SettingError};
use object_storage::Bucket;
use std::time::{Duration, SystemTime};

/// Default validity of a download URL, in seconds.
pub const DEFAULT_TTL_SECONDS: u32 = 300;
/// Longest validity a deployment may choose, in seconds (the template's `MaxValue`).
pub const MAX_TTL_SECONDS: u32 = 3600;

/// Presigns GETs of the recordings bucket.
#[derive(Debug, Clone)]
pub struct RecordingDownloads {
    bucket: Bucket,
    ttl: Duration,
}

/// A presigned download and when it stops working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    pub url: String,
    pub expires_at: DateTime<Utc>,
}

impl RecordingDownloads {
    /// Downloads from `bucket`, each valid for `ttl`.
    pub fn new(bucket: Bucket, ttl: Duration) -> Self {
        Self { bucket, ttl }
    }

    /// Configured from settings (`RECORDINGS_BUCKET`, `RECORDING_URL_TTL_SECONDS`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let bucket = Bucket::new(settings::required(lookup, settings::RECORDINGS_BUCKET)?, aws.config());
        let ttl = settings::positive_or(lookup, settings::RECORDING_URL_TTL_SECONDS, DEFAULT_TTL_SECONDS)?;
        if ttl > MAX_TTL_SECONDS {
            return Err(SettingError {
                name: settings::RECORDING_URL_TTL_SECONDS,
                problem: format!("must be at most {MAX_TTL_SECONDS}, not {ttl}"),
            });
        }
        Ok(Self::new(bucket, Duration::from_secs(u64::from(ttl))))
    }

    /// A URL that GETs `key` from `now` until `now + ttl`, without other credentials.
    /// SigV4 dates are whole seconds, so the signature starts at `now`'s second.
    pub async fn presign(&self, key: &str, now: DateTime<Utc>) -> Result<Download, object_storage::SigningError> {
        let signed_at = now.with_nanosecond(0).unwrap_or(now);
        let presigned = self.bucket.presign_get(key, SystemTime::from(signed_at), self.ttl).await?;
        Ok(Download { url: presigned.url, expires_at: DateTime::<Utc>::from(presigned.expires_at) })
    }
}
