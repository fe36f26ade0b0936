//! Lambda: the OpenAPI documents and reference pages of the API `DOCS_API` names (`platform`:
//! the backend and the meeting data API; `runner`), without authentication.

use api_docs::DocsService;
use aws_env::settings::process_env;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    http_api::init_tracing();
    http_api::run_on_lambda(DocsService::from_settings(&process_env)?).await
}
