//! The APIs' OpenAPI documents (`openapi/`) and their reference pages, served without
//! authentication by a function of their own, so the API functions stay small (docs/openapi.md):
//!
//! | API | document | page |
//! |---|---|---|
//! | meeting data API | `GET /api/v1/external/openapi.json` | `GET /api/v1/external/docs` |
//! | backend | `GET /openapi.json` | `GET /docs` |
//! | runner | `GET {runner}/openapi.json` | `GET {runner}/docs` |
//!
//! A served document's `servers` is the base URL the client used (its scheme, host and stage),
//! so a client generated from it, or the page's examples, call the API it came from.

use http::{HeaderValue, Method, StatusCode, header};
use http_api::gateway::client_base_url;
use http_api::routing::without_trailing_slash;
use http_api::{Body, HttpFunction, Request, Response, ResponseFuture};
use platform_api::envelope::ApiError;
use serde_json::Value;
use std::sync::OnceLock;

/// The committed documents, as CI validates and fuzzes them.
pub const MEETING_DATA_API: &str = include_str!("../../../openapi/meeting-data-api.json");
pub const BACKEND: &str = include_str!("../../../openapi/backend.json");
pub const RUNNER: &str = include_str!("../../../openapi/runner.json");

/// Redoc's standalone bundle, fetched from the npm registry at build (build.rs).
const REDOC: &str = include_str!(concat!(env!("OUT_DIR"), "/redoc.standalone.js"));

/// One document and where it is served.
struct Served {
    /// The path before `/openapi.json` and `/docs`.
    prefix: &'static str,
    title: &'static str,
    text: &'static str,
    parsed: OnceLock<Option<Value>>,
    /// How the routes under `prefix` answer errors: DRF's `{"detail"}` or the platform envelope.
    errors: ErrorStyle,
}

#[derive(Clone, Copy)]
enum ErrorStyle {
    Detail,
    Envelope,
}

/// The docs function.
pub struct DocsService {
    served: Vec<Served>,
}

impl DocsService {
    /// The backend's document at the root, the meeting data API's under `/api/v1/external`.
    pub fn platform() -> Self {
        Self {
            served: vec![
                served("/api/v1/external", "Meeting data API", MEETING_DATA_API, ErrorStyle::Detail),
                served("", "Agent platform backend", BACKEND, ErrorStyle::Envelope),
            ],
        }
    }

    /// The runner's document at the root.
    pub fn runner() -> Self {
        Self { served: vec![served("", "Agent platform runner", RUNNER, ErrorStyle::Envelope)] }
    }

    fn answer(&self, request: &Request) -> Response<Body> {
        let path = without_trailing_slash(request.uri().path());
        let Some((served, page)) = self.served.iter().find_map(|served| {
            let rest = path.strip_prefix(served.prefix)?;
            match rest {
                "/openapi.json" => Some((served, Page::Document)),
                "/docs" => Some((served, Page::Reference)),
                _ => None,
            }
        }) else {
            return http_api::routing::not_found();
        };
        if !matches!(*request.method(), Method::GET | Method::HEAD) {
            return match served.errors {
                ErrorStyle::Detail => http_api::routing::method_not_allowed(request.method(), "GET, HEAD"),
                ErrorStyle::Envelope => ApiError::method_not_allowed(request.method(), "GET, HEAD").into_response(),
            };
        }
        let Some(document) = served.document(&client_base_url(request)) else {
            return ApiError::internal(&format!("the {} document is not JSON", served.title)).into_response();
        };
        let (content_type, body) = match &page {
            Page::Document => ("application/json", document),
            Page::Reference => ("text/html; charset=utf-8", reference_page(served.title, &document)),
        };
        let mut response = Response::new(if request.method() == Method::HEAD { Body::Empty } else { Body::from(body) });
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        // The documents change only with a deploy.
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
        // API Gateway compresses them for clients that accept it (`MinimumCompressionSize`): a
        // cache keeps each encoding apart.
        headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        if let Page::Reference = page {
            // The page is whole: its scripts and styles inline, Redoc's search in a blob worker.
            headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(PAGE_POLICY));
        }
        *response.status_mut() = StatusCode::OK;
        response
    }
}

/// What the reference page may load: nothing from elsewhere.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
     img-src data:; font-src data:; worker-src blob:; connect-src 'none'; base-uri 'none'; form-action 'none'";

enum Page {
    Document,
    Reference,
}

fn served(prefix: &'static str, title: &'static str, text: &'static str, errors: ErrorStyle) -> Served {
    Served { prefix, title, text, parsed: OnceLock::new(), errors }
}

impl Served {
    /// The document with `servers` set to `base`; `None` if the committed text is not JSON
    /// (a test keeps that from shipping).
    fn document(&self, base: &str) -> Option<String> {
        let mut document = self.parsed.get_or_init(|| serde_json::from_str(self.text).ok()).clone()?;
        document["servers"] = serde_json::json!([{ "url": base }]);
        serde_json::to_string(&document).ok()
    }
}

/// The reference page: Redoc rendering the document, both inline (no request leaves the page).
fn reference_page(title: &str, document: &str) -> String {
    // `</` cannot end the script element the document sits in once escaped as JSON allows.
    let document = document.replace("</", "<\\/");
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" \
         content=\"width=device-width, initial-scale=1\">\n<title>{title}</title>\n<link rel=\"icon\" href=\"data:,\">\n<style>body {{ margin: 0; }}</style>\n</head>\n\
         <body>\n<div id=\"redoc\"></div>\n<script id=\"openapi\" type=\"application/json\">{document}</script>\n\
         <script>{REDOC}</script>\n<script>Redoc.init(JSON.parse(document.getElementById(\"openapi\").textContent), \
         {{}}, document.getElementById(\"redoc\"));</script>\n</body>\n</html>\n"
    )
}

impl HttpFunction for DocsService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        Box::pin(async move { self.answer(&request) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(service: &DocsService, uri: &str) -> Response<Body> {
        service.answer(&http::Request::builder().uri(uri).header("host", "api.test").body(Body::Empty).unwrap())
    }

    fn json(response: &Response<Body>) -> Value {
        serde_json::from_slice(response.body().as_ref()).unwrap()
    }

    #[test]
    fn every_committed_document_is_json_of_openapi_3_1() {
        for text in [MEETING_DATA_API, BACKEND, RUNNER] {
            let document: Value = serde_json::from_str(text).unwrap();
            assert_eq!(document["openapi"], "3.1.0");
        }
    }

    #[test]
    fn each_api_serves_its_own_document_with_the_clients_base_url() {
        let platform = DocsService::platform();
        let backend = json(&get(&platform, "/openapi.json"));
        assert_eq!(backend["info"]["title"], serde_json::from_str::<Value>(BACKEND).unwrap()["info"]["title"]);
        assert_eq!(backend["servers"], serde_json::json!([{ "url": "http://api.test" }]));
        let meetings = json(&get(&platform, "/api/v1/external/openapi.json/"));
        assert!(meetings["paths"].as_object().unwrap().keys().any(|path| path.starts_with("/api/v1/external/meeting")));
        let runner = json(&get(&DocsService::runner(), "/openapi.json"));
        assert!(runner["paths"].as_object().unwrap().contains_key("/execute/a2a/stream/agent"));
    }

    #[test]
    fn the_page_holds_redoc_and_the_document_inline() {
        let page = get(&DocsService::platform(), "/docs");
        assert_eq!(page.headers()[header::CONTENT_TYPE], "text/html; charset=utf-8");
        let html = http_api::body_text(page.body());
        assert!(html.contains("Redoc.init(") && html.contains("\"servers\":[{\"url\":\"http://api.test\"}]"));
        assert!(!html.contains("sourceMappingURL=redoc.standalone.js.map") && !html.contains("<script src"));
    }

    #[test]
    fn other_methods_are_405_in_each_apis_own_shape() {
        let platform = DocsService::platform();
        let post =
            |uri: &str| platform.answer(&http::Request::builder().method("POST").uri(uri).body(Body::Empty).unwrap());
        let meetings = post("/api/v1/external/docs");
        assert_eq!(
            (meetings.status(), json(&meetings)),
            (StatusCode::METHOD_NOT_ALLOWED, serde_json::json!({"detail": "Method \"POST\" not allowed."}))
        );
        let backend = post("/openapi.json");
        assert_eq!(backend.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(json(&backend)["error"]["code"], "METHOD_NOT_ALLOWED");
        assert_eq!(get(&platform, "/nothing").status(), StatusCode::NOT_FOUND);
    }
}
