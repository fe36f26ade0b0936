//! Webhooks, following the Standard Webhooks specification: endpoints an account registers,
//! events published once and delivered to every matching endpoint through SQS, signed, retried
//! on a schedule, every attempt recorded.

pub mod audience;
pub mod delivery;
pub mod endpoints;
pub mod events;
pub mod fairness;
pub mod manage;
pub mod messages;
pub mod owner;
pub mod policy;
pub mod publisher;
pub mod settings;
pub mod signing;
pub mod store;
pub mod sweeper;
