//! The agent execution engine every entry point uses (the backend's run route, the runner, its
//! queue worker, schedules): the run event stream, language model providers behind one trait,
//! and the decoders of what providers send.

pub mod a2a;
pub mod budget;
pub mod engine;
pub mod events;
pub mod follow;
pub mod health;
pub mod journal;
pub mod lifecycle;
pub mod providers;
pub mod queue;
pub mod quotas;
pub mod resolve;
pub mod runs;
pub mod scheduler;
pub mod spend;
pub mod timeouts;
pub mod tools;
pub mod trace;
pub mod usage;
