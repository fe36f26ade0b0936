//! The DynamoDB access patterns every store uses: complete and bounded queries, batched reads
//! and writes (each chunked to DynamoDB's limits, what it leaves unprocessed retried with
//! [`Backoff::UNPROCESSED`]), and the size of an item.

use crate::StoreError;
use crate::backoff::Backoff;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, KeysAndAttributes, PutRequest, WriteRequest};
use std::collections::HashMap;

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// BatchGetItem's limit of keys per call.
pub const BATCH_GET_LIMIT: usize = 100;
/// BatchWriteItem's limit of requests per call.
pub const BATCH_WRITE_LIMIT: usize = 25;
/// DynamoDB's limit on the size of one item (names and values), 400 KB.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

fn unprocessed_keys(request: &HashMap<String, KeysAndAttributes>) -> usize {
    request.values().map(|keys| keys.keys().len()).sum()
}

fn unprocessed_writes(request: &HashMap<String, Vec<WriteRequest>>) -> usize {
    request.values().map(Vec::len).sum()
}

/// How a GetItem reads: consistently or not, the whole item or only some attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    consistent: bool,
    projection: Option<&'static str>,
}

impl Read {
    /// A strongly consistent read of the whole item: it sees every write acknowledged before it.
    pub const CONSISTENT: Self = Self { consistent: true, projection: None };
    /// An eventually consistent read of the whole item: half the cost, and it may miss a write
    /// of the last moment.
    pub const EVENTUAL: Self = Self { consistent: false, projection: None };

    /// The same read of only the attributes `projection` (a projection expression) names.
    pub const fn only(self, projection: &'static str) -> Self {
        Self { projection: Some(projection), ..self }
    }
}

/// The item at `key` in `table`, `None` when there is none (one GetItem, read as `read` says).
pub async fn get_item(
    db: &Client,
    table: impl Into<String>,
    key: Item,
    read: Read,
) -> Result<Option<Item>, StoreError> {
    let output = db
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        // An eventual read leaves `ConsistentRead` out, DynamoDB's default.
        .set_consistent_read(read.consistent.then_some(true))
        .set_projection_expression(read.projection.map(str::to_owned))
        .send()
        .await
        .map_err(|err| StoreError::dynamo("GetItem", err))?;
    Ok(output.item)
}

/// Every item a query matches, following `LastEvaluatedKey` (one call per MB of results).
pub async fn query_all(query: QueryFluentBuilder) -> Result<Vec<Item>, StoreError> {
    let mut items = Vec::new();
    let mut start_key = None;
    loop {
        let page = query_page(query.clone(), None, start_key).await?;
        items.extend(page.items);
        match page.last_key {
            Some(key) => start_key = Some(key),
            None => return Ok(items),
        }
    }
}

/// One page of a query.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryPage {
    pub items: Vec<Item>,
    /// Where the next page starts; `None` after the last page.
    pub last_key: Option<Item>,
}

/// One Query call: at most `limit` items (and at most 1 MB), from `start_key` on.
pub async fn query_page(
    query: QueryFluentBuilder,
    limit: Option<i32>,
    start_key: Option<Item>,
) -> Result<QueryPage, StoreError> {
    let output = query
        .set_limit(limit)
        .set_exclusive_start_key(start_key)
        .send()
        .await
        .map_err(|err| StoreError::dynamo("Query", err))?;
    Ok(QueryPage {
        items: output.items.unwrap_or_default(),
        last_key: output.last_evaluated_key.filter(|key| !key.is_empty()),
    })
}

/// The first `depth` results of `query`, page after page, each Query's `Limit` what is still
/// wanted (one call per MB or until `depth`): what a list reads down to its page's depth.
pub async fn query_down_to(query: QueryFluentBuilder, depth: usize) -> Result<Vec<Item>, StoreError> {
    let mut items = Vec::with_capacity(depth);
    let mut start_key = None;
    while items.len() < depth {
        let wanted = i32::try_from(depth - items.len()).unwrap_or(i32::MAX);
        let page = query_page(query.clone(), Some(wanted), start_key).await?;
        items.extend(page.items);
        match page.last_key {
            Some(key) => start_key = Some(key),
            None => break,
        }
    }
    Ok(items)
}

/// The items of `keys` (table, key) by table, in one BatchGetItem per 100 keys; keys DynamoDB
/// leaves unprocessed are retried with backoff. Missing items are absent from the answer; keys
/// must be distinct.
pub async fn batch_get(
    db: &Client,
    keys: Vec<(String, Item)>,
    consistent: bool,
) -> Result<HashMap<String, Vec<Item>>, StoreError> {
    let mut found: HashMap<String, Vec<Item>> = HashMap::new();
    let mut keys = keys.into_iter().peekable();
    while keys.peek().is_some() {
        let mut by_table: HashMap<String, Vec<Item>> = HashMap::new();
        for (table, key) in keys.by_ref().take(BATCH_GET_LIMIT) {
            by_table.entry(table).or_default().push(key);
        }
        let mut request = HashMap::new();
        for (table, keys) in by_table {
            let keys = KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(consistent)
                .build()
                .map_err(|err| StoreError::request("BatchGetItem", err))?;
            request.insert(table, keys);
        }
        let mut attempt = 0;
        while unprocessed_keys(&request) > 0 {
            Backoff::UNPROCESSED.before_call("BatchGetItem", attempt, unprocessed_keys(&request)).await?;
            attempt += 1;
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

/// The items at `keys` (table, key), each `None` when absent, read together: one consistent
/// BatchGetItem (what DynamoDB leaves unprocessed retried), for a request that needs items of
/// several tables at once. Keys must be distinct and at most [`BATCH_GET_LIMIT`].
pub async fn get_together<const N: usize>(
    db: &Client,
    keys: [(String, Item); N],
) -> Result<[Option<Item>; N], StoreError> {
    let mut found = batch_get(db, keys.to_vec(), true).await?;
    Ok(keys.map(|(table, key)| take_item(found.get_mut(&table)?, &key)))
}

/// Removes from `items` the one whose key attributes are `key`'s.
fn take_item(items: &mut Vec<Item>, key: &Item) -> Option<Item> {
    let at = items.iter().position(|item| key.iter().all(|(name, value)| item.get(name) == Some(value)))?;
    Some(items.swap_remove(at))
}

/// Puts and deletes (table, request) in one BatchWriteItem per 25; requests DynamoDB leaves
/// unprocessed are retried with backoff.
pub async fn batch_write(db: &Client, writes: Vec<(String, WriteRequest)>) -> Result<(), StoreError> {
    let mut writes = writes.into_iter().peekable();
    while writes.peek().is_some() {
        let mut request: HashMap<String, Vec<WriteRequest>> = HashMap::new();
        for (table, write) in writes.by_ref().take(BATCH_WRITE_LIMIT) {
            request.entry(table).or_default().push(write);
        }
        let mut attempt = 0;
        while unprocessed_writes(&request) > 0 {
            Backoff::UNPROCESSED.before_call("BatchWriteItem", attempt, unprocessed_writes(&request)).await?;
            attempt += 1;
            let output = db
                .batch_write_item()
                .set_request_items(Some(std::mem::take(&mut request)))
                .send()
                .await
                .map_err(|err| StoreError::dynamo("BatchWriteItem", err))?;
            request = output.unprocessed_items.unwrap_or_default();
        }
    }
    Ok(())
}

/// A BatchWriteItem put.
pub fn put_request(item: Item) -> Result<WriteRequest, StoreError> {
    let put =
        PutRequest::builder().set_item(Some(item)).build().map_err(|err| StoreError::request("BatchWriteItem", err))?;
    Ok(WriteRequest::builder().put_request(put).build())
}

/// A BatchWriteItem delete.
pub fn delete_request(key: Item) -> Result<WriteRequest, StoreError> {
    let delete = DeleteRequest::builder()
        .set_key(Some(key))
        .build()
        .map_err(|err| StoreError::request("BatchWriteItem", err))?;
    Ok(WriteRequest::builder().delete_request(delete).build())
}

/// Whether an SDK error is a failed condition check (a conflict, not a fault).
pub fn is_condition_failure<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> bool {
    err.as_service_error().and_then(ProvideErrorMetadata::code) == Some("ConditionalCheckFailedException")
}

/// Whether an SDK error is a write refused because the item is in a transaction underway (a
/// plain write meeting a `TransactWriteItems` on the same item): worth sending again.
pub fn is_transaction_conflict<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> bool {
    err.as_service_error().and_then(ProvideErrorMetadata::code) == Some("TransactionConflictException")
}

/// A conditional write's outcome: `true` when it was applied, `false` when its condition failed
/// (a conflict, not a fault); any other error is `operation`'s failure.
pub fn applied<T, E, R>(operation: &'static str, result: Result<T, SdkError<E, R>>) -> Result<bool, StoreError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match result {
        Ok(_) => Ok(true),
        Err(err) if is_condition_failure(&err) => Ok(false),
        Err(err) => Err(StoreError::dynamo(operation, err)),
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

/// An item's size as DynamoDB counts it against [`MAX_ITEM_BYTES`]: every attribute's name
/// plus its value.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(name, value)| name.len() + attribute_size(value)).sum()
}

/// A value's size as DynamoDB counts it: strings and binaries by their bytes, numbers by one
/// byte per two significant digits plus one (counted here by all digits, which can only
/// overestimate), booleans and nulls one byte, lists and maps 3 bytes plus one per element
/// plus their elements (and the names of a map's).
pub fn attribute_size(value: &AttributeValue) -> usize {
    let number = |text: &str| text.bytes().filter(u8::is_ascii_digit).count().div_ceil(2) + 1;
    match value {
        AttributeValue::S(text) => text.len(),
        AttributeValue::N(text) => number(text),
        AttributeValue::B(blob) => blob.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(texts) => texts.iter().map(String::len).sum(),
        AttributeValue::Ns(numbers) => numbers.iter().map(|text| number(text)).sum(),
        AttributeValue::Bs(blobs) => blobs.iter().map(|blob| blob.as_ref().len()).sum(),
        AttributeValue::L(values) => 3 + values.iter().map(|value| 1 + attribute_size(value)).sum::<usize>(),
        AttributeValue::M(map) => {
            3 + map.iter().map(|(name, value)| 1 + name.len() + attribute_size(value)).sum::<usize>()
        }
        // A type newer than this SDK: count it as large as it could be, so it is never let through.
        _ => MAX_ITEM_BYTES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_count_names_and_values_in_bytes() {
        let item = Item::from([
            ("pk".to_owned(), s("ACCOUNT#1")),
            ("name".to_owned(), s("𝔸")),
            ("revision".to_owned(), n(12345)),
            ("flag".to_owned(), AttributeValue::Bool(true)),
        ]);
        // pk 2+9, name 4+4, revision 8+(3+1), flag 4+1
        assert_eq!(item_size(&item), 11 + 8 + 12 + 5);
    }

    #[test]
    fn nested_values_add_their_overhead() {
        let list = AttributeValue::L(vec![s("ab"), s("c")]);
        assert_eq!(attribute_size(&list), 3 + (1 + 2) + (1 + 1));
        let map = AttributeValue::M(HashMap::from([("k".to_owned(), s("vv"))]));
        assert_eq!(attribute_size(&map), 3 + 1 + 1 + 2);
    }

    #[test]
    fn pending_counts_every_request() {
        let put = put_request(Item::from([("pk".to_owned(), s("a"))])).expect("put");
        let pending = HashMap::from([("t1".to_owned(), vec![put.clone(), put.clone()]), ("t2".to_owned(), vec![put])]);
        assert_eq!(unprocessed_writes(&pending), 3);
        let keys = KeysAndAttributes::builder()
            .keys(Item::from([("pk".to_owned(), s("a"))]))
            .keys(Item::from([("pk".to_owned(), s("b"))]))
            .build()
            .expect("keys");
        assert_eq!(unprocessed_keys(&HashMap::from([("t".to_owned(), keys)])), 2);
    }

    #[test]
    fn an_item_is_matched_to_its_key_whatever_the_order_of_the_answer() {
        let item = |pk: &str, sk: &str| {
            Item::from([
                ("pk".to_owned(), s(pk)),
                ("sk".to_owned(), s(sk)),
                ("body".to_owned(), s(format!("{pk}/{sk}"))),
            ])
        };
        let key = |pk: &str, sk: &str| Item::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))]);
        let mut items = vec![item("a", "2"), item("b", "1"), item("a", "1")];
        assert_eq!(take_item(&mut items, &key("a", "1")), Some(item("a", "1")));
        // Part of a key is not a match, and a taken item is gone.
        assert_eq!(take_item(&mut items, &key("b", "2")), None);
        assert_eq!(take_item(&mut items, &key("a", "1")), None);
        assert_eq!(take_item(&mut items, &key("b", "1")), Some(item("b", "1")));
        assert_eq!(items, vec![item("a", "2")]);
    }
}
