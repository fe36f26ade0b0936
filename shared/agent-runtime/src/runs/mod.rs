//! Run records and their events in DynamoDB (DESIGN.md's run record; the stream's events by
//! sequence number, so a stream can be replayed after `Last-Event-ID` from any process).
//!
//! `RunsTable`: one item per run, key `run_id` (UUIDv7, so ordering by id is ordering by start),
//! indexes `by-agent` and `by-account` (hash the owner, range `run_id`), the sparse
//! `open-by-account` (hash `open_account`, present only while the run is `started`), and the
//! keys-only indexes a filtered list pages through (`by-agent-cell`, `by-schedule-cell`,
//! `open-by-agent`). `RunCountsTable`: each agent's run counts by creation day and cell, changed
//! in the same transaction as each run's creation, end and purge, so that a page of an agent's
//! runs, filtered or not, reads only down to its depth (`page_for_agent`; `counts` explains the
//! cells and the retention). `RunEventsTable`: key `run_id` + `seq`, the event's name and its
//! data as JSON text, kept 30 days (TTL).
//!
//! A run still `started` past its deadline plus `STALE_MARGIN` was lost with the process that ran
//! it (or, still waiting for a worker, with its queue message): reads mark it `failed` /
//! `timeout` (conditionally, so a run finishing at that moment keeps its own ending). A queued
//! run's deadline is the end of its wait in the queue until a worker picks it up, then its
//! timeout from that moment.
//!
//! One module per part: the record (`record`), its retention and counts (`counts`), its tables
//! (`store`), and the conversation a session's runs make (`session`).

mod counts;
mod record;
mod session;
mod store;

pub use counts::{DEFAULT_RETENTION_DAYS, MIN_RETENTION_DAYS, Retention, RunCounts, Tally};
pub use record::{
    MAX_OUTPUT_BYTES, OPEN_SHARDS, RunInput, RunOrigin, RunRecord, RunStatus, RunTrace, RunType, STALE_MARGIN,
};
pub use session::session_key;
pub(crate) use store::transact;
pub use store::{INDEX_SETTLE, MAX_RECENT_PAGES, RunFilter, RunPage, RunStore, RunTables};
