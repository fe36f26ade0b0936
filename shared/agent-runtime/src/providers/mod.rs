//! Language model providers behind one trait: a turn takes the conversation and the tools on
//! offer, streams text deltas as they arrive, and ends with the whole turn (text, complete tool
//! calls, usage). One file per wire format.

pub mod anthropic;
pub mod bedrock;
pub mod chat_completions;

use crate::events::Usage;
use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use std::time::Duration;

/// A message of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// The user's message, with the files sent along with it as images and documents (models
    /// that read them get them; see [`Attachment`]).
    User { text: String, attachments: Vec<Attachment> },
    /// The model's own turn, with the tool calls it made.
    Assistant { text: String, tool_calls: Vec<ToolCall> },
    /// The result of one tool call, as text the model reads.
    Tool { call_id: String, name: String, content: String },
}

impl Message {
    /// A user message of text only.
    pub fn user(text: impl Into<String>) -> Self {
        Self::User { text: text.into(), attachments: Vec::new() }
    }
}

/// A file sent with a user message that the model reads itself: an image (PNG, JPEG, GIF,
/// WebP) or a document (PDF, Word, Excel), its type read from its bytes (and, for the Office
/// formats that share a container, its name's extension), never taken from the client.
#[derive(Clone, PartialEq, Eq)]
pub struct Attachment {
    pub media_type: &'static str,
    /// The file's name as sent (documents are named to the model).
    pub name: String,
    pub data: Vec<u8>,
}

/// The document types, by media type: Bedrock's `document` block `format` of each, and whether
/// it is a PDF (the one document type the other providers read).
const DOCUMENT_TYPES: [(&str, &str); 5] = [
    ("application/pdf", "pdf"),
    ("application/vnd.openxmlformats-officedocument.wordprocessingml.document", "docx"),
    ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "xlsx"),
    ("application/msword", "doc"),
    ("application/vnd.ms-excel", "xls"),
];

impl Attachment {
    /// The attachment `data` is, named `name`: an image by its signature, a PDF by its
    /// signature, a Word or Excel file by its container's signature (ZIP for `.docx`/`.xlsx`,
    /// OLE2 for `.doc`/`.xls`) and its name's extension; `None` for anything else.
    pub fn sniff(name: &str, data: Vec<u8>) -> Option<Self> {
        let extension = name.rsplit_once('.').map(|(_, extension)| extension.to_ascii_lowercase()).unwrap_or_default();
        let zip = data.starts_with(b"PK\x03\x04");
        let ole = data.starts_with(&[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1]);
        let media_type = if data.starts_with(b"\x89PNG\r\n\x1a\n") {
            "image/png"
        } else if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
            "image/jpeg"
        } else if data.starts_with(b"GIF87a") || data.starts_with(b"GIF89a") {
            "image/gif"
        } else if data.len() >= 12 && data.starts_with(b"RIFF") && &data[8..12] == b"WEBP" {
            "image/webp"
        } else if data.starts_with(b"%PDF-") {
            DOCUMENT_TYPES[0].0
        } else if zip && extension == "docx" {
            DOCUMENT_TYPES[1].0
        } else if zip && extension == "xlsx" {
            DOCUMENT_TYPES[2].0
        } else if ole && extension == "doc" {
            DOCUMENT_TYPES[3].0
        } else if ole && extension == "xls" {
            DOCUMENT_TYPES[4].0
        } else {
            return None;
        };
        Some(Self { media_type, name: name.to_owned(), data })
    }

    /// An image (else a document).
    pub fn is_image(&self) -> bool {
        self.media_type.starts_with("image/")
    }

    /// A PDF document.
    pub fn is_pdf(&self) -> bool {
        self.media_type == "application/pdf"
    }

    /// A document's format as Bedrock names it (`pdf`, `docx`, …); `None` for an image.
    pub fn document_format(&self) -> Option<&'static str> {
        DOCUMENT_TYPES.iter().find(|(media_type, _)| *media_type == self.media_type).map(|(_, format)| *format)
    }

    /// The attachment's bytes in base64, as every wire format carries them.
    pub fn base64(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&self.data)
    }
}

impl std::fmt::Debug for Attachment {
    // A file's bytes are not worth a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment")
            .field("media_type", &self.media_type)
            .field("name", &self.name)
            .field("bytes", &self.data.len())
            .finish()
    }
}

/// Refuses a turn whose messages carry documents other than PDFs: the Chat Completions and
/// Messages APIs read images and PDFs only (Bedrock reads Word and Excel files too).
fn pdf_documents_only(request: &TurnRequest, provider: &str) -> Result<(), ProviderError> {
    let unread = request.messages.iter().find_map(|message| match message {
        Message::User { attachments, .. } => attachments.iter().find(|file| !file.is_image() && !file.is_pdf()),
        _ => None,
    });
    match unread {
        Some(file) => Err(ProviderError::Configuration(format!(
            "{provider} models read images and PDF documents, not {} ({}): send it to a bedrock model, or as PDF",
            file.name,
            file.document_format().unwrap_or("this format")
        ))),
        None => Ok(()),
    }
}

/// A tool the model may call: a name, what it does, and the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// A complete tool call of the model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Map<String, Value>,
}

/// What one turn asks the model.
#[derive(Debug, Clone, Default)]
pub struct TurnRequest {
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    /// When the run must end: the turn's stream may last until then. Without one (a turn
    /// outside a run) it may last [`MAX_TURN_WITHOUT_RUN`].
    pub deadline: Option<tokio::time::Instant>,
}

/// The longest a turn outside a run may stream: the longest run one process executes.
pub const MAX_TURN_WITHOUT_RUN: Duration = crate::timeouts::MAX_RUN_TIMEOUT;

/// How long a model's stream may be silent: before its first byte, and between two chunks. The
/// model's `stream_timeouts`, else outbound's stream defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SilenceLimits {
    pub first_byte: Duration,
    pub idle: Duration,
}

impl Default for SilenceLimits {
    fn default() -> Self {
        Self { first_byte: outbound::STREAM_FIRST_BYTE_TIMEOUT, idle: outbound::STREAM_IDLE_TIMEOUT }
    }
}

impl SilenceLimits {
    /// A stored model's limits, the defaults where it sets none.
    pub fn of(timeouts: &platform_data::language_models::StreamTimeouts) -> Self {
        let default = Self::default();
        Self {
            first_byte: timeouts.first_byte_seconds.map_or(default.first_byte, Duration::from_secs),
            idle: timeouts.idle_seconds.map_or(default.idle, Duration::from_secs),
        }
    }

    /// The limits of a turn's request sent now, the whole stream bounded by `deadline`.
    pub fn for_turn(self, deadline: Option<tokio::time::Instant>) -> outbound::StreamLimits {
        let total = match deadline {
            Some(deadline) => deadline.saturating_duration_since(tokio::time::Instant::now()),
            None => MAX_TURN_WITHOUT_RUN,
        };
        outbound::StreamLimits { total, first_byte: self.first_byte, idle: self.idle }
    }
}

/// What the model answered in one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
}

/// Why a turn failed. Every variant ends the run `failed` with `provider_error`, with its text
/// as the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("the provider refused the API key (HTTP {0})")]
    Unauthorized(u16),
    #[error("the provider is rate limiting requests (HTTP 429) and still was after {attempts} attempts")]
    RateLimited { attempts: u32, retry_after: Option<Duration> },
    #[error("the provider failed (HTTP {status}): {message}")]
    Status { status: u16, message: String },
    #[error("could not reach the provider: {0}")]
    Unreachable(String),
    /// One of the stream's limits passed (which one, and how long, is in the text).
    #[error("the provider's stream stopped: {0}")]
    TimedOut(String),
    #[error("the provider's stream could not be read: {0}")]
    Malformed(String),
    #[error("the language model cannot be used: {0}")]
    Configuration(String),
}

impl ProviderError {
    /// A short, low-cardinality name of the failure (a span's `error.type`): the HTTP status
    /// when the provider answered one.
    pub fn kind(&self) -> String {
        match self {
            Self::Unauthorized(status) | Self::Status { status, .. } => status.to_string(),
            Self::RateLimited { .. } => "429".to_owned(),
            Self::Unreachable(_) => "unreachable".to_owned(),
            Self::TimedOut(_) => "timeout".to_owned(),
            Self::Malformed(_) => "malformed_response".to_owned(),
            Self::Configuration(_) => "configuration".to_owned(),
        }
    }
}

/// Receives text deltas as the model streams them.
pub type DeltaSink<'a> = &'a mut (dyn FnMut(&str) + Send);

/// A language model provider.
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// One model turn. Text deltas go to `on_delta` in order as they arrive.
    fn turn<'a>(
        &'a self,
        request: &'a TurnRequest,
        on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<Turn, ProviderError>>;
}

/// How often a rate-limited turn is tried, and the longest wait `Retry-After` may ask for.
pub const MAX_ATTEMPTS: u32 = 3;
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(20);

/// Largest single SSE event accepted from a provider.
const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Sends a turn's request (built anew for each attempt), retrying the rate-limit statuses
/// `retried` after `Retry-After` up to `MAX_ATTEMPTS` calls. A 2xx answer is returned; 401/403
/// are `Unauthorized`; any other status is `Status` with the error body's message.
pub(crate) async fn send_with_retries(
    build: impl Fn() -> outbound::RequestBuilder,
    retried: &[u16],
) -> Result<outbound::Response, ProviderError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let response = build().send().await.map_err(|err| request_failure(&err))?;
        let status = response.status().as_u16();
        match status {
            200..=299 => return Ok(response),
            401 | 403 => return Err(ProviderError::Unauthorized(status)),
            _ if retried.contains(&status) => {
                let wait = retry_after(response.headers());
                if attempt >= MAX_ATTEMPTS {
                    return Err(ProviderError::RateLimited { attempts: attempt, retry_after: wait });
                }
                tokio::time::sleep(wait.unwrap_or(Duration::from_secs(1))).await;
            }
            _ => return Err(ProviderError::Status { status, message: error_message(response).await }),
        }
    }
}

/// Why a request to the provider failed: a limit that passed, or the provider out of reach.
pub(crate) fn request_failure(err: &outbound::Error) -> ProviderError {
    if err.is_timeout() {
        ProviderError::TimedOut(outbound::describe(err))
    } else {
        ProviderError::Unreachable(outbound::describe(err))
    }
}

/// The error body's message (`{"error": {"message"}}`, else its text), cut short; at most 4 KiB
/// read.
async fn error_message(response: outbound::Response) -> String {
    let body = outbound::read_limited(response, 4096).await.unwrap_or_default();
    let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    let message = value
        .pointer("/error/message")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    message.chars().take(300).collect()
}

/// Reads a streamed answer event by event until `on_event` says it is complete (`Ok(true)`);
/// `Ok(false)` when the stream ended first.
pub(crate) async fn read_events(
    mut response: outbound::Response,
    mut on_event: impl FnMut(outbound::sse::SseEvent) -> Result<bool, ProviderError>,
) -> Result<bool, ProviderError> {
    let mut decoder = outbound::sse::SseDecoder::new(MAX_EVENT_BYTES);
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ok(false),
            Err(err) => return Err(request_failure(&err)),
        };
        for event in decoder.feed(&chunk).map_err(|err| ProviderError::Malformed(err.to_string()))? {
            if on_event(event)? {
                return Ok(true);
            }
        }
    }
}

/// A tool call's arguments as the model streamed them (a JSON text): an object, or `None` when
/// it is anything else; no text at all is no arguments.
pub(crate) fn tool_arguments(text: &str) -> Option<Map<String, Value>> {
    if text.trim().is_empty() {
        return Some(Map::new());
    }
    match serde_json::from_str(text) {
        Ok(Value::Object(arguments)) => Some(arguments),
        _ => None,
    }
}

/// `Retry-After` as seconds (HTTP dates are rare from model APIs and count as absent).
pub fn retry_after(headers: &outbound::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(outbound::header::RETRY_AFTER)?.to_str().ok()?;
    let seconds: f64 = value.trim().parse().ok()?;
    if seconds == 0.0 {
        return Some(Duration::ZERO);
    }
    crate::timeouts::positive_seconds(seconds, MAX_RETRY_AFTER)
}

/// Azure OpenAI's `api-version` when the model's `default_parameters` name none.
pub const AZURE_API_VERSION: &str = "2024-10-21";

/// Where providers call out: the tenant's guarded client for every URL a tenant names, and
/// Bedrock Runtime (AWS's endpoint or the operator's) for Bedrock models without a `base_url`.
#[derive(Debug, Clone)]
pub struct ProviderClients {
    pub tenant: outbound::TenantClient,
    pub bedrock: aws_env::bedrock::BedrockRuntime,
}

/// The provider of a stored language model, with `api_key` (read by the caller, bound to the
/// model's origin). Azure's `base_url` is the deployment URL
/// (`https://{resource}.openai.azure.com/openai/deployments/{deployment}`); `api_version` in
/// `default_parameters` chooses its API version. A Bedrock model runs in its `region`, else its
/// ARN's, else the function's (docs/bedrock.md).
pub fn for_model(
    model: &platform_data::language_models::LanguageModelSpec,
    api_key: Option<String>,
    clients: &ProviderClients,
) -> Result<Box<dyn Provider>, ProviderError> {
    use platform_data::language_models::Provider as Kind;
    let client = clients.tenant.clone();
    let base = model
        .base_url
        .as_deref()
        .or(model.provider.default_base_url())
        .map(|base| base.trim_end_matches('/').to_owned());
    let mut parameters = model.default_parameters.clone();
    let silence = SilenceLimits::of(&model.stream_timeouts);
    let chat = |url: String, key_header, parameters| -> Box<dyn Provider> {
        Box::new(chat_completions::ChatCompletions {
            client: client.clone(),
            url,
            api_key: api_key.clone(),
            key_header,
            model: model.model_name.clone(),
            parameters,
            silence,
        })
    };
    match (model.provider, base) {
        (Kind::Openai | Kind::OpenaiCompatible, Some(base)) => {
            Ok(chat(format!("{base}/chat/completions"), chat_completions::KeyHeader::Bearer, parameters))
        }
        (Kind::AzureOpenai, Some(base)) => {
            let version = match parameters.remove("api_version") {
                Some(serde_json::Value::String(version)) => version,
                _ => AZURE_API_VERSION.to_owned(),
            };
            let url = format!("{base}/chat/completions?api-version={version}");
            Ok(chat(url, chat_completions::KeyHeader::AzureApiKey, parameters))
        }
        (Kind::Anthropic, Some(base)) => Ok(Box::new(anthropic::Anthropic {
            client,
            url: format!("{base}/v1/messages"),
            api_key,
            model: model.model_name.clone(),
            parameters,
            silence,
        })),
        (Kind::Bedrock, base) => {
            let region = bedrock_region(model, &clients.bedrock)?;
            let route = match (base, api_key) {
                (Some(base_url), Some(api_key)) => bedrock::Route::BaseUrl { client, base_url, api_key },
                (Some(_), None) => {
                    return Err(ProviderError::Configuration(
                        "a bedrock model with a base_url is called with its API key only, and it has none (requests \
                         signed with the function's role go to AWS's endpoint alone)"
                            .into(),
                    ));
                }
                (None, Some(api_key)) => bedrock::Route::Aws {
                    runtime: clients.bedrock.clone(),
                    credentials: aws_env::bedrock::Credentials::ApiKey(api_key),
                },
                (None, None) => {
                    same_partition(&region, clients.bedrock.default_region())?;
                    bedrock::Route::Aws {
                        runtime: clients.bedrock.clone(),
                        credentials: aws_env::bedrock::Credentials::Role,
                    }
                }
            };
            // Where the requests would go is known now: a run (and a health check) says at once
            // when nothing can be sent (under `make dev` without the Bedrock endpoint variable).
            if matches!(route, bedrock::Route::Aws { .. }) {
                clients.bedrock.endpoint(&region).map_err(|err| ProviderError::Configuration(err.to_string()))?;
            }
            Ok(Box::new(bedrock::Bedrock { model: model.model_name.clone(), region, route, parameters, silence }))
        }
        (_, None) => Err(ProviderError::Configuration(format!("a {} model needs a base_url", model.provider.as_str()))),
    }
}

/// A Bedrock model's region: its own, else its ARN's, else the function's.
fn bedrock_region(
    model: &platform_data::language_models::LanguageModelSpec,
    runtime: &aws_env::bedrock::BedrockRuntime,
) -> Result<String, ProviderError> {
    let arn_region = platform_data::language_models::bedrock_arn_region(&model.model_name).ok().flatten();
    model
        .region
        .as_deref()
        .or(arn_region)
        .or(runtime.default_region())
        .map(str::to_owned)
        .ok_or_else(|| ProviderError::Configuration("the model names no region, and AWS_REGION is not set".into()))
}

/// The function's role signs for its own partition only (another partition's regions have
/// their own accounts).
fn same_partition(region: &str, own_region: Option<&str>) -> Result<(), ProviderError> {
    use aws_env::partitions::partition_of;
    match (partition_of(region), own_region.and_then(partition_of)) {
        (Some(model), Some(own)) if model.id != own.id => Err(ProviderError::Configuration(format!(
            "region {region} is in partition {}, and the function's role is in {}: use a Bedrock API key",
            model.id, own.id
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use platform_data::language_models::parse_language_model;

    fn provider_of(body: serde_json::Value) -> Result<String, ProviderError> {
        let model = parse_language_model(body.to_string().as_bytes()).unwrap().spec;
        let clients = ProviderClients {
            tenant: outbound::TenantClient::new(outbound::AddressPolicy::default()),
            bedrock: aws_env::bedrock::BedrockRuntime::new(
                &aws_env::SdkConfig::builder().region(aws_env::Region::new("eu-west-1")).build(),
            ),
        };
        for_model(&model, Some("sk".into()), &clients).map(|provider| format!("{provider:?}"))
    }

    #[test]
    fn stored_models_name_their_endpoint() {
        let openai = provider_of(serde_json::json!({"name": "a", "provider": "openai", "model_name": "gpt"})).unwrap();
        assert!(openai.contains("url: \"https://api.openai.com/v1/chat/completions\""), "{openai}");
        let compatible =
            provider_of(serde_json::json!({"name": "a", "provider": "openai_compatible", "model_name": "m",
            "base_url": "http://10.0.0.5:8000/v1/"}))
            .unwrap();
        assert!(compatible.contains("\"http://10.0.0.5:8000/v1/chat/completions\""), "{compatible}");
        let azure = provider_of(serde_json::json!({"name": "a", "provider": "azure_openai", "model_name": "m",
            "base_url": "https://r.openai.azure.com/openai/deployments/d", "default_parameters": {"api_version": "2025-01-01"}}))
        .unwrap();
        assert!(azure.contains("deployments/d/chat/completions?api-version=2025-01-01"), "{azure}");
        let anthropic =
            provider_of(serde_json::json!({"name": "a", "provider": "anthropic", "model_name": "c"})).unwrap();
        assert!(anthropic.contains("https://api.anthropic.com/v1/messages"), "{anthropic}");
        let bedrock = provider_of(serde_json::json!({"name": "a", "provider": "bedrock", "model_name": "b"}));
        let patient = provider_of(serde_json::json!({"name": "a", "provider": "anthropic", "model_name": "c",
            "stream_timeouts": {"idle_seconds": 300}}))
        .unwrap();
        assert!(patient.contains("SilenceLimits { first_byte: 120s, idle: 300s }"), "{patient}");
        let bedrock = bedrock.unwrap();
        assert!(
            bedrock.contains("model: \"b\", region: \"eu-west-1\", route: Aws { credentials: ApiKey(..) }"),
            "{bedrock}"
        );
        assert!(!bedrock.contains("sk"), "{bedrock}");
        let profile = provider_of(serde_json::json!({"name": "a", "provider": "bedrock",
            "model_name": "arn:aws:bedrock:us-east-2:123456789012:inference-profile/us.m-v1:0"}))
        .unwrap();
        assert!(profile.contains("region: \"us-east-2\""), "the ARN's region: {profile}");
        let own = provider_of(
            serde_json::json!({"name": "a", "provider": "bedrock", "model_name": "m", "region": "ap-south-1"}),
        )
        .unwrap();
        assert!(own.contains("region: \"ap-south-1\""), "{own}");
        let tenant = provider_of(serde_json::json!({"name": "a", "provider": "bedrock", "model_name": "m",
            "base_url": "https://bedrock.example.com"}))
        .unwrap();
        assert!(tenant.contains("route: BaseUrl { base_url: \"https://bedrock.example.com\" }"), "{tenant}");
        // Under a local stack without Bedrock's own endpoint, the model cannot be used (a run
        // and a health check say so before any request).
        let model = parse_language_model(br#"{"name": "a", "provider": "bedrock", "model_name": "m"}"#).unwrap().spec;
        let local_stack = ProviderClients {
            tenant: outbound::TenantClient::new(outbound::AddressPolicy::default()),
            bedrock: aws_env::bedrock::BedrockRuntime::new(
                &aws_env::SdkConfig::builder()
                    .region(aws_env::Region::new("eu-west-1"))
                    .endpoint_url("http://127.0.0.1:5000")
                    .build(),
            ),
        };
        let err = for_model(&model, None, &local_stack).unwrap_err();
        assert!(err.to_string().contains("AWS_ENDPOINT_URL_BEDROCK_RUNTIME is not set"), "{err}");
        // The role signs for its own partition only.
        let china =
            parse_language_model(br#"{"name": "a", "provider": "bedrock", "model_name": "m", "region": "cn-north-1"}"#)
                .unwrap()
                .spec;
        let err = for_model(&china, None, &local_stack).unwrap_err();
        assert!(err.to_string().contains("region cn-north-1 is in partition aws-cn"), "{err}");
    }

    #[tokio::test]
    async fn chat_and_messages_models_read_pdfs_and_refuse_other_documents_before_sending() {
        let docx = Attachment::sniff("r.docx", b"PK\x03\x04..".to_vec()).unwrap();
        let request = TurnRequest {
            messages: vec![Message::User { text: "Summarize".into(), attachments: vec![docx] }],
            ..TurnRequest::default()
        };
        for (body, name) in [
            (serde_json::json!({"name": "a", "provider": "openai", "model_name": "gpt"}), "Chat Completions"),
            (serde_json::json!({"name": "a", "provider": "anthropic", "model_name": "c"}), "anthropic"),
        ] {
            let model = parse_language_model(body.to_string().as_bytes()).unwrap().spec;
            let clients = ProviderClients {
                tenant: outbound::TenantClient::new(outbound::AddressPolicy::default()),
                bedrock: aws_env::bedrock::BedrockRuntime::new(&aws_env::SdkConfig::builder().build()),
            };
            let provider = for_model(&model, None, &clients).unwrap();
            let err = provider.turn(&request, &mut |_| {}).await.unwrap_err();
            assert_eq!(
                err,
                ProviderError::Configuration(format!(
                    "{name} models read images and PDF documents, not r.docx (docx): send it to a bedrock model, or as PDF"
                ))
            );
        }
        let pdf = Attachment::sniff("q.pdf", b"%PDF-1.4".to_vec()).unwrap();
        let request = TurnRequest {
            messages: vec![Message::User { text: "Summarize".into(), attachments: vec![pdf] }],
            ..TurnRequest::default()
        };
        assert!(pdf_documents_only(&request, "anthropic").is_ok());
        let chat = chat_completions::ChatCompletions {
            client: outbound::TenantClient::new(outbound::AddressPolicy::default()),
            url: "https://api.openai.com/v1/chat/completions".into(),
            api_key: None,
            key_header: chat_completions::KeyHeader::Bearer,
            model: "gpt".into(),
            parameters: Map::new(),
            silence: SilenceLimits::default(),
        };
        assert_eq!(
            chat.body(&request)["messages"][0]["content"][1],
            serde_json::json!({"type": "file", "file": {"filename": "q.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQ="}})
        );
        let anthropic = anthropic::Anthropic {
            client: outbound::TenantClient::new(outbound::AddressPolicy::default()),
            url: "https://api.anthropic.com/v1/messages".into(),
            api_key: None,
            model: "c".into(),
            parameters: Map::new(),
            silence: SilenceLimits::default(),
        };
        assert_eq!(
            anthropic.body(&request)["messages"][0]["content"][0],
            serde_json::json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="}})
        );
    }
}
