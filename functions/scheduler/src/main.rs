//! Lambda (EventBridge, every minute): fires every schedule due by now, exactly once per due
//! time, and moves it to its next due time (see `agent_runtime::scheduler`).

use aws_env::settings::process_env;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use platform_api::schedules::scheduler_from_settings;
use serde_json::{Value, json};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    // SAFETY: first thing in `main`, on the current-thread scheduler: no other thread exists.
    unsafe { aws_env::partitions::use_trimmed_table() };
    http_api::init_tracing()?;
    let scheduler =
        scheduler_from_settings(&aws_env::Clients::new(aws_env::function_config(&process_env)), &process_env)?;
    let scheduler = &scheduler;
    lambda_runtime::run(service_fn(move |_: LambdaEvent<Value>| async move {
        let report = scheduler.tick(chrono::Utc::now()).await?;
        tracing::info!(
            fired = report.fired,
            skipped = report.skipped,
            passed_over = report.passed_over,
            failed = report.failed,
            lost_runs_ended = report.lost_runs_ended,
            "tick"
        );
        Ok::<Value, Error>(json!({
            "fired": report.fired,
            "skipped": report.skipped,
            "passed_over": report.passed_over,
            "already_handled": report.already_handled,
            "failed": report.failed,
            "lost_runs_ended": report.lost_runs_ended,
        }))
    }))
    .await
}
