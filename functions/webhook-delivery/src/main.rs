//! Lambda (SQS trigger): delivers a batch of queued webhook deliveries concurrently, each endpoint
//! owner within its bound on attempts in flight, and reports the ones to retry as partial batch
//! failures. Organizations' meeting events are fanned out to the external applications linked
//! to them (`webhooks::audience`).

use aws_env::settings::process_env;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use platform_api::webhooks::deliverer_from_settings;
use queues::{batch_response, sqs_records};
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    // SAFETY: first thing in `main`, on the current-thread scheduler: no other thread exists.
    unsafe { aws_env::partitions::use_trimmed_table() };
    http_api::init_tracing()?;
    let aws = aws_env::Clients::new(aws_env::function_config(&process_env));
    let deliverer = deliverer_from_settings(&aws, &process_env)?
        .with_audience(meeting_data::store::ApplicationAudience::from_settings(&aws, &process_env)?);
    let deliverer = &deliverer;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let retry = deliverer.handle_batch(&sqs_records(&event.payload)).await;
        Ok::<Value, Error>(batch_response(&retry))
    }))
    .await
}
