//! What every DynamoDB store of the project shares, written once: batched reads and writes that
//! retry what DynamoDB leaves unprocessed with exponential backoff and full jitter, complete and
//! bounded queries, the size of an item, the one error type of the storage layer (DynamoDB,
//! Secrets Manager and SQS failures each named as what they are), and the one rate limiter (a
//! token bucket per API key or client, `rate_limit`).

mod attributes;
mod backoff;
mod dynamo;
mod error;
pub mod quota;
pub mod rate_limit;

pub use attributes::Attributes;
pub use backoff::Backoff;
pub use dynamo::{
    BATCH_GET_LIMIT, BATCH_WRITE_LIMIT, Item, MAX_ITEM_BYTES, QueryPage, Read, applied, attribute_size, batch_get,
    batch_write, delete_request, get_item, get_together, is_condition_failure, is_transaction_conflict, item_size, n,
    put_request, query_all, query_down_to, query_page, s,
};
pub use error::StoreError;
