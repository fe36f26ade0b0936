//! HTTP plumbing shared by the functions: JSON responses, query and form parsing, pagination.
//!
//! Handlers take and return `lambda_http` types, which are `http` types, so the same code runs
//! under Lambda, in the local dev server and in the integration tests.

pub mod function;
pub mod gateway;
pub mod lambda;
pub mod limits;
pub mod multipart;
pub mod pagination;
pub mod params;
pub mod response;
pub mod routing;
pub mod runtime_socket;
pub mod streaming;

pub use function::{HttpFunction, ResponseFuture, init_tracing, json_logs, log_level, record_on_request, request_span};
pub use lambda::{run_on_lambda, run_streaming_on_lambda};
pub use lambda_http::{Body, Request, Response};
pub use params::Params;
pub use response::{body_text, detail_response, json, json_with_headers};
pub use streaming::{StreamBody, StreamingFunction, StreamingFuture};
