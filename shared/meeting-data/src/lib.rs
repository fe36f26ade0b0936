//! Meeting data domain: organizations, meetings, external applications, access tokens, and their
//! DynamoDB storage.

pub mod access;
pub mod administration;
pub mod announcements;
pub mod import;
pub mod listing;
pub mod model;
pub mod recordings;
pub mod settings;
pub mod store;

pub use aws_env::clock;
