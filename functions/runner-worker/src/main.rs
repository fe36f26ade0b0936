//! Lambda (SQS trigger): executes queued agent runs (`agent_runtime::queue`), pausing before the
//! invocation's end and queueing a continuation; failed messages are reported as partial batch
//! failures.

use agent_runtime::lifecycle::Invocation;
use aws_env::settings::process_env;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use queues::{batch_response, sqs_records};
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    // SAFETY: first thing in `main`, on the current-thread scheduler: no other thread exists.
    unsafe { aws_env::partitions::use_trimmed_table() };
    http_api::init_tracing()?;
    let worker = platform_api::agent_runs::run_worker_from_settings(
        &aws_env::Clients::new(aws_env::function_config(&process_env)),
        &process_env,
    )?;
    let worker = &worker;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let invocation = Invocation::ending_at_epoch_ms(
            event.context.request_id.clone(),
            event.context.deadline,
            chrono::Utc::now(),
        );
        let retry = worker.handle_batch(&sqs_records(&event.payload), &invocation).await;
        Ok::<Value, Error>(batch_response(&retry))
    }))
    .await
}
