//! External applications and their access tokens.
//!
//! Keys: `ExternalAppsTable` by `client_id`; `AccessTokensTable` by `token_hash` (SHA-256 of the
//! bearer token) with `expires_at` as the TTL attribute.

use crate::access::{AccessGrant, AccessTokenRecord, BearerRejection, ExternalApp, rate_limit_bucket, token_client_id};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use credentials::KeyedHash;
use credentials::token_digest;
use storage::rate_limit::RateLimiter;
use storage::{Item, Read, StoreError, get_item, get_together, is_condition_failure, n, s};

/// Storage of external applications and access tokens.
#[derive(Clone)]
pub struct AppStore {
    db: Client,
    apps_table: String,
    tokens_table: String,
}

impl AppStore {
    /// A store over the two tables.
    pub fn new(db: Client, apps_table: impl Into<String>, tokens_table: impl Into<String>) -> Self {
        Self { db, apps_table: apps_table.into(), tokens_table: tokens_table.into() }
    }

    /// Writes a new application; an existing `client_id` is a conflict.
    pub async fn insert(&self, app: &ExternalApp) -> Result<(), StoreError> {
        self.put_app_if(app, "attribute_not_exists(client_id)", None).await
    }

    /// Replaces an application read at `app.revision - 1`; a concurrent change is a conflict.
    pub async fn replace(&self, app: &ExternalApp) -> Result<(), StoreError> {
        self.put_app_if(app, "revision = :previous", Some(n(app.revision.saturating_sub(1)))).await
    }

    async fn put_app_if(
        &self,
        app: &ExternalApp,
        condition: &str,
        previous: Option<AttributeValue>,
    ) -> Result<(), StoreError> {
        let result = self
            .db
            .put_item()
            .table_name(&self.apps_table)
            .set_item(Some(serde_dynamo::to_item(app)?))
            .condition_expression(condition)
            .set_expression_attribute_values(previous.map(|value| Item::from([(":previous".to_owned(), value)])))
            .send()
            .await;
        match result {
            Err(err) if is_condition_failure(&err) => Err(StoreError::Conflict),
            other => other.map(drop).map_err(|err| StoreError::dynamo("PutItem", err)),
        }
    }

    /// One application, read consistently so deactivation takes effect at once.
    pub async fn get(&self, client_id: &str) -> Result<Option<ExternalApp>, StoreError> {
        let key = Item::from([("client_id".to_owned(), s(client_id))]);
        let item = get_item(&self.db, &self.apps_table, key, Read::CONSISTENT).await?;
        item.map(serde_dynamo::from_item).transpose().map_err(Into::into)
    }

    /// The application `client_id`, for a request `limiter` will then count (see
    /// `ApiKeyStore::find`, the backend's twin): when this container has not seen the client's
    /// bucket, the application and the bucket are read together (one consistent BatchGetItem) and
    /// `limiter` learns the bucket's state; otherwise one consistent GetItem.
    pub async fn find(&self, client_id: &str, limiter: &RateLimiter) -> Result<Option<ExternalApp>, StoreError> {
        let bucket = rate_limit_bucket(client_id);
        if limiter.knows(&bucket) {
            return self.get(client_id).await;
        }
        let app_key = (self.apps_table.clone(), Item::from([("client_id".to_owned(), s(client_id))]));
        let [app, bucket_item] = get_together(&self.db, [app_key, limiter.bucket_key(&bucket)]).await?;
        let Some(app) = app else { return Ok(None) };
        // Only a client that exists is remembered, so made-up client ids cannot crowd the limiter.
        limiter.learn(&bucket, bucket_item.as_ref());
        Ok(Some(serde_dynamo::from_item(app)?))
    }

    /// Replaces an application's secret hash made with the previous pepper by `upgrade` (the
    /// same secret under the current pepper): one UpdateItem, conditional on the old hash, so
    /// it never resurrects a deleted application nor overwrites a newer hash. It bumps
    /// `revision`, so an operator's concurrent change conflicts instead of writing the old hash
    /// back. Returns whether the hash was replaced.
    pub async fn upgrade_secret_hash(
        &self,
        client_id: &str,
        old_hash: &str,
        upgrade: &KeyedHash,
    ) -> Result<bool, StoreError> {
        let result = self
            .db
            .update_item()
            .table_name(&self.apps_table)
            .key("client_id", s(client_id))
            .update_expression("SET secret_hash = :new, pepper_id = :pepper, revision = revision + :one")
            .condition_expression("secret_hash = :old")
            .expression_attribute_values(":new", s(&upgrade.hash))
            .expression_attribute_values(":pepper", s(&upgrade.pepper_id))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":old", s(old_hash))
            .send()
            .await;
        storage::applied("UpdateItem", result)
    }

    /// Every application. A Scan: for the operator CLI only, never on a request path.
    pub async fn list(&self) -> Result<Vec<ExternalApp>, StoreError> {
        let mut apps = Vec::new();
        let mut start_key = None;
        loop {
            let output = self
                .db
                .scan()
                .table_name(&self.apps_table)
                .set_exclusive_start_key(start_key)
                .send()
                .await
                .map_err(|err| StoreError::dynamo("Scan", err))?;
            for item in output.items.unwrap_or_default() {
                apps.push(serde_dynamo::from_item(item)?);
            }
            match output.last_evaluated_key {
                Some(key) if !key.is_empty() => start_key = Some(key),
                _ => break,
            }
        }
        apps.sort_by_key(|app: &ExternalApp| app.created_at);
        Ok(apps)
    }

    /// Stores an issued token.
    pub async fn put_token(&self, token: &AccessTokenRecord) -> Result<(), StoreError> {
        self.db
            .put_item()
            .table_name(&self.tokens_table)
            .set_item(Some(serde_dynamo::to_item(token)?))
            .send()
            .await
            .map_err(|err| StoreError::dynamo("PutItem", err))?;
        Ok(())
    }

    /// Deletes a token if it belongs to `client_id`; returns whether one was deleted.
    pub async fn delete_token(&self, token_hash: &str, client_id: &str) -> Result<bool, StoreError> {
        let result = self
            .db
            .delete_item()
            .table_name(&self.tokens_table)
            .key("token_hash", s(token_hash))
            .condition_expression("client_id = :client")
            .expression_attribute_values(":client", s(client_id))
            .send()
            .await;
        storage::applied("DeleteItem", result)
    }

    /// A token and the application it names, in one consistent BatchGetItem, for a request
    /// `limiter` will then count: when this container has not seen the client's bucket, the
    /// bucket is read in the same BatchGetItem and `limiter` learns its state (only when the
    /// token exists, so made-up tokens cannot crowd the limiter).
    pub async fn token_with_app(
        &self,
        token_hash: &str,
        client_id: &str,
        limiter: &RateLimiter,
    ) -> Result<(Option<AccessTokenRecord>, Option<ExternalApp>), StoreError> {
        let key = |name: &str, value: &str| Item::from([(name.to_owned(), s(value))]);
        let token_key = (self.tokens_table.clone(), key("token_hash", token_hash));
        let app_key = (self.apps_table.clone(), key("client_id", client_id));
        let bucket = rate_limit_bucket(client_id);
        let (token, app) = if limiter.knows(&bucket) {
            let [token, app] = get_together(&self.db, [token_key, app_key]).await?;
            (token, app)
        } else {
            let [token, app, bucket_item] =
                get_together(&self.db, [token_key, app_key, limiter.bucket_key(&bucket)]).await?;
            if token.is_some() {
                limiter.learn(&bucket, bucket_item.as_ref());
            }
            (token, app)
        };
        let token = token.map(serde_dynamo::from_item).transpose()?;
        let app = app.map(serde_dynamo::from_item).transpose()?;
        Ok((token, app))
    }

    /// Checks a bearer token: it must exist, belong to the application it names, be unexpired
    /// (DynamoDB's TTL deletes late, so expiry is checked here), and the application must be active.
    /// `limiter`, which will count the request, may learn the client's bucket on the way.
    pub async fn authorize_bearer(
        &self,
        token: &str,
        now: DateTime<Utc>,
        limiter: &RateLimiter,
    ) -> Result<Result<AccessGrant, BearerRejection>, StoreError> {
        let Some(client_id) = token_client_id(token) else {
            return Ok(Err(BearerRejection::Malformed));
        };
        let (record, app) = self.token_with_app(&token_digest(token), client_id, limiter).await?;
        let Some(record) = record.filter(|record| record.client_id == client_id) else {
            return Ok(Err(BearerRejection::Unknown));
        };
        if record.expires_at <= now.timestamp() {
            return Ok(Err(BearerRejection::Expired));
        }
        match app {
            Some(app) if app.active => {
                let scopes = app.granted(&record.scope);
                Ok(Ok(AccessGrant { client_id: app.client_id, organization_ids: app.organization_ids, scopes }))
            }
            _ => Ok(Err(BearerRejection::InactiveApplication)),
        }
    }
}

/// The applications that may receive an organization's meeting events: active, granted
/// `webhooks:manage` and linked to it, read consistently (one BatchGetItem per 100), so an
/// application unlinked or deactivated is sent nothing from then on.
#[derive(Clone)]
pub struct ApplicationAudience {
    db: Client,
    apps_table: String,
}

impl ApplicationAudience {
    /// The audience of `ExternalAppsTable`.
    pub fn new(db: Client, apps_table: impl Into<String>) -> Self {
        Self { db, apps_table: apps_table.into() }
    }

    /// From `EXTERNAL_APPS_TABLE`, for the webhook delivery worker.
    pub fn from_settings(
        aws: &aws_env::Clients,
        lookup: crate::settings::Lookup,
    ) -> Result<std::sync::Arc<Self>, crate::settings::SettingError> {
        let table = crate::settings::required(lookup, crate::settings::EXTERNAL_APPS_TABLE)?;
        Ok(std::sync::Arc::new(Self::new(aws.dynamodb(), table)))
    }
}

impl webhooks::audience::Audience for ApplicationAudience {
    fn receiving<'a>(
        &'a self,
        client_ids: &'a [String],
        organization_id: Option<i64>,
    ) -> futures_util::future::BoxFuture<'a, Result<std::collections::HashSet<String>, StoreError>> {
        Box::pin(async move {
            let keys =
                client_ids.iter().map(|id| (self.apps_table.clone(), Item::from([("client_id".to_owned(), s(id))])));
            let found = storage::batch_get(&self.db, keys.collect(), true).await?;
            let mut receiving = std::collections::HashSet::new();
            for item in found.into_values().flatten() {
                // An application whose record does not read is left out, not every other one.
                let Ok(app) = serde_dynamo::from_item::<_, ExternalApp>(item) else { continue };
                let linked = organization_id.is_none_or(|id| app.organization_ids.contains(&id));
                if app.active && linked && app.has_scope(crate::access::WEBHOOKS_SCOPE) {
                    receiving.insert(app.client_id);
                }
            }
            Ok(receiving)
        })
    }
}
