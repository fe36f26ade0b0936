//! Organizations and users.
//!
//! Keys in `DirectoryTable`: an organization is `pk = ORG#{id}, sk = ORG`; a user is
//! `pk = USER#{id}, sk = USER`.

use crate::model::{Organization, User};
use aws_sdk_dynamodb::Client;
use serde::Serialize;
use serde::de::DeserializeOwned;
use storage::{Item, StoreError, batch_get, batch_write, put_request, s};

/// Storage of organizations and their users.
#[derive(Clone)]
pub struct DirectoryStore {
    db: Client,
    table: String,
}

fn organization_key(id: i64) -> Item {
    Item::from([("pk".to_owned(), s(format!("ORG#{id}"))), ("sk".to_owned(), s("ORG"))])
}

fn user_key(id: i64) -> Item {
    Item::from([("pk".to_owned(), s(format!("USER#{id}"))), ("sk".to_owned(), s("USER"))])
}

impl DirectoryStore {
    /// A store over `DirectoryTable`.
    pub fn new(db: Client, table: impl Into<String>) -> Self {
        Self { db, table: table.into() }
    }

    /// Creates or replaces organizations.
    pub async fn put_organizations(&self, organizations: &[Organization]) -> Result<(), StoreError> {
        self.put_all(organizations.iter().map(|o| (organization_key(o.id), o))).await
    }

    /// Creates or replaces users.
    pub async fn put_users(&self, users: &[User]) -> Result<(), StoreError> {
        self.put_all(users.iter().map(|u| (user_key(u.id), u))).await
    }

    /// The organizations among `ids` that exist.
    pub async fn organizations(&self, ids: &[i64]) -> Result<Vec<Organization>, StoreError> {
        self.get_all(ids.iter().map(|id| organization_key(*id)).collect()).await
    }

    /// The users among `ids` that exist.
    pub async fn users(&self, ids: &[i64]) -> Result<Vec<User>, StoreError> {
        self.get_all(ids.iter().map(|id| user_key(*id)).collect()).await
    }

    async fn put_all<'a, T: Serialize + 'a>(
        &self,
        records: impl Iterator<Item = (Item, &'a T)>,
    ) -> Result<(), StoreError> {
        let mut requests = Vec::new();
        for (key, record) in records {
            let mut item: Item = serde_dynamo::to_item(record)?;
            item.extend(key);
            requests.push((self.table.clone(), put_request(item)?));
        }
        batch_write(&self.db, requests).await
    }

    async fn get_all<T: DeserializeOwned>(&self, keys: Vec<Item>) -> Result<Vec<T>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let keys = keys.into_iter().map(|key| (self.table.clone(), key)).collect();
        let mut found = batch_get(&self.db, keys, false).await?;
        let items = found.remove(&self.table).unwrap_or_default();
        items.into_iter().map(|item| serde_dynamo::from_item(item).map_err(Into::into)).collect()
    }
}
