//! Lambda (EventBridge schedule): queues again the pending webhook deliveries whose next attempt
//! is overdue (their message was never sent or was lost).

use aws_env::settings::process_env;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use platform_api::webhooks::sweeper_from_settings;
use serde_json::{Value, json};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    // SAFETY: first thing in `main`, on the current-thread scheduler: no other thread exists.
    unsafe { aws_env::partitions::use_trimmed_table() };
    http_api::init_tracing()?;
    let sweeper = sweeper_from_settings(&aws_env::Clients::new(aws_env::function_config(&process_env)), &process_env)?;
    let sweeper = &sweeper;
    lambda_runtime::run(service_fn(move |_: LambdaEvent<Value>| async move {
        let report = sweeper.sweep().await?;
        Ok::<Value, Error>(json!({ "queued": report.queued, "failed": report.failed }))
    }))
    .await
}
