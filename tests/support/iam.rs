//! The AWS calls each function makes across the test suite, for the IAM test
//! (`tests/iam/main.rs`): every function a test builds (`TestStack::service`) sends its requests
//! through an HTTP client that records, for the function's template logical id, the IAM action
//! each request needs and the resource it names. Records are appended to one file per test
//! process under `target/tmp/iam-calls/` (`calls_dir`), which `make test` empties before the
//! suite and reads after it.
//!
//! A DynamoDB transaction is recorded as the actions IAM authorizes it by (a Put as `PutItem`,
//! an Update as `UpdateItem`, a Delete as `DeleteItem`, a ConditionCheck as
//! `ConditionCheckItem`, each on its table), a batch as its operation on each table it names.

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{LazyLock, Mutex};

/// Where each test process writes the calls it saw: `tmp/iam-calls` in cargo's target
/// directory, found from the binary's path (a test's `target/<profile>/deps/<binary>`, or a
/// program's `target/<profile>/<binary>`, such as `make bench`'s); `make test` empties it first.
pub fn calls_dir() -> std::path::PathBuf {
    let executable = std::env::current_exe().unwrap_or_default();
    let in_deps = executable.parent().and_then(|dir| dir.file_name()).is_some_and(|name| name == "deps");
    let target = executable.ancestors().nth(if in_deps { 3 } else { 2 }).map(std::path::Path::to_path_buf);
    target.unwrap_or_default().join("tmp").join("iam-calls")
}

/// One call as IAM sees it: the function making it, the action, and the resource named (a
/// table, `table/index/NAME`, a queue, a secret, a Lambda function; physical names).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Call {
    pub function: String,
    pub action: String,
    pub resource: String,
}

/// The calls this process recorded so far, each written once.
static SEEN: LazyLock<Mutex<BTreeSet<Call>>> = LazyLock::new(Mutex::default);

/// An HTTP client that records the calls of `function` (a template logical id) and sends them
/// through `inner`.
pub fn recording_client(inner: SharedHttpClient, function: &'static str) -> SharedHttpClient {
    SharedHttpClient::new(Recording { inner, function })
}

#[derive(Debug, Clone)]
struct Recording {
    inner: SharedHttpClient,
    function: &'static str,
}

impl HttpClient for Recording {
    fn http_connector(&self, settings: &HttpConnectorSettings, components: &RuntimeComponents) -> SharedHttpConnector {
        let inner = self.inner.http_connector(settings, components);
        SharedHttpConnector::new(RecordingConnector { inner, function: self.function })
    }
}

#[derive(Debug)]
struct RecordingConnector {
    inner: SharedHttpConnector,
    function: &'static str,
}

impl HttpConnector for RecordingConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        for (action, resource) in actions(&request) {
            record(Call { function: self.function.to_owned(), action, resource });
        }
        self.inner.call(request)
    }
}

fn record(call: Call) {
    let mut seen = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if seen.contains(&call) {
        return;
    }
    let line = json!({"function": call.function, "action": call.action, "resource": call.resource});
    let dir = calls_dir();
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        let path = dir.join(format!("{}.jsonl", std::process::id()));
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        writeln!(file, "{line}")
    });
    if written.is_ok() {
        seen.insert(call);
    }
}

/// The (action, resource) pairs IAM checks for a request.
pub fn actions(request: &HttpRequest) -> Vec<(String, String)> {
    let body: Value = request.body().bytes().and_then(|bytes| serde_json::from_slice(bytes).ok()).unwrap_or_default();
    let target = request.headers().get("x-amz-target").unwrap_or_default();
    let text = |key: &str| body.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    if let Some(operation) = target.strip_prefix("DynamoDB_20120810.") {
        return dynamodb_actions(operation, &body);
    }
    if let Some(operation) = target.strip_prefix("AmazonSQS.") {
        let queue = text("QueueUrl").rsplit('/').next().unwrap_or_default().to_owned();
        let queue = if queue.is_empty() { text("QueueName") } else { queue };
        // SendMessageBatch is authorized as SendMessage, DeleteMessageBatch as DeleteMessage.
        let action = operation.trim_end_matches("Batch");
        return vec![(format!("sqs:{action}"), format!("queue/{queue}"))];
    }
    if let Some(operation) = target.strip_prefix("secretsmanager.") {
        let secret = [text("SecretId"), text("Name")].into_iter().find(|id| !id.is_empty()).unwrap_or_default();
        return vec![(format!("secretsmanager:{operation}"), format!("secret/{secret}"))];
    }
    let path = request.uri().split("/2015-03-31/functions/").nth(1).unwrap_or_default();
    if let Some(function) = path.strip_suffix("/invocations") {
        return vec![("lambda:InvokeFunction".to_owned(), format!("function/{function}"))];
    }
    let path = request.uri().split("/model/").nth(1).unwrap_or_default();
    if let Some(model) = path.strip_suffix("/converse-stream") {
        return vec![("bedrock:InvokeModelWithResponseStream".to_owned(), bedrock_resource(&percent_decoded(model)))];
    }
    Vec::new()
}

/// The resource IAM authorizes a Bedrock model by: an ARN's resource part, an inference
/// profile for an id with a geography prefix (`us.`, `global.`), else a foundation model.
fn bedrock_resource(model: &str) -> String {
    if let Some(resource) = model.strip_prefix("arn:").and_then(|arn| arn.splitn(5, ':').nth(4)) {
        return resource.to_owned();
    }
    let geography = model.split('.').next().unwrap_or_default();
    if model.contains('.') && ["us", "eu", "apac", "global", "jp", "au", "ca", "us-gov"].contains(&geography) {
        format!("inference-profile/{model}")
    } else {
        format!("foundation-model/{model}")
    }
}

/// `%XX` escapes decoded (a path label).
fn percent_decoded(label: &str) -> String {
    let bytes = label.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i + 1..i + 3)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[i], escaped) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                i += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

fn dynamodb_actions(operation: &str, body: &Value) -> Vec<(String, String)> {
    let table = |value: &Value| value.get("TableName").and_then(Value::as_str).unwrap_or_default().to_owned();
    match operation {
        "TransactWriteItems" => body["TransactItems"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| {
                let (kind, part) = item.as_object()?.iter().next()?;
                let action = match kind.as_str() {
                    "Put" => "PutItem",
                    "Update" => "UpdateItem",
                    "Delete" => "DeleteItem",
                    _ => "ConditionCheckItem",
                };
                Some((format!("dynamodb:{action}"), format!("table/{}", table(part))))
            })
            .collect(),
        "TransactGetItems" => body["TransactItems"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|item| ("dynamodb:GetItem".to_owned(), format!("table/{}", table(&item["Get"]))))
            .collect(),
        "BatchGetItem" | "BatchWriteItem" => body["RequestItems"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, _)| (format!("dynamodb:{operation}"), format!("table/{name}")))
            .collect(),
        _ => {
            let mut resource = format!("table/{}", table(body));
            if let Some(index) = body.get("IndexName").and_then(Value::as_str) {
                resource.push_str(&format!("/index/{index}"));
            }
            vec![(format!("dynamodb:{operation}"), resource)]
        }
    }
}

/// Every call recorded by every test process since `calls_dir()` was emptied.
pub fn recorded_calls() -> BTreeSet<Call> {
    let mut calls = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(calls_dir()) else { return calls };
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            let Ok(value) = serde_json::from_str::<Value>(line) else { continue };
            let field = |name: &str| value[name].as_str().unwrap_or_default().to_owned();
            calls.insert(Call { function: field("function"), action: field("action"), resource: field("resource") });
        }
    }
    calls
}
