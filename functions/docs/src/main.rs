//! Lambda: the backend's and the meeting data API's OpenAPI documents and reference pages,
//! without authentication.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    http_api::init_tracing()?;
    http_api::run_on_lambda(api_docs::DocsService::platform()).await
}
