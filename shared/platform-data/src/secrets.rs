//! Write-only secrets of records (a language model's provider key, an MCP configuration's
//! secret headers), one Secrets Manager secret per record named `{prefix}{account_id}/{id}`.
//! The API stores and deletes them; only the functions that use them (the runner, MCP
//! connection tests) read them.

use crate::StoreError;
use aws_sdk_secretsmanager::Client as SecretsClient;
use std::fmt::Display;
use std::marker::PhantomData;

/// The secrets of one kind of record, whose ids are `Id`s.
pub struct RecordSecrets<Id> {
    client: aws_env::Lazy<SecretsClient>,
    prefix: String,
    description: &'static str,
    id: PhantomData<fn(Id)>,
}

// Derived, `Clone` would require `Id: Clone`.
impl<Id> Clone for RecordSecrets<Id> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            prefix: self.prefix.clone(),
            description: self.description,
            id: PhantomData,
        }
    }
}

impl<Id: Display> RecordSecrets<Id> {
    /// Secrets named `{prefix}{account_id}/{id}`, created with `description`.
    pub fn new(
        client: impl Into<aws_env::Lazy<SecretsClient>>,
        prefix: impl Into<String>,
        description: &'static str,
    ) -> Self {
        Self { client: client.into(), prefix: prefix.into(), description, id: PhantomData }
    }

    /// `owner` is an account id, or another owner's path (`webhooks::owner::Owner::secret_path`).
    fn secret_name(&self, owner: impl Display, id: Id) -> String {
        format!("{}{owner}/{id}", self.prefix)
    }

    /// Stores or replaces a record's secret.
    pub async fn put(&self, account_id: impl Display, id: Id, value: &str) -> Result<(), StoreError> {
        write_secret(&self.client, &self.secret_name(account_id, id), value, self.description).await
    }

    /// A record's secret, if one is set.
    pub async fn get(&self, account_id: impl Display, id: Id) -> Result<Option<String>, StoreError> {
        read_secret(&self.client, &self.secret_name(account_id, id)).await
    }

    /// Deletes a record's secret at once (no recovery window: the owner still has the value,
    /// and the name may be reused when a secret is set again). A missing secret is fine.
    pub async fn remove(&self, account_id: impl Display, id: Id) -> Result<(), StoreError> {
        let deleted = self
            .client
            .delete_secret()
            .secret_id(self.secret_name(account_id, id))
            .force_delete_without_recovery(true)
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(()),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => Ok(()),
            Err(err) => Err(StoreError::secrets("DeleteSecret", err)),
        }
    }
}

/// Stores `value` as the secret `name`'s current value, creating the secret (with
/// `description`) when it does not exist.
pub async fn write_secret(
    client: &SecretsClient,
    name: &str,
    value: &str,
    description: &str,
) -> Result<(), StoreError> {
    let updated = client.put_secret_value().secret_id(name).secret_string(value).send().await;
    match updated {
        Ok(_) => Ok(()),
        Err(err) if err.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => {
            client
                .create_secret()
                .name(name)
                .description(description)
                .secret_string(value)
                .send()
                .await
                .map_err(|err| StoreError::secrets("CreateSecret", err))?;
            Ok(())
        }
        Err(err) => Err(StoreError::secrets("PutSecretValue", err)),
    }
}

/// A secret's string value; `None` when the secret does not exist or has no string value.
pub async fn read_secret(client: &SecretsClient, secret_id: &str) -> Result<Option<String>, StoreError> {
    match client.get_secret_value().secret_id(secret_id).send().await {
        Ok(output) => Ok(output.secret_string().map(str::to_owned)),
        Err(err) if err.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => Ok(None),
        Err(err) => Err(StoreError::secrets("GetSecretValue", err)),
    }
}
