//! The storage layer's one error type.

use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};

/// A storage operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A DynamoDB call failed (after the SDK's own retries).
    #[error("DynamoDB {operation} failed: {message}")]
    Dynamo { operation: &'static str, message: String },
    /// DynamoDB kept leaving part of a batch unprocessed (throttling) through every retry.
    #[error("DynamoDB {operation} left {remaining} request(s) unprocessed after {attempts} calls")]
    Unprocessed { operation: &'static str, remaining: usize, attempts: u32 },
    /// A Secrets Manager call failed.
    #[error("Secrets Manager {operation} failed: {message}")]
    Secrets { operation: &'static str, message: String },
    /// An SQS call failed.
    #[error("SQS {operation} failed: {message}")]
    Sqs { operation: &'static str, message: String },
    /// An item did not have the shape its type expects, or a value could not become an item.
    #[error("stored item could not be read or written: {0}")]
    Decode(#[from] serde_dynamo::Error),
    /// An attribute read by hand (`Attributes`) was missing or of another type.
    #[error("stored item could not be read: attribute {name} is not {expected}")]
    Attribute { name: String, expected: &'static str },
    /// A value kept as JSON text could not be encoded or decoded.
    #[error("{what} could not be encoded or decoded as JSON: {message}")]
    Json { what: &'static str, message: String },
    /// A conditional write found the item changed since it was read.
    #[error("the record changed concurrently; try again")]
    Conflict,
}

fn context<E: std::error::Error + 'static, R: std::fmt::Debug>(err: SdkError<E, R>) -> String {
    DisplayErrorContext(err).to_string()
}

impl StoreError {
    /// A failed DynamoDB call, with the SDK's whole error context.
    pub fn dynamo<E: std::error::Error + 'static, R: std::fmt::Debug>(
        operation: &'static str,
        err: SdkError<E, R>,
    ) -> Self {
        Self::Dynamo { operation, message: context(err) }
    }

    /// A failed Secrets Manager call.
    pub fn secrets<E: std::error::Error + 'static, R: std::fmt::Debug>(
        operation: &'static str,
        err: SdkError<E, R>,
    ) -> Self {
        Self::Secrets { operation, message: context(err) }
    }

    /// A failed SQS call.
    pub fn sqs<E: std::error::Error + 'static, R: std::fmt::Debug>(
        operation: &'static str,
        err: SdkError<E, R>,
    ) -> Self {
        Self::Sqs { operation, message: context(err) }
    }

    /// A DynamoDB request that could not be built (a required field missing).
    pub fn request(operation: &'static str, err: impl std::fmt::Display) -> Self {
        Self::Dynamo { operation, message: format!("request could not be built: {err}") }
    }

    /// A JSON text attribute (`what`: "agent body") that could not be encoded or decoded.
    pub fn json(what: &'static str, err: serde_json::Error) -> Self {
        Self::Json { what, message: err.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_service_that_failed() {
        let sqs = StoreError::Sqs { operation: "SendMessageBatch", message: "timeout".into() };
        assert_eq!(sqs.to_string(), "SQS SendMessageBatch failed: timeout");
        let secrets = StoreError::Secrets { operation: "GetSecretValue", message: "denied".into() };
        assert_eq!(secrets.to_string(), "Secrets Manager GetSecretValue failed: denied");
        let unprocessed = StoreError::Unprocessed { operation: "BatchWriteItem", remaining: 3, attempts: 6 };
        assert_eq!(unprocessed.to_string(), "DynamoDB BatchWriteItem left 3 request(s) unprocessed after 6 calls");
    }
}
