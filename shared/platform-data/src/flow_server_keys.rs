//! Flow server API keys sent with a flowtool sync: write-only secrets of the account, one per
//! flow server origin, stored bound to that origin (`secret_origin`, as secret headers are) and
//! read only by runs of the account's agents whose `agent_config.flowtool.base_url` is there.
//! Never returned by the API, never logged, never sent to another origin.

use crate::StoreError;
use crate::ids::AccountId;
use crate::secret_origin::{self, SecretRefused};
use crate::secrets::RecordSecrets;
use aws_sdk_secretsmanager::Client as SecretsClient;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Why an account's flow server key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FlowServerKeyError {
    #[error("not an absolute http(s) URL: {0}")]
    NoOrigin(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Refused(#[from] SecretRefused),
}

/// The accounts' flow server keys, at `{prefix}{account_id}/{origin id}` (the origin id is a
/// digest of the origin: Secrets Manager names do not take `:`).
#[derive(Clone)]
pub struct FlowServerKeys {
    /// By origin id.
    secrets: RecordSecrets<Uuid>,
}

impl FlowServerKeys {
    /// Keys kept under `prefix`.
    pub fn new(client: impl Into<aws_env::Lazy<SecretsClient>>, prefix: impl Into<String>) -> Self {
        Self {
            secrets: RecordSecrets::new(
                client,
                prefix,
                "A flow server API key of an account (write-only through the API)",
            ),
        }
    }

    /// Stores `api_key` as the account's key of the flow server at `base_url`'s origin.
    pub async fn put(&self, account_id: AccountId, base_url: &str, api_key: &str) -> Result<(), FlowServerKeyError> {
        let origin = origin(base_url)?;
        let stored = secret_origin::encode(&origin, &api_key.to_owned());
        Ok(self.secrets.put(account_id, origin_id(&origin), &stored).await?)
    }

    /// The account's key of the flow server at `base_url`'s origin, if one was stored.
    pub async fn get(&self, account_id: AccountId, base_url: &str) -> Result<Option<String>, FlowServerKeyError> {
        let origin = origin(base_url)?;
        match self.secrets.get(account_id, origin_id(&origin)).await? {
            Some(stored) => Ok(Some(secret_origin::decode_for(&stored, &origin)?)),
            None => Ok(None),
        }
    }
}

fn origin(base_url: &str) -> Result<String, FlowServerKeyError> {
    secret_origin::origin_of(base_url).ok_or_else(|| FlowServerKeyError::NoOrigin(base_url.to_owned()))
}

/// A stable id of an origin: the first 16 bytes of its SHA-256.
fn origin_id(origin: &str) -> Uuid {
    let digest = Sha256::digest(origin.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    Uuid::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_has_one_id_whatever_its_path() {
        let a = origin("https://flows.example.com/api").unwrap();
        let b = origin("https://FLOWS.example.com:443").unwrap();
        assert_eq!(origin_id(&a), origin_id(&b));
        assert_ne!(origin_id(&a), origin_id(&origin("http://flows.example.com").unwrap()));
        assert!(matches!(origin("flows.example.com"), Err(FlowServerKeyError::NoOrigin(_))));
    }
}
