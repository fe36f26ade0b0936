//! Export of an invocation's spans before it returns: OTLP over HTTP (protobuf) to the endpoint
//! the standard `OTEL_EXPORTER_OTLP_*` variables name, SigV4-signed for X-Ray's OTLP endpoint (the
//! default in AWS), or a readable tree on stderr (`make dev`). An export that fails is counted
//! (`TraceExportFailures`) and logged once per process; it never fails the run.
//!
//! Settings (docs/tracing.md):
//! - `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`: nothing is exported;
//!   `OTEL_TRACES_EXPORTER=console`: the tree on stderr; `otlp` (the default): OTLP.
//! - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as is, else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`,
//!   else in Lambda `https://xray.{AWS_REGION}.amazonaws.com/v1/traces`, else nothing.
//! - `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS` (`k=v,…`, values percent-decoded),
//!   `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` (ms, the whole export's; default `DEFAULT_TIMEOUT`, at
//!   most `MAX_TIMEOUT`).
//! - `OTEL_EXPORTER_OTLP_PROTOCOL`: only `http/protobuf`; another value is logged and ignored.
//! - `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`: the resource.
//! - `OTLP_SIGV4_SERVICE`: sign for this service (the default is `xray` for an
//!   `xray.*.amazonaws.com` endpoint, nothing otherwise).
//! - `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`: spans record content.

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};
use telemetry::{Recorder, SpanData, Value};

/// The whole export's time (signing, the request, its retry) when no
/// `OTEL_EXPORTER_OTLP_*TIMEOUT` says otherwise: shorter than OpenTelemetry's 10 s, since the
/// invocation (and a streamed response's end) waits for it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest a setting may make it: well within the margin a queue worker keeps before its
/// invocation's end (`agent_runtime::lifecycle::HARD_STOP_MARGIN`).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(10);

/// A setting's source: the process environment, or a map (dev server, tests).
pub type Setting<'a> = &'a dyn Fn(&str) -> Option<String>;

/// What signs requests to AWS: the function's credentials, and its region when `AWS_REGION` is
/// not among the settings.
#[derive(Debug, Clone)]
pub struct AwsIdentity {
    pub credentials: SharedCredentialsProvider,
    pub region: String,
}

/// Where an invocation's spans go.
#[derive(Debug)]
pub struct Exporter {
    target: Target,
    resource: Vec<(String, Value)>,
    capture_content: bool,
    /// Whether a failure was logged already (once per process).
    warned: AtomicBool,
}

#[derive(Debug)]
enum Target {
    Off,
    Console,
    Otlp(Box<Otlp>),
}

#[derive(Debug)]
struct Otlp {
    endpoint: String,
    headers: Vec<(outbound::HeaderName, outbound::HeaderValue)>,
    timeout: Duration,
    /// The endpoint's host, the one address the client may reach whatever it resolves to.
    host: String,
    /// Built at the first export, not at init (a function's cold start pays nothing for it).
    client: std::sync::OnceLock<outbound::Client>,
    signer: Option<Signer>,
}

#[derive(Debug)]
struct Signer {
    service: String,
    region: String,
    credentials: SharedCredentialsProvider,
}

impl Exporter {
    /// Nothing is exported.
    pub fn off() -> Self {
        Self { target: Target::Off, resource: Vec::new(), capture_content: false, warned: AtomicBool::new(false) }
    }

    /// From the settings above. `service` names the process when `OTEL_SERVICE_NAME` does not;
    /// `aws` (the function's credentials and region) signs requests to AWS.
    pub fn from_settings(setting: Setting, service: &str, aws: Option<AwsIdentity>) -> Self {
        let value = |name: &str| setting(name).map(|value| value.trim().to_owned()).filter(|value| !value.is_empty());
        let capture_content = value("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_some_and(|flag| flag.eq_ignore_ascii_case("true"));
        let resource = resource(&value, service);
        let exporter = value("OTEL_TRACES_EXPORTER").unwrap_or_else(|| "otlp".to_owned());
        let disabled = value("OTEL_SDK_DISABLED").is_some_and(|flag| flag.eq_ignore_ascii_case("true"));
        let target = match exporter.as_str() {
            _ if disabled => Target::Off,
            "none" => Target::Off,
            "console" => Target::Console,
            other => {
                if other != "otlp" {
                    tracing::warn!(exporter = other, "OTEL_TRACES_EXPORTER not supported; using otlp");
                }
                otlp_target(&value, aws).map_or(Target::Off, |otlp| Target::Otlp(Box::new(otlp)))
            }
        };
        Self { target, resource, capture_content, warned: AtomicBool::new(false) }
    }

    /// Whether spans are recorded at all (no recorder is needed when they go nowhere).
    pub fn is_on(&self) -> bool {
        !matches!(self.target, Target::Off)
    }

    /// Whether spans record content (prompts, answers, tool arguments and results).
    pub fn captures_content(&self) -> bool {
        self.capture_content
    }

    /// Exports what `recorder` holds; failures are counted and logged, never returned.
    pub async fn export(&self, recorder: &Recorder) {
        let (spans, dropped) = recorder.take();
        if dropped > 0 {
            tracing::warn!(dropped, "spans dropped: more than one export request takes were recorded");
        }
        if spans.is_empty() {
            return;
        }
        match &self.target {
            Target::Off => {}
            Target::Console => eprint!("{}", render_tree(&spans)),
            Target::Otlp(otlp) => {
                let body = telemetry::otlp::encode_export_request(&self.resource, &spans);
                if let Err(problem) = otlp.send(body).await {
                    telemetry::metrics::emit([telemetry::metrics::trace_export_failure()]);
                    if !self.warned.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            endpoint = %otlp.endpoint,
                            %problem,
                            spans = spans.len(),
                            "trace export failed (logged once; TraceExportFailures counts each)"
                        );
                    }
                }
            }
        }
    }
}

/// The resource: `service.name`, the cloud and function attributes Lambda gives, then
/// `OTEL_RESOURCE_ATTRIBUTES` (`k=v,…`, percent-decoded).
fn resource(value: &dyn Fn(&str) -> Option<String>, service: &str) -> Vec<(String, Value)> {
    let mut attributes = vec![(
        "service.name".to_owned(),
        Value::from(value("OTEL_SERVICE_NAME").unwrap_or_else(|| service.to_owned())),
    )];
    if let Some(function) = value("AWS_LAMBDA_FUNCTION_NAME") {
        attributes.push(("cloud.provider".to_owned(), Value::from("aws")));
        attributes.push(("cloud.platform".to_owned(), Value::from("aws_lambda")));
        attributes.push(("faas.name".to_owned(), Value::from(function)));
    }
    if let Some(region) = value("AWS_REGION") {
        attributes.push(("cloud.region".to_owned(), Value::from(region)));
    }
    for (key, item) in pairs(value("OTEL_RESOURCE_ATTRIBUTES").as_deref().unwrap_or_default()) {
        attributes.retain(|(existing, _)| *existing != key);
        attributes.push((key, Value::from(item)));
    }
    attributes
}

/// `k=v,k2=v2` with percent-encoded values (the OTLP exporter's list syntax); malformed entries
/// are skipped.
fn pairs(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter_map(|entry| entry.split_once('='))
        .map(|(key, item)| {
            let item = percent_encoding::percent_decode_str(item.trim()).decode_utf8_lossy().into_owned();
            (key.trim().to_owned(), item)
        })
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

fn otlp_target(value: &dyn Fn(&str) -> Option<String>, aws: Option<AwsIdentity>) -> Option<Otlp> {
    if let Some(protocol) = value("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| value("OTEL_EXPORTER_OTLP_PROTOCOL"))
        && protocol != "http/protobuf"
    {
        tracing::warn!(%protocol, "only http/protobuf is supported; using it");
    }
    let region = value("AWS_REGION").or_else(|| aws.as_ref().map(|aws| aws.region.clone()));
    let endpoint = match (value("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), value("OTEL_EXPORTER_OTLP_ENDPOINT")) {
        (Some(traces), _) => traces,
        (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
        // In Lambda, X-Ray's OTLP endpoint.
        (None, None) => match (&region, value("AWS_LAMBDA_FUNCTION_NAME")) {
            (Some(region), Some(_)) => format!("https://xray.{region}.amazonaws.com/v1/traces"),
            _ => return None,
        },
    };
    let host = url::Url::parse(&endpoint).ok().and_then(|url| url.host_str().map(str::to_owned));
    let Some(host) = host else {
        tracing::warn!(%endpoint, "the OTLP endpoint is not a URL; traces are not exported");
        return None;
    };
    let service = value("OTLP_SIGV4_SERVICE")
        .or_else(|| (host.starts_with("xray.") && host.ends_with(".amazonaws.com")).then(|| "xray".to_owned()));
    let signer = match (service, region, aws) {
        (Some(service), Some(region), Some(aws)) => Some(Signer { service, region, credentials: aws.credentials }),
        (Some(_), _, _) => {
            tracing::warn!(%endpoint, "SigV4 needs AWS_REGION and credentials; traces are sent unsigned");
            None
        }
        _ => None,
    };
    let timeout = value("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        .or_else(|| value("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .and_then(|ms| ms.parse::<u64>().ok())
        .map_or(DEFAULT_TIMEOUT, |ms| Duration::from_millis(ms).min(MAX_TIMEOUT));
    let listed = value("OTEL_EXPORTER_OTLP_TRACES_HEADERS").or_else(|| value("OTEL_EXPORTER_OTLP_HEADERS"));
    let headers = pairs(listed.as_deref().unwrap_or_default())
        .into_iter()
        .filter_map(|(key, item)| {
            let name = outbound::HeaderName::try_from(key.to_ascii_lowercase()).ok()?;
            let mut item = outbound::HeaderValue::try_from(item).ok()?;
            item.set_sensitive(true);
            Some((name, item))
        })
        .collect();
    Some(Otlp { endpoint, headers, timeout, host, client: std::sync::OnceLock::new(), signer })
}

impl Otlp {
    fn client(&self) -> &outbound::Client {
        self.client.get_or_init(|| {
            // The operator's endpoint, which may be a local collector: that host is allowed by name.
            let policy = outbound::AddressPolicy::from_setting(Some(&self.host))
                .unwrap_or_else(|_| outbound::AddressPolicy::public_only());
            outbound::Client::new(policy).with_timeout(self.timeout)
        })
    }

    /// Sends `body`: signing, the request and one retry all within the exporter's timeout (the
    /// invocation waits for it).
    async fn send(&self, body: Vec<u8>) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        match tokio::time::timeout_at(deadline, self.attempts(body, deadline)).await {
            Ok(sent) => sent,
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        }
    }

    async fn attempts(&self, body: Vec<u8>, deadline: tokio::time::Instant) -> Result<(), String> {
        // One retry of an answer that asks for one (OTLP/HTTP's retryable statuses).
        for attempt in 0..2 {
            let mut headers = vec![("content-type".to_owned(), "application/x-protobuf".to_owned())];
            if let Some(signer) = &self.signer {
                headers.extend(signer.sign(&self.endpoint, &body).await?);
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let mut request = self.client().post(&self.endpoint).timeout(left).body(body.clone());
            for (name, value) in &self.headers {
                request = request.header(name.clone(), value.clone());
            }
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let response = request.send().await.map_err(|err| err.to_string())?;
            let status = response.status();
            if status.is_success() {
                return Ok(());
            }
            if attempt == 0 && matches!(status.as_u16(), 429 | 502 | 503 | 504) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            return Err(format!("the endpoint answered {status}"));
        }
        Err("the endpoint kept asking for a retry".to_owned())
    }
}

impl Signer {
    /// The SigV4 headers of a POST of `body` to `endpoint` (content type signed too).
    async fn sign(&self, endpoint: &str, body: &[u8]) -> Result<Vec<(String, String)>, String> {
        use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
        let credentials = self.credentials.provide_credentials().await.map_err(|err| format!("credentials: {err}"))?;
        let identity = credentials.into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(&self.service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|err| format!("signing: {err}"))?
            .into();
        let signed_headers = [("content-type", "application/x-protobuf")];
        let request = SignableRequest::new("POST", endpoint, signed_headers.into_iter(), SignableBody::Bytes(body))
            .map_err(|err| format!("signing: {err}"))?;
        let (instructions, _) = sign(request, &params).map_err(|err| format!("signing: {err}"))?.into_parts();
        Ok(instructions.headers().map(|(name, value)| (name.to_owned(), value.to_owned())).collect())
    }
}

/// The spans as an indented tree per trace, children under their parent in start order, with
/// durations and the attributes that matter when reading a run (`make dev`).
pub fn render_tree(spans: &[SpanData]) -> String {
    let mut spans: Vec<&SpanData> = spans.iter().collect();
    spans.sort_by_key(|span| span.start_unix_nanos);
    let known = |id| spans.iter().any(|span| span.span_id == id);
    let mut out = String::new();
    let roots: Vec<&SpanData> =
        spans.iter().copied().filter(|span| span.parent_span_id.is_none_or(|parent| !known(parent))).collect();
    for root in roots {
        out.push_str(&format!("trace {}\n", root.trace_id));
        render_span(&spans, root, 1, &mut out);
    }
    out
}

fn render_span(spans: &[&SpanData], span: &SpanData, depth: usize, out: &mut String) {
    let millis = span.end_unix_nanos.saturating_sub(span.start_unix_nanos) / 1_000_000;
    out.push_str(&format!("{}{} ({millis} ms)", "  ".repeat(depth), span.name));
    for key in [
        telemetry::genai::USAGE_INPUT_TOKENS,
        telemetry::genai::USAGE_OUTPUT_TOKENS,
        telemetry::genai::RESPONSE_FINISH_REASONS,
        telemetry::genai::TOOL_CALL_ID,
        telemetry::genai::ERROR_TYPE,
    ] {
        if let Some(value) = span.attribute(key) {
            let short = key.rsplit('.').next().unwrap_or(key);
            match value {
                Value::Str(text) => out.push_str(&format!(" {short}={text}")),
                Value::Int(number) => out.push_str(&format!(" {short}={number}")),
                Value::StrArray(items) => out.push_str(&format!(" {short}={}", items.join(","))),
                Value::Bool(flag) => out.push_str(&format!(" {short}={flag}")),
                Value::Float(number) => out.push_str(&format!(" {short}={number}")),
            }
        }
    }
    if let Some(error) = &span.error {
        out.push_str(&format!(" ERROR: {error}"));
    }
    out.push('\n');
    for child in spans.iter().filter(|child| child.parent_span_id == Some(span.span_id)) {
        render_span(spans, child, depth + 1, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use telemetry::{Kind, Span, SpanContext, SpanId, TraceId};

    fn exporter(settings: &[(&str, &str)]) -> Exporter {
        let map: HashMap<String, String> = settings.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Exporter::from_settings(&|name| map.get(name).cloned(), "runner", None)
    }

    fn endpoint(exporter: &Exporter) -> Option<&str> {
        match &exporter.target {
            Target::Otlp(otlp) => Some(&otlp.endpoint),
            _ => None,
        }
    }

    #[test]
    fn the_endpoint_follows_the_otlp_variables_and_defaults_to_xray_in_lambda() {
        assert_eq!(endpoint(&exporter(&[])), None);
        assert!(!exporter(&[]).is_on());
        let lambda = exporter(&[("AWS_LAMBDA_FUNCTION_NAME", "runner"), ("AWS_REGION", "eu-west-1")]);
        assert_eq!(endpoint(&lambda), Some("https://xray.eu-west-1.amazonaws.com/v1/traces"));
        let base = exporter(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")]);
        assert_eq!(endpoint(&base), Some("http://127.0.0.1:4318/v1/traces"));
        let own = exporter(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:4318/custom"),
        ]);
        assert_eq!(endpoint(&own), Some("http://b:4318/custom"));
        assert!(!exporter(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"), ("OTEL_SDK_DISABLED", "true")]).is_on());
        assert!(
            !exporter(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"), ("OTEL_TRACES_EXPORTER", "none")]).is_on()
        );
        assert!(matches!(exporter(&[("OTEL_TRACES_EXPORTER", "console")]).target, Target::Console));
        assert!(!exporter(&[]).captures_content());
        assert!(exporter(&[("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")]).captures_content());
    }

    #[test]
    fn headers_and_resource_attributes_are_lists_of_percent_encoded_pairs() {
        assert_eq!(
            pairs("api-key=a%20b, x=1,broken,=no"),
            [("api-key".to_owned(), "a b".to_owned()), ("x".to_owned(), "1".to_owned())]
        );
        let lambda = exporter(&[
            ("AWS_LAMBDA_FUNCTION_NAME", "stack-Runner"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,service.name=mine"),
        ]);
        let names: Vec<(&str, &Value)> = lambda.resource.iter().map(|(k, v)| (k.as_str(), v)).collect();
        assert!(names.contains(&("faas.name", &Value::from("stack-Runner"))));
        assert!(names.contains(&("deployment.environment", &Value::from("prod"))));
        assert!(names.contains(&("service.name", &Value::from("mine"))));
        assert_eq!(names.iter().filter(|(k, _)| *k == "service.name").count(), 1);
    }

    #[test]
    fn the_console_tree_nests_children_under_their_parents() {
        let recorder = Recorder::default();
        let context = SpanContext { trace_id: TraceId::random(), span_id: SpanId::random() };
        let mut root = Span::root(&recorder, context, None, "invoke_agent support", Kind::Internal, false);
        root.set("gen_ai.usage.input_tokens", 12_u64);
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(root.run(async {
            let mut chat = Span::start("chat gpt-4o", Kind::Client);
            chat.set("gen_ai.response.finish_reasons", vec!["tool_call".to_owned()]);
            chat.end();
            Span::start("execute_tool lookup", Kind::Internal).fail("tool_error", "no such row");
        }));
        root.end();
        let tree = render_tree(&recorder.take().0);
        let lines: Vec<&str> = tree.lines().collect();
        assert_eq!(lines[0], format!("trace {}", context.trace_id));
        assert!(lines[1].starts_with("  invoke_agent support (") && lines[1].ends_with("input_tokens=12"), "{tree}");
        assert!(lines[2].starts_with("    chat gpt-4o (") && lines[2].ends_with("finish_reasons=tool_call"), "{tree}");
        // Without content capture a failure shows its kind, not its text.
        assert!(lines[3].starts_with("    execute_tool lookup ("), "{tree}");
        assert!(lines[3].ends_with("type=tool_error ERROR: tool_error"), "{tree}");
    }
}
