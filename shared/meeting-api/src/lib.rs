//! HTTP handlers of the meeting data API: token endpoints, meeting reads and the webhooks of
//! external applications.
//!
//! Each service implements [`http_api::HttpFunction`]; the Lambda binaries in `functions/` only
//! build one and run it.

pub mod auth;
pub mod bearer;
pub mod client_limit;
pub mod downloads;
pub mod meetings;
pub mod views;
pub mod webhooks;

pub use auth::AuthService;
pub use meetings::MeetingsService;
pub use webhooks::ExternalWebhooksService;
