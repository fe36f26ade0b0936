//! The two DynamoDB read loops every platform store needs: a Query read to its last page, and a
//! BatchGetItem retried until no key is left unprocessed.

use crate::StoreError;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use std::collections::HashMap;

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// Every item a query matches (one call per MB).
pub async fn query_all(query: QueryFluentBuilder) -> Result<Vec<Item>, StoreError> {
    let mut items = Vec::new();
    let mut start_key = None;
    loop {
        let output = query
            .clone()
            .set_exclusive_start_key(start_key)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("Query", err))?;
        items.extend(output.items.unwrap_or_default());
        match output.last_evaluated_key {
            Some(key) if !key.is_empty() => start_key = Some(key),
            _ => return Ok(items),
        }
    }
}

/// The items of `keys` by table (one BatchGetItem, at most 100 keys; retried for unprocessed
/// keys). Missing items are absent from the answer.
pub async fn batch_get(
    db: &Client,
    keys: Vec<(String, Item)>,
    consistent: bool,
) -> Result<HashMap<String, Vec<Item>>, StoreError> {
    let mut by_table: HashMap<String, Vec<Item>> = HashMap::new();
    for (table, key) in keys {
        by_table.entry(table).or_default().push(key);
    }
    let mut pending = HashMap::new();
    for (table, keys) in by_table {
        let request = KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(consistent)
            .build()
            .map_err(|err| StoreError::Dynamo { operation: "build request", message: err.to_string() })?;
        pending.insert(table, request);
    }
    let mut found: HashMap<String, Vec<Item>> = HashMap::new();
    for _ in 0..6 {
        if pending.is_empty() {
            break;
        }
        let output = db
            .batch_get_item()
            .set_request_items(Some(std::mem::take(&mut pending)))
            .send()
            .await
            .map_err(|err| StoreError::dynamo("BatchGetItem", err))?;
        for (table, items) in output.responses.unwrap_or_default() {
            found.entry(table).or_default().extend(items);
        }
        pending = output.unprocessed_keys.unwrap_or_default();
    }
    if !pending.is_empty() {
        return Err(StoreError::Dynamo { operation: "BatchGetItem", message: "keys left unprocessed".into() });
    }
    Ok(found)
}
