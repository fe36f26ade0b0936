//! Run records and their events in DynamoDB (DESIGN.md's run record; the stream's events by
//! sequence number, so a stream can be replayed after `Last-Event-ID` from any process).
//!
//! `RunsTable`: one item per run, key `run_id` (UUIDv7, so ordering by id is ordering by start),
//! indexes `by-agent` and `by-account` (hash the owner, range `run_id`), and the sparse
//! `open-by-account` (hash `open_account`, present only while the run is `started`). Beside the
//! runs, one count item per agent, `run_id = RUN_COUNT#{agent_id}` (no index key, so in no index),
//! changed in the same transaction as each run's creation and purge, so that a page of an agent's
//! runs reads the index only down to its depth (`page_for_agent`). `RunEventsTable`: key
//! `run_id` + `seq`, the event's name and its data as JSON text, kept 30 days (TTL).
//!
//! A run still `started` past its deadline plus `STALE_MARGIN` was lost with the process that ran
//! it (or, still waiting for a worker, with its queue message): reads mark it `failed` /
//! `timeout` (conditionally, so a run finishing at that moment keeps its own ending). A queued
//! run's deadline is the end of its wait in the queue until a worker picks it up, then its
//! timeout from that moment.
//!
//! One module per part: the record (`record`), its tables (`store`), and the conversation a
//! session's runs make (`session`).

mod record;
mod session;
mod store;

pub use record::{MAX_OUTPUT_BYTES, OPEN_SHARDS, RunInput, RunOrigin, RunRecord, RunStatus, RunType, STALE_MARGIN};
pub use session::session_key;
pub use store::{INDEX_SETTLE, MAX_RECENT_PAGES, RunCount, RunFilter, RunPage, RunStore};
