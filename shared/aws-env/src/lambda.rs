//! Lambda's `Invoke` (synchronous, `RequestResponse`): the one Lambda operation the platform
//! calls (the runner invokes the tool-sandbox function).
//!
//! Why not `aws-sdk-lambda`: a generated client is whole, whatever it is used for, and the Lambda
//! one (its 80 operations' types, its endpoint rules and partition table) added ~0.25 MB to every
//! bootstrap that runs agents (`docs/performance.md`, binary size). This is the same SDK runtime
//! (the orchestrator of `aws-smithy-runtime`, SigV4 signing of `aws-runtime`, the process's HTTP
//! client, credentials, identity cache and timeouts from its [`SdkConfig`], X-Ray trace header
//! propagation) given one hand-written operation: the request is `POST
//! /2015-03-31/functions/{FunctionName}/invocations` with the payload as the body, the answer the
//! payload and the `X-Amz-Function-Error` header, and a refusal Lambda's restJson1 error (its code
//! from `X-Amzn-ErrorType`, its message from the body).
//!
//! The endpoint is `AWS_ENDPOINT_URL_LAMBDA` or `AWS_ENDPOINT_URL` when set (local stacks, tests), otherwise Lambda's regional
//! endpoint, `https://lambda.{region}.{partition's domain}`. FIPS and dual-stack endpoints are not
//! chosen (the platform sets neither). Invocations are never retried: the caller decides (a tool
//! runs at most once per call).

use aws_runtime::auth::sigv4::{SCHEME_ID, SigV4AuthScheme};
use aws_runtime::auth::{SigV4OperationSigningConfig, SigningOptions};
use aws_runtime::recursion_detection::RecursionDetectionInterceptor;
use aws_smithy_async::rt::sleep::{SharedAsyncSleep, TokioSleep};
use aws_smithy_runtime::client::identity::IdentityCache;
use aws_smithy_runtime::client::orchestrator::operation::Operation;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::auth::static_resolver::StaticAuthSchemeOptionResolver;
use aws_smithy_runtime_api::client::auth::{AuthSchemeOptionResolverParams, SharedAuthScheme};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse, OrchestratorError};
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponentsBuilder;
use aws_smithy_runtime_api::client::runtime_plugin::RuntimePlugin;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{FrozenLayer, Layer};
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_types::SdkConfig;
use aws_types::region::SigningRegion;
use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// Invokes Lambda functions with the process's AWS configuration. The operation is assembled at
/// the first invocation (nothing at a function's init); cloning shares it.
#[derive(Clone)]
pub struct LambdaInvoker(Arc<Invoker>);

struct Invoker {
    sdk: SdkConfig,
    operation: OnceLock<Result<InvokeOperation, NotConfigured>>,
}

type InvokeOperation = Operation<Invocation, Invoked, RefusedError>;

/// What a function answered: its payload, and Lambda's function error (`Unhandled`, …) when the
/// handler raised, crashed or timed out, in which case the payload is Lambda's error object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invoked {
    pub function_error: Option<String>,
    pub payload: Vec<u8>,
}

/// Why an invocation has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvokeError {
    /// Lambda refused it: its error code (`ResourceNotFoundException`, `TooManyRequestsException`,
    /// …) and message.
    Refused { code: String, message: String },
    /// No answer from Lambda: not configured, unreachable, timed out, an unreadable answer. The
    /// text is for logs.
    Unavailable(String),
}

impl fmt::Display for InvokeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused { code, message } => write!(f, "Lambda refused the invocation: {code}: {message}"),
            Self::Unavailable(reason) => write!(f, "Lambda could not be invoked: {reason}"),
        }
    }
}

impl std::error::Error for InvokeError {}

impl LambdaInvoker {
    /// An invoker with `sdk`'s HTTP client, credentials, region, endpoint and timeouts. Nothing is
    /// built or sent until [`invoke`](Self::invoke).
    pub fn new(sdk: &SdkConfig) -> Self {
        Self(Arc::new(Invoker { sdk: sdk.clone(), operation: OnceLock::new() }))
    }

    fn operation(sdk: &SdkConfig) -> Result<InvokeOperation, NotConfigured> {
        let endpoint = endpoint(sdk).ok_or(NotConfigured)?;
        let http_client = sdk.http_client().ok_or(NotConfigured)?;
        let mut builder = Operation::builder()
            .service_name("Lambda")
            .operation_name("Invoke")
            .endpoint_url(&endpoint)
            .no_retry()
            .interceptor(RecursionDetectionInterceptor::new())
            .runtime_plugin(SigV4::new(sdk, "lambda", None));
        builder = with_sdk_runtime(builder, sdk, http_client);
        Ok(builder.serializer(serialize).deserializer(deserialize).build())
    }

    /// Invokes `function` (a name or ARN) synchronously with `payload` and waits for its answer.
    pub async fn invoke(&self, function: &str, payload: Vec<u8>) -> Result<Invoked, InvokeError> {
        self.send(Invocation { function: function.to_owned(), tenant: None, payload }).await
    }

    /// Invokes a function in tenant isolation mode for `tenant` (`X-Amz-Tenant-Id`): Lambda runs
    /// it only in environments that serve this tenant alone.
    pub async fn invoke_for_tenant(
        &self,
        function: &str,
        tenant: &str,
        payload: Vec<u8>,
    ) -> Result<Invoked, InvokeError> {
        let invocation = Invocation { function: function.to_owned(), tenant: Some(tenant.to_owned()), payload };
        self.send(invocation).await
    }

    async fn send(&self, invocation: Invocation) -> Result<Invoked, InvokeError> {
        let operation = self
            .0
            .operation
            .get_or_init(|| Self::operation(&self.0.sdk))
            .as_ref()
            .map_err(|_| InvokeError::Unavailable("no AWS region, endpoint or HTTP client is configured".into()))?;
        operation.invoke(invocation).await.map_err(|err| match err {
            SdkError::ServiceError(refusal) => {
                let RefusedError { code, message } = refusal.into_err();
                InvokeError::Refused { code, message }
            }
            other => InvokeError::Unavailable(DisplayErrorContext(&other).to_string()),
        })
    }
}

impl fmt::Debug for LambdaInvoker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LambdaInvoker").field("built", &self.0.operation.get().is_some()).finish()
    }
}

/// `builder` with the runtime parts of `sdk`, as a generated client takes them: its timeouts,
/// behavior version, HTTP client, sleep and time source.
pub(crate) fn with_sdk_runtime(
    mut builder: aws_smithy_runtime::client::orchestrator::operation::OperationBuilder,
    sdk: &SdkConfig,
    http_client: aws_smithy_runtime_api::client::http::SharedHttpClient,
) -> aws_smithy_runtime::client::orchestrator::operation::OperationBuilder {
    // Unset, the SDK's defaults for the behavior version apply (a 3.1 s connect timeout).
    if let Some(timeouts) = sdk.timeout_config() {
        builder = builder.timeout_config(timeouts.clone());
    }
    if let Some(version) = sdk.behavior_version() {
        builder = builder.behavior_version(version);
    }
    builder = builder.http_client(http_client);
    // The identity cache's refresh timeouts need one; the generated clients default to tokio's.
    builder = builder.sleep_impl(sdk.sleep_impl().unwrap_or_else(|| SharedAsyncSleep::new(TokioSleep::new())));
    if let Some(time) = sdk.time_source() {
        builder = builder.time_source(time);
    }
    builder
}

/// No region or endpoint, or no HTTP client, in the configuration: nothing can be sent.
#[derive(Debug, Clone, Copy)]
struct NotConfigured;

/// The operation's input.
struct Invocation {
    function: String,
    /// `X-Amz-Tenant-Id`, for a function in tenant isolation mode.
    tenant: Option<String>,
    payload: Vec<u8>,
}

impl fmt::Debug for Invocation {
    /// Payloads carry tenants' scripts and arguments: never in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Invocation")
            .field("function", &self.function)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

/// Lambda's refusal, the operation's modeled error (Bedrock's errors read the same way).
#[derive(Debug)]
pub(crate) struct RefusedError {
    pub(crate) code: String,
    pub(crate) message: String,
}

impl fmt::Display for RefusedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for RefusedError {}

/// `AWS_ENDPOINT_URL_LAMBDA` or `AWS_ENDPOINT_URL` as configured, or the regional endpoint.
fn endpoint(sdk: &SdkConfig) -> Option<String> {
    if let Some(url) = crate::service_endpoint(sdk, "Lambda") {
        return Some(url.trim_end_matches('/').to_owned());
    }
    let region = sdk.region()?.as_ref();
    Some(format!("https://lambda.{region}.{}", partition_domain(region)))
}

/// The DNS suffix of a region's partition (`amazonaws.com` for a name no partition has).
fn partition_domain(region: &str) -> &'static str {
    crate::partitions::partition_of(region).map_or("amazonaws.com", |partition| partition.dns_suffix)
}

fn serialize(invocation: Invocation) -> Result<HttpRequest, BoxError> {
    let path = format!("/2015-03-31/functions/{}/invocations", encode_label(&invocation.function));
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(path)
        .header(http::header::CONTENT_TYPE, "application/octet-stream")
        .header("x-amz-invocation-type", "RequestResponse")
        .header(http::header::CONTENT_LENGTH, invocation.payload.len());
    if let Some(tenant) = &invocation.tenant {
        request = request.header("x-amz-tenant-id", tenant);
    }
    let request = request.body(SdkBody::from(invocation.payload))?;
    Ok(HttpRequest::try_from(request)?)
}

fn deserialize(response: &HttpResponse) -> Result<Invoked, OrchestratorError<RefusedError>> {
    let body = response.body().bytes().unwrap_or_default();
    if response.status().is_success() {
        let function_error = response.headers().get("x-amz-function-error").map(str::to_owned);
        return Ok(Invoked { function_error, payload: body.to_vec() });
    }
    Err(OrchestratorError::operation(refusal(
        response.headers().get("x-amzn-errortype"),
        body,
        response.status().as_u16(),
    )))
}

/// Lambda's error: the code from `X-Amzn-ErrorType` (`Code:http://…` → `Code`) or the body's
/// `__type`/`code`, the message from the body's `message`/`Message`.
pub(crate) fn refusal(error_type: Option<&str>, body: &[u8], status: u16) -> RefusedError {
    let fields = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body).unwrap_or_default();
    let text = |names: &[&str]| {
        names.iter().find_map(|name| fields.get(*name).and_then(serde_json::Value::as_str)).map(str::to_owned)
    };
    let code = error_type
        .map(str::to_owned)
        .or_else(|| text(&["__type", "code", "Code"]))
        .map(|code| sanitize_code(&code).to_owned())
        .filter(|code| !code.is_empty())
        .unwrap_or_else(|| format!("HTTP {status}"));
    let message = text(&["message", "Message", "errorMessage"]).unwrap_or_default();
    RefusedError { code, message }
}

/// `aws.protocols#Code:http://…` → `Code`, as the SDK reads error codes.
fn sanitize_code(code: &str) -> &str {
    let code = code.split(':').next().unwrap_or_default();
    code.rsplit('#').next().unwrap_or_default().trim()
}

/// A path label as the generated clients encode it (an ARN's `:` is `%3A`).
pub(crate) fn encode_label(label: &str) -> String {
    aws_smithy_http::label::fmt_string(label, aws_smithy_http::label::EncodingStrategy::Default)
}

/// SigV4 signing for an operation, as the generated clients set it up: the scheme, the
/// credentials of the configuration (behind its identity cache), a service's signing name and a
/// region (the configuration's when `None`).
#[derive(Debug)]
pub(crate) struct SigV4 {
    config: FrozenLayer,
    components: RuntimeComponentsBuilder,
}

impl SigV4 {
    pub(crate) fn new(sdk: &SdkConfig, signing_name: &'static str, region: Option<String>) -> Self {
        let mut config = Layer::new("sigv4");
        config.store_put(AuthSchemeOptionResolverParams::new(()));
        let mut signing_options = SigningOptions::default();
        signing_options.double_uri_encode = true;
        signing_options.content_sha256_header = false;
        signing_options.normalize_uri_path = true;
        config.store_put(SigV4OperationSigningConfig {
            region: region
                .map(|region| SigningRegion::from(aws_types::region::Region::new(region)))
                .or_else(|| sdk.region().cloned().map(SigningRegion::from)),
            name: Some(aws_types::SigningName::from_static(signing_name)),
            signing_options,
            ..Default::default()
        });
        let mut components = RuntimeComponentsBuilder::new("sigv4")
            .with_auth_scheme(SharedAuthScheme::new(SigV4AuthScheme::new()))
            .with_auth_scheme_option_resolver(Some(StaticAuthSchemeOptionResolver::new(vec![SCHEME_ID])));
        if let Some(credentials) = sdk.credentials_provider() {
            components.set_identity_resolver(SCHEME_ID, credentials);
        }
        if let Some(cache) = sdk.identity_cache() {
            components.set_identity_cache(Some(cache));
        } else {
            components.set_identity_cache(Some(IdentityCache::lazy().build()));
        }
        Self { config: config.freeze(), components }
    }
}

impl RuntimePlugin for SigV4 {
    fn config(&self) -> Option<FrozenLayer> {
        Some(self.config.clone())
    }

    fn runtime_components(&self, _: &RuntimeComponentsBuilder) -> Cow<'_, RuntimeComponentsBuilder> {
        Cow::Borrowed(&self.components)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_names_and_arns_are_encoded_as_path_labels() {
        assert_eq!(encode_label("tool-sandbox"), "tool-sandbox");
        assert_eq!(
            encode_label("arn:aws:lambda:eu-west-1:123456789012:function:sandbox:live"),
            "arn%3Aaws%3Alambda%3Aeu-west-1%3A123456789012%3Afunction%3Asandbox%3Alive"
        );
        assert_eq!(encode_label("a/b c%"), "a%2Fb%20c%25");
        assert_eq!(encode_label("é"), "%C3%A9");
    }

    #[test]
    fn the_regional_endpoint_is_in_the_regions_partition_unless_an_endpoint_is_configured() {
        let at = |region: &str| {
            endpoint(&SdkConfig::builder().region(aws_types::region::Region::new(region.to_owned())).build())
        };
        assert_eq!(at("eu-west-1").as_deref(), Some("https://lambda.eu-west-1.amazonaws.com"));
        assert_eq!(at("us-gov-west-1").as_deref(), Some("https://lambda.us-gov-west-1.amazonaws.com"));
        assert_eq!(at("cn-north-1").as_deref(), Some("https://lambda.cn-north-1.amazonaws.com.cn"));
        assert_eq!(at("us-isob-east-1").as_deref(), Some("https://lambda.us-isob-east-1.sc2s.sgov.gov"));
        assert_eq!(at("us-iso-east-1").as_deref(), Some("https://lambda.us-iso-east-1.c2s.ic.gov"));
        let configured = SdkConfig::builder()
            .region(aws_types::region::Region::new("eu-west-1"))
            .endpoint_url("http://127.0.0.1:9001/")
            .build();
        assert_eq!(endpoint(&configured).as_deref(), Some("http://127.0.0.1:9001"));
        assert_eq!(endpoint(&SdkConfig::builder().build()), None);
    }

    #[test]
    fn refusals_are_read_from_the_error_type_header_or_the_body() {
        let body = br#"{"Type":"User","Message":"Function not found: arn:aws:lambda:eu-west-1:1:function:x"}"#;
        let refused = refusal(Some("ResourceNotFoundException:http://internal.amazon.com/coral/"), body, 404);
        assert_eq!(refused.code, "ResourceNotFoundException");
        assert_eq!(refused.message, "Function not found: arn:aws:lambda:eu-west-1:1:function:x");

        let refused =
            refusal(None, br#"{"__type":"com.amazonaws#TooManyRequestsException","message":"Rate exceeded"}"#, 429);
        assert_eq!((refused.code.as_str(), refused.message.as_str()), ("TooManyRequestsException", "Rate exceeded"));

        let refused = refusal(None, b"<html>bad gateway</html>", 502);
        assert_eq!((refused.code.as_str(), refused.message.as_str()), ("HTTP 502", ""));
    }

    /// Serves one request: returns its head and body, answers with `response`.
    async fn serve_once(response: &'static str) -> (String, tokio::task::JoinHandle<(String, Vec<u8>)>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut received = Vec::new();
            let mut buffer = [0u8; 4096];
            loop {
                let read = stream.read(&mut buffer).await.unwrap();
                received.extend_from_slice(&buffer[..read]);
                let text = String::from_utf8_lossy(&received).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_owned))
                        .map_or(0, |length| length.trim().parse::<usize>().unwrap());
                    if received.len() >= end + 4 + length {
                        stream.write_all(response.as_bytes()).await.unwrap();
                        return (text[..end].to_owned(), received[end + 4..].to_vec());
                    }
                }
            }
        });
        (url, server)
    }

    fn config_at(url: &str) -> SdkConfig {
        let environment = [
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKIDLAMBDATEST"),
            ("AWS_SECRET_ACCESS_KEY", "lambda-test-secret"),
            ("AWS_SESSION_TOKEN", "lambda-test-session"),
            ("AWS_ENDPOINT_URL", url),
        ];
        crate::function_config(&|name| {
            environment.iter().find(|(key, _)| *key == name).map(|(_, value)| (*value).to_owned())
        })
    }

    #[tokio::test]
    async fn an_invocation_is_a_signed_post_of_the_payload_and_reads_the_function_error() {
        let (url, server) = serve_once(
            "HTTP/1.1 200 OK\r\nX-Amz-Function-Error: Unhandled\r\nContent-Length: 26\r\n\r\n{\"errorMessage\":\"boom\"}   ",
        )
        .await;
        let invoker = LambdaInvoker::new(&config_at(&url));
        let answer = invoker.invoke("arn:aws:lambda:eu-west-1:1:function:sandbox", br#"{"script":"x"}"#.to_vec()).await;
        let answer = answer.unwrap();
        let (head, body) = server.await.unwrap();

        assert_eq!(answer.function_error.as_deref(), Some("Unhandled"));
        assert_eq!(answer.payload, br#"{"errorMessage":"boom"}   "#);
        assert!(
            head.starts_with("POST /2015-03-31/functions/arn%3Aaws%3Alambda%3Aeu-west-1%3A1%3Afunction%3Asandbox/invocations HTTP/1.1\r\n"),
            "{head}"
        );
        let header = |name: &str| {
            head.lines().find_map(|line| {
                let (key, value) = line.split_once(": ")?;
                key.eq_ignore_ascii_case(name).then(|| value.to_owned())
            })
        };
        let authorization = header("authorization").unwrap();
        assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDLAMBDATEST/"), "{authorization}");
        assert!(authorization.contains("/eu-west-1/lambda/aws4_request"), "{authorization}");
        assert_eq!(header("x-amz-security-token").as_deref(), Some("lambda-test-session"));
        assert_eq!(header("x-amz-invocation-type").as_deref(), Some("RequestResponse"));
        assert_eq!(header("x-amz-tenant-id"), None);
        assert_eq!(body, br#"{"script":"x"}"#);
    }

    #[tokio::test]
    async fn a_tenants_invocation_carries_its_tenant_id_signed() {
        let (url, server) = serve_once("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").await;
        let invoker = LambdaInvoker::new(&config_at(&url));
        let answer = invoker.invoke_for_tenant("sandbox", "0c3b6a52-account", b"{}".to_vec()).await.unwrap();
        assert_eq!(answer.payload, b"{}");
        let (head, _) = server.await.unwrap();
        let lower = head.to_ascii_lowercase();
        assert!(lower.contains("\r\nx-amz-tenant-id: 0c3b6a52-account\r\n"), "{head}");
        assert!(lower.contains("x-amz-tenant-id"), "{head}");
        let signed = lower.lines().find(|line| line.starts_with("authorization: ")).unwrap_or_default();
        assert!(signed.contains("x-amz-tenant-id"), "the tenant header is signed: {signed}");
    }

    #[tokio::test]
    async fn a_refusal_carries_lambdas_error_code_and_message() {
        let (url, server) = serve_once(
            "HTTP/1.1 404 Not Found\r\nx-amzn-ErrorType: ResourceNotFoundException:http://internal.amazon.com/\r\nContent-Length: 46\r\n\r\n{\"Type\":\"User\",\"Message\":\"Function not found\"}",
        )
        .await;
        let err = LambdaInvoker::new(&config_at(&url)).invoke("missing", b"{}".to_vec()).await.unwrap_err();
        assert_eq!(
            err,
            InvokeError::Refused { code: "ResourceNotFoundException".into(), message: "Function not found".into() }
        );
        let (head, _) = server.await.unwrap();
        assert!(head.starts_with("POST /2015-03-31/functions/missing/invocations "), "{head}");
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_unavailable_and_not_retried() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let err = LambdaInvoker::new(&config_at(&url)).invoke("sandbox", b"{}".to_vec()).await.unwrap_err();
        assert!(matches!(err, InvokeError::Unavailable(_)), "{err}");
    }

    #[tokio::test]
    async fn without_a_region_or_endpoint_an_invocation_is_unavailable_not_a_panic() {
        let invoker = LambdaInvoker::new(&SdkConfig::builder().build());
        let err = invoker.invoke("tool-sandbox", b"{}".to_vec()).await.unwrap_err();
        assert!(matches!(err, InvokeError::Unavailable(ref reason) if reason.contains("region")), "{err}");
        // A region but no HTTP client (a configuration built by hand): refused, not a panic.
        let no_client = SdkConfig::builder().region(aws_types::region::Region::new("eu-west-1")).build();
        let err = LambdaInvoker::new(&no_client).invoke("tool-sandbox", b"{}".to_vec()).await.unwrap_err();
        assert!(matches!(err, InvokeError::Unavailable(ref reason) if reason.contains("HTTP client")), "{err}");
    }
}
