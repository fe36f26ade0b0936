//! The floor a function's cold start is compared with: `lambda_http` answering "hello", with the
//! same features, runtime (tokio's current-thread scheduler) and release profile as the functions,
//! and nothing else.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    lambda_http::run(lambda_http::service_fn(|_: lambda_http::Request| async { Ok::<_, lambda_http::Error>("hello") }))
        .await
}
