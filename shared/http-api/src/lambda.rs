//! Running a function on Lambda, behind API Gateway: each request through the gateway layer
//! (`crate::gateway`), in the span of its request.

use crate::function::{HttpFunction, request_span};
use crate::gateway::{AtGateway, Cors};
use crate::streaming::StreamingFunction;
use lambda_http::aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayV2httpResponse};
use lambda_http::request::{LambdaRequest, RequestOrigin};
use lambda_http::{Body, Context, LambdaEvent, Request, RequestExt, Response};
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;
use tracing::Instrument;

/// Serves `function` on the Lambda runtime until the runtime stops. A function's `main` runs it
/// on tokio's current-thread scheduler (`#[tokio::main(flavor = "current_thread")]`): Lambda
/// hands a container one event at a time, and worker threads would only add hand-offs and start
/// time (docs/performance.md, cold start).
///
/// The event becomes a [`Request`] as `lambda_http` reads it, but the answer is the gateway's
/// own response shape built here ([`GatewayResponse`]), not `lambda_http::run`'s conversion:
/// that one re-reads every body by its `Content-Type` through `encoding_rs`, linking every legacy
/// text encoding into every function (docs/performance.md, cold start).
pub async fn run_on_lambda(function: impl HttpFunction) -> Result<(), lambda_http::Error> {
    let function = Arc::new(AtGateway::new(function, Cors::from_env()?));
    lambda_http::lambda_runtime::run(lambda_http::service_fn(move |event: LambdaEvent<LambdaRequest>| {
        let function = Arc::clone(&function);
        async move {
            let origin = event.payload.request_origin();
            let request = request_from_event(event.payload, event.context);
            let span = request_span(&request);
            let response = function.handle(request).instrument(span).await;
            Ok::<_, Infallible>(GatewayResponse::new(&origin, response))
        }
    }))
    .await
}

/// The event as an HTTP request, with its Lambda context and X-Ray's trace header, as
/// `lambda_http::run` builds it.
fn request_from_event(payload: LambdaRequest, context: Context) -> Request {
    let mut request: Request = payload.into();
    if let Some(trace_id) = context.xray_trace_id.as_deref()
        && let Ok(value) = http::HeaderValue::from_str(trace_id)
    {
        request.headers_mut().insert(http::header::HeaderName::from_static("x-amzn-trace-id"), value);
    }
    request.with_lambda_context(context)
}

/// What a function answers API Gateway: the REST API's proxy response, or payload 2.0's for
/// the function URL events `cargo lambda watch` sends (README, `make watch`).
///
/// The body is handed over as it is: bytes that are UTF-8 go as text, whatever their content
/// type (every JSON, HTML and JavaScript answer), anything else base64-encoded with
/// `isBase64Encoded`, which API Gateway decodes for the API's binary media types. Both arrive
/// byte for byte as the function wrote them.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum GatewayResponse {
    /// REST API (payload 1.0): every header in `multiValueHeaders`, `headers` left empty (API
    /// Gateway merges the two, which would repeat each header).
    Rest(ApiGatewayProxyResponse),
    /// HTTP API and function URLs (payload 2.0): repeated headers joined with commas, cookies
    /// in `cookies`.
    Http(ApiGatewayV2httpResponse),
}

impl GatewayResponse {
    /// `response` in the shape the request's origin expects.
    pub fn new(origin: &RequestOrigin, response: Response<Body>) -> Self {
        let (parts, body) = response.into_parts();
        let (is_base64_encoded, body) = match body {
            Body::Empty => (false, None),
            Body::Text(text) => (false, Some(Body::Text(text))),
            Body::Binary(bytes) => match String::from_utf8(bytes) {
                Ok(text) => (false, Some(Body::Text(text))),
                Err(not_text) => (true, Some(Body::Binary(not_text.into_bytes()))),
            },
            // `Body` is non-exhaustive; it has no other kind today.
            _ => (false, None),
        };
        let status_code = i64::from(parts.status.as_u16());
        match origin {
            RequestOrigin::ApiGatewayV2 => {
                let mut headers = parts.headers;
                let cookies = headers
                    .get_all(http::header::SET_COOKIE)
                    .iter()
                    .filter_map(|value| value.to_str().ok().map(str::to_owned))
                    .collect();
                headers.remove(http::header::SET_COOKIE);
                let mut gateway = ApiGatewayV2httpResponse::default();
                gateway.status_code = status_code;
                gateway.headers = headers;
                gateway.cookies = cookies;
                gateway.body = body;
                gateway.is_base64_encoded = is_base64_encoded;
                Self::Http(gateway)
            }
            // REST events, and any other origin (the functions are built for REST only).
            _ => {
                let mut gateway = ApiGatewayProxyResponse::default();
                gateway.status_code = status_code;
                gateway.multi_value_headers = parts.headers;
                gateway.body = body;
                gateway.is_base64_encoded = is_base64_encoded;
                Self::Rest(gateway)
            }
        }
    }
}

/// Serves `function` on the Lambda runtime with response streaming until the runtime stops.
pub async fn run_streaming_on_lambda(function: impl StreamingFunction) -> Result<(), lambda_http::Error> {
    let function = Arc::new(AtGateway::new(function, Cors::from_env()?));
    let runtime_api = crate::runtime_socket::runtime_api_address();
    lambda_http::run_with_streaming_response(lambda_http::service_fn(move |request: Request| {
        let function = Arc::clone(&function);
        // Before the answer is written: see `runtime_socket`.
        if let Some(runtime_api) = runtime_api {
            crate::runtime_socket::set_nodelay_toward(runtime_api);
        }
        async move {
            let span = request_span(&request);
            Ok::<_, Infallible>(function.handle(request).instrument(span).await)
        }
    }))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn answer(origin: RequestOrigin, response: Response<Body>) -> Value {
        serde_json::to_value(GatewayResponse::new(&origin, response)).unwrap_or(Value::Null)
    }

    fn response(body: Body, headers: &[(&'static str, &'static str)]) -> Response<Body> {
        let mut builder = Response::builder().status(201);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(body).unwrap_or_default()
    }

    #[test]
    fn utf8_bytes_go_as_text_to_a_rest_api_with_every_header_once() {
        let json = response(
            Body::Binary("{\"detail\":\"é\"}".as_bytes().to_vec()),
            &[("content-type", "application/json"), ("vary", "origin"), ("vary", "accept")],
        );
        assert_eq!(
            answer(RequestOrigin::ApiGatewayV1, json),
            json!({
                "statusCode": 201,
                "headers": {},
                "multiValueHeaders": {"content-type": ["application/json"], "vary": ["origin", "accept"]},
                "body": "{\"detail\":\"é\"}",
                "isBase64Encoded": false,
            })
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_go_base64_encoded_whatever_their_content_type() {
        let gzip = response(Body::Binary(vec![0x1f, 0x8b, 0xff, 0x00]), &[("content-type", "text/html")]);
        let answer = answer(RequestOrigin::ApiGatewayV1, gzip);
        assert_eq!(answer["body"], "H4v/AA==");
        assert_eq!(answer["isBase64Encoded"], true);
    }

    #[test]
    fn text_stays_text_and_an_empty_body_has_none() {
        let text = answer(RequestOrigin::ApiGatewayV1, response(Body::Text("hello".into()), &[]));
        assert_eq!((text["body"].clone(), text["isBase64Encoded"].clone()), (json!("hello"), json!(false)));
        let empty = answer(RequestOrigin::ApiGatewayV1, response(Body::Empty, &[]));
        assert_eq!(empty.get("body"), None);
    }

    #[test]
    fn payload_2_answers_join_headers_and_move_cookies() {
        let answer = answer(
            RequestOrigin::ApiGatewayV2,
            response(Body::Binary(b"{}".to_vec()), &[("vary", "origin"), ("set-cookie", "a=1"), ("set-cookie", "b=2")]),
        );
        assert_eq!(answer["statusCode"], 201);
        assert_eq!(answer["headers"], json!({"vary": "origin"}));
        assert_eq!(answer["cookies"], json!(["a=1", "b=2"]));
        assert_eq!(answer["body"], "{}");
        assert_eq!(answer.get("multiValueHeaders").cloned().unwrap_or_default(), json!({}));
    }
}
