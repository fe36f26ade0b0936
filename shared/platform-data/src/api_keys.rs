//! API keys: each belongs to one account and authenticates every backend request.
//!
//! A key reads `{key_id}.{256 random bits}`. `ApiKeysTable` is keyed by `key_id` and stores only
//! a keyed hash of the whole key (HMAC-SHA256 with the pepper), so one consistent GetItem and a
//! constant-time comparison authenticate a request, and revocation (deleting the item) is
//! immediate.

use crate::StoreError;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use credentials::{Pepper, SECRET_BYTES, random_string};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A stored API key (never the key itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiKey {
    pub key_id: String,
    pub account_id: Uuid,
    pub name: String,
    pub key_hash: String,
    pub created_at: DateTime<Utc>,
}

/// What operators see of a key.
#[derive(Debug, Clone, Serialize)]
pub struct ApiKeySummary {
    pub key_id: String,
    pub account_id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

/// The authenticated caller of a backend request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub account_id: Uuid,
    pub key_id: String,
    pub key_name: String,
}

impl ApiKey {
    /// A new key for `account_id`; returns the record and the key, which is shown once.
    pub fn create(account_id: Uuid, name: &str, pepper: &Pepper, now: DateTime<Utc>) -> (Self, String) {
        let key_id = random_string(12);
        let key = format!("{key_id}.{}", random_string(SECRET_BYTES));
        let record = Self { key_id, account_id, name: name.to_owned(), key_hash: pepper.hash(&key), created_at: now };
        (record, key)
    }
}

impl From<ApiKey> for ApiKeySummary {
    fn from(key: ApiKey) -> Self {
        Self { key_id: key.key_id, account_id: key.account_id, name: key.name, created_at: key.created_at }
    }
}

/// The key id a presented key claims, if it has the key shape at all.
pub fn key_id_of(key: &str) -> Option<&str> {
    let (key_id, secret) = key.split_once('.')?;
    (!key_id.is_empty() && !secret.is_empty()).then_some(key_id)
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

    /// Authenticates a presented key: one consistent GetItem and a constant-time comparison.
    pub async fn authenticate(&self, presented: &str, pepper: &Pepper) -> Result<Option<Caller>, StoreError> {
        let Some(key_id) = key_id_of(presented) else { return Ok(None) };
        let output = self
            .db
            .get_item()
            .table_name(&self.table)
            .key("key_id", AttributeValue::S(key_id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("GetItem", err))?;
        let Some(item) = output.item else { return Ok(None) };
        let key: ApiKey = serde_dynamo::from_item(item)?;
        Ok(pepper.verify(presented, &key.key_hash).then_some(Caller {
            account_id: key.account_id,
            key_id: key.key_id,
            key_name: key.name,
        }))
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
        let pepper = Pepper::new("p").unwrap();
        let (record, key) = ApiKey::create(Uuid::new_v4(), "ci", &pepper, Utc::now());
        assert_eq!(key_id_of(&key), Some(record.key_id.as_str()));
        assert!(pepper.verify(&key, &record.key_hash));
        assert!(!record.key_hash.contains(&key));
        for malformed in ["", "abc", ".x", "x."] {
            assert_eq!(key_id_of(malformed), None);
        }
    }
}
