//! SQS queues, beside `storage` (DynamoDB): the webhook delivery queue and the runner queue
//! share this client. A queue is addressed by URL (as CloudFormation's `!Ref` gives it) or,
//! locally, by name.

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use serde::Serialize;
use std::time::Duration;
use storage::StoreError;
use tokio::sync::OnceCell;

/// A queue, addressed by URL (as CloudFormation's `!Ref` gives it) or, locally, by name.
pub struct SqsQueue {
    sqs: aws_env::Lazy<aws_sdk_sqs::Client>,
    address: String,
    url: OnceCell<String>,
}

/// Longest visibility change we make: SQS allows 12 h counted from the receive, and the attempt
/// has already used some of it.
pub const MAX_DELAY: Duration = Duration::from_secs(11 * 3600 + 55 * 60);

/// Longest delay of a message sent (SQS's `DelaySeconds` limit).
pub const MAX_SEND_DELAY: Duration = Duration::from_secs(15 * 60);

impl SqsQueue {
    pub fn new(sqs: impl Into<aws_env::Lazy<aws_sdk_sqs::Client>>, address: String) -> Self {
        Self { sqs: sqs.into(), address, url: OnceCell::new() }
    }

    /// The queue URL; a name is looked up once (GetQueueUrl).
    pub async fn url(&self) -> Result<&str, StoreError> {
        self.url
            .get_or_try_init(|| async {
                if self.address.starts_with("http://") || self.address.starts_with("https://") {
                    return Ok(self.address.clone());
                }
                let output = self
                    .sqs
                    .get_queue_url()
                    .queue_name(&self.address)
                    .send()
                    .await
                    .map_err(|err| StoreError::sqs("GetQueueUrl", err))?;
                Ok(output.queue_url.unwrap_or_default())
            })
            .await
            .map(String::as_str)
    }

    /// Enqueues messages as JSON (SendMessageBatch, 10 a call).
    pub async fn send<T: Serialize>(&self, messages: &[T]) -> Result<(), StoreError> {
        self.send_after(messages, Duration::ZERO).await
    }

    /// Enqueues messages as JSON, each received no sooner than `delay` from now (SQS's
    /// `DelaySeconds`, at most 15 minutes).
    pub async fn send_after<T: Serialize>(&self, messages: &[T], delay: Duration) -> Result<(), StoreError> {
        let delay_seconds = i32::try_from(delay.min(MAX_SEND_DELAY).as_secs()).unwrap_or(0);
        if messages.is_empty() {
            return Ok(());
        }
        let url = self.url().await?;
        for chunk in messages.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, message)| {
                    let body = serde_json::to_string(message).unwrap_or_default();
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body)
                        .set_delay_seconds((delay_seconds > 0).then_some(delay_seconds))
                        .build()
                        .map_err(|err| StoreError::Sqs { operation: "SendMessageBatch", message: err.to_string() })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let output = self
                .sqs
                .send_message_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|err| StoreError::sqs("SendMessageBatch", err))?;
            if !output.failed.is_empty() {
                return Err(StoreError::Sqs {
                    operation: "SendMessageBatch",
                    message: format!("{} messages refused", output.failed.len()),
                });
            }
        }
        Ok(())
    }

    /// Makes a received message visible again after `delay` (the retry schedule).
    pub async fn retry_later(&self, receipt_handle: &str, delay: Duration) -> Result<(), StoreError> {
        let seconds = i32::try_from(delay.min(MAX_DELAY).as_secs()).unwrap_or(i32::MAX);
        self.sqs
            .change_message_visibility()
            .queue_url(self.url().await?)
            .receipt_handle(receipt_handle)
            .visibility_timeout(seconds)
            .send()
            .await
            .map_err(|err| StoreError::sqs("ChangeMessageVisibility", err))?;
        Ok(())
    }

    /// Receives up to 10 messages, waiting up to `wait` (the local worker's poll).
    pub async fn receive(&self, wait: Duration) -> Result<Vec<ReceivedMessage>, StoreError> {
        let output = self
            .sqs
            .receive_message()
            .queue_url(self.url().await?)
            .max_number_of_messages(10)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
            .wait_time_seconds(i32::try_from(wait.as_secs()).unwrap_or(0))
            .send()
            .await
            .map_err(|err| StoreError::sqs("ReceiveMessage", err))?;
        Ok(output
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|message| ReceivedMessage {
                receive_count: message
                    .attributes
                    .as_ref()
                    .and_then(|attributes| {
                        attributes.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
                    })
                    .and_then(|count| count.parse().ok())
                    .unwrap_or(1),
                message_id: message.message_id.unwrap_or_default(),
                receipt_handle: message.receipt_handle.unwrap_or_default(),
                body: message.body.unwrap_or_default(),
            })
            .collect())
    }

    /// Deletes a handled message (Lambda's event source mapping does this itself).
    pub async fn delete(&self, receipt_handle: &str) -> Result<(), StoreError> {
        self.sqs
            .delete_message()
            .queue_url(self.url().await?)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|err| StoreError::sqs("DeleteMessage", err))?;
        Ok(())
    }

    /// How many messages wait and how many are being handled (approximate, as SQS counts them;
    /// GetQueueAttributes).
    pub async fn depth(&self) -> Result<QueueDepth, StoreError> {
        use aws_sdk_sqs::types::QueueAttributeName as Name;
        let output = self
            .sqs
            .get_queue_attributes()
            .queue_url(self.url().await?)
            .attribute_names(Name::ApproximateNumberOfMessages)
            .attribute_names(Name::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(|err| StoreError::sqs("GetQueueAttributes", err))?;
        let count = |name: Name| {
            output.attributes().and_then(|attributes| attributes.get(&name)).and_then(|n| n.parse().ok()).unwrap_or(0)
        };
        Ok(QueueDepth {
            waiting: count(Name::ApproximateNumberOfMessages),
            in_flight: count(Name::ApproximateNumberOfMessagesNotVisible),
        })
    }
}

/// A queue's approximate depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QueueDepth {
    pub waiting: u64,
    pub in_flight: u64,
}

/// A message as the worker gets it (from Lambda's SQS event or a local receive).
#[derive(Debug, Clone)]
pub struct ReceivedMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    /// How many times SQS has handed the message out, this time included.
    pub receive_count: u32,
}

/// The messages of a Lambda SQS event (`Records[].messageId`, `receiptHandle`, `body`).
pub fn sqs_records(event: &serde_json::Value) -> Vec<ReceivedMessage> {
    let text = |record: &serde_json::Value, name: &str| {
        record.get(name).and_then(|v| v.as_str()).unwrap_or_default().to_owned()
    };
    event
        .get("Records")
        .and_then(|records| records.as_array())
        .into_iter()
        .flatten()
        .map(|record| ReceivedMessage {
            receive_count: record
                .pointer("/attributes/ApproximateReceiveCount")
                .and_then(|count| count.as_str())
                .and_then(|count| count.parse().ok())
                .unwrap_or(1),
            message_id: text(record, "messageId"),
            receipt_handle: text(record, "receiptHandle"),
            body: text(record, "body"),
        })
        .collect()
}

/// The partial batch response naming the messages to retry.
pub fn batch_response(retry: &[String]) -> serde_json::Value {
    let failures: Vec<serde_json::Value> = retry.iter().map(|id| serde_json::json!({ "itemIdentifier": id })).collect();
    serde_json::json!({ "batchItemFailures": failures })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lambda_sqs_events_are_read_and_failures_reported_by_message_id() {
        let event = json!({"Records": [
            {"messageId": "m-1", "receiptHandle": "r-1", "body": "{}", "eventSource": "aws:sqs"},
            {"messageId": "m-2", "receiptHandle": "r-2", "body": "x", "attributes": {"ApproximateReceiveCount": "3"}}
        ]});
        let messages = sqs_records(&event);
        assert_eq!(messages.len(), 2);
        assert_eq!((messages[1].message_id.as_str(), messages[1].receipt_handle.as_str()), ("m-2", "r-2"));
        assert_eq!((messages[0].receive_count, messages[1].receive_count), (1, 3));
        assert!(sqs_records(&json!({"unexpected": true})).is_empty());
        assert_eq!(batch_response(&["m-2".to_owned()]), json!({"batchItemFailures": [{"itemIdentifier": "m-2"}]}));
        assert_eq!(batch_response(&[]), json!({"batchItemFailures": []}));
    }
}
