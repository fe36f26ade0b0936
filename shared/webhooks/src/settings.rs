//! The webhook settings every webhook-aware function reads (see `template.yaml`): the three
//! tables, the delivery queue, the secrets' prefix, the endpoint cache and the URL allow-list.

use crate::endpoints::UrlPolicy;
use crate::publisher::{EndpointCache, Publisher};
use crate::store::WebhookStore;
use aws_env::settings::{Lookup, SettingError, required};
use platform_data::ids::WebhookEndpointId;
use platform_data::secrets::RecordSecrets;
use queues::SqsQueue;
use std::sync::Arc;

/// `WebhookEndpointsTable` name.
pub const WEBHOOK_ENDPOINTS_TABLE: &str = "WEBHOOK_ENDPOINTS_TABLE";
/// `WebhookEventsTable` name.
pub const WEBHOOK_EVENTS_TABLE: &str = "WEBHOOK_EVENTS_TABLE";
/// `WebhookDeliveriesTable` name.
pub const WEBHOOK_DELIVERIES_TABLE: &str = "WEBHOOK_DELIVERIES_TABLE";
/// `WebhookDeliveryQueue` URL (locally its name).
pub const WEBHOOK_DELIVERY_QUEUE_URL: &str = "WEBHOOK_DELIVERY_QUEUE_URL";
/// Secrets Manager name prefix of webhook endpoint secrets.
pub const WEBHOOK_SECRET_PREFIX: &str = "WEBHOOK_SECRET_PREFIX";
/// Seconds a container keeps an owner's webhook endpoints as it read them, for the events it
/// publishes (`WebhookEndpointCacheSeconds`, default 10; 0 reads them for every event).
pub const WEBHOOK_ENDPOINT_CACHE_SECONDS: &str = "WEBHOOK_ENDPOINT_CACHE_SECONDS";
/// Hosts webhook endpoints may use despite `http` or a private address (comma-separated; empty
/// in production).
pub const WEBHOOK_ALLOWED_HOSTS: &str = "WEBHOOK_ALLOWED_HOSTS";
/// Endpoints an owner may have (default 20).
pub const QUOTA_WEBHOOK_ENDPOINTS: &str = "QUOTA_WEBHOOK_ENDPOINTS";

/// The webhook tables and delivery queue.
pub fn publisher_from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Publisher, SettingError> {
    let store = WebhookStore::new(
        aws.dynamodb(),
        required(lookup, WEBHOOK_ENDPOINTS_TABLE)?,
        required(lookup, WEBHOOK_EVENTS_TABLE)?,
        required(lookup, WEBHOOK_DELIVERIES_TABLE)?,
    );
    let queue = SqsQueue::new(aws.sqs(), required(lookup, WEBHOOK_DELIVERY_QUEUE_URL)?);
    let cache_seconds = aws_env::settings::number_or(lookup, WEBHOOK_ENDPOINT_CACHE_SECONDS, 10)?;
    let cache_seconds = u64::try_from(cache_seconds).map_err(|_| SettingError {
        name: WEBHOOK_ENDPOINT_CACHE_SECONDS,
        problem: format!("must be 0 or more, not {cache_seconds}"),
    })?;
    let endpoints = EndpointCache::new(std::time::Duration::from_secs(cache_seconds));
    Ok(Publisher { store, queue: Arc::new(queue), endpoints })
}

/// Where endpoint secrets live: `{prefix}{owner}/{endpoint_id}` (`Owner::secret_path`).
pub fn webhook_secrets(
    client: impl Into<aws_env::Lazy<aws_sdk_secretsmanager::Client>>,
    prefix: String,
) -> RecordSecrets<WebhookEndpointId> {
    RecordSecrets::new(client, prefix, "Webhook endpoint signing secrets")
}

/// The secrets of `WEBHOOK_SECRET_PREFIX`.
pub fn secrets_from_settings(
    aws: &aws_env::Clients,
    lookup: Lookup,
) -> Result<RecordSecrets<WebhookEndpointId>, SettingError> {
    Ok(webhook_secrets(aws.secrets(), required(lookup, WEBHOOK_SECRET_PREFIX)?))
}

/// The URL policy of `WEBHOOK_ALLOWED_HOSTS`.
pub fn url_policy_from_settings(lookup: Lookup) -> UrlPolicy {
    UrlPolicy::from_setting(lookup(WEBHOOK_ALLOWED_HOSTS).as_deref())
}
