//! Managing an owner's endpoints: what the backend's `/webhooks/…` routes (an account) and the
//! meeting API's `/api/v1/external/webhooks/…` routes (an external application) both do, each
//! answering in its own style. Secrets are `whsec_…`, returned only by create and rotate, and kept
//! in Secrets Manager (one secret per endpoint: the current secret, and the previous one for
//! `ROTATION_OVERLAP_HOURS` after a rotation).
//!
//! Calls: create = [DNS lookup] + CreateSecret + 1 PutItem (1 TransactWriteItems with a quota);
//! list = 1 Query; get = 1 GetItem; replace = 1 GetItem + 1 PutItem; delete = 1 DeleteItem (1
//! TransactWriteItems with a quota) + DeleteSecret; rotate = 1 GetItem + GetSecretValue +
//! PutSecretValue; test = 1 GetItem + 1 BatchWriteItem + 1 SendMessageBatch; deliveries = 1
//! GetItem + 1 Query with `Limit` (at most `MAX_PAGE_QUERIES`); replay = 2 GetItem + 1
//! SendMessageBatch.

use crate::delivery::EndpointSecrets;
use crate::endpoints::{EndpointSpec, UrlPolicy, parse_endpoint};
use crate::owner::Owner;
use crate::publisher::Publisher;
use crate::signing::new_secret;
use crate::store::{Delivery, DeliveryStatus, Endpoint, Event, Page, WebhookStore};
use chrono::{DateTime, Duration as Span, Utc};
use platform_data::StoreError;
use platform_data::ids::WebhookEndpointId;
use platform_data::secrets::RecordSecrets;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use uuid::Uuid;

/// How long the previous secret keeps signing after a rotation.
pub const ROTATION_OVERLAP_HOURS: i64 = 24;

/// Why a management action was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    /// The owner has no such record (`"endpoint"`, `"delivery"`).
    #[error("no such {0}")]
    NotFound(&'static str),
    /// The body has wrong JSON types: field → problem.
    #[error("malformed body")]
    Malformed(BTreeMap<String, String>),
    /// The body breaks a rule: field → problem.
    #[error("invalid body")]
    Invalid(BTreeMap<String, String>),
    #[error("{0}")]
    Conflict(&'static str),
    #[error("quota {} reached", .0.name)]
    QuotaReached(storage::quota::Quota),
    #[error(transparent)]
    Store(#[from] StoreError),
}

const DISABLED: &str = "The endpoint is disabled; enable it first.";

/// An owner's endpoints, their secrets and deliveries.
#[derive(Clone)]
pub struct Management {
    pub publisher: Publisher,
    pub secrets: RecordSecrets<WebhookEndpointId>,
    pub policy: UrlPolicy,
    /// The event types endpoints may subscribe to.
    pub event_types: &'static [&'static str],
}

/// A new secret and when the previous one stops signing.
pub struct Rotated {
    pub secret: String,
    pub previous_expires_at: DateTime<Utc>,
}

impl Management {
    fn store(&self) -> &WebhookStore {
        &self.publisher.store
    }

    /// Validates a body (create and replace), then checks where its host resolves (unless allowed).
    pub async fn parse(&self, body: &[u8]) -> Result<EndpointSpec, ManageError> {
        let spec = parse_endpoint(body, &self.policy, self.event_types).map_err(|(types, fields)| {
            if types { ManageError::Malformed(fields) } else { ManageError::Invalid(fields) }
        })?;
        if let Ok(url) = url::Url::parse(&spec.url)
            && let Err(issue) = self.policy.check_resolved(&url).await
        {
            return Err(ManageError::Invalid(BTreeMap::from([("url".to_owned(), issue.to_owned())])));
        }
        Ok(spec)
    }

    /// A body that changes only the fields it names: merged over `endpoint`'s, then parsed
    /// whole. A body that is not a JSON object is passed on for `parse` to refuse.
    pub fn merged(endpoint: &Endpoint, body: &[u8]) -> Vec<u8> {
        let Ok(Value::Object(changes)) = serde_json::from_slice::<Value>(body) else { return body.to_vec() };
        let spec = &endpoint.spec;
        let mut whole = json!({
            "url": spec.url,
            "description": spec.description,
            "event_types": spec.event_types,
            "metadata": spec.metadata,
            "enabled": spec.enabled,
        });
        if let Value::Object(fields) = &mut whole {
            fields.extend(changes);
        }
        whole.to_string().into_bytes()
    }

    /// Creates an endpoint from `spec`; returns it and its secret (shown once).
    pub async fn create(
        &self,
        owner: &Owner,
        spec: EndpointSpec,
        now: DateTime<Utc>,
    ) -> Result<(Endpoint, String), ManageError> {
        let endpoint = Endpoint {
            id: WebhookEndpointId::new_v4(),
            owner: owner.clone(),
            spec,
            disabled_reason: None,
            failing_since: None,
            timeouts_in_a_row: 0,
            created_at: now,
            updated_at: now,
        };
        let secret = new_secret();
        let stored = EndpointSecrets { current: secret.clone(), previous: None, previous_expires_at: None };
        self.put_secrets(&endpoint, &stored).await?;
        if let Err(quota) = self.store().create_endpoint(&endpoint).await? {
            self.secrets.remove(owner.secret_path(), endpoint.id).await?;
            return Err(ManageError::QuotaReached(quota));
        }
        tracing::info!(endpoint_id = %endpoint.id, owner = %owner.scope(), "webhook endpoint created");
        Ok((endpoint, secret))
    }

    /// Replaces an endpoint's fields by `spec`; re-enabling starts afresh.
    pub async fn replace(
        &self,
        previous: Endpoint,
        spec: EndpointSpec,
        now: DateTime<Utc>,
    ) -> Result<Endpoint, ManageError> {
        let reenabled = spec.enabled && !previous.spec.enabled;
        let previous_updated_at = previous.updated_at;
        let endpoint = Endpoint {
            spec,
            // Re-enabling starts afresh: no disable reason, no failure clock.
            disabled_reason: if reenabled { None } else { previous.disabled_reason.clone() },
            failing_since: if reenabled { None } else { previous.failing_since },
            timeouts_in_a_row: if reenabled { 0 } else { previous.timeouts_in_a_row },
            updated_at: now,
            ..previous
        };
        // Written only over what was read: a disable by the delivery worker in between is not
        // silently undone.
        if !self.store().replace_endpoint_if_unchanged(&endpoint, previous_updated_at).await? {
            return Err(ManageError::Conflict("The endpoint changed meanwhile; read it and try again."));
        }
        Ok(endpoint)
    }

    /// Deletes an endpoint and its secret.
    pub async fn delete(&self, owner: &Owner, id: WebhookEndpointId) -> Result<(), ManageError> {
        if !self.store().delete_endpoint(owner.clone(), id).await? {
            return Err(ManageError::NotFound("endpoint"));
        }
        self.secrets.remove(owner.secret_path(), id).await?;
        tracing::info!(endpoint_id = %id, owner = %owner.scope(), "webhook endpoint deleted");
        Ok(())
    }

    /// A new secret; the previous one keeps signing (beside it) for `ROTATION_OVERLAP_HOURS`.
    pub async fn rotate(
        &self,
        owner: &Owner,
        id: WebhookEndpointId,
        now: DateTime<Utc>,
    ) -> Result<Rotated, ManageError> {
        let endpoint = self.endpoint(owner, id).await?;
        let current = self
            .secrets
            .get(owner.secret_path(), id)
            .await?
            .and_then(|text| serde_json::from_str::<EndpointSecrets>(&text).ok());
        let secret = new_secret();
        let expires = now + Span::hours(ROTATION_OVERLAP_HOURS);
        let stored = EndpointSecrets {
            current: secret.clone(),
            previous: current.map(|old| old.current),
            previous_expires_at: Some(expires),
        };
        self.put_secrets(&endpoint, &stored).await?;
        tracing::info!(endpoint_id = %id, owner = %owner.scope(), "webhook secret rotated");
        Ok(Rotated { secret, previous_expires_at: expires })
    }

    /// Sends a `webhook.test` event to this endpoint only, through the real delivery path.
    pub async fn test(
        &self,
        owner: &Owner,
        id: WebhookEndpointId,
        now: DateTime<Utc>,
    ) -> Result<(Event, Option<Uuid>), ManageError> {
        let endpoint = self.enabled_endpoint(owner, id).await?;
        let (event, deliveries) = self
            .publisher
            .publish_to(owner.clone(), "webhook.test", json!({ "success": true }), &[endpoint], now)
            .await?;
        Ok((event, deliveries.first().map(|delivery| delivery.id)))
    }

    /// Every endpoint of the owner, newest first.
    pub async fn list(&self, owner: &Owner) -> Result<Vec<Endpoint>, ManageError> {
        let mut endpoints = self.store().list_endpoints(owner).await?;
        endpoints.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        Ok(endpoints)
    }

    /// A page of an endpoint's deliveries, newest first, with `status` if given.
    pub async fn deliveries(
        &self,
        owner: &Owner,
        id: WebhookEndpointId,
        status: Option<DeliveryStatus>,
        limit: usize,
        cursor: Option<Uuid>,
    ) -> Result<Page<Delivery>, ManageError> {
        self.endpoint(owner, id).await?;
        let mut page = self.store().deliveries_of_endpoint(id, status, limit, cursor).await?;
        page.items.retain(|delivery| &delivery.owner == owner);
        Ok(page)
    }

    /// Re-sends one delivery now (manual trigger).
    pub async fn replay(&self, owner: &Owner, id: Uuid) -> Result<Delivery, ManageError> {
        let delivery = self.store().get_delivery(owner.clone(), id).await?.ok_or(ManageError::NotFound("delivery"))?;
        self.enabled_endpoint(owner, delivery.endpoint_id).await?;
        self.publisher.replay(std::slice::from_ref(&delivery)).await?;
        Ok(delivery)
    }

    /// Re-sends deliveries already read (the backend's `replay-failed`) of `endpoint`, if it is
    /// enabled.
    pub async fn replay_all(&self, endpoint: &Endpoint, deliveries: &[Delivery]) -> Result<(), ManageError> {
        if !endpoint.spec.enabled {
            return Err(ManageError::Conflict(DISABLED));
        }
        Ok(self.publisher.replay(deliveries).await?)
    }

    /// An endpoint of the owner.
    pub async fn endpoint(&self, owner: &Owner, id: WebhookEndpointId) -> Result<Endpoint, ManageError> {
        self.store().get_endpoint(owner.clone(), id).await?.ok_or(ManageError::NotFound("endpoint"))
    }

    async fn enabled_endpoint(&self, owner: &Owner, id: WebhookEndpointId) -> Result<Endpoint, ManageError> {
        let endpoint = self.endpoint(owner, id).await?;
        if !endpoint.spec.enabled {
            return Err(ManageError::Conflict(DISABLED));
        }
        Ok(endpoint)
    }

    async fn put_secrets(&self, endpoint: &Endpoint, secrets: &EndpointSecrets) -> Result<(), StoreError> {
        let text = serde_json::to_string(secrets).map_err(|err| StoreError::json("webhook secrets", err))?;
        self.secrets.put(endpoint.owner.secret_path(), endpoint.id, &text).await
    }
}
