//! The three DynamoDB access patterns every store uses: batched reads, batched writes and
//! complete queries, each bounded and retrying what DynamoDB leaves unprocessed.

use super::StoreError;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, KeysAndAttributes, PutRequest, WriteRequest};
use std::collections::HashMap;
use std::time::Duration;

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// BatchGetItem's limit of keys per call.
const BATCH_GET_LIMIT: usize = 100;
/// BatchWriteItem's limit of requests per call.
const BATCH_WRITE_LIMIT: usize = 25;
/// Calls made for one chunk before unprocessed keys become an error.
const MAX_ATTEMPTS: u32 = 6;

/// One table's part of a batched read.
pub struct BatchRead {
    pub table: String,
    pub keys: Vec<Item>,
    pub consistent: bool,
}

/// Reads items from one or more tables in as few BatchGetItem calls as the limits allow.
/// Returns the found items by table; missing keys are simply absent.
pub async fn batch_get(db: &Client, reads: Vec<BatchRead>) -> Result<HashMap<String, Vec<Item>>, StoreError> {
    let mut found: HashMap<String, Vec<Item>> = HashMap::new();
    let mut pending: Vec<(String, Item, bool)> = reads
        .into_iter()
        .flat_map(|read| {
            let (table, consistent) = (read.table, read.consistent);
            read.keys.into_iter().map(move |key| (table.clone(), key, consistent))
        })
        .collect();
    while !pending.is_empty() {
        let chunk: Vec<_> = pending.drain(..pending.len().min(BATCH_GET_LIMIT)).collect();
        let mut grouped: HashMap<String, (Vec<Item>, bool)> = HashMap::new();
        for (table, key, consistent) in chunk {
            grouped.entry(table).or_insert_with(|| (Vec::new(), consistent)).0.push(key);
        }
        let mut request = HashMap::new();
        for (table, (keys, consistent)) in grouped {
            let keys = KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(consistent)
                .build()
                .map_err(|err| StoreError::Dynamo { operation: "BatchGetItem", message: err.to_string() })?;
            request.insert(table, keys);
        }
        let mut attempt = 0;
        while !request.is_empty() {
            attempt += 1;
            if attempt > MAX_ATTEMPTS {
                return Err(StoreError::Throttled("BatchGetItem"));
            }
            backoff(attempt).await;
            let output = db
                .batch_get_item()
                .set_request_items(Some(std::mem::take(&mut request)))
                .send()
                .await
                .map_err(|err| StoreError::dynamo("BatchGetItem", err))?;
            for (table, items) in output.responses.unwrap_or_default() {
                found.entry(table).or_default().extend(items);
            }
            request = output.unprocessed_keys.unwrap_or_default();
        }
    }
    Ok(found)
}

/// Writes (puts and deletes) in chunks of 25, retrying unprocessed requests.
pub async fn batch_write(db: &Client, table: &str, mut requests: Vec<WriteRequest>) -> Result<(), StoreError> {
    while !requests.is_empty() {
        let chunk: Vec<_> = requests.drain(..requests.len().min(BATCH_WRITE_LIMIT)).collect();
        let mut pending = HashMap::from([(table.to_owned(), chunk)]);
        let mut attempt = 0;
        while !pending.is_empty() {
            attempt += 1;
            if attempt > MAX_ATTEMPTS {
                return Err(StoreError::Throttled("BatchWriteItem"));
            }
            backoff(attempt).await;
            let output = db
                .batch_write_item()
                .set_request_items(Some(std::mem::take(&mut pending)))
                .send()
                .await
                .map_err(|err| StoreError::dynamo("BatchWriteItem", err))?;
            pending = output.unprocessed_items.unwrap_or_default();
            pending.retain(|_, requests| !requests.is_empty());
        }
    }
    Ok(())
}

/// Runs a query to the end, following `LastEvaluatedKey` (one call per 1 MB of results).
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

/// No wait before the first call; exponential from 20 ms after that.
async fn backoff(attempt: u32) {
    if attempt > 1 {
        tokio::time::sleep(Duration::from_millis(20 << (attempt - 2))).await;
    }
}

/// A string attribute.
pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// A number attribute.
pub fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A BatchWriteItem put.
pub fn put_request(item: Item) -> Result<WriteRequest, StoreError> {
    let put = PutRequest::builder().set_item(Some(item)).build().map_err(build_error)?;
    Ok(WriteRequest::builder().put_request(put).build())
}

/// A BatchWriteItem delete.
pub fn delete_request(key: Item) -> Result<WriteRequest, StoreError> {
    let delete = DeleteRequest::builder().set_key(Some(key)).build().map_err(build_error)?;
    Ok(WriteRequest::builder().delete_request(delete).build())
}

fn build_error(err: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Dynamo { operation: "BatchWriteItem", message: err.to_string() }
}
