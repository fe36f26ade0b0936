//! Lambda mode's event sources: the SQS event source mapping and the EventBridge schedules of
//! `template.yaml`, invoking the function binaries with the events AWS sends them.

use crate::lambda::Invoker;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use stack::{QueueTrigger, Template};
use std::sync::Arc;
use std::time::Duration;

const REGION: &str = "us-east-1";
const ACCOUNT: &str = "123456789012";

/// The SQS event Lambda's event source mapping sends for `messages` of the queue `queue_name`.
pub fn sqs_event(queue_name: &str, messages: &[aws_sdk_sqs::types::Message]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|message| {
            let attributes: serde_json::Map<String, Value> = message
                .attributes()
                .into_iter()
                .flatten()
                .map(|(name, value)| (name.as_str().to_owned(), Value::String(value.clone())))
                .collect();
            json!({
                "messageId": message.message_id(),
                "receiptHandle": message.receipt_handle(),
                "body": message.body().unwrap_or_default(),
                "attributes": attributes,
                "messageAttributes": {},
                "md5OfBody": message.md5_of_body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{queue_name}"),
                "awsRegion": REGION,
            })
        })
        .collect();
    json!({ "Records": records })
}

/// The message ids a function's answer to an SQS batch asks to retry (`batchItemFailures`);
/// `None` when the whole batch failed (a function error, an unreadable answer).
pub fn items_to_retry(answer: &Value) -> Option<Vec<String>> {
    let failures = answer.get("batchItemFailures")?.as_array()?;
    failures.iter().map(|failure| failure.get("itemIdentifier")?.as_str().map(str::to_owned)).collect()
}

/// The EventBridge `Scheduled Event` a schedule rule named `rule` sends at `time`.
pub fn scheduled_event(rule: &str, time: chrono::DateTime<chrono::Utc>) -> Value {
    json!({
        "version": "0",
        "id": uuid::Uuid::new_v4().to_string(),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": time.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "region": REGION,
        "resources": [format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/{rule}")],
        "detail": {},
    })
}

/// The period of a `rate(N unit)` schedule expression (`cron(…)` is not read).
pub fn rate_period(expression: &str) -> Option<Duration> {
    let inner = expression.trim().strip_prefix("rate(")?.strip_suffix(')')?;
    let (count, unit) = inner.trim().split_once(' ')?;
    let count: u64 = count.parse().ok().filter(|count| *count > 0)?;
    let seconds = match unit.trim() {
        "minute" | "minutes" => 60,
        "hour" | "hours" => 3_600,
        "day" | "days" => 86_400,
        _ => return None,
    };
    Some(Duration::from_secs(count * seconds))
}

/// Invokes `binary` with `event` and reads its whole answer: `None` when the invocation failed.
async fn invoke_whole(invoker: &Invoker, binary: &str, event: &Value) -> Option<Value> {
    let answer = match invoker.invoke(binary, event).await {
        Ok(answer) => answer,
        Err(err) => {
            tracing::error!(%binary, error = %err, "invocation failed");
            return None;
        }
    };
    let status = answer.status();
    let bytes = answer.into_body().collect().await.ok()?.to_bytes();
    if !status.is_success() {
        tracing::error!(%binary, error = %String::from_utf8_lossy(&bytes), "the function failed");
        return None;
    }
    serde_json::from_slice(&bytes).ok()
}

/// One SQS event source mapping: polls the queue, gathers batches as the template says, invokes
/// the function with each (at most `concurrency` at once) and deletes what it handled.
pub struct QueueMapping {
    pub sqs: aws_sdk_sqs::Client,
    pub queue_name: String,
    pub binary: String,
    pub trigger: QueueTrigger,
    pub concurrency: usize,
}

impl QueueMapping {
    /// Polls until `shutdown`.
    pub async fn run(self, invoker: Arc<Invoker>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let queue_url = loop {
            match self.sqs.get_queue_url().queue_name(&self.queue_name).send().await {
                Ok(output) => break output.queue_url.unwrap_or_default(),
                Err(err) => {
                    tracing::error!(queue = %self.queue_name, error = %err, "queue not found");
                    tokio::select! {
                        _ = &mut shutdown => return,
                        _ = tokio::time::sleep(Duration::from_secs(2)) => continue,
                    }
                }
            }
        };
        let mapping = Arc::new(self);
        let invocations = Arc::new(tokio::sync::Semaphore::new(mapping.concurrency.max(1)));
        loop {
            let permit = tokio::select! {
                _ = &mut shutdown => return,
                permit = Arc::clone(&invocations).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
            let batch = tokio::select! {
                _ = &mut shutdown => return,
                batch = mapping.gather(&queue_url) => batch,
            };
            if batch.is_empty() {
                continue;
            }
            let (mapping, invoker, queue_url) = (Arc::clone(&mapping), Arc::clone(&invoker), queue_url.clone());
            tokio::spawn(async move {
                mapping.deliver(&invoker, &queue_url, batch).await;
                drop(permit);
            });
        }
    }

    /// Up to `batch_size` messages, receiving for at most the batching window (a long poll of a
    /// second when there is none, so shutdown stays prompt).
    async fn gather(&self, queue_url: &str) -> Vec<aws_sdk_sqs::types::Message> {
        let window = Duration::from_secs(u64::from(self.trigger.batching_window_seconds));
        let until = tokio::time::Instant::now() + window;
        let mut batch = Vec::new();
        loop {
            let wanted = self.trigger.batch_size.saturating_sub(u32::try_from(batch.len()).unwrap_or(u32::MAX)).min(10);
            let received = self
                .sqs
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(i32::try_from(wanted).unwrap_or(10))
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .wait_time_seconds(1)
                .send()
                .await;
            match received {
                Ok(output) => batch.extend(output.messages.unwrap_or_default()),
                Err(err) => {
                    tracing::error!(queue = %self.queue_name, error = %err, "queue not readable");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
            let full = batch.len() >= self.trigger.batch_size as usize;
            if full || tokio::time::Instant::now() >= until {
                return batch;
            }
        }
    }

    /// Invokes the function with `batch` and deletes what it handled: with
    /// `ReportBatchItemFailures` every message it does not name, otherwise the whole batch when
    /// it succeeded. What stays reappears after the visibility timeout (and, past the redrive
    /// policy's `maxReceiveCount`, moves to the dead-letter queue).
    async fn deliver(&self, invoker: &Invoker, queue_url: &str, batch: Vec<aws_sdk_sqs::types::Message>) {
        let event = sqs_event(&self.queue_name, &batch);
        let answer = invoke_whole(invoker, &self.binary, &event).await;
        let retry = match (&answer, self.trigger.reports_batch_item_failures) {
            (None, _) => return,
            // Lambda reads an answer without the list as a whole success.
            (Some(answer), true) => items_to_retry(answer).unwrap_or_default(),
            (Some(_), false) => Vec::new(),
        };
        for message in batch.iter().filter(|message| !retry.iter().any(|id| Some(id.as_str()) == message.message_id()))
        {
            let Some(receipt_handle) = message.receipt_handle() else { continue };
            if let Err(err) = self.sqs.delete_message().queue_url(queue_url).receipt_handle(receipt_handle).send().await
            {
                tracing::error!(queue = %self.queue_name, error = %err, "handled message not deleted");
            }
        }
    }
}

/// Every SQS event source mapping of `template` for the stack `prefix`.
pub fn queue_mappings(
    template: &Template,
    prefix: &str,
    sqs: &aws_sdk_sqs::Client,
    concurrency: usize,
) -> Vec<QueueMapping> {
    template
        .functions
        .iter()
        .flat_map(|function| {
            function.queue_triggers.iter().map(move |trigger| QueueMapping {
                sqs: sqs.clone(),
                queue_name: stack::physical_name(prefix, &trigger.queue),
                binary: function.binary.clone(),
                trigger: trigger.clone(),
                concurrency,
            })
        })
        .collect()
}

/// A schedule rule: invokes `binary` with EventBridge's scheduled event every `period`, at the
/// multiples of the period since the epoch (`rate(1 minute)` fires at each minute's start).
pub struct ScheduleRule {
    pub rule: String,
    pub binary: String,
    pub period: Duration,
}

impl ScheduleRule {
    /// Fires until `shutdown`.
    pub async fn run(self, invoker: Arc<Invoker>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let wait = until_next_fire(self.period, chrono::Utc::now());
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(wait) => {}
            }
            let event = scheduled_event(&self.rule, chrono::Utc::now());
            if let Some(answer) = invoke_whole(&invoker, &self.binary, &event).await {
                tracing::debug!(binary = %self.binary, %answer, "scheduled invocation");
            }
        }
    }
}

/// How long until a rule of `period` next fires after `now`: at the period's multiples since the
/// epoch, so `rate(1 minute)` fires at each minute's start and `rate(5 minutes)` at :00, :05, ….
pub fn until_next_fire(period: Duration, now: chrono::DateTime<chrono::Utc>) -> Duration {
    let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
    let now_ms = u64::try_from(now.timestamp_millis()).unwrap_or(0);
    Duration::from_millis(period_ms - now_ms % period_ms)
}

/// Every schedule rule of `template` for the stack `prefix` (`rate(…)` ones; a `cron(…)` one is
/// an error: none is used, and reading it is left until one is).
pub fn schedule_rules(template: &Template, prefix: &str) -> Result<Vec<ScheduleRule>, String> {
    let mut rules = Vec::new();
    for function in &template.functions {
        for schedule in &function.schedules {
            let period = rate_period(&schedule.expression).ok_or_else(|| {
                format!("{}: the schedule {:?} is not rate(N unit)", function.logical_id, schedule.expression)
            })?;
            let rule = format!("{prefix}{}{}", function.logical_id, schedule.name);
            rules.push(ScheduleRule { rule, binary: function.binary.clone(), period });
        }
    }
    Ok(rules)
}

/// Invokes every function once, all at once, and waits for their answers: `cargo lambda watch`
/// builds and starts each binary when it starts, so the first request does not wait for that.
/// An HTTP function gets a request no route serves, a queue's function an empty batch, a
/// scheduled one its scheduled event (one tick more than its schedule, at start).
pub async fn warm_up(invoker: &Invoker, template: &Template) {
    let invocations = invoker.binaries().map(|binary| {
        let function = template.functions.iter().find(|function| function.binary == binary);
        let event = match function {
            Some(function) if !function.schedules.is_empty() => {
                scheduled_event(&format!("{}-warm-up", function.logical_id), chrono::Utc::now())
            }
            Some(function) if !function.queue_triggers.is_empty() => serde_json::json!({ "Records": [] }),
            _ => {
                let request =
                    http::Request::get("http://localhost/_dev/warm-up").body(http_api::Body::Empty).unwrap_or_default();
                let route = stack::Route {
                    api: crate::BACKEND_API.to_owned(),
                    method: "GET".to_owned(),
                    path: "/_dev/warm-up".to_owned(),
                    streamed: false,
                };
                let integration =
                    crate::gateway::Integration { route, stage: "Prod".to_owned(), binary_media_types: Vec::new() };
                crate::gateway::request_event(&integration, &request)
            }
        };
        async move {
            match invoker.invoke(binary, &event).await {
                Ok(answer) => {
                    let _ = answer.into_body().collect().await;
                }
                Err(err) => tracing::warn!(error = %err, "warm-up invocation failed"),
            }
        }
    });
    futures_util::future::join_all(invocations).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_read_in_minutes_hours_and_days() {
        assert_eq!(rate_period("rate(1 minute)"), Some(Duration::from_secs(60)));
        assert_eq!(rate_period("rate(5 minutes)"), Some(Duration::from_secs(300)));
        assert_eq!(rate_period("rate(2 hours)"), Some(Duration::from_secs(7_200)));
        assert_eq!(rate_period("rate(1 day)"), Some(Duration::from_secs(86_400)));
        assert_eq!(rate_period("rate(0 minutes)"), None);
        assert_eq!(rate_period("cron(0 12 * * ? *)"), None);
    }

    #[test]
    fn rules_fire_at_the_multiples_of_their_period() {
        let at = |text: &str| chrono::DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&chrono::Utc);
        let minute = Duration::from_secs(60);
        assert_eq!(until_next_fire(minute, at("2026-11-26T04:00:45Z")), Duration::from_secs(15));
        assert_eq!(until_next_fire(minute, at("2026-11-26T04:00:00Z")), minute);
        let five = Duration::from_secs(300);
        assert_eq!(until_next_fire(five, at("2026-11-26T04:03:00Z")), Duration::from_secs(120));
    }

    #[test]
    fn an_sqs_event_carries_each_message_as_the_event_source_mapping_sends_it() {
        let message = aws_sdk_sqs::types::Message::builder()
            .message_id("m1")
            .receipt_handle("r1")
            .body("{\"run\":1}")
            .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "2")
            .build();
        let event = sqs_event("local-RunnerQueue", &[message]);
        let record = &event["Records"][0];
        assert_eq!((record["messageId"].as_str(), record["receiptHandle"].as_str()), (Some("m1"), Some("r1")));
        assert_eq!(record["body"], "{\"run\":1}");
        assert_eq!(record["attributes"]["ApproximateReceiveCount"], "2");
        assert_eq!(record["eventSourceARN"], "arn:aws:sqs:us-east-1:123456789012:local-RunnerQueue");
        // What the workers read back.
        let read = queues::sqs_records(&event);
        assert_eq!((read[0].message_id.as_str(), read[0].receive_count), ("m1", 2));
    }

    #[test]
    fn batch_item_failures_name_the_messages_to_retry() {
        let answer = json!({"batchItemFailures": [{"itemIdentifier": "m2"}]});
        assert_eq!(items_to_retry(&answer), Some(vec!["m2".to_owned()]));
        assert_eq!(items_to_retry(&json!({"batchItemFailures": []})), Some(vec![]));
        assert_eq!(items_to_retry(&json!({"fired": 1})), None);
    }

    #[test]
    fn a_scheduled_event_is_eventbridges() {
        let event = scheduled_event("local-SchedulerFunctionTick", chrono::Utc::now());
        assert_eq!(
            (event["detail-type"].as_str(), event["source"].as_str()),
            (Some("Scheduled Event"), Some("aws.events"))
        );
        assert_eq!(event["resources"][0], "arn:aws:events:us-east-1:123456789012:rule/local-SchedulerFunctionTick");
    }
}
