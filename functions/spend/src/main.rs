//! Lambda: `/usage` (an account's per-day totals) and `/budget` (its monthly budget).

use aws_env::settings::process_env;
use platform_api::SpendService;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    // SAFETY: first thing in `main`, on the current-thread scheduler: no other thread exists.
    unsafe { aws_env::partitions::use_trimmed_table() };
    http_api::init_tracing()?;
    let service =
        SpendService::from_settings(&aws_env::Clients::new(aws_env::function_config(&process_env)), &process_env)?;
    http_api::run_on_lambda(service).await
}
