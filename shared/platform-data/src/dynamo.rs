//! The DynamoDB helpers every platform store uses, from the shared `storage` crate: complete and
//! bounded queries, batched reads and writes retried with backoff and jitter, item sizes.

pub use storage::{
    Item, MAX_ITEM_BYTES, QueryPage, Read, applied, batch_get, batch_write, delete_request, get_item, get_together,
    is_condition_failure, item_size, put_request, query_all, query_down_to, query_page,
};
