//! Names of the environment variables the template gives the meeting functions.

/// `MeetingsTable` name.
pub const MEETINGS_TABLE: &str = "MEETINGS_TABLE";
/// `DirectoryTable` name.
pub const DIRECTORY_TABLE: &str = "DIRECTORY_TABLE";
/// `ExternalAppsTable` name.
pub const EXTERNAL_APPS_TABLE: &str = "EXTERNAL_APPS_TABLE";
/// `AccessTokensTable` name.
pub const ACCESS_TOKENS_TABLE: &str = "ACCESS_TOKENS_TABLE";
/// Secrets Manager id (name or ARN) of the hashing pepper.
pub const PEPPER_SECRET_ID: &str = "PEPPER_SECRET_ID";
/// Access token lifetime in seconds.
pub const ACCESS_TOKEN_TTL_SECONDS: &str = "ACCESS_TOKEN_TTL_SECONDS";
/// `RateLimitsTable` name (the per-client buckets share the backend's table).
pub const RATE_LIMITS_TABLE: &str = "RATE_LIMITS_TABLE";
/// Burst size of the per-client token bucket (`MeetingRateLimitCapacity`).
pub const MEETING_RATE_LIMIT_CAPACITY: &str = "MEETING_RATE_LIMIT_CAPACITY";
/// Refill rate of the per-client token bucket, per minute (`MeetingRateLimitPerMinute`).
pub const MEETING_RATE_LIMIT_PER_MINUTE: &str = "MEETING_RATE_LIMIT_PER_MINUTE";
/// Name of the private bucket of recording files (`RecordingsBucket`).
pub const RECORDINGS_BUCKET: &str = "RECORDINGS_BUCKET";
/// Seconds a recording's presigned download URL stays valid (`RecordingUrlTtlSeconds`).
pub const RECORDING_URL_TTL_SECONDS: &str = "RECORDING_URL_TTL_SECONDS";

pub use aws_env::settings::{Lookup, SettingError, number_or, positive_or, process_env, required};
