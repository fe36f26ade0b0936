//! Lambda: `/api/v1/external/webhooks/…`, an external application's webhook endpoints.

use meeting_api::ExternalWebhooksService;
use meeting_data::settings::process_env;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    // SAFETY: first thing in `main`, on the current-thread scheduler: no other thread exists.
    unsafe { aws_env::partitions::use_trimmed_table() };
    http_api::init_tracing()?;
    let aws = aws_env::Clients::new(aws_env::function_config(&process_env));
    let service = ExternalWebhooksService::from_settings(&aws, &process_env)?;
    http_api::run_on_lambda(service).await
}
