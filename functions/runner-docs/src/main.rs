//! Lambda: the runner's OpenAPI document and reference page, without authentication.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    http_api::init_tracing()?;
    http_api::run_on_lambda(api_docs::DocsService::runner()).await
}
