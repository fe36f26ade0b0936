//! Lambda (response streaming, its own REST API): the runner service, `/execute/…`,
//! `/tools/validation`, `/monitoring/…` and `/health-check…` behind `X-API-Key`.

use aws_env::settings::process_env;
use platform_api::RunnerService;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    // SAFETY: first thing in `main`, on the current-thread scheduler: no other thread exists.
    unsafe { aws_env::partitions::use_trimmed_table() };
    http_api::init_tracing()?;
    let service =
        RunnerService::from_settings(&aws_env::Clients::new(aws_env::function_config(&process_env)), &process_env)?;
    http_api::run_streaming_on_lambda(service).await
}
