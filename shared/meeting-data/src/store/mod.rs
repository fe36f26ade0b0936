//! DynamoDB storage, one store per aggregate. Key schemes live here and nowhere else.

pub mod apps;
pub mod directory;
pub mod meetings;

pub use apps::{AppStore, ApplicationAudience};
pub use directory::DirectoryStore;
pub use meetings::MeetingStore;
/// The storage layer's one error type and DynamoDB helpers, shared with the platform stores.
pub use storage::{Item, StoreError};
