//! The test client: calls a function's handler in-process, exactly as Lambda and the dev server
//! do, and every call states what it expects (svix's `TestClient`):
//!
//! ```text
//! let api = stack.client::<AgentsService>(&clock).with_key(&key);
//! let created = api.post("/agents/", body).expect(201).await;
//! let error = api.get("/agents/nope").error(422, "VALIDATION_ERROR").await;
//! ```

use http::{HeaderMap, Method, StatusCode};
use http_api::{Body, HttpFunction, Request, StreamBody, StreamingFunction};
use serde_json::Value;
use std::sync::Arc;
use tracing::Instrument;

/// The handler a client calls.
#[derive(Clone)]
enum Handler {
    Http(Arc<dyn HttpFunction>),
    Streaming(Arc<dyn StreamingFunction>),
}

/// A client of one function, with the credentials it presents on every call.
#[derive(Clone)]
pub struct TestClient {
    handler: Handler,
    headers: Vec<(&'static str, String)>,
}

impl TestClient {
    /// A client of an HTTP function, presenting no credentials.
    pub fn new(function: impl HttpFunction) -> Self {
        Self { handler: Handler::Http(Arc::new(function)), headers: Vec::new() }
    }

    /// A client of a streaming function (the run routes, the runner); `send` reads the whole
    /// body, `stream` leaves it to the test.
    pub fn streaming(function: impl StreamingFunction) -> Self {
        Self { handler: Handler::Streaming(Arc::new(function)), headers: Vec::new() }
    }

    /// The same function, called with `X-API-Key: key` (the platform's gate).
    pub fn with_key(&self, key: &str) -> Self {
        self.with_header("x-api-key", key.to_owned())
    }

    /// The same function, called with `Authorization: Bearer token` (the meeting API).
    pub fn with_token(&self, token: &str) -> Self {
        self.with_header("authorization", format!("Bearer {token}"))
    }

    fn with_header(&self, name: &'static str, value: String) -> Self {
        let mut client = self.clone();
        client.headers.retain(|(present, _)| *present != name);
        client.headers.push((name, value));
        client
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Call<'_> {
        self.request(Method::GET, path)
    }

    /// `DELETE path`.
    pub fn delete(&self, path: &str) -> Call<'_> {
        self.request(Method::DELETE, path)
    }

    /// `POST path` with a JSON body.
    pub fn post(&self, path: &str, body: Value) -> Call<'_> {
        self.request(Method::POST, path).json(body)
    }

    /// `PUT path` with a JSON body.
    pub fn put(&self, path: &str, body: Value) -> Call<'_> {
        self.request(Method::PUT, path).json(body)
    }

    /// `PATCH path` with a JSON body.
    pub fn patch(&self, path: &str, body: Value) -> Call<'_> {
        self.request(Method::PATCH, path).json(body)
    }

    /// `POST path` with a form body (the meeting API's token endpoints).
    pub fn post_form(&self, path: &str, form: &[(&str, &str)]) -> Call<'_> {
        let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
        self.request(Method::POST, path).body("application/x-www-form-urlencoded", body)
    }

    /// Sends `request` as it was built (a fuzzed request, one converted from an API Gateway
    /// event, one without the usual headers): no credentials or headers are added.
    pub async fn send(&self, request: Request) -> Reply {
        use http_body_util::BodyExt;
        // In the request's span, as Lambda and the dev server run a function.
        let span = http_api::request_span(&request);
        match &self.handler {
            Handler::Http(function) => {
                let (parts, body) = function.handle(request).instrument(span).await.into_parts();
                Reply { status: parts.status, headers: parts.headers, text: http_api::body_text(&body) }
            }
            Handler::Streaming(function) => {
                let (method, path) = (request.method().clone(), request.uri().path().to_owned());
                let (parts, body) = function.handle(request).instrument(span).await.into_parts();
                let bytes = body.collect().await.map(|collected| collected.to_bytes()).unwrap_or_default();
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let streamed =
                    parts.headers.get(http::header::CONTENT_TYPE).is_some_and(|kind| kind == "text/event-stream");
                if streamed {
                    // Every stream a test reads whole is held to the documents (docs/openapi.md).
                    crate::openapi::check_event_stream(method.as_str(), &path, parts.status.as_u16(), &text);
                }
                Reply { status: parts.status, headers: parts.headers, text }
            }
        }
    }

    /// `method path` with no body, as the platform's clients send it (`Content-Type:
    /// application/json`); `json`, `body` and `header` add to it.
    pub fn request(&self, method: Method, path: &str) -> Call<'_> {
        let mut builder = crate::request(method, path).header("content-type", "application/json");
        for (name, value) in &self.headers {
            builder = builder.header(*name, value);
        }
        Call { client: self, builder, body: Body::Empty }
    }
}

/// One request, sent when the test states what it expects (`expect`, `error`), or `send`s it
/// to look at the whole reply.
#[must_use = "a call is sent by expect, error, send or stream"]
pub struct Call<'a> {
    client: &'a TestClient,
    builder: http::request::Builder,
    body: Body,
}

impl Call<'_> {
    /// Adds a header (a second one of the same name is added, not replaced).
    pub fn header(mut self, name: &str, value: impl AsRef<str>) -> Self {
        self.builder = self.builder.header(name, value.as_ref());
        self
    }

    /// Sends `body` as JSON (`None`: no body, for table-driven tests).
    pub fn json(self, body: impl Into<Option<Value>>) -> Self {
        match body.into() {
            Some(body) => self.body("application/json", body.to_string()),
            None => self,
        }
    }

    /// Sends `body` as `content_type` (replacing the JSON default).
    pub fn body(mut self, content_type: &str, body: impl Into<Body>) -> Self {
        if let Some(headers) = self.builder.headers_mut() {
            headers.insert("content-type", content_type.parse().expect("a content type"));
        }
        self.body = body.into();
        self
    }

    /// Sends the request; the reply's body is read whole.
    pub async fn send(self) -> Reply {
        let request = self.builder.body(self.body).expect("a valid request");
        self.client.send(request).await
    }

    /// Sends the request and returns the response with its body unread (a stream the test
    /// follows event by event).
    pub async fn stream(self) -> http::Response<StreamBody> {
        let request = self.builder.body(self.body).expect("a valid request");
        let span = http_api::request_span(&request);
        match &self.client.handler {
            Handler::Http(function) => http_api::streaming::whole(function.handle(request).instrument(span).await),
            Handler::Streaming(function) => function.handle(request).instrument(span).await,
        }
    }

    /// Asserts the reply's status and returns its JSON body (see [`Reply::expect`]).
    pub async fn expect(self, status: u16) -> Value {
        self.send().await.expect(status)
    }

    /// Asserts `201 Created` and returns the new record's id (`data.id` of the platform's
    /// envelope).
    pub async fn created(self) -> String {
        let body = self.expect(201).await;
        body["data"]["id"].as_str().unwrap_or_else(|| panic!("no data.id: {body}")).to_owned()
    }

    /// Asserts an error reply's status and code and returns the error (see [`Reply::error`]).
    pub async fn error(self, status: u16, code: &str) -> Value {
        self.send().await.error(status, code)
    }
}

/// A response as tests read it.
#[derive(Debug)]
#[must_use = "a reply states nothing until its status is checked"]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    /// The body as JSON (panics with the body when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|_| panic!("not JSON: {:?}", self.text))
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// Asserts the status, showing the body when it differs, and returns the JSON body (`Null`
    /// when there is none).
    pub fn expect(&self, status: u16) -> Value {
        assert_eq!(self.status.as_u16(), status, "unexpected status; body: {}", self.text);
        if self.text.is_empty() { Value::Null } else { self.json() }
    }

    /// Asserts an error answer with `status` whose body states `code`, and returns the error:
    /// - the platform's envelope `{success: false, error: {code, message, details}, timestamp}`
    ///   (checked whole): its `error` object;
    /// - RFC 6749's `{error, error_description?}` (the meeting API's token endpoints): the body.
    ///
    /// The meeting API's DRF answers (`{"detail": …}`) carry no code: tests `expect` them and
    /// compare the whole body.
    pub fn error(&self, status: u16, code: &str) -> Value {
        let body = self.expect(status);
        match &body["error"] {
            Value::String(error) => {
                assert_eq!(error, code, "{body}");
                body
            }
            Value::Object(error) => {
                assert_eq!(body["success"], false, "{body}");
                assert_eq!(error.get("code").and_then(Value::as_str), Some(code), "{body}");
                assert!(error.get("message").is_some_and(Value::is_string), "{body}");
                assert!(error.get("details").is_some_and(Value::is_object), "{body}");
                let timestamp = body["timestamp"].as_str().unwrap_or_default();
                assert!(chrono::DateTime::parse_from_rfc3339(timestamp).is_ok(), "{body}");
                assert_eq!(body.as_object().map(serde_json::Map::len), Some(3), "{body}");
                body["error"].clone()
            }
            _ => panic!("not an error envelope: {body}"),
        }
    }
}

/// Reads a streamed body until `marker` appears in it (a run held at its model's gate, read to
/// its first delta); what it read. Panics if the stream ends first.
pub async fn read_until(body: &mut StreamBody, marker: &str) -> String {
    use http_body_util::BodyExt;
    let mut seen = String::new();
    while !seen.contains(marker) {
        let frame = body.frame().await.expect("the stream goes on").expect("a frame");
        let data = frame.into_data().unwrap_or_default();
        seen.push_str(&String::from_utf8_lossy(&data));
    }
    seen
}
