//! API keys: each belongs to one account and authenticates every backend request.
//!
//! A key reads `{key_id}.{256 random bits}`. `ApiKeysTable` is keyed by `key_id` and stores only
//! a keyed hash of the whole key (HMAC-SHA256 with the pepper), so one consistent GetItem and a
//! constant-time comparison authenticate a request, and revocation (deleting the item) is
//! immediate. The lookup is by `key_id`, not by hash, so a key hashed with the previous pepper
//! (during a pepper rotation) costs a second HMAC, not a second read, plus one conditional
//! UpdateItem the first time it is used, which moves its hash to the current pepper.

use crate::StoreError;
use crate::ids::AccountId;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use credentials::{KeyedHash, MAX_PRESENTED_ID_BYTES, Peppers, SECRET_BYTES, Verification, random_string};
use serde::{Deserialize, Serialize};
use storage::rate_limit::RateLimiter;
use storage::{Item, Read, get_item, s};

/// A stored API key (never the key itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiKey {
    pub key_id: String,
    pub account_id: AccountId,
    pub name: String,
    pub key_hash: String,
    /// Id of the pepper `key_hash` was made with (absent on keys created before pepper ids
    /// were recorded); lets an operator see who still depends on a previous pepper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pepper_id: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// What operators see of a key.
#[derive(Debug, Clone, Serialize)]
pub struct ApiKeySummary {
    pub key_id: String,
    pub account_id: AccountId,
    pub name: String,
    /// The id of the pepper its hash was made with (not secret; see `credentials::Pepper::id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pepper_id: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// The authenticated caller of a backend request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub account_id: AccountId,
    pub key_id: String,
    pub key_name: String,
}

impl ApiKey {
    /// A new key for `account_id`; returns the record and the key, which is shown once.
    pub fn create(account_id: AccountId, name: &str, peppers: &Peppers, now: DateTime<Utc>) -> (Self, String) {
        let key_id = random_string(12);
        let key = format!("{key_id}.{}", random_string(SECRET_BYTES));
        let hashed = peppers.hash(&key);
        let record = Self {
            key_id,
            account_id,
            name: name.to_owned(),
            key_hash: hashed.hash,
            pepper_id: Some(hashed.pepper_id),
            created_at: now,
        };
        (record, key)
    }
}

impl From<ApiKey> for ApiKeySummary {
    fn from(key: ApiKey) -> Self {
        Self {
            key_id: key.key_id,
            account_id: key.account_id,
            name: key.name,
            pepper_id: key.pepper_id,
            created_at: key.created_at,
        }
    }
}

/// The key id a presented key claims, if it has the key shape at all (an id longer than
/// `MAX_PRESENTED_ID_BYTES` has not).
pub fn key_id_of(key: &str) -> Option<&str> {
    let (key_id, secret) = key.split_once('.')?;
    (!key_id.is_empty() && key_id.len() <= MAX_PRESENTED_ID_BYTES && !secret.is_empty()).then_some(key_id)
}

/// Storage of API keys.
#[derive(Clone)]
pub struct ApiKeyStore {
    db: Client,
    table: String,
}

impl ApiKeyStore {
    /// A store over `ApiKeysTable`.
    pub fn new(db: Client, table: impl Into<String>) -> Self {
        Self { db, table: table.into() }
    }

    /// Stores a new key.
    pub async fn insert(&self, key: &ApiKey) -> Result<(), StoreError> {
        self.db
            .put_item()
            .table_name(&self.table)
            .set_item(Some(serde_dynamo::to_item(key)?))
            .condition_expression("attribute_not_exists(key_id)")
            .send()
            .await
            .map_err(|err| StoreError::dynamo("PutItem", err))?;
        Ok(())
    }

    /// The stored key `key_id`: one consistent GetItem.
    pub async fn get(&self, key_id: &str) -> Result<Option<ApiKey>, StoreError> {
        let key = Item::from([("key_id".to_owned(), AttributeValue::S(key_id.to_owned()))]);
        let item = get_item(&self.db, &self.table, key, Read::CONSISTENT).await?;
        item.map(serde_dynamo::from_item).transpose().map_err(StoreError::from)
    }

    /// The stored key `key_id`, for a request `limiter` will then count. When this container
    /// has not seen the key's bucket yet, the key and the bucket are read together (one
    /// consistent BatchGetItem over both tables) and `limiter` learns the bucket's state, so its
    /// first UpdateItem has the right form even if other containers are using the key; otherwise
    /// one consistent GetItem.
    pub async fn find(&self, key_id: &str, limiter: &RateLimiter) -> Result<Option<ApiKey>, StoreError> {
        if limiter.knows(key_id) {
            return self.get(key_id).await;
        }
        let key = (self.table.clone(), Item::from([("key_id".to_owned(), s(key_id))]));
        let [key, bucket] = storage::get_together(&self.db, [key, limiter.bucket_key(key_id)]).await?;
        let Some(item) = key else { return Ok(None) };
        // Only a key that exists is remembered, so made-up key ids cannot crowd the limiter.
        limiter.learn(key_id, bucket.as_ref());
        Ok(Some(serde_dynamo::from_item(item)?))
    }

    /// Authenticates a presented key against `key` (read by [`ApiKeyStore::find`] or
    /// [`ApiKeyStore::get`]; `None` when there is none): a constant-time comparison. A key that
    /// verifies only with the previous pepper also gets its hash moved to the current pepper (one
    /// conditional UpdateItem, once per key; its failure is logged, and the request still
    /// authenticates).
    pub async fn verify(
        &self,
        presented: &str,
        key: Option<ApiKey>,
        peppers: &Peppers,
    ) -> Result<Option<Caller>, StoreError> {
        let Some(key) = key.filter(|key| key_id_of(presented) == Some(key.key_id.as_str())) else { return Ok(None) };
        match peppers.verify(presented, &key.key_hash) {
            Verification::Mismatch => return Ok(None),
            Verification::Match => {}
            Verification::MatchUnderPrevious { upgrade } => {
                if let Err(err) = self.upgrade_hash(&key.key_id, &key.key_hash, &upgrade).await {
                    tracing::warn!(key_id = %key.key_id, error = %err, "moving the API key's hash to the current pepper failed");
                }
            }
        }
        Ok(Some(Caller { account_id: key.account_id, key_id: key.key_id, key_name: key.name }))
    }

    /// Replaces a key's hash made with the previous pepper by `upgrade`: one UpdateItem,
    /// conditional on the old hash, so a revoked key is never written back. Returns whether the
    /// hash was replaced (false when another request already did, or the key is gone).
    pub async fn upgrade_hash(&self, key_id: &str, old_hash: &str, upgrade: &KeyedHash) -> Result<bool, StoreError> {
        let result = self
            .db
            .update_item()
            .table_name(&self.table)
            .key("key_id", s(key_id))
            .update_expression("SET key_hash = :new, pepper_id = :pepper")
            .condition_expression("key_hash = :old")
            .expression_attribute_values(":new", s(&upgrade.hash))
            .expression_attribute_values(":pepper", s(&upgrade.pepper_id))
            .expression_attribute_values(":old", s(old_hash))
            .send()
            .await;
        storage::applied("UpdateItem", result)
    }

    /// Deletes a key; returns whether it existed. Requests with it fail at once.
    pub async fn revoke(&self, key_id: &str) -> Result<bool, StoreError> {
        let output = self
            .db
            .delete_item()
            .table_name(&self.table)
            .key("key_id", AttributeValue::S(key_id.to_owned()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("DeleteItem", err))?;
        Ok(output.attributes.is_some_and(|old| !old.is_empty()))
    }

    /// Every key, oldest first. A Scan: for the operator CLI only, never on a request path.
    pub async fn list(&self) -> Result<Vec<ApiKeySummary>, StoreError> {
        let mut keys = Vec::new();
        let mut start_key = None;
        loop {
            let output = self
                .db
                .scan()
                .table_name(&self.table)
                .set_exclusive_start_key(start_key)
                .send()
                .await
                .map_err(|err| StoreError::dynamo("Scan", err))?;
            for item in output.items.unwrap_or_default() {
                keys.push(ApiKeySummary::from(serde_dynamo::from_item::<_, ApiKey>(item)?));
            }
            match output.last_evaluated_key {
                Some(key) if !key.is_empty() => start_key = Some(key),
                _ => break,
            }
        }
        keys.sort_by_key(|key| key.created_at);
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_their_id_and_only_their_hash_is_stored() {
        let peppers = Peppers::parse("p").unwrap();
        let (record, key) = ApiKey::create(AccountId::new_v4(), "ci", &peppers, Utc::now());
        assert_eq!(key_id_of(&key), Some(record.key_id.as_str()));
        assert_eq!(peppers.verify(&key, &record.key_hash), Verification::Match);
        assert_eq!(record.pepper_id.as_deref(), Some(peppers.current().id()));
        assert!(!record.key_hash.contains(&key));
        for malformed in ["", "abc", ".x", "x."] {
            assert_eq!(key_id_of(malformed), None);
        }
        let longest = "k".repeat(MAX_PRESENTED_ID_BYTES);
        assert_eq!(key_id_of(&format!("{longest}.secret")), Some(longest.as_str()));
        assert_eq!(key_id_of(&format!("{longest}k.secret")), None);
    }
}
