//! DynamoDB storage, one store per aggregate. Key schemes live here and nowhere else.

pub mod apps;
pub mod directory;
mod dynamo;
pub mod meetings;

pub use apps::AppStore;
pub use directory::DirectoryStore;
pub use dynamo::Item;
pub use meetings::MeetingStore;

use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};

/// A storage operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("DynamoDB {operation} failed: {message}")]
    Dynamo { operation: &'static str, message: String },
    #[error("DynamoDB {0} left items unprocessed after retries")]
    Throttled(&'static str),
    #[error("stored item could not be read: {0}")]
    Decode(#[from] serde_dynamo::Error),
    #[error("the record changed concurrently; try again")]
    Conflict,
}

impl StoreError {
    fn dynamo<E: std::error::Error + 'static, R: std::fmt::Debug>(
        operation: &'static str,
        err: SdkError<E, R>,
    ) -> Self {
        Self::Dynamo { operation, message: DisplayErrorContext(err).to_string() }
    }
}

/// Whether an SDK error is a failed condition check (a conflict, not a fault).
fn is_condition_failure<R>(err: &SdkError<impl aws_sdk_dynamodb::error::ProvideErrorMetadata, R>) -> bool {
    err.as_service_error().and_then(|e| e.code()) == Some("ConditionalCheckFailedException")
}
