//! Bedrock Runtime's `ConverseStream`, sent as [`crate::lambda`] sends Invoke: one
//! hand-written operation on the SDK's runtime (its orchestrator, SigV4 signing, the process's
//! HTTP client, credentials and identity cache, X-Ray trace header), not `aws-sdk-bedrockruntime`,
//! whose generated client (every Bedrock Runtime operation, its endpoint rules and partition
//! table) would be linked whole into every function that runs agents.
//!
//! The request is `POST /model/{modelId}/converse-stream` with the Converse JSON as its body; a
//! 2xx answer's body is an event stream, handed over unread ([`EventStreamBody`]) for the caller
//! to decode as it arrives; any other status is Bedrock's restJson1 error (its code from
//! `X-Amzn-ErrorType`, its message from the body).
//!
//! Where requests go ([`BedrockRuntime::endpoint`]): `AWS_ENDPOINT_URL_BEDROCK_RUNTIME` when the
//! operator set it (a stand-in, a VPC endpoint), otherwise AWS's own
//! `https://bedrock-runtime.{region}.{partition's domain}`, never a URL a tenant chose: a signed
//! request can be replayed by whoever receives it. When the general `AWS_ENDPOINT_URL` is set (a
//! local stack, as under `make dev`) and Bedrock's own variable is not, nothing is sent: the local
//! stack does not serve Bedrock, and the error names the variable to set.
//!
//! Credentials: the function's role (SigV4, signing name `bedrock`, the model's region), or a
//! Bedrock API key sent as a bearer token (then nothing is signed). Nothing is retried here: the
//! caller retries throttling within its run's time.

use crate::lambda::{SigV4, encode_label, refusal, with_sdk_runtime};
use aws_runtime::recursion_detection::RecursionDetectionInterceptor;
use aws_smithy_runtime::client::orchestrator::operation::Operation;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{Error, Output};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse, OrchestratorError};
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_runtime_api::client::ser_de::DeserializeResponse;
use aws_smithy_runtime_api::client::stalled_stream_protection::StalledStreamProtectionConfig;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::byte_stream::ByteStream;
use aws_smithy_types::config_bag::ConfigBag;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_types::SdkConfig;
use bytes::Bytes;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// The variable naming the operator's Bedrock Runtime endpoint (the SDK's per-service name).
pub const ENDPOINT_VARIABLE: &str = "AWS_ENDPOINT_URL_BEDROCK_RUNTIME";

/// The service id the SDK names Bedrock Runtime by (its endpoint variable is derived from it).
const SERVICE_ID: &str = "Bedrock Runtime";

/// Calls Bedrock Runtime with the process's AWS configuration. An operation is assembled per
/// endpoint, region and kind of credentials at its first call (nothing at a function's init);
/// cloning shares them.
#[derive(Clone)]
pub struct BedrockRuntime(Arc<Runtime>);

struct Runtime {
    sdk: SdkConfig,
    /// The operations built so far: a few per process (the regions its models name).
    operations: Mutex<Vec<(OperationKey, Arc<ConverseOperation>)>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct OperationKey {
    endpoint: String,
    region: String,
    signed: bool,
}

type ConverseOperation = Operation<Converse, Streaming, Refused>;

/// How a request is authorized.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// The function's role, with SigV4.
    Role,
    /// A Bedrock API key, as a bearer token.
    ApiKey(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Role => "Role",
            Self::ApiKey(_) => "ApiKey(..)",
        })
    }
}

/// One `ConverseStream` request.
#[derive(Debug, Clone)]
pub struct ConverseRequest {
    /// The region whose endpoint serves it (and that SigV4 signs for).
    pub region: String,
    /// A model id, an inference profile id or an ARN.
    pub model_id: String,
    /// The Converse request's JSON.
    pub body: Vec<u8>,
    pub credentials: Credentials,
}

/// Why a `ConverseStream` request has no stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConverseError {
    /// Bedrock answered with an error: the HTTP status, its error code (`ThrottlingException`,
    /// `AccessDeniedException`, …) and message.
    Refused { status: u16, code: String, message: String },
    /// No answer: unreachable, timed out, no credentials. The text is for the run's error.
    Unavailable(String),
    /// Nothing can be sent with this configuration; the text says what to set.
    NotConfigured(String),
}

impl fmt::Display for ConverseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused { status, code, message } => write!(f, "{code} (HTTP {status}): {message}"),
            Self::Unavailable(reason) => write!(f, "Bedrock could not be reached: {reason}"),
            Self::NotConfigured(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for ConverseError {}

/// A Bedrock error answer (not 2xx) as a refusal: its code from `X-Amzn-ErrorType` (or the
/// body's `__type`), its message from the body. For answers read by another client (a model's own
/// `base_url`), the same reading as this client's.
pub fn refusal_of(status: u16, error_type: Option<&str>, body: &[u8]) -> ConverseError {
    let refused = refusal(error_type, body, status);
    ConverseError::Refused { status, code: refused.code, message: refused.message }
}

/// A 2xx answer's body: the event stream, chunk by chunk as it arrives.
pub struct EventStreamBody(ByteStream);

impl EventStreamBody {
    /// A body of `chunks` (tests).
    pub fn from_body(body: SdkBody) -> Self {
        Self(ByteStream::new(body))
    }

    /// The next chunk; `None` at the end of the stream.
    pub async fn next_chunk(&mut self) -> Option<Result<Bytes, String>> {
        Some(self.0.next().await?.map_err(|err| DisplayErrorContext(&err).to_string()))
    }
}

impl BedrockRuntime {
    /// A client with `sdk`'s HTTP client, credentials and endpoints. Nothing is built or sent
    /// until [`converse_stream`](Self::converse_stream).
    pub fn new(sdk: &SdkConfig) -> Self {
        Self(Arc::new(Runtime { sdk: sdk.clone(), operations: Mutex::default() }))
    }

    /// The function's own region, the default of a model that names none.
    pub fn default_region(&self) -> Option<&str> {
        self.0.sdk.region().map(|region| region.as_ref())
    }

    /// Where requests for `region` go (see the module): the operator's endpoint, else AWS's own.
    pub fn endpoint(&self, region: &str) -> Result<String, ConverseError> {
        // The SDK's provider chains answer a service's endpoint with the general one when its
        // own is not set: that one is the local stack's, never Bedrock's.
        let general = self.0.sdk.endpoint_url().map(|url| url.trim_end_matches('/'));
        if let Some(url) = crate::configured_service_endpoint(&self.0.sdk, SERVICE_ID) {
            let url = url.trim_end_matches('/');
            if Some(url) != general {
                return Ok(url.to_owned());
            }
        }
        if general.is_some() {
            return Err(ConverseError::NotConfigured(format!(
                "{ENDPOINT_VARIABLE} is not set: AWS_ENDPOINT_URL points at a local stack, which does not serve \
                 Bedrock (set {ENDPOINT_VARIABLE} to a Bedrock Runtime endpoint or a stand-in)"
            )));
        }
        let partition = crate::partitions::partition_of(region)
            .ok_or_else(|| ConverseError::NotConfigured(format!("{region:?} is not a region of any AWS partition")))?;
        Ok(format!("https://bedrock-runtime.{region}.{}", partition.dns_suffix))
    }

    /// Sends `request` and returns its event stream once Bedrock answers 2xx.
    pub async fn converse_stream(&self, request: ConverseRequest) -> Result<EventStreamBody, ConverseError> {
        let key = OperationKey {
            endpoint: self.endpoint(&request.region)?,
            region: request.region.clone(),
            signed: request.credentials == Credentials::Role,
        };
        let operation = self.operation(key)?;
        let bearer = match request.credentials {
            Credentials::Role => None,
            Credentials::ApiKey(key) => Some(key),
        };
        let input = Converse { model_id: request.model_id, body: request.body, bearer };
        match operation.invoke(input).await {
            Ok(streaming) => Ok(EventStreamBody(ByteStream::new(streaming.0))),
            Err(SdkError::ServiceError(refusal)) => {
                let Refused { status, code, message } = refusal.into_err();
                Err(ConverseError::Refused { status, code, message })
            }
            Err(other) => Err(ConverseError::Unavailable(DisplayErrorContext(&other).to_string())),
        }
    }

    /// The operation of `key`, built at its first use.
    fn operation(&self, key: OperationKey) -> Result<Arc<ConverseOperation>, ConverseError> {
        let mut operations = self.0.operations.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, operation)) = operations.iter().find(|(known, _)| *known == key) {
            return Ok(Arc::clone(operation));
        }
        let sdk = &self.0.sdk;
        let http_client = sdk
            .http_client()
            .ok_or_else(|| ConverseError::NotConfigured("no HTTP client is configured for AWS calls".into()))?;
        let mut builder = Operation::builder()
            .service_name(SERVICE_ID)
            .operation_name("ConverseStream")
            .endpoint_url(&key.endpoint)
            .no_retry()
            // The caller bounds the stream's silences and length; the SDK's throughput check
            // would end a model that thinks quietly for a while.
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            .interceptor(RecursionDetectionInterceptor::new());
        builder = if key.signed {
            builder.runtime_plugin(SigV4::new(sdk, "bedrock", Some(key.region.clone())))
        } else {
            builder.no_auth()
        };
        builder = with_sdk_runtime(builder, sdk, http_client);
        let operation = Arc::new(builder.serializer(serialize).deserializer_impl(Deserialize).build());
        operations.push((key, Arc::clone(&operation)));
        Ok(operation)
    }
}

impl fmt::Debug for BedrockRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let built = self.0.operations.lock().map_or(0, |operations| operations.len());
        f.debug_struct("BedrockRuntime").field("operations", &built).finish()
    }
}

/// The operation's input.
struct Converse {
    model_id: String,
    body: Vec<u8>,
    bearer: Option<String>,
}

impl fmt::Debug for Converse {
    /// Bodies carry tenants' conversations, and the key is a secret: neither goes to logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Converse").field("model_id", &self.model_id).finish_non_exhaustive()
    }
}

/// The operation's output: the answer's body, unread.
#[derive(Debug)]
struct Streaming(SdkBody);

/// Bedrock's refusal, the operation's modeled error.
#[derive(Debug)]
struct Refused {
    status: u16,
    code: String,
    message: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Refused {}

fn serialize(input: Converse) -> Result<HttpRequest, BoxError> {
    let path = format!("/model/{}/converse-stream", encode_label(&input.model_id));
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/vnd.amazon.eventstream")
        .header(http::header::CONTENT_LENGTH, input.body.len());
    if let Some(key) = &input.bearer {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {key}"));
    }
    Ok(HttpRequest::try_from(request.body(SdkBody::from(input.body))?)?)
}

/// Takes a 2xx answer's body as it is (a stream); reads any other as Bedrock's error.
#[derive(Debug)]
struct Deserialize;

impl DeserializeResponse for Deserialize {
    fn deserialize_streaming_with_config(
        &self,
        response: &mut HttpResponse,
        _: &ConfigBag,
    ) -> Option<Result<Output, OrchestratorError<Error>>> {
        if !response.status().is_success() {
            return None;
        }
        let body = std::mem::replace(response.body_mut(), SdkBody::taken());
        Some(Ok(Output::erase(Streaming(body))))
    }

    fn deserialize_nonstreaming_with_config(
        &self,
        response: &HttpResponse,
        _: &ConfigBag,
    ) -> Result<Output, OrchestratorError<Error>> {
        let status = response.status().as_u16();
        let body = response.body().bytes().unwrap_or_default();
        let refused = refusal(response.headers().get("x-amzn-errortype"), body, status);
        Err(OrchestratorError::operation(Error::erase(Refused {
            status,
            code: refused.code,
            message: refused.message,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Lookup;

    fn config(vars: &'static [(&'static str, &'static str)]) -> SdkConfig {
        let lookup: Lookup = &|name| vars.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_string());
        crate::function_config(lookup)
    }

    #[test]
    fn requests_go_to_the_operators_endpoint_or_aws_own_never_the_local_stacks() {
        let aws = BedrockRuntime::new(&config(&[("AWS_REGION", "eu-west-1")]));
        assert_eq!(aws.endpoint("us-east-1").unwrap(), "https://bedrock-runtime.us-east-1.amazonaws.com");
        assert_eq!(aws.endpoint("cn-north-1").unwrap(), "https://bedrock-runtime.cn-north-1.amazonaws.com.cn");
        assert_eq!(aws.default_region(), Some("eu-west-1"));
        assert!(matches!(aws.endpoint("mars-1"), Err(ConverseError::NotConfigured(_))));

        let operator = BedrockRuntime::new(&config(&[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000"),
            ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "http://127.0.0.1:9100/"),
        ]));
        assert_eq!(operator.endpoint("us-east-1").unwrap(), "http://127.0.0.1:9100");

        let local_stack = BedrockRuntime::new(&config(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")]));
        let err = local_stack.endpoint("us-east-1").unwrap_err();
        assert!(err.to_string().starts_with("AWS_ENDPOINT_URL_BEDROCK_RUNTIME is not set"), "{err}");
    }

    #[test]
    fn a_request_names_its_model_as_a_path_label_and_carries_a_key_as_a_bearer_token() {
        let arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-v1:0";
        let input = Converse { model_id: arn.into(), body: b"{}".to_vec(), bearer: Some("bedrock-key".into()) };
        assert!(!format!("{input:?}").contains("bedrock-key"));
        let request = serialize(input).unwrap();
        assert_eq!(
            request.uri(),
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-v1%3A0/converse-stream"
        );
        assert_eq!(request.headers().get("authorization"), Some("Bearer bedrock-key"));
        let signed = serialize(Converse { model_id: "m".into(), body: Vec::new(), bearer: None }).unwrap();
        assert_eq!(signed.headers().get("authorization"), None);
        assert!(!format!("{:?}", Credentials::ApiKey("bedrock-key".into())).contains("bedrock-key"));
    }
}
