//! CORS for browser clients (`CorsAllowedOrigins`), through the dev server's REST APIs as the
//! functions get it in AWS: preflights answered for allowed origins, answers readable by them
//! only, and (with `make test-browser`) a real browser's `fetch` reading a streamed run from
//! another origin.

use dev_server::Router;
use http::Method;
use http_api::Body;
use integration_tests::local_server::{Handler, LocalServer, respond};
use integration_tests::model_server::{ModelServer, text_reply};
use integration_tests::{ServedApi, TestClock, TestStack, local_template, request};
use platform_api::AgentsService;
use serde_json::{Value, json};
use std::sync::Arc;

/// The local template with `CorsAllowedOrigins` set to `origins`.
fn template_allowing(origins: &str) -> stack::Template {
    let mut template = local_template();
    template.override_parameters(|name| (name == "CorsAllowedOrigins").then(|| origins.to_owned()));
    template
}

fn preflight(path: &str, origin: &str) -> http_api::Request {
    request(Method::OPTIONS, path)
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "x-api-key, content-type")
        .body(Body::Empty)
        .unwrap()
}

#[tokio::test]
async fn preflights_are_answered_and_answers_are_readable_only_by_allowed_origins() {
    let stack = TestStack::new().await;
    let key = stack.api_key(uuid::Uuid::new_v4()).await;
    let app = "https://app.example.com";
    let template = template_allowing(&format!("{app}, http://localhost:5173"));
    let backend = Router::from_template(&template, &stack.sdk, &stack.prefix, dev_server::BACKEND_API).unwrap();
    let runner = Router::from_template(&template, &stack.sdk, &stack.prefix, dev_server::RUNNER_API).unwrap();

    // A preflight carries no key: it is answered before the gate, on a streamed route too.
    let agent = uuid::Uuid::new_v4();
    for (router, path) in [
        (&backend, "/agents/".to_owned()),
        (&backend, format!("/Prod/agents/{agent}/run")),
        (&runner, "/execute/a2a/stream/agent".to_owned()),
    ] {
        let response = router.dispatch(preflight(&path, app)).await;
        assert_eq!(response.status(), 204, "{path}");
        let headers = response.headers();
        assert_eq!(headers["access-control-allow-origin"], app);
        assert_eq!(headers["access-control-allow-headers"], "X-API-Key, Authorization, Content-Type, Last-Event-ID");
        assert!(headers["access-control-allow-methods"].to_str().unwrap().contains("POST"));
        assert_eq!(headers["vary"], "Origin");
    }
    // Another origin's preflight reaches the function, which does not allow it.
    let refused = backend.dispatch(preflight("/agents/", "https://evil.example.com")).await;
    assert!(refused.headers().get("access-control-allow-origin").is_none());
    assert_ne!(refused.status(), 204);

    // Answers carry the origin and expose the rate-limit headers, for allowed origins only.
    let get = |origin: &str| {
        request(Method::GET, "/agents/").header("x-api-key", &key).header("origin", origin).body(Body::Empty).unwrap()
    };
    let allowed = backend.dispatch(get("http://localhost:5173")).await;
    assert_eq!(allowed.status(), 200);
    assert_eq!(allowed.headers()["access-control-allow-origin"], "http://localhost:5173");
    let exposed = allowed.headers()["access-control-expose-headers"].to_str().unwrap().to_owned();
    for header in ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After", "X-Run-Id"] {
        assert!(exposed.contains(header), "{header} in {exposed}");
    }
    let other = backend.dispatch(get("https://evil.example.com")).await;
    assert_eq!(other.status(), 200);
    assert!(other.headers().get("access-control-allow-origin").is_none());
    // An error is readable too (the browser's script sees the 401, not a network error).
    let unauthenticated =
        backend.dispatch(request(Method::GET, "/agents/").header("origin", app).body(Body::Empty).unwrap()).await;
    assert_eq!(unauthenticated.status(), 401);
    assert_eq!(unauthenticated.headers()["access-control-allow-origin"], app);

    // Without the parameter (the default), no origin is allowed and preflights are not answered.
    let closed = Router::from_template(&local_template(), &stack.sdk, &stack.prefix, dev_server::BACKEND_API).unwrap();
    let response = closed.dispatch(preflight("/agents/", app)).await;
    assert_ne!(response.status(), 204);
    assert!(response.headers().get("access-control-allow-origin").is_none());
    let response = closed.dispatch(get(app)).await;
    assert!(
        response.headers().get("access-control-allow-origin").is_none() && response.headers().get("vary").is_none()
    );
}

#[test]
fn a_cors_origin_that_is_not_an_origin_stops_the_function_from_starting() {
    let template = template_allowing("app.example.com");
    let function = template.function("AgentsFunction").unwrap();
    let env = template.environment(function, "unused-");
    let lookup = |name: &str| env.get(name).cloned();
    let aws = aws_env::Clients::new(aws_env::function_config(&|_: &str| None));
    let built = dev_server::functions::build_function("agents", &aws, &lookup);
    let Err(err) = built else { panic!("built with an invalid CORS origin") };
    assert!(err.to_string().contains("CORS_ALLOWED_ORIGINS"), "{err}");
}

/// The page a browser loads from the test's own origin: it runs an agent on the dev server with
/// `fetch`, reads the streamed body as it arrives, and leaves what it saw in `window.result`.
const RUN_PAGE: &str = r#"<!doctype html>
<meta charset="utf-8">
<script>
(async () => {
  const params = new URLSearchParams(location.search);
  const result = {};
  try {
    const response = await fetch(params.get("run"), {
      method: "POST",
      headers: { "X-API-Key": params.get("key"), "Content-Type": "application/json" },
      body: JSON.stringify({ message: "Weather in Oslo?" }),
    });
    result.status = response.status;
    result.run_id = response.headers.get("X-Run-Id");
    result.rate_limit_remaining = response.headers.get("X-RateLimit-Remaining");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
      text += chunk.value;
    }
    result.text = text;
  } catch (error) {
    result.error = String(error);
  }
  window.result = result;
})();
</script>
"#;

/// What the page left in `window.result`, as `infra/browser/fetch_page.mjs` prints it.
async fn open_in_browser(url: &str) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/browser/fetch_page.mjs");
    let output = tokio::process::Command::new("node").arg(script).arg(url).output().await.expect("node runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stdout)))
}

#[tokio::test]
async fn a_browser_reads_a_streamed_run_and_its_run_id_from_another_origin() {
    if !integration_tests::chromium_available() {
        return;
    }
    let stack = TestStack::new().await;
    let clock = TestClock::new();
    let key = stack.api_key(uuid::Uuid::new_v4()).await;
    let model = ModelServer::start(vec![text_reply("Rain in Oslo today.")]).await;
    let lm = stack.language_model(&clock, &key, "local", &model.base_url()).await;
    let agent: String = stack
        .client::<AgentsService>(&clock)
        .with_key(&key)
        .post(
            "/agents/",
            json!({"type": "config", "name": "Browser", "framework": "chainlib", "language_model_id": lm}),
        )
        .created()
        .await;

    // The page's own origin: a server of its own.
    let page: Handler = Arc::new(|_| Box::pin(async { respond(200, "text/html", RUN_PAGE) }));
    let page_server = LocalServer::start(page).await;
    let page_origin = format!("http://{}", page_server.address);
    // The dev server, as `make dev` runs it with CorsAllowedOrigins set to the page's origin.
    let router =
        Router::from_template(&template_allowing(&page_origin), &stack.sdk, &stack.prefix, dev_server::BACKEND_API)
            .unwrap();
    let served = ServedApi::start(router).await;
    let api = served.base_url();

    // Through the stage path, as on the execute-api URL.
    let run = format!("{api}/Prod/agents/{agent}/run");
    let query = |run: &str| format!("run={}&key={key}", urlencode(run));
    let result = open_in_browser(&format!("{page_origin}/run.html?{}", query(&run))).await;
    assert_eq!(result["status"], 200, "{result}");
    assert!(uuid::Uuid::parse_str(result["run_id"].as_str().unwrap_or_default()).is_ok(), "{result}");
    assert!(result["rate_limit_remaining"].is_string(), "{result}");
    let text = result["text"].as_str().unwrap_or_default();
    assert!(text.contains("Rain in Oslo today.") && text.contains("event: done"), "{text}");
    assert_eq!(result["console_errors"], json!([]));

    // From an origin the parameter does not name (same server, other host name), the browser
    // refuses the answer to the script.
    let other_origin = page_origin.replace("127.0.0.1", "localhost");
    let refused = open_in_browser(&format!("{other_origin}/run.html?{}", query(&run))).await;
    assert!(refused["error"].as_str().is_some_and(|error| error.contains("TypeError")), "{refused}");

    served.stop().await;
}

fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
