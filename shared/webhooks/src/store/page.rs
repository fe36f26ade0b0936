//! Newest-first pages of a Query, read within a budget of calls.

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use chrono::{DateTime, Utc};
use platform_data::StoreError;
use platform_data::dynamo::Item;
use uuid::Uuid;

/// A time window, `[since, until]`.
pub type Window = (DateTime<Utc>, DateTime<Utc>);

/// Queries one page may make: a filter can leave a Query's items out, and a Query stops at 1 MB.
pub const MAX_PAGE_QUERIES: usize = 5;

/// A page of a newest-first listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Where the next page starts (the id of the last item read); `None` after the last page.
    pub next: Option<Uuid>,
}

impl<T> Page<T> {
    /// Reads up to `limit` items: Queries with `Limit` (`limit + 1`, to tell whether more
    /// follow), at most `MAX_PAGE_QUERIES` of them, leaving out the item whose sort key is
    /// `skip` (an inclusive bound's cursor). When the budget is spent before the page is full,
    /// the page is shorter and `next` resumes after the last item evaluated.
    pub(super) async fn read(
        query: QueryFluentBuilder,
        limit: usize,
        skip: Option<&str>,
        prefix: &str,
        decode: fn(Item) -> Result<T, StoreError>,
    ) -> Result<Self, StoreError> {
        let sort_key = |item: &Item| item.get("sk").and_then(|value| value.as_s().ok()).cloned();
        let id = |sk: Option<String>| sk.and_then(|sk| sk.strip_prefix(prefix).and_then(|id| Uuid::parse_str(id).ok()));
        let per_query = i32::try_from(limit.saturating_add(1)).unwrap_or(i32::MAX);
        let mut items: Vec<Item> = Vec::new();
        let mut start = None;
        for _ in 0..MAX_PAGE_QUERIES {
            let output = query
                .clone()
                .limit(per_query)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|err| StoreError::dynamo("Query", err))?;
            for item in output.items.unwrap_or_default() {
                if skip.is_some_and(|skip| sort_key(&item).as_deref() == Some(skip)) {
                    continue;
                }
                if items.len() == limit {
                    // One more than the page: the next page starts after its last item.
                    let next = id(items.last().and_then(sort_key));
                    return Ok(Self { items: items.into_iter().map(decode).collect::<Result<_, _>>()?, next });
                }
                items.push(item);
            }
            start = output.last_evaluated_key.filter(|key| !key.is_empty());
            if start.is_none() || items.len() == limit {
                break;
            }
        }
        let next = match start {
            None => None,
            Some(_) if items.len() == limit => id(items.last().and_then(sort_key)),
            Some(key) => id(sort_key(&key)),
        };
        Ok(Self { items: items.into_iter().map(decode).collect::<Result<_, _>>()?, next })
    }
}

/// The sort-key range of items created in `[since, until]` (ids are UUIDv7: their text starts
/// with the creation time in milliseconds), ending at `cursor` (inclusive) when given; `None`
/// when the range is empty (DynamoDB refuses a BETWEEN whose bounds are reversed).
pub(super) fn sort_key_window(prefix: &str, (since, until): Window, cursor: Option<Uuid>) -> Option<(String, String)> {
    let bound = |at: DateTime<Utc>| {
        let ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
        format!("{prefix}{:08x}-{:04x}", ms >> 16, ms & 0xffff)
    };
    let to = format!("{}~", bound(until));
    let to = match cursor.map(|id| format!("{prefix}{id}")) {
        Some(after) if after < to => after,
        _ => to,
    };
    let from = bound(since);
    (from <= to).then_some((from, to))
}
